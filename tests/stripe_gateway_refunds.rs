//! The Stripe client's refund calls against the Stripe simulator over real HTTP on loopback:
//! each classification checked against the refunds the simulator's ledger holds.

use std::time::Duration;

use charge_core::refund::{request::RefundReason, RefundStatus, StripeRefund};
use charge_core::{
    domain::PaymentIntentId,
    outcome::{GatewayError, PaymentIntentStatus},
};
use charge_once::adapters::stripe::StripeGateway;
use charge_once::ports::{CreatePaymentIntent, CreatedLists, PaymentIntents, StripeRefunds};
use charge_once::testing::refund_create;
use stripe_sim::FaultKind;
use testkit::stripe::StripeSide;

/// A succeeded charge of `amount` usd paid with `pm`: its PaymentIntent.
async fn charged(gw: &StripeGateway, pm: &str, amount: i64) -> PaymentIntentId {
    let op = charge_core::testing::order("order-refund-test")
        .amount(amount)
        .payment_method(pm)
        .build();
    let pi = gw
        .create(&CreatePaymentIntent::for_operation(&op).expect("a charge operation"))
        .await
        .expect("the charge is made");
    assert_eq!(pi.status, PaymentIntentStatus::Succeeded);
    pi.id
}

#[tokio::test]
async fn a_refund_is_made_with_its_key_and_metadata_and_read_back() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let pi = charged(&gw, "pm_card_visa", 1000).await;
    let mut req = refund_create(&pi, 400);
    req.params.reason = Some(RefundReason::RequestedByCustomer);
    let made = gw.create_refund(&req).await.unwrap();
    assert_eq!(made.status, RefundStatus::Succeeded);
    assert_eq!(made.amount, Some(400));
    assert_eq!(made.currency.as_deref(), Some("usd"));
    assert_eq!(made.payment_intent.as_deref(), Some(pi.as_str()));
    let op = req.operation_id.to_string();
    assert_eq!(made.operation_id.as_deref(), Some(op.as_str()));
    let ledger = s.sim.refund_ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].id, made.id.as_str());
    assert_eq!(ledger[0].amount, 400);
    assert_eq!(ledger[0].operation_id.as_deref(), Some(op.as_str()));
    assert_eq!(s.sim.amount_refunded(&pi), Some(400));

    assert_eq!(gw.retrieve_refund(&made.id).await.unwrap(), made);
    assert_eq!(gw.list_refunds(&pi).await.unwrap(), vec![made]);
    let counts = s.sim.request_counts();
    assert_eq!((counts.refund, counts.refund_read), (1, 2));
}

#[tokio::test]
async fn the_same_key_replays_the_refund_and_another_request_under_it_is_misuse() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let pi = charged(&gw, "pm_card_visa", 1000).await;
    let req = refund_create(&pi, 300);
    let first = gw.create_refund(&req).await.unwrap();
    let again = gw.create_refund(&req).await.unwrap();
    assert!(
        !first.replayed && again.replayed,
        "Stripe says which answer is a replay"
    );
    assert_eq!(
        StripeRefund {
            replayed: false,
            ..again
        },
        first
    );
    assert_eq!(s.sim.request_counts().refund, 2, "both reached Stripe");
    assert_eq!(s.sim.refunds_created(), 1, "the second was a replay");

    let mut other = req.clone();
    other.params.amount = charge_core::domain::Amount::new(200).unwrap();
    let err = gw.create_refund(&other).await.unwrap_err();
    assert!(matches!(err, GatewayError::KeyMisuse { .. }), "{err:?}");
    assert_eq!(s.sim.refunds_created(), 1);
    // The same request under a key of its own is made.
    gw.create_refund(&refund_create(&pi, 200)).await.unwrap();
    assert_eq!(s.sim.refunds_created(), 2);
    assert_eq!(s.sim.amount_refunded(&pi), Some(500));
}

#[tokio::test]
async fn more_than_is_left_is_rejected_with_stripes_code_and_makes_nothing() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let pi = charged(&gw, "pm_card_visa", 1000).await;
    gw.create_refund(&refund_create(&pi, 600)).await.unwrap();
    let err = gw
        .create_refund(&refund_create(&pi, 401))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GatewayError::Rejected { detail, param: Some(p) }
            if detail.contains("amount_too_large") && p == "amount"),
        "{err:?}"
    );
    assert_eq!(s.sim.refunds_created(), 1, "nothing made");
    // Its twin that fits is accepted; then nothing is left.
    gw.create_refund(&refund_create(&pi, 400)).await.unwrap();
    assert_eq!(s.sim.refunds_created(), 2);
    let err = gw.create_refund(&refund_create(&pi, 1)).await.unwrap_err();
    assert!(
        matches!(&err, GatewayError::Rejected { detail, .. } if detail.contains("charge_already_refunded")),
        "{err:?}"
    );
    assert_eq!(s.sim.refunds_created(), 2);
    assert_eq!(s.sim.amount_refunded(&pi), Some(1000));
}

