//! The specification of a capture or a cancel ([`charge_core::take::plan`]): the operation as
//! claimed (a capture of 600 or a cancel of a 1000 usd authorization, at its attempt), Stripe's
//! answers to the calls made in order → the status recorded, the calls made and how the
//! charge's authorization ends. Act first, read before any retry, and a refusal for the intent's
//! state is read, never believed.

mod spec;

use std::time::Duration;

use charge_core::charge::state::Taker;
use charge_core::operation::Operation;
use charge_core::operation::OperationStatus::{
    self, Authorized, Failed, Pending, Succeeded, Unknown,
};
use charge_core::outcome::{GatewayError, PaymentIntent, PaymentIntentStatus, RetryCause};
use charge_core::plan::Policy;
use charge_core::store::AuthorizationOutcome;
use charge_core::take::plan::{after_act, after_retrieve, next_step, TakeDecision, TakeStep};
use charge_core::take::{take, TakeRequest};
use charge_core::testing::{order, T0};
use charge_core::{
    domain::{Amount, OperationId, PaymentIntentId, Principal},
    take::request::{CancelRequest, CaptureRequest},
};
use spec::Row;

/// (the capture or cancel as claimed, Stripe's answers to the calls made) → the status recorded
/// and what happens.
type TakeRow = Row<Operation, Vec<Result<PaymentIntent, GatewayError>>, OperationStatus, Then, ()>;

/// What happens: the calls made, in order, and how the charge's authorization ends (`None`: it
/// does not end yet).
#[derive(Debug, PartialEq)]
struct Then {
    calls: &'static str,
    end: Option<AuthorizationOutcome>,
}

fn capture(attempt: u32) -> Operation {
    claimed(true, attempt)
}

fn cancel(attempt: u32) -> Operation {
    claimed(false, attempt)
}

fn end(end: &Option<AuthorizationOutcome>) -> &'static str {
    match end {
        None => "None",
        Some(AuthorizationOutcome::Captured(_)) => "Captured",
        Some(AuthorizationOutcome::Canceled) => "Canceled",
        Some(AuthorizationOutcome::Expired) => "Expired",
        Some(AuthorizationOutcome::GivenBack) => "GivenBack",
    }
}

const ENDS: &[&str] = &["None", "Captured", "Canceled", "Expired", "GivenBack"];

fn covers_every_end(rows: &[TakeRow]) {
    spec::covers(
        "the take plan",
        rows.iter().map(|row| row.then.end),
        ENDS,
        end,
    );
}

/// The twin: a table without a capture is caught, by name.
#[test]
fn a_table_missing_an_end_is_caught() {
    let ends = [
        None,
        Some(AuthorizationOutcome::Canceled),
        Some(AuthorizationOutcome::Expired),
        Some(AuthorizationOutcome::GivenBack),
    ];
    assert_eq!(spec::uncovered(ends, ENDS, end), ["Captured"]);
}

/// A 1000 usd authorization (`pi_a`), as the door reads it.
fn authorization() -> Operation {
    let mut op = order("ord-tp")
        .manual()
        .amount(1000)
        .status(Authorized)
        .external_id("pi_a")
        .build();
    op.params.charge_state_mut().unwrap().capture_before =
        Some(T0.plus(Duration::from_secs(7 * 24 * 3600)));
    op
}

/// A capture (of 600) or a cancel of it, claimed for its `attempt`-th time.
fn claimed(capture: bool, attempt: u32) -> Operation {
    let request = if capture {
        TakeRequest::Capture(CaptureRequest {
            amount: Some(Amount::new(600).unwrap()),
        })
    } else {
        TakeRequest::Cancel(CancelRequest::default())
    };
    let operation_id = OperationId::new_random();
    let taker = Taker {
        capture,
        operation_id,
    };
    let taking = take(&authorization(), &request, taker, T0).unwrap();
    let mut op = Operation::new_taking(
        authorization().order_id,
        request.kind(),
        request.fingerprint(),
        taking.params,
        Principal::jwt("shop").unwrap(),
        T0,
        Duration::from_secs(300),
    );
    op.operation_id = operation_id;
    op.attempts = attempt;
    op.first_attempted_at = Some(T0);
    op.status = if attempt > 1 { Unknown } else { Pending };
    op
}

