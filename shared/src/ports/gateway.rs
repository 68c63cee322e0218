//! Stripe's PaymentIntents and Refunds APIs as the core uses them: create with the operation's
//! idempotency key, retrieve, search by operation id, cancel a declined intent; create, retrieve
//! and list refunds; read disputes. Its errors are already classified ([`GatewayError`]).

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use charge_core::audit::AuditWindow;
use charge_core::dispute::StripeDispute;
use charge_core::domain::{
    Amount, ChargeParams, DisputeId, IdempotencyKey, OperationId, OrderId, PaymentIntentId,
    StripeRefundId,
};
use charge_core::operation::Operation;
use charge_core::outcome::{GatewayError, PaymentIntent};
use charge_core::refund::{request::RefundParams, StripeRefund};

/// One page of a Stripe list, newest first as Stripe lists them. `next` is the last object's id,
/// passed back as `starting_after` for the next page; `None` when Stripe said `has_more: false`.
#[derive(Debug, Clone)]
pub struct ListPage<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

/// A create request: the parameters plus the key derived from the operation id.
#[derive(Debug, Clone)]
pub struct CreatePaymentIntent {
    pub idempotency_key: IdempotencyKey,
    pub operation_id: OperationId,
    /// Sent as `metadata[order_id]`: Stripe's webhooks find the operation by it, on the table
    /// key.
    pub order_id: OrderId,
    pub params: ChargeParams,
    /// The order's charge attempt this intent is, sent as `metadata[attempt]` from 2 on; the
    /// first attempt's intent carries none, as every release before attempts created it (a
    /// reader takes an absent `attempt` as 1).
    pub attempt: u32,
}

impl CreatePaymentIntent {
    /// The create of a charge operation; `None` for any other kind (a refund is never created as
    /// a PaymentIntent).
    pub fn for_operation(op: &Operation) -> Option<Self> {
        Some(Self {
            idempotency_key: op.idempotency_key(),
            operation_id: op.operation_id,
            order_id: op.order_id.clone(),
            params: op.params.charge()?.clone(),
            attempt: op.kind.attempt_no()?,
        })
    }
}

/// A cancel request: the operation's PaymentIntent, the reason Stripe records (none: Stripe
/// records none), and the cancel key derived from the operation id (never the create's key).
#[derive(Debug, Clone)]
pub struct CancelPaymentIntent {
    pub id: PaymentIntentId,
    pub idempotency_key: IdempotencyKey,
    pub reason: Option<CancellationReason>,
}

impl CancelPaymentIntent {
    /// The cancel of `id`, the operation's declined intent: `abandoned`, as nobody will pay it.
    pub fn for_operation(op: &Operation, id: PaymentIntentId) -> Self {
        Self {
            id,
            idempotency_key: op.operation_id.cancel_idempotency_key(),
            reason: Some(CancellationReason::Abandoned),
        }
    }

    /// The merchant's cancel operation's: its charge's intent, with the reason it asked, under
    /// the cancel operation's own key (`cancel-op:<operation_id>`). `None` for any other kind,
    /// and for a cancel of a charge never sent (nothing at Stripe to cancel).
    pub fn for_cancel_operation(op: &Operation) -> Option<Self> {
        let params = op.params.cancel()?;
        Some(Self {
            id: params.payment_intent.clone()?,
            idempotency_key: op.idempotency_key(),
            reason: params.cancellation_reason,
        })
    }
}

use charge_core::take::request::CancellationReason;

/// A capture request (`POST /v1/payment_intents/{id}/capture`): the capture operation's amount of
/// its charge's intent, under the capture key (`capture-op:<operation_id>`), the same on every
/// attempt.
#[derive(Debug, Clone)]
pub struct CapturePaymentIntent {
    pub id: PaymentIntentId,
    pub idempotency_key: IdempotencyKey,
    pub amount_to_capture: Amount,
}

