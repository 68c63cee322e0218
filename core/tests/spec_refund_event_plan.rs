//! The specification of a Stripe event about a refund ([`charge_core::refund::event_plan`]):
//! the refund record as read, what the event claims (its refund id and status) and what Stripe
//! answers for `re_1` → what the event may do: settle through the refund plan, fail a succeeded
//! refund later, page, or nothing.

mod spec;

use std::time::Duration;

use charge_core::charge::event_plan::{EventMismatch, Ignored};
use charge_core::domain::StripeRefundId;
use charge_core::operation::OperationStatus::{self, Failed, Pending, Succeeded, Unknown};
use charge_core::operation::{Operation, Review};
use charge_core::refund::event_plan::{
    decide, fail_later, needs_no_check, EventRefund, RefundEventAction, SECOND_REFUND,
};
use charge_core::refund::{RefundStatus, StripeRefund};
use charge_core::testing::T0;
use spec::Row;

/// (the refund as read, the event and Stripe's answer) → what the event may do.
type EventRow = Row<Operation, Event, (), Then, ()>;

/// What the event claims (the refund id, its status) and what Stripe answers for `re_1`.
struct Event {
    id: &'static str,
    status: &'static str,
    stripe: &'static str,
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

fn in_review(mut op: Operation) -> Operation {
    op.review = Some(Review {
        reason: "stuck_refund".into(),
        flagged_at: T0,
    });
    op
}

fn re(id: &str) -> StripeRefundId {
    StripeRefundId::parse(id).unwrap()
}

/// A refund of 400 of a 1000 usd charge (`pi_r`), in `status`, with `re_1` recorded if
/// `recorded`.
fn refund_op(status: OperationStatus, recorded: Option<&str>) -> Operation {
    let mut op = spec::refund_of(&spec::paid_charge("ord-ev"), "r-1", 400);
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
        reason: None,
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

fn table() -> Vec<EventRow> {
    vec![
        Row {
            says: "succeeded settles an unknown refund (through the refund plan)",
            found: refund_op(Unknown, Some("re_1")),
            input: Event {
                id: "re_1",
                status: "succeeded",
                stripe: "succeeded",
            },
            now: (),
            next: (),
            then: Then::Settle,
        },
        Row {
            says: "failed settles a pending refund whose id was never learned",
            found: refund_op(Pending, None),
            input: Event {
                id: "re_1",
                status: "failed",
                stripe: "failed",
            },
            now: (),
            next: (),
            then: Then::Settle,
        },
        Row {
            says: "pending, its id not yet recorded: recorded through the refund plan",
            found: refund_op(Unknown, None),
            input: Event {
                id: "re_1",
                status: "pending",
                stripe: "pending",
            },
            now: (),
            next: (),
            then: Then::Settle,
        },
        Row {
            says: "pending, its id recorded: nothing new",
            found: refund_op(Unknown, Some("re_1")),
            input: Event {
                id: "re_1",
                status: "pending",
                stripe: "pending",
            },
            now: (),
            next: (),
            then: Then::Ignore(Ignored::NothingNew),
        },
        Row {
            says: "a refund in review is left to a person while unsettled",
            found: in_review(refund_op(Unknown, Some("re_1"))),
            input: Event {
                id: "re_1",
                status: "succeeded",
                stripe: "succeeded",
            },
            now: (),
            next: (),
            then: Then::Ignore(Ignored::InReview),
        },
        Row {
            says: "an old pending event, Stripe now succeeded: settled by Stripe's word",
            found: refund_op(Unknown, Some("re_1")),
            input: Event {
                id: "re_1",
                status: "pending",
                stripe: "succeeded",
            },
            now: (),
            next: (),
            then: Then::Settle,
        },
        Row {
            says: "succeeded twice: nothing",
            found: refund_op(Succeeded, Some("re_1")),
            input: Event {
                id: "re_1",
                status: "succeeded",
                stripe: "succeeded",
            },
            now: (),
            next: (),
            then: Then::Ignore(Ignored::AlreadySettled),
        },
        Row {
            says: "failed twice: nothing",
            found: refund_op(Failed, Some("re_1")),
            input: Event {
                id: "re_1",
                status: "failed",
                stripe: "failed",
            },
            now: (),
            next: (),
            then: Then::Ignore(Ignored::AlreadySettled),
        },
        Row {
            says: "succeeded, Stripe says failed later: the one transition of a settled refund",
            found: refund_op(Succeeded, Some("re_1")),
            input: Event {
                id: "re_1",
                status: "failed",
                stripe: "failed",
            },
            now: (),
            next: (),
            then: Then::FailLater,
        },
        Row {
            says: "an old succeeded event after the late failure: Stripe's failed is what counts",
            found: refund_op(Succeeded, Some("re_1")),
            input: Event {
                id: "re_1",
                status: "succeeded",
                stripe: "failed",
            },
            now: (),
            next: (),
            then: Then::FailLater,
        },
        Row {
            says: "forged: the event says failed, Stripe says succeeded: nothing, paged",
            found: refund_op(Succeeded, Some("re_1")),
            input: Event {
                id: "re_1",
                status: "failed",
                stripe: "succeeded",
            },
            now: (),
            next: (),
            then: Then::Mismatch(EventMismatch::StatusContradicted),
        },
        Row {
            says: "recorded failed, Stripe says succeeded: settled is final, paged",
            found: refund_op(Failed, Some("re_1")),
            input: Event {
                id: "re_1",
                status: "succeeded",
                stripe: "succeeded",
            },
            now: (),
            next: (),
            then: Then::Page("refund_failed_but_succeeded"),
        },
        Row {
            says: "recorded failed, Stripe still pending: paged",
            found: refund_op(Failed, Some("re_1")),
            input: Event {
                id: "re_1",
                status: "pending",
                stripe: "pending",
            },
            now: (),
            next: (),
            then: Then::Page("refund_failed_but_pending"),
        },
        Row {
            says: "recorded succeeded, Stripe canceled (never for a succeeded refund): paged",
            found: refund_op(Succeeded, Some("re_1")),
            input: Event {
                id: "re_1",
                status: "canceled",
                stripe: "canceled",
            },
            now: (),
            next: (),
            then: Then::Page("refund_succeeded_but_canceled"),
        },
        Row {
            says: "recorded succeeded, Stripe pending: paged",
            found: refund_op(Succeeded, Some("re_1")),
            input: Event {
                id: "re_1",
                status: "pending",
                stripe: "pending",
            },
            now: (),
            next: (),
            then: Then::Page("refund_succeeded_but_pending"),
        },
        Row {
            says: "another refund carries our operation id: a second refund, paged",
            found: refund_op(Succeeded, Some("re_2")),
            input: Event {
                id: "re_1",
                status: "succeeded",
                stripe: "succeeded",
            },
            now: (),
            next: (),
            then: Then::Page(SECOND_REFUND),
        },
        Row {
            says: "another refund of an unsettled operation: paged, nothing recorded",
            found: refund_op(Unknown, Some("re_2")),
            input: Event {
                id: "re_1",
                status: "succeeded",
                stripe: "succeeded",
            },
            now: (),
            next: (),
            then: Then::Page(SECOND_REFUND),
        },
        Row {
            says: "the event names another refund than Stripe answered: not ours",
            found: refund_op(Unknown, None),
            input: Event {
                id: "re_9",
                status: "succeeded",
                stripe: "succeeded",
            },
            now: (),
            next: (),
            then: Then::Mismatch(EventMismatch::RefundNotOurs),
        },
    ]
}

#[test]
fn refund_event_table() {
    spec::holds(&table(), |op, event, ()| {
        let claimed = claim(op, event.id, event.status);
        let then = match decide(op, &claimed, &stripe(op, event.stripe), T0) {
            RefundEventAction::Ignore(why) => Then::Ignore(why),
            RefundEventAction::Settle => Then::Settle,
            RefundEventAction::FailLater(_) => Then::FailLater,
            RefundEventAction::PageSettled { reason } => Then::Page(reason),
            RefundEventAction::Mismatch(m) => Then::Mismatch(m),
        };
        ((), then)
    });
}

/// The name of each thing a refund event may do (of the reasons to ignore one or to call it
/// a mismatch, those this rule gives; the shell gives the rest).
fn variant(then: &Then) -> &'static str {
    match then {
        Then::Settle => "Settle",
        Then::FailLater => "FailLater",
        Then::Page(_) => "Page",
        Then::Ignore(why) => match why {
            Ignored::AlreadySettled => "Ignore(AlreadySettled)",
            Ignored::NothingNew => "Ignore(NothingNew)",
            Ignored::InReview => "Ignore(InReview)",
            Ignored::OtherIntent
            | Ignored::UnhandledType
            | Ignored::NotOurs
            | Ignored::UnknownOperation
            | Ignored::Duplicate => "Ignore(not this rule's)",
        },
        Then::Mismatch(m) => match m {
            EventMismatch::RefundNotOurs => "Mismatch(RefundNotOurs)",
            EventMismatch::StatusContradicted => "Mismatch(StatusContradicted)",
            EventMismatch::Intent(_)
            | EventMismatch::UnknownPaymentIntent
            | EventMismatch::UnknownRefund
            | EventMismatch::UnknownDispute
            | EventMismatch::DisputeUnrecordable => "Mismatch(not this rule's)",
        },
    }
}

const OUTCOMES: &[&str] = &[
    "Settle",
    "FailLater",
    "Page",
    "Ignore(AlreadySettled)",
    "Ignore(NothingNew)",
    "Ignore(InReview)",
    "Mismatch(RefundNotOurs)",
    "Mismatch(StatusContradicted)",
];

#[test]
fn every_outcome_has_a_row() {
    let outcomes = table().into_iter().map(|row| row.then);
    spec::covers("the refund event rule", outcomes, OUTCOMES, variant);
}

/// The twin: a table without the late failure is caught, by name.
#[test]
fn a_table_missing_an_outcome_is_caught() {
    let outcomes = table()
        .into_iter()
        .map(|row| row.then)
        .filter(|then| *then != Then::FailLater);
    assert_eq!(spec::uncovered(outcomes, OUTCOMES, variant), ["FailLater"]);
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
    assert_eq!(write.release.charge, op.charge_key());
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
