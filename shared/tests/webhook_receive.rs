//! The webhook's whole path ([`charge_once::webhook::receive`]) on the in-memory ports: signature,
//! inbox, lookup on the key, decision, and the executor's conditional writes. Every test also
//! checks that Stripe's create was never called.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use charge_once::memory::{FakeGateway, MemoryInbox, MemoryStore};
use charge_once::ports::{Claim, OperationStore};
use charge_once::testing;
use charge_once::webhook::signature::{compute_v1, sign_header};
use charge_once::webhook::{
    receive, Ignored, Reception, Rejection, SignatureError, WebhookDeps, WebhookSecret,
    DEFAULT_TOLERANCE, SECOND_PAYMENT_INTENT,
};
use charge_once::{
    Clock, LeaseToken, ManualClock, Operation, OperationStatus, PaymentIntentStatus, Timestamp,
};

const SECRET: &str = "whsec_webhook_tests";

struct World {
    store: Arc<MemoryStore>,
    inbox: Arc<MemoryInbox>,
    gateway: Arc<FakeGateway>,
    clock: ManualClock,
    deps: WebhookDeps,
}

impl World {
    fn new() -> Self {
        let store = Arc::new(MemoryStore::new());
        let inbox = Arc::new(MemoryInbox::new());
        let gateway = Arc::new(FakeGateway::new());
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        let deps = WebhookDeps {
            store: store.clone(),
            inbox: inbox.clone(),
            gateway: gateway.clone(),
            clock: Arc::new(clock.clone()),
            secret: WebhookSecret::parse(SECRET).unwrap(),
            tolerance: DEFAULT_TOLERANCE,
            lease_ttl: Duration::from_secs(60),
        };
        Self {
            store,
            inbox,
            gateway,
            clock,
            deps,
        }
    }

    fn now_secs(&self) -> i64 {
        self.clock.now().as_millis() / 1000
    }

    /// An operation whose charge went `unknown`, with `external_id` recorded if given.
    async fn unknown_op(&self, order: &str, external_id: Option<&str>) -> Operation {
        let op = testing::order(order)
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
        let header = sign_header(&self.deps.secret, self.now_secs(), body);
        receive(&self.deps, Some(&header), body).await.reception
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
    let pi = w
        .gateway
        .insert_charge(op.operation_id, PaymentIntentStatus::Succeeded);
    let body = event("evt_1", "payment_intent.succeeded", &pi, "succeeded", &op);
    let header = sign_header(&w.deps.secret, w.now_secs(), &body);
    let report = receive(&w.deps, Some(&header), &body).await;
    assert_eq!(
        report.reception,
        Reception::Applied {
            status: OperationStatus::Succeeded,
            review: false
        }
    );
    assert_eq!(report.reception.http_status(), 200);
    assert_eq!(report.gateway_calls, 0, "succeeded is final: no retrieve");
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
    let pi = w
        .gateway
        .insert_charge(op.operation_id, PaymentIntentStatus::Succeeded);
    let body = event("evt_bad", "payment_intent.succeeded", &pi, "succeeded", &op);
    let t = w.now_secs();
    let other = WebhookSecret::parse("whsec_someone_else").unwrap();
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
            Some(sign_header(&w.deps.secret, t - 301, &body)),
            &body,
            SignatureError::OutsideTolerance,
        ),
        (
            "altered body",
            Some(sign_header(&w.deps.secret, t, &body)),
            &altered,
            SignatureError::Mismatch,
        ),
        ("missing header", None, &body, SignatureError::MissingHeader),
        (
            "no v1",
            Some(format!("t={t},v0={}", compute_v1(&w.deps.secret, t, &body))),
            &body,
            SignatureError::NoSignature,
        ),
    ];
    for (name, header, body, want) in cases {
        let report = receive(&w.deps, header.as_deref(), body).await;
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
    let pi = w
        .gateway
        .insert_charge(op.operation_id, PaymentIntentStatus::Succeeded);
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
    let pi = w
        .gateway
        .insert_charge(op.operation_id, PaymentIntentStatus::Succeeded);
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
    let pi = w
        .gateway
        .insert_charge(op.operation_id, PaymentIntentStatus::Succeeded);
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
            review: false
        }
    );
    assert_eq!(w.retrieves(), 1);
    assert_eq!(w.current(&op).await.status, OperationStatus::Succeeded);

    // Still processing at Stripe: stays unknown, with the PaymentIntent id recorded.
    let op2 = w.unknown_op("order-proc", None).await;
    let pi2 = w
        .gateway
        .insert_charge(op2.operation_id, PaymentIntentStatus::Processing);
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
            review: false
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
    let pi3 = w
        .gateway
        .insert_charge(op3.operation_id, PaymentIntentStatus::Canceled);
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
            review: false
        }
    );
    assert_eq!(w.creates(), 0);
}

#[tokio::test]
async fn a_second_succeeded_intent_goes_to_review_or_pages() {
    let w = World::new();
    let first = w.gateway.insert_charge(
        charge_once::OperationId::new_random(),
        PaymentIntentStatus::Processing,
    );
    let op = w.unknown_op("order-two", Some(&first)).await;
    let second = w
        .gateway
        .insert_charge(op.operation_id, PaymentIntentStatus::Succeeded);
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
            review: true
        }
    );
    let now = w.current(&op).await;
    assert_eq!(
        now.review.as_ref().map(|r| r.reason.as_str()),
        Some(SECOND_PAYMENT_INTENT)
    );
    assert_eq!(
        now.external_id.as_deref(),
        Some(first.as_str()),
        "the recorded id stays"
    );

    // On a settled record nothing is written; the caller pages.
    let settled = w.unknown_op("order-settled", None).await;
    let a = w
        .gateway
        .insert_charge(settled.operation_id, PaymentIntentStatus::Succeeded);
    let settled = w
        .write(&settled, OperationStatus::Succeeded, Some(&a))
        .await;
    let b = w
        .gateway
        .insert_charge(settled.operation_id, PaymentIntentStatus::Succeeded);
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
    stranger.operation_id = charge_once::OperationId::new_random();
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
    let pi = w
        .gateway
        .insert_charge(op.operation_id, PaymentIntentStatus::Succeeded);
    // The charge function holds the lease right now.
    let now = w.clock.now();
    let claim = w
        .store
        .claim(&testing::claim_request(&op, LeaseToken::new_random(), now))
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
        matches!(reception, Reception::RetryLater { busy: true, .. }),
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
