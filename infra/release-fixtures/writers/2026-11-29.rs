//! Release fixture writer for release 2026-11-29 (commit a3dbc62).
//!
//! Not a test of this repository: `infra/release-fixtures/generate.sh` copies this file into
//! `tests/tests/release_fixture_writer.rs` of a worktree checked out at the release's commit, where
//! Cargo discovers it as an integration test of the `integration-tests` crate, and runs it under that
//! worktree's own `infra/local/with-stack.sh` (moto). It compiles against THAT commit's API only.
//!
//! What it does: drives one operation per case into its state with the release's own code
//! (`DynamoStore::create_table`, `create_if_absent`, `claim`, `resolve`, `reschedule`, `SqsQueue`
//! sends, and the release's executor `execute_charge` over its in-memory Stripe model `FakeGateway`,
//! so that every attribute an outcome writes is the release's own), then reads back the RAW data:
//! a DynamoDB `Scan` of the table and every message received from the FIFO queue. It writes
//! `operations.json` and `messages.json` into `$FX_OUT`.
//!
//! This release has no webhook inbox and no outcome events (no outbox): no `inbox.json`, no
//! `outcome_events.json`. Its `Reschedule` still carries `bump_redrives`, and an operator's resolve
//! is a `Resolution { by, note, at }` (flat `resolved_*` attributes), not a history list.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use charge_once::adapters::dynamodb::item::operation_from_item;
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::sqs::SqsQueue;
use charge_once::executor::{execute_charge, ChargeDeps, ChargePolicy};
use charge_once::memory::{FakeFault, FakeGateway};
use charge_once::operation::Resolution;
use charge_once::ports::{
    ChargeQueue, Claim, ClaimRequest, CreatePaymentIntent, Created, ManualResolution,
    OperationStore, QueuedCharge, Recorded, Reschedule,
};
use charge_once::{
    Amount, ChargeParams, Clock, Currency, CustomerId, Lease, LeaseToken, ManualClock, Operation,
    OperationId, OperationStatus, OrderId, PaymentIntentStatus, PaymentMethodId, Timestamp,
};
use serde_json::{json, Value};
use testkit::aws::{fresh_fifo_queue, fresh_store, sdk_config};

const RELEASE: &str = "2026-11-29";
/// 2026-11-29T12:00:00Z. Every case starts 3 h after the previous one.
const T0: i64 = 1_795_953_600_000;
/// The lease token of the `leased` case (fixed, so the fixture is deterministic).
const LEASE_TOKEN: &str = "f1f1f1f1-1ea5-4e00-8000-000000000001";
/// chargectl's REDRIVE_DUE_IN at this commit.
const REDRIVE_DUE_IN: Duration = Duration::from_secs(5 * 60);

/// (case, operation id). The same ids in every release's writer, so keys compare across releases.
const CASES: &[(&str, &str)] = &[
    ("pending", "f1f1f1f1-0000-4000-8000-000000000001"),
    ("pending_lost_enqueue", "f1f1f1f1-0000-4000-8000-000000000002"),
    ("unknown_with_intent", "f1f1f1f1-0000-4000-8000-000000000003"),
    ("unknown_without_intent", "f1f1f1f1-0000-4000-8000-000000000004"),
    ("leased", "f1f1f1f1-0000-4000-8000-000000000005"),
    ("succeeded", "f1f1f1f1-0000-4000-8000-000000000006"),
    ("failed", "f1f1f1f1-0000-4000-8000-000000000007"),
    ("in_review", "f1f1f1f1-0000-4000-8000-000000000008"),
    ("resolved_by_operator", "f1f1f1f1-0000-4000-8000-000000000009"),
    ("redriven", "f1f1f1f1-0000-4000-8000-000000000010"),
];

fn case_index(case: &str) -> usize {
    CASES.iter().position(|(c, _)| *c == case).expect("known case")
}

fn case_of_order(order_id: &str) -> String {
    order_id
        .strip_prefix("ord-fx-")
        .expect("a fixture order id")
        .to_owned()
}

/// Alternating 4200 eur / 1999 usd, amounts Stripe accepts.
fn params(i: usize) -> ChargeParams {
    let (amount, currency) = if i % 2 == 0 { (4200, "eur") } else { (1999, "usd") };
    ChargeParams {
        amount: Amount::new(amount).unwrap(),
        currency: Currency::parse(currency).unwrap(),
        customer_id: CustomerId::parse(&format!("cus_Fx{:02}", i + 1)).unwrap(),
        payment_method: PaymentMethodId::parse("pm_card_visa").unwrap(),
    }
}

