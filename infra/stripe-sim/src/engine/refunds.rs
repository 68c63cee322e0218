//! Refunds in the engine: stored beside the PaymentIntents they refund, settled lazily on the
//! simulated clock like `processing` intents, their events queued when they happen (and, for a
//! refund that will change later, queued for that moment, as a settling intent's are).

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;

use super::lists::{page_by_created, CreatedRange};
use super::Engine;
use crate::fx::Fx;
use crate::refund::{
    self, CardDetails, ChargeJson, PaymentMethodDetails, Refund, RefundParams, RefundPath,
    Transition,
};
use crate::version::RELEASED_REASON;
use crate::wire::{random_id, ApiError};

/// Every refund, oldest first, with its indexes.
pub(crate) struct Refunds {
    all: Vec<Refund>,
    by_id: HashMap<String, usize, Fx>,
    /// Refund positions of each refunded PaymentIntent (by its position), oldest first.
    of_intent: HashMap<usize, Vec<usize>, Fx>,
    /// Positions of the refunds in `requires_action` (the only status a refund leaves by a
    /// cancel alone, never by time): what the bank behind them looks at, without the ledger.
    awaiting_action: BTreeSet<usize>,
    /// How long a `pending` refund takes to succeed, and a late-failing one to fail (simulated).
    pub(crate) settle_ms: i64,
    /// How long a late-failing refund stays `succeeded` before it fails, when not `settle_ms`
    /// (a bank returning a refund days later).
    pub(crate) fail_after_ms: Option<i64>,
    /// Whether a refund was ever created earlier than the one before it (the clock set back):
    /// a list by creation time then scans instead of bisecting.
    out_of_order: bool,
}

impl Refunds {
    pub(crate) fn new(settle_ms: i64) -> Self {
        Refunds {
            all: Vec::new(),
            by_id: HashMap::default(),
            of_intent: HashMap::default(),
            awaiting_action: BTreeSet::new(),
            settle_ms,
            fail_after_ms: None,
            out_of_order: false,
        }
    }

    /// How many refunds were ever created.
    pub(crate) fn len(&self) -> usize {
        self.all.len()
    }
}

/// One row of the refund ledger: every refund ever created ([`crate::StripeSim::refund_ledger`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RefundEntry {
    /// `re_...`
    pub id: String,
    /// The refunded PaymentIntent.
    pub payment_intent: String,
    /// Amount in the smallest currency unit.
    pub amount: i64,
    /// Current status (after lazy transitions).
    pub status: String,
    /// `metadata[operation_id]`, if given.
    pub operation_id: Option<String>,
    /// Its `reason`, if any: `expired_uncaptured_charge` for Stripe's own record of an
    /// authorization's released part (before basil), which moved no money taken.
    pub reason: Option<String>,
    /// Simulated creation time, unix milliseconds.
    pub created_ms: i64,
}

/// One page of `GET /v1/refunds`: the refunds' JSON, newest first, and whether more follow.
pub(crate) struct RefundPage {
    pub data: Vec<String>,
    pub has_more: bool,
}

impl Engine {
    /// Applies the due transition of the refund at `r`.
    fn settle_refund(&mut self, r: usize, now_ms: i64) {
        self.refunds.all[r].settle(now_ms);
    }

    /// The refunds of the PaymentIntent at `at`, settled as of `now_ms`, oldest first.
    fn refunds_of(&mut self, at: usize, now_ms: i64) -> Vec<usize> {
        let of = self.refunds.of_intent.get(&at).cloned().unwrap_or_default();
        for r in &of {
            self.settle_refund(*r, now_ms);
        }
        of
    }

