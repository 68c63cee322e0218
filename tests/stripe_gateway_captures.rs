//! The Stripe client's authorizations against the Stripe simulator over real HTTP on loopback: a
//! manual create held with its deadline read from the create's own answer, captures (partial,
//! lost and replayed under their key, refused once the intent moved on), cancels with their
//! reason, and the hold's expiry on the simulator's clock (the core's manual clock).

use std::time::Duration;

use charge_core::{domain::CaptureMethod, take::request::CancellationReason};
use charge_core::{
    domain::{Amount, OperationId, PaymentIntentId},
    outcome::{GatewayError, PaymentIntent, PaymentIntentStatus},
    time::Timestamp,
};
use charge_once::adapters::stripe::StripeGateway;
use charge_once::ports::{
    CancelPaymentIntent, CapturePaymentIntent, CreatePaymentIntent, PaymentIntents,
};
use stripe_sim::{FaultConfig, FaultKind, VISA_MIT_CAPTURE_WINDOW_MS};
use testkit::stripe::StripeSide;

/// Where [`StripeSide::with_new_clock`] starts its clock.
const T0: i64 = 1_800_000_000_000;

/// An authorization of 1000 usd (`capture_method=manual`, Visa, off-session): the create's answer.
async fn authorized(gw: &StripeGateway, order_id: &str) -> PaymentIntent {
    let op = charge_core::testing::order(order_id).amount(1000).build();
    let mut req = CreatePaymentIntent::for_operation(&op).expect("a charge operation");
    req.params.capture_method = CaptureMethod::Manual;
    gw.create(&req).await.expect("the authorization is made")
}

/// The capture of `amount` of `id` under a fresh capture operation's key.
fn capture(id: &PaymentIntentId, amount: i64) -> CapturePaymentIntent {
    CapturePaymentIntent {
        id: id.clone(),
        idempotency_key: OperationId::new_random().capture_idempotency_key(),
        amount_to_capture: Amount::new(amount).unwrap(),
    }
}

/// The merchant's cancel of `id`, with `reason`, under a fresh cancel operation's key.
fn cancel(id: &PaymentIntentId, reason: Option<CancellationReason>) -> CancelPaymentIntent {
    CancelPaymentIntent {
        id: id.clone(),
        idempotency_key: OperationId::new_random().cancel_op_idempotency_key(),
        reason,
    }
}

#[tokio::test]
async fn a_manual_create_is_held_with_the_deadline_its_own_answer_states() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let held = authorized(&gw, "order-held").await;
    assert_eq!(held.status, PaymentIntentStatus::RequiresCapture);
    // A Visa merchant-initiated authorization: 4 days 18 hours, read from the create's answer.
    let deadline = Timestamp::from_millis(T0 + VISA_MIT_CAPTURE_WINDOW_MS);
    assert_eq!(held.capture_before, Some(deadline));
    assert_eq!(
        s.sim.request_counts().retrieve,
        0,
        "no second call to learn it"
    );
    assert_eq!(
        gw.retrieve(&held.id).await.unwrap().capture_before,
        Some(deadline)
    );
    // Twin: an automatic charge is taken at once and states no deadline.
    let op = charge_core::testing::order("order-now")
        .amount(1000)
        .build();
    let now = gw
        .create(&CreatePaymentIntent::for_operation(&op).unwrap())
        .await
        .unwrap();
    assert_eq!(
        (now.status, now.capture_before),
        (PaymentIntentStatus::Succeeded, None)
    );
}

#[tokio::test]
async fn a_partial_capture_takes_part_and_a_second_capture_is_unexpected_state() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let held = authorized(&gw, "order-partial").await;
    let taken = gw.capture(&capture(&held.id, 600)).await.unwrap();
    assert_eq!(
        (taken.status, taken.amount_received, taken.replayed),
        (PaymentIntentStatus::Succeeded, Some(600), false)
    );
    assert_eq!(
        s.sim.amount_refunded(held.id.as_str()),
        Some(400),
        "the rest released"
    );
    let second = gw.capture(&capture(&held.id, 400)).await;
    assert!(
        matches!(second, Err(GatewayError::UnexpectedState { .. })),
        "{second:?}"
    );
    assert_eq!(s.sim.request_counts().capture, 2);
}

