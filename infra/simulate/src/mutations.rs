//! The mutation suite's broken variants: each breaks one rule the promise depends on, as a
//! wrapper around a port or a policy switch in the simulator's code — never a branch in the
//! production core. For each, the checker must report a violation (the order and the invariant)
//! within a bounded number of orders; `tests/mutations.rs` asserts it in CI.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use charge_core::domain::StripeRefundId;
use charge_core::refund::StripeRefund;
use charge_core::store::{
    Claim, ClaimRequest, Created, OutcomeRecord, Recorded, RefundFailedLater, Reschedule,
    ReserveRefund,
};
use charge_core::store_rules::Guard;
use charge_core::store_rules::{ChargeClaim, CreatedBeside};
use charge_core::{
    domain::{OperationId, PaymentIntentId},
    operation::{Operation, OperationKey, OperationStatus},
    outcome::{GatewayError, PaymentIntent, PaymentIntentStatus},
};
use charge_once::ports::{
    CancelPaymentIntent, CapturePaymentIntent, CreatePaymentIntent, CreateRefund, CreatedLists,
    IndexQuery, OperationCreates, OperationLeases, OperationQueue, OperationReads, OperationStore,
    Page, PaymentGateway, PaymentIntents, QueueError, QueuedOperation, SettledRecords, StoreError,
    StripeAccount, StripeRefunds, UnknownIndex,
};
use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mutation {
    /// The outcome record is written without checking the lease token (a stale holder's write lands).
    NoLeaseFence,
    /// A fresh idempotency key on every create attempt (as `--no-idempotency-key`).
    FreshKeyPerAttempt,
    /// A timeout (any unknown) rounded to `failed`, nothing retried or reconciled (as `--no-retry`).
    TimeoutAsFailed,
    /// Creates still allowed past Stripe's 24 h key lifetime (key window of 30 days).
    CreatePastKeyWindow,
    /// Checkout's put without its condition: a duplicate request overwrites a settled record.
    SettledOverwritten,
    /// The SQS deduplication id randomised on every send.
    RandomDedupId,
    /// The reconciler skips `pending` operations: a lost enqueue is never recovered.
    ReconcilerSkipsPending,
    /// The outcome relay acknowledges a stream record it failed to publish (every 50th outcome
    /// is lost): the order service never learns that charge's outcome.
    RelayLosesOutcomes,
    /// The events function settles from the event's payload without asking Stripe: its
    /// `retrieve` answers with the PaymentIntent the event being delivered carries.
    TrustEventPayload,
    /// The reconciler's index page fails on a record it cannot read instead of setting it aside
    /// (`Page::unreadable`): every tick fails while one is due.
    UnreadableFailsPage,
    /// A declined intent is recorded `failed` without being canceled: Stripe's cancel is never
    /// sent, and answered as if it had been ([`CancelNotMade`]), so the customer can still pay.
    /// Also named `declined-not-canceled`: with retries on, every failed attempt's intent stays
    /// open at Stripe (`declined intent not canceled`).
    #[value(alias = "declined-not-canceled")]
    FailedWithoutCancel,
    /// The refund door deduplicates a refund on (order, amount) instead of its refund id: a
    /// second refund id for the same amount is answered with the first refund
    /// ([`RefundStoreBug::DedupByAmount`]), so the refund the merchant asked for is never made.
    RefundDedupByAmount,
    /// The refund door takes what is left from Stripe's `amount_refunded` (money already moved)
    /// instead of our reservations ([`RefundStoreBug::LeftFromStripe`]): refunds reserved but not yet made at
    /// Stripe are not counted, so racing refunds are accepted past the charge.
    RefundLeftFromStripe,
    /// A refund created at Stripe under its charge's idempotency key (`payment-op:<charge
    /// operation id>`) instead of its own `refund-op:` key ([`RefundUnderChargeKey`]).
    RefundKeyOfCharge,
    /// A refund that ends `failed` keeps its reservation: the recording write's release is left
    /// out ([`RefundStoreBug::NoRelease`]).
    RefundNotReleased,
    /// A capture looked at again is settled by sending it again instead of reading the intent:
    /// the capture's key long gone (as a retry after it expired), Stripe refuses the intent as
    /// already captured, and that refusal is taken as the capture's failure
    /// ([`CaptureSettledByReplay`]).
    CaptureSettledByReplay,
    /// Capture and cancel not fenced against each other: the door reads the charge as if nobody
    /// took it, and a taking the charge refuses as taken is written all the same, without its
    /// claim on the charge ([`TakesNotFenced`]).
    TakesNotFenced,
    /// An authorization's deadline read from its creation (7 days after the intent was first
    /// seen) instead of Stripe's `capture_before` ([`DeadlineFromCreation`]).
    DeadlineFromCreation,
    /// The reconciler never reads a settled refund again (no refund watch): a refund Stripe fails
    /// days after it succeeded stays recorded `succeeded` on a stack without events.
    NoRefundWatch,
    /// The dispute deadline's page window set to nothing (`DisputeDeadlinePageHours` read as 0):
    /// an open dispute nobody answers is never paged before its `due_by`.
    NoDisputePage,
    /// The reconciler never reads an open dispute again at Stripe (its reads refused): a dispute
    /// whose closing events were lost stays open in our records.
    NoDisputeReread,
    /// A dispute's write leaves its charge alone ([`DisputeLeavesCharge`]): no reservation of
    /// the disputed amount, no mark of the open dispute, so the refund door's `409 disputed`
    /// never answers and the store's `refunded + disputed ≤ taken` no longer holds the money
    /// the bank took.
    DisputeUnreservedRefund,
    /// The outcome relay drops every dispute's outcome events (`DisputeOpened`,
    /// `DisputeFundsWithdrawn`, `DisputeLost`, `DisputeWon`, `DisputeClosed`): the order
    /// service never hears of a dispute.
    NoDisputeEvents,
    /// The events function records a dispute from the event's payload without retrieving it at
    /// Stripe ([`TrustDisputePayload`]): a stale or forged payload is recorded as Stripe's word.
    TrustDisputeEvent,
    /// The reconciler's dispute watch left out: with no events source, nothing records a
    /// dispute.
    NoDisputeWatch,
    /// The store's write that starts attempt n+1 skips its check of attempt n (failed, not
    /// canceled, the one the door read) ([`crate::store::AttemptWrite::Unguarded`]): a retry
    /// while the latest attempt is unsettled, or after it paid, starts another attempt. The
    /// door's own read of the attempts skipped too ([`DoorSeesFailed`]): it refuses a retry
    /// before the store is asked, so without it the store's check is never reached.
    AttemptUnguarded,
    /// The store's write that starts an attempt drops the head's `latest_attempt` guard (and the
    /// new key's absence) ([`crate::store::AttemptWrite::Unraced`]): two retries at once both
    /// start attempt n+1.
    AttemptRace,
}

