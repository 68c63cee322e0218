//! The specification of a dispute's plan ([`charge_core::dispute::plan::plan`]): (the dispute's
//! record as read or none, its order's charge as read, the dispute as Stripe holds it, now) →
//! the write, applied here by the store's own rules ([`charge_core::store_rules`]) to show both
//! records after it: the dispute's and the charge's (its reservation, its open dispute).

mod spec;

use std::time::Duration;

use charge_core::dispute::plan::{plan, DisputeWrite, Unchanged};
use charge_core::dispute::{DisputeStatus, StripeDispute};
use charge_core::domain::{DisputeId, PaymentIntentId};
use charge_core::operation::{Operation, OperationStatus};
use charge_core::plan::DisputePolicy;
use charge_core::store_rules::{apply, create_beside, ChargeClaim, CreatedBeside, Guard};
use charge_core::testing::{stripe_dispute, T0};
use charge_core::time::Timestamp;
use spec::{paid_charge, Row};

const HOUR: Duration = Duration::from_secs(3600);

/// The dispute's record as read (none before the first) and its order's charge as read (none:
/// no charge of ours under the intent).
type Found = (Option<Operation>, Option<Operation>);

/// The dispute's record after: its status, Stripe's status as it holds it, whether its amount is
/// reserved on the charge, whether it is in review (never: a dispute follows Stripe, and a
/// record in review would never be read again), whether the write holds it unreserved (the
/// shell counts `DisputeUnreserved`, paged), when it is read again.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    status: OperationStatus,
    dispute_status: String,
    reserved: bool,
    in_review: bool,
    unreserved: bool,
    due: Option<Timestamp>,
}

/// The charge after: its reservation (refunds and disputes), the open dispute it names, and
/// whether Stripe says it is still refundable.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Charge {
    reserved: i64,
    disputed_by: Option<String>,
    refundable: bool,
}

/// What the plan writes: `create`, `move`, `settle`, or `nothing(<why>)`; with the records after.
type Then = (&'static str, Option<Record>);

type DisputeRow = Row<Found, StripeDispute, Option<Charge>, Then>;

const OUTCOMES: &[&str] = &[
    "create",
    "move",
    "settle",
    "nothing(not_ours)",
    "nothing(unrecordable)",
    "nothing(settled)",
    "nothing(as_stripe_holds)",
];

fn variant(then: &Then) -> &'static str {
    then.0
}

/// A dispute `status` of `amount` on the order's intent `pi_r`, due by `due`.
fn dispute(status: &str, amount: i64, due: Option<Timestamp>) -> StripeDispute {
    let mut d = stripe_dispute("dp_1", "pi_r");
    d.status = DisputeStatus::parse(status);
    d.amount = amount;
    d.currency = "usd".into();
    d.due_by = due;
    d.is_charge_refundable = d.status.is_inquiry() && d.status != DisputeStatus::WarningClosed;
    d.has_evidence = d.status == DisputeStatus::UnderReview;
    d
}

/// The plan's write, applied as the store applies it: both records after, or why none.
fn run(found: &Found, input: &StripeDispute, now: &Timestamp) -> (Option<Charge>, Then) {
    let (record, charge) = found;
    let policy = DisputePolicy::default();
    let write = plan(record.as_ref(), charge.as_ref(), input, *now, &policy);
    let unreserved = write.unreserved();
    let (record_after, charge_after, name) = match write {
        DisputeWrite::Nothing(why) => {
            let name = match why {
                Unchanged::NotOurs => "nothing(not_ours)",
                Unchanged::Unrecordable(_) => "nothing(unrecordable)",
                Unchanged::Settled => "nothing(settled)",
                Unchanged::AsStripeHolds => "nothing(as_stripe_holds)",
            };
            return (None, (name, None));
        }
        DisputeWrite::Create { record, on_charge } => {
            let claim = ChargeClaim::Dispute(&on_charge);
            let (created, charge_after) = create_beside(None, charge.as_ref(), &record, &claim);
            assert_eq!(created, CreatedBeside::New((*record).clone()));
            (
                *record,
                charge_after.expect("the charge as written"),
                "create",
            )
        }
        DisputeWrite::Move(m) => {
            let before = record.as_ref().expect("a move has a record");
            let after = apply(before, &*m).expect("the move's guards hold of the record read");
            let charge = charge.clone().expect("a move has a charge");
            let charge_after = match &m.on_charge {
                Some(on) => apply(&charge, on).expect("the charge's guards hold"),
                None => charge,
            };
            let name = if after.status.is_settled() {
                "settle"
            } else {
                "move"
            };
            (after, charge_after, name)
        }
    };
    let state = record_after
        .params
        .dispute_state()
        .expect("a dispute's state");
    let charge_state = charge_after
        .params
        .charge_state()
        .expect("a charge's state");
    let status_name = state.status.as_str().to_owned();
    let disputed_by = charge_state.disputed_by.as_ref().map(|id| id.to_string());
    (
        Some(Charge {
            reserved: charge_after.refund_reserved(),
            disputed_by,
            refundable: charge_state.dispute_refundable,
        }),
        (
            name,
            Some(Record {
                status: record_after.status,
                dispute_status: status_name,
                reserved: state.reserved,
                in_review: record_after.review.is_some(),
                unreserved,
                due: record_after.next_due_at,
            }),
        ),
    )
}

