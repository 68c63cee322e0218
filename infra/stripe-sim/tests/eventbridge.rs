//! Events in the EventBridge envelope of a Stripe event destination: the same events, faults and
//! counts as signed webhooks, only the wire form differs (no signature, the event as `detail`);
//! over HTTP from the sender, configured through the admin API; and injected (forged) events
//! delivered like Stripe's own.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use stripe_sim::receiver::{wait_until, Receiver};
use stripe_sim::{
    CreateStart, DeliveryMode, Outcome, SimConfig, StripeSim, WebhookConfig, WebhookFaults,
    DEFAULT_EVENT_SOURCE,
};

fn create_in_process(sim: &StripeSim, key: &str, pm: &str) {
    let mut form = charge(key, pm);
    form.push(("metadata[order_id]".into(), format!("order-{key}")));
    match sim.create_in_process(Some(key), form) {
        CreateStart::Done(Outcome::Answered(_)) => {}
        _ => panic!("the create was not answered"),
    }
}

fn faults() -> WebhookFaults {
    WebhookFaults {
        duplicate: 0.2,
        out_of_order: 0.2,
        delayed: 0.2,
        dropped: 0.1,
        ..WebhookFaults::default()
    }
}

fn sim(mode: DeliveryMode) -> StripeSim {
    let sim = StripeSim::new(SimConfig {
        seed: 3,
        start_ms: Some(1_800_000_000_000),
        ..SimConfig::default()
    });
    sim.set_webhooks(WebhookConfig {
        secret: (mode == DeliveryMode::Webhook)
            .then(|| "whsec_EventBridgeTests4Qp9Rt2Vw7Yz1".into()),
        faults: faults(),
        mode,
        ..WebhookConfig::default()
    })
    .unwrap();
    sim
}

#[test]
fn the_same_events_faults_and_counts_as_webhooks_in_the_envelope() {
    let (hook, bridge) = (sim(DeliveryMode::Webhook), sim(DeliveryMode::EventBridge));
    for (i, pm) in [
        "pm_card_visa",
        "pm_card_chargeDeclined",
        "pm_card_processing_succeeds",
    ]
    .iter()
    .cycle()
    .take(60)
    .enumerate()
    {
        create_in_process(&hook, &format!("k{i}"), pm);
        create_in_process(&bridge, &format!("k{i}"), pm);
    }
    hook.advance(Duration::from_secs(3_600));
    bridge.advance(Duration::from_secs(3_600));
    let (a, b) = (hook.take_due_webhooks(), bridge.take_due_webhooks());
    assert_eq!(hook.webhook_counts(), bridge.webhook_counts());
    let c = bridge.webhook_counts();
    assert!(
        c.duplicated > 0 && c.reordered > 0 && c.delayed > 0 && c.dropped > 0,
        "{c:?}"
    );
    assert_eq!(a.len(), b.len());
    for (h, e) in a.iter().zip(&b) {
        assert_eq!(e.event_id, h.event_id);
        assert_eq!(e.mode, DeliveryMode::EventBridge);
        assert!(e.signature.is_empty(), "AWS authenticates this delivery");
        let env: Value = serde_json::from_str(&e.body).unwrap();
        let keys: Vec<&str> = env
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "account",
                "detail",
                "detail-type",
                "id",
                "region",
                "resources",
                "source",
                "time",
                "version"
            ]
        );
        assert_eq!(env["source"], DEFAULT_EVENT_SOURCE);
        assert_eq!(env["detail-type"], h.event_type.as_str());
        assert_eq!(env["time"], "2027-01-15T09:00:00Z");
        assert_eq!(
            env["detail"],
            serde_json::from_str::<Value>(&h.body).unwrap()
        );
    }
    // A failed delivery is retried the same way.
    bridge.webhook_result(&b[0], false);
    bridge.advance(Duration::from_secs(10));
    let again = bridge.take_due_webhooks();
    assert_eq!(
        (again[0].event_id.as_str(), again[0].attempt),
        (b[0].event_id.as_str(), 2)
    );
}