impl Mutation {
    pub const ALL: [Mutation; 27] = [
        Mutation::NoLeaseFence,
        Mutation::FreshKeyPerAttempt,
        Mutation::TimeoutAsFailed,
        Mutation::CreatePastKeyWindow,
        Mutation::SettledOverwritten,
        Mutation::RandomDedupId,
        Mutation::ReconcilerSkipsPending,
        Mutation::RelayLosesOutcomes,
        Mutation::TrustEventPayload,
        Mutation::UnreadableFailsPage,
        Mutation::FailedWithoutCancel,
        Mutation::RefundDedupByAmount,
        Mutation::RefundLeftFromStripe,
        Mutation::RefundKeyOfCharge,
        Mutation::RefundNotReleased,
        Mutation::CaptureSettledByReplay,
        Mutation::TakesNotFenced,
        Mutation::DeadlineFromCreation,
        Mutation::NoRefundWatch,
        Mutation::NoDisputePage,
        Mutation::NoDisputeReread,
        Mutation::DisputeUnreservedRefund,
        Mutation::NoDisputeEvents,
        Mutation::TrustDisputeEvent,
        Mutation::NoDisputeWatch,
        Mutation::AttemptUnguarded,
        Mutation::AttemptRace,
    ];

    pub fn name(&self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }
}

