//! The seed's scenarios, once, over any Stripe side ([`StripeUnderTest`]): the in-memory fake
//! gateway ([`FakeSide`]) and the production Stripe client against an embedded `stripe-sim` over
//! HTTP ([`HttpSide`]), each on the core's manual clock. Every scenario counts the PaymentIntents
//! that really exist at that Stripe, not only what our record says.
//!
//! [`crate::seed_scenario_tests!`] turns the scenarios into one `#[tokio::test]` each for a given side
//! (as [`crate::store_contract_tests!`] does for stores). A few need a fault only the fake can make
//! (a 401, a 400); they take a `World<FakeSide>` and only the fake's binary lists them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use charge_core::plan::{Disposition, Policy};
use charge_core::store::{Claim, Recorded};
use charge_core::testing::{claim_request, outcome, T0};
use charge_core::{
    domain::{Amount, OperationId},
    operation::{LeaseToken, Operation, OperationKey, OperationStatus},
    outcome::{GatewayError, PaymentIntent, PaymentIntentStatus, RetryCause},
    time::{Clock, ManualClock, Timestamp},
};
use charge_once::executor::{execute, ChargeReport, EngineDeps};
use charge_once::memory::{FakeFault, FakeGateway, MemoryStore};
use charge_once::ports::{
    CancelPaymentIntent, CapturePaymentIntent, CreatePaymentIntent, CreatedLists, OperationLeases,
    OperationReads, PaymentGateway, PaymentIntents, StripeAccount, StripeRefunds,
};
use charge_once::testing::CreateIn as _;
use stripe_sim::{FaultConfig, FaultKind};

use crate::stripe::StripeSide;

const HOUR: Duration = Duration::from_secs(3600);

/// What the next create meets at the Stripe side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Created and saved under the key; the caller sees no answer.
    LoseResponse,
    /// Created, and a 500 saved under the key (replays answer the 500 again).
    ServerErrorAfterCommit,
    /// A 500 before anything executes: nothing created, nothing saved.
    ServerErrorBeforeCommit,
    /// A 429 in front of the idempotency layer.
    RateLimited,
}

/// How the card of a new order behaves at the Stripe side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Card {
    Succeeds,
    Declined,
    /// The PaymentIntent is `processing` after create (until the test says otherwise).
    Processing,
}

/// A PaymentIntent that exists at the Stripe side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub id: String,
    /// The `Idempotency-Key` it was created with; `None` for one made by hand without a key.
    pub idempotency_key: Option<String>,
    /// Its status at Stripe now.
    pub status: String,
}

/// Calls made to the Stripe side, by endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Calls {
    pub create: u64,
    pub retrieve: u64,
    pub search: u64,
    pub cancel: u64,
}

impl Calls {
    pub fn total(&self) -> u64 {
        self.create + self.retrieve + self.search + self.cancel
    }
}

/// The customer confirming a declined PaymentIntent with its client secret (Stripe's recovery
/// for `authentication_required`): true when it paid, false when Stripe refused (canceled).
pub type Confirmer = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// A Stripe for the scenarios to run against.
#[async_trait]
pub trait StripeUnderTest: Send + Sync + Sized + 'static {
    /// How many executions race in the concurrency scenario.
    const RACERS: usize;

    /// A fresh Stripe side whose time is `clock`'s.
    async fn start(clock: ManualClock) -> Self;
    /// The gateway the executor calls.
    fn gateway(&self) -> Arc<dyn PaymentGateway>;
    /// The next create meets `fault`.
    fn script(&self, fault: Fault);
    /// How often the side says it injected `fault`, where it counts (stripe-sim does).
    fn injected(&self, fault: Fault) -> Option<u64>;
    /// Makes the next order's charge behave as `card`; returns the payment method to order with.
    fn card(&self, card: Card) -> &'static str;
    /// Sets a PaymentIntent's status, as Stripe does when `processing` settles.
    fn set_status(&self, pi: &str, status: PaymentIntentStatus);
    /// Every PaymentIntent that exists for `op`, oldest first.
    fn charges_for(&self, op: &Operation) -> Vec<Charge>;
    /// Calls the code under test made (a test's own requests by hand not counted).
    fn calls(&self) -> Calls;
    /// A second PaymentIntent for `op`, made by hand (another key, the same metadata).
    async fn another_charge_by_hand(&self, op: &Operation);
    /// Makes creates slow enough that concurrent executions overlap in one.
    fn slow_creates(&self);
    /// Forgets idempotency keys as Stripe may once they are 24 h old.
    fn prune_keys(&self);
    /// The customer's later confirm of a declined intent, as this side models it.
    fn customer_confirms(&self) -> Confirmer;
}

