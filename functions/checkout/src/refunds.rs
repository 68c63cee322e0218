//! `POST /orders/{order_id}/refunds/{refund_id}` with `{"amount"?, "reason"?}`, and `GET` on the
//! same path: a refund of the order's charge, exactly once, never more than was charged.
//!
//! `refund_id` is the merchant's identity of the refund action: the same id again is the same
//! refund (same body → the existing operation; another body → 409), two ids are two refunds even
//! for the same amount. The refund is recorded and its amount reserved on the charge in one
//! conditional write (`OperationStore::create_beside`), then queued (message version 2); the
//! charge function creates it at Stripe with the key `refund-op:<operation_id>`.
//!
//! | answer | when | what changed |
//! |---|---|---|
//! | 202 `{operation_id, order_id, refund_id, status, amount, currency}` | a new refund | the refund written and its amount reserved on the charge, one message sent |
//! | 200 (same body) | the same refund id again, same body, same caller | nothing written; still `pending`, the message is sent again |
//! | 409 `refund_conflict` | the same refund id with another body, or another caller's | nothing |
//! | 409 `charge_not_succeeded` | the order's charge is not `succeeded` (pending, unknown, failed): only money taken is refunded | nothing |
//! | 409 `nothing_left_to_refund` / `over_refund` | the charge is refunded in full / the amount is over what is left (`left` in the body) | nothing |
//! | 404 | no charge for this order, or another caller's order | nothing |
//! | 400 | invalid `refund_id`, `amount` (a positive integer of minor units) or `reason` | nothing |
//! | GET 200 / 404 | where the refund stands / no such refund of the caller's | nothing |
//! | 503 | DynamoDB or SQS failed | possibly the refund (then `pending`: the reconciler sends it) |

use charge_once::ports::{ChargeClaim, CreatedBeside, QueuedCharge};
use charge_once::refund::{self, RefundReason, RefundRefusal, RefundRequest};
use charge_once::store_rules::Guard;
use charge_once::{Amount, Operation, OperationKey, OrderId, Principal, RefundId, ValidationError};
use serde_json::{json, Value};
use tracing::{error, info, warn};

use crate::handler::{
    count_unavailable, created_by, error, invalid, json_object, unavailable, Answer, Checkout,
    Reply,
};

/// How many times a refund is decided again when its charge moved between the read and the write
/// (another refund of the same order reserved meanwhile).
const ATTEMPTS: usize = 3;

/// `POST`: the refund `refund_id` of `order_id`'s charge, as `body` asks.
pub(crate) async fn create(
    deps: &Checkout,
    order_id: OrderId,
    refund_id: RefundId,
    body: &str,
    caller: &Principal,
) -> Answer {
    let request = parse(body)?;
    let charge_key = OperationKey::charge(order_id.clone());
    let refund_key = OperationKey::refund(order_id, refund_id.clone());
    for _ in 0..ATTEMPTS {
        let charge = read(deps, &charge_key).await?;
        let charge = charge
            .filter(|c| created_by(c, caller))
            .ok_or_else(no_charge)?;
        let now = deps.clock.now();
        let (params, reserve) = match refund::reserve(&charge, &request, now) {
            Ok(decided) => decided,
            // Asked again after it took the rest: the refund there is the answer.
            Err(refusal) => return again_or(deps, &refund_key, &request, caller, refusal).await,
        };
        let op = Operation::new_refund(
            charge.order_id.clone(),
            refund_id.clone(),
            &request,
            params,
            caller.clone(),
            now,
            deps.pending_grace,
        );
        match deps
            .store
            .create_beside(&op, ChargeClaim::Reserve(&reserve))
            .await
        {
            Ok(CreatedBeside::New(op)) => return queued(deps, op, summary).await,
            Ok(CreatedBeside::Existing(existing)) => {
                return existing_refund(deps, existing, &request, caller).await
            }
            // The charge moved since it was read: decide again on it as it is now.
            Ok(CreatedBeside::ChargeRefused(Some((_, by)))) => {
                info!(
                    refused_by = by.as_str(),
                    "the charge moved since read; deciding again"
                );
                if !matches!(by, Guard::ReservedAtMost(_) | Guard::StatusIs(_)) {
                    return Err(no_charge());
                }
            }
            Ok(CreatedBeside::ChargeRefused(None)) => return Err(no_charge()),
            Err(e) => {
                error!(error = %charge_once::telemetry::ErrorChain(&e), "store unavailable");
                return Err(unavailable(deps, "store"));
            }
        }
    }
    warn!("the charge kept moving under the refund; answered 503");
    Err(unavailable(deps, "store"))
}

/// `GET`: where the refund stands, from one strongly consistent read.
pub(crate) async fn status(
    deps: &Checkout,
    order_id: OrderId,
    refund_id: RefundId,
    caller: &Principal,
) -> Answer {
    let key = OperationKey::refund(order_id, refund_id);
    let op = read(deps, &key)
        .await?
        .filter(|op| created_by(op, caller))
        .ok_or_else(|| {
            error(
                404,
                "refund_not_found",
                "no such refund of this order",
                None,
            )
        })?;
    let mut body = summary(&op);
    body["updated_at"] = json!(op.updated_at.to_rfc3339());
    body["stripe_refund_id"] = json!(op.stripe_refund_id);
    if let Some(review) = &op.review {
        body["review_reason"] = json!(review.reason);
    }
    Ok(reply(200, body))
}

