//! `POST /orders/{order_id}/capture` with `{"amount"?}` and `POST /orders/{order_id}/cancel` with
//! `{"reason"?}`, and `GET` on the same paths: the capture of an authorization (a charge made
//! with `"capture": "manual"`), or the cancel of the order's charge, each exactly once, and never
//! both.
//!
//! Each is an operation of its own (kind `capture` / `cancel`, one per order), recorded with its
//! claim on the order's charge in one conditional write (`OperationStore::create_taking`): the
//! charge names the one that took it, so a capture and a cancel asked at once can never both be
//! accepted. Then queued (message version 3); the charge function captures or cancels with the key
//! `capture-op:<operation_id>` / `cancel-op:<operation_id>`, reading the intent first on every
//! attempt after the first. A cancel of a charge never sent to Stripe is settled by the write
//! itself: the charge `failed`, nothing queued, no Stripe call ever.
//!
//! | answer | when | what changed |
//! |---|---|---|
//! | 202 `{operation_id, order_id, kind, status, amount, currency, queued}` | a new capture or cancel of an authorization | the operation written, the charge taken, one message sent |
//! | 200 `{…, status: "succeeded"}` | a cancel of a charge never sent | the cancel written settled and the charge `failed`, in one write; nothing sent |
//! | 200 (same body) | the same request again, same caller | nothing written; still `pending`, the message is sent again |
//! | 409 `take_conflict` | a capture (cancel) already exists with another body, or another caller's | nothing |
//! | 409 `taken` | the other of the two took the authorization first | nothing |
//! | 409 `not_authorized_yet` / `in_flight` | capture: the charge is not authorized yet; cancel: it is at Stripe, not yet authorized | nothing |
//! | 409 `automatic_capture` / `captured` / `ended` | capture of an automatic charge; cancel of a captured charge (refund it instead); the charge already ended | nothing |
//! | 400 `over_authorized` | capture amount over what was authorized | nothing |
//! | 404 | no charge for this order, or another caller's order | nothing |
//! | 400 | invalid body (`amount` a positive integer of minor units; `reason` one of Stripe's) | nothing |
//! | GET 200 / 404 | where the capture (cancel) stands / none of the caller's | nothing |
//! | 503 | DynamoDB failed | nothing, or the operation (then `pending`: the reconciler sends it) |

use charge_once::domain::{CancelRequest, CancellationReason, CaptureRequest};
use charge_once::operation::Taker;
use charge_once::ports::{QueuedCharge, TakingCreated};
use charge_once::store_rules::Guard;
use charge_once::take::{self, TakeRefusal, TakeRequest};
use charge_once::{
    Amount, Operation, OperationId, OperationKey, OperationKind, OrderId, Principal,
    ValidationError,
};
use serde_json::{json, Value};
use tracing::{error, info, warn};

use crate::handler::{
    count_unavailable, created_by, error, invalid, json_object, unavailable, Answer, Checkout,
    Reply,
};

/// How many times the door decides again when the charge moved between the read and the write.
const ATTEMPTS: usize = 3;

