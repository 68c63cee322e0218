//! The charge executor: the seed's `execute_charge`, on the ports, safe to call any number of times
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

use std::sync::Arc;

use charge_core::charge::event_plan::{self, Action};
use charge_core::charge::plan::Step;
use charge_core::domain::{OperationId, PaymentIntentId, StripeRefundId};
use charge_core::operation::{
    Lease, LeaseToken, Operation, OperationKey, OperationStatus, Review, Taker,
};
use charge_core::outcome::PaymentIntent;
use charge_core::plan::{Decision, Disposition, FollowUp, Policy, ReviewClass};
use charge_core::refund::event_plan::{EventRefund, RefundEventAction};
use charge_core::refund::plan::RefundStep;
use charge_core::refund::StripeRefund;
use charge_core::store::{
    Claim, ClaimRequest, OutcomeRecord, Recorded, ReleaseRefund, SettleAuthorization,
};
use charge_core::take::plan::{TakeDecision, TakeStep};
use charge_core::time::Clock;
use charge_core::{charge, refund, take};
use tracing::{error, info, warn};

use crate::ports::{
    CancelPaymentIntent, CapturePaymentIntent, CreatePaymentIntent, CreateRefund, OperationStore,
    PaymentGateway, StoreError,
};

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
pub struct ChargeDeps {
    pub store: Arc<dyn OperationStore>,
    pub gateway: Arc<dyn PaymentGateway>,
    pub clock: Arc<dyn Clock>,
    pub policy: Policy,
}

/// Runs one operation as far as it can go now. See the module docs for the steps.
#[tracing::instrument(
    name = "execute_charge",
    skip_all,
    fields(order_id = %key.order_id, operation_id = %operation_id)
)]
pub async fn execute_charge(
    deps: &ChargeDeps,
    key: &OperationKey,
    operation_id: &OperationId,
) -> Result<ChargeReport, ExecuteError> {
    let (report, _) = run_claimed(deps, key, operation_id, |op| async move {
        if op.params.refund().is_some() {
            return (refund(deps, &op).await, ());
        }
        if op.kind.takes_authorization() {
            return (take(deps, &op).await, ());
        }
        let step = charge::plan::next_step(&op, deps.clock.now(), &deps.policy);
        let (decision, replayed) = act(deps, &op, &step).await;
        let mut gateway_calls = u32::from(!matches!(step, Step::WaitForSearch(_)));
        let livemode = deps.gateway.livemode();
        let decision = follow_up(deps, &op, decision, livemode, &mut gateway_calls).await;
        let planned = Planned {
            step: step.name(),
            gateway_calls,
            decision,
            replayed,
            refund: None,
            authorization: None,
        };
        (planned, ())
    })
    .await?;
    Ok(report)
}

/// The most calls one capture or cancel execution makes: act, read, act again (or read, act,
/// read). Past it what stands is recorded (unknown, due), and the next attempt reads first.
const MAX_TAKE_CALLS: u32 = 3;

/// A claimed capture's or cancel's calls to Stripe ([`take::plan`]), and the end of its charge's
/// authorization to record with its outcome.
async fn take(deps: &ChargeDeps, op: &Operation) -> Planned {
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
            charge: op.key().charge_of_order(),
            taker: Taker::of(op)?,
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
    deps: &ChargeDeps,
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
        charge_core::domain::OperationKind::Capture => {
            let req = CapturePaymentIntent::for_operation(op).ok_or_else(missing)?;
            deps.gateway.capture(&req).await
        }
        _ => {
            let req = CancelPaymentIntent::for_cancel_operation(op).ok_or_else(missing)?;
            deps.gateway.cancel(&req).await
        }
    }
}

/// The step's one call to Stripe, and what its answer decides (with whether Stripe replayed it).
async fn act(deps: &ChargeDeps, op: &Operation, step: &Step) -> (Decision, bool) {
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

/// A claimed refund operation's one call to Stripe ([`refund::plan::next_step`]) and what its
/// answer decides ([`refund::plan`]): the refund's id to record, and its reservation given back to
/// the charge when no money went back.
async fn refund(deps: &ChargeDeps, op: &Operation) -> Planned {
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
    deps: &ChargeDeps,
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
    deps: &ChargeDeps,
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

/// Applies what Stripe said of one of the operation's PaymentIntents when an event told us to
/// look (`pi` is the retrieved intent, never the event's copy), through the same shell as
/// [`execute_charge`]: the event rule ([`event_plan::after_event`]) decides on the record as
/// claimed, once; the report hands back that decision and the record as the shell last saw it,
/// and, when that is a settled record the shell did not write, the rule's answer for it.
///
/// No call but the caller's retrieve: the events function may hold a read-only key (its
/// restricted `PaymentIntents: Read` key). An intent Stripe holds declined is therefore recorded
/// as the plan's decision stands before its cancel: unknown, with the intent's id, due now; the
/// charge path (or the reconciler's re-drive) retrieves it and cancels it before `failed`.
pub async fn apply_event(
    deps: &ChargeDeps,
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

/// The calls `decision` asks for before it may be recorded ([`FollowUp`]: the cancel of a
/// declined intent, the read of one whose cancel was refused), each answer deciding anew, on the
/// record as claimed. Bounded: the plan asks at most for a cancel and then a read (neither of their
/// decisions asks for a cancel again); the bound holds it if that ever changed.
async fn follow_up(
    deps: &ChargeDeps,
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

/// The one shell every transition of an operation goes through: **claim** (one conditional write;
/// a settled, leased, in-review or missing operation returns here with `decide` never called),
/// **decide** on the record as claimed (`decide` may call Stripe, under the lease), **record**
/// the decision fenced on the lease and an unsettled status. `decide` may hand back a value of
/// its own (`T`: the event rule's action), returned beside the report when it ran.
async fn run_claimed<F, Fut, T>(
    deps: &ChargeDeps,
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
    deps: &ChargeDeps,
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
    deps: &ChargeDeps,
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
