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
//!   gives the same outcome (consumers deduplicate across the upgrade);
//! - its charges read as their order's first (and only) attempt, its refunds as acting on it;
//! - from the release with charge attempts on (`attempts.json`): a retried order's head leads to
//!   its latest attempt (`charge_of`, `attempts_of`), a refund of attempt 2 holds its
//!   reservation there, the version 5 messages name their attempt, and a pending attempt settles
//!   through today's charge function, today's door and store refusing a further attempt while it
//!   is unsettled or paid and starting one after it failed;
//! - from the same release (`captures.json`, `cancels.json`, `disputes.json`): a captured, a
//!   canceled and a disputed order read with the charge naming its taker or dispute, and today's
//!   door rules act on them as on today's records.
//!
//! Each record is placed as if written just now: all of its own times move by one offset (a record
//! is self-consistent; the fixture's spread over a day would otherwise age some past Stripe's 24 h
//! key window, which is the reconciler's other path, tested in reconciler_on_aws.rs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::AttributeValue;
use charge_core::attempt::{self, AttemptLimit, AttemptRefusal, Door};
use charge_core::outbox::{Outcome, OutcomeEvent, SCHEMA_VERSION, SOURCE};
use charge_core::refund::{self as refunds, request::RefundRequest, RefundRefusal};
use charge_core::store::{CreatedAttempt, ManualResolution, NewAttempt, OperatorGuard};
use charge_core::take::request::{CancelRequest, CaptureRequest};
use charge_core::take::{self, TakeRefusal, TakeRequest};
use charge_core::{
    domain::{OperationId, OperationKind, OrderId, PaymentMethodId, Principal},
    operation::{AuditEntry, Operation, OperationKey, OperationStatus},
    time::{Clock, Timestamp},
};
use charge_once::adapters::dynamodb::item::{item_from_json, operation_from_item, Attrs};
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::ports::{
    Admitted, CreatePaymentIntent, EventInbox, ManualResolutions, OperationCreates,
    OperationMessage, OperationReads, PaymentIntents,
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

/// A fixture message (`messages.json`'s shape) as Lambda's SQS event source delivers it the
/// first time: its body, group and deduplication id, receive count 1.
fn delivered(i: usize, m: &Value) -> SqsMessage {
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
    record
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
        batch.records.push(delivered(i, m));
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

/// Every release's charges and refunds as today's code reads them: a charge is its order's
/// first attempt (sort key `charge`, no `latest_attempt`, so `latest_attempt()` is 1), a refund
/// acts on that first attempt (no `charge_attempt`: its charge key is the order's head). For
/// the releases before attempts that is all there was; from 2026-12-07 on, the same holds for
/// every order it charged once.
#[test]
fn every_release_s_charges_read_as_their_order_s_first_attempt() {
    for dir in &releases() {
        let release = dir.file_name().unwrap().to_string_lossy().into_owned();
        let mut seen = 0;
        for file in [
            "operations.json",
            "refunds.json",
            "captures.json",
            "cancels.json",
            "disputes.json",
        ] {
            for entry in read(dir, file).unwrap_or_default() {
                let case = case(&entry);
                let op = operation_from_item(&item_from_json(&entry["item"]).unwrap())
                    .unwrap_or_else(|e| panic!("{release}/{case}: {e}"));
                let head = OperationKey::charge(op.order_id.clone());
                if op.kind.is_charge() {
                    assert_eq!(op.kind, OperationKind::FIRST_CHARGE, "{release}/{case}");
                    assert_eq!(op.kind.attempt_no(), Some(1), "{release}/{case}");
                    assert_eq!(op.latest_attempt(), 1, "{release}/{case}");
                    assert_eq!(op.key(), head, "{release}/{case}");
                } else {
                    assert_eq!(op.params.charge_attempt(), Some(1), "{release}/{case}");
                    assert_eq!(op.charge_key(), head, "{release}/{case}");
                }
                seen += 1;
            }
        }
        assert!(seen >= 10, "{release}: {seen} records");
    }
}

/// The orders of `attempts.json`, with what each holds as written: (case, its attempts'
/// statuses first to latest).
const ATTEMPT_CASES: [(&str, &[OperationStatus]); 3] = [
    (
        "retried",
        &[OperationStatus::Failed, OperationStatus::Succeeded],
    ),
    (
        "retry-pending",
        &[OperationStatus::Failed, OperationStatus::Pending],
    ),
    (
        "retry-third",
        &[
            OperationStatus::Failed,
            OperationStatus::Failed,
            OperationStatus::Pending,
        ],
    ),
];

/// A release's retried orders, read and acted on by today's code on moto and stripe-sim (see
/// the module doc). The records go into a fresh table as they are, all moved by one offset (the
/// latest written now), so each order's records stay consistent with one another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_release_s_charge_attempts_are_read_and_acted_on() {
    let with_attempts: Vec<PathBuf> = releases()
        .into_iter()
        .filter(|dir| dir.join("attempts.json").exists())
        .collect();
    assert!(
        !with_attempts.is_empty(),
        "the release that added charge attempts has its fixtures"
    );
    for dir in &with_attempts {
        let release = dir.file_name().unwrap().to_string_lossy().into_owned();
        let s = Stack::spawn().await;
        attempts_are_acted_on(&s, &release, dir).await;
    }
}

fn order(case: &str) -> OrderId {
    OrderId::parse(&format!("ord-fx-{case}")).unwrap()
}

/// The attempt the door starts for `order_id`'s next request with `card` (the order's amount,
/// currency, customer and caller as its first attempt's), or why it refuses.
async fn door(s: &Stack, order_id: &OrderId, card: &str) -> Result<Door, AttemptRefusal> {
    let attempts = s.store.attempts_of(order_id).await.unwrap();
    let head = &attempts[0];
    let caller: Principal = head.requested_by.clone().expect("the order's caller");
    let params = charge_core::domain::ChargeParams {
        payment_method: PaymentMethodId::parse(card).unwrap(),
        ..head.params.charge().unwrap().clone()
    };
    let request = Operation::new(
        order_id.clone(),
        params,
        caller.clone(),
        s.side.clock.now(),
        Duration::from_secs(300),
    );
    attempt::decide(&attempts, &request, &caller, AttemptLimit::DEFAULT)
}

/// Attempt `n + 1` after `latest` as a caller past the door would ask the store for it: the
/// store's own guard must refuse it unless `latest` failed.
fn next_after(latest: &Operation) -> NewAttempt {
    let n = latest.kind.attempt_no().unwrap();
    let mut op = latest.clone();
    op.kind = OperationKind::charge_attempt(n + 1).unwrap();
    op.operation_id = OperationId::new_random();
    op.status = OperationStatus::Pending;
    op.external_id = None;
    op.last_error = None;
    op.first_attempted_at = None;
    op.attempts = 0;
    op.settled_at = None;
    op.next_due_at = Some(op.created_at);
    NewAttempt {
        op,
        after_operation_id: latest.operation_id,
    }
}

async fn attempts_are_acted_on(s: &Stack, release: &str, dir: &Path) {
    let entries = read(dir, "attempts.json").expect("attempts.json");
    let mut items = Vec::new();
    for entry in &entries {
        let case = case(entry);
        let item = item_from_json(&entry["item"]).unwrap();
        let op = operation_from_item(&item)
            .unwrap_or_else(|e| panic!("{release}/{case}: today's code cannot read it: {e}"));
        assert_eq!(
            Some(op.idempotency_key().to_string().as_str()),
            entry["idempotency_key"].as_str(),
            "{release}/{case}: the idempotency key changed across releases"
        );
        items.push((case, item, op));
    }
    let latest_written = items
        .iter()
        .map(|(_, item, _)| millis(item, "updated_at"))
        .max()
        .unwrap();
    let offset = START.as_millis() - latest_written;
    for (_, item, _) in &mut items {
        shift_times(item, offset);
        s.dynamo
            .put_item()
            .table_name(s.store.table())
            .set_item(Some(item.clone()))
            .send()
            .await
            .unwrap();
    }

    // Each order's attempts, first to latest, as the head names them.
    for (case, statuses) in ATTEMPT_CASES {
        let order_id = order(case);
        let attempts = s.store.attempts_of(&order_id).await.unwrap();
        let numbers: Vec<u32> = attempts
            .iter()
            .map(|a| a.kind.attempt_no().unwrap())
            .collect();
        let expected: Vec<u32> = (1..=statuses.len() as u32).collect();
        assert_eq!(numbers, expected, "{release}/{case}");
        let got: Vec<OperationStatus> = attempts.iter().map(|a| a.status).collect();
        assert_eq!(got, statuses, "{release}/{case}");
        let n = statuses.len() as u32;
        assert_eq!(
            attempts[0].latest_attempt(),
            n,
            "{release}/{case}: the head"
        );
        assert_eq!(
            attempts[0].key(),
            OperationKey::charge(order_id.clone()),
            "{release}/{case}"
        );
        let latest = s.store.charge_of(&order_id).await.unwrap().unwrap();
        assert_eq!(
            latest.key(),
            OperationKey::charge_attempt(order_id.clone(), n).unwrap(),
            "{release}/{case}: the order's charge is its latest attempt"
        );
        assert_eq!(latest, attempts[attempts.len() - 1], "{release}/{case}");
        // One operation id, so one idempotency key and one PaymentIntent, per attempt.
        let ids: BTreeSet<_> = attempts.iter().map(|a| a.operation_id).collect();
        assert_eq!(ids.len(), attempts.len(), "{release}/{case}");
        for failed in attempts
            .iter()
            .filter(|a| a.status == OperationStatus::Failed)
        {
            assert!(
                failed
                    .last_error
                    .as_deref()
                    .is_some_and(|e| e.contains("canceled")),
                "{release}/{case}: a declined attempt's intent is canceled: {failed:?}"
            );
        }
    }

    // retried: the refund acts on attempt 2, the paid one, and holds its reservation there.
    let retried = order("retried");
    let paid = s.store.charge_of(&retried).await.unwrap().unwrap();
    let head = s
        .store
        .get(&OperationKey::charge(retried.clone()))
        .await
        .unwrap()
        .unwrap();
    let refunds = s.store.refunds_of(&retried).await.unwrap();
    assert_eq!(refunds.len(), 1, "{release}");
    let refund = &refunds[0];
    assert_eq!(refund.params.charge_attempt(), Some(2), "{release}");
    assert_eq!(refund.charge_key(), paid.key(), "{release}");
    assert_eq!(
        refund.params.payment_intent().cloned(),
        paid.external_id.clone(),
        "{release}: the refund is of the paid attempt's PaymentIntent"
    );
    assert_eq!(
        paid.refund_reserved(),
        refund.params.amount().minor_units(),
        "{release}"
    );
    assert_eq!(
        head.refund_reserved(),
        0,
        "{release}: the declined head holds nothing"
    );
    assert_eq!(
        attempt::paid_attempt(&s.store.attempts_of(&retried).await.unwrap()),
        Some(2)
    );
    assert!(
        matches!(
            door(s, &retried, "pm_card_visa").await,
            Err(AttemptRefusal::Paid { attempt: 2, .. })
        ),
        "{release}: a paid order is not charged again"
    );

    // The release's messages: each a version today reads, naming a record of the fixture (a
    // later attempt's, version 5, by its number).
    let messages = read(dir, "attempt_messages.json").expect("attempt_messages.json");
    let mut batch = SqsEvent::default();
    for (i, m) in messages.iter().enumerate() {
        let body = m["body"].as_str().expect("a body");
        let message: OperationMessage = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("{release}: {body}: today's code cannot read it: {e}"));
        assert!(
            OperationMessage::known_version(u64::from(message.v)),
            "{release}: {body}"
        );
        let (_, _, op) = items
            .iter()
            .find(|(_, _, op)| op.key() == message.key() && op.operation_id == message.operation_id)
            .unwrap_or_else(|| panic!("{release}: {body} is none of its records"));
        match op.kind {
            OperationKind::Charge(n) if n > 1 => {
                assert_eq!(message.v, OperationMessage::CHARGE_AGAIN_VERSION, "{body}");
                let v: Value = serde_json::from_str(body).unwrap();
                assert_eq!(v["attempt"], n, "{release}: {body}");
            }
            OperationKind::Charge(_) => assert_eq!(message.v, OperationMessage::VERSION, "{body}"),
            _ => assert_eq!(message.v, OperationMessage::REFUND_VERSION, "{body}"),
        }
        if !op.kind.is_charge() {
            // The refund's PaymentIntent is the release's fake Stripe's, not stripe-sim's.
            continue;
        }
        batch.records.push(delivered(i, m));
    }

    // While attempt 2 (3) is pending, neither today's door nor its store starts another.
    for case in ["retry-pending", "retry-third"] {
        let order_id = order(case);
        let latest = s.store.charge_of(&order_id).await.unwrap().unwrap();
        let n = latest.kind.attempt_no().unwrap();
        assert!(
            matches!(
                door(s, &order_id, "pm_card_visa").await,
                Err(AttemptRefusal::InFlight { attempt, status: OperationStatus::Pending }) if attempt == n
            ),
            "{release}/{case}: another attempt while {n} is pending"
        );
        assert_eq!(
            s.store.create_attempt(&next_after(&latest)).await.unwrap(),
            CreatedAttempt::Refused,
            "{release}/{case}: the store starts no attempt after a pending one"
        );
        assert_eq!(
            s.store.attempts_of(&order_id).await.unwrap().len(),
            n as usize
        );
    }

    // The release's messages to today's charge function over stripe-sim: the settled attempts
    // are left as they are; the pending ones are charged with their cards (retry-pending's 2
    // succeeds, retry-third's 3 is declined).
    let before: BTreeMap<String, Operation> = items
        .iter()
        .filter(|(_, _, op)| op.status.is_settled())
        .map(|(_, _, op)| (op.operation_id.to_string(), op.clone()))
        .collect();
    let charge = s.charge_function();
    s.run_charge(&charge, batch).await;
    assert_eq!(s.parked().await, vec![], "{release}: a message was poison");
    for (id, op) in &before {
        let now = s.store.get(&op.key()).await.unwrap().unwrap();
        assert_eq!(
            now.status, op.status,
            "{release}/{id}: a settled attempt moved"
        );
        assert_eq!(now.external_id, op.external_id, "{release}/{id}");
    }
    let ledger = s.side.sim.ledger();
    assert_eq!(
        ledger.len(),
        2,
        "{release}: one PaymentIntent per pending attempt: {ledger:?}"
    );

    let pending = s
        .store
        .charge_of(&order("retry-pending"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        pending.status,
        OperationStatus::Succeeded,
        "{release}: {pending:?}"
    );
    let third = s
        .store
        .charge_of(&order("retry-third"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        third.status,
        OperationStatus::Failed,
        "{release}: {third:?}"
    );
    for settled in [&pending, &third] {
        let intent = ledger
            .iter()
            .find(|e| e.operation_id.as_deref() == Some(settled.operation_id.to_string().as_str()))
            .unwrap_or_else(|| panic!("{release}: no PaymentIntent of {settled:?}"));
        assert_eq!(
            intent.idempotency_key.as_deref(),
            Some(settled.idempotency_key().to_string().as_str())
        );
        assert_eq!(settled.external_id.as_deref(), Some(intent.id.as_str()));
    }

    // Settled: the paid order is refused a further attempt by the door and the store; the
    // declined one is given attempt 4, its twin, by both.
    let paid_order = order("retry-pending");
    assert!(
        matches!(
            door(s, &paid_order, "pm_card_visa").await,
            Err(AttemptRefusal::Paid { attempt: 2, .. })
        ),
        "{release}: retry-pending is paid by attempt 2"
    );
    assert_eq!(
        s.store.create_attempt(&next_after(&pending)).await.unwrap(),
        CreatedAttempt::Refused,
        "{release}: the store starts no attempt after a paid one"
    );
    let declined = order("retry-third");
    let Ok(Door::Start(new)) = door(s, &declined, "pm_card_visa").await else {
        panic!("{release}: retry-third's attempt 3 failed: attempt 4 starts");
    };
    assert_eq!(new.number(), 4);
    assert_eq!(
        s.store.create_attempt(&new).await.unwrap(),
        CreatedAttempt::New(new.op.clone()),
        "{release}"
    );
    let attempts = s.store.attempts_of(&declined).await.unwrap();
    assert_eq!(attempts.len(), 4, "{release}");
    assert_eq!(attempts[0].latest_attempt(), 4, "{release}");
    assert_eq!(
        s.store
            .charge_of(&declined)
            .await
            .unwrap()
            .unwrap()
            .operation_id,
        new.op.operation_id,
        "{release}"
    );
}

/// One order's records from a take or dispute file: (the charge, the other record).
fn charge_and_other(release: &str, dir: &Path, file: &str) -> Option<(Operation, Operation)> {
    let entries = read(dir, file)?;
    let ops: Vec<Operation> = entries
        .iter()
        .map(|e| {
            operation_from_item(&item_from_json(&e["item"]).unwrap())
                .unwrap_or_else(|e| panic!("{release}/{file}: today's code cannot read it: {e}"))
        })
        .collect();
    for (e, op) in entries.iter().zip(&ops) {
        assert_eq!(
            Some(op.idempotency_key().to_string().as_str()),
            e["idempotency_key"].as_str(),
            "{release}/{file}: the idempotency key changed across releases"
        );
    }
    let [charge, other] = <[Operation; 2]>::try_from(ops).expect("a charge and one more");
    assert!(charge.kind.is_charge(), "{release}/{file}: {charge:?}");
    assert_eq!(other.charge_key(), charge.key(), "{release}/{file}");
    Some((charge, other))
}

/// A release's captured, canceled and disputed orders (from 2026-12-07 on), read by today's
/// code: the charge names the capture or cancel that took it (`taken_by`) or the dispute that
/// holds it, and today's door rules act on each as on a record of today: a captured charge is
/// refunded (up to what was captured) and not canceled, a canceled one is neither captured nor
/// refunded, a disputed one (funds withdrawn) is not refunded while its twin without the
/// dispute would be.
#[test]
fn every_release_s_captures_cancels_and_disputes_are_read_and_acted_on() {
    let with_takes: Vec<PathBuf> = releases()
        .into_iter()
        .filter(|dir| dir.join("captures.json").exists())
        .collect();
    assert!(
        !with_takes.is_empty(),
        "the first release with fixtures of captures has them"
    );
    let now = START;
    let refund_all = RefundRequest {
        amount: None,
        reason: None,
    };
    for dir in &with_takes {
        let release = dir.file_name().unwrap().to_string_lossy().into_owned();
        let taker = |op: &Operation| charge_core::charge::state::Taker {
            capture: false,
            operation_id: op.operation_id,
        };

        // captured: the capture took the authorization; the charge is paid, refundable.
        let (charge, capture) = charge_and_other(&release, dir, "captures.json").unwrap();
        assert!(capture.kind.is_capture(), "{release}: {capture:?}");
        assert_eq!(capture.status, OperationStatus::Succeeded, "{release}");
        assert!(charge.is_manual_capture(), "{release}");
        assert_eq!(charge.status, OperationStatus::Succeeded, "{release}");
        let by = charge.taken_by().expect("the charge names its taker");
        assert_eq!((by.capture, by.operation_id), (true, capture.operation_id));
        assert_eq!(charge.amount_captured(), Some(charge.params.amount()));
        let (params, _) = refunds::reserve(&charge, &refund_all, now)
            .unwrap_or_else(|e| panic!("{release}: a captured charge is refunded: {e}"));
        assert_eq!(params.amount, charge.amount_taken(), "{release}");
        let cancel = TakeRequest::Cancel(CancelRequest { reason: None });
        assert_eq!(
            take::take(&charge, &cancel, taker(&charge), now).err(),
            Some(TakeRefusal::Captured),
            "{release}: a captured charge is not canceled"
        );

        // canceled: the cancel took it; the charge ended failed, nothing to capture or refund.
        let (charge, cancel_op) = charge_and_other(&release, dir, "cancels.json").unwrap();
        assert_eq!(cancel_op.kind, OperationKind::Cancel, "{release}");
        assert_eq!(cancel_op.status, OperationStatus::Succeeded, "{release}");
        assert_eq!(charge.status, OperationStatus::Failed, "{release}");
        let by = charge.taken_by().expect("the charge names its taker");
        assert_eq!(
            (by.capture, by.operation_id),
            (false, cancel_op.operation_id)
        );
        let capture = TakeRequest::Capture(CaptureRequest { amount: None });
        assert!(
            take::take(&charge, &capture, taker(&charge), now).is_err(),
            "{release}: a canceled charge is not captured"
        );
        assert!(
            matches!(
                refunds::reserve(&charge, &refund_all, now),
                Err(RefundRefusal::NotSucceeded(OperationStatus::Failed))
            ),
            "{release}"
        );
        assert!(
            matches!(
                attempt::decide(
                    std::slice::from_ref(&charge),
                    &charge,
                    charge.requested_by.as_ref().unwrap(),
                    AttemptLimit::DEFAULT
                ),
                Err(AttemptRefusal::Canceled)
            ),
            "{release}: a canceled order is not charged again"
        );

        // disputed: the dispute's record beside the charge, which names it and holds the
        // withdrawn funds against refunds; a refund is refused while Stripe holds them
        // withdrawn, and accepted for the same charge without the dispute and its hold.
        let (charge, dispute) = charge_and_other(&release, dir, "disputes.json").unwrap();
        let dispute_id = dispute.kind.dispute_id().expect("a dispute record").clone();
        assert_eq!(
            dispute.kind.sort_key(),
            format!("dispute#{dispute_id}"),
            "{release}"
        );
        assert_eq!(dispute.status, OperationStatus::Unknown, "{release}: open");
        assert_eq!(dispute.external_id, charge.external_id, "{release}");
        assert_eq!(charge.status, OperationStatus::Succeeded, "{release}");
        let state = charge.params.charge_state().unwrap();
        assert_eq!(state.refund_blocked_by(), Some(&dispute_id), "{release}");
        assert_eq!(
            charge.refund_reserved(),
            dispute.params.amount().minor_units(),
            "{release}: the withdrawn funds are held against refunds"
        );
        assert!(
            matches!(
                refunds::reserve(&charge, &refund_all, now),
                Err(RefundRefusal::Disputed { .. })
            ),
            "{release}: a disputed charge is not refunded"
        );
        let mut undisputed = charge.clone();
        if let Some(state) = undisputed.params.charge_state_mut() {
            state.disputed_by = None;
            state.refund_reserved = 0;
        }
        assert!(
            refunds::reserve(&undisputed, &refund_all, now).is_ok(),
            "{release}: the twin without the dispute is refunded"
        );

        // Their messages: every one a version today reads, naming one of the records.
        let messages = read(dir, "take_messages.json").expect("take_messages.json");
        assert!(!messages.is_empty(), "{release}");
        for m in messages {
            let body = m["body"].as_str().expect("a body");
            let message: OperationMessage = serde_json::from_str(body)
                .unwrap_or_else(|e| panic!("{release}: {body}: today's code cannot read it: {e}"));
            assert!(
                OperationMessage::known_version(u64::from(message.v)),
                "{release}: {body}"
            );
            let v = if message.kind.is_charge() {
                OperationMessage::VERSION
            } else {
                OperationMessage::TAKE_VERSION
            };
            assert_eq!(message.v, v, "{release}: {body}");
        }
    }
}
