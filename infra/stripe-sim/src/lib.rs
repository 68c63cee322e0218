//! `stripe-sim`: a local simulator of Stripe's PaymentIntents, Refunds and Disputes APIs and their
//! idempotency layer, with deterministic fault injection and a simulated
//! clock. Use it embedded in Rust tests ([`StripeSim::start`]) or as the
//! `stripe-sim` binary.
//!
//! It speaks Stripe's wire format (form-encoded bodies in, JSON out,
//! `Authorization: Bearer sk_...`), serves `POST /v1/payment_intents`,
//! `GET /v1/payment_intents/{id}`, `GET /v1/payment_intents/search` and
//! `POST /v1/payment_intents/{id}/cancel` (with Stripe's rules: canceled only from
//! `requires_payment_method`, `requires_capture`, `requires_confirmation` or `requires_action`,
//! otherwise `400 payment_intent_unexpected_state`; keyed like creates), the Refunds API
//! (`POST /v1/refunds`, `GET /v1/refunds/{id}`, `GET /v1/refunds`, `POST /v1/refunds/{id}/cancel`:
//! partial refunds up to the charge, Stripe's refusals, pending, `requires_action` and
//! late-failing refunds by test card; keyed and faulted like creates), manual capture
//! (`capture_method=manual` waits in `requires_capture` with the card's `capture_before`;
//! `POST /v1/payment_intents/{id}/capture`, [`StripeSim::capture_in_process`]: keyed like a cancel,
//! its state refusals saved under the key; uncaptured intents canceled `automatic` at the earlier
//! of 7 days and `capture_before`, on the simulated clock), disputes as Stripe's dispute test
//! cards make them (`GET /v1/disputes[/{id}]`, `POST /v1/disputes/{id}[/close]`: evidence,
//! review, deadline and funds on the simulated clock, `charge.dispute.*` events, a refund of a
//! charged-back charge refused with `charge_disputed`; [`StripeSim::dispute_charge`]), and an
//! unauthenticated admin API under `/_sim/` (with a customer's later confirm of a declined
//! intent, [`StripeSim::confirm_as_customer`]).
//!
//! # Capacity (opt-in)
//! [`SimConfig::capacity`] models Stripe's rate limits (token buckets per endpoint and for the
//! account, `429 rate_limit` when empty) and the latency of creates: see [`capacity`].
//! **[`SimConfig::default`] keeps [`Capacity::unlimited`]** (no limits, no latency), so embedding
//! code behaves as before until it opts in with e.g. [`Capacity::stripe_defaults`]; the
//! `stripe-sim` binary defaults to Stripe's documented limits on the real clock
//! (`--unlimited` turns them off). Set at run time with [`StripeSim::set_capacity`] or
//! `POST /_sim/capacity`; refusals are counted in [`StripeSim::capacity_429s`], apart from the
//! random `rate_limit` fault.
//!
//! # Module map
//! - [`capacity`]: [`Capacity`] (rate limits, [`CreateLatency`]) and its counters.
//! - [`clock`]: simulated clock (manual, or an external [`TimeSource`]).
//! - [`faults`]: [`FaultKind`], [`FaultConfig`], the seeded decision procedure.
//! - [`wire`]: Stripe error envelope ([`ApiError`]), IDs, search query parsing.
//! - [`version`]: the API version a request's `Stripe-Version` (else [`SimConfig::api_version`],
//!   the pin `2024-06-20`) or the webhook endpoint names: a lapse's `automatic` or `expired`, and
//!   before basil the refund Stripe makes of an authorization's released part.
//! - `pi`: the PaymentIntent model, test payment methods, lazy settlement, the hold of a manual
//!   capture and its deadline.
//! - `refund`: the Refund model (`POST /v1/refunds`, retrieve, list, cancel), its paths by test
//!   payment method, lazy transitions; `engine::refunds` keeps them beside their intents.
//! - `dispute`: the Dispute model (`POST /v1/disputes/{id}`, its JSON, Stripe's dispute test
//!   cards and refusals); `engine::disputes` keeps them beside their intents and moves them on
//!   the clock ([`DisputeTiming`]).
//! - `engine`: all mutable state (PaymentIntents, idempotency keys, counters).
//! - `http`: the hyper HTTP/1.1 server and `/v1` routes.
//! - `direct`: the same routes in process ([`StripeSim::create_in_process`], ...), no sockets.
//! - `admin`: the `/_sim/` admin routes.
//! - [`webhooks`]: events delivered as Stripe delivers them, as signed webhooks or in the
//!   EventBridge envelope of a Stripe event destination ([`DeliveryMode`]), at least once with
//!   retries and seeded faults (duplicate, out of order, delayed, dropped); the HTTP sender runs
//!   beside the server.
//! - [`receiver`]: for tests, a loopback endpoint that keeps what it is sent ([`receiver::Receiver`]),
//!   to point those deliveries at.
//!
//! # Example
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use stripe_sim::{FaultKind, SimConfig, StripeSim};
//! let sim = StripeSim::new(SimConfig::default());
//! let running = sim.start(0).await?;
//! sim.push_script([FaultKind::DropAfterCommit]);
//! // ... point the client at running.base_url() with key "sk_test_charge_once" ...
//! sim.advance(std::time::Duration::from_secs(31)); // past the search lag
//! assert!(sim.ledger().len() <= 1);
//! running.shutdown().await;
//! # Ok(()) }
//! ```

