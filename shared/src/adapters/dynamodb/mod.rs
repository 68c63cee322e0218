//! [`DynamoStore`]: the [`OperationStore`] on a DynamoDB table.
//!
//! ## Table
//! - Key: `pk = ORDER#<order_id>`, `sk = <kind>` — the business identity, so the conditional put
//!   `attribute_not_exists(pk)` *is* the uniqueness constraint.
//! - Attributes: see [`item`]; money as `N`, times as `N` (milliseconds since the epoch).
//!
//! ## The unknown index (sparse GSI `unsettled-by-due`)
//! Partition key `due_shard` (S), sort key `due_at` (N), projection INCLUDE `operation_id` and
//! `status` ([`UNKNOWN_INDEX_PROJECTED`]). Only
//! unsettled operations carry these two attributes; settling REMOVEs them, so the index holds
//! unsettled work only and its size — and what the reconciler and operators read — never grows
//! with settled operations.
//!
//! **Why not projection ALL.** DynamoDB writes a GSI entry whenever a table write puts
//! it, deletes it, changes its key, or changes an attribute *projected* into it; a write that
//! touches none of these costs the index nothing (developer guide, "Provisioned throughput
//! considerations for global secondary indexes", GSI.Writes). With ALL, the claim (lease fields,
//! `attempts`, `updated_at`) rewrote the entry: 3 index writes per charge. Projected are now only
//! the keys, `operation_id`, which never changes after the put, and `status`, which changes only
//! in a write that sets or removes `due_at` anyway (a record, a resolve); the claim changes
//! neither `status` nor `due_at` (`writes`' tests hold it). It need not move `due_at`: the
//! checkout's due time, creation + grace, is what the reconciler needs (a claim before it is
//! settled or leased by then; a claim after it holds a lease the reconciler skips until it
//! expires). So the happy path writes the index twice: the checkout's put and the
//! settling record's REMOVE. What the index no longer carries, a reader takes from the table: a
//! page's keys are read back with one strongly consistent BatchGetItem (1 read unit per item
//! under 4 KB, only for unsettled work that is due), and an entry whose record has moved since the
//! index answered (settled, re-scheduled, flagged) is left out, exactly as a stale index read
//! would have been refused by the `updated_at` guards. The reconciler's count of the REVIEW
//! partition reads no record ([`UnknownIndex::count_in_review`]): its entries' keys give the
//! count and its `due_at` the flag time.
//!
//! ## No index by operation id
//! The `by-operation-id` index (KEYS_ONLY, one write per operation) is gone: nothing on the
//! charge path reads by operation id (the key is the order), Stripe's metadata carries both ids,
//! and operators act on unsettled operations, which [`ManualResolutions::get_by_operation_id`] finds
//! in the unknown index (a filtered Query per partition). A settled operation is shown by its
//! order id.
//!
//! `due_shard` is `DUE#<n>` for automatic work and `REVIEW` for operations waiting for a person.
//! Why shards: at 1,000 new operations/s each operation costs the index 2 writes on the happy
//! path (the checkout's put, the settling record's REMOVE; the claim none, see above), 2,000
//! writes/s, and a single partition value takes about 1,000 writes/s. Eight shards (`n` from a
//! hash of the operation id, fixed for the operation's life) leave 4x headroom at that rate while
//! a reconciler tick costs only eight small queries. Review items are
//! rare and written by hand, so they share one partition and list in one query.
//!
//! ## Parts
//! - [`schema`]: the attribute names (keys, index, what the writes check and change), the shards
//!   ([`shard_name`], [`due_shard`]), the table definition.
//! - [`item`]: the record as an item and back, index entries' keys.
//! - [`stream`]: the table's stream images (what the notify relay reads) as operation records.
//! - [`writes`]: the store's rules ([`charge_core::store_rules`]) as condition and update
//!   expressions.
//! - `paging`: the index read over the shards as a pure k-way merge with its cursor.
//! - here: [`DynamoStore`], the calls. A refused write answers the current record: the item
//!   DynamoDB returns with it (ALL_OLD). DynamoDB returns one whenever the record exists, so a
//!   refusal without one means "no record", read with no GetItem (the roles hold GetItem only to
//!   read back what a TransactWriteItems wrote: it returns no item).
//!   A server that ignores `ReturnValuesOnConditionCheckFailure` (dynalite) needs
//!   [`DynamoStore::reading_refusals`]: each refusal then reads the record.

use std::collections::HashMap;
use std::fmt;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    CancellationReason, ConditionCheck, Put, ReturnValue, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use aws_sdk_dynamodb::Client;

