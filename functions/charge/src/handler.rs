//! One SQS FIFO batch, processed in order.
//!
//! For each record: parse the body (a malformed one fails that item and is logged with its message
//! id: never a panic, never a silently dropped charge — after the queue's receive limit it lands
//! in the DLQ, which alarms), then run the executor. An item fails when the executor says nothing
//! happened and it should be retried (429, 409 in flight, auth, a live lease elsewhere) or when the
//! store is unavailable. After a failed item, the later items of the **same message group** in the
//! batch fail too, so one order's messages never overtake each other; other groups go on.
//!
//! Who drives the retry of an `unknown` outcome: **the unknown index**, not SQS. The item is
//! acknowledged once `unknown` and its next due time are recorded, and the reconciler re-drives it
//! with backoff. Leaving it to SQS would hold the order's FIFO group hostage to visibility timeouts
//! for up to 23 hours and push it to the DLQ after the receive limit, while the index keeps a durable,
//! queryable schedule that also survives a lost message. "Nothing happened" answers do go back to
//! SQS: a retry a visibility timeout later is exactly what they need.

use std::collections::HashSet;

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use charge_once::executor::{execute_charge, ChargeDeps, ExecuteError};
use charge_once::ports::ChargeMessage;
use lambda_runtime::LambdaEvent;
use tracing::{error, info, warn, Instrument};

/// What happened to one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemOutcome {
    /// Done with it (settled, recorded as unknown and scheduled, in review, or superseded).
    Acknowledged,
    /// Report as a batch item failure: SQS delivers it again.
    Retry(&'static str),
}

/// Handles a batch; returns the items to retry.
pub async fn handle(deps: &ChargeDeps, event: LambdaEvent<SqsEvent>) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    let mut failed_groups: HashSet<String> = HashSet::new();
    for record in &event.payload.records {
        let message_id = record.message_id.clone().unwrap_or_default();
        let group = record.attributes.get("MessageGroupId").cloned();
        let outcome = match &group {
            Some(g) if failed_groups.contains(g) => {
                info!(%message_id, group = %g, "an earlier message of this group failed; keeping order");
                ItemOutcome::Retry("earlier message in group failed")
            }
            _ => process(deps, record, &message_id).await,
        };
        if let ItemOutcome::Retry(_) = outcome {
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
    response
}

async fn process(deps: &ChargeDeps, record: &SqsMessage, message_id: &str) -> ItemOutcome {
    let message = match parse(record) {
        Ok(m) => m,
        Err(reason) => {
            error!(%message_id, %reason, "malformed charge message; failing the item (DLQ after the receive limit)");
            return ItemOutcome::Retry("malformed");
        }
    };
    let span = tracing::info_span!(
        "charge_message",
        %message_id,
        order_id = %message.order_id,
        operation_id = %message.operation_id
    );
    async {
        match execute_charge(deps, &message.key(), &message.operation_id).await {
            Ok(report) if report.disposition.wants_retry() => {
                info!(disposition = ?report.disposition, "nothing happened; the message will come back");
                ItemOutcome::Retry("retry later")
            }
            Ok(report) => {
                info!(status = %report.status, disposition = ?report.disposition, gateway_calls = report.gateway_calls, "done");
                ItemOutcome::Acknowledged
            }
            Err(ExecuteError::NotFound { .. }) => {
                error!("no such operation; failing the item (DLQ after the receive limit)");
                ItemOutcome::Retry("operation not found")
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

fn parse(record: &SqsMessage) -> Result<ChargeMessage, String> {
    let body = record.body.as_deref().ok_or("no body")?;
    let message: ChargeMessage =
        serde_json::from_str(body).map_err(|e| format!("not a charge message: {e}"))?;
    if message.v != ChargeMessage::VERSION {
        return Err(format!("unsupported message version {}", message.v));
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    use charge_once::executor::ChargePolicy;
    use charge_once::memory::{FakeFault, FakeGateway, MemoryStore};
    use charge_once::ports::OperationStore;
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

    async fn world() -> (ChargeDeps, Arc<MemoryStore>, Arc<FakeGateway>) {
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
        let deps = ChargeDeps {
            store: store.clone(),
            gateway: gateway.clone(),
            clock: Arc::new(clock),
            policy: ChargePolicy::default(),
        };
        (deps, store, gateway)
    }

    fn failed(resp: &SqsBatchResponse) -> Vec<&str> {
        resp.batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect()
    }

    #[tokio::test]
    async fn malformed_record_fails_alone_and_the_rest_is_charged() {
        let (deps, store, gateway) = world().await;
        let resp = handle(&deps, LambdaEvent::new(batch(), Context::default())).await;
        assert_eq!(failed(&resp), ["2e1424d4-f796-459a-8184-9c92662be6da"]);
        assert_eq!(gateway.charge_count(), 2);
        assert!(store
            .all()
            .iter()
            .all(|op| op.status == OperationStatus::Succeeded));
    }

    #[tokio::test]
    async fn a_settled_operation_makes_no_gateway_call() {
        let (deps, _store, gateway) = world().await;
        handle(&deps, LambdaEvent::new(batch(), Context::default())).await;
        let calls = gateway.calls.total();
        let resp = handle(&deps, LambdaEvent::new(batch(), Context::default())).await;
        assert_eq!(
            gateway.calls.total(),
            calls,
            "redelivery of settled operations"
        );
        assert_eq!(failed(&resp).len(), 1, "only the malformed one");
    }

    #[tokio::test]
    async fn a_failure_holds_back_the_rest_of_its_group_only() {
        let (deps, _store, gateway) = world().await;
        let mut event = batch();
        // A second message for ord-1001 right after the first, and the first gets a 429.
        let mut second = event.records[0].clone();
        second.message_id = Some("later-in-group".into());
        event.records.insert(1, second);
        gateway.script(FakeFault::RateLimited);
        let resp = handle(&deps, LambdaEvent::new(event, Context::default())).await;
        assert_eq!(
            failed(&resp),
            [
                "059f36b4-87a3-44ab-83d2-661975830a7d",
                "later-in-group",
                "2e1424d4-f796-459a-8184-9c92662be6da"
            ]
        );
        assert_eq!(gateway.charge_count(), 1, "ord-1003 went on");
    }

    #[tokio::test]
    async fn unknown_is_acknowledged_and_left_to_the_index() {
        let (deps, store, gateway) = world().await;
        gateway.script(FakeFault::LoseResponse);
        let resp = handle(&deps, LambdaEvent::new(batch(), Context::default())).await;
        assert_eq!(failed(&resp).len(), 1, "only the malformed one");
        let op = store
            .all()
            .into_iter()
            .find(|op| op.order_id.as_str() == "ord-1001")
            .unwrap();
        assert_eq!(op.status, OperationStatus::Unknown);
        assert!(op.next_due_at.is_some(), "scheduled in the unknown index");
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
        assert!(parse(&event.records[1]).is_err());
    }
}
