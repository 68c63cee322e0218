//! A refund's part of the executor: its one call at Stripe as [`refund::plan`] decides it, and an
//! event's refund applied through the same shell.

use charge_core::domain::OperationId;
use charge_core::operation::{Operation, OperationKey};
use charge_core::plan::Decision;
use charge_core::refund::event_plan::EventRefund;
use charge_core::refund::plan::RefundStep;
use charge_core::refund::StripeRefund;
use charge_core::store::ReleaseRefund;
use charge_core::{charge, refund};

use crate::ports::CreateRefund;

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
        charge: op.key().charge_of_order(),
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
