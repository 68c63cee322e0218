//! The specification of the charge plan ([`charge_core::charge::plan`]): the record as the
//! claim hands it over, Stripe's answers to the calls made, now → the calls made, the next
//! record, and what it means for the message that asked. Every edge of the charge executor is a
//! row; so is each fact that makes an intent not the operation's (`intent_mismatch`).

mod spec;

use std::time::Duration;

use charge_core::charge::plan::{
    after_cancel, after_cancel_refused, after_create, after_retrieve, after_search,
    intent_mismatch, next_step, wait_for_search, Mismatch, Step,
};
use charge_core::domain::PaymentIntentId;
use charge_core::operation::Operation;
use charge_core::operation::OperationStatus::{self, Failed, Pending, Succeeded, Unknown};
use charge_core::outcome::{GatewayError, PaymentIntent, PaymentIntentStatus as Pi, RetryCause};
use charge_core::plan::{Decision, Disposition, FollowUp, Policy, ReviewClass};
use charge_core::testing::{self, T0};
use charge_core::time::Timestamp;
use spec::Row;

const MS: Duration = Duration::from_millis(1);
const MIN: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

/// (the record as claimed, Stripe's answers to the calls made, now) → the next record and what
/// happens.
type ChargeRow = Row<Operation, Answer, Next, Then>;

/// The next record: its status, the PaymentIntent id recorded, a part of the error recorded,
/// the next look.
#[derive(Debug)]
struct Next {
    status: OperationStatus,
    intent: Option<&'static str>,
    error: Option<&'static str>,
    next_look: Option<Timestamp>,
}

/// What happens: the calls made, in order ("create, cancel"), and what the decision means for
/// the message that asked.
#[derive(Debug)]
struct Then {
    calls: &'static str,
    means: Means,
}

/// What the decision means for the message, with the review's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Means {
    Settled,
    Scheduled,
    Retry(RetryCause),
    Review(ReviewClass),
}

/// What Stripe answers the calls made with, in order: create, retrieve and cancel answer one
/// intent (or an error), search a list (or an error); empty when the step makes no call.
type Answer = Vec<Result<Vec<PaymentIntent>, GatewayError>>;

/// The next answer, of a call that answers one intent.
fn one(
    answers: &mut impl Iterator<Item = Result<Vec<PaymentIntent>, GatewayError>>,
) -> Result<PaymentIntent, GatewayError> {
    answers
        .next()
        .expect("the call is answered")
        .map(|mut found| {
            assert_eq!(
                found.len(),
                1,
                "create, retrieve and cancel answer one intent"
            );
            found.remove(0)
        })
}

/// The decision on Stripe's answers to the call `step` makes and then to the calls the
/// decision asks for before it may be recorded, in the order the executor's shell makes them,
/// with the names of the calls made. Every answer of the row is used.
fn decide(
    op: &Operation,
    step: &Step,
    now: Timestamp,
    answers: Answer,
    policy: &Policy,
) -> (Decision, String) {
    let mut answers = answers.into_iter();
    let mut calls = vec![step.name()];
    let mut d = match step {
        Step::Create => after_create(op, one(&mut answers), now, policy, false),
        Step::Retrieve(id) => {
            assert_eq!(
                Some(id),
                op.external_id.as_ref(),
                "retrieves the recorded id"
            );
            after_retrieve(op, one(&mut answers), now, policy, false)
        }
        Step::Search => after_search(
            op,
            answers.next().expect("search calls Stripe"),
            now,
            policy,
            false,
        ),
        Step::WaitForSearch(until) => wait_for_search(op, *until),
    };
    while let Some(next) = d.then.take() {
        calls.push(next.name());
        d = match next {
            FollowUp::Cancel { id, why } => {
                after_cancel(op, &id, &why, one(&mut answers), now, policy, false)
            }
            FollowUp::Retrieve { id, why } => {
                after_cancel_refused(op, &id, &why, one(&mut answers), now, policy, false)
            }
            FollowUp::ReadDeadline { .. } => {
                after_retrieve(op, one(&mut answers), now, policy, false)
            }
        };
    }
    assert!(answers.next().is_none(), "an answer for a call not made");
    (d, calls.join(", "))
}

/// The disposition, checked to carry the review's reason, which is also the recorded error.
fn means(d: &Decision) -> Means {
    match d.disposition() {
        Disposition::Settled => Means::Settled,
        Disposition::Scheduled => Means::Scheduled,
        Disposition::RetryLater(cause) => Means::Retry(cause),
        Disposition::InReview(reason) => {
            let (class, recorded) = d.review.clone().expect("in review with a reason");
            assert_eq!(reason, recorded);
            assert_eq!(
                d.last_error.as_ref(),
                Some(&reason),
                "the reason is the error"
            );
            Means::Review(class)
        }
        other => panic!("a decision never means {other:?}"),
    }
}

fn declined(id: Option<&str>) -> GatewayError {
    GatewayError::Declined {
        code: "insufficient_funds".into(),
        payment_intent_id: id.map(|id| PaymentIntentId::parse(id).unwrap()),
    }
}

