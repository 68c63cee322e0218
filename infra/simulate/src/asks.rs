//! What every kind of ask the order service makes shares (refunds [`crate::refund_asks`],
//! captures and cancels [`crate::auth_asks`], disputes [`crate::dispute_asks`], charges again
//! [`crate::retry_asks`]): the seeded per-order pick of the orders a kind is asked of, and the
//! door's answers read and counted by status and code. Each kind's own cases, and what an answer
//! means for it, stay in its own file.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use aws_lambda_events::apigw::ApiGatewayV2httpResponse;
use aws_lambda_events::encodings::Body;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::lock;

/// Whether order `index` of `seed` is one of the `rate` share a kind asks (each kind its own
/// `salt`): its own generator, past the draw that picked it, for the kind to draw its case from;
/// `None` if it is not picked. Fixed by (seed, salt, index), whatever the interleaving.
pub fn picked(seed: u64, salt: u64, index: u64, rate: f64) -> Option<SmallRng> {
    if rate <= 0.0 {
        return None;
    }
    let mut rng = SmallRng::seed_from_u64(seed ^ salt ^ index.wrapping_mul(0x9e37_79b9));
    rng.random_bool(rate.min(1.0)).then_some(rng)
}

/// The door's answer to one ask: its status, its error code (empty on success) and its body.
#[derive(Debug, Clone)]
pub struct DoorAnswer {
    pub status: i64,
    pub code: String,
    pub body: Value,
}

impl DoorAnswer {
    pub fn read(response: &ApiGatewayV2httpResponse) -> Self {
        let body: Value = match &response.body {
            Some(Body::Text(t)) => serde_json::from_str(t).unwrap_or(Value::Null),
            _ => Value::Null,
        };
        let code = body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Self {
            status: response.status_code,
            code,
            body,
        }
    }

    /// `"202"`, `"409 paid"`: how the answers are counted.
    pub fn name(&self) -> String {
        if self.code.is_empty() {
            self.status.to_string()
        } else {
            format!("{} {}", self.status, self.code)
        }
    }

    pub fn accepted(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The operation id a 2xx names.
    pub fn operation_id(&self) -> String {
        self.body["operation_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// The door's answers of one kind, counted by name.
#[derive(Debug, Default)]
pub struct Tally(Mutex<BTreeMap<String, u64>>);

impl Tally {
    pub fn add(&self, name: String) {
        *lock(&self.0).entry(name).or_default() += 1;
    }

    pub fn counts(&self) -> BTreeMap<String, u64> {
        lock(&self.0).clone()
    }
}

/// What a kind keeps of each order it asked (its plan, what came of it), by order id, for the
/// judge.
#[derive(Debug)]
pub struct ByOrder<V>(Mutex<BTreeMap<String, V>>);

impl<V> Default for ByOrder<V> {
    fn default() -> Self {
        Self(Mutex::new(BTreeMap::new()))
    }
}

impl<V: Clone> ByOrder<V> {
    pub fn put(&self, order_id: &str, v: V) {
        lock(&self.0).insert(order_id.to_owned(), v);
    }

    pub fn of(&self, order_id: &str) -> Option<V> {
        lock(&self.0).get(order_id).cloned()
    }

    /// Every order's, in order id order.
    pub fn all(&self) -> Vec<(String, V)> {
        lock(&self.0)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// Keeps the first 2xx answer for `key` in `accepted`; a later one naming another operation
/// (`same` says whether it is the same) counts in `changed`: the door told the order service of
/// two operations for one request.
pub fn keep_first<K: Ord, V>(
    accepted: &Mutex<BTreeMap<K, V>>,
    changed: &AtomicU64,
    key: K,
    answered: V,
    same: impl Fn(&V, &V) -> bool,
) {
    let mut accepted = lock(accepted);
    match accepted.get(&key) {
        Some(first) if !same(first, &answered) => {
            changed.fetch_add(1, Ordering::Relaxed);
        }
        Some(_) => {}
        None => {
            accepted.insert(key, answered);
        }
    }
}

/// The check every kind's plan test makes: `plan` of each index of `0..n` is fixed (asked twice,
/// the same), and the share of indexes it picks is in `share`. Returns the plans.
#[cfg(test)]
pub fn plans_fixed<P: PartialEq + std::fmt::Debug>(
    n: u64,
    share: std::ops::Range<usize>,
    plan: impl Fn(u64) -> Option<P>,
) -> Vec<Option<P>> {
    let plans: Vec<Option<P>> = (0..n).map(&plan).collect();
    let again: Vec<Option<P>> = (0..n).map(&plan).collect();
    assert_eq!(plans, again);
    let some = plans.iter().flatten().count();
    assert!(
        share.contains(&some),
        "{some} picked of {n}, not in {share:?}"
    );
    plans
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pick is the seed's and the salt's, and none is picked at rate 0.
    #[test]
    fn the_pick_is_fixed_by_seed_salt_and_index() {
        let of = |salt: u64| -> Vec<bool> {
            (0..1_000)
                .map(|i| picked(7, salt, i, 0.3).is_some())
                .collect()
        };
        assert_eq!(of(1), of(1));
        assert_ne!(of(1), of(2));
        let n = of(1).iter().filter(|p| **p).count();
        assert!((250..350).contains(&n), "{n}");
        assert!((0..1_000).all(|i| picked(7, 1, i, 0.0).is_none()));
        assert!((0..1_000).all(|i| picked(7, 1, i, 1.0).is_some()));
    }

    /// A later 2xx naming another operation is counted; the same one is not.
    #[test]
    fn a_changed_answer_is_counted_and_the_same_is_not() {
        let accepted = Mutex::new(BTreeMap::new());
        let changed = AtomicU64::new(0);
        keep_first(&accepted, &changed, "o", "op-1", |a, b| a == b);
        keep_first(&accepted, &changed, "o", "op-1", |a, b| a == b);
        assert_eq!(changed.load(Ordering::Relaxed), 0);
        keep_first(&accepted, &changed, "o", "op-2", |a, b| a == b);
        assert_eq!(changed.load(Ordering::Relaxed), 1);
        assert_eq!(lock(&accepted).get("o"), Some(&"op-1"));
    }
}
