//! The local AWS stack for tests: moto in server mode, reached through the SDK's standard
//! `AWS_ENDPOINT_URL` (set by `infra/local/with-stack.sh`). Production code has no test branch;
//! only these helpers create tables and queues, each with a unique name, so tests never depend on
//! each other or on their order. A test that wants the whole stack (tables, queues and an
//! embedded stripe-sim) takes [`crate::stack::Stack::spawn`], built from these.
//!
//! Every table is used only once it is `ACTIVE` ([`wait_until_active`]): moto makes a table active
//! at once, DynamoDB does not, and a write to a table still `CREATING` is refused.

use std::time::{Duration, Instant};

use aws_config::BehaviorVersion;
use aws_sdk_dynamodb::types::{IndexStatus, TableDescription, TableStatus};
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::inbox::DynamoInbox;
use uuid::Uuid;

/// How long [`wait_until_active`] waits for a new table (DynamoDB takes seconds; moto none).
pub const TABLE_ACTIVE_TIMEOUT: Duration = Duration::from_secs(120);
/// How often [`wait_until_active`] asks.
const TABLE_POLL: Duration = Duration::from_millis(250);

/// The SDK config for the local stack. Refuses anything but a loopback endpoint, so a test can never
/// create tables or queues in a real account.
pub async fn sdk_config() -> aws_config::SdkConfig {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap_or_default();
    assert!(
        endpoint.starts_with("http://127.0.0.1:") || endpoint.starts_with("http://localhost:"),
        "AWS tests need the local stack: run them through `make test` \
         (infra/local/with-stack.sh), which starts moto and sets AWS_ENDPOINT_URL; got {endpoint:?}"
    );
    // The functions' HTTPS client (rustls on ring, the workspace's one crypto backend).
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(charge_once::adapters::aws::https_client())
        .load()
        .await
}

pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", Uuid::new_v4().simple())
}

/// A fresh operations table with its unknown index, `ACTIVE`.
pub async fn fresh_store() -> DynamoStore {
    let client = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let store = DynamoStore::new(client.clone(), unique("operations"));
    store.create_table().await.expect("create table on moto");
    wait_until_active(&client, store.table()).await;
    store
}

/// A fresh webhook inbox table (TTL on `expires_at`), `ACTIVE`.
pub async fn fresh_inbox() -> DynamoInbox {
    let client = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let inbox = DynamoInbox::new(client.clone(), unique("inbox"));
    inbox
        .create_table()
        .await
        .expect("create the inbox table on moto");
    wait_until_active(&client, inbox.table_name()).await;
    inbox
}

/// Whether a table as DescribeTable shows it takes reads and writes: the table and every global
/// secondary index `ACTIVE`. `Err` for a state it will never leave by waiting (being deleted).
pub fn table_ready(table: &TableDescription) -> Result<bool, String> {
    match table.table_status() {
        Some(TableStatus::Active) => {}
        Some(TableStatus::Creating | TableStatus::Updating) | None => return Ok(false),
        Some(other) => return Err(format!("table is {other}")),
    }
    Ok(table
        .global_secondary_indexes()
        .iter()
        .all(|index| index.index_status() == Some(&IndexStatus::Active)))
}

/// Polls DescribeTable until `table` is ready ([`table_ready`]), at most
/// [`TABLE_ACTIVE_TIMEOUT`]; panics with the last state seen after that.
pub async fn wait_until_active(client: &aws_sdk_dynamodb::Client, table: &str) {
    let deadline = Instant::now() + TABLE_ACTIVE_TIMEOUT;
    loop {
        let described = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .unwrap_or_else(|e| panic!("DescribeTable {table}: {e:?}"));
        let description = described
            .table()
            .unwrap_or_else(|| panic!("DescribeTable {table}: no table in the answer"));
        match table_ready(description) {
            Ok(true) => return,
            Ok(false) if Instant::now() < deadline => tokio::time::sleep(TABLE_POLL).await,
            Ok(false) => panic!(
                "{table} not ACTIVE after {TABLE_ACTIVE_TIMEOUT:?}: {:?}",
                description.table_status()
            ),
            Err(state) => panic!("{table} will not become ACTIVE: {state}"),
        }
    }
}

/// A fresh SQS FIFO queue (visibility timeout 30 s); returns its URL.
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

/// A fresh standard SQS queue named `<prefix>-<unique>`; returns its URL.
pub async fn fresh_queue(client: &aws_sdk_sqs::Client, prefix: &str) -> String {
    client
        .create_queue()
        .queue_name(unique(prefix))
        .send()
        .await
        .expect("create a queue on moto")
        .queue_url()
        .expect("queue url")
        .to_owned()
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

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::{GlobalSecondaryIndexDescription, IndexStatus, TableStatus};

    use super::*;

    fn table(status: TableStatus, index: Option<IndexStatus>) -> TableDescription {
        let mut t = TableDescription::builder().table_status(status);
        if let Some(index) = index {
            t = t.global_secondary_indexes(
                GlobalSecondaryIndexDescription::builder()
                    .index_name("unsettled-by-due")
                    .index_status(index)
                    .build(),
            );
        }
        t.build()
    }

    /// What moto never shows (its tables are ACTIVE at once): a table or index still being
    /// created is waited for, a table being deleted is an error.
    #[test]
    fn a_table_is_ready_when_it_and_its_indexes_are_active() {
        assert_eq!(table_ready(&table(TableStatus::Active, None)), Ok(true));
        assert_eq!(
            table_ready(&table(TableStatus::Active, Some(IndexStatus::Active))),
            Ok(true)
        );
        for not_yet in [
            table(TableStatus::Creating, None),
            table(TableStatus::Creating, Some(IndexStatus::Creating)),
            table(TableStatus::Active, Some(IndexStatus::Creating)),
            table(TableStatus::Updating, Some(IndexStatus::Active)),
            TableDescription::builder().build(),
        ] {
            assert_eq!(table_ready(&not_yet), Ok(false), "{not_yet:?}");
        }
        assert!(table_ready(&table(TableStatus::Deleting, None)).is_err());
    }
}
