//! The reconciler's re-read of open disputes ([`charge_once::reconciler`]) on the in-memory
//! ports: an open dispute's record is due, the tick reads the dispute again at the fake Stripe,
//! pages by the evidence deadline (`DisputeDeadlineNear`, `DisputeDeadlinePassed`), writes what
//! Stripe holds, and reports the open disputes and the nearest deadline. Every test counts
//! Stripe's dispute reads, and that nothing was ever created at Stripe or sent on the queue for
//! a dispute.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use charge_core::dispute::DisputeStatus;
use charge_core::domain::{DisputeId, OperationKind};
use charge_core::operation::{Operation, OperationKey, OperationStatus};
use charge_core::plan::Policy;
use charge_core::time::{Clock, ManualClock, Timestamp};
use charge_once::executor::dispute::{record_dispute, DisputeRecording};
use charge_once::executor::{execute, EngineDeps};
use charge_once::memory::{FakeGateway, MemoryQueue, MemoryStore};
use charge_once::ports::OperationReads;
use charge_once::reconciler::{reconcile_tick, ReconcilerDeps, TickReport};
use charge_once::telemetry::CapturedMetrics;
use charge_once::testing::CreateIn as _;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

struct World {
    store: Arc<MemoryStore>,
    gateway: Arc<FakeGateway>,
    queue: Arc<MemoryQueue>,
    clock: ManualClock,
    metrics: Arc<CapturedMetrics>,
    deps: ReconcilerDeps,
}

impl World {
    fn new() -> Self {
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        let store = Arc::new(MemoryStore::new());
        let gateway = Arc::new(FakeGateway::new());
        gateway.set_clock(Arc::new(clock.clone()));
        let queue = Arc::new(MemoryQueue::new(Arc::new(clock.clone())));
        let deps = ReconcilerDeps {
            charge: EngineDeps {
                store: store.clone(),
                gateway: gateway.clone(),
                clock: Arc::new(clock.clone()),
                policy: Policy::default(),
            },
            queue: queue.clone(),
            page_size: 10,
            charge_throughput: charge_once::config::StripeBudget::default_throughput(),
            dispute_watch: None,
            refund_watch: None,
        };
        World {
            store,
            gateway,
            queue,
            clock,
            metrics: Arc::new(CapturedMetrics::new()),
            deps,
        }
    }

    /// Order `order` charged 1000 usd through the engine (its intent at the fake), then
    /// disputed there (`dp`, `status`, evidence due `due_in` from now) and recorded as the
    /// events function records it: the dispute's record as first written.
    async fn disputed(
        &self,
        order: &str,
        dp: &str,
        status: DisputeStatus,
        due_in: Duration,
    ) -> Operation {
        let op = charge_core::testing::order(order)
            .amount(1000)
            .at(self.clock.now())
            .create_in(self.store.as_ref())
            .await;
        execute(&self.deps.charge, &op.key(), &op.operation_id)
            .await
            .unwrap();
        let charge = self.store.get(&op.key()).await.unwrap().unwrap();
        assert_eq!(charge.status, OperationStatus::Succeeded);
        let pi = charge.external_id.clone().unwrap();
        let due_by = self.clock.now().plus(due_in);
        let dispute = self.gateway.open_dispute(dp, &pi, status, Some(due_by));
        let DisputeRecording::Written { record, .. } = record_dispute(
            self.store.as_ref(),
            &op.order_id,
            &dispute,
            self.clock.now(),
            &self.deps.charge.policy.dispute,
        )
        .await
        .unwrap() else {
            panic!("the dispute is recorded")
        };
        *record
    }

    async fn record(&self, order: &str, dp: &str) -> Operation {
        let key = OperationKey::of_kind(
            charge_core::domain::OrderId::parse(order).unwrap(),
            OperationKind::Dispute(DisputeId::parse(dp).unwrap()),
        );
        self.store.get(&key).await.unwrap().unwrap()
    }

    async fn tick(&self) -> TickReport {
        reconcile_tick(
            &self.deps,
            &|| Duration::from_secs(60),
            Duration::from_secs(1),
            self.metrics.as_ref(),
        )
        .await
        .unwrap()
    }

    fn reconciler_sum(&self, metric: &str) -> f64 {
        self.metrics.sum(metric, &[("Function", "reconciler")])
    }

