//! The refund watch through the reconciler's whole tick ([`charge_once::reconciler::reconcile_tick`])
//! on the in-memory ports, with **no events source**: a refund Stripe fails days after it
//! succeeded is learned by reading it again, and takes the events function's write; its twin,
//! a refund that stays succeeded, is read once a day through the window, left alone, and never
//! read after. Every test counts Stripe's refund reads and the store's calls.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use charge_core::domain::{Amount, Principal, RefundId};
use charge_core::operation::{Operation, OperationStatus};
use charge_core::outbox::{outcome_of, Outcome};
use charge_core::plan::Policy;
use charge_core::refund::watch::RefundWatch;
use charge_core::refund::{self, request::RefundRequest, RefundStatus};
use charge_core::store_rules::{ChargeClaim, CreatedBeside};
use charge_core::time::{Clock, ManualClock, Timestamp};
use charge_once::executor::{execute, EngineDeps};
use charge_once::memory::{FakeFault, FakeGateway, MemoryQueue, MemoryStore};
use charge_once::ports::{OperationCreates, OperationReads};
use charge_once::reconciler::{reconcile_tick, ReconcilerDeps, TickReport};
use charge_once::refund_watch::RefundWatchDeps;
use charge_once::telemetry::CapturedMetrics;
use charge_once::testing::CreateIn as _;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

struct World {
    store: Arc<MemoryStore>,
    gateway: Arc<FakeGateway>,
    clock: ManualClock,
    deps: ReconcilerDeps,
    metrics: CapturedMetrics,
}

impl World {
    fn new(watch: RefundWatch) -> Self {
        let store = Arc::new(MemoryStore::new());
        let gateway = Arc::new(FakeGateway::new());
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        gateway.set_clock(Arc::new(clock.clone()));
        let deps = ReconcilerDeps {
            charge: EngineDeps {
                store: store.clone(),
                gateway: gateway.clone(),
                clock: Arc::new(clock.clone()),
                policy: Policy::default(),
            },
            queue: Arc::new(MemoryQueue::new(Arc::new(clock.clone()))),
            page_size: 100,
            charge_throughput: charge_once::config::StripeBudget::default_throughput(),
            dispute_watch: None,
            refund_watch: Some(RefundWatchDeps {
                watch,
                cursor: store.clone(),
            }),
        };
        Self {
            store,
            gateway,
            clock,
            deps,
            metrics: CapturedMetrics::new(),
        }
    }

