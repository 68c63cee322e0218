//! The faults the simulation injects, their rates, and the wrappers that inject the ones that are
//! not Stripe's (crashes, lost sends, duplicate deliveries). Every injection is counted where it
//! happens: the report shows what occurred, not what was configured.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use charge_core::domain::StripeRefundId;
use charge_core::refund::StripeRefund;
use charge_core::store::{
    Claim, ClaimRequest, Created, ManualResolution, OutcomeRecord, Recorded, RefundFailedLater,
    Reschedule,
};
use charge_core::store_rules::{ChargeClaim, CreatedBeside};
use charge_core::{
    domain::{OperationId, PaymentIntentId},
    operation::{Operation, OperationKey},
    outcome::{GatewayError, PaymentIntent},
    time::{Clock, Timestamp},
};
use charge_once::ports::{
    CancelPaymentIntent, CapturePaymentIntent, CreatePaymentIntent, CreateRefund, CreatedLists,
    IndexQuery, ManualResolutions, OperationCreates, OperationLeases, OperationQueue,
    OperationReads, OperationStore, Page, PaymentGateway, PaymentIntents, QueueError,
    QueuedOperation, StoreError, StripeRefunds, UnknownIndex,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use stripe_sim::{FaultConfig, FaultKind};

use crate::fx::{FxHashMap, FxHashSet};
use crate::sched::yield_now;
use crate::stripe::{SimStripe, StripeFaults};
use crate::trace::Trace;

/// The faults the Stripe simulator injects, each under the simulation's name and its own: the
/// rates given to it, and what it reports injecting, go through this table.
pub const STRIPE_FAULTS: [(Kind, FaultKind); 6] = [
    (Kind::LostResponse, FaultKind::DropAfterCommit),
    (
        Kind::ServerErrorBeforeCommit,
        FaultKind::ServerErrorBeforeCommit,
    ),
    (
        Kind::ServerErrorAfterCommit,
        FaultKind::ServerErrorAfterCommit,
    ),
    (Kind::RateLimit, FaultKind::RateLimit),
    (Kind::KeyInUse, FaultKind::KeyInUse),
    (Kind::Timeout, FaultKind::Latency),
];

/// Every fault kind the simulation knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Stripe commits, the caller sees a reset.
    LostResponse,
    /// Stripe answers 500 before executing (nothing created, nothing saved).
    ServerErrorBeforeCommit,
    /// Stripe creates and saves a 500 under the key (replayed on every retry).
    ServerErrorAfterCommit,
    /// Stripe answers 429 before the idempotency layer.
    RateLimit,
    /// Stripe answers 409 `idempotency_key_in_use`.
    KeyInUse,
    /// Stripe answers after the client's timeout.
    Timeout,
    /// The order's card is declined.
    Decline,
    /// The order's card answers `processing` and settles later.
    Processing,
    /// A function dies between two of its steps (checkout: after PutItem, before SendMessage;
    /// charge: after the claim, before Stripe; after Stripe, before the record).
    Crash,
    /// A message is delivered again (not deleted after success; or the client submits twice).
    DuplicateDelivery,
    /// Two invocations process the same batch at once.
    ConcurrentInvocation,
    /// A SendMessage is lost although the sender saw success.
    DroppedSend,
    /// An operation's outcome stays unknown past 24 h, so Stripe prunes its key before we settle.
    KeyPruned,
    /// Stripe search is slow to show new PaymentIntents.
    SearchLag,
    /// A message no retry can fix (unreadable) lands in an order's FIFO group.
    Poison,
    /// The order's PaymentIntent stays `requires_action` for good: it must reach a person after
    /// the stuck bound.
    Stuck,
    /// Beside a real Stripe event, a validly delivered one (signed with the endpoint's secret, or
    /// in a proper EventBridge envelope) naming a state Stripe does not hold: `canceled` for a
    /// PaymentIntent that succeeded, `succeeded` for one declined, or for one Stripe never
    /// created. It must move nothing (`forged_settles`) and page (`event_mismatches`).
    ForgedEvent,
    /// The order's record is stored in the shape release 2026-11-29 wrote (no `requested_by`):
    /// the simulation's store keeps it as a DynamoDB item and reads it only through the real
    /// mapping (`operation_from_item`). It must settle like any other. Memory backend only.
    LegacyRecord,
    /// Right after the checkout's put, the order's record is corrupted (one attribute, as a bad
    /// hand edit or a bug leaves it): reads of it fail (`malformed item: <field>: <why>`) and the
    /// reconciler's page sets it aside (`UnreadableRecords`) while settling the rest. An operator
    /// repairs it [`crate::store::REPAIR_AFTER`] later; it must then settle like any other.
    /// Memory backend only.
    UnreadableRecord,
    /// The customer of a declined order comes back and confirms that same PaymentIntent with its
    /// client secret (Stripe's recovery for `authentication_required`), at once (before our
    /// cancel) or minutes later, if Stripe still allows it ([`Confirms`]). Drawn per declined
    /// order; counted per visit. No operation may end `failed` while Stripe holds a succeeded
    /// intent for it (`failed_but_paid`).
    CustomerConfirmsDeclined,
    /// The order pays with a card whose refunds wait on the bank (`requires_action`, Stripe's
    /// simulator-only `pm_card_sim_refundRequiresAction`), and the bank cancels them
    /// ([`Bank`]) half an hour later: each such refund must end `failed`, its reservation given
    /// back. Counted per refund canceled.
    RefundCanceled,
    /// The order pays with Stripe's `pm_card_pendingRefund`: its refunds are `pending`, then
    /// succeed 10 minutes later, so each must be looked at again until it settles.
    RefundPending,
    /// The order pays with Stripe's `pm_card_refundFail`: its refunds succeed, then fail 10
    /// minutes later (a closed card). Only Stripe's events tell (`charge.refund.updated`,
    /// `refund.failed`): each such refund must end `failed`, its reservation given back.
    RefundFailsLater,
}

