//! What a reconciler tick reads, as unsettled and settled operations grow.
//!
//! One table on moto, filled with BatchWriteItem (25 items a call, through an uncounted client):
//! settled operations as the charge function leaves them (no index attributes), unsettled ones as
//! it leaves an `unknown` (index attributes set, due now). Then exactly what a tick reads:
//! [`DynamoStore::query_index`] with [`IndexQuery::DueBy`] and the reconciler's page size, page by
//! page, through a client counted on the wire: the index Queries (entries: keys and
//! `operation_id`) and the BatchGetItems that read the page's records (the index does not
//! project them). Read units are computed from the items in each answer (see
//! [`crate::wire::counter`]); moto's `ConsumedCapacity` is a constant 1.0.
//!
//! For contrast, the seed's straight port finds its work with a Scan: its computed read units are
//! reported on the same table.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use charge_core::{
    domain::{Amount, ChargeParams, Currency, CustomerId, OrderId, PaymentMethodId},
    operation::{Operation, OperationStatus},
    time::Timestamp,
};
use charge_once::adapters::dynamodb::item::{attr_n, attr_s, operation_to_item};
use charge_once::adapters::dynamodb::{due_shard, DynamoStore};
use charge_once::ports::{IndexQuery, UnknownIndex};
use testkit::aws::{sdk_config, unique};

use crate::wire::counter::{counted_dynamodb, WireCounter};

/// The reconciler function's index page size.
pub const PAGE_SIZE: usize = reconciler::handler::PAGE_SIZE;
const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct IndexRow {
    pub settled: usize,
    pub unsettled: usize,
    pub pages: u64,
    pub queries: u64,
    pub batch_gets: u64,
    pub items_read: u64,
    pub bytes_read: u64,
    pub read_units: f64,
    pub scan_requests: u64,
    pub scan_read_units: f64,
}

fn params() -> ChargeParams {
    ChargeParams {
        amount: Amount::new(1250).expect("amount"),
        currency: Currency::parse("usd").expect("currency"),
        customer_id: CustomerId::parse("cus_Q8xYz12AbC").expect("customer"),
        payment_method: PaymentMethodId::parse("pm_card_visa").expect("payment method"),
        capture_method: Default::default(),
    }
}

fn op(prefix: &str, i: usize) -> Operation {
    let mut op = Operation::new(
        OrderId::parse(&format!("{prefix}-{i}")).expect("order id"),
        params(),
        charge_core::domain::Principal::jwt("bench").expect("principal"),
        T0,
        Duration::from_secs(300),
    );
    op.attempts = 1;
    op.first_attempted_at = Some(T0);
    op
}

/// A settled operation as the charge function leaves it: no index attributes.
fn settled_item(i: usize) -> HashMap<String, AttributeValue> {
    let mut op = op("bench-settled", i);
    op.status = OperationStatus::Succeeded;
    op.external_id = charge_core::domain::PaymentIntentId::parse(&format!("pi_bench{i:020}")).ok();
    op.next_due_at = None;
    operation_to_item(&op)
}

/// An `unknown` operation as the charge function leaves it after a lost response: in the index,
/// due after the first backoff.
fn unsettled_item(i: usize) -> HashMap<String, AttributeValue> {
    let mut op = op("bench-unsettled", i);
    op.status = OperationStatus::Unknown;
    op.last_error = Some("outcome unknown: no response: connection lost".into());
    let due = T0.plus(Duration::from_secs(60));
    op.next_due_at = Some(due);
    let mut item = operation_to_item(&op);
    item.insert("due_shard".into(), attr_s(&due_shard(&op.operation_id)));
    item.insert("due_at".into(), attr_n(due.as_millis()));
    item
}