/// The dispute's record after `dispute` was planned over `found` at `now` (for rows that start
/// from a record).
fn recorded(charge: &Operation, d: &StripeDispute, now: Timestamp) -> (Operation, Operation) {
    match plan(None, Some(charge), d, now, &DisputePolicy::default()) {
        DisputeWrite::Create { record, on_charge } => {
            let after = apply(charge, &on_charge).unwrap();
            (*record, after)
        }
        other => panic!("expected a create, got {other:?}"),
    }
}

fn charge_with_refunds(reserved: i64) -> Operation {
    let mut c = paid_charge("ord-dispute");
    c.params.charge_state_mut().unwrap().refund_reserved = reserved;
    c
}

#[test]
fn dispute_table() {
    use OperationStatus::*;
    let charge = paid_charge("ord-dispute");
    let week = Some(T0.plus(7 * 24 * HOUR));
    let two_days = Some(T0.plus(48 * HOUR));
    let open = dispute("needs_response", 1000, week);
    let inquiry = dispute("warning_needs_response", 1000, week);
    let (open_record, open_charge) = recorded(&charge, &open, T0);
    let (inquiry_record, inquiry_charge) = recorded(&charge, &inquiry, T0);
    let refunded = charge_with_refunds(600);
    let (unreserved_record, unreserved_charge) = recorded(&refunded, &open, T0);
    let later = T0.plus(HOUR);
    let (lost_record, lost_charge) = recorded(&charge, &dispute("lost", 1000, None), T0);
    let mut another_intent = charge.clone();
    another_intent.external_id = Some(PaymentIntentId::parse("pi_other").unwrap());
    let mut no_intent = open.clone();
    no_intent.payment_intent = None;

    let rows: Vec<DisputeRow> =
        vec![
        Row {
            says: "a dispute of an intent no charge of ours holds is not ours: nothing written",
            found: (None, None),
            input: open.clone(),
            now: T0,
            next: None,
            then: ("nothing(not_ours)", None),
        },
        Row {
            says: "the order's charge holds another intent: not ours",
            found: (None, Some(another_intent)),
            input: open.clone(),
            now: T0,
            next: None,
            then: ("nothing(not_ours)", None),
        },
        Row {
            says: "a dispute of a charge without a PaymentIntent is never ours",
            found: (None, Some(charge.clone())),
            input: no_intent,
            now: T0,
            next: None,
            then: ("nothing(not_ours)", None),
        },
        Row {
            says: "an amount no record can hold (0) is said, never written",
            found: (None, Some(charge.clone())),
            input: dispute("needs_response", 0, week),
            now: T0,
            next: None,
            then: ("nothing(unrecordable)", None),
        },
        Row {
            says: "first read, funds withdrawn: created unknown, its amount reserved on the \
                   charge, the charge names it unrefundable, read again within a day",
            found: (None, Some(charge.clone())),
            input: open.clone(),
            now: T0,
            next: Some(Charge {
                reserved: 1000,
                disputed_by: Some("dp_1".into()),
                refundable: false,
            }),
            then: (
                "create",
                Some(Record {
                    status: Unknown,
                    dispute_status: "needs_response".into(),
                    reserved: true,
                    in_review: false,
                    unreserved: false,
                    due: Some(T0.plus(24 * HOUR)),
                }),
            ),
        },
        Row {
            says: "a deadline inside the page window: read again (and paged) a day later, or at \
                   due_by if that is sooner (the deadline's rule), not every tick",
            found: (None, Some(charge.clone())),
            input: dispute("needs_response", 1000, two_days),
            now: T0,
            next: Some(Charge {
                reserved: 1000,
                disputed_by: Some("dp_1".into()),
                refundable: false,
            }),
            then: (
                "create",
                Some(Record {
                    status: Unknown,
                    dispute_status: "needs_response".into(),
                    reserved: true,
                    in_review: false,
                    unreserved: false,
                    due: Some(T0.plus(24 * HOUR)),
                }),
            ),
        },
        Row {
            says: "a deadline 4 days away: read again when the page window opens (due_by − 72 h) \
                   if that is sooner than a day",
            found: (None, Some(charge.clone())),
            input: dispute("needs_response", 1000, Some(T0.plus(80 * HOUR))),
            now: T0,
            next: Some(Charge {
                reserved: 1000,
                disputed_by: Some("dp_1".into()),
                refundable: false,
            }),
            then: (
                "create",
                Some(Record {
                    status: Unknown,
                    dispute_status: "needs_response".into(),
                    reserved: true,
                    in_review: false,
                    unreserved: false,
                    due: Some(T0.plus(8 * HOUR)),
                }),
            ),
        },
        Row {
            says: "first read, an inquiry: created unknown, nothing reserved, the charge names \
                   it still refundable",
            found: (None, Some(charge.clone())),
            input: inquiry.clone(),
            now: T0,
            next: Some(Charge {
                reserved: 0,
                disputed_by: Some("dp_1".into()),
                refundable: true,
            }),
            then: (
                "create",
                Some(Record {
                    status: Unknown,
                    dispute_status: "warning_needs_response".into(),
                    reserved: false,
                    in_review: false,
                    unreserved: false,
                    due: Some(T0.plus(24 * HOUR)),
                }),
            ),
        },
        Row {
            says: "funds withdrawn that do not fit beside the refunds: recorded all the same, \
                   without the reservation (counted, paged), not in review: read again as any \
                   open dispute is",
            found: (None, Some(refunded.clone())),
            input: open.clone(),
            now: T0,
            next: Some(Charge {
                reserved: 600,
                disputed_by: Some("dp_1".into()),
                refundable: false,
            }),
            then: (
                "create",
                Some(Record {
                    status: Unknown,
                    dispute_status: "needs_response".into(),
                    reserved: false,
                    in_review: false,
                    unreserved: true,
                    due: Some(T0.plus(24 * HOUR)),
                }),
            ),
        },
        Row {
            says: "an unreserved dispute read again when due, unchanged at Stripe: moved to its \
                   next read, still unreserved (counted again: it pages until Stripe closes it)",
            found: (Some(unreserved_record.clone()), Some(unreserved_charge.clone())),
            input: open.clone(),
            now: T0.plus(24 * HOUR),
            next: Some(Charge {
                reserved: 600,
                disputed_by: Some("dp_1".into()),
                refundable: false,
            }),
            then: (
                "move",
                Some(Record {
                    status: Unknown,
                    dispute_status: "needs_response".into(),
                    reserved: false,
                    in_review: false,
                    unreserved: true,
                    due: Some(T0.plus(48 * HOUR)),
                }),
            ),
        },
        Row {
            says: "first read already lost (its events never came): created settled \
                   succeeded, the amount reserved and kept, the charge names no open dispute",
            found: (None, Some(charge.clone())),
            input: dispute("lost", 1000, None),
            now: T0,
            next: Some(Charge {
                reserved: 1000,
                disputed_by: None,
                refundable: false,
            }),
            then: (
                "create",
                Some(Record {
                    status: Succeeded,
                    dispute_status: "lost".into(),
                    reserved: true,
                    in_review: false,
                    unreserved: false,
                    due: None,
                }),
            ),
        },
        Row {
            says: "first read already won: created settled failed, nothing reserved",
            found: (None, Some(charge.clone())),
            input: dispute("won", 1000, None),
            now: T0,
            next: Some(Charge {
                reserved: 0,
                disputed_by: None,
                refundable: false,
            }),
            then: (
                "create",
                Some(Record {
                    status: Failed,
                    dispute_status: "won".into(),
                    reserved: false,
                    in_review: false,
                    unreserved: false,
                    due: None,
                }),
            ),
        },
        Row {
            says: "an inquiry escalated to a chargeback: moved, its amount reserved, the charge \
                   no longer refundable",
            found: (Some(inquiry_record.clone()), Some(inquiry_charge.clone())),
            input: open.clone(),
            now: later,
            next: Some(Charge {
                reserved: 1000,
                disputed_by: Some("dp_1".into()),
                refundable: false,
            }),
            then: (
                "move",
                Some(Record {
                    status: Unknown,
                    dispute_status: "needs_response".into(),
                    reserved: true,
                    in_review: false,
                    unreserved: false,
                    due: Some(later.plus(24 * HOUR)),
                }),
            ),
        },
        Row {
            says: "evidence submitted (under_review, no deadline left): moved, the charge as it is",
            found: (Some(open_record.clone()), Some(open_charge.clone())),
            input: dispute("under_review", 1000, None),
            now: later,
            next: Some(Charge {
                reserved: 1000,
                disputed_by: Some("dp_1".into()),
                refundable: false,
            }),
            then: (
                "move",
                Some(Record {
                    status: Unknown,
                    dispute_status: "under_review".into(),
                    reserved: true,
                    in_review: false,
                    unreserved: false,
                    due: Some(later.plus(24 * HOUR)),
                }),
            ),
        },
        Row {
            says: "won: settled failed, the reservation given back, the charge names no open \
                   dispute",
            found: (Some(open_record.clone()), Some(open_charge.clone())),
            input: dispute("won", 1000, None),
            now: later,
            next: Some(Charge {
                reserved: 0,
                disputed_by: None,
                refundable: false,
            }),
            then: (
                "settle",
                Some(Record {
                    status: Failed,
                    dispute_status: "won".into(),
                    reserved: false,
                    in_review: false,
                    unreserved: false,
                    due: None,
                }),
            ),
        },
        Row {
            says: "lost: settled succeeded, the reservation kept (refunded + lost ≤ taken)",
            found: (Some(open_record.clone()), Some(open_charge.clone())),
            input: dispute("lost", 1000, None),
            now: later,
            next: Some(Charge {
                reserved: 1000,
                disputed_by: None,
                refundable: false,
            }),
            then: (
                "settle",
                Some(Record {
                    status: Succeeded,
                    dispute_status: "lost".into(),
                    reserved: true,
                    in_review: false,
                    unreserved: false,
                    due: None,
                }),
            ),
        },
        Row {
            says: "an inquiry closed: settled failed, nothing was reserved, the charge free",
            found: (Some(inquiry_record.clone()), Some(inquiry_charge.clone())),
            input: dispute("warning_closed", 1000, None),
            now: later,
            next: Some(Charge {
                reserved: 0,
                disputed_by: None,
                refundable: false,
            }),
            then: (
                "settle",
                Some(Record {
                    status: Failed,
                    dispute_status: "warning_closed".into(),
                    reserved: false,
                    in_review: false,
                    unreserved: false,
                    due: None,
                }),
            ),
        },
        Row {
            says: "lost without its reservation: settled succeeded as Stripe says, still \
                   unreserved (counted; the audit finds the over-refund)",
            found: (Some(unreserved_record.clone()), Some(unreserved_charge.clone())),
            input: dispute("lost", 1000, None),
            now: later,
            next: Some(Charge {
                reserved: 600,
                disputed_by: None,
                refundable: false,
            }),
            then: (
                "settle",
                Some(Record {
                    status: Succeeded,
                    dispute_status: "lost".into(),
                    reserved: false,
                    in_review: false,
                    unreserved: true,
                    due: None,
                }),
            ),
        },
        Row {
            says: "a status this code does not know: open, its funds counted withdrawn",
            found: (Some(inquiry_record.clone()), Some(inquiry_charge.clone())),
            input: dispute("a_status_added_later", 1000, week),
            now: later,
            next: Some(Charge {
                reserved: 1000,
                disputed_by: Some("dp_1".into()),
                refundable: false,
            }),
            then: (
                "move",
                Some(Record {
                    status: Unknown,
                    dispute_status: "a_status_added_later".into(),
                    reserved: true,
                    in_review: false,
                    unreserved: false,
                    due: Some(later.plus(24 * HOUR)),
                }),
            ),
        },
        Row {
            says: "read again before it is due, as Stripe holds it: nothing written (a second \
                   delivery of the same event)",
            found: (Some(open_record.clone()), Some(open_charge.clone())),
            input: open.clone(),
            now: later,
            next: None,
            then: ("nothing(as_stripe_holds)", None),
        },
        Row {
            says: "read again because it was due, unchanged at Stripe: moved to its next read only",
            found: (Some(open_record.clone()), Some(open_charge.clone())),
            input: open.clone(),
            now: T0.plus(24 * HOUR),
            next: Some(Charge {
                reserved: 1000,
                disputed_by: Some("dp_1".into()),
                refundable: false,
            }),
            then: (
                "move",
                Some(Record {
                    status: Unknown,
                    dispute_status: "needs_response".into(),
                    reserved: true,
                    in_review: false,
                    unreserved: false,
                    due: Some(T0.plus(48 * HOUR)),
                }),
            ),
        },
        Row {
            says: "a settled dispute never moves, whatever Stripe says now",
            found: (Some(lost_record.clone()), Some(lost_charge.clone())),
            input: dispute("won", 1000, None),
            now: later,
            next: None,
            then: ("nothing(settled)", None),
        },
    ];
    spec::holds(&rows, run);
    spec::covers(
        "the dispute plan",
        rows.iter().map(|r| r.then.clone()),
        OUTCOMES,
        variant,
    );
}

