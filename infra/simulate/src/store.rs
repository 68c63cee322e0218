//! [`SimStore`]: the operation table for a simulation of millions of orders. The same conditions
//! as `charge_once::memory::MemoryStore` (and DynamoDB's condition expressions), checked under one
//! lock, plus what makes it scale: the unknown index is a sorted set kept up to date on every write
//! (a page costs its length, not the table's), and lookups by operation id use a map instead of a
//! scan. It passes the store contract suite (`tests/store_contract.rs`).
//!
//! It also stands in for the table's stream and the `notify` relay (issue 16): every committed
//! write is offered to [`outcome_of`] with the images before and after it, under the same lock, in
//! commit order, and the outcome events that would be published are counted per operation. The
//! judge then checks that every settled operation published its outcome's `event_id` and that no
//! event contradicts the record.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use charge_once::outbox::{outcome_of, Outcome};
use charge_once::ports::{
    Claim, ClaimRequest, Created, IndexQuery, ManualResolution, OperationStore, OutcomeRecord,
    Page, Recorded, Reschedule, StoreCalls, StoreError,
};
use charge_once::{Operation, OperationId, OperationKey};

/// Position in the index: due time, then the business key (the order id: as the GSI sorts).
type Position = (i64, OperationKey);

#[derive(Default)]
struct Table {
    items: HashMap<OperationKey, Operation>,
    by_operation_id: HashMap<OperationId, OperationKey>,
    /// Unsettled, due, not in review.
    automatic: BTreeSet<Position>,
    /// Unsettled, waiting for a person.
    review: BTreeSet<Position>,
    /// The outbox as the relay saw it: per operation, the outcomes published (a [`Published`]).
    published: HashMap<OperationId, Published>,
    /// Outcome events published in all.
    outcome_events: u64,
    /// Lose every this-many-th outcome (the `relay-loses-outcomes` mutation); 0: lose none.
    lose_every: u64,
    /// Outcomes offered to the relay, published or not.
    offered: u64,
    /// Audit: writes that changed a settled record's status or PaymentIntent. Must stay 0.
    settled_changes: u64,
    /// When each operation first went `unknown` (virtual ms), until it settles.
    unknown_since: HashMap<OperationId, i64>,
    /// For each operation that went `unknown` and later settled: how long that took (ms).
    settle_times_ms: Vec<(OperationId, i64)>,
}

/// The outcomes published for one operation. The event id is a function of the operation id and
/// the outcome (`charge_once::outbox`), so a set of outcomes is the set of event ids.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Published(u8);

impl Published {
    fn bit(outcome: Outcome) -> u8 {
        match outcome {
            Outcome::Succeeded => 1,
            Outcome::Failed => 2,
            Outcome::NeedsReview => 4,
        }
    }

    fn insert(&mut self, outcome: Outcome) {
        self.0 |= Self::bit(outcome);
    }

    pub fn contains(&self, outcome: Outcome) -> bool {
        self.0 & Self::bit(outcome) != 0
    }
}

fn position(op: &Operation) -> Option<(bool, Position)> {
    if op.status.is_settled() {
        return None;
    }
    let due = op.next_due_at?;
    Some((op.review.is_some(), (due.as_millis(), op.key())))
}

impl Table {
    fn unindex(&mut self, op: &Operation) {
        if let Some((review, pos)) = position(op) {
            if review {
                self.review.remove(&pos);
            } else {
                self.automatic.remove(&pos);
            }
        }
    }

    fn index(&mut self, key: &OperationKey) {
        if let Some((review, pos)) = self.items.get(key).and_then(position) {
            if review {
                self.review.insert(pos);
            } else {
                self.automatic.insert(pos);
            }
        }
    }

