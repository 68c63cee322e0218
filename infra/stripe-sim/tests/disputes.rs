//! Disputes over real HTTP: Stripe's dispute test cards, the answer (evidence, close) and the
//! statuses it moves through on the simulated clock, the funds withdrawn and reinstated, the
//! refusal of a refund of a disputed charge (beside its accepted twins), reads and lists, the
//! admin route's dispute of a partly refunded charge, and the events on both event paths.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;
use stripe_sim::{
    DeliveryMode, DisputeTiming, SimConfig, StripeSim, WebhookConfig, WebhookFaults,
    DEFAULT_API_KEY,
};

const DAY_MS: i64 = 24 * 3600 * 1000;

async fn paid(h: &Harness, op: &str, pm: &str) -> (String, String) {
    let r = h.create(None, &charge(op, pm)).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["status"], "succeeded", "{v}");
    (
        v["id"].as_str().unwrap().to_owned(),
        v["latest_charge"].as_str().unwrap().to_owned(),
    )
}

async fn get(h: &Harness, path: &str) -> (u16, Value) {
    let r = h.get(path).await;
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn post(h: &Harness, path: &str, form: &[(&str, &str)]) -> (u16, Value) {
    let r = h
        .client
        .post(format!("{}{path}", h.base))
        .bearer_auth(DEFAULT_API_KEY)
        .form(form)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn refund(h: &Harness, pi: &str, amount: Option<i64>) -> (u16, Value) {
    let amount = amount.map(|a| a.to_string());
    let mut f = vec![("payment_intent", pi)];
    if let Some(a) = &amount {
        f.push(("amount", a));
    }
    post(h, "/v1/refunds", &f).await
}

/// The one dispute of `pi`, listed by PaymentIntent.
async fn dispute_of(h: &Harness, pi: &str) -> Value {
    let (s, list) = get(h, &format!("/v1/disputes?payment_intent={pi}")).await;
    assert_eq!(s, 200, "{list}");
    let data = list["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{list}");
    data[0].clone()
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

fn kinds(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(k, _)| k.as_str()).collect()
}

fn eventbridge(sim: &StripeSim) {
    sim.set_webhooks(WebhookConfig {
        mode: DeliveryMode::EventBridge,
        ..WebhookConfig::default()
    })
    .unwrap();
}

/// A fraudulent dispute from Stripe's test card: funds withdrawn at once, the refund refused
/// (the same refund of a Visa charge accepted), evidence submitted, reviewed and won, the funds
/// reinstated and the charge refundable again — each step with its events.
#[tokio::test]
async fn a_test_card_dispute_is_answered_and_won() {
    let h = start().await;
    eventbridge(&h.sim);
    let (pi, ch) = paid(&h, "op-1", "pm_card_createDispute").await;
    let (visa, _) = paid(&h, "op-2", "pm_card_visa").await;
    let opened = events(&h.sim);
    let dispute_events: Vec<&(String, Value)> = opened
        .iter()
        .filter(|(k, _)| k.starts_with("charge.dispute"))
        .collect();
    assert_eq!(
        dispute_events
            .iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>(),
        ["charge.dispute.created", "charge.dispute.funds_withdrawn"]
    );

    let dp = dispute_of(&h, &pi).await;
    let id = dp["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("dp_"));
    assert_eq!(
        dispute_events[0].1["id"], dp["id"],
        "the event's object is the dispute"
    );
    assert_eq!(
        (
            dp["object"].as_str(),
            dp["charge"].as_str(),
            dp["payment_intent"].as_str(),
            dp["amount"].as_i64(),
            dp["currency"].as_str(),
            dp["reason"].as_str(),
            dp["status"].as_str(),
            dp["is_charge_refundable"].as_bool(),
            dp["livemode"].as_bool(),
        ),
        (
            Some("dispute"),
            Some(ch.as_str()),
            Some(pi.as_str()),
            Some(1000),
            Some("usd"),
            Some("fraudulent"),
            Some("needs_response"),
            Some(false),
            Some(false),
        )
    );
    let created = dp["created"].as_i64().unwrap();
    let details = &dp["evidence_details"];
    assert_eq!(
        details["due_by"].as_i64(),
        Some(created + 7 * 24 * 3600),
        "seven days to answer by default"
    );
    assert_eq!(
        (
            details["has_evidence"].as_bool(),
            details["past_due"].as_bool(),
            details["submission_count"].as_i64()
        ),
        (Some(false), Some(false), Some(0))
    );
    let txns = dp["balance_transactions"].as_array().unwrap();
    assert_eq!(txns.len(), 1);
    assert_eq!(txns[0]["amount"], -1000);
    assert_eq!(
        get(&h, &format!("/v1/disputes/{id}")).await,
        (200, dp.clone())
    );

    // Stripe refuses to refund a charged-back charge; the same refund of a Visa charge passes.
    let (s, refused) = refund(&h, &pi, None).await;
    assert_eq!(s, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "charge_disputed");
    assert_eq!(
        refused["error"]["message"],
        format!("Charge {ch} has been charged back; cannot issue a refund.")
    );
    assert_eq!(refund(&h, &visa, None).await.0, 200);
    events(&h.sim);

    let (s, answered) = post(
        &h,
        &format!("/v1/disputes/{id}"),
        &[("evidence[uncategorized_text]", "winning_evidence")],
    )
    .await;
    assert_eq!(s, 200, "{answered}");
    assert_eq!(answered["status"], "under_review");
    assert_eq!(
        answered["evidence"]["uncategorized_text"],
        "winning_evidence"
    );
    assert_eq!(
        (
            answered["evidence"]["customer_name"].clone(),
            answered["evidence"].as_object().map(|e| e.len())
        ),
        (Value::Null, Some(27)),
        "every evidence field, null until given"
    );
    assert_eq!(answered["evidence_details"]["has_evidence"], true);
    assert_eq!(answered["evidence_details"]["submission_count"], 1);
    assert_eq!(kinds(&events(&h.sim)), ["charge.dispute.updated"]);
    // A second answer is refused: the dispute no longer needs one.
    let (s, again) = post(
        &h,
        &format!("/v1/disputes/{id}"),
        &[("evidence[uncategorized_text]", "losing_evidence")],
    )
    .await;
    assert_eq!(s, 400, "{again}");

    h.sim.advance(Duration::from_secs(3599));
    assert_eq!(
        get(&h, &format!("/v1/disputes/{id}")).await.1["status"],
        "under_review"
    );
    assert_eq!(refund(&h, &pi, Some(100)).await.0, 400, "still disputed");
    h.sim.advance(Duration::from_secs(1));
    let (_, won) = get(&h, &format!("/v1/disputes/{id}")).await;
    assert_eq!(won["status"], "won");
    assert_eq!(won["is_charge_refundable"], true);
    let txns = won["balance_transactions"].as_array().unwrap();
    assert_eq!(
        txns.iter()
            .map(|t| t["amount"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [-1000, 1000],
        "withdrawn, then reinstated"
    );
    let closed = events(&h.sim);
    assert_eq!(
        kinds(&closed),
        ["charge.dispute.closed", "charge.dispute.funds_reinstated"]
    );
    assert!(closed.iter().all(|(_, o)| o["status"] == "won"));
    assert_eq!(
        refund(&h, &pi, Some(100)).await.0,
        200,
        "won: refundable again"
    );
    let ledger = h.sim.dispute_ledger();
    assert_eq!((ledger.len(), ledger[0].withdrawn), (1, 0));
}

/// Losing evidence loses; a closed (accepted) dispute is lost at once; either way the funds stay
/// withdrawn and refunds stay refused.
#[tokio::test]
async fn losing_evidence_and_accepting_lose_the_dispute() {
    let h = start().await;
    h.sim.set_dispute_timing(DisputeTiming {
        review_ms: 0,
        ..DisputeTiming::default()
    });
    let (pi, _) = paid(&h, "op-1", "pm_card_createDisputeProductNotReceived").await;
    let dp = dispute_of(&h, &pi).await;
    assert_eq!(dp["reason"], "product_not_received");
    let id = dp["id"].as_str().unwrap();
    let (s, lost) = post(
        &h,
        &format!("/v1/disputes/{id}"),
        &[("evidence[uncategorized_text]", "losing_evidence")],
    )
    .await;
    assert_eq!(
        (s, lost["status"].as_str()),
        (200, Some("lost")),
        "no review time"
    );
    assert_eq!(lost["balance_transactions"].as_array().unwrap().len(), 1);
    assert_eq!(
        refund(&h, &pi, None).await.1["error"]["code"],
        "charge_disputed"
    );

    let (pi2, _) = paid(&h, "op-2", "pm_card_createDispute").await;
    let id2 = dispute_of(&h, &pi2).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Staged evidence does not submit.
    let (s, staged) = post(
        &h,
        &format!("/v1/disputes/{id2}"),
        &[("evidence[customer_name]", "Jenny"), ("submit", "false")],
    )
    .await;
    assert_eq!(
        (
            s,
            staged["status"].as_str(),
            staged["evidence_details"]["submission_count"].as_i64()
        ),
        (200, Some("needs_response"), Some(0))
    );
    let (s, accepted) = post(&h, &format!("/v1/disputes/{id2}/close"), &[]).await;
    assert_eq!((s, accepted["status"].as_str()), (200, Some("lost")));
    assert_eq!(
        post(&h, &format!("/v1/disputes/{id2}/close"), &[]).await.0,
        400
    );
    assert_eq!(post(&h, "/v1/disputes/dp_nope/close", &[]).await.0, 404);
}

/// No answer by `due_by`: still `needs_response` past it (`past_due` true: evidence may still
/// arrive, late), lost `CLOSES_AFTER_DUE_MS` (2 days) later, when the network decides; an
/// inquiry left unanswered closes `warning_closed` then.
#[tokio::test]
async fn an_unanswered_dispute_is_lost_after_its_deadline() {
    let h = start().await;
    eventbridge(&h.sim);
    let (pi, _) = paid(&h, "op-1", "pm_card_createDispute").await;
    let (inq, _) = paid(&h, "op-2", "pm_card_createDisputeInquiry").await;
    events(&h.sim);
    let id = dispute_of(&h, &pi).await["id"].as_str().unwrap().to_owned();
    let inq_id = dispute_of(&h, &inq).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let closes = 7 * DAY_MS + stripe_sim::CLOSES_AFTER_DUE_MS;
    assert_eq!(stripe_sim::CLOSES_AFTER_DUE_MS, 2 * DAY_MS);
    assert_eq!(h.sim.next_expiry_ms(), Some(h.sim.now_ms() + closes));
    h.sim
        .advance(Duration::from_millis((7 * DAY_MS - 1000) as u64));
    let (_, before) = get(&h, &format!("/v1/disputes/{id}")).await;
    assert_eq!(before["status"], "needs_response");
    assert_eq!(before["evidence_details"]["past_due"], false);
    h.sim.advance(Duration::from_secs(1));
    let (_, at_due) = get(&h, &format!("/v1/disputes/{id}")).await;
    assert_eq!(at_due["status"], "needs_response", "open past due_by");
    assert_eq!(at_due["evidence_details"]["past_due"], true);
    let (_, inq_at_due) = get(&h, &format!("/v1/disputes/{inq_id}")).await;
    assert_eq!(inq_at_due["status"], "warning_needs_response");
    h.sim.advance(Duration::from_millis(
        (stripe_sim::CLOSES_AFTER_DUE_MS - 1000) as u64,
    ));
    assert!(events(&h.sim).is_empty(), "nothing closed before the delay");
    h.sim.advance(Duration::from_secs(1));
    let closed = events(&h.sim);
    assert_eq!(
        kinds(&closed),
        ["charge.dispute.closed", "charge.dispute.closed"],
        "the clock's move sent them, before anyone read"
    );
    assert_eq!(
        get(&h, &format!("/v1/disputes/{id}")).await.1["status"],
        "lost"
    );
    assert_eq!(
        get(&h, &format!("/v1/disputes/{inq_id}")).await.1["status"],
        "warning_closed"
    );
    assert_eq!(h.sim.next_expiry_ms(), None, "nothing left to move");
}

/// The closing delay after `due_by` is part of the timing (`POST /_sim/disputes/timing`): 0
/// closes at `due_by`, as stripe-sim did before it had one.
#[tokio::test]
async fn the_closing_delay_after_due_by_is_part_of_the_timing() {
    let h = start().await;
    h.sim.set_dispute_timing(DisputeTiming {
        closes_after_due_ms: 0,
        ..DisputeTiming::default()
    });
    let (pi, _) = paid(&h, "op-1", "pm_card_createDispute").await;
    let id = dispute_of(&h, &pi).await["id"].as_str().unwrap().to_owned();
    h.sim.advance(Duration::from_millis((7 * DAY_MS) as u64));
    assert_eq!(
        get(&h, &format!("/v1/disputes/{id}")).await.1["status"],
        "lost"
    );
}

/// An inquiry withdraws nothing and leaves the charge refundable (the chargeback's refusal is
/// the other test's twin); lost, it escalates into a chargeback: funds withdrawn, a new window.
#[tokio::test]
async fn an_inquiry_is_refundable_and_escalates_when_lost() {
    let h = start().await;
    eventbridge(&h.sim);
    let (pi, _) = paid(&h, "op-1", "pm_card_createDisputeInquiry").await;
    let dp = dispute_of(&h, &pi).await;
    assert_eq!(
        (
            dp["status"].as_str(),
            dp["is_charge_refundable"].as_bool(),
            dp["balance_transactions"].as_array().map(Vec::len)
        ),
        (Some("warning_needs_response"), Some(true), Some(0))
    );
    let opened = events(&h.sim);
    assert!(kinds(&opened).contains(&"charge.dispute.created"));
    assert!(!kinds(&opened).contains(&"charge.dispute.funds_withdrawn"));
    assert_eq!(
        refund(&h, &pi, Some(300)).await.0,
        200,
        "an inquiry lets it through"
    );

    let id = dp["id"].as_str().unwrap();
    let (_, review) = post(
        &h,
        &format!("/v1/disputes/{id}"),
        &[("evidence[uncategorized_text]", "losing_evidence")],
    )
    .await;
    assert_eq!(review["status"], "warning_under_review");
    events(&h.sim);
    h.sim.advance(Duration::from_secs(3600));
    let (_, escalated) = get(&h, &format!("/v1/disputes/{id}")).await;
    assert_eq!(escalated["status"], "needs_response");
    assert_eq!(escalated["is_charge_refundable"], false);
    assert_eq!(
        escalated["evidence_details"]["due_by"].as_i64(),
        Some(h.sim.now_ms() / 1000 + 7 * 24 * 3600)
    );
    assert_eq!(
        kinds(&events(&h.sim)),
        ["charge.dispute.updated", "charge.dispute.funds_withdrawn"]
    );
    assert_eq!(
        refund(&h, &pi, Some(100)).await.1["error"]["code"],
        "charge_disputed"
    );
    // The first window's close does not close the escalated dispute; its own window's does.
    let closes = 7 * DAY_MS + stripe_sim::CLOSES_AFTER_DUE_MS;
    h.sim.advance(Duration::from_millis((closes - 1000) as u64));
    assert_eq!(
        get(&h, &format!("/v1/disputes/{id}")).await.1["status"],
        "needs_response"
    );
    h.sim.advance(Duration::from_secs(1));
    assert_eq!(
        get(&h, &format!("/v1/disputes/{id}")).await.1["status"],
        "lost"
    );
}

/// Refunding an inquiry's charge in full resolves the inquiry (Stripe's disputes guide:
/// "refund the payment in full. This marks the inquiry or retrieval as resolved"); a partial
/// refund does not, nor does any refund close a chargeback (it is refused).
#[tokio::test]
async fn a_full_refund_resolves_an_open_inquiry() {
    let h = start().await;
    eventbridge(&h.sim);
    let (pi, _) = paid(&h, "op-1", "pm_card_createDisputeInquiry").await;
    let id = dispute_of(&h, &pi).await["id"].as_str().unwrap().to_owned();
    events(&h.sim);
    assert_eq!(refund(&h, &pi, Some(400)).await.0, 200);
    let (_, partly) = get(&h, &format!("/v1/disputes/{id}")).await;
    assert_eq!(
        partly["status"], "warning_needs_response",
        "a partial refund leaves it open"
    );
    assert!(!kinds(&events(&h.sim)).contains(&"charge.dispute.closed"));
    assert_eq!(refund(&h, &pi, None).await.0, 200);
    let (_, resolved) = get(&h, &format!("/v1/disputes/{id}")).await;
    assert_eq!(resolved["status"], "warning_closed");
    let closed: Vec<(String, Value)> = events(&h.sim)
        .into_iter()
        .filter(|(k, _)| k.starts_with("charge.dispute"))
        .collect();
    assert_eq!(kinds(&closed), ["charge.dispute.closed"]);
    assert_eq!(closed[0].1["status"], "warning_closed");
    // Nothing is due for it any more: its deadline passes without a second close.
    h.sim.advance(Duration::from_millis(7 * DAY_MS as u64));
    assert!(events(&h.sim).is_empty());
}

/// A dispute after a delay appears then, dated then; before it, the charge has none.
#[tokio::test]
async fn a_delayed_dispute_appears_on_the_clock() {
    let h = start_with(SimConfig {
        disputes: DisputeTiming {
            delay_ms: 60_000,
            ..DisputeTiming::default()
        },
        ..SimConfig::default()
    })
    .await;
    let (pi, _) = paid(&h, "op-1", "pm_card_createDispute").await;
    let charged = h.sim.now_ms() / 1000;
    let (_, none) = get(&h, &format!("/v1/disputes?payment_intent={pi}")).await;
    assert_eq!(none["data"].as_array().unwrap().len(), 0);
    assert_eq!(refund(&h, &pi, Some(100)).await.0, 200, "not disputed yet");
    h.sim.advance(Duration::from_secs(60));
    let dp = dispute_of(&h, &pi).await;
    assert_eq!(dp["created"].as_i64(), Some(charged + 60));
    assert_eq!(dp["amount"], 900, "what the refund left");
}

/// The admin route disputes a partly refunded charge: by default what is left, or any amount up
/// to the charge; refused for an unknown or unpaid intent and an amount outside the charge.
#[tokio::test]
async fn the_admin_route_disputes_a_partly_refunded_charge() {
    let h = start().await;
    let (pi, _) = paid(&h, "op-1", "pm_card_visa").await;
    assert_eq!(refund(&h, &pi, Some(400)).await.0, 200);
    let body = format!(r#"{{"payment_intent":"{pi}"}}"#);
    let (s, dp) = h.admin_post("disputes", &body).await;
    assert_eq!((s, dp["amount"].as_i64()), (200, Some(600)), "{dp}");
    assert_eq!(dp["reason"], "fraudulent");
    let (s, full) = h
        .admin_post(
            "disputes",
            &format!(
                r#"{{"payment_intent":"{pi}","amount":1000,"reason":"duplicate","inquiry":true}}"#
            ),
        )
        .await;
    assert_eq!(
        (s, full["amount"].as_i64(), full["status"].as_str()),
        (200, Some(1000), Some("warning_needs_response"))
    );
    let too_much = format!(r#"{{"payment_intent":"{pi}","amount":1001}}"#);
    assert_eq!(h.admin_post("disputes", &too_much).await.0, 400);
    let bad_reason = format!(r#"{{"payment_intent":"{pi}","reason":"bored"}}"#);
    assert_eq!(h.admin_post("disputes", &bad_reason).await.0, 400);
    assert_eq!(
        h.admin_post("disputes", r#"{"payment_intent":"pi_nope"}"#)
            .await
            .0,
        404
    );
    let declined = h
        .create(None, &charge("op-2", "pm_card_chargeDeclined"))
        .await;
    let declined: Value = declined.json().await.unwrap();
    let declined_pi = declined["error"]["payment_intent"]["id"].as_str().unwrap();
    let unpaid = format!(r#"{{"payment_intent":"{declined_pi}"}}"#);
    assert_eq!(h.admin_post("disputes", &unpaid).await.0, 400);
    assert_eq!(h.admin_post("disputes", "{not json").await.0, 400);
    assert_eq!(
        h.admin_get("disputes").await["disputes"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(h.admin_get("stats").await["disputes"], 2);
}

/// `GET /v1/disputes` by creation time, a page at a time, newest first; by charge; unknown ids
/// are Stripe's 404 `resource_missing`.
#[tokio::test]
async fn disputes_are_listed_and_read_as_stripe_does() {
    let h = start().await;
    let start = h.sim.now_ms() / 1000;
    let mut ids = Vec::new();
    let mut charges = Vec::new();
    for n in 0..5 {
        let (pi, ch) = paid(&h, &format!("op-{n}"), "pm_card_createDispute").await;
        ids.push(dispute_of(&h, &pi).await["id"].as_str().unwrap().to_owned());
        charges.push(ch);
        h.sim.advance(Duration::from_secs(10));
    }
    let window = format!("created[gte]={}&created[lt]={}", start + 10, start + 40);
    let (s, first) = get(&h, &format!("/v1/disputes?{window}&limit=2")).await;
    assert_eq!(s, 200);
    let page = |v: &Value| -> Vec<String> {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(page(&first), [ids[3].clone(), ids[2].clone()]);
    assert_eq!(first["has_more"], true);
    let (_, second) = get(
        &h,
        &format!("/v1/disputes?{window}&limit=2&starting_after={}", ids[2]),
    )
    .await;
    assert_eq!(page(&second), [ids[1].clone()]);
    assert_eq!(second["has_more"], false);
    let (_, by_charge) = get(&h, &format!("/v1/disputes?charge={}", charges[4])).await;
    assert_eq!(page(&by_charge), [ids[4].clone()]);
    let (_, all) = get(&h, "/v1/disputes").await;
    assert_eq!(page(&all).len(), 5);

    let (s, missing) = get(&h, "/v1/disputes/dp_nope").await;
    assert_eq!(
        (s, missing["error"]["code"].as_str()),
        (404, Some("resource_missing"))
    );
    assert_eq!(
        missing["error"]["message"].as_str(),
        Some("No such dispute: 'dp_nope'")
    );
    assert_eq!(get(&h, "/v1/disputes?starting_after=dp_nope").await.0, 404);
    assert_eq!(get(&h, "/v1/disputes?limit=0").await.0, 400);
    assert_eq!(get(&h, "/v1/disputes?bogus=1").await.0, 400);
    let (_, none) = get(&h, "/v1/disputes?payment_intent=pi_nope").await;
    assert_eq!(none["data"].as_array().unwrap().len(), 0);
    let counts = h.sim.request_counts();
    assert!(counts.dispute_read >= 14, "{counts:?}");
}

/// Dispute events go the way refund events do: signed webhooks too, and through the same event
/// faults (a dropped event is counted dropped, not sent).
#[tokio::test]
async fn dispute_events_take_both_paths_and_their_faults() {
    let h = start().await;
    h.sim
        .set_webhooks(WebhookConfig {
            secret: Some("whsec_test".into()),
            ..WebhookConfig::default()
        })
        .unwrap();
    let (pi, _) = paid(&h, "op-1", "pm_card_createDispute").await;
    let signed = h.sim.take_due_webhooks();
    let created = signed
        .iter()
        .find(|d| d.event_type == "charge.dispute.created")
        .expect("a signed dispute event");
    assert_eq!(
        created.event().unwrap()["data"]["object"]["payment_intent"],
        pi
    );

    h.sim
        .set_webhooks(WebhookConfig {
            mode: DeliveryMode::EventBridge,
            faults: WebhookFaults {
                dropped: 1.0,
                ..WebhookFaults::default()
            },
            ..WebhookConfig::default()
        })
        .unwrap();
    let before = h.sim.webhook_counts();
    let (pi2, _) = paid(&h, "op-2", "pm_card_createDispute").await;
    assert!(h.sim.take_due_webhooks().is_empty());
    let after = h.sim.webhook_counts();
    assert_eq!(
        after.dropped - before.dropped,
        4,
        "payment_intent.created, .succeeded, charge.dispute.created, .funds_withdrawn"
    );
    assert_eq!(dispute_of(&h, &pi2).await["status"], "needs_response");
}
