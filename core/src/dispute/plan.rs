//! A dispute's plan: (its record as read or none, its order's charge as read, the dispute as
//! Stripe holds it, now) → the write that makes the record say what Stripe holds, or why nothing
//! is written. The events function asks it after retrieving the dispute an event named; the
//! reconciler asks it after re-reading an open one. Either way the dispute was read at Stripe:
//! an event's copy is never an input. The rules: `tests/spec_dispute.rs`.
//!
//! In refusal order:
//! 1. No charge of ours under the dispute's PaymentIntent (no record, or its `external_id` is
//!    another intent): not ours, nothing written (the caller counts it).
//! 2. Stripe's amount or currency is none a record can hold: nothing written, said why.
//! 3. The record settled: final, nothing written, whatever Stripe says now.
//! 4. What the record would hold is what it holds: nothing written.
//! 5. Else the write: `create` the first record (`unknown` while open), or `move` it (Stripe's
//!    status, deadline, evidence or refundable changed), settling it once Stripe closed it —
//!    `lost` → `succeeded` (the bank's take succeeded), `won` / `warning_closed` → `failed`
//!    (nothing taken in the end). Open, it is due again when the deadline's rule says
//!    ([`super::deadline`]: as the page window opens, at `due_by`, else daily), never sooner
//!    than an hour away.
//!
//! The money (design: "money conserved, by the store"): once Stripe withdrew the funds (any
//! status but an inquiry's `warning_*` and `won`), the disputed amount is reserved on the
//! order's charge beside its refunds, in the same write, by the refund's own guards (succeeded,
//! room left); `won` gives it back in the write that settles it; `lost` keeps it. A dispute
//! whose amount does not fit (the order was refunded already) is recorded all the same, without
//! the reservation, its reason in `last_error` ([`ReviewClass::DisputeUnreserved`]'s name): it
//! is Stripe's fact, never dropped. It is NOT put in review: a record in review leaves the due
//! index, so it would never be read again (its deadline would not page, and a lost closing
//! event would leave it open while Stripe holds it closed), and nobody may settle a dispute by
//! hand. It stays on its re-read schedule like any open dispute, and the shell counts every
//! write of it (`DisputeUnreserved`, paged) — see [`DisputeWrite::unreserved`]. The charge names the open dispute and whether Stripe says it is
//! still refundable (the refund door's rule), cleared once the dispute closes.

use super::deadline::{deadline, DeadlineFacts};
use super::state::{DisputeParams, DisputeState};
use super::{DisputeStatus, StripeDispute};
use crate::operation::{Operation, OperationStatus};
use crate::plan::{DisputePolicy, ReviewClass};
use crate::store::{DisputeMark, DisputeMove, DisputeOnCharge};
use crate::time::Timestamp;

/// The write a dispute needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DisputeWrite {
    /// Its first record, created beside its charge's side (`OperationCreates::create_beside`
    /// with [`crate::store_rules::ChargeClaim::Dispute`]).
    Create {
        record: Box<Operation>,
        on_charge: DisputeOnCharge,
    },
    /// The record moved to what Stripe holds (settled once Stripe closed it), beside its
    /// charge's side if that changes.
    Move(Box<DisputeMove>),
    /// Nothing to write.
    Nothing(Unchanged),
}

impl DisputeWrite {
    /// Whether the record this writes holds a dispute whose funds Stripe withdrew without its
    /// reservation (its amount did not fit the order's refunds): the shell counts it
    /// (`DisputeUnreserved`, paged) on every such write, so the finding pages until Stripe
    /// closes the dispute, while the record stays on its re-read schedule.
    pub fn unreserved(&self) -> bool {
        let error = match self {
            DisputeWrite::Create { record, .. } => record.last_error.as_deref(),
            DisputeWrite::Move(change) => change.last_error.as_deref(),
            DisputeWrite::Nothing(_) => None,
        };
        error.is_some_and(|e| {
            e.strip_prefix(ReviewClass::DisputeUnreserved.as_str())
                .is_some_and(|rest| rest.starts_with(':'))
        })
    }
}

/// Why a dispute needs no write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unchanged {
    /// No charge of ours under its PaymentIntent: not ours.
    NotOurs,
    /// Stripe's amount or currency cannot be held by a record (the reason).
    Unrecordable(String),
    /// The record settled: final.
    Settled,
    /// The record holds what Stripe holds.
    AsStripeHolds,
}

impl Unchanged {
    /// The name in logs and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            Unchanged::NotOurs => "not_ours",
            Unchanged::Unrecordable(_) => "unrecordable",
            Unchanged::Settled => "settled",
            Unchanged::AsStripeHolds => "as_stripe_holds",
        }
    }
}

/// What a dispute's status means for its record.
pub fn status_of(status: &DisputeStatus) -> OperationStatus {
    match status {
        DisputeStatus::Lost => OperationStatus::Succeeded,
        DisputeStatus::Won | DisputeStatus::WarningClosed => OperationStatus::Failed,
        _ => OperationStatus::Unknown,
    }
}

/// Whether Stripe holds the disputed funds withdrawn: any status but an inquiry's and `won`
/// (a status this code does not know counts as withdrawn: the door then refuses a refund
/// rather than pay twice).
pub fn funds_withdrawn(status: &DisputeStatus) -> bool {
    !status.is_inquiry() && *status != DisputeStatus::Won
}

