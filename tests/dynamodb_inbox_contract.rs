//! The inbox contract against the DynamoDB adapter on moto: the same suite as the in-memory inbox.

use std::sync::Arc;

use charge_once::ports::EventInbox;

async fn dynamo_inbox() -> Arc<dyn EventInbox> {
    Arc::new(testkit::aws::fresh_inbox().await)
}

testkit::inbox_contract_tests!(dynamo_inbox());
