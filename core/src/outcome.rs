//! Stripe's answers, classified once at the boundary into what they mean for the operation.
//! Nothing downstream of a `PaymentGateway` (the shell's port to Stripe) looks at HTTP codes.

use std::fmt;

use crate::domain::PaymentIntentId;
use crate::operation::OperationStatus;

/// A PaymentIntent's `status` as Stripe reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PaymentIntentStatus {
    RequiresPaymentMethod,
    RequiresConfirmation,
    RequiresAction,
    Processing,
    RequiresCapture,
    Canceled,
    Succeeded,
    /// A status this code does not know. Treated as unknown, never as success or failure.
    Other(String),
}

impl PaymentIntentStatus {
    pub fn parse(raw: &str) -> Self {
        match raw {
            "requires_payment_method" => Self::RequiresPaymentMethod,
            "requires_confirmation" => Self::RequiresConfirmation,
            "requires_action" => Self::RequiresAction,
            "processing" => Self::Processing,
            "requires_capture" => Self::RequiresCapture,
            "canceled" => Self::Canceled,
            "succeeded" => Self::Succeeded,
            other => Self::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::RequiresPaymentMethod => "requires_payment_method",
            Self::RequiresConfirmation => "requires_confirmation",
            Self::RequiresAction => "requires_action",
            Self::Processing => "processing",
            Self::RequiresCapture => "requires_capture",
            Self::Canceled => "canceled",
            Self::Succeeded => "succeeded",
            Self::Other(s) => s,
        }
    }
}

impl fmt::Display for PaymentIntentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a PaymentIntent's status means for the operation.
///
/// Only `succeeded` is money taken. `canceled` and `requires_payment_method` (the state a declined
/// off-session confirm leaves behind) are failures. Everything else (`processing`,
/// `requires_action`, `requires_capture`, anything new) is not settled yet: unknown, look again later.
///
/// `requires_payment_method` is a failure of this attempt, not yet a final one: the customer can
/// still confirm that intent (Stripe's recovery for `authentication_required`). `failed` is
/// recorded only once the intent is canceled: the executor cancels it first
/// ([`crate::charge::plan`]).
pub fn outcome_for(status: &PaymentIntentStatus) -> OperationStatus {
    match status {
        PaymentIntentStatus::Succeeded => OperationStatus::Succeeded,
        PaymentIntentStatus::Canceled | PaymentIntentStatus::RequiresPaymentMethod => {
            OperationStatus::Failed
        }
        _ => OperationStatus::Unknown,
    }
}

/// A PaymentIntent as far as the core needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentIntent {
    pub id: PaymentIntentId,
    pub status: PaymentIntentStatus,
    /// The answer was a replay of an earlier request under the same key (`Idempotent-Replayed`).
    pub replayed: bool,
    /// What Stripe says was charged (minor units and lower-case currency), for which operation and
    /// order (`metadata.operation_id`, `metadata.order_id`) and in which mode (`livemode`), when
    /// the answer carried them. Before an intent settles an operation the core checks every one
    /// of them against the record ([`crate::charge::plan::intent_mismatch`]); an absent fact
    /// counts as a mismatch.
    pub amount: Option<i64>,
    pub currency: Option<String>,
    pub operation_id: Option<String>,
    pub order_id: Option<String>,
    pub livemode: Option<bool>,
    /// What was taken (`amount_received`): a captured authorization's captured amount.
    pub amount_received: Option<i64>,
    /// Why it was canceled (`automatic` on the pinned version, `expired` since basil: Stripe
    /// canceled an uncaptured hold at its expiry; [`PaymentIntent::lapsed`]).
    pub cancellation_reason: Option<String>,
    /// An authorization's deadline: its charge's `payment_method_details.card.capture_before`,
    /// present when the answer expanded `latest_charge`.
    pub capture_before: Option<crate::time::Timestamp>,
}

impl PaymentIntent {
    /// Stripe let its authorization lapse: canceled at its expiry, in either version's word
    /// ([`crate::stripe_version::is_lapse`]).
    pub fn lapsed(&self) -> bool {
        self.status == PaymentIntentStatus::Canceled
            && crate::stripe_version::is_lapse(self.cancellation_reason.as_deref())
    }

