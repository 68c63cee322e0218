//! Release fixture writer: the part every release runs.
//!
//! Not a test of this repository: `infra/release-fixtures/generate.sh` copies `writers/common/` into
//! `tests/tests/release_fixture_writer/` of a worktree checked out at the release's commit, with the
//! release's adapter `writers/<release>.rs` as `release.rs` beside this file. Cargo discovers the
//! directory as an integration test of the `integration-tests` crate; the script runs it under that
//! worktree's own `infra/local/with-stack.sh` (moto). It compiles against THAT commit's API only.
//!
//! This file holds what stays the same from release to release: the cases, the order of their
//! steps, and the files read back. What a release's API does differently (how an operation is built,
//! what an operator's resolve and redrive write, whether there are an inbox and outcome events) is
//! the [`Release`] trait, implemented by the adapter (`release::Adapter`). The other files here
//! (`operator.rs`, `inbox.rs`, `outcome_events.rs`, `relay.rs`) are written against the API of
//! 2026-11-30; an adapter whose release still has that API declares them as its own modules, so
//! only the ones it declares are compiled.
//!
//! What it does: drives one operation per case into its state with the release's own code
//! (`DynamoStore::create_table`, `create_if_absent`, `claim`, `SqsQueue` sends, the executor
//! `execute` over the release's in-memory Stripe model `FakeGateway`, and the adapter's
//! resolve and redrive), then reads back the RAW data: a DynamoDB `Scan` of the operations table and
//! every message received from the FIFO queue. Writes `operations.json` and `messages.json` into
//! `$FX_OUT`, then the adapter's further files.

mod release;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use charge_core::plan::Policy;
use charge_once::adapters::dynamodb::item::operation_from_item;
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::sqs::SqsQueue;
use charge_once::executor::{execute, EngineDeps};
use charge_once::memory::{FakeFault, FakeGateway};
// Every port trait in scope, whichever of them holds `create_if_absent`, `get` and `claim` at the
// release (one `OperationStore` until 2026-12-04, its parts `OperationReads`, `OperationCreates`,
// `OperationLeases` from 2026-12-07 on).
use charge_core::store::{Claim, ClaimRequest, Created};
use charge_core::{
    domain::{ChargeParams, OperationId, OrderId},
    operation::{Lease, LeaseToken, Operation, OperationStatus},
    time::{Clock, ManualClock, Timestamp},
};
#[allow(unused_imports)]
use charge_once::ports::*;
use release::Adapter;
use serde_json::{json, Value};
use testkit::aws::{fresh_fifo_queue, fresh_store, sdk_config};

/// What differs between releases, implemented by `release.rs` with its release's API.
trait Release {
    /// Built before the first case, after the world.
    fn new() -> Self;

    /// The operation checkout records for `order_id` at `now` (with the release's `requested_by`,
    /// if it has one), checked as the release's checkout checks it.
    fn operation(
        order_id: OrderId,
        params: ChargeParams,
        now: Timestamp,
        pending_grace: Duration,
    ) -> Operation;

    /// `unknown_with_intent`: the charge function's execution of `op` ([`World::execute`]) while
    /// Stripe answers creates with a `processing` PaymentIntent; the record afterwards.
    async fn execute_processing(&self, w: &World, op: &Operation) -> Operation;

    /// `chargectl resolve --failed` of `reviewed` at the clock's now: what its command writes at
    /// the release's commit, through the store's resolve.
    async fn resolve_failed(&self, w: &World, reviewed: &Operation, note: &str);

    /// `chargectl redrive` of `reviewed` at the clock's now: the reschedule (a re-drive counted,
    /// the review cleared), then the message with dedup id `<operation_id>:<redrives>`.
    async fn redrive(&self, w: &World, reviewed: &Operation, note: &str);

    /// Fake Stripes besides `w.gateway` that the executor called.
    fn other_gateways(&self) -> Vec<&FakeGateway> {
        Vec::new()
    }

    /// The files after `operations.json` and `messages.json`: (file name, entries).
    async fn more_files(&self, _w: &World) -> Vec<(&'static str, Vec<Value>)> {
        Vec::new()
    }
}

