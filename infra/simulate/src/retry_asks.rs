//! Declined orders charged again (`--retries RATE`): a share of the orders whose card was
//! declined are asked again by the order service through the checkout door (the first
//! checkout's path, `POST /orders/{order_id}/charge`, the same caller), with another card, as a
//! shop asks its customer after a decline. Seeded per order, so every run of a seed asks the same
//! orders the same way.
//!
//! What a retried order is asked ([`Kind`]):
//! - `another_card`: one retry with a card that works;
//! - `declined_again`: a retry with a card Stripe declines too, then one with a card that works;
//! - `same_card`: the declined card again (the customer topped up; Stripe declines it again);
//! - `race`: two retries with different cards at the same simulated instant (the scheduler
//!   interleaves them): one attempt, the other refused `attempt_in_flight` (or answered with the
//!   winner when it is the same request);
//! - `while_unknown`: a retry right after the checkout, while the first attempt is still
//!   unsettled (the door must refuse 409 `attempt_in_flight`), then the retry once it failed;
//! - `past_limit`: declined again and again up to the attempt limit, then once more (refused
//!   409 `too_many_attempts`).
//!
//! Half the orders that end paid are asked once more with yet another card (refused 409 `paid`).
//! A step refused `attempt_in_flight` because the latest attempt is still unsettled (a fault held
//! it) is asked again a group later, up to [`PATIENCE`] times.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use aws_lambda_events::apigw::ApiGatewayV2httpResponse;
use rand::Rng;

use crate::asks::{picked, ByOrder, DoorAnswer, Tally};
use crate::lock;

/// The default share of the declined orders charged again, so `simulate --seed N` shows the
/// dunning beside charges, refunds and disputes, and the pinned default run checks it: 0.3 is
/// 21 to 27 orders charged again and 22 to 30 attempts started in the default 2,000 orders
/// (seeds 1 to 3; seed 1: every kind planned, every refusal answered), for about the same
/// number of decisions (seed 1: 60,592 -> 60,421, the interleavings shift). `--retries 0` is
/// the run without them (its pin is kept too).
pub const DEFAULT_RATE: f64 = 0.3;
/// The share the retry tests and mutations run at.
pub const TEST_RATE: f64 = 0.6;
/// The attempt limit the simulated checkout runs with (the template's `MaxChargeAttempts`
/// default).
pub const LIMIT: u32 = 5;
/// Groups after the checkout's at which the first retry is asked (the declined attempt has most
/// likely settled `failed` by then), and between steps.
pub const FIRST_DELAY: u64 = 1;
pub const STEP_DELAY: u64 = 1;
/// How many times a step refused because the latest attempt is still unsettled is asked again.
pub const PATIENCE: usize = 12;

/// A card Stripe charges, and two it declines (Stripe's test payment methods).
pub const WORKS: &str = "pm_card_mastercard";
pub const WORKS_TOO: &str = "pm_card_visa";
pub const DECLINES: &str = "pm_card_chargeDeclinedInsufficientFunds";
/// The card asked once more after the order is paid (refused `paid`).
pub const AFTER_PAID: &str = "pm_card_amex";
/// The card the simulation's declined orders pay with first.
pub const DECLINED_FIRST: &str = "pm_card_chargeDeclined";

/// How a declined order is charged again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    AnotherCard,
    DeclinedAgain,
    SameCard,
    Race,
    WhileUnknown,
    PastLimit,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::AnotherCard,
        Kind::DeclinedAgain,
        Kind::SameCard,
        Kind::Race,
        Kind::WhileUnknown,
        Kind::PastLimit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::AnotherCard => "another_card",
            Kind::DeclinedAgain => "declined_again",
            Kind::SameCard => "same_card",
            Kind::Race => "race",
            Kind::WhileUnknown => "while_unknown",
            Kind::PastLimit => "past_limit",
        }
    }
}

/// What one declined order is asked: at checkout (while its first attempt is unsettled), then
/// steps a group apart, each one card or two at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub kind: Kind,
    pub at_checkout: Option<&'static str>,
    pub steps: Vec<Vec<&'static str>>,
    /// Once paid, asked once more with another card (refused `paid`): the last step
    /// ([`AFTER_PAID`]).
    pub after_paid: bool,
}

/// The retries of order `index` of `seed` whose first card was declined, if it is one of the
/// `rate` share charged again: fixed by (seed, index), whatever the interleaving.
pub fn plan(seed: u64, index: u64, rate: f64) -> Option<Plan> {
    let mut rng = picked(seed, 0xa77e_3b70_0000_0001, index, rate)?;
    let kind = match rng.random_range(0..20u32) {
        0..=5 => Kind::AnotherCard,
        6..=8 => Kind::DeclinedAgain,
        9..=10 => Kind::SameCard,
        11..=14 => Kind::Race,
        15..=17 => Kind::WhileUnknown,
        _ => Kind::PastLimit,
    };
    let one = |card| vec![card];
    let (at_checkout, steps) = match kind {
        Kind::AnotherCard => (None, vec![one(WORKS)]),
        Kind::DeclinedAgain => (None, vec![one(DECLINES), one(WORKS)]),
        Kind::SameCard => (None, vec![one(DECLINED_FIRST)]),
        Kind::Race => {
            let pair = if rng.random_bool(0.5) {
                vec![WORKS, WORKS_TOO]
            } else {
                vec![DECLINES, WORKS]
            };
            (None, vec![pair])
        }
        Kind::WhileUnknown => (Some(WORKS), vec![one(WORKS)]),
        Kind::PastLimit => {
            // Attempts 2 to LIMIT declined, then one more with a card that works.
            let mut steps: Vec<Vec<&'static str>> = (2..=LIMIT).map(|_| one(DECLINES)).collect();
            steps.push(one(WORKS));
            (None, steps)
        }
    };
    let mut plan = Plan {
        kind,
        at_checkout,
        steps,
        after_paid: rng.random_bool(0.5),
    };
    if plan.after_paid && kind != Kind::PastLimit && kind != Kind::SameCard {
        plan.steps.push(vec![AFTER_PAID]);
    }
    Some(plan)
}

