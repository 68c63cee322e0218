//! Stripe's PaymentIntents API as the core uses it: create with the operation's idempotency key,
//! retrieve, search by operation id, cancel a declined intent. Its errors are already classified
//! ([`GatewayError`]).

use async_trait::async_trait;

use crate::domain::{ChargeParams, IdempotencyKey, OperationId, OrderId, PaymentIntentId};
use crate::operation::Operation;
use crate::outcome::{GatewayError, PaymentIntent};

/// A create request: the parameters plus the key derived from the operation id.
#[derive(Debug, Clone)]
pub struct CreatePaymentIntent {
    pub idempotency_key: IdempotencyKey,
    pub operation_id: OperationId,
    /// Sent as `metadata[order_id]`: Stripe's webhooks find the operation by it, on the table
    /// key.
    pub order_id: OrderId,
    pub params: ChargeParams,
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
        })
    }
}

/// A cancel request: the operation's PaymentIntent, the reason Stripe records, and the cancel key
/// derived from the operation id (never the create's key).
#[derive(Debug, Clone)]
pub struct CancelPaymentIntent {
    pub id: PaymentIntentId,
    pub idempotency_key: IdempotencyKey,
    pub reason: CancellationReason,
}

impl CancelPaymentIntent {
    /// The cancel of `id`, the operation's declined intent: `abandoned`, as nobody will pay it.
    pub fn for_operation(op: &Operation, id: PaymentIntentId) -> Self {
        Self {
            id,
            idempotency_key: op.operation_id.cancel_idempotency_key(),
            reason: CancellationReason::Abandoned,
        }
    }
}

/// Stripe's `cancellation_reason` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancellationReason {
    Duplicate,
    Fraudulent,
    RequestedByCustomer,
    Abandoned,
}

impl CancellationReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            CancellationReason::Duplicate => "duplicate",
            CancellationReason::Fraudulent => "fraudulent",
            CancellationReason::RequestedByCustomer => "requested_by_customer",
            CancellationReason::Abandoned => "abandoned",
        }
    }
}

/// Stripe's PaymentIntents API as the core uses it.
#[async_trait]
pub trait PaymentGateway: Send + Sync {
    /// The mode of the key this gateway calls Stripe with (`sk_live_…`: true). A PaymentIntent
    /// whose `livemode` differs is not one of ours, whatever its metadata says.
    fn livemode(&self) -> bool;

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
}
