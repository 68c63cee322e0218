//! The specification of the drift audit ([`charge_core::audit`]): what Stripe created in a
//! window and the records settled in it → matched, in flight, or a drift class. Each mismatch of
//! a charge or a refund with its Stripe object is a row (`each_mismatch_of_a_charge_has_its_class`,
//! `each_mismatch_of_a_refund_has_its_class`); the classes that come of a missing side, a count
//! or a watch are the tests below them. The audit never changes a record.

mod spec;

use std::collections::BTreeSet;
use std::time::Duration;

use charge_core::audit::*;
use charge_core::dispute::plan::status_of;
use charge_core::dispute::state::{DisputeParams, DisputeState};
use charge_core::dispute::{DisputeStatus, StripeDispute};
use charge_core::domain::{Amount, OperationId, PaymentIntentId, StripeRefundId};
use charge_core::operation::Operation;
use charge_core::operation::OperationStatus::{self, Failed, Succeeded, Unknown};
use charge_core::outcome::{PaymentIntent, PaymentIntentStatus};
use charge_core::refund::{RefundStatus, StripeRefund};
use charge_core::testing::{order, T0};
use charge_core::time::Timestamp;
use spec::Row;

const HOUR: Duration = Duration::from_secs(3600);

const POLICY: AuditPolicy = AuditPolicy {
    key_window: Duration::from_secs(23 * 3600),
    page_lead: Duration::from_secs(12 * 3600),
    refund_recheck: Duration::ZERO,
};

fn window() -> AuditWindow {
    AuditWindow::ending_at(T0.plus(24 * HOUR), 24 * HOUR)
}

fn evidence() -> Evidence {
    Evidence::empty(window(), T0.plus(24 * HOUR), false)
}

/// A 1000 usd charge of `order_id`, settled `status` with intent `pi`.
fn charge(order_id: &str, status: OperationStatus, pi: Option<&str>) -> Operation {
    let mut b = order(order_id).amount(1000).status(status);
    if let Some(pi) = pi {
        b = b.external_id(pi);
    }
    let mut op = b.build();
    if status.is_settled() {
        op.next_due_at = None;
    }
    op
}

/// Stripe's view of `op`'s intent `id`.
fn intent(op: &Operation, id: &str, status: &str) -> PaymentIntent {
    let mut pi = PaymentIntent::new(
        PaymentIntentId::parse(id).unwrap(),
        PaymentIntentStatus::parse(status),
    );
    pi.amount = Some(1000);
    pi.currency = Some("usd".into());
    pi.operation_id = Some(op.operation_id.to_string());
    pi.order_id = Some(op.order_id.as_str().to_owned());
    pi.livemode = Some(false);
    pi.amount_received = Some(if status == "succeeded" { 1000 } else { 0 });
    pi
}

/// A refund of `amount` of `charge` (its intent `pi_<order>`), `status`, refund `re`.
fn refund(
    charge: &Operation,
    id: &str,
    amount: i64,
    status: OperationStatus,
    re: Option<&str>,
) -> Operation {
    let mut op = spec::refund_of(charge, id, amount);
    op.status = status;
    op.params.refund_state_mut().unwrap().stripe_refund_id =
        re.map(|r| StripeRefundId::parse(r).unwrap());
    if status.is_settled() {
        op.next_due_at = None;
    }
    op
}

fn stripe_refund(
    op: Option<&Operation>,
    id: &str,
    pi: &str,
    amount: i64,
    status: &str,
) -> StripeRefund {
    StripeRefund {
        id: StripeRefundId::parse(id).unwrap(),
        status: RefundStatus::parse(status),
        replayed: false,
        amount: Some(amount),
        currency: Some("usd".into()),
        payment_intent: Some(pi.into()),
        operation_id: op.map(|o| o.operation_id.to_string()),
        order_id: op.map(|o| o.order_id.as_str().to_owned()),
        failure_reason: None,
        reason: None,
    }
}

fn classes(j: &Judgement) -> Vec<DriftClass> {
    j.findings.iter().map(|f| f.class).collect()
}

#[test]
fn a_clean_window_matches_both_sides_once() {
    let paid = charge("ord-1", Succeeded, Some("pi_1"));
    let declined = charge("ord-2", Failed, Some("pi_2"));
    let mut ev = evidence();
    ev.intents = vec![
        intent(&paid, "pi_1", "succeeded"),
        intent(&declined, "pi_2", "canceled"),
    ];
    ev.settled = vec![paid, declined];
    let j = judge(&ev, &POLICY);
    assert_eq!(classes(&j), vec![]);
    assert_eq!(j.counts.matched, 4, "{:?}", j.counts);
    assert_eq!(j.unexplained(), 0);
}

/// (the charge as settled, Stripe's PaymentIntent) → the one drift class of the pair.
type ChargeDriftRow = Row<Operation, PaymentIntent, (), DriftClass, ()>;

/// The settled charge every charge row starts from: 1000 usd, succeeded, `pi_1`.
fn ours() -> Operation {
    charge("ord-1", Succeeded, Some("pi_1"))
}

/// `value` with `edit` made to it.
fn edited<T>(mut value: T, edit: impl FnOnce(&mut T)) -> T {
    edit(&mut value);
    value
}

