//! The specification of a refund ([`charge_core::refund::plan`]): the refund record as
//! claimed, Stripe's answer to the step, now → the step taken, the next record (status, the
//! Stripe refund id recorded) and what happens (the reservation given back to the charge or not,
//! a review's class, the message retried) (`refund_table`); and an operator's claim about a
//! refund, confirmed only as Stripe holds it (`operator_claim_table`).

mod spec;

use std::time::Duration;

use charge_core::domain::StripeRefundId;
use charge_core::operation::Operation;
use charge_core::operation::OperationStatus::{self, Failed, Pending, Succeeded, Unknown};
use charge_core::outcome::{GatewayError, RetryCause};
use charge_core::plan::{Policy, ReviewClass};
use charge_core::refund::plan::{
    after_create, after_list, after_retrieve, confirm_by_hand, next_step, operator_step,
    OperatorRead, RefundDecision, RefundStep,
};
use charge_core::refund::{RefundStatus, StripeRefund};
use charge_core::testing::T0;
use charge_core::time::Timestamp;
use spec::Row;

const HOUR: Duration = Duration::from_secs(3600);

/// (the refund as claimed, Stripe's answer to the step, now) → the next record and what happens.
type RefundRow = Row<Operation, Answer, Next, Then>;

/// The next record: its status and the Stripe refund id recorded.
#[derive(Debug, PartialEq)]
struct Next {
    status: OperationStatus,
    refund_id: Option<&'static str>,
}

/// What happens: the step taken, whether the reservation goes back to the charge, a review's
/// class, the message retried.
#[derive(Debug, PartialEq)]
struct Then {
    step: &'static str,
    release: bool,
    review: Option<ReviewClass>,
    retry: Option<RetryCause>,
}

/// (the refund as recorded, an operator's claim and what was read at Stripe) → confirmed or
/// refused.
type ClaimRow = Row<Operation, Claim, (), Verdict, ()>;

/// An operator's claim: the status, the Stripe refund id claimed, and what was read at Stripe.
struct Claim {
    status: OperationStatus,
    id: Option<StripeRefundId>,
    read: OperatorRead,
}