/// What the door answered a retry, as the next step reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// 202 with `attempt`: a new attempt.
    Started(u32),
    /// 200: the latest attempt returned (a replay, or the winner of a race with this request).
    Returned,
    /// 409 `attempt_in_flight`: the latest attempt is still unsettled.
    InFlight,
    /// 409 `paid`: the order is paid.
    Paid,
    /// 409 `too_many_attempts`.
    TooMany,
    /// 503: sent again once.
    Unavailable,
    /// Anything else (409 `conflict`, `canceled`, 4xx).
    Other,
}

/// The door's answers to the retries, counted, for the report.
#[derive(Debug, Default)]
pub struct Book {
    by_answer: Tally,
    /// Orders planned a retry, by kind, and those whose plan the door let run to its end.
    pub planned: Mutex<BTreeMap<&'static str, u64>>,
    /// New attempts the door started (202), and the retried orders asked.
    pub started: AtomicU64,
    /// Steps of two retries at once in which exactly one started an attempt.
    pub races_one_started: AtomicU64,
    /// Steps of two retries at once in which both started one (must stay 0), and the first
    /// such order.
    pub races_both_started: AtomicU64,
    first_race_both_started: Mutex<Option<String>>,
    /// Steps asked again because the latest attempt was still unsettled.
    pub asked_again: AtomicU64,
    /// Steps given up past [`PATIENCE`].
    pub gave_up: AtomicU64,
    /// Retried orders by order id, with their plan.
    orders: ByOrder<Kind>,
}

impl Book {
    pub fn plan(&self, order_id: &str, kind: Kind) {
        self.orders.put(order_id, kind);
        *lock(&self.planned).entry(kind.name()).or_default() += 1;
    }

    /// How `order_id` is charged again, if it is.
    pub fn kind_of(&self, order_id: &str) -> Option<Kind> {
        self.orders.of(order_id)
    }

    /// The retried orders, with their kind.
    pub fn orders(&self) -> Vec<(String, Kind)> {
        self.orders.all()
    }

    /// Counts the door's `response` to a retry, and reads it.
    pub fn note(&self, response: &ApiGatewayV2httpResponse) -> Answer {
        let answer = DoorAnswer::read(response);
        self.by_answer.add(answer.name());
        match (answer.status, answer.code.as_str()) {
            (202, _) => {
                self.started.fetch_add(1, Ordering::Relaxed);
                Answer::Started(answer.body["attempt"].as_u64().unwrap_or(0) as u32)
            }
            (200, _) => Answer::Returned,
            (409, "attempt_in_flight") => Answer::InFlight,
            (409, "paid") => Answer::Paid,
            (409, "too_many_attempts") => Answer::TooMany,
            (503, _) => Answer::Unavailable,
            _ => Answer::Other,
        }
    }

    /// Two retries of `order_id` at once both started an attempt.
    pub fn both_started(&self, order_id: &str) {
        self.races_both_started.fetch_add(1, Ordering::Relaxed);
        lock(&self.first_race_both_started).get_or_insert_with(|| order_id.to_owned());
    }

    pub fn first_race_both_started(&self) -> Option<String> {
        lock(&self.first_race_both_started).clone()
    }

    /// The answers by status and code.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.by_answer.counts()
    }

    pub fn count(&self, what: &AtomicU64) -> u64 {
        what.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan is the seed's, its share the rate, and every kind is drawn.
    #[test]
    fn plans_are_fixed_by_seed_and_index_and_draw_every_kind() {
        let plans = crate::asks::plans_fixed(4_000, 900..1_100, |i| plan(7, i, 0.25));
        let mut kinds = BTreeMap::new();
        for p in plans.iter().flatten() {
            *kinds.entry(p.kind).or_insert(0) += 1;
        }
        assert_eq!(kinds.len(), Kind::ALL.len(), "{kinds:?}");
        for p in plans.iter().flatten() {
            match p.kind {
                // One step past the limit: attempts 2..=LIMIT, then one refused.
                Kind::PastLimit => assert_eq!(p.steps.len(), LIMIT as usize),
                Kind::Race => assert_eq!(p.steps[0].len(), 2),
                Kind::WhileUnknown => assert!(p.at_checkout.is_some()),
                _ => assert!(p.steps.iter().all(|s| s.len() == 1)),
            }
        }
        assert!(plan(7, 1, 0.0).is_none());
    }

    /// The simulation's checkout runs with the template's default limit.
    #[test]
    fn the_limit_is_the_templates_default() {
        assert_eq!(charge_core::attempt::AttemptLimit::DEFAULT.get(), LIMIT);
    }
}