use charge_core::audit::AuditWindow;
use charge_core::domain::{OperationId, OperationKind, OrderId};
use charge_core::operation::{Operation, OperationKey};
use charge_core::store_rules::{self, Transition};
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
    IndexQuery, ManualResolutions, OperationCreates, OperationLeases, OperationReads, Page,
    ReviewCount, SettledRecords, StoreCalls, StoreError, UnknownIndex, UnreadableRecord,
};

mod audit_log;
pub mod item;
mod paging;
pub mod schema;
mod settled;
pub mod stream;
mod watch_cursor;
pub mod writes;

use item::{attr_n, attr_s, key_of, operation_from_item, Attrs};
use paging::{IndexCursor, IndexPosition, ShardPage};
pub use schema::{
    due_shard, due_shards, shard_name, DUE_SHARDS, REVIEW_SHARD, SETTLED_INDEX, UNKNOWN_INDEX,
    UNKNOWN_INDEX_PROJECTED,
};

/// What every conditional UpdateItem returns when it is written: the record as written. The
/// operator policy allows chargectl's writes with exactly this (`dynamodb:ReturnValues`).
pub const UPDATE_RETURNS: ReturnValue = ReturnValue::AllNew;

#[derive(Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    calls: std::sync::Arc<StoreCalls>,
    /// A refused write that came back without the item reads it (see [`Self::reading_refusals`]).
    read_refusals: bool,
}

