//! [`SqsQueue`]: the [`ChargeQueue`] on an SQS FIFO queue.
//!
//! `MessageDeduplicationId` is the operation id (`operation_id:<n>` for the n-th deliberate
//! re-drive), so a checkout retried within SQS's 5-minute window never queues twice;
//! `MessageGroupId` is the order id, so one order's messages stay in order and unrelated orders
//! never wait for each other. The body is a versioned JSON with no amount and no card data.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use aws_sdk_sqs::Client;

use crate::ports::{ChargeQueue, DeadLetter, DeadLetterQueue, QueueError, QueuedCharge};

pub struct SqsQueue {
    client: Client,
    queue_url: String,
    /// `SendMessage` calls made.
    pub sends: AtomicU64,
}

impl fmt::Debug for SqsQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqsQueue")
            .field("queue_url", &self.queue_url)
            .finish_non_exhaustive()
    }
}

impl SqsQueue {
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            sends: AtomicU64::new(0),
        }
    }

    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Messages in the queue, visible or in flight, as SQS approximates them.
    pub async fn approximate_depth(&self) -> Result<u64, QueueError> {
        use aws_sdk_sqs::types::QueueAttributeName;
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(&self.queue_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .map_err(|e| QueueError::with_source("GetQueueAttributes", e))?;
        let attrs = out.attributes().cloned().unwrap_or_default();
        Ok([
            QueueAttributeName::ApproximateNumberOfMessages,
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        ]
        .iter()
        .map(|k| {
            attrs
                .get(k)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum())
    }
}

#[async_trait]
impl ChargeQueue for SqsQueue {
    async fn send(&self, charge: &QueuedCharge) -> Result<(), QueueError> {
        let body = serde_json::to_string(&charge.message)
            .map_err(|e| QueueError::with_source("cannot encode message", e))?;
        self.sends.fetch_add(1, Ordering::Relaxed);
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .message_group_id(&charge.group_id)
            .message_deduplication_id(&charge.dedup_id)
            .send()
            .await
            .map_err(|e| QueueError::with_source("SendMessage", e))?;
        Ok(())
    }
}

/// [`DeadLetterQueue`] on the charge queue's FIFO DLQ: the body as received, the reason in
/// message attributes (`reason`, `detail`, `source_message_id`, `source_group_id`), the source
/// message id as the dedup id (a redelivered poison message is parked once).
pub struct SqsDeadLetters {
    client: Client,
    queue_url: String,
}

impl fmt::Debug for SqsDeadLetters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqsDeadLetters")
            .field("queue_url", &self.queue_url)
            .finish_non_exhaustive()
    }
}

impl SqsDeadLetters {
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
        }
    }
}

/// A string message attribute; SQS refuses empty values, so an empty one is sent as `-`.
fn string_attribute(value: &str) -> Result<aws_sdk_sqs::types::MessageAttributeValue, QueueError> {
    let value = if value.is_empty() { "-" } else { value };
    aws_sdk_sqs::types::MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .map_err(|e| QueueError::with_source("bad message attribute", e))
}

#[async_trait]
impl DeadLetterQueue for SqsDeadLetters {
    async fn park(&self, letter: &DeadLetter) -> Result<(), QueueError> {
        // SQS limits: a body of at least one character; a dedup id of at most 128.
        let body = if letter.body.is_empty() {
            "(empty body)"
        } else {
            letter.body.as_str()
        };
        let dedup: String = letter.message_id.chars().take(128).collect();
        let group = letter.group_id.as_deref().unwrap_or("poison");
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .message_group_id(group)
            .message_deduplication_id(if dedup.is_empty() { "unknown" } else { &dedup })
            .message_attributes("reason", string_attribute(&letter.reason)?)
            .message_attributes("detail", string_attribute(&letter.detail)?)
            .message_attributes("source_message_id", string_attribute(&letter.message_id)?)
            .message_attributes("source_group_id", string_attribute(group)?)
            .send()
            .await
            .map_err(|e| QueueError::with_source("SendMessage (dead-letter queue)", e))?;
        Ok(())
    }
}
