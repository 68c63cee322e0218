//! The Stripe client against the Stripe simulator over real HTTP on loopback: every classification,
//! each checked against what the simulator's ledger shows really exists.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use charge_core::{
    domain::{Amount, OperationId},
    outcome::{GatewayError, PaymentIntentStatus, RetryCause},
};
use charge_once::adapters::stripe::{SecretKey, StripeConfig, StripeGateway};
use charge_once::ports::{CancelPaymentIntent, CreatePaymentIntent, PaymentIntents, StripeRefunds};
use charge_once::testing;
use stripe_sim::{FaultConfig, FaultKind};
use testkit::stripe::StripeSide;

fn create_req(pm: &str, amount: i64) -> CreatePaymentIntent {
    CreatePaymentIntent::for_operation(
        &charge_core::testing::order("order-gateway-test")
            .amount(amount)
            .payment_method(pm)
            .build(),
    )
    .expect("a charge operation")
}

#[tokio::test]
async fn create_succeeds_with_key_and_metadata() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let req = create_req("pm_card_visa", 1250);
    let pi = gw.create(&req).await.unwrap();
    assert_eq!(pi.status, PaymentIntentStatus::Succeeded);
    assert!(!pi.replayed);
    let ledger = s.sim.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].id, pi.id);
    assert_eq!(ledger[0].amount, 1250);
    assert_eq!(ledger[0].currency, "usd");
    assert_eq!(
        ledger[0].operation_id.as_deref(),
        Some(req.operation_id.to_string().as_str())
    );
    assert_eq!(
        ledger[0].idempotency_key.as_deref(),
        Some(req.idempotency_key.as_str())
    );
}

#[tokio::test]
async fn same_key_replays_the_first_answer() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let req = create_req("pm_card_visa", 500);
    let first = gw.create(&req).await.unwrap();
    let second = gw.create(&req).await.unwrap();
    assert_eq!(first.id, second.id);
    assert!(second.replayed, "Idempotent-Replayed surfaced");
    assert_eq!(s.sim.ledger().len(), 1);
}

#[tokio::test]
async fn dropped_response_is_ambiguous_and_the_charge_exists() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    s.sim.push_script([FaultKind::DropAfterCommit]);
    let req = create_req("pm_card_visa", 700);
    let err = gw.create(&req).await.unwrap_err();
    assert!(matches!(err, GatewayError::Ambiguous { .. }), "{err:?}");
    assert_eq!(
        s.sim.injected()[&FaultKind::DropAfterCommit],
        1,
        "the fault happened"
    );
    assert_eq!(
        s.sim.ledger().len(),
        1,
        "created although the caller saw a reset"
    );

    let retried = gw.create(&req).await.unwrap();
    assert!(retried.replayed);
    assert_eq!(retried.id, s.sim.ledger()[0].id.as_str());
    assert_eq!(s.sim.ledger().len(), 1);
}

#[tokio::test]
async fn an_in_call_retry_reuses_the_key_and_recovers_a_dropped_response() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway_with(|c| c.max_network_retries = 2);
    s.sim.push_script([FaultKind::DropAfterCommit]);
    let req = create_req("pm_card_visa", 700);
    let pi = gw.create(&req).await.unwrap();
    assert!(pi.replayed, "the retry was a replay under the same key");
    assert_eq!(s.sim.injected()[&FaultKind::DropAfterCommit], 1);
    assert_eq!(s.sim.request_counts().create, 2);
    assert_eq!(gw.requests.total(), 2);
    let ledger = s.sim.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(
        ledger[0].idempotency_key.as_deref(),
        Some(req.idempotency_key.as_str())
    );
}

#[tokio::test]
async fn server_error_before_commit_is_ambiguous_and_nothing_exists() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    s.sim.push_script([FaultKind::ServerErrorBeforeCommit]);
    let req = create_req("pm_card_visa", 700);
    assert!(matches!(
        gw.create(&req).await,
        Err(GatewayError::Ambiguous { .. })
    ));
    assert_eq!(s.sim.ledger().len(), 0);
    assert_eq!(s.sim.injected()[&FaultKind::ServerErrorBeforeCommit], 1);
    // Not saved: the same key creates now.
    assert_eq!(
        gw.create(&req).await.unwrap().status,
        PaymentIntentStatus::Succeeded
    );
    assert_eq!(s.sim.ledger().len(), 1);
}

