//! [`DynamoInbox`]: the [`EventInbox`] on its own small DynamoDB table.
//!
//! ## Table (`WebhookInboxTable` in template.yaml)
//! - Key: `event_id` (S), Stripe's `evt_…` id.
//! - `received_at` (N, ms), `expires_at` (N, **seconds** since the epoch: the table's TTL attribute).
//!
//! Why a table of its own and not a `STRIPE_EVENT#` prefix in the operations table: the
//! operations table's stream is the outbox (the notify function reads every write), its sparse
//! index and its alarms describe operations only, and TTL there would put expiring items next to
//! records that must never expire. Its own table keeps the webhook role to `PutItem`/`DeleteItem`
//! on this table and `GetItem`/`UpdateItem` on the operations table, nothing else.
//!
//! DynamoDB deletes expired items lazily (usually within days), so the condition also admits an
//! item whose expiry has passed.

use async_trait::async_trait;
use aws_sdk_dynamodb::client::Waiters;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use charge_core::time::Timestamp;

use crate::events::ttl_epoch_seconds;
use crate::ports::StoreError;
use crate::ports::{Admitted, EventInbox};

#[derive(Clone, Debug)]
pub struct DynamoInbox {
    client: Client,
    table: String,
}

impl DynamoInbox {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    pub fn table_name(&self) -> &str {
        &self.table
    }

    /// A failed call, naming the inbox table (DynamoDB's own answer to a wrong name does not).
    fn sdk_error(
        &self,
        what: &str,
        err: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::with_source(format!("{what} on inbox table {}", self.table), err)
    }

    /// Creates the table with TTL on `expires_at`, waiting (at most [`TABLE_ACTIVE_WAIT`]) for it
    /// to be ACTIVE before TTL is switched on (tests and the local stack; production uses
    /// template.yaml's `WebhookInboxTable`, held to the same schema by tests/template.rs).
    pub async fn create_table(&self) -> Result<(), StoreError> {
        use aws_sdk_dynamodb::types::{
            AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
            TimeToLiveSpecification,
        };
        let bad = |e| StoreError::with_source("bad table definition", e);
        self.client
            .create_table()
            .table_name(&self.table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(KEY)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .map_err(bad)?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(KEY)
                    .key_type(KeyType::Hash)
                    .build()
                    .map_err(bad)?,
            )
            .send()
            .await
            .map_err(|e| self.sdk_error("CreateTable", e))?;
        // DynamoDB refuses to change a table that is still CREATING (moto has none such): TTL is
        // switched on once the table is ACTIVE.
        self.client
            .wait_until_table_exists()
            .table_name(&self.table)
            .wait(TABLE_ACTIVE_WAIT)
            .await
            .map_err(|e| self.sdk_error("waiting for ACTIVE", e))?;
        self.client
            .update_time_to_live()
            .table_name(&self.table)
            .time_to_live_specification(
                TimeToLiveSpecification::builder()
                    .attribute_name(TTL_ATTRIBUTE)
                    .enabled(true)
                    .build()
                    .map_err(bad)?,
            )
            .send()
            .await
            .map_err(|e| self.sdk_error("UpdateTimeToLive", e))?;
        Ok(())
    }
}

/// How long [`DynamoInbox::create_table`] waits for a new table to be ACTIVE.
pub const TABLE_ACTIVE_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The table's key attribute.
pub const KEY: &str = "event_id";
/// The TTL attribute (seconds since the epoch).
pub const TTL_ATTRIBUTE: &str = "expires_at";

#[async_trait]
impl EventInbox for DynamoInbox {
    async fn admit(
        &self,
        event_id: &str,
        received_at: Timestamp,
        expires_at: Timestamp,
    ) -> Result<Admitted, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("event_id", AttributeValue::S(event_id.to_owned()))
            .item(
                "received_at",
                AttributeValue::N(received_at.as_millis().to_string()),
            )
            .item(
                "expires_at",
                AttributeValue::N(ttl_epoch_seconds(expires_at).to_string()),
            )
            .condition_expression("attribute_not_exists(event_id) OR expires_at <= :now")
            .expression_attribute_values(
                ":now",
                AttributeValue::N(ttl_epoch_seconds(received_at).to_string()),
            )
            .send()
            .await;
        match result {
            Ok(_) => Ok(Admitted::New),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(Admitted::Duplicate)
            }
            Err(e) => Err(self.sdk_error("PutItem", e)),
        }
    }

    async fn forget(&self, event_id: &str) -> Result<(), StoreError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key("event_id", AttributeValue::S(event_id.to_owned()))
            .send()
            .await
            .map_err(|e| self.sdk_error("DeleteItem", e))?;
        Ok(())
    }
}