impl Kind {
    pub const ALL: [Kind; 23] = [
        Kind::LostResponse,
        Kind::ServerErrorBeforeCommit,
        Kind::ServerErrorAfterCommit,
        Kind::RateLimit,
        Kind::KeyInUse,
        Kind::Timeout,
        Kind::Decline,
        Kind::Processing,
        Kind::Crash,
        Kind::DuplicateDelivery,
        Kind::ConcurrentInvocation,
        Kind::DroppedSend,
        Kind::KeyPruned,
        Kind::SearchLag,
        Kind::Poison,
        Kind::Stuck,
        Kind::ForgedEvent,
        Kind::LegacyRecord,
        Kind::UnreadableRecord,
        Kind::CustomerConfirmsDeclined,
        Kind::RefundCanceled,
        Kind::RefundPending,
        Kind::RefundFailsLater,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Kind::LostResponse => "lost_response",
            Kind::ServerErrorBeforeCommit => "server_error_before_commit",
            Kind::ServerErrorAfterCommit => "server_error_after_commit",
            Kind::RateLimit => "rate_limit",
            Kind::KeyInUse => "key_in_use",
            Kind::Timeout => "timeout",
            Kind::Decline => "decline",
            Kind::Processing => "processing",
            Kind::Crash => "crash",
            Kind::DuplicateDelivery => "duplicate_delivery",
            Kind::ConcurrentInvocation => "concurrent_invocation",
            Kind::DroppedSend => "dropped_send",
            Kind::KeyPruned => "key_pruned",
            Kind::SearchLag => "search_lag",
            Kind::Poison => "poison",
            Kind::Stuck => "stuck",
            Kind::ForgedEvent => "forged_event",
            Kind::LegacyRecord => "legacy_record",
            Kind::UnreadableRecord => "unreadable_record",
            Kind::CustomerConfirmsDeclined => "customer_confirms_declined",
            Kind::RefundCanceled => "refund_canceled",
            Kind::RefundPending => "refund_pending",
            Kind::RefundFailsLater => "refund_fails_later",
        }
    }

    /// The rate each kind has when nothing is said: modest, so the plain command shows the
    /// promise holding under every fault at once.
    pub fn default_rate(&self) -> f64 {
        match self {
            // Of the declined orders only: half their customers come back to pay.
            Kind::CustomerConfirmsDeclined => 0.5,
            Kind::Decline | Kind::Processing | Kind::RefundPending => 0.05,
            Kind::RefundCanceled | Kind::RefundFailsLater => 0.03,
            Kind::Timeout | Kind::KeyPruned | Kind::Stuck => 0.002,
            Kind::SearchLag => 1.0,
            _ => 0.02,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Kind::ALL.iter().map(Kind::name).collect();
                format!("unknown fault kind {s:?}; known: {}", names.join(", "))
            })
    }
}

/// `KIND=RATE` from the command line.
pub fn parse_fault(raw: &str) -> Result<(Kind, f64), String> {
    let (kind, rate) = raw
        .split_once('=')
        .ok_or_else(|| format!("expected KIND=RATE, got {raw:?}"))?;
    let kind: Kind = kind.trim().parse()?;
    let rate: f64 = rate
        .trim()
        .parse()
        .map_err(|_| format!("rate for {kind} must be a number in [0, 1], got {rate:?}"))?;
    if !(0.0..=1.0).contains(&rate) {
        return Err(format!("rate for {kind} must be in [0, 1], got {rate}"));
    }
    Ok((kind, rate))
}

/// Rates, a seeded source of decisions, and counts of what was injected.
pub struct Faults {
    seed: u64,
    rates: BTreeMap<Kind, f64>,
    rng: Mutex<SmallRng>,
    counts: BTreeMap<Kind, AtomicU64>,
}

impl Faults {
    pub fn new(seed: u64, rates: BTreeMap<Kind, f64>) -> Self {
        Self {
            seed,
            rates,
            rng: Mutex::new(SmallRng::seed_from_u64(seed ^ 0x5eed_c4a2_0000_0001)),
            counts: Kind::ALL.iter().map(|k| (*k, AtomicU64::new(0))).collect(),
        }
    }

    pub fn rate(&self, kind: Kind) -> f64 {
        self.rates.get(&kind).copied().unwrap_or(0.0)
    }

    pub fn rates(&self) -> &BTreeMap<Kind, f64> {
        &self.rates
    }

    /// What the Stripe simulator is to inject of these faults: [`STRIPE_FAULTS`] (reads failing
    /// too, at the same rates) and search lag; `latency`: how long an answer the `timeout`
    /// fault delays takes.
    pub fn at_stripe(&self, latency: Duration) -> StripeFaults {
        StripeFaults {
            config: FaultConfig {
                rates: STRIPE_FAULTS
                    .iter()
                    .filter(|(k, _)| self.rate(*k) > 0.0)
                    .map(|(k, f)| (*f, self.rate(*k)))
                    .collect(),
                latency,
                script: Vec::new(),
                faults_on_reads: true,
            },
            search_lag: self.rate(Kind::SearchLag) > 0.0,
        }
    }

    /// A random decision for an event of this kind; counted when it fires.
    pub fn roll(&self, kind: Kind) -> bool {
        let rate = self.rate(kind);
        if rate <= 0.0 {
            return false;
        }
        let fire = self
            .rng
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .random_bool(rate);
        if fire {
            self.count(kind);
        }
        fire
    }

    /// A fair coin from the same seeded source (not counted).
    pub fn roll_half(&self) -> bool {
        self.rng
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .random_bool(0.5)
    }

    /// A decision fixed by (seed, kind, subject): the same order gets the same card on every run
    /// of a seed, whatever the interleaving. Not counted (the caller counts what it applies).
    pub fn fixed(&self, kind: Kind, subject: &str) -> bool {
        let rate = self.rate(kind);
        if rate <= 0.0 {
            return false;
        }
        (self.hash(kind, subject, 0) as f64 / u64::MAX as f64) < rate
    }

