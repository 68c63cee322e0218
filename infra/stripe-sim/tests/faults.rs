//! Fault injection over real HTTP, and the external time source.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::Value;
use stripe_sim::{FaultConfig, FaultKind, SimConfig};

#[tokio::test]
async fn server_error_before_commit_creates_nothing_and_saves_nothing() {
    let h = start().await;
    h.sim.push_script([FaultKind::ServerErrorBeforeCommit]);
    let r = h.create(Some("k"), &visa("op")).await;
    assert_eq!(r.status(), 500);
    assert_eq!(header(&r, "stripe-should-retry"), Some("false"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "api_error");
    assert!(h.sim.ledger().is_empty());

    let r = h.create(Some("k"), &visa("op")).await;
    assert_eq!(r.status(), 200);
    assert!(!replayed(&r), "the 500 was not saved");
    assert_eq!(h.sim.ledger().len(), 1);
    assert_eq!(h.sim.injected()[&FaultKind::ServerErrorBeforeCommit], 1);
}

#[tokio::test]
async fn server_error_after_commit_is_saved_and_replayed() {
    let h = start().await;
    h.sim.push_script([FaultKind::ServerErrorAfterCommit]);
    let r = h.create(Some("k"), &visa("op-500")).await;
    assert_eq!(r.status(), 500);
    assert!(!replayed(&r));
    let first = r.text().await.unwrap();

    let ledger = h.sim.ledger();
    assert_eq!(ledger.len(), 1, "the PaymentIntent exists");
    assert_eq!(ledger[0].status, "succeeded");

    let r = h.create(Some("k"), &visa("op-500")).await;
    assert_eq!(r.status(), 500);
    assert!(replayed(&r));
    assert_eq!(header(&r, "stripe-should-retry"), Some("false"));
    assert_eq!(r.text().await.unwrap(), first);

    h.sim.advance(Duration::from_secs(30));
    let found = h.search_op("op-500").await;
    assert_eq!(found["data"][0]["id"], ledger[0].id.as_str());
    assert_eq!(h.sim.ledger().len(), 1);
}

#[tokio::test]
async fn drop_after_commit_closes_the_connection_without_a_response() {
    let h = start().await;
    h.sim.push_script([FaultKind::DropAfterCommit]);
    let err = h
        .try_create(Some("k"), &visa("op-drop"))
        .await
        .expect_err("no HTTP response must arrive");
    assert!(
        err.is_request() || err.is_connect() || err.is_body(),
        "unexpected error kind: {err:?}"
    );
    assert!(err.status().is_none());

    let ledger = h.sim.ledger();
    assert_eq!(ledger.len(), 1, "committed before the drop");
    assert_eq!(ledger[0].idempotency_key.as_deref(), Some("k"));

    let r = h.create(Some("k"), &visa("op-drop")).await;
    assert_eq!(r.status(), 200);
    assert!(replayed(&r));
    let pi: Value = r.json().await.unwrap();
    assert_eq!(pi["id"], ledger[0].id.as_str());
    assert_eq!(h.sim.ledger().len(), 1);
    assert_eq!(h.sim.injected()[&FaultKind::DropAfterCommit], 1);
}

#[tokio::test]
async fn rate_limit_is_decided_before_the_idempotency_layer() {
    let h = start().await;
    h.sim.set_faults(FaultConfig {
        rates: [(FaultKind::RateLimit, 1.0)].into(),
        ..FaultConfig::default()
    });
    let r = h.create(Some("k"), &visa("op")).await;
    assert_eq!(r.status(), 429);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "rate_limit");
    let r = h.retrieve("pi_x").await;
    assert_eq!(r.status(), 429, "reads are rate limited too");
    assert!(h.sim.ledger().is_empty());

    h.sim.set_faults(FaultConfig::default());
    let r = h.create(Some("k"), &visa("op")).await;
    assert_eq!(r.status(), 200);
    assert!(!replayed(&r));
    assert_eq!(h.sim.ledger().len(), 1);
    assert_eq!(h.sim.injected()[&FaultKind::RateLimit], 2);
}

#[tokio::test]
async fn key_in_use_fault_creates_and_saves_nothing() {
    let h = start().await;
    h.sim.push_script([FaultKind::KeyInUse]);
    let r = h.create(Some("k"), &visa("op")).await;
    assert_eq!(r.status(), 409);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "idempotency_key_in_use");
    assert!(h.sim.ledger().is_empty());
    let r = h.create(Some("k"), &visa("op")).await;
    assert_eq!(r.status(), 200);
    assert!(!replayed(&r));
    assert_eq!(h.sim.ledger().len(), 1);
}

