//! `capture_method=manual`: an authorization waits in `requires_capture`; `POST
//! /v1/payment_intents/{id}/capture` takes all or part of it (keyed, its state refusals saved
//! under the key, faulted and rate-limited on its own); Stripe cancels it uncaptured at the
//! earlier of 7 days and the card's `capture_before` (on the simulated clock); a cancel releases
//! it; refunds are bounded by what was captured.

mod common;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::Value;
use stripe_sim::{
    Answer, Capacity, CreateStart, DeliveryMode, FaultConfig, FaultKind, Outcome, SimConfig,
    StripeSim, WebhookConfig, DEFAULT_API_KEY, KEY_TTL_MS, UNCAPTURED_EXPIRY_MS,
    VISA_MIT_CAPTURE_WINDOW_MS,
};

const T0: i64 = 1_800_000_000_000;

fn sim() -> StripeSim {
    StripeSim::new(SimConfig {
        start_ms: Some(T0),
        ..SimConfig::default()
    })
}

fn with_events(sim: &StripeSim) {
    sim.set_webhooks(WebhookConfig {
        mode: DeliveryMode::EventBridge,
        ..WebhookConfig::default()
    })
    .unwrap();
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

fn form(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A confirmed `capture_method=manual` charge of 1000 usd with `pm` (off-session: a
/// merchant-initiated payment).
fn manual(op: &str, pm: &str, off_session: bool) -> Vec<(String, String)> {
    let mut f = charge(op, pm);
    f.retain(|(k, _)| k != "off_session");
    f.push(("off_session".into(), off_session.to_string()));
    f.push(("capture_method".into(), "manual".into()));
    f
}

/// The answer of a create (never slow here).
fn create(sim: &StripeSim, key: Option<&str>, f: Vec<(String, String)>) -> Answer {
    let CreateStart::Done(o) = sim.create_in_process(key, f) else {
        panic!("slow create")
    };
    answered(o)
}

/// An authorized manual PaymentIntent (Visa, merchant-initiated); its id.
fn authorized(sim: &StripeSim, op: &str) -> String {
    let a = create(
        sim,
        Some(&format!("create:{op}")),
        manual(op, "pm_card_visa", true),
    );
    assert_eq!(a.status, 200, "{:?}", json(&a));
    json(&a)["id"].as_str().unwrap().to_owned()
}

fn capture(sim: &StripeSim, id: &str, key: Option<&str>, f: &[(String, String)]) -> Answer {
    answered(sim.capture_in_process(id, key, f))
}

fn intent(sim: &StripeSim, id: &str) -> Value {
    json(&sim.retrieve_in_process(id))
}

fn refund(sim: &StripeSim, pi: &str, amount: Option<i64>) -> Answer {
    let mut f = form(&[("payment_intent", pi)]);
    if let Some(a) = amount {
        f.push(("amount".into(), a.to_string()));
    }
    let CreateStart::Done(o) = sim.refund_in_process(None, &f) else {
        panic!("slow refund")
    };
    answered(o)
}

fn event_types(sim: &StripeSim) -> Vec<String> {
    sim.take_due_webhooks()
        .iter()
        .map(|d| d.event_type.clone())
        .collect()
}

fn code(a: &Answer) -> String {
    json(a)["error"]["code"].as_str().unwrap_or("").to_owned()
}

#[test]
fn an_authorization_is_captured_in_full_with_its_events() {
    let sim = sim();
    with_events(&sim);
    let pi = authorized(&sim, "op-1");
    let v = intent(&sim, &pi);
    assert_eq!(v["status"], "requires_capture");
    assert_eq!(v["capture_method"], "manual");
    assert_eq!(
        (
            v["amount_capturable"].as_i64(),
            v["amount_received"].as_i64()
        ),
        (Some(1000), Some(0))
    );
    assert_eq!(
        event_types(&sim),
        [
            "payment_intent.created",
            "payment_intent.amount_capturable_updated"
        ]
    );
    // Not captured: nothing to refund yet.
    let early = refund(&sim, &pi, None);
    assert_eq!(
        (early.status, code(&early)),
        (400, "payment_intent_unexpected_state".into())
    );

    let a = capture(&sim, &pi, Some("capture:op-1"), &[]);
    assert_eq!((a.status, a.replayed), (200, false), "{:?}", json(&a));
    let v = json(&a);
    assert_eq!(v["status"], "succeeded");
    assert_eq!(
        (
            v["amount_capturable"].as_i64(),
            v["amount_received"].as_i64()
        ),
        (Some(0), Some(1000))
    );
    let due = sim.take_due_webhooks();
    let types: Vec<&str> = due.iter().map(|d| d.event_type.as_str()).collect();
    assert_eq!(types, ["payment_intent.succeeded", "charge.captured"]);
    let charge = due[1].event().unwrap()["data"]["object"].clone();
    assert_eq!(
        (
            charge["captured"].as_bool(),
            charge["amount_captured"].as_i64()
        ),
        (Some(true), Some(1000))
    );
    // Captured: now it refunds, up to all of it.
    let r = refund(&sim, &pi, None);
    assert_eq!((r.status, json(&r)["amount"].as_i64()), (200, Some(1000)));
    assert_eq!(sim.request_counts().capture, 1);
}

#[test]
fn a_partial_capture_releases_the_rest_and_bounds_refunds() {
    let sim = sim();
    let pi = authorized(&sim, "op-1");
    let a = capture(&sim, &pi, None, &form(&[("amount_to_capture", "600")]));
    assert_eq!(a.status, 200, "{:?}", json(&a));
    let v = json(&a);
    assert_eq!(
        (
            v["amount_received"].as_i64(),
            v["amount_capturable"].as_i64()
        ),
        (Some(600), Some(0))
    );
    // The released 400 shows on the charge as Stripe shows it: in amount_refunded.
    assert_eq!(sim.amount_refunded(&pi), Some(400));
    let over = refund(&sim, &pi, Some(601));
    assert_eq!((over.status, code(&over)), (400, "amount_too_large".into()));
    let rest = refund(&sim, &pi, None);
    assert_eq!(
        (rest.status, json(&rest)["amount"].as_i64()),
        (200, Some(600))
    );
    assert_eq!(sim.amount_refunded(&pi), Some(1000));
    let none = refund(&sim, &pi, None);
    assert_eq!(
        (none.status, code(&none)),
        (400, "charge_already_refunded".into())
    );
}

#[test]
fn more_than_is_capturable_is_refused_and_a_smaller_capture_accepted() {
    let sim = sim();
    let pi = authorized(&sim, "op-1");
    let too_much = capture(&sim, &pi, None, &form(&[("amount_to_capture", "1001")]));
    assert_eq!(too_much.status, 400);
    assert_eq!(json(&too_much)["error"]["param"], "amount_to_capture");
    assert_eq!(
        intent(&sim, &pi)["status"],
        "requires_capture",
        "nothing changed"
    );
    let all = capture(&sim, &pi, None, &form(&[("amount_to_capture", "1000")]));
    assert_eq!(json(&all)["amount_received"], 1000);
}

#[test]
fn a_second_capture_is_unexpected_state_and_the_first_key_replays() {
    let sim = sim();
    let pi = authorized(&sim, "op-1");
    let first = capture(&sim, &pi, Some("capture:A"), &[]);
    assert_eq!(first.status, 200);
    let other = capture(&sim, &pi, Some("capture:B"), &[]);
    assert_eq!(
        (other.status, code(&other)),
        (400, "payment_intent_unexpected_state".into())
    );
    assert!(json(&other)["error"]["message"]
        .as_str()
        .unwrap()
        .contains("status of succeeded"));
    let again = capture(&sim, &pi, Some("capture:A"), &[]);
    assert_eq!((again.status, again.replayed), (200, true));
    assert_eq!(again.body, first.body);
    // B's refusal is saved under B, as Stripe saves it.
    let b_again = capture(&sim, &pi, Some("capture:B"), &[]);
    assert_eq!((b_again.status, b_again.replayed), (400, true));
    assert_eq!(b_again.body, other.body);
    // The key is bound to this intent's capture.
    let elsewhere = authorized(&sim, "op-2");
    let misuse = capture(&sim, &elsewhere, Some("capture:A"), &[]);
    assert_eq!(
        (misuse.status, json(&misuse)["error"]["type"].as_str()),
        (400, Some("idempotency_error"))
    );
    assert_eq!(intent(&sim, &elsewhere)["status"], "requires_capture");
}

#[test]
fn a_saved_refusal_replays_until_the_key_expires() {
    let sim = sim();
    let pi = authorized(&sim, "op-1");
    assert_eq!(answered(sim.cancel_in_process(&pi, None, &[])).status, 200);
    let refused = capture(&sim, &pi, Some("capture:A"), &[]);
    assert_eq!(
        (refused.status, code(&refused)),
        (400, "payment_intent_unexpected_state".into())
    );
    sim.advance(Duration::from_secs(3600));
    let replay = capture(&sim, &pi, Some("capture:A"), &[]);
    assert_eq!((replay.status, replay.replayed), (400, true));
    assert_eq!(replay.body, refused.body);
    // The key expired: the request executes again (and is refused again, not replayed).
    sim.advance(Duration::from_millis(KEY_TTL_MS as u64));
    let fresh = capture(&sim, &pi, Some("capture:A"), &[]);
    assert_eq!((fresh.status, fresh.replayed), (400, false));
}

#[test]
fn a_lost_capture_answer_is_replayed_under_its_key_error_included() {
    let sim = sim();
    let pi = authorized(&sim, "op-1");
    let other = authorized(&sim, "op-2");
    // The second intent is captured by another request first.
    assert_eq!(
        capture(&sim, &other, Some("capture:elsewhere"), &[]).status,
        200
    );
    sim.set_faults(FaultConfig {
        rates: [(FaultKind::DropAfterCommit, 1.0)].into(),
        faults_on_reads: false,
        ..FaultConfig::default()
    });
    assert_eq!(
        sim.capture_in_process(&pi, Some("capture:op-1"), &[]),
        Outcome::Dropped
    );
    assert_eq!(
        sim.capture_in_process(&other, Some("capture:op-2"), &[]),
        Outcome::Dropped
    );
    assert_eq!(sim.injected()[&FaultKind::DropAfterCommit], 2);
    sim.set_faults(FaultConfig::default());
    assert_eq!(
        intent(&sim, &pi)["status"],
        "succeeded",
        "captured though unanswered"
    );
    let retry = capture(&sim, &pi, Some("capture:op-1"), &[]);
    assert_eq!((retry.status, retry.replayed), (200, true));
    assert_eq!(json(&retry)["amount_received"], 1000);
    let retry = capture(&sim, &other, Some("capture:op-2"), &[]);
    assert_eq!(
        (retry.status, retry.replayed, code(&retry)),
        (400, true, "payment_intent_unexpected_state".into())
    );
}

#[test]
fn the_fault_engine_faults_captures_like_cancels() {
    let with = |kind: FaultKind| {
        let sim = sim();
        let pi = authorized(&sim, "op-1");
        sim.set_faults(FaultConfig {
            rates: [(kind, 1.0)].into(),
            faults_on_reads: false,
            ..FaultConfig::default()
        });
        let out = sim.capture_in_process(&pi, Some("capture:op-1"), &[]);
        (sim, pi, out)
    };
    for (kind, status) in [
        (FaultKind::RateLimit, 429),
        (FaultKind::ServerErrorBeforeCommit, 500),
        (FaultKind::KeyInUse, 409),
    ] {
        let (sim, pi, out) = with(kind);
        assert_eq!(answered(out).status, status, "{kind}");
        assert_eq!(
            intent(&sim, &pi)["status"],
            "requires_capture",
            "{kind}: nothing done"
        );
        assert_eq!(sim.injected()[&kind], 1, "{kind}");
        sim.set_faults(FaultConfig::default());
        let retry = capture(&sim, &pi, Some("capture:op-1"), &[]);
        assert_eq!(
            (retry.status, retry.replayed),
            (200, false),
            "{kind}: nothing saved"
        );
    }
    let (sim, pi, out) = with(FaultKind::ServerErrorAfterCommit);
    assert_eq!(answered(out).status, 500);
    assert_eq!(sim.injected()[&FaultKind::ServerErrorAfterCommit], 1);
    assert_eq!(intent(&sim, &pi)["status"], "succeeded");
    sim.set_faults(FaultConfig::default());
    let replay = capture(&sim, &pi, Some("capture:op-1"), &[]);
    assert_eq!((replay.status, replay.replayed), (500, true));
}

#[test]
fn captures_have_their_own_rate_limit() {
    let sim = StripeSim::new(SimConfig {
        capacity: Capacity {
            capture_per_sec: Some(1),
            ..Capacity::unlimited()
        },
        ..SimConfig::default()
    });
    let a = authorized(&sim, "op-a");
    let b = authorized(&sim, "op-b");
    assert_eq!(capture(&sim, &a, None, &[]).status, 200);
    assert_eq!(capture(&sim, &b, None, &[]).status, 429);
    assert_eq!(intent(&sim, &b)["status"], "requires_capture");
    assert_eq!(
        answered(sim.cancel_in_process(&b, None, &[])).status,
        200,
        "cancels count apart"
    );
    let refused = sim.capacity_429s();
    assert_eq!((refused.capture, refused.cancel, refused.create), (1, 0, 0));
}

#[test]
fn capture_and_cancel_race_and_exactly_one_wins() {
    for round in 0..20 {
        let sim = sim();
        let pi = authorized(&sim, &format!("op-{round}"));
        let (s1, p1) = (sim.clone(), pi.clone());
        let (s2, p2) = (sim.clone(), pi.clone());
        let cap =
            std::thread::spawn(move || answered(s1.capture_in_process(&p1, Some("cap"), &[])));
        let can = std::thread::spawn(move || answered(s2.cancel_in_process(&p2, Some("can"), &[])));
        let (cap, can) = (cap.join().unwrap(), can.join().unwrap());
        let winners = [cap.status, can.status]
            .iter()
            .filter(|s| **s == 200)
            .count();
        assert_eq!(winners, 1, "round {round}");
        let loser = if cap.status == 200 { &can } else { &cap };
        assert_eq!(
            (loser.status, code(loser)),
            (400, "payment_intent_unexpected_state".into())
        );
        let want = if cap.status == 200 {
            "succeeded"
        } else {
            "canceled"
        };
        assert_eq!(intent(&sim, &pi)["status"], want, "round {round}");
    }
}

#[test]
fn a_cancel_releases_the_hold_and_a_paid_intent_cannot_be_canceled() {
    let sim = sim();
    with_events(&sim);
    let pi = authorized(&sim, "op-1");
    sim.take_due_webhooks();
    let a =
        answered(sim.cancel_in_process(&pi, None, &form(&[("cancellation_reason", "abandoned")])));
    assert_eq!(a.status, 200);
    let v = json(&a);
    assert_eq!(
        (v["status"].as_str(), v["amount_capturable"].as_i64()),
        (Some("canceled"), Some(0))
    );
    assert_eq!(
        sim.amount_refunded(&pi),
        Some(1000),
        "the whole hold released"
    );
    // The pinned version tells of the released hold as a refund of Stripe's own.
    assert_eq!(
        event_types(&sim),
        ["payment_intent.canceled", "charge.refund.updated"]
    );
    assert_eq!(
        sim.next_expiry_ms(),
        None,
        "a released hold does not expire"
    );
    // Twin: a captured intent refuses the cancel.
    let paid = authorized(&sim, "op-2");
    assert_eq!(capture(&sim, &paid, None, &[]).status, 200);
    let refused = answered(sim.cancel_in_process(&paid, None, &[]));
    assert_eq!(
        (refused.status, code(&refused)),
        (400, "payment_intent_unexpected_state".into())
    );
}

#[test]
fn an_uncaptured_intent_expires_at_its_cards_deadline_on_the_clock() {
    let sim = sim();
    with_events(&sim);
    let pi = authorized(&sim, "op-1");
    let twin = authorized(&sim, "op-2");
    sim.take_due_webhooks();
    let deadline = T0 + VISA_MIT_CAPTURE_WINDOW_MS;
    assert_eq!(sim.next_expiry_ms(), Some(deadline));
    assert_eq!(
        sim.next_webhook_due_ms(),
        Some(deadline),
        "the expiry's event is due then"
    );
    // A second before: still capturable (the twin is captured then).
    sim.set_now_ms(deadline - 1000);
    assert_eq!(intent(&sim, &pi)["status"], "requires_capture");
    assert_eq!(capture(&sim, &twin, None, &[]).status, 200);
    sim.take_due_webhooks();
    // At the deadline, the clock's advance cancels it with its event, unread.
    sim.advance(Duration::from_secs(1));
    let due = sim.take_due_webhooks();
    let types: Vec<&str> = due.iter().map(|d| d.event_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "payment_intent.canceled",
            "charge.expired",
            "charge.refund.updated"
        ]
    );
    let charge = due[1].event().unwrap()["data"]["object"].clone();
    assert_eq!(
        (
            charge["captured"].as_bool(),
            charge["amount_refunded"].as_i64()
        ),
        (Some(false), Some(1000))
    );
    let v = due[0].event().unwrap()["data"]["object"].clone();
    assert_eq!(
        (v["id"].as_str(), v["cancellation_reason"].as_str()),
        (Some(pi.as_str()), Some("automatic"))
    );
    assert_eq!(v["canceled_at"], deadline / 1000);
    let late = capture(&sim, &pi, None, &[]);
    assert_eq!(
        (late.status, code(&late)),
        (400, "payment_intent_unexpected_state".into())
    );
    assert_eq!(
        intent(&sim, &twin)["status"],
        "succeeded",
        "a captured one never expires"
    );
    assert_eq!(sim.next_expiry_ms(), None);
}

#[test]
fn the_expiry_is_the_earlier_of_the_window_and_capture_before() {
    // An on-session Mastercard: its card allows 7 days, Stripe's window too.
    let sim = sim();
    let a = create(&sim, None, manual("op-1", "pm_card_mastercard", false));
    assert_eq!(sim.next_expiry_ms(), Some(T0 + UNCAPTURED_EXPIRY_MS));
    // A shorter configured window comes first.
    sim.set_uncaptured_expiry(Duration::from_secs(3600));
    let b = create(&sim, None, manual("op-2", "pm_card_mastercard", false));
    let b_id = json(&b)["id"].as_str().unwrap().to_owned();
    sim.advance(Duration::from_secs(3599));
    assert_eq!(intent(&sim, &b_id)["status"], "requires_capture");
    sim.advance(Duration::from_secs(1));
    assert_eq!(intent(&sim, &b_id)["status"], "canceled");
    let a_id = json(&a)["id"].as_str().unwrap().to_owned();
    assert_eq!(intent(&sim, &a_id)["status"], "requires_capture");
}

#[test]
fn an_expiry_is_applied_when_read_after_a_clock_that_moved_alone() {
    let now = Arc::new(AtomicI64::new(T0));
    let source = now.clone();
    let sim = StripeSim::new(SimConfig {
        time_source: Some(Arc::new(move || source.load(Ordering::SeqCst))),
        ..SimConfig::default()
    });
    let pi = authorized(&sim, "op-1");
    now.store(T0 + VISA_MIT_CAPTURE_WINDOW_MS - 1, Ordering::SeqCst);
    assert_eq!(intent(&sim, &pi)["status"], "requires_capture");
    now.store(T0 + VISA_MIT_CAPTURE_WINDOW_MS, Ordering::SeqCst);
    let v = intent(&sim, &pi);
    assert_eq!(
        (v["status"].as_str(), v["cancellation_reason"].as_str()),
        (Some("canceled"), Some("automatic"))
    );
    assert_eq!(sim.ledger()[0].status, "canceled");
}

#[test]
fn a_processing_manual_payment_waits_for_its_capture_once_settled() {
    let sim = sim();
    let a = create(
        &sim,
        None,
        manual("op-1", "pm_card_processing_succeeds", true),
    );
    let id = json(&a)["id"].as_str().unwrap().to_owned();
    assert_eq!(json(&a)["status"], "processing");
    assert_eq!(
        capture(&sim, &id, None, &[]).status,
        400,
        "not yet authorized"
    );
    sim.advance(Duration::from_secs(600));
    assert_eq!(intent(&sim, &id)["status"], "requires_capture");
    assert!(sim.next_expiry_ms().is_some());
    assert_eq!(
        json(&capture(&sim, &id, None, &[]))["amount_received"],
        1000
    );
}

#[test]
fn capture_params_are_checked_and_a_bad_one_changes_nothing() {
    let sim = sim();
    let pi = authorized(&sim, "op-1");
    for (bad, param) in [
        (form(&[("bogus", "1")]), "bogus"),
        (form(&[("amount_to_capture", "0")]), "amount_to_capture"),
        (form(&[("amount_to_capture", "ten")]), "amount_to_capture"),
        (form(&[("final_capture", "true")]), "final_capture"),
    ] {
        let a = capture(&sim, &pi, Some("capture:bad"), &bad);
        assert_eq!(
            (a.status, json(&a)["error"]["param"].as_str()),
            (400, Some(param))
        );
    }
    assert_eq!(intent(&sim, &pi)["status"], "requires_capture");
    // Twin: metadata and expand are accepted; the refused key was not saved.
    let ok = capture(
        &sim,
        &pi,
        Some("capture:bad"),
        &form(&[
            ("metadata[captured_by]", "job-7"),
            ("expand[]", "latest_charge"),
        ]),
    );
    assert_eq!((ok.status, ok.replayed), (200, false));
    assert_eq!(json(&ok)["metadata"]["captured_by"], "job-7");
    assert_eq!(json(&ok)["metadata"]["operation_id"], "op-1");
    sim.advance(Duration::from_secs(31));
    let found = json(&sim.search_in_process("metadata['captured_by']:'job-7'"));
    assert_eq!(
        found["data"].as_array().unwrap().len(),
        1,
        "searchable once"
    );
    let unknown = capture(&sim, "pi_nope", Some("capture:nope"), &[]);
    assert_eq!(
        (unknown.status, code(&unknown)),
        (404, "resource_missing".into())
    );
    let bad_method = create(&sim, None, {
        let mut f = visa("op-x");
        f.push(("capture_method".into(), "later".into()));
        f
    });
    assert_eq!(
        (
            bad_method.status,
            json(&bad_method)["error"]["param"].as_str()
        ),
        (400, Some("capture_method"))
    );
}

#[tokio::test]
async fn capture_over_http_with_capture_before_on_the_expanded_charge() {
    let h = start_with(SimConfig {
        start_ms: Some(T0),
        ..SimConfig::default()
    })
    .await;
    let created: Value = h
        .create(Some("k-create"), &manual("op-1", "pm_card_visa", true))
        .await
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap();
    let expanded: Value = h
        .get(&format!("/v1/payment_intents/{id}?expand[]=latest_charge"))
        .await
        .json()
        .await
        .unwrap();
    let card = &expanded["latest_charge"]["payment_method_details"]["card"];
    let before = card["capture_before"].as_i64().expect("capture_before");
    assert_eq!(before, (T0 + VISA_MIT_CAPTURE_WINDOW_MS) / 1000);
    assert!(
        before - T0 / 1000 <= UNCAPTURED_EXPIRY_MS / 1000,
        "within 7 days"
    );
    assert_eq!(expanded["latest_charge"]["captured"], false);
    // An on-session Mastercard has Stripe's 7 days; an automatic payment no deadline.
    let mc: Value = h
        .create(None, &manual("op-2", "pm_card_mastercard", false))
        .await
        .json()
        .await
        .unwrap();
    let mc_id = mc["id"].as_str().unwrap();
    let mc: Value = h
        .get(&format!(
            "/v1/payment_intents/{mc_id}?expand[]=latest_charge"
        ))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        mc["latest_charge"]["payment_method_details"]["card"]["capture_before"],
        (T0 + UNCAPTURED_EXPIRY_MS) / 1000
    );
    let auto: Value = h.create(None, &visa("op-3")).await.json().await.unwrap();
    let auto_id = auto["id"].as_str().unwrap();
    let auto: Value = h
        .get(&format!(
            "/v1/payment_intents/{auto_id}?expand[]=latest_charge"
        ))
        .await
        .json()
        .await
        .unwrap();
    // Not an authorization: no deadline, and the key absent (Stripe's spec gives it no null).
    let card = &auto["latest_charge"]["payment_method_details"]["card"];
    assert!(card.get("capture_before").is_none(), "{card}");
    assert!(card["brand"].is_string(), "{card}");
    assert_eq!(auto["capture_method"], "automatic");

    let post = |key: &'static str| {
        h.client
            .post(format!("{}/v1/payment_intents/{id}/capture", h.base))
            .bearer_auth(DEFAULT_API_KEY)
            .header("Idempotency-Key", key)
            .form(&[("amount_to_capture", "250")])
            .send()
    };
    let first = post("k-capture").await.unwrap();
    assert_eq!(first.status(), 200);
    let body: Value = first.json().await.unwrap();
    assert_eq!(
        (body["status"].as_str(), body["amount_received"].as_i64()),
        (Some("succeeded"), Some(250))
    );
    let again = post("k-capture").await.unwrap();
    assert!(replayed(&again));
    let twice = post("k-other").await.unwrap();
    assert_eq!(twice.status(), 400);
    let counts = h.admin_get("ledger").await;
    assert_eq!(counts["requests"]["capture"], 3);
}

