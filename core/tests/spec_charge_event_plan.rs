//! The specification of a Stripe event about a charge ([`charge_core::charge::event_plan`]):
//! what the event may do to the record as found, given what Stripe holds for the event's intent
//! (`decide_table`), and what the record becomes once the claim hands it over
//! (`after_event_table`).

mod spec;

use std::time::Duration;

use charge_core::charge::event_plan::{
    after_event, decide, Action, Ignored, SECOND_PAYMENT_INTENT,
};
use charge_core::domain::PaymentIntentId;
use charge_core::operation::{Operation, OperationStatus, Review};
use charge_core::outcome::{PaymentIntent, PaymentIntentStatus};
use charge_core::plan::{Policy, ReviewClass};
use charge_core::testing::{self, T0};
use charge_core::time::Timestamp;
use spec::Row;

const MIN: Duration = Duration::from_secs(60);

/// (the record as found, what Stripe holds for the event's intent `pi_a`) → what the event may do.
type DecideRow = Row<Operation, PaymentIntentStatus, (), Action, ()>;

/// (the record as claimed, Stripe's answer for the event's intent, now) → the next record and
/// what happens.
type AfterRow = Row<Operation, PaymentIntent, Next, Then>;

/// The next record: its status, the intent recorded (`None` keeps the recorded one), its next
/// look.
#[derive(Debug, PartialEq)]
struct Next {
    status: OperationStatus,
    intent: Option<PaymentIntentId>,
    next_look: Option<Timestamp>,
}

/// What happens: what the event does, what it means for the caller, and the call it asks the
/// charge path for before `failed`.
#[derive(Debug, PartialEq)]
struct Then {
    action: Action,
    means: Means,
    asks: Option<&'static str>,
}

/// What a decision means for the caller, with the review's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Means {
    Settled,
    Scheduled,
    Review(ReviewClass),
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

fn reviewed(status: OperationStatus) -> Operation {
    let mut op = op(status, None);
    op.review = Some(Review {
        reason: "stuck_processing".into(),
        flagged_at: Timestamp::from_millis(1),
    });
    op
}

fn after_event_rows(policy: &Policy) -> Vec<AfterRow> {
    use OperationStatus::*;
    use PaymentIntentStatus as P;
    let _ = policy; // the default's timings are the rows'
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
    vec![
        Row {
            says: "succeeded settles an unknown record: succeeded, its intent recorded",
            found: claimed(Unknown, None),
            input: ours(P::Succeeded),
            now,
            next: Next {
                status: Succeeded,
                intent: Some(pi("pi_a")),
                next_look: None,
            },
            then: Then {
                action: settle(Succeeded),
                means: Means::Settled,
                asks: None,
            },
        },
        Row {
            says: "canceled settles it failed",
            found: claimed(Pending, None),
            input: ours(P::Canceled),
            now,
            next: Next {
                status: Failed,
                intent: Some(pi("pi_a")),
                next_look: None,
            },
            then: Then {
                action: settle(Failed),
                means: Means::Settled,
                asks: None,
            },
        },
        Row {
            says:
                "declined: not failed yet; unknown with its intent, due now, its cancel asked for",
            found: claimed(Unknown, None),
            input: ours(P::RequiresPaymentMethod),
            now,
            next: Next {
                status: Unknown,
                intent: Some(pi("pi_a")),
                next_look: Some(now),
            },
            then: Then {
                action: settle(Failed),
                means: Means::Scheduled,
                asks: Some("cancel"),
            },
        },
        Row {
            says: "processing: its intent recorded, looked at again after the back-off",
            found: claimed(Unknown, None),
            input: ours(P::Processing),
            now,
            next: Next {
                status: Unknown,
                intent: Some(pi("pi_a")),
                next_look: Some(now.plus(MIN)),
            },
            then: Then {
                action: Action::RecordIntent {
                    external_id: pi("pi_a"),
                },
                means: Means::Scheduled,
                asks: None,
            },
        },
        Row {
            says: "processing, its intent recorded already: nothing new, the next look kept",
            found: claimed(Unknown, Some("pi_a")),
            input: ours(P::Processing),
            now,
            next: Next {
                status: Unknown,
                intent: None,
                next_look: Some(now.plus(30 * MIN)),
            },
            then: Then {
                action: Action::Ignore(Ignored::NothingNew),
                means: Means::Scheduled,
                asks: None,
            },
        },
        Row {
            says: "requires_action at the stuck bound: its intent recorded, review",
            found: claimed(Unknown, None),
            input: ours(P::RequiresAction),
            now: T0.plus(policy.stuck_after),
            next: Next {
                status: Unknown,
                intent: Some(pi("pi_a")),
                next_look: Some(T0.plus(policy.stuck_after)),
            },
            then: Then {
                action: Action::RecordIntent {
                    external_id: pi("pi_a"),
                },
                means: Means::Review(ReviewClass::StuckRequiresAction),
                asks: None,
            },
        },
        Row {
            says: "another intent succeeded while unsettled: review, a suspected double charge",
            found: claimed(Unknown, Some("pi_b")),
            input: ours(P::Succeeded),
            now,
            next: Next {
                status: Unknown,
                intent: None,
                next_look: Some(now),
            },
            then: Then {
                action: Action::Review {
                    external_id: pi("pi_a"),
                },
                means: Means::Review(ReviewClass::SecondPaymentIntent),
                asks: None,
            },
        },
        Row {
            says: "another intent, not succeeded: nothing changes, the next look kept",
            found: claimed(Unknown, Some("pi_b")),
            input: ours(P::Processing),
            now,
            next: Next {
                status: Unknown,
                intent: None,
                next_look: Some(now.plus(30 * MIN)),
            },
            then: Then {
                action: Action::Ignore(Ignored::OtherIntent),
                means: Means::Scheduled,
                asks: None,
            },
        },
        Row {
            says: "Stripe's intent is not the operation's (amount): review, nothing settled",
            found: claimed(Unknown, None),
            input: PaymentIntent {
                amount: Some(999),
                ..ours(P::Succeeded)
            },
            now,
            next: Next {
                status: Unknown,
                intent: None,
                next_look: Some(now),
            },
            then: Then {
                action: settle(Succeeded),
                means: Means::Review(ReviewClass::IntentMismatch),
                asks: None,
            },
        },
    ]
}

