//! What every earlier release stored, read and settled by this one.
//!
//! `tests/fixtures/releases/<release>/` holds what a release wrote, generated from that release's
//! own commit by its own adapters (`infra/release-fixtures/`, which says how the next release adds
//! its own): operation items as DynamoDB returned them, the charge messages it queued, its webhook
//! inbox items and the outcome events it published. For each release, on moto and stripe-sim:
//! - every operation item parses, and today's idempotency key for it is the one that release sent
//!   to Stripe (a retry after an upgrade lands on the same PaymentIntent, never a second one);
//! - the items go into a fresh table as they are; the release's messages go to today's charge
//!   function, then reconciler ticks run until nothing is due. Every automatic record settles
//!   (`succeeded` at Stripe, one PaymentIntent per order), the settled and hand-resolved ones are
//!   untouched, the one in review waits for a person and takes today's operator write;
//! - its inbox items still deduplicate their event ids until they expire, and admit them after;
//! - its outcome events carry every field today's schema requires, and the event id today's relay
//!   gives the same outcome (consumers deduplicate across the upgrade).
//!
//! Each record is placed as if written just now: all of its own times move by one offset (a record
//! is self-consistent; the fixture's spread over a day would otherwise age some past Stripe's 24 h
//! key window, which is the reconciler's other path, tested in reconciler_on_aws.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::AttributeValue;
use charge_core::outbox::{Outcome, OutcomeEvent, SCHEMA_VERSION, SOURCE};
use charge_core::store::{ManualResolution, OperatorGuard};
use charge_core::{
    operation::{AuditEntry, Operation, OperationStatus},
    time::{Clock, Timestamp},
};
use charge_once::adapters::dynamodb::item::{item_from_json, operation_from_item, Attrs};
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::ports::{
    Admitted, CreatePaymentIntent, EventInbox, ManualResolutions, OperationMessage, OperationReads,
    PaymentIntents,
};
use serde_json::Value;
use testkit::stack::Stack;

const START: Timestamp = Timestamp::from_millis(1_800_000_000_000);
const STEP: Duration = Duration::from_secs(300);

fn releases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/releases");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

fn read(dir: &Path, file: &str) -> Option<Vec<Value>> {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).ok()?;
    let value: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Some(
        value
            .as_array()
            .expect("a fixture file is a JSON list")
            .clone(),
    )
}

fn case(entry: &Value) -> String {
    entry["case"]
        .as_str()
        .expect("every entry names its case")
        .to_owned()
}

/// Moves every time of one operation item (`*_at` in ms, history entries' `at`) by `by_ms`.
fn shift_times(item: &mut Attrs, by_ms: i64) {
    let shift = |v: &mut AttributeValue| {
        if let AttributeValue::N(n) = v {
            *n = (n.parse::<i64>().expect("a time is an integer") + by_ms).to_string();
        }
    };
    for (name, value) in item.iter_mut() {
        if name.ends_with("_at") {
            shift(value);
        }
    }
    if let Some(AttributeValue::L(entries)) = item.get_mut("history") {
        for entry in entries {
            if let AttributeValue::M(m) = entry {
                if let Some(at) = m.get_mut("at") {
                    shift(at);
                }
            }
        }
    }
}

fn millis(item: &Attrs, name: &str) -> i64 {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n.parse().unwrap(),
        other => panic!("{name}: {other:?}"),
    }
}

