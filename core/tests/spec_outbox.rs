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

/// A dispute's record of ord-outbox as Stripe holds it in `status` (`dp_1`, 1250 usd, due a
/// week after T0 while open), recorded as the plan records it: `unknown` while open.
fn dispute(status: &str) -> Operation {
    use charge_core::dispute::plan::status_of;
    use charge_core::dispute::state::{DisputeParams, DisputeState};
    use charge_core::dispute::DisputeStatus;
    let mut d = charge_core::testing::stripe_dispute("dp_1", "pi_1");
    d.status = DisputeStatus::parse(status);
    let params = DisputeParams::of(&d, d.payment_intent.clone().unwrap()).unwrap();
    let state = DisputeState::of(&d, charge_core::dispute::plan::funds_withdrawn(&d.status));
    let mut op = Operation::new_dispute(
        charge_core::domain::OrderId::parse("ord-outbox").unwrap(),
        params,
        state,
        T0,
        T0.plus(std::time::Duration::from_secs(3600)),
    );
    op.status = status_of(&d.status);
    if op.status.is_settled() {
        op.next_due_at = None;
    }
    op
}

/// The same dispute, `after` its move (same operation id).
fn moved(before: &Operation, status: &str) -> Operation {
    Operation {
        operation_id: before.operation_id,
        ..dispute(status)
    }
}

fn table() -> Vec<OutboxRow> {
    use OperationStatus::*;
    let open = dispute("needs_response");
    let inquiry = dispute("warning_needs_response");
    vec![
        // A dispute's steps.
        Row {
            says: "a dispute first recorded open is opened (funds withdrawn or not)",
            found: None,
            input: open.clone(),
            now: (),
            next: (),
            then: Some(Outcome::DisputeOpened),
        },
        Row {
            says: "an inquiry first recorded is opened",
            found: None,
            input: inquiry.clone(),
            now: (),
            next: (),
            then: Some(Outcome::DisputeOpened),
        },
        Row {
            says: "an inquiry escalated to a chargeback: funds withdrawn",
            found: Some(inquiry.clone()),
            input: moved(&inquiry, "needs_response"),
            now: (),
            next: (),
            then: Some(Outcome::DisputeFundsWithdrawn),
        },
        Row {
            says: "an open dispute moved (evidence submitted) is no outcome",
            found: Some(open.clone()),
            input: moved(&open, "under_review"),
            now: (),
            next: (),
            then: None,
        },
        Row {
            says: "a dispute lost is the bank's take succeeded",
            found: Some(open.clone()),
            input: moved(&open, "lost"),
            now: (),
            next: (),
            then: Some(Outcome::Succeeded),
        },
        Row {
            says: "a dispute won: nothing taken in the end",
            found: Some(open.clone()),
            input: moved(&open, "won"),
            now: (),
            next: (),
            then: Some(Outcome::Failed),
        },
        Row {
            says: "a dispute first recorded already lost is told as lost, not opened",
            found: None,
            input: dispute("lost"),
            now: (),
            next: (),
            then: Some(Outcome::Succeeded),
        },
        Row {
            says: "an open dispute flagged for review (did not fit) needs review",
            found: Some(open.clone()),
            input: reviewed(moved(&open, "needs_response")),
            now: (),
            next: (),
            then: Some(Outcome::NeedsReview),
        },
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
        Some(Outcome::DisputeOpened) => "DisputeOpened",
        Some(Outcome::DisputeFundsWithdrawn) => "DisputeFundsWithdrawn",
    }
}

const OUTCOMES: &[&str] = &[
    "None",
    "Succeeded",
    "Failed",
    "NeedsReview",
    "Authorized",
    "DisputeOpened",
    "DisputeFundsWithdrawn",
];

/// A dispute's events under its own names, with its id, Stripe's status and the deadline; the
/// ids stable per step (a replay the same, each step its own), and no `payment_intent_status`
/// on a dispute won (its intent was never canceled).
#[test]
fn a_dispute_s_events_say_what_stripe_holds() {
    let open = dispute("needs_response");
    let inquiry = dispute("warning_needs_response");
    let cases = [
        (None, open.clone(), "DisputeOpened"),
        (
            Some(inquiry.clone()),
            moved(&inquiry, "needs_response"),
            "DisputeFundsWithdrawn",
        ),
        (Some(open.clone()), moved(&open, "won"), "DisputeWon"),
        (Some(open.clone()), moved(&open, "lost"), "DisputeLost"),
        (
            Some(inquiry.clone()),
            moved(&inquiry, "warning_closed"),
            "DisputeClosed",
        ),
        (
            Some(open.clone()),
            reviewed(moved(&open, "needs_response")),
            "DisputeNeedsReview",
        ),
    ];
    for (before, after, detail_type) in cases {
        let event = outcome_of(before.as_ref(), &after).unwrap();
        assert_eq!(event.detail_type(), detail_type);
        let detail = serde_json::to_value(event.detail()).unwrap();
        assert_eq!(detail["dispute_id"], "dp_1", "{detail_type}");
        let state = after.params.dispute_state().unwrap();
        assert_eq!(
            detail["dispute_status"],
            state.status.as_str(),
            "{detail_type}"
        );
        assert_eq!(detail["payment_intent"], "pi_1", "{detail_type}");
        assert!(
            detail.get("payment_intent_status").is_none(),
            "{detail_type}"
        );
        assert_eq!(
            detail.get("due_by").is_some(),
            state.due_by.is_some(),
            "{detail_type}"
        );
        let again = outcome_of(before.as_ref(), &after).unwrap();
        assert_eq!(again.event_id, event.event_id, "a replay: the same id");
    }
    let opened = outcome_of(None, &open).unwrap();
    let withdrawn = outcome_of(Some(&inquiry), &moved(&inquiry, "needs_response")).unwrap();
    assert_ne!(opened.event_id, withdrawn.event_id, "each step its own id");
    // Charges' events carry none of the dispute's fields.
    let charge = outcome_of(
        Some(&op(OperationStatus::Unknown)),
        &op(OperationStatus::Succeeded),
    )
    .unwrap();
    let detail = serde_json::to_value(charge.detail()).unwrap();
    assert!(detail.get("dispute_id").is_none() && detail.get("dispute_status").is_none());
}

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
