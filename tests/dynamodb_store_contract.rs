//! The store contract against the DynamoDB adapter on moto: the same suite as the in-memory store.

use std::sync::Arc;

use charge_once::ports::OperationStore;

async fn dynamo_store() -> Arc<dyn OperationStore> {
    Arc::new(testkit::aws::fresh_store().await)
}

testkit::store_contract_tests!(dynamo_store());
