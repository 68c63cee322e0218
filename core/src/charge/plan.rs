//! The charge state machine as pure functions of (record, gateway answer, now): no I/O, so every
//! edge is a row of one table test (`charge_table` below).
//!
//! `failed` is recorded only once Stripe can no longer take the money. A declined intent
//! (`requires_payment_method`, from a create's 402 or from any read) can still be confirmed by the
//! customer, so its decision asks for one more call first ([`FollowUp::Cancel`]), and only Stripe's
//! `canceled` ([`after_cancel`]) records `failed`. Until then the operation is `unknown` with the
//! intent's id, so whoever looks next (this release or an older one) retrieves it. A cancel refused
//! because the intent moved on is followed by a read ([`FollowUp::Retrieve`],
//! [`after_cancel_refused`]) and settled by what Stripe holds. The executor's shell makes the calls
//! a decision asks for before recording it: at most two after the first.

use crate::domain::{Amount, PaymentIntentId};
use crate::operation::{Operation, OperationStatus};
use crate::outcome::{outcome_for, GatewayError, PaymentIntent, PaymentIntentStatus, RetryCause};
use crate::plan::{
    search_allowed_at, stuck, unknown_due_at, Decision, FollowUp, Hold, Policy, ReviewClass,
};
use crate::store_rules::{AUTHORIZATION_EXPIRED, CANCELED_BY_MERCHANT};
use crate::time::Timestamp;

/// What to do with a claimed operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The PaymentIntent id is known: re-sending the create would only replay its first answer, so
    /// read its current state instead.
    Retrieve(PaymentIntentId),
    /// The key window has passed: the key may be pruned and a create could charge again. Find what
    /// exists by `metadata['operation_id']` instead.
    Search,
    /// The key window has passed but not long enough for search to be trusted: do nothing yet.
    WaitForSearch(Timestamp),
    /// Inside the key window: create (or re-create) with the same idempotency key.
    Create,
}

impl Step {
    pub fn name(&self) -> &'static str {
        match self {
            Step::Retrieve(_) => "retrieve",
            Step::Search => "search",
            Step::WaitForSearch(_) => "wait_for_search",
            Step::Create => "create",
        }
    }
}

/// Decides the step for an operation we hold the lease on (so `first_attempted_at` is set).
pub fn next_step(op: &Operation, now: Timestamp, policy: &Policy) -> Step {
    if let Some(id) = &op.external_id {
        return Step::Retrieve(id.clone());
    }
    if op.key_window_passed(now, policy.key_window) {
        let searchable_at = search_allowed_at(op, policy);
        if now >= searchable_at {
            return Step::Search;
        }
        return Step::WaitForSearch(searchable_at);
    }
    Step::Create
}

/// Which of a PaymentIntent's facts is not the operation's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mismatch {
    OperationId,
    OrderId,
    Amount,
    Currency,
    /// A live-mode intent for a test-mode key, or the other way round.
    Livemode,
}

impl Mismatch {
    pub fn as_str(&self) -> &'static str {
        match self {
            Mismatch::OperationId => "operation_id",
            Mismatch::OrderId => "order_id",
            Mismatch::Amount => "amount",
            Mismatch::Currency => "currency",
            Mismatch::Livemode => "livemode",
        }
    }
}

/// The one check that a PaymentIntent is this operation's, before anything settles from it (the
/// executor's create, retrieve and search answers, and every Stripe event): `metadata.operation_id`
/// and `metadata.order_id` as our create set them, the amount and currency of the record, and the
/// mode of our key. A fact Stripe's answer lacks counts as different (an intent we cannot confirm
/// is not ours), with one exception: `metadata.order_id`, which releases before 2026-11-30 did not
/// send, so their intents are still theirs without it (an event without it finds no operation
/// anyway). The first difference found, in that order; `None` when all agree.
pub fn intent_mismatch(op: &Operation, pi: &PaymentIntent, livemode: bool) -> Option<Mismatch> {
    let operation_id = op.operation_id.to_string();
    if pi.operation_id.as_deref() != Some(operation_id.as_str()) {
        return Some(Mismatch::OperationId);
    }
    if pi
        .order_id
        .as_deref()
        .is_some_and(|o| o != op.order_id.as_str())
    {
        return Some(Mismatch::OrderId);
    }
    if pi.amount != Some(op.params.amount().minor_units()) {
        return Some(Mismatch::Amount);
    }
    if pi.currency.as_deref() != Some(op.params.currency().as_str()) {
        return Some(Mismatch::Currency);
    }
    if pi.livemode != Some(livemode) {
        return Some(Mismatch::Livemode);
    }
    None
}

/// The stuck class of a PaymentIntent status that waits on something outside us (the customer's
/// authentication, the bank), if it is one.
fn stuck_class(status: &PaymentIntentStatus) -> Option<ReviewClass> {
    match status {
        PaymentIntentStatus::RequiresAction => Some(ReviewClass::StuckRequiresAction),
        PaymentIntentStatus::Processing => Some(ReviewClass::StuckProcessing),
        _ => None,
    }
}

impl Decision {
    /// What a PaymentIntent Stripe just answered with means for the operation: checked to be the
    /// operation's first ([`intent_mismatch`]), then settled, reviewed as stuck, or looked at again.
    pub(crate) fn from_payment_intent(
        op: &Operation,
        pi: PaymentIntent,
        now: Timestamp,
        policy: &Policy,
        livemode: bool,
    ) -> Self {
        if let Some(m) = intent_mismatch(op, &pi, livemode) {
            // Settling from someone else's intent would tell the customer an outcome that is not
            // theirs; recording its id would make every later look read it. A person checks.
            let reason = format!(
                "{}: payment intent {} is not this operation's ({} differs)",
                ReviewClass::IntentMismatch.as_str(),
                pi.id,
                m.as_str()
            );
            return Decision::review(op.status, reason, ReviewClass::IntentMismatch, now);
        }
        if pi.status == PaymentIntentStatus::RequiresPaymentMethod {
            let why = format!("payment intent {}", pi.status);
            return Decision::cancel_first(pi.id, why, now);
        }
        if op.is_manual_capture() {
            if let Some(d) = Decision::from_authorization(op, &pi, now, policy) {
                return d;
            }
        }
        let status = outcome_for(&pi.status);
        if status.is_settled() {
            Decision {
                status,
                last_error: (status == OperationStatus::Failed)
                    .then(|| format!("payment intent {}", pi.status)),
                external_id: Some(pi.id),
                review: None,
                next_due_at: None,
                retry: None,
                then: None,
                authorization: None,
            }
        } else if let Some(class) = stuck_class(&pi.status).filter(|_| stuck(op, now, policy)) {
            // Someone or something outside us must act (the customer's 3-D Secure, the bank's
            // settlement) and has not for days: looking again every hour forever would hide it.
            // Still unsettled; a person decides with the Stripe dashboard.
            let reason = format!(
                "{}: payment intent {} still {} {} h after the first attempt",
                class.as_str(),
                pi.id,
                pi.status,
                policy.stuck_after.as_secs() / 3600
            );
            Decision {
                external_id: Some(pi.id),
                ..Decision::review(status, reason, class, now)
            }
        } else {
            Decision {
                status,
                last_error: Some(format!("payment intent {}", pi.status)),
                external_id: Some(pi.id),
                review: None,
                next_due_at: Some(unknown_due_at(op, now, policy)),
                retry: None,
                then: None,
                authorization: None,
            }
        }
    }

