//! The store's rules, written once: which conditional write may change a record, and how.
//!
//! Each write of the `OperationStore` port (claim, record, reschedule,
//! resolve) is a [`Transition`]: a list of [`Guard`]s, what must hold of the stored record, and a
//! change, what the write does to it. [`apply`] is the write as a pure function of the record:
//! the record after it, or the guard that refused it. The in-memory stores (`MemoryStore`, the
//! simulation's `SimStore`) call it under their lock; the DynamoDB adapter sends the same guards as
//! one condition expression, one clause per guard (`adapters::dynamodb::writes`), and
//! `tests/store_rules_on_aws.rs` holds each guard to its clause and each change to its update
//! expression on moto.
//!
//! "Settled is final" is [`Guard::Unsettled`], in every write's list. An operator's re-drive that
//! takes an operation out of review is a [`Reschedule`] with `clear_review`: the same guards as
//! the reconciler's plus [`Guard::NoLeaseAfter`], and the review leaves the record.
//!
//! The invariants the port documents are asserted (`debug_assert!`) on every record a transition
//! writes, not filled in: an unsettled record has a due time and a settled one none
//! ([`Operation::next_due_at`]); an attempted record has `first_attempted_at`.

use crate::domain::OperationId;
use crate::domain::OperationKind;
use crate::operation::{LeaseToken, Operation, OperationKey, OperationStatus, Params};
use crate::store::{
    AuthorizationOutcome, Claim, ClaimRequest, DisputeMark, DisputeMove, DisputeOnCharge,
    ManualResolution, NewAttempt, OutcomeRecord, Recorded, RefundFailedLater, ReleaseRefund,
    Reschedule, ReserveRefund, SettleAuthorization, TakeAuthorization, TakeFrom,
};
use crate::time::Timestamp;

/// One condition a write is guarded by. The first that does not hold is the reason it was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// The record is this operation's: a message for an older operation that was replaced must
    /// not drive the new one.
    IsOperation(OperationId),
    /// Pending, unknown or authorized: a settled record is final.
    Unsettled,
    /// Not waiting for a person: only an operator acts on a record in review.
    NotInReview,
    /// No lease that expires after this time: for a claim, no live lease at its `now`; for an
    /// operator, none that may still be live by the operator's clock (its `lease_cutoff`).
    NoLeaseAfter(Timestamp),
    /// The writer holds the lease with this token (the fence of an outcome).
    HoldsLease(LeaseToken),
    /// The status is the one the writer read.
    StatusIs(OperationStatus),
    /// Nobody wrote since the writer read the record (`updated_at` is the one read).
    UpdatedAt(Timestamp),
    /// The record is in the unknown index (it has a due time). Implied by `Unsettled` on every
    /// record a transition wrote; DynamoDB checks it as `attribute_exists(due_shard)`.
    Scheduled,
    /// The status asked for is settled (a resolution settles). A guard on the request, not on the
    /// record: DynamoDB checks it before sending anything.
    Settles(OperationStatus),
    /// The record is a charge (what refunds reserve against).
    IsCharge,
    /// The charge's refunds have reserved at most this much (minor units): room is left for the
    /// refund being reserved.
    ReservedAtMost(i64),
    /// The charge's refunds have reserved at least this much: the reservation being given back
    /// is there to give back.
    ReservedAtLeast(i64),
    /// The record is a refund.
    IsRefund,
    /// No capture or cancel took the charge (`taken_by` absent).
    NotTaken,
    /// The capture or cancel with this operation id took the charge.
    TakenBy(OperationId),
    /// No cancel took the charge: `taken_by` absent, or a capture's (a capture that found the
    /// authorization lapsed at Stripe leaves its name on a charge that ended `failed`, nothing
    /// taken: the order was never paid, and nobody canceled it).
    NotCanceled,
    /// Never claimed for a Stripe call (`first_attempted_at` absent): nothing was ever sent.
    NeverAttempted,
    /// `authorized`, or already this status (a capture's or cancel's outcome over a charge whose
    /// own look at Stripe recorded the same end first).
    AuthorizedOr(OperationStatus),
    /// The order's head names this attempt as its latest (`latest_attempt`, absent for 1): the
    /// guard two retries race for ([`start_attempt`]).
    LatestAttemptIs(u32),
}

impl Guard {
    /// Whether the guard holds of the stored record `op`.
    pub fn holds(&self, op: &Operation) -> bool {
        match *self {
            Guard::IsOperation(id) => op.operation_id == id,
            Guard::Unsettled => !op.status.is_settled(),
            Guard::NotInReview => op.review.is_none(),
            Guard::NoLeaseAfter(t) => op.lease.is_none_or(|l| l.expires_at <= t),
            Guard::HoldsLease(token) => op.lease.is_some_and(|l| l.token == token),
            Guard::StatusIs(status) => op.status == status,
            Guard::UpdatedAt(t) => op.updated_at == t,
            Guard::Scheduled => op.next_due_at.is_some(),
            Guard::Settles(status) => status.is_settled(),
            Guard::IsCharge => op.kind.is_charge(),
            Guard::ReservedAtMost(max) => op.refund_reserved() <= max,
            Guard::ReservedAtLeast(min) => op.refund_reserved() >= min,
            Guard::IsRefund => matches!(op.kind, OperationKind::Refund(_)),
            Guard::NotTaken => op.taken_by().is_none(),
            Guard::TakenBy(id) => op.taken_by().is_some_and(|t| t.operation_id == id),
            Guard::NotCanceled => op.taken_by().is_none_or(|t| t.capture),
            Guard::NeverAttempted => op.first_attempted_at.is_none(),
            Guard::AuthorizedOr(status) => {
                op.status == OperationStatus::Authorized || op.status == status
            }
            // As DynamoDB reads it: an absent `latest_attempt` is 1 (on any record; the write's
            // `IsCharge` comes first).
            Guard::LatestAttemptIs(n) => op.latest_attempt() == n,
        }
    }

