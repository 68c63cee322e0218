//! The store's conditional writes as DynamoDB expressions, built from the rules
//! ([`charge_core::store_rules`]): a write's guards become its ConditionExpression, one clause per
//! [`Guard`] ([`condition`]), and its change becomes the UpdateExpression ([`Update`], the
//! DynamoDB half of [`Transition::change`]). Pure: [`super::DynamoStore`] sends what [`write()`]
//! builds; `tests/store_rules_on_aws.rs` holds every clause to its guard and every update to its
//! change on moto.
//!
//! Every attribute is named through a placeholder (`#status`), so no reserved word can break an
//! expression; names and values are declared only where used (DynamoDB refuses unused ones).
//! Values of the condition are `:if_…`, values of the update `:<attribute>`, so the two never
//! collide.

use std::collections::{BTreeSet, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;

use charge_core::domain::OperationKind;
use charge_core::operation::{AuditEntry, OperationStatus};
use charge_core::store_rules::{self, Guard, Transition};
use charge_core::time::Timestamp;
use charge_core::{
    store::{
        AuthorizationOutcome, ClaimRequest, DisputeMark, DisputeMove, DisputeOnCharge,
        ManualResolution, OutcomeRecord, RefundFailedLater, ReleaseRefund, Reschedule,
        ReserveRefund, SettleAuthorization, TakeAuthorization, TakeFrom,
    },
    store_rules::ChargeClaim,
};

use super::item::{attr_bool, attr_n, attr_s, audit_to_attr, Attrs};
use super::schema::{
    due_shard, settled_day, AMOUNT_CAPTURED, ATTEMPTS, CAPTURE_BEFORE, DUE_AT, DUE_SHARD,
    EXTERNAL_ID, FIRST_ATTEMPTED_AT, HISTORY, LAST_ERROR, LATEST_ATTEMPT, LEASE_EXPIRES_AT,
    LEASE_TOKEN, OPERATION_ID, PK, REDRIVES, REFUND_RESERVED, REVIEW_FLAGGED_AT, REVIEW_REASON,
    REVIEW_SHARD, SETTLED_AT, SETTLED_ON, SK, STATUS, STRIPE_REFUND_ID, TAKEN_BY, UPDATED_AT,
};
use super::schema::{
    CHARGE_REFUNDABLE, DISPUTED_BY, DISPUTE_REFUNDABLE, DISPUTE_RESERVED, DISPUTE_STATUS, DUE_BY,
    HAS_EVIDENCE,
};

/// Every attribute an operator's write (`chargectl resolve`, `chargectl redrive`: a
/// [`ManualResolution`], a [`Reschedule`] with an operator) names, in its condition or its update,
/// with the table's and the index's keys, which DynamoDB wants in any such list. The operator
/// policy's `dynamodb:Attributes` (template.yaml's `OperatorPolicy`) is exactly this list
/// (`tests/template.rs` holds it there, the test below holds it to the writes): a raw
/// `update-item` under that policy can touch these and nothing else — not the amount, currency,
/// customer or payment method, not `attempts`, `first_attempted_at` (the key window) or
/// `requested_by`. IAM cannot require a condition expression, so it can still set these without
/// one (docs/deploy.md says so).
pub const OPERATOR_WRITE_ATTRIBUTES: &[&str] = &[
    PK,
    SK,
    DUE_SHARD,
    DUE_AT,
    OPERATION_ID,
    STATUS,
    UPDATED_AT,
    EXTERNAL_ID,
    LEASE_TOKEN,
    LEASE_EXPIRES_AT,
    REVIEW_REASON,
    REVIEW_FLAGGED_AT,
    REDRIVES,
    HISTORY,
    // A refund's resolution: its Stripe id, and the charge's reservation it gives back.
    STRIPE_REFUND_ID,
    REFUND_RESERVED,
    // A resolution settles: the settle time and day (the settled index's keys).
    SETTLED_AT,
    SETTLED_ON,
    // A capture's or cancel's resolution while Stripe holds the authorization untouched gives
    // it back: the charge's taker removed, in the same transaction.
    TAKEN_BY,
];

/// A condition expression with its placeholders.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Condition {
    pub expression: String,
    pub names: HashMap<String, String>,
    pub values: Attrs,
}

/// One conditional UpdateItem, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub update: String,
    pub condition: String,
    pub names: HashMap<String, String>,
    pub values: Attrs,
    /// The attributes the update sets or removes (what it can cost the index: see
    /// [`super::schema::UNKNOWN_INDEX_PROJECTED`]).
    pub touched: BTreeSet<&'static str>,
}

/// The UpdateExpression of a write: what its [`Transition::change`] does to the record, as
/// DynamoDB does it to the item.
pub trait Update: Transition {
    fn update(&self, e: &mut Expression);
}

