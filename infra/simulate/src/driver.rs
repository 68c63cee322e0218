//! The simulation loop on a virtual clock: orders arrive through the real checkout handler (HTTP
//! API v2 requests), a local event-source mapping feeds FIFO batches to the real charge handler
//! (deleting successes, honouring `batchItemFailures`, visibility timeouts, a receive limit and a
//! DLQ), and scheduled events tick the real reconciler handler. Faults are injected all along.
//!
//! A tick that fails (the handler returns an error) is counted (`failed_ticks`, an invariant:
//! it must stay 0) and the run goes on, as the next scheduled invocation would; the unreadable
//! records each tick counted are read from its EMF line (`UnreadableRecords`), as CloudWatch would.
//! An operator repairs unreadable records (`unreadable_record`) when their time comes.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::sqs::SqsEvent;
use charge::handler::ChargeFunction;
use charge_core::time::{Clock, ManualClock, Timestamp};
use charge_once::memory::MemoryDeadLetters;
use charge_once::ports::{IndexQuery, OperationStore};
use charge_once::reconciler::ReconcilerDeps;
use charge_once::telemetry::CapturedMetrics;
use checkout::door::Checkout;
use lambda_runtime::{Context, LambdaEvent};
use rand::rngs::SmallRng;
use reconciler::handler::ReconcilerFunction;
use serde_json::json;

use crate::auth_asks::{Fate, Next, TakeAsk};
use crate::faults::{Blackouts, Faults, Kind, BLACKOUT};
use crate::refund_asks::Ask;
use crate::sched::run_all;
use crate::source::{Delivered, EventSource};
use crate::stripe::SimStripe;
use crate::trace::Trace;
use crate::BoxError;
use charge_core::refund::watch::RefundWatch;

/// The Lambda event-source mapping's receive limit before a message goes to the DLQ.
pub const MAX_RECEIVES: u32 = 5;
/// How often EventBridge invokes the reconciler.
pub const TICK_EVERY: Duration = Duration::from_secs(300);

/// How often the reconciler ticks at least while the refund watch has a late failure to read:
/// a tick covers at most this much of settle times ([`charge_once::refund_watch::MAX_SPAN`]).
const WATCH_TICK_EVERY: Duration = charge_once::refund_watch::MAX_SPAN;

/// The most ticks the run makes at its end only because the dispute watch is behind (each lists
/// up to 6 h of creation time, so 24 catch up six days).
const DISPUTE_WATCH_CATCH_UP_TICKS: u64 = 24;
/// How far virtual time moves while messages are in flight.
const STEP: Duration = Duration::from_secs(30);
/// The longest Stripe holds an uncaptured authorization before it cancels it.
const LONGEST_HOLD: Duration = Duration::from_secs(7 * 24 * 3600);

/// What the loop needs: the handlers' dependencies (checkout, charge, reconciler; the events
/// function in `webhooks`) and the queue's consumer side.
pub struct Pipeline {
    pub clock: ManualClock,
    pub faults: Arc<Faults>,
    pub blackouts: Arc<Blackouts>,
    pub trace: Arc<Trace>,
    pub freezer: Arc<crate::faults::Freezer>,
    /// Checkouts the client retries with the next group of orders.
    pub late: Mutex<Vec<(u64, Order)>>,
    /// Which runnable invocation goes next.
    pub scheduler: Mutex<SmallRng>,
    pub seed: u64,
    pub checkout: Checkout,
    pub charge: ChargeFunction,
    /// Where the charge function parks poison messages.
    pub dead_letters: Arc<MemoryDeadLetters>,
    pub reconciler: ReconcilerDeps,
    /// Every metric the functions emitted, when the run draws its dashboard.
    pub tape: Option<Arc<crate::dashboard::MetricsTape>>,
    pub source: Arc<dyn EventSource>,
    /// The store without injected faults, for the loop's own bookkeeping.
    pub store: Arc<dyn OperationStore>,
    pub no_retry: bool,
    pub concurrency: usize,
    /// Stripe; a remote simulator's clock is moved to ours before each step.
    pub stripe: Arc<SimStripe>,
    /// Stripe's events to the events function, by EventBridge or webhook (`None` with
    /// `--events none`).
    pub webhooks: Option<Arc<crate::webhooks::Webhooks>>,
    /// The memory store, where an operator repairs unreadable records (`None` on `--backend aws`).
    pub operator: Option<Arc<crate::store::SimStore>>,
    /// Customers coming back to pay a declined intent (`customer_confirms_declined`).
    pub confirms: Arc<crate::faults::Confirms>,
    /// `--refunds`: the share of orders that get refund requests (0: none).
    pub refund_rate: f64,
    /// The refund door's answers, and the refunds it accepted.
    pub refund_answers: Arc<crate::refund_asks::Answers>,
    /// Refund requests waiting for their group (by group number).
    pub refunds_due: Mutex<BTreeMap<u64, Vec<(Order, Ask)>>>,
    /// The group of orders being submitted.
    pub group: AtomicU64,
    /// The bank behind `refund_canceled` cards: cancels their refunds waiting on it.
    pub bank: Option<crate::faults::Bank>,
    /// `--authorizations`: the share of orders checked out with `"capture": "manual"` (0: none).
    pub auth_rate: f64,
    /// The capture and cancel door's answers.
    pub take_answers: Arc<crate::auth_asks::Answers>,
    /// Captures and cancels waiting for their group (by group number), each with how many times
    /// it was asked already.
    pub takes_due: Mutex<BTreeMap<u64, Vec<DueTake>>>,
    /// `--disputes`: the share of orders the bank disputes (0: none; Stripe in this process
    /// only).
    pub dispute_rate: f64,
    /// The disputes opened, and the person's answers.
    pub disputes: Arc<crate::dispute_asks::Book>,
    /// Dispute steps waiting for their group (by group number).
    pub disputes_due: Mutex<BTreeMap<u64, Vec<DueDispute>>>,
    /// The reconciler's reads of open disputes, and the pages they had to raise.
    pub dispute_watch: Arc<crate::dispute_watch::Watch>,
    /// `--retries`: the share of declined orders charged again with another card (0: none).
    pub retry_rate: f64,
    /// The door's answers to the retries.
    pub retries: Arc<crate::retry_asks::Book>,
    /// Retry steps waiting for their group (by group number).
    pub retries_due: Mutex<BTreeMap<u64, Vec<DueRetry>>>,
}

