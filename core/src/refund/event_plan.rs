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
            charge: op.key().charge_of_order(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Amount, RefundId};
    use crate::operation::Review;
    use crate::refund::{reserve, RefundRequest};
    use crate::testing::{order, T0};
    use std::time::Duration;
    use OperationStatus::{Failed, Pending, Succeeded, Unknown};

    fn re(id: &str) -> StripeRefundId {
        StripeRefundId::parse(id).unwrap()
    }

    /// A refund of 400 of a 1000 usd charge (`pi_r`), in `status`, with `re_1` recorded if
    /// `recorded`.
    fn refund_op(status: OperationStatus, recorded: Option<&str>) -> Operation {
        let mut charge = order("ord-ev")
            .amount(1000)
            .status(Succeeded)
            .external_id("pi_r")
            .build();
        charge.next_due_at = None;
        let request = RefundRequest {
            amount: Some(Amount::new(400).unwrap()),
            reason: None,
        };
        let (params, _) = reserve(&charge, &request, T0).unwrap();
        let mut op = Operation::new_refund(
            charge.order_id.clone(),
            RefundId::parse("r-1").unwrap(),
            &request,
            params,
            crate::domain::Principal::jwt("support").unwrap(),
            T0,
            Duration::from_secs(300),
        );
        op.status = status;
        op.params.refund_state_mut().unwrap().stripe_refund_id = recorded.map(re);
        if status.is_settled() {
            op.next_due_at = None;
        }
        op
    }

    /// Stripe's answer for `re_1` of `op`, in `status`.
    fn stripe(op: &Operation, status: &str) -> StripeRefund {
        StripeRefund {
            id: re("re_1"),
            status: RefundStatus::parse(status),
            replayed: false,
            amount: Some(400),
            currency: Some("usd".into()),
            payment_intent: Some("pi_r".into()),
            operation_id: Some(op.operation_id.to_string()),
            failure_reason: (status == "failed").then(|| "expired_or_canceled_card".into()),
            order_id: None,
        }
    }

    fn claim(op: &Operation, id: &str, status: &str) -> EventRefund {
        EventRefund {
            id: re(id),
            status: RefundStatus::parse(status),
            order_id: Some(op.order_id.clone()),
            operation_id: Some(op.operation_id),
        }
    }

    /// What the decision is, without the write's details (checked apart).
    #[derive(Debug, PartialEq, Eq)]
    enum Then {
        Ignore(Ignored),
        Settle,
        FailLater,
        Page(&'static str),
        Mismatch(EventMismatch),
    }

    /// One line of the refund event rule: (the record as read: its status and recorded refund;
    /// what the event claims; what Stripe answers for `re_1`) → what the event may do.
    struct Row {
        says: &'static str,
        found: (OperationStatus, Option<&'static str>),
        claims: (&'static str, &'static str),
        stripe: &'static str,
        then: Then,
    }

    #[test]
    fn table() {
        let row = |says, found, claims, stripe, then| Row {
            says,
            found,
            claims,
            stripe,
            then,
        };
        let rows = [
            row(
                "succeeded settles an unknown refund (through the refund plan)",
                (Unknown, Some("re_1")),
                ("re_1", "succeeded"),
                "succeeded",
                Then::Settle,
            ),
            row(
                "failed settles a pending refund whose id was never learned",
                (Pending, None),
                ("re_1", "failed"),
                "failed",
                Then::Settle,
            ),
            row(
                "pending, its id not yet recorded: recorded through the refund plan",
                (Unknown, None),
                ("re_1", "pending"),
                "pending",
                Then::Settle,
            ),
            row(
                "pending, its id recorded: nothing new",
                (Unknown, Some("re_1")),
                ("re_1", "pending"),
                "pending",
                Then::Ignore(Ignored::NothingNew),
            ),
            row(
                "an old pending event, Stripe now succeeded: settled by Stripe's word",
                (Unknown, Some("re_1")),
                ("re_1", "pending"),
                "succeeded",
                Then::Settle,
            ),
            row(
                "succeeded twice: nothing",
                (Succeeded, Some("re_1")),
                ("re_1", "succeeded"),
                "succeeded",
                Then::Ignore(Ignored::AlreadySettled),
            ),
            row(
                "failed twice: nothing",
                (Failed, Some("re_1")),
                ("re_1", "failed"),
                "failed",
                Then::Ignore(Ignored::AlreadySettled),
            ),
            row(
                "succeeded, Stripe says failed later: the one transition of a settled refund",
                (Succeeded, Some("re_1")),
                ("re_1", "failed"),
                "failed",
                Then::FailLater,
            ),
            row(
                "an old succeeded event after the late failure: Stripe's failed is what counts",
                (Succeeded, Some("re_1")),
                ("re_1", "succeeded"),
                "failed",
                Then::FailLater,
            ),
            row(
                "forged: the event says failed, Stripe says succeeded: nothing, paged",
                (Succeeded, Some("re_1")),
                ("re_1", "failed"),
                "succeeded",
                Then::Mismatch(EventMismatch::StatusContradicted),
            ),
            row(
                "recorded failed, Stripe says succeeded: settled is final, paged",
                (Failed, Some("re_1")),
                ("re_1", "succeeded"),
                "succeeded",
                Then::Page("refund_failed_but_succeeded"),
            ),
            row(
                "recorded failed, Stripe still pending: paged",
                (Failed, Some("re_1")),
                ("re_1", "pending"),
                "pending",
                Then::Page("refund_failed_but_pending"),
            ),
            row(
                "recorded succeeded, Stripe canceled (never for a succeeded refund): paged",
                (Succeeded, Some("re_1")),
                ("re_1", "canceled"),
                "canceled",
                Then::Page("refund_succeeded_but_canceled"),
            ),
            row(
                "recorded succeeded, Stripe pending: paged",
                (Succeeded, Some("re_1")),
                ("re_1", "pending"),
                "pending",
                Then::Page("refund_succeeded_but_pending"),
            ),
            row(
                "another refund carries our operation id: a second refund, paged",
                (Succeeded, Some("re_2")),
                ("re_1", "succeeded"),
                "succeeded",
                Then::Page(SECOND_REFUND),
            ),
            row(
                "another refund of an unsettled operation: paged, nothing recorded",
                (Unknown, Some("re_2")),
                ("re_1", "succeeded"),
                "succeeded",
                Then::Page(SECOND_REFUND),
            ),
            row(
                "the event names another refund than Stripe answered: not ours",
                (Unknown, None),
                ("re_9", "succeeded"),
                "succeeded",
                Then::Mismatch(EventMismatch::RefundNotOurs),
            ),
        ];
        for row in rows {
            let (status, recorded) = row.found;
            let op = refund_op(status, recorded);
            let claimed = claim(&op, row.claims.0, row.claims.1);
            let got = match decide(&op, &claimed, &stripe(&op, row.stripe), T0) {
                RefundEventAction::Ignore(why) => Then::Ignore(why),
                RefundEventAction::Settle => Then::Settle,
                RefundEventAction::FailLater(_) => Then::FailLater,
                RefundEventAction::PageSettled { reason } => Then::Page(reason),
                RefundEventAction::Mismatch(m) => Then::Mismatch(m),
            };
            assert_eq!(got, row.then, "{}", row.says);
        }
    }

    #[test]
    fn stripe_s_refund_must_be_the_operation_s() {
        let op = refund_op(Unknown, Some("re_1"));
        let claimed = claim(&op, "re_1", "succeeded");
        let ours = stripe(&op, "succeeded");
        assert_eq!(
            decide(&op, &claimed, &ours, T0),
            RefundEventAction::Settle,
            "the twin: ours settles"
        );
        for (fact, answer) in [
            (
                "operation_id",
                StripeRefund {
                    operation_id: Some("someone-else".into()),
                    ..ours.clone()
                },
            ),
            (
                "payment_intent",
                StripeRefund {
                    payment_intent: Some("pi_other".into()),
                    ..ours.clone()
                },
            ),
            (
                "amount",
                StripeRefund {
                    amount: Some(401),
                    ..ours.clone()
                },
            ),
        ] {
            assert_eq!(
                decide(&op, &claimed, &answer, T0),
                RefundEventAction::Mismatch(EventMismatch::RefundNotOurs),
                "{fact} differs"
            );
        }
    }

    #[test]
    fn a_late_failure_gives_the_reservation_back_with_stripe_s_reason() {
        let op = refund_op(Succeeded, Some("re_1"));
        let now = T0.plus(Duration::from_secs(3600));
        let RefundEventAction::FailLater(write) = decide(
            &op,
            &claim(&op, "re_1", "failed"),
            &stripe(&op, "failed"),
            now,
        ) else {
            panic!("a late failure");
        };
        assert_eq!(write.key, op.key());
        assert_eq!(write.operation_id, op.operation_id);
        assert_eq!(write.failure_reason, "expired_or_canceled_card");
        assert_eq!(write.release.charge, op.key().charge_of_order());
        assert_eq!(write.release.amount.minor_units(), 400);
        assert_eq!((write.now, write.release.now), (now, now));
        let no_reason = StripeRefund {
            failure_reason: None,
            ..stripe(&op, "failed")
        };
        assert_eq!(fail_later(&op, &no_reason, now).failure_reason, "unknown");
    }

    #[test]
    fn review_is_left_to_a_person_while_unsettled() {
        let mut op = refund_op(Unknown, Some("re_1"));
        op.review = Some(Review {
            reason: "stuck_refund".into(),
            flagged_at: T0,
        });
        let claimed = claim(&op, "re_1", "succeeded");
        assert_eq!(
            decide(&op, &claimed, &stripe(&op, "succeeded"), T0),
            RefundEventAction::Ignore(Ignored::InReview)
        );
        assert!(needs_no_check(&op, &claimed));
    }

    #[test]
    fn only_what_cannot_change_anything_skips_stripe() {
        let succeeded = refund_op(Succeeded, Some("re_1"));
        assert!(needs_no_check(
            &succeeded,
            &claim(&succeeded, "re_1", "succeeded")
        ));
        let failed = refund_op(Failed, Some("re_1"));
        assert!(needs_no_check(&failed, &claim(&failed, "re_1", "failed")));
        for (says, op, c) in [
            (
                "a succeeded refund the event says failed: Stripe is asked",
                succeeded.clone(),
                claim(&succeeded, "re_1", "failed"),
            ),
            (
                "another refund",
                succeeded.clone(),
                claim(&succeeded, "re_2", "succeeded"),
            ),
            (
                "unsettled",
                refund_op(Unknown, Some("re_1")),
                claim(&succeeded, "re_1", "succeeded"),
            ),
        ] {
            assert!(!needs_no_check(&op, &c), "{says}");
        }
    }
}
