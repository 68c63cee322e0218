//! Captures and cancels at the door: what the merchant asks (`POST /orders/{id}/capture`,
//! `/cancel`), and the rule that decides, on the order's charge as read, whether it may be made.
//!
//! A capture or a cancel **takes** the order's charge: the write that creates it names it on the
//! charge record (`taken_by`, [`TakeAuthorization`]), guarded so that only one of them is ever
//! accepted, whatever arrives at once — the store decides, not timing. A cancel of a charge never
//! sent to Stripe stops it in that same write (the charge `failed`, the cancel `succeeded`), so
//! no Stripe call is ever made for it: a claim after the write finds the charge settled; a claim
//! before it made the charge attempted, and the write is refused.
//!
//! This module is the door's rule; beside it, [`plan`]: (capture or cancel record as claimed,
//! Stripe's answer, now) → the next record, and how the charge's authorization ends (captured,
//! canceled, lapsed); [`request`]: what the merchant asks of each, and what each attempt sends.

pub mod plan;
pub mod request;

use self::request::{CancelParams, CancelRequest, CaptureParams, CaptureRequest};
use crate::charge::state::Taker;
use crate::domain::{ChargeParams, Fingerprint, OperationKind, ValidationError};
use crate::operation::{Operation, OperationStatus, Params};
use crate::store::{TakeAuthorization, TakeFrom};
use crate::time::Timestamp;

/// What the merchant asked: a capture (of all, or part, of the authorization) or a cancel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeRequest {
    Capture(CaptureRequest),
    Cancel(CancelRequest),
}

impl TakeRequest {
    pub fn kind(&self) -> OperationKind {
        match self {
            TakeRequest::Capture(_) => OperationKind::FIRST_CAPTURE,
            TakeRequest::Cancel(_) => OperationKind::Cancel,
        }
    }

    /// The request as asked: the same request again is the same capture or cancel; another is a
    /// conflict.
    pub fn fingerprint(&self) -> Fingerprint {
        match self {
            TakeRequest::Capture(r) => r.fingerprint(),
            TakeRequest::Cancel(r) => r.fingerprint(),
        }
    }
}

/// Why a capture or a cancel is refused at the door. Nothing is written for any of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TakeRefusal {
    #[error("the order has no charge")]
    NoCharge,
    #[error("the order's charge was made with capture automatic: Stripe took the money at once; there is no authorization to capture")]
    AutomaticCapture,
    #[error("the order's charge is {0}, not authorized yet: capture it once it is (GET /orders/{{order_id}}/charge says when)")]
    NotAuthorizedYet(OperationStatus),
    #[error("the order's charge is being sent to Stripe ({0}): cancel it once it is authorized, or refund it once it succeeded")]
    InFlight(OperationStatus),
    #[error("the order's charge is captured: it cannot be canceled; refund it instead (POST /orders/{{order_id}}/refunds/{{refund_id}})")]
    Captured,
    #[error("the order's charge already ended ({0}): nothing is held to capture or cancel")]
    Ended(OperationStatus),
    #[error("a {0} of this order's authorization is already under way: a capture and a cancel never both take effect")]
    TakenBy(&'static str),
    #[error("amount {asked} is over what was authorized, {authorized} (minor units)")]
    OverAuthorized { asked: i64, authorized: i64 },
    /// The amount breaks a digit rule Stripe applies to captures in the charge's currency
    /// ([`ChargeParams::check_divisible`]): Stripe would refuse it.
    #[error("{0}")]
    Indivisible(ValidationError),
    #[error("the order's charge has no PaymentIntent recorded")]
    NoPaymentIntent,
}

/// What the door decided: the new operation's parameters, its claim on the charge, and whether
/// it is settled by that write alone (a cancel of a charge never sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taking {
    pub params: Params,
    pub take: TakeAuthorization,
    pub settled_at_the_door: bool,
}

