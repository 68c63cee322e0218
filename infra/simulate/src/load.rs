//! The load model (`simulate --arrival-rate R`): a burst at Stripe's limit, in virtual time.
//!
//! Orders arrive through the real checkout handler at `R` per virtual second. The Lambda SQS
//! event source is modelled as the template configures it ([`charge::EVENT_SOURCE`]):
//! `MaximumConcurrency` poller tasks (`--charge-concurrency`, the `ChargeMaxConcurrency`
//! parameter), each one execution environment with its own Stripe [`Budget`], receiving a batch of
//! up to `BatchSize` (10) as soon as anything is visible (no batching window on FIFO), with FIFO
//! group semantics (a group with a message in flight delivers nothing else), invoking the real
//! charge handler with the function's deadline (now + its 300 s timeout), deleting what it
//! acknowledged and leaving the failed records in flight until their visibility: the queue's
//! 1,800 s timeout, or sooner where the handler returned them (`ChangeMessageVisibility` on the
//! simulated queue). The real reconciler ticks every 5 minutes, paced to its share.
//!
//! Stripe is the stripe-sim engine with Stripe's documented capacity (create 25/s,
//! `--create-limit`) and a lognormal create latency (p50 300 ms) that takes virtual time: the
//! scheduler's timers ([`crate::sched::Timers`]) move the clock when every task waits. No random
//! faults: this mode measures throughput and waiting, the default mode checks correctness under
//! faults. The run is deterministic per seed (the same report and `fingerprint`).
//!
//! `--no-pacing` turns the charge path's pacing off (no budget, refused messages wait the
//! visibility timeout), reproducing the stall the pacing removed.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Duration;

use async_trait::async_trait;
use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::sqs::SqsEvent;
use charge::handler::ChargeFunction;
use charge_once::config::StripeBudget;
use charge_once::executor::{ChargeDeps, ChargePolicy};
use charge_once::pacing::{Budget, PacedGateway};
use charge_once::ports::{
    ChargeQueue, MessageVisibility, OperationStore, QueueError, QueuedCharge,
};
use charge_once::reconciler::ReconcilerDeps;
use charge_once::{Clock, ManualClock, OperationKey, OrderId, Timestamp};
use checkout::handler::Checkout;
use lambda_runtime::{Context, LambdaEvent};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use reconciler::handler::ReconcilerFunction;
use serde::Serialize;
use stripe_sim::{Capacity, CreateLatency, SimConfig, StripeSim};

use crate::driver::{self, TICK_EVERY};
use crate::faults::Faults;
use crate::gateway::InProcessGateway;
use crate::queue::SimQueue;
use crate::report::{self, Report};
use crate::sched::{run_all, sleep_until, SchedSleeper, Timers};
use crate::source::Delivered;
use crate::store::SimStore;
use crate::stripe::LocalLedger;
use crate::BoxError;

/// What a load run is given.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub orders: u64,
    /// Orders per virtual second.
    pub arrival_rate: f64,
    pub seed: u64,
    /// The event source's `MaximumConcurrency` (`ChargeMaxConcurrency`).
    pub charge_concurrency: u32,
    /// Stripe's create limit, requests/s.
    pub create_limit: u32,
    /// `StripeRequestsPerSecond`: the budget the functions pace to.
    pub stripe_rps: u64,
    /// The create latency's median.
    pub create_latency_p50: Duration,
    /// Pacing on (a Budget per environment, refusals back in seconds), or today's stall.
    pub pacing: bool,
    /// Draw the run as an SVG here.
    pub svg: Option<std::path::PathBuf>,
    /// Each environment's budget burst (the charge function's [`charge::BURST`]).
    pub burst: u32,
}

