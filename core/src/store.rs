//! The store's writes as values: what each conditional write asks ([`ClaimRequest`],
//! [`OutcomeRecord`], [`Reschedule`], [`ManualResolution`]) and what it answers ([`Created`],
//! [`Claim`], [`Recorded`]). A refused condition is an answer, never an error. The rules that decide
//! the answers are [`crate::store_rules`]; the trait that sends them to a store is the shell's
//! (`charge_once::ports::OperationStore`).

use crate::charge::state::Taker;
use crate::dispute::state::DisputeState;
use crate::domain::{Amount, DisputeId, OperationId, PaymentIntentId, StripeRefundId};
use crate::operation::{
    AuditEntry, Lease, LeaseToken, Operation, OperationKey, OperationStatus, Review,
};
use crate::time::Timestamp;

/// Result of `OperationCreates::create_if_absent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// Our record was written.
    New(Operation),
    /// A record for the same business identity already existed; this is it, unchanged.
    Existing(Operation),
}

/// A request to take the lease on an operation before calling Stripe.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    pub key: OperationKey,
    /// The claim only matches the record with this id (a message for an older operation that was
    /// somehow replaced must not drive the new one).
    pub operation_id: OperationId,
    pub lease: Lease,
    pub now: Timestamp,
}

/// Result of `OperationLeases::claim`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// We hold the lease. `attempts` was incremented and `first_attempted_at` set if it was absent,
    /// durably, before any Stripe call.
    Claimed(Operation),
    /// Already `succeeded` or `failed`: nothing to do.
    Settled(Operation),
    /// Someone else holds a live lease.
    Leased(Operation),
    /// Unsettled, but flagged for review: only an operator settles it.
    InReview(Operation),
    /// No record with this key and operation id.
    NotFound,
}

/// The outcome of an attempt, written only by the lease holder and only over an unsettled record.
#[derive(Debug, Clone)]
pub struct OutcomeRecord {
    pub key: OperationKey,
    pub operation_id: OperationId,
    pub lease_token: LeaseToken,
    pub status: OperationStatus,
    /// Set when we learned the PaymentIntent id; `None` keeps whatever is stored.
    pub external_id: Option<PaymentIntentId>,
    /// Replaces the stored last error (`None` clears it).
    pub last_error: Option<String>,
    /// Flags the operation for review (`None` leaves the flag as it is).
    pub review: Option<Review>,
    /// When the reconciler should look again. Must be `Some` for an unsettled status (asserted
    /// in debug builds, `store_rules::due_after`; a release build makes it due at once rather
    /// than never) and is ignored for a settled one (settling removes the index attributes).
    pub next_due_at: Option<Timestamp>,
    pub now: Timestamp,
    /// A refund's Stripe id, once learned; `None` keeps whatever is stored.
    pub stripe_refund_id: Option<StripeRefundId>,
    /// A refund that ended without returning money gives its reservation back to its charge, in
    /// the same write (all or nothing): the fenced outcome makes it happen once.
    pub release: Option<ReleaseRefund>,
    /// A capture's or a cancel's outcome ends (or gives back) its charge's authorization in the
    /// same write.
    pub authorization: Option<SettleAuthorization>,
    /// An authorized charge's deadline as Stripe stated it; `None` keeps whatever is stored.
    pub capture_before: Option<Timestamp>,
    /// What was taken of an authorized charge, once Stripe holds it captured; `None` keeps
    /// whatever is stored.
    pub amount_captured: Option<Amount>,
}

/// Result of a fenced write (`OperationLeases::record`, `UnknownIndex::reschedule`,
/// `ManualResolutions::resolve`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    Written(Operation),
    /// The condition failed: the lease was lost, the status moved on or the record was settled.
    /// This is the current record, untouched (`None` if it does not exist).
    Refused(Option<Operation>),
}

