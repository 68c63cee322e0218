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
use charge_core::outbox::Outcome;
use charge_core::plan::Policy;
use charge_core::{
    domain::OrderId,
    operation::OperationKey,
    time::{Clock, ManualClock, Timestamp},
};
use charge_once::config::StripeBudget;
use charge_once::executor::EngineDeps;
use charge_once::memory::MemoryDeadLetters;
use charge_once::ports::{
    MessageVisibility, OperationQueue, OperationReads, OperationStore, QueueError, QueuedOperation,
};
use charge_once::reconciler::ReconcilerDeps;
use checkout::door::Checkout;
use lambda_runtime::{Context, LambdaEvent};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use reconciler::handler::ReconcilerFunction;
use stripe_sim::{Capacity, CreateLatency, RequestCounts, SimConfig, StripeSim};

use crate::burst_svg::Sample;
use crate::driver::{self, TICK_EVERY};
use crate::faults::Faults;
use crate::gateway::InProcessGateway;
use crate::pacing::Pacing;
use crate::queue::SimQueue;
pub use crate::report::LoadReport;
use crate::report::{self, Report};
use crate::sched::{run_all, sleep_until, Timers};
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
    /// `StripeRequestsPerSecond`: the account's budget the functions pace to.
    pub stripe_rps: u64,
    /// `StripeEndpointRequestsPerSecond`: each endpoint's.
    pub stripe_endpoint_rps: u64,
    /// The create latency's median.
    pub create_latency_p50: Duration,
    /// Pacing on (a Budget per environment, refusals back in seconds), or today's stall.
    pub pacing: bool,
    /// Draw the run as an SVG here.
    pub svg: Option<std::path::PathBuf>,
    /// Each environment's budget burst (`None`: the charge function's,
    /// [`StripeBudget::charge_burst`]).
    pub burst: Option<u32>,
    /// Stripe's overall limit of the account, requests/s (live 100, test mode 25).
    pub account_limit: u32,
    /// A mixed burst: the share of orders checked out for manual capture, which the order
    /// service captures in full once it hears they are authorized.
    pub capture_share: f64,
    /// A mixed burst: the share of orders (others than the captured ones) the order service
    /// refunds in full once it hears they succeeded.
    pub refund_share: f64,
}

impl LoadConfig {
    /// What the order service asks of order `index` once it hears of its charge, in a mixed
    /// burst: fixed by (seed, index).
    fn ask_of(&self, index: u64) -> Option<Ask> {
        if self.capture_share <= 0.0 && self.refund_share <= 0.0 {
            return None;
        }
        let mut rng =
            SmallRng::seed_from_u64(self.seed ^ 0x0313_a5c0 ^ index.wrapping_mul(0x9e37_79b9));
        let u: f64 = rng.random();
        if u < self.capture_share {
            Some(Ask::Capture)
        } else if u < self.capture_share + self.refund_share {
            Some(Ask::Refund)
        } else {
            None
        }
    }

    /// The budget the functions pace to, split over the charge environments.
    pub fn budget(&self) -> StripeBudget {
        StripeBudget {
            endpoint_per_second: self.stripe_endpoint_rps,
            ..StripeBudget::new(self.stripe_rps, u64::from(self.charge_concurrency))
        }
    }

    /// The reference burst's settings for `orders` at `arrival_rate`.
    pub fn new(orders: u64, arrival_rate: f64, seed: u64) -> Self {
        Self {
            orders,
            arrival_rate,
            seed,
            charge_concurrency: charge::EVENT_SOURCE.default_max_concurrency,
            create_limit: Capacity::STRIPE_ENDPOINT_PER_SEC,
            stripe_rps: StripeBudget::DEFAULT_PER_SECOND,
            stripe_endpoint_rps: StripeBudget::DEFAULT_ENDPOINT_PER_SECOND,
            create_latency_p50: CreateLatency::DEFAULT_P50,
            pacing: true,
            svg: None,
            burst: None,
            account_limit: Capacity::STRIPE_ACCOUNT_PER_SEC,
            capture_share: 0.0,
            refund_share: 0.0,
        }
    }
}

/// What the order service asks of an order in a mixed burst, through the real door.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// `POST /orders/{id}/capture`, all of it, once the charge is authorized.
    Capture,
    /// `POST /orders/{id}/refunds/{refund_id}`, all of it, once the charge succeeded.
    Refund,
}

