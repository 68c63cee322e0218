//! What a dispute's record holds: what never changes of it ([`DisputeParams`], Stripe's facts at
//! its creation) and what Stripe moves ([`DisputeState`]). The record's
//! [`crate::operation::Params::Dispute`] carries both, so no other kind can hold any of it.

use serde::{Serialize, Serializer};

use super::{DisputeStatus, StripeDispute};
use crate::domain::{
    Amount, Currency, DisputeId, Fingerprint, OperationKind, PaymentIntentId, StripeChargeId,
    ValidationError,
};
use crate::time::Timestamp;

/// What never changes of a dispute: who it is, what it takes back, why, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DisputeParams {
    pub dispute_id: DisputeId,
    /// The PaymentIntent it was found under (its order's charge's `external_id`).
    pub payment_intent: PaymentIntentId,
    /// The charge the bank takes the money back from.
    pub charge: StripeChargeId,
    /// The disputed amount, in minor units.
    pub amount: Amount,
    pub currency: Currency,
    /// The bank's reason as Stripe states it (`fraudulent`, `product_not_received`, ...).
    pub reason: String,
    /// Stripe's `created`.
    pub created: Timestamp,
    /// The attempt of the order's charge this acts on (its `charge#<n>` record; 1 is the
    /// head, `charge`): set from the attempt whose intent it was found under, so the writes that give
    /// back to the charge later find the same record. Absent on the item and in `--json` when
    /// 1, as on every record written before attempts.
    #[serde(
        default = "OperationKind::first_attempt",
        skip_serializing_if = "OperationKind::is_first_attempt"
    )]
    pub charge_attempt: u32,
}

impl DisputeParams {
    /// What never changes of `dispute`, found under `payment_intent`; refused when Stripe's
    /// amount or currency is none the engine can hold (a zero amount, an unknown currency).
    pub fn of(
        dispute: &StripeDispute,
        payment_intent: PaymentIntentId,
    ) -> Result<Self, ValidationError> {
        Ok(Self {
            dispute_id: dispute.id.clone(),
            payment_intent,
            charge: dispute.charge.clone(),
            amount: Amount::new(dispute.amount)?,
            currency: Currency::parse(&dispute.currency)?,
            reason: dispute.reason.clone(),
            created: dispute.created,
            charge_attempt: OperationKind::first_attempt(),
        })
    }

    /// The record's fingerprint: the dispute's id, so the one record per dispute is also the
    /// one fingerprint per dispute (nobody asks for a dispute; there is no request to compare).
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&format!("v1\ndispute\n{}", self.dispute_id))
    }
}

/// What Stripe moves of a dispute, as last read there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DisputeState {
    /// Stripe's `status`, verbatim.
    #[serde(serialize_with = "status_str")]
    pub status: DisputeStatus,
    /// `evidence_details.due_by`; `None` once nothing more can be submitted.
    pub due_by: Option<Timestamp>,
    /// `evidence_details.has_evidence`.
    pub has_evidence: bool,
    /// Stripe says the charge can still be refunded (an inquiry).
    pub is_charge_refundable: bool,
    /// The dispute's amount is counted in its order's charge's `refund_reserved` (funds were
    /// withdrawn and it fitted). False for an inquiry, for a dispute won (given back), and for
    /// one that did not fit (recorded without it, in review).
    pub reserved: bool,
}

impl DisputeState {
    /// What Stripe holds of `dispute` now, with the reservation as `reserved` says.
    pub fn of(dispute: &StripeDispute, reserved: bool) -> Self {
        Self {
            status: dispute.status.clone(),
            due_by: dispute.due_by,
            has_evidence: dispute.has_evidence,
            is_charge_refundable: dispute.is_charge_refundable,
            reserved,
        }
    }
}

fn status_str<S: Serializer>(status: &DisputeStatus, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(status.as_str())
}
