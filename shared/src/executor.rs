//! The charge executor: the seed's `execute_charge`, on the ports, safe to call any number of times
//! for the same operation, concurrently or after a crash at any point.
//!
//! 1. **Claim** the operation in one conditional write (unsettled, not in review, no live lease);
//!    `first_attempted_at` is durable before Stripe is called. A settled operation returns here
//!    with zero gateway calls.
//! 2. **Act**, as [`plan::next_step`] decides: retrieve when the PaymentIntent id is known; search by
//!    `metadata['operation_id']` once the key window has passed (never create then); otherwise create
//!    with the key derived from the operation id. A declined intent is canceled before `failed` is
//!    recorded (the calls a decision asks for, [`plan::FollowUp`], still under the lease).
//! 3. **Record**, fenced on our lease token and on an unsettled status, so a stale lease holder or a
//!    late duplicate can never overwrite a settled record.

pub mod plan;

use std::sync::Arc;
use std::time::Duration;

use tracing::{error, info, warn};

use crate::domain::{OperationId, PaymentIntentId};
use crate::operation::{Lease, LeaseToken, Operation, OperationKey, OperationStatus, Review};
use crate::outcome::{PaymentIntent, RetryCause};
use crate::ports::Clock;
use crate::ports::{
    CancelPaymentIntent, Claim, ClaimRequest, CreatePaymentIntent, OperationStore, OutcomeRecord,
    PaymentGateway, Recorded, StoreError,
};

pub use plan::{Decision, FollowUp, ReviewClass, Step};

/// The timings that govern execution and reconciliation.
#[derive(Debug, Clone)]
pub struct ChargePolicy {
    /// How long after `first_attempted_at` a create may be re-sent with the same key. Stripe may prune
    /// keys once they are 24 h old; 23 h leaves a margin (our judgement, not Stripe's guarantee).
    pub key_window: Duration,
    /// How long after the key window before we trust Stripe search (which is not read-after-write).
    pub search_min_age: Duration,
    /// How long a claim protects the Stripe call. Longer than the HTTP client's total timeout.
    pub lease_ttl: Duration,
    /// How long a fresh `pending` operation may wait for its queue message before the reconciler
    /// re-sends it.
    pub pending_grace: Duration,
    /// When to look again after "nothing happened, retry later" (429, 409, auth).
    pub retry_after: Duration,
    /// Backoff for unknown outcomes: `base * 2^(attempts-1)`, capped at `max`.
    pub unknown_backoff_base: Duration,
    pub unknown_backoff_max: Duration,
    /// How long after the first attempt a PaymentIntent may stay `requires_action` or
    /// `processing` before the operation goes to review (`stuck_<status>`).
    pub stuck_after: Duration,
}

impl Default for ChargePolicy {
    fn default() -> Self {
        Self {
            key_window: Duration::from_secs(23 * 3600),
            search_min_age: Duration::from_secs(10 * 60),
            lease_ttl: Duration::from_secs(60),
            pending_grace: Duration::from_secs(5 * 60),
            retry_after: Duration::from_secs(60),
            unknown_backoff_base: Duration::from_secs(60),
            unknown_backoff_max: Duration::from_secs(3600),
            stuck_after: Duration::from_secs(72 * 3600),
        }
    }
}

/// What the caller should do with the message that asked for this execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// It was settled before we came: nothing was called.
    AlreadySettled,
    /// We settled it now.
    Settled,
    /// Recorded as unknown (or still pending); the unknown index schedules the next look.
    Scheduled,
    /// Nothing happened at Stripe and the store is unchanged but for the error: retry the message.
    RetryLater(RetryCause),
    /// Someone else holds a live lease on it: retry the message later.
    Busy,
    /// A person must look at it; the reason is recorded on the operation.
    InReview(String),
    /// Our outcome was refused because someone else's write came first (lease lost, or settled
    /// meanwhile). The other writer's record stands.
    Superseded,
}