/// When an open dispute is read again: when the evidence deadline's rule says
/// ([`crate::dispute::deadline::deadline`]: as its page window opens, at `due_by` while it needs
/// a response, else daily), never later than `now + reread_at_most`, never sooner than
/// `now + reread_at_least`.
pub fn next_read_at(dispute: &StripeDispute, now: Timestamp, policy: &DisputePolicy) -> Timestamp {
    let latest = now.plus(policy.reread_at_most);
    deadline(&DeadlineFacts::of(dispute), now, policy.page_window)
        .due_again
        .map_or(latest, |at| at.min(latest))
        .max(now.plus(policy.reread_at_least))
}

/// The write that makes `record` (the dispute's, as read; `None` before the first) say what
/// Stripe holds of `dispute`, beside `charge` (the order's charge as read, found by the
/// dispute's PaymentIntent). See the module doc for the rules, in order.
pub fn plan(
    record: Option<&Operation>,
    charge: Option<&Operation>,
    dispute: &StripeDispute,
    now: Timestamp,
    policy: &DisputePolicy,
) -> DisputeWrite {
    let Some((charge, intent)) = charge.and_then(|c| {
        let intent = dispute.payment_intent.as_ref()?;
        (c.kind.is_charge() && c.external_id.as_ref() == Some(intent)).then_some((c, intent))
    }) else {
        return DisputeWrite::Nothing(Unchanged::NotOurs);
    };
    let params = match DisputeParams::of(dispute, intent.clone()) {
        Ok(params) => DisputeParams {
            charge_attempt: charge.kind.attempt_no().unwrap_or(1),
            ..params
        },
        Err(e) => return DisputeWrite::Nothing(Unchanged::Unrecordable(e.to_string())),
    };
    if record.is_some_and(|r| r.status.is_settled()) {
        return DisputeWrite::Nothing(Unchanged::Settled);
    }
    let was_reserved = record
        .and_then(|r| r.params.dispute_state())
        .is_some_and(|s| s.reserved);
    let in_review = record.is_some_and(|r| r.review.is_some());
    let status = status_of(&dispute.status);
    // The money: reserve once withdrawn, if it fits; give back once won.
    let wants = funds_withdrawn(&dispute.status);
    let fits = charge.status == OperationStatus::Succeeded
        && charge.amount_taken().minor_units() - charge.refund_reserved()
            >= params.amount.minor_units();
    let reserve =
        (wants && !was_reserved && fits).then_some((params.amount, charge.amount_taken()));
    let give_back = (!wants && was_reserved).then_some(params.amount);
    let reserved = (was_reserved || reserve.is_some()) && give_back.is_none();
    let unreserved = wants && !was_reserved && !fits;
    let last_error = unreserved.then(|| unreserved_reason(&params, charge));
    // The charge's open dispute.
    let state = DisputeState::of(dispute, reserved);
    let mark = if status.is_settled() {
        DisputeMark::Clear
    } else {
        DisputeMark::Open {
            dispute: params.dispute_id.clone(),
            refundable: dispute.is_charge_refundable,
        }
    };
    let charge_state = charge.params.charge_state();
    let marked = match &mark {
        DisputeMark::Open {
            dispute,
            refundable,
        } => charge_state.is_some_and(|c| {
            c.disputed_by.as_ref() == Some(dispute) && c.dispute_refundable == *refundable
        }),
        // Cleared only if it names this dispute (Stripe holds one dispute per charge; a
        // charge naming another is left as it is).
        DisputeMark::Clear | DisputeMark::Keep => charge_state.is_none_or(|c| {
            c.disputed_by
                .as_ref()
                .is_none_or(|named| *named != params.dispute_id)
        }),
    };
    let on_charge = DisputeOnCharge {
        charge: charge.key(),
        charge_operation_id: charge.operation_id,
        mark: if marked { DisputeMark::Keep } else { mark },
        reserve,
        give_back,
        now,
    };
    let charge_changes =
        on_charge.mark != DisputeMark::Keep || reserve.is_some() || give_back.is_some();
    let next_due_at = (!status.is_settled()).then(|| next_read_at(dispute, now, policy));
    let Some(record) = record else {
        let mut created = Operation::new_dispute(
            charge.order_id.clone(),
            params,
            state,
            now,
            next_due_at.unwrap_or(now),
        );
        created.status = status;
        created.last_error = last_error;
        if status.is_settled() {
            created.next_due_at = None;
            created.settled_at = Some(now);
        }
        return DisputeWrite::Create {
            record: Box::new(created),
            on_charge,
        };
    };
    let held = record.params.dispute_state();
    // Read again because it was due (the reconciler's re-read): unchanged at Stripe, it still
    // moves to its next read, or it would be read again every tick.
    let due = !in_review && record.next_due_at.is_some_and(|at| at <= now);
    if record.status == status && held == Some(&state) && !charge_changes && !due {
        return DisputeWrite::Nothing(Unchanged::AsStripeHolds);
    }
    DisputeWrite::Move(Box::new(DisputeMove {
        key: record.key(),
        operation_id: record.operation_id,
        expected_updated_at: record.updated_at,
        status,
        state,
        next_due_at,
        review: None,
        last_error,
        in_review,
        on_charge: charge_changes.then_some(on_charge),
        now,
    }))
}

/// Why a dispute was recorded without its reservation: its order's refunds leave too little.
fn unreserved_reason(params: &DisputeParams, charge: &Operation) -> String {
    format!(
        "{}: dispute {} takes {} of charge {} which has {} of {} refunded or disputed already: refunded + disputed would exceed what was taken",
        ReviewClass::DisputeUnreserved.as_str(),
        params.dispute_id,
        params.amount.minor_units(),
        charge.external_id.as_deref().unwrap_or("-"),
        charge.refund_reserved(),
        charge.amount_taken().minor_units(),
    )
}