fn charge_drift_rows() -> Vec<ChargeDriftRow> {
    let paid = ours();
    // The order charged again and declined again: attempt 2 (`charge#2`, its own operation id
    // and intent), `failed`.
    let declined_again = attempt(&paid, 2, Failed, "pi_2");
    vec![
        Row {
            says: "record failed, Stripe succeeded",
            found: edited(paid.clone(), |op| op.status = Failed),
            input: intent(&paid, "pi_1", "succeeded"),
            now: (),
            next: (),
            then: DriftClass::StatusDiffers,
        },
        Row {
            says: "record failed, Stripe's intent declined but still confirmable (requires_payment_method)",
            found: edited(paid.clone(), |op| op.status = Failed),
            input: edited(intent(&paid, "pi_1", "succeeded"), |pi| {
                pi.status = PaymentIntentStatus::RequiresPaymentMethod
            }),
            now: (),
            next: (),
            then: DriftClass::StatusDiffers,
        },
        Row {
            says: "attempt 2 (charge#2) failed, its own intent declined but still confirmable (requires_payment_method), as for attempt 1",
            found: declined_again.clone(),
            input: edited(intent(&declined_again, "pi_2", "succeeded"), |pi| {
                pi.status = PaymentIntentStatus::RequiresPaymentMethod
            }),
            now: (),
            next: (),
            then: DriftClass::StatusDiffers,
        },
        Row {
            says: "record succeeded, Stripe canceled",
            found: paid.clone(),
            input: edited(intent(&paid, "pi_1", "succeeded"), |pi| {
                pi.status = PaymentIntentStatus::Canceled
            }),
            now: (),
            next: (),
            then: DriftClass::StatusDiffers,
        },
        Row {
            says: "amount edited",
            found: edited(paid.clone(), |op| {
                op.params.charge_mut().unwrap().amount = Amount::new(999).unwrap()
            }),
            input: intent(&paid, "pi_1", "succeeded"),
            now: (),
            next: (),
            then: DriftClass::AmountDiffers,
        },
        Row {
            says: "currency differs",
            found: paid.clone(),
            input: edited(intent(&paid, "pi_1", "succeeded"), |pi| {
                pi.currency = Some("eur".into())
            }),
            now: (),
            next: (),
            then: DriftClass::AmountDiffers,
        },
        Row {
            says: "received less",
            found: paid.clone(),
            input: edited(intent(&paid, "pi_1", "succeeded"), |pi| {
                pi.amount_received = Some(10)
            }),
            now: (),
            next: (),
            then: DriftClass::AmountDiffers,
        },
    ]
}

#[test]
fn each_mismatch_of_a_charge_has_its_class() {
    spec::holds(&charge_drift_rows(), |op, pi, ()| {
        let mut ev = evidence();
        ev.intents = vec![pi.clone()];
        ev.settled = vec![op.clone()];
        let j = judge(&ev, &POLICY);
        assert_eq!(j.counts.drifted, 2, "both sides, one finding");
        assert_eq!(j.unexplained(), 0);
        let [class] = classes(&j)[..] else {
            panic!("one finding, not {:?}", classes(&j));
        };
        ((), class)
    });
}

/// A declined attempt after the first is judged as the first is: its own intent (found by its
/// operation id, the intent's `metadata[operation_id]`) left `requires_payment_method` at Stripe
/// is `status_differs` (a customer could still confirm it: the failed attempt's intent must be
/// canceled), and the twin, the same intent canceled, matches; the order's head, declined and
/// canceled, matches in both.
#[test]
fn a_declined_attempt_after_the_first_is_drift_while_its_intent_is_confirmable() {
    let mut head = charge("ord-1", Failed, Some("pi_1"));
    head.params.charge_state_mut().unwrap().latest_attempt = Some(2);
    let second = attempt(&head, 2, Failed, "pi_2");
    assert_eq!(second.key().kind.sort_key(), "charge#2");
    for (status, then) in [
        ("requires_payment_method", vec![DriftClass::StatusDiffers]),
        ("canceled", vec![]),
    ] {
        let mut ev = evidence();
        ev.intents = vec![
            intent(&head, "pi_1", "canceled"),
            intent(&second, "pi_2", status),
        ];
        ev.settled = vec![head.clone(), second.clone()];
        let j = judge(&ev, &POLICY);
        assert_eq!(classes(&j), then, "{status}: {:?}", j.findings);
        assert_eq!(j.unexplained(), 0);
        if let [finding] = &j.findings[..] {
            assert_eq!(
                finding.operation_id.as_deref(),
                Some(second.operation_id.to_string().as_str()),
                "the finding names attempt 2's operation"
            );
        }
        assert_eq!(
            (j.counts.matched, j.counts.drifted),
            if then.is_empty() { (4, 0) } else { (2, 2) },
            "{status}: {:?}",
            j.counts
        );
    }
}

#[test]
fn an_intent_with_our_metadata_and_no_record_is_at_stripe_not_here_and_others_are_not_ours() {
    let ghost = charge("ord-9", Succeeded, Some("pi_9"));
    let mut foreign = intent(&ghost, "pi_f", "succeeded");
    foreign.operation_id = None;
    let mut other_mode = intent(&ghost, "pi_l", "succeeded");
    other_mode.livemode = Some(true);
    let mut ev = evidence();
    ev.intents = vec![intent(&ghost, "pi_9", "succeeded"), foreign, other_mode];
    let j = judge(&ev, &POLICY);
    assert_eq!(classes(&j), vec![DriftClass::AtStripeNotHere]);
    assert_eq!(j.counts.not_ours, 2);
    // Twin: the same intent with its record in flight is the engine's work.
    let mut in_flight = ghost.clone();
    in_flight.status = Unknown;
    ev.intents.truncate(1);
    ev.related = vec![in_flight];
    let j = judge(&ev, &POLICY);
    assert_eq!(classes(&j), vec![]);
    assert_eq!(j.counts.in_flight, 1);
}

/// Attempt `n` of `head`'s order (its own operation id), settled `status` with intent `pi`.
fn attempt(head: &Operation, n: u32, status: OperationStatus, pi: &str) -> Operation {
    Operation {
        kind: charge_core::domain::OperationKind::Charge(n),
        operation_id: OperationId::new_random(),
        ..charge(head.order_id.as_str(), status, Some(pi))
    }
}

