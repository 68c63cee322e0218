//! Stripe's webhooks, received as an idempotent inbox beside the reconciler: most unknown
//! operations settle seconds after Stripe knows, and the reconciler stays the safety net for
//! every event that is late, lost or refused.
//!
//! [`receive`] is the whole path of one delivery, on the ports:
//! 1. **Verify** the `Stripe-Signature` ([`signature`]) before reading anything. Refused: 400,
//!    nothing written.
//! 2. **Parse** ([`event`]); types we do not act on and PaymentIntents that are not ours answer
//!    200 and are counted, unwritten.
//! 3. **Admit** the event id into the [`inbox`] with a conditional put: a redelivery is a
//!    duplicate, answered 200, with no other effect.
//! 4. **Find** the operation on the table key from `metadata.order_id` (a strongly consistent
//!    GetItem, no index) and check `metadata.operation_id` is the one recorded.
//! 5. **Decide** ([`event::decide`]): states a PaymentIntent can leave are re-read from Stripe
//!    (`retrieve`) first, since events arrive out of order.
//! 6. **Apply** with the executor's own conditional writes: `claim` (unsettled, not in review, no
//!    live lease) then `record` (fenced on that lease and an unsettled status). A settled record
//!    is never written; the webhook never creates or confirms anything at Stripe.
//!
//! If acting fails after the inbox admitted the event (the store or Stripe unreachable, or the
//! charge function holds the lease), the inbox entry is forgotten and the answer is non-2xx, so
//! Stripe delivers again later. If even the forget fails, the operation is still driven by the
//! unknown index: a lost webhook costs time, never correctness.

pub mod event;
pub mod inbox;
pub mod signature;

use std::sync::Arc;
use std::time::Duration;

use tracing::{error, info, warn, Instrument};

use crate::domain::PaymentIntentId;
use crate::operation::{Lease, LeaseToken, Operation, OperationKey, OperationStatus, Review};
use crate::outcome::{GatewayError, PaymentIntentStatus};
use crate::ports::{
    Claim, ClaimRequest, OperationStore, OutcomeRecord, PaymentGateway, Recorded, StoreError,
};
use crate::time::{Clock, Timestamp};

pub use event::{Action, EventIntent, Ignored, StripeEvent, HANDLED_TYPES, SECOND_PAYMENT_INTENT};
pub use inbox::{Admitted, WebhookInbox, INBOX_TTL};
pub use signature::{SignatureError, WebhookSecret, DEFAULT_TOLERANCE, MAX_BODY_BYTES};

/// Everything one delivery needs, built once per process.
#[derive(Clone)]
pub struct WebhookDeps {
    pub store: Arc<dyn OperationStore>,
    pub inbox: Arc<dyn WebhookInbox>,
    /// Used for `retrieve` only.
    pub gateway: Arc<dyn PaymentGateway>,
    pub clock: Arc<dyn Clock>,
    pub secret: WebhookSecret,
    pub tolerance: Duration,
    /// The lease taken for the (short) write, as the executor's.
    pub lease_ttl: Duration,
}

/// Why a delivery was refused with 400.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    Signature(SignatureError),
    /// Correctly signed but not an event we can read.
    Unreadable(String),
}

impl Rejection {
    pub fn as_str(&self) -> &'static str {
        match self {
            Rejection::Signature(e) => e.as_str(),
            Rejection::Unreadable(_) => "unreadable",
        }
    }
}

/// What happened to one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reception {
    /// 400, nothing written.
    Rejected(Rejection),
    /// 200, no change (besides the inbox entry when admitted).
    Ignored(Ignored),
    /// 200: the operation was moved (settled, PaymentIntent recorded, or flagged for review).
    Applied {
        status: OperationStatus,
        review: bool,
    },
    /// 200: Stripe contradicts a settled record; nothing written, a person is paged.
    SettledConflict { reason: &'static str },
    /// Non-2xx so Stripe delivers again: the inbox entry was forgotten.
    RetryLater { busy: bool, detail: String },
}

impl Reception {
    /// The HTTP status to answer Stripe with.
    pub fn http_status(&self) -> u16 {
        match self {
            Reception::Rejected(_) => 400,
            Reception::Ignored(_)
            | Reception::Applied { .. }
            | Reception::SettledConflict { .. } => 200,
            // 409: the charge function is mid-call on this operation; Stripe retries later.
            Reception::RetryLater { busy: true, .. } => 409,
            Reception::RetryLater { busy: false, .. } => 500,
        }
    }
}

/// One delivery's result, for the response, the metrics and the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookReport {
    pub reception: Reception,
    /// The event id, once the body was verified and read.
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    /// Stripe calls made (retrieve only; 0 or 1).
    pub gateway_calls: u32,
}

