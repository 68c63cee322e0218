//! The Refund model (docs.stripe.com/api/refunds): create-parameter validation, the paths a
//! refund takes (chosen by the refunded PaymentIntent's test payment method, as Stripe's own
//! refund test cards do), lazy transitions on the simulated clock, and the JSON representation.
//!
//! What a refund does to the money: `pending`, `requires_action` and `succeeded` refunds hold
//! part of the charge (a new refund may take only what is left); `pending` and `succeeded` ones
//! are the charge's `amount_refunded`; `failed` and `canceled` ones give it back.

use serde::Serialize;

use crate::pi::Metadata;
use crate::wire::ApiError;

/// Stripe's `reason` values a refund may give.
pub const REFUND_REASONS: [&str; 3] = ["duplicate", "fraudulent", "requested_by_customer"];

/// Why a late-failing refund failed: Stripe's `failure_reason` for a card closed since.
pub const LATE_FAILURE_REASON: &str = "expired_or_canceled_card";

/// Validated parameters of `POST /v1/refunds`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RefundParams {
    pub payment_intent: String,
    /// `None`: everything not yet refunded.
    pub amount: Option<i64>,
    pub reason: Option<&'static str>,
    pub metadata: Metadata,
}

/// Params Stripe accepts on a refund that change nothing the simulator models.
const IGNORED: [&str; 4] = [
    "expand",
    "instructions_email",
    "refund_application_fee",
    "reverse_transfer",
];

impl RefundParams {
    /// Validates the decoded form. Errors are `400`s not saved under an idempotency key.
    pub(crate) fn parse(form: &[(String, String)]) -> Result<Self, ApiError> {
        let mut p = RefundParams {
            payment_intent: String::new(),
            amount: None,
            reason: None,
            metadata: Metadata::default(),
        };
        for (k, v) in form {
            match k.as_str() {
                "payment_intent" => p.payment_intent = v.clone(),
                "amount" => p.amount = Some(parse_amount(v)?),
                "reason" => p.reason = Some(parse_reason(v)?),
                "charge" => {
                    return Err(ApiError::invalid(
                        "parameter_invalid_string",
                        k,
                        "stripe-sim refunds by payment_intent only.",
                    ))
                }
                _ if crate::pi::metadata_param(&mut p.metadata, k, v)? => {}
                _ if IGNORED
                    .iter()
                    .any(|ig| k == ig || k.starts_with(&format!("{ig}["))) => {}
                _ => {
                    return Err(ApiError::invalid(
                        "parameter_unknown",
                        k,
                        format!("Received unknown parameter: {k}"),
                    ))
                }
            }
        }
        if p.payment_intent.is_empty() {
            return Err(ApiError::invalid(
                "parameter_missing",
                "payment_intent",
                "One of the following params should be provided for this request: payment_intent or charge.",
            ));
        }
        Ok(p)
    }
}

fn parse_amount(v: &str) -> Result<i64, ApiError> {
    let amount = v.parse::<i64>().map_err(|_| {
        ApiError::invalid(
            "parameter_invalid_integer",
            "amount",
            format!("Invalid integer: {v}"),
        )
    })?;
    if amount < 1 {
        return Err(ApiError::invalid(
            "amount_too_small",
            "amount",
            "Amount must be at least 1 (in the currency's smallest unit).",
        ));
    }
    Ok(amount)
}

fn parse_reason(v: &str) -> Result<&'static str, ApiError> {
    REFUND_REASONS
        .iter()
        .copied()
        .find(|r| *r == v)
        .ok_or_else(|| {
            ApiError::invalid(
                "parameter_invalid_string",
                "reason",
                format!(
                    "Invalid reason: must be one of {}",
                    REFUND_REASONS.join(", ")
                ),
            )
        })
}

/// How refunds of a PaymentIntent go, by the test payment method it was paid with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RefundPath {
    /// `succeeded` at once (every card but the three below).
    Succeeds,
    /// Stripe's `pm_card_pendingRefund`: `pending` (`processing`), `succeeded` after the settle
    /// delay.
    PendingThenSucceeds,
    /// Stripe's `pm_card_refundFail`: `succeeded`, then `failed` (`expired_or_canceled_card`)
    /// after the settle delay, the money back on the charge.
    SucceedsThenFails,
    /// Simulator-only `pm_card_sim_refundRequiresAction`: `requires_action` until canceled.
    RequiresAction,
}

