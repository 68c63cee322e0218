//! Pacing Stripe calls to a budget, so a burst runs at Stripe's rate limit instead of into it.
//!
//! Stripe refuses what is over its limits with 429 before its idempotency layer (nothing is
//! executed, nothing saved), 25 requests/s per endpoint by default (creates, retrieves, cancels and
//! search are separate endpoints; search 20/s) and 100 operations/s per live account. A 429 costs a call
//! of the account's budget and, on SQS, the message's wait until it is delivered again. So every
//! Stripe call of a process first takes a slot from its [`Budget`]: at most `rate` calls per
//! second, `burst` at once, the caller waiting (on the injected [`Sleeper`]) for its slot.
//!
//! **Why one budget per process, not a shared counter.** The charge function runs at most
//! `ChargeMaxConcurrency` execution environments at once (the event source's
//! `MaximumConcurrency`); each takes an equal part of the account's budget
//! ([`crate::config::StripeBudget`]), and the reconciler and the events function a small share
//! each. The sum never exceeds the budget (the events function's share counted once), and
//! nothing is written anywhere to keep it (a shared counter in DynamoDB would cost a conditional
//! write per Stripe call, more than the charge itself costs in DynamoDB). During a burst every
//! environment is busy, so no share sits idle; below the limit no caller waits. The simulation
//! (`simulate --arrival-rate`) measures this against its alternatives.
//!
//! The bucket is GCRA (a virtual scheduling token bucket): one integer, the theoretical arrival
//! time, on the injected clock, so it behaves the same on the virtual clock of a test.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use charge_core::domain::{OperationId, OperationKind, PaymentIntentId, StripeRefundId};
use charge_core::outcome::{GatewayError, PaymentIntent, RetryCause};
use charge_core::refund::StripeRefund;
use charge_core::{audit::AuditWindow, time::Clock};

use crate::ports::{
    CancelPaymentIntent, CapturePaymentIntent, CreatePaymentIntent, CreateRefund, CreatedLists,
    ListPage, PaymentGateway, PaymentIntents, Sleeper, StripeAccount, StripeRefunds,
    StripeRequests,
};

/// Tokio's timer.
#[derive(Debug, Default, Clone, Copy)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep(d))
    }
}

/// The budget is spent so far ahead that the caller would wait longer than it may.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Stripe request budget saturated: the next slot is {wait:?} away (at most {max_wait:?} allowed)")]
pub struct Saturated {
    pub wait: Duration,
    pub max_wait: Duration,
}

/// At most `rate` calls per second, `burst` at once, on the injected clock.
pub struct Budget {
    /// Microseconds between two slots.
    interval_us: i64,
    /// How far ahead of now the schedule may run before a caller waits (`(burst-1) * interval`).
    tolerance_us: i64,
    /// The theoretical arrival time of the next call, µs since the epoch.
    tat_us: Mutex<i64>,
    /// What a caller that keeps coming back may bank beyond `burst` (µs of slots): kept while it
    /// takes slots, lost after an idle spell as long as the carry itself ([`Budget::with_carry`]).
    carry_us: i64,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("per_second", &self.per_second())
            .field("burst", &(self.tolerance_us / self.interval_us + 1))
            .finish()
    }
}

impl Budget {
    /// `per_second` calls a second (> 0), `burst` of them back to back (≥ 1).
    pub fn new(
        per_second: f64,
        burst: u32,
        clock: Arc<dyn Clock>,
        sleeper: Arc<dyn Sleeper>,
    ) -> Self {
        assert!(per_second > 0.0, "a budget needs a positive rate");
        let interval_us = ((1_000_000.0 / per_second).round() as i64).max(1);
        Self {
            interval_us,
            tolerance_us: interval_us * i64::from(burst.max(1) - 1),
            tat_us: Mutex::new(i64::MIN),
            carry_us: 0,
            clock,
            sleeper,
        }
    }