impl LoadConfig {
    /// The reference burst's settings for `orders` at `arrival_rate`.
    pub fn new(orders: u64, arrival_rate: f64, seed: u64) -> Self {
        Self {
            orders,
            arrival_rate,
            seed,
            charge_concurrency: charge::EVENT_SOURCE.default_max_concurrency,
            create_limit: Capacity::STRIPE_ENDPOINT_PER_SEC,
            stripe_rps: StripeBudget::DEFAULT_PER_SECOND,
            create_latency_p50: CreateLatency::DEFAULT_P50,
            pacing: true,
            svg: None,
            burst: charge::BURST,
        }
    }
}

/// What a load run measured (virtual time throughout).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LoadReport {
    pub orders: u64,
    pub arrival_rate: f64,
    pub charge_concurrency: u32,
    pub create_limit: u32,
    pub stripe_rps: u64,
    pub pacing: bool,
    /// Orders whose operation settled (succeeded, failed or review) before the run's bound.
    pub settled: u64,
    /// First arrival → last settled, s.
    pub drain_secs: f64,
    /// N / L: the drain at exactly Stripe's create limit, s.
    pub ideal_drain_secs: f64,
    /// `drain_secs / ideal_drain_secs`.
    pub drain_ratio: f64,
    /// Checkout → settled, s.
    pub latency_p50_secs: f64,
    pub latency_p99_secs: f64,
    pub latency_max_secs: f64,
    /// Requests Stripe refused for capacity (its own counter, not a fault).
    pub capacity_429s: u64,
    /// Creates that reached Stripe, refused ones included.
    pub stripe_creates: u64,
    /// `stripe_creates / orders`.
    pub creates_per_charge: f64,
    /// Retrieves and searches that reached Stripe.
    pub stripe_reads: u64,
    /// The age of the oldest message in the queue, at its worst, s.
    pub oldest_message_age_secs: f64,
    /// Orders one of whose messages was received again ≥ the visibility timeout after its
    /// previous receive.
    pub waited_visibility_timeout: u64,
    /// Messages the charge function brought back in seconds (`ChangeMessageVisibility`).
    pub returned_soon: u64,
    /// The slowest create latency drawn in the run, s.
    pub max_create_latency_secs: f64,
    pub batches: u64,
    pub reconciler_ticks: u64,
    /// Messages deleted at the receive limit (the DLQ's).
    pub dead_lettered: u64,
    /// Checkouts not answered 2xx.
    pub checkout_errors: u64,
    /// FNV-1a over the settle log and Stripe's counters: equal for equal runs.
    pub fingerprint: String,
}

impl LoadReport {
    pub fn render(&self) -> String {
        format!(
            "  load            {} orders at {}/s, charge concurrency {}, create limit {}/s, budget {}/s, pacing {}\n\
             \x20 drain           {:.1} s (N/L {:.1} s, ratio {:.3}); settled {}\n\
             \x20 checkout→settled p50 {:.2} s  p99 {:.2} s  max {:.2} s (slowest create {:.2} s)\n\
             \x20 at Stripe       creates {} ({:.3} per charge), reads {}, capacity 429s {}\n\
             \x20 queue           oldest message {:.1} s, orders that waited a visibility timeout {}, returned soon {}, batches {}, dead-lettered {}\n\
             \x20 reconciler      {} ticks; checkout errors {}; fingerprint {}\n",
            self.orders,
            self.arrival_rate,
            self.charge_concurrency,
            self.create_limit,
            self.stripe_rps,
            if self.pacing { "on" } else { "off" },
            self.drain_secs,
            self.ideal_drain_secs,
            self.drain_ratio,
            self.settled,
            self.latency_p50_secs,
            self.latency_p99_secs,
            self.latency_max_secs,
            self.max_create_latency_secs,
            self.stripe_creates,
            self.creates_per_charge,
            self.stripe_reads,
            self.capacity_429s,
            self.oldest_message_age_secs,
            self.waited_visibility_timeout,
            self.returned_soon,
            self.batches,
            self.dead_lettered,
            self.reconciler_ticks,
            self.checkout_errors,
            self.fingerprint,
        )
    }
}

/// Wakes idle pollers when a message is sent.
#[derive(Default)]
struct Waiters(Mutex<Vec<Waker>>);