    /// Applies `change` to the record at `key`, keeping the index and the outbox in step.
    fn update<T>(
        &mut self,
        key: &OperationKey,
        change: impl FnOnce(&mut Operation) -> T,
    ) -> Option<T> {
        let before = self.items.get(key)?.clone();
        self.unindex(&before);
        let out = change(self.items.get_mut(key)?);
        self.index(key);
        if let Some(after) = self.items.get(key) {
            if before.status.is_settled()
                && (after.status != before.status || after.external_id != before.external_id)
            {
                self.settled_changes += 1;
            }
            let (id, now) = (after.operation_id, after.updated_at.as_millis());
            match after.status {
                charge_once::OperationStatus::Unknown => {
                    self.unknown_since.entry(id).or_insert(now);
                }
                s if s.is_settled() && !before.status.is_settled() => {
                    if let Some(since) = self.unknown_since.remove(&id) {
                        self.settle_times_ms.push((id, now - since));
                    }
                }
                _ => {}
            }
        }
        let after = self.items.get(key)?;
        let event = outcome_of(Some(&before), after).map(|e| (after.operation_id, e.outcome));
        self.publish(event);
        Some(out)
    }

    /// The stream record of one committed write, after the relay's decision ([`outcome_of`]).
    fn publish(&mut self, event: Option<(OperationId, Outcome)>) {
        if let Some((operation_id, outcome)) = event {
            self.offered += 1;
            if self.lose_every > 0 && self.offered % self.lose_every == 0 {
                return;
            }
            self.outcome_events += 1;
            self.published
                .entry(operation_id)
                .or_default()
                .insert(outcome);
        }
    }
}

pub struct SimStore {
    table: Mutex<Table>,
    pub calls: StoreCalls,
    /// Records are fenced on the lease token (off only for the `no-lease-fence` mutation).
    pub lease_fence: bool,
    /// Creates are conditional (off only for the `settled-overwritten` mutation).
    pub conditional_put: bool,
    /// Audit, as a DynamoDB stream would show it: outcome writes that landed although the writer
    /// did not hold the current lease. Must stay 0.
    pub stale_lease_writes: AtomicU64,
    /// The order of the first one.
    pub first_stale_write: Mutex<Option<String>>,
}

impl Default for SimStore {
    fn default() -> Self {
        Self {
            table: Mutex::default(),
            calls: StoreCalls::default(),
            lease_fence: true,
            conditional_put: true,
            stale_lease_writes: AtomicU64::new(0),
            first_stale_write: Mutex::new(None),
        }
    }
}

impl SimStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) {
        self.calls.write();
    }

    /// The order an operation id was minted for (also after its record was replaced).
    pub fn order_of(&self, operation_id: &OperationId) -> Option<String> {
        self.lock()
            .by_operation_id
            .get(operation_id)
            .map(|k| k.order_id.as_str().to_owned())
    }

    /// The `relay-loses-outcomes` mutation: every `n`th outcome is acknowledged, not published.
    pub fn lose_every_nth_outcome(&self, n: u64) {
        self.lock().lose_every = n;
    }

    /// The outcomes published for an operation (empty if none).
    pub fn published(&self, operation_id: &OperationId) -> Published {
        self.lock()
            .published
            .get(operation_id)
            .copied()
            .unwrap_or_default()
    }

    /// Outcome events published in all, and the operations that published any.
    pub fn outcome_events(&self) -> (u64, Vec<OperationId>) {
        let t = self.lock();
        let mut ops: Vec<OperationId> = t.published.keys().copied().collect();
        ops.sort_unstable();
        (t.outcome_events, ops)
    }

    /// Writes that changed a settled record (an audit that must read 0).
    pub fn settled_changes(&self) -> u64 {
        self.lock().settled_changes
    }

    /// Time to settle of the operations that went `unknown`: the ones still unknown (or in
    /// review), and the settle time in ms of each that settled, in the order they settled.
    pub fn settle_times(&self) -> (Vec<OperationId>, Vec<(OperationId, i64)>) {
        let t = self.lock();
        let mut open: Vec<OperationId> = t.unknown_since.keys().copied().collect();
        open.sort();
        (open, t.settle_times_ms.clone())
    }

    /// Records in the table.
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn encode_cursor(pos: &Position) -> String {
    format!("{}|{}", pos.0, pos.1.order_id.as_str())
}