#[tokio::test]
async fn server_error_after_commit_is_replayed_and_stays_ambiguous() {
    let s = StripeSide::with_new_clock().await;
    // Stripe marks saved 500s Stripe-Should-Retry: false; even with retries on, no second try.
    let gw = s.gateway_with(|c| c.max_network_retries = 2);
    s.sim.push_script([FaultKind::ServerErrorAfterCommit]);
    let req = create_req("pm_card_visa", 700);
    for _ in 0..2 {
        let err = gw.create(&req).await.unwrap_err();
        assert!(matches!(err, GatewayError::Ambiguous { .. }), "{err:?}");
    }
    assert_eq!(
        s.sim.request_counts().create,
        2,
        "no in-call retry of a saved 500"
    );
    assert_eq!(
        s.sim.ledger().len(),
        1,
        "one PaymentIntent behind the replayed 500"
    );
}

#[tokio::test]
async fn declines_are_settled_with_the_payment_intent() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    for (pm, code) in [
        ("pm_card_chargeDeclined", "generic_decline"),
        (
            "pm_card_visa_chargeDeclinedInsufficientFunds",
            "insufficient_funds",
        ),
    ] {
        match gw.create(&create_req(pm, 900)).await.unwrap_err() {
            GatewayError::Declined {
                code: got,
                payment_intent_id: Some(id),
            } => {
                assert_eq!(got, code);
                let entry = s.sim.ledger().into_iter().find(|e| e.id == *id).unwrap();
                assert_eq!(entry.status, "requires_payment_method");
            }
            other => panic!("expected a decline, got {other:?}"),
        }
    }
    assert_eq!(s.sim.ledger().len(), 2);
}

/// The cancel of a declined intent over HTTP: `POST /v1/payment_intents/{id}/cancel` with the
/// cancel key and `cancellation_reason=abandoned`; Stripe's `canceled` back, the same answer
/// replayed under the key; a paid intent refused as `UnexpectedState`; faults classified as any
/// call's.
#[tokio::test]
async fn a_declined_intent_is_canceled_with_its_own_key() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let op = charge_core::testing::order("order-cancel")
        .amount(900)
        .payment_method("pm_card_chargeDeclined")
        .build();
    let Err(GatewayError::Declined {
        payment_intent_id: Some(id),
        ..
    }) = gw
        .create(&CreatePaymentIntent::for_operation(&op).expect("a charge operation"))
        .await
    else {
        panic!("declined")
    };
    let req = CancelPaymentIntent::for_operation(&op, id.clone());
    assert_eq!(
        req.idempotency_key.as_str(),
        format!("payment-op-cancel:{}", op.operation_id)
    );
    let pi = gw.cancel(&req).await.unwrap();
    assert_eq!(pi.id, id);
    assert_eq!(pi.status, PaymentIntentStatus::Canceled);
    assert_eq!(pi.operation_id, Some(op.operation_id.to_string()));
    assert!(!pi.replayed);
    let replay = gw.cancel(&req).await.unwrap();
    assert!(replay.replayed, "the same key replays the first answer");
    assert_eq!(replay.status, PaymentIntentStatus::Canceled);
    assert_eq!(s.sim.request_counts().cancel, 2);
    assert_eq!(
        gw.requests
            .cancel
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    let entry = s.sim.ledger().into_iter().find(|e| e.id == *id).unwrap();
    assert_eq!(entry.status, "canceled");

    // A paid intent is not canceled: Stripe says it moved on.
    let paid = charge_core::testing::order("order-paid")
        .payment_method("pm_card_visa")
        .build();
    let pi = gw
        .create(&CreatePaymentIntent::for_operation(&paid).expect("a charge operation"))
        .await
        .unwrap();
    let err = gw
        .cancel(&CancelPaymentIntent::for_operation(&paid, pi.id.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, GatewayError::UnexpectedState { .. }),
        "{err:?}"
    );
    assert_eq!(
        s.sim
            .ledger()
            .into_iter()
            .find(|e| e.id == *pi.id)
            .unwrap()
            .status,
        "succeeded"
    );
    // An intent Stripe does not know: rejected.
    let unknown = charge_core::domain::PaymentIntentId::parse("pi_doesNotExist").unwrap();
    let err = gw
        .cancel(&CancelPaymentIntent::for_operation(&paid, unknown))
        .await
        .unwrap_err();
    assert!(matches!(err, GatewayError::Rejected { .. }), "{err:?}");
}