    /// The same budget, banking `calls` more than its burst while its caller keeps taking slots:
    /// time its caller spends waiting between takes (a batch's slowest call) is not lost up to
    /// that many calls. After an idle spell (no slot for as long as the carry lasts) the bank
    /// restarts at the burst, so callers coming back together spend no more than their bursts.
    pub fn with_carry(mut self, calls: u32) -> Self {
        self.carry_us = self.interval_us * i64::from(calls);
        self
    }

    pub fn per_second(&self) -> f64 {
        1_000_000.0 / self.interval_us as f64
    }

    /// Takes the next slot, waiting for it; refuses (taking nothing) if it is more than
    /// `max_wait` away. Returns how long the caller waited.
    pub async fn acquire(&self, max_wait: Duration) -> Result<Duration, Saturated> {
        let wait = self.reserve(max_wait)?;
        if !wait.is_zero() {
            self.sleeper.sleep(wait).await;
        }
        Ok(wait)
    }

    /// The slot's reservation without the wait: how long until it.
    pub fn reserve(&self, max_wait: Duration) -> Result<Duration, Saturated> {
        let now_us = self.clock.now().as_millis() * 1000;
        let mut tat = self.tat_us.lock().unwrap_or_else(|p| p.into_inner());
        let tolerance = self.tolerance_us + self.carry_us;
        // Idle for longer than the carry lasts: the bank restarts at the burst alone.
        let idle = self.carry_us > 0 && *tat < now_us.saturating_sub(self.carry_us);
        let start = if idle {
            now_us + self.carry_us
        } else {
            (*tat).max(now_us)
        };
        let wait_us = (start - tolerance - now_us).max(0);
        let wait = Duration::from_micros(wait_us as u64);
        if wait > max_wait {
            return Err(Saturated { wait, max_wait });
        }
        *tat = start + self.interval_us;
        Ok(wait)
    }
}

/// A charge environment's shares of Stripe's limits: one of the account's overall budget, and one
/// of each endpoint's for the call a message is about to make (a charge creates, a refund
/// refunds, a capture captures, a cancel cancels). A message takes a slot of both before its
/// claim: in test mode, where every endpoint shares the account's 25/s, the account's binds; on
/// a live account (100/s overall, 25/s per endpoint) a burst of one kind is held to its
/// endpoint's limit while the other kinds run beside it.
pub struct MessageBudget {
    account: Arc<Budget>,
    /// Create, refund, capture, cancel; `None`: the account's budget alone.
    endpoints: Option<[Arc<Budget>; 4]>,
}

impl std::fmt::Debug for MessageBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageBudget")
            .field("account", &self.account)
            .field(
                "endpoints",
                &self.endpoints.as_ref().map(|e| e[0].per_second()),
            )
            .finish()
    }
}

impl MessageBudget {
    /// The account's share and, per endpoint, a budget made by `endpoint`.
    pub fn new(account: Arc<Budget>, endpoint: impl Fn() -> Arc<Budget>) -> Self {
        Self {
            account,
            endpoints: Some([endpoint(), endpoint(), endpoint(), endpoint()]),
        }
    }

    /// The account's share only (a test, or a simulation that models one endpoint).
    pub fn account_only(account: Arc<Budget>) -> Self {
        Self {
            account,
            endpoints: None,
        }
    }

    fn endpoint(&self, kind: &OperationKind) -> Option<&Budget> {
        let endpoints = self.endpoints.as_ref()?;
        Some(match kind {
            OperationKind::Charge(_) => &endpoints[0],
            OperationKind::Refund(_) => &endpoints[1],
            OperationKind::Capture(_) => &endpoints[2],
            OperationKind::Cancel => &endpoints[3],
            // A dispute is only ever read (no create endpoint): the account's share paces it.
            OperationKind::Dispute(_) => return None,
        })
    }

