//! The drift audit's rules: every Stripe object that carries our operation id, and every record
//! settled in a window, matched to the other side; what does not match gets a class.
//!
//! The audit never changes a record: it reports. Its shell (`charge_once::audit`) lists what
//! Stripe created in the window (lists, never search: lists are not delayed), reads the records
//! settled in the window and the ones Stripe's metadata names, asks [`wants`] what else must be
//! read (a record's object created before the window, an intent a metadata-less refund points
//! at), and hands everything to [`judge`], which gives every object and every record one verdict.
//!
//! Beside the window, the refunds recorded `succeeded` that settled in the same window
//! [`AuditPolicy::refund_recheck`] earlier (30 days: the end of the refund watch) are read again
//! by id ([`Evidence::rechecked`]): a refund can fail days after it succeeded, and one that every
//! other path missed (no events source, a lost event, the reconciler's watch off or behind) is a
//! `status_differs` finding.
//!
//! Disputes are Stripe's, never ours, and carry no metadata of ours: a dispute Stripe lists as
//! created in the window is ours when its PaymentIntent is (the intent's metadata), and then its
//! record must exist (`dispute_unrecorded` when it does not: no event recorded it and the
//! reconciler cannot re-read what was never recorded); a settled dispute record is held against
//! the dispute as Stripe holds it, through the same comparison as every other object
//! ([`StripeObject`]). A dispute of an intent that is not ours is not drift.
//!
//! Classes split in two. **Drift** (the records and Stripe disagree: someone must look) and
//! **watch** (nothing disagrees yet, but a deadline is close or passed: an authorization near its
//! capture deadline, an operation unsettled past the key window). Both page; a clean day has 0 of
//! either.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::dispute::StripeDispute;
use crate::domain::{DisputeId, OperationKind};
use crate::operation::{Operation, OperationStatus};
use crate::outcome::{PaymentIntent, PaymentIntentStatus};
use crate::refund::StripeRefund;
use crate::stripe_object::StripeObject;
use crate::time::Timestamp;

/// The window an audit covers: Stripe objects created, and records settled, in `[from, to)`.
/// Whole seconds (Stripe's `created` filter is in seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditWindow {
    pub from: Timestamp,
    pub to: Timestamp,
}

impl AuditWindow {
    /// The `length` before `now`, both ends cut to the whole second.
    pub fn ending_at(now: Timestamp, length: Duration) -> Self {
        let to = Timestamp::from_millis(now.as_millis().div_euclid(1000) * 1000);
        Self {
            from: to.minus(length),
            to,
        }
    }

    /// Whether `t` is inside `[from, to)`.
    pub fn contains(&self, t: Timestamp) -> bool {
        self.from <= t && t < self.to
    }

    /// `from`, in Stripe's `created[gte]` seconds.
    pub fn from_secs(&self) -> i64 {
        self.from.as_millis().div_euclid(1000)
    }

    /// `to`, in Stripe's `created[lt]` seconds (rounded up: a window never loses its last
    /// fraction of a second).
    pub fn to_secs(&self) -> i64 {
        (self.to.as_millis() + 999).div_euclid(1000)
    }
}

/// What a mismatch is. The names are the metric's `DriftClass` dimension and the `--json` keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftClass {
    /// A Stripe object carries our operation id (or is a refund of one of our intents) and no
    /// record of ours names it.
    AtStripeNotHere,
    /// A record says Stripe holds an object (succeeded, or an external id) that Stripe does not
    /// have.
    HereNotAtStripe,
    /// The record's status and Stripe's disagree (record `failed`, Stripe `succeeded`; record
    /// `succeeded`, Stripe canceled; ...).
    StatusDiffers,
    /// The amount or the currency differs (the charge, what was captured, a refund).
    AmountDiffers,
    /// More than one succeeded PaymentIntent for one operation.
    DuplicateSuccess,
    /// More than one of an order's charge attempts paid: succeeded intents of two of its
    /// operations at Stripe, or two succeeded attempts in our records. The store's write that
    /// starts an attempt rules it out; found, the customer paid twice for one order.
    PaidTwice,
    /// An order's refunds exceed what its charge took.
    OverRefunded,
    /// A dispute Stripe holds on one of our intents has no record: the order's money is being
    /// taken back and nothing here knows (nor pages its deadline).
    DisputeUnrecorded,
    /// Watch: an authorization whose capture deadline is closer than the page lead.
    AuthorizationNearDeadline,
    /// Watch: an operation unsettled (not in review) longer than the key window.
    UnsettledPastKeyWindow,
}

impl DriftClass {
    pub const ALL: [DriftClass; 10] = [
        DriftClass::AtStripeNotHere,
        DriftClass::HereNotAtStripe,
        DriftClass::StatusDiffers,
        DriftClass::AmountDiffers,
        DriftClass::DuplicateSuccess,
        DriftClass::PaidTwice,
        DriftClass::OverRefunded,
        DriftClass::DisputeUnrecorded,
        DriftClass::AuthorizationNearDeadline,
        DriftClass::UnsettledPastKeyWindow,
    ];

    /// The metric dimension's value and the `--json` key.
    pub fn as_str(&self) -> &'static str {
        match self {
            DriftClass::AtStripeNotHere => "at_stripe_not_here",
            DriftClass::HereNotAtStripe => "here_not_at_stripe",
            DriftClass::StatusDiffers => "status_differs",
            DriftClass::AmountDiffers => "amount_differs",
            DriftClass::DuplicateSuccess => "duplicate_success",
            DriftClass::PaidTwice => "paid_twice",
            DriftClass::OverRefunded => "over_refunded",
            DriftClass::DisputeUnrecorded => "dispute_unrecorded",
            DriftClass::AuthorizationNearDeadline => "authorization_near_deadline",
            DriftClass::UnsettledPastKeyWindow => "unsettled_past_key_window",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// Drift (the sides disagree) rather than watch (a deadline).
    pub fn is_drift(&self) -> bool {
        !matches!(
            self,
            DriftClass::AuthorizationNearDeadline | DriftClass::UnsettledPastKeyWindow
        )
    }
}

/// One mismatch, with what a person needs to find both sides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub class: DriftClass,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
    /// The record's kind (`charge`, `refund`, `capture`, `cancel`), when a record is involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The Stripe object (`pi_…`, `re_…`), when one is involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stripe_id: Option<String>,
    /// What differs, in words (`record failed, Stripe succeeded`).
    pub detail: String,
}

