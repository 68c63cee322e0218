//! The Refunds API over real HTTP: partial refunds up to the charge, Stripe's refusals (each
//! with its accepted twin), the idempotency layer, lists, cancel, the pending and late-failing
//! paths on the simulated clock, events, faults and capacity; and the in-process calls.

mod common;

use std::time::Duration;

use common::*;
use reqwest::Response;
use serde_json::Value;
use stripe_sim::{
    Capacity, CreateStart, DeliveryMode, FaultConfig, FaultKind, Outcome, SimConfig, StripeSim,
    WebhookConfig, DEFAULT_API_KEY, KEY_TTL_MS,
};

fn form(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A refund of `pi` (`amount`: `None` for all that is left).
fn refund_of(pi: &str, amount: Option<i64>) -> Vec<(String, String)> {
    let mut f = form(&[("payment_intent", pi)]);
    if let Some(a) = amount {
        f.push(("amount".into(), a.to_string()));
    }
    f
}

async fn paid(h: &Harness, op: &str, pm: &str) -> String {
    let r = h.create(None, &charge(op, pm)).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["status"], "succeeded", "{v}");
    v["id"].as_str().unwrap().to_owned()
}

async fn try_refund(
    h: &Harness,
    key: Option<&str>,
    f: &[(String, String)],
) -> reqwest::Result<Response> {
    let mut req = h
        .client
        .post(format!("{}/v1/refunds", h.base))
        .bearer_auth(DEFAULT_API_KEY)
        .form(f);
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    req.send().await
}

