//! Release fixture adapter of release 2026-11-30 (commit ff42148): what its API does differently
//! from the common writer's steps (`writers/common/main.rs`, which says how the two are put together).
//!
//! Compared with 2026-11-29: `Operation::new` takes `requested_by` (a `Principal`), `external_id`
//! is a `PaymentIntentId`, the `FakeGateway` can switch its first status, an operator's
//! resolve/redrive appends an `AuditEntry` to `history` through an `OperatorGuard`, the re-drive is
//! `reconciler::redrive` (the count is bumped by every reschedule), and there are an inbox and an
//! outbox (`inbox.json`, `outcome_events.json`).

#[path = "inbox.rs"]
mod inbox;
#[path = "operator.rs"]
mod operator;
#[path = "outcome_events.rs"]
mod outcome_events;
#[path = "relay.rs"]
mod relay;

use std::time::Duration;

// Where this release keeps what `inbox.rs` and `outcome_events.rs` use.
use charge_once::events::{Admitted, EventInbox, INBOX_TTL};
use charge_core::{operation::{AuditEntry, Operation, OperationStatus}, domain::{ChargeParams, OrderId, Principal}, time::{Clock, Timestamp}, outcome::PaymentIntentStatus};
use relay::{image_json, publish};
use serde_json::Value;

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
    }
}
