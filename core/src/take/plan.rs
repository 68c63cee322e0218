//! Captures and cancels of an authorization as pure functions of (record, Stripe's answer, now):
//! what a capture or cancel operation does next and what each answer means, read as its table
//! (`core/tests/spec_take_plan.rs`).
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
//! - a refusal for the intent's state → **retrieve**, and settle by what Stripe holds;
//! - a refusal for anything else (400 invalid request, 402 at capture) → **failed**, the
//!   authorization given back to the merchant (Stripe did nothing; a refused read, by contrast,
//!   says nothing of an earlier attempt and goes to a person).
//!
//! A capture never repeats at Stripe (an intent is captured once; the second is refused), so
//! acting again after a read that shows it uncaptured cannot take money twice.
//!
//! The outcome ends the charge's authorization in the same write ([`AuthorizationOutcome`]):
//! captured (the charge `succeeded`, with the amount taken: also when a cancel finds it captured
//! by someone else), canceled, lapsed (Stripe canceled the hold at its deadline: `failed`), or
//! given back (Stripe refused what was asked: the charge `authorized` and free again). A review
//! (a key misuse, a refused read, an intent that is not the charge's) leaves the charge taken.

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
            (TakeStep::Act(_), OperationKind::Capture(_)) => "capture",
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
        // Refused for what was asked, not for where the intent is: nothing was captured or
        // canceled, the hold is still Stripe's, and the merchant is the one who can act (another
        // amount, or a cancel): the charge is given back.
        Err(
            err @ (GatewayError::Rejected { .. }
            | GatewayError::Declined { .. }
            | GatewayError::ChargeDisputed { .. }),
        ) => given_back(op, &err),
        Err(err) => after_error(op, err, ReviewClass::TakeRefused, now, policy),
    }
}

/// A capture or cancel Stripe refused for a reason other than the intent's state (a 400 such as
/// `amount_too_small` or an invalid `amount_to_capture`, a 402 at capture): Stripe did nothing,
/// so the operation fails, naming Stripe's code, and the charge is given back: `authorized`
/// again, free for another capture (its own operation and key) or a cancel through the door.
/// Left taken, it would hold the customer's funds until Stripe lets them lapse, with nobody able
/// to act. Only after a call that acted: a refused read says nothing of an earlier attempt.
fn given_back(op: &Operation, err: &GatewayError) -> TakeDecision {
    let why = format!(
        "{}: Stripe refused the {} ({err}); nothing was taken and the authorization is given back: capture another amount or cancel",
        ReviewClass::TakeRefused.as_str(),
        op.kind.as_str(),
    );
    settled(
        OperationStatus::Failed,
        Some(&why),
        AuthorizationOutcome::GivenBack,
    )
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
    let lapsed = pi.lapsed();
    let canceled_end = if lapsed {
        AuthorizationOutcome::Expired
    } else {
        AuthorizationOutcome::Canceled
    };
    let capture = op.kind.is_capture();
    match (&pi.status, capture) {
        (PaymentIntentStatus::Succeeded, true) => settled(
            OperationStatus::Succeeded,
            None,
            AuthorizationOutcome::Captured(captured(op, &pi)),
        ),
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
        // Captured by something other than this cancel (the dashboard, another integration):
        // the cancel can never take effect, and the charge records what Stripe holds.
        (PaymentIntentStatus::Succeeded, false) => {
            let why = format!(
                "{}: payment intent {} is captured: it cannot be canceled; refund it instead",
                ReviewClass::TakeRefused.as_str(),
                pi.id
            );
            settled(
                OperationStatus::Failed,
                Some(&why),
                AuthorizationOutcome::Captured(captured(op, &pi)),
            )
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

/// What Stripe took of a captured intent (`amount_received`), or, when it does not say, what the
/// operation names (a capture's amount; a cancel's: all that was held).
fn captured(op: &Operation, pi: &PaymentIntent) -> Amount {
    pi.amount_received
        .and_then(|a| Amount::new(a).ok())
        .unwrap_or_else(|| op.params.amount())
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
