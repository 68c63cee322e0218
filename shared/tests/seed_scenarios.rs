//! The seed's scenarios on the in-memory ports. Every test asserts how many PaymentIntents really
//! exist at the (fake) Stripe, not only what our record says.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use charge_once::executor::{execute_charge, ChargeDeps, ChargePolicy, ChargeReport, Disposition};
use charge_once::memory::{FakeFault, FakeGateway, MemoryStore};
use charge_once::ports::{
    Claim, ClaimRequest, CreatePaymentIntent, OperationStore, OutcomeRecord, PaymentGateway,
    Recorded,
};
use charge_once::{
    Amount, ChargeParams, Clock, Currency, CustomerId, GatewayError, Lease, LeaseToken,
    ManualClock, Operation, OperationId, OperationKey, OperationStatus, OrderId, PaymentIntent,
    PaymentIntentStatus, PaymentMethodId, RetryCause, Timestamp,
};

const HOUR: Duration = Duration::from_secs(3600);

struct World {
    store: Arc<MemoryStore>,
    gateway: Arc<FakeGateway>,
    clock: ManualClock,
    deps: ChargeDeps,
}

impl World {
    fn new(gateway: FakeGateway) -> Self {
        Self::with_gateway(Arc::new(gateway))
    }

    fn with_gateway(gateway: Arc<FakeGateway>) -> Self {
        let store = Arc::new(MemoryStore::new());
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        let deps = ChargeDeps {
            store: store.clone(),
            gateway: gateway.clone(),
            clock: Arc::new(clock.clone()),
            policy: ChargePolicy::default(),
        };
        Self {
            store,
            gateway,
            clock,
            deps,
        }
    }

    async fn new_op(&self, order: &str) -> Operation {
        let op = Operation::new(
            OrderId::parse(order).unwrap(),
            params(1250),
            charge_once::Principal::jwt("seed-tests").unwrap(),
            self.clock.now(),
            self.deps.policy.pending_grace,
        );
        self.store.create_if_absent(&op).await.unwrap();
        op
    }

    async fn execute(&self, op: &Operation) -> ChargeReport {
        execute_charge(&self.deps, &op.key(), &op.operation_id)
            .await
            .unwrap()
    }

    async fn current(&self, op: &Operation) -> Operation {
        self.store.get(&op.key()).await.unwrap().unwrap()
    }

    fn creates(&self) -> u64 {
        self.gateway.calls.create.load(Ordering::SeqCst)
    }
}

fn params(amount: i64) -> ChargeParams {
    ChargeParams {
        amount: Amount::new(amount).unwrap(),
        currency: Currency::parse("usd").unwrap(),
        customer_id: CustomerId::parse("cus_seed").unwrap(),
        payment_method: PaymentMethodId::parse("pm_card_visa").unwrap(),
    }
}

#[tokio::test]
async fn response_lost_then_retry_with_same_key_charges_once() {
    let w = World::new(FakeGateway::new());
    w.gateway.script(FakeFault::LoseResponse);
    let op = w.new_op("ord-lost").await;

    let first = w.execute(&op).await;
    assert_eq!(first.status, OperationStatus::Unknown);
    assert_eq!(first.disposition, Disposition::Scheduled);

    let second = w.execute(&op).await;
    assert_eq!(second.status, OperationStatus::Succeeded);
    assert_eq!(w.gateway.charge_count(), 1, "one external side effect");
    assert_eq!(w.creates(), 2, "the retry was a create with the same key");
    let charges = w.gateway.charges();
    let charge = charges.values().next().unwrap();
    assert_eq!(charge.idempotency_key, op.idempotency_key().as_str());
    let rec = w.current(&op).await;
    assert_eq!(
        rec.external_id.as_deref(),
        Some(charges.keys().next().unwrap().as_str())
    );
    assert_eq!(rec.next_due_at, None, "settled leaves the unknown index");
    assert_eq!(rec.attempts, 2);
}

