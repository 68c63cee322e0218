//! Authorize now, capture later, through the real handlers against moto (DynamoDB, SQS FIFO) and
//! stripe-sim over HTTP (on the core's clock): an authorization captured once, a capture whose
//! answer was lost settled by reading the intent (never by the replayed error), a capture and a
//! cancel asked at once of which exactly one takes effect, and an authorization nobody captures
//! paged before its deadline, then settled as expired.

use std::time::Duration;

use aws_lambda_events::apigw::ApiGatewayV2httpResponse;
use charge_core::store_rules::AUTHORIZATION_EXPIRED;
use charge_core::{
    domain::{OperationKind, OrderId},
    operation::{Operation, OperationKey, OperationStatus},
    time::Clock,
};
use charge_once::ports::OperationReads;
use checkout::door::Checkout;
use lambda_runtime::{Context, LambdaEvent};
use stripe_sim::{FaultConfig, FaultKind};
use testkit::stack::{api_event, json_body, Stack};

const HOUR: Duration = Duration::from_secs(3600);

async fn post(deps: &Checkout, file: &str) -> ApiGatewayV2httpResponse {
    checkout::handler::handle(deps, LambdaEvent::new(api_event(file), Context::default())).await
}

fn key(kind: OperationKind) -> OperationKey {
    OperationKey::of_kind(OrderId::parse("ord-3003").unwrap(), kind)
}

async fn record(s: &Stack, kind: OperationKind) -> Operation {
    s.store.get(&key(kind)).await.unwrap().expect("the record")
}

/// ord-3003 checked out with `capture: manual` and its message delivered: authorized, with the
/// deadline stripe-sim states.
async fn authorized(s: &Stack) -> Operation {
    assert_eq!(
        post(&s.checkout(), "checkout-authorize.json")
            .await
            .status_code,
        202
    );
    assert_eq!(s.deliver().await, 1);
    let charge = record(s, OperationKind::FIRST_CHARGE).await;
    assert_eq!(charge.status, OperationStatus::Authorized, "{charge:?}");
    charge
}

/// The PaymentIntent's status at stripe-sim, by the charge's key.
fn stripe_status(s: &Stack, charge: &Operation) -> String {
    let key = format!("payment-op:{}", charge.operation_id);
    let found: Vec<_> = s
        .side
        .sim
        .ledger()
        .into_iter()
        .filter(|p| p.idempotency_key.as_deref() == Some(key.as_str()))
        .collect();
    assert_eq!(found.len(), 1, "one PaymentIntent for the order");
    found[0].status.clone()
}

#[tokio::test]
async fn an_authorization_is_held_then_captured_once() {
    let s = Stack::spawn().await;
    let charge = authorized(&s).await;
    let deadline = charge
        .capture_before()
        .expect("the deadline, read from Stripe's answer");
    assert!(deadline > s.clock().now() && deadline <= s.clock().now().plus(7 * 24 * HOUR));
    assert_eq!(
        charge.next_due_at,
        Some(deadline.minus(12 * HOUR)),
        "due when the page must go"
    );
    assert_eq!(stripe_status(&s, &charge), "requires_capture");

    let resp = post(&s.checkout(), "capture-valid.json").await;
    assert_eq!(resp.status_code, 202, "{:?}", resp.body);
    assert_eq!(s.deliver().await, 1);
    let charge = record(&s, OperationKind::FIRST_CHARGE).await;
    assert_eq!(
        (
            charge.status,
            charge.amount_captured().map(|a| a.minor_units())
        ),
        (OperationStatus::Succeeded, Some(1000))
    );
    assert_eq!(charge.next_due_at, None, "left the unknown index");
    assert_eq!(
        record(&s, OperationKind::FIRST_CAPTURE).await.status,
        OperationStatus::Succeeded
    );
    assert_eq!(stripe_status(&s, &charge), "succeeded");
    // The same request again: the same capture, nothing sent to Stripe.
    let again = post(&s.checkout(), "capture-valid.json").await;
    assert_eq!(again.status_code, 200, "{:?}", again.body);
    assert_eq!(
        s.side.sim.request_counts().capture,
        1,
        "one capture at Stripe"
    );
    // A cancel of the captured order: refused, refund it instead.
    let cancel = post(&s.checkout(), "cancel-valid.json").await;
    assert_eq!(
        (
            cancel.status_code,
            json_body(&cancel)["error"]["code"].clone()
        ),
        (409, serde_json::json!("captured"))
    );
}