/// How much an audit looked at, and how each thing it looked at came out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditCounts {
    /// PaymentIntents Stripe listed as created in the window (of this mode).
    pub intents: u64,
    /// Refunds Stripe listed as created in the window.
    pub refunds: u64,
    /// Disputes Stripe listed as created in the window (0 in reports kept before disputes).
    #[serde(default)]
    pub disputes: u64,
    /// Records settled in the window.
    pub settled_records: u64,
    /// Succeeded refunds settled before the window, read again at Stripe ([`Evidence::rechecked`]).
    #[serde(default)]
    pub rechecked_refunds: u64,
    /// Stripe objects that are not ours (no operation id, and not a refund of one of our intents).
    pub not_ours: u64,
    /// Objects and records whose other side agrees.
    pub matched: u64,
    /// Stripe objects whose record is still unsettled (the engine's work, not drift); a record
    /// settled later is matched in the window it settles in.
    pub in_flight: u64,
    /// Objects and records with a finding (a mismatch between a settled record and a listed
    /// object counts on both sides, and is one finding).
    pub drifted: u64,
    /// Objects and records whose other side could not be read this time (Stripe refused or
    /// timed out): the report is then not complete.
    pub unchecked: u64,
    /// Records unsettled and waiting for a person (already paged by `InReview`).
    pub in_review: u64,
    /// Records this release cannot read: counted and skipped.
    pub unreadable: u64,
    /// Stripe calls the audit made (lists and reads by id): its cost.
    #[serde(default)]
    pub stripe_calls: u64,
}

/// What an audit found: the result kept, one per window, for a person to work through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditReport {
    pub window: AuditWindow,
    pub ran_at: Timestamp,
    /// Who ran it: `schedule`, or the operator's IAM identity.
    pub ran_by: String,
    pub counts: AuditCounts,
    /// Findings per class (every class present, 0 included).
    pub by_class: BTreeMap<DriftClass, u64>,
    /// The findings, the first [`FINDINGS_KEPT`] of them.
    pub findings: Vec<Finding>,
    /// Findings beyond those kept (counted in `by_class`).
    #[serde(default)]
    pub findings_left_out: u64,
    /// Whether the audit read everything in the window (false: it ran out of time, Stripe
    /// refused, or a settled record could not be read (`counts.unreadable`); what it read is
    /// reported, the rest is not vouched for).
    #[serde(default = "complete_default")]
    pub complete: bool,
    /// Why it is not complete, when it stopped before it could judge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
    /// How long the records settled in the window took, per kind (`charge`, `refund`,
    /// `capture`, `cancel`). Absent from reports kept before it was measured.
    #[serde(default)]
    pub settle_times: BTreeMap<String, SettleTimes>,
    /// What was unsettled when the audit ran, per kind, in review or not (the refunds pending
    /// among them). Absent from reports kept before it was measured.
    #[serde(default)]
    pub unsettled: BTreeMap<String, UnsettledKind>,
}

/// How long one kind's records took from created to settled, in whole seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettleTimes {
    pub count: u64,
    pub p50_secs: u64,
    pub p99_secs: u64,
    pub max_secs: u64,
}

impl SettleTimes {
    /// From the durations (seconds), in any order: the nearest-rank percentiles.
    pub fn of(mut secs: Vec<u64>) -> Self {
        if secs.is_empty() {
            return Self::default();
        }
        secs.sort_unstable();
        let rank = |p: u64| {
            let n = secs.len() as u64;
            let at = (p * n).div_ceil(100).clamp(1, n) - 1;
            secs[at as usize]
        };
        Self {
            count: secs.len() as u64,
            p50_secs: rank(50),
            p99_secs: rank(99),
            max_secs: secs[secs.len() - 1],
        }
    }
}

/// One kind's unsettled records when the audit ran: how many, the oldest one's age, and how
/// many of them wait for a person.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnsettledKind {
    pub count: u64,
    pub oldest_age_secs: u64,
    pub in_review: u64,
}

/// The operator's picture from the evidence: settle times per kind of the records settled in
/// the window, and what is unsettled now per kind (the unknown index and the review partition
/// as read; a record settled without a settle time, from before it was stamped, is left out of
/// the times).
pub fn picture(
    settled: &[Operation],
    unsettled: &[Operation],
    now: Timestamp,
) -> (
    BTreeMap<String, SettleTimes>,
    BTreeMap<String, UnsettledKind>,
) {
    let mut durations: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for op in settled {
        if let Some(at) = op.settled_at {
            let secs = at
                .as_millis()
                .saturating_sub(op.created_at.as_millis())
                .max(0)
                / 1000;
            durations
                .entry(op.kind.as_str().to_owned())
                .or_default()
                .push(secs as u64);
        }
    }
    let times = durations
        .into_iter()
        .map(|(kind, secs)| (kind, SettleTimes::of(secs)))
        .collect();
    let mut open: BTreeMap<String, UnsettledKind> = BTreeMap::new();
    for op in unsettled {
        let k = open.entry(op.kind.as_str().to_owned()).or_default();
        k.count += 1;
        k.in_review += u64::from(op.review.is_some());
        let age = now
            .as_millis()
            .saturating_sub(op.created_at.as_millis())
            .max(0)
            / 1000;
        k.oldest_age_secs = k.oldest_age_secs.max(age as u64);
    }
    (times, open)
}

fn complete_default() -> bool {
    true
}

/// How many findings a kept report holds (a DynamoDB item is at most 400 KB).
pub const FINDINGS_KEPT: usize = 500;

impl AuditReport {
    /// Drift findings (not watch).
    pub fn drift(&self) -> u64 {
        self.by_class
            .iter()
            .filter(|(c, _)| c.is_drift())
            .map(|(_, n)| n)
            .sum()
    }

    pub fn count(&self, class: DriftClass) -> u64 {
        self.by_class.get(&class).copied().unwrap_or(0)
    }
}

// ---------------------------------------------------------------------------------------------
// The rules
// ---------------------------------------------------------------------------------------------

/// The audit's two bounds, from the stack's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditPolicy {
    /// Stripe keeps an idempotency key 24 h; the engine trusts it 23 h. An operation whose
    /// outcome is still unknown after that is the safety net failing.
    pub key_window: Duration,
    /// How long before an authorization's capture deadline a person is paged
    /// (`AuthorizationPageLeadHours`).
    pub page_lead: Duration,
    /// How long before the window the succeeded refunds the audit reads again at Stripe settled
    /// (`AuditRefundRecheckDays`, [`rechecked_window`]): a refund can fail days after it
    /// succeeded, when its window's audit has long passed ([`Evidence::rechecked`]).
    pub refund_recheck: Duration,
}

/// The default of [`AuditPolicy::refund_recheck`] (`AuditRefundRecheckDays`): as long as the
/// refund watch's window ([`crate::refund::watch::RefundWatch::DEFAULT`]), so what the watch
/// missed is still found.
pub const DEFAULT_REFUND_RECHECK: Duration = Duration::from_secs(30 * 86_400);