    /// A short name for logs and test tables.
    pub fn as_str(&self) -> &'static str {
        match self {
            Guard::IsOperation(_) => "is_operation",
            Guard::Unsettled => "unsettled",
            Guard::NotInReview => "not_in_review",
            Guard::NoLeaseAfter(_) => "no_lease_after",
            Guard::HoldsLease(_) => "holds_lease",
            Guard::StatusIs(_) => "status_is",
            Guard::UpdatedAt(_) => "updated_at",
            Guard::Scheduled => "scheduled",
            Guard::Settles(_) => "settles",
            Guard::IsCharge => "is_charge",
            Guard::ReservedAtMost(_) => "reserved_at_most",
            Guard::ReservedAtLeast(_) => "reserved_at_least",
            Guard::IsRefund => "is_refund",
            Guard::NotTaken => "not_taken",
            Guard::TakenBy(_) => "taken_by",
            Guard::NotCanceled => "not_canceled",
            Guard::NeverAttempted => "never_attempted",
            Guard::AuthorizedOr(_) => "authorized_or",
            Guard::LatestAttemptIs(_) => "latest_attempt_is",
        }
    }
}

/// A conditional write of the operation store.
pub trait Transition {
    /// What must hold of the stored record, in the order a refusal names the first that fails.
    fn guards(&self) -> Vec<Guard>;

    /// The change itself, on a record the guards accepted.
    fn change(&self, op: &mut Operation);
}

/// The first of `guards` that does not hold of `op`.
pub fn check(op: &Operation, guards: &[Guard]) -> Result<(), Guard> {
    match guards.iter().find(|g| !g.holds(op)) {
        Some(refused) => Err(*refused),
        None => Ok(()),
    }
}

/// `op` after `write`, or the guard that refused it.
pub fn apply(op: &Operation, write: &impl Transition) -> Result<Operation, Guard> {
    apply_guarded(op, write, &write.guards())
}

/// As [`apply`], checking `guards` instead of the write's own (the simulation's mutations, which
/// drop one to show that the judge notices).
pub fn apply_guarded(
    op: &Operation,
    write: &impl Transition,
    guards: &[Guard],
) -> Result<Operation, Guard> {
    check(op, guards)?;
    let mut next = op.clone();
    write.change(&mut next);
    stamp_settled(op, &mut next);
    debug_assert_invariants(&next);
    Ok(next)
}

/// Every write that settles a record (unsettled before, `succeeded` or `failed` after) stamps its
/// settle time, here in one place rather than in each transition's change: the write's own time,
/// the `updated_at` it sets. A settled record's later writes (a refund's reservation, a refund
/// failed after it succeeded) keep the first.
pub fn stamp_settled(before: &Operation, after: &mut Operation) {
    if !before.status.is_settled() && after.status.is_settled() {
        after.settled_at = Some(after.updated_at);
    }
}

/// The invariants every record a transition writes keeps (see the module doc).
pub fn debug_assert_invariants(op: &Operation) {
    debug_assert_eq!(
        op.status.is_settled(),
        op.next_due_at.is_none(),
        "{}: a due time exactly while unsettled (status {}, due {:?})",
        op.order_id,
        op.status,
        op.next_due_at
    );
    debug_assert!(
        op.attempts == 0 || op.first_attempted_at.is_some(),
        "{}: attempted {} times without first_attempted_at",
        op.order_id,
        op.attempts
    );
}

/// What a store's conditional write did to the record at a key: the record as written, or the
/// current record with the guard that refused the write (`None`: there is no record).
pub type Written = Result<Operation, Option<(Operation, Guard)>>;

/// The answer of a record, reschedule or resolve.
pub fn recorded(written: Written) -> Recorded {
    match written {
        Ok(op) => Recorded::Written(op),
        Err(current) => Recorded::Refused(current.map(|(op, _)| op)),
    }
}

/// The answer of a claim.
pub fn claimed(written: Written) -> Claim {
    match written {
        Ok(op) => Claim::Claimed(op),
        Err(None) => Claim::NotFound,
        Err(Some((current, by))) => refused_claim(current, by),
    }
}

/// What a refused claim answers, from the guard that refused it.
pub fn refused_claim(current: Operation, by: Guard) -> Claim {
    match by {
        Guard::IsOperation(_) => Claim::NotFound,
        Guard::Unsettled => Claim::Settled(current),
        Guard::NotInReview => Claim::InReview(current),
        // A claim has no other guard; were one added, "someone else has it" is the answer that
        // makes no call to Stripe.
        Guard::NoLeaseAfter(_)
        | Guard::HoldsLease(_)
        | Guard::StatusIs(_)
        | Guard::UpdatedAt(_)
        | Guard::Scheduled
        | Guard::Settles(_)
        | Guard::IsCharge
        | Guard::ReservedAtMost(_)
        | Guard::ReservedAtLeast(_)
        | Guard::IsRefund
        | Guard::NotTaken
        | Guard::TakenBy(_)
        | Guard::NotCanceled
        | Guard::NeverAttempted
        | Guard::AuthorizedOr(_)
        | Guard::LatestAttemptIs(_) => Claim::Leased(current),
    }
}

/// When a recorded outcome is due again: `None` once settled (the record leaves the index), else
/// the record's `next_due_at`. The port requires one for an unsettled status; a writer that
/// leaves it out is a bug (asserted), and in a release build the record is due at once rather
/// than never.
pub fn due_after(rec: &OutcomeRecord) -> Option<Timestamp> {
    if rec.status.is_settled() {
        return None;
    }
    debug_assert!(
        rec.next_due_at.is_some(),
        "{}: an unsettled outcome ({}) without a due time",
        rec.key.order_id,
        rec.status
    );
    Some(rec.next_due_at.unwrap_or(rec.now))
}

/// Refunds reserve against a settled charge: the one write that changes a settled record, and
/// only its `refund_reserved`. "Settled is final" is for the charge's outcome; its status is a
/// guard here (only money taken is refunded), never a change.
impl Transition for ReserveRefund {
    fn guards(&self) -> Vec<Guard> {
        vec![
            Guard::IsOperation(self.charge_operation_id),
            Guard::IsCharge,
            Guard::StatusIs(OperationStatus::Succeeded),
            Guard::ReservedAtMost(self.max_reserved_before()),
        ]
    }

    fn change(&self, op: &mut Operation) {
        if let Some(charge) = op.params.charge_state_mut() {
            charge.refund_reserved += self.amount.minor_units();
        }
        op.updated_at = self.now;
    }
}

/// A failed or canceled refund's amount back to its charge. Its refund's fenced outcome write, in
/// the same transaction, makes it happen once; a charge whose count is below the amount (a record
/// edited by hand) refuses it, and a person looks, rather than a count that no longer adds up.
impl Transition for ReleaseRefund {
    fn guards(&self) -> Vec<Guard> {
        vec![
            Guard::IsCharge,
            Guard::ReservedAtLeast(self.amount.minor_units()),
        ]
    }

