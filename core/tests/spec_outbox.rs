//! The specification of the outbox rule ([`charge_core::outbox::outcome_of`]): which committed
//! change of a record is an outcome the order service must learn. The record as it was (`None`
//! for a new one) and as it was written → the outcome its event reports, or none.

mod spec;

use charge_core::operation::{Operation, OperationStatus, Review};
use charge_core::outbox::{outcome_of, Outcome};
use charge_core::testing::{order, T0};
use spec::Row;

/// (the record before the change, the record written) → the outcome it reports.
type OutboxRow = Row<Option<Operation>, Operation, (), Option<Outcome>, ()>;

fn op(status: OperationStatus) -> Operation {
    order("ord-outbox").status(status).build()
}

fn reviewed(mut op: Operation) -> Operation {
    op.review = Some(Review {
        reason: "search found 2".into(),
        flagged_at: op.created_at,
    });
    op
}

/// A manual capture's charge, its authorization good for an hour.
fn manual(status: OperationStatus) -> Operation {
    let mut op = order("ord-ob").manual().amount(1000).status(status).build();
    op.params.charge_state_mut().unwrap().capture_before =
        Some(T0.plus(std::time::Duration::from_secs(3600)));
    op
}

fn table() -> Vec<OutboxRow> {
    use OperationStatus::*;
    vec![
        // Settling, from any unsettled state, by the executor, the reconciler or a person.
        Row {
            says: "an unknown charge settled succeeded is a success",
            found: Some(op(Unknown)),
            input: op(Succeeded),
            now: (),
            next: (),
            then: Some(Outcome::Succeeded),
        },
        Row {
            says: "a pending charge settled succeeded is a success",
            found: Some(op(Pending)),
            input: op(Succeeded),
            now: (),
            next: (),
            then: Some(Outcome::Succeeded),
        },
        Row {
            says: "a pending charge settled failed is a failure",
            found: Some(op(Pending)),
            input: op(Failed),
            now: (),
            next: (),
            then: Some(Outcome::Failed),
        },
        Row {
            says: "a charge in review settled failed by a person is a failure",
            found: Some(reviewed(op(Unknown))),
            input: op(Failed),
            now: (),
            next: (),
            then: Some(Outcome::Failed),
        },
        Row {
            says: "an unknown charge put in review needs review",
            found: Some(op(Unknown)),
            input: reviewed(op(Unknown)),
            now: (),
            next: (),
            then: Some(Outcome::NeedsReview),
        },
        Row {
            says: "a pending charge put in review needs review",
            found: Some(op(Pending)),
            input: reviewed(op(Pending)),
            now: (),
            next: (),
            then: Some(Outcome::NeedsReview),
        },
        Row {
            says: "an authorization recorded is an outcome: the money is held",
            found: Some(manual(Unknown)),
            input: manual(Authorized),
            now: (),
            next: (),
            then: Some(Outcome::Authorized),
        },
        // Not outcomes.
        Row {
            says: "the checkout's insert is no outcome",
            found: None,
            input: op(Pending),
            now: (),
            next: (),
            then: None,
        },
        Row {
            says: "a claim (pending stays pending) is no outcome",
            found: Some(op(Pending)),
            input: op(Pending),
            now: (),
            next: (),
            then: None,
        },
        Row {
            says: "an unknown outcome recorded is no outcome",
            found: Some(op(Pending)),
            input: op(Unknown),
            now: (),
            next: (),
            then: None,
        },
        Row {
            says: "a reschedule in review is no outcome: the review was already told",
            found: Some(reviewed(op(Unknown))),
            input: reviewed(op(Unknown)),
            now: (),
            next: (),
            then: None,
        },
        Row {
            says: "a succeeded record rewritten is not told twice (it cannot happen)",
            found: Some(op(Succeeded)),
            input: op(Succeeded),
            now: (),
            next: (),
            then: None,
        },
        Row {
            says: "a failed record rewritten is not told twice (it cannot happen)",
            found: Some(op(Failed)),
            input: op(Failed),
            now: (),
            next: (),
            then: None,
        },
        Row {
            says: "an authorization looked at again, still held, is not told twice",
            found: Some(manual(Authorized)),
            input: manual(Authorized),
            now: (),
            next: (),
            then: None,
        },
    ]
}

fn plan(before: &Option<Operation>, after: &Operation, _: &()) -> ((), Option<Outcome>) {
    (
        (),
        outcome_of(before.as_ref(), after).map(|event| event.outcome),
    )
}

#[test]
fn transitions_that_are_outcomes() {
    spec::holds(&table(), plan);
}

fn variant(outcome: &Option<Outcome>) -> &'static str {
    match outcome {
        None => "None",
        Some(Outcome::Succeeded) => "Succeeded",
        Some(Outcome::Failed) => "Failed",
        Some(Outcome::NeedsReview) => "NeedsReview",
        Some(Outcome::Authorized) => "Authorized",
    }
}

const OUTCOMES: &[&str] = &["None", "Succeeded", "Failed", "NeedsReview", "Authorized"];

#[test]
fn every_outcome_has_a_row() {
    let outcomes = table().into_iter().map(|row| row.then);
    spec::covers("the outbox rule", outcomes, OUTCOMES, variant);
}

/// The twin: a table without its review rows is caught.
#[test]
fn a_table_missing_an_outcome_is_caught() {
    let outcomes = table()
        .into_iter()
        .map(|row| row.then)
        .filter(|then| *then != Some(Outcome::NeedsReview));
    assert_eq!(
        spec::uncovered(outcomes, OUTCOMES, variant),
        ["NeedsReview"]
    );
}
