//! `POST /orders/{order_id}/charge` with `{"amount","currency","customer_id","payment_method"}`
//! and optionally `"capture": "automatic" | "manual"` (manual: authorized now, `status:
//! "authorized"` once Stripe holds the money, captured or canceled later by
//! `POST /orders/{order_id}/capture` / `cancel`, see `takes`), and `GET /orders/{order_id}/charge`
//! for where that charge stands.
//!
//! Who may call: the route is authenticated by API Gateway (IAM/SigV4 by default, or a JWT
//! authorizer; see template.yaml's `CheckoutAuth`). The caller is the merchant's order service and is
//! trusted to say the amount, currency, customer and payment method of a confirmed order. The
//! handler does not trust the deployment alone: it reads the principal from the event's
//! `requestContext.authorizer` (the IAM caller ARN, or the JWT `sub`, then `client_id`) before
//! anything else, refuses a request that carries none with 401, and stores it on the operation as
//! `requested_by`. A mis-deployed route without an authorizer therefore still cannot create a charge.
//!
//! | answer | when | what changed |
//! |---|---|---|
//! | 401 | no authenticated principal in `requestContext.authorizer` (POST or GET) | nothing |
//! | GET 200 `{order_id, operation_id, status, payment_intent, amount, currency, updated_at, review_reason?, refunds, attempt, attempts, paid_attempt}` | the order has a charge: the top-level fields are its **latest** attempt's, as before attempts (`refunds`: each refund's `{operation_id, refund_id, status, amount, currency}`; an authorization adds `capture: "manual"`, `capture_before`, `amount_captured`, `taken_by`); `attempt` is its number, `attempts` every attempt first to latest (`{attempt, operation_id, status, payment_method, payment_intent, last_error?}`), `paid_attempt` the one that succeeded or null | nothing (one consistent GetItem per attempt, one Query of the order's refunds) |
//! | GET 404 | no charge for this order, or one another caller created (a caller sees only its own orders: same role, any session; records without `requested_by`, from before 2026-11-30, are seen by every caller) | nothing |
//! | 202 `{operation_id, order_id, status, attempt}` | a new order: attempt 1 | one item written, one message sent |
//! | 202 `{operation_id, order_id, status, attempt}` | the order's latest attempt `n` ended `failed` (declined; not ended by a cancel), same amount, currency, customer and capture method, any payment method (the same one too), and `n` < `MAX_CHARGE_ATTEMPTS`: attempt `n + 1` | one TransactWriteItems: the attempt's item (`charge#<n+1>`), the head naming it (`latest_attempt`), attempt `n` checked failed; one message sent (version 5) |
//! | 200 `{operation_id, order_id, status, attempt}` | the latest attempt's own parameters while it is not `failed`, same caller; or a replay of an earlier (failed) attempt's request: answered with the latest | nothing written; if still `pending` and never sent, the message is sent again (recovers a crash between the write and SendMessage; FIFO dedup absorbs it within 5 minutes) |
//! | 409 `order_conflict` | another amount, currency, customer or capture method than the order's; or the order of another caller | nothing |
//! | 409 `attempt_in_flight` | another payment method while the latest attempt is `pending`, `unknown` or `authorized` (also the loser of two retries at once with different bodies) | nothing |
//! | 409 `paid` | another payment method once the latest attempt `succeeded` ("order … is paid by attempt n (pi_…); refund it instead") | nothing |
//! | 409 `canceled` | the latest attempt was ended by a cancel (`taken_by` a cancel's): a canceled order is not charged again (one a capture ended when it found the authorization lapsed is: nothing was taken) | nothing |
//! | 409 `too_many_attempts` | the latest attempt failed and the order made `MAX_CHARGE_ATTEMPTS` (template `MaxChargeAttempts`, default 5) | nothing |
//! | 400 | invalid field (field-level message) | nothing |
//! | 413 / 415 | body over 8 KiB / a declared media type other than `application/json` | nothing |
//! | 405 / 404 | other method / other path | nothing |
//! | 503 + `Retry-After` | DynamoDB or SQS failed | possibly the item (then `pending`: the reconciler or the client's retry sends it) |
//!
//! A 503 is an answer, not a Lambda error, so Lambda's `Errors` metric never sees it: each one
//! also emits the EMF metric `CheckoutUnavailable` (`Function=checkout`), which is alarmed.

use aws_lambda_events::apigw::{
    ApiGatewayRequestAuthorizer, ApiGatewayV2httpRequest, ApiGatewayV2httpResponse,
};
use aws_lambda_events::http::header::{ALLOW, CONTENT_TYPE};
use aws_lambda_events::http::Method;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use charge_core::attempt::{self, AttemptRefusal, Door};
use charge_core::domain::CaptureMethod;
use charge_core::store::{Created, CreatedAttempt};
use charge_core::{
    domain::{
        Amount, ChargeParams, Currency, CustomerId, OrderId, PaymentMethodId, Principal,
        ValidationError,
    },
    operation::{Operation, OperationStatus},
};
use charge_core::{
    domain::{OperationKind, RefundId},
    operation::OperationKey,
};
use charge_once::ports::QueuedOperation;
use lambda_runtime::LambdaEvent;
use serde_json::{json, Map, Value};
use tracing::{error, info, warn, Instrument};

use crate::door::{
    created_by, error, invalid, json_object, read, reply, unavailable, Answer, Checkout, Reply,
};
use crate::{refunds, takes};

/// Larger bodies are refused before parsing.
pub const MAX_BODY_BYTES: usize = 8 * 1024;
const FIELDS: [&str; 5] = [
    "amount",
    "currency",
    "customer_id",
    "payment_method",
    "capture",
];

/// Handles one request. Always an HTTP answer: bad input and infrastructure failures are responses,
/// not Lambda errors, so API Gateway never turns them into a bare 500.
///
/// Every log line of the request carries `request_id` and, once authenticated, `requested_by`
/// (and `order_id` / `operation_id` once known): one span for the whole request. One INFO line
/// per answer: `checkout answered` with its status, or for a new operation `operation recorded
/// and queued` (status 202) alone, which says all the other would (a line per charge less
/// in CloudWatch Logs, which bills by the byte).
pub async fn handle(
    deps: &Checkout,
    event: LambdaEvent<ApiGatewayV2httpRequest>,
) -> ApiGatewayV2httpResponse {
    let span = tracing::info_span!(
        "checkout",
        request_id = %event.context.request_id,
        requested_by = tracing::field::Empty,
        order_id = tracing::field::Empty,
        operation_id = tracing::field::Empty,
    );
    async {
        match accept(deps, &event.payload).await {
            Ok(reply) | Err(reply) => {
                if !reply.logged {
                    info!(status = reply.status, "checkout answered");
                }
                reply.into_response()
            }
        }
    }
    .instrument(span)
    .await
}

/// The authenticated caller, as API Gateway's authorizer put it in the request context: the IAM
/// caller ARN, else the JWT `sub`, else its `client_id`. `None` when the event names nobody (no
/// authorizer block, an empty one, or one without any of those fields).
pub fn principal_of(req: &ApiGatewayV2httpRequest) -> Option<Result<Principal, ValidationError>> {
    let authorizer: &ApiGatewayRequestAuthorizer = req.request_context.authorizer.as_ref()?;
    if let Some(arn) = authorizer
        .iam
        .as_ref()
        .and_then(|iam| non_empty(iam.user_arn.as_ref()))
    {
        return Some(Principal::iam(arn));
    }
    let claims = &authorizer.jwt.as_ref()?.claims;
    non_empty(claims.get("sub"))
        .or_else(|| non_empty(claims.get("client_id")))
        .map(Principal::jwt)
}

fn non_empty(v: Option<&String>) -> Option<&str> {
    v.map(|s| s.trim()).filter(|s| !s.is_empty())
}