/// What the shell read for one audit, everything the rules judge.
#[derive(Debug, Clone)]
pub struct Evidence {
    pub window: AuditWindow,
    pub now: Timestamp,
    /// The mode of our key: an object of the other mode is not ours.
    pub livemode: bool,
    /// What Stripe listed as created in the window.
    pub intents: Vec<PaymentIntent>,
    pub refunds: Vec<StripeRefund>,
    pub disputes: Vec<StripeDispute>,
    /// The records settled in the window.
    pub settled: Vec<Operation>,
    /// Refunds recorded `succeeded` that settled in the window [`AuditPolicy::refund_recheck`]
    /// earlier, read again by id ([`rechecked_window`]; their Stripe refunds are in
    /// `retrieved_refunds`): a late failure every other path missed is `status_differs`.
    pub rechecked: Vec<Operation>,
    /// Other records read because something named their order ([`orders_to_read`]).
    pub related: Vec<Operation>,
    /// Orders whose every refund was read (so their sum can be checked).
    pub refunds_read: BTreeSet<String>,
    /// Objects read by id because a record or a refund named them ([`objects_to_retrieve`]):
    /// `None` when Stripe has no such object.
    pub retrieved_intents: BTreeMap<String, Option<PaymentIntent>>,
    pub retrieved_refunds: BTreeMap<String, Option<StripeRefund>>,
    /// Disputes read by id because a settled dispute record named one the list did not show
    /// ([`dispute_reads`]).
    pub retrieved_disputes: BTreeMap<String, Option<StripeDispute>>,
    /// Listed disputes on our intents whose record was looked up (found or not: a found one is
    /// in `related`); a dispute of ours not looked up is not vouched for ([`dispute_orders`]).
    pub disputes_read: BTreeSet<String>,
    /// Every unsettled record not in review (the unknown index).
    pub unsettled: Vec<Operation>,
    /// Records waiting for a person (counted from the index's REVIEW partition).
    pub in_review: u64,
    /// Records this release could not read (counted, skipped).
    pub unreadable: u64,
}

impl Evidence {
    /// Nothing read yet: the window, the time it is judged at, and the key's mode.
    pub fn empty(window: AuditWindow, now: Timestamp, livemode: bool) -> Self {
        Evidence {
            window,
            now,
            livemode,
            intents: vec![],
            refunds: vec![],
            disputes: vec![],
            settled: vec![],
            rechecked: vec![],
            related: vec![],
            refunds_read: BTreeSet::new(),
            retrieved_intents: BTreeMap::new(),
            retrieved_refunds: BTreeMap::new(),
            retrieved_disputes: BTreeMap::new(),
            disputes_read: BTreeSet::new(),
            unsettled: vec![],
            in_review: 0,
            unreadable: 0,
        }
    }
}

/// The settle times whose succeeded refunds an audit of `window` reads again: the window itself,
/// `policy.refund_recheck` earlier. Consecutive windows tile, so each refund is read again once,
/// the day its watch ends (one retrieve per refund, bounded like the rest of the audit: at the
/// audit's Stripe share, re-reading every refund of the last 30 days daily would stop the audit
/// at a few dozen refunds a day). Empty when the recheck is shorter than the window (0: none),
/// so it never overlaps the window's own records.
pub fn rechecked_window(window: &AuditWindow, policy: &AuditPolicy) -> AuditWindow {
    let length = window.to.since(window.from);
    if policy.refund_recheck < length {
        return AuditWindow {
            from: window.from,
            to: window.from,
        };
    }
    AuditWindow {
        from: window.from.minus(policy.refund_recheck),
        to: window.to.minus(policy.refund_recheck),
    }
}

/// What to read of an order's records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OrderReads {
    /// Its charge (a Stripe object or a settled capture, cancel or refund names the order).
    pub charge: bool,
    /// All its refunds (a refund names the order: the sum is checked).
    pub refunds: bool,
    /// All its charge attempts even when its head settled in the window (the order was charged
    /// again: is it paid twice?).
    pub attempts: bool,
}

/// The orders whose records the audit must read, besides the ones settled in the window: every
/// order Stripe's metadata names, and the charge of every settled capture, cancel and refund.
pub fn orders_to_read(
    intents: &[PaymentIntent],
    refunds: &[StripeRefund],
    settled: &[Operation],
) -> BTreeMap<String, OrderReads> {
    let mut reads: BTreeMap<String, OrderReads> = BTreeMap::new();
    for order in intents.iter().filter_map(|pi| pi.order_id.clone()) {
        reads.entry(order).or_default().charge = true;
    }
    for order in refunds.iter().filter_map(|re| re.order_id.clone()) {
        let r = reads.entry(order).or_default();
        r.charge = true;
        r.refunds = true;
    }
    for op in settled {
        let r = reads.entry(op.order_id.as_str().to_owned()).or_default();
        // An order charged again: its other attempts too (is it paid twice?). An order charged
        // once costs no read more than before attempts.
        let retried = op.kind.attempt_no().is_some_and(|n| n > 1) || op.latest_attempt() > 1;
        r.charge |= !op.kind.is_charge() || retried;
        r.attempts |= retried;
        r.refunds |= matches!(op.kind, OperationKind::Refund(_));
    }
    reads
}

/// The Stripe objects to read by id: the object of every settled record that the lists did not
/// show (created before the window), and the intent of every metadata-less refund whose intent
/// is not known yet (is it a refund of one of our charges?).
pub fn objects_to_retrieve(
    intents: &[PaymentIntent],
    refunds: &[StripeRefund],
    settled: &[Operation],
    related: &[Operation],
) -> (BTreeSet<String>, BTreeSet<String>) {
    let listed_intents: BTreeSet<&str> = intents.iter().map(|pi| pi.id.as_str()).collect();
    let listed_refunds: BTreeSet<&str> = refunds.iter().map(|re| re.id.as_str()).collect();
    let known_intents: BTreeSet<&str> = settled
        .iter()
        .chain(related)
        .filter_map(|op| op.external_id.as_ref().map(|id| id.as_str()))
        .chain(listed_intents.iter().copied())
        .collect();
    let mut want_intents = BTreeSet::new();
    let mut want_refunds = BTreeSet::new();
    for op in settled {
        if let Some(id) = object_intent(op) {
            if !listed_intents.contains(id.as_str()) {
                want_intents.insert(id);
            }
        }
        if let Some(id) = &op.stripe_refund_id() {
            if !listed_refunds.contains(id.as_str()) {
                want_refunds.insert(id.as_str().to_owned());
            }
        }
    }
    // An intent naming an operation whose record holds another one: read the record's, to tell
    // a second payment (both succeeded) from a stray attempt.
    let records: BTreeMap<String, &Operation> = settled
        .iter()
        .chain(related)
        .map(|op| (op.operation_id.to_string(), op))
        .collect();
    for pi in intents {
        let own = pi
            .operation_id
            .as_ref()
            .and_then(|id| records.get(id))
            .and_then(|op| op.external_id.as_ref());
        if let Some(own) = own.filter(|own| own.as_str() != pi.id.as_str()) {
            if !listed_intents.contains(own.as_str()) {
                want_intents.insert(own.as_str().to_owned());
            }
        }
    }
    for re in refunds.iter().filter(|re| re.operation_id.is_none()) {
        if let Some(pi) = &re.payment_intent {
            if !known_intents.contains(pi.as_str()) {
                want_intents.insert(pi.clone());
            }
        }
    }
    (want_intents, want_refunds)
}

