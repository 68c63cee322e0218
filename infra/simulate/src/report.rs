//! What happened, checked against the Stripe simulator's ledger — what really exists at Stripe —
//! not against our own records.
//!
//! Invariants:
//! 1. no order has more than one succeeded PaymentIntent, nor PaymentIntents under two keys
//!    (`double_charges`);
//! 2. every accepted order ends succeeded, failed or in review (`unconverged`), and an order whose
//!    card works is charged unless a person holds it in review (`lost_charges`);
//! 3. our record agrees with Stripe for every settled order (`record_mismatches`), and in
//!    particular no operation ends `failed` while Stripe holds a succeeded PaymentIntent for it
//!    (`failed_but_paid`, counted apart: a declined intent the customer could still confirm, and
//!    did — `customer_confirms_declined` — must have been canceled before `failed` was recorded);
//! 4. review only where a person is needed: never when exactly one PaymentIntent exists under our
//!    key, which search would have found (`needless_reviews`) — unless that intent is stuck
//!    (`requires_action` / `processing` past the stuck bound), which only a person can unblock.
//!
//! 5. the order service learns every outcome, and nothing else: every settled operation
//!    published its outcome's `event_id`, and no operation published a settled outcome its record
//!    does not hold, nor any outcome once it stopped being its order's record
//!    (`unpublished_outcomes`, `false_outcome_events`). Checked where the store plays the table's
//!    stream (the memory backend); `outcome_events` is then the number published.
//!
//! 6. an event is a hint, Stripe the proof: no forged event — validly delivered, signed or in a
//!    proper EventBridge envelope, naming a state Stripe does not hold — moved a record
//!    (`forged_settles`: the operations whose record a forged delivery was answered as applied
//!    on, see [`crate::webhooks::Forged`]). The refusals are counted (`event_mismatches`: forged
//!    events refused and paged), which proves the fault really happened.
//!
//! 7. the reconciler never fails a tick: not on a record in an earlier release's shape
//!    (`legacy_record`), not on one nobody can read (`unreadable_record`: its page sets it aside
//!    and settles the rest) — `failed_ticks` must be 0; and every record is readable at the end,
//!    once the operator repaired the unreadable ones (`unreadable_at_end`).
//!
//! 8. authorizations (`--authorizations`): no capture over the authorization, never both
//!    captured and canceled, every capture and cancel converges, no authorization lapses without
//!    a page before its deadline, records agree with Stripe's holds and their `ChargeAuthorized`
//!    events with the records ([`AuthorizationReport`]).
//!
//! Also counted: poison messages parked on the dead-letter queue (each acknowledged at once, so
//! its group went on), stuck intents sent to review (`stuck_reviews`), and EventBridge events
//! whose invocation failed three times (`events_dead_lettered`: on the events function's DLQ; the
//! reconciler still settles their operations). A refund that failed late at Stripe while every
//! event saying so went there stays recorded `succeeded` for a person to replay: counted
//! (`failed_late_in_events_dlq`), not a mismatch, and the drift audit must report it.

mod authorizations;
mod disputes;
mod retries;
mod section;
pub use disputes::DisputeReport;
pub use retries::RetryReport;

pub use authorizations::{
    judge as judge_authorization, AuthorizationReport, IntentAtStripe, OrderAuthorization,
};

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;

use charge_core::outbox::Outcome;
use charge_core::{
    domain::OperationId,
    operation::{Operation, OperationStatus},
};
use serde::Serialize;

use super::driver::Order;
use super::store::Published;
use super::stripe::{Ledger, LedgerRow};
use crate::fx::FxHashMap;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub seed: u64,
    pub backend: String,
    pub orders: u64,
    pub accepted: u64,
    pub payment_intents_created: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub in_review: u64,
    pub double_charges: u64,
    pub lost_charges: u64,
    pub unconverged: u64,
    pub record_mismatches: u64,
    /// Invariant: operations that ended `failed` while Stripe holds a succeeded PaymentIntent for
    /// them (their customer paid a declined intent nobody canceled). Must stay 0.
    pub failed_but_paid: u64,
    pub needless_reviews: u64,
    /// Poison messages the charge function parked on the dead-letter queue.
    pub poison_messages: u64,
    /// Operations in review because their PaymentIntent was stuck past the bound.
    pub stuck_reviews: u64,
    /// PaymentIntents whose operation is no order's record: money taken that nothing accounts for.
    pub orphan_charges: u64,
    /// Outcome events the relay published to the order service, when the run can see the stream.
    pub outcome_events: Option<u64>,
    /// Settled operations whose outcome event was never published.
    pub unpublished_outcomes: u64,
    /// Operations that published an outcome their record does not hold (or that are no order's
    /// record any more): the order service was told something false.
    pub false_outcome_events: u64,
    /// Audit at the store: outcome writes that landed from a writer without the current lease.
    pub stale_lease_writes: u64,
    /// Audit at the queue: sends whose dedup id is not derived from the operation id.
    pub foreign_dedup_ids: u64,
    /// The broken variant this run simulates (mutation suite), if any.
    pub mutation: Option<String>,
    /// Why operations went to review, with how many.
    pub review_reasons: BTreeMap<String, u64>,
    pub faults_injected: BTreeMap<String, u64>,
    pub loop_counts: BTreeMap<String, u64>,
    pub requests_total: BTreeMap<String, u64>,
    pub requests_per_charge: BTreeMap<String, f64>,
    pub virtual_hours: f64,
    pub wall_secs: f64,
    pub orders_per_sec: f64,
    pub invariants_hold: bool,
    /// Calls Stripe refused for capacity (a remote `stripe-sim`'s own rate limits, not an
    /// injected fault).
    pub capacity_429s: u64,
    /// A remote `stripe-sim`'s rate limits as the run found them and ran them (`None`: Stripe in
    /// process or embedded, without limits).
    pub stripe_capacity: Option<String>,
    /// Why this run's counts are not to be read as the system's although every invariant held:
    /// Stripe refused more than one call in twenty orders for capacity (the functions' calls
    /// went over its limits: pacing on another clock than its limits refill on sent 88 calls
    /// per charge, every one but the first refused).
    pub flagged: Option<String>,
    /// The first order that broke an invariant, and how.
    pub first_violation: Option<String>,
    /// CPU seconds of the process during the run (user + system): the honest figure on a shared box.
    pub cpu_secs: f64,
    /// Simulated seconds per wall second (`virtual_hours` over `wall_secs`), the unit other
    /// simulation-testing projects publish.
    pub sim_secs_per_wall_sec: f64,
    /// SQS messages sent per wall second (`requests_total.sqs_sends`).
    pub messages_per_wall_sec: f64,
    /// Table calls per wall second (`requests_total.dynamodb_reads` + `dynamodb_writes`).
    pub store_calls_per_wall_sec: f64,
    /// Stripe requests per wall second (`requests_total.stripe_calls`).
    pub stripe_calls_per_wall_sec: f64,
    /// Logged decisions per wall second (`trace_events`).
    pub decisions_per_wall_sec: f64,
    /// The process's peak resident memory so far, MB (`VmHWM`; 0 where unknown).
    pub peak_rss_mb: f64,
    /// Memory backend and Stripe in process: the same seed and flags give the same report.
    pub deterministic: bool,
    /// Decisions logged (deliveries, store and gateway calls and answers, sends, ticks, faults).
    pub trace_events: u64,
    /// FNV-1a over the ordered decision log: equal for equal runs.
    pub trace_hash: String,
    /// Where Stripe's events came from: `eventbridge`, `webhook` or `none` (`--events`).
    pub events: String,
    /// Stripe's events came as signed webhooks (`--events webhook`).
    pub webhooks: bool,
    /// What happened to Stripe's events (either source) and what the events function spent on
    /// them.
    pub webhook_counts: BTreeMap<String, u64>,
    /// Invariant: operations whose record a forged event moved. Must stay 0.
    pub forged_settles: u64,
    /// Forged events the events function refused as a mismatch and paged on (> 0 whenever
    /// forged events were injected: the fault really happened).
    pub event_mismatches: u64,
    /// EventBridge events whose invocation failed three times (Lambda's two retries): on the
    /// events function's on-failure DLQ.
    pub events_dead_lettered: u64,
    /// Audit: Stripe creates made by the events function. Must stay 0 (it settles, never creates).
    pub webhook_creates: u64,
    /// Audit at the store: writes that changed a settled record. Must stay 0.
    pub settled_changes: u64,
    /// Invariant: reconciler ticks whose handler returned an error. Must stay 0.
    pub failed_ticks: u64,
    /// The first failed tick's error.
    pub first_failed_tick: Option<String>,
    /// Unreadable records the reconciler's ticks counted (their `UnreadableRecords` metric,
    /// summed: a record due through several ticks is counted by each).
    pub unreadable_counted: u64,
    /// Unreadable records an operator repaired (after `store::REPAIR_AFTER`).
    pub unreadable_repaired: u64,
    /// Customers who came back to a declined PaymentIntent (`customer_confirms_declined`) and
    /// paid it (Stripe still allowed it: they came before our cancel), and those Stripe refused
    /// (canceled).
    pub customer_confirms_paid: u64,
    pub customer_confirms_refused: u64,
    /// Invariant: orders whose record could not be read after the run. Must stay 0.
    pub unreadable_at_end: u64,
    /// How long operations that went `unknown` took to settle (virtual time).
    pub time_to_settle: TimeToSettle,
    /// The same, for the unknowns whose PaymentIntent was already final at Stripe (a lost or
    /// failed answer, not a `processing` payment that Stripe settles minutes later).
    pub time_to_settle_final_at_stripe: TimeToSettle,
    /// Refunds (`--refunds`): what was asked, what the door answered, and the refund invariants.
    pub refunds: RefundReport,
    /// Authorizations (`--authorizations`): captured, canceled, raced or forgotten, and their
    /// invariants.
    pub authorizations: AuthorizationReport,
    /// Disputes (`--disputes`): opened by the bank, answered or not, and their invariants.
    pub disputes: DisputeReport,
    /// Declined orders charged again (`--retries`): asked, answered, and their invariants.
    pub retries: RetryReport,
    /// The production drift audit over the run's windows, against the drift injected (memory
    /// store, Stripe in this process; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit: Option<crate::drift::AuditSummary>,
    /// The load model's figures (`--arrival-rate`), absent in the default mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadReport>,
}