/// `write` as DynamoDB expressions, or the guard on the request (not on the record) that refuses
/// it before anything is sent.
pub fn write<W: Update>(write: &W) -> Result<Write, Guard> {
    let mut e = Expression::default();
    e.guards(&write.guards())?;
    write.update(&mut e);
    Ok(e.into_write())
}

/// `guards` as one condition expression (clauses joined by AND), or the guard on the request that
/// refuses it.
pub fn condition(guards: &[Guard]) -> Result<Condition, Guard> {
    let mut e = Expression::default();
    e.guards(guards)?;
    Ok(Condition {
        expression: e.clauses.join(" AND "),
        names: e.names,
        values: e.values,
    })
}

/// An UpdateItem's expressions as they are built.
#[derive(Debug, Default)]
pub struct Expression {
    clauses: Vec<String>,
    set: Vec<String>,
    remove: Vec<String>,
    names: HashMap<String, String>,
    values: Attrs,
    touched: BTreeSet<&'static str>,
}

impl Expression {
    fn name(&mut self, attr: &'static str) -> String {
        let placeholder = format!("#{attr}");
        self.names.insert(placeholder.clone(), attr.to_owned());
        placeholder
    }

    fn value(&mut self, placeholder: &str, value: AttributeValue) -> String {
        self.values.insert(placeholder.to_owned(), value);
        placeholder.to_owned()
    }

    /// The clause of one guard, as [`Guard::holds`] reads it of the record. `Err` for a guard on
    /// the request that does not hold (it has no clause).
    fn guard(&mut self, guard: &Guard) -> Result<(), Guard> {
        let clause = match *guard {
            Guard::IsOperation(id) => {
                let n = self.name(OPERATION_ID);
                let v = self.value(":if_operation_id", attr_s(&id.to_string()));
                format!("{n} = {v}")
            }
            Guard::Unsettled => {
                let n = self.name(STATUS);
                let pending = self.value(":if_pending", attr_s(OperationStatus::Pending.as_str()));
                let unknown = self.value(":if_unknown", attr_s(OperationStatus::Unknown.as_str()));
                let authorized = self.value(
                    ":if_authorized",
                    attr_s(OperationStatus::Authorized.as_str()),
                );
                format!("{n} IN ({pending}, {unknown}, {authorized})")
            }
            Guard::NotInReview => format!("attribute_not_exists({})", self.name(REVIEW_REASON)),
            Guard::NoLeaseAfter(t) => {
                let n = self.name(LEASE_EXPIRES_AT);
                let v = self.value(":if_no_lease_after", attr_n(t.as_millis()));
                format!("(attribute_not_exists({n}) OR {n} <= {v})")
            }
            Guard::HoldsLease(token) => {
                let n = self.name(LEASE_TOKEN);
                let v = self.value(":if_lease_token", attr_s(&token.to_string()));
                format!("{n} = {v}")
            }
            Guard::StatusIs(status) => {
                let n = self.name(STATUS);
                let v = self.value(":if_status", attr_s(status.as_str()));
                format!("{n} = {v}")
            }
            Guard::UpdatedAt(t) => {
                let n = self.name(UPDATED_AT);
                let v = self.value(":if_updated_at", attr_n(t.as_millis()));
                format!("{n} = {v}")
            }
            // The record's due time is the index sort key; its partition key is there with it.
            Guard::Scheduled => format!("attribute_exists({})", self.name(DUE_SHARD)),
            Guard::Settles(status) => {
                return match status.is_settled() {
                    true => Ok(()),
                    false => Err(*guard),
                }
            }
            Guard::IsRefund => {
                let n = self.name(SK);
                let v = self.value(":if_refund", attr_s("refund#"));
                format!("begins_with({n}, {v})")
            }
            // A charge attempt's sort key is exactly `charge` (the first) or `charge#<n>` (a later
            // one); a refund's is `refund#<id>`, a capture's `capture` or `capture#<n>`.
            Guard::IsCharge => {
                let n = self.name(SK);
                let v = self.value(":if_charge", attr_s("charge"));
                let later = self.value(":if_charge_attempt", attr_s("charge#"));
                format!("({n} = {v} OR begins_with({n}, {later}))")
            }
            // The head names its latest attempt from 2 on; absent, it is the only one.
            Guard::LatestAttemptIs(latest) => {
                let n = self.name(LATEST_ATTEMPT);
                if latest <= 1 {
                    format!("attribute_not_exists({n})")
                } else {
                    let v = self.value(":if_latest_attempt", attr_n(i64::from(latest)));
                    format!("{n} = {v}")
                }
            }
            Guard::NotTaken => format!("attribute_not_exists({})", self.name(TAKEN_BY)),
            // `taken_by` is `capture:<uuid>` or `cancel:<uuid>`.
            Guard::NotCanceled => {
                let n = self.name(TAKEN_BY);
                let v = self.value(":if_not_canceled", attr_s("cancel:"));
                format!("(attribute_not_exists({n}) OR NOT begins_with({n}, {v}))")
            }
            Guard::TakenBy(id) => {
                let n = self.name(TAKEN_BY);
                let capture = self.value(":if_taken_by_capture", attr_s(&format!("capture:{id}")));
                let cancel = self.value(":if_taken_by_cancel", attr_s(&format!("cancel:{id}")));
                format!("{n} IN ({capture}, {cancel})")
            }
            Guard::NeverAttempted => {
                format!("attribute_not_exists({})", self.name(FIRST_ATTEMPTED_AT))
            }
            Guard::AuthorizedOr(status) => {
                let n = self.name(STATUS);
                let a = self.value(
                    ":if_authorized_or_a",
                    attr_s(OperationStatus::Authorized.as_str()),
                );
                let b = self.value(":if_authorized_or_b", attr_s(status.as_str()));
                format!("{n} IN ({a}, {b})")
            }
            // An absent count is 0 (records written before refunds).
            Guard::ReservedAtMost(max) => {
                let n = self.name(REFUND_RESERVED);
                let v = self.value(":if_reserved_at_most", attr_n(max));
                if max >= 0 {
                    format!("(attribute_not_exists({n}) OR {n} <= {v})")
                } else {
                    format!("{n} <= {v}")
                }
            }
            Guard::ReservedAtLeast(min) => {
                let n = self.name(REFUND_RESERVED);
                let v = self.value(":if_reserved_at_least", attr_n(min));
                if min <= 0 {
                    format!("(attribute_not_exists({n}) OR {n} >= {v})")
                } else {
                    format!("{n} >= {v}")
                }
            }
        };
        self.clauses.push(clause);
        Ok(())
    }

