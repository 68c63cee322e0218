//! One DynamoDB Stream batch → the outcome events it holds → EventBridge, in stream order.
//!
//! | record | what happens |
//! |---|---|
//! | INSERT / MODIFY whose change is an outcome ([`outcome_of`]) | published (a settled one only once the table confirms it, below) |
//! | INSERT / MODIFY whose change is a settled outcome the table does not hold | not published: copied to the relay's DLQ with the reason ([`NOT_IN_TABLE_REASON`]; alarmed), counted (`OutcomesNotInTable`), and the batch goes on |
//! | INSERT / MODIFY that is not an outcome (a claim, a reschedule, …), REMOVE | skipped, counted |
//! | a drift audit's report (`pk = AUDIT`, [`is_audit_report`]): the table holds them, they are not operations | skipped, counted |
//! | an image that does not parse as an operation | copied to the relay's DLQ with the reason ([`unreadable_letter`]; alarmed), counted, and the batch goes on; if that copy fails, reported failed (retried, never dropped) |
//! | a publish that fails (the call or one entry), or a read-back that fails | reported failed from the first such record on |
//!
//! **Only what the table holds.** The function publishes with the one role the outcome bus admits,
//! and Lambda lets anyone with `lambda:InvokeFunction` on it hand it a stream-shaped event: an
//! `eventSourceARN` or a sequence number in that event proves nothing, the invoker writes them. So
//! before a `ChargeSucceeded` or `ChargeFailed` goes out (what the order service ships or re-asks on),
//! the record is read back from the table (strongly consistent `GetItem`, all of a batch's at
//! once): it must be the same operation, settled the same way with the same PaymentIntent and
//! parameters. Settled is final, so a genuine record always reads back as its image says; a
//! forged one does not (no such record, another status, another intent). `ChargeNeedsReview` is not
//! read back: a review can be resolved between the write and the relay, and a forged one costs a
//! person's look, not a shipment.
//!
//! Lambda retries a stream batch from the lowest sequence number reported, so everything after the
//! first failure is published again on the retry: harmless, consumers deduplicate on `event_id`,
//! which a replay reproduces exactly. Unreadable records are copied after the publishing, and only
//! those before the first unpublished record: the ones after it come back with the retry, and are
//! copied then, once.

use std::sync::Arc;

use aws_lambda_events::dynamodb::{Event, EventRecord};
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use charge_core::outbox::{outcome_of, Outcome, OutcomeEvent};
use charge_core::time::Clock;
use charge_once::adapters::dynamodb::stream::{is_audit_report, operation_from_image};
use charge_once::ports::{
    DeadLetter, DeadLetterQueue, MetricsSink, OperationReads, OutcomePublisher, StoreError,
    MAX_BATCH,
};
use charge_once::telemetry::emf_line;
use futures_util::future::join_all;
use lambda_runtime::LambdaEvent;
use serde_json::{json, Value};
use tracing::{error, info, warn};

/// What the handler needs, built once in `main`.
pub struct Notify {
    pub publisher: Arc<dyn OutcomePublisher>,
    /// The operations table, read back (strongly consistent) before a settled outcome is
    /// published.
    pub store: Arc<dyn OperationReads>,
    /// The relay's DLQ (standard SQS in production): where unreadable stream records are copied.
    pub dead_letters: Arc<dyn DeadLetterQueue>,
    pub clock: Arc<dyn Clock>,
    /// Where the batch's EMF line goes (stdout in Lambda).
    pub metrics: Arc<dyn MetricsSink>,
}

/// What one batch did, for the log line and the EMF metrics.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BatchReport {
    pub published: usize,
    pub skipped: usize,
    /// Records whose image is not an operation (parked, or reported failed if parking failed).
    pub malformed: usize,
    /// Of those, copied to the relay's DLQ in this invocation.
    pub parked: usize,
    /// Settled outcomes the table does not hold (not published; copied to the relay's DLQ).
    pub not_in_table: usize,
    pub failed: usize,
    /// Of `published`, `AuthorizationExpired` outcomes: authorizations Stripe canceled uncaptured
    /// at their deadline (alarmed: money the merchant did not take).
    pub authorizations_expired: usize,
}

/// The `reason` message attribute of an unreadable stream record on the relay's DLQ.
pub const UNREADABLE_REASON: &str = "unreadable_stream_record";

/// The `reason` message attribute of a settled outcome the table does not hold.
pub const NOT_IN_TABLE_REASON: &str = "outcome_not_in_table";

/// SQS's message size limit is 256 KiB, message attributes included; above this the images are
/// left out of the copy (the keys and sequence number still find the record).
const MAX_LETTER_BODY: usize = 240 * 1024;

