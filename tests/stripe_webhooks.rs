//! Stripe-sim's webhooks against the real verifiers, both ways:
//! - the official `stripe` Python package's `Webhook.construct_event` accepts every delivery the
//!   simulator signs (and refuses an altered body);
//! - the events function accepts a delivery signed by that package's own test helper
//!   (`WebhookSignature.generate_signature_header`);
//! - over HTTP, the simulator delivers to a real local endpoint with Stripe's headers, retries
//!   with back-off while the endpoint fails, and its faults (duplicates) are counted at both ends.
//!
//! The Python tests need the venv that `infra/local/with-stack.sh` installs (`make test` does);
//! without it they fail with that message, they are never skipped.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use charge_core::plan::Policy;
use charge_core::{
    domain::PaymentIntentId,
    operation::OperationStatus,
    outcome::PaymentIntentStatus,
    time::{SystemClock, Timestamp},
};
use charge_once::events::signature::verify;
use charge_once::events::{EventsDeps, WebhookSecret, DEFAULT_TOLERANCE};
use charge_once::executor::EngineDeps;
use charge_once::memory::{FakeGateway, MemoryInbox, MemoryStore};
use charge_once::ports::OperationStore;
use charge_once::testing::CreateIn as _;
use serde_json::{json, Value};
use stripe_sim::receiver::{wait_until, Receiver};
use stripe_sim::{CreateStart, Outcome, SimConfig, StripeSim, WebhookConfig, WebhookFaults};

/// This test's endpoint key (Stripe's form; a fixture, never a secret to store).
const SECRET: &str = "whsec_ChargeOnceWebhookTests7Qp2Rt9Vw4Yz";

fn venv_python() -> String {
    let venv = std::env::var("CHARGE_ONCE_VENV").expect(
        "CHARGE_ONCE_VENV is not set: run the tests through `make test` \
         (infra/local/with-stack.sh installs the official stripe package into .venv)",
    );
    let python = format!("{venv}/bin/python");
    assert!(
        std::path::Path::new(&python).exists(),
        "{python} does not exist: run through infra/local/with-stack.sh"
    );
    python
}

fn python(mode: &str, stdin: &str) -> String {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../infra/stripe-sim/tests/official_webhook.py"
    );
    let mut child = Command::new(venv_python())
        .arg(script)
        .arg(mode)
        .env("STRIPE_WEBHOOK_SECRET", SECRET)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the venv's python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "official_webhook.py {mode} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn create(sim: &StripeSim, key: &str, pm: &str) -> Value {
    let form = vec![
        ("amount".to_owned(), "1250".to_owned()),
        ("currency".to_owned(), "usd".to_owned()),
        ("customer".to_owned(), "cus_webhooks".to_owned()),
        ("payment_method".to_owned(), pm.to_owned()),
        ("confirm".to_owned(), "true".to_owned()),
        ("off_session".to_owned(), "true".to_owned()),
        ("metadata[order_id]".to_owned(), format!("order-{key}")),
    ];
    match sim.create_in_process(Some(key), form) {
        CreateStart::Done(Outcome::Answered(a)) => serde_json::from_slice(&a.body).unwrap(),
        _ => panic!("the create was not answered"),
    }
}

fn sim_with_webhooks(url: Option<String>, faults: WebhookFaults) -> StripeSim {
    let sim = StripeSim::new(SimConfig::default());
    sim.set_webhooks(WebhookConfig {
        url,
        secret: Some(SECRET.to_owned()),
        faults,
        max_attempts: 0,
        enabled_events: None,
        ..WebhookConfig::default()
    })
    .unwrap();
    sim
}

#[test]
fn the_official_client_accepts_what_the_simulator_signs() {
    let sim = sim_with_webhooks(None, WebhookFaults::default());
    create(&sim, "a", "pm_card_visa");
    create(&sim, "b", "pm_card_chargeDeclined");
    let deliveries = sim.take_due_webhooks();
    assert_eq!(deliveries.len(), 4, "created + outcome, twice");
    let input: Vec<Value> = deliveries
        .iter()
        .map(|d| json!({"body": d.body, "signature": d.signature}))
        .collect();
    let out: Vec<Value> =
        serde_json::from_str(&python("verify", &Value::from(input).to_string())).unwrap();
    let got: Vec<(String, String)> = out
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_owned(),
                e["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = deliveries
        .iter()
        .map(|d| (d.event_id.clone(), d.event_type.clone()))
        .collect();
    assert_eq!(got, want);
    let types: Vec<&str> = want.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        types,
        [
            "payment_intent.created",
            "payment_intent.succeeded",
            "payment_intent.created",
            "payment_intent.payment_failed"
        ]
    );
}