/// What the audit reads for disputes beyond the list: the intent of every listed dispute not
/// known yet (is it ours, and under which order?), and the dispute of every settled dispute
/// record that the list did not show (created before the window).
pub fn dispute_reads(
    disputes: &[StripeDispute],
    intents: &[PaymentIntent],
    retrieved_intents: &BTreeMap<String, Option<PaymentIntent>>,
    settled: &[Operation],
) -> (BTreeSet<String>, BTreeSet<String>) {
    let known: BTreeSet<&str> = intents
        .iter()
        .map(|pi| pi.id.as_str())
        .chain(retrieved_intents.keys().map(String::as_str))
        .collect();
    let want_intents = disputes
        .iter()
        .filter_map(|d| d.payment_intent.as_ref())
        .filter(|pi| !known.contains(pi.as_str()))
        .map(|pi| pi.as_str().to_owned())
        .collect();
    let listed: BTreeSet<&str> = disputes.iter().map(|d| d.id.as_str()).collect();
    let want_disputes = settled
        .iter()
        .filter_map(|op| op.kind.dispute_id())
        .filter(|id| !listed.contains(id.as_str()))
        .map(|id| id.as_str().to_owned())
        .collect();
    (want_intents, want_disputes)
}

/// The listed disputes whose PaymentIntent is ours (of our mode, carrying our operation id), by
/// the order its metadata names: the shell reads each one's record (and its order's charge).
pub fn dispute_orders(ev: &Evidence) -> BTreeMap<String, Vec<DisputeId>> {
    let mut orders: BTreeMap<String, Vec<DisputeId>> = BTreeMap::new();
    for d in ev.disputes.iter().filter(|d| d.livemode == ev.livemode) {
        let Some(pi) = d.payment_intent.as_ref() else {
            continue;
        };
        let intent = ev.intents.iter().find(|i| i.id == *pi).or_else(|| {
            ev.retrieved_intents
                .get(pi.as_str())
                .and_then(Option::as_ref)
        });
        let ours = intent
            .filter(|i| i.operation_id.is_some() && i.livemode.is_none_or(|m| m == ev.livemode));
        if let Some(order) = ours.and_then(|i| i.order_id.clone()) {
            orders.entry(order).or_default().push(d.id.clone());
        }
    }
    orders
}

/// The PaymentIntent a settled record speaks for: a charge's own; a capture's or cancel's (its
/// charge's intent). A refund speaks for its refund object, not an intent.
fn object_intent(op: &Operation) -> Option<String> {
    match &op.kind {
        OperationKind::Charge(_) => op.external_id.as_ref().map(|id| id.as_str().to_owned()),
        OperationKind::Capture(_) => op
            .params
            .capture()
            .map(|p| p.payment_intent.as_str().to_owned()),
        OperationKind::Cancel => op
            .params
            .cancel()
            .and_then(|p| p.payment_intent.as_ref())
            .map(|id| id.as_str().to_owned()),
        OperationKind::Refund(_) | OperationKind::Dispute(_) => None,
    }
}

/// The verdicts of one audit: its counts and its findings, every class present in `by_class`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Judgement {
    pub counts: AuditCounts,
    pub by_class: BTreeMap<DriftClass, u64>,
    pub findings: Vec<Finding>,
    pub settle_times: BTreeMap<String, SettleTimes>,
    pub unsettled: BTreeMap<String, UnsettledKind>,
}

impl Judgement {
    /// Every listed object and every settled record has exactly one verdict.
    pub fn unexplained(&self) -> i64 {
        let c = &self.counts;
        (c.intents + c.refunds + c.disputes + c.settled_records + c.rechecked_refunds) as i64
            - (c.not_ours + c.matched + c.in_flight + c.unchecked + c.drifted) as i64
    }

    /// The report kept for the window: the first [`FINDINGS_KEPT`] findings, the rest counted.
    pub fn into_report(self, window: AuditWindow, ran_at: Timestamp, ran_by: &str) -> AuditReport {
        let left_out = self.findings.len().saturating_sub(FINDINGS_KEPT) as u64;
        let mut findings = self.findings;
        findings.truncate(FINDINGS_KEPT);
        AuditReport {
            window,
            ran_at,
            ran_by: ran_by.to_owned(),
            counts: self.counts,
            by_class: self.by_class,
            findings,
            findings_left_out: left_out,
            complete: true,
            stopped_by: None,
            settle_times: self.settle_times,
            unsettled: self.unsettled,
        }
    }
}

/// One item's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    NotOurs,
    Matched,
    InFlight,
    /// The other side could not be read (Stripe refused or timed out): not vouched for.
    Unchecked,
    Drift(Box<Finding>),
}

fn drift(finding: Finding) -> Verdict {
    Verdict::Drift(Box::new(finding))
}

