//! # simulate: the whole charge-once pipeline on one thread, deterministic
//!
//! The real checkout, charge and reconciler handlers, called with real Lambda event types, on a
//! virtual clock, with every fault kind injected, checked against what really exists at
//! (simulated) Stripe. FoundationDB- / VOPR-style: one seed, one interleaving, one outcome and
//! one `trace_hash`, on every machine, at CPU speed.
//!
//! - Concurrency is simulated by a seeded scheduler ([`sched`]): consumers, checkouts and the two
//!   invocations of a concurrent batch interleave at every port call, in the order the seed says.
//! - Time is a [`ManualClock`]; nothing waits for real: client timeouts, back-offs, visibility
//!   timeouts and lease expiry all happen on the virtual clock.
//! - Stripe is the `stripe-sim` engine called in process ([`gateway`]): the same idempotency
//!   layer, ledger, search lag and fault engine as the HTTP server, without sockets.
//! - Ids (operation ids, lease tokens) come from a seeded source installed for this thread
//!   ([`charge_once::ids`]).
//!
//! Wire modes, not deterministic (real sockets and timers): `--stripe http` (the simulator on
//! loopback through the production `StripeGateway`), `--stripe-url` (a separately
//! started `stripe-sim`), `--backend aws` (DynamoDB and SQS at `AWS_ENDPOINT_URL` or
//! `--endpoint-url`, refused without one; the table and queue it creates are deleted at the end).
//!
//! Modules: [`faults`] (kinds, rates, the injecting wrappers), [`gateway`] (Stripe in process),
//! [`stripe`] (which Stripe), [`store`] and [`queue`] (indexed in-memory DynamoDB and SQS FIFO),
//! [`source`] (the event-source side of the queue), [`driver`] (the loop), [`mutations`] (the
//! broken variants the checker must catch), [`trace`] (the decision log), [`report`], [`load`]
//! (`--arrival-rate`: a burst at Stripe's limit on the scheduler's timers, measured in virtual
//! time).

