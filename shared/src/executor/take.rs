//! A capture's or cancel's part of the executor: its calls at Stripe as [`take::plan`] decides
//! them, and the end of its charge's authorization to record with its outcome.

use charge_core::charge::state::Taker;
use charge_core::operation::Operation;
use charge_core::store::SettleAuthorization;
use charge_core::take;
use charge_core::take::plan::{TakeDecision, TakeStep};

use crate::ports::{CancelPaymentIntent, CapturePaymentIntent};

use super::{EngineDeps, Planned};

/// The most calls one capture or cancel execution makes: act, read, act again (or read, act,
/// read). Past it what stands is recorded (unknown, due), and the next attempt reads first.
const MAX_TAKE_CALLS: u32 = 3;

/// A claimed capture's or cancel's calls to Stripe ([`take::plan`]), and the end of its charge's
/// authorization to record with its outcome.
pub(super) async fn run(deps: &EngineDeps, op: &Operation) -> Planned {
    let policy = &deps.policy;
    let mut step = take::plan::next_step(op);
    let first = step.name(&op.kind);
    let mut gateway_calls = 0;
    let mut decided: TakeDecision;
    loop {
        decided = match &step {
            TakeStep::Nothing => take::plan::nothing_to_act_on(op, deps.clock.now()),
            TakeStep::Act(_) => {
                let result = act_on_intent(deps, op).await;
                take::plan::after_act(op, result, deps.clock.now(), policy)
            }
            TakeStep::Retrieve(id) => {
                let result = deps.gateway.retrieve(id).await;
                take::plan::after_retrieve(op, result, deps.clock.now(), policy)
            }
        };
        gateway_calls += u32::from(!matches!(step, TakeStep::Nothing));
        match decided.then.take() {
            Some(next) if gateway_calls < MAX_TAKE_CALLS => step = next,
            _ => break,
        }
    }
    let now = deps.clock.now();
    let authorization = decided.authorization.and_then(|outcome| {
        Some(SettleAuthorization {
            charge: op.charge_key(),
            taker: Taker::of(&op.kind, op.operation_id)?,
            outcome,
            now,
        })
    });
    Planned {
        step: first,
        decision: decided.decision,
        gateway_calls,
        replayed: false,
        refund: None,
        authorization,
    }
}

/// The capture or the cancel itself, under the operation's own key.
async fn act_on_intent(
    deps: &EngineDeps,
    op: &Operation,
) -> Result<charge_core::outcome::PaymentIntent, charge_core::outcome::GatewayError> {
    let missing = || charge_core::outcome::GatewayError::Rejected {
        detail: format!(
            "a {} operation without its payment intent",
            op.kind.as_str()
        ),
        param: None,
    };
    match op.kind {
        charge_core::domain::OperationKind::Capture(_) => {
            let req = CapturePaymentIntent::for_operation(op).ok_or_else(missing)?;
            deps.gateway.capture(&req).await
        }
        _ => {
            let req = CancelPaymentIntent::for_cancel_operation(op).ok_or_else(missing)?;
            deps.gateway.cancel(&req).await
        }
    }
}