    /// An intent known by id and status only (the other facts absent).
    pub fn new(id: PaymentIntentId, status: PaymentIntentStatus) -> Self {
        Self {
            id,
            status,
            replayed: false,
            amount: None,
            currency: None,
            operation_id: None,
            order_id: None,
            livemode: None,
            amount_received: None,
            cancellation_reason: None,
            capture_before: None,
        }
    }
}

/// Why a request certainly did nothing and may simply be retried later with the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryCause {
    /// 429: rate limiters run before Stripe's idempotency layer; nothing was executed or saved.
    RateLimited,
    /// 409 `idempotency_key_in_use`: another request with our key is in flight right now.
    KeyInUse,
    /// 401/403: our key or its permissions are wrong. An operator must fix configuration; the
    /// operation itself must never be marked failed for it.
    Configuration,
}

impl RetryCause {
    pub fn as_str(&self) -> &'static str {
        match self {
            RetryCause::RateLimited => "rate_limited",
            RetryCause::KeyInUse => "idempotency_key_in_use",
            RetryCause::Configuration => "configuration",
        }
    }
}

/// Every way a gateway call can fail, already sorted by what it means.
///
/// The messages carry Stripe's error codes and messages, never the API key or card details.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    /// Stripe processed the request and the card was declined (402 `card_error`). Settled: failed.
    #[error("declined: {code}")]
    Declined {
        code: String,
        payment_intent_id: Option<PaymentIntentId>,
    },
    /// Nothing happened at Stripe; try again later with the same key.
    #[error("retry later ({}): {detail}", cause.as_str())]
    RetryLater { cause: RetryCause, detail: String },
    /// We cannot tell whether Stripe executed the request: timeout, reset, 5xx, unreadable body.
    #[error("outcome unknown: {detail}")]
    Ambiguous { detail: String },
    /// 400 `idempotency_error`: our key was used with different parameters. A bug in how keys are
    /// built; it is never retried with another key and the operation goes to review.
    #[error("idempotency key misuse: {detail}")]
    KeyMisuse { detail: String },
    /// 400 `payment_intent_unexpected_state`: the PaymentIntent is not in a state the request
    /// allows, e.g. a cancel of an intent that succeeded or was canceled meanwhile. Nothing was
    /// done; what Stripe holds must be read back.
    #[error("unexpected payment intent state: {detail}")]
    UnexpectedState { detail: String },
    /// 400 `charge_disputed`: Stripe refuses to refund a charge its customer's bank disputed
    /// (a chargeback, not an inquiry). Definitive: nothing was refunded and nothing will be
    /// under this key while the dispute stands; the merchant answers the dispute instead. Its
    /// text is a rejection's, as before it had a kind of its own (the code is in `detail`), so
    /// what logs and traces say of it did not change.
    #[error("request rejected: {detail}")]
    ChargeDisputed { detail: String },
    /// Any other 4xx: Stripe refused the request as invalid (unknown customer, detached payment
    /// method, unknown PaymentIntent id, ...). Definitive, but about our data, not the customer's
    /// card, so a person looks at it (see the executor).
    #[error("request rejected: {detail}")]
    Rejected {
        detail: String,
        param: Option<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_succeeded_is_success() {
        let cases = [
            ("succeeded", OperationStatus::Succeeded),
            ("canceled", OperationStatus::Failed),
            ("requires_payment_method", OperationStatus::Failed),
            ("processing", OperationStatus::Unknown),
            ("requires_action", OperationStatus::Unknown),
            ("requires_capture", OperationStatus::Unknown),
            ("requires_confirmation", OperationStatus::Unknown),
            ("something_new", OperationStatus::Unknown),
        ];
        for (raw, want) in cases {
            let status = PaymentIntentStatus::parse(raw);
            assert_eq!(status.as_str(), raw);
            assert_eq!(outcome_for(&status), want, "{raw}");
        }
    }
}