impl fmt::Debug for DynamoStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoStore")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl DynamoStore {
    /// The records of `order_id` whose sort key starts with `prefix` (an order's refunds, its
    /// disputes), by sort key: one Query of the order's partition, paged. A record this release
    /// cannot read is logged with its key and left out.
    async fn records_under(
        &self,
        order_id: &OrderId,
        prefix: &str,
    ) -> Result<Vec<Operation>, StoreError> {
        let (pk, _) = key_of(&OperationKey::charge(order_id.clone()));
        let mut refunds = Vec::new();
        let mut start = None;
        loop {
            self.calls.query();
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                .expression_attribute_names("#pk", schema::PK)
                .expression_attribute_names("#sk", schema::SK)
                .expression_attribute_values(":pk", attr_s(&pk))
                .expression_attribute_values(":prefix", attr_s(prefix))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| self.sdk_error("Query an order's records", e))?;
            for item in out.items() {
                // One refund this release cannot read must not hide the order's others (nor
                // fail a status answer or an event's lookup): it is logged with its key and
                // reason and left out. The reconciler's index read counts it (UnreadableRecords)
                // while it is unsettled.
                match operation_from_item(item) {
                    Ok(op) => refunds.push(op),
                    Err(e) => tracing::error!(
                        pk = %pk,
                        sk = item
                            .get(schema::SK)
                            .and_then(|v| v.as_s().ok())
                            .map_or("?", String::as_str),
                        reason = %crate::telemetry::ErrorChain(&e),
                        "unreadable record left out of the order's records"
                    ),
                }
            }
            match out.last_evaluated_key() {
                Some(last) => start = Some(last.clone()),
                None => return Ok(refunds),
            }
        }
    }

    /// A failed call, naming the table: DynamoDB's own answer to a wrong table name says only
    /// "ResourceNotFoundException: Requested resource not found".
    fn sdk_error<E>(&self, what: &str, err: SdkError<E>) -> StoreError
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        StoreError::with_source(format!("{what} on table {}", self.table), err)
    }

    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            calls: Default::default(),
            read_refusals: false,
        }
    }

    /// For a DynamoDB-compatible server that ignores `ReturnValuesOnConditionCheckFailure`
    /// (dynalite): a refused write comes back without the item even when the record exists, so
    /// each refusal reads it (strongly consistent GetItem) rather than answer "no such record",
    /// which would park a valid charge message as poison. Not for DynamoDB itself: there a
    /// refusal without the item means the record does not exist, and a read per refusal would be
    /// a request per duplicate delivery for nothing.
    pub fn reading_refusals(mut self) -> Self {
        self.read_refusals = true;
        self
    }

    /// The stored item as it is, unparsed (consistent read): what `chargectl show` prints when
    /// this release cannot read a record.
    pub async fn raw_item(&self, key: &OperationKey) -> Result<Option<Attrs>, StoreError> {
        self.calls.read();
        let (pk, sk) = key_of(key);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(schema::PK, attr_s(&pk))
            .key(schema::SK, attr_s(&sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.sdk_error("GetItem", e))?;
        Ok(out.item)
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    pub fn calls(&self) -> &StoreCalls {
        &self.calls
    }

    /// Creates the table and its index (on-demand). For local stacks and tests; production tables
    /// come from the SAM template.
    pub async fn create_table(&self) -> Result<(), StoreError> {
        schema::define_table(self.client.create_table().table_name(&self.table))?
            .send()
            .await
            .map_err(|e| self.sdk_error("CreateTable", e))?;
        Ok(())
    }

    /// Reads one partition of the index after `after`, at most `limit` entries, oldest due first.
    async fn query_shard(
        &self,
        shard: &str,
        due_by: Option<i64>,
        after: Option<&IndexPosition>,
        limit: usize,
    ) -> Result<ShardPage, StoreError> {
        let start = after.map(|p| item::index_start_key(schema::UNKNOWN_KEYS, shard, p));
        let mut values = HashMap::from([(":shard".to_owned(), attr_s(shard))]);
        let condition = match due_by {
            Some(now) => {
                values.insert(":now".into(), attr_n(now));
                "due_shard = :shard AND due_at <= :now"
            }
            None => "due_shard = :shard",
        };
        self.calls.query();
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(UNKNOWN_INDEX)
            .key_condition_expression(condition)
            .set_expression_attribute_values(Some(values))
            .scan_index_forward(true)
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| self.sdk_error("Query unknown index", e))?;
        Ok(ShardPage {
            entries: out
                .items()
                .iter()
                .map(|e| item::index_position(schema::UNKNOWN_KEYS, e))
                .collect::<Result<Vec<_>, _>>()?,
            complete: out.last_evaluated_key().is_none(),
        })
    }

    /// Reads the records of index entries from the table (strongly consistent, BatchGetItem in
    /// chunks of 100), in the entries' order. An entry whose record is gone or no longer sits at
    /// that place in the index (settled, due at another time, moved to or from REVIEW) is left
    /// out: it changed after the index answered, and the next read finds it where it is now.
    async fn records_of(
        &self,
        keys: schema::IndexKeys,
        entries: &[(String, IndexPosition)],
    ) -> Result<(Vec<Operation>, Vec<UnreadableRecord>), StoreError> {
        // DynamoDB's limit per BatchGetItem.
        const CHUNK: usize = 100;
        let mut found: HashMap<(String, String), Attrs> = HashMap::new();
        for chunk in entries.chunks(CHUNK) {
            let mut keys: Vec<Attrs> = chunk.iter().map(|(_, p)| item::table_key(p)).collect();
            keys.dedup();
            self.batch_get(keys, &mut found).await?;
        }
        let mut ops = Vec::with_capacity(entries.len());
        let mut unreadable = Vec::new();
        for (shard, p) in entries {
            let Some(item) = found.get(&(p.pk.clone(), p.sk.clone())) else {
                continue;
            };
            if item::is_at(keys, item, shard, p) {
                // One record this release cannot read must not stop the page: it is set aside
                // with its key and reason, and the caller counts it (UnreadableRecords, alarmed).
                match operation_from_item(item) {
                    Ok(op) => ops.push(op),
                    Err(e) => unreadable.push(UnreadableRecord {
                        key: format!("{}/{}", p.pk, p.sk),
                        reason: crate::telemetry::ErrorChain(&e).to_string(),
                    }),
                }
            }
        }
        Ok((ops, unreadable))
    }

    /// Reads `keys` (at most 100) with BatchGetItem into `found`, by (pk, sk), asking again for
    /// the keys DynamoDB left unprocessed (throttling).
    async fn batch_get(
        &self,
        mut keys: Vec<Attrs>,
        found: &mut HashMap<(String, String), Attrs>,
    ) -> Result<(), StoreError> {
        use aws_sdk_dynamodb::types::KeysAndAttributes;
        // Unprocessed keys are asked again this many times before giving up; the reconciler
        // then skips the tick's rest and the next tick reads them.
        const ROUNDS: usize = 5;
        for _ in 0..ROUNDS {
            if keys.is_empty() {
                return Ok(());
            }
            self.calls.read();
            let request = KeysAndAttributes::builder()
                .set_keys(Some(std::mem::take(&mut keys)))
                .consistent_read(true)
                .build()
                .map_err(|e| StoreError::with_source("bad BatchGetItem request", e))?;
            let out = self
                .client
                .batch_get_item()
                .request_items(&self.table, request)
                .send()
                .await
                .map_err(|e| self.sdk_error("BatchGetItem", e))?;
            for item in out
                .responses()
                .and_then(|r| r.get(&self.table))
                .into_iter()
                .flatten()
            {
                let pk = item::req_key(item, schema::PK)?;
                let sk = item::req_key(item, schema::SK)?;
                found.insert((pk, sk), item.clone());
            }
            if let Some(left) = out.unprocessed_keys().and_then(|u| u.get(&self.table)) {
                keys = left.keys().to_vec();
            }
        }
        if keys.is_empty() {
            return Ok(());
        }
        Err(StoreError::new(format!(
            "BatchGetItem: {} keys still unprocessed after {ROUNDS} rounds",
            keys.len()
        )))
    }

    /// Every conditional UpdateItem here: `write`'s guards as the condition and its change as the
    /// update ([`writes`]); ALL_NEW on success, the current item via ALL_OLD on a failed
    /// condition. A guard on the request that fails refuses it before anything is sent.
    async fn conditional_update(
        &self,
        what: &'static str,
        key: &OperationKey,
        write: &impl writes::Update,
    ) -> Result<Recorded, StoreError> {
        let Ok(expressions) = writes::write(write) else {
            return Ok(Recorded::Refused(self.get(key).await?));
        };
        self.calls.write();
        let (pk, sk) = key_of(key);
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(schema::PK, attr_s(&pk))
            .key(schema::SK, attr_s(&sk))
            .update_expression(expressions.update)
            .condition_expression(expressions.condition)
            .set_expression_attribute_names(Some(expressions.names))
            .set_expression_attribute_values(Some(expressions.values))
            .return_values(UPDATE_RETURNS)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => {
                let item = out
                    .attributes()
                    .ok_or_else(|| StoreError::new(format!("{what}: no item returned")))?;
                Ok(Recorded::Written(readable(item, key)?))
            }
            Err(err) => match err.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(ccf)) => match ccf.item() {
                    Some(current) => Ok(Recorded::Refused(Some(readable(current, key)?))),
                    // DynamoDB returns the item with ALL_OLD whenever the record exists: none
                    // means there is no record, and nothing is read.
                    None if !self.read_refusals => Ok(Recorded::Refused(None)),
                    None => Ok(Recorded::Refused(self.get(key).await?)),
                },
                _ => Err(self.sdk_error(what, err)),
            },
        }
    }
}

