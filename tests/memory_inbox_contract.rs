//! The inbox contract against the in-memory inbox (the DynamoDB adapter runs the same suite).

use std::sync::Arc;

use charge_once::memory::MemoryInbox;
use charge_once::ports::EventInbox;

async fn memory_inbox() -> Arc<dyn EventInbox> {
    Arc::new(MemoryInbox::new())
}

testkit::inbox_contract_tests!(memory_inbox());
