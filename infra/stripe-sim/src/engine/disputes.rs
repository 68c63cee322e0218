//! Disputes in the engine: stored beside the PaymentIntents whose charges they take back, moved
//! on the simulated clock by timers (a test card's dispute appearing after its delay, a deadline
//! passing unanswered, a review ending), each timer applied, and its events queued, dated the
//! moment it fell due — when the clock moves past it ([`Engine::expire_due`]) or when anything
//! reads or refunds first.

use std::collections::{BTreeMap, HashMap};

use super::lists::{page_by_created, CreatedRange, ListedPage};
use super::Engine;
use crate::dispute::{
    self, BalanceTransaction, Decision, Dispute, DisputeCard, DisputeUpdate, LOSING_EVIDENCE,
    WINNING_EVIDENCE,
};
use crate::fx::Fx;
use crate::wire::{random_id, ApiError};

/// How long Stripe's disputes take on the simulated clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DisputeTiming {
    /// From a test card's successful charge to its dispute. Stripe's test cards dispute "soon
    /// after" the charge; the default, 0, makes the dispute with the charge.
    pub delay_ms: i64,
    /// From a dispute's creation to its `evidence_details.due_by`. Stripe's response windows
    /// run from about 7 to 21 days by card network; the default is the shortest, 7 days, so a
    /// deadline is met soonest.
    pub response_window_ms: i64,
    /// From submitted evidence to the bank's decision (`won`/`lost`). Stripe's test mode decides
    /// on `winning_evidence`/`losing_evidence` at once; the default keeps the `under_review`
    /// step visible for 1 hour.
    pub review_ms: i64,
    /// From `due_by` to the close of a dispute nobody answered (`lost`; an inquiry
    /// `warning_closed`). Stripe does not close it at `due_by`: the card network decides later,
    /// and until then the dispute stays `needs_response` with `evidence_details.past_due` true
    /// (Stripe's API reference: evidence submitted past the due date is "not guaranteed" to be
    /// delivered, so it can still be submitted). The default, 2 days
    /// ([`CLOSES_AFTER_DUE_MS`]), leaves a daily reader at least one read past `due_by`.
    pub closes_after_due_ms: i64,
}

/// [`DisputeTiming::closes_after_due_ms`]'s default: 2 days.
pub const CLOSES_AFTER_DUE_MS: i64 = 2 * 24 * 3600 * 1000;

impl DisputeTiming {
    /// When a dispute due at `due_by_ms` and still needing a response then is closed.
    fn closes_at(&self, due_by_ms: i64) -> i64 {
        due_by_ms.saturating_add(self.closes_after_due_ms)
    }
}

impl Default for DisputeTiming {
    fn default() -> Self {
        DisputeTiming {
            delay_ms: 0,
            response_window_ms: 7 * 24 * 3600 * 1000,
            review_ms: 3600 * 1000,
            closes_after_due_ms: CLOSES_AFTER_DUE_MS,
        }
    }
}

/// What a timer does when it falls due.
#[derive(Clone, Debug, PartialEq)]
enum Timer {
    /// A test card's dispute appears on the charge of the PaymentIntent at this position.
    Open { at: usize, card: DisputeCard },
    /// [`DisputeTiming::closes_after_due_ms`] past a dispute's `due_by`: still needing a
    /// response, it is lost (an inquiry closes).
    Deadline { d: usize },
    /// The review of a dispute's submitted evidence ends.
    Review { d: usize },
}

/// Every dispute, oldest first, with its indexes and timers.
pub(crate) struct Disputes {
    all: Vec<Dispute>,
    by_id: HashMap<String, usize, Fx>,
    /// Dispute positions of each disputed PaymentIntent (by its position), oldest first.
    of_intent: HashMap<usize, Vec<usize>, Fx>,
    /// Timers by (due, sequence).
    timers: BTreeMap<(i64, u64), Timer>,
    seq: u64,
    pub(crate) timing: DisputeTiming,
    out_of_order: bool,
}

impl Disputes {
    pub(crate) fn new(timing: DisputeTiming) -> Self {
        Disputes {
            all: Vec::new(),
            by_id: HashMap::default(),
            of_intent: HashMap::default(),
            timers: BTreeMap::new(),
            seq: 0,
            timing,
            out_of_order: false,
        }
    }

    /// How many disputes were ever created.
    pub(crate) fn len(&self) -> usize {
        self.all.len()
    }

