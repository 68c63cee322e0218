//! The outbox: which committed change of an operation record is an outcome the order service must
//! learn, and the event that tells it.
//!
//! There is no second write: the record's own change, as the table's stream delivers it (the image
//! before and after one committed write), *is* the outbox entry. A relay reads the stream, asks
//! [`outcome_of`] whether the change is an outcome, and publishes the [`OutcomeEvent`] at least
//! once. Consumers deduplicate on [`OutcomeEvent::event_id`] = sha256(operation id, outcome): the
//! same change replayed, or a later change that keeps the outcome, gives the same id.
//!
//! | change (before → after) | event |
//! |---|---|
//! | anything but `authorized` → `authorized` (a manual capture's hold) | `ChargeAuthorized` (with `capture_before`) |
//! | anything but `succeeded` → `succeeded` | `ChargeSucceeded`; `ChargeCaptured` for an authorization captured (with `amount_captured`) |
//! | anything but `failed` → `failed` | `ChargeFailed` (its PaymentIntent, if any, `canceled`); `ChargeCanceled` when a cancel ended it, `AuthorizationExpired` when its hold lapsed |
//! | a refund `succeeded` → `failed` (Stripe's late failure) | `RefundFailed` with `failed_after_success` and Stripe's `failure_reason`, its own event id (the earlier `RefundSucceeded` keeps its own) |
//! | unsettled, not in review → unsettled, in review | `ChargeNeedsReview` (with the reason) |
//! | anything else (a claim, a reschedule, an unknown recorded, a settled record rewritten) | none |
//!
//! A refund operation's changes are the same outcomes under the refund's names
//! ([`OutcomeEvent::detail_type`]): `RefundSucceeded`, `RefundFailed`, `RefundNeedsReview`.
//! A capture's or a cancel's outcome is told by its charge's event (the charge record changes in
//! the same write); of their own changes only review is published (`CaptureNeedsReview`,
//! `CancelNeedsReview`).
//!
//! A dispute's record (recorded from what Stripe holds, never asked for) has its own steps:
//!
//! | change (before → after) | event |
//! |---|---|
//! | none → open (`unknown`) | `DisputeOpened` (its `dispute_status` says whether funds were withdrawn) |
//! | open, an inquiry (`warning_*`) → open, funds withdrawn | `DisputeFundsWithdrawn` |
//! | anything but `succeeded` → `succeeded` (Stripe's `lost`) | `DisputeLost` |
//! | anything but `failed` → `failed` (`won`; an inquiry's `warning_closed`) | `DisputeWon`; `DisputeClosed` |
//! | open, not in review → in review (its amount did not fit beside the refunds) | `DisputeNeedsReview` |
//!
//! Each carries `dispute_id`, `dispute_status` and, while Stripe states one, `due_by`; its
//! event id is the same sha256 of (v1, operation id, the step) as every outcome's.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::domain::{OperationKind, PaymentIntentId};
use crate::operation::{Operation, OperationStatus};
use crate::store_rules::{authorization_end, AuthorizationEnd};

/// `source` of every outcome event.
pub const SOURCE: &str = "charge-once";
/// `detail.v`: bumped on any change a consumer could notice (fields removed or renamed).
pub const SCHEMA_VERSION: u32 = 1;

/// The outcome an event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Succeeded,
    Failed,
    NeedsReview,
    /// A manual capture's charge holds the money (`requires_capture`).
    Authorized,
    /// A dispute was first recorded, open (its `dispute_status` says whether funds were
    /// withdrawn: any but a `warning_*` inquiry's).
    DisputeOpened,
    /// An open inquiry turned into a chargeback: Stripe withdrew the disputed funds.
    DisputeFundsWithdrawn,
}

impl Outcome {
    /// EventBridge `detail-type` of a charge's outcome (a refund's: [`OutcomeEvent::detail_type`]).
    pub fn detail_type(&self) -> &'static str {
        match self {
            Outcome::Succeeded => "ChargeSucceeded",
            Outcome::Failed => "ChargeFailed",
            Outcome::NeedsReview => "ChargeNeedsReview",
            Outcome::Authorized => "ChargeAuthorized",
            Outcome::DisputeOpened => "DisputeOpened",
            Outcome::DisputeFundsWithdrawn => "DisputeFundsWithdrawn",
        }
    }

    /// `detail.status`, and the second input of the event id.
    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::NeedsReview => "needs_review",
            Outcome::Authorized => "authorized",
            Outcome::DisputeOpened => "dispute_opened",
            Outcome::DisputeFundsWithdrawn => "funds_withdrawn",
        }
    }
}

