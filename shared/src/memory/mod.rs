//! In-memory adapters with the same conditional semantics as the real ones.
//!
//! They serve the fast core tests and the embedded simulation, and pass the same contract tests as
//! the DynamoDB and SQS adapters. They are never used instead of testing those.

mod gateway;
mod inbox;
mod queue;
mod store;

pub use gateway::{FakeCharge, FakeFault, FakeGateway, FakeRefund, GatewayCalls};
pub use inbox::MemoryInbox;
pub use queue::{MemoryDeadLetters, MemoryQueue, ReceivedMessage};
pub use store::{MemoryStore, ReportShelf, WatchShelf};
