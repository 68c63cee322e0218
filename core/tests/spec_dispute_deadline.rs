//! The specification of a dispute's evidence deadline
//! ([`charge_core::dispute::deadline::deadline`]): (what Stripe holds of the dispute: status,
//! `due_by`, a saved draft; now; a page window of 72 h) → the page, and when the record is read
//! again. The module's doc states the rules in prose; this is them in full.

mod spec;

use std::time::Duration;

use charge_core::dispute::deadline::{
    deadline, Deadline, DeadlineFacts, DeadlinePage, DEFAULT_PAGE_WINDOW, RECHECK,
};
use charge_core::dispute::DisputeStatus;
use charge_core::testing::T0;
use charge_core::time::Timestamp;
use spec::Row;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// (the dispute as Stripe holds it, nothing) at `now` → ((), the page and the next read).
type DeadlineRow = Row<DeadlineFacts, (), (), Deadline>;

fn facts(status: DisputeStatus, due_by: Option<Timestamp>, has_evidence: bool) -> DeadlineFacts {
    DeadlineFacts {
        status,
        due_by,
        has_evidence,
    }
}

fn then(page: Option<DeadlinePage>, due_again: Option<Timestamp>) -> Deadline {
    Deadline { page, due_again }
}

fn table() -> Vec<DeadlineRow> {
    use DisputeStatus::*;
    let due = T0.plus(10 * DAY);
    let near = DeadlinePage::Near { draft_saved: false };
    vec![
        Row {
            says: "far from its deadline: no page, read again at the daily recheck",
            found: facts(NeedsResponse, Some(due), false),
            input: (),
            now: T0,
            next: (),
            then: then(None, Some(T0.plus(RECHECK))),
        },
        Row {
            says: "the window opens before the next recheck: read again when it opens",
            found: facts(NeedsResponse, Some(due), false),
            input: (),
            now: due.minus(DEFAULT_PAGE_WINDOW).minus(2 * HOUR),
            next: (),
            then: then(None, Some(due.minus(DEFAULT_PAGE_WINDOW))),
        },
        Row {
            says: "inside the window with nothing submitted: Near, read again at the recheck",
            found: facts(NeedsResponse, Some(due), false),
            input: (),
            now: due.minus(DEFAULT_PAGE_WINDOW),
            next: (),
            then: then(
                Some(near),
                Some(due.minus(DEFAULT_PAGE_WINDOW).plus(RECHECK)),
            ),
        },
        Row {
            says: "near, with due_by before the next recheck: read again at due_by to page Passed",
            found: facts(NeedsResponse, Some(due), false),
            input: (),
            now: due.minus(5 * HOUR),
            next: (),
            then: then(Some(near), Some(due)),
        },
        Row {
            says: "a draft saved in Stripe is not submitted: still Near, and the page says a draft waits",
            found: facts(NeedsResponse, Some(due), true),
            input: (),
            now: due.minus(5 * HOUR),
            next: (),
            then: then(Some(DeadlinePage::Near { draft_saved: true }), Some(due)),
        },
        Row {
            says: "an inquiry that needs a response pages as a dispute does",
            found: facts(WarningNeedsResponse, Some(due), false),
            input: (),
            now: due.minus(HOUR),
            next: (),
            then: then(Some(near), Some(due)),
        },
        Row {
            says: "due_by reached and still needing a response: Passed, read again daily",
            found: facts(NeedsResponse, Some(due), false),
            input: (),
            now: due,
            next: (),
            then: then(Some(DeadlinePage::Passed), Some(due.plus(RECHECK))),
        },
        Row {
            says: "evidence submitted (under review): no page, even past due_by",
            found: facts(UnderReview, Some(due), true),
            input: (),
            now: due.plus(HOUR),
            next: (),
            then: then(None, Some(due.plus(HOUR).plus(RECHECK))),
        },
        Row {
            says: "an inquiry under review: no page, read again daily",
            found: facts(WarningUnderReview, Some(due), true),
            input: (),
            now: due.minus(HOUR),
            next: (),
            then: then(None, Some(due.minus(HOUR).plus(RECHECK))),
        },
        Row {
            says: "no due_by (the bank allows no response): no page, read again daily",
            found: facts(NeedsResponse, None, false),
            input: (),
            now: T0,
            next: (),
            then: then(None, Some(T0.plus(RECHECK))),
        },
        Row {
            says: "Stripe's due_by of 0 is no deadline, not one long passed",
            found: facts(NeedsResponse, Some(Timestamp::from_millis(0)), false),
            input: (),
            now: T0,
            next: (),
            then: then(None, Some(T0.plus(RECHECK))),
        },
        Row {
            says: "a status this code does not know is open: no page, read again daily",
            found: facts(Other("prearbitration".into()), Some(due), false),
            input: (),
            now: due.plus(HOUR),
            next: (),
            then: then(None, Some(due.plus(HOUR).plus(RECHECK))),
        },
        Row {
            says: "won: closed, no page, never read again",
            found: facts(Won, Some(due), true),
            input: (),
            now: due.plus(HOUR),
            next: (),
            then: then(None, None),
        },
        Row {
            says: "lost past due_by: closed, the passed page stops",
            found: facts(Lost, Some(due), false),
            input: (),
            now: due.plus(HOUR),
            next: (),
            then: then(None, None),
        },
        Row {
            says: "an inquiry closed: no page, never read again",
            found: facts(WarningClosed, Some(due), false),
            input: (),
            now: due.minus(HOUR),
            next: (),
            then: then(None, None),
        },
    ]
}

