//! [`SqsQueue`]: the [`OperationQueue`] on an SQS FIFO queue.
//!
//! `MessageDeduplicationId` is the operation id (`operation_id:<n>` for the n-th deliberate
//! re-drive), so a checkout retried within SQS's 5-minute window never queues twice;
//! `MessageGroupId` is the order id, so one order's messages stay in order and unrelated orders
//! never wait for each other. The body is a versioned JSON with no amount and no card data.
//!
//! [`SqsDeadLetters`]: the [`DeadLetterQueue`] on an SQS queue, FIFO (the charge queue's DLQ) or
//! standard (the notify relay's DLQ), told apart by the queue URL.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use charge_core::reconcile_plan::QueueDepth;

use crate::ports::{
    DeadLetter, DeadLetterQueue, MessageVisibility, OperationQueue, QueueError, QueuedOperation,
};

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

    /// A failed call, naming the queue: SQS's own answer to a wrong URL does not.
    fn sdk_error(
        &self,
        what: &str,
        err: impl std::error::Error + Send + Sync + 'static,
    ) -> QueueError {
        QueueError::with_source(format!("{what} on queue {}", self.queue_url), err)
    }

    /// Messages in the queue, visible or in flight, as SQS approximates them.
    pub async fn approximate_depth(&self) -> Result<u64, QueueError> {
        let depth = self.attributes_depth().await?;
        Ok(depth.visible + depth.in_flight)
    }

    /// `GetQueueAttributes` for the two approximate counts; a count SQS does not give is an
    /// error, not a 0 (a 0 would read as "not behind").
    async fn attributes_depth(&self) -> Result<QueueDepth, QueueError> {
        use aws_sdk_sqs::types::QueueAttributeName as A;
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(&self.queue_url)
            .attribute_names(A::ApproximateNumberOfMessages)
            .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .map_err(|e| self.sdk_error("GetQueueAttributes", e))?;
        let count = |name: &A| -> Result<u64, QueueError> {
            let value = out.attributes().and_then(|a| a.get(name));
            value.and_then(|v| v.parse().ok()).ok_or_else(|| {
                QueueError::new(format!(
                    "GetQueueAttributes on queue {} answered {name} as {value:?}, not a count",
                    self.queue_url
                ))
            })
        };
        Ok(QueueDepth {
            visible: count(&A::ApproximateNumberOfMessages)?,
            in_flight: count(&A::ApproximateNumberOfMessagesNotVisible)?,
        })
    }
}

#[async_trait]
impl OperationQueue for SqsQueue {
    async fn send(&self, charge: &QueuedOperation) -> Result<(), QueueError> {
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
            .map_err(|e| self.sdk_error("SendMessage", e))?;
        Ok(())
    }

    async fn depth(&self) -> Result<Option<QueueDepth>, QueueError> {
        self.attributes_depth().await.map(Some)
    }
}

#[async_trait]
impl MessageVisibility for SqsQueue {
    async fn return_after(
        &self,
        receipt_handle: &str,
        delay: std::time::Duration,
    ) -> Result<(), QueueError> {
        // SQS takes whole seconds (0–43,200); round up so "in 1.4 s" is never "now".
        let secs = delay.as_millis().div_ceil(1000).min(43_200) as i32;
        self.client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(secs)
            .send()
            .await
            .map_err(|e| self.sdk_error("ChangeMessageVisibility", e))?;
        Ok(())
    }
}

/// [`DeadLetterQueue`] on an SQS queue: the body as given ([`DeadLetter::body`]), the reason in
/// message attributes (`reason`, `detail`, `source_message_id`, and `source_group_id` when there is
/// a group).
///
/// FIFO or standard is decided by the queue URL: SQS requires a FIFO queue's name, hence the last
/// segment of its URL, to end in `.fifo`. On a FIFO queue (the charge queue's DLQ) the message
/// group is the source group (`poison` without one, and `source_group_id` is always sent) and the
/// dedup id is the source message id, so a redelivered poison message is parked once. On a standard
/// queue (the notify relay's DLQ) neither is sent (SQS refuses both there): a record copied twice,
/// by a retried batch, is two messages with the same `source_message_id`.
pub struct SqsDeadLetters {
    client: Client,
    queue_url: String,
    fifo: bool,
}

impl fmt::Debug for SqsDeadLetters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqsDeadLetters")
            .field("queue_url", &self.queue_url)
            .field("fifo", &self.fifo)
            .finish_non_exhaustive()
    }
}

impl SqsDeadLetters {
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        let queue_url = queue_url.into();
        Self {
            client,
            fifo: is_fifo_url(&queue_url),
            queue_url,
        }
    }
}

/// A FIFO queue's URL ends in its name, which ends in `.fifo` (a trailing `/` tolerated).
fn is_fifo_url(url: &str) -> bool {
    url.trim_end_matches('/').ends_with(".fifo")
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
        let mut send = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .message_attributes("reason", string_attribute(&letter.reason)?)
            .message_attributes("detail", string_attribute(&letter.detail)?)
            .message_attributes("source_message_id", string_attribute(&letter.message_id)?);
        if self.fifo {
            let dedup: String = letter.message_id.chars().take(128).collect();
            let group = letter.group_id.as_deref().unwrap_or("poison");
            send = send
                .message_group_id(group)
                .message_deduplication_id(if dedup.is_empty() { "unknown" } else { &dedup })
                .message_attributes("source_group_id", string_attribute(group)?);
        } else if let Some(group) = letter.group_id.as_deref() {
            send = send.message_attributes("source_group_id", string_attribute(group)?);
        }
        send.send().await.map_err(|e| {
            QueueError::with_source(
                format!("SendMessage to dead-letter queue {}", self.queue_url),
                e,
            )
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::is_fifo_url;

    #[test]
    fn fifo_is_told_by_the_queue_url() {
        for url in [
            "https://sqs.us-east-1.amazonaws.com/123456789012/charges-dlq.fifo",
            "http://localhost:5000/123456789012/charges-dlq.fifo/",
        ] {
            assert!(is_fifo_url(url), "{url}");
        }
        for url in [
            "https://sqs.us-east-1.amazonaws.com/123456789012/charge-once-notify-dlq",
            "https://sqs.us-east-1.amazonaws.com/123456789012/fifo",
            "",
        ] {
            assert!(!is_fifo_url(url), "{url}");
        }
    }
}