/// Confirmed as (status, the reservation given back), or refused with a reason containing the
/// text.
#[derive(Debug)]
enum Verdict {
    Confirmed {
        status: OperationStatus,
        release: bool,
    },
    Refused(&'static str),
}

/// A refund of 400 of a 1000 usd charge (`pi_r`), claimed at T0 (its first attempt).
fn claimed() -> Operation {
    let mut op = spec::refund_of(&spec::paid_charge("ord-rp"), "r-1", 400);
    op.attempts = 1;
    op.first_attempted_at = Some(T0);
    op
}

/// Stripe's refund `re_1` of `op` in `status`.
fn stripe(op: &Operation, status: &str) -> StripeRefund {
    StripeRefund {
        id: StripeRefundId::parse("re_1").unwrap(),
        status: RefundStatus::parse(status),
        replayed: false,
        amount: Some(400),
        currency: Some("usd".into()),
        payment_intent: Some("pi_r".into()),
        operation_id: Some(op.operation_id.to_string()),
        failure_reason: (status == "failed").then(|| "expired_or_canceled_card".into()),
        order_id: None,
        reason: None,
    }
}

fn ambiguous() -> GatewayError {
    GatewayError::Ambiguous {
        detail: "timeout".into(),
    }
}

/// What the step is, Stripe's answer to it, and the decision's outcome.
enum Answer {
    One(Result<StripeRefund, GatewayError>),
    List(Result<Vec<StripeRefund>, GatewayError>),
}

fn decide(op: &Operation, answer: &Answer, now: Timestamp, policy: &Policy) -> RefundDecision {
    match (next_step(op, now, policy), answer) {
        (RefundStep::Create, Answer::One(r)) => after_create(op, r.clone(), now, policy),
        (RefundStep::Retrieve(_), Answer::One(r)) => after_retrieve(op, r.clone(), now, policy),
        (RefundStep::List(_), Answer::List(r)) => after_list(op, r.clone(), now, policy),
        (step, _) => panic!("step {} with the wrong answer", step.name()),
    }
}

fn refund_rows(op: &Operation) -> Vec<RefundRow> {
    // A refund Stripe holds pending: unknown here, its id recorded.
    let mut known = Operation {
        status: Unknown,
        ..op.clone()
    };
    known.params.refund_state_mut().unwrap().stripe_refund_id =
        Some(StripeRefundId::parse("re_1").unwrap());
    let late = T0.plus(24 * HOUR);
    let other = |mut r: StripeRefund| {
        r.operation_id = Some("someone-else".into());
        r
    };
    vec![
        Row {
            says: "new, created succeeded: succeeded, its id recorded, settled",
            found: op.clone(),
            input: Answer::One(Ok(stripe(op, "succeeded"))),
            now: T0,
            next: Next {
                status: Succeeded,
                refund_id: Some("re_1"),
            },
            then: Then {
                step: "create_refund",
                release: false,
                review: None,
                retry: None,
            },
        },
        Row {
            says: "new, created pending: unknown (not settled), its id recorded, back off",
            found: op.clone(),
            input: Answer::One(Ok(stripe(op, "pending"))),
            now: T0,
            next: Next {
                status: Unknown,
                refund_id: Some("re_1"),
            },
            then: Then {
                step: "create_refund",
                release: false,
                review: None,
                retry: None,
            },
        },
        Row {
            says: "new, created requires_action: unknown, its id recorded",
            found: op.clone(),
            input: Answer::One(Ok(stripe(op, "requires_action"))),
            now: T0,
            next: Next {
                status: Unknown,
                refund_id: Some("re_1"),
            },
            then: Then {
                step: "create_refund",
                release: false,
                review: None,
                retry: None,
            },
        },
        Row {
            says: "new, created failed: failed, settled, the reservation given back",
            found: op.clone(),
            input: Answer::One(Ok(stripe(op, "failed"))),
            now: T0,
            next: Next {
                status: Failed,
                refund_id: Some("re_1"),
            },
            then: Then {
                step: "create_refund",
                release: true,
                review: None,
                retry: None,
            },
        },
        Row {
            says: "new, created canceled: failed, settled, the reservation given back",
            found: op.clone(),
            input: Answer::One(Ok(stripe(op, "canceled"))),
            now: T0,
            next: Next {
                status: Failed,
                refund_id: Some("re_1"),
            },
            then: Then {
                step: "create_refund",
                release: true,
                review: None,
                retry: None,
            },
        },
        Row {
            says: "new, create times out: unknown, never failed, nothing released",
            found: op.clone(),
            input: Answer::One(Err(ambiguous())),
            now: T0,
            next: Next {
                status: Unknown,
                refund_id: None,
            },
            then: Then {
                step: "create_refund",
                release: false,
                review: None,
                retry: None,
            },
        },
        Row {
            says: "new, create rate limited: status kept, message retried",
            found: op.clone(),
            input: Answer::One(Err(GatewayError::RetryLater {
                cause: RetryCause::RateLimited,
                detail: "429".into(),
            })),
            now: T0,
            next: Next {
                status: Pending,
                refund_id: None,
            },
            then: Then {
                step: "create_refund",
                release: false,
                review: None,
                retry: Some(RetryCause::RateLimited),
            },
        },
        Row {
            says: "new, Stripe refuses it (amount_too_large): status kept, review, never failed",
            found: op.clone(),
            input: Answer::One(Err(GatewayError::Rejected {
                detail: "amount_too_large".into(),
                param: Some("amount".into()),
            })),
            now: T0,
            next: Next {
                status: Pending,
                refund_id: None,
            },
            then: Then {
                step: "create_refund",
                release: false,
                review: Some(ReviewClass::Rejected),
                retry: None,
            },
        },
        Row {
            says: "new, Stripe refuses it because the charge is disputed (charge_disputed): \
                   failed, the reservation given back, not retried, not a person's",
            found: op.clone(),
            input: Answer::One(Err(GatewayError::ChargeDisputed {
                detail: "HTTP 400 invalid_request_error/charge_disputed: The charge you're \
                         attempting to refund has been charged back."
                    .into(),
            })),
            now: T0,
            next: Next {
                status: Failed,
                refund_id: None,
            },
            then: Then {
                step: "create_refund",
                release: true,
                review: None,
                retry: None,
            },
        },
        Row {
            says: "new, a refusal that only mentions a dispute in its words (another code): \
                   still a person's, never failed on a guess",
            found: op.clone(),
            input: Answer::One(Err(GatewayError::Rejected {
                detail: "HTTP 400 invalid_request_error/amount_too_large: the charge_disputed \
                         amount is too large"
                    .into(),
                param: Some("amount".into()),
            })),
            now: T0,
            next: Next {
                status: Pending,
                refund_id: None,
            },
            then: Then {
                step: "create_refund",
                release: false,
                review: Some(ReviewClass::Rejected),
                retry: None,
            },
        },
        Row {
            says: "new, the key met other parameters: unknown, review",
            found: op.clone(),
            input: Answer::One(Err(GatewayError::KeyMisuse {
                detail: "idempotency_error".into(),
            })),
            now: T0,
            next: Next {
                status: Unknown,
                refund_id: None,
            },
            then: Then {
                step: "create_refund",
                release: false,
                review: Some(ReviewClass::KeyMisuse),
                retry: None,
            },
        },
        Row {
            says: "new, create answers someone else's refund: nothing settled, review",
            found: op.clone(),
            input: Answer::One(Ok(other(stripe(op, "succeeded")))),
            now: T0,
            next: Next {
                status: Pending,
                refund_id: None,
            },
            then: Then {
                step: "create_refund",
                release: false,
                review: Some(ReviewClass::RefundMismatch),
                retry: None,
            },
        },
        Row {
            says: "pending past the stuck bound: review, its id recorded",
            found: known.clone(),
            input: Answer::One(Ok(stripe(op, "pending"))),
            now: T0.plus(73 * HOUR),
            next: Next {
                status: Unknown,
                refund_id: Some("re_1"),
            },
            then: Then {
                step: "retrieve_refund",
                release: false,
                review: Some(ReviewClass::StuckRefund),
                retry: None,
            },
        },
        Row {
            says: "id known, retrieve says failed (Stripe's word): failed, released",
            found: known.clone(),
            input: Answer::One(Ok(stripe(op, "failed"))),
            now: T0.plus(HOUR),
            next: Next {
                status: Failed,
                refund_id: Some("re_1"),
            },
            then: Then {
                step: "retrieve_refund",
                release: true,
                review: None,
                retry: None,
            },
        },
        Row {
            says: "id known, retrieve says succeeded: succeeded, settled",
            found: known.clone(),
            input: Answer::One(Ok(stripe(op, "succeeded"))),
            now: T0.plus(HOUR),
            next: Next {
                status: Succeeded,
                refund_id: Some("re_1"),
            },
            then: Then {
                step: "retrieve_refund",
                release: false,
                review: None,
                retry: None,
            },
        },
        Row {
            says: "id known, Stripe's answer is another refund with our operation id: review, \
            nothing released, the recorded id kept",
            found: known.clone(),
            input: Answer::One(Ok(StripeRefund {
                id: StripeRefundId::parse("re_2").unwrap(),
                ..stripe(op, "failed")
            })),
            now: T0.plus(HOUR),
            next: Next {
                status: Unknown,
                refund_id: None,
            },
            then: Then {
                step: "retrieve_refund",
                release: false,
                review: Some(ReviewClass::RefundMismatch),
                retry: None,
            },
        },
        Row {
            says: "id known, Stripe has no such refund: review",
            found: known.clone(),
            input: Answer::One(Err(GatewayError::Rejected {
                detail: "resource_missing".into(),
                param: None,
            })),
            now: T0.plus(HOUR),
            next: Next {
                status: Unknown,
                refund_id: None,
            },
            then: Then {
                step: "retrieve_refund",
                release: false,
                review: Some(ReviewClass::RetrieveFailed),
                retry: None,
            },
        },
        Row {
            says: "past the key window, the list holds ours among others: settled by it",
            found: op.clone(),
            input: Answer::List(Ok(vec![
                other(stripe(op, "succeeded")),
                stripe(op, "succeeded"),
            ])),
            now: late,
            next: Next {
                status: Succeeded,
                refund_id: Some("re_1"),
            },
            then: Then {
                step: "list_refunds",
                release: false,
                review: None,
                retry: None,
            },
        },
        Row {
            says: "past the key window, the list holds none of ours: review, never created again",
            found: op.clone(),
            input: Answer::List(Ok(vec![other(stripe(op, "succeeded"))])),
            now: late,
            next: Next {
                status: Unknown,
                refund_id: None,
            },
            then: Then {
                step: "list_refunds",
                release: false,
                review: Some(ReviewClass::RefundListAmbiguous),
                retry: None,
            },
        },
        Row {
            says: "past the key window, the list holds two of ours: review",
            found: op.clone(),
            input: Answer::List(Ok(vec![stripe(op, "succeeded"), stripe(op, "succeeded")])),
            now: late,
            next: Next {
                status: Unknown,
                refund_id: None,
            },
            then: Then {
                step: "list_refunds",
                release: false,
                review: Some(ReviewClass::RefundListAmbiguous),
                retry: None,
            },
        },
        Row {
            says: "past the key window, the list times out: status kept, look again",
            found: op.clone(),
            input: Answer::List(Err(ambiguous())),
            now: late,
            next: Next {
                status: Pending,
                refund_id: None,
            },
            then: Then {
                step: "list_refunds",
                release: false,
                review: None,
                retry: None,
            },
        },
    ]
}

#[test]
fn refund_table() {
    let policy = Policy::default();
    spec::holds(&refund_rows(&claimed()), |op, answer, now| {
        let d = decide(op, answer, *now, &policy);
        assert_eq!(
            d.decision.next_due_at.is_none(),
            d.decision.status.is_settled(),
            "due exactly while unsettled"
        );
        assert!(
            !(d.release && d.decision.status != Failed),
            "only a failure releases"
        );
        let next = Next {
            status: d.decision.status,
            refund_id: d.refund_id.as_deref().map(|id| match id {
                "re_1" => "re_1",
                _ => "another refund id",
            }),
        };
        let then = Then {
            step: next_step(op, *now, &policy).name(),
            release: d.release,
            review: d.decision.review.as_ref().map(|(class, _)| *class),
            retry: d.decision.retry,
        };
        (next, then)
    });
}

/// The name of each review class a refund can end in, and of no review.
fn review(review: &Option<ReviewClass>) -> &'static str {
    match review {
        None => "None",
        Some(class) => match class {
            ReviewClass::Rejected => "Rejected",
            ReviewClass::KeyMisuse => "KeyMisuse",
            ReviewClass::RefundMismatch => "RefundMismatch",
            ReviewClass::StuckRefund => "StuckRefund",
            ReviewClass::RetrieveFailed => "RetrieveFailed",
            ReviewClass::RefundListAmbiguous => "RefundListAmbiguous",
            // The charge's classes and the take's: a refund never ends in them.
            ReviewClass::SearchAmbiguous
            | ReviewClass::SearchFailed
            | ReviewClass::StuckRequiresAction
            | ReviewClass::StuckProcessing
            | ReviewClass::IntentMismatch
            | ReviewClass::SecondPaymentIntent
            | ReviewClass::CancelFailed
            | ReviewClass::TakeRefused
            | ReviewClass::DisputeUnreserved => "not a refund's",
        },
    }
}