#[tokio::test]
async fn the_function_accepts_what_the_official_helper_signs() {
    let body = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../events/webhook-payment-intent-succeeded.json"
    ))
    .unwrap();
    let sample: Value = serde_json::from_str(&body).unwrap();
    let payload = sample["body"].as_str().unwrap().to_owned();
    let header = python("sign", &payload).trim().to_owned();
    assert!(
        header.starts_with("t=") && header.contains(",v1="),
        "{header}"
    );

    // The verifier alone, on the real clock the helper used.
    let secret = WebhookSecret::parse(SECRET).unwrap();
    let now = Timestamp::from_millis(
        i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap(),
    );
    verify(
        Some(&header),
        payload.as_bytes(),
        std::slice::from_ref(&secret),
        now,
        DEFAULT_TOLERANCE,
    )
    .expect("the Rust verifier accepts stripe-python's header");

    // The whole function: the sample's operation settles.
    let store = Arc::new(MemoryStore::new());
    let meta = &serde_json::from_str::<Value>(&payload).unwrap()["data"]["object"]["metadata"];
    let op = charge_core::testing::order(meta["order_id"].as_str().unwrap())
        .operation_id(meta["operation_id"].as_str().unwrap())
        .status(OperationStatus::Unknown)
        .at(now)
        .create_in(store.as_ref())
        .await;
    // Stripe holds the sample's PaymentIntent as succeeded: the function asks before acting.
    let gateway = Arc::new(FakeGateway::new());
    gateway.insert_intent_as(
        &PaymentIntentId::parse(
            serde_json::from_str::<Value>(&payload).unwrap()["data"]["object"]["id"]
                .as_str()
                .unwrap(),
        )
        .unwrap(),
        FakeGateway::charge_for(&op, PaymentIntentStatus::Succeeded),
    );
    let deps = events::handler::EventsFunction {
        events: EventsDeps {
            charge: EngineDeps {
                store: store.clone(),
                gateway,
                clock: Arc::new(SystemClock),
                policy: Policy::default(),
            },
            inbox: Arc::new(MemoryInbox::new()),
            secrets: Some(vec![secret]),
            tolerance: DEFAULT_TOLERANCE,
            event_source: None,
        },
        metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
    };
    let mut req: aws_lambda_events::apigw::ApiGatewayV2httpRequest =
        serde_json::from_value(sample).unwrap();
    req.headers
        .insert("stripe-signature", header.parse().unwrap());
    let resp = events::handler::handle_http(
        &deps,
        lambda_runtime::LambdaEvent::new(req, lambda_runtime::Context::default()),
    )
    .await;
    assert_eq!(resp.status_code, 200, "{:?}", resp.body);
    assert_eq!(
        store.get(&op.key()).await.unwrap().unwrap().status,
        OperationStatus::Succeeded
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_over_http_are_signed_retried_and_duplicated_as_configured() {
    let ep = Receiver::start(2).await.unwrap();
    let sim = sim_with_webhooks(
        Some(ep.url("/stripe/webhook")),
        WebhookFaults {
            duplicate: 1.0,
            ..WebhookFaults::default()
        },
    );
    let running = sim.start(0).await.unwrap();
    create(&sim, "http", "pm_card_visa");
    // 2 events, each duplicated a few simulated seconds later: 4 deliveries. The first two fail
    // (500) and are retried after the 10 s back-off (simulated), so the endpoint sees 6 requests.
    wait_until("the first deliveries", || sim.webhook_counts().failed == 2).await;
    assert_eq!(ep.count(), 2, "the duplicates are not due yet");
    sim.advance(Duration::from_secs(11));
    wait_until("the retries", || sim.webhook_counts().delivered == 4).await;
    let counts = sim.webhook_counts();
    assert_eq!(counts.events, 2);
    assert_eq!(counts.duplicated, 2);
    assert_eq!(counts.attempts, 6);
    assert_eq!(counts.delivered, 4);
    assert_eq!(sim.next_webhook_due_ms(), None);

    let seen = ep.received();
    assert_eq!(seen.len(), 6);
    let secret = WebhookSecret::parse(SECRET).unwrap();
    let now = Timestamp::from_millis(sim.now_ms());
    let mut ids = std::collections::BTreeMap::<String, usize>::new();
    for got in &seen {
        let signature = got.header("stripe-signature").unwrap_or_default();
        let body = &got.body;
        verify(
            Some(signature),
            body.as_bytes(),
            std::slice::from_ref(&secret),
            now,
            DEFAULT_TOLERANCE,
        )
        .unwrap_or_else(|e| panic!("{e}: {signature}"));
        let v: Value = serde_json::from_str(body).unwrap();
        *ids.entry(v["id"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    assert_eq!(ids.len(), 2, "two distinct events");
    assert!(
        ids.values().all(|n| *n >= 2),
        "each delivered at least twice: {ids:?}"
    );
    running.shutdown().await;
}