    /// Takes the next slot of the endpoint's share and of the account's, waiting for the later
    /// of the two; refuses if either is more than `max_wait` away (an endpoint slot already
    /// taken is then spent: one call less at that endpoint, never one more).
    pub async fn acquire(
        &self,
        kind: &OperationKind,
        max_wait: Duration,
    ) -> Result<Duration, Saturated> {
        let at_endpoint = match self.endpoint(kind) {
            Some(budget) => budget.reserve(max_wait)?,
            None => Duration::ZERO,
        };
        let wait = self.account.reserve(max_wait)?.max(at_endpoint);
        if !wait.is_zero() {
            self.account.sleeper.sleep(wait).await;
        }
        Ok(wait)
    }
}

/// A gateway whose every call first takes a slot of a [`Budget`] (search also of its own, lower
/// one: Stripe's search limit is 20/s). A call that would wait past `max_wait` is not made: it
/// answers "retry later" (`RateLimited`), exactly what a 429 means, without spending a call of the
/// account's budget on it.
pub struct PacedGateway {
    inner: Arc<dyn PaymentGateway>,
    calls: Arc<Budget>,
    search: Option<Arc<Budget>>,
    max_wait: Duration,
}

impl PacedGateway {
    pub fn new(
        inner: Arc<dyn PaymentGateway>,
        calls: Arc<Budget>,
        search: Option<Arc<Budget>>,
        max_wait: Duration,
    ) -> Self {
        Self {
            inner,
            calls,
            search,
            max_wait,
        }
    }

    async fn slot(&self, budget: &Budget) -> Result<(), GatewayError> {
        match budget.acquire(self.max_wait).await {
            Ok(waited) => {
                if !waited.is_zero() {
                    tracing::debug!(?waited, "paced a Stripe call");
                }
                Ok(())
            }
            Err(e) => Err(GatewayError::RetryLater {
                cause: RetryCause::RateLimited,
                detail: e.to_string(),
            }),
        }
    }
}

impl StripeAccount for PacedGateway {
    fn livemode(&self) -> bool {
        self.inner.livemode()
    }
    fn requests(&self) -> Option<&StripeRequests> {
        self.inner.requests()
    }
}

#[async_trait]
impl PaymentIntents for PacedGateway {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.slot(&self.calls).await?;
        self.inner.create(req).await
    }

    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError> {
        self.slot(&self.calls).await?;
        self.inner.retrieve(id).await
    }

    async fn search_by_operation(
        &self,
        operation_id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        if let Some(search) = &self.search {
            self.slot(search).await?;
        }
        self.slot(&self.calls).await?;
        self.inner.search_by_operation(operation_id).await
    }

    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.slot(&self.calls).await?;
        self.inner.cancel(req).await
    }

    async fn capture(&self, req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.slot(&self.calls).await?;
        self.inner.capture(req).await
    }
}

#[async_trait]
impl crate::ports::StripeDisputes for PacedGateway {
    // Dispute reads are calls of the same account: each takes a slot, as a refund's read does.

    async fn retrieve_dispute(
        &self,
        id: &charge_core::domain::DisputeId,
    ) -> Result<charge_core::dispute::StripeDispute, GatewayError> {
        self.slot(&self.calls).await?;
        self.inner.retrieve_dispute(id).await
    }

    /// One slot for the whole list, as a refund list's: a charge is disputed once or twice.
    async fn list_disputes(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<charge_core::dispute::StripeDispute>, GatewayError> {
        self.slot(&self.calls).await?;
        self.inner.list_disputes(payment_intent).await
    }
}

#[async_trait]
impl StripeRefunds for PacedGateway {
    // Refund calls are calls of the same account: each takes a slot of the same budget.

    async fn create_refund(&self, req: &CreateRefund) -> Result<StripeRefund, GatewayError> {
        self.slot(&self.calls).await?;
        self.inner.create_refund(req).await
    }

    async fn retrieve_refund(&self, id: &StripeRefundId) -> Result<StripeRefund, GatewayError> {
        self.slot(&self.calls).await?;
        self.inner.retrieve_refund(id).await
    }