/// An order declined once and paid by its second attempt matches on both sides: each intent
/// is its own attempt's (by operation id), and the refunds are held against the paid attempt.
/// Paid by two attempts, it is `paid_twice` whichever side shows it: two succeeded intents of
/// two of its operations at Stripe, or two succeeded attempts in the records read (each side
/// one finding per order).
#[test]
fn an_order_paid_by_two_attempts_is_paid_twice_and_by_one_matches() {
    let mut head = charge("ord-1", Failed, Some("pi_1"));
    head.params.charge_state_mut().unwrap().latest_attempt = Some(2);
    let second = attempt(&head, 2, Succeeded, "pi_2");
    let paid_refund = spec::refund_of(&second, "r-1", 1000);
    assert_eq!(paid_refund.charge_key(), second.key());
    let mut ev = evidence();
    ev.intents = vec![
        intent(&head, "pi_1", "canceled"),
        intent(&second, "pi_2", "succeeded"),
    ];
    ev.settled = vec![head.clone(), second.clone()];
    let mut refunded = paid_refund.clone();
    refunded.status = Succeeded;
    refunded.next_due_at = None;
    ev.related = vec![refunded];
    ev.refunds_read = BTreeSet::from(["ord-1".to_owned()]);
    let j = judge(&ev, &POLICY);
    assert_eq!(classes(&j), vec![], "{:?}", j.findings);
    assert_eq!(j.unexplained(), 0);
    // The shell reads every attempt of an order charged again; of one charged once, no more
    // than before attempts.
    let reads = orders_to_read(&[], &[], std::slice::from_ref(&second));
    assert_eq!(
        reads.get("ord-1").map(|r| (r.charge, r.attempts)),
        Some((true, true))
    );
    let once = charge("ord-9", Succeeded, Some("pi_9"));
    let reads = orders_to_read(&[], &[], &[once]);
    assert_eq!(
        reads.get("ord-9").map(|r| (r.charge, r.attempts)),
        Some((false, false))
    );

    // Both attempts paid at Stripe (the records say the first failed): paid twice, besides the
    // first's own status drift.
    ev.intents[0].status = PaymentIntentStatus::Succeeded;
    ev.intents[0].amount_received = Some(1000);
    let j = judge(&ev, &POLICY);
    assert!(
        classes(&j).contains(&DriftClass::PaidTwice),
        "{:?}",
        j.findings
    );
    let finding = j
        .findings
        .iter()
        .find(|f| f.class == DriftClass::PaidTwice)
        .unwrap();
    assert_eq!(finding.order_id.as_deref(), Some("ord-1"));
    assert!(finding.detail.contains("pi_1") && finding.detail.contains("pi_2"));

    // Both attempts recorded succeeded (what Stripe shows aside): paid twice, once.
    let mut ev = evidence();
    let first = charge("ord-2", Succeeded, Some("pi_3"));
    let again = attempt(&first, 2, Succeeded, "pi_4");
    ev.settled = vec![first.clone(), again.clone()];
    ev.related = vec![again.clone()];
    ev.intents = vec![
        intent(&first, "pi_3", "succeeded"),
        intent(&again, "pi_4", "canceled"),
    ];
    let j = judge(&ev, &POLICY);
    let paid_twice: Vec<_> = j
        .findings
        .iter()
        .filter(|f| f.class == DriftClass::PaidTwice)
        .collect();
    assert_eq!(paid_twice.len(), 1, "{:?}", j.findings);
    assert!(paid_twice[0].detail.contains("attempt 1, attempt 2"));
    // Twin: the second attempt failed, as the store's write keeps it: no paid_twice.
    let failed = attempt(&first, 2, Failed, "pi_4");
    ev.settled = vec![first, failed.clone()];
    ev.related = vec![failed];
    let j = judge(&ev, &POLICY);
    assert!(
        !classes(&j).contains(&DriftClass::PaidTwice),
        "{:?}",
        j.findings
    );
}

#[test]
fn a_second_succeeded_intent_for_one_operation_is_a_duplicate() {
    let op = charge("ord-1", Succeeded, Some("pi_1"));
    let mut ev = evidence();
    ev.intents = vec![
        intent(&op, "pi_1", "succeeded"),
        intent(&op, "pi_2", "succeeded"),
    ];
    ev.related = vec![op.clone()];
    assert_eq!(
        classes(&judge(&ev, &POLICY)),
        vec![DriftClass::DuplicateSuccess]
    );
    // Twin: a second intent that did not succeed is not a duplicate, but still not ours.
    ev.intents[1].status = PaymentIntentStatus::Canceled;
    assert_eq!(
        classes(&judge(&ev, &POLICY)),
        vec![DriftClass::AtStripeNotHere]
    );
}

#[test]
fn a_record_whose_intent_stripe_does_not_have_is_here_not_at_stripe() {
    let op = charge("ord-1", Succeeded, Some("pi_old"));
    let (want, _) = objects_to_retrieve(&[], &[], std::slice::from_ref(&op), &[]);
    assert_eq!(want, BTreeSet::from(["pi_old".to_owned()]));
    let mut ev = evidence();
    ev.settled = vec![op.clone()];
    ev.retrieved_intents.insert("pi_old".into(), None);
    assert_eq!(
        classes(&judge(&ev, &POLICY)),
        vec![DriftClass::HereNotAtStripe]
    );
    // Twin: created before the window, read by id, agrees.
    ev.retrieved_intents
        .insert("pi_old".into(), Some(intent(&op, "pi_old", "succeeded")));
    let j = judge(&ev, &POLICY);
    assert_eq!(classes(&j), vec![]);
    assert_eq!(j.counts.matched, 1);
    // Not read (Stripe refused): not vouched for, and not drift.
    ev.retrieved_intents.clear();
    let j = judge(&ev, &POLICY);
    assert_eq!((classes(&j), j.counts.unchecked), (vec![], 1));
    // A succeeded record naming no intent at all; a failed one never sent is fine.
    let mut ev = evidence();
    ev.settled = vec![
        charge("ord-2", Succeeded, None),
        charge("ord-3", Failed, None),
    ];
    assert_eq!(
        classes(&judge(&ev, &POLICY)),
        vec![DriftClass::HereNotAtStripe]
    );
}

