//! The Dispute model: what Stripe's test cards dispute and how, a dispute's JSON, its answer
//! (`POST /v1/disputes/{id}`: evidence and `submit`; `/close`: accepted) and Stripe's refusals.
//! `engine::disputes` keeps them beside their PaymentIntents and moves them on the clock.
//!
//! Stripe's test mode, as its testing docs ("Disputes") describe it:
//! - `pm_card_createDispute` (4000 0000 0000 0259): the charge succeeds, then is disputed as
//!   `fraudulent`; `pm_card_createDisputeProductNotReceived` (…2685): as `product_not_received`;
//!   `pm_card_createDisputeInquiry` (…1976): an inquiry (`warning_needs_response`, reason
//!   `fraudulent`, no funds withdrawn).
//! - Evidence with `uncategorized_text` `winning_evidence` wins the dispute, `losing_evidence`
//!   loses it; any other evidence leaves it under review (the bank of test mode never decides).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::pi::Metadata;
use crate::wire::ApiError;

/// The reasons Stripe gives a dispute (`reason`), as the admin route accepts them.
pub const DISPUTE_REASONS: [&str; 14] = [
    "bank_cannot_process",
    "check_returned",
    "credit_not_processed",
    "customer_initiated",
    "debit_not_authorized",
    "duplicate",
    "fraudulent",
    "general",
    "incorrect_account_details",
    "insufficient_funds",
    "product_not_received",
    "product_unacceptable",
    "subscription_canceled",
    "unrecognized",
];

/// The evidence text Stripe's test mode wins a dispute with.
pub const WINNING_EVIDENCE: &str = "winning_evidence";
/// The evidence text Stripe's test mode loses a dispute with.
pub const LOSING_EVIDENCE: &str = "losing_evidence";

/// What a test card's dispute is: its reason, and whether it is an inquiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DisputeCard {
    pub reason: &'static str,
    pub inquiry: bool,
}

/// The dispute a test payment method's charge gets after it succeeds, if any.
pub(crate) fn dispute_card(pm: Option<&str>) -> Option<DisputeCard> {
    let (reason, inquiry) = match pm? {
        "pm_card_createDispute" => ("fraudulent", false),
        "pm_card_createDisputeProductNotReceived" => ("product_not_received", false),
        "pm_card_createDisputeInquiry" => ("fraudulent", true),
        _ => return None,
    };
    Some(DisputeCard { reason, inquiry })
}

/// The test payment methods whose charges are disputed.
pub const DISPUTE_CARDS: [&str; 3] = [
    "pm_card_createDispute",
    "pm_card_createDisputeProductNotReceived",
    "pm_card_createDisputeInquiry",
];

/// One balance transaction of a dispute: the withdrawal (negative) or the reinstatement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct BalanceTransaction {
    pub amount: i64,
    pub currency: String,
    pub id: String,
    pub object: &'static str,
    pub reporting_category: &'static str,
    #[serde(rename = "type")]
    pub kind: &'static str,
}

/// One stored dispute.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Dispute {
    pub id: String,
    pub charge: String,
    pub payment_intent: String,
    pub amount: i64,
    pub currency: String,
    pub reason: String,
    /// One of Stripe's seven statuses.
    pub status: &'static str,
    pub created_ms: i64,
    /// `evidence_details.due_by`, unix ms.
    pub due_by_ms: i64,
    pub evidence: BTreeMap<String, String>,
    pub submission_count: u32,
    pub balance_transactions: Vec<BalanceTransaction>,
    pub metadata: Metadata,
    /// The outcome its submitted evidence leads to after the review (`None`: none decided).
    pub decided: Option<Decision>,
}

/// What the review of submitted evidence ends in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    Won,
    Lost,
}

impl Dispute {
    /// An inquiry: the bank asks before it takes anything.
    pub(crate) fn inquiry(&self) -> bool {
        self.status.starts_with("warning_")
    }

    /// Waiting for the merchant's evidence.
    pub(crate) fn needs_response(&self) -> bool {
        matches!(self.status, "needs_response" | "warning_needs_response")
    }

    /// Stripe's `is_charge_refundable`: an inquiry leaves the charge refundable, a chargeback
    /// does not until it is won.
    pub(crate) fn charge_refundable(&self) -> bool {
        self.inquiry() || self.status == "won"
    }

    /// Whether it blocks a refund of its charge (`charge_disputed`).
    pub(crate) fn blocks_refunds(&self) -> bool {
        !self.charge_refundable()
    }

    /// Stripe's JSON representation as text, `past_due` as of `now_ms`.
    pub(crate) fn json_string(&self, now_ms: i64) -> String {
        serde_json::to_string(&self.view(now_ms)).unwrap_or_default()
    }

    fn view(&self, now_ms: i64) -> DisputeJson<'_> {
        let has_evidence = !self.evidence.is_empty();
        DisputeJson {
            amount: self.amount,
            balance_transactions: &self.balance_transactions,
            charge: &self.charge,
            created: self.created_ms.div_euclid(1000),
            currency: &self.currency,
            evidence: EVIDENCE_FIELDS
                .iter()
                .map(|f| (*f, self.evidence.get(*f).map(String::as_str)))
                .collect(),
            evidence_details: EvidenceDetails {
                due_by: self.due_by_ms.div_euclid(1000),
                has_evidence,
                past_due: self.needs_response() && now_ms >= self.due_by_ms,
                submission_count: self.submission_count,
            },
            id: &self.id,
            is_charge_refundable: self.charge_refundable(),
            livemode: false,
            metadata: &self.metadata,
            object: "dispute",
            payment_intent: &self.payment_intent,
            reason: &self.reason,
            status: self.status,
        }
    }
}

