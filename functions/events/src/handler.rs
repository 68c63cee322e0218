//! One invocation of the events function: an EventBridge event from Stripe's partner event
//! source, or a `POST /stripe/webhook` delivery.
//!
//! Who may call: EventBridge invokes the function for the stack's rule on the partner bus (AWS
//! authenticates Stripe's delivery). The webhook route, when the stack has one, can be reached by
//! anyone (Stripe cannot sign SigV4, so it has no IAM/JWT authorizer); only a body signed with
//! one of the endpoint's secrets within 300 s of our clock is read.
//! What it may do: settle an operation that is already there on Stripe's own answer (an event is
//! a hint), through the executor's own shell; never create, confirm or overwrite (see
//! [`charge_once::events`]).
//!
//! Webhook answers:
//!
//! | answer | when | what changed |
//! |---|---|---|
//! | 400 `{error:{code}}` | missing/invalid signature, stale timestamp, body over 256 KiB, unreadable event | nothing |
//! | 404 | the stack has no webhook secret | nothing |
//! | 405 | another method | nothing |
//! | 200 `{received, outcome}` | applied, duplicate, ignored, mismatch (paged), settled conflict (paged) | at most the inbox entry and one guarded transition |
//! | 409 | the charge function holds the operation's lease right now | nothing (the inbox entry is forgotten: Stripe's retry is processed) |
//! | 500 | DynamoDB or Stripe's retrieve failed, or time ran out | nothing kept; Stripe retries, the reconciler is the safety net |
//!
//! An EventBridge event that is refused or must come again fails the invocation (with the
//! reason), so Lambda retries it and then keeps it, with the error, on the events DLQ.
//!
//! Time: the work after the inbox admitted an event is bounded by the invocation's deadline less
//! [`DEADLINE_MARGIN`], and for a webhook by [`HTTP_BUDGET`] (the HTTP API gives up on the
//! integration after 30 s and Stripe then retries): past it the inbox entry is forgotten, so the
//! retry is processed instead of taken for a duplicate. A context whose deadline is not a time
//! within the function's timeout (`cargo lambda watch` sends a duration) is bounded by
//! [`FUNCTION_TIMEOUT`] instead, with a log line saying so.
//!
//! Metrics (EMF, `Function=webhook`): `WebhookRejected` (alarmed on a rate), `WebhookApplied`,
//! `WebhookIgnored`, `WebhookRetryLater`, all with a `Reason`/`Outcome` class; `EventMismatch`
//! (an event Stripe does not confirm), `SentToReview` (`ReasonClass`),
//! `WebhookSettledConflict` and `RefundFailedAfterSuccess` (a refund Stripe failed after it
//! succeeded: recorded failed, its amount refundable again), all alarmed (paged).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use aws_lambda_events::encodings::Body;
use aws_lambda_events::http::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use aws_lambda_events::http::Method;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use charge_once::events::{
    receive, receive_eventbridge, DeliveryReport, EventBridgeEvent, EventsDeps, Reception,
    Rejection, SignatureError, MAX_BODY_BYTES,
};
use charge_once::ports::MetricsSink;
use charge_once::telemetry::{
    dispute_unreserved_line, emf_line_classed, refund_failed_after_success_line,
    sent_to_review_line, stripe_requests_lines, ErrorChain,
};
use lambda_runtime::{Context, Error, LambdaEvent};
use serde::de::{self, Deserialize, Deserializer, IgnoredAny};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tracing::{debug, info, warn, Instrument};

pub const FUNCTION: &str = "webhook";

/// Left of the invocation's time for forgetting the inbox entry and answering.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(3);

/// The most a webhook delivery works on one event: under the HTTP API's 30 s integration
/// timeout, with the margin to forget and answer.
pub const HTTP_BUDGET: Duration = Duration::from_secs(27);

/// The function's `Timeout` in template.yaml (tests/template.rs holds them equal): the bound on
/// an invocation whose runtime sends no usable deadline (see [`budget_at`]).
pub const FUNCTION_TIMEOUT: Duration = Duration::from_secs(40);

/// What the handler needs, built once in `main`.
pub struct EventsFunction {
    pub events: EventsDeps,
    pub metrics: Arc<dyn MetricsSink>,
}

/// An EventBridge event that was refused or must come again: the invocation fails with this, so
/// Lambda retries it and its on-failure destination keeps it with the reason.
#[derive(Debug, thiserror::Error)]
#[error("event {event_id} not acted on: {outcome}")]
pub struct NotActedOn {
    pub event_id: String,
    pub outcome: &'static str,
}

/// What the runtime hands the function: an EventBridge event (an object with a `detail-type`, of
/// any value), kept as its JSON text for [`EventBridgeEvent`]'s reader, or anything else as JSON
/// for the HTTP API request reader. Reading it never fails on valid JSON: what is missing or
/// mistyped is the function's own `unreadable` answer, with its metric and log line.
#[derive(Debug)]
pub enum Incoming {
    EventBridge(EventBridgeEvent),
    /// An object without `detail-type`, or `Value::Null` for a payload that is not an object.
    Other(Value),
}

impl<'de> Deserialize<'de> for Incoming {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let json = Box::<RawValue>::deserialize(d)?;
        // The keys of an object (of anything else: an error), their values skipped.
        let keys = serde_json::from_str::<BTreeMap<String, IgnoredAny>>(json.get());
        Ok(match keys {
            Ok(keys) if keys.contains_key("detail-type") => Incoming::EventBridge(json.into()),
            Ok(_) => Incoming::Other(serde_json::from_str(json.get()).map_err(de::Error::custom)?),
            Err(_) => Incoming::Other(Value::Null),
        })
    }
}

/// Handles one invocation: an EventBridge event (it has a `detail-type`) or an HTTP API
/// request. The events function's answer is always an HTTP response, never a Lambda error.
pub async fn handle(deps: &EventsFunction, event: LambdaEvent<Incoming>) -> Result<Value, Error> {
    let (payload, context) = event.into_parts();
    let payload = match payload {
        Incoming::EventBridge(event) => {
            return Ok(handle_eventbridge(deps, LambdaEvent::new(event, context)).await?)
        }
        Incoming::Other(payload) => payload,
    };
    let response = match serde_json::from_value::<ApiGatewayV2httpRequest>(payload) {
        Ok(req) => handle_http(deps, LambdaEvent::new(req, context)).await,
        Err(e) => {
            info!(error = %ErrorChain(&e), "not an HTTP API request nor an EventBridge event");
            response(400, json!({"error": {"code": "unreadable"}}))
        }
    };
    Ok(serde_json::to_value(response)?)
}