    fn set_timer(&mut self, due: i64, timer: Timer) {
        self.seq += 1;
        self.timers.insert((due, self.seq), timer);
    }

    /// When the next timer falls due, if any waits.
    pub(crate) fn next_due(&self) -> Option<i64> {
        self.timers.keys().next().map(|(due, _)| *due)
    }
}

/// How a dispute is asked for by the admin route ([`crate::StripeSim::dispute_charge`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DisputeRequest {
    /// The PaymentIntent whose charge is disputed.
    pub payment_intent: String,
    /// The disputed amount; default what its refunds left of the charge.
    #[serde(default)]
    pub amount: Option<i64>,
    /// One of [`crate::DISPUTE_REASONS`]; default `fraudulent`.
    #[serde(default)]
    pub reason: Option<String>,
    /// An inquiry (`warning_needs_response`, no funds withdrawn).
    #[serde(default)]
    pub inquiry: bool,
}

impl Engine {
    /// Schedules a test card's dispute on the PaymentIntent at `at`, which just succeeded at
    /// `now_ms` (its charge paid).
    pub(crate) fn schedule_card_dispute(&mut self, at: usize, now_ms: i64) {
        let Some(card) = dispute::dispute_card(self.pis[at].params.payment_method.as_deref())
        else {
            return;
        };
        let due = now_ms.saturating_add(self.disputes.timing.delay_ms);
        self.disputes.set_timer(due, Timer::Open { at, card });
        // No delay: the dispute is there when the charge's answer is.
        self.disputes_due(now_ms);
    }

    /// Applies every dispute timer due by `now_ms`, oldest first, each dated its own moment.
    pub(crate) fn disputes_due(&mut self, now_ms: i64) {
        while let Some(entry) = self.disputes.timers.first_entry() {
            let (due, _) = *entry.key();
            if due > now_ms {
                break;
            }
            let timer = entry.remove();
            match timer {
                Timer::Open { at, card } => {
                    self.settle_at(at, due);
                    let left = self.pis[at].amount_received() - self.refunded_of(at, due);
                    if left > 0 {
                        let _ = self.open_dispute(at, left, card.reason, card.inquiry, due);
                    }
                }
                Timer::Deadline { d } => self.deadline(d, due),
                Timer::Review { d } => self.review_ends(d, due),
            }
        }
    }

    /// Opens a dispute of `amount` on the charge of the PaymentIntent at `at`, at `now_ms`:
    /// a chargeback withdraws its amount at once; an inquiry takes nothing. Its position.
    fn open_dispute(
        &mut self,
        at: usize,
        amount: i64,
        reason: &str,
        inquiry: bool,
        now_ms: i64,
    ) -> usize {
        let pi = &self.pis[at];
        let (charge, payment_intent, currency) = (
            pi.latest_charge.clone().unwrap_or_default(),
            pi.id.clone(),
            pi.params.currency.clone(),
        );
        let d = self.disputes.all.len();
        if self
            .disputes
            .all
            .last()
            .is_some_and(|l| now_ms < l.created_ms)
        {
            self.disputes.out_of_order = true;
        }
        let mut dispute = Dispute {
            id: random_id(&mut self.ids, "dp_", 24),
            charge,
            payment_intent,
            amount,
            currency,
            reason: reason.to_owned(),
            status: if inquiry {
                "warning_needs_response"
            } else {
                "needs_response"
            },
            created_ms: now_ms,
            due_by_ms: now_ms.saturating_add(self.disputes.timing.response_window_ms),
            evidence: BTreeMap::new(),
            submission_count: 0,
            balance_transactions: Vec::new(),
            metadata: Default::default(),
            decided: None,
        };
        if !inquiry {
            let withdrawn = self.balance_transaction(&dispute.currency, -amount, "dispute");
            dispute.balance_transactions.push(withdrawn);
        }
        self.disputes.by_id.insert(dispute.id.clone(), d);
        self.disputes.of_intent.entry(at).or_default().push(d);
        let closes_at = self.disputes.timing.closes_at(dispute.due_by_ms);
        self.disputes.all.push(dispute);
        self.disputes.set_timer(closes_at, Timer::Deadline { d });
        self.emit_dispute(d, "charge.dispute.created", now_ms);
        if !inquiry {
            self.emit_dispute(d, "charge.dispute.funds_withdrawn", now_ms);
        }
        d
    }

