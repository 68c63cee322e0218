//! The refund half of the event rules: what a Stripe refund event (`refund.created`,
//! `refund.updated`, `refund.failed`, `charge.refund.updated`) may do to a refund operation, as a
//! pure function of (the record as read, what the event claims, what Stripe answers to a
//! retrieve of the refund).
//!
//! As for a PaymentIntent, an event is a hint: the events function retrieves the refund and
//! decides here on Stripe's answer. An unsettled record settles through the refund plan's own
//! rules ([`crate::refund::plan::after_retrieve`], in the executor's shell); a settled record
//! takes one transition only, `succeeded → failed` when Stripe says the refund failed after it
//! was issued (a closed or lost card), written with its reservation given back
//! ([`RefundFailedLater`]). Every other disagreement changes nothing and pages.

use crate::charge::event_plan::{EventMismatch, Ignored};
use crate::domain::{OperationId, OrderId, StripeRefundId};
use crate::operation::{Operation, OperationStatus};
use crate::refund::plan::refund_mismatch;
use crate::refund::{refund_outcome_for, RefundStatus, StripeRefund};
use crate::store::{RefundFailedLater, ReleaseRefund};
use crate::time::Timestamp;

/// The review/page reason for a refund with our operation id other than the one recorded: two
/// refunds made under one operation (a suspected double refund).
pub const SECOND_REFUND: &str = "second_refund";

/// Stripe's `failure_reason` when its answer names none.
const UNKNOWN_FAILURE: &str = "unknown";

/// The refund an event carries (its state when the event was created).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRefund {
    pub id: StripeRefundId,
    pub status: RefundStatus,
    /// `metadata.order_id` and `metadata.operation_id`, set by our create; absent on refunds
    /// this system did not make (the dashboard's, another integration's).
    pub order_id: Option<OrderId>,
    pub operation_id: Option<OperationId>,
}

/// What one refund event means for one refund operation, once Stripe has answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundEventAction {
    Ignore(Ignored),
    /// The record is unsettled: Stripe's answer goes through the refund plan's rules
    /// ([`crate::refund::plan::after_retrieve`]) in the executor's shell (claim, decide, fenced
    /// record), as if the executor had retrieved it.
    Settle,
    /// Stripe says the succeeded refund failed later: write this (its reservation back to the
    /// charge in the same write). The outbox publishes `RefundFailed`.
    FailLater(RefundFailedLater),
    /// Stripe contradicts a settled record (or names a second refund of ours): settled is final,
    /// nothing is written, a person is paged (`WebhookSettledConflict`).
    PageSettled {
        reason: &'static str,
    },
    /// Stripe does not confirm the event (a forged or misrouted event): nothing is written, a
    /// person is paged (`EventMismatch`).
    Mismatch(EventMismatch),
}

/// True for the refund states an event may claim only if Stripe still holds them: `failed` and
/// `canceled` are never left. (`succeeded` is: a refund may fail later, so an old `succeeded`
/// event arriving after the failure is history, not a lie.)
fn is_final(status: &RefundStatus) -> bool {
    matches!(status, RefundStatus::Failed | RefundStatus::Canceled)
}

/// Decides, for the refund operation `op` (as read), what the event claiming `claimed` means
/// when Stripe's retrieve answered `stripe`. The checks go in order: the refund is the
/// operation's; it is the refund recorded; the event does not claim a final state Stripe does not
/// hold; then the record's status against Stripe's.
pub fn decide(
    op: &Operation,
    claimed: &EventRefund,
    stripe: &StripeRefund,
    now: Timestamp,
) -> RefundEventAction {
    if refund_mismatch(op, stripe).is_some() || stripe.id != claimed.id {
        return RefundEventAction::Mismatch(EventMismatch::RefundNotOurs);
    }
    if op.stripe_refund_id().is_some_and(|id| *id != stripe.id) {
        return RefundEventAction::PageSettled {
            reason: SECOND_REFUND,
        };
    }
    if is_final(&claimed.status) && stripe.status != claimed.status {
        return RefundEventAction::Mismatch(EventMismatch::StatusContradicted);
    }
    if !op.status.is_settled() {
        return unsettled(op, stripe);
    }
    settled(op, stripe, now)
}

fn unsettled(op: &Operation, stripe: &StripeRefund) -> RefundEventAction {
    if op.review.is_some() {
        return RefundEventAction::Ignore(Ignored::InReview);
    }
    let outcome = refund_outcome_for(&stripe.status);
    if !outcome.is_settled() && op.stripe_refund_id() == Some(&stripe.id) {
        return RefundEventAction::Ignore(Ignored::NothingNew);
    }
    RefundEventAction::Settle
}

fn settled(op: &Operation, stripe: &StripeRefund, now: Timestamp) -> RefundEventAction {
    use OperationStatus::{Failed, Succeeded};
    let page = |reason| RefundEventAction::PageSettled { reason };
    match (op.status, &stripe.status) {
        (Succeeded, RefundStatus::Succeeded) => RefundEventAction::Ignore(Ignored::AlreadySettled),
        (Failed, RefundStatus::Failed | RefundStatus::Canceled) => {
            RefundEventAction::Ignore(Ignored::AlreadySettled)
        }
        (Succeeded, RefundStatus::Failed) => {
            RefundEventAction::FailLater(fail_later(op, stripe, now))
        }
        // Only a `requires_action` refund can be canceled: one that succeeded never is.
        (Succeeded, RefundStatus::Canceled) => page("refund_succeeded_but_canceled"),
        (Succeeded, _) => page("refund_succeeded_but_pending"),
        (_, RefundStatus::Succeeded) => page("refund_failed_but_succeeded"),
        _ => page("refund_failed_but_pending"),
    }
}

/// The write of a succeeded refund Stripe says failed later: `failed`, Stripe's reason, and its
/// amount given back to the order's charge.
pub fn fail_later(op: &Operation, stripe: &StripeRefund, now: Timestamp) -> RefundFailedLater {
    RefundFailedLater {
        key: op.key(),
        operation_id: op.operation_id,
        failure_reason: stripe
            .failure_reason
            .clone()
            .unwrap_or_else(|| UNKNOWN_FAILURE.to_owned()),
        release: ReleaseRefund {
            charge: op.charge_key(),
            amount: op.params.amount(),
            now,
        },
        now,
    }
}

/// True when the event, taken at its word, could not change or contradict `op`: a settled
/// record, and the event naming its recorded refund in the outcome it recorded (a duplicate or a
/// late event of what we know), or an unsettled record a person owns. Such an event is
/// acknowledged without asking Stripe; anything else is checked at Stripe first.
pub fn needs_no_check(op: &Operation, claimed: &EventRefund) -> bool {
    if !op.status.is_settled() {
        return op.review.is_some();
    }
    op.stripe_refund_id() == Some(&claimed.id) && refund_outcome_for(&claimed.status) == op.status
}