/// Refunds asked through the door and judged against Stripe's refunds.
///
/// Invariants (each must stay 0):
/// - `double_refunds`: refund operations with more than one refund at Stripe (by its
///   `metadata[operation_id]`), or a refund id the door answered with two operations;
/// - `over_refunds`: PaymentIntents whose refunds at Stripe that are not failed or canceled add
///   up to more than was charged; charge records reserving more than was charged at the end, or
///   at any write (`over_reserved_writes`, the store's audit); refund creates Stripe refused as
///   more than is left (`refused_over`: a right reservation never asks it);
/// - `reservation_mismatches`: a charge record whose reservation is not the sum of its refunds
///   that are not `failed`;
/// - `lost_refunds`: a refund the door accepted (2xx) whose record is missing, names another
///   operation, or ended `failed` without Stripe having failed or canceled a refund of it (money
///   promised and never returned);
/// - `unconverged`: a refund record neither settled nor in review at the end;
/// - `record_mismatches`: a refund record that disagrees with Stripe (`succeeded` without its
///   succeeded refund there, `failed` while Stripe holds one not failed);
/// - `needless_reviews`: a refund in review for anything but a refund stuck at Stripe past the
///   bound (`stuck_refund`): nothing else in the simulation needs a person (Stripe refuses no
///   refund a right reservation asks for);
/// - `orphans`: refunds at Stripe that no refund record accounts for;
/// - `event_mismatches`: a settled refund whose outcome event was not published, or that
///   published an outcome its record does not hold.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RefundReport {
    /// `--refunds`: the share of orders asked for refunds.
    pub rate: f64,
    /// Orders that got refund requests.
    pub orders: u64,
    /// Requests sent to the door (a 503 sent again counted twice).
    pub asked: u64,
    /// The door's answers by status and error code.
    pub answers: BTreeMap<String, u64>,
    /// Distinct refunds (order, refund id) the door accepted.
    pub accepted: u64,
    pub records: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub in_review: u64,
    /// Refunds at Stripe (by the simulator's refund ledger).
    pub at_stripe: u64,
    /// Refunds that succeeded and then failed at Stripe (`refund_fails_later`), and the records
    /// of those that ended `failed` (their reservation given back: `reservation_mismatches`).
    pub failed_late_at_stripe: u64,
    pub failed_late_recorded: u64,
    /// Of those still recorded `succeeded`, the ones whose every chance to be told was an
    /// event that went to the events DLQ (its invocation failed three times): a person replays
    /// them (`StripeEventsDeadLetterAlarm`), and the drift audit must report each
    /// (`status_differs`). Their Stripe refund ids.
    pub failed_late_in_events_dlq: Vec<String>,
    /// The reconciler's refund watch: succeeded refunds read again at Stripe, and the late
    /// failures it recorded (each paged, `RefundFailedAfterSuccess` under the reconciler).
    pub watch_reads: u64,
    pub failed_late_by_watch: u64,
    /// Refund calls to Stripe (create, retrieve, list) and the errors they met, by class.
    pub stripe_calls: u64,
    pub stripe_errors: BTreeMap<String, u64>,
    pub double_refunds: u64,
    pub over_refunds: u64,
    pub over_reserved_writes: u64,
    pub refused_over: u64,
    pub reservation_mismatches: u64,
    pub lost_refunds: u64,
    pub unconverged: u64,
    pub record_mismatches: u64,
    pub needless_reviews: u64,
    pub orphans: u64,
    pub event_mismatches: u64,
    /// Whether Stripe's refunds could be read (Stripe in this process).
    pub judged_at_stripe: bool,
}