pub mod driver;
pub mod faults;
pub mod fx;
pub mod gateway;
pub mod load;
pub mod mutations;
pub mod queue;
pub mod report;
pub mod sched;
pub mod source;
pub mod store;
pub mod stripe;
pub mod trace;
pub mod webhooks;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_config::BehaviorVersion;
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::sqs::SqsQueue;
use charge_once::adapters::stripe::{SecretKey, StripeConfig, StripeGateway};
use charge_once::executor::{ChargeDeps, ChargePolicy};
use charge_once::pacing::{Budget, PacedGateway};
use charge_once::ports::{ChargeQueue, MessageVisibility, OperationStore, PaymentGateway};
use charge_once::reconciler::ReconcilerDeps;
use charge_once::telemetry::ErrorChain;
use charge_once::{ManualClock, OperationKey, OrderId};
use checkout::handler::Checkout;
use clap::{Parser, ValueEnum};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use driver::{LoopCounts, Pipeline};
use faults::{
    parse_fault, Blackouts, Confirms, Faults, FaultyQueue, FaultyStore, Kind, SimGateway,
};
use report::Report;
use source::{EventSource, MemorySource, SqsSource};
use stripe::SimStripe;
use trace::Trace;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Reads of the request counters: (DynamoDB reads, DynamoDB writes, SQS sends, stale lease
/// writes, foreign dedup ids).
type Counters = Box<dyn Fn() -> (u64, u64, u64, u64, u64)>;
/// The audits' first orders, and the order an operation id was minted for (memory backend).
type Audits = Box<dyn Fn(&str) -> Option<String>>;
/// The raw store, the raw queue, its consumer side (and its `ChangeMessageVisibility`), and
/// the counters.
type Backing = (
    Arc<dyn OperationStore>,
    Arc<dyn ChargeQueue>,
    Arc<dyn EventSource>,
    Arc<dyn MessageVisibility>,
    Counters,
    Audits,
    // The stream stand-in (memory backend): what the outcome relay published.
    Option<Arc<store::SimStore>>,
);

/// What to size the simulated store's and Stripe's maps for up front: one entry per order and
/// a tenth more (replaced records, pruned keys), so a long run does not rehash millions of them.
fn capacity_for(orders: u64) -> usize {
    usize::try_from(orders.saturating_add(orders / 10)).unwrap_or(usize::MAX)
}

/// A real queue's `ChangeMessageVisibility` with its delays capped: on `--backend aws` the
/// queue's clock is real time, so a message returned "in 2-60 s" is returned in at most `cap`,
/// as the source's own visibility timeout is kept to 1 s.
struct CappedVisibility {
    inner: Arc<SqsQueue>,
    cap: Duration,
}

#[async_trait::async_trait]
impl MessageVisibility for CappedVisibility {
    async fn return_after(
        &self,
        receipt_handle: &str,
        delay: Duration,
    ) -> Result<(), charge_once::ports::QueueError> {
        self.inner
            .return_after(receipt_handle, delay.min(self.cap))
            .await
    }
}

/// `--no-pacing`: the path before issue 25, where a refused message waits the queue's visibility
/// timeout. Refusing the change (rather than pretending it happened) keeps the function's
/// `ReturnedSoon` true: 0.
struct NoVisibilityChange;

#[async_trait::async_trait]
impl MessageVisibility for NoVisibilityChange {
    async fn return_after(
        &self,
        _receipt_handle: &str,
        _delay: Duration,
    ) -> Result<(), charge_once::ports::QueueError> {
        Err(charge_once::ports::QueueError::new(
            "--no-pacing: no ChangeMessageVisibility",
        ))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// In-memory store and queue (no setup; deterministic).
    Memory,
    /// DynamoDB and SQS at the standard AWS endpoint (AWS_ENDPOINT_URL, e.g. moto). Not deterministic.
    Aws,
}

/// Where Stripe's events reach the events function from (the stack's `StripeEventSourceName`
/// and `StripeWebhookSecretArn` parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EventsSource {
    /// A Stripe event destination to the EventBridge partner bus, the stack's recommended
    /// source: envelopes to `handle_eventbridge`, failed invocations retried as Lambda does.
    Eventbridge,
    /// Signed webhooks to `POST /stripe/webhook` (`handle_http`), non-2xx retried by Stripe.
    Webhook,
    /// No events: unknowns settle through re-drives and the reconciler only.
    None,
}

impl EventsSource {
    pub fn name(&self) -> &'static str {
        match self {
            EventsSource::Eventbridge => "eventbridge",
            EventsSource::Webhook => "webhook",
            EventsSource::None => "none",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StripeMode {
    /// The Stripe simulator's engine called in process (deterministic).
    InProcess,
    /// The Stripe simulator on loopback HTTP through the production client. Not deterministic.
    Http,
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "simulate",
    version,
    about = "Deterministic simulation of charge-once: the real handlers, every fault kind, checked against the Stripe simulator's ledger.",
    long_about = "Deterministic simulation of charge-once: the real checkout, charge and reconciler \
        handlers on a seeded scheduler and a virtual clock, every fault kind injected, checked \
        against the Stripe simulator's ledger. The same --seed and flags give the same run, report \
        and trace_hash (in memory with Stripe in process, the default). --backend aws, --stripe http \
        and --stripe-url use real sockets and are not deterministic.\n\n\
        Exit codes: 0 every invariant holds, 1 an invariant broke (the seed and order are printed), 2 bad arguments."
)]
pub struct SimulateArgs {
    /// How many orders to check out.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub orders: u64,

    /// Consumers (and checkouts) running at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub concurrency: u32,

    /// Seed of every decision: the order mix, faults, the interleaving, ids. A failing run prints it.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Where operations and messages live.
    #[arg(long, value_enum, default_value_t = Backend::Memory)]
    pub backend: Backend,

    /// How Stripe is reached: the simulator's engine in process, or over loopback HTTP.
    #[arg(long, value_enum, default_value_t = StripeMode::InProcess)]
    pub stripe: StripeMode,

    /// A separately started stripe-sim (e.g. http://127.0.0.1:12111), over HTTP.
    #[arg(long, value_name = "URL")]
    pub stripe_url: Option<String>,

    /// A fault rate, KIND=RATE (repeatable). Kinds: lost_response, server_error_before_commit,
    /// server_error_after_commit, rate_limit, key_in_use, timeout, decline, processing, crash,
    /// duplicate_delivery, concurrent_invocation, dropped_send, key_pruned, search_lag, poison,
    /// stuck, forged_event (beside a real Stripe event, a validly delivered one naming a state
    /// Stripe does not hold), legacy_record (a record stored in release 2026-11-29's shape, read
    /// through the real DynamoDB mapping), unreadable_record (a record corrupted after its put,
    /// set aside by the reconciler's page, repaired by an operator 2 h later),
    /// customer_confirms_declined (of the declined orders, this share of customers come back and
    /// confirm the declined PaymentIntent, at once or minutes later, if Stripe still allows it).
    /// Every kind is on at a modest rate unless --no-faults.
    #[arg(long = "fault", value_name = "KIND=RATE", value_parser = parse_fault)]
    pub faults: Vec<(Kind, f64)>,

    /// No faults at all (a clean run); --fault still adds the ones named.
    #[arg(long)]
    pub no_faults: bool,

    /// Where Stripe's events come from: eventbridge (a Stripe event destination's envelopes to
    /// the events function, failed invocations retried twice as Lambda does, then dead-lettered),
    /// webhook (signed POSTs, non-2xx retried by Stripe), or none (re-drives and the reconciler
    /// only). Deliveries have duplicate, out-of-order, delayed and dropped faults.
    #[arg(long, value_enum, default_value_t = EventsSource::Eventbridge, value_name = "SOURCE")]
    pub events: EventsSource,

    /// The same as --events none.
    #[arg(long, conflicts_with = "events")]
    pub no_webhooks: bool,

    /// Reproduce the first mistake of the seeds: a fresh idempotency key on every create.
    #[arg(long)]
    pub no_idempotency_key: bool,

    /// Reproduce the second: every error is a final failure, nothing is retried or reconciled.
    #[arg(long)]
    pub no_retry: bool,

    /// Simulate a deliberately broken variant (the mutation suite): the checker must catch it.
    #[arg(long, value_enum, value_name = "NAME")]
    pub mutation: Option<mutations::Mutation>,

    /// Print the full timeline of one order (every delivery, claim, Stripe call, record, send).
    #[arg(long, value_name = "ORDER_ID")]
    pub trace: Option<String>,

    /// Print the report as one JSON object on the last line as well.
    #[arg(long)]
    pub json: bool,

    /// The DynamoDB table for --backend aws (default: a fresh one, deleted when the run ends).
    #[arg(long, env = "TABLE_NAME", value_name = "NAME")]
    pub table: Option<String>,

    /// The SQS FIFO queue for --backend aws (default: a fresh one, deleted when the run ends).
    #[arg(long, env = "QUEUE_URL", value_name = "URL")]
    pub queue_url: Option<String>,

    /// Send AWS requests to this endpoint (e.g. a local stack). --backend aws needs it, or
    /// AWS_ENDPOINT_URL: it never runs against wherever the default credentials point.
    #[arg(long, value_name = "URL")]
    pub endpoint_url: Option<String>,

    /// The load model: orders arrive at R per virtual second (with --orders N: a burst of N at
    /// R/s) through checkout, the event source's MaximumConcurrency pollers take batches of 10,
    /// Stripe has its capacity (create 25/s) and creates take their latency (p50 300 ms) of
    /// virtual time. Reports drain time, checkout→settled latency, capacity 429s. No faults.
    #[arg(long, value_name = "R")]
    pub arrival_rate: Option<f64>,

    /// Load model: the event source's MaximumConcurrency (ChargeMaxConcurrency).
    #[arg(long, default_value_t = charge::EVENT_SOURCE.default_max_concurrency, value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub charge_concurrency: u32,

    /// Load model: Stripe's create limit, requests/s.
    #[arg(long, default_value_t = stripe_sim::Capacity::STRIPE_ENDPOINT_PER_SEC)]
    pub create_limit: u32,

    /// Load model: StripeRequestsPerSecond, the budget the functions pace to.
    #[arg(long, default_value_t = charge_once::config::StripeBudget::DEFAULT_PER_SECOND)]
    pub stripe_rps: u64,

    /// Load model: the create latency's median, ms.
    #[arg(long, default_value_t = 300)]
    pub create_latency_p50_ms: u64,

    /// No pacing in the charge path (no budget; refused messages wait the queue's visibility
    /// timeout), as before issue 25: in the load model and in the fault simulation.
    #[arg(long)]
    pub no_pacing: bool,

    /// Load model: each charge environment's budget burst (default: the charge function's BURST).
    #[arg(long, default_value_t = charge::BURST, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub charge_burst: u32,

    /// Load model: draw the run (queue depth, in flight, settled, 429s per second) as an SVG.
    #[arg(long, value_name = "PATH")]
    pub svg: Option<std::path::PathBuf>,
}

impl SimulateArgs {
    /// The defaults with these orders, seed and backend (for tests).
    pub fn new(orders: u64, seed: u64, backend: Backend) -> Self {
        let mut a = Self::parse_from(["simulate"]);
        a.orders = orders;
        a.seed = seed;
        a.backend = backend;
        a.table = None;
        a.queue_url = None;
        a
    }

    /// Where events come from (`--no-webhooks` is `--events none`).
    pub fn events_source(&self) -> EventsSource {
        if self.no_webhooks {
            EventsSource::None
        } else {
            self.events
        }
    }

    /// Whether this run is deterministic (memory backend, Stripe in process).
    pub fn deterministic(&self) -> bool {
        self.backend == Backend::Memory
            && self.stripe == StripeMode::InProcess
            && self.stripe_url.is_none()
    }
}

/// Client timeout of the simulation's Stripe client, and the `timeout` fault's answer time.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(800);
const SLOW_ANSWER: Duration = Duration::from_millis(1_000);

fn rates(args: &SimulateArgs) -> BTreeMap<Kind, f64> {
    let mut rates: BTreeMap<Kind, f64> = if args.no_faults {
        BTreeMap::new()
    } else {
        Kind::ALL.iter().map(|k| (*k, k.default_rate())).collect()
    };
    rates.extend(args.faults.iter().copied());
    rates
}

/// CPU seconds used by this process so far (user + system), from /proc; 0 where unavailable.
pub fn cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may contain spaces) start at ") ".
    let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, i.e. 11 and 12 after the state field.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // USER_HZ is 100 on Linux.
    (ticks(11) + ticks(12)) / 100.0
}