pub mod capacity;
pub mod clock;
pub mod faults;
pub mod fx;
pub mod receiver;
pub mod version;
pub mod webhooks;
pub mod wire;

mod admin;
mod direct;
mod dispute;
mod engine;
mod http;
mod pi;
mod refund;
mod reply;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use capacity::{Capacity, Capacity429s, CapacityClock, CapacityTokens, CreateLatency};
pub use clock::TimeSource;
pub use direct::{Answer, CreateStart, Outcome, SlowCreate};
pub use dispute::{DISPUTE_CARDS, DISPUTE_REASONS, LOSING_EVIDENCE, WINNING_EVIDENCE};
pub use engine::{
    DisputeEntry, DisputeRequest, DisputeTiming, LedgerEntry, LedgerRowView, RefundEntry,
    RequestCounts, CLOSES_AFTER_DUE_MS, KEY_TTL_MS,
};
pub use faults::{FaultConfig, FaultKind};
pub use pi::{CANCELLATION_REASONS, STATUSES, UNCAPTURED_EXPIRY_MS, VISA_MIT_CAPTURE_WINDOW_MS};
pub use refund::{LATE_FAILURE_REASON, REFUND_REASONS};
pub use webhooks::{
    eventbridge_envelope, signature_header, Delivery, DeliveryMode, WebhookConfig, WebhookCounts,
    WebhookFaults, DEFAULT_EVENT_SOURCE,
};
pub use wire::ApiError;

use clock::Clock;
use engine::Engine;

/// Default API key accepted by the simulator.
pub const DEFAULT_API_KEY: &str = "sk_test_charge_once";