/// `POST`: a capture or a cancel (`kind`) of `order_id`'s charge, as `body` asks.
pub(crate) async fn create(
    deps: &Checkout,
    order_id: OrderId,
    kind: OperationKind,
    body: &str,
    caller: &Principal,
) -> Answer {
    let request = parse(&kind, body)?;
    let charge_key = OperationKey::charge(order_id.clone());
    let key = OperationKey::of_kind(order_id, kind);
    for _ in 0..ATTEMPTS {
        let charge = read(deps, &charge_key)
            .await?
            .filter(|c| created_by(c, caller))
            .ok_or_else(no_charge)?;
        let now = deps.clock.now();
        let operation_id = OperationId::new_random();
        let taker = Taker {
            capture: request.kind() == OperationKind::Capture,
            operation_id,
        };
        let taking = match take::take(&charge, &request, taker, now) {
            Ok(taking) => taking,
            // Asked again after it took the charge: the operation there is the answer.
            Err(refusal) => return again_or(deps, &key, &request, caller, refusal).await,
        };
        let op = Operation {
            operation_id,
            ..Operation::new_taking(
                charge.order_id.clone(),
                request.kind(),
                request.fingerprint(),
                taking.params.clone(),
                caller.clone(),
                now,
                deps.pending_grace,
            )
        };
        let op = take::initial(op, &taking);
        match deps.store.create_taking(&op, &taking.take).await {
            Ok(TakingCreated::New(op)) if op.status.is_settled() => {
                info!(status = 200, "canceled before it was sent to Stripe");
                return Ok(Reply {
                    logged: true,
                    ..reply(200, summary(&op))
                });
            }
            Ok(TakingCreated::New(op)) => return queued(deps, op).await,
            Ok(TakingCreated::Existing(existing)) => {
                return existing_one(deps, existing, &request, caller).await
            }
            // The charge moved since it was read: decide again on it as it is now.
            Ok(TakingCreated::ChargeRefused(Some((_, by)))) => {
                info!(
                    refused_by = by.as_str(),
                    "the charge moved since read; deciding again"
                );
                if matches!(by, Guard::IsOperation(_) | Guard::IsCharge) {
                    return Err(no_charge());
                }
            }
            Ok(TakingCreated::ChargeRefused(None)) => return Err(no_charge()),
            Err(e) => {
                error!(error = %charge_once::telemetry::ErrorChain(&e), "store unavailable");
                return Err(unavailable(deps, "store"));
            }
        }
    }
    warn!("the charge kept moving under the request; answered 503");
    Err(unavailable(deps, "store"))
}

/// `GET`: where the capture (cancel) stands, from one strongly consistent read.
pub(crate) async fn status(
    deps: &Checkout,
    order_id: OrderId,
    kind: OperationKind,
    caller: &Principal,
) -> Answer {
    let what = kind.as_str();
    let op = read(deps, &OperationKey::of_kind(order_id, kind))
        .await?
        .filter(|op| created_by(op, caller))
        .ok_or_else(|| {
            error(
                404,
                &format!("{what}_not_found"),
                &format!("no {what} of this order"),
                None,
            )
        })?;
    let mut body = summary(&op);
    body["updated_at"] = json!(op.updated_at.to_rfc3339());
    body["payment_intent"] = json!(op.params.payment_intent());
    if let Some(review) = &op.review {
        body["review_reason"] = json!(review.reason);
    }
    Ok(reply(200, body))
}

/// A capture's body: `amount` (optional: all that was authorized); a cancel's: `reason`
/// (optional, Stripe's `cancellation_reason`). Nothing else.
fn parse(kind: &OperationKind, body: &str) -> Result<TakeRequest, Reply> {
    let body = if body.trim().is_empty() { "{}" } else { body };
    let obj = json_object(body)?;
    let allowed = match kind {
        OperationKind::Capture => "amount",
        _ => "reason",
    };
    let mut problems: Vec<ValidationError> = obj
        .keys()
        .filter(|k| k.as_str() != allowed)
        .map(|k| ValidationError::new("body", format!("unknown field {k:?}")))
        .collect();
    let request = match kind {
        OperationKind::Capture => TakeRequest::Capture(CaptureRequest {
            amount: match obj.get("amount") {
                None | Some(Value::Null) => None,
                Some(v) => v
                    .as_i64()
                    .ok_or_else(|| {
                        ValidationError::new("amount", "must be an integer number of minor units")
                    })
                    .and_then(Amount::new)
                    .map_err(|e| problems.push(e))
                    .ok(),
            },
        }),
        _ => TakeRequest::Cancel(CancelRequest {
            reason: match obj.get("reason") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => CancellationReason::parse(s)
                    .map_err(|e| problems.push(e))
                    .ok(),
                Some(_) => {
                    problems.push(ValidationError::new("reason", "must be a string"));
                    None
                }
            },
        }),
    };
    if !problems.is_empty() {
        return Err(invalid(problems));
    }
    Ok(request)
}