    fn balance_transaction(
        &mut self,
        currency: &str,
        amount: i64,
        reporting_category: &'static str,
    ) -> BalanceTransaction {
        BalanceTransaction {
            amount,
            currency: currency.to_owned(),
            id: random_id(&mut self.ids, "txn_", 24),
            object: "balance_transaction",
            reporting_category,
            kind: "adjustment",
        }
    }

    fn emit_dispute(&mut self, d: usize, kind: &str, at_ms: i64) {
        if self.webhooks.enabled() {
            let json = self.disputes.all[d].json_string(at_ms);
            self.webhooks.emit_object(kind, &json, at_ms);
        }
    }

    /// `due_by` passed and the closing delay after it: a dispute still needing a response is
    /// lost (an inquiry closes).
    fn deadline(&mut self, d: usize, at_ms: i64) {
        // An inquiry escalated meanwhile has a later `due_by` (its own timer).
        let dispute = &self.disputes.all[d];
        if !dispute.needs_response() || at_ms < self.disputes.timing.closes_at(dispute.due_by_ms) {
            return;
        }
        let inquiry = self.disputes.all[d].inquiry();
        self.close(d, if inquiry { "warning_closed" } else { "lost" }, at_ms);
    }

    /// Closes the dispute at `d` as `status` at `at_ms`: a chargeback won gets its funds back.
    fn close(&mut self, d: usize, status: &'static str, at_ms: i64) {
        self.disputes.all[d].status = status;
        if status == "won" {
            let (amount, currency) = {
                let dispute = &self.disputes.all[d];
                (dispute.amount, dispute.currency.clone())
            };
            let back = self.balance_transaction(&currency, amount, "dispute_reversal");
            self.disputes.all[d].balance_transactions.push(back);
            self.emit_dispute(d, "charge.dispute.closed", at_ms);
            self.emit_dispute(d, "charge.dispute.funds_reinstated", at_ms);
        } else {
            self.emit_dispute(d, "charge.dispute.closed", at_ms);
        }
    }

    /// The review of submitted evidence ended: won or lost as decided; an inquiry lost
    /// escalates into a chargeback (funds withdrawn, a new response window).
    fn review_ends(&mut self, d: usize, at_ms: i64) {
        let dispute = &self.disputes.all[d];
        let Some(decision) = dispute.decided else {
            return;
        };
        let (amount, currency) = (dispute.amount, dispute.currency.clone());
        match (dispute.status, decision) {
            ("warning_under_review", Decision::Won) => self.close(d, "warning_closed", at_ms),
            ("warning_under_review", Decision::Lost) => {
                let withdrawn = self.balance_transaction(&currency, -amount, "dispute");
                let window = self.disputes.timing.response_window_ms;
                let dispute = &mut self.disputes.all[d];
                dispute.status = "needs_response";
                dispute.decided = None;
                dispute.due_by_ms = at_ms.saturating_add(window);
                dispute.balance_transactions.push(withdrawn);
                let closes_at = self.disputes.timing.closes_at(dispute.due_by_ms);
                self.disputes.set_timer(closes_at, Timer::Deadline { d });
                self.emit_dispute(d, "charge.dispute.updated", at_ms);
                self.emit_dispute(d, "charge.dispute.funds_withdrawn", at_ms);
            }
            ("under_review", Decision::Won) => self.close(d, "won", at_ms),
            ("under_review", Decision::Lost) => self.close(d, "lost", at_ms),
            _ => {}
        }
    }

    fn dispute_at(&mut self, id: &str, now_ms: i64) -> Result<usize, ApiError> {
        self.disputes_due(now_ms);
        self.disputes
            .by_id
            .get(id)
            .copied()
            .ok_or_else(|| dispute::no_such_dispute(id, "id"))
    }

    /// `GET /v1/disputes/{id}`, as of `now_ms`.
    pub(crate) fn retrieve_dispute(&mut self, id: &str, now_ms: i64) -> Option<String> {
        let d = self.dispute_at(id, now_ms).ok()?;
        Some(self.disputes.all[d].json_string(now_ms))
    }

