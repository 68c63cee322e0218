//! The specification of the door's rule for a capture or a cancel ([`charge_core::take::take`]):
//! the order's charge as read, the request → where the capture or cancel takes the charge from,
//! or why it is refused. Only one of them ever takes an authorization; the store's write checks
//! it again atomically.

mod spec;

use std::time::Duration;

use charge_core::charge::state::Taker;
use charge_core::operation::{Lease, LeaseToken, Operation, OperationStatus};
use charge_core::store::TakeFrom;
use charge_core::store_rules::{apply, Guard};
use charge_core::take::{take, TakeRefusal, TakeRequest};
use charge_core::testing::{order, T0};
use charge_core::{
    domain::{
        Amount, ChargeParams, Currency, OperationId, OperationKind, PaymentIntentId, RefundId,
    },
    take::request::{CancelRequest, CaptureRequest},
};
use spec::Row;

/// (the charge as read, the capture or cancel asked) → where it takes the charge from, or the
/// refusal.
type DoorRow = Row<Operation, TakeRequest, (), Result<TakeFrom, TakeRefusal>, ()>;

fn variant(then: &Result<TakeFrom, TakeRefusal>) -> &'static str {
    match then {
        Ok(TakeFrom::Authorized) => "Ok(Authorized)",
        Ok(TakeFrom::NeverSent) => "Ok(NeverSent)",
        Err(refusal) => match refusal {
            TakeRefusal::NoCharge => "NoCharge",
            TakeRefusal::AutomaticCapture => "AutomaticCapture",
            TakeRefusal::NotAuthorizedYet(_) => "NotAuthorizedYet",
            TakeRefusal::InFlight(_) => "InFlight",
            TakeRefusal::Captured => "Captured",
            TakeRefusal::Ended(_) => "Ended",
            TakeRefusal::TakenBy(_) => "TakenBy",
            TakeRefusal::OverAuthorized { .. } => "OverAuthorized",
            TakeRefusal::NoPaymentIntent => "NoPaymentIntent",
            TakeRefusal::Indivisible(_) => "Indivisible",
        },
    }
}

const OUTCOMES: &[&str] = &[
    "Ok(Authorized)",
    "Ok(NeverSent)",
    "NoCharge",
    "AutomaticCapture",
    "NotAuthorizedYet",
    "InFlight",
    "Captured",
    "Ended",
    "TakenBy",
    "OverAuthorized",
    "NoPaymentIntent",
    "Indivisible",
];

/// The twin of the coverage check: a table without its in-flight refusals is caught, by name.
#[test]
fn a_table_missing_an_outcome_is_caught() {
    let outcomes = [Ok(TakeFrom::Authorized), Err(TakeRefusal::Captured)];
    let missing = spec::uncovered(outcomes, OUTCOMES, variant);
    assert!(missing.contains(&"InFlight".to_owned()), "{missing:?}");
    assert_eq!(missing.len(), OUTCOMES.len() - 2);
}