fn plan(found: &DeadlineFacts, _: &(), now: &Timestamp) -> ((), Deadline) {
    ((), deadline(found, *now, DEFAULT_PAGE_WINDOW))
}

#[test]
fn deadline_table() {
    spec::holds(&table(), plan);
}

/// The page and whether the record is read again, by name.
fn variant(d: &Deadline) -> &'static str {
    match (d.page, d.due_again) {
        (Some(DeadlinePage::Near { draft_saved: false }), Some(_)) => "Near",
        (Some(DeadlinePage::Near { draft_saved: true }), Some(_)) => "Near(draft_saved)",
        (Some(DeadlinePage::Passed), Some(_)) => "Passed",
        (None, Some(_)) => "Quiet",
        (None, None) => "Closed",
        (Some(_), None) => "Paged(never read again)",
    }
}

const OUTCOMES: &[&str] = &["Near", "Near(draft_saved)", "Passed", "Quiet", "Closed"];

#[test]
fn every_outcome_has_a_row() {
    spec::covers(
        "the dispute deadline",
        table().into_iter().map(|row| row.then),
        OUTCOMES,
        variant,
    );
}

/// The twin: a table without its Passed rows is caught, and the check names what it lacks.
#[test]
fn a_table_missing_an_outcome_is_caught() {
    let rows = table()
        .into_iter()
        .filter(|row| row.then.page != Some(DeadlinePage::Passed));
    assert_eq!(
        spec::uncovered(rows.map(|row| row.then), OUTCOMES, variant),
        ["Passed"]
    );
}

/// Whatever the clock, an open dispute that needs a response is read again no later than its
/// deadline's window opening, its deadline, or a day: no deadline is crossed unread.
#[test]
fn no_deadline_is_crossed_between_two_reads() {
    let due = T0.plus(10 * DAY);
    let open = facts(DisputeStatus::NeedsResponse, Some(due), false);
    let mut now = T0;
    let mut reads = vec![];
    while now <= due.plus(DAY) {
        reads.push(now);
        now = deadline(&open, now, DEFAULT_PAGE_WINDOW)
            .due_again
            .expect("open disputes are read again");
    }
    assert!(
        reads.contains(&due.minus(DEFAULT_PAGE_WINDOW)),
        "read as the window opens"
    );
    assert!(reads.contains(&due), "read at the deadline");
    assert!(reads.windows(2).all(|w| w[1].since(w[0]) <= RECHECK));
}