impl DynamoStore {
    /// `write` at `key` and the charge's `release`, as one TransactWriteItems: see
    /// [`Self::with_charge`]; the charge's refusal is [`store_rules::RELEASE_REFUSED`].
    async fn with_release(
        &self,
        what: &'static str,
        key: &OperationKey,
        write: &impl writes::Update,
        release: &ReleaseRefund,
    ) -> Result<Recorded, StoreError> {
        let refused = store_rules::RELEASE_REFUSED;
        self.with_charge(what, key, write, &release.charge, release, refused)
            .await
    }

    /// `write` at `key` and `on_charge` at `charge`, as one TransactWriteItems (counted as four
    /// writes: a transactional write costs twice). Refused by `write`'s guards: the record as it
    /// is (from the cancellation's item, or read); refused by the charge's: the error `refused`,
    /// nothing written.
    async fn with_charge(
        &self,
        what: &'static str,
        key: &OperationKey,
        write: &impl writes::Update,
        charge: &OperationKey,
        on_charge: &impl writes::Update,
        refused: &'static str,
    ) -> Result<Recorded, StoreError> {
        match self
            .transact_beside(what, key, write, charge, on_charge)
            .await?
        {
            Beside::Written(op) => Ok(Recorded::Written(op)),
            Beside::Refused(current) => Ok(Recorded::Refused(current)),
            Beside::ChargeRefused => Err(StoreError::new(refused)),
        }
    }