    /// One of `n` choices fixed by (seed, kind, subject), apart from [`Faults::fixed`]'s decision
    /// (another salt): e.g. when a customer comes back.
    pub fn fixed_choice(&self, kind: Kind, subject: &str, n: u64) -> u64 {
        self.hash(kind, subject, 0x5a17_c401_ce00_0001) % n.max(1)
    }

    fn hash(&self, kind: Kind, subject: &str, salt: u64) -> u64 {
        let mut h: u64 =
            0xcbf2_9ce4_8422_2325 ^ self.seed ^ (kind as u64).wrapping_mul(0x9e37) ^ salt;
        for b in subject.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h
    }

    pub fn count(&self, kind: Kind) {
        if let Some(c) = self.counts.get(&kind) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn counted(&self) -> BTreeMap<Kind, u64> {
        self.counts
            .iter()
            .map(|(k, v)| (*k, v.load(Ordering::Relaxed)))
            .collect()
    }
}

/// Operations whose outcome is held unknown past 24 h (the `key_pruned` scenario): a lost
/// response on the first create, then the operation is unreachable for the automatic path until
/// Stripe has pruned its key.
#[derive(Default)]
pub struct Blackouts {
    started: Mutex<FxHashMap<OperationId, Timestamp>>,
}

/// How long a blacked-out operation stays out of reach: past Stripe's 24 h key lifetime.
pub const BLACKOUT: Duration = Duration::from_secs(24 * 3600 + 30 * 60);

impl Blackouts {
    fn start(&self, id: OperationId, at: Timestamp) {
        self.started
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, at);
    }

    /// The next moment a blackout ends, after `now`.
    pub fn next_end(&self, now: Timestamp) -> Option<Timestamp> {
        self.started
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|start| start.plus(BLACKOUT))
            .filter(|end| *end > now)
            .min()
    }

    pub fn active(&self, id: &OperationId, now: Timestamp) -> bool {
        self.started
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .is_some_and(|start| now < start.plus(BLACKOUT))
    }
}

/// Customers who come back to pay a declined PaymentIntent (the `customer_confirms_declined`
/// fault): drawn per order when its create is declined, the visit made at once (after Stripe's
/// 402, before the executor can cancel) or [`CONFIRM_LATER`] later, through Stripe, which refuses
/// a canceled intent. Each visit is counted, and whether the customer paid.
pub struct Confirms {
    stripe: Arc<SimStripe>,
    faults: Arc<Faults>,
    trace: Arc<Trace>,
    clock: Arc<dyn Clock>,
    /// Operations whose decline was seen (one visit each, however often the 402 is replayed).
    seen: Mutex<FxHashSet<OperationId>>,
    /// Visits to come, by (due in ms, sequence): (order, PaymentIntent).
    due: Mutex<BTreeMap<(i64, u64), (String, String)>>,
    seq: AtomicU64,
    /// Visits where the customer paid (Stripe still allowed it) and where Stripe refused.
    pub paid: AtomicU64,
    pub refused: AtomicU64,
}

/// When a customer who does not confirm at once comes back: minutes later (a retried 3-D Secure
/// page), or half an hour later (an e-mail asking to authenticate).
pub const CONFIRM_LATER: [Duration; 2] = [Duration::from_secs(120), Duration::from_secs(1800)];

impl Confirms {
    pub fn new(
        stripe: Arc<SimStripe>,
        faults: Arc<Faults>,
        trace: Arc<Trace>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            stripe,
            faults,
            trace,
            clock,
            seen: Mutex::new(Default::default()),
            due: Mutex::new(BTreeMap::new()),
            seq: AtomicU64::new(0),
            paid: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// A create for `order` was declined, leaving the PaymentIntent `pi`: whether and when its
    /// customer comes back to confirm it.
    pub async fn declined(&self, operation_id: OperationId, order: &str, pi: &str) {
        if !self.faults.fixed(Kind::CustomerConfirmsDeclined, order) {
            return;
        }
        let first = self
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(operation_id);
        if !first {
            return;
        }
        let choice = self.faults.fixed_choice(
            Kind::CustomerConfirmsDeclined,
            order,
            1 + CONFIRM_LATER.len() as u64,
        );
        match choice.checked_sub(1) {
            None => self.visit(order, pi).await,
            Some(later) => {
                let at = self.clock.now().plus(CONFIRM_LATER[later as usize]);
                let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                self.due
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert((at.as_millis(), seq), (order.to_owned(), pi.to_owned()));
            }
        }
    }

    /// The visits due now, in the order they were due.
    pub async fn visit_due(&self) {
        let now = self.clock.now().as_millis();
        loop {
            let next = {
                let mut due = self.due.lock().unwrap_or_else(|p| p.into_inner());
                match due.first_key_value() {
                    Some((key, _)) if key.0 <= now => due.pop_first(),
                    _ => None,
                }
            };
            let Some((_, (order, pi))) = next else { return };
            self.visit(&order, &pi).await;
        }
    }

    /// When the next visit is due.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.due
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .next()
            .map(|(at, _)| Timestamp::from_millis(*at))
    }

    async fn visit(&self, order: &str, pi: &str) {
        self.faults.count(Kind::CustomerConfirmsDeclined);
        match self.stripe.confirm_as_customer(pi).await {
            Ok(true) => {
                self.paid.fetch_add(1, Ordering::Relaxed);
                self.trace.event(
                    order,
                    "customer",
                    format_args!("FAULT customer_confirms_declined: {pi} confirmed, paid"),
                );
            }
            Ok(false) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                self.trace.event(
                    order,
                    "customer",
                    format_args!("FAULT customer_confirms_declined: {pi} refused by Stripe"),
                );
            }
            Err(e) => self.trace.event(
                order,
                "customer",
                format_args!("customer_confirms_declined: {pi}: error: {e}"),
            ),
        }
    }
}

/// One of two concurrent invocations freezes (a Lambda container paused, a long GC) right after
/// its claim, past the lease's lifetime: the other invocation may then claim the same operation,
/// and the frozen one comes back a stale lease holder. Armed by the `concurrent_invocation` fault.
pub struct Freezer {
    pub clock: charge_core::time::ManualClock,
    /// Past the lease TTL.
    pub freeze_for: Duration,
    armed: AtomicU64,
}

