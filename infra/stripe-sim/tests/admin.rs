//! The `/_sim/` admin API and the `stripe-sim` binary.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

#[tokio::test]
async fn faults_endpoint_sets_and_reports_config_and_counts() {
    let h = start().await;
    let (s, v) = h
        .admin_post(
            "faults",
            r#"{"rates":{"rate_limit":0.0,"drop_after_commit":0.0},"latency_ms":50,
                "script":["server_error_before_commit","latency"],"search_lag_secs":0,
                "processing_settle_secs":5,"seed":9}"#,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["latency_ms"], 50);
    assert_eq!(v["seed"], 9);
    assert_eq!(v["search_lag_secs"], 0);
    assert_eq!(v["processing_settle_secs"], 5);
    assert_eq!(
        v["script"],
        serde_json::json!(["server_error_before_commit", "latency"])
    );

    assert_eq!(h.create(Some("k"), &visa("op")).await.status(), 500);
    assert_eq!(h.create(Some("k"), &visa("op")).await.status(), 200);
    let v = h.admin_get("faults").await;
    assert_eq!(v["injected"]["server_error_before_commit"], 1);
    assert_eq!(v["injected"]["latency"], 1);
    assert_eq!(v["injected"]["drop_after_commit"], 0);
    assert_eq!(v["script"], serde_json::json!([]));

    for bad in [
        "{not json",
        r#"{"rates":{"nope":0.5}}"#,
        r#"{"rates":{"rate_limit":2}}"#,
        r#"{"unknown_field":1}"#,
        r#"{"script":"drop_after_commit"}"#,
    ] {
        let (s, v) = h.admin_post("faults", bad).await;
        assert_eq!(s, 400, "{bad}: {v}");
        assert!(v["error"]["message"].is_string());
    }
    let ledger = h.admin_get("ledger").await;
    assert_eq!(ledger["payment_intents"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn clock_endpoint_advances_and_sets() {
    let h = start().await;
    let start_ms = h.admin_get("clock").await["now_ms"].as_i64().unwrap();
    assert_eq!(start_ms, h.sim.now_ms());
    let (s, v) = h.admin_post("clock", r#"{"advance_secs":86400}"#).await;
    assert_eq!(s, 200);
    assert_eq!(v["now_ms"].as_i64().unwrap(), start_ms + 86_400_000);
    let (_, v) = h.admin_post("clock", r#"{"advance_ms":5}"#).await;
    assert_eq!(v["now_ms"].as_i64().unwrap(), start_ms + 86_400_005);
    let (_, v) = h.admin_post("clock", r#"{"set_ms":1000000}"#).await;
    assert_eq!(v["now_ms"], 1_000_000);
    assert_eq!(h.sim.now_ms(), 1_000_000);
    let (s, _) = h.admin_post("clock", r#"{}"#).await;
    assert_eq!(s, 400);
    let (s, _) = h.admin_post("clock", r#"{"advance_secs":"x"}"#).await;
    assert_eq!(s, 400);
    assert!(h.admin_get("ledger").await["payment_intents"]
        .as_array()
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn ledger_stats_reset_and_forced_status() {
    let h = start().await;
    let pi: Value = h
        .create(Some("k1"), &visa("op-1"))
        .await
        .json()
        .await
        .unwrap();
    h.create(None, &charge("op-2", "pm_card_chargeDeclined"))
        .await;
    h.retrieve(pi["id"].as_str().unwrap()).await;
    h.search_op("op-1").await;

    let v = h.admin_get("ledger").await;
    let pis = v["payment_intents"].as_array().unwrap();
    assert_eq!(pis.len(), 2);
    assert_eq!(pis[0]["id"], pi["id"]);
    assert_eq!(pis[0]["operation_id"], "op-1");
    assert_eq!(pis[0]["idempotency_key"], "k1");
    assert_eq!(pis[0]["amount"], 1000);
    assert_eq!(pis[0]["currency"], "usd");
    assert_eq!(pis[0]["status"], "succeeded");
    assert!(pis[0]["created_ms"].is_i64());
    assert!(pis[1]["idempotency_key"].is_null());
    assert_eq!(pis[1]["status"], "requires_payment_method");
    assert_eq!(
        v["requests"],
        serde_json::json!({"create":2,"retrieve":1,"search":1,"cancel":0,"capture":0,"refund":0,"refund_cancel":0,"refund_read":0,"list":0,"dispute_read":0,"dispute_update":0})
    );

    let stats = h.admin_get("stats").await;
    assert_eq!(stats["payment_intents"], 2);
    assert_eq!(stats["idempotency_keys"], 1);

    let path = format!("payment_intents/{}/status", pi["id"].as_str().unwrap());
    let (s, _) = h.admin_post(&path, r#"{"status":"canceled"}"#).await;
    assert_eq!(s, 200);
    let got: Value = h
        .retrieve(pi["id"].as_str().unwrap())
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(got["status"], "canceled");
    assert_eq!(h.sim.ledger()[0].status, "canceled");
    let (s, _) = h.admin_post(&path, r#"{"status":"bogus"}"#).await;
    assert_eq!(s, 400);
    let (s, _) = h
        .admin_post("payment_intents/pi_nope/status", r#"{"status":"canceled"}"#)
        .await;
    assert_eq!(s, 404);

    let now = h.sim.now_ms();
    let (s, _) = h.admin_post("reset", "").await;
    assert_eq!(s, 200);
    assert_eq!(h.sim.now_ms(), now, "reset keeps the clock");
    let v = h.admin_get("ledger").await;
    assert!(v["payment_intents"].as_array().unwrap().is_empty());
    assert_eq!(
        v["requests"],
        serde_json::json!({"create":0,"retrieve":0,"search":0,"cancel":0,"capture":0,"refund":0,"refund_cancel":0,"refund_read":0,"list":0,"dispute_read":0,"dispute_update":0})
    );
    // Keys are gone too: the same key creates anew.
    let r = h.create(Some("k1"), &visa("op-1")).await;
    assert!(!replayed(&r));
    assert_eq!(h.sim.ledger().len(), 1);
    let r = h
        .client
        .get(format!("{}/_sim/nope", h.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn binary_prints_its_address_and_serves() {
    let mut bin = spawn_binary(&["--api-key", "sk_test_bin", "--search-lag-secs", "0"]).await;
    let base = bin.base.clone();
    let port: u16 = base
        .strip_prefix("http://127.0.0.1:")
        .unwrap_or_else(|| panic!("not a loopback address: {base}"))
        .parse()
        .unwrap();
    assert_ne!(port, 0);

    let client = common::client();
    let r = client
        .post(format!("{base}/v1/payment_intents"))
        .bearer_auth("sk_test_bin")
        .form(&visa("op-bin"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v = get_json(&format!("{base}/_sim/ledger")).await;
    assert_eq!(v["payment_intents"].as_array().unwrap().len(), 1);

    // SIGTERM ends it cleanly.
    let pid = bin.child.id().unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let status = tokio::time::timeout(Duration::from_secs(10), bin.child.wait())
        .await
        .expect("exits after SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
}
