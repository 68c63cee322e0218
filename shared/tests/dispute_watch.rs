//! The reconciler's dispute watch ([`charge_once::dispute_watch`]) on the in-memory ports: with
//! no events source, a dispute Stripe opened on one of our orders is listed by creation time and
//! recorded through the dispute's shell, once; a dispute of an intent that is not ours is
//! listed and left; the cursor moves past a span recorded whole, or, when a read is refused, past
//! every dispute of it recorded oldest first; a span whose list Stripe did not answer is listed
//! again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use charge_core::dispute::DisputeStatus;
use charge_core::domain::{DisputeId, OperationKind, OrderId, PaymentIntentId};
use charge_core::operation::{OperationKey, OperationStatus};
use charge_core::outcome::PaymentIntentStatus;
use charge_core::plan::Policy;
use charge_core::time::{Clock, ManualClock, Timestamp};
use charge_once::dispute_watch::{
    watch_disputes, DisputeWatchDeps, FIRST_BACKOFF, LAG, READ_RETRIES,
};
use charge_once::executor::{execute, EngineDeps};
use charge_once::memory::{FakeFault, FakeGateway, MemoryStore};
use charge_once::ports::{DisputeWatchCursor, OperationReads, Sleeper};
use charge_once::testing::CreateIn as _;

const MINUTE: Duration = Duration::from_secs(60);

/// Waiting moves the manual clock, and is counted.
struct Waits {
    clock: ManualClock,
    slept: std::sync::Mutex<Vec<Duration>>,
}

impl Sleeper for Waits {
    fn sleep(
        &self,
        d: Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        self.slept.lock().unwrap().push(d);
        self.clock.advance(d);
        Box::pin(async {})
    }
}

struct World {
    store: Arc<MemoryStore>,
    gateway: Arc<FakeGateway>,
    clock: ManualClock,
    deps: EngineDeps,
    watch: DisputeWatchDeps,
    waits: Arc<Waits>,
}

impl World {
    fn new() -> Self {
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        let store = Arc::new(MemoryStore::new());
        let gateway = Arc::new(FakeGateway::new());
        gateway.set_clock(Arc::new(clock.clone()));
        let deps = EngineDeps {
            store: store.clone(),
            gateway: gateway.clone(),
            clock: Arc::new(clock.clone()),
            policy: Policy::default(),
        };
        let waits = Arc::new(Waits {
            clock: clock.clone(),
            slept: Default::default(),
        });
        World {
            watch: DisputeWatchDeps {
                cursor: store.clone(),
                sleeper: waits.clone(),
            },
            waits,
            store,
            gateway,
            clock,
            deps,
        }
    }

    /// Order `order` charged 1000 usd through the engine: its intent at the fake, with our
    /// metadata.
    async fn charged(&self, order: &str) -> PaymentIntentId {
        let op = charge_core::testing::order(order)
            .amount(1000)
            .at(self.clock.now())
            .create_in(self.store.as_ref())
            .await;
        execute(&self.deps, &op.key(), &op.operation_id)
            .await
            .unwrap();
        let charge = self.store.get(&op.key()).await.unwrap().unwrap();
        assert_eq!(charge.status, OperationStatus::Succeeded);
        charge.external_id.unwrap()
    }

    async fn record(&self, order: &str, dp: &str) -> Option<charge_core::operation::Operation> {
        let key = OperationKey::of_kind(
            OrderId::parse(order).unwrap(),
            OperationKind::Dispute(DisputeId::parse(dp).unwrap()),
        );
        self.store.get(&key).await.unwrap()
    }

    async fn tick(&self) -> charge_once::dispute_watch::DisputeWatchReport {
        watch_disputes(
            &self.deps,
            &self.watch,
            &|| Duration::from_secs(60),
            Duration::from_secs(1),
        )
        .await
    }
}