async fn refund(h: &Harness, key: Option<&str>, f: &[(String, String)]) -> (u16, Value) {
    let r = try_refund(h, key, f).await.expect("http response");
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn post(h: &Harness, path: &str) -> (u16, Value) {
    let r = h
        .client
        .post(format!("{}{path}", h.base))
        .bearer_auth(DEFAULT_API_KEY)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn get(h: &Harness, path: &str) -> (u16, Value) {
    let r = h.get(path).await;
    (r.status().as_u16(), r.json().await.unwrap())
}

/// The charge of `pi`, through `expand[]=latest_charge`.
async fn charge_of(h: &Harness, pi: &str) -> Value {
    let (s, v) = get(
        h,
        &format!("/v1/payment_intents/{pi}?expand%5B%5D=latest_charge"),
    )
    .await;
    assert_eq!(s, 200);
    v["latest_charge"].clone()
}

#[tokio::test]
async fn partial_refunds_repeat_until_the_charge_is_fully_refunded() {
    let h = start().await;
    let pi = paid(&h, "op-1", "pm_card_visa").await;
    let mut f = refund_of(&pi, Some(300));
    f.push(("reason".into(), "requested_by_customer".into()));
    f.push(("metadata[operation_id]".into(), "op-r1".into()));
    let (s, r1) = refund(&h, None, &f).await;
    assert_eq!(s, 200, "{r1}");
    assert!(r1["id"].as_str().unwrap().starts_with("re_"));
    assert_eq!(r1["object"], "refund");
    assert_eq!(r1["amount"], 300);
    assert_eq!(r1["currency"], "usd");
    assert_eq!(r1["payment_intent"], pi.as_str());
    assert!(r1["charge"].as_str().unwrap().starts_with("ch_"));
    assert_eq!(r1["status"], "succeeded");
    assert_eq!(r1["reason"], "requested_by_customer");
    assert_eq!(r1["metadata"]["operation_id"], "op-r1");
    // Keys Stripe's spec does not let be null are absent, not null.
    for key in [
        "failure_balance_transaction",
        "failure_reason",
        "next_action",
        "pending_reason",
    ] {
        assert!(r1.get(key).is_none(), "{key} absent: {r1}");
    }
    assert!(
        r1.get("receipt_number").is_some_and(Value::is_null),
        "nullable: kept, null"
    );
    assert!(r1["created"].as_i64().unwrap() > 0);
    let charge = charge_of(&h, &pi).await;
    assert_eq!(charge["id"], r1["charge"]);
    assert_eq!(
        (
            charge["amount_refunded"].as_i64(),
            charge["refunded"].as_bool()
        ),
        (Some(300), Some(false))
    );

    assert_eq!(refund(&h, None, &refund_of(&pi, Some(300))).await.0, 200);
    let (s, rest) = refund(&h, None, &refund_of(&pi, None)).await;
    assert_eq!(
        (s, rest["amount"].as_i64()),
        (200, Some(400)),
        "the default is what is left"
    );
    let charge = charge_of(&h, &pi).await;
    assert_eq!(
        (
            charge["amount_refunded"].as_i64(),
            charge["refunded"].as_bool()
        ),
        (Some(1000), Some(true))
    );
    assert_eq!(h.sim.amount_refunded(&pi), Some(1000));

    for amount in [Some(1), None] {
        let (s, e) = refund(&h, None, &refund_of(&pi, amount)).await;
        assert_eq!(s, 400);
        assert_eq!(e["error"]["type"], "invalid_request_error");
        assert_eq!(e["error"]["code"], "charge_already_refunded");
    }
    assert_eq!(h.sim.refunds_created(), 3);
    let ledger = h.admin_get("ledger").await;
    let rows = ledger["refunds"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(
        (rows[0]["id"].as_str(), rows[0]["operation_id"].as_str()),
        (r1["id"].as_str(), Some("op-r1"))
    );
    assert_eq!(h.sim.refund_ledger()[2].amount, 400);
    assert_eq!(h.admin_get("stats").await["refunds"], 3);
}

#[tokio::test]
async fn an_over_refund_is_refused_with_nothing_changed_and_its_twin_accepted() {
    let h = start().await;
    let pi = paid(&h, "op-1", "pm_card_visa").await;
    assert_eq!(refund(&h, None, &refund_of(&pi, Some(600))).await.0, 200);
    let (s, e) = refund(&h, Some("k-over"), &refund_of(&pi, Some(401))).await;
    assert_eq!(s, 400);
    assert_eq!(e["error"]["code"], "amount_too_large");
    assert_eq!(e["error"]["param"], "amount");
    assert_eq!(h.sim.refunds_created(), 1, "nothing created");
    assert_eq!(h.sim.amount_refunded(&pi), Some(600));
    // The refusal was not saved under its key: the twin, within what is left, is accepted.
    let (s, twin) = refund(&h, Some("k-over"), &refund_of(&pi, Some(400))).await;
    assert_eq!((s, twin["amount"].as_i64()), (200, Some(400)), "{twin}");
    assert_eq!(h.sim.amount_refunded(&pi), Some(1000));
}

#[tokio::test]
async fn refunds_of_unpaid_unknown_intents_and_bad_amounts_are_refused() {
    let h = start().await;
    let pending = {
        let r = h
            .create(None, &charge("op-a", "pm_card_sim_requiresAction"))
            .await;
        let v: Value = r.json().await.unwrap();
        v["id"].as_str().unwrap().to_owned()
    };
    let (s, e) = refund(&h, None, &refund_of(&pending, None)).await;
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (400, Some("payment_intent_unexpected_state"))
    );
    let uncaptured = paid(&h, "op-b", "pm_card_visa").await;
    assert!(h.sim.set_status(&uncaptured, "requires_capture"));
    let (s, e) = refund(&h, None, &refund_of(&uncaptured, None)).await;
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (400, Some("payment_intent_unexpected_state"))
    );
    assert!(h.sim.set_status(&uncaptured, "canceled"));
    assert_eq!(refund(&h, None, &refund_of(&uncaptured, None)).await.0, 400);

    let (s, e) = refund(&h, None, &refund_of("pi_nope", None)).await;
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (404, Some("resource_missing"))
    );
    assert_eq!(e["error"]["param"], "payment_intent");
    let good = paid(&h, "op-c", "pm_card_visa").await;
    for bad in ["0", "-5", "1.5"] {
        let (s, e) = refund(
            &h,
            None,
            &form(&[("payment_intent", &good), ("amount", bad)]),
        )
        .await;
        assert_eq!(
            (s, e["error"]["param"].as_str()),
            (400, Some("amount")),
            "{bad}"
        );
    }
    let (s, e) = refund(&h, None, &form(&[("amount", "5")])).await;
    assert_eq!(
        (s, e["error"]["param"].as_str()),
        (400, Some("payment_intent"))
    );
    assert_eq!(h.sim.refunds_created(), 0);
    // The twin: the same intent, paid, a positive amount.
    assert_eq!(refund(&h, None, &refund_of(&good, Some(1))).await.0, 200);
}

