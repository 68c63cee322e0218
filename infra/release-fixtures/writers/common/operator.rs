//! An operator's resolve and redrive as `chargectl` writes them from 2026-11-30 on: guarded by an
//! `OperatorGuard` (the record as read, leases counted live until their expiry plus
//! `LEASE_MARGIN`) that appends the adapter's `audit` entry to the record's `history`; the re-drive
//! is the release's `reconciler::redrive` (the reschedule, then the message).

use charge_core::store::{ManualResolution, OperatorGuard, Recorded, Reschedule};
use charge_once::ports::OperationStore;
use charge_once::reconciler::{redrive as reconciler_redrive, Redriven};
use charge_core::{time::Clock, operation::{Operation, OperationStatus}};

use super::{audit, LEASE_MARGIN, REDRIVE_DUE_IN};
use crate::World;

/// `chargectl resolve --failed`: the store's resolve.
pub async fn resolve_failed(w: &World, reviewed: &Operation, note: &str) {
    let now = w.clock.now();
    let audit = audit(w, "resolve_failed", reviewed, OperationStatus::Failed, note);
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
}

/// `chargectl redrive`: the guarded reschedule (a re-drive counted, the review cleared, the history
/// appended), then the message with dedup id `<operation_id>:<redrives>`.
pub async fn redrive(w: &World, reviewed: &Operation, note: &str) {
    let now = w.clock.now();
    let audit = audit(w, "redrive", reviewed, reviewed.status, note);
    let request = Reschedule {
        clear_review: true,
        operator: Some(OperatorGuard {
            lease_cutoff: now.minus(LEASE_MARGIN),
            audit,
        }),
        ..Reschedule::redrive(reviewed, now.plus(REDRIVE_DUE_IN), now)
    };
    match reconciler_redrive(w.store.as_ref(), w.queue.as_ref(), request)
        .await
        .unwrap()
    {
        Redriven::Sent { .. } => {}
        Redriven::Refused(current) => panic!("redrive refused: {current:?}"),
        Redriven::NotSent { error, .. } => panic!("redrive not sent: {error}"),
    }
}