/// The records each release must have written (the first release had no webhook inbox and no
/// outcome events; every case below it could express).
const AUTOMATIC: [&str; 6] = [
    "pending",
    "pending_lost_enqueue",
    "unknown_with_intent",
    "unknown_without_intent",
    "leased",
    "redriven",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_earlier_release_s_records_are_read_and_settled() {
    let releases = releases();
    assert!(
        releases.len() >= 3,
        "fixtures of every release since the first: {releases:?}"
    );
    for dir in &releases {
        let release = dir.file_name().unwrap().to_string_lossy().into_owned();
        let s = Stack::spawn().await;
        assert_eq!(s.clock().now(), START, "fixtures are placed at START");
        operations_settle(&s, &release, dir).await;
        inbox_items_deduplicate(&s, &release, dir).await;
        outcome_events_keep_their_ids(&release, dir);
    }
}

/// The refund cases of the releases that have refunds (`refunds.json`), each with what its
/// record must show: (case, status, a Stripe refund id recorded).
const REFUND_CASES: [(&str, OperationStatus, bool); 9] = [
    ("refund_pending", OperationStatus::Pending, false),
    ("refund_unknown_with_id", OperationStatus::Unknown, true),
    ("refund_unknown_without_id", OperationStatus::Unknown, false),
    ("refund_leased", OperationStatus::Pending, false),
    ("refund_succeeded", OperationStatus::Succeeded, true),
    ("refund_failed", OperationStatus::Failed, true),
    ("refund_failed_later", OperationStatus::Failed, true),
    ("refund_in_review", OperationStatus::Pending, false),
    ("refund_redriven", OperationStatus::Pending, false),
];

/// A release's refunds and the charge they reserve against, read by today's code: every record
/// parses with the key its Stripe creates carried (a refund's in its own namespace), each case is
/// in its state, the charge's `refund_reserved` is what its refunds still hold (a failed one gave
/// its 300 back), and every queued refund message is a version today's charge function reads.
#[test]
fn every_release_s_refunds_are_read_and_held_to_their_charge() {
    let with_refunds: Vec<PathBuf> = releases()
        .into_iter()
        .filter(|dir| dir.join("refunds.json").exists())
        .collect();
    assert!(
        !with_refunds.is_empty(),
        "the release that added refunds has its fixtures"
    );
    for dir in &with_refunds {
        let release = dir.file_name().unwrap().to_string_lossy().into_owned();
        let mut charge: Option<Operation> = None;
        let mut held = 0;
        let mut cases = BTreeMap::new();
        for entry in read(dir, "refunds.json").expect("refunds.json") {
            let case = case(&entry);
            let item = item_from_json(&entry["item"]).unwrap();
            let op = operation_from_item(&item)
                .unwrap_or_else(|e| panic!("{release}/{case}: today's code cannot read it: {e}"));
            assert_eq!(
                Some(op.idempotency_key().to_string().as_str()),
                entry["idempotency_key"].as_str(),
                "{release}/{case}: the idempotency key changed across releases"
            );
            if op.kind.refund_id().is_none() {
                charge = Some(op);
                continue;
            }
            assert!(op.idempotency_key().as_str().starts_with("refund-op:"));
            if op.status != OperationStatus::Failed {
                held += op.params.amount().minor_units();
            }
            cases.insert(case, op);
        }
        let charge = charge.unwrap_or_else(|| panic!("{release}: no charge in refunds.json"));
        assert_eq!(charge.status, OperationStatus::Succeeded, "{release}");
        assert_eq!(
            charge.refund_reserved(),
            held,
            "{release}: the charge holds its refunds'"
        );
        for (case, status, with_id) in REFUND_CASES {
            let op = cases
                .get(case)
                .unwrap_or_else(|| panic!("{release}: no {case} record"));
            assert_eq!(op.status, status, "{release}/{case}");
            assert_eq!(op.stripe_refund_id().is_some(), with_id, "{release}/{case}");
            assert_eq!(
                op.kind.sort_key(),
                format!("refund#{}", op.kind.refund_id().unwrap())
            );
            assert_eq!(op.order_id, charge.order_id, "{release}/{case}");
        }
        assert!(cases["refund_leased"].lease.is_some(), "{release}");
        assert!(cases["refund_in_review"].review.is_some(), "{release}");
        let redriven = &cases["refund_redriven"];
        assert_eq!(
            (redriven.redrives, redriven.review.is_none()),
            (1, true),
            "{release}"
        );
        assert!(cases["refund_failed_later"]
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("after it succeeded")));

        let messages = read(dir, "refund_messages.json").expect("refund_messages.json");
        assert!(!messages.is_empty(), "{release}: no refund messages");
        for m in messages {
            let body = m["body"].as_str().expect("a body");
            let message: OperationMessage = serde_json::from_str(body)
                .unwrap_or_else(|e| panic!("{release}: {body}: today's code cannot read it: {e}"));
            assert!(
                OperationMessage::known_version(u64::from(message.v)),
                "{release}: {body}"
            );
            assert!(
                cases
                    .values()
                    .any(|op| op.key() == message.key() && op.operation_id == message.operation_id),
                "{release}: {body} is none of its refunds"
            );
        }
    }
}

