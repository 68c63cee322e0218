//! The reconciler's decisions as pure functions of (record, now, policy): what to do with one due
//! operation, and when it is due after a re-drive; the rules: `tests/spec_reconcile_plan.rs`.

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
    // A dispute has no message and no key: nothing to put on the queue. It is read again at
    // Stripe (`dispute::plan`), never re-driven.
    if op.kind.dispute_id().is_some() {
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
    use crate::operation::OperationStatus;
    use crate::testing::{order, T0};

    const MIN: Duration = Duration::from_secs(60);
    const HOUR: Duration = Duration::from_secs(3600);

    fn op() -> Operation {
        order("order-plan").build()
    }

    fn attempted(first: Timestamp) -> Operation {
        Operation {
            status: OperationStatus::Unknown,
            attempts: 1,
            first_attempted_at: Some(first),
            ..op()
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