#[tokio::test]
async fn the_admin_api_sets_the_expiry_window_and_the_capture_limit() {
    let h = start_with(SimConfig {
        start_ms: Some(T0),
        ..SimConfig::default()
    })
    .await;
    let (status, faults) = h
        .admin_post("faults", r#"{"uncaptured_expiry_secs":60}"#)
        .await;
    assert_eq!(
        (status, faults["uncaptured_expiry_ms"].as_i64()),
        (200, Some(60_000))
    );
    let (status, cap) = h.admin_post("capacity", r#"{"capture_per_sec":2}"#).await;
    assert_eq!((status, cap["capture_per_sec"].as_i64()), (200, Some(2)));
    assert_eq!(cap["tokens"]["capture"], 2.0);
    let created: Value = h
        .create(None, &manual("op-1", "pm_card_visa", true))
        .await
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap();
    // Advancing the clock past the minute cancels it, before anyone reads it.
    let (status, _) = h.admin_post("clock", r#"{"advance_secs":60}"#).await;
    assert_eq!(status, 200);
    assert_eq!(h.sim.ledger()[0].status, "canceled");
    let v: Value = h.retrieve(id).await.json().await.unwrap();
    assert_eq!(v["cancellation_reason"], "automatic");
    assert_eq!(v["canceled_at"], T0 / 1000 + 60);
}

/// `f` asking for the charge object in the answer, as the charge-once client asks on a manual
/// create.
fn expanding(mut f: Vec<(String, String)>) -> Vec<(String, String)> {
    f.push(("expand[]".into(), "latest_charge".into()));
    f
}

#[test]
fn a_manual_create_that_expands_its_charge_states_capture_before_and_replays_the_same_body() {
    let sim = sim();
    let f = expanding(manual("op-1", "pm_card_visa", true));
    let a = create(&sim, Some("create:op-1"), f.clone());
    assert_eq!((a.status, a.replayed), (200, false), "{:?}", json(&a));
    let v = json(&a);
    assert_eq!(v["status"], "requires_capture");
    let charge = &v["latest_charge"];
    assert_eq!(charge["object"], "charge");
    assert_eq!(
        charge["payment_method_details"]["card"]["capture_before"].as_i64(),
        Some((T0 + VISA_MIT_CAPTURE_WINDOW_MS) / 1000),
        "a Visa merchant-initiated hold: 4 days 18 hours"
    );
    // The intent changes (captured); the key still replays the first answer, expanded.
    let id = v["id"].as_str().unwrap().to_owned();
    assert_eq!(capture(&sim, &id, None, &[]).status, 200);
    let again = create(&sim, Some("create:op-1"), f);
    assert!(again.replayed);
    assert_eq!(again.body, a.body, "the same bytes as the first answer");
    assert_eq!(sim.ledger().len(), 1, "one PaymentIntent");

    // Twin: not asked, the answer names the charge by its id, and so does its replay.
    let plain = manual("op-2", "pm_card_visa", true);
    let b = create(&sim, Some("create:op-2"), plain.clone());
    assert!(json(&b)["latest_charge"]
        .as_str()
        .unwrap()
        .starts_with("ch_"));
    let b_again = create(&sim, Some("create:op-2"), plain);
    assert_eq!((b_again.replayed, b_again.body), (true, b.body));
}

#[test]
fn a_declined_create_asking_to_expand_answers_its_card_error() {
    let sim = sim();
    let f = expanding(manual("op-1", "pm_card_chargeDeclined", true));
    let a = create(&sim, Some("create:op-1"), f.clone());
    assert_eq!((a.status, code(&a)), (402, "card_declined".into()));
    let again = create(&sim, Some("create:op-1"), f);
    assert_eq!((again.replayed, again.body), (true, a.body));
}

#[test]
fn captures_and_cancels_that_expand_answer_and_replay_the_charge_object() {
    let sim = sim();
    let pi = authorized(&sim, "op-1");
    let f = expanding(form(&[("amount_to_capture", "600")]));
    let a = capture(&sim, &pi, Some("capture:op-1"), &f);
    assert_eq!(a.status, 200, "{:?}", json(&a));
    let charge = &json(&a)["latest_charge"];
    assert_eq!(
        (
            charge["captured"].as_bool(),
            charge["amount_captured"].as_i64(),
            charge["amount_refunded"].as_i64()
        ),
        (Some(true), Some(600), Some(400)),
        "the rest released"
    );
    let again = capture(&sim, &pi, Some("capture:op-1"), &f);
    assert_eq!((again.replayed, &again.body), (true, &a.body));

    let other = authorized(&sim, "op-2");
    let f = expanding(form(&[("cancellation_reason", "requested_by_customer")]));
    let c = answered(sim.cancel_in_process(&other, Some("cancel:op-2"), &f));
    assert_eq!(c.status, 200, "{:?}", json(&c));
    let v = json(&c);
    assert_eq!(v["cancellation_reason"], "requested_by_customer");
    assert_eq!(v["latest_charge"]["amount_refunded"].as_i64(), Some(1000));
    let c_again = answered(sim.cancel_in_process(&other, Some("cancel:op-2"), &f));
    assert_eq!((c_again.replayed, c_again.body), (true, c.body));
    // Twin: not asked, the capture's answer names the charge by its id.
    let third = authorized(&sim, "op-3");
    let plain = capture(&sim, &third, None, &[]);
    assert!(json(&plain)["latest_charge"].is_string());
}