async fn operations_settle(s: &Stack, release: &str, dir: &Path) {
    let entries = read(dir, "operations.json").expect("operations.json");
    let gateway = s.side.gateway();
    let mut ops: BTreeMap<String, Operation> = BTreeMap::new();
    for entry in &entries {
        let case = case(entry);
        let mut item = item_from_json(&entry["item"]).unwrap();
        let stored = operation_from_item(&item)
            .unwrap_or_else(|e| panic!("{release}/{case}: today's code cannot read it: {e}"));
        if let Some(key) = entry["idempotency_key"].as_str() {
            assert_eq!(
                stored.idempotency_key().to_string(),
                key,
                "{release}/{case}: the idempotency key changed across releases"
            );
        }
        let offset = START.as_millis() - millis(&item, "updated_at");
        shift_times(&mut item, offset);
        if case == "unknown_with_intent" {
            // Stripe holds the PaymentIntent the release's attempt created, under its key.
            let pi = gateway
                .create(&CreatePaymentIntent::for_operation(&stored).expect("a charge operation"))
                .await
                .unwrap();
            item.insert("external_id".into(), AttributeValue::S(pi.id.to_string()));
        }
        let op = operation_from_item(&item).unwrap();
        s.dynamo
            .put_item()
            .table_name(s.store.table())
            .set_item(Some(item))
            .send()
            .await
            .unwrap();
        ops.insert(case, op);
    }
    for case in AUTOMATIC
        .iter()
        .chain(&["succeeded", "failed", "in_review"])
    {
        assert!(ops.contains_key(*case), "{release}: no {case} record");
    }
    let intents_before = s.side.sim.ledger().len();

    // The release's own messages, delivered to today's charge function.
    let mut batch = SqsEvent::default();
    for (i, m) in read(dir, "messages.json")
        .expect("messages.json")
        .iter()
        .enumerate()
    {
        let mut record = SqsMessage::default();
        record.message_id = Some(format!("fixture-{i}"));
        record.body = m["body"].as_str().map(str::to_owned);
        for (attr, field) in [
            ("MessageGroupId", "group_id"),
            ("MessageDeduplicationId", "dedup_id"),
        ] {
            if let Some(v) = m[field].as_str() {
                record.attributes.insert(attr.into(), v.into());
            }
        }
        record
            .attributes
            .insert("ApproximateReceiveCount".into(), "1".into());
        record.event_source = Some("aws:sqs".into());
        batch.records.push(record);
    }
    assert!(!batch.records.is_empty(), "{release}: no messages");
    let charge = s.charge_function();
    s.run_charge(&charge, batch).await;
    assert_eq!(
        s.parked().await,
        vec![],
        "{release}: a message of the release was poison to today's charge function"
    );

    // Reconciler ticks until nothing automatic is left (at most two simulated days).
    let unsettled = |op: &Operation| !op.status.is_settled() && op.review.is_none();
    let mut failed_ticks = 0;
    for _ in 0..576 {
        s.side.clock.advance(STEP);
        match s.tick().await {
            Ok(report) => assert_eq!(report.unreadable, 0, "{release}: {report:?}"),
            Err(_) => failed_ticks += 1,
        }
        loop {
            let batch = s.receive().await;
            if batch.records.is_empty() {
                break;
            }
            s.run_charge(&charge, batch).await;
        }
        let mut left = 0;
        for op in ops.values() {
            left += usize::from(unsettled(&s.store.get(&op.key()).await.unwrap().unwrap()));
        }
        if left == 0 {
            break;
        }
    }
    assert_eq!(failed_ticks, 0, "{release}: ticks failed");

    let ledger = s.side.sim.ledger();
    for (case, before) in &ops {
        let now = s.store.get(&before.key()).await.unwrap().unwrap();
        let intents: Vec<_> = ledger
            .iter()
            .filter(|e| e.operation_id.as_deref() == Some(before.operation_id.to_string().as_str()))
            .collect();
        assert_eq!(now.requested_by, before.requested_by, "{release}/{case}");
        match case.as_str() {
            "succeeded" | "failed" | "resolved_by_operator" => {
                // Settled records are never touched again.
                assert_eq!(now, *before, "{release}/{case}");
                assert!(intents.is_empty(), "{release}/{case}: {intents:?}");
            }
            "in_review" => {
                assert_eq!(now, *before, "{release}/{case}: review is a person's");
                let resolved = resolve_failed(&s.store, &now, s.side.clock.now()).await;
                assert_eq!(resolved.status, OperationStatus::Failed, "{release}/{case}");
                assert_eq!(resolved.review, None);
                let last = resolved.history.last().unwrap();
                assert_eq!(
                    last.review.as_deref(),
                    before.review.as_ref().map(|r| r.reason.as_str())
                );
            }
            automatic => {
                assert!(
                    AUTOMATIC.contains(&automatic),
                    "{release}: unknown case {case}"
                );
                assert_eq!(
                    now.status,
                    OperationStatus::Succeeded,
                    "{release}/{case}: {now:?}"
                );
                assert_eq!(intents.len(), 1, "{release}/{case}: one PaymentIntent");
                assert_eq!(now.external_id.as_deref(), Some(intents[0].id.as_str()));
                assert_eq!(
                    intents[0].idempotency_key.as_deref(),
                    Some(before.idempotency_key().to_string().as_str())
                );
            }
        }
    }
    // The only PaymentIntent created before today's code ran is the release's own.
    assert_eq!(intents_before, 1, "{release}");
    assert_eq!(
        ledger.len(),
        AUTOMATIC.len(),
        "{release}: one PaymentIntent per automatic order, none for the others"
    );
}