    fn guards(&mut self, guards: &[Guard]) -> Result<(), Guard> {
        guards.iter().try_for_each(|g| self.guard(g))
    }

    /// `SET attr = :attr`.
    fn set(&mut self, attr: &'static str, value: AttributeValue) {
        let v = self.value(&format!(":{attr}"), value);
        self.set_to(attr, |_, _| v);
    }

    /// `SET attr = <expression of its placeholder>`.
    fn set_to(&mut self, attr: &'static str, rhs: impl FnOnce(&mut Self, &str) -> String) {
        let n = self.name(attr);
        let rhs = rhs(self, &n);
        self.set.push(format!("{n} = {rhs}"));
        self.touched.insert(attr);
    }

    /// `SET attr = attr + :attr`.
    fn add_one(&mut self, attr: &'static str) {
        let v = self.value(&format!(":{attr}"), attr_n(1));
        self.set_to(attr, |_, n| format!("{n} + {v}"));
    }

    /// `SET history = history ++ [entry]` (an absent history is empty).
    fn append_history(&mut self, entry: &AuditEntry) {
        let none = self.value(":no_history", AttributeValue::L(Vec::new()));
        let entry = self.value(
            &format!(":{HISTORY}"),
            AttributeValue::L(vec![audit_to_attr(entry)]),
        );
        self.set_to(HISTORY, |_, n| {
            format!("list_append(if_not_exists({n}, {none}), {entry})")
        });
    }

    /// The settle time and its day (the settled index's keys), unless the record has them: the
    /// first settle is the one kept ([`store_rules::stamp_settled`]). Every write that settles
    /// calls it; `now` is the `updated_at` it sets.
    fn settle_at(&mut self, now: Timestamp) {
        let at = self.value(&format!(":{SETTLED_AT}"), attr_n(now.as_millis()));
        self.set_to(SETTLED_AT, |_, n| format!("if_not_exists({n}, {at})"));
        let day = self.value(&format!(":{SETTLED_ON}"), attr_s(&settled_day(now)));
        self.set_to(SETTLED_ON, |_, n| format!("if_not_exists({n}, {day})"));
    }

    fn remove(&mut self, attr: &'static str) {
        let n = self.name(attr);
        self.remove.push(n);
        self.touched.insert(attr);
    }

    fn into_write(self) -> Write {
        let mut update = Vec::new();
        if !self.set.is_empty() {
            update.push(format!("SET {}", self.set.join(", ")));
        }
        if !self.remove.is_empty() {
            update.push(format!("REMOVE {}", self.remove.join(", ")));
        }
        Write {
            update: update.join(" "),
            condition: self.clauses.join(" AND "),
            names: self.names,
            values: self.values,
            touched: self.touched,
        }
    }
}

