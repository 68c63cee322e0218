//! The store contract (the one DynamoDB and the in-memory store pass) against the simulation's
//! indexed store.

use std::sync::Arc;

use charge_once::ports::OperationStore;
use simulate::store::SimStore;

async fn sim_store() -> Arc<dyn OperationStore> {
    Arc::new(SimStore::new())
}

testkit::store_contract_tests!(sim_store());