impl CapturePaymentIntent {
    /// The capture of a capture operation; `None` for any other kind.
    pub fn for_operation(op: &Operation) -> Option<Self> {
        let params = op.params.capture()?;
        Some(Self {
            id: params.payment_intent.clone(),
            idempotency_key: op.idempotency_key(),
            amount_to_capture: params.amount_to_capture,
        })
    }
}

/// A refund create (`POST /v1/refunds`): the refund operation's amount against its charge's
/// PaymentIntent, with `metadata[operation_id]`, `metadata[order_id]` and the refund key
/// (`refund-op:<operation_id>`), the same on every attempt.
#[derive(Debug, Clone)]
pub struct CreateRefund {
    pub idempotency_key: IdempotencyKey,
    pub operation_id: OperationId,
    pub order_id: OrderId,
    pub params: RefundParams,
}

impl CreateRefund {
    /// The create of a refund operation; `None` for any other kind.
    pub fn for_operation(op: &Operation) -> Option<Self> {
        Some(Self {
            idempotency_key: op.idempotency_key(),
            operation_id: op.operation_id,
            order_id: op.order_id.clone(),
            params: op.params.refund()?.clone(),
        })
    }
}

/// What a gateway answers for a refund call it does not make (a test double that only charges).
pub fn refunds_not_supported(what: &str) -> GatewayError {
    GatewayError::Rejected {
        detail: format!("this gateway does not make {what}"),
        param: None,
    }
}

/// Stripe's PaymentIntents and Refunds APIs as the core uses them, as one whole: the account
/// ([`StripeAccount`]), the intents ([`PaymentIntents`]), the refunds ([`StripeRefunds`]) and the
/// audit's lists ([`CreatedLists`]), which a full gateway (the Stripe client, the fake, the
/// simulation's) implements one by one. Implemented for any type that has them all; a caller
/// that needs only some names only those, and a wrapper implements the ones it changes and
/// forwards the rest (the simulation's `forward_gateway!`).
///
/// The calls past a charge's (capture, the refunds, the lists) have default bodies that refuse
/// ([`refunds_not_supported`]), for the test doubles that only charge; every gateway on a
/// production path (the Stripe client, the pacing wrapper, the fakes and the simulation's) makes
/// them.
pub trait PaymentGateway:
    StripeAccount + PaymentIntents + StripeRefunds + StripeDisputes + CreatedLists
{
}

impl<T> PaymentGateway for T where
    T: StripeAccount + PaymentIntents + StripeRefunds + StripeDisputes + CreatedLists + ?Sized
{
}

/// The Stripe account a gateway calls: its mode, and what it sent.
pub trait StripeAccount: Send + Sync {
    /// The mode of the key this gateway calls Stripe with (`sk_live_…`: true). A PaymentIntent
    /// whose `livemode` differs is not one of ours, whatever its metadata says.
    fn livemode(&self) -> bool;

    /// The requests this gateway sent to Stripe, by endpoint, when it counts them (the Stripe
    /// client does, and a wrapper around it forwards them): what a function reports as its
    /// `StripeRequests` metric. `None` for a gateway that does not call Stripe.
    fn requests(&self) -> Option<&StripeRequests> {
        None
    }
}

/// Stripe's PaymentIntents: a charge's create, read, search, cancel and capture.
#[async_trait]
pub trait PaymentIntents: Send + Sync {
    /// Creates and confirms off-session, with `metadata[operation_id]` and the idempotency key.
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError>;

    /// Reads the current state of a PaymentIntent.
    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError>;

