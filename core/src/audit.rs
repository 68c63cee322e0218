//! The drift audit's rules: every Stripe object that carries our operation id, and every record
//! settled in a window, matched to the other side; what does not match gets a class.
//!
//! The audit never changes a record: it reports. Its shell (`charge_once::audit`) lists what
//! Stripe created in the window (lists, never search: lists are not delayed), reads the records
//! settled in the window and the ones Stripe's metadata names, asks [`wants`] what else must be
//! read (a record's object created before the window, an intent a metadata-less refund points
//! at), and hands everything to [`judge`], which gives every object and every record one verdict.
//!
//! Classes split in two. **Drift** (the records and Stripe disagree: someone must look) and
//! **watch** (nothing disagrees yet, but a deadline is close or passed: an authorization near its
//! capture deadline, an operation unsettled past the key window). Both page; a clean day has 0 of
//! either.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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
    /// An order's refunds exceed what its charge took.
    OverRefunded,
    /// Watch: an authorization whose capture deadline is closer than the page lead.
    AuthorizationNearDeadline,
    /// Watch: an operation unsettled (not in review) longer than the key window.
    UnsettledPastKeyWindow,
}

impl DriftClass {
    pub const ALL: [DriftClass; 8] = [
        DriftClass::AtStripeNotHere,
        DriftClass::HereNotAtStripe,
        DriftClass::StatusDiffers,
        DriftClass::AmountDiffers,
        DriftClass::DuplicateSuccess,
        DriftClass::OverRefunded,
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
            DriftClass::OverRefunded => "over_refunded",
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
    /// Records settled in the window.
    pub settled_records: u64,
    /// Stripe objects that are not ours (no operation id, and not a refund of one of our intents).
    pub not_ours: u64,
    /// Objects and records whose other side agrees.
    pub matched: u64,
    /// Stripe objects whose record is still unsettled (the engine's work, not drift); a record
    /// settled later is matched in the window it settles in.
    pub in_flight: u64,
    /// Records unsettled and waiting for a person (already paged by `InReview`).
    pub in_review: u64,
    /// Records this release cannot read: counted and skipped.
    pub unreadable: u64,
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
    /// Whether the audit read everything in the window (false: it ran out of time or Stripe
    /// refused; what it read is reported, the rest is not vouched for).
    #[serde(default = "complete_default")]
    pub complete: bool,
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
