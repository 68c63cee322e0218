//! The table's shape: key attributes, the sparse unknown index, its partitions (shards) and the
//! table definition for local stacks and tests (production's is in the SAM template, which
//! `tests/template.rs` checks against these names). Every `DUE#<n>` is built by [`shard_name`].

use aws_sdk_dynamodb::operation::create_table::builders::CreateTableFluentBuilder;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType,
};
use charge_core::domain::OperationId;

use crate::ports::StoreError;

/// The table's partition key: `ORDER#<order_id>`.
pub const PK: &str = "pk";
/// The table's sort key: the operation kind.
pub const SK: &str = "sk";
/// The unknown index's partition key: [`shard_name`] or [`REVIEW_SHARD`]; only while unsettled.
pub const DUE_SHARD: &str = "due_shard";
/// The unknown index's sort key: when the operation is next due (ms); only while unsettled.
pub const DUE_AT: &str = "due_at";

/// The settled index's partition key: the UTC day (`YYYY-MM-DD`, [`settled_day`]) the record
/// settled on; set by the write that settles it, with [`SETTLED_AT`], never changed after.
pub const SETTLED_ON: &str = "settled_on";
/// When the record settled (ms): [`charge_core::operation::Operation::settled_at`], and the settled
/// index's sort key.
pub const SETTLED_AT: &str = "settled_at";

/// Name of the index over settled operations by settle time: what the drift audit reads a
/// window's records from.
pub const SETTLED_INDEX: &str = "settled-by-day";

/// A secondary index's name and key attributes: what a paged read of it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexKeys {
    pub name: &'static str,
    pub partition: &'static str,
    pub sort: &'static str,
}

/// The unknown index's keys.
pub const UNKNOWN_KEYS: IndexKeys = IndexKeys {
    name: UNKNOWN_INDEX,
    partition: DUE_SHARD,
    sort: DUE_AT,
};

/// The settled index's keys.
pub const SETTLED_KEYS: IndexKeys = IndexKeys {
    name: SETTLED_INDEX,
    partition: SETTLED_ON,
    sort: SETTLED_AT,
};

/// The partition of the drift audit's reports in the table (`pk`); `sk` is the window, end then
/// start ([`audit_sort_key`]). No order id makes it (`ORDER#…`), and its items have neither
/// index's keys, so no index lists them.
pub const AUDIT_PK: &str = "AUDIT";
/// The partition of the refund watch's cursor (`pk`; `sk` is [`WATCH_SK`]): like the audit's
/// reports, no order id makes it and it has neither index's keys.
pub const WATCH_PK: &str = "WATCH";
pub const WATCH_SK: &str = "refunds";
/// The dispute watch's cursor's `sk` in the same partition (same one attribute).
pub const DISPUTE_WATCH_SK: &str = "disputes";
/// The cursor's one attribute: the end of the span of settle times the watch has covered (ms).
pub const WATCHED_THROUGH: &str = "watched_through";
/// A stored report's attributes (the report itself is [`AUDIT_REPORT`], JSON); the others say
/// at a glance, in the console, which window it covers and how much drift it found.
pub const AUDIT_WINDOW_FROM: &str = "window_from";
pub const AUDIT_WINDOW_TO: &str = "window_to";
pub const AUDIT_RAN_AT: &str = "ran_at";
pub const AUDIT_DRIFT: &str = "drift";
pub const AUDIT_REPORT: &str = "report";

/// The settled index's partition of a settle time: its UTC day, `YYYY-MM-DD`. A day per
/// partition keeps a day's audit to one or two Queries, and at 1,000 settles/s a partition
/// value takes about 1,000 writes/s (the day's writes land in one; see [`super`] on shards).
pub fn settled_day(at: charge_core::time::Timestamp) -> String {
    let mut day = at.to_rfc3339();
    day.truncate(10);
    day
}

/// The sort key of a report of the window `[from, to)`: the end, then the start (RFC 3339), so
/// the newest window end sorts last and a Query read backwards gives the newest first.
pub fn audit_sort_key(window: &charge_core::audit::AuditWindow) -> String {
    format!("{}/{}", window.to.to_rfc3339(), window.from.to_rfc3339())
}

