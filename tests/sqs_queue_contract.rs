//! The charge queue contract against the SQS adapter on a moto FIFO queue (real time): the same
//! suite as the in-memory queue. Receive and delete are the SDK calls the Lambda event source
//! makes.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use charge_once::adapters::sqs::SqsQueue;
use charge_once::memory::ReceivedMessage;
use charge_once::ports::{MessageVisibility, OperationQueue};
use testkit::aws::{fresh_fifo_queue, sdk_config};
use testkit::queue_contract::QueueHarness;

struct Sqs {
    queue: SqsQueue,
    client: aws_sdk_sqs::Client,
}

#[async_trait]
impl QueueHarness for Sqs {
    fn queue(&self) -> &dyn OperationQueue {
        &self.queue
    }

    fn visibility(&self) -> &dyn MessageVisibility {
        &self.queue
    }

    async fn receive(&self, max: usize) -> Vec<ReceivedMessage> {
        let out = self
            .client
            .receive_message()
            .queue_url(self.queue.queue_url())
            .max_number_of_messages(i32::try_from(max).expect("at most 10"))
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("ReceiveMessage on moto");
        out.messages()
            .iter()
            .map(|m| {
                let attr = |name: MessageSystemAttributeName| {
                    m.attributes()
                        .and_then(|a| a.get(&name))
                        .cloned()
                        .unwrap_or_else(|| panic!("no {} on {m:?}", name.as_str()))
                };
                ReceivedMessage {
                    message_id: m.message_id().expect("message id").to_owned(),
                    receipt_handle: m.receipt_handle().expect("receipt handle").to_owned(),
                    body: m.body().unwrap_or_default().to_owned(),
                    group_id: attr(MessageSystemAttributeName::MessageGroupId),
                    dedup_id: attr(MessageSystemAttributeName::MessageDeduplicationId),
                    receive_count: attr(MessageSystemAttributeName::ApproximateReceiveCount)
                        .parse()
                        .expect("a count"),
                }
            })
            .collect()
    }

    async fn delete(&self, receipt_handle: &str) {
        self.client
            .delete_message()
            .queue_url(self.queue.queue_url())
            .receipt_handle(receipt_handle)
            .send()
            .await
            .expect("DeleteMessage on moto");
    }

    async fn wait(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
}

async fn sqs_queue() -> Arc<dyn QueueHarness> {
    let client = aws_sdk_sqs::Client::new(&sdk_config().await);
    let url = fresh_fifo_queue(&client).await;
    Arc::new(Sqs {
        queue: SqsQueue::new(client.clone(), url),
        client,
    })
}

testkit::queue_contract_tests!(sqs_queue());
