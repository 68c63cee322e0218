//! What the checkout function's doors share: what they are given ([`Checkout`]), the words they
//! answer in ([`Reply`]: an error with its code, a 400 naming each field, a counted 503), and the
//! one loop of the doors that write an operation beside the order's charge (a refund, a capture,
//! a cancel): read the charge, decide, write both records in one conditional write, queue.
//!
//! The doors stand on this module and this module on nothing of theirs: `handler` routes to
//! `refunds` and `takes`, and all three answer through here.

use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::apigw::ApiGatewayV2httpResponse;
use aws_lambda_events::encodings::Body;
use aws_lambda_events::http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use charge_core::store_rules::Guard;
use charge_core::store_rules::{ChargeClaim, CreatedBeside};
use charge_core::{
    domain::{Fingerprint, OrderId, Principal, ValidationError},
    operation::{Operation, OperationKey},
    time::{Clock, Timestamp},
};
use charge_once::ports::{DoorStore, MetricsSink, OperationQueue, QueuedOperation};
use serde_json::{json, Map, Value};
use tracing::{error, info, warn};

/// What the handler needs, built once in `main`.
pub struct Checkout {
    pub store: Arc<dyn DoorStore>,
    pub queue: Arc<dyn OperationQueue>,
    pub clock: Arc<dyn Clock>,
    pub pending_grace: Duration,
    /// How many charge attempts one order may make ([`charge_core::attempt::AttemptLimit`]).
    pub max_charge_attempts: charge_core::attempt::AttemptLimit,
    /// Where `CheckoutUnavailable` goes (stdout in Lambda).
    pub metrics: Arc<dyn MetricsSink>,
}

/// An HTTP answer before it becomes API Gateway's response type.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: i64,
    pub(crate) body: Value,
    pub(crate) header: Option<(HeaderName, &'static str)>,
    /// The answer's line is already logged (a new operation's): `handle` logs no other.
    pub(crate) logged: bool,
}

impl Reply {
    pub(crate) fn into_response(self) -> ApiGatewayV2httpResponse {
        let mut resp = ApiGatewayV2httpResponse::default();
        resp.status_code = self.status;
        resp.headers
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some((name, value)) = self.header {
            resp.headers.insert(name, HeaderValue::from_static(value));
        }
        resp.body = Some(Body::Text(self.body.to_string()));
        resp
    }
}

/// A door's answer: `Err` for a refusal, so `?` answers early.
pub(crate) type Answer = Result<Reply, Reply>;

/// `body` answered with `status`.
pub(crate) fn reply(status: i64, body: Value) -> Reply {
    Reply {
        status,
        body,
        header: None,
        logged: false,
    }
}

/// `{"error": {code, message, fields?}}` answered with `status`.
pub(crate) fn error(status: i64, code: &str, message: &str, fields: Option<Value>) -> Reply {
    let mut err = json!({"code": code, "message": message});
    if let Some(fields) = fields {
        err["fields"] = fields;
    }
    reply(status, json!({ "error": err }))
}

/// A 400 naming each field that is wrong.
pub(crate) fn invalid(problems: Vec<ValidationError>) -> Reply {
    let message = problems
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("; ");
    let fields: Vec<Value> = problems
        .iter()
        .map(|p| json!({"field": p.field, "message": p.message}))
        .collect();
    error(400, "invalid_request", &message, Some(Value::Array(fields)))
}

/// The 404 of an order without a charge, or with another caller's.
pub(crate) fn no_charge() -> Reply {
    error(
        404,
        "order_not_found",
        "no charge was made for this order",
        None,
    )
}

/// A 503, counted: one `CheckoutUnavailable` EMF line (with what failed, `store` or `queue`).
pub(crate) fn unavailable(deps: &Checkout, cause: &str) -> Reply {
    count_unavailable(deps, cause);
    let mut reply = error(
        503,
        "temporarily_unavailable",
        "the charge could not be recorded or queued right now; retry the same request",
        None,
    );
    reply.header = Some((RETRY_AFTER, "2"));
    reply
}

/// One `CheckoutUnavailable` EMF line: `cause` (`store` or `queue`) failed this request.
pub(crate) fn count_unavailable(deps: &Checkout, cause: &str) {
    deps.metrics.emit(charge_once::telemetry::emf_line_classed(
        "checkout",
        ("Cause", cause),
        deps.clock.now(),
        &[("CheckoutUnavailable", 1.0, "Count")],
    ));
}

/// The body as a JSON object, or the 400 that says why it is not one.
pub(crate) fn json_object(body: &str) -> Result<Map<String, Value>, Reply> {
    let value: Value = serde_json::from_str(body)
        .map_err(|_| error(400, "invalid_json", "the body is not valid JSON", None))?;
    match value {
        Value::Object(obj) => Ok(obj),
        _ => Err(error(
            400,
            "invalid_json",
            "the body must be a JSON object",
            None,
        )),
    }
}