/// 2026-11-29T12:00:00Z (the same clock in every release). Every case starts 3 h after the
/// previous one.
const T0: i64 = 1_795_953_600_000;
/// The lease token of the `leased` case (fixed, so the fixture is deterministic).
const LEASE_TOKEN: &str = "f1f1f1f1-1ea5-4e00-8000-000000000001";
/// Who checked out (the order service's role, as the IAM authorizer names it), in releases whose
/// operation has `requested_by`.
#[allow(dead_code)]
const REQUESTED_BY: &str = "arn:aws:sts::123456789012:assumed-role/order-service/i-0fx";
/// The operator of `chargectl resolve` / `redrive` (STS GetCallerIdentity, in releases that record
/// it) and their label.
#[allow(dead_code)]
const OPERATOR_ARN: &str = "arn:aws:sts::123456789012:assumed-role/oncall/alice";
const OPERATOR_LABEL: &str = "alice";

/// The cases, in order. Case `i` is operation `f1f1f1f1-0000-4000-8000-0000000000NN` (NN = i + 1,
/// decimal): the same ids in every release, so keys compare across releases.
const CASES: &[&str] = &[
    "pending",
    "pending_lost_enqueue",
    "unknown_with_intent",
    "unknown_without_intent",
    "leased",
    "succeeded",
    "failed",
    "in_review",
    "resolved_by_operator",
    "redriven",
];

fn case_index(case: &str) -> usize {
    CASES.iter().position(|c| *c == case).expect("known case")
}

fn operation_id(i: usize) -> OperationId {
    OperationId::parse(&format!("f1f1f1f1-0000-4000-8000-{:012}", i + 1)).unwrap()
}

fn case_of_order(order_id: &str) -> String {
    order_id
        .strip_prefix("ord-fx-")
        .expect("a fixture order id")
        .to_owned()
}

/// Alternating 4200 eur / 1999 usd, amounts Stripe accepts. Built through serde, which every
/// release's `ChargeParams` derives, so a field a later release adds with a serde default (from
/// 2026-12-07: `capture_method`, automatic) takes it, as that release reads an earlier record.
fn params(i: usize) -> ChargeParams {
    let (amount, currency) = if i % 2 == 0 {
        (4200, "eur")
    } else {
        (1999, "usd")
    };
    serde_json::from_value(json!({
        "amount": amount,
        "currency": currency,
        "customer_id": format!("cus_Fx{:02}", i + 1),
        "payment_method": "pm_card_visa",
    }))
    .expect("charge parameters the release accepts")
}

struct World {
    /// For the parts' own clients (2026-11-29 declares none).
    #[allow(dead_code)]
    config: aws_config::SdkConfig,
    store: Arc<DynamoStore>,
    queue: Arc<SqsQueue>,
    queue_url: String,
    sqs: aws_sdk_sqs::Client,
    dynamo: aws_sdk_dynamodb::Client,
    clock: ManualClock,
    policy: Policy,
    /// Creates answer `succeeded` unless a fault is scripted (or the adapter switches it).
    gateway: Arc<FakeGateway>,
}

impl World {
    async fn new() -> World {
        let config = sdk_config().await;
        let sqs = aws_sdk_sqs::Client::new(&config);
        let queue_url = fresh_fifo_queue(&sqs).await;
        World {
            store: Arc::new(fresh_store().await),
            queue: Arc::new(SqsQueue::new(sqs.clone(), &queue_url)),
            queue_url,
            dynamo: aws_sdk_dynamodb::Client::new(&config),
            sqs,
            config,
            clock: ManualClock::new(Timestamp::from_millis(T0)),
            policy: Policy::default(),
            gateway: Arc::new(FakeGateway::new()),
        }
    }

    fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    fn operation(&self, case: &str) -> Operation {
        let i = case_index(case);
        self.clock
            .set(Timestamp::from_millis(T0 + i as i64 * 3 * 3600 * 1000));
        let order_id = OrderId::parse(&format!("ord-fx-{case}")).unwrap();
        let mut op = Adapter::operation(
            order_id,
            params(i),
            self.clock.now(),
            self.policy.pending_grace,
        );
        op.operation_id = operation_id(i);
        op
    }

    /// What checkout does: the record, then (unless `lose_enqueue`) the first message.
    async fn checkout(&self, case: &str, lose_enqueue: bool) -> Operation {
        let op = self.operation(case);
        match self.store.create_if_absent(&op).await.unwrap() {
            Created::New(_) => {}
            Created::Existing(e) => panic!("{case}: record existed: {e:?}"),
        }
        if !lose_enqueue {
            self.queue.send(&QueuedOperation::first(&op)).await.unwrap();
        }
        op
    }

    /// The charge function's execution of `op` (a message delivered 2 s after checkout).
    async fn execute(&self, op: &Operation) -> Operation {
        self.execute_on(op, self.gateway.clone()).await
    }