    /// The charge of the PaymentIntent at `at` as its refunds leave it, settled as of `now_ms`.
    /// An authorization (`capture_method=manual`) is a paid, uncaptured charge until captured;
    /// its released part (all of it once canceled or expired, the rest after a partial capture)
    /// counts in `amount_refunded`, as Stripe shows it.
    pub(crate) fn charge_json(&mut self, at: usize, now_ms: i64) -> Option<String> {
        let refunded = self.refunded_of(at, now_ms);
        let pi = &self.pis[at];
        let captured = pi.status == "succeeded";
        let paid = captured || pi.hold.is_some();
        let amount_refunded = refunded + pi.amount_released();
        let charge = ChargeJson {
            amount: pi.params.amount,
            amount_captured: pi.amount_received(),
            amount_refunded,
            captured,
            created: pi.created_ms.div_euclid(1000),
            currency: &pi.params.currency,
            id: pi.latest_charge.as_deref()?,
            object: "charge",
            paid,
            payment_intent: &pi.id,
            payment_method_details: PaymentMethodDetails {
                card: CardDetails {
                    brand: crate::pi::card_brand(pi.params.payment_method.as_deref()),
                    capture_before: pi
                        .hold
                        .as_ref()
                        .map(|h| h.capture_before_ms.div_euclid(1000)),
                },
                kind: "card",
            },
            refunded: paid && amount_refunded == pi.params.amount,
            status: match pi.status {
                "processing" => "pending",
                _ if paid => "succeeded",
                _ => "failed",
            },
        };
        serde_json::to_string(&charge).ok()
    }

    /// What the refunds of the PaymentIntent at `at` took back (`pending` and `succeeded`).
    pub(crate) fn refunded_of(&mut self, at: usize, now_ms: i64) -> i64 {
        self.refunds_of(at, now_ms)
            .iter()
            .map(|r| &self.refunds.all[*r])
            .filter(|r| r.refunded())
            .map(|r| r.amount)
            .sum()
    }

    /// `GET /v1/payment_intents/{id}?expand[]=latest_charge`: the intent with its charge object.
    pub(crate) fn retrieve_expanded(&mut self, id: &str, now_ms: i64) -> Option<String> {
        let text = self.retrieve(id, now_ms)?;
        Some(self.expanding(id, text, true, now_ms))
    }

    /// The PaymentIntent a refund may be made of, and the amount it refunds, or Stripe's
    /// refusal, first failing check first: unknown intent, no successful charge, nothing left,
    /// more asked than is left.
    pub(crate) fn refund_plan(
        &mut self,
        p: &RefundParams,
        now_ms: i64,
    ) -> Result<(usize, i64), ApiError> {
        let at = self.position(&p.payment_intent).ok_or_else(|| {
            ApiError::no_such_payment_intent(&p.payment_intent).param("payment_intent")
        })?;
        self.settle_at(at, now_ms);
        let status = self.pis[at].status;
        let charge = match &self.pis[at].latest_charge {
            Some(c) if status == "succeeded" => c.clone(),
            _ => return Err(refund::nothing_to_refund(&p.payment_intent, status)),
        };
        // A chargeback holds the charge until it is won; an inquiry does not.
        if let Some(refused) = self.refund_blocked_by_dispute(at, now_ms) {
            return Err(refused);
        }
        let held: i64 = self
            .refunds_of(at, now_ms)
            .iter()
            .map(|r| &self.refunds.all[*r])
            .filter(|r| r.holds())
            .map(|r| r.amount)
            .sum();
        // What the charge received: a partial capture bounds its refunds.
        let left = self.pis[at].amount_received() - held;
        let currency = &self.pis[at].params.currency;
        match p.amount {
            _ if left <= 0 => Err(refund::already_refunded(&charge)),
            Some(asked) if asked > left => Err(refund::amount_too_large(asked, left, currency)),
            asked => {
                let amount = asked.unwrap_or(left);
                match ApiError::indivisible("amount", amount, currency) {
                    Some(refused) => Err(refused),
                    None => Ok((at, amount)),
                }
            }
        }
    }