const REVIEWS: &[&str] = &[
    "None",
    "Rejected",
    "KeyMisuse",
    "RefundMismatch",
    "StuckRefund",
    "RetrieveFailed",
    "RefundListAmbiguous",
];

fn verdict(verdict: &Verdict) -> &'static str {
    match verdict {
        Verdict::Confirmed { release: false, .. } => "Confirmed",
        Verdict::Confirmed { release: true, .. } => "Confirmed, released",
        Verdict::Refused(_) => "Refused",
    }
}

const VERDICTS: &[&str] = &["Confirmed", "Confirmed, released", "Refused"];

#[test]
fn every_outcome_has_a_row() {
    let op = claimed();
    let rows = refund_rows(&op);
    spec::covers(
        "the refund plan",
        rows.iter().map(|row| row.then.review),
        REVIEWS,
        review,
    );
    let claims = operator_claim_rows(&op);
    spec::covers(
        "an operator's claim",
        claims.iter().map(|row| &row.then),
        VERDICTS,
        |v| verdict(v),
    );
}

/// The twin: a table without its stuck refund, or without a refusal, is caught by name.
#[test]
fn a_table_missing_an_outcome_is_caught() {
    let op = claimed();
    let rows = refund_rows(&op);
    let reviews = rows
        .iter()
        .map(|row| row.then.review)
        .filter(|r| *r != Some(ReviewClass::StuckRefund));
    assert_eq!(spec::uncovered(reviews, REVIEWS, review), ["StuckRefund"]);
    let claims = operator_claim_rows(&op);
    let kept = claims
        .iter()
        .map(|row| &row.then)
        .filter(|v| !matches!(v, Verdict::Refused(_)));
    assert_eq!(spec::uncovered(kept, VERDICTS, |v| verdict(v)), ["Refused"]);
}

