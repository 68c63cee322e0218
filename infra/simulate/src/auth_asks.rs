//! Authorizations mixed into the orders (`--authorizations RATE`): a share of the orders is
//! checked out with `"capture": "manual"` (the money held, not taken), and then captured,
//! canceled, raced, stopped before it is sent, or forgotten, through the real door
//! (`POST /orders/{order_id}/capture` and `/cancel`, the checkout handler), seeded per order so
//! every run of a seed asks the same things.
//!
//! What happens to an authorized order ([`Fate`]):
//! - captured, all of it or a part, or canceled, a few groups after its checkout (its charge has
//!   most likely been authorized by then; asked again later while the door answers that it is not
//!   yet);
//! - raced: a capture and a cancel asked at once, interleaved by the scheduler (the store lets
//!   one take the authorization, never both);
//! - canceled right after its checkout, before the charge is sent (the door stops it);
//! - forgotten: never captured, so Stripe cancels the hold at its deadline (the virtual clock
//!   passes it), which must have been paged before.
//!
//! The card decides the deadline: a Visa charged off-session may wait 4 days 18 hours for its
//! capture, any other card 7 days; half the authorized Visa orders pay with a Mastercard instead,
//! so both windows are watched.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::asks::{keep_first, picked, DoorAnswer, Tally};
use crate::lock;

/// The default share of orders checked out with `"capture": "manual"`.
pub const DEFAULT_RATE: f64 = 0.3;
/// Groups after the checkout at which an authorization is captured or canceled, and at which it
/// is asked again while the door answers that the charge is not authorized yet.
pub const ASK_DELAYS: [u64; 4] = [2, 20, 200, 1_200];
/// The card half the authorized Visa orders pay with instead (its window is Stripe's 7 days).
pub const SEVEN_DAY_CARD: &str = "pm_card_mastercard";

/// What becomes of an authorized order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Captured, all that was authorized.
    CaptureAll,
    /// Captured in part (minor units).
    CapturePart(i64),
    /// Canceled.
    Cancel,
    /// A capture (of all of it) and a cancel asked at once.
    Race,
    /// Canceled right after its checkout, before the charge is sent.
    CancelAtCheckout,
    /// Never captured: it lapses at Stripe's deadline.
    Forget,
}

impl Fate {
    pub fn name(&self) -> &'static str {
        match self {
            Fate::CaptureAll => "capture_all",
            Fate::CapturePart(_) => "capture_part",
            Fate::Cancel => "cancel",
            Fate::Race => "race",
            Fate::CancelAtCheckout => "cancel_at_checkout",
            Fate::Forget => "forget",
        }
    }

    /// The requests asked a few groups after the checkout (none for the others).
    pub fn later_asks(&self) -> Vec<TakeAsk> {
        match *self {
            Fate::CaptureAll => vec![TakeAsk::Capture(None)],
            Fate::CapturePart(a) => vec![TakeAsk::Capture(Some(a))],
            Fate::Cancel => vec![TakeAsk::Cancel],
            Fate::Race => vec![TakeAsk::Capture(None), TakeAsk::Cancel],
            Fate::CancelAtCheckout | Fate::Forget => Vec::new(),
        }
    }
}

/// Order `index` of `seed`, charged `charged`: its fate if it is one of the `rate` share checked
/// out with `"capture": "manual"`, fixed by (seed, index) whatever the interleaving.
pub fn plan(seed: u64, index: u64, charged: i64, rate: f64) -> Option<Fate> {
    let mut rng = picked(seed, 0xa170_0000_0000_0045, index, rate)?;
    Some(match rng.random_range(0..100u32) {
        0..25 => Fate::CaptureAll,
        25..40 => Fate::CapturePart(rng.random_range(1..charged.max(2))),
        40..55 => Fate::Cancel,
        55..70 => Fate::Race,
        70..80 => Fate::CancelAtCheckout,
        _ => Fate::Forget,
    })
}