/// One outcome event, ready to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeEvent {
    pub outcome: Outcome,
    /// sha256 of `v1`, the operation id and the outcome's status, hex: stable across replays.
    pub event_id: String,
    pub operation: Operation,
}

impl OutcomeEvent {
    /// EventBridge `detail-type`: the outcome under its operation's kind.
    pub fn detail_type(&self) -> &'static str {
        let op = &self.operation;
        match (&op.kind, self.outcome) {
            (OperationKind::Charge(_), Outcome::Succeeded) if op.amount_captured().is_some() => {
                "ChargeCaptured"
            }
            (OperationKind::Charge(_), Outcome::Failed) => match authorization_end(op) {
                Some(AuthorizationEnd::Expired) => "AuthorizationExpired",
                Some(AuthorizationEnd::Canceled) => "ChargeCanceled",
                None => "ChargeFailed",
            },
            (_, o @ (Outcome::DisputeOpened | Outcome::DisputeFundsWithdrawn)) => o.detail_type(),
            (OperationKind::Charge(_), o) => o.detail_type(),
            (OperationKind::Capture(_), _) => "CaptureNeedsReview",
            (OperationKind::Cancel, _) => "CancelNeedsReview",
            (OperationKind::Refund(_), Outcome::Succeeded) => "RefundSucceeded",
            (OperationKind::Refund(_), Outcome::Failed) => "RefundFailed",
            (OperationKind::Refund(_), Outcome::NeedsReview | Outcome::Authorized) => {
                "RefundNeedsReview"
            }
            // Stripe's `lost`: the bank's take of the money succeeded.
            (OperationKind::Dispute(_), Outcome::Succeeded) => "DisputeLost",
            // `won`, or an inquiry closed (`warning_closed`): nothing taken in the end.
            (OperationKind::Dispute(_), Outcome::Failed) => match op.params.dispute_state() {
                Some(state) if state.status.is_inquiry() => "DisputeClosed",
                _ => "DisputeWon",
            },
            (OperationKind::Dispute(_), Outcome::NeedsReview | Outcome::Authorized) => {
                "DisputeNeedsReview"
            }
        }
    }

    pub fn new(outcome: Outcome, operation: Operation) -> Self {
        Self {
            event_id: event_id(&operation, outcome),
            outcome,
            operation,
        }
    }

    /// The event's `detail` (schema: docs/outcome-event.schema.json). No customer or card data
    /// beyond the ids the order service sent.
    pub fn detail(&self) -> Detail<'_> {
        let op = &self.operation;
        let review_reason = (self.outcome == Outcome::NeedsReview)
            .then(|| op.review.as_ref().map(|r| r.reason.as_str()));
        // Stripe can no longer take the money: `failed` over a PaymentIntent is recorded only
        // once Stripe holds it canceled (the executor cancels a declined one first; chargectl's
        // `resolve --failed` requires it). The order service may ask for another card, and must
        // never confirm this intent again.
        let dispute = op.params.dispute_state();
        let canceled = self.outcome == Outcome::Failed
            && op.external_id.is_some()
            && dispute.is_none()
            && !forced_failed(op);
        let refund = op.params.refund();
        let failed_later = (self.outcome == Outcome::Failed)
            .then(|| crate::store_rules::failed_later_reason(op))
            .flatten();
        Detail {
            amount: op.params.amount().minor_units(),
            amount_captured: (self.outcome == Outcome::Succeeded)
                .then(|| op.amount_captured().map(|a| a.minor_units()))
                .flatten(),
            attempt: op
                .charge_key()
                .kind
                .attempt_no()
                .filter(|n| !OperationKind::is_first_attempt(n)),
            capture_before: (self.outcome == Outcome::Authorized)
                .then(|| op.capture_before().map(|t| t.to_rfc3339()))
                .flatten(),
            currency: op.params.currency().as_str(),
            dispute_id: op.kind.dispute_id().map(|id| id.as_str()),
            dispute_status: dispute.map(|d| d.status.as_str()),
            due_by: dispute.and_then(|d| d.due_by).map(|t| t.to_rfc3339()),
            event_id: &self.event_id,
            failed_after_success: failed_later.map(|_| true),
            failure_reason: failed_later,
            occurred_at: op.updated_at.to_rfc3339(),
            operation_id: op.operation_id.to_string(),
            order_id: op.order_id.as_str(),
            payment_intent: refund.map_or(op.external_id.as_ref(), |r| Some(&r.payment_intent)),
            payment_intent_status: (canceled && refund.is_none()).then_some("canceled"),
            refund_id: op.kind.refund_id().map(|id| id.as_str()),
            review_reason,
            status: self.outcome.status(),
            stripe_refund_id: op.stripe_refund_id().map(|id| id.as_str()),
            v: SCHEMA_VERSION,
        }
    }
}

