//! The one shape every rule of the specification is written in, and the two checks every table
//! runs: each row holds ([`holds`]), and every outcome the plan can give is shown by some row
//! ([`uncovered`], [`covers`]).
//!
//! A row reads as a sentence, then its columns: the record as `found`, the `input` the plan is
//! asked about, at `now`, and what follows: the record after (`next`) and what happens (`then`,
//! the plan's output). A plan with no record, or no clock, has `()` in that column.

#![allow(dead_code)] // each spec file uses the part it needs

use std::fmt::Debug;

use charge_core::time::Timestamp;

/// One rule: its sentence first, then the case it speaks of and what follows.
#[derive(Debug, Clone)]
pub struct Row<Found, Input, Next, Then, Now = Timestamp> {
    /// What the rule says, as a reader would say it.
    pub says: &'static str,
    /// The record as the plan finds it.
    pub found: Found,
    /// What the plan is asked about: Stripe's answer, an event, a request.
    pub input: Input,
    /// When.
    pub now: Now,
    /// The record after.
    pub next: Next,
    /// What happens: the plan's output.
    pub then: Then,
}

/// Every row holds: `plan(found, input, now)` gives the row's `(next, then)`. A failure names
/// the row by its sentence.
pub fn holds<Found, Input, Next, Then, Now>(
    rows: &[Row<Found, Input, Next, Then, Now>],
    plan: impl Fn(&Found, &Input, &Now) -> (Next, Then),
) where
    Next: PartialEq + Debug,
    Then: PartialEq + Debug,
{
    for row in rows {
        let _naming = Naming(row.says);
        let (next, then) = plan(&row.found, &row.input, &row.now);
        assert_eq!(then, row.then, "{}: what happens", row.says);
        assert_eq!(next, row.next, "{}: the record after", row.says);
    }
}

/// The variants of `all` that no row's outcome shows, by `variant`'s name for them; a name
/// `variant` gives that `all` does not list is reported too (`all` is out of date).
pub fn uncovered<T>(
    outcomes: impl IntoIterator<Item = T>,
    all: &[&'static str],
    variant: impl Fn(&T) -> &'static str,
) -> Vec<String> {
    let shown: Vec<&'static str> = outcomes.into_iter().map(|t| variant(&t)).collect();
    let mut missing: Vec<String> = all
        .iter()
        .filter(|name| !shown.contains(name))
        .map(|name| name.to_string())
        .collect();
    missing.extend(
        shown
            .iter()
            .filter(|name| !all.contains(name))
            .map(|name| format!("{name} (not in the list of variants)")),
    );
    missing.sort();
    missing.dedup();
    missing
}

/// Fails naming every variant of `plan`'s output that no row shows.
pub fn covers<T>(
    plan: &str,
    outcomes: impl IntoIterator<Item = T>,
    all: &[&'static str],
    variant: impl Fn(&T) -> &'static str,
) {
    let missing = uncovered(outcomes, all, variant);
    assert!(
        missing.is_empty(),
        "no row of {plan}'s table shows: {}",
        missing.join(", ")
    );
}

/// Names the row a check inside the plan's closure failed in (the closure's own messages cannot).
struct Naming(&'static str);

impl Drop for Naming {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("in the row that says: {}", self.0);
        }
    }
}

/// A charge of 1000 usd of `order`, paid (`pi_r`), settled: what a refund is asked of.
pub fn paid_charge(order: &str) -> charge_core::operation::Operation {
    let mut charge = charge_core::testing::order(order)
        .amount(1000)
        .status(charge_core::operation::OperationStatus::Succeeded)
        .external_id("pi_r")
        .build();
    charge.next_due_at = None;
    charge
}

/// A refund `id` of `amount` of `charge`, as the door makes it at T0 (reserved, asked by
/// `support`), `pending`.
pub fn refund_of(
    charge: &charge_core::operation::Operation,
    id: &str,
    amount: i64,
) -> charge_core::operation::Operation {
    use charge_core::domain::{Amount, Principal, RefundId};
    use charge_core::refund::{request::RefundRequest, reserve};
    use charge_core::testing::T0;
    let request = RefundRequest {
        amount: Some(Amount::new(amount).unwrap()),
        reason: None,
    };
    let (params, _) = reserve(charge, &request, T0).unwrap();
    charge_core::operation::Operation::new_refund(
        charge.order_id.clone(),
        RefundId::parse(id).unwrap(),
        &request,
        params,
        Principal::jwt("support").unwrap(),
        T0,
        std::time::Duration::from_secs(300),
    )
}
