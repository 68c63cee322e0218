//! The event half of the state machine: what a Stripe event may do to an operation, as pure
//! functions of (the record as claimed, what Stripe holds for the event's PaymentIntent, now).
//!
//! An event is a hint, never a fact: the events function reads the event, asks Stripe for the
//! intent's state (a retrieve), and only then decides, here, on the record it claimed. An event
//! only ever *settles*: it moves an unsettled operation through the same transitions the executor
//! records ([`outcome_for`] decides what a status means), never creates or confirms anything, and
//! never changes a settled record (a contradiction pages a person instead).

use crate::charge::plan::Mismatch;
use crate::domain::{OperationId, OrderId, PaymentIntentId};
use crate::operation::{Operation, OperationStatus};
use crate::outcome::{outcome_for, PaymentIntent, PaymentIntentStatus};
use crate::plan::{Decision, Policy, ReviewClass};
use crate::time::Timestamp;

/// The review reason for a succeeded PaymentIntent other than the one recorded: a suspected
/// double charge.
pub const SECOND_PAYMENT_INTENT: &str = "second_payment_intent";

/// The PaymentIntent an event carries (its state when the event was created).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventIntent {
    pub id: PaymentIntentId,
    pub status: PaymentIntentStatus,
    /// `metadata.order_id` and `metadata.operation_id`, set by our create. Absent on
    /// PaymentIntents this system did not create.
    pub order_id: Option<OrderId>,
    pub operation_id: Option<OperationId>,
    /// `metadata.attempt`: which of the order's charge attempts created it (1 to 20). Absent
    /// on the first attempt's intents and on every intent created before attempts: the first.
    pub attempt: Option<u32>,
}

/// Why Stripe does not confirm what an event says (the `Reason` of the `EventMismatch` metric):
/// the event was forged, misrouted or from another account or mode. Nothing is moved; a person
/// is paged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventMismatch {
    /// Stripe's PaymentIntent is not the operation's (metadata, amount, currency or mode).
    Intent(Mismatch),
    /// The event claims a final state (succeeded, canceled) that Stripe does not hold.
    StatusContradicted,
    /// Stripe has no such PaymentIntent for our key.
    UnknownPaymentIntent,
    /// Stripe's refund is not the operation's (metadata, intent, amount or currency), or not
    /// the one the event names.
    RefundNotOurs,
    /// Stripe has no such refund.
    UnknownRefund,
    /// Stripe has no such dispute (a dispute event naming one Stripe does not hold).
    UnknownDispute,
    /// Stripe's dispute holds an amount or currency no record can hold: nothing written, a
    /// person looks.
    DisputeUnrecordable,
}

impl EventMismatch {
    pub fn as_str(&self) -> &'static str {
        match self {
            EventMismatch::Intent(m) => m.as_str(),
            EventMismatch::StatusContradicted => "status_contradicted",
            EventMismatch::UnknownPaymentIntent => "unknown_payment_intent",
            EventMismatch::RefundNotOurs => "refund_not_ours",
            EventMismatch::UnknownRefund => "unknown_refund",
            EventMismatch::UnknownDispute => "unknown_dispute",
            EventMismatch::DisputeUnrecordable => "dispute_unrecordable",
        }
    }
}

/// Why an event changes nothing (the `Reason` of the `WebhookIgnored` metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ignored {
    /// A type the endpoint does not act on.
    UnhandledType,
    /// No `metadata.order_id` / `operation_id`: not one of ours.
    NotOurs,
    /// No operation with that key and operation id.
    UnknownOperation,
    /// Already settled the same way: the duplicate or late event of an outcome we know.
    AlreadySettled,
    /// Unsettled, and the event says nothing we have not recorded.
    NothingNew,
    /// A person owns the operation (in review).
    InReview,
    /// A non-succeeded state of a PaymentIntent other than the recorded one.
    OtherIntent,
    /// The same Stripe event id was processed before.
    Duplicate,
}

