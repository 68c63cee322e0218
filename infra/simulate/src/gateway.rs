//! Stripe in process: a [`PaymentGateway`] that drives the Stripe simulator's engine directly
//! (its idempotency layer, ledger, search lag and fault engine), without sockets or sleeps.
//!
//! It behaves as the production client [`charge_once::adapters::stripe::StripeGateway`] does over
//! HTTP: the same form, the same `Idempotency-Key`, the same in-call retry rule (a lost answer, a
//! 409 or a 429 is retried once with the same key, and a "nothing happened" after a lost answer
//! is ambiguous), and the same classification of answers: not a copy, the production client's own
//! `worth_retrying`, `settle_answer` and body parsers (`charge_once::adapters::stripe`), fed the
//! engine's answers as the client would read them off the wire.
//!
//! The `timeout` fault: Stripe answers after the client's timeout. The client gives up (an
//! ambiguous outcome), its retry finds the key still in flight (409), and the server then
//! finishes and commits — all within the call, at the same virtual instant.
//!
//! With the scheduler's timers installed (the load model, [`crate::load`]), a slow create takes
//! its time: the call sleeps the create's drawn latency on the virtual clock (key in flight,
//! others running meanwhile), then the server completes it; a latency past the client's timeout
//! makes the client give up after the timeout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use charge_core::audit::AuditWindow;
use charge_core::dispute::StripeDispute;
use charge_core::domain::{CaptureMethod, DisputeId, StripeRefundId};
use charge_core::refund::StripeRefund;
use charge_core::{
    domain::{OperationId, PaymentIntentId},
    outcome::{GatewayError, PaymentIntent},
};
use charge_once::adapters::stripe::disputes::{
    collect_dispute_pages, dispute_list_query, parse_dispute, parse_dispute_list,
};
use charge_once::adapters::stripe::lists::{
    created_list_query, parse_intent_list, parse_refund_list,
};
use charge_once::adapters::stripe::refunds::{
    collect_refund_pages, parse_refund, parse_refund_page, refund_form,
};
use charge_once::adapters::stripe::{
    cancel_form, capture_form, parse_payment_intent, parse_search, settle_answer, worth_retrying,
    Answer, SecretKey, REFUND_PAGE_SIZE,
};
use charge_once::ports::{
    CancelPaymentIntent, CapturePaymentIntent, CreatePaymentIntent, CreateRefund, CreatedLists,
    ListPage, PaymentGateway, PaymentIntents, StripeAccount, StripeDisputes, StripeRefunds,
    StripeRequests,
};
use stripe_sim::{CreateStart, Outcome, SlowCreate, StripeSim};

use crate::sched::{sleep_for, timers_installed, yield_now};

pub struct InProcessGateway {
    pub sim: StripeSim,
    /// As `StripeConfig::max_network_retries`.
    pub max_retries: u32,
    /// As `StripeConfig::timeout`: a slower answer is a timeout.
    pub timeout: Duration,
    /// The longest create latency drawn so far, µs (the load model's report).
    pub slowest_create_us: AtomicU64,
    /// Requests by endpoint (every attempt) and 429s met, as the client counts them: what the
    /// functions report as `StripeRequests`.
    pub requests: StripeRequests,
}

type Attempt = Result<Answer, GatewayError>;

/// One request's first answer: final, or a create the server is still working on.
enum Step {
    Done(Attempt),
    Slow(SlowCreate),
}

impl From<Attempt> for Step {
    fn from(a: Attempt) -> Self {
        Step::Done(a)
    }
}

fn completed(o: Outcome) -> Attempt {
    match o {
        Outcome::Answered(a) => wire(a),
        Outcome::Dropped => Err(lost("connection lost")),
    }
}

fn lost(what: &str) -> GatewayError {
    GatewayError::Ambiguous {
        detail: format!("no response: {what}"),
    }
}

/// The engine's answer as the production client would have read it off the wire.
fn wire(a: stripe_sim::Answer) -> Attempt {
    Answer::new(a.status, a.should_retry, a.replayed, a.body.to_vec()).ok_or_else(|| {
        GatewayError::Ambiguous {
            detail: format!("HTTP status {} out of range", a.status),
        }
    })
}

