//! One SQS FIFO batch, processed in order.
//!
//! For each record: parse the body, then run the executor. An item fails (is reported as a batch
//! item failure, so SQS delivers it again) only when retrying can help: the executor says nothing
//! happened and it should be retried (429, 409 in flight, auth, a live lease elsewhere) or the
//! store is unavailable. After a failed item, the later items of the **same message group** in the
//! batch fail too, so one order's messages never overtake each other; other groups go on.
//!
//! **Poison never blocks.** A message no retry can fix — an unreadable body, an unknown version,
//! no such operation — is copied to the dead-letter queue with its reason (message attributes),
//! acknowledged at once, counted (`PoisonMessages`, alarmed) and logged with its message id, so
//! the rest of its group goes on in the same batch. Failing it back to SQS instead would hold the
//! whole FIFO group for five receives × the visibility timeout (~45 min) and push the valid
//! messages behind it towards the DLQ too. If the DLQ itself cannot be written, the item fails as
//! before: never acknowledged without a copy. An operation the message named, if it exists, is
//! still driven by the unknown index.
//!
//! Who drives the retry of an `unknown` outcome: **the unknown index**, not SQS. The item is
//! acknowledged once `unknown` and its next due time are recorded, and the reconciler re-drives it
//! with backoff. Leaving it to SQS would hold the order's FIFO group hostage to visibility timeouts
//! for up to 23 hours and push it to the DLQ after the receive limit, while the index keeps a durable,
//! queryable schedule that also survives a lost message. "Nothing happened" answers do go back to
//! SQS: a retry a visibility timeout later is exactly what they need.
//!
//! Metrics (EMF, `Function=charge`), one set per batch: `PoisonMessages`, `StripeReplays`
//! (Stripe answered `Idempotent-Replayed: true`: our key was used before), and `SentToReview` per
//! reason class (alarmed).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use charge_once::executor::{execute_charge, ChargeDeps, ExecuteError, ReviewClass};
use charge_once::ports::{ChargeMessage, DeadLetter, DeadLetterQueue};
use charge_once::reconciler::sent_to_review_line;
use charge_once::telemetry::{emf_line, MetricsSink};
use lambda_runtime::LambdaEvent;
use tracing::{error, info, warn, Instrument};

/// The `Function` dimension of this function's metrics.
pub const FUNCTION: &str = "charge";

/// What the handler needs, built once in `main`.
#[derive(Clone)]
pub struct ChargeFunction {
    pub charge: ChargeDeps,
    /// Where poison messages are copied (the charge queue's DLQ).
    pub dead_letters: Arc<dyn DeadLetterQueue>,
    pub metrics: Arc<dyn MetricsSink>,
}

impl ChargeFunction {
    /// For benches and tests that do not look at poison or metrics: poison messages are parked
    /// in memory, metrics lines dropped.
    pub fn local(charge: ChargeDeps) -> Self {
        Self {
            charge,
            dead_letters: Arc::new(charge_once::memory::MemoryDeadLetters::new()),
            metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
        }
    }
}

/// What happened to one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemOutcome {
    /// Done with it (settled, recorded as unknown and scheduled, in review, or superseded).
    Acknowledged,
    /// A message no retry can fix, copied to the DLQ with this reason and acknowledged.
    Poisoned(&'static str),
    /// Report as a batch item failure: SQS delivers it again.
    Retry(&'static str),
}

/// What a batch did, for its metrics line.
#[derive(Debug, Default)]
struct BatchTally {
    poison: u64,
    replays: u64,
    reviews: BTreeMap<ReviewClass, u64>,
}

/// Handles a batch; returns the items to retry.
pub async fn handle(f: &ChargeFunction, event: LambdaEvent<SqsEvent>) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    let mut failed_groups: HashSet<String> = HashSet::new();
    let mut tally = BatchTally::default();
    for record in &event.payload.records {
        let message_id = record.message_id.clone().unwrap_or_default();
        let group = record.attributes.get("MessageGroupId").cloned();
        let outcome = match &group {
            Some(g) if failed_groups.contains(g) => {
                info!(%message_id, group = %g, "an earlier message of this group failed; keeping order");
                ItemOutcome::Retry("earlier message in group failed")
            }
            _ => process(f, record, &message_id, &mut tally).await,
        };
        match outcome {
            ItemOutcome::Acknowledged => {}
            ItemOutcome::Poisoned(_) => tally.poison += 1,
            ItemOutcome::Retry(_) => {
                if let Some(g) = group {
                    failed_groups.insert(g);
                }
                // An empty identifier makes Lambda retry the whole batch: the safe reading of a
                // record without a message id.
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = message_id;
                response.batch_item_failures.push(failure);
            }
        }
    }
    emit(f, &tally);
    response
}