    /// Stripe was only read: no intent, refund or anything else created, nothing queued.
    fn nothing_created_or_sent(&self, charges: u64) {
        let calls = &self.gateway.calls;
        assert_eq!(
            calls.create.load(Ordering::SeqCst),
            charges,
            "only the charges"
        );
        assert_eq!(calls.refund_create.load(Ordering::SeqCst), 0);
        assert!(self.queue.is_empty(), "a dispute is never queued");
    }
}

/// Two days before `due_by`, inside the 72 h window: the tick reads the dispute at Stripe and
/// pages Near, and the record is due again a day later (the daily page), not every tick. Its
/// twin, ten days out, is read when its daily read comes and does not page.
#[tokio::test]
async fn an_open_dispute_near_its_deadline_is_read_again_and_pages_near() {
    let w = World::new();
    let near = w
        .disputed("ord-near", "dp_near", DisputeStatus::NeedsResponse, 2 * DAY)
        .await;
    let far = w
        .disputed("ord-far", "dp_far", DisputeStatus::NeedsResponse, 10 * DAY)
        .await;
    assert_eq!(near.status, OperationStatus::Unknown, "open: not known yet");
    // The first record's next read: a day out for both (inside the window: daily; ten days
    // out: the window opens after the next daily read).
    let now = w.clock.now();
    assert_eq!(near.next_due_at, Some(now.plus(DAY)));
    assert_eq!(far.next_due_at, Some(now.plus(DAY)));
    let reads_before = w.gateway.calls.dispute_read.load(Ordering::SeqCst);

    // Nothing due yet: no read, no page, but both counted open, the nearest 48 h away.
    let report = w.tick().await;
    assert_eq!(report.disputes_read, 0);
    assert_eq!(report.disputes_open, Some(2));
    assert_eq!(w.reconciler_sum("DisputesOpen"), 2.0);
    assert_eq!(w.reconciler_sum("DisputeNearestDeadlineHours"), 48.0);

    w.clock.advance(DAY);
    let report = w.tick().await;
    assert_eq!(report.disputes_read, 2);
    assert_eq!(
        w.gateway.calls.dispute_read.load(Ordering::SeqCst) - reads_before,
        2,
        "one retrieve per due dispute"
    );
    assert_eq!(report.dispute_deadline_near, 1, "the one a day from due_by");
    assert_eq!(w.reconciler_sum("DisputeDeadlineNear"), 1.0);
    assert_eq!(w.reconciler_sum("DisputeDeadlinePassed"), 0.0);
    assert_eq!(
        w.reconciler_sum("OldestUnsettledAge"),
        0.0,
        "an open dispute is not a stuck unknown"
    );
    let now = w.clock.now();
    let near = w.record("ord-near", "dp_near").await;
    assert_eq!(
        near.next_due_at,
        Some(now.plus(DAY)),
        "read again at due_by (a day away)"
    );
    let far = w.record("ord-far", "dp_far").await;
    assert_eq!(
        far.next_due_at,
        Some(now.plus(DAY)),
        "read again daily until the window opens"
    );
    // A tick right after reads nothing again.
    let report = w.tick().await;
    assert_eq!((report.disputes_read, report.dispute_deadline_near), (0, 0));
    w.nothing_created_or_sent(2);
}

/// Past due_by with nothing submitted: Passed pages; once Stripe closes it lost, the read
/// settles the record `succeeded` (the bank's take succeeded) and the pages stop.
#[tokio::test]
async fn an_unanswered_dispute_pages_passed_then_settles_lost_and_stops_paging() {
    let w = World::new();
    w.disputed(
        "ord-late",
        "dp_late",
        DisputeStatus::NeedsResponse,
        20 * HOUR,
    )
    .await;
    w.clock.advance(DAY);
    let report = w.tick().await;
    assert_eq!(report.dispute_deadline_passed, 1);
    assert_eq!(report.dispute_deadline_near, 0);
    assert_eq!(w.reconciler_sum("DisputeDeadlinePassed"), 1.0);
    assert!(
        w.reconciler_sum("DisputeNearestDeadlineHours") < 0.0,
        "negative once passed"
    );
    let record = w.record("ord-late", "dp_late").await;
    assert_eq!(record.status, OperationStatus::Unknown);

    w.gateway.move_dispute("dp_late", DisputeStatus::Lost);
    w.clock.advance(DAY);
    let report = w.tick().await;
    assert_eq!(report.disputes_read, 1);
    assert_eq!(report.dispute_deadline_passed, 0, "closed: no page");
    assert_eq!(report.settled, 1);
    let record = w.record("ord-late", "dp_late").await;
    assert_eq!(record.status, OperationStatus::Succeeded, "lost: taken");
    assert_eq!(record.next_due_at, None, "settled: out of the index");
    assert_eq!(report.disputes_open, Some(0));
    w.clock.advance(DAY);
    let report = w.tick().await;
    assert_eq!(report.disputes_read, 0, "never read again");
    w.nothing_created_or_sent(1);
}