    /// `POST /v1/disputes/{id}`: evidence staged, or submitted (`under_review` until the review
    /// ends), and metadata; only while the dispute needs a response.
    pub(crate) fn update_dispute(
        &mut self,
        id: &str,
        u: DisputeUpdate,
        now_ms: i64,
    ) -> Result<String, ApiError> {
        let d = self.dispute_at(id, now_ms)?;
        let review_ms = self.disputes.timing.review_ms;
        let dispute = &mut self.disputes.all[d];
        // Metadata may change at any time; evidence only while a response is awaited.
        if !dispute.needs_response() && !u.evidence.is_empty() {
            return Err(dispute::not_answerable(id, dispute.status));
        }
        for (k, v) in &u.metadata {
            crate::pi::metadata_param(&mut dispute.metadata, k, v)?;
        }
        dispute.evidence.extend(u.evidence);
        if u.submit && dispute.needs_response() {
            dispute.submission_count += 1;
            dispute.status = if dispute.inquiry() {
                "warning_under_review"
            } else {
                "under_review"
            };
            dispute.decided = match dispute
                .evidence
                .get("uncategorized_text")
                .map(String::as_str)
            {
                Some(WINNING_EVIDENCE) => Some(Decision::Won),
                Some(LOSING_EVIDENCE) => Some(Decision::Lost),
                _ => None,
            };
            if dispute.decided.is_some() {
                self.disputes
                    .set_timer(now_ms.saturating_add(review_ms), Timer::Review { d });
            }
        }
        self.emit_dispute(d, "charge.dispute.updated", now_ms);
        // A review of no time ends now: the answer shows the decision.
        self.disputes_due(now_ms);
        Ok(self.disputes.all[d].json_string(now_ms))
    }

    /// `POST /v1/disputes/{id}/close`: the merchant accepts the dispute (lost; an inquiry
    /// closes), only while it needs a response.
    pub(crate) fn close_dispute(&mut self, id: &str, now_ms: i64) -> Result<String, ApiError> {
        let d = self.dispute_at(id, now_ms)?;
        let dispute = &self.disputes.all[d];
        if !dispute.needs_response() {
            return Err(dispute::not_answerable(id, dispute.status));
        }
        let status = if dispute.inquiry() {
            "warning_closed"
        } else {
            "lost"
        };
        self.close(d, status, now_ms);
        Ok(self.disputes.all[d].json_string(now_ms))
    }

    /// The admin route's dispute of an existing succeeded charge, made now.
    pub(crate) fn dispute_charge(
        &mut self,
        req: &DisputeRequest,
        now_ms: i64,
    ) -> Result<String, ApiError> {
        self.disputes_due(now_ms);
        let at = self.position(&req.payment_intent).ok_or_else(|| {
            ApiError::no_such_payment_intent(&req.payment_intent).param("payment_intent")
        })?;
        self.settle_at(at, now_ms);
        let status = self.pis[at].status;
        if status != "succeeded" {
            return Err(ApiError::invalid(
                "payment_intent_unexpected_state",
                "payment_intent",
                format!(
                    "Only a succeeded PaymentIntent's charge can be disputed ({} is {status}).",
                    req.payment_intent
                ),
            ));
        }
        let received = self.pis[at].amount_received();
        let left = received - self.refunded_of(at, now_ms);
        let amount = req.amount.unwrap_or(left);
        if amount <= 0 || amount > received {
            return Err(ApiError::invalid(
                "amount_too_large",
                "amount",
                format!(
                    "A dispute's amount must be from 1 to the charge's {received} (its refunds left {left})."
                ),
            ));
        }
        let reason = req.reason.as_deref().unwrap_or("fraudulent");
        if !dispute::DISPUTE_REASONS.contains(&reason) {
            return Err(ApiError::invalid(
                "parameter_invalid_string",
                "reason",
                format!("Invalid reason: {reason}"),
            ));
        }
        let d = self.open_dispute(at, amount, reason, req.inquiry, now_ms);
        Ok(self.disputes.all[d].json_string(now_ms))
    }

    /// Stripe's `charge_disputed` when a dispute on the charge of the PaymentIntent at `at`
    /// blocks refunds (a chargeback not won; an inquiry leaves the charge refundable).
    pub(crate) fn refund_blocked_by_dispute(&mut self, at: usize, now_ms: i64) -> Option<ApiError> {
        self.disputes_due(now_ms);
        let of = self.disputes.of_intent.get(&at)?;
        of.iter()
            .map(|d| &self.disputes.all[*d])
            .find(|d| d.blocks_refunds())
            .map(|d| dispute::charge_disputed(&d.charge))
    }