async fn accept(deps: &Checkout, req: &ApiGatewayV2httpRequest) -> Answer {
    // Before anything else: an unauthenticated caller learns nothing, not even which paths exist.
    let requested_by = authenticated(req)?;
    let span = tracing::Span::current();
    span.record("requested_by", tracing::field::display(&requested_by));
    let method = &req.request_context.http.method;
    if *method != Method::POST && *method != Method::GET {
        let mut reply = error(405, "method_not_allowed", "use POST or GET", None);
        reply.header = Some((ALLOW, "POST, GET"));
        return Err(reply);
    }
    let (raw_order, route) = route_of(req).ok_or_else(|| {
        error(
            404,
            "not_found",
            "POST or GET /orders/{order_id}/charge, /orders/{order_id}/capture, \
             /orders/{order_id}/cancel or /orders/{order_id}/refunds/{refund_id}",
            None,
        )
    })?;
    let order_id = OrderId::parse(&raw_order).map_err(|e| invalid(vec![e]))?;
    span.record("order_id", tracing::field::display(&order_id));
    let route = match route {
        Route::Charge => Route::Charge,
        Route::Take(kind) => Route::Take(kind),
        Route::Refund(raw) => Route::Refund(RefundId::parse(&raw).map_err(|e| invalid(vec![e]))?),
    };
    if *method == Method::GET {
        return match route {
            Route::Charge => status_of(deps, order_id, &requested_by).await,
            Route::Refund(id) => refunds::status(deps, order_id, id, &requested_by).await,
            Route::Take(kind) => takes::status(deps, order_id, kind, &requested_by).await,
        };
    }
    if !media_type_is_json(req) {
        return Err(error(
            415,
            "unsupported_media_type",
            "send the body as application/json",
            None,
        ));
    }
    let body = body_text(req)?;
    match route {
        Route::Charge => {
            let params = parse_params(&body)?;
            let op = Operation::new(
                order_id,
                params,
                requested_by.clone(),
                deps.clock.now(),
                deps.pending_grace,
            );
            record(deps, op, &requested_by).await
        }
        Route::Refund(id) => refunds::create(deps, order_id, id, &body, &requested_by).await,
        Route::Take(kind) => takes::create(deps, order_id, kind, &body, &requested_by).await,
    }
}

/// The caller the authorizer vouched for; refused (401) without one.
fn authenticated(req: &ApiGatewayV2httpRequest) -> Result<Principal, Reply> {
    match principal_of(req) {
        Some(Ok(principal)) => Ok(principal),
        Some(Err(e)) => {
            warn!(error = %charge_once::telemetry::ErrorChain(&e), "authorizer context names an unusable principal; refused");
            Err(unauthenticated())
        }
        None => {
            warn!("no authenticated principal in the request context; refused");
            Err(unauthenticated())
        }
    }
}

/// Records the operation with one conditional put and queues it: a new order is accepted (202);
/// an order with a charge already is decided by the attempt door ([`attempt::decide`]): the
/// latest attempt answers (200; queued again while never sent), a new attempt starts after a
/// declined one (202, its own operation written by [`DoorStore::create_attempt`] and queued),
/// or it is refused (409, nothing written).
///
/// [`DoorStore::create_attempt`]: charge_once::ports::OperationCreates::create_attempt
async fn record(deps: &Checkout, op: Operation, requested_by: &Principal) -> Answer {
    let span = tracing::Span::current();
    let created = deps.store.create_if_absent(&op).await.map_err(|e| {
        error!(error = %charge_once::telemetry::ErrorChain(&e), "store unavailable");
        unavailable(deps, "store")
    })?;
    let head = match created {
        Created::New(op) => {
            span.record("operation_id", tracing::field::display(op.operation_id));
            send(deps, &op).await?;
            info!(status = 202, "operation recorded and queued");
            return Ok(Reply {
                logged: true,
                ..accepted(202, &op)
            });
        }
        Created::Existing(existing) => existing,
    };
    let mut attempts = attempts_from(deps, head).await?;
    // A retry that lost the write to another reads the attempts again and decides again: the
    // winner's own request is answered with it, another is in flight. Bounded: each lost write
    // means another attempt was made, and the limit bounds those.
    for _ in 0..3 {
        let door = attempt::decide(&attempts, &op, requested_by, deps.max_charge_attempts);
        match door {
            Ok(Door::Latest(latest)) => return answer_latest(deps, latest).await,
            Ok(Door::Start(new)) => {
                let created = deps.store.create_attempt(&new).await.map_err(|e| {
                    error!(error = %charge_once::telemetry::ErrorChain(&e), "store unavailable");
                    unavailable(deps, "store")
                })?;
                match created {
                    CreatedAttempt::New(op) => {
                        span.record("operation_id", tracing::field::display(op.operation_id));
                        send(deps, &op).await?;
                        info!(
                            status = 202,
                            attempt = new.number(),
                            "charge attempt recorded and queued"
                        );
                        return Ok(Reply {
                            logged: true,
                            ..accepted(202, &op)
                        });
                    }
                    CreatedAttempt::Refused => {
                        info!("another write started an attempt first; deciding again");
                        let head = read(deps, &OperationKey::charge(op.order_id.clone()))
                            .await?
                            .ok_or_else(|| unavailable(deps, "store"))?;
                        attempts = attempts_from(deps, head).await?;
                    }
                }
            }
            Err(refusal) => return Err(refused(&op, &attempts, refusal)),
        }
    }
    let latest = attempts.last().cloned().unwrap_or_else(|| op.clone());
    Err(refused(
        &op,
        &attempts,
        AttemptRefusal::InFlight {
            attempt: latest.kind.attempt_no().unwrap_or(1),
            status: latest.status,
        },
    ))
}

/// The order's attempts, first to latest, from its head as read: the head alone when it names
/// no later attempt (no read more, as before attempts), else each later one read (strongly
/// consistent, one GetItem each; the head is not read again). A head naming an attempt that is
/// not there (the store's write makes both at once) is answered 503 and logged, never read as
/// fewer attempts.
async fn attempts_from(deps: &Checkout, head: Operation) -> Result<Vec<Operation>, Reply> {
    deps.store.attempts_after(head).await.map_err(|e| {
        error!(error = %charge_once::telemetry::ErrorChain(&e), "store unavailable");
        unavailable(deps, "store")
    })
}

/// The latest attempt answers the request (200): queued again while it was never sent.
async fn answer_latest(deps: &Checkout, latest: Operation) -> Answer {
    tracing::Span::current().record("operation_id", tracing::field::display(latest.operation_id));
    if latest.status == OperationStatus::Pending && latest.first_attempted_at.is_none() {
        send(deps, &latest).await?;
        info!("existing pending operation queued again");
    }
    Ok(accepted(200, &latest))
}

/// A 409 for `refusal`, logged.
fn refused(op: &Operation, attempts: &[Operation], refusal: AttemptRefusal) -> Reply {
    match &refusal {
        AttemptRefusal::OtherCaller => {
            // Another caller's order: the same refusal as for other parameters, so the answer
            // says neither the operation nor where it stands.
            warn!(
                operation_id = %attempts.first().map(|a| a.operation_id.to_string()).unwrap_or_default(),
                "order created by another caller re-submitted; refused"
            );
        }
        AttemptRefusal::Conflict => {
            warn!("same order re-submitted with different parameters; refused")
        }
        other => warn!(code = other.code(), "another charge attempt refused"),
    }
    error(
        409,
        refusal.code(),
        &refusal.message(op.order_id.as_str()),
        None,
    )
}

