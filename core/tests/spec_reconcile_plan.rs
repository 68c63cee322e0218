//! The specification of the reconciler ([`charge_core::reconcile_plan`]): what it does with an
//! operation it finds due (`plan_table`), when a never-attempted one waits for a long queue
//! instead of being sent again (`wait_for_queue_table`), and when it looks again after a re-drive
//! or a re-enqueue (`redrive_backoff_table`).

mod spec;

use std::time::Duration;

use charge_core::operation::{Lease, LeaseToken, Operation, OperationStatus};
use charge_core::plan::Policy;
use charge_core::reconcile_plan::{
    plan, redrive_due_at, wait_for_queue, Action, ChargeThroughput, QueueBacklog, QueueDepth,
};
use charge_core::testing::{order, T0};
use charge_core::time::Timestamp;
use spec::Row;

/// (the record as the reconciler found it, now) → what it does with the operation.
type ActionRow = Row<Operation, (), (), Action>;

/// (the record as found, the queue as the tick read it, now) → when it is looked at again
/// without a send (`None`: re-enqueued now).
type WaitRow = Row<Operation, Option<QueueBacklog>, (), Option<Timestamp>>;

/// (the record as found, now) → the next look after a re-drive or re-enqueue.
type DueRow = Row<Operation, (), (), Timestamp>;

const MIN: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

fn op() -> Operation {
    order("order-plan").build()
}

/// Never attempted, its record written last at `at` (a reconciler's wait for the queue).
fn looked_at(at: Timestamp) -> Operation {
    Operation {
        updated_at: at,
        ..op()
    }
}

fn attempted(first: Timestamp) -> Operation {
    Operation {
        status: OperationStatus::Unknown,
        attempts: 1,
        first_attempted_at: Some(first),
        ..op()
    }
}

fn action(action: &Action) -> &'static str {
    match action {
        Action::Skip => "Skip",
        Action::Reenqueue => "Reenqueue",
        Action::Redrive => "Redrive",
        Action::Settle => "Settle",
    }
}

const ACTIONS: &[&str] = &["Skip", "Reenqueue", "Redrive", "Settle"];

fn covers_every_action(rows: &[ActionRow]) {
    spec::covers(
        "the reconcile plan",
        rows.iter().map(|row| row.then),
        ACTIONS,
        action,
    );
}

fn wait(next_look: &Option<Timestamp>) -> &'static str {
    match next_look {
        None => "None (re-enqueued now)",
        Some(_) => "Some (waits for the queue)",
    }
}

const WAITS: &[&str] = &["None (re-enqueued now)", "Some (waits for the queue)"];

/// The twin of the coverage checks: a table without its settle rows, or without a wait, is
/// caught by name.
#[test]
fn a_table_missing_an_outcome_is_caught() {
    let no_settle = [Action::Skip, Action::Reenqueue, Action::Redrive];
    assert_eq!(spec::uncovered(no_settle, ACTIONS, action), ["Settle"]);
    assert_eq!(
        spec::uncovered([None], WAITS, wait),
        ["Some (waits for the queue)"]
    );
}

#[test]
fn plan_table() {
    let policy = Policy::default();
    let live = Lease {
        token: LeaseToken::new_random(),
        expires_at: T0.plus(HOUR),
    };
    let expired = Lease {
        token: LeaseToken::new_random(),
        expires_at: T0,
    };
    let window = policy.key_window;
    let dispute = {
        use charge_core::dispute::state::{DisputeParams, DisputeState};
        let d = charge_core::testing::stripe_dispute("dp_1", "pi_1");
        Operation::new_dispute(
            op().order_id,
            DisputeParams::of(&d, d.payment_intent.clone().unwrap()).unwrap(),
            DisputeState::of(&d, true),
            T0,
            T0,
        )
    };
    let cases: [ActionRow; 12] = [
        Row {
            says: "a dispute, due and never attempted: never put on the queue (it has no \
                   message and no key; it is read again at Stripe)",
            found: dispute,
            input: (),
            now: T0.plus(10 * MIN),
            next: (),
            then: Action::Skip,
        },
        Row {
            says: "never attempted",
            found: op(),
            input: (),
            now: T0.plus(10 * MIN),
            next: (),
            then: Action::Reenqueue,
        },
        Row {
            says: "never attempted, lease live",
            found: Operation {
                lease: Some(live),
                ..op()
            },
            input: (),
            now: T0.plus(MIN),
            next: (),
            then: Action::Skip,
        },
        Row {
            says: "never attempted, lease expired",
            found: Operation {
                lease: Some(expired),
                ..op()
            },
            input: (),
            now: T0.plus(MIN),
            next: (),
            then: Action::Reenqueue,
        },
        Row {
            says: "unknown in the window",
            found: attempted(T0),
            input: (),
            now: T0.plus(HOUR),
            next: (),
            then: Action::Redrive,
        },
        Row {
            says: "unknown a moment before the window ends",
            found: attempted(T0),
            input: (),
            now: T0.plus(window).minus(Duration::from_millis(1)),
            next: (),
            then: Action::Redrive,
        },
        Row {
            says: "unknown as the window ends",
            found: attempted(T0),
            input: (),
            now: T0.plus(window),
            next: (),
            then: Action::Settle,
        },
        Row {
            says: "unknown long past the window",
            found: attempted(T0),
            input: (),
            now: T0.plus(window).plus(48 * HOUR),
            next: (),
            then: Action::Settle,
        },
        Row {
            says: "pending after retry-later",
            found: Operation {
                status: OperationStatus::Pending,
                ..attempted(T0)
            },
            input: (),
            now: T0.plus(HOUR),
            next: (),
            then: Action::Redrive,
        },
        Row {
            says: "unknown, leased",
            found: Operation {
                lease: Some(live),
                ..attempted(T0)
            },
            input: (),
            now: T0.plus(MIN),
            next: (),
            then: Action::Skip,
        },
        Row {
            says: "succeeded",
            found: Operation {
                status: OperationStatus::Succeeded,
                ..attempted(T0)
            },
            input: (),
            now: T0.plus(window),
            next: (),
            then: Action::Skip,
        },
        Row {
            says: "failed",
            found: Operation {
                status: OperationStatus::Failed,
                ..op()
            },
            input: (),
            now: T0.plus(HOUR),
            next: (),
            then: Action::Skip,
        },
    ];
    spec::holds(&cases, |found, (), now| ((), plan(found, *now, &policy)));
    covers_every_action(&cases);
}

