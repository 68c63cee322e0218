//! What happens to one charge-queue message: a pure function of (what the shell has learned of it,
//! its receive count) → its fate, so every edge is a row of one table, the rules in full:
//! `core/tests/spec_message_plan.rs`.
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