    /// `write` at `key` and `on_charge` at `charge`, as one TransactWriteItems (counted as four
    /// writes), and which of the two refused it, if one did.
    async fn transact_beside(
        &self,
        what: &'static str,
        key: &OperationKey,
        write: &impl writes::Update,
        charge: &OperationKey,
        on_charge: &impl writes::Update,
    ) -> Result<Beside, StoreError> {
        let items = [
            self.transact_update(key, write)?,
            self.transact_update(charge, on_charge)?,
        ];
        for _ in 0..4 {
            self.calls.write();
        }
        // No ClientRequestToken of ours: the SDK fills one in once per call, before its retry
        // loop, so a retry of a transaction that committed is answered as committed. Across
        // calls the fence (the lease, the status) refuses a second write.
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items.to_vec()))
            .send()
            .await;
        let err = match result {
            Ok(_) => {
                let written = self.get(key).await?;
                return written
                    .map(Beside::Written)
                    .ok_or_else(|| StoreError::new(format!("{what}: the record is gone")));
            }
            Err(err) => err,
        };
        let Some(TransactWriteItemsError::TransactionCanceledException(e)) = err.as_service_error()
        else {
            return Err(self.sdk_error(what, err));
        };
        let reasons = e.cancellation_reasons();
        if condition_failed(reasons, 0) {
            let current = self.refused_item(reasons, 0, key).await?;
            return Ok(Beside::Refused(current));
        }
        if condition_failed(reasons, 1) {
            return Ok(Beside::ChargeRefused);
        }
        Err(self.sdk_error(what, err))
    }

    /// The record at `key` as the `i`th item of a canceled transaction found it (ALL_OLD), or
    /// read when the reason carries no item.
    async fn refused_item(
        &self,
        reasons: &[CancellationReason],
        i: usize,
        key: &OperationKey,
    ) -> Result<Option<Operation>, StoreError> {
        match reasons.get(i).and_then(CancellationReason::item) {
            Some(item) => readable(item, key).map(Some),
            None => self.get(key).await,
        }
    }

    /// `write` at `key` as an item of a TransactWriteItems: its guards as the condition, its
    /// change as the update, the item as it was on a failed condition.
    fn transact_update(
        &self,
        key: &OperationKey,
        write: &impl writes::Update,
    ) -> Result<TransactWriteItem, StoreError> {
        let w = writes::write(write)
            .map_err(|g| StoreError::new(format!("write refused as asked: {}", g.as_str())))?;
        let (pk, sk) = key_of(key);
        let update = Update::builder()
            .table_name(&self.table)
            .key(schema::PK, attr_s(&pk))
            .key(schema::SK, attr_s(&sk))
            .update_expression(w.update)
            .condition_expression(w.condition)
            .set_expression_attribute_names(Some(w.names))
            .set_expression_attribute_values(Some(w.values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| StoreError::new(format!("TransactWriteItems: {e}")))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// A new operation's Put (only where no record is) and its charge's change (its guards as the
    /// condition, its change as the update: a refund's reservation, a capture's or cancel's
    /// claim), as the two items of one TransactWriteItems.
    fn put_with_charge(
        &self,
        op: &Operation,
        charge: &OperationKey,
        on_charge: &impl writes::Update,
    ) -> Result<[TransactWriteItem; 2], StoreError> {
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item::stored_item(op)))
            .condition_expression(format!("attribute_not_exists({})", schema::PK))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| StoreError::new(format!("TransactWriteItems: {e}")))?;
        Ok([
            TransactWriteItem::builder().put(put).build(),
            self.transact_update(charge, on_charge)?,
        ])
    }

    /// What a canceled create-beside transaction found: the operation already there, or the
    /// charge and the first of its guards that refused ([`ChargeClaim::refused_by`]; read back
    /// when the reason carries no item).
    async fn beside_refused(
        &self,
        op: &Operation,
        claim: ChargeClaim<'_>,
        reasons: &[CancellationReason],
    ) -> Result<CreatedBeside, StoreError> {
        if condition_failed(reasons, 0) {
            return match self.refused_item(reasons, 0, &op.key()).await? {
                Some(existing) => Ok(CreatedBeside::Existing(existing)),
                None => Err(StoreError::new(format!(
                    "TransactWriteItems: the {}'s put was refused but none was found",
                    op.kind.as_str()
                ))),
            };
        }
        if condition_failed(reasons, 1) {
            let charge = self.refused_item(reasons, 1, claim.charge()).await?;
            let refused = charge.map(|c| {
                let by = claim.refused_by(&c);
                (c, by)
            });
            return Ok(CreatedBeside::ChargeRefused(refused));
        }
        let codes: Vec<&str> = reasons.iter().map(|r| r.code().unwrap_or("None")).collect();
        Err(StoreError::new(format!(
            "TransactWriteItems canceled: {}",
            codes.join(", ")
        )))
    }
}

/// What a write beside its charge did: written (the record after), refused by the record's own
/// guards (the record as it is), or refused by the charge's (nothing written).
enum Beside {
    Written(Operation),
    Refused(Option<Operation>),
    ChargeRefused,
}

/// Whether the `i`th item of a canceled transaction was refused by its condition.
fn condition_failed(reasons: &[CancellationReason], i: usize) -> bool {
    reasons
        .get(i)
        .is_some_and(|r| r.code() == Some("ConditionalCheckFailed"))
}

/// The record an item holds, or an error naming the stored key as unreadable
/// ([`StoreError::unreadable`]): whoever reads it, a claim's ALL_NEW included, can tell "this record
/// cannot be read" (park the message, count the record) from "the store failed" (retry).
fn readable(item: &Attrs, key: &OperationKey) -> Result<Operation, StoreError> {
    operation_from_item(item).map_err(|e| {
        let (pk, sk) = key_of(key);
        e.of_unreadable(format!("{pk}/{sk}"))
    })
}