#[tokio::test]
async fn script_entries_wait_for_a_request_they_apply_to() {
    let h = start().await;
    h.create(Some("k"), &visa("op")).await;
    h.sim.push_script([FaultKind::ServerErrorAfterCommit]);
    // A replay does not execute, so it does not consume the scripted fault.
    let r = h.create(Some("k"), &visa("op")).await;
    assert_eq!(r.status(), 200);
    assert!(replayed(&r));
    assert_eq!(
        h.sim.faults().script,
        vec![FaultKind::ServerErrorAfterCommit]
    );
    let r = h.create(Some("k2"), &visa("op2")).await;
    assert_eq!(r.status(), 500);
    assert!(h.sim.faults().script.is_empty());
    assert_eq!(h.sim.ledger().len(), 2);
}

async fn outcome_sequence(seed: u64) -> (Vec<String>, BTreeMap<FaultKind, u64>, usize) {
    let h = start_with(SimConfig {
        seed,
        faults: FaultConfig {
            rates: [
                (FaultKind::RateLimit, 0.15),
                (FaultKind::ServerErrorBeforeCommit, 0.15),
                (FaultKind::DropAfterCommit, 0.15),
                (FaultKind::ServerErrorAfterCommit, 0.15),
            ]
            .into(),
            ..FaultConfig::default()
        },
        ..SimConfig::default()
    })
    .await;
    let mut out = Vec::new();
    for i in 0..40 {
        let key = format!("k{i}");
        out.push(match h.try_create(Some(&key), &visa(&key)).await {
            Ok(r) => r.status().as_u16().to_string(),
            Err(_) => "dropped".to_string(),
        });
    }
    (out, h.sim.injected(), h.sim.ledger().len())
}

#[tokio::test]
async fn faults_are_deterministic_for_a_seed() {
    let (a, inj_a, n_a) = outcome_sequence(42).await;
    let (b, inj_b, n_b) = outcome_sequence(42).await;
    assert_eq!(a, b);
    assert_eq!(inj_a, inj_b);
    assert_eq!(n_a, n_b);
    let kinds: std::collections::BTreeSet<_> = a.iter().collect();
    assert!(kinds.len() >= 4, "a mix of outcomes: {a:?}");
    // Ledger = 200s + drops + 500-after-commit.
    let committed = a.iter().filter(|s| *s == "200" || *s == "dropped").count() as u64
        + inj_a
            .get(&FaultKind::ServerErrorAfterCommit)
            .copied()
            .unwrap_or(0);
    assert_eq!(n_a as u64, committed);
    let (c, _, _) = outcome_sequence(43).await;
    assert_ne!(a, c);
}

#[tokio::test]
async fn external_time_source_drives_search_settlement_and_pruning() {
    let t = Arc::new(AtomicI64::new(1_700_000_000_000));
    let t2 = t.clone();
    let h = start_with(SimConfig {
        time_source: Some(Arc::new(move || t2.load(Ordering::SeqCst))),
        ..SimConfig::default()
    })
    .await;
    assert_eq!(h.sim.now_ms(), 1_700_000_000_000);
    let pi: Value = h
        .create(Some("k"), &charge("op-ext", "pm_card_processing_succeeds"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(pi["created"], 1_700_000_000);
    assert_eq!(
        h.search_op("op-ext").await["data"]
            .as_array()
            .unwrap()
            .len(),
        0
    );

    t.fetch_add(30_000, Ordering::SeqCst);
    let found = h.search_op("op-ext").await;
    assert_eq!(found["data"][0]["status"], "processing");

    t.fetch_add(600_000, Ordering::SeqCst);
    assert_eq!(
        h.search_op("op-ext").await["data"][0]["status"],
        "succeeded"
    );

    t.fetch_add(24 * 3600 * 1000, Ordering::SeqCst);
    let r = h
        .create(Some("k"), &charge("op-ext", "pm_card_processing_succeeds"))
        .await;
    assert!(!replayed(&r), "key pruned by the external clock");
    let ledger = h.sim.ledger();
    assert_eq!(ledger.len(), 2);
    assert_eq!(ledger[0].created_ms, 1_700_000_000_000);
    assert_eq!(ledger[0].status, "succeeded");
}

#[tokio::test]
async fn drop_after_commit_writes_zero_bytes_on_the_socket() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = start().await;
    h.sim.push_script([FaultKind::DropAfterCommit]);
    let body = "amount=5&currency=usd&payment_method=pm_card_visa&confirm=true";
    let req = format!(
        "POST /v1/payment_intents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_test_charge_once\r\n\
         Idempotency-Key: raw\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(h.running.addr)
        .await
        .unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .expect("server closes the connection");
    // Either a clean EOF or a reset, but never a byte of HTTP.
    assert!(buf.is_empty(), "got {:?}", String::from_utf8_lossy(&buf));
    drop(read);
    assert_eq!(h.sim.ledger().len(), 1);
}
