//! What only a refund's record holds beside its params: its Stripe id. The record's
//! [`crate::operation::Params::Refund`] carries it, so no other kind can hold it.

use crate::domain::StripeRefundId;

/// A refund's state: what its later writes learn, beside its params that never change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefundState {
    /// The refund's Stripe id (`re_…`) once Stripe named it.
    pub stripe_refund_id: Option<StripeRefundId>,
}