#[test]
fn refunds_match_and_a_dashboard_refund_of_our_charge_is_found() {
    let paid = charge("ord-1", Succeeded, Some("pi_1"));
    let ours = refund(&paid, "r-1", 400, Succeeded, Some("re_1"));
    let mut ev = evidence();
    ev.refunds = vec![
        stripe_refund(Some(&ours), "re_1", "pi_1", 400, "succeeded"),
        stripe_refund(None, "re_dash", "pi_1", 100, "succeeded"),
        stripe_refund(None, "re_other", "pi_x", 100, "succeeded"),
    ];
    ev.settled = vec![ours.clone()];
    let reads = orders_to_read(&ev.intents, &ev.refunds, &ev.settled);
    assert_eq!(
        reads.get("ord-1"),
        Some(&OrderReads {
            charge: true,
            refunds: true,
            attempts: false,
        })
    );
    let (want, _) = objects_to_retrieve(
        &ev.intents,
        &ev.refunds,
        &ev.settled,
        std::slice::from_ref(&paid),
    );
    assert_eq!(
        want,
        BTreeSet::from(["pi_x".to_owned()]),
        "pi_1 is known from the charge"
    );
    ev.related = vec![paid.clone()];
    ev.refunds_read.insert("ord-1".into());
    ev.retrieved_intents.insert(
        "pi_x".into(),
        Some(PaymentIntent::new(
            PaymentIntentId::parse("pi_x").unwrap(),
            PaymentIntentStatus::Succeeded,
        )),
    );
    let j = judge(&ev, &POLICY);
    assert_eq!(classes(&j), vec![DriftClass::AtStripeNotHere]);
    assert_eq!(j.findings[0].stripe_id.as_deref(), Some("re_dash"));
    assert_eq!((j.counts.not_ours, j.unexplained()), (1, 0));
    // The refund's record edited to another amount.
    let mut edited = ours.clone();
    let charge_core::operation::Params::Refund(p, _) = &mut edited.params else {
        panic!("a refund's record")
    };
    p.amount = Amount::new(300).unwrap();
    ev.settled = vec![edited];
    assert!(classes(&judge(&ev, &POLICY)).contains(&DriftClass::AmountDiffers));
}

/// On the pinned version (before basil) Stripe records what an authorization released as a
/// refund of its own (`expired_uncaptured_charge`, no metadata): a partial capture's remainder, a
/// canceled or lapsed hold. The audit matches it to what the intent as Stripe holds it released;
/// it is no drift. Its twins: the same refund of another amount, and a dashboard refund (no such
/// reason) of the same intent, are drift; an intent not read leaves it unchecked.
#[test]
fn an_authorizations_released_part_is_matched_not_drift() {
    let released = |id: &str, pi: &str, amount: i64| StripeRefund {
        reason: Some("expired_uncaptured_charge".into()),
        ..stripe_refund(None, id, pi, amount, "succeeded")
    };
    let captured = charge("ord-cap", Succeeded, Some("pi_cap"));
    let canceled = charge("ord-can", Failed, Some("pi_can"));
    let mut ev = evidence();
    ev.related = vec![captured.clone(), canceled.clone()];
    let mut partly = intent(&captured, "pi_cap", "succeeded");
    partly.amount_received = Some(700);
    ev.retrieved_intents.insert("pi_cap".into(), Some(partly));
    ev.retrieved_intents.insert(
        "pi_can".into(),
        Some(intent(&canceled, "pi_can", "canceled")),
    );
    ev.refunds = vec![
        released("re_rem", "pi_cap", 300),
        released("re_all", "pi_can", 1000),
    ];
    let j = judge(&ev, &POLICY);
    assert_eq!(classes(&j), vec![], "{:?}", j.findings);
    assert_eq!((j.counts.matched, j.unexplained()), (2, 0));

    // Twins: another amount than the intent released; a refund without Stripe's reason.
    ev.refunds = vec![
        released("re_rem", "pi_cap", 200),
        stripe_refund(None, "re_dash", "pi_can", 1000, "succeeded"),
    ];
    let j = judge(&ev, &POLICY);
    assert_eq!(
        classes(&j),
        vec![DriftClass::AmountDiffers, DriftClass::AtStripeNotHere]
    );
    let amount = j
        .findings
        .iter()
        .find(|f| f.class == DriftClass::AmountDiffers);
    assert!(
        amount.unwrap().detail.contains("released 300"),
        "{:?}",
        j.findings
    );
    // Its intent not read: not vouched for, not drift.
    ev.retrieved_intents.clear();
    ev.refunds = vec![released("re_rem", "pi_cap", 300)];
    let j = judge(&ev, &POLICY);
    assert_eq!((classes(&j), j.counts.unchecked), (vec![], 1));
}

/// A settled refund is held against Stripe's refund as a charge against its intent: whose it
/// is, its status, its amount and currency.
/// (the refund as settled, Stripe's refund) → the one drift class of the pair, and a part of
/// what its finding says.
type RefundDriftRow = Row<Operation, StripeRefund, (), Drift, ()>;

/// A drift class and a part of its finding's detail.
#[derive(Debug)]
struct Drift {
    class: DriftClass,
    detail: &'static str,
}

/// The settled refund every refund row starts from (400 of `ours()`, succeeded, `re_1`); Stripe's
/// `re_1` of it is the other side.
fn our_refund() -> Operation {
    refund(&ours(), "r-1", 400, Succeeded, Some("re_1"))
}

fn refund_drift_rows() -> Vec<RefundDriftRow> {
    let ours = our_refund();
    let theirs = stripe_refund(Some(&ours), "re_1", "pi_1", 400, "succeeded");
    vec![
        Row {
            says: "Stripe's refund names another operation",
            found: ours.clone(),
            input: edited(theirs.clone(), |re| {
                re.operation_id = Some(OperationId::new_random().to_string())
            }),
            now: (),
            next: (),
            then: Drift {
                class: DriftClass::HereNotAtStripe,
                detail: "the record's refund carries operation",
            },
        },
        Row {
            says: "record succeeded, Stripe failed later",
            found: ours.clone(),
            input: edited(theirs.clone(), |re| re.status = RefundStatus::Failed),
            now: (),
            next: (),
            then: Drift {
                class: DriftClass::StatusDiffers,
                detail: "neither an event nor the refund watch recorded",
            },
        },
        Row {
            says: "record succeeded, Stripe canceled",
            found: ours.clone(),
            input: edited(theirs.clone(), |re| re.status = RefundStatus::Canceled),
            now: (),
            next: (),
            then: Drift {
                class: DriftClass::StatusDiffers,
                detail: "record succeeded, Stripe canceled",
            },
        },
        Row {
            says: "record failed, Stripe succeeded",
            found: edited(ours.clone(), |op| op.status = Failed),
            input: theirs.clone(),
            now: (),
            next: (),
            then: Drift {
                class: DriftClass::StatusDiffers,
                detail: "record failed, Stripe succeeded",
            },
        },
        Row {
            says: "currency differs",
            found: ours.clone(),
            input: edited(theirs.clone(), |re| re.currency = Some("eur".into())),
            now: (),
            next: (),
            then: Drift {
                class: DriftClass::AmountDiffers,
                detail: "record 400 usd, Stripe 400 eur",
            },
        },
    ]
}