#[tokio::test]
async fn the_same_key_replays_and_other_params_are_an_idempotency_error() {
    let h = start().await;
    let pi = paid(&h, "op-1", "pm_card_visa").await;
    let first = try_refund(&h, Some("rk"), &refund_of(&pi, Some(100)))
        .await
        .unwrap();
    assert!(!replayed(&first));
    let first = first.text().await.unwrap();
    let again = try_refund(&h, Some("rk"), &refund_of(&pi, Some(100)))
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    assert!(replayed(&again));
    assert_eq!(again.text().await.unwrap(), first, "byte for byte");
    assert_eq!(h.sim.refunds_created(), 1);

    let (s, e) = refund(&h, Some("rk"), &refund_of(&pi, Some(200))).await;
    assert_eq!(
        (s, e["error"]["type"].as_str()),
        (400, Some("idempotency_error"))
    );
    // A key is bound to its endpoint: the refund's key on a PaymentIntent create is refused.
    assert_eq!(h.create(Some("rk"), &visa("op-2")).await.status(), 400);
    assert_eq!(h.sim.refunds_created(), 1);

    h.sim.advance(Duration::from_millis(KEY_TTL_MS as u64));
    let (s, v) = refund(&h, Some("rk"), &refund_of(&pi, Some(100))).await;
    assert_eq!(s, 200);
    let first: Value = serde_json::from_str(&first).unwrap();
    assert_ne!(v["id"], first["id"], "an expired key refunds anew");
    assert_eq!(h.sim.amount_refunded(&pi), Some(200));
}

#[tokio::test]
async fn refunds_list_by_payment_intent_newest_first_in_pages() {
    let h = start().await;
    let pi = paid(&h, "op-1", "pm_card_visa").await;
    let other = paid(&h, "op-2", "pm_card_visa").await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        let (_, v) = refund(&h, None, &refund_of(&pi, Some(100))).await;
        ids.push(v["id"].as_str().unwrap().to_owned());
        refund(&h, None, &refund_of(&other, Some(1))).await;
    }
    ids.reverse();
    let page = |after: Option<&str>| {
        let mut q = format!("/v1/refunds?payment_intent={pi}&limit=2");
        if let Some(a) = after {
            q.push_str(&format!("&starting_after={a}"));
        }
        q
    };
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for expect_more in [true, true, false] {
        let (s, v) = get(&h, &page(after.as_deref())).await;
        assert_eq!(s, 200);
        assert_eq!(
            (v["object"].as_str(), v["url"].as_str()),
            (Some("list"), Some("/v1/refunds"))
        );
        assert_eq!(v["has_more"], expect_more);
        for r in v["data"].as_array().unwrap() {
            assert_eq!(r["payment_intent"], pi.as_str());
            seen.push(r["id"].as_str().unwrap().to_owned());
        }
        after = seen.last().cloned();
    }
    assert_eq!(
        seen, ids,
        "newest first, every refund once, none of the other intent's"
    );
    let (s, v) = get(&h, "/v1/refunds?limit=100").await;
    assert_eq!((s, v["data"].as_array().unwrap().len()), (200, 10));
    let (s, _) = get(&h, "/v1/refunds?limit=0").await;
    assert_eq!(s, 400);
    let (s, e) = get(&h, &format!("/v1/refunds/{}", ids[0])).await;
    assert_eq!((s, e["id"].as_str()), (200, Some(ids[0].as_str())));
    let (s, e) = get(&h, "/v1/refunds/re_nope").await;
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (404, Some("resource_missing"))
    );
}