/// The in-memory fake gateway.
pub struct FakeSide {
    pub gateway: Arc<FakeGateway>,
}

#[async_trait]
impl StripeUnderTest for FakeSide {
    const RACERS: usize = 2;

    async fn start(_clock: ManualClock) -> Self {
        Self {
            gateway: Arc::new(FakeGateway::new()),
        }
    }

    fn gateway(&self) -> Arc<dyn PaymentGateway> {
        self.gateway.clone()
    }

    fn script(&self, fault: Fault) {
        self.gateway.script(match fault {
            Fault::LoseResponse => FakeFault::LoseResponse,
            Fault::ServerErrorAfterCommit => FakeFault::ServerErrorAfterCommit,
            Fault::ServerErrorBeforeCommit => FakeFault::ServerErrorBeforeCommit,
            Fault::RateLimited => FakeFault::RateLimited,
        });
    }

    fn injected(&self, _fault: Fault) -> Option<u64> {
        None
    }

    fn card(&self, card: Card) -> &'static str {
        match card {
            Card::Succeeds => {}
            Card::Declined => self.gateway.script(FakeFault::Decline("card_declined")),
            Card::Processing => self
                .gateway
                .set_first_status(PaymentIntentStatus::Processing),
        }
        "pm_card_visa"
    }

    fn set_status(&self, pi: &str, status: PaymentIntentStatus) {
        self.gateway.set_status(pi, status);
    }

    fn charges_for(&self, op: &Operation) -> Vec<Charge> {
        self.gateway
            .charges()
            .into_iter()
            .filter(|(_, c)| c.operation_id == op.operation_id)
            .map(|(id, c)| Charge {
                id,
                idempotency_key: Some(c.idempotency_key).filter(|k| !k.is_empty()),
                status: c.status.as_str().to_owned(),
            })
            .collect()
    }

    fn calls(&self) -> Calls {
        let c = &self.gateway.calls;
        Calls {
            create: c.create.load(Ordering::SeqCst),
            retrieve: c.retrieve.load(Ordering::SeqCst),
            search: c.search.load(Ordering::SeqCst),
            cancel: c.cancel.load(Ordering::SeqCst),
        }
    }

    async fn another_charge_by_hand(&self, op: &Operation) {
        self.gateway
            .insert_charge(op, PaymentIntentStatus::Succeeded);
    }

    fn slow_creates(&self) {
        self.gateway.set_create_delay(Duration::from_millis(50));
    }

    fn prune_keys(&self) {
        self.gateway.prune_keys();
    }

    fn customer_confirms(&self) -> Confirmer {
        let gateway = self.gateway.clone();
        Arc::new(move |id| {
            let declined = gateway
                .charges()
                .get(id)
                .is_some_and(|c| c.status == PaymentIntentStatus::RequiresPaymentMethod);
            if declined {
                gateway.set_status(id, PaymentIntentStatus::Succeeded);
            }
            declined
        })
    }
}

/// The production Stripe client over HTTP against an embedded `stripe-sim`.
pub struct HttpSide {
    pub side: StripeSide,
    pub gateway: Arc<dyn PaymentGateway>,
    /// Creates this test made by hand (not the code under test's).
    by_hand: AtomicU64,
}

impl HttpSide {
    fn kind(fault: Fault) -> FaultKind {
        match fault {
            Fault::LoseResponse => FaultKind::DropAfterCommit,
            Fault::ServerErrorAfterCommit => FaultKind::ServerErrorAfterCommit,
            Fault::ServerErrorBeforeCommit => FaultKind::ServerErrorBeforeCommit,
            Fault::RateLimited => FaultKind::RateLimit,
        }
    }
}

#[async_trait]
impl StripeUnderTest for HttpSide {
    const RACERS: usize = 4;

    async fn start(clock: ManualClock) -> Self {
        let side = StripeSide::start(clock).await;
        let gateway = Arc::new(side.gateway());
        Self {
            side,
            gateway,
            by_hand: AtomicU64::new(0),
        }
    }

    fn gateway(&self) -> Arc<dyn PaymentGateway> {
        self.gateway.clone()
    }

    fn script(&self, fault: Fault) {
        let kind = Self::kind(fault);
        self.side.sim.push_script([kind]);
    }

    fn injected(&self, fault: Fault) -> Option<u64> {
        Some(
            self.side
                .sim
                .injected()
                .get(&Self::kind(fault))
                .copied()
                .unwrap_or(0),
        )
    }