    /// As [`World::execute`], with `gateway` as Stripe.
    async fn execute_on(&self, op: &Operation, gateway: Arc<FakeGateway>) -> Operation {
        self.advance(Duration::from_secs(2));
        let deps = EngineDeps {
            store: self.store.clone(),
            gateway,
            clock: Arc::new(self.clock.clone()),
            policy: self.policy.clone(),
        };
        execute(&deps, &op.key(), &op.operation_id).await.unwrap();
        self.store.get(&op.key()).await.unwrap().unwrap()
    }

    /// A record Stripe refused as invalid (400, no such customer): in review.
    async fn reviewed(&self, case: &str) -> Operation {
        let op = self.checkout(case, false).await;
        self.gateway.script(FakeFault::Rejected);
        let after = self.execute(&op).await;
        assert!(after.review.is_some());
        after
    }
}

#[tokio::test]
async fn write_release_fixtures() {
    let out = std::path::PathBuf::from(
        std::env::var("FX_OUT").expect("FX_OUT: the fixture directory (set by generate.sh)"),
    );
    std::fs::create_dir_all(&out).unwrap();
    let w = World::new().await;
    let release = Adapter::new();

    // pending: checked out, enqueued, never charged.
    w.checkout("pending", false).await;

    // pending_lost_enqueue: the record was written, the SendMessage never happened.
    w.checkout("pending_lost_enqueue", true).await;

    // unknown_with_intent: Stripe answered the create with a `processing` PaymentIntent.
    let op = w.checkout("unknown_with_intent", false).await;
    let after = release.execute_processing(&w, &op).await;
    assert_eq!(after.status, OperationStatus::Unknown);
    assert!(after.external_id.is_some());

    // unknown_without_intent: Stripe created the PaymentIntent, the response was lost (reset).
    let op = w.checkout("unknown_without_intent", false).await;
    w.gateway.script(FakeFault::LoseResponse);
    let after = w.execute(&op).await;
    assert_eq!(after.status, OperationStatus::Unknown);
    assert!(after.external_id.is_none());

    // leased: claimed by the charge function, the Stripe call in flight (lease held).
    let op = w.checkout("leased", false).await;
    w.advance(Duration::from_secs(2));
    let now = w.clock.now();
    let claim = w
        .store
        .claim(&ClaimRequest {
            key: op.key(),
            operation_id: op.operation_id,
            lease: Lease {
                token: LeaseToken::parse(LEASE_TOKEN).unwrap(),
                expires_at: now.plus(w.policy.lease_ttl),
            },
            now,
        })
        .await
        .unwrap();
    assert!(matches!(claim, Claim::Claimed(_)), "{claim:?}");

    // succeeded: the happy path.
    let op = w.checkout("succeeded", false).await;
    let after = w.execute(&op).await;
    assert_eq!(after.status, OperationStatus::Succeeded);

    // failed: the card was declined.
    let op = w.checkout("failed", false).await;
    w.gateway.script(FakeFault::Decline("card_declined"));
    let after = w.execute(&op).await;
    assert_eq!(after.status, OperationStatus::Failed);

    // in_review: Stripe refused the request as invalid (400, no such customer): review.
    w.reviewed("in_review").await;

    // resolved_by_operator: in review, then `chargectl resolve --failed` 2 h later.
    let reviewed = w.reviewed("resolved_by_operator").await;
    w.advance(Duration::from_secs(2 * 3600));
    let note = "no such customer at Stripe; order cancelled";
    release.resolve_failed(&w, &reviewed, note).await;

    // redriven: in review, then `chargectl redrive` 2 h later.
    let reviewed = w.reviewed("redriven").await;
    w.advance(Duration::from_secs(2 * 3600));
    let note = "customer re-attached at Stripe; try again";
    release.redrive(&w, &reviewed, note).await;

    // ---- read back the raw data ----
    let gateways = [&*w.gateway].into_iter().chain(release.other_gateways());
    write(
        &out,
        "operations.json",
        operations(&w, created_keys(gateways)).await,
    );
    write(&out, "messages.json", drain(&w.sqs, &w.queue_url).await);
    for (name, entries) in release.more_files(&w).await {
        write(&out, name, entries);
    }
    eprintln!("release fixtures written to {}", out.display());
}