impl Freezer {
    pub fn new(clock: charge_core::time::ManualClock, freeze_for: Duration) -> Self {
        Self {
            clock,
            freeze_for,
            armed: AtomicU64::new(0),
        }
    }

    pub fn arm(&self) {
        self.armed.store(1, Ordering::Relaxed);
    }

    pub fn disarm(&self) {
        self.armed.store(0, Ordering::Relaxed);
    }

    fn fire(&self) -> bool {
        self.armed
            .compare_exchange(1, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }
}

/// The bank behind `refund_canceled` cards ([`Kind::RefundCanceled`]): their refunds wait on it
/// (`requires_action`), and it cancels each one [`Bank::AFTER`] after it was made, at Stripe.
pub struct Bank {
    pub sim: stripe_sim::StripeSim,
    pub faults: Arc<Faults>,
    pub trace: Arc<Trace>,
}

impl Bank {
    /// How long a refund waits on the bank before it is canceled.
    pub const AFTER: Duration = Duration::from_secs(30 * 60);

    /// Cancels the refunds waiting on the bank for [`Bank::AFTER`] by `now`; a cancel Stripe
    /// did not answer is tried again at the next call.
    pub fn cancel_waiting(&self, now: Timestamp) {
        let due = now.as_millis() - Self::AFTER.as_millis() as i64;
        for r in self.sim.refunds_awaiting_action(due) {
            let key = format!("bank-cancel-{}", r.id);
            let answer = self.sim.cancel_refund_in_process(&r.id, Some(&key), &[]);
            if let stripe_sim::Outcome::Answered(a) = answer {
                if a.status == 200 {
                    self.faults.count(Kind::RefundCanceled);
                    self.trace.event(
                        r.operation_id.as_deref().unwrap_or_default(),
                        "bank",
                        format_args!("FAULT refund_canceled: {} canceled by the bank", r.id),
                    );
                }
            }
        }
    }
}

/// What refund calls met at Stripe, counted by the simulation's gateway: errors by class (the
/// fault kinds as the client sees them), and creates Stripe refused as more than is left (which
/// a correct reservation never asks: an invariant).
#[derive(Debug, Default)]
pub struct RefundAudit {
    pub calls: AtomicU64,
    pub errors: Mutex<BTreeMap<&'static str, u64>>,
    pub refused_over: AtomicU64,
    /// The first order whose refund Stripe refused as over what is left.
    pub first_refused_over: Mutex<Option<String>>,
}

impl RefundAudit {
    fn note<T>(&self, order: &str, result: &Result<T, GatewayError>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let Err(e) = result else { return };
        let class = match e {
            GatewayError::Ambiguous { .. } => "ambiguous",
            GatewayError::RetryLater { .. } => "retry_later",
            GatewayError::Rejected { .. } => "rejected",
            _ => "other",
        };
        *self
            .errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(class)
            .or_default() += 1;
        let text = e.to_string();
        if text.contains("amount_too_large") || text.contains("charge_already_refunded") {
            self.refused_over.fetch_add(1, Ordering::Relaxed);
            self.first_refused_over
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(|| order.to_owned());
        }
    }
}

/// The store as the functions see it: crashes between steps, and blacked-out operations hidden
/// from the reconciler's index reads. Every call is a scheduling point and a logged decision.
pub struct FaultyStore {
    pub inner: Arc<dyn OperationStore>,
    pub faults: Arc<Faults>,
    pub blackouts: Arc<Blackouts>,
    pub clock: Arc<dyn Clock>,
    pub trace: Arc<Trace>,
    pub freezer: Arc<Freezer>,
}

fn crash(step: &str) -> StoreError {
    StoreError::new(format!("injected crash {step}"))
}

fn claim_name(c: &Claim) -> &'static str {
    match c {
        Claim::Claimed(_) => "claimed",
        Claim::Settled(_) => "settled",
        Claim::Leased(_) => "leased",
        Claim::InReview(_) => "in_review",
        Claim::NotFound => "not_found",
    }
}

/// A write's answer as the trace says it (written straight into the trace's hash).
struct RecordedName<'a>(&'a Result<Recorded, StoreError>);

impl std::fmt::Display for RecordedName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Ok(Recorded::Written(op)) => write!(f, "written {}", op.status),
            Ok(Recorded::Refused(_)) => f.write_str("refused"),
            Err(e) => write!(f, "error: {e}"),
        }
    }
}

/// `prefix` and the value, or nothing.
struct Maybe<'a, T>(&'a str, Option<T>);