fn manual(status: OperationStatus) -> Operation {
    let mut op = order("ord-take")
        .manual()
        .amount(1000)
        .status(status)
        .build();
    if status != OperationStatus::Pending {
        op.external_id = Some(PaymentIntentId::parse("pi_t").unwrap());
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
        capture: request.kind().is_capture(),
        operation_id: OperationId::new_random(),
    }
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
    let mut kwd = order("ord-take")
        .manual()
        .currency("kwd")
        .amount(2000)
        .status(Authorized)
        .external_id("pi_t")
        .build();
    kwd.first_attempted_at = Some(T0);
    let leased = Operation {
        lease: Some(Lease {
            token: LeaseToken::new_random(),
            expires_at: T0.plus(Duration::from_secs(60)),
        }),
        ..manual(Pending)
    };
    let rows: [DoorRow; 18] = [
        Row {
            says: "a capture of a record that is not a charge",
            found: Operation {
                kind: OperationKind::Refund(RefundId::parse("rf_take").unwrap()),
                ..manual(Authorized)
            },
            input: capture(None),
            now: (),
            next: (),
            then: Err(TakeRefusal::NoCharge),
        },
        Row {
            says: "a capture of an authorization with no PaymentIntent recorded",
            found: Operation {
                external_id: None,
                ..manual(Authorized)
            },
            input: capture(None),
            now: (),
            next: (),
            then: Err(TakeRefusal::NoPaymentIntent),
        },
        Row {
            says: "capture of an authorization",
            found: manual(Authorized),
            input: capture(Some(600)),
            now: (),
            next: (),
            then: Ok(TakeFrom::Authorized),
        },
        Row {
            says: "capture of all of it",
            found: manual(Authorized),
            input: capture(None),
            now: (),
            next: (),
            then: Ok(TakeFrom::Authorized),
        },
        Row {
            says: "capture over the authorization",
            found: manual(Authorized),
            input: capture(Some(1001)),
            now: (),
            next: (),
            then: Err(TakeRefusal::OverAuthorized {
                asked: 1001,
                authorized: 1000,
            }),
        },
        Row {
            says: "capture of 1.000 of a kwd authorization: Stripe captures three-decimal currencies in tens",
            found: kwd.clone(),
            input: capture(Some(1000)),
            now: (),
            next: (),
            then: Ok(TakeFrom::Authorized),
        },
        Row {
            says: "capture of 1.005 of a kwd authorization: refused, naming the rule (Stripe would refuse it)",
            found: kwd,
            input: capture(Some(1005)),
            now: (),
            next: (),
            then: Err(TakeRefusal::Indivisible(
                ChargeParams::check_divisible(
                    Amount::new(1005).unwrap(),
                    &Currency::parse("kwd").unwrap(),
                )
                .unwrap_err(),
            )),
        },
        Row {
            says: "capture of an automatic charge",
            found: automatic.clone(),
            input: capture(None),
            now: (),
            next: (),
            then: Err(TakeRefusal::AutomaticCapture),
        },
        Row {
            says: "capture before it is authorized",
            found: manual(Unknown),
            input: capture(None),
            now: (),
            next: (),
            then: Err(TakeRefusal::NotAuthorizedYet(Unknown)),
        },
        Row {
            says: "capture of a canceled one",
            found: manual(Failed),
            input: capture(None),
            now: (),
            next: (),
            then: Err(TakeRefusal::Ended(Failed)),
        },
        Row {
            says: "capture once a cancel took it",
            found: taken.clone(),
            input: capture(None),
            now: (),
            next: (),
            then: Err(TakeRefusal::TakenBy("capture")),
        },
        Row {
            says: "cancel of an authorization",
            found: manual(Authorized),
            input: cancel(),
            now: (),
            next: (),
            then: Ok(TakeFrom::Authorized),
        },
        Row {
            says: "cancel once a capture took it",
            found: taken,
            input: cancel(),
            now: (),
            next: (),
            then: Err(TakeRefusal::TakenBy("capture")),
        },
        Row {
            says: "cancel of a charge never sent: stopped at the door",
            found: manual(Pending),
            input: cancel(),
            now: (),
            next: (),
            then: Ok(TakeFrom::NeverSent),
        },
        Row {
            says: "cancel of an automatic charge never sent: stopped too",
            found: order("ord-take").build(),
            input: cancel(),
            now: (),
            next: (),
            then: Ok(TakeFrom::NeverSent),
        },
        Row {
            says: "cancel while a claim holds it for its first call",
            found: leased,
            input: cancel(),
            now: (),
            next: (),
            then: Err(TakeRefusal::InFlight(Pending)),
        },
        Row {
            says: "cancel of a charge at Stripe, not yet authorized",
            found: manual(Unknown),
            input: cancel(),
            now: (),
            next: (),
            then: Err(TakeRefusal::InFlight(Unknown)),
        },
        Row {
            says: "cancel of a captured charge: refund it",
            found: automatic,
            input: cancel(),
            now: (),
            next: (),
            then: Err(TakeRefusal::Captured),
        },
    ];
    spec::holds(&rows, |charge, request, ()| {
        let got = take(charge, request, taker(request), T0);
        ((), got.map(|t| t.take.from))
    });
    spec::covers(
        "the door's rule",
        rows.map(|row| row.then),
        OUTCOMES,
        variant,
    );
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
