//! The refund state machine as pure functions of (record, Stripe's answer, now): what a refund
//! operation does next and what each answer means, read as its table (`refund_table` below).
//!
//! A refund runs on the executor's shell, as every kind does, (claim → act → fenced record) with
//! its own steps:
//! - its Stripe id known → **retrieve** it (re-sending the create would only replay);
//! - inside the key window → **create** with the refund key (`refund-op:<operation_id>`);
//! - past the key window → **list** the PaymentIntent's refunds and find the one whose
//!   `metadata.operation_id` is ours (lists are not delayed as search is, so no wait): exactly one
//!   settles, none or several go to a person.
//!
//! `pending` and `requires_action` are not settled. A refund that ends `failed` or `canceled`
//! gives its reservation back to the charge ([`RefundDecision::release`]), in the same write that
//! records it. A refund Stripe answers that is not this operation's (other metadata, amount,
//! currency or intent) settles nothing.

use crate::domain::{PaymentIntentId, StripeRefundId};
use crate::operation::{Operation, OperationStatus};
use crate::outcome::GatewayError;
use crate::plan::{stuck, unknown_due_at, Decision, Policy, ReviewClass};
use crate::refund::{refund_outcome_for, RefundStatus, StripeRefund};
use crate::time::Timestamp;

/// What to do with a claimed refund operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundStep {
    /// Its Stripe id is known: read it.
    Retrieve(StripeRefundId),
    /// Past the key window: a create could refund again; list the intent's refunds instead.
    List(PaymentIntentId),
    /// Inside the key window: create (or re-create) with the same key.
    Create,
}

impl RefundStep {
    pub fn name(&self) -> &'static str {
        match self {
            RefundStep::Retrieve(_) => "retrieve_refund",
            RefundStep::List(_) => "list_refunds",
            RefundStep::Create => "create_refund",
        }
    }
}

/// The next record for a refund operation: the engine's [`Decision`], the refund's Stripe id
/// to record, and whether the write gives the reservation back to the charge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundDecision {
    pub decision: Decision,
    /// The refund's id to record; `None` leaves the recorded one (if any) as it is.
    pub refund_id: Option<StripeRefundId>,
    /// The refund ended without returning money (`failed`, `canceled`): its amount goes back to
    /// what is left of the charge, in the same write.
    pub release: bool,
}

impl RefundDecision {
    fn of(decision: Decision) -> Self {
        Self {
            decision,
            refund_id: None,
            release: false,
        }
    }
}

/// Decides the step for a refund operation we hold the lease on.
pub fn next_step(op: &Operation, now: Timestamp, policy: &Policy) -> RefundStep {
    if let Some(id) = op.stripe_refund_id() {
        return RefundStep::Retrieve(id.clone());
    }
    match op.params.refund() {
        Some(p) if op.key_window_passed(now, policy.key_window) => {
            RefundStep::List(p.payment_intent.clone())
        }
        _ => RefundStep::Create,
    }
}

/// Which of a refund's facts is not the operation's, if any: `metadata.operation_id`, the
/// intent, the amount and the currency as the create sent them. An absent fact counts as
/// different.
pub fn refund_mismatch(op: &Operation, refund: &StripeRefund) -> Option<&'static str> {
    let params = op.params.refund()?;
    let operation_id = op.operation_id.to_string();
    if refund.operation_id.as_deref() != Some(operation_id.as_str()) {
        return Some("operation_id");
    }
    if refund.payment_intent.as_deref() != Some(params.payment_intent.as_str()) {
        return Some("payment_intent");
    }
    if refund.amount != Some(params.amount.minor_units()) {
        return Some("amount");
    }
    if refund.currency.as_deref() != Some(params.currency.as_str()) {
        return Some("currency");
    }
    None
}