/// The queue with a random deduplication id on every send.
pub struct RandomDedup(pub Arc<dyn OperationQueue>);

#[async_trait]
impl OperationQueue for RandomDedup {
    async fn send(&self, charge: &QueuedOperation) -> Result<(), QueueError> {
        let mut charge = charge.clone();
        charge.dedup_id = charge_core::ids::fresh_uuid().to_string();
        self.0.send(&charge).await
    }

    async fn depth(&self) -> Result<Option<charge_core::reconcile_plan::QueueDepth>, QueueError> {
        self.0.depth().await
    }
}

/// The store as the reconciler sees it, with every index page passed through `edit`: the two
/// broken index reads below.
pub struct EditedPages {
    inner: Arc<dyn OperationStore>,
    edit: fn(Page) -> Result<Page, StoreError>,
}

impl EditedPages {
    /// `pending` operations left out of index reads.
    pub fn skip_pending(inner: Arc<dyn OperationStore>) -> Self {
        Self {
            inner,
            edit: |mut page| {
                page.operations
                    .retain(|op| op.status != OperationStatus::Pending);
                Ok(page)
            },
        }
    }

    /// A page that fails on its first unreadable record (as `DynamoStore` did before
    /// `Page::unreadable`) instead of listing it.
    pub fn fail_on_unreadable(inner: Arc<dyn OperationStore>) -> Self {
        Self {
            inner,
            edit: |page| match page.unreadable.first() {
                Some(bad) => Err(StoreError::new(format!(
                    "index page: record {} cannot be read: {}",
                    bad.key, bad.reason
                ))
                .of_unreadable(bad.key.clone())),
                None => Ok(page),
            },
        }
    }
}

crate::forward_store!(
    EditedPages, inner:
    OperationReads,
    OperationCreates,
    OperationLeases,
    ManualResolutions,
);

#[async_trait]
impl UnknownIndex for EditedPages {
    async fn query_index(
        &self,
        query: IndexQuery,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        (self.edit)(self.inner.query_index(query, cursor, limit).await?)
    }
    async fn reschedule(&self, req: &Reschedule) -> Result<Recorded, StoreError> {
        self.inner.reschedule(req).await
    }
}

crate::forward_store!(EditedPages, inner: SettledRecords);

/// What the event being delivered carries (set by the simulation's events source around each
/// delivery): the PaymentIntent for [`TrustEventPayload`], the dispute for
/// [`TrustDisputePayload`] ([`ClaimedDispute`]).
pub struct Claimed<T = PaymentIntent>(Mutex<Option<T>>);

impl<T> Default for Claimed<T> {
    fn default() -> Self {
        Self(Mutex::new(None))
    }
}

impl<T: Clone> Claimed<T> {
    pub fn set(&self, claimed: Option<T>) {
        *crate::lock(&self.0) = claimed;
    }

    /// The event's copy, if it is of the object asked for.
    fn get_if(&self, asked: impl Fn(&T) -> bool) -> Option<T> {
        crate::lock(&self.0).clone().filter(asked)
    }
}

/// The dispute the event being delivered carries, for [`TrustDisputePayload`].
pub type ClaimedDispute = Claimed<charge_core::dispute::StripeDispute>;

/// The events function's Stripe with `trust-event-payload`: asked for the PaymentIntent the
/// event names, it answers with the event's own copy (status, amount, currency, metadata, mode)
/// instead of asking Stripe, so the function acts on what the event says.
pub struct TrustEventPayload {
    pub inner: Arc<dyn PaymentGateway>,
    pub claimed: Arc<Claimed>,
}

// The mutation is about PaymentIntents an event names: refund calls go to Stripe as they are.
crate::forward_gateway!(TrustEventPayload, inner: StripeRefunds, StripeDisputes);

impl StripeAccount for TrustEventPayload {
    fn livemode(&self) -> bool {
        self.inner.livemode()
    }
}

#[async_trait]
impl PaymentIntents for TrustEventPayload {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.create(req).await
    }
    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError> {
        match self.claimed.get_if(|pi| pi.id == *id) {
            Some(pi) => Ok(pi),
            None => self.inner.retrieve(id).await,
        }
    }
    async fn search_by_operation(
        &self,
        operation_id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        self.inner.search_by_operation(operation_id).await
    }
    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.cancel(req).await
    }
    async fn capture(&self, req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.capture(req).await
    }
}