impl Update for ClaimRequest {
    fn update(&self, e: &mut Expression) {
        e.set(LEASE_TOKEN, attr_s(&self.lease.token.to_string()));
        e.set(LEASE_EXPIRES_AT, attr_n(self.lease.expires_at.as_millis()));
        let now = e.value(
            &format!(":{FIRST_ATTEMPTED_AT}"),
            attr_n(self.now.as_millis()),
        );
        e.set_to(FIRST_ATTEMPTED_AT, |_, n| {
            format!("if_not_exists({n}, {now})")
        });
        e.add_one(ATTEMPTS);
        e.set(UPDATED_AT, attr_n(self.now.as_millis()));
    }
}

impl Update for ReserveRefund {
    fn update(&self, e: &mut Expression) {
        let none = e.value(":no_refund_reserved", attr_n(0));
        let amount = e.value(
            &format!(":{REFUND_RESERVED}"),
            attr_n(self.amount.minor_units()),
        );
        e.set_to(REFUND_RESERVED, |_, n| {
            format!("if_not_exists({n}, {none}) + {amount}")
        });
        e.set(UPDATED_AT, attr_n(self.now.as_millis()));
    }
}

impl Update for ReleaseRefund {
    fn update(&self, e: &mut Expression) {
        let amount = e.value(
            &format!(":{REFUND_RESERVED}"),
            attr_n(self.amount.minor_units()),
        );
        e.set_to(REFUND_RESERVED, |_, n| format!("{n} - {amount}"));
        e.set(UPDATED_AT, attr_n(self.now.as_millis()));
    }
}

impl Update for RefundFailedLater {
    fn update(&self, e: &mut Expression) {
        e.set(STATUS, attr_s(OperationStatus::Failed.as_str()));
        e.set(
            LAST_ERROR,
            // The prefix the outbox reads `failed_after_success` from: one constant.
            attr_s(&format!(
                "{}{}",
                store_rules::FAILED_LATER_PREFIX,
                self.failure_reason
            )),
        );
        e.set(UPDATED_AT, attr_n(self.now.as_millis()));
    }
}

impl Update for OutcomeRecord {
    fn update(&self, e: &mut Expression) {
        e.set(STATUS, attr_s(self.status.as_str()));
        e.set(UPDATED_AT, attr_n(self.now.as_millis()));
        if let Some(id) = &self.external_id {
            e.set(EXTERNAL_ID, attr_s(id));
        }
        // Each kind's record holds only its own (as the rules keep it): a refund's id on a
        // refund, an authorization's deadline and capture on a charge.
        let refund = matches!(self.key.kind, OperationKind::Refund(_));
        let charge = self.key.kind.is_charge();
        if let Some(id) = self.stripe_refund_id.as_ref().filter(|_| refund) {
            e.set(STRIPE_REFUND_ID, attr_s(id));
        }
        if let Some(t) = self.capture_before.filter(|_| charge) {
            e.set(CAPTURE_BEFORE, attr_n(t.as_millis()));
        }
        if let Some(amount) = self.amount_captured.filter(|_| charge) {
            e.set(AMOUNT_CAPTURED, attr_n(amount.minor_units()));
        }
        match &self.last_error {
            Some(err) => e.set(LAST_ERROR, attr_s(err)),
            None => e.remove(LAST_ERROR),
        }
        if let Some(review) = &self.review {
            e.set(REVIEW_REASON, attr_s(&review.reason));
            e.set(REVIEW_FLAGGED_AT, attr_n(review.flagged_at.as_millis()));
        }
        e.remove(LEASE_TOKEN);
        e.remove(LEASE_EXPIRES_AT);
        match store_rules::due_after(self) {
            None => {
                e.remove(DUE_SHARD);
                e.remove(DUE_AT);
                e.settle_at(self.now);
            }
            Some(due) => {
                // The partition depends on the review flag, which only this write can set (claims
                // refuse operations in review, so no lease holder ever writes over one).
                let shard = match &self.review {
                    Some(_) => REVIEW_SHARD.to_owned(),
                    None => due_shard(&self.operation_id),
                };
                e.set(DUE_SHARD, attr_s(&shard));
                e.set(DUE_AT, attr_n(due.as_millis()));
            }
        }
    }
}

/// A settled record leaves the index and keeps no lease or review: a resolution's REMOVE, and
/// the charge side of a capture's or cancel's end.
fn remove_settled(e: &mut Expression) {
    for attr in [
        DUE_SHARD,
        DUE_AT,
        LEASE_TOKEN,
        LEASE_EXPIRES_AT,
        REVIEW_REASON,
        REVIEW_FLAGGED_AT,
    ] {
        e.remove(attr);
    }
}