    fn card(&self, card: Card) -> &'static str {
        match card {
            Card::Succeeds => "pm_card_visa",
            Card::Declined => "pm_card_chargeDeclined",
            Card::Processing => "pm_card_processing_succeeds",
        }
    }

    fn set_status(&self, pi: &str, status: PaymentIntentStatus) {
        assert!(
            self.side.sim.set_status(pi, status.as_str()),
            "stripe-sim knows {pi} and {status:?}"
        );
    }

    fn charges_for(&self, op: &Operation) -> Vec<Charge> {
        let id = op.operation_id.to_string();
        self.side
            .sim
            .ledger()
            .into_iter()
            .filter(|e| e.operation_id.as_deref() == Some(id.as_str()))
            .map(|e| Charge {
                id: e.id,
                idempotency_key: e.idempotency_key,
                status: e.status,
            })
            .collect()
    }

    fn calls(&self) -> Calls {
        let c = self.side.sim.request_counts();
        Calls {
            create: c.create - self.by_hand.load(Ordering::SeqCst),
            retrieve: c.retrieve,
            search: c.search,
            cancel: c.cancel,
        }
    }

    async fn another_charge_by_hand(&self, op: &Operation) {
        let mut manual = CreatePaymentIntent::for_operation(op).expect("a charge operation");
        manual.idempotency_key = OperationId::new_random().idempotency_key();
        self.by_hand.fetch_add(1, Ordering::SeqCst);
        self.gateway.create(&manual).await.unwrap();
    }

    fn slow_creates(&self) {
        self.side.sim.set_faults(FaultConfig {
            latency: Duration::from_millis(50),
            script: vec![FaultKind::Latency],
            ..FaultConfig::default()
        });
    }

    fn prune_keys(&self) {
        // stripe-sim forgets keys older than 24 h (simulated time) by itself.
    }

    fn customer_confirms(&self) -> Confirmer {
        let sim = self.side.sim.clone();
        Arc::new(move |id| sim.confirm_as_customer(id).is_ok())
    }
}

/// One operation's world: the Stripe side, an in-memory store, the manual clock, the executor.
pub struct World<S> {
    pub side: S,
    pub store: Arc<MemoryStore>,
    pub clock: ManualClock,
    pub deps: EngineDeps,
}

impl<S: StripeUnderTest> World<S> {
    pub async fn new() -> Self {
        let clock = ManualClock::new(T0);
        let side = S::start(clock.clone()).await;
        let store = Arc::new(MemoryStore::new());
        let deps = EngineDeps {
            store: store.clone(),
            gateway: side.gateway(),
            clock: Arc::new(clock.clone()),
            policy: Policy::default(),
        };
        Self {
            side,
            store,
            clock,
            deps,
        }
    }

    /// A pending operation for `order`, paid with `card`, created in the store now.
    pub async fn new_op(&self, order: &str, card: Card) -> Operation {
        charge_core::testing::order(order)
            .payment_method(self.side.card(card))
            .requested_by("seed-tests")
            .at(self.clock.now())
            .grace(self.deps.policy.pending_grace)
            .create_in(self.store.as_ref())
            .await
    }

    pub async fn execute(&self, op: &Operation) -> ChargeReport {
        execute(&self.deps, &op.key(), &op.operation_id)
            .await
            .unwrap()
    }

    pub async fn current(&self, op: &Operation) -> Operation {
        self.store.get(&op.key()).await.unwrap().unwrap()
    }

    pub fn charges(&self, op: &Operation) -> Vec<Charge> {
        self.side.charges_for(op)
    }

    pub fn creates(&self) -> u64 {
        self.side.calls().create
    }
}

pub async fn response_lost_then_retry_with_same_key_charges_once<S: StripeUnderTest>() {
    let w = World::<S>::new().await;
    w.side.script(Fault::LoseResponse);
    let op = w.new_op("ord-lost", Card::Succeeds).await;

    let first = w.execute(&op).await;
    assert_eq!(first.status, OperationStatus::Unknown);
    assert_eq!(first.disposition, Disposition::Scheduled);
    if let Some(injected) = w.side.injected(Fault::LoseResponse) {
        assert_eq!(injected, 1);
    }

    let second = w.execute(&op).await;
    assert_eq!(second.status, OperationStatus::Succeeded);
    let charges = w.charges(&op);
    assert_eq!(charges.len(), 1, "one external side effect");
    assert_eq!(w.creates(), 2, "the retry was a create with the same key");
    assert_eq!(
        charges[0].idempotency_key.as_deref(),
        Some(op.idempotency_key().as_str())
    );
    assert_eq!(second.external_id.as_deref(), Some(charges[0].id.as_str()));
    let rec = w.current(&op).await;
    assert_eq!(rec.external_id.as_deref(), Some(charges[0].id.as_str()));
    assert_eq!(rec.next_due_at, None, "settled leaves the unknown index");
    assert_eq!(rec.attempts, 2);
}

