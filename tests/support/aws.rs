//! The local AWS stack for tests: moto in server mode, reached through the SDK's standard
//! `AWS_ENDPOINT_URL` (set by `infra/local/with-stack.sh`). Production code has no test branch;
//! only these helpers create tables and queues, each with a unique name, so tests never depend on
//! each other or on their order.

use aws_config::BehaviorVersion;
use charge_once::adapters::dynamodb::DynamoStore;
use uuid::Uuid;

/// The SDK config for the local stack. Refuses anything but a loopback endpoint, so a test can never
/// create tables or queues in a real account.
pub async fn sdk_config() -> aws_config::SdkConfig {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap_or_default();
    assert!(
        endpoint.starts_with("http://127.0.0.1:") || endpoint.starts_with("http://localhost:"),
        "AWS tests need the local stack: run them through `make test` \
         (infra/local/with-stack.sh), which starts moto and sets AWS_ENDPOINT_URL; got {endpoint:?}"
    );
    aws_config::defaults(BehaviorVersion::latest()).load().await
}

pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", Uuid::new_v4().simple())
}

/// A fresh operations table with its unknown index.
pub async fn fresh_store() -> DynamoStore {
    let config = sdk_config().await;
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&config), unique("operations"));
    store.create_table().await.expect("create table on moto");
    store
}

/// A fresh SQS FIFO queue; returns its URL.
pub async fn fresh_fifo_queue(client: &aws_sdk_sqs::Client) -> String {
    let name = format!("{}.fifo", unique("charges"));
    let out = client
        .create_queue()
        .queue_name(name)
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            "30",
        )
        .send()
        .await
        .expect("create FIFO queue on moto");
    out.queue_url().expect("queue url").to_owned()
}

/// Receives up to 10 messages (with their FIFO attributes) and turns them into the event the charge
/// function gets from the SQS event source.
pub async fn receive_as_event(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
) -> aws_lambda_events::sqs::SqsEvent {
    use aws_sdk_sqs::types::MessageSystemAttributeName;
    let out = client
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(10)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .expect("ReceiveMessage on moto");
    let mut event = aws_lambda_events::sqs::SqsEvent::default();
    for m in out.messages() {
        let mut record = aws_lambda_events::sqs::SqsMessage::default();
        record.message_id = m.message_id().map(str::to_owned);
        record.receipt_handle = m.receipt_handle().map(str::to_owned);
        record.body = m.body().map(str::to_owned);
        for (k, v) in m.attributes().into_iter().flatten() {
            record.attributes.insert(k.as_str().to_owned(), v.clone());
        }
        record.event_source = Some("aws:sqs".into());
        event.records.push(record);
    }
    event
}

/// How many messages are in the queue (visible or in flight), as SQS counts them.
pub async fn queue_depth(client: &aws_sdk_sqs::Client, queue_url: &str) -> u64 {
    charge_once::adapters::sqs::SqsQueue::new(client.clone(), queue_url)
        .approximate_depth()
        .await
        .expect("GetQueueAttributes on moto")
}

/// Items in a table, by a Scan with `Select=COUNT`. For tests asserting that nothing was written;
/// production code never scans.
pub async fn table_item_count(client: &aws_sdk_dynamodb::Client, table: &str) -> i32 {
    client
        .scan()
        .table_name(table)
        .select(aws_sdk_dynamodb::types::Select::Count)
        .send()
        .await
        .expect("Scan on moto")
        .count()
}