impl InProcessGateway {
    /// One call with the client's retry rule; `attempt` sends the request once.
    async fn call(
        &self,
        counter: &AtomicU64,
        mut attempt: impl FnMut() -> Step,
    ) -> Result<(Vec<u8>, bool), GatewayError> {
        let key = SecretKey::new(stripe_sim::DEFAULT_API_KEY);
        let mut slow = Vec::new();
        let mut tries = 0;
        let mut earlier_lost = false;
        let timed = timers_installed();
        let result = loop {
            counter.fetch_add(1, Ordering::Relaxed);
            let step = attempt();
            if let Step::Slow(s) = &step {
                let us = s.create_latency().unwrap_or_default().as_micros() as u64;
                self.slowest_create_us.fetch_max(us, Ordering::Relaxed);
            }
            let answer = match step {
                Step::Done(a) => a,
                Step::Slow(s) if s.latency() >= self.timeout => {
                    if timed {
                        sleep_for(self.timeout).await;
                    }
                    slow.push(s);
                    Err(lost("timeout"))
                }
                Step::Slow(s) => {
                    if timed {
                        sleep_for(s.latency()).await;
                    }
                    completed(s.complete())
                }
            };
            if matches!(&answer, Ok(a) if a.status.as_u16() == 429) {
                self.requests.rate_limited.fetch_add(1, Ordering::Relaxed);
            }
            if !(tries < self.max_retries && worth_retrying(&answer)) {
                break settle_answer(answer, earlier_lost, &key);
            }
            earlier_lost |= answer.is_err();
            tries += 1;
            // The back-off: virtual, but a point where others may run.
            yield_now().await;
        };
        // The slow requests the client gave up on finish now (committed, unanswered).
        for s in slow {
            let _ = s.complete();
        }
        result
    }
}

impl StripeAccount for InProcessGateway {
    /// The simulator's key is a test-mode key, and its PaymentIntents say `livemode: false`.
    fn livemode(&self) -> bool {
        SecretKey::new(stripe_sim::DEFAULT_API_KEY).is_live()
    }

    fn requests(&self) -> Option<&StripeRequests> {
        Some(&self.requests)
    }
}

#[async_trait]
impl PaymentIntents for InProcessGateway {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        let mut form = vec![
            (
                "amount".to_owned(),
                req.params.amount.minor_units().to_string(),
            ),
            (
                "currency".to_owned(),
                req.params.currency.as_str().to_owned(),
            ),
            (
                "customer".to_owned(),
                req.params.customer_id.as_str().to_owned(),
            ),
            (
                "payment_method".to_owned(),
                req.params.payment_method.as_str().to_owned(),
            ),
            ("confirm".to_owned(), "true".to_owned()),
            ("off_session".to_owned(), "true".to_owned()),
            (
                "metadata[operation_id]".to_owned(),
                req.operation_id.to_string(),
            ),
            (
                "metadata[order_id]".to_owned(),
                req.order_id.as_str().to_owned(),
            ),
        ];
        if req.params.capture_method == CaptureMethod::Manual {
            // As the client: held, not taken, and the answer states the hold's deadline.
            form.push(("capture_method".to_owned(), "manual".to_owned()));
            form.push(("expand[]".to_owned(), "latest_charge".to_owned()));
        }
        let key = req.idempotency_key.as_str();
        let (body, replayed) = self
            .call(&self.requests.create, || {
                match self.sim.create_in_process_with(Some(key), &form) {
                    CreateStart::Done(o) => Step::Done(completed(o)),
                    CreateStart::Slow(s) => Step::Slow(s),
                }
            })
            .await?;
        parse_payment_intent(&body, replayed)
    }

    /// As the client's: the charge expanded (an authorization's deadline is on it).
    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError> {
        let (body, _) = self
            .call(&self.requests.retrieve, || {
                wire(self.sim.retrieve_expanded_in_process(id)).into()
            })
            .await?;
        parse_payment_intent(&body, false)
    }

    async fn search_by_operation(
        &self,
        operation_id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        let query = charge_once::adapters::stripe::search_query(operation_id);
        let (body, _) = self
            .call(&self.requests.search, || {
                wire(self.sim.search_in_process(&query)).into()
            })
            .await?;
        parse_search(&body)
    }

    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        let form = cancel_form(req);
        let key = req.idempotency_key.as_str();
        let (body, replayed) = self
            .call(&self.requests.cancel, || {
                completed(
                    self.sim
                        .cancel_in_process(req.id.as_str(), Some(key), &form),
                )
                .into()
            })
            .await?;
        parse_payment_intent(&body, replayed)
    }

    /// As the client's: the same form and key, the same retry rule (a lost answer retried under
    /// the key replays what was saved, a refusal included), the same reader.
    async fn capture(&self, req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        let form = capture_form(req);
        let key = req.idempotency_key.as_str();
        let (body, replayed) = self
            .call(&self.requests.capture, || {
                completed(
                    self.sim
                        .capture_in_process(req.id.as_str(), Some(key), &form),
                )
                .into()
            })
            .await?;
        parse_payment_intent(&body, replayed)
    }
}

