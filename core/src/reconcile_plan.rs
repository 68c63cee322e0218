//! The reconciler's decisions as pure functions of (record, now, policy): what to do with one due
//! operation, and when it is due again after a re-drive. No I/O, so every edge is a table test.

use crate::charge_plan::{backoff_due_at, ChargePolicy};
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

    #[test]
    fn redrive_backoff_table() {
        let policy = ChargePolicy::default(); // base 1 min, max 1 h, search at window + 10 min
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
                crate::charge_plan::unknown_due_at(&executor, now, &policy),
                "step {n}"
            );
        }
    }
}
