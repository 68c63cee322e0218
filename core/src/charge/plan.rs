//! The charge state machine as pure functions of (record, gateway answer, now): no I/O, so every
//! edge is a row of one table, the rules in full: `core/tests/spec_charge_plan.rs`.
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
    /// (lapsed when Stripe canceled it, `cancellation_reason` `automatic` or `expired`; else canceled). `None`:
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
                let error = if pi.lapsed() {
                    AUTHORIZATION_EXPIRED
                } else {
                    CANCELED_BY_MERCHANT
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
        GatewayError::Rejected { .. }
        | GatewayError::UnexpectedState { .. }
        | GatewayError::ChargeDisputed { .. } => {
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
        GatewayError::Rejected { .. }
        | GatewayError::Declined { .. }
        | GatewayError::ChargeDisputed { .. } => Decision {
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
    use crate::outcome::PaymentIntentStatus as Pi;
    use crate::testing::{self, T0};

    const MIN: Duration = Duration::from_secs(60);
    const HOUR: Duration = Duration::from_secs(3600);

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
        // Lapsed: Stripe canceled it at the deadline, in the pinned version's word and in the
        // current one's; the merchant's cancel is the twin.
        for (reason, error) in [
            ("automatic", AUTHORIZATION_EXPIRED),
            ("expired", AUTHORIZATION_EXPIRED),
            ("requested_by_customer", CANCELED_BY_MERCHANT),
        ] {
            let mut lapsed = pi.clone();
            lapsed.status = Pi::Canceled;
            lapsed.cancellation_reason = Some(reason.into());
            let d = after_retrieve(&authorized, Ok(lapsed), deadline.plus(MIN), &policy, false);
            assert_eq!(d.status, OperationStatus::Failed);
            assert_eq!(d.last_error.as_deref(), Some(error), "{reason}");
        }
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