/// A re-drive by the reconciler or an operator: a change of schedule made without a lease and
/// guarded by the status and `updated_at` read before, so a concurrent writer always wins over it.
/// A reschedule that sends counts one more re-drive (`redrives`, the next dedup id suffix); the
/// reconciler's wait for a long queue sends nothing and counts none.
#[derive(Debug, Clone)]
pub struct Reschedule {
    pub key: OperationKey,
    pub operation_id: OperationId,
    pub expected_status: OperationStatus,
    pub expected_updated_at: Timestamp,
    pub next_due_at: Timestamp,
    /// Takes the operation out of review and back to automatic work (an operator's re-drive).
    pub clear_review: bool,
    pub now: Timestamp,
    /// An operator's re-drive: refuse while a lease may still be live (see
    /// [`OperatorGuard::lease_cutoff`]) and append this entry to the history.
    pub operator: Option<OperatorGuard>,
    /// A message goes out with it: counted in `redrives`, which the message's dedup id ends
    /// with. False for a reconciler's wait on a long queue (nothing sent).
    pub sends: bool,
}

impl Reschedule {
    /// The reconciler's re-drive of `op` as read: guarded by its status and `updated_at`, due
    /// again at `next_due_at`. An operator's re-drive adds `clear_review`
    /// and an [`OperatorGuard`].
    pub fn redrive(op: &Operation, next_due_at: Timestamp, now: Timestamp) -> Self {
        Self {
            key: op.key(),
            operation_id: op.operation_id,
            expected_status: op.status,
            expected_updated_at: op.updated_at,
            next_due_at,
            clear_review: false,
            now,
            operator: None,
            sends: true,
        }
    }

    /// The reconciler waiting for a long queue: due again at `next_due_at`, nothing sent.
    pub fn wait(op: &Operation, next_due_at: Timestamp, now: Timestamp) -> Self {
        Self {
            sends: false,
            ..Self::redrive(op, next_due_at, now)
        }
    }
}

/// What guards an operator's write besides `updated_at`: a lease counts as live until its own
/// expiry plus a safety margin, so a laptop clock a little ahead cannot see it expired early.
#[derive(Debug, Clone)]
pub struct OperatorGuard {
    /// The write is refused if the record holds a lease expiring after this time (the operator's
    /// now minus the margin).
    pub lease_cutoff: Timestamp,
    pub audit: AuditEntry,
}

/// An operator settling an operation by hand (`chargectl resolve`): only if nobody wrote since
/// the operator read it (`expected_updated_at`), it is unsettled, and no lease may be live. The
/// record's review leaves it: the caller copies the reason into the audit entry
/// (`AuditEntry::review`).
#[derive(Debug, Clone)]
pub struct ManualResolution {
    pub key: OperationKey,
    pub operation_id: OperationId,
    pub status: OperationStatus,
    pub external_id: Option<PaymentIntentId>,
    pub expected_updated_at: Timestamp,
    pub guard: OperatorGuard,
    /// A refund's Stripe id as Stripe confirmed it; `None` keeps whatever is stored.
    pub stripe_refund_id: Option<StripeRefundId>,
    /// A refund resolved `failed` (Stripe holds it failed or canceled, or holds none) gives its
    /// reservation back to its charge in the same write, as the executor's outcome does: a
    /// resolution without it would leave the charge's refundable amount short for good.
    pub release: Option<ReleaseRefund>,
    /// A capture or cancel resolved `failed` while Stripe still holds the authorization
    /// (`requires_capture`: nothing captured or released) gives it back to its charge in the
    /// same write, as the executor's outcome for a refusal does: without it the charge would
    /// stay taken until Stripe lets the hold lapse.
    pub authorization: Option<SettleAuthorization>,
}

/// A refund's amount taken from what is left of its order's charge: written in the same
/// conditional write that creates the refund (`OperationCreates::create_beside`), so two refunds
/// accepted at once can never together exceed the charge. Guarded by
/// [`crate::store_rules`]: the charge read is the one written to, still succeeded, and its
/// reservations leave room for this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReserveRefund {
    /// The order's charge.
    pub charge: OperationKey,
    /// The charge's operation id as read.
    pub charge_operation_id: OperationId,
    pub amount: Amount,
    /// The amount charged, as read (it never changes).
    pub charged: Amount,
    pub now: Timestamp,
}

