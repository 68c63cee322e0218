//! PaymentIntents endpoints over real HTTP: auth, create, validation, test
//! payment methods, retrieve, search.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

#[tokio::test]
async fn auth_missing_or_wrong_key_is_401_without_echoing_the_key() {
    let h = start().await;
    let url = format!("{}/v1/payment_intents", h.base);

    let r = h.client.post(&url).form(&visa("op")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");

    let wrong = "sk_test_wrongwrongwrong1234";
    let r = h
        .client
        .post(&url)
        .bearer_auth(wrong)
        .form(&visa("op"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(header(&r, "request-id").unwrap().starts_with("req_"));
    let v: Value = r.json().await.unwrap();
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Invalid API Key provided: sk_test_"),
        "{msg}"
    );
    assert!(!msg.contains(wrong));

    // HTTP basic with the key as username is accepted.
    let r = h
        .client
        .post(&url)
        .basic_auth("sk_test_charge_once", Some(""))
        .form(&visa("op"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let ledger = h.sim.ledger();
    assert_eq!(ledger.len(), 1, "only the authenticated request created");
    assert_eq!(h.sim.request_counts().create, 1);
}

#[tokio::test]
async fn create_succeeded_has_stripe_shape_and_is_in_the_ledger() {
    let h = start().await;
    let r = h.create(Some("k1"), &visa("op-1")).await;
    assert_eq!(r.status(), 200);
    assert!(header(&r, "request-id").unwrap().starts_with("req_"));
    assert!(!replayed(&r));
    let pi: Value = r.json().await.unwrap();
    let id = pi["id"].as_str().unwrap();
    assert!(id.starts_with("pi_") && id.len() == 27, "{id}");
    assert!(id[3..].chars().all(|c| c.is_ascii_alphanumeric()));
    assert_eq!(pi["object"], "payment_intent");
    assert_eq!(pi["amount"], 1000);
    assert_eq!(pi["currency"], "usd");
    assert_eq!(pi["customer"], "cus_test");
    assert_eq!(pi["payment_method"], "pm_card_visa");
    assert_eq!(pi["status"], "succeeded");
    assert_eq!(pi["metadata"]["operation_id"], "op-1");
    assert_eq!(pi["livemode"], false);
    assert_eq!(pi["capture_method"], "automatic");
    assert_eq!(pi["confirmation_method"], "automatic");
    assert!(pi["latest_charge"].as_str().unwrap().starts_with("ch_"));
    assert!(pi["last_payment_error"].is_null());
    assert!(pi["client_secret"]
        .as_str()
        .unwrap()
        .starts_with(&format!("{id}_secret_")));
    assert_eq!(pi["created"].as_i64().unwrap(), h.sim.now_ms() / 1000);

    let ledger = h.sim.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].id, id);
    assert_eq!(ledger[0].operation_id.as_deref(), Some("op-1"));
    assert_eq!(ledger[0].idempotency_key.as_deref(), Some("k1"));
    assert_eq!(ledger[0].status, "succeeded");

    let got: Value = h.retrieve(id).await.json().await.unwrap();
    assert_eq!(got, pi);
}

#[tokio::test]
async fn validation_failures_are_400_with_param_and_not_saved() {
    let h = start().await;
    let mut no_amount = visa("op");
    no_amount.retain(|(k, _)| k != "amount");
    let r = h.create(Some("k"), &no_amount).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["param"], "amount");
    assert_eq!(v["error"]["code"], "parameter_missing");

    let mut bad_currency = visa("op");
    bad_currency[1].1 = "us dollars".into();
    let v: Value = h.create(None, &bad_currency).await.json().await.unwrap();
    assert_eq!(v["error"]["param"], "currency");

    let r = h.create(Some("k"), &charge("op", "pm_card_nope")).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "resource_missing");
    assert_eq!(v["error"]["param"], "payment_method");
    assert!(h.sim.ledger().is_empty());

    // Not saved: the same key with valid (different) params executes.
    let r = h.create(Some("k"), &visa("op")).await;
    assert_eq!(r.status(), 200);
    assert!(!replayed(&r));
    assert_eq!(h.sim.ledger().len(), 1);
}