#[tokio::test]
async fn processing_is_not_success_and_is_settled_by_retrieve() {
    let w = World::new(FakeGateway::with_first_status(
        PaymentIntentStatus::Processing,
    ));
    let op = w.new_op("ord-processing").await;

    let first = w.execute(&op).await;
    assert_eq!(first.status, OperationStatus::Unknown);
    let pi = first
        .external_id
        .clone()
        .expect("the PaymentIntent id is recorded");

    w.gateway.set_status(&pi, PaymentIntentStatus::Succeeded);
    let second = w.execute(&op).await;
    assert_eq!(second.status, OperationStatus::Succeeded);
    assert_eq!(w.gateway.charge_count(), 1);
    assert_eq!(
        w.creates(),
        1,
        "the second look is a retrieve, not a re-send"
    );
    assert_eq!(w.gateway.calls.retrieve.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn processing_that_fails_later_settles_failed() {
    let w = World::new(FakeGateway::with_first_status(
        PaymentIntentStatus::Processing,
    ));
    let op = w.new_op("ord-processing-fails").await;
    let pi = w.execute(&op).await.external_id.unwrap();
    w.gateway
        .set_status(&pi, PaymentIntentStatus::RequiresPaymentMethod);
    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Failed);
    assert_eq!(r.external_id.as_deref(), Some(pi.as_str()));
    assert_eq!(w.gateway.charge_count(), 1);
    assert_eq!(w.creates(), 1);
}

#[tokio::test]
async fn replayed_500_stays_unknown_then_search_settles_past_the_window() {
    let w = World::new(FakeGateway::new());
    w.gateway.script(FakeFault::ServerErrorAfterCommit);
    let op = w.new_op("ord-500").await;

    for _ in 0..3 {
        let r = w.execute(&op).await;
        assert_eq!(r.status, OperationStatus::Unknown, "a 500 is never rounded");
        w.clock.advance(HOUR);
    }
    assert_eq!(
        w.gateway.charge_count(),
        1,
        "the replayed 500 never charged again"
    );
    assert_eq!(w.creates(), 3);

    // Past the key window (and search's lag): settle by search, never create.
    w.clock.advance(21 * HOUR);
    let settled = w.execute(&op).await;
    assert_eq!(settled.status, OperationStatus::Succeeded);
    assert_eq!(settled.disposition, Disposition::Settled);
    assert_eq!(w.creates(), 3, "no create once the window has passed");
    assert_eq!(w.gateway.calls.search.load(Ordering::SeqCst), 1);
    assert_eq!(w.gateway.charge_count(), 1);
    assert_eq!(
        w.current(&op).await.external_id.as_deref(),
        w.gateway.charges().keys().next().map(String::as_str)
    );
}

#[tokio::test]
async fn no_search_before_stripe_search_can_be_trusted() {
    let w = World::new(FakeGateway::new());
    w.gateway.script(FakeFault::ServerErrorAfterCommit);
    let op = w.new_op("ord-lag").await;
    w.execute(&op).await;

    w.clock.advance(23 * HOUR + Duration::from_secs(60));
    let waiting = w.execute(&op).await;
    assert_eq!(waiting.status, OperationStatus::Unknown);
    assert_eq!(waiting.gateway_calls, 0);
    assert_eq!(w.gateway.calls.search.load(Ordering::SeqCst), 0);
    assert_eq!(w.creates(), 1, "and no create either: the key may be gone");
    let rec = w.current(&op).await;
    let search_at = rec
        .first_attempted_at
        .unwrap()
        .plus(23 * HOUR + Duration::from_secs(600));
    assert_eq!(rec.next_due_at, Some(search_at));

    w.clock.set(search_at);
    assert_eq!(w.execute(&op).await.status, OperationStatus::Succeeded);
    assert_eq!(w.gateway.calls.search.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn window_passed_with_zero_matches_goes_to_review() {
    let w = World::new(FakeGateway::new());
    w.gateway.script(FakeFault::ServerErrorBeforeCommit);
    let op = w.new_op("ord-zero").await;
    assert_eq!(w.execute(&op).await.status, OperationStatus::Unknown);
    assert_eq!(w.gateway.charge_count(), 0);

    w.clock.advance(24 * HOUR);
    let r = w.execute(&op).await;
    assert_eq!(
        r.status,
        OperationStatus::Unknown,
        "not found does not prove not charged"
    );
    assert!(matches!(r.disposition, Disposition::InReview(ref why) if why.contains("found 0")));
    let rec = w.current(&op).await;
    assert!(rec.review.as_ref().unwrap().reason.contains("found 0"));
    assert_eq!(
        w.creates(),
        1,
        "never re-created with a possibly pruned key"
    );
    assert_eq!(w.gateway.charge_count(), 0);

    // In review, the automatic path leaves it alone.
    let again = w.execute(&op).await;
    assert!(matches!(again.disposition, Disposition::InReview(_)));
    assert_eq!(again.gateway_calls, 0);
}

#[tokio::test]
async fn window_passed_with_two_matches_goes_to_review() {
    let w = World::new(FakeGateway::new());
    w.gateway.script(FakeFault::LoseResponse);
    let op = w.new_op("ord-two").await;
    w.execute(&op).await;
    w.gateway
        .insert_charge(op.operation_id, PaymentIntentStatus::Succeeded);
    assert_eq!(w.gateway.charge_count(), 2);

    w.clock.advance(24 * HOUR);
    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Unknown);
    assert!(matches!(r.disposition, Disposition::InReview(ref why) if why.contains("found 2")));
    assert_eq!(w.creates(), 1);
    assert_eq!(w.gateway.charge_count(), 2, "nothing new was created");
}

#[tokio::test]
async fn decline_fails_and_is_never_retried() {
    let w = World::new(FakeGateway::new());
    w.gateway.script(FakeFault::Decline("card_declined"));
    let op = w.new_op("ord-decline").await;

    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Failed);
    assert_eq!(r.disposition, Disposition::Settled);
    let pi = w.gateway.charges().keys().next().cloned().unwrap();
    assert_eq!(
        r.external_id.as_deref(),
        Some(pi.as_str()),
        "the declined PaymentIntent is kept"
    );

    let again = w.execute(&op).await;
    assert_eq!(again.disposition, Disposition::AlreadySettled);
    assert_eq!(again.gateway_calls, 0);
    assert_eq!(w.creates(), 1);
}

#[tokio::test]
async fn rate_limited_keeps_status_and_retries_later_with_the_same_key() {
    let w = World::new(FakeGateway::new());
    w.gateway.script(FakeFault::RateLimited);
    let op = w.new_op("ord-429").await;

    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Pending, "429: nothing happened");
    assert_eq!(
        r.disposition,
        Disposition::RetryLater(RetryCause::RateLimited)
    );
    assert!(r.disposition.wants_retry());
    assert_eq!(w.gateway.charge_count(), 0);
    let rec = w.current(&op).await;
    assert!(rec.lease.is_none(), "the lease is released");
    assert!(rec.last_error.as_deref().unwrap().contains("429"));

    let later = w.execute(&op).await;
    assert_eq!(later.status, OperationStatus::Succeeded);
    assert_eq!(w.gateway.charge_count(), 1);
    let charges = w.gateway.charges();
    assert_eq!(
        charges.values().next().unwrap().idempotency_key,
        op.idempotency_key().as_str()
    );
}