    /// What a manual capture's intent means for its charge, where it differs from an automatic
    /// one's: `requires_capture` is `authorized` (money held), watched until its deadline;
    /// `succeeded` is captured, with what was taken; `canceled` once authorized is the hold's end
    /// (lapsed when Stripe canceled it, `cancellation_reason: automatic`; else canceled). `None`:
    /// any other status, decided as for any charge.
    fn from_authorization(
        op: &Operation,
        pi: &PaymentIntent,
        now: Timestamp,
        policy: &Policy,
    ) -> Option<Self> {
        let settled = |status, error: Option<&str>, amount_captured| Decision {
            status,
            external_id: Some(pi.id.clone()),
            last_error: error.map(str::to_owned),
            review: None,
            next_due_at: None,
            retry: None,
            then: None,
            authorization: Some(Hold {
                amount_captured,
                ..Hold::default()
            }),
        };
        match pi.status {
            PaymentIntentStatus::RequiresCapture => Some(Decision::authorized(op, pi, now, policy)),
            PaymentIntentStatus::Succeeded => {
                let taken = pi
                    .amount_received
                    .or(pi.amount)
                    .and_then(|a| Amount::new(a).ok());
                Some(settled(OperationStatus::Succeeded, None, taken))
            }
            PaymentIntentStatus::Canceled if op.status == OperationStatus::Authorized => {
                let error = match pi.cancellation_reason.as_deref() {
                    Some("automatic") => AUTHORIZATION_EXPIRED,
                    _ => CANCELED_BY_MERCHANT,
                };
                Some(settled(OperationStatus::Failed, Some(error), None))
            }
            _ => None,
        }
    }

    /// Held, not taken: `authorized` with Stripe's deadline (this answer's, else the one
    /// recorded), due again when the page must go out, then just after the deadline to see the
    /// lapse. A deadline no answer stated yet is read at once ([`FollowUp::ReadDeadline`]),
    /// due again soon if that read is never made.
    fn authorized(op: &Operation, pi: &PaymentIntent, now: Timestamp, policy: &Policy) -> Self {
        let capture_before = pi.capture_before.or(op.capture_before());
        let (next_due_at, deadline_near) = match capture_before {
            None => (now.plus(policy.retry_after), false),
            Some(deadline) => watch_deadline(op, deadline, now, policy),
        };
        Decision {
            status: OperationStatus::Authorized,
            external_id: Some(pi.id.clone()),
            last_error: None,
            review: None,
            next_due_at: Some(next_due_at),
            retry: None,
            then: capture_before
                .is_none()
                .then(|| FollowUp::ReadDeadline { id: pi.id.clone() }),
            authorization: Some(Hold {
                capture_before,
                amount_captured: None,
                deadline_near,
            }),
        }
    }

    /// The operation's intent `id` is declined (`requires_payment_method`): the customer can
    /// still confirm it, so `failed` waits for Stripe to cancel it ([`FollowUp::Cancel`]). What
    /// stands until then: unknown with the intent's id, due now, so that if the cancel is never
    /// made (the process dies) the next look retrieves the intent and cancels it again.
    fn cancel_first(id: PaymentIntentId, why: String, now: Timestamp) -> Self {
        Decision {
            then: Some(FollowUp::Cancel {
                id: id.clone(),
                why: why.clone(),
            }),
            ..Decision::waiting_for_cancel(
                &id,
                format!("{why}; canceling payment intent {id} before recording failed"),
                now,
                None,
            )
        }
    }

    /// Unknown with the declined intent's id, looked at again at `next_due_at`: the next look
    /// retrieves it and cancels it again (under the same key: a cancel made but unanswered
    /// replays its answer).
    fn waiting_for_cancel(
        id: &PaymentIntentId,
        error: String,
        next_due_at: Timestamp,
        retry: Option<RetryCause>,
    ) -> Self {
        Decision {
            status: OperationStatus::Unknown,
            external_id: Some(id.clone()),
            last_error: Some(error),
            review: None,
            next_due_at: Some(next_due_at),
            retry,
            then: None,
            authorization: None,
        }
    }

    /// The status stays as it was; only the error and the next look change (and, with `retry`,
    /// the message is retried).
    fn unchanged(
        op: &Operation,
        error: &GatewayError,
        next_due_at: Timestamp,
        retry: Option<RetryCause>,
    ) -> Self {
        Decision {
            status: op.status,
            external_id: None,
            last_error: Some(error.to_string()),
            review: None,
            next_due_at: Some(next_due_at),
            retry,
            then: None,
            authorization: None,
        }
    }
}

/// When an authorization with `deadline` is looked at next, and whether it pages now: before the
/// page's moment (the deadline less the policy's lead), due then; from then on it pages, due just
/// after the deadline to see it captured, canceled or lapsed (past it, on the back-off).
pub fn watch_deadline(
    op: &Operation,
    deadline: Timestamp,
    now: Timestamp,
    policy: &Policy,
) -> (Timestamp, bool) {
    let page_at = deadline.minus(policy.authorization_page_lead);
    if now < page_at {
        (page_at, false)
    } else if now < deadline {
        (deadline.plus(policy.retry_after), true)
    } else {
        (unknown_due_at(op, now, policy), true)
    }
}

/// After a create with the operation's key.
pub fn after_create(
    op: &Operation,
    result: Result<PaymentIntent, GatewayError>,
    now: Timestamp,
    policy: &Policy,
    livemode: bool,
) -> Decision {
    let err = match result {
        Ok(pi) => return Decision::from_payment_intent(op, pi, now, policy, livemode),
        Err(err) => err,
    };
    match &err {
        // Stripe executed the request and the card was declined; never retried. The intent it
        // left can still be confirmed by the customer: canceled before `failed` is recorded.
        GatewayError::Declined {
            payment_intent_id: Some(id),
            ..
        } => Decision::cancel_first(id.clone(), err.to_string(), now),
        // A decline naming no PaymentIntent: nothing exists at Stripe that anyone could confirm
        // later, so there is nothing to cancel: failed, settled.
        GatewayError::Declined {
            payment_intent_id: None,
            ..
        } => Decision {
            status: OperationStatus::Failed,
            external_id: None,
            last_error: Some(err.to_string()),
            review: None,
            next_due_at: None,
            retry: None,
            then: None,
            authorization: None,
        },
        // Certainly nothing happened: keep the status, come back soon with the same key.
        GatewayError::RetryLater { cause, .. } => {
            Decision::unchanged(op, &err, now.plus(policy.retry_after), Some(*cause))
        }
        // It may have charged. Unknown, never failed; the same key makes the next create safe.
        GatewayError::Ambiguous { .. } => Decision {
            status: OperationStatus::Unknown,
            external_id: None,
            last_error: Some(err.to_string()),
            review: None,
            next_due_at: Some(unknown_due_at(op, now, policy)),
            retry: None,
            then: None,
            authorization: None,
        },
        // Our key met different parameters: something under this key exists and our key derivation
        // is wrong. Never retried with another key; a person decides.
        GatewayError::KeyMisuse { .. } => Decision::review(
            OperationStatus::Unknown,
            err.to_string(),
            ReviewClass::KeyMisuse,
            now,
        ),
        // Stripe refused the request as invalid (a validation failure is not saved under the key,
        // so nothing was created by it). Marking the operation failed would tell the customer their
        // card failed when our data is wrong (unknown customer, detached payment method), and
        // retrying would be refused the same way: review, with the status left as it was. (A
        // create refused for a PaymentIntent's state cannot happen to a new intent: the same.)
        GatewayError::Rejected { .. } | GatewayError::UnexpectedState { .. } => {
            Decision::review(op.status, err.to_string(), ReviewClass::Rejected, now)
        }
    }
}