#[tokio::test]
async fn declines_are_402_card_errors_with_the_payment_intent() {
    let h = start().await;
    for (pm, decline) in [
        ("pm_card_chargeDeclined", "generic_decline"),
        (
            "pm_card_visa_chargeDeclinedInsufficientFunds",
            "insufficient_funds",
        ),
    ] {
        let r = h.create(Some(pm), &charge(pm, pm)).await;
        assert_eq!(r.status(), 402);
        let v: Value = r.json().await.unwrap();
        let e = &v["error"];
        assert_eq!(e["type"], "card_error");
        assert_eq!(e["code"], "card_declined");
        assert_eq!(e["decline_code"], decline);
        assert_eq!(e["payment_intent"]["status"], "requires_payment_method");
        assert_eq!(
            e["payment_intent"]["last_payment_error"]["decline_code"],
            decline
        );
        let id = e["payment_intent"]["id"].as_str().unwrap();
        let got: Value = h.retrieve(id).await.json().await.unwrap();
        assert_eq!(got["status"], "requires_payment_method");

        // The 402 is saved: a retry replays it.
        let r = h.create(Some(pm), &charge(pm, pm)).await;
        assert_eq!(r.status(), 402);
        assert!(replayed(&r));
    }
    let ledger = h.sim.ledger();
    assert_eq!(ledger.len(), 2);
    assert!(ledger.iter().all(|e| e.status == "requires_payment_method"));
}

#[tokio::test]
async fn processing_settles_lazily_but_replays_show_the_original() {
    let h = start().await;
    let params = charge("op-p", "pm_card_processing_succeeds");
    let r = h.create(Some("kp"), &params).await;
    assert_eq!(r.status(), 200);
    let pi: Value = r.json().await.unwrap();
    assert_eq!(pi["status"], "processing");
    let id = pi["id"].as_str().unwrap();

    h.sim.advance(Duration::from_secs(599));
    let got: Value = h.retrieve(id).await.json().await.unwrap();
    assert_eq!(got["status"], "processing");
    assert_eq!(h.sim.ledger()[0].status, "processing");

    h.sim.advance(Duration::from_secs(1));
    let got: Value = h.retrieve(id).await.json().await.unwrap();
    assert_eq!(got["status"], "succeeded");
    let found = h.search_op("op-p").await;
    assert_eq!(found["data"][0]["status"], "succeeded");

    let r = h.create(Some("kp"), &params).await;
    assert!(replayed(&r));
    let replay: Value = r.json().await.unwrap();
    assert_eq!(replay["id"], id);
    assert_eq!(
        replay["status"], "processing",
        "replay returns the saved body"
    );

    let r = h
        .create(Some("kf"), &charge("op-f", "pm_card_processing_fails"))
        .await;
    let pi: Value = r.json().await.unwrap();
    assert_eq!(pi["status"], "processing");
    h.sim.advance(Duration::from_secs(600));
    let got: Value = h
        .retrieve(pi["id"].as_str().unwrap())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["status"], "requires_payment_method");
    assert!(got["last_payment_error"].is_object());

    let ledger = h.sim.ledger();
    assert_eq!(ledger.len(), 2);
    assert_eq!(ledger[0].status, "succeeded");
    assert_eq!(ledger[1].status, "requires_payment_method");
}

#[tokio::test]
async fn three_d_secure_requires_action_on_session_and_declines_off_session() {
    let h = start().await;
    let mut on_session = charge("op-3ds", "pm_card_threeDSecureRequired");
    on_session.retain(|(k, _)| k != "off_session");
    let r = h.create(None, &on_session).await;
    assert_eq!(r.status(), 200);
    let pi: Value = r.json().await.unwrap();
    assert_eq!(pi["status"], "requires_action");
    assert!(pi["next_action"].is_object());

    let r = h
        .create(None, &charge("op-3ds-off", "pm_card_threeDSecureRequired"))
        .await;
    assert_eq!(r.status(), 402);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "authentication_required");

    let ledger = h.sim.ledger();
    assert_eq!(ledger.len(), 2);
    assert_eq!(ledger[0].status, "requires_action");
    assert_eq!(ledger[1].status, "requires_payment_method");
}

#[tokio::test]
async fn retrieve_unknown_is_404_resource_missing() {
    let h = start().await;
    let r = h.retrieve("pi_doesnotexist").await;
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "resource_missing");
    assert_eq!(
        v["error"]["param"], "intent",
        "Stripe names the path parameter `intent`"
    );
    assert!(h.sim.ledger().is_empty());
    assert_eq!(h.sim.request_counts().retrieve, 1);
}