async fn batch_write(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    items: impl Iterator<Item = HashMap<String, AttributeValue>>,
) {
    let items: Vec<_> = items.collect();
    for chunk in items.chunks(25) {
        let mut requests: Vec<WriteRequest> = chunk
            .iter()
            .map(|item| {
                WriteRequest::builder()
                    .put_request(
                        PutRequest::builder()
                            .set_item(Some(item.clone()))
                            .build()
                            .expect("put request"),
                    )
                    .build()
            })
            .collect();
        while !requests.is_empty() {
            let out = client
                .batch_write_item()
                .request_items(table, requests)
                .send()
                .await
                .expect("BatchWriteItem on moto");
            requests = out
                .unprocessed_items()
                .and_then(|u| u.get(table))
                .cloned()
                .unwrap_or_default();
        }
    }
}

/// One table being filled step by step.
pub struct IndexTable {
    plain: aws_sdk_dynamodb::Client,
    counted: aws_sdk_dynamodb::Client,
    counter: WireCounter,
    store: DynamoStore,
    pub settled: usize,
    pub unsettled: usize,
}

impl IndexTable {
    pub async fn new() -> Self {
        let config = sdk_config().await;
        let counter = WireCounter::new();
        let plain = aws_sdk_dynamodb::Client::new(&config);
        let table = unique("index-cost");
        DynamoStore::new(plain.clone(), &table)
            .create_table()
            .await
            .expect("create table on moto");
        let counted = counted_dynamodb(&config, &counter);
        Self {
            store: DynamoStore::new(counted.clone(), table),
            counted,
            plain,
            counter,
            settled: 0,
            unsettled: 0,
        }
    }

    /// Adds settled operations up to `n` in all.
    pub async fn settled_to(&mut self, n: usize) {
        batch_write(
            &self.plain,
            self.store.table(),
            (self.settled..n).map(settled_item),
        )
        .await;
        self.settled = self.settled.max(n);
    }

    /// Adds unsettled operations up to `n` in all.
    pub async fn unsettled_to(&mut self, n: usize) {
        batch_write(
            &self.plain,
            self.store.table(),
            (self.unsettled..n).map(unsettled_item),
        )
        .await;
        self.unsettled = self.unsettled.max(n);
    }

    /// Reads the due part of the index as one tick does; and the seed's Scan, for contrast.
    pub async fn measure(&self) -> IndexRow {
        let now = T0.plus(Duration::from_secs(3600));
        let before = self.counter.snapshot();
        let mut cursor = None;
        let mut pages = 0;
        let mut seen = 0;
        loop {
            let page = self
                .store
                .query_index(IndexQuery::DueBy(now), cursor.take(), PAGE_SIZE)
                .await
                .expect("query_index");
            pages += 1;
            seen += page.operations.len();
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(
            seen, self.unsettled,
            "the tick sees every due operation once"
        );
        let tick = self.counter.snapshot().since(&before);

        let before = self.counter.snapshot();
        let mut start = None;
        loop {
            let out = counted_scan(&self.counted, self.store.table(), start).await;
            match out {
                Some(k) => start = Some(k),
                None => break,
            }
        }
        let scan = self.counter.snapshot().since(&before);
        IndexRow {
            settled: self.settled,
            unsettled: self.unsettled,
            pages,
            queries: tick.get("Query"),
            batch_gets: tick.get("BatchGetItem"),
            items_read: tick.read_items,
            bytes_read: tick.read_bytes,
            read_units: tick.read_units,
            scan_requests: scan.get("Scan"),
            scan_read_units: scan.read_units,
        }
    }
}

/// One Scan page over the whole table through the counted client (a filter on the status would
/// be billed the same: DynamoDB charges for what it scans, not for what the filter keeps).
async fn counted_scan(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    start: Option<HashMap<String, AttributeValue>>,
) -> Option<HashMap<String, AttributeValue>> {
    client
        .scan()
        .table_name(table)
        .set_exclusive_start_key(start)
        .send()
        .await
        .expect("Scan on moto")
        .last_evaluated_key()
        .cloned()
}
