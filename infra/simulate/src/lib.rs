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
//!   ([`charge_core::ids`]).
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

pub mod asks;
pub mod auth_asks;
pub mod auth_watch;
mod burst_svg;
pub mod dashboard;
pub mod dispute_asks;
pub mod dispute_watch;
pub mod drift;
pub mod driver;
pub mod faults;
mod forward;
pub mod fx;
pub mod gateway;
pub mod load;
mod load_wire;
pub mod mutations;
pub mod order_service;
pub mod pacing;
pub mod queue;
pub mod refund_asks;
pub mod report;
pub mod retry_asks;
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
use charge_core::plan::Policy;
use charge_core::{domain::OrderId, operation::OperationKey, time::ManualClock};
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::sqs::SqsQueue;
use charge_once::adapters::stripe::{SecretKey, StripeConfig, StripeGateway};
use charge_once::executor::EngineDeps;
use charge_once::ports::{MessageVisibility, OperationQueue, OperationStore, PaymentGateway};
use charge_once::reconciler::ReconcilerDeps;
use charge_once::telemetry::ErrorChain;
use checkout::door::Checkout;
use clap::{Parser, ValueEnum};
use driver::{LoopCounts, Pipeline};
use faults::{
    parse_fault, Blackouts, Confirms, Faults, FaultyQueue, FaultyStore, Kind, SimGateway,
};
use pacing::Pacing;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use report::Report;
use source::{EventSource, MemorySource, SqsSource};
use stripe::SimStripe;
use trace::Trace;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

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

/// `--no-pacing`: the charge path without its pacing, where a refused message waits the queue's
/// visibility timeout (the stall pacing removes, kept to show it). Refusing the change (rather
/// than pretending it happened) keeps the function's `ReturnedSoon` true: 0.
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

    /// The Stripe API version the functions' client sends, the simulated account's default and
    /// its event endpoint's: 2024-06-20 (the pin; a partial capture, a cancel or a lapse leaves
    /// Stripe's refund of the released part, a lapse says `automatic`) or 2026-09-30.endive (no
    /// such refund; a lapse says `expired`). A separately started stripe-sim (--stripe-url) keeps
    /// its own default for its lapses.
    #[arg(long = "stripe-version", value_name = "VERSION", default_value = charge_core::stripe_version::PINNED, value_parser = parse_stripe_version)]
    pub stripe_version: charge_core::stripe_version::StripeVersion,

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

    /// How long a refund of a `refund_fails_later` order (Stripe's `pm_card_refundFail`) stays
    /// `succeeded` before the bank returns it and Stripe says `failed`, in hours (default:
    /// stripe-sim's 10 minutes). Days of it are what the reconciler's refund watch is for.
    #[arg(long, value_name = "HOURS", value_parser = clap::value_parser!(u64).range(1..=24 * 60))]
    pub refund_fails_after_hours: Option<u64>,

    /// An outage of the event destination: every Stripe event of the run's first HOURS hours is
    /// dropped (none delivered, none retried).
    #[arg(long, value_name = "HOURS", value_parser = clap::value_parser!(u64).range(1..=24 * 60))]
    pub events_outage_hours: Option<u64>,

    /// Reproduce the first mistake of the seeds: a fresh idempotency key on every create.
    #[arg(long)]
    pub no_idempotency_key: bool,

    /// Reproduce the second: every error is a final failure, nothing is retried or reconciled.
    #[arg(long)]
    pub no_retry: bool,

    /// The share of orders that get refund requests through the refund door (partial, several,
    /// the same refund id again, two ids for one amount, ids racing past the charge, "all that
    /// is left", and one asked while the charge is still pending); 0: no refunds.
    #[arg(long = "refunds", value_name = "RATE", default_value_t = refund_asks::DEFAULT_RATE, value_parser = parse_rate)]
    pub refund_rate: f64,

    /// The share of orders checked out with `"capture": "manual"` (authorized, not taken), then
    /// captured in full or in part, canceled, raced (a capture and a cancel at once), canceled
    /// before the charge is sent, or forgotten until Stripe lets the hold lapse (the run goes on
    /// for days of virtual time); 0: none.
    #[arg(long = "authorizations", value_name = "RATE", default_value_t = auth_asks::DEFAULT_RATE, value_parser = parse_rate)]
    pub auth_rate: f64,

    /// The share of orders the customer's bank disputes at Stripe once charged (won, lost,
    /// accepted, never answered, inquiries; some asked a refund while the dispute is open; after
    /// the order's refunds, the dispute takes what they left); 0: none. Stripe in this process
    /// only (the person answers through the simulator directly); the load model
    /// (`--arrival-rate`) asks none.
    #[arg(long = "disputes", value_name = "RATE", default_value_t = dispute_asks::DEFAULT_RATE, value_parser = parse_rate)]
    pub dispute_rate: f64,

    /// The share of the declined orders the order service charges again through the checkout
    /// door with another card (one card that works, declined again then paid, the same card
    /// again, two cards at once, one while the first attempt is still unsettled, past the
    /// attempt limit; half of those paid asked once more); 0.3 by default; 0: none.
    #[arg(long = "retries", value_name = "RATE", default_value_t = retry_asks::DEFAULT_RATE, value_parser = parse_rate)]
    pub retry_rate: f64,

    /// Simulate a deliberately broken variant (the mutation suite): the checker must catch it.
    #[arg(long, value_enum, value_name = "NAME")]
    pub mutation: Option<mutations::Mutation>,

    /// Print the full timeline of one order (every delivery, claim, Stripe call, record, send).
    #[arg(long, value_name = "ORDER_ID")]
    pub trace: Option<String>,

    /// Print the report as one JSON object on the last line as well.
    #[arg(long)]
    pub json: bool,

    /// Draw the template's operator dashboard from this run's metrics (every EMF line the
    /// functions and the audit emitted, on the virtual clock) into this SVG file
    /// (docs/operations-dashboard.svg is one).
    #[arg(long, value_name = "PATH")]
    pub dashboard: Option<std::path::PathBuf>,

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
    /// With --backend aws and --stripe-url (a separately started stripe-sim, its limits on real
    /// time): the same burst on the real clock, through the real DynamoDB and SQS adapters.
    #[arg(long, value_name = "R")]
    pub arrival_rate: Option<f64>,

    /// Load model: the event source's MaximumConcurrency (ChargeMaxConcurrency).
    #[arg(long, default_value_t = charge::EVENT_SOURCE.default_max_concurrency, value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub charge_concurrency: u32,

    /// Load model: Stripe's create limit, requests/s.
    #[arg(long, default_value_t = stripe_sim::Capacity::STRIPE_ENDPOINT_PER_SEC)]
    pub create_limit: u32,

    /// StripeRequestsPerSecond, the account's budget the functions pace to.
    #[arg(long, default_value_t = charge_once::config::StripeBudget::DEFAULT_PER_SECOND)]
    pub stripe_rps: u64,

    /// StripeEndpointRequestsPerSecond, each endpoint's budget the functions pace to.
    #[arg(long, default_value_t = charge_once::config::StripeBudget::DEFAULT_ENDPOINT_PER_SECOND)]
    pub stripe_endpoint_rps: u64,

    /// Load model: the create latency's median, ms.
    #[arg(long, default_value_t = 300)]
    pub create_latency_p50_ms: u64,

    /// No pacing in the charge path (no budget; refused messages wait the queue's visibility
    /// timeout, the stall pacing removes): in the load model and in the fault simulation.
    #[arg(long)]
    pub no_pacing: bool,

    /// Each charge environment's budget burst, the calls it may bank, and no carry (default: the
    /// charge function's, one second of its share, `StripeBudget::charge_burst`, with its carry,
    /// `StripeBudget::charge_carry`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub charge_burst: Option<u32>,

    /// Load model: Stripe's overall limit of the account, requests/s (live 100, test mode 25).
    #[arg(long, default_value_t = stripe_sim::Capacity::STRIPE_ACCOUNT_PER_SEC)]
    pub account_limit: u32,

    /// Load model, a mixed burst: the share of orders checked out with `"capture": "manual"`,
    /// which the order service captures in full 10 s after it hears they are authorized.
    #[arg(long, value_name = "SHARE", default_value_t = 0.0, value_parser = parse_rate)]
    pub burst_captures: f64,

    /// Load model, a mixed burst: the share of the other orders the order service refunds in
    /// full 10 s after it hears they succeeded.
    #[arg(long, value_name = "SHARE", default_value_t = 0.0, value_parser = parse_rate)]
    pub burst_refunds: f64,

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

    /// These arguments with the flags a mutation stands for: the seeds' first two mistakes are
    /// `--no-idempotency-key` and `--no-retry`.
    fn with_mutation_flags(&self) -> Self {
        let mut args = self.clone();
        match args.mutation {
            Some(mutations::Mutation::FreshKeyPerAttempt) => args.no_idempotency_key = true,
            Some(mutations::Mutation::TimeoutAsFailed) => args.no_retry = true,
            _ => {}
        }
        args
    }

    /// The budget the functions pace to: the account's and each endpoint's, over the charge
    /// environments.
    pub fn stripe_budget(&self) -> charge_once::config::StripeBudget {
        charge_once::config::StripeBudget {
            endpoint_per_second: self.stripe_endpoint_rps,
            ..charge_once::config::StripeBudget::new(
                self.stripe_rps,
                u64::from(self.charge_concurrency),
            )
        }
    }

    /// Whether this run is deterministic (memory backend, Stripe in process).
    pub fn deterministic(&self) -> bool {
        self.backend == Backend::Memory
            && self.stripe == StripeMode::InProcess
            && self.stripe_url.is_none()
    }
}

