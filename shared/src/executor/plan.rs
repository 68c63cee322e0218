//! The charge state machine as pure functions of (record, gateway answer, now): no I/O, so every
//! seed scenario and every edge is a plain unit test.

use crate::domain::PaymentIntentId;
use crate::operation::{Operation, OperationStatus};
use crate::outcome::{outcome_for, GatewayError, PaymentIntent, PaymentIntentStatus};
use crate::time::Timestamp;

use super::{ChargePolicy, Disposition};
use crate::webhook::event::{decide, Action};

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
pub fn next_step(op: &Operation, now: Timestamp, policy: &ChargePolicy) -> Step {
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

/// When search may settle an operation: the key window plus Stripe's search lag, measured from the
/// first attempt. A create made late in the window is covered because the window closes all creates
/// `search_min_age` before search opens.
pub fn search_allowed_at(op: &Operation, policy: &ChargePolicy) -> Timestamp {
    let first = op.first_attempted_at.unwrap_or(op.created_at);
    first.plus(policy.key_window).plus(policy.search_min_age)
}

/// Why an operation went to review, as a small fixed set: the `ReasonClass` dimension of the
/// `SentToReview` metric (the reason itself is free text on the record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReviewClass {
    /// 400 `idempotency_error`: a bug in key derivation.
    KeyMisuse,
    /// Stripe refused the create as invalid (amount below minimum, unknown customer, ...).
    Rejected,
    /// A recorded PaymentIntent id could not be read back.
    RetrieveFailed,
    /// Past the key window, search found 0 or more than 1 PaymentIntent.
    SearchAmbiguous,
    /// Past the key window, search itself was refused.
    SearchFailed,
    /// The PaymentIntent stayed `requires_action` past the stuck bound.
    StuckRequiresAction,
    /// The PaymentIntent stayed `processing` past the stuck bound.
    StuckProcessing,
    /// Stripe answered with a PaymentIntent that is not this operation's (its metadata, amount,
    /// currency or mode differ from the record): nothing is settled from it.
    IntentMismatch,
    /// A succeeded PaymentIntent other than the recorded one (a Stripe event told of it): a
    /// suspected double charge.
    SecondPaymentIntent,
}

impl ReviewClass {
    pub fn as_str(&self) -> &'static str {
        match self {
            ReviewClass::KeyMisuse => "key_misuse",
            ReviewClass::Rejected => "rejected",
            ReviewClass::RetrieveFailed => "retrieve_failed",
            ReviewClass::SearchAmbiguous => "search_ambiguous",
            ReviewClass::SearchFailed => "search_failed",
            ReviewClass::StuckRequiresAction => "stuck_requires_action",
            ReviewClass::StuckProcessing => "stuck_processing",
            ReviewClass::IntentMismatch => "intent_mismatch",
            ReviewClass::SecondPaymentIntent => "second_payment_intent",
        }
    }
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
/// is not ours), with one exception: `metadata.order_id`, which releases before issue 17 did not
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
    if pi.amount != Some(op.params.amount.minor_units()) {
        return Some(Mismatch::Amount);
    }
    if pi.currency.as_deref() != Some(op.params.currency.as_str()) {
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

/// The next record for an operation, and what it means for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub status: OperationStatus,
    pub external_id: Option<PaymentIntentId>,
    pub last_error: Option<String>,
    /// A reason for review, when a person must decide.
    pub review: Option<String>,
    /// `None` when settled.
    pub next_due_at: Option<Timestamp>,
    pub disposition: Disposition,
    /// Why it goes to review (`Some` exactly when `review` is).
    pub review_class: Option<ReviewClass>,
}