#[async_trait]
impl OperationReads for DynamoStore {
    async fn get(&self, key: &OperationKey) -> Result<Option<Operation>, StoreError> {
        let Some(item) = self.raw_item(key).await? else {
            return Ok(None);
        };
        readable(&item, key).map(Some)
    }

    async fn refunds_of(&self, order_id: &OrderId) -> Result<Vec<Operation>, StoreError> {
        self.records_under(order_id, "refund#").await
    }

    async fn disputes_of(&self, order_id: &OrderId) -> Result<Vec<Operation>, StoreError> {
        self.records_under(order_id, "dispute#").await
    }
}

#[async_trait]
impl OperationCreates for DynamoStore {
    async fn create_if_absent(&self, op: &Operation) -> Result<Created, StoreError> {
        self.calls.write();
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item::stored_item(op)))
            .condition_expression(format!("attribute_not_exists({})", schema::PK))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Created::New(op.clone())),
            Err(err) => match err.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(ccf)) => match ccf.item() {
                    Some(existing) => Ok(Created::Existing(readable(existing, &op.key())?)),
                    // DynamoDB returns the item with ALL_OLD; only a server without that feature
                    // gets here. Read the winner (strongly consistent) rather than guess.
                    None if self.read_refusals => match self.get(&op.key()).await? {
                        Some(existing) => Ok(Created::Existing(existing)),
                        None => Err(StoreError::new(
                            "PutItem: condition failed but no existing item was found",
                        )),
                    },
                    None => Err(StoreError::new(
                        "PutItem: condition failed but no existing item was returned",
                    )),
                },
                _ => Err(self.sdk_error("PutItem", err)),
            },
        }
    }

    /// One TransactWriteItems: DynamoDB bills it as two writes of each item (a transactional
    /// write costs twice a plain one), counted as two writes here. The operation id is its client
    /// request token, so the SDK's own retry of a transaction whose answer was lost is answered
    /// as the first was.
    async fn create_beside(
        &self,
        op: &Operation,
        claim: ChargeClaim<'_>,
    ) -> Result<CreatedBeside, StoreError> {
        let items = self.put_with_charge(op, claim.charge(), &claim)?;
        self.calls.write();
        self.calls.write();
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items.to_vec()))
            .client_request_token(op.operation_id.to_string())
            .send()
            .await;
        match result {
            Ok(_) => Ok(CreatedBeside::New(op.clone())),
            Err(err) => match err.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(e)) => {
                    self.beside_refused(op, claim, e.cancellation_reasons())
                        .await
                }
                _ => Err(self.sdk_error("TransactWriteItems (create beside its charge)", err)),
            },
        }
    }

    /// One TransactWriteItems of two items (the new attempt's Put where none is, the head's
    /// Update naming it, guarded on the latest it names and, after the first attempt, on that
    /// attempt failed) or three (after a later attempt: its ConditionCheck, failed, not taken,
    /// the one read). Counted as one write per item. The new attempt's operation id is the
    /// client request token. A transaction canceled by a condition, or by a concurrent
    /// transaction on the same items (another retry), wrote nothing: [`CreatedAttempt::Refused`].
    async fn create_attempt(&self, req: &NewAttempt) -> Result<CreatedAttempt, StoreError> {
        const WHAT: &str = "TransactWriteItems (a new charge attempt)";
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item::stored_item(&req.op)))
            .condition_expression(format!("attribute_not_exists({})", schema::PK))
            .build()
            .map_err(|e| StoreError::new(format!("{WHAT}: {e}")))?;
        let mut items = vec![
            TransactWriteItem::builder().put(put).build(),
            self.transact_update(&req.head_key(), &req.on_head())?,
        ];
        if let Some(after) = req.on_after() {
            let c = writes::condition(&after.guards()).map_err(|g| {
                StoreError::new(format!("{WHAT}: refused as asked: {}", g.as_str()))
            })?;
            let (pk, sk) = key_of(&req.after_key());
            let check = ConditionCheck::builder()
                .table_name(&self.table)
                .key(schema::PK, attr_s(&pk))
                .key(schema::SK, attr_s(&sk))
                .condition_expression(c.expression)
                .set_expression_attribute_names(Some(c.names))
                .set_expression_attribute_values(Some(c.values))
                .build()
                .map_err(|e| StoreError::new(format!("{WHAT}: {e}")))?;
            items.push(TransactWriteItem::builder().condition_check(check).build());
        }
        for _ in &items {
            self.calls.write();
        }
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(req.op.operation_id.to_string())
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(CreatedAttempt::New(req.op.clone())),
            Err(err) => err,
        };
        if let Some(TransactWriteItemsError::TransactionCanceledException(e)) =
            err.as_service_error()
        {
            let lost = e.cancellation_reasons().iter().any(|r| {
                matches!(
                    r.code(),
                    Some("ConditionalCheckFailed") | Some("TransactionConflict")
                )
            });
            if lost {
                return Ok(CreatedAttempt::Refused);
            }
        }
        Err(self.sdk_error(WHAT, err))
    }

    /// One conditional UpdateItem when the charge is not written; else one TransactWriteItems
    /// of the two updates (counted as four writes).
    async fn record_dispute(&self, req: &DisputeMove) -> Result<DisputeRecorded, StoreError> {
        let Some(on_charge) = &req.on_charge else {
            return Ok(
                match self
                    .conditional_update("UpdateItem (dispute)", &req.key, req)
                    .await?
                {
                    Recorded::Written(op) => DisputeRecorded::Written(op),
                    Recorded::Refused(current) => DisputeRecorded::Refused(current),
                },
            );
        };
        const WHAT: &str = "TransactWriteItems (dispute beside its charge)";
        Ok(
            match self
                .transact_beside(WHAT, &req.key, req, &on_charge.charge, on_charge)
                .await?
            {
                Beside::Written(op) => DisputeRecorded::Written(op),
                Beside::Refused(current) => DisputeRecorded::Refused(current),
                Beside::ChargeRefused => DisputeRecorded::ChargeRefused,
            },
        )
    }
}

