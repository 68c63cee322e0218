//! The specification of charge attempts: the door's rule ([`charge_core::attempt::decide`]: the
//! order's attempts as read, the request → the attempt that answers it, a new attempt, or why
//! not) and the store's write that starts one ([`charge_core::store_rules::start_attempt`]: the
//! three records as the write finds them → the head after, or what refused it). The door
//! decides on what it read; the write checks the latest attempt's part again, atomically.

mod spec;

use charge_core::attempt::{decide, AttemptLimit, AttemptRefusal, Door};
use charge_core::charge::state::Taker;
use charge_core::domain::{OperationId, OperationKind, PaymentIntentId, Principal};
use charge_core::operation::{Operation, OperationStatus};
use charge_core::store::NewAttempt;
use charge_core::store_rules::{start_attempt, AttemptRefusedBy, Guard};
use charge_core::testing::{order, T0};
use spec::Row;

/// What the door said, by attempt number: the latest answers (`Latest(n)`), or attempt `n`
/// starts (`Start(n)`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Said {
    Latest(u32),
    Start(u32),
}

/// (the order's attempts as read, (the request, the caller, the limit)) → what the door says.
type DoorRow =
    Row<Vec<Operation>, (Operation, Principal, u32), (), Result<Said, AttemptRefusal>, ()>;

fn variant(then: &Result<Said, AttemptRefusal>) -> &'static str {
    match then {
        Ok(Said::Latest(_)) => "Latest",
        Ok(Said::Start(_)) => "Start",
        Err(refusal) => match refusal {
            AttemptRefusal::OtherCaller => "OtherCaller",
            AttemptRefusal::Conflict => "Conflict",
            AttemptRefusal::InFlight { .. } => "InFlight",
            AttemptRefusal::Paid { .. } => "Paid",
            AttemptRefusal::Canceled => "Canceled",
            AttemptRefusal::TooMany { .. } => "TooMany",
        },
    }
}

const OUTCOMES: &[&str] = &[
    "Latest",
    "Start",
    "OtherCaller",
    "Conflict",
    "InFlight",
    "Paid",
    "Canceled",
    "TooMany",
];

/// The twin of the coverage check: a table without its paid refusal is caught, by name.
#[test]
fn a_table_missing_an_outcome_is_caught() {
    let outcomes = [Ok(Said::Start(2)), Err(AttemptRefusal::Canceled)];
    let missing = spec::uncovered(outcomes, OUTCOMES, variant);
    assert!(missing.contains(&"Paid".to_owned()), "{missing:?}");
    assert_eq!(missing.len(), OUTCOMES.len() - 2);
}

/// Attempt `n` of `ord-a` (1000 usd, `cus_1`) with `card`, in `status`; settled ones out of the
/// index, paid or declined ones with an intent.
fn attempt(n: u32, card: &str, status: OperationStatus) -> Operation {
    let mut op = order("ord-a")
        .amount(1000)
        .payment_method(card)
        .status(status)
        .build();
    op.kind = OperationKind::charge_attempt(n).unwrap();
    if status.is_settled() {
        op.next_due_at = None;
        op.external_id = Some(PaymentIntentId::parse(&format!("pi_{n}")).unwrap());
        op.first_attempted_at = Some(T0);
        op.attempts = 1;
    }
    op
}

/// The order's attempts: `cards` with their statuses, first to latest; the head names the latest.
fn attempts(of: &[(&str, OperationStatus)]) -> Vec<Operation> {
    let mut all: Vec<Operation> = of
        .iter()
        .enumerate()
        .map(|(i, (card, status))| attempt(i as u32 + 1, card, *status))
        .collect();
    let latest = all.len() as u32;
    if latest > 1 {
        all[0].params.charge_state_mut().unwrap().latest_attempt = Some(latest);
    }
    all
}

fn canceled(of: Vec<Operation>) -> Vec<Operation> {
    taken(of, false)
}

/// The latest attempt ended with a capture's name on it: a capture that found the authorization
/// lapsed at Stripe (the attempt `failed`, nothing taken, nobody canceled the order).
fn lapsed_under_a_capture(of: Vec<Operation>) -> Vec<Operation> {
    taken(of, true)
}

