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
