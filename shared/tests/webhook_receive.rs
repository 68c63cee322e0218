//! The events function's whole path ([`charge_once::events::receive`]) on the in-memory ports: signature,
//! inbox, lookup on the key, decision, and the executor's conditional writes. Every test also
//! checks that Stripe's create was never called.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use charge_core::charge::event_plan::{EventMismatch, Ignored, SECOND_PAYMENT_INTENT};
use charge_core::charge::plan::Mismatch;
use charge_core::plan::{Policy, ReviewClass};
use charge_core::store::Claim;
use charge_core::{
    domain::PaymentIntentId,
    operation::{LeaseToken, Operation, OperationStatus},
    outcome::{GatewayError, PaymentIntent, PaymentIntentStatus},
    time::{Clock, ManualClock, Timestamp},
};
use charge_once::events::signature::{compute_v1, sign_header};
use charge_once::events::{
    receive, receive_eventbridge, Deferred, EventsDeps, Reception, Rejection, SignatureError,
    WebhookSecret, DEFAULT_TOLERANCE,
};
use charge_once::executor::EngineDeps;
use charge_once::memory::FakeCharge;
use charge_once::memory::{FakeGateway, MemoryInbox, MemoryStore};
use charge_once::ports::{
    CancelPaymentIntent, CreatePaymentIntent, CreatedLists, OperationLeases, OperationReads,
    PaymentIntents, StripeAccount, StripeRefunds,
};
use charge_once::testing::{self, logged, CreateIn as _};

struct World {
    store: Arc<MemoryStore>,
    inbox: Arc<MemoryInbox>,
    gateway: Arc<FakeGateway>,
    clock: ManualClock,
    secret: WebhookSecret,
    deps: EventsDeps,
}

impl World {
    fn new() -> Self {
        let store = Arc::new(MemoryStore::new());
        let inbox = Arc::new(MemoryInbox::new());
        let gateway = Arc::new(FakeGateway::new());
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        let secret = testing::webhook_secret("webhook_receive");
        let deps = EventsDeps {
            charge: EngineDeps {
                store: store.clone(),
                gateway: gateway.clone(),
                clock: Arc::new(clock.clone()),
                policy: Policy::default(),
            },
            inbox: inbox.clone(),
            secrets: Some(vec![secret.clone()]),
            tolerance: DEFAULT_TOLERANCE,
            event_source: None,
        };
        Self {
            store,
            inbox,
            gateway,
            clock,
            secret,
            deps,
        }
    }

    fn now_secs(&self) -> i64 {
        self.clock.now().as_millis() / 1000
    }

    /// An operation whose charge went `unknown`, with `external_id` recorded if given.
    async fn unknown_op(&self, order: &str, external_id: Option<&str>) -> Operation {
        let op = charge_core::testing::order(order)
            .requested_by("webhook-tests")
            .at(self.clock.now())
            .create_in(self.store.as_ref())
            .await;
        self.write(&op, OperationStatus::Unknown, external_id).await
    }

    /// One attempt through the store now: claim, then record `status` (and `external_id`).
    async fn write(
        &self,
        op: &Operation,
        status: OperationStatus,
        external_id: Option<&str>,
    ) -> Operation {
        testing::settle_as(
            self.store.as_ref(),
            op,
            status,
            external_id,
            self.clock.now(),
        )
        .await
    }

    async fn current(&self, op: &Operation) -> Operation {
        self.store.get(&op.key()).await.unwrap().unwrap()
    }

    fn creates(&self) -> u64 {
        self.gateway.calls.create.load(Ordering::SeqCst)
    }

    fn retrieves(&self) -> u64 {
        self.gateway.calls.retrieve.load(Ordering::SeqCst)
    }

    async fn deliver(&self, body: &[u8]) -> Reception {
        let header = sign_header(&self.secret, self.now_secs(), body);
        receive(&self.deps, Some(&header), body, None)
            .await
            .reception
    }
}

fn event(id: &str, kind: &str, pi: &str, status: &str, op: &Operation) -> Vec<u8> {
    serde_json::json!({
        "id": id,
        "object": "event",
        "type": kind,
        "created": 1_800_000_000,
        "data": {"object": {
            "id": pi,
            "object": "payment_intent",
            "status": status,
            "amount": 1250,
            "currency": "usd",
            "metadata": {"order_id": op.order_id.as_str(), "operation_id": op.operation_id.to_string()},
        }},
    })
    .to_string()
    .into_bytes()
}