#[test]
fn wait_for_queue_table() {
    let policy = Policy::default(); // grace 5 min: overdue from T0 + 5 min
    let now = T0.plus(10 * MIN);
    // 20 environments x 10 take 200 at once.
    let throughput = ChargeThroughput {
        in_flight: 200,
        per_second: 20.0,
    };
    let queue = |visible, in_flight| Some(throughput.with_depth(QueueDepth { visible, in_flight }));
    let secs = Duration::from_secs;
    let cases: [WaitRow; 18] = [
        Row {
            says: "11,800 waiting and 200 in flight at 20/s, 5 min overdue: looked at again \
                   once they are worked through, in 600 s",
            found: op(),
            input: queue(11_800, 200),
            now,
            next: (),
            then: Some(now.plus(secs(600))),
        },
        Row {
            says: "no more waiting than the environments take at once: the message was lost, \
                   re-enqueued now",
            found: op(),
            input: queue(200, 200),
            now,
            next: (),
            then: None,
        },
        Row {
            says: "an empty queue: re-enqueued now",
            found: op(),
            input: queue(0, 200),
            now,
            next: (),
            then: None,
        },
        Row {
            says: "however many are in flight (a crashed invocation's come back only after \
                   the visibility timeout), they never hold a re-enqueue back",
            found: op(),
            input: queue(0, 5_000),
            now,
            next: (),
            then: None,
        },
        Row {
            says: "the queue could not say: re-enqueued, as before",
            found: op(),
            input: None,
            now,
            next: (),
            then: None,
        },
        Row {
            says: "an attempted operation keeps its re-drive's timing (the key window's)",
            found: attempted(T0),
            input: queue(11_800, 200),
            now,
            next: (),
            then: None,
        },
        Row {
            says: "however deep the queue, the wait is bounded",
            found: op(),
            input: queue(10_000_000, 200),
            now,
            next: (),
            then: Some(now.plus(QueueBacklog::LONGEST_WAIT)),
        },
        Row {
            says: "a queue a little behind (760 at 20/s: 38 s), just past the grace, first \
                   look: the queue's drain time",
            found: op(),
            input: queue(500, 260),
            now: T0.plus(5 * MIN).plus(secs(1)),
            next: (),
            then: Some(T0.plus(5 * MIN).plus(secs(1 + 38))),
        },
        Row {
            says: "the same queue still behind an hour past the grace: the wait is as long \
                   as the wait so far (the overdue time doubles), not one tick",
            found: op(),
            input: queue(500, 260),
            now: T0.plus(5 * MIN).plus(HOUR),
            next: (),
            then: Some(T0.plus(5 * MIN).plus(2 * HOUR)),
        },
        Row {
            says: "a day past the grace: at most the back-off's longest step (1 h), so a \
                   lost message is looked at within an hour of the queue catching up",
            found: op(),
            input: queue(500, 260),
            now: T0.plus(5 * MIN).plus(24 * HOUR),
            next: (),
            then: Some(T0.plus(5 * MIN).plus(25 * HOUR)),
        },
        Row {
            says: "a day past the grace and the queue 10 h deep: its drain time, bounded by \
                   the longest wait",
            found: op(),
            input: queue(720_000, 200),
            now: T0.plus(5 * MIN).plus(24 * HOUR),
            next: (),
            then: Some(
                T0.plus(5 * MIN)
                    .plus(24 * HOUR)
                    .plus(QueueBacklog::LONGEST_WAIT),
            ),
        },
        Row {
            says: "an hour past the grace but the queue caught up: re-enqueued now",
            found: op(),
            input: queue(40, 260),
            now: T0.plus(5 * MIN).plus(HOUR),
            next: (),
            then: None,
        },
        // One full wait under a queue holding less than the grace's work: an operation looked
        // at before (written since checkout) is re-enqueued; one deeper than the grace is still
        // waited for, its waits lengthening.
        Row {
            says: "the same queue at the next look (38 s of work, under the 300 s grace): \
                   what it held at the first look is worked through, re-enqueued now",
            found: looked_at(T0.plus(5 * MIN).plus(secs(1))),
            input: queue(500, 260),
            now,
            next: (),
            then: None,
        },
        Row {
            says: "the same queue a day past the grace, looked at before: re-enqueued now, \
                   not looked at hourly",
            found: looked_at(T0.plus(5 * MIN).plus(23 * HOUR)),
            input: queue(500, 260),
            now: T0.plus(5 * MIN).plus(24 * HOUR),
            next: (),
            then: None,
        },
        Row {
            says: "looked at before, exactly the grace's work (6,000 at 20/s: 300 s): \
                   re-enqueued now",
            found: looked_at(T0.plus(6 * MIN)),
            input: queue(5_800, 200),
            now,
            next: (),
            then: None,
        },
        Row {
            says: "looked at before, a second more than the grace's work (6,020 at 20/s: \
                   301 s): still waited for",
            found: looked_at(T0.plus(6 * MIN)),
            input: queue(5_820, 200),
            now,
            next: (),
            then: Some(now.plus(secs(301))),
        },
        Row {
            says: "a queue deeper than the grace (9,260 at 20/s: 463 s) an hour past the \
                   grace, looked at before: the wait is as long as the wait so far (the \
                   overdue time doubles), not one tick",
            found: looked_at(T0.plus(6 * MIN)),
            input: queue(9_000, 260),
            now: T0.plus(5 * MIN).plus(HOUR),
            next: (),
            then: Some(T0.plus(5 * MIN).plus(2 * HOUR)),
        },
        Row {
            says: "the same queue a day past the grace, looked at before: at most the \
                   back-off's longest step (1 h)",
            found: looked_at(T0.plus(5 * MIN).plus(23 * HOUR)),
            input: queue(9_000, 260),
            now: T0.plus(5 * MIN).plus(24 * HOUR),
            next: (),
            then: Some(T0.plus(5 * MIN).plus(25 * HOUR)),
        },
    ];
    spec::holds(&cases, |found, queue, now| {
        ((), wait_for_queue(found, *now, queue.as_ref(), &policy))
    });
    spec::covers("the queue's wait", cases.map(|row| row.then), WAITS, wait);
}