/// The order service reacts this long after it hears an outcome.
const ASK_DELAY: Duration = Duration::from_secs(10);
/// And asks again this long after the door answered "not yet" (409) or "unavailable" (503).
const ASK_AGAIN: Duration = Duration::from_secs(5);

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
impl OperationQueue for Notifying {
    async fn send(&self, charge: &QueuedOperation) -> Result<(), QueueError> {
        let r = self.queue.send(charge).await;
        self.waiters.wake_all();
        r
    }

    async fn depth(&self) -> Result<Option<charge_core::reconcile_plan::QueueDepth>, QueueError> {
        self.queue.depth().await
    }
}

/// What the tasks count while the run goes.
#[derive(Default)]
struct Tally {
    arrived: AtomicU64,
    batches: AtomicU64,
    ticks: AtomicU64,
    waited_for_queue: AtomicU64,
    dead_lettered: AtomicU64,
    checkout_errors: AtomicU64,
    oldest_ms: AtomicU64,
    /// Orders of a mixed burst that get an ask, and of those, how many the order service heard
    /// the charge's outcome of.
    mix_orders: AtomicU64,
    mix_heard: AtomicU64,
    /// Asks not answered 2xx for good yet (waiting their delay, or to be asked again).
    asks_open: AtomicU64,
    captures_accepted: AtomicU64,
    refunds_accepted: AtomicU64,
    /// Asks the door refused for good (not a 2xx, a 409 "not yet" or a 503).
    ask_errors: AtomicU64,
    /// When the last charge was authorized or settled, virtual ms.
    charges_done_ms: AtomicU64,

    samples: Mutex<Vec<Sample>>,
}

/// A load run: its world (Stripe at its capacity, the store, the queue, the functions) and what
/// its tasks counted.
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
    /// The functions' Stripe client (its slowest create is reported).
    stripe: Arc<InProcessGateway>,
    checkout: Checkout,
    reconciler: ReconcilerFunction,
    /// What each execution environment's charge function is made of.
    charge: EngineDeps,
    pacing: Pacing,
    dead_letters: Arc<MemoryDeadLetters>,
    tally: Tally,
    faults: Faults,
}

type Task<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

impl Run {
    fn done(&self) -> bool {
        let t = &self.tally;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        // Every order's charge settled, and every capture and refund asked of them.
        let settles = self.cfg.orders + load(&t.captures_accepted) + load(&t.refunds_accepted);
        (load(&t.arrived) >= self.cfg.orders
            && load(&t.mix_heard) >= load(&t.mix_orders)
            && load(&t.asks_open) == 0
            && self.store.settled_count() as u64 >= settles)
            || self.clock.now() >= self.bound
    }

    fn note_oldest(&self) {
        if let Some(sent) = self.queue.oldest_sent_at() {
            let age = self.clock.now().since(sent).as_millis() as u64;
            self.tally.oldest_ms.fetch_max(age, Ordering::Relaxed);
        }
    }