#[tokio::test]
async fn a_capture_whose_answer_was_lost_is_replayed_under_its_key() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let held = authorized(&gw, "order-lost").await;
    let req = capture(&held.id, 1000);
    s.sim.set_faults(FaultConfig {
        rates: [(FaultKind::DropAfterCommit, 1.0)].into(),
        faults_on_reads: false,
        ..FaultConfig::default()
    });
    let lost = gw.capture(&req).await;
    assert!(
        matches!(lost, Err(GatewayError::Ambiguous { .. })),
        "{lost:?}"
    );
    assert_eq!(s.sim.injected()[&FaultKind::DropAfterCommit], 1);
    s.sim.set_faults(FaultConfig::default());
    let again = gw.capture(&req).await.unwrap();
    assert_eq!(
        (again.replayed, again.status, again.amount_received),
        (true, PaymentIntentStatus::Succeeded, Some(1000))
    );
    assert_eq!(s.sim.request_counts().capture, 2, "both reached Stripe");
}

#[tokio::test]
async fn a_cancel_with_its_reason_releases_the_hold_and_a_capture_after_it_is_refused() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let held = authorized(&gw, "order-cancel").await;
    let canceled = gw
        .cancel(&cancel(
            &held.id,
            Some(CancellationReason::RequestedByCustomer),
        ))
        .await
        .unwrap();
    assert_eq!(
        (canceled.status, canceled.cancellation_reason.as_deref()),
        (PaymentIntentStatus::Canceled, Some("requested_by_customer"))
    );
    assert_eq!(s.sim.amount_refunded(held.id.as_str()), Some(1000));
    let late = gw.capture(&capture(&held.id, 1000)).await;
    assert!(
        matches!(late, Err(GatewayError::UnexpectedState { .. })),
        "{late:?}"
    );
    // Twin: a cancel that gives no reason is recorded with none.
    let other = authorized(&gw, "order-cancel-plain").await;
    let plain = gw.cancel(&cancel(&other.id, None)).await.unwrap();
    assert_eq!(
        (plain.status, plain.cancellation_reason),
        (PaymentIntentStatus::Canceled, None)
    );
}

#[tokio::test]
async fn past_its_deadline_an_authorization_lapses_and_neither_capture_nor_cancel_take_it() {
    let s = StripeSide::with_new_clock().await;
    let gw = s.gateway();
    let held = authorized(&gw, "order-lapsed").await;
    let twin = authorized(&gw, "order-in-time").await;
    let window = Duration::from_millis(VISA_MIT_CAPTURE_WINDOW_MS as u64);
    // A second before the deadline the twin is captured; the other waits.
    s.clock.advance(window - Duration::from_secs(1));
    assert!(gw.capture(&capture(&twin.id, 1000)).await.is_ok());
    assert_eq!(
        gw.retrieve(&held.id).await.unwrap().status,
        PaymentIntentStatus::RequiresCapture
    );
    // The core's clock is the simulator's: at the deadline Stripe cancels the hold.
    s.clock.advance(Duration::from_secs(1));
    let late = gw.capture(&capture(&held.id, 1000)).await;
    assert!(
        matches!(late, Err(GatewayError::UnexpectedState { .. })),
        "{late:?}"
    );
    let late_cancel = gw.cancel(&cancel(&held.id, None)).await;
    assert!(
        matches!(late_cancel, Err(GatewayError::UnexpectedState { .. })),
        "{late_cancel:?}"
    );
    let read = gw.retrieve(&held.id).await.unwrap();
    assert_eq!(
        (read.status, read.cancellation_reason.as_deref()),
        (PaymentIntentStatus::Canceled, Some("automatic"))
    );
    assert_eq!(
        gw.retrieve(&twin.id).await.unwrap().status,
        PaymentIntentStatus::Succeeded,
        "a captured one never lapses"
    );
}