impl Update for TakeAuthorization {
    fn update(&self, e: &mut Expression) {
        e.set(TAKEN_BY, attr_s(&self.taker.to_string()));
        e.set(UPDATED_AT, attr_n(self.now.as_millis()));
        if self.from == TakeFrom::NeverSent {
            e.set(STATUS, attr_s(OperationStatus::Failed.as_str()));
            e.set(LAST_ERROR, attr_s(store_rules::CANCELED_BEFORE_SENT));
            e.settle_at(self.now);
            // Never attempted: there is no lease to remove (the rule leaves it as it is).
            for attr in [DUE_SHARD, DUE_AT, REVIEW_REASON, REVIEW_FLAGGED_AT] {
                e.remove(attr);
            }
        }
    }
}

/// A new charge attempt's side on the head: it names the new latest, and nothing else moves
/// (not `updated_at`: the head's own writes keep their fence, and the stream's image shows no
/// outcome).
impl Update for store_rules::AttemptOnHead {
    fn update(&self, e: &mut Expression) {
        e.set(LATEST_ATTEMPT, attr_n(i64::from(self.latest + 1)));
    }
}

/// A claim on the charge beside a new operation: the claim's own update.
impl Update for ChargeClaim<'_> {
    fn update(&self, e: &mut Expression) {
        match self {
            ChargeClaim::Reserve(reserve) => reserve.update(e),
            ChargeClaim::Take(take) => take.update(e),
            ChargeClaim::Dispute(dispute) => dispute.update(e),
        }
    }
}

/// A dispute's side of its charge: the reservation made or given back (a refund's own
/// arithmetic), the open dispute named or removed.
impl Update for DisputeOnCharge {
    fn update(&self, e: &mut Expression) {
        if let Some((amount, _)) = self.reserve {
            let none = e.value(":no_refund_reserved", attr_n(0));
            let amount = e.value(&format!(":{REFUND_RESERVED}"), attr_n(amount.minor_units()));
            e.set_to(REFUND_RESERVED, |_, n| {
                format!("if_not_exists({n}, {none}) + {amount}")
            });
        } else if let Some(amount) = self.give_back {
            let amount = e.value(&format!(":{REFUND_RESERVED}"), attr_n(amount.minor_units()));
            e.set_to(REFUND_RESERVED, |_, n| format!("{n} - {amount}"));
        }
        match &self.mark {
            DisputeMark::Keep => {}
            DisputeMark::Open {
                dispute,
                refundable,
            } => {
                e.set(DISPUTED_BY, attr_s(dispute));
                e.set(DISPUTE_REFUNDABLE, attr_bool(*refundable));
            }
            DisputeMark::Clear => {
                e.remove(DISPUTED_BY);
                e.remove(DISPUTE_REFUNDABLE);
            }
        }
        e.set(UPDATED_AT, attr_n(self.now.as_millis()));
    }
}

/// A dispute's record moved to what Stripe holds: its state, its status, and its place in the
/// index (out of it once settled; in review, where it is; else by its next read).
impl Update for DisputeMove {
    fn update(&self, e: &mut Expression) {
        let state = &self.state;
        e.set(DISPUTE_STATUS, attr_s(state.status.as_str()));
        match state.due_by {
            Some(t) => e.set(DUE_BY, attr_n(t.as_millis())),
            None => e.remove(DUE_BY),
        }
        e.set(HAS_EVIDENCE, attr_bool(state.has_evidence));
        e.set(CHARGE_REFUNDABLE, attr_bool(state.is_charge_refundable));
        e.set(DISPUTE_RESERVED, attr_bool(state.reserved));
        e.set(STATUS, attr_s(self.status.as_str()));
        e.set(UPDATED_AT, attr_n(self.now.as_millis()));
        if let Some(error) = &self.last_error {
            e.set(LAST_ERROR, attr_s(error));
        }
        if self.status.is_settled() {
            e.settle_at(self.now);
            remove_settled(e);
            return;
        }
        let due = self.next_due_at.unwrap_or(self.now);
        if let Some(review) = &self.review {
            e.set(REVIEW_REASON, attr_s(&review.reason));
            e.set(REVIEW_FLAGGED_AT, attr_n(review.flagged_at.as_millis()));
            e.set(DUE_SHARD, attr_s(REVIEW_SHARD));
            e.set(DUE_AT, attr_n(due.as_millis()));
        } else if !self.in_review {
            e.set(DUE_SHARD, attr_s(&due_shard(&self.operation_id)));
            e.set(DUE_AT, attr_n(due.as_millis()));
        }
    }
}

