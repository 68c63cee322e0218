//! The specification of a refund's door ([`charge_core::refund::reserve`]): the order's charge
//! as read, the amount asked (`None`: all that is left) → the amount reserved, or why the refund
//! is refused. The store's write checks the reservation again atomically, so an order's refunds
//! never exceed what was charged.

mod spec;

use charge_core::domain::{
    Amount, ChargeParams, Currency, DisputeId, OperationId, OperationKind, OrderId, Principal,
    RefundId,
};
use charge_core::operation::{Operation, OperationKey, OperationStatus};
use charge_core::refund::{
    refund_outcome_for,
    request::{RefundReason, RefundRequest},
    reserve, RefundRefusal, RefundStatus,
};
use charge_core::store;
use charge_core::store_rules::{self, apply, Guard};
use charge_core::testing::{order, T0};
use spec::Row;

/// (the charge as read, the amount asked) → the amount reserved, or the refusal.
type ReserveRow = Row<Operation, Option<i64>, (), Result<i64, RefundRefusal>, ()>;

fn variant(then: &Result<i64, RefundRefusal>) -> &'static str {
    match then {
        Ok(_) => "Ok",
        Err(RefundRefusal::NoCharge) => "NoCharge",
        Err(RefundRefusal::NotSucceeded(_)) => "NotSucceeded",
        Err(RefundRefusal::NoPaymentIntent) => "NoPaymentIntent",
        Err(RefundRefusal::Disputed { .. }) => "Disputed",
        Err(RefundRefusal::NothingLeft) => "NothingLeft",
        Err(RefundRefusal::OverWhatIsLeft { .. }) => "OverWhatIsLeft",
        Err(RefundRefusal::Indivisible(_)) => "Indivisible",
    }
}

const OUTCOMES: &[&str] = &[
    "Ok",
    "NoCharge",
    "NotSucceeded",
    "NoPaymentIntent",
    "Disputed",
    "NothingLeft",
    "OverWhatIsLeft",
    "Indivisible",
];

/// The twin of the coverage check: a table without a refusal over what is left is caught.
#[test]
fn a_table_missing_an_outcome_is_caught() {
    let outcomes = [
        Ok(1),
        Err(RefundRefusal::NoCharge),
        Err(RefundRefusal::NotSucceeded(OperationStatus::Failed)),
        Err(RefundRefusal::NoPaymentIntent),
        Err(RefundRefusal::Disputed {
            order_id: OrderId::parse("ord-r").unwrap(),
            dispute: DisputeId::parse("dp_1").unwrap(),
        }),
        Err(RefundRefusal::NothingLeft),
    ];
    assert_eq!(
        spec::uncovered(outcomes, OUTCOMES, variant),
        ["Indivisible", "OverWhatIsLeft"]
    );
}

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

