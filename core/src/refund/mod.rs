//! Refunds: what the merchant asks for, what Stripe's refund statuses mean for the operation, and
//! the rule that keeps an order's refunds within what was charged.
//!
//! A refund is an operation of its own (kind `refund`, one per merchant refund id), executed like
//! a charge: persisted first, created at Stripe with a key derived from its operation id
//! (`refund-op:<operation_id>`), `unknown` never rounded, settled by retrieve or by listing the
//! PaymentIntent's refunds. What it adds is money conservation across operations: accepting a
//! refund **reserves** its amount on the order's charge record in the same conditional write that
//! creates the refund ([`reserve`]), so concurrent refunds can never together exceed the charge;
//! a refund that ends `failed` or `canceled` releases its reservation ([`release`]).
//!
//! This module is the refund's door rule; beside it:
//! - [`plan`]: (refund record as claimed, Stripe's answer, now) → the next record, and whether its
//!   reservation goes back to the charge.
//! - [`event_plan`]: (refund record as read, what a refund event claims, Stripe's answer) → settle
//!   through the refund plan, fail a succeeded refund later, or why nothing changes.
//! - [`watch`]: which succeeded refunds are read again at Stripe, and when, until they can no
//!   longer fail; what a read means is the event rule's answer.
//! - [`state`]: what only a refund's record holds (its Stripe id).
//! - [`request`]: what the merchant asks (an amount, a reason) and what each attempt sends.

pub mod event_plan;
pub mod plan;
pub mod request;
pub mod state;
pub mod watch;

use std::fmt;

use self::request::{RefundParams, RefundRequest};
use crate::domain::{Amount, ChargeParams, DisputeId, OrderId, StripeRefundId, ValidationError};
use crate::operation::{Operation, OperationStatus};
use crate::store::ReserveRefund;
use crate::time::Timestamp;

/// A refund's `status` as Stripe reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RefundStatus {
    Pending,
    RequiresAction,
    Succeeded,
    Failed,
    Canceled,
    /// A status this code does not know: not settled, never success or failure.
    Other(String),
}

impl RefundStatus {
    pub fn parse(raw: &str) -> Self {
        match raw {
            "pending" => Self::Pending,
            "requires_action" => Self::RequiresAction,
            "succeeded" => Self::Succeeded,
            "failed" => Self::Failed,
            "canceled" => Self::Canceled,
            other => Self::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Pending => "pending",
            Self::RequiresAction => "requires_action",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
            Self::Other(s) => s,
        }
    }
}

impl fmt::Display for RefundStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a refund's status means for its operation. `succeeded` is money returned; `failed` and
/// `canceled` are money not returned (the reservation is released). `pending` and
/// `requires_action` are not settled: the refund may still succeed or fail, look again.
///
/// `succeeded` is final for everything but Stripe's own word that it failed later (a closed
/// card): that one transition, `succeeded → failed`, is taken only from a retrieve.
pub fn refund_outcome_for(status: &RefundStatus) -> OperationStatus {
    match status {
        RefundStatus::Succeeded => OperationStatus::Succeeded,
        RefundStatus::Failed | RefundStatus::Canceled => OperationStatus::Failed,
        _ => OperationStatus::Unknown,
    }
}

/// A refund as far as the core needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeRefund {
    pub id: StripeRefundId,
    pub status: RefundStatus,
    /// The answer was a replay of an earlier create under the same key (`Idempotent-Replayed`).
    pub replayed: bool,
    pub amount: Option<i64>,
    pub currency: Option<String>,
    pub payment_intent: Option<String>,
    /// `metadata[operation_id]`: whose refund it is.
    pub operation_id: Option<String>,
    /// `metadata[order_id]`: the order whose records hold it (the audit finds the record by it).
    pub order_id: Option<String>,
    /// Why Stripe says it failed (`lost_or_stolen_card`, `expired_or_canceled_card`, `unknown`).
    pub failure_reason: Option<String>,
    /// Why it was made (`requested_by_customer`, ...; Stripe's own `expired_uncaptured_charge`
    /// for an authorization's released part on versions before basil). Optional: a refund read
    /// without it is judged as before.
    pub reason: Option<String>,
}