impl Update for SettleAuthorization {
    fn update(&self, e: &mut Expression) {
        e.set(UPDATED_AT, attr_n(self.now.as_millis()));
        let now = self.now;
        let ended = |e: &mut Expression, status: OperationStatus, error: Option<&str>| {
            e.set(STATUS, attr_s(status.as_str()));
            // A charge whose own look at Stripe recorded this end first keeps that settle time.
            e.settle_at(now);
            match error {
                Some(error) => e.set(LAST_ERROR, attr_s(error)),
                None => e.remove(LAST_ERROR),
            }
            remove_settled(e);
        };
        match self.outcome {
            AuthorizationOutcome::Captured(amount) => {
                e.set(AMOUNT_CAPTURED, attr_n(amount.minor_units()));
                ended(e, OperationStatus::Succeeded, None);
            }
            AuthorizationOutcome::Canceled => ended(
                e,
                OperationStatus::Failed,
                Some(store_rules::CANCELED_BY_MERCHANT),
            ),
            AuthorizationOutcome::Expired => ended(
                e,
                OperationStatus::Failed,
                Some(store_rules::AUTHORIZATION_EXPIRED),
            ),
            AuthorizationOutcome::GivenBack => e.remove(TAKEN_BY),
        }
    }
}

impl Update for Reschedule {
    fn update(&self, e: &mut Expression) {
        e.set(DUE_AT, attr_n(self.next_due_at.as_millis()));
        e.set(UPDATED_AT, attr_n(self.now.as_millis()));
        if self.sends {
            e.add_one(REDRIVES);
        }
        if self.clear_review {
            // Out of review: back to its automatic-work partition.
            e.set(DUE_SHARD, attr_s(&due_shard(&self.operation_id)));
            e.remove(REVIEW_REASON);
            e.remove(REVIEW_FLAGGED_AT);
        }
        if let Some(operator) = &self.operator {
            e.append_history(&operator.audit);
        }
    }
}

impl Update for ManualResolution {
    fn update(&self, e: &mut Expression) {
        e.set(STATUS, attr_s(self.status.as_str()));
        e.set(UPDATED_AT, attr_n(self.guard.audit.at.as_millis()));
        e.append_history(&self.guard.audit);
        e.settle_at(self.guard.audit.at);
        if let Some(id) = &self.external_id {
            e.set(EXTERNAL_ID, attr_s(id));
        }
        if let Some(id) = self
            .stripe_refund_id
            .as_ref()
            .filter(|_| matches!(self.key.kind, OperationKind::Refund(_)))
        {
            e.set(STRIPE_REFUND_ID, attr_s(id));
        }
        // The review evidence moves into the history entry (the caller copied it there).
        remove_settled(e);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use charge_core::operation::{LeaseToken, Review};
    use charge_core::store::OperatorGuard;
    use charge_core::testing::T0;

    use super::super::schema::UNKNOWN_INDEX_PROJECTED;
    use super::*;

    fn audit(action: &str) -> AuditEntry {
        AuditEntry {
            action: action.into(),
            previous_status: OperationStatus::Unknown,
            new_status: OperationStatus::Succeeded,
            note: "checked in the dashboard".into(),
            at: T0,
            caller: "arn:aws:iam::000000000000:user/alice".into(),
            label: None,
            forced: None,
            review: None,
            replaced_external_id: None,
        }
    }

    fn claim() -> ClaimRequest {
        let op = charge_core::testing::order("ord-w").build();
        charge_core::testing::claim_request(&op, LeaseToken::new_random(), T0)
    }

    fn index_attributes() -> BTreeSet<&'static str> {
        [DUE_SHARD, DUE_AT]
            .into_iter()
            .chain(UNKNOWN_INDEX_PROJECTED.iter().copied())
            .collect()
    }

    fn outcomes() -> Vec<OutcomeRecord> {
        let op = charge_core::testing::order("ord-w").build();
        let token = LeaseToken::new_random();
        let mut flagged = charge_core::testing::outcome(&op, token, OperationStatus::Unknown, T0);
        flagged.review = Some(Review {
            reason: "stuck".into(),
            flagged_at: T0,
        });
        vec![
            charge_core::testing::outcome(&op, token, OperationStatus::Unknown, T0),
            charge_core::testing::outcome(&op, token, OperationStatus::Succeeded, T0),
            charge_core::testing::outcome(&op, token, OperationStatus::Failed, T0),
            flagged,
        ]
    }

    /// DynamoDB writes an index entry only when a write puts, deletes or moves it or changes an
    /// attribute projected into it. A claim touches neither the index keys nor anything
    /// projected, so it costs the index nothing: projecting anything a claim changes (`attempts`,
    /// `updated_at`, the lease) fails here, as does a claim that sets `status` or `due_at`.
    #[test]
    fn a_claim_touches_nothing_the_unknown_index_holds() {
        let w = write(&claim()).unwrap();
        let touched: BTreeSet<_> = w.touched.clone();
        assert!(!touched.is_empty());
        assert_eq!(
            touched
                .intersection(&index_attributes())
                .collect::<Vec<_>>(),
            Vec::<&&str>::new(),
            "{}",
            w.update
        );
    }

