//! [`MemoryStore`]: the operation table in a `Mutex<BTreeMap>`, every write checked under the lock
//! by the store's rules ([`charge_core::store_rules`]), the guards DynamoDB checks as its condition
//! expression.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;

use charge_core::audit::{AuditReport, AuditWindow};
use charge_core::domain::{OperationId, OrderId};
use charge_core::operation::{Operation, OperationKey};
use charge_core::store_rules::{self, Transition, Written};
use charge_core::time::Timestamp;
use charge_core::{
    store::{
        Claim, ClaimRequest, Created, CreatedAttempt, DisputeMove, DisputeRecorded,
        ManualResolution, NewAttempt, OutcomeRecord, Recorded, RefundFailedLater, ReleaseRefund,
        Reschedule,
    },
    store_rules::{ChargeClaim, CreatedBeside},
};

use crate::ports::{
    AuditLog, DisputeWatchCursor, IndexQuery, ManualResolutions, OperationCreates, OperationLeases,
    OperationReads, Page, RefundWatchCursor, SettledRecords, StoreCalls, StoreError, StoredReports,
    UnknownIndex, UnreadableRecord,
};

#[derive(Default)]
pub struct MemoryStore {
    items: Mutex<BTreeMap<OperationKey, Operation>>,
    reports: ReportShelf,
    watch: WatchShelf,
    dispute_watch: WatchShelf,
    pub calls: StoreCalls,
}

/// The refund watch's cursor as DynamoDB keeps it: one value, moved only from the value read. The
/// memory store's and the simulation's.
#[derive(Default)]
pub struct WatchShelf(Mutex<Option<Timestamp>>);

impl WatchShelf {
    pub fn get(&self) -> Option<Timestamp> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves it from `from` to `to`; `false` when it is no longer `from`.
    pub fn advance(&self, from: Option<Timestamp>, to: Timestamp) -> bool {
        let mut at = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if *at != from {
            return false;
        }
        *at = Some(to);
        true
    }
}

/// The drift audit's reports as DynamoDB keeps them: JSON by window (end, then start), read back
/// through the same parse, so a report this release cannot read is set aside as there. The
/// memory store's and the simulation's.
#[derive(Default)]
pub struct ReportShelf(Mutex<BTreeMap<(Timestamp, Timestamp), String>>);

impl ReportShelf {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(Timestamp, Timestamp), String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `report` as its window's, replacing an earlier run's.
    pub fn put(&self, report: &AuditReport) -> Result<(), StoreError> {
        let raw = serde_json::to_string(report)
            .map_err(|e| StoreError::with_source("cannot encode the audit report", e))?;
        self.lock()
            .insert((report.window.to, report.window.from), raw);
        Ok(())
    }

    /// Stores `raw` as the report of `window`, as given (a report another release wrote, or a
    /// hand edit): for a test of what a read does with one it cannot read.
    pub fn put_raw(&self, window: &AuditWindow, raw: &str) {
        self.lock().insert((window.to, window.from), raw.to_owned());
    }