/// After canceling the operation's declined PaymentIntent `id` (`why`: what declined it). Only
/// Stripe's `canceled` records `failed`: from then on nobody can take the money. A cancel that
/// did nothing (429) or may have done nothing (a timeout, a 5xx) leaves the operation unknown
/// with the intent's id, due again (a 429 retries the message soon): the next look retrieves the
/// intent and cancels again under the same key. A cancel refused because the intent moved on
/// (`payment_intent_unexpected_state`: the customer paid it meanwhile, say) asks for a read of
/// it ([`after_cancel_refused`]). Any other refusal: a person looks, and it stays unsettled.
pub fn after_cancel(
    op: &Operation,
    id: &PaymentIntentId,
    why: &str,
    result: Result<PaymentIntent, GatewayError>,
    now: Timestamp,
    policy: &Policy,
    livemode: bool,
) -> Decision {
    let err = match result {
        Ok(pi) if intent_mismatch(op, &pi, livemode).is_none() => {
            return match pi.status {
                PaymentIntentStatus::Canceled => Decision {
                    status: OperationStatus::Failed,
                    external_id: Some(pi.id),
                    last_error: Some(format!("{why}; payment intent {id} canceled")),
                    review: None,
                    next_due_at: None,
                    retry: None,
                    then: None,
                    authorization: None,
                },
                // Answered, yet still confirmable: never failed; the next look cancels again.
                PaymentIntentStatus::RequiresPaymentMethod => Decision::waiting_for_cancel(
                    id,
                    format!("{why}; cancel of {id} answered {}", pi.status),
                    unknown_due_at(op, now, policy),
                    None,
                ),
                // Anything else is what the intent is now, as any read of it.
                _ => Decision::from_payment_intent(op, pi, now, policy, livemode),
            };
        }
        // Not the operation's: reviewed, as any answer naming someone else's intent.
        Ok(pi) => return Decision::from_payment_intent(op, pi, now, policy, livemode),
        Err(err) => err,
    };
    let error = format!("{why}; cancel of {id}: {err}");
    match &err {
        GatewayError::UnexpectedState { .. } => Decision {
            then: Some(FollowUp::Retrieve {
                id: id.clone(),
                why: why.to_owned(),
            }),
            ..Decision::waiting_for_cancel(id, error, now, None)
        },
        GatewayError::RetryLater { cause, .. } => {
            Decision::waiting_for_cancel(id, error, now.plus(policy.retry_after), Some(*cause))
        }
        GatewayError::Ambiguous { .. } => {
            Decision::waiting_for_cancel(id, error, unknown_due_at(op, now, policy), None)
        }
        // Our cancel key met another request: a bug in key derivation; a person decides.
        GatewayError::KeyMisuse { .. } => Decision {
            external_id: Some(id.clone()),
            ..Decision::review(OperationStatus::Unknown, error, ReviewClass::KeyMisuse, now)
        },
        GatewayError::Rejected { .. } | GatewayError::Declined { .. } => Decision {
            external_id: Some(id.clone()),
            ..Decision::review(
                OperationStatus::Unknown,
                format!("{}: {error}", ReviewClass::CancelFailed.as_str()),
                ReviewClass::CancelFailed,
                now,
            )
        },
    }
}

/// After reading back the intent `id` whose cancel Stripe refused because it moved on: what
/// Stripe holds settles the operation, by the rules of any read (succeeded: succeeded; canceled:
/// failed; `processing`, `requires_action`: unknown, looked at again). Declined again (it moved
/// on and back): unknown, and the next look cancels again. A failed read leaves the operation
/// unknown with the intent's id, as a failed retrieve does.
pub fn after_cancel_refused(
    op: &Operation,
    id: &PaymentIntentId,
    why: &str,
    result: Result<PaymentIntent, GatewayError>,
    now: Timestamp,
    policy: &Policy,
    livemode: bool,
) -> Decision {
    let err = match result {
        Ok(pi)
            if pi.status == PaymentIntentStatus::RequiresPaymentMethod
                && intent_mismatch(op, &pi, livemode).is_none() =>
        {
            return Decision::waiting_for_cancel(
                id,
                format!(
                    "{why}; cancel of {id} refused, and it is {} again",
                    pi.status
                ),
                unknown_due_at(op, now, policy),
                None,
            )
        }
        Ok(pi) => return Decision::from_payment_intent(op, pi, now, policy, livemode),
        Err(err) => err,
    };
    let error = format!("{why}; cancel of {id} refused, then its retrieve: {err}");
    match &err {
        GatewayError::RetryLater { cause, .. } => {
            Decision::waiting_for_cancel(id, error, now.plus(policy.retry_after), Some(*cause))
        }
        GatewayError::Ambiguous { .. } => {
            Decision::waiting_for_cancel(id, error, unknown_due_at(op, now, policy), None)
        }
        _ => Decision {
            external_id: Some(id.clone()),
            ..Decision::review(
                OperationStatus::Unknown,
                error,
                ReviewClass::RetrieveFailed,
                now,
            )
        },
    }
}

/// After reading a PaymentIntent whose id we had recorded.
pub fn after_retrieve(
    op: &Operation,
    result: Result<PaymentIntent, GatewayError>,
    now: Timestamp,
    policy: &Policy,
    livemode: bool,
) -> Decision {
    let err = match result {
        Ok(pi) => return Decision::from_payment_intent(op, pi, now, policy, livemode),
        Err(err) => err,
    };
    match &err {
        GatewayError::RetryLater { cause, .. } => {
            Decision::unchanged(op, &err, now.plus(policy.retry_after), Some(*cause))
        }
        GatewayError::Ambiguous { .. } => {
            Decision::unchanged(op, &err, unknown_due_at(op, now, policy), None)
        }
        // A recorded id Stripe does not know, or any other refusal: our record and Stripe disagree.
        _ => Decision::review(
            op.status,
            format!(
                "retrieve of {} failed: {err}",
                op.external_id.as_deref().unwrap_or("?")
            ),
            ReviewClass::RetrieveFailed,
            now,
        ),
    }
}