/// A share in [0, 1].
fn parse_stripe_version(raw: &str) -> Result<charge_core::stripe_version::StripeVersion, String> {
    charge_core::stripe_version::StripeVersion::parse(raw.trim()).map_err(|e| e.to_string())
}

fn parse_rate(raw: &str) -> Result<f64, String> {
    match raw.trim().parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("a rate is a number in [0, 1], got {raw:?}")),
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
        charge_core::ids::install_thread_source(Some(Box::new(move || rng.random::<u128>())));
        SeededIds
    }
}

impl Drop for SeededIds {
    fn drop(&mut self) {
        charge_core::ids::install_thread_source(None);
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
    if args.backend != Backend::Aws {
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

/// [`run`] on the table and queue `args` names (`--backend aws`) or in memory, phase by phase:
/// build the world, wire the functions into it, drive the orders through until they settle,
/// judge every order against Stripe's ledger, count what it cost.
async fn run_on(args: &SimulateArgs) -> Result<Outcome, BoxError> {
    if let Some(rate) = args.arrival_rate {
        return run_load(args, rate).await;
    }
    let args = &args.with_mutation_flags();
    let started = Instant::now();
    let cpu_start = cpu_secs();
    let _ids = SeededIds::install(args.seed);
    let world = World::build(args).await?;
    let counts = Arc::new(LoopCounts::default());
    let run = Wired {
        pipeline: wire(args, &world, &counts)?,
        world,
        counts,
    };
    run.pipeline.run(args.orders, &run.counts).await?;
    // Read before the judge reads every record by key, which the counters would count.
    let at_end = AtEnd::read(&run.world).await?;
    let (mut report, planned) = run.judge(args, &at_end).await?;
    run.count(&mut report, args, at_end, planned);
    let wall = started.elapsed();
    report.wall_secs = wall.as_secs_f64();
    report.cpu_secs = (cpu_secs() - cpu_start).max(0.0);
    report.orders_per_sec = args.orders.max(1) as f64 / wall.as_secs_f64().max(1e-9);
    report.set_rates();
    Ok(Outcome {
        report,
        timeline: run.world.trace.lines(),
    })
}

/// `--arrival-rate`: the load model instead of the fault simulation.
async fn run_load(args: &SimulateArgs, rate: f64) -> Result<Outcome, BoxError> {
    if args.backend == Backend::Aws && args.stripe_url.is_some() {
        return Ok(Outcome {
            report: load_wire::run(args, rate).await?,
            timeline: Vec::new(),
        });
    }
    if !args.deterministic() {
        return Err(
            "--arrival-rate runs in memory with Stripe in process, or over the wire \
                    with --backend aws and --stripe-url (real time)"
                .into(),
        );
    }
    let cfg = load::LoadConfig {
        orders: args.orders,
        arrival_rate: rate,
        seed: args.seed,
        charge_concurrency: args.charge_concurrency,
        create_limit: args.create_limit,
        stripe_rps: args.stripe_rps,
        stripe_endpoint_rps: args.stripe_endpoint_rps,
        create_latency_p50: Duration::from_millis(args.create_latency_p50_ms),
        pacing: !args.no_pacing,
        svg: args.svg.clone(),
        burst: args.charge_burst,
        account_limit: args.account_limit,
        capture_share: args.burst_captures,
        refund_share: args.burst_refunds,
    };
    Ok(Outcome {
        report: load::run(&cfg).await?,
        timeline: Vec::new(),
    })
}

/// The world a run happens in, before any function is wired into it: the virtual clock, the
/// faults, the decision log, Stripe, and where operations and messages live.
struct World {
    clock: ManualClock,
    faults: Arc<Faults>,
    trace: Arc<Trace>,
    blackouts: Arc<Blackouts>,
    stripe: Arc<SimStripe>,
    /// Stripe as the functions' client reaches it, before any fault is injected.
    gateway: Arc<dyn PaymentGateway>,
    backing: Backing,
    /// What the functions' refund calls met at Stripe.
    refund_audit: Arc<faults::RefundAudit>,
    /// The authorizations paged, as the functions wrote them.
    pages: Arc<auth_watch::Pages>,
    /// Every metric the functions emitted, when the run draws its dashboard (`--dashboard`).
    tape: Option<Arc<dashboard::MetricsTape>>,
    /// The functions' capture and cancel calls.
    take_calls: Arc<auth_watch::TakeCalls>,
}

impl World {
    async fn build(args: &SimulateArgs) -> Result<Self, BoxError> {
        let faults = Arc::new(Faults::new(args.seed, rates(args)));
        let clock = ManualClock::new(driver::virtual_start());
        let trace = Arc::new(Trace::new(clock.clone(), args.trace.clone()));
        let blackouts = Arc::new(Blackouts::default());
        let at_stripe = faults.at_stripe(SLOW_ANSWER);
        let stripe = Arc::new(match (&args.stripe_url, args.stripe) {
            (Some(url), _) => SimStripe::remote(url, &clock, &at_stripe, args.seed).await?,
            (None, StripeMode::Http) => SimStripe::embedded(&clock, &at_stripe, args.seed).await?,
            (None, StripeMode::InProcess) => SimStripe::in_process(&clock, &at_stripe, args.seed),
        });
        if let Some(sim) = stripe.local_sim() {
            // The account's default and its event endpoint follow the client's version.
            let version = stripe_sim::version::ApiVersion::parse(args.stripe_version.as_str());
            sim.set_api_version(version.map_err(|e| e.message)?);
        }
        if let (Some(sim), Some(hours)) = (stripe.local_sim(), args.refund_fails_after_hours) {
            sim.set_refund_fail_after(Duration::from_secs(hours * 3600));
        }
        let gateway = stripe_client(args, &stripe, &clock)?;
        let backing = match args.backend {
            Backend::Memory => Backing::memory(args, &clock, &faults, &trace),
            Backend::Aws => Backing::aws(args).await?,
        };
        Ok(Self {
            clock,
            faults,
            trace,
            blackouts,
            stripe,
            gateway,
            backing,
            refund_audit: Arc::default(),
            pages: Arc::default(),
            tape: args.dashboard.is_some().then(Arc::default),
            take_calls: Arc::default(),
        })
    }
}

/// The functions' Stripe client: the engine called in process, or the production client on the
/// simulator's HTTP.
fn stripe_client(
    args: &SimulateArgs,
    stripe: &Arc<SimStripe>,
    clock: &ManualClock,
) -> Result<Arc<dyn PaymentGateway>, BoxError> {
    let max_retries = if args.no_retry { 0 } else { 1 };
    match (stripe.as_ref(), stripe.base_url()) {
        (SimStripe::InProcess { sim }, _) => {
            // About one PaymentIntent per order (a few more where a key was pruned), each with
            // the client's two metadata pairs (operation_id, order_id).
            sim.reserve(capacity_for(args.orders), 2);
            Ok(Arc::new(gateway::InProcessGateway {
                sim: sim.clone(),
                max_retries,
                timeout: CLIENT_TIMEOUT,
                slowest_create_us: Default::default(),
                requests: Default::default(),
            }))
        }
        (_, Some(base)) => {
            let mut cfg = StripeConfig::new(base, SecretKey::new(stripe_sim::DEFAULT_API_KEY));
            cfg.timeout = CLIENT_TIMEOUT;
            cfg.connect_timeout = CLIENT_TIMEOUT;
            cfg.retry_backoff = Duration::from_millis(5);
            cfg.max_network_retries = max_retries;
            cfg.api_version = args.stripe_version;
            let client: Arc<dyn PaymentGateway> = Arc::new(StripeGateway::new(cfg)?);
            Ok(match stripe.as_ref() {
                SimStripe::Remote { .. } => Arc::new(gateway::ClockSynced {
                    inner: client,
                    stripe: stripe.clone(),
                    clock: clock.clone(),
                }),
                _ => client,
            })
        }
        (_, None) => Err("a Stripe over HTTP without a base URL".into()),
    }
}

/// Request counters read at the end of a run.
struct BackendCounts {
    dynamodb_reads: u64,
    dynamodb_writes: u64,
    sqs_sends: u64,
    /// Audit at the store: outcome writes from a writer without the current lease.
    stale_lease_writes: u64,
    /// Audit at the queue: sends whose dedup id is not derived from the operation id.
    foreign_dedup_ids: u64,
}

/// The audits' first orders (`"stale"`, `"dedup"`), and the order an operation id was minted for
/// (memory backend).
type Audits = Box<dyn Fn(&str) -> Option<String>>;

/// Where operations and messages live: the raw store and queue (no faults injected), the queue's
/// consumer side and its `ChangeMessageVisibility`, and what the run reads of them at its end.
struct Backing {
    store: Arc<dyn OperationStore>,
    queue: Arc<dyn OperationQueue>,
    source: Arc<dyn EventSource>,
    visibility: Arc<dyn MessageVisibility>,
    counters: Box<dyn Fn() -> BackendCounts>,
    audits: Audits,
    /// The memory store: the stream stand-in (what the outcome relay published), its audits of
    /// settled records and time to settle, and the operator's repairs (none on `--backend aws`).
    sim_store: Option<Arc<store::SimStore>>,
    /// Where the reconciler's refund watch keeps its cursor (the table's item, or the memory
    /// store's).
    watch_cursor: Arc<dyn charge_once::ports::RefundWatchCursor>,
    /// Where the reconciler's dispute watch keeps its cursor.
    dispute_cursor: Arc<dyn charge_once::ports::DisputeWatchCursor>,
}

impl Backing {
    /// The indexed in-memory DynamoDB and SQS FIFO, with the mutations that live in the store.
    fn memory(
        args: &SimulateArgs,
        clock: &ManualClock,
        faults: &Arc<Faults>,
        trace: &Arc<Trace>,
    ) -> Self {
        use mutations::Mutation;
        let mut store = store::SimStore::new();
        store.lease_fence = args.mutation != Some(Mutation::NoLeaseFence);
        store.conditional_put = args.mutation != Some(Mutation::SettledOverwritten);
        store.attempt_write = match args.mutation {
            Some(Mutation::AttemptUnguarded) => store::AttemptWrite::Unguarded,
            Some(Mutation::AttemptRace) => store::AttemptWrite::Unraced,
            _ => store::AttemptWrite::Guarded,
        };
        if args.mutation == Some(Mutation::RelayLosesOutcomes) {
            store.lose_every_nth_outcome(50);
        }
        if args.mutation == Some(Mutation::NoDisputeEvents) {
            store.lose_dispute_outcomes();
        }
        store.faults = Some(faults.clone());
        store.trace = Some(trace.clone());
        store.reserve(capacity_for(args.orders));
        let store = Arc::new(store);
        let queue = Arc::new(queue::SimQueue::new(Arc::new(clock.clone())));
        let source = Arc::new(MemorySource {
            queue: queue.clone(),
            // The template's: six times the charge function's 300 s timeout.
            visibility: Duration::from_secs(charge::EVENT_SOURCE.visibility_timeout_secs),
        });
        let (s, q) = (store.clone(), queue.clone());
        let counters = Box::new(move || BackendCounts {
            dynamodb_reads: s.calls.reads.load(Ordering::Relaxed)
                + s.calls.queries.load(Ordering::Relaxed),
            dynamodb_writes: s.calls.writes.load(Ordering::Relaxed),
            sqs_sends: q.sends.load(Ordering::Relaxed),
            stale_lease_writes: s.stale_lease_writes.load(Ordering::Relaxed),
            foreign_dedup_ids: q.foreign_dedup_ids.load(Ordering::Relaxed),
        });
        let (s, q) = (store.clone(), queue.clone());
        let audits: Audits = Box::new(move |what| {
            let first =
                |m: &Mutex<Option<String>>| m.lock().unwrap_or_else(|p| p.into_inner()).clone();
            match what {
                "stale" => first(&s.first_stale_write),
                "dedup" => first(&q.first_foreign),
                op => charge_core::domain::OperationId::parse(op)
                    .ok()
                    .and_then(|id| s.order_of(&id)),
            }
        });
        Self {
            store: store.clone(),
            queue: queue.clone(),
            source,
            visibility: queue,
            counters,
            audits,
            watch_cursor: store.clone(),
            dispute_cursor: store.clone(),
            sim_store: Some(store),
        }
    }

    /// DynamoDB and SQS on the table and queue `args` names.
    async fn aws(args: &SimulateArgs) -> Result<Self, BoxError> {
        // `run` named both (created for this run unless given).
        let (Some(table), Some(queue_url)) = (args.table.clone(), args.queue_url.clone()) else {
            return Err("--backend aws: no table or queue (run provisions them)".into());
        };
        let config = aws_config(args).await;
        let store = Arc::new(DynamoStore::new(
            aws_sdk_dynamodb::Client::new(&config),
            table,
        ));
        let sqs = aws_sdk_sqs::Client::new(&config);
        let queue = Arc::new(SqsQueue::new(sqs.clone(), &queue_url));
        let source = Arc::new(SqsSource {
            client: sqs,
            queue_url,
            visibility_secs: 1,
            calls: Default::default(),
        });
        let (s, q) = (store.clone(), queue.clone());
        let counters = Box::new(move || {
            let c = s.calls();
            BackendCounts {
                dynamodb_reads: c.reads.load(Ordering::Relaxed) + c.queries.load(Ordering::Relaxed),
                dynamodb_writes: c.writes.load(Ordering::Relaxed),
                sqs_sends: q.sends.load(Ordering::Relaxed),
                stale_lease_writes: 0,
                foreign_dedup_ids: 0,
            }
        });
        Ok(Self {
            watch_cursor: store.clone(),
            dispute_cursor: store.clone(),
            store,
            queue: queue.clone(),
            source,
            visibility: Arc::new(CappedVisibility {
                inner: queue,
                cap: Duration::from_secs(1),
            }),
            counters,
            audits: Box::new(|_: &str| None),
            sim_store: None,
        })
    }
}

/// The ports as the functions see them: every call may meet an injected fault or a blackout.
struct FaultyPorts<'w> {
    world: &'w World,
    clock: Arc<dyn charge_core::time::Clock>,
    store: Arc<dyn OperationStore>,
    /// The raw queue the senders wrap (with the `random-dedup-id` mutation's ids).
    queue: Arc<dyn OperationQueue>,
}

impl<'w> FaultyPorts<'w> {
    fn new(args: &SimulateArgs, world: &'w World, freezer: &Arc<faults::Freezer>) -> Self {
        let mut queue = world.backing.queue.clone();
        if args.mutation == Some(mutations::Mutation::RandomDedupId) {
            queue = Arc::new(mutations::RandomDedup(queue));
        }
        let clock: Arc<dyn charge_core::time::Clock> = Arc::new(world.clock.clone());
        let store = Arc::new(FaultyStore {
            inner: world.backing.store.clone(),
            faults: world.faults.clone(),
            blackouts: world.blackouts.clone(),
            clock: clock.clone(),
            trace: world.trace.clone(),
            freezer: freezer.clone(),
        });
        Self {
            world,
            clock,
            store,
            queue,
        }
    }

    /// A sender to the charge queue; checkout's `may_crash` between its put and its send.
    fn sender(&self, may_crash: bool) -> Arc<dyn OperationQueue> {
        Arc::new(FaultyQueue {
            inner: self.queue.clone(),
            faults: self.world.faults.clone(),
            blackouts: self.world.blackouts.clone(),
            clock: self.clock.clone(),
            trace: self.world.trace.clone(),
            may_crash,
        })
    }

    /// Stripe with faults injected (and the customers who come back to a declined intent), as
    /// the mutation asks.
    fn gateway(&self, args: &SimulateArgs, confirms: &Arc<Confirms>) -> Arc<dyn PaymentGateway> {
        let world = self.world;
        let mut gateway = SimGateway::new(
            world.gateway.clone(),
            world.faults.clone(),
            world.blackouts.clone(),
            self.clock.clone(),
            world.trace.clone(),
            args.no_idempotency_key,
            args.no_retry,
        );
        gateway.confirms = Some(confirms.clone());
        gateway.refund_audit = world.refund_audit.clone();
        match args.mutation {
            Some(mutations::Mutation::FailedWithoutCancel) => {
                Arc::new(mutations::CancelNotMade(Arc::new(gateway)))
            }
            Some(mutations::Mutation::RefundKeyOfCharge) => {
                Arc::new(mutations::RefundUnderChargeKey {
                    inner: Arc::new(gateway),
                    store: world.backing.store.clone(),
                })
            }
            Some(mutations::Mutation::CaptureSettledByReplay) => {
                Arc::new(mutations::CaptureSettledByReplay::new(Arc::new(gateway)))
            }
            Some(mutations::Mutation::DeadlineFromCreation) => Arc::new(
                mutations::DeadlineFromCreation::new(Arc::new(gateway), self.clock.clone()),
            ),
            _ => Arc::new(gateway),
        }
    }
}

/// Wires the real checkout, charge, reconciler and events functions into the world, on the
/// faulty ports, paced as their main.rs files pace them.
fn wire(
    args: &SimulateArgs,
    world: &World,
    counts: &Arc<LoopCounts>,
) -> Result<Pipeline, BoxError> {
    use mutations::Mutation;
    let mut policy = Policy::default();
    if args.mutation == Some(Mutation::CreatePastKeyWindow) {
        policy.key_window = Duration::from_secs(30 * 24 * 3600);
    }
    if args.mutation == Some(Mutation::NoDisputePage) {
        policy.dispute.page_window = Duration::ZERO;
    }
    let dispute_watch = Arc::new(dispute_watch::Watch::default());
    let freezer = Arc::new(faults::Freezer::new(
        world.clock.clone(),
        policy.lease_ttl + Duration::from_secs(30),
    ));
    let ports = FaultyPorts::new(args, world, &freezer);
    let confirms = Arc::new(Confirms::new(
        world.stripe.clone(),
        world.faults.clone(),
        world.trace.clone(),
        ports.clock.clone(),
    ));
    let charge = EngineDeps {
        store: Arc::new(auth_watch::PageWatch {
            inner: dispute_store_bug(
                args,
                refund_store_bug(args, world, ports.store.clone(), false)?,
            ),
            pages: world.pages.clone(),
        }),
        gateway: Arc::new(auth_watch::CountingTakes {
            inner: ports.gateway(args, &confirms),
            calls: world.take_calls.clone(),
        }),
        clock: ports.clock.clone(),
        policy,
    };
    let webhooks = events_function(args, world, &charge)?;
    let pacing = if world.stripe.limits_on_real_time() {
        Pacing::on_real_time(args.stripe_budget())
    } else {
        Pacing::new(args.stripe_budget(), &world.clock)
    };
    let dead_letters = Arc::new(charge_once::memory::MemoryDeadLetters::new());
    Ok(Pipeline {
        clock: world.clock.clone(),
        faults: world.faults.clone(),
        blackouts: world.blackouts.clone(),
        trace: world.trace.clone(),
        freezer,
        late: Mutex::new(Vec::new()),
        scheduler: Mutex::new(SmallRng::seed_from_u64(args.seed ^ 0x5c4e_d01e)),
        seed: args.seed,
        checkout: Checkout {
            store: door_store(
                args,
                refund_store_bug(args, world, ports.store.clone(), true)?,
            ),
            queue: ports.sender(true),
            clock: ports.clock.clone(),
            pending_grace: charge.policy.pending_grace,
            // The template's default, which the retries' plans count on (`past_limit`).
            max_charge_attempts: charge_core::attempt::AttemptLimit::new(retry_asks::LIMIT)?,
            metrics: dashboard::taped(
                Arc::new(charge_once::telemetry::DiscardMetrics),
                &world.tape,
            ),
        },
        reconciler: reconciler_deps(args, &ports, &charge, &pacing, &dispute_watch),
        tape: world.tape.clone(),
        charge: charge_function(args, world, charge, &pacing, &dead_letters, counts),
        dead_letters,
        source: world.backing.source.clone(),
        store: world.backing.store.clone(),
        no_retry: args.no_retry,
        concurrency: args.concurrency as usize,
        stripe: world.stripe.clone(),
        webhooks,
        operator: world.backing.sim_store.clone(),
        confirms,
        refund_rate: args.refund_rate,
        refund_answers: Arc::default(),
        refunds_due: Mutex::new(BTreeMap::new()),
        group: Default::default(),
        bank: bank(args, world),
        auth_rate: args.auth_rate,
        take_answers: Arc::default(),
        takes_due: Mutex::new(BTreeMap::new()),
        dispute_rate: args.dispute_rate,
        disputes: Arc::default(),
        disputes_due: Mutex::new(BTreeMap::new()),
        dispute_watch,
        retry_rate: args.retry_rate,
        retries: Arc::default(),
        retries_due: Mutex::new(BTreeMap::new()),
    })
}

/// The bank that cancels the refunds of `refund_canceled` cards (Stripe in this process only).
fn bank(args: &SimulateArgs, world: &World) -> Option<faults::Bank> {
    let on = args.refund_rate > 0.0 && world.faults.rate(Kind::RefundCanceled) > 0.0;
    let sim = world.stripe.local_sim().filter(|_| on)?;
    Some(faults::Bank {
        sim: sim.clone(),
        faults: world.faults.clone(),
        trace: world.trace.clone(),
    })
}

/// The door's `store`, with the fence between a capture and a cancel gone if the run simulates
/// `takes-not-fenced`, or every charge attempt read as `failed` if it simulates
/// `attempt-unguarded`.
fn door_store(args: &SimulateArgs, store: Arc<dyn OperationStore>) -> Arc<dyn OperationStore> {
    match args.mutation {
        Some(mutations::Mutation::TakesNotFenced) => {
            Arc::new(mutations::Bent::new(store, mutations::TakesNotFenced))
        }
        Some(mutations::Mutation::AttemptUnguarded) => {
            Arc::new(mutations::Bent::new(store, mutations::DoorSeesFailed))
        }
        _ => store,
    }
}

/// The engine's `store` with its dispute writes leaving the charge alone if the run simulates
/// `dispute-unreserved-refund`.
fn dispute_store_bug(
    args: &SimulateArgs,
    store: Arc<dyn OperationStore>,
) -> Arc<dyn OperationStore> {
    match args.mutation {
        Some(mutations::Mutation::DisputeUnreservedRefund) => {
            Arc::new(mutations::Bent::new(store, mutations::DisputeLeavesCharge))
        }
        _ => store,
    }
}

/// `store` with the refund mutation that lives at the door's store (`door`) or the charge
/// function's, if the run simulates one.
fn refund_store_bug(
    args: &SimulateArgs,
    world: &World,
    store: Arc<dyn OperationStore>,
    door: bool,
) -> Result<Arc<dyn OperationStore>, BoxError> {
    use mutations::{Mutation, RefundStoreBug};
    let bug = match (args.mutation, door) {
        (Some(Mutation::RefundDedupByAmount), true) => RefundStoreBug::DedupByAmount,
        (Some(Mutation::RefundLeftFromStripe), true) => match world.stripe.local_sim() {
            Some(sim) => RefundStoreBug::LeftFromStripe(sim.clone()),
            None => return Err("refund-left-from-stripe needs Stripe in this process".into()),
        },
        (Some(Mutation::RefundNotReleased), false) => RefundStoreBug::NoRelease,
        _ => return Ok(store),
    };
    Ok(Arc::new(mutations::RefundStore { inner: store, bug }))
}

/// Stripe's events, from the simulator in this process, to the real events function on the
/// same faulty store and gateway as the charge function (none from a separate simulator).
fn events_function(
    args: &SimulateArgs,
    world: &World,
    charge: &EngineDeps,
) -> Result<Option<Arc<webhooks::Webhooks>>, BoxError> {
    let mode = match args.events_source() {
        EventsSource::Eventbridge => stripe_sim::DeliveryMode::EventBridge,
        EventsSource::Webhook => stripe_sim::DeliveryMode::Webhook,
        EventsSource::None => return Ok(None),
    };
    let Some(sim) = world.stripe.local_sim() else {
        return Ok(None);
    };
    let mut delivery_faults = webhooks::default_faults(!args.no_faults);
    if let Some(hours) = args.events_outage_hours {
        let from = driver::virtual_start();
        delivery_faults.outage_ms = Some((
            from.as_millis(),
            from.plus(Duration::from_secs(hours * 3600)).as_millis(),
        ));
    }
    let setup = webhooks::Setup {
        mode,
        delivery_faults,
        faults: world.faults.clone(),
        trust_payload: args.mutation == Some(mutations::Mutation::TrustEventPayload),
        trust_dispute_payload: args.mutation == Some(mutations::Mutation::TrustDisputeEvent),
        metrics: dashboard::taped(
            Arc::new(charge_once::telemetry::DiscardMetrics),
            &world.tape,
        ),
    };
    let events = webhooks::Webhooks::new(sim.clone(), setup, charge.clone(), world.trace.clone())?;
    Ok(Some(Arc::new(events)))
}

/// The reconciler on the faulty ports, paced (unless `--no-pacing`), with the page mutations.
fn reconciler_deps(
    args: &SimulateArgs,
    ports: &FaultyPorts<'_>,
    charge: &EngineDeps,
    pacing: &Pacing,
    dispute_watch: &Arc<dispute_watch::Watch>,
) -> ReconcilerDeps {
    use charge_core::refund::watch::RefundWatch;
    use charge_once::dispute_watch::DisputeWatchDeps;
    use charge_once::refund_watch::RefundWatchDeps;
    use mutations::{EditedPages, Mutation};
    let paced = if args.no_pacing {
        charge.clone()
    } else {
        EngineDeps {
            gateway: gateway::FunctionRequests::wrap(pacing.reconciler(charge.gateway.clone())),
            ..charge.clone()
        }
    };
    // Its reads of open disputes noted, to tell which of them had to page.
    let paced = EngineDeps {
        gateway: Arc::new(dispute_watch::DisputeReads {
            inner: paced.gateway.clone(),
            watch: dispute_watch.clone(),
            clock: ports.world.clock.clone(),
            refuse: args.mutation == Some(Mutation::NoDisputeReread),
        }),
        ..paced
    };
    let store: Option<Arc<dyn OperationStore>> = match args.mutation {
        Some(Mutation::ReconcilerSkipsPending) => {
            Some(Arc::new(EditedPages::skip_pending(ports.store.clone())))
        }
        Some(Mutation::UnreadableFailsPage) => Some(Arc::new(EditedPages::fail_on_unreadable(
            ports.store.clone(),
        ))),
        _ => None,
    };
    ReconcilerDeps {
        charge: match store {
            Some(inner) => EngineDeps {
                store: Arc::new(auth_watch::PageWatch {
                    inner,
                    pages: ports.world.pages.clone(),
                }),
                ..paced
            },
            None => paced,
        },
        queue: ports.sender(false),
        page_size: 100,
        charge_throughput: pacing.budget().charge_throughput(),
        // The template's default watch; the `no-refund-watch` mutation leaves it out.
        // The template's default watch; the `no-dispute-watch` mutation leaves it out.
        dispute_watch: (args.mutation != Some(Mutation::NoDisputeWatch)).then(|| {
            DisputeWatchDeps {
                cursor: ports.world.backing.dispute_cursor.clone(),
                sleeper: pacing.sleeper(),
            }
        }),
        refund_watch: (args.mutation != Some(Mutation::NoRefundWatch)).then(|| RefundWatchDeps {
            watch: RefundWatch::DEFAULT,
            cursor: ports.world.backing.watch_cursor.clone(),
        }),
    }
}

/// The charge function as main.rs wires it: one environment's share of the budget, refusals
/// back in seconds through the queue; `--no-pacing` takes neither, so a refused message waits
/// the queue's visibility timeout.
fn charge_function(
    args: &SimulateArgs,
    world: &World,
    charge: EngineDeps,
    pacing: &Pacing,
    dead_letters: &Arc<charge_once::memory::MemoryDeadLetters>,
    counts: &Arc<LoopCounts>,
) -> charge::handler::ChargeFunction {
    let charge = EngineDeps {
        gateway: gateway::FunctionRequests::wrap(charge.gateway),
        ..charge
    };
    charge::handler::ChargeFunction {
        charge,
        dead_letters: dead_letters.clone(),
        visibility: if args.no_pacing {
            Arc::new(NoVisibilityChange)
        } else {
            world.backing.visibility.clone()
        },
        budget: (!args.no_pacing).then(|| pacing.charge(args.charge_burst)),
        metrics: dashboard::taped(Arc::new(driver::ChargeMetrics(counts.clone())), &world.tape),
    }
}

/// What the run left, read once it is over and before the judge reads the records.
struct AtEnd {
    counts: BackendCounts,
    stripe_requests: stripe::StripeCallCounts,
    /// Faults the Stripe simulator injected, by its own names.
    stripe_injected: BTreeMap<String, u64>,
    ledger: Box<dyn stripe::Ledger>,
}

impl AtEnd {
    async fn read(world: &World) -> Result<Self, BoxError> {
        let counts = (world.backing.counters)();
        let (stripe_requests, stripe_injected) = world.stripe.snapshot().await?;
        let ledger = world.stripe.ledger().await?;
        Ok(Self {
            counts,
            stripe_requests,
            stripe_injected,
            ledger,
        })
    }
}

/// The cards the seed planned (faults fixed per order rather than injected along the way).
#[derive(Default)]
struct Planned {
    decline: u64,
    processing: u64,
    stuck: u64,
    refund_pending: u64,
    refund_fails_later: u64,
}

/// The world with the functions wired into it: what driving, judging and counting share.
struct Wired {
    world: World,
    pipeline: Pipeline,
    counts: Arc<LoopCounts>,
}

impl Wired {
    /// Judges every order's record, read by key after the run, against Stripe's ledger, and gives
    /// the verdict.
    async fn judge(
        &self,
        args: &SimulateArgs,
        at_end: &AtEnd,
    ) -> Result<(Report, Planned), BoxError> {
        let (world, pipeline, counts) = (&self.world, &self.pipeline, &self.counts);
        let mut report = Report {
            seed: args.seed,
            backend: format!("{:?}", args.backend).to_lowercase(),
            stale_lease_writes: at_end.counts.stale_lease_writes,
            foreign_dedup_ids: at_end.counts.foreign_dedup_ids,
            failed_ticks: counts.failed_ticks.load(Ordering::Relaxed),
            first_failed_tick: counts
                .first_failed_tick
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            unreadable_counted: counts.unreadable_counted.load(Ordering::Relaxed),
            customer_confirms_paid: pipeline.confirms.paid.load(Ordering::Relaxed),
            customer_confirms_refused: pipeline.confirms.refused.load(Ordering::Relaxed),
            mutation: args.mutation.map(|m| m.name()),
            ..Report::default()
        };
        // The orders whose record a forged event moved (see `webhooks::Forged`).
        let forged = pipeline
            .webhooks
            .as_ref()
            .map(|w| w.forged())
            .unwrap_or_default();
        // The memory store says which operations are an order's record now (no set of them kept).
        let ours = world
            .backing
            .sim_store
            .clone()
            .map(|s| -> report::IsOurs<'_> {
                Box::new(move |op| {
                    charge_core::domain::OperationId::parse(op).is_ok_and(|id| s.is_current(&id))
                })
            });
        let refund_ledger = (args.refund_rate > 0.0)
            .then(|| {
                world
                    .stripe
                    .local_sim()
                    .map(|s| report::RefundLedger::new(s.refund_ledger()))
            })
            .flatten();
        let dead_lettered_refunds = pipeline
            .webhooks
            .as_ref()
            .map(|w| w.dead_lettered_refunds())
            .unwrap_or_default();
        let mut judge = report::Judge::new(at_end.ledger.as_ref(), forged.moved, ours)
            .with_refunds(refund_ledger)
            .with_dead_lettered_refunds(dead_lettered_refunds);
        if let Some(sim) = world.stripe.local_sim() {
            // The judge reads each authorization's intent as it stands: no fault from here on.
            sim.set_faults(stripe_sim::FaultConfig::default());
        }
        let planned = judge_orders(args, world, pipeline, &mut judge, &mut report).await?;
        note_refunds(&mut report, args, world, pipeline);
        report.refunds.watch_reads = counts.refunds_watched.load(Ordering::Relaxed);
        report.refunds.failed_late_by_watch =
            counts.refund_late_failures_paged.load(Ordering::Relaxed);
        note_authorizations(&mut report, args, world, pipeline, counts);
        // Named after the run's other invariants: a dispute left unsettled is often the
        // symptom of one of theirs (every tick failing, say).
        let dispute_violation = judge_disputes(&mut report, args, world, pipeline).await?;
        let retry_violation = judge_retries(&mut report, args, world, pipeline).await?;
        note_events(&mut report, pipeline, forged.mismatches);
        if let Some(s) = &world.backing.sim_store {
            note_settling(&mut report, s, &world.faults, args);
        }
        let audits = &world.backing.audits;
        let publishers = world.backing.sim_store.as_ref().map(|o| o.outcome_events());
        report.outcome_events = publishers.as_ref().map(|(n, _)| *n);
        judge.finish(
            &mut report,
            audits,
            (audits("stale"), audits("dedup")),
            publishers.as_ref().map(|(_, ops)| ops.as_slice()),
        );
        if report.first_violation.is_none() {
            report.first_violation = dispute_violation.or(retry_violation);
        }
        self.drift_audit(args, &mut report).await?;
        Ok((report, planned))
    }

    /// The production audit as the second judge ([`drift`]), after the ledger judge: the drift
    /// only it can see injected (unless `--no-faults`), then every 24 h window audited. Runs on
    /// the memory store with Stripe in this process (what it edits by hand and refunds in the
    /// dashboard lives there).
    async fn drift_audit(&self, args: &SimulateArgs, report: &mut Report) -> Result<(), BoxError> {
        let world = &self.world;
        let (Some(store), Some(sim)) = (&world.backing.sim_store, world.stripe.local_sim()) else {
            return Ok(());
        };
        let orders: Vec<String> = (0..args.orders)
            .map(|i| format!("sim-{}-{i:06}", args.seed))
            .collect();
        let mut injected = if args.no_faults {
            Vec::new()
        } else {
            drift::inject(store, sim, world.gateway.as_ref(), &orders, args.seed).await?
        };
        // Late refund failures left in the events DLQ are drift the audit must report.
        injected.extend(report.refunds.failed_late_in_events_dlq.iter().map(|id| {
            drift::Injected {
                what: drift::LATE_FAILURE_IN_EVENTS_DLQ,
                class: charge_core::audit::DriftClass::StatusDiffers,
                names: id.clone(),
            }
        }));
        let metrics = dashboard::taped(
            Arc::new(charge_once::telemetry::DiscardMetrics),
            &world.tape,
        );
        let audit_gateway = gateway::FunctionRequests::wrap(world.gateway.clone());
        let reports = drift::audit_windows(
            store.as_ref(),
            store.as_ref(),
            audit_gateway.as_ref(),
            &world.clock,
            driver::virtual_start(),
            metrics.as_ref(),
        )
        .await;
        if let (Some(path), Some(tape)) = (&args.dashboard, &world.tape) {
            let widgets = dashboard::template_widgets(include_str!("../../../template.yaml"))?;
            let title = format!(
                "The operator's dashboard (template.yaml OperatorDashboard), drawn from `simulate --seed {} --orders {}`{}: {} series",
                args.seed,
                args.orders,
                if args.no_faults { " --no-faults" } else { ", every fault on" },
                tape.len()
            );
            let svg = dashboard::render(
                &widgets,
                tape,
                driver::virtual_start().as_millis(),
                charge_core::time::Clock::now(&world.clock).as_millis(),
                &title,
            );
            std::fs::write(path, svg).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let summary = drift::judge(&reports, injected);
        if !summary.holds() && report.first_violation.is_none() {
            report.first_violation = Some(match &summary.first_unexpected {
                Some(first) => format!("audit drift: {first}"),
                None => format!(
                    "audit: {} injected drift missed, {} unexplained, complete {}",
                    summary.missed(),
                    summary.unexplained,
                    summary.complete
                ),
            });
        }
        report.invariants_hold &= summary.holds();
        report.audit = Some(summary);
        Ok(())
    }

    /// What the run cost and met: faults injected, the loop's counts, requests, the decision log.
    fn count(&self, report: &mut Report, args: &SimulateArgs, at_end: AtEnd, planned: Planned) {
        let (world, pipeline, counts) = (&self.world, &self.pipeline, &self.counts);
        report.faults_injected = faults_injected(world, &at_end, planned);
        report.poison_messages = pipeline.dead_letters.letters().len() as u64;
        report.loop_counts = driver::count_map(counts)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let (backend, stripe) = (&at_end.counts, &at_end.stripe_requests);
        report.requests_total = BTreeMap::from([
            ("dynamodb_reads".to_owned(), backend.dynamodb_reads),
            ("dynamodb_writes".to_owned(), backend.dynamodb_writes),
            ("sqs_sends".to_owned(), backend.sqs_sends),
            (
                "stripe_calls".to_owned(),
                stripe.create + stripe.retrieve + stripe.search + stripe.cancel,
            ),
            ("stripe_creates".to_owned(), stripe.create),
            ("stripe_cancels".to_owned(), stripe.cancel),
        ]);
        let n = args.orders.max(1) as f64;
        report.requests_per_charge = report
            .requests_total
            .iter()
            .map(|(k, v)| (k.clone(), *v as f64 / n))
            .collect();
        report.capacity_429s = stripe.capacity_429s;
        report.stripe_capacity = world.stripe.capacity_found().map(str::to_owned);
        if stripe.capacity_429s * 20 > args.orders {
            report.flagged = Some(format!(
                "Stripe refused {} calls for capacity ({:.2} per order), more than one in twenty \
                 orders: the calls went over the limits of the Stripe this run talks to, so the \
                 counts per charge and the paths the orders took are not the system's at its \
                 budget",
                stripe.capacity_429s,
                stripe.capacity_429s as f64 / n
            ));
        }
        report.virtual_hours = driver::elapsed_virtual(counts).as_secs_f64() / 3600.0;
        report.deterministic = args.deterministic();
        report.trace_events = world.trace.events();
        report.trace_hash = world.trace.hash_hex();
    }
}

/// Each order of the seed, planned again, and its record (and its refunds') as the store holds
/// it now.
async fn judge_orders(
    args: &SimulateArgs,
    world: &World,
    pipeline: &Pipeline,
    judge: &mut report::Judge<'_>,
    report: &mut Report,
) -> Result<Planned, BoxError> {
    let mut planned = Planned::default();
    for i in 0..args.orders {
        let order = driver::plan_order_with(i, args.seed, &world.faults, args.auth_rate);
        planned.decline += u64::from(order.payment_method == "pm_card_chargeDeclined");
        planned.stuck += u64::from(order.payment_method == "pm_card_sim_requiresAction");
        planned.processing += u64::from(order.payment_method == "pm_card_processing_succeeds");
        planned.refund_pending += u64::from(order.payment_method == "pm_card_pendingRefund");
        planned.refund_fails_later += u64::from(order.payment_method == "pm_card_refundFail");
        let key = OperationKey::charge(OrderId::parse(&order.order_id)?);
        let record = match world.backing.store.get(&key).await {
            Ok(record) => record,
            Err(e) if e.unreadable.is_some() => {
                judge.unreadable(report, &order, &e);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let published = match (&world.backing.sim_store, &record) {
            (Some(outbox), Some(op)) => Some(outbox.published(&op.operation_id)),
            _ => None,
        };
        judge.order(report, &order, record.as_ref(), published);
        if judge.collects_ours() && record.as_ref().is_some_and(|r| r.latest_attempt() > 1) {
            // The store cannot say which operations are the orders' records: the later attempts
            // are, or their intents would be judged orphans. (The memory store says so itself,
            // and its runs read nothing more here.)
            let order_id = OrderId::parse(&order.order_id)?;
            for attempt in world
                .backing
                .store
                .attempts_of(&order_id)
                .await?
                .iter()
                .skip(1)
            {
                judge.later_attempt(attempt);
            }
        }
        if record.as_ref().is_some_and(|r| r.latest_attempt() > 1)
            && pipeline.retries.kind_of(&order.order_id).is_none()
        {
            // Charged again without a retry planned: its checkout sent again, identical, after
            // it was declined (a late duplicate delivery) starts the next attempt.
            report.retries.charged_again_unplanned += 1;
        }
        // What refunds, captures and cancels act on: the order's latest attempt (the head
        // itself unless the order was charged again).
        let latest = match &record {
            Some(head) if head.latest_attempt() > 1 => {
                world
                    .backing
                    .store
                    .charge_of(&OrderId::parse(&order.order_id)?)
                    .await?
            }
            _ => record.clone(),
        };
        judge_authorization(world, report, &order, latest.as_ref()).await?;
        judge_refunds(
            args,
            world,
            pipeline,
            judge,
            report,
            (i, &order),
            latest.as_ref(),
        )
        .await?;
    }
    Ok(planned)
}

/// The refunds of order `i` (if it was asked any): each refund id it was asked, read by key,
/// and the refund asked while its dispute was open; its disputes' reservations beside them.
async fn judge_refunds(
    args: &SimulateArgs,
    world: &World,
    pipeline: &Pipeline,
    judge: &mut report::Judge<'_>,
    report: &mut Report,
    (i, order): (u64, &driver::Order),
    charge: Option<&charge_core::operation::Operation>,
) -> Result<(), BoxError> {
    let charged = driver::charged(i);
    let plan = refund_asks::plan(args.seed, i, &order.order_id, charged, args.refund_rate)
        .filter(|_| order.authorization.is_none());
    let disputed = pipeline.disputes.of(&order.order_id);
    let during = disputed.as_ref().is_some_and(|d| d.refund_during);
    if plan.is_none() && !during {
        return Ok(());
    }
    let order_id = OrderId::parse(&order.order_id)?;
    let mut refund_ids = plan.map(|p| p.refund_ids()).unwrap_or_default();
    if during {
        refund_ids.push(dispute_asks::REFUND_ID.to_owned());
    }
    let mut records = Vec::new();
    for refund_id in refund_ids {
        let key = OperationKey::refund(
            order_id.clone(),
            charge_core::domain::RefundId::parse(&refund_id)?,
        );
        records.extend(world.backing.store.get(&key).await?);
    }
    let mut disputes_reserved = 0;
    if let Some(d) = &disputed {
        let key = OperationKey::of_kind(
            order_id.clone(),
            charge_core::domain::OperationKind::Dispute(charge_core::domain::DisputeId::parse(
                &d.dispute_id,
            )?),
        );
        if let Some(record) = world.backing.store.get(&key).await? {
            if record.params.dispute_state().is_some_and(|s| s.reserved) {
                disputes_reserved += record.params.amount().minor_units();
            }
        }
    }
    let published = world.backing.sim_store.as_ref().map(|s| {
        records
            .iter()
            .map(|r| s.published(&r.operation_id))
            .collect()
    });
    let accepted = pipeline.refund_answers.accepted_of(&order.order_id);
    let of = report::OrderRefunds {
        charge,
        records: &records,
        accepted: &accepted,
        published,
        disputes_reserved,
    };
    judge.refunds(report, order, of);
    Ok(())
}

/// An authorized order (if `order` is one): its charge, its capture's and cancel's records, and
/// the intents Stripe holds for the charge, read now; its first page as the functions wrote it.
async fn judge_authorization(
    world: &World,
    report: &mut Report,
    order: &driver::Order,
    charge: Option<&charge_core::operation::Operation>,
) -> Result<(), BoxError> {
    let Some(fate) = order.authorization else {
        return Ok(());
    };
    let order_id = OrderId::parse(&order.order_id)?;
    let take = |kind| OperationKey::of_kind(order_id.clone(), kind);
    let capture = world
        .backing
        .store
        .get(&take(charge_core::domain::OperationKind::FIRST_CAPTURE))
        .await?;
    let cancel = world
        .backing
        .store
        .get(&take(charge_core::domain::OperationKind::Cancel))
        .await?;
    let intents = charge
        .map(|op| intents_of(world, &op.operation_id.to_string()))
        .unwrap_or_default();
    let published = match (&world.backing.sim_store, charge) {
        (Some(outbox), Some(op)) => Some(outbox.published(&op.operation_id)),
        _ => None,
    };
    let of = report::OrderAuthorization {
        fate,
        charge,
        capture: capture.as_ref(),
        cancel: cancel.as_ref(),
        intents: &intents,
        first_page_ms: world.pages.first(&order.order_id),
        published,
        at_stripe: world.stripe.local_sim().is_some(),
    };
    report::judge_authorization(report, order, &of);
    Ok(())
}

/// The PaymentIntents Stripe holds for `operation_id`, each read as Stripe answers it now
/// (Stripe in this process only: none otherwise).
fn intents_of(world: &World, operation_id: &str) -> Vec<report::IntentAtStripe> {
    let Some(sim) = world.stripe.local_sim() else {
        return Vec::new();
    };
    let mut ids = Vec::new();
    sim.each_ledger_row(Some(("operation_id", operation_id)), &mut |row| {
        ids.push(row.id.to_owned())
    });
    ids.iter()
        .filter_map(|id| report::IntentAtStripe::parse(&sim.retrieve_in_process(id).body))
        .collect()
}

/// The door's answers for captures and cancels, the pages, and what the take calls cost.
fn note_authorizations(
    report: &mut Report,
    args: &SimulateArgs,
    world: &World,
    pipeline: &Pipeline,
    counts: &LoopCounts,
) {
    let a = &mut report.authorizations;
    let answers = &pipeline.take_answers;
    a.rate = args.auth_rate;
    a.asked = answers.asked.load(Ordering::Relaxed);
    a.answers = answers.counts();
    a.accepted = answers.accepted_count();
    a.answers_changed = answers.answer_changed.load(Ordering::Relaxed);
    a.paged_orders = world.pages.orders();
    a.page_writes = world.pages.writes.load(Ordering::Relaxed);
    a.pages_metric_charge = counts.pages_charge.load(Ordering::Relaxed);
    a.pages_metric_reconciler = counts.pages_reconciler.load(Ordering::Relaxed);
    a.stripe_capture_calls = world.take_calls.captures.load(Ordering::Relaxed);
    a.stripe_cancel_calls = world.take_calls.cancels.load(Ordering::Relaxed);
    a.stripe_calls_per_capture = a.stripe_capture_calls as f64 / a.capture_ops.max(1) as f64;
    if a.answers_changed > 0 && report.first_violation.is_none() {
        report.first_violation = Some(format!(
            "{} capture or cancel answered with two operations",
            a.answers_changed
        ));
    }
}

/// The door's answers, what refund calls met at Stripe, and the audits that count over-refunds
/// as they happen (a write reserving past the charge, a create Stripe refused as over).
fn note_refunds(report: &mut Report, args: &SimulateArgs, world: &World, pipeline: &Pipeline) {
    let r = &mut report.refunds;
    let answers = &pipeline.refund_answers;
    r.rate = args.refund_rate;
    r.asked = answers.asked.load(Ordering::Relaxed);
    r.answers = answers.counts();
    r.accepted = answers.accepted_count();
    let audit = &world.refund_audit;
    r.stripe_calls = audit.calls.load(Ordering::Relaxed);
    r.stripe_errors = audit
        .errors
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(k, n)| ((*k).to_owned(), *n))
        .collect();
    let changed = answers.answer_changed.load(Ordering::Relaxed);
    r.double_refunds += changed;
    r.refused_over = audit.refused_over.load(Ordering::Relaxed);
    let first_refused = audit
        .first_refused_over
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let (over_writes, first_over) = world.backing.sim_store.as_ref().map_or((0, None), |s| {
        let first = s
            .first_over_reserved
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        (s.over_reserved_writes.load(Ordering::Relaxed), first)
    });
    r.over_reserved_writes = over_writes;
    r.over_refunds += over_writes + r.refused_over;
    if report.first_violation.is_none() {
        report.first_violation = match (first_over, first_refused, changed) {
            (Some(order), _, _) => Some(format!(
                "over-refund: a write reserved past the charge: order {order}"
            )),
            (None, Some(order), _) => Some(format!(
                "over-refund: Stripe refused a refund as over what is left: order {order}"
            )),
            (None, None, n) if n > 0 => Some(format!(
                "double refund: {n} refund id(s) answered with two operations"
            )),
            _ => None,
        };
    }
}

/// The disputes the bank opened, each against the dispute Stripe holds and our records
/// ([`report::DisputeReport`]'s invariants); the first broken, with its order.
async fn judge_retries(
    report: &mut Report,
    args: &SimulateArgs,
    world: &World,
    pipeline: &Pipeline,
) -> Result<Option<String>, BoxError> {
    use charge_core::operation::OperationStatus;
    let r = &mut report.retries;
    r.rate = args.retry_rate;
    let book = &pipeline.retries;
    r.planned = lock(&book.planned)
        .iter()
        .map(|(k, n)| ((*k).to_owned(), *n))
        .collect();
    r.answers = book.counts();
    r.started = book.count(&book.started);
    r.races_one_started = book.count(&book.races_one_started);
    r.asked_again = book.count(&book.asked_again);
    r.gave_up = book.count(&book.gave_up);
    let mut first: Option<String> = None;
    let broke = |first: &mut Option<String>, what: &str, order: &str| {
        first.get_or_insert_with(|| format!("{what}: order {order}"));
    };
    r.two_attempts_at_once = book.count(&book.races_both_started);
    if let Some(order) = book.first_race_both_started() {
        broke(&mut first, "two attempts at once", &order);
    }
    let sim = world.stripe.local_sim();
    for (order_id, _) in book.orders() {
        let order = OrderId::parse(&order_id)?;
        let attempts = world.backing.store.attempts_of(&order).await?;
        *r.orders_by_attempts
            .entry(attempts.len() as u32)
            .or_default() += 1;
        for a in &attempts {
            *r.attempts_by_status
                .entry(a.status.as_str().to_owned())
                .or_default() += 1;
        }
        let paid = attempts
            .iter()
            .filter(|a| a.status == OperationStatus::Succeeded)
            .count();
        r.paid_by_a_later_attempt += u64::from(
            attempts
                .iter()
                .skip(1)
                .any(|a| a.status == OperationStatus::Succeeded),
        );
        // Each attempt created only once the one before it was final `failed`.
        let unsettled_before = attempts.windows(2).any(|w| {
            w[0].status != OperationStatus::Failed
                || w[0]
                    .settled_at
                    .is_none_or(|settled| w[1].created_at < settled)
        });
        if unsettled_before {
            r.attempt_while_unsettled += 1;
            broke(&mut first, "attempt while another unsettled", &order_id);
        }
        // Stripe's intents of the order, by id: (status, operation id).
        let mut intents: BTreeMap<String, (String, Option<String>)> = BTreeMap::new();
        if let Some(sim) = sim {
            sim.each_ledger_row(Some(("order_id", &order_id)), &mut |row| {
                intents.insert(
                    row.id.to_owned(),
                    (row.status.to_owned(), row.operation_id.map(str::to_owned)),
                );
            });
        }
        for (status, _) in intents.values() {
            *r.intents_at_stripe.entry(status.clone()).or_default() += 1;
        }
        let paid_at_stripe = intents.values().filter(|(s, _)| s == "succeeded").count();
        if paid > 1 || paid_at_stripe > 1 {
            r.paid_twice += 1;
            broke(&mut first, "paid twice", &order_id);
        }
        if sim.is_none() {
            continue;
        }
        // Every failed attempt's intent (named on the record, or created under its operation
        // id) canceled at Stripe.
        let declined_open = attempts
            .iter()
            .filter(|a| a.status == OperationStatus::Failed)
            .any(|a| {
                let op = a.operation_id.to_string();
                intents.iter().any(|(id, (status, of))| {
                    let its = a.external_id.as_ref().is_some_and(|pi| pi.as_str() == id)
                        || of.as_deref() == Some(op.as_str());
                    its && status != "canceled"
                })
            });
        if declined_open {
            r.declined_not_canceled += 1;
            broke(&mut first, "declined intent not canceled", &order_id);
        }
    }
    Ok(first)
}

/// A lock held even if a holder panicked (the counts stay readable for the report).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn judge_disputes(
    report: &mut Report,
    args: &SimulateArgs,
    world: &World,
    pipeline: &Pipeline,
) -> Result<Option<String>, BoxError> {
    use charge_core::domain::{DisputeId, OperationKind, RefundId};
    use charge_core::operation::OperationStatus;
    let d = &mut report.disputes;
    d.rate = args.dispute_rate;
    let book = &pipeline.disputes;
    d.not_disputable = book.count(&book.not_disputable);
    d.answers = book.count(&book.answers);
    d.answers_refused = book.count(&book.answers_refused);
    d.refunds_refused_disputed = pipeline
        .refund_answers
        .counts()
        .get("409 disputed")
        .copied()
        .unwrap_or(0);
    let watch = &pipeline.dispute_watch;
    d.reconciler_reads = watch.reads.load(Ordering::Relaxed);
    d.reconciler_reads_refused = watch.refused.load(Ordering::Relaxed);
    d.watch_rate_limited = watch.watch_rate_limited.load(Ordering::Relaxed);
    d.watch_retried = watch.watch_retried.load(Ordering::Relaxed);
    d.watch_lag_at_end_secs = watch.watch_lag_secs.load(Ordering::Relaxed);
    d.watch_catch_up_ticks = watch.catch_up_ticks.load(Ordering::Relaxed);
    d.had_to_page = watch.had_to_page.load(Ordering::Relaxed);
    d.had_to_page_passed = watch.had_to_page_passed.load(Ordering::Relaxed);
    d.paged_near = watch.paged_near.load(Ordering::Relaxed);
    d.paged_passed = watch.paged_passed.load(Ordering::Relaxed);
    d.pages_short = watch.deficit.load(Ordering::Relaxed);
    d.forged_events = pipeline
        .webhooks
        .as_ref()
        .map_or(0, |w| w.forged().disputes);
    let Some(sim) = world.stripe.local_sim() else {
        return Ok(None);
    };
    let ledger: BTreeMap<String, stripe_sim::DisputeEntry> = sim
        .dispute_ledger()
        .into_iter()
        .map(|e| (e.id.clone(), e))
        .collect();
    let now = charge_core::time::Clock::now(&world.clock).as_millis();
    let mut first: Option<String> = None;
    let broke = |first: &mut Option<String>, what: &str, order: &str| {
        first.get_or_insert_with(|| format!("{what}: order {order}"));
    };
    for (order_id, opened) in book.opened() {
        d.opened += 1;
        *d.fates.entry(opened.fate.name().to_owned()).or_default() += 1;
        d.on_partly_refunded += u64::from(opened.amount < opened.charged);
        let Some(at_stripe) = ledger.get(&opened.dispute_id) else {
            continue;
        };
        *d.at_stripe.entry(at_stripe.status.clone()).or_default() += 1;
        let order = OrderId::parse(&order_id)?;
        // Money at Stripe: refunded and lost together within what was charged.
        let lost: i64 = ledger
            .values()
            .filter(|e| e.payment_intent == opened.payment_intent && e.status == "lost")
            .map(|e| e.amount)
            .sum();
        let refunded = sim.amount_refunded(&opened.payment_intent).unwrap_or(0);
        if refunded + lost > opened.charged {
            d.over_returned_at_stripe += 1;
            broke(&mut first, "over-returned at stripe", &order_id);
        }
        // The deadline: paged before `due_by` if nobody answered it (an inquiry whose charge
        // was refunded in full closed then, as Stripe closes it: it never reached `due_by`).
        let resolved_by_refund = opened.fate.inquiry() && refunded >= opened.charged;
        let key = OperationKey::of_kind(
            order.clone(),
            OperationKind::Dispute(DisputeId::parse(&opened.dispute_id)?),
        );
        let record = world.backing.store.get(&key).await?;
        if opened.fate.reaches_due_by() && !resolved_by_refund && at_stripe.due_by_ms <= now {
            d.reached_due_by += 1;
            let near = watch
                .first_near(&opened.dispute_id)
                .is_some_and(|t| t < at_stripe.due_by_ms);
            // A dispute whose events were all lost until its window opened was not ours to page:
            // the daily audit finds it (`dispute_unrecorded`, AuditDisputeUnrecordedAlarm).
            let window = charge_core::dispute::deadline::DEFAULT_PAGE_WINDOW.as_millis() as i64;
            let found_late = record
                .as_ref()
                .is_some_and(|r| r.created_at.as_millis() >= at_stripe.due_by_ms - window);
            // Past `due_by`, still needing a response until Stripe closed it: paged passed.
            let passed = watch.first_passed(&opened.dispute_id).is_some();
            if !near && found_late {
                d.recorded_too_late += 1;
            } else if !near {
                d.unpaged_deadlines += 1;
                broke(&mut first, "unpaged deadline", &order_id);
            } else if !passed {
                d.unpaged_deadlines += 1;
                broke(&mut first, "unpaged deadline (passed)", &order_id);
            }
        }
        // A dispute recorded without its reservation (it did not fit beside the order's
        // refunds): counted, and judged as every other (never in review, so read again).
        d.unreserved += u64::from(record.as_ref().is_some_and(|r| {
            r.last_error
                .as_deref()
                .is_some_and(|e| e.starts_with("dispute_unreserved"))
        }));
        // Our records.
        let Some(record) = record else {
            d.unrecorded += 1;
            broke(&mut first, "dispute unrecorded", &order_id);
            continue;
        };
        *d.records
            .entry(record.status.as_str().to_owned())
            .or_default() += 1;
        let state = record.params.dispute_state();
        let amount = record.params.dispute().map(|p| p.amount.minor_units());
        let settled_as = match at_stripe.status.as_str() {
            "lost" => Some(OperationStatus::Succeeded),
            "won" | "warning_closed" => Some(OperationStatus::Failed),
            _ => None,
        };
        let agrees = state.is_some_and(|s| s.status.as_str() == at_stripe.status)
            && amount == Some(at_stripe.amount)
            && match settled_as {
                Some(status) => record.status == status,
                None => !record.status.is_settled(),
            };
        if !agrees {
            d.mismatches += 1;
            broke(&mut first, "dispute mismatch", &order_id);
        }
        // Every step's event: opened (first recorded open), funds withdrawn (an inquiry
        // recorded open that Stripe turned into a chargeback), and its end once settled.
        if let Some(sim_store) = world.backing.sim_store.as_ref() {
            use charge_core::outbox::Outcome;
            let published = sim_store.published(&record.operation_id);
            let (first_open, first_inquiry) = sim_store.dispute_first_written(&record.operation_id);
            let withdrew = !at_stripe.status.starts_with("warning_");
            let ended = match record.status {
                OperationStatus::Succeeded => Some(Outcome::Succeeded),
                OperationStatus::Failed => Some(Outcome::Failed),
                _ => None,
            };
            let due = [
                first_open.then_some(Outcome::DisputeOpened),
                (first_inquiry && withdrew).then_some(Outcome::DisputeFundsWithdrawn),
                ended,
            ];
            if due.into_iter().flatten().any(|o| !published.contains(o)) {
                d.missing_events += 1;
                broke(&mut first, "missing dispute event", &order_id);
            }
        }
        // Money in our records: the charge's reservation, and its refunds and lost disputes.
        let charge = world.backing.store.charge_of(&order).await?;
        let reserved = charge
            .as_ref()
            .and_then(|c| c.params.charge_state())
            .map_or(0, |c| c.refund_reserved);
        let mut returned = 0;
        let refund_ids = refund_asks::plan(
            args.seed,
            driver::index_of(&order_id, args.seed).unwrap_or_default(),
            &order_id,
            opened.charged,
            args.refund_rate,
        )
        .map(|p| p.refund_ids())
        .unwrap_or_default();
        for id in refund_ids
            .iter()
            .map(String::as_str)
            .chain([dispute_asks::REFUND_ID])
        {
            let key = OperationKey::refund(order.clone(), RefundId::parse(id)?);
            if let Some(r) = world.backing.store.get(&key).await? {
                if r.status != OperationStatus::Failed {
                    returned += r.params.amount().minor_units();
                }
            }
        }
        // A lost dispute recorded without its reservation (it did not fit: flagged
        // `dispute_unreserved`) is returned money the charge does not hold, by design.
        let mut held = returned;
        if record.status == OperationStatus::Succeeded {
            returned += amount.unwrap_or(0);
            if state.is_some_and(|s| s.reserved) {
                held += amount.unwrap_or(0);
            }
        }
        // Past what was taken, or past what the charge's reservation holds: the store's
        // `refunded + disputed ≤ taken` no longer guards that money, and the next refund the
        // door accepts pays the customer a second time.
        if reserved > opened.charged || returned > opened.charged || held > reserved {
            d.over_returned_in_records += 1;
            broke(&mut first, "over-returned in records", &order_id);
        }
    }
    Ok(first)
}

/// Where Stripe's events came from and what the events function did with them.
fn note_events(report: &mut Report, pipeline: &Pipeline, forged_mismatches: u64) {
    report.events = pipeline
        .webhooks
        .as_ref()
        .map_or("none", |w| match w.mode() {
            stripe_sim::DeliveryMode::EventBridge => EventsSource::Eventbridge.name(),
            stripe_sim::DeliveryMode::Webhook => EventsSource::Webhook.name(),
        })
        .to_owned();
    report.webhooks = report.events == EventsSource::Webhook.name();
    if let Some(w) = &pipeline.webhooks {
        report.webhook_counts = w.counts();
        report.webhook_creates = w.calls.creates.load(Ordering::Relaxed);
        report.event_mismatches = forged_mismatches;
        report.events_dead_lettered = w.dead_lettered();
    }
}

/// The memory store's audit of settled records, its repairs, and how long unknowns took to
/// settle.
fn note_settling(report: &mut Report, s: &store::SimStore, faults: &Faults, args: &SimulateArgs) {
    report.settled_changes = s.settled_changes();
    report.unreadable_repaired = s.unreadable_counts().0;
    // All unknowns, and those whose PaymentIntent was final at Stripe when we lost the
    // answer (not a `processing` card, which Stripe itself settles 10 minutes later). An
    // authorized order's are left out: its charge waits, held, for the merchant's capture.
    let authorized = |id: &charge_core::domain::OperationId| {
        s.order_of(id)
            .and_then(|order| driver::index_of(&order, args.seed))
            .is_some_and(|i| {
                auth_asks::plan(args.seed, i, driver::charged(i), args.auth_rate).is_some()
            })
    };
    let (mut open, mut times) = s.settle_times();
    open.retain(|id| !authorized(id));
    times.retain(|(id, _)| !authorized(id));
    let processing = |id: &charge_core::domain::OperationId| {
        s.order_of(id)
            .is_some_and(|order| driver::card_of(&order, faults).0 == "pm_card_processing_succeeds")
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

/// Every fault kind with how often it happened: injected here, injected by the Stripe simulator
/// (under its own names, [`faults::STRIPE_FAULTS`]), or planned into the orders' cards.
fn faults_injected(world: &World, at_end: &AtEnd, planned: Planned) -> BTreeMap<String, u64> {
    let mut injected: BTreeMap<String, u64> = world
        .faults
        .counted()
        .into_iter()
        .map(|(k, n)| (k.name().to_owned(), n))
        .collect();
    for (kind, at_stripe) in faults::STRIPE_FAULTS {
        let n = at_end
            .stripe_injected
            .get(at_stripe.as_str())
            .copied()
            .unwrap_or(0);
        *injected.entry(kind.name().to_owned()).or_default() += n;
    }
    injected.insert("decline".into(), planned.decline);
    injected.insert("processing".into(), planned.processing);
    injected.insert("stuck".into(), planned.stuck);
    injected.insert("refund_pending".into(), planned.refund_pending);
    injected.insert("refund_fails_later".into(), planned.refund_fails_later);
    let search_lag = world.faults.rate(Kind::SearchLag) > 0.0;
    injected.insert(
        "search_lag".into(),
        if search_lag {
            at_end.stripe_requests.search
        } else {
            0
        },
    );
    injected
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
    if let Err(code) = print(&args, &outcome) {
        return code;
    }
    let report = &outcome.report;
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

/// Prints the traced order's timeline, the report, and with `--json` the report as one JSON line.
fn print(args: &SimulateArgs, outcome: &Outcome) -> Result<(), ExitCode> {
    let report = &outcome.report;
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
        match serde_json::to_string(report) {
            Ok(line) => {
                let _ = writeln!(out, "{line}");
            }
            Err(e) => {
                eprintln!("simulate: report: {}", ErrorChain(&e));
                return Err(ExitCode::from(1));
            }
        }
    }
    let _ = out.flush();
    Ok(())
}