    /// A charge of 1000, then a refund of 400 of it, both executed: succeeded at the fake Stripe.
    async fn refunded(&self, order: &str) -> (Operation, Operation) {
        let charge = charge_core::testing::order(order)
            .amount(1000)
            .at(self.clock.now())
            .create_in(self.store.as_ref())
            .await;
        execute(&self.deps.charge, &charge.key(), &charge.operation_id)
            .await
            .unwrap();
        let charge = self.current(&charge).await;
        let request = RefundRequest {
            amount: Some(Amount::new(400).unwrap()),
            reason: None,
        };
        let now = self.clock.now();
        let (params, reserve) = refund::reserve(&charge, &request, now).unwrap();
        let op = Operation::new_refund(
            charge.order_id.clone(),
            RefundId::parse("r-1").unwrap(),
            &request,
            params,
            Principal::jwt("support").unwrap(),
            now,
            Duration::from_secs(300),
        );
        let created = self
            .store
            .create_beside(&op, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap();
        assert_eq!(created, CreatedBeside::New(op.clone()));
        execute(&self.deps.charge, &op.key(), &op.operation_id)
            .await
            .unwrap();
        let refund = self.current(&op).await;
        assert_eq!(refund.status, OperationStatus::Succeeded);
        (charge, refund)
    }

    async fn current(&self, op: &Operation) -> Operation {
        self.store.get(&op.key()).await.unwrap().unwrap()
    }

    fn refund_reads(&self) -> u64 {
        self.gateway.calls.refund_read.load(Ordering::SeqCst)
    }

    /// One tick now, with all the time in the world.
    async fn tick(&self) -> TickReport {
        let remaining = || Duration::from_secs(100);
        reconcile_tick(
            &self.deps,
            &remaining,
            Duration::from_secs(30),
            &self.metrics,
        )
        .await
        .unwrap()
    }

    /// Ticks every `every` until `until` has passed since now.
    async fn tick_for(&self, until: Duration, every: Duration) {
        let end = self.clock.now().plus(until);
        while self.clock.now() < end {
            self.clock.advance(every);
            self.tick().await;
        }
    }
}

fn watch(days: u32) -> RefundWatch {
    RefundWatch {
        window: DAY * days,
        every: DAY,
    }
}

#[tokio::test]
async fn a_refund_failing_three_days_after_success_with_no_events_is_recorded_failed_given_back_published_and_paged(
) {
    let w = World::new(watch(30));
    w.tick().await; // The first tick starts the cursor at now.
    let (charge, succeeded) = w.refunded("ord-late").await;
    assert_eq!(w.current(&charge).await.refund_reserved(), 400);
    let reads = w.refund_reads();
    // Two days of hourly ticks: read once a day, still succeeded, left alone.
    w.tick_for(2 * DAY + HOUR, HOUR).await;
    assert_eq!(w.refund_reads(), reads + 2, "read once a day");
    assert_eq!(
        w.current(&succeeded).await.status,
        OperationStatus::Succeeded
    );
    // The bank returns it on day three; no event ever comes.
    let id = succeeded.stripe_refund_id().unwrap();
    w.gateway
        .set_refund_status(id, RefundStatus::Failed, Some("expired_or_canceled_card"));
    w.tick_for(DAY, HOUR).await;
    assert_eq!(w.refund_reads(), reads + 3, "the third daily read found it");
    let failed = w.current(&succeeded).await;
    assert_eq!(failed.status, OperationStatus::Failed);
    assert!(failed
        .last_error
        .as_deref()
        .unwrap()
        .contains("expired_or_canceled_card"));
    assert_eq!(
        w.current(&charge).await.refund_reserved(),
        0,
        "the 400 is back on the charge: refundable again"
    );
    // The outbox publishes what the events function's write publishes.
    let out = outcome_of(Some(&succeeded), &failed).unwrap();
    assert_eq!(out.outcome, Outcome::Failed);
    assert_eq!(out.detail_type(), "RefundFailed");
    let detail = serde_json::to_value(out.detail()).unwrap();
    assert_eq!(detail["failed_after_success"], true);
    // Paged: the metric the alarm watches, under the reconciler.
    let paged = w
        .metrics
        .sum("RefundFailedAfterSuccess", &[("Function", "reconciler")]);
    assert_eq!(paged, 1.0);
    // Failed is final: never read again.
    let reads = w.refund_reads();
    w.tick_for(5 * DAY, HOUR).await;
    assert_eq!(w.refund_reads(), reads, "a failed refund is not watched");
    assert_eq!(
        w.metrics
            .sum("RefundFailedAfterSuccess", &[("Function", "reconciler")]),
        1.0
    );
}

#[tokio::test]
async fn a_refund_that_stays_succeeded_is_read_daily_through_the_window_left_alone_and_never_after()
{
    let w = World::new(watch(5));
    w.tick().await;
    let (charge, succeeded) = w.refunded("ord-fine").await;
    let reads = w.refund_reads();
    let calls = |s: &MemoryStore| {
        (
            s.calls.reads.load(Ordering::SeqCst),
            s.calls.writes.load(Ordering::SeqCst),
            s.calls.queries.load(Ordering::SeqCst),
        )
    };
    let before = calls(&w.store);
    w.tick_for(5 * DAY + HOUR, HOUR).await;
    assert_eq!(w.refund_reads(), reads + 5, "once a day for five days");
    let after = calls(&w.store);
    // What the watch costs per tick (whatever the refunds) and per refund read: one cursor
    // read and one cursor write per tick, one settled-index query per offset per tick (the
    // memory store counts a query as DynamoDB bills it), nothing written to the refund.
    let ticks = (5 * 24 + 1) as u64;
    assert_eq!(after.1 - before.1, ticks, "one cursor write per tick");
    assert!(
        after.2 - before.2 >= ticks * 5,
        "a query per offset per tick: {after:?} {before:?}"
    );
    assert_eq!(w.current(&succeeded).await, succeeded, "left alone");
    assert_eq!(w.current(&charge).await.refund_reserved(), 400);
    // Past the window: never read again, even if Stripe then says failed (the audit's re-read
    // is what is left).
    w.gateway.set_refund_status(
        succeeded.stripe_refund_id().unwrap(),
        RefundStatus::Failed,
        Some("unknown"),
    );
    w.tick_for(3 * DAY, HOUR).await;
    assert_eq!(w.refund_reads(), reads + 5, "not read after the window");
    assert_eq!(
        w.current(&succeeded).await.status,
        OperationStatus::Succeeded
    );
    assert_eq!(
        w.metrics
            .sum("RefundsWatched", &[("Function", "reconciler")]),
        5.0
    );
}

#[tokio::test]
async fn a_read_stripe_answers_later_keeps_the_cursor_and_is_read_again_next_tick() {
    let w = World::new(watch(30));
    w.tick().await;
    let (_, succeeded) = w.refunded("ord-busy").await;
    // Its first read is due in the tick whose span reaches a day after it settled.
    w.tick_for(DAY, HOUR).await;
    let reads = w.refund_reads();
    // The day-one read meets a 429: counted as a failure, the span kept.
    w.gateway.script_refund_read(FakeFault::RateLimited);
    w.clock.advance(HOUR);
    let first = w.tick().await;
    assert_eq!(w.refund_reads(), reads + 1);
    let watched = first.refund_watch.unwrap();
    assert!(watched.incomplete && watched.failures == 1, "{watched:?}");
    assert_eq!(first.failures, 1, "counted in SkippedOnError");
    // Its twin, the next tick: the same span read again, answered, the cursor moves on.
    w.gateway.set_refund_status(
        succeeded.stripe_refund_id().unwrap(),
        RefundStatus::Failed,
        None,
    );
    w.clock.advance(HOUR);
    let second = w.tick().await;
    assert_eq!(w.refund_reads(), reads + 2, "read again");
    let watched = second.refund_watch.unwrap();
    assert!(!watched.incomplete, "{watched:?}");
    assert_eq!(watched.failed_later, 1);
    assert_eq!(w.current(&succeeded).await.status, OperationStatus::Failed);
}
