//! The reconciler's decisions as pure functions of (record, now, policy): what to do with one due
//! operation, and when it is due again after a re-drive. No I/O, so every edge is a table test.

use std::time::Duration;

use crate::operation::Operation;
use crate::plan::{backoff_due_at, Policy};
use crate::time::Timestamp;

/// What to do with one due operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Settled already, or someone holds a live lease: leave it to them.
    Skip,
    /// Never attempted: put it on the queue again.
    Reenqueue,
    /// Attempted inside the key window: re-drive through the queue.
    Redrive,
    /// Past the key window: settle without creating.
    Settle,
}

impl Action {
    /// The decision's name in the logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::Reenqueue => "reenqueue",
            Self::Redrive => "redrive",
            Self::Settle => "settle",
        }
    }
}

pub fn plan(op: &Operation, now: Timestamp, policy: &Policy) -> Action {
    if op.status.is_settled() || op.has_live_lease(now) {
        return Action::Skip;
    }
    match op.first_attempted_at {
        None => Action::Reenqueue,
        Some(_) if op.key_window_passed(now, policy.key_window) => Action::Settle,
        Some(_) => Action::Redrive,
    }
}

/// The next due time after a re-drive or re-enqueue: the executor's back-off with one step per
/// re-drive already made (`base * 2^redrives`, capped), never past the moment search may settle
/// an attempted operation.
pub fn redrive_due_at(op: &Operation, now: Timestamp, policy: &Policy) -> Timestamp {
    backoff_due_at(op, now, policy, op.redrives)
}

/// How fast the charge path takes messages off the queue, from its configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChargeThroughput {
    /// Messages the charge environments hold at once (their number × the batch size).
    pub in_flight: u64,
    /// Messages per second when Stripe's budget is the bound.
    pub per_second: f64,
}

impl ChargeThroughput {
    /// The queue as deep as `depth`, against this throughput.
    pub fn with_depth(self, depth: QueueDepth) -> QueueBacklog {
        QueueBacklog {
            depth,
            in_flight_capacity: self.in_flight,
            drain_per_second: self.per_second,
        }
    }
}

/// What a queue holds, as it approximates it (SQS's `ApproximateNumberOfMessages` and
/// `ApproximateNumberOfMessagesNotVisible`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueDepth {
    /// Messages a receive could take now.
    pub visible: u64,
    /// Messages received and not yet deleted, or returned to come back later.
    pub in_flight: u64,
}

/// The charge queue as the reconciler finds it at the start of a tick: how many messages it holds
/// (visible and in flight, SQS's approximate counts) and how fast the charge path drains them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueBacklog {
    pub depth: QueueDepth,
    /// What the charge environments take at once when every one is busy (their number × the
    /// batch size).
    pub in_flight_capacity: u64,
    /// Messages per second the charge path takes when it is the bound: its Stripe budget.
    pub drain_per_second: f64,
}

impl QueueBacklog {
    /// The longest a re-enqueue waits for a long queue before the reconciler looks again: a
    /// sale's queue hours deep is waited for in a few looks, not one a tick (each look is a
    /// write).
    pub const LONGEST_WAIT: Duration = Duration::from_secs(6 * 3600);

    /// Behind: more messages waiting to be received than the charge environments take at once.
    /// Only visible ones count: a message in flight is being worked, or comes back on its own
    /// (a crashed invocation's, after the visibility timeout), so in-flight ones never hold a
    /// lost message's recovery back for long.
    pub fn is_behind(&self) -> bool {
        self.depth.visible > self.in_flight_capacity
    }

    /// How long the charge path takes to work through what is on the queue now.
    pub fn drain_time(&self) -> Duration {
        let messages = self.depth.visible + self.depth.in_flight;
        let secs = messages as f64 / self.drain_per_second.max(0.001);
        Duration::from_secs_f64(secs.min(Self::LONGEST_WAIT.as_secs_f64()))
    }
}