impl Disposition {
    /// True when the triggering message should be retried (reported as a batch item failure).
    pub fn wants_retry(&self) -> bool {
        matches!(self, Disposition::RetryLater(_) | Disposition::Busy)
    }
}

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
    pub policy: ChargePolicy,
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
    let livemode = deps.gateway.livemode();
    run_claimed(deps, key, operation_id, |op| async move {
        let now = deps.clock.now();
        let step = plan::next_step(&op, now, &deps.policy);
        let mut replayed = false;
        let mut gateway_calls = u32::from(!matches!(step, Step::WaitForSearch(_)));
        let decision = match &step {
            Step::Create => {
                let result = deps
                    .gateway
                    .create(&CreatePaymentIntent::for_operation(&op))
                    .await;
                replayed = result.as_ref().is_ok_and(|pi| pi.replayed);
                plan::after_create(&op, result, deps.clock.now(), &deps.policy, livemode)
            }
            Step::Retrieve(id) => {
                let result = deps.gateway.retrieve(id).await;
                plan::after_retrieve(&op, result, deps.clock.now(), &deps.policy, livemode)
            }
            Step::Search => {
                let result = deps.gateway.search_by_operation(&op.operation_id).await;
                plan::after_search(&op, result, deps.clock.now(), &deps.policy, livemode)
            }
            Step::WaitForSearch(until) => plan::wait_for_search(&op, *until),
        };
        let decision = follow_up(deps, &op, decision, livemode, &mut gateway_calls).await;
        Planned {
            step: step.name(),
            gateway_calls,
            decision,
            replayed,
        }
    })
    .await
}

/// Applies what Stripe said of one of the operation's PaymentIntents when an event told us to
/// look (`pi` is the retrieved intent, never the event's copy), through the same shell as
/// [`execute_charge`]: the decision ([`plan::after_event`]) is made on the record as claimed.
///
/// No call but the caller's retrieve: the events function may hold a read-only key (its
/// restricted `PaymentIntents: Read` key). An intent Stripe holds declined is therefore recorded
/// as the plan's decision stands before its cancel: unknown, with the intent's id, due now; the
/// charge path (or the reconciler's re-drive) retrieves it and cancels it before `failed`.
/// `decided` receives the event's action on that record, for the caller's report.
pub async fn apply_event(
    deps: &ChargeDeps,
    key: &OperationKey,
    operation_id: &OperationId,
    pi: PaymentIntent,
    decided: &mut Option<crate::webhook::Action>,
) -> Result<ChargeReport, ExecuteError> {
    let livemode = deps.gateway.livemode();
    run_claimed(deps, key, operation_id, |op| async move {
        let (action, mut decision) =
            plan::after_event(&op, pi, deps.clock.now(), &deps.policy, livemode);
        // The cancel is the charge path's to make (see above): what stands without it is
        // recorded.
        decision.then = None;
        *decided = Some(action);
        Planned {
            step: "event",
            decision,
            gateway_calls: 0,
            replayed: false,
        }
    })
    .await
}

/// What the middle of the shell decided, with what it cost.
pub struct Planned {
    /// A short name of what was done, for the log (`create`, `retrieve`, `event`, ...).
    pub step: &'static str,
    pub decision: Decision,
    pub gateway_calls: u32,
    pub replayed: bool,
}

