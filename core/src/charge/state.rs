//! What only a charge's record holds beside its params: its refunds' reservations and its
//! authorization (the deadline Stripe states, what a capture took, who took it), and the open
//! dispute on it, if any. The record's
//! [`crate::operation::Params::Charge`] carries it, so no other kind can hold any of it.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::domain::{Amount, DisputeId, OperationId, OperationKind, ValidationError};
use crate::time::Timestamp;

/// A charge's state: the fields its later writes change, beside its params that never change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChargeState {
    /// The charge's refunds, in minor units: the sum of the amounts its refund operations
    /// reserved and did not give back (those not `failed`). Never more than what was taken; 0 for
    /// records written before refunds existed. The one field a settled charge's writes may still
    /// change: settled is final for its outcome, not for its refunds.
    pub refund_reserved: i64,
    /// An authorized charge's deadline as Stripe states it (the charge's
    /// `payment_method_details.card.capture_before`): uncaptured by then, Stripe cancels it. Read
    /// from Stripe, never computed from the creation time (card networks' windows differ).
    pub capture_before: Option<Timestamp>,
    /// What a capture took of an authorized charge, in minor units (at most what was
    /// authorized; the rest of the hold was released). `None` for an automatic charge, whose
    /// amount is what was taken.
    pub amount_captured: Option<Amount>,
    /// The capture or cancel that took this charge's authorization (or stopped it before it
    /// was sent). Set once, by the write that created that operation; never cleared but by its
    /// own outcome giving the authorization back.
    pub taken_by: Option<Taker>,
    /// The open dispute on the charge, if any: set by the write that records the dispute open,
    /// cleared by the write that settles it (both in the same transaction as the dispute's
    /// record). Absent on records written before disputes: none known.
    pub disputed_by: Option<DisputeId>,
    /// Stripe says the disputed charge can still be refunded (an inquiry,
    /// `is_charge_refundable`). Meaningful only with [`Self::disputed_by`]; false without it.
    pub dispute_refundable: bool,
    /// On the order's first attempt (its head, sort key `charge`): the number of its latest
    /// charge attempt, once the order was asked again after a decline. Set by the write that
    /// creates that attempt, in the same transaction, guarded on the number it read, so two
    /// retries at once make one attempt. Absent: this is the order's only attempt (every record
    /// written before attempts reads so). Never set on a later attempt's record.
    pub latest_attempt: Option<u32>,
}

impl ChargeState {
    /// The open dispute that stops a refund at the door: one Stripe says leaves the charge
    /// unrefundable (funds withdrawn). An inquiry lets a refund through.
    pub fn refund_blocked_by(&self) -> Option<&DisputeId> {
        self.disputed_by
            .as_ref()
            .filter(|_| !self.dispute_refundable)
    }
}

/// The capture or cancel operation that took a charge's authorization: the charge record names
/// it (`taken_by`), so a second one is refused by the store's condition, never by timing.
/// Stored as `capture:<operation_id>` or `cancel:<operation_id>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Taker {
    /// [`OperationKind::Capture`] or [`OperationKind::Cancel`]: true for a capture.
    pub capture: bool,
    pub operation_id: OperationId,
}

impl Taker {
    pub fn kind(&self) -> OperationKind {
        if self.capture {
            OperationKind::FIRST_CAPTURE
        } else {
            OperationKind::Cancel
        }
    }

    /// The taker a capture's or cancel's operation is (`kind`, `operation_id`); `None` for
    /// another kind.
    pub fn of(kind: &OperationKind, operation_id: OperationId) -> Option<Self> {
        kind.takes_authorization().then_some(Self {
            capture: kind.is_capture(),
            operation_id,
        })
    }

    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        let bad = || ValidationError::new("taken_by", "must be capture:<uuid> or cancel:<uuid>");
        let (kind, id) = raw.split_once(':').ok_or_else(bad)?;
        let capture = match kind {
            "capture" => true,
            "cancel" => false,
            _ => return Err(bad()),
        };
        let operation_id = OperationId::parse(id).map_err(|_| bad())?;
        Ok(Self {
            capture,
            operation_id,
        })
    }
}

impl fmt::Display for Taker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind().as_str(), self.operation_id)
    }
}

impl Serialize for Taker {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Taker {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}