#[tokio::test]
async fn auth_error_never_marks_the_operation_failed() {
    let w = World::new(FakeGateway::new());
    w.gateway.script(FakeFault::Unauthorized);
    let op = w.new_op("ord-401").await;
    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Pending);
    assert_eq!(
        r.disposition,
        Disposition::RetryLater(RetryCause::Configuration)
    );
    assert_eq!(w.gateway.charge_count(), 0);
}

#[tokio::test]
async fn settled_operation_makes_zero_gateway_calls() {
    let w = World::new(FakeGateway::new());
    let op = w.new_op("ord-settled").await;
    assert_eq!(w.execute(&op).await.status, OperationStatus::Succeeded);
    let calls_before = w.gateway.calls.total();

    for _ in 0..3 {
        let r = w.execute(&op).await;
        assert_eq!(r.disposition, Disposition::AlreadySettled);
        assert_eq!(r.gateway_calls, 0);
    }
    assert_eq!(w.gateway.calls.total(), calls_before);
    assert_eq!(w.gateway.charge_count(), 1);
}

#[tokio::test]
async fn key_misuse_goes_to_review_and_is_never_retried_with_another_key() {
    let w = World::new(FakeGateway::new());
    let op = w.new_op("ord-misuse").await;
    // A bug elsewhere used our key with other parameters first.
    let mut wrong = CreatePaymentIntent::for_operation(&op);
    wrong.params = params(9999);
    w.gateway.create(&wrong).await.unwrap();

    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Unknown);
    assert!(matches!(r.disposition, Disposition::InReview(ref why) if why.contains("misuse")));
    let rec = w.current(&op).await;
    assert!(rec.last_error.as_deref().unwrap().contains("idempotency"));
    assert!(rec.review.is_some());
    assert_eq!(w.gateway.charge_count(), 1, "only the buggy one exists");
    let keys: Vec<_> = w
        .gateway
        .charges()
        .values()
        .map(|c| c.idempotency_key.clone())
        .collect();
    assert_eq!(keys, vec![op.idempotency_key().as_str().to_owned()]);

    assert_eq!(
        w.execute(&op).await.gateway_calls,
        0,
        "review stops the automatic path"
    );
}

