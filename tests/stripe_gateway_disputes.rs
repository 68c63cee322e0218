//! The Stripe client's dispute reads against the Stripe simulator over real HTTP on loopback: a
//! test card's dispute read by id, by PaymentIntent and by creation time, each as the
//! simulator's ledger holds it; lists followed page by page; an unknown id refused; a malformed
//! answer a clear error; and how a refund of a disputed charge comes back.

use charge_core::audit::AuditWindow;
use charge_core::dispute::DisputeStatus;
use charge_core::domain::{DisputeId, PaymentIntentId};
use charge_core::outcome::{GatewayError, PaymentIntentStatus};
use charge_core::time::{Clock, Timestamp};
use charge_once::adapters::stripe::{SecretKey, StripeConfig, StripeGateway};
use charge_once::ports::{
    CreatePaymentIntent, CreatedLists, PaymentIntents, StripeDisputes, StripeRefunds,
};
use charge_once::testing::refund_create;
use stripe_sim::DisputeRequest;
use testkit::stripe::StripeSide;

async fn charged(gw: &StripeGateway, order: &str, pm: &str) -> PaymentIntentId {
    let op = charge_core::testing::order(order)
        .amount(1000)
        .payment_method(pm)
        .build();
    let pi = gw
        .create(&CreatePaymentIntent::for_operation(&op).expect("a charge operation"))
        .await
        .expect("the charge is made");
    assert_eq!(pi.status, PaymentIntentStatus::Succeeded);
    pi.id
}

fn dispute_reads(gw: &StripeGateway) -> u64 {
    gw.requests
        .dispute_read
        .load(std::sync::atomic::Ordering::Relaxed)
}

#[tokio::test]
async fn a_test_cards_dispute_is_read_by_id_by_intent_and_by_creation_time() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let pi = charged(&gw, "order-dispute-1", "pm_card_createDispute").await;
    let ledger = s.sim.dispute_ledger();
    assert_eq!(ledger.len(), 1);

    let listed = gw.list_disputes(&pi).await.unwrap();
    assert_eq!(listed.len(), 1);
    let d = &listed[0];
    assert_eq!(d.id.as_str(), ledger[0].id);
    assert_eq!(d.payment_intent.as_ref(), Some(&pi));
    assert!(d.charge.as_str().starts_with("ch_"));
    assert_eq!((d.amount, d.currency.as_str()), (1000, "usd"));
    assert_eq!(d.reason, "fraudulent");
    assert_eq!(d.status, DisputeStatus::NeedsResponse);
    assert_eq!(d.due_by, Some(Timestamp::from_millis(ledger[0].due_by_ms)));
    assert_eq!(
        (
            d.is_charge_refundable,
            d.balance_transactions,
            d.has_evidence,
            d.livemode
        ),
        (false, 1, false, false)
    );

    assert_eq!(&gw.retrieve_dispute(&d.id).await.unwrap(), d);
    let window = AuditWindow {
        from: Timestamp::from_millis(ledger[0].created_ms - 1000),
        to: Timestamp::from_millis(ledger[0].created_ms + 1000),
    };
    let page = gw.list_disputes_created(&window, None).await.unwrap();
    assert_eq!(
        (page.items.as_slice(), page.next),
        (listed.as_slice(), None)
    );
    assert_eq!(s.sim.request_counts().dispute_read, 3);
    assert_eq!(dispute_reads(&gw), 3, "counted under its own endpoint");

    // An inquiry reads as one: refundable, nothing withdrawn.
    let inquiry = charged(&gw, "order-dispute-2", "pm_card_createDisputeInquiry").await;
    let i = &gw.list_disputes(&inquiry).await.unwrap()[0];
    assert_eq!(
        (
            i.status.clone(),
            i.is_charge_refundable,
            i.balance_transactions
        ),
        (DisputeStatus::WarningNeedsResponse, true, 0)
    );
    // A charge without a dispute lists none.
    let visa = charged(&gw, "order-dispute-3", "pm_card_visa").await;
    assert!(gw.list_disputes(&visa).await.unwrap().is_empty());
}