/// Whether `caller` may see `op`: it was requested by the same caller ([`Principal::owner`]: any
/// session of the same role), or by nobody recorded. Records of releases before 2026-11-30 have
/// no `requested_by` (their route authenticated nobody), so any authenticated caller still sees
/// them, as before; every record written since has one.
pub(crate) fn created_by(op: &Operation, caller: &Principal) -> bool {
    op.requested_by
        .as_ref()
        .is_none_or(|owner| owner.same_owner(caller))
}

/// One record, strongly consistent; a 503 when the store is down.
pub(crate) async fn read(deps: &Checkout, key: &OperationKey) -> Result<Option<Operation>, Reply> {
    deps.store.get(key).await.map_err(|e| {
        error!(error = %charge_once::telemetry::ErrorChain(&e), "store unavailable");
        unavailable(deps, "store")
    })
}

/// The order's charge as refunds, captures and cancels act on it: its latest attempt (the
/// paid one, once paid), strongly consistent; a 503 when the store is down.
pub(crate) async fn read_charge(
    deps: &Checkout,
    order_id: &OrderId,
) -> Result<Option<Operation>, Reply> {
    deps.store.charge_of(order_id).await.map_err(|e| {
        error!(error = %charge_once::telemetry::ErrorChain(&e), "store unavailable");
        unavailable(deps, "store")
    })
}

/// `caller`'s charge of the order ([`read_charge`]): the 404 when there is none, or it is another
/// caller's.
pub(crate) async fn callers_charge(
    deps: &Checkout,
    order_id: &OrderId,
    caller: &Principal,
) -> Result<Operation, Reply> {
    read_charge(deps, order_id)
        .await?
        .filter(|c| created_by(c, caller))
        .ok_or_else(no_charge)
}

/// A door that writes its operation beside the order's charge, in one conditional write over
/// both records: what it decides on the charge, how it writes, and how it answers.
pub(crate) trait Beside {
    /// What the door's rule on the charge refuses with.
    type Refusal: Display;
    /// What the write does to the charge beside the operation (a refund's reservation, a
    /// capture's or cancel's take).
    type OnCharge;

    /// The record of what was asked, looked for before a refusal is answered (asked again after
    /// it took the charge, the operation there is the answer).
    fn key(&self) -> &OperationKey;
    /// What was asked, as the record keeps it: the same again is the same operation.
    fn fingerprint(&self) -> Fingerprint;
    /// The operation to write and what it does to `charge` (as read, at `now`), or the rule's
    /// refusal.
    fn decide(
        &self,
        deps: &Checkout,
        charge: &Operation,
        caller: &Principal,
        now: Timestamp,
    ) -> Result<(Operation, Self::OnCharge), Self::Refusal>;
    /// What the one write of the operation claims on the charge.
    fn claim(on_charge: &Self::OnCharge) -> ChargeClaim<'_>;
    /// Whether the charge refusing the write by `guard` means it moved since it was read (so the
    /// door decides again), rather than that it is not this caller's charge any more.
    fn moved(guard: &Guard) -> bool;
    /// The answer to the rule's refusal.
    fn refused(refusal: Self::Refusal) -> Reply;
    /// The answer to the same request asked with another body, or by another caller.
    fn conflict(existing: &Operation) -> Reply;
    /// The answer when the request's record is `existing`, an operation of an earlier attempt
    /// of the order's charge than `charge`, the latest as read (the order's one cancel, made
    /// before the order was charged again): not this request's operation, and the write of one
    /// for `charge` is refused by it.
    fn earlier_attempt(existing: &Operation, charge: &Operation) -> Reply {
        earlier_attempt(existing, charge)
    }
    /// How the door shows one of its operations.
    fn summary(op: &Operation) -> Value;
}

/// How many times a door decides again when the charge moved between the read and the write
/// (another refund of the same order reserved meanwhile, another request took it).
const ATTEMPTS: usize = 3;

/// The door's `POST`: `caller`'s charge of the order read (its latest attempt: a declined
/// order charged again is refunded, captured or canceled on the attempt that holds the money),
/// the door's rule decided on it, the operation written beside it (its claim on that attempt's
/// record, the attempt named on the operation's), queued; decided again on the charge as it is
/// now when it moved between the read and the write.
pub(crate) async fn create<D: Beside>(
    deps: &Checkout,
    door: &D,
    order_id: &OrderId,
    caller: &Principal,
) -> Answer {
    create_from(deps, door, order_id, caller, None).await
}

