//! `POST /v1/payment_intents/{id}/cancel` with Stripe's rules (which statuses may be canceled,
//! `cancellation_reason`, the idempotency layer, `payment_intent.canceled`, faults, its own rate
//! limit), and a customer's later confirm of a declined intent, which a canceled intent refuses.

mod common;

use common::*;
use serde_json::Value;
use stripe_sim::{
    Answer, Capacity, CreateStart, DeliveryMode, FaultConfig, FaultKind, Outcome, SimConfig,
    StripeSim, WebhookConfig,
};

fn sim() -> StripeSim {
    StripeSim::new(SimConfig {
        start_ms: Some(1_800_000_000_000),
        ..SimConfig::default()
    })
}

fn answered(o: Outcome) -> Answer {
    match o {
        Outcome::Answered(a) => a,
        Outcome::Dropped => panic!("dropped"),
    }
}

fn json(a: &Answer) -> Value {
    serde_json::from_slice(&a.body).unwrap()
}

/// A PaymentIntent made by a keyed create with `pm`; its id (a decline's is in the 402).
fn intent(sim: &StripeSim, op: &str, pm: &str) -> String {
    let CreateStart::Done(o) =
        sim.create_in_process(Some(&format!("payment-op:{op}")), charge(op, pm))
    else {
        panic!("slow create")
    };
    let a = answered(o);
    let v = json(&a);
    match a.status {
        200 => v["id"].as_str().unwrap().to_owned(),
        402 => v["error"]["payment_intent"]["id"]
            .as_str()
            .unwrap()
            .to_owned(),
        s => panic!("create answered {s}: {v}"),
    }
}

fn reason(r: &str) -> Vec<(String, String)> {
    vec![("cancellation_reason".into(), r.into())]
}

fn cancel(sim: &StripeSim, id: &str, key: Option<&str>, form: &[(String, String)]) -> Answer {
    answered(sim.cancel_in_process(id, key, form))
}