/// Evidence submitted (under review): no page, even past the deadline; a dispute won settles
/// `failed` and gives the order's charge its amount back.
#[tokio::test]
async fn a_dispute_answered_does_not_page_and_a_win_gives_the_amount_back() {
    let w = World::new();
    w.disputed("ord-won", "dp_won", DisputeStatus::NeedsResponse, 30 * HOUR)
        .await;
    w.gateway.move_dispute("dp_won", DisputeStatus::UnderReview);
    w.clock.advance(DAY);
    let report = w.tick().await;
    assert_eq!(report.disputes_read, 1);
    assert_eq!(
        (report.dispute_deadline_near, report.dispute_deadline_passed),
        (0, 0)
    );
    let charge_key = OperationKey::charge(charge_core::domain::OrderId::parse("ord-won").unwrap());
    let charge = w.store.get(&charge_key).await.unwrap().unwrap();
    assert_eq!(
        charge.refund_reserved(),
        1000,
        "withdrawn: held on the charge"
    );

    w.gateway.move_dispute("dp_won", DisputeStatus::Won);
    w.clock.advance(DAY);
    let report = w.tick().await;
    assert_eq!(report.settled, 1);
    let record = w.record("ord-won", "dp_won").await;
    assert_eq!(record.status, OperationStatus::Failed, "won: nothing taken");
    let charge = w.store.get(&charge_key).await.unwrap().unwrap();
    assert_eq!(charge.refund_reserved(), 0, "given back");
    w.nothing_created_or_sent(1);
}

/// Stripe cannot answer for the dispute (here: it has no such dispute, a key of another
/// account): counted as a failure, nothing written, still due; its twin next to it is read.
#[tokio::test]
async fn a_dispute_stripe_cannot_read_stays_due_and_is_counted() {
    let w = World::new();
    let good = w
        .disputed("ord-ok", "dp_ok", DisputeStatus::NeedsResponse, 10 * DAY)
        .await;
    // A record naming a dispute the fake does not hold: the record of dp_ok, copied under
    // another id.
    let mut ghost = good.clone();
    ghost.kind = OperationKind::Dispute(DisputeId::parse("dp_ghost").unwrap());
    ghost.operation_id = charge_core::domain::OperationId::new_random();
    if let charge_core::operation::Params::Dispute(p, _) = &mut ghost.params {
        p.dispute_id = DisputeId::parse("dp_ghost").unwrap();
    }
    use charge_once::ports::OperationCreates as _;
    w.store.create_if_absent(&ghost).await.unwrap();
    w.clock.advance(DAY);
    let report = w.tick().await;
    assert_eq!(report.disputes_read, 2);
    assert_eq!(report.failures, 1, "the unreadable one");
    assert_eq!(w.reconciler_sum("SkippedOnError"), 1.0);
    let ghost_now = w.record("ord-ok", "dp_ghost").await;
    assert_eq!(ghost_now, ghost, "nothing written");
    let good_now = w.record("ord-ok", "dp_ok").await;
    assert!(
        good_now.next_due_at > ghost_now.next_due_at,
        "its twin moved on"
    );
    w.nothing_created_or_sent(1);
}