async fn resolve_failed(store: &DynamoStore, op: &Operation, now: Timestamp) -> Operation {
    let audit = AuditEntry {
        action: "resolve_failed".into(),
        previous_status: op.status,
        new_status: OperationStatus::Failed,
        note: "release fixture: customer asked to cancel".into(),
        at: now,
        caller: "arn:aws:sts::123456789012:assumed-role/oncall/fixture".into(),
        label: None,
        forced: None,
        review: op.review.as_ref().map(|r| r.reason.clone()),
        replaced_external_id: None,
    };
    store
        .resolve(&ManualResolution {
            key: op.key(),
            operation_id: op.operation_id,
            status: OperationStatus::Failed,
            external_id: None,
            expected_updated_at: op.updated_at,
            stripe_refund_id: None,
            release: None,
            guard: OperatorGuard {
                lease_cutoff: now,
                audit,
            },
            authorization: None,
        })
        .await
        .unwrap();
    store.get(&op.key()).await.unwrap().unwrap()
}

async fn inbox_items_deduplicate(s: &Stack, release: &str, dir: &Path) {
    let Some(entries) = read(dir, "inbox.json") else {
        assert_eq!(release, "2026-11-29", "only the first release had no inbox");
        return;
    };
    let inbox = &s.inbox;
    let mut ids = BTreeSet::new();
    for entry in &entries {
        let item = item_from_json(&entry["item"]).unwrap();
        let Some(AttributeValue::S(id)) = item.get("event_id") else {
            panic!("{release}/{}: no event_id", case(entry));
        };
        let id = id.clone();
        let expires_s = millis(&item, "expires_at");
        s.dynamo
            .put_item()
            .table_name(inbox.table_name())
            .set_item(Some(item))
            .send()
            .await
            .unwrap();
        let before_expiry = Timestamp::from_millis((expires_s - 60) * 1000);
        let after_expiry = Timestamp::from_millis((expires_s + 60) * 1000);
        let far = after_expiry.plus(Duration::from_secs(86_400));
        assert_eq!(
            inbox.admit(&id, before_expiry, far).await.unwrap(),
            Admitted::Duplicate,
            "{release}/{}: redelivered before expiry",
            case(entry)
        );
        assert_eq!(
            inbox.admit(&id, after_expiry, far).await.unwrap(),
            Admitted::New,
            "{release}/{}: delivered after expiry",
            case(entry)
        );
        ids.insert(id);
    }
    assert!(!ids.is_empty());
}

fn outcome_events_keep_their_ids(release: &str, dir: &Path) {
    let Some(events) = read(dir, "outcome_events.json") else {
        assert_eq!(
            release, "2026-11-29",
            "only the first release had no outcome events"
        );
        return;
    };
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/outcome-event.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let required: Vec<&str> = schema["properties"]["detail"]["required"]
        .as_array()
        .expect("the schema lists its required fields")
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let ops: Vec<Operation> = read(dir, "operations.json")
        .unwrap()
        .iter()
        .map(|e| operation_from_item(&item_from_json(&e["item"]).unwrap()).unwrap())
        .collect();
    assert!(!events.is_empty());
    for event in &events {
        let case = case(event);
        assert_eq!(event["source"], SOURCE, "{release}/{case}");
        let detail = &event["detail"];
        for field in &required {
            assert!(detail.get(*field).is_some(), "{release}/{case}: no {field}");
        }
        assert_eq!(detail["v"], SCHEMA_VERSION, "{release}/{case}");
        let outcome = [Outcome::Succeeded, Outcome::Failed, Outcome::NeedsReview]
            .into_iter()
            .find(|o| event["detail_type"] == o.detail_type())
            .unwrap_or_else(|| panic!("{release}/{case}: detail-type {}", event["detail_type"]));
        assert_eq!(detail["status"], outcome.status(), "{release}/{case}");
        let op = ops
            .iter()
            .find(|op| detail["operation_id"] == op.operation_id.to_string())
            .unwrap_or_else(|| panic!("{release}/{case}: no record of its operation"));
        assert_eq!(
            detail["event_id"],
            OutcomeEvent::new(outcome, op.clone()).event_id,
            "{release}/{case}: today's relay gives this outcome another event id"
        );
    }
}