fn intent(status: &str, reason: Option<&str>) -> PaymentIntent {
    let mut pi = PaymentIntent::new(
        PaymentIntentId::parse("pi_a").unwrap(),
        PaymentIntentStatus::parse(status),
    );
    pi.amount = Some(1000);
    pi.amount_received = (status == "succeeded").then_some(600);
    pi.cancellation_reason = reason.map(str::to_owned);
    pi
}

fn unexpected() -> GatewayError {
    GatewayError::UnexpectedState {
        detail: "payment_intent_unexpected_state".into(),
    }
}

/// Stripe's 400 for what was asked, not for the intent's state.
fn invalid(code: &str) -> GatewayError {
    GatewayError::Rejected {
        detail: code.into(),
        param: Some("amount_to_capture".into()),
    }
}

/// Stripe's 402 at capture.
fn declined() -> GatewayError {
    GatewayError::Declined {
        code: "card_declined".into(),
        payment_intent_id: None,
    }
}

fn timeout() -> GatewayError {
    GatewayError::Ambiguous {
        detail: "timeout".into(),
    }
}

/// Runs the plan as the executor's shell does: the step, then every call a decision asks for.
fn run(
    op: &Operation,
    answers: Vec<Result<PaymentIntent, GatewayError>>,
) -> (String, TakeDecision) {
    let policy = Policy::default();
    let mut answers = answers.into_iter();
    let mut calls = Vec::new();
    let mut step = next_step(op);
    loop {
        calls.push(step.name(&op.kind));
        let answer = answers.next().expect("an answer for every call");
        let mut d = match step {
            TakeStep::Act(_) => after_act(op, answer, T0, &policy),
            TakeStep::Retrieve(_) => after_retrieve(op, answer, T0, &policy),
            TakeStep::Nothing => unreachable!("every fixture has an intent"),
        };
        match d.then.take() {
            Some(next) if calls.len() < 3 => step = next,
            _ => {
                assert!(answers.next().is_none(), "an answer for a call not made");
                return (calls.join(", "), d);
            }
        }
    }
}