impl<T: std::fmt::Display> std::fmt::Display for Maybe<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.1 {
            Some(v) => write!(f, "{}{v}", self.0),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl OperationReads for FaultyStore {
    async fn get(&self, key: &OperationKey) -> Result<Option<Operation>, StoreError> {
        yield_now().await;
        self.inner.get(key).await
    }
    async fn refunds_of(
        &self,
        order_id: &charge_core::domain::OrderId,
    ) -> Result<Vec<Operation>, StoreError> {
        yield_now().await;
        self.inner.refunds_of(order_id).await
    }
}

#[async_trait]
impl OperationCreates for FaultyStore {
    async fn create_if_absent(&self, op: &Operation) -> Result<Created, StoreError> {
        yield_now().await;
        let r = self.inner.create_if_absent(op).await;
        let order = op.order_id.as_str();
        match &r {
            Ok(Created::New(op)) => {
                let id = op.operation_id.to_string();
                self.trace.alias(order, &id);
                self.trace
                    .event(order, "store.create", format_args!("new {id}"));
            }
            Ok(Created::Existing(op)) => self.trace.event(
                order,
                "store.create",
                format_args!("existing {}", op.status),
            ),
            Err(e) => self
                .trace
                .event(order, "store.create", format_args!("error: {e}")),
        }
        r
    }
    /// The refund, capture or cancel and its claim on the charge written, then (a `crash`
    /// fault) the door dies before it answers: the client sees a 503 for an operation that is
    /// recorded. The trace names the write by its kind, as the pinned trace hashes hold it.
    async fn create_beside(
        &self,
        op: &Operation,
        claim: ChargeClaim<'_>,
    ) -> Result<CreatedBeside, StoreError> {
        yield_now().await;
        let r = self.inner.create_beside(op, claim).await;
        let order = op.order_id.as_str();
        let (call, written) = match claim {
            ChargeClaim::Reserve(_) => ("store.create_refund", "the refund's write"),
            ChargeClaim::Take(_) => ("store.create_taking", "the capture's or cancel's write"),
            ChargeClaim::Dispute(_) => ("store.create_dispute", "the dispute's write"),
        };
        let what = match &r {
            Ok(CreatedBeside::New(op)) => {
                let id = op.operation_id.to_string();
                self.trace.alias(order, &id);
                match claim {
                    ChargeClaim::Reserve(_) => format!("new {id}"),
                    ChargeClaim::Take(_) | ChargeClaim::Dispute(_) => {
                        format!("new {} {id}", op.kind.sort_key())
                    }
                }
            }
            Ok(CreatedBeside::Existing(op)) => format!("existing {}", op.status),
            Ok(CreatedBeside::ChargeRefused(_)) => "charge refused".to_owned(),
            Err(e) => format!("error: {e}"),
        };
        if matches!(r, Ok(CreatedBeside::New(_))) && self.faults.roll(Kind::Crash) {
            self.trace.event(
                order,
                call,
                format_args!("{what}, then FAULT crash before the answer"),
            );
            return Err(crash(&format!("after {written}, before the answer")));
        }
        self.trace.event(order, call, format_args!("{what}"));
        r
    }
    /// The dispute's move (and its charge's side) written, then (a `crash` fault) the function
    /// dies before it hears so: the next delivery or read finds it written.
    async fn record_dispute(
        &self,
        req: &charge_core::store::DisputeMove,
    ) -> Result<charge_core::store::DisputeRecorded, StoreError> {
        use charge_core::store::DisputeRecorded;
        yield_now().await;
        let r = self.inner.record_dispute(req).await;
        let order = req.key.order_id.as_str();
        let what = match &r {
            Ok(DisputeRecorded::Written(op)) => {
                format!("written {} {}", op.kind.sort_key(), op.status)
            }
            Ok(DisputeRecorded::Refused(_)) => "refused".to_owned(),
            Ok(DisputeRecorded::ChargeRefused) => "charge refused".to_owned(),
            Err(e) => format!("error: {e}"),
        };
        if matches!(r, Ok(DisputeRecorded::Written(_))) && self.faults.roll(Kind::Crash) {
            self.trace.event(
                order,
                "store.record_dispute",
                format_args!("{what}, then FAULT crash before the answer"),
            );
            return Err(crash("after the dispute's move, before the answer"));
        }
        self.trace
            .event(order, "store.record_dispute", format_args!("{what}"));
        r
    }
    /// A new charge attempt written (the head naming it), then (a `crash` fault) the door dies
    /// before it answers: the client's retry finds the attempt and is answered with it.
    async fn create_attempt(
        &self,
        req: &charge_core::store::NewAttempt,
    ) -> Result<charge_core::store::CreatedAttempt, StoreError> {
        use charge_core::store::CreatedAttempt;
        yield_now().await;
        let r = self.inner.create_attempt(req).await;
        let order = req.op.order_id.as_str();
        let what = match &r {
            Ok(CreatedAttempt::New(op)) => {
                let id = op.operation_id.to_string();
                self.trace.alias(order, &id);
                format!("new {} {id}", op.kind.sort_key())
            }
            Ok(CreatedAttempt::Refused) => "refused".to_owned(),
            Err(e) => format!("error: {e}"),
        };
        if matches!(r, Ok(CreatedAttempt::New(_))) && self.faults.roll(Kind::Crash) {
            self.trace.event(
                order,
                "store.create_attempt",
                format_args!("{what}, then FAULT crash before the answer"),
            );
            return Err(crash("after the new attempt's write, before the answer"));
        }
        self.trace
            .event(order, "store.create_attempt", format_args!("{what}"));
        r
    }
}

#[async_trait]
impl OperationLeases for FaultyStore {
    async fn claim(&self, req: &ClaimRequest) -> Result<Claim, StoreError> {
        yield_now().await;
        let order = req.key.order_id.as_str();
        if self.blackouts.active(&req.operation_id, req.now) {
            self.trace.event(
                order,
                "store.claim",
                format_args!("unreachable (key_pruned)"),
            );
            return Err(StoreError::new(
                "operation unreachable (key_pruned scenario)",
            ));
        }
        let claim = match self.inner.claim(req).await {
            Ok(claim) => claim,
            Err(e) => {
                self.trace
                    .event(order, "store.claim", format_args!("error: {e}"));
                return Err(e);
            }
        };
        // Dies after taking the lease, before calling Stripe: the lease must expire first.
        if matches!(claim, Claim::Claimed(_)) && self.faults.roll(Kind::Crash) {
            self.trace.event(
                order,
                "store.claim",
                format_args!("claimed, then FAULT crash before Stripe"),
            );
            return Err(crash("after the claim, before Stripe"));
        }
        if matches!(claim, Claim::Claimed(_)) && self.freezer.fire() {
            self.freezer.clock.advance(self.freezer.freeze_for);
            self.trace.event(
                order,
                "store.claim",
                format_args!(
                    "claimed, then FAULT freeze: {} s pass (past the lease)",
                    self.freezer.freeze_for.as_secs()
                ),
            );
            return Ok(claim);
        }
        if self.trace.tracing() {
            let attempts = match &claim {
                Claim::Claimed(op) => format!(" (attempt {})", op.attempts),
                _ => String::new(),
            };
            self.trace.event(
                order,
                "store.claim",
                format_args!("{}{attempts}", claim_name(&claim)),
            );
        } else {
            self.trace
                .event(order, "store.claim", format_args!("{}", claim_name(&claim)));
        }
        Ok(claim)
    }