#[tokio::test]
async fn a_cancels_faults_are_classified_as_any_calls() {
    for (kind, want) in [
        (FaultKind::RateLimit, "retry later"),
        (FaultKind::ServerErrorBeforeCommit, "outcome unknown"),
        (FaultKind::DropAfterCommit, "outcome unknown"),
        (FaultKind::ServerErrorAfterCommit, "outcome unknown"),
    ] {
        let s = StripeSide::with_new_clock().await;
        let gw = s.gateway_with(|c| c.max_network_retries = 0);
        let op = charge_core::testing::order("order-cancel-fault")
            .payment_method("pm_card_chargeDeclined")
            .build();
        let Err(GatewayError::Declined {
            payment_intent_id: Some(id),
            ..
        }) = gw
            .create(&CreatePaymentIntent::for_operation(&op).expect("a charge operation"))
            .await
        else {
            panic!("declined")
        };
        s.sim.set_faults(FaultConfig {
            rates: [(kind, 1.0)].into(),
            faults_on_reads: false,
            ..FaultConfig::default()
        });
        let err = gw
            .cancel(&CancelPaymentIntent::for_operation(&op, id.clone()))
            .await
            .unwrap_err();
        assert!(err.to_string().starts_with(want), "{kind}: {err}");
        assert_eq!(s.sim.injected()[&kind], 1, "{kind}: the fault happened");
        let status = s
            .sim
            .ledger()
            .into_iter()
            .find(|e| e.id == *id)
            .unwrap()
            .status;
        let executed = matches!(
            kind,
            FaultKind::DropAfterCommit | FaultKind::ServerErrorAfterCommit
        );
        assert_eq!(
            status,
            if executed {
                "canceled"
            } else {
                "requires_payment_method"
            },
            "{kind}"
        );
    }
}

#[tokio::test]
async fn rate_limit_and_key_in_use_mean_retry_later_and_nothing_exists() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    s.sim
        .push_script([FaultKind::RateLimit, FaultKind::KeyInUse]);
    let req = create_req("pm_card_visa", 300);
    assert!(matches!(
        gw.create(&req).await,
        Err(GatewayError::RetryLater {
            cause: RetryCause::RateLimited,
            ..
        })
    ));
    assert!(matches!(
        gw.create(&req).await,
        Err(GatewayError::RetryLater {
            cause: RetryCause::KeyInUse,
            ..
        })
    ));
    assert_eq!(s.sim.ledger().len(), 0);
    // Neither was saved under the key: the next try creates.
    assert!(!gw.create(&req).await.unwrap().replayed);
    assert_eq!(s.sim.ledger().len(), 1);
}

#[tokio::test]
async fn a_request_while_the_key_is_in_flight_gets_409() {
    let s = StripeSide::with_new_clock().await;
    s.sim.set_faults(FaultConfig {
        latency: Duration::from_millis(800),
        script: vec![FaultKind::Latency],
        ..FaultConfig::default()
    });
    let gw = Arc::new(s.gateway());
    let req = create_req("pm_card_visa", 300);
    let slow = {
        let gw = gw.clone();
        let req = req.clone();
        tokio::spawn(async move { gw.create(&req).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let concurrent = gw.create(&req).await;
    assert!(matches!(
        concurrent,
        Err(GatewayError::RetryLater {
            cause: RetryCause::KeyInUse,
            ..
        })
    ));
    let first = slow.await.unwrap().unwrap();
    assert_eq!(first.status, PaymentIntentStatus::Succeeded);
    assert_eq!(s.sim.ledger().len(), 1);
}

#[tokio::test]
async fn a_timeout_is_ambiguous_and_the_charge_exists() {
    let s = StripeSide::with_new_clock().await;
    s.sim.set_faults(FaultConfig {
        latency: Duration::from_millis(1500),
        script: vec![FaultKind::Latency],
        ..FaultConfig::default()
    });
    let gw = s.gateway_with(|c| c.timeout = Duration::from_millis(300));
    let req = create_req("pm_card_visa", 300);
    let err = gw.create(&req).await.unwrap_err();
    assert!(
        matches!(err, GatewayError::Ambiguous { ref detail } if detail.contains("timeout")),
        "{err:?}"
    );
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(
        s.sim.ledger().len(),
        1,
        "the request completed at Stripe after we gave up"
    );
}

#[tokio::test]
async fn same_key_other_parameters_is_key_misuse() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let req = create_req("pm_card_visa", 300);
    gw.create(&req).await.unwrap();
    let mut other = req.clone();
    other.params.amount = Amount::new(301).unwrap();
    assert!(matches!(
        gw.create(&other).await,
        Err(GatewayError::KeyMisuse { .. })
    ));
    assert_eq!(s.sim.ledger().len(), 1);
}

#[tokio::test]
async fn invalid_requests_are_rejected_and_nothing_exists() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    match gw.create(&create_req("pm_card_doesNotExist", 300)).await {
        Err(GatewayError::Rejected { param, .. }) => {
            assert_eq!(param.as_deref(), Some("payment_method"))
        }
        other => panic!("expected Rejected, got {other:?}"),
    }
    assert_eq!(s.sim.ledger().len(), 0);
    assert!(matches!(
        gw.retrieve(&charge_core::domain::PaymentIntentId::parse("pi_doesNotExist").unwrap())
            .await,
        Err(GatewayError::Rejected { .. })
    ));
}

#[tokio::test]
async fn processing_then_retrieve_and_requires_action() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let pi = gw
        .create(&create_req("pm_card_processing_succeeds", 300))
        .await
        .unwrap();
    assert_eq!(pi.status, PaymentIntentStatus::Processing);
    s.clock.advance(Duration::from_secs(601));
    assert_eq!(
        gw.retrieve(&pi.id).await.unwrap().status,
        PaymentIntentStatus::Succeeded
    );

    let action = gw
        .create(&create_req("pm_card_sim_requiresAction", 300))
        .await
        .unwrap();
    assert_eq!(action.status, PaymentIntentStatus::RequiresAction);
    assert_eq!(s.sim.ledger().len(), 2);
}