#[test]
fn an_injected_event_is_delivered_in_the_envelope_and_counted_apart() {
    let bridge = sim(DeliveryMode::EventBridge);
    let forged = json!({"id": "evt_forged_1", "object": "event", "type": "payment_intent.succeeded",
        "data": {"object": {"id": "pi_never_created", "object": "payment_intent", "status": "succeeded"}}});
    let d = bridge.inject_event(&forged).unwrap();
    assert!(d.injected);
    let env: Value = serde_json::from_str(&d.body).unwrap();
    assert_eq!(env["detail"], forged);
    assert_eq!(env["detail-type"], "payment_intent.succeeded");
    let c = bridge.webhook_counts();
    assert_eq!((c.events, c.injected, c.attempts), (0, 1, 1));
    // Events off: nothing to inject into.
    let off = StripeSim::new(SimConfig::default());
    assert!(off.inject_event(&forged).is_none());
}

#[tokio::test]
async fn over_http_configured_by_the_admin_api_unsigned_and_retried() {
    let h = start().await;
    let endpoint = Receiver::start(1).await.unwrap();
    let url = endpoint.url("/invocations");
    for bad in [
        r#"{"mode":"carrier-pigeon"}"#,
        r#"{"mode":"eventbridge","event_source":"aws.partner/example.com/x"}"#,
    ] {
        let (s, v) = h.admin_post("webhooks", bad).await;
        assert_eq!(s, 400, "{bad}: {v}");
    }
    let (s, v) = h
        .admin_post(
            "webhooks",
            &json!({"url": url, "mode": "eventbridge",
                "event_source": "aws.partner/stripe.com/ed_test_61AdminApi",
                "enabled_events": ["payment_intent.succeeded"]})
            .to_string(),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["mode"], "eventbridge");
    assert_eq!(
        v["event_source"],
        "aws.partner/stripe.com/ed_test_61AdminApi"
    );
    assert_eq!(v["secret_set"], false);

    assert_eq!(h.create(Some("k1"), &visa("op-1")).await.status(), 200);
    wait_until("the first post", || endpoint.count() == 1).await;
    // The first post failed: retried after 10 s of simulated time. The clock moves only once the
    // simulator has counted the failure (its retry is scheduled then): moved before, the retry
    // would be due 10 s after the moved clock and never come (a CI run timed out so).
    wait_until("the first post's failure", || {
        h.sim.webhook_counts().failed == 1
    })
    .await;
    h.sim.advance(Duration::from_secs(10));
    wait_until("the retry", || endpoint.count() == 2).await;
    for got in endpoint.received() {
        assert_eq!(got.header("stripe-signature"), None, "{got:?}");
        let env: Value = serde_json::from_str(&got.body).unwrap();
        assert_eq!(env["source"], "aws.partner/stripe.com/ed_test_61AdminApi");
        assert_eq!(env["detail-type"], "payment_intent.succeeded");
        assert_eq!(
            env["detail"]["data"]["object"]["metadata"]["operation_id"],
            "op-1"
        );
    }
    let counts = h.admin_get("webhooks").await["counts"].clone();
    assert_eq!(counts["events"], 1);
    assert_eq!(counts["failed"], 1);
    wait_until("one delivered", || h.sim.webhook_counts().delivered == 1).await;

    // A forged event, through the admin API: delivered like Stripe's own.
    let (s, v) = h
        .admin_post(
            "webhooks/inject",
            r#"{"id":"evt_forged","type":"payment_intent.canceled","data":{"object":{"id":"pi_x","status":"canceled"}}}"#,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, _) = h.admin_post("webhooks/inject", r#"{"type":"x"}"#).await;
    assert_eq!(s, 400);
    wait_until("two delivered", || h.sim.webhook_counts().delivered == 2).await;
    assert_eq!(h.sim.webhook_counts().injected, 1);
}