/// A recorded dispute whose charge no longer names its PaymentIntent (a hand edit): the plan
/// writes nothing, so the tick counts it as a failure (it would otherwise be read every tick
/// unnoticed); its twin, untouched, is read and moves on.
#[tokio::test]
async fn a_recorded_dispute_the_plan_cannot_write_is_counted_as_a_failure() {
    let w = World::new();
    w.disputed(
        "ord-edit",
        "dp_edit",
        DisputeStatus::NeedsResponse,
        10 * DAY,
    )
    .await;
    w.disputed(
        "ord-twin",
        "dp_twin",
        DisputeStatus::NeedsResponse,
        10 * DAY,
    )
    .await;
    let key = OperationKey::charge(charge_core::domain::OrderId::parse("ord-edit").unwrap());
    let mut charge = w.store.get(&key).await.unwrap().unwrap();
    charge.external_id = Some(charge_core::domain::PaymentIntentId::parse("pi_other").unwrap());
    w.store.put_for_tests(charge);
    let edited_before = w.record("ord-edit", "dp_edit").await;
    w.clock.advance(DAY);
    let report = w.tick().await;
    assert_eq!(report.disputes_read, 2);
    assert_eq!(report.failures, 1);
    assert_eq!(w.reconciler_sum("SkippedOnError"), 1.0);
    assert_eq!(w.record("ord-edit", "dp_edit").await, edited_before);
    let twin = w.record("ord-twin", "dp_twin").await;
    assert!(twin.next_due_at > Some(w.clock.now()), "its twin moved on");
    w.nothing_created_or_sent(2);
}

/// A dispute whose amount does not fit its order's refunds (recorded without the reservation)
/// is NOT put in review: the reconciler reads it again like any open dispute, its deadline
/// pages, each read counts `DisputeUnreserved` (paged), and once Stripe closes it (its closing
/// events lost) the read settles it. Its twin, a dispute that fits, counts none.
#[tokio::test]
async fn an_unreserved_dispute_is_read_again_pages_and_settles_as_stripe_closes_it() {
    let w = World::new();
    // ord-over: 1000 charged, 600 refunded, then disputed for the whole 1000.
    let op = charge_core::testing::order("ord-over")
        .amount(1000)
        .at(w.clock.now())
        .create_in(w.store.as_ref())
        .await;
    execute(&w.deps.charge, &op.key(), &op.operation_id)
        .await
        .unwrap();
    let mut charge = w.store.get(&op.key()).await.unwrap().unwrap();
    charge.params.charge_state_mut().unwrap().refund_reserved = 600;
    w.store.put_for_tests(charge.clone());
    let pi = charge.external_id.clone().unwrap();
    let due_by = w.clock.now().plus(2 * DAY);
    let dispute =
        w.gateway
            .open_dispute("dp_over", &pi, DisputeStatus::NeedsResponse, Some(due_by));
    let written = record_dispute(
        w.store.as_ref(),
        &op.order_id,
        &dispute,
        w.clock.now(),
        &w.deps.charge.policy.dispute,
    )
    .await
    .unwrap();
    let DisputeRecording::Written {
        record, unreserved, ..
    } = written
    else {
        panic!("recorded")
    };
    assert!(unreserved, "the shell says so, for its caller to count");
    assert!(record.review.is_none(), "never in review");
    w.disputed("ord-fits", "dp_fits", DisputeStatus::NeedsResponse, 2 * DAY)
        .await;

    w.clock.advance(DAY);
    let report = w.tick().await;
    assert_eq!(report.disputes_read, 2, "both read again");
    assert_eq!(report.dispute_unreserved, 1, "the one that did not fit");
    assert_eq!(w.reconciler_sum("DisputeUnreserved"), 1.0);
    assert_eq!(report.dispute_deadline_near, 2, "its deadline pages too");
    assert_eq!(report.sent_to_review, 0);
    assert_eq!(report.in_review, 0);
    let charge_now = w.store.get(&op.key()).await.unwrap().unwrap();
    assert_eq!(charge_now.refund_reserved(), 600, "nothing reserved");

    // Stripe closes it lost; no event comes. The next read settles it.
    w.gateway.move_dispute("dp_over", DisputeStatus::Lost);
    w.clock.advance(DAY);
    let report = w.tick().await;
    assert_eq!(report.settled, 1);
    let record = w.record("ord-over", "dp_over").await;
    assert_eq!(
        record.status,
        OperationStatus::Succeeded,
        "lost, as Stripe holds it"
    );
    assert_eq!(record.next_due_at, None);
    assert!(record
        .last_error
        .as_deref()
        .is_some_and(|e| e.starts_with("dispute_unreserved:")));
    w.nothing_created_or_sent(2);
}