pub async fn processing_is_not_success_and_is_settled_by_retrieve<S: StripeUnderTest>() {
    let w = World::<S>::new().await;
    let op = w.new_op("ord-processing", Card::Processing).await;

    let first = w.execute(&op).await;
    assert_eq!(first.status, OperationStatus::Unknown);
    let pi = first
        .external_id
        .clone()
        .expect("the PaymentIntent id is recorded");

    w.side.set_status(&pi, PaymentIntentStatus::Succeeded);
    let second = w.execute(&op).await;
    assert_eq!(second.status, OperationStatus::Succeeded);
    assert_eq!(w.charges(&op).len(), 1);
    assert_eq!(
        w.creates(),
        1,
        "the second look is a retrieve, not a re-send"
    );
    assert_eq!(w.side.calls().retrieve, 1);
}

pub async fn processing_that_fails_later_settles_failed<S: StripeUnderTest>() {
    let w = World::<S>::new().await;
    let op = w.new_op("ord-processing-fails", Card::Processing).await;
    let pi = w.execute(&op).await.external_id.unwrap();
    w.side
        .set_status(&pi, PaymentIntentStatus::RequiresPaymentMethod);
    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Failed);
    assert_eq!(r.external_id.as_deref(), Some(pi.as_str()));
    assert_eq!(w.charges(&op).len(), 1);
    assert_eq!(w.creates(), 1);
}

pub async fn replayed_500_stays_unknown_then_search_settles_past_the_window<S: StripeUnderTest>() {
    let w = World::<S>::new().await;
    w.side.script(Fault::ServerErrorAfterCommit);
    let op = w.new_op("ord-500", Card::Succeeds).await;

    for _ in 0..3 {
        let r = w.execute(&op).await;
        assert_eq!(r.status, OperationStatus::Unknown, "a 500 is never rounded");
        w.clock.advance(HOUR);
    }
    assert_eq!(
        w.charges(&op).len(),
        1,
        "the replayed 500 never charged again"
    );
    assert_eq!(w.creates(), 3);

    // Past the key window (and search's lag; a Stripe may have pruned the key, so a create now
    // could charge again): settle by search, never create.
    w.clock.advance(22 * HOUR);
    let settled = w.execute(&op).await;
    assert_eq!(settled.status, OperationStatus::Succeeded);
    assert_eq!(settled.disposition, Disposition::Settled);
    assert_eq!(w.creates(), 3, "no create once the window has passed");
    assert_eq!(w.side.calls().search, 1);
    let charges = w.charges(&op);
    assert_eq!(charges.len(), 1, "no second PaymentIntent");
    assert_eq!(
        w.current(&op).await.external_id.as_deref(),
        Some(charges[0].id.as_str())
    );
}

pub async fn no_search_before_stripe_search_can_be_trusted<S: StripeUnderTest>() {
    let w = World::<S>::new().await;
    w.side.script(Fault::ServerErrorAfterCommit);
    let op = w.new_op("ord-lag", Card::Succeeds).await;
    w.execute(&op).await;

    w.clock.advance(23 * HOUR + Duration::from_secs(60));
    let waiting = w.execute(&op).await;
    assert_eq!(waiting.status, OperationStatus::Unknown);
    assert_eq!(waiting.gateway_calls, 0);
    assert_eq!(w.side.calls().search, 0);
    assert_eq!(w.creates(), 1, "and no create either: the key may be gone");
    let rec = w.current(&op).await;
    let search_at = rec
        .first_attempted_at
        .unwrap()
        .plus(23 * HOUR + Duration::from_secs(600));
    assert_eq!(rec.next_due_at, Some(search_at));

    w.clock.set(search_at);
    assert_eq!(w.execute(&op).await.status, OperationStatus::Succeeded);
    assert_eq!(w.side.calls().search, 1);
}

pub async fn window_passed_with_zero_matches_goes_to_review<S: StripeUnderTest>() {
    let w = World::<S>::new().await;
    w.side.script(Fault::ServerErrorBeforeCommit);
    let op = w.new_op("ord-zero", Card::Succeeds).await;
    assert_eq!(w.execute(&op).await.status, OperationStatus::Unknown);
    assert_eq!(w.charges(&op).len(), 0);

    w.clock.advance(24 * HOUR);
    let r = w.execute(&op).await;
    assert_eq!(
        r.status,
        OperationStatus::Unknown,
        "not found does not prove not charged"
    );
    assert!(matches!(r.disposition, Disposition::InReview(ref why) if why.contains("found 0")));
    let rec = w.current(&op).await;
    assert!(rec.review.as_ref().unwrap().reason.contains("found 0"));
    assert_eq!(
        w.creates(),
        1,
        "never re-created with a possibly pruned key"
    );
    assert_eq!(w.charges(&op).len(), 0);

    // In review, the automatic path leaves it alone.
    let again = w.execute(&op).await;
    assert!(matches!(again.disposition, Disposition::InReview(_)));
    assert_eq!(again.gateway_calls, 0);
}

