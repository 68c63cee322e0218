//! The refund state machine as pure functions of (record, Stripe's answer, now): what a refund
//! operation does next and what each answer means, read as its table (`tests/spec_refund_plan.rs`).
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
        // Stripe refuses to refund a charge its customer's bank disputed (400
        // `charge_disputed`): nothing was refunded and nothing will be under this key, so the
        // refund settles failed and gives its reservation back; the merchant answers the
        // dispute instead. Not retried, not a person's: it is Stripe's known answer.
        GatewayError::ChargeDisputed { .. } => {
            return RefundDecision {
                decision: Decision {
                    status: OperationStatus::Failed,
                    external_id: None,
                    last_error: Some(CHARGE_DISPUTED.to_owned()),
                    review: None,
                    next_due_at: None,
                    retry: None,
                    then: None,
                    authorization: None,
                },
                refund_id: None,
                release: true,
            };
        }
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

/// The `last_error` of a refund Stripe refused because its charge is disputed: Stripe's
/// error code.
pub const CHARGE_DISPUTED: &str = "charge_disputed";

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