#[tokio::test]
async fn a_dropped_answer_is_ambiguous_and_the_retry_under_the_key_finds_the_refund() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let pi = charged(&gw, "pm_card_visa", 1000).await;
    s.sim.push_script([FaultKind::DropAfterCommit]);
    let req = refund_create(&pi, 250);
    let err = gw.create_refund(&req).await.unwrap_err();
    assert!(matches!(err, GatewayError::Ambiguous { .. }), "{err:?}");
    assert_eq!(
        s.sim.injected()[&FaultKind::DropAfterCommit],
        1,
        "the fault happened"
    );
    assert_eq!(
        s.sim.refunds_created(),
        1,
        "made although the caller saw no answer"
    );
    let found = gw.create_refund(&req).await.unwrap();
    assert_eq!(found.id, s.sim.refund_ledger()[0].id.as_str());
    assert_eq!(s.sim.refunds_created(), 1);
}

#[tokio::test]
async fn an_in_call_retry_recovers_a_dropped_refund_answer() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway_with(|c| c.max_network_retries = 2);
    let pi = charged(&gw, "pm_card_visa", 1000).await;
    s.sim.push_script([FaultKind::DropAfterCommit]);
    let made = gw.create_refund(&refund_create(&pi, 250)).await.unwrap();
    assert_eq!(s.sim.injected()[&FaultKind::DropAfterCommit], 1);
    assert_eq!(s.sim.request_counts().refund, 2);
    assert_eq!(
        gw.requests
            .refund_create
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    assert_eq!(s.sim.refund_ledger()[0].id, made.id.as_str());
    assert_eq!(s.sim.refunds_created(), 1);
}

#[tokio::test]
async fn the_list_follows_its_pages_to_the_end() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway().with_list_page_size(2);
    let pi = charged(&gw, "pm_card_visa", 1000).await;
    let other = charged(&gw, "pm_card_visa", 1000).await;
    let mut made = Vec::new();
    for amount in [100, 110, 120, 130, 140] {
        made.push(gw.create_refund(&refund_create(&pi, amount)).await.unwrap());
    }
    gw.create_refund(&refund_create(&other, 50)).await.unwrap();
    let reads_before = s.sim.request_counts().refund_read;
    let listed = gw.list_refunds(&pi).await.unwrap();
    // Newest first, each once, none of the other intent's: three pages of 2, 2 and 1.
    made.reverse();
    assert_eq!(listed, made);
    assert_eq!(s.sim.request_counts().refund_read - reads_before, 3);
    // Exactly a page's worth ends on a page that says so.
    let reads_before = s.sim.request_counts().refund_read;
    assert_eq!(gw.list_refunds(&other).await.unwrap().len(), 1);
    assert_eq!(s.sim.request_counts().refund_read - reads_before, 1);
    let none = charged(&gw, "pm_card_visa", 10).await;
    assert!(gw.list_refunds(&none).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_late_failure_and_a_pending_refund_are_read_by_retrieve() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let settle = Duration::from_secs(600);
    s.sim.set_refund_settle(settle);
    let failing = charged(&gw, "pm_card_refundFail", 1000).await;
    let pending = charged(&gw, "pm_card_pendingRefund", 1000).await;
    let late = gw
        .create_refund(&refund_create(&failing, 700))
        .await
        .unwrap();
    assert_eq!(late.status, RefundStatus::Succeeded);
    let slow = gw
        .create_refund(&refund_create(&pending, 700))
        .await
        .unwrap();
    assert_eq!(slow.status, RefundStatus::Pending);

    s.clock.advance(settle + Duration::from_secs(1));
    let read = gw.retrieve_refund(&late.id).await.unwrap();
    assert_eq!(read.status, RefundStatus::Failed);
    assert_eq!(
        read.failure_reason.as_deref(),
        Some("expired_or_canceled_card")
    );
    assert_eq!(
        s.sim.amount_refunded(&failing),
        Some(0),
        "the money came back"
    );
    assert_eq!(
        gw.retrieve_refund(&slow.id).await.unwrap().status,
        RefundStatus::Succeeded
    );
    assert_eq!(
        gw.list_refunds(&failing).await.unwrap()[0].status,
        RefundStatus::Failed
    );
}

