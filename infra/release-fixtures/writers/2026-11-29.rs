//! Release fixture adapter of release 2026-11-29 (commit a3dbc62): what its API does differently
//! from the common writer's steps (`writers/common/main.rs`, which says how the two are put together).
//!
//! Before `requested_by`, the outbox and the webhook inbox: `Operation::new` takes no principal, no
//! `inbox.json`, no `outcome_events.json`. An operator's resolve is a `Resolution { by, note, at }`
//! (flat `resolved_*` attributes), not a history list; a redrive is a `Reschedule` carrying
//! `bump_redrives`, then a `QueuedOperation::redrive` sent by hand. Its `FakeGateway` cannot switch
//! its first status, so a second gateway answers `processing`.

use std::sync::Arc;
use std::time::Duration;

use charge_once::memory::FakeGateway;
use charge_core::operation::Resolution;
use charge_once::ports::{OperationQueue, OperationStore, QueuedOperation};
use charge_core::store::{ManualResolution, Recorded, Reschedule};
use charge_core::{domain::{ChargeParams, OrderId}, time::{Clock, Timestamp}, operation::{Operation, OperationStatus}, outcome::PaymentIntentStatus};

use crate::{Release, World, OPERATOR_LABEL};

/// chargectl's REDRIVE_DUE_IN at this commit.
const REDRIVE_DUE_IN: Duration = Duration::from_secs(5 * 60);

pub struct Adapter {
    /// Creates answer `processing`.
    processing: Arc<FakeGateway>,
}

impl Release for Adapter {
    fn new() -> Self {
        Adapter {
            processing: Arc::new(FakeGateway::with_first_status(
                PaymentIntentStatus::Processing,
            )),
        }
    }

    fn operation(
        order_id: OrderId,
        params: ChargeParams,
        now: Timestamp,
        pending_grace: Duration,
    ) -> Operation {
        Operation::new(order_id, params, now, pending_grace)
    }

    async fn execute_processing(&self, w: &World, op: &Operation) -> Operation {
        let after = w.execute_on(op, self.processing.clone()).await;
        // The same intent, mirrored into the main fake Stripe: the main gateway's ids then follow
        // the same sequence as in later releases (one gateway there), so the fixtures of all
        // releases name the same `pi_fake<n>` for the same case.
        w.gateway
            .insert_charge(op.operation_id, PaymentIntentStatus::Processing);
        after
    }

    async fn resolve_failed(&self, w: &World, reviewed: &Operation, note: &str) {
        let resolved = w
            .store
            .resolve(&ManualResolution {
                key: reviewed.key(),
                operation_id: reviewed.operation_id,
                status: OperationStatus::Failed,
                external_id: None,
                resolution: Resolution {
                    by: OPERATOR_LABEL.into(),
                    note: note.into(),
                    at: w.clock.now(),
                },
            })
            .await
            .unwrap();
        assert!(matches!(resolved, Recorded::Written(_)), "{resolved:?}");
    }

    async fn redrive(&self, w: &World, reviewed: &Operation, _note: &str) {
        let now = w.clock.now();
        let request = Reschedule {
            key: reviewed.key(),
            operation_id: reviewed.operation_id,
            expected_status: reviewed.status,
            expected_updated_at: reviewed.updated_at,
            next_due_at: now.plus(REDRIVE_DUE_IN),
            bump_redrives: true,
            clear_review: true,
            now,
        };
        let written = match w.store.reschedule(&request).await.unwrap() {
            Recorded::Written(op) => op,
            other => panic!("redrive refused: {other:?}"),
        };
        let message = QueuedOperation::redrive(&written, written.redrives);
        w.queue.send(&message).await.unwrap();
    }

    fn other_gateways(&self) -> Vec<&FakeGateway> {
        vec![&self.processing]
    }
}