impl CreatedLists for TrustEventPayload {}

/// Stripe as `failed-without-cancel` sees it: a cancel is never sent; it is answered with the
/// intent as Stripe holds it (read back) marked `canceled`, so the executor records `failed` while
/// the intent stays confirmable.
pub struct CancelNotMade(pub Arc<dyn PaymentGateway>);

// The mutation is about a PaymentIntent's cancel: refund calls go to Stripe as they are.
crate::forward_gateway!(CancelNotMade, 0: StripeRefunds, StripeDisputes);

impl StripeAccount for CancelNotMade {
    fn livemode(&self) -> bool {
        self.0.livemode()
    }
}

#[async_trait]
impl PaymentIntents for CancelNotMade {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.0.create(req).await
    }
    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError> {
        self.0.retrieve(id).await
    }
    async fn search_by_operation(
        &self,
        operation_id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        self.0.search_by_operation(operation_id).await
    }
    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        let pi = self.0.retrieve(&req.id).await?;
        Ok(PaymentIntent {
            status: charge_core::outcome::PaymentIntentStatus::Canceled,
            ..pi
        })
    }
    // The mutation is about a declined intent's cancel: a capture goes to Stripe as it is.
    async fn capture(&self, req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.0.capture(req).await
    }
}

impl CreatedLists for CancelNotMade {}

/// The refund mutations that live in the store, each changing one call: the door's store
/// (`refund-dedup-by-amount`, `refund-left-from-stripe`) or the charge function's
/// (`refund-not-released`).
pub enum RefundStoreBug {
    /// A new refund is answered with an existing refund of the same order for the same amount,
    /// whatever its refund id.
    DedupByAmount,
    /// A charge's reservation is read as Stripe's `amount_refunded` of its PaymentIntent, and
    /// the write checks the room the same way (the charge's amount as the door saw it, its real
    /// reservation added back).
    LeftFromStripe(stripe_sim::StripeSim),
    /// A refund's failed outcome is recorded without its release.
    NoRelease,
}

/// A store with one of the [`RefundStoreBug`]s; every other call passed through.
pub struct RefundStore {
    pub inner: Arc<dyn OperationStore>,
    pub bug: RefundStoreBug,
}

impl RefundStore {
    /// Stripe's `amount_refunded` of `charge`'s PaymentIntent (`refund-left-from-stripe`).
    fn refunded_at_stripe(&self, charge: &Operation) -> Option<i64> {
        let RefundStoreBug::LeftFromStripe(sim) = &self.bug else {
            return None;
        };
        Some(
            charge
                .external_id
                .as_deref()
                .and_then(|pi| sim.amount_refunded(pi))
                .unwrap_or(0),
        )
    }

    async fn dedup_by_amount(
        &self,
        refund: &Operation,
        reserve: &ReserveRefund,
    ) -> Result<CreatedBeside, StoreError> {
        let same = self
            .inner
            .refunds_of(&refund.order_id)
            .await?
            .into_iter()
            .find(|r| r.params.amount() == refund.params.amount());
        match same {
            Some(existing) => Ok(CreatedBeside::Existing(existing)),
            None => {
                let claim = ChargeClaim::Reserve(reserve);
                self.inner.create_beside(refund, claim).await
            }
        }
    }

    async fn room_from_stripe(&self, reserve: &ReserveRefund) -> Result<ReserveRefund, StoreError> {
        let mut reserve = reserve.clone();
        if let Some(charge) = self.inner.get(&reserve.charge).await? {
            let at_stripe = self.refunded_at_stripe(&charge).unwrap_or(0);
            let unseen = (charge.refund_reserved() - at_stripe).max(0);
            if let Ok(room) =
                charge_core::domain::Amount::new(reserve.charged.minor_units() + unseen)
            {
                reserve.charged = room;
            }
        }
        Ok(reserve)
    }
}

crate::forward_store!(RefundStore, inner: UnknownIndex, ManualResolutions);