/// A dispute's JSON, fields in key order.
#[derive(Serialize)]
struct DisputeJson<'a> {
    amount: i64,
    balance_transactions: &'a [BalanceTransaction],
    charge: &'a str,
    created: i64,
    currency: &'a str,
    /// Every evidence field Stripe has, `null` until given.
    evidence: BTreeMap<&'static str, Option<&'a str>>,
    evidence_details: EvidenceDetails,
    id: &'a str,
    is_charge_refundable: bool,
    livemode: bool,
    metadata: &'a Metadata,
    object: &'static str,
    payment_intent: &'a str,
    reason: &'a str,
    status: &'static str,
}

#[derive(Serialize)]
struct EvidenceDetails {
    due_by: i64,
    has_evidence: bool,
    past_due: bool,
    submission_count: u32,
}

/// The validated form of `POST /v1/disputes/{id}`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct DisputeUpdate {
    pub evidence: BTreeMap<String, String>,
    pub metadata: Vec<(String, String)>,
    /// Stripe submits at once unless told `submit=false` (the evidence is then staged).
    pub submit: bool,
}

/// The evidence fields Stripe's dispute update takes (its API reference's `evidence` hash).
const EVIDENCE_FIELDS: [&str; 27] = [
    "access_activity_log",
    "billing_address",
    "cancellation_policy",
    "cancellation_policy_disclosure",
    "cancellation_rebuttal",
    "customer_communication",
    "customer_email_address",
    "customer_name",
    "customer_purchase_ip",
    "customer_signature",
    "duplicate_charge_documentation",
    "duplicate_charge_explanation",
    "duplicate_charge_id",
    "product_description",
    "receipt",
    "refund_policy",
    "refund_policy_disclosure",
    "refund_refusal_explanation",
    "service_date",
    "service_documentation",
    "shipping_address",
    "shipping_carrier",
    "shipping_date",
    "shipping_documentation",
    "shipping_tracking_number",
    "uncategorized_file",
    "uncategorized_text",
];

impl DisputeUpdate {
    /// Validates the decoded form; an unknown parameter or evidence field is a `400`.
    pub(crate) fn parse(form: &[(String, String)]) -> Result<Self, ApiError> {
        let mut u = DisputeUpdate {
            submit: true,
            ..Default::default()
        };
        let mut metadata = Metadata::default();
        for (k, v) in form {
            if let Some(field) = k
                .strip_prefix("evidence[")
                .and_then(|f| f.strip_suffix(']'))
            {
                if !EVIDENCE_FIELDS.contains(&field) {
                    return Err(ApiError::invalid(
                        "parameter_unknown",
                        k,
                        format!("Received unknown parameter: {k}"),
                    ));
                }
                u.evidence.insert(field.to_owned(), v.clone());
                continue;
            }
            match k.as_str() {
                "submit" => {
                    u.submit = match v.as_str() {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(ApiError::invalid(
                                "parameter_invalid_boolean",
                                k,
                                format!("Invalid boolean: {v}"),
                            ))
                        }
                    }
                }
                _ if crate::pi::metadata_param(&mut metadata, k, v)? => {
                    u.metadata.push((k.clone(), v.clone()));
                }
                _ if k.starts_with("expand") => {}
                _ => {
                    return Err(ApiError::invalid(
                        "parameter_unknown",
                        k,
                        format!("Received unknown parameter: {k}"),
                    ))
                }
            }
        }
        Ok(u)
    }
}

/// Stripe's refusal of a refund of a charge under a chargeback (error code `charge_disputed`:
/// "the charge you're attempting to refund has been charged back").
pub(crate) fn charge_disputed(charge: &str) -> ApiError {
    ApiError::new(
        400,
        "invalid_request_error",
        format!("Charge {charge} has been charged back; cannot issue a refund."),
    )
    .code("charge_disputed")
}

/// `404 resource_missing` for a dispute id.
pub(crate) fn no_such_dispute(id: &str, param: &str) -> ApiError {
    ApiError::new(
        404,
        "invalid_request_error",
        format!("No such dispute: '{id}'"),
    )
    .code("resource_missing")
    .param(param)
}

/// An answer to a dispute that no longer takes one (submitted, or closed).
pub(crate) fn not_answerable(id: &str, status: &str) -> ApiError {
    ApiError::new(
        400,
        "invalid_request_error",
        format!(
            "This dispute ({id}) has a status of {status}: evidence can be submitted, and a dispute closed, only while it needs a response."
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
    fn an_update_submits_unless_told_not_to_and_refuses_what_it_does_not_know() {
        let u = DisputeUpdate::parse(&form(&[("evidence[uncategorized_text]", "x")])).unwrap();
        assert!(u.submit);
        assert_eq!(u.evidence.get("uncategorized_text").unwrap(), "x");
        let staged = DisputeUpdate::parse(&form(&[("submit", "false")])).unwrap();
        assert!(!staged.submit);
        for bad in [
            &[("evidence[bribe]", "x")][..],
            &[("submit", "maybe")][..],
            &[("amount", "5")][..],
        ] {
            let e = DisputeUpdate::parse(&form(bad)).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some(bad[0].0)));
        }
    }

    #[test]
    fn the_test_cards_dispute_as_documented() {
        for pm in DISPUTE_CARDS {
            assert!(dispute_card(Some(pm)).is_some(), "{pm}");
        }
        assert!(
            dispute_card(Some("pm_card_createDisputeInquiry"))
                .unwrap()
                .inquiry
        );
        assert_eq!(
            dispute_card(Some("pm_card_createDisputeProductNotReceived"))
                .unwrap()
                .reason,
            "product_not_received"
        );
        assert_eq!(dispute_card(Some("pm_card_visa")), None);
        assert_eq!(dispute_card(None), None);
    }
}