#[tokio::test]
async fn a_valid_succeeded_event_settles_the_unknown_operation() {
    let w = World::new();
    let op = w.unknown_op("order-ok", None).await;
    let pi = w.gateway.insert_charge(&op, PaymentIntentStatus::Succeeded);
    let body = event("evt_1", "payment_intent.succeeded", &pi, "succeeded", &op);
    let header = sign_header(&w.secret, w.now_secs(), &body);
    let report = receive(&w.deps, Some(&header), &body, None).await;
    assert_eq!(
        report.reception,
        Reception::Applied {
            status: OperationStatus::Succeeded,
            review: None
        }
    );
    assert_eq!(report.reception.http_status(), 200);
    assert_eq!(
        report.gateway_calls, 1,
        "an event is a hint: Stripe is asked first"
    );
    let now = w.current(&op).await;
    assert_eq!(now.status, OperationStatus::Succeeded);
    assert_eq!(now.external_id.as_deref(), Some(pi.as_str()));
    assert_eq!(now.next_due_at, None, "left the unknown index");
    assert_eq!(now.lease, None);
    assert!(w.inbox.contains("evt_1"));
    assert_eq!(w.creates(), 0);
}

#[tokio::test]
async fn bad_deliveries_are_400_and_write_nothing() {
    let w = World::new();
    let op = w.unknown_op("order-bad", None).await;
    let before = w.current(&op).await;
    let pi = w.gateway.insert_charge(&op, PaymentIntentStatus::Succeeded);
    let body = event("evt_bad", "payment_intent.succeeded", &pi, "succeeded", &op);
    let t = w.now_secs();
    let other = testing::webhook_secret("someone else");
    let mut altered = body.clone();
    let at = altered.iter().position(|b| *b == b'1').unwrap();
    altered[at] = b'9';
    let cases: Vec<(&str, Option<String>, &[u8], SignatureError)> = vec![
        (
            "wrong secret",
            Some(sign_header(&other, t, &body)),
            &body,
            SignatureError::Mismatch,
        ),
        (
            "stale timestamp",
            Some(sign_header(&w.secret, t - 301, &body)),
            &body,
            SignatureError::OutsideTolerance,
        ),
        (
            "altered body",
            Some(sign_header(&w.secret, t, &body)),
            &altered,
            SignatureError::Mismatch,
        ),
        ("missing header", None, &body, SignatureError::MissingHeader),
        (
            "no v1",
            Some(format!("t={t},v0={}", compute_v1(&w.secret, t, &body))),
            &body,
            SignatureError::NoSignature,
        ),
    ];
    for (name, header, body, want) in cases {
        let report = receive(&w.deps, header.as_deref(), body, None).await;
        assert_eq!(
            report.reception,
            Reception::Rejected(Rejection::Signature(want)),
            "{name}"
        );
        assert_eq!(report.reception.http_status(), 400, "{name}");
        assert_eq!(report.event_id, None, "{name}: the body is not read");
    }
    assert!(w.inbox.is_empty());
    assert_eq!(w.inbox.writes.load(Ordering::Relaxed), 0);
    assert_eq!(w.current(&op).await, before, "nothing written");
    assert_eq!(w.gateway.calls.total(), 0);

    // Signed but unreadable: still 400, still nothing written.
    let junk = br#"{"id":"evt_x","type":"payment_intent.succeeded"}"#;
    let reception = w.deliver(junk).await;
    assert!(matches!(
        reception,
        Reception::Rejected(Rejection::Unreadable(_))
    ));
    assert!(w.inbox.is_empty());
}

#[tokio::test]
async fn the_same_event_twice_makes_one_transition() {
    let w = World::new();
    let op = w.unknown_op("order-dup", None).await;
    let pi = w.gateway.insert_charge(&op, PaymentIntentStatus::Succeeded);
    let body = event("evt_dup", "payment_intent.succeeded", &pi, "succeeded", &op);
    assert!(matches!(w.deliver(&body).await, Reception::Applied { .. }));
    let after_first = w.current(&op).await;
    w.clock.advance(Duration::from_secs(5));
    assert_eq!(
        w.deliver(&body).await,
        Reception::Ignored(Ignored::Duplicate)
    );
    assert_eq!(
        w.current(&op).await,
        after_first,
        "the duplicate changed nothing"
    );
    assert_eq!(w.inbox.len(), 1);
    assert_eq!(w.creates(), 0);
}

#[tokio::test]
async fn processing_after_succeeded_changes_nothing() {
    let w = World::new();
    let op = w.unknown_op("order-late", None).await;
    let pi = w.gateway.insert_charge(&op, PaymentIntentStatus::Succeeded);
    let ok = event("evt_ok", "payment_intent.succeeded", &pi, "succeeded", &op);
    assert!(matches!(w.deliver(&ok).await, Reception::Applied { .. }));
    let settled = w.current(&op).await;
    let late = event(
        "evt_late",
        "payment_intent.processing",
        &pi,
        "processing",
        &op,
    );
    assert_eq!(
        w.deliver(&late).await,
        Reception::Ignored(Ignored::AlreadySettled)
    );
    assert_eq!(w.current(&op).await, settled);
    assert_eq!(w.creates(), 0);
}