fn decide_rows() -> Vec<DecideRow> {
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
    vec![
        Row {
            says: "a record in review is left to a person",
            found: reviewed(Unknown),
            input: P::Succeeded,
            now: (),
            next: (),
            then: Action::Ignore(Ignored::InReview),
        },
        Row {
            says: "succeeded settles unknown",
            found: op(Unknown, None),
            input: P::Succeeded,
            now: (),
            next: (),
            then: settle(Succeeded),
        },
        Row {
            says: "succeeded settles pending",
            found: op(Pending, None),
            input: P::Succeeded,
            now: (),
            next: (),
            then: settle(Succeeded),
        },
        Row {
            says: "same id succeeded",
            found: op(Unknown, Some("pi_a")),
            input: P::Succeeded,
            now: (),
            next: (),
            then: settle(Succeeded),
        },
        Row {
            says: "canceled fails",
            found: op(Unknown, None),
            input: P::Canceled,
            now: (),
            next: (),
            then: settle(Failed),
        },
        Row {
            says: "declined fails",
            found: op(Unknown, None),
            input: P::RequiresPaymentMethod,
            now: (),
            next: (),
            then: settle(Failed),
        },
        Row {
            says: "processing records the id",
            found: op(Unknown, None),
            input: P::Processing,
            now: (),
            next: (),
            then: record(),
        },
        Row {
            says: "requires_action records the id",
            found: op(Pending, None),
            input: P::RequiresAction,
            now: (),
            next: (),
            then: record(),
        },
        Row {
            says: "processing, id known",
            found: op(Unknown, Some("pi_a")),
            input: P::Processing,
            now: (),
            next: (),
            then: Action::Ignore(Ignored::NothingNew),
        },
        Row {
            says: "processing after succeeded",
            found: op(Succeeded, Some("pi_a")),
            input: P::Processing,
            now: (),
            next: (),
            then: Action::Ignore(Ignored::AlreadySettled),
        },
        Row {
            says: "succeeded twice",
            found: op(Succeeded, Some("pi_a")),
            input: P::Succeeded,
            now: (),
            next: (),
            then: Action::Ignore(Ignored::AlreadySettled),
        },
        Row {
            says: "failed twice",
            found: op(Failed, Some("pi_a")),
            input: P::Canceled,
            now: (),
            next: (),
            then: Action::Ignore(Ignored::AlreadySettled),
        },
        Row {
            says: "recorded succeeded, Stripe says canceled",
            found: op(Succeeded, Some("pi_a")),
            input: P::Canceled,
            now: (),
            next: (),
            then: page("settled_succeeded_but_failed"),
        },
        Row {
            says: "second intent, unsettled",
            found: op(Unknown, Some("pi_b")),
            input: P::Succeeded,
            now: (),
            next: (),
            then: Action::Review {
                external_id: pi("pi_a"),
            },
        },
        Row {
            says: "second intent, settled",
            found: op(Succeeded, Some("pi_b")),
            input: P::Succeeded,
            now: (),
            next: (),
            then: page(SECOND_PAYMENT_INTENT),
        },
        Row {
            says: "other intent failed",
            found: op(Unknown, Some("pi_b")),
            input: P::Canceled,
            now: (),
            next: (),
            then: Action::Ignore(Ignored::OtherIntent),
        },
        Row {
            says: "failed but stripe says succeeded",
            found: op(Failed, None),
            input: P::Succeeded,
            now: (),
            next: (),
            then: page("settled_failed_but_succeeded"),
        },
    ]
}