#[test]
fn reserve_table() {
    let unsettled = |status| Operation {
        status,
        ..charge(0)
    };
    let mut kwd = order("ord-r")
        .currency("kwd")
        .amount(1000)
        .status(OperationStatus::Succeeded)
        .external_id("pi_r")
        .build();
    kwd.next_due_at = None;
    let disputed = |refundable: bool| {
        let mut op = charge(0);
        let state = op.params.charge_state_mut().unwrap();
        state.disputed_by = Some(DisputeId::parse("dp_1").unwrap());
        state.dispute_refundable = refundable;
        op
    };
    let rows: [ReserveRow; 14] = [
        Row {
            says: "an open dispute Stripe says leaves the charge unrefundable: refused, naming \
                   it (Stripe would refuse, and a lost dispute beside a refund pays twice)",
            found: disputed(false),
            input: Some(400),
            now: (),
            next: (),
            then: Err(RefundRefusal::Disputed {
                order_id: OrderId::parse("ord-r").unwrap(),
                dispute: DisputeId::parse("dp_1").unwrap(),
            }),
        },
        Row {
            says: "its twin, an inquiry (Stripe says still refundable): the refund goes through",
            found: disputed(true),
            input: Some(400),
            now: (),
            next: (),
            then: Ok(400),
        },
        Row {
            says: "a partial refund of a succeeded charge reserves what it asks",
            found: charge(0),
            input: Some(400),
            now: (),
            next: (),
            then: Ok(400),
        },
        Row {
            says: "no amount: all that is left, the charge less what its refunds reserved",
            found: charge(300),
            input: None,
            now: (),
            next: (),
            then: Ok(700),
        },
        Row {
            says: "exactly what is left is accepted",
            found: charge(300),
            input: Some(700),
            now: (),
            next: (),
            then: Ok(700),
        },
        Row {
            says: "a refund of 0.400 of a kwd charge: Stripe refunds three-decimal currencies in tens",
            found: kwd.clone(),
            input: Some(400),
            now: (),
            next: (),
            then: Ok(400),
        },
        Row {
            says: "a refund of 0.405 of a kwd charge: refused, naming the rule (Stripe would refuse it)",
            found: kwd,
            input: Some(405),
            now: (),
            next: (),
            then: Err(RefundRefusal::Indivisible(
                ChargeParams::check_divisible(
                    Amount::new(405).unwrap(),
                    &Currency::parse("kwd").unwrap(),
                )
                .unwrap_err(),
            )),
        },
        Row {
            says: "one unit over what is left is refused, with both figures",
            found: charge(300),
            input: Some(701),
            now: (),
            next: (),
            then: Err(RefundRefusal::OverWhatIsLeft {
                asked: 701,
                left: 700,
            }),
        },
        Row {
            says: "a charge refunded in full has nothing left, asked for an amount or not",
            found: charge(1000),
            input: Some(1),
            now: (),
            next: (),
            then: Err(RefundRefusal::NothingLeft),
        },
        Row {
            says: "nothing left, all of it asked: refused, not a refund of 0",
            found: charge(1000),
            input: None,
            now: (),
            next: (),
            then: Err(RefundRefusal::NothingLeft),
        },
        Row {
            says: "a charge still unknown may have taken nothing: refused",
            found: unsettled(OperationStatus::Unknown),
            input: None,
            now: (),
            next: (),
            then: Err(RefundRefusal::NotSucceeded(OperationStatus::Unknown)),
        },
        Row {
            says: "a failed charge took nothing: refused",
            found: unsettled(OperationStatus::Failed),
            input: Some(1),
            now: (),
            next: (),
            then: Err(RefundRefusal::NotSucceeded(OperationStatus::Failed)),
        },
        Row {
            says: "a succeeded charge without its intent cannot be named to Stripe: refused",
            found: Operation {
                external_id: None,
                ..charge(0)
            },
            input: Some(1),
            now: (),
            next: (),
            then: Err(RefundRefusal::NoPaymentIntent),
        },
        Row {
            says: "a refund is never refunded: only a charge is",
            found: Operation {
                kind: OperationKind::Refund(RefundId::parse("r-1").unwrap()),
                ..charge(0)
            },
            input: Some(1),
            now: (),
            next: (),
            then: Err(RefundRefusal::NoCharge),
        },
    ];
    spec::holds(&rows, |charge, asked, ()| {
        let got = reserve(charge, &ask(*asked), T0).map(|(params, reservation)| {
            assert_eq!(
                reservation.amount, params.amount,
                "reserves what it refunds"
            );
            assert_eq!(params.payment_intent, "pi_r", "of the charge's intent");
            assert_eq!(
                &params.currency,
                charge.params.currency(),
                "in the charge's currency"
            );
            params.amount.minor_units()
        });
        ((), got)
    });
    spec::covers(
        "the refund door's rule",
        rows.map(|row| row.then),
        OUTCOMES,
        variant,
    );
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
    let release = |amount| store::ReleaseRefund {
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
        Principal::jwt("support").unwrap(),
        T0,
        std::time::Duration::from_secs(300),
    );
    let (created, after) = store_rules::create_beside(None, Some(&read), &refund, &reserve_it);
    assert_eq!(created, store_rules::CreatedBeside::New(refund.clone()));
    let after = after.expect("the charge as written");
    assert_eq!(after.refund_reserved(), 700);
    // The same request again: the refund there is the answer, whatever the charge says now.
    assert_eq!(
        store_rules::create_beside(Some(&refund), Some(&after), &refund, &reserve_it),
        (store_rules::CreatedBeside::Existing(refund.clone()), None)
    );
    // Another refund id for 700 more: the charge refuses it.
    assert!(matches!(
        store_rules::create_beside(None, Some(&after), &refund, &reserve_it),
        (
            store_rules::CreatedBeside::ChargeRefused(Some((_, Guard::ReservedAtMost(300)))),
            None
        )
    ));
    assert_eq!(
        store_rules::create_beside(None, None, &refund, &reserve_it),
        (store_rules::CreatedBeside::ChargeRefused(None), None)
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
    let later = |op: &Operation| store::RefundFailedLater {
        key: op.key(),
        operation_id: op.operation_id,
        failure_reason: "expired_or_canceled_card".into(),
        release: store::ReleaseRefund {
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
        Principal::jwt("support").unwrap(),
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
        OperationKind::FIRST_CHARGE
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
