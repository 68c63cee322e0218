//! A charge's part of the executor: its one step at Stripe as [`charge::plan`] decides it, the
//! calls the decision asks for before it may be recorded, and an event's intent applied through the
//! same shell.

use charge_core::charge;
use charge_core::charge::event_plan::{self};
use charge_core::charge::plan::Step;
use charge_core::domain::OperationId;
use charge_core::operation::{Operation, OperationKey};
use charge_core::outcome::PaymentIntent;
use charge_core::plan::{Decision, FollowUp};

use crate::ports::{CancelPaymentIntent, CreatePaymentIntent};

use super::{run_claimed, settled_unwritten, EngineDeps, EventReport, ExecuteError, Planned};

/// A claimed charge's calls to Stripe ([`charge::plan::next_step`], then the calls its decision
/// asks for) and what their answers decide.
pub(super) async fn run(deps: &EngineDeps, op: &Operation) -> Planned {
    let step = charge::plan::next_step(op, deps.clock.now(), &deps.policy);
    let (decision, replayed) = act(deps, op, &step).await;
    let mut gateway_calls = u32::from(!matches!(step, Step::WaitForSearch(_)));
    let livemode = deps.gateway.livemode();
    let decision = follow_up(deps, op, decision, livemode, &mut gateway_calls).await;
    Planned {
        step: step.name(),
        gateway_calls,
        decision,
        replayed,
        refund: None,
        authorization: None,
    }
}

/// The step's one call to Stripe, and what its answer decides (with whether Stripe replayed it).
async fn act(deps: &EngineDeps, op: &Operation, step: &Step) -> (Decision, bool) {
    let (policy, livemode) = (&deps.policy, deps.gateway.livemode());
    match step {
        Step::Create => {
            let Some(create) = CreatePaymentIntent::for_operation(op) else {
                return (charge::plan::not_a_charge(op, deps.clock.now()), false);
            };
            let result = deps.gateway.create(&create).await;
            let replayed = result.as_ref().is_ok_and(|pi| pi.replayed);
            let now = deps.clock.now();
            (
                charge::plan::after_create(op, result, now, policy, livemode),
                replayed,
            )
        }
        Step::Retrieve(id) => {
            let result = deps.gateway.retrieve(id).await;
            let now = deps.clock.now();
            (
                charge::plan::after_retrieve(op, result, now, policy, livemode),
                false,
            )
        }
        Step::Search => {
            let result = deps.gateway.search_by_operation(&op.operation_id).await;
            let now = deps.clock.now();
            (
                charge::plan::after_search(op, result, now, policy, livemode),
                false,
            )
        }
        Step::WaitForSearch(until) => (charge::plan::wait_for_search(op, *until), false),
    }
}

/// The calls `decision` asks for before it may be recorded ([`FollowUp`]: the cancel of a
/// declined intent, the read of one whose cancel was refused), each answer deciding anew, on the
/// record as claimed. Bounded: the plan asks at most for a cancel and then a read (neither of their
/// decisions asks for a cancel again); the bound holds it if that ever changed.
async fn follow_up(
    deps: &EngineDeps,
    op: &Operation,
    mut decision: Decision,
    livemode: bool,
    gateway_calls: &mut u32,
) -> Decision {
    const MAX_FOLLOW_UPS: u32 = 2;
    for _ in 0..MAX_FOLLOW_UPS {
        let Some(next) = decision.then.take() else {
            return decision;
        };
        *gateway_calls += 1;
        decision = match next {
            FollowUp::Cancel { id, why } => {
                let result = deps
                    .gateway
                    .cancel(&CancelPaymentIntent::for_operation(op, id.clone()))
                    .await;
                let now = deps.clock.now();
                charge::plan::after_cancel(op, &id, &why, result, now, &deps.policy, livemode)
            }
            FollowUp::Retrieve { id, why } => {
                let result = deps.gateway.retrieve(&id).await;
                let now = deps.clock.now();
                charge::plan::after_cancel_refused(
                    op,
                    &id,
                    &why,
                    result,
                    now,
                    &deps.policy,
                    livemode,
                )
            }
            FollowUp::ReadDeadline { id } => {
                let result = deps.gateway.retrieve(&id).await;
                let now = deps.clock.now();
                charge::plan::after_retrieve(op, result, now, &deps.policy, livemode)
            }
        };
    }
    debug_assert!(decision.then.is_none(), "the plan asked for a third call");
    // What stands if a call is not made: unsettled, due (the next look asks again).
    decision.then = None;
    decision
}

/// Applies what Stripe said of one of the operation's PaymentIntents when an event told us to
/// look (`pi` is the retrieved intent, never the event's copy), through the same shell as
/// [`execute`]: the event rule ([`event_plan::after_event`]) decides on the record as
/// claimed, once; the report hands back that decision and the record as the shell last saw it,
/// and, when that is a settled record the shell did not write, the rule's answer for it.
///
/// No call but the caller's retrieve: the events function may hold a read-only key (its
/// restricted `PaymentIntents: Read` key). An intent Stripe holds declined is therefore recorded
/// as the plan's decision stands before its cancel: unknown, with the intent's id, due now; the
/// charge path (or the reconciler's re-drive) retrieves it and cancels it before `failed`.
pub async fn apply_event(
    deps: &EngineDeps,
    key: &OperationKey,
    operation_id: &OperationId,
    pi: PaymentIntent,
) -> Result<EventReport, ExecuteError> {
    let livemode = deps.gateway.livemode();
    let (pi_id, pi_status) = (pi.id.clone(), pi.status.clone());
    let (report, action) = run_claimed(deps, key, operation_id, |op| async move {
        let now = deps.clock.now();
        let (action, mut decision) = event_plan::after_event(&op, pi, now, &deps.policy, livemode);
        // The cancel is the charge path's to make (see above): what stands without it is
        // recorded.
        decision.then = None;
        let planned = Planned {
            step: "event",
            decision,
            gateway_calls: 0,
            replayed: false,
            refund: None,
            authorization: None,
        };
        (planned, action)
    })
    .await?;
    let settled = settled_unwritten(&report).map(|op| event_plan::decide(op, &pi_id, &pi_status));
    Ok(EventReport {
        report,
        action,
        settled,
    })
}