pub async fn window_passed_with_two_matches_goes_to_review<S: StripeUnderTest>() {
    let w = World::<S>::new().await;
    w.side.script(Fault::LoseResponse);
    let op = w.new_op("ord-two", Card::Succeeds).await;
    w.execute(&op).await;
    // Someone created a second one by hand under another key, same operation metadata.
    w.side.another_charge_by_hand(&op).await;
    assert_eq!(w.charges(&op).len(), 2);

    w.clock.advance(24 * HOUR);
    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Unknown);
    assert!(matches!(r.disposition, Disposition::InReview(ref why) if why.contains("found 2")));
    assert_eq!(w.creates(), 1);
    assert_eq!(w.charges(&op).len(), 2, "nothing new was created");
}

pub async fn decline_fails_and_is_never_retried<S: StripeUnderTest>() {
    let w = World::<S>::new().await;
    let op = w.new_op("ord-decline", Card::Declined).await;

    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Failed);
    assert_eq!(r.disposition, Disposition::Settled);
    assert_eq!(
        r.gateway_calls, 2,
        "the create, then the declined intent's cancel"
    );
    let charges = w.charges(&op);
    assert_eq!(
        r.external_id.as_deref(),
        Some(charges[0].id.as_str()),
        "the declined PaymentIntent is kept"
    );
    // Failed here and at Stripe: canceled, so the customer's later confirm (Stripe's recovery
    // for `authentication_required`) cannot take the money.
    assert_eq!(charges[0].status, "canceled");
    assert_eq!(w.side.calls().cancel, 1);
    assert!(!(w.side.customer_confirms())(&charges[0].id), "refused");
    assert_eq!(w.charges(&op)[0].status, "canceled");

    // Settled: no more Stripe calls, however often it is executed again.
    let calls = w.side.calls();
    for _ in 0..3 {
        let again = w.execute(&op).await;
        assert_eq!(again.disposition, Disposition::AlreadySettled);
        assert_eq!(again.gateway_calls, 0);
    }
    assert_eq!(
        w.side.calls(),
        calls,
        "zero Stripe calls for a settled operation"
    );
    assert_eq!(w.creates(), 1);
    assert_eq!(w.charges(&op).len(), 1);
}

pub async fn rate_limited_keeps_status_and_retries_later_with_the_same_key<S: StripeUnderTest>() {
    let w = World::<S>::new().await;
    w.side.script(Fault::RateLimited);
    let op = w.new_op("ord-429", Card::Succeeds).await;

    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Pending, "429: nothing happened");
    assert_eq!(
        r.disposition,
        Disposition::RetryLater(RetryCause::RateLimited)
    );
    assert!(r.disposition.wants_retry());
    assert_eq!(w.charges(&op).len(), 0);
    let rec = w.current(&op).await;
    assert!(rec.lease.is_none(), "the lease is released");
    assert!(rec.last_error.as_deref().unwrap().contains("429"));

    let later = w.execute(&op).await;
    assert_eq!(later.status, OperationStatus::Succeeded);
    let charges = w.charges(&op);
    assert_eq!(charges.len(), 1);
    assert_eq!(
        charges[0].idempotency_key.as_deref(),
        Some(op.idempotency_key().as_str())
    );
}

pub async fn settled_operation_makes_zero_gateway_calls<S: StripeUnderTest>() {
    let w = World::<S>::new().await;
    let op = w.new_op("ord-settled", Card::Succeeds).await;
    assert_eq!(w.execute(&op).await.status, OperationStatus::Succeeded);
    let calls_before = w.side.calls().total();

    for _ in 0..3 {
        let r = w.execute(&op).await;
        assert_eq!(r.disposition, Disposition::AlreadySettled);
        assert_eq!(r.gateway_calls, 0);
    }
    assert_eq!(w.side.calls().total(), calls_before);
    assert_eq!(w.charges(&op).len(), 1);
}