#[async_trait]
impl OperationLeases for DynamoStore {
    async fn claim(&self, req: &ClaimRequest) -> Result<Claim, StoreError> {
        let result = self
            .conditional_update("UpdateItem (claim)", &req.key, req)
            .await?;
        Ok(match result {
            Recorded::Written(op) => Claim::Claimed(op),
            Recorded::Refused(None) => Claim::NotFound,
            Recorded::Refused(Some(op)) => match store_rules::check(&op, &req.guards()) {
                Err(by) => store_rules::refused_claim(op, by),
                // Only a record read after the refusal (`reading_refusals`) can pass every guard:
                // another writer moved it in between. "Someone else has it" makes no call to
                // Stripe.
                Ok(()) => Claim::Leased(op),
            },
        })
    }

    /// A refund's outcome that gives its reservation back, and a capture's or cancel's that
    /// ends (or gives back) its charge's authorization, is one TransactWriteItems of the two
    /// updates (counted as four writes: a transactional write costs twice); any other, one
    /// conditional UpdateItem.
    async fn record(&self, rec: &OutcomeRecord) -> Result<Recorded, StoreError> {
        const WHAT: &str = "TransactWriteItems (record)";
        match (&rec.release, &rec.authorization) {
            (None, None) => {
                self.conditional_update("UpdateItem (record)", &rec.key, rec)
                    .await
            }
            (Some(release), None) => self.with_release(WHAT, &rec.key, rec, release).await,
            (None, Some(settle)) => {
                let refused = store_rules::AUTHORIZATION_REFUSED;
                self.with_charge(WHAT, &rec.key, rec, &settle.charge, settle, refused)
                    .await
            }
            (Some(_), Some(_)) => Err(StoreError::new(store_rules::RELEASE_AND_AUTHORIZATION)),
        }
    }

    async fn fail_refund_later(&self, req: &RefundFailedLater) -> Result<Recorded, StoreError> {
        self.with_release(
            "TransactWriteItems (refund failed later)",
            &req.key,
            req,
            &req.release,
        )
        .await
    }
}

#[async_trait]
impl UnknownIndex for DynamoStore {
    async fn query_index(
        &self,
        query: IndexQuery,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let limit = limit.clamp(1, 1000);
        let (shards, due_by): (Vec<String>, Option<i64>) = match query {
            IndexQuery::DueBy(now) => (due_shards().collect(), Some(now.as_millis())),
            IndexQuery::Unsettled => (due_shards().collect(), None),
            IndexQuery::InReview => (vec![REVIEW_SHARD.to_owned()], None),
        };
        let cursor = IndexCursor::decode(cursor.as_deref(), shards.len())?;
        // Up to `limit` from each unfinished partition, merged (see `paging`).
        let mut pages = vec![ShardPage::finished(); shards.len()];
        for (i, after) in cursor.unfinished() {
            pages[i] = self.query_shard(&shards[i], due_by, after, limit).await?;
        }
        let merged = paging::merge(cursor, pages, limit);
        let next = merged.next.encode()?;
        let entries: Vec<(String, IndexPosition)> = merged
            .entries
            .into_iter()
            .map(|(i, entry)| (shards[i].clone(), entry))
            .collect();
        let (operations, unreadable) = self.records_of(schema::UNKNOWN_KEYS, &entries).await?;
        Ok(Page {
            operations,
            unreadable,
            next,
        })
    }

