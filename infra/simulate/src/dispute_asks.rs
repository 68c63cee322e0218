//! Disputes mixed into the orders (`--disputes RATE`): a share of the succeeded orders is
//! disputed at Stripe by the customer's bank (stripe-sim's admin route, as
//! [`stripe_sim::StripeSim::dispute_charge`]), seeded per order so every run of a seed disputes
//! the same orders the same way.
//!
//! What becomes of a dispute ([`Fate`]), answered by the simulated person in Stripe's dashboard
//! (the API the dashboard uses: `POST /v1/disputes/{id}`, `POST /v1/disputes/{id}/close`), a few
//! groups after it opened, long before its `due_by`:
//! - `won`: winning evidence submitted (Stripe reviews it, then `won`: the funds reinstated);
//! - `lost`: losing evidence submitted (`lost` after the review);
//! - `accepted`: the merchant accepts it (close: `lost` at once);
//! - `unanswered`: nobody answers; Stripe closes it `lost` 2 days after `due_by` (its deadline
//!   must page before `due_by`, and again past it while it is open: `unpaged deadlines`);
//! - `inquiry`: an inquiry (`warning_needs_response`, no funds withdrawn), half of them closed by
//!   the merchant, the others left to `due_by` (`warning_closed` either way).
//!
//! Some disputed orders are also asked a refund through the real door while the dispute is
//! open: a chargeback's must be refused (409 `disputed`, or settled failed if Stripe refuses it
//! as `charge_disputed` before the dispute was recorded); an inquiry's goes through. An order
//! that was also asked refunds (`--refunds`) is disputed after them: the dispute takes what they
//! left (a dispute on a partly refunded order), none if they left nothing.

use std::sync::atomic::{AtomicU64, Ordering};

use rand::Rng;

use crate::asks::{picked, ByOrder};

/// The default share of the orders disputed: the tests' ([`TEST_RATE`]), so `simulate --seed N`
/// shows what becomes of disputes beside charges and refunds, and the pinned default run checks
/// them. 0.05 is about 50 to 90 disputes in the default 2,000 orders, enough for every fate, a
/// refund refused `409 disputed`, a dispute on a partly refunded order and deadlines paged near
/// and passed on each seed, for about 3% more decisions than without (seed 1: 59,026 -> 60,565);
/// far above a real merchant's rate (under 1%), so the run shows disputes, not a forecast.
/// `--disputes 0` is the run without them (its pin is kept too).
pub const DEFAULT_RATE: f64 = TEST_RATE;
/// The share the dispute tests and mutations run at.
pub const TEST_RATE: f64 = 0.05;
/// Groups after the checkout's at which the bank disputes the charge: after the refund waves
/// ([`crate::refund_asks::WAVE_DELAYS`]).
pub const DISPUTE_DELAY: u64 = 5;
/// How many groups in a row a dispute waits for its charge to succeed at Stripe before the
/// bank gives up (a charge that never succeeded cannot be disputed).
pub const ATTEMPTS: usize = 8;
/// Groups after the dispute at which the refund is asked and the person answers.
pub const REFUND_DELAY: u64 = 1;
pub const ANSWER_DELAY: u64 = 2;
/// The refund id of the refund asked while the dispute is open.
pub const REFUND_ID: &str = "during-dispute";

/// What becomes of a dispute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fate {
    Won,
    Lost,
    Accepted,
    Unanswered,
    /// An inquiry; `closed`: the merchant closes it (otherwise left to `due_by`).
    Inquiry {
        closed: bool,
    },
}

impl Fate {
    pub fn name(self) -> &'static str {
        match self {
            Fate::Won => "won",
            Fate::Lost => "lost",
            Fate::Accepted => "accepted",
            Fate::Unanswered => "unanswered",
            Fate::Inquiry { closed: true } => "inquiry closed",
            Fate::Inquiry { closed: false } => "inquiry unanswered",
        }
    }

    /// Nobody answers it: it reaches `due_by` needing a response.
    pub fn reaches_due_by(self) -> bool {
        matches!(self, Fate::Unanswered | Fate::Inquiry { closed: false })
    }

    pub fn inquiry(self) -> bool {
        matches!(self, Fate::Inquiry { .. })
    }

    /// The merchant's answer: the form of `POST /v1/disputes/{id}`, or `None` for a close.
    pub fn answer(self) -> Option<Option<Vec<(String, String)>>> {
        let evidence = |text: &str| {
            Some(Some(vec![(
                "evidence[uncategorized_text]".to_owned(),
                text.to_owned(),
            )]))
        };
        match self {
            Fate::Won => evidence(stripe_sim::WINNING_EVIDENCE),
            Fate::Lost => evidence(stripe_sim::LOSING_EVIDENCE),
            Fate::Accepted | Fate::Inquiry { closed: true } => Some(None),
            Fate::Unanswered | Fate::Inquiry { closed: false } => None,
        }
    }
}

/// What one disputed order is: its fate, and whether a refund is asked while it is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub fate: Fate,
    pub refund_during: bool,
}

/// The dispute of order `index` of `seed`, if it is one of the `rate` share disputed: fixed by
/// (seed, index), whatever the interleaving.
pub fn plan(seed: u64, index: u64, rate: f64) -> Option<Plan> {
    let mut rng = picked(seed, 0xd15b_07e5_0000_0001, index, rate)?;
    let fate = match rng.random_range(0..20u32) {
        0..=4 => Fate::Won,
        5..=8 => Fate::Lost,
        9..=11 => Fate::Accepted,
        12..=15 => Fate::Unanswered,
        k => Fate::Inquiry { closed: k % 2 == 0 },
    };
    Some(Plan {
        fate,
        refund_during: rng.random_bool(0.4),
    })
}

/// A dispute the bank opened on an order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    pub dispute_id: String,
    pub payment_intent: String,
    pub fate: Fate,
    /// A refund was asked through the door while it was open.
    pub refund_during: bool,
    /// The disputed amount, and what the order was charged (less: a partly refunded order).
    pub amount: i64,
    pub charged: i64,
}

/// The disputes made and what happened around them, for the judge.
#[derive(Debug, Default)]
pub struct Book {
    /// By order id.
    opened: ByOrder<Opened>,
    /// Orders planned a dispute whose charge never succeeded at Stripe while the bank waited, or
    /// whose refunds left nothing to dispute.
    pub not_disputable: AtomicU64,
    /// The person's answers sent, and those Stripe refused (the dispute no longer needed one).
    pub answers: AtomicU64,
    pub answers_refused: AtomicU64,
}

impl Book {
    pub fn note(&self, order_id: &str, opened: Opened) {
        self.opened.put(order_id, opened);
    }

    /// The dispute opened on `order_id`, if any.
    pub fn of(&self, order_id: &str) -> Option<Opened> {
        self.opened.of(order_id)
    }

    pub fn opened(&self) -> Vec<(String, Opened)> {
        self.opened.all()
    }

    pub fn count(&self, what: &AtomicU64) -> u64 {
        what.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan is the seed's, its share the rate, and every fate is drawn.
    #[test]
    fn plans_are_fixed_by_seed_and_index_and_draw_every_fate() {
        let plans = crate::asks::plans_fixed(4_000, 900..1_100, |i| plan(7, i, 0.25));
        let mut fates = std::collections::BTreeMap::new();
        for p in plans.iter().flatten() {
            *fates.entry(p.fate.name()).or_insert(0) += 1;
        }
        assert_eq!(fates.len(), 6, "{fates:?}");
        assert!(plans.iter().flatten().any(|p| p.refund_during));
        assert!(plan(7, 1, 0.0).is_none());
    }
}