fn emit(f: &ChargeFunction, tally: &BatchTally) {
    let now = f.charge.clock.now();
    f.metrics.emit(emf_line(
        FUNCTION,
        now,
        &[
            ("PoisonMessages", tally.poison as f64, "Count"),
            ("StripeReplays", tally.replays as f64, "Count"),
        ],
    ));
    for (class, n) in &tally.reviews {
        f.metrics
            .emit(sent_to_review_line(FUNCTION, *class, *n, now));
    }
}

/// Why a message can never succeed.
struct Poison {
    reason: &'static str,
    detail: String,
}

async fn process(
    f: &ChargeFunction,
    record: &SqsMessage,
    message_id: &str,
    tally: &mut BatchTally,
) -> ItemOutcome {
    let message = match parse(record) {
        Ok(m) => m,
        Err(poison) => return park(f, record, message_id, poison).await,
    };
    let span = tracing::info_span!(
        "charge_message",
        %message_id,
        order_id = %message.order_id,
        operation_id = %message.operation_id
    );
    async {
        match execute_charge(&f.charge, &message.key(), &message.operation_id).await {
            Ok(report) => {
                if report.replayed {
                    tally.replays += 1;
                }
                if let Some(class) = report.sent_to_review {
                    *tally.reviews.entry(class).or_default() += 1;
                }
                if report.disposition.wants_retry() {
                    info!(disposition = ?report.disposition, "nothing happened; the message will come back");
                    ItemOutcome::Retry("retry later")
                } else {
                    info!(status = %report.status, disposition = ?report.disposition, gateway_calls = report.gateway_calls, replayed = report.replayed, "done");
                    ItemOutcome::Acknowledged
                }
            }
            Err(ExecuteError::NotFound { .. }) => {
                let poison = Poison {
                    reason: "no_such_operation",
                    detail: format!(
                        "no operation {} for order {}",
                        message.operation_id, message.order_id
                    ),
                };
                park(f, record, message_id, poison).await
            }
            Err(ExecuteError::Store(e)) => {
                warn!(error = %e, source = ?std::error::Error::source(&e), "store unavailable");
                ItemOutcome::Retry("store unavailable")
            }
        }
    }
    .instrument(span)
    .await
}

/// Copies a poison message to the DLQ and acknowledges it; fails the item if the copy fails.
async fn park(
    f: &ChargeFunction,
    record: &SqsMessage,
    message_id: &str,
    poison: Poison,
) -> ItemOutcome {
    let letter = DeadLetter {
        body: record.body.clone().unwrap_or_default(),
        message_id: message_id.to_owned(),
        group_id: record.attributes.get("MessageGroupId").cloned(),
        reason: poison.reason.to_owned(),
        detail: poison.detail,
    };
    match f.dead_letters.park(&letter).await {
        Ok(()) => {
            error!(
                %message_id,
                group = letter.group_id.as_deref().unwrap_or(""),
                reason = poison.reason,
                detail = %letter.detail,
                "poison message: copied to the dead-letter queue and acknowledged; its group goes on"
            );
            ItemOutcome::Poisoned(poison.reason)
        }
        Err(e) => {
            error!(
                %message_id,
                reason = poison.reason,
                error = %e,
                source = ?std::error::Error::source(&e),
                "poison message, but the dead-letter queue is unavailable: failing the item"
            );
            ItemOutcome::Retry("dead-letter queue unavailable")
        }
    }
}