/// `GET /orders/{order_id}/charge`: where the order's charge stands, from strongly consistent
/// reads of its attempts (no Stripe call, nothing written): the latest attempt's fields as
/// before attempts, with `attempt`, every attempt (`attempts`) and the one that paid
/// (`paid_attempt`). Another caller's order answers the same 404 as no order at all: a caller
/// learns nothing of orders it did not create, not even that they exist.
async fn status_of(deps: &Checkout, order_id: OrderId, caller: &Principal) -> Answer {
    let key = OperationKey::charge(order_id);
    let head = read(deps, &key).await?;
    let not_found = || {
        error(
            404,
            "order_not_found",
            "no charge was requested for this order",
            None,
        )
    };
    let Some(head) = head else {
        return Err(not_found());
    };
    if !created_by(&head, caller) {
        warn!(
            operation_id = %head.operation_id,
            "status asked for an order another caller created; answered 404"
        );
        return Err(not_found());
    }
    let attempts = attempts_from(deps, head).await?;
    let Some(op) = attempts.last() else {
        return Err(not_found());
    };
    tracing::Span::current().record("operation_id", tracing::field::display(op.operation_id));
    let mut body = json!({
        "order_id": op.order_id.as_str(),
        "operation_id": op.operation_id.to_string(),
        "status": op.status.as_str(),
        "payment_intent": op.external_id,
        "amount": op.params.amount().minor_units(),
        "currency": op.params.currency().as_str(),
        "updated_at": op.updated_at.to_rfc3339(),
    });
    if let Some(review) = &op.review {
        body["review_reason"] = json!(review.reason);
    }
    if op.is_manual_capture() {
        // An authorization's: its deadline, what was captured, which capture or cancel took it.
        body["capture"] = json!("manual");
        body["capture_before"] = json!(op.capture_before().map(|t| t.to_rfc3339()));
        body["amount_captured"] = json!(op.amount_captured().map(|a| a.minor_units()));
        body["taken_by"] = json!(op.taken_by().map(|t| t.kind().as_str()));
    }
    body["refunds"] = refunds::of_order(deps, &op.order_id).await?;
    body["attempt"] = json!(attempt_no(op));
    body["attempts"] = attempts
        .iter()
        .map(|a| {
            let mut shown = json!({
                "attempt": attempt_no(a),
                "operation_id": a.operation_id.to_string(),
                "status": a.status.as_str(),
                "payment_method": a.params.charge().map(|c| c.payment_method.as_str()),
                "payment_intent": a.external_id,
            });
            if let Some(e) = &a.last_error {
                shown["last_error"] = json!(e);
            }
            shown
        })
        .collect();
    body["paid_attempt"] = json!(attempt::paid_attempt(&attempts));
    Ok(reply(200, body))
}

fn attempt_no(op: &Operation) -> u32 {
    op.kind.attempt_no().unwrap_or(1)
}

async fn send(deps: &Checkout, op: &Operation) -> Result<(), Reply> {
    deps.queue
        .send(&QueuedOperation::first(op))
        .await
        .map_err(|e| {
            // The item is written and `pending`: a retry of this request re-sends, and the
            // reconciler re-enqueues it after the grace period if nobody does.
            error!(error = %charge_once::telemetry::ErrorChain(&e), "queue unavailable");
            unavailable(deps, "queue")
        })
}

/// Which of the order's operations a path names: a refund by its id as the path has it, then
/// parsed.
enum Route<Refund = RefundId> {
    Charge,
    Refund(Refund),
    /// A capture or a cancel.
    Take(OperationKind),
}

/// The order id and the operation its path names: from the route's path parameters (the path's
/// last segment telling a capture or a cancel from the charge), else from the raw path
/// (`/orders/{order_id}/charge`, `/capture`, `/cancel` or `/refunds/{refund_id}`).
fn route_of(req: &ApiGatewayV2httpRequest) -> Option<(String, Route<String>)> {
    let path = req
        .raw_path
        .as_deref()
        .or(req.request_context.http.path.as_deref());
    if let Some(id) = req.path_parameters.get("order_id") {
        let route = match (req.path_parameters.get("refund_id"), path) {
            (Some(refund), _) => Route::Refund(refund.clone()),
            (None, Some(p)) if p.ends_with("/capture") => Route::Take(OperationKind::FIRST_CAPTURE),
            (None, Some(p)) if p.ends_with("/cancel") => Route::Take(OperationKind::Cancel),
            (None, _) => Route::Charge,
        };
        return Some((id.clone(), route));
    }
    let rest = path?.strip_prefix("/orders/")?;
    for (suffix, route) in [
        ("/charge", Route::Charge),
        ("/capture", Route::Take(OperationKind::FIRST_CAPTURE)),
        ("/cancel", Route::Take(OperationKind::Cancel)),
    ] {
        if let Some(id) = rest.strip_suffix(suffix) {
            return (!id.contains('/')).then(|| (id.to_owned(), route));
        }
    }
    let (id, refund) = rest.split_once("/refunds/")?;
    (!id.contains('/') && !refund.contains('/'))
        .then(|| (id.to_owned(), Route::Refund(refund.to_owned())))
}