#[test]
fn each_mismatch_of_a_refund_has_its_class() {
    for row in refund_drift_rows() {
        let name = row.says;
        let mut ev = evidence();
        ev.refunds = vec![row.input];
        ev.settled = vec![row.found];
        let j = judge(&ev, &POLICY);
        assert_eq!(classes(&j), vec![row.then.class], "{name}");
        assert!(
            j.findings[0].detail.contains(row.then.detail),
            "{name}: {}",
            j.findings[0].detail
        );
        assert_eq!(j.counts.drifted, 2, "{name}: both sides, one finding");
    }
}

#[test]
fn a_succeeded_refund_settled_before_the_window_and_read_again_is_judged_as_settled() {
    let policy = AuditPolicy {
        refund_recheck: 30 * 24 * HOUR,
        ..POLICY
    };
    // The span read again is the window, thirty days earlier: once per refund.
    let span = rechecked_window(&window(), &policy);
    assert_eq!(span.from, window().from.minus(30 * 24 * HOUR));
    assert_eq!(span.to, window().to.minus(30 * 24 * HOUR));
    let none = rechecked_window(&window(), &POLICY);
    assert_eq!(none.from, none.to, "zero days: nothing read again");
    let shorter = AuditPolicy {
        refund_recheck: 12 * HOUR,
        ..POLICY
    };
    let short = rechecked_window(&window(), &shorter);
    assert_eq!(short.from, short.to, "never over the window's own records");
    let ours = our_refund();
    let read = |status: RefundStatus| {
        let mut ev = evidence();
        ev.rechecked = vec![ours.clone()];
        let mut re = stripe_refund(Some(&ours), "re_1", "pi_1", 400, "succeeded");
        re.status = status;
        ev.retrieved_refunds.insert("re_1".into(), Some(re));
        judge(&ev, &policy)
    };
    // Stripe failed it days later and nothing recorded it: a finding of its own.
    let late = read(RefundStatus::Failed);
    assert_eq!(classes(&late), vec![DriftClass::StatusDiffers]);
    assert!(late.findings[0]
        .detail
        .contains("record succeeded, Stripe failed"));
    assert_eq!(late.counts.rechecked_refunds, 1);
    assert_eq!(late.unexplained(), 0);
    // Its twin: still succeeded at Stripe, matched, nothing to report.
    let fine = read(RefundStatus::Succeeded);
    assert_eq!(classes(&fine), vec![]);
    assert_eq!((fine.counts.rechecked_refunds, fine.counts.matched), (1, 1));
    assert_eq!(fine.unexplained(), 0);
    // One Stripe could not answer for: unchecked, the report not complete.
    let mut ev = evidence();
    ev.rechecked = vec![ours.clone()];
    let unread = judge(&ev, &policy);
    assert_eq!((unread.counts.unchecked, unread.unexplained()), (1, 0));
}

/// The name of each drift class a matched pair can show; the others come of a missing side, a
/// count, or a watch (their own tests above).
fn variant(class: &DriftClass) -> &'static str {
    match class {
        DriftClass::StatusDiffers => "StatusDiffers",
        DriftClass::AmountDiffers => "AmountDiffers",
        DriftClass::HereNotAtStripe => "HereNotAtStripe",
        DriftClass::AtStripeNotHere
        | DriftClass::DuplicateSuccess
        | DriftClass::PaidTwice
        | DriftClass::OverRefunded
        | DriftClass::DisputeUnrecorded
        | DriftClass::AuthorizationNearDeadline
        | DriftClass::UnsettledPastKeyWindow => "not a pair's",
    }
}

const PAIR_CLASSES: &[&str] = &["StatusDiffers", "AmountDiffers", "HereNotAtStripe"];

fn pair_classes() -> Vec<DriftClass> {
    let charges = charge_drift_rows().into_iter().map(|row| row.then);
    charges
        .chain(refund_drift_rows().into_iter().map(|row| row.then.class))
        .chain(dispute_drift_rows().into_iter().map(|row| row.then))
        .collect()
}

#[test]
fn every_class_of_a_pair_has_a_row() {
    spec::covers("the audit's pairs", pair_classes(), PAIR_CLASSES, variant);
}

/// The twin: the tables without a refund that names another operation are caught.
#[test]
fn a_table_missing_a_class_is_caught() {
    let kept = pair_classes()
        .into_iter()
        .filter(|c| *c != DriftClass::HereNotAtStripe);
    assert_eq!(
        spec::uncovered(kept, PAIR_CLASSES, variant),
        ["HereNotAtStripe"]
    );
}

#[test]
fn refunds_over_what_the_charge_took_are_over_refunded() {
    let paid = charge("ord-1", Succeeded, Some("pi_1"));
    let a = refund(&paid, "r-1", 600, Succeeded, Some("re_1"));
    let mut b = refund(&paid, "r-2", 400, Succeeded, Some("re_2"));
    let mut ev = evidence();
    ev.related = vec![paid.clone(), a.clone(), b.clone()];
    ev.refunds_read.insert("ord-1".into());
    assert_eq!(
        classes(&judge(&ev, &POLICY)),
        vec![],
        "1000 of 1000: within"
    );
    let charge_core::operation::Params::Refund(p, _) = &mut b.params else {
        panic!("a refund's record")
    };
    p.amount = Amount::new(401).unwrap();
    ev.related = vec![paid, a, b];
    assert_eq!(
        classes(&judge(&ev, &POLICY)),
        vec![DriftClass::OverRefunded]
    );
}

