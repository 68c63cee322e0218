//! A refund's part of the executor: its one call at Stripe as [`refund::plan`] decides it, and an
//! event's refund applied through the same shell, and the one write of a refund that failed after
//! it succeeded ([`fail_later`]), whichever path learned it (an event, the refund watch).

use charge_core::domain::OperationId;
use charge_core::operation::{Operation, OperationKey, OperationStatus};
use charge_core::plan::Decision;
use charge_core::refund::event_plan::EventRefund;
use charge_core::refund::plan::RefundStep;
use charge_core::refund::StripeRefund;
use charge_core::store::{Recorded, RefundFailedLater, ReleaseRefund};
use charge_core::{charge, refund};

use tracing::error;

use crate::ports::{CreateRefund, OperationLeases, StoreError};

use super::{run_claimed, settled_unwritten, EngineDeps, ExecuteError, Planned, RefundEventReport};

/// A claimed refund operation's one call to Stripe ([`refund::plan::next_step`]) and what its
/// answer decides ([`refund::plan`]): the refund's id to record, and its reservation given back to
/// the charge when no money went back.
pub(super) async fn run(deps: &EngineDeps, op: &Operation) -> Planned {
    let policy = &deps.policy;
    let step = refund::plan::next_step(op, deps.clock.now(), policy);
    let (decided, replayed) = match &step {
        RefundStep::Create => {
            // `next_step` only plans a refund's steps for a refund: it has its create.
            let Some(create) = CreateRefund::for_operation(op) else {
                let now = deps.clock.now();
                return planned_without_refund(&step, charge::plan::not_a_charge(op, now));
            };
            let result = deps.gateway.create_refund(&create).await;
            let replayed = result.as_ref().is_ok_and(|r| r.replayed);
            let now = deps.clock.now();
            (
                refund::plan::after_create(op, result, now, policy),
                replayed,
            )
        }
        RefundStep::Retrieve(id) => {
            let result = deps.gateway.retrieve_refund(id).await;
            let now = deps.clock.now();
            (refund::plan::after_retrieve(op, result, now, policy), false)
        }
        RefundStep::List(intent) => {
            let result = deps.gateway.list_refunds(intent).await;
            let now = deps.clock.now();
            (refund::plan::after_list(op, result, now, policy), false)
        }
    };
    refund_planned(deps, op, step.name(), decided, replayed, 1)
}

/// A refund plan's decision as the shell records it: the refund's id, and its reservation given
/// back to the charge when no money went back.
fn refund_planned(
    deps: &EngineDeps,
    op: &Operation,
    step: &'static str,
    decided: refund::plan::RefundDecision,
    replayed: bool,
    gateway_calls: u32,
) -> Planned {
    let release = decided.release.then(|| ReleaseRefund {
        charge: op.charge_key(),
        amount: op.params.amount(),
        now: deps.clock.now(),
    });
    Planned {
        step,
        decision: decided.decision,
        gateway_calls,
        replayed,
        refund: Some((decided.refund_id, release)),
        authorization: None,
    }
}

/// Applies what Stripe said of a refund operation's refund when an event told us to look
/// (`refund` is the retrieved refund, never the event's copy `claimed`), through the same shell
/// and the same rules as the executor's own retrieve ([`refund::plan::after_retrieve`]): settled
/// (its reservation given back when no money went back), its id recorded, or reviewed as stuck.
/// No call to Stripe but the caller's retrieve. The report's record is the one the shell last
/// saw; when that is a settled record the shell did not write, the refund event rule's answer
/// for it ([`refund::event_plan::decide`]) comes back with it.
pub async fn apply_refund_event(
    deps: &EngineDeps,
    key: &OperationKey,
    operation_id: &OperationId,
    claimed: &EventRefund,
    refund: StripeRefund,
) -> Result<RefundEventReport, ExecuteError> {
    let stripe = refund.clone();
    let (report, _) = run_claimed(deps, key, operation_id, |op| async move {
        let now = deps.clock.now();
        let decided = refund::plan::after_retrieve(&op, Ok(refund), now, &deps.policy);
        (
            refund_planned(deps, &op, "refund_event", decided, false, 0),
            (),
        )
    })
    .await?;
    let settled = settled_unwritten(&report)
        .map(|op| refund::event_plan::decide(op, claimed, &stripe, deps.clock.now()));
    Ok(RefundEventReport { report, settled })
}

fn planned_without_refund(step: &RefundStep, decision: Decision) -> Planned {
    Planned {
        step: step.name(),
        decision,
        gateway_calls: 0,
        replayed: false,
        refund: None,
        authorization: None,
    }
}

/// What the one settled transition of a refund (`succeeded → failed`, on Stripe's word that it
/// failed after it succeeded) did: the events function's and the refund watch's write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LateFailure {
    /// Written: the record as it is now (`failed`, its reservation given back to the charge in
    /// the same write). The outbox publishes `RefundFailed` with `failed_after_success`.
    Recorded(Operation),
    /// Already `failed` (another path recorded the same news first): nothing more.
    AlreadyFailed,
    /// Refused: the record is no longer the succeeded refund the rule decided on.
    Moved(Operation),
    /// No such record.
    Gone,
}

/// Writes a succeeded refund Stripe says failed later ([`RefundFailedLater`], decided by
/// [`refund::event_plan::fail_later`]) and says so loudly: the merchant told the customer the
/// money was returned. Not leased: its guards (that refund, succeeded) are the whole condition,
/// so two paths learning the same news write it once.
pub async fn fail_later<S: OperationLeases + ?Sized>(
    store: &S,
    write: &RefundFailedLater,
) -> Result<LateFailure, StoreError> {
    Ok(match store.fail_refund_later(write).await? {
        Recorded::Written(op) => {
            error!(
                order_id = %op.order_id,
                operation_id = %op.operation_id,
                refund = op.stripe_refund_id().map(|id| id.as_str()).unwrap_or(""),
                failure_reason = %write.failure_reason,
                amount = op.params.amount().minor_units(),
                "a refund failed after it succeeded: recorded failed, its amount is refundable \
                 again; RefundFailed published, the customer did not get the money back"
            );
            LateFailure::Recorded(op)
        }
        Recorded::Refused(Some(op)) if op.status == OperationStatus::Failed => {
            LateFailure::AlreadyFailed
        }
        Recorded::Refused(Some(op)) => LateFailure::Moved(op),
        Recorded::Refused(None) => LateFailure::Gone,
    })
}