/// What a refund Stripe answered with means for the operation: checked to be ours, then
/// settled (released when no money went back), reviewed as stuck, or looked at again.
fn from_refund(
    op: &Operation,
    refund: StripeRefund,
    now: Timestamp,
    policy: &Policy,
) -> RefundDecision {
    // Once a refund is recorded, only that refund settles the operation: a second one carrying
    // our operation id (an event's retrieve can name one) must not settle, or release, it.
    let other = op
        .stripe_refund_id()
        .filter(|id| **id != refund.id)
        .map(|id| format!("it is not {id}, the one recorded"));
    if let Some(why) =
        other.or_else(|| refund_mismatch(op, &refund).map(|fact| format!("{fact} differs")))
    {
        let reason = format!(
            "{}: refund {} is not this operation's ({why})",
            ReviewClass::RefundMismatch.as_str(),
            refund.id
        );
        return RefundDecision::of(Decision::review(
            op.status,
            reason,
            ReviewClass::RefundMismatch,
            now,
        ));
    }
    let status = refund_outcome_for(&refund.status);
    let error = match (&refund.status, &refund.failure_reason) {
        (RefundStatus::Succeeded, _) => None,
        (s, Some(why)) => Some(format!("refund {s}: {why}")),
        (s, None) => Some(format!("refund {s}")),
    };
    let decision = if status.is_settled() {
        Decision {
            status,
            external_id: None,
            last_error: error,
            review: None,
            next_due_at: None,
            retry: None,
            then: None,
            authorization: None,
        }
    } else if stuck(op, now, policy) {
        // Waiting on the customer's bank (`requires_action`) or Stripe's balance for days: a
        // person decides, with the dashboard.
        let reason = format!(
            "{}: refund {} still {} {} h after the first attempt",
            ReviewClass::StuckRefund.as_str(),
            refund.id,
            refund.status,
            policy.stuck_after.as_secs() / 3600
        );
        Decision::review(status, reason, ReviewClass::StuckRefund, now)
    } else {
        Decision {
            status,
            external_id: None,
            last_error: error,
            review: None,
            next_due_at: Some(unknown_due_at(op, now, policy)),
            retry: None,
            then: None,
            authorization: None,
        }
    };
    RefundDecision {
        release: status == OperationStatus::Failed,
        refund_id: Some(refund.id),
        decision,
    }
}

/// After a create with the refund key.
pub fn after_create(
    op: &Operation,
    result: Result<StripeRefund, GatewayError>,
    now: Timestamp,
    policy: &Policy,
) -> RefundDecision {
    let err = match result {
        Ok(refund) => return from_refund(op, refund, now, policy),
        Err(err) => err,
    };
    RefundDecision::of(match &err {
        // Certainly nothing happened: the same key again soon.
        GatewayError::RetryLater { cause, .. } => {
            unchanged(op, &err, now.plus(policy.retry_after), Some(*cause))
        }
        // It may have refunded. Unknown, never failed; the same key makes the next create safe.
        GatewayError::Ambiguous { .. } => Decision {
            status: OperationStatus::Unknown,
            external_id: None,
            last_error: Some(err.to_string()),
            review: None,
            next_due_at: Some(unknown_due_at(op, now, policy)),
            retry: None,
            then: None,
            authorization: None,
        },
        GatewayError::KeyMisuse { .. } => Decision::review(
            OperationStatus::Unknown,
            err.to_string(),
            ReviewClass::KeyMisuse,
            now,
        ),
        // Stripe refused the refund as asked (more than is left at Stripe, the charge refunded
        // in the dashboard, an intent Stripe does not hold as succeeded): nothing was made, but
        // our reservation and Stripe disagree, so a person looks. Never failed by us: the
        // merchant would be told "no refund" of money Stripe may have returned another way.
        GatewayError::Rejected { .. }
        | GatewayError::UnexpectedState { .. }
        | GatewayError::Declined { .. } => {
            Decision::review(op.status, err.to_string(), ReviewClass::Rejected, now)
        }
    })
}

/// After reading the refund whose id we had recorded.
pub fn after_retrieve(
    op: &Operation,
    result: Result<StripeRefund, GatewayError>,
    now: Timestamp,
    policy: &Policy,
) -> RefundDecision {
    let err = match result {
        Ok(refund) => return from_refund(op, refund, now, policy),
        Err(err) => err,
    };
    RefundDecision::of(match &err {
        GatewayError::RetryLater { cause, .. } => {
            unchanged(op, &err, now.plus(policy.retry_after), Some(*cause))
        }
        GatewayError::Ambiguous { .. } => {
            unchanged(op, &err, unknown_due_at(op, now, policy), None)
        }
        _ => Decision::review(
            op.status,
            format!(
                "retrieve of refund {} failed: {err}",
                op.stripe_refund_id().map(|id| id.as_str()).unwrap_or("?")
            ),
            ReviewClass::RetrieveFailed,
            now,
        ),
    })
}