    /// Finds PaymentIntents by `metadata['operation_id']`. Eventually consistent: never use it
    /// right after a create.
    async fn search_by_operation(
        &self,
        operation_id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError>;

    /// Cancels a PaymentIntent (`POST /v1/payment_intents/{id}/cancel`) with the cancel key, so
    /// nobody can confirm it any more. Stripe answers the intent, `canceled`; an intent that
    /// succeeded or was canceled meanwhile is refused as [`GatewayError::UnexpectedState`].
    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError>;

    /// Captures an authorized PaymentIntent (`POST /v1/payment_intents/{id}/capture`) with the
    /// capture key. Stripe answers the intent, `succeeded` with `amount_received`; an intent
    /// captured, canceled or lapsed meanwhile is refused as [`GatewayError::UnexpectedState`]
    /// (and that refusal is replayed under the same key until it expires: read the intent).
    async fn capture(&self, req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        let _ = req;
        Err(refunds_not_supported("captures"))
    }
}

/// Stripe's Refunds, as a refund operation and the events function use them.
#[async_trait]
pub trait StripeRefunds: Send + Sync {
    /// Creates a refund (`POST /v1/refunds`) with the refund key: a lost answer re-sent under the
    /// same key replays the first.
    async fn create_refund(&self, req: &CreateRefund) -> Result<StripeRefund, GatewayError> {
        let _ = req;
        Err(refunds_not_supported("refund creates"))
    }

    /// Reads a refund's current state (`GET /v1/refunds/{id}`): the only word a late failure
    /// (`succeeded` then `failed`) is taken on.
    async fn retrieve_refund(&self, id: &StripeRefundId) -> Result<StripeRefund, GatewayError> {
        let _ = id;
        Err(refunds_not_supported("refund retrieves"))
    }

    /// Every refund of a PaymentIntent (`GET /v1/refunds?payment_intent=…`, all pages). Lists are
    /// not delayed as search is: what settles a refund whose id was never learned.
    async fn list_refunds(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<StripeRefund>, GatewayError> {
        let _ = payment_intent;
        Err(refunds_not_supported("refund lists"))
    }
}

/// Stripe's Disputes, read only: the engine never creates or answers one (evidence is a
/// person's work in Stripe's dashboard). What an event claims about a dispute is a hint; these
/// reads are what its record is written from.
#[async_trait]
pub trait StripeDisputes: Send + Sync {
    /// Reads a dispute's current state (`GET /v1/disputes/{id}`).
    async fn retrieve_dispute(&self, id: &DisputeId) -> Result<StripeDispute, GatewayError> {
        let _ = id;
        Err(refunds_not_supported("dispute retrieves"))
    }

    /// Every dispute of a PaymentIntent (`GET /v1/disputes?payment_intent=…`, all pages).
    async fn list_disputes(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<StripeDispute>, GatewayError> {
        let _ = payment_intent;
        Err(refunds_not_supported("dispute lists"))
    }
}

/// The drift audit's: what Stripe created in a window, page by page.
#[async_trait]
pub trait CreatedLists: Send + Sync {
    /// One page (up to 100) of the PaymentIntents created in `window`
    /// (`GET /v1/payment_intents?created[gte]=…&created[lt]=…&limit=100[&starting_after=…]`),
    /// every one, ours or not: the audit decides by their metadata. Lists are not delayed as
    /// search is.
    async fn list_intents_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<PaymentIntent>, GatewayError> {
        let _ = (window, starting_after);
        Err(refunds_not_supported("PaymentIntent lists"))
    }

    /// One page (up to 100) of the refunds created in `window`
    /// (`GET /v1/refunds?created[gte]=…&created[lt]=…&limit=100[&starting_after=…]`), with or
    /// without our metadata (a refund made in the dashboard has none).
    async fn list_refunds_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<StripeRefund>, GatewayError> {
        let _ = (window, starting_after);
        Err(refunds_not_supported("refund lists by creation time"))
    }

