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
//! - [`state`]: what only a refund's record holds (its Stripe id).

pub mod event_plan;
pub mod plan;
pub mod state;

use std::fmt;

use crate::domain::OperationKind;
use crate::domain::{Amount, StripeRefundId};
pub use crate::domain::{RefundParams, RefundReason, RefundRequest};
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
    #[error("the order's charge is refunded in full: nothing is left to refund")]
    NothingLeft,
    #[error("amount {asked} is over what is left to refund, {left} (minor units)")]
    OverWhatIsLeft { asked: i64, left: i64 },
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
    if charge.kind != OperationKind::Charge {
        return Err(RefundRefusal::NoCharge);
    }
    if charge.status != OperationStatus::Succeeded {
        return Err(RefundRefusal::NotSucceeded(charge.status));
    }
    let payment_intent = charge
        .external_id
        .clone()
        .ok_or(RefundRefusal::NoPaymentIntent)?;
    let left = refundable(charge);
    if left <= 0 {
        return Err(RefundRefusal::NothingLeft);
    }
    let asked = request.amount.map_or(left, |a| a.minor_units());
    if asked > left {
        return Err(RefundRefusal::OverWhatIsLeft { asked, left });
    }
    let amount = Amount::new(asked).map_err(|_| RefundRefusal::NothingLeft)?;
    let params = RefundParams {
        amount,
        currency: charge.params.currency().clone(),
        payment_intent,
        reason: request.reason,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{OperationId, RefundId};
    use crate::operation::OperationKey;
    use crate::store_rules::{apply, Guard};
    use crate::testing::{order, T0};

    /// A succeeded charge of 1000 usd with its intent, `reserved` already taken by refunds.
    fn charge(reserved: i64) -> Operation {
        let mut op = order("ord-r")
            .amount(1000)
            .status(OperationStatus::Succeeded)
            .external_id("pi_r")
            .build();
        op.next_due_at = None;
        op.params.charge_state_mut().unwrap().refund_reserved = reserved;
        op
    }

    fn ask(amount: Option<i64>) -> RefundRequest {
        RefundRequest {
            amount: amount.map(|a| Amount::new(a).unwrap()),
            reason: None,
        }
    }

    /// One line of the door's rule: (the charge as read, the request) → the amount reserved, or
    /// the refusal.
    struct Row {
        says: &'static str,
        charge: Operation,
        asked: Option<i64>,
        then: Result<i64, RefundRefusal>,
    }

    #[test]
    fn reserve_table() {
        let unsettled = |status| Operation {
            status,
            ..charge(0)
        };
        let rows = [
            Row {
                says: "a partial refund of a succeeded charge reserves what it asks",
                charge: charge(0),
                asked: Some(400),
                then: Ok(400),
            },
            Row {
                says: "no amount: all that is left, the charge less what its refunds reserved",
                charge: charge(300),
                asked: None,
                then: Ok(700),
            },
            Row {
                says: "exactly what is left is accepted",
                charge: charge(300),
                asked: Some(700),
                then: Ok(700),
            },
            Row {
                says: "one unit over what is left is refused, with both figures",
                charge: charge(300),
                asked: Some(701),
                then: Err(RefundRefusal::OverWhatIsLeft {
                    asked: 701,
                    left: 700,
                }),
            },
            Row {
                says: "a charge refunded in full has nothing left, asked for an amount or not",
                charge: charge(1000),
                asked: Some(1),
                then: Err(RefundRefusal::NothingLeft),
            },
            Row {
                says: "nothing left, all of it asked: refused, not a refund of 0",
                charge: charge(1000),
                asked: None,
                then: Err(RefundRefusal::NothingLeft),
            },
            Row {
                says: "a charge still unknown may have taken nothing: refused",
                charge: unsettled(OperationStatus::Unknown),
                asked: None,
                then: Err(RefundRefusal::NotSucceeded(OperationStatus::Unknown)),
            },
            Row {
                says: "a failed charge took nothing: refused",
                charge: unsettled(OperationStatus::Failed),
                asked: Some(1),
                then: Err(RefundRefusal::NotSucceeded(OperationStatus::Failed)),
            },
            Row {
                says: "a succeeded charge without its intent cannot be named to Stripe: refused",
                charge: Operation {
                    external_id: None,
                    ..charge(0)
                },
                asked: Some(1),
                then: Err(RefundRefusal::NoPaymentIntent),
            },
            Row {
                says: "a refund is never refunded: only a charge is",
                charge: Operation {
                    kind: OperationKind::Refund(RefundId::parse("r-1").unwrap()),
                    ..charge(0)
                },
                asked: Some(1),
                then: Err(RefundRefusal::NoCharge),
            },
        ];
        for row in rows {
            let got = reserve(&row.charge, &ask(row.asked), T0);
            match (&got, &row.then) {
                (Ok((params, reservation)), Ok(amount)) => {
                    assert_eq!(params.amount.minor_units(), *amount, "{}", row.says);
                    assert_eq!(reservation.amount, params.amount, "{}", row.says);
                    assert_eq!(params.payment_intent, "pi_r", "{}", row.says);
                    assert_eq!(params.currency.as_str(), "usd", "{}", row.says);
                }
                (Err(e), Err(want)) => assert_eq!(e, want, "{}", row.says),
                _ => panic!("{}: got {got:?}, want {:?}", row.says, row.then),
            }
        }
    }

    /// Two refunds decided from the same read: the store's guard lets the second in only if both
    /// fit, whatever order they are written in.
    #[test]
    fn two_reservations_from_one_read_never_exceed_the_charge() {
        let read = charge(0);
        let (_, first) = reserve(&read, &ask(Some(600)), T0).unwrap();
        let (_, too_much) = reserve(&read, &ask(Some(600)), T0).unwrap();
        let (_, fits) = reserve(&read, &ask(Some(400)), T0).unwrap();
        let after_first = apply(&read, &first).unwrap();
        assert_eq!(after_first.refund_reserved(), 600);
        assert_eq!(
            apply(&after_first, &too_much).unwrap_err(),
            Guard::ReservedAtMost(400),
            "600 + 600 > 1000"
        );
        let both = apply(&after_first, &fits).unwrap();
        assert_eq!(both.refund_reserved(), 1000, "600 + 400 = 1000 fits");
        assert_eq!(
            both.status,
            OperationStatus::Succeeded,
            "the outcome is untouched"
        );
        assert_eq!(
            both.next_due_at, None,
            "a settled charge stays out of the index"
        );
    }

    #[test]
    fn a_reservation_is_refused_by_a_charge_replaced_or_no_longer_succeeded() {
        let read = charge(0);
        let (_, r) = reserve(&read, &ask(Some(100)), T0).unwrap();
        let replaced = Operation {
            operation_id: OperationId::new_random(),
            ..read.clone()
        };
        assert!(matches!(apply(&replaced, &r), Err(Guard::IsOperation(_))));
        let reverted = Operation {
            status: OperationStatus::Unknown,
            ..read.clone()
        };
        assert_eq!(
            apply(&reverted, &r).unwrap_err(),
            Guard::StatusIs(OperationStatus::Succeeded)
        );
        assert!(apply(&read, &r).is_ok(), "the charge as read accepts it");
    }

    #[test]
    fn a_released_reservation_gives_room_back_and_only_what_is_there() {
        let release = |amount| crate::store::ReleaseRefund {
            charge: OperationKey::charge(charge(0).order_id),
            amount: Amount::new(amount).unwrap(),
            now: T0,
        };
        assert_eq!(
            apply(&charge(900), &release(600))
                .unwrap()
                .refund_reserved(),
            300
        );
        assert_eq!(
            apply(&charge(600), &release(600))
                .unwrap()
                .refund_reserved(),
            0
        );
        assert_eq!(
            apply(&charge(100), &release(600)).unwrap_err(),
            Guard::ReservedAtLeast(600),
            "a count below the amount does not add up: refused, not clamped"
        );
        let refund = Operation {
            kind: OperationKind::Refund(RefundId::parse("r-1").unwrap()),
            ..charge(600)
        };
        assert_eq!(apply(&refund, &release(1)).unwrap_err(), Guard::IsCharge);
    }

    #[test]
    fn a_refund_asked_again_is_the_one_there_and_reserves_nothing() {
        let read = charge(0);
        let request = ask(Some(700));
        let (params, reserve_it) = reserve(&read, &request, T0).unwrap();
        let refund = Operation::new_refund(
            read.order_id.clone(),
            RefundId::parse("r-1").unwrap(),
            &request,
            params,
            crate::domain::Principal::jwt("support").unwrap(),
            T0,
            std::time::Duration::from_secs(300),
        );
        let (created, after) =
            crate::store_rules::create_beside(None, Some(&read), &refund, &reserve_it);
        assert_eq!(
            created,
            crate::store_rules::CreatedBeside::New(refund.clone())
        );
        let after = after.expect("the charge as written");
        assert_eq!(after.refund_reserved(), 700);
        // The same request again: the refund there is the answer, whatever the charge says now.
        assert_eq!(
            crate::store_rules::create_beside(Some(&refund), Some(&after), &refund, &reserve_it),
            (
                crate::store_rules::CreatedBeside::Existing(refund.clone()),
                None
            )
        );
        // Another refund id for 700 more: the charge refuses it.
        assert!(matches!(
            crate::store_rules::create_beside(None, Some(&after), &refund, &reserve_it),
            (
                crate::store_rules::CreatedBeside::ChargeRefused(Some((
                    _,
                    Guard::ReservedAtMost(300)
                ))),
                None
            )
        ));
        assert_eq!(
            crate::store_rules::create_beside(None, None, &refund, &reserve_it),
            (crate::store_rules::CreatedBeside::ChargeRefused(None), None)
        );
    }

    #[test]
    fn only_a_succeeded_refund_fails_later_and_only_a_refund() {
        let refund = |status| Operation {
            kind: OperationKind::Refund(RefundId::parse("r-1").unwrap()),
            status,
            next_due_at: None,
            ..charge(0)
        };
        let later = |op: &Operation| crate::store::RefundFailedLater {
            key: op.key(),
            operation_id: op.operation_id,
            failure_reason: "expired_or_canceled_card".into(),
            release: crate::store::ReleaseRefund {
                charge: OperationKey::charge(op.order_id.clone()),
                amount: Amount::new(400).unwrap(),
                now: T0,
            },
            now: T0,
        };
        let succeeded = refund(OperationStatus::Succeeded);
        let failed = apply(&succeeded, &later(&succeeded)).unwrap();
        assert_eq!(failed.status, OperationStatus::Failed);
        assert_eq!(failed.next_due_at, None, "settled, out of the index");
        assert!(failed
            .last_error
            .unwrap()
            .contains("expired_or_canceled_card"));
        let already = refund(OperationStatus::Failed);
        assert_eq!(
            apply(&already, &later(&already)).unwrap_err(),
            Guard::StatusIs(OperationStatus::Succeeded)
        );
        let a_charge = charge(0);
        assert_eq!(
            apply(&a_charge, &later(&a_charge)).unwrap_err(),
            Guard::IsRefund
        );
    }

    #[test]
    fn the_request_is_fingerprinted_as_asked() {
        let all = ask(None);
        assert_eq!(all.fingerprint(), ask(None).fingerprint());
        assert_ne!(
            all.fingerprint(),
            ask(Some(1000)).fingerprint(),
            "all ≠ 1000"
        );
        assert_ne!(ask(Some(1)).fingerprint(), ask(Some(2)).fingerprint());
        let fraud = RefundRequest {
            reason: Some(RefundReason::Fraudulent),
            ..ask(Some(1))
        };
        assert_ne!(fraud.fingerprint(), ask(Some(1)).fingerprint());
    }

    #[test]
    fn a_refund_s_key_is_never_in_the_charge_s_namespace() {
        let read = charge(0);
        let request = ask(Some(100));
        let (params, _) = reserve(&read, &request, T0).unwrap();
        let mut refund = Operation::new_refund(
            read.order_id.clone(),
            RefundId::parse("r-1").unwrap(),
            &request,
            params,
            crate::domain::Principal::jwt("support").unwrap(),
            T0,
            std::time::Duration::from_secs(300),
        );
        refund.operation_id = read.operation_id;
        assert!(refund.idempotency_key().as_str().starts_with("refund-op:"));
        assert_ne!(refund.idempotency_key(), read.idempotency_key());
        assert_eq!(refund.key().kind.sort_key(), "refund#r-1");
        assert_eq!(OperationKind::parse("refund#r-1").unwrap(), refund.kind);
        assert_eq!(
            OperationKind::parse("charge").unwrap(),
            OperationKind::Charge
        );
        for bad in ["refund#", "refund#a b", "refund", "charge#x", "refunds#r"] {
            assert!(OperationKind::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn refund_statuses_mean_what_stripe_says() {
        use OperationStatus::*;
        for (raw, want) in [
            ("succeeded", Succeeded),
            ("failed", Failed),
            ("canceled", Failed),
            ("pending", Unknown),
            ("requires_action", Unknown),
            ("something_new", Unknown),
        ] {
            assert_eq!(refund_outcome_for(&RefundStatus::parse(raw)), want, "{raw}");
            assert_eq!(RefundStatus::parse(raw).as_str(), raw);
        }
    }
}