#[test]
fn redrive_backoff_table() {
    let policy = Policy::default(); // base 1 min, max 1 h, search at window + 10 min
    let search_at = T0.plus(policy.key_window).plus(policy.search_min_age);
    let due_cases: [DueRow; 8] = [
        Row {
            says: "first re-enqueue: base",
            found: op(),
            input: (),
            now: T0.plus(5 * MIN),
            next: (),
            then: T0.plus(6 * MIN),
        },
        Row {
            says: "third re-enqueue: base * 4",
            found: Operation {
                redrives: 2,
                ..op()
            },
            input: (),
            now: T0.plus(5 * MIN),
            next: (),
            then: T0.plus(9 * MIN),
        },
        Row {
            says: "capped at the max",
            found: Operation {
                redrives: 10,
                ..op()
            },
            input: (),
            now: T0,
            next: (),
            then: T0.plus(HOUR),
        },
        Row {
            says: "huge count: capped, no overflow",
            found: Operation {
                redrives: u32::MAX,
                ..op()
            },
            input: (),
            now: T0,
            next: (),
            then: T0.plus(HOUR),
        },
        Row {
            says: "attempted: first re-drive",
            found: attempted(T0),
            input: (),
            now: T0.plus(HOUR),
            next: (),
            then: T0.plus(HOUR + MIN),
        },
        Row {
            says: "attempted: never past search",
            found: Operation {
                redrives: 10,
                ..attempted(T0)
            },
            input: (),
            now: search_at.minus(MIN),
            next: (),
            then: search_at,
        },
        Row {
            says: "attempted: at search, the back-off",
            found: Operation {
                redrives: 10,
                ..attempted(T0)
            },
            input: (),
            now: search_at,
            next: (),
            then: search_at.plus(HOUR),
        },
        // Never attempted: search is not what settles it, so no clamp.
        Row {
            says: "never attempted, near the window",
            found: Operation {
                redrives: 10,
                ..op()
            },
            input: (),
            now: search_at.minus(MIN),
            next: (),
            then: search_at.plus(HOUR - MIN),
        },
    ];
    spec::holds(&due_cases, |found, (), now| {
        ((), redrive_due_at(found, *now, &policy))
    });
}