/// Handles one stream batch. Never a Lambda error: failures are reported per record, so the
/// records before the first failure are not published again.
pub async fn handle(deps: &Notify, event: LambdaEvent<Event>) -> DynamoDbEventResponse {
    let (response, report) = relay(deps, &event.payload.records).await;
    deps.metrics.emit(emf_line(
        "notify",
        deps.clock.now(),
        &[
            ("OutcomeEventsPublished", report.published as f64, "Count"),
            ("OutcomeEventsFailed", report.failed as f64, "Count"),
            ("MalformedStreamRecords", report.malformed as f64, "Count"),
            (
                "MalformedStreamRecordsParked",
                report.parked as f64,
                "Count",
            ),
            ("OutcomesNotInTable", report.not_in_table as f64, "Count"),
            (
                "AuthorizationsExpired",
                report.authorizations_expired as f64,
                "Count",
            ),
        ],
    ));
    info!(
        published = report.published,
        skipped = report.skipped,
        malformed = report.malformed,
        parked = report.parked,
        not_in_table = report.not_in_table,
        failed = report.failed,
        "stream batch relayed"
    );
    response
}

/// The relay itself: decide, read settled outcomes back from the table, publish in order, copy
/// the unreadable records and the outcomes the table does not hold to the DLQ, and name the first
/// record neither published nor copied.
pub async fn relay(deps: &Notify, records: &[EventRecord]) -> (DynamoDbEventResponse, BatchReport) {
    let mut report = BatchReport::default();
    let (pending, mut to_park) = outcomes_of(records, &mut report);
    let (confirmed, mut first_failure) =
        confirm(deps, records, pending, &mut to_park, &mut report).await;
    // Every confirmed record precedes a failed read-back: a failed publish is the earliest.
    if let Some(failed) = publish(deps, &confirmed, &mut report).await {
        first_failure = Some(failed);
    }
    park(deps, to_park, &mut first_failure, &mut report).await;
    let mut response = DynamoDbEventResponse::default();
    if let Some((_, seq)) = first_failure {
        let mut failure = DynamoDbBatchItemFailure::default();
        failure.item_identifier = Some(seq);
        response.batch_item_failures.push(failure);
    }
    (response, report)
}

/// (position, sequence number, event) of an outcome, in stream order.
type Pending = (usize, String, OutcomeEvent);
/// (position, record, DLQ reason, detail) of a record to copy to the DLQ, in stream order.
type ToPark<'a> = (usize, &'a EventRecord, &'static str, String);
/// (position, sequence number) of the first record to retry from.
type Failure = (usize, String);

/// What each record is: an outcome to publish, nothing to publish, or unreadable (to copy).
fn outcomes_of<'a>(
    records: &'a [EventRecord],
    report: &mut BatchReport,
) -> (Vec<Pending>, Vec<ToPark<'a>>) {
    let mut pending = Vec::new();
    let mut to_park = Vec::new();
    for (at, record) in records.iter().enumerate() {
        let seq = record.change.sequence_number.clone().unwrap_or_default();
        match outcome_in(record) {
            Ok(Some(event)) => pending.push((at, seq, event)),
            Ok(None) => report.skipped += 1,
            Err(reason) => {
                report.malformed += 1;
                to_park.push((at, record, UNREADABLE_REASON, reason));
            }
        }
    }
    (pending, to_park)
}

/// Reads each outcome back from the table: those it holds are confirmed; those it does not are
/// copied to the DLQ, never published; a failed read ends the batch there.
async fn confirm<'a>(
    deps: &Notify,
    records: &'a [EventRecord],
    pending: Vec<Pending>,
    to_park: &mut Vec<ToPark<'a>>,
    report: &mut BatchReport,
) -> (Vec<Pending>, Option<Failure>) {
    let held = join_all(
        pending
            .iter()
            .map(|(_, _, e)| not_in_table(deps.store.as_ref(), e)),
    )
    .await;
    let mut confirmed = Vec::with_capacity(pending.len());
    for ((at, seq, event), held) in pending.into_iter().zip(held) {
        match held {
            Ok(None) => confirmed.push((at, seq, event)),
            Ok(Some(why)) => {
                report.not_in_table += 1;
                error!(order_id = %event.operation.order_id, operation_id = %event.operation.operation_id,
                    event_id = %event.event_id, outcome = event.detail_type(),
                    stream_event_id = %records[at].event_id, reason = %why,
                    "an outcome the table does not hold (an invocation that did not come from the \
                     table's stream?): not published; copied to the relay DLQ");
                to_park.push((at, &records[at], NOT_IN_TABLE_REASON, why));
            }
            Err(e) => {
                warn!(order_id = %event.operation.order_id, operation_id = %event.operation.operation_id,
                    error = %charge_once::telemetry::ErrorChain(&e),
                    "could not read the record back; the batch resumes here");
                return (confirmed, Some((at, seq)));
            }
        }
    }
    (confirmed, None)
}