pub async fn key_misuse_goes_to_review_and_is_never_retried_with_another_key<S: StripeUnderTest>() {
    let w = World::<S>::new().await;
    let op = w.new_op("ord-misuse", Card::Succeeds).await;
    // A bug elsewhere used our key with other parameters first.
    let mut wrong = CreatePaymentIntent::for_operation(&op).expect("a charge operation");
    wrong.params.amount = Amount::new(9999).unwrap();
    w.side.gateway().create(&wrong).await.unwrap();

    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Unknown);
    assert!(matches!(r.disposition, Disposition::InReview(ref why) if why.contains("misuse")));
    let rec = w.current(&op).await;
    assert!(rec.last_error.as_deref().unwrap().contains("idempotency"));
    assert!(rec.review.is_some());
    let charges = w.charges(&op);
    assert_eq!(charges.len(), 1, "only the buggy one exists");
    let keys: Vec<_> = charges.into_iter().map(|c| c.idempotency_key).collect();
    assert_eq!(keys, vec![Some(op.idempotency_key().as_str().to_owned())]);

    assert_eq!(
        w.execute(&op).await.gateway_calls,
        0,
        "review stops the automatic path"
    );
}

pub async fn concurrent_executions_create_exactly_once<S: StripeUnderTest>() {
    let w = World::<S>::new().await;
    w.side.slow_creates();
    let op = w.new_op("ord-race", Card::Succeeds).await;

    let mut tasks = Vec::new();
    for _ in 0..S::RACERS {
        let deps = w.deps.clone();
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            execute(&deps, &op.key(), &op.operation_id).await
        }));
    }
    let mut dispositions = Vec::new();
    for t in tasks {
        dispositions.push(t.await.unwrap().unwrap().disposition);
    }
    dispositions.sort_by_key(|d| format!("{d:?}"));
    let mut want = vec![Disposition::Busy; S::RACERS - 1];
    want.push(Disposition::Settled);
    assert_eq!(dispositions, want, "one settles, the others find it busy");
    assert_eq!(w.creates(), 1);
    assert_eq!(w.charges(&op).len(), 1);
    assert_eq!(w.current(&op).await.status, OperationStatus::Succeeded);
}

pub async fn a_stale_lease_holder_cannot_overwrite<S: StripeUnderTest>() {
    let w = World::<S>::new().await;
    let op = w.new_op("ord-stale", Card::Succeeds).await;
    let stale = LeaseToken::new_random();
    let now = w.clock.now();
    let claimed = w
        .store
        .claim(&claim_request(&op, stale, now))
        .await
        .unwrap();
    assert!(matches!(claimed, Claim::Claimed(_)));

    // The first holder stalls past its lease; another execution takes over and settles.
    w.clock.advance(Duration::from_secs(61));
    assert_eq!(w.execute(&op).await.status, OperationStatus::Succeeded);

    let mut late = outcome(&op, stale, OperationStatus::Failed, w.clock.now());
    late.last_error = Some("late".into());
    let late = w.store.record(&late).await.unwrap();
    assert!(
        matches!(late, Recorded::Refused(Some(ref cur)) if cur.status == OperationStatus::Succeeded)
    );
    assert_eq!(w.current(&op).await.status, OperationStatus::Succeeded);
}

/// What happens around the first cancel: the customer's confirm just before it, or its answer
/// lost before or after Stripe got it.
struct AroundCancel {
    inner: Arc<dyn PaymentGateway>,
    confirm_first: Option<Confirmer>,
    lose: Option<Lost>,
    done: AtomicBool,
}

#[derive(Clone, Copy)]
enum Lost {
    BeforeStripe,
    AfterStripe,
}

impl StripeAccount for AroundCancel {
    fn livemode(&self) -> bool {
        self.inner.livemode()
    }
}

#[async_trait]
impl PaymentIntents for AroundCancel {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.create(req).await
    }
    async fn retrieve(
        &self,
        id: &charge_core::domain::PaymentIntentId,
    ) -> Result<PaymentIntent, GatewayError> {
        self.inner.retrieve(id).await
    }
    async fn search_by_operation(
        &self,
        id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        self.inner.search_by_operation(id).await
    }
    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        if self.done.swap(true, Ordering::SeqCst) {
            return self.inner.cancel(req).await;
        }
        if let Some(confirm) = &self.confirm_first {
            assert!(
                confirm(req.id.as_str()),
                "the customer paid the declined intent"
            );
        }
        let lost = || GatewayError::Ambiguous {
            detail: "no response: connection lost".into(),
        };
        match self.lose {
            Some(Lost::BeforeStripe) => Err(lost()),
            Some(Lost::AfterStripe) => {
                self.inner.cancel(req).await?;
                Err(lost())
            }
            None => self.inner.cancel(req).await,
        }
    }
    async fn capture(&self, req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.capture(req).await
    }
}

impl StripeRefunds for AroundCancel {}

impl charge_once::ports::StripeDisputes for AroundCancel {}

impl CreatedLists for AroundCancel {}