/// The time left for acting on an event: the invocation's deadline less [`DEADLINE_MARGIN`],
/// capped ([`budget_at`]); never zero without a log line saying why. `None` for a context with no
/// deadline at all: no runtime sends that (lambda_runtime refuses an invocation without the
/// header), only an in-process caller on its own clock (the simulation, whose runtime has no
/// timers; the tests), which bounds the work itself.
fn budget(context: &Context, cap: Option<Duration>) -> Option<Duration> {
    if context.deadline == 0 {
        debug!("no deadline in the context (an in-process caller): not bounded here");
        return None;
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Some(budget_at(context.deadline, now_ms, cap))
}

/// [`budget`] at `now_ms`. Lambda sends the deadline as milliseconds since the epoch, at most the
/// function's timeout ahead. A value that is not such a time is no deadline: a time already past,
/// or a duration instead of a time — `cargo lambda watch` sends `Lambda-Runtime-Deadline-Ms:
/// 600000`, ten minutes after 1970, which read as a time left nothing and had every event
/// forgotten "out of time after 0ns". Then the function's own timeout ([`FUNCTION_TIMEOUT`]) bounds
/// the work, and a log line says so.
fn budget_at(deadline_ms: u64, now_ms: u64, cap: Option<Duration>) -> Duration {
    let ahead = Duration::from_millis(deadline_ms.saturating_sub(now_ms));
    let left = if ahead.is_zero() || ahead > FUNCTION_TIMEOUT {
        warn!(
            deadline_ms,
            now_ms,
            timeout_ms = FUNCTION_TIMEOUT.as_millis() as u64,
            "the invocation's deadline is not a time within the function's timeout (a local \
             runtime); working to the function's timeout instead"
        );
        FUNCTION_TIMEOUT
    } else {
        ahead
    };
    let budget = left.saturating_sub(DEADLINE_MARGIN);
    let budget = cap.map_or(budget, |cap| budget.min(cap));
    if budget.is_zero() {
        warn!(
            left_ms = left.as_millis() as u64,
            margin_ms = DEADLINE_MARGIN.as_millis() as u64,
            "the invocation's deadline is within the margin: no time to act on the event"
        );
    }
    budget
}

/// One EventBridge event from Stripe's partner event source.
pub async fn handle_eventbridge(
    deps: &EventsFunction,
    event: LambdaEvent<EventBridgeEvent>,
) -> Result<Value, NotActedOn> {
    let span = tracing::info_span!("eventbridge", request_id = %event.context.request_id);
    async {
        let budget = budget(&event.context, None);
        let report = receive_eventbridge(&deps.events, event.payload, budget).await;
        emit_metrics(deps, &report);
        let outcome = outcome_label(&report.reception);
        info!(
            event_id = report.event_id.as_deref().unwrap_or(""),
            event_type = report.event_type.as_deref().unwrap_or(""),
            outcome,
            "event handled"
        );
        match &report.reception {
            Reception::Rejected(_) | Reception::RetryLater(_) => Err(NotActedOn {
                event_id: report.event_id.unwrap_or_default(),
                outcome,
            }),
            _ => Ok(json!({"received": true, "outcome": outcome})),
        }
    }
    .instrument(span)
    .await
}

/// One webhook delivery. Always an HTTP answer, never a Lambda error.
/// The request API Gateway hands [`handle_http`] for one Stripe delivery to the route: `POST
/// /stripe/webhook`, a JSON body, and Stripe's `Stripe-Signature` header (left out when it is not
/// a valid header value, as API Gateway would not pass one through). For the tools that drive the
/// function in process (the simulation, `bench bill`); a deployed function gets it from the HTTP API.
pub fn delivery_request(body: &str, signature: &str) -> ApiGatewayV2httpRequest {
    let mut req = ApiGatewayV2httpRequest::default();
    req.request_context.http.method = Method::POST;
    req.raw_path = Some("/stripe/webhook".into());
    req.headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    if let Ok(v) = HeaderValue::from_str(signature) {
        req.headers.insert("stripe-signature", v);
    }
    req.body = Some(body.to_owned());
    req
}

pub async fn handle_http(
    deps: &EventsFunction,
    event: LambdaEvent<ApiGatewayV2httpRequest>,
) -> ApiGatewayV2httpResponse {
    let span = tracing::info_span!("webhook", request_id = %event.context.request_id);
    async {
        let req = &event.payload;
        if req.request_context.http.method != Method::POST {
            let mut resp = response(405, json!({"error": {"code": "method_not_allowed"}}));
            resp.headers.insert(ALLOW, HeaderValue::from_static("POST"));
            return resp;
        }
        let report = match body_bytes(req) {
            Ok(body) => {
                let header = req
                    .headers
                    .get("stripe-signature")
                    .and_then(|v| v.to_str().ok());
                let budget = budget(&event.context, Some(HTTP_BUDGET));
                receive(&deps.events, header, &body, budget).await
            }
            Err(e) => DeliveryReport {
                reception: Reception::Rejected(Rejection::Signature(e)),
                event_id: None,
                event_type: None,
                gateway_calls: 0,
            },
        };
        emit_metrics(deps, &report);
        let status = report.reception.http_status();
        info!(
            status,
            event_id = report.event_id.as_deref().unwrap_or(""),
            event_type = report.event_type.as_deref().unwrap_or(""),
            outcome = outcome_label(&report.reception),
            "webhook answered"
        );
        response(status, body_of(&report))
    }
    .instrument(span)
    .await
}

/// The raw body, bounded before and after base64 decoding (HTTP APIs base64-encode a body whose
/// media type they do not know to be text).
fn body_bytes(req: &ApiGatewayV2httpRequest) -> Result<Vec<u8>, SignatureError> {
    let raw = req.body.as_deref().unwrap_or("");
    if !req.is_base64_encoded {
        if raw.len() > MAX_BODY_BYTES {
            return Err(SignatureError::BodyTooLarge);
        }
        return Ok(raw.as_bytes().to_vec());
    }
    if raw.len() > MAX_BODY_BYTES.div_ceil(3) * 4 {
        return Err(SignatureError::BodyTooLarge);
    }
    // Undecodable base64 cannot carry a valid signature.
    BASE64.decode(raw).map_err(|_| SignatureError::Mismatch)
}

fn outcome_label(r: &Reception) -> &'static str {
    match r {
        Reception::Rejected(why) => why.as_str(),
        Reception::Ignored(why) => why.as_str(),
        Reception::Applied {
            review: Some(_), ..
        } => "review",
        Reception::Applied { status, .. } => status.as_str(),
        Reception::RefundFailedLater => "failed_after_success",
        Reception::DisputeUnreserved { .. } => "dispute_unreserved",
        Reception::SettledConflict { reason } => reason,
        Reception::Mismatch(why) => why.as_str(),
        Reception::RetryLater(why) => why.as_str(),
    }
}

fn body_of(report: &DeliveryReport) -> Value {
    match &report.reception {
        Reception::Rejected(why) => json!({"error": {"code": why.as_str()}}),
        Reception::RetryLater(_) => {
            json!({"error": {"code": outcome_label(&report.reception)}})
        }
        other => json!({"received": true, "outcome": outcome_label(other)}),
    }
}