#[tokio::test]
async fn a_stale_event_is_settled_on_the_intents_latest_state() {
    let w = World::new();
    let op = w.unknown_op("order-stale", None).await;
    // The succeeded event was lost; the earlier processing event arrives late.
    let pi = w.gateway.insert_charge(&op, PaymentIntentStatus::Succeeded);
    let body = event(
        "evt_proc",
        "payment_intent.processing",
        &pi,
        "processing",
        &op,
    );
    let reception = w.deliver(&body).await;
    assert_eq!(
        reception,
        Reception::Applied {
            status: OperationStatus::Succeeded,
            review: None
        }
    );
    assert_eq!(w.retrieves(), 1);
    assert_eq!(w.current(&op).await.status, OperationStatus::Succeeded);

    // Still processing at Stripe: stays unknown, with the PaymentIntent id recorded.
    let op2 = w.unknown_op("order-proc", None).await;
    let pi2 = w
        .gateway
        .insert_charge(&op2, PaymentIntentStatus::Processing);
    let body = event(
        "evt_proc2",
        "payment_intent.processing",
        &pi2,
        "processing",
        &op2,
    );
    assert_eq!(
        w.deliver(&body).await,
        Reception::Applied {
            status: OperationStatus::Unknown,
            review: None
        }
    );
    let now = w.current(&op2).await;
    assert_eq!(now.status, OperationStatus::Unknown);
    assert_eq!(now.external_id.as_deref(), Some(pi2.as_str()));
    assert!(
        now.next_due_at.is_some(),
        "still driven by the unknown index"
    );

    // A payment_failed whose intent is canceled by now: failed.
    let op3 = w.unknown_op("order-fail", None).await;
    let pi3 = w.gateway.insert_charge(&op3, PaymentIntentStatus::Canceled);
    let body = event(
        "evt_fail",
        "payment_intent.payment_failed",
        &pi3,
        "requires_payment_method",
        &op3,
    );
    assert_eq!(
        w.deliver(&body).await,
        Reception::Applied {
            status: OperationStatus::Failed,
            review: None
        }
    );
    assert_eq!(w.creates(), 0);
}

/// An event reporting a decline never records `failed` while Stripe could still take the money.
/// The events function makes no call but its retrieve (its key may be read-only): it records the
/// intent, unknown and due now; the charge path then cancels it, and only Stripe's `canceled`
/// settles the operation failed.
#[tokio::test]
async fn a_payment_failed_event_leaves_the_cancel_to_the_charge_path() {
    let w = World::new();
    let op = w.unknown_op("order-declined", None).await;
    let pi = w
        .gateway
        .insert_charge(&op, PaymentIntentStatus::RequiresPaymentMethod);
    let body = event(
        "evt_failed",
        "payment_intent.payment_failed",
        &pi,
        "requires_payment_method",
        &op,
    );
    assert_eq!(
        w.deliver(&body).await,
        Reception::Applied {
            status: OperationStatus::Unknown,
            review: None
        }
    );
    assert_eq!(w.retrieves(), 1);
    assert_eq!(
        w.gateway.calls.cancel.load(Ordering::SeqCst),
        0,
        "no write at Stripe"
    );
    let after = w.current(&op).await;
    assert_eq!(after.status, OperationStatus::Unknown, "never failed");
    assert_eq!(after.external_id.as_deref(), Some(pi.as_str()));
    assert_eq!(after.next_due_at, Some(w.clock.now()), "due now");
    assert_eq!(
        w.gateway.charges()[pi.as_str()].status,
        PaymentIntentStatus::RequiresPaymentMethod
    );

    // The charge path's next look: retrieve, cancel, failed.
    let report = charge_once::executor::execute(&w.deps.charge, &op.key(), &op.operation_id)
        .await
        .unwrap();
    assert_eq!(report.status, OperationStatus::Failed);
    assert_eq!(report.gateway_calls, 2, "the retrieve, then the cancel");
    assert_eq!(
        w.gateway.charges()[pi.as_str()].status,
        PaymentIntentStatus::Canceled
    );
    assert_eq!(w.creates(), 0);
}

#[tokio::test]
async fn a_second_succeeded_intent_goes_to_review_or_pages() {
    let w = World::new();
    let first = w.gateway.insert_charge(
        &charge_core::testing::order("order-two").build(),
        PaymentIntentStatus::Processing,
    );
    let op = w.unknown_op("order-two", Some(&first)).await;
    let second = w.gateway.insert_charge(&op, PaymentIntentStatus::Succeeded);
    let body = event(
        "evt_two",
        "payment_intent.succeeded",
        &second,
        "succeeded",
        &op,
    );
    assert_eq!(
        w.deliver(&body).await,
        Reception::Applied {
            status: OperationStatus::Unknown,
            review: Some(ReviewClass::SecondPaymentIntent)
        }
    );
    let now = w.current(&op).await;
    let reason = now.review.as_ref().map(|r| r.reason.as_str()).unwrap_or("");
    assert!(reason.starts_with(SECOND_PAYMENT_INTENT), "{reason}");
    assert_eq!(
        now.external_id.as_deref(),
        Some(first.as_str()),
        "the recorded id stays"
    );

    // On a settled record nothing is written; the caller pages.
    let settled = w.unknown_op("order-settled", None).await;
    let a = w
        .gateway
        .insert_charge(&settled, PaymentIntentStatus::Succeeded);
    let settled = w
        .write(&settled, OperationStatus::Succeeded, Some(&a))
        .await;
    let b = w
        .gateway
        .insert_charge(&settled, PaymentIntentStatus::Succeeded);
    let body = event(
        "evt_b",
        "payment_intent.succeeded",
        &b,
        "succeeded",
        &settled,
    );
    assert_eq!(
        w.deliver(&body).await,
        Reception::SettledConflict {
            reason: SECOND_PAYMENT_INTENT
        }
    );
    assert_eq!(w.current(&settled).await, settled, "settled is final");
    assert_eq!(w.creates(), 0);
}

