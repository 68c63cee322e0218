//! What happens to one charge-queue message: a pure function of (what the shell has learned of it,
//! its receive count) → its fate, so every edge is a row of one table (`message_table` below).
//!
//! The rules, in the order the table states them:
//! - **Order within a group.** After a message of a FIFO group failed in this batch, the group's
//!   later messages fail unlooked-at, the same way (back soon if it comes back soon), so one order's
//!   messages never overtake each other.
//! - **Poison never blocks.** A message no retry can fix (an unreadable body, no such operation, a
//!   record this release cannot read) is copied to the dead-letter queue with its reason and
//!   acknowledged, so the rest of its group goes on. Only if that copy fails is it retried: never
//!   acknowledged without a copy.
//! - **Nothing happened: back in seconds.** A budget with no slot the invocation can wait for, a
//!   429, a key in use or a lease held elsewhere come back soon; other retries (the store
//!   unavailable, Stripe's auth refused) wait the queue's visibility timeout.
//! - **Refused at the last receive: left to the reconciler, not the DLQ.** Failing a message at its
//!   last receive parks it in the DLQ, which pages a person for a message nothing is wrong with. So
//!   at that receive a full budget does not refuse (the call goes out; Stripe's own 429 is the
//!   backstop), and a refusal the executor reports is acknowledged: the executor has just left the
//!   operation unsettled and due, and the reconciler re-drives it from the unknown index.
//! - **Everything else is acknowledged**: settled, recorded as unknown and scheduled (the unknown
//!   index drives its retries, not SQS), in review, or superseded by another writer.

use crate::outcome::RetryCause;
use crate::plan::Disposition;

/// What the shell knows of the message when it asks what to do with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// An earlier message of its group failed in this batch, coming back soon or not.
    BehindFailed { soon: bool },
    /// Its body is not a charge message this release reads (the reason, for the DLQ).
    Unreadable(&'static str),
    /// The Stripe budget has no slot the invocation can wait for; nothing is claimed yet.
    BudgetSaturated,
    /// The executor ran and says this.
    Executed(Disposition),
    /// The message names no operation the store holds.
    NoSuchOperation,
    /// The operation's record exists but this release cannot read it.
    UnreadableRecord,
    /// The store failed.
    StoreUnavailable,
    /// The message was poison, and its copy to the dead-letter queue failed.
    DeadLetterUnavailable,
}

/// Which receive of the message this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receive {
    /// SQS's `ApproximateReceiveCount` (1 when absent: never taken for the last).
    pub count: u32,
    /// The queue's `maxReceiveCount`: failing the message at this receive moves it to the DLQ.
    pub limit: u32,
}

impl Receive {
    pub fn is_last(&self) -> bool {
        self.count >= self.limit
    }
}

/// What the shell does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Go on: run the executor.
    Charge,
    /// Copy it to the dead-letter queue with this reason, then acknowledge it ([`Item::Poisoned`]);
    /// if the copy fails, ask again with [`Seen::DeadLetterUnavailable`].
    Park(&'static str),
    /// Done with it: report this.
    Done(Item),
}