/// Publishes the confirmed outcomes in order, in PutEvents batches; the first not published, if
/// any, is where the batch resumes.
async fn publish(
    deps: &Notify,
    confirmed: &[Pending],
    report: &mut BatchReport,
) -> Option<Failure> {
    for chunk in confirmed.chunks(MAX_BATCH) {
        let events: Vec<OutcomeEvent> = chunk.iter().map(|(_, _, e)| e.clone()).collect();
        let failed_at = match deps.publisher.publish(&events).await {
            Ok(published) => published.failed.first().copied(),
            Err(e) => {
                warn!(error = %charge_once::telemetry::ErrorChain(&e), "PutEvents failed");
                Some(0)
            }
        };
        let expired = |events: &[Pending]| {
            events
                .iter()
                .filter(|(_, _, e)| e.detail_type() == "AuthorizationExpired")
                .count()
        };
        let Some(i) = failed_at else {
            report.authorizations_expired += expired(chunk);
            for (_, _, e) in chunk {
                info!(order_id = %e.operation.order_id, operation_id = %e.operation.operation_id,
                    event_id = %e.event_id, outcome = e.detail_type(), "outcome published");
            }
            report.published += chunk.len();
            continue;
        };
        report.published += i;
        report.authorizations_expired += expired(&chunk[..i]);
        report.failed += chunk.len() - i;
        let (at, seq, e) = &chunk[i];
        warn!(order_id = %e.operation.order_id, operation_id = %e.operation.operation_id,
            event_id = %e.event_id, "outcome not published; the batch resumes here");
        return Some((*at, seq.clone()));
    }
    None
}

/// Copies the records to park that come before the first unpublished one (the rest come back
/// with the retry); a failed copy becomes the first failure when it is earlier.
async fn park(
    deps: &Notify,
    mut to_park: Vec<ToPark<'_>>,
    first_failure: &mut Option<Failure>,
    report: &mut BatchReport,
) {
    to_park.sort_by_key(|(at, ..)| *at);
    for (at, record, kind, reason) in to_park {
        if first_failure.as_ref().is_some_and(|(f, _)| *f < at) {
            break;
        }
        let seq = record.change.sequence_number.clone().unwrap_or_default();
        let keys = serde_json::to_value(&record.change.keys).unwrap_or(Value::Null);
        match deps
            .dead_letters
            .park(&letter_of(record, kind, &reason))
            .await
        {
            Ok(()) => {
                if kind == UNREADABLE_REASON {
                    report.parked += 1;
                }
                error!(sequence_number = %seq, event_id = %record.event_id, %keys, kind, %reason,
                    "stream record not published: copied to the relay DLQ; the batch goes on");
            }
            Err(e) => {
                error!(sequence_number = %seq, event_id = %record.event_id, %keys, kind, %reason,
                    error = %charge_once::telemetry::ErrorChain(&e),
                    "stream record not published and the relay DLQ is unavailable: the batch resumes here");
                // The earliest failure wins: it precedes any unpublished record (see above).
                *first_failure = Some((at, seq));
                break;
            }
        }
    }
}

/// Why a settled outcome is not what the table holds, read back strongly consistent; `None` when
/// it is (or when it is not a settled outcome: see the module docs).
pub async fn not_in_table(
    store: &dyn OperationReads,
    event: &OutcomeEvent,
) -> Result<Option<String>, StoreError> {
    if event.outcome == Outcome::NeedsReview {
        return Ok(None);
    }
    let claimed = &event.operation;
    let Some(held) = store.get(&claimed.key()).await? else {
        return Ok(Some("the table holds no record for this order".into()));
    };
    // An authorization is a state the charge leaves (captured, canceled, lapsed): the hold is
    // confirmed by the table holding it, or having held it — the same intent and deadline.
    let held_since = event.outcome == Outcome::Authorized
        && held.capture_before().is_some()
        && held.capture_before() == claimed.capture_before();
    // A dispute's opening and its funds withdrawn are steps it passes through: confirmed by the
    // table holding the same dispute (its record, its intent, its amount), wherever Stripe has
    // moved it since.
    let passed_through = matches!(
        event.outcome,
        Outcome::DisputeOpened | Outcome::DisputeFundsWithdrawn
    );
    let why = if held.operation_id != claimed.operation_id {
        format!("the table holds operation {}", held.operation_id)
    } else if (held.status != claimed.status && !held_since && !passed_through)
        || held.external_id != claimed.external_id
    {
        format!(
            "the table holds status {} with PaymentIntent {}",
            held.status,
            held.external_id.as_deref().unwrap_or("(none)")
        )
    } else if !held.params.sends_same(&claimed.params) {
        "the table holds other charge parameters".to_owned()
    } else {
        return Ok(None);
    };
    Ok(Some(why))
}