    /// `POST /v1/refunds`: checks as [`Engine::refund_plan`], then creates the refund and queues
    /// its events. Its JSON as created.
    pub(crate) fn refund(&mut self, p: RefundParams, now_ms: i64) -> Result<String, ApiError> {
        let (at, amount) = self.refund_plan(&p, now_ms)?;
        let pi = &self.pis[at];
        let path = refund::refund_path(pi.params.payment_method.as_deref());
        let currency = pi.params.currency.clone();
        let payment_intent = pi.id.clone();
        let charge = pi.latest_charge.clone().unwrap_or_default();
        let due = now_ms.saturating_add(self.refunds.settle_ms);
        let (status, transition) = match path {
            RefundPath::Succeeds => ("succeeded", None),
            RefundPath::PendingThenSucceeds => ("pending", Some((due, "succeeded"))),
            RefundPath::SucceedsThenFails => {
                let fails = self
                    .refunds
                    .fail_after_ms
                    .map_or(due, |d| now_ms.saturating_add(d));
                ("succeeded", Some((fails, "failed")))
            }
            RefundPath::RequiresAction => ("requires_action", None),
        };
        let transition = transition.map(|(at_ms, to)| Transition {
            at_ms,
            to,
            failure_balance_transaction: (to == "failed")
                .then(|| random_id(&mut self.ids, "txn_", 24)),
        });
        let refund = Refund {
            id: random_id(&mut self.ids, "re_", 24),
            amount,
            currency,
            payment_intent,
            charge,
            balance_transaction: random_id(&mut self.ids, "txn_", 24),
            failure_balance_transaction: None,
            reason: p.reason,
            metadata: p.metadata,
            created_ms: now_ms,
            status,
            transition,
        };
        let json = refund.json_string();
        self.keep_refund(at, refund, &json, now_ms);
        self.resolve_inquiries_if_refunded(at, now_ms);
        Ok(json)
    }

    /// Keeps `refund` (its JSON `json`) of the PaymentIntent at `at`, indexed, and queues its
    /// events.
    fn keep_refund(&mut self, at: usize, refund: Refund, json: &str, now_ms: i64) {
        let r = self.index_refund(at, refund, now_ms);
        self.emit_refund_events(at, r, json, now_ms);
    }

    /// Keeps `refund` of the PaymentIntent at `at`, indexed; its position.
    fn index_refund(&mut self, at: usize, refund: Refund, now_ms: i64) -> usize {
        let r = self.refunds.all.len();
        if self
            .refunds
            .all
            .last()
            .is_some_and(|l| now_ms < l.created_ms)
        {
            self.refunds.out_of_order = true;
        }
        self.refunds.by_id.insert(refund.id.clone(), r);
        self.refunds.of_intent.entry(at).or_default().push(r);
        if refund.status == "requires_action" {
            self.refunds.awaiting_action.insert(r);
        }
        self.refunds.all.push(refund);
        r
    }

    /// Before basil Stripe records what a partial capture, a cancel or a lapse released of an
    /// authorization as a refund of its own: `succeeded`, `reason: expired_uncaptured_charge`,
    /// no metadata, its id the intent's (one per authorization). It holds no part of what the
    /// charge took ([`Refund::holds`]): the charge's `amount_refunded` counts the release once.
    pub(crate) fn refund_released(&mut self, at: usize, now_ms: i64) {
        let pi = &self.pis[at];
        let amount = pi.amount_released();
        let Some(charge) = pi.latest_charge.clone().filter(|_| amount > 0) else {
            return;
        };
        let id = format!("re_{}", pi.id.trim_start_matches("pi_"));
        if self.refunds.by_id.contains_key(&id) {
            return;
        }
        let (currency, payment_intent) = (pi.params.currency.clone(), pi.id.clone());
        let refund = Refund {
            id,
            amount,
            currency,
            payment_intent,
            charge,
            balance_transaction: random_id(&mut self.ids, "txn_", 24),
            failure_balance_transaction: None,
            reason: Some(RELEASED_REASON),
            metadata: Default::default(),
            created_ms: now_ms,
            status: "succeeded",
            transition: None,
        };
        let json = refund.json_string();
        self.index_refund(at, refund, now_ms);
        // Before basil Stripe tells of it with `charge.refund.updated` (and `charge.refunded`,
        // which the engine's endpoint does not take): basil's changelog names both as no longer
        // sent for these flows.
        self.webhooks
            .emit_object("charge.refund.updated", &json, now_ms);
    }