#[tokio::test]
async fn only_a_requires_action_refund_can_be_canceled() {
    let h = start().await;
    let pi = paid(&h, "op-1", "pm_card_sim_refundRequiresAction").await;
    let (s, r) = refund(&h, None, &refund_of(&pi, None)).await;
    assert_eq!((s, r["status"].as_str()), (200, Some("requires_action")));
    assert_eq!(r["next_action"]["type"], "display_details");
    assert_eq!(h.sim.amount_refunded(&pi), Some(0), "no money moved yet");
    let (s, e) = refund(&h, None, &refund_of(&pi, Some(1))).await;
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (400, Some("charge_already_refunded")),
        "held"
    );

    let id = r["id"].as_str().unwrap();
    let (s, c) = post(&h, &format!("/v1/refunds/{id}/cancel")).await;
    assert_eq!((s, c["status"].as_str()), (200, Some("canceled")));
    let (s, e) = post(&h, &format!("/v1/refunds/{id}/cancel")).await;
    assert_eq!(
        (s, e["error"]["type"].as_str()),
        (400, Some("invalid_request_error"))
    );
    assert_eq!(
        get(&h, &format!("/v1/refunds/{id}")).await.1["status"],
        "canceled"
    );

    // The cancel gave the amount back; a succeeded refund cannot be canceled.
    let visa_pi = paid(&h, "op-2", "pm_card_visa").await;
    let (_, done) = refund(&h, None, &refund_of(&visa_pi, Some(10))).await;
    let done = done["id"].as_str().unwrap();
    let (s, e) = post(&h, &format!("/v1/refunds/{done}/cancel")).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(
        get(&h, &format!("/v1/refunds/{done}")).await.1["status"],
        "succeeded"
    );
    assert_eq!(post(&h, "/v1/refunds/re_nope/cancel").await.0, 404);
    let (s, again) = refund(&h, None, &refund_of(&pi, None)).await;
    assert_eq!(
        (s, again["amount"].as_i64()),
        (200, Some(1000)),
        "the canceled amount is free"
    );
}

fn events(sim: &StripeSim) -> Vec<(String, Value)> {
    sim.take_due_webhooks()
        .iter()
        .map(|d| {
            (
                d.event_type.clone(),
                d.event().unwrap()["data"]["object"].clone(),
            )
        })
        .collect()
}

fn eventbridge(sim: &StripeSim) {
    sim.set_webhooks(WebhookConfig {
        mode: DeliveryMode::EventBridge,
        ..WebhookConfig::default()
    })
    .unwrap();
}

#[tokio::test]
async fn a_refund_fails_late_and_the_money_comes_back() {
    let h = start_with(SimConfig {
        refund_settle: Duration::from_secs(120),
        ..SimConfig::default()
    })
    .await;
    eventbridge(&h.sim);
    let pi = paid(&h, "op-1", "pm_card_refundFail").await;
    events(&h.sim);
    let (s, r) = refund(&h, None, &refund_of(&pi, None)).await;
    assert_eq!((s, r["status"].as_str()), (200, Some("succeeded")));
    let now = events(&h.sim);
    let kinds: Vec<&str> = now.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["refund.created", "charge.refunded"]);
    assert_eq!(now[0].1["id"], r["id"]);
    let charge = &now[1].1;
    assert_eq!(
        (charge["object"].as_str(), charge["payment_intent"].as_str()),
        (Some("charge"), Some(pi.as_str()))
    );
    assert_eq!(
        (
            charge["amount_refunded"].as_i64(),
            charge["refunded"].as_bool()
        ),
        (Some(1000), Some(true))
    );
    assert_eq!(h.sim.amount_refunded(&pi), Some(1000));

    let id = r["id"].as_str().unwrap();
    h.sim.advance(Duration::from_secs(119));
    assert_eq!(
        get(&h, &format!("/v1/refunds/{id}")).await.1["status"],
        "succeeded"
    );
    h.sim.advance(Duration::from_secs(1));
    let (_, failed) = get(&h, &format!("/v1/refunds/{id}")).await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["failure_reason"], "expired_or_canceled_card");
    assert!(failed["failure_balance_transaction"]
        .as_str()
        .unwrap()
        .starts_with("txn_"));
    assert_eq!(h.sim.amount_refunded(&pi), Some(0), "the money is back");
    assert_eq!(charge_of(&h, &pi).await["amount_refunded"], 0);
    let later = events(&h.sim);
    let kinds: Vec<&str> = later.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        ["refund.updated", "refund.failed", "charge.refund.updated"]
    );
    assert!(later
        .iter()
        .all(|(_, o)| o["status"] == "failed" && o["id"] == id));
    assert_eq!(
        later[0].1["failure_balance_transaction"], failed["failure_balance_transaction"],
        "the event and the refund name the same balance transaction"
    );
    // What came back may be refunded again.
    assert_eq!(refund(&h, None, &refund_of(&pi, None)).await.0, 200);
}