/// The calls `decision` asks for before it may be recorded ([`plan::FollowUp`]: the cancel of a
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
                plan::after_cancel(op, &id, &why, result, now, &deps.policy, livemode)
            }
            FollowUp::Retrieve { id, why } => {
                let result = deps.gateway.retrieve(&id).await;
                let now = deps.clock.now();
                plan::after_cancel_refused(op, &id, &why, result, now, &deps.policy, livemode)
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
/// the decision fenced on the lease and an unsettled status.
async fn run_claimed<F, Fut>(
    deps: &ChargeDeps,
    key: &OperationKey,
    operation_id: &OperationId,
    decide: F,
) -> Result<ChargeReport, ExecuteError>
where
    F: FnOnce(Operation) -> Fut,
    Fut: std::future::Future<Output = Planned>,
{
    let now = deps.clock.now();
    let lease = Lease {
        token: LeaseToken::new_random(),
        expires_at: now.plus(deps.policy.lease_ttl),
    };
    let claim = deps
        .store
        .claim(&ClaimRequest {
            key: key.clone(),
            operation_id: *operation_id,
            lease,
            now,
        })
        .await?;
    let op = match claim {
        Claim::Claimed(op) => op,
        Claim::Settled(op) => {
            info!(status = %op.status, "already settled; no gateway call");
            return Ok(report(
                op.status,
                op.external_id,
                Disposition::AlreadySettled,
                0,
            ));
        }
        Claim::Leased(op) => {
            info!("another execution holds the lease");
            return Ok(report(op.status, op.external_id, Disposition::Busy, 0));
        }
        Claim::InReview(op) => {
            let reason = op.review.map(|r| r.reason).unwrap_or_default();
            info!(%reason, "in review; left for an operator");
            return Ok(report(
                op.status,
                op.external_id,
                Disposition::InReview(reason),
                0,
            ));
        }
        Claim::NotFound => {
            return Err(ExecuteError::NotFound {
                order_id: key.order_id.to_string(),
                operation_id: *operation_id,
            })
        }
    };

    let Planned {
        step,
        decision,
        gateway_calls,
        replayed,
    } = decide(op).await;
    debug_assert!(decision.then.is_none(), "a call asked for was not made");

    let now = deps.clock.now();
    let recorded = deps
        .store
        .record(&OutcomeRecord {
            key: key.clone(),
            operation_id: *operation_id,
            lease_token: lease.token,
            status: decision.status,
            external_id: decision.external_id.clone(),
            last_error: decision.last_error.clone(),
            review: decision.review.as_ref().map(|(_, reason)| Review {
                reason: reason.clone(),
                flagged_at: now,
            }),
            next_due_at: decision.next_due_at,
            now,
        })
        .await?;
    match recorded {
        Recorded::Written(op) => {
            info!(
                step,
                status = %op.status,
                external_id = op.external_id.as_deref().unwrap_or(""),
                error = op.last_error.as_deref().unwrap_or(""),
                replayed,
                "recorded"
            );
            if let Some((class, reason)) = &decision.review {
                // Loud on purpose: an order that needs a person must never sit unnoticed. The
                // caller turns `sent_to_review` into the `SentToReview` metric (alarmed).
                error!(
                    order_id = %op.order_id,
                    operation_id = %op.operation_id,
                    reason_class = class.as_str(),
                    %reason,
                    "sent to review: an operator must settle this operation (chargectl unknowns --review)"
                );
            }
            Ok(ChargeReport {
                sent_to_review: decision.review.as_ref().map(|(class, _)| *class),
                replayed,
                ..report(
                    op.status,
                    op.external_id,
                    decision.disposition(),
                    gateway_calls,
                )
            })
        }
        Recorded::Refused(current) => {
            warn!(
                step,
                wanted = %decision.status,
                "outcome refused by the store: lease lost or already settled"
            );
            let (status, external_id) = current
                .map(|op| (op.status, op.external_id))
                .unwrap_or((decision.status, decision.external_id));
            Ok(ChargeReport {
                replayed,
                ..report(status, external_id, Disposition::Superseded, gateway_calls)
            })
        }
    }
}

fn report(
    status: OperationStatus,
    external_id: Option<PaymentIntentId>,
    disposition: Disposition,
    gateway_calls: u32,
) -> ChargeReport {
    ChargeReport {
        status,
        external_id,
        disposition,
        gateway_calls,
        sent_to_review: None,
        replayed: false,
    }
}
