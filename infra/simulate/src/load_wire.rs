//! The load model on the real clock, over the wire: `simulate --arrival-rate R --backend aws
//! --stripe-url URL` (with `--endpoint-url`, the local stack's moto).
//!
//! Orders arrive at `R` per second of wall time through the real checkout handler, into the real
//! DynamoDB table and SQS FIFO queue (the adapters the functions ship with); `--charge-concurrency`
//! pollers, each one charge execution environment with its own shares of the Stripe budget on
//! this machine's clock, receive batches of up to 10 from SQS, invoke the real charge handler with
//! the function's deadline, and delete what it acknowledged (what it returned in seconds comes
//! back through `ChangeMessageVisibility`). Stripe is a separately started `stripe-sim` over
//! HTTP, its capacity refilling on real time (its default): the run refuses one whose limits run
//! on its simulated clock, which the functions cannot pace to.
//!
//! What the virtual-time model cannot show, this does: the real adapters' round trips, a Stripe
//! that answers over HTTP, and the budget kept on wall time. A burst drains in minutes, inside
//! `PendingGraceSecs`, so no reconciler runs. The run is not deterministic (wall time, two
//! processes); its figures are drain ÷ N/L and Stripe's own refusal counters, judged against
//! Stripe's ledger and the table at the end.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_lambda_events::sqs::SqsEvent;
use charge::handler::ChargeFunction;
use charge_core::plan::Policy;
use charge_core::time::SystemClock;
use charge_core::{
    domain::OrderId,
    operation::{OperationKey, OperationStatus},
    time::Clock,
};
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::sqs::SqsQueue;
use charge_once::adapters::stripe::{SecretKey, StripeConfig, StripeGateway};
use charge_once::executor::EngineDeps;
use charge_once::memory::MemoryDeadLetters;
use charge_once::ports::{MessageVisibility, OperationQueue, OperationStore, PaymentGateway};
use checkout::door::Checkout;
use lambda_runtime::{Context, LambdaEvent};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde_json::Value;

use crate::driver;
use crate::faults::Faults;
use crate::pacing::Pacing;
use crate::report::{LoadReport, Report};
use crate::source::{Delivered, EventSource, SqsSource};
use crate::{BoxError, SimulateArgs};

/// An idle poller asks SQS again after this long (Lambda's pollers long-poll).
const IDLE_POLL: Duration = Duration::from_millis(200);
/// Checkouts in flight at once, at most (the order service's clients, API Gateway's concurrent
/// invocations): enough for arrivals well above Stripe's limit against moto's ~10 ms a request.
const CLIENTS: u64 = 32;
/// The run gives up this long after the last arrival.
const GIVE_UP_AFTER: Duration = Duration::from_secs(600);

/// What the pollers count while the run goes.
#[derive(Default)]
struct Tally {
    /// Messages the charge handler acknowledged (deleted).
    acknowledged: AtomicU64,
    batches: AtomicU64,
    checkout_errors: AtomicU64,
    /// Wall ms since the start of the last acknowledgement.
    last_ack_ms: AtomicU64,
    /// Order → checkout answered, wall ms since the start.
    arrived_ms: Mutex<BTreeMap<String, u64>>,
    /// Checkout → acknowledged, ms, per order.
    latencies_ms: Mutex<Vec<i64>>,
}

/// `stripe-sim`'s admin API: its capacity as configured, and its ledger and counters at the end.
struct Admin {
    base: String,
    http: reqwest::Client,
}