fn operator_claim_rows(op: &Operation) -> Vec<ClaimRow> {
    use OperatorRead::{Listed, Retrieved};
    use Verdict::{Confirmed, Refused};
    let mut known = Operation {
        status: Unknown,
        ..op.clone()
    };
    known.params.refund_state_mut().unwrap().stripe_refund_id =
        Some(StripeRefundId::parse("re_1").unwrap());
    let other = |mut r: StripeRefund| {
        r.operation_id = Some("someone-else".into());
        r
    };
    let re = |id: &str| StripeRefundId::parse(id).unwrap();
    vec![
        Row {
            says: "retrieved succeeded, claimed succeeded",
            found: known.clone(),
            input: Claim {
                status: Succeeded,
                id: Some(re("re_1")),
                read: Retrieved(Ok(stripe(op, "succeeded"))),
            },
            now: (),
            next: (),
            then: Confirmed {
                status: Succeeded,
                release: false,
            },
        },
        Row {
            says: "retrieved failed, claimed failed: released",
            found: known.clone(),
            input: Claim {
                status: Failed,
                id: None,
                read: Retrieved(Ok(stripe(op, "failed"))),
            },
            now: (),
            next: (),
            then: Confirmed {
                status: Failed,
                release: true,
            },
        },
        Row {
            says: "retrieved canceled, claimed failed: released",
            found: known.clone(),
            input: Claim {
                status: Failed,
                id: None,
                read: Retrieved(Ok(stripe(op, "canceled"))),
            },
            now: (),
            next: (),
            then: Confirmed {
                status: Failed,
                release: true,
            },
        },
        Row {
            says: "retrieved succeeded, claimed failed: refused",
            found: known.clone(),
            input: Claim {
                status: Failed,
                id: None,
                read: Retrieved(Ok(stripe(op, "succeeded"))),
            },
            now: (),
            next: (),
            then: Refused("Stripe holds re_1 succeeded, not failed"),
        },
        Row {
            says: "retrieved pending: refused, not settled",
            found: known.clone(),
            input: Claim {
                status: Succeeded,
                id: None,
                read: Retrieved(Ok(stripe(op, "pending"))),
            },
            now: (),
            next: (),
            then: Refused("settled yet: refund pending"),
        },
        Row {
            says: "retrieved someone else's: refused",
            found: known.clone(),
            input: Claim {
                status: Succeeded,
                id: None,
                read: Retrieved(Ok(other(stripe(op, "succeeded")))),
            },
            now: (),
            next: (),
            then: Refused("not this operation's"),
        },
        Row {
            says: "claimed another id than recorded: refused",
            found: known.clone(),
            input: Claim {
                status: Succeeded,
                id: Some(re("re_9")),
                read: Retrieved(Ok(stripe(op, "succeeded"))),
            },
            now: (),
            next: (),
            then: Refused("records refund re_1, not re_9"),
        },
        Row {
            says: "listed ours succeeded among others",
            found: op.clone(),
            input: Claim {
                status: Succeeded,
                id: Some(re("re_1")),
                read: Listed(Ok(vec![
                    other(stripe(op, "failed")),
                    stripe(op, "succeeded"),
                ])),
            },
            now: (),
            next: (),
            then: Confirmed {
                status: Succeeded,
                release: false,
            },
        },
        Row {
            says: "listed ours, but another id claimed: refused",
            found: op.clone(),
            input: Claim {
                status: Succeeded,
                id: Some(re("re_2")),
                read: Listed(Ok(vec![stripe(op, "succeeded")])),
            },
            now: (),
            next: (),
            then: Refused("is re_1, not re_2"),
        },
        Row {
            says: "listed none of ours, claimed failed: nothing went back, released",
            found: op.clone(),
            input: Claim {
                status: Failed,
                id: None,
                read: Listed(Ok(vec![other(stripe(op, "succeeded"))])),
            },
            now: (),
            next: (),
            then: Confirmed {
                status: Failed,
                release: true,
            },
        },
        Row {
            says: "listed none of ours, claimed succeeded: refused",
            found: op.clone(),
            input: Claim {
                status: Succeeded,
                id: None,
                read: Listed(Ok(vec![])),
            },
            now: (),
            next: (),
            then: Refused("lists 0 refunds"),
        },
        Row {
            says: "listed two of ours: refused whatever the claim",
            found: op.clone(),
            input: Claim {
                status: Failed,
                id: None,
                read: Listed(Ok(vec![stripe(op, "failed"), stripe(op, "failed")])),
            },
            now: (),
            next: (),
            then: Refused("lists 2 refunds"),
        },
        Row {
            says: "the list timed out: refused",
            found: op.clone(),
            input: Claim {
                status: Failed,
                id: None,
                read: Listed(Err(ambiguous())),
            },
            now: (),
            next: (),
            then: Refused("timeout"),
        },
    ]
}

/// An operator's claim against Stripe's answer: confirmed only as Stripe holds it.
#[test]
fn operator_claim_table() {
    let policy = Policy::default();
    let op = claimed();
    for row in operator_claim_rows(&op) {
        let says = row.says;
        let Claim { status, id, read } = row.input;
        let got = confirm_by_hand(
            &row.found,
            status,
            id.as_ref(),
            read,
            T0.plus(HOUR),
            &policy,
        );
        match (&got, &row.then) {
            (Ok(c), Verdict::Confirmed { status, release }) => {
                assert_eq!((c.status, c.release), (*status, *release), "{says}");
            }
            (Err(e), Verdict::Refused(part)) => assert!(e.contains(part), "{says}: {e}"),
            _ => panic!("{says}: got {got:?}, want {:?}", row.then),
        }
    }
    let mut known = Operation {
        status: Unknown,
        ..op.clone()
    };
    known.params.refund_state_mut().unwrap().stripe_refund_id =
        Some(StripeRefundId::parse("re_1").unwrap());
    assert_eq!(
        operator_step(&known),
        Some(RefundStep::Retrieve(StripeRefundId::parse("re_1").unwrap()))
    );
    assert!(matches!(operator_step(&op), Some(RefundStep::List(_))));
}