/// As the client's: the same paths and queries, the same readers, the same page bound.
#[async_trait]
impl StripeDisputes for InProcessGateway {
    async fn retrieve_dispute(&self, id: &DisputeId) -> Result<StripeDispute, GatewayError> {
        let (body, _) = self
            .call(&self.requests.dispute_read, || {
                wire(self.sim.retrieve_dispute_in_process(id)).into()
            })
            .await?;
        parse_dispute(&body)
    }

    async fn list_disputes(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<StripeDispute>, GatewayError> {
        collect_dispute_pages(|after| async move {
            let query = dispute_list_query(payment_intent, REFUND_PAGE_SIZE, after.as_deref());
            let (body, _) = self
                .call(&self.requests.dispute_read, || {
                    wire(self.sim.list_disputes_in_process(&query)).into()
                })
                .await?;
            parse_dispute_list(&body)
        })
        .await
    }
}

#[async_trait]
impl StripeRefunds for InProcessGateway {
    /// As the client's: the same form and key, the same retry rule (a `latency` fault holds the
    /// key as a slow create does), the same reader.
    async fn create_refund(&self, req: &CreateRefund) -> Result<StripeRefund, GatewayError> {
        let form = refund_form(req);
        let key = req.idempotency_key.as_str();
        let (body, _) = self
            .call(&self.requests.refund_create, || {
                match self.sim.refund_in_process(Some(key), &form) {
                    CreateStart::Done(o) => Step::Done(completed(o)),
                    CreateStart::Slow(s) => Step::Slow(s),
                }
            })
            .await?;
        parse_refund(&body)
    }

    async fn retrieve_refund(&self, id: &StripeRefundId) -> Result<StripeRefund, GatewayError> {
        let (body, _) = self
            .call(&self.requests.refund_read, || {
                wire(self.sim.retrieve_refund_in_process(id)).into()
            })
            .await?;
        parse_refund(&body)
    }

    /// Page after page at the client's page size, within the client's bound on pages.
    async fn list_refunds(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<StripeRefund>, GatewayError> {
        collect_refund_pages(|after| async move {
            let (body, _) = self
                .call(&self.requests.refund_read, || {
                    wire(self.sim.list_refunds_in_process(
                        Some(payment_intent.as_str()),
                        Some(REFUND_PAGE_SIZE as usize),
                        after.as_deref(),
                    ))
                    .into()
                })
                .await?;
            parse_refund_page(&body)
        })
        .await
    }
}

#[async_trait]
impl CreatedLists for InProcessGateway {
    /// As the client's: the same query and reader, one request a page.
    async fn list_intents_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<PaymentIntent>, GatewayError> {
        let query = created_list_query(window, REFUND_PAGE_SIZE, starting_after);
        let (body, _) = self
            .call(&self.requests.list, || {
                wire(self.sim.list_intents_in_process(&query)).into()
            })
            .await?;
        parse_intent_list(&body)
    }

    async fn list_refunds_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<StripeRefund>, GatewayError> {
        let query = created_list_query(window, REFUND_PAGE_SIZE, starting_after);
        let (body, _) = self
            .call(&self.requests.refund_read, || {
                wire(self.sim.list_refunds_query_in_process(&query)).into()
            })
            .await?;
        parse_refund_list(&body)
    }