/// The relay DLQ's copy of a stream record that is not an operation: [`letter_of`] with
/// [`UNREADABLE_REASON`].
pub fn unreadable_letter(record: &EventRecord, reason: &str) -> DeadLetter {
    letter_of(record, UNREADABLE_REASON, reason)
}

/// The relay DLQ's copy of a stream record it did not publish: a JSON body with the reason,
/// the record's sequence number, event id, event name, table keys and the record itself, as the
/// stream gave it (Lambda's event JSON, `{"eventID", "eventName", "dynamodb": {"Keys",
/// "NewImage", "OldImage", "SequenceNumber", …}, …}`), so it can be read, fixed and replayed by
/// hand. Above SQS's size limit the images are left out (`images_omitted`). The message attributes
/// are `reason` = `kind` ([`UNREADABLE_REASON`] or [`NOT_IN_TABLE_REASON`]), `detail` = the reason,
/// `source_message_id` = the event id.
pub fn letter_of(record: &EventRecord, kind: &str, reason: &str) -> DeadLetter {
    let letter = |raw: Value| {
        json!({
            "v": 1,
            "kind": kind,
            "reason": reason,
            "sequence_number": record.change.sequence_number,
            "event_id": record.event_id,
            "event_name": record.event_name,
            "event_source_arn": record.event_source_arn,
            "keys": serde_json::to_value(&record.change.keys).unwrap_or(Value::Null),
            "record": raw,
        })
    };
    let mut raw = serde_json::to_value(record).unwrap_or(Value::Null);
    let mut body = letter(raw.clone()).to_string();
    if body.len() > MAX_LETTER_BODY {
        let size = body.len();
        if let Some(change) = raw.get_mut("dynamodb").and_then(Value::as_object_mut) {
            change.remove("NewImage");
            change.remove("OldImage");
        }
        let mut smaller = letter(raw);
        smaller["images_omitted"] = json!(format!(
            "the copy was {size} bytes, over SQS's limit: read the item by its keys"
        ));
        body = smaller.to_string();
    }
    DeadLetter {
        body,
        message_id: record.event_id.clone(),
        group_id: None,
        reason: kind.to_owned(),
        detail: reason.to_owned(),
    }
}