#[test]
fn take_table() {
    let captured = Some(AuthorizationOutcome::Captured(Amount::new(600).unwrap()));
    let rows: Vec<TakeRow> = vec![
        Row {
            says: "first capture, captured",
            found: capture(1),
            input: vec![Ok(intent("succeeded", None))],
            now: (),
            next: Succeeded,
            then: Then {
                calls: "capture",
                end: captured,
            },
        },
        Row {
            says: "first capture, answer lost: unknown, the next attempt reads first",
            found: capture(1),
            input: vec![Err(timeout())],
            now: (),
            next: Unknown,
            then: Then {
                calls: "capture",
                end: None,
            },
        },
        Row {
            says: "a later attempt reads first; captured already: settled, no second capture",
            found: capture(2),
            input: vec![Ok(intent("succeeded", None))],
            now: (),
            next: Succeeded,
            then: Then {
                calls: "retrieve",
                end: captured,
            },
        },
        Row {
            says: "a later attempt reads first; still capturable: captures",
            found: capture(2),
            input: vec![
                Ok(intent("requires_capture", None)),
                Ok(intent("succeeded", None)),
            ],
            now: (),
            next: Succeeded,
            then: Then {
                calls: "retrieve, capture",
                end: captured,
            },
        },
        Row {
            says: "the replayed refusal is never believed: read, and Stripe holds it captured",
            found: capture(1),
            input: vec![Err(unexpected()), Ok(intent("succeeded", None))],
            now: (),
            next: Succeeded,
            then: Then {
                calls: "capture, retrieve",
                end: captured,
            },
        },
        Row {
            says: "the hold lapsed before the capture: failed, the charge expired",
            found: capture(1),
            input: vec![Err(unexpected()), Ok(intent("canceled", Some("automatic")))],
            now: (),
            next: Failed,
            then: Then {
                calls: "capture, retrieve",
                end: Some(AuthorizationOutcome::Expired),
            },
        },
        Row {
            says: "the hold lapsed before the capture, in the current version's word: the same",
            found: capture(1),
            input: vec![Err(unexpected()), Ok(intent("canceled", Some("expired")))],
            now: (),
            next: Failed,
            then: Then {
                calls: "capture, retrieve",
                end: Some(AuthorizationOutcome::Expired),
            },
        },
        Row {
            says: "canceled by someone else first: failed, the charge canceled",
            found: capture(2),
            input: vec![Ok(intent("canceled", Some("requested_by_customer")))],
            now: (),
            next: Failed,
            then: Then {
                calls: "retrieve",
                end: Some(AuthorizationOutcome::Canceled),
            },
        },
        Row {
            says: "429: nothing happened, retried, the charge still taken",
            found: capture(1),
            input: vec![Err(GatewayError::RetryLater {
                cause: RetryCause::RateLimited,
                detail: "429".into(),
            })],
            now: (),
            next: Pending,
            then: Then {
                calls: "capture",
                end: None,
            },
        },
        Row {
            says: "first cancel, canceled",
            found: cancel(1),
            input: vec![Ok(intent("canceled", Some("requested_by_customer")))],
            now: (),
            next: Succeeded,
            then: Then {
                calls: "cancel",
                end: Some(AuthorizationOutcome::Canceled),
            },
        },
        Row {
            says: "a later cancel reads first; lapsed meanwhile: done, the charge expired",
            found: cancel(3),
            input: vec![Ok(intent("canceled", Some("automatic")))],
            now: (),
            next: Succeeded,
            then: Then {
                calls: "retrieve",
                end: Some(AuthorizationOutcome::Expired),
            },
        },
        Row {
            says: "lapsed meanwhile, in the current version's word: done, the charge expired",
            found: cancel(3),
            input: vec![Ok(intent("canceled", Some("expired")))],
            now: (),
            next: Succeeded,
            then: Then {
                calls: "retrieve",
                end: Some(AuthorizationOutcome::Expired),
            },
        },
        Row {
            says: "a cancel that finds it captured (by someone else): failed, the charge records the capture Stripe holds",
            found: cancel(1),
            input: vec![Err(unexpected()), Ok(intent("succeeded", None))],
            now: (),
            next: Failed,
            then: Then {
                calls: "cancel, retrieve",
                end: captured,
            },
        },
        Row {
            says: "capture refused 400 amount_too_small: failed, nothing taken, the charge given back",
            found: capture(1),
            input: vec![Err(invalid("amount_too_small"))],
            now: (),
            next: Failed,
            then: Then {
                calls: "capture",
                end: Some(AuthorizationOutcome::GivenBack),
            },
        },
        Row {
            says: "capture refused 402 at Stripe: failed, the charge given back",
            found: capture(1),
            input: vec![Err(declined())],
            now: (),
            next: Failed,
            then: Then {
                calls: "capture",
                end: Some(AuthorizationOutcome::GivenBack),
            },
        },
        Row {
            says: "a later capture reads first, still held, then refused 400: the charge given back",
            found: capture(2),
            input: vec![
                Ok(intent("requires_capture", None)),
                Err(invalid("parameter_invalid_integer")),
            ],
            now: (),
            next: Failed,
            then: Then {
                calls: "retrieve, capture",
                end: Some(AuthorizationOutcome::GivenBack),
            },
        },
        Row {
            says: "a cancel refused 400 (not for the state): failed, the charge given back",
            found: cancel(1),
            input: vec![Err(invalid("resource_missing"))],
            now: (),
            next: Failed,
            then: Then {
                calls: "cancel",
                end: Some(AuthorizationOutcome::GivenBack),
            },
        },
        Row {
            says: "a refused read says nothing of an earlier attempt: a person looks, the charge left taken",
            found: capture(2),
            input: vec![Err(invalid("resource_missing"))],
            now: (),
            next: Unknown,
            then: Then {
                calls: "retrieve",
                end: None,
            },
        },
        Row {
            says: "the key used with other parameters (a bug): a person looks, the charge left taken",
            found: capture(1),
            input: vec![Err(GatewayError::KeyMisuse {
                detail: "idempotency_error".into(),
            })],
            now: (),
            next: Pending,
            then: Then {
                calls: "capture",
                end: None,
            },
        },
        Row {
            says: "a later cancel reads first; still held: cancels",
            found: cancel(2),
            input: vec![
                Ok(intent("requires_capture", None)),
                Ok(intent("canceled", None)),
            ],
            now: (),
            next: Succeeded,
            then: Then {
                calls: "retrieve, cancel",
                end: Some(AuthorizationOutcome::Canceled),
            },
        },
    ];
    spec::holds(&rows, |op, answers, ()| {
        let (calls, d) = run(op, answers.clone());
        assert_eq!(
            d.decision.next_due_at.is_none(),
            d.decision.status.is_settled(),
            "due exactly while unsettled"
        );
        let end = d.authorization;
        (
            d.decision.status,
            Then {
                calls: Box::leak(calls.into_boxed_str()),
                end,
            },
        )
    });
    covers_every_end(&rows);
}