fn parse(record: &SqsMessage) -> Result<ChargeMessage, Poison> {
    let body = record.body.as_deref().ok_or_else(|| Poison {
        reason: "unparseable",
        detail: "no body".into(),
    })?;
    // The version first, so a future message shape is named as such, not as garbage.
    let version = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("v").and_then(serde_json::Value::as_u64));
    if let Some(v) = version.filter(|v| *v != u64::from(ChargeMessage::VERSION)) {
        return Err(Poison {
            reason: "unsupported_version",
            detail: format!("unsupported message version {v}"),
        });
    }
    serde_json::from_str(body).map_err(|e| Poison {
        reason: "unparseable",
        detail: format!("not a charge message: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    use charge_once::executor::ChargePolicy;
    use charge_once::memory::{FakeFault, FakeGateway, MemoryDeadLetters, MemoryStore};
    use charge_once::ports::OperationStore;
    use charge_once::telemetry::CapturedMetrics;
    use charge_once::{
        Amount, ChargeParams, Clock, Currency, CustomerId, ManualClock, Operation, OperationId,
        OperationStatus, OrderId, PaymentMethodId, Timestamp,
    };
    use lambda_runtime::Context;

    fn batch() -> SqsEvent {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../events/charge-sqs-batch.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    struct World {
        f: ChargeFunction,
        store: Arc<MemoryStore>,
        gateway: Arc<FakeGateway>,
        dlq: Arc<MemoryDeadLetters>,
        metrics: Arc<CapturedMetrics>,
    }

    async fn world() -> World {
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        let store = Arc::new(MemoryStore::new());
        let gateway = Arc::new(FakeGateway::new());
        // The operations the sample batch refers to.
        for (order, id) in [
            ("ord-1001", "0f8c6a52-3c1d-4e6f-9a2b-7d5e4c3b2a10"),
            ("ord-1003", "5b7e2d19-8a4c-4f1e-b6d3-2c9a8e7f6d50"),
        ] {
            let mut op = Operation::new(
                OrderId::parse(order).unwrap(),
                ChargeParams {
                    amount: Amount::new(1250).unwrap(),
                    currency: Currency::parse("usd").unwrap(),
                    customer_id: CustomerId::parse("cus_Q8xYz12AbC").unwrap(),
                    payment_method: PaymentMethodId::parse("pm_card_visa").unwrap(),
                },
                charge_once::Principal::jwt("order-service").unwrap(),
                clock.now(),
                Duration::from_secs(300),
            );
            op.operation_id = OperationId::parse(id).unwrap();
            store.create_if_absent(&op).await.unwrap();
        }
        let dlq = Arc::new(MemoryDeadLetters::new());
        let metrics = Arc::new(CapturedMetrics::new());
        let f = ChargeFunction {
            charge: ChargeDeps {
                store: store.clone(),
                gateway: gateway.clone(),
                clock: Arc::new(clock),
                policy: ChargePolicy::default(),
            },
            dead_letters: dlq.clone(),
            metrics: metrics.clone(),
        };
        World {
            f,
            store,
            gateway,
            dlq,
            metrics,
        }
    }

    fn failed(resp: &SqsBatchResponse) -> Vec<&str> {
        resp.batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect()
    }

    const MALFORMED: &str = "2e1424d4-f796-459a-8184-9c92662be6da";

    #[tokio::test]
    async fn a_malformed_record_is_parked_and_acknowledged_and_the_rest_is_charged() {
        let w = world().await;
        let resp = handle(&w.f, LambdaEvent::new(batch(), Context::default())).await;
        assert!(failed(&resp).is_empty(), "poison is acknowledged");
        let letters = w.dlq.letters();
        assert_eq!(letters.len(), 1);
        assert_eq!(letters[0].message_id, MALFORMED);
        assert_eq!(letters[0].reason, "unparseable");
        assert_eq!(letters[0].group_id.as_deref(), Some("ord-1002"));
        assert_eq!(w.gateway.charge_count(), 2);
        assert!(w
            .store
            .all()
            .iter()
            .all(|op| op.status == OperationStatus::Succeeded));
        assert_eq!(
            w.metrics.sum("PoisonMessages", &[("Function", FUNCTION)]),
            1.0
        );
    }

    #[tokio::test]
    async fn poison_does_not_hold_back_its_group_but_a_dlq_outage_does() {
        let w = world().await;
        let mut event = batch();
        // The valid ord-1001 message comes after a poison message of its own group, and after a
        // message for an operation that does not exist.
        let mut poison = event.records[1].clone();
        poison.message_id = Some("poison-in-group".into());
        poison
            .attributes
            .insert("MessageGroupId".into(), "ord-1001".into());
        let mut missing = event.records[0].clone();
        missing.message_id = Some("missing-op".into());
        missing.body = Some(
            r#"{"v":1,"operation_id":"11111111-2222-4333-8444-555555555555","order_id":"ord-1001","kind":"charge"}"#
                .into(),
        );
        let mut future = event.records[0].clone();
        future.message_id = Some("future-version".into());
        future.body = Some(r#"{"v":2,"anything":"new"}"#.into());
        event.records.splice(0..0, [poison, missing, future]);
        let resp = handle(&w.f, LambdaEvent::new(event.clone(), Context::default())).await;
        assert!(failed(&resp).is_empty(), "{:?}", failed(&resp));
        let reasons: Vec<_> = w
            .dlq
            .letters()
            .iter()
            .map(|l| (l.message_id.clone(), l.reason.clone()))
            .collect();
        assert_eq!(
            reasons,
            [
                ("poison-in-group".to_owned(), "unparseable".to_owned()),
                ("missing-op".to_owned(), "no_such_operation".to_owned()),
                (
                    "future-version".to_owned(),
                    "unsupported_version".to_owned()
                ),
                (MALFORMED.to_owned(), "unparseable".to_owned()),
            ]
        );
        assert_eq!(
            w.gateway.charge_count(),
            2,
            "ord-1001 charged in the same batch"
        );
        assert_eq!(w.metrics.sum("PoisonMessages", &[]), 4.0);

        // Without a DLQ to copy to, a poison message is failed as before (never dropped).
        let w = world().await;
        w.dlq
            .failing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let resp = handle(&w.f, LambdaEvent::new(event, Context::default())).await;
        assert_eq!(
            failed(&resp),
            [
                "poison-in-group",
                "missing-op",
                "future-version",
                "059f36b4-87a3-44ab-83d2-661975830a7d",
                MALFORMED
            ]
        );
        assert_eq!(w.gateway.charge_count(), 1, "ord-1003 went on");
    }

    #[tokio::test]
    async fn a_settled_operation_makes_no_gateway_call() {
        let w = world().await;
        handle(&w.f, LambdaEvent::new(batch(), Context::default())).await;
        let calls = w.gateway.calls.total();
        let resp = handle(&w.f, LambdaEvent::new(batch(), Context::default())).await;
        assert_eq!(
            w.gateway.calls.total(),
            calls,
            "redelivery of settled operations"
        );
        assert!(failed(&resp).is_empty());
    }

    #[tokio::test]
    async fn a_failure_holds_back_the_rest_of_its_group_only() {
        let w = world().await;
        let mut event = batch();
        // A second message for ord-1001 right after the first, and the first gets a 429.
        let mut second = event.records[0].clone();
        second.message_id = Some("later-in-group".into());
        event.records.insert(1, second);
        w.gateway.script(FakeFault::RateLimited);
        let resp = handle(&w.f, LambdaEvent::new(event, Context::default())).await;
        assert_eq!(
            failed(&resp),
            ["059f36b4-87a3-44ab-83d2-661975830a7d", "later-in-group"]
        );
        assert_eq!(w.gateway.charge_count(), 1, "ord-1003 went on");
    }

    #[tokio::test]
    async fn unknown_is_acknowledged_and_left_to_the_index() {
        let w = world().await;
        w.gateway.script(FakeFault::LoseResponse);
        let resp = handle(&w.f, LambdaEvent::new(batch(), Context::default())).await;
        assert!(failed(&resp).is_empty());
        let op = w
            .store
            .all()
            .into_iter()
            .find(|op| op.order_id.as_str() == "ord-1001")
            .unwrap();
        assert_eq!(op.status, OperationStatus::Unknown);
        assert!(op.next_due_at.is_some(), "scheduled in the unknown index");
    }

    #[tokio::test]
    async fn a_rejected_create_goes_to_review_loudly() {
        let w = world().await;
        w.gateway.script(FakeFault::Rejected);
        handle(&w.f, LambdaEvent::new(batch(), Context::default())).await;
        assert_eq!(
            w.metrics.sum(
                "SentToReview",
                &[("Function", FUNCTION), ("ReasonClass", "rejected")]
            ),
            1.0
        );
        let in_review: Vec<_> = w
            .store
            .all()
            .into_iter()
            .filter(|op| op.review.is_some())
            .collect();
        assert_eq!(in_review.len(), 1);
        assert_eq!(in_review[0].order_id.as_str(), "ord-1001");
    }

    #[test]
    fn sample_batch_deserialises() {
        let event = batch();
        assert_eq!(event.records.len(), 3);
        assert_eq!(
            event.records[0]
                .attributes
                .get("MessageGroupId")
                .map(String::as_str),
            Some("ord-1001")
        );
        assert!(parse(&event.records[0]).is_ok());
        assert!(parse(&event.records[1]).is_err_and(|p| p.reason == "unparseable"));
    }
}