    /// One slot for the whole list, though it may take several pages: a list of more than one
    /// page is a charge refunded more than a hundred times, not a load to pace.
    async fn list_refunds(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<StripeRefund>, GatewayError> {
        self.slot(&self.calls).await?;
        self.inner.list_refunds(payment_intent).await
    }
}

#[async_trait]
impl CreatedLists for PacedGateway {
    // The audit's lists: one slot a page, each page one request.

    async fn list_intents_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<PaymentIntent>, GatewayError> {
        self.slot(&self.calls).await?;
        self.inner
            .list_intents_created(window, starting_after)
            .await
    }

    async fn list_refunds_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<StripeRefund>, GatewayError> {
        self.slot(&self.calls).await?;
        self.inner
            .list_refunds_created(window, starting_after)
            .await
    }

    async fn list_disputes_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<charge_core::dispute::StripeDispute>, GatewayError> {
        self.slot(&self.calls).await?;
        self.inner
            .list_disputes_created(window, starting_after)
            .await
    }
}

/// How long a message that met Stripe's rate limit (or a budget that is full) stays away before
/// it is delivered again: seconds, growing with its receive count, with jitter so a burst's
/// refusals do not come back together. Deterministic: the jitter is a hash of the message id and
/// the receive count, no random source and no clock.
pub fn return_after(message_id: &str, receive_count: u32) -> Duration {
    const BASE_MS: u64 = 2_000;
    const CAP_MS: u64 = 60_000;
    let n = receive_count.clamp(1, 16);
    let ceiling = BASE_MS.saturating_mul(1 << (n - 1)).min(CAP_MS);
    // FNV-1a of (message id, receive count): a spread in [ceiling/2, ceiling].
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in message_id.bytes().chain(n.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    Duration::from_millis(ceiling / 2 + h % (ceiling / 2 + 1))
}

#[cfg(test)]
mod tests {
    use charge_core::time::{ManualClock, Timestamp};

    use super::*;

    /// Sleeping moves the manual clock: one caller at a time, as in a test.
    struct ClockSleeper(ManualClock);

    impl Sleeper for ClockSleeper {
        fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
            self.0.advance(d);
            Box::pin(async {})
        }
    }

    fn budget(per_second: f64, burst: u32) -> (Budget, ManualClock) {
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        let b = Budget::new(
            per_second,
            burst,
            Arc::new(clock.clone()),
            Arc::new(ClockSleeper(clock.clone())),
        );
        (b, clock)
    }

    #[tokio::test]
    async fn a_burst_passes_then_calls_are_spaced_at_the_rate() {
        let (b, clock) = budget(20.0, 5);
        let start = clock.now();
        for _ in 0..5 {
            assert_eq!(b.acquire(Duration::from_secs(1)).await, Ok(Duration::ZERO));
        }
        assert_eq!(clock.now(), start);
        // The sixth waits one interval (50 ms), the next ones one interval each.
        assert_eq!(
            b.acquire(Duration::from_secs(1)).await,
            Ok(Duration::from_millis(50))
        );
        for _ in 0..94 {
            b.acquire(Duration::from_secs(10)).await.unwrap();
        }
        // 100 calls: 5 at once, 95 at 20/s → 4.75 s.
        assert_eq!(clock.now().since(start), Duration::from_millis(4750));
    }

    /// A live account: 40 calls/s overall, 10/s per endpoint (one environment's shares). A burst
    /// of creates is held to the create endpoint's pace while refunds run beside it on theirs;
    /// the account's share bounds both together.
    #[tokio::test]
    async fn a_message_waits_for_its_endpoints_share_and_the_accounts() {
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        let make = |per_second: f64| {
            Arc::new(Budget::new(
                per_second,
                1,
                Arc::new(clock.clone()),
                Arc::new(ClockSleeper(clock.clone())),
            ))
        };
        let budgets = MessageBudget::new(make(40.0), || make(10.0));
        let refund = OperationKind::Refund(charge_core::domain::RefundId::parse("r-1").unwrap());
        let wait = Duration::from_secs(10);
        let start = clock.now();
        // Creates alone: 10/s, the endpoint's pace (one interval of 100 ms each after the first).
        for _ in 0..10 {
            budgets
                .acquire(&OperationKind::FIRST_CHARGE, wait)
                .await
                .unwrap();
        }
        assert_eq!(clock.now().since(start), Duration::from_millis(900));
        // A refund now does not wait behind the creates: its endpoint is idle, the account's
        // share has room.
        assert_eq!(budgets.acquire(&refund, wait).await, Ok(Duration::ZERO));
        // A create is refused when its endpoint's next slot is further away than it may wait.
        assert!(budgets
            .acquire(&OperationKind::FIRST_CHARGE, Duration::ZERO)
            .await
            .is_err());
        // The twin: on the account's share alone, a refund waits behind the creates like any
        // call.
        let one = MessageBudget::account_only(make(10.0));
        for _ in 0..10 {
            one.acquire(&OperationKind::FIRST_CHARGE, wait)
                .await
                .unwrap();
        }
        assert_eq!(
            one.acquire(&refund, wait).await,
            Ok(Duration::from_millis(100))
        );
    }

    #[test]
    fn a_carry_keeps_what_a_caller_waited_for_and_an_idle_spell_loses_it() {
        // 10/s, a burst of 2, a carry of 3 more.
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        let carried = Budget::new(
            10.0,
            2,
            Arc::new(clock.clone()),
            Arc::new(ClockSleeper(clock.clone())),
        )
        .with_carry(3);
        let (plain, plain_clock) = budget(10.0, 2);
        let free = |b: &Budget| {
            let mut n = 0;
            while b.reserve(Duration::ZERO).is_ok() {
                n += 1;
            }
            n
        };
        // Both start with their burst only.
        assert_eq!((free(&carried), free(&plain)), (2, 2));
        // A caller that comes back after 400 ms (a batch's slowest call): four slots accrued;
        // the carry keeps them all, the plain budget only its burst.
        clock.advance(Duration::from_millis(400));
        plain_clock.advance(Duration::from_millis(400));
        assert_eq!((free(&carried), free(&plain)), (4, 2));
        // After an idle spell longer than the carry lasts (300 ms), the bank is the burst again.
        clock.advance(Duration::from_secs(5));
        plain_clock.advance(Duration::from_secs(5));
        assert_eq!((free(&carried), free(&plain)), (2, 2));
    }

    #[test]
    fn a_slot_too_far_away_is_refused_and_takes_nothing() {
        let (b, _clock) = budget(10.0, 1);
        assert_eq!(b.reserve(Duration::ZERO), Ok(Duration::ZERO));
        let refused = b.reserve(Duration::from_millis(50)).unwrap_err();
        assert_eq!(refused.wait, Duration::from_millis(100));
        // Refusing took no slot: the next caller still waits 100 ms, not 200.
        assert_eq!(
            b.reserve(Duration::from_secs(1)),
            Ok(Duration::from_millis(100))
        );
        assert_eq!(
            b.reserve(Duration::from_secs(1)),
            Ok(Duration::from_millis(200))
        );
    }

    /// A cancel is a Stripe call like the others: it takes its slot of the one budget, and one
    /// refused for the budget never reaches Stripe.
    #[tokio::test]
    async fn a_cancel_takes_a_slot_of_the_same_budget() {
        use charge_core::domain::OperationId;
        use charge_core::take::request::CancellationReason;
        let (b, _clock) = budget(10.0, 1);
        let fake = Arc::new(crate::memory::FakeGateway::new());
        let paced = PacedGateway::new(fake.clone(), Arc::new(b), None, Duration::ZERO);
        let req = CancelPaymentIntent {
            id: PaymentIntentId::parse("pi_unknown").unwrap(),
            idempotency_key: OperationId::new_random().cancel_idempotency_key(),
            reason: Some(CancellationReason::Abandoned),
        };
        // The first reaches Stripe (which knows no such intent).
        assert!(matches!(
            paced.cancel(&req).await,
            Err(GatewayError::Rejected { .. })
        ));
        // The budget is spent: the next cancel, and a retrieve, wait past max_wait and are
        // refused before Stripe.
        for refused in [paced.cancel(&req).await, paced.retrieve(&req.id).await] {
            assert!(
                matches!(
                    refused,
                    Err(GatewayError::RetryLater {
                        cause: RetryCause::RateLimited,
                        ..
                    })
                ),
                "{refused:?}"
            );
        }
        assert_eq!(
            fake.calls.cancel.load(std::sync::atomic::Ordering::SeqCst),
            1
        );
        assert_eq!(fake.calls.total(), 1);
    }

    /// Refund calls are calls of the same account: each takes a slot of the one budget, and one
    /// refused for the budget never reaches Stripe.
    #[tokio::test]
    async fn refund_calls_take_slots_of_the_same_budget() {
        use crate::testing::refund_create;
        let (b, clock) = budget(10.0, 1);
        let fake = Arc::new(crate::memory::FakeGateway::new());
        let paced = PacedGateway::new(fake.clone(), Arc::new(b), None, Duration::ZERO);
        let pi = PaymentIntentId::parse("pi_unknown").unwrap();
        let re = StripeRefundId::parse("re_unknown").unwrap();
        // The first reaches Stripe (which knows no such intent).
        assert!(matches!(
            paced.create_refund(&refund_create(&pi, 10)).await,
            Err(GatewayError::Rejected { .. })
        ));
        let refused = [
            paced
                .create_refund(&refund_create(&pi, 10))
                .await
                .map(|_| ()),
            paced.retrieve_refund(&re).await.map(|_| ()),
            paced.list_refunds(&pi).await.map(|_| ()),
        ];
        for r in refused {
            assert!(
                matches!(
                    r,
                    Err(GatewayError::RetryLater {
                        cause: RetryCause::RateLimited,
                        ..
                    })
                ),
                "{r:?}"
            );
        }
        assert_eq!(fake.calls.total(), 1);
        // A slot later, each passes to Stripe.
        clock.advance(Duration::from_millis(100));
        assert!(paced.list_refunds(&pi).await.unwrap().is_empty());
        clock.advance(Duration::from_millis(100));
        assert!(paced.retrieve_refund(&re).await.is_err());
        assert_eq!(
            fake.calls
                .refund_read
                .load(std::sync::atomic::Ordering::SeqCst),
            2
        );
    }

    #[test]
    fn an_idle_budget_does_not_bank_more_than_its_burst() {
        let (b, clock) = budget(10.0, 3);
        clock.advance(Duration::from_secs(3600));
        for _ in 0..3 {
            assert_eq!(b.reserve(Duration::ZERO), Ok(Duration::ZERO));
        }
        assert!(b.reserve(Duration::ZERO).is_err());
    }

    #[test]
    fn a_refused_message_comes_back_in_seconds_with_jitter() {
        let first: Vec<Duration> = (0..50)
            .map(|i| return_after(&format!("m-{i}"), 1))
            .collect();
        assert!(first
            .iter()
            .all(|d| (Duration::from_secs(1)..=Duration::from_secs(2)).contains(d)));
        let distinct: std::collections::BTreeSet<_> = first.iter().collect();
        assert!(
            distinct.len() > 40,
            "jitter spreads them: {}",
            distinct.len()
        );
        assert_eq!(return_after("m-1", 1), return_after("m-1", 1));
        assert!(return_after("m-1", 3) >= Duration::from_secs(4));
        assert!(return_after("m-1", 30) <= Duration::from_secs(60));
    }
}
