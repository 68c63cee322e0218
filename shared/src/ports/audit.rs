//! Where the drift audit keeps its reports: one per window, for a person to work through
//! (`chargectl audit --show`). In production the operations table holds them under their own
//! partition (`AUDIT`), which no operation key can take and no index reads.

use async_trait::async_trait;
use charge_core::audit::AuditReport;

use crate::ports::{StoreError, UnreadableRecord};

/// The reports read back, newest window first; a stored report this release cannot read is
/// counted and skipped, never allowed to hide the rest.
#[derive(Debug, Clone, Default)]
pub struct StoredReports {
    pub reports: Vec<AuditReport>,
    pub unreadable: Vec<UnreadableRecord>,
}

#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Keeps `report`; a second report for the same window replaces the first (a re-run of the
    /// same window supersedes it: the audit never changes a record, so the latest read is the
    /// truest).
    async fn put_report(&self, report: &AuditReport) -> Result<(), StoreError>;

    /// The latest `limit` reports, newest window end first.
    async fn latest_reports(&self, limit: usize) -> Result<StoredReports, StoreError>;
}