/// The record's attributes that the conditional writes check or change ([`super::writes`]); the
/// rest of the record is in [`super::item`].
pub const OPERATION_ID: &str = "operation_id";
pub const STATUS: &str = "status";
pub const EXTERNAL_ID: &str = "external_id";
pub const LAST_ERROR: &str = "last_error";
pub const ATTEMPTS: &str = "attempts";
pub const REDRIVES: &str = "redrives";
pub const FIRST_ATTEMPTED_AT: &str = "first_attempted_at";
pub const UPDATED_AT: &str = "updated_at";
/// With [`LEASE_EXPIRES_AT`]: only while leased.
pub const LEASE_TOKEN: &str = "lease_token";
pub const LEASE_EXPIRES_AT: &str = "lease_expires_at";
/// With [`REVIEW_FLAGGED_AT`]: only while flagged for review.
pub const REVIEW_REASON: &str = "review_reason";
pub const REVIEW_FLAGGED_AT: &str = "review_flagged_at";
pub const HISTORY: &str = "history";
/// A charge's refunds' reservations (minor units); absent means 0.
pub const REFUND_RESERVED: &str = "refund_reserved";
pub const STRIPE_REFUND_ID: &str = "stripe_refund_id";
/// An authorized charge's: Stripe's capture deadline (ms), what a capture took (minor units),
/// and the capture or cancel that took it (`capture:<uuid>` / `cancel:<uuid>`).
pub const CAPTURE_BEFORE: &str = "capture_before";
pub const AMOUNT_CAPTURED: &str = "amount_captured";
pub const TAKEN_BY: &str = "taken_by";
/// A disputed charge's: the open dispute (`dp_…`) and whether Stripe says the charge can still
/// be refunded (BOOL). Both absent on a charge with no open dispute, and on every record written
/// before disputes.
pub const DISPUTED_BY: &str = "disputed_by";
pub const DISPUTE_REFUNDABLE: &str = "dispute_refundable";
/// On an order's first charge attempt (sort key `charge`, the order's head): the number of its
/// latest attempt (N, from 2), once the order was charged again after a decline. Absent on every
/// order with one attempt, and on every record written before attempts.
pub const LATEST_ATTEMPT: &str = "latest_attempt";
/// On a refund's, capture's, cancel's or dispute's record: the attempt of the order's charge it
/// acts on (N, 2 to 20: its `charge#<n>` record). Absent when it acts on the first attempt (the
/// head, `charge`), and on every record written before attempts.
pub const CHARGE_ATTEMPT: &str = "charge_attempt";
/// A dispute's, beside `payment_intent`: the charge it takes back from (`ch_…`), the bank's
/// reason, Stripe's `created` (ms), what Stripe moves (`dispute_status` verbatim, `due_by` (ms,
/// optional), `has_evidence` and `charge_refundable` (BOOL)), and `dispute_reserved` (BOOL):
/// its amount is counted in its charge's `refund_reserved`.
pub const STRIPE_CHARGE: &str = "stripe_charge";
pub const DISPUTE_REASON: &str = "dispute_reason";
pub const DISPUTE_CREATED: &str = "dispute_created";
pub const DISPUTE_STATUS: &str = "dispute_status";
pub const DUE_BY: &str = "due_by";
pub const HAS_EVIDENCE: &str = "has_evidence";
pub const CHARGE_REFUNDABLE: &str = "charge_refundable";
pub const DISPUTE_RESERVED: &str = "dispute_reserved";

/// Name of the sparse index over unsettled operations.
pub const UNKNOWN_INDEX: &str = "unsettled-by-due";
/// The non-key attributes projected into the unknown index. `operation_id` is set by the put and
/// never changes (operators find an unsettled operation by its id in the index); `status` changes
/// only in writes that also move or remove the entry (a record sets `due_at` or removes it, a
/// resolve removes it), and a claim changes neither, so projecting it costs no index write and
/// operators reading the index see states, not only ids. Nothing a claim changes may be projected
/// (see [`super`]; `writes`' tests hold it).
pub const UNKNOWN_INDEX_PROJECTED: &[&str] = &[OPERATION_ID, STATUS];
/// How many `DUE#<n>` partitions the index is spread over (see [`super`]: why shards).
pub const DUE_SHARDS: u32 = 8;
/// The one index partition of operations waiting for a person.
pub const REVIEW_SHARD: &str = "REVIEW";

/// The index partition value of automatic-work shard `n` (`0..DUE_SHARDS`): `DUE#<n>`.
pub fn shard_name(n: u32) -> String {
    format!("DUE#{n}")
}

/// Every automatic-work partition, in shard order.
pub fn due_shards() -> impl Iterator<Item = String> {
    (0..DUE_SHARDS).map(shard_name)
}

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
    // The remainder is below DUE_SHARDS, a u32.
    shard_name((hash % u64::from(DUE_SHARDS)) as u32)
}