impl Waiters {
    fn wake_all(&self) {
        let ws = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        for w in ws {
            w.wake();
        }
    }
}

/// The queue as checkout and the reconciler send to it: every send wakes the idle pollers.
struct Notifying {
    queue: Arc<SimQueue>,
    waiters: Arc<Waiters>,
}

#[async_trait]
impl ChargeQueue for Notifying {
    async fn send(&self, charge: &QueuedCharge) -> Result<(), QueueError> {
        let r = self.queue.send(charge).await;
        self.waiters.wake_all();
        r
    }
}

/// One second of the run, for the SVG.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at_s: f64,
    visible: u64,
    in_flight: u64,
    settled: u64,
    r429: u64,
}

struct Run {
    cfg: LoadConfig,
    clock: ManualClock,
    start: Timestamp,
    /// The run gives up here (whatever is unsettled stays so).
    bound: Timestamp,
    queue: Arc<SimQueue>,
    waiters: Arc<Waiters>,
    store: Arc<SimStore>,
    sim: StripeSim,
    checkout: Checkout,
    reconciler: ReconcilerFunction,
    arrived: AtomicU64,
    batches: AtomicU64,
    ticks: AtomicU64,
    dead_lettered: AtomicU64,
    checkout_errors: AtomicU64,
    oldest_ms: AtomicU64,
    samples: Mutex<Vec<Sample>>,
    faults: Faults,
}

type Task<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

impl Run {
    fn done(&self) -> bool {
        (self.arrived.load(Ordering::Relaxed) >= self.cfg.orders
            && self.store.settled_count() as u64 >= self.cfg.orders)
            || self.clock.now() >= self.bound
    }

    fn note_oldest(&self) {
        if let Some(sent) = self.queue.oldest_sent_at() {
            let age = self.clock.now().since(sent).as_millis() as u64;
            self.oldest_ms.fetch_max(age, Ordering::Relaxed);
        }
    }

