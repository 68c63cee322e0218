//! Disputes: money the customer's bank takes back. Stripe-initiated: the engine never creates
//! one; it records, once, what Stripe holds for a dispute (retrieved at Stripe, whatever an event
//! claimed), keeps an order's refunds and lost disputes within what was taken, and pages a
//! person before the evidence deadline passes.
//!
//! This module is what Stripe holds for a dispute ([`StripeDispute`]) and what its statuses mean
//! ([`DisputeStatus`]); beside it:
//! - [`plan`]: (the dispute's record as read or none, its order's charge, the dispute as Stripe
//!   holds it, now) → create, move, settle, or why nothing is written; the money reserved on the
//!   charge beside its refunds, given back when won.
//! - [`state`]: what a dispute's record holds (what never changes, what Stripe moves).

pub mod plan;
pub mod state;

use std::fmt;
use std::time::Duration;

use crate::domain::{DisputeId, PaymentIntentId, StripeChargeId};
use crate::time::Timestamp;

/// A dispute's `status` as Stripe reports it. The `warning_*` statuses are inquiries: the bank
/// asks before it takes anything, no funds are withdrawn, and the charge can still be refunded.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DisputeStatus {
    WarningNeedsResponse,
    WarningUnderReview,
    WarningClosed,
    NeedsResponse,
    UnderReview,
    Won,
    Lost,
    /// A status this code does not know: open, never won or lost.
    Other(String),
}

impl DisputeStatus {
    pub fn parse(raw: &str) -> Self {
        match raw {
            "warning_needs_response" => Self::WarningNeedsResponse,
            "warning_under_review" => Self::WarningUnderReview,
            "warning_closed" => Self::WarningClosed,
            "needs_response" => Self::NeedsResponse,
            "under_review" => Self::UnderReview,
            "won" => Self::Won,
            "lost" => Self::Lost,
            other => Self::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::WarningNeedsResponse => "warning_needs_response",
            Self::WarningUnderReview => "warning_under_review",
            Self::WarningClosed => "warning_closed",
            Self::NeedsResponse => "needs_response",
            Self::UnderReview => "under_review",
            Self::Won => "won",
            Self::Lost => "lost",
            Self::Other(s) => s,
        }
    }

    /// Closed by Stripe: `won`, `lost` or `warning_closed`. Nothing changes after it.
    pub fn is_closed(&self) -> bool {
        matches!(self, Self::Won | Self::Lost | Self::WarningClosed)
    }

    /// An inquiry (`warning_*`): no funds withdrawn.
    pub fn is_inquiry(&self) -> bool {
        matches!(
            self,
            Self::WarningNeedsResponse | Self::WarningUnderReview | Self::WarningClosed
        )
    }

    /// Waiting for the merchant's evidence before `due_by`.
    pub fn needs_response(&self) -> bool {
        matches!(self, Self::NeedsResponse | Self::WarningNeedsResponse)
    }
}

impl fmt::Display for DisputeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A dispute as far as the engine needs it: what a retrieve or a list of Stripe's disputes
/// answers. Read only from Stripe: an event's copy is a hint, never this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeDispute {
    pub id: DisputeId,
    /// The charge the bank takes the money back from.
    pub charge: StripeChargeId,
    /// The charge's PaymentIntent: how the dispute is found under its order (the charge carries
    /// no metadata of ours, the intent's record does). `None` for a charge made without one,
    /// which is never ours.
    pub payment_intent: Option<PaymentIntentId>,
    /// The disputed amount in minor units (usually the charge's; can be less).
    pub amount: i64,
    pub currency: String,
    /// The bank's reason (`fraudulent`, `product_not_received`, ...).
    pub reason: String,
    pub status: DisputeStatus,
    /// `evidence_details.due_by`: evidence must be submitted before it, or the dispute is lost.
    /// `None` once nothing more can be submitted.
    pub due_by: Option<Timestamp>,
    /// `evidence_details.has_evidence`: evidence was saved or submitted.
    pub has_evidence: bool,
    /// Stripe says the charge can still be refunded (an inquiry; false once funds are withdrawn).
    pub is_charge_refundable: bool,
    /// How many balance transactions moved money for it (0: none; 1: withdrawn; 2: withdrawn
    /// and reinstated).
    pub balance_transactions: u32,
    pub livemode: bool,
    pub created: Timestamp,
}

/// The timings of the dispute plan.
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
