//! [`DynamoStore`]: the [`OperationStore`] on a DynamoDB table.
//!
//! ## Table
//! - Key: `pk = ORDER#<order_id>`, `sk = <kind>` — the business identity, so the conditional put
//!   `attribute_not_exists(pk)` *is* the uniqueness constraint.
//! - Attributes: see [`item`]; money as `N`, times as `N` (milliseconds since the epoch).
//!
//! ## The unknown index (sparse GSI `unsettled-by-due`)
//! Partition key `due_shard` (S), sort key `due_at` (N), projection ALL. Only unsettled operations
//! carry these two attributes; settling REMOVEs them, so the index holds unsettled work only and
//! its size — and what the reconciler and operators read — never grows with settled operations.
//!
//! `due_shard` is `DUE#<n>` for automatic work and `REVIEW` for operations waiting for a person.
//! Why shards: at 1,000 new operations/s each unsettled operation changes ~3 times (create, claim,
//! record), each change one GSI write; a single partition value takes about 1,000 writes/s. Eight
//! shards (`n` from a hash of the operation id, fixed for the operation's life) leave ~2.7x
//! headroom at that rate while a reconciler tick costs only eight small queries. Review items are
//! rare and written by hand, so they share one partition and list in one query.

use std::collections::HashMap;
use std::fmt;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use serde::{Deserialize, Serialize};

use crate::domain::OperationId;
use crate::operation::{Operation, OperationKey, OperationStatus};
use crate::ports::{
    Claim, ClaimRequest, Created, IndexQuery, ManualResolution, OperationStore, OutcomeRecord,
    Page, Recorded, Reschedule, StoreError,
};

pub mod item;

use aws_sdk_dynamodb::types::AttributeValue;
use item::{attr_n, attr_s, audit_to_attr, key_of, operation_from_item, operation_to_item, Attrs};

/// Name of the sparse index over unsettled operations.
pub const UNKNOWN_INDEX: &str = "unsettled-by-due";
/// Name of the KEYS_ONLY index from operation id to the record, for operators. Its key never
/// changes after the put, so it costs one index write per operation, ever.
pub const OPERATION_ID_INDEX: &str = "by-operation-id";
/// How many `DUE#<n>` partitions the index is spread over (see the module docs).
pub const DUE_SHARDS: u32 = 8;
pub const REVIEW_SHARD: &str = "REVIEW";

/// The index partition of an automatic-work operation: stable, from its operation id.
pub fn due_shard(operation_id: &OperationId) -> String {
    // FNV-1a over the id's bytes: stable across processes and releases (unlike `DefaultHasher`).
    let hash = operation_id
        .as_uuid()
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("DUE#{}", hash % u64::from(DUE_SHARDS))
}

/// Counts of DynamoDB calls by kind, as billed (a failed conditional write is still a write).
#[derive(Debug, Default)]
pub struct DynamoCalls {
    pub reads: std::sync::atomic::AtomicU64,
    pub writes: std::sync::atomic::AtomicU64,
    pub queries: std::sync::atomic::AtomicU64,
}

#[derive(Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    calls: std::sync::Arc<DynamoCalls>,
}

impl fmt::Debug for DynamoStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoStore")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

fn sdk_error<E>(what: &str, err: SdkError<E>) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
{
    StoreError::with_source(what.to_owned(), err)
}

const UNSETTLED: &str = "#status IN (:pending, :unknown)";

fn unsettled_values(attrs: &mut Attrs) {
    attrs.insert(":pending".into(), attr_s(OperationStatus::Pending.as_str()));
    attrs.insert(":unknown".into(), attr_s(OperationStatus::Unknown.as_str()));
}

/// Where one index partition's read stands: after this item (its table and index keys).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct IndexPosition {
    pk: String,
    sk: String,
    due: i64,
}

impl IndexPosition {
    fn of(op: &Operation) -> Self {
        let (pk, sk) = key_of(&op.key());
        Self {
            pk,
            sk,
            due: op.next_due_at.map(|t| t.as_millis()).unwrap_or(0),
        }
    }
}

/// A paged read over several partitions: per partition, not started (`None` in `after`, `false`
/// in `done`), after an item, or finished.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct IndexCursor {
    after: Vec<Option<IndexPosition>>,
    done: Vec<bool>,
}

impl DynamoStore {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            calls: Default::default(),
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    pub fn calls(&self) -> &DynamoCalls {
        &self.calls
    }