#[async_trait]
impl OperationReads for RefundStore {
    async fn get(&self, key: &OperationKey) -> Result<Option<Operation>, StoreError> {
        let mut op = self.inner.get(key).await?;
        if let Some(charge) = op.as_mut().filter(|o| o.kind.refund_id().is_none()) {
            if let Some(at_stripe) = self.refunded_at_stripe(charge) {
                if let Some(state) = charge.params.charge_state_mut() {
                    state.refund_reserved = at_stripe;
                }
            }
        }
        Ok(op)
    }
    async fn refunds_of(
        &self,
        order_id: &charge_core::domain::OrderId,
    ) -> Result<Vec<Operation>, StoreError> {
        self.inner.refunds_of(order_id).await
    }
}

#[async_trait]
impl OperationCreates for RefundStore {
    async fn create_if_absent(&self, op: &Operation) -> Result<Created, StoreError> {
        self.inner.create_if_absent(op).await
    }
    /// Only a refund's reservation has a bug here; a capture's or cancel's take passes through.
    async fn create_beside(
        &self,
        op: &Operation,
        claim: ChargeClaim<'_>,
    ) -> Result<CreatedBeside, StoreError> {
        let ChargeClaim::Reserve(reserve) = claim else {
            return self.inner.create_beside(op, claim).await;
        };
        match &self.bug {
            RefundStoreBug::DedupByAmount => self.dedup_by_amount(op, reserve).await,
            RefundStoreBug::LeftFromStripe(_) => {
                let reserve = self.room_from_stripe(reserve).await?;
                let claim = ChargeClaim::Reserve(&reserve);
                self.inner.create_beside(op, claim).await
            }
            RefundStoreBug::NoRelease => self.inner.create_beside(op, claim).await,
        }
    }
    async fn record_dispute(
        &self,
        req: &charge_core::store::DisputeMove,
    ) -> Result<charge_core::store::DisputeRecorded, StoreError> {
        self.inner.record_dispute(req).await
    }
    async fn create_attempt(
        &self,
        req: &charge_core::store::NewAttempt,
    ) -> Result<charge_core::store::CreatedAttempt, StoreError> {
        self.inner.create_attempt(req).await
    }
}

#[async_trait]
impl OperationLeases for RefundStore {
    async fn claim(&self, req: &ClaimRequest) -> Result<Claim, StoreError> {
        self.inner.claim(req).await
    }
    async fn record(&self, rec: &OutcomeRecord) -> Result<Recorded, StoreError> {
        if matches!(self.bug, RefundStoreBug::NoRelease) && rec.release.is_some() {
            let mut rec = rec.clone();
            rec.release = None;
            return self.inner.record(&rec).await;
        }
        self.inner.record(rec).await
    }
    async fn fail_refund_later(&self, req: &RefundFailedLater) -> Result<Recorded, StoreError> {
        self.inner.fail_refund_later(req).await
    }
}

impl SettledRecords for RefundStore {}

/// `refund-key-of-charge`: Stripe as the charge function sees it, creating each refund under
/// its order's charge's idempotency key (read from the store, as the charge's record holds it).
pub struct RefundUnderChargeKey {
    pub inner: Arc<dyn PaymentGateway>,
    pub store: Arc<dyn OperationStore>,
}

crate::forward_gateway!(RefundUnderChargeKey, inner: PaymentIntents, StripeDisputes);

impl StripeAccount for RefundUnderChargeKey {
    fn livemode(&self) -> bool {
        self.inner.livemode()
    }
}