/// The capture is made at Stripe but its answer is a 500 (saved under the key: a retry with it
/// would replay the 500 until the key expires, and a fresh capture would be refused as already
/// captured). The next attempt reads the intent first and settles by what Stripe holds:
/// captured, with no second capture request.
#[tokio::test]
async fn a_capture_whose_answer_was_lost_is_settled_by_reading_the_intent() {
    let s = Stack::spawn().await;
    authorized(&s).await;
    assert_eq!(
        post(&s.checkout(), "capture-valid.json").await.status_code,
        202
    );
    // Captures are faulted by rate (the script is for creates): every capture made, its answer a
    // saved 500, for this delivery only.
    let mut faults = FaultConfig::default();
    faults.rates.insert(FaultKind::ServerErrorAfterCommit, 1.0);
    s.side.sim.set_faults(faults);
    assert_eq!(s.deliver().await, 1);
    s.side.sim.set_faults(FaultConfig::default());
    assert_eq!(
        s.side.sim.injected()[&FaultKind::ServerErrorAfterCommit],
        1,
        "the fault happened"
    );
    let lost = record(&s, OperationKind::FIRST_CAPTURE).await;
    assert_eq!(
        lost.status,
        OperationStatus::Unknown,
        "never rounded to failed"
    );
    assert_eq!(
        record(&s, OperationKind::FIRST_CHARGE).await.status,
        OperationStatus::Authorized
    );

    s.clock().advance(Duration::from_secs(600));
    s.tick().await.unwrap();
    while s.deliver().await > 0 {}
    let capture = record(&s, OperationKind::FIRST_CAPTURE).await;
    let charge = record(&s, OperationKind::FIRST_CHARGE).await;
    assert_eq!(capture.status, OperationStatus::Succeeded, "{capture:?}");
    assert_eq!(
        (
            charge.status,
            charge.amount_captured().map(|a| a.minor_units())
        ),
        (OperationStatus::Succeeded, Some(1000))
    );
    assert_eq!(
        s.side.sim.request_counts().capture,
        1,
        "read, not captured again"
    );
}

/// A capture and a cancel asked at once: exactly one is accepted (the store's condition on the
/// charge decides), and only its effect reaches Stripe.
#[tokio::test]
async fn a_capture_and_a_cancel_at_once_never_both_take_effect() {
    let s = Stack::spawn().await;
    let charge = authorized(&s).await;
    let checkout = s.checkout();
    let (capture, cancel) = tokio::join!(
        post(&checkout, "capture-valid.json"),
        post(&checkout, "cancel-valid.json")
    );
    let mut statuses = [capture.status_code, cancel.status_code];
    statuses.sort();
    assert_eq!(statuses, [202, 409], "one accepted, the other refused");
    while s.deliver().await > 0 {}
    let charge_now = record(&s, OperationKind::FIRST_CHARGE).await;
    let at_stripe = stripe_status(&s, &charge);
    if capture.status_code == 202 {
        assert_eq!(
            (charge_now.status, at_stripe.as_str()),
            (OperationStatus::Succeeded, "succeeded")
        );
        assert!(s
            .store
            .get(&key(OperationKind::Cancel))
            .await
            .unwrap()
            .is_none());
    } else {
        assert_eq!(
            (charge_now.status, at_stripe.as_str()),
            (OperationStatus::Failed, "canceled")
        );
        assert!(s
            .store
            .get(&key(OperationKind::FIRST_CAPTURE))
            .await
            .unwrap()
            .is_none());
    }
    let counts = s.side.sim.request_counts();
    assert_eq!(
        counts.capture + counts.cancel,
        1,
        "one of them reached Stripe"
    );
}