#[tokio::test]
async fn search_respects_the_lag() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let req = create_req("pm_card_visa", 300);
    let pi = gw.create(&req).await.unwrap();
    assert!(
        gw.search_by_operation(&req.operation_id)
            .await
            .unwrap()
            .is_empty(),
        "not yet searchable"
    );
    s.clock.advance(Duration::from_secs(31));
    let found = gw.search_by_operation(&req.operation_id).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].id, pi.id);
    assert!(gw
        .search_by_operation(&OperationId::new_random())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(s.sim.request_counts().search, 3);
}

#[tokio::test]
async fn wrong_key_is_configuration_and_never_leaks() {
    let s = StripeSide::with_new_clock().await;
    let secret = "sk_test_wrongKey0123456789";
    let mut cfg = s.config();
    cfg.secret_key = SecretKey::new(secret);
    let gw = StripeGateway::new(cfg.clone()).unwrap();
    let err = gw
        .create(&create_req("pm_card_visa", 300))
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        GatewayError::RetryLater {
            cause: RetryCause::Configuration,
            ..
        }
    ));
    for text in [
        err.to_string(),
        format!("{err:?}"),
        format!("{gw:?}"),
        format!("{cfg:?}"),
    ] {
        assert!(
            !text.contains("wrongKey0123456789"),
            "secret leaked: {text}"
        );
    }
    assert_eq!(s.sim.ledger().len(), 0);
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_secret_never_appears_in_logs() {
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || sink.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway_with(|c| c.max_network_retries = 2);
    s.sim.push_script([
        FaultKind::DropAfterCommit,
        FaultKind::ServerErrorAfterCommit,
    ]);
    let _ = gw.create(&create_req("pm_card_visa", 300)).await;
    let _ = gw.create(&create_req("pm_card_visa", 300)).await;
    let _ = gw.create(&create_req("pm_card_chargeDeclined", 300)).await;
    let wrong = StripeGateway::new(StripeConfig {
        secret_key: SecretKey::new("sk_test_anotherSecret987"),
        ..s.config()
    })
    .unwrap();
    let _ = wrong.create(&create_req("pm_card_visa", 300)).await;
    // The refund calls log through the same client: a replayed refund and a refused key.
    let pi = gw
        .create(&create_req("pm_card_visa", 300))
        .await
        .unwrap()
        .id;
    s.sim.push_script([FaultKind::DropAfterCommit]);
    gw.create_refund(&testing::refund_create(&pi, 100))
        .await
        .unwrap();
    let _ = wrong.create_refund(&testing::refund_create(&pi, 100)).await;
    let _ = wrong.list_refunds(&pi).await;
    tracing::info!(gateway = ?gw, "done");

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        !logs.is_empty(),
        "the test must capture something to mean anything"
    );
    assert!(
        logs.contains("retrying the same request"),
        "client logs were captured"
    );
    assert_eq!(s.sim.refunds_created(), 1);
    assert!(
        logs.contains("refund=re_"),
        "the refund's replay was logged"
    );
    assert!(
        !logs.contains(stripe_sim::DEFAULT_API_KEY),
        "secret in logs"
    );
    assert!(!logs.contains("anotherSecret987"), "secret in logs");
}

#[tokio::test]
async fn truncated_and_non_json_bodies_are_ambiguous() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let replies = [
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":\"pi_1\",\"sta",
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 9\r\n\r\n<html/>\r\n",
            "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 3\r\n\r\nbad",
        ];
        for reply in replies {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 8192];
            let _ = sock.read(&mut buf).await;
            sock.write_all(reply.as_bytes()).await.unwrap();
            sock.shutdown().await.unwrap();
        }
    });
    let gw = StripeGateway::new(StripeConfig {
        max_network_retries: 0,
        ..StripeConfig::new(format!("http://{addr}"), SecretKey::new("sk_test_x"))
    })
    .unwrap();
    for _ in 0..3 {
        let err = gw
            .create(&create_req("pm_card_visa", 300))
            .await
            .unwrap_err();
        assert!(matches!(err, GatewayError::Ambiguous { .. }), "{err:?}");
    }
}