#[tokio::test]
async fn a_pending_refund_succeeds_on_the_simulated_clock() {
    let h = start().await;
    h.sim.set_refund_settle(Duration::from_secs(60));
    eventbridge(&h.sim);
    let pi = paid(&h, "op-1", "pm_card_pendingRefund").await;
    events(&h.sim);
    let (_, r) = refund(&h, None, &refund_of(&pi, Some(250))).await;
    assert_eq!(
        (r["status"].as_str(), r["pending_reason"].as_str()),
        (Some("pending"), Some("processing"))
    );
    assert_eq!(
        h.sim.amount_refunded(&pi),
        Some(250),
        "pending counts as refunded"
    );
    let id = r["id"].as_str().unwrap();
    h.sim.advance(Duration::from_secs(59));
    let list = get(&h, &format!("/v1/refunds?payment_intent={pi}")).await.1;
    assert_eq!(list["data"][0]["status"], "pending");
    h.sim.advance(Duration::from_secs(1));
    let (_, done) = get(&h, &format!("/v1/refunds/{id}")).await;
    assert_eq!(
        (done["status"].as_str(), done["pending_reason"].as_str()),
        (Some("succeeded"), None)
    );
    let kinds: Vec<String> = events(&h.sim).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        kinds,
        [
            "refund.created",
            "charge.refunded",
            "refund.updated",
            "charge.refund.updated"
        ]
    );
}

#[tokio::test]
async fn a_dropped_refund_was_made_and_its_key_replays_it() {
    let h = start().await;
    let pi = paid(&h, "op-1", "pm_card_visa").await;
    h.sim.push_script([FaultKind::DropAfterCommit]);
    let err = try_refund(&h, Some("k"), &refund_of(&pi, Some(100)))
        .await
        .expect_err("no HTTP response must arrive");
    assert!(err.status().is_none());
    assert_eq!(
        h.sim.injected()[&FaultKind::DropAfterCommit],
        1,
        "the fault happened"
    );
    assert_eq!(h.sim.refunds_created(), 1, "committed before the drop");
    let r = try_refund(&h, Some("k"), &refund_of(&pi, Some(100)))
        .await
        .unwrap();
    assert!(replayed(&r));
    assert_eq!(h.sim.refunds_created(), 1);
    assert_eq!(h.sim.amount_refunded(&pi), Some(100));

    h.sim.push_script([
        FaultKind::ServerErrorBeforeCommit,
        FaultKind::ServerErrorAfterCommit,
    ]);
    let (s, _) = refund(&h, Some("k2"), &refund_of(&pi, Some(100))).await;
    assert_eq!(
        (s, h.sim.refunds_created()),
        (500, 1),
        "before commit: nothing made"
    );
    let (s, _) = refund(&h, Some("k2"), &refund_of(&pi, Some(100))).await;
    assert_eq!(
        (s, h.sim.refunds_created()),
        (500, 2),
        "after commit: made, 500 saved"
    );
    let r = try_refund(&h, Some("k2"), &refund_of(&pi, Some(100)))
        .await
        .unwrap();
    assert_eq!((r.status().as_u16(), replayed(&r)), (500, true));
    let injected = h.sim.injected();
    assert_eq!(injected[&FaultKind::ServerErrorBeforeCommit], 1);
    assert_eq!(injected[&FaultKind::ServerErrorAfterCommit], 1);
    assert_eq!(h.sim.amount_refunded(&pi), Some(200));
}