/// Nobody captures: the reconciler finds it uncaptured less than 12 h before Stripe's deadline and
/// pages (`AuthorizationNearDeadline`); past the deadline Stripe canceled it (stripe-sim's hold
/// expires on the shared clock) and the next look settles it failed, expired.
#[tokio::test]
async fn an_authorization_nobody_captures_pages_before_its_deadline_then_expires() {
    let s = Stack::spawn().await;
    let charge = authorized(&s).await;
    let deadline = charge.capture_before().unwrap();
    // Before the page's moment nothing is due.
    s.clock().set(deadline.minus(13 * HOUR));
    let report = s.tick().await.unwrap();
    assert_eq!(report.deadline_near, 0, "{report:?}");
    // Within 12 h of it: paged, once, by the look that found it uncaptured.
    s.clock().set(deadline.minus(11 * HOUR));
    let report = s.tick().await.unwrap();
    while s.deliver().await > 0 {}
    let paged = report.deadline_near
        + s.metrics
            .sum("AuthorizationNearDeadline", &[("Function", "charge")]) as u64;
    assert_eq!(paged, 1, "{report:?}");
    assert_eq!(
        record(&s, OperationKind::FIRST_CHARGE).await.status,
        OperationStatus::Authorized
    );
    // Past the deadline: Stripe canceled the hold; the next look settles it expired.
    s.clock().set(deadline.plus(Duration::from_secs(120)));
    s.tick().await.unwrap();
    while s.deliver().await > 0 {}
    let expired = record(&s, OperationKind::FIRST_CHARGE).await;
    assert_eq!(
        (expired.status, expired.last_error.as_deref()),
        (OperationStatus::Failed, Some(AUTHORIZATION_EXPIRED))
    );
    assert_eq!(stripe_status(&s, &charge), "canceled");
}

/// ord-3003 checked out with `capture: manual` in kwd (2.000) and its message delivered.
async fn authorized_in_kwd(s: &Stack) -> Operation {
    let mut req = api_event("checkout-authorize.json");
    let mut body: serde_json::Value = serde_json::from_str(req.body.as_deref().unwrap()).unwrap();
    body["currency"] = serde_json::json!("kwd");
    body["amount"] = serde_json::json!(2000);
    req.body = Some(body.to_string());
    let resp =
        checkout::handler::handle(&s.checkout(), LambdaEvent::new(req, Context::default())).await;
    assert_eq!(resp.status_code, 202, "{:?}", resp.body);
    assert_eq!(s.deliver().await, 1);
    let charge = record(s, OperationKind::FIRST_CHARGE).await;
    assert_eq!(charge.status, OperationStatus::Authorized, "{charge:?}");
    charge
}

/// A capture of 1.005 kwd as a release before this one accepted it (this door refuses it:
/// Stripe captures three-decimal currencies in tens), written with its claim on the charge and
/// queued as that door did.
async fn an_earlier_door_s_capture_of_1005(s: &Stack, charge: &Operation) -> Operation {
    use charge_core::charge::state::Taker;
    use charge_core::domain::{Amount, OperationId};
    use charge_core::operation::Params;
    use charge_core::store_rules::{ChargeClaim, CreatedBeside};
    use charge_core::take::{request::CaptureRequest, take, TakeRequest};
    use charge_once::ports::{OperationCreates, OperationQueue, QueuedOperation};
    let request = TakeRequest::Capture(CaptureRequest {
        amount: Some(Amount::new(1005).unwrap()),
    });
    let operation_id = OperationId::new_random();
    let taker = Taker {
        capture: true,
        operation_id,
    };
    let now = s.clock().now();
    let mut taking = take(
        charge,
        &TakeRequest::Capture(CaptureRequest {
            amount: Some(Amount::new(1000).unwrap()),
        }),
        taker,
        now,
    )
    .expect("1.000 passes this door");
    if let Params::Capture(p) = &mut taking.params {
        p.amount_to_capture = Amount::new(1005).unwrap();
    }
    let op = Operation {
        operation_id,
        ..Operation::new_taking(
            charge.order_id.clone(),
            OperationKind::FIRST_CAPTURE,
            request.fingerprint(),
            taking.params,
            charge.requested_by.clone().unwrap(),
            now,
            Duration::from_secs(300),
        )
    };
    let created = s
        .store
        .create_beside(&op, ChargeClaim::Take(&taking.take))
        .await
        .unwrap();
    assert!(matches!(created, CreatedBeside::New(_)), "{created:?}");
    s.queue().send(&QueuedOperation::first(&op)).await.unwrap();
    op
}