impl<S: StripeUnderTest> World<S> {
    fn around_cancel(&mut self, confirm_first: Option<Confirmer>, lose: Option<Lost>) {
        self.deps.gateway = Arc::new(AroundCancel {
            inner: self.side.gateway(),
            confirm_first,
            lose,
            done: AtomicBool::new(false),
        });
    }
}

/// Interleaving C1 of the 2026-12-03 review, closed: the customer confirms the declined intent
/// between our create's 402 and our cancel. Stripe refuses the cancel (the intent moved on), the
/// intent is read back, and the operation settles as what Stripe holds: succeeded, one charge.
pub async fn a_customer_who_pays_the_declined_intent_first_settles_succeeded<S: StripeUnderTest>() {
    let mut w = World::<S>::new().await;
    let op = w.new_op("ord-decline-paid", Card::Declined).await;
    w.around_cancel(Some(w.side.customer_confirms()), None);
    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Succeeded);
    assert_eq!(r.disposition, Disposition::Settled);
    assert_eq!(
        r.gateway_calls, 3,
        "create, the refused cancel, the read back"
    );
    let charges = w.charges(&op);
    assert_eq!(charges.len(), 1, "one PaymentIntent, paid by the customer");
    assert_eq!(charges[0].status, "succeeded");
    assert_eq!(r.external_id.as_deref(), Some(charges[0].id.as_str()));
    assert_eq!(w.side.calls().cancel, 1);
}

/// A cancel without an answer never records `failed`: unknown, with the intent's id, due. Not
/// made at Stripe: the next look retrieves the intent, still declined, and cancels it. Made but
/// unanswered: the next look finds it canceled and records `failed` with no second cancel.
pub async fn a_cancel_without_an_answer_leaves_the_operation_unknown_until_stripe_says_canceled<
    S: StripeUnderTest,
>() {
    for (order, lost, cancels) in [
        ("ord-cancel-unsent", Lost::BeforeStripe, 1),
        ("ord-cancel-unanswered", Lost::AfterStripe, 1),
    ] {
        let mut w = World::<S>::new().await;
        let op = w.new_op(order, Card::Declined).await;
        w.around_cancel(None, Some(lost));
        let r = w.execute(&op).await;
        assert_eq!(r.status, OperationStatus::Unknown, "{order}: never failed");
        assert_eq!(r.disposition, Disposition::Scheduled, "{order}");
        let rec = w.current(&op).await;
        let pi = w.charges(&op)[0].id.clone();
        assert_eq!(rec.external_id.as_deref(), Some(pi.as_str()), "{order}");
        assert!(rec.next_due_at.is_some(), "{order}: due again");
        assert!(
            rec.last_error
                .as_deref()
                .unwrap_or("")
                .contains("cancel of"),
            "{order}: {:?}",
            rec.last_error
        );

        w.clock.advance(HOUR);
        let again = w.execute(&op).await;
        assert_eq!(again.status, OperationStatus::Failed, "{order}");
        assert_eq!(again.external_id.as_deref(), Some(pi.as_str()), "{order}");
        assert_eq!(w.charges(&op)[0].status, "canceled", "{order}");
        assert_eq!(
            w.side.calls().cancel,
            cancels,
            "{order}: cancels Stripe received"
        );
        assert_eq!(w.creates(), 1, "{order}: never created again");
    }
}

/// A gateway that, on create, looks at what the store holds at that moment.
struct Observer {
    inner: Arc<dyn PaymentGateway>,
    store: Arc<MemoryStore>,
    key: OperationKey,
    seen_first_attempt: Mutex<Vec<Option<Timestamp>>>,
}

impl StripeAccount for Observer {
    fn livemode(&self) -> bool {
        self.inner.livemode()
    }
}

#[async_trait]
impl PaymentIntents for Observer {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        let rec = self.store.get(&self.key).await.unwrap().unwrap();
        self.seen_first_attempt
            .lock()
            .unwrap()
            .push(rec.first_attempted_at);
        self.inner.create(req).await
    }
    async fn retrieve(
        &self,
        id: &charge_core::domain::PaymentIntentId,
    ) -> Result<PaymentIntent, GatewayError> {
        self.inner.retrieve(id).await
    }
    async fn search_by_operation(
        &self,
        id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        self.inner.search_by_operation(id).await
    }
    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.cancel(req).await
    }
    async fn capture(&self, req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.capture(req).await
    }
}

impl StripeRefunds for Observer {}

impl charge_once::ports::StripeDisputes for Observer {}

impl CreatedLists for Observer {}