#[async_trait]
impl StripeRefunds for RefundUnderChargeKey {
    async fn create_refund(&self, req: &CreateRefund) -> Result<StripeRefund, GatewayError> {
        let mut req = req.clone();
        let charge = OperationKey::charge(req.order_id.clone());
        if let Ok(Some(charge)) = self.store.get(&charge).await {
            req.idempotency_key = charge.idempotency_key();
        }
        self.inner.create_refund(&req).await
    }
    async fn retrieve_refund(&self, id: &StripeRefundId) -> Result<StripeRefund, GatewayError> {
        self.inner.retrieve_refund(id).await
    }
    async fn list_refunds(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<StripeRefund>, GatewayError> {
        self.inner.list_refunds(payment_intent).await
    }
}

impl CreatedLists for RefundUnderChargeKey {}

/// `capture-settled-by-replay`: Stripe as the charge function sees it, where a read of an intent
/// this process sent a capture for is replaced by the capture sent again, under a fresh key (the
/// first one expired, as a late retry finds it), and a refusal of it is read as the capture's
/// end: the intent `canceled`. Stripe refuses a capture of a captured intent, so a capture that
/// was made but not recorded (its answer lost, its writer crashed) ends `failed` over the money
/// taken.
pub struct CaptureSettledByReplay {
    pub inner: Arc<dyn PaymentGateway>,
    pub sent: Mutex<std::collections::HashMap<String, CapturePaymentIntent>>,
}

impl CaptureSettledByReplay {
    pub fn new(inner: Arc<dyn PaymentGateway>) -> Self {
        Self {
            inner,
            sent: Mutex::default(),
        }
    }
}

crate::forward_gateway!(CaptureSettledByReplay, inner: StripeRefunds, StripeDisputes);

impl StripeAccount for CaptureSettledByReplay {
    fn livemode(&self) -> bool {
        self.inner.livemode()
    }
}

#[async_trait]
impl PaymentIntents for CaptureSettledByReplay {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.create(req).await
    }
    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError> {
        let sent = self
            .sent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id.as_str())
            .cloned();
        let Some(mut again) = sent else {
            return self.inner.retrieve(id).await;
        };
        again.idempotency_key =
            OperationId::from_uuid(charge_core::ids::fresh_uuid()).capture_idempotency_key();
        match self.inner.capture(&again).await {
            Err(GatewayError::UnexpectedState { .. } | GatewayError::Rejected { .. }) => Ok(
                PaymentIntent::new(id.clone(), PaymentIntentStatus::Canceled),
            ),
            other => other,
        }
    }
    async fn search_by_operation(
        &self,
        operation_id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        self.inner.search_by_operation(operation_id).await
    }
    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.cancel(req).await
    }
    async fn capture(&self, req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.sent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(req.id.as_str().to_owned(), req.clone());
        self.inner.capture(req).await
    }
}

impl CreatedLists for CaptureSettledByReplay {}

/// `deadline-from-creation`: every intent Stripe answers with a deadline is given one 7 days
/// after this process first saw it (its creation, unless that answer was lost), as if the
/// deadline were computed from the creation time and Stripe's default expiry.
pub struct DeadlineFromCreation {
    pub inner: Arc<dyn PaymentGateway>,
    pub clock: Arc<dyn charge_core::time::Clock>,
    pub first_seen: Mutex<std::collections::HashMap<String, charge_core::time::Timestamp>>,
}

impl DeadlineFromCreation {
    pub fn new(inner: Arc<dyn PaymentGateway>, clock: Arc<dyn charge_core::time::Clock>) -> Self {
        Self {
            inner,
            clock,
            first_seen: Mutex::default(),
        }
    }

    fn edit(&self, mut pi: PaymentIntent) -> PaymentIntent {
        let now = self.clock.now();
        let seen = *self
            .first_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(pi.id.as_str().to_owned())
            .or_insert(now);
        if pi.capture_before.is_some() {
            pi.capture_before = Some(seen.plus(std::time::Duration::from_secs(7 * 24 * 3600)));
        }
        pi
    }
}

crate::forward_gateway!(DeadlineFromCreation, inner: StripeRefunds, StripeDisputes);

impl StripeAccount for DeadlineFromCreation {
    fn livemode(&self) -> bool {
        self.inner.livemode()
    }
}

#[async_trait]
impl PaymentIntents for DeadlineFromCreation {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.create(req).await.map(|pi| self.edit(pi))
    }
    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError> {
        self.inner.retrieve(id).await.map(|pi| self.edit(pi))
    }
    async fn search_by_operation(
        &self,
        operation_id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        let found = self.inner.search_by_operation(operation_id).await?;
        Ok(found.into_iter().map(|pi| self.edit(pi)).collect())
    }
    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.cancel(req).await.map(|pi| self.edit(pi))
    }
    async fn capture(&self, req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.capture(req).await.map(|pi| self.edit(pi))
    }
}

