//! What every plan shares: the engine's vocabulary. Each kind of money movement (the charge,
//! a refund, a capture or a cancel) has a plan of its own under its room (`charge::plan`,
//! `refund::plan`, `take::plan`); all of them answer with the same [`Decision`] (the next record),
//! flag for a person with the same [`ReviewClass`], run on the same [`Policy`] and look again on
//! the same back-off ([`unknown_due_at`], [`backoff_due_at`]). The shell that executes every kind
//! (claim, act, fenced record) reads a decision as a [`Disposition`] for the message that asked.
//!
//! Two fields of a decision are the charge's alone: [`Decision::then`] (the calls a charge's
//! PaymentIntent may need before recording, [`FollowUp`]) and [`Decision::authorization`] (what a
//! manual capture's charge learns, [`Hold`]); the other kinds leave them `None`.

use std::time::Duration;

use crate::domain::{Amount, PaymentIntentId};
use crate::operation::{Operation, OperationStatus};
use crate::outcome::RetryCause;
use crate::time::Timestamp;

/// The timings that govern execution and reconciliation.
#[derive(Debug, Clone)]
pub struct Policy {
    /// How long after `first_attempted_at` a create may be re-sent with the same key. Stripe may prune
    /// keys once they are 24 h old; 23 h leaves a margin (our judgement, not Stripe's guarantee).
    pub key_window: Duration,
    /// How long after the key window before we trust Stripe search (which is not read-after-write).
    pub search_min_age: Duration,
    /// How long a claim protects the Stripe call. Longer than the HTTP client's total timeout.
    pub lease_ttl: Duration,
    /// How long a fresh `pending` operation may wait for its queue message before the reconciler
    /// re-sends it.
    pub pending_grace: Duration,
    /// When to look again after "nothing happened, retry later" (429, 409, auth).
    pub retry_after: Duration,
    /// Backoff for unknown outcomes: `base * 2^(attempts-1)`, capped at `max`.
    pub unknown_backoff_base: Duration,
    pub unknown_backoff_max: Duration,
    /// How long after the first attempt a PaymentIntent may stay `requires_action` or
    /// `processing` before the operation goes to review (`stuck_<status>`).
    pub stuck_after: Duration,
    /// How long before an authorization's deadline (Stripe's `capture_before`) an uncaptured
    /// one pages: the time a person has to capture or cancel it before the money is lost.
    pub authorization_page_lead: Duration,
    /// When an open dispute is read again at Stripe ([`DisputePolicy`]: the deadline page
    /// window, the template's `DisputeDeadlinePageHours`; when the page is raised:
    /// [`crate::dispute::deadline`]).
    pub dispute: DisputePolicy,
}

/// The timings of the dispute plan ([`crate::dispute::plan`]), here with the other timings so
/// that the policy names them without the plan's module naming this one back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DisputePolicy {
    /// How long before `due_by` an open dispute is read again (the template's
    /// `DisputeDeadlinePageHours`): the page is raised from that read.
    pub page_window: Duration,
    /// The longest an open dispute waits before it is read again, with or without events.
    pub reread_at_most: Duration,
    /// The shortest: a dispute inside its page window is read again this often, not every tick.
    pub reread_at_least: Duration,
}

impl Default for DisputePolicy {
    fn default() -> Self {
        Self {
            page_window: Duration::from_secs(72 * 3600),
            reread_at_most: Duration::from_secs(24 * 3600),
            reread_at_least: Duration::from_secs(3600),
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            key_window: Duration::from_secs(23 * 3600),
            search_min_age: Duration::from_secs(10 * 60),
            lease_ttl: Duration::from_secs(60),
            pending_grace: Duration::from_secs(5 * 60),
            retry_after: Duration::from_secs(60),
            unknown_backoff_base: Duration::from_secs(60),
            unknown_backoff_max: Duration::from_secs(3600),
            stuck_after: Duration::from_secs(72 * 3600),
            authorization_page_lead: Duration::from_secs(12 * 3600),
            dispute: Default::default(),
        }
    }
}

/// What the caller should do with the message that asked for this execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// It was settled before we came: nothing was called.
    AlreadySettled,
    /// We settled it now.
    Settled,
    /// Recorded as unknown (or still pending); the unknown index schedules the next look.
    Scheduled,
    /// Nothing happened at Stripe and the store is unchanged but for the error: retry the message.
    RetryLater(RetryCause),
    /// Someone else holds a live lease on it: retry the message later.
    Busy,
    /// A person must look at it; the reason is recorded on the operation.
    InReview(String),
    /// Our outcome was refused because someone else's write came first (lease lost, or settled
    /// meanwhile). The other writer's record stands.
    Superseded,
}