/// Judges everything read: each listed object and each settled record gets one verdict; the
/// unsettled records are watched for their deadlines; orders whose refunds were all read are
/// checked for refunds over what was taken.
pub fn judge(ev: &Evidence, policy: &AuditPolicy) -> Judgement {
    let book = Book::new(ev);
    let mut j = Judgement {
        by_class: DriftClass::ALL.iter().map(|c| (*c, 0)).collect(),
        ..Judgement::default()
    };
    j.counts.unreadable = ev.unreadable;
    j.counts.in_review = ev.in_review;
    // Record side first: a mismatch between a settled record and a listed object is one finding,
    // and the object takes the record's verdict (counted on both sides, reported once).
    let mut object_verdicts: HashMap<String, bool> = HashMap::new();
    for op in &ev.settled {
        j.counts.settled_records += 1;
        let (object, verdict) = book.judge_record(op);
        if let Some(object) = object {
            object_verdicts.insert(object, !matches!(verdict, Verdict::Drift(_)));
        }
        j.tally(verdict);
    }
    // A refund read again is judged as a settled record is; the object it names was read by id
    // for it, so nothing else speaks for that object.
    for op in &ev.rechecked {
        j.counts.rechecked_refunds += 1;
        let (_, verdict) = book.judge_record(op);
        j.tally(verdict);
    }
    for pi in &ev.intents {
        j.counts.intents += 1;
        let verdict = match object_verdicts.get(pi.id.as_str()) {
            Some(true) => Verdict::Matched,
            Some(false) => {
                j.counts.drifted += 1;
                continue;
            }
            None => book.judge_intent(pi),
        };
        j.tally(verdict);
    }
    for re in &ev.refunds {
        j.counts.refunds += 1;
        let verdict = match object_verdicts.get(re.id.as_str()) {
            Some(true) => Verdict::Matched,
            Some(false) => {
                j.counts.drifted += 1;
                continue;
            }
            None => book.judge_refund(re),
        };
        j.tally(verdict);
    }
    for d in &ev.disputes {
        j.counts.disputes += 1;
        let verdict = match object_verdicts.get(d.id.as_str()) {
            Some(true) => Verdict::Matched,
            Some(false) => {
                j.counts.drifted += 1;
                continue;
            }
            None => book.judge_dispute(d),
        };
        j.tally(verdict);
    }
    for finding in book.over_refunded() {
        j.add(finding);
    }
    for finding in paid_twice(ev) {
        j.add(finding);
    }
    for op in &ev.unsettled {
        if op.review.is_some() {
            j.counts.in_review += 1;
        } else if let Some(finding) = watch(op, ev.now, policy) {
            j.add(finding);
        }
    }
    (j.settle_times, j.unsettled) = picture(&ev.settled, &ev.unsettled, ev.now);
    j
}

impl Judgement {
    fn tally(&mut self, verdict: Verdict) {
        match verdict {
            Verdict::NotOurs => self.counts.not_ours += 1,
            Verdict::Matched => self.counts.matched += 1,
            Verdict::InFlight => self.counts.in_flight += 1,
            Verdict::Unchecked => self.counts.unchecked += 1,
            Verdict::Drift(finding) => {
                self.counts.drifted += 1;
                self.add(*finding);
            }
        }
    }

    fn add(&mut self, finding: Finding) {
        *self.by_class.entry(finding.class).or_insert(0) += 1;
        self.findings.push(finding);
    }
}

/// A deadline close or passed on an unsettled record not in review.
fn watch(op: &Operation, now: Timestamp, policy: &AuditPolicy) -> Option<Finding> {
    if op.status == OperationStatus::Authorized {
        let deadline = op.capture_before()?;
        if deadline.minus(policy.page_lead) > now {
            return None;
        }
        let detail = if deadline <= now {
            format!(
                "authorization past its capture deadline {}",
                deadline.to_rfc3339()
            )
        } else {
            format!(
                "authorized, uncaptured; Stripe releases the hold at {}",
                deadline.to_rfc3339()
            )
        };
        return Some(finding(
            DriftClass::AuthorizationNearDeadline,
            op,
            None,
            detail,
        ));
    }
    // Only an outcome nobody knows is the safety net failing: a charge with no intent id, a
    // refund with no refund id, a capture or cancel not done. A known object still moving at
    // Stripe (a refund pending for days) is Stripe's time, not ours.
    let unknown_object = match op.kind {
        OperationKind::Charge(_) => op.external_id.is_none(),
        OperationKind::Refund(_) => op.stripe_refund_id().is_none(),
        OperationKind::Capture(_) | OperationKind::Cancel => true,
        // Recorded only from a dispute read at Stripe: its object is always known.
        OperationKind::Dispute(_) => false,
    };
    let since = op.first_attempted_at.unwrap_or(op.created_at);
    if !unknown_object || since.plus(policy.key_window) > now {
        return None;
    }
    Some(finding(
        DriftClass::UnsettledPastKeyWindow,
        op,
        None,
        format!(
            "{} since {}, past the {} h key window",
            op.status.as_str(),
            since.to_rfc3339(),
            policy.key_window.as_secs() / 3600
        ),
    ))
}

fn finding(class: DriftClass, op: &Operation, stripe_id: Option<&str>, detail: String) -> Finding {
    Finding {
        class,
        order_id: Some(op.order_id.as_str().to_owned()),
        operation_id: Some(op.operation_id.to_string()),
        kind: Some(op.kind.as_str().to_owned()),
        stripe_id: stripe_id.map(str::to_owned),
        detail,
    }
}

fn stripe_finding(
    class: DriftClass,
    operation_id: Option<&str>,
    order_id: Option<&str>,
    stripe_id: &str,
    detail: String,
) -> Finding {
    Finding {
        class,
        order_id: order_id.map(str::to_owned),
        operation_id: operation_id.map(str::to_owned),
        kind: None,
        stripe_id: Some(stripe_id.to_owned()),
        detail,
    }
}

/// The records and Stripe objects of one audit, indexed.
struct Book<'a> {
    livemode: bool,
    records: HashMap<String, &'a Operation>,
    charges: HashMap<&'a str, &'a Operation>,
    refunds_by_order: HashMap<&'a str, Vec<&'a Operation>>,
    refunds_read: &'a BTreeSet<String>,
    intents: HashMap<&'a str, &'a PaymentIntent>,
    refunds: HashMap<&'a str, &'a StripeRefund>,
    disputes: HashMap<&'a str, &'a StripeDispute>,
    /// Dispute records by their dispute's id.
    dispute_records: HashMap<&'a str, &'a Operation>,
    disputes_read: &'a BTreeSet<String>,
    /// Objects read by id that Stripe does not have.
    absent: BTreeSet<&'a str>,
}