    fn change(&self, op: &mut Operation) {
        if let Some(charge) = op.params.charge_state_mut() {
            charge.refund_reserved -= self.amount.minor_units();
        }
        op.updated_at = self.now;
    }
}

/// Why a refund's outcome that gives its reservation back cannot be written: its charge is gone,
/// or holds less than the refund reserved (a record edited by hand). Not a refusal the shell can
/// settle: the store answers it as an error, the message is retried and, still refused, parks on
/// the dead-letter queue, which pages.
pub const RELEASE_REFUSED: &str =
    "a refund's reservation cannot go back to its charge: the charge is missing or holds less than the refund reserved";

/// How a late failure's `last_error` begins, Stripe's `failure_reason` after it: the record
/// itself says it failed after succeeding ([`failed_later_reason`]), so the outbox can say so
/// from the stream's image alone, on every replay.
pub const FAILED_LATER_PREFIX: &str = "refund failed after it succeeded: ";

/// Stripe's `failure_reason` when `op` is a refund that failed after it succeeded
/// ([`RefundFailedLater`]); `None` for every other record.
pub fn failed_later_reason(op: &Operation) -> Option<&str> {
    if op.status != OperationStatus::Failed || op.params.refund().is_none() {
        return None;
    }
    op.last_error.as_deref()?.strip_prefix(FAILED_LATER_PREFIX)
}

/// The one change of a settled record: a succeeded refund that Stripe says failed later. Its
/// reservation goes back in the same write ([`RefundFailedLater::release`]); it stays out of the
/// index (settled), and the outbox publishes `RefundFailed`.
impl Transition for RefundFailedLater {
    fn guards(&self) -> Vec<Guard> {
        vec![
            Guard::IsOperation(self.operation_id),
            Guard::IsRefund,
            Guard::StatusIs(OperationStatus::Succeeded),
        ]
    }

    fn change(&self, op: &mut Operation) {
        op.status = OperationStatus::Failed;
        op.last_error = Some(format!("{FAILED_LATER_PREFIX}{}", self.failure_reason));
        op.updated_at = self.now;
    }
}

/// How an authorization's end reads in its charge's `last_error`: the record itself says how it
/// ended ([`authorization_end`]), so the outbox can tell a cancel from a lapse from the stream's
/// image alone, on every replay.
pub const CANCELED_BEFORE_SENT: &str =
    "canceled: stopped by the merchant before it was sent to Stripe";
pub const CANCELED_BY_MERCHANT: &str =
    "canceled: the authorization was released by the merchant's cancel";
pub const AUTHORIZATION_EXPIRED: &str =
    "authorization expired: Stripe canceled the hold uncaptured at its deadline";

/// How a failed charge's authorization ended, when it was one that a cancel or a lapse ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationEnd {
    Canceled,
    Expired,
}

/// How `op`'s authorization ended ([`AuthorizationEnd`]); `None` for any other record.
pub fn authorization_end(op: &Operation) -> Option<AuthorizationEnd> {
    if op.status != OperationStatus::Failed || !op.kind.is_charge() {
        return None;
    }
    match op.last_error.as_deref()? {
        CANCELED_BEFORE_SENT | CANCELED_BY_MERCHANT => Some(AuthorizationEnd::Canceled),
        AUTHORIZATION_EXPIRED => Some(AuthorizationEnd::Expired),
        _ => None,
    }
}

/// A capture or cancel takes its order's charge ([`TakeAuthorization`]): only the charge read,
/// only if nobody took it before, and only from where the door found it — authorized, or never
/// sent (then the cancel settles it `failed` here, before any Stripe call can be claimed: a claim
/// after it finds it settled, a claim before it made it attempted and this write refused).
impl Transition for TakeAuthorization {
    fn guards(&self) -> Vec<Guard> {
        let mut guards = vec![
            Guard::IsOperation(self.charge_operation_id),
            Guard::IsCharge,
            Guard::NotTaken,
        ];
        match self.from {
            TakeFrom::Authorized => guards.push(Guard::StatusIs(OperationStatus::Authorized)),
            TakeFrom::NeverSent => guards.extend([
                Guard::StatusIs(OperationStatus::Pending),
                Guard::NeverAttempted,
                Guard::NoLeaseAfter(self.now),
            ]),
        }
        guards
    }

    fn change(&self, op: &mut Operation) {
        if let Some(charge) = op.params.charge_state_mut() {
            charge.taken_by = Some(self.taker);
        }
        if self.from == TakeFrom::NeverSent {
            op.status = OperationStatus::Failed;
            op.last_error = Some(CANCELED_BEFORE_SENT.to_owned());
            op.next_due_at = None;
            op.review = None;
        }
        op.updated_at = self.now;
    }
}

/// A capture's or a cancel's outcome on its charge ([`SettleAuthorization`]): only by the
/// operation that took it, and only over an authorized charge (or one whose own look at Stripe
/// already recorded the same end). Captured: `succeeded` with the amount taken; canceled or
/// lapsed: `failed`; given back: still authorized, free again.
impl Transition for SettleAuthorization {
    fn guards(&self) -> Vec<Guard> {
        let status = match self.outcome {
            AuthorizationOutcome::Captured(_) => OperationStatus::Succeeded,
            AuthorizationOutcome::Canceled | AuthorizationOutcome::Expired => {
                OperationStatus::Failed
            }
            AuthorizationOutcome::GivenBack => OperationStatus::Authorized,
        };
        vec![
            Guard::IsCharge,
            Guard::TakenBy(self.taker.operation_id),
            Guard::AuthorizedOr(status),
        ]
    }

    fn change(&self, op: &mut Operation) {
        let ended = |op: &mut Operation, status, error: Option<&str>| {
            op.status = status;
            op.last_error = error.map(str::to_owned);
            op.next_due_at = None;
            op.lease = None;
            op.review = None;
        };
        match self.outcome {
            AuthorizationOutcome::Captured(amount) => {
                if let Some(charge) = op.params.charge_state_mut() {
                    charge.amount_captured = Some(amount);
                }
                ended(op, OperationStatus::Succeeded, None);
            }
            AuthorizationOutcome::Canceled => {
                ended(op, OperationStatus::Failed, Some(CANCELED_BY_MERCHANT))
            }
            AuthorizationOutcome::Expired => {
                ended(op, OperationStatus::Failed, Some(AUTHORIZATION_EXPIRED))
            }
            AuthorizationOutcome::GivenBack => {
                if let Some(charge) = op.params.charge_state_mut() {
                    charge.taken_by = None;
                }
            }
        }
        op.updated_at = self.now;
    }
}