impl CreatedLists for DeadlineFromCreation {}

/// A mutation that bends what a store reads or writes for the door or the engine, as a wrapper
/// ([`Bent`]): each hook answers as the wrapped store would unless the mutation changes it, so a
/// mutation names only the rule it breaks. Every other call is handed to the wrapped store.
#[async_trait]
pub trait Bend: Send + Sync + 'static {
    /// A record as `get` reads it (and the reads built on it: `charge_of`, `attempts_of`).
    fn read(&self, op: Operation) -> Operation {
        op
    }
    /// The record a create finds already there (`create_if_absent`'s `Existing`).
    fn found(&self, op: Operation) -> Operation {
        op
    }
    async fn create_beside(
        &self,
        store: &dyn OperationStore,
        op: &Operation,
        claim: ChargeClaim<'_>,
    ) -> Result<CreatedBeside, StoreError> {
        store.create_beside(op, claim).await
    }
    async fn record_dispute(
        &self,
        store: &dyn OperationStore,
        req: &charge_core::store::DisputeMove,
    ) -> Result<charge_core::store::DisputeRecorded, StoreError> {
        store.record_dispute(req).await
    }
}

/// A store with a mutation's [`Bend`].
pub struct Bent(pub Arc<dyn OperationStore>, pub Box<dyn Bend>);

impl Bent {
    pub fn new(store: Arc<dyn OperationStore>, bend: impl Bend) -> Self {
        Self(store, Box::new(bend))
    }
}

crate::forward_store!(
    Bent, 0:
    OperationLeases,
    UnknownIndex,
    ManualResolutions,
    SettledRecords,
);

#[async_trait]
impl OperationReads for Bent {
    async fn get(&self, key: &OperationKey) -> Result<Option<Operation>, StoreError> {
        Ok(self.0.get(key).await?.map(|op| self.1.read(op)))
    }
    async fn refunds_of(
        &self,
        order_id: &charge_core::domain::OrderId,
    ) -> Result<Vec<Operation>, StoreError> {
        self.0.refunds_of(order_id).await
    }
}

#[async_trait]
impl OperationCreates for Bent {
    async fn create_if_absent(&self, op: &Operation) -> Result<Created, StoreError> {
        Ok(match self.0.create_if_absent(op).await? {
            Created::Existing(existing) => Created::Existing(self.1.found(existing)),
            created => created,
        })
    }
    async fn create_beside(
        &self,
        op: &Operation,
        claim: ChargeClaim<'_>,
    ) -> Result<CreatedBeside, StoreError> {
        self.1.create_beside(&*self.0, op, claim).await
    }
    async fn record_dispute(
        &self,
        req: &charge_core::store::DisputeMove,
    ) -> Result<charge_core::store::DisputeRecorded, StoreError> {
        self.1.record_dispute(&*self.0, req).await
    }
    async fn create_attempt(
        &self,
        req: &charge_core::store::NewAttempt,
    ) -> Result<charge_core::store::CreatedAttempt, StoreError> {
        self.0.create_attempt(req).await
    }
}

/// `takes-not-fenced`: the door's store with the fence between a capture and a cancel gone. The
/// charge is read as if nobody took it, and a taking the charge refuses because another took
/// it is written on its own (no claim on the charge): both go on to Stripe.
pub struct TakesNotFenced;

#[async_trait]
impl Bend for TakesNotFenced {
    fn read(&self, mut op: Operation) -> Operation {
        if let Some(charge) = op.params.charge_state_mut() {
            charge.taken_by = None;
        }
        op
    }
    async fn create_beside(
        &self,
        store: &dyn OperationStore,
        op: &Operation,
        claim: ChargeClaim<'_>,
    ) -> Result<CreatedBeside, StoreError> {
        match store.create_beside(op, claim).await? {
            CreatedBeside::ChargeRefused(Some((_, Guard::NotTaken))) => {
                Ok(match store.create_if_absent(op).await? {
                    Created::New(op) => CreatedBeside::New(op),
                    Created::Existing(op) => CreatedBeside::Existing(op),
                })
            }
            other => Ok(other),
        }
    }
}

