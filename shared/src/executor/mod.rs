//! The executor: the seed's `execute`, on the ports, safe to call any number of times
//! for the same operation, concurrently or after a crash at any point.
//!
//! 1. **Claim** the operation in one conditional write (unsettled, not in review, no live lease);
//!    `first_attempted_at` is durable before Stripe is called. A settled operation returns here
//!    with zero gateway calls.
//! 2. **Act**, as [`charge::plan::next_step`] decides: retrieve when the PaymentIntent id is
//!    known; search by `metadata['operation_id']` once the key window has passed (never create
//!    then); otherwise create with the key derived from the operation id. A declined intent is
//!    canceled before `failed` is recorded (the calls a decision asks for, [`FollowUp`], still
//!    under the lease).
//! 3. **Record**, fenced on our lease token and on an unsettled status, so a stale lease holder or a
//!    late duplicate can never overwrite a settled record.
//!
//! A refund operation runs the same shell with its own plan ([`refund::plan`]): retrieve its
//! refund, create it with the refund key, or list the intent's refunds past the key window; a
//! refund that ends without returning money gives its reservation back in the recording write.
//!
//! A capture or a cancel runs it with [`take::plan`]: act on the first attempt, read the intent
//! first on every later one (a lost capture's answer replays under its key, an error too), and
//! end its charge's authorization in the recording write (captured, canceled, lapsed).

//!
//! Each kind's part of the shell sits in a room of its own: [`charge`] (act, then the calls a
//! decision asks for; an event's intent), [`refund`] (a refund's one call; an event's refund),
//! [`take`] (a capture's or cancel's calls), [`dispute`] (no call: a dispute read at Stripe
//! recorded under its order, beside its charge).

use std::sync::Arc;

use charge_core::charge::event_plan::Action;
use charge_core::domain::{OperationId, PaymentIntentId, StripeRefundId};
use charge_core::operation::{Lease, LeaseToken, Operation, OperationKey, OperationStatus, Review};
use charge_core::plan::{Decision, Disposition, Policy, ReviewClass};
use charge_core::refund::event_plan::RefundEventAction;
use charge_core::store::{
    Claim, ClaimRequest, OutcomeRecord, Recorded, ReleaseRefund, SettleAuthorization,
};
use charge_core::time::Clock;
use tracing::{error, info, warn};

use crate::ports::{OperationStore, PaymentGateway, StoreError};

pub mod charge;
pub mod dispute;
pub mod refund;
pub mod take;

/// What one execution did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargeReport {
    pub status: OperationStatus,
    pub external_id: Option<PaymentIntentId>,
    pub disposition: Disposition,
    /// Calls made to the gateway by this execution: 0, 1, or up to 3 where a declined intent was
    /// canceled (and read back when the cancel was refused).
    pub gateway_calls: u32,
    /// This execution moved the operation into review, for this class of reason (`None` when it
    /// was already in review or did not go there).
    pub sent_to_review: Option<ReviewClass>,
    /// Stripe answered with `Idempotent-Replayed: true`: our key had been used before.
    pub replayed: bool,
    /// This execution recorded an authorization uncaptured with its deadline near (or passed):
    /// the caller pages (`AuthorizationNearDeadline`).
    pub deadline_near: bool,
    /// The record as the shell last saw it: as written; as the claim found it when it was not
    /// ours to change (settled, leased, in review); the current one when our write lost to
    /// another (`None` if it is gone). A caller that must compare something with what stands
    /// reads it here, not from the table again.
    pub record: Option<Operation>,
}

/// What applying one Stripe event did, with the event rule's answers: the edge reports them and
/// decides nothing again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventReport {
    pub report: ChargeReport,
    /// What the event rule decided on the record as claimed (what the shell recorded); `None`
    /// when the shell could not claim it.
    pub action: Option<Action>,
    /// What the event rule says of the settled record the shell ended with without writing it
    /// ([`settled_unwritten`]); `None` when it ended with no such record.
    pub settled: Option<Action>,
}

