//! The operation store: the durable record of operations, its conditional writes and the unknown
//! index. A failed condition is a value ([`Claim::Settled`], [`Recorded::Refused`]), never an
//! error; [`StoreError`] is the store itself failing, with its `#[source]`.

use std::error::Error as StdError;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

use crate::domain::{OperationId, PaymentIntentId};
use crate::operation::{
    AuditEntry, Lease, LeaseToken, Operation, OperationKey, OperationStatus, Review,
};
use crate::time::Timestamp;

/// A failure of the store itself (network, throttling, a malformed item). Never a business outcome:
/// conditional-check failures come back as values, not errors.
#[derive(Debug, thiserror::Error)]
#[error("operation store: {message}")]
pub struct StoreError {
    pub message: String,
    #[source]
    pub source: Option<Box<dyn StdError + Send + Sync>>,
    /// The stored key (`ORDER#…/charge`) of a record that exists but this release cannot read
    /// (the error is the parse error): shown raw by `chargectl show`, counted by the reconciler.
    pub unreadable: Option<String>,
}

impl StoreError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
            unreadable: None,
        }
    }

    /// `self`, as the reason the record stored under `key` cannot be read.
    pub fn of_unreadable(mut self, key: impl Into<String>) -> Self {
        self.unreadable = Some(key.into());
        self
    }

    pub fn with_source(
        message: impl Into<String>,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        Self {
            message: message.into(),
            source: Some(Box::new(source)),
            unreadable: None,
        }
    }
}

/// Result of [`OperationStore::create_if_absent`].
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

/// Result of [`OperationStore::claim`].
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
}

/// Result of a fenced write ([`OperationStore::record`], [`OperationStore::reschedule`],
/// [`OperationStore::resolve`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    Written(Operation),
    /// The condition failed: the lease was lost, the status moved on or the record was settled.
    /// This is the current record, untouched (`None` if it does not exist).
    Refused(Option<Operation>),
}

/// A re-drive by the reconciler or an operator: a change of schedule made without a lease and
/// guarded by the status and `updated_at` read before, so a concurrent writer always wins over it.
/// Every reschedule counts one more re-drive (`redrives`, the next dedup id suffix).
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
}

/// One page of the unknown index.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub operations: Vec<Operation>,
    /// Records of this page that could not be read (a shape no release wrote, a hand edit): left
    /// out of `operations` so they never stop the rest; the caller counts and logs them.
    pub unreadable: Vec<UnreadableRecord>,
    /// Pass back to get the next page; `None` when there is no more.
    pub next: Option<String>,
}

/// A stored record this release cannot read, by its key, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadableRecord {
    /// The table key as stored (`ORDER#…` / `charge`).
    pub key: String,
    /// The parse error, with its causes.
    pub reason: String,
}

/// One page of the REVIEW partition, counted from the index alone
/// ([`OperationStore::count_in_review`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReviewCount {
    /// Entries in this page: operations waiting for a person, whether this release can read
    /// their records or not.
    pub entries: u64,
    /// The earliest due time of the page. A review's due time is when it was flagged (the
    /// executor records it due at the decision), so this is the longest wait's start.
    pub oldest_flagged_at: Option<Timestamp>,
    /// Pass back to count the next page; `None` when there is no more.
    pub next: Option<String>,
}

/// Which part of the unknown index to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexQuery {
    /// Automatic work: unsettled, not in review, due at or before this time. Oldest due first.
    DueBy(Timestamp),
    /// Everything unsettled and not in review, whenever due.
    Unsettled,
    /// Everything waiting for an operator.
    InReview,
}

/// Calls made to an [`OperationStore`], split as DynamoDB bills them (a failed conditional write is
/// still a write; one BatchGetItem is one read). Both the memory and the DynamoDB store count into
/// one of these, so tests, the simulation and the benchmarks read the same counters on either.
#[derive(Debug, Default)]
pub struct StoreCalls {
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub queries: AtomicU64,
}

impl StoreCalls {
    pub fn read(&self) {
        self.reads.fetch_add(1, Ordering::Relaxed);
    }

    pub fn write(&self) {
        self.writes.fetch_add(1, Ordering::Relaxed);
    }

    pub fn query(&self) {
        self.queries.fetch_add(1, Ordering::Relaxed);
    }
}

/// The durable record of operations (DynamoDB in production).
#[async_trait]
pub trait OperationStore: Send + Sync {
    /// Writes `op` unless a record with the same business identity exists; then returns that one.
    async fn create_if_absent(&self, op: &Operation) -> Result<Created, StoreError>;

    /// Reads one record by its business identity (strongly consistent).
    async fn get(&self, key: &OperationKey) -> Result<Option<Operation>, StoreError>;

    /// Finds an **unsettled** record by its operation id (for operators acting on unsettled work;
    /// not on the charge path). A settled record is not found this way: it is read by its order id
    /// ([`get`](Self::get)), which Stripe's metadata also carries. Why: an index by operation id
    /// would cost a write per operation (issue 15); the unknown index already lists every
    /// unsettled one.
    async fn get_by_operation_id(
        &self,
        operation_id: &OperationId,
    ) -> Result<Option<Operation>, StoreError>;

    /// Takes the lease in one conditional write: the status is unsettled, no review flag, and no
    /// live lease. Sets the lease, `first_attempted_at` if absent, `attempts + 1`.
    async fn claim(&self, req: &ClaimRequest) -> Result<Claim, StoreError>;

    /// Records an outcome, fenced on the lease token and on an unsettled status. Clears the lease.
    async fn record(&self, rec: &OutcomeRecord) -> Result<Recorded, StoreError>;

    /// Moves the next due time (and counts a re-drive), only if nobody wrote since it was read.
    async fn reschedule(&self, req: &Reschedule) -> Result<Recorded, StoreError>;

    /// Settles by hand, only if the operation is unchanged since read, still unsettled and not
    /// leased; appends the audit entry in the same write.
    async fn resolve(&self, req: &ManualResolution) -> Result<Recorded, StoreError>;

    /// Reads the unknown index (never the whole table), page by page.
    async fn query_index(
        &self,
        query: IndexQuery,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError>;

    /// Counts the operations waiting for a person, up to `limit` index entries of the REVIEW
    /// partition per page, from the entries alone: no record is read, so a review storm costs
    /// what its index entries cost, and a record this release cannot read counts like any other.
    /// The default counts pages of [`query_index`](Self::query_index), for the in-memory stores
    /// (whose records are all readable and cost nothing to read).
    async fn count_in_review(
        &self,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<ReviewCount, StoreError> {
        let page = self
            .query_index(IndexQuery::InReview, cursor, limit)
            .await?;
        Ok(ReviewCount {
            entries: (page.operations.len() + page.unreadable.len()) as u64,
            oldest_flagged_at: page.operations.iter().filter_map(|op| op.next_due_at).min(),
            next: page.next,
        })
    }
}
