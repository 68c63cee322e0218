//! `POST /stripe/webhook`: one Stripe event delivery.
//!
//! Who may call: anyone can reach the route (Stripe cannot sign SigV4, so it has no IAM/JWT
//! authorizer); only a body signed with the endpoint's secret within 300 s of our clock is read.
//! What it may do: settle an operation that is already there, through the executor's own
//! conditional writes; never create, confirm or overwrite (see [`charge_once::webhook`]).
//!
//! | answer | when | what changed |
//! |---|---|---|
//! | 400 `{error:{code}}` | missing/invalid signature, stale timestamp, body over 256 KiB, unreadable event | nothing |
//! | 405 | another method | nothing |
//! | 200 `{received, outcome}` | applied, duplicate, ignored (other type, not ours, unknown operation, nothing new) | at most the inbox entry and one guarded transition |
//! | 409 | the charge function holds the operation's lease right now | nothing (the inbox entry is forgotten: Stripe's retry is processed) |
//! | 500 | DynamoDB or Stripe's retrieve failed | nothing kept; Stripe retries, the reconciler is the safety net |
//!
//! Metrics (EMF, `Function=webhook`): `WebhookRejected` (alarmed), `WebhookApplied`,
//! `WebhookIgnored`, `WebhookRetryLater`, all with a `Reason`/`Outcome` class; `SentToReview`
//! (`ReasonClass=second_payment_intent`) and `WebhookSettledConflict`, both alarmed (paged).

use std::sync::Arc;

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use aws_lambda_events::encodings::Body;
use aws_lambda_events::http::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use aws_lambda_events::http::Method;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use charge_once::telemetry::{emf_line_classed, MetricsSink};
use charge_once::webhook::{
    receive, Reception, Rejection, SignatureError, WebhookDeps, WebhookReport, MAX_BODY_BYTES,
    SECOND_PAYMENT_INTENT,
};
use lambda_runtime::LambdaEvent;
use serde_json::{json, Value};
use tracing::{info, Instrument};

pub const FUNCTION: &str = "webhook";

/// What the handler needs, built once in `main`.
pub struct WebhookFunction {
    pub webhook: WebhookDeps,
    pub metrics: Arc<dyn MetricsSink>,
}

/// Handles one delivery. Always an HTTP answer, never a Lambda error.
pub async fn handle(
    deps: &WebhookFunction,
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
                receive(&deps.webhook, header, &body).await
            }
            Err(e) => WebhookReport {
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
        Reception::Applied { review: true, .. } => "review",
        Reception::Applied { status, .. } => status.as_str(),
        Reception::SettledConflict { reason } => reason,
        Reception::RetryLater { busy: true, .. } => "busy",
        Reception::RetryLater { busy: false, .. } => "unavailable",
    }
}

fn body_of(report: &WebhookReport) -> Value {
    match &report.reception {
        Reception::Rejected(why) => json!({"error": {"code": why.as_str()}}),
        Reception::RetryLater { .. } => {
            json!({"error": {"code": outcome_label(&report.reception)}})
        }
        other => json!({"received": true, "outcome": outcome_label(other)}),
    }
}