    async fn reschedule(&self, req: &Reschedule) -> Result<Recorded, StoreError> {
        self.conditional_update("UpdateItem (reschedule)", &req.key, req)
            .await
    }

    /// The REVIEW partition's entries as the index holds them (keys and `due_at`), one Query per
    /// page and no BatchGetItem: the count and the oldest flag time need nothing from the table.
    async fn count_in_review(
        &self,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<ReviewCount, StoreError> {
        let limit = limit.clamp(1, 1000);
        let cursor = IndexCursor::decode(cursor.as_deref(), 1)?;
        let mut page = ShardPage::finished();
        if let Some((_, after)) = cursor.unfinished().next() {
            page = self.query_shard(REVIEW_SHARD, None, after, limit).await?;
        }
        // The partition is sorted by due time: its first entry is the oldest of the page.
        let oldest_flagged_at = page.entries.first().map(|e| Timestamp::from_millis(e.due));
        let merged = paging::merge(cursor, vec![page], limit);
        Ok(ReviewCount {
            entries: merged.entries.len() as u64,
            oldest_flagged_at,
            next: merged.next.encode()?,
        })
    }
}

#[async_trait]
impl ManualResolutions for DynamoStore {
    async fn get_by_operation_id(
        &self,
        operation_id: &OperationId,
    ) -> Result<Option<Operation>, StoreError> {
        // Every partition of the unknown index, filtered on the projected `operation_id`: an
        // operator's read, proportional to the unsettled operations (keys and ids only).
        for shard in due_shards().chain([REVIEW_SHARD.to_owned()]) {
            let mut start: Option<Attrs> = None;
            loop {
                self.calls.query();
                let out = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .index_name(UNKNOWN_INDEX)
                    .key_condition_expression("due_shard = :shard")
                    .filter_expression("operation_id = :op")
                    .expression_attribute_values(":shard", attr_s(&shard))
                    .expression_attribute_values(":op", attr_s(&operation_id.to_string()))
                    .set_exclusive_start_key(start.take())
                    .send()
                    .await
                    .map_err(|e| self.sdk_error("Query unknown index by operation id", e))?;
                if let Some(entry) = out.items().first() {
                    // An index entry carries the table's keys: the sort key says whether it is
                    // the order's charge or one of its refunds.
                    let pk = item::req_key(entry, schema::PK)?;
                    let sk = item::req_key(entry, schema::SK)?;
                    let key = OperationKey {
                        order_id: item::order_id_of_pk(&pk)?,
                        kind: OperationKind::parse(&sk)
                            .map_err(|e| StoreError::new(format!("index entry {pk}/{sk}: {e}")))?,
                    };
                    // The GSI is eventually consistent; the table read that follows is not.
                    return Ok(self
                        .get(&key)
                        .await?
                        .filter(|op| op.operation_id == *operation_id));
                }
                match out.last_evaluated_key() {
                    Some(last) => start = Some(last.clone()),
                    None => break,
                }
            }
        }
        Ok(None)
    }

    /// A refund resolved with its reservation given back is one TransactWriteItems of the two
    /// updates, as a refund's outcome is; any other resolution, one conditional UpdateItem.
    async fn resolve(&self, req: &ManualResolution) -> Result<Recorded, StoreError> {
        const WHAT: &str = "TransactWriteItems (resolve)";
        match (&req.release, &req.authorization) {
            (None, None) => {
                self.conditional_update("UpdateItem (resolve)", &req.key, req)
                    .await
            }
            (Some(release), None) => self.with_release(WHAT, &req.key, req, release).await,
            (None, Some(settle)) => {
                let refused = store_rules::AUTHORIZATION_REFUSED;
                self.with_charge(WHAT, &req.key, req, &settle.charge, settle, refused)
                    .await
            }
            (Some(_), Some(_)) => Err(StoreError::new(store_rules::RELEASE_AND_AUTHORIZATION)),
        }
    }
}

#[async_trait]
impl SettledRecords for DynamoStore {
    /// The settled index, a day's partition after another ([`settled`]).
    async fn settled_between(
        &self,
        window: &AuditWindow,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.settled_page(window, cursor, limit, false).await
    }

    /// The same pages, only the refunds' records read.
    async fn settled_refunds_between(
        &self,
        window: &AuditWindow,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.settled_page(window, cursor, limit, true).await
    }
}
