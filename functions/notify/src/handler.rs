//! One DynamoDB Stream batch → the outcome events it holds → EventBridge, in stream order.
//!
//! | record | what happens |
//! |---|---|
//! | INSERT / MODIFY whose change is an outcome ([`outcome_of`]) | published |
//! | INSERT / MODIFY that is not an outcome (a claim, a reschedule, …), REMOVE | skipped, counted |
//! | an image that does not parse as an operation | reported failed: retried, bisected, then the record lands in the relay's DLQ (alarmed), never dropped |
//! | a publish that fails (the call or one entry) | reported failed from the first such record on |
//!
//! Lambda retries a stream batch from the lowest sequence number reported, so everything after the
//! first failure is published again on the retry: harmless, consumers deduplicate on `event_id`,
//! which a replay reproduces exactly.

use aws_lambda_events::dynamodb::{Event, EventRecord};
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use aws_sdk_dynamodb::types::AttributeValue;
use charge_once::adapters::dynamodb::item::{operation_from_item, Attrs};
use charge_once::outbox::{outcome_of, OutcomeEvent, OutcomePublisher, MAX_BATCH};
use charge_once::telemetry::emf_line;
use charge_once::{Clock, Operation};
use lambda_runtime::LambdaEvent;
use serde_json::Value;
use std::sync::Arc;
use tracing::{error, info, warn};

/// What the handler needs, built once in `main`.
pub struct Notify {
    pub publisher: Arc<dyn OutcomePublisher>,
    pub clock: Arc<dyn Clock>,
}

/// What one batch did, for the log line and the EMF metrics.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BatchReport {
    pub published: usize,
    pub skipped: usize,
    pub malformed: usize,
    pub failed: usize,
}

/// Handles one stream batch. Never a Lambda error: failures are reported per record, so the
/// records before the first failure are not published again.
pub async fn handle(deps: &Notify, event: LambdaEvent<Event>) -> DynamoDbEventResponse {
    let (response, report) = relay(deps, &event.payload.records).await;
    println!(
        "{}",
        emf_line(
            "notify",
            deps.clock.now(),
            &[
                ("OutcomeEventsPublished", report.published as f64, "Count"),
                ("OutcomeEventsFailed", report.failed as f64, "Count"),
                ("MalformedStreamRecords", report.malformed as f64, "Count"),
            ],
        )
    );
    info!(
        published = report.published,
        skipped = report.skipped,
        malformed = report.malformed,
        failed = report.failed,
        "stream batch relayed"
    );
    response
}

/// The relay itself: decide, publish in order, and name the first record not published.
pub async fn relay(deps: &Notify, records: &[EventRecord]) -> (DynamoDbEventResponse, BatchReport) {
    let mut report = BatchReport::default();
    // (sequence number, event) for each outcome, in stream order, up to the first malformed one.
    let mut pending: Vec<(String, OutcomeEvent)> = Vec::new();
    let mut first_failure: Option<String> = None;
    for record in records {
        let seq = record.change.sequence_number.clone().unwrap_or_default();
        match outcome_in(record) {
            Ok(Some(event)) => pending.push((seq, event)),
            Ok(None) => report.skipped += 1,
            Err(reason) => {
                report.malformed += 1;
                error!(sequence_number = %seq, event_id = %record.event_id, %reason,
                    "stream record is not an operation; reported failed (it will reach the relay DLQ)");
                first_failure = Some(seq);
                break;
            }
        }
    }
    for chunk in pending.chunks(MAX_BATCH) {
        let events: Vec<OutcomeEvent> = chunk.iter().map(|(_, e)| e.clone()).collect();
        let failed_at = match deps.publisher.publish(&events).await {
            Ok(published) => published.failed.first().copied(),
            Err(e) => {
                warn!(error = %charge_once::telemetry::ErrorChain(&e), "PutEvents failed");
                Some(0)
            }
        };
        match failed_at {
            None => {
                for (_, e) in chunk {
                    info!(order_id = %e.operation.order_id, operation_id = %e.operation.operation_id,
                        event_id = %e.event_id, outcome = e.outcome.detail_type(), "outcome published");
                }
                report.published += chunk.len();
            }
            Some(i) => {
                report.published += i;
                report.failed += chunk.len() - i;
                let (seq, e) = &chunk[i];
                warn!(order_id = %e.operation.order_id, operation_id = %e.operation.operation_id,
                    event_id = %e.event_id, "outcome not published; the batch resumes here");
                // The earliest unpublished record wins over a later malformed one.
                first_failure = Some(seq.clone());
                break;
            }
        }
    }
    let mut response = DynamoDbEventResponse::default();
    if let Some(seq) = first_failure {
        let mut failure = DynamoDbBatchItemFailure::default();
        failure.item_identifier = Some(seq);
        response.batch_item_failures.push(failure);
    }
    (response, report)
}