async fn read(deps: &Checkout, key: &OperationKey) -> Result<Option<Operation>, Reply> {
    deps.store.get(key).await.map_err(|e| {
        error!(error = %charge_once::telemetry::ErrorChain(&e), "store unavailable");
        unavailable(deps, "store")
    })
}

/// A refusal of the door, unless the same operation already exists (then it is the answer).
async fn again_or(
    deps: &Checkout,
    key: &OperationKey,
    request: &TakeRequest,
    caller: &Principal,
    refusal: TakeRefusal,
) -> Answer {
    if let Some(existing) = read(deps, key).await? {
        return existing_one(deps, existing, request, caller).await;
    }
    warn!(%refusal, "refused; nothing written");
    let message = refusal.to_string();
    Err(match refusal {
        TakeRefusal::NoCharge => no_charge(),
        TakeRefusal::AutomaticCapture => error(409, "automatic_capture", &message, None),
        TakeRefusal::NotAuthorizedYet(_) => error(409, "not_authorized_yet", &message, None),
        TakeRefusal::InFlight(_) => error(409, "in_flight", &message, None),
        TakeRefusal::Captured => error(409, "captured", &message, None),
        TakeRefusal::Ended(_) | TakeRefusal::NoPaymentIntent => error(409, "ended", &message, None),
        TakeRefusal::TakenBy(_) => error(409, "taken", &message, None),
        TakeRefusal::OverAuthorized { authorized, .. } => {
            let mut reply = error(400, "over_authorized", &message, None);
            reply.body["error"]["authorized"] = json!(authorized);
            reply
        }
    })
}

/// The same capture (cancel) asked again: the same operation (200, queued again while never
/// attempted), or a conflict for another body or another caller.
async fn existing_one(
    deps: &Checkout,
    existing: Operation,
    request: &TakeRequest,
    caller: &Principal,
) -> Answer {
    if !created_by(&existing, caller) || existing.fingerprint != request.fingerprint() {
        warn!(operation_id = %existing.operation_id, "asked again with another body or by another caller; refused");
        let what = existing.kind.as_str();
        return Err(error(
            409,
            "take_conflict",
            &format!("this order already has a {what} with a different amount or reason"),
            None,
        ));
    }
    let mut body = summary(&existing);
    if existing.first_attempted_at.is_none() && !existing.status.is_settled() {
        body["queued"] = Value::Bool(send(deps, &existing).await);
    }
    Ok(reply(200, body))
}

async fn queued(deps: &Checkout, op: Operation) -> Answer {
    tracing::Span::current().record("operation_id", tracing::field::display(op.operation_id));
    let sent = send(deps, &op).await;
    info!(
        status = 202,
        kind = op.kind.as_str(),
        amount = op.params.amount().minor_units(),
        queued = sent,
        "recorded"
    );
    let mut body = summary(&op);
    body["queued"] = Value::Bool(sent);
    Ok(Reply {
        logged: true,
        ..reply(202, body)
    })
}

/// Sends the operation's message; false when the queue is down. It is recorded by then (the
/// charge taken), so it is accepted all the same: the reconciler sends a `pending` operation's
/// message again after the grace period, and the same request again sends it too. Counted as
/// `CheckoutUnavailable` (`queue`).
async fn send(deps: &Checkout, op: &Operation) -> bool {
    match deps.queue.send(&QueuedCharge::first(op)).await {
        Ok(()) => true,
        Err(e) => {
            error!(error = %charge_once::telemetry::ErrorChain(&e), "queue unavailable; the reconciler re-sends it");
            count_unavailable(deps, "queue");
            false
        }
    }
}

fn summary(op: &Operation) -> Value {
    json!({
        "operation_id": op.operation_id.to_string(),
        "order_id": op.order_id.as_str(),
        "kind": op.kind.as_str(),
        "status": op.status.as_str(),
        "amount": op.params.amount().minor_units(),
        "currency": op.params.currency().as_str(),
    })
}

fn no_charge() -> Reply {
    error(
        404,
        "order_not_found",
        "no charge was made for this order",
        None,
    )
}

fn reply(status: i64, body: Value) -> Reply {
    Reply {
        status,
        body,
        header: None,
        logged: false,
    }
}