/// The outcome a stream record carries, if any; `Err` when an image is not an operation record.
pub fn outcome_in(record: &EventRecord) -> Result<Option<OutcomeEvent>, String> {
    if !matches!(record.event_name.as_str(), "INSERT" | "MODIFY") {
        return Ok(None);
    }
    if is_audit_report(&record.change.keys) || is_audit_report(&record.change.new_image) {
        return Ok(None);
    }
    let after = operation_from_image(&record.change.new_image)?.ok_or("no new image")?;
    // An old image this release cannot read (the write that repaired a corrupted record) is
    // decided on the new image alone: at worst an outcome is published again, with the same
    // event id, which consumers deduplicate; never the repair parked beside its record.
    let before = operation_from_image(&record.change.old_image).unwrap_or_else(|reason| {
        warn!(event_id = %record.event_id, %reason, "old image unreadable; deciding on the new image");
        None
    });
    Ok(outcome_of(before.as_ref(), &after))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use async_trait::async_trait;
    use charge_core::{
        operation::{Operation, OperationStatus, Review},
        time::{ManualClock, Timestamp},
    };
    use charge_once::adapters::dynamodb::item::{item_json as image_json, operation_to_item};
    use charge_once::memory::MemoryStore;
    use charge_once::ports::{PublishError, Published, QueueError};
    use charge_once::telemetry::{CapturedMetrics, DiscardMetrics};
    use serde_json::json;

    use super::*;

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

    /// The relay's DLQ: keeps what is parked, counts the calls, refuses every one when `down`.
    #[derive(Default)]
    struct Parker {
        letters: Mutex<Vec<DeadLetter>>,
        down: std::sync::atomic::AtomicBool,
        calls: std::sync::atomic::AtomicUsize,
    }

    #[async_trait]
    impl DeadLetterQueue for Parker {
        async fn park(&self, letter: &DeadLetter) -> Result<(), QueueError> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if self.down.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(QueueError::new("dead-letter queue unavailable"));
            }
            self.letters.lock().unwrap().push(letter.clone());
            Ok(())
        }
    }

    fn deps(recorder: &Arc<Recorder>, records: &[EventRecord]) -> Notify {
        deps_with(recorder, &Arc::new(Parker::default()), records)
    }

    /// The relay over a table that holds what `records` last wrote for each key (as the real
    /// table does once the stream delivers them).
    fn deps_with(recorder: &Arc<Recorder>, dlq: &Arc<Parker>, records: &[EventRecord]) -> Notify {
        let table = MemoryStore::new();
        for r in records {
            if let Ok(Some(op)) = operation_from_image(&r.change.new_image) {
                table.put_for_tests(op);
            }
        }
        deps_on(recorder, dlq, table)
    }

    fn deps_on(recorder: &Arc<Recorder>, dlq: &Arc<Parker>, table: MemoryStore) -> Notify {
        Notify {
            store: Arc::new(table),
            publisher: recorder.clone(),
            dead_letters: dlq.clone(),
            clock: Arc::new(ManualClock::new(Timestamp::from_millis(1_800_000_000_000))),
            metrics: Arc::new(DiscardMetrics),
        }
    }

    fn op(order: &str) -> Operation {
        charge_core::testing::order(order).build()
    }

    fn with(op: &Operation, status: OperationStatus) -> Operation {
        let mut next = op.clone();
        next.status = status;
        next.updated_at = next.updated_at.plus(Duration::from_secs(1));
        if status.is_settled() {
            next.external_id = Some(charge_core::domain::PaymentIntentId::parse("pi_1").unwrap());
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
        let (response, report) = relay(&deps(&recorder, &records), &records).await;
        assert!(response.batch_item_failures.is_empty());
        assert_eq!(
            report,
            BatchReport {
                published: 2,
                skipped: 4,
                malformed: 0,
                parked: 0,
                not_in_table: 0,
                failed: 0,
                authorizations_expired: 0,
            }
        );
        let published = recorder.published.lock().unwrap().clone();
        let kinds: Vec<_> = published.iter().map(|e| e.detail_type()).collect();
        assert_eq!(kinds, ["ChargeSucceeded", "ChargeNeedsReview"]);
        // (The index attributes are the store's, not the item mapping's: compare the rest.)
        assert_eq!(published[0].operation.operation_id, a_done.operation_id);
        assert_eq!(published[0].operation.external_id, a_done.external_id);
        assert_eq!(published[1].operation.operation_id, b_review.operation_id);
        assert_eq!(published[1].operation.review, b_review.review);
        assert_eq!(recorder.calls.load(std::sync::atomic::Ordering::SeqCst), 1);

        // A replay of the same records publishes the same event ids.
        let (_, again) = relay(&deps(&recorder, &records), &records).await;
        assert_eq!(again.published, 2);
        let all = recorder.published.lock().unwrap().clone();
        assert_eq!(all[2].event_id, all[0].event_id);
        assert_eq!(all[3].event_id, all[1].event_id);
    }

    #[tokio::test]
    async fn the_batch_counts_go_to_the_metrics_sink() {
        let recorder = Arc::new(Recorder::default());
        let metrics = Arc::new(CapturedMetrics::new());
        let records = batch_with_a_bad_record();
        let deps = Notify {
            metrics: metrics.clone(),
            ..deps(&recorder, &records)
        };
        let event: Event = serde_json::from_value(json!({
            "Records": serde_json::to_value(&records).unwrap()
        }))
        .unwrap();
        let response = handle(&deps, LambdaEvent::new(event, Default::default())).await;
        assert!(response.batch_item_failures.is_empty());
        assert_eq!(metrics.lines().len(), 1, "one line per batch");
        let sum = |name| metrics.sum(name, &[("Function", "notify")]);
        assert_eq!(sum("OutcomeEventsPublished"), 2.0);
        assert_eq!(sum("OutcomeEventsFailed"), 0.0);
        assert_eq!(sum("MalformedStreamRecords"), 1.0);
        assert_eq!(sum("MalformedStreamRecordsParked"), 1.0);
        assert_eq!(sum("OutcomesNotInTable"), 0.0);
    }

    #[tokio::test]
    async fn a_refused_entry_resumes_the_batch_at_its_record() {
        let recorder = Arc::new(Recorder::default());
        let (records, _, b_review) = batch();
        let review_id = outcome_of(None, &b_review).unwrap().event_id;
        recorder.refuse.lock().unwrap().push(review_id);
        let (response, report) = relay(&deps(&recorder, &records), &records).await;
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
        let (response, report) = relay(&deps(&recorder, &records), &records).await;
        assert_eq!((report.published, report.failed), (0, 2));
        assert_eq!(
            response.batch_item_failures[0].item_identifier.as_deref(),
            Some(format!("{:021}", 4).as_str())
        );
        assert!(recorder.published.lock().unwrap().is_empty());
    }

    /// The batch with an unreadable record (an amount of -5) inserted before record 5 (b's
    /// review), and the outcome after it: the relay must not stop there.
    fn batch_with_a_bad_record() -> Vec<EventRecord> {
        let (mut records, _, _) = batch();
        let mut bad = image_json(&operation_to_item(&op("ord-c")));
        bad["amount"] = json!({"N": "-5"});
        records.insert(4, record(7, "MODIFY", None, Some(bad)));
        records
    }

    /// A drift audit's report written, then replaced by a re-run of its window: items of the
    /// table that are not operations. Skipped as a claim is, never parked as unreadable.
    #[tokio::test]
    async fn an_audit_report_is_skipped_not_parked() {
        let recorder = Arc::new(Recorder::default());
        let dlq = Arc::new(Parker::default());
        let report = json!({
            "pk": {"S": "AUDIT"},
            "sk": {"S": "2026-12-04T00:00:00.000Z/2026-12-03T00:00:00.000Z"},
            "drift": {"N": "0"},
            "report": {"S": "{}"},
        });
        let mut records = Vec::new();
        for (seq, name) in [(1, "INSERT"), (2, "MODIFY")] {
            let mut raw =
                serde_json::to_value(record(seq, name, None, Some(report.clone()))).unwrap();
            raw["dynamodb"]["Keys"] = json!({"pk": report["pk"], "sk": report["sk"]});
            if name == "MODIFY" {
                raw["dynamodb"]["OldImage"] = report.clone();
            }
            records.push(serde_json::from_value::<EventRecord>(raw).unwrap());
        }
        // Its twin: the same batch with an operation's image that does not parse is parked.
        let mut bad = image_json(&operation_to_item(&op("ord-c")));
        bad["amount"] = json!({"N": "-5"});
        records.push(record(3, "INSERT", None, Some(bad)));
        let (response, report) = relay(&deps_with(&recorder, &dlq, &records), &records).await;
        assert!(response.batch_item_failures.is_empty());
        assert_eq!(
            (
                report.skipped,
                report.malformed,
                report.parked,
                report.published
            ),
            (2, 1, 1, 0)
        );
        assert_eq!(dlq.letters.lock().unwrap().len(), 1, "only the operation's");
        assert!(recorder.published.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_repair_of_an_unreadable_record_is_decided_on_its_new_image() {
        let recorder = Arc::new(Recorder::default());
        let dlq = Arc::new(Parker::default());
        let fixed = with(&op("ord-repair"), OperationStatus::Succeeded);
        let mut corrupted = image_json(&operation_to_item(&fixed));
        corrupted["amount"] = json!({"N": "-5"});
        let mut raw = serde_json::to_value(record(1, "MODIFY", None, img(&fixed))).unwrap();
        raw["dynamodb"]["OldImage"] = corrupted;
        let repair: EventRecord = serde_json::from_value(raw).unwrap();
        assert!(repair.change.old_image.get("amount").is_some());
        let (response, report) = relay(
            &deps_with(&recorder, &dlq, std::slice::from_ref(&repair)),
            &[repair],
        )
        .await;
        assert!(response.batch_item_failures.is_empty());
        assert_eq!(
            (report.published, report.malformed, report.parked),
            (1, 0, 0)
        );
        assert_eq!(recorder.published.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_malformed_image_is_parked_with_its_reason_and_the_batch_goes_on() {
        let recorder = Arc::new(Recorder::default());
        let dlq = Arc::new(Parker::default());
        let records = batch_with_a_bad_record();
        let (response, report) = relay(&deps_with(&recorder, &dlq, &records), &records).await;
        assert!(
            response.batch_item_failures.is_empty(),
            "nothing to retry: {:?}",
            response.batch_item_failures
        );
        assert_eq!(
            report,
            BatchReport {
                published: 2,
                skipped: 4,
                malformed: 1,
                parked: 1,
                not_in_table: 0,
                failed: 0,
                authorizations_expired: 0,
            }
        );
        // The outcome after the bad record (b's review) is published too.
        let kinds: Vec<_> = recorder
            .published
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.detail_type())
            .collect();
        assert_eq!(kinds, ["ChargeSucceeded", "ChargeNeedsReview"]);
        assert_eq!(dlq.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        let letters = dlq.letters.lock().unwrap().clone();
        assert_eq!(letters.len(), 1);
        let letter = &letters[0];
        assert_eq!(letter.reason, UNREADABLE_REASON);
        assert!(letter.detail.contains("amount"), "{}", letter.detail);
        assert_eq!(letter.message_id, "ev-7");
        assert_eq!(letter.group_id, None, "a standard queue: no group");
        let body: Value = serde_json::from_str(&letter.body).unwrap();
        assert_eq!(body["reason"], letter.detail.as_str());
        assert_eq!(body["sequence_number"], format!("{:021}", 7));
        assert_eq!(body["event_id"], "ev-7");
        assert_eq!(body["event_name"], "MODIFY");
        assert_eq!(
            body["keys"],
            json!({"pk": {"S": "ORDER#x"}, "sk": {"S": "charge"}})
        );
        // The record as the stream gave it: it reads back as the same Lambda event record.
        let raw: EventRecord = serde_json::from_value(body["record"].clone()).unwrap();
        assert_eq!(raw, records[4]);
        assert_eq!(raw.change.new_image, records[4].change.new_image);
        assert!(body.get("images_omitted").is_none());
    }

    #[tokio::test]
    async fn a_failing_dead_letter_copy_reports_that_record_for_retry() {
        let recorder = Arc::new(Recorder::default());
        let dlq = Arc::new(Parker::default());
        dlq.down.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut records = batch_with_a_bad_record();
        // A second bad record further on: the first failing copy stops the parking.
        let mut bad = image_json(&operation_to_item(&op("ord-d")));
        bad["status"] = json!({"S": "bogus"});
        records.push(record(8, "MODIFY", None, Some(bad)));
        let (response, report) = relay(&deps_with(&recorder, &dlq, &records), &records).await;
        assert_eq!(dlq.calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(dlq.letters.lock().unwrap().is_empty());
        assert_eq!((report.malformed, report.parked), (2, 0));
        // Never dropped: Lambda retries from the record that could not be copied.
        let ids: Vec<_> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone().unwrap())
            .collect();
        assert_eq!(ids, [format!("{:021}", 7)]);
        // The retry, once the DLQ answers: both copied, nothing left to retry.
        dlq.down.store(false, std::sync::atomic::Ordering::SeqCst);
        let (response, report) = relay(&deps_with(&recorder, &dlq, &records), &records).await;
        assert!(response.batch_item_failures.is_empty());
        assert_eq!((report.malformed, report.parked), (2, 2));
        assert_eq!(dlq.calls.load(std::sync::atomic::Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_malformed_record_after_an_unpublished_one_waits_for_the_retry() {
        let recorder = Arc::new(Recorder::default());
        let dlq = Arc::new(Parker::default());
        recorder
            .down
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let records = batch_with_a_bad_record();
        let (response, report) = relay(&deps_with(&recorder, &dlq, &records), &records).await;
        // Record 4 (a's success) is the first unpublished one; the bad record 7 comes after it,
        // so it comes back with the retry and is copied then, once.
        assert_eq!(
            response.batch_item_failures[0].item_identifier.as_deref(),
            Some(format!("{:021}", 4).as_str())
        );
        assert_eq!((report.malformed, report.parked), (1, 0));
        assert_eq!(dlq.calls.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    /// An invocation that did not come from the table's stream: settled outcomes the table does
    /// not hold are not published, whatever the event says (its `eventSourceARN` included), and
    /// are copied to the DLQ with the reason; the genuine outcome beside them is published.
    #[tokio::test]
    async fn only_settled_outcomes_the_table_holds_are_published() {
        let recorder = Arc::new(Recorder::default());
        let dlq = Arc::new(Parker::default());
        let genuine = with(&op("ord-genuine"), OperationStatus::Succeeded);
        let pending = op("ord-pending");
        let table = MemoryStore::new();
        table.put_for_tests(genuine.clone());
        table.put_for_tests(pending.clone());
        // Forged: a success for an order the table holds pending; a success for an order it
        // does not hold at all; a failure naming another PaymentIntent than the recorded one.
        let mut other_intent = with(&genuine, OperationStatus::Failed);
        other_intent.external_id =
            Some(charge_core::domain::PaymentIntentId::parse("pi_forged").unwrap());
        let records = vec![
            record(
                1,
                "INSERT",
                None,
                img(&with(&pending, OperationStatus::Succeeded)),
            ),
            record(
                2,
                "INSERT",
                None,
                img(&with(&op("ord-nowhere"), OperationStatus::Succeeded)),
            ),
            record(3, "MODIFY", Some(&op("ord-genuine")), img(&genuine)),
            record(4, "MODIFY", Some(&genuine), img(&other_intent)),
        ];
        let (response, report) = relay(&deps_on(&recorder, &dlq, table), &records).await;
        assert!(response.batch_item_failures.is_empty(), "nothing to retry");
        assert_eq!(
            (
                report.published,
                report.not_in_table,
                report.malformed,
                report.parked
            ),
            (1, 3, 0, 0),
            "{report:?}"
        );
        let published = recorder.published.lock().unwrap().clone();
        assert_eq!(published.len(), 1);
        assert_eq!(published[0].operation.order_id, genuine.order_id);
        let letters = dlq.letters.lock().unwrap().clone();
        let parked: Vec<_> = letters
            .iter()
            .map(|l| (l.message_id.as_str(), l.reason.as_str()))
            .collect();
        assert_eq!(
            parked,
            [
                ("ev-1", NOT_IN_TABLE_REASON),
                ("ev-2", NOT_IN_TABLE_REASON),
                ("ev-4", NOT_IN_TABLE_REASON)
            ]
        );
        assert!(
            letters[0].detail.contains("status pending"),
            "{}",
            letters[0].detail
        );
        assert!(
            letters[1].detail.contains("no record"),
            "{}",
            letters[1].detail
        );
        assert!(letters[2].detail.contains("pi_1"), "{}", letters[2].detail);
        // A review is not read back: it may be resolved before the relay runs.
        let mut reviewed = pending.clone();
        reviewed.review = Some(Review {
            reason: "stripe_rejected".into(),
            flagged_at: pending.created_at,
        });
        let recorder = Arc::new(Recorder::default());
        let (_, report) = relay(
            &deps_on(&recorder, &dlq, MemoryStore::new()),
            &[record(5, "MODIFY", Some(&pending), img(&reviewed))],
        )
        .await;
        assert_eq!((report.published, report.not_in_table), (1, 0));
    }

    #[test]
    fn an_oversized_copy_leaves_the_images_out() {
        let mut image = image_json(&operation_to_item(&op("ord-big")));
        image["amount"] = json!({"N": "-5"});
        image["padding"] = json!({"S": "x".repeat(MAX_LETTER_BODY)});
        let rec = record(9, "INSERT", None, Some(image));
        let reason = outcome_in(&rec).unwrap_err();
        let letter = unreadable_letter(&rec, &reason);
        assert!(letter.body.len() < MAX_LETTER_BODY, "{}", letter.body.len());
        let body: Value = serde_json::from_str(&letter.body).unwrap();
        assert!(body["images_omitted"].is_string());
        assert!(body["record"]["dynamodb"].get("NewImage").is_none());
        assert_eq!(body["keys"]["pk"]["S"], "ORDER#x");
        assert_eq!(body["sequence_number"], format!("{:021}", 9));
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
        let (response, report) = relay(&deps(&recorder, &records), &records).await;
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
            assert!(types.contains(&e.detail_type()));
            let detail = serde_json::to_value(e.detail()).unwrap();
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
        assert_eq!(example["source"], charge_core::outbox::SOURCE);
        for k in &required {
            assert!(example["detail"].get(*k).is_some(), "example lacks {k}");
        }
    }

    /// `ChargeAuthorized` is confirmed by a table that holds the hold, or held it: the same
    /// charge with the same deadline, captured since. A claim of another deadline (a forged or
    /// misrouted stream record) is not what the table holds.
    #[tokio::test]
    async fn an_authorization_is_confirmed_by_the_hold_the_table_held() {
        use charge_core::outbox::{Outcome, OutcomeEvent};
        let table = MemoryStore::new();
        let mut held = charge_core::testing::order("ord-n-auth").manual().build();
        held.status = OperationStatus::Authorized;
        held.params.charge_state_mut().unwrap().capture_before =
            Some(charge_core::time::Timestamp::from_millis(1_900_000_000_000));
        let event = OutcomeEvent::new(Outcome::Authorized, held.clone());
        let mut captured = held.clone();
        captured.status = OperationStatus::Succeeded;
        captured.next_due_at = None;
        table.put_for_tests(captured);
        assert_eq!(not_in_table(&table, &event).await.unwrap(), None);
        let mut forged = held;
        forged.params.charge_state_mut().unwrap().capture_before =
            Some(charge_core::time::Timestamp::from_millis(1_900_000_000_001));
        let forged = OutcomeEvent::new(Outcome::Authorized, forged);
        assert!(not_in_table(&table, &forged).await.unwrap().is_some());
    }

    /// `DisputeOpened` is confirmed by the table holding the same dispute, wherever Stripe moved
    /// it since (lost before the relay ran): a step passed through, published, never parked.
    /// Its twin: a dispute the table does not hold (another operation under the key) is not.
    #[tokio::test]
    async fn a_dispute_opened_is_confirmed_by_the_dispute_the_table_holds_since() {
        use charge_core::dispute::state::{DisputeParams, DisputeState};
        use charge_core::outbox::{outcome_of, Outcome};
        let table = MemoryStore::new();
        let d = charge_core::testing::stripe_dispute("dp_1", "pi_1");
        let opened = Operation::new_dispute(
            charge_core::domain::OrderId::parse("ord-n-dispute").unwrap(),
            DisputeParams::of(&d, d.payment_intent.clone().unwrap()).unwrap(),
            DisputeState::of(&d, true),
            d.created,
            d.created,
        );
        let event = outcome_of(None, &opened).unwrap();
        assert_eq!(event.outcome, Outcome::DisputeOpened);
        let mut lost = opened.clone();
        lost.status = OperationStatus::Succeeded;
        lost.next_due_at = None;
        table.put_for_tests(lost.clone());
        assert_eq!(not_in_table(&table, &event).await.unwrap(), None);
        let mut other = lost;
        other.operation_id = charge_core::domain::OperationId::new_random();
        table.put_for_tests(other);
        assert!(not_in_table(&table, &event).await.unwrap().is_some());
    }
}