/// After listing the charge's intent's refunds past the key window: ours is the one whose
/// `metadata.operation_id` is this operation's.
pub fn after_list(
    op: &Operation,
    result: Result<Vec<StripeRefund>, GatewayError>,
    now: Timestamp,
    policy: &Policy,
) -> RefundDecision {
    let operation_id = op.operation_id.to_string();
    match result {
        Ok(all) => {
            let mut ours: Vec<StripeRefund> = all
                .into_iter()
                .filter(|r| r.operation_id.as_deref() == Some(operation_id.as_str()))
                .collect();
            if ours.len() == 1 {
                return from_refund(op, ours.remove(0), now, policy);
            }
            // None: the create never reached Stripe, or was refused; creating again would need
            // another key. Several: something already refunded twice. A person decides.
            RefundDecision::of(Decision::review(
                OperationStatus::Unknown,
                format!(
                    "{}: key window passed; the intent lists {} refunds for the operation",
                    ReviewClass::RefundListAmbiguous.as_str(),
                    ours.len()
                ),
                ReviewClass::RefundListAmbiguous,
                now,
            ))
        }
        Err(err @ (GatewayError::RetryLater { .. } | GatewayError::Ambiguous { .. })) => {
            RefundDecision::of(unchanged(op, &err, now.plus(policy.retry_after), None))
        }
        Err(err) => RefundDecision::of(Decision::review(
            OperationStatus::Unknown,
            format!("list of refunds failed: {err}"),
            ReviewClass::RetrieveFailed,
            now,
        )),
    }
}

/// What an operator read at Stripe to check a claim about a refund (`chargectl resolve`): the
/// refund itself when its Stripe id is recorded, else the intent's refunds, as the executor
/// reads them ([`operator_step`]).
#[derive(Debug, Clone)]
pub enum OperatorRead {
    Retrieved(Result<StripeRefund, GatewayError>),
    Listed(Result<Vec<StripeRefund>, GatewayError>),
}

/// Where an operator's check of a refund reads: never a create (an operator never makes money
/// move), otherwise the executor's own step.
pub fn operator_step(op: &Operation) -> Option<RefundStep> {
    match op.stripe_refund_id() {
        Some(id) => Some(RefundStep::Retrieve(id.clone())),
        None => Some(RefundStep::List(op.params.refund()?.payment_intent.clone())),
    }
}

/// What Stripe confirmed of an operator's claim: the status to record, the refund's Stripe id,
/// and whether the reservation goes back to the charge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmed {
    pub status: OperationStatus,
    pub refund_id: Option<StripeRefundId>,
    pub release: bool,
}

/// An operator's claim about a refund (`claimed`: succeeded or failed, with the Stripe refund id
/// they saw, if any) held to what Stripe answered, by the executor's own rules ([`after_retrieve`],
/// [`after_list`]): confirmed only when those rules settle the refund as claimed; the reason
/// otherwise. One more answer settles by hand what the executor leaves to a person: the intent
/// lists **none** of the operation's refunds and the operator says failed. Lists are not delayed
/// and the resolution is refused while a lease may be live, so no refund of ours exists and, once
/// settled, none is ever created: nothing went back, the reservation is released.
pub fn confirm_by_hand(
    op: &Operation,
    claimed: OperationStatus,
    claimed_id: Option<&StripeRefundId>,
    read: OperatorRead,
    now: Timestamp,
    policy: &Policy,
) -> Result<Confirmed, String> {
    if let (Some(recorded), Some(claimed)) = (op.stripe_refund_id(), claimed_id) {
        if recorded != claimed {
            return Err(format!(
                "the operation records refund {recorded}, not {claimed}"
            ));
        }
    }
    let decided = match read {
        OperatorRead::Retrieved(result) => after_retrieve(op, result, now, policy),
        OperatorRead::Listed(Ok(all))
            if claimed == OperationStatus::Failed && none_ours(op, &all) =>
        {
            return Ok(Confirmed {
                status: OperationStatus::Failed,
                refund_id: None,
                release: true,
            });
        }
        OperatorRead::Listed(result) => after_list(op, result, now, policy),
    };
    let d = &decided.decision;
    if let Some((_, reason)) = &d.review {
        return Err(reason.clone());
    }
    if !d.status.is_settled() {
        let why = d.last_error.as_deref().unwrap_or("not settled at Stripe");
        return Err(format!("Stripe does not hold it settled yet: {why}"));
    }
    let id = decided.refund_id.as_ref().or(op.stripe_refund_id());
    if d.status != claimed {
        let id = id.map_or_else(|| "the refund".to_owned(), ToString::to_string);
        return Err(format!("Stripe holds {id} {}, not {claimed}", d.status));
    }
    if let (Some(id), Some(claimed)) = (id, claimed_id) {
        if id != claimed {
            return Err(format!(
                "the operation's refund at Stripe is {id}, not {claimed}"
            ));
        }
    }
    Ok(Confirmed {
        status: d.status,
        refund_id: decided.refund_id,
        release: decided.release,
    })
}