fn retry(cause: RetryCause) -> GatewayError {
    GatewayError::RetryLater {
        cause,
        detail: "HTTP 429".into(),
    }
}

fn timeout() -> GatewayError {
    GatewayError::Ambiguous {
        detail: "timed out".into(),
    }
}

fn misuse() -> GatewayError {
    GatewayError::KeyMisuse {
        detail: "HTTP 400 idempotency_error".into(),
    }
}

fn unexpected() -> GatewayError {
    GatewayError::UnexpectedState {
        detail: "HTTP 400 invalid_request_error/payment_intent_unexpected_state: You cannot \
                 cancel this PaymentIntent because it has a status of succeeded."
            .into(),
    }
}

fn rejected() -> GatewayError {
    GatewayError::Rejected {
        detail: "HTTP 404 invalid_request_error/resource_missing".into(),
        param: None,
    }
}

/// Every (record as claimed, time against the key window, Stripe's answer) of the charge
/// executor: the step it takes and the next record (status, the PaymentIntent id recorded,
/// a part of the error recorded, the next look) with what it means for the message.
fn table(policy: &Policy) -> Vec<ChargeRow> {
    let window = T0.plus(policy.key_window);
    let search = window.plus(policy.search_min_age);
    let stuck = T0.plus(policy.stuck_after);
    let base = testing::order("order-plan").build();
    // As the claim hands it over: first attempted at T0, claimed `attempts` times so far.
    let claimed = |status, attempts| Operation {
        status,
        attempts,
        first_attempted_at: Some(T0),
        ..base.clone()
    };
    let fresh = || claimed(Pending, 1);
    let unknown = |attempts| Operation {
        last_error: Some("outcome unknown: earlier".into()),
        ..claimed(Unknown, attempts)
    };
    let recorded = |attempts| Operation {
        external_id: Some(PaymentIntentId::parse("pi_1").unwrap()),
        ..unknown(attempts)
    };
    let ours = |status| PaymentIntent {
        amount: Some(base.params.amount().minor_units()),
        currency: Some(base.params.currency().as_str().into()),
        operation_id: Some(base.operation_id.to_string()),
        order_id: Some(base.order_id.as_str().into()),
        livemode: Some(false),
        ..PaymentIntent::new(PaymentIntentId::parse("pi_1").unwrap(), status)
    };
    let theirs = || PaymentIntent {
        amount: Some(999),
        ..ours(Pi::Succeeded)
    };
    let one = |pi| vec![Ok(vec![pi])];
    let found = |pis| vec![Ok(pis)];
    let fails = |e| vec![Err(e)];
    let none = Answer::new;
    let pi_1 = Some("pi_1");
    use Means::*;
    vec![
        // Inside the key window: create with the operation's key.
        Row {
            says: "new, create succeeded: succeeded, its id recorded, settled",
            found: fresh(),
            input: one(ours(Pi::Succeeded)),
            now: T0,
            next: Next {
                status: Succeeded,
                intent: pi_1,
                error: None,
                next_look: None,
            },
            then: Then {
                calls: "create",
                means: Settled,
            },
        },
        // Declined: the customer could still confirm the intent, so it is canceled before
        // `failed` is recorded, and only Stripe's `canceled` records it.
        Row {
            says: "new, create requires_payment_method: canceled first, then failed, settled",
            found: fresh(),
            input: [one(ours(Pi::RequiresPaymentMethod)), one(ours(Pi::Canceled))].concat(),
            now: T0,
            next: Next {
                status: Failed,
                intent: pi_1,
                error: Some("payment intent requires_payment_method; payment intent pi_1 canceled"),
                next_look: None,
            },
            then: Then {
                calls: "create, cancel",
                means: Settled,
            },
        },
        Row {
            says: "new, create canceled: failed, settled",
            found: fresh(),
            input: one(ours(Pi::Canceled)),
            now: T0,
            next: Next {
                status: Failed,
                intent: pi_1,
                error: Some("payment intent canceled"),
                next_look: None,
            },
            then: Then {
                calls: "create",
                means: Settled,
            },
        },
        Row {
            says: "new, create processing: unknown, id recorded, look again after the base back-off",
            found: fresh(),
            input: one(ours(Pi::Processing)),
            now: T0,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent processing"),
                next_look: Some(T0.plus(MIN)),
            },
            then: Then {
                calls: "create",
                means: Scheduled,
            },
        },
        Row {
            says: "new, create requires_action: unknown, id recorded, back off",
            found: fresh(),
            input: one(ours(Pi::RequiresAction)),
            now: T0,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent requires_action"),
                next_look: Some(T0.plus(MIN)),
            },
            then: Then {
                calls: "create",
                means: Scheduled,
            },
        },
        Row {
            says: "new, create requires_capture: unknown, id recorded, back off",
            found: fresh(),
            input: one(ours(Pi::RequiresCapture)),
            now: T0,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent requires_capture"),
                next_look: Some(T0.plus(MIN)),
            },
            then: Then {
                calls: "create",
                means: Scheduled,
            },
        },
        Row {
            says: "new, create in a status this code does not know: unknown, back off",
            found: fresh(),
            input: one(ours(Pi::Other("new".into()))),
            now: T0,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent new"),
                next_look: Some(T0.plus(MIN)),
            },
            then: Then {
                calls: "create",
                means: Scheduled,
            },
        },
        Row {
            says: "new, create answers someone else's intent: status kept, its id not recorded, review",
            found: fresh(),
            input: one(theirs()),
            now: T0,
            next: Next {
                status: Pending,
                intent: None,
                error: Some("intent_mismatch: payment intent pi_1"),
                next_look: Some(T0),
            },
            then: Then {
                calls: "create",
                means: Review(ReviewClass::IntentMismatch),
            },
        },
        Row {
            says: "new, create declined with its intent: canceled first, then failed, that id recorded, settled",
            found: fresh(),
            input: [fails(declined(pi_1)), one(ours(Pi::Canceled))].concat(),
            now: T0,
            next: Next {
                status: Failed,
                intent: pi_1,
                error: Some("declined: insufficient_funds; payment intent pi_1 canceled"),
                next_look: None,
            },
            then: Then {
                calls: "create, cancel",
                means: Settled,
            },
        },
        Row {
            says: "new, create declined without an intent: nothing to cancel, failed, no id, settled",
            found: fresh(),
            input: fails(declined(None)),
            now: T0,
            next: Next {
                status: Failed,
                intent: None,
                error: Some("declined"),
                next_look: None,
            },
            then: Then {
                calls: "create",
                means: Settled,
            },
        },
        Row {
            says: "declined, cancel times out: unknown (never failed), its id recorded, back off",
            found: fresh(),
            input: [fails(declined(pi_1)), fails(timeout())].concat(),
            now: T0,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("declined: insufficient_funds; cancel of pi_1: outcome unknown: timed out"),
                next_look: Some(T0.plus(MIN)),
            },
            then: Then {
                calls: "create, cancel",
                means: Scheduled,
            },
        },
        Row {
            says: "declined, cancel rate limited: unknown, its id recorded, message retried",
            found: fresh(),
            input: [fails(declined(pi_1)), fails(retry(RetryCause::RateLimited))].concat(),
            now: T0,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("cancel of pi_1: retry later (rate_limited)"),
                next_look: Some(T0.plus(MIN)),
            },
            then: Then {
                calls: "create, cancel",
                means: Retry(RetryCause::RateLimited),
            },
        },
        Row {
            says: "declined, cancel answered still requires_payment_method: unknown, back off",
            found: fresh(),
            input: [fails(declined(pi_1)), one(ours(Pi::RequiresPaymentMethod))].concat(),
            now: T0,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("cancel of pi_1 answered requires_payment_method"),
                next_look: Some(T0.plus(MIN)),
            },
            then: Then {
                calls: "create, cancel",
                means: Scheduled,
            },
        },
        Row {
            says: "declined, the customer paid it meanwhile: cancel refused, read back succeeded: succeeded",
            found: fresh(),
            input: [fails(declined(pi_1)), fails(unexpected()), one(ours(Pi::Succeeded))].concat(),
            now: T0,
            next: Next {
                status: Succeeded,
                intent: pi_1,
                error: None,
                next_look: None,
            },
            then: Then {
                calls: "create, cancel, retrieve",
                means: Settled,
            },
        },
        Row {
            says: "declined, cancel refused, read back canceled: failed",
            found: fresh(),
            input: [fails(declined(pi_1)), fails(unexpected()), one(ours(Pi::Canceled))].concat(),
            now: T0,
            next: Next {
                status: Failed,
                intent: pi_1,
                error: Some("payment intent canceled"),
                next_look: None,
            },
            then: Then {
                calls: "create, cancel, retrieve",
                means: Settled,
            },
        },
        Row {
            says: "declined, cancel refused, read back processing: unknown, back off",
            found: fresh(),
            input: [fails(declined(pi_1)), fails(unexpected()), one(ours(Pi::Processing))].concat(),
            now: T0,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent processing"),
                next_look: Some(T0.plus(MIN)),
            },
            then: Then {
                calls: "create, cancel, retrieve",
                means: Scheduled,
            },
        },
        Row {
            says: "declined, cancel refused, read back requires_action: unknown, back off",
            found: fresh(),
            input: [fails(declined(pi_1)), fails(unexpected()), one(ours(Pi::RequiresAction))].concat(),
            now: T0,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent requires_action"),
                next_look: Some(T0.plus(MIN)),
            },
            then: Then {
                calls: "create, cancel, retrieve",
                means: Scheduled,
            },
        },
        Row {
            says: "declined, cancel refused, read back declined again: unknown (never failed), back off",
            found: fresh(),
            input: [fails(declined(pi_1)), fails(unexpected()), one(ours(Pi::RequiresPaymentMethod))].concat(),
            now: T0,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("requires_payment_method again"),
                next_look: Some(T0.plus(MIN)),
            },
            then: Then {
                calls: "create, cancel, retrieve",
                means: Scheduled,
            },
        },
        Row {
            says: "declined, cancel refused, read back times out: unknown, its id recorded, back off",
            found: fresh(),
            input: [fails(declined(pi_1)), fails(unexpected()), fails(timeout())].concat(),
            now: T0,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("then its retrieve: outcome unknown"),
                next_look: Some(T0.plus(MIN)),
            },
            then: Then {
                calls: "create, cancel, retrieve",
                means: Scheduled,
            },
        },
        Row {
            says: "declined, cancel refused, read back refused: unknown, its id recorded, review",
            found: fresh(),
            input: [fails(declined(pi_1)), fails(unexpected()), fails(rejected())].concat(),
            now: T0,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("then its retrieve: request rejected"),
                next_look: Some(T0),
            },
            then: Then {
                calls: "create, cancel, retrieve",
                means: Review(ReviewClass::RetrieveFailed),
            },
        },
        Row {
            says: "declined, cancel meets idempotency_error: unknown, its id recorded, review key_misuse",
            found: fresh(),
            input: [fails(declined(pi_1)), fails(misuse())].concat(),
            now: T0,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("idempotency key misuse"),
                next_look: Some(T0),
            },
            then: Then {
                calls: "create, cancel",
                means: Review(ReviewClass::KeyMisuse),
            },
        },
        Row {
            says: "declined, cancel refused as invalid (404): unknown, its id recorded, review cancel_failed",
            found: fresh(),
            input: [fails(declined(pi_1)), fails(rejected())].concat(),
            now: T0,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("cancel_failed: declined: insufficient_funds; cancel of pi_1: request rejected"),
                next_look: Some(T0),
            },
            then: Then {
                calls: "create, cancel",
                means: Review(ReviewClass::CancelFailed),
            },
        },
        Row {
            says: "declined, cancel answers someone else's intent: status kept, review",
            found: fresh(),
            input: [fails(declined(pi_1)), one(theirs())].concat(),
            now: T0,
            next: Next {
                status: Pending,
                intent: None,
                error: Some("intent_mismatch"),
                next_look: Some(T0),
            },
            then: Then {
                calls: "create, cancel",
                means: Review(ReviewClass::IntentMismatch),
            },
        },
        Row {
            says: "new, create rate limited: status kept, message retried, look again after retry_after",
            found: fresh(),
            input: fails(retry(RetryCause::RateLimited)),
            now: T0,
            next: Next {
                status: Pending,
                intent: None,
                error: Some("retry later (rate_limited)"),
                next_look: Some(T0.plus(MIN)),
            },
            then: Then {
                calls: "create",
                means: Retry(RetryCause::RateLimited),
            },
        },
        Row {
            says: "new, create finds the key in use: status kept, message retried",
            found: fresh(),
            input: fails(retry(RetryCause::KeyInUse)),
            now: T0,
            next: Next {
                status: Pending,
                intent: None,
                error: Some("idempotency_key_in_use"),
                next_look: Some(T0.plus(MIN)),
            },
            then: Then {
                calls: "create",
                means: Retry(RetryCause::KeyInUse),
            },
        },
        Row {
            says: "new, create refused for our API key: status kept, message retried",
            found: fresh(),
            input: fails(retry(RetryCause::Configuration)),
            now: T0,
            next: Next {
                status: Pending,
                intent: None,
                error: Some("configuration"),
                next_look: Some(T0.plus(MIN)),
            },
            then: Then {
                calls: "create",
                means: Retry(RetryCause::Configuration),
            },
        },
        Row {
            says: "new, create times out: unknown (never failed), back off base",
            found: fresh(),
            input: fails(timeout()),
            now: T0,
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("outcome unknown: timed out"),
                next_look: Some(T0.plus(MIN)),
            },
            then: Then {
                calls: "create",
                means: Scheduled,
            },
        },
        Row {
            says: "third claim, create times out: unknown, back off base * 4",
            found: unknown(3),
            input: fails(timeout()),
            now: T0.plus(HOUR),
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("outcome unknown"),
                next_look: Some(T0.plus(HOUR + 4 * MIN)),
            },
            then: Then {
                calls: "create",
                means: Scheduled,
            },
        },
        Row {
            says: "late in the window, create times out: the back-off stops where search opens",
            found: unknown(10),
            input: fails(timeout()),
            now: window.minus(MIN),
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("outcome unknown"),
                next_look: Some(search),
            },
            then: Then {
                calls: "create",
                means: Scheduled,
            },
        },
        Row {
            says: "new, create meets idempotency_error: unknown, review key_misuse",
            found: fresh(),
            input: fails(misuse()),
            now: T0,
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("idempotency key misuse"),
                next_look: Some(T0),
            },
            then: Then {
                calls: "create",
                means: Review(ReviewClass::KeyMisuse),
            },
        },
        Row {
            says: "new, create rejected as invalid: status kept (not failed), review rejected",
            found: fresh(),
            input: fails(rejected()),
            now: T0,
            next: Next {
                status: Pending,
                intent: None,
                error: Some("request rejected"),
                next_look: Some(T0),
            },
            then: Then {
                calls: "create",
                means: Review(ReviewClass::Rejected),
            },
        },
        Row {
            says: "unknown, a moment before the window ends: still create",
            found: unknown(2),
            input: one(ours(Pi::Succeeded)),
            now: window.minus(MS),
            next: Next {
                status: Succeeded,
                intent: pi_1,
                error: None,
                next_look: None,
            },
            then: Then {
                calls: "create",
                means: Settled,
            },
        },
        // Past the key window, no id recorded: never create; search once search may be trusted.
        Row {
            says: "unknown, as the window ends: no call, wait until search opens",
            found: unknown(2),
            input: none(),
            now: window,
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("outcome unknown: earlier"),
                next_look: Some(search),
            },
            then: Then {
                calls: "wait_for_search",
                means: Scheduled,
            },
        },
        Row {
            says: "unknown, a moment before search opens: still wait",
            found: unknown(2),
            input: none(),
            now: search.minus(MS),
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("outcome unknown: earlier"),
                next_look: Some(search),
            },
            then: Then {
                calls: "wait_for_search",
                means: Scheduled,
            },
        },
        Row {
            says: "unknown, search open, finds it succeeded: settled, its id recorded",
            found: unknown(2),
            input: found(vec![ours(Pi::Succeeded)]),
            now: search,
            next: Next {
                status: Succeeded,
                intent: pi_1,
                error: None,
                next_look: None,
            },
            then: Then {
                calls: "search",
                means: Settled,
            },
        },
        Row {
            says: "unknown, search finds it declined: canceled first, then failed",
            found: unknown(2),
            input: [found(vec![ours(Pi::RequiresPaymentMethod)]), one(ours(Pi::Canceled))].concat(),
            now: search,
            next: Next {
                status: Failed,
                intent: pi_1,
                error: Some("payment intent pi_1 canceled"),
                next_look: None,
            },
            then: Then {
                calls: "search, cancel",
                means: Settled,
            },
        },
        Row {
            says: "unknown, search finds it processing: unknown, id recorded, back off",
            found: unknown(2),
            input: found(vec![ours(Pi::Processing)]),
            now: search,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent processing"),
                next_look: Some(search.plus(2 * MIN)),
            },
            then: Then {
                calls: "search",
                means: Scheduled,
            },
        },
        Row {
            says: "unknown, search finds someone else's intent: its id not recorded, review",
            found: unknown(2),
            input: found(vec![theirs()]),
            now: search,
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("intent_mismatch"),
                next_look: Some(search),
            },
            then: Then {
                calls: "search",
                means: Review(ReviewClass::IntentMismatch),
            },
        },
        Row {
            says: "unknown, search finds none: unknown (not failed), review",
            found: unknown(2),
            input: found(vec![]),
            now: search,
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("search found 0"),
                next_look: Some(search),
            },
            then: Then {
                calls: "search",
                means: Review(ReviewClass::SearchAmbiguous),
            },
        },
        Row {
            says: "unknown, search finds two: review",
            found: unknown(2),
            input: found(vec![ours(Pi::Succeeded), ours(Pi::Canceled)]),
            now: search,
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("search found 2"),
                next_look: Some(search),
            },
            then: Then {
                calls: "search",
                means: Review(ReviewClass::SearchAmbiguous),
            },
        },
        Row {
            says: "pending past the window (every create retried later), search finds none: unknown, review",
            found: claimed(Pending, 5),
            input: found(vec![]),
            now: search,
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("search found 0"),
                next_look: Some(search),
            },
            then: Then {
                calls: "search",
                means: Review(ReviewClass::SearchAmbiguous),
            },
        },
        Row {
            says: "unknown, search rate limited: status kept, look again after retry_after, message not retried",
            found: unknown(2),
            input: fails(retry(RetryCause::RateLimited)),
            now: search,
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("retry later"),
                next_look: Some(search.plus(MIN)),
            },
            then: Then {
                calls: "search",
                means: Scheduled,
            },
        },
        Row {
            says: "unknown, search times out: status kept, look again after retry_after",
            found: unknown(2),
            input: fails(timeout()),
            now: search,
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("outcome unknown: timed out"),
                next_look: Some(search.plus(MIN)),
            },
            then: Then {
                calls: "search",
                means: Scheduled,
            },
        },
        Row {
            says: "unknown, search refused: review",
            found: unknown(2),
            input: fails(rejected()),
            now: search,
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("search failed: request rejected"),
                next_look: Some(search),
            },
            then: Then {
                calls: "search",
                means: Review(ReviewClass::SearchFailed),
            },
        },
        Row {
            says: "unknown, at the stuck bound search finds it processing: its id recorded, review",
            found: unknown(2),
            input: found(vec![ours(Pi::Processing)]),
            now: stuck,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("stuck_processing: payment intent pi_1 still processing 72 h"),
                next_look: Some(stuck),
            },
            then: Then {
                calls: "search",
                means: Review(ReviewClass::StuckProcessing),
            },
        },
        // An id recorded: read it back, inside the window or past it; never create or search.
        Row {
            says: "id recorded, in the window, retrieve succeeded: settled",
            found: recorded(2),
            input: one(ours(Pi::Succeeded)),
            now: T0.plus(HOUR),
            next: Next {
                status: Succeeded,
                intent: pi_1,
                error: None,
                next_look: None,
            },
            then: Then {
                calls: "retrieve",
                means: Settled,
            },
        },
        Row {
            says: "id recorded, past the window: still retrieve; canceled: failed, no cancel",
            found: recorded(2),
            input: one(ours(Pi::Canceled)),
            now: search.plus(HOUR),
            next: Next {
                status: Failed,
                intent: pi_1,
                error: Some("payment intent canceled"),
                next_look: None,
            },
            then: Then {
                calls: "retrieve",
                means: Settled,
            },
        },
        Row {
            says: "id recorded, retrieve requires_payment_method: canceled first, then failed",
            found: recorded(2),
            input: [one(ours(Pi::RequiresPaymentMethod)), one(ours(Pi::Canceled))].concat(),
            now: T0.plus(HOUR),
            next: Next {
                status: Failed,
                intent: pi_1,
                error: Some("payment intent requires_payment_method; payment intent pi_1 canceled"),
                next_look: None,
            },
            then: Then {
                calls: "retrieve, cancel",
                means: Settled,
            },
        },
        Row {
            says: "id recorded, declined, its cancel times out again: unknown, back off base * 2",
            found: recorded(2),
            input: [one(ours(Pi::RequiresPaymentMethod)), fails(timeout())].concat(),
            now: T0.plus(HOUR),
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("cancel of pi_1: outcome unknown"),
                next_look: Some(T0.plus(HOUR + 2 * MIN)),
            },
            then: Then {
                calls: "retrieve, cancel",
                means: Scheduled,
            },
        },
        Row {
            says: "id recorded, retrieve processing: unknown, back off base * 2",
            found: recorded(2),
            input: one(ours(Pi::Processing)),
            now: T0.plus(HOUR),
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent processing"),
                next_look: Some(T0.plus(HOUR + 2 * MIN)),
            },
            then: Then {
                calls: "retrieve",
                means: Scheduled,
            },
        },
        Row {
            says: "id recorded, requires_action a moment before the stuck bound: back off",
            found: recorded(2),
            input: one(ours(Pi::RequiresAction)),
            now: stuck.minus(MS),
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent requires_action"),
                next_look: Some(stuck.minus(MS).plus(2 * MIN)),
            },
            then: Then {
                calls: "retrieve",
                means: Scheduled,
            },
        },
        Row {
            says: "id recorded, requires_action at the stuck bound: review",
            found: recorded(2),
            input: one(ours(Pi::RequiresAction)),
            now: stuck,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("stuck_requires_action"),
                next_look: Some(stuck),
            },
            then: Then {
                calls: "retrieve",
                means: Review(ReviewClass::StuckRequiresAction),
            },
        },
        Row {
            says: "id recorded, processing at the stuck bound: review",
            found: recorded(2),
            input: one(ours(Pi::Processing)),
            now: stuck,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("stuck_processing"),
                next_look: Some(stuck),
            },
            then: Then {
                calls: "retrieve",
                means: Review(ReviewClass::StuckProcessing),
            },
        },
        Row {
            says: "id recorded, requires_capture at the stuck bound: not stuck (we, not others, must act), back off",
            found: recorded(2),
            input: one(ours(Pi::RequiresCapture)),
            now: stuck,
            next: Next {
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent requires_capture"),
                next_look: Some(stuck.plus(2 * MIN)),
            },
            then: Then {
                calls: "retrieve",
                means: Scheduled,
            },
        },
        Row {
            says: "id recorded, retrieve answers someone else's intent: review",
            found: recorded(2),
            input: one(theirs()),
            now: T0.plus(HOUR),
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("intent_mismatch"),
                next_look: Some(T0.plus(HOUR)),
            },
            then: Then {
                calls: "retrieve",
                means: Review(ReviewClass::IntentMismatch),
            },
        },
        Row {
            says: "id recorded, retrieve rate limited: status kept, message retried",
            found: recorded(2),
            input: fails(retry(RetryCause::RateLimited)),
            now: T0.plus(HOUR),
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("retry later"),
                next_look: Some(T0.plus(HOUR + MIN)),
            },
            then: Then {
                calls: "retrieve",
                means: Retry(RetryCause::RateLimited),
            },
        },
        Row {
            says: "id recorded, retrieve times out: status kept, back off",
            found: recorded(2),
            input: fails(timeout()),
            now: T0.plus(HOUR),
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("outcome unknown: timed out"),
                next_look: Some(T0.plus(HOUR + 2 * MIN)),
            },
            then: Then {
                calls: "retrieve",
                means: Scheduled,
            },
        },
        Row {
            says: "id recorded, Stripe does not know it (404): review",
            found: recorded(2),
            input: fails(rejected()),
            now: T0.plus(HOUR),
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("retrieve of pi_1 failed: request rejected"),
                next_look: Some(T0.plus(HOUR)),
            },
            then: Then {
                calls: "retrieve",
                means: Review(ReviewClass::RetrieveFailed),
            },
        },
        Row {
            says: "id recorded, retrieve answers 402: review",
            found: recorded(2),
            input: fails(declined(pi_1)),
            now: T0.plus(HOUR),
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("retrieve of pi_1 failed: declined"),
                next_look: Some(T0.plus(HOUR)),
            },
            then: Then {
                calls: "retrieve",
                means: Review(ReviewClass::RetrieveFailed),
            },
        },
        Row {
            says: "id recorded, retrieve answers idempotency_error: review",
            found: recorded(2),
            input: fails(misuse()),
            now: T0.plus(HOUR),
            next: Next {
                status: Unknown,
                intent: None,
                error: Some("retrieve of pi_1 failed: idempotency key misuse"),
                next_look: Some(T0.plus(HOUR)),
            },
            then: Then {
                calls: "retrieve",
                means: Review(ReviewClass::RetrieveFailed),
            },
        },
    ]
}

