//! The reconciler's decisions as pure functions of (record, now, policy): what to do with one due
//! operation, and when it is due again after a re-drive. No I/O, so every edge is a table test.

use crate::executor::plan::backoff_due_at;
use crate::executor::ChargePolicy;
use crate::operation::Operation;
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

pub fn plan(op: &Operation, now: Timestamp, policy: &ChargePolicy) -> Action {
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
pub fn redrive_due_at(op: &Operation, now: Timestamp, policy: &ChargePolicy) -> Timestamp {
    backoff_due_at(op, now, policy, op.redrives)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::operation::{Lease, LeaseToken, OperationStatus};
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

    #[test]
    fn plan_table() {
        let policy = ChargePolicy::default();
        let live = Lease {
            token: LeaseToken::new_random(),
            expires_at: T0.plus(HOUR),
        };
        let expired = Lease {
            token: LeaseToken::new_random(),
            expires_at: T0,
        };
        let window = policy.key_window;
        #[rustfmt::skip]
        let cases: Vec<(&str, Operation, Timestamp, Action)> = vec![
            ("never attempted", op(), T0.plus(10 * MIN), Action::Reenqueue),
            ("never attempted, lease live", Operation { lease: Some(live), ..op() }, T0.plus(MIN), Action::Skip),
            ("never attempted, lease expired", Operation { lease: Some(expired), ..op() }, T0.plus(MIN), Action::Reenqueue),
            ("unknown in the window", attempted(T0), T0.plus(HOUR), Action::Redrive),
            ("unknown a moment before the window ends", attempted(T0), T0.plus(window).minus(Duration::from_millis(1)), Action::Redrive),
            ("unknown as the window ends", attempted(T0), T0.plus(window), Action::Settle),
            ("unknown long past the window", attempted(T0), T0.plus(window).plus(48 * HOUR), Action::Settle),
            ("pending after retry-later", Operation { status: OperationStatus::Pending, ..attempted(T0) }, T0.plus(HOUR), Action::Redrive),
            ("unknown, leased", Operation { lease: Some(live), ..attempted(T0) }, T0.plus(MIN), Action::Skip),
            ("succeeded", Operation { status: OperationStatus::Succeeded, ..attempted(T0) }, T0.plus(window), Action::Skip),
            ("failed", Operation { status: OperationStatus::Failed, ..op() }, T0.plus(HOUR), Action::Skip),
        ];
        for (name, op, now, want) in cases {
            assert_eq!(plan(&op, now, &policy), want, "{name}");
        }
    }

    #[test]
    fn redrive_backoff_table() {
        let policy = ChargePolicy::default(); // base 1 min, max 1 h, search at window + 10 min
        let search_at = T0.plus(policy.key_window).plus(policy.search_min_age);
        #[rustfmt::skip]
        let cases: Vec<(&str, Operation, Timestamp, Timestamp)> = vec![
            ("first re-enqueue: base", op(), T0.plus(5 * MIN), T0.plus(6 * MIN)),
            ("third re-enqueue: base * 4", Operation { redrives: 2, ..op() }, T0.plus(5 * MIN), T0.plus(9 * MIN)),
            ("capped at the max", Operation { redrives: 10, ..op() }, T0, T0.plus(HOUR)),
            ("huge count: capped, no overflow", Operation { redrives: u32::MAX, ..op() }, T0, T0.plus(HOUR)),
            ("attempted: first re-drive", attempted(T0), T0.plus(HOUR), T0.plus(HOUR + MIN)),
            ("attempted: never past search", Operation { redrives: 10, ..attempted(T0) }, search_at.minus(MIN), search_at),
            ("attempted: at search, the back-off", Operation { redrives: 10, ..attempted(T0) }, search_at, search_at.plus(HOUR)),
            // Never attempted: search is not what settles it, so no clamp.
            ("never attempted, near the window", Operation { redrives: 10, ..op() }, search_at.minus(MIN), search_at.plus(HOUR - MIN)),
        ];
        for (name, op, now, want) in cases {
            assert_eq!(redrive_due_at(&op, now, &policy), want, "{name}");
        }
    }

    #[test]
    fn redrive_and_unknown_back_off_on_one_curve() {
        // The executor backs off by attempts (2^(attempts-1)), the reconciler by re-drives (2^n):
        // the same curve, one step apart.
        let policy = ChargePolicy::default();
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
                crate::executor::plan::unknown_due_at(&executor, now, &policy),
                "step {n}"
            );
        }
    }
}