fn decode_cursor(cursor: &str) -> Result<Position, StoreError> {
    let (due, order) = cursor
        .split_once('|')
        .ok_or_else(|| StoreError::new("malformed page cursor"))?;
    let due = due
        .parse()
        .map_err(|_| StoreError::new("malformed page cursor"))?;
    let order =
        charge_once::OrderId::parse(order).map_err(|_| StoreError::new("malformed page cursor"))?;
    Ok((due, OperationKey::charge(order)))
}

#[async_trait]
impl OperationStore for SimStore {
    async fn create_if_absent(&self, op: &Operation) -> Result<Created, StoreError> {
        self.write();
        let mut t = self.lock();
        let key = op.key();
        let mut before = None;
        if let Some(existing) = t.items.get(&key) {
            if self.conditional_put {
                return Ok(Created::Existing(existing.clone()));
            }
            let existing = existing.clone();
            t.unindex(&existing);
            before = Some(existing);
        }
        t.by_operation_id.insert(op.operation_id, key.clone());
        t.items.insert(key.clone(), op.clone());
        t.index(&key);
        let event = outcome_of(before.as_ref(), op).map(|e| (op.operation_id, e.outcome));
        t.publish(event);
        Ok(Created::New(op.clone()))
    }

    async fn get(&self, key: &OperationKey) -> Result<Option<Operation>, StoreError> {
        self.calls.read();
        Ok(self.lock().items.get(key).cloned())
    }

    async fn get_by_operation_id(
        &self,
        operation_id: &OperationId,
    ) -> Result<Option<Operation>, StoreError> {
        self.calls.read();
        let t = self.lock();
        // As DynamoDB's: only what the unknown index lists (unsettled, with a due time).
        Ok(t.by_operation_id
            .get(operation_id)
            .and_then(|k| t.items.get(k))
            .filter(|op| !op.status.is_settled() && op.next_due_at.is_some())
            .cloned())
    }

    async fn claim(&self, req: &ClaimRequest) -> Result<Claim, StoreError> {
        self.write();
        let mut t = self.lock();
        let Some(op) = t
            .items
            .get(&req.key)
            .filter(|op| op.operation_id == req.operation_id)
        else {
            return Ok(Claim::NotFound);
        };
        if op.status.is_settled() {
            return Ok(Claim::Settled(op.clone()));
        }
        if op.review.is_some() {
            return Ok(Claim::InReview(op.clone()));
        }
        if op.has_live_lease(req.now) {
            return Ok(Claim::Leased(op.clone()));
        }
        // The lease and attempts are not index attributes: no index change. Nor is a claim an
        // outcome (status and review stay), so the relay would publish nothing for it.
        let op = t
            .items
            .get_mut(&req.key)
            .ok_or_else(|| StoreError::new("vanished"))?;
        op.lease = Some(req.lease);
        op.first_attempted_at.get_or_insert(req.now);
        op.attempts += 1;
        op.updated_at = req.now;
        Ok(Claim::Claimed(op.clone()))
    }

    async fn record(&self, rec: &OutcomeRecord) -> Result<Recorded, StoreError> {
        self.write();
        let mut t = self.lock();
        let Some(op) = t.items.get(&rec.key) else {
            return Ok(Recorded::Refused(None));
        };
        let holds_lease = op.lease.is_some_and(|l| l.token == rec.lease_token);
        if op.operation_id != rec.operation_id
            || (self.lease_fence && !holds_lease)
            || op.status.is_settled()
        {
            return Ok(Recorded::Refused(Some(op.clone())));
        }
        if !holds_lease {
            self.stale_lease_writes.fetch_add(1, Ordering::Relaxed);
            self.first_stale_write
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(|| rec.key.order_id.as_str().to_owned());
        }
        let written = t.update(&rec.key, |op| {
            op.status = rec.status;
            if let Some(id) = &rec.external_id {
                op.external_id = Some(id.clone());
            }
            op.last_error = rec.last_error.clone();
            if let Some(review) = &rec.review {
                op.review = Some(review.clone());
            }
            op.lease = None;
            op.updated_at = rec.now;
            op.next_due_at = if rec.status.is_settled() {
                None
            } else {
                rec.next_due_at.or(Some(rec.now))
            };
            op.clone()
        });
        Ok(Recorded::Written(
            written.ok_or_else(|| StoreError::new("vanished"))?,
        ))
    }

