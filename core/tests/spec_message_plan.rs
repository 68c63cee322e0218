//! The specification of what happens to one charge-queue message
//! ([`charge_core::message_plan::fate`]): what the shell found of the message, at which receive
//! (of a limit of 5) → its fate. The module's doc states the rules in prose; this is them in full.

mod spec;

use charge_core::message_plan::{fate, Fate, Item, Receive, Seen};
use charge_core::outcome::RetryCause;
use charge_core::plan::Disposition;
use spec::Row;

/// The queue's `maxReceiveCount` in every row.
const LIMIT: u32 = 5;

/// (what the shell found of the message, its receive count) → its fate.
type MessageRow = Row<Seen, u32, (), Fate, ()>;

fn table() -> Vec<MessageRow> {
    use Fate::{Charge, Done, Park};
    let ran = Seen::Executed;
    vec![
        Row {
            says: "behind a failed message of its group, it fails too, unlooked-at",
            found: Seen::BehindFailed { soon: false },
            input: 1,
            now: (),
            next: (),
            then: Done(Item::Retry("earlier message in group failed")),
        },
        Row {
            says: "behind one that comes back soon, it comes back soon with it",
            found: Seen::BehindFailed { soon: true },
            input: 1,
            now: (),
            next: (),
            then: Done(Item::RetrySoon("earlier message in group comes back soon")),
        },
        Row {
            says: "an unreadable body is parked with its reason, even at the last receive",
            found: Seen::Unreadable("unknown_version"),
            input: LIMIT,
            now: (),
            next: (),
            then: Park("unknown_version"),
        },
        Row {
            says: "a message naming no operation is parked",
            found: Seen::NoSuchOperation,
            input: 1,
            now: (),
            next: (),
            then: Park("no_such_operation"),
        },
        Row {
            says: "a record this release cannot read is parked (the index still drives it)",
            found: Seen::UnreadableRecord,
            input: 1,
            now: (),
            next: (),
            then: Park("unreadable_record"),
        },
        Row {
            says: "poison whose copy to the DLQ failed is retried: never dropped uncopied",
            found: Seen::DeadLetterUnavailable,
            input: 1,
            now: (),
            next: (),
            then: Done(Item::Retry("dead-letter queue unavailable")),
        },
        Row {
            says: "the store unavailable: retried after the visibility timeout",
            found: Seen::StoreUnavailable,
            input: 1,
            now: (),
            next: (),
            then: Done(Item::Retry("store unavailable")),
        },
        Row {
            says: "no budget slot: back in seconds, nothing claimed",
            found: Seen::BudgetSaturated,
            input: LIMIT - 1,
            now: (),
            next: (),
            then: Done(Item::RetrySoon("stripe budget saturated")),
        },
        Row {
            says: "no budget slot at the last receive: the call goes out anyway",
            found: Seen::BudgetSaturated,
            input: LIMIT,
            now: (),
            next: (),
            then: Charge,
        },
        Row {
            says: "Stripe's 429: back in seconds",
            found: ran(Disposition::RetryLater(RetryCause::RateLimited)),
            input: 1,
            now: (),
            next: (),
            then: Done(Item::RetrySoon("rate limited")),
        },
        Row {
            says: "a key in use (409): back in seconds",
            found: ran(Disposition::RetryLater(RetryCause::KeyInUse)),
            input: 1,
            now: (),
            next: (),
            then: Done(Item::RetrySoon("idempotency key in use")),
        },
        Row {
            says: "a lease held elsewhere: back in seconds",
            found: ran(Disposition::Busy),
            input: 1,
            now: (),
            next: (),
            then: Done(Item::RetrySoon("leased elsewhere")),
        },
        Row {
            says: "a 429 at the last receive: acknowledged, left to the reconciler",
            found: ran(Disposition::RetryLater(RetryCause::RateLimited)),
            input: LIMIT,
            now: (),
            next: (),
            then: Done(Item::LeftToReconciler("rate limited")),
        },
        Row {
            says: "a key in use at the last receive: left to the reconciler",
            found: ran(Disposition::RetryLater(RetryCause::KeyInUse)),
            input: LIMIT + 2,
            now: (),
            next: (),
            then: Done(Item::LeftToReconciler("idempotency key in use")),
        },
        Row {
            says: "a lease elsewhere at the last receive: left to the reconciler",
            found: ran(Disposition::Busy),
            input: LIMIT,
            now: (),
            next: (),
            then: Done(Item::LeftToReconciler("leased elsewhere")),
        },
        Row {
            says: "our key refused (configuration): retried after the visibility timeout",
            found: ran(Disposition::RetryLater(RetryCause::Configuration)),
            input: 1,
            now: (),
            next: (),
            then: Done(Item::Retry("retry later")),
        },
        Row {
            says: "settled now: acknowledged",
            found: ran(Disposition::Settled),
            input: 1,
            now: (),
            next: (),
            then: Done(Item::Acknowledged),
        },
        Row {
            says: "settled before it came: acknowledged",
            found: ran(Disposition::AlreadySettled),
            input: LIMIT,
            now: (),
            next: (),
            then: Done(Item::Acknowledged),
        },
        Row {
            says: "recorded unknown and scheduled: acknowledged, the index drives it",
            found: ran(Disposition::Scheduled),
            input: 1,
            now: (),
            next: (),
            then: Done(Item::Acknowledged),
        },
        Row {
            says: "in review: acknowledged, a person settles it",
            found: ran(Disposition::InReview("rejected: ...".into())),
            input: 1,
            now: (),
            next: (),
            then: Done(Item::Acknowledged),
        },
        Row {
            says: "superseded by another writer: acknowledged, theirs stands",
            found: ran(Disposition::Superseded),
            input: 1,
            now: (),
            next: (),
            then: Done(Item::Acknowledged),
        },
    ]
}

fn plan(seen: &Seen, count: &u32, _: &()) -> ((), Fate) {
    let receive = Receive {
        count: *count,
        limit: LIMIT,
    };
    ((), fate(seen, receive))
}

#[test]
fn message_table() {
    spec::holds(&table(), plan);
}

/// The name of each fate, and of each report a done message makes.
fn variant(fate: &Fate) -> &'static str {
    match fate {
        Fate::Charge => "Charge",
        Fate::Park(_) => "Park",
        Fate::Done(item) => match item {
            Item::Acknowledged => "Done(Acknowledged)",
            Item::Retry(_) => "Done(Retry)",
            Item::RetrySoon(_) => "Done(RetrySoon)",
            Item::LeftToReconciler(_) => "Done(LeftToReconciler)",
            // Not a fate: the plan says `Park`, and the shell reports `Poisoned` once the copy to
            // the dead-letter queue is made.
            Item::Poisoned(_) => "Done(Poisoned)",
        },
    }
}

const FATES: &[&str] = &[
    "Charge",
    "Park",
    "Done(Acknowledged)",
    "Done(Retry)",
    "Done(RetrySoon)",
    "Done(LeftToReconciler)",
];

#[test]
fn every_fate_has_a_row() {
    spec::covers(
        "the message plan",
        table().into_iter().map(|row| row.then),
        FATES,
        variant,
    );
}

/// The twin: a table without its last-receive rows is caught, and the check names what it lacks.
#[test]
fn a_table_missing_a_fate_is_caught() {
    let rows = table().into_iter().filter(|row| {
        !matches!(
            row.then,
            Fate::Charge | Fate::Done(Item::LeftToReconciler(_))
        )
    });
    assert_eq!(
        spec::uncovered(rows.map(|row| row.then), FATES, variant),
        ["Charge", "Done(LeftToReconciler)"]
    );
}
