//! `POST /orders/{order_id}/refunds/{refund_id}` with `{"amount"?, "reason"?}`, and `GET` on the
//! same path: a refund of the order's charge, exactly once, never more than was charged.
//!
//! `refund_id` is the merchant's identity of the refund action: the same id again is the same
//! refund (same body → the existing operation; another body → 409), two ids are two refunds even
//! for the same amount. The refund is recorded and its amount reserved on the charge in one
//! conditional write (`OperationCreates::create_beside`), then queued (message version 2); the
//! charge function creates it at Stripe with the key `refund-op:<operation_id>`.
//!
//! | answer | when | what changed |
//! |---|---|---|
//! | 202 `{operation_id, order_id, refund_id, status, amount, currency}` | a new refund | the refund written and its amount reserved on the charge, one message sent |
//! | 200 (same body) | the same refund id again, same body, same caller | nothing written; still `pending`, the message is sent again |
//! | 409 `refund_conflict` | the same refund id with another body, or another caller's | nothing |
//! | 409 `charge_not_succeeded` | the order's charge is not `succeeded` (pending, unknown, failed): only money taken is refunded | nothing |
//! | 409 `disputed` | the charge has an open dispute Stripe says leaves it unrefundable (funds withdrawn; an inquiry lets the refund through): the dispute is answered in Stripe's dashboard | nothing |
//! | 409 `nothing_left_to_refund` / `over_refund` | the charge is refunded in full / the amount is over what is left (`left` in the body) | nothing |
//! | 404 | no charge for this order, or another caller's order | nothing |
//! | 400 | invalid `refund_id`, `amount` (a positive integer of minor units, in the digits Stripe refunds in the charge's currency: a three-decimal currency's last digit 0, ISK in hundreds) or `reason` | nothing |
//! | GET 200 / 404 | where the refund stands / no such refund of the caller's | nothing |
//! | 503 | DynamoDB or SQS failed | possibly the refund (then `pending`: the reconciler sends it) |

use charge_core::refund::{
    self,
    request::{RefundReason, RefundRequest},
    RefundRefusal,
};
use charge_core::store::ReserveRefund;
use charge_core::store_rules::{ChargeClaim, Guard};
use charge_core::{
    domain::{Amount, Fingerprint, OrderId, Principal, RefundId, ValidationError},
    operation::{Operation, OperationKey},
    time::Timestamp,
};
use serde_json::{json, Value};
use tracing::error;

use crate::door::{
    self, created_by, error, invalid, json_object, no_charge, read, reply, unavailable, Answer,
    Beside, Checkout, Reply,
};

/// `POST`: the refund `refund_id` of `order_id`'s charge, as `body` asks.
pub(crate) async fn create(
    deps: &Checkout,
    order_id: OrderId,
    refund_id: RefundId,
    body: &str,
    caller: &Principal,
) -> Answer {
    let door = Refund {
        request: parse(body)?,
        key: OperationKey::refund(order_id.clone(), refund_id.clone()),
        refund_id,
    };
    door::create(deps, &door, &order_id, caller).await
}

/// A refund asked: the merchant's refund id, its record's key, and the body.
struct Refund {
    refund_id: RefundId,
    key: OperationKey,
    request: RefundRequest,
}

/// A refund is recorded and its amount reserved on the charge in one write.
impl Beside for Refund {
    type Refusal = RefundRefusal;
    type OnCharge = ReserveRefund;

    fn key(&self) -> &OperationKey {
        &self.key
    }

    fn fingerprint(&self) -> Fingerprint {
        self.request.fingerprint()
    }

    fn decide(
        &self,
        deps: &Checkout,
        charge: &Operation,
        caller: &Principal,
        now: Timestamp,
    ) -> Result<(Operation, ReserveRefund), RefundRefusal> {
        let (params, reserve) = refund::reserve(charge, &self.request, now)?;
        let op = Operation::new_refund(
            charge.order_id.clone(),
            self.refund_id.clone(),
            &self.request,
            params,
            caller.clone(),
            now,
            deps.pending_grace,
        );
        Ok((op, reserve))
    }

    fn claim(reserve: &ReserveRefund) -> ChargeClaim<'_> {
        ChargeClaim::Reserve(reserve)
    }

    /// Another refund of the same order reserved meanwhile, or the charge's status moved.
    fn moved(guard: &Guard) -> bool {
        matches!(guard, Guard::ReservedAtMost(_) | Guard::StatusIs(_))
    }

    fn refused(refusal: RefundRefusal) -> Reply {
        let message = refusal.to_string();
        match refusal {
            RefundRefusal::NoCharge => no_charge(),
            RefundRefusal::NotSucceeded(_) | RefundRefusal::NoPaymentIntent => {
                error(409, "charge_not_succeeded", &message, None)
            }
            RefundRefusal::NothingLeft => error(409, "nothing_left_to_refund", &message, None),
            RefundRefusal::Disputed { .. } => error(409, "disputed", &message, None),
            // Stripe would refuse it (400); refused here, the same 400 as a checkout's amount.
            RefundRefusal::Indivisible(problem) => invalid(vec![problem]),
            RefundRefusal::OverWhatIsLeft { left, .. } => {
                let mut reply = error(409, "over_refund", &message, None);
                reply.body["error"]["left"] = json!(left);
                reply
            }
        }
    }

    fn conflict(_: &Operation) -> Reply {
        error(
            409,
            "refund_conflict",
            "this refund id is already a refund with a different amount or reason",
            None,
        )
    }

    fn summary(op: &Operation) -> Value {
        summary(op)
    }
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
    body["stripe_refund_id"] = json!(op.stripe_refund_id());
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
