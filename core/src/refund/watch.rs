//! The refund watch: a refund Stripe reports `succeeded` can still fail days later (the
//! customer's bank or card issuer returns it: a closed, lost or expired card), and Stripe then
//! reports it `failed` and puts the money back in the merchant's balance. Without an events
//! source nothing would ever tell us, so every succeeded refund is read again at Stripe, by id,
//! every [`RefundWatch::every`] through [`RefundWatch::window`] after it settled (the reconciler's
//! tick; `RefundWatchDays`, `RefundWatchEveryHours`).
//!
//! Which refunds a tick reads: the tick covers a span of settle-time offsets, `[from, to)`, kept
//! by a cursor the tick advances; for each `k` with `k * every <= window` it reads the refunds
//! that settled in `[from - k * every, to - k * every)` ([`RefundWatch::slots`]). Consecutive
//! ticks' spans tile time, so each refund is read once per `k`: at `every`, `2 * every`, … after
//! it settled, whichever tick reaches that moment, and never again after the window.
//!
//! What one read means is decided by the refund event rule itself
//! ([`crate::refund::event_plan::decide`], as if Stripe's answer were the event): a refund
//! Stripe still holds `succeeded` is left alone; one it holds `failed` takes the same write as
//! the events function's ([`crate::refund::event_plan::fail_later`]: `failed`, its reservation
//! given back, `RefundFailed` with `failed_after_success` published); any other disagreement
//! changes nothing and pages.

use std::time::Duration;

use crate::domain::{OperationKind, StripeRefundId};
use crate::operation::{Operation, OperationStatus};
use crate::refund::event_plan::{decide, EventRefund, RefundEventAction};
use crate::refund::StripeRefund;
use crate::time::Timestamp;

/// How long and how often a succeeded refund is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefundWatch {
    /// How long after it settled a succeeded refund is still read (`RefundWatchDays`). Zero:
    /// never (the audit's re-read is then the only net on a stack without events).
    pub window: Duration,
    /// How long between two reads of one refund (`RefundWatchEveryHours`); never zero.
    pub every: Duration,
}

impl RefundWatch {
    /// Stripe documents no bound on when a refund can fail after it succeeded; a card refund
    /// reaches the customer in 5-10 business days (docs.stripe.com/refunds), and a bank returns
    /// one it cannot deliver after that. Thirty days is twice the longest of those, read daily:
    /// see docs/deploy.md.
    pub const DEFAULT: RefundWatch = RefundWatch {
        window: Duration::from_secs(30 * 86_400),
        every: Duration::from_secs(86_400),
    };

    /// The offsets after settling at which a refund is read: `every`, `2 * every`, … up to
    /// `window`. None when the window is shorter than one interval.
    pub fn offsets(&self) -> impl Iterator<Item = Duration> + '_ {
        let every = self.every.max(Duration::from_secs(1));
        (1u32..)
            .map(move |k| every * k)
            .take_while(move |d| *d <= self.window)
    }

    /// The settle-time ranges a tick covering `[from, to)` reads, one per offset, nearest first.
    pub fn slots(&self, from: Timestamp, to: Timestamp) -> Vec<(Timestamp, Timestamp)> {
        if to <= from {
            return Vec::new();
        }
        self.offsets()
            .map(|d| (from.minus(d), to.minus(d)))
            .collect()
    }

    /// How many times one refund is read over the window.
    pub fn reads_per_refund(&self) -> usize {
        self.offsets().count()
    }
}

/// The Stripe refund a settled record asks to be read again: a refund recorded `succeeded`
/// with its id. A `failed` refund is final; a record without an id has nothing to read.
pub fn watched(op: &Operation) -> Option<&StripeRefundId> {
    if !matches!(op.kind, OperationKind::Refund(_)) || op.status != OperationStatus::Succeeded {
        return None;
    }
    op.stripe_refund_id()
}

/// What Stripe's answer to a watch read means for `op`: the refund event rule on Stripe's
/// answer, as if an event had named the refund in the state Stripe holds (so the rule's event
/// checks hold trivially and only Stripe's word decides). `Ignore(AlreadySettled)` for a refund
/// still succeeded; `FailLater` for one Stripe says failed; `PageSettled` or `Mismatch` for a
/// contradiction (nothing written, paged).
pub fn after_read(op: &Operation, stripe: &StripeRefund, now: Timestamp) -> RefundEventAction {
    let as_event = EventRefund {
        id: stripe.id.clone(),
        status: stripe.status.clone(),
        order_id: None,
        operation_id: None,
    };
    decide(op, &as_event, stripe, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn a_refund_is_read_every_interval_through_the_window_and_never_after() {
        let watch = RefundWatch {
            window: 3 * DAY,
            every: DAY,
        };
        assert_eq!(watch.offsets().collect::<Vec<_>>(), [DAY, 2 * DAY, 3 * DAY]);
        assert_eq!(RefundWatch::DEFAULT.reads_per_refund(), 30);
        let none = RefundWatch {
            window: Duration::ZERO,
            every: DAY,
        };
        assert_eq!(none.reads_per_refund(), 0, "a zero window reads nothing");
    }

    #[test]
    fn consecutive_spans_read_each_refund_once_per_offset() {
        let watch = RefundWatch {
            window: 2 * DAY,
            every: DAY,
        };
        let t = |ms: i64| Timestamp::from_millis(ms);
        let day = DAY.as_millis() as i64;
        let settled = t(10 * day + 5);
        // Ticks every 7 ms from day 10 to day 13: every tick's slots, gathered.
        let mut hits = 0;
        let mut from = t(10 * day);
        while from < t(13 * day) {
            let to = from.plus(Duration::from_millis(7 * 3_600_000));
            for (a, b) in watch.slots(from, to) {
                if a <= settled && settled < b {
                    hits += 1;
                }
            }
            from = to;
        }
        assert_eq!(hits, 2, "once a day after settling, for two days");
        assert!(
            watch.slots(t(5), t(5)).is_empty(),
            "an empty span reads nothing"
        );
    }
}
