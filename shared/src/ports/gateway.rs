//! Stripe's PaymentIntents API as the core uses it: create with the operation's idempotency key,
//! retrieve, search by operation id. Its errors are already classified ([`GatewayError`]).

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
    /// key (issue 17).
    pub order_id: OrderId,
    pub params: ChargeParams,
}

impl CreatePaymentIntent {
    pub fn for_operation(op: &Operation) -> Self {
        Self {
            idempotency_key: op.idempotency_key(),
            operation_id: op.operation_id,
            order_id: op.order_id.clone(),
            params: op.params.clone(),
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
}