impl RefundReport {
    pub fn holds(&self) -> bool {
        self.double_refunds == 0
            && self.over_refunds == 0
            && self.reservation_mismatches == 0
            && self.lost_refunds == 0
            && self.unconverged == 0
            && self.record_mismatches == 0
            && self.needless_reviews == 0
            && self.orphans == 0
            && self.event_mismatches == 0
    }

    fn render(&self, s: &mut String) {
        let answers: Vec<String> = self
            .answers
            .iter()
            .map(|(k, n)| format!("{k} × {n}"))
            .collect();
        let _ = writeln!(
            s,
            "  refunds         rate {}: {} orders, {} asked, {} accepted; records {}: succeeded {}  failed {} (late {} of {} failed late at Stripe{})  in review {}; at Stripe {}{}",
            self.rate,
            self.orders,
            self.asked,
            self.accepted,
            self.records,
            self.succeeded,
            self.failed,
            self.failed_late_recorded,
            self.failed_late_at_stripe,
            match (self.failed_late_in_events_dlq.len(), self.failed_late_by_watch) {
                (0, 0) => String::new(),
                (0, w) => format!("; {w} by the refund watch"),
                (n, w) => format!(
                    "; {w} by the refund watch; {n} only in the events DLQ, for a person"
                ),
            },
            self.in_review,
            self.at_stripe,
            if self.judged_at_stripe { "" } else { " (not read: Stripe not in this process)" }
        );
        let _ = writeln!(s, "  refund answers  {}", answers.join(", "));
        let errors: Vec<String> = self
            .stripe_errors
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(
            s,
            "  refund calls    {} to Stripe; errors met: {}",
            self.stripe_calls,
            if errors.is_empty() {
                "none".to_owned()
            } else {
                errors.join(", ")
            }
        );
        let _ = writeln!(
            s,
            "  refund invariants double refunds {}  over-refunds {} (over-reserved writes {}, refused by Stripe as over {})  reservation mismatches {}  lost refunds {}  unconverged {}  record mismatches {}  needless reviews {}  orphan refunds {}  event mismatches {}",
            self.double_refunds,
            self.over_refunds,
            self.over_reserved_writes,
            self.refused_over,
            self.reservation_mismatches,
            self.lost_refunds,
            self.unconverged,
            self.record_mismatches,
            self.needless_reviews,
            self.orphans,
            self.event_mismatches
        );
    }
}

/// Stripe's refunds, indexed by the operation that made them and the PaymentIntent refunded.
#[derive(Default)]
pub struct RefundLedger {
    all: Vec<stripe_sim::RefundEntry>,
    by_operation: FxHashMap<String, Vec<usize>>,
    by_intent: FxHashMap<String, Vec<usize>>,
}

impl RefundLedger {
    pub fn new(all: Vec<stripe_sim::RefundEntry>) -> Self {
        let mut ledger = Self::default();
        // Stripe's own record of an authorization's released part (before basil) is no refund
        // of money taken: the audit matches it; these invariants are about ours.
        let all: Vec<_> = all
            .into_iter()
            .filter(|r| r.reason.as_deref() != Some(stripe_sim::version::RELEASED_REASON))
            .collect();
        for (i, r) in all.iter().enumerate() {
            if let Some(op) = &r.operation_id {
                ledger.by_operation.entry(op.clone()).or_default().push(i);
            }
            ledger
                .by_intent
                .entry(r.payment_intent.clone())
                .or_default()
                .push(i);
        }
        ledger.all = all;
        ledger
    }

    fn of_operation(&self, op: &str) -> impl Iterator<Item = &stripe_sim::RefundEntry> {
        self.by_operation
            .get(op)
            .into_iter()
            .flatten()
            .map(|i| &self.all[*i])
    }

    /// What the refunds of `pi` that hold money (not failed, not canceled) add up to.
    fn held_of_intent(&self, pi: &str) -> i64 {
        self.by_intent
            .get(pi)
            .into_iter()
            .flatten()
            .map(|i| &self.all[*i])
            .filter(|r| holds(&r.status))
            .map(|r| r.amount)
            .sum()
    }

    fn with_operation(&self) -> u64 {
        self.by_operation.values().map(|v| v.len() as u64).sum()
    }
}

/// A Stripe refund in this status holds money (counted in `amount_refunded`).
fn holds(status: &str) -> bool {
    !matches!(status, "failed" | "canceled")
}

/// One order's refunds as the judge reads them.
pub struct OrderRefunds<'r> {
    pub charge: Option<&'r Operation>,
    /// The order's refund records (one per refund id asked that has one).
    pub records: &'r [Operation],
    /// The refunds the door accepted, by refund id.
    pub accepted: &'r [(String, crate::refund_asks::Accepted)],
    /// The outcomes each record published, where the run can see them (same order as `records`).
    pub published: Option<Vec<Published>>,
    /// What the order's dispute records hold reserved on its charge (a dispute that withdrew
    /// funds reserves its amount beside the refunds; won gives it back).
    pub disputes_reserved: i64,
}

/// What a load run measured (virtual time throughout).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LoadReport {
    pub orders: u64,
    pub arrival_rate: f64,
    pub charge_concurrency: u32,
    pub create_limit: u32,
    /// The create latency's median, ms.
    pub create_latency_p50_ms: u64,
    /// The account's budget (`StripeRequestsPerSecond`).
    pub stripe_rps: u64,
    /// Each endpoint's budget (`StripeEndpointRequestsPerSecond`).
    pub stripe_endpoint_rps: u64,
    pub pacing: bool,
    /// Operations that settled (succeeded, failed or review) before the run's bound: the
    /// orders' charges, and in a mixed burst the captures and refunds asked of them.
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
    /// `SendMessage` calls to the charge queue: checkout's, the reconciler's re-enqueues and
    /// re-drives.
    pub sqs_sends: u64,
    /// `sqs_sends / orders`: 1 when nothing is sent twice.
    pub sends_per_order: f64,
    /// Operations the reconciler left to a queue that was behind instead of re-enqueuing.
    pub waited_for_queue: u64,
    /// Checkouts not answered 2xx.
    pub checkout_errors: u64,
    /// FNV-1a over the settle log and Stripe's counters: equal for equal runs.
    pub fingerprint: String,
    /// A mixed burst's captures and refunds, and Stripe's endpoints and account under them.
    pub mix: Option<MixReport>,
}