/// `dispute-unreserved-refund`: a dispute's write that leaves its charge alone, as a dispute
/// record written on its own would: the charge's side of the write ([`DisputeOnCharge`]) keeps
/// only its fence on the charge read, without the reservation of the disputed amount, its give
/// back, or the mark of the open dispute. The door then reads the charge as undisputed (no
/// `409 disputed`) and the store's `refund_reserved ≤ taken` no longer counts what the bank
/// took: a lost dispute's money is not held against the order's refunds.
///
/// [`DisputeOnCharge`]: charge_core::store::DisputeOnCharge
pub struct DisputeLeavesCharge;

impl DisputeLeavesCharge {
    fn unclaimed(on: &charge_core::store::DisputeOnCharge) -> charge_core::store::DisputeOnCharge {
        charge_core::store::DisputeOnCharge {
            mark: charge_core::store::DisputeMark::Keep,
            reserve: None,
            give_back: None,
            ..on.clone()
        }
    }
}

#[async_trait]
impl Bend for DisputeLeavesCharge {
    async fn create_beside(
        &self,
        store: &dyn OperationStore,
        op: &Operation,
        claim: ChargeClaim<'_>,
    ) -> Result<CreatedBeside, StoreError> {
        match claim {
            ChargeClaim::Dispute(on) => {
                let on = Self::unclaimed(on);
                store.create_beside(op, ChargeClaim::Dispute(&on)).await
            }
            claim => store.create_beside(op, claim).await,
        }
    }
    async fn record_dispute(
        &self,
        store: &dyn OperationStore,
        req: &charge_core::store::DisputeMove,
    ) -> Result<charge_core::store::DisputeRecorded, StoreError> {
        let mut req = req.clone();
        req.on_charge = req.on_charge.as_ref().map(Self::unclaimed);
        store.record_dispute(&req).await
    }
}

/// The events function's Stripe with `trust-dispute-event`: asked for the dispute the event
/// names, it answers with the event's own copy instead of retrieving it at Stripe, so a stale
/// or forged payload is recorded as Stripe's word.
pub struct TrustDisputePayload {
    pub inner: Arc<dyn PaymentGateway>,
    pub claimed: Arc<ClaimedDispute>,
}

crate::forward_gateway!(
    TrustDisputePayload, inner:
    StripeAccount,
    PaymentIntents,
    StripeRefunds,
    CreatedLists,
);

#[async_trait]
impl charge_once::ports::StripeDisputes for TrustDisputePayload {
    async fn retrieve_dispute(
        &self,
        id: &charge_core::domain::DisputeId,
    ) -> Result<charge_core::dispute::StripeDispute, GatewayError> {
        match self.claimed.get_if(|d| d.id == *id) {
            Some(dispute) => Ok(dispute),
            None => self.inner.retrieve_dispute(id).await,
        }
    }
    async fn list_disputes(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<charge_core::dispute::StripeDispute>, GatewayError> {
        self.inner.list_disputes(payment_intent).await
    }
}

/// `attempt-unguarded`, the door's side: the door's reads of an order's charge attempts see
/// every attempt still in flight or paid as `failed`, so its own refusal (`attempt_in_flight`,
/// `paid`) never comes and every retry goes on to the store's write; what stops it then is the
/// store's check of attempt n alone, which the mutation's store skips
/// ([`crate::store::AttemptWrite::Unguarded`]). Every other read and write passed through.
pub struct DoorSeesFailed;

impl Bend for DoorSeesFailed {
    fn read(&self, op: Operation) -> Operation {
        seen_failed(op)
    }
    /// The order's head the checkout's create finds is read as `failed` too.
    fn found(&self, op: Operation) -> Operation {
        seen_failed(op)
    }
}

/// A charge attempt as `attempt-unguarded`'s door reads it: `failed`, whatever it is.
fn seen_failed(mut op: Operation) -> Operation {
    if op.kind.is_charge() {
        op.status = OperationStatus::Failed;
    }
    op
}
