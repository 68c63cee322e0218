//! Captures and cancels of an authorization as pure functions of (record, Stripe's answer, now):
//! what a capture or cancel operation does next and what each answer means, read as its table
//! (`take_table` below).
//!
//! A capture or a cancel "takes" its order's charge: the door's write names it on the charge
//! record (`taken_by`), so the other is refused by the store. It then runs on the executor's shell
//! (claim → act → fenced record) with its own steps:
//! - the first attempt → **act**: capture (`capture-op:<operation_id>`) or cancel
//!   (`cancel-op:<operation_id>`) the charge's PaymentIntent;
//! - any later attempt → **retrieve first**: a capture whose answer was lost replays that answer
//!   under its key (an error too, until the key expires), and a fresh attempt on a captured intent
//!   is refused as `payment_intent_unexpected_state`; neither says what happened, the intent
//!   does. Still capturable (or cancelable): act again, under the same key.
//! - a refusal for the intent's state → **retrieve**, and settle by what Stripe holds.
//!
//! A capture never repeats at Stripe (an intent is captured once; the second is refused), so
//! acting again after a read that shows it uncaptured cannot take money twice.
//!
//! The outcome ends the charge's authorization in the same write ([`AuthorizationOutcome`]):
//! captured (the charge `succeeded`, with the amount taken), canceled, or lapsed (Stripe canceled
//! the hold at its deadline: `failed`). A refusal a person must look at leaves the charge taken.

use crate::domain::{Amount, OperationKind, PaymentIntentId};
use crate::operation::{Operation, OperationStatus};
use crate::outcome::{GatewayError, PaymentIntent, PaymentIntentStatus};
use crate::plan::{unknown_due_at, Decision, Policy, ReviewClass};
use crate::store::AuthorizationOutcome;
use crate::time::Timestamp;

/// What to do with a claimed capture or cancel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeStep {
    /// Capture or cancel the intent (the first attempt, or after a read that shows it still
    /// takes one).
    Act(PaymentIntentId),
    /// Read the intent before acting again.
    Retrieve(PaymentIntentId),
    /// Nothing at Stripe to act on (a cancel of a charge never sent is settled at the door).
    Nothing,
}

impl TakeStep {
    pub fn name(&self, kind: &OperationKind) -> &'static str {
        match (self, kind) {
            (TakeStep::Act(_), OperationKind::Capture) => "capture",
            (TakeStep::Act(_), _) => "cancel",
            (TakeStep::Retrieve(_), _) => "retrieve",
            (TakeStep::Nothing, _) => "nothing",
        }
    }
}

/// The next record for a capture or cancel: the engine's [`Decision`], the end of the
/// charge's authorization to write with it, and the call to make first, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeDecision {
    pub decision: Decision,
    /// Written on the charge in the same write (`None`: the charge stays as it is, taken).
    pub authorization: Option<AuthorizationOutcome>,
    /// A call to make before recording ([`TakeStep::Act`] after a read, [`TakeStep::Retrieve`]
    /// after a refusal for the intent's state); `decision` is what stands if it is never made.
    pub then: Option<TakeStep>,
}

impl TakeDecision {
    fn of(decision: Decision) -> Self {
        Self {
            decision,
            authorization: None,
            then: None,
        }
    }
}

/// Decides the step for a capture or cancel we hold the lease on (the claim counted this attempt).
pub fn next_step(op: &Operation) -> TakeStep {
    match op.params.payment_intent() {
        None => TakeStep::Nothing,
        Some(id) if op.attempts <= 1 => TakeStep::Act(id.clone()),
        Some(id) => TakeStep::Retrieve(id.clone()),
    }
}

/// A capture or cancel with nothing at Stripe to act on reached the shell (a cancel of a charge
/// never sent is settled by the door's write, so this is a record edited by hand): a person looks.
pub fn nothing_to_act_on(op: &Operation, now: Timestamp) -> TakeDecision {
    let reason = format!(
        "{}: a {} without a payment intent to act on",
        ReviewClass::TakeRefused.as_str(),
        op.kind.as_str()
    );
    TakeDecision::of(Decision::review(
        op.status,
        reason,
        ReviewClass::TakeRefused,
        now,
    ))
}