pub async fn first_attempted_at_is_durable_before_the_gateway_is_called<S: StripeUnderTest>() {
    let mut w = World::<S>::new().await;
    w.side.script(Fault::LoseResponse);
    let op = w.new_op("ord-durable", Card::Succeeds).await;
    assert_eq!(w.current(&op).await.first_attempted_at, None);
    let observer = Arc::new(Observer {
        inner: w.side.gateway(),
        store: w.store.clone(),
        key: op.key(),
        seen_first_attempt: Mutex::new(Vec::new()),
    });
    w.deps.gateway = observer.clone();
    let started = w.clock.now();

    w.execute(&op).await;
    w.clock.advance(HOUR);
    w.execute(&op).await;

    let seen = observer.seen_first_attempt.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![Some(started), Some(started)],
        "set before the call, never moved"
    );
    assert_eq!(w.charges(&op).len(), 1);
}

pub async fn pruned_key_past_the_window_settles_by_search_not_by_a_new_charge<
    S: StripeUnderTest,
>() {
    let w = World::<S>::new().await;
    w.side.script(Fault::LoseResponse);
    let op = w.new_op("ord-pruned", Card::Succeeds).await;
    w.execute(&op).await;

    w.clock.advance(25 * HOUR);
    w.side.prune_keys();
    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Succeeded);
    assert_eq!(
        w.charges(&op).len(),
        1,
        "a create now would have charged twice"
    );
    assert_eq!(w.creates(), 1);
}

/// Only the fake makes a 401 (a wrong API key).
pub async fn auth_error_never_marks_the_operation_failed() {
    let w = World::<FakeSide>::new().await;
    w.side.gateway.script(FakeFault::Unauthorized);
    let op = w.new_op("ord-401", Card::Succeeds).await;
    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Pending);
    assert_eq!(
        r.disposition,
        Disposition::RetryLater(RetryCause::Configuration)
    );
    assert_eq!(w.side.gateway.charge_count(), 0);
}

/// Only the fake makes a 400 on a valid request.
pub async fn invalid_request_goes_to_review_without_failing_the_customer() {
    let w = World::<FakeSide>::new().await;
    w.side.gateway.script(FakeFault::Rejected);
    let op = w.new_op("ord-invalid", Card::Succeeds).await;
    let r = w.execute(&op).await;
    assert_eq!(r.status, OperationStatus::Pending);
    assert!(matches!(r.disposition, Disposition::InReview(_)));
    assert_eq!(w.side.gateway.charge_count(), 0);
}

/// One `#[tokio::test]` per scenario for the Stripe side `$side` (a [`StripeUnderTest`]); with
/// `fake_only`, also the scenarios only the fake gateway can play.
#[macro_export]
macro_rules! seed_scenario_tests {
    ($side:ty) => {
        $crate::seed_scenario_tests!(@cases $side;
            response_lost_then_retry_with_same_key_charges_once,
            processing_is_not_success_and_is_settled_by_retrieve,
            processing_that_fails_later_settles_failed,
            replayed_500_stays_unknown_then_search_settles_past_the_window,
            no_search_before_stripe_search_can_be_trusted,
            window_passed_with_zero_matches_goes_to_review,
            window_passed_with_two_matches_goes_to_review,
            decline_fails_and_is_never_retried,
            a_customer_who_pays_the_declined_intent_first_settles_succeeded,
            a_cancel_without_an_answer_leaves_the_operation_unknown_until_stripe_says_canceled,
            rate_limited_keeps_status_and_retries_later_with_the_same_key,
            settled_operation_makes_zero_gateway_calls,
            key_misuse_goes_to_review_and_is_never_retried_with_another_key,
            a_stale_lease_holder_cannot_overwrite,
            first_attempted_at_is_durable_before_the_gateway_is_called,
            pruned_key_past_the_window_settles_by_search_not_by_a_new_charge,
        );
        // One thread, on purpose: the racers are spawned before any of them runs, so every one
        // claims before the winner's create can answer, whatever the machine's load. On worker
        // threads a racer delayed past the create would find the operation settled, not busy.
        #[tokio::test]
        async fn concurrent_executions_create_exactly_once() {
            $crate::seed_scenarios::concurrent_executions_create_exactly_once::<$side>().await;
        }
    };
    ($side:ty, fake_only) => {
        $crate::seed_scenario_tests!($side);
        #[tokio::test]
        async fn auth_error_never_marks_the_operation_failed() {
            $crate::seed_scenarios::auth_error_never_marks_the_operation_failed().await;
        }
        #[tokio::test]
        async fn invalid_request_goes_to_review_without_failing_the_customer() {
            $crate::seed_scenarios::invalid_request_goes_to_review_without_failing_the_customer()
                .await;
        }
    };
    (@cases $side:ty; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                $crate::seed_scenarios::$case::<$side>().await;
            }
        )+
    };
}
