//! Release fixture writer for release 2026-12-01 (commit 2f357ea).
//!
//! Not a test of this repository: `infra/release-fixtures/generate.sh` copies this file into
//! `tests/tests/release_fixture_writer.rs` of a worktree checked out at the release's commit, where
//! Cargo discovers it as an integration test of the `integration-tests` crate, and runs it under that
//! worktree's own `infra/local/with-stack.sh` (moto). It compiles against THAT commit's API only.
//!
//! What it does: drives one operation per case into its state with the release's own code
//! (`DynamoStore::create_table`, `create_if_absent`, `claim`, `resolve`, `reconciler::redrive`,
//! `SqsQueue` sends, the executor `execute_charge` over the release's in-memory Stripe model
//! `FakeGateway`, the `DynamoInbox`), then reads back the RAW data: a DynamoDB `Scan` of the
//! operations table and of the inbox table, every message received from the FIFO queue, and the
//! outcome events as the order service receives them: the operations table's stream (read from
//! moto) handed to the release's notify relay (`notify::handler::relay`: `outbox::outcome_of`, then
//! `OutcomeEvent::detail`), published by its `EventBridgePublisher` to a bus on moto, delivered by a
//! rule to an SQS queue. Writes operations.json, messages.json, inbox.json, outcome_events.json into
//! `$FX_OUT`.
//!
//! Compared with 2026-11-30 (copied from its writer): an operator's `AuditEntry` carries the review
//! reason the record had (`review`), and resolve removes `review_reason`/`review_flagged_at` from
//! the record; checkout refuses amounts Stripe refuses (`ChargeParams::check_chargeable`, checked
//! here for every case's parameters).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use charge_once::adapters::dynamodb::item::operation_from_item;
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::inbox::DynamoInbox;
use charge_once::adapters::sqs::SqsQueue;
use charge_once::executor::{execute_charge, ChargeDeps, ChargePolicy};
use charge_once::memory::{FakeFault, FakeGateway};
use charge_once::ports::{
    ChargeQueue, Claim, ClaimRequest, CreatePaymentIntent, Created, ManualResolution,
    OperationStore, OperatorGuard, QueuedCharge, Recorded, Reschedule,
};
use charge_once::reconciler::{redrive, Redriven};
use charge_once::webhook::{Admitted, WebhookInbox, INBOX_TTL};
use charge_once::{
    Amount, AuditEntry, ChargeParams, Clock, Currency, CustomerId, Lease, LeaseToken, ManualClock,
    Operation, OperationId, OperationStatus, OrderId, PaymentIntentStatus, PaymentMethodId,
    Principal, Timestamp,
};
use notify::eventbridge::EventBridgePublisher;
use notify::handler::{image_json, relay, Notify};
use serde_json::{json, Value};
use testkit::aws::{fresh_fifo_queue, fresh_store, sdk_config, unique};

const RELEASE: &str = "2026-12-01";
/// 2026-11-29T12:00:00Z (the same clock in every release's writer). Every case starts 3 h after the
/// previous one.
const T0: i64 = 1_795_953_600_000;
/// The lease token of the `leased` case (fixed, so the fixture is deterministic).
const LEASE_TOKEN: &str = "f1f1f1f1-1ea5-4e00-8000-000000000001";
/// chargectl's REDRIVE_DUE_IN and LEASE_MARGIN at this commit.
const REDRIVE_DUE_IN: Duration = Duration::from_secs(5 * 60);
const LEASE_MARGIN: Duration = Duration::from_secs(120);
/// Who checked out (the order service's role, as the IAM authorizer names it).
const REQUESTED_BY: &str = "arn:aws:sts::123456789012:assumed-role/order-service/i-0fx";
/// The operator of `chargectl resolve` / `redrive` (STS GetCallerIdentity) and their label.
const OPERATOR_ARN: &str = "arn:aws:sts::123456789012:assumed-role/oncall/alice";
const OPERATOR_LABEL: &str = "alice";

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

