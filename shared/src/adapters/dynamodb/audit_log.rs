//! The drift audit's reports in the operations table ([`AuditLog`]), under their own partition
//! (`pk = AUDIT`, see [`super::item`]'s module doc): a PutItem per report, so a report of the same
//! window replaces the last; a backwards Query of the partition gives the newest windows first.

use std::collections::HashMap;

use async_trait::async_trait;

use super::item::{attr_s, report_from_item, report_to_item};
use super::schema::{AUDIT_PK, PK};
use super::DynamoStore;
use crate::ports::{AuditLog, StoreError, StoredReports};
use charge_core::audit::AuditReport;

#[async_trait]
impl AuditLog for DynamoStore {
    async fn put_report(&self, report: &AuditReport) -> Result<(), StoreError> {
        self.calls.write();
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(report_to_item(report)?))
            .send()
            .await
            .map_err(|e| self.sdk_error("PutItem (audit report)", e))?;
        Ok(())
    }

    async fn latest_reports(&self, limit: usize) -> Result<StoredReports, StoreError> {
        let limit = limit.clamp(1, 1000);
        let mut stored = StoredReports::default();
        let mut start = None;
        // A page can stop short of `limit` (DynamoDB's 1 MB per Query): read on until enough.
        loop {
            let left = limit - stored.reports.len() - stored.unreadable.len();
            self.calls.query();
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("#pk = :audit")
                .expression_attribute_names("#pk", PK)
                .set_expression_attribute_values(Some(HashMap::from([(
                    ":audit".to_owned(),
                    attr_s(AUDIT_PK),
                )])))
                .scan_index_forward(false)
                .limit(i32::try_from(left).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| self.sdk_error("Query audit reports", e))?;
            for item in out.items() {
                match report_from_item(item) {
                    Ok(report) => stored.reports.push(report),
                    Err(unreadable) => stored.unreadable.push(unreadable),
                }
            }
            start = out.last_evaluated_key().cloned();
            let taken = stored.reports.len() + stored.unreadable.len();
            if start.is_none() || taken >= limit {
                return Ok(stored);
            }
        }
    }
}
