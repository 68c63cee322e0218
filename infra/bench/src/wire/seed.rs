//! The seed's flow (`exactly-once-effects-idempotency-reconciliation.txt`, §5.1 and §5.4) ported
//! straight to DynamoDB and SQS, one SQL statement per request: **a baseline for counting requests
//! only, not production code** — no lease, no fencing, no unknown index, nothing here is safe to
//! run concurrently, and nothing outside `infra/bench` may use it.
//!
//! - `request_charge`: `INSERT ... ON CONFLICT DO NOTHING` → conditional PutItem; on conflict the
//!   `SELECT` → GetItem (strongly consistent, as the conflicting row is read in the transaction).
//!   Then the message to the charge function → SendMessage (the seed's outbox dispatcher).
//! - `execute`: `_load` → GetItem (strongly consistent); settled → stop; external id known →
//!   retrieve; past the 23 h key window → search; otherwise `_mark_attempt_started` → UpdateItem,
//!   create with the same key, `_record` → UpdateItem guarded by `status IN (pending, unknown)`.
//! - finding work for a reconciliation run: the seed has no index, so its straight port is a Scan
//!   filtered on the status (billed for every item scanned, settled or not).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use charge_core::outcome::outcome_for;
use charge_core::{
    domain::OperationId,
    operation::{Operation, OperationKey, OperationStatus},
    outcome::{GatewayError, PaymentIntent},
    time::Clock,
};
use charge_once::adapters::dynamodb::item::{
    attr_n, attr_s, key_of, operation_from_item, operation_to_item,
};
use charge_once::ports::{
    CreatePaymentIntent, OperationMessage, OperationQueue, PaymentGateway, QueuedOperation,
};

/// The seed's key window: re-send with the same key only within 23 h of the first attempt.
pub const IDEMPOTENCY_SAFE_WINDOW: Duration = Duration::from_secs(23 * 3600);

pub struct SeedPort {
    pub client: aws_sdk_dynamodb::Client,
    pub table: String,
    pub queue: Arc<dyn OperationQueue>,
    pub gateway: Arc<dyn PaymentGateway>,
    pub clock: Arc<dyn Clock>,
}

type Error = Box<dyn std::error::Error + Send + Sync>;

