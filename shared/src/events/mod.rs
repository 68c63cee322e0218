//! Stripe's events, received as an idempotent inbox beside the reconciler: most unknown
//! operations settle seconds after Stripe knows, and the reconciler stays the safety net for
//! every event that is late, lost or refused.
//!
//! Two ways in, one path: a signed webhook delivery ([`receive`]) and an EventBridge event from
//! Stripe's partner event source ([`receive_eventbridge`]: AWS authenticated the delivery, the
//! Stripe event is its `detail`). Then, on the ports:
//! 1. **Verify** (webhook: the `Stripe-Signature` against every secret of the endpoint,
//!    [`signature`]; EventBridge: a Stripe source, the configured one) before reading anything.
//!    Refused: nothing written.
//! 2. **Parse** ([`event`]); types we do not act on and PaymentIntents that are not ours are
//!    acknowledged and counted, unwritten.
//! 3. **Admit** the event id into the inbox ([`EventInbox`]) with a conditional put: a redelivery is a
//!    duplicate, acknowledged, with no other effect.
//! 4. **Find** the operation on the table key from `metadata.order_id` (a strongly consistent
//!    GetItem, no index) and check `metadata.operation_id` is the one recorded.
//! 5. **Ask Stripe.** An event is a hint: what it says is never acted on. Unless it could change
//!    nothing ([`charge::event_plan::needs_no_check`]), the PaymentIntent is retrieved and checked
//!    to be this operation's ([`charge_core::charge::plan::intent_mismatch`]: metadata, amount,
//!    currency, mode), and an event claiming a final state must find Stripe holding it. Otherwise
//!    nothing moves, and a person is paged ([`Reception::Mismatch`], the `EventMismatch` metric).
//! 6. **Apply** through the executor's own shell ([`crate::executor::charge::apply_event`]): claim, decide
//!    on the claimed record with Stripe's answer ([`charge::event_plan::after_event`]), record
//!    fenced on that lease and an unsettled status. The shell hands back the record it last saw
//!    (as written, as found settled or in review, or the one that beat our write) and the rule's
//!    answer for it (on the record as claimed; on a settled one it found and did not write), so
//!    nothing is read or decided again after it. (The record as read in step 4 is decided on
//!    first only to spare the claim's write when the event can change nothing.) A
//!    settled record is never written; Stripe contradicting it pages. Nothing here creates, confirms or cancels anything at Stripe (its
//!    key may be read-only): an intent Stripe holds declined is recorded unknown with its id,
//!    due now, and the charge path (or the reconciler's re-drive) cancels it before `failed`.
//!
//! A refund event (`refund.created`, `refund.updated`, `refund.failed`,
//! `charge.refund.updated`) takes the same steps with its refund: found among the order's refunds
//! by `metadata.order_id` and `metadata.operation_id` (the order's partition, strongly
//! consistent; a settled refund too, which the unknown index no longer lists), the refund
//! retrieved at Stripe, and [`charge_core::refund::event_plan::decide`] deciding: an unsettled
//! refund settles through the executor's shell on the refund plan's own rules
//! ([`crate::executor::refund::apply_refund_event`], which answers with the refund rule for a settled
//! record it found and did not write); a succeeded refund that Stripe says failed later
//! takes the store's one settled transition (`fail_refund_later`: failed, its reservation back
//! on the charge, [`Reception::RefundFailedLater`]); every other contradiction pages, unwritten.
//!
//! A dispute event (`charge.dispute.created`, `.updated`, `.closed`, `.funds_withdrawn`,
//! `.funds_reinstated`) names only its dispute: after the inbox, the dispute is retrieved at
//! Stripe (what the event said of it is never read), its order found by its PaymentIntent's
//! metadata (a retrieve: the charge carries none of ours), and the dispute's plan writes what
//! Stripe holds through its shell ([`crate::executor::dispute::record_dispute`]). A dispute of
//! an intent that is not ours is acknowledged and counted (`not_ours`); one Stripe does not hold
//! pages as a mismatch (`unknown_dispute`); a dispute event whose object names no dispute is
//! acknowledged as any event of a type not acted on.
//!
//! If acting fails after the inbox admitted the event (the store or Stripe unreachable, the
//! charge function holding the lease, the invocation's time running out), the inbox entry is
//! forgotten and the answer asks for a retry (non-2xx, or a failed invocation), so Stripe's or
//! EventBridge's retry is processed. If even the forget fails, the operation is still driven by
//! the unknown index: a lost event costs time, never correctness.

pub mod event;
pub mod signature;

use std::sync::Arc;
use std::time::Duration;

use tracing::{error, info, warn, Instrument};

use charge_core::refund::event_plan::RefundEventAction;
use charge_core::stripe_object::{EventCopy, StripeObject};
use charge_core::{charge, refund};

use crate::executor::dispute::{DisputeRecordError, DisputeRecording};
use crate::executor::refund::LateFailure;
use crate::executor::{self, EngineDeps, EventReport, ExecuteError, RefundEventReport};
use crate::ports::{Admitted, EventInbox, StoreError, INBOX_TTL};
use crate::telemetry::ErrorChain;
use charge_core::charge::event_plan::{Action, EventIntent, EventMismatch, Ignored};
use charge_core::dispute::plan::Unchanged;
use charge_core::domain::{
    DisputeId, OperationId, OperationKind, OrderId, PaymentIntentId, StripeRefundId,
};
use charge_core::operation::{Operation, OperationKey, OperationStatus};
use charge_core::outcome::{GatewayError, PaymentIntent, PaymentIntentStatus};
use charge_core::plan::{Disposition, ReviewClass};
use charge_core::refund::event_plan::EventRefund;
use charge_core::refund::StripeRefund;
use charge_core::store::RefundFailedLater;
use charge_core::time::Timestamp;