/// What applying one Stripe refund event did: the refund plan decided on the record as claimed
/// ([`apply_refund_event`]), and the refund event rule on a settled record the shell ended with
/// without writing it ([`settled_unwritten`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundEventReport {
    pub report: ChargeReport,
    pub settled: Option<RefundEventAction>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    #[error("no operation {operation_id} for order {order_id}")]
    NotFound {
        order_id: String,
        operation_id: OperationId,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Everything execution needs, built once per process.
#[derive(Clone)]
pub struct EngineDeps {
    pub store: Arc<dyn OperationStore>,
    pub gateway: Arc<dyn PaymentGateway>,
    pub clock: Arc<dyn Clock>,
    pub policy: Policy,
}

/// Runs one operation as far as it can go now. See the module docs for the steps.
#[tracing::instrument(
    name = "execute",
    skip_all,
    fields(order_id = %key.order_id, operation_id = %operation_id)
)]
pub async fn execute(
    deps: &EngineDeps,
    key: &OperationKey,
    operation_id: &OperationId,
) -> Result<ChargeReport, ExecuteError> {
    // A dispute is never executed: nothing is sent to Stripe for it and no message names one.
    // One that does is a writer's bug, answered as no such operation (the message parks).
    if key.kind.dispute_id().is_some() {
        return Err(ExecuteError::NotFound {
            order_id: key.order_id.to_string(),
            operation_id: *operation_id,
        });
    }
    let (report, _) = run_claimed(deps, key, operation_id, |op| async move {
        if op.params.refund().is_some() {
            return (refund::run(deps, &op).await, ());
        }
        if op.kind.takes_authorization() {
            return (take::run(deps, &op).await, ());
        }
        (charge::run(deps, &op).await, ())
    })
    .await?;
    Ok(report)
}

/// The settled record a shell ended with without writing it: settled before the claim (not ours
/// to change), or by the write that beat ours. What an event says of it is the event rule's to
/// answer: a settled record is never written here, and Stripe contradicting it pages.
fn settled_unwritten(report: &ChargeReport) -> Option<&Operation> {
    match report.disposition {
        Disposition::AlreadySettled | Disposition::Superseded => {
            report.record.as_ref().filter(|op| op.status.is_settled())
        }
        _ => None,
    }
}

/// What the middle of the shell decided, with what it cost.
pub struct Planned {
    /// A short name of what was done, for the log (`create`, `retrieve`, `event`, ...).
    pub step: &'static str,
    pub decision: Decision,
    pub gateway_calls: u32,
    pub replayed: bool,
    /// A refund's Stripe id to record, and its reservation to give back, if any.
    pub refund: Option<(Option<StripeRefundId>, Option<ReleaseRefund>)>,
    /// A capture's or cancel's end of its charge's authorization, if any.
    pub authorization: Option<SettleAuthorization>,
}

/// The one shell every transition of an operation goes through: **claim** (one conditional write;
/// a settled, leased, in-review or missing operation returns here with `decide` never called),
/// **decide** on the record as claimed (`decide` may call Stripe, under the lease), **record**
/// the decision fenced on the lease and an unsettled status. `decide` may hand back a value of
/// its own (`T`: the event rule's action), returned beside the report when it ran.
async fn run_claimed<F, Fut, T>(
    deps: &EngineDeps,
    key: &OperationKey,
    operation_id: &OperationId,
    decide: F,
) -> Result<(ChargeReport, Option<T>), ExecuteError>
where
    F: FnOnce(Operation) -> Fut,
    Fut: std::future::Future<Output = (Planned, T)>,
{
    let now = deps.clock.now();
    let lease = Lease {
        token: LeaseToken::new_random(),
        expires_at: now.plus(deps.policy.lease_ttl),
    };
    let request = ClaimRequest {
        key: key.clone(),
        operation_id: *operation_id,
        lease,
        now,
    };
    let op = match claim(deps, &request).await? {
        Ok(op) => op,
        Err(not_ours) => return Ok((not_ours, None)),
    };
    let (planned, extra) = decide(op).await;
    debug_assert!(
        planned.decision.then.is_none(),
        "a call asked for was not made"
    );
    let report = record(deps, key, operation_id, lease.token, planned).await?;
    Ok((report, Some(extra)))
}