impl StripeRefund {
    /// Stripe's own record of an authorization's released part (a partial capture's remainder, a
    /// canceled or lapsed hold) on versions before basil: its reason, and no operation of ours.
    /// Never a refund this engine made, and never money it moved.
    pub fn is_released_remainder(&self) -> bool {
        self.operation_id.is_none()
            && self.reason.as_deref() == Some(crate::stripe_version::RELEASED_REMAINDER_REASON)
    }
}

/// Why a refund is refused at the door. Nothing is written for any of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefundRefusal {
    #[error("the order has no charge")]
    NoCharge,
    #[error("the order's charge is {0}, not succeeded: only money taken can be refunded")]
    NotSucceeded(OperationStatus),
    #[error("the order's charge has no PaymentIntent recorded")]
    NoPaymentIntent,
    /// The charge's open dispute leaves it unrefundable (Stripe says so: funds withdrawn):
    /// Stripe would refuse the refund (`charge_disputed`), and a refund paid beside a lost
    /// dispute would pay the customer twice. An inquiry lets a refund through.
    #[error(
        "order {order_id} has an open dispute {dispute}: Stripe does not refund a disputed \
         charge; answer the dispute in Stripe's dashboard (Payments → Disputes)"
    )]
    Disputed {
        order_id: OrderId,
        dispute: DisputeId,
    },
    #[error("the order's charge is refunded in full: nothing is left to refund")]
    NothingLeft,
    #[error("amount {asked} is over what is left to refund, {left} (minor units)")]
    OverWhatIsLeft { asked: i64, left: i64 },
    /// The amount breaks a digit rule Stripe applies to refunds in the charge's currency
    /// ([`ChargeParams::check_divisible`]): Stripe would refuse it.
    #[error("{0}")]
    Indivisible(ValidationError),
}

/// What is left to refund of `charge`: the amount taken (charged, or captured of an
/// authorization) less what its refunds reserved.
pub fn refundable(charge: &Operation) -> i64 {
    charge.amount_taken().minor_units() - charge.refund_reserved()
}

/// What the door decides for `request` against the order's `charge` as read: the refund's
/// parameters and the reservation to write with it, or why it may not be made. A charge record is
/// the only thing refunded: a succeeded charge with its PaymentIntent; the amount (all that is left
/// when the request names none) must fit in what is left. The store's write checks the same room
/// again atomically ([`crate::store_rules`]), so a refund reserved meanwhile is never exceeded.
pub fn reserve(
    charge: &Operation,
    request: &RefundRequest,
    now: Timestamp,
) -> Result<(RefundParams, ReserveRefund), RefundRefusal> {
    if !charge.kind.is_charge() {
        return Err(RefundRefusal::NoCharge);
    }
    if charge.status != OperationStatus::Succeeded {
        return Err(RefundRefusal::NotSucceeded(charge.status));
    }
    let payment_intent = charge
        .external_id
        .clone()
        .ok_or(RefundRefusal::NoPaymentIntent)?;
    if let Some(dispute) = charge
        .params
        .charge_state()
        .and_then(|s| s.refund_blocked_by())
    {
        return Err(RefundRefusal::Disputed {
            order_id: charge.order_id.clone(),
            dispute: dispute.clone(),
        });
    }
    let left = refundable(charge);
    if left <= 0 {
        return Err(RefundRefusal::NothingLeft);
    }
    let asked = request.amount.map_or(left, |a| a.minor_units());
    if let Ok(amount) = Amount::new(asked) {
        ChargeParams::check_divisible(amount, charge.params.currency())
            .map_err(RefundRefusal::Indivisible)?;
    }
    if asked > left {
        return Err(RefundRefusal::OverWhatIsLeft { asked, left });
    }
    let amount = Amount::new(asked).map_err(|_| RefundRefusal::NothingLeft)?;
    let params = RefundParams {
        amount,
        currency: charge.params.currency().clone(),
        payment_intent,
        reason: request.reason,
        charge_attempt: charge.kind.attempt_no().unwrap_or(1),
    };
    let reservation = ReserveRefund {
        charge: charge.key(),
        charge_operation_id: charge.operation_id,
        amount,
        charged: charge.amount_taken(),
        now,
    };
    Ok((params, reservation))
}