    /// One page (up to 100) of the disputes created in `window`
    /// (`GET /v1/disputes?created[gte]=…&created[lt]=…&limit=100[&starting_after=…]`): the
    /// audit finds each one's record through its PaymentIntent.
    async fn list_disputes_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<StripeDispute>, GatewayError> {
        let _ = (window, starting_after);
        Err(refunds_not_supported("dispute lists by creation time"))
    }
}

/// Requests sent, by endpoint (every in-call retry counts), for the benchmarks and the
/// functions' `StripeRequests` metric.
#[derive(Debug, Default)]
pub struct StripeRequests {
    pub create: AtomicU64,
    pub retrieve: AtomicU64,
    pub search: AtomicU64,
    pub cancel: AtomicU64,
    /// `POST /v1/payment_intents/{id}/capture`.
    pub capture: AtomicU64,
    /// `POST /v1/refunds`.
    pub refund_create: AtomicU64,
    /// `GET /v1/refunds/{id}` and every page of `GET /v1/refunds`.
    pub refund_read: AtomicU64,
    /// Every page of `GET /v1/payment_intents` (the audit's list by creation time).
    pub list: AtomicU64,
    /// `GET /v1/disputes/{id}` and every page of `GET /v1/disputes` (by PaymentIntent, or the
    /// audit's by creation time).
    pub dispute_read: AtomicU64,
    /// Answers that were Stripe's 429 (`rate_limit`), any endpoint.
    pub rate_limited: AtomicU64,
    /// What [`StripeRequests::since_last_report`] last returned, as totals.
    reported: std::sync::Mutex<RequestTotals>,
}

/// Requests sent per endpoint and 429s met: totals, or the change since the last report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RequestTotals {
    pub create: u64,
    pub retrieve: u64,
    pub search: u64,
    pub cancel: u64,
    pub capture: u64,
    pub refund_create: u64,
    pub refund_read: u64,
    pub list: u64,
    pub dispute_read: u64,
    pub rate_limited: u64,
}

impl RequestTotals {
    /// (endpoint, requests) for each endpoint, in a fixed order: the `Endpoint` dimension of
    /// the `StripeRequests` metric.
    pub fn by_endpoint(&self) -> [(&'static str, u64); 9] {
        [
            ("create", self.create),
            ("retrieve", self.retrieve),
            ("search", self.search),
            ("cancel", self.cancel),
            ("capture", self.capture),
            ("refund_create", self.refund_create),
            ("refund_read", self.refund_read),
            ("list", self.list),
            ("dispute_read", self.dispute_read),
        ]
    }

    pub fn requests(&self) -> u64 {
        self.by_endpoint().iter().map(|(_, n)| n).sum()
    }
}

impl StripeRequests {
    /// The totals so far.
    pub fn totals(&self) -> RequestTotals {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RequestTotals {
            create: n(&self.create),
            retrieve: n(&self.retrieve),
            search: n(&self.search),
            cancel: n(&self.cancel),
            capture: n(&self.capture),
            refund_create: n(&self.refund_create),
            refund_read: n(&self.refund_read),
            list: n(&self.list),
            dispute_read: n(&self.dispute_read),
            rate_limited: n(&self.rate_limited),
        }
    }

    /// What was sent since the previous call (since start, the first time): a function reports
    /// it once per invocation, as its `StripeRequests` metric.
    pub fn since_last_report(&self) -> RequestTotals {
        let now = self.totals();
        let mut last = self.reported.lock().unwrap_or_else(|p| p.into_inner());
        let d = |a: u64, b: u64| a.saturating_sub(b);
        let delta = RequestTotals {
            create: d(now.create, last.create),
            retrieve: d(now.retrieve, last.retrieve),
            search: d(now.search, last.search),
            cancel: d(now.cancel, last.cancel),
            capture: d(now.capture, last.capture),
            refund_create: d(now.refund_create, last.refund_create),
            refund_read: d(now.refund_read, last.refund_read),
            list: d(now.list, last.list),
            dispute_read: d(now.dispute_read, last.dispute_read),
            rate_limited: d(now.rate_limited, last.rate_limited),
        };
        *last = now;
        delta
    }

    pub fn total(&self) -> u64 {
        self.create.load(Ordering::Relaxed)
            + self.retrieve.load(Ordering::Relaxed)
            + self.search.load(Ordering::Relaxed)
            + self.cancel.load(Ordering::Relaxed)
            + self.capture.load(Ordering::Relaxed)
            + self.refund_create.load(Ordering::Relaxed)
            + self.refund_read.load(Ordering::Relaxed)
            + self.list.load(Ordering::Relaxed)
            + self.dispute_read.load(Ordering::Relaxed)
    }
}