    /// Projecting `status` is free because every write that changes it also sets or removes
    /// `due_at` (the entry is written anyway) and a reschedule, which moves the entry, leaves it.
    #[test]
    fn a_write_that_changes_the_status_moves_or_removes_the_index_entry() {
        assert!(UNKNOWN_INDEX_PROJECTED.contains(&STATUS));
        let op = charge_core::testing::order("ord-w")
            .status(OperationStatus::Unknown)
            .build();
        let audit = audit("resolve_succeeded");
        let resolve = ManualResolution {
            key: op.key(),
            operation_id: op.operation_id,
            status: OperationStatus::Succeeded,
            external_id: None,
            expected_updated_at: op.updated_at,
            stripe_refund_id: None,
            release: None,
            guard: OperatorGuard {
                lease_cutoff: T0,
                audit,
            },
            authorization: None,
        };
        let mut writes: Vec<Write> = outcomes().iter().map(|r| write(r).unwrap()).collect();
        writes.push(write(&resolve).unwrap());
        for w in &writes {
            assert!(w.touched.contains(STATUS), "{}", w.update);
            assert!(w.touched.contains(DUE_AT), "{}", w.update);
        }
        let redrive = Reschedule::redrive(&op, T0.plus(Duration::from_secs(60)), T0);
        assert!(!write(&redrive).unwrap().touched.contains(STATUS));
    }

    /// A capture's or cancel's writes on its charge: both ways of taking it, each end.
    fn takings() -> Vec<Write> {
        use charge_core::charge::state::Taker;
        let op = charge_core::testing::order("ord-w").build();
        let taker = Taker {
            capture: true,
            operation_id: charge_core::domain::OperationId::new_random(),
        };
        let mut found = Vec::new();
        for from in [TakeFrom::Authorized, TakeFrom::NeverSent] {
            let take = TakeAuthorization {
                charge: op.key(),
                charge_operation_id: op.operation_id,
                taker,
                from,
                now: T0,
            };
            found.push(write(&take).unwrap());
        }
        for outcome in [
            AuthorizationOutcome::Captured(op.params.amount()),
            AuthorizationOutcome::Canceled,
            AuthorizationOutcome::Expired,
            AuthorizationOutcome::GivenBack,
        ] {
            let settle = SettleAuthorization {
                charge: op.key(),
                taker,
                outcome,
                now: T0,
            };
            found.push(write(&settle).unwrap());
        }
        found
    }

    /// A capture's or cancel's write that changes the charge's status (a cancel of a charge
    /// never sent, an end) takes it out of the index in the same write; one that does not (a
    /// claim, a give-back) leaves the entry where it is.
    #[test]
    fn a_taking_s_write_that_changes_the_status_removes_the_index_entry() {
        for w in takings() {
            assert_eq!(
                w.touched.contains(STATUS),
                w.touched.contains(DUE_AT),
                "{}",
                w.update
            );
        }
    }

    /// An outcome's kind-owned parts are written only on the kind whose record holds them: a
    /// refund's Stripe id on a refund, an authorization's deadline and capture on a charge, as
    /// the store rules keep them; the same outcome on the other kind writes none of them.
    #[test]
    fn an_outcome_writes_each_kind_only_what_its_record_holds() {
        let charge = charge_core::testing::order("ord-w").build();
        let full = |key: charge_core::operation::OperationKey| OutcomeRecord {
            key,
            stripe_refund_id: Some(charge_core::domain::StripeRefundId::parse("re_1").unwrap()),
            capture_before: Some(T0),
            amount_captured: Some(charge.params.amount()),
            ..charge_core::testing::outcome(
                &charge,
                LeaseToken::new_random(),
                OperationStatus::Unknown,
                T0,
            )
        };
        let names = |rec: &OutcomeRecord| -> BTreeSet<String> {
            write(rec).unwrap().names.into_values().collect()
        };
        let refund_key = charge_core::operation::OperationKey::refund(
            charge.order_id.clone(),
            charge_core::domain::RefundId::parse("r-1").unwrap(),
        );
        let capture_key = charge_core::operation::OperationKey::of_kind(
            charge.order_id.clone(),
            charge_core::domain::OperationKind::FIRST_CAPTURE,
        );
        for (key, held) in [
            (charge.key(), &[CAPTURE_BEFORE, AMOUNT_CAPTURED][..]),
            (refund_key, &[STRIPE_REFUND_ID][..]),
            (capture_key, &[][..]),
        ] {
            let named = names(&full(key.clone()));
            for attr in [CAPTURE_BEFORE, AMOUNT_CAPTURED, STRIPE_REFUND_ID] {
                assert_eq!(
                    named.contains(attr),
                    held.contains(&attr),
                    "{} {attr}",
                    key.kind.as_str()
                );
            }
        }
    }