fn status(sim: &StripeSim, id: &str) -> String {
    json(&sim.retrieve_in_process(id))["status"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_declined_intent_is_canceled_once_and_the_key_replays_the_answer() {
    let sim = sim();
    let pi = intent(&sim, "op-1", "pm_card_chargeDeclined");
    assert_eq!(status(&sim, &pi), "requires_payment_method");

    let first = cancel(
        &sim,
        &pi,
        Some("payment-op-cancel:op-1"),
        &reason("abandoned"),
    );
    assert_eq!(first.status, 200, "{:?}", json(&first));
    let v = json(&first);
    assert_eq!(v["status"], "canceled");
    assert_eq!(v["cancellation_reason"], "abandoned");
    assert_eq!(v["canceled_at"], 1_800_000_000);
    assert!(!first.replayed);
    assert_eq!(status(&sim, &pi), "canceled");

    // The same key and form: the first answer again, replayed.
    let again = cancel(
        &sim,
        &pi,
        Some("payment-op-cancel:op-1"),
        &reason("abandoned"),
    );
    assert_eq!((again.status, again.replayed), (200, true));
    assert_eq!(again.body, first.body);
    // The same key with another reason, or on another intent: a key misuse.
    let other = intent(&sim, "op-2", "pm_card_chargeDeclined");
    for (id, form) in [(&pi, reason("duplicate")), (&other, reason("abandoned"))] {
        let misuse = cancel(&sim, id, Some("payment-op-cancel:op-1"), &form);
        assert_eq!(misuse.status, 400);
        assert_eq!(json(&misuse)["error"]["type"], "idempotency_error");
    }
    assert_eq!(
        status(&sim, &other),
        "requires_payment_method",
        "not canceled"
    );
    // Without the key, a second cancel meets Stripe's state rule.
    let refused = cancel(&sim, &pi, None, &[]);
    assert_eq!(refused.status, 400);
    assert_eq!(
        json(&refused)["error"]["code"],
        "payment_intent_unexpected_state"
    );
    assert_eq!(sim.request_counts().cancel, 5);
}

#[test]
fn only_the_statuses_stripe_allows_are_canceled() {
    let sim = sim();
    let cases = [
        ("pm_card_chargeDeclined", true),     // requires_payment_method
        ("pm_card_sim_requiresAction", true), // requires_action
        ("pm_card_visa", false),              // succeeded
        ("pm_card_processing_succeeds", false),
    ];
    for (i, (pm, allowed)) in cases.iter().enumerate() {
        let pi = intent(&sim, &format!("op-{i}"), pm);
        let before = status(&sim, &pi);
        let key = format!("payment-op-cancel:op-{i}");
        let a = cancel(&sim, &pi, Some(&key), &reason("abandoned"));
        if *allowed {
            assert_eq!(a.status, 200, "{pm}");
            assert_eq!(status(&sim, &pi), "canceled", "{pm}");
        } else {
            assert_eq!(a.status, 400, "{pm}");
            let e = &json(&a)["error"];
            assert_eq!(e["code"], "payment_intent_unexpected_state", "{pm}");
            assert!(
                e["message"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("status of {before}")),
                "{e}"
            );
            assert_eq!(status(&sim, &pi), before, "{pm}: unchanged");
            // A refusal is not saved under the key: the same request is refused again, not
            // replayed.
            let again = cancel(&sim, &pi, Some(&key), &reason("abandoned"));
            assert_eq!((again.status, again.replayed), (400, false), "{pm}");
        }
    }
    // A canceled intent is not canceled again.
    let pi = intent(&sim, "op-x", "pm_card_chargeDeclined");
    assert_eq!(cancel(&sim, &pi, None, &[]).status, 200);
    assert_eq!(cancel(&sim, &pi, None, &[]).status, 400);
    // An unknown intent.
    let missing = cancel(&sim, "pi_doesNotExist", None, &[]);
    assert_eq!(missing.status, 404);
    assert_eq!(json(&missing)["error"]["code"], "resource_missing");
}

#[test]
fn cancellation_reason_is_validated_and_a_bad_one_changes_nothing() {
    let sim = sim();
    for (i, r) in stripe_sim::CANCELLATION_REASONS.iter().enumerate() {
        let pi = intent(&sim, &format!("op-{i}"), "pm_card_chargeDeclined");
        let a = cancel(&sim, &pi, None, &reason(r));
        assert_eq!(a.status, 200, "{r}");
        assert_eq!(json(&a)["cancellation_reason"], *r);
    }
    let pi = intent(&sim, "op-bad", "pm_card_chargeDeclined");
    for form in [
        reason("because"),
        vec![("amount".to_owned(), "5".to_owned())],
    ] {
        let a = cancel(&sim, &pi, Some("payment-op-cancel:op-bad"), &form);
        assert_eq!(a.status, 400, "{form:?}");
        let e = &json(&a)["error"];
        assert_eq!(e["param"], form[0].0.as_str(), "{e}");
        assert_eq!(status(&sim, &pi), "requires_payment_method");
    }
    // Validation failures are not saved under the key: a good request with it proceeds.
    let ok = cancel(
        &sim,
        &pi,
        Some("payment-op-cancel:op-bad"),
        &reason("abandoned"),
    );
    assert_eq!(ok.status, 200);
    // No reason at all is allowed, and none is recorded.
    let pi = intent(&sim, "op-none", "pm_card_chargeDeclined");
    let a = cancel(&sim, &pi, None, &[]);
    assert_eq!(a.status, 200);
    assert_eq!(json(&a)["cancellation_reason"], Value::Null);
}

#[test]
fn a_cancel_emits_payment_intent_canceled() {
    let sim = sim();
    sim.set_webhooks(WebhookConfig {
        mode: DeliveryMode::EventBridge,
        ..WebhookConfig::default()
    })
    .unwrap();
    let pi = intent(&sim, "op-1", "pm_card_chargeDeclined");
    sim.take_due_webhooks();
    assert_eq!(cancel(&sim, &pi, None, &reason("abandoned")).status, 200);
    let due = sim.take_due_webhooks();
    let types: Vec<&str> = due.iter().map(|d| d.event_type.as_str()).collect();
    assert_eq!(types, ["payment_intent.canceled"]);
    let event = due[0].event().unwrap();
    assert_eq!(event["data"]["object"]["id"], pi.as_str());
    assert_eq!(event["data"]["object"]["status"], "canceled");
    // A refused cancel emits nothing.
    assert_eq!(cancel(&sim, &pi, None, &[]).status, 400);
    assert!(sim.take_due_webhooks().is_empty());
}

#[test]
fn the_fault_engine_faults_cancels_like_creates() {
    let with = |kind: FaultKind| {
        let sim = sim();
        // Declined without a fault; the rate applies to the cancel (not to the retrieves that
        // check it).
        let pi = intent(&sim, "op-1", "pm_card_chargeDeclined");
        sim.set_faults(FaultConfig {
            rates: [(kind, 1.0)].into(),
            faults_on_reads: false,
            ..FaultConfig::default()
        });
        let out = sim.cancel_in_process(&pi, Some("payment-op-cancel:op-1"), &reason("abandoned"));
        (sim, pi, out)
    };
    // Before the idempotency layer: nothing done, nothing saved.
    for (kind, code) in [
        (FaultKind::RateLimit, 429),
        (FaultKind::ServerErrorBeforeCommit, 500),
        (FaultKind::KeyInUse, 409),
    ] {
        let (sim, pi, out) = with(kind);
        assert_eq!(answered(out).status, code, "{kind}");
        assert_eq!(status(&sim, &pi), "requires_payment_method", "{kind}");
        assert_eq!(sim.injected()[&kind], 1, "{kind}");
    }
    // After the cancel: it happened; the 500 is saved under the key, a dropped answer's 200 too.
    let (sim, pi, out) = with(FaultKind::ServerErrorAfterCommit);
    assert_eq!(answered(out).status, 500);
    assert_eq!(status(&sim, &pi), "canceled");
    sim.set_faults(FaultConfig::default());
    let replay = cancel(
        &sim,
        &pi,
        Some("payment-op-cancel:op-1"),
        &reason("abandoned"),
    );
    assert_eq!((replay.status, replay.replayed), (500, true));

    let (sim, pi, out) = with(FaultKind::DropAfterCommit);
    assert_eq!(out, Outcome::Dropped);
    assert_eq!(status(&sim, &pi), "canceled");
    sim.set_faults(FaultConfig::default());
    let replay = cancel(
        &sim,
        &pi,
        Some("payment-op-cancel:op-1"),
        &reason("abandoned"),
    );
    assert_eq!((replay.status, replay.replayed), (200, true));
    assert_eq!(json(&replay)["status"], "canceled");
    assert_eq!(sim.injected()[&FaultKind::DropAfterCommit], 1);
}

#[test]
fn cancels_have_their_own_rate_limit() {
    let sim = StripeSim::new(SimConfig {
        capacity: Capacity {
            cancel_per_sec: Some(1),
            ..Capacity::unlimited()
        },
        ..SimConfig::default()
    });
    let a = intent(&sim, "op-a", "pm_card_chargeDeclined");
    let b = intent(&sim, "op-b", "pm_card_chargeDeclined");
    assert_eq!(cancel(&sim, &a, None, &[]).status, 200);
    assert_eq!(cancel(&sim, &b, None, &[]).status, 429);
    assert_eq!(status(&sim, &b), "requires_payment_method");
    assert_eq!(sim.capacity_429s().cancel, 1);
    assert_eq!(sim.capacity_429s().create, 0);
}

#[test]
fn a_customer_confirms_a_declined_intent_unless_it_was_canceled() {
    let sim = sim();
    sim.set_webhooks(WebhookConfig {
        mode: DeliveryMode::EventBridge,
        ..WebhookConfig::default()
    })
    .unwrap();
    let declined = intent(&sim, "op-1", "pm_card_chargeDeclined");
    sim.take_due_webhooks();
    sim.confirm_as_customer(&declined).unwrap();
    let v = json(&sim.retrieve_in_process(&declined));
    assert_eq!(v["status"], "succeeded");
    assert_eq!(v["amount_received"], 1000);
    assert_eq!(v["last_payment_error"], Value::Null);
    let types: Vec<String> = sim
        .take_due_webhooks()
        .into_iter()
        .map(|d| d.event_type)
        .collect();
    assert_eq!(types, ["payment_intent.succeeded"]);
    // Paid: it can no longer be canceled, nor confirmed again.
    assert_eq!(cancel(&sim, &declined, None, &[]).status, 400);
    let again = sim.confirm_as_customer(&declined).unwrap_err();
    assert_eq!(again.code, Some("payment_intent_unexpected_state"));

    // Canceled first: the customer's confirm is refused and nothing is charged.
    let canceled = intent(&sim, "op-2", "pm_card_chargeDeclined");
    assert_eq!(cancel(&sim, &canceled, None, &[]).status, 200);
    sim.take_due_webhooks();
    let refused = sim.confirm_as_customer(&canceled).unwrap_err();
    assert_eq!(
        (refused.status, refused.code),
        (400, Some("payment_intent_unexpected_state"))
    );
    assert_eq!(status(&sim, &canceled), "canceled");
    assert!(sim.take_due_webhooks().is_empty());
    assert_eq!(
        sim.confirm_as_customer("pi_doesNotExist")
            .unwrap_err()
            .status,
        404
    );
}

#[tokio::test]
async fn cancel_and_confirm_over_http() {
    let h = start().await;
    let declined = h
        .create(
            Some("payment-op:op-h"),
            &charge("op-h", "pm_card_chargeDeclined"),
        )
        .await;
    assert_eq!(declined.status(), 402);
    let v: Value = declined.json().await.unwrap();
    let pi = v["error"]["payment_intent"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The customer's confirm, through the admin API, then our cancel is refused.
    let (code, body) = h
        .admin_post(&format!("payment_intents/{pi}/confirm"), "")
        .await;
    assert_eq!((code, body["status"].as_str()), (200, Some("succeeded")));
    let r = h
        .client
        .post(format!("{}/v1/payment_intents/{pi}/cancel", h.base))
        .bearer_auth(stripe_sim::DEFAULT_API_KEY)
        .header("Idempotency-Key", "payment-op-cancel:op-h")
        .form(&reason("abandoned"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "payment_intent_unexpected_state");
    // Another declined intent: canceled over HTTP, then the customer's confirm is refused.
    let declined = h
        .create(
            Some("payment-op:op-i"),
            &charge("op-i", "pm_card_chargeDeclined"),
        )
        .await;
    let v: Value = declined.json().await.unwrap();
    let pi = v["error"]["payment_intent"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = h
        .client
        .post(format!("{}/v1/payment_intents/{pi}/cancel", h.base))
        .bearer_auth(stripe_sim::DEFAULT_API_KEY)
        .form(&reason("abandoned"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (code, body) = h
        .admin_post(&format!("payment_intents/{pi}/confirm"), "")
        .await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"]["code"], "payment_intent_unexpected_state");
    assert_eq!(h.sim.request_counts().cancel, 2);
    // The capacity's cancel limit is set and shown through the admin API too.
    let (code, c) = h.admin_post("capacity", r#"{"cancel_per_sec": 3}"#).await;
    assert_eq!((code, &c["cancel_per_sec"]), (200, &Value::from(3)));
}
