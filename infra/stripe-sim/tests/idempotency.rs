//! The idempotency layer over real HTTP.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;
use stripe_sim::{FaultConfig, FaultKind};

#[tokio::test]
async fn same_key_same_params_replays_the_first_response() {
    let h = start().await;
    let r1 = h.create(Some("key-1"), &visa("op")).await;
    assert_eq!(r1.status(), 200);
    assert_eq!(header(&r1, "idempotency-key"), Some("key-1"));
    let rid1 = header(&r1, "request-id").unwrap().to_string();
    let b1 = r1.text().await.unwrap();

    // Parameter order does not matter: params compare as a sorted multimap.
    let mut reordered = visa("op");
    reordered.reverse();
    h.sim.advance(Duration::from_secs(3600));
    let r2 = h.create(Some("key-1"), &reordered).await;
    assert_eq!(r2.status(), 200);
    assert!(replayed(&r2));
    assert_ne!(header(&r2, "request-id").unwrap(), rid1);
    assert_eq!(r2.text().await.unwrap(), b1, "byte-identical replay");

    let ledger = h.sim.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(h.sim.request_counts().create, 2);
}

#[tokio::test]
async fn same_key_different_params_is_an_idempotency_error_and_not_saved() {
    let h = start().await;
    h.create(Some("key-1"), &visa("op")).await;
    let mut other = visa("op");
    other[0].1 = "2000".into();
    let r = h.create(Some("key-1"), &other).await;
    assert_eq!(r.status(), 400);
    assert_eq!(header(&r, "stripe-should-retry"), Some("false"));
    assert!(!replayed(&r));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "idempotency_error");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Keys for idempotent requests can only be used with the same parameters"));

    // The original is still what the key holds.
    let r = h.create(Some("key-1"), &visa("op")).await;
    assert!(replayed(&r));
    let ledger = h.sim.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].amount, 1000);
}

#[tokio::test]
async fn concurrent_same_key_during_latency_is_409_and_creates_once() {
    let h = start().await;
    h.sim.set_faults(FaultConfig {
        latency: Duration::from_millis(1500),
        script: vec![FaultKind::Latency],
        ..FaultConfig::default()
    });
    let slow = {
        let client = h.client.clone();
        let base = h.base.clone();
        tokio::spawn(async move {
            client
                .post(format!("{base}/v1/payment_intents"))
                .bearer_auth("sk_test_charge_once")
                .header("Idempotency-Key", "busy")
                .form(&visa("op"))
                .send()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    let r = h.create(Some("busy"), &visa("op")).await;
    assert_eq!(r.status(), 409);
    assert_eq!(header(&r, "stripe-should-retry"), Some("true"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["code"], "idempotency_key_in_use");
    assert!(
        h.sim.ledger().is_empty(),
        "nothing committed while in flight"
    );

    let first = slow.await.unwrap();
    assert_eq!(first.status(), 200);
    let pi: Value = first.json().await.unwrap();
    let again: Value = h
        .create(Some("busy"), &visa("op"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["id"], pi["id"]);
    let ledger = h.sim.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(h.sim.injected()[&FaultKind::Latency], 1);
}

#[tokio::test]
async fn keys_are_pruned_after_24_hours_of_simulated_time() {
    let h = start().await;
    let a: Value = h.create(Some("k"), &visa("op")).await.json().await.unwrap();
    h.sim.advance(Duration::from_secs(24 * 3600 - 1));
    let r = h.create(Some("k"), &visa("op")).await;
    assert!(replayed(&r));
    h.sim.advance(Duration::from_secs(1));
    let r = h.create(Some("k"), &visa("op")).await;
    assert_eq!(r.status(), 200);
    assert!(!replayed(&r));
    let b: Value = r.json().await.unwrap();
    assert_ne!(a["id"], b["id"]);
    let ledger = h.sim.ledger();
    assert_eq!(ledger.len(), 2);
    assert!(ledger
        .iter()
        .all(|e| e.idempotency_key.as_deref() == Some("k")));
}

#[tokio::test]
async fn requests_without_a_key_are_not_idempotent() {
    let h = start().await;
    let a: Value = h.create(None, &visa("op")).await.json().await.unwrap();
    let b: Value = h.create(None, &visa("op")).await.json().await.unwrap();
    assert_ne!(a["id"], b["id"]);
    let ledger = h.sim.ledger();
    assert_eq!(ledger.len(), 2);
    assert!(ledger.iter().all(|e| e.idempotency_key.is_none()));
}

#[tokio::test]
async fn overlong_key_is_rejected() {
    let h = start().await;
    let long = "k".repeat(256);
    let r = h.create(Some(&long), &visa("op")).await;
    assert_eq!(r.status(), 400);
    let ok = "k".repeat(255);
    assert_eq!(h.create(Some(&ok), &visa("op")).await.status(), 200);
    assert_eq!(h.sim.ledger().len(), 1);
}

/// A replay answers what the first answer said, byte for byte, also after the PaymentIntent
/// changed since: a `processing` one settled, a status forced, a decline (the engine keeps a
/// create's answer as its PaymentIntent and renders it again until that changes).
#[test]
fn a_replay_is_the_first_answer_after_the_payment_intent_changed() {
    use stripe_sim::{CreateStart, Outcome, SimConfig, StripeSim};
    let sim = StripeSim::new(SimConfig::default());
    let create = |key: &str, form: &[(String, String)]| match sim
        .create_in_process(Some(key), form.to_vec())
    {
        CreateStart::Done(Outcome::Answered(a)) => a,
        _ => panic!("no answer"),
    };
    let id_of = |body: &[u8]| -> String {
        let v: Value = serde_json::from_slice(body).unwrap();
        let pi = if v["error"].is_object() {
            &v["error"]["payment_intent"]
        } else {
            &v
        };
        pi["id"].as_str().unwrap().to_owned()
    };
    let status_of = |body: &[u8]| -> String {
        let v: Value = serde_json::from_slice(body).unwrap();
        v["status"].as_str().unwrap().to_owned()
    };

    let processing = charge("op-p", "pm_card_processing_succeeds");
    let first = create("key-p", &processing);
    assert_eq!(status_of(&first.body), "processing");
    sim.advance(Duration::from_secs(601));
    let now = sim.retrieve_in_process(&id_of(&first.body));
    assert_eq!(status_of(&now.body), "succeeded", "settled since");
    let again = create("key-p", &processing);
    assert!(again.replayed);
    assert_eq!(again.body, first.body, "the first answer: processing");

    let visa = visa("op-v");
    let first = create("key-v", &visa);
    assert!(sim.set_status(&id_of(&first.body), "canceled"));
    let again = create("key-v", &visa);
    assert!(again.replayed);
    assert_eq!(again.body, first.body, "the first answer: succeeded");

    let declined = charge("op-d", "pm_card_chargeDeclined");
    let first = create("key-d", &declined);
    assert_eq!(first.status, 402);
    let again = create("key-d", &declined);
    assert!(again.replayed);
    assert_eq!((again.status, &again.body), (402, &first.body));
    assert!(sim.set_status(&id_of(&first.body), "canceled"));
    let again = create("key-d", &declined);
    assert_eq!(again.body, first.body, "the first answer: declined");
    assert_eq!(sim.ledger().len(), 3);
}
