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
}

impl EventMismatch {
    pub fn as_str(&self) -> &'static str {
        match self {
            EventMismatch::Intent(m) => m.as_str(),
            EventMismatch::StatusContradicted => "status_contradicted",
            EventMismatch::UnknownPaymentIntent => "unknown_payment_intent",
            EventMismatch::RefundNotOurs => "refund_not_ours",
            EventMismatch::UnknownRefund => "unknown_refund",
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

    /// One line of the event rule: (the record as found: its status and recorded intent; what
    /// Stripe holds for the event's intent `pi_a`) → what the event may do.
    struct Row {
        says: &'static str,
        found: (OperationStatus, Option<&'static str>),
        stripe: PaymentIntentStatus,
        then: Action,
    }

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

    /// What a decision means for the caller, with the review's class.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Then {
        Settled,
        Scheduled,
        Review(ReviewClass),
    }

    /// One line of the event half of the plan: (the record as claimed, Stripe's answer for the
    /// event's intent, now) → (what the event does, the next record, what it means, the call it
    /// asks the charge path for).
    struct AfterRow {
        says: &'static str,
        found: Operation,
        stripe: PaymentIntent,
        now: Timestamp,
        action: Action,
        /// The next record: its status, the intent recorded (`None` keeps the recorded one),
        /// its next look.
        status: OperationStatus,
        intent: Option<&'static str>,
        next_look: Option<Timestamp>,
        then: Then,
        /// The call the decision asks for before `failed` (left to the charge path).
        asks: Option<&'static str>,
    }

    #[test]
    fn after_event_table() {
        use crate::testing::T0;
        use std::time::Duration;
        use OperationStatus::*;
        use PaymentIntentStatus as P;
        const MIN: Duration = Duration::from_secs(60);
        let policy = Policy::default();
        let now = T0.plus(60 * MIN);
        // One operation, as the shell's claim hands it over: attempted once at T0.
        let one = op(Unknown, None);
        let claimed = |status, recorded: Option<&str>| Operation {
            status,
            first_attempted_at: Some(T0),
            attempts: 1,
            external_id: recorded.map(pi),
            next_due_at: Some(now.plus(30 * MIN)),
            ..one.clone()
        };
        let base = claimed(Unknown, None);
        let ours = |status| PaymentIntent {
            amount: Some(base.params.amount().minor_units()),
            currency: Some(base.params.currency().as_str().into()),
            operation_id: Some(base.operation_id.to_string()),
            order_id: Some(base.order_id.as_str().into()),
            livemode: Some(false),
            ..PaymentIntent::new(pi("pi_a"), status)
        };
        let settle = |status| Action::Settle {
            status,
            external_id: pi("pi_a"),
        };
        let rows = [
            AfterRow {
                says: "succeeded settles an unknown record: succeeded, its intent recorded",
                found: claimed(Unknown, None),
                stripe: ours(P::Succeeded),
                now,
                action: settle(Succeeded),
                status: Succeeded,
                intent: Some("pi_a"),
                next_look: None,
                then: Then::Settled,
                asks: None,
            },
            AfterRow {
                says: "canceled settles it failed",
                found: claimed(Pending, None),
                stripe: ours(P::Canceled),
                now,
                action: settle(Failed),
                status: Failed,
                intent: Some("pi_a"),
                next_look: None,
                then: Then::Settled,
                asks: None,
            },
            AfterRow {
                says: "declined: not failed yet; unknown with its intent, due now, its cancel asked for",
                found: claimed(Unknown, None),
                stripe: ours(P::RequiresPaymentMethod),
                now,
                action: settle(Failed),
                status: Unknown,
                intent: Some("pi_a"),
                next_look: Some(now),
                then: Then::Scheduled,
                asks: Some("cancel"),
            },
            AfterRow {
                says: "processing: its intent recorded, looked at again after the back-off",
                found: claimed(Unknown, None),
                stripe: ours(P::Processing),
                now,
                action: Action::RecordIntent {
                    external_id: pi("pi_a"),
                },
                status: Unknown,
                intent: Some("pi_a"),
                next_look: Some(now.plus(MIN)),
                then: Then::Scheduled,
                asks: None,
            },
            AfterRow {
                says: "processing, its intent recorded already: nothing new, the next look kept",
                found: claimed(Unknown, Some("pi_a")),
                stripe: ours(P::Processing),
                now,
                action: Action::Ignore(Ignored::NothingNew),
                status: Unknown,
                intent: None,
                next_look: Some(now.plus(30 * MIN)),
                then: Then::Scheduled,
                asks: None,
            },
            AfterRow {
                says: "requires_action at the stuck bound: its intent recorded, review",
                found: claimed(Unknown, None),
                stripe: ours(P::RequiresAction),
                now: T0.plus(policy.stuck_after),
                action: Action::RecordIntent {
                    external_id: pi("pi_a"),
                },
                status: Unknown,
                intent: Some("pi_a"),
                next_look: Some(T0.plus(policy.stuck_after)),
                then: Then::Review(ReviewClass::StuckRequiresAction),
                asks: None,
            },
            AfterRow {
                says: "another intent succeeded while unsettled: review, a suspected double charge",
                found: claimed(Unknown, Some("pi_b")),
                stripe: ours(P::Succeeded),
                now,
                action: Action::Review {
                    external_id: pi("pi_a"),
                },
                status: Unknown,
                intent: None,
                next_look: Some(now),
                then: Then::Review(ReviewClass::SecondPaymentIntent),
                asks: None,
            },
            AfterRow {
                says: "another intent, not succeeded: nothing changes, the next look kept",
                found: claimed(Unknown, Some("pi_b")),
                stripe: ours(P::Processing),
                now,
                action: Action::Ignore(Ignored::OtherIntent),
                status: Unknown,
                intent: None,
                next_look: Some(now.plus(30 * MIN)),
                then: Then::Scheduled,
                asks: None,
            },
            AfterRow {
                says: "Stripe's intent is not the operation's (amount): review, nothing settled",
                found: claimed(Unknown, None),
                stripe: PaymentIntent {
                    amount: Some(999),
                    ..ours(P::Succeeded)
                },
                now,
                action: settle(Succeeded),
                status: Unknown,
                intent: None,
                next_look: Some(now),
                then: Then::Review(ReviewClass::IntentMismatch),
                asks: None,
            },
        ];
        for row in rows {
            let (action, d) = after_event(&row.found, row.stripe, row.now, &policy, false);
            let then = match (&d.review, d.status.is_settled()) {
                (Some((class, _)), _) => Then::Review(*class),
                (None, true) => Then::Settled,
                (None, false) => Then::Scheduled,
            };
            let says = row.says;
            assert_eq!(action, row.action, "{says}: action");
            assert_eq!(d.status, row.status, "{says}: status");
            assert_eq!(d.external_id.as_deref(), row.intent, "{says}: intent");
            assert_eq!(d.next_due_at, row.next_look, "{says}: next look");
            assert_eq!(then, row.then, "{says}: then");
            assert_eq!(d.then.as_ref().map(|f| f.name()), row.asks, "{says}: asks");
            assert_eq!(d.retry, None, "{says}: an event never retries");
        }
    }

    #[test]
    fn table() {
        use OperationStatus::*;
        use PaymentIntentStatus as P;
        let settle = |status| Action::Settle {
            status,
            external_id: pi("pi_a"),
        };
        let record = || Action::RecordIntent {
            external_id: pi("pi_a"),
        };
        let page = |reason| Action::PageSettled { reason };
        let cases = [
            Row {
                says: "succeeded settles unknown",
                found: (Unknown, None),
                stripe: P::Succeeded,
                then: settle(Succeeded),
            },
            Row {
                says: "succeeded settles pending",
                found: (Pending, None),
                stripe: P::Succeeded,
                then: settle(Succeeded),
            },
            Row {
                says: "same id succeeded",
                found: (Unknown, Some("pi_a")),
                stripe: P::Succeeded,
                then: settle(Succeeded),
            },
            Row {
                says: "canceled fails",
                found: (Unknown, None),
                stripe: P::Canceled,
                then: settle(Failed),
            },
            Row {
                says: "declined fails",
                found: (Unknown, None),
                stripe: P::RequiresPaymentMethod,
                then: settle(Failed),
            },
            Row {
                says: "processing records the id",
                found: (Unknown, None),
                stripe: P::Processing,
                then: record(),
            },
            Row {
                says: "requires_action records the id",
                found: (Pending, None),
                stripe: P::RequiresAction,
                then: record(),
            },
            Row {
                says: "processing, id known",
                found: (Unknown, Some("pi_a")),
                stripe: P::Processing,
                then: Action::Ignore(Ignored::NothingNew),
            },
            Row {
                says: "processing after succeeded",
                found: (Succeeded, Some("pi_a")),
                stripe: P::Processing,
                then: Action::Ignore(Ignored::AlreadySettled),
            },
            Row {
                says: "succeeded twice",
                found: (Succeeded, Some("pi_a")),
                stripe: P::Succeeded,
                then: Action::Ignore(Ignored::AlreadySettled),
            },
            Row {
                says: "failed twice",
                found: (Failed, Some("pi_a")),
                stripe: P::Canceled,
                then: Action::Ignore(Ignored::AlreadySettled),
            },
            Row {
                says: "recorded succeeded, Stripe says canceled",
                found: (Succeeded, Some("pi_a")),
                stripe: P::Canceled,
                then: page("settled_succeeded_but_failed"),
            },
            Row {
                says: "second intent, unsettled",
                found: (Unknown, Some("pi_b")),
                stripe: P::Succeeded,
                then: Action::Review {
                    external_id: pi("pi_a"),
                },
            },
            Row {
                says: "second intent, settled",
                found: (Succeeded, Some("pi_b")),
                stripe: P::Succeeded,
                then: page(SECOND_PAYMENT_INTENT),
            },
            Row {
                says: "other intent failed",
                found: (Unknown, Some("pi_b")),
                stripe: P::Canceled,
                then: Action::Ignore(Ignored::OtherIntent),
            },
            Row {
                says: "failed but stripe says succeeded",
                found: (Failed, None),
                stripe: P::Succeeded,
                then: page("settled_failed_but_succeeded"),
            },
        ];
        for row in cases {
            let (status, recorded) = row.found;
            let op = op(status, recorded);
            assert_eq!(
                decide(&op, &pi("pi_a"), &row.stripe),
                row.then,
                "{}",
                row.says
            );
        }
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