impl<'a> Book<'a> {
    fn new(ev: &'a Evidence) -> Self {
        let all = ev.settled.iter().chain(&ev.related).chain(&ev.unsettled);
        let mut book = Book {
            livemode: ev.livemode,
            records: HashMap::new(),
            charges: HashMap::new(),
            refunds_by_order: HashMap::new(),
            refunds_read: &ev.refunds_read,
            intents: HashMap::new(),
            refunds: HashMap::new(),
            disputes: HashMap::new(),
            dispute_records: HashMap::new(),
            disputes_read: &ev.disputes_read,
            absent: BTreeSet::new(),
        };
        for op in all {
            if book
                .records
                .insert(op.operation_id.to_string(), op)
                .is_some()
            {
                continue;
            }
            match op.kind {
                // The order's charge is its paid attempt, else its latest read (what its
                // refunds and its captures took from).
                OperationKind::Charge(n) => {
                    let entry = book.charges.entry(op.order_id.as_str()).or_insert(op);
                    let paid = |c: &Operation| c.status == OperationStatus::Succeeded;
                    let later = entry.kind.attempt_no().is_some_and(|m| m < n);
                    if (paid(op) && !paid(entry)) || (paid(op) == paid(entry) && later) {
                        *entry = op;
                    }
                }
                OperationKind::Refund(_) => book
                    .refunds_by_order
                    .entry(op.order_id.as_str())
                    .or_default()
                    .push(op),
                OperationKind::Dispute(ref id) => {
                    book.dispute_records.insert(id.as_str(), op);
                }
                _ => {}
            }
        }
        for pi in &ev.intents {
            book.intents.insert(pi.id.as_str(), pi);
        }
        for re in &ev.refunds {
            book.refunds.insert(re.id.as_str(), re);
        }
        for (id, pi) in &ev.retrieved_intents {
            match pi {
                Some(pi) => {
                    book.intents.insert(id.as_str(), pi);
                }
                None => {
                    book.absent.insert(id.as_str());
                }
            }
        }
        for d in &ev.disputes {
            book.disputes.insert(d.id.as_str(), d);
        }
        for (id, d) in &ev.retrieved_disputes {
            match d {
                Some(d) => {
                    book.disputes.insert(id.as_str(), d);
                }
                None => {
                    book.absent.insert(id.as_str());
                }
            }
        }
        for (id, re) in &ev.retrieved_refunds {
            match re {
                Some(re) => {
                    book.refunds.insert(id.as_str(), re);
                }
                None => {
                    book.absent.insert(id.as_str());
                }
            }
        }
        book
    }