    /// `refund.created`, `charge.refunded` when money moved, and the events of its later
    /// transition, queued for that moment.
    fn emit_refund_events(&mut self, at: usize, r: usize, json: &str, now_ms: i64) {
        if !self.webhooks.enabled() {
            return;
        }
        self.webhooks.emit_object("refund.created", json, now_ms);
        if self.refunds.all[r].refunded() {
            if let Some(charge) = self.charge_json(at, now_ms) {
                self.webhooks
                    .emit_object("charge.refunded", &charge, now_ms);
            }
        }
        if let Some((later, at_ms)) = self.refunds.all[r].settled_copy() {
            self.emit_refund_change(&later, at_ms);
        }
    }

    /// The events of a refund whose status just changed (`refund`: as it is now).
    fn emit_refund_change(&mut self, refund: &Refund, at_ms: i64) {
        let json = refund.json_string();
        self.webhooks.emit_object("refund.updated", &json, at_ms);
        if refund.status == "failed" {
            self.webhooks.emit_object("refund.failed", &json, at_ms);
        }
        self.webhooks
            .emit_object("charge.refund.updated", &json, at_ms);
    }

    /// `GET /v1/refunds/{id}`, settled as of `now_ms`.
    pub(crate) fn retrieve_refund(&mut self, id: &str, now_ms: i64) -> Option<String> {
        let r = *self.refunds.by_id.get(id)?;
        self.settle_refund(r, now_ms);
        Some(self.refunds.all[r].json_string())
    }

    /// `POST /v1/refunds/{id}/cancel`: only a `requires_action` refund may be canceled.
    pub(crate) fn cancel_refund(&mut self, id: &str, now_ms: i64) -> Result<String, ApiError> {
        let r = *self
            .refunds
            .by_id
            .get(id)
            .ok_or_else(|| refund::no_such_refund(id, "refund"))?;
        self.settle_refund(r, now_ms);
        let status = self.refunds.all[r].status;
        if status != "requires_action" {
            return Err(refund::not_cancelable(id, status));
        }
        self.refunds.all[r].status = "canceled";
        self.refunds.awaiting_action.remove(&r);
        let refund = self.refunds.all[r].clone();
        self.emit_refund_change(&refund, now_ms);
        Ok(refund.json_string())
    }

    /// `GET /v1/refunds`: an intent's refunds (or all), newest first, at most `limit`, after
    /// the refund `starting_after` (newer than it) if given. Not delayed: lists read the
    /// current state, unlike search.
    pub(crate) fn list_refunds(
        &mut self,
        payment_intent: Option<&str>,
        created: CreatedRange,
        limit: usize,
        starting_after: Option<&str>,
        now_ms: i64,
    ) -> Result<RefundPage, ApiError> {
        let after = match starting_after {
            None => None,
            Some(id) => Some(
                *self
                    .refunds
                    .by_id
                    .get(id)
                    .ok_or_else(|| refund::no_such_refund(id, "starting_after"))?,
            ),
        };
        let (page, has_more) = match payment_intent {
            // One intent's refunds: few, filtered as they are.
            Some(pi) => {
                let of = match self.position(pi) {
                    Some(at) => self.refunds_of(at, now_ms),
                    None => Vec::new(),
                };
                let all = &self.refunds.all;
                let mut newest_first: Vec<usize> = of
                    .into_iter()
                    .rev()
                    .filter(|r| after.is_none_or(|a| *r < a))
                    .filter(|r| {
                        created.from_ms <= all[*r].created_ms
                            && all[*r].created_ms < created.until_ms
                    })
                    .take(limit + 1)
                    .collect();
                let more = newest_first.len() > limit;
                newest_first.truncate(limit);
                (newest_first, more)
            }
            None => {
                let all = &self.refunds.all;
                page_by_created(
                    all.len(),
                    !self.refunds.out_of_order,
                    |r| all[r].created_ms,
                    created,
                    after,
                    limit,
                )
            }
        };
        let data = page
            .iter()
            .map(|r| {
                self.settle_refund(*r, now_ms);
                self.refunds.all[*r].json_string()
            })
            .collect();
        Ok(RefundPage { data, has_more })
    }