#[tokio::test]
async fn unknown_operations_and_other_types_are_ignored() {
    let w = World::new();
    let op = w.unknown_op("order-known", None).await;
    let mut stranger = op.clone();
    stranger.operation_id = charge_core::domain::OperationId::new_random();
    let body = event(
        "evt_stranger",
        "payment_intent.succeeded",
        "pi_x",
        "succeeded",
        &stranger,
    );
    assert_eq!(
        w.deliver(&body).await,
        Reception::Ignored(Ignored::UnknownOperation)
    );
    let body = event("evt_refund", "charge.refunded", "pi_x", "succeeded", &op);
    assert_eq!(
        w.deliver(&body).await,
        Reception::Ignored(Ignored::UnhandledType)
    );
    assert!(
        !w.inbox.contains("evt_refund"),
        "unhandled types are not recorded"
    );
    assert_eq!(w.current(&op).await.status, OperationStatus::Unknown);
    assert_eq!(w.creates(), 0);
}

#[tokio::test]
async fn a_busy_operation_is_retried_by_stripe_and_then_applied() {
    let w = World::new();
    let op = w.unknown_op("order-busy", None).await;
    let pi = w.gateway.insert_charge(&op, PaymentIntentStatus::Succeeded);
    // The charge function holds the lease right now.
    let now = w.clock.now();
    let claim = w
        .store
        .claim(&charge_core::testing::claim_request(
            &op,
            LeaseToken::new_random(),
            now,
        ))
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Claimed(_)));
    let body = event(
        "evt_busy",
        "payment_intent.succeeded",
        &pi,
        "succeeded",
        &op,
    );
    let reception = w.deliver(&body).await;
    assert!(
        matches!(reception, Reception::RetryLater(Deferred::Busy)),
        "{reception:?}"
    );
    assert_eq!(reception.http_status(), 409);
    assert!(
        !w.inbox.contains("evt_busy"),
        "forgotten, so the retry counts"
    );
    // Stripe retries after the lease expired.
    w.clock.advance(Duration::from_secs(61));
    assert!(matches!(w.deliver(&body).await, Reception::Applied { .. }));
    assert_eq!(w.current(&op).await.status, OperationStatus::Succeeded);
    assert!(w.inbox.contains("evt_busy"));
    assert_eq!(w.creates(), 0);
}

/// A gateway whose retrieves take `delay` (on tokio's clock), for the time budget.
struct SlowRetrieve {
    inner: Arc<FakeGateway>,
    delay: Duration,
}

impl StripeAccount for SlowRetrieve {
    fn livemode(&self) -> bool {
        self.inner.livemode()
    }
}

#[async_trait::async_trait]
impl PaymentIntents for SlowRetrieve {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.create(req).await
    }
    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError> {
        tokio::time::sleep(self.delay).await;
        self.inner.retrieve(id).await
    }
    async fn search_by_operation(
        &self,
        id: &charge_core::domain::OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        self.inner.search_by_operation(id).await
    }
    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.cancel(req).await
    }
    async fn capture(
        &self,
        req: &charge_once::ports::CapturePaymentIntent,
    ) -> Result<PaymentIntent, GatewayError> {
        self.inner.capture(req).await
    }
}

impl StripeRefunds for SlowRetrieve {}

impl charge_once::ports::StripeDisputes for SlowRetrieve {}

impl CreatedLists for SlowRetrieve {}

#[tokio::test]
async fn a_forged_succeeded_for_an_intent_stripe_holds_declined_moves_nothing() {
    let w = World::new();
    let op = w.unknown_op("order-forged", None).await;
    let pi = w
        .gateway
        .insert_charge(&op, PaymentIntentStatus::RequiresPaymentMethod);
    let before = w.current(&op).await;
    let body = event(
        "evt_forged",
        "payment_intent.succeeded",
        &pi,
        "succeeded",
        &op,
    );
    assert_eq!(
        w.deliver(&body).await,
        Reception::Mismatch(EventMismatch::StatusContradicted)
    );
    assert_eq!(w.retrieves(), 1, "Stripe was asked");
    assert_eq!(w.current(&op).await, before, "nothing moved");
    // Acknowledged (200) so Stripe does not retry it; paged by the caller.
    assert!(w.inbox.contains("evt_forged"));
    assert_eq!(w.creates(), 0);
}

