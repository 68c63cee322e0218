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
//! canceled, lapsed).

pub mod plan;

use crate::charge::state::Taker;
use crate::domain::{
    CancelParams, CancelRequest, CaptureParams, CaptureRequest, Fingerprint, OperationKind,
};
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
            TakeRequest::Capture(_) => OperationKind::Capture,
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
    if charge.kind != OperationKind::Charge {
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
            let payment_intent = charge
                .external_id
                .clone()
                .ok_or(TakeRefusal::NoPaymentIntent)?;
            Ok(Params::Capture(CaptureParams {
                amount_to_capture: asked,
                currency,
                payment_intent,
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::{Amount, CancelRequest, CaptureRequest, OperationId};
    use crate::operation::{Lease, LeaseToken};
    use crate::store_rules::{apply, Guard};
    use crate::testing::{order, T0};

    fn manual(status: OperationStatus) -> Operation {
        let mut op = order("ord-take")
            .manual()
            .amount(1000)
            .status(status)
            .build();
        if status != OperationStatus::Pending {
            op.external_id = Some(crate::domain::PaymentIntentId::parse("pi_t").unwrap());
            op.first_attempted_at = Some(T0);
            op.attempts = 1;
        }
        op
    }

    fn capture(amount: Option<i64>) -> TakeRequest {
        TakeRequest::Capture(CaptureRequest {
            amount: amount.map(|a| Amount::new(a).unwrap()),
        })
    }

    fn cancel() -> TakeRequest {
        TakeRequest::Cancel(CancelRequest::default())
    }

    fn taker(request: &TakeRequest) -> Taker {
        Taker {
            capture: request.kind() == OperationKind::Capture,
            operation_id: OperationId::new_random(),
        }
    }

    /// One line of the door's rule: (the charge as read, the request) → where it takes the
    /// charge from, or the refusal.
    struct Row {
        says: &'static str,
        charge: Operation,
        request: TakeRequest,
        then: Result<TakeFrom, TakeRefusal>,
    }

    #[test]
    fn door_table() {
        use OperationStatus::*;
        let mut taken = manual(Authorized);
        taken.params.charge_state_mut().unwrap().taken_by = Some(Taker {
            capture: true,
            operation_id: OperationId::new_random(),
        });
        let automatic = order("ord-take").status(Succeeded).build();
        let leased = Operation {
            lease: Some(Lease {
                token: LeaseToken::new_random(),
                expires_at: T0.plus(Duration::from_secs(60)),
            }),
            ..manual(Pending)
        };
        let rows = [
            Row {
                says: "capture of an authorization",
                charge: manual(Authorized),
                request: capture(Some(600)),
                then: Ok(TakeFrom::Authorized),
            },
            Row {
                says: "capture of all of it",
                charge: manual(Authorized),
                request: capture(None),
                then: Ok(TakeFrom::Authorized),
            },
            Row {
                says: "capture over the authorization",
                charge: manual(Authorized),
                request: capture(Some(1001)),
                then: Err(TakeRefusal::OverAuthorized {
                    asked: 1001,
                    authorized: 1000,
                }),
            },
            Row {
                says: "capture of an automatic charge",
                charge: automatic.clone(),
                request: capture(None),
                then: Err(TakeRefusal::AutomaticCapture),
            },
            Row {
                says: "capture before it is authorized",
                charge: manual(Unknown),
                request: capture(None),
                then: Err(TakeRefusal::NotAuthorizedYet(Unknown)),
            },
            Row {
                says: "capture of a canceled one",
                charge: manual(Failed),
                request: capture(None),
                then: Err(TakeRefusal::Ended(Failed)),
            },
            Row {
                says: "capture once a cancel took it",
                charge: taken.clone(),
                request: capture(None),
                then: Err(TakeRefusal::TakenBy("capture")),
            },
            Row {
                says: "cancel of an authorization",
                charge: manual(Authorized),
                request: cancel(),
                then: Ok(TakeFrom::Authorized),
            },
            Row {
                says: "cancel once a capture took it",
                charge: taken,
                request: cancel(),
                then: Err(TakeRefusal::TakenBy("capture")),
            },
            Row {
                says: "cancel of a charge never sent: stopped at the door",
                charge: manual(Pending),
                request: cancel(),
                then: Ok(TakeFrom::NeverSent),
            },
            Row {
                says: "cancel of an automatic charge never sent: stopped too",
                charge: order("ord-take").build(),
                request: cancel(),
                then: Ok(TakeFrom::NeverSent),
            },
            Row {
                says: "cancel while a claim holds it for its first call",
                charge: leased,
                request: cancel(),
                then: Err(TakeRefusal::InFlight(Pending)),
            },
            Row {
                says: "cancel of a charge at Stripe, not yet authorized",
                charge: manual(Unknown),
                request: cancel(),
                then: Err(TakeRefusal::InFlight(Unknown)),
            },
            Row {
                says: "cancel of a captured charge: refund it",
                charge: automatic,
                request: cancel(),
                then: Err(TakeRefusal::Captured),
            },
        ];
        for row in rows {
            let got = take(&row.charge, &row.request, taker(&row.request), T0);
            assert_eq!(got.map(|t| t.take.from), row.then, "{}", row.says);
        }
    }

    /// The store holds the door's rule atomically: once a capture took the charge, the cancel
    /// decided on the charge as read before is refused by the write (`NotTaken`); the same
    /// cancel over the charge as it was is accepted.
    #[test]
    fn a_capture_and_a_cancel_decided_at_once_never_both_take() {
        let charge = manual(OperationStatus::Authorized);
        let by_capture = take(&charge, &capture(None), taker(&capture(None)), T0).unwrap();
        let by_cancel = take(&charge, &cancel(), taker(&cancel()), T0).unwrap();
        let after_capture = apply(&charge, &by_capture.take).unwrap();
        assert_eq!(apply(&after_capture, &by_cancel.take), Err(Guard::NotTaken));
        assert!(apply(&charge, &by_cancel.take).is_ok());
    }

    /// A cancel of a charge never sent settles the charge in its own write; a claim made first
    /// (the charge attempted) refuses it.
    #[test]
    fn a_cancel_before_the_charge_is_sent_stops_it_or_is_refused() {
        let charge = manual(OperationStatus::Pending);
        let t = take(&charge, &cancel(), taker(&cancel()), T0).unwrap();
        assert!(t.settled_at_the_door);
        let stopped = apply(&charge, &t.take).unwrap();
        assert_eq!(stopped.status, OperationStatus::Failed);
        assert_eq!(stopped.next_due_at, None);
        let claimed = Operation {
            first_attempted_at: Some(T0),
            attempts: 1,
            ..charge
        };
        assert_eq!(apply(&claimed, &t.take), Err(Guard::NeverAttempted));
    }
}
