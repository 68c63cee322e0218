//! The core's seed scenarios once more, through the real Stripe client and the Stripe simulator
//! over HTTP, the simulator running on the core's clock. Each counts what the simulator's ledger
//! shows was really created.

use std::sync::Arc;
use std::time::Duration;

use charge_once::adapters::stripe::StripeGateway;
use charge_once::executor::{execute_charge, ChargeDeps, ChargePolicy, ChargeReport, Disposition};
use charge_once::memory::MemoryStore;
use charge_once::ports::{CreatePaymentIntent, OperationStore, PaymentGateway};
use charge_once::{
    Amount, ChargeParams, Clock, Currency, CustomerId, Operation, OperationStatus, OrderId,
    PaymentMethodId, RetryCause,
};
use stripe_sim::FaultKind;
use testkit::stripe::StripeSide;

const HOUR: Duration = Duration::from_secs(3600);

struct World {
    side: StripeSide,
    store: Arc<MemoryStore>,
    gateway: Arc<StripeGateway>,
    deps: ChargeDeps,
}

impl World {
    async fn new() -> Self {
        let side = StripeSide::with_new_clock().await;
        let store = Arc::new(MemoryStore::new());
        let gateway = Arc::new(side.gateway());
        let deps = ChargeDeps {
            store: store.clone(),
            gateway: gateway.clone(),
            clock: Arc::new(side.clock.clone()),
            policy: ChargePolicy::default(),
        };
        Self {
            side,
            store,
            gateway,
            deps,
        }
    }

    async fn new_op(&self, order: &str, pm: &str) -> Operation {
        let op = Operation::new(
            OrderId::parse(order).unwrap(),
            ChargeParams {
                amount: Amount::new(2500).unwrap(),
                currency: Currency::parse("usd").unwrap(),
                customer_id: CustomerId::parse("cus_http").unwrap(),
                payment_method: PaymentMethodId::parse(pm).unwrap(),
            },
            charge_once::Principal::jwt("seed-tests").unwrap(),
            self.side.clock.now(),
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

    fn ledger_for(&self, op: &Operation) -> Vec<stripe_sim::LedgerEntry> {
        let id = op.operation_id.to_string();
        self.side
            .sim
            .ledger()
            .into_iter()
            .filter(|e| e.operation_id.as_deref() == Some(id.as_str()))
            .collect()
    }
}

#[tokio::test]
async fn lost_response_then_same_key_charges_once() {
    let w = World::new().await;
    w.side.sim.push_script([FaultKind::DropAfterCommit]);
    let op = w.new_op("http-lost", "pm_card_visa").await;
    assert_eq!(w.execute(&op).await.status, OperationStatus::Unknown);
    assert_eq!(w.side.sim.injected()[&FaultKind::DropAfterCommit], 1);
    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Succeeded);
    let ledger = w.ledger_for(&op);
    assert_eq!(ledger.len(), 1);
    assert_eq!(r.external_id.as_deref(), Some(ledger[0].id.as_str()));
    assert_eq!(
        ledger[0].idempotency_key.as_deref(),
        Some(op.idempotency_key().as_str())
    );
}

#[tokio::test]
async fn processing_then_retrieve() {
    let w = World::new().await;
    let op = w
        .new_op("http-processing", "pm_card_processing_succeeds")
        .await;
    assert_eq!(w.execute(&op).await.status, OperationStatus::Unknown);
    w.side.clock.advance(Duration::from_secs(601));
    assert_eq!(w.execute(&op).await.status, OperationStatus::Succeeded);
    assert_eq!(w.ledger_for(&op).len(), 1);
    let counts = w.side.sim.request_counts();
    assert_eq!((counts.create, counts.retrieve), (1, 1));
}

#[tokio::test]
async fn replayed_500_stays_unknown_then_search_settles_after_the_window() {
    let w = World::new().await;
    w.side.sim.push_script([FaultKind::ServerErrorAfterCommit]);
    let op = w.new_op("http-500", "pm_card_visa").await;
    for _ in 0..3 {
        assert_eq!(w.execute(&op).await.status, OperationStatus::Unknown);
        w.side.clock.advance(HOUR);
    }
    assert_eq!(w.ledger_for(&op).len(), 1);
    // Past 24 h the simulator may prune the key: a create now would charge again. We search.
    w.side.clock.advance(22 * HOUR);
    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Succeeded);
    assert_eq!(w.ledger_for(&op).len(), 1, "no second PaymentIntent");
    assert_eq!(w.side.sim.request_counts().create, 3);
    assert_eq!(w.side.sim.request_counts().search, 1);
}