#[tokio::test]
async fn a_forged_canceled_for_an_intent_that_succeeded_moves_nothing() {
    let w = World::new();
    // The create's answer was lost; the charge really succeeded at Stripe.
    let op = w.unknown_op("order-canceled", None).await;
    let pi = w.gateway.insert_charge(&op, PaymentIntentStatus::Succeeded);
    let before = w.current(&op).await;
    let body = event("evt_cxl", "payment_intent.canceled", &pi, "canceled", &op);
    assert_eq!(
        w.deliver(&body).await,
        Reception::Mismatch(EventMismatch::StatusContradicted)
    );
    assert_eq!(
        w.current(&op).await,
        before,
        "never marked failed: the order service will not ask for another card"
    );
    // A PaymentIntent Stripe does not know at all.
    let body = event(
        "evt_ghost",
        "payment_intent.succeeded",
        "pi_ghost1",
        "succeeded",
        &op,
    );
    assert_eq!(
        w.deliver(&body).await,
        Reception::Mismatch(EventMismatch::UnknownPaymentIntent)
    );
    assert_eq!(w.current(&op).await, before);
}

#[tokio::test]
async fn an_intent_that_is_not_the_operations_moves_nothing() {
    let w = World::new();
    let op = w.unknown_op("order-mismatch", None).await;
    let before = w.current(&op).await;
    type Alter = fn(&mut FakeCharge);
    let cases: [(&str, Alter, Mismatch); 5] = [
        ("amount", |c| c.amount = 1, Mismatch::Amount),
        (
            "currency",
            |c| c.currency = "eur".into(),
            Mismatch::Currency,
        ),
        ("mode", |c| c.livemode = true, Mismatch::Livemode),
        (
            "order",
            |c| c.order_id = "order-other".into(),
            Mismatch::OrderId,
        ),
        (
            "operation",
            |c| c.operation_id = charge_core::domain::OperationId::new_random(),
            Mismatch::OperationId,
        ),
    ];
    for (i, (name, alter, want)) in cases.into_iter().enumerate() {
        let mut charge = FakeGateway::charge_for(&op, PaymentIntentStatus::Succeeded);
        alter(&mut charge);
        let pi = w.gateway.insert_intent(charge);
        // The event carries our metadata: only Stripe's copy tells the truth.
        let body = event(
            &format!("evt_mm{i}"),
            "payment_intent.succeeded",
            &pi,
            "succeeded",
            &op,
        );
        assert_eq!(
            w.deliver(&body).await,
            Reception::Mismatch(EventMismatch::Intent(want)),
            "{name}"
        );
        assert_eq!(w.current(&op).await, before, "{name}: nothing moved");
    }
    assert_eq!(w.retrieves(), 5);
}

#[tokio::test]
async fn a_hand_resolved_record_is_still_compared_with_stripe() {
    let w = World::new();
    let op = w.unknown_op("order-resolved", None).await;
    let pi = w.gateway.insert_charge(&op, PaymentIntentStatus::Succeeded);
    // An operator resolved it failed; the record keeps the review evidence.
    let mut resolved = w.write(&op, OperationStatus::Failed, None).await;
    resolved.review = Some(charge_core::operation::Review {
        reason: "search_ambiguous: search found 0 payment intents".into(),
        flagged_at: w.clock.now(),
    });
    w.store.put_for_tests(resolved.clone());
    let body = event(
        "evt_late_ok",
        "payment_intent.succeeded",
        &pi,
        "succeeded",
        &op,
    );
    assert_eq!(
        w.deliver(&body).await,
        Reception::SettledConflict {
            reason: "settled_failed_but_succeeded"
        }
    );
    assert_eq!(
        w.current(&op).await,
        resolved,
        "settled is final: paged, not written"
    );
}