/// A cancel that finds the intent captured (by someone else) can never take effect: it fails,
/// saying why, and the charge records what Stripe captured (`amount_received`, not what the
/// cancel would have released); its twin, a capture reading the same intent, succeeds.
#[test]
fn a_cancel_over_a_captured_intent_records_what_stripe_took() {
    let (_, d) = run(&claimed(false, 2), vec![Ok(intent("succeeded", None))]);
    assert_eq!(d.decision.status, Failed);
    assert!(d.decision.review.is_none());
    assert!(
        d.decision
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("is captured: it cannot be canceled")),
        "{d:?}"
    );
    assert_eq!(
        d.authorization,
        Some(AuthorizationOutcome::Captured(Amount::new(600).unwrap()))
    );
    let (_, d) = run(&claimed(true, 2), vec![Ok(intent("succeeded", None))]);
    assert!(d.decision.review.is_none());
    assert_eq!(d.decision.status, Succeeded);
}

/// A capture refused for what it asked says why, with Stripe's code, and gives the charge back;
/// its twin, refused for the intent's state, reads the intent and gives nothing back.
#[test]
fn a_refused_capture_says_why_and_gives_the_charge_back() {
    let (_, d) = run(&claimed(true, 1), vec![Err(invalid("amount_too_small"))]);
    let why = d.decision.last_error.clone().unwrap_or_default();
    assert!(why.starts_with("take_refused: "), "{why}");
    assert!(why.contains("amount_too_small"), "{why}");
    assert!(why.contains("given back"), "{why}");
    assert_eq!(d.authorization, Some(AuthorizationOutcome::GivenBack));
    assert!(d.decision.review.is_none() && d.decision.next_due_at.is_none());

    let (calls, d) = run(
        &claimed(true, 1),
        vec![
            Err(unexpected()),
            Ok(intent("requires_capture", None)),
            Err(unexpected()),
        ],
    );
    assert_eq!(calls, "capture, retrieve, capture");
    assert_eq!(d.authorization, None);
    assert_eq!(d.decision.status, Unknown);
}

/// An intent that is not the one the capture takes settles nothing.
#[test]
fn another_intent_settles_nothing() {
    let mut other = intent("succeeded", None);
    other.id = PaymentIntentId::parse("pi_other").unwrap();
    let (_, d) = run(&claimed(true, 2), vec![Ok(other)]);
    assert_eq!(d.authorization, None);
    assert!(d.decision.review.is_some());
}