/// After searching by operation id past the key window.
pub fn after_search(
    op: &Operation,
    result: Result<Vec<PaymentIntent>, GatewayError>,
    now: Timestamp,
    policy: &Policy,
    livemode: bool,
) -> Decision {
    match result {
        Ok(mut found) if found.len() == 1 => {
            let pi = found.remove(0);
            Decision::from_payment_intent(op, pi, now, policy, livemode)
        }
        // Not finding it does not prove it does not exist (search lags during incidents), and two
        // matches mean something already went wrong: a person checks the Stripe dashboard.
        Ok(found) => Decision::review(
            OperationStatus::Unknown,
            format!(
                "key window passed; search found {} payment intents for the operation",
                found.len()
            ),
            ReviewClass::SearchAmbiguous,
            now,
        ),
        Err(err @ (GatewayError::RetryLater { .. } | GatewayError::Ambiguous { .. })) => {
            Decision::unchanged(op, &err, now.plus(policy.retry_after), None)
        }
        Err(err) => Decision::review(
            OperationStatus::Unknown,
            format!("search failed: {err}"),
            ReviewClass::SearchFailed,
            now,
        ),
    }
}

/// An operation that is not a charge reached the charge plan's create (a refund, say, driven by
/// a release that does not execute its kind): nothing is called, and a person looks, the record
/// left unsettled as it was.
pub fn not_a_charge(op: &Operation, now: Timestamp) -> Decision {
    Decision::review(
        op.status,
        format!(
            "{}: a {} operation is not created as a payment intent",
            ReviewClass::Rejected.as_str(),
            op.kind.as_str()
        ),
        ReviewClass::Rejected,
        now,
    )
}

/// Past the key window but before search can be trusted: release the lease and come back then.
pub fn wait_for_search(op: &Operation, until: Timestamp) -> Decision {
    release(op, until)
}