/// A retry step waiting for its group: the order (its index), its plan, the step's place in it,
/// and how many times the step was asked already.
pub type DueRetry = (u64, Order, crate::retry_asks::Plan, usize, usize);

/// A dispute step waiting for its group: the order (its index), its plan, and the step.
pub type DueDispute = (u64, Order, crate::dispute_asks::Plan, DisputeStep);

/// The steps of a dispute, in order.
#[derive(Debug, Clone)]
pub enum DisputeStep {
    /// The bank disputes the charge (the attempt: its charge may not have succeeded yet).
    Open(usize),
    /// A refund asked through the door while the dispute is open.
    Refund,
    /// The person answers it (or not) in Stripe's dashboard.
    Answer(String),
}

/// A capture or cancel waiting for its group: the order, the request, and how many times it
/// was asked already.
pub type DueTake = (Order, TakeAsk, usize);

/// One order as submitted.
#[derive(Debug, Clone)]
pub struct Order {
    pub order_id: String,
    pub payment_method: &'static str,
    /// The card would be charged if everything worked (an authorization: never counted as
    /// charged, whether it is captured is the merchant's call).
    pub should_succeed: bool,
    /// Checked out with `"capture": "manual"`, and what becomes of the authorization.
    pub authorization: Option<Fate>,
}

/// Counts from the loop itself.
#[derive(Debug, Default)]
pub struct LoopCounts {
    pub reconciler_ticks: AtomicU64,
    pub batches: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub checkout_503: AtomicU64,
    pub poison_sent: AtomicU64,
    pub virtual_end: AtomicU64,
    /// Reconciler ticks whose handler returned an error.
    pub failed_ticks: AtomicU64,
    /// The first of those errors.
    pub first_failed_tick: Mutex<Option<String>>,
    /// Unreadable records counted by the ticks (their `UnreadableRecords` metric, summed).
    pub unreadable_counted: AtomicU64,
    /// Messages the charge function brought back in seconds (its `ReturnedSoon`, summed).
    pub returned_soon: AtomicU64,
    /// Refusals at the last receive it acknowledged and left to the reconciler
    /// (`LeftToReconciler`, summed).
    pub left_to_reconciler: AtomicU64,
    /// Authorizations paged, their deadline near (`AuthorizationNearDeadline`, summed): by the
    /// charge function and by the reconciler's ticks.
    pub pages_charge: AtomicU64,
    pub pages_reconciler: AtomicU64,
    /// The reconciler's refund watch: refunds read again at Stripe (`RefundsWatched`), and late
    /// failures it recorded and paged (`RefundFailedAfterSuccess`, Function=reconciler), summed.
    pub refunds_watched: AtomicU64,
    pub refund_late_failures_paged: AtomicU64,
    /// Never-attempted operations the reconciler left to a queue that is behind (each a write),
    /// those it sent again, and the deepest queue (visible messages) a tick read.
    pub waited_for_queue: AtomicU64,
    pub reenqueued: AtomicU64,
    pub deepest_queue: AtomicU64,
}

/// The charge function's metrics sink: its EMF lines' `ReturnedSoon` and `LeftToReconciler`,
/// summed as CloudWatch would, into the loop's counts.
pub struct ChargeMetrics(pub Arc<LoopCounts>);

impl charge_once::ports::MetricsSink for ChargeMetrics {
    fn emit(&self, line: String) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            return;
        };
        let n = |key: &str| {
            v.get(key)
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(0.0) as u64
        };
        self.0
            .returned_soon
            .fetch_add(n("ReturnedSoon"), Ordering::Relaxed);
        self.0
            .left_to_reconciler
            .fetch_add(n("LeftToReconciler"), Ordering::Relaxed);
        self.0
            .pages_charge
            .fetch_add(n("AuthorizationNearDeadline"), Ordering::Relaxed);
    }
}

/// The `index`-th order of a seed: its id and card, fixed by (seed, index) whatever the
/// interleaving, so orders are made when needed and never held.
pub fn plan_order(index: u64, seed: u64, faults: &Faults) -> Order {
    plan_order_with(index, seed, faults, 0.0)
}

/// [`plan_order`] with `auth_rate` of the orders authorized (`--authorizations`): those pay with
/// a Visa off-session (Stripe's deadline 4 days 18 hours) or, for half of them, a card Stripe
/// holds 7 days.
pub fn plan_order_with(index: u64, seed: u64, faults: &Faults, auth_rate: f64) -> Order {
    let order_id = format!("sim-{seed}-{index:06}");
    let (mut payment_method, should_succeed) = card_of(&order_id, faults);
    let authorization = crate::auth_asks::plan(seed, index, charged(index), auth_rate);
    if authorization.is_some()
        && payment_method == "pm_card_visa"
        && crate::auth_asks::seven_day_card(seed, index)
    {
        payment_method = crate::auth_asks::SEVEN_DAY_CARD;
    }
    Order {
        order_id,
        payment_method,
        should_succeed: should_succeed && authorization.is_none(),
        authorization,
    }
}

/// The index of order `order_id` of `seed` (`sim-<seed>-<index>`).
pub fn index_of(order_id: &str, seed: u64) -> Option<u64> {
    order_id.strip_prefix(&format!("sim-{seed}-"))?.parse().ok()
}

/// The card an order pays with, fixed by its id: (payment method, whether it would be charged
/// if everything worked).
pub fn card_of(order_id: &str, faults: &Faults) -> (&'static str, bool) {
    if faults.fixed(Kind::Decline, order_id) {
        ("pm_card_chargeDeclined", false)
    } else if faults.fixed(Kind::Stuck, order_id) {
        // Never completes off-session: a person must look after the stuck bound.
        ("pm_card_sim_requiresAction", false)
    } else if faults.fixed(Kind::Processing, order_id) {
        ("pm_card_processing_succeeds", true)
    } else if faults.fixed(Kind::RefundCanceled, order_id) {
        // Pays like a Visa; its refunds wait on the bank, which cancels them.
        ("pm_card_sim_refundRequiresAction", true)
    } else if faults.fixed(Kind::RefundFailsLater, order_id) {
        // Pays like a Visa; its refunds succeed, then fail 10 minutes later.
        ("pm_card_refundFail", true)
    } else if faults.fixed(Kind::RefundPending, order_id) {
        // Pays like a Visa; its refunds are `pending` for 10 minutes, then succeed.
        ("pm_card_pendingRefund", true)
    } else {
        ("pm_card_visa", true)
    }
}