impl SeedPort {
    /// The table: the business identity as its key (the seed's `UNIQUE (order_id, kind)`), no index.
    pub async fn create_table(&self) -> Result<(), Error> {
        let def = |n: &str| {
            AttributeDefinition::builder()
                .attribute_name(n)
                .attribute_type(ScalarAttributeType::S)
                .build()
        };
        let key = |n: &str, t| {
            KeySchemaElement::builder()
                .attribute_name(n)
                .key_type(t)
                .build()
        };
        self.client
            .create_table()
            .table_name(&self.table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(def("pk")?)
            .attribute_definitions(def("sk")?)
            .key_schema(key("pk", KeyType::Hash)?)
            .key_schema(key("sk", KeyType::Range)?)
            .send()
            .await?;
        Ok(())
    }

    async fn load(&self, key: &OperationKey) -> Result<Option<Operation>, Error> {
        let (pk, sk) = key_of(key);
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", attr_s(&pk))
            .key("sk", attr_s(&sk))
            .consistent_read(true)
            .send()
            .await?;
        Ok(out.item().map(operation_from_item).transpose()?)
    }

    /// `request_charge` plus the outbox send. Returns the operation (ours or the winner's).
    pub async fn request_charge(&self, op: &Operation) -> Result<Operation, Error> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(operation_to_item(op)))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match result {
            Ok(_) => {
                self.queue.send(&QueuedOperation::first(op)).await?;
                Ok(op.clone())
            }
            Err(e)
                if matches!(
                    e.as_service_error(),
                    Some(PutItemError::ConditionalCheckFailedException(_))
                ) =>
            {
                self.load(&op.key())
                    .await?
                    .ok_or_else(|| "conflict but no row".into())
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn mark_attempt_started(&self, key: &OperationKey) -> Result<(), Error> {
        let (pk, sk) = key_of(key);
        self.client
            .update_item()
            .table_name(&self.table)
            .key("pk", attr_s(&pk))
            .key("sk", attr_s(&sk))
            .update_expression("SET first_attempted_at = if_not_exists(first_attempted_at, :now)")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":now", attr_n(self.clock.now().as_millis()))
            .send()
            .await?;
        Ok(())
    }

    async fn record(
        &self,
        key: &OperationKey,
        status: OperationStatus,
        external_id: Option<&str>,
        error: Option<&str>,
    ) -> Result<(), Error> {
        let (pk, sk) = key_of(key);
        let mut set = vec![
            "#status = :status",
            "attempts = attempts + :one",
            "updated_at = :now",
        ];
        let mut values = HashMap::from([
            (":status".to_owned(), attr_s(status.as_str())),
            (":one".to_owned(), attr_n(1)),
            (":now".to_owned(), attr_n(self.clock.now().as_millis())),
            (":pending".to_owned(), attr_s("pending")),
            (":unknown".to_owned(), attr_s("unknown")),
        ]);
        if let Some(id) = external_id {
            set.push("external_id = :ext");
            values.insert(":ext".into(), attr_s(id));
        }
        let mut update = format!("SET {}", set.join(", "));
        match error {
            Some(e) => {
                update.push_str(", last_error = :err");
                values.insert(":err".into(), attr_s(e));
            }
            None => update.push_str(" REMOVE last_error"),
        }
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", attr_s(&pk))
            .key("sk", attr_s(&sk))
            .update_expression(update)
            .condition_expression("#status IN (:pending, :unknown)")
            .expression_attribute_names("#status", "status")
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            // `WHERE status IN (...)` matching no row: the seed ignores it.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn record_charge(
        &self,
        key: &OperationKey,
        pi: &PaymentIntent,
    ) -> Result<OperationStatus, Error> {
        let status = outcome_for(&pi.status);
        self.record(key, status, Some(&pi.id), None).await?;
        Ok(status)
    }

    /// The seed's `execute`, safe to call any number of times (sequentially).
    pub async fn execute(
        &self,
        key: &OperationKey,
        operation_id: &OperationId,
    ) -> Result<OperationStatus, Error> {
        let op = self
            .load(key)
            .await?
            .filter(|op| op.operation_id == *operation_id)
            .ok_or("no such operation")?;
        if op.status.is_settled() {
            return Ok(op.status);
        }
        if let Some(id) = &op.external_id {
            let pi = self.gateway.retrieve(id).await?;
            return self.record_charge(key, &pi).await;
        }
        if op.key_window_passed(self.clock.now(), IDEMPOTENCY_SAFE_WINDOW) {
            let found = self.gateway.search_by_operation(&op.operation_id).await?;
            if found.len() != 1 {
                let reason = format!(
                    "key window expired; {} match(es); needs review",
                    found.len()
                );
                self.record(key, OperationStatus::Unknown, None, Some(&reason))
                    .await?;
                return Ok(OperationStatus::Unknown);
            }
            return self.record_charge(key, &found[0]).await;
        }
        self.mark_attempt_started(key).await?;
        match self
            .gateway
            .create(&CreatePaymentIntent::for_operation(&op).expect("a charge operation"))
            .await
        {
            Ok(pi) => self.record_charge(key, &pi).await,
            Err(GatewayError::Declined { code, .. }) => {
                self.record(key, OperationStatus::Failed, None, Some(&code))
                    .await?;
                Ok(OperationStatus::Failed)
            }
            Err(e @ GatewayError::RetryLater { .. }) => {
                self.record(key, op.status, None, Some(&e.to_string()))
                    .await?;
                Ok(op.status)
            }
            // Ambiguous: unknown, never failed. The seed lets a key misuse escape as an exception;
            // its port records it as unknown with the error, which costs the same one write.
            Err(e) => {
                self.record(key, OperationStatus::Unknown, None, Some(&e.to_string()))
                    .await?;
                Ok(OperationStatus::Unknown)
            }
        }
    }

    /// A message as the seed's consumer gets it.
    pub async fn handle_message(&self, body: &str) -> Result<OperationStatus, Error> {
        let m: OperationMessage = serde_json::from_str(body)?;
        self.execute(&m.key(), &m.operation_id).await
    }

    /// Finds unsettled operations the only way the seed's schema allows: a Scan on the status.
    pub async fn unsettled(&self) -> Result<Vec<Operation>, Error> {
        let mut found = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("#status IN (:pending, :unknown)")
                .expression_attribute_names("#status", "status")
                .expression_attribute_values(":pending", attr_s("pending"))
                .expression_attribute_values(":unknown", attr_s("unknown"))
                .set_exclusive_start_key(start)
                .send()
                .await?;
            for item in out.items() {
                found.push(operation_from_item(item)?);
            }
            match out.last_evaluated_key() {
                Some(k) => start = Some(k.clone()),
                None => break,
            }
        }
        Ok(found)
    }
}