#[test]
fn deadlines_are_watched_but_review_is_not_drift() {
    let now = T0.plus(24 * HOUR);
    let mut held = charge("ord-1", OperationStatus::Authorized, Some("pi_1"));
    held.params.charge_state_mut().unwrap().capture_before = Some(now.plus(11 * HOUR));
    let mut far = held.clone();
    far.params.charge_state_mut().unwrap().capture_before = Some(now.plus(13 * HOUR));
    let mut lost = charge("ord-2", Unknown, None);
    lost.first_attempted_at = Some(now.minus(23 * HOUR + Duration::from_secs(1)));
    let mut young = lost.clone();
    young.first_attempted_at = Some(now.minus(22 * HOUR));
    let mut known = lost.clone();
    known.external_id = Some(PaymentIntentId::parse("pi_2").unwrap());
    let mut reviewed = lost.clone();
    reviewed.review = Some(charge_core::operation::Review {
        reason: "x".into(),
        flagged_at: now,
    });
    let mut ev = evidence();
    ev.unsettled = vec![held, far, lost, young, known, reviewed];
    let j = judge(&ev, &POLICY);
    assert_eq!(
        classes(&j),
        vec![
            DriftClass::AuthorizationNearDeadline,
            DriftClass::UnsettledPastKeyWindow
        ]
    );
    assert_eq!(j.counts.in_review, 1);
    let report = j.into_report(window(), now, "schedule");
    assert_eq!(report.drift(), 0, "watch classes are not drift");
    assert_eq!(report.count(DriftClass::UnsettledPastKeyWindow), 1);
}

#[test]
fn a_report_keeps_its_first_findings_and_counts_the_rest() {
    let mut ev = evidence();
    ev.settled = (0..FINDINGS_KEPT + 3)
        .map(|i| charge(&format!("ord-{i}"), Succeeded, None))
        .collect();
    let report = judge(&ev, &POLICY).into_report(window(), T0, "schedule");
    assert_eq!(report.findings.len(), FINDINGS_KEPT);
    assert_eq!(report.findings_left_out, 3);
    assert_eq!(
        report.count(DriftClass::HereNotAtStripe),
        FINDINGS_KEPT as u64 + 3
    );
}

#[test]
fn a_report_reads_back_from_its_json_and_names_classes_as_the_metric_does() {
    let mut ev = evidence();
    ev.settled = vec![charge("ord-2", Succeeded, None)];
    let report = judge(&ev, &POLICY).into_report(window(), T0, "arn:aws:iam::1:user/op");
    let json = serde_json::to_string(&report).unwrap();
    assert!(json.contains("\"here_not_at_stripe\""), "{json}");
    assert_eq!(serde_json::from_str::<AuditReport>(&json).unwrap(), report);
    for class in DriftClass::ALL {
        assert_eq!(DriftClass::parse(class.as_str()), Some(class));
    }
}

#[test]
fn windows_are_whole_seconds_and_half_open() {
    let w = AuditWindow::ending_at(Timestamp::from_millis(10_500), Duration::from_secs(5));
    assert_eq!((w.from.as_millis(), w.to.as_millis()), (5_000, 10_000));
    assert_eq!((w.from_secs(), w.to_secs()), (5, 10));
    assert!(w.contains(Timestamp::from_millis(5_000)));
    assert!(!w.contains(Timestamp::from_millis(10_000)));
}

/// Nearest-rank percentiles: 100 durations 1..=100 s have p50 50 s and p99 99 s; one
/// duration is every percentile; none is all zero.
#[test]
fn settle_times_are_nearest_rank_percentiles() {
    let t = SettleTimes::of((1..=100).rev().collect());
    assert_eq!(
        (t.count, t.p50_secs, t.p99_secs, t.max_secs),
        (100, 50, 99, 100)
    );
    let one = SettleTimes::of(vec![7]);
    assert_eq!((one.p50_secs, one.p99_secs, one.max_secs), (7, 7, 7));
    assert_eq!(SettleTimes::of(vec![]), SettleTimes::default());
}

/// The picture per kind: a charge that took an hour, another that took three, counted by
/// their settle times; an unsettled charge two hours old and one in review, counted with the
/// oldest's age; a settled record without a settle time (kept before it was stamped) left
/// out of the times; and it reaches the report.
#[test]
fn the_picture_counts_settle_times_and_what_is_open_per_kind() {
    let mut fast = charge("ord-fast", Succeeded, Some("pi_fast"));
    fast.settled_at = Some(fast.created_at.plus(HOUR));
    let mut slow = charge("ord-slow", Failed, Some("pi_slow"));
    slow.settled_at = Some(slow.created_at.plus(3 * HOUR));
    let unstamped = charge("ord-old", Succeeded, Some("pi_old"));
    let mut open = charge("ord-open", Unknown, None);
    open.created_at = T0.plus(22 * HOUR);
    let mut reviewed = charge("ord-review", Unknown, None);
    reviewed.created_at = T0.plus(23 * HOUR);
    reviewed.review = Some(charge_core::operation::Review {
        reason: "stuck".into(),
        flagged_at: reviewed.created_at,
    });
    let now = T0.plus(24 * HOUR);
    let (times, unsettled) = picture(
        &[fast, slow, unstamped],
        &[open.clone(), reviewed.clone()],
        now,
    );
    let c = times["charge"];
    assert_eq!((c.count, c.p50_secs, c.max_secs), (2, 3600, 3 * 3600));
    let u = unsettled["charge"];
    assert_eq!((u.count, u.in_review, u.oldest_age_secs), (2, 1, 2 * 3600));
    assert!(!times.contains_key("refund") && !unsettled.contains_key("refund"));

    let mut ev = evidence();
    ev.unsettled = vec![open];
    let report = judge(&ev, &POLICY).into_report(window(), now, "test");
    assert_eq!(report.unsettled["charge"].count, 1);
    // A report kept before the picture existed reads with none.
    let mut old = serde_json::to_value(&report).unwrap();
    old.as_object_mut().unwrap().remove("settle_times");
    old.as_object_mut().unwrap().remove("unsettled");
    let read: AuditReport = serde_json::from_value(old).unwrap();
    assert!(read.settle_times.is_empty() && read.unsettled.is_empty());
}