/// Whether an authorized Visa order of `seed` pays with [`SEVEN_DAY_CARD`] instead.
pub fn seven_day_card(seed: u64, index: u64) -> bool {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x7da1_ca4d ^ index.wrapping_mul(0x85eb_ca6b));
    rng.random_bool(0.5)
}

/// A capture (of an amount, or all of it) or a cancel, as the order service asks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakeAsk {
    Capture(Option<i64>),
    Cancel,
}

impl TakeAsk {
    pub fn kind(&self) -> &'static str {
        match self {
            TakeAsk::Capture(_) => "capture",
            TakeAsk::Cancel => "cancel",
        }
    }

    /// The door's request about order `order_id`: the checkout's (same caller, same headers)
    /// on the take's path.
    pub fn request(&self, order_id: &str) -> ApiGatewayV2httpRequest {
        let path = format!("/orders/{order_id}/{}", self.kind());
        let body = match self {
            TakeAsk::Capture(Some(a)) => format!(r#"{{"amount":{a}}}"#),
            TakeAsk::Capture(None) | TakeAsk::Cancel => "{}".to_owned(),
        };
        crate::order_service::request(order_id, path, body)
    }
}

/// What the door's answer means for the order service: done (accepted, or refused for good),
/// or to be asked again later (the charge is not authorized yet, or the door was unavailable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Done,
    AskAgain,
}

/// The door's answers, counted, and the captures and cancels it accepted.
#[derive(Debug, Default)]
pub struct Answers {
    pub asked: AtomicU64,
    /// By kind, HTTP status and error code (`capture 202`, `cancel 409 taken`, ...).
    by_answer: Tally,
    /// (order id, kind) → the operation id of the first 2xx.
    accepted: Mutex<BTreeMap<(String, &'static str), String>>,
    /// 2xx answers naming another operation than an earlier 2xx for the same (order, kind).
    pub answer_changed: AtomicU64,
}

impl Answers {
    /// Counts the door's answer to `ask` for `order_id` and keeps it if it accepted.
    pub fn note(&self, order_id: &str, ask: &TakeAsk, response: &ApiGatewayV2httpResponse) -> Next {
        self.asked.fetch_add(1, Ordering::Relaxed);
        let answer = DoorAnswer::read(response);
        self.by_answer
            .add(format!("{} {}", ask.kind(), answer.name()));
        if answer.accepted() {
            let key = (order_id.to_owned(), ask.kind());
            keep_first(
                &self.accepted,
                &self.answer_changed,
                key,
                answer.operation_id(),
                |a, b| a == b,
            );
            return Next::Done;
        }
        match (answer.status, answer.code.as_str()) {
            (503, _) | (409, "not_authorized_yet" | "in_flight") => Next::AskAgain,
            _ => Next::Done,
        }
    }

    /// The answers by kind, status and code.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.by_answer.counts()
    }

    /// The operation the door accepted for (order, kind), if it accepted one.
    pub fn accepted(&self, order_id: &str, kind: &'static str) -> Option<String> {
        lock(&self.accepted)
            .get(&(order_id.to_owned(), kind))
            .cloned()
    }

    pub fn accepted_count(&self) -> u64 {
        lock(&self.accepted).len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan is the seed's, every fate is drawn, and a part is less than the charge.
    #[test]
    fn plans_are_fixed_by_seed_and_index_and_draw_every_fate() {
        let plans =
            crate::asks::plans_fixed(2_000, 500..700, |i| plan(7, i, 1_000 + i as i64, 0.3));
        let names: std::collections::BTreeSet<&str> =
            plans.iter().flatten().map(Fate::name).collect();
        assert_eq!(names.len(), 6, "{names:?}");
        for (i, p) in plans.iter().enumerate() {
            if let Some(Fate::CapturePart(a)) = p {
                assert!(*a >= 1 && *a < 1_000 + i as i64);
            }
        }
        assert!(plan(7, 1, 1_001, 0.0).is_none());
    }
}