/// The refund path of a PaymentIntent paid with `pm`.
pub(crate) fn refund_path(pm: Option<&str>) -> RefundPath {
    match pm {
        Some("pm_card_pendingRefund") => RefundPath::PendingThenSucceeds,
        Some("pm_card_refundFail") => RefundPath::SucceedsThenFails,
        Some("pm_card_sim_refundRequiresAction") => RefundPath::RequiresAction,
        _ => RefundPath::Succeeds,
    }
}

/// A refund's due change of status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Transition {
    pub at_ms: i64,
    /// `succeeded` (from `pending`) or `failed` (from `succeeded`).
    pub to: &'static str,
    /// A failure's balance transaction (the money given back), chosen when the refund is made,
    /// so its event queued then and a later retrieve name the same one.
    pub failure_balance_transaction: Option<String>,
}

/// One stored refund.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Refund {
    pub id: String,
    pub amount: i64,
    pub currency: String,
    pub payment_intent: String,
    pub charge: String,
    pub balance_transaction: String,
    /// Set when it fails: the balance transaction giving the money back.
    pub failure_balance_transaction: Option<String>,
    pub reason: Option<&'static str>,
    pub metadata: Metadata,
    pub created_ms: i64,
    /// `pending`, `requires_action`, `succeeded`, `failed` or `canceled`.
    pub status: &'static str,
    pub transition: Option<Transition>,
}

impl Refund {
    /// Whether it holds part of the charge: a new refund may take only the rest. An
    /// authorization's released part ([`Refund::released`]) holds none of what was taken.
    pub(crate) fn holds(&self) -> bool {
        !self.released() && matches!(self.status, "pending" | "requires_action" | "succeeded")
    }

    /// Whether it counts in the charge's `amount_refunded` (a released part is counted there
    /// once, from the intent).
    pub(crate) fn refunded(&self) -> bool {
        !self.released() && matches!(self.status, "pending" | "succeeded")
    }

    /// Stripe's own record of an authorization's released part (before basil).
    pub(crate) fn released(&self) -> bool {
        self.reason == Some(crate::version::RELEASED_REASON)
    }

    /// Applies a due transition.
    pub(crate) fn settle(&mut self, now_ms: i64) {
        if self.transition.as_ref().is_some_and(|t| now_ms >= t.at_ms) {
            if let Some(t) = self.transition.take() {
                self.status = t.to;
                self.failure_balance_transaction = t.failure_balance_transaction;
            }
        }
    }

    /// It as it will be after its transition, and when (the state its scheduled events carry).
    pub(crate) fn settled_copy(&self) -> Option<(Refund, i64)> {
        let at_ms = self.transition.as_ref()?.at_ms;
        let mut later = self.clone();
        later.settle(at_ms);
        Some((later, at_ms))
    }

    /// Stripe's JSON representation as text.
    pub(crate) fn json_string(&self) -> String {
        serde_json::to_string(&self.view()).unwrap_or_default()
    }

    fn view(&self) -> RefundJson<'_> {
        let created = self.created_ms.div_euclid(1000);
        RefundJson {
            amount: self.amount,
            balance_transaction: &self.balance_transaction,
            charge: &self.charge,
            created,
            currency: &self.currency,
            failure_balance_transaction: self.failure_balance_transaction.as_deref(),
            failure_reason: (self.status == "failed").then_some(LATE_FAILURE_REASON),
            id: &self.id,
            metadata: &self.metadata,
            next_action: (self.status == "requires_action").then_some(NextAction {
                display_details: DisplayDetails {
                    // Stripe asks the customer by email for details and waits about a month.
                    expires_at: created + 30 * 24 * 3600,
                },
                kind: "display_details",
            }),
            object: "refund",
            payment_intent: &self.payment_intent,
            pending_reason: (self.status == "pending").then_some("processing"),
            reason: self.reason,
            receipt_number: None,
            source_transfer_reversal: None,
            status: self.status,
            transfer_reversal: None,
        }
    }
}

/// A refund's JSON, fields in key order. The keys Stripe's OpenAPI spec gives no `nullable`
/// (`failure_balance_transaction`, `failure_reason`, `next_action`, `pending_reason`) are absent
/// when they have no value, as at Stripe, never `null`.
#[derive(Serialize)]
struct RefundJson<'a> {
    amount: i64,
    balance_transaction: &'a str,
    charge: &'a str,
    created: i64,
    currency: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure_balance_transaction: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure_reason: Option<&'static str>,
    id: &'a str,
    metadata: &'a Metadata,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_action: Option<NextAction>,
    object: &'static str,
    payment_intent: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pending_reason: Option<&'static str>,
    reason: Option<&'static str>,
    receipt_number: Option<()>,
    source_transfer_reversal: Option<()>,
    status: &'static str,
    transfer_reversal: Option<()>,
}