struct World {
    store: Arc<DynamoStore>,
    queue: Arc<SqsQueue>,
    sqs: aws_sdk_sqs::Client,
    dynamo: aws_sdk_dynamodb::Client,
    clock: ManualClock,
    policy: ChargePolicy,
    /// Creates answer `succeeded` unless a fault is scripted.
    gateway: Arc<FakeGateway>,
    /// Creates answer `processing` (this release's FakeGateway cannot switch its first status, as
    /// later ones can with `set_first_status`).
    processing: Arc<FakeGateway>,
}

impl World {
    fn deps(&self, gateway: Arc<FakeGateway>) -> ChargeDeps {
        ChargeDeps {
            store: self.store.clone(),
            gateway,
            clock: Arc::new(self.clock.clone()),
            policy: self.policy.clone(),
        }
    }

    fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    fn operation(&self, case: &str) -> Operation {
        let i = case_index(case);
        self.clock.set(Timestamp::from_millis(
            T0 + i as i64 * 3 * 3600 * 1000,
        ));
        let mut op = Operation::new(
            OrderId::parse(&format!("ord-fx-{case}")).unwrap(),
            params(i),
            self.clock.now(),
            self.policy.pending_grace,
        );
        op.operation_id = OperationId::parse(CASES[i].1).unwrap();
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
            self.queue.send(&QueuedCharge::first(&op)).await.unwrap();
        }
        op
    }

    /// The charge function's execution of `op` (a message delivered 2 s after checkout).
    async fn execute(&self, op: &Operation, gateway: Arc<FakeGateway>) -> Operation {
        self.advance(Duration::from_secs(2));
        execute_charge(&self.deps(gateway), &op.key(), &op.operation_id)
            .await
            .unwrap();
        self.store.get(&op.key()).await.unwrap().unwrap()
    }
}

