//! What the merchant asks of a refund (an amount, a reason) and what a refund operation sends
//! to Stripe on every attempt. A leaf: the record (`operation.rs`) holds these, so they import
//! only the shared values.

use serde::{Deserialize, Serialize};

use crate::domain::{
    Amount, Currency, Fingerprint, OperationKind, PaymentIntentId, ValidationError,
};

/// Why the merchant refunds, as Stripe names it (`reason` on `POST /v1/refunds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefundReason {
    Duplicate,
    Fraudulent,
    RequestedByCustomer,
}

impl RefundReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Duplicate => "duplicate",
            Self::Fraudulent => "fraudulent",
            Self::RequestedByCustomer => "requested_by_customer",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        match raw {
            "duplicate" => Ok(Self::Duplicate),
            "fraudulent" => Ok(Self::Fraudulent),
            "requested_by_customer" => Ok(Self::RequestedByCustomer),
            _ => Err(ValidationError::new(
                "reason",
                "must be duplicate, fraudulent or requested_by_customer",
            )),
        }
    }
}

/// What the merchant asked for: an amount (none: all that is left of the charge) and a reason.
///
/// Its fingerprint is of the request as asked, not of the amount it resolved to: the same request
/// sent again after other refunds changed what is left is still the same refund.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RefundRequest {
    pub amount: Option<Amount>,
    pub reason: Option<RefundReason>,
}

impl RefundRequest {
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&format!(
            "refund-v1\n{}\n{}",
            self.amount
                .map_or("all".to_owned(), |a| a.minor_units().to_string()),
            self.reason.map_or("-", |r| r.as_str())
        ))
    }
}

/// What a refund operation sends to Stripe on every attempt: the amount it reserved, in the
/// charge's currency, against the charge's PaymentIntent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundParams {
    pub amount: Amount,
    pub currency: Currency,
    pub payment_intent: PaymentIntentId,
    pub reason: Option<RefundReason>,
    /// The attempt of the order's charge this acts on (its `charge#<n>` record; 1 is the
    /// head, `charge`): set by the door from the attempt it read, so the writes that give
    /// back to the charge later find the same record. Absent on the item and in `--json` when
    /// 1, as on every record written before attempts.
    #[serde(
        default = "OperationKind::first_attempt",
        skip_serializing_if = "OperationKind::is_first_attempt"
    )]
    pub charge_attempt: u32,
}