impl Ignored {
    pub fn as_str(&self) -> &'static str {
        match self {
            Ignored::UnhandledType => "unhandled_type",
            Ignored::NotOurs => "not_ours",
            Ignored::UnknownOperation => "unknown_operation",
            Ignored::AlreadySettled => "already_settled",
            Ignored::NothingNew => "nothing_new",
            Ignored::InReview => "in_review",
            Ignored::OtherIntent => "other_intent",
            Ignored::Duplicate => "duplicate",
        }
    }
}

/// What one event means for one operation, once Stripe has answered for its PaymentIntent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Ignore(Ignored),
    /// Settle the unsettled operation (`Succeeded` or `Failed`) with this PaymentIntent.
    Settle {
        status: OperationStatus,
        external_id: PaymentIntentId,
    },
    /// Still unknown; record the PaymentIntent id so the next look is a retrieve.
    RecordIntent {
        external_id: PaymentIntentId,
    },
    /// A succeeded PaymentIntent other than the recorded one, on an unsettled operation:
    /// flag it for review ([`SECOND_PAYMENT_INTENT`]).
    Review {
        external_id: PaymentIntentId,
    },
    /// The same on a settled record (or a settled record that Stripe contradicts): settled is
    /// final, so nothing is written; the caller pages (`WebhookSettledConflict`).
    PageSettled {
        reason: &'static str,
    },
}

/// True for the states a PaymentIntent never leaves: an event that claims one of them must find
/// Stripe holding it, or the event is not telling the truth.
pub fn is_final(status: &PaymentIntentStatus) -> bool {
    matches!(
        status,
        PaymentIntentStatus::Succeeded | PaymentIntentStatus::Canceled
    )
}

/// Decides, for the operation `op`, what the PaymentIntent `pi_id` in `status` means. `status`
/// is Stripe's answer to a retrieve, never the event's copy (events are not ordered and are only
/// a hint), and the intent has been checked to be the operation's
/// ([`crate::charge::plan::intent_mismatch`]).
///
/// A settled record is compared whatever else it carries: one resolved by hand keeps its
/// `review` (the evidence), and Stripe contradicting it must still page.
pub fn decide(op: &Operation, pi_id: &PaymentIntentId, status: &PaymentIntentStatus) -> Action {
    if op.review.is_some() && !op.status.is_settled() {
        return Action::Ignore(Ignored::InReview);
    }
    let outcome = outcome_for(status);
    let other_intent = op.external_id.as_ref().is_some_and(|id| id != pi_id);
    if other_intent {
        return match (outcome, op.status.is_settled()) {
            (OperationStatus::Succeeded, true) => Action::PageSettled {
                reason: SECOND_PAYMENT_INTENT,
            },
            (OperationStatus::Succeeded, false) => Action::Review {
                external_id: pi_id.clone(),
            },
            _ => Action::Ignore(Ignored::OtherIntent),
        };
    }
    if op.status.is_settled() {
        return if outcome == OperationStatus::Succeeded && op.status == OperationStatus::Failed {
            // We recorded failed; Stripe says this intent took the money.
            Action::PageSettled {
                reason: "settled_failed_but_succeeded",
            }
        } else if outcome == OperationStatus::Failed && op.status == OperationStatus::Succeeded {
            // We recorded this intent as succeeded; Stripe says it did not take the money.
            Action::PageSettled {
                reason: "settled_succeeded_but_failed",
            }
        } else {
            Action::Ignore(Ignored::AlreadySettled)
        };
    }
    match outcome {
        OperationStatus::Succeeded | OperationStatus::Failed => Action::Settle {
            status: outcome,
            external_id: pi_id.clone(),
        },
        _ if op.external_id.as_deref() == Some(pi_id) => Action::Ignore(Ignored::NothingNew),
        _ => Action::RecordIntent {
            external_id: pi_id.clone(),
        },
    }
}

/// True when the event, taken at its word, could not change or contradict `op`: a settled record
/// and an event naming its own intent in the outcome it recorded, or an unsettled record a person
/// owns. Such an event is acknowledged without asking Stripe (duplicates and late events of an
/// outcome we know cost no Stripe call); anything else is checked at Stripe first.
pub fn needs_no_check(op: &Operation, claimed: &EventIntent) -> bool {
    if !op.status.is_settled() {
        return op.review.is_some();
    }
    op.external_id.as_ref() == Some(&claimed.id) && outcome_for(&claimed.status) == op.status
}