/// A mixed burst: captures and refunds the order service asked while the charges ran, and what
/// every endpoint and the account took.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct MixReport {
    /// Stripe's overall limit of the account in the run, requests/s.
    pub account_limit: u32,
    /// Captures and refunds the door accepted (each asked again until it was).
    pub captures_accepted: u64,
    pub refunds_accepted: u64,
    /// Asks the door refused for good.
    pub ask_errors: u64,
    /// Refunds Stripe made (its ledger).
    pub refunds_at_stripe: u64,
    /// PaymentIntents refunded more than their amount, or by more than one refund: must be 0.
    pub over_refunded: u64,
    /// PaymentIntents that ended `succeeded` (charged, or authorized and captured): one per
    /// order.
    pub succeeded_at_stripe: u64,
    /// First arrival → the last charge authorized or settled, s.
    pub charges_done_secs: f64,
    /// Capacity 429s by endpoint, and those the account's bucket refused: Stripe's own judgement
    /// of whether each endpoint and the account stayed under its limit.
    pub create_429s: u64,
    pub refund_429s: u64,
    pub capture_429s: u64,
    pub account_429s: u64,
}

impl MixReport {
    pub fn render(&self) -> String {
        format!(
            "  mixed           captures {} and refunds {} accepted ({} refused for good); at Stripe {} refunds, {} over-refunded, {} PaymentIntents succeeded\n\
             \x20 charges done    {:.1} s (the last authorized or settled); capacity 429s create {}, refund {}, capture {}, account {} (account limit {}/s)\n",
            self.captures_accepted,
            self.refunds_accepted,
            self.ask_errors,
            self.refunds_at_stripe,
            self.over_refunded,
            self.succeeded_at_stripe,
            self.charges_done_secs,
            self.create_429s,
            self.refund_429s,
            self.capture_429s,
            self.account_429s,
            self.account_limit,
        )
    }
}

impl LoadReport {
    pub fn render(&self) -> String {
        format!(
            "  load            {} orders at {}/s, charge concurrency {}, create limit {}/s (p50 {} ms), budget {}/s (each endpoint {}/s), pacing {}\n\
             \x20 drain           {:.1} s (N/L {:.1} s, ratio {:.3}); settled {}\n\
             \x20 checkout→settled p50 {:.2} s  p99 {:.2} s  max {:.2} s (slowest create {:.2} s)\n\
             \x20 at Stripe       creates {} ({:.3} per charge), reads {}, capacity 429s {}\n\
             \x20 queue           oldest message {:.1} s, orders that waited a visibility timeout {}, returned soon {}, batches {}, dead-lettered {}\n\
             \x20 sends           {} to the charge queue ({:.3} per order); left to the queue by the reconciler {}\n\
             \x20 reconciler      {} ticks; checkout errors {}; fingerprint {}\n",
            self.orders,
            self.arrival_rate,
            self.charge_concurrency,
            self.create_limit,
            self.create_latency_p50_ms,
            self.stripe_rps,
            self.stripe_endpoint_rps,
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
            self.sqs_sends,
            self.sends_per_order,
            self.waited_for_queue,
            self.reconciler_ticks,
            self.checkout_errors,
            self.fingerprint,
        ) + &self.mix.as_ref().map(MixReport::render).unwrap_or_default()
    }
}

/// Time to settle of the operations that went `unknown` (memory backend only).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TimeToSettle {
    /// Operations that were `unknown` at some point.
    pub went_unknown: u64,
    /// Of those, how many settled (the others are in review or never converged).
    pub settled: u64,
    pub median_secs: f64,
    pub p99_secs: f64,
    pub max_secs: f64,
}

impl TimeToSettle {
    /// From the settle times in milliseconds (nearest-rank percentiles).
    pub fn of(went_unknown: u64, mut times_ms: Vec<i64>) -> Self {
        times_ms.sort_unstable();
        let rank = |p: f64| -> f64 {
            if times_ms.is_empty() {
                return 0.0;
            }
            let i = ((p * times_ms.len() as f64).ceil() as usize).clamp(1, times_ms.len()) - 1;
            times_ms[i] as f64 / 1000.0
        };
        Self {
            went_unknown,
            settled: times_ms.len() as u64,
            median_secs: rank(0.5),
            p99_secs: rank(0.99),
            max_secs: times_ms.last().map_or(0.0, |t| *t as f64 / 1000.0),
        }
    }
}

/// Judges orders one by one against the ledger, read an operation at a time (so neither the
/// orders nor the ledger need be held in memory).
pub struct Judge<'a> {
    ledger: &'a dyn Ledger,
    ours: Ours<'a>,
    /// Orders whose record a forged event moved.
    forged: BTreeSet<String>,
    /// Succeeded PaymentIntents of the records judged (each under its record's operation id).
    succeeded_ours: u64,
    /// Stripe's refunds, where they can be read.
    refunds: Option<RefundLedger>,
    /// Stripe refunds naming a judged refund record's operation.
    refunds_ours: u64,
    /// Stripe refunds an event about which went to the events DLQ.
    dead_lettered_refunds: BTreeSet<String>,
}

/// What the judge needs of the PaymentIntents an operation's metadata names, read borrowed.
struct OperationsIntents {
    /// How many succeeded.
    succeeded: usize,
    /// Whether a succeeded one is the record's `external_id`.
    external_succeeded: bool,
    /// Whether they were created under more than one idempotency key.
    other_keys: bool,
    /// Whether there is exactly one, created under the operation's own key.
    only_ours: bool,
}

impl OperationsIntents {
    fn of(ledger: &dyn Ledger, operation_id: &str, external_id: Option<&str>, ours: &str) -> Self {
        let mut seen = Self {
            succeeded: 0,
            external_succeeded: false,
            other_keys: false,
            only_ours: false,
        };
        let (mut rows, mut first_key): (usize, Option<String>) = (0, None);
        ledger.each_of_operation(operation_id, &mut |row| {
            rows += 1;
            if row.status == "succeeded" {
                seen.succeeded += 1;
                seen.external_succeeded |= external_id == Some(row.id);
            }
            if let Some(key) = row.idempotency_key {
                match &first_key {
                    None => first_key = Some(key.to_owned()),
                    Some(first) => seen.other_keys |= first != key,
                }
            }
            if rows == 1 {
                seen.only_ours = row.idempotency_key == Some(ours);
            }
        });
        seen.only_ours &= rows == 1;
        seen
    }
}

/// Which operations are an order's (readable) record at the end: asked of the store that holds
/// the records, or collected as they are judged.
enum Ours<'a> {
    Collected(HashSet<String>),
    Asked(Box<dyn Fn(&str) -> bool + 'a>),
}

impl Ours<'_> {
    fn contains(&self, operation_id: &str) -> bool {
        match self {
            Ours::Collected(set) => set.contains(operation_id),
            Ours::Asked(ours) => ours(operation_id),
        }
    }
}

/// Whether an operation id is an order's readable record now (the store's answer).
pub type IsOurs<'a> = Box<dyn Fn(&str) -> bool + 'a>;