/// What the door decides for `request` against the order's `charge` as read, for the new
/// operation `taker` (its kind and operation id). The store's write checks the charge's part
/// again atomically ([`crate::store_rules`]).
pub fn take(
    charge: &Operation,
    request: &TakeRequest,
    taker: Taker,
    now: Timestamp,
) -> Result<Taking, TakeRefusal> {
    if !charge.kind.is_charge() {
        return Err(TakeRefusal::NoCharge);
    }
    let never_sent = charge.status == OperationStatus::Pending
        && charge.first_attempted_at.is_none()
        && !charge.has_live_lease(now);
    let from = match (request, charge.status) {
        (TakeRequest::Cancel(_), OperationStatus::Pending) if never_sent => TakeFrom::NeverSent,
        (TakeRequest::Capture(_), _) if !charge.is_manual_capture() => {
            return Err(TakeRefusal::AutomaticCapture)
        }
        (_, OperationStatus::Authorized) => TakeFrom::Authorized,
        (TakeRequest::Capture(_), s @ (OperationStatus::Pending | OperationStatus::Unknown)) => {
            return Err(TakeRefusal::NotAuthorizedYet(s))
        }
        (TakeRequest::Cancel(_), s @ (OperationStatus::Pending | OperationStatus::Unknown)) => {
            return Err(TakeRefusal::InFlight(s))
        }
        (TakeRequest::Cancel(_), OperationStatus::Succeeded) => return Err(TakeRefusal::Captured),
        (_, s) => return Err(TakeRefusal::Ended(s)),
    };
    if let Some(by) = charge.taken_by() {
        return Err(TakeRefusal::TakenBy(by.kind().as_str()));
    }
    let take = TakeAuthorization {
        charge: charge.key(),
        charge_operation_id: charge.operation_id,
        taker,
        from,
        now,
    };
    let params = params_of(charge, request, from)?;
    Ok(Taking {
        params,
        take,
        settled_at_the_door: from == TakeFrom::NeverSent,
    })
}

/// The operation's parameters: a capture's amount (all that was authorized when none is asked,
/// never more) of the charge's intent; a cancel's release of what the charge held.
fn params_of(
    charge: &Operation,
    request: &TakeRequest,
    from: TakeFrom,
) -> Result<Params, TakeRefusal> {
    let authorized = charge.params.amount();
    let currency = charge.params.currency().clone();
    match request {
        TakeRequest::Capture(r) => {
            let asked = r.amount.unwrap_or(authorized);
            if asked.minor_units() > authorized.minor_units() {
                return Err(TakeRefusal::OverAuthorized {
                    asked: asked.minor_units(),
                    authorized: authorized.minor_units(),
                });
            }
            ChargeParams::check_divisible(asked, &currency).map_err(TakeRefusal::Indivisible)?;
            let payment_intent = charge
                .external_id
                .clone()
                .ok_or(TakeRefusal::NoPaymentIntent)?;
            Ok(Params::Capture(CaptureParams {
                amount_to_capture: asked,
                currency,
                payment_intent,
                charge_attempt: charge.kind.attempt_no().unwrap_or(1),
            }))
        }
        TakeRequest::Cancel(r) => {
            let payment_intent = match from {
                TakeFrom::NeverSent => None,
                TakeFrom::Authorized => Some(
                    charge
                        .external_id
                        .clone()
                        .ok_or(TakeRefusal::NoPaymentIntent)?,
                ),
            };
            Ok(Params::Cancel(CancelParams {
                amount_released: authorized,
                currency,
                payment_intent,
                cancellation_reason: r.reason,
                charge_attempt: charge.kind.attempt_no().unwrap_or(1),
            }))
        }
    }
}

/// The status a new capture or cancel is written with: `pending` (queued, the charge function
/// acts), or `succeeded` for a cancel that the door's write settles alone.
pub fn initial(mut op: Operation, taking: &Taking) -> Operation {
    if taking.settled_at_the_door {
        op.status = OperationStatus::Succeeded;
        op.next_due_at = None;
        op.settled_at = Some(op.updated_at);
    }
    op
}