impl ReserveRefund {
    /// The most the charge may have reserved before this write for the refund to fit. A store
    /// whose condition cannot add (DynamoDB) checks `refund_reserved <= charged - amount`, which
    /// is `refund_reserved + amount <= charged`.
    pub fn max_reserved_before(&self) -> i64 {
        self.charged.minor_units() - self.amount.minor_units()
    }
}

/// A refund that ended `failed` or `canceled` gives its reservation back to its charge, in the
/// same conditional write that records the refund's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseRefund {
    pub charge: OperationKey,
    pub amount: Amount,
    pub now: Timestamp,
}

/// Stripe's word, read by retrieve, that a refund recorded `succeeded` failed later (the card was
/// closed, lost or expired: Stripe returned the money to the balance). The one transition a
/// settled record takes: `succeeded → failed`, for a refund only, with its reservation given back
/// to the charge in the same write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundFailedLater {
    pub key: OperationKey,
    pub operation_id: OperationId,
    /// Stripe's `failure_reason` (`expired_or_canceled_card`, ...).
    pub failure_reason: String,
    pub release: ReleaseRefund,
    pub now: Timestamp,
}

/// Where a capture or cancel takes a charge from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakeFrom {
    /// An authorized charge (Stripe holds it `requires_capture`): a capture or a cancel.
    Authorized,
    /// A charge never sent to Stripe (pending, never claimed for a call): a cancel stops it
    /// here, settled `failed` in the same write, before Stripe is ever called.
    NeverSent,
}

/// A capture's or a cancel's claim on its order's charge, written in the same conditional write
/// that creates the capture or cancel operation (`OperationCreates::create_beside`): the charge
/// names its taker, so a capture and a cancel asked at once can never both be accepted — the
/// store decides, not timing. Guarded by [`crate::store_rules`]: the charge read is the one
/// written to, no one took it before, and it is where `from` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeAuthorization {
    /// The order's charge.
    pub charge: OperationKey,
    /// The charge's operation id as read.
    pub charge_operation_id: OperationId,
    pub taker: Taker,
    pub from: TakeFrom,
    pub now: Timestamp,
}

/// How a capture's or a cancel's outcome ends its charge's authorization, in the same write
/// that records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationOutcome {
    /// Captured: the charge `succeeded`, this much taken (the rest of the hold released).
    Captured(Amount),
    /// Canceled by our cancel: the charge `failed`, nothing taken.
    Canceled,
    /// Stripe canceled the hold at its deadline before it was captured: the charge `failed`.
    Expired,
    /// The capture or cancel ended without changing the hold (refused by Stripe for a reason
    /// of its own): the charge stays `authorized`, free for another capture or cancel.
    GivenBack,
}

/// The charge side of a capture's or a cancel's outcome ([`AuthorizationOutcome`]), written with
/// the operation's fenced outcome (all or nothing): the fence makes it happen once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettleAuthorization {
    pub charge: OperationKey,
    pub taker: Taker,
    pub outcome: AuthorizationOutcome,
    pub now: Timestamp,
}

/// What a dispute's write does to its order's charge, in the same write as the dispute's record
/// (all or nothing): names the open dispute (or clears it once closed), and reserves the
/// disputed amount beside the refunds' (funds withdrawn) or gives it back (won). Guarded by
/// [`crate::store_rules`]: the charge read is the one written to and, to reserve, still
/// succeeded with room left, as a refund's reservation is ([`ReserveRefund`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisputeOnCharge {
    /// The order's charge.
    pub charge: OperationKey,
    /// The charge's operation id as read.
    pub charge_operation_id: OperationId,
    /// The open dispute as the charge names it, or `None` to clear it.
    pub mark: DisputeMark,
    /// Funds withdrawn: the disputed amount reserved, with what the charge took as read.
    pub reserve: Option<(Amount, Amount)>,
    /// Won: the reservation given back.
    pub give_back: Option<Amount>,
    pub now: Timestamp,
}

/// What a dispute's write says of the charge's open dispute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DisputeMark {
    /// Left as it is.
    Keep,
    /// This dispute is open on the charge; Stripe says the charge is (not) still refundable.
    Open {
        dispute: DisputeId,
        refundable: bool,
    },
    /// Closed: the charge names no open dispute.
    Clear,
}