    async fn list_disputes_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<StripeDispute>, GatewayError> {
        let query = created_list_query(window, REFUND_PAGE_SIZE, starting_after);
        let (body, _) = self
            .call(&self.requests.dispute_read, || {
                wire(self.sim.list_disputes_in_process(&query)).into()
            })
            .await?;
        parse_dispute_list(&body)
    }
}

/// One function's own count of its Stripe requests (by endpoint, and the 429s it met), as its
/// process's client would keep it: in the simulation every function shares one in-process
/// Stripe, so each is given this in front of it for its `StripeRequests` metric. Counts calls
/// (an in-call retry is one), which is what the dashboard's picture needs.
pub struct FunctionRequests {
    pub inner: Arc<dyn PaymentGateway>,
    pub requests: StripeRequests,
}

impl FunctionRequests {
    pub fn wrap(inner: Arc<dyn PaymentGateway>) -> Arc<dyn PaymentGateway> {
        Arc::new(Self {
            inner,
            requests: StripeRequests::default(),
        })
    }

    fn count<T>(&self, counter: &AtomicU64, r: Result<T, GatewayError>) -> Result<T, GatewayError> {
        counter.fetch_add(1, Ordering::Relaxed);
        if matches!(
            &r,
            Err(GatewayError::RetryLater {
                cause: charge_core::outcome::RetryCause::RateLimited,
                ..
            })
        ) {
            self.requests.rate_limited.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
}

impl StripeAccount for FunctionRequests {
    fn livemode(&self) -> bool {
        self.inner.livemode()
    }
    fn requests(&self) -> Option<&StripeRequests> {
        Some(&self.requests)
    }
}

#[async_trait]
impl PaymentIntents for FunctionRequests {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        let r = self.inner.create(req).await;
        self.count(&self.requests.create, r)
    }
    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError> {
        let r = self.inner.retrieve(id).await;
        self.count(&self.requests.retrieve, r)
    }
    async fn search_by_operation(
        &self,
        operation_id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        let r = self.inner.search_by_operation(operation_id).await;
        self.count(&self.requests.search, r)
    }
    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        let r = self.inner.cancel(req).await;
        self.count(&self.requests.cancel, r)
    }
    async fn capture(&self, req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        let r = self.inner.capture(req).await;
        self.count(&self.requests.capture, r)
    }
}

#[async_trait]
impl StripeDisputes for FunctionRequests {
    async fn retrieve_dispute(&self, id: &DisputeId) -> Result<StripeDispute, GatewayError> {
        let r = self.inner.retrieve_dispute(id).await;
        self.count(&self.requests.dispute_read, r)
    }
    async fn list_disputes(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<StripeDispute>, GatewayError> {
        let r = self.inner.list_disputes(payment_intent).await;
        self.count(&self.requests.dispute_read, r)
    }
}

#[async_trait]
impl StripeRefunds for FunctionRequests {
    async fn create_refund(&self, req: &CreateRefund) -> Result<StripeRefund, GatewayError> {
        let r = self.inner.create_refund(req).await;
        self.count(&self.requests.refund_create, r)
    }
    async fn retrieve_refund(&self, id: &StripeRefundId) -> Result<StripeRefund, GatewayError> {
        let r = self.inner.retrieve_refund(id).await;
        self.count(&self.requests.refund_read, r)
    }
    async fn list_refunds(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<StripeRefund>, GatewayError> {
        let r = self.inner.list_refunds(payment_intent).await;
        self.count(&self.requests.refund_read, r)
    }
}

#[async_trait]
impl CreatedLists for FunctionRequests {
    async fn list_intents_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<PaymentIntent>, GatewayError> {
        let r = self
            .inner
            .list_intents_created(window, starting_after)
            .await;
        self.count(&self.requests.list, r)
    }
    async fn list_refunds_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<StripeRefund>, GatewayError> {
        let r = self
            .inner
            .list_refunds_created(window, starting_after)
            .await;
        self.count(&self.requests.refund_read, r)
    }
    async fn list_disputes_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<StripeDispute>, GatewayError> {
        let r = self
            .inner
            .list_disputes_created(window, starting_after)
            .await;
        self.count(&self.requests.dispute_read, r)
    }
}

/// A separately started `stripe-sim` on the simulation's clock: before every call its clock is
/// moved to the simulation's, so its rate limits refill on the same time the functions pace on
/// (see [`crate::stripe::SimStripe::Remote`]). A failed move is not an answer of Stripe's: the
/// call goes out anyway, and meets whatever kept the move from landing.
pub struct ClockSynced {
    pub inner: Arc<dyn PaymentGateway>,
    pub stripe: Arc<crate::stripe::SimStripe>,
    pub clock: charge_core::time::ManualClock,
}

impl ClockSynced {
    async fn sync(&self) {
        let _ = self.stripe.sync_clock(&self.clock).await;
    }
}

crate::forward_gateway!(ClockSynced, inner: StripeAccount);
crate::forward_gateway!(
    ClockSynced, inner, before sync:
    PaymentIntents,
    StripeRefunds,
    StripeDisputes,
    CreatedLists,
);

#[cfg(test)]
mod tests {
    use charge_core::outcome::PaymentIntentStatus;
    use charge_core::refund::RefundStatus;
    use charge_core::testing::order;
    use charge_core::{domain::Amount, take::request::CancellationReason};
    use charge_once::testing::refund_create;
    use stripe_sim::{FaultConfig, FaultKind, SimConfig};