/// After the capture or cancel call.
pub fn after_act(
    op: &Operation,
    result: Result<PaymentIntent, GatewayError>,
    now: Timestamp,
    policy: &Policy,
) -> TakeDecision {
    match result {
        Ok(pi) => from_intent(op, pi, true, now, policy),
        // The intent is not where the call needs it: what it is decides, never the refusal.
        Err(GatewayError::UnexpectedState { detail }) => {
            let id = op.params.payment_intent().cloned();
            TakeDecision {
                then: id.map(TakeStep::Retrieve),
                ..TakeDecision::of(unknown(op, format!("refused: {detail}"), now, policy))
            }
        }
        Err(err) => after_error(op, err, ReviewClass::TakeRefused, now, policy),
    }
}

/// After reading the intent.
pub fn after_retrieve(
    op: &Operation,
    result: Result<PaymentIntent, GatewayError>,
    now: Timestamp,
    policy: &Policy,
) -> TakeDecision {
    match result {
        Ok(pi) => from_intent(op, pi, false, now, policy),
        Err(err) => after_error(op, err, ReviewClass::RetrieveFailed, now, policy),
    }
}

/// A call that did not answer with the intent: nothing happened (429: as it was, the message
/// retried), may have happened (timeout, 5xx: unknown, the next attempt reads first), or was
/// refused for a reason a person must see (the charge stays taken).
fn after_error(
    op: &Operation,
    err: GatewayError,
    class: ReviewClass,
    now: Timestamp,
    policy: &Policy,
) -> TakeDecision {
    let decision = match &err {
        GatewayError::RetryLater { cause, .. } => Decision {
            status: op.status,
            retry: Some(*cause),
            next_due_at: Some(now.plus(policy.retry_after)),
            ..unknown(op, err.to_string(), now, policy)
        },
        GatewayError::Ambiguous { .. } => unknown(op, err.to_string(), now, policy),
        _ => {
            let class = match err {
                GatewayError::KeyMisuse { .. } => ReviewClass::KeyMisuse,
                _ => class,
            };
            let reason = format!("{}: {} {}", class.as_str(), op.kind.as_str(), err);
            Decision::review(op.status, reason, class, now)
        }
    };
    TakeDecision::of(decision)
}

/// What the intent Stripe answered with means for the operation: checked to be its charge's,
/// then the capture's or cancel's end.
fn from_intent(
    op: &Operation,
    pi: PaymentIntent,
    acted: bool,
    now: Timestamp,
    policy: &Policy,
) -> TakeDecision {
    if op.params.payment_intent() != Some(&pi.id) {
        let reason = format!(
            "{}: payment intent {} is not the one this {} takes",
            ReviewClass::IntentMismatch.as_str(),
            pi.id,
            op.kind.as_str()
        );
        let d = Decision::review(op.status, reason, ReviewClass::IntentMismatch, now);
        return TakeDecision::of(d);
    }
    let lapsed = pi.cancellation_reason.as_deref() == Some("automatic");
    let canceled_end = if lapsed {
        AuthorizationOutcome::Expired
    } else {
        AuthorizationOutcome::Canceled
    };
    let capture = op.kind == OperationKind::Capture;
    match (&pi.status, capture) {
        (PaymentIntentStatus::Succeeded, true) => {
            let taken = pi
                .amount_received
                .and_then(|a| Amount::new(a).ok())
                .unwrap_or_else(|| op.params.amount());
            settled(
                OperationStatus::Succeeded,
                None,
                AuthorizationOutcome::Captured(taken),
            )
        }
        (PaymentIntentStatus::Canceled, true) => {
            let why = if lapsed {
                "the authorization lapsed before it was captured"
            } else {
                "the authorization was canceled before it was captured"
            };
            settled(OperationStatus::Failed, Some(why), canceled_end)
        }
        (PaymentIntentStatus::Canceled, false) => {
            settled(OperationStatus::Succeeded, None, canceled_end)
        }
        (PaymentIntentStatus::Succeeded, false) => {
            let reason = format!(
                "{}: payment intent {} is captured: it cannot be canceled; refund it instead",
                ReviewClass::TakeRefused.as_str(),
                pi.id
            );
            let d = Decision::review(op.status, reason, ReviewClass::TakeRefused, now);
            TakeDecision::of(d)
        }
        (status, _) if !acted && still_takes(status, capture) => TakeDecision {
            then: Some(TakeStep::Act(pi.id.clone())),
            ..TakeDecision::of(unknown(op, format!("payment intent {status}"), now, policy))
        },
        (status, _) => {
            TakeDecision::of(unknown(op, format!("payment intent {status}"), now, policy))
        }
    }
}

