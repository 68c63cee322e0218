//! The charge queue contract against the in-memory FIFO queue, on a manual clock (the SQS adapter
//! runs the same suite).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use charge_core::time::ManualClock;
use charge_once::memory::{MemoryQueue, ReceivedMessage};
use charge_once::ports::{MessageVisibility, OperationQueue};
use testkit::queue_contract::QueueHarness;

/// What SQS does with the charge queue's receives here: `fresh_fifo_queue`'s 30 s.
const VISIBILITY_TIMEOUT: Duration = Duration::from_secs(30);

struct Memory {
    queue: MemoryQueue,
    clock: ManualClock,
}

#[async_trait]
impl QueueHarness for Memory {
    fn queue(&self) -> &dyn OperationQueue {
        &self.queue
    }

    fn visibility(&self) -> &dyn MessageVisibility {
        &self.queue
    }

    async fn receive(&self, max: usize) -> Vec<ReceivedMessage> {
        self.queue.receive(max, VISIBILITY_TIMEOUT)
    }

    async fn delete(&self, receipt_handle: &str) {
        assert!(
            self.queue.delete(receipt_handle),
            "no message with receipt {receipt_handle}"
        );
    }

    async fn wait(&self, d: Duration) {
        self.clock.advance(d);
    }
}

async fn memory_queue() -> Arc<dyn QueueHarness> {
    let clock = ManualClock::new(charge_core::testing::T0);
    Arc::new(Memory {
        queue: MemoryQueue::new(Arc::new(clock.clone())),
        clock,
    })
}

testkit::queue_contract_tests!(memory_queue());