    fn count_write(&self) {
        self.calls
            .writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Creates the table and its index (on-demand). For local stacks and tests; production tables
    /// come from the SAM template.
    pub async fn create_table(&self) -> Result<(), StoreError> {
        use aws_sdk_dynamodb::types::{
            AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType,
            Projection, ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType,
        };
        let def = |name: &str, t: ScalarAttributeType| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(t)
                .build()
                .map_err(|e| StoreError::with_source("bad attribute definition", e))
        };
        let key = |name: &str, t: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(t)
                .build()
                .map_err(|e| StoreError::with_source("bad key schema", e))
        };
        let index = GlobalSecondaryIndex::builder()
            .index_name(UNKNOWN_INDEX)
            .key_schema(key("due_shard", KeyType::Hash)?)
            .key_schema(key("due_at", KeyType::Range)?)
            .projection(
                Projection::builder()
                    .projection_type(ProjectionType::All)
                    .build(),
            )
            .build()
            .map_err(|e| StoreError::with_source("bad index definition", e))?;
        let by_id = GlobalSecondaryIndex::builder()
            .index_name(OPERATION_ID_INDEX)
            .key_schema(key("operation_id", KeyType::Hash)?)
            .projection(
                Projection::builder()
                    .projection_type(ProjectionType::KeysOnly)
                    .build(),
            )
            .build()
            .map_err(|e| StoreError::with_source("bad index definition", e))?;
        self.client
            .create_table()
            .table_name(&self.table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(def("pk", ScalarAttributeType::S)?)
            .attribute_definitions(def("sk", ScalarAttributeType::S)?)
            .attribute_definitions(def("due_shard", ScalarAttributeType::S)?)
            .attribute_definitions(def("due_at", ScalarAttributeType::N)?)
            .attribute_definitions(def("operation_id", ScalarAttributeType::S)?)
            .key_schema(key("pk", KeyType::Hash)?)
            .key_schema(key("sk", KeyType::Range)?)
            .global_secondary_indexes(index)
            .global_secondary_indexes(by_id)
            // The outbox: the notify function reads old and new images of every write.
            .stream_specification(
                StreamSpecification::builder()
                    .stream_enabled(true)
                    .stream_view_type(StreamViewType::NewAndOldImages)
                    .build()
                    .map_err(|e| StoreError::with_source("bad stream specification", e))?,
            )
            .send()
            .await
            .map_err(|e| sdk_error("CreateTable", e))?;
        Ok(())
    }

    /// Reads one partition of the index after `after`, at most `limit` items, oldest due first.
    /// Returns the items and whether the partition has no more.
    async fn query_shard(
        &self,
        shard: &str,
        due_by: Option<i64>,
        after: Option<&IndexPosition>,
        limit: usize,
    ) -> Result<(Vec<Operation>, bool), StoreError> {
        let start = after.map(|p| {
            HashMap::from([
                ("pk".to_owned(), attr_s(&p.pk)),
                ("sk".to_owned(), attr_s(&p.sk)),
                ("due_shard".to_owned(), attr_s(shard)),
                ("due_at".to_owned(), attr_n(p.due)),
            ])
        });
        let mut values = HashMap::from([(":shard".to_owned(), attr_s(shard))]);
        let condition = match due_by {
            Some(now) => {
                values.insert(":now".into(), attr_n(now));
                "due_shard = :shard AND due_at <= :now"
            }
            None => "due_shard = :shard",
        };
        self.calls
            .queries
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
            .map_err(|e| sdk_error("Query unknown index", e))?;
        let ops = out
            .items()
            .iter()
            .map(operation_from_item)
            .collect::<Result<Vec<_>, _>>()?;
        Ok((ops, out.last_evaluated_key().is_none()))
    }

    /// The common shape of every conditional UpdateItem here: ALL_NEW on success, the current
    /// item via ALL_OLD on a failed condition.
    async fn conditional_update(
        &self,
        what: &'static str,
        key: &OperationKey,
        update: String,
        condition: &str,
        names: HashMap<String, String>,
        values: Attrs,
    ) -> Result<Recorded, StoreError> {
        self.count_write();
        let (pk, sk) = key_of(key);
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", attr_s(&pk))
            .key("sk", attr_s(&sk))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names).filter(|n| !n.is_empty()))
            .set_expression_attribute_values(Some(values))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => {
                let item = out
                    .attributes()
                    .ok_or_else(|| StoreError::new(format!("{what}: no item returned")))?;
                Ok(Recorded::Written(operation_from_item(item)?))
            }
            Err(err) => match err.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(ccf)) => {
                    let current = ccf.item().map(operation_from_item).transpose()?;
                    Ok(Recorded::Refused(current))
                }
                _ => Err(sdk_error(what, err)),
            },
        }
    }
}