/// Whether the intent, in `status`, is still one the capture (or cancel) can act on.
fn still_takes(status: &PaymentIntentStatus, capture: bool) -> bool {
    match status {
        PaymentIntentStatus::RequiresCapture => true,
        PaymentIntentStatus::RequiresPaymentMethod
        | PaymentIntentStatus::RequiresConfirmation
        | PaymentIntentStatus::RequiresAction => !capture,
        _ => false,
    }
}

fn settled(
    status: OperationStatus,
    error: Option<&str>,
    end: AuthorizationOutcome,
) -> TakeDecision {
    TakeDecision {
        decision: Decision {
            status,
            external_id: None,
            last_error: error.map(str::to_owned),
            review: None,
            next_due_at: None,
            retry: None,
            then: None,
            authorization: None,
        },
        authorization: Some(end),
        then: None,
    }
}

/// Unknown (it may have happened), looked at again on the back-off: the next attempt reads first.
fn unknown(op: &Operation, error: String, now: Timestamp, policy: &Policy) -> Decision {
    Decision {
        status: OperationStatus::Unknown,
        external_id: None,
        last_error: Some(error),
        review: None,
        next_due_at: Some(unknown_due_at(op, now, policy)),
        retry: None,
        then: None,
        authorization: None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::charge::state::Taker;
    use crate::domain::{CancelRequest, CaptureRequest};
    use crate::operation::OperationStatus::{Authorized, Failed, Pending, Succeeded, Unknown};
    use crate::outcome::RetryCause;
    use crate::take::{take, TakeRequest};
    use crate::testing::{order, T0};

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
        let operation_id = crate::domain::OperationId::new_random();
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
            crate::domain::Principal::jwt("shop").unwrap(),
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

    fn timeout() -> GatewayError {
        GatewayError::Ambiguous {
            detail: "timeout".into(),
        }
    }

    /// One line of the specification: (capture or cancel, its attempt, Stripe's answers to the
    /// calls made in order) → (the calls, the status recorded, the end of the authorization).
    struct Row {
        says: &'static str,
        capture: bool,
        attempt: u32,
        answers: Vec<Result<PaymentIntent, GatewayError>>,
        calls: &'static str,
        status: OperationStatus,
        end: Option<AuthorizationOutcome>,
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
        let rows = [
            Row {
                says: "first capture, captured",
                capture: true,
                attempt: 1,
                answers: vec![Ok(intent("succeeded", None))],
                calls: "capture",
                status: Succeeded,
                end: captured,
            },
            Row {
                says: "first capture, answer lost: unknown, the next attempt reads first",
                capture: true,
                attempt: 1,
                answers: vec![Err(timeout())],
                calls: "capture",
                status: Unknown,
                end: None,
            },
            Row {
                says: "a later attempt reads first; captured already: settled, no second capture",
                capture: true,
                attempt: 2,
                answers: vec![Ok(intent("succeeded", None))],
                calls: "retrieve",
                status: Succeeded,
                end: captured,
            },
            Row {
                says: "a later attempt reads first; still capturable: captures",
                capture: true,
                attempt: 2,
                answers: vec![
                    Ok(intent("requires_capture", None)),
                    Ok(intent("succeeded", None)),
                ],
                calls: "retrieve, capture",
                status: Succeeded,
                end: captured,
            },
            Row {
                says: "the replayed refusal is never believed: read, and Stripe holds it captured",
                capture: true,
                attempt: 1,
                answers: vec![Err(unexpected()), Ok(intent("succeeded", None))],
                calls: "capture, retrieve",
                status: Succeeded,
                end: captured,
            },
            Row {
                says: "the hold lapsed before the capture: failed, the charge expired",
                capture: true,
                attempt: 1,
                answers: vec![Err(unexpected()), Ok(intent("canceled", Some("automatic")))],
                calls: "capture, retrieve",
                status: Failed,
                end: Some(AuthorizationOutcome::Expired),
            },
            Row {
                says: "canceled by someone else first: failed, the charge canceled",
                capture: true,
                attempt: 2,
                answers: vec![Ok(intent("canceled", Some("requested_by_customer")))],
                calls: "retrieve",
                status: Failed,
                end: Some(AuthorizationOutcome::Canceled),
            },
            Row {
                says: "429: nothing happened, retried, the charge still taken",
                capture: true,
                attempt: 1,
                answers: vec![Err(GatewayError::RetryLater {
                    cause: RetryCause::RateLimited,
                    detail: "429".into(),
                })],
                calls: "capture",
                status: Pending,
                end: None,
            },
            Row {
                says: "first cancel, canceled",
                capture: false,
                attempt: 1,
                answers: vec![Ok(intent("canceled", Some("requested_by_customer")))],
                calls: "cancel",
                status: Succeeded,
                end: Some(AuthorizationOutcome::Canceled),
            },
            Row {
                says: "a later cancel reads first; lapsed meanwhile: done, the charge expired",
                capture: false,
                attempt: 3,
                answers: vec![Ok(intent("canceled", Some("automatic")))],
                calls: "retrieve",
                status: Succeeded,
                end: Some(AuthorizationOutcome::Expired),
            },
            Row {
                says: "a cancel that finds it captured: a person looks, the charge left taken",
                capture: false,
                attempt: 1,
                answers: vec![Err(unexpected()), Ok(intent("succeeded", None))],
                calls: "cancel, retrieve",
                status: Pending,
                end: None,
            },
            Row {
                says: "a later cancel reads first; still held: cancels",
                capture: false,
                attempt: 2,
                answers: vec![
                    Ok(intent("requires_capture", None)),
                    Ok(intent("canceled", None)),
                ],
                calls: "retrieve, cancel",
                status: Succeeded,
                end: Some(AuthorizationOutcome::Canceled),
            },
        ];
        for row in rows {
            let op = claimed(row.capture, row.attempt);
            let (calls, d) = run(&op, row.answers);
            assert_eq!(calls, row.calls, "{}", row.says);
            assert_eq!(d.decision.status, row.status, "{}", row.says);
            assert_eq!(d.authorization, row.end, "{}", row.says);
            assert_eq!(
                d.decision.next_due_at.is_none(),
                d.decision.status.is_settled(),
                "{}: due exactly while unsettled",
                row.says
            );
        }
    }

    /// A cancel that finds the intent captured goes to a person, never settles; its twin, a
    /// capture reading the same intent, settles captured.
    #[test]
    fn a_cancel_never_settles_over_a_captured_intent() {
        let (_, d) = run(&claimed(false, 2), vec![Ok(intent("succeeded", None))]);
        assert!(d.decision.review.is_some());
        assert_eq!(d.authorization, None);
        let (_, d) = run(&claimed(true, 2), vec![Ok(intent("succeeded", None))]);
        assert!(d.decision.review.is_none());
        assert_eq!(d.decision.status, Succeeded);
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
}