/// No events: a dispute opened on our order is recorded by the watch's list, once; a dispute of
/// a stranger's intent (an order with no charge of ours) is listed and not written; the cursor follows the
/// span, `LAG` behind now.
#[tokio::test]
async fn a_dispute_no_event_told_of_is_listed_and_recorded_once() {
    let w = World::new();
    let pi = w.charged("ord-quiet").await;
    // The first tick starts the cursor (looking back one span: nothing there).
    let first = w.tick().await;
    assert_eq!(first.listed, 0);
    let start = w.store.disputes_listed_through().await.unwrap().unwrap();
    assert_eq!(start, w.clock.now().minus(LAG));

    w.clock.advance(MINUTE);
    let due = w.clock.now().plus(Duration::from_secs(10 * 24 * 3600));
    w.gateway
        .open_dispute("dp_quiet", &pi, DisputeStatus::NeedsResponse, Some(due));
    let stranger = charge_core::testing::order("ord-elsewhere")
        .status(OperationStatus::Succeeded)
        .build();
    let other = PaymentIntentId::parse("pi_elsewhere").unwrap();
    // Its metadata names an order this store has no charge of.
    w.gateway.insert_intent_as(
        &other,
        FakeGateway::charge_for(&stranger, PaymentIntentStatus::Succeeded),
    );
    w.gateway
        .open_dispute("dp_stranger", &other, DisputeStatus::NeedsResponse, None);
    assert!(w.record("ord-quiet", "dp_quiet").await.is_none());

    // Inside the lag: not listed yet.
    let report = w.tick().await;
    assert_eq!(report.listed, 0, "{report:?}");
    w.clock.advance(2 * MINUTE);
    let report = w.tick().await;
    assert_eq!(
        (report.listed, report.recorded, report.not_ours),
        (2, 1, 1),
        "{report:?}"
    );
    assert!(!report.incomplete);
    let record = w.record("ord-quiet", "dp_quiet").await.expect("recorded");
    assert_eq!(record.status, OperationStatus::Unknown);
    assert!(record.params.dispute_state().unwrap().reserved);
    assert!(
        record.next_due_at.is_some(),
        "the reconciler reads it again"
    );
    assert_eq!(
        w.store.disputes_listed_through().await.unwrap(),
        Some(w.clock.now().minus(LAG))
    );
    // The next span holds neither: nothing listed, nothing written again.
    let before = w.store.all();
    w.clock.advance(MINUTE);
    let report = w.tick().await;
    assert_eq!((report.listed, report.recorded), (0, 0));
    assert_eq!(w.store.all(), before);
}

/// A tick out of time before its span is listed: the cursor stays, nothing written, and the
/// next tick (its twin, with time) lists the same span and records the dispute.
#[tokio::test]
async fn a_span_cut_short_is_listed_again() {
    let w = World::new();
    let pi = w.charged("ord-later").await;
    w.tick().await;
    w.clock.advance(MINUTE);
    w.gateway
        .open_dispute("dp_later", &pi, DisputeStatus::NeedsResponse, None);
    w.clock.advance(2 * MINUTE);
    let cursor = w.store.disputes_listed_through().await.unwrap();
    let report = watch_disputes(
        &w.deps,
        &w.watch,
        &|| Duration::ZERO,
        Duration::from_secs(1),
    )
    .await;
    assert!(report.incomplete, "{report:?}");
    assert_eq!(report.listed, 0);
    assert_eq!(w.store.disputes_listed_through().await.unwrap(), cursor);
    assert!(w.record("ord-later", "dp_later").await.is_none());
    let reads = w.gateway.calls.dispute_read.load(Ordering::SeqCst);
    let report = w.tick().await;
    assert_eq!((report.listed, report.recorded), (1, 1), "{report:?}");
    assert_eq!(
        w.gateway.calls.dispute_read.load(Ordering::SeqCst) - reads,
        1,
        "one list request for the span"
    );
    assert!(w.record("ord-later", "dp_later").await.is_some());
    assert!(w.store.disputes_listed_through().await.unwrap() > cursor);
}

/// Under Stripe's rate limit the watch moves on by every dispute it recorded: a span of three
/// disputes whose second intent read is refused (429, counted) records the oldest and moves the
/// cursor to the second's creation time, not back to the span's start; the next tick lists
/// from there (the two left, not the recorded one again) and records both. The twin: the same
/// span with every read answered records all three in one tick and moves the cursor to the
/// span's end.
#[tokio::test]
async fn a_span_stopped_by_a_refused_read_moves_the_cursor_past_what_it_recorded() {
    let w = World::new();
    let pis = [
        w.charged("ord-rl-1").await,
        w.charged("ord-rl-2").await,
        w.charged("ord-rl-3").await,
    ];
    w.tick().await;
    let mut created = Vec::new();
    for (i, pi) in pis.iter().enumerate() {
        w.clock.advance(MINUTE);
        let dispute = w.gateway.open_dispute(
            &format!("dp_rl_{}", i + 1),
            pi,
            DisputeStatus::NeedsResponse,
            None,
        );
        created.push(dispute.created);
    }
    w.clock.advance(2 * MINUTE);
    // The first retrieve (the oldest dispute's intent) answers; the second is refused, and so is
    // every retry of it within the tick.
    let refusals = 1 + READ_RETRIES as usize;
    w.gateway.script_retrieves(
        std::iter::once(None).chain(std::iter::repeat_n(Some(FakeFault::RateLimited), refusals)),
    );
    let retrieves = w.gateway.calls.retrieve.load(Ordering::SeqCst);
    let report = w.tick().await;
    assert_eq!(
        w.gateway.calls.retrieve.load(Ordering::SeqCst) - retrieves,
        1 + refusals as u64,
        "the refusals happened"
    );
    assert_eq!(
        (report.rate_limited, report.retried),
        (refusals as u64, u64::from(READ_RETRIES)),
        "{report:?}"
    );
    assert!(report.incomplete, "{report:?}");
    assert_eq!((report.recorded, report.failures), (1, 1), "{report:?}");
    assert!(w.record("ord-rl-1", "dp_rl_1").await.is_some());
    assert!(w.record("ord-rl-2", "dp_rl_2").await.is_none());
    let cursor = w.store.disputes_listed_through().await.unwrap().unwrap();
    assert_eq!(
        cursor, created[1],
        "moved to the first dispute not recorded"
    );
    assert!(cursor > created[0]);

    let report = w.tick().await;
    assert_eq!(
        (report.listed, report.recorded, report.incomplete),
        (2, 2, false),
        "{report:?}"
    );
    assert!(w.record("ord-rl-2", "dp_rl_2").await.is_some());
    assert!(w.record("ord-rl-3", "dp_rl_3").await.is_some());
    assert_eq!(
        w.store.disputes_listed_through().await.unwrap(),
        Some(w.clock.now().minus(LAG))
    );

    // The twin: every read answered, the whole span in one tick.
    let w = World::new();
    let pis = [w.charged("ord-ok-1").await, w.charged("ord-ok-2").await];
    w.tick().await;
    for (i, pi) in pis.iter().enumerate() {
        w.clock.advance(MINUTE);
        w.gateway.open_dispute(
            &format!("dp_ok_{}", i + 1),
            pi,
            DisputeStatus::NeedsResponse,
            None,
        );
    }
    w.clock.advance(2 * MINUTE);
    let report = w.tick().await;
    assert_eq!(
        (report.listed, report.recorded, report.incomplete),
        (2, 2, false),
        "{report:?}"
    );
    assert_eq!(
        w.store.disputes_listed_through().await.unwrap(),
        Some(w.clock.now().minus(LAG))
    );
}

