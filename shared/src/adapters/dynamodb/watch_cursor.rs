//! The refund watch's cursor ([`RefundWatchCursor`]) in the operations table: one item under its
//! own partition (`pk = WATCH`, `sk = refunds`, [`super::schema::WATCH_PK`]), holding
//! `watched_through` (ms). No index key, no `status`: no index lists it and the stream's filter
//! never passes it to the relay (which skips it by its key besides). Read consistently; moved by
//! one conditional UpdateItem from the value read, so of two overlapping ticks one moves it.

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use charge_core::time::Timestamp;

use super::item::{attr_n, attr_s};
use super::schema::{DISPUTE_WATCH_SK, PK, SK, WATCHED_THROUGH, WATCH_PK, WATCH_SK};
use super::DynamoStore;
use crate::ports::{DisputeWatchCursor, RefundWatchCursor, StoreError};

#[async_trait]
impl RefundWatchCursor for DynamoStore {
    async fn watched_through(&self) -> Result<Option<Timestamp>, StoreError> {
        self.cursor_at(WATCH_SK).await
    }

    async fn advance_watch(
        &self,
        from: Option<Timestamp>,
        to: Timestamp,
    ) -> Result<bool, StoreError> {
        self.advance_cursor(WATCH_SK, from, to).await
    }
}

/// The dispute watch's cursor: the same item shape under `sk = disputes`.
#[async_trait]
impl DisputeWatchCursor for DynamoStore {
    async fn disputes_listed_through(&self) -> Result<Option<Timestamp>, StoreError> {
        self.cursor_at(DISPUTE_WATCH_SK).await
    }

    async fn advance_dispute_watch(
        &self,
        from: Option<Timestamp>,
        to: Timestamp,
    ) -> Result<bool, StoreError> {
        self.advance_cursor(DISPUTE_WATCH_SK, from, to).await
    }
}

impl DynamoStore {
    async fn cursor_at(&self, sk: &str) -> Result<Option<Timestamp>, StoreError> {
        self.calls.read();
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, attr_s(WATCH_PK))
            .key(SK, attr_s(sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.sdk_error("GetItem (refund watch)", e))?;
        let Some(item) = out.item else {
            return Ok(None);
        };
        match item.get(WATCHED_THROUGH) {
            Some(aws_sdk_dynamodb::types::AttributeValue::N(n)) => n
                .parse::<i64>()
                .map(|ms| Some(Timestamp::from_millis(ms)))
                .map_err(|_| StoreError::new(format!("{WATCHED_THROUGH}: not an integer"))),
            _ => Err(StoreError::new(format!(
                "the watch's item {sk} has no number {WATCHED_THROUGH}"
            ))),
        }
    }

    async fn advance_cursor(
        &self,
        sk: &str,
        from: Option<Timestamp>,
        to: Timestamp,
    ) -> Result<bool, StoreError> {
        self.calls.write();
        let request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, attr_s(WATCH_PK))
            .key(SK, attr_s(sk))
            .update_expression("SET #through = :to")
            .expression_attribute_names("#through", WATCHED_THROUGH)
            .expression_attribute_values(":to", attr_n(to.as_millis()));
        let request = match from {
            None => request.condition_expression("attribute_not_exists(#through)"),
            Some(from) => request
                .condition_expression("#through = :from")
                .expression_attribute_values(":from", attr_n(from.as_millis())),
        };
        match request.send().await {
            Ok(_) => Ok(true),
            Err(err) => match err.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(_)) => Ok(false),
                _ => Err(self.sdk_error("UpdateItem (refund watch)", err)),
            },
        }
    }
}