    /// A refund of the whole charge of the PaymentIntent at `at` resolves its open inquiries:
    /// Stripe's disputes guide says refunding an inquiry's payment in full "marks the inquiry
    /// or retrieval as resolved" (closed here as `warning_closed`, the current API's closed
    /// status of an inquiry), with `charge.dispute.closed`.
    pub(crate) fn resolve_inquiries_if_refunded(&mut self, at: usize, now_ms: i64) {
        let Some(of) = self.disputes.of_intent.get(&at).cloned() else {
            return;
        };
        let received = self.pis[at].amount_received();
        if self.refunded_of(at, now_ms) < received {
            return;
        }
        for d in of {
            if matches!(
                self.disputes.all[d].status,
                "warning_needs_response" | "warning_under_review"
            ) {
                self.disputes.all[d].decided = None;
                self.close(d, "warning_closed", now_ms);
            }
        }
    }

    /// `GET /v1/disputes`: by PaymentIntent or charge (or all), in a `created` range, newest
    /// first, at most `limit`, older than the dispute `starting_after` if given.
    pub(crate) fn list_disputes(
        &mut self,
        filter: &DisputeFilter,
        created: CreatedRange,
        limit: usize,
        starting_after: Option<&str>,
        now_ms: i64,
    ) -> Result<ListedPage, ApiError> {
        self.disputes_due(now_ms);
        let after = match starting_after {
            None => None,
            Some(id) => Some(
                *self
                    .disputes
                    .by_id
                    .get(id)
                    .ok_or_else(|| dispute::no_such_dispute(id, "starting_after"))?,
            ),
        };
        let all = &self.disputes.all;
        let (page, has_more) = match filter {
            DisputeFilter::All => page_by_created(
                all.len(),
                !self.disputes.out_of_order,
                |d| all[d].created_ms,
                created,
                after,
                limit,
            ),
            DisputeFilter::PaymentIntent(_) | DisputeFilter::Charge(_) => {
                let of: Vec<usize> = match filter {
                    DisputeFilter::PaymentIntent(pi) => self
                        .position(pi)
                        .and_then(|at| self.disputes.of_intent.get(&at).cloned())
                        .unwrap_or_default(),
                    DisputeFilter::Charge(ch) => {
                        (0..all.len()).filter(|d| all[*d].charge == *ch).collect()
                    }
                    DisputeFilter::All => Vec::new(),
                };
                let mut newest_first: Vec<usize> = of
                    .into_iter()
                    .rev()
                    .filter(|d| after.is_none_or(|a| *d < a))
                    .filter(|d| {
                        created.from_ms <= all[*d].created_ms
                            && all[*d].created_ms < created.until_ms
                    })
                    .take(limit + 1)
                    .collect();
                let more = newest_first.len() > limit;
                newest_first.truncate(limit);
                (newest_first, more)
            }
        };
        let data = page
            .into_iter()
            .map(|d| all[d].json_string(now_ms))
            .collect();
        Ok(ListedPage { data, has_more })
    }

    /// Every dispute ever created, oldest first, as of `now_ms`.
    pub(crate) fn dispute_ledger(&mut self, now_ms: i64) -> Vec<DisputeEntry> {
        self.disputes_due(now_ms);
        self.disputes
            .all
            .iter()
            .map(|d| DisputeEntry {
                id: d.id.clone(),
                payment_intent: d.payment_intent.clone(),
                amount: d.amount,
                status: d.status.to_owned(),
                due_by_ms: d.due_by_ms,
                withdrawn: d.balance_transactions.iter().map(|b| -b.amount).sum(),
                created_ms: d.created_ms,
            })
            .collect()
    }
}

/// Which disputes a list names.
pub(crate) enum DisputeFilter {
    All,
    PaymentIntent(String),
    Charge(String),
}

/// One row of the dispute ledger ([`crate::StripeSim::dispute_ledger`], `GET /_sim/disputes`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DisputeEntry {
    /// `dp_...`
    pub id: String,
    /// The disputed PaymentIntent.
    pub payment_intent: String,
    /// The disputed amount in the smallest currency unit.
    pub amount: i64,
    /// Its status now.
    pub status: String,
    /// `evidence_details.due_by`, unix ms.
    pub due_by_ms: i64,
    /// What its balance transactions took from the merchant, net (the amount while withdrawn,
    /// 0 for an inquiry or once reinstated).
    pub withdrawn: i64,
    /// Creation time, unix ms.
    pub created_ms: i64,
}
