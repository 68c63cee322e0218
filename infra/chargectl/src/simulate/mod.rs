//! `chargectl simulate`: the whole pipeline on this machine, with faults, checked against what
//! really exists at (simulated) Stripe.
//!
//! By default everything is embedded: the in-memory store and FIFO queue, the Stripe simulator on
//! loopback, and the real checkout, charge and reconciler handlers called with real Lambda event
//! types, on a virtual clock so 24 hours pass in moments. `--backend aws` uses DynamoDB and SQS at
//! the standard AWS endpoint (moto here); `--stripe-url` a separately started `stripe-sim`.
//!
//! Modules: [`faults`] (kinds, rates, the injecting wrappers), [`stripe`] (embedded or remote
//! simulator), [`source`] (the event-source side of the queue), [`driver`] (the loop),
//! [`report`] (invariants against the ledger, and the report).

pub mod driver;
pub mod faults;
pub mod report;
pub mod source;
pub mod stripe;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::sqs::SqsQueue;
use charge_once::adapters::stripe::{SecretKey, StripeConfig, StripeGateway};
use charge_once::executor::{ChargeDeps, ChargePolicy};
use charge_once::memory::{MemoryDeadLetters, MemoryQueue, MemoryStore};
use charge_once::ports::{ChargeQueue, OperationStore};
use charge_once::reconciler::ReconcilerDeps;
use charge_once::{ManualClock, OperationKey, OrderId};
use checkout::handler::Checkout;
use clap::{Args, ValueEnum};

use crate::cli::GlobalArgs;
use driver::{LoopCounts, Pipeline};
use faults::{parse_fault, Blackouts, Faults, FaultyQueue, FaultyStore, Kind, SimGateway};
use report::Report;
use source::{EventSource, MemorySource, SqsSource};
use stripe::StripeSide;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Reads of the request counters: (DynamoDB reads, DynamoDB writes, SQS sends).
type Counters = Box<dyn Fn() -> (u64, u64, u64)>;
/// The raw store, the raw queue, its consumer side, and the counters.
type Backing = (
    Arc<dyn OperationStore>,
    Arc<dyn ChargeQueue>,
    Arc<dyn EventSource>,
    Counters,
);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// In-memory store and queue (no setup).
    Memory,
    /// DynamoDB and SQS at the standard AWS endpoint (AWS_ENDPOINT_URL, e.g. moto).
    Aws,
}

#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// How many orders to check out.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub orders: u32,

    /// Consumers (and checkouts) running at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub concurrency: u32,

    /// Seed of the fault decisions and the order mix; a failing run prints it to replay.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Where operations and messages live.
    #[arg(long, value_enum, default_value_t = Backend::Memory)]
    pub backend: Backend,

    /// A separately started stripe-sim (e.g. http://127.0.0.1:12111) instead of the embedded one.
    #[arg(long, value_name = "URL")]
    pub stripe_url: Option<String>,

    /// A fault rate, KIND=RATE (repeatable). Kinds: lost_response, server_error_before_commit,
    /// server_error_after_commit, rate_limit, key_in_use, timeout, decline, processing, crash,
    /// duplicate_delivery, concurrent_invocation, dropped_send, key_pruned, search_lag. Every kind
    /// is on at a modest rate unless --no-faults.
    #[arg(long = "fault", value_name = "KIND=RATE", value_parser = parse_fault)]
    pub faults: Vec<(Kind, f64)>,

    /// No faults at all (a clean run); --fault still adds the ones named.
    #[arg(long)]
    pub no_faults: bool,

    /// Reproduce the first mistake of the seeds: a fresh idempotency key on every create.
    #[arg(long)]
    pub no_idempotency_key: bool,

    /// Reproduce the second: every error is a final failure, nothing is retried or reconciled.
    #[arg(long)]
    pub no_retry: bool,

    /// Print the report as one JSON object on the last line as well.
    #[arg(long)]
    pub json: bool,
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