fn emit_metrics(deps: &EventsFunction, report: &DeliveryReport) {
    let now = deps.events.charge.clock.now();
    let label = outcome_label(&report.reception);
    let (name, class) = match &report.reception {
        Reception::Rejected(_) => ("WebhookRejected", "Reason"),
        Reception::Ignored(_) => ("WebhookIgnored", "Reason"),
        Reception::Applied { .. }
        | Reception::DisputeUnreserved { .. }
        | Reception::RefundFailedLater => ("WebhookApplied", "Outcome"),
        Reception::SettledConflict { .. } => ("WebhookSettledConflict", "Reason"),
        Reception::Mismatch(_) => ("EventMismatch", "Reason"),
        Reception::RetryLater(_) => ("WebhookRetryLater", "Reason"),
    };
    deps.metrics.emit(emf_line_classed(
        FUNCTION,
        (class, label),
        now,
        &[(name, 1.0, "Count")],
    ));
    if report.reception == Reception::RefundFailedLater {
        deps.metrics
            .emit(refund_failed_after_success_line(FUNCTION, 1, now));
    }
    if let Reception::DisputeUnreserved { .. } = report.reception {
        deps.metrics.emit(dispute_unreserved_line(FUNCTION, 1, now));
    }
    if let Reception::Applied {
        review: Some(class),
        ..
    } = report.reception
    {
        deps.metrics
            .emit(sent_to_review_line(FUNCTION, class, 1, now));
    }
    if let Some(requests) = deps.events.charge.gateway.requests() {
        for line in stripe_requests_lines(FUNCTION, &requests.since_last_report(), now) {
            deps.metrics.emit(line);
        }
    }
}

fn response(status: u16, body: Value) -> ApiGatewayV2httpResponse {
    let mut resp = ApiGatewayV2httpResponse::default();
    resp.status_code = i64::from(status);
    resp.headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.body = Some(Body::Text(body.to_string()));
    resp
}

#[cfg(test)]
mod tests {
    use charge_once::ports::{
        CreatedLists, OperationCreates, OperationReads, PaymentIntents, StripeAccount,
        StripeRefunds,
    };
    use std::sync::atomic::Ordering;

    use charge_core::charge::event_plan::SECOND_PAYMENT_INTENT;
    use charge_core::domain::{Amount, OperationId, Principal, RefundId, StripeRefundId};
    use charge_core::plan::Policy;
    use charge_core::refund::{self, request::RefundRequest, RefundStatus};
    use charge_core::store_rules::ChargeClaim;
    use charge_core::{
        domain::PaymentIntentId,
        operation::{Operation, OperationStatus},
        outcome::PaymentIntentStatus,
        time::{Clock, ManualClock, Timestamp},
    };
    use charge_once::executor::EngineDeps;
    use charge_once::memory::{FakeGateway, FakeRefund, MemoryInbox, MemoryStore};
    use charge_once::testing::logged;

    use charge_once::events::{WebhookSecret, DEFAULT_TOLERANCE};
    use charge_once::telemetry::CapturedMetrics;
    use charge_once::testing::CreateIn as _;

    use super::*;

    struct Fixture {
        store: Arc<MemoryStore>,
        inbox: Arc<MemoryInbox>,
        gateway: Arc<FakeGateway>,
        metrics: Arc<CapturedMetrics>,
        clock: ManualClock,
        deps: EventsFunction,
    }

    fn fixture() -> Fixture {
        // The sample event's timestamp, so `events/webhook-payment-intent-succeeded.json` verifies.
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        let store = Arc::new(MemoryStore::new());
        let inbox = Arc::new(MemoryInbox::new());
        let gateway = Arc::new(FakeGateway::new());
        let metrics = Arc::new(CapturedMetrics::new());
        let deps = EventsFunction {
            events: EventsDeps {
                charge: EngineDeps {
                    store: store.clone(),
                    gateway: gateway.clone(),
                    clock: Arc::new(clock.clone()),
                    policy: Policy::default(),
                },
                inbox: inbox.clone(),
                secrets: Some(vec![WebhookSecret::parse(SAMPLE_SECRET).unwrap()]),
                tolerance: DEFAULT_TOLERANCE,
                event_source: None,
            },
            metrics: metrics.clone(),
        };
        Fixture {
            store,
            inbox,
            gateway,
            metrics,
            clock,
            deps,
        }
    }

    /// The key `events/webhook-payment-intent-succeeded.json` is signed with: this unit test's
    /// fixture, never a secret to store anywhere.
    const SAMPLE_SECRET: &str = "whsec_Lx4Qp9Rt2Vw7Yz1Bc5Df8Gh3Jk6Mn0Ps";
    const SAMPLE_INTENT: &str = "pi_3SampleIntent0001";