/// A capture of `amount` of `charge`'s authorization (`pi`), settled `status`.
fn capture_of(charge: &Operation, amount: i64, status: OperationStatus) -> Operation {
    use charge_core::charge::state::Taker;
    use charge_core::domain::Principal;
    use charge_core::take::{request::CaptureRequest, take, TakeRequest};
    let request = TakeRequest::Capture(CaptureRequest {
        amount: Some(Amount::new(amount).unwrap()),
    });
    let operation_id = OperationId::new_random();
    let taker = Taker {
        capture: true,
        operation_id,
    };
    let taking = take(charge, &request, taker, T0).unwrap();
    let mut op = Operation::new_taking(
        charge.order_id.clone(),
        request.kind(),
        request.fingerprint(),
        taking.params,
        Principal::jwt("shop").unwrap(),
        T0,
        Duration::from_secs(300),
    );
    op.operation_id = operation_id;
    op.status = status;
    op.next_due_at = None;
    op.first_attempted_at = Some(T0);
    op
}

/// A capture Stripe refused (its authorization given back) beside the intent a later capture
/// of another amount took: matched. Its twin, Stripe holding exactly what the failed capture
/// asked, is drift: that capture may have taken the money after all.
#[test]
fn a_refused_capture_is_drift_only_when_stripe_took_what_it_asked() {
    let authorized = order("ord-cap")
        .manual()
        .amount(1000)
        .status(OperationStatus::Authorized)
        .external_id("pi_cap")
        .build();
    let refused = capture_of(&authorized, 600, Failed);
    for (received, drift) in [(500, false), (600, true)] {
        let mut pi = intent(&authorized, "pi_cap", "succeeded");
        pi.amount_received = Some(received);
        let mut ev = evidence();
        ev.settled = vec![refused.clone()];
        ev.retrieved_intents.insert("pi_cap".into(), Some(pi));
        let j = judge(&ev, &POLICY);
        let want = if drift {
            vec![DriftClass::StatusDiffers]
        } else {
            vec![]
        };
        assert_eq!(classes(&j), want, "Stripe received {received}");
    }
}

// ---- Disputes: Stripe's, found through our intent ----

/// The dispute `dp_1` of ord-1's paid charge (`pi_1`) as Stripe holds it: 1000 usd,
/// `needs_response`.
fn stripe_dispute(status: &str) -> StripeDispute {
    let mut d = charge_core::testing::stripe_dispute("dp_1", "pi_1");
    d.amount = 1000;
    d.status = DisputeStatus::parse(status);
    d
}

/// Its record as written from `d`: open (`unknown`) while Stripe holds it open, settled as the
/// plan settles a closed one.
fn dispute_record(charge: &Operation, d: &StripeDispute) -> Operation {
    let params = DisputeParams::of(d, PaymentIntentId::parse("pi_1").unwrap()).unwrap();
    let mut op = Operation::new_dispute(
        charge.order_id.clone(),
        params,
        DisputeState::of(d, true),
        T0,
        T0.plus(HOUR),
    );
    op.status = status_of(&d.status);
    if op.status.is_settled() {
        op.next_due_at = None;
        op.settled_at = Some(T0.plus(HOUR));
    }
    op
}

/// (the dispute record as settled, Stripe's dispute) → the one drift class of the pair.
type DisputeDriftRow = Row<Operation, StripeDispute, (), DriftClass, ()>;

fn dispute_drift_rows() -> Vec<DisputeDriftRow> {
    let paid = ours();
    let lost = stripe_dispute("lost");
    vec![
        Row {
            says: "recorded lost (the bank's take succeeded), Stripe says won: status_differs",
            found: dispute_record(&paid, &lost),
            input: stripe_dispute("won"),
            now: (),
            next: (),
            then: DriftClass::StatusDiffers,
        },
        Row {
            says: "recorded won, Stripe says lost: status_differs (the money is gone)",
            found: dispute_record(&paid, &stripe_dispute("won")),
            input: lost.clone(),
            now: (),
            next: (),
            then: DriftClass::StatusDiffers,
        },
        Row {
            says: "recorded 1000, Stripe disputes 900: amount_differs",
            found: dispute_record(&paid, &lost),
            input: edited(lost.clone(), |d| d.amount = 900),
            now: (),
            next: (),
            then: DriftClass::AmountDiffers,
        },
        Row {
            says: "recorded usd, Stripe's dispute is in eur: amount_differs",
            found: dispute_record(&paid, &lost),
            input: edited(lost.clone(), |d| d.currency = "eur".into()),
            now: (),
            next: (),
            then: DriftClass::AmountDiffers,
        },
    ]
}

/// Each settled dispute record against the dispute as Stripe holds it (read by id: the list of
/// its window did not show it) gives its row's class; the same pair agreeing is matched.
#[test]
fn each_mismatch_of_a_dispute_has_its_class() {
    let judged = |record: &Operation, d: &StripeDispute| {
        let mut ev = evidence();
        ev.settled = vec![record.clone()];
        ev.retrieved_disputes
            .insert(d.id.as_str().to_owned(), Some(d.clone()));
        judge(&ev, &POLICY)
    };
    spec::holds(&dispute_drift_rows(), |record, d, _| {
        let j = judged(record, d);
        assert_eq!(j.unexplained(), 0);
        ((), classes(&j)[0])
    });
    let lost = stripe_dispute("lost");
    let agreed = judged(&dispute_record(&ours(), &lost), &lost);
    assert_eq!(classes(&agreed), vec![]);
    assert_eq!(agreed.counts.matched, 1);
    // The read found no such dispute: the record names what Stripe does not have.
    let mut ev = evidence();
    ev.settled = vec![dispute_record(&ours(), &lost)];
    ev.retrieved_disputes.insert("dp_1".into(), None);
    assert_eq!(
        classes(&judge(&ev, &POLICY)),
        vec![DriftClass::HereNotAtStripe]
    );
    // Not read at all (Stripe did not answer): not vouched for.
    let mut ev = evidence();
    ev.settled = vec![dispute_record(&ours(), &lost)];
    assert_eq!(judge(&ev, &POLICY).counts.unchecked, 1);
}