fn emit_metrics(deps: &WebhookFunction, report: &WebhookReport) {
    let now = deps.webhook.clock.now();
    let label = outcome_label(&report.reception);
    let (name, class) = match &report.reception {
        Reception::Rejected(_) => ("WebhookRejected", "Reason"),
        Reception::Ignored(_) => ("WebhookIgnored", "Reason"),
        Reception::Applied { .. } => ("WebhookApplied", "Outcome"),
        Reception::SettledConflict { .. } => ("WebhookSettledConflict", "Reason"),
        Reception::RetryLater { .. } => ("WebhookRetryLater", "Reason"),
    };
    deps.metrics.emit(emf_line_classed(
        FUNCTION,
        (class, label),
        now,
        &[(name, 1.0, "Count")],
    ));
    if let Reception::Applied { review: true, .. } = report.reception {
        deps.metrics.emit(emf_line_classed(
            FUNCTION,
            ("ReasonClass", SECOND_PAYMENT_INTENT),
            now,
            &[("SentToReview", 1.0, "Count")],
        ));
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
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use charge_once::memory::{FakeGateway, MemoryInbox, MemoryStore};
    use charge_once::ports::OperationStore;
    use charge_once::telemetry::CapturedMetrics;
    use charge_once::testing;
    use charge_once::webhook::{WebhookSecret, DEFAULT_TOLERANCE};
    use charge_once::{
        Clock, ManualClock, Operation, OperationStatus, PaymentIntentStatus, Timestamp,
    };
    use lambda_runtime::Context;

    use super::*;

    struct Fixture {
        store: Arc<MemoryStore>,
        inbox: Arc<MemoryInbox>,
        gateway: Arc<FakeGateway>,
        metrics: Arc<CapturedMetrics>,
        clock: ManualClock,
        deps: WebhookFunction,
    }

    fn fixture() -> Fixture {
        // The sample event's timestamp, so `events/webhook-payment-intent-succeeded.json` verifies.
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        let store = Arc::new(MemoryStore::new());
        let inbox = Arc::new(MemoryInbox::new());
        let gateway = Arc::new(FakeGateway::new());
        let metrics = Arc::new(CapturedMetrics::new());
        let deps = WebhookFunction {
            webhook: WebhookDeps {
                store: store.clone(),
                inbox: inbox.clone(),
                gateway: gateway.clone(),
                clock: Arc::new(clock.clone()),
                secret: WebhookSecret::parse(SAMPLE_SECRET).unwrap(),
                tolerance: DEFAULT_TOLERANCE,
                lease_ttl: Duration::from_secs(60),
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

    /// The secret `events/webhook-payment-intent-succeeded.json` is signed with (a test value).
    const SAMPLE_SECRET: &str = "whsec_sample_for_sam_local_invoke";

    fn sample() -> ApiGatewayV2httpRequest {
        let path = format!(
            "{}/../../events/webhook-payment-intent-succeeded.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let raw = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&raw).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    async fn call(f: &Fixture, req: ApiGatewayV2httpRequest) -> (i64, Value) {
        let resp = handle(&f.deps, LambdaEvent::new(req, Context::default())).await;
        let body = match resp.body {
            Some(Body::Text(t)) => serde_json::from_str(&t).unwrap(),
            other => panic!("expected a JSON body, got {other:?}"),
        };
        (resp.status_code, body)
    }

    /// The operation the sample event names, `unknown` after a lost answer.
    async fn sample_operation(f: &Fixture) -> Operation {
        let body: Value = serde_json::from_str(sample().body.as_deref().unwrap()).unwrap();
        let meta = &body["data"]["object"]["metadata"];
        testing::order(meta["order_id"].as_str().unwrap())
            .operation_id(meta["operation_id"].as_str().unwrap())
            .status(OperationStatus::Unknown)
            .at(f.clock.now())
            .create_in(f.store.as_ref())
            .await
    }

    #[tokio::test]
    async fn the_sample_event_settles_its_operation() {
        let f = fixture();
        let op = sample_operation(&f).await;
        let (status, body) = call(&f, sample()).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["outcome"], "succeeded");
        let now = f.store.get(&op.key()).await.unwrap().unwrap();
        assert_eq!(now.status, OperationStatus::Succeeded);
        assert_eq!(
            f.metrics.sum("WebhookApplied", &[("Function", FUNCTION)]),
            1.0
        );
        // Redelivered: 200, one transition only.
        let (status, body) = call(&f, sample()).await;
        assert_eq!((status, body["outcome"].as_str()), (200, Some("duplicate")));
        assert_eq!(f.store.get(&op.key()).await.unwrap().unwrap(), now);
        assert_eq!(f.gateway.calls.create.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn rejects_are_400_counted_and_write_nothing() {
        let f = fixture();
        let op = sample_operation(&f).await;
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
        sample_operation(&f).await;
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
        let mut op = sample_operation(&f).await;
        // Make the stored operation carry another PaymentIntent id than the sample's.
        let other = f
            .gateway
            .insert_charge(op.operation_id, PaymentIntentStatus::Processing);
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
}