/// What became of one message, as the batch reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// Done with it (settled, recorded as unknown and scheduled, in review, or superseded).
    Acknowledged,
    /// A message no retry can fix, copied to the DLQ with this reason and acknowledged.
    Poisoned(&'static str),
    /// A batch item failure: SQS delivers it again after its visibility timeout.
    Retry(&'static str),
    /// A batch item failure brought back in seconds: nothing happened, and trying again shortly
    /// can work (rate limit, key in use, lease held elsewhere).
    RetrySoon(&'static str),
    /// Refused as [`Item::RetrySoon`] at the queue's last receive: acknowledged, the operation
    /// (unsettled, due) left to the reconciler.
    LeftToReconciler(&'static str),
}

impl Item {
    /// Reported to SQS as a batch item failure.
    pub fn is_retry(&self) -> bool {
        matches!(self, Item::Retry(_) | Item::RetrySoon(_))
    }
}

/// The fate of a message (see the module's rules).
pub fn fate(seen: &Seen, receive: Receive) -> Fate {
    let done = Fate::Done;
    match seen {
        Seen::BehindFailed { soon: true } => {
            done(Item::RetrySoon("earlier message in group comes back soon"))
        }
        Seen::BehindFailed { soon: false } => done(Item::Retry("earlier message in group failed")),
        Seen::Unreadable(reason) => Fate::Park(reason),
        Seen::NoSuchOperation => Fate::Park("no_such_operation"),
        Seen::UnreadableRecord => Fate::Park("unreadable_record"),
        Seen::DeadLetterUnavailable => done(Item::Retry("dead-letter queue unavailable")),
        Seen::StoreUnavailable => done(Item::Retry("store unavailable")),
        Seen::BudgetSaturated if receive.is_last() => Fate::Charge,
        Seen::BudgetSaturated => done(Item::RetrySoon("stripe budget saturated")),
        Seen::Executed(disposition) => done(after_execution(disposition, receive)),
    }
}

/// What the executor's answer means for the message.
fn after_execution(disposition: &Disposition, receive: Receive) -> Item {
    let soon = match disposition {
        Disposition::RetryLater(RetryCause::RateLimited) => "rate limited",
        Disposition::RetryLater(RetryCause::KeyInUse) => "idempotency key in use",
        Disposition::Busy => "leased elsewhere",
        Disposition::RetryLater(_) => return Item::Retry("retry later"),
        _ => return Item::Acknowledged,
    };
    if receive.is_last() {
        Item::LeftToReconciler(soon)
    } else {
        Item::RetrySoon(soon)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One line of the specification.
    struct Row {
        /// What the line says.
        says: &'static str,
        seen: Seen,
        /// The message's receive count, of a limit of 5.
        receive: u32,
        then: Fate,
    }

    const LIMIT: u32 = 5;

    #[test]
    fn message_table() {
        use Fate::{Charge, Done, Park};
        let ran = Seen::Executed;
        let rows = [
            Row {
                says: "behind a failed message of its group, it fails too, unlooked-at",
                seen: Seen::BehindFailed { soon: false },
                receive: 1,
                then: Done(Item::Retry("earlier message in group failed")),
            },
            Row {
                says: "behind one that comes back soon, it comes back soon with it",
                seen: Seen::BehindFailed { soon: true },
                receive: 1,
                then: Done(Item::RetrySoon("earlier message in group comes back soon")),
            },
            Row {
                says: "an unreadable body is parked with its reason, even at the last receive",
                seen: Seen::Unreadable("unknown_version"),
                receive: LIMIT,
                then: Park("unknown_version"),
            },
            Row {
                says: "a message naming no operation is parked",
                seen: Seen::NoSuchOperation,
                receive: 1,
                then: Park("no_such_operation"),
            },
            Row {
                says: "a record this release cannot read is parked (the index still drives it)",
                seen: Seen::UnreadableRecord,
                receive: 1,
                then: Park("unreadable_record"),
            },
            Row {
                says: "poison whose copy to the DLQ failed is retried: never dropped uncopied",
                seen: Seen::DeadLetterUnavailable,
                receive: 1,
                then: Done(Item::Retry("dead-letter queue unavailable")),
            },
            Row {
                says: "the store unavailable: retried after the visibility timeout",
                seen: Seen::StoreUnavailable,
                receive: 1,
                then: Done(Item::Retry("store unavailable")),
            },
            Row {
                says: "no budget slot: back in seconds, nothing claimed",
                seen: Seen::BudgetSaturated,
                receive: LIMIT - 1,
                then: Done(Item::RetrySoon("stripe budget saturated")),
            },
            Row {
                says: "no budget slot at the last receive: the call goes out anyway",
                seen: Seen::BudgetSaturated,
                receive: LIMIT,
                then: Charge,
            },
            Row {
                says: "Stripe's 429: back in seconds",
                seen: ran(Disposition::RetryLater(RetryCause::RateLimited)),
                receive: 1,
                then: Done(Item::RetrySoon("rate limited")),
            },
            Row {
                says: "a key in use (409): back in seconds",
                seen: ran(Disposition::RetryLater(RetryCause::KeyInUse)),
                receive: 1,
                then: Done(Item::RetrySoon("idempotency key in use")),
            },
            Row {
                says: "a lease held elsewhere: back in seconds",
                seen: ran(Disposition::Busy),
                receive: 1,
                then: Done(Item::RetrySoon("leased elsewhere")),
            },
            Row {
                says: "a 429 at the last receive: acknowledged, left to the reconciler",
                seen: ran(Disposition::RetryLater(RetryCause::RateLimited)),
                receive: LIMIT,
                then: Done(Item::LeftToReconciler("rate limited")),
            },
            Row {
                says: "a key in use at the last receive: left to the reconciler",
                seen: ran(Disposition::RetryLater(RetryCause::KeyInUse)),
                receive: LIMIT + 2,
                then: Done(Item::LeftToReconciler("idempotency key in use")),
            },
            Row {
                says: "a lease elsewhere at the last receive: left to the reconciler",
                seen: ran(Disposition::Busy),
                receive: LIMIT,
                then: Done(Item::LeftToReconciler("leased elsewhere")),
            },
            Row {
                says: "our key refused (configuration): retried after the visibility timeout",
                seen: ran(Disposition::RetryLater(RetryCause::Configuration)),
                receive: 1,
                then: Done(Item::Retry("retry later")),
            },
            Row {
                says: "settled now: acknowledged",
                seen: ran(Disposition::Settled),
                receive: 1,
                then: Done(Item::Acknowledged),
            },
            Row {
                says: "settled before it came: acknowledged",
                seen: ran(Disposition::AlreadySettled),
                receive: LIMIT,
                then: Done(Item::Acknowledged),
            },
            Row {
                says: "recorded unknown and scheduled: acknowledged, the index drives it",
                seen: ran(Disposition::Scheduled),
                receive: 1,
                then: Done(Item::Acknowledged),
            },
            Row {
                says: "in review: acknowledged, a person settles it",
                seen: ran(Disposition::InReview("rejected: ...".into())),
                receive: 1,
                then: Done(Item::Acknowledged),
            },
            Row {
                says: "superseded by another writer: acknowledged, theirs stands",
                seen: ran(Disposition::Superseded),
                receive: 1,
                then: Done(Item::Acknowledged),
            },
        ];
        for row in rows {
            let receive = Receive {
                count: row.receive,
                limit: LIMIT,
            };
            assert_eq!(fate(&row.seen, receive), row.then, "{}", row.says);
        }
    }
}
