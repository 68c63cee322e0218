//! Release fixture adapter of release 2026-12-03 (commit cc00fab): what its API does differently
//! from the common writer's steps (`writers/common/main.rs`, which says how the two are put together).
//!
//! Compared with 2026-12-01 (copied from its adapter): the ports are a folder, and the inbox's
//! `Admitted`/`EventInbox`/`INBOX_TTL` live in `ports`; an `AuditEntry` has
//! `replaced_external_id` (none for `resolve --failed`); the notify relay reads each settled outcome
//! back from the table before publishing it and copies what it cannot publish to a dead-letter
//! queue, so its `Notify` takes the store, a DLQ and a metrics sink (`relay.rs` is not declared:
//! `publish` is here); the `EventBridgePublisher` is in `charge_once::adapters::eventbridge`, and an
//! item's DynamoDB JSON image is `item::item_json`.

#[path = "inbox.rs"]
mod inbox;
#[path = "operator.rs"]
mod operator;
#[path = "outcome_events.rs"]
mod outcome_events;

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::dynamodb::EventRecord;
use charge_once::adapters::eventbridge::EventBridgePublisher;
use charge_once::adapters::sqs::SqsDeadLetters;
use charge_once::telemetry::DiscardMetrics;
use charge_core::{operation::{AuditEntry, Operation, OperationStatus}, domain::{ChargeParams, OrderId, Principal}, time::{Clock, Timestamp}, outcome::PaymentIntentStatus};
use notify::handler::{relay, Notify};
use serde_json::Value;
use testkit::aws::fresh_queue;

// Where this release keeps what `inbox.rs` and `outcome_events.rs` use.
use charge_once::adapters::dynamodb::item::item_json as image_json;
use charge_once::ports::{Admitted, EventInbox, INBOX_TTL};

use crate::{Release, World, OPERATOR_ARN, OPERATOR_LABEL, REQUESTED_BY};

/// chargectl's REDRIVE_DUE_IN and LEASE_MARGIN at this commit.
const REDRIVE_DUE_IN: Duration = Duration::from_secs(5 * 60);
const LEASE_MARGIN: Duration = Duration::from_secs(120);

pub struct Adapter;

impl Release for Adapter {
    fn new() -> Self {
        Adapter
    }

    fn operation(
        order_id: OrderId,
        params: ChargeParams,
        now: Timestamp,
        pending_grace: Duration,
    ) -> Operation {
        ChargeParams::check_chargeable(params.amount, &params.currency)
            .expect("an amount Stripe accepts");
        let requested_by = Principal::iam(REQUESTED_BY).unwrap();
        Operation::new(order_id, params, requested_by, now, pending_grace)
    }

    async fn execute_processing(&self, w: &World, op: &Operation) -> Operation {
        w.gateway.set_first_status(PaymentIntentStatus::Processing);
        let after = w.execute(op).await;
        w.gateway.set_first_status(PaymentIntentStatus::Succeeded);
        after
    }

    async fn resolve_failed(&self, w: &World, reviewed: &Operation, note: &str) {
        operator::resolve_failed(w, reviewed, note).await;
    }

    async fn redrive(&self, w: &World, reviewed: &Operation, note: &str) {
        operator::redrive(w, reviewed, note).await;
    }

    async fn more_files(&self, w: &World) -> Vec<(&'static str, Vec<Value>)> {
        vec![
            ("inbox.json", inbox::entries(w).await),
            ("outcome_events.json", outcome_events::delivered(w).await),
        ]
    }
}

/// What chargectl writes into the history for an operator's action at this commit.
fn audit(
    w: &World,
    action: &str,
    op: &Operation,
    new_status: OperationStatus,
    note: &str,
) -> AuditEntry {
    AuditEntry {
        action: action.into(),
        previous_status: op.status,
        new_status,
        note: note.into(),
        at: w.clock.now(),
        caller: OPERATOR_ARN.into(),
        label: Some(OPERATOR_LABEL.into()),
        forced: None,
        // chargectl moves the record's review reason into the entry, so a settled record keeps why
        // it was in review.
        review: op.review.as_ref().map(|r| r.reason.clone()),
        replaced_external_id: None,
    }
}

/// The release's notify relay over `records`, publishing to `bus` with its EventBridge publisher,
/// reading back from the operations table, with a fresh standard queue as its DLQ: how many events
/// it published.
async fn publish(
    w: &World,
    events: &aws_sdk_eventbridge::Client,
    bus: &str,
    records: &[EventRecord],
) -> usize {
    let dlq = fresh_queue(&w.sqs, "notify-dlq").await;
    let deps = Notify {
        store: w.store.clone(),
        publisher: Arc::new(EventBridgePublisher::new(events.clone(), bus)),
        dead_letters: Arc::new(SqsDeadLetters::new(w.sqs.clone(), &dlq)),
        clock: Arc::new(w.clock.clone()),
        metrics: Arc::new(DiscardMetrics),
    };
    let (response, report) = relay(&deps, records).await;
    assert!(response.batch_item_failures.is_empty(), "{report:?}");
    assert_eq!(report.not_in_table + report.parked, 0, "{report:?}");
    report.published
}