/// Handles one delivery: `signature_header` is the `Stripe-Signature` value, `body` the raw
/// bytes exactly as received. See the module docs for the steps.
pub async fn receive(
    deps: &WebhookDeps,
    signature_header: Option<&str>,
    body: &[u8],
) -> WebhookReport {
    let mut report = WebhookReport {
        reception: Reception::Ignored(Ignored::UnhandledType),
        event_id: None,
        event_type: None,
        gateway_calls: 0,
    };
    let now = deps.clock.now();
    if let Err(e) = signature::verify(signature_header, body, &deps.secret, now, deps.tolerance) {
        warn!(reason = e.as_str(), "webhook rejected: {e}");
        report.reception = Reception::Rejected(Rejection::Signature(e));
        return report;
    }
    let event = match StripeEvent::parse(body) {
        Ok(event) => event,
        Err(e) => {
            warn!(reason = "unreadable", "webhook rejected: {e}");
            report.reception = Reception::Rejected(Rejection::Unreadable(e.0));
            return report;
        }
    };
    report.event_id = Some(event.id.clone());
    report.event_type = Some(event.event_type.clone());
    let span = tracing::info_span!("webhook", event_id = %event.id, event_type = %event.event_type);
    // Entered only for these synchronous checks: a span guard is never held across an `.await`
    // (tracing documents that as giving wrong traces under concurrency); the rest is instrumented.
    let (intent, order_id, operation_id) = {
        let _entered = span.enter();
        let intent = match (&event.intent, event.is_handled()) {
            (Some(intent), true) => intent.clone(),
            _ => {
                info!("event type not handled; ignored");
                report.reception = Reception::Ignored(Ignored::UnhandledType);
                return report;
            }
        };
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
    settle_event(deps, event, intent, order_id, operation_id, now, report)
        .instrument(op_span)
        .await
}

/// The inbox and the transition, for an event of ours (inside its operation's span).
async fn settle_event(
    deps: &WebhookDeps,
    event: StripeEvent,
    intent: EventIntent,
    order_id: crate::domain::OrderId,
    operation_id: crate::domain::OperationId,
    now: Timestamp,
    mut report: WebhookReport,
) -> WebhookReport {
    match deps.inbox.admit(&event.id, now, now.plus(INBOX_TTL)).await {
        Ok(Admitted::New) => {}
        Ok(Admitted::Duplicate) => {
            info!("event seen before; nothing to do");
            report.reception = Reception::Ignored(Ignored::Duplicate);
            return report;
        }
        Err(e) => {
            error!(error = %e, "inbox unavailable; Stripe will retry");
            report.reception = Reception::RetryLater {
                busy: false,
                detail: e.to_string(),
            };
            return report;
        }
    }

    let key = OperationKey::charge(order_id);
    let reception = act(deps, &key, operation_id, &intent, &mut report.gateway_calls).await;
    let reception = match reception {
        Ok(reception) => reception,
        Err(detail) => Reception::RetryLater {
            busy: false,
            detail,
        },
    };
    if let Reception::RetryLater { busy, detail } = &reception {
        warn!(busy, %detail, "not applied; forgetting the event so Stripe's retry is processed");
        if let Err(e) = deps.inbox.forget(&event.id).await {
            // The retry will be taken for a duplicate; the unknown index still drives the
            // operation, so this costs time only.
            error!(error = %e, "could not forget the event; the reconciler will settle it");
        }
    }
    report.reception = reception;
    report
}

async fn act(
    deps: &WebhookDeps,
    key: &OperationKey,
    operation_id: crate::domain::OperationId,
    intent: &EventIntent,
    gateway_calls: &mut u32,
) -> Result<Reception, String> {
    let store_err = |e: StoreError| format!("store: {e}");
    let op = match deps.store.get(key).await.map_err(store_err)? {
        Some(op) if op.operation_id == operation_id => op,
        _ => {
            info!("no such operation; ignored");
            return Ok(Reception::Ignored(Ignored::UnknownOperation));
        }
    };
    let (mut pi_id, mut status) = (intent.id.clone(), intent.status.clone());
    let mut action = event::decide(&op, &pi_id, &status, false);
    if let Action::Retrieve(id) = &action {
        *gateway_calls += 1;
        match deps.gateway.retrieve(id).await {
            Ok(latest) => {
                info!(payment_intent = %latest.id, status = %latest.status, "retrieved the latest state");
                pi_id = latest.id;
                status = latest.status;
                action = event::decide(&op, &pi_id, &status, true);
            }
            Err(e @ (GatewayError::RetryLater { .. } | GatewayError::Ambiguous { .. })) => {
                return Err(format!("retrieve: {e}"));
            }
            Err(e) => {
                warn!(error = %e, "retrieve refused; left to the reconciler");
                return Ok(Reception::Ignored(Ignored::RetrieveRefused));
            }
        }
    }
    match action {
        Action::Ignore(why) => {
            info!(reason = why.as_str(), "nothing to change");
            Ok(Reception::Ignored(why))
        }
        Action::PageSettled { reason } => {
            page_settled(&op, &pi_id, reason);
            Ok(Reception::SettledConflict { reason })
        }
        Action::Retrieve(_) => Err("the retrieved state still asks for a retrieve".into()),
        Action::Settle { .. } | Action::RecordIntent { .. } | Action::Review { .. } => {
            apply(deps, key, &op, &pi_id, &status).await
        }
    }
}

/// Claims the operation with the executor's claim, decides again on the claimed record (it may
/// have moved since the read), and records with the executor's fenced write.
async fn apply(
    deps: &WebhookDeps,
    key: &OperationKey,
    read: &Operation,
    pi_id: &PaymentIntentId,
    status: &PaymentIntentStatus,
) -> Result<Reception, String> {
    let store_err = |e: StoreError| format!("store: {e}");
    let now = deps.clock.now();
    let lease = Lease {
        token: LeaseToken::new_random(),
        expires_at: now.plus(deps.lease_ttl),
    };
    let claim = deps
        .store
        .claim(&ClaimRequest {
            key: key.clone(),
            operation_id: read.operation_id,
            lease,
            now,
        })
        .await
        .map_err(store_err)?;
    let op = match claim {
        Claim::Claimed(op) => op,
        Claim::Settled(op) => {
            return Ok(match event::decide(&op, pi_id, status, true) {
                Action::PageSettled { reason } => {
                    page_settled(&op, pi_id, reason);
                    Reception::SettledConflict { reason }
                }
                _ => Reception::Ignored(Ignored::AlreadySettled),
            })
        }
        Claim::Leased(_) => {
            return Ok(Reception::RetryLater {
                busy: true,
                detail: "the charge function holds the lease".into(),
            })
        }
        Claim::InReview(_) => return Ok(Reception::Ignored(Ignored::InReview)),
        Claim::NotFound => return Ok(Reception::Ignored(Ignored::UnknownOperation)),
    };
    let action = event::decide(&op, pi_id, status, true);
    let still_unsettled = if op.status == OperationStatus::Pending {
        // A PaymentIntent exists: the charge was attempted and its outcome is not known yet.
        OperationStatus::Unknown
    } else {
        op.status
    };
    let due = Some(op.next_due_at.unwrap_or(now));
    let mut rec = OutcomeRecord {
        key: key.clone(),
        operation_id: op.operation_id,
        lease_token: lease.token,
        status: op.status,
        external_id: None,
        last_error: op.last_error.clone(),
        review: None,
        next_due_at: due,
        now,
    };
    let mut ignored = None;
    match &action {
        Action::Settle {
            status,
            external_id,
        } => {
            rec.status = *status;
            rec.external_id = Some(external_id.clone());
            rec.last_error = None;
            rec.next_due_at = None;
        }
        Action::RecordIntent { external_id } => {
            rec.status = still_unsettled;
            rec.external_id = Some(external_id.clone());
        }
        Action::Review { external_id } => {
            rec.status = still_unsettled;
            rec.last_error = Some(format!(
                "a second PaymentIntent {external_id} succeeded; recorded {}",
                op.external_id.as_deref().unwrap_or("none")
            ));
            rec.review = Some(Review {
                reason: SECOND_PAYMENT_INTENT.to_owned(),
                flagged_at: now,
            });
        }
        // The record moved between the read and the claim: release the lease, change nothing.
        Action::Ignore(why) => ignored = Some(*why),
        Action::PageSettled { .. } | Action::Retrieve(_) => ignored = Some(Ignored::NothingNew),
    }
    match deps.store.record(&rec).await.map_err(store_err)? {
        Recorded::Written(op) => {
            if let Some(why) = ignored {
                return Ok(Reception::Ignored(why));
            }
            let review = op.review.is_some() && rec.review.is_some();
            if review {
                error!(
                    order_id = %op.order_id,
                    operation_id = %op.operation_id,
                    payment_intent = pi_id.as_str(),
                    reason_class = SECOND_PAYMENT_INTENT,
                    "sent to review: a second PaymentIntent succeeded for one operation (suspected double charge); \
                     an operator must settle it (chargectl unknowns --review)"
                );
            } else {
                info!(status = %op.status, payment_intent = pi_id.as_str(), "applied");
            }
            Ok(Reception::Applied {
                status: op.status,
                review,
            })
        }
        Recorded::Refused(Some(current)) if current.status.is_settled() => {
            Ok(Reception::Ignored(Ignored::AlreadySettled))
        }
        Recorded::Refused(_) => Err("the fenced write was refused (lease lost)".into()),
    }
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