    /// The intent `id` as Stripe shows it; `Err(verdict)` when it is absent or was not read.
    fn intent(&self, op: &Operation, id: &str) -> Result<&'a PaymentIntent, Verdict> {
        self.object(&self.intents, op, id)
    }

    /// The object `id` among `objects` (what Stripe showed of its kind); `Err(verdict)` when it
    /// is absent or was not read.
    fn object<O>(
        &self,
        objects: &HashMap<&'a str, &'a O>,
        op: &Operation,
        id: &str,
    ) -> Result<&'a O, Verdict> {
        if let Some(object) = objects.get(id) {
            return Ok(object);
        }
        if self.absent.contains(id) {
            return Err(drift(finding(
                DriftClass::HereNotAtStripe,
                op,
                Some(id),
                format!(
                    "record {} names {id}, which Stripe does not have",
                    op.status.as_str()
                ),
            )));
        }
        Err(Verdict::Unchecked)
    }

    /// A settled charge or refund against the object it names (`id`, of `objects`' kind), and
    /// that object, whose verdict the record's is.
    fn judge_object<O: StripeObject>(
        &self,
        op: &Operation,
        id: Option<&str>,
        objects: &HashMap<&'a str, &'a O>,
    ) -> (Option<String>, Verdict) {
        let Some(id) = id else {
            return (None, no_object(op, O::NOUN));
        };
        let verdict = match self.object(objects, op, id) {
            Ok(object) => compare(op, object),
            Err(v) => v,
        };
        (Some(id.to_owned()), verdict)
    }

    /// A settled record's verdict, and the Stripe object it speaks for (its verdict is the
    /// object's too).
    fn judge_record(&self, op: &Operation) -> (Option<String>, Verdict) {
        match &op.kind {
            OperationKind::Charge(_) => {
                self.judge_object(op, op.external_id.as_deref(), &self.intents)
            }
            OperationKind::Refund(_) => self.judge_object(
                op,
                op.stripe_refund_id().map(|id| id.as_str()),
                &self.refunds,
            ),
            OperationKind::Capture(_) | OperationKind::Cancel => (None, self.judge_taking(op)),
            OperationKind::Dispute(id) => self.judge_object(op, Some(id.as_str()), &self.disputes),
        }
    }

    /// A settled capture or cancel against its charge's intent.
    fn judge_taking(&self, op: &Operation) -> Verdict {
        let Some(id) = object_intent(op) else {
            // A cancel of a charge never sent: nothing at Stripe to hold.
            return Verdict::Matched;
        };
        let pi = match self.intent(op, &id) {
            Ok(pi) => pi,
            Err(v) => return v,
        };
        let differs = |class, detail: String| drift(finding(class, op, Some(&id), detail));
        match (op.kind.clone(), op.status) {
            (OperationKind::Capture(_), OperationStatus::Succeeded) => {
                if pi.status != PaymentIntentStatus::Succeeded {
                    return differs(
                        DriftClass::StatusDiffers,
                        format!("capture succeeded, Stripe's intent {}", pi.status.as_str()),
                    );
                }
                let asked = op
                    .params
                    .capture()
                    .map(|p| p.amount_to_capture.minor_units());
                match (asked, pi.amount_received) {
                    (Some(a), Some(r)) if a != r => differs(
                        DriftClass::AmountDiffers,
                        format!("captured {a} here, {r} received at Stripe"),
                    ),
                    _ => Verdict::Matched,
                }
            }
            // A capture Stripe refused gave the authorization back, and a later capture of the
            // order (another amount: the same one is the same request) may have taken it: only
            // Stripe holding what this one asked, or not saying what it holds, is drift.
            (OperationKind::Capture(_), _)
                if pi.status == PaymentIntentStatus::Succeeded
                    && (pi.amount_received.is_none()
                        || pi.amount_received
                            == op
                                .params
                                .capture()
                                .map(|p| p.amount_to_capture.minor_units())) =>
            {
                differs(
                    DriftClass::StatusDiffers,
                    "capture failed, Stripe's intent succeeded (captured)".to_owned(),
                )
            }
            (OperationKind::Cancel, OperationStatus::Succeeded)
                if pi.status != PaymentIntentStatus::Canceled =>
            {
                differs(
                    DriftClass::StatusDiffers,
                    format!("cancel succeeded, Stripe's intent {}", pi.status.as_str()),
                )
            }
            _ => Verdict::Matched,
        }
    }

    /// A listed intent not spoken for by a settled record of the window.
    fn judge_intent(&self, pi: &PaymentIntent) -> Verdict {
        let Some(op_id) = self.ours(pi) else {
            return Verdict::NotOurs;
        };
        let Some(op) = self.records.get(op_id).filter(|op| op.kind.is_charge()) else {
            return drift(stripe_finding(
                DriftClass::AtStripeNotHere,
                Some(op_id),
                pi.order_id.as_deref(),
                pi.id.as_str(),
                format!(
                    "intent {} ({}) names operation {op_id}, which no charge record has",
                    pi.id.as_str(),
                    pi.status.as_str()
                ),
            ));
        };
        if !op.status.is_settled() {
            return Verdict::InFlight;
        }
        match op.external_id.as_ref().map(|id| id.as_str()) {
            Some(own) if own != pi.id.as_str() => {
                // Only what Stripe shows: a record's intent Stripe does not have makes this one
                // not a second payment but the only one, which the record does not name.
                let own_succeeded = self
                    .intents
                    .get(own)
                    .is_some_and(|o| o.status == PaymentIntentStatus::Succeeded);
                let class = if pi.status == PaymentIntentStatus::Succeeded && own_succeeded {
                    DriftClass::DuplicateSuccess
                } else {
                    DriftClass::AtStripeNotHere
                };
                drift(finding(
                    class,
                    op,
                    Some(pi.id.as_str()),
                    format!(
                        "a second intent for the operation ({}), besides the record's {own}",
                        pi.status.as_str()
                    ),
                ))
            }
            _ => compare(op, pi),
        }
    }

    /// A listed refund not spoken for by a settled record of the window.
    fn judge_refund(&self, re: &StripeRefund) -> Verdict {
        let Some(op_id) = re.operation_id.as_deref() else {
            return match re.payment_intent.as_deref() {
                Some(pi) if re.is_released_remainder() && self.is_our_intent(pi) => {
                    self.judge_released(re, pi)
                }
                Some(pi) if self.is_our_intent(pi) => drift(stripe_finding(
                    DriftClass::AtStripeNotHere,
                    None,
                    None,
                    re.id.as_str(),
                    format!("a refund of our intent {pi} made outside the engine (no operation id), {} {}", re.amount.unwrap_or(0), re.status.as_str()),
                )),
                _ => Verdict::NotOurs,
            };
        };
        let Some(op) = self
            .records
            .get(op_id)
            .filter(|op| matches!(op.kind, OperationKind::Refund(_)))
        else {
            return drift(stripe_finding(
                DriftClass::AtStripeNotHere,
                Some(op_id),
                re.order_id.as_deref(),
                re.id.as_str(),
                format!("refund names operation {op_id}, which no refund record has"),
            ));
        };
        if !op.status.is_settled() {
            return Verdict::InFlight;
        }
        match op.stripe_refund_id().map(|id| id.as_str()) {
            Some(own) if own != re.id.as_str() => drift(finding(
                DriftClass::AtStripeNotHere,
                op,
                Some(re.id.as_str()),
                format!("a second refund for the operation, besides the record's {own}"),
            )),
            _ => compare(op, re),
        }
    }

    /// A refund Stripe made itself for the released part of one of our authorizations (the
    /// pinned version's record of a partial capture's remainder, or of a canceled or lapsed
    /// hold): matched when it is the part the intent as Stripe holds it released; the intent's own
    /// verdict speaks for our records. Unchecked when the intent was not read.
    fn judge_released(&self, re: &StripeRefund, pi_id: &str) -> Verdict {
        let Some(pi) = self.intents.get(pi_id) else {
            return Verdict::Unchecked;
        };
        let amount = pi.amount.unwrap_or(0);
        let released = match pi.status {
            PaymentIntentStatus::Canceled => amount,
            PaymentIntentStatus::Succeeded => amount - pi.amount_received.unwrap_or(amount),
            _ => 0,
        };
        if released > 0 && re.amount == Some(released) && re.outcome() != OperationStatus::Failed {
            return Verdict::Matched;
        }
        drift(stripe_finding(
            DriftClass::AmountDiffers,
            pi.operation_id.as_deref(),
            pi.order_id.as_deref(),
            re.id.as_str(),
            format!(
                "Stripe's refund of an authorization's released part ({}) is {} {}, and intent {pi_id} ({}) released {released}",
                re.reason.as_deref().unwrap_or(""),
                re.amount.unwrap_or(0),
                re.status.as_str(),
                pi.status.as_str(),
            ),
        ))
    }

    /// A listed dispute not spoken for by a settled record of the window: not ours unless its
    /// intent is; ours, its record must exist; an open record is the reconciler's to move
    /// (in flight) unless the amount it holds is not Stripe's.
    fn judge_dispute(&self, d: &StripeDispute) -> Verdict {
        let Some(pi) = d.payment_intent.as_ref().map(|pi| pi.as_str()) else {
            return Verdict::NotOurs;
        };
        if d.livemode != self.livemode || self.absent.contains(pi) {
            return Verdict::NotOurs;
        }
        if !self.is_our_intent(pi) {
            return if self.intents.contains_key(pi) {
                Verdict::NotOurs
            } else {
                Verdict::Unchecked
            };
        }
        if !self.disputes_read.contains(d.id.as_str()) {
            return Verdict::Unchecked;
        }
        let Some(op) = self.dispute_records.get(d.id.as_str()) else {
            let order = self.intents.get(pi).and_then(|i| i.order_id.as_deref());
            return drift(stripe_finding(
                DriftClass::DisputeUnrecorded,
                None,
                order,
                d.id.as_str(),
                format!(
                    "dispute {} of our intent {pi} ({}, {} {}, {}) has no record: no event \
                     recorded it, so nothing pages its deadline (due_by {})",
                    d.id,
                    d.status,
                    d.amount,
                    d.currency,
                    d.reason,
                    d.due_by
                        .map_or_else(|| "none".to_owned(), |t| t.to_rfc3339()),
                ),
            ));
        };
        if op.status.is_settled() {
            return compare(op, d);
        }
        match StripeDispute::asked(op) {
            Some((amount, currency))
                if amount != d.amount || !currency.eq_ignore_ascii_case(&d.currency) =>
            {
                drift(finding(
                    DriftClass::AmountDiffers,
                    op,
                    Some(d.id.as_str()),
                    format!(
                        "record {amount} {currency}, Stripe {} {}",
                        d.amount, d.currency
                    ),
                ))
            }
            _ => Verdict::InFlight,
        }
    }

    /// Our operation id on an intent of our mode.
    fn ours<'p>(&self, pi: &'p PaymentIntent) -> Option<&'p str> {
        if pi.livemode.is_some_and(|m| m != self.livemode) {
            return None;
        }
        pi.operation_id.as_deref()
    }

    fn is_our_intent(&self, id: &str) -> bool {
        self.intents
            .get(id)
            .is_some_and(|pi| self.ours(pi).is_some())
            || self
                .charges
                .values()
                .any(|op| op.external_id.as_ref().is_some_and(|e| e.as_str() == id))
    }

    /// Orders whose succeeded refunds exceed what their charge took.
    fn over_refunded(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        for order in self.refunds_read {
            let refunded: i64 = self
                .refunds_by_order
                .get(order.as_str())
                .into_iter()
                .flatten()
                .filter(|op| op.status == OperationStatus::Succeeded)
                .filter_map(|op| op.params.refund().map(|p| p.amount.minor_units()))
                .sum();
            if refunded == 0 {
                continue;
            }
            let charge = self.charges.get(order.as_str());
            let taken = charge.map(|c| taken(c)).unwrap_or(0);
            if refunded > taken {
                let detail = format!("refunds succeeded {refunded}, the charge took {taken}");
                out.push(match charge {
                    Some(c) => finding(
                        DriftClass::OverRefunded,
                        c,
                        c.external_id.as_ref().map(|i| i.as_str()),
                        detail,
                    ),
                    None => Finding {
                        class: DriftClass::OverRefunded,
                        order_id: Some(order.clone()),
                        operation_id: None,
                        kind: None,
                        stripe_id: None,
                        detail,
                    },
                });
            }
        }
        out
    }
}