/// Installs the seeded id source for this thread while alive.
pub(crate) struct SeededIds;

impl SeededIds {
    pub(crate) fn install(seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x1d50_f1d5_u64);
        charge_once::ids::install_thread_source(Some(Box::new(move || rng.random::<u128>())));
        SeededIds
    }
}

impl Drop for SeededIds {
    fn drop(&mut self) {
        charge_once::ids::install_thread_source(None);
    }
}

async fn aws_config(args: &SimulateArgs) -> aws_config::SdkConfig {
    // The functions' HTTPS client (rustls on ring, the workspace's one crypto backend).
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(charge_once::adapters::aws::https_client());
    if let Some(url) = &args.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    charge_once::adapters::aws::explaining_missing_credentials(loader.load().await)
}

/// The endpoint `--backend aws` sends every AWS request to: `--endpoint-url`, else
/// `AWS_ENDPOINT_URL`. Without one the run refuses, before any request: the default chain would
/// create a table and a queue wherever the credentials point, a real account included. One
/// endpoint for both services: `AWS_ENDPOINT_URL_DYNAMODB` / `_SQS` alone do not count, since
/// either one missing sends that service to the account. (An explicit account flag checked with
/// STS would need the STS SDK here, which this tool does not link; a run against a real account
/// is not what it is for.)
pub fn aws_endpoint(args: &SimulateArgs) -> Result<String, String> {
    let from_env = std::env::var("AWS_ENDPOINT_URL").ok();
    args.endpoint_url
        .clone()
        .or(from_env)
        .filter(|u| !u.trim().is_empty())
        .ok_or_else(|| {
            "--backend aws needs an explicit endpoint, --endpoint-url URL or AWS_ENDPOINT_URL \
             (the local stack: infra/local/with-stack.sh sets it): without one the run would \
             create a DynamoDB table and an SQS queue wherever the default AWS credentials \
             point, a real account included. Nothing was created"
                .to_owned()
        })
}