pub use event::{EventBridgeEvent, StripeEvent, HANDLED_TYPES, STRIPE_PARTNER_SOURCE_PREFIX};
pub use signature::{SignatureError, WebhookSecret, DEFAULT_TOLERANCE, MAX_BODY_BYTES};

/// Everything one event needs, built once per process.
#[derive(Clone)]
pub struct EventsDeps {
    /// The executor's own dependencies: the store, the gateway (used for `retrieve` only), the
    /// clock and the policy its plan decides with.
    pub charge: EngineDeps,
    pub inbox: Arc<dyn EventInbox>,
    /// The webhook endpoint's signing secrets (two while one is rolled); `None` when the stack
    /// has no webhook route, and every HTTP delivery is refused.
    pub secrets: Option<Vec<WebhookSecret>>,
    pub tolerance: Duration,
    /// The partner event source EventBridge events must come from, when configured.
    pub event_source: Option<String>,
}

/// Why a delivery was refused (400, or a failed EventBridge invocation): nothing was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    Signature(SignatureError),
    /// Authenticated but not an event we can read.
    Unreadable(String),
    /// A webhook delivery to a stack that has no webhook secret (no route should exist).
    WebhookDisabled,
}

impl Rejection {
    pub fn as_str(&self) -> &'static str {
        match self {
            Rejection::Signature(e) => e.as_str(),
            Rejection::Unreadable(_) => "unreadable",
            Rejection::WebhookDisabled => "webhook_disabled",
        }
    }
}

/// Why an event was not acted on now and must come again: the inbox entry was forgotten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deferred {
    /// The charge function holds the operation's lease right now.
    Busy,
    /// DynamoDB (the inbox or the table) failed.
    Store,
    /// Stripe's retrieve said "later" (rate limit, key in use, auth) or gave no answer.
    Stripe,
    /// Our fenced write was refused without the record being settled (the lease was lost).
    LeaseLost,
    /// The invocation's time ran out before the event was acted on.
    Deadline,
}

impl Deferred {
    pub fn as_str(&self) -> &'static str {
        match self {
            Deferred::Busy => "busy",
            Deferred::Store => "store_unavailable",
            Deferred::Stripe => "stripe_unavailable",
            Deferred::LeaseLost => "lease_lost",
            Deferred::Deadline => "deadline",
        }
    }
}

/// What happened to one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reception {
    /// Refused before reading: nothing written.
    Rejected(Rejection),
    /// Acknowledged, no change (besides the inbox entry when admitted).
    Ignored(Ignored),
    /// Acknowledged: the operation was moved (settled, PaymentIntent recorded, or flagged for
    /// review) on Stripe's answer.
    Applied {
        status: OperationStatus,
        /// Sent to review by this event, for this class of reason.
        review: Option<ReviewClass>,
    },
    /// Acknowledged: Stripe says a refund recorded `succeeded` failed later; recorded `failed`
    /// with its reservation given back to the charge (`RefundFailedAfterSuccess`, paged: the
    /// customer did not get the money back after all).
    RefundFailedLater,
    /// Acknowledged: a dispute recorded (created, moved or settled) as Stripe holds it, its
    /// funds withdrawn but not reserved on the order's charge (the order's refunds leave too
    /// little: refunded + disputed would exceed what was taken). Counted `DisputeUnreserved`
    /// (paged); the record stays on its re-read schedule like any open dispute.
    DisputeUnreserved { status: OperationStatus },
    /// Acknowledged: Stripe contradicts a settled record; nothing written, a person is paged.
    SettledConflict { reason: &'static str },
    /// Acknowledged: Stripe does not confirm what the event says; nothing written, a person is
    /// paged (a forged or misrouted event, or a leaked secret).
    Mismatch(EventMismatch),
    /// Must come again: the inbox entry was forgotten.
    RetryLater(Deferred),
}

impl Reception {
    /// The HTTP status to answer a webhook delivery with.
    pub fn http_status(&self) -> u16 {
        match self {
            Reception::Rejected(Rejection::WebhookDisabled) => 404,
            Reception::Rejected(_) => 400,
            Reception::Ignored(_)
            | Reception::Applied { .. }
            | Reception::DisputeUnreserved { .. }
            | Reception::RefundFailedLater
            | Reception::SettledConflict { .. }
            | Reception::Mismatch(_) => 200,
            // 409: the charge function is mid-call on this operation; Stripe retries later.
            Reception::RetryLater(Deferred::Busy) => 409,
            Reception::RetryLater(_) => 500,
        }
    }

    /// True when the event must be delivered again (a non-2xx answer, a failed invocation).
    pub fn wants_retry(&self) -> bool {
        matches!(self, Reception::RetryLater(_))
    }
}