impl<'a> Judge<'a> {
    /// `forged`: the orders whose record a forged event moved. `ours`: whether an operation id
    /// is an order's readable record now, where the store can say (otherwise the judge keeps
    /// the ids of the records it judges).
    pub fn new(ledger: &'a dyn Ledger, forged: BTreeSet<String>, ours: Option<IsOurs<'a>>) -> Self {
        Self {
            ledger,
            ours: ours.map_or_else(|| Ours::Collected(HashSet::new()), Ours::Asked),
            forged,
            succeeded_ours: 0,
            refunds: None,
            refunds_ours: 0,
            dead_lettered_refunds: BTreeSet::new(),
        }
    }

    /// Judges refunds against these refunds at Stripe.
    pub fn with_refunds(mut self, ledger: Option<RefundLedger>) -> Self {
        self.refunds = ledger;
        self
    }

    /// The Stripe refunds an event about which went to the events DLQ.
    pub fn with_dead_lettered_refunds(mut self, refunds: BTreeSet<String>) -> Self {
        self.dead_lettered_refunds = refunds;
        self
    }

    /// One order's refunds: each record against Stripe and its events, the charge's reservation
    /// against its refunds and what was charged, and every refund the door accepted.
    pub fn refunds(&mut self, report: &mut Report, order: &Order, of: OrderRefunds<'_>) {
        report.refunds.orders += 1;
        for (i, r) in of.records.iter().enumerate() {
            self.refund_record(report, order, r);
            if let Some(published) = of.published.as_ref().and_then(|p| p.get(i)) {
                self.refund_published(report, order, r, *published);
            }
        }
        if let Some(charge) = of.charge {
            self.reservation(report, order, charge, of.records, of.disputes_reserved);
        }
        for (refund_id, accepted) in of.accepted {
            let record = of.records.iter().find(|r| {
                r.kind
                    .refund_id()
                    .is_some_and(|id| id.as_str() == refund_id)
            });
            let lost = match record {
                None => true,
                Some(r) if r.operation_id.to_string() != accepted.operation_id => true,
                // Stripe refused it as the charge was disputed (the dispute was not recorded yet
                // when the door accepted it): settled as that, nothing to return.
                Some(r)
                    if r.status == OperationStatus::Failed
                        && r.last_error.as_deref() == Some("charge_disputed") =>
                {
                    false
                }
                Some(r) if r.status == OperationStatus::Failed => {
                    self.refunds.as_ref().is_some_and(|l| {
                        !l.of_operation(&r.operation_id.to_string())
                            .any(|s| !holds(&s.status))
                    })
                }
                Some(_) => false,
            };
            if lost {
                report.refunds.lost_refunds += 1;
                violated(report, order, &format!("lost refund {refund_id}"));
            }
        }
    }

    fn refund_record(&mut self, report: &mut Report, order: &Order, r: &Operation) {
        let rr = &mut report.refunds;
        rr.records += 1;
        match r.status {
            OperationStatus::Succeeded => rr.succeeded += 1,
            OperationStatus::Failed => rr.failed += 1,
            _ if r.review.is_some() => rr.in_review += 1,
            _ => {}
        }
        if !r.status.is_settled() && r.review.is_none() {
            rr.unconverged += 1;
            violated(report, order, "refund unconverged");
        }
        let stuck = r.review.as_ref().is_some_and(|v| {
            v.reason
                .starts_with(charge_core::plan::ReviewClass::StuckRefund.as_str())
        });
        if r.review.is_some() && !stuck {
            report.refunds.needless_reviews += 1;
            let reason = r.review.as_ref().map_or("", |v| v.reason.as_str());
            violated(report, order, &format!("needless refund review ({reason})"));
        }
        let Some(ledger) = &self.refunds else { return };
        let op = r.operation_id.to_string();
        let at_stripe: Vec<&stripe_sim::RefundEntry> = ledger.of_operation(&op).collect();
        self.refunds_ours += at_stripe.len() as u64;
        let late = at_stripe.iter().any(|s| s.status == "failed");
        report.refunds.failed_late_at_stripe += u64::from(late);
        report.refunds.failed_late_recorded +=
            u64::from(late && r.status == OperationStatus::Failed);
        if at_stripe.len() > 1 {
            report.refunds.double_refunds += 1;
            violated(report, order, "double refund");
        }
        let agrees = match r.status {
            OperationStatus::Succeeded => at_stripe.iter().any(|s| {
                s.status == "succeeded"
                    && r.stripe_refund_id().is_some_and(|id| id.as_str() == s.id)
            }),
            OperationStatus::Failed => at_stripe.iter().all(|s| !holds(&s.status)),
            _ => true,
        };
        // A late failure the events function never took because its events went to the DLQ
        // (Lambda's retries spent) waits for a person's replay; the audit must report it.
        let for_a_person = late
            && r.status == OperationStatus::Succeeded
            && r.stripe_refund_id()
                .is_some_and(|id| self.dead_lettered_refunds.contains(id.as_str()));
        if !agrees && for_a_person {
            let id = r.stripe_refund_id().map(|id| id.as_str().to_owned());
            report.refunds.failed_late_in_events_dlq.extend(id);
        } else if !agrees {
            report.refunds.record_mismatches += 1;
            violated(report, order, "refund record disagrees with Stripe");
        }
    }

    /// The charge's reservation is the sum of its refunds not failed (and its disputes' reserved
    /// amounts), within what was charged;
    /// and Stripe holds no more refunded than was charged.
    fn reservation(
        &self,
        report: &mut Report,
        order: &Order,
        charge: &Operation,
        records: &[Operation],
        disputes_reserved: i64,
    ) {
        let charged = charge.params.amount().minor_units();
        let live: i64 = records
            .iter()
            .filter(|r| r.status != OperationStatus::Failed)
            .map(|r| r.params.amount().minor_units())
            .sum::<i64>()
            + disputes_reserved;
        if charge.refund_reserved() != live {
            report.refunds.reservation_mismatches += 1;
            violated(
                report,
                order,
                "refund reservation is not the sum of its refunds",
            );
        }
        let at_stripe = match (&self.refunds, &charge.external_id) {
            (Some(ledger), Some(pi)) => ledger.held_of_intent(pi),
            _ => 0,
        };
        if charge.refund_reserved() > charged || at_stripe > charged {
            report.refunds.over_refunds += 1;
            violated(report, order, "over-refund");
        }
    }

    /// A settled refund published its outcome, and no other (a refund that failed after it
    /// succeeded, at Stripe, published both).
    fn refund_published(
        &self,
        report: &mut Report,
        order: &Order,
        r: &Operation,
        published: Published,
    ) {
        let settled_as = match r.status {
            OperationStatus::Succeeded => Some(Outcome::Succeeded),
            OperationStatus::Failed => Some(Outcome::Failed),
            _ => None,
        };
        let unpublished = settled_as.is_some_and(|o| !published.contains(o));
        let failed_late = r.status == OperationStatus::Failed && r.stripe_refund_id().is_some();
        let false_event = [Outcome::Succeeded, Outcome::Failed].into_iter().any(|o| {
            published.contains(o)
                && settled_as != Some(o)
                && !(failed_late && o == Outcome::Succeeded)
        });
        if unpublished || false_event {
            report.refunds.event_mismatches += 1;
            violated(
                report,
                order,
                "refund outcome event disagrees with the record",
            );
        }
    }