/// What a `--backend aws` run created for itself (a table, a queue), deleted when it ends.
struct Scratch {
    dynamodb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    table: Option<String>,
    queue_url: Option<String>,
}

impl Scratch {
    /// Creates the table and the queue `args` does not name, and names them in `args`. On a
    /// failure, deletes what it had created.
    async fn provision(
        config: &aws_config::SdkConfig,
        args: &mut SimulateArgs,
    ) -> Result<Self, BoxError> {
        let mut scratch = Scratch {
            dynamodb: aws_sdk_dynamodb::Client::new(config),
            sqs: aws_sdk_sqs::Client::new(config),
            table: None,
            queue_url: None,
        };
        if args.table.is_none() {
            let name = format!("charge-once-sim-{}", uuid::Uuid::new_v4().simple());
            DynamoStore::new(scratch.dynamodb.clone(), &name)
                .create_table()
                .await?;
            scratch.table = Some(name.clone());
            args.table = Some(name);
        }
        if args.queue_url.is_none() {
            let name = format!("charge-once-sim-{}.fifo", uuid::Uuid::new_v4().simple());
            let created = scratch
                .sqs
                .create_queue()
                .queue_name(&name)
                .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
                .send()
                .await;
            let url = match created {
                Ok(out) => out.queue_url().map(str::to_owned),
                Err(e) => {
                    let err = format!("CreateQueue {name}: {}", ErrorChain(&e));
                    return Err(scratch.failed_with(err).await);
                }
            };
            let Some(url) = url else {
                return Err(scratch
                    .failed_with("CreateQueue returned no URL".into())
                    .await);
            };
            scratch.queue_url = Some(url.clone());
            args.queue_url = Some(url);
        }
        Ok(scratch)
    }

    async fn failed_with(self, err: String) -> BoxError {
        match self.delete().await {
            Ok(()) => err.into(),
            Err(left) => format!("{err}; {left}").into(),
        }
    }

    /// Deletes what was created; an error names what is left behind.
    async fn delete(self) -> Result<(), String> {
        let mut left = Vec::new();
        if let Some(table) = &self.table {
            if let Err(e) = self.dynamodb.delete_table().table_name(table).send().await {
                left.push(format!("table {table} ({})", ErrorChain(&e)));
            }
        }
        if let Some(url) = &self.queue_url {
            if let Err(e) = self.sqs.delete_queue().queue_url(url).send().await {
                left.push(format!("queue {url} ({})", ErrorChain(&e)));
            }
        }
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "could not delete what this run created, delete it yourself: {}",
                left.join(", ")
            ))
        }
    }
}

/// What one run leaves behind besides its report.
pub struct Outcome {
    pub report: Report,
    /// The `--trace` order's timeline (empty without `--trace`).
    pub timeline: Vec<String>,
}

/// Runs a simulation and returns its report.
pub async fn simulate(args: &SimulateArgs) -> Result<Report, BoxError> {
    Ok(run(args).await?.report)
}

/// Runs a simulation; returns its report and the traced order's timeline. On `--backend aws`,
/// only with an explicit endpoint ([`aws_endpoint`]), and the table and queue it creates for the
/// run are deleted at its end, whether it passed or failed.
pub async fn run(args: &SimulateArgs) -> Result<Outcome, BoxError> {
    if args.backend != Backend::Aws || args.arrival_rate.is_some() {
        return run_on(args).await;
    }
    aws_endpoint(args)?;
    let mut args = args.clone();
    let scratch = Scratch::provision(&aws_config(&args).await, &mut args).await?;
    let outcome = run_on(&args).await;
    match (outcome, scratch.delete().await) {
        (outcome, Ok(())) => outcome,
        (Ok(_), Err(left)) => Err(left.into()),
        (Err(e), Err(left)) => Err(format!("{}; {left}", ErrorChain(e.as_ref())).into()),
    }
}

