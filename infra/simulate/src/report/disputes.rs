//! Disputes (`--disputes`) judged against the disputes Stripe holds once the run converged.
//!
//! Invariants (each must stay 0):
//! - `unrecorded`: a dispute Stripe holds on one of our orders with no dispute record of ours;
//! - `mismatches`: a dispute record that disagrees with Stripe: another status, another amount,
//!   open while Stripe closed it (or settled while Stripe holds it open), or settled other than
//!   Stripe ended it (`lost` → `succeeded`, `won` and `warning_closed` → `failed`);
//! - `over_returned_at_stripe`: an order whose refunds at Stripe (`amount_refunded`) and the
//!   disputes it lost add up to more than it was charged;
//! - `over_returned_in_records`: an order whose charge record reserves more than it was charged,
//!   or whose refund records that are not `failed` and lost dispute records add up to more, or
//!   to more than the charge reserves (a lost dispute recorded reserved whose money the charge
//!   does not hold: the next refund the store accepts pays the customer twice);
//! - `unpaged_deadlines`: a dispute that reached its `due_by` needing a response with no page
//!   before it: the reconciler never read it inside its page window, or read it there only in
//!   ticks that counted fewer `DisputeDeadlineNear` pages than such reads; or with no page after
//!   it (`DisputeDeadlinePassed`) while Stripe kept it open past `due_by`, unanswered;
//! - `missing_events`: a dispute record with a step whose outcome event was never published:
//!   `DisputeOpened` (first written open), `DisputeFundsWithdrawn` (first written as an open
//!   inquiry, a chargeback at Stripe now), `DisputeLost`/`DisputeWon`/`DisputeClosed` (settled).
//!
//! Stripe-sim closes a dispute nobody answered 2 days after its `due_by`
//! (`stripe_sim::CLOSES_AFTER_DUE_MS`, as Stripe keeps it open until the network decides), so
//! the reconciler's read at `due_by` finds it still needing a response: `DisputeDeadlinePassed`
//! is judged like `DisputeDeadlineNear`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::section::{self, list, Invariant};

/// Disputes made and judged.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DisputeReport {
    /// `--disputes`: the share of orders the bank disputes.
    pub rate: f64,
    /// Disputes the bank opened, by what the seed planned for them.
    pub opened: u64,
    pub fates: BTreeMap<String, u64>,
    /// Orders planned a dispute that could not be (their charge never succeeded while the bank
    /// waited, or their refunds left nothing).
    pub not_disputable: u64,
    /// Disputes on orders refunded in part first (the disputed amount is what was left).
    pub on_partly_refunded: u64,
    /// How Stripe holds them at the end, by status.
    pub at_stripe: BTreeMap<String, u64>,
    /// Our records, by status (`succeeded`: lost; `failed`: won or an inquiry closed).
    pub records: BTreeMap<String, u64>,
    /// The person's answers sent, and those Stripe refused.
    pub answers: u64,
    pub answers_refused: u64,
    /// Refunds asked through the door while a dispute was open, refused `409 disputed`.
    pub refunds_refused_disputed: u64,
    /// The reconciler: open disputes read again at Stripe, reads that had to page, pages counted
    /// (`DisputeDeadlineNear`, `DisputeDeadlinePassed`).
    pub reconciler_reads: u64,
    /// Reads the `no-dispute-reread` mutation refused.
    pub reconciler_reads_refused: u64,
    /// The dispute watch's list and intent reads Stripe refused with 429, those it asked again
    /// within the tick after a backoff, and how far its cursor was behind the run's end after
    /// the last tick (s; the watch's `LAG`, 60 s, when level).
    pub watch_rate_limited: u64,
    pub watch_retried: u64,
    pub watch_lag_at_end_secs: u64,
    /// Ticks the run made at its end only because the watch was behind (at most 24).
    pub watch_catch_up_ticks: u64,
    pub had_to_page: u64,
    /// Reads past `due_by` of a dispute still needing a response (`DisputeDeadlinePassed` due).
    pub had_to_page_passed: u64,
    pub paged_near: u64,
    pub paged_passed: u64,
    /// Reads that had to page beyond the pages their tick counted (their disputes count as not
    /// paged by that read).
    pub pages_short: u64,
    /// Forged dispute events delivered (the `forged_event` fault: a status the dispute never
    /// takes); recorded as they say, they would show as `mismatches`.
    pub forged_events: u64,
    /// Disputes that reached `due_by` needing a response (their deadline had to page).
    pub reached_due_by: u64,
    /// Disputes recorded without their reservation (their amount did not fit the order's
    /// refunds: `dispute_unreserved` in `last_error`, counted `DisputeUnreserved`). Never in
    /// review: read again like the others, so their deadline is judged like the others'.
    pub unreserved: u64,
    /// Of those, first recorded inside their page window or later (every event of theirs until
    /// then lost): nothing of ours knew of them to page; the daily audit's `dispute_unrecorded`
    /// (AuditDisputeUnrecordedAlarm) is the page for them, and the run's audit comes after it.
    pub recorded_too_late: u64,
    // The invariants.
    pub unrecorded: u64,
    pub mismatches: u64,
    pub over_returned_at_stripe: u64,
    pub over_returned_in_records: u64,
    pub unpaged_deadlines: u64,
    pub missing_events: u64,
}

impl DisputeReport {
    /// The invariants, in the order the report lists them.
    fn invariants(&self) -> [Invariant; 6] {
        [
            (self.unrecorded, "disputes unrecorded"),
            (self.mismatches, "dispute mismatches"),
            (self.over_returned_at_stripe, "over-returned at stripe"),
            (self.over_returned_in_records, "over-returned in records"),
            (self.unpaged_deadlines, "unpaged deadlines"),
            (self.missing_events, "missing dispute events"),
        ]
    }

    pub fn holds(&self) -> bool {
        section::holds(&self.invariants())
    }

    /// The first invariant broken, by name, for the verdict.
    pub fn first_broken(&self) -> Option<&'static str> {
        section::first_broken(&self.invariants())
    }

    pub(super) fn render(&self, s: &mut String) {
        if self.rate <= 0.0 {
            let _ = writeln!(s, "  disputes        off (--disputes 0)");
            return;
        }
        let _ = writeln!(
            s,
            "  disputes        rate {}: {} opened ({}), {} not disputable, {} on partly refunded orders; at Stripe: {}; records: {}",
            self.rate,
            self.opened,
            list(&self.fates),
            self.not_disputable,
            self.on_partly_refunded,
            list(&self.at_stripe),
            list(&self.records),
        );
        let _ = writeln!(
            s,
            "  dispute steps   {} answers ({} refused by Stripe), {} refunds refused 409 disputed, {} forged events; reconciler reads {}, {} reached due_by ({} recorded too late: left to the audit), {} unreserved, {} reads had to page near and {} passed, pages near {} passed {} ({} short)",
            self.answers,
            self.answers_refused,
            self.refunds_refused_disputed,
            self.forged_events,
            self.reconciler_reads,
            self.reached_due_by,
            self.recorded_too_late,
            self.unreserved,
            self.had_to_page,
            self.had_to_page_passed,
            self.paged_near,
            self.paged_passed,
            self.pages_short,
        );
        let _ = writeln!(
            s,
            "  dispute watch   {} reads refused (429), {} asked again in the tick; {} s behind at the end ({} ticks at the end to catch up)",
            self.watch_rate_limited, self.watch_retried, self.watch_lag_at_end_secs, self.watch_catch_up_ticks,
        );
        section::render_invariants(s, "dispute invariants", &self.invariants());
    }
}