impl Disposition {
    /// True when the triggering message should be retried (reported as a batch item failure).
    pub fn wants_retry(&self) -> bool {
        matches!(self, Disposition::RetryLater(_) | Disposition::Busy)
    }
}

/// Why an operation went to review, as a small fixed set: the `ReasonClass` dimension of the
/// `SentToReview` metric (the reason itself is free text on the record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReviewClass {
    /// 400 `idempotency_error`: a bug in key derivation.
    KeyMisuse,
    /// Stripe refused the create as invalid (amount below minimum, unknown customer, ...).
    Rejected,
    /// A recorded PaymentIntent id could not be read back.
    RetrieveFailed,
    /// Past the key window, search found 0 or more than 1 PaymentIntent.
    SearchAmbiguous,
    /// Past the key window, search itself was refused.
    SearchFailed,
    /// The PaymentIntent stayed `requires_action` past the stuck bound.
    StuckRequiresAction,
    /// The PaymentIntent stayed `processing` past the stuck bound.
    StuckProcessing,
    /// Stripe answered with a PaymentIntent that is not this operation's (its metadata, amount,
    /// currency or mode differ from the record): nothing is settled from it.
    IntentMismatch,
    /// A succeeded PaymentIntent other than the recorded one (a Stripe event told of it): a
    /// suspected double charge.
    SecondPaymentIntent,
    /// Stripe refused to cancel the operation's declined PaymentIntent for a reason other than
    /// its state (unknown to Stripe, invalid): it may still be confirmed, so it is not failed.
    CancelFailed,
    /// Stripe answered with a refund that is not this refund operation's.
    RefundMismatch,
    /// Past the key window, the intent's refunds list none or several for the operation.
    RefundListAmbiguous,
    /// A refund stayed `pending` or `requires_action` past the stuck bound.
    StuckRefund,
    /// A capture or a cancel that cannot be made: refused by Stripe for a reason other than the
    /// intent's state (then failed, its authorization given back: never a review), a cancel
    /// that found the intent captured (failed, the capture recorded), or one with no intent
    /// to act on (a review).
    TakeRefused,
    /// A dispute Stripe withdrew funds for does not fit beside its order's refunds (refunded +
    /// disputed would exceed what was taken): recorded without its reservation.
    DisputeUnreserved,
}

impl ReviewClass {
    pub fn as_str(&self) -> &'static str {
        match self {
            ReviewClass::KeyMisuse => "key_misuse",
            ReviewClass::Rejected => "rejected",
            ReviewClass::RetrieveFailed => "retrieve_failed",
            ReviewClass::SearchAmbiguous => "search_ambiguous",
            ReviewClass::SearchFailed => "search_failed",
            ReviewClass::StuckRequiresAction => "stuck_requires_action",
            ReviewClass::StuckProcessing => "stuck_processing",
            ReviewClass::IntentMismatch => "intent_mismatch",
            ReviewClass::SecondPaymentIntent => "second_payment_intent",
            ReviewClass::CancelFailed => "cancel_failed",
            ReviewClass::RefundMismatch => "refund_mismatch",
            ReviewClass::RefundListAmbiguous => "refund_list_ambiguous",
            ReviewClass::StuckRefund => "stuck_refund",
            ReviewClass::TakeRefused => "take_refused",
            ReviewClass::DisputeUnreserved => "dispute_unreserved",
        }
    }
}

/// The next record for an operation, and what it means for the caller
/// ([`Decision::disposition`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub status: OperationStatus,
    /// The PaymentIntent id to record; `None` leaves the recorded one (if any) as it is.
    pub external_id: Option<PaymentIntentId>,
    pub last_error: Option<String>,
    /// When a person must decide: why, as a class (the `ReasonClass` of the `SentToReview`
    /// metric) and as the reason recorded on the operation.
    pub review: Option<(ReviewClass, String)>,
    /// `None` when settled.
    pub next_due_at: Option<Timestamp>,
    /// Nothing happened at Stripe and the message that asked should be retried, for this cause.
    pub retry: Option<RetryCause>,
    /// A call to make before recording: its answer makes the decision that is recorded. This
    /// decision (unsettled, due now) is what stands if the call is never made.
    pub then: Option<FollowUp>,
    /// What an authorization's record learns besides its status (`None`: nothing).
    pub authorization: Option<Hold>,
}