#[tokio::test]
async fn window_passed_with_nothing_found_goes_to_review() {
    let w = World::new().await;
    w.side.sim.push_script([FaultKind::ServerErrorBeforeCommit]);
    let op = w.new_op("http-zero", "pm_card_visa").await;
    assert_eq!(w.execute(&op).await.status, OperationStatus::Unknown);
    w.side.clock.advance(24 * HOUR);
    let r = w.execute(&op).await;
    assert!(matches!(r.disposition, Disposition::InReview(ref why) if why.contains("found 0")));
    assert_eq!(w.ledger_for(&op).len(), 0);
    assert_eq!(w.side.sim.request_counts().create, 1);
}

#[tokio::test]
async fn window_passed_with_two_found_goes_to_review() {
    let w = World::new().await;
    w.side.sim.push_script([FaultKind::DropAfterCommit]);
    let op = w.new_op("http-two", "pm_card_visa").await;
    w.execute(&op).await;
    // Someone created a second one by hand under another key, same operation metadata.
    let mut manual = CreatePaymentIntent::for_operation(&op);
    manual.idempotency_key = charge_once::OperationId::new_random().idempotency_key();
    w.gateway.create(&manual).await.unwrap();
    w.side.clock.advance(24 * HOUR);
    let r = w.execute(&op).await;
    assert!(matches!(r.disposition, Disposition::InReview(ref why) if why.contains("found 2")));
    assert_eq!(w.ledger_for(&op).len(), 2, "nothing new created");
}

#[tokio::test]
async fn decline_is_final_and_settled_means_no_more_calls() {
    let w = World::new().await;
    let op = w.new_op("http-decline", "pm_card_chargeDeclined").await;
    assert_eq!(w.execute(&op).await.status, OperationStatus::Failed);
    let calls = w.side.sim.request_counts();
    for _ in 0..3 {
        let r = w.execute(&op).await;
        assert_eq!(r.disposition, Disposition::AlreadySettled);
    }
    let after = w.side.sim.request_counts();
    assert_eq!(
        (after.create, after.retrieve, after.search),
        (calls.create, calls.retrieve, calls.search),
        "zero Stripe calls for a settled operation"
    );
    assert_eq!(w.ledger_for(&op).len(), 1);
}

#[tokio::test]
async fn rate_limited_then_retried_with_the_same_key() {
    let w = World::new().await;
    w.side.sim.push_script([FaultKind::RateLimit]);
    let op = w.new_op("http-429", "pm_card_visa").await;
    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Pending);
    assert_eq!(
        r.disposition,
        Disposition::RetryLater(RetryCause::RateLimited)
    );
    assert_eq!(w.ledger_for(&op).len(), 0);
    assert_eq!(w.execute(&op).await.status, OperationStatus::Succeeded);
    assert_eq!(w.ledger_for(&op).len(), 1);
}

#[tokio::test]
async fn key_misuse_goes_to_review() {
    let w = World::new().await;
    let op = w.new_op("http-misuse", "pm_card_visa").await;
    let mut wrong = CreatePaymentIntent::for_operation(&op);
    wrong.params.amount = Amount::new(1).unwrap();
    w.gateway.create(&wrong).await.unwrap();
    let r = w.execute(&op).await;
    assert!(matches!(r.disposition, Disposition::InReview(ref why) if why.contains("misuse")));
    assert_eq!(w.ledger_for(&op).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_executions_create_once() {
    let w = World::new().await;
    let op = w.new_op("http-race", "pm_card_visa").await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let deps = w.deps.clone();
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            execute_charge(&deps, &op.key(), &op.operation_id)
                .await
                .unwrap()
        }));
    }
    let mut settled = 0;
    for t in tasks {
        let r = t.await.unwrap();
        if r.disposition == Disposition::Settled {
            settled += 1;
        }
    }
    assert_eq!(settled, 1);
    assert_eq!(w.side.sim.request_counts().create, 1);
    assert_eq!(w.ledger_for(&op).len(), 1);
    let rec = w.store.get(&op.key()).await.unwrap().unwrap();
    assert_eq!(rec.status, OperationStatus::Succeeded);
}