/// No refund in `all` carries this operation's id.
fn none_ours(op: &Operation, all: &[StripeRefund]) -> bool {
    let id = op.operation_id.to_string();
    !all.iter()
        .any(|r| r.operation_id.as_deref() == Some(id.as_str()))
}

/// The status stays; only the error and the next look change (with `retry`, the message is
/// retried).
fn unchanged(
    op: &Operation,
    error: &GatewayError,
    next_due_at: Timestamp,
    retry: Option<crate::outcome::RetryCause>,
) -> Decision {
    Decision {
        status: op.status,
        external_id: None,
        last_error: Some(error.to_string()),
        review: None,
        next_due_at: Some(next_due_at),
        retry,
        then: None,
        authorization: None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::{Amount, RefundId};
    use crate::operation::OperationStatus::{Failed, Pending, Succeeded, Unknown};
    use crate::outcome::RetryCause;
    use crate::refund::{reserve, RefundRequest};
    use crate::testing::{order, T0};

    const HOUR: Duration = Duration::from_secs(3600);

    /// A refund of 400 of a 1000 usd charge (`pi_r`), claimed at T0 (its first attempt).
    fn claimed() -> Operation {
        let mut charge = order("ord-rp")
            .amount(1000)
            .status(Succeeded)
            .external_id("pi_r")
            .build();
        charge.next_due_at = None;
        let request = RefundRequest {
            amount: Some(Amount::new(400).unwrap()),
            reason: None,
        };
        let (params, _) = reserve(&charge, &request, T0).unwrap();
        let mut op = Operation::new_refund(
            charge.order_id.clone(),
            RefundId::parse("r-1").unwrap(),
            &request,
            params,
            crate::domain::Principal::jwt("support").unwrap(),
            T0,
            Duration::from_secs(300),
        );
        op.attempts = 1;
        op.first_attempted_at = Some(T0);
        op
    }

    /// Stripe's refund `re_1` of `op` in `status`.
    fn stripe(op: &Operation, status: &str) -> StripeRefund {
        StripeRefund {
            id: StripeRefundId::parse("re_1").unwrap(),
            status: RefundStatus::parse(status),
            replayed: false,
            amount: Some(400),
            currency: Some("usd".into()),
            payment_intent: Some("pi_r".into()),
            operation_id: Some(op.operation_id.to_string()),
            failure_reason: (status == "failed").then(|| "expired_or_canceled_card".into()),
            order_id: None,
        }
    }

    fn ambiguous() -> GatewayError {
        GatewayError::Ambiguous {
            detail: "timeout".into(),
        }
    }

    /// What the step is, Stripe's answer to it, and the decision's outcome.
    enum Answer {
        One(Result<StripeRefund, GatewayError>),
        List(Result<Vec<StripeRefund>, GatewayError>),
    }

    /// One line of the refund's specification: (the record as claimed, now, Stripe's answer) →
    /// (the step, the next record's status, the refund id recorded, the reservation released,
    /// in review with this class, the message retried).
    struct Row {
        says: &'static str,
        found: Operation,
        now: Timestamp,
        answer: Answer,
        step: &'static str,
        status: OperationStatus,
        refund_id: Option<&'static str>,
        release: bool,
        review: Option<ReviewClass>,
        retry: Option<RetryCause>,
    }

    fn decide(row: &Row, policy: &Policy) -> RefundDecision {
        let (op, now) = (&row.found, row.now);
        match (next_step(op, now, policy), &row.answer) {
            (RefundStep::Create, Answer::One(r)) => after_create(op, r.clone(), now, policy),
            (RefundStep::Retrieve(_), Answer::One(r)) => after_retrieve(op, r.clone(), now, policy),
            (RefundStep::List(_), Answer::List(r)) => after_list(op, r.clone(), now, policy),
            (step, _) => panic!("{}: step {} with the wrong answer", row.says, step.name()),
        }
    }

    /// An operator's claim against Stripe's answer: (the record, the claim, what was read) →
    /// confirmed as (status, release), or refused with its reason.
    #[test]
    fn an_operator_s_claim_is_confirmed_only_as_stripe_holds_it() {
        use OperatorRead::{Listed, Retrieved};
        let policy = Policy::default();
        let op = claimed();
        let mut known = Operation {
            status: Unknown,
            ..op.clone()
        };
        known.params.refund_state_mut().unwrap().stripe_refund_id =
            Some(StripeRefundId::parse("re_1").unwrap());
        let other = |mut r: StripeRefund| {
            r.operation_id = Some("someone-else".into());
            r
        };
        let re = |id: &str| StripeRefundId::parse(id).unwrap();
        // Confirmed as (status, release), or refused with a reason containing the text.
        type Want = Result<(OperationStatus, bool), &'static str>;
        // (says, the record, the claim, the id claimed, what was read, the answer).
        type Row<'a> = (
            &'static str,
            &'a Operation,
            OperationStatus,
            Option<StripeRefundId>,
            OperatorRead,
            Want,
        );
        let rows: Vec<Row> = vec![
            (
                "retrieved succeeded, claimed succeeded",
                &known,
                Succeeded,
                Some(re("re_1")),
                Retrieved(Ok(stripe(&op, "succeeded"))),
                Ok((Succeeded, false)),
            ),
            (
                "retrieved failed, claimed failed: released",
                &known,
                Failed,
                None,
                Retrieved(Ok(stripe(&op, "failed"))),
                Ok((Failed, true)),
            ),
            (
                "retrieved canceled, claimed failed: released",
                &known,
                Failed,
                None,
                Retrieved(Ok(stripe(&op, "canceled"))),
                Ok((Failed, true)),
            ),
            (
                "retrieved succeeded, claimed failed: refused",
                &known,
                Failed,
                None,
                Retrieved(Ok(stripe(&op, "succeeded"))),
                Err("Stripe holds re_1 succeeded, not failed"),
            ),
            (
                "retrieved pending: refused, not settled",
                &known,
                Succeeded,
                None,
                Retrieved(Ok(stripe(&op, "pending"))),
                Err("settled yet: refund pending"),
            ),
            (
                "retrieved someone else's: refused",
                &known,
                Succeeded,
                None,
                Retrieved(Ok(other(stripe(&op, "succeeded")))),
                Err("not this operation's"),
            ),
            (
                "claimed another id than recorded: refused",
                &known,
                Succeeded,
                Some(re("re_9")),
                Retrieved(Ok(stripe(&op, "succeeded"))),
                Err("records refund re_1, not re_9"),
            ),
            (
                "listed ours succeeded among others",
                &op,
                Succeeded,
                Some(re("re_1")),
                Listed(Ok(vec![
                    other(stripe(&op, "failed")),
                    stripe(&op, "succeeded"),
                ])),
                Ok((Succeeded, false)),
            ),
            (
                "listed ours, but another id claimed: refused",
                &op,
                Succeeded,
                Some(re("re_2")),
                Listed(Ok(vec![stripe(&op, "succeeded")])),
                Err("is re_1, not re_2"),
            ),
            (
                "listed none of ours, claimed failed: nothing went back, released",
                &op,
                Failed,
                None,
                Listed(Ok(vec![other(stripe(&op, "succeeded"))])),
                Ok((Failed, true)),
            ),
            (
                "listed none of ours, claimed succeeded: refused",
                &op,
                Succeeded,
                None,
                Listed(Ok(vec![])),
                Err("lists 0 refunds"),
            ),
            (
                "listed two of ours: refused whatever the claim",
                &op,
                Failed,
                None,
                Listed(Ok(vec![stripe(&op, "failed"), stripe(&op, "failed")])),
                Err("lists 2 refunds"),
            ),
            (
                "the list timed out: refused",
                &op,
                Failed,
                None,
                Listed(Err(ambiguous())),
                Err("timeout"),
            ),
        ];
        for (says, found, claim, id, read, want) in rows {
            let got = confirm_by_hand(found, claim, id.as_ref(), read, T0.plus(HOUR), &policy);
            match (&got, &want) {
                (Ok(c), Ok((status, release))) => {
                    assert_eq!((c.status, c.release), (*status, *release), "{says}");
                }
                (Err(e), Err(part)) => assert!(e.contains(part), "{says}: {e}"),
                _ => panic!("{says}: got {got:?}, want {want:?}"),
            }
        }
        assert_eq!(
            operator_step(&known),
            Some(RefundStep::Retrieve(re("re_1")))
        );
        assert!(matches!(operator_step(&op), Some(RefundStep::List(_))));
    }

    #[test]
    fn refund_table() {
        let policy = Policy::default();
        let op = claimed();
        // A refund Stripe holds pending: unknown here, its id recorded.
        let mut known = Operation {
            status: Unknown,
            ..op.clone()
        };
        known.params.refund_state_mut().unwrap().stripe_refund_id =
            Some(StripeRefundId::parse("re_1").unwrap());
        let late = T0.plus(24 * HOUR);
        let other = |mut r: StripeRefund| {
            r.operation_id = Some("someone-else".into());
            r
        };
        let row = |says, found: &Operation, now, answer, step, status| Row {
            says,
            found: found.clone(),
            now,
            answer,
            step,
            status,
            refund_id: None,
            release: false,
            review: None,
            retry: None,
        };
        let rows = [
            Row {
                refund_id: Some("re_1"),
                ..row(
                    "new, created succeeded: succeeded, its id recorded, settled",
                    &op,
                    T0,
                    Answer::One(Ok(stripe(&op, "succeeded"))),
                    "create_refund",
                    Succeeded,
                )
            },
            Row {
                refund_id: Some("re_1"),
                ..row(
                    "new, created pending: unknown (not settled), its id recorded, back off",
                    &op,
                    T0,
                    Answer::One(Ok(stripe(&op, "pending"))),
                    "create_refund",
                    Unknown,
                )
            },
            Row {
                refund_id: Some("re_1"),
                ..row(
                    "new, created requires_action: unknown, its id recorded",
                    &op,
                    T0,
                    Answer::One(Ok(stripe(&op, "requires_action"))),
                    "create_refund",
                    Unknown,
                )
            },
            Row {
                refund_id: Some("re_1"),
                release: true,
                ..row(
                    "new, created failed: failed, settled, the reservation given back",
                    &op,
                    T0,
                    Answer::One(Ok(stripe(&op, "failed"))),
                    "create_refund",
                    Failed,
                )
            },
            Row {
                refund_id: Some("re_1"),
                release: true,
                ..row(
                    "new, created canceled: failed, settled, the reservation given back",
                    &op,
                    T0,
                    Answer::One(Ok(stripe(&op, "canceled"))),
                    "create_refund",
                    Failed,
                )
            },
            row(
                "new, create times out: unknown, never failed, nothing released",
                &op,
                T0,
                Answer::One(Err(ambiguous())),
                "create_refund",
                Unknown,
            ),
            Row {
                retry: Some(RetryCause::RateLimited),
                ..row(
                    "new, create rate limited: status kept, message retried",
                    &op,
                    T0,
                    Answer::One(Err(GatewayError::RetryLater {
                        cause: RetryCause::RateLimited,
                        detail: "429".into(),
                    })),
                    "create_refund",
                    Pending,
                )
            },
            Row {
                review: Some(ReviewClass::Rejected),
                ..row(
                    "new, Stripe refuses it (amount_too_large): status kept, review, never failed",
                    &op,
                    T0,
                    Answer::One(Err(GatewayError::Rejected {
                        detail: "amount_too_large".into(),
                        param: Some("amount".into()),
                    })),
                    "create_refund",
                    Pending,
                )
            },
            Row {
                review: Some(ReviewClass::KeyMisuse),
                ..row(
                    "new, the key met other parameters: unknown, review",
                    &op,
                    T0,
                    Answer::One(Err(GatewayError::KeyMisuse {
                        detail: "idempotency_error".into(),
                    })),
                    "create_refund",
                    Unknown,
                )
            },
            Row {
                review: Some(ReviewClass::RefundMismatch),
                ..row(
                    "new, create answers someone else's refund: nothing settled, review",
                    &op,
                    T0,
                    Answer::One(Ok(other(stripe(&op, "succeeded")))),
                    "create_refund",
                    Pending,
                )
            },
            Row {
                review: Some(ReviewClass::StuckRefund),
                refund_id: Some("re_1"),
                ..row(
                    "pending past the stuck bound: review, its id recorded",
                    &known,
                    T0.plus(73 * HOUR),
                    Answer::One(Ok(stripe(&op, "pending"))),
                    "retrieve_refund",
                    Unknown,
                )
            },
            Row {
                refund_id: Some("re_1"),
                release: true,
                ..row(
                    "id known, retrieve says failed (Stripe's word): failed, released",
                    &known,
                    T0.plus(HOUR),
                    Answer::One(Ok(stripe(&op, "failed"))),
                    "retrieve_refund",
                    Failed,
                )
            },
            Row {
                refund_id: Some("re_1"),
                ..row(
                    "id known, retrieve says succeeded: succeeded, settled",
                    &known,
                    T0.plus(HOUR),
                    Answer::One(Ok(stripe(&op, "succeeded"))),
                    "retrieve_refund",
                    Succeeded,
                )
            },
            Row {
                review: Some(ReviewClass::RefundMismatch),
                ..row(
                    "id known, Stripe's answer is another refund with our operation id: review, \
                     nothing released, the recorded id kept",
                    &known,
                    T0.plus(HOUR),
                    Answer::One(Ok(StripeRefund {
                        id: StripeRefundId::parse("re_2").unwrap(),
                        ..stripe(&op, "failed")
                    })),
                    "retrieve_refund",
                    Unknown,
                )
            },
            Row {
                review: Some(ReviewClass::RetrieveFailed),
                ..row(
                    "id known, Stripe has no such refund: review",
                    &known,
                    T0.plus(HOUR),
                    Answer::One(Err(GatewayError::Rejected {
                        detail: "resource_missing".into(),
                        param: None,
                    })),
                    "retrieve_refund",
                    Unknown,
                )
            },
            Row {
                refund_id: Some("re_1"),
                ..row(
                    "past the key window, the list holds ours among others: settled by it",
                    &op,
                    late,
                    Answer::List(Ok(vec![
                        other(stripe(&op, "succeeded")),
                        stripe(&op, "succeeded"),
                    ])),
                    "list_refunds",
                    Succeeded,
                )
            },
            Row {
                review: Some(ReviewClass::RefundListAmbiguous),
                ..row(
                    "past the key window, the list holds none of ours: review, never created again",
                    &op,
                    late,
                    Answer::List(Ok(vec![other(stripe(&op, "succeeded"))])),
                    "list_refunds",
                    Unknown,
                )
            },
            Row {
                review: Some(ReviewClass::RefundListAmbiguous),
                ..row(
                    "past the key window, the list holds two of ours: review",
                    &op,
                    late,
                    Answer::List(Ok(vec![stripe(&op, "succeeded"), stripe(&op, "succeeded")])),
                    "list_refunds",
                    Unknown,
                )
            },
            row(
                "past the key window, the list times out: status kept, look again",
                &op,
                late,
                Answer::List(Err(ambiguous())),
                "list_refunds",
                Pending,
            ),
        ];
        for r in &rows {
            let d = decide(r, &policy);
            let step = next_step(&r.found, r.now, &policy).name();
            assert_eq!(step, r.step, "{}: step", r.says);
            assert_eq!(d.decision.status, r.status, "{}: status", r.says);
            assert_eq!(d.refund_id.as_deref(), r.refund_id, "{}: refund id", r.says);
            assert_eq!(d.release, r.release, "{}: release", r.says);
            assert_eq!(
                d.decision.review.as_ref().map(|(c, _)| *c),
                r.review,
                "{}: review",
                r.says
            );
            assert_eq!(d.decision.retry, r.retry, "{}: retry", r.says);
            assert_eq!(
                d.decision.next_due_at.is_none(),
                d.decision.status.is_settled(),
                "{}: due exactly while unsettled",
                r.says
            );
            assert!(
                !(d.release && d.decision.status != Failed),
                "{}: only a failure releases",
                r.says
            );
        }
    }
}