impl Decision {
    /// What a PaymentIntent Stripe just answered with means for the operation: checked to be the
    /// operation's first ([`intent_mismatch`]), then settled, reviewed as stuck, or looked at again.
    fn from_payment_intent(
        op: &Operation,
        pi: PaymentIntent,
        now: Timestamp,
        policy: &ChargePolicy,
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
        let status = outcome_for(&pi.status);
        if status.is_settled() {
            Decision {
                status,
                last_error: (status == OperationStatus::Failed)
                    .then(|| format!("payment intent {}", pi.status)),
                external_id: Some(pi.id),
                review: None,
                next_due_at: None,
                disposition: Disposition::Settled,
                review_class: None,
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
                disposition: Disposition::Scheduled,
                review_class: None,
            }
        }
    }

    /// The status stays as it was; only the error and the next look change.
    fn unchanged(
        op: &Operation,
        error: &GatewayError,
        next_due_at: Timestamp,
        disposition: Disposition,
    ) -> Self {
        Decision {
            status: op.status,
            external_id: None,
            last_error: Some(error.to_string()),
            review: None,
            next_due_at: Some(next_due_at),
            disposition,
            review_class: None,
        }
    }

    /// Flags for review; the index orders review items by when they were flagged.
    fn review(status: OperationStatus, reason: String, class: ReviewClass, now: Timestamp) -> Self {
        Decision {
            status,
            external_id: None,
            last_error: Some(reason.clone()),
            review: Some(reason.clone()),
            next_due_at: Some(now),
            disposition: Disposition::InReview(reason),
            review_class: Some(class),
        }
    }
}

/// True once the operation has waited longer than the stuck bound since its first attempt.
pub fn stuck(op: &Operation, now: Timestamp, policy: &ChargePolicy) -> bool {
    op.first_attempted_at
        .is_some_and(|first| now >= first.plus(policy.stuck_after))
}

/// Backoff for an unknown outcome: `base * 2^(attempts-1)`, capped, never past the moment search
/// may settle it.
pub fn unknown_due_at(op: &Operation, now: Timestamp, policy: &ChargePolicy) -> Timestamp {
    backoff_due_at(op, now, policy, op.attempts.saturating_sub(1))
}

/// The one back-off curve, for the executor's unknowns and the reconciler's re-drives:
/// `now + base * 2^step`, capped at `unknown_backoff_max`; for an attempted operation, never past
/// the moment search may settle it (unless that moment has come already).
pub fn backoff_due_at(
    op: &Operation,
    now: Timestamp,
    policy: &ChargePolicy,
    step: u32,
) -> Timestamp {
    let backoff = policy
        .unknown_backoff_base
        .saturating_mul(1u32 << step.min(20))
        .min(policy.unknown_backoff_max);
    let due = now.plus(backoff);
    if op.first_attempted_at.is_none() {
        return due;
    }
    let search_at = search_allowed_at(op, policy);
    if due > search_at && now < search_at {
        search_at
    } else {
        due
    }
}

