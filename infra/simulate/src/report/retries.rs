//! Declined orders charged again (`--retries`), judged against Stripe's PaymentIntents of each
//! retried order (by `metadata[order_id]`) and the order's attempt records once the run settled.
//!
//! Invariants (each must stay 0):
//! - `paid_twice`: an order with more than one succeeded PaymentIntent at Stripe, or more than
//!   one succeeded attempt in our records;
//! - `attempt_while_unsettled`: an attempt record created while the order's attempt before it
//!   was not final `failed` (that attempt not `failed` now, or settled after the later one was
//!   created);
//! - `declined_not_canceled`: a `failed` attempt whose PaymentIntent Stripe does not hold
//!   `canceled` (the customer could still pay it);
//! - `two_attempts_at_once`: two retries of one order sent at the same instant both answered
//!   202 with a new attempt (the order service told of two attempts where the order has room
//!   for one: the later write replaced the earlier, or both are live).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::section::{self, list, Invariant};

/// Retries asked and judged.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RetryReport {
    /// `--retries`: the share of declined orders charged again.
    pub rate: f64,
    /// Orders charged again, by how ([`crate::retry_asks::Kind`]).
    pub planned: BTreeMap<String, u64>,
    /// The door's answers to the retries, by status and code.
    pub answers: BTreeMap<String, u64>,
    /// Attempts the door started (202).
    pub started: u64,
    /// Two retries at once: steps in which exactly one started an attempt.
    pub races_one_started: u64,
    /// Steps asked again because the order's latest attempt was still unsettled, and those given
    /// up after [`crate::retry_asks::PATIENCE`] tries.
    pub asked_again: u64,
    pub gave_up: u64,
    /// The retried orders' attempt records, by how many an order has, and by status.
    pub orders_by_attempts: BTreeMap<u32, u64>,
    pub attempts_by_status: BTreeMap<String, u64>,
    /// Retried orders paid in the end (by a later attempt).
    pub paid_by_a_later_attempt: u64,
    /// Orders with more than one attempt that no retry was planned for (a declined checkout sent
    /// again identical, by a late duplicate delivery, starts the next attempt): not judged here.
    pub charged_again_unplanned: u64,
    /// Their PaymentIntents at Stripe, by status.
    pub intents_at_stripe: BTreeMap<String, u64>,
    // The invariants.
    pub paid_twice: u64,
    pub attempt_while_unsettled: u64,
    pub declined_not_canceled: u64,
    pub two_attempts_at_once: u64,
}

impl RetryReport {
    /// The invariants, in the order the report lists them.
    fn invariants(&self) -> [Invariant; 4] {
        [
            (self.paid_twice, "paid twice"),
            (
                self.attempt_while_unsettled,
                "attempt while another unsettled",
            ),
            (self.declined_not_canceled, "declined intent not canceled"),
            (self.two_attempts_at_once, "two attempts at once"),
        ]
    }

    pub fn holds(&self) -> bool {
        section::holds(&self.invariants())
    }

    /// The first invariant broken, by name, for the verdict.
    pub fn first_broken(&self) -> Option<&'static str> {
        section::first_broken(&self.invariants())
    }

    /// The door's answers of one status and code (`"409 attempt_in_flight"`).
    pub fn answered(&self, what: &str) -> u64 {
        self.answers.get(what).copied().unwrap_or(0)
    }

    pub(super) fn render(&self, s: &mut String) {
        if self.rate <= 0.0 {
            let _ = writeln!(
                s,
                "  retries         off (--retries 0); {} orders charged again unplanned (a declined checkout sent again)",
                self.charged_again_unplanned
            );
            return;
        }
        let by_attempts = self
            .orders_by_attempts
            .iter()
            .map(|(k, n)| format!("{k}: {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            s,
            "  retries         rate {}: {} declined orders charged again ({}); door: {}",
            self.rate,
            self.planned.values().sum::<u64>(),
            list(&self.planned),
            list(&self.answers),
        );
        let _ = writeln!(
            s,
            "  retry steps     {} attempts started, {} races with one attempt, {} steps asked again (latest unsettled), {} given up; orders by attempts {}; attempts: {}; {} paid by a later attempt; intents at Stripe: {}; {} orders charged again unplanned",
            self.started,
            self.races_one_started,
            self.asked_again,
            self.gave_up,
            by_attempts,
            list(&self.attempts_by_status),
            self.paid_by_a_later_attempt,
            list(&self.intents_at_stripe),
            self.charged_again_unplanned,
        );
        section::render_invariants(s, "retry invariants", &self.invariants());
    }
}