#[tokio::test]
async fn an_eventbridge_event_takes_the_same_path() {
    let w = World::new();
    let op = w.unknown_op("order-bridge", None).await;
    let pi = w.gateway.insert_charge(&op, PaymentIntentStatus::Succeeded);
    let detail: serde_json::Value = serde_json::from_slice(&event(
        "evt_eb",
        "payment_intent.succeeded",
        &pi,
        "succeeded",
        &op,
    ))
    .unwrap();
    let envelope = serde_json::json!({
        "version": "0", "id": "1b2c", "detail-type": "payment_intent.succeeded",
        "source": "aws.partner/stripe.com/ed_test_1", "account": "123456789012",
        "time": "2027-01-15T08:00:00Z", "region": "us-east-1", "resources": [],
        "detail": detail,
    });
    let read = || serde_json::from_slice(&serde_json::to_vec(&envelope).unwrap()).unwrap();
    let report = receive_eventbridge(&w.deps, read(), None).await;
    assert_eq!(
        report.reception,
        Reception::Applied {
            status: OperationStatus::Succeeded,
            review: None
        }
    );
    let settled = w.current(&op).await;
    let again = receive_eventbridge(&w.deps, read(), None).await;
    assert_eq!(again.reception, Reception::Ignored(Ignored::Duplicate));
    assert_eq!(w.current(&op).await, settled);
    // No signature involved, and no webhook secret needed.
    let mut no_webhook = w.deps.clone();
    no_webhook.secrets = None;
    let other = receive_eventbridge(&no_webhook, Default::default(), None).await;
    assert!(matches!(
        other.reception,
        Reception::Rejected(Rejection::Unreadable(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn an_event_out_of_time_is_forgotten_so_its_retry_counts() {
    let mut w = World::new();
    let op = w.unknown_op("order-slow", None).await;
    let pi = w.gateway.insert_charge(&op, PaymentIntentStatus::Succeeded);
    w.deps.charge.gateway = Arc::new(SlowRetrieve {
        inner: w.gateway.clone(),
        delay: Duration::from_secs(30),
    });
    let body = event(
        "evt_slow",
        "payment_intent.succeeded",
        &pi,
        "succeeded",
        &op,
    );
    let header = sign_header(&w.secret, w.now_secs(), &body);
    let report = receive(&w.deps, Some(&header), &body, Some(Duration::from_secs(5))).await;
    assert_eq!(report.reception, Reception::RetryLater(Deferred::Deadline));
    assert_eq!(report.reception.http_status(), 500);
    assert!(!w.inbox.contains("evt_slow"), "forgotten");
    assert_eq!(w.current(&op).await.status, OperationStatus::Unknown);
    // With the time it needs, the retry settles it.
    let report = receive(&w.deps, Some(&header), &body, Some(Duration::from_secs(60))).await;
    assert!(matches!(report.reception, Reception::Applied { .. }));
}

/// An operation in review after its search past the key window found no PaymentIntent: the
/// `payment_intent.succeeded` that names the charge moves nothing and asks nothing of Stripe (a
/// person owns the record), but its PaymentIntent and claimed status are logged at ERROR (paged
/// through `WebhookIgnored`, `Reason=in_review`) for the operator to check before resolving.
/// Before, the line carried neither, and the intent left no trace. The twin: the same event for
/// an operation not in review is checked at Stripe and settles it, without that line.
#[tokio::test]
async fn an_event_for_an_operation_in_review_names_its_intent_for_the_operator() {
    let w = World::new();
    let op = w.unknown_op("order-review-evidence", None).await;
    let pi = w.gateway.insert_charge(&op, PaymentIntentStatus::Succeeded);
    let mut reviewed = w.current(&op).await;
    reviewed.review = Some(charge_core::operation::Review {
        reason: "search_ambiguous: search found 0 payment intents".into(),
        flagged_at: w.clock.now(),
    });
    w.store.put_for_tests(reviewed.clone());
    let body = event(
        "evt_review_1",
        "payment_intent.succeeded",
        &pi,
        "succeeded",
        &op,
    );
    let (reception, log) = logged(w.deliver(&body)).await;
    assert_eq!(reception, Reception::Ignored(Ignored::InReview));
    assert_eq!(w.current(&op).await, reviewed, "nothing moved");
    assert_eq!((w.retrieves(), w.creates()), (0, 0), "Stripe not asked");
    let line = log
        .lines()
        .find(|l| l.contains("operation in review"))
        .unwrap_or_else(|| panic!("no line names the review: {log}"));
    assert!(line.contains("\"level\":\"ERROR\""), "{line}");
    assert!(
        line.contains(&format!("\"payment_intent\":\"{pi}\"")),
        "{line}"
    );
    assert!(line.contains("\"claimed_status\":\"succeeded\""), "{line}");
    assert!(line.contains("search_ambiguous"), "{line}");

    // The twin: not in review, the same kind of event is checked and settles.
    let other = w.unknown_op("order-review-twin", None).await;
    let other_pi = w
        .gateway
        .insert_charge(&other, PaymentIntentStatus::Succeeded);
    let body = event(
        "evt_review_2",
        "payment_intent.succeeded",
        &other_pi,
        "succeeded",
        &other,
    );
    let (reception, log) = logged(w.deliver(&body)).await;
    assert!(
        matches!(reception, Reception::Applied { .. }),
        "{reception:?}"
    );
    assert!(!log.contains("operation in review"), "{log}");
    assert_eq!(w.retrieves(), 1);
}

/// An authorization's events are hints like any other: `payment_intent.amount_capturable_updated`
/// for a manual charge whose create answer was lost records it `authorized` with the deadline
/// Stripe states (read at Stripe, not from the event); `charge.captured` (its object the charge,
/// which carries no metadata of ours) finds the operation through its intent's own metadata at
/// Stripe and settles it captured, with the amount Stripe took. The twin: the same capture event
/// while Stripe still holds the intent uncaptured moves nothing (the claim is not confirmed).
#[tokio::test]
async fn an_authorization_s_events_record_the_hold_then_the_capture_both_read_at_stripe() {
    use charge_once::ports::CapturePaymentIntent;
    let w = World::new();
    // The hold's deadline and its lapse on the test's clock, not the wall's.
    w.gateway.set_clock(Arc::new(w.clock.clone()));
    let op = charge_core::testing::order("order-auth")
        .manual()
        .requested_by("webhook-tests")
        .at(w.clock.now())
        .create_in(w.store.as_ref())
        .await;
    let op = w.write(&op, OperationStatus::Unknown, None).await;
    // Stripe holds it (the create's answer was lost).
    let create = CreatePaymentIntent::for_operation(&op).unwrap();
    let held = w.gateway.create(&create).await.unwrap();
    assert_eq!(held.status, PaymentIntentStatus::RequiresCapture);
    let body = event(
        "evt_held",
        "payment_intent.amount_capturable_updated",
        &held.id,
        "requires_capture",
        &op,
    );
    assert!(matches!(
        w.deliver(&body).await,
        Reception::Applied {
            status: OperationStatus::Authorized,
            ..
        }
    ));
    let now = w.current(&op).await;
    assert_eq!(now.status, OperationStatus::Authorized);
    assert_eq!(now.external_id.as_ref(), Some(&held.id));
    assert!(
        now.capture_before().is_some(),
        "the deadline, as Stripe states it"
    );

    let captured_event = |id: &str| {
        serde_json::json!({
            "id": id, "object": "event", "type": "charge.captured", "created": 1_800_000_000,
            "data": {"object": {"id": "ch_1", "object": "charge", "payment_intent": held.id.as_str(), "captured": true}},
        })
        .to_string()
        .into_bytes()
    };
    // The twin first: Stripe has not captured it; the event's claim is not confirmed.
    let reception = w.deliver(&captured_event("evt_cap_early")).await;
    assert!(matches!(reception, Reception::Mismatch(_)), "{reception:?}");
    assert_eq!(w.current(&op).await.status, OperationStatus::Authorized);
    // Captured (700 of the 1250) outside this engine, say in the dashboard: the event settles it.
    let capture = CapturePaymentIntent {
        id: held.id.clone(),
        idempotency_key: op.operation_id.capture_idempotency_key(),
        amount_to_capture: charge_core::domain::Amount::new(700).unwrap(),
    };
    w.gateway.capture(&capture).await.unwrap();
    let reception = w.deliver(&captured_event("evt_cap")).await;
    assert!(
        matches!(
            reception,
            Reception::Applied {
                status: OperationStatus::Succeeded,
                ..
            }
        ),
        "{reception:?}"
    );
    let now = w.current(&op).await;
    assert_eq!(now.status, OperationStatus::Succeeded);
    assert_eq!(now.amount_captured().map(|a| a.minor_units()), Some(700));
    assert_eq!(w.creates(), 1, "only the test's own create");
}

/// A gateway whose first retrieve lets the charge path settle the operation first (`status`,
/// with the intent `pi` recorded): the record the events function read was unsettled, the one
/// its shell then claims is settled.
struct SettledMeanwhile {
    inner: Arc<FakeGateway>,
    store: Arc<MemoryStore>,
    clock: ManualClock,
    settle: std::sync::Mutex<Option<(Operation, OperationStatus, String)>>,
}

impl StripeAccount for SettledMeanwhile {
    fn livemode(&self) -> bool {
        self.inner.livemode()
    }
}

#[async_trait::async_trait]
impl PaymentIntents for SettledMeanwhile {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.create(req).await
    }
    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError> {
        let settle = self.settle.lock().unwrap().take();
        if let Some((op, status, pi)) = settle {
            let now = self.clock.now();
            testing::settle_as(self.store.as_ref(), &op, status, Some(&pi), now).await;
        }
        self.inner.retrieve(id).await
    }
    async fn search_by_operation(
        &self,
        id: &charge_core::domain::OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        self.inner.search_by_operation(id).await
    }
    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.cancel(req).await
    }
}

impl StripeRefunds for SettledMeanwhile {}

impl charge_once::ports::StripeDisputes for SettledMeanwhile {}

impl CreatedLists for SettledMeanwhile {}

/// The record settles between the events function's read and its shell's claim: the shell finds
/// it settled, writes nothing, and its answer for that record is what the event reports. Stripe
/// contradicting it (recorded failed, the intent succeeded) pages; agreeing, it is a late event.
#[tokio::test]
async fn a_record_settled_before_the_claim_is_answered_by_the_shell_on_what_stands() {
    let cases = [
        (
            OperationStatus::Failed,
            Reception::SettledConflict {
                reason: "settled_failed_but_succeeded",
            },
        ),
        (
            OperationStatus::Succeeded,
            Reception::Ignored(Ignored::AlreadySettled),
        ),
    ];
    for (settled_as, want) in cases {
        let mut w = World::new();
        let order = format!("order-meanwhile-{}", settled_as.as_str());
        let op = w.unknown_op(&order, None).await;
        let pi = w.gateway.insert_charge(&op, PaymentIntentStatus::Succeeded);
        w.deps.charge.gateway = Arc::new(SettledMeanwhile {
            inner: w.gateway.clone(),
            store: w.store.clone(),
            clock: w.clock.clone(),
            settle: std::sync::Mutex::new(Some((op.clone(), settled_as, pi.as_str().to_owned()))),
        });
        let body = event(
            "evt_meanwhile",
            "payment_intent.succeeded",
            &pi,
            "succeeded",
            &op,
        );
        assert_eq!(w.deliver(&body).await, want, "settled {settled_as:?}");
        let stands = w.current(&op).await;
        assert_eq!(
            stands.status, settled_as,
            "the settled record is never written"
        );
        assert_eq!(w.retrieves(), 1);
        assert_eq!(w.creates(), 0);
    }
}

/// `order` declined and charged again: its head `failed` naming attempt 2 as its latest, and
/// attempt 2 gone `unknown`, written the way the door's write and the charge function leave
/// them. Returns (head, attempt 2).
async fn retried(w: &World, order: &str) -> (Operation, Operation) {
    use charge_core::domain::{OperationId, OperationKind};
    use charge_once::ports::OperationCreates;
    let mut head = charge_core::testing::order(order)
        .requested_by("webhook-tests")
        .at(w.clock.now())
        .build();
    head.status = OperationStatus::Failed;
    head.external_id = Some(PaymentIntentId::parse("pi_declined").unwrap());
    head.first_attempted_at = Some(w.clock.now());
    head.next_due_at = None;
    head.settled_at = Some(w.clock.now());
    head.params.charge_state_mut().unwrap().latest_attempt = Some(2);
    let second = Operation {
        kind: OperationKind::Charge(2),
        operation_id: OperationId::new_random(),
        status: OperationStatus::Pending,
        external_id: None,
        first_attempted_at: None,
        next_due_at: Some(w.clock.now()),
        settled_at: None,
        params: charge_core::testing::order(order).build().params,
        ..head.clone()
    };
    w.store.create_if_absent(&head).await.unwrap();
    w.store.create_if_absent(&second).await.unwrap();
    let second = w.write(&second, OperationStatus::Unknown, None).await;
    (head, second)
}

/// An intent of an order's second attempt settles that attempt: found by the attempt its
/// metadata names, its operation id checked, the declined head untouched. An intent whose
/// metadata names no attempt (a `charge.captured` event's intent, read at Stripe, carries the
/// order and operation only) is found among the order's attempts by its operation id. The
/// twin: an intent naming an operation none of the order's attempts has is not ours.
#[tokio::test]
async fn an_event_of_a_later_attempt_settles_that_attempt() {
    let w = World::new();
    let (head, second) = retried(&w, "order-retried").await;
    let pi = w
        .gateway
        .insert_charge(&second, PaymentIntentStatus::Succeeded);
    let mut body: serde_json::Value = serde_json::from_slice(&event(
        "evt_attempt",
        "payment_intent.succeeded",
        &pi,
        "succeeded",
        &second,
    ))
    .unwrap();
    body["data"]["object"]["metadata"]["attempt"] = "2".into();
    let reception = w.deliver(body.to_string().as_bytes()).await;
    assert_eq!(
        reception,
        Reception::Applied {
            status: OperationStatus::Succeeded,
            review: None
        }
    );
    let now = w.current(&second).await;
    assert_eq!(now.status, OperationStatus::Succeeded);
    assert_eq!(now.external_id.as_deref(), Some(pi.as_str()));
    assert_eq!(
        w.current(&head).await,
        head,
        "the declined head is untouched"
    );

    // No attempt in the metadata: found by the operation id among the order's attempts.
    let (head, second) = retried(&w, "order-retried-unnamed").await;
    let pi = w
        .gateway
        .insert_charge(&second, PaymentIntentStatus::Succeeded);
    let body = event(
        "evt_attempt_unnamed",
        "payment_intent.succeeded",
        &pi,
        "succeeded",
        &second,
    );
    assert_eq!(
        w.deliver(&body).await,
        Reception::Applied {
            status: OperationStatus::Succeeded,
            review: None
        }
    );
    assert_eq!(w.current(&second).await.status, OperationStatus::Succeeded);
    assert_eq!(w.current(&head).await, head);

    // An operation id none of the order's attempts has: not ours, nothing moved.
    let (head, second) = retried(&w, "order-retried-other").await;
    let stranger = Operation {
        operation_id: charge_core::domain::OperationId::new_random(),
        ..second.clone()
    };
    let pi = w
        .gateway
        .insert_charge(&stranger, PaymentIntentStatus::Succeeded);
    let body = event(
        "evt_attempt_other",
        "payment_intent.succeeded",
        &pi,
        "succeeded",
        &stranger,
    );
    assert_eq!(
        w.deliver(&body).await,
        Reception::Ignored(Ignored::UnknownOperation)
    );
    assert_eq!(w.current(&second).await, second);
    assert_eq!(w.current(&head).await, head);
    assert_eq!(w.creates(), 0);
}