    async fn record(&self, rec: &OutcomeRecord) -> Result<Recorded, StoreError> {
        yield_now().await;
        let order = rec.key.order_id.as_str();
        // Dies after Stripe answered, before the outcome is written.
        if self.faults.roll(Kind::Crash) {
            self.trace.event(
                order,
                "store.record",
                format_args!("FAULT crash before recording {}", rec.status),
            );
            return Err(crash("after Stripe, before the record"));
        }
        let r = self.inner.record(rec).await;
        self.trace.event(
            order,
            "store.record",
            format_args!(
                "{} <- {}{}{}",
                RecordedName(&r),
                rec.status,
                Maybe(" ", rec.external_id.as_deref()),
                Maybe(" review: ", rec.review.as_ref().map(|r| &r.reason)),
            ),
        );
        r
    }

    async fn fail_refund_later(&self, req: &RefundFailedLater) -> Result<Recorded, StoreError> {
        yield_now().await;
        self.inner.fail_refund_later(req).await
    }
}

#[async_trait]
impl UnknownIndex for FaultyStore {
    async fn query_index(
        &self,
        query: IndexQuery,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        yield_now().await;
        let mut page = self.inner.query_index(query, cursor, limit).await?;
        let now = self.clock.now();
        page.operations
            .retain(|op| !self.blackouts.active(&op.operation_id, now));
        if page.unreadable.is_empty() {
            self.trace.event(
                "",
                "store.query_index",
                format_args!("{query:?} {} found", page.operations.len()),
            );
        } else {
            self.trace.event(
                "",
                "store.query_index",
                format_args!(
                    "{query:?} {} found, {} unreadable set aside",
                    page.operations.len(),
                    page.unreadable.len()
                ),
            );
        }
        Ok(page)
    }

    async fn reschedule(&self, req: &Reschedule) -> Result<Recorded, StoreError> {
        yield_now().await;
        let r = self.inner.reschedule(req).await;
        self.trace.event(
            req.key.order_id.as_str(),
            "store.reschedule",
            format_args!("{} due {} redrive", RecordedName(&r), req.next_due_at,),
        );
        r
    }
}

#[async_trait]
impl ManualResolutions for FaultyStore {
    async fn get_by_operation_id(
        &self,
        operation_id: &OperationId,
    ) -> Result<Option<Operation>, StoreError> {
        yield_now().await;
        self.inner.get_by_operation_id(operation_id).await
    }

    async fn resolve(&self, req: &ManualResolution) -> Result<Recorded, StoreError> {
        yield_now().await;
        self.inner.resolve(req).await
    }
}

// The settled index (the audit's and the refund watch's reads) as the store answers it: no fault
// is injected there (the reconciler's due work meets the store's faults).
crate::forward_store!(FaultyStore, inner: SettledRecords);

/// The queue as a sender sees it: lost sends, a crash before the send (checkout), and re-drives of
/// blacked-out operations that never arrive.
pub struct FaultyQueue {
    pub inner: Arc<dyn OperationQueue>,
    pub faults: Arc<Faults>,
    pub blackouts: Arc<Blackouts>,
    pub clock: Arc<dyn Clock>,
    pub trace: Arc<Trace>,
    /// Checkout's sender: may crash between PutItem and SendMessage.
    pub may_crash: bool,
}

#[async_trait]
impl OperationQueue for FaultyQueue {
    async fn send(&self, charge: &QueuedOperation) -> Result<(), QueueError> {
        yield_now().await;
        let order = charge.message.order_id.as_str();
        if self.may_crash && self.faults.roll(Kind::Crash) {
            self.trace.event(
                order,
                "queue.send",
                format_args!("FAULT crash after PutItem, before SendMessage"),
            );
            return Err(QueueError::new(
                "injected crash after PutItem, before SendMessage",
            ));
        }
        if self
            .blackouts
            .active(&charge.message.operation_id, self.clock.now())
        {
            self.trace.event(
                order,
                "queue.send",
                format_args!("lost (key_pruned blackout)"),
            );
            return Ok(());
        }
        if self.faults.roll(Kind::DroppedSend) {
            // The sender sees success; the message never arrives.
            self.trace.event(
                order,
                "queue.send",
                format_args!("FAULT dropped_send dedup {}", charge.dedup_id),
            );
            return Ok(());
        }
        let r = self.inner.send(charge).await;
        match &r {
            Ok(()) => self.trace.event(
                order,
                "queue.send",
                format_args!("sent dedup {}", charge.dedup_id),
            ),
            Err(e) => self
                .trace
                .event(order, "queue.send", format_args!("error: {e}")),
        }
        r
    }

    async fn depth(&self) -> Result<Option<charge_core::reconcile_plan::QueueDepth>, QueueError> {
        self.inner.depth().await
    }
}

/// Stripe as the charge function sees it, with the simulation's switches: the seeds' two
/// mistakes (`--no-idempotency-key`, `--no-retry`) and the `key_pruned` scenario.
pub struct SimGateway {
    pub inner: Arc<dyn PaymentGateway>,
    pub faults: Arc<Faults>,
    pub blackouts: Arc<Blackouts>,
    pub clock: Arc<dyn Clock>,
    pub trace: Arc<Trace>,
    /// A fresh key on every create, as an SDK-generated key would be.
    pub no_idempotency_key: bool,
    /// Every error is taken as a final failure, as naive code does.
    pub no_retry: bool,
    /// The `key_pruned` operations whose first create was made.
    first_create_seen: Mutex<FxHashSet<OperationId>>,
    /// Customers who come back to a declined intent (`customer_confirms_declined`).
    pub confirms: Option<Arc<Confirms>>,
    /// What refund calls met.
    pub refund_audit: Arc<RefundAudit>,
}

/// A gateway's answer as the trace says it.
struct AnswerText<'a>(&'a Result<PaymentIntent, GatewayError>);