/// [`create`], first deciding on `read`, `caller`'s charge as the door already read it
/// ([`callers_charge`]: a door that needs the charge to know what was asked reads it once, not
/// twice); read again only when it moved.
pub(crate) async fn create_from<D: Beside>(
    deps: &Checkout,
    door: &D,
    order_id: &OrderId,
    caller: &Principal,
    mut read: Option<Operation>,
) -> Answer {
    for _ in 0..ATTEMPTS {
        let charge = match read.take() {
            Some(charge) => charge,
            None => callers_charge(deps, order_id, caller).await?,
        };
        let (op, on_charge) = match door.decide(deps, &charge, caller, deps.clock.now()) {
            Ok(decided) => decided,
            Err(refusal) => return again_or(deps, door, &charge, caller, refusal).await,
        };
        match deps.store.create_beside(&op, D::claim(&on_charge)).await {
            Ok(CreatedBeside::New(op)) if op.status.is_settled() => {
                info!(status = 200, "settled by its own write; nothing to queue");
                return Ok(Reply {
                    logged: true,
                    ..reply(200, D::summary(&op))
                });
            }
            Ok(CreatedBeside::New(op)) => return queued(deps, op, D::summary).await,
            Ok(CreatedBeside::Existing(existing)) if of_earlier_attempt(&existing, &charge) => {
                warn!(operation_id = %existing.operation_id, "the request's record is an earlier charge attempt's; refused");
                return Err(D::earlier_attempt(&existing, &charge));
            }
            Ok(CreatedBeside::Existing(existing)) => {
                return existing_one(deps, door, existing, caller).await
            }
            Ok(CreatedBeside::ChargeRefused(Some((_, by)))) if D::moved(&by) => {
                info!(
                    refused_by = by.as_str(),
                    "the charge moved since read; deciding again"
                );
            }
            Ok(CreatedBeside::ChargeRefused(_)) => return Err(no_charge()),
            Err(e) => {
                error!(error = %charge_once::telemetry::ErrorChain(&e), "store unavailable");
                return Err(unavailable(deps, "store"));
            }
        }
    }
    warn!("the charge kept moving under the request; answered 503");
    Err(unavailable(deps, "store"))
}

/// A refusal of the door, unless the same request's operation already exists (then it is the
/// answer); one of an earlier attempt of the order's charge than `charge` is not, and the
/// refusal (of the latest attempt, as read) is.
async fn again_or<D: Beside>(
    deps: &Checkout,
    door: &D,
    charge: &Operation,
    caller: &Principal,
    refusal: D::Refusal,
) -> Answer {
    if let Some(existing) = read(deps, door.key()).await? {
        if !of_earlier_attempt(&existing, charge) {
            return existing_one(deps, door, existing, caller).await;
        }
    }
    warn!(%refusal, "refused; nothing written");
    Err(D::refused(refusal))
}

/// `existing` acts on another attempt of the order's charge than `charge` (the latest, as
/// read): an earlier one's, written before the order was charged again.
pub(crate) fn of_earlier_attempt(existing: &Operation, charge: &Operation) -> bool {
    existing.charge_key() != charge.key()
}

/// The 409 of a request whose record is an earlier charge attempt's ([`Beside::earlier_attempt`]).
pub(crate) fn earlier_attempt(existing: &Operation, charge: &Operation) -> Reply {
    let kind = existing.kind.as_str();
    error(
        409,
        "earlier_attempt",
        &format!(
            "this order's {kind} acted on its charge attempt {} ({}), before the order was charged again; it is not one of attempt {}",
            existing.params.charge_attempt().unwrap_or(1),
            existing.status.as_str(),
            charge.kind.attempt_no().unwrap_or(1),
        ),
        None,
    )
}

/// The same request again: the same operation (200, queued again while never attempted), or a
/// conflict for another body or another caller.
async fn existing_one<D: Beside>(
    deps: &Checkout,
    door: &D,
    existing: Operation,
    caller: &Principal,
) -> Answer {
    if !created_by(&existing, caller) || existing.fingerprint != door.fingerprint() {
        warn!(operation_id = %existing.operation_id, "asked again with another body or by another caller; refused");
        return Err(D::conflict(&existing));
    }
    let mut body = D::summary(&existing);
    if existing.first_attempted_at.is_none() && !existing.status.is_settled() {
        body["queued"] = Value::Bool(send(deps, &existing).await);
    }
    Ok(reply(200, body))
}

/// A new operation (a refund, a capture, a cancel), recorded: its message sent, answered 202 with
/// `summary` of it and whether the message went out.
async fn queued(deps: &Checkout, op: Operation, summary: fn(&Operation) -> Value) -> Answer {
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
async fn send(deps: &Checkout, op: &Operation) -> bool {
    match deps.queue.send(&QueuedOperation::first(op)).await {
        Ok(()) => true,
        Err(e) => {
            error!(error = %charge_once::telemetry::ErrorChain(&e), "queue unavailable; the reconciler re-sends it");
            count_unavailable(deps, "queue");
            false
        }
    }
}