/// Stripe (stripe-sim over HTTP) refuses a capture for its amount: the capture fails saying so,
/// and the same write on DynamoDB gives the charge back (`authorized`, `taken_by` removed), with
/// the hold untouched at Stripe. Then the merchant cancels it through the door (202, the hold
/// released), or captures 1.000 (202, a capture of its own, captured at Stripe).
#[tokio::test]
async fn a_capture_stripe_refuses_for_its_amount_gives_the_authorization_back() {
    for then_cancel in [true, false] {
        let s = Stack::spawn().await;
        let charge = authorized_in_kwd(&s).await;
        let refused = an_earlier_door_s_capture_of_1005(&s, &charge).await;
        assert_eq!(
            record(&s, OperationKind::FIRST_CHARGE)
                .await
                .taken_by()
                .map(|t| t.operation_id),
            Some(refused.operation_id),
            "the capture took the charge"
        );
        assert_eq!(s.deliver().await, 1);
        assert_eq!(
            s.side.sim.request_counts().capture,
            1,
            "the capture reached Stripe"
        );
        let failed = record(&s, OperationKind::FIRST_CAPTURE).await;
        assert_eq!(failed.status, OperationStatus::Failed, "{failed:?}");
        assert!(failed.review.is_none());
        assert!(
            failed
                .last_error
                .as_deref()
                .is_some_and(|e| e.starts_with("take_refused: ") && e.contains("given back")),
            "{failed:?}"
        );
        let given_back = record(&s, OperationKind::FIRST_CHARGE).await;
        assert_eq!(
            (given_back.status, given_back.taken_by()),
            (OperationStatus::Authorized, None),
            "given back"
        );
        assert_eq!(stripe_status(&s, &charge), "requires_capture", "still held");

        if then_cancel {
            let resp = post(&s.checkout(), "cancel-valid.json").await;
            assert_eq!(resp.status_code, 202, "{:?}", resp.body);
            assert_eq!(s.deliver().await, 1);
            let canceled = record(&s, OperationKind::FIRST_CHARGE).await;
            assert_eq!(canceled.status, OperationStatus::Failed, "{canceled:?}");
            assert_eq!(stripe_status(&s, &charge), "canceled");
        } else {
            let resp = post(&s.checkout(), "capture-valid.json").await;
            assert_eq!(resp.status_code, 202, "{:?}", resp.body);
            assert_eq!(json_body(&resp)["amount"], 1000);
            assert_eq!(s.deliver().await, 1);
            let second = record(&s, OperationKind::Capture(2)).await;
            assert_eq!(second.status, OperationStatus::Succeeded, "{second:?}");
            assert_ne!(second.operation_id, refused.operation_id);
            let captured = record(&s, OperationKind::FIRST_CHARGE).await;
            assert_eq!(
                (
                    captured.status,
                    captured.amount_captured().map(|a| a.minor_units())
                ),
                (OperationStatus::Succeeded, Some(1000))
            );
            assert_eq!(stripe_status(&s, &charge), "succeeded");
            assert_eq!(s.side.sim.request_counts().capture, 2);
        }
    }
}