impl std::fmt::Display for AnswerText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Ok(pi) => write!(
                f,
                "{} {}{}",
                pi.id,
                pi.status,
                if pi.replayed { " (replayed)" } else { "" }
            ),
            Err(e) => write!(f, "{e}"),
        }
    }
}

/// A refund answer as the trace says it.
struct RefundText<'a>(&'a Result<StripeRefund, GatewayError>);

impl std::fmt::Display for RefundText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Ok(r) => write!(f, "{} {}", r.id, r.status),
            Err(e) => write!(f, "{e}"),
        }
    }
}

impl SimGateway {
    pub fn new(
        inner: Arc<dyn PaymentGateway>,
        faults: Arc<Faults>,
        blackouts: Arc<Blackouts>,
        clock: Arc<dyn Clock>,
        trace: Arc<Trace>,
        no_idempotency_key: bool,
        no_retry: bool,
    ) -> Self {
        Self {
            inner,
            faults,
            blackouts,
            clock,
            trace,
            no_idempotency_key,
            no_retry,
            first_create_seen: Mutex::new(Default::default()),
            confirms: None,
            refund_audit: Arc::default(),
        }
    }

    fn naive<T>(&self, result: Result<T, GatewayError>) -> Result<T, GatewayError> {
        match result {
            Err(GatewayError::Ambiguous { detail } | GatewayError::RetryLater { detail, .. })
                if self.no_retry =>
            {
                Err(GatewayError::Declined {
                    code: format!("error taken as failure: {detail}"),
                    payment_intent_id: None,
                })
            }
            other => other,
        }
    }
}

crate::forward_gateway!(SimGateway, inner: StripeAccount);

#[async_trait]
impl PaymentIntents for SimGateway {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        yield_now().await;
        let mut req = req.clone();
        if self.no_idempotency_key {
            req.idempotency_key =
                OperationId::from_uuid(charge_core::ids::fresh_uuid()).idempotency_key();
        }
        let op = req.operation_id.to_string();
        // Only the operations the scenario picks need their first create remembered.
        let pruned = self.faults.fixed(Kind::KeyPruned, &op);
        let first = pruned
            && self
                .first_create_seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(req.operation_id);
        let result = self.inner.create(&req).await;
        match &result {
            Ok(pi) => self.trace.alias(&op, &pi.id),
            Err(GatewayError::Declined {
                payment_intent_id: Some(id),
                ..
            }) => self.trace.alias(&op, id),
            Err(_) => {}
        }
        if first && result.is_ok() {
            self.faults.count(Kind::KeyPruned);
            self.blackouts.start(req.operation_id, self.clock.now());
            self.trace.event(
                &op,
                "stripe.create",
                format_args!(
                    "{} -> {}, then FAULT key_pruned: answer lost, unreachable past 24 h",
                    req.idempotency_key.as_str(),
                    AnswerText(&result)
                ),
            );
            return self.naive(Err(GatewayError::Ambiguous {
                detail: "connection lost (key_pruned scenario)".into(),
            }));
        }
        self.trace.event(
            &op,
            "stripe.create",
            format_args!(
                "{} -> {}",
                req.idempotency_key.as_str(),
                AnswerText(&result)
            ),
        );
        if let (
            Some(confirms),
            Err(GatewayError::Declined {
                payment_intent_id: Some(id),
                ..
            }),
        ) = (&self.confirms, &result)
        {
            confirms
                .declined(req.operation_id, req.order_id.as_str(), id)
                .await;
        }
        self.naive(result)
    }

    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError> {
        yield_now().await;
        let result = self.inner.retrieve(id).await;
        self.trace.event(
            id,
            "stripe.retrieve",
            format_args!("{}", AnswerText(&result)),
        );
        self.naive(result)
    }

    async fn search_by_operation(
        &self,
        operation_id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        yield_now().await;
        let result = self.inner.search_by_operation(operation_id).await;
        let op = operation_id.to_string();
        self.trace.event(
            &op,
            "stripe.search",
            format_args!(
                "{}",
                match &result {
                    Ok(found) => format!(
                        "{} found: {}",
                        found.len(),
                        found
                            .iter()
                            .map(|p| format!("{} {}", p.id, p.status))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    Err(e) => e.to_string(),
                }
            ),
        );
        match result {
            Err(e) => self.naive(Err(e)).map(|pi| vec![pi]),
            ok => ok,
        }
    }

    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        yield_now().await;
        let result = self.inner.cancel(req).await;
        self.trace.event(
            &req.id,
            "stripe.cancel",
            format_args!(
                "{} -> {}",
                req.idempotency_key.as_str(),
                AnswerText(&result)
            ),
        );
        self.naive(result)
    }

    /// Traced as a cancel is. Stripe's transport faults reach a capture from the simulator's
    /// engine, which faults it as a cancel (a `429` or a `500` before it executes, the answer
    /// lost or a `500` after it did; each counted in its injected faults), and the in-process
    /// client retries it under the same key.
    async fn capture(&self, req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        yield_now().await;
        let result = self.inner.capture(req).await;
        self.trace.event(
            &req.id,
            "stripe.capture",
            format_args!(
                "{} {} -> {}",
                req.idempotency_key.as_str(),
                req.amount_to_capture.minor_units(),
                AnswerText(&result)
            ),
        );
        self.naive(result)
    }
}

#[async_trait]
impl StripeRefunds for SimGateway {
    // Refunds get the switches (a fresh key with `--no-idempotency-key`, every error final with
    // `--no-retry`), the `key_pruned` scenario as a charge does, and Stripe's own faults from the
    // simulator's engine (its refund create is faulted as a create, its reads as reads); what
    // each call met is counted ([`RefundAudit`]).