pub fn checkout_request(order: &Order, amount: i64) -> ApiGatewayV2httpRequest {
    let body = checkout_body(order.payment_method, amount, order.authorization.is_some());
    let path = format!("/orders/{}/charge", order.order_id);
    crate::order_service::request(&order.order_id, path, body)
}

/// The checkout request's JSON body, written directly: the bytes `json!({...}).to_string()`
/// writes (keys in order, the card's name escaped as JSON), without building the tree per order;
/// `manual`: with `"capture": "manual"`.
pub(crate) fn checkout_body(payment_method: &str, amount: i64, manual: bool) -> String {
    let card = serde_json::to_string(payment_method).unwrap_or_default();
    let capture = if manual { r#""capture":"manual","# } else { "" };
    format!(
        r#"{{"amount":{amount},{capture}"currency":"usd","customer_id":"cus_simulated","payment_method":{card}}}"#
    )
}

/// What order `index` is charged, minor units.
pub fn charged(index: u64) -> i64 {
    1_000 + (index % 9_000) as i64
}

impl Pipeline {
    async fn submit(&self, index: u64, order: &Order, counts: &LoopCounts) {
        let amount = charged(index);
        self.submit_charge(index, order, amount, counts).await;
        self.plan_refunds(index, order).await;
        self.plan_takes(order).await;
        self.plan_dispute(index, order);
        self.plan_retries(index, order).await;
    }

    /// The order's retries with other cards, if its card is declined and the seed retries it:
    /// the one asked while its first attempt is unsettled now, the others queued for their group.
    async fn plan_retries(&self, index: u64, order: &Order) {
        use crate::retry_asks::{plan, Answer, DECLINED_FIRST, FIRST_DELAY};
        if order.payment_method != DECLINED_FIRST || order.authorization.is_some() {
            return;
        }
        let Some(plan) = plan(self.seed, index, self.retry_rate) else {
            return;
        };
        self.retries.plan(&order.order_id, plan.kind);
        if let Some(card) = plan.at_checkout {
            // Its message not yet delivered: the first attempt is `pending`.
            let answer = self.ask_retry(index, order, card).await;
            if matches!(answer, Answer::Started(_)) {
                self.trace.event(
                    &order.order_id,
                    "retry",
                    format_args!("a retry started an attempt while the first was unsettled"),
                );
            }
        }
        self.retry_later(FIRST_DELAY, (index, order.clone(), plan, 0, 0));
    }

    fn retry_later(&self, delay: u64, step: DueRetry) {
        let group = self.group.load(Ordering::Relaxed) + delay;
        let mut due = self.retries_due.lock().unwrap_or_else(|p| p.into_inner());
        due.entry(group).or_default().push(step);
    }

    /// One retry through the checkout door with `card`; a 503 is sent again once, as a client
    /// does.
    async fn ask_retry(&self, index: u64, order: &Order, card: &str) -> crate::retry_asks::Answer {
        use crate::retry_asks::Answer;
        let send = || async {
            let body = checkout_body(card, charged(index), false);
            let path = format!("/orders/{}/charge", order.order_id);
            let request = crate::order_service::request(&order.order_id, path, body);
            let response = checkout::handler::handle(
                &self.checkout,
                LambdaEvent::new(request, Context::default()),
            )
            .await;
            let answer = self.retries.note(&response);
            self.trace.event(
                &order.order_id,
                "retry",
                format_args!("{card} HTTP {} {answer:?}", response.status_code),
            );
            answer
        };
        match send().await {
            Answer::Unavailable => send().await,
            answer => answer,
        }
    }

    /// The retry steps due by group `group`, all at once (the scheduler interleaves them: a
    /// race's two retries among them); a step refused because the order's latest attempt is
    /// still unsettled is asked again a group later.
    async fn retry_due(&self, group: u64) {
        use crate::retry_asks::{Answer, PATIENCE, STEP_DELAY};
        let steps: Vec<DueRetry> = {
            let mut due = self.retries_due.lock().unwrap_or_else(|p| p.into_inner());
            let later = due.split_off(&(group + 1));
            std::mem::replace(&mut *due, later)
                .into_values()
                .flatten()
                .collect()
        };
        let asks: Vec<(usize, u64, &Order, &'static str)> = steps
            .iter()
            .enumerate()
            .flat_map(|(k, (index, order, plan, step, _))| {
                plan.steps[*step]
                    .iter()
                    .map(move |card| (k, *index, order, *card))
            })
            .collect();
        let futures = asks
            .iter()
            .map(|(_, index, order, card)| self.ask_retry(*index, order, card))
            .collect();
        let answers = run_all(&self.scheduler, futures).await;
        let mut by_step: Vec<Vec<Answer>> = vec![Vec::new(); steps.len()];
        for ((k, ..), answer) in asks.iter().zip(answers) {
            by_step[*k].push(answer);
        }
        let book = &self.retries;
        for ((index, order, plan, step, tries), answers) in steps.into_iter().zip(by_step) {
            let started = answers
                .iter()
                .filter(|a| matches!(a, Answer::Started(_)))
                .count();
            if answers.len() > 1 {
                match started {
                    0 => {}
                    1 => {
                        book.races_one_started.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => book.both_started(&order.order_id),
                }
            }
            let unsettled = answers
                .iter()
                .all(|a| matches!(a, Answer::InFlight | Answer::Unavailable));
            if started == 0 && unsettled {
                if tries + 1 < PATIENCE {
                    book.asked_again.fetch_add(1, Ordering::Relaxed);
                    self.retry_later(1, (index, order, plan, step, tries + 1));
                } else {
                    book.gave_up.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            let goes_on = answers
                .iter()
                .any(|a| matches!(a, Answer::Started(_) | Answer::Returned));
            if goes_on && step + 1 < plan.steps.len() {
                self.retry_later(STEP_DELAY, (index, order, plan, step + 1, 0));
            }
        }
    }

    /// Whether retries are still to be asked.
    fn retries_waiting(&self) -> bool {
        !self
            .retries_due
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// The order's dispute, if the seed disputes it: queued for its group.
    fn plan_dispute(&self, index: u64, order: &Order) {
        if order.authorization.is_some() || self.stripe.local_sim().is_none() {
            return;
        }
        let Some(plan) = crate::dispute_asks::plan(self.seed, index, self.dispute_rate) else {
            return;
        };
        self.dispute_later(
            crate::dispute_asks::DISPUTE_DELAY,
            (index, order.clone(), plan, DisputeStep::Open(0)),
        );
    }

    fn dispute_later(&self, delay: u64, step: DueDispute) {
        let group = self.group.load(Ordering::Relaxed) + delay;
        let mut due = self.disputes_due.lock().unwrap_or_else(|p| p.into_inner());
        due.entry(group).or_default().push(step);
    }

    /// The dispute steps due by group `group`, one after the other (the bank and the person act
    /// on Stripe directly; the refunds go through the door).
    async fn dispute_due(&self, group: u64) -> Result<(), BoxError> {
        let steps: Vec<DueDispute> = {
            let mut due = self.disputes_due.lock().unwrap_or_else(|p| p.into_inner());
            let later = due.split_off(&(group + 1));
            std::mem::replace(&mut *due, later)
                .into_values()
                .flatten()
                .collect()
        };
        for (index, order, plan, step) in steps {
            self.dispute_step(index, order, plan, step).await?;
        }
        Ok(())
    }

    async fn dispute_step(
        &self,
        index: u64,
        order: Order,
        plan: crate::dispute_asks::Plan,
        step: DisputeStep,
    ) -> Result<(), BoxError> {
        use crate::dispute_asks::{Opened, ANSWER_DELAY, ATTEMPTS, REFUND_DELAY};
        let Some(sim) = self.stripe.local_sim() else {
            return Ok(());
        };
        let book = &self.disputes;
        match step {
            DisputeStep::Open(attempt) => {
                // The order's charge: its latest attempt (a declined order charged again is
                // disputed on the attempt that paid).
                let order_id = charge_core::domain::OrderId::parse(&order.order_id)?;
                let intent = self
                    .store
                    .charge_of(&order_id)
                    .await
                    .ok()
                    .flatten()
                    .filter(|op| op.status == charge_core::operation::OperationStatus::Succeeded)
                    .and_then(|op| op.external_id.map(|pi| pi.as_str().to_owned()));
                let opened = match &intent {
                    Some(pi) => sim
                        .dispute_charge(&stripe_sim::DisputeRequest {
                            payment_intent: pi.clone(),
                            amount: None,
                            reason: None,
                            inquiry: plan.fate.inquiry(),
                        })
                        .ok()
                        .and_then(|json| serde_json::from_str::<serde_json::Value>(&json).ok()),
                    None => None,
                };
                let (Some(pi), Some(dispute)) = (intent, opened) else {
                    if attempt + 1 < ATTEMPTS {
                        self.dispute_later(1, (index, order, plan, DisputeStep::Open(attempt + 1)));
                    } else {
                        book.not_disputable.fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(());
                };
                let id = dispute["id"].as_str().unwrap_or_default().to_owned();
                self.trace.event(
                    &order.order_id,
                    "dispute",
                    format_args!("{id} opened by the bank ({})", plan.fate.name()),
                );
                book.note(
                    &order.order_id,
                    Opened {
                        dispute_id: id.clone(),
                        payment_intent: pi,
                        fate: plan.fate,
                        refund_during: plan.refund_during,
                        amount: dispute["amount"].as_i64().unwrap_or_default(),
                        charged: charged(index),
                    },
                );
                if plan.refund_during {
                    self.dispute_later(
                        REFUND_DELAY,
                        (index, order.clone(), plan, DisputeStep::Refund),
                    );
                }
                self.dispute_later(ANSWER_DELAY, (index, order, plan, DisputeStep::Answer(id)));
            }
            DisputeStep::Refund => {
                let amount = (charged(index) / 10).max(1);
                let ask = Ask {
                    order_id: order.order_id.clone(),
                    refund_id: crate::dispute_asks::REFUND_ID.to_owned(),
                    amount: Some(amount),
                };
                self.ask_refund(&order, &ask).await;
            }
            DisputeStep::Answer(id) => {
                let Some(answer) = plan.fate.answer() else {
                    return Ok(());
                };
                let answered = match answer {
                    Some(form) => sim.update_dispute_in_process(&id, &form),
                    None => sim.close_dispute_in_process(&id),
                };
                book.answers.fetch_add(1, Ordering::Relaxed);
                if answered.status != 200 {
                    book.answers_refused.fetch_add(1, Ordering::Relaxed);
                }
                self.trace.event(
                    &order.order_id,
                    "dispute",
                    format_args!(
                        "{id} answered ({}): HTTP {}",
                        plan.fate.name(),
                        answered.status
                    ),
                );
            }
        }
        Ok(())
    }

    /// Whether dispute steps are still to come.
    fn disputes_waiting(&self) -> bool {
        !self
            .disputes_due
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// The order's captures and cancels: a cancel before the charge is sent now, the others
    /// queued for their group.
    async fn plan_takes(&self, order: &Order) {
        let Some(fate) = order.authorization else {
            return;
        };
        if fate == Fate::CancelAtCheckout {
            if self.ask_take(order, &TakeAsk::Cancel).await == Next::AskAgain {
                self.take_later(order, TakeAsk::Cancel, 1);
            }
            return;
        }
        for ask in fate.later_asks() {
            self.take_later(order, ask, 0);
        }
    }

    /// Queues `ask` for the group its `attempt` waits for (none past the last).
    fn take_later(&self, order: &Order, ask: TakeAsk, attempt: usize) {
        let Some(delay) = crate::auth_asks::ASK_DELAYS.get(attempt) else {
            return;
        };
        let group = self.group.load(Ordering::Relaxed) + delay;
        let mut due = self.takes_due.lock().unwrap_or_else(|p| p.into_inner());
        due.entry(group)
            .or_default()
            .push((order.clone(), ask, attempt + 1));
    }

    /// One capture or cancel through the real door; a 503 is sent again once, as a client does.
    async fn ask_take(&self, order: &Order, ask: &TakeAsk) -> Next {
        let send = || async {
            let response = checkout::handler::handle(
                &self.checkout,
                LambdaEvent::new(ask.request(&order.order_id), Context::default()),
            )
            .await;
            let next = self.take_answers.note(&order.order_id, ask, &response);
            self.trace.event(
                &order.order_id,
                ask.kind(),
                format_args!("{ask:?} HTTP {}", response.status_code),
            );
            (response.status_code, next)
        };
        match send().await {
            (503, _) => send().await.1,
            (_, next) => next,
        }
    }

    /// The captures and cancels due by group `group`, all at once (the scheduler interleaves
    /// them: a race's capture and cancel among them); those the door answers "not yet" are
    /// asked again later.
    async fn ask_due_takes(&self, group: u64) {
        let asks: Vec<(Order, TakeAsk, usize)> = {
            let mut due = self.takes_due.lock().unwrap_or_else(|p| p.into_inner());
            let later = due.split_off(&(group + 1));
            std::mem::replace(&mut *due, later)
                .into_values()
                .flatten()
                .collect()
        };
        let futures = asks.iter().map(|(o, a, _)| self.ask_take(o, a)).collect();
        let answers = run_all(&self.scheduler, futures).await;
        for ((order, ask, attempt), next) in asks.into_iter().zip(answers) {
            if next == Next::AskAgain {
                self.take_later(&order, ask, attempt);
            }
        }
    }

    /// Whether captures or cancels are still to be asked.
    fn takes_waiting(&self) -> bool {
        !self
            .takes_due
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// The order's refund requests: those asked at once (its charge still pending) now, the
    /// others queued for their group.
    async fn plan_refunds(&self, index: u64, order: &Order) {
        if order.authorization.is_some() {
            // An authorization is captured or canceled, not refunded.
            return;
        }
        let Some(plan) = crate::refund_asks::plan(
            self.seed,
            index,
            &order.order_id,
            charged(index),
            self.refund_rate,
        ) else {
            return;
        };
        for ask in &plan.early {
            self.ask_refund(order, ask).await;
        }
        let group = self.group.load(Ordering::Relaxed);
        let mut due = self.refunds_due.lock().unwrap_or_else(|p| p.into_inner());
        for (wave, delay) in plan.waves.into_iter().zip(crate::refund_asks::WAVE_DELAYS) {
            let asks = due.entry(group + delay).or_default();
            asks.extend(wave.into_iter().map(|a| (order.clone(), a)));
        }
    }

    /// One refund request through the real door; a 503 is sent again once, as a client does.
    async fn ask_refund(&self, order: &Order, ask: &Ask) {
        let send = || async {
            let response = checkout::handler::handle(
                &self.checkout,
                LambdaEvent::new(ask.request(), Context::default()),
            )
            .await;
            let status = self.refund_answers.note(ask, &response);
            self.trace.event(
                &order.order_id,
                "refund",
                format_args!("{} {:?} HTTP {status}", ask.refund_id, ask.amount),
            );
            status
        };
        if send().await == 503 {
            send().await;
        }
    }

    /// The refund requests due by group `group`, all at once (the scheduler interleaves them).
    async fn ask_due_refunds(&self, group: u64) {
        let asks: Vec<(Order, Ask)> = {
            let mut due = self.refunds_due.lock().unwrap_or_else(|p| p.into_inner());
            let later = due.split_off(&(group + 1));
            std::mem::replace(&mut *due, later)
                .into_values()
                .flatten()
                .collect()
        };
        let futures = asks.iter().map(|(o, a)| self.ask_refund(o, a)).collect();
        run_all(&self.scheduler, futures).await;
    }

    /// Whether refund requests are still to be asked.
    fn refunds_waiting(&self) -> bool {
        !self
            .refunds_due
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    async fn submit_charge(&self, index: u64, order: &Order, amount: i64, counts: &LoopCounts) {
        let submit = || async {
            let status = checkout::handler::handle(
                &self.checkout,
                LambdaEvent::new(checkout_request(order, amount), Context::default()),
            )
            .await
            .status_code;
            self.trace
                .event(&order.order_id, "checkout", format_args!("HTTP {status}"));
            status
        };
        let status = submit().await;
        if status == 503 {
            counts.checkout_503.fetch_add(1, Ordering::Relaxed);
            // Half the clients retry the same request; the reconciler recovers the others.
            if index % 2 == 0 {
                submit().await;
            }
        } else if self.faults.roll(Kind::DuplicateDelivery) {
            if self.faults.roll_half() {
                // The order service retries later (its own timeout fired): with the next orders,
                // after this one has most likely been charged.
                self.trace.event(
                    &order.order_id,
                    "fault",
                    format_args!("duplicate_delivery: the same checkout again, later"),
                );
                self.late
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((index, order.clone()));
                return;
            }
            // The customer double-clicks: the same request again.
            self.trace.event(
                &order.order_id,
                "fault",
                format_args!("duplicate_delivery: the same checkout again"),
            );
            submit().await;
        }
        if self.faults.roll(Kind::Poison) {
            // Garbage in the order's own FIFO group, right behind its charge message: it must
            // never hold the group back.
            let n = counts.poison_sent.fetch_add(1, Ordering::Relaxed);
            let _ = self
                .source
                .send_raw(
                    "{\"v\":1,\"operation_id\":\"garbage",
                    &order.order_id,
                    &format!("poison-{n}"),
                )
                .await;
        }
    }

    /// A checkout retried later: the same request, nothing else.
    async fn resubmit(&self, index: u64, order: &Order) {
        let amount = charged(index);
        let status = checkout::handler::handle(
            &self.checkout,
            LambdaEvent::new(checkout_request(order, amount), Context::default()),
        )
        .await
        .status_code;
        self.trace.event(
            &order.order_id,
            "checkout",
            format_args!("HTTP {status} (late retry)"),
        );
    }

    /// One scheduled reconciler invocation. A failed one is counted, not fatal: the schedule
    /// invokes it again 5 minutes later.
    async fn tick(&self, counts: &LoopCounts) {
        if let Some(bank) = &self.bank {
            bank.cancel_waiting(self.clock.now());
        }
        if self.no_retry {
            return;
        }
        let mut event = EventBridgeEvent::<serde_json::Value>::default();
        event.detail_type = "Scheduled Event".into();
        event.source = "aws.events".into();
        event.detail = json!({});
        // The function as main.rs wires it, its metrics captured for this invocation: the tick's
        // `UnreadableRecords`, summed as CloudWatch would.
        let metrics = Arc::new(CapturedMetrics::new());
        let function = ReconcilerFunction {
            reconciler: self.reconciler.clone(),
            metrics: metrics.clone(),
        };
        let result =
            reconciler::handler::handle(&function, LambdaEvent::new(event, Context::default()))
                .await;
        match result {
            Ok(answer) => {
                let field = |name: &str| answer[name].as_u64().unwrap_or(0);
                counts
                    .waited_for_queue
                    .fetch_add(field("waited_for_queue"), Ordering::Relaxed);
                counts
                    .reenqueued
                    .fetch_add(field("reenqueued"), Ordering::Relaxed);
                counts
                    .deepest_queue
                    .fetch_max(field("queue_visible"), Ordering::Relaxed);
                if let Some(tape) = &self.tape {
                    for line in metrics.lines() {
                        tape.record(&line);
                    }
                }
                counts.reconciler_ticks.fetch_add(1, Ordering::Relaxed);
                let unreadable = metrics.sum("UnreadableRecords", &[]) as u64;
                let pages = metrics.sum("AuthorizationNearDeadline", &[]) as u64;
                self.dispute_watch.tick_ends(
                    metrics.sum("DisputeDeadlineNear", &[]) as u64,
                    metrics.sum("DisputeDeadlinePassed", &[]) as u64,
                );
                self.dispute_watch.watched(
                    metrics.sum("DisputeWatchRateLimited", &[]) as u64,
                    metrics.sum("DisputeWatchRetried", &[]) as u64,
                    metrics.sum("DisputeWatchLag", &[]) as u64,
                );
                counts.pages_reconciler.fetch_add(pages, Ordering::Relaxed);
                let reconciler = [("Function", "reconciler")];
                counts.refunds_watched.fetch_add(
                    metrics.sum("RefundsWatched", &reconciler) as u64,
                    Ordering::Relaxed,
                );
                counts.refund_late_failures_paged.fetch_add(
                    metrics.sum("RefundFailedAfterSuccess", &reconciler) as u64,
                    Ordering::Relaxed,
                );
                counts
                    .unreadable_counted
                    .fetch_add(unreadable, Ordering::Relaxed);
                if unreadable == 0 {
                    self.trace.event("", "tick", format_args!(""));
                } else {
                    self.trace.event(
                        "",
                        "tick",
                        format_args!("{unreadable} unreadable records counted"),
                    );
                }
            }
            Err(e) => {
                counts.failed_ticks.fetch_add(1, Ordering::Relaxed);
                let error = format!("reconciler tick: {e}");
                self.trace
                    .event("", "tick", format_args!("FAILED: {error}"));
                counts
                    .first_failed_tick
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(error);
            }
        }
    }

    /// The operator's repairs of unreadable records whose time has come.
    fn repair_due(&self) {
        if let Some(store) = &self.operator {
            for key in store.repair_due(self.clock.now()) {
                self.trace.event(
                    key.order_id.as_str(),
                    "operator",
                    format_args!("repaired the unreadable record: readable again"),
                );
            }
        }
    }

    /// One batch through the charge handler, as the event-source mapping does it. Returns false
    /// when nothing was visible.
    async fn deliver_batch(&self, counts: &LoopCounts) -> Result<bool, BoxError> {
        let batch: Vec<Delivered> = self.source.receive(10).await?;
        if batch.is_empty() {
            return Ok(false);
        }
        let batch_no = counts.batches.fetch_add(1, Ordering::Relaxed) + 1;
        for d in &batch {
            self.trace.event(
                &d.group_id,
                "deliver",
                format_args!(
                    "{} (receive {}) in batch {batch_no} of {}",
                    d.message_id,
                    d.receive_count,
                    batch.len()
                ),
            );
        }
        let failed = self.invoke(&batch, batch_no).await;
        for d in &batch {
            let item_failed = failed.iter().any(|id| *id == d.message_id || id.is_empty());
            let what = self.acknowledge(d, item_failed, counts).await?;
            self.trace.event(
                &d.group_id,
                "delivered",
                format_args!("{} {what}", d.message_id),
            );
        }
        Ok(true)
    }

    /// The charge handler on the batch; with the `concurrent_invocation` fault, the same batch
    /// in two invocations at once. Returns the batch item failures (a message is done if either
    /// invocation finished it).
    async fn invoke(&self, batch: &[Delivered], batch_no: u64) -> Vec<String> {
        let mut event = SqsEvent::default();
        event.records = batch.iter().map(Delivered::to_record).collect();
        let invoke = |event: SqsEvent| {
            charge::handler::handle(&self.charge, LambdaEvent::new(event, Context::default()))
        };
        if !self.faults.roll(Kind::ConcurrentInvocation) {
            return invoke(event)
                .await
                .batch_item_failures
                .into_iter()
                .map(|f| f.item_identifier)
                .collect();
        }
        self.trace.event(
            "",
            "fault",
            format_args!("concurrent_invocation of batch {batch_no}"),
        );
        for d in batch {
            self.trace.event(
                &d.group_id,
                "fault",
                format_args!("concurrent_invocation: batch {batch_no} runs twice at once"),
            );
        }
        self.freezer.arm();
        let mut both = run_all(&self.scheduler, vec![invoke(event.clone()), invoke(event)]).await;
        self.freezer.disarm();
        let b = both.pop().unwrap_or_default();
        let a = both.pop().unwrap_or_default();
        let b_failed: Vec<_> = b
            .batch_item_failures
            .iter()
            .map(|f| &f.item_identifier)
            .collect();
        a.batch_item_failures
            .iter()
            .filter(|f| b_failed.contains(&&f.item_identifier))
            .map(|f| f.item_identifier.clone())
            .collect()
    }

    /// What the event-source mapping does with one message after the invocation: deleted,
    /// visible again after the timeout, or to the DLQ at the receive limit. Returns it, for the
    /// trace.
    async fn acknowledge(
        &self,
        d: &Delivered,
        item_failed: bool,
        counts: &LoopCounts,
    ) -> Result<&'static str, BoxError> {
        Ok(if self.no_retry {
            // Naive consumer: whatever happened, the message is gone.
            self.source.delete(&d.receipt).await?;
            "deleted (naive consumer)"
        } else if !item_failed {
            if self.faults.roll(Kind::DuplicateDelivery) {
                // Not deleted (a delete lost, a consumer that died): delivered again later.
                "acknowledged, FAULT duplicate_delivery: not deleted"
            } else {
                self.source.delete(&d.receipt).await?;
                "acknowledged, deleted"
            }
        } else if d.receive_count >= MAX_RECEIVES {
            // The DLQ takes it; the operation is still in the unknown index.
            counts.dead_lettered.fetch_add(1, Ordering::Relaxed);
            self.source.delete(&d.receipt).await?;
            "batch item failure, receive limit: to the DLQ"
        } else {
            "batch item failure: visible again after the timeout"
        })
    }

    /// Batches until nothing is visible, `concurrency` consumers at once, and Stripe's due
    /// event deliveries (and Lambda's retries of failed EventBridge invocations) beside them, so
    /// an event races the charge function on the same operation, as in production.
    async fn drain(&self, counts: &LoopCounts) -> Result<(), BoxError> {
        let webhooks_due = self
            .webhooks
            .as_ref()
            .is_some_and(|w| w.any_due(self.clock.now().as_millis()));
        if self.source.depth().await? == 0 && !webhooks_due {
            return Ok(());
        }
        type Work<'a> =
            std::pin::Pin<Box<dyn std::future::Future<Output = Result<bool, BoxError>> + 'a>>;
        loop {
            let mut any = false;
            let mut workers: Vec<Work<'_>> = (0..self.concurrency)
                .map(|_| Box::pin(self.deliver_batch(counts)) as Work<'_>)
                .collect();
            if let Some(w) = &self.webhooks {
                workers.push(Box::pin(async move { Ok(w.deliver_due().await) }));
            }
            for result in run_all(&self.scheduler, workers).await {
                any |= result?;
            }
            if !any {
                return Ok(());
            }
        }
    }

    /// Whether any operation is unsettled (and not in review), and the earliest moment the
    /// automatic path has something to do: a due operation that is reachable, or a blackout's end.
    async fn outlook(&self) -> Result<(bool, Option<Timestamp>), BoxError> {
        let now = self.clock.now();
        let (any, due) = match &self.operator {
            // The memory store reads the same pages in place (no record copied out).
            Some(store) => store.outlook(50, |id| self.blackouts.active(id, now)),
            None => self.first_due(now).await?,
        };
        let repair = self.operator.as_ref().and_then(|s| s.next_repair());
        let wake = [
            due,
            self.blackouts.next_end(now),
            repair,
            self.confirms.next_due(),
        ]
        .into_iter()
        .flatten()
        .min();
        Ok((any, wake))
    }

    /// Whether the unknown index lists anything, and the due time of its first operation that
    /// is reachable: its pages read until one lists such an operation.
    async fn first_due(&self, now: Timestamp) -> Result<(bool, Option<Timestamp>), BoxError> {
        let mut any = false;
        let mut due = None;
        let mut cursor = None;
        // Pages come oldest due first: the first reachable operation has the earliest due time.
        while due.is_none() {
            let page = self
                .store
                .query_index(IndexQuery::Unsettled, cursor, 50)
                .await?;
            any |= !page.operations.is_empty() || !page.unreadable.is_empty();
            due = page
                .operations
                .iter()
                .find(|op| !self.blackouts.active(&op.operation_id, now))
                .and_then(|op| op.next_due_at);
            cursor = page.next;
            if cursor.is_none() {
                break;
            }
        }
        Ok((any, due))
    }

    /// Runs the orders through, then lets time pass until every operation has converged or the
    /// bound (the key window, search's lag, the longest blackout and two hours of ticks) is hit.
    pub async fn run(&self, orders: u64, counts: &LoopCounts) -> Result<(), BoxError> {
        let last_tick = self.arrive(orders, counts).await?;
        self.settle(last_tick, counts).await?;
        counts
            .virtual_end
            .store(self.clock.now().as_millis() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The orders, a group at a time through checkout, each group's messages drained before a
    /// second passes. Returns when the reconciler last ticked.
    async fn arrive(&self, orders: u64, counts: &LoopCounts) -> Result<Timestamp, BoxError> {
        let progress = std::io::stderr().is_terminal() && orders >= 1000;
        let chunk = (self.concurrency as u64 * 10).max(10);
        let mut last_tick = self.clock.now();
        let mut next = 0u64;
        while next < orders {
            let group: Vec<(u64, Order)> = (next..(next + chunk).min(orders))
                .map(|i| {
                    (
                        i,
                        plan_order_with(i, self.seed, &self.faults, self.auth_rate),
                    )
                })
                .collect();
            next += group.len() as u64;
            self.stripe.sync_clock(&self.clock).await?;
            let late = std::mem::take(&mut *self.late.lock().unwrap_or_else(|p| p.into_inner()));
            let submissions = group
                .iter()
                .map(|(i, o)| self.submit(*i, o, counts))
                .collect();
            let retries = late.iter().map(|(i, o)| self.resubmit(*i, o)).collect();
            run_all(&self.scheduler, retries).await;
            self.ask_due_refunds(self.group.load(Ordering::Relaxed))
                .await;
            self.ask_due_takes(self.group.load(Ordering::Relaxed)).await;
            self.dispute_due(self.group.load(Ordering::Relaxed)).await?;
            self.retry_due(self.group.load(Ordering::Relaxed)).await;
            run_all(&self.scheduler, submissions).await;
            self.end_group(&mut last_tick, counts).await?;
            if progress && next % (chunk * 64) < chunk {
                eprint!("\rorders {next:>8}/{orders}");
            }
        }
        if progress {
            eprintln!();
        }
        // The refund, capture and cancel requests of the last groups, a group's second apart,
        // as if orders went on.
        while self.refunds_waiting()
            || self.takes_waiting()
            || self.disputes_waiting()
            || self.retries_waiting()
        {
            self.stripe.sync_clock(&self.clock).await?;
            let group = self.group.load(Ordering::Relaxed);
            self.ask_due_refunds(group).await;
            self.ask_due_takes(group).await;
            self.dispute_due(group).await?;
            self.retry_due(group).await;
            self.end_group(&mut last_tick, counts).await?;
        }
        Ok(last_tick)
    }

    /// After a group's requests: its messages drained, a second passes, what is due happens.
    async fn end_group(
        &self,
        last_tick: &mut Timestamp,
        counts: &LoopCounts,
    ) -> Result<(), BoxError> {
        self.drain(counts).await?;
        self.clock.advance(Duration::from_secs(1));
        self.group.fetch_add(1, Ordering::Relaxed);
        self.repair_due();
        self.confirms.visit_due().await;
        if self.clock.now().since(*last_tick) >= TICK_EVERY {
            self.tick(counts).await;
            *last_tick = self.clock.now();
        }
        Ok(())
    }

    /// Time passes, in steps while messages are in flight and in jumps to the next thing due
    /// otherwise, until nothing is left to settle and no customer is still to come back, or the
    /// bound.
    async fn settle(&self, mut last_tick: Timestamp, counts: &LoopCounts) -> Result<(), BoxError> {
        let mut deadline = self.settle_deadline();
        let mut catch_up = 0;
        loop {
            self.stripe.sync_clock(&self.clock).await?;
            self.drain(counts).await?;
            let (unsettled, wake) = self.outlook().await?;
            let now = self.clock.now();
            // A customer still to come back keeps the run going: what they pay must be judged.
            let customers = self.confirms.next_due().is_some();
            // So does a refund still to fail after it succeeded, until the refund watch's next
            // read of it has come (the run judges that every late failure is recorded).
            let watch_until = self.late_failures_watched_until();
            deadline = deadline.max(watch_until.unwrap_or(deadline));
            let watching = watch_until.is_some_and(|until| now < until);
            // So does the dispute watch still behind after the last tick (its span's list
            // refused, or the clock jumped further than a tick lists): production's schedule
            // ticks every 5 minutes until it is level, and so does the run, a bounded number of
            // times (counted: the dispute watch line's catch-up ticks).
            let watch_behind =
                self.dispute_watch.behind() && catch_up < DISPUTE_WATCH_CATCH_UP_TICKS;
            let only_watch = !unsettled && !customers && !watching;
            if (only_watch && !watch_behind) || now >= deadline {
                return Ok(());
            }
            let depth = self.source.depth().await?;
            if self.no_retry && depth == 0 {
                return Ok(());
            }
            if depth == 0 {
                // Nothing in flight: jump to the next scheduled tick at which anything is due,
                // or to Stripe's next event delivery (or Lambda retry) if that comes first.
                let mut target = wake
                    .unwrap_or(deadline)
                    .max(last_tick.plus(TICK_EVERY))
                    .max(now.plus(Duration::from_secs(1)))
                    .min(deadline);
                if let Some(due) = self.webhooks.as_ref().and_then(|w| w.next_due_ms()) {
                    target = target
                        .min(Timestamp::from_millis(due).max(now.plus(Duration::from_millis(1))));
                }
                if watching {
                    // The watch covers at most an hour of settle times per tick: tick hourly.
                    target = target.min(last_tick.plus(WATCH_TICK_EVERY).max(now.plus(TICK_EVERY)));
                }
                if only_watch {
                    // Only the dispute watch is behind: the schedule's next tick.
                    target = target.min(
                        last_tick
                            .plus(TICK_EVERY)
                            .max(now.plus(Duration::from_secs(1))),
                    );
                }
                self.clock.set(target);
            } else {
                self.clock.advance(STEP);
            }
            self.repair_due();
            self.stripe.sync_clock(&self.clock).await?;
            self.confirms.visit_due().await;
            if self.clock.now().since(last_tick) >= TICK_EVERY {
                self.stripe.sync_clock(&self.clock).await?;
                self.tick(counts).await;
                last_tick = self.clock.now();
                if only_watch {
                    catch_up += 1;
                    self.dispute_watch
                        .catch_up_ticks
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// When the refund watch has read every refund Stripe is still to fail after it succeeded:
    /// the last late failure, then the watch's interval (the read after it) and two hours of
    /// ticks. `None` when no late failure is due (or Stripe is a separate simulator).
    fn late_failures_watched_until(&self) -> Option<Timestamp> {
        let last = self.stripe.local_sim()?.last_late_refund_failure_ms()?;
        let every = self
            .reconciler
            .refund_watch
            .as_ref()
            .map_or(RefundWatch::DEFAULT.every, |w| w.watch.every);
        Some(
            Timestamp::from_millis(last)
                .plus(every)
                .plus(Duration::from_secs(2 * 3600)),
        )
    }

    /// Long enough for a stuck intent to reach review (the stuck bound), past every other wait,
    /// counted from an unreadable record's repair (its first attempt may come only then); with
    /// authorizations, past the longest hold Stripe keeps uncaptured (7 days), so every
    /// forgotten one lapses, is paged before and settled after.
    fn settle_deadline(&self) -> Timestamp {
        let policy = &self.charge.charge.policy;
        let holds = if self.auth_rate > 0.0 {
            LONGEST_HOLD
        } else {
            Duration::ZERO
        };
        // With disputes, past the response window of the last one opened (its `due_by`), the
        // delay after which Stripe closes one nobody answered, and the daily read after it.
        let holds = match self.stripe.local_sim() {
            Some(sim) if self.dispute_rate > 0.0 => holds.max({
                let timing = sim.dispute_timing();
                Duration::from_millis(
                    (timing.response_window_ms.max(0) + timing.closes_after_due_ms.max(0)) as u64,
                ) + charge_core::dispute::deadline::RECHECK
            }),
            _ => holds,
        };
        self.clock
            .now()
            .plus(
                BLACKOUT
                    .max(policy.key_window + policy.search_min_age)
                    .max(policy.stuck_after)
                    .max(holds),
            )
            .plus(crate::store::REPAIR_AFTER)
            .plus(Duration::from_secs(2 * 3600))
    }
}

/// Virtual time of the first order, for reports.
pub fn virtual_start() -> Timestamp {
    Timestamp::from_millis(1_800_000_000_000)
}

pub fn elapsed_virtual(counts: &LoopCounts) -> Duration {
    let end = counts.virtual_end.load(Ordering::Relaxed) as i64;
    Timestamp::from_millis(end).since(virtual_start())
}

pub fn count_map(counts: &LoopCounts) -> BTreeMap<&'static str, u64> {
    BTreeMap::from([
        (
            "reconciler_ticks",
            counts.reconciler_ticks.load(Ordering::Relaxed),
        ),
        ("batches", counts.batches.load(Ordering::Relaxed)),
        (
            "dead_lettered",
            counts.dead_lettered.load(Ordering::Relaxed),
        ),
        ("checkout_503", counts.checkout_503.load(Ordering::Relaxed)),
        ("poison_sent", counts.poison_sent.load(Ordering::Relaxed)),
        (
            "returned_soon",
            counts.returned_soon.load(Ordering::Relaxed),
        ),
        (
            "left_to_reconciler",
            counts.left_to_reconciler.load(Ordering::Relaxed),
        ),
        (
            "waited_for_queue",
            counts.waited_for_queue.load(Ordering::Relaxed),
        ),
        ("reenqueued", counts.reenqueued.load(Ordering::Relaxed)),
        (
            "deepest_queue",
            counts.deepest_queue.load(Ordering::Relaxed),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The body written directly is the tree's text, for every card the plan uses and for a
    /// name JSON must escape.
    #[test]
    fn the_checkout_body_is_the_trees() {
        for pm in [
            "pm_card_visa",
            "pm_card_chargeDeclined",
            "pm_card_sim_requiresAction",
            "pm_\"quoted\"\\slash",
        ] {
            for amount in [0, 1_000, 9_999, i64::MAX] {
                let mut tree = json!({
                    "amount": amount,
                    "currency": "usd",
                    "customer_id": "cus_simulated",
                    "payment_method": pm,
                });
                assert_eq!(checkout_body(pm, amount, false), tree.to_string());
                tree["capture"] = json!("manual");
                assert_eq!(checkout_body(pm, amount, true), tree.to_string());
            }
        }
    }
}