impl Admin {
    async fn get(&self, what: &str) -> Result<Value, BoxError> {
        Ok(self
            .http
            .get(format!("{}/_sim/{what}", self.base))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }
}

/// Runs the burst: `args` names the table and queue (`run` provisions them) and stripe-sim's URL.
pub async fn run(args: &SimulateArgs, rate: f64) -> Result<Report, BoxError> {
    let (Some(table), Some(queue_url), Some(base)) = (
        args.table.clone(),
        args.queue_url.clone(),
        args.stripe_url.clone(),
    ) else {
        return Err("--arrival-rate over the wire needs --backend aws and --stripe-url".into());
    };
    let base = base.trim_end_matches('/').to_owned();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let admin = Admin {
        base: base.clone(),
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?,
    };
    let capacity = admin.get("capacity").await?;
    if capacity["create_per_sec"].as_u64().is_none() {
        return Err(
            "stripe-sim has no create limit (started --unlimited?): a burst over the \
                    wire measures the drain at Stripe's limit; start it with its capacity on"
                .into(),
        );
    }
    if capacity["clock"].as_str() == Some("simulated") {
        return Err(
            "stripe-sim's limits refill on its simulated clock; the functions pace on \
                    real time here: start it with its limits on real time (its default)"
                .into(),
        );
    }

    let config = crate::aws_config(args).await;
    let store: Arc<dyn OperationStore> = Arc::new(DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&config),
        table,
    ));
    let sqs = aws_sdk_sqs::Client::new(&config);
    let queue = Arc::new(SqsQueue::new(sqs.clone(), &queue_url));
    let source = SqsSource {
        client: sqs,
        queue_url,
        visibility_secs: charge::EVENT_SOURCE.visibility_timeout_secs as i32,
        calls: AtomicU64::new(0),
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let gateway: Arc<dyn PaymentGateway> = Arc::new(StripeGateway::new(StripeConfig::new(
        base,
        SecretKey::new(stripe_sim::DEFAULT_API_KEY),
    ))?);
    let policy = Policy::default();
    let checkout = Checkout {
        store: store.clone(),
        queue: queue.clone() as Arc<dyn OperationQueue>,
        clock: clock.clone(),
        pending_grace: policy.pending_grace,
        max_charge_attempts: Default::default(),
        metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
    };
    let charge = EngineDeps {
        store: store.clone(),
        gateway,
        clock,
        policy,
    };
    let pacing = Pacing::on_real_time(args.stripe_budget());
    let environment = || ChargeFunction {
        charge: charge.clone(),
        dead_letters: Arc::new(MemoryDeadLetters::new()),
        visibility: queue.clone() as Arc<dyn MessageVisibility>,
        budget: Some(pacing.charge(args.charge_burst)),
        metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
    };

    let faults = Faults::new(args.seed, BTreeMap::new());
    let tally = Tally::default();
    let start = Instant::now();
    // Checkouts come concurrently, as API Gateway invokes them: each of these clients takes
    // every `CLIENTS`-th order at its time.
    let arrived = AtomicU64::new(0);
    let client = |first: u64| {
        let (tally, checkout, faults, arrived) = (&tally, &checkout, &faults, &arrived);
        async move {
            for i in (first..args.orders).step_by(CLIENTS as usize) {
                tokio::time::sleep_until((start + Duration::from_secs_f64(i as f64 / rate)).into())
                    .await;
                let order = driver::plan_order(i, args.seed, faults);
                let amount = driver::charged(i);
                let status = checkout::handler::handle(
                    checkout,
                    LambdaEvent::new(driver::checkout_request(&order, amount), Context::default()),
                )
                .await
                .status_code;
                if (200..300).contains(&status) {
                    lock(&tally.arrived_ms).insert(order.order_id, ms_since(start));
                } else {
                    tally.checkout_errors.fetch_add(1, Ordering::Relaxed);
                }
                arrived.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    // Every order checkout accepted is acknowledged (a refused one never reaches the queue).
    let done = || {
        (arrived.load(Ordering::Relaxed) >= args.orders
            && tally.acknowledged.load(Ordering::Relaxed)
                >= args.orders - tally.checkout_errors.load(Ordering::Relaxed))
            || start.elapsed() > Duration::from_secs_f64(args.orders as f64 / rate) + GIVE_UP_AFTER
    };
    let poller = |f: ChargeFunction| {
        let (tally, source, done) = (&tally, &source, &done);
        async move {
            while !done() {
                let batch = match source.receive(charge::EVENT_SOURCE.batch_size).await {
                    Ok(b) => b,
                    Err(e) => {
                        eprintln!("ReceiveMessage failed: {e}");
                        Vec::new()
                    }
                };
                if batch.is_empty() {
                    tokio::time::sleep(IDLE_POLL).await;
                    continue;
                }
                tally.batches.fetch_add(1, Ordering::Relaxed);
                invoke(&f, &batch, source, tally, start).await;
            }
        }
    };
    let mut tasks: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = Vec::new();
    for first in 0..CLIENTS.min(args.orders) {
        tasks.push(Box::pin(client(first)));
    }
    for _ in 0..args.charge_concurrency {
        tasks.push(Box::pin(poller(environment())));
    }
    // Polled in a seeded order; the waits are real (tokio's timers and sockets).
    let order = Mutex::new(SmallRng::seed_from_u64(args.seed));
    crate::sched::run_all(&order, tasks).await;

    let mut report = judge(args, rate, &capacity, &tally, store.as_ref(), &admin, start).await?;
    // Checkout's sends, counted at the queue's adapter (no reconciler runs here, so nothing is
    // sent again).
    if let Some(load) = report.load.as_mut() {
        load.sqs_sends = queue.sends.load(Ordering::Relaxed);
        load.sends_per_order = load.sqs_sends as f64 / args.orders.max(1) as f64;
    }
    Ok(report)
}

/// One invocation: the batch as the event source hands it over, with the function's deadline;
/// what it acknowledged is deleted.
async fn invoke(
    f: &ChargeFunction,
    batch: &[Delivered],
    source: &SqsSource,
    tally: &Tally,
    start: Instant,
) {
    let mut event = SqsEvent::default();
    event.records = batch.iter().map(Delivered::to_record).collect();
    let mut ctx = Context::default();
    let timeout = Duration::from_secs(charge::EVENT_SOURCE.function_timeout_secs);
    ctx.deadline = (std::time::SystemTime::now() + timeout)
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let failed: Vec<String> = charge::handler::handle(f, LambdaEvent::new(event, ctx))
        .await
        .batch_item_failures
        .into_iter()
        .map(|b| b.item_identifier)
        .collect();
    for d in batch {
        if failed.iter().any(|id| *id == d.message_id || id.is_empty()) {
            continue;
        }
        if let Err(e) = source.delete(&d.receipt).await {
            eprintln!("DeleteMessage failed: {e}");
            continue;
        }
        let now = ms_since(start);
        tally.acknowledged.fetch_add(1, Ordering::Relaxed);
        tally.last_ack_ms.fetch_max(now, Ordering::Relaxed);
        let order = serde_json::from_str::<Value>(&d.body)
            .ok()
            .and_then(|v| v["order_id"].as_str().map(str::to_owned));
        if let Some(at) = order.and_then(|o| lock(&tally.arrived_ms).get(&o).copied()) {
            lock(&tally.latencies_ms).push(now as i64 - at as i64);
        }
    }
}

/// Every order's record read back, and Stripe's ledger: one succeeded PaymentIntent per order,
/// each order's record `succeeded` with it.
async fn judge(
    args: &SimulateArgs,
    rate: f64,
    capacity: &Value,
    tally: &Tally,
    store: &dyn OperationStore,
    admin: &Admin,
    start: Instant,
) -> Result<Report, BoxError> {
    let wall = start.elapsed().as_secs_f64();
    let create_limit = capacity["create_per_sec"].as_u64().unwrap_or(0);
    let create_latency_p50_ms = capacity["create_latency"]["p50_ms"].as_u64().unwrap_or(0);
    let ledger = admin.get("ledger").await?;
    let mut intents: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for pi in ledger["payment_intents"].as_array().into_iter().flatten() {
        if let Some(op) = pi["operation_id"].as_str() {
            intents.entry(op.to_owned()).or_default().push((
                pi["id"].as_str().unwrap_or_default().to_owned(),
                pi["status"].as_str().unwrap_or_default().to_owned(),
            ));
        }
    }
    let mut report = Report {
        seed: args.seed,
        backend: "aws".into(),
        events: "none".into(),
        deterministic: false,
        ..Report::default()
    };
    let (mut settled, mut double, mut lost, mut mismatched) = (0u64, 0u64, 0u64, 0u64);
    let checkout_errors = tally.checkout_errors.load(Ordering::Relaxed);
    let faults = Faults::new(args.seed, BTreeMap::new());
    for i in 0..args.orders {
        let order = driver::plan_order(i, args.seed, &faults);
        let key = OperationKey::charge(OrderId::parse(&order.order_id)?);
        let Some(record) = store.get(&key).await.map_err(|e| format!("{e}"))? else {
            lost += 1;
            continue;
        };
        let at_stripe = intents
            .get(&record.operation_id.to_string())
            .cloned()
            .unwrap_or_default();
        let succeeded: Vec<&(String, String)> =
            at_stripe.iter().filter(|(_, s)| s == "succeeded").collect();
        if succeeded.len() > 1 {
            double += 1;
        }
        if record.status.is_settled() {
            settled += 1;
        }
        match record.status {
            OperationStatus::Succeeded => report.succeeded += 1,
            OperationStatus::Failed => report.failed += 1,
            _ if record.review.is_some() => report.in_review += 1,
            _ => report.unconverged += 1,
        }
        let agrees = match (record.status, succeeded.first()) {
            (OperationStatus::Succeeded, Some((id, _))) => {
                record.external_id.as_deref() == Some(id.as_str())
            }
            (OperationStatus::Succeeded, None) => false,
            (_, Some(_)) => false,
            _ => true,
        };
        if !agrees {
            mismatched += 1;
        }
    }
    report.orders = args.orders;
    report.accepted = args.orders - checkout_errors;
    report.payment_intents_created = ledger["payment_intents"]
        .as_array()
        .map_or(0, |all| all.len() as u64);
    report.double_charges = double;
    // An order checkout refused has no record, and is no lost charge.
    report.lost_charges = lost.saturating_sub(checkout_errors);
    report.record_mismatches = mismatched;
    let unconverged = report.unconverged;
    report.invariants_hold =
        double == 0 && report.lost_charges == 0 && mismatched == 0 && unconverged == 0;
    if !report.invariants_hold {
        report.first_violation = Some(format!(
            "{double} double charges, {} orders without a record, {mismatched} records that disagree with Stripe, {unconverged} not settled when the run ended",
            report.lost_charges
        ));
    }
    let requests = &ledger["requests"];
    let refused: u64 = ledger["capacity_429s"]
        .as_object()
        .map(|by| {
            by.iter()
                .filter(|(k, _)| k.as_str() != "account")
                .filter_map(|(_, v)| v.as_u64())
                .sum()
        })
        .unwrap_or(0);
    let mut latencies = lock(&tally.latencies_ms).clone();
    latencies.sort_unstable();
    let rank = |p: f64| crate::load::rank(&latencies, p);
    let drain = tally.last_ack_ms.load(Ordering::Relaxed) as f64 / 1000.0;
    let ideal = args.orders as f64 / create_limit.max(1) as f64;
    let creates = requests["create"].as_u64().unwrap_or(0);
    report.load = Some(LoadReport {
        orders: args.orders,
        arrival_rate: rate,
        charge_concurrency: args.charge_concurrency,
        create_limit: create_limit as u32,
        create_latency_p50_ms,
        stripe_rps: args.stripe_rps,
        stripe_endpoint_rps: args.stripe_endpoint_rps,
        pacing: true,
        settled,
        drain_secs: drain,
        ideal_drain_secs: ideal,
        drain_ratio: drain / ideal.max(1e-9),
        latency_p50_secs: rank(0.5),
        latency_p99_secs: rank(0.99),
        latency_max_secs: latencies.last().map_or(0.0, |v| *v as f64 / 1000.0),
        capacity_429s: refused,
        stripe_creates: creates,
        creates_per_charge: creates as f64 / args.orders.max(1) as f64,
        stripe_reads: requests["retrieve"].as_u64().unwrap_or(0)
            + requests["search"].as_u64().unwrap_or(0),
        batches: tally.batches.load(Ordering::Relaxed),
        checkout_errors,
        ..LoadReport::default()
    });
    report.wall_secs = wall;
    report.orders_per_sec = args.orders as f64 / wall.max(1e-9);
    report.stripe_capacity = Some(format!("create {create_limit}/s on real time"));
    Ok(report)
}

fn ms_since(start: Instant) -> u64 {
    start.elapsed().as_millis() as u64
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
