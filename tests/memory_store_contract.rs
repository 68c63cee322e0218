//! The store contract against the in-memory store (the DynamoDB adapter runs the same suite).

use std::sync::Arc;

use charge_once::memory::MemoryStore;
use charge_once::ports::OperationStore;

async fn memory_store() -> Arc<dyn OperationStore> {
    Arc::new(MemoryStore::new())
}

testkit::store_contract_tests!(memory_store());