/// Why a capture's or a cancel's outcome that ends its charge's authorization cannot be written:
/// the charge is gone, names another taker, or already ended otherwise (its own look at Stripe
/// recorded a different end). Not a refusal the shell can settle, as [`RELEASE_REFUSED`]: the
/// store answers it as an error and writes neither record, the message is retried and, still
/// refused, parks on the dead-letter queue, which pages.
pub const AUTHORIZATION_REFUSED: &str =
    "a capture's or cancel's outcome cannot end its charge's authorization: the charge is missing, taken by another, or ended otherwise";

/// An outcome that both gives a refund's reservation back and ends an authorization: no
/// operation is both a refund and a capture or cancel, so it is a writer's bug, refused whole.
pub const RELEASE_AND_AUTHORIZATION: &str =
    "an outcome gives a refund's reservation back or ends an authorization, never both";

/// What a new operation claims on its order's charge in the write that creates it: a refund
/// reserves its amount ([`ReserveRefund`]), a capture or cancel takes the authorization
/// ([`TakeAuthorization`]). The charge's guards and change are the claim's own; the write around
/// them is one ([`create_beside`], `OperationCreates::create_beside`): the new record and the
/// charge's change, all or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChargeClaim<'a> {
    Reserve(&'a ReserveRefund),
    Take(&'a TakeAuthorization),
    /// A dispute's first record: the charge names it, and reserves its amount when Stripe
    /// withdrew the funds ([`DisputeOnCharge`]).
    Dispute(&'a DisputeOnCharge),
}

impl ChargeClaim<'_> {
    /// The order's charge the claim is on.
    pub fn charge(&self) -> &OperationKey {
        match self {
            ChargeClaim::Reserve(reserve) => &reserve.charge,
            ChargeClaim::Take(take) => &take.charge,
            ChargeClaim::Dispute(dispute) => &dispute.charge,
        }
    }

    /// Why the charge refused the claim: the first of its guards that fails of `charge` as read
    /// after the refusal. One read after may pass them all (another writer moved the charge in
    /// between); it is then named by the guard two claims race for, the answer that makes no
    /// call to Stripe: the room left (a refund), or the taker (a capture or cancel).
    pub fn refused_by(&self, charge: &Operation) -> Guard {
        check(charge, &self.guards()).err().unwrap_or(match self {
            ChargeClaim::Reserve(reserve) => Guard::ReservedAtMost(reserve.max_reserved_before()),
            ChargeClaim::Take(_) => Guard::NotTaken,
            ChargeClaim::Dispute(dispute) => match dispute.max_reserved_before() {
                Some(max) => Guard::ReservedAtMost(max),
                None => Guard::IsOperation(dispute.charge_operation_id),
            },
        })
    }
}

impl Transition for ChargeClaim<'_> {
    fn guards(&self) -> Vec<Guard> {
        match self {
            ChargeClaim::Reserve(reserve) => reserve.guards(),
            ChargeClaim::Take(take) => take.guards(),
            ChargeClaim::Dispute(dispute) => dispute.guards(),
        }
    }

    fn change(&self, op: &mut Operation) {
        match self {
            ChargeClaim::Reserve(reserve) => reserve.change(op),
            ChargeClaim::Take(take) => take.change(op),
            ChargeClaim::Dispute(dispute) => dispute.change(op),
        }
    }
}

/// A dispute's side of its charge ([`DisputeOnCharge`]): the charge read, and to reserve, the
/// guards a refund's reservation has (succeeded, room left): refunded plus disputed never
/// exceeds what was taken, by the same condition. To give back, the reservation is there.
impl Transition for DisputeOnCharge {
    fn guards(&self) -> Vec<Guard> {
        let mut guards = vec![
            Guard::IsOperation(self.charge_operation_id),
            Guard::IsCharge,
        ];
        if let Some(max) = self.max_reserved_before() {
            guards.extend([
                Guard::StatusIs(OperationStatus::Succeeded),
                Guard::ReservedAtMost(max),
            ]);
        }
        if let Some(amount) = self.give_back {
            guards.push(Guard::ReservedAtLeast(amount.minor_units()));
        }
        guards
    }

    fn change(&self, op: &mut Operation) {
        if let Some(charge) = op.params.charge_state_mut() {
            if let Some((amount, _)) = self.reserve {
                charge.refund_reserved += amount.minor_units();
            }
            if let Some(amount) = self.give_back {
                charge.refund_reserved -= amount.minor_units();
            }
            match &self.mark {
                DisputeMark::Keep => {}
                DisputeMark::Open {
                    dispute,
                    refundable,
                } => {
                    charge.disputed_by = Some(dispute.clone());
                    charge.dispute_refundable = *refundable;
                }
                DisputeMark::Clear => {
                    charge.disputed_by = None;
                    charge.dispute_refundable = false;
                }
            }
        }
        op.updated_at = self.now;
    }
}

/// A dispute's record moved to what Stripe holds ([`DisputeMove`]): the record read, unsettled
/// ("settled is final": a closed dispute never moves again).
impl Transition for DisputeMove {
    fn guards(&self) -> Vec<Guard> {
        vec![
            Guard::IsOperation(self.operation_id),
            Guard::Unsettled,
            Guard::UpdatedAt(self.expected_updated_at),
        ]
    }

    fn change(&self, op: &mut Operation) {
        if let Some(state) = op.params.dispute_state_mut() {
            *state = self.state.clone();
        }
        op.status = self.status;
        if let Some(error) = &self.last_error {
            op.last_error = Some(error.clone());
        }
        if self.status.is_settled() {
            op.next_due_at = None;
            op.review = None;
        } else {
            if let Some(review) = &self.review {
                op.review = Some(review.clone());
            }
            if op.review.is_none() || self.review.is_some() {
                op.next_due_at = Some(self.next_due_at.unwrap_or(self.now));
            }
        }
        op.updated_at = self.now;
    }
}