/// One event's result, for the response, the metrics and the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryReport {
    pub reception: Reception,
    /// The event id, once the body was verified and read.
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    /// Stripe calls made (retrieve only; 0 or 1).
    pub gateway_calls: u32,
}

impl DeliveryReport {
    fn new(reception: Reception) -> Self {
        Self {
            reception,
            event_id: None,
            event_type: None,
            gateway_calls: 0,
        }
    }
}

/// Why acting on an event failed; logged with its whole chain, then answered as [`Deferred`].
#[derive(Debug, thiserror::Error)]
enum ActError {
    #[error("inbox unavailable")]
    Inbox(#[source] StoreError),
    #[error("operation store unavailable")]
    Store(#[source] StoreError),
    #[error("Stripe's retrieve of {id} did not answer")]
    Retrieve {
        id: PaymentIntentId,
        #[source]
        source: GatewayError,
    },
    #[error("Stripe's retrieve of refund {id} did not answer")]
    RetrieveRefund {
        id: StripeRefundId,
        #[source]
        source: GatewayError,
    },
    #[error("Stripe's retrieve of dispute {id} did not answer")]
    RetrieveDispute {
        id: DisputeId,
        #[source]
        source: GatewayError,
    },
    #[error("the fenced write was refused (lease lost)")]
    LeaseLost,
    #[error("the charge function holds the lease")]
    Busy,
    #[error("out of time after {0:?}")]
    Deadline(Duration),
}

impl ActError {
    fn deferred(&self) -> Deferred {
        match self {
            ActError::Inbox(_) | ActError::Store(_) => Deferred::Store,
            ActError::Retrieve { .. }
            | ActError::RetrieveRefund { .. }
            | ActError::RetrieveDispute { .. } => Deferred::Stripe,
            ActError::LeaseLost => Deferred::LeaseLost,
            ActError::Busy => Deferred::Busy,
            ActError::Deadline(_) => Deferred::Deadline,
        }
    }
}

/// Handles one webhook delivery: `signature_header` is the `Stripe-Signature` value, `body` the
/// raw bytes exactly as received. `budget` bounds the work after the inbox admitted the event
/// (the caller's remaining time, less a margin): past it the entry is forgotten. See the module
/// docs for the steps.
pub async fn receive(
    deps: &EventsDeps,
    signature_header: Option<&str>,
    body: &[u8],
    budget: Option<Duration>,
) -> DeliveryReport {
    let Some(secrets) = &deps.secrets else {
        warn!(
            reason = "webhook_disabled",
            "webhook rejected: this stack has no webhook secret"
        );
        return DeliveryReport::new(Reception::Rejected(Rejection::WebhookDisabled));
    };
    let now = deps.charge.clock.now();
    if let Err(e) = signature::verify(signature_header, body, secrets, now, deps.tolerance) {
        warn!(reason = e.as_str(), error = %ErrorChain(&e), "webhook rejected");
        return DeliveryReport::new(Reception::Rejected(Rejection::Signature(e)));
    }
    accept(deps, StripeEvent::parse(body), budget).await
}

/// Handles one EventBridge event from Stripe's partner event source (the whole envelope, as the
/// runtime handed it to the function). The same path as a webhook after the authentication. No
/// size check here: EventBridge refuses an event over 256 KB (`MAX_BODY_BYTES`) before it is
/// delivered.
pub async fn receive_eventbridge(
    deps: &EventsDeps,
    envelope: EventBridgeEvent,
    budget: Option<Duration>,
) -> DeliveryReport {
    let event = StripeEvent::from_eventbridge(&envelope, deps.event_source.as_deref());
    accept(deps, event, budget).await
}

/// From a read (or unreadable) authenticated event on: the span, the filters, then the inbox.
async fn accept(
    deps: &EventsDeps,
    event: Result<StripeEvent, event::EventParseError>,
    budget: Option<Duration>,
) -> DeliveryReport {
    let event = match event {
        Ok(event) => event,
        Err(e) => {
            warn!(reason = "unreadable", error = %ErrorChain(&e), "event rejected");
            return DeliveryReport::new(Reception::Rejected(Rejection::Unreadable(e.0)));
        }
    };
    let mut report = DeliveryReport {
        event_id: Some(event.id.clone()),
        event_type: Some(event.event_type.clone()),
        ..DeliveryReport::new(Reception::Ignored(Ignored::UnhandledType))
    };
    let span = tracing::info_span!("event", event_id = %event.id, event_type = %event.event_type);
    // Entered only for these synchronous checks: a span guard is never held across an `.await`
    // (tracing documents that as giving wrong traces under concurrency); the rest is instrumented.
    if let (Some(refund), true) = (&event.refund, event.is_handled()) {
        let refund = refund.clone();
        let calls = &mut report.gateway_calls;
        report.reception = accept_refund(deps, &event.id, refund, budget, calls, &span).await;
        return report;
    }
    if let (Some(dispute), true) = (&event.dispute, event.is_handled()) {
        let calls = &mut report.gateway_calls;
        let acting = act_dispute(deps, dispute, calls);
        report.reception = admitted(deps, &event.id, budget, acting)
            .instrument(span.clone())
            .await;
        return report;
    }
    let mut intent = {
        let _entered = span.enter();
        match (&event.intent, event.is_handled()) {
            (Some(intent), true) => intent.clone(),
            (None, _) if event.event_type == event::CHARGE_CAPTURED => {
                info!(
                    "a captured charge without a PaymentIntent (not made by this system); ignored"
                );
                report.reception = Reception::Ignored(Ignored::NotOurs);
                return report;
            }
            _ => {
                info!("event type not handled; ignored");
                return report;
            }
        }
    };
    if event.event_type == event::CHARGE_CAPTURED && intent.operation_id.is_none() {
        // A charge carries no metadata of ours: its intent does. Stripe's word names the
        // operation; the claim is still checked like any other once the operation is found.
        let calls = &mut report.gateway_calls;
        match ours_by_intent(deps, &intent.id, calls)
            .instrument(span.clone())
            .await
        {
            Ok(found) => (intent.order_id, intent.operation_id) = found,
            Err(e) => {
                report.reception = Reception::RetryLater(e.deferred());
                return report;
            }
        }
    }
    let (intent, order_id, operation_id) = {
        let _entered = span.enter();
        let (Some(order_id), Some(operation_id)) = (intent.order_id.clone(), intent.operation_id)
        else {
            info!(payment_intent = %intent.id, "PaymentIntent without our metadata; ignored");
            report.reception = Reception::Ignored(Ignored::NotOurs);
            return report;
        };
        (intent, order_id, operation_id)
    };
    let op_span = tracing::info_span!(
        parent: &span,
        "operation",
        order_id = %order_id,
        operation_id = %operation_id
    );
    // The attempt the intent's metadata names (absent: the first); `read` checks the operation
    // id, and finds it among the order's attempts when the metadata named none or another.
    let key = OperationKey::charge_attempt(order_id.clone(), intent.attempt.unwrap_or(1))
        .unwrap_or_else(|_| OperationKey::charge(order_id));
    let target = Target {
        key,
        operation_id,
        intent,
    };
    let acting = act(deps, &target, &mut report.gateway_calls);
    report.reception = admitted(deps, &event.id, budget, acting)
        .instrument(op_span)
        .await;
    report
}

/// The order and operation a PaymentIntent's own metadata names (a `charge.captured` event's
/// charge carries none, nor does a dispute), read at Stripe; none when it is not ours. A read
/// that may succeed later defers the event.
async fn ours_by_intent(
    deps: &EventsDeps,
    id: &PaymentIntentId,
    gateway_calls: &mut u32,
) -> Result<(Option<OrderId>, Option<OperationId>), ActError> {
    *gateway_calls += 1;
    match deps.charge.gateway.retrieve(id).await {
        Ok(pi) => Ok((
            pi.order_id.as_deref().and_then(|o| OrderId::parse(o).ok()),
            pi.operation_id
                .as_deref()
                .and_then(|o| OperationId::parse(o).ok()),
        )),
        Err(e @ (GatewayError::RetryLater { .. } | GatewayError::Ambiguous { .. })) => {
            Err(ActError::Retrieve {
                id: id.clone(),
                source: e,
            })
        }
        Err(e) => {
            warn!(error = %ErrorChain(&e), "Stripe refused the retrieve of a charge's intent");
            Ok((None, None))
        }
    }
}

/// A refund event from its filter on: not ours unless it carries our metadata; then the inbox
/// and the refund's rules ([`act_refund`]).
async fn accept_refund(
    deps: &EventsDeps,
    event_id: &str,
    refund: EventRefund,
    budget: Option<Duration>,
    gateway_calls: &mut u32,
    span: &tracing::Span,
) -> Reception {
    let (Some(order_id), Some(operation_id)) = (refund.order_id.clone(), refund.operation_id)
    else {
        let _entered = span.enter();
        info!(refund = %refund.id, "refund without our metadata; ignored");
        return Reception::Ignored(Ignored::NotOurs);
    };
    let op_span = tracing::info_span!(
        parent: span,
        "operation",
        order_id = %order_id,
        operation_id = %operation_id
    );
    let target = RefundTarget {
        order_id,
        operation_id,
        refund,
    };
    let acting = act_refund(deps, &target, gateway_calls);
    admitted(deps, event_id, budget, acting)
        .instrument(op_span)
        .await
}

/// A dispute event (the dispute module's steps): the dispute retrieved at Stripe (what the
/// event said of it is never read), its order found by its PaymentIntent's metadata (a charge
/// carries none of ours), then the dispute's plan through its shell
/// ([`executor::dispute::record_dispute`]). A dispute of an intent that is not ours is
/// acknowledged and counted, not an error.
async fn act_dispute(
    deps: &EventsDeps,
    id: &DisputeId,
    gateway_calls: &mut u32,
) -> Result<Reception, ActError> {
    *gateway_calls += 1;
    let dispute = match deps.charge.gateway.retrieve_dispute(id).await {
        Ok(dispute) if dispute.id == *id => dispute,
        Ok(other) => {
            warn!(dispute = %id, answered = %other.id, "Stripe answered another dispute; nothing written");
            return Ok(Reception::Mismatch(EventMismatch::UnknownDispute));
        }
        Err(e @ (GatewayError::RetryLater { .. } | GatewayError::Ambiguous { .. })) => {
            return Err(ActError::RetrieveDispute {
                id: id.clone(),
                source: e,
            });
        }
        Err(e) => {
            warn!(dispute = %id, error = %ErrorChain(&e), "Stripe has no such dispute; nothing written");
            return Ok(Reception::Mismatch(EventMismatch::UnknownDispute));
        }
    };
    let Some(intent) = &dispute.payment_intent else {
        info!(dispute = %id, "a dispute of a charge without a PaymentIntent: not ours");
        return Ok(Reception::Ignored(Ignored::NotOurs));
    };
    let (Some(order_id), _) = ours_by_intent(deps, intent, gateway_calls).await? else {
        info!(dispute = %id, payment_intent = %intent, "a dispute of an intent without our metadata: not ours");
        return Ok(Reception::Ignored(Ignored::NotOurs));
    };
    let now = deps.charge.clock.now();
    let recorded = executor::dispute::record_dispute(
        &*deps.charge.store,
        &order_id,
        &dispute,
        now,
        &deps.charge.policy.dispute,
    )
    .instrument(tracing::info_span!("dispute", order_id = %order_id, dispute = %id))
    .await;
    match recorded {
        Ok(DisputeRecording::Written {
            record,
            unreserved: true,
            ..
        }) => {
            error!(dispute = %id, status = %record.status, reason = record.last_error.as_deref().unwrap_or(""),
                "dispute recorded without its reservation: answer it in Stripe's dashboard \
                 (Payments > Disputes) with the refund as evidence; chargectl show <order_id>");
            Ok(Reception::DisputeUnreserved {
                status: record.status,
            })
        }
        Ok(DisputeRecording::Written { record, .. }) => Ok(Reception::Applied {
            status: record.status,
            review: None,
        }),
        Ok(DisputeRecording::Unchanged(why)) => Ok(match why {
            Unchanged::NotOurs => Reception::Ignored(Ignored::NotOurs),
            Unchanged::Settled => Reception::Ignored(Ignored::AlreadySettled),
            Unchanged::AsStripeHolds => Reception::Ignored(Ignored::NothingNew),
            Unchanged::Unrecordable(why) => {
                error!(dispute = %id, reason = %why, "a dispute no record can hold; a person must look");
                Reception::Mismatch(EventMismatch::DisputeUnrecordable)
            }
        }),
        Err(DisputeRecordError::Store(e)) => Err(ActError::Store(e)),
        Err(DisputeRecordError::Contended) => Err(ActError::Busy),
    }
}

/// The operation an event names, and what it claims about its PaymentIntent.
struct Target {
    key: OperationKey,
    operation_id: OperationId,
    intent: EventIntent,
}

/// The refund operation a refund event names, and what it claims about the refund.
struct RefundTarget {
    order_id: OrderId,
    operation_id: OperationId,
    refund: EventRefund,
}

/// The inbox, then `acting` (run only once admitted) within the budget; an event not acted on is
/// forgotten.
async fn admitted(
    deps: &EventsDeps,
    event_id: &str,
    budget: Option<Duration>,
    acting: impl std::future::Future<Output = Result<Reception, ActError>>,
) -> Reception {
    let now = deps.charge.clock.now();
    match deps.inbox.admit(event_id, now, now.plus(INBOX_TTL)).await {
        Ok(Admitted::New) => {}
        Ok(Admitted::Duplicate) => {
            info!("event seen before; nothing to do");
            return Reception::Ignored(Ignored::Duplicate);
        }
        Err(e) => {
            let e = ActError::Inbox(e);
            error!(error = %ErrorChain(&e), "inbox unavailable; the event must come again");
            return Reception::RetryLater(e.deferred());
        }
    }
    let result = match budget {
        None => acting.await,
        Some(budget) => tokio::time::timeout(budget, acting)
            .await
            .unwrap_or(Err(ActError::Deadline(budget))),
    };
    let e = match result {
        Ok(reception) => return reception,
        Err(e) => e,
    };
    warn!(
        error = %ErrorChain(&e),
        "not applied; forgetting the event so that its retry is processed"
    );
    if let Err(forget) = deps.inbox.forget(event_id).await {
        // The retry will be taken for a duplicate; the unknown index still drives the
        // operation, so this costs time only.
        error!(error = %ErrorChain(&forget), "could not forget the event; the reconciler will settle it");
    }
    Reception::RetryLater(e.deferred())
}

/// Steps 4 to 6 of the module docs.
async fn act(
    deps: &EventsDeps,
    target: &Target,
    gateway_calls: &mut u32,
) -> Result<Reception, ActError> {
    let Some(op) = read(deps, target).await? else {
        info!("no such operation; ignored");
        return Ok(Reception::Ignored(Ignored::UnknownOperation));
    };
    if charge::event_plan::needs_no_check(&op, &target.intent) {
        if !op.status.is_settled() {
            return Ok(in_review(&op, &target.intent.id, &target.intent.status));
        }
        info!(
            reason = Ignored::AlreadySettled.as_str(),
            "nothing the event could change; Stripe not asked"
        );
        return Ok(Reception::Ignored(Ignored::AlreadySettled));
    }
    let pi = match confirmed(deps, &op, &target.intent, gateway_calls).await? {
        Ok(pi) => pi,
        Err(refused) => return Ok(refused),
    };
    // Decided on the record as read only to spare the claim's write when the event can change
    // nothing; the decision that is recorded is the shell's, on the record as claimed.
    match charge::event_plan::decide(&op, &pi.id, &pi.status) {
        Action::Ignore(why) => {
            info!(reason = why.as_str(), "nothing to change");
            Ok(Reception::Ignored(why))
        }
        Action::PageSettled { reason } => {
            page_settled(&op, &pi.id, reason);
            Ok(Reception::SettledConflict { reason })
        }
        Action::Settle { .. } | Action::RecordIntent { .. } | Action::Review { .. } => {
            let applied = executor::charge::apply_event(
                &deps.charge,
                &op.key(),
                &target.operation_id,
                pi.clone(),
            )
            .await;
            match applied {
                Ok(applied) => Ok(reception(&pi, applied)?),
                // Gone since our read: the shell reports a missing operation as an error.
                Err(ExecuteError::NotFound { .. }) => {
                    Ok(Reception::Ignored(Ignored::UnknownOperation))
                }
                Err(ExecuteError::Store(e)) => Err(ActError::Store(e)),
            }
        }
    }
}

/// Steps 4 to 6 of the module docs for a refund event: find the refund operation (by the
/// order's refunds, strongly consistent: a settled one too, which `get_by_operation_id` does not
/// list), retrieve the refund at Stripe unless the event could change nothing, decide with
/// [`refund::event_plan::decide`].
async fn act_refund(
    deps: &EventsDeps,
    target: &RefundTarget,
    gateway_calls: &mut u32,
) -> Result<Reception, ActError> {
    let Some(op) = read_refund(deps, target).await? else {
        info!("no such refund operation; ignored");
        return Ok(Reception::Ignored(Ignored::UnknownOperation));
    };
    if refund::event_plan::needs_no_check(&op, &target.refund) {
        if !op.status.is_settled() {
            return Ok(refund_in_review(&op, &target.refund));
        }
        info!(
            reason = Ignored::AlreadySettled.as_str(),
            "nothing the event could change; Stripe not asked"
        );
        return Ok(Reception::Ignored(Ignored::AlreadySettled));
    }
    *gateway_calls += 1;
    let stripe = match deps.charge.gateway.retrieve_refund(&target.refund.id).await {
        Ok(refund) => refund,
        Err(e @ (GatewayError::RetryLater { .. } | GatewayError::Ambiguous { .. })) => {
            return Err(ActError::RetrieveRefund {
                id: target.refund.id.clone(),
                source: e,
            })
        }
        Err(e) => {
            warn!(error = %ErrorChain(&e), "Stripe refused the refund's retrieve");
            let why = EventMismatch::UnknownRefund;
            return Ok(mismatch(&op, &target.refund, None, why));
        }
    };
    info!(refund = %stripe.id, status = %stripe.status, "retrieved the refund's latest state");
    let now = deps.charge.clock.now();
    match refund::event_plan::decide(&op, &target.refund, &stripe, now) {
        RefundEventAction::Settle => settle_refund(deps, &op.key(), target, stripe).await,
        other => unclaimed(deps, &op, target, &stripe, other).await,
    }
}

/// The refund operation the event names, or `None` when there is none.
async fn read_refund(
    deps: &EventsDeps,
    target: &RefundTarget,
) -> Result<Option<Operation>, ActError> {
    let refunds = deps
        .charge
        .store
        .refunds_of(&target.order_id)
        .await
        .map_err(ActError::Store)?;
    Ok(refunds
        .into_iter()
        .find(|op| op.operation_id == target.operation_id))
}

/// An unsettled refund operation settled (or its refund recorded) through the executor's shell;
/// when the shell finds it settled meanwhile, the refund rule's answer for that record comes back
/// with it.
async fn settle_refund(
    deps: &EventsDeps,
    key: &OperationKey,
    target: &RefundTarget,
    stripe: StripeRefund,
) -> Result<Reception, ActError> {
    let applied = executor::refund::apply_refund_event(
        &deps.charge,
        key,
        &target.operation_id,
        &target.refund,
        stripe.clone(),
    )
    .await;
    let RefundEventReport { report, settled } = match applied {
        Ok(applied) => applied,
        Err(ExecuteError::NotFound { .. }) => {
            return Ok(Reception::Ignored(Ignored::UnknownOperation))
        }
        Err(ExecuteError::Store(e)) => return Err(ActError::Store(e)),
    };
    Ok(match report.disposition {
        Disposition::Settled | Disposition::Scheduled => {
            info!(status = %report.status, refund = %stripe.id, "applied");
            Reception::Applied {
                status: report.status,
                review: None,
            }
        }
        Disposition::InReview(_) if report.sent_to_review.is_some() => Reception::Applied {
            status: report.status,
            review: report.sent_to_review,
        },
        Disposition::InReview(_) => Reception::Ignored(Ignored::InReview),
        Disposition::Busy | Disposition::RetryLater(_) => return Err(ActError::Busy),
        Disposition::AlreadySettled | Disposition::Superseded => match (&report.record, settled) {
            (Some(op), Some(action)) => return unclaimed(deps, op, target, &stripe, action).await,
            (Some(_), None) => return Err(ActError::LeaseLost),
            (None, _) => Reception::Ignored(Ignored::UnknownOperation),
        },
    })
}

/// What the refund rule decided that needs no claim: nothing, a page, or the late failure's one
/// write (not leased: its guards, a succeeded refund, are the whole condition).
async fn unclaimed(
    deps: &EventsDeps,
    op: &Operation,
    target: &RefundTarget,
    stripe: &StripeRefund,
    action: RefundEventAction,
) -> Result<Reception, ActError> {
    Ok(match action {
        RefundEventAction::Ignore(why) => {
            info!(reason = why.as_str(), "nothing to change");
            Reception::Ignored(why)
        }
        RefundEventAction::Mismatch(why) => mismatch(op, &target.refund, Some(stripe), why),
        RefundEventAction::PageSettled { reason } => {
            page_settled_refund(op, stripe, reason);
            Reception::SettledConflict { reason }
        }
        RefundEventAction::FailLater(write) => return fail_later(deps, &write).await,
        // Only an unsettled record settles, in the shell.
        RefundEventAction::Settle => return Err(ActError::LeaseLost),
    })
}

/// Stripe's word that a succeeded refund failed later, written with its reservation given back
/// (the executor's one write of it, shared with the refund watch).
async fn fail_later(deps: &EventsDeps, write: &RefundFailedLater) -> Result<Reception, ActError> {
    let written = executor::refund::fail_later(&*deps.charge.store, write)
        .await
        .map_err(ActError::Store)?;
    Ok(match written {
        LateFailure::Recorded(_) => Reception::RefundFailedLater,
        // Failed already (another delivery of the same news, or the watch, won): nothing more.
        LateFailure::AlreadyFailed => Reception::Ignored(Ignored::AlreadySettled),
        LateFailure::Moved(_) => return Err(ActError::LeaseLost),
        LateFailure::Gone => Reception::Ignored(Ignored::UnknownOperation),
    })
}

fn page_settled_refund(op: &Operation, stripe: &StripeRefund, reason: &'static str) {
    error!(
        order_id = %op.order_id,
        operation_id = %op.operation_id,
        status = %op.status,
        recorded = op.stripe_refund_id().map(|id| id.as_str()).unwrap_or(""),
        refund = stripe.id.as_str(),
        stripe_status = %stripe.status,
        %reason,
        "Stripe contradicts a refund operation; nothing written, an operator must check it at \
         Stripe"
    );
}

/// Stripe's PaymentIntent for the event's claim, retrieved and checked to be the operation's
/// and, for a final state, to hold what the event claims; or the reception of an event Stripe
/// does not confirm (paged).
async fn confirmed(
    deps: &EventsDeps,
    op: &Operation,
    claimed: &EventIntent,
    gateway_calls: &mut u32,
) -> Result<Result<PaymentIntent, Reception>, ActError> {
    *gateway_calls += 1;
    let pi = match deps.charge.gateway.retrieve(&claimed.id).await {
        Ok(pi) => pi,
        Err(e @ (GatewayError::RetryLater { .. } | GatewayError::Ambiguous { .. })) => {
            return Err(ActError::Retrieve {
                id: claimed.id.clone(),
                source: e,
            })
        }
        Err(e) => {
            warn!(error = %ErrorChain(&e), "Stripe refused the retrieve");
            let why = EventMismatch::UnknownPaymentIntent;
            return Ok(Err(mismatch(op, claimed, None, why)));
        }
    };
    info!(payment_intent = %pi.id, status = %pi.status, "retrieved the latest state");
    if let Some(m) = charge::plan::intent_mismatch(op, &pi, deps.charge.gateway.livemode()) {
        return Ok(Err(mismatch(
            op,
            claimed,
            Some(&pi),
            EventMismatch::Intent(m),
        )));
    }
    if charge::event_plan::is_final(&claimed.status) && pi.status != claimed.status {
        let why = EventMismatch::StatusContradicted;
        return Ok(Err(mismatch(op, claimed, Some(&pi), why)));
    }
    Ok(Ok(pi))
}

/// The record the event names, or `None` when there is no such operation: the charge attempt
/// the intent's metadata names (one GetItem), its operation id checked. An intent whose metadata
/// names no attempt or another (a `charge.captured` event's intent read at Stripe carries the
/// order and operation only) is looked for among its order's attempts by operation id, when
/// the order has more than one: an order charged once costs no other read.
async fn read(deps: &EventsDeps, target: &Target) -> Result<Option<Operation>, ActError> {
    let store = &deps.charge.store;
    let named = store.get(&target.key).await.map_err(ActError::Store)?;
    let head = match named {
        Some(op) if op.operation_id == target.operation_id => return Ok(Some(op)),
        // The head itself was read: no second read of it.
        named if target.key.kind == OperationKind::FIRST_CHARGE => named,
        _ => store
            .get(&OperationKey::charge(target.key.order_id.clone()))
            .await
            .map_err(ActError::Store)?,
    };
    if head.is_none_or(|h| h.latest_attempt() <= 1) {
        return Ok(None);
    }
    let attempts = store
        .attempts_of(&target.key.order_id)
        .await
        .map_err(ActError::Store)?;
    Ok(attempts
        .into_iter()
        .find(|op| op.operation_id == target.operation_id))
}

/// What the shell's report means for the event: its decision on the record as claimed, or, when
/// it could not claim it or our write lost, its answer for the record it last saw.
fn reception(pi: &PaymentIntent, applied: EventReport) -> Result<Reception, ActError> {
    let EventReport {
        report,
        action,
        settled,
    } = applied;
    // The record as claimed said there was nothing to change (it moved since our read): the
    // shell released the lease and wrote nothing else.
    match action {
        Some(Action::Ignore(why)) => return Ok(Reception::Ignored(why)),
        Some(Action::PageSettled { .. }) => return Ok(Reception::Ignored(Ignored::NothingNew)),
        _ => {}
    }
    Ok(match report.disposition {
        Disposition::Settled | Disposition::Scheduled => {
            info!(status = %report.status, payment_intent = pi.id.as_str(), "applied");
            Reception::Applied {
                status: report.status,
                review: None,
            }
        }
        Disposition::InReview(_) if report.sent_to_review.is_some() => Reception::Applied {
            status: report.status,
            review: report.sent_to_review,
        },
        Disposition::InReview(_) => match &report.record {
            Some(op) => in_review(op, &pi.id, &pi.status),
            None => Reception::Ignored(Ignored::InReview),
        },
        // The charge function holds the lease: nothing written, the event's retry comes back.
        // (`RetryLater` would mean the same, but the event's shell never asks for it: it makes no
        // Stripe call, and `after_event` decides nothing that is retried.)
        Disposition::Busy | Disposition::RetryLater(_) => return Err(ActError::Busy),
        // Settled since our read (the shell's claim found it so), or our write lost to one that
        // settled it: the shell's answer compares Stripe's with what stands.
        Disposition::AlreadySettled | Disposition::Superseded => match (&report.record, settled) {
            (Some(op), Some(Action::PageSettled { reason })) => {
                page_settled(op, &pi.id, reason);
                Reception::SettledConflict { reason }
            }
            (Some(_), Some(_)) => Reception::Ignored(Ignored::AlreadySettled),
            (Some(_), None) => return Err(ActError::LeaseLost),
            (None, _) => Reception::Ignored(Ignored::UnknownOperation),
        },
    })
}

/// An event naming a PaymentIntent of an operation in review. Only an operator settles such a
/// record, so the event moves nothing and Stripe is not asked; but what it names is evidence the
/// operator needs: for a `search_ambiguous` review (the search past the key window found no
/// intent) the `payment_intent.succeeded` that proves the charge, whose id the record does not
/// have. It is logged with the intent and the status claimed, and paged (`WebhookIgnored`,
/// `Reason=in_review`, alarmed), so the intent is checked before the operation is resolved.
fn in_review(op: &Operation, intent: &PaymentIntentId, status: &PaymentIntentStatus) -> Reception {
    error!(
        order_id = %op.order_id,
        operation_id = %op.operation_id,
        review_reason = op.review.as_ref().map_or("", |r| r.reason.as_str()),
        recorded = op.external_id.as_deref().unwrap_or(""),
        payment_intent = intent.as_str(),
        claimed_status = %status,
        "an event names a PaymentIntent of an operation in review: nothing moved, Stripe not \
         asked; check this PaymentIntent at Stripe before resolving the operation"
    );
    Reception::Ignored(Ignored::InReview)
}

/// A refund event for a refund operation in review: as [`in_review`] for an intent, the event
/// moves nothing and Stripe is not asked, but the refund it names and the status it claims are the
/// evidence the operator resolves the refund with, so they are logged beside the review's reason
/// (and paged: `WebhookIgnored`, `Reason=in_review`).
fn refund_in_review(op: &Operation, refund: &EventRefund) -> Reception {
    error!(
        order_id = %op.order_id,
        operation_id = %op.operation_id,
        review_reason = op.review.as_ref().map_or("", |r| r.reason.as_str()),
        recorded = op.stripe_refund_id().map_or("", |id| id.as_str()),
        refund = refund.id.as_str(),
        claimed_status = %refund.status,
        "an event names a refund of an operation in review: nothing moved, Stripe not asked; \
         check this refund at Stripe before resolving the operation"
    );
    Reception::Ignored(Ignored::InReview)
}

/// An event Stripe does not confirm (its object, `stripe`, is not the operation's, or does not
/// hold what the event claims, or is not there): nothing written, a person is paged.
fn mismatch<C: EventCopy>(
    op: &Operation,
    claimed: &C,
    stripe: Option<&C::Object>,
    why: EventMismatch,
) -> Reception {
    error!(
        order_id = %op.order_id,
        operation_id = %op.operation_id,
        object = <C::Object as StripeObject>::NOUN,
        stripe_id = claimed.id(),
        claimed_status = claimed.status_name(),
        stripe_status = stripe.map_or("(none)", |o| o.status_name()),
        reason = why.as_str(),
        "event mismatch: Stripe does not confirm what the event says (forged or misrouted event, \
         or a leaked secret); nothing written, a person must check it"
    );
    Reception::Mismatch(why)
}

fn page_settled(op: &Operation, pi_id: &PaymentIntentId, reason: &'static str) {
    error!(
        order_id = %op.order_id,
        operation_id = %op.operation_id,
        status = %op.status,
        recorded = op.external_id.as_deref().unwrap_or(""),
        payment_intent = pi_id.as_str(),
        %reason,
        "Stripe contradicts a settled operation (suspected double charge); nothing written, \
         an operator must check it at Stripe"
    );
}

/// The time an inbox entry written now expires, in seconds since the epoch (DynamoDB TTL's unit).
pub fn ttl_epoch_seconds(expires_at: Timestamp) -> i64 {
    expires_at.as_millis().div_euclid(1000)
}