/// Simulator configuration.
#[derive(Clone)]
pub struct SimConfig {
    /// The only accepted secret key (default `sk_test_charge_once`).
    pub api_key: String,
    /// Seed for fault decisions and IDs (default 0).
    pub seed: u64,
    /// How long after creation a PaymentIntent becomes visible to search
    /// (simulated time, default 30 s).
    pub search_lag: Duration,
    /// How long a `processing` PaymentIntent takes to settle (simulated
    /// time, default 10 min).
    pub processing_settle: Duration,
    /// External time source (unix ms). `None`: a manual clock that moves
    /// only when advanced.
    pub time_source: Option<TimeSource>,
    /// Start of the simulated clock in unix ms (default: real wall time).
    pub start_ms: Option<i64>,
    /// How long a `pending` refund takes to succeed, and a late-failing refund to fail
    /// (simulated time, default 10 min).
    pub refund_settle: Duration,
    /// How long after its creation Stripe cancels a PaymentIntent still waiting for its capture
    /// (`capture_method=manual`, `cancellation_reason: automatic`), unless the card's own
    /// `capture_before` comes first (simulated time, default 7 days).
    pub uncaptured_expiry: Duration,
    /// How long a test card's dispute takes to appear, its response window and the review of
    /// its evidence (simulated time; default: at once, 7 days, 1 hour).
    pub disputes: DisputeTiming,
    /// Initial fault settings (default: none).
    pub faults: FaultConfig,
    /// The account's default API version (default: the pinned `2024-06-20`): what a request
    /// without a `Stripe-Version` header, an in-process call, and Stripe's own actions (a lapse)
    /// answer in. A request's header overrides it for that request.
    pub api_version: version::ApiVersion,
    /// Rate limits and create latency. Default: [`Capacity::unlimited`] (nothing limited, creates
    /// take no time), unlike the `stripe-sim` binary, which defaults to Stripe's documented
    /// limits ([`Capacity::stripe_defaults`] on [`CapacityClock::Real`]).
    pub capacity: Capacity,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            api_key: DEFAULT_API_KEY.to_string(),
            seed: 0,
            search_lag: Duration::from_secs(30),
            processing_settle: Duration::from_secs(600),
            refund_settle: Duration::from_secs(600),
            uncaptured_expiry: Duration::from_millis(pi::UNCAPTURED_EXPIRY_MS as u64),
            disputes: DisputeTiming::default(),
            time_source: None,
            start_ms: None,
            faults: FaultConfig::default(),
            api_version: version::ApiVersion::default(),
            capacity: Capacity::unlimited(),
        }
    }
}

impl fmt::Debug for SimConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimConfig")
            .field("api_key", &wire::mask_key(&self.api_key))
            .field("seed", &self.seed)
            .field("search_lag", &self.search_lag)
            .field("processing_settle", &self.processing_settle)
            .field("refund_settle", &self.refund_settle)
            .field("uncaptured_expiry", &self.uncaptured_expiry)
            .field("disputes", &self.disputes)
            .field(
                "time_source",
                &self.time_source.as_ref().map(|_| "external"),
            )
            .field("start_ms", &self.start_ms)
            .field("faults", &self.faults)
            .field("capacity", &self.capacity)
            .field("api_version", &self.api_version)
            .finish()
    }
}

fn dur_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

pub(crate) struct Inner {
    pub(crate) api_key: String,
    pub(crate) clock: Clock,
    /// Origin of [`CapacityClock::Real`].
    started: Instant,
    engine: Mutex<Engine>,
}

/// A simulator instance. Cheap to clone (shared state); all methods are
/// safe to call while the server runs.
#[derive(Clone)]
pub struct StripeSim {
    pub(crate) inner: Arc<Inner>,
}

impl StripeSim {
    /// Creates a simulator (no server yet: see [`StripeSim::start`]).
    pub fn new(cfg: SimConfig) -> Self {
        let mut faults = cfg.faults;
        sanitize(&mut faults);
        let mut capacity = cfg.capacity;
        sanitize_capacity(&mut capacity);
        let mut engine = Engine::new(
            cfg.seed,
            faults,
            capacity,
            dur_ms(cfg.search_lag),
            dur_ms(cfg.processing_settle),
            dur_ms(cfg.refund_settle),
            dur_ms(cfg.uncaptured_expiry),
        );
        engine.api_version = cfg.api_version;
        engine.disputes.timing = cfg.disputes;
        StripeSim {
            inner: Arc::new(Inner {
                api_key: cfg.api_key,
                clock: Clock::new(cfg.time_source, cfg.start_ms),
                started: Instant::now(),
                engine: Mutex::new(engine),
            }),
        }
    }

    /// Sets the account's default API version ([`SimConfig::api_version`]).
    pub fn set_api_version(&self, version: version::ApiVersion) {
        self.engine().api_version = version;
    }