/// Result of `OperationCreates::create_beside`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreatedBeside {
    /// The operation was written and its claim on the charge made (a refund's amount reserved,
    /// a capture or cancel named as the charge's taker).
    New(Operation),
    /// An operation with the same key already existed (the same refund id, or a capture or
    /// cancel of the order already asked); this is it, unchanged. Nothing was claimed.
    Existing(Operation),
    /// The charge refused the claim (its record as it is now, and why): it moved since it was
    /// read (another refund reserved, another capture or cancel took it), there is no room, or
    /// it is gone (`None`). Nothing was written.
    ChargeRefused(Option<(Operation, Guard)>),
}

/// A new operation's create with its claim on its order's charge, as one write over both
/// records, all or nothing: one with the same key already there is the answer (nothing claimed:
/// the same operation asked again); else the charge's guards decide (`claim`'s: a
/// [`ReserveRefund`], a [`TakeAuthorization`], or the [`ChargeClaim`] holding one). `existing`
/// and `charge` are the records at the two keys as the write finds them; the charge after the
/// write comes back with the answer, for a store to keep.
pub fn create_beside(
    existing: Option<&Operation>,
    charge: Option<&Operation>,
    op: &Operation,
    claim: &impl Transition,
) -> (CreatedBeside, Option<Operation>) {
    if let Some(existing) = existing {
        return (CreatedBeside::Existing(existing.clone()), None);
    }
    let Some(charge) = charge else {
        return (CreatedBeside::ChargeRefused(None), None);
    };
    match apply(charge, claim) {
        Ok(next) => (CreatedBeside::New(op.clone()), Some(next)),
        Err(by) => (
            CreatedBeside::ChargeRefused(Some((charge.clone(), by))),
            None,
        ),
    }
}

/// The head's side of a new charge attempt ([`NewAttempt`]): it names attempt `n + 1` as the
/// order's latest, only while it names `n`. When `n` is 1 the head is attempt `n` itself, and
/// carries [`AttemptFailed`]'s guards too. Nothing else of the head moves, not even
/// `updated_at`: a settled record rewritten is no outcome, and the head's own writes keep their
/// fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptOnHead {
    /// The latest attempt's number as read (`n`).
    pub latest: u32,
    /// Attempt `n`'s operation id as read, checked here when `n` is 1.
    pub after_operation_id: OperationId,
}

impl Transition for AttemptOnHead {
    fn guards(&self) -> Vec<Guard> {
        let mut guards = vec![Guard::IsCharge, Guard::LatestAttemptIs(self.latest)];
        if self.latest <= 1 {
            guards.extend(AttemptFailed(self.after_operation_id).guards());
        }
        guards
    }

    fn change(&self, op: &mut Operation) {
        if let Some(charge) = op.params.charge_state_mut() {
            charge.latest_attempt = Some(self.latest + 1);
        }
    }
}

/// Attempt `n`'s side of a new attempt ([`NewAttempt`]): the one read, `failed`, and not ended
/// by a cancel (a canceled order stays canceled; a capture that found the authorization lapsed
/// ended it too, but nobody canceled the order and nothing was taken: it may be charged again).
/// A check only: attempt `n` is not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptFailed(pub OperationId);

impl Transition for AttemptFailed {
    fn guards(&self) -> Vec<Guard> {
        vec![
            Guard::IsOperation(self.0),
            Guard::IsCharge,
            Guard::StatusIs(OperationStatus::Failed),
            Guard::NotCanceled,
        ]
    }

    fn change(&self, _: &mut Operation) {}
}

impl NewAttempt {
    /// The head's side of the write.
    pub fn on_head(&self) -> AttemptOnHead {
        AttemptOnHead {
            latest: self.after(),
            after_operation_id: self.after_operation_id,
        }
    }

    /// Attempt `n`'s side, when it is not the head (`n` > 1); `None` when the head checks it.
    pub fn on_after(&self) -> Option<AttemptFailed> {
        (self.after() > 1).then_some(AttemptFailed(self.after_operation_id))
    }
}

/// Which part of a new attempt's write refused it ([`start_attempt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptRefusedBy {
    /// A record is already at the new attempt's key.
    Exists,
    /// The head is missing (`None`) or refused by this guard.
    Head(Option<Guard>),
    /// Attempt `n` (not the head) is missing (`None`) or refused by this guard.
    After(Option<Guard>),
}

/// A new charge attempt's write ([`NewAttempt`]) as a pure function of the three records as the
/// write finds them: the record at the new key (`existing`), the head, and attempt `n` (`after`,
/// ignored when `n` is 1: the head is it). All or nothing: the head after the write, for a store
/// to keep beside `req.op`, or what refused it (nothing written).
pub fn start_attempt(
    existing: Option<&Operation>,
    head: Option<&Operation>,
    after: Option<&Operation>,
    req: &NewAttempt,
) -> Result<Operation, AttemptRefusedBy> {
    if existing.is_some() {
        return Err(AttemptRefusedBy::Exists);
    }
    let head = head.ok_or(AttemptRefusedBy::Head(None))?;
    let next = apply(head, &req.on_head()).map_err(|g| AttemptRefusedBy::Head(Some(g)))?;
    if let Some(check_after) = req.on_after() {
        let after = after.ok_or(AttemptRefusedBy::After(None))?;
        check(after, &check_after.guards()).map_err(|g| AttemptRefusedBy::After(Some(g)))?;
    }
    Ok(next)
}

impl Transition for ClaimRequest {
    fn guards(&self) -> Vec<Guard> {
        vec![
            Guard::IsOperation(self.operation_id),
            Guard::Unsettled,
            Guard::NotInReview,
            Guard::NoLeaseAfter(self.now),
        ]
    }

    fn change(&self, op: &mut Operation) {
        // `first_attempted_at` starts the key window: once attempted it is set and never moves.
        // A record attempted without one would get a later window here, and a create after
        // Stripe pruned the key.
        debug_assert!(
            op.attempts == 0 || op.first_attempted_at.is_some(),
            "{}: attempted {} times without first_attempted_at",
            op.order_id,
            op.attempts
        );
        op.lease = Some(self.lease);
        op.first_attempted_at.get_or_insert(self.now);
        op.attempts += 1;
        op.updated_at = self.now;
    }
}

impl Transition for OutcomeRecord {
    fn guards(&self) -> Vec<Guard> {
        vec![
            Guard::IsOperation(self.operation_id),
            Guard::HoldsLease(self.lease_token),
            Guard::Unsettled,
        ]
    }