/// After a create with the operation's key.
pub fn after_create(
    op: &Operation,
    result: Result<PaymentIntent, GatewayError>,
    now: Timestamp,
    policy: &ChargePolicy,
    livemode: bool,
) -> Decision {
    let err = match result {
        Ok(pi) => return Decision::from_payment_intent(op, pi, now, policy, livemode),
        Err(err) => err,
    };
    match &err {
        // Stripe executed the request and the card was declined: settled, never retried.
        GatewayError::Declined {
            payment_intent_id, ..
        } => Decision {
            status: OperationStatus::Failed,
            external_id: payment_intent_id.clone(),
            last_error: Some(err.to_string()),
            review: None,
            next_due_at: None,
            disposition: Disposition::Settled,
            review_class: None,
        },
        // Certainly nothing happened: keep the status, come back soon with the same key.
        GatewayError::RetryLater { cause, .. } => Decision::unchanged(
            op,
            &err,
            now.plus(policy.retry_after),
            Disposition::RetryLater(*cause),
        ),
        // It may have charged. Unknown, never failed; the same key makes the next create safe.
        GatewayError::Ambiguous { .. } => Decision {
            status: OperationStatus::Unknown,
            external_id: None,
            last_error: Some(err.to_string()),
            review: None,
            next_due_at: Some(unknown_due_at(op, now, policy)),
            disposition: Disposition::Scheduled,
            review_class: None,
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
        // retrying would be refused the same way: review, with the status left as it was.
        GatewayError::Rejected { .. } => {
            Decision::review(op.status, err.to_string(), ReviewClass::Rejected, now)
        }
    }
}

/// After reading a PaymentIntent whose id we had recorded.
pub fn after_retrieve(
    op: &Operation,
    result: Result<PaymentIntent, GatewayError>,
    now: Timestamp,
    policy: &ChargePolicy,
    livemode: bool,
) -> Decision {
    let err = match result {
        Ok(pi) => return Decision::from_payment_intent(op, pi, now, policy, livemode),
        Err(err) => err,
    };
    match &err {
        GatewayError::RetryLater { cause, .. } => Decision::unchanged(
            op,
            &err,
            now.plus(policy.retry_after),
            Disposition::RetryLater(*cause),
        ),
        GatewayError::Ambiguous { .. } => Decision::unchanged(
            op,
            &err,
            unknown_due_at(op, now, policy),
            Disposition::Scheduled,
        ),
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
    policy: &ChargePolicy,
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
            Decision::unchanged(
                op,
                &err,
                now.plus(policy.retry_after),
                Disposition::Scheduled,
            )
        }
        Err(err) => Decision::review(
            OperationStatus::Unknown,
            format!("search failed: {err}"),
            ReviewClass::SearchFailed,
            now,
        ),
    }
}

/// Past the key window but before search can be trusted: release the lease and come back then.
pub fn wait_for_search(op: &Operation, until: Timestamp) -> Decision {
    release(op, until)
}

/// Releases the lease and changes nothing else but the next look.
fn release(op: &Operation, next_due_at: Timestamp) -> Decision {
    Decision {
        status: op.status,
        external_id: None,
        last_error: op.last_error.clone(),
        review: None,
        next_due_at: Some(next_due_at),
        disposition: Disposition::Scheduled,
        review_class: None,
    }
}

/// After a Stripe event made us retrieve one of the operation's PaymentIntents (`pi` is Stripe's
/// answer, never the event's copy), on the record as claimed: the event rule
/// ([`crate::webhook::event::decide`]) says what it means, and the same answer rules as the
/// executor's ([`Decision::from_payment_intent`]: the intent is checked to be the operation's,
/// then settled, reviewed as stuck or recorded as unknown) make the record. Nothing that is not
/// new changes the record, not even its next look.
pub fn after_event(
    op: &Operation,
    pi: PaymentIntent,
    now: Timestamp,
    policy: &ChargePolicy,
    livemode: bool,
) -> (Action, Decision) {
    let action = decide(op, &pi.id, &pi.status);
    let decision = match &action {
        Action::Settle { .. } | Action::RecordIntent { .. } => {
            Decision::from_payment_intent(op, pi, now, policy, livemode)
        }
        Action::Review { external_id } => Decision::review(
            op.status,
            format!(
                "{}: payment intent {external_id} succeeded; recorded {}",
                ReviewClass::SecondPaymentIntent.as_str(),
                op.external_id.as_deref().unwrap_or("none")
            ),
            ReviewClass::SecondPaymentIntent,
            now,
        ),
        Action::Ignore(_) | Action::PageSettled { .. } => {
            release(op, op.next_due_at.unwrap_or(now))
        }
    };
    (action, decision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

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
                "before issue 17: no order_id",
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
        let policy = ChargePolicy::default();
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
        assert_eq!(d.review_class, Some(ReviewClass::IntentMismatch));
        assert_eq!(d.status, op.status, "not settled");
        assert_eq!(d.external_id, None, "its id is not recorded");
    }
}