/// After a Stripe event made us retrieve one of the operation's PaymentIntents (`pi` is Stripe's
/// answer, never the event's copy), on the record as claimed: the event rule
/// ([`decide`]) says what it means, and the same answer rules as the
/// executor's (`Decision::from_payment_intent`: the intent is checked to be the operation's,
/// then settled, reviewed as stuck or recorded as unknown; a declined one asks for its cancel
/// first) make the record. Nothing that is not new changes the record, not even its next look.
pub fn after_event(
    op: &Operation,
    pi: PaymentIntent,
    now: Timestamp,
    policy: &Policy,
    livemode: bool,
) -> (Action, Decision) {
    let action = decide(op, &pi.id, &pi.status);
    let decision = match &action {
        Action::Settle { .. } | Action::RecordIntent { .. } => {
            Decision::from_payment_intent(op, pi, now, policy, livemode)
        }
        Action::Review { external_id } => Decision::review(
            op.status,
            format!(
                "{}: payment intent {external_id} succeeded; recorded {}",
                ReviewClass::SecondPaymentIntent.as_str(),
                op.external_id.as_deref().unwrap_or("none")
            ),
            ReviewClass::SecondPaymentIntent,
            now,
        ),
        Action::Ignore(_) | Action::PageSettled { .. } => {
            crate::charge::plan::release(op, op.next_due_at.unwrap_or(now))
        }
    };
    (action, decision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operation::Review;
    use crate::testing;

    fn pi(id: &str) -> PaymentIntentId {
        PaymentIntentId::parse(id).unwrap()
    }

    fn op(status: OperationStatus, external_id: Option<&str>) -> Operation {
        let mut op = testing::order("order-1")
            .requested_by("webhook-tests")
            .at(Timestamp::from_millis(0))
            .status(status)
            .build();
        op.external_id = external_id.map(pi);
        op
    }

    fn reviewed(status: OperationStatus) -> Operation {
        let mut op = op(status, None);
        op.review = Some(Review {
            reason: "stuck_processing".into(),
            flagged_at: Timestamp::from_millis(1),
        });
        op
    }

    #[test]
    fn review_is_left_to_a_person_until_resolved_then_compared() {
        let open = reviewed(OperationStatus::Unknown);
        assert_eq!(
            decide(&open, &pi("pi_a"), &PaymentIntentStatus::Succeeded),
            Action::Ignore(Ignored::InReview)
        );
        // Resolved by hand as failed; the review evidence stays on the record. Stripe saying
        // the money was taken must page.
        let resolved = reviewed(OperationStatus::Failed);
        assert_eq!(
            decide(&resolved, &pi("pi_a"), &PaymentIntentStatus::Succeeded),
            Action::PageSettled {
                reason: "settled_failed_but_succeeded"
            }
        );
    }

    #[test]
    fn only_what_cannot_change_anything_skips_stripe() {
        let claim = |id: &str, status| EventIntent {
            id: pi(id),
            status,
            order_id: None,
            operation_id: None,
            attempt: None,
        };
        let settled = op(OperationStatus::Succeeded, Some("pi_a"));
        assert!(needs_no_check(
            &settled,
            &claim("pi_a", PaymentIntentStatus::Succeeded)
        ));
        for (name, op, c) in [
            (
                "settled, the event claims the opposite",
                settled.clone(),
                claim("pi_a", PaymentIntentStatus::Canceled),
            ),
            (
                "settled, another intent",
                settled.clone(),
                claim("pi_b", PaymentIntentStatus::Succeeded),
            ),
            (
                "unsettled",
                op(OperationStatus::Unknown, Some("pi_a")),
                claim("pi_a", PaymentIntentStatus::Succeeded),
            ),
            (
                "resolved by hand",
                reviewed(OperationStatus::Failed),
                claim("pi_a", PaymentIntentStatus::Succeeded),
            ),
        ] {
            assert!(!needs_no_check(&op, &c), "{name}");
        }
        assert!(needs_no_check(
            &reviewed(OperationStatus::Unknown),
            &claim("pi_a", PaymentIntentStatus::Succeeded)
        ));
    }
}
