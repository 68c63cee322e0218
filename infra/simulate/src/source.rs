//! The queue side of the local event-source mapping: receive FIFO batches, delete what succeeded,
//! leave failures to come back after the visibility timeout — on the in-memory queue (virtual
//! time) or on SQS (moto or a real account).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_lambda_events::sqs::SqsMessage;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use charge_once::adapters::sqs::SqsQueue;

use crate::queue::SimQueue;
use crate::BoxError;

/// A message handed to the charge function.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub message_id: String,
    pub receipt: String,
    pub body: String,
    pub group_id: String,
    pub dedup_id: String,
    pub receive_count: u32,
}

impl From<charge_once::memory::ReceivedMessage> for Delivered {
    fn from(m: charge_once::memory::ReceivedMessage) -> Self {
        Self {
            message_id: m.message_id,
            receipt: m.receipt_handle,
            body: m.body,
            group_id: m.group_id,
            dedup_id: m.dedup_id,
            receive_count: m.receive_count,
        }
    }
}

impl Delivered {
    /// The record as the SQS event source puts it in the Lambda event.
    pub fn to_record(&self) -> SqsMessage {
        let mut r = SqsMessage::default();
        r.message_id = Some(self.message_id.clone());
        r.receipt_handle = Some(self.receipt.clone());
        r.body = Some(self.body.clone());
        r.attributes
            .insert("MessageGroupId".into(), self.group_id.clone());
        r.attributes
            .insert("MessageDeduplicationId".into(), self.dedup_id.clone());
        r.attributes.insert(
            "ApproximateReceiveCount".into(),
            self.receive_count.to_string(),
        );
        r.event_source = Some("aws:sqs".into());
        r
    }
}

#[async_trait]
pub trait EventSource: Send + Sync {
    async fn receive(&self, max: usize) -> Result<Vec<Delivered>, BoxError>;
    async fn delete(&self, receipt: &str) -> Result<(), BoxError>;
    /// Messages in the queue, visible or in flight.
    async fn depth(&self) -> Result<u64, BoxError>;
    /// Puts a raw body on the queue (a poison message).
    async fn send_raw(&self, body: &str, group_id: &str, dedup_id: &str) -> Result<(), BoxError>;
}

/// The in-memory FIFO queue; the visibility timeout runs on the virtual clock.
pub struct MemorySource {
    pub queue: Arc<SimQueue>,
    pub visibility: Duration,
}

#[async_trait]
impl EventSource for MemorySource {
    async fn receive(&self, max: usize) -> Result<Vec<Delivered>, BoxError> {
        Ok(self
            .queue
            .receive(max, self.visibility)
            .into_iter()
            .map(Delivered::from)
            .collect())
    }

    async fn delete(&self, receipt: &str) -> Result<(), BoxError> {
        self.queue.delete(receipt);
        Ok(())
    }

    async fn depth(&self) -> Result<u64, BoxError> {
        Ok(self.queue.len() as u64)
    }

    async fn send_raw(&self, body: &str, group_id: &str, dedup_id: &str) -> Result<(), BoxError> {
        self.queue.send_raw(body, group_id, dedup_id);
        Ok(())
    }
}

/// An SQS FIFO queue. Its visibility timeout runs on real time, so it is kept short.
pub struct SqsSource {
    pub client: aws_sdk_sqs::Client,
    pub queue_url: String,
    pub visibility_secs: i32,
    /// ReceiveMessage and DeleteMessage calls, for the report.
    pub calls: AtomicU64,
}

#[async_trait]
impl EventSource for SqsSource {
    async fn receive(&self, max: usize) -> Result<Vec<Delivered>, BoxError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let out = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(i32::try_from(max.min(10)).unwrap_or(10))
            .visibility_timeout(self.visibility_secs)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await?;
        Ok(out
            .messages()
            .iter()
            .map(|m| {
                let attr = |k: MessageSystemAttributeName| {
                    m.attributes()
                        .and_then(|a| a.get(&k))
                        .cloned()
                        .unwrap_or_default()
                };
                Delivered {
                    message_id: m.message_id().unwrap_or_default().to_owned(),
                    receipt: m.receipt_handle().unwrap_or_default().to_owned(),
                    body: m.body().unwrap_or_default().to_owned(),
                    group_id: attr(MessageSystemAttributeName::MessageGroupId),
                    dedup_id: attr(MessageSystemAttributeName::MessageDeduplicationId),
                    receive_count: attr(MessageSystemAttributeName::ApproximateReceiveCount)
                        .parse()
                        .unwrap_or(1),
                }
            })
            .collect())
    }

    async fn delete(&self, receipt: &str) -> Result<(), BoxError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.client
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .send()
            .await?;
        Ok(())
    }

    async fn depth(&self) -> Result<u64, BoxError> {
        Ok(SqsQueue::new(self.client.clone(), &self.queue_url)
            .approximate_depth()
            .await?)
    }

    async fn send_raw(&self, body: &str, group_id: &str, dedup_id: &str) -> Result<(), BoxError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .message_group_id(group_id)
            .message_deduplication_id(dedup_id)
            .send()
            .await?;
        Ok(())
    }
}