/// Inbox cases, in order.
const INBOX_CASES: &[&str] = &[
    "admitted_finished",
    "admitted_unfinished",
    "duplicate_refused",
    "readmitted_after_expiry",
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
    /// Creates answer `succeeded` unless a fault is scripted or the first status is switched.
    gateway: Arc<FakeGateway>,
}

impl World {
    fn deps(&self) -> ChargeDeps {
        ChargeDeps {
            store: self.store.clone(),
            gateway: self.gateway.clone(),
            clock: Arc::new(self.clock.clone()),
            policy: self.policy.clone(),
        }
    }

    fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    fn operation(&self, case: &str) -> Operation {
        let i = case_index(case);
        self.clock
            .set(Timestamp::from_millis(T0 + i as i64 * 3 * 3600 * 1000));
        let mut op = Operation::new(
            OrderId::parse(&format!("ord-fx-{case}")).unwrap(),
            params(i),
            Principal::iam(REQUESTED_BY).unwrap(),
            self.clock.now(),
            self.policy.pending_grace,
        );
        op.operation_id = OperationId::parse(CASES[i].1).unwrap();
        op
    }

    /// What checkout does: the record, then (unless `lose_enqueue`) the first message.
    async fn checkout(&self, case: &str, lose_enqueue: bool) -> Operation {
        let op = self.operation(case);
        ChargeParams::check_chargeable(op.params.amount, &op.params.currency)
            .expect("an amount Stripe accepts");
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
    async fn execute(&self, op: &Operation) -> Operation {
        self.advance(Duration::from_secs(2));
        execute_charge(&self.deps(), &op.key(), &op.operation_id)
            .await
            .unwrap();
        self.store.get(&op.key()).await.unwrap().unwrap()
    }

    /// What chargectl writes into the history for an operator's action at this commit.
    fn audit(&self, action: &str, op: &Operation, new_status: OperationStatus, note: &str) -> AuditEntry {
        AuditEntry {
            action: action.into(),
            previous_status: op.status,
            new_status,
            note: note.into(),
            at: self.clock.now(),
            caller: OPERATOR_ARN.into(),
            label: Some(OPERATOR_LABEL.into()),
            forced: None,
            // chargectl moves the record's review reason into the entry (issue 24.3).
            review: op.review.as_ref().map(|r| r.reason.clone()),
        }
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
        sqs: sqs.clone(),
        clock: ManualClock::new(Timestamp::from_millis(T0)),
        policy: ChargePolicy::default(),
        gateway: Arc::new(FakeGateway::new()),
    };

    // pending: checked out, enqueued, never charged.
    w.checkout("pending", false).await;

    // pending_lost_enqueue: the record was written, the SendMessage never happened.
    w.checkout("pending_lost_enqueue", true).await;

    // unknown_with_intent: Stripe answered the create with a `processing` PaymentIntent.
    let op = w.checkout("unknown_with_intent", false).await;
    w.gateway.set_first_status(PaymentIntentStatus::Processing);
    let after = w.execute(&op).await;
    w.gateway.set_first_status(PaymentIntentStatus::Succeeded);
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
    let op = w.checkout("in_review", false).await;
    w.gateway.script(FakeFault::Rejected);
    let after = w.execute(&op).await;
    assert!(after.review.is_some());

    // resolved_by_operator: in review, then `chargectl resolve --failed` 2 h later (what its
    // command writes, through the store's resolve).
    let op = w.checkout("resolved_by_operator", false).await;
    w.gateway.script(FakeFault::Rejected);
    let reviewed = w.execute(&op).await;
    assert!(reviewed.review.is_some());
    w.advance(Duration::from_secs(2 * 3600));
    let now = w.clock.now();
    let audit = w.audit(
        "resolve_failed",
        &reviewed,
        OperationStatus::Failed,
        "no such customer at Stripe; order cancelled",
    );
    let resolved = w
        .store
        .resolve(&ManualResolution {
            key: reviewed.key(),
            operation_id: reviewed.operation_id,
            status: OperationStatus::Failed,
            external_id: None,
            expected_updated_at: reviewed.updated_at,
            guard: OperatorGuard {
                lease_cutoff: now.minus(LEASE_MARGIN),
                audit,
            },
        })
        .await
        .unwrap();
    assert!(matches!(resolved, Recorded::Written(_)), "{resolved:?}");

    // redriven: in review, then `chargectl redrive` 2 h later: the guarded reschedule (a re-drive
    // counted, the review cleared, the history appended), then the message with dedup id
    // `<operation_id>:<redrives>`, both by the release's `reconciler::redrive`.
    let op = w.checkout("redriven", false).await;
    w.gateway.script(FakeFault::Rejected);
    let reviewed = w.execute(&op).await;
    assert!(reviewed.review.is_some());
    w.advance(Duration::from_secs(2 * 3600));
    let now = w.clock.now();
    let audit = w.audit(
        "redrive",
        &reviewed,
        reviewed.status,
        "customer re-attached at Stripe; try again",
    );
    let request = Reschedule {
        clear_review: true,
        operator: Some(OperatorGuard {
            lease_cutoff: now.minus(LEASE_MARGIN),
            audit,
        }),
        ..Reschedule::redrive(&reviewed, now.plus(REDRIVE_DUE_IN), now)
    };
    match redrive(w.store.as_ref(), w.queue.as_ref(), request).await.unwrap() {
        Redriven::Sent { .. } => {}
        Redriven::Refused(current) => panic!("redrive refused: {current:?}"),
        Redriven::NotSent { error, .. } => panic!("redrive not sent: {error}"),
    }

    // ---- the webhook inbox ----
    let inbox = DynamoInbox::new(w.dynamo.clone(), unique("webhook-inbox"));
    inbox.create_table().await.unwrap();
    let inbox_time = |i: usize| Timestamp::from_millis(T0 + 40 * 3600 * 1000 + i as i64 * 60_000);
    // admitted_finished: admitted, then acted on; the release writes nothing more on the entry.
    let at = inbox_time(0);
    assert_eq!(
        inbox.admit("evt_FxAdmittedFinished", at, at.plus(INBOX_TTL)).await.unwrap(),
        Admitted::New
    );
    // admitted_unfinished: admitted, the invocation ended before acting or forgetting.
    let at = inbox_time(1);
    assert_eq!(
        inbox.admit("evt_FxAdmittedUnfinished", at, at.plus(INBOX_TTL)).await.unwrap(),
        Admitted::New
    );
    // duplicate_refused: admitted, then a redelivery 5 s later is a duplicate (entry unchanged).
    let at = inbox_time(2);
    assert_eq!(
        inbox.admit("evt_FxDuplicate", at, at.plus(INBOX_TTL)).await.unwrap(),
        Admitted::New
    );
    let again = at.plus(Duration::from_secs(5));
    assert_eq!(
        inbox.admit("evt_FxDuplicate", again, again.plus(INBOX_TTL)).await.unwrap(),
        Admitted::Duplicate
    );
    // readmitted_after_expiry: an entry 31 days old whose TTL passed (DynamoDB had not deleted it
    // yet) is admitted again and overwritten.
    let at = inbox_time(3);
    let old = at.minus(Duration::from_secs(31 * 24 * 3600));
    assert_eq!(
        inbox.admit("evt_FxReadmitted", old, old.plus(INBOX_TTL)).await.unwrap(),
        Admitted::New
    );
    assert_eq!(
        inbox.admit("evt_FxReadmitted", at, at.plus(INBOX_TTL)).await.unwrap(),
        Admitted::New
    );
    // (forgotten: admitted, acting failed, forget deleted it: no item, so not in inbox.json.)
    assert_eq!(
        inbox.admit("evt_FxForgotten", at, at.plus(INBOX_TTL)).await.unwrap(),
        Admitted::New
    );
    inbox.forget("evt_FxForgotten").await.unwrap();

    // ---- read back the raw data ----
    let gateway_keys: HashMap<String, String> = w
        .gateway
        .charges()
        .into_values()
        .map(|c| (c.operation_id.to_string(), c.idempotency_key))
        .collect();
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
            intents.push(pi.as_str().to_owned());
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
    assert_eq!(intents.len(), n, "no two records name the same PaymentIntent");
    operations.sort_by_key(|(i, _)| *i);
    write(&out, "operations.json", operations.into_iter().map(|(_, v)| v).collect());

    write(&out, "messages.json", drain(&w.sqs, &queue_url).await);

    let mut entries: Vec<(usize, Value)> = scan(&w.dynamo, inbox.table_name())
        .await
        .iter()
        .map(|item| {
            let id = match item.get("event_id") {
                Some(AttributeValue::S(s)) => s.clone(),
                other => panic!("inbox item without event_id: {other:?}"),
            };
            let i = match id.as_str() {
                "evt_FxAdmittedFinished" => 0,
                "evt_FxAdmittedUnfinished" => 1,
                "evt_FxDuplicate" => 2,
                "evt_FxReadmitted" => 3,
                other => panic!("unexpected inbox entry {other}"),
            };
            (i, json!({ "case": INBOX_CASES[i], "item": item_json(item) }))
        })
        .collect();
    assert_eq!(entries.len(), INBOX_CASES.len());
    entries.sort_by_key(|(i, _)| *i);
    write(&out, "inbox.json", entries.into_iter().map(|(_, v)| v).collect());

    write(
        &out,
        "outcome_events.json",
        outcome_events(&config, &w.dynamo, w.store.table(), &w.clock).await,
    );
    eprintln!("release {RELEASE}: fixtures written to {}", out.display());
}

/// The operations table's stream, through the release's notify relay and EventBridge publisher to
/// a bus on moto, and what a rule on that bus delivered to an SQS queue: (source, detail-type,
/// detail) per event, in case order, then stream order.
async fn outcome_events(
    config: &aws_config::SdkConfig,
    dynamo: &aws_sdk_dynamodb::Client,
    table: &str,
    clock: &ManualClock,
) -> Vec<Value> {
    let sqs = aws_sdk_sqs::Client::new(config);
    let events = aws_sdk_eventbridge::Client::new(config);
    let streams = aws_sdk_dynamodbstreams::Client::new(config);
    let bus = unique("charge-once");
    events.create_event_bus().name(&bus).send().await.expect("CreateEventBus");
    let url = sqs
        .create_queue()
        .queue_name(unique("outcomes"))
        .send()
        .await
        .expect("CreateQueue")
        .queue_url()
        .unwrap()
        .to_owned();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes()
        .unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn]
        .clone();
    events
        .put_rule()
        .name("order-service")
        .event_bus_name(&bus)
        .event_pattern(r#"{"source":["charge-once"]}"#)
        .send()
        .await
        .expect("PutRule");
    events
        .put_targets()
        .rule("order-service")
        .event_bus_name(&bus)
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("queue")
                .arn(arn)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("PutTargets");

    let records = stream_records(dynamo, &streams, table).await;
    assert!(!records.records.is_empty(), "the table has a stream with records");
    let deps = Notify {
        publisher: Arc::new(EventBridgePublisher::new(events.clone(), &bus)),
        clock: Arc::new(clock.clone()),
    };
    let (response, report) = relay(&deps, &records.records).await;
    assert!(response.batch_item_failures.is_empty(), "{report:?}");

    let mut delivered: Vec<(usize, usize, Value)> = Vec::new();
    let mut seq = 0;
    loop {
        let out = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        if out.messages().is_empty() {
            break;
        }
        for m in out.messages() {
            let envelope: Value = serde_json::from_str(m.body().unwrap()).unwrap();
            let detail = envelope["detail"].clone();
            let case = case_of_order(detail["order_id"].as_str().expect("order_id"));
            delivered.push((
                case_index(&case),
                seq,
                json!({
                    "case": case,
                    "source": envelope["source"],
                    "detail_type": envelope["detail-type"],
                    "detail": sorted(&detail),
                }),
            ));
            seq += 1;
            sqs.delete_message()
                .queue_url(&url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
    assert_eq!(delivered.len(), report.published, "every published event was delivered");
    delivered.sort_by_key(|(i, s, _)| (*i, *s));
    delivered.into_iter().map(|(.., v)| v).collect()
}

/// Every record on the table's stream so far, as Lambda's event source delivers them.
async fn stream_records(
    dynamo: &aws_sdk_dynamodb::Client,
    streams: &aws_sdk_dynamodbstreams::Client,
    table: &str,
) -> aws_lambda_events::dynamodb::Event {
    let arn = dynamo
        .describe_table()
        .table_name(table)
        .send()
        .await
        .unwrap()
        .table()
        .unwrap()
        .latest_stream_arn()
        .expect("the table has a stream")
        .to_owned();
    let stream = streams.describe_stream().stream_arn(&arn).send().await.unwrap();
    let mut records = Vec::new();
    for shard in stream.stream_description().unwrap().shards() {
        let mut iterator = streams
            .get_shard_iterator()
            .stream_arn(&arn)
            .shard_id(shard.shard_id().unwrap())
            .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap()
            .shard_iterator()
            .map(str::to_owned);
        while let Some(it) = iterator {
            let out = streams.get_records().shard_iterator(it).send().await.unwrap();
            if out.records().is_empty() {
                break;
            }
            for r in out.records() {
                records.push(lambda_record(r, &arn));
            }
            iterator = out.next_shard_iterator().map(str::to_owned);
        }
    }
    serde_json::from_value(json!({ "Records": records })).expect("a Lambda DynamoDB stream event")
}

/// A DynamoDB Streams record from the SDK as the Lambda event record JSON (as the release's own
/// tests/outcomes_on_aws.rs builds it).
fn lambda_record(r: &aws_sdk_dynamodbstreams::types::Record, arn: &str) -> Value {
    use aws_sdk_dynamodb::types::AttributeValue as D;
    use aws_sdk_dynamodbstreams::types::AttributeValue as S;
    fn convert(a: &S) -> D {
        match a {
            S::S(s) => D::S(s.clone()),
            S::N(n) => D::N(n.clone()),
            S::Bool(b) => D::Bool(*b),
            S::Null(b) => D::Null(*b),
            S::Ss(v) => D::Ss(v.clone()),
            S::Ns(v) => D::Ns(v.clone()),
            S::L(v) => D::L(v.iter().map(convert).collect()),
            S::M(m) => D::M(m.iter().map(|(k, v)| (k.clone(), convert(v))).collect()),
            other => panic!("attribute type not in our items: {other:?}"),
        }
    }
    let image = |m: Option<&HashMap<String, S>>| {
        m.map(|m| image_json(&m.iter().map(|(k, v)| (k.clone(), convert(v))).collect()))
    };
    let d = r.dynamodb().unwrap();
    let mut change = json!({
        "Keys": image(d.keys()),
        "SequenceNumber": d.sequence_number(),
        "SizeBytes": d.size_bytes().unwrap_or(0),
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    });
    if let Some(new) = image(d.new_image()) {
        change["NewImage"] = new;
    }
    if let Some(old) = image(d.old_image()) {
        change["OldImage"] = old;
    }
    json!({
        "eventID": r.event_id(),
        "eventName": r.event_name().map(|n| n.as_str()),
        "eventVersion": r.event_version(),
        "eventSource": "aws:dynamodb",
        "awsRegion": r.aws_region(),
        "dynamodb": change,
        "eventSourceARN": arn,
    })
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

/// A JSON value with every object's keys sorted.
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let s: BTreeMap<&String, Value> = m.iter().map(|(k, v)| (k, sorted(v))).collect();
            Value::Object(s.into_iter().map(|(k, v)| (k.clone(), v)).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

fn write(dir: &std::path::Path, name: &str, entries: Vec<Value>) {
    let text = serde_json::to_string_pretty(&Value::Array(entries)).unwrap() + "\n";
    std::fs::write(dir.join(name), text).unwrap();
}