/// The twin of the coverage check: a table without its settle rows is caught, by name.
#[test]
fn a_table_missing_an_outcome_is_caught() {
    let outcomes: [Then; 2] = [("create", None), ("nothing(not_ours)", None)];
    let missing = spec::uncovered(outcomes, OUTCOMES, variant);
    assert!(missing.contains(&"settle".to_owned()), "{missing:?}");
    assert_eq!(missing.len(), OUTCOMES.len() - 2);
}

/// Two deliveries at once read the same record and plan the same move: the store takes the
/// first, refuses the second by the record's `updated_at` (it re-reads and finds nothing to
/// do); a settled dispute refuses every move by `unsettled`.
#[test]
fn two_deliveries_at_once_move_the_record_once_and_a_settled_one_never() {
    let charge = paid_charge("ord-dispute");
    let (record, on_charge) = recorded(&charge, &dispute("needs_response", 1000, None), T0);
    let won = dispute("won", 1000, None);
    let later = T0.plus(HOUR);
    let DisputeWrite::Move(first) = plan(
        Some(&record),
        Some(&on_charge),
        &won,
        later,
        &DisputePolicy::default(),
    ) else {
        panic!("a settle")
    };
    let first = *first;
    let settled = apply(&record, &first).unwrap();
    assert_eq!(settled.status, OperationStatus::Failed);
    let second = first.clone();
    assert_eq!(apply(&settled, &second), Err(Guard::Unsettled));
    // The twin: the same write over the record it read is accepted.
    assert!(apply(&record, &second).is_ok());
    // A move planned from an older read is refused by `updated_at`.
    let mut moved = record.clone();
    moved.updated_at = later;
    assert!(matches!(apply(&moved, &first), Err(Guard::UpdatedAt(_))));
    assert_eq!(
        plan(
            Some(&settled),
            Some(&on_charge),
            &won,
            later,
            &DisputePolicy::default()
        ),
        DisputeWrite::Nothing(Unchanged::Settled)
    );
}