    use super::*;

    /// Refunds in process answer as the client's over HTTP: made, replayed under the key, refused
    /// past what is left, a lost answer found by the retry, read back and listed.
    /// Disputes in process read as the client's over HTTP: by PaymentIntent, by id and by
    /// creation time, each request counted; an unknown id refused; a refund of the disputed
    /// charge refused with Stripe's code while an undisputed one is made.
    #[tokio::test]
    async fn disputes_in_process_read_as_over_http() {
        let g = InProcessGateway {
            sim: StripeSim::new(SimConfig::default()),
            max_retries: 0,
            timeout: Duration::from_secs(10),
            slowest_create_us: AtomicU64::new(0),
            requests: Default::default(),
        };
        let op = order("ord-disputed")
            .amount(1000)
            .payment_method("pm_card_createDispute")
            .build();
        let pi = g
            .create(&CreatePaymentIntent::for_operation(&op).unwrap())
            .await
            .unwrap()
            .id;
        let listed = g.list_disputes(&pi).await.unwrap();
        assert_eq!(listed.len(), 1);
        let d = &listed[0];
        assert_eq!((d.amount, d.is_charge_refundable), (1000, false));
        assert_eq!(d.payment_intent.as_ref(), Some(&pi));
        assert_eq!(&g.retrieve_dispute(&d.id).await.unwrap(), d);
        let window = AuditWindow {
            from: d.created,
            to: d.created.plus(Duration::from_secs(1)),
        };
        let page = g.list_disputes_created(&window, None).await.unwrap();
        assert_eq!((page.items, page.next), (listed.clone(), None));
        assert_eq!(g.requests.dispute_read.load(Ordering::Relaxed), 3);
        assert_eq!(g.sim.request_counts().dispute_read, 3);
        let missing = g
            .retrieve_dispute(&DisputeId::parse("dp_nope").unwrap())
            .await;
        assert!(
            matches!(missing, Err(GatewayError::Rejected { .. })),
            "{missing:?}"
        );

        let refused = g.create_refund(&refund_create(&pi, 100)).await;
        assert!(
            matches!(&refused, Err(GatewayError::ChargeDisputed { detail }) if detail.contains("charge_disputed")),
            "{refused:?}"
        );
        let visa = order("ord-undisputed").amount(1000).build();
        let visa = g
            .create(&CreatePaymentIntent::for_operation(&visa).unwrap())
            .await
            .unwrap()
            .id;
        assert!(g.create_refund(&refund_create(&visa, 100)).await.is_ok());
        assert!(g.list_disputes(&visa).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn refunds_in_process_answer_as_over_http() {
        let g = InProcessGateway {
            sim: StripeSim::new(SimConfig::default()),
            max_retries: 0,
            timeout: Duration::from_secs(10),
            slowest_create_us: AtomicU64::new(0),
            requests: Default::default(),
        };
        let op = order("ord-in-process").amount(1000).build();
        let pi = g
            .create(&CreatePaymentIntent::for_operation(&op).unwrap())
            .await
            .unwrap()
            .id;
        let req = refund_create(&pi, 600);
        let made = g.create_refund(&req).await.unwrap();
        assert_eq!(made.status, RefundStatus::Succeeded);
        assert_eq!(g.create_refund(&req).await.unwrap(), made);
        assert_eq!(g.sim.refunds_created(), 1);
        let over = g.create_refund(&refund_create(&pi, 401)).await;
        assert!(
            matches!(&over, Err(GatewayError::Rejected { detail, .. }) if detail.contains("amount_too_large")),
            "{over:?}"
        );
        assert_eq!(g.sim.refunds_created(), 1);

        g.sim.push_script([FaultKind::DropAfterCommit]);
        let lost = refund_create(&pi, 400);
        assert!(matches!(
            g.create_refund(&lost).await,
            Err(GatewayError::Ambiguous { .. })
        ));
        assert_eq!(g.sim.injected()[&FaultKind::DropAfterCommit], 1);
        let found = g.create_refund(&lost).await.unwrap();
        assert_eq!(g.sim.refunds_created(), 2);
        assert_eq!(g.retrieve_refund(&found.id).await.unwrap(), found);
        assert_eq!(g.list_refunds(&pi).await.unwrap(), vec![found, made]);
    }

    /// Authorizations in process answer as the client's over HTTP: a manual create is held with
    /// its deadline read from the create's own answer and from a read; a capture whose answer
    /// was lost is replayed under its key; a second capture is refused; a cancel carries its
    /// reason.
    #[tokio::test]
    async fn captures_in_process_answer_as_over_http() {
        let g = InProcessGateway {
            sim: StripeSim::new(SimConfig::default()),
            max_retries: 0,
            timeout: Duration::from_secs(10),
            slowest_create_us: AtomicU64::new(0),
            requests: Default::default(),
        };
        let authorize = |order_id: &'static str| {
            let op = order(order_id).amount(1000).build();
            let mut req = CreatePaymentIntent::for_operation(&op).unwrap();
            req.params.capture_method = CaptureMethod::Manual;
            req
        };
        let held = g.create(&authorize("ord-held")).await.unwrap();
        assert_eq!(held.status, PaymentIntentStatus::RequiresCapture);
        assert!(held.capture_before.is_some(), "stated by the create");
        let read = g.retrieve(&held.id).await.unwrap();
        assert_eq!(read.capture_before, held.capture_before);

        let capture = CapturePaymentIntent {
            id: held.id.clone(),
            idempotency_key: OperationId::new_random().capture_idempotency_key(),
            amount_to_capture: Amount::new(600).unwrap(),
        };
        // A capture is faulted at the fault engine's rates (the script is the creates').
        g.sim.set_faults(FaultConfig {
            rates: [(FaultKind::DropAfterCommit, 1.0)].into(),
            faults_on_reads: false,
            ..FaultConfig::default()
        });
        assert!(matches!(
            g.capture(&capture).await,
            Err(GatewayError::Ambiguous { .. })
        ));
        assert_eq!(g.sim.injected()[&FaultKind::DropAfterCommit], 1);
        g.sim.set_faults(FaultConfig::default());
        let replayed = g.capture(&capture).await.unwrap();
        assert_eq!(
            (replayed.replayed, replayed.status, replayed.amount_received),
            (true, PaymentIntentStatus::Succeeded, Some(600))
        );
        let again = CapturePaymentIntent {
            idempotency_key: OperationId::new_random().capture_idempotency_key(),
            ..capture
        };
        assert!(matches!(
            g.capture(&again).await,
            Err(GatewayError::UnexpectedState { .. })
        ));
        assert_eq!(g.sim.request_counts().capture, 3);

        let other = g.create(&authorize("ord-other")).await.unwrap();
        let cancel = CancelPaymentIntent {
            id: other.id.clone(),
            idempotency_key: OperationId::new_random().cancel_op_idempotency_key(),
            reason: Some(CancellationReason::RequestedByCustomer),
        };
        let canceled = g.cancel(&cancel).await.unwrap();
        assert_eq!(
            (canceled.status, canceled.cancellation_reason.as_deref()),
            (PaymentIntentStatus::Canceled, Some("requested_by_customer"))
        );
    }
}