    fn change(&self, op: &mut Operation) {
        op.status = self.status;
        if let Some(id) = &self.external_id {
            op.external_id = Some(id.clone());
        }
        // Each kind keeps only what its record holds (the DynamoDB write sets no other).
        match &mut op.params {
            Params::Refund(_, refund) => {
                if let Some(id) = &self.stripe_refund_id {
                    refund.stripe_refund_id = Some(id.clone());
                }
            }
            Params::Charge(_, charge) => {
                if let Some(t) = self.capture_before {
                    charge.capture_before = Some(t);
                }
                if let Some(a) = self.amount_captured {
                    charge.amount_captured = Some(a);
                }
            }
            Params::Capture(_) | Params::Cancel(_) | Params::Dispute(..) => {}
        }
        op.last_error = self.last_error.clone();
        if let Some(review) = &self.review {
            op.review = Some(review.clone());
        }
        op.lease = None;
        op.updated_at = self.now;
        op.next_due_at = due_after(self);
    }
}

impl Transition for Reschedule {
    fn guards(&self) -> Vec<Guard> {
        let mut guards = vec![
            Guard::IsOperation(self.operation_id),
            Guard::StatusIs(self.expected_status),
            Guard::Unsettled,
            Guard::UpdatedAt(self.expected_updated_at),
            Guard::Scheduled,
        ];
        if let Some(operator) = &self.operator {
            guards.push(Guard::NoLeaseAfter(operator.lease_cutoff));
        }
        guards
    }

    fn change(&self, op: &mut Operation) {
        if let Some(operator) = &self.operator {
            op.history.push(operator.audit.clone());
        }
        op.next_due_at = Some(self.next_due_at);
        if self.sends {
            op.redrives += 1;
        }
        if self.clear_review {
            op.review = None;
        }
        op.updated_at = self.now;
    }
}

impl Transition for ManualResolution {
    fn guards(&self) -> Vec<Guard> {
        let mut guards = vec![
            Guard::Settles(self.status),
            Guard::IsOperation(self.operation_id),
            Guard::Unsettled,
            Guard::UpdatedAt(self.expected_updated_at),
            Guard::NoLeaseAfter(self.guard.lease_cutoff),
        ];
        // Only a refund holds a reservation to give back: a charge's resolution never releases.
        if self.release.is_some() {
            guards.push(Guard::IsRefund);
        }
        guards
    }