#[tokio::test]
async fn search_is_eventually_consistent() {
    let h = start().await;
    let r = h.create(Some("k"), &visa("op-s")).await;
    let pi: Value = r.json().await.unwrap();

    let found = h.search_op("op-s").await;
    assert_eq!(found["object"], "search_result");
    assert_eq!(found["url"], "/v1/payment_intents/search");
    assert_eq!(found["has_more"], false);
    assert!(found["next_page"].is_null());
    assert_eq!(
        found["data"].as_array().unwrap().len(),
        0,
        "not yet indexed"
    );

    h.sim.advance(Duration::from_secs(29));
    assert_eq!(
        h.search_op("op-s").await["data"].as_array().unwrap().len(),
        0
    );
    h.sim.advance(Duration::from_secs(1));
    let found = h.search_op("op-s").await;
    assert_eq!(found["data"].as_array().unwrap().len(), 1);
    assert_eq!(found["data"][0]["id"], pi["id"]);
    assert_eq!(
        h.search_op("other").await["data"].as_array().unwrap().len(),
        0
    );

    assert_eq!(h.sim.ledger().len(), 1);
    assert_eq!(h.sim.request_counts().search, 4);
}

#[tokio::test]
async fn search_query_parsing_handles_quotes_and_rejects_the_rest() {
    let h = start().await;
    h.sim.set_search_lag(Duration::ZERO);
    let op = "it's \"quoted\"";
    h.create(None, &visa(op)).await;
    h.create(None, &visa("plain")).await;

    let found = h.search_op(op).await;
    assert_eq!(found["data"].as_array().unwrap().len(), 1);
    assert_eq!(found["data"][0]["metadata"]["operation_id"], op);

    let r = h.search_raw(r#"metadata["operation_id"]:"plain""#).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["data"].as_array().unwrap().len(), 1);

    for bad in [
        "status:'succeeded'",
        "metadata['operation_id']:'x' AND amount>1",
    ] {
        let r = h.search_raw(bad).await;
        assert_eq!(r.status(), 400, "{bad}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "query");
    }
    let r = h.get("/v1/payment_intents/search").await;
    assert_eq!(r.status(), 400);
    assert_eq!(h.sim.ledger().len(), 2);
}

#[tokio::test]
async fn unknown_routes_are_stripe_shaped_404s() {
    let h = start().await;
    let r = h.get("/v1/customers").await;
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(h.sim.ledger().is_empty());
}

/// Retrieve and search answers are written without building their JSON tree: the text is the
/// tree's (parsing and writing it again gives the same bytes, keys in order).
#[test]
fn retrieve_and_search_write_the_bytes_the_json_tree_writes() {
    use stripe_sim::{CreateStart, Outcome, SimConfig, StripeSim};
    let sim = StripeSim::new(SimConfig::default());
    let mut ids = Vec::new();
    for pm in [
        "pm_card_visa",
        "pm_card_chargeDeclined",
        "pm_card_threeDSecureRequired",
    ] {
        let mut form = charge("op-s", pm);
        form.push(("off_session".into(), "false".into()));
        form.retain(|(k, v)| k != "off_session" || v == "false");
        let CreateStart::Done(Outcome::Answered(a)) = sim.create_in_process(None, form) else {
            panic!("no answer");
        };
        let v: Value = serde_json::from_slice(&a.body).unwrap();
        let pi = if v["error"].is_object() {
            v["error"]["payment_intent"].clone()
        } else {
            v
        };
        ids.push(pi["id"].as_str().unwrap().to_owned());
    }
    let canonical = |body: &[u8]| {
        let v: Value = serde_json::from_slice(body).unwrap();
        assert_eq!(v.to_string().as_bytes(), body);
        v
    };
    for id in &ids {
        let a = sim.retrieve_in_process(id);
        assert_eq!(a.status, 200);
        assert_eq!(canonical(&a.body)["id"], id.as_str());
    }
    // Past search's visibility lag.
    sim.advance(Duration::from_secs(3600));
    let a = sim.search_in_process("metadata['operation_id']:'op-s'");
    let v = canonical(&a.body);
    assert_eq!(v["data"].as_array().unwrap().len(), 3);
    assert_eq!(v["object"], "search_result");
    let none = sim.search_in_process("metadata['operation_id']:'nobody'");
    assert_eq!(canonical(&none.body)["data"], serde_json::json!([]));
}