/// Runs a simulation and returns its report.
pub async fn simulate(args: &SimulateArgs, global: &GlobalArgs) -> Result<Report, BoxError> {
    let started = Instant::now();
    let faults = Arc::new(Faults::new(args.seed, rates(args)));
    let clock = ManualClock::new(driver::virtual_start());
    let blackouts = Arc::new(Blackouts::default());
    let stripe = Arc::new(match &args.stripe_url {
        Some(url) => StripeSide::remote(url, &clock, &faults, args.seed, SLOW_ANSWER).await?,
        None => StripeSide::embedded(&clock, &faults, args.seed, SLOW_ANSWER).await?,
    });
    let mut stripe_cfg = StripeConfig::new(
        stripe.base_url(),
        SecretKey::new(stripe_sim::DEFAULT_API_KEY),
    );
    stripe_cfg.timeout = CLIENT_TIMEOUT;
    stripe_cfg.connect_timeout = CLIENT_TIMEOUT;
    stripe_cfg.retry_backoff = Duration::from_millis(5);
    stripe_cfg.max_network_retries = if args.no_retry { 0 } else { 1 };
    let gateway = Arc::new(StripeGateway::new(stripe_cfg)?);

    let (store, queue, source, counters): Backing = match args.backend {
        Backend::Memory => {
            let store = Arc::new(MemoryStore::new());
            let queue = Arc::new(MemoryQueue::new(Arc::new(clock.clone())));
            let source = Arc::new(MemorySource {
                queue: queue.clone(),
                // Six times a 30 s function timeout, as the template sets it.
                visibility: Duration::from_secs(180),
            });
            let (s, q) = (store.clone(), queue.clone());
            let counters = Box::new(move || {
                (
                    s.calls.reads.load(Ordering::Relaxed) + s.calls.queries.load(Ordering::Relaxed),
                    s.calls.writes.load(Ordering::Relaxed),
                    q.sends.load(Ordering::Relaxed),
                )
            });
            (store, queue, source, counters)
        }
        Backend::Aws => {
            let config = crate::aws_config(global).await;
            let store = DynamoStore::new(
                aws_sdk_dynamodb::Client::new(&config),
                global.table.clone().unwrap_or_else(|| {
                    format!("charge-once-sim-{}", uuid::Uuid::new_v4().simple())
                }),
            );
            if global.table.is_none() {
                store.create_table().await?;
            }
            let sqs = aws_sdk_sqs::Client::new(&config);
            let queue_url = match &global.queue_url {
                Some(url) => url.clone(),
                None => sqs
                    .create_queue()
                    .queue_name(format!(
                        "charge-once-sim-{}.fifo",
                        uuid::Uuid::new_v4().simple()
                    ))
                    .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
                    .send()
                    .await?
                    .queue_url()
                    .ok_or("CreateQueue returned no URL")?
                    .to_owned(),
            };
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
                )
            });
            (store, queue, source, counters)
        }
    };

    let clock_arc: Arc<dyn charge_once::Clock> = Arc::new(clock.clone());
    let faulty_store: Arc<dyn OperationStore> = Arc::new(FaultyStore {
        inner: store.clone(),
        faults: faults.clone(),
        blackouts: blackouts.clone(),
        clock: clock_arc.clone(),
    });
    let sender = |may_crash| -> Arc<dyn ChargeQueue> {
        Arc::new(FaultyQueue {
            inner: queue.clone(),
            faults: faults.clone(),
            blackouts: blackouts.clone(),
            clock: clock_arc.clone(),
            may_crash,
        })
    };
    let policy = ChargePolicy::default();
    let charge = ChargeDeps {
        store: faulty_store.clone(),
        gateway: Arc::new(SimGateway::new(
            gateway,
            faults.clone(),
            blackouts.clone(),
            clock_arc.clone(),
            args.no_idempotency_key,
            args.no_retry,
        )),
        clock: clock_arc.clone(),
        policy: policy.clone(),
    };
    let dead_letters = Arc::new(MemoryDeadLetters::new());
    let pipeline = Pipeline {
        clock: clock.clone(),
        faults: faults.clone(),
        blackouts: blackouts.clone(),
        checkout: Checkout {
            store: faulty_store.clone(),
            queue: sender(true),
            clock: clock_arc.clone(),
            pending_grace: policy.pending_grace,
            metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
        },
        reconciler: ReconcilerDeps {
            charge: charge.clone(),
            queue: sender(false),
            page_size: 100,
        },
        charge: charge::handler::ChargeFunction {
            charge,
            dead_letters: dead_letters.clone(),
            metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
        },
        dead_letters: dead_letters.clone(),
        source,
        store: store.clone(),
        no_retry: args.no_retry,
        concurrency: args.concurrency as usize,
        stripe: stripe.clone(),
    };

    let orders = driver::plan_orders(args.orders, args.seed, &faults);
    let counts = LoopCounts::default();
    pipeline.run(&orders, &counts).await?;
    let wall = started.elapsed();
    let (reads, writes, sends) = counters();
    let (ledger, stripe_requests, injected) = stripe.snapshot().await?;

    // Our records, read by key after the run (not counted above).
    let mut records = Vec::with_capacity(orders.len());
    for order in &orders {
        let key = OperationKey::charge(OrderId::parse(&order.order_id)?);
        records.push(store.get(&key).await?);
    }

    let mut report = Report {
        seed: args.seed,
        backend: format!("{:?}", args.backend).to_lowercase(),
        ..Report::default()
    };
    report::judge(&mut report, &orders, &records, &ledger);
    report.poison_messages = dead_letters.letters().len() as u64;

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
    let planned = |pm: &str| orders.iter().filter(|o| o.payment_method == pm).count() as u64;
    injected_all.insert("decline".into(), planned("pm_card_chargeDeclined"));
    injected_all.insert("processing".into(), planned("pm_card_processing_succeeds"));
    injected_all.insert("stuck".into(), planned("pm_card_sim_requiresAction"));
    injected_all.insert(
        "search_lag".into(),
        if faults.rate(Kind::SearchLag) > 0.0 {
            stripe_requests.search
        } else {
            0
        },
    );
    report.faults_injected = injected_all;
    report.loop_counts = driver::count_map(&counts)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let stripe_calls = stripe_requests.create + stripe_requests.retrieve + stripe_requests.search;
    report.requests_total = BTreeMap::from([
        ("dynamodb_reads".to_owned(), reads),
        ("dynamodb_writes".to_owned(), writes),
        ("sqs_sends".to_owned(), sends),
        ("stripe_calls".to_owned(), stripe_calls),
        ("stripe_creates".to_owned(), stripe_requests.create),
    ]);
    let n = f64::from(args.orders.max(1));
    report.requests_per_charge = report
        .requests_total
        .iter()
        .map(|(k, v)| (k.clone(), *v as f64 / n))
        .collect();
    report.virtual_hours = driver::elapsed_virtual(&counts).as_secs_f64() / 3600.0;
    report.wall_secs = wall.as_secs_f64();
    report.orders_per_sec = n / wall.as_secs_f64().max(1e-9);
    Ok(report)
}