/// operation id -> the Idempotency-Key its create calls carried, as the fake Stripes saw them.
fn created_keys<'a>(gateways: impl Iterator<Item = &'a FakeGateway>) -> HashMap<String, String> {
    gateways
        .flat_map(|g| g.charges().into_values())
        // An intent put in by hand (`insert_charge`) records no key.
        .filter(|c| !c.idempotency_key.is_empty())
        .map(|c| (c.operation_id.to_string(), c.idempotency_key))
        .collect()
}

/// The operations table, one entry per case in case order, with the key the release derives for
/// each (checked against the key the executor sent, where it called create).
async fn operations(w: &World, sent_keys: HashMap<String, String>) -> Vec<Value> {
    let mut operations = Vec::new();
    let mut intents = Vec::new();
    for item in &scan(&w.dynamo, w.store.table()).await {
        let op = operation_from_item(item).expect("the release reads back what it wrote");
        // The operation's own derivation, the one every release's create sends (a refund's, from
        // the release that has refunds, in its own namespace).
        let key = op.idempotency_key();
        if let Some(sent) = sent_keys.get(&op.operation_id.to_string()) {
            assert_eq!(
                sent,
                key.as_str(),
                "the key the executor sent is the derived one"
            );
        }
        if let Some(pi) = &op.external_id {
            intents.push(pi.to_string());
        }
        let case = case_of_order(op.order_id.as_str());
        operations.push((
            case_index(&case),
            json!({ "case": case, "idempotency_key": key.as_str(), "item": item_json(item) }),
        ));
    }
    assert_eq!(operations.len(), CASES.len());
    let n = intents.len();
    intents.sort();
    intents.dedup();
    assert_eq!(
        intents.len(),
        n,
        "no two records name the same PaymentIntent"
    );
    operations.sort_by_key(|(i, _)| *i);
    operations.into_iter().map(|(_, v)| v).collect()
}

type Item = HashMap<String, AttributeValue>;

async fn scan(client: &aws_sdk_dynamodb::Client, table: &str) -> Vec<Item> {
    let mut items = Vec::new();
    let mut start: Option<Item> = None;
    loop {
        let out = client
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .expect("Scan on moto");
        items.extend(out.items().iter().cloned());
        match out.last_evaluated_key() {
            Some(k) => start = Some(k.clone()),
            None => return items,
        }
    }
}

/// Every message in the FIFO queue, received with its attributes and deleted (so the next one of
/// the same group becomes visible), in case order, then dedup id.
async fn drain(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> Vec<Value> {
    use aws_sdk_sqs::types::MessageSystemAttributeName as A;
    let mut got: Vec<(usize, String, Value)> = Vec::new();
    let mut empty = 0;
    while empty < 2 {
        let out = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .message_system_attribute_names(A::All)
            .send()
            .await
            .expect("ReceiveMessage on moto");
        if out.messages().is_empty() {
            empty += 1;
            continue;
        }
        empty = 0;
        for m in out.messages() {
            let attrs = m.attributes().cloned().unwrap_or_default();
            let group = attrs.get(&A::MessageGroupId).cloned().expect("group id");
            let dedup = attrs
                .get(&A::MessageDeduplicationId)
                .cloned()
                .expect("dedup id");
            let case = case_of_order(&group);
            got.push((
                case_index(&case),
                dedup.clone(),
                json!({
                    "case": case,
                    "body": m.body().expect("body"),
                    "group_id": group,
                    "dedup_id": dedup,
                }),
            ));
            sqs.delete_message()
                .queue_url(queue_url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
    got.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    got.into_iter().map(|(.., v)| v).collect()
}

/// A raw item as DynamoDB JSON, keys sorted.
fn item_json(item: &Item) -> Value {
    let sorted: BTreeMap<&String, Value> = item.iter().map(|(k, v)| (k, attr_json(v))).collect();
    Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
}

fn attr_json(a: &AttributeValue) -> Value {
    match a {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(b) => json!({ "NULL": b }),
        AttributeValue::Ss(v) => json!({ "SS": v }),
        AttributeValue::Ns(v) => json!({ "NS": v }),
        AttributeValue::L(v) => json!({ "L": v.iter().map(attr_json).collect::<Vec<_>>() }),
        AttributeValue::M(m) => json!({ "M": item_json(m) }),
        other => panic!("attribute type this writer does not render: {other:?}"),
    }
}

fn write(dir: &Path, name: &str, entries: Vec<Value>) {
    let text = serde_json::to_string_pretty(&Value::Array(entries)).unwrap() + "\n";
    std::fs::write(dir.join(name), text).unwrap();
}