/// The declared media type is JSON, or none is declared (the body must then parse as JSON anyway).
fn media_type_is_json(req: &ApiGatewayV2httpRequest) -> bool {
    let Some(declared) = req.headers.get(CONTENT_TYPE) else {
        return true;
    };
    declared
        .to_str()
        .ok()
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// The request body as text, at most [`MAX_BODY_BYTES`]. HTTP APIs pass a JSON body as text, but
/// base64-encode a body whose media type they do not know to be text (a request without
/// `Content-Type`, as `sam local generate-event` shows it): decoded here, same bytes either way.
fn body_text(req: &ApiGatewayV2httpRequest) -> Result<String, Reply> {
    let too_large = || {
        error(
            413,
            "body_too_large",
            &format!("the body must be at most {MAX_BODY_BYTES} bytes"),
            None,
        )
    };
    let raw = req.body.as_deref().unwrap_or("");
    if !req.is_base64_encoded {
        if raw.len() > MAX_BODY_BYTES {
            return Err(too_large());
        }
        return Ok(raw.to_owned());
    }
    // Bound the work before decoding: base64 is 4 characters per 3 bytes.
    if raw.len() > MAX_BODY_BYTES.div_ceil(3) * 4 {
        return Err(too_large());
    }
    let bytes = BASE64
        .decode(raw)
        .map_err(|_| error(400, "invalid_body", "the body is not valid base64", None))?;
    if bytes.len() > MAX_BODY_BYTES {
        return Err(too_large());
    }
    String::from_utf8(bytes)
        .map_err(|_| error(400, "invalid_json", "the body is not UTF-8 JSON", None))
}

fn parse_params(body: &str) -> Result<ChargeParams, Reply> {
    let obj = json_object(body)?;
    let mut problems = Vec::new();
    for key in obj.keys() {
        if !FIELDS.contains(&key.as_str()) {
            problems.push(ValidationError::new(
                "body",
                format!("unknown field {key:?}"),
            ));
        }
    }
    let amount = field(&obj, "amount", &mut problems, |v| match v.as_i64() {
        Some(n) => Amount::new(n),
        _ => Err(ValidationError::new(
            "amount",
            "must be an integer number of minor units",
        )),
    });
    let currency = text(&obj, "currency", &mut problems, Currency::parse);
    let customer_id = text(&obj, "customer_id", &mut problems, CustomerId::parse);
    let payment_method = text(
        &obj,
        "payment_method",
        &mut problems,
        PaymentMethodId::parse,
    );
    // Optional: absent or null is automatic, as before authorizations existed.
    let capture_method = match obj.get("capture") {
        None | Some(Value::Null) => Some(CaptureMethod::Automatic),
        Some(v) => v
            .as_str()
            .ok_or_else(|| ValidationError::new("capture", "must be a string"))
            .and_then(CaptureMethod::parse)
            .map_err(|e| problems.push(e))
            .ok(),
    };
    if let (Some(amount), Some(currency)) = (amount, &currency) {
        // Stripe would refuse it (400) and the order would end in review; refuse it here.
        if let Err(e) = ChargeParams::check_chargeable(amount, currency) {
            problems.push(e);
        }
    }
    match (
        amount,
        currency,
        customer_id,
        payment_method,
        capture_method,
    ) {
        (Some(amount), Some(currency), Some(customer_id), Some(payment_method), Some(capture))
            if problems.is_empty() =>
        {
            Ok(ChargeParams {
                amount,
                currency,
                customer_id,
                payment_method,
                capture_method: capture,
            })
        }
        _ => Err(invalid(problems)),
    }
}

fn field<T>(
    obj: &Map<String, Value>,
    name: &'static str,
    problems: &mut Vec<ValidationError>,
    parse: impl FnOnce(&Value) -> Result<T, ValidationError>,
) -> Option<T> {
    match obj.get(name) {
        None | Some(Value::Null) => {
            problems.push(ValidationError::new(name, "is required"));
            None
        }
        Some(v) => parse(v).map_err(|e| problems.push(e)).ok(),
    }
}

fn text<T>(
    obj: &Map<String, Value>,
    name: &'static str,
    problems: &mut Vec<ValidationError>,
    parse: impl FnOnce(&str) -> Result<T, ValidationError>,
) -> Option<T> {
    field(obj, name, problems, |v| match v.as_str() {
        Some(s) => parse(s),
        None => Err(ValidationError::new(name, "must be a string")),
    })
}

fn accepted(status: i64, op: &Operation) -> Reply {
    let body = json!({
        "operation_id": op.operation_id.to_string(),
        "order_id": op.order_id.as_str(),
        "status": op.status.as_str(),
        "attempt": attempt_no(op),
    });
    reply(status, body)
}

fn unauthenticated() -> Reply {
    error(
        401,
        "unauthenticated",
        "this route needs an authenticated caller (SigV4 with an allowed IAM role, or a JWT)",
        None,
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use aws_lambda_events::encodings::Body;
    use aws_lambda_events::http::header::HeaderValue;
    use charge_once::ports::OperationQueue;

    use super::*;
    use charge_core::time::{ManualClock, Timestamp};
    use charge_once::memory::{MemoryQueue, MemoryStore};
    use lambda_runtime::Context;

    fn event(file: &str) -> ApiGatewayV2httpRequest {
        let path = format!("{}/../../events/{file}", env!("CARGO_MANIFEST_DIR"));
        let raw = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&raw).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    struct Fixture {
        store: Arc<MemoryStore>,
        queue: Arc<MemoryQueue>,
        deps: Checkout,
    }

    fn fixture() -> Fixture {
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_800_000_000_000)));
        let store = Arc::new(MemoryStore::new());
        let queue = Arc::new(MemoryQueue::new(clock.clone()));
        let deps = Checkout {
            store: store.clone(),
            queue: queue.clone(),
            clock,
            pending_grace: Duration::from_secs(300),
            max_charge_attempts: Default::default(),
            metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
        };
        Fixture { store, queue, deps }
    }

    async fn call(f: &Fixture, req: ApiGatewayV2httpRequest) -> (i64, Value) {
        let resp = handle(&f.deps, LambdaEvent::new(req, Context::default())).await;
        let body = match resp.body {
            Some(Body::Text(t)) => serde_json::from_str(&t).unwrap(),
            other => panic!("expected a JSON body, got {other:?}"),
        };
        (resp.status_code, body)
    }

    /// `event`'s refund request for `refund_id` of ord-1001 with `body`.
    fn refund_event(refund_id: &str, body: Value) -> ApiGatewayV2httpRequest {
        let mut req = event("refund-valid.json");
        req.path_parameters
            .insert("refund_id".into(), refund_id.to_owned());
        req.body = Some(body.to_string());
        req
    }

    /// ord-1001's charge, as the charge function leaves a succeeded one: 1250 usd, `pi_1001`.
    async fn charged(f: &Fixture) -> Operation {
        let (status, _) = call(f, event("checkout-valid.json")).await;
        assert_eq!(status, 202);
        let mut op = f.store.all().remove(0);
        op.status = OperationStatus::Succeeded;
        op.external_id = Some(charge_core::domain::PaymentIntentId::parse("pi_1001").unwrap());
        op.next_due_at = None;
        f.store.put_for_tests(op.clone());
        op
    }

    fn reserved(f: &Fixture) -> i64 {
        f.store
            .all()
            .iter()
            .find(|op| op.kind.is_charge())
            .map_or(0, |op| op.refund_reserved())
    }

    #[tokio::test]
    async fn a_refund_is_recorded_reserved_and_queued_once() {
        let f = fixture();
        charged(&f).await;
        let (status, body) = call(&f, event("refund-valid.json")).await;
        assert_eq!(status, 202, "{body}");
        assert_eq!(
            (body["amount"].as_i64(), body["refund_id"].as_str()),
            (Some(500), Some("refund-1"))
        );
        assert_eq!(reserved(&f), 500);
        assert_eq!(f.queue.len(), 2, "the charge's message and the refund's");
        // The same request again: the same refund, nothing more reserved.
        let (status, again) = call(&f, event("refund-valid.json")).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(again["operation_id"], body["operation_id"]);
        assert_eq!(reserved(&f), 500);
        // The same refund id with another amount: a conflict, nothing written.
        let (status, conflict) = call(&f, refund_event("refund-1", json!({"amount": 400}))).await;
        assert_eq!(
            (status, &conflict["error"]["code"]),
            (409, &json!("refund_conflict"))
        );
        // Another refund id for the same amount is another refund.
        let (status, second) = call(&f, refund_event("refund-2", json!({"amount": 500}))).await;
        assert_eq!(status, 202, "{second}");
        assert_ne!(second["operation_id"], body["operation_id"]);
        assert_eq!(reserved(&f), 1000);
        // GET says where each stands.
        let mut get = refund_event("refund-2", json!({}));
        get.request_context.http.method = Method::GET;
        let (status, got) = call(&f, get).await;
        assert_eq!(
            (status, got["status"].as_str()),
            (200, Some("pending")),
            "{got}"
        );
        // The charge's status lists both, by refund id.
        let (status, charge) = call(&f, event("checkout-status.json")).await;
        assert_eq!(status, 200, "{charge}");
        let ids: Vec<&str> = charge["refunds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["refund_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["refund-1", "refund-2"], "{charge}");
    }

    /// What Stripe holds of a dispute `status` of ord-1001's whole charge (`pi_1001`).
    fn stripe_dispute(status: &str) -> charge_core::dispute::StripeDispute {
        use charge_core::dispute::{DisputeStatus, StripeDispute};
        use charge_core::domain::{DisputeId, PaymentIntentId, StripeChargeId};
        let status = DisputeStatus::parse(status);
        StripeDispute {
            id: DisputeId::parse("dp_1001").unwrap(),
            charge: StripeChargeId::parse("ch_1001").unwrap(),
            payment_intent: Some(PaymentIntentId::parse("pi_1001").unwrap()),
            amount: 1250,
            currency: "usd".into(),
            reason: "fraudulent".into(),
            is_charge_refundable: status.is_inquiry(),
            balance_transactions: u32::from(!status.is_inquiry()),
            status,
            due_by: Some(Timestamp::from_millis(1_800_600_000_000)),
            has_evidence: false,
            livemode: false,
            created: Timestamp::from_millis(1_800_000_000_000),
        }
    }

    /// A refund asked while the order's charge has an open dispute Stripe says leaves it
    /// unrefundable is refused, 409 `disputed`, naming the dispute and where it is answered;
    /// nothing is written. Its twin: the same refund while the dispute is an inquiry (Stripe
    /// says still refundable) is accepted.
    #[tokio::test]
    async fn a_refund_of_a_disputed_order_is_refused_and_of_an_inquiry_accepted() {
        use charge_core::plan::DisputePolicy;
        use charge_once::executor::dispute::record_dispute;
        let now = Timestamp::from_millis(1_800_000_100_000);
        let order = charge_core::domain::OrderId::parse("ord-1001").unwrap();
        for (status, accepted) in [("needs_response", false), ("warning_needs_response", true)] {
            let f = fixture();
            charged(&f).await;
            let dispute = stripe_dispute(status);
            record_dispute(
                f.store.as_ref(),
                &order,
                &dispute,
                now,
                &DisputePolicy::default(),
            )
            .await
            .unwrap();
            let before = f.store.all();
            let (code, body) = call(&f, refund_event("r-1", json!({"amount": 500}))).await;
            if accepted {
                assert_eq!(code, 202, "{status}: {body}");
                assert_eq!(f.store.all().len(), before.len() + 1, "the refund recorded");
            } else {
                assert_eq!(
                    (code, &body["error"]["code"]),
                    (409, &json!("disputed")),
                    "{status}: {body}"
                );
                let message = body["error"]["message"].as_str().unwrap();
                assert!(
                    message.contains("ord-1001")
                        && message.contains("dp_1001")
                        && message.contains("Stripe's dashboard"),
                    "{message}"
                );
                assert_eq!(f.store.all(), before, "nothing written");
            }
        }
    }

    #[tokio::test]
    async fn a_refund_over_what_is_left_or_of_no_succeeded_charge_writes_nothing() {
        let f = fixture();
        // No charge at all: 404; a pending charge: 409. Nothing written either time.
        let (status, _) = call(&f, event("refund-valid.json")).await;
        assert_eq!(status, 404);
        call(&f, event("checkout-valid.json")).await;
        let (status, body) = call(&f, event("refund-valid.json")).await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (409, &json!("charge_not_succeeded"))
        );
        assert_eq!(f.store.all().len(), 1, "only the charge");
        // Succeeded, 1250: 1000 fits, then 300 more does not (250 left), then 250 does.
        let f = fixture();
        charged(&f).await;
        let (status, _) = call(&f, refund_event("r-a", json!({"amount": 1000}))).await;
        assert_eq!(status, 202);
        let (status, over) = call(&f, refund_event("r-b", json!({"amount": 300}))).await;
        assert_eq!(
            (status, &over["error"]["code"]),
            (409, &json!("over_refund")),
            "{over}"
        );
        assert_eq!(over["error"]["left"], 250);
        assert_eq!(
            f.store.all().len(),
            2,
            "the charge and the first refund only"
        );
        let (status, rest) = call(&f, refund_event("r-c", json!({}))).await;
        assert_eq!(
            (status, rest["amount"].as_i64()),
            (202, Some(250)),
            "{rest}"
        );
        let (status, none) = call(&f, refund_event("r-d", json!({}))).await;
        assert_eq!(
            (status, &none["error"]["code"]),
            (409, &json!("nothing_left_to_refund"))
        );
        assert_eq!(reserved(&f), 1250);
        // Bad input: 400, nothing written.
        for (id, body) in [
            ("r e", json!({})),
            ("r-e", json!({"amount": 0})),
            ("r-e", json!({"amount": -5})),
            ("r-e", json!({"amount": 1.5})),
            ("r-e", json!({"reason": "because"})),
            ("r-e", json!({"amount": 1, "currency": "eur"})),
        ] {
            let (status, bad) = call(&f, refund_event(id, body.clone())).await;
            assert_eq!(status, 400, "{id} {body}: {bad}");
        }
        assert_eq!(f.store.all().len(), 3, "the charge, r-a and r-c");
    }

    /// Ten refund requests racing for one 1250 charge, 300 each: four fit, never a fifth.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn racing_refunds_never_exceed_the_charge() {
        let f = Arc::new(fixture());
        charged(&f).await;
        let mut tasks = Vec::new();
        for i in 0..10 {
            let f = f.clone();
            tasks.push(tokio::spawn(async move {
                call(
                    &f,
                    refund_event(&format!("race-{i}"), json!({"amount": 300})),
                )
                .await
                .0
            }));
        }
        let mut statuses = Vec::new();
        for t in tasks {
            statuses.push(t.await.unwrap());
        }
        statuses.sort();
        assert_eq!(statuses, [202, 202, 202, 202, 409, 409, 409, 409, 409, 409]);
        assert_eq!(reserved(&f), 1200);
    }

    #[tokio::test]
    async fn valid_then_duplicate() {
        let f = fixture();
        let (status, body) = call(&f, event("checkout-valid.json")).await;
        assert_eq!(status, 202, "{body}");
        assert_eq!(body["status"], "pending");
        assert_eq!(f.store.all().len(), 1);
        assert_eq!(f.queue.len(), 1);

        let (status, again) = call(&f, event("checkout-duplicate.json")).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(again["operation_id"], body["operation_id"]);
        assert_eq!(f.store.all().len(), 1);
        assert_eq!(f.queue.len(), 1, "FIFO dedup absorbs the re-send");
    }

    #[tokio::test]
    async fn mismatch_is_a_conflict_and_changes_nothing() {
        let f = fixture();
        call(&f, event("checkout-valid.json")).await;
        let before = f.store.all();
        let (status, body) = call(&f, event("checkout-mismatch.json")).await;
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["error"]["code"], "order_conflict");
        assert_eq!(f.store.all(), before);
        assert_eq!(f.queue.len(), 1);
    }

    #[tokio::test]
    async fn amounts_stripe_refuses_are_400_naming_the_rule_and_write_nothing() {
        let f = fixture();
        for (amount, currency, words) in [
            (49, "usd", "minimum"),
            (29, "gbp", "minimum"),
            (49, "jpy", "minimum"),
            (1235, "kwd", "end in 0"),
            (10_050, "isk", "divisible by 100"),
        ] {
            let mut req = event("checkout-valid.json");
            let mut body: Value = serde_json::from_str(req.body.as_deref().unwrap()).unwrap();
            body["amount"] = json!(amount);
            body["currency"] = json!(currency);
            req.body = Some(body.to_string());
            let (status, body) = call(&f, req).await;
            assert_eq!(status, 400, "{amount} {currency}: {body}");
            let problem = &body["error"]["fields"][0];
            assert_eq!(problem["field"], "amount", "{body}");
            assert!(
                problem["message"].as_str().unwrap().contains(words),
                "{amount} {currency}: {body}"
            );
        }
        assert!(f.store.all().is_empty());
        assert_eq!(
            f.store
                .calls
                .writes
                .load(std::sync::atomic::Ordering::SeqCst),
            0
        );
        assert!(f.queue.is_empty());
    }

    #[tokio::test]
    async fn bad_input_names_each_field_and_writes_nothing() {
        let f = fixture();
        let (status, body) = call(&f, event("checkout-bad.json")).await;
        assert_eq!(status, 400, "{body}");
        let fields: Vec<&str> = body["error"]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["field"].as_str().unwrap())
            .collect();
        assert_eq!(fields, ["amount", "currency", "customer_id"]);
        assert!(f.store.all().is_empty());
        assert!(f.queue.is_empty());
    }

    #[tokio::test]
    async fn media_type_size_method_and_path() {
        let f = fixture();
        let mut req = event("checkout-valid.json");
        req.headers
            .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert_eq!(call(&f, req).await.0, 415);

        let mut req = event("checkout-valid.json");
        req.body = Some(format!("{{\"pad\":\"{}\"}}", "x".repeat(MAX_BODY_BYTES)));
        assert_eq!(call(&f, req).await.0, 413);

        let mut req = event("checkout-valid.json");
        req.body = Some("{not json".into());
        assert_eq!(call(&f, req).await.0, 400);

        let mut req = event("checkout-valid.json");
        req.is_base64_encoded = true;
        req.body = Some("not base64!".into());
        assert_eq!(call(&f, req).await.0, 400);

        let mut req = event("checkout-valid.json");
        req.is_base64_encoded = true;
        req.body = Some(BASE64.encode("x".repeat(MAX_BODY_BYTES + 1)));
        assert_eq!(call(&f, req).await.0, 413);

        let mut req = event("checkout-valid.json");
        req.request_context.http.method = Method::DELETE;
        assert_eq!(call(&f, req).await.0, 405);

        let mut req = event("checkout-valid.json");
        req.path_parameters.clear();
        req.raw_path = Some("/orders/a/b/charge".into());
        assert_eq!(call(&f, req).await.0, 404);

        let mut req = event("checkout-valid.json");
        req.path_parameters
            .insert("order_id".into(), "has space".into());
        let (status, body) = call(&f, req).await;
        assert_eq!(status, 400);
        assert_eq!(body["error"]["fields"][0]["field"], "order_id");

        for (json, field) in [
            (
                r#"{"amount":12.5,"currency":"usd","customer_id":"cus_1","payment_method":"pm_card_visa"}"#,
                "amount",
            ),
            (
                r#"{"amount":"1250","currency":"usd","customer_id":"cus_1","payment_method":"pm_card_visa"}"#,
                "amount",
            ),
            (
                r#"{"amount":1250,"currency":"usd","customer_id":"cus_1","payment_method":"pm_card_visa","tip":1}"#,
                "body",
            ),
            (
                r#"{"amount":1250,"currency":"usd","customer_id":"cus_1"}"#,
                "payment_method",
            ),
        ] {
            let mut req = event("checkout-valid.json");
            req.body = Some(json.into());
            let (status, body) = call(&f, req).await;
            assert_eq!(status, 400, "{json}");
            assert_eq!(body["error"]["fields"][0]["field"], field, "{json}");
        }
        assert!(f.store.all().is_empty());
        assert!(f.queue.is_empty());
    }
    fn without_authorizer(mut req: ApiGatewayV2httpRequest) -> ApiGatewayV2httpRequest {
        req.request_context.authorizer = None;
        req
    }

    #[tokio::test]
    async fn no_principal_is_401_and_writes_nothing() {
        let f = fixture();
        let (status, body) = call(&f, without_authorizer(event("checkout-valid.json"))).await;
        assert_eq!(status, 401, "{body}");
        assert_eq!(body["error"]["code"], "unauthenticated");

        // Authorizer blocks that name nobody: empty, an IAM block without a caller ARN, JWT claims
        // without `sub` or `client_id`, a Lambda authorizer's free-form context.
        let empty: Vec<Value> = vec![
            json!({}),
            json!({"iam": {"accountId": "123456789012", "userArn": ""}}),
            json!({"jwt": {"claims": {"iss": "https://auth.example.com/", "sub": " "}, "scopes": []}}),
            json!({"lambda": {"principalId": "someone"}}),
            json!({"iam": {"userArn": "order-service"}}),
        ];
        for authorizer in empty {
            let mut req = event("checkout-valid.json");
            req.request_context.authorizer =
                Some(serde_json::from_value(authorizer.clone()).unwrap());
            let (status, body) = call(&f, req).await;
            assert_eq!(status, 401, "{authorizer}: {body}");
        }
        // Even a request that would otherwise be refused for its method learns only 401.
        let mut req = without_authorizer(event("checkout-valid.json"));
        req.request_context.http.method = Method::GET;
        assert_eq!(call(&f, req).await.0, 401);

        assert_eq!(
            f.store
                .calls
                .writes
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        assert_eq!(
            f.store
                .calls
                .reads
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        assert!(f.store.all().is_empty());
        assert!(f.queue.is_empty());
    }

    #[tokio::test]
    async fn iam_caller_is_recorded_as_requested_by() {
        let f = fixture();
        let (status, body) = call(&f, event("checkout-valid.json")).await;
        assert_eq!(status, 202, "{body}");
        let ops = f.store.all();
        assert_eq!(ops.len(), 1);
        assert_eq!(
            ops[0]
                .requested_by
                .as_ref()
                .map(|p| p.as_str())
                .unwrap_or("none"),
            "iam:arn:aws:sts::123456789012:assumed-role/order-service/i-0a1b2c3d4e5f60718"
        );
    }

    #[tokio::test]
    async fn jwt_caller_is_recorded_by_sub_then_client_id() {
        let f = fixture();
        let (status, body) = call(&f, event("checkout-jwt.json")).await;
        assert_eq!(status, 202, "{body}");
        let op = f.store.all().pop().unwrap();
        assert_eq!(
            op.requested_by
                .as_ref()
                .map(|p| p.as_str())
                .unwrap_or("none"),
            "jwt:order-service@clients"
        );

        // A client-credentials token without `sub`: its client id.
        let mut req = event("checkout-jwt.json");
        req.path_parameters
            .insert("order_id".into(), "ord-2003".into());
        let jwt = req
            .request_context
            .authorizer
            .as_mut()
            .unwrap()
            .jwt
            .as_mut()
            .unwrap();
        jwt.claims.remove("sub");
        assert_eq!(call(&f, req).await.0, 202);
        let op = f
            .store
            .all()
            .into_iter()
            .find(|o| o.order_id.as_str() == "ord-2003")
            .unwrap();
        assert_eq!(
            op.requested_by
                .as_ref()
                .map(|p| p.as_str())
                .unwrap_or("none"),
            "jwt:order-service"
        );
    }

    /// `req` as signed by another session of the order service's role (another task).
    fn from_another_session(mut req: ApiGatewayV2httpRequest) -> ApiGatewayV2httpRequest {
        req.request_context
            .authorizer
            .as_mut()
            .and_then(|a| a.iam.as_mut())
            .expect("an IAM authorizer")
            .user_arn =
            Some("arn:aws:sts::123456789012:assumed-role/order-service/ecs-task-9f3e".into());
        req
    }

    /// `req` as signed by another role of the same account.
    fn from_another_role(mut req: ApiGatewayV2httpRequest) -> ApiGatewayV2httpRequest {
        req.request_context
            .authorizer
            .as_mut()
            .and_then(|a| a.iam.as_mut())
            .expect("an IAM authorizer")
            .user_arn = Some("arn:aws:sts::123456789012:assumed-role/reporting/i-0ffee".into());
        req
    }

    #[tokio::test]
    async fn the_caller_is_not_part_of_the_order() {
        // The same order re-sent by another session of the same role (a retry from another task)
        // is the same order: 200, the first operation, whose `requested_by` stays the first
        // session's.
        let f = fixture();
        let (_, first) = call(&f, event("checkout-valid.json")).await;
        let (status, body) = call(&f, from_another_session(event("checkout-duplicate.json"))).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["operation_id"], first["operation_id"]);
        let ops = f.store.all();
        assert_eq!(ops.len(), 1);
        assert_eq!(
            ops[0].requested_by.as_ref().map(|p| p.as_str()),
            Some("iam:arn:aws:sts::123456789012:assumed-role/order-service/i-0a1b2c3d4e5f60718")
        );
    }

    #[tokio::test]
    async fn another_callers_order_is_not_shown_nor_re_sent() {
        let f = fixture();
        call(&f, event("checkout-valid.json")).await;
        let before = f.store.all();
        let (status, mine) = call(&f, event("checkout-status.json")).await;
        assert_eq!(status, 200, "the creator sees it: {mine}");
        let (_, nothing) = {
            let mut req = event("checkout-status.json");
            req.path_parameters
                .insert("order_id".into(), "ord-never".into());
            call(&f, req).await
        };
        let mut jwt = event("checkout-status.json");
        jwt.request_context.authorizer = event("checkout-jwt.json").request_context.authorizer;
        for (who, req) in [
            (
                "another role",
                from_another_role(event("checkout-status.json")),
            ),
            ("a JWT caller", jwt),
        ] {
            // The same answer as an order that does not exist: not even its existence shows.
            let (status, body) = call(&f, req).await;
            assert_eq!(status, 404, "{who}: {body}");
            assert_eq!(body, nothing, "{who}");
        }
        // Another session of the creator's role is the creator.
        let (status, body) = call(&f, from_another_session(event("checkout-status.json"))).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["order_id"], "ord-1001");

        // Re-sent by another caller: refused as a conflict, the operation not named, nothing
        // written or queued.
        let queued = f.queue.len();
        let mut again = event("checkout-duplicate.json");
        again.request_context.authorizer = event("checkout-jwt.json").request_context.authorizer;
        let (status, body) = call(&f, again).await;
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["error"]["code"], "order_conflict");
        assert!(body.get("operation_id").is_none(), "{body}");
        assert_eq!(f.store.all(), before);
        assert_eq!(f.queue.len(), queued);
    }

    #[tokio::test]
    async fn a_record_from_before_callers_were_recorded_is_seen_by_every_caller() {
        // Records of releases before 2026-11-30 name no caller: every authenticated caller sees
        // them, as every caller did then.
        let f = fixture();
        call(&f, event("checkout-valid.json")).await;
        let mut op = f.store.all().pop().unwrap();
        op.requested_by = None;
        f.store.put_for_tests(op);
        for req in [
            event("checkout-status.json"),
            from_another_role(event("checkout-status.json")),
        ] {
            let (status, body) = call(&f, req).await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["order_id"], "ord-1001");
        }
        let (status, body) = call(&f, from_another_role(event("checkout-duplicate.json"))).await;
        assert_eq!(status, 200, "{body}");
    }

    #[tokio::test]
    async fn the_event_sam_generates_is_accepted_once_filled_in_like_a_real_request() {
        // `sam local generate-event apigateway http-api-proxy` (SAM CLI 1.170.0), verbatim, then
        // only what a real request sets: method, path, body (base64, as the generator sends it,
        // since it declares no Content-Type) and the JWT subject the authorizer verified.
        let raw = include_str!("../testdata/sam-generate-event-http-api-proxy.json");
        let mut generated: Value = serde_json::from_str(raw).unwrap();
        generated["requestContext"]["http"]["method"] = json!("POST");
        generated["rawPath"] = json!("/orders/ord-sam-1/charge");
        generated["requestContext"]["http"]["path"] = json!("/orders/ord-sam-1/charge");
        generated["body"] = json!(BASE64.encode(
            r#"{"amount":990,"currency":"eur","customer_id":"cus_Sam1","payment_method":"pm_card_visa"}"#
        ));
        generated["requestContext"]["authorizer"]["jwt"]["claims"]["sub"] = json!("order-service");
        let req: ApiGatewayV2httpRequest = serde_json::from_value(generated.clone()).unwrap();

        let f = fixture();
        let (status, body) = call(&f, req).await;
        assert_eq!(status, 202, "{body}");
        let op = f.store.all().pop().unwrap();
        assert_eq!(op.order_id.as_str(), "ord-sam-1");
        assert_eq!(op.params.amount().minor_units(), 990);
        assert_eq!(
            op.requested_by
                .as_ref()
                .map(|p| p.as_str())
                .unwrap_or("none"),
            "jwt:order-service"
        );

        // As generated, its claims name nobody: refused.
        generated["rawPath"] = json!("/orders/ord-sam-2/charge");
        generated["requestContext"]["authorizer"]["jwt"]["claims"]
            .as_object_mut()
            .unwrap()
            .remove("sub");
        let req: ApiGatewayV2httpRequest = serde_json::from_value(generated).unwrap();
        assert_eq!(call(&f, req).await.0, 401);
        assert_eq!(f.store.all().len(), 1);
    }
    #[tokio::test]
    async fn get_answers_where_the_charge_stands() {
        let f = fixture();
        let (status, body) = call(&f, event("checkout-status.json")).await;
        assert_eq!(status, 404, "{body}");
        assert_eq!(body["error"]["code"], "order_not_found");

        let (_, created) = call(&f, event("checkout-valid.json")).await;
        let writes = f
            .store
            .calls
            .writes
            .load(std::sync::atomic::Ordering::Relaxed);
        let (status, body) = call(&f, event("checkout-status.json")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["order_id"], "ord-1001");
        assert_eq!(body["operation_id"], created["operation_id"]);
        assert_eq!(body["status"], "pending");
        assert_eq!(body["payment_intent"], Value::Null);
        assert_eq!(body["amount"], 1250);
        assert_eq!(body["currency"], "usd");
        assert!(body["updated_at"].as_str().unwrap().ends_with('Z'));
        assert!(body.get("review_reason").is_none());

        // Settled and in review show what a person or the order service needs.
        let mut op = f.store.all().pop().unwrap();
        op.status = OperationStatus::Succeeded;
        op.external_id = Some(charge_core::domain::PaymentIntentId::parse("pi_3Q").unwrap());
        op.review = Some(charge_core::operation::Review {
            reason: "search found 2".into(),
            flagged_at: op.created_at,
        });
        f.store.put_for_tests(op);
        let (_, body) = call(&f, event("checkout-status.json")).await;
        assert_eq!(body["status"], "succeeded");
        assert_eq!(body["payment_intent"], "pi_3Q");
        assert_eq!(body["review_reason"], "search found 2");

        // The same door as the POST, and a read never writes or queues.
        let (status, _) = call(&f, without_authorizer(event("checkout-status.json"))).await;
        assert_eq!(status, 401);
        assert_eq!(
            f.store
                .calls
                .writes
                .load(std::sync::atomic::Ordering::Relaxed),
            writes
        );
        assert_eq!(f.queue.len(), 1);
    }

    struct DownQueue;

    #[async_trait::async_trait]
    impl OperationQueue for DownQueue {
        async fn send(&self, _: &QueuedOperation) -> Result<(), charge_once::ports::QueueError> {
            Err(charge_once::ports::QueueError::new("connection refused"))
        }
    }

    /// A refund written before the queue failed is accepted (202, `queued: false`, counted):
    /// the reconciler re-sends it, and an error would invite a retry under a new refund id (a
    /// second refund). Its twin: with the queue up, `queued: true`.
    #[tokio::test]
    async fn a_refund_recorded_while_the_queue_is_down_is_accepted_and_counted() {
        let mut f = fixture();
        charged(&f).await;
        let metrics = Arc::new(charge_once::telemetry::CapturedMetrics::new());
        f.deps.metrics = metrics.clone();
        let up = f.deps.queue.clone();
        f.deps.queue = Arc::new(DownQueue);
        let (status, body) = call(&f, refund_event("r-down", json!({"amount": 400}))).await;
        assert_eq!(
            (status, body["queued"].as_bool(), body["status"].as_str()),
            (202, Some(false), Some("pending")),
            "{body}"
        );
        assert_eq!(reserved(&f), 400, "recorded and reserved");
        let unavailable = || {
            metrics.sum(
                "CheckoutUnavailable",
                &[("Function", "checkout"), ("Cause", "queue")],
            )
        };
        assert_eq!(unavailable(), 1.0);
        // The same request again, the queue still down: the same refund, nothing more reserved.
        let (status, again) = call(&f, refund_event("r-down", json!({"amount": 400}))).await;
        assert_eq!((status, again["queued"].as_bool()), (200, Some(false)));
        assert_eq!(again["operation_id"], body["operation_id"]);
        assert_eq!(reserved(&f), 400);
        // The queue back: the same request sends it.
        f.deps.queue = up;
        let before = f.queue.len();
        let (status, sent) = call(&f, refund_event("r-down", json!({"amount": 400}))).await;
        assert_eq!((status, sent["queued"].as_bool()), (200, Some(true)));
        assert_eq!(f.queue.len(), before + 1);
        assert_eq!(unavailable(), 2.0, "the second try counted, the third not");
    }

    #[tokio::test]
    async fn a_503_is_counted_as_checkout_unavailable() {
        let mut f = fixture();
        let metrics = Arc::new(charge_once::telemetry::CapturedMetrics::new());
        f.deps.metrics = metrics.clone();
        f.deps.queue = Arc::new(DownQueue);
        let (status, _) = call(&f, event("checkout-valid.json")).await;
        assert_eq!(status, 503);
        assert_eq!(
            metrics.sum(
                "CheckoutUnavailable",
                &[("Function", "checkout"), ("Cause", "queue")]
            ),
            1.0
        );
    }

    /// ord-1001's charge request (`checkout-valid.json`) with `card`.
    fn with_card(card: &str) -> ApiGatewayV2httpRequest {
        let mut req = event("checkout-valid.json");
        let mut body: Value = serde_json::from_str(req.body.as_deref().unwrap()).unwrap();
        body["payment_method"] = json!(card);
        req.body = Some(body.to_string());
        req
    }

    /// The order's latest attempt, as the charge function leaves it: `status`, with an intent.
    fn settle_latest(f: &Fixture, status: OperationStatus) -> Operation {
        let mut op = f
            .store
            .all()
            .into_iter()
            .filter(|op| op.kind.is_charge())
            .max_by_key(|op| op.kind.attempt_no())
            .unwrap();
        op.status = status;
        let n = op.kind.attempt_no().unwrap();
        op.external_id =
            Some(charge_core::domain::PaymentIntentId::parse(&format!("pi_1001_{n}")).unwrap());
        if status.is_settled() {
            op.next_due_at = None;
        }
        if status == OperationStatus::Failed {
            op.last_error = Some("card_declined".into());
        }
        f.store.put_for_tests(op.clone());
        op
    }

    fn charges(f: &Fixture) -> Vec<Operation> {
        f.store
            .all()
            .into_iter()
            .filter(|op| op.kind.is_charge())
            .collect()
    }

    /// A declined order with another card starts attempt 2 (202, its own operation, queued as
    /// a version 5 message); the GET shows both attempts; once it is paid a third card is 409
    /// `paid`, naming the attempt and its intent, and writes nothing.
    #[tokio::test]
    async fn a_declined_order_is_charged_again_with_another_card_then_paid() {
        let f = fixture();
        let (status, first) = call(&f, event("checkout-valid.json")).await;
        assert_eq!(
            (status, first["attempt"].clone()),
            (202, json!(1)),
            "{first}"
        );
        settle_latest(&f, OperationStatus::Failed);

        let (status, second) = call(&f, with_card("pm_card_mastercard")).await;
        assert_eq!(status, 202, "{second}");
        assert_eq!(second["attempt"], 2);
        assert_eq!(second["status"], "pending");
        assert_ne!(second["operation_id"], first["operation_id"]);
        assert_eq!(charges(&f).len(), 2);
        let messages = f.queue.receive(10, Duration::from_secs(30));
        let bodies: Vec<Value> = messages
            .iter()
            .map(|m| serde_json::from_str(&m.body).unwrap())
            .collect();
        assert!(
            bodies.iter().any(|b| b["v"] == 5
                && b["attempt"] == 2
                && b["operation_id"] == second["operation_id"]),
            "{bodies:?}"
        );

        // The same request again while attempt 2 is in flight: attempt 2 (200), nothing new.
        let (status, again) = call(&f, with_card("pm_card_mastercard")).await;
        assert_eq!(
            (status, again["operation_id"].clone()),
            (200, second["operation_id"].clone())
        );

        settle_latest(&f, OperationStatus::Succeeded);
        let (status, got) = call(&f, event("checkout-valid.json").tap_get()).await;
        assert_eq!(status, 200, "{got}");
        assert_eq!(got["operation_id"], second["operation_id"]);
        assert_eq!(got["status"], "succeeded");
        assert_eq!(got["attempt"], 2);
        assert_eq!(got["paid_attempt"], 2);
        assert_eq!(got["attempts"][0]["status"], "failed");
        assert_eq!(got["attempts"][0]["payment_method"], "pm_card_visa");
        assert_eq!(got["attempts"][0]["last_error"], "card_declined");
        assert_eq!(got["attempts"][1]["payment_intent"], "pi_1001_2");
        assert_eq!(got["attempts"].as_array().unwrap().len(), 2);

        let before = f.store.all();
        let (status, third) = call(&f, with_card("pm_card_amex")).await;
        assert_eq!(status, 409, "{third}");
        assert_eq!(third["error"]["code"], "paid");
        assert_eq!(
            third["error"]["message"],
            "order ord-1001 is paid by attempt 2 (pi_1001_2); refund it instead"
        );
        assert_eq!(f.store.all(), before, "nothing written");
        // The declined first request replayed now: answered with the paid attempt, no new one.
        let (status, replay) = call(&f, event("checkout-valid.json")).await;
        assert_eq!(
            (status, replay["operation_id"].clone()),
            (200, second["operation_id"].clone())
        );
        assert_eq!(f.store.all(), before);
    }

    trait TapGet {
        fn tap_get(self) -> Self;
    }

    impl TapGet for ApiGatewayV2httpRequest {
        /// The same path, asked with GET.
        fn tap_get(mut self) -> Self {
            self.request_context.http.method = Method::GET;
            self.body = None;
            self
        }
    }

    /// An order charged once answers GET as before attempts, with `attempt` 1, its one attempt
    /// and no paid attempt while unsettled.
    #[tokio::test]
    async fn get_of_an_order_charged_once_lists_its_one_attempt() {
        let f = fixture();
        call(&f, event("checkout-valid.json")).await;
        let (status, got) = call(&f, event("checkout-valid.json").tap_get()).await;
        assert_eq!(status, 200, "{got}");
        assert_eq!(got["attempt"], 1);
        assert_eq!(got["attempts"].as_array().unwrap().len(), 1);
        assert_eq!(got["paid_attempt"], Value::Null);
    }

    /// Two retries of a declined order at once, with different cards: one attempt; the other
    /// is 409 `attempt_in_flight`. With identical bodies: one attempt, both answered with it.
    #[tokio::test]
    async fn two_retries_at_once_make_one_attempt() {
        let f = fixture();
        call(&f, event("checkout-valid.json")).await;
        settle_latest(&f, OperationStatus::Failed);
        let (a, b) = tokio::join!(
            call(&f, with_card("pm_card_mastercard")),
            call(&f, with_card("pm_card_amex"))
        );
        let mut statuses = [a.0, b.0];
        statuses.sort();
        assert_eq!(statuses, [202, 409], "{a:?} {b:?}");
        let loser = if a.0 == 409 { &a.1 } else { &b.1 };
        assert_eq!(loser["error"]["code"], "attempt_in_flight");
        assert_eq!(charges(&f).len(), 2);

        let f = fixture();
        call(&f, event("checkout-valid.json")).await;
        settle_latest(&f, OperationStatus::Failed);
        let (a, b) = tokio::join!(
            call(&f, with_card("pm_card_mastercard")),
            call(&f, with_card("pm_card_mastercard"))
        );
        let mut statuses = [a.0, b.0];
        statuses.sort();
        assert_eq!(statuses, [200, 202], "{a:?} {b:?}");
        assert_eq!(
            a.1["operation_id"], b.1["operation_id"],
            "both answered with the one"
        );
        assert_eq!(a.1["attempt"], 2);
        assert_eq!(charges(&f).len(), 2);
    }

    /// The refusals of another attempt, each with its twin accepted in the same setup: a
    /// canceled order stays canceled (409 `canceled`) while a declined one, or one whose capture
    /// found the authorization lapsed, is charged again; an
    /// order at the limit is 409 `too_many_attempts` while one under it starts another; another
    /// amount is 409 `order_conflict` while the same amount starts one. Nothing written by any
    /// refusal.
    #[tokio::test]
    async fn canceled_too_many_and_another_amount_are_refused_and_their_twins_accepted() {
        // Canceled: the latest failed with a cancel's name on it. Its twins: failed with none
        // (declined), and failed with a capture's (the capture found the authorization lapsed:
        // nothing taken, nobody canceled the order).
        for (canceled, taker) in [(true, Some(false)), (false, None), (false, Some(true))] {
            let f = fixture();
            call(&f, event("checkout-valid.json")).await;
            let mut op = settle_latest(&f, OperationStatus::Failed);
            if let Some(capture) = taker {
                op.params.charge_state_mut().unwrap().taken_by =
                    Some(charge_core::charge::state::Taker {
                        capture,
                        operation_id: charge_core::domain::OperationId::new_random(),
                    });
                f.store.put_for_tests(op);
            }
            let before = f.store.all();
            let (status, body) = call(&f, with_card("pm_card_mastercard")).await;
            if canceled {
                assert_eq!(
                    (status, body["error"]["code"].clone()),
                    (409, json!("canceled"))
                );
                assert_eq!(f.store.all(), before);
            } else {
                assert_eq!(status, 202, "{body}");
            }
        }
        // The limit: 2 here; the twin is one attempt under it.
        let mut f = fixture();
        f.deps.max_charge_attempts = charge_core::attempt::AttemptLimit::new(2).unwrap();
        call(&f, event("checkout-valid.json")).await;
        settle_latest(&f, OperationStatus::Failed);
        let (status, _) = call(&f, with_card("pm_card_mastercard")).await;
        assert_eq!(status, 202, "under the limit");
        settle_latest(&f, OperationStatus::Failed);
        let before = f.store.all();
        let (status, body) = call(&f, with_card("pm_card_amex")).await;
        assert_eq!(
            (status, body["error"]["code"].clone()),
            (409, json!("too_many_attempts"))
        );
        assert_eq!(f.store.all(), before);
        // Another amount after a decline.
        let f = fixture();
        call(&f, event("checkout-valid.json")).await;
        settle_latest(&f, OperationStatus::Failed);
        let before = f.store.all();
        let (status, body) = call(&f, event("checkout-mismatch.json")).await;
        assert_eq!(
            (status, body["error"]["code"].clone()),
            (409, json!("order_conflict"))
        );
        assert_eq!(f.store.all(), before);
        let (status, _) = call(&f, event("checkout-valid.json")).await;
        assert_eq!(
            status, 202,
            "the same request after a decline starts attempt 2"
        );
    }
}