    fn change(&self, op: &mut Operation) {
        op.status = self.status;
        if let Some(id) = &self.external_id {
            op.external_id = Some(id.clone());
        }
        if let (Some(id), Some(refund)) = (&self.stripe_refund_id, op.params.refund_state_mut()) {
            refund.stripe_refund_id = Some(id.clone());
        }
        op.history.push(self.guard.audit.clone());
        // The review evidence moves into the history entry (the caller copied it there).
        op.review = None;
        op.lease = None;
        op.next_due_at = None;
        op.updated_at = self.guard.audit.at;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::charge::state::Taker;
    use crate::operation::LeaseToken;
    use crate::testing::{self, T0};

    fn leased() -> (Operation, LeaseToken) {
        let op = testing::order("ord-rules").at(T0).build();
        let token = LeaseToken::new_random();
        let claimed = apply(&op, &testing::claim_request(&op, token, T0)).unwrap();
        (claimed, token)
    }

    #[test]
    fn a_refusal_names_the_first_guard_that_fails() {
        let (op, token) = leased();
        let settled = apply(
            &op,
            &testing::outcome(&op, token, OperationStatus::Succeeded, T0),
        )
        .unwrap();
        // Another token over a settled record: the lease guard comes first.
        let stale = testing::outcome(&op, LeaseToken::new_random(), OperationStatus::Failed, T0);
        assert_eq!(
            apply(&settled, &stale),
            Err(Guard::HoldsLease(stale.lease_token))
        );
        let again = testing::claim_request(&settled, LeaseToken::new_random(), T0);
        assert_eq!(apply(&settled, &again), Err(Guard::Unsettled));
        assert_eq!(
            refused_claim(settled.clone(), Guard::Unsettled),
            Claim::Settled(settled)
        );
    }

    /// The write that settles stamps its own time once: an unknown outcome does not, the
    /// settling one does, and a later write of the settled record (a late failure) keeps it.
    #[test]
    fn the_settling_write_stamps_the_settle_time_once() {
        use crate::store::ReleaseRefund;
        let (op, token) = leased();
        let t1 = T0.plus(Duration::from_secs(5));
        let unknown = apply(
            &op,
            &testing::outcome(&op, token, OperationStatus::Unknown, t1),
        )
        .unwrap();
        assert_eq!(unknown.settled_at, None, "unknown is not settled");
        let t2 = T0.plus(Duration::from_secs(9));
        let token = LeaseToken::new_random();
        let again = apply(&unknown, &testing::claim_request(&unknown, token, t2)).unwrap();
        let settled = apply(
            &again,
            &testing::outcome(&again, token, OperationStatus::Succeeded, t2),
        )
        .unwrap();
        assert_eq!(settled.settled_at, Some(t2));
        // A succeeded refund that fails later keeps its first settle time.
        let refund = Operation {
            kind: OperationKind::Refund(crate::domain::RefundId::parse("rf_1").unwrap()),
            ..settled.clone()
        };
        let later = RefundFailedLater {
            key: refund.key(),
            operation_id: refund.operation_id,
            failure_reason: "expired_or_canceled_card".into(),
            release: ReleaseRefund {
                charge: OperationKey::charge(refund.order_id.clone()),
                amount: refund.params.amount(),
                now: t2.plus(Duration::from_secs(60)),
            },
            now: t2.plus(Duration::from_secs(60)),
        };
        let failed = apply(&refund, &later).unwrap();
        assert_eq!(failed.status, OperationStatus::Failed);
        assert_eq!(failed.settled_at, Some(t2));
    }

    /// An operator's resolution that gives a reservation back is a refund's only: over a charge
    /// it is refused (a charge holds reservations, it never gives one back); the twin, the same
    /// resolution without a release, settles the charge.
    #[test]
    fn only_a_refund_s_resolution_gives_a_reservation_back() {
        use crate::operation::AuditEntry;
        use crate::store::{OperatorGuard, ReleaseRefund};
        let op = testing::order("ord-rules")
            .status(OperationStatus::Unknown)
            .build();
        let with_release = ManualResolution {
            key: op.key(),
            operation_id: op.operation_id,
            status: OperationStatus::Failed,
            external_id: None,
            expected_updated_at: op.updated_at,
            stripe_refund_id: None,
            release: Some(ReleaseRefund {
                charge: op.charge_key(),
                amount: op.params.amount(),
                now: T0,
            }),
            guard: OperatorGuard {
                lease_cutoff: T0,
                audit: AuditEntry {
                    action: "resolve_failed".into(),
                    previous_status: OperationStatus::Unknown,
                    new_status: OperationStatus::Failed,
                    note: "n".into(),
                    at: T0,
                    caller: "arn".into(),
                    label: None,
                    forced: None,
                    review: None,
                    replaced_external_id: None,
                },
            },
            authorization: None,
        };
        assert_eq!(apply(&op, &with_release), Err(Guard::IsRefund));
        let without = ManualResolution {
            release: None,
            ..with_release
        };
        assert_eq!(
            apply(&op, &without).unwrap().status,
            OperationStatus::Failed
        );
    }

    /// An authorized charge as Stripe's answer left it: attempted once, due again, not taken.
    fn authorized() -> Operation {
        let mut op = testing::order("ord-take")
            .status(OperationStatus::Authorized)
            .build();
        op.attempts = 1;
        op.first_attempted_at = Some(T0);
        op
    }

    fn taker(capture: bool) -> Taker {
        Taker {
            capture,
            operation_id: OperationId::new_random(),
        }
    }

    fn take(charge: &Operation, taker: Taker, from: TakeFrom) -> TakeAuthorization {
        TakeAuthorization {
            charge: charge.key(),
            charge_operation_id: charge.operation_id,
            taker,
            from,
            now: T0,
        }
    }

    fn settle(
        charge: &Operation,
        taker: Taker,
        outcome: AuthorizationOutcome,
    ) -> SettleAuthorization {
        SettleAuthorization {
            charge: charge.key(),
            taker,
            outcome,
            now: T0.plus(Duration::from_secs(1)),
        }
    }

    /// A capture takes an authorized charge once: the charge names it and stays authorized
    /// (still due, the deadline watched). The other of the pair, asked after, is refused by
    /// `not_taken`; a charge not (yet) authorized by `status_is`; another operation at the
    /// charge's key by `is_operation`.
    #[test]
    fn an_authorized_charge_is_taken_once() {
        let charge = authorized();
        let capture = taker(true);
        let taken = apply(&charge, &take(&charge, capture, TakeFrom::Authorized)).unwrap();
        assert_eq!(taken.taken_by(), Some(capture));
        assert_eq!(taken.status, OperationStatus::Authorized);
        assert_eq!(taken.next_due_at, charge.next_due_at);
        let cancel = take(&charge, taker(false), TakeFrom::Authorized);
        assert_eq!(apply(&taken, &cancel), Err(Guard::NotTaken));
        // The twin of that refusal: the cancel alone is accepted.
        assert!(apply(&charge, &cancel).is_ok());
        let pending = testing::order("ord-take").build();
        assert_eq!(
            apply(&pending, &take(&pending, capture, TakeFrom::Authorized)),
            Err(Guard::StatusIs(OperationStatus::Authorized))
        );
        let elsewhere = TakeAuthorization {
            charge_operation_id: OperationId::new_random(),
            ..take(&charge, capture, TakeFrom::Authorized)
        };
        assert!(matches!(
            apply(&charge, &elsewhere),
            Err(Guard::IsOperation(_))
        ));
    }

    /// A cancel of a charge never sent settles it `failed` in the same write: out of the index,
    /// saying it was stopped before Stripe. Once claimed (attempted) it is refused by
    /// `never_attempted`; a live lease by `no_lease_after`; an authorized charge is not "never
    /// sent" (`status_is`).
    #[test]
    fn a_cancel_stops_a_charge_never_sent_and_only_that() {
        let pending = testing::order("ord-never").build();
        let cancel = taker(false);
        let stopped = apply(&pending, &take(&pending, cancel, TakeFrom::NeverSent)).unwrap();
        assert_eq!(stopped.status, OperationStatus::Failed);
        assert_eq!(stopped.last_error.as_deref(), Some(CANCELED_BEFORE_SENT));
        assert_eq!(stopped.next_due_at, None);
        assert_eq!(stopped.taken_by(), Some(cancel));
        assert_eq!(
            authorization_end(&stopped),
            Some(AuthorizationEnd::Canceled)
        );
        let token = LeaseToken::new_random();
        let claimed = apply(&pending, &testing::claim_request(&pending, token, T0)).unwrap();
        let after_lease = Operation {
            lease: None,
            ..claimed.clone()
        };
        assert_eq!(
            apply(
                &after_lease,
                &take(&after_lease, cancel, TakeFrom::NeverSent)
            ),
            Err(Guard::NeverAttempted)
        );
        // A lease on a record never attempted is not reachable by a claim; the guard stands alone.
        let leased = Operation {
            first_attempted_at: None,
            attempts: 0,
            ..claimed
        };
        assert!(matches!(
            apply(&leased, &take(&leased, cancel, TakeFrom::NeverSent)),
            Err(Guard::NoLeaseAfter(_))
        ));
        let charge = authorized();
        assert_eq!(
            apply(&charge, &take(&charge, cancel, TakeFrom::NeverSent)),
            Err(Guard::StatusIs(OperationStatus::Pending))
        );
    }

    /// Each end of a taken authorization as its taker's outcome writes it to the charge; another
    /// taker is refused by `taken_by`, and a charge already ended otherwise by `authorized_or`.
    #[test]
    fn a_taken_authorization_ends_as_its_taker_s_outcome_says() {
        let charge = authorized();
        let capture = taker(true);
        let taken = apply(&charge, &take(&charge, capture, TakeFrom::Authorized)).unwrap();
        let amount = crate::domain::Amount::new(800).unwrap();
        let captured = apply(
            &taken,
            &settle(&taken, capture, AuthorizationOutcome::Captured(amount)),
        )
        .unwrap();
        assert_eq!(
            (
                captured.status,
                captured.amount_captured(),
                captured.next_due_at
            ),
            (OperationStatus::Succeeded, Some(amount), None)
        );
        assert_eq!(captured.amount_taken(), amount);
        for (outcome, end, error) in [
            (
                AuthorizationOutcome::Canceled,
                AuthorizationEnd::Canceled,
                CANCELED_BY_MERCHANT,
            ),
            (
                AuthorizationOutcome::Expired,
                AuthorizationEnd::Expired,
                AUTHORIZATION_EXPIRED,
            ),
        ] {
            let ended = apply(&taken, &settle(&taken, capture, outcome)).unwrap();
            assert_eq!(ended.status, OperationStatus::Failed);
            assert_eq!(ended.last_error.as_deref(), Some(error));
            assert_eq!(ended.next_due_at, None);
            assert_eq!(authorization_end(&ended), Some(end));
        }
        let given_back = apply(
            &taken,
            &settle(&taken, capture, AuthorizationOutcome::GivenBack),
        )
        .unwrap();
        assert_eq!(given_back.taken_by(), None);
        assert_eq!(given_back.status, OperationStatus::Authorized);
        assert!(given_back.next_due_at.is_some(), "still watched");
        let other = taker(false);
        assert_eq!(
            apply(
                &taken,
                &settle(&taken, other, AuthorizationOutcome::Canceled)
            ),
            Err(Guard::TakenBy(other.operation_id))
        );
        // The charge's own look at Stripe recorded the lapse first: the same end is accepted,
        // a capture over it refused.
        let lapsed = Operation {
            status: OperationStatus::Failed,
            next_due_at: None,
            ..taken
        };
        assert!(apply(
            &lapsed,
            &settle(&lapsed, capture, AuthorizationOutcome::Expired)
        )
        .is_ok());
        assert_eq!(
            apply(
                &lapsed,
                &settle(&lapsed, capture, AuthorizationOutcome::Captured(amount))
            ),
            Err(Guard::AuthorizedOr(OperationStatus::Succeeded))
        );
    }

    /// A capture is created beside its charge by the one write a refund is: the charge taken in
    /// the same answer; asked again, the capture there is the answer and the charge untouched;
    /// the cancel after it refused by `not_taken`, with the charge as found; no charge, no record.
    #[test]
    fn a_capture_is_created_beside_its_charge_once() {
        let charge = authorized();
        let capture = taker(true);
        let take_it = take(&charge, capture, TakeFrom::Authorized);
        let op = Operation {
            kind: OperationKind::FIRST_CAPTURE,
            ..testing::order("ord-take").build()
        };
        let claim = ChargeClaim::Take(&take_it);
        assert_eq!(claim.charge(), &charge.key());
        let (created, taken) = create_beside(None, Some(&charge), &op, &claim);
        assert_eq!(created, CreatedBeside::New(op.clone()));
        let taken = taken.expect("the charge as written");
        assert_eq!(taken.taken_by(), Some(capture));
        assert_eq!(
            create_beside(Some(&op), Some(&taken), &op, &claim),
            (CreatedBeside::Existing(op.clone()), None)
        );
        let cancel = take(&charge, taker(false), TakeFrom::Authorized);
        assert_eq!(
            create_beside(None, Some(&taken), &op, &ChargeClaim::Take(&cancel)),
            (
                CreatedBeside::ChargeRefused(Some((taken.clone(), Guard::NotTaken))),
                None
            )
        );
        assert_eq!(
            create_beside(None, None, &op, &claim),
            (CreatedBeside::ChargeRefused(None), None)
        );
    }

    /// A refusal is named by the first guard that fails of the charge read after it; a charge
    /// read after that passes them all (another writer moved it in between) is named by the
    /// guard two claims race for: the room left for a refund, the taker for a capture or cancel.
    #[test]
    fn a_refusal_the_charge_read_after_does_not_explain_is_the_race_s_guard() {
        let charge = authorized();
        let take_it = take(&charge, taker(false), TakeFrom::Authorized);
        let pending = Operation {
            status: OperationStatus::Pending,
            ..charge.clone()
        };
        assert_eq!(
            ChargeClaim::Take(&take_it).refused_by(&pending),
            Guard::StatusIs(OperationStatus::Authorized)
        );
        assert_eq!(
            ChargeClaim::Take(&take_it).refused_by(&charge),
            Guard::NotTaken
        );
        let mut succeeded = testing::order("ord-refund")
            .status(OperationStatus::Succeeded)
            .build();
        let reserve = ReserveRefund {
            charge: succeeded.key(),
            charge_operation_id: succeeded.operation_id,
            amount: crate::domain::Amount::new(300).unwrap(),
            charged: succeeded.params.amount(),
            now: T0,
        };
        let max = reserve.max_reserved_before();
        assert_eq!(
            ChargeClaim::Reserve(&reserve).refused_by(&succeeded),
            Guard::ReservedAtMost(max)
        );
        succeeded.params.charge_state_mut().unwrap().refund_reserved = max + 1;
        assert_eq!(
            ChargeClaim::Reserve(&reserve).refused_by(&succeeded),
            Guard::ReservedAtMost(max)
        );
        assert_eq!(
            ChargeClaim::Reserve(&reserve).refused_by(&pending),
            Guard::IsOperation(reserve.charge_operation_id)
        );
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "an unsettled outcome (unknown) without a due time")]
    fn an_unsettled_outcome_without_a_due_time_is_a_bug_not_filled_in() {
        let (op, token) = leased();
        let rec = OutcomeRecord {
            next_due_at: None,
            ..testing::outcome(&op, token, OperationStatus::Unknown, T0)
        };
        let _ = apply(&op, &rec);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "attempted 1 times without first_attempted_at")]
    fn a_claim_of_a_record_attempted_without_first_attempted_at_is_a_bug() {
        let (mut op, token) = leased();
        op.first_attempted_at = None;
        op.lease = None;
        let later = T0.plus(Duration::from_secs(3600));
        let _ = apply(&op, &testing::claim_request(&op, token, later));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a due time exactly while unsettled")]
    fn a_write_that_leaves_an_unsettled_record_out_of_the_index_is_a_bug() {
        struct Unschedule;
        impl Transition for Unschedule {
            fn guards(&self) -> Vec<Guard> {
                Vec::new()
            }
            fn change(&self, op: &mut Operation) {
                op.next_due_at = None;
            }
        }
        let (op, _) = leased();
        let _ = apply(&op, &Unschedule);
    }
}