#[tokio::test]
async fn dispute_lists_are_followed_page_by_page() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway().with_list_page_size(2);
    let pi = charged(&gw, "order-dispute-pages", "pm_card_visa").await;
    let mut made = Vec::new();
    for _ in 0..5 {
        let json = s
            .sim
            .dispute_charge(&DisputeRequest {
                payment_intent: pi.as_str().to_owned(),
                amount: Some(100),
                ..DisputeRequest::default()
            })
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        made.push(v["id"].as_str().unwrap().to_owned());
        s.clock.advance(std::time::Duration::from_secs(1));
    }
    let before = s.sim.request_counts().dispute_read;
    let all = gw.list_disputes(&pi).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|d| d.id.as_str()).collect();
    let newest_first: Vec<&str> = made.iter().rev().map(String::as_str).collect();
    assert_eq!(ids, newest_first, "each once, newest first");
    assert_eq!(
        s.sim.request_counts().dispute_read - before,
        3,
        "pages of 2, 2 and 1"
    );

    let now = s.clock.now();
    let window = AuditWindow {
        from: Timestamp::from_millis(now.as_millis() - 60_000),
        to: Timestamp::from_millis(now.as_millis() + 1000),
    };
    let first = gw.list_disputes_created(&window, None).await.unwrap();
    assert_eq!(first.items.len(), 2);
    let next = first.next.clone().expect("more follow");
    let second = gw
        .list_disputes_created(&window, Some(&next))
        .await
        .unwrap();
    assert_eq!(second.items[0].id.as_str(), made[2]);
}

#[tokio::test]
async fn an_unknown_dispute_is_refused_and_a_refund_of_a_disputed_charge_too() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let missing = gw
        .retrieve_dispute(&DisputeId::parse("dp_nope").unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(&missing, GatewayError::Rejected { detail, .. } if detail.contains("resource_missing")),
        "{missing:?}"
    );

    // Stripe's charge_disputed reaches the caller as its own kind of refusal, the code kept in
    // its words; the same refund of an undisputed charge is made.
    let pi = charged(&gw, "order-dispute-refund", "pm_card_createDispute").await;
    let refused = gw
        .create_refund(&refund_create(&pi, 100))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, GatewayError::ChargeDisputed { detail } if detail.contains("charge_disputed")),
        "{refused:?}"
    );
    let visa = charged(&gw, "order-dispute-visa", "pm_card_visa").await;
    assert!(gw.create_refund(&refund_create(&visa, 100)).await.is_ok());
    assert_eq!(s.sim.refund_ledger().len(), 1);
}

/// A server answering 2xx with a dispute the client cannot read whole: each read is an error
/// (nothing to record from), never a panic.
#[tokio::test]
async fn a_malformed_dispute_answer_is_a_clear_error() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let bodies = [
        r#"{"id":"dp_1","object":"dispute"}"#,
        r#"{"data":[{"id":"dp_1","amount":-3}],"has_more":false}"#,
        r#"{"data":[],"has_more":true}"#,
    ];
    tokio::spawn(async move {
        for body in bodies {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 8192];
            let _ = sock.read(&mut buf).await;
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            sock.write_all(reply.as_bytes()).await.unwrap();
            sock.shutdown().await.unwrap();
        }
    });
    let gw = StripeGateway::new(StripeConfig {
        max_network_retries: 0,
        ..StripeConfig::new(format!("http://{addr}"), SecretKey::new("sk_test_x"))
    })
    .unwrap();
    let one = gw
        .retrieve_dispute(&DisputeId::parse("dp_1").unwrap())
        .await
        .unwrap_err();
    assert!(matches!(one, GatewayError::Ambiguous { .. }), "{one:?}");
    let pi = PaymentIntentId::parse("pi_1").unwrap();
    let list = gw.list_disputes(&pi).await.unwrap_err();
    assert!(matches!(list, GatewayError::Ambiguous { .. }), "{list:?}");
    let window = AuditWindow {
        from: Timestamp::from_millis(0),
        to: Timestamp::from_millis(1000),
    };
    let looping = gw.list_disputes_created(&window, None).await.unwrap_err();
    assert!(
        matches!(looping, GatewayError::Ambiguous { .. }),
        "{looping:?}"
    );
}