/// A dispute Stripe lists as created in the window, judged by whose intent it is and what
/// record it has.
#[test]
fn a_listed_dispute_of_our_intent_needs_its_record_and_one_of_another_intent_is_not_ours() {
    let paid = ours();
    let open = stripe_dispute("needs_response");
    let listed =
        |intent_read: Option<PaymentIntent>, looked_up: bool, record: Option<Operation>| {
            let mut ev = evidence();
            ev.disputes = vec![open.clone()];
            if let Some(pi) = intent_read {
                ev.retrieved_intents.insert("pi_1".into(), Some(pi));
            }
            assert_eq!(
                dispute_orders(&ev).get("ord-1").map(Vec::len),
                ev.retrieved_intents
                    .get("pi_1")
                    .and_then(|p| p.as_ref())
                    .and_then(|p| p.operation_id.as_ref())
                    .map(|_| 1),
                "the shell reads the record of a dispute of our intent, under its order"
            );
            if looked_up {
                ev.disputes_read.insert("dp_1".into());
            }
            ev.related.extend(record);
            let j = judge(&ev, &POLICY);
            assert_eq!(j.unexplained(), 0, "{:?}", j.counts);
            assert_eq!(j.counts.disputes, 1);
            j
        };
    let ours_pi = intent(&paid, "pi_1", "succeeded");
    // Ours, and no record: drift, with the order to look at.
    let unrecorded = listed(Some(ours_pi.clone()), true, None);
    assert_eq!(classes(&unrecorded), vec![DriftClass::DisputeUnrecorded]);
    let f = &unrecorded.findings[0];
    assert_eq!(
        (f.order_id.as_deref(), f.stripe_id.as_deref()),
        (Some("ord-1"), Some("dp_1"))
    );
    assert!(f.detail.contains("has no record"), "{}", f.detail);
    // Its twin: the record exists and is open: the reconciler's to move, not drift.
    let recorded = listed(
        Some(ours_pi.clone()),
        true,
        Some(dispute_record(&paid, &open)),
    );
    assert_eq!(classes(&recorded), vec![]);
    assert_eq!(recorded.counts.in_flight, 1);
    // An open record holding another amount than Stripe's: amount_differs.
    let mut other = dispute_record(&paid, &open);
    if let charge_core::operation::Params::Dispute(p, _) = &mut other.params {
        p.amount = Amount::new(999).unwrap();
    }
    let differs = listed(Some(ours_pi.clone()), true, Some(other));
    assert_eq!(classes(&differs), vec![DriftClass::AmountDiffers]);
    // A settled record agreeing with Stripe: matched.
    let lost = stripe_dispute("lost");
    let mut ev = evidence();
    ev.disputes = vec![lost.clone()];
    ev.retrieved_intents
        .insert("pi_1".into(), Some(ours_pi.clone()));
    ev.disputes_read.insert("dp_1".into());
    ev.related = vec![dispute_record(&paid, &lost)];
    assert_eq!(judge(&ev, &POLICY).counts.matched, 1);
    // Not ours: an intent without our metadata (another integration's payment) is not drift.
    let mut theirs = ours_pi.clone();
    theirs.operation_id = None;
    theirs.order_id = None;
    let not_ours = listed(Some(theirs), false, None);
    assert_eq!(classes(&not_ours), vec![]);
    assert_eq!(not_ours.counts.not_ours, 1);
    // Our intent, but the record was never looked up (the shell stopped): not vouched for.
    let unread = listed(Some(ours_pi.clone()), false, None);
    assert_eq!((unread.counts.unchecked, classes(&unread).len()), (1, 0));
    // The intent could not be read: whose it is is unknown, not vouched for.
    let unknown = listed(None, false, None);
    assert_eq!(unknown.counts.unchecked, 1);
    // A dispute of the other mode is never ours.
    let mut ev = evidence();
    ev.disputes = vec![edited(open.clone(), |d| d.livemode = true)];
    ev.retrieved_intents.insert("pi_1".into(), Some(ours_pi));
    assert!(dispute_orders(&ev).is_empty());
    assert_eq!(judge(&ev, &POLICY).counts.not_ours, 1);
}

/// What the shell reads for disputes: the intent of a listed dispute it does not know, and the
/// dispute of a settled record the list did not show.
#[test]
fn the_audit_reads_a_listed_dispute_s_intent_and_a_settled_record_s_dispute() {
    let paid = ours();
    let lost = stripe_dispute("lost");
    let mut other = edited(stripe_dispute("won"), |d| {
        d.id = charge_core::domain::DisputeId::parse("dp_2").unwrap()
    });
    other.payment_intent = Some(PaymentIntentId::parse("pi_9").unwrap());
    let record = dispute_record(&paid, &lost);
    let listed_intent = intent(&paid, "pi_9", "succeeded");
    // dp_1 settled in the window, not listed (created before it): read by id. dp_2 listed, its
    // intent pi_9 listed too: nothing more to read for it.
    let (intents, disputes) = dispute_reads(
        std::slice::from_ref(&other),
        &[listed_intent],
        &Default::default(),
        std::slice::from_ref(&record),
    );
    assert!(intents.is_empty());
    assert_eq!(disputes.into_iter().collect::<Vec<_>>(), ["dp_1"]);
    // The twin: dp_1 listed, its intent not known: the intent is read, the dispute is not.
    let (intents, disputes) = dispute_reads(
        &[lost],
        &[],
        &Default::default(),
        std::slice::from_ref(&record),
    );
    assert_eq!(intents.into_iter().collect::<Vec<_>>(), ["pi_1"]);
    assert!(disputes.is_empty());
}