fn taken(mut of: Vec<Operation>, capture: bool) -> Vec<Operation> {
    let last = of.last_mut().unwrap();
    last.params.charge_state_mut().unwrap().taken_by = Some(Taker {
        capture,
        operation_id: OperationId::new_random(),
    });
    of
}

/// What the merchant asks: the order with `card`, by the order service.
fn asked(card: &str) -> Operation {
    order("ord-a").amount(1000).payment_method(card).build()
}

fn me() -> Principal {
    Principal::jwt("order-service").unwrap()
}

use OperationStatus::{Authorized, Failed, Pending, Succeeded, Unknown};

#[test]
fn door_table() {
    let rows: Vec<DoorRow> = vec![
        Row {
            says: "a declined order asked again with another card starts attempt 2",
            found: attempts(&[("pm_declined", Failed)]),
            input: (asked("pm_card_visa"), me(), 5),
            now: (),
            next: (),
            then: Ok(Said::Start(2)),
        },
        Row {
            says: "the same card again after a decline starts a new attempt (the customer may have topped up)",
            found: attempts(&[("pm_card_visa", Failed)]),
            input: (asked("pm_card_visa"), me(), 5),
            now: (),
            next: (),
            then: Ok(Said::Start(2)),
        },
        Row {
            says: "after two declines, a third card starts attempt 3",
            found: attempts(&[("pm_a", Failed), ("pm_b", Failed)]),
            input: (asked("pm_c"), me(), 5),
            now: (),
            next: (),
            then: Ok(Said::Start(3)),
        },
        Row {
            says: "the latest attempt's own request while it is in flight is that attempt (200, as today)",
            found: attempts(&[("pm_a", Failed), ("pm_b", Pending)]),
            input: (asked("pm_b"), me(), 5),
            now: (),
            next: (),
            then: Ok(Said::Latest(2)),
        },
        Row {
            says: "the latest attempt's own request once it paid is that attempt (200)",
            found: attempts(&[("pm_a", Failed), ("pm_b", Succeeded)]),
            input: (asked("pm_b"), me(), 5),
            now: (),
            next: (),
            then: Ok(Said::Latest(2)),
        },
        Row {
            says: "an order charged once, asked again as it was, is its charge (200, as before attempts)",
            found: attempts(&[("pm_a", Unknown)]),
            input: (asked("pm_a"), me(), 5),
            now: (),
            next: (),
            then: Ok(Said::Latest(1)),
        },
        Row {
            says: "the declined first request replayed after attempt 2 exists is answered with attempt 2, never a new one",
            found: attempts(&[("pm_a", Failed), ("pm_b", Pending)]),
            input: (asked("pm_a"), me(), 5),
            now: (),
            next: (),
            then: Ok(Said::Latest(2)),
        },
        Row {
            says: "a replay of an earlier declined request after the latest also failed is answered with the latest",
            found: attempts(&[("pm_a", Failed), ("pm_b", Failed)]),
            input: (asked("pm_a"), me(), 5),
            now: (),
            next: (),
            then: Ok(Said::Latest(2)),
        },
        Row {
            says: "a replay of an earlier declined request once the order is paid is answered with the paid attempt",
            found: attempts(&[("pm_a", Failed), ("pm_b", Succeeded)]),
            input: (asked("pm_a"), me(), 5),
            now: (),
            next: (),
            then: Ok(Said::Latest(2)),
        },
        Row {
            says: "another card once the order is paid is refused: refund it instead",
            found: attempts(&[("pm_a", Failed), ("pm_b", Succeeded)]),
            input: (asked("pm_c"), me(), 5),
            now: (),
            next: (),
            then: Err(AttemptRefusal::Paid {
                attempt: 2,
                payment_intent: Some(PaymentIntentId::parse("pi_2").unwrap()),
            }),
        },
        Row {
            says: "another card while the latest is pending is refused: one attempt in flight",
            found: attempts(&[("pm_a", Failed), ("pm_b", Pending)]),
            input: (asked("pm_c"), me(), 5),
            now: (),
            next: (),
            then: Err(AttemptRefusal::InFlight {
                attempt: 2,
                status: Pending,
            }),
        },
        Row {
            says: "another card while the first is unknown (Stripe not heard yet) is refused",
            found: attempts(&[("pm_a", Unknown)]),
            input: (asked("pm_b"), me(), 5),
            now: (),
            next: (),
            then: Err(AttemptRefusal::InFlight {
                attempt: 1,
                status: Unknown,
            }),
        },
        Row {
            says: "another card while the latest holds an authorization is refused",
            found: attempts(&[("pm_a", Authorized)]),
            input: (asked("pm_b"), me(), 5),
            now: (),
            next: (),
            then: Err(AttemptRefusal::InFlight {
                attempt: 1,
                status: Authorized,
            }),
        },
        Row {
            says: "an order whose charge a cancel ended stays canceled",
            found: canceled(attempts(&[("pm_a", Failed)])),
            input: (asked("pm_b"), me(), 5),
            now: (),
            next: (),
            then: Err(AttemptRefusal::Canceled),
        },
        Row {
            says: "an order whose capture found the authorization lapsed is charged again (nobody canceled it, nothing was taken)",
            found: lapsed_under_a_capture(attempts(&[("pm_a", Failed)])),
            input: (asked("pm_b"), me(), 5),
            now: (),
            next: (),
            then: Ok(Said::Start(2)),
        },
        Row {
            says: "an order at the deployment's limit of attempts is refused",
            found: attempts(&[("pm_a", Failed), ("pm_b", Failed)]),
            input: (asked("pm_c"), me(), 2),
            now: (),
            next: (),
            then: Err(AttemptRefusal::TooMany { limit: 2 }),
        },
        Row {
            says: "with a limit of one attempt, a declined order is not charged again",
            found: attempts(&[("pm_a", Failed)]),
            input: (asked("pm_b"), me(), 1),
            now: (),
            next: (),
            then: Err(AttemptRefusal::TooMany { limit: 1 }),
        },
        Row {
            says: "another amount is another order: a conflict, as before attempts",
            found: attempts(&[("pm_a", Failed)]),
            input: (
                order("ord-a").amount(999).payment_method("pm_b").build(),
                me(),
                5,
            ),
            now: (),
            next: (),
            then: Err(AttemptRefusal::Conflict),
        },
        Row {
            says: "another customer is a conflict",
            found: attempts(&[("pm_a", Failed)]),
            input: (
                order("ord-a")
                    .amount(1000)
                    .customer("cus_2")
                    .payment_method("pm_b")
                    .build(),
                me(),
                5,
            ),
            now: (),
            next: (),
            then: Err(AttemptRefusal::Conflict),
        },
        Row {
            says: "another capture method is a conflict",
            found: attempts(&[("pm_a", Failed)]),
            input: (
                order("ord-a").amount(1000).manual().payment_method("pm_b").build(),
                me(),
                5,
            ),
            now: (),
            next: (),
            then: Err(AttemptRefusal::Conflict),
        },
        Row {
            says: "another caller's declined order is refused as a conflict, saying nothing of it",
            found: attempts(&[("pm_a", Failed)]),
            input: (asked("pm_b"), Principal::jwt("someone-else").unwrap(), 5),
            now: (),
            next: (),
            then: Err(AttemptRefusal::OtherCaller),
        },
    ];
    spec::holds(&rows, |found, (request, caller, limit), _| {
        let limit = AttemptLimit::new(*limit).unwrap();
        let said = decide(found, request, caller, limit).map(|door| match door {
            Door::Latest(op) => {
                assert_eq!(Some(&op), found.last(), "the latest answers");
                Said::Latest(op.kind.attempt_no().unwrap())
            }
            Door::Start(new) => {
                let latest = found.last().unwrap();
                assert_eq!(new.after_operation_id, latest.operation_id);
                assert_eq!(new.op.fingerprint, request.fingerprint);
                assert_eq!(new.op.status, Pending);
                Said::Start(new.number())
            }
        });
        ((), said)
    });
    spec::covers(
        "the attempt door",
        rows.iter().map(|r| r.then.clone()),
        OUTCOMES,
        variant,
    );
}

