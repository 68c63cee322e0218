//! The evidence deadline: when a person is paged about an open dispute, and when its record is
//! read again at Stripe.
//!
//! A dispute that needs a response (`needs_response`, or an inquiry's `warning_needs_response`)
//! is lost if no evidence is **submitted** before `evidence_details.due_by`. Submitting moves it
//! to `under_review` (`warning_under_review`), so "still needs a response" is "nothing was
//! submitted". Evidence saved as a draft (`has_evidence` is Stripe's "evidence has been staged")
//! is not submitted: it still pages, and the page says a draft waits to be submitted.
//!
//! The rules, in order ([`deadline`]):
//! 1. Closed (`won`, `lost`, `warning_closed`): no page, never due again (the record settles).
//! 2. Needs a response with `due_by` passed: **`Passed`**, read again after the daily recheck.
//! 3. Needs a response with `due_by` less than the page window away: **`Near`**, read again at
//!    `due_by` (to page `Passed` the moment it passes) or at the daily recheck, whichever is first.
//! 4. Needs a response with `due_by` further away: no page, read again when the window opens
//!    (`due_by − window`) or at the daily recheck, whichever is first.
//! 5. Anything else open (under review, no `due_by`: the bank allows no response): no page, read
//!    again at the daily recheck.
//!
//! The page is counted each time the reconciler reads the dispute again (`DisputeDeadlineNear`,
//! `DisputeDeadlinePassed`), so it repeats daily until the dispute is answered or closed. The
//! rules' table: `core/tests/spec_dispute_deadline.rs`.

use std::time::Duration;

use crate::dispute::{DisputeStatus, StripeDispute};
use crate::time::Timestamp;

/// How often an open dispute is read again at Stripe when nothing sooner is due: daily, so a
/// stack without an events source still learns a dispute's outcome within a day.
pub const RECHECK: Duration = Duration::from_secs(24 * 3600);

/// How long before `due_by` a dispute that needs a response pages (`DisputeDeadlinePageHours`,
/// 72 by default): Stripe gives days to weeks to respond (7 to 21 days depending on the card
/// network), and assembling evidence takes a person a working day or two.
pub const DEFAULT_PAGE_WINDOW: Duration = Duration::from_secs(72 * 3600);

/// What the rule reads of a dispute: its status, its deadline, whether a draft is saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadlineFacts {
    pub status: DisputeStatus,
    /// `evidence_details.due_by`; `None` (or Stripe's `0`) when the bank allows no response.
    pub due_by: Option<Timestamp>,
    /// `evidence_details.has_evidence`: evidence is saved (staged), not necessarily submitted.
    pub has_evidence: bool,
}

impl DeadlineFacts {
    /// What the rule reads of a dispute Stripe holds.
    pub fn of(dispute: &StripeDispute) -> Self {
        Self {
            status: dispute.status.clone(),
            due_by: dispute.due_by,
            has_evidence: dispute.has_evidence,
        }
    }
}

/// Why a person is paged about a dispute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlinePage {
    /// Needs a response and `due_by` is less than the window away (`DisputeDeadlineNear`).
    /// `draft_saved`: evidence is saved in Stripe but not submitted.
    Near { draft_saved: bool },
    /// Needs a response and `due_by` has passed (`DisputeDeadlinePassed`): Stripe will close it
    /// lost, if it has not already.
    Passed,
}

impl DeadlinePage {
    /// The metric this page is counted in.
    pub fn metric(self) -> &'static str {
        match self {
            Self::Near { .. } => "DisputeDeadlineNear",
            Self::Passed => "DisputeDeadlinePassed",
        }
    }
}

/// What the rule says of a dispute at `now`: the page, if any, and when its record is due again
/// (`None`: closed, never).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    pub page: Option<DeadlinePage>,
    pub due_again: Option<Timestamp>,
}

/// The rules of the module doc, in order.
pub fn deadline(facts: &DeadlineFacts, now: Timestamp, window: Duration) -> Deadline {
    if facts.status.is_closed() {
        return Deadline {
            page: None,
            due_again: None,
        };
    }
    let recheck = now.plus(RECHECK);
    // Stripe sends 0 for "no response allowed"; a deadline at the epoch is that, not a deadline
    // long passed.
    let due_by = facts.due_by.filter(|t| t.as_millis() > 0);
    let (page, due_again) = match due_by {
        Some(due_by) if facts.status.needs_response() => {
            let opens = due_by.minus(window);
            if now >= due_by {
                (Some(DeadlinePage::Passed), recheck)
            } else if now >= opens {
                let near = DeadlinePage::Near {
                    draft_saved: facts.has_evidence,
                };
                (Some(near), due_by.min(recheck))
            } else {
                (None, opens.min(recheck))
            }
        }
        _ => (None, recheck),
    };
    Deadline {
        page,
        due_again: Some(due_again),
    }
}

/// Hours from `now` to the nearest of `due_bys` of disputes that still need a response, negative
/// once passed (the `DisputeNearestDeadlineHours` gauge); `None` when none has a deadline.
pub fn nearest_deadline_hours(
    due_bys: impl IntoIterator<Item = Timestamp>,
    now: Timestamp,
) -> Option<f64> {
    due_bys
        .into_iter()
        .filter(|t| t.as_millis() > 0)
        .min()
        .map(|t| (t.as_millis() - now.as_millis()) as f64 / 3_600_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn the_nearest_deadline_is_in_hours_and_negative_once_passed() {
        let now = Timestamp::from_millis(1_800_000_000_000);
        let due = [now.plus(10 * HOUR), now.plus(3 * HOUR)];
        assert_eq!(nearest_deadline_hours(due, now), Some(3.0));
        assert_eq!(nearest_deadline_hours([now.minus(HOUR)], now), Some(-1.0));
        assert_eq!(nearest_deadline_hours([], now), None);
        assert_eq!(
            nearest_deadline_hours([Timestamp::from_millis(0)], now),
            None,
            "Stripe's 0 is no deadline"
        );
    }
}
