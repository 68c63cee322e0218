//! The operation store: the durable record of operations, its conditional writes and the unknown
//! index. A failed condition is a value ([`Claim::Settled`], [`Recorded::Refused`]), never an
//! error; [`StoreError`] is the store itself failing, with its `#[source]`.

use std::error::Error as StdError;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use charge_core::audit::AuditWindow;
use charge_core::domain::{OperationId, OperationKind, OrderId};
use charge_core::operation::{Operation, OperationKey};
use charge_core::store::{
    Claim, ClaimRequest, Created, CreatedAttempt, DisputeMove, DisputeRecorded, ManualResolution,
    NewAttempt, OutcomeRecord, Recorded, RefundFailedLater, Reschedule,
};
use charge_core::store_rules::{ChargeClaim, CreatedBeside};
use charge_core::time::Timestamp;

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
/// ([`UnknownIndex::count_in_review`]).
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

/// The durable record of operations (DynamoDB in production), as one whole: every capability
/// below, which a full adapter (`DynamoStore`, `MemoryStore`, the simulation's `SimStore`)
/// implements one by one. Implemented for any type that has them all; a caller that needs only
/// some names only those ([`OperationReads`], [`OperationCreates`], [`OperationLeases`],
/// [`UnknownIndex`], [`ManualResolutions`], [`SettledRecords`]), or the set one caller uses
/// ([`DoorStore`], [`AuditStore`]), and a wrapper implements the ones it changes and forwards the
/// rest (the simulation's `forward_store!`). The callers' sets are supertraits too, so a
/// whole store (`Arc<dyn OperationStore>`) is handed to such a caller as it is.
pub trait OperationStore:
    OperationReads
    + OperationCreates
    + OperationLeases
    + UnknownIndex
    + ManualResolutions
    + SettledRecords
    + DoorStore
    + AuditStore
{
}

/// The store as the checkout door uses it: read what is there, create what is not (alone, or
/// beside its claim on the order's charge).
pub trait DoorStore: OperationReads + OperationCreates {}

impl<T: OperationReads + OperationCreates + ?Sized> DoorStore for T {}

/// The store as the drift audit reads it: the records settled in a window, an order's refunds,
/// the review partition counted.
pub trait AuditStore: OperationReads + UnknownIndex + SettledRecords {}

impl<T: OperationReads + UnknownIndex + SettledRecords + ?Sized> AuditStore for T {}

impl<T> OperationStore for T where
    T: OperationReads
        + OperationCreates
        + OperationLeases
        + UnknownIndex
        + ManualResolutions
        + SettledRecords
        + ?Sized
{
}

/// Reads by key: the door, the events function, the reconciler and the operator read a record (or
/// an order's refunds) before they decide.
#[async_trait]
pub trait OperationReads: Send + Sync {
    /// Reads one record by its business identity (strongly consistent).
    async fn get(&self, key: &OperationKey) -> Result<Option<Operation>, StoreError>;

    /// Every refund of `order_id`, by refund id (strongly consistent; one Query of the order's
    /// partition, paged). A refund this release cannot read is an error naming it.
    async fn refunds_of(&self, order_id: &OrderId) -> Result<Vec<Operation>, StoreError>;

    /// The order's latest charge attempt: what refunds, captures, cancels and disputes act on,
    /// "the order's charge". The first attempt's record (sort key `charge`) is the order's
    /// head and names the latest once there are more ([`Operation::latest_attempt`]), so an
    /// order charged once is one read, as before attempts, and a retried one two. `None`: no
    /// charge was asked for this order. A head naming an attempt that is not there is an
    /// error (the store's write makes both at once), never read as the first.
    async fn charge_of(&self, order_id: &OrderId) -> Result<Option<Operation>, StoreError> {
        let Some(head) = self.get(&OperationKey::charge(order_id.clone())).await? else {
            return Ok(None);
        };
        let n = head.latest_attempt();
        if n <= 1 {
            return Ok(Some(head));
        }
        let key = OperationKey::charge_attempt(order_id.clone(), n)
            .map_err(|e| StoreError::new(format!("order {order_id}'s head: {e}")))?;
        match self.get(&key).await? {
            Some(latest) => Ok(Some(latest)),
            None => Err(StoreError::new(format!(
                "order {order_id}'s first charge attempt names attempt {n} as its latest, and there is no such record"
            ))),
        }
    }

    /// Every charge attempt of `order_id`, first to latest (empty: no charge asked): what
    /// `GET /orders/{id}/charge` and `chargectl show` list. One read per attempt, strongly
    /// consistent; bounded by [`OperationKind::MAX_CHARGE_ATTEMPTS`].
    async fn attempts_of(&self, order_id: &OrderId) -> Result<Vec<Operation>, StoreError> {
        match self.get(&OperationKey::charge(order_id.clone())).await? {
            Some(head) => self.attempts_after(head).await,
            None => Ok(Vec::new()),
        }
    }