/// An outcome event's `detail`, as published. The fields are in alphabetical order, the order
/// every release has published them in (consumers must not depend on it, but a byte-for-byte
/// comparison of one release's events with another's then shows only real differences).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Detail<'a> {
    /// Minor units.
    pub amount: i64,
    /// On `ChargeCaptured`: what the capture took (at most `amount`, what was authorized).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount_captured: Option<i64>,
    /// The order's charge attempt the event is of (a charge's own number; a refund's, capture's,
    /// cancel's or dispute's the attempt it acts on), from 2, when the order was charged again
    /// after a decline; absent for the first attempt, as on every event before attempts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// On `ChargeAuthorized`: Stripe's deadline for the capture (RFC 3339), when Stripe stated it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture_before: Option<String>,
    pub currency: &'a str,
    /// A dispute's events only: Stripe's dispute id (`dp_…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispute_id: Option<&'a str>,
    /// A dispute's events only: Stripe's dispute status, verbatim (`needs_response`, `won`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispute_status: Option<&'a str>,
    /// A dispute's events only, while Stripe states one: the evidence deadline (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due_by: Option<String>,
    pub event_id: &'a str,
    /// `true` on a `RefundFailed` of a refund that had succeeded (Stripe returned the money to
    /// the balance later: a closed or lost card); absent otherwise. The merchant's customer did
    /// not get the money back after all, although a `RefundSucceeded` said so before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_after_success: Option<bool>,
    /// Stripe's `failure_reason` (`expired_or_canceled_card`, `lost_or_stolen_card`, `unknown`)
    /// with `failed_after_success`; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<&'a str>,
    pub occurred_at: String,
    pub operation_id: String,
    pub order_id: &'a str,
    /// `null` when the operation has no PaymentIntent; a refund's is the intent it refunds.
    pub payment_intent: Option<&'a PaymentIntentId>,
    /// `"canceled"` on a `ChargeFailed` over a PaymentIntent; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payment_intent_status: Option<&'static str>,
    /// A refund's: the merchant's refund id; absent on a charge's events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refund_id: Option<&'a str>,
    /// On `ChargeNeedsReview` / `RefundNeedsReview` only (`null` if the record has no reason);
    /// absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review_reason: Option<Option<&'a str>>,
    pub status: &'static str,
    /// A refund's Stripe id (`re_…`) once Stripe named it; absent on a charge's events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stripe_refund_id: Option<&'a str>,
    pub v: u32,
}

/// Settled `failed` by an operator overriding the Stripe check (`resolve --failed --force`): the
/// one way to `failed` that does not prove the intent canceled.
fn forced_failed(op: &Operation) -> bool {
    op.history
        .last()
        .is_some_and(|e| e.new_status == OperationStatus::Failed && e.forced.is_some())
}

fn event_id(op: &Operation, outcome: Outcome) -> String {
    let digest = Sha256::digest(format!("v1\n{}\n{}", op.operation_id, outcome.status()));
    crate::domain::lower_hex(&digest)
}

/// The outcome a committed change reports, if any (the rule row by row: `tests/spec_outbox.rs`).
/// `before` is `None` for a newly inserted record.
pub fn outcome_of(before: Option<&Operation>, after: &Operation) -> Option<OutcomeEvent> {
    outcome_change(before, after).map(|outcome| OutcomeEvent::new(outcome, after.clone()))
}