/// Releases the lease and changes nothing else but the next look.
pub(crate) fn release(op: &Operation, next_due_at: Timestamp) -> Decision {
    Decision {
        status: op.status,
        external_id: None,
        last_error: op.last_error.clone(),
        review: None,
        next_due_at: Some(next_due_at),
        retry: None,
        then: None,
        authorization: None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::operation::OperationStatus::{Failed, Pending, Succeeded, Unknown};
    use crate::outcome::PaymentIntentStatus as Pi;
    use crate::plan::Disposition;
    use crate::testing::{self, T0};

    const MS: Duration = Duration::from_millis(1);
    const MIN: Duration = Duration::from_secs(60);
    const HOUR: Duration = Duration::from_secs(3600);

    /// What Stripe answers the calls made with, in order: create, retrieve and cancel answer one
    /// intent (or an error), search a list (or an error); empty when the step makes no call.
    type Answer = Vec<Result<Vec<PaymentIntent>, GatewayError>>;

    /// One line of the specification: (the record as claimed, Stripe's answers, now) → (the
    /// calls made, the next record, what it means for the message).
    struct Row {
        /// The line, as a sentence.
        says: &'static str,
        /// The record as the claim handed it over.
        found: Operation,
        now: Timestamp,
        /// Stripe's answers to the calls made, in order.
        stripe: Answer,
        /// The calls made, in order ("create, cancel").
        calls: &'static str,
        /// The next record: its status, the PaymentIntent id recorded, a part of the error
        /// recorded, the next look.
        status: OperationStatus,
        intent: Option<&'static str>,
        error: Option<&'static str>,
        next_look: Option<Timestamp>,
        /// What it means for the message that asked.
        then: Then,
    }

    /// What the decision means for the message, with the review's class.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Then {
        Settled,
        Scheduled,
        Retry(RetryCause),
        Review(ReviewClass),
    }

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
    fn then(d: &Decision) -> Then {
        match d.disposition() {
            Disposition::Settled => Then::Settled,
            Disposition::Scheduled => Then::Scheduled,
            Disposition::RetryLater(cause) => Then::Retry(cause),
            Disposition::InReview(reason) => {
                let (class, recorded) = d.review.clone().expect("in review with a reason");
                assert_eq!(reason, recorded);
                assert_eq!(
                    d.last_error.as_ref(),
                    Some(&reason),
                    "the reason is the error"
                );
                Then::Review(class)
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
    #[test]
    fn charge_table() {
        let policy = Policy::default(); // window 23 h, search 10 min after, stuck at 72 h
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
        use Then::*;
        let cases: Vec<Row> = vec![
            // Inside the key window: create with the operation's key.
            Row {
                says: "new, create succeeded: succeeded, its id recorded, settled",
                found: fresh(),
                now: T0,
                stripe: one(ours(Pi::Succeeded)),
                calls: "create",
                status: Succeeded,
                intent: pi_1,
                error: None,
                next_look: None,
                then: Settled,
            },
            // Declined: the customer could still confirm the intent, so it is canceled before
            // `failed` is recorded, and only Stripe's `canceled` records it.
            Row {
                says: "new, create requires_payment_method: canceled first, then failed, settled",
                found: fresh(),
                now: T0,
                stripe: [one(ours(Pi::RequiresPaymentMethod)), one(ours(Pi::Canceled))].concat(),
                calls: "create, cancel",
                status: Failed,
                intent: pi_1,
                error: Some("payment intent requires_payment_method; payment intent pi_1 canceled"),
                next_look: None,
                then: Settled,
            },
            Row {
                says: "new, create canceled: failed, settled",
                found: fresh(),
                now: T0,
                stripe: one(ours(Pi::Canceled)),
                calls: "create",
                status: Failed,
                intent: pi_1,
                error: Some("payment intent canceled"),
                next_look: None,
                then: Settled,
            },
            Row {
                says: "new, create processing: unknown, id recorded, look again after the base back-off",
                found: fresh(),
                now: T0,
                stripe: one(ours(Pi::Processing)),
                calls: "create",
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent processing"),
                next_look: Some(T0.plus(MIN)),
                then: Scheduled,
            },
            Row {
                says: "new, create requires_action: unknown, id recorded, back off",
                found: fresh(),
                now: T0,
                stripe: one(ours(Pi::RequiresAction)),
                calls: "create",
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent requires_action"),
                next_look: Some(T0.plus(MIN)),
                then: Scheduled,
            },
            Row {
                says: "new, create requires_capture: unknown, id recorded, back off",
                found: fresh(),
                now: T0,
                stripe: one(ours(Pi::RequiresCapture)),
                calls: "create",
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent requires_capture"),
                next_look: Some(T0.plus(MIN)),
                then: Scheduled,
            },
            Row {
                says: "new, create in a status this code does not know: unknown, back off",
                found: fresh(),
                now: T0,
                stripe: one(ours(Pi::Other("new".into()))),
                calls: "create",
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent new"),
                next_look: Some(T0.plus(MIN)),
                then: Scheduled,
            },
            Row {
                says: "new, create answers someone else's intent: status kept, its id not recorded, review",
                found: fresh(),
                now: T0,
                stripe: one(theirs()),
                calls: "create",
                status: Pending,
                intent: None,
                error: Some("intent_mismatch: payment intent pi_1"),
                next_look: Some(T0),
                then: Review(ReviewClass::IntentMismatch),
            },
            Row {
                says: "new, create declined with its intent: canceled first, then failed, that id recorded, settled",
                found: fresh(),
                now: T0,
                stripe: [fails(declined(pi_1)), one(ours(Pi::Canceled))].concat(),
                calls: "create, cancel",
                status: Failed,
                intent: pi_1,
                error: Some("declined: insufficient_funds; payment intent pi_1 canceled"),
                next_look: None,
                then: Settled,
            },
            Row {
                says: "new, create declined without an intent: nothing to cancel, failed, no id, settled",
                found: fresh(),
                now: T0,
                stripe: fails(declined(None)),
                calls: "create",
                status: Failed,
                intent: None,
                error: Some("declined"),
                next_look: None,
                then: Settled,
            },
            Row {
                says: "declined, cancel times out: unknown (never failed), its id recorded, back off",
                found: fresh(),
                now: T0,
                stripe: [fails(declined(pi_1)), fails(timeout())].concat(),
                calls: "create, cancel",
                status: Unknown,
                intent: pi_1,
                error: Some("declined: insufficient_funds; cancel of pi_1: outcome unknown: timed out"),
                next_look: Some(T0.plus(MIN)),
                then: Scheduled,
            },
            Row {
                says: "declined, cancel rate limited: unknown, its id recorded, message retried",
                found: fresh(),
                now: T0,
                stripe: [fails(declined(pi_1)), fails(retry(RetryCause::RateLimited))].concat(),
                calls: "create, cancel",
                status: Unknown,
                intent: pi_1,
                error: Some("cancel of pi_1: retry later (rate_limited)"),
                next_look: Some(T0.plus(MIN)),
                then: Retry(RetryCause::RateLimited),
            },
            Row {
                says: "declined, cancel answered still requires_payment_method: unknown, back off",
                found: fresh(),
                now: T0,
                stripe: [fails(declined(pi_1)), one(ours(Pi::RequiresPaymentMethod))].concat(),
                calls: "create, cancel",
                status: Unknown,
                intent: pi_1,
                error: Some("cancel of pi_1 answered requires_payment_method"),
                next_look: Some(T0.plus(MIN)),
                then: Scheduled,
            },
            Row {
                says: "declined, the customer paid it meanwhile: cancel refused, read back succeeded: succeeded",
                found: fresh(),
                now: T0,
                stripe: [fails(declined(pi_1)), fails(unexpected()), one(ours(Pi::Succeeded))].concat(),
                calls: "create, cancel, retrieve",
                status: Succeeded,
                intent: pi_1,
                error: None,
                next_look: None,
                then: Settled,
            },
            Row {
                says: "declined, cancel refused, read back canceled: failed",
                found: fresh(),
                now: T0,
                stripe: [fails(declined(pi_1)), fails(unexpected()), one(ours(Pi::Canceled))].concat(),
                calls: "create, cancel, retrieve",
                status: Failed,
                intent: pi_1,
                error: Some("payment intent canceled"),
                next_look: None,
                then: Settled,
            },
            Row {
                says: "declined, cancel refused, read back processing: unknown, back off",
                found: fresh(),
                now: T0,
                stripe: [fails(declined(pi_1)), fails(unexpected()), one(ours(Pi::Processing))].concat(),
                calls: "create, cancel, retrieve",
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent processing"),
                next_look: Some(T0.plus(MIN)),
                then: Scheduled,
            },
            Row {
                says: "declined, cancel refused, read back requires_action: unknown, back off",
                found: fresh(),
                now: T0,
                stripe: [fails(declined(pi_1)), fails(unexpected()), one(ours(Pi::RequiresAction))].concat(),
                calls: "create, cancel, retrieve",
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent requires_action"),
                next_look: Some(T0.plus(MIN)),
                then: Scheduled,
            },
            Row {
                says: "declined, cancel refused, read back declined again: unknown (never failed), back off",
                found: fresh(),
                now: T0,
                stripe: [fails(declined(pi_1)), fails(unexpected()), one(ours(Pi::RequiresPaymentMethod))].concat(),
                calls: "create, cancel, retrieve",
                status: Unknown,
                intent: pi_1,
                error: Some("requires_payment_method again"),
                next_look: Some(T0.plus(MIN)),
                then: Scheduled,
            },
            Row {
                says: "declined, cancel refused, read back times out: unknown, its id recorded, back off",
                found: fresh(),
                now: T0,
                stripe: [fails(declined(pi_1)), fails(unexpected()), fails(timeout())].concat(),
                calls: "create, cancel, retrieve",
                status: Unknown,
                intent: pi_1,
                error: Some("then its retrieve: outcome unknown"),
                next_look: Some(T0.plus(MIN)),
                then: Scheduled,
            },
            Row {
                says: "declined, cancel refused, read back refused: unknown, its id recorded, review",
                found: fresh(),
                now: T0,
                stripe: [fails(declined(pi_1)), fails(unexpected()), fails(rejected())].concat(),
                calls: "create, cancel, retrieve",
                status: Unknown,
                intent: pi_1,
                error: Some("then its retrieve: request rejected"),
                next_look: Some(T0),
                then: Review(ReviewClass::RetrieveFailed),
            },
            Row {
                says: "declined, cancel meets idempotency_error: unknown, its id recorded, review key_misuse",
                found: fresh(),
                now: T0,
                stripe: [fails(declined(pi_1)), fails(misuse())].concat(),
                calls: "create, cancel",
                status: Unknown,
                intent: pi_1,
                error: Some("idempotency key misuse"),
                next_look: Some(T0),
                then: Review(ReviewClass::KeyMisuse),
            },
            Row {
                says: "declined, cancel refused as invalid (404): unknown, its id recorded, review cancel_failed",
                found: fresh(),
                now: T0,
                stripe: [fails(declined(pi_1)), fails(rejected())].concat(),
                calls: "create, cancel",
                status: Unknown,
                intent: pi_1,
                error: Some("cancel_failed: declined: insufficient_funds; cancel of pi_1: request rejected"),
                next_look: Some(T0),
                then: Review(ReviewClass::CancelFailed),
            },
            Row {
                says: "declined, cancel answers someone else's intent: status kept, review",
                found: fresh(),
                now: T0,
                stripe: [fails(declined(pi_1)), one(theirs())].concat(),
                calls: "create, cancel",
                status: Pending,
                intent: None,
                error: Some("intent_mismatch"),
                next_look: Some(T0),
                then: Review(ReviewClass::IntentMismatch),
            },
            Row {
                says: "new, create rate limited: status kept, message retried, look again after retry_after",
                found: fresh(),
                now: T0,
                stripe: fails(retry(RetryCause::RateLimited)),
                calls: "create",
                status: Pending,
                intent: None,
                error: Some("retry later (rate_limited)"),
                next_look: Some(T0.plus(MIN)),
                then: Retry(RetryCause::RateLimited),
            },
            Row {
                says: "new, create finds the key in use: status kept, message retried",
                found: fresh(),
                now: T0,
                stripe: fails(retry(RetryCause::KeyInUse)),
                calls: "create",
                status: Pending,
                intent: None,
                error: Some("idempotency_key_in_use"),
                next_look: Some(T0.plus(MIN)),
                then: Retry(RetryCause::KeyInUse),
            },
            Row {
                says: "new, create refused for our API key: status kept, message retried",
                found: fresh(),
                now: T0,
                stripe: fails(retry(RetryCause::Configuration)),
                calls: "create",
                status: Pending,
                intent: None,
                error: Some("configuration"),
                next_look: Some(T0.plus(MIN)),
                then: Retry(RetryCause::Configuration),
            },
            Row {
                says: "new, create times out: unknown (never failed), back off base",
                found: fresh(),
                now: T0,
                stripe: fails(timeout()),
                calls: "create",
                status: Unknown,
                intent: None,
                error: Some("outcome unknown: timed out"),
                next_look: Some(T0.plus(MIN)),
                then: Scheduled,
            },
            Row {
                says: "third claim, create times out: unknown, back off base * 4",
                found: unknown(3),
                now: T0.plus(HOUR),
                stripe: fails(timeout()),
                calls: "create",
                status: Unknown,
                intent: None,
                error: Some("outcome unknown"),
                next_look: Some(T0.plus(HOUR + 4 * MIN)),
                then: Scheduled,
            },
            Row {
                says: "late in the window, create times out: the back-off stops where search opens",
                found: unknown(10),
                now: window.minus(MIN),
                stripe: fails(timeout()),
                calls: "create",
                status: Unknown,
                intent: None,
                error: Some("outcome unknown"),
                next_look: Some(search),
                then: Scheduled,
            },
            Row {
                says: "new, create meets idempotency_error: unknown, review key_misuse",
                found: fresh(),
                now: T0,
                stripe: fails(misuse()),
                calls: "create",
                status: Unknown,
                intent: None,
                error: Some("idempotency key misuse"),
                next_look: Some(T0),
                then: Review(ReviewClass::KeyMisuse),
            },
            Row {
                says: "new, create rejected as invalid: status kept (not failed), review rejected",
                found: fresh(),
                now: T0,
                stripe: fails(rejected()),
                calls: "create",
                status: Pending,
                intent: None,
                error: Some("request rejected"),
                next_look: Some(T0),
                then: Review(ReviewClass::Rejected),
            },
            Row {
                says: "unknown, a moment before the window ends: still create",
                found: unknown(2),
                now: window.minus(MS),
                stripe: one(ours(Pi::Succeeded)),
                calls: "create",
                status: Succeeded,
                intent: pi_1,
                error: None,
                next_look: None,
                then: Settled,
            },
            // Past the key window, no id recorded: never create; search once search may be trusted.
            Row {
                says: "unknown, as the window ends: no call, wait until search opens",
                found: unknown(2),
                now: window,
                stripe: none(),
                calls: "wait_for_search",
                status: Unknown,
                intent: None,
                error: Some("outcome unknown: earlier"),
                next_look: Some(search),
                then: Scheduled,
            },
            Row {
                says: "unknown, a moment before search opens: still wait",
                found: unknown(2),
                now: search.minus(MS),
                stripe: none(),
                calls: "wait_for_search",
                status: Unknown,
                intent: None,
                error: Some("outcome unknown: earlier"),
                next_look: Some(search),
                then: Scheduled,
            },
            Row {
                says: "unknown, search open, finds it succeeded: settled, its id recorded",
                found: unknown(2),
                now: search,
                stripe: found(vec![ours(Pi::Succeeded)]),
                calls: "search",
                status: Succeeded,
                intent: pi_1,
                error: None,
                next_look: None,
                then: Settled,
            },
            Row {
                says: "unknown, search finds it declined: canceled first, then failed",
                found: unknown(2),
                now: search,
                stripe: [found(vec![ours(Pi::RequiresPaymentMethod)]), one(ours(Pi::Canceled))].concat(),
                calls: "search, cancel",
                status: Failed,
                intent: pi_1,
                error: Some("payment intent pi_1 canceled"),
                next_look: None,
                then: Settled,
            },
            Row {
                says: "unknown, search finds it processing: unknown, id recorded, back off",
                found: unknown(2),
                now: search,
                stripe: found(vec![ours(Pi::Processing)]),
                calls: "search",
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent processing"),
                next_look: Some(search.plus(2 * MIN)),
                then: Scheduled,
            },
            Row {
                says: "unknown, search finds someone else's intent: its id not recorded, review",
                found: unknown(2),
                now: search,
                stripe: found(vec![theirs()]),
                calls: "search",
                status: Unknown,
                intent: None,
                error: Some("intent_mismatch"),
                next_look: Some(search),
                then: Review(ReviewClass::IntentMismatch),
            },
            Row {
                says: "unknown, search finds none: unknown (not failed), review",
                found: unknown(2),
                now: search,
                stripe: found(vec![]),
                calls: "search",
                status: Unknown,
                intent: None,
                error: Some("search found 0"),
                next_look: Some(search),
                then: Review(ReviewClass::SearchAmbiguous),
            },
            Row {
                says: "unknown, search finds two: review",
                found: unknown(2),
                now: search,
                stripe: found(vec![ours(Pi::Succeeded), ours(Pi::Canceled)]),
                calls: "search",
                status: Unknown,
                intent: None,
                error: Some("search found 2"),
                next_look: Some(search),
                then: Review(ReviewClass::SearchAmbiguous),
            },
            Row {
                says: "pending past the window (every create retried later), search finds none: unknown, review",
                found: claimed(Pending, 5),
                now: search,
                stripe: found(vec![]),
                calls: "search",
                status: Unknown,
                intent: None,
                error: Some("search found 0"),
                next_look: Some(search),
                then: Review(ReviewClass::SearchAmbiguous),
            },
            Row {
                says: "unknown, search rate limited: status kept, look again after retry_after, message not retried",
                found: unknown(2),
                now: search,
                stripe: fails(retry(RetryCause::RateLimited)),
                calls: "search",
                status: Unknown,
                intent: None,
                error: Some("retry later"),
                next_look: Some(search.plus(MIN)),
                then: Scheduled,
            },
            Row {
                says: "unknown, search times out: status kept, look again after retry_after",
                found: unknown(2),
                now: search,
                stripe: fails(timeout()),
                calls: "search",
                status: Unknown,
                intent: None,
                error: Some("outcome unknown: timed out"),
                next_look: Some(search.plus(MIN)),
                then: Scheduled,
            },
            Row {
                says: "unknown, search refused: review",
                found: unknown(2),
                now: search,
                stripe: fails(rejected()),
                calls: "search",
                status: Unknown,
                intent: None,
                error: Some("search failed: request rejected"),
                next_look: Some(search),
                then: Review(ReviewClass::SearchFailed),
            },
            Row {
                says: "unknown, at the stuck bound search finds it processing: its id recorded, review",
                found: unknown(2),
                now: stuck,
                stripe: found(vec![ours(Pi::Processing)]),
                calls: "search",
                status: Unknown,
                intent: pi_1,
                error: Some("stuck_processing: payment intent pi_1 still processing 72 h"),
                next_look: Some(stuck),
                then: Review(ReviewClass::StuckProcessing),
            },
            // An id recorded: read it back, inside the window or past it; never create or search.
            Row {
                says: "id recorded, in the window, retrieve succeeded: settled",
                found: recorded(2),
                now: T0.plus(HOUR),
                stripe: one(ours(Pi::Succeeded)),
                calls: "retrieve",
                status: Succeeded,
                intent: pi_1,
                error: None,
                next_look: None,
                then: Settled,
            },
            Row {
                says: "id recorded, past the window: still retrieve; canceled: failed, no cancel",
                found: recorded(2),
                now: search.plus(HOUR),
                stripe: one(ours(Pi::Canceled)),
                calls: "retrieve",
                status: Failed,
                intent: pi_1,
                error: Some("payment intent canceled"),
                next_look: None,
                then: Settled,
            },
            Row {
                says: "id recorded, retrieve requires_payment_method: canceled first, then failed",
                found: recorded(2),
                now: T0.plus(HOUR),
                stripe: [one(ours(Pi::RequiresPaymentMethod)), one(ours(Pi::Canceled))].concat(),
                calls: "retrieve, cancel",
                status: Failed,
                intent: pi_1,
                error: Some("payment intent requires_payment_method; payment intent pi_1 canceled"),
                next_look: None,
                then: Settled,
            },
            Row {
                says: "id recorded, declined, its cancel times out again: unknown, back off base * 2",
                found: recorded(2),
                now: T0.plus(HOUR),
                stripe: [one(ours(Pi::RequiresPaymentMethod)), fails(timeout())].concat(),
                calls: "retrieve, cancel",
                status: Unknown,
                intent: pi_1,
                error: Some("cancel of pi_1: outcome unknown"),
                next_look: Some(T0.plus(HOUR + 2 * MIN)),
                then: Scheduled,
            },
            Row {
                says: "id recorded, retrieve processing: unknown, back off base * 2",
                found: recorded(2),
                now: T0.plus(HOUR),
                stripe: one(ours(Pi::Processing)),
                calls: "retrieve",
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent processing"),
                next_look: Some(T0.plus(HOUR + 2 * MIN)),
                then: Scheduled,
            },
            Row {
                says: "id recorded, requires_action a moment before the stuck bound: back off",
                found: recorded(2),
                now: stuck.minus(MS),
                stripe: one(ours(Pi::RequiresAction)),
                calls: "retrieve",
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent requires_action"),
                next_look: Some(stuck.minus(MS).plus(2 * MIN)),
                then: Scheduled,
            },
            Row {
                says: "id recorded, requires_action at the stuck bound: review",
                found: recorded(2),
                now: stuck,
                stripe: one(ours(Pi::RequiresAction)),
                calls: "retrieve",
                status: Unknown,
                intent: pi_1,
                error: Some("stuck_requires_action"),
                next_look: Some(stuck),
                then: Review(ReviewClass::StuckRequiresAction),
            },
            Row {
                says: "id recorded, processing at the stuck bound: review",
                found: recorded(2),
                now: stuck,
                stripe: one(ours(Pi::Processing)),
                calls: "retrieve",
                status: Unknown,
                intent: pi_1,
                error: Some("stuck_processing"),
                next_look: Some(stuck),
                then: Review(ReviewClass::StuckProcessing),
            },
            Row {
                says: "id recorded, requires_capture at the stuck bound: not stuck (we, not others, must act), back off",
                found: recorded(2),
                now: stuck,
                stripe: one(ours(Pi::RequiresCapture)),
                calls: "retrieve",
                status: Unknown,
                intent: pi_1,
                error: Some("payment intent requires_capture"),
                next_look: Some(stuck.plus(2 * MIN)),
                then: Scheduled,
            },
            Row {
                says: "id recorded, retrieve answers someone else's intent: review",
                found: recorded(2),
                now: T0.plus(HOUR),
                stripe: one(theirs()),
                calls: "retrieve",
                status: Unknown,
                intent: None,
                error: Some("intent_mismatch"),
                next_look: Some(T0.plus(HOUR)),
                then: Review(ReviewClass::IntentMismatch),
            },
            Row {
                says: "id recorded, retrieve rate limited: status kept, message retried",
                found: recorded(2),
                now: T0.plus(HOUR),
                stripe: fails(retry(RetryCause::RateLimited)),
                calls: "retrieve",
                status: Unknown,
                intent: None,
                error: Some("retry later"),
                next_look: Some(T0.plus(HOUR + MIN)),
                then: Retry(RetryCause::RateLimited),
            },
            Row {
                says: "id recorded, retrieve times out: status kept, back off",
                found: recorded(2),
                now: T0.plus(HOUR),
                stripe: fails(timeout()),
                calls: "retrieve",
                status: Unknown,
                intent: None,
                error: Some("outcome unknown: timed out"),
                next_look: Some(T0.plus(HOUR + 2 * MIN)),
                then: Scheduled,
            },
            Row {
                says: "id recorded, Stripe does not know it (404): review",
                found: recorded(2),
                now: T0.plus(HOUR),
                stripe: fails(rejected()),
                calls: "retrieve",
                status: Unknown,
                intent: None,
                error: Some("retrieve of pi_1 failed: request rejected"),
                next_look: Some(T0.plus(HOUR)),
                then: Review(ReviewClass::RetrieveFailed),
            },
            Row {
                says: "id recorded, retrieve answers 402: review",
                found: recorded(2),
                now: T0.plus(HOUR),
                stripe: fails(declined(pi_1)),
                calls: "retrieve",
                status: Unknown,
                intent: None,
                error: Some("retrieve of pi_1 failed: declined"),
                next_look: Some(T0.plus(HOUR)),
                then: Review(ReviewClass::RetrieveFailed),
            },
            Row {
                says: "id recorded, retrieve answers idempotency_error: review",
                found: recorded(2),
                now: T0.plus(HOUR),
                stripe: fails(misuse()),
                calls: "retrieve",
                status: Unknown,
                intent: None,
                error: Some("retrieve of pi_1 failed: idempotency key misuse"),
                next_look: Some(T0.plus(HOUR)),
                then: Review(ReviewClass::RetrieveFailed),
            },
        ];
        // Every row is checked and every wrong one named, so a broken arm shows all it breaks.
        let mut wrong = Vec::new();
        for row in cases {
            let Row {
                says: spec,
                found: op,
                now,
                stripe: answers,
                calls: step,
                status,
                intent: external_id,
                error,
                next_look: due,
                then: want,
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
            let got = (d.status, d.external_id.as_deref(), d.next_due_at, then(&d));
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

    #[test]
    fn an_intent_is_the_operations_only_when_every_fact_agrees() {
        let op = testing::order("order-1").build();
        let ours = || PaymentIntent {
            amount: Some(1250),
            currency: Some("usd".into()),
            operation_id: Some(op.operation_id.to_string()),
            order_id: Some("order-1".into()),
            livemode: Some(false),
            ..PaymentIntent::new(
                PaymentIntentId::parse("pi_1").unwrap(),
                PaymentIntentStatus::Succeeded,
            )
        };
        type Alter = fn(&mut PaymentIntent);
        let cases: [(&str, Alter, bool, Option<Mismatch>); 11] = [
            ("ours", |_| {}, false, None),
            (
                "ours, live key and intent",
                |p| p.livemode = Some(true),
                true,
                None,
            ),
            (
                "an older release's intent: no order_id",
                |p| p.order_id = None,
                false,
                None,
            ),
            (
                "other operation",
                |p| p.operation_id = Some("x".into()),
                false,
                Some(Mismatch::OperationId),
            ),
            (
                "no operation id",
                |p| p.operation_id = None,
                false,
                Some(Mismatch::OperationId),
            ),
            (
                "other order",
                |p| p.order_id = Some("order-2".into()),
                false,
                Some(Mismatch::OrderId),
            ),
            (
                "other amount",
                |p| p.amount = Some(1251),
                false,
                Some(Mismatch::Amount),
            ),
            (
                "no amount",
                |p| p.amount = None,
                false,
                Some(Mismatch::Amount),
            ),
            (
                "other currency",
                |p| p.currency = Some("eur".into()),
                false,
                Some(Mismatch::Currency),
            ),
            (
                "live intent, test key",
                |p| p.livemode = Some(true),
                false,
                Some(Mismatch::Livemode),
            ),
            (
                "mode unknown",
                |p| p.livemode = None,
                false,
                Some(Mismatch::Livemode),
            ),
        ];
        for (name, alter, live, want) in cases {
            let mut pi = ours();
            alter(&mut pi);
            assert_eq!(intent_mismatch(&op, &pi, live), want, "{name}");
        }
    }

    #[test]
    fn a_search_that_finds_someone_elses_intent_reviews_instead_of_settling() {
        let policy = Policy::default();
        let mut op = testing::order("order-1").build();
        op.first_attempted_at = Some(op.created_at);
        let mut pi = PaymentIntent::new(
            PaymentIntentId::parse("pi_1").unwrap(),
            PaymentIntentStatus::Succeeded,
        );
        pi.operation_id = Some(op.operation_id.to_string());
        pi.amount = Some(999);
        pi.currency = Some("usd".into());
        pi.livemode = Some(false);
        let d = after_search(&op, Ok(vec![pi]), op.created_at, &policy, false);
        assert_eq!(
            d.review.map(|(class, _)| class),
            Some(ReviewClass::IntentMismatch)
        );
        assert_eq!(d.status, op.status, "not settled");
        assert_eq!(d.external_id, None, "its id is not recorded");
    }

    /// An authorization (`capture: manual`) as the plan reads Stripe's answers: `requires_capture`
    /// is `authorized` with Stripe's deadline, due at the page's moment; within the lead it pages
    /// and is due just after the deadline; lapsed is `failed` (expired); captured is `succeeded`
    /// with what was taken. The twin: the same answers for an automatic charge keep their rules.
    #[test]
    fn an_authorization_is_watched_until_its_deadline() {
        let policy = Policy::default();
        let deadline = T0.plus(96 * HOUR);
        let manual = || {
            let mut op = testing::order("ord-auth").manual().amount(1000).build();
            op.attempts = 1;
            op.first_attempted_at = Some(T0);
            op
        };
        let held = |capture_before: Option<Timestamp>| {
            let op = manual();
            let mut pi = PaymentIntent::new(
                PaymentIntentId::parse("pi_auth").unwrap(),
                Pi::RequiresCapture,
            );
            pi.amount = Some(1000);
            pi.currency = Some("usd".into());
            pi.operation_id = Some(op.operation_id.to_string());
            pi.order_id = Some("ord-auth".into());
            pi.livemode = Some(false);
            pi.capture_before = capture_before;
            (op, pi)
        };
        // Created: authorized, the deadline from Stripe, due when the page must go out.
        let (op, pi) = held(Some(deadline));
        let d = after_create(&op, Ok(pi.clone()), T0, &policy, false);
        assert_eq!(d.status, OperationStatus::Authorized);
        assert_eq!(
            d.next_due_at,
            Some(deadline.minus(policy.authorization_page_lead))
        );
        let hold = d.authorization.unwrap();
        assert_eq!(
            (hold.capture_before, hold.deadline_near),
            (Some(deadline), false)
        );
        assert_eq!(d.then, None);
        // The answer states no deadline: it is read at once.
        let undated = PaymentIntent {
            capture_before: None,
            ..pi.clone()
        };
        let d = after_create(&op, Ok(undated), T0, &policy, false);
        assert!(matches!(d.then, Some(FollowUp::ReadDeadline { .. })));
        assert_eq!(d.status, OperationStatus::Authorized);
        // Looked at within the lead: pages, due just after the deadline.
        let mut authorized = Operation {
            status: OperationStatus::Authorized,
            external_id: Some(pi.id.clone()),
            ..op.clone()
        };
        authorized.params.charge_state_mut().unwrap().capture_before = Some(deadline);
        let late = deadline.minus(HOUR);
        let d = after_retrieve(&authorized, Ok(pi.clone()), late, &policy, false);
        assert!(d.authorization.unwrap().deadline_near);
        assert_eq!(d.next_due_at, Some(deadline.plus(policy.retry_after)));
        // Lapsed: Stripe canceled it at the deadline.
        let mut lapsed = pi.clone();
        lapsed.status = Pi::Canceled;
        lapsed.cancellation_reason = Some("automatic".into());
        let d = after_retrieve(&authorized, Ok(lapsed), deadline.plus(MIN), &policy, false);
        assert_eq!(d.status, OperationStatus::Failed);
        assert_eq!(d.last_error.as_deref(), Some(AUTHORIZATION_EXPIRED));
        // Captured (by our capture, or seen before its write): succeeded, with what was taken.
        let mut captured = pi.clone();
        captured.status = Pi::Succeeded;
        captured.amount_received = Some(700);
        let d = after_retrieve(&authorized, Ok(captured), late, &policy, false);
        assert_eq!(d.status, OperationStatus::Succeeded);
        assert_eq!(
            d.authorization.unwrap().amount_captured,
            Some(crate::domain::Amount::new(700).unwrap())
        );
        // The twin: an automatic charge's `requires_capture` is no authorization of ours.
        let automatic = Operation {
            params: testing::order("ord-auth").amount(1000).build().params,
            ..op
        };
        let d = after_create(&automatic, Ok(pi), T0, &policy, false);
        assert_eq!(d.status, OperationStatus::Unknown);
        assert_eq!(d.authorization, None);
    }
}