/// [`run`] on the table and queue `args` names (`--backend aws`) or in memory.
async fn run_on(args: &SimulateArgs) -> Result<Outcome, BoxError> {
    use mutations::Mutation;
    if let Some(rate) = args.arrival_rate {
        if !args.deterministic() {
            return Err("--arrival-rate runs in memory with Stripe in process only".into());
        }
        let cfg = load::LoadConfig {
            orders: args.orders,
            arrival_rate: rate,
            seed: args.seed,
            charge_concurrency: args.charge_concurrency,
            create_limit: args.create_limit,
            stripe_rps: args.stripe_rps,
            create_latency_p50: Duration::from_millis(args.create_latency_p50_ms),
            pacing: !args.no_pacing,
            svg: args.svg.clone(),
            burst: args.charge_burst,
        };
        return Ok(Outcome {
            report: load::run(&cfg).await?,
            timeline: Vec::new(),
        });
    }
    let mut args = args.clone();
    match args.mutation {
        Some(Mutation::FreshKeyPerAttempt) => args.no_idempotency_key = true,
        Some(Mutation::TimeoutAsFailed) => args.no_retry = true,
        _ => {}
    }
    let args = &args;
    let started = Instant::now();
    let cpu_start = cpu_secs();
    let _ids = SeededIds::install(args.seed);
    let faults = Arc::new(Faults::new(args.seed, rates(args)));
    let clock = ManualClock::new(driver::virtual_start());
    let trace = Arc::new(Trace::new(clock.clone(), args.trace.clone()));
    let blackouts = Arc::new(Blackouts::default());
    let stripe = Arc::new(match (&args.stripe_url, args.stripe) {
        (Some(url), _) => SimStripe::remote(url, &clock, &faults, args.seed, SLOW_ANSWER).await?,
        (None, StripeMode::Http) => {
            SimStripe::embedded(&clock, &faults, args.seed, SLOW_ANSWER).await?
        }
        (None, StripeMode::InProcess) => {
            SimStripe::in_process(&clock, &faults, args.seed, SLOW_ANSWER)
        }
    });
    let max_retries = if args.no_retry { 0 } else { 1 };
    let gateway: Arc<dyn PaymentGateway> = match (stripe.as_ref(), stripe.base_url()) {
        (SimStripe::InProcess { sim }, _) => {
            // About one PaymentIntent per order (a few more where a key was pruned), each with
            // the client's two metadata pairs (operation_id, order_id).
            sim.reserve(capacity_for(args.orders), 2);
            Arc::new(gateway::InProcessGateway {
                sim: sim.clone(),
                max_retries,
                timeout: CLIENT_TIMEOUT,
                slowest_create_us: Default::default(),
            })
        }
        (_, Some(base)) => {
            let mut cfg = StripeConfig::new(base, SecretKey::new(stripe_sim::DEFAULT_API_KEY));
            cfg.timeout = CLIENT_TIMEOUT;
            cfg.connect_timeout = CLIENT_TIMEOUT;
            cfg.retry_backoff = Duration::from_millis(5);
            cfg.max_network_retries = max_retries;
            Arc::new(StripeGateway::new(cfg)?)
        }
        (_, None) => return Err("a Stripe over HTTP without a base URL".into()),
    };

    // The memory store's audits of settled records and time to settle (none on --backend aws).
    let mut sim_store: Option<Arc<store::SimStore>> = None;
    let (store, mut queue, source, visibility, counters, audits, outbox): Backing = match args
        .backend
    {
        Backend::Memory => {
            let mut store = store::SimStore::new();
            store.lease_fence = args.mutation != Some(Mutation::NoLeaseFence);
            store.conditional_put = args.mutation != Some(Mutation::SettledOverwritten);
            if args.mutation == Some(Mutation::RelayLosesOutcomes) {
                store.lose_every_nth_outcome(50);
            }
            store.faults = Some(faults.clone());
            store.trace = Some(trace.clone());
            store.reserve(capacity_for(args.orders));
            let store = Arc::new(store);
            sim_store = Some(store.clone());
            let queue = Arc::new(queue::SimQueue::new(Arc::new(clock.clone())));
            let source = Arc::new(MemorySource {
                queue: queue.clone(),
                // The template's: six times the charge function's 300 s timeout.
                visibility: Duration::from_secs(charge::EVENT_SOURCE.visibility_timeout_secs),
            });
            let (s, q) = (store.clone(), queue.clone());
            let counters = Box::new(move || {
                (
                    s.calls.reads.load(Ordering::Relaxed) + s.calls.queries.load(Ordering::Relaxed),
                    s.calls.writes.load(Ordering::Relaxed),
                    q.sends.load(Ordering::Relaxed),
                    s.stale_lease_writes.load(Ordering::Relaxed),
                    q.foreign_dedup_ids.load(Ordering::Relaxed),
                )
            });
            let (s, q) = (store.clone(), queue.clone());
            let audits: Audits = Box::new(move |what| {
                let first =
                    |m: &Mutex<Option<String>>| m.lock().unwrap_or_else(|p| p.into_inner()).clone();
                match what {
                    "stale" => first(&s.first_stale_write),
                    "dedup" => first(&q.first_foreign),
                    op => charge_once::OperationId::parse(op)
                        .ok()
                        .and_then(|id| s.order_of(&id)),
                }
            });
            (
                store.clone(),
                queue.clone(),
                source,
                queue,
                counters,
                audits,
                Some(store),
            )
        }
        Backend::Aws => {
            // `run` named both (created for this run unless given).
            let (Some(table), Some(queue_url)) = (args.table.clone(), args.queue_url.clone())
            else {
                return Err("--backend aws: no table or queue (run provisions them)".into());
            };
            let config = aws_config(args).await;
            let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&config), table);
            let sqs = aws_sdk_sqs::Client::new(&config);
            let queue = Arc::new(SqsQueue::new(sqs.clone(), &queue_url));
            let source = Arc::new(SqsSource {
                client: sqs,
                queue_url,
                visibility_secs: 1,
                calls: Default::default(),
            });
            let store = Arc::new(store);
            let (s, q) = (store.clone(), queue.clone());
            let counters = Box::new(move || {
                let c = s.calls();
                (
                    c.reads.load(Ordering::Relaxed) + c.queries.load(Ordering::Relaxed),
                    c.writes.load(Ordering::Relaxed),
                    q.sends.load(Ordering::Relaxed),
                    0,
                    0,
                )
            });
            (
                store,
                queue.clone(),
                source,
                Arc::new(CappedVisibility {
                    inner: queue,
                    cap: Duration::from_secs(1),
                }),
                counters,
                Box::new(|_: &str| None),
                None,
            )
        }
    };

    if args.mutation == Some(Mutation::RandomDedupId) {
        queue = Arc::new(mutations::RandomDedup(queue));
    }
    let mut policy = ChargePolicy::default();
    if args.mutation == Some(Mutation::CreatePastKeyWindow) {
        policy.key_window = Duration::from_secs(30 * 24 * 3600);
    }
    let freezer = Arc::new(faults::Freezer::new(
        clock.clone(),
        policy.lease_ttl + Duration::from_secs(30),
    ));
    let clock_arc: Arc<dyn charge_once::Clock> = Arc::new(clock.clone());
    let faulty_store: Arc<dyn OperationStore> = Arc::new(FaultyStore {
        inner: store.clone(),
        faults: faults.clone(),
        blackouts: blackouts.clone(),
        clock: clock_arc.clone(),
        trace: trace.clone(),
        freezer: freezer.clone(),
    });
    let sender = |may_crash| -> Arc<dyn ChargeQueue> {
        Arc::new(FaultyQueue {
            inner: queue.clone(),
            faults: faults.clone(),
            blackouts: blackouts.clone(),
            clock: clock_arc.clone(),
            trace: trace.clone(),
            may_crash,
        })
    };
    let confirms = Arc::new(Confirms::new(
        stripe.clone(),
        faults.clone(),
        trace.clone(),
        clock_arc.clone(),
    ));
    let mut sim_gateway = SimGateway::new(
        gateway,
        faults.clone(),
        blackouts.clone(),
        clock_arc.clone(),
        trace.clone(),
        args.no_idempotency_key,
        args.no_retry,
    );
    sim_gateway.confirms = Some(confirms.clone());
    let sim_gateway: Arc<dyn PaymentGateway> = match args.mutation {
        Some(Mutation::FailedWithoutCancel) => {
            Arc::new(mutations::CancelNotMade(Arc::new(sim_gateway)))
        }
        _ => Arc::new(sim_gateway),
    };
    let charge = ChargeDeps {
        store: faulty_store.clone(),
        gateway: sim_gateway.clone(),
        clock: clock_arc.clone(),
        policy: policy.clone(),
    };
    // Stripe's events, from the simulator in this process, to the real events function on the
    // same faulty store and gateway as the charge function.
    let mode = match args.events_source() {
        EventsSource::Eventbridge => Some(stripe_sim::DeliveryMode::EventBridge),
        EventsSource::Webhook => Some(stripe_sim::DeliveryMode::Webhook),
        EventsSource::None => None,
    };
    let webhooks = match (mode, stripe.local_sim()) {
        (Some(mode), Some(sim)) => Some(Arc::new(webhooks::Webhooks::new(
            sim.clone(),
            webhooks::Setup {
                mode,
                delivery_faults: webhooks::default_faults(!args.no_faults),
                faults: faults.clone(),
                trust_payload: args.mutation == Some(Mutation::TrustEventPayload),
            },
            ChargeDeps {
                store: faulty_store.clone(),
                gateway: sim_gateway.clone(),
                clock: clock_arc.clone(),
                policy: policy.clone(),
            },
            trace.clone(),
        )?)),
        _ => None,
    };

    // The budget as the charge function's and the reconciler's main.rs split it; sleeping for a
    // slot moves the virtual clock (no timers here: one caller at a time).
    let stripe_budget = charge_once::config::StripeBudget {
        per_second: args.stripe_rps,
        charge_concurrency: u64::from(args.charge_concurrency),
    };
    let sleeper = Arc::new(sched::SchedSleeper(clock.clone()));
    let paced = |per_second: f64| {
        Arc::new(Budget::new(
            per_second,
            1,
            clock_arc.clone(),
            sleeper.clone(),
        ))
    };
    let paced_reconciler = |gateway: Arc<dyn PaymentGateway>| -> Arc<dyn PaymentGateway> {
        Arc::new(PacedGateway::new(
            gateway,
            paced(stripe_budget.reconciler_share()),
            Some(paced(stripe_budget.reconciler_search_share())),
            Duration::from_secs(10),
        ))
    };
    let reconciler_charge = if args.no_pacing {
        charge.clone()
    } else {
        ChargeDeps {
            gateway: paced_reconciler(sim_gateway.clone()),
            ..charge.clone()
        }
    };
    let dead_letters = Arc::new(charge_once::memory::MemoryDeadLetters::new());
    let counts = Arc::new(LoopCounts::default());
    let pipeline = Pipeline {
        clock: clock.clone(),
        faults: faults.clone(),
        blackouts: blackouts.clone(),
        trace: trace.clone(),
        freezer: freezer.clone(),
        late: Mutex::new(Vec::new()),
        scheduler: Mutex::new(SmallRng::seed_from_u64(args.seed ^ 0x5c4e_d01e)),
        seed: args.seed,
        checkout: Checkout {
            store: faulty_store.clone(),
            queue: sender(true),
            clock: clock_arc.clone(),
            pending_grace: policy.pending_grace,
            metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
        },
        reconciler: ReconcilerDeps {
            charge: match args.mutation {
                Some(Mutation::ReconcilerSkipsPending) => ChargeDeps {
                    store: Arc::new(mutations::EditedPages::skip_pending(faulty_store.clone())),
                    ..reconciler_charge.clone()
                },
                Some(Mutation::UnreadableFailsPage) => ChargeDeps {
                    store: Arc::new(mutations::EditedPages::fail_on_unreadable(
                        faulty_store.clone(),
                    )),
                    ..reconciler_charge.clone()
                },
                _ => reconciler_charge,
            },
            queue: sender(false),
            page_size: 100,
        },
        charge: charge::handler::ChargeFunction {
            charge,
            dead_letters: dead_letters.clone(),
            // Paced as main.rs wires it: one environment's share of the budget, refusals back
            // in seconds through the queue; `--no-pacing` is the path before issue 25.
            visibility: if args.no_pacing {
                Arc::new(NoVisibilityChange)
            } else {
                visibility
            },
            budget: (!args.no_pacing).then(|| {
                Arc::new(Budget::new(
                    stripe_budget.charge_share(),
                    args.charge_burst,
                    clock_arc.clone(),
                    sleeper.clone(),
                ))
            }),
            metrics: Arc::new(driver::ChargeMetrics(counts.clone())),
        },
        dead_letters: dead_letters.clone(),
        source,
        store: store.clone(),
        no_retry: args.no_retry,
        concurrency: args.concurrency as usize,
        stripe: stripe.clone(),
        webhooks: webhooks.clone(),
        operator: sim_store.clone(),
        confirms: confirms.clone(),
    };

    pipeline.run(args.orders, &counts).await?;
    let (reads, writes, sends, stale_lease_writes, foreign_dedup_ids) = counters();
    let (stripe_requests, injected) = stripe.snapshot().await?;
    let ledger = stripe.ledger().await?;

    // Our records, read by key after the run (not counted above), judged against the ledger.
    let mut report = Report {
        seed: args.seed,
        backend: format!("{:?}", args.backend).to_lowercase(),
        stale_lease_writes,
        foreign_dedup_ids,
        failed_ticks: counts.failed_ticks.load(Ordering::Relaxed),
        first_failed_tick: counts
            .first_failed_tick
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone(),
        unreadable_counted: counts.unreadable_counted.load(Ordering::Relaxed),
        customer_confirms_paid: confirms.paid.load(Ordering::Relaxed),
        customer_confirms_refused: confirms.refused.load(Ordering::Relaxed),
        mutation: args.mutation.map(|m| m.name()),
        ..Report::default()
    };
    // The orders whose record a forged event moved (see `webhooks::Forged`).
    let forged = webhooks.as_ref().map(|w| w.forged()).unwrap_or_default();
    // The memory store says which operations are an order's record now (no set of them kept).
    let ours = sim_store.clone().map(|s| -> Box<dyn Fn(&str) -> bool> {
        Box::new(move |op| charge_once::OperationId::parse(op).is_ok_and(|id| s.is_current(&id)))
    });
    let mut judge = report::Judge::new(ledger.as_ref(), forged.moved, ours);
    let mut planned_decline = 0;
    let mut planned_processing = 0;
    let mut planned_stuck = 0;
    for i in 0..args.orders {
        let order = driver::plan_order(i, args.seed, &faults);
        planned_decline += u64::from(order.payment_method == "pm_card_chargeDeclined");
        planned_stuck += u64::from(order.payment_method == "pm_card_sim_requiresAction");
        planned_processing += u64::from(order.payment_method == "pm_card_processing_succeeds");
        let key = OperationKey::charge(OrderId::parse(&order.order_id)?);
        let record = match store.get(&key).await {
            Ok(record) => record,
            Err(e) if e.unreadable.is_some() => {
                judge.unreadable(&mut report, &order, &e);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let published = match (&outbox, &record) {
            (Some(outbox), Some(op)) => Some(outbox.published(&op.operation_id)),
            _ => None,
        };
        judge.order(&mut report, &order, record.as_ref(), published);
    }
    report.events = webhooks
        .as_ref()
        .map_or("none", |w| match w.mode() {
            stripe_sim::DeliveryMode::EventBridge => EventsSource::Eventbridge.name(),
            stripe_sim::DeliveryMode::Webhook => EventsSource::Webhook.name(),
        })
        .to_owned();
    report.webhooks = report.events == EventsSource::Webhook.name();
    if let Some(s) = &sim_store {
        report.settled_changes = s.settled_changes();
        report.unreadable_repaired = s.unreadable_counts().0;
        // All unknowns, and those whose PaymentIntent was final at Stripe when we lost the
        // answer (not a `processing` card, which Stripe itself settles 10 minutes later).
        let (open, times) = s.settle_times();
        let processing = |id: &charge_once::OperationId| {
            s.order_of(id).is_some_and(|order| {
                driver::card_of(&order, &faults).0 == "pm_card_processing_succeeds"
            })
        };
        report.time_to_settle = report::TimeToSettle::of(
            (open.len() + times.len()) as u64,
            times.iter().map(|(_, t)| *t).collect(),
        );
        report.time_to_settle_final_at_stripe = report::TimeToSettle::of(
            (open.iter().filter(|id| !processing(id)).count()
                + times.iter().filter(|(id, _)| !processing(id)).count()) as u64,
            times
                .iter()
                .filter(|(id, _)| !processing(id))
                .map(|(_, t)| *t)
                .collect(),
        );
    }
    if let Some(w) = &webhooks {
        report.webhook_counts = w.counts();
        report.webhook_creates = w.calls.creates.load(Ordering::Relaxed);
        report.event_mismatches = forged.mismatches;
        report.events_dead_lettered = w.dead_lettered();
    }
    let publishers = outbox.as_ref().map(|o| o.outcome_events());
    report.outcome_events = publishers.as_ref().map(|(n, _)| *n);
    judge.finish(
        &mut report,
        &audits,
        (audits("stale"), audits("dedup")),
        publishers.as_ref().map(|(_, ops)| ops.as_slice()),
    );

    let mut injected_all: BTreeMap<String, u64> = faults
        .counted()
        .into_iter()
        .map(|(k, n)| (k.name().to_owned(), n))
        .collect();
    let sim_names = [
        ("drop_after_commit", Kind::LostResponse),
        ("server_error_before_commit", Kind::ServerErrorBeforeCommit),
        ("server_error_after_commit", Kind::ServerErrorAfterCommit),
        ("rate_limit", Kind::RateLimit),
        ("key_in_use", Kind::KeyInUse),
        ("latency", Kind::Timeout),
    ];
    for (sim_name, kind) in sim_names {
        let n = injected.get(sim_name).copied().unwrap_or(0);
        *injected_all.entry(kind.name().to_owned()).or_default() += n;
    }
    injected_all.insert("decline".into(), planned_decline);
    injected_all.insert("processing".into(), planned_processing);
    injected_all.insert("stuck".into(), planned_stuck);
    injected_all.insert(
        "search_lag".into(),
        if faults.rate(Kind::SearchLag) > 0.0 {
            stripe_requests.search
        } else {
            0
        },
    );
    report.faults_injected = injected_all;
    report.poison_messages = pipeline.dead_letters.letters().len() as u64;
    report.loop_counts = driver::count_map(&counts)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let stripe_calls = stripe_requests.create
        + stripe_requests.retrieve
        + stripe_requests.search
        + stripe_requests.cancel;
    report.requests_total = BTreeMap::from([
        ("dynamodb_reads".to_owned(), reads),
        ("dynamodb_writes".to_owned(), writes),
        ("sqs_sends".to_owned(), sends),
        ("stripe_calls".to_owned(), stripe_calls),
        ("stripe_creates".to_owned(), stripe_requests.create),
        ("stripe_cancels".to_owned(), stripe_requests.cancel),
    ]);
    let n = args.orders.max(1) as f64;
    report.requests_per_charge = report
        .requests_total
        .iter()
        .map(|(k, v)| (k.clone(), *v as f64 / n))
        .collect();
    report.virtual_hours = driver::elapsed_virtual(&counts).as_secs_f64() / 3600.0;
    report.deterministic = args.deterministic();
    report.trace_events = trace.events();
    report.trace_hash = trace.hash_hex();
    let wall = started.elapsed();
    report.wall_secs = wall.as_secs_f64();
    report.cpu_secs = (cpu_secs() - cpu_start).max(0.0);
    report.orders_per_sec = n / wall.as_secs_f64().max(1e-9);
    report.set_rates();
    Ok(Outcome {
        report,
        timeline: trace.lines(),
    })
}

/// Parses `args` (the first is the program name), runs, prints, returns the exit code.
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args = match SimulateArgs::try_parse_from(args) {
        Ok(a) => a,
        Err(err) => {
            let _ = err.print();
            return ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2));
        }
    };
    if args.backend == Backend::Aws {
        if let Err(why) = aws_endpoint(&args) {
            eprintln!("simulate: {why}");
            return ExitCode::from(2);
        }
    }
    // One thread: the scheduler, not the OS, decides the interleaving.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!(
                "simulate: cannot start the async runtime: {}",
                ErrorChain(&e)
            );
            return ExitCode::from(1);
        }
    };
    let outcome = match runtime.block_on(run(&args)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("simulate: {}", ErrorChain(e.as_ref()));
            return ExitCode::from(1);
        }
    };
    let report = outcome.report;
    let mut out = std::io::stdout().lock();
    if let Some(order) = &args.trace {
        let _ = writeln!(out, "timeline of order {order} (seed {}):", args.seed);
        if outcome.timeline.is_empty() {
            let _ = writeln!(
                out,
                "  (no events: is {order} one of this run's orders? ids are sim-<seed>-<n>)"
            );
        }
        for line in &outcome.timeline {
            let _ = writeln!(out, "  {line}");
        }
    }
    let _ = write!(out, "{}", report.render());
    if args.json {
        match serde_json::to_string(&report) {
            Ok(line) => {
                let _ = writeln!(out, "{line}");
            }
            Err(e) => {
                eprintln!("simulate: report: {}", ErrorChain(&e));
                return ExitCode::from(1);
            }
        }
    }
    let _ = out.flush();
    if report.invariants_hold {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "simulate: invariant broken: {}; replay with --seed {} (and --trace ORDER_ID to read it)",
            report.first_violation.as_deref().unwrap_or("?"),
            report.seed
        );
        ExitCode::from(1)
    }
}