/// The order's refunds as `GET /orders/{order_id}/charge` lists them.
pub(crate) async fn of_order(deps: &Checkout, order_id: &OrderId) -> Result<Value, Reply> {
    let refunds = deps.store.refunds_of(order_id).await.map_err(|e| {
        error!(error = %charge_once::telemetry::ErrorChain(&e), "store unavailable");
        unavailable(deps, "store")
    })?;
    Ok(Value::Array(refunds.iter().map(summary).collect()))
}

/// The body's `amount` (optional: all that is left) and `reason` (Stripe's), nothing else.
fn parse(body: &str) -> Result<RefundRequest, Reply> {
    let body = if body.trim().is_empty() { "{}" } else { body };
    let obj = json_object(body)?;
    let mut problems = Vec::new();
    for key in obj
        .keys()
        .filter(|k| !["amount", "reason"].contains(&k.as_str()))
    {
        problems.push(ValidationError::new(
            "body",
            format!("unknown field {key:?}"),
        ));
    }
    let amount = match obj.get("amount") {
        None | Some(Value::Null) => None,
        Some(v) => v
            .as_i64()
            .ok_or_else(|| {
                ValidationError::new("amount", "must be an integer number of minor units")
            })
            .and_then(Amount::new)
            .map_err(|e| problems.push(e))
            .ok(),
    };
    let reason = match obj.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => RefundReason::parse(s).map_err(|e| problems.push(e)).ok(),
        Some(_) => {
            problems.push(ValidationError::new("reason", "must be a string"));
            None
        }
    };
    if !problems.is_empty() {
        return Err(invalid(problems));
    }
    Ok(RefundRequest { amount, reason })
}

/// One record, strongly consistent; a 503 when the store is down.
pub(crate) async fn read(deps: &Checkout, key: &OperationKey) -> Result<Option<Operation>, Reply> {
    deps.store.get(key).await.map_err(|e| {
        error!(error = %charge_once::telemetry::ErrorChain(&e), "store unavailable");
        unavailable(deps, "store")
    })
}

/// A refusal of the door, unless the same refund already exists (then it is the answer).
async fn again_or(
    deps: &Checkout,
    refund_key: &OperationKey,
    request: &RefundRequest,
    caller: &Principal,
    refusal: RefundRefusal,
) -> Answer {
    if let Some(existing) = read(deps, refund_key).await? {
        return existing_refund(deps, existing, request, caller).await;
    }
    warn!(%refusal, "refund refused; nothing written");
    Err(match refusal {
        RefundRefusal::NoCharge => no_charge(),
        RefundRefusal::NotSucceeded(_) | RefundRefusal::NoPaymentIntent => {
            error(409, "charge_not_succeeded", &refusal.to_string(), None)
        }
        RefundRefusal::NothingLeft => {
            error(409, "nothing_left_to_refund", &refusal.to_string(), None)
        }
        RefundRefusal::OverWhatIsLeft { left, .. } => {
            let mut reply = error(409, "over_refund", &refusal.to_string(), None);
            reply.body["error"]["left"] = json!(left);
            reply
        }
    })
}

/// The same refund id again: the same refund (200, queued again while never attempted), or a
/// conflict for another body or another caller.
async fn existing_refund(
    deps: &Checkout,
    existing: Operation,
    request: &RefundRequest,
    caller: &Principal,
) -> Answer {
    if !created_by(&existing, caller) || existing.fingerprint != request.fingerprint() {
        warn!(operation_id = %existing.operation_id, "refund id re-used with another body or by another caller; refused");
        return Err(error(
            409,
            "refund_conflict",
            "this refund id is already a refund with a different amount or reason",
            None,
        ));
    }
    let mut body = summary(&existing);
    if existing.first_attempted_at.is_none() && !existing.status.is_settled() {
        body["queued"] = Value::Bool(send(deps, &existing).await);
    }
    Ok(reply(200, body))
}

/// A new operation (a refund, a capture, a cancel), recorded: its message sent, answered 202 with
/// `summary` of it and whether the message went out.
pub(crate) async fn queued(
    deps: &Checkout,
    op: Operation,
    summary: fn(&Operation) -> Value,
) -> Answer {
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

/// Sends a refund's (a capture's, a cancel's) message; false when the queue is down. The
/// operation is recorded by then (a refund's amount reserved on the charge, a capture's claim on
/// it), so it is accepted all the same: the reconciler sends a `pending` operation's message
/// again after the grace period, and the same request again sends it too. An error answer here
/// would invite a retry under a *new* refund id, which is a second refund. Counted as
/// `CheckoutUnavailable` (`queue`), as a charge's 503 is.
pub(crate) async fn send(deps: &Checkout, op: &Operation) -> bool {
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
        "refund_id": op.kind.refund_id().map(|id| id.as_str()),
        "status": op.status.as_str(),
        "amount": op.params.amount().minor_units(),
        "currency": op.params.currency().as_str(),
    })
}

pub(crate) fn no_charge() -> Reply {
    error(
        404,
        "order_not_found",
        "no charge was made for this order",
        None,
    )
}

pub(crate) fn reply(status: i64, body: Value) -> Reply {
    Reply {
        status,
        body,
        header: None,
        logged: false,
    }
}