    /// The account's default API version.
    pub fn api_version(&self) -> version::ApiVersion {
        self.engine().api_version.clone()
    }

    /// Locks the engine (recovering from poisoning). Never held across `.await`.
    pub(crate) fn engine(&self) -> MutexGuard<'_, Engine> {
        self.inner.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Binds `127.0.0.1:port` (0 = ephemeral) and serves in a spawned task
    /// until [`RunningSim::shutdown`] or the handle is dropped.
    pub async fn start(&self, port: u16) -> std::io::Result<RunningSim> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(http::serve(listener, self.clone(), rx));
        let sender = tokio::spawn(webhooks::run_sender(
            self.clone(),
            Duration::from_millis(20),
        ));
        Ok(RunningSim {
            addr,
            shutdown: Some(tx),
            task: Some(task),
            sender: Some(sender),
        })
    }

    /// The accepted API key.
    pub fn api_key(&self) -> &str {
        &self.inner.api_key
    }

    /// Current simulated time, unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// Moves simulated time forward (with an external source: adds to the
    /// offset applied on top of it). Uncaptured PaymentIntents whose hold expired by then are
    /// canceled, with their events.
    pub fn advance(&self, d: Duration) {
        self.inner.clock.advance_ms(dur_ms(d));
        self.expire_due();
    }

    /// Sets simulated time (with an external source: adjusts the offset), and cancels the
    /// uncaptured PaymentIntents whose hold expired by then.
    pub fn set_now_ms(&self, ms: i64) {
        self.inner.clock.set_ms(ms);
        self.expire_due();
    }

    /// Cancels (`automatic`) every uncaptured PaymentIntent whose hold expired by now. Any read
    /// or write of one does it too; this is for a clock that moved while no one looked.
    pub fn expire_due(&self) {
        let now = self.now_ms();
        self.engine().expire_due(now);
    }

    /// When the next uncaptured PaymentIntent expires (simulated unix ms), if one waits.
    pub fn next_expiry_ms(&self) -> Option<i64> {
        self.engine().next_expiry_ms()
    }

    /// Sets how long after its creation an uncaptured PaymentIntent is canceled (unless the
    /// card's `capture_before` comes first; authorizations made from now on).
    pub fn set_uncaptured_expiry(&self, d: Duration) {
        self.engine().uncaptured_expiry_ms = dur_ms(d);
    }

    /// Replaces rates, latency, script and the reads flag. Rates are clamped
    /// to `[0, 1]` (NaN counts as 0). The RNG is not reseeded.
    pub fn set_faults(&self, mut f: FaultConfig) {
        sanitize(&mut f);
        self.engine().faults.apply(f);
    }

    /// Current fault settings (the script shows what remains of it).
    pub fn faults(&self) -> FaultConfig {
        self.engine().faults.config()
    }

    /// Appends to the fault script (applied FIFO to the next create requests
    /// each fault can apply to).
    pub fn push_script(&self, faults: impl IntoIterator<Item = FaultKind>) {
        self.engine().faults.script.extend(faults);
    }

    /// Sets the search visibility lag (simulated time).
    pub fn set_search_lag(&self, d: Duration) {
        self.engine().search_lag_ms = dur_ms(d);
    }

    /// Replaces the capacity (rate limits, their clock, create latency); every bucket starts full
    /// again, the counters are kept. An invalid latency `sigma` (negative, NaN) counts as 0.
    pub fn set_capacity(&self, mut c: Capacity) {
        sanitize_capacity(&mut c);
        self.engine().capacity.apply(c);
    }

    /// The current capacity configuration.
    pub fn capacity(&self) -> Capacity {
        self.engine().capacity.config().clone()
    }

    /// Requests refused for capacity, by endpoint (not the random `rate_limit` fault: see
    /// [`StripeSim::injected`]).
    pub fn capacity_429s(&self) -> Capacity429s {
        self.engine().capacity.refused
    }

    /// Tokens left in each bucket now (`None`: unlimited).
    pub fn capacity_tokens(&self) -> CapacityTokens {
        let now = self.capacity_now();
        let eng = self.engine();
        eng.capacity.tokens(now.on(eng.capacity.config().clock))
    }

    /// Draws the next create latency from the seeded stream that executing creates draw from
    /// (`None` while [`Capacity::create_latency`] is off). Each call advances that stream.
    pub fn next_create_latency(&self) -> Option<Duration> {
        self.engine().capacity.draw_create_latency()
    }

    /// Now on both capacity clocks, read before the engine is locked (a time source is never
    /// called under the lock).
    pub(crate) fn capacity_now(&self) -> CapacityNow {
        CapacityNow {
            simulated_ms: self.now_ms(),
            real_ms: dur_ms(self.inner.started.elapsed()),
        }
    }

    /// Every PaymentIntent ever created (oldest first), statuses settled.
    pub fn ledger(&self) -> Vec<LedgerEntry> {
        let now = self.now_ms();
        self.engine().ledger(now)
    }

    /// Calls `f` with every row of the ledger, borrowed, oldest first (`only`: `(key, value)`,
    /// the PaymentIntents whose `metadata[key]` is `value`), statuses settled: the ledger read
    /// without copying it. The simulator is held while `f` runs: `f` must not call it.
    pub fn each_ledger_row(
        &self,
        only: Option<(&str, &str)>,
        f: &mut dyn FnMut(LedgerRowView<'_>),
    ) {
        let now = self.now_ms();
        self.engine().each_row(only, now, f);
    }

    /// Sizes the ledger's indexes for `payment_intents` more PaymentIntents carrying
    /// `metadata_keys` metadata pairs each: a long run then does not rehash them as they grow.
    /// Changes no answer.
    pub fn reserve(&self, payment_intents: usize, metadata_keys: usize) {
        self.engine().reserve(payment_intents, metadata_keys);
    }

    /// Sets how long a `pending` refund takes to succeed and a late-failing one to fail
    /// (simulated time; refunds made from now on).
    pub fn set_refund_settle(&self, d: Duration) {
        self.engine().refunds.settle_ms = dur_ms(d);
    }

    /// Sets how long a late-failing refund (`pm_card_refundFail`) stays `succeeded` before it
    /// fails, apart from the settle delay: a bank that returns the refund days later (simulated
    /// time; refunds made from now on).
    pub fn set_refund_fail_after(&self, d: Duration) {
        self.engine().refunds.fail_after_ms = Some(dur_ms(d));
    }

    /// When the last refund still to fail after it succeeded (a late-failing card's) fails, in
    /// simulated unix ms; `None` when none is due: how long a run must go on for every late
    /// failure to happen.
    pub fn last_late_refund_failure_ms(&self) -> Option<i64> {
        self.engine().last_late_failure_ms()
    }

    /// Every refund ever created (oldest first), statuses settled: what a check that each
    /// operation was refunded at most once reads.
    pub fn refund_ledger(&self) -> Vec<RefundEntry> {
        let now = self.now_ms();
        self.engine().refund_ledger(now)
    }

    /// The refunds in `requires_action` (waiting on the customer's bank) created at or before
    /// `created_by_ms` (simulated unix milliseconds), oldest first: the ledger's entries a bank
    /// acting on them would pick, at a cost of what it returns rather than of every refund
    /// ever made.
    pub fn refunds_awaiting_action(&self, created_by_ms: i64) -> Vec<RefundEntry> {
        self.engine().awaiting_action(created_by_ms)
    }

    /// How many refunds were ever created.
    pub fn refunds_created(&self) -> usize {
        self.engine().refunds.len()
    }

    /// Every dispute ever created, oldest first, as of now (a test card's waiting for its
    /// delay is not there yet).
    pub fn dispute_ledger(&self) -> Vec<DisputeEntry> {
        let now = self.now_ms();
        self.engine().dispute_ledger(now)
    }

    /// How many disputes were created.
    pub fn disputes_created(&self) -> usize {
        self.engine().disputes.len()
    }

    /// Disputes the charge of a succeeded PaymentIntent now, as a customer's bank does
    /// (`POST /_sim/disputes`): the dispute's JSON, or why not (unknown intent, not succeeded,
    /// an amount outside 1..=the charge, an unknown reason).
    pub fn dispute_charge(&self, req: &DisputeRequest) -> Result<String, ApiError> {
        let now = self.now_ms();
        self.engine().dispute_charge(req, now)
    }

    /// Sets how long disputes take ([`SimConfig::disputes`]); timers already set keep theirs.
    pub fn set_dispute_timing(&self, timing: DisputeTiming) {
        self.engine().disputes.timing = timing;
    }

    /// How long disputes take.
    pub fn dispute_timing(&self) -> DisputeTiming {
        self.engine().disputes.timing
    }

    /// The `amount_refunded` of the charge of PaymentIntent `pi_id` (its `pending` and
    /// `succeeded` refunds, as of now); `None` if the intent is unknown.
    pub fn amount_refunded(&self, pi_id: &str) -> Option<i64> {
        let now = self.now_ms();
        self.engine().amount_refunded(pi_id, now)
    }

    /// How many PaymentIntents were ever created.
    pub fn payment_intents_created(&self) -> usize {
        self.engine().created()
    }

    /// Injected fault counts by kind.
    pub fn injected(&self) -> BTreeMap<FaultKind, u64> {
        self.engine().injected()
    }

    /// Authenticated request counts per endpoint.
    pub fn request_counts(&self) -> RequestCounts {
        self.engine().requests
    }

    /// Clears PaymentIntents, idempotency keys, faults and counters (capacity 429s included), and
    /// restarts the RNGs from the current seed. Keeps the API key, the clock, the search lag, the
    /// settle time and the capacity configuration (its buckets start full again).
    pub fn reset(&self) {
        self.engine().reset();
    }

    /// The customer confirms the declined PaymentIntent `pi_id` with its client secret and pays,
    /// as Stripe's recovery for `authentication_required` does: `succeeded`, with its event, if
    /// Stripe still allows it (`requires_payment_method`, `requires_confirmation`,
    /// `requires_action`). A canceled intent is refused (`payment_intent_unexpected_state`), an
    /// unknown one is `resource_missing`. `POST /_sim/payment_intents/{id}/confirm`.
    pub fn confirm_as_customer(&self, pi_id: &str) -> Result<(), ApiError> {
        let now = self.now_ms();
        self.engine().confirm_by_customer(pi_id, now).map(|_| ())
    }

    /// Forces a PaymentIntent's status (one of [`STATUSES`]); cancels any
    /// pending settlement. False if the id or status is unknown.
    pub fn set_status(&self, pi_id: &str, status: &str) -> bool {
        let now = self.now_ms();
        self.engine().set_status(pi_id, status, now)
    }

    /// Sets where events go and how (events are generated only while a secret is set, or in
    /// `eventbridge` mode).
    pub fn set_webhooks(&self, config: WebhookConfig) -> Result<(), String> {
        if let Some(url) = &config.url {
            webhooks::check_url(url)?;
        }
        if let Some(source) = &config.event_source {
            if !source.starts_with("aws.partner/stripe.com/") {
                return Err(format!(
                    "event_source {source:?} is not a Stripe partner event source (aws.partner/stripe.com/...)"
                ));
            }
        }
        if let Some(version) = &config.api_version {
            version::ApiVersion::parse(version).map_err(|e| e.message)?;
        }
        let mut config = config;
        config.faults = config.faults.sanitized();
        self.engine().webhooks.config = config;
        Ok(())
    }

    /// The webhook configuration (the secret included: the simulator is a test tool).
    pub fn webhooks(&self) -> WebhookConfig {
        self.engine().webhooks.config.clone()
    }

    /// Webhook deliveries due now, each signed at the current simulated time. Report each
    /// result with [`StripeSim::webhook_result`], or it is neither retried nor counted delivered.
    pub fn take_due_webhooks(&self) -> Vec<Delivery> {
        let now = self.now_ms();
        let mut eng = self.engine();
        // An expiry that fell due is an event to deliver now.
        eng.expire_due(now);
        eng.webhooks.take_due(now)
    }

    /// The endpoint's answer for a delivery: `ok` = 2xx. A failure is retried with back-off.
    pub fn webhook_result(&self, delivery: &Delivery, ok: bool) {
        let now = self.now_ms();
        self.engine().webhooks.report(delivery.seq, ok, now);
    }

    /// Delivers `event`, a whole Stripe event object (`id`, `type`, `data.object`, ...) that
    /// Stripe did not create — a forged or misrouted one, for testing a receiver — now, exactly
    /// as Stripe's own are delivered: signed with the endpoint secret (`webhook` mode) or in the
    /// EventBridge envelope (`eventbridge` mode), retried the same way after a failure reported
    /// with [`StripeSim::webhook_result`]. No fault applies; counted in
    /// [`WebhookCounts::injected`] (and its attempts in `attempts`). `None` when events are off
    /// or `event` has no string `id` and `type`.
    pub fn inject_event(&self, event: &serde_json::Value) -> Option<Delivery> {
        let now = self.now_ms();
        self.engine().webhooks.inject(event, now)
    }

    /// Queues `event` as [`StripeSim::inject_event`] delivers it, due now: the HTTP sender (or
    /// [`StripeSim::take_due_webhooks`]) sends it. False when events are off or `event` has no
    /// string `id` and `type`. `POST /_sim/webhooks/inject`.
    pub fn queue_injected_event(&self, event: &serde_json::Value) -> bool {
        let now = self.now_ms();
        self.engine().webhooks.queue_injected(event, now)
    }

    /// When the next webhook delivery is due (simulated unix ms), if any.
    /// With events on, an uncaptured PaymentIntent's expiry counts: its
    /// `payment_intent.canceled` is due then.
    pub fn next_webhook_due_ms(&self) -> Option<i64> {
        let eng = self.engine();
        let expiry = eng.next_expiry_ms().filter(|_| eng.webhooks.enabled());
        match (eng.webhooks.next_due(), expiry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// What happened to webhook events so far.
    pub fn webhook_counts(&self) -> WebhookCounts {
        self.engine().webhooks.counts
    }
}

/// Now on both [`CapacityClock`]s, milliseconds.
#[derive(Clone, Copy)]
pub(crate) struct CapacityNow {
    simulated_ms: i64,
    /// Real time since the simulator was made.
    real_ms: i64,
}

impl CapacityNow {
    pub(crate) fn on(self, clock: CapacityClock) -> i64 {
        match clock {
            CapacityClock::Simulated => self.simulated_ms,
            CapacityClock::Real => self.real_ms,
        }
    }
}

fn sanitize_capacity(c: &mut Capacity) {
    if let Some(l) = &mut c.create_latency {
        if l.validate().is_err() {
            l.sigma = 0.0;
        }
    }
}

fn sanitize(f: &mut FaultConfig) {
    for r in f.rates.values_mut() {
        *r = if r.is_nan() { 0.0 } else { r.clamp(0.0, 1.0) };
    }
}

/// A running server. Dropping it also stops the server.
pub struct RunningSim {
    /// The bound address (always 127.0.0.1).
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    /// The webhook sender (idle until a URL is set).
    sender: Option<JoinHandle<()>>,
}

impl RunningSim {
    /// `http://127.0.0.1:PORT` (use as the Stripe API base).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, aborts open connections, and waits for the server
    /// task to end.
    pub async fn shutdown(mut self) {
        if let Some(sender) = self.sender.take() {
            sender.abort();
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for RunningSim {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take() {
            sender.abort();
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}