/// The outcome a stream record carries, if any; `Err` when an image is not an operation record.
pub fn outcome_in(record: &EventRecord) -> Result<Option<OutcomeEvent>, String> {
    if !matches!(record.event_name.as_str(), "INSERT" | "MODIFY") {
        return Ok(None);
    }
    let after = image(&record.change.new_image)?.ok_or("no new image")?;
    let before = image(&record.change.old_image)?;
    Ok(outcome_of(before.as_ref(), &after))
}

fn image(item: &impl serde::Serialize) -> Result<Option<Operation>, String> {
    let json = serde_json::to_value(item).map_err(|e| format!("image: {e}"))?;
    let Value::Object(map) = json else {
        return Err("image is not a map".into());
    };
    if map.is_empty() {
        return Ok(None);
    }
    let attrs: Attrs = map
        .iter()
        .map(|(k, v)| attribute(v).map(|a| (k.clone(), a)))
        .collect::<Result<_, _>>()?;
    operation_from_item(&attrs)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// DynamoDB JSON (`{"S": "…"}`, `{"N": "…"}`, …), as the stream carries it, into the SDK's type.
fn attribute(v: &Value) -> Result<AttributeValue, String> {
    let obj = v
        .as_object()
        .filter(|o| o.len() == 1)
        .ok_or("not a typed value")?;
    let (tag, inner) = obj.iter().next().expect("one entry");
    let text = |v: &Value| {
        v.as_str()
            .map(str::to_owned)
            .ok_or(format!("{tag}: not a string"))
    };
    let list = |v: &Value| v.as_array().cloned().ok_or(format!("{tag}: not a list"));
    Ok(match tag.as_str() {
        "S" => AttributeValue::S(text(inner)?),
        "N" => AttributeValue::N(text(inner)?),
        "BOOL" => AttributeValue::Bool(inner.as_bool().ok_or("BOOL: not a bool")?),
        "NULL" => AttributeValue::Null(true),
        "SS" => AttributeValue::Ss(list(inner)?.iter().map(text).collect::<Result<_, _>>()?),
        "NS" => AttributeValue::Ns(list(inner)?.iter().map(text).collect::<Result<_, _>>()?),
        "L" => AttributeValue::L(
            list(inner)?
                .iter()
                .map(attribute)
                .collect::<Result<_, _>>()?,
        ),
        "M" => AttributeValue::M(
            inner
                .as_object()
                .ok_or("M: not a map")?
                .iter()
                .map(|(k, v)| attribute(v).map(|a| (k.clone(), a)))
                .collect::<Result<_, _>>()?,
        ),
        other => return Err(format!("unsupported attribute type {other}")),
    })
}

/// The SDK's attribute as DynamoDB JSON, as the stream carries it (the inverse of `attribute`):
/// for building stream records from items, in tests and in the local stream reader.
pub fn attribute_json(a: &AttributeValue) -> Value {
    use serde_json::json;
    match a {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(_) => json!({ "NULL": true }),
        AttributeValue::Ss(v) => json!({ "SS": v }),
        AttributeValue::Ns(v) => json!({ "NS": v }),
        AttributeValue::L(v) => json!({ "L": v.iter().map(attribute_json).collect::<Vec<_>>() }),
        AttributeValue::M(m) => json!({
            "M": m.iter().map(|(k, v)| (k.clone(), attribute_json(v))).collect::<serde_json::Map<_, _>>()
        }),
        _ => json!({ "NULL": true }),
    }
}

/// An item as a DynamoDB JSON image.
pub fn image_json(item: &Attrs) -> Value {
    Value::Object(
        item.iter()
            .map(|(k, v)| (k.clone(), attribute_json(v)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use charge_once::adapters::dynamodb::item::operation_to_item;
    use charge_once::outbox::{PublishError, Published};
    use charge_once::testing;
    use charge_once::{ManualClock, OperationStatus, Review, Timestamp};
    use serde_json::json;
    use std::sync::Mutex;
    use std::time::Duration;

    /// Publishes into a list; refuses the entries whose event id is in `refuse` (as EventBridge
    /// refuses single entries), or the whole call when `down`.
    #[derive(Default)]
    struct Recorder {
        published: Mutex<Vec<OutcomeEvent>>,
        refuse: Mutex<Vec<String>>,
        down: std::sync::atomic::AtomicBool,
        calls: std::sync::atomic::AtomicUsize,
    }

    #[async_trait]
    impl OutcomePublisher for Recorder {
        async fn publish(&self, events: &[OutcomeEvent]) -> Result<Published, PublishError> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if self.down.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(PublishError::new("bus unavailable"));
            }
            let refuse = self.refuse.lock().unwrap().clone();
            let mut failed = Vec::new();
            for (i, e) in events.iter().enumerate() {
                if refuse.contains(&e.event_id) {
                    failed.push(i);
                } else {
                    self.published.lock().unwrap().push(e.clone());
                }
            }
            Ok(Published { failed })
        }
    }

    fn deps(recorder: &Arc<Recorder>) -> Notify {
        Notify {
            publisher: recorder.clone(),
            clock: Arc::new(ManualClock::new(Timestamp::from_millis(1_800_000_000_000))),
        }
    }

    fn op(order: &str) -> Operation {
        testing::order(order).build()
    }

    fn with(op: &Operation, status: OperationStatus) -> Operation {
        let mut next = op.clone();
        next.status = status;
        next.updated_at = next.updated_at.plus(Duration::from_secs(1));
        if status.is_settled() {
            next.external_id = Some(charge_once::PaymentIntentId::parse("pi_1").unwrap());
            next.next_due_at = None;
        }
        next
    }

    fn record(seq: u32, name: &str, old: Option<&Operation>, new: Option<Value>) -> EventRecord {
        let mut change = json!({
            "Keys": {"pk": {"S": "ORDER#x"}, "sk": {"S": "charge"}},
            "SequenceNumber": format!("{seq:021}"),
            "SizeBytes": 100,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        });
        if let Some(old) = old {
            change["OldImage"] = image_json(&operation_to_item(old));
        }
        if let Some(new) = new {
            change["NewImage"] = new;
        }
        serde_json::from_value(json!({
            "eventID": format!("ev-{seq}"),
            "eventName": name,
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "dynamodb": change,
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/ops/stream/2026-11-30T00:00:00.000",
        }))
        .unwrap()
    }

    fn img(op: &Operation) -> Option<Value> {
        Some(image_json(&operation_to_item(op)))
    }

    /// One order's life on the stream, plus a second order that goes to review.
    fn batch() -> (Vec<EventRecord>, Operation, Operation) {
        let a = op("ord-a");
        let a_unknown = with(&a, OperationStatus::Unknown);
        let a_done = with(&a_unknown, OperationStatus::Succeeded);
        let b = op("ord-b");
        let mut b_review = b.clone();
        b_review.review = Some(Review {
            reason: "stripe_rejected".into(),
            flagged_at: b.created_at,
        });
        let records = vec![
            record(1, "INSERT", None, img(&a)),
            record(2, "MODIFY", Some(&a), img(&a_unknown)),
            record(3, "INSERT", None, img(&b)),
            record(4, "MODIFY", Some(&a_unknown), img(&a_done)),
            record(5, "MODIFY", Some(&b), img(&b_review)),
            record(6, "REMOVE", Some(&a_done), None),
        ];
        (records, a_done, b_review)
    }

    #[tokio::test]
    async fn publishes_each_outcome_once_in_stream_order() {
        let recorder = Arc::new(Recorder::default());
        let (records, a_done, b_review) = batch();
        let (response, report) = relay(&deps(&recorder), &records).await;
        assert!(response.batch_item_failures.is_empty());
        assert_eq!(
            report,
            BatchReport {
                published: 2,
                skipped: 4,
                malformed: 0,
                failed: 0
            }
        );
        let published = recorder.published.lock().unwrap().clone();
        let kinds: Vec<_> = published.iter().map(|e| e.outcome.detail_type()).collect();
        assert_eq!(kinds, ["ChargeSucceeded", "ChargeNeedsReview"]);
        // (The index attributes are the store's, not the item mapping's: compare the rest.)
        assert_eq!(published[0].operation.operation_id, a_done.operation_id);
        assert_eq!(published[0].operation.external_id, a_done.external_id);
        assert_eq!(published[1].operation.operation_id, b_review.operation_id);
        assert_eq!(published[1].operation.review, b_review.review);
        assert_eq!(recorder.calls.load(std::sync::atomic::Ordering::SeqCst), 1);

        // A replay of the same records publishes the same event ids.
        let (_, again) = relay(&deps(&recorder), &records).await;
        assert_eq!(again.published, 2);
        let all = recorder.published.lock().unwrap().clone();
        assert_eq!(all[2].event_id, all[0].event_id);
        assert_eq!(all[3].event_id, all[1].event_id);
    }

    #[tokio::test]
    async fn a_refused_entry_resumes_the_batch_at_its_record() {
        let recorder = Arc::new(Recorder::default());
        let (records, _, b_review) = batch();
        let review_id = outcome_of(None, &b_review).unwrap().event_id;
        recorder.refuse.lock().unwrap().push(review_id);
        let (response, report) = relay(&deps(&recorder), &records).await;
        assert_eq!(report.published, 1);
        assert_eq!(report.failed, 1);
        let ids: Vec<_> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone().unwrap())
            .collect();
        assert_eq!(ids, [format!("{:021}", 5)], "Lambda retries from record 5");

        // The whole call failing: from the first outcome on.
        let recorder = Arc::new(Recorder::default());
        recorder
            .down
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let (response, report) = relay(&deps(&recorder), &records).await;
        assert_eq!((report.published, report.failed), (0, 2));
        assert_eq!(
            response.batch_item_failures[0].item_identifier.as_deref(),
            Some(format!("{:021}", 4).as_str())
        );
        assert!(recorder.published.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_malformed_image_is_reported_never_dropped() {
        let recorder = Arc::new(Recorder::default());
        let (mut records, _, _) = batch();
        let mut bad = image_json(&operation_to_item(&op("ord-c")));
        bad["amount"] = json!({"N": "-5"});
        records.insert(4, record(7, "MODIFY", None, Some(bad)));
        let (response, report) = relay(&deps(&recorder), &records).await;
        assert_eq!(report.malformed, 1);
        // What came before it is published; the batch resumes at the malformed record.
        assert_eq!(report.published, 1);
        assert_eq!(
            response.batch_item_failures[0].item_identifier.as_deref(),
            Some(format!("{:021}", 7).as_str())
        );
    }

    #[tokio::test]
    async fn more_than_ten_outcomes_go_in_several_calls() {
        let recorder = Arc::new(Recorder::default());
        let records: Vec<_> = (0..23)
            .map(|i| {
                let a = with(&op(&format!("ord-{i}")), OperationStatus::Unknown);
                record(
                    i,
                    "MODIFY",
                    Some(&a),
                    img(&with(&a, OperationStatus::Failed)),
                )
            })
            .collect();
        let (response, report) = relay(&deps(&recorder), &records).await;
        assert!(response.batch_item_failures.is_empty());
        assert_eq!(report.published, 23);
        assert_eq!(recorder.calls.load(std::sync::atomic::Ordering::SeqCst), 3);
    }
    #[test]
    fn events_match_the_documented_schema() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let schema: Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{root}/docs/outcome-event.schema.json")).unwrap(),
        )
        .unwrap();
        let detail_schema = &schema["properties"]["detail"];
        let allowed: Vec<&str> = detail_schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let required: Vec<&str> = detail_schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let types: Vec<&str> = schema["properties"]["detail-type"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let a = op("ord-schema");
        let mut reviewed = a.clone();
        reviewed.review = Some(Review {
            reason: "x".into(),
            flagged_at: a.created_at,
        });
        for (before, after) in [
            (a.clone(), with(&a, OperationStatus::Succeeded)),
            (a.clone(), with(&a, OperationStatus::Failed)),
            (a.clone(), reviewed),
        ] {
            let e = outcome_of(Some(&before), &after).unwrap();
            assert!(types.contains(&e.outcome.detail_type()));
            let detail = e.detail();
            let keys: Vec<&str> = detail
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            for k in &keys {
                assert!(allowed.contains(k), "{k} is not in the schema");
            }
            for k in &required {
                assert!(keys.contains(k), "{k} is required by the schema");
            }
            assert_eq!(
                detail["v"],
                schema["properties"]["detail"]["properties"]["v"]["const"]
            );
        }
        // The example a consumer copies is the same shape.
        let example: Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{root}/events/outcome-charge-succeeded.json"))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(example["source"], charge_once::outbox::SOURCE);
        for k in &required {
            assert!(example["detail"].get(*k).is_some(), "example lacks {k}");
        }
    }
}