    /// The order's attempts, first to latest, from its `head` as already read (the door reads
    /// it from its conditional create): the head alone when it names no later attempt (no read
    /// more), else each later one read, strongly consistent, the head not read again. A head
    /// naming an attempt that is not there is an error, never read as fewer attempts.
    async fn attempts_after(&self, head: Operation) -> Result<Vec<Operation>, StoreError> {
        let latest = head.latest_attempt();
        let order_id = head.order_id.clone();
        let mut attempts = vec![head];
        for n in 2..=latest {
            let key = OperationKey::charge_attempt(order_id.clone(), n)
                .map_err(|e| StoreError::new(format!("order {order_id}'s head: {e}")))?;
            match self.get(&key).await? {
                Some(op) => attempts.push(op),
                None => {
                    return Err(StoreError::new(format!(
                        "order {order_id}'s charge attempt {n} of {latest} is not there"
                    )))
                }
            }
        }
        Ok(attempts)
    }

    /// Every dispute of `order_id`, by dispute id (strongly consistent; one Query of the order's
    /// partition, paged): what `chargectl show` lists under the order's charge. The default
    /// refuses, for wrappers and doubles that never list disputes.
    async fn disputes_of(&self, order_id: &OrderId) -> Result<Vec<Operation>, StoreError> {
        let _ = order_id;
        Err(StoreError::new(
            "this store does not list an order's disputes",
        ))
    }
}

/// The door's writes (and the events function's, for a refund made in the dashboard): a new
/// record, alone or beside its claim on the order's charge.
#[async_trait]
pub trait OperationCreates: Send + Sync {
    /// Writes `op` unless a record with the same business identity exists; then returns that one.
    async fn create_if_absent(&self, op: &Operation) -> Result<Created, StoreError>;

    /// Writes `op` and makes its `claim` on the order's charge (a refund's reservation, a
    /// capture's or cancel's take), in one write over both records, all or nothing
    /// ([`charge_core::store_rules::create_beside`]): one with the same key already there is returned
    /// and the charge is untouched; a charge whose guards refuse the claim (moved since read, no
    /// room, taken by another) leaves both untouched.
    async fn create_beside(
        &self,
        op: &Operation,
        claim: ChargeClaim<'_>,
    ) -> Result<CreatedBeside, StoreError>;

    /// Starts the order's next charge attempt ([`NewAttempt`]) in one write, all or nothing
    /// ([`charge_core::store_rules::start_attempt`]): the new attempt's record where none is, the
    /// head naming it as the latest while it names the one the door read, and that attempt
    /// still the one read, `failed`, not ended by a cancel. Two retries at once: one is
    /// [`CreatedAttempt::New`], the other [`CreatedAttempt::Refused`] (nothing written). The
    /// default refuses, for wrappers and doubles that never start an attempt.
    async fn create_attempt(&self, req: &NewAttempt) -> Result<CreatedAttempt, StoreError> {
        let _ = req;
        Err(StoreError::new("this store does not start charge attempts"))
    }

    /// Moves a dispute's record to what Stripe holds ([`DisputeMove`]: only the record read,
    /// only while unsettled) and, when it has one, makes its charge's side in the same write,
    /// all or nothing. A dispute's first record is written by [`Self::create_beside`] with
    /// [`ChargeClaim::Dispute`]. The default refuses, for wrappers and doubles that never see a
    /// dispute.
    async fn record_dispute(&self, req: &DisputeMove) -> Result<DisputeRecorded, StoreError> {
        let _ = req;
        Err(StoreError::new("this store does not record disputes"))
    }
}

/// The engine's writes, fenced on the record's state: take the lease, record what Stripe said
/// (and the events function's late refund failure).
#[async_trait]
pub trait OperationLeases: Send + Sync {
    /// Takes the lease in one conditional write: the status is unsettled, no review flag, and no
    /// live lease. Sets the lease, `first_attempted_at` if absent, `attempts + 1`.
    async fn claim(&self, req: &ClaimRequest) -> Result<Claim, StoreError>;

    /// Records an outcome, fenced on the lease token and on an unsettled status. Clears the lease.
    /// A refund's `release` or a capture's or cancel's `authorization` changes the order's charge
    /// in the same write, both or neither: refused by the fence, the record as it is; refused by
    /// the charge, an error ([`charge_core::store_rules::RELEASE_REFUSED`],
    /// [`charge_core::store_rules::AUTHORIZATION_REFUSED`]) and nothing written.
    async fn record(&self, rec: &OutcomeRecord) -> Result<Recorded, StoreError>;

    /// A succeeded refund that Stripe says failed later: `failed`, its reservation given back to
    /// the charge in the same write, both or neither. Refused (the record as it is) unless the
    /// record is that refund, succeeded; a release the charge cannot take is an error.
    async fn fail_refund_later(&self, req: &RefundFailedLater) -> Result<Recorded, StoreError>;
}