/// Adds the table's keys, the unknown index and the stream to a CreateTable request (on-demand).
pub(super) fn define_table(
    request: CreateTableFluentBuilder,
) -> Result<CreateTableFluentBuilder, StoreError> {
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
        .key_schema(key(DUE_SHARD, KeyType::Hash)?)
        .key_schema(key(DUE_AT, KeyType::Range)?)
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::Include)
                .set_non_key_attributes(Some(
                    UNKNOWN_INDEX_PROJECTED
                        .iter()
                        .map(|a| (*a).to_owned())
                        .collect(),
                ))
                .build(),
        )
        .build()
        .map_err(|e| StoreError::with_source("bad index definition", e))?;
    let settled = GlobalSecondaryIndex::builder()
        .index_name(SETTLED_INDEX)
        .key_schema(key(SETTLED_ON, KeyType::Hash)?)
        .key_schema(key(SETTLED_AT, KeyType::Range)?)
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::KeysOnly)
                .build(),
        )
        .build()
        .map_err(|e| StoreError::with_source("bad index definition", e))?;
    Ok(request
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(def(PK, ScalarAttributeType::S)?)
        .attribute_definitions(def(SK, ScalarAttributeType::S)?)
        .attribute_definitions(def(DUE_SHARD, ScalarAttributeType::S)?)
        .attribute_definitions(def(DUE_AT, ScalarAttributeType::N)?)
        .attribute_definitions(def(SETTLED_ON, ScalarAttributeType::S)?)
        .attribute_definitions(def(SETTLED_AT, ScalarAttributeType::N)?)
        .key_schema(key(PK, KeyType::Hash)?)
        .key_schema(key(SK, KeyType::Range)?)
        .global_secondary_indexes(index)
        .global_secondary_indexes(settled)
        // The outbox: the notify function reads old and new images of every write.
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewAndOldImages)
                .build()
                .map_err(|e| StoreError::with_source("bad stream specification", e))?,
        ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settle_time_s_day_is_its_utc_date() {
        use charge_core::time::Timestamp;
        // 2026-12-04T00:00:00Z and the millisecond before it.
        let midnight = Timestamp::from_millis(1_796_342_400_000);
        assert_eq!(settled_day(midnight), "2026-12-04");
        assert_eq!(
            settled_day(Timestamp::from_millis(midnight.as_millis() - 1)),
            "2026-12-03"
        );
    }

    #[test]
    fn a_later_window_end_sorts_after() {
        use charge_core::audit::AuditWindow;
        use charge_core::time::Timestamp;
        let w = |from: i64, to: i64| AuditWindow {
            from: Timestamp::from_millis(from),
            to: Timestamp::from_millis(to),
        };
        let day = 86_400_000;
        let (a, b) = (w(0, day), w(day, 2 * day));
        assert_eq!(
            audit_sort_key(&a),
            "1970-01-02T00:00:00.000Z/1970-01-01T00:00:00.000Z"
        );
        assert!(audit_sort_key(&a) < audit_sort_key(&b));
    }

    #[test]
    fn shard_names() {
        assert_eq!(shard_name(0), "DUE#0");
        assert_eq!(
            due_shards().collect::<Vec<_>>(),
            ["DUE#0", "DUE#1", "DUE#2", "DUE#3", "DUE#4", "DUE#5", "DUE#6", "DUE#7"]
        );
    }

    /// FNV-1a's values, pinned: an operation's shard must not change between releases.
    #[test]
    fn due_shard_is_stable() {
        for (id, shard) in [
            ("00000000-0000-0000-0000-000000000000", "DUE#5"),
            ("7f1c2a9e-3b4d-4e5f-8a6b-1c2d3e4f5a6b", "DUE#1"),
            ("ffffffff-ffff-ffff-ffff-ffffffffffff", "DUE#5"),
        ] {
            assert_eq!(due_shard(&OperationId::parse(id).unwrap()), shard, "{id}");
        }
    }

    #[test]
    fn an_operation_keeps_its_shard_and_operations_spread() {
        let ids: Vec<OperationId> = (1..=400u128)
            .map(|n| {
                OperationId::from_uuid(uuid::Uuid::from_u128(
                    n.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835),
                ))
            })
            .collect();
        let all: Vec<String> = due_shards().collect();
        let mut seen = std::collections::HashSet::new();
        for id in &ids {
            let shard = due_shard(id);
            assert_eq!(shard, due_shard(id));
            assert!(all.contains(&shard), "{shard}");
            seen.insert(shard);
        }
        assert_eq!(seen.len(), all.len());
    }
}
