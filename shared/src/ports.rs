//! What the core needs from the world, as small traits. Each has a real adapter (DynamoDB, SQS,
//! Stripe over HTTP) and an in-memory one (see [`crate::memory`]); both pass the same contract tests.

use std::error::Error as StdError;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::domain::{
    ChargeParams, IdempotencyKey, OperationId, OperationKind, OrderId, PaymentIntentId,
};
use crate::operation::{
    AuditEntry, Lease, LeaseToken, Operation, OperationKey, OperationStatus, Review,
};
use crate::outcome::{GatewayError, PaymentIntent};
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
    /// [`ManualResolution::lease_cutoff`]) and append this entry to the history.
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
}

/// The body of a charge message. Versioned; carries no amount and no card data, only what
/// identifies the operation, which the charge function reads back from the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChargeMessage {
    pub v: u32,
    pub operation_id: OperationId,
    pub order_id: OrderId,
    pub kind: OperationKind,
}

impl ChargeMessage {
    pub const VERSION: u32 = 1;

    pub fn for_operation(op: &Operation) -> Self {
        Self {
            v: Self::VERSION,
            operation_id: op.operation_id,
            order_id: op.order_id.clone(),
            kind: op.kind,
        }
    }

    pub fn key(&self) -> OperationKey {
        OperationKey {
            order_id: self.order_id.clone(),
            kind: self.kind,
        }
    }
}

/// A message as it goes onto the FIFO queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedCharge {
    pub message: ChargeMessage,
    /// `operation_id`, or `operation_id:<n>` for the n-th deliberate re-drive.
    pub dedup_id: String,
    /// `order_id`: one order's messages stay in order, unrelated orders never block each other.
    pub group_id: String,
}

impl QueuedCharge {
    /// The first send for an operation (and any re-send of it within the dedup window).
    pub fn first(op: &Operation) -> Self {
        Self {
            message: ChargeMessage::for_operation(op),
            dedup_id: op.operation_id.to_string(),
            group_id: op.order_id.as_str().to_owned(),
        }
    }

    /// The n-th deliberate re-drive: a fresh dedup id so FIFO dedup does not swallow it.
    pub fn redrive(op: &Operation, n: u32) -> Self {
        Self {
            dedup_id: format!("{}:{n}", op.operation_id),
            ..Self::first(op)
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("charge queue: {message}")]
pub struct QueueError {
    pub message: String,
    #[source]
    pub source: Option<Box<dyn StdError + Send + Sync>>,
}

impl QueueError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    pub fn with_source(
        message: impl Into<String>,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        Self {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

/// The queue that carries operations to the charge function (SQS FIFO in production).
#[async_trait]
pub trait ChargeQueue: Send + Sync {
    async fn send(&self, charge: &QueuedCharge) -> Result<(), QueueError>;
}

/// A message the charge function cannot act on, whatever the number of retries (unreadable,
/// unknown version, no such operation), copied to the dead-letter queue with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The body exactly as received.
    pub body: String,
    /// The source queue's message id (also the DLQ's dedup id).
    pub message_id: String,
    /// The source message group (`None` if the record had none).
    pub group_id: Option<String>,
    /// Why it can never succeed (`unparseable`, `unsupported_version`, `no_such_operation`).
    pub reason: String,
    /// The detail, for a person.
    pub detail: String,
}

/// Bringing a received message back sooner than the queue's visibility timeout (SQS
/// `ChangeMessageVisibility` on its receipt handle): a message Stripe's rate limit refused comes
/// back in seconds, not in the 30 minutes that protect a running charge.
#[async_trait]
pub trait MessageVisibility: Send + Sync {
    /// The message becomes visible again `delay` from now.
    async fn return_after(
        &self,
        receipt_handle: &str,
        delay: std::time::Duration,
    ) -> Result<(), QueueError>;
}

/// Where poison messages go (the charge queue's DLQ in production).
#[async_trait]
pub trait DeadLetterQueue: Send + Sync {
    async fn park(&self, letter: &DeadLetter) -> Result<(), QueueError>;
}

/// A create request: the parameters plus the key derived from the operation id.
#[derive(Debug, Clone)]
pub struct CreatePaymentIntent {
    pub idempotency_key: IdempotencyKey,
    pub operation_id: OperationId,
    /// Sent as `metadata[order_id]`: Stripe's webhooks find the operation by it, on the table
    /// key (issue 17).
    pub order_id: OrderId,
    pub params: ChargeParams,
}

impl CreatePaymentIntent {
    pub fn for_operation(op: &Operation) -> Self {
        Self {
            idempotency_key: op.idempotency_key(),
            operation_id: op.operation_id,
            order_id: op.order_id.clone(),
            params: op.params.clone(),
        }
    }
}

/// Stripe's PaymentIntents API as the core uses it.
#[async_trait]
pub trait PaymentGateway: Send + Sync {
    /// The mode of the key this gateway calls Stripe with (`sk_live_…`: true). A PaymentIntent
    /// whose `livemode` differs is not one of ours, whatever its metadata says.
    fn livemode(&self) -> bool;

    /// Creates and confirms off-session, with `metadata[operation_id]` and the idempotency key.
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError>;

    /// Reads the current state of a PaymentIntent.
    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError>;

    /// Finds PaymentIntents by `metadata['operation_id']`. Eventually consistent: never use it
    /// right after a create.
    async fn search_by_operation(
        &self,
        operation_id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError>;
}