/// Tells a lost message from a long queue: a never-attempted operation past its grace is
/// re-enqueued only when the queue is not behind. While it is, its message is most likely still
/// waiting there (the checkout's send succeeded; a burst is ahead of it), and a second message
/// would only lengthen the queue it is waiting in: the operation is looked at again once the
/// charge path has worked through what the queue holds now, and re-enqueued then if it is still
/// pending and the queue has caught up.
///
/// One full wait is enough for a queue that holds less than the grace's work: what it held at
/// the first look (the operation's message among it, if it was sent) has been worked through by
/// the second, and a queue that shallow delivers what it takes in within the grace. So an
/// operation looked at before (its record written since checkout's put: `updated_at` past
/// `created_at`) is re-enqueued then, however long the queue stays a little behind (a sale at
/// Stripe's limit: seconds of work, but always more than the environments take at once). A
/// lost send, or a crashed invocation's message held for the visibility timeout, is so re-sent
/// one look after its grace, not once an hour until the sale ends (each look a write). Its
/// first look still waits: the tail of a burst is a queue that shrinks under the grace's work
/// while messages sent at its peak are still in it, and re-sending each of those would double
/// what is left.
///
/// A queue deeper than the grace is waited for as long as it stays so, and the waits lengthen
/// as they repeat: one lasts at least as long as the operation has already waited past its
/// grace (its overdue time doubles at every look), up to the back-off's longest step
/// (`policy.unknown_backoff_max`, 1 h by default), and the queue's drain time bounds it from
/// below (at most [`QueueBacklog::LONGEST_WAIT`]): about one write an hour, not one a tick. A
/// lost message is recovered at its first look after the queue catches up: at most the
/// back-off's longest step after (or its drain time, if longer). `None` (not behind, or the
/// queue could not say): re-enqueue now. An attempted operation is never held back: its
/// re-drive's timing is the key window's.
pub fn wait_for_queue(
    op: &Operation,
    now: Timestamp,
    backlog: Option<&QueueBacklog>,
    policy: &Policy,
) -> Option<Timestamp> {
    let looked_at_before = op.updated_at > op.created_at;
    let backlog = backlog.filter(|b| {
        b.is_behind() && (!looked_at_before || b.drain_time() > policy.pending_grace)
    })?;
    if op.first_attempted_at.is_some() {
        return None;
    }
    let overdue = now.since(op.created_at.plus(policy.pending_grace));
    let wait = backlog
        .drain_time()
        .max(overdue.min(policy.unknown_backoff_max))
        .min(QueueBacklog::LONGEST_WAIT);
    Some(now.plus(wait))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operation::{Lease, LeaseToken, OperationStatus};
    use crate::testing::{order, T0};

    /// One line of the specification: (the record as the reconciler found it, now) → what it
    /// does with the operation.
    struct Row {
        says: &'static str,
        found: Operation,
        now: Timestamp,
        then: Action,
    }

    /// One line of the specification: (the record as found, now) → the next look after a
    /// re-drive or re-enqueue.
    struct DueRow {
        says: &'static str,
        found: Operation,
        now: Timestamp,
        next_look: Timestamp,
    }

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
        let cases = [
            Row {
                says: "never attempted",
                found: op(),
                now: T0.plus(10 * MIN),
                then: Action::Reenqueue,
            },
            Row {
                says: "never attempted, lease live",
                found: Operation {
                    lease: Some(live),
                    ..op()
                },
                now: T0.plus(MIN),
                then: Action::Skip,
            },
            Row {
                says: "never attempted, lease expired",
                found: Operation {
                    lease: Some(expired),
                    ..op()
                },
                now: T0.plus(MIN),
                then: Action::Reenqueue,
            },
            Row {
                says: "unknown in the window",
                found: attempted(T0),
                now: T0.plus(HOUR),
                then: Action::Redrive,
            },
            Row {
                says: "unknown a moment before the window ends",
                found: attempted(T0),
                now: T0.plus(window).minus(Duration::from_millis(1)),
                then: Action::Redrive,
            },
            Row {
                says: "unknown as the window ends",
                found: attempted(T0),
                now: T0.plus(window),
                then: Action::Settle,
            },
            Row {
                says: "unknown long past the window",
                found: attempted(T0),
                now: T0.plus(window).plus(48 * HOUR),
                then: Action::Settle,
            },
            Row {
                says: "pending after retry-later",
                found: Operation {
                    status: OperationStatus::Pending,
                    ..attempted(T0)
                },
                now: T0.plus(HOUR),
                then: Action::Redrive,
            },
            Row {
                says: "unknown, leased",
                found: Operation {
                    lease: Some(live),
                    ..attempted(T0)
                },
                now: T0.plus(MIN),
                then: Action::Skip,
            },
            Row {
                says: "succeeded",
                found: Operation {
                    status: OperationStatus::Succeeded,
                    ..attempted(T0)
                },
                now: T0.plus(window),
                then: Action::Skip,
            },
            Row {
                says: "failed",
                found: Operation {
                    status: OperationStatus::Failed,
                    ..op()
                },
                now: T0.plus(HOUR),
                then: Action::Skip,
            },
        ];
        for row in cases {
            assert_eq!(plan(&row.found, row.now, &policy), row.then, "{}", row.says);
        }
    }

    /// One line of the specification: (the record as found, now, the queue as the tick read
    /// it) → when it is looked at again without a send (`None`: re-enqueued now).
    struct WaitRow {
        says: &'static str,
        found: Operation,
        now: Timestamp,
        queue: Option<QueueBacklog>,
        next_look: Option<Timestamp>,
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
        let queue =
            |visible, in_flight| Some(throughput.with_depth(QueueDepth { visible, in_flight }));
        let secs = Duration::from_secs;
        let cases = [
            WaitRow {
                says: "11,800 waiting and 200 in flight at 20/s, 5 min overdue: looked at again \
                       once they are worked through, in 600 s",
                found: op(),
                now,
                queue: queue(11_800, 200),
                next_look: Some(now.plus(secs(600))),
            },
            WaitRow {
                says: "no more waiting than the environments take at once: the message was lost, \
                       re-enqueued now",
                found: op(),
                now,
                queue: queue(200, 200),
                next_look: None,
            },
            WaitRow {
                says: "an empty queue: re-enqueued now",
                found: op(),
                now,
                queue: queue(0, 200),
                next_look: None,
            },
            WaitRow {
                says: "however many are in flight (a crashed invocation's come back only after \
                       the visibility timeout), they never hold a re-enqueue back",
                found: op(),
                now,
                queue: queue(0, 5_000),
                next_look: None,
            },
            WaitRow {
                says: "the queue could not say: re-enqueued, as before",
                found: op(),
                now,
                queue: None,
                next_look: None,
            },
            WaitRow {
                says: "an attempted operation keeps its re-drive's timing (the key window's)",
                found: attempted(T0),
                now,
                queue: queue(11_800, 200),
                next_look: None,
            },
            WaitRow {
                says: "however deep the queue, the wait is bounded",
                found: op(),
                now,
                queue: queue(10_000_000, 200),
                next_look: Some(now.plus(QueueBacklog::LONGEST_WAIT)),
            },
            WaitRow {
                says: "a queue a little behind (760 at 20/s: 38 s), just past the grace, first \
                       look: the queue's drain time",
                found: op(),
                now: T0.plus(5 * MIN).plus(secs(1)),
                queue: queue(500, 260),
                next_look: Some(T0.plus(5 * MIN).plus(secs(1 + 38))),
            },
            WaitRow {
                says: "the same queue still behind an hour past the grace: the wait is as long \
                       as the wait so far (the overdue time doubles), not one tick",
                found: op(),
                now: T0.plus(5 * MIN).plus(HOUR),
                queue: queue(500, 260),
                next_look: Some(T0.plus(5 * MIN).plus(2 * HOUR)),
            },
            WaitRow {
                says: "a day past the grace: at most the back-off's longest step (1 h), so a \
                       lost message is looked at within an hour of the queue catching up",
                found: op(),
                now: T0.plus(5 * MIN).plus(24 * HOUR),
                queue: queue(500, 260),
                next_look: Some(T0.plus(5 * MIN).plus(25 * HOUR)),
            },
            // Rows for one full wait under a queue holding less than the grace's work: an
            // operation looked at before (written since checkout) is re-enqueued; one deeper
            // than the grace is still waited for, its waits lengthening.
            WaitRow {
                says: "the same queue at the next look (38 s of work, under the 300 s grace): \
                       what it held at the first look is worked through, re-enqueued now",
                found: looked_at(T0.plus(5 * MIN).plus(secs(1))),
                now,
                queue: queue(500, 260),
                next_look: None,
            },
            WaitRow {
                says: "the same queue a day past the grace, looked at before: re-enqueued now, \
                       not looked at hourly",
                found: looked_at(T0.plus(5 * MIN).plus(23 * HOUR)),
                now: T0.plus(5 * MIN).plus(24 * HOUR),
                queue: queue(500, 260),
                next_look: None,
            },
            WaitRow {
                says: "looked at before, exactly the grace's work (6,000 at 20/s: 300 s): \
                       re-enqueued now",
                found: looked_at(T0.plus(6 * MIN)),
                now,
                queue: queue(5_800, 200),
                next_look: None,
            },
            WaitRow {
                says: "looked at before, a second more than the grace's work (6,020 at 20/s: \
                       301 s): still waited for",
                found: looked_at(T0.plus(6 * MIN)),
                now,
                queue: queue(5_820, 200),
                next_look: Some(now.plus(secs(301))),
            },
            WaitRow {
                says: "a queue deeper than the grace (9,260 at 20/s: 463 s) an hour past the \
                       grace, looked at before: the wait is as long as the wait so far (the \
                       overdue time doubles), not one tick",
                found: looked_at(T0.plus(6 * MIN)),
                now: T0.plus(5 * MIN).plus(HOUR),
                queue: queue(9_000, 260),
                next_look: Some(T0.plus(5 * MIN).plus(2 * HOUR)),
            },
            WaitRow {
                says: "the same queue a day past the grace, looked at before: at most the \
                       back-off's longest step (1 h)",
                found: looked_at(T0.plus(5 * MIN).plus(23 * HOUR)),
                now: T0.plus(5 * MIN).plus(24 * HOUR),
                queue: queue(9_000, 260),
                next_look: Some(T0.plus(5 * MIN).plus(25 * HOUR)),
            },
            WaitRow {
                says: "a day past the grace and the queue 10 h deep: its drain time, bounded by \
                       the longest wait",
                found: op(),
                now: T0.plus(5 * MIN).plus(24 * HOUR),
                queue: queue(720_000, 200),
                next_look: Some(
                    T0.plus(5 * MIN)
                        .plus(24 * HOUR)
                        .plus(QueueBacklog::LONGEST_WAIT),
                ),
            },
            WaitRow {
                says: "an hour past the grace but the queue caught up: re-enqueued now",
                found: op(),
                now: T0.plus(5 * MIN).plus(HOUR),
                queue: queue(40, 260),
                next_look: None,
            },
        ];
        for row in cases {
            let got = wait_for_queue(&row.found, row.now, row.queue.as_ref(), &policy);
            assert_eq!(got, row.next_look, "{}", row.says);
        }
    }

    /// Repeated looks at one operation under a queue that stays behind for a day: each look is a
    /// write, and there are about one an hour, not one every 5-minute tick (288).
    #[test]
    fn a_queue_behind_for_a_day_costs_a_waiting_operation_a_few_writes() {
        let policy = Policy::default();
        let behind = ChargeThroughput {
            in_flight: 40,
            per_second: 22.0,
        }
        .with_depth(QueueDepth {
            visible: 500,
            in_flight: 280,
        });
        let tick = 5 * MIN;
        let mut due = T0.plus(policy.pending_grace);
        let mut now = due;
        let mut looks = 0;
        while now < T0.plus(24 * HOUR) {
            if now >= due {
                looks += 1;
                due = wait_for_queue(&op(), now, Some(&behind), &policy).unwrap();
            }
            now = now.plus(tick);
        }
        assert!(looks <= 30, "{looks} writes in a day");
    }

    #[test]
    fn redrive_backoff_table() {
        let policy = Policy::default(); // base 1 min, max 1 h, search at window + 10 min
        let search_at = T0.plus(policy.key_window).plus(policy.search_min_age);
        let due_cases = [
            DueRow {
                says: "first re-enqueue: base",
                found: op(),
                now: T0.plus(5 * MIN),
                next_look: T0.plus(6 * MIN),
            },
            DueRow {
                says: "third re-enqueue: base * 4",
                found: Operation {
                    redrives: 2,
                    ..op()
                },
                now: T0.plus(5 * MIN),
                next_look: T0.plus(9 * MIN),
            },
            DueRow {
                says: "capped at the max",
                found: Operation {
                    redrives: 10,
                    ..op()
                },
                now: T0,
                next_look: T0.plus(HOUR),
            },
            DueRow {
                says: "huge count: capped, no overflow",
                found: Operation {
                    redrives: u32::MAX,
                    ..op()
                },
                now: T0,
                next_look: T0.plus(HOUR),
            },
            DueRow {
                says: "attempted: first re-drive",
                found: attempted(T0),
                now: T0.plus(HOUR),
                next_look: T0.plus(HOUR + MIN),
            },
            DueRow {
                says: "attempted: never past search",
                found: Operation {
                    redrives: 10,
                    ..attempted(T0)
                },
                now: search_at.minus(MIN),
                next_look: search_at,
            },
            DueRow {
                says: "attempted: at search, the back-off",
                found: Operation {
                    redrives: 10,
                    ..attempted(T0)
                },
                now: search_at,
                next_look: search_at.plus(HOUR),
            },
            // Never attempted: search is not what settles it, so no clamp.
            DueRow {
                says: "never attempted, near the window",
                found: Operation {
                    redrives: 10,
                    ..op()
                },
                now: search_at.minus(MIN),
                next_look: search_at.plus(HOUR - MIN),
            },
        ];
        for row in due_cases {
            let due = redrive_due_at(&row.found, row.now, &policy);
            assert_eq!(due, row.next_look, "{}", row.says);
        }
    }

    #[test]
    fn redrive_and_unknown_back_off_on_one_curve() {
        // The executor backs off by attempts (2^(attempts-1)), the reconciler by re-drives (2^n):
        // the same curve, one step apart.
        let policy = Policy::default();
        let now = T0.plus(HOUR);
        for n in 0..8u32 {
            let reconciler = Operation {
                redrives: n,
                ..attempted(T0)
            };
            let executor = Operation {
                attempts: n + 1,
                ..attempted(T0)
            };
            assert_eq!(
                redrive_due_at(&reconciler, now, &policy),
                crate::plan::unknown_due_at(&executor, now, &policy),
                "step {n}"
            );
        }
    }
}