/// Which outcome the change from `before` to `after` is, if any: [`outcome_of`]'s decision
/// without building the event (the simulation's stream stand-in needs only this).
pub fn outcome_change(before: Option<&Operation>, after: &Operation) -> Option<Outcome> {
    let was = |status: OperationStatus| before.is_some_and(|b| b.status == status);
    let newly_in_review = || after.review.is_some() && before.is_none_or(|b| b.review.is_none());
    if let Some(state) = after.params.dispute_state() {
        if !after.status.is_settled() {
            let Some(before) = before else {
                return Some(Outcome::DisputeOpened);
            };
            let withdrew = |status: &crate::dispute::DisputeStatus| {
                crate::dispute::plan::funds_withdrawn(status)
            };
            let was_withdrawn = before
                .params
                .dispute_state()
                .is_some_and(|b| withdrew(&b.status));
            if withdrew(&state.status) && !was_withdrawn {
                return Some(Outcome::DisputeFundsWithdrawn);
            }
        }
    }
    if after.kind.takes_authorization() {
        // Its outcome is its charge's event; only a person's attention is its own.
        return (!after.status.is_settled() && newly_in_review()).then_some(Outcome::NeedsReview);
    }
    match after.status {
        OperationStatus::Authorized if !was(OperationStatus::Authorized) => {
            Some(Outcome::Authorized)
        }
        OperationStatus::Succeeded if !was(OperationStatus::Succeeded) => Some(Outcome::Succeeded),
        OperationStatus::Failed if !was(OperationStatus::Failed) => Some(Outcome::Failed),
        OperationStatus::Pending | OperationStatus::Unknown | OperationStatus::Authorized
            if newly_in_review() =>
        {
            Some(Outcome::NeedsReview)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::operation::Review;
    use crate::testing;
    use std::time::Duration;

    /// The detail as the publisher sends it.
    fn detail(event: &OutcomeEvent) -> Value {
        serde_json::to_value(event.detail()).unwrap()
    }

    /// The published bytes: every field in alphabetical order (as a JSON object map renders
    /// them), `payment_intent` present as `null` when there is none, the optional ones absent.
    #[test]
    fn the_detail_is_published_with_its_fields_in_order() {
        let before = op(OperationStatus::Unknown);
        let event = outcome_of(Some(&before), &op(OperationStatus::Succeeded)).unwrap();
        let bytes = serde_json::to_string(&event.detail()).unwrap();
        assert_eq!(
            bytes,
            detail(&event).to_string(),
            "the same bytes as the sorted map"
        );
        assert!(bytes.contains(r#""payment_intent":null"#), "{bytes}");
        assert!(!bytes.contains("review_reason") && !bytes.contains("payment_intent_status"));
    }

    fn op(status: OperationStatus) -> Operation {
        testing::order("ord-outbox").status(status).build()
    }

    /// An order's second charge attempt names itself (`attempt: 2`) beside the order and its
    /// operation, and so does a refund of it; its event id is its operation's and outcome's, as
    /// any other. The twin: the first attempt's event has no `attempt`, the bytes every event
    /// before attempts had.
    #[test]
    fn an_event_of_a_later_attempt_names_it_and_the_first_s_does_not() {
        let first_before = op(OperationStatus::Unknown);
        let mut first = first_before.clone();
        first.status = OperationStatus::Succeeded;
        let first_event = outcome_of(Some(&first_before), &first).unwrap();
        assert!(detail(&first_event).get("attempt").is_none());

        let mut before = first_before.clone();
        before.kind = OperationKind::Charge(2);
        let mut second = before.clone();
        second.status = OperationStatus::Succeeded;
        second.external_id = Some(PaymentIntentId::parse("pi_2").unwrap());
        let event = outcome_of(Some(&before), &second).unwrap();
        let d = detail(&event);
        assert_eq!(d["attempt"], 2);
        assert_eq!(d["order_id"], "ord-outbox");
        assert_eq!(d["operation_id"], second.operation_id.to_string());
        let digest = Sha256::digest(format!("v1\n{}\nsucceeded", second.operation_id));
        assert_eq!(
            event.event_id,
            crate::domain::lower_hex(&digest),
            "the id as before attempts"
        );

        let mut refund = testing::order("ord-outbox").build();
        refund.kind = OperationKind::Refund(crate::domain::RefundId::parse("r-1").unwrap());
        refund.params = crate::operation::Params::Refund(
            crate::refund::request::RefundParams {
                amount: crate::domain::Amount::new(500).unwrap(),
                currency: crate::domain::Currency::parse("usd").unwrap(),
                payment_intent: PaymentIntentId::parse("pi_2").unwrap(),
                reason: None,
                charge_attempt: 2,
            },
            crate::refund::state::RefundState::default(),
        );
        let mut refunded = refund.clone();
        refunded.status = OperationStatus::Succeeded;
        let d = detail(&outcome_of(Some(&refund), &refunded).unwrap());
        assert_eq!(
            (d["attempt"].as_u64(), d["refund_id"].as_str()),
            (Some(2), Some("r-1"))
        );
    }

    fn reviewed(mut op: Operation) -> Operation {
        op.review = Some(Review {
            reason: "search found 2".into(),
            flagged_at: op.created_at,
        });
        op
    }

    #[test]
    fn event_id_is_stable_per_operation_and_outcome() {
        let before = op(OperationStatus::Unknown);
        let mut after = op(OperationStatus::Succeeded);
        after.operation_id = before.operation_id;
        after.external_id = Some(crate::domain::PaymentIntentId::parse("pi_1").unwrap());
        let a = outcome_of(Some(&before), &after).unwrap();
        let mut later = after.clone();
        later.updated_at = later.updated_at.plus(Duration::from_secs(60));
        let b = outcome_of(Some(&before), &later).unwrap();
        assert_eq!(a.event_id, b.event_id, "a replay or a later image: same id");
        assert_eq!(a.event_id.len(), 64);

        let mut failed = after.clone();
        failed.status = OperationStatus::Failed;
        assert_ne!(
            outcome_of(Some(&before), &failed).unwrap().event_id,
            a.event_id
        );
        let other = op(OperationStatus::Succeeded);
        assert_ne!(
            outcome_of(Some(&before), &other).unwrap().event_id,
            a.event_id
        );

        let d = detail(&a);
        assert_eq!(d["v"], 1);
        assert_eq!(d["event_id"], a.event_id.as_str());
        assert_eq!(d["order_id"], "ord-outbox");
        assert_eq!(d["operation_id"], after.operation_id.to_string());
        assert_eq!(d["status"], "succeeded");
        assert_eq!(d["payment_intent"], "pi_1");
        assert_eq!(d["amount"], 1250);
        assert_eq!(d["currency"], "usd");
        assert!(d.get("review_reason").is_none());
        assert!(d.get("customer_id").is_none() && d.get("payment_method").is_none());

        let review = outcome_of(Some(&before), &reviewed(before.clone())).unwrap();
        assert_eq!(review.outcome.detail_type(), "ChargeNeedsReview");
        assert_eq!(detail(&review)["review_reason"], "search found 2");
        assert_eq!(detail(&review)["status"], "needs_review");
        assert!(detail(&review).get("payment_intent_status").is_none());
    }

    /// A failed charge's event says its PaymentIntent is canceled at Stripe, so the order service
    /// knows nobody can pay it any more; not when there is none, not for a success, and not when
    /// an operator forced `failed` past the Stripe check.
    /// A refund's outcomes are the same transitions under the refund's names, with the refund's
    /// ids and the intent it refunds; a charge's detail has none of the refund's fields.
    #[test]
    fn a_refund_s_events_are_named_for_refunds_and_carry_its_ids() {
        use crate::domain::{Amount, RefundId, StripeRefundId};
        use crate::refund::{request::RefundRequest, reserve};
        let mut charge = testing::order("ord-outbox-r")
            .status(OperationStatus::Succeeded)
            .external_id("pi_charged")
            .build();
        charge.next_due_at = None;
        let request = RefundRequest {
            amount: Some(Amount::new(300).unwrap()),
            reason: None,
        };
        let (params, _) = reserve(&charge, &request, charge.created_at).unwrap();
        let before = Operation::new_refund(
            charge.order_id.clone(),
            RefundId::parse("r-9").unwrap(),
            &request,
            params,
            crate::domain::Principal::jwt("support").unwrap(),
            charge.created_at,
            Duration::from_secs(300),
        );
        let mut after = before.clone();
        after.status = OperationStatus::Failed;
        after.next_due_at = None;
        after.params.refund_state_mut().unwrap().stripe_refund_id =
            Some(StripeRefundId::parse("re_9").unwrap());
        let failed = outcome_of(Some(&before), &after).unwrap();
        assert_eq!(failed.detail_type(), "RefundFailed");
        let d = detail(&failed);
        assert_eq!(d["refund_id"], "r-9");
        assert_eq!(d["stripe_refund_id"], "re_9");
        assert_eq!(d["payment_intent"], "pi_charged");
        assert_eq!(d["amount"], 300);
        assert!(d.get("payment_intent_status").is_none(), "{d}");
        after.status = OperationStatus::Succeeded;
        assert_eq!(
            outcome_of(Some(&before), &after).unwrap().detail_type(),
            "RefundSucceeded"
        );
        assert!(d.get("failed_after_success").is_none(), "{d}");
        let charged = outcome_of(None, &charge).unwrap();
        assert_eq!(charged.detail_type(), "ChargeSucceeded");
        let d = detail(&charged);
        assert!(
            d.get("refund_id").is_none() && d.get("stripe_refund_id").is_none(),
            "{d}"
        );
    }

    /// A refund Stripe fails after it succeeded: the store's one settled transition
    /// ([`crate::store::RefundFailedLater`]) is a `RefundFailed` of its own (an id distinct from
    /// the `RefundSucceeded` before it), saying so with Stripe's reason; a refund that failed
    /// the ordinary way says neither.
    #[test]
    fn a_refund_failed_after_success_says_so_with_its_reason() {
        use crate::domain::{Amount, RefundId};
        use crate::refund::{request::RefundRequest, reserve};
        use crate::store::{RefundFailedLater, ReleaseRefund};
        let mut charge = testing::order("ord-outbox-late")
            .status(OperationStatus::Succeeded)
            .external_id("pi_charged")
            .build();
        charge.next_due_at = None;
        let request = RefundRequest {
            amount: Some(Amount::new(300).unwrap()),
            reason: None,
        };
        let (params, _) = reserve(&charge, &request, charge.created_at).unwrap();
        let mut succeeded = Operation::new_refund(
            charge.order_id.clone(),
            RefundId::parse("r-late").unwrap(),
            &request,
            params,
            crate::domain::Principal::jwt("support").unwrap(),
            charge.created_at,
            Duration::from_secs(300),
        );
        succeeded.status = OperationStatus::Succeeded;
        succeeded.next_due_at = None;
        let later = RefundFailedLater {
            key: succeeded.key(),
            operation_id: succeeded.operation_id,
            failure_reason: "lost_or_stolen_card".into(),
            release: ReleaseRefund {
                charge: charge.key(),
                amount: succeeded.params.amount(),
                now: succeeded.created_at,
            },
            now: succeeded.created_at,
        };
        let failed = crate::store_rules::apply(&succeeded, &later).unwrap();
        let event = outcome_of(Some(&succeeded), &failed).unwrap();
        assert_eq!(event.detail_type(), "RefundFailed");
        let first = outcome_of(None, &succeeded).unwrap();
        assert_ne!(event.event_id, first.event_id, "its own id");
        let d = detail(&event);
        assert_eq!(d["failed_after_success"], true, "{d}");
        assert_eq!(d["failure_reason"], "lost_or_stolen_card", "{d}");
        assert_eq!(d["status"], "failed");
        // The same change replayed by the stream: the same event.
        assert_eq!(outcome_of(Some(&succeeded), &failed).unwrap(), event);
        // The twin: a refund that failed the ordinary way.
        let mut ordinary = succeeded.clone();
        ordinary.status = OperationStatus::Failed;
        ordinary.last_error = Some("refund failed: lost_or_stolen_card".into());
        let d = detail(&outcome_of(None, &ordinary).unwrap());
        assert!(d.get("failed_after_success").is_none(), "{d}");
        assert!(d.get("failure_reason").is_none(), "{d}");
    }

    #[test]
    fn a_failed_charges_event_says_its_intent_is_canceled() {
        let before = op(OperationStatus::Unknown);
        let failed_with = |pi: Option<&str>| {
            let mut after = op(OperationStatus::Failed);
            after.operation_id = before.operation_id;
            after.external_id = pi.map(|id| crate::domain::PaymentIntentId::parse(id).unwrap());
            after
        };
        let status = |after: &Operation| {
            detail(&outcome_of(Some(&before), after).unwrap())["payment_intent_status"].clone()
        };
        assert_eq!(status(&failed_with(Some("pi_1"))), "canceled");
        assert_eq!(status(&failed_with(None)), Value::Null, "no intent");
        let mut succeeded = failed_with(Some("pi_1"));
        succeeded.status = OperationStatus::Succeeded;
        assert_eq!(status(&succeeded), Value::Null);
        let mut forced = failed_with(Some("pi_1"));
        forced.history.push(crate::operation::AuditEntry {
            action: "resolve_failed".into(),
            previous_status: OperationStatus::Unknown,
            new_status: OperationStatus::Failed,
            note: "n".into(),
            at: forced.updated_at,
            caller: "arn:aws:iam::1:user/op".into(),
            label: None,
            forced: Some("refunded by support".into()),
            review: None,
            replaced_external_id: None,
        });
        assert_eq!(status(&forced), Value::Null, "forced: not proven canceled");
        // The event id is what it was: consumers deduplicate on it, the field is additive.
        assert_eq!(
            outcome_of(Some(&before), &failed_with(Some("pi_1")))
                .unwrap()
                .event_id,
            outcome_of(Some(&before), &failed_with(None))
                .unwrap()
                .event_id
        );
    }
}

#[cfg(test)]
mod authorization_tests {
    use super::*;
    use crate::domain::Amount;
    use crate::store_rules::{AUTHORIZATION_EXPIRED, CANCELED_BY_MERCHANT};
    use crate::testing::{order, T0};

    fn manual(status: OperationStatus) -> Operation {
        let mut op = order("ord-ob").manual().amount(1000).status(status).build();
        op.params.charge_state_mut().unwrap().capture_before =
            Some(T0.plus(std::time::Duration::from_secs(3600)));
        op
    }

    /// An authorization's changes are their own outcomes: held, captured, canceled, lapsed; the
    /// twin, an automatic charge's same changes, keep the charge's names.
    #[test]
    fn an_authorization_s_outcomes_say_what_happened_to_the_hold() {
        let authorized = manual(OperationStatus::Authorized);
        let e = outcome_of(Some(&manual(OperationStatus::Unknown)), &authorized).unwrap();
        assert_eq!(e.detail_type(), "ChargeAuthorized");
        assert!(e.detail().capture_before.is_some());
        // Looked at again, still held: no event.
        assert_eq!(outcome_of(Some(&authorized), &authorized), None);
        let mut captured = Operation {
            status: OperationStatus::Succeeded,
            ..authorized.clone()
        };
        captured.params.charge_state_mut().unwrap().amount_captured =
            Some(Amount::new(700).unwrap());
        let e = outcome_of(Some(&authorized), &captured).unwrap();
        assert_eq!(e.detail_type(), "ChargeCaptured");
        assert_eq!(e.detail().amount_captured, Some(700));
        let ended = |error: &str| Operation {
            status: OperationStatus::Failed,
            last_error: Some(error.to_owned()),
            ..authorized.clone()
        };
        let canceled = outcome_of(Some(&authorized), &ended(CANCELED_BY_MERCHANT)).unwrap();
        assert_eq!(canceled.detail_type(), "ChargeCanceled");
        let expired = outcome_of(Some(&authorized), &ended(AUTHORIZATION_EXPIRED)).unwrap();
        assert_eq!(expired.detail_type(), "AuthorizationExpired");
        // The twin: an automatic charge.
        let automatic = order("ord-ob").status(OperationStatus::Succeeded).build();
        let e = outcome_of(Some(&order("ord-ob").build()), &automatic).unwrap();
        assert_eq!(e.detail_type(), "ChargeSucceeded");
        assert_eq!(e.detail().amount_captured, None);
    }
}