/// Orders paid more than once across their charge attempts: more than one of an order's
/// attempts with a succeeded intent at Stripe (of our mode: listed or read by id), or more
/// than one succeeded attempt among the records read. One finding per order and side; one
/// operation with two succeeded intents is `duplicate_success`, and an intent naming an
/// operation no record has is `at_stripe_not_here`, not this.
fn paid_twice(ev: &Evidence) -> Vec<Finding> {
    let records = ev.settled.iter().chain(&ev.related).chain(&ev.unsettled);
    let attempts: BTreeSet<String> = records
        .filter(|op| op.kind.is_charge())
        .map(|op| op.operation_id.to_string())
        .collect();
    let mut at_stripe: BTreeMap<&str, BTreeMap<&str, &str>> = BTreeMap::new();
    let retrieved = ev.retrieved_intents.values().filter_map(Option::as_ref);
    for pi in ev.intents.iter().chain(retrieved) {
        if pi.status != PaymentIntentStatus::Succeeded
            || pi.livemode.is_some_and(|m| m != ev.livemode)
        {
            continue;
        }
        if let (Some(order), Some(op)) = (pi.order_id.as_deref(), pi.operation_id.as_deref()) {
            if !attempts.contains(op) {
                continue;
            }
            at_stripe
                .entry(order)
                .or_default()
                .insert(op, pi.id.as_str());
        }
    }
    let mut here: BTreeMap<&str, BTreeMap<String, &Operation>> = BTreeMap::new();
    let records = ev.settled.iter().chain(&ev.related).chain(&ev.unsettled);
    for op in records.filter(|op| op.kind.is_charge() && op.status == OperationStatus::Succeeded) {
        here.entry(op.order_id.as_str())
            .or_default()
            .insert(op.operation_id.to_string(), op);
    }
    let mut out = Vec::new();
    for (order, ops) in at_stripe.into_iter().filter(|(_, ops)| ops.len() > 1) {
        let intents: Vec<&str> = ops.values().copied().collect();
        out.push(Finding {
            class: DriftClass::PaidTwice,
            order_id: Some(order.to_owned()),
            operation_id: None,
            kind: Some("charge".to_owned()),
            stripe_id: intents.last().map(|id| (*id).to_owned()),
            detail: format!(
                "{} operations of order {order} have a succeeded PaymentIntent at Stripe: {}",
                intents.len(),
                intents.join(", ")
            ),
        });
    }
    for (order, ops) in here.into_iter().filter(|(_, ops)| ops.len() > 1) {
        let mut paid: Vec<&Operation> = ops.into_values().collect();
        paid.sort_by_key(|op| op.kind.attempt_no());
        let named: Vec<String> = paid
            .iter()
            .map(|op| format!("attempt {}", op.kind.attempt_no().unwrap_or(1)))
            .collect();
        let last = paid[paid.len() - 1];
        out.push(finding(
            DriftClass::PaidTwice,
            last,
            last.external_id.as_ref().map(|id| id.as_str()),
            format!(
                "{} charge attempts of order {order} are recorded succeeded: {}",
                paid.len(),
                named.join(", ")
            ),
        ));
    }
    out
}

/// What a charge record says was taken: the captured amount, or the amount if it succeeded.
fn taken(charge: &Operation) -> i64 {
    if charge.status != OperationStatus::Succeeded {
        return 0;
    }
    charge
        .amount_captured()
        .map(|a| a.minor_units())
        .or_else(|| charge.params.charge().map(|p| p.amount.minor_units()))
        .unwrap_or(0)
}

/// A settled record that names no Stripe object: fine if it failed (never reached Stripe), drift
/// if it says money moved.
fn no_object(op: &Operation, what: &str) -> Verdict {
    if op.status == OperationStatus::Succeeded {
        drift(finding(
            DriftClass::HereNotAtStripe,
            op,
            None,
            format!("record succeeded with no {what} recorded"),
        ))
    } else {
        Verdict::Matched
    }
}

/// A settled record against the Stripe object it names: whose the object is (its metadata), its
/// status, then amount and currency, then what was taken (where the object tells).
fn compare<O: StripeObject>(op: &Operation, object: &O) -> Verdict {
    let id = object.id();
    let differs = |class, detail: String| drift(finding(class, op, Some(id), detail));
    if let Some(other) = object
        .operation_id()
        .filter(|o| *o != op.operation_id.to_string())
    {
        return differs(
            DriftClass::HereNotAtStripe,
            format!("the record's {} carries operation {other}", O::NOUN),
        );
    }
    // Settled: succeeded agrees with money moved, failed with none moved.
    let settled_as = match op.status {
        OperationStatus::Succeeded => OperationStatus::Succeeded,
        _ => OperationStatus::Failed,
    };
    if object.outcome() != settled_as {
        return differs(
            DriftClass::StatusDiffers,
            format!(
                "record {}, Stripe {}{}",
                op.status.as_str(),
                object.status_name(),
                object.disagreement_note(op.status)
            ),
        );
    }
    let Some((amount, currency)) = O::asked(op) else {
        return Verdict::Matched;
    };
    let currency_differs = object
        .currency()
        .is_some_and(|c| !c.eq_ignore_ascii_case(currency));
    if object.amount().is_some_and(|a| a != amount) || currency_differs {
        return differs(
            DriftClass::AmountDiffers,
            format!(
                "record {amount} {currency}, Stripe {} {}",
                object.amount().unwrap_or(0),
                object.currency().unwrap_or("?")
            ),
        );
    }
    let received = object
        .received()
        .filter(|_| op.status == OperationStatus::Succeeded);
    match received {
        Some(r) if r != taken(op) => differs(
            DriftClass::AmountDiffers,
            format!("record took {}, Stripe received {r}", taken(op)),
        ),
        _ => Verdict::Matched,
    }
}