    async fn arrivals(&self) {
        let per_ms = self.cfg.arrival_rate / 1000.0;
        for i in 0..self.cfg.orders {
            let at = self
                .start
                .plus(Duration::from_millis((i as f64 / per_ms) as u64));
            sleep_until(at).await;
            let mut order = driver::plan_order(i, self.cfg.seed, &self.faults);
            let ask = self.cfg.ask_of(i);
            if ask == Some(Ask::Capture) {
                // Checked out with `"capture": "manual"`.
                order.authorization = Some(crate::auth_asks::Fate::CaptureAll);
            }
            if ask.is_some() {
                self.tally.mix_orders.fetch_add(1, Ordering::Relaxed);
            }
            let amount = 1_000 + (i % 9_000) as i64;
            let status = checkout::handler::handle(
                &self.checkout,
                LambdaEvent::new(driver::checkout_request(&order, amount), Context::default()),
            )
            .await
            .status_code;
            if !(200..300).contains(&status) {
                self.tally.checkout_errors.fetch_add(1, Ordering::Relaxed);
            }
            self.tally.arrived.fetch_add(1, Ordering::Relaxed);
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
            self.tally.batches.fetch_add(1, Ordering::Relaxed);
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
                    self.tally.dead_lettered.fetch_add(1, Ordering::Relaxed);
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
            let answer = reconciler::handler::handle(
                &self.reconciler,
                LambdaEvent::new(event, Context::default()),
            )
            .await;
            if let Ok(answer) = answer {
                let waited = answer["waited_for_queue"].as_u64().unwrap_or(0);
                self.tally
                    .waited_for_queue
                    .fetch_add(waited, Ordering::Relaxed);
            }
            self.tally.ticks.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The order service of a mixed burst: hears each charge's outcome (the table's stream, as
    /// the notify function relays it) and, [`ASK_DELAY`] later, captures an authorized order
    /// or refunds a charged one through the real door, asking again while the door answers
    /// "not yet".
    async fn order_service(&self) {
        let t = &self.tally;
        let mut due: Vec<(Timestamp, u64, Ask)> = Vec::new();
        while !self.done() {
            crate::sched::sleep(&self.clock, Duration::from_secs(1)).await;
            for (key, outcome, at_ms) in self.store.take_outcomes() {
                if !key.kind.is_charge() {
                    continue;
                }
                let Some(index) = driver::index_of(key.order_id.as_str(), self.cfg.seed) else {
                    continue;
                };
                let ask = self.cfg.ask_of(index);
                // A charge is done when it is authorized or settled, whichever comes first (a
                // manual one's later success is its capture's).
                let charge_done = match outcome {
                    Outcome::Authorized | Outcome::Failed => true,
                    Outcome::Succeeded => ask != Some(Ask::Capture),
                    Outcome::NeedsReview => false,
                    // A dispute's steps: never a charge's.
                    Outcome::DisputeOpened | Outcome::DisputeFundsWithdrawn => false,
                };
                if charge_done {
                    t.charges_done_ms.fetch_max(at_ms as u64, Ordering::Relaxed);
                }
                let heard = match (ask, outcome) {
                    (Some(Ask::Capture), Outcome::Authorized) => Some(Some(Ask::Capture)),
                    (Some(Ask::Refund), Outcome::Succeeded) => Some(Some(Ask::Refund)),
                    (Some(Ask::Capture | Ask::Refund), Outcome::Failed) => Some(None),
                    _ => None,
                };
                if let Some(ask) = heard {
                    t.mix_heard.fetch_add(1, Ordering::Relaxed);
                    if let Some(ask) = ask {
                        t.asks_open.fetch_add(1, Ordering::Relaxed);
                        due.push((Timestamp::from_millis(at_ms).plus(ASK_DELAY), index, ask));
                    }
                }
            }
            let now = self.clock.now();
            let mut later = Vec::new();
            for (at, index, ask) in std::mem::take(&mut due) {
                if at > now {
                    later.push((at, index, ask));
                    continue;
                }
                let order = driver::plan_order(index, self.cfg.seed, &self.faults);
                let request = match ask {
                    Ask::Capture => {
                        crate::auth_asks::TakeAsk::Capture(None).request(&order.order_id)
                    }
                    Ask::Refund => crate::refund_asks::Ask {
                        order_id: order.order_id.clone(),
                        refund_id: "returned".into(),
                        amount: None,
                    }
                    .request(),
                };
                let status = checkout::handler::handle(
                    &self.checkout,
                    LambdaEvent::new(request, Context::default()),
                )
                .await
                .status_code;
                match status {
                    200..=299 => {
                        let accepted = match ask {
                            Ask::Capture => &t.captures_accepted,
                            Ask::Refund => &t.refunds_accepted,
                        };
                        accepted.fetch_add(1, Ordering::Relaxed);
                        t.asks_open.fetch_sub(1, Ordering::Relaxed);
                    }
                    409 | 503 => later.push((now.plus(ASK_AGAIN), index, ask)),
                    _ => {
                        t.ask_errors.fetch_add(1, Ordering::Relaxed);
                        t.asks_open.fetch_sub(1, Ordering::Relaxed);
                    }
                }
            }
            due = later;
        }
    }

    /// Once a virtual second: the oldest message's age, and the SVG's samples.
    async fn monitor(&self) {
        while !self.done() {
            crate::sched::sleep(&self.clock, Duration::from_secs(1)).await;
            self.note_oldest();
            if self.cfg.svg.is_some() {
                let (visible, in_flight) = self.queue.visible_and_in_flight();
                self.tally
                    .samples
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

/// Runs the load model; the report's `load` holds its figures, the rest the invariants checked
/// against Stripe's ledger.
pub async fn run(cfg: &LoadConfig) -> Result<Report, BoxError> {
    if !(cfg.arrival_rate.is_finite() && cfg.arrival_rate > 0.0) {
        return Err("--arrival-rate must be a positive number".into());
    }
    let wall = std::time::Instant::now();
    let _ids = crate::SeededIds::install(cfg.seed);
    let clock = ManualClock::new(driver::virtual_start());
    let _timers = Timers::install(clock.clone());
    let run = Run::build(cfg, clock);
    run.drive().await;
    let load = run.measure();
    if let Some(path) = &cfg.svg {
        let samples = run
            .tally
            .samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        std::fs::write(path, crate::burst_svg::draw(&samples, &title(&load)))?;
    }
    let mut report = run.judge().await?;
    report.trace_hash = load.fingerprint.clone();
    report.load = Some(load);
    let w = wall.elapsed().as_secs_f64();
    report.wall_secs = w;
    report.orders_per_sec = cfg.orders as f64 / w.max(1e-9);
    report.set_rates();
    Ok(report)
}

/// Stripe's engine with its documented capacity and a create latency, on the run's clock, with
/// no random faults.
fn stripe_at_capacity(cfg: &LoadConfig, clock: &ManualClock) -> StripeSim {
    let source = clock.clone();
    StripeSim::new(SimConfig {
        seed: cfg.seed,
        search_lag: Duration::ZERO,
        time_source: Some(Arc::new(move || source.now().as_millis())),
        capacity: Capacity {
            create_per_sec: Some(cfg.create_limit),
            account_per_sec: Some(cfg.account_limit),
            ..Capacity::stripe_defaults()
        }
        .with_create_latency(CreateLatency::with_p50(cfg.create_latency_p50)),
        ..SimConfig::default()
    })
}

impl Run {
    /// The world: Stripe at its capacity, the store, the queue (every send wakes the idle
    /// pollers), checkout, and the reconciler as its main.rs wires it.
    fn build(cfg: &LoadConfig, clock: ManualClock) -> Self {
        let start = clock.now();
        let clock_arc: Arc<dyn Clock> = Arc::new(clock.clone());
        let faults = Faults::new(cfg.seed, BTreeMap::new());
        let sim = stripe_at_capacity(cfg, &clock);
        let stripe = Arc::new(InProcessGateway {
            sim: sim.clone(),
            // The production client's: one in-call retry (not of a plain 429), a 10 s timeout.
            max_retries: 1,
            timeout: Duration::from_secs(10),
            slowest_create_us: AtomicU64::new(0),
            requests: Default::default(),
        });
        let store = Arc::new(SimStore::new());
        store.keep_settle_log();
        if cfg.capture_share > 0.0 || cfg.refund_share > 0.0 {
            store.keep_outcome_log();
        }
        let mut queue = SimQueue::new(clock_arc.clone());
        queue.long_wait = Some(Duration::from_secs(
            charge::EVENT_SOURCE.visibility_timeout_secs,
        ));
        let queue = Arc::new(queue);
        let waiters = Arc::new(Waiters::default());
        let sender: Arc<dyn OperationQueue> = Arc::new(Notifying {
            queue: queue.clone(),
            waiters: waiters.clone(),
        });
        let policy = Policy::default();
        let pacing = Pacing::new(cfg.budget(), &clock);
        let charge = EngineDeps {
            store: store.clone() as Arc<dyn OperationStore>,
            gateway: stripe.clone(),
            clock: clock_arc.clone(),
            policy: policy.clone(),
        };
        let reconciler = ReconcilerDeps {
            charge: EngineDeps {
                gateway: pacing.reconciler(stripe.clone()),
                ..charge.clone()
            },
            queue: sender.clone(),
            page_size: 100,
            charge_throughput: pacing.budget().charge_throughput(),
            dispute_watch: None,
            refund_watch: None,
        };
        Self {
            cfg: cfg.clone(),
            clock,
            start,
            bound: start.plus(Duration::from_secs(48 * 3600)),
            queue,
            waiters,
            store: store.clone(),
            sim,
            stripe,
            checkout: Checkout {
                store,
                queue: sender,
                clock: clock_arc,
                pending_grace: policy.pending_grace,
                max_charge_attempts: Default::default(),
                metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
            },
            reconciler: ReconcilerFunction {
                reconciler,
                metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
            },
            charge,
            pacing,
            dead_letters: Arc::new(MemoryDeadLetters::new()),
            tally: Tally::default(),
            faults,
        }
    }

    /// One execution environment's charge function: its own share of the budget, refusals back
    /// in seconds through the queue (or, without pacing, neither).
    fn charge_function(&self) -> ChargeFunction {
        let pacing = self.cfg.pacing;
        ChargeFunction {
            charge: self.charge.clone(),
            dead_letters: self.dead_letters.clone(),
            visibility: if pacing {
                self.queue.clone() as Arc<dyn MessageVisibility>
            } else {
                Arc::new(charge::handler::QueueTimeout)
            },
            budget: pacing.then(|| self.pacing.charge(self.cfg.burst)),
            metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
        }
    }

    /// Arrivals, the reconciler's schedule, the monitor and the event source's pollers, on the
    /// seeded scheduler until every order settled or the bound.
    async fn drive(&self) {
        let scheduler = Mutex::new(SmallRng::seed_from_u64(self.cfg.seed ^ 0x10ad_5eed));
        let mut tasks: Vec<Task<'_>> = vec![
            Box::pin(self.arrivals()),
            Box::pin(self.ticker()),
            Box::pin(self.monitor()),
        ];
        if self.cfg.capture_share > 0.0 || self.cfg.refund_share > 0.0 {
            tasks.push(Box::pin(self.order_service()));
        }
        for _ in 0..self.cfg.charge_concurrency {
            tasks.push(Box::pin(self.poller(self.charge_function())));
        }
        run_all(&scheduler, tasks).await;
    }

    /// The load figures: drain, checkout→settled latency, Stripe's counters, the queue's.
    fn measure(&self) -> LoadReport {
        let (cfg, start) = (&self.cfg, self.start);
        let log = self.store.settle_log();
        let mut latencies: Vec<i64> = log.iter().map(|(c, s)| s - c).collect();
        latencies.sort_unstable();
        let last = log
            .iter()
            .map(|(_, s)| *s)
            .max()
            .unwrap_or(start.as_millis());
        let drain = (last - start.as_millis()) as f64 / 1000.0;
        let ideal = cfg.orders as f64 / f64::from(cfg.create_limit.max(1));
        let requests = self.sim.request_counts();
        let refused = self.sim.capacity_429s().total();
        let tally = &self.tally;
        LoadReport {
            orders: cfg.orders,
            arrival_rate: cfg.arrival_rate,
            charge_concurrency: cfg.charge_concurrency,
            create_limit: cfg.create_limit,
            create_latency_p50_ms: cfg.create_latency_p50.as_millis() as u64,
            stripe_rps: cfg.stripe_rps,
            stripe_endpoint_rps: cfg.stripe_endpoint_rps,
            pacing: cfg.pacing,
            settled: log.len() as u64,
            drain_secs: drain,
            ideal_drain_secs: ideal,
            drain_ratio: drain / ideal.max(1e-9),
            latency_p50_secs: rank(&latencies, 0.5),
            latency_p99_secs: rank(&latencies, 0.99),
            latency_max_secs: latencies.last().map_or(0.0, |v| *v as f64 / 1000.0),
            capacity_429s: refused,
            stripe_creates: requests.create,
            creates_per_charge: requests.create as f64 / cfg.orders.max(1) as f64,
            stripe_reads: requests.retrieve + requests.search,
            oldest_message_age_secs: tally.oldest_ms.load(Ordering::Relaxed) as f64 / 1000.0,
            waited_visibility_timeout: self.queue.waited_timeout(),
            returned_soon: self.queue.visibility_changes.load(Ordering::Relaxed),
            max_create_latency_secs: self.stripe.slowest_create_us.load(Ordering::Relaxed) as f64
                / 1e6,
            batches: tally.batches.load(Ordering::Relaxed),
            reconciler_ticks: tally.ticks.load(Ordering::Relaxed),
            dead_lettered: tally.dead_lettered.load(Ordering::Relaxed),
            sqs_sends: self.queue.sends.load(Ordering::Relaxed),
            sends_per_order: self.queue.sends.load(Ordering::Relaxed) as f64
                / cfg.orders.max(1) as f64,
            waited_for_queue: tally.waited_for_queue.load(Ordering::Relaxed),
            checkout_errors: tally.checkout_errors.load(Ordering::Relaxed),
            fingerprint: fingerprint(&log, &requests, refused),
            mix: (cfg.capture_share > 0.0 || cfg.refund_share > 0.0).then(|| self.mix()),
        }
    }

    /// A mixed burst's figures: what was asked, what Stripe's ledger holds, and the endpoints'
    /// and the account's peaks and refusals.
    fn mix(&self) -> crate::report::MixReport {
        let t = &self.tally;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let ledger = self.sim.ledger();
        let amounts: BTreeMap<&str, i64> =
            ledger.iter().map(|e| (e.id.as_str(), e.amount)).collect();
        let refunds = self.sim.refund_ledger();
        let mut refunded: BTreeMap<&str, (i64, u64)> = BTreeMap::new();
        let released = Some(stripe_sim::version::RELEASED_REASON);
        for r in refunds.iter().filter(|r| r.reason.as_deref() != released) {
            let e = refunded.entry(r.payment_intent.as_str()).or_default();
            e.0 += r.amount;
            e.1 += 1;
        }
        let over_refunded = refunded
            .iter()
            .filter(|(pi, (sum, n))| *n > 1 || *sum > amounts.get(*pi).copied().unwrap_or(0))
            .count() as u64;
        let refused = self.sim.capacity_429s();
        crate::report::MixReport {
            account_limit: self.cfg.account_limit,
            captures_accepted: load(&t.captures_accepted),
            refunds_accepted: load(&t.refunds_accepted),
            ask_errors: load(&t.ask_errors),
            refunds_at_stripe: refunds.len() as u64,
            over_refunded,
            succeeded_at_stripe: ledger.iter().filter(|e| e.status == "succeeded").count() as u64,
            charges_done_secs: (load(&t.charges_done_ms) as i64 - self.start.as_millis()).max(0)
                as f64
                / 1000.0,
            create_429s: refused.create,
            refund_429s: refused.refund,
            capture_429s: refused.capture,
            account_429s: refused.account,
        }
    }

    /// The invariants, against Stripe's ledger.
    async fn judge(&self) -> Result<Report, BoxError> {
        let (cfg, store, queue) = (&self.cfg, &self.store, &self.queue);
        let ledger = LocalLedger(self.sim.clone());
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
                charge_core::domain::OperationId::parse(op).is_ok_and(|id| current.is_current(&id))
            })),
        );
        for i in 0..cfg.orders {
            let order = driver::plan_order(i, cfg.seed, &self.faults);
            let key = OperationKey::charge(OrderId::parse(&order.order_id)?);
            let record = store.get(&key).await.map_err(|e| format!("{e}"))?;
            let published = record.as_ref().map(|op| store.published(&op.operation_id));
            judge.order(&mut report, &order, record.as_ref(), published);
        }
        let first = |m: &Mutex<Option<String>>| m.lock().unwrap_or_else(|p| p.into_inner()).clone();
        judge.finish(
            &mut report,
            |op: &str| {
                charge_core::domain::OperationId::parse(op)
                    .ok()
                    .and_then(|id| store.order_of(&id))
            },
            (first(&store.first_stale_write), first(&queue.first_foreign)),
            Some(store.outcome_events().1.as_slice()),
        );
        self.count(&mut report);
        Ok(report)
    }

    /// The store's and the queue's audits and requests, and the virtual time the run took.
    fn count(&self, report: &mut Report) {
        let (store, queue) = (&self.store, &self.queue);
        let requests = self.sim.request_counts();
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
        report.virtual_hours = self.clock.now().since(self.start).as_secs_f64() / 3600.0;
    }
}

/// Nearest-rank percentile of sorted `v` (ms), in s.
pub(crate) fn rank(v: &[i64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i] as f64 / 1000.0
}

/// FNV-1a over the settle log and Stripe's counters: equal for equal runs.
fn fingerprint(log: &[(i64, i64)], requests: &RequestCounts, refused: u64) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (c, s) in log {
        fnv(&mut h, *c);
        fnv(&mut h, *s);
    }
    for x in [requests.create, requests.retrieve, requests.search, refused] {
        fnv(&mut h, x as i64);
    }
    format!("{h:016x}")
}

fn fnv(h: &mut u64, x: i64) {
    for b in x.to_le_bytes() {
        *h ^= u64::from(b);
        *h = h.wrapping_mul(0x0100_0000_01b3);
    }
}

/// The run's title on its picture: what ran and how long it took to drain.
fn title(load: &LoadReport) -> String {
    format!(
        "{} orders at {}/s, limit {}/s, median {} ms, {} environments, {}: drain {:.0} s = {:.3} × N/L",
        load.orders,
        load.arrival_rate,
        load.create_limit,
        load.create_latency_p50_ms,
        load.charge_concurrency,
        if load.pacing { "paced" } else { "not paced" },
        load.drain_secs,
        load.drain_ratio
    )
}