    async fn create_refund(&self, req: &CreateRefund) -> Result<StripeRefund, GatewayError> {
        yield_now().await;
        let mut req = req.clone();
        if self.no_idempotency_key {
            req.idempotency_key =
                OperationId::from_uuid(charge_core::ids::fresh_uuid()).refund_idempotency_key();
        }
        let op = req.operation_id.to_string();
        let first = self.faults.fixed(Kind::KeyPruned, &op)
            && self
                .first_create_seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(req.operation_id);
        let result = self.inner.create_refund(&req).await;
        self.refund_audit.note(req.order_id.as_str(), &result);
        if let Ok(r) = &result {
            self.trace.alias(&op, &r.id);
        }
        if first && result.is_ok() {
            self.faults.count(Kind::KeyPruned);
            self.blackouts.start(req.operation_id, self.clock.now());
            self.trace.event(
                &op,
                "stripe.refund",
                format_args!(
                    "{} -> {}, then FAULT key_pruned: answer lost, unreachable past 24 h",
                    req.idempotency_key.as_str(),
                    RefundText(&result)
                ),
            );
            return self.naive(Err(GatewayError::Ambiguous {
                detail: "connection lost (key_pruned scenario)".into(),
            }));
        }
        self.trace.event(
            &op,
            "stripe.refund",
            format_args!(
                "{} -> {}",
                req.idempotency_key.as_str(),
                RefundText(&result)
            ),
        );
        self.naive(result)
    }

    async fn retrieve_refund(&self, id: &StripeRefundId) -> Result<StripeRefund, GatewayError> {
        yield_now().await;
        let result = self.inner.retrieve_refund(id).await;
        self.refund_audit.note("", &result);
        self.trace.event(
            id,
            "stripe.retrieve_refund",
            format_args!("{}", RefundText(&result)),
        );
        self.naive(result)
    }

    async fn list_refunds(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<StripeRefund>, GatewayError> {
        yield_now().await;
        let result = self.inner.list_refunds(payment_intent).await;
        self.refund_audit.note("", &result);
        let text = match &result {
            Ok(found) => found
                .iter()
                .map(|r| format!("{} {}", r.id, r.status))
                .collect::<Vec<_>>()
                .join(", "),
            Err(e) => e.to_string(),
        };
        self.trace.event(
            payment_intent,
            "stripe.list_refunds",
            format_args!("{text}"),
        );
        self.naive(result)
    }
}

/// A dispute's status and amount as a trace line.
fn dispute_text(d: &charge_core::dispute::StripeDispute) -> String {
    format!("{} {} {}", d.id, d.status, d.amount)
}

/// Dispute reads pass through unchanged (no fault of this layer is about them), traced; a
/// naive client takes an unknown answer as a failure here as everywhere.
#[async_trait]
impl charge_once::ports::StripeDisputes for SimGateway {
    async fn retrieve_dispute(
        &self,
        id: &charge_core::domain::DisputeId,
    ) -> Result<charge_core::dispute::StripeDispute, GatewayError> {
        yield_now().await;
        let result = self.inner.retrieve_dispute(id).await;
        let text = match &result {
            Ok(d) => dispute_text(d),
            Err(e) => e.to_string(),
        };
        self.trace
            .event(id, "stripe.retrieve_dispute", format_args!("{text}"));
        self.naive(result)
    }

    async fn list_disputes(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<charge_core::dispute::StripeDispute>, GatewayError> {
        yield_now().await;
        let result = self.inner.list_disputes(payment_intent).await;
        let text = match &result {
            Ok(found) => found
                .iter()
                .map(dispute_text)
                .collect::<Vec<_>>()
                .join(", "),
            Err(e) => e.to_string(),
        };
        self.trace.event(
            payment_intent,
            "stripe.list_disputes",
            format_args!("{text}"),
        );
        self.naive(result)
    }
}

/// The dispute watch's list passes through unchanged (no fault of this layer is about it),
/// traced; a naive client takes an unknown answer as a failure here as everywhere.
#[async_trait]
impl CreatedLists for SimGateway {
    async fn list_disputes_created(
        &self,
        window: &charge_core::audit::AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<charge_once::ports::ListPage<charge_core::dispute::StripeDispute>, GatewayError>
    {
        yield_now().await;
        let result = self
            .inner
            .list_disputes_created(window, starting_after)
            .await;
        let text = match &result {
            Ok(page) => page
                .items
                .iter()
                .map(dispute_text)
                .collect::<Vec<_>>()
                .join(", "),
            Err(e) => e.to_string(),
        };
        self.trace.event(
            "disputes",
            "stripe.list_disputes_created",
            format_args!("{text}"),
        );
        self.naive(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_arguments() {
        assert_eq!(
            parse_fault("lost_response=0.1").unwrap(),
            (Kind::LostResponse, 0.1)
        );
        assert!(parse_fault("lost_response").is_err());
        assert!(parse_fault("lost_response=2").is_err());
        assert!(parse_fault("nonsense=0.1").unwrap_err().contains("known"));
        for k in Kind::ALL {
            assert_eq!(k.name().parse::<Kind>().unwrap(), k);
        }
    }

    #[test]
    fn fixed_decisions_follow_the_rate_and_the_seed() {
        let faults = Faults::new(7, BTreeMap::from([(Kind::Decline, 0.25)]));
        let hits = (0..10_000)
            .filter(|i| faults.fixed(Kind::Decline, &format!("ord-{i}")))
            .count();
        assert!((2_200..2_800).contains(&hits), "{hits}");
        let again = Faults::new(7, BTreeMap::from([(Kind::Decline, 0.25)]));
        assert!((0..100).all(|i| faults.fixed(Kind::Decline, &i.to_string())
            == again.fixed(Kind::Decline, &i.to_string())));
        assert!(
            !faults.fixed(Kind::Processing, "ord-1"),
            "rate 0 never fires"
        );
    }

    #[test]
    fn rolls_are_counted() {
        let faults = Faults::new(1, BTreeMap::from([(Kind::Crash, 1.0)]));
        assert!(faults.roll(Kind::Crash));
        assert!(!faults.roll(Kind::DroppedSend));
        assert_eq!(faults.counted()[&Kind::Crash], 1);
        assert_eq!(faults.counted()[&Kind::DroppedSend], 0);
    }
}