    /// One order and our record of it; `published` the outcomes its operation published, where
    /// the run can see them.
    pub fn order(
        &mut self,
        report: &mut Report,
        order: &Order,
        record: Option<&Operation>,
        published: Option<Published>,
    ) {
        report.orders += 1;
        if self.forged.contains(&order.order_id) {
            report.forged_settles += 1;
            violated(report, order, "a forged event moved the record");
        }
        let Some(op) = record else { return };
        report.accepted += 1;
        let id = op.operation_id.to_string();
        let ours = op.idempotency_key();
        let pis = OperationsIntents::of(self.ledger, &id, op.external_id.as_deref(), ours.as_str());
        self.succeeded_ours += pis.succeeded as u64;
        if let Ours::Collected(set) = &mut self.ours {
            set.insert(id);
        }
        let stuck = count_review(report, op);
        match op.status {
            OperationStatus::Succeeded => report.succeeded += 1,
            OperationStatus::Failed => report.failed += 1,
            _ if op.review.is_some() => report.in_review += 1,
            _ => {}
        }
        check_against_stripe(report, order, op, &pis);
        if let Some(published) = published {
            check_published(report, order, op, published);
        }
        if op.review.is_some() && !stuck && !op.status.is_settled() && pis.only_ours {
            report.needless_reviews += 1;
            violated(report, order, "needless review");
        }
    }

    /// Whether the judge keeps the ids of the records it judges as the orders' records (the
    /// store cannot say which are: `--backend aws`).
    pub fn collects_ours(&self) -> bool {
        matches!(self.ours, Ours::Collected(_))
    }

    /// A later charge attempt of an order whose head [`Judge::order`] judged: an order's record
    /// too, so its PaymentIntents are not orphans (the retries' judge judges it against Stripe).
    pub fn later_attempt(&mut self, op: &Operation) {
        let id = op.operation_id.to_string();
        let ours = op.idempotency_key();
        let pis = OperationsIntents::of(self.ledger, &id, op.external_id.as_deref(), ours.as_str());
        self.succeeded_ours += pis.succeeded as u64;
        if let Ours::Collected(set) = &mut self.ours {
            set.insert(id);
        }
    }

    /// An order whose record exists but cannot be read after the run (`error`: the reader's).
    pub fn unreadable(
        &mut self,
        report: &mut Report,
        order: &Order,
        error: &charge_once::ports::StoreError,
    ) {
        report.orders += 1;
        report.accepted += 1;
        report.unreadable_at_end += 1;
        if report.first_violation.is_none() {
            report.first_violation = Some(format!(
                "record unreadable at the end: order {} ({error})",
                order.order_id
            ));
        }
    }

    /// After the last order: the PaymentIntents and the verdict.
    /// `order_of` names the order an operation id was minted for; `audits` the first order each
    /// audit flagged (stale lease write, foreign dedup id).
    /// `publishers` lists the operations that published an outcome, where the run can see them
    /// (those that are an order's record may be left out: only the others are counted).
    pub fn finish(
        &mut self,
        report: &mut Report,
        order_of: impl Fn(&str) -> Option<String>,
        audits: (Option<String>, Option<String>),
        publishers: Option<&[OperationId]>,
    ) {
        report.payment_intents_created = self.ledger.created();
        let orphans = self.orphans();
        report.orphan_charges = orphans.len() as u64;
        if let (None, Some(row)) = (&report.first_violation, orphans.first()) {
            let op = row.operation_id.as_deref().unwrap_or("?");
            report.first_violation = Some(format!(
                "orphan charge: order {} ({} for operation {op}, which is no longer the order's record)",
                order_of(op).unwrap_or_else(|| "?".into()),
                row.id,
            ));
        }
        // Outcomes published by an operation that is no longer any order's record.
        let mut replaced: Vec<String> = publishers
            .unwrap_or_default()
            .iter()
            .map(ToString::to_string)
            .filter(|op| !self.ours.contains(op))
            .collect();
        replaced.sort_unstable();
        report.false_outcome_events += replaced.len() as u64;
        if let (None, Some(op)) = (&report.first_violation, replaced.first()) {
            report.first_violation = Some(format!(
                "outcome event contradicts the record: order {} (operation {op} published an outcome, then stopped being the order's record)",
                order_of(op).unwrap_or_else(|| "?".into()),
            ));
        }
        if let Some(ledger) = &self.refunds {
            report.refunds.judged_at_stripe = true;
            report.refunds.at_stripe = ledger.all.len() as u64;
            report.refunds.orphans = ledger.with_operation().saturating_sub(self.refunds_ours);
            if report.refunds.orphans > 0 && report.first_violation.is_none() {
                report.first_violation = Some(format!(
                    "{} refund(s) at Stripe that no refund record accounts for",
                    report.refunds.orphans
                ));
            }
        }
        name_audit_violation(report, audits);
        report.invariants_hold = report.every_invariant_holds();
    }

    /// The succeeded PaymentIntents whose operation is no order's record, by id.
    fn orphans(&self) -> Vec<LedgerRow> {
        let mut orphans: Vec<LedgerRow> = Vec::new();
        // Every succeeded PaymentIntent naming an operation is a judged record's (counted as
        // each was judged) or an orphan: only where the counts differ is each one's operation
        // looked up, to find and name the orphans. Operation ids are unique (a seeded UUID per
        // operation), so a record's PaymentIntents are counted once.
        let mut succeeded_all = 0u64;
        self.ledger.each(&mut |row| {
            succeeded_all += u64::from(row.operation_id.is_some() && row.status == "succeeded");
        });
        if succeeded_all != self.succeeded_ours {
            self.ledger.each(&mut |row| {
                let theirs = row.operation_id.is_some_and(|op| !self.ours.contains(op));
                if theirs && row.status == "succeeded" {
                    orphans.push(LedgerRow::from(row));
                }
            });
        }
        orphans.sort_by(|a, b| a.id.cmp(&b.id));
        orphans
    }
}

/// The first violation, when no order broke an invariant but an audit or a tick did.
fn name_audit_violation(report: &mut Report, audits: (Option<String>, Option<String>)) {
    if report.first_violation.is_none() && report.stale_lease_writes > 0 {
        report.first_violation = Some(format!(
            "stale lease write (store audit): order {}",
            audits.0.as_deref().unwrap_or("?")
        ));
    }
    if report.first_violation.is_none() && report.settled_changes > 0 {
        report.first_violation = Some(format!(
            "{} write(s) changed a settled record (store audit)",
            report.settled_changes
        ));
    }
    if report.first_violation.is_none() && report.webhook_creates > 0 {
        report.first_violation = Some(format!(
            "the events function called Stripe's create {} time(s)",
            report.webhook_creates
        ));
    }
    if let (None, true) = (&report.first_violation, report.failed_ticks > 0) {
        let error = report.first_failed_tick.as_deref().unwrap_or("?");
        let n = report.failed_ticks;
        report.first_violation = Some(match order_named_in(error) {
            Some(order) => {
                format!("failed reconciler tick ({n} in all): order {order} ({error})")
            }
            None => format!("failed reconciler tick ({n} in all): {error}"),
        });
    }
    if report.first_violation.is_none() && report.foreign_dedup_ids > 0 {
        report.first_violation = Some(format!(
            "dedup id not derived from the operation (queue audit): order {}",
            audits.1.as_deref().unwrap_or("?")
        ));
    }
}