impl DisputeOnCharge {
    /// The most the charge may have reserved before this write for the dispute to fit
    /// (as [`ReserveRefund::max_reserved_before`]).
    pub fn max_reserved_before(&self) -> Option<i64> {
        self.reserve
            .map(|(amount, taken)| taken.minor_units() - amount.minor_units())
    }
}

/// A dispute's record moved to what Stripe holds now, beside its charge's change if any: only
/// the record read (`expected_updated_at`), only while unsettled, so two deliveries at once
/// write once and a settled dispute never moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisputeMove {
    pub key: OperationKey,
    pub operation_id: OperationId,
    pub expected_updated_at: Timestamp,
    /// `unknown` while open; `succeeded` (lost) or `failed` (won, an inquiry closed) once
    /// Stripe closed it.
    pub status: OperationStatus,
    pub state: DisputeState,
    /// Unsettled: when it is read again at Stripe (kept as it is while in review: the review
    /// partition is ordered by the flag's time). Ignored once settled.
    pub next_due_at: Option<Timestamp>,
    /// Flags it for review (`None` leaves the flag as it is; a settling write clears it).
    pub review: Option<Review>,
    /// Replaces the last error (`None` leaves it).
    pub last_error: Option<String>,
    /// The record is in review as read (its index partition stays the review one).
    pub in_review: bool,
    /// The charge's side, in the same write; `None`: the charge is not written.
    pub on_charge: Option<DisputeOnCharge>,
    pub now: Timestamp,
}

/// Result of `OperationCreates::record_dispute`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DisputeRecorded {
    Written(Operation),
    /// The dispute's record moved since it was read, or settled: the current one (`None`:
    /// gone). Nothing was written.
    Refused(Option<Operation>),
    /// The charge refused its side (moved since read, no room left to reserve): nothing was
    /// written; read both again and plan again.
    ChargeRefused,
}

/// The write that starts an order's next charge attempt (`OperationCreates::create_attempt`),
/// after its latest attempt `n` ended `failed`: one transaction, all or nothing
/// ([`crate::store_rules::start_attempt`]):
/// - the new attempt's record `charge#<n+1>`, only where none is;
/// - the head (the first attempt, sort key `charge`) names it as the latest, only if it still
///   names `n` (absent when `n` is 1): two retries at once, one attempt. Nothing else of the
///   head moves, not even `updated_at` (a settled record rewritten is no outcome);
/// - attempt `n` is still the one read, `failed`, and no cancel ended it (`taken_by` absent,
///   or a capture's that found the authorization lapsed: nothing was taken): a canceled order
///   stays canceled. For `n` = 1 that is the head's own condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAttempt {
    /// The new attempt's record: kind `Charge(n+1)`, `pending`, its own operation id.
    pub op: Operation,
    /// Attempt `n`'s operation id, as the door read it.
    pub after_operation_id: OperationId,
}

impl NewAttempt {
    /// The new attempt's number, `n + 1` (2 or more).
    pub fn number(&self) -> u32 {
        self.op.kind.attempt_no().unwrap_or(1)
    }

    /// The number of the attempt it follows, `n`.
    pub fn after(&self) -> u32 {
        self.number().saturating_sub(1)
    }

    /// The order's head: its first attempt's key.
    pub fn head_key(&self) -> OperationKey {
        OperationKey::charge(self.op.order_id.clone())
    }

    /// Attempt `n`'s key (the head's when `n` is 1).
    pub fn after_key(&self) -> OperationKey {
        OperationKey {
            order_id: self.op.order_id.clone(),
            kind: crate::domain::OperationKind::Charge(self.after().max(1)),
        }
    }
}

/// Result of `OperationCreates::create_attempt`.
// One answer per request, moved once: the size of a refusal does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreatedAttempt {
    /// The new attempt was written and the head names it.
    New(Operation),
    /// Another write moved first (another retry made the attempt, a cancel took the latest, the
    /// head names another latest) or a record is missing: nothing was written. The door reads
    /// the attempts again and decides again.
    Refused,
}