    #[test]
    fn every_placeholder_is_declared_and_every_declared_one_used() {
        let op = charge_core::testing::order("ord-w").build();
        let mut writes: Vec<Write> = outcomes().iter().map(|r| write(r).unwrap()).collect();
        writes.push(write(&claim()).unwrap());
        writes.push(write(&Reschedule::redrive(&op, T0, T0)).unwrap());
        writes.extend(takings());
        for w in &writes {
            let text = format!("{} {}", w.update, w.condition);
            for placeholder in w.names.keys().chain(w.values.keys()) {
                assert!(text.contains(placeholder.as_str()), "{placeholder}: {text}");
            }
            for word in text.split(|c: char| !(c.is_alphanumeric() || "_#:".contains(c))) {
                if word.starts_with('#') {
                    assert!(w.names.contains_key(word), "{word}: {text}");
                }
                if word.starts_with(':') {
                    assert!(w.values.contains_key(word), "{word}: {text}");
                }
            }
        }
    }

    /// The operator policy lists exactly what chargectl's writes name: a write naming anything
    /// else would be refused by IAM in production (moto does not enforce IAM), and an attribute
    /// listed but never named would be a grant nobody needs.
    #[test]
    fn the_operator_attributes_are_exactly_what_the_operator_writes_name() {
        let op = charge_core::testing::order("ord-w")
            .status(OperationStatus::Unknown)
            .build();
        let resolve = |status, external_id: Option<&str>| ManualResolution {
            key: op.key(),
            operation_id: op.operation_id,
            status,
            external_id: external_id
                .map(|id| charge_core::domain::PaymentIntentId::parse(id).unwrap()),
            expected_updated_at: op.updated_at,
            stripe_refund_id: None,
            release: None,
            guard: OperatorGuard {
                lease_cutoff: T0,
                audit: audit("resolve"),
            },
            authorization: None,
        };
        // `chargectl redrive`: out of review, with the history entry.
        let redrive = Reschedule {
            clear_review: true,
            operator: Some(OperatorGuard {
                lease_cutoff: T0,
                audit: audit("redrive"),
            }),
            ..Reschedule::redrive(&op, T0.plus(Duration::from_secs(300)), T0)
        };
        // `chargectl resolve` of a refund: its Stripe id as confirmed, and, failed, its
        // reservation given back to the charge in the same transaction.
        let release = ReleaseRefund {
            charge: op.charge_key(),
            amount: op.params.amount(),
            now: T0,
        };
        let refund = ManualResolution {
            key: charge_core::operation::OperationKey::refund(
                op.order_id.clone(),
                charge_core::domain::RefundId::parse("r-1").unwrap(),
            ),
            stripe_refund_id: Some(charge_core::domain::StripeRefundId::parse("re_1").unwrap()),
            release: Some(release.clone()),
            ..resolve(OperationStatus::Failed, None)
        };
        // `chargectl resolve --failed` of a capture while Stripe holds it untouched: the
        // charge given back in the same transaction.
        let given_back = SettleAuthorization {
            charge: op.charge_key(),
            taker: charge_core::charge::state::Taker {
                capture: true,
                operation_id: op.operation_id,
            },
            outcome: AuthorizationOutcome::GivenBack,
            now: T0,
        };
        let writes = [
            write(&resolve(OperationStatus::Succeeded, Some("pi_1"))).unwrap(),
            write(&resolve(OperationStatus::Failed, None)).unwrap(),
            write(&redrive).unwrap(),
            write(&refund).unwrap(),
            write(&release).unwrap(),
            write(&given_back).unwrap(),
        ];
        let mut named: BTreeSet<&str> = [PK, SK, DUE_SHARD, DUE_AT].into();
        for w in &writes {
            named.extend(w.names.values().map(String::as_str));
        }
        let listed: BTreeSet<&str> = OPERATOR_WRITE_ATTRIBUTES.iter().copied().collect();
        assert_eq!(
            listed.len(),
            OPERATOR_WRITE_ATTRIBUTES.len(),
            "no duplicates"
        );
        assert_eq!(named, listed);
        for never in [
            "amount",
            "currency",
            "customer_id",
            "payment_method",
            ATTEMPTS,
            FIRST_ATTEMPTED_AT,
        ] {
            assert!(!listed.contains(never), "{never}");
        }
    }

    #[test]
    fn a_resolution_to_an_unsettled_status_is_refused_before_sending() {
        let op = charge_core::testing::order("ord-w")
            .status(OperationStatus::Unknown)
            .build();
        let resolve = ManualResolution {
            key: op.key(),
            operation_id: op.operation_id,
            status: OperationStatus::Unknown,
            external_id: None,
            expected_updated_at: op.updated_at,
            stripe_refund_id: None,
            release: None,
            guard: OperatorGuard {
                lease_cutoff: T0,
                audit: audit("resolve_unknown"),
            },
            authorization: None,
        };
        assert_eq!(
            write(&resolve),
            Err(Guard::Settles(OperationStatus::Unknown))
        );
    }
}