#[tokio::test]
async fn an_unknown_refund_or_intent_is_rejected() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let unknown = charge_core::domain::StripeRefundId::parse("re_nothing").unwrap();
    assert!(matches!(
        gw.retrieve_refund(&unknown).await,
        Err(GatewayError::Rejected { .. })
    ));
    let nobody = PaymentIntentId::parse("pi_nothing").unwrap();
    assert!(matches!(
        gw.create_refund(&refund_create(&nobody, 10)).await,
        Err(GatewayError::Rejected { param: Some(ref p), .. }) if p == "payment_intent"
    ));
    assert_eq!(s.sim.refunds_created(), 0);
}

/// The audit's lists by creation time, over HTTP: every PaymentIntent and refund created in the
/// window and none outside it (whole seconds, `created[gte]` to `created[lt]`), newest first,
/// page after page until Stripe says no more follow, each page one request; a dashboard refund
/// (no metadata) listed beside ours.
#[tokio::test]
async fn lists_by_creation_time_page_through_the_window_and_nothing_else() {
    use charge_core::audit::AuditWindow;
    use charge_core::time::Clock;
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway().with_list_page_size(2);
    let before = charged(&gw, "pm_card_visa", 1000).await;
    s.clock.advance(Duration::from_secs(60));
    let from = s.clock.now();
    let mut inside = Vec::new();
    for _ in 0..5 {
        inside.push(charged(&gw, "pm_card_visa", 1000).await);
        s.clock.advance(Duration::from_millis(400));
    }
    let ours = gw
        .create_refund(&refund_create(&inside[0], 300))
        .await
        .unwrap();
    let dashboard = s.sim.refund_in_process(
        None,
        &[
            ("payment_intent".to_owned(), inside[1].as_str().to_owned()),
            ("amount".to_owned(), "200".to_owned()),
        ],
    );
    assert!(matches!(
        dashboard,
        stripe_sim::CreateStart::Done(stripe_sim::Outcome::Answered(_))
    ));
    s.clock.advance(Duration::from_secs(60));
    let window = AuditWindow {
        from,
        to: s.clock.now(),
    };
    let after = charged(&gw, "pm_card_visa", 1000).await;

    let lists_before = gw.requests.list.load(std::sync::atomic::Ordering::Relaxed);
    let mut listed = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let page = gw
            .list_intents_created(&window, next.as_deref())
            .await
            .unwrap();
        assert!(page.items.len() <= 2);
        listed.extend(page.items.into_iter().map(|pi| pi.id));
        match page.next {
            Some(n) => next = Some(n),
            None => break,
        }
    }
    let mut want = inside.clone();
    want.reverse();
    assert_eq!(listed, want);
    assert!(!listed.contains(&before) && !listed.contains(&after));
    // Five intents at two a page: three requests, counted at both ends.
    assert_eq!(
        gw.requests.list.load(std::sync::atomic::Ordering::Relaxed) - lists_before,
        3
    );
    assert_eq!(s.sim.request_counts().list, 3);

    let page = gw.list_refunds_created(&window, None).await.unwrap();
    assert_eq!(page.items.len(), 2);
    assert!(page.next.is_none());
    assert_eq!(page.items[1], ours);
    assert_eq!(
        page.items[0].operation_id, None,
        "the dashboard's refund has no metadata"
    );
    assert_eq!(
        page.items[0].payment_intent.as_deref(),
        Some(inside[1].as_str())
    );
    // A window before anything was made lists nothing.
    let empty = AuditWindow {
        from: from.minus(Duration::from_secs(3600)),
        to: from.minus(Duration::from_secs(1800)),
    };
    assert!(gw
        .list_intents_created(&empty, None)
        .await
        .unwrap()
        .items
        .is_empty());
    assert!(gw
        .list_refunds_created(&empty, None)
        .await
        .unwrap()
        .items
        .is_empty());
}

/// A list's parameters are checked as Stripe checks them: an unknown one, a created filter that
/// is not a number, a cursor naming nothing are refused with Stripe's codes; the genuine query
/// in the same setup is answered (the route's own handler, called in process).
#[tokio::test]
async fn a_malformed_list_is_refused_and_the_genuine_one_answered() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    charged(&gw, "pm_card_visa", 1000).await;
    let client = |query: &str| {
        let a = s.sim.list_intents_in_process(query);
        (a.status, String::from_utf8_lossy(&a.body).into_owned())
    };
    for (query, code) in [
        ("created%5Bgte%5D=soon", "parameter_invalid_integer"),
        ("colour=red", "parameter_unknown"),
        ("starting_after=pi_nothing", "resource_missing"),
        ("limit=101", "parameter_invalid_integer"),
    ] {
        let (status, body) = client(query);
        assert_eq!(status / 100, 4, "{query}: {body}");
        assert!(body.contains(code), "{query}: {body}");
    }
    let (status, body) = client("created%5Bgte%5D=0&limit=10");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("\"object\":\"list\"") && body.contains("pi_"),
        "{body}"
    );
}