#[derive(Serialize)]
struct NextAction {
    display_details: DisplayDetails,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct DisplayDetails {
    expires_at: i64,
}

/// A charge as refunds see it (the simulator keeps no charge objects beside its PaymentIntents:
/// this is written from the PaymentIntent and its refunds).
#[derive(Serialize)]
pub(crate) struct ChargeJson<'a> {
    pub amount: i64,
    pub amount_captured: i64,
    pub amount_refunded: i64,
    pub captured: bool,
    pub created: i64,
    pub currency: &'a str,
    pub id: &'a str,
    pub object: &'static str,
    pub paid: bool,
    pub payment_intent: &'a str,
    pub payment_method_details: PaymentMethodDetails,
    pub refunded: bool,
    pub status: &'static str,
}

/// The charge's `payment_method_details` (a card, the only kind the simulator pays with).
#[derive(Serialize)]
pub(crate) struct PaymentMethodDetails {
    pub card: CardDetails,
    #[serde(rename = "type")]
    pub kind: &'static str,
}

/// `payment_method_details.card`: its brand, and for an authorization awaiting capture the card
/// network's deadline (`capture_before`, unix seconds), absent otherwise (Stripe's spec gives it
/// no `nullable`: the key is left out, never `null`).
#[derive(Serialize)]
pub(crate) struct CardDetails {
    pub brand: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture_before: Option<i64>,
}

/// Stripe's `amount_too_large` for a refund of more than is left.
pub(crate) fn amount_too_large(asked: i64, left: i64, currency: &str) -> ApiError {
    ApiError::invalid(
        "amount_too_large",
        "amount",
        format!(
            "Refund amount ({asked} {currency}) is greater than unrefunded amount on charge ({left} {currency})"
        ),
    )
}

/// Stripe's `charge_already_refunded`.
pub(crate) fn already_refunded(charge: &str) -> ApiError {
    ApiError::new(
        400,
        "invalid_request_error",
        format!("Charge {charge} has already been refunded."),
    )
    .code("charge_already_refunded")
}

/// A refund of a PaymentIntent that has no successful charge (not `succeeded`: uncaptured,
/// canceled, processing, declined).
pub(crate) fn nothing_to_refund(pi: &str, status: &str) -> ApiError {
    ApiError::new(
        400,
        "invalid_request_error",
        format!(
            "This PaymentIntent ({pi}) does not have a successful charge to refund (its status is {status})."
        ),
    )
    .code("payment_intent_unexpected_state")
    .param("payment_intent")
}

/// `404 resource_missing` for a refund id.
pub(crate) fn no_such_refund(id: &str, param: &str) -> ApiError {
    ApiError::new(
        404,
        "invalid_request_error",
        format!("No such refund: '{id}'"),
    )
    .code("resource_missing")
    .param(param)
}

/// A cancel of a refund that is not `requires_action`.
pub(crate) fn not_cancelable(id: &str, status: &str) -> ApiError {
    ApiError::new(
        400,
        "invalid_request_error",
        format!(
            "You cannot cancel refund {id} because it has a status of {status}. Only a refund with a status of requires_action may be canceled."
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn validation_errors_name_the_param() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("amount", "5")], "payment_intent"),
            (&[("payment_intent", "pi_1"), ("amount", "0")], "amount"),
            (&[("payment_intent", "pi_1"), ("amount", "-3")], "amount"),
            (&[("payment_intent", "pi_1"), ("amount", "x")], "amount"),
            (&[("payment_intent", "pi_1"), ("reason", "bored")], "reason"),
            (&[("payment_intent", "pi_1"), ("bogus", "1")], "bogus"),
        ];
        for (f, param) in cases {
            let e = RefundParams::parse(&form(f)).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some(*param)), "{f:?}");
        }
        let ok = RefundParams::parse(&form(&[
            ("payment_intent", "pi_1"),
            ("amount", "5"),
            ("reason", "duplicate"),
            ("metadata[order_id]", "o-1"),
        ]))
        .unwrap();
        assert_eq!((ok.amount, ok.reason), (Some(5), Some("duplicate")));
    }
}