/// Takes the lease on the operation: the record as claimed, or the report of why it is not
/// ours to change (settled, leased elsewhere, in review), with the record as found.
async fn claim(
    deps: &EngineDeps,
    request: &ClaimRequest,
) -> Result<Result<Operation, ChargeReport>, ExecuteError> {
    let (op, disposition) = match deps.store.claim(request).await? {
        Claim::Claimed(op) => return Ok(Ok(op)),
        Claim::Settled(op) => {
            info!(status = %op.status, "already settled; no gateway call");
            (op, Disposition::AlreadySettled)
        }
        Claim::Leased(op) => {
            info!("another execution holds the lease");
            (op, Disposition::Busy)
        }
        Claim::InReview(op) => {
            let reason = op.review.clone().map(|r| r.reason).unwrap_or_default();
            info!(%reason, "in review; left for an operator");
            (op, Disposition::InReview(reason))
        }
        Claim::NotFound => {
            return Err(ExecuteError::NotFound {
                order_id: request.key.order_id.to_string(),
                operation_id: request.operation_id,
            })
        }
    };
    Ok(Err(report(Some(op), disposition, 0)))
}

/// Records the decision, fenced on our lease and an unsettled status.
async fn record(
    deps: &EngineDeps,
    key: &OperationKey,
    operation_id: &OperationId,
    lease_token: LeaseToken,
    planned: Planned,
) -> Result<ChargeReport, ExecuteError> {
    let Planned {
        step,
        decision,
        gateway_calls,
        replayed,
        refund,
        authorization,
    } = planned;
    let hold = decision.authorization.unwrap_or_default();
    let (stripe_refund_id, release) = refund.unwrap_or_default();
    let now = deps.clock.now();
    let outcome = OutcomeRecord {
        key: key.clone(),
        operation_id: *operation_id,
        lease_token,
        status: decision.status,
        external_id: decision.external_id.clone(),
        last_error: decision.last_error.clone(),
        review: decision.review.as_ref().map(|(_, reason)| Review {
            reason: reason.clone(),
            flagged_at: now,
        }),
        next_due_at: decision.next_due_at,
        now,
        stripe_refund_id,
        release,
        authorization,
        capture_before: hold.capture_before,
        amount_captured: hold.amount_captured,
    };
    let report = match deps.store.record(&outcome).await? {
        Recorded::Written(op) => {
            log_recorded(step, &op, &decision, replayed);
            ChargeReport {
                sent_to_review: decision.review.as_ref().map(|(class, _)| *class),
                deadline_near: hold.deadline_near,
                ..report(Some(op), decision.disposition(), gateway_calls)
            }
        }
        Recorded::Refused(current) => {
            warn!(
                step,
                wanted = %decision.status,
                "outcome refused by the store: lease lost or already settled"
            );
            let mut report = report(current, Disposition::Superseded, gateway_calls);
            if report.record.is_none() {
                (report.status, report.external_id) = (decision.status, decision.external_id);
            }
            report
        }
    };
    Ok(ChargeReport { replayed, ..report })
}

/// The log line of a written outcome; loud when it sent the operation to review.
fn log_recorded(step: &str, op: &Operation, decision: &Decision, replayed: bool) {
    info!(
        step,
        status = %op.status,
        external_id = op.external_id.as_deref().unwrap_or(""),
        error = op.last_error.as_deref().unwrap_or(""),
        replayed,
        "recorded"
    );
    if let Some((class, reason)) = &decision.review {
        // Loud on purpose: an order that needs a person must never sit unnoticed. The caller
        // turns `sent_to_review` into the `SentToReview` metric (alarmed).
        error!(
            order_id = %op.order_id,
            operation_id = %op.operation_id,
            reason_class = class.as_str(),
            %reason,
            "sent to review: an operator must settle this operation (chargectl unknowns --review)"
        );
    }
}

/// A report of `disposition` over `record` (its status and PaymentIntent, or none).
fn report(record: Option<Operation>, disposition: Disposition, gateway_calls: u32) -> ChargeReport {
    ChargeReport {
        status: record
            .as_ref()
            .map_or(OperationStatus::Pending, |op| op.status),
        external_id: record.as_ref().and_then(|op| op.external_id.clone()),
        disposition,
        gateway_calls,
        sent_to_review: None,
        replayed: false,
        deadline_near: false,
        record,
    }
}