/// A `latency` fault holds a refund create, its key in flight (a same-key retry meanwhile is a
/// `409`), then makes it; a refund cancel meets `drop_after_commit` at its rate and is canceled.
#[tokio::test]
async fn latency_holds_the_key_and_a_dropped_cancel_still_cancels() {
    let h = start().await;
    let pi = paid(&h, "op-1", "pm_card_sim_refundRequiresAction").await;
    h.sim.set_faults(FaultConfig {
        latency: Duration::from_millis(400),
        script: vec![FaultKind::Latency],
        ..FaultConfig::default()
    });
    let slow = {
        let f = refund_of(&pi, Some(100));
        let h2 = (h.client.clone(), h.base.clone());
        tokio::spawn(async move {
            h2.0.post(format!("{}/v1/refunds", h2.1))
                .bearer_auth(DEFAULT_API_KEY)
                .header("Idempotency-Key", "slow")
                .form(&f)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (s, e) = refund(&h, Some("slow"), &refund_of(&pi, Some(100))).await;
    assert_eq!(
        (s, e["error"]["code"].as_str()),
        (409, Some("idempotency_key_in_use"))
    );
    assert_eq!(slow.await.unwrap(), 200);
    assert_eq!(
        h.sim.injected()[&FaultKind::Latency],
        1,
        "the fault happened"
    );
    assert_eq!(h.sim.refunds_created(), 1);

    let id = h.sim.refund_ledger()[0].id.clone();
    h.sim.set_faults(FaultConfig {
        rates: [(FaultKind::DropAfterCommit, 1.0)].into(),
        ..FaultConfig::default()
    });
    let dropped = h
        .client
        .post(format!("{}/v1/refunds/{id}/cancel", h.base))
        .bearer_auth(DEFAULT_API_KEY)
        .send()
        .await;
    assert!(dropped.is_err(), "no answer");
    assert_eq!(h.sim.injected()[&FaultKind::DropAfterCommit], 1);
    h.sim.set_faults(FaultConfig::default());
    assert_eq!(
        get(&h, &format!("/v1/refunds/{id}")).await.1["status"],
        "canceled"
    );
}

#[tokio::test]
async fn refunds_have_their_own_rate_limit() {
    let h = start_with(SimConfig {
        capacity: Capacity {
            refund_per_sec: Some(1),
            refund_read_per_sec: Some(1),
            ..Capacity::unlimited()
        },
        ..SimConfig::default()
    })
    .await;
    let pi = paid(&h, "op-1", "pm_card_visa").await;
    let pi2 = paid(&h, "op-2", "pm_card_visa").await;
    assert_eq!(refund(&h, None, &refund_of(&pi, Some(1))).await.0, 200);
    let r = try_refund(&h, Some("k"), &refund_of(&pi, Some(1)))
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(
        header(&r, "stripe-rate-limited-reason"),
        Some("endpoint-rate")
    );
    assert_eq!(h.sim.capacity_429s().refund, 1, "counted");
    assert_eq!(h.sim.refunds_created(), 1);
    // PaymentIntent creates do not share the refunds' bucket; reads have their own.
    assert_eq!(h.create(None, &visa("op-3")).await.status(), 200);
    assert_eq!(
        get(&h, &format!("/v1/refunds?payment_intent={pi2}"))
            .await
            .0,
        200
    );
    assert_eq!(get(&h, "/v1/refunds").await.0, 429);
    assert_eq!(h.sim.capacity_429s().refund_read, 1);
    h.sim.advance(Duration::from_secs(1));
    assert_eq!(
        refund(&h, Some("k"), &refund_of(&pi, Some(1))).await.0,
        200,
        "refilled"
    );
    let counts = h.sim.request_counts();
    assert_eq!((counts.refund, counts.refund_read), (3, 2));
}

#[test]
fn the_refund_calls_work_in_process() {
    let sim = StripeSim::new(SimConfig::default());
    let created =
        match sim.create_in_process(None, charge("op-1", "pm_card_sim_refundRequiresAction")) {
            CreateStart::Done(Outcome::Answered(a)) => a,
            _ => panic!("a plain create answers at once"),
        };
    let pi: Value = serde_json::from_slice(&created.body).unwrap();
    let pi = pi["id"].as_str().unwrap();
    let refund = match sim.refund_in_process(Some("rk"), &refund_of(pi, Some(400))) {
        CreateStart::Done(Outcome::Answered(a)) => a,
        _ => panic!("no fault: answered at once"),
    };
    assert_eq!(refund.status, 200);
    let r: Value = serde_json::from_slice(&refund.body).unwrap();
    let id = r["id"].as_str().unwrap();
    assert_eq!(sim.retrieve_refund_in_process(id).body, refund.body);
    let list = sim.list_refunds_in_process(Some(pi), Some(1), None);
    let list: Value = serde_json::from_slice(&list.body).unwrap();
    assert_eq!(
        (list["data"][0]["id"].as_str(), list["has_more"].as_bool()),
        (Some(id), Some(false))
    );
    match sim.cancel_refund_in_process(id, None, &[]) {
        Outcome::Answered(a) => assert_eq!(a.status, 200),
        Outcome::Dropped => panic!("no fault"),
    }
    // A latency fault hands the refund back, its key in flight, to complete later.
    sim.push_script([FaultKind::Latency]);
    let slow = match sim.refund_in_process(Some("rk2"), &refund_of(pi, Some(1))) {
        CreateStart::Slow(s) => s,
        CreateStart::Done(_) => panic!("the latency fault"),
    };
    assert!(slow.is_latency_fault());
    match sim.refund_in_process(Some("rk2"), &refund_of(pi, Some(1))) {
        CreateStart::Done(Outcome::Answered(a)) => assert_eq!(a.status, 409),
        _ => panic!("the key is in flight"),
    }
    assert_eq!(sim.refunds_created(), 1);
    match slow.complete() {
        Outcome::Answered(a) => {
            let r: Value = serde_json::from_slice(&a.body).unwrap();
            assert_eq!(
                (a.status, r["status"].as_str()),
                (200, Some("requires_action"))
            );
        }
        Outcome::Dropped => panic!("no drop"),
    }
    assert_eq!(sim.refunds_created(), 2);
    assert_eq!(sim.injected()[&FaultKind::Latency], 1);
}

/// The id in an in-process call's answer (a 200).
fn answered_id(start: CreateStart) -> String {
    let CreateStart::Done(Outcome::Answered(a)) = start else {
        panic!("no fault: answered at once");
    };
    assert_eq!(a.status, 200);
    let body: Value = serde_json::from_slice(&a.body).unwrap();
    body["id"].as_str().unwrap().to_owned()
}

#[test]
fn refunds_awaiting_action_are_the_ledger_s_waiting_ones_created_by_then_oldest_first() {
    let sim = StripeSim::new(SimConfig::default());
    let refund_paid_with = |op: &str, pm: &str| {
        let pi = answered_id(sim.create_in_process(None, charge(op, pm)));
        answered_id(sim.refund_in_process(None, &refund_of(&pi, None)))
    };
    let waits = "pm_card_sim_refundRequiresAction";
    let a = refund_paid_with("op-a", waits);
    refund_paid_with("op-visa", "pm_card_visa");
    sim.advance(Duration::from_secs(1));
    let b = refund_paid_with("op-b", waits);
    sim.advance(Duration::from_secs(1));
    let c = refund_paid_with("op-c", waits);
    match sim.cancel_refund_in_process(&b, None, &[]) {
        Outcome::Answered(r) => assert_eq!(r.status, 200),
        Outcome::Dropped => panic!("no fault"),
    }
    let ledger = sim.refund_ledger();
    let created = |id: &str| ledger.iter().find(|r| r.id == id).unwrap().created_ms;
    let waiting = |by: i64| -> Vec<String> {
        let found = sim.refunds_awaiting_action(by);
        found.into_iter().map(|r| r.id).collect()
    };
    // What a bank acting on them reads: the ledger's `requires_action` entries, in its order.
    let in_ledger: Vec<String> = ledger
        .iter()
        .filter(|r| r.status == "requires_action")
        .map(|r| r.id.clone())
        .collect();
    assert_eq!(in_ledger, [a.clone(), c.clone()]);
    assert_eq!(waiting(i64::MAX), in_ledger);
    assert_eq!(
        waiting(created(&c)),
        in_ledger,
        "created at the cutoff counts"
    );
    assert_eq!(
        waiting(created(&c) - 1),
        std::slice::from_ref(&a),
        "the canceled b is gone"
    );
    assert_eq!(waiting(created(&a) - 1), Vec::<String>::new());
    match sim.cancel_refund_in_process(&a, None, &[]) {
        Outcome::Answered(r) => assert_eq!(r.status, 200),
        Outcome::Dropped => panic!("no fault"),
    }
    assert_eq!(waiting(i64::MAX), [c]);
}