#[test]
fn after_event_table() {
    let policy = Policy::default();
    spec::holds(&after_event_rows(&policy), |found, stripe, now| {
        let (action, d) = after_event(found, stripe.clone(), *now, &policy, false);
        let means = match (&d.review, d.status.is_settled()) {
            (Some((class, _)), _) => Means::Review(*class),
            (None, true) => Means::Settled,
            (None, false) => Means::Scheduled,
        };
        assert_eq!(d.retry, None, "an event never retries");
        let next = Next {
            status: d.status,
            intent: d.external_id,
            next_look: d.next_due_at,
        };
        let asks = d.then.as_ref().map(|f| f.name());
        (
            next,
            Then {
                action,
                means,
                asks,
            },
        )
    });
}

#[test]
fn decide_table() {
    spec::holds(&decide_rows(), |op, stripe, ()| {
        ((), decide(op, &pi("pi_a"), stripe))
    });
}

/// The name of each thing an event may do; of the reasons to ignore one, those this rule gives
/// (the shell ignores the rest before it is asked).
fn variant(action: &Action) -> &'static str {
    match action {
        Action::Settle { .. } => "Settle",
        Action::RecordIntent { .. } => "RecordIntent",
        Action::Review { .. } => "Review",
        Action::PageSettled { .. } => "PageSettled",
        Action::Ignore(why) => match why {
            Ignored::AlreadySettled => "Ignore(AlreadySettled)",
            Ignored::NothingNew => "Ignore(NothingNew)",
            Ignored::InReview => "Ignore(InReview)",
            Ignored::OtherIntent => "Ignore(OtherIntent)",
            Ignored::UnhandledType
            | Ignored::NotOurs
            | Ignored::UnknownOperation
            | Ignored::Duplicate => "Ignore(the shell's)",
        },
    }
}

const ACTIONS: &[&str] = &[
    "Settle",
    "RecordIntent",
    "Review",
    "PageSettled",
    "Ignore(AlreadySettled)",
    "Ignore(NothingNew)",
    "Ignore(InReview)",
    "Ignore(OtherIntent)",
];

fn means(means: &Means) -> &'static str {
    match means {
        Means::Settled => "Settled",
        Means::Scheduled => "Scheduled",
        Means::Review(_) => "Review",
    }
}

const MEANINGS: &[&str] = &["Settled", "Scheduled", "Review"];

#[test]
fn every_outcome_has_a_row() {
    let actions = decide_rows().into_iter().map(|row| row.then);
    spec::covers("the event rule", actions, ACTIONS, variant);
    let after = after_event_rows(&Policy::default());
    spec::covers(
        "the event plan",
        after.iter().map(|row| row.then.means),
        MEANINGS,
        means,
    );
}

/// The twin: a table without its pages, or without a settle, is caught by name.
#[test]
fn a_table_missing_an_outcome_is_caught() {
    let actions = decide_rows()
        .into_iter()
        .map(|row| row.then)
        .filter(|action| !matches!(action, Action::PageSettled { .. }));
    assert_eq!(spec::uncovered(actions, ACTIONS, variant), ["PageSettled"]);
    let after = after_event_rows(&Policy::default());
    let unsettled = after
        .iter()
        .map(|row| row.then.means)
        .filter(|m| *m != Means::Settled);
    assert_eq!(spec::uncovered(unsettled, MEANINGS, means), ["Settled"]);
}