/// The limit is the template's: 1 to 20, default 5.
#[test]
fn the_limit_is_one_to_twenty() {
    assert_eq!(AttemptLimit::default().get(), 5);
    assert!(AttemptLimit::new(1).is_ok() && AttemptLimit::new(20).is_ok());
    assert!(AttemptLimit::new(0).is_err() && AttemptLimit::new(21).is_err());
}

/// (the record at the new key, the head, attempt n) → the head after, or what refused it.
type WriteRow = Row<
    (Option<Operation>, Option<Operation>, Option<Operation>),
    NewAttempt,
    Option<Option<u32>>,
    Result<(), AttemptRefusedBy>,
    (),
>;

fn write_variant(then: &Result<(), AttemptRefusedBy>) -> &'static str {
    match then {
        Ok(()) => "written",
        Err(AttemptRefusedBy::Exists) => "exists",
        Err(AttemptRefusedBy::Head(None)) => "no head",
        Err(AttemptRefusedBy::Head(Some(_))) => "head refused",
        Err(AttemptRefusedBy::After(None)) => "no attempt n",
        Err(AttemptRefusedBy::After(Some(_))) => "attempt n refused",
    }
}

const WRITES: &[&str] = &[
    "written",
    "exists",
    "no head",
    "head refused",
    "no attempt n",
    "attempt n refused",
];