#[tokio::test]
async fn write_release_fixtures() {
    let out = std::path::PathBuf::from(
        std::env::var("FX_OUT").expect("FX_OUT: the fixture directory (set by generate.sh)"),
    );
    std::fs::create_dir_all(&out).unwrap();
    let config = sdk_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let queue_url = fresh_fifo_queue(&sqs).await;
    let w = World {
        store: Arc::new(fresh_store().await),
        queue: Arc::new(SqsQueue::new(sqs.clone(), &queue_url)),
        dynamo: aws_sdk_dynamodb::Client::new(&config),
        sqs,
        clock: ManualClock::new(Timestamp::from_millis(T0)),
        policy: ChargePolicy::default(),
        gateway: Arc::new(FakeGateway::new()),
        processing: Arc::new(FakeGateway::with_first_status(PaymentIntentStatus::Processing)),
    };

    // pending: checked out, enqueued, never charged.
    w.checkout("pending", false).await;

    // pending_lost_enqueue: the record was written, the SendMessage never happened.
    w.checkout("pending_lost_enqueue", true).await;

    // unknown_with_intent: Stripe answered the create with a `processing` PaymentIntent.
    let op = w.checkout("unknown_with_intent", false).await;
    let after = w.execute(&op, w.processing.clone()).await;
    assert_eq!(after.status, OperationStatus::Unknown);
    assert!(after.external_id.is_some());
    // The same intent, mirrored into the main fake Stripe: the main gateway's ids then follow the
    // same sequence as in the later releases' writers (one gateway there), so the fixtures of all
    // releases name the same `pi_fake<n>` for the same case.
    w.gateway
        .insert_charge(op.operation_id, PaymentIntentStatus::Processing);

    // unknown_without_intent: Stripe created the PaymentIntent, the response was lost (reset).
    let op = w.checkout("unknown_without_intent", false).await;
    w.gateway.script(FakeFault::LoseResponse);
    let after = w.execute(&op, w.gateway.clone()).await;
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
    let after = w.execute(&op, w.gateway.clone()).await;
    assert_eq!(after.status, OperationStatus::Succeeded);

    // failed: the card was declined.
    let op = w.checkout("failed", false).await;
    w.gateway.script(FakeFault::Decline("card_declined"));
    let after = w.execute(&op, w.gateway.clone()).await;
    assert_eq!(after.status, OperationStatus::Failed);

    // in_review: Stripe refused the request as invalid (400, no such customer): review.
    let op = w.checkout("in_review", false).await;
    w.gateway.script(FakeFault::Rejected);
    let after = w.execute(&op, w.gateway.clone()).await;
    assert!(after.review.is_some());

    // resolved_by_operator: in review, then `chargectl resolve --failed` 2 h later (what its
    // command writes, through the store's resolve).
    let op = w.checkout("resolved_by_operator", false).await;
    w.gateway.script(FakeFault::Rejected);
    let reviewed = w.execute(&op, w.gateway.clone()).await;
    assert!(reviewed.review.is_some());
    w.advance(Duration::from_secs(2 * 3600));
    let now = w.clock.now();
    let resolved = w
        .store
        .resolve(&ManualResolution {
            key: reviewed.key(),
            operation_id: reviewed.operation_id,
            status: OperationStatus::Failed,
            external_id: None,
            resolution: Resolution {
                by: "alice".into(),
                note: "no such customer at Stripe; order cancelled".into(),
                at: now,
            },
        })
        .await
        .unwrap();
    assert!(matches!(resolved, Recorded::Written(_)), "{resolved:?}");

    // redriven: in review, then `chargectl redrive` 2 h later: the reschedule (a re-drive
    // counted, the review cleared), then the message with dedup id `<operation_id>:<redrives>`.
    let op = w.checkout("redriven", false).await;
    w.gateway.script(FakeFault::Rejected);
    let reviewed = w.execute(&op, w.gateway.clone()).await;
    assert!(reviewed.review.is_some());
    w.advance(Duration::from_secs(2 * 3600));
    let now = w.clock.now();
    let written = match w
        .store
        .reschedule(&Reschedule {
            key: reviewed.key(),
            operation_id: reviewed.operation_id,
            expected_status: reviewed.status,
            expected_updated_at: reviewed.updated_at,
            next_due_at: now.plus(REDRIVE_DUE_IN),
            bump_redrives: true,
            clear_review: true,
            now,
        })
        .await
        .unwrap()
    {
        Recorded::Written(op) => op,
        other => panic!("redrive refused: {other:?}"),
    };
    w.queue
        .send(&QueuedCharge::redrive(&written, written.redrives))
        .await
        .unwrap();

    // ---- read back the raw data ----
    let gateway_keys = created_keys(&[&w.gateway, &w.processing]);
    let items = scan(&w.dynamo, w.store.table()).await;
    let mut operations = Vec::new();
    let mut intents = Vec::new();
    for item in &items {
        let op = operation_from_item(item).expect("the release reads back what it wrote");
        let key = CreatePaymentIntent::for_operation(&op).idempotency_key;
        if let Some(sent) = gateway_keys.get(&op.operation_id.to_string()) {
            assert_eq!(sent, key.as_str(), "the key the executor sent is the derived one");
        }
        if let Some(pi) = &op.external_id {
            intents.push(pi.clone());
        }
        operations.push((
            case_index(&case_of_order(op.order_id.as_str())),
            json!({
                "case": case_of_order(op.order_id.as_str()),
                "idempotency_key": key.as_str(),
                "item": item_json(item),
            }),
        ));
    }
    assert_eq!(operations.len(), CASES.len());
    let n = intents.len();
    intents.sort();
    intents.dedup();
    assert_eq!(intents.len(), n, "no two records name the same PaymentIntent");
    operations.sort_by_key(|(i, _)| *i);
    write(&out, "operations.json", operations.into_iter().map(|(_, v)| v).collect());

    let messages = drain(&w.sqs, &queue_url).await;
    write(&out, "messages.json", messages);
    eprintln!("release {RELEASE}: fixtures written to {}", out.display());
}

/// operation id -> the Idempotency-Key its create calls carried, as the fake Stripe saw them.
fn created_keys(gateways: &[&FakeGateway]) -> HashMap<String, String> {
    gateways
        .iter()
        .flat_map(|g| g.charges().into_values())
        // `insert_charge` (the mirrored intent) records no key.
        .filter(|c| !c.idempotency_key.is_empty())
        .map(|c| (c.operation_id.to_string(), c.idempotency_key))
        .collect()
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

fn write(dir: &std::path::Path, name: &str, entries: Vec<Value>) {
    let text = serde_json::to_string_pretty(&Value::Array(entries)).unwrap() + "\n";
    std::fs::write(dir.join(name), text).unwrap();
}