    fn sample() -> ApiGatewayV2httpRequest {
        let path = format!(
            "{}/../../events/webhook-payment-intent-succeeded.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let raw = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&raw).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The sample's Stripe event in the EventBridge envelope a Stripe event destination sends.
    fn sample_eventbridge() -> Value {
        let detail: Value = serde_json::from_str(sample().body.as_deref().unwrap()).unwrap();
        json!({
            "version": "0",
            "id": "5b6b2c4e-0d7b-4f5e-9d35-5f0b4c6a1e21",
            "detail-type": detail["type"],
            "source": "aws.partner/stripe.com/ed_test_61SampleDestination",
            "account": "123456789012",
            "time": "2027-01-15T08:00:00Z",
            "region": "us-east-1",
            "resources": [],
            "detail": detail,
        })
    }

    async fn call(f: &Fixture, req: ApiGatewayV2httpRequest) -> (i64, Value) {
        let resp = handle(
            &f.deps,
            LambdaEvent::new(incoming(&json!(req)), Context::default()),
        )
        .await
        .unwrap();
        let resp: ApiGatewayV2httpResponse = serde_json::from_value(resp).unwrap();
        let body = match resp.body {
            Some(Body::Text(t)) => serde_json::from_str(&t).unwrap(),
            other => panic!("expected a JSON body, got {other:?}"),
        };
        (resp.status_code, body)
    }

    /// The payload as the runtime reads it: from the bytes.
    fn incoming(payload: &Value) -> Incoming {
        serde_json::from_slice(&serde_json::to_vec(payload).unwrap()).unwrap()
    }

    async fn call_eventbridge(f: &Fixture, event: Value) -> Result<Value, String> {
        handle(
            &f.deps,
            LambdaEvent::new(incoming(&event), Context::default()),
        )
        .await
        .map_err(|e| e.to_string())
    }

    /// The operation the sample event names, `unknown` after a lost answer, and the sample's
    /// PaymentIntent at Stripe in `status`.
    async fn sample_operation(f: &Fixture, status: PaymentIntentStatus) -> Operation {
        let body: Value = serde_json::from_str(sample().body.as_deref().unwrap()).unwrap();
        let meta = &body["data"]["object"]["metadata"];
        let op = charge_core::testing::order(meta["order_id"].as_str().unwrap())
            .operation_id(meta["operation_id"].as_str().unwrap())
            .status(OperationStatus::Unknown)
            .at(f.clock.now())
            .create_in(f.store.as_ref())
            .await;
        f.gateway.insert_intent_as(
            &PaymentIntentId::parse(SAMPLE_INTENT).unwrap(),
            FakeGateway::charge_for(&op, status),
        );
        op
    }

    #[tokio::test]
    async fn the_sample_event_settles_its_operation() {
        let f = fixture();
        let op = sample_operation(&f, PaymentIntentStatus::Succeeded).await;
        let (status, body) = call(&f, sample()).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["outcome"], "succeeded");
        let now = f.store.get(&op.key()).await.unwrap().unwrap();
        assert_eq!(now.status, OperationStatus::Succeeded);
        assert_eq!(now.external_id.as_deref(), Some(SAMPLE_INTENT));
        assert_eq!(
            f.metrics.sum("WebhookApplied", &[("Function", FUNCTION)]),
            1.0
        );
        // Stripe was asked before anything moved.
        assert_eq!(f.gateway.calls.retrieve.load(Ordering::SeqCst), 1);
        // Redelivered: 200, one transition only.
        let (status, body) = call(&f, sample()).await;
        assert_eq!((status, body["outcome"].as_str()), (200, Some("duplicate")));
        assert_eq!(f.store.get(&op.key()).await.unwrap().unwrap(), now);
        assert_eq!(f.gateway.calls.create.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn an_eventbridge_event_settles_like_a_webhook_and_its_duplicate_changes_nothing() {
        let f = fixture();
        let op = sample_operation(&f, PaymentIntentStatus::Succeeded).await;
        let out = call_eventbridge(&f, sample_eventbridge()).await.unwrap();
        assert_eq!(out["outcome"], "succeeded");
        let settled = f.store.get(&op.key()).await.unwrap().unwrap();
        assert_eq!(settled.status, OperationStatus::Succeeded);
        let out = call_eventbridge(&f, sample_eventbridge()).await.unwrap();
        assert_eq!(out["outcome"], "duplicate");
        assert_eq!(f.store.get(&op.key()).await.unwrap().unwrap(), settled);
        // The same event id arriving the other way is the same duplicate: one inbox.
        let (status, body) = call(&f, sample()).await;
        assert_eq!((status, body["outcome"].as_str()), (200, Some("duplicate")));
        assert_eq!(f.gateway.calls.retrieve.load(Ordering::SeqCst), 1);
        assert_eq!(f.gateway.calls.create.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn eventbridge_events_that_are_not_stripes_fail_the_invocation_and_write_nothing() {
        let f = fixture();
        let op = sample_operation(&f, PaymentIntentStatus::Succeeded).await;
        let before = f.store.get(&op.key()).await.unwrap().unwrap();
        let mut foreign = sample_eventbridge();
        foreign["source"] = json!("aws.partner/example.com/x");
        let mut retyped = sample_eventbridge();
        retyped["detail-type"] = json!("payment_intent.canceled");
        let mut bare = sample_eventbridge();
        bare["detail"] = json!({"id": "evt_1"});
        for (name, event) in [("foreign", foreign), ("retyped", retyped), ("bare", bare)] {
            let err = call_eventbridge(&f, event).await.unwrap_err();
            assert!(err.contains("unreadable"), "{name}: {err}");
        }
        // A deployment that names its source refuses another Stripe source.
        let mut f2 = fixture();
        f2.deps.events.event_source = Some("aws.partner/stripe.com/ed_other".into());
        sample_operation(&f2, PaymentIntentStatus::Succeeded).await;
        assert!(call_eventbridge(&f2, sample_eventbridge()).await.is_err());
        assert!(f.inbox.is_empty() && f2.inbox.is_empty());
        assert_eq!(f.store.get(&op.key()).await.unwrap().unwrap(), before);
        assert_eq!(
            f.metrics.sum("WebhookRejected", &[("Function", FUNCTION)]),
            3.0
        );
        assert_eq!(f.gateway.calls.total(), 0);
    }

    /// The sample events, read as the runtime reads a payload (`serde_path_to_error` over the
    /// bytes, lambda_runtime's `deserializer`): the EventBridge one is an EventBridge event, the
    /// HTTP API request is not, and each settles the sample operation.
    #[tokio::test]
    async fn the_sample_events_read_as_the_runtime_reads_them() {
        let read = |name: &str| -> Incoming {
            let path = format!("{}/../../events/{name}", env!("CARGO_MANIFEST_DIR"));
            let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(&raw))
                .unwrap_or_else(|e| panic!("{path}: {e}"))
        };
        let bridge = read("stripe-eventbridge-payment-intent-succeeded.json");
        assert!(matches!(bridge, Incoming::EventBridge(_)), "{bridge:?}");
        let http = read("webhook-payment-intent-succeeded.json");
        assert!(matches!(&http, Incoming::Other(Value::Object(m)) if m.contains_key("body")));
        let f = fixture();
        let op = sample_operation(&f, PaymentIntentStatus::Succeeded).await;
        let out = handle(&f.deps, LambdaEvent::new(bridge, Context::default()))
            .await
            .unwrap();
        assert_eq!(out["outcome"], "succeeded", "{out}");
        assert_eq!(
            f.store.get(&op.key()).await.unwrap().unwrap().status,
            OperationStatus::Succeeded
        );
        let out = handle(&f.deps, LambdaEvent::new(http, Context::default()))
            .await
            .unwrap();
        let resp: ApiGatewayV2httpResponse = serde_json::from_value(out).unwrap();
        // Signed with the sample secret at the fixture's clock; the event is new to the inbox.
        assert_eq!(resp.status_code, 200, "{:?}", resp.body);
    }

    /// The refund the refund samples name (`re_3SampleRefund0001` of `ord-1001`, 500 of the
    /// 1250 charged), recorded succeeded, and at Stripe in `status`: the order's charge succeeded
    /// with 500 reserved, and the refund.
    async fn sample_refund(f: &Fixture, status: RefundStatus) -> (Operation, Operation) {
        let body: Value = serde_json::from_str(
            read_sample("webhook-refund-failed.json")
                .body
                .as_deref()
                .unwrap(),
        )
        .unwrap();
        let object = &body["data"]["object"];
        let mut charge =
            charge_core::testing::order(object["metadata"]["order_id"].as_str().unwrap())
                .status(OperationStatus::Succeeded)
                .external_id(SAMPLE_INTENT)
                .at(f.clock.now())
                .build();
        charge.next_due_at = None;
        f.store.create_if_absent(&charge).await.unwrap();
        let request = RefundRequest {
            amount: Some(Amount::new(500).unwrap()),
            reason: None,
        };
        let (params, reserve) = refund::reserve(&charge, &request, f.clock.now()).unwrap();
        let mut op = Operation::new_refund(
            charge.order_id.clone(),
            RefundId::parse("refund-1").unwrap(),
            &request,
            params,
            Principal::jwt("support").unwrap(),
            f.clock.now(),
            Duration::from_secs(300),
        );
        op.operation_id =
            OperationId::parse(object["metadata"]["operation_id"].as_str().unwrap()).unwrap();
        let re = StripeRefundId::parse(object["id"].as_str().unwrap()).unwrap();
        op.status = OperationStatus::Succeeded;
        op.params.refund_state_mut().unwrap().stripe_refund_id = Some(re.clone());
        op.next_due_at = None;
        f.store
            .create_beside(&op, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap();
        f.gateway.insert_refund_as(
            &re,
            FakeRefund {
                status,
                payment_intent: PaymentIntentId::parse(SAMPLE_INTENT).unwrap(),
                amount: 500,
                currency: "usd".into(),
                operation_id: op.operation_id.to_string(),
                order_id: op.order_id.as_str().to_owned(),
                idempotency_key: format!("refund-op:{}", op.operation_id),
                failure_reason: Some("expired_or_canceled_card".into()),
            },
        );
        (charge, op)
    }

    fn read_sample(name: &str) -> ApiGatewayV2httpRequest {
        let path = format!("{}/../../events/{name}", env!("CARGO_MANIFEST_DIR"));
        let raw = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&raw).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// A Stripe dispute event of `kind` naming `dispute`, claiming `claimed` for it, in the
    /// EventBridge envelope a Stripe event destination sends (no signature to forge there).
    fn dispute_event(event_id: &str, kind: &str, dispute: &str, claimed: &str) -> Value {
        let detail = json!({
            "id": event_id,
            "object": "event",
            "type": format!("charge.dispute.{kind}"),
            "data": {"object": {
                "id": dispute,
                "object": "dispute",
                "status": claimed,
                "amount": 1,
                "payment_intent": "pi_forged",
            }},
        });
        json!({
            "version": "0",
            "id": format!("eb-{event_id}"),
            "detail-type": detail["type"],
            "source": "aws.partner/stripe.com/ed_test_61SampleDestination",
            "account": "123456789012",
            "time": "2027-01-15T08:00:00Z",
            "region": "us-east-1",
            "resources": [],
            "detail": detail,
        })
    }

    /// ord-dispute's charge of 1250 usd, succeeded as `pi_disputed` at the fake Stripe, which
    /// holds it with our metadata.
    async fn disputed_charge(f: &Fixture) -> Operation {
        let mut op = charge_core::testing::order("ord-dispute")
            .status(OperationStatus::Succeeded)
            .external_id("pi_disputed")
            .at(f.clock.now())
            .build();
        op.next_due_at = None;
        f.store.put_for_tests(op.clone());
        f.gateway.insert_intent_as(
            &PaymentIntentId::parse("pi_disputed").unwrap(),
            FakeGateway::charge_for(&op, PaymentIntentStatus::Succeeded),
        );
        op
    }

    fn dispute_key(id: &str) -> charge_core::operation::OperationKey {
        charge_core::operation::OperationKey::of_kind(
            charge_core::domain::OrderId::parse("ord-dispute").unwrap(),
            charge_core::domain::OperationKind::Dispute(
                charge_core::domain::DisputeId::parse(id).unwrap(),
            ),
        )
    }

    /// A dispute event is a hint: the dispute is retrieved at Stripe, found under its order by
    /// its intent, and recorded as Stripe holds it — the event claimed `won` and an amount of 1,
    /// Stripe holds it `needs_response` for the whole 1250, and that is what is written (the
    /// charge's reservation and its open dispute in the same write). Stripe closing it `won`
    /// settles it `failed` with the reservation back; the same news again changes nothing.
    #[tokio::test]
    async fn a_dispute_event_records_what_stripe_holds_not_what_it_claims() {
        use charge_core::dispute::DisputeStatus;
        let f = fixture();
        let charge = disputed_charge(&f).await;
        let pi = PaymentIntentId::parse("pi_disputed").unwrap();
        let due = f.clock.now().plus(Duration::from_secs(10 * 24 * 3600));
        f.gateway
            .open_dispute("dp_1", &pi, DisputeStatus::NeedsResponse, Some(due));
        let out = call_eventbridge(&f, dispute_event("evt_d1", "created", "dp_1", "won"))
            .await
            .unwrap();
        assert_eq!(out["outcome"], "unknown", "{out}");
        let record = f.store.get(&dispute_key("dp_1")).await.unwrap().unwrap();
        let state = record.params.dispute_state().unwrap();
        assert_eq!(
            (
                record.status,
                state.status.as_str(),
                record.params.amount().minor_units()
            ),
            (OperationStatus::Unknown, "needs_response", 1250)
        );
        assert!(state.reserved);
        let charge_now = f.store.get(&charge.key()).await.unwrap().unwrap();
        assert_eq!(charge_now.refund_reserved(), 1250);
        assert_eq!(
            charge_now
                .params
                .charge_state()
                .unwrap()
                .refund_blocked_by()
                .map(|d| d.as_str()),
            Some("dp_1")
        );
        assert_eq!(
            f.gateway
                .calls
                .dispute_read
                .load(std::sync::atomic::Ordering::SeqCst),
            1,
            "one retrieve of the dispute"
        );
        // Stripe closes it won: the closed event settles it failed, the 1250 given back.
        f.gateway.move_dispute("dp_1", DisputeStatus::Won);
        let out = call_eventbridge(&f, dispute_event("evt_d2", "closed", "dp_1", "lost"))
            .await
            .unwrap();
        assert_eq!(out["outcome"], "failed", "{out}");
        let record = f.store.get(&dispute_key("dp_1")).await.unwrap().unwrap();
        assert_eq!(record.status, OperationStatus::Failed);
        assert_eq!(record.next_due_at, None);
        let charge_now = f.store.get(&charge.key()).await.unwrap().unwrap();
        assert_eq!(charge_now.refund_reserved(), 0);
        assert_eq!(charge_now.params.charge_state().unwrap().disputed_by, None);
        // Another event of the same news (funds reinstated): settled, nothing written.
        let before = f.store.all();
        let out = call_eventbridge(
            &f,
            dispute_event("evt_d3", "funds_reinstated", "dp_1", "won"),
        )
        .await
        .unwrap();
        assert_eq!(out["outcome"], "already_settled", "{out}");
        assert_eq!(f.store.all(), before);
    }

    /// A dispute of an order whose refunds already gave back more than the dispute leaves (1000
    /// of 1250 refunded, 1250 disputed) is recorded all the same, without the reservation, NOT
    /// in review (it stays due for the reconciler's re-read, its reason in `last_error`), and
    /// counted `DisputeUnreserved` (paged), not `SentToReview`. Its twin on the same order, once
    /// the refunds are given back, reserves and counts nothing.
    #[tokio::test]
    async fn a_dispute_that_does_not_fit_the_refunds_is_recorded_unreserved_and_pages() {
        use charge_core::dispute::DisputeStatus;
        let f = fixture();
        let mut charge = disputed_charge(&f).await;
        charge.params.charge_state_mut().unwrap().refund_reserved = 1000;
        f.store.put_for_tests(charge.clone());
        let pi = PaymentIntentId::parse("pi_disputed").unwrap();
        let due = f.clock.now().plus(Duration::from_secs(10 * 24 * 3600));
        f.gateway
            .open_dispute("dp_over", &pi, DisputeStatus::NeedsResponse, Some(due));
        let out = call_eventbridge(&f, dispute_event("evt_u1", "created", "dp_over", "lost"))
            .await
            .unwrap();
        assert_eq!(out["outcome"], "dispute_unreserved", "{out}");
        let record = f.store.get(&dispute_key("dp_over")).await.unwrap().unwrap();
        assert_eq!(record.status, OperationStatus::Unknown);
        assert!(record.review.is_none(), "never in review: read again");
        assert!(
            record.next_due_at.is_some_and(|at| at > f.clock.now()),
            "on its re-read schedule: {:?}",
            record.next_due_at
        );
        assert!(
            record
                .last_error
                .as_deref()
                .is_some_and(|e| e.starts_with("dispute_unreserved:")),
            "{:?}",
            record.last_error
        );
        assert!(!record.params.dispute_state().unwrap().reserved);
        let charge_now = f.store.get(&charge.key()).await.unwrap().unwrap();
        assert_eq!(charge_now.refund_reserved(), 1000, "nothing reserved");
        assert_eq!(
            f.metrics
                .sum("DisputeUnreserved", &[("Function", FUNCTION)]),
            1.0
        );
        assert_eq!(
            f.metrics.sum("SentToReview", &[("Function", FUNCTION)]),
            0.0
        );
        // The twin: the same order with its refunds given back; a second dispute fits.
        let mut charge = charge_now;
        charge.params.charge_state_mut().unwrap().refund_reserved = 0;
        charge.params.charge_state_mut().unwrap().disputed_by = None;
        f.store.put_for_tests(charge.clone());
        f.gateway
            .open_dispute("dp_fits", &pi, DisputeStatus::NeedsResponse, Some(due));
        let out = call_eventbridge(&f, dispute_event("evt_u2", "created", "dp_fits", "lost"))
            .await
            .unwrap();
        assert_eq!(out["outcome"], "unknown", "{out}");
        let record = f.store.get(&dispute_key("dp_fits")).await.unwrap().unwrap();
        assert!(record.params.dispute_state().unwrap().reserved);
        assert_eq!(record.last_error, None);
        assert_eq!(
            f.metrics
                .sum("DisputeUnreserved", &[("Function", FUNCTION)]),
            1.0,
            "counted once: the twin fits"
        );
    }

    /// A dispute of an intent that is not ours (no record under the order its metadata names)
    /// is acknowledged and counted, nothing written; its twin, a dispute of our charge, is
    /// written. A dispute Stripe does not hold (a forged id) writes nothing and pages.
    #[tokio::test]
    async fn a_dispute_not_ours_or_unknown_to_stripe_writes_nothing() {
        use charge_core::dispute::DisputeStatus;
        let f = fixture();
        disputed_charge(&f).await;
        let stranger = charge_core::testing::order("ord-elsewhere")
            .status(OperationStatus::Succeeded)
            .build();
        let other = PaymentIntentId::parse("pi_elsewhere").unwrap();
        f.gateway.insert_intent_as(
            &other,
            FakeGateway::charge_for(&stranger, PaymentIntentStatus::Succeeded),
        );
        f.gateway
            .open_dispute("dp_2", &other, DisputeStatus::NeedsResponse, None);
        let before = f.store.all();
        let out = call_eventbridge(&f, dispute_event("evt_n1", "created", "dp_2", "lost"))
            .await
            .unwrap();
        assert_eq!(out["outcome"], "not_ours", "{out}");
        assert_eq!(f.store.all(), before, "nothing written");
        assert_eq!(
            f.metrics.sum(
                "WebhookIgnored",
                &[("Function", FUNCTION), ("Reason", "not_ours")]
            ),
            1.0
        );
        let out = call_eventbridge(&f, dispute_event("evt_n2", "created", "dp_forged", "lost"))
            .await
            .unwrap();
        assert_eq!(out["outcome"], "unknown_dispute", "{out}");
        assert_eq!(f.store.all(), before, "nothing written");
        assert_eq!(
            f.metrics.sum("EventMismatch", &[("Function", FUNCTION)]),
            1.0
        );
        // The twin: a dispute of our charge is recorded.
        f.gateway.open_dispute(
            "dp_3",
            &PaymentIntentId::parse("pi_disputed").unwrap(),
            DisputeStatus::WarningNeedsResponse,
            None,
        );
        let out = call_eventbridge(&f, dispute_event("evt_n3", "created", "dp_3", "lost"))
            .await
            .unwrap();
        assert_eq!(out["outcome"], "unknown", "{out}");
        assert_eq!(f.store.all().len(), before.len() + 1);
    }

    /// The refund samples: Stripe's late failure of a succeeded refund is recorded failed, its
    /// 500 refundable again, and counted (`RefundFailedAfterSuccess`, paged); the EventBridge
    /// sample of the same news changes nothing more.
    #[tokio::test]
    async fn the_refund_failed_samples_record_a_late_failure_once_and_count_it() {
        let f = fixture();
        let (charge, refund) = sample_refund(&f, RefundStatus::Failed).await;
        let (status, body) = call(&f, read_sample("webhook-refund-failed.json")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["outcome"], "failed_after_success");
        let now = f.store.get(&refund.key()).await.unwrap().unwrap();
        assert_eq!(now.status, OperationStatus::Failed);
        let charge_now = f.store.get(&charge.key()).await.unwrap().unwrap();
        assert_eq!(charge_now.refund_reserved(), 0, "the 500 is back");
        assert_eq!(
            f.metrics
                .sum("RefundFailedAfterSuccess", &[("Function", FUNCTION)]),
            1.0
        );
        let path = format!(
            "{}/../../events/stripe-eventbridge-refund-failed.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let raw = std::fs::read(&path).unwrap();
        let bridge: Incoming =
            serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(&raw))
                .unwrap();
        let out = handle(&f.deps, LambdaEvent::new(bridge, Context::default()))
            .await
            .unwrap();
        assert_eq!(out["outcome"], "already_settled", "{out}");
        assert_eq!(
            f.metrics
                .sum("RefundFailedAfterSuccess", &[("Function", FUNCTION)]),
            1.0,
            "counted once"
        );
    }

    /// The twin: the same sample when Stripe holds the refund succeeded (a forged failure):
    /// nothing moves, paged as a mismatch, nothing counted as a late failure.
    #[tokio::test]
    async fn the_refund_failed_sample_changes_nothing_when_stripe_says_succeeded() {
        let f = fixture();
        let (charge, refund) = sample_refund(&f, RefundStatus::Succeeded).await;
        let (status, body) = call(&f, read_sample("webhook-refund-failed.json")).await;
        assert_eq!(
            (status, body["outcome"].as_str()),
            (200, Some("status_contradicted"))
        );
        assert_eq!(
            f.store.get(&refund.key()).await.unwrap().unwrap().status,
            OperationStatus::Succeeded
        );
        let charge_now = f.store.get(&charge.key()).await.unwrap().unwrap();
        assert_eq!(charge_now.refund_reserved(), 500);
        assert_eq!(
            f.metrics.sum("EventMismatch", &[("Function", FUNCTION)]),
            1.0
        );
        assert_eq!(
            f.metrics
                .sum("RefundFailedAfterSuccess", &[("Function", FUNCTION)]),
            0.0
        );
    }

    /// A refund event for a refund in review moves nothing and asks Stripe nothing, but it is the
    /// operator's evidence: its line names the refund and the status it claims beside the review's
    /// reason, and it is counted for the in-review alarm. The same event for the refund out of
    /// review is acted on (Stripe asked) and writes no such line.
    #[tokio::test]
    async fn a_refund_event_for_a_refund_in_review_logs_the_refund_it_names() {
        const SENTENCE: &str = "an event names a refund of an operation in review";
        for in_review in [true, false] {
            let f = fixture();
            let (_, mut refund) = sample_refund(&f, RefundStatus::Failed).await;
            if in_review {
                refund.status = OperationStatus::Unknown;
                refund.review = Some(charge_core::operation::Review {
                    reason: "refund_refused: the refund's answer was lost".into(),
                    flagged_at: f.clock.now(),
                });
                f.store.put_for_tests(refund.clone());
            }
            let ((status, body), logged) =
                logged(call(&f, read_sample("webhook-refund-failed.json"))).await;
            let line = logged.lines().find(|l| l.contains(SENTENCE));
            if in_review {
                assert_eq!((status, body["outcome"].as_str()), (200, Some("in_review")));
                assert_eq!(f.gateway.calls.total(), 0);
                assert_eq!(f.store.get(&refund.key()).await.unwrap().unwrap(), refund);
                assert_eq!(
                    f.metrics.sum(
                        "WebhookIgnored",
                        &[("Function", FUNCTION), ("Reason", "in_review")]
                    ),
                    1.0
                );
                let line = line.unwrap_or_else(|| panic!("no in-review line in {logged}"));
                let re = refund.stripe_refund_id().unwrap().as_str();
                assert!(line.contains(&format!("\"refund\":\"{re}\"")), "{line}");
                assert!(line.contains("\"claimed_status\":\"failed\""), "{line}");
                assert!(line.contains("refund_refused"), "{line}");
            } else {
                assert_ne!(body["outcome"].as_str(), Some("in_review"));
                assert!(f.gateway.calls.total() > 0);
                assert_eq!(line, None, "{logged}");
            }
        }
    }

    /// Whatever JSON the runtime hands the function is read, never a deserialization failure:
    /// an EventBridge event of the wrong shape is the function's own `unreadable` (a failed
    /// invocation, counted), anything else without `detail-type` a 400.
    #[tokio::test]
    async fn every_payload_shape_gets_the_functions_own_answer() {
        let f = fixture();
        let op = sample_operation(&f, PaymentIntentStatus::Succeeded).await;
        let before = f.store.get(&op.key()).await.unwrap().unwrap();
        let mut detail_string = sample_eventbridge();
        detail_string["detail"] = json!("evt_1");
        let mut null_type = sample_eventbridge();
        null_type["detail-type"] = Value::Null;
        for (name, event) in [
            ("detail string", detail_string),
            ("detail-type null", null_type),
        ] {
            let err = call_eventbridge(&f, event).await.unwrap_err();
            assert!(err.contains("unreadable"), "{name}: {err}");
        }
        for payload in [
            json!("x"),
            json!([1, 2]),
            json!(7),
            Value::Null,
            json!({"detail": 1}),
        ] {
            let out = handle(
                &f.deps,
                LambdaEvent::new(incoming(&payload), Context::default()),
            )
            .await
            .unwrap();
            let resp: ApiGatewayV2httpResponse = serde_json::from_value(out).unwrap();
            assert!(
                matches!(resp.status_code, 400 | 405),
                "{payload}: {}",
                resp.status_code
            );
        }
        assert_eq!(
            f.metrics.sum("WebhookRejected", &[("Function", FUNCTION)]),
            2.0
        );
        assert!(f.inbox.is_empty());
        assert_eq!(f.store.get(&op.key()).await.unwrap().unwrap(), before);
        // The sample still settles after all that: the reads above left nothing behind.
        let out = call_eventbridge(&f, sample_eventbridge()).await.unwrap();
        assert_eq!(out["outcome"], "succeeded");
    }

    #[tokio::test]
    async fn a_forged_succeeded_moves_nothing_and_pages() {
        let f = fixture();
        // Stripe holds the sample's intent as declined; the signed event says succeeded.
        let op = sample_operation(&f, PaymentIntentStatus::RequiresPaymentMethod).await;
        let before = f.store.get(&op.key()).await.unwrap().unwrap();
        let (status, body) = call(&f, sample()).await;
        assert_eq!(
            (status, body["outcome"].as_str()),
            (200, Some("status_contradicted"))
        );
        let out = call_eventbridge(&f, {
            let mut e = sample_eventbridge();
            e["detail"]["id"] = json!("evt_3SampleWebhook0002");
            e
        })
        .await
        .unwrap();
        assert_eq!(out["outcome"], "status_contradicted");
        assert_eq!(f.store.get(&op.key()).await.unwrap().unwrap(), before);
        assert_eq!(
            f.metrics.sum("EventMismatch", &[("Function", FUNCTION)]),
            2.0
        );
    }

    #[tokio::test]
    async fn a_stack_without_a_webhook_secret_refuses_every_delivery() {
        let mut f = fixture();
        f.deps.events.secrets = None;
        let op = sample_operation(&f, PaymentIntentStatus::Succeeded).await;
        let (status, body) = call(&f, sample()).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (404, Some("webhook_disabled"))
        );
        assert_eq!(
            f.store.get(&op.key()).await.unwrap().unwrap().status,
            OperationStatus::Unknown
        );
        assert!(f.inbox.is_empty());
        // EventBridge still works.
        let out = call_eventbridge(&f, sample_eventbridge()).await.unwrap();
        assert_eq!(out["outcome"], "succeeded");
    }

    #[tokio::test]
    async fn rejects_are_400_counted_and_write_nothing() {
        let f = fixture();
        let op = sample_operation(&f, PaymentIntentStatus::Succeeded).await;
        let before = f.store.get(&op.key()).await.unwrap().unwrap();
        let mut missing = sample();
        missing.headers.remove("stripe-signature");
        let mut altered = sample();
        altered.body = altered.body.map(|b| b.replace("succeeded", "succeedeD"));
        let mut big = sample();
        big.body = Some(" ".repeat(MAX_BODY_BYTES + 1));
        let mut garbage = sample();
        garbage.is_base64_encoded = true;
        garbage.body = Some("not base64!".into());
        for (name, req, code) in [
            ("missing", missing, "missing_header"),
            ("altered", altered, "signature_mismatch"),
            ("big", big, "body_too_large"),
            ("base64", garbage, "signature_mismatch"),
        ] {
            let (status, body) = call(&f, req).await;
            assert_eq!(status, 400, "{name}: {body}");
            assert_eq!(body["error"]["code"], code, "{name}");
        }
        // Stale: the clock moved past the tolerance.
        f.clock.advance(Duration::from_secs(301));
        let (status, body) = call(&f, sample()).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("outside_tolerance"))
        );
        assert_eq!(
            f.metrics.sum("WebhookRejected", &[("Function", FUNCTION)]),
            5.0
        );
        assert!(f.inbox.is_empty());
        assert_eq!(f.store.get(&op.key()).await.unwrap().unwrap(), before);
        // No line carries the secret.
        assert!(f.metrics.lines().iter().all(|l| !l.contains(SAMPLE_SECRET)));
    }

    #[tokio::test]
    async fn base64_bodies_and_methods() {
        let f = fixture();
        sample_operation(&f, PaymentIntentStatus::Succeeded).await;
        let mut req = sample();
        req.body = req.body.map(|b| BASE64.encode(b));
        req.is_base64_encoded = true;
        assert_eq!(call(&f, req).await.0, 200);
        let mut req = sample();
        req.request_context.http.method = Method::GET;
        assert_eq!(call(&f, req).await.0, 405);
    }

    #[tokio::test]
    async fn a_second_intent_is_counted_as_review() {
        let f = fixture();
        let mut op = sample_operation(&f, PaymentIntentStatus::Succeeded).await;
        // Make the stored operation carry another PaymentIntent id than the sample's.
        let other = f
            .gateway
            .insert_charge(&op, PaymentIntentStatus::Processing);
        op.external_id = Some(other);
        f.store.put_for_tests(op.clone());
        let (status, body) = call(&f, sample()).await;
        assert_eq!((status, body["outcome"].as_str()), (200, Some("review")));
        assert_eq!(
            f.metrics
                .sum("SentToReview", &[("ReasonClass", SECOND_PAYMENT_INTENT)]),
            1.0
        );
    }

    /// An event for an operation in review is counted under the alarmed `Reason=in_review`.
    #[tokio::test]
    async fn an_event_for_an_operation_in_review_is_counted_for_its_alarm() {
        let f = fixture();
        let op = sample_operation(&f, PaymentIntentStatus::Succeeded).await;
        let mut reviewed = f.store.get(&op.key()).await.unwrap().unwrap();
        reviewed.review = Some(charge_core::operation::Review {
            reason: "search_ambiguous: search found 0 payment intents".into(),
            flagged_at: f.clock.now(),
        });
        f.store.put_for_tests(reviewed.clone());
        let (status, body) = call(&f, sample()).await;
        assert_eq!((status, body["outcome"].as_str()), (200, Some("in_review")));
        assert_eq!(
            f.metrics.sum(
                "WebhookIgnored",
                &[("Function", FUNCTION), ("Reason", "in_review")]
            ),
            1.0
        );
        assert_eq!(f.store.get(&op.key()).await.unwrap().unwrap(), reviewed);
        assert_eq!(f.gateway.calls.total(), 0);
    }

    #[test]
    fn the_budget_follows_the_deadline_and_the_http_cap() {
        let now_ms = 1_800_000_000_000;
        let deadline = |ahead_ms: u64| now_ms + ahead_ms;
        assert_eq!(
            budget_at(deadline(40_000), now_ms, Some(HTTP_BUDGET)),
            HTTP_BUDGET
        );
        assert_eq!(
            budget_at(deadline(40_000), now_ms, None),
            Duration::from_secs(37)
        );
        assert_eq!(
            budget_at(deadline(10_000), now_ms, Some(HTTP_BUDGET)),
            Duration::from_secs(7)
        );
        // A real deadline within the margin: no time, and said so.
        assert_eq!(budget_at(deadline(1_000), now_ms, None), Duration::ZERO);
    }

    /// What `cargo lambda watch` (1.9) sends as `Lambda-Runtime-Deadline-Ms`: 600000, a duration,
    /// not a time. Read as a time it left nothing, and every event was forgotten "out of time
    /// after 0ns". One in the past, and one beyond the function's timeout, are no deadline either:
    /// the function's timeout bounds the work. A context without any (an in-process caller) is
    /// not bounded here.
    #[test]
    fn a_deadline_that_is_not_a_time_ahead_gives_the_functions_timeout() {
        let now_ms = 1_800_000_000_000;
        let full = FUNCTION_TIMEOUT - DEADLINE_MARGIN;
        assert_eq!(budget(&Context::default(), Some(HTTP_BUDGET)), None);
        let mut cargo_lambda = Context::default();
        cargo_lambda.deadline = 600_000;
        assert_eq!(budget(&cargo_lambda, None), Some(full));
        for deadline_ms in [600_000, 1, now_ms - 1, now_ms, now_ms + 3_600_000, u64::MAX] {
            assert_eq!(budget_at(deadline_ms, now_ms, None), full, "{deadline_ms}");
            assert_eq!(
                budget_at(deadline_ms, now_ms, Some(HTTP_BUDGET)),
                HTTP_BUDGET,
                "{deadline_ms}"
            );
        }
    }

    /// Stripe answering after a moment, as over the network: the work yields to the timer, so a
    /// zero budget is really out of time.
    struct SlowStripe(Arc<FakeGateway>);

    impl StripeAccount for SlowStripe {
        fn livemode(&self) -> bool {
            self.0.livemode()
        }
    }

    #[async_trait::async_trait]
    impl PaymentIntents for SlowStripe {
        async fn create(
            &self,
            req: &charge_once::ports::CreatePaymentIntent,
        ) -> Result<charge_core::outcome::PaymentIntent, charge_core::outcome::GatewayError>
        {
            self.0.create(req).await
        }
        async fn retrieve(
            &self,
            id: &PaymentIntentId,
        ) -> Result<charge_core::outcome::PaymentIntent, charge_core::outcome::GatewayError>
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
            self.0.retrieve(id).await
        }
        async fn search_by_operation(
            &self,
            id: &charge_core::domain::OperationId,
        ) -> Result<Vec<charge_core::outcome::PaymentIntent>, charge_core::outcome::GatewayError>
        {
            self.0.search_by_operation(id).await
        }
        async fn cancel(
            &self,
            req: &charge_once::ports::CancelPaymentIntent,
        ) -> Result<charge_core::outcome::PaymentIntent, charge_core::outcome::GatewayError>
        {
            self.0.cancel(req).await
        }
    }

    impl StripeRefunds for SlowStripe {}

    impl charge_once::ports::StripeDisputes for SlowStripe {}

    impl CreatedLists for SlowStripe {}

    /// The invocation as `cargo lambda watch` makes it settles the sample's operation, by either
    /// route: before, both were forgotten with `deadline` (a 500, a failed invocation).
    #[tokio::test]
    async fn under_cargo_lambdas_deadline_the_sample_events_settle() {
        let mut context = Context::default();
        context.deadline = 600_000;
        let slow = || {
            let mut f = fixture();
            f.deps.events.charge.gateway = Arc::new(SlowStripe(f.gateway.clone()));
            f
        };
        let f = slow();
        let op = sample_operation(&f, PaymentIntentStatus::Succeeded).await;
        let resp = handle(
            &f.deps,
            LambdaEvent::new(incoming(&json!(sample())), context.clone()),
        )
        .await
        .unwrap();
        let resp: ApiGatewayV2httpResponse = serde_json::from_value(resp).unwrap();
        assert_eq!(resp.status_code, 200, "{:?}", resp.body);
        assert_eq!(
            f.store.get(&op.key()).await.unwrap().unwrap().status,
            OperationStatus::Succeeded
        );
        let f = slow();
        let op = sample_operation(&f, PaymentIntentStatus::Succeeded).await;
        let out = handle(
            &f.deps,
            LambdaEvent::new(incoming(&sample_eventbridge()), context),
        )
        .await
        .unwrap();
        assert_eq!(out["outcome"], "succeeded", "{out}");
        assert_eq!(
            f.store.get(&op.key()).await.unwrap().unwrap().status,
            OperationStatus::Succeeded
        );
        assert_eq!(f.gateway.calls.retrieve.load(Ordering::SeqCst), 1);
    }
}