#[tokio::test]
async fn invalid_request_goes_to_review_without_failing_the_customer() {
    let w = World::new(FakeGateway::new());
    w.gateway.script(FakeFault::Rejected);
    let op = w.new_op("ord-invalid").await;
    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Pending);
    assert!(matches!(r.disposition, Disposition::InReview(_)));
    assert_eq!(w.gateway.charge_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_executions_create_exactly_once() {
    let w = World::new(FakeGateway::new());
    w.gateway.set_create_delay(Duration::from_millis(50));
    let op = w.new_op("ord-race").await;

    let (a, b) = tokio::join!(
        {
            let deps = w.deps.clone();
            let op = op.clone();
            tokio::spawn(async move { execute_charge(&deps, &op.key(), &op.operation_id).await })
        },
        {
            let deps = w.deps.clone();
            let op = op.clone();
            tokio::spawn(async move { execute_charge(&deps, &op.key(), &op.operation_id).await })
        }
    );
    let mut dispositions = vec![
        a.unwrap().unwrap().disposition,
        b.unwrap().unwrap().disposition,
    ];
    dispositions.sort_by_key(|d| format!("{d:?}"));
    assert_eq!(dispositions, vec![Disposition::Busy, Disposition::Settled]);
    assert_eq!(w.creates(), 1);
    assert_eq!(w.gateway.charge_count(), 1);
    assert_eq!(w.current(&op).await.status, OperationStatus::Succeeded);
}

#[tokio::test]
async fn a_stale_lease_holder_cannot_overwrite() {
    let w = World::new(FakeGateway::new());
    let op = w.new_op("ord-stale").await;
    let stale = LeaseToken::new_random();
    let now = w.clock.now();
    let claimed = w
        .store
        .claim(&ClaimRequest {
            key: op.key(),
            operation_id: op.operation_id,
            lease: Lease {
                token: stale,
                expires_at: now.plus(Duration::from_secs(60)),
            },
            now,
        })
        .await
        .unwrap();
    assert!(matches!(claimed, Claim::Claimed(_)));

    // The first holder stalls past its lease; another execution takes over and settles.
    w.clock.advance(Duration::from_secs(61));
    assert_eq!(w.execute(&op).await.status, OperationStatus::Succeeded);

    let late = w
        .store
        .record(&OutcomeRecord {
            key: op.key(),
            operation_id: op.operation_id,
            lease_token: stale,
            status: OperationStatus::Failed,
            external_id: None,
            last_error: Some("late".into()),
            review: None,
            next_due_at: None,
            now: w.clock.now(),
        })
        .await
        .unwrap();
    assert!(
        matches!(late, Recorded::Refused(Some(ref cur)) if cur.status == OperationStatus::Succeeded)
    );
    assert_eq!(w.current(&op).await.status, OperationStatus::Succeeded);
}

/// A gateway that, on create, looks at what the store holds at that moment.
struct Observer {
    inner: Arc<FakeGateway>,
    store: Arc<MemoryStore>,
    key: OperationKey,
    seen_first_attempt: Mutex<Vec<Option<Timestamp>>>,
}

#[async_trait]
impl PaymentGateway for Observer {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        let rec = self.store.get(&self.key).await.unwrap().unwrap();
        self.seen_first_attempt
            .lock()
            .unwrap()
            .push(rec.first_attempted_at);
        self.inner.create(req).await
    }
    async fn retrieve(
        &self,
        id: &charge_once::PaymentIntentId,
    ) -> Result<PaymentIntent, GatewayError> {
        self.inner.retrieve(id).await
    }
    async fn search_by_operation(
        &self,
        id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        self.inner.search_by_operation(id).await
    }
}

#[tokio::test]
async fn first_attempted_at_is_durable_before_the_gateway_is_called() {
    let mut w = World::new(FakeGateway::new());
    w.gateway.script(FakeFault::LoseResponse);
    let op = w.new_op("ord-durable").await;
    assert_eq!(w.current(&op).await.first_attempted_at, None);
    let observer = Arc::new(Observer {
        inner: w.gateway.clone(),
        store: w.store.clone(),
        key: op.key(),
        seen_first_attempt: Mutex::new(Vec::new()),
    });
    w.deps.gateway = observer.clone();
    let started = w.clock.now();

    w.execute(&op).await;
    w.clock.advance(HOUR);
    w.execute(&op).await;

    let seen = observer.seen_first_attempt.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![Some(started), Some(started)],
        "set before the call, never moved"
    );
    assert_eq!(w.gateway.charge_count(), 1);
}

#[tokio::test]
async fn pruned_key_past_the_window_settles_by_search_not_by_a_new_charge() {
    let w = World::new(FakeGateway::new());
    w.gateway.script(FakeFault::LoseResponse);
    let op = w.new_op("ord-pruned").await;
    w.execute(&op).await;

    w.clock.advance(25 * HOUR);
    w.gateway.prune_keys();
    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Succeeded);
    assert_eq!(
        w.gateway.charge_count(),
        1,
        "a create now would have charged twice"
    );
    assert_eq!(w.creates(), 1);
}