/// Names the first broken invariant and its order.
fn violated(report: &mut Report, order: &Order, what: &str) {
    if report.first_violation.is_none() {
        report.first_violation = Some(format!("{what}: order {}", order.order_id));
    }
}

/// Counts a record's review by its reason; returns whether it is a stuck intent's.
fn count_review(report: &mut Report, op: &Operation) -> bool {
    let stuck = op
        .review
        .as_ref()
        .is_some_and(|r| r.reason.starts_with("stuck_"));
    if stuck {
        report.stuck_reviews += 1;
    }
    if let Some(review) = &op.review {
        // A stuck intent's reason names its PaymentIntent: group those by class.
        let key = if stuck {
            review
                .reason
                .split(':')
                .next()
                .unwrap_or("stuck")
                .to_owned()
        } else {
            format!(
                "{} (last error: {})",
                review.reason,
                op.last_error.as_deref().unwrap_or("-")
            )
        };
        *report.review_reasons.entry(key).or_default() += 1;
    }
    stuck
}

/// Invariants 1 to 3: our record against the PaymentIntents Stripe holds for its operation.
fn check_against_stripe(
    report: &mut Report,
    order: &Order,
    op: &Operation,
    pis: &OperationsIntents,
) {
    if pis.succeeded > 1 || pis.other_keys {
        report.double_charges += 1;
        violated(report, order, "double charge");
    }
    // An authorization still held is judged against Stripe's hold (`authorizations`).
    let held = op.status == OperationStatus::Authorized;
    if !op.status.is_settled() && op.review.is_none() && !held {
        report.unconverged += 1;
        violated(report, order, "unconverged");
    }
    if order.should_succeed && pis.succeeded == 0 && op.review.is_none() {
        report.lost_charges += 1;
        violated(report, order, "lost charge");
    }
    let agrees = match op.status {
        OperationStatus::Succeeded => pis.external_succeeded,
        OperationStatus::Failed => pis.succeeded == 0,
        _ => true,
    };
    if op.status == OperationStatus::Failed && pis.succeeded > 0 {
        report.failed_but_paid += 1;
        violated(report, order, "failed but paid");
    } else if !agrees {
        report.record_mismatches += 1;
        violated(report, order, "record disagrees with Stripe");
    }
}

/// Invariant 5 for one record: its settled outcome published, and no other.
fn check_published(report: &mut Report, order: &Order, op: &Operation, published: Published) {
    let settled_as = match op.status {
        OperationStatus::Succeeded => Some(Outcome::Succeeded),
        OperationStatus::Failed => Some(Outcome::Failed),
        _ => None,
    };
    if settled_as.is_some_and(|o| !published.contains(o)) {
        report.unpublished_outcomes += 1;
        violated(report, order, "outcome never published");
    }
    let false_event = [Outcome::Succeeded, Outcome::Failed]
        .into_iter()
        .any(|o| published.contains(o) && settled_as != Some(o));
    if false_event {
        report.false_outcome_events += 1;
        violated(report, order, "outcome event contradicts the record");
    }
}

/// The order of the first stored key (`ORDER#<order_id>/<kind>`) an error names, if any.
fn order_named_in(error: &str) -> Option<&str> {
    let (_, rest) = error.split_once("ORDER#")?;
    let end = rest
        .find(|c: char| c == '/' || c.is_whitespace() || c == ':' || c == ')')
        .unwrap_or(rest.len());
    Some(&rest[..end]).filter(|o| !o.is_empty())
}

/// The process's peak resident set so far, MB (`VmHWM` in /proc/self/status; 0 where unknown).
pub fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

impl Report {
    /// Every invariant and audit at zero.
    fn every_invariant_holds(&self) -> bool {
        self.double_charges == 0
            && self.lost_charges == 0
            && self.unconverged == 0
            && self.record_mismatches == 0
            && self.failed_but_paid == 0
            && self.needless_reviews == 0
            && self.orphan_charges == 0
            && self.unpublished_outcomes == 0
            && self.false_outcome_events == 0
            && self.stale_lease_writes == 0
            && self.foreign_dedup_ids == 0
            && self.settled_changes == 0
            && self.webhook_creates == 0
            && self.forged_settles == 0
            && self.failed_ticks == 0
            && self.unreadable_at_end == 0
            && self.refunds.holds()
            && self.authorizations.holds()
            && self.disputes.holds()
            && self.retries.holds()
    }

    /// The rates per wall second from the counts and `wall_secs` (set first), and the peak
    /// memory.
    pub fn set_rates(&mut self) {
        let wall = self.wall_secs.max(1e-9);
        let total = |k: &str| self.requests_total.get(k).copied().unwrap_or(0) as f64;
        self.sim_secs_per_wall_sec = self.virtual_hours * 3600.0 / wall;
        self.messages_per_wall_sec = total("sqs_sends") / wall;
        self.store_calls_per_wall_sec = (total("dynamodb_reads") + total("dynamodb_writes")) / wall;
        self.stripe_calls_per_wall_sec = total("stripe_calls") / wall;
        self.decisions_per_wall_sec = self.trace_events as f64 / wall;
        self.peak_rss_mb = peak_rss_mb();
    }

    /// The human-readable report.
    pub fn render(&self) -> String {
        let mut s = String::new();
        self.render_outcomes(&mut s);
        self.refunds.render(&mut s);
        self.authorizations.render(&mut s);
        self.disputes.render(&mut s);
        self.retries.render(&mut s);
        self.render_faults(&mut s);
        self.render_pipeline(&mut s);
        self.render_costs(&mut s);
        if let Some(load) = &self.load {
            s.push_str(&load.render());
        }
        s
    }