/// What a manual capture's charge learns from Stripe besides its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hold {
    /// Stripe's deadline for the capture, when this answer stated it.
    pub capture_before: Option<Timestamp>,
    /// What Stripe took, once it holds the intent captured.
    pub amount_captured: Option<Amount>,
    /// Uncaptured, with its deadline less than the policy's lead away (or passed): a person
    /// must be paged (`AuthorizationNearDeadline`) before the money is lost.
    pub deadline_near: bool,
}

impl Decision {
    /// What the decision means for the message that asked: in review when a person must decide,
    /// retried when Stripe did nothing, else settled or scheduled as the status is.
    pub fn disposition(&self) -> Disposition {
        if let Some((_, reason)) = &self.review {
            Disposition::InReview(reason.clone())
        } else if let Some(cause) = self.retry {
            Disposition::RetryLater(cause)
        } else if self.status.is_settled() {
            Disposition::Settled
        } else {
            Disposition::Scheduled
        }
    }

    /// Flags for review; the index orders review items by when they were flagged.
    pub(crate) fn review(
        status: OperationStatus,
        reason: String,
        class: ReviewClass,
        now: Timestamp,
    ) -> Self {
        Decision {
            status,
            external_id: None,
            last_error: Some(reason.clone()),
            review: Some((class, reason)),
            next_due_at: Some(now),
            retry: None,
            then: None,
            authorization: None,
        }
    }
}

/// A call a decision asks for before it may be recorded, with what it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowUp {
    /// Cancel the operation's declined PaymentIntent `id` (`why`: what declined it), then
    /// [`after_cancel`](crate::charge::plan::after_cancel).
    Cancel { id: PaymentIntentId, why: String },
    /// Read `id` back after Stripe refused its cancel because the intent moved on, then
    /// [`after_cancel_refused`](crate::charge::plan::after_cancel_refused).
    Retrieve { id: PaymentIntentId, why: String },
    /// Read the authorization `id` (with its charge) for the deadline its create's answer did
    /// not state, then [`after_retrieve`](crate::charge::plan::after_retrieve).
    ReadDeadline { id: PaymentIntentId },
}

impl FollowUp {
    pub fn name(&self) -> &'static str {
        match self {
            FollowUp::Cancel { .. } => "cancel",
            FollowUp::Retrieve { .. } => "retrieve",
            FollowUp::ReadDeadline { .. } => "read_deadline",
        }
    }
}

/// When search may settle an operation: the key window plus Stripe's search lag, measured from the
/// first attempt. A create made late in the window is covered because the window closes all creates
/// `search_min_age` before search opens.
pub fn search_allowed_at(op: &Operation, policy: &Policy) -> Timestamp {
    let first = op.first_attempted_at.unwrap_or(op.created_at);
    first.plus(policy.key_window).plus(policy.search_min_age)
}

/// True once the operation has waited longer than the stuck bound since its first attempt.
pub fn stuck(op: &Operation, now: Timestamp, policy: &Policy) -> bool {
    op.first_attempted_at
        .is_some_and(|first| now >= first.plus(policy.stuck_after))
}

/// Backoff for an unknown outcome: `base * 2^(attempts-1)`, capped, never past the moment search
/// may settle it.
pub fn unknown_due_at(op: &Operation, now: Timestamp, policy: &Policy) -> Timestamp {
    backoff_due_at(op, now, policy, op.attempts.saturating_sub(1))
}

/// The one back-off curve, for the executor's unknowns and the reconciler's re-drives:
/// `now + base * 2^step`, capped at `unknown_backoff_max`; for an attempted operation, never past
/// the moment search may settle it (unless that moment has come already).
pub fn backoff_due_at(op: &Operation, now: Timestamp, policy: &Policy, step: u32) -> Timestamp {
    let backoff = policy
        .unknown_backoff_base
        .saturating_mul(1u32 << step.min(20))
        .min(policy.unknown_backoff_max);
    let due = now.plus(backoff);
    if op.first_attempted_at.is_none() {
        return due;
    }
    let search_at = search_allowed_at(op, policy);
    if due > search_at && now < search_at {
        search_at
    } else {
        due
    }
}