/// Every (record as claimed, time against the key window, Stripe's answer) of the charge
/// executor: the step it takes and the next record (status, the PaymentIntent id recorded,
/// a part of the error recorded, the next look) with what it means for the message.
#[test]
fn charge_table() {
    let policy = Policy::default(); // window 23 h, search 10 min after, stuck at 72 h
    let cases = table(&policy);
    // Every row is checked and every wrong one named, so a broken arm shows all it breaks.
    let mut wrong = Vec::new();
    for row in cases {
        let Row {
            says: spec,
            found: op,
            input: answers,
            now,
            next:
                Next {
                    status,
                    intent: external_id,
                    error,
                    next_look: due,
                },
            then: Then {
                calls: step,
                means: want,
            },
        } = row;
        let took = next_step(&op, now, &policy);
        if !step.starts_with(took.name()) {
            wrong.push(format!("{spec}: step {}, wanted {step}", took.name()));
            continue;
        }
        let (d, calls) = decide(&op, &took, now, answers, &policy);
        if calls != step {
            wrong.push(format!("{spec}: calls {calls}, wanted {step}"));
            continue;
        }
        let error_ok = match (error, &d.last_error) {
            (None, None) => true,
            (Some(part), Some(got)) => got.contains(part),
            _ => false,
        };
        let got = (d.status, d.external_id.as_deref(), d.next_due_at, means(&d));
        if got != (status, external_id, due, want) || !error_ok {
            wrong.push(format!(
                "{spec}:\n    got  {got:?}, error {:?}\n    want {:?}, error containing {error:?}",
                d.last_error,
                (status, external_id, due, want)
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} rows wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// The name of each thing a charge decision can mean for its message (a review by its class).
fn variant(means: &Means) -> &'static str {
    match means {
        Means::Settled => "Settled",
        Means::Scheduled => "Scheduled",
        Means::Retry(_) => "Retry",
        Means::Review(class) => match class {
            ReviewClass::KeyMisuse => "Review(KeyMisuse)",
            ReviewClass::Rejected => "Review(Rejected)",
            ReviewClass::RetrieveFailed => "Review(RetrieveFailed)",
            ReviewClass::SearchAmbiguous => "Review(SearchAmbiguous)",
            ReviewClass::SearchFailed => "Review(SearchFailed)",
            ReviewClass::StuckRequiresAction => "Review(StuckRequiresAction)",
            ReviewClass::StuckProcessing => "Review(StuckProcessing)",
            ReviewClass::IntentMismatch => "Review(IntentMismatch)",
            ReviewClass::CancelFailed => "Review(CancelFailed)",
            // Other kinds' classes, and the events plan's: the charge plan never gives them.
            ReviewClass::SecondPaymentIntent
            | ReviewClass::RefundMismatch
            | ReviewClass::RefundListAmbiguous
            | ReviewClass::StuckRefund
            | ReviewClass::TakeRefused
            | ReviewClass::DisputeUnreserved => "Review(not the charge plan's)",
        },
    }
}

const MEANINGS: &[&str] = &[
    "Settled",
    "Scheduled",
    "Retry",
    "Review(KeyMisuse)",
    "Review(Rejected)",
    "Review(RetrieveFailed)",
    "Review(SearchAmbiguous)",
    "Review(SearchFailed)",
    "Review(StuckRequiresAction)",
    "Review(StuckProcessing)",
    "Review(IntentMismatch)",
    "Review(CancelFailed)",
];

#[test]
fn every_outcome_has_a_row() {
    let rows = table(&Policy::default());
    spec::covers(
        "the charge plan",
        rows.iter().map(|row| row.then.means),
        MEANINGS,
        variant,
    );
}

/// The twin: a table without its stuck rows is caught, by name.
#[test]
fn a_table_missing_an_outcome_is_caught() {
    let rows = table(&Policy::default());
    let means = rows.iter().map(|row| row.then.means).filter(|means| {
        !matches!(
            means,
            Means::Review(ReviewClass::StuckProcessing | ReviewClass::StuckRequiresAction)
        )
    });
    assert_eq!(
        spec::uncovered(means, MEANINGS, variant),
        ["Review(StuckProcessing)", "Review(StuckRequiresAction)"]
    );
}

/// (the operation, Stripe's intent and whether our key is live) → the first fact that says the
/// intent is not the operation's, if any.
type MismatchRow = Row<Operation, Asked, (), Option<Mismatch>, ()>;

/// Stripe's PaymentIntent, and whether the key that read it is a live one.
struct Asked {
    intent: PaymentIntent,
    live_key: bool,
}

/// `value` with `edit` made to it.
fn edited<T>(mut value: T, edit: impl FnOnce(&mut T)) -> T {
    edit(&mut value);
    value
}

fn mismatch_rows() -> Vec<MismatchRow> {
    let op = testing::order("order-1").build();
    let ours = || PaymentIntent {
        amount: Some(1250),
        currency: Some("usd".into()),
        operation_id: Some(op.operation_id.to_string()),
        order_id: Some("order-1".into()),
        livemode: Some(false),
        ..PaymentIntent::new(PaymentIntentId::parse("pi_1").unwrap(), Pi::Succeeded)
    };
    vec![
        Row {
            says: "ours",
            found: op.clone(),
            input: Asked {
                intent: ours(),
                live_key: false,
            },
            now: (),
            next: (),
            then: None,
        },
        Row {
            says: "ours, live key and intent",
            found: op.clone(),
            input: Asked {
                intent: edited(ours(), |p| p.livemode = Some(true)),
                live_key: true,
            },
            now: (),
            next: (),
            then: None,
        },
        Row {
            says: "an older release's intent: no order_id",
            found: op.clone(),
            input: Asked {
                intent: edited(ours(), |p| p.order_id = None),
                live_key: false,
            },
            now: (),
            next: (),
            then: None,
        },
        Row {
            says: "other operation",
            found: op.clone(),
            input: Asked {
                intent: edited(ours(), |p| p.operation_id = Some("x".into())),
                live_key: false,
            },
            now: (),
            next: (),
            then: Some(Mismatch::OperationId),
        },
        Row {
            says: "no operation id",
            found: op.clone(),
            input: Asked {
                intent: edited(ours(), |p| p.operation_id = None),
                live_key: false,
            },
            now: (),
            next: (),
            then: Some(Mismatch::OperationId),
        },
        Row {
            says: "other order",
            found: op.clone(),
            input: Asked {
                intent: edited(ours(), |p| p.order_id = Some("order-2".into())),
                live_key: false,
            },
            now: (),
            next: (),
            then: Some(Mismatch::OrderId),
        },
        Row {
            says: "other amount",
            found: op.clone(),
            input: Asked {
                intent: edited(ours(), |p| p.amount = Some(1251)),
                live_key: false,
            },
            now: (),
            next: (),
            then: Some(Mismatch::Amount),
        },
        Row {
            says: "no amount",
            found: op.clone(),
            input: Asked {
                intent: edited(ours(), |p| p.amount = None),
                live_key: false,
            },
            now: (),
            next: (),
            then: Some(Mismatch::Amount),
        },
        Row {
            says: "other currency",
            found: op.clone(),
            input: Asked {
                intent: edited(ours(), |p| p.currency = Some("eur".into())),
                live_key: false,
            },
            now: (),
            next: (),
            then: Some(Mismatch::Currency),
        },
        Row {
            says: "live intent, test key",
            found: op.clone(),
            input: Asked {
                intent: edited(ours(), |p| p.livemode = Some(true)),
                live_key: false,
            },
            now: (),
            next: (),
            then: Some(Mismatch::Livemode),
        },
        Row {
            says: "mode unknown",
            found: op.clone(),
            input: Asked {
                intent: edited(ours(), |p| p.livemode = None),
                live_key: false,
            },
            now: (),
            next: (),
            then: Some(Mismatch::Livemode),
        },
    ]
}

#[test]
fn an_intent_is_the_operations_only_when_every_fact_agrees() {
    let rows = mismatch_rows();
    spec::holds(&rows, |op, asked, ()| {
        ((), intent_mismatch(op, &asked.intent, asked.live_key))
    });
    let facts = rows.iter().map(|row| row.then);
    spec::covers("intent_mismatch", facts, MISMATCHES, mismatch);
}

fn mismatch(m: &Option<Mismatch>) -> &'static str {
    match m {
        None => "None",
        Some(Mismatch::OperationId) => "OperationId",
        Some(Mismatch::OrderId) => "OrderId",
        Some(Mismatch::Amount) => "Amount",
        Some(Mismatch::Currency) => "Currency",
        Some(Mismatch::Livemode) => "Livemode",
    }
}

const MISMATCHES: &[&str] = &[
    "None",
    "OperationId",
    "OrderId",
    "Amount",
    "Currency",
    "Livemode",
];

/// The twin: a table without a currency row is caught, by name.
#[test]
fn a_mismatch_table_missing_a_fact_is_caught() {
    let facts = mismatch_rows()
        .into_iter()
        .map(|row| row.then)
        .filter(|m| *m != Some(Mismatch::Currency));
    assert_eq!(spec::uncovered(facts, MISMATCHES, mismatch), ["Currency"]);
}