    async fn arrivals(&self) {
        let per_ms = self.cfg.arrival_rate / 1000.0;
        for i in 0..self.cfg.orders {
            let at = self
                .start
                .plus(Duration::from_millis((i as f64 / per_ms) as u64));
            sleep_until(at).await;
            let order = driver::plan_order(i, self.cfg.seed, &self.faults);
            let amount = 1_000 + (i % 9_000) as i64;
            let status = checkout::handler::handle(
                &self.checkout,
                LambdaEvent::new(driver::checkout_request(&order, amount), Context::default()),
            )
            .await
            .status_code;
            if !(200..300).contains(&status) {
                self.checkout_errors.fetch_add(1, Ordering::Relaxed);
            }
            self.arrived.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits until a message is sent or the clock reads `until`.
    async fn idle(&self, until: Timestamp) {
        let generation = self.queue.generation();
        let mut timer = Box::pin(sleep_until(until));
        std::future::poll_fn(|cx| {
            if self.queue.generation() != generation || timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
            self.waiters
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// One execution environment: receive a batch, invoke, delete what was acknowledged.
    async fn poller(&self, f: ChargeFunction) {
        let es = charge::EVENT_SOURCE;
        let visibility = Duration::from_secs(es.visibility_timeout_secs);
        while !self.done() {
            let now = self.clock.now();
            let batch: Vec<Delivered> = self
                .queue
                .receive(es.batch_size, visibility)
                .into_iter()
                .map(Delivered::from)
                .collect();
            if batch.is_empty() {
                // Nothing visible: until something is sent or becomes visible (at least once a
                // second, to notice the end).
                let next = self
                    .queue
                    .next_visible_at()
                    .unwrap_or(now.plus(Duration::from_secs(1)))
                    .min(now.plus(Duration::from_secs(1)));
                self.idle(next).await;
                continue;
            }
            self.batches.fetch_add(1, Ordering::Relaxed);
            let mut event = SqsEvent::default();
            event.records = batch.iter().map(Delivered::to_record).collect();
            let mut ctx = Context::default();
            ctx.deadline = now
                .plus(Duration::from_secs(es.function_timeout_secs))
                .as_millis() as u64;
            let failed: Vec<String> = charge::handler::handle(&f, LambdaEvent::new(event, ctx))
                .await
                .batch_item_failures
                .into_iter()
                .map(|b| b.item_identifier)
                .collect();
            self.note_oldest();
            for d in &batch {
                let item_failed = failed.iter().any(|id| *id == d.message_id || id.is_empty());
                if !item_failed {
                    self.queue.delete(&d.receipt);
                } else if d.receive_count >= driver::MAX_RECEIVES {
                    // The redrive policy moves it to the DLQ; the unknown index still has it.
                    self.dead_lettered.fetch_add(1, Ordering::Relaxed);
                    self.queue.delete(&d.receipt);
                }
            }
        }
    }

    async fn ticker(&self) {
        let mut since = Duration::ZERO;
        while !self.done() {
            crate::sched::sleep(&self.clock, Duration::from_secs(1)).await;
            since += Duration::from_secs(1);
            if since < TICK_EVERY || self.done() {
                continue;
            }
            since = Duration::ZERO;
            let mut event = EventBridgeEvent::<serde_json::Value>::default();
            event.detail_type = "Scheduled Event".into();
            event.source = "aws.events".into();
            event.detail = serde_json::json!({});
            let _ = reconciler::handler::handle(
                &self.reconciler,
                LambdaEvent::new(event, Context::default()),
            )
            .await;
            self.ticks.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Once a virtual second: the oldest message's age, and the SVG's samples.
    async fn monitor(&self) {
        while !self.done() {
            crate::sched::sleep(&self.clock, Duration::from_secs(1)).await;
            self.note_oldest();
            if self.cfg.svg.is_some() {
                let (visible, in_flight) = self.queue.visible_and_in_flight();
                self.samples
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(Sample {
                        at_s: self.clock.now().since(self.start).as_secs_f64(),
                        visible,
                        in_flight,
                        settled: self.store.settled_count() as u64,
                        r429: self.sim.capacity_429s().total(),
                    });
            }
        }
    }
}

/// Nearest-rank percentile of sorted `v` (ms), in s.
fn rank(v: &[i64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i] as f64 / 1000.0
}

fn fnv(h: &mut u64, x: i64) {
    for b in x.to_le_bytes() {
        *h ^= u64::from(b);
        *h = h.wrapping_mul(0x0100_0000_01b3);
    }
}

/// Runs the load model; the report's `load` holds its figures, the rest the invariants checked
/// against Stripe's ledger.
pub async fn run(cfg: &LoadConfig) -> Result<Report, BoxError> {
    if !(cfg.arrival_rate.is_finite() && cfg.arrival_rate > 0.0) {
        return Err("--arrival-rate must be a positive number".into());
    }
    let wall = std::time::Instant::now();
    let _ids = crate::SeededIds::install(cfg.seed);
    let start = driver::virtual_start();
    let clock = ManualClock::new(start);
    let _timers = Timers::install(clock.clone());
    let clock_arc: Arc<dyn Clock> = Arc::new(clock.clone());
    let faults = Faults::new(cfg.seed, BTreeMap::new());

    let source = clock.clone();
    let sim = StripeSim::new(SimConfig {
        seed: cfg.seed,
        search_lag: Duration::ZERO,
        time_source: Some(Arc::new(move || source.now().as_millis())),
        capacity: Capacity {
            create_per_sec: Some(cfg.create_limit),
            ..Capacity::stripe_defaults()
        }
        .with_create_latency(CreateLatency::with_p50(cfg.create_latency_p50)),
        ..SimConfig::default()
    });
    let stripe = Arc::new(InProcessGateway {
        sim: sim.clone(),
        // The production client's: one in-call retry (not of a plain 429), a 10 s timeout.
        max_retries: 1,
        timeout: Duration::from_secs(10),
        slowest_create_us: AtomicU64::new(0),
    });

    let store = Arc::new(SimStore::new());
    store.keep_settle_log();
    let mut queue = SimQueue::new(clock_arc.clone());
    queue.long_wait = Some(Duration::from_secs(
        charge::EVENT_SOURCE.visibility_timeout_secs,
    ));
    let queue = Arc::new(queue);
    let waiters = Arc::new(Waiters::default());
    let sender: Arc<dyn ChargeQueue> = Arc::new(Notifying {
        queue: queue.clone(),
        waiters: waiters.clone(),
    });
    let policy = ChargePolicy::default();
    let budget = StripeBudget {
        per_second: cfg.stripe_rps,
        charge_concurrency: u64::from(cfg.charge_concurrency),
    };
    let sleeper = Arc::new(SchedSleeper(clock.clone()));
    let charge_deps = ChargeDeps {
        store: store.clone() as Arc<dyn OperationStore>,
        gateway: stripe.clone(),
        clock: clock_arc.clone(),
        policy: policy.clone(),
    };
    // The reconciler as its main.rs wires it: paced to its share, search to its own.
    let paced = |per_second: f64| {
        Arc::new(Budget::new(
            per_second,
            1,
            clock_arc.clone(),
            sleeper.clone(),
        ))
    };
    let reconciler = ReconcilerDeps {
        charge: ChargeDeps {
            gateway: Arc::new(PacedGateway::new(
                stripe.clone(),
                paced(budget.reconciler_share()),
                Some(paced(budget.reconciler_search_share())),
                Duration::from_secs(10),
            )),
            ..charge_deps.clone()
        },
        queue: sender.clone(),
        page_size: 100,
    };
    let run = Run {
        cfg: cfg.clone(),
        clock: clock.clone(),
        start,
        bound: start.plus(Duration::from_secs(48 * 3600)),
        queue: queue.clone(),
        waiters,
        store: store.clone(),
        sim: sim.clone(),
        checkout: Checkout {
            store: store.clone(),
            queue: sender.clone(),
            clock: clock_arc.clone(),
            pending_grace: policy.pending_grace,
            metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
        },
        reconciler: ReconcilerFunction {
            reconciler,
            metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
        },
        arrived: AtomicU64::new(0),
        batches: AtomicU64::new(0),
        ticks: AtomicU64::new(0),
        dead_lettered: AtomicU64::new(0),
        checkout_errors: AtomicU64::new(0),
        oldest_ms: AtomicU64::new(0),
        samples: Mutex::new(Vec::new()),
        faults,
    };
    let dead_letters = Arc::new(charge_once::memory::MemoryDeadLetters::new());
    // One function per execution environment: each its own share of the budget.
    let function = || ChargeFunction {
        charge: charge_deps.clone(),
        dead_letters: dead_letters.clone(),
        visibility: if cfg.pacing {
            queue.clone() as Arc<dyn MessageVisibility>
        } else {
            Arc::new(charge::handler::QueueTimeout)
        },
        budget: cfg.pacing.then(|| {
            Arc::new(Budget::new(
                budget.charge_share(),
                cfg.burst,
                clock_arc.clone(),
                sleeper.clone(),
            ))
        }),
        metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
    };
    let scheduler = Mutex::new(SmallRng::seed_from_u64(cfg.seed ^ 0x10ad_5eed));
    let mut tasks: Vec<Task<'_>> = vec![
        Box::pin(run.arrivals()),
        Box::pin(run.ticker()),
        Box::pin(run.monitor()),
    ];
    for _ in 0..cfg.charge_concurrency {
        tasks.push(Box::pin(run.poller(function())));
    }
    run_all(&scheduler, tasks).await;

    // Measurements.
    let log = store.settle_log();
    let mut latencies: Vec<i64> = log.iter().map(|(c, s)| s - c).collect();
    latencies.sort_unstable();
    let last = log
        .iter()
        .map(|(_, s)| *s)
        .max()
        .unwrap_or(start.as_millis());
    let drain = (last - start.as_millis()) as f64 / 1000.0;
    let ideal = cfg.orders as f64 / f64::from(cfg.create_limit.max(1));
    let requests = sim.request_counts();
    let refused = sim.capacity_429s();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (c, s) in &log {
        fnv(&mut h, *c);
        fnv(&mut h, *s);
    }
    for x in [
        requests.create,
        requests.retrieve,
        requests.search,
        refused.total(),
    ] {
        fnv(&mut h, x as i64);
    }
    let load = LoadReport {
        orders: cfg.orders,
        arrival_rate: cfg.arrival_rate,
        charge_concurrency: cfg.charge_concurrency,
        create_limit: cfg.create_limit,
        stripe_rps: cfg.stripe_rps,
        pacing: cfg.pacing,
        settled: log.len() as u64,
        drain_secs: drain,
        ideal_drain_secs: ideal,
        drain_ratio: drain / ideal.max(1e-9),
        latency_p50_secs: rank(&latencies, 0.5),
        latency_p99_secs: rank(&latencies, 0.99),
        latency_max_secs: latencies.last().map_or(0.0, |v| *v as f64 / 1000.0),
        capacity_429s: refused.total(),
        stripe_creates: requests.create,
        creates_per_charge: requests.create as f64 / cfg.orders.max(1) as f64,
        stripe_reads: requests.retrieve + requests.search,
        oldest_message_age_secs: run.oldest_ms.load(Ordering::Relaxed) as f64 / 1000.0,
        waited_visibility_timeout: queue.waited_timeout(),
        returned_soon: queue.visibility_changes.load(Ordering::Relaxed),
        max_create_latency_secs: stripe.slowest_create_us.load(Ordering::Relaxed) as f64 / 1e6,
        batches: run.batches.load(Ordering::Relaxed),
        reconciler_ticks: run.ticks.load(Ordering::Relaxed),
        dead_lettered: run.dead_lettered.load(Ordering::Relaxed),
        checkout_errors: run.checkout_errors.load(Ordering::Relaxed),
        fingerprint: format!("{h:016x}"),
    };
    if let Some(path) = &cfg.svg {
        let samples = run
            .samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        std::fs::write(path, svg(&samples, &load))?;
    }

    // The invariants, against Stripe's ledger.
    let ledger = LocalLedger(sim.clone());
    let mut report = Report {
        seed: cfg.seed,
        backend: "memory".into(),
        events: "none".into(),
        deterministic: true,
        ..Report::default()
    };
    let current = store.clone();
    let mut judge = report::Judge::new(
        &ledger,
        Default::default(),
        Some(Box::new(move |op: &str| {
            charge_once::OperationId::parse(op).is_ok_and(|id| current.is_current(&id))
        })),
    );
    for i in 0..cfg.orders {
        let order = driver::plan_order(i, cfg.seed, &run.faults);
        let key = OperationKey::charge(OrderId::parse(&order.order_id)?);
        let record = store.get(&key).await.map_err(|e| format!("{e}"))?;
        let published = record.as_ref().map(|op| store.published(&op.operation_id));
        judge.order(&mut report, &order, record.as_ref(), published);
    }
    let s = store.clone();
    judge.finish(
        &mut report,
        move |op: &str| {
            charge_once::OperationId::parse(op)
                .ok()
                .and_then(|id| s.order_of(&id))
        },
        (
            store
                .first_stale_write
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            queue
                .first_foreign
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        ),
        Some(store.outcome_events().1.as_slice()),
    );
    report.outcome_events = Some(store.outcome_events().0);
    report.settled_changes = store.settled_changes();
    report.stale_lease_writes = store.stale_lease_writes.load(Ordering::Relaxed);
    report.foreign_dedup_ids = queue.foreign_dedup_ids.load(Ordering::Relaxed);
    report.requests_total = BTreeMap::from([
        ("stripe_creates".to_owned(), requests.create),
        (
            "stripe_calls".to_owned(),
            requests.create + requests.retrieve + requests.search,
        ),
        ("sqs_sends".to_owned(), queue.sends.load(Ordering::Relaxed)),
    ]);
    report.virtual_hours = clock.now().since(start).as_secs_f64() / 3600.0;
    report.trace_hash = load.fingerprint.clone();
    report.load = Some(load);
    let w = wall.elapsed().as_secs_f64();
    report.wall_secs = w;
    report.orders_per_sec = cfg.orders as f64 / w.max(1e-9);
    report.set_rates();
    Ok(report)
}

/// The run over virtual time: queue depth (visible), in flight, settled, capacity 429s per
/// second; hand-written polylines.
fn svg(samples: &[Sample], load: &LoadReport) -> String {
    use std::fmt::Write as _;
    let (w, h, pad) = (960.0_f64, 420.0_f64, 50.0_f64);
    let t_max = samples.last().map_or(1.0, |s| s.at_s).max(1.0);
    let count_max = samples
        .iter()
        .map(|s| s.visible.max(s.in_flight).max(s.settled))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let per_sec: Vec<f64> = samples
        .windows(2)
        .map(|p| p[1].r429.saturating_sub(p[0].r429) as f64)
        .collect();
    let r_max = per_sec.iter().copied().fold(1.0_f64, f64::max);
    let x = |t: f64| pad + (w - 2.0 * pad) * t / t_max;
    let y = |v: f64, max: f64| h - pad - (h - 2.0 * pad) * v / max;
    let line = |pts: Vec<(f64, f64)>, color: &str| {
        let mut p = String::new();
        for (a, b) in pts {
            let _ = write!(p, "{a:.1},{b:.1} ");
        }
        format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{p}\"/>\n"
        )
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(s, "<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"{pad}\" y=\"20\">{} orders at {}/s, create limit {}/s, concurrency {}, pacing {}: drain {:.0} s (N/L {:.0} s)</text>",
        load.orders,
        load.arrival_rate,
        load.create_limit,
        load.charge_concurrency,
        if load.pacing { "on" } else { "off" },
        load.drain_secs,
        load.ideal_drain_secs
    );
    let _ = writeln!(
        s,
        "<line x1=\"{pad}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"black\"/><line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{0}\" stroke=\"black\"/>",
        h - pad,
        w - pad
    );
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\">{t_max:.0} s</text><text x=\"4\" y=\"{}\">{count_max:.0}</text>",
        w - pad - 30.0,
        h - pad + 16.0,
        pad + 4.0
    );
    s.push_str(&line(
        samples
            .iter()
            .map(|p| (x(p.at_s), y(p.visible as f64, count_max)))
            .collect(),
        "steelblue",
    ));
    s.push_str(&line(
        samples
            .iter()
            .map(|p| (x(p.at_s), y(p.in_flight as f64, count_max)))
            .collect(),
        "darkorange",
    ));
    s.push_str(&line(
        samples
            .iter()
            .map(|p| (x(p.at_s), y(p.settled as f64, count_max)))
            .collect(),
        "seagreen",
    ));
    s.push_str(&line(
        samples
            .iter()
            .skip(1)
            .zip(&per_sec)
            .map(|(p, r)| (x(p.at_s), y(*r, r_max)))
            .collect(),
        "crimson",
    ));
    for (i, (name, color)) in [
        ("queue depth (visible)", "steelblue"),
        ("in flight", "darkorange"),
        ("settled", "seagreen"),
        (&*format!("capacity 429s per s (max {r_max:.0})"), "crimson"),
    ]
    .iter()
    .enumerate()
    {
        let ly = 40.0 + 16.0 * i as f64;
        let _ = writeln!(
            s,
            "<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{}\" y=\"{}\">{name}</text>",
            w - 260.0,
            ly - 9.0,
            w - 245.0,
            ly
        );
    }
    s.push_str("</svg>\n");
    s
}