    /// Outcomes, the invariants and the audits.
    fn render_outcomes(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "charge-once simulation: seed {}, backend {}, {} orders",
            self.seed, self.backend, self.orders
        );
        let _ = writeln!(
            s,
            "  outcomes        accepted {}  succeeded {}  failed {}  in review {}",
            self.accepted, self.succeeded, self.failed, self.in_review
        );
        let _ = writeln!(
            s,
            "  at Stripe       {} PaymentIntents created",
            self.payment_intents_created
        );
        let _ = writeln!(
            s,
            "  invariants      double charges {}  lost charges {}  unconverged {}  record mismatches {}  failed but paid {}  needless reviews {}  orphan charges {}  forged settles {}  failed ticks {}",
            self.double_charges, self.lost_charges, self.unconverged, self.record_mismatches, self.failed_but_paid, self.needless_reviews, self.orphan_charges, self.forged_settles, self.failed_ticks
        );
        let _ = writeln!(
            s,
            "  outcome events  {}  unpublished outcomes {}  false outcome events {}",
            self.outcome_events
                .map(|n| format!("{n} published"))
                .unwrap_or_else(|| "not seen (no stream on this backend)".into()),
            self.unpublished_outcomes,
            self.false_outcome_events
        );
        let _ = writeln!(
            s,
            "  audits          stale lease writes {}  foreign dedup ids {}{}",
            self.stale_lease_writes,
            self.foreign_dedup_ids,
            self.mutation
                .as_deref()
                .map(|m| format!("  (MUTATION {m})"))
                .unwrap_or_default()
        );
        if let Some(a) = &self.audit {
            let classes: Vec<String> = a
                .by_class
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(c, n)| format!("{c} {n}"))
                .collect();
            let (dlq, planted): (Vec<_>, Vec<_>) = a
                .injected
                .iter()
                .partition(|(i, _)| i.what == crate::drift::LATE_FAILURE_IN_EVENTS_DLQ);
            let _ = writeln!(
                s,
                "  drift audit     {} windows: {} intents, {} refunds, {} disputes, {} settled records; matched {}, in flight {}, not ours {}, unchecked {}, unexplained {}; {} Stripe calls",
                a.windows, a.intents, a.refunds, a.disputes, a.settled_records, a.matched, a.in_flight, a.not_ours, a.unchecked, a.unexplained, a.stripe_calls
            );
            let _ = writeln!(
                s,
                "                  findings: {}; injected drift found {} of {}{}; unexpected {}",
                if classes.is_empty() {
                    "none".to_owned()
                } else {
                    classes.join(", ")
                },
                planted.iter().filter(|(_, found)| *found).count(),
                planted.len(),
                if dlq.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; late refund failures left in the events DLQ found {} of {}",
                        dlq.iter().filter(|(_, found)| *found).count(),
                        dlq.len()
                    )
                },
                a.unexpected
            );
        }
    }

    /// What needs a person, the records, the customers and the faults injected.
    fn render_faults(&self, s: &mut String) {
        let faults: Vec<String> = self
            .faults_injected
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(
            s,
            "  needs a person  poison messages {}  stuck reviews {}  event mismatches {} (forged events refused, paged)  events dead-lettered {}",
            self.poison_messages, self.stuck_reviews, self.event_mismatches, self.events_dead_lettered
        );
        let injected = |k: &str| self.faults_injected.get(k).copied().unwrap_or(0);
        let _ = writeln!(
            s,
            "  records         legacy shape {} (read through operation_from_item)  unreadable {} injected, {} repaired, {} counted by ticks (UnreadableRecords), {} at the end",
            injected("legacy_record"),
            injected("unreadable_record"),
            self.unreadable_repaired,
            self.unreadable_counted,
            self.unreadable_at_end
        );
        let _ = writeln!(
            s,
            "  customers       came back to a declined intent {}: paid {} (Stripe still allowed it), refused by Stripe {} (canceled)",
            injected("customer_confirms_declined"),
            self.customer_confirms_paid,
            self.customer_confirms_refused
        );
        let _ = writeln!(
            s,
            "  faults injected {}",
            if faults.is_empty() {
                "none".into()
            } else {
                faults.join(", ")
            }
        );
        for (reason, n) in &self.review_reasons {
            let _ = writeln!(s, "  in review       {n} × {reason}");
        }
    }

    /// The pipeline's counts, time to settle and what the events function did.
    fn render_pipeline(&self, s: &mut String) {
        let loops: Vec<String> = self
            .loop_counts
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(s, "  pipeline        {}", loops.join(", "));
        let t = &self.time_to_settle;
        let _ = writeln!(
            s,
            "  time to settle  {} went unknown, {} settled: median {:.0} s, p99 {:.0} s, max {:.0} s (virtual; events {})",
            t.went_unknown,
            t.settled,
            t.median_secs,
            t.p99_secs,
            t.max_secs,
            if self.events.is_empty() { "none" } else { self.events.as_str() }
        );
        let t = &self.time_to_settle_final_at_stripe;
        let _ = writeln!(
            s,
            "                  of which final at Stripe (not processing): {} went unknown, {} settled: median {:.0} s, p99 {:.0} s",
            t.went_unknown, t.settled, t.median_secs, t.p99_secs
        );
        if !self.webhook_counts.is_empty() {
            let w: Vec<String> = self
                .webhook_counts
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            let _ = writeln!(s, "  {:<15} {}", self.events, w.join(", "));
        }
        let _ = writeln!(
            s,
            "  audits (17)     settled records changed {}  webhook creates {}",
            self.settled_changes, self.webhook_creates
        );
    }

    /// Requests per charge, time, the trace and the verdict.
    fn render_costs(&self, s: &mut String) {
        let per: Vec<String> = self
            .requests_per_charge
            .iter()
            .map(|(k, v)| format!("{k} {v:.2}"))
            .collect();
        let _ = writeln!(s, "  per charge      {}", per.join(", "));
        let _ = writeln!(
            s,
            "  time            {:.1} h virtual, {:.2} s wall, {:.2} s CPU, {:.0} orders/s",
            self.virtual_hours, self.wall_secs, self.cpu_secs, self.orders_per_sec
        );
        let _ = writeln!(
            s,
            "  per wall second {:.0} s simulated, {:.0} messages, {:.0} store calls, {:.0} Stripe calls, {:.0} decisions (peak RSS {:.0} MB)",
            self.sim_secs_per_wall_sec,
            self.messages_per_wall_sec,
            self.store_calls_per_wall_sec,
            self.stripe_calls_per_wall_sec,
            self.decisions_per_wall_sec,
            self.peak_rss_mb
        );
        let _ = writeln!(
            s,
            "  trace           {} decisions, hash {}{}",
            self.trace_events,
            self.trace_hash,
            if self.deterministic {
                ""
            } else {
                " (real sockets: not deterministic)"
            }
        );
        if self.stripe_capacity.is_some() || self.capacity_429s > 0 {
            let _ = writeln!(
                s,
                "  stripe capacity {}: refused {} ({:.3} per order)",
                self.stripe_capacity.as_deref().unwrap_or("in process"),
                self.capacity_429s,
                self.capacity_429s as f64 / self.orders.max(1) as f64
            );
        }
        let _ = writeln!(
            s,
            "  verdict         {}",
            if self.invariants_hold {
                match &self.flagged {
                    None => "every invariant holds".to_owned(),
                    Some(why) => format!("every invariant holds, but FLAGGED: {why}"),
                }
            } else {
                format!(
                    "INVARIANT BROKEN ({}); replay with --seed {}",
                    self.first_violation.as_deref().unwrap_or("?"),
                    self.seed
                )
            }
        );
    }
}