/// The reservation is held by the charge's guards, as a refund's: a dispute's create whose
/// charge moved since read (a refund reserved in between) is refused by `reserved_at_most`,
/// and planned again over the charge as it is now it is recorded without the reservation.
#[test]
fn a_reservation_that_no_longer_fits_is_refused_and_planned_again_without_it() {
    let charge = paid_charge("ord-dispute");
    let open = dispute("needs_response", 1000, None);
    let DisputeWrite::Create { record, on_charge } =
        plan(None, Some(&charge), &open, T0, &DisputePolicy::default())
    else {
        panic!("a create")
    };
    // The same charge, a refund of 300 reserved since it was read.
    let mut refunded = charge.clone();
    refunded.params.charge_state_mut().unwrap().refund_reserved = 300;
    let claim = ChargeClaim::Dispute(&on_charge);
    let (refused, _) = create_beside(None, Some(&refunded), &record, &claim);
    assert_eq!(
        refused,
        CreatedBeside::ChargeRefused(Some((refunded.clone(), Guard::ReservedAtMost(0))))
    );
    // The twin: the charge as read takes it.
    assert!(matches!(
        create_beside(None, Some(&charge), &record, &claim).0,
        CreatedBeside::New(_)
    ));
    let DisputeWrite::Create { record, on_charge } =
        plan(None, Some(&refunded), &open, T0, &DisputePolicy::default())
    else {
        panic!("a create")
    };
    assert!(!record.params.dispute_state().unwrap().reserved);
    assert!(record.review.is_none(), "a dispute is never put in review");
    assert!(
        record.next_due_at.is_some(),
        "read again as any open dispute"
    );
    assert!(DisputeWrite::Create {
        record: record.clone(),
        on_charge: on_charge.clone(),
    }
    .unreserved());
    assert_eq!(on_charge.reserve, None);
    let id = DisputeId::parse("dp_1").unwrap();
    let (_, after) = create_beside(
        None,
        Some(&refunded),
        &record,
        &ChargeClaim::Dispute(&on_charge),
    );
    let after = after.unwrap();
    assert_eq!(after.params.charge_state().unwrap().disputed_by, Some(id));
    assert_eq!(after.refund_reserved(), 300);
}