fn status_names() -> HashMap<String, String> {
    HashMap::from([("#status".to_owned(), "status".to_owned())])
}

#[async_trait]
impl OperationStore for DynamoStore {
    async fn create_if_absent(&self, op: &Operation) -> Result<Created, StoreError> {
        self.count_write();
        let mut item = operation_to_item(op);
        if let Some(due) = op.next_due_at {
            item.insert("due_shard".into(), attr_s(&due_shard(&op.operation_id)));
            item.insert("due_at".into(), attr_n(due.as_millis()));
        }
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Created::New(op.clone())),
            Err(err) => match err.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(ccf)) => match ccf.item() {
                    Some(existing) => Ok(Created::Existing(operation_from_item(existing)?)),
                    // DynamoDB returns the item with ALL_OLD; only a server without that feature
                    // gets here. Read the winner (strongly consistent) rather than guess.
                    None => match self.get(&op.key()).await? {
                        Some(existing) => Ok(Created::Existing(existing)),
                        None => Err(StoreError::new(
                            "PutItem: condition failed but no existing item was found",
                        )),
                    },
                },
                _ => Err(sdk_error("PutItem", err)),
            },
        }
    }

    async fn get(&self, key: &OperationKey) -> Result<Option<Operation>, StoreError> {
        self.calls
            .reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (pk, sk) = key_of(key);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", attr_s(&pk))
            .key("sk", attr_s(&sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk_error("GetItem", e))?;
        out.item().map(operation_from_item).transpose()
    }

    async fn get_by_operation_id(
        &self,
        operation_id: &OperationId,
    ) -> Result<Option<Operation>, StoreError> {
        self.calls
            .queries
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(OPERATION_ID_INDEX)
            .key_condition_expression("operation_id = :op")
            .expression_attribute_values(":op", attr_s(&operation_id.to_string()))
            .limit(1)
            .send()
            .await
            .map_err(|e| sdk_error("Query by operation id", e))?;
        let Some(keys) = out.items().first() else {
            return Ok(None);
        };
        let pk = match keys.get("pk") {
            Some(aws_sdk_dynamodb::types::AttributeValue::S(pk)) => pk,
            _ => return Err(StoreError::new("malformed index item: pk")),
        };
        let order = pk
            .strip_prefix("ORDER#")
            .ok_or_else(|| StoreError::new("malformed index item: pk"))?;
        let key = OperationKey::charge(
            crate::domain::OrderId::parse(order)
                .map_err(|e| StoreError::new(format!("malformed index item: {e}")))?,
        );
        // The GSI is eventually consistent; the table read that follows is not.
        Ok(self
            .get(&key)
            .await?
            .filter(|op| op.operation_id == *operation_id))
    }

    async fn claim(&self, req: &ClaimRequest) -> Result<Claim, StoreError> {
        let mut values = HashMap::from([
            (":op".to_owned(), attr_s(&req.operation_id.to_string())),
            (":token".to_owned(), attr_s(&req.lease.token.to_string())),
            (
                ":expires".to_owned(),
                attr_n(req.lease.expires_at.as_millis()),
            ),
            (":now".to_owned(), attr_n(req.now.as_millis())),
            (":one".to_owned(), attr_n(1)),
        ]);
        unsettled_values(&mut values);
        let result = self
            .conditional_update(
                "UpdateItem (claim)",
                &req.key,
                "SET lease_token = :token, lease_expires_at = :expires, \
                 first_attempted_at = if_not_exists(first_attempted_at, :now), \
                 attempts = attempts + :one, updated_at = :now"
                    .into(),
                &format!(
                    "operation_id = :op AND {UNSETTLED} AND attribute_not_exists(review_reason) \
                     AND (attribute_not_exists(lease_expires_at) OR lease_expires_at <= :now)"
                ),
                status_names(),
                values,
            )
            .await?;
        Ok(match result {
            Recorded::Written(op) => Claim::Claimed(op),
            Recorded::Refused(None) => Claim::NotFound,
            Recorded::Refused(Some(op)) if op.operation_id != req.operation_id => Claim::NotFound,
            Recorded::Refused(Some(op)) if op.status.is_settled() => Claim::Settled(op),
            Recorded::Refused(Some(op)) if op.review.is_some() => Claim::InReview(op),
            Recorded::Refused(Some(op)) => Claim::Leased(op),
        })
    }

    async fn record(&self, rec: &OutcomeRecord) -> Result<Recorded, StoreError> {
        let mut set = vec!["#status = :status", "updated_at = :now"];
        let mut remove = vec!["lease_token", "lease_expires_at"];
        let mut values = HashMap::from([
            (":op".to_owned(), attr_s(&rec.operation_id.to_string())),
            (":token".to_owned(), attr_s(&rec.lease_token.to_string())),
            (":status".to_owned(), attr_s(rec.status.as_str())),
            (":now".to_owned(), attr_n(rec.now.as_millis())),
        ]);
        unsettled_values(&mut values);
        if let Some(id) = &rec.external_id {
            set.push("external_id = :ext");
            values.insert(":ext".into(), attr_s(id));
        }
        match &rec.last_error {
            Some(e) => {
                set.push("last_error = :err");
                values.insert(":err".into(), attr_s(e));
            }
            None => remove.push("last_error"),
        }
        if let Some(review) = &rec.review {
            set.push("review_reason = :reason");
            set.push("review_flagged_at = :flagged");
            values.insert(":reason".into(), attr_s(&review.reason));
            values.insert(":flagged".into(), attr_n(review.flagged_at.as_millis()));
        }
        if rec.status.is_settled() {
            remove.push("due_shard");
            remove.push("due_at");
        } else {
            // The partition depends on the review flag, which only this write can set (claims
            // refuse operations in review, so no lease holder ever writes over one).
            let shard = match &rec.review {
                Some(_) => REVIEW_SHARD.to_owned(),
                None => due_shard(&rec.operation_id),
            };
            let due = rec.next_due_at.unwrap_or(rec.now);
            set.push("due_shard = :shard");
            set.push("due_at = :due");
            values.insert(":shard".into(), attr_s(&shard));
            values.insert(":due".into(), attr_n(due.as_millis()));
        }
        let update = format!("SET {} REMOVE {}", set.join(", "), remove.join(", "));
        let result = self
            .conditional_update(
                "UpdateItem (record)",
                &rec.key,
                update,
                &format!("operation_id = :op AND lease_token = :token AND {UNSETTLED}"),
                status_names(),
                values,
            )
            .await?;
        Ok(result)
    }

    async fn reschedule(&self, req: &Reschedule) -> Result<Recorded, StoreError> {
        let mut values = HashMap::from([
            (":op".to_owned(), attr_s(&req.operation_id.to_string())),
            (":expected".to_owned(), attr_s(req.expected_status.as_str())),
            (
                ":read_at".to_owned(),
                attr_n(req.expected_updated_at.as_millis()),
            ),
            (":due".to_owned(), attr_n(req.next_due_at.as_millis())),
            (":now".to_owned(), attr_n(req.now.as_millis())),
        ]);
        unsettled_values(&mut values);
        let mut set = vec!["due_at = :due", "updated_at = :now"];
        let mut remove: Vec<&str> = Vec::new();
        if req.bump_redrives {
            set.push("redrives = redrives + :one");
            values.insert(":one".into(), attr_n(1));
        }
        if req.clear_review {
            set.push("due_shard = :shard");
            remove.extend(["review_reason", "review_flagged_at"]);
            values.insert(":shard".into(), attr_s(&due_shard(&req.operation_id)));
        }
        let mut condition = format!(
            "operation_id = :op AND #status = :expected AND {UNSETTLED} \
             AND updated_at = :read_at AND attribute_exists(due_shard)"
        );
        if let Some(guard) = &req.operator {
            set.push("history = list_append(if_not_exists(history, :no_history), :entry)");
            values.insert(":no_history".into(), AttributeValue::L(Vec::new()));
            values.insert(
                ":entry".into(),
                AttributeValue::L(vec![audit_to_attr(&guard.audit)]),
            );
            values.insert(
                ":lease_cutoff".into(),
                attr_n(guard.lease_cutoff.as_millis()),
            );
            condition.push_str(
                " AND (attribute_not_exists(lease_expires_at) OR lease_expires_at <= :lease_cutoff)",
            );
        }
        let mut update = format!("SET {}", set.join(", "));
        if !remove.is_empty() {
            update.push_str(&format!(" REMOVE {}", remove.join(", ")));
        }
        let result = self
            .conditional_update(
                "UpdateItem (reschedule)",
                &req.key,
                update,
                &condition,
                status_names(),
                values,
            )
            .await?;
        Ok(result)
    }

    async fn resolve(&self, req: &ManualResolution) -> Result<Recorded, StoreError> {
        if !req.status.is_settled() {
            return Ok(Recorded::Refused(self.get(&req.key).await?));
        }
        let at = req.guard.audit.at.as_millis();
        let mut values = HashMap::from([
            (":op".to_owned(), attr_s(&req.operation_id.to_string())),
            (":status".to_owned(), attr_s(req.status.as_str())),
            (":at".to_owned(), attr_n(at)),
            (
                ":read_at".to_owned(),
                attr_n(req.expected_updated_at.as_millis()),
            ),
            (
                ":lease_cutoff".to_owned(),
                attr_n(req.guard.lease_cutoff.as_millis()),
            ),
            (":no_history".to_owned(), AttributeValue::L(Vec::new())),
            (
                ":entry".to_owned(),
                AttributeValue::L(vec![audit_to_attr(&req.guard.audit)]),
            ),
        ]);
        unsettled_values(&mut values);
        let mut update = "SET #status = :status, updated_at = :at, \
                          history = list_append(if_not_exists(history, :no_history), :entry)"
            .to_owned();
        if let Some(id) = &req.external_id {
            update.push_str(", external_id = :ext");
            values.insert(":ext".into(), attr_s(id));
        }
        update.push_str(" REMOVE due_shard, due_at, lease_token, lease_expires_at");
        let result = self
            .conditional_update(
                "UpdateItem (resolve)",
                &req.key,
                update,
                &format!(
                    "operation_id = :op AND {UNSETTLED} AND updated_at = :read_at \
                     AND (attribute_not_exists(lease_expires_at) OR lease_expires_at <= :lease_cutoff)"
                ),
                status_names(),
                values,
            )
            .await?;
        Ok(result)
    }

    async fn query_index(
        &self,
        query: IndexQuery,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let limit = limit.clamp(1, 1000);
        let (shards, due_by): (Vec<String>, Option<i64>) = match query {
            IndexQuery::DueBy(now) => (
                (0..DUE_SHARDS).map(|n| format!("DUE#{n}")).collect(),
                Some(now.as_millis()),
            ),
            IndexQuery::Unsettled => ((0..DUE_SHARDS).map(|n| format!("DUE#{n}")).collect(), None),
            IndexQuery::InReview => (vec![REVIEW_SHARD.to_owned()], None),
        };
        let mut cursor = match cursor {
            None => IndexCursor {
                after: vec![None; shards.len()],
                done: vec![false; shards.len()],
            },
            Some(raw) => serde_json::from_str::<IndexCursor>(&raw)
                .ok()
                .filter(|c| c.after.len() == shards.len() && c.done.len() == shards.len())
                .ok_or_else(|| StoreError::new("malformed page cursor"))?,
        };
        // A k-way merge over the partitions: read up to `limit` from each, keep the `limit` oldest
        // (ties in each partition's own order, so what is taken from a partition is always a
        // prefix of what was read from it), and remember per partition the last item returned.
        // Oldest-due-first then holds across pages, and nothing is skipped or repeated.
        let mut candidates: Vec<(i64, usize, usize, Operation)> = Vec::new();
        let mut read = vec![0usize; shards.len()];
        let mut complete = vec![true; shards.len()];
        for (i, shard) in shards.iter().enumerate() {
            if cursor.done[i] {
                continue;
            }
            let (ops, no_more) = self
                .query_shard(shard, due_by, cursor.after[i].as_ref(), limit)
                .await?;
            read[i] = ops.len();
            complete[i] = no_more;
            for (pos, op) in ops.into_iter().enumerate() {
                let due = op.next_due_at.map(|t| t.as_millis()).unwrap_or(i64::MAX);
                candidates.push((due, i, pos, op));
            }
        }
        candidates.sort_by_key(|(due, shard, pos, _)| (*due, *shard, *pos));
        candidates.truncate(limit);
        let mut taken = vec![0usize; shards.len()];
        for (_, i, _, op) in &candidates {
            taken[*i] += 1;
            cursor.after[*i] = Some(IndexPosition::of(op));
        }
        for i in 0..shards.len() {
            if !cursor.done[i] && complete[i] && taken[i] == read[i] {
                cursor.done[i] = true;
            }
        }
        let next = if cursor.done.iter().all(|d| *d) {
            None
        } else {
            Some(
                serde_json::to_string(&cursor)
                    .map_err(|e| StoreError::with_source("cannot encode page cursor", e))?,
            )
        };
        Ok(Page {
            operations: candidates.into_iter().map(|(.., op)| op).collect(),
            next,
        })
    }
}