    async fn reschedule(&self, req: &Reschedule) -> Result<Recorded, StoreError> {
        self.write();
        let mut t = self.lock();
        let Some(op) = t.items.get(&req.key) else {
            return Ok(Recorded::Refused(None));
        };
        let leased = req
            .operator
            .as_ref()
            .is_some_and(|g| op.lease.is_some_and(|l| l.expires_at > g.lease_cutoff));
        if op.operation_id != req.operation_id
            || op.status != req.expected_status
            || op.status.is_settled()
            || op.updated_at != req.expected_updated_at
            || leased
        {
            return Ok(Recorded::Refused(Some(op.clone())));
        }
        let written = t.update(&req.key, |op| {
            if let Some(guard) = &req.operator {
                op.history.push(guard.audit.clone());
            }
            op.next_due_at = Some(req.next_due_at);
            op.redrives += 1;
            if req.clear_review {
                op.review = None;
            }
            op.updated_at = req.now;
            op.clone()
        });
        Ok(Recorded::Written(
            written.ok_or_else(|| StoreError::new("vanished"))?,
        ))
    }

    async fn resolve(&self, req: &ManualResolution) -> Result<Recorded, StoreError> {
        self.write();
        let mut t = self.lock();
        let Some(op) = t.items.get(&req.key) else {
            return Ok(Recorded::Refused(None));
        };
        if op.operation_id != req.operation_id
            || op.status.is_settled()
            || op.updated_at != req.expected_updated_at
            || op
                .lease
                .is_some_and(|l| l.expires_at > req.guard.lease_cutoff)
            || !req.status.is_settled()
        {
            return Ok(Recorded::Refused(Some(op.clone())));
        }
        let written = t.update(&req.key, |op| {
            op.status = req.status;
            if let Some(id) = &req.external_id {
                op.external_id = Some(id.clone());
            }
            op.history.push(req.guard.audit.clone());
            op.review = None;
            op.lease = None;
            op.next_due_at = None;
            op.updated_at = req.guard.audit.at;
            op.clone()
        });
        Ok(Recorded::Written(
            written.ok_or_else(|| StoreError::new("vanished"))?,
        ))
    }

    async fn query_index(
        &self,
        query: IndexQuery,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.calls.query();
        let after = cursor.as_deref().map(decode_cursor).transpose()?;
        let t = self.lock();
        let set = match query {
            IndexQuery::DueBy(_) | IndexQuery::Unsettled => &t.automatic,
            IndexQuery::InReview => &t.review,
        };
        let lower = match &after {
            Some(a) => Bound::Excluded(a.clone()),
            None => Bound::Unbounded,
        };
        let limit = limit.max(1);
        let mut positions: Vec<&Position> = set
            .range((lower, Bound::Unbounded))
            .take_while(|(due, _)| match query {
                IndexQuery::DueBy(now) => *due <= now.as_millis(),
                _ => true,
            })
            .take(limit + 1)
            .collect();
        let more = positions.len() > limit;
        positions.truncate(limit);
        let next = if more {
            positions.last().map(|p| encode_cursor(p))
        } else {
            None
        };
        let operations = positions
            .iter()
            .filter_map(|(_, key)| t.items.get(key).cloned())
            .collect();
        Ok(Page {
            operations,
            unreadable: Vec::new(),
            next,
        })
    }
}
