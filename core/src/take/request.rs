//! What the merchant asks of a capture or a cancel of an authorization, and what each sends to
//! Stripe on every attempt. A leaf: the record (`operation.rs`) holds these, so they import
//! only the shared values.

use serde::{Deserialize, Serialize};

use crate::domain::{
    Amount, Currency, Fingerprint, OperationKind, PaymentIntentId, ValidationError,
};

/// What the merchant asks of an authorization's capture: an amount (none: all that was
/// authorized), never more than was authorized.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CaptureRequest {
    pub amount: Option<Amount>,
}

impl CaptureRequest {
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&format!(
            "capture-v1\n{}",
            self.amount
                .map_or("all".to_owned(), |a| a.minor_units().to_string())
        ))
    }
}

/// Why the merchant cancels, as Stripe names it (`cancellation_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancellationReason {
    Duplicate,
    Fraudulent,
    RequestedByCustomer,
    Abandoned,
}

impl CancellationReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Duplicate => "duplicate",
            Self::Fraudulent => "fraudulent",
            Self::RequestedByCustomer => "requested_by_customer",
            Self::Abandoned => "abandoned",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        match raw {
            "duplicate" => Ok(Self::Duplicate),
            "fraudulent" => Ok(Self::Fraudulent),
            "requested_by_customer" => Ok(Self::RequestedByCustomer),
            "abandoned" => Ok(Self::Abandoned),
            _ => Err(ValidationError::new(
                "reason",
                "must be duplicate, fraudulent, requested_by_customer or abandoned",
            )),
        }
    }
}

/// What the merchant asks of a cancel: a reason, or none.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CancelRequest {
    pub reason: Option<CancellationReason>,
}

impl CancelRequest {
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&format!(
            "cancel-v1\n{}",
            self.reason.map_or("-", |r| r.as_str())
        ))
    }
}

/// What a capture operation sends to Stripe on every attempt: the amount to capture (never more
/// than was authorized), in the charge's currency, of the charge's PaymentIntent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureParams {
    pub amount_to_capture: Amount,
    pub currency: Currency,
    pub payment_intent: PaymentIntentId,
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

/// What a cancel operation asks: the charge's authorization released (its PaymentIntent
/// canceled), or, when the charge was never sent, nothing of Stripe (`payment_intent` absent).
/// `amount_released` is what the charge held or would have taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelParams {
    pub amount_released: Amount,
    pub currency: Currency,
    pub payment_intent: Option<PaymentIntentId>,
    pub cancellation_reason: Option<CancellationReason>,
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