    /// The latest `limit` reports, newest window end first; one that cannot be read is counted
    /// with its key and why.
    pub fn latest(&self, limit: usize) -> StoredReports {
        let mut stored = StoredReports::default();
        for ((to, from), raw) in self.lock().iter().rev().take(limit.max(1)) {
            match serde_json::from_str(raw) {
                Ok(report) => stored.reports.push(report),
                Err(e) => stored.unreadable.push(UnreadableRecord {
                    key: format!("AUDIT/{}/{}", to.to_rfc3339(), from.to_rfc3339()),
                    reason: format!("report: {e}"),
                }),
            }
        }
        stored
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores a record as given, bypassing every condition (not counted as a call): for setting
    /// up a test in a state the ports would take many steps to reach.
    pub fn put_for_tests(&self, op: Operation) {
        self.lock().insert(op.key(), op);
    }

    /// Stores `raw` as the report of `window`, as given (a report another release wrote, or a
    /// hand edit): for a test of what [`AuditLog::latest_reports`] does with one it cannot read.
    pub fn put_raw_report_for_tests(&self, window: &AuditWindow, raw: &str) {
        self.reports.put_raw(window, raw);
    }

    /// Every record, for assertions and reports.
    pub fn all(&self) -> Vec<Operation> {
        self.lock().values().cloned().collect()
    }

    /// One conditional write under the lock, by the store's rules.
    fn conditional(
        &self,
        key: &OperationKey,
        write: &impl Transition,
    ) -> Result<Written, StoreError> {
        self.calls.write();
        let mut items = self.lock();
        let Some(op) = items.get_mut(key) else {
            return Ok(Err(None));
        };
        Ok(match store_rules::apply(op, write) {
            Ok(next) => {
                *op = next.clone();
                Ok(next)
            }
            Err(by) => Err(Some((op.clone(), by))),
        })
    }

    /// `write` at `key` and `on_charge` at `charge`, both or neither, under one lock: refused by
    /// `write`'s guards, the record as it is; refused by the charge's, the error `refused`
    /// (nothing written).
    fn with_charge(
        &self,
        key: &OperationKey,
        write: &impl Transition,
        charge: &OperationKey,
        on_charge: &impl Transition,
        refused: &'static str,
    ) -> Result<Recorded, StoreError> {
        self.calls.write();
        let mut items = self.lock();
        let Some(op) = items.get(key) else {
            return Ok(Recorded::Refused(None));
        };
        let Ok(next) = store_rules::apply(op, write) else {
            return Ok(Recorded::Refused(Some(op.clone())));
        };
        let charge_next = items.get(charge).ok_or_else(|| StoreError::new(refused))?;
        let charge_next =
            store_rules::apply(charge_next, on_charge).map_err(|_| StoreError::new(refused))?;
        items.insert(charge.clone(), charge_next);
        items.insert(key.clone(), next.clone());
        Ok(Recorded::Written(next))
    }

    /// `write` at `key` and the charge's `release`, both or neither.
    fn with_release(
        &self,
        key: &OperationKey,
        write: &impl Transition,
        release: &ReleaseRefund,
    ) -> Result<Recorded, StoreError> {
        let refused = store_rules::RELEASE_REFUSED;
        self.with_charge(key, write, &release.charge, release, refused)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<OperationKey, Operation>> {
        // A panic while holding the lock cannot leave a half-applied write (every write is one
        // assignment), so a poisoned lock is still consistent.
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Position in the index: due time, then the whole business key (order and kind: an order's
/// charge and its refunds, capture or cancel may be due at the same millisecond, and a cursor
/// without the kind would skip all but one of them at a page boundary).
fn index_position(op: &Operation) -> (i64, String, String) {
    let due = op.next_due_at.map(|t| t.as_millis()).unwrap_or(i64::MAX);
    (due, op.order_id.as_str().to_owned(), op.kind.sort_key())
}

/// The position as JSON: order ids and sort keys may hold any printable character.
fn encode_cursor(op: &Operation) -> String {
    serde_json::to_string(&index_position(op)).unwrap_or_default()
}

fn decode_cursor(cursor: &str) -> Result<(i64, String, String), StoreError> {
    serde_json::from_str(cursor).map_err(|_| StoreError::new("malformed page cursor"))
}

/// Position in the settled index: settle time, then the whole business key (as
/// [`index_position`], and for the same reason).
fn settled_position(op: &Operation) -> (i64, String, String) {
    let at = op.settled_at.map(|t| t.as_millis()).unwrap_or(i64::MAX);
    (at, op.order_id.as_str().to_owned(), op.kind.sort_key())
}

#[async_trait]
impl RefundWatchCursor for MemoryStore {
    async fn watched_through(&self) -> Result<Option<Timestamp>, StoreError> {
        self.calls.read();
        Ok(self.watch.get())
    }

    async fn advance_watch(
        &self,
        from: Option<Timestamp>,
        to: Timestamp,
    ) -> Result<bool, StoreError> {
        self.calls.write();
        Ok(self.watch.advance(from, to))
    }
}

#[async_trait]
impl DisputeWatchCursor for MemoryStore {
    async fn disputes_listed_through(&self) -> Result<Option<Timestamp>, StoreError> {
        self.calls.read();
        Ok(self.dispute_watch.get())
    }

    async fn advance_dispute_watch(
        &self,
        from: Option<Timestamp>,
        to: Timestamp,
    ) -> Result<bool, StoreError> {
        self.calls.write();
        Ok(self.dispute_watch.advance(from, to))
    }
}

#[async_trait]
impl AuditLog for MemoryStore {
    async fn put_report(&self, report: &AuditReport) -> Result<(), StoreError> {
        self.calls.write();
        self.reports.put(report)
    }

    async fn latest_reports(&self, limit: usize) -> Result<StoredReports, StoreError> {
        self.calls.query();
        Ok(self.reports.latest(limit))
    }
}

#[async_trait]
impl OperationReads for MemoryStore {
    async fn get(&self, key: &OperationKey) -> Result<Option<Operation>, StoreError> {
        self.calls.read();
        Ok(self.lock().get(key).cloned())
    }

    async fn refunds_of(&self, order_id: &OrderId) -> Result<Vec<Operation>, StoreError> {
        self.calls.query();
        // One order's records, as DynamoDB reads one partition: its charge's key sorts before
        // every other key of the order.
        Ok(self
            .lock()
            .range(OperationKey::charge(order_id.clone())..)
            .take_while(|(key, _)| key.order_id == *order_id)
            .filter(|(key, _)| key.kind.refund_id().is_some())
            .map(|(_, op)| op.clone())
            .collect())
    }

    async fn disputes_of(&self, order_id: &OrderId) -> Result<Vec<Operation>, StoreError> {
        self.calls.query();
        let mut disputes: Vec<Operation> = self
            .lock()
            .range(OperationKey::charge(order_id.clone())..)
            .take_while(|(key, _)| key.order_id == *order_id)
            .filter(|(key, _)| key.kind.dispute_id().is_some())
            .map(|(_, op)| op.clone())
            .collect();
        // As DynamoDB's Query returns them: by sort key.
        disputes.sort_by_key(|op| op.kind.sort_key());
        Ok(disputes)
    }
}

#[async_trait]
impl OperationCreates for MemoryStore {
    async fn create_if_absent(&self, op: &Operation) -> Result<Created, StoreError> {
        self.calls.write();
        let mut items = self.lock();
        let key = op.key();
        if let Some(existing) = items.get(&key) {
            return Ok(Created::Existing(existing.clone()));
        }
        items.insert(key, op.clone());
        Ok(Created::New(op.clone()))
    }

    async fn create_beside(
        &self,
        op: &Operation,
        claim: ChargeClaim<'_>,
    ) -> Result<CreatedBeside, StoreError> {
        self.calls.write();
        let mut items = self.lock();
        let key = op.key();
        let (created, charge) =
            store_rules::create_beside(items.get(&key), items.get(claim.charge()), op, &claim);
        if let Some(charge) = charge {
            items.insert(key, op.clone());
            items.insert(claim.charge().clone(), charge);
        }
        Ok(created)
    }

    async fn create_attempt(&self, req: &NewAttempt) -> Result<CreatedAttempt, StoreError> {
        self.calls.write();
        let mut items = self.lock();
        let head_key = req.head_key();
        let written = store_rules::start_attempt(
            items.get(&req.op.key()),
            items.get(&head_key),
            items.get(&req.after_key()),
            req,
        );
        let Ok(head) = written else {
            return Ok(CreatedAttempt::Refused);
        };
        items.insert(head_key, head);
        items.insert(req.op.key(), req.op.clone());
        Ok(CreatedAttempt::New(req.op.clone()))
    }

    async fn record_dispute(&self, req: &DisputeMove) -> Result<DisputeRecorded, StoreError> {
        self.calls.write();
        let mut items = self.lock();
        let Some(op) = items.get(&req.key) else {
            return Ok(DisputeRecorded::Refused(None));
        };
        let Ok(next) = store_rules::apply(op, req) else {
            return Ok(DisputeRecorded::Refused(Some(op.clone())));
        };
        if let Some(on_charge) = &req.on_charge {
            let charge = items.get(&on_charge.charge);
            let Some(Ok(charge_next)) = charge.map(|c| store_rules::apply(c, on_charge)) else {
                return Ok(DisputeRecorded::ChargeRefused);
            };
            items.insert(on_charge.charge.clone(), charge_next);
        }
        items.insert(req.key.clone(), next.clone());
        Ok(DisputeRecorded::Written(next))
    }
}

#[async_trait]
impl OperationLeases for MemoryStore {
    async fn claim(&self, req: &ClaimRequest) -> Result<Claim, StoreError> {
        self.conditional(&req.key, req).map(store_rules::claimed)
    }

    async fn record(&self, rec: &OutcomeRecord) -> Result<Recorded, StoreError> {
        match (&rec.release, &rec.authorization) {
            (None, None) => self.conditional(&rec.key, rec).map(store_rules::recorded),
            (Some(release), None) => self.with_release(&rec.key, rec, release),
            (None, Some(settle)) => self.with_charge(
                &rec.key,
                rec,
                &settle.charge,
                settle,
                store_rules::AUTHORIZATION_REFUSED,
            ),
            (Some(_), Some(_)) => Err(StoreError::new(store_rules::RELEASE_AND_AUTHORIZATION)),
        }
    }

    async fn fail_refund_later(&self, req: &RefundFailedLater) -> Result<Recorded, StoreError> {
        self.with_release(&req.key, req, &req.release)
    }
}

#[async_trait]
impl UnknownIndex for MemoryStore {
    async fn query_index(
        &self,
        query: IndexQuery,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.calls.query();
        let after = cursor.as_deref().map(decode_cursor).transpose()?;
        let items = self.lock();
        let mut matching: Vec<&Operation> = items
            .values()
            .filter(|op| !op.status.is_settled() && op.next_due_at.is_some())
            .filter(|op| match query {
                IndexQuery::DueBy(now) => {
                    op.review.is_none() && op.next_due_at.is_some_and(|due| due <= now)
                }
                IndexQuery::Unsettled => op.review.is_none(),
                IndexQuery::InReview => op.review.is_some(),
            })
            .filter(|op| after.as_ref().is_none_or(|a| index_position(op) > *a))
            .collect();
        matching.sort_by_key(|op| index_position(op));
        let limit = limit.max(1);
        let more = matching.len() > limit;
        matching.truncate(limit);
        let next = if more {
            matching.last().map(|op| encode_cursor(op))
        } else {
            None
        };
        Ok(Page {
            operations: matching.into_iter().cloned().collect(),
            // Typed records in memory: nothing here can be unreadable.
            unreadable: Vec::new(),
            next,
        })
    }

    async fn reschedule(&self, req: &Reschedule) -> Result<Recorded, StoreError> {
        self.conditional(&req.key, req).map(store_rules::recorded)
    }
}

#[async_trait]
impl ManualResolutions for MemoryStore {
    async fn get_by_operation_id(
        &self,
        operation_id: &OperationId,
    ) -> Result<Option<Operation>, StoreError> {
        self.calls.read();
        // As DynamoDB's: only what the unknown index lists (unsettled, with a due time).
        Ok(self
            .lock()
            .values()
            .find(|op| {
                op.operation_id == *operation_id
                    && !op.status.is_settled()
                    && op.next_due_at.is_some()
            })
            .cloned())
    }

    async fn resolve(&self, req: &ManualResolution) -> Result<Recorded, StoreError> {
        match (&req.release, &req.authorization) {
            (None, None) => self.conditional(&req.key, req).map(store_rules::recorded),
            (Some(release), None) => self.with_release(&req.key, req, release),
            (None, Some(settle)) => self.with_charge(
                &req.key,
                req,
                &settle.charge,
                settle,
                store_rules::AUTHORIZATION_REFUSED,
            ),
            (Some(_), Some(_)) => Err(StoreError::new(store_rules::RELEASE_AND_AUTHORIZATION)),
        }
    }
}

#[async_trait]
impl SettledRecords for MemoryStore {
    async fn settled_between(
        &self,
        window: &AuditWindow,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.calls.query();
        let after = cursor.as_deref().map(decode_cursor).transpose()?;
        let items = self.lock();
        let mut matching: Vec<&Operation> = items
            .values()
            .filter(|op| op.settled_at.is_some_and(|t| window.contains(t)))
            .filter(|op| after.as_ref().is_none_or(|a| settled_position(op) > *a))
            .collect();
        matching.sort_by_key(|op| settled_position(op));
        let limit = limit.max(1);
        let more = matching.len() > limit;
        matching.truncate(limit);
        let next = match (more, matching.last()) {
            (true, Some(op)) => Some(
                serde_json::to_string(&settled_position(op))
                    .map_err(|e| StoreError::with_source("cannot encode page cursor", e))?,
            ),
            _ => None,
        };
        Ok(Page {
            operations: matching.into_iter().cloned().collect(),
            unreadable: Vec::new(),
            next,
        })
    }
}
