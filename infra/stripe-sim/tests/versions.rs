//! The simulator answers as the `Stripe-Version` a request names (else the account's default,
//! the pin `2024-06-20`), and writes events in the endpoint's version: before basil a partial
//! capture or a cancel of an authorization leaves a refund of the released part and a lapse says
//! `automatic`; from basil on no such refund is made and a lapse says `expired`.

mod common;

use common::*;
use reqwest::Response;
use serde_json::Value;
use stripe_sim::version::{ApiVersion, CURRENT, PINNED};
use stripe_sim::{DeliveryMode, SimConfig, WebhookConfig, DEFAULT_API_KEY};

const T0: i64 = 1_800_000_000_000;

/// An authorized manual charge of 1000 usd (Visa, merchant-initiated), its id.
async fn authorized(h: &Harness, op: &str) -> String {
    let mut f = charge(op, "pm_card_visa");
    f.push(("capture_method".into(), "manual".into()));
    let v: Value = h.create(None, &f).await.json().await.unwrap();
    assert_eq!(v["status"], "requires_capture", "{v}");
    v["id"].as_str().unwrap().to_owned()
}

async fn post(h: &Harness, path: &str, version: Option<&str>, form: &[(&str, &str)]) -> Response {
    let mut req = h
        .client
        .post(format!("{}{path}", h.base))
        .bearer_auth(DEFAULT_API_KEY)
        .form(form);
    if let Some(v) = version {
        req = req.header("Stripe-Version", v);
    }
    req.send().await.unwrap()
}

async fn refunds_of(h: &Harness, pi: &str) -> Vec<Value> {
    let v: Value = h
        .get(&format!("/v1/refunds?payment_intent={pi}"))
        .await
        .json()
        .await
        .unwrap();
    v["data"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_partial_capture_and_a_cancel_leave_a_refund_only_before_basil() {
    let h = start_with(SimConfig {
        start_ms: Some(T0),
        ..SimConfig::default()
    })
    .await;
    for (version, leaves) in [(None, true), (Some(PINNED), true), (Some(CURRENT), false)] {
        let captured = authorized(&h, &format!("op-cap-{version:?}")).await;
        let path = format!("/v1/payment_intents/{captured}/capture");
        let r = post(&h, &path, version, &[("amount_to_capture", "700")]).await;
        assert_eq!(r.status(), 200);
        let canceled = authorized(&h, &format!("op-can-{version:?}")).await;
        let path = format!("/v1/payment_intents/{canceled}/cancel");
        assert_eq!(post(&h, &path, version, &[]).await.status(), 200);
        for (pi, released) in [(&captured, 300), (&canceled, 1000)] {
            let refunds = refunds_of(&h, pi).await;
            if !leaves {
                assert!(refunds.is_empty(), "{version:?}: {refunds:?}");
                continue;
            }
            let [re] = refunds.as_slice() else {
                panic!("{version:?}: one refund of the released part: {refunds:?}")
            };
            assert_eq!(
                (&re["amount"], &re["status"], &re["reason"]),
                (
                    &released.into(),
                    &"succeeded".into(),
                    &"expired_uncaptured_charge".into()
                )
            );
            assert_eq!(re["metadata"], serde_json::json!({}), "none of ours");
            assert!(re.get("failure_reason").is_none(), "absent, not null: {re}");
        }
        // The captured 700 is still all refundable: the released part holds none of it.
        let f = [("payment_intent", captured.as_str()), ("amount", "700")];
        let r = post(&h, "/v1/refunds", version, &f).await;
        assert_eq!(r.status(), 200, "{version:?}");
    }
}

#[tokio::test]
async fn a_lapse_says_automatic_before_basil_and_expired_after_and_events_follow_the_endpoint() {
    let h = start_with(SimConfig {
        start_ms: Some(T0),
        ..SimConfig::default()
    })
    .await;
    h.sim
        .set_webhooks(WebhookConfig {
            mode: DeliveryMode::EventBridge,
            api_version: Some(CURRENT.into()),
            ..WebhookConfig::default()
        })
        .unwrap();
    let pi = authorized(&h, "op-lapse").await;
    h.sim.take_due_webhooks();
    h.sim.advance(std::time::Duration::from_secs(8 * 24 * 3600));
    h.sim.expire_due();
    let read = |v: Option<&'static str>| {
        let req = h
            .client
            .get(format!("{}/v1/payment_intents/{pi}", h.base))
            .bearer_auth(DEFAULT_API_KEY);
        let req = match v {
            Some(v) => req.header("Stripe-Version", v),
            None => req,
        };
        async move { req.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    assert_eq!(read(None).await["cancellation_reason"], "automatic");
    assert_eq!(read(Some(PINNED)).await["cancellation_reason"], "automatic");
    assert_eq!(read(Some(CURRENT)).await["cancellation_reason"], "expired");
    // The account's default moved on: a request without the header answers in it.
    h.sim.set_api_version(ApiVersion::parse(CURRENT).unwrap());
    assert_eq!(read(None).await["cancellation_reason"], "expired");
    // The pinned account's lapse left its refund; the events speak the endpoint's version.
    assert_eq!(refunds_of(&h, &pi).await.len(), 1);
    let due = h.sim.take_due_webhooks();
    let canceled = due
        .iter()
        .find(|d| d.event_type == "payment_intent.canceled")
        .expect("the lapse's event");
    let event = canceled.event().unwrap();
    assert_eq!(event["api_version"], CURRENT);
    assert_eq!(event["data"]["object"]["cancellation_reason"], "expired");
    // An endpoint version that is not a version is refused; a request's too, with 400.
    let bad = WebhookConfig {
        api_version: Some("latest".into()),
        ..WebhookConfig::default()
    };
    assert!(h.sim.set_webhooks(bad).is_err());
    let r = h
        .client
        .get(format!("{}/v1/payment_intents/{pi}", h.base))
        .bearer_auth(DEFAULT_API_KEY)
        .header("Stripe-Version", "latest")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Invalid Stripe API version"));
}
