//! The inbox contract against the DynamoDB adapter on moto: the same suite as the in-memory inbox.

use std::sync::Arc;

use charge_once::ports::WebhookInbox;

async fn dynamo_inbox() -> Arc<dyn WebhookInbox> {
    Arc::new(testkit::aws::fresh_inbox().await)
}

testkit::inbox_contract_tests!(dynamo_inbox());