    /// Every refund ever created, oldest first, settled as of `now_ms`.
    /// When the last refund that is to fail after it succeeded fails (its transition still due),
    /// if any.
    pub(crate) fn last_late_failure_ms(&self) -> Option<i64> {
        self.refunds
            .all
            .iter()
            .filter_map(|r| r.transition.as_ref())
            .filter(|t| t.to == "failed")
            .map(|t| t.at_ms)
            .max()
    }

    pub(crate) fn refund_ledger(&mut self, now_ms: i64) -> Vec<RefundEntry> {
        (0..self.refunds.all.len())
            .map(|r| {
                self.settle_refund(r, now_ms);
                self.refund_entry(r)
            })
            .collect()
    }

    fn refund_entry(&self, r: usize) -> RefundEntry {
        let refund = &self.refunds.all[r];
        RefundEntry {
            id: refund.id.clone(),
            payment_intent: refund.payment_intent.clone(),
            amount: refund.amount,
            status: refund.status.to_owned(),
            operation_id: refund.metadata.get("operation_id").cloned(),
            reason: refund.reason.map(str::to_owned),
            created_ms: refund.created_ms,
        }
    }

    /// The refunds in `requires_action` created at or before `created_by_ms`, oldest first (as
    /// the ledger lists them). Costs the refunds it returns, plus one, while refunds were
    /// created in clock order; a clock set back makes it look at every waiting refund.
    pub(crate) fn awaiting_action(&self, created_by_ms: i64) -> Vec<RefundEntry> {
        let all = &self.refunds.all;
        let due = |r: &&usize| all[**r].created_ms <= created_by_ms;
        let waiting = self.refunds.awaiting_action.iter();
        let positions: Vec<usize> = if self.refunds.out_of_order {
            waiting.filter(due).copied().collect()
        } else {
            waiting.take_while(due).copied().collect()
        };
        positions
            .into_iter()
            .map(|r| self.refund_entry(r))
            .collect()
    }

    /// The `amount_refunded` of the PaymentIntent `id`'s charge (`pending` and `succeeded`
    /// refunds), settled as of `now_ms`.
    pub(crate) fn amount_refunded(&mut self, id: &str, now_ms: i64) -> Option<i64> {
        let at = self.position(id)?;
        self.settle_at(at, now_ms);
        Some(self.refunded_of(at, now_ms) + self.pis[at].amount_released())
    }
}

#[cfg(test)]
mod tests {
    use crate::{CreateStart, Outcome, SimConfig, StripeSim};

    fn id_of(start: CreateStart) -> String {
        let CreateStart::Done(Outcome::Answered(a)) = start else {
            panic!("no fault: answered at once");
        };
        let body: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
        body["id"].as_str().unwrap().to_owned()
    }

    fn form(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// What a bank acting on waiting refunds visits each time stays the refunds still waiting,
    /// not every refund ever made: a run's cost per tick would otherwise grow with the run.
    #[test]
    fn the_waiting_index_holds_only_the_refunds_still_waiting() {
        let sim = StripeSim::new(SimConfig::default());
        let mut waiting = Vec::new();
        for (n, pm) in ["pm_card_sim_refundRequiresAction", "pm_card_visa"]
            .iter()
            .cycle()
            .take(40)
            .enumerate()
        {
            let op = format!("op-{n}");
            let charge = form(&[
                ("amount", "1000"),
                ("currency", "usd"),
                ("payment_method", pm),
                ("confirm", "true"),
                ("off_session", "true"),
                ("metadata[operation_id]", &op),
            ]);
            let pi = id_of(sim.create_in_process(None, charge));
            let refund = id_of(sim.refund_in_process(None, &form(&[("payment_intent", &pi)])));
            if n % 2 == 0 {
                waiting.push(refund);
            }
        }
        assert_eq!(sim.engine().refunds.awaiting_action.len(), 20);
        for id in &waiting[..19] {
            let _ = sim.cancel_refund_in_process(id, None, &[]);
        }
        assert_eq!(sim.refunds_created(), 40);
        assert_eq!(sim.engine().refunds.awaiting_action.len(), 1);
        let left = sim.refunds_awaiting_action(i64::MAX);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].id, waiting[19]);
    }
}