/// Attempt `n + 1` of what the door read: `found` the attempts.
fn next_of(found: &[Operation]) -> NewAttempt {
    let latest = found.last().unwrap();
    let mut op = asked("pm_next");
    op.kind = OperationKind::charge_attempt(latest.kind.attempt_no().unwrap() + 1).unwrap();
    NewAttempt {
        op,
        after_operation_id: latest.operation_id,
    }
}

#[test]
fn start_attempt_table() {
    let one = attempts(&[("pm_a", Failed)]);
    let two = attempts(&[("pm_a", Failed), ("pm_b", Failed)]);
    let two_live = attempts(&[("pm_a", Failed), ("pm_b", Pending)]);
    let mut one_paid = one.clone();
    one_paid[0].status = Succeeded;
    let one_canceled = canceled(one.clone());
    let one_lapsed = lapsed_under_a_capture(one.clone());
    let two_canceled = canceled(two.clone());
    let two_lapsed = lapsed_under_a_capture(two.clone());
    let mut one_replaced = one.clone();
    one_replaced[0].operation_id = OperationId::new_random();
    let after_two = attempts(&[("pm_a", Failed), ("pm_b", Failed), ("pm_c", Pending)]);
    let rows: Vec<WriteRow> = vec![
        Row {
            says: "after a failed first attempt: attempt 2 written, the head names it",
            found: (None, Some(one[0].clone()), None),
            input: next_of(&one),
            now: (),
            next: Some(Some(2)),
            then: Ok(()),
        },
        Row {
            says: "after a failed attempt 2: attempt 3 written, the head names it, attempt 2 only checked",
            found: (None, Some(two[0].clone()), Some(two[1].clone())),
            input: next_of(&two),
            now: (),
            next: Some(Some(3)),
            then: Ok(()),
        },
        Row {
            says: "a retry that lost the race finds the attempt written: nothing written",
            found: (Some(asked("pm_other")), Some(one[0].clone()), None),
            input: next_of(&one),
            now: (),
            next: None,
            then: Err(AttemptRefusedBy::Exists),
        },
        Row {
            says: "the head names another latest (a retry went first): refused",
            found: (None, Some(two_live[0].clone()), None),
            input: next_of(&one),
            now: (),
            next: None,
            then: Err(AttemptRefusedBy::Head(Some(Guard::LatestAttemptIs(1)))),
        },
        Row {
            says: "a first attempt that succeeded since it was read: refused",
            found: (None, Some(one_paid[0].clone()), None),
            input: next_of(&one),
            now: (),
            next: None,
            then: Err(AttemptRefusedBy::Head(Some(Guard::StatusIs(Failed)))),
        },
        Row {
            says: "a first attempt a cancel ended: refused (a canceled order stays canceled)",
            found: (None, Some(one_canceled[0].clone()), None),
            input: next_of(&one),
            now: (),
            next: None,
            then: Err(AttemptRefusedBy::Head(Some(Guard::NotCanceled))),
        },
        Row {
            says: "a first attempt a capture ended when it found the authorization lapsed: attempt 2 written",
            found: (None, Some(one_lapsed[0].clone()), None),
            input: next_of(&one_lapsed),
            now: (),
            next: Some(Some(2)),
            then: Ok(()),
        },
        Row {
            says: "an attempt 2 a cancel ended: refused by its check, nothing written",
            found: (None, Some(two_canceled[0].clone()), Some(two_canceled[1].clone())),
            input: next_of(&two_canceled),
            now: (),
            next: None,
            then: Err(AttemptRefusedBy::After(Some(Guard::NotCanceled))),
        },
        Row {
            says: "an attempt 2 a capture ended when it found the authorization lapsed: attempt 3 written",
            found: (None, Some(two_lapsed[0].clone()), Some(two_lapsed[1].clone())),
            input: next_of(&two_lapsed),
            now: (),
            next: Some(Some(3)),
            then: Ok(()),
        },
        Row {
            says: "a first attempt that is not the one read: refused",
            found: (None, Some(one_replaced[0].clone()), None),
            input: next_of(&one),
            now: (),
            next: None,
            then: Err(AttemptRefusedBy::Head(Some(Guard::IsOperation(
                one[0].operation_id,
            )))),
        },
        Row {
            says: "attempt 2 not failed (the door read it so in error): refused",
            found: (None, Some(two[0].clone()), {
                let mut live = two[1].clone();
                live.status = Pending;
                Some(live)
            }),
            input: next_of(&two),
            now: (),
            next: None,
            then: Err(AttemptRefusedBy::After(Some(Guard::StatusIs(Failed)))),
        },
        Row {
            says: "attempt 2 read failed, now another one at its key: refused",
            found: (None, Some(two[0].clone()), {
                let mut other = two[1].clone();
                other.operation_id = OperationId::new_random();
                Some(other)
            }),
            input: next_of(&two),
            now: (),
            next: None,
            then: Err(AttemptRefusedBy::After(Some(Guard::IsOperation(
                two[1].operation_id,
            )))),
        },
        Row {
            says: "the head names attempt 2 and attempt 2 is gone: refused",
            found: (None, Some(two[0].clone()), None),
            input: next_of(&two),
            now: (),
            next: None,
            then: Err(AttemptRefusedBy::After(None)),
        },
        Row {
            says: "no head: refused",
            found: (None, None, None),
            input: next_of(&after_two[..2]),
            now: (),
            next: None,
            then: Err(AttemptRefusedBy::Head(None)),
        },
    ];
    spec::holds(
        &rows,
        |(existing, head, after), req, _| match start_attempt(
            existing.as_ref(),
            head.as_ref(),
            after.as_ref(),
            req,
        ) {
            Ok(next) => {
                let head = head.as_ref().unwrap();
                let mut only_latest = next.clone();
                only_latest
                    .params
                    .charge_state_mut()
                    .unwrap()
                    .latest_attempt = head.params.charge_state().unwrap().latest_attempt;
                assert_eq!(&only_latest, head, "nothing else of the head moves");
                (
                    Some(next.params.charge_state().unwrap().latest_attempt),
                    Ok(()),
                )
            }
            Err(by) => (None, Err(by)),
        },
    );
    spec::covers(
        "the attempt write",
        rows.iter().map(|r| r.then),
        WRITES,
        write_variant,
    );
}

/// A paid second attempt stops a third twin: the same failed-latest shape at attempt 2, with
/// the latest paid, is refused by the door and by the write.
#[test]
fn a_paid_latest_refuses_at_the_door_and_at_the_write() {
    let failed = attempts(&[("pm_a", Failed), ("pm_b", Failed)]);
    let mut paid = failed.clone();
    paid[1].status = Succeeded;
    let limit = AttemptLimit::DEFAULT;
    assert!(matches!(
        decide(&paid, &asked("pm_c"), &me(), limit),
        Err(AttemptRefusal::Paid { attempt: 2, .. })
    ));
    let Ok(Door::Start(req)) = decide(&failed, &asked("pm_c"), &me(), limit) else {
        panic!("the failed twin starts attempt 3");
    };
    assert_eq!(req.number(), 3);
    assert_eq!(
        start_attempt(None, Some(&paid[0]), Some(&paid[1]), &req),
        Err(AttemptRefusedBy::After(Some(Guard::StatusIs(Failed))))
    );
    assert!(start_attempt(None, Some(&failed[0]), Some(&failed[1]), &req).is_ok());
}