/// The reconciler's: the unknown index, read page by page, and a due time moved.
#[async_trait]
pub trait UnknownIndex: Send + Sync {
    /// Reads the unknown index (never the whole table), page by page.
    async fn query_index(
        &self,
        query: IndexQuery,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError>;

    /// Moves the next due time (and counts a re-drive), only if nobody wrote since it was read.
    async fn reschedule(&self, req: &Reschedule) -> Result<Recorded, StoreError>;

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

    /// The dispute records among the index entries due by `horizon`, page by page (up to `limit`
    /// entries of every kind per page, so a page may hold no dispute and still have a next):
    /// the entries are told apart by their sort key, and only the disputes' records are read,
    /// so the authorizations and unknowns due within the horizon cost their index entries and
    /// no record read (the reconciler's dispute gauges). The default filters
    /// [`query_index`](Self::query_index)'s page, for the in-memory stores.
    async fn disputes_due_by(
        &self,
        horizon: Timestamp,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let mut page = self
            .query_index(IndexQuery::DueBy(horizon), cursor, limit)
            .await?;
        page.operations
            .retain(|op| matches!(op.kind, OperationKind::Dispute(_)));
        page.unreadable.retain(|r| is_dispute_key(&r.key));
        Ok(page)
    }
}

/// Whether an unreadable record's key (`<order id>/<sort key>`) is a dispute's.
fn is_dispute_key(key: &str) -> bool {
    key.rsplit_once('/')
        .is_some_and(|(_, sk)| matches!(OperationKind::parse(sk), Ok(OperationKind::Dispute(_))))
}

/// The operator's (`chargectl`): find unsettled work by its operation id, settle it by hand.
#[async_trait]
pub trait ManualResolutions: Send + Sync {
    /// Finds an **unsettled** record by its operation id (for operators acting on unsettled work;
    /// not on the charge path). A settled record is not found this way: it is read by its order id
    /// ([`OperationReads::get`]), which Stripe's metadata also carries. Why: an index by operation
    /// id would cost a write per operation; the unknown index already lists every
    /// unsettled one.
    async fn get_by_operation_id(
        &self,
        operation_id: &OperationId,
    ) -> Result<Option<Operation>, StoreError>;

    /// Settles by hand, only if the operation is unchanged since read, still unsettled and not
    /// leased; appends the audit entry in the same write.
    async fn resolve(&self, req: &ManualResolution) -> Result<Recorded, StoreError>;
}

/// The drift audit's: the records settled in a window.
#[async_trait]
pub trait SettledRecords: Send + Sync {
    /// One page of the records **settled** (status became `succeeded` or `failed`) in `window`,
    /// any kind, oldest settle first: what the drift audit matches to Stripe. A record settled
    /// by a release that did not keep the settle time is not listed (its window predates the
    /// audit). The default refuses, for wrappers and doubles that never audit.
    async fn settled_between(
        &self,
        window: &AuditWindow,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let _ = (window, cursor, limit);
        Err(StoreError::new("this store does not list settled records"))
    }

    /// One page of the **refund** records settled in `window`, as [`settled_between`] lists them
    /// (a page may hold fewer than `limit`, even none, while `next` says more follow): what the
    /// refund watch and the audit's re-read of recent refunds read again at Stripe. The default
    /// keeps the refunds of [`settled_between`]'s pages; the DynamoDB store reads only the
    /// refunds' records (the index's keys name the kind).
    ///
    /// [`settled_between`]: Self::settled_between
    async fn settled_refunds_between(
        &self,
        window: &AuditWindow,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let mut page = self.settled_between(window, cursor, limit).await?;
        page.operations
            .retain(|op| matches!(op.kind, OperationKind::Refund(_)));
        page.unreadable.retain(|bad| bad.key.contains("/refund#"));
        Ok(page)
    }
}

/// Where the dispute watch stands ([`crate::dispute_watch`]): the end of the span of creation
/// times its ticks have listed at Stripe and recorded, one small item beside the refund watch's
/// (`pk = WATCH`, `sk = disputes`), moved only from the value read.
#[async_trait]
pub trait DisputeWatchCursor: Send + Sync {
    /// The end of the listed span; `None` before the first tick.
    async fn disputes_listed_through(&self) -> Result<Option<Timestamp>, StoreError>;

    /// Moves it from `from` (as read) to `to`; `false` (nothing written) when it is no longer
    /// `from`.
    async fn advance_dispute_watch(
        &self,
        from: Option<Timestamp>,
        to: Timestamp,
    ) -> Result<bool, StoreError>;
}

/// Where the refund watch stands ([`charge_core::refund::watch`]): the end of the span of settle
/// times its ticks have covered, one small item beside the audit's reports, moved only from the
/// value read (two overlapping ticks: one moves it, the other's reads are repeats, harmless).
#[async_trait]
pub trait RefundWatchCursor: Send + Sync {
    /// The end of the covered span; `None` before the first tick.
    async fn watched_through(&self) -> Result<Option<Timestamp>, StoreError>;

    /// Moves it from `from` (as read) to `to`; `false` (nothing written) when it is no longer
    /// `from`.
    async fn advance_watch(
        &self,
        from: Option<Timestamp>,
        to: Timestamp,
    ) -> Result<bool, StoreError>;
}