/// A read Stripe refused once (429) is asked again within the tick after the first backoff, on
/// the injected sleeper: the span is recorded whole in that tick and the cursor moves to its
/// end. Its twins: the refusal kept through every retry stops the span at that dispute (above),
/// and a tick with no time left for the wait does not retry: the cursor stays at the refused
/// dispute, nothing slept.
#[tokio::test]
async fn a_read_refused_with_429_is_asked_again_within_the_tick() {
    let w = World::new();
    let pis = [w.charged("ord-rt-1").await, w.charged("ord-rt-2").await];
    w.tick().await;
    let mut created = Vec::new();
    for (i, pi) in pis.iter().enumerate() {
        w.clock.advance(MINUTE);
        let dispute = w.gateway.open_dispute(
            &format!("dp_rt_{}", i + 1),
            pi,
            DisputeStatus::NeedsResponse,
            None,
        );
        created.push(dispute.created);
    }
    w.clock.advance(2 * MINUTE);
    // The oldest dispute's intent read is refused once, then answered.
    w.gateway.script_retrieves([Some(FakeFault::RateLimited)]);
    let retrieves = w.gateway.calls.retrieve.load(Ordering::SeqCst);
    let began = w.clock.now();
    let report = w.tick().await;
    assert_eq!(
        w.gateway.calls.retrieve.load(Ordering::SeqCst) - retrieves,
        3,
        "the refused read, its retry and the second dispute's read"
    );
    assert_eq!((report.rate_limited, report.retried), (1, 1), "{report:?}");
    assert_eq!(*w.waits.slept.lock().unwrap(), vec![FIRST_BACKOFF]);
    assert_eq!(
        (
            report.listed,
            report.recorded,
            report.failures,
            report.incomplete
        ),
        (2, 2, 0, false),
        "{report:?}"
    );
    assert!(w.record("ord-rt-1", "dp_rt_1").await.is_some());
    assert!(w.record("ord-rt-2", "dp_rt_2").await.is_some());
    assert_eq!(
        w.store.disputes_listed_through().await.unwrap(),
        Some(began.minus(LAG))
    );

    // The twin: the same refusal in a tick with no time left for the wait (under a second
    // beyond its safety) is not retried, and the span stops at the refused dispute.
    let w = World::new();
    let pis = [w.charged("ord-rn-1").await, w.charged("ord-rn-2").await];
    w.tick().await;
    let mut created = Vec::new();
    for (i, pi) in pis.iter().enumerate() {
        w.clock.advance(MINUTE);
        let dispute = w.gateway.open_dispute(
            &format!("dp_rn_{}", i + 1),
            pi,
            DisputeStatus::NeedsResponse,
            None,
        );
        created.push(dispute.created);
    }
    w.clock.advance(2 * MINUTE);
    w.gateway.script_retrieves([Some(FakeFault::RateLimited)]);
    let safety = Duration::from_secs(1);
    let report = watch_disputes(&w.deps, &w.watch, &|| safety + FIRST_BACKOFF / 2, safety).await;
    assert_eq!((report.rate_limited, report.retried), (1, 0), "{report:?}");
    assert!(w.waits.slept.lock().unwrap().is_empty());
    assert!(report.incomplete, "{report:?}");
    assert_eq!((report.recorded, report.failures), (0, 1), "{report:?}");
    assert!(w.record("ord-rn-1", "dp_rn_1").await.is_none());
    assert_eq!(
        w.store.disputes_listed_through().await.unwrap(),
        Some(created[0])
    );
}
