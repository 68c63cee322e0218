//! What the core needs from the world, as small traits: every port of the crate is declared here,
//! and nowhere else. Each has a production adapter (under [`crate::adapters`]; the clocks are in
//! [`charge_core::time`], the sleeper in [`crate::pacing`], the metrics sinks in
//! [`crate::telemetry`]) and, for tests and the simulation, an in-memory one (mostly
//! [`crate::memory`]); where both exist, one contract suite in `tests/support/` runs on each.
//!
//! | port | what for | production | in memory | contract |
//! |---|---|---|---|---|
//! | [`OperationStore`] (= [`OperationReads`] + [`OperationCreates`] + [`OperationLeases`] + [`UnknownIndex`] + [`ManualResolutions`] + [`SettledRecords`]) | the operation record, its conditional writes, the unknown index | `adapters::dynamodb::DynamoStore` | `memory::MemoryStore` | `store_contract.rs` |
//! | [`OperationQueue`], [`MessageVisibility`] | the charge queue (FIFO), a refused message back in seconds | `adapters::sqs::SqsQueue` | `memory::MemoryQueue` | `queue_contract.rs` |
//! | [`DeadLetterQueue`] | poison messages, unreadable stream records | `adapters::sqs::SqsDeadLetters` | `memory::MemoryDeadLetters` | |
//! | [`PaymentGateway`] (= [`StripeAccount`] + [`PaymentIntents`] + [`StripeRefunds`] + [`StripeDisputes`] + [`CreatedLists`]) | Stripe's PaymentIntents, Refunds and Disputes | `adapters::stripe::StripeGateway` (paced: `pacing::PacedGateway`) | `memory::FakeGateway` | the seed scenarios |
//! | [`RefundWatchCursor`] | how far the refund watch has read | `adapters::dynamodb::DynamoStore` | `memory::MemoryStore` | `store_contract.rs` |
//! | [`DisputeWatchCursor`] | how far the dispute watch has listed | `adapters::dynamodb::DynamoStore` | `memory::MemoryStore` | `shared/tests/dispute_watch.rs` |
//! | [`AuditLog`] | the drift audit's reports, one per window | `adapters::dynamodb::DynamoStore` | `memory::MemoryStore` | `store_contract.rs` |
//! | [`EventInbox`] | Stripe event ids already acted on | `adapters::inbox::DynamoInbox` | `memory::MemoryInbox` | `inbox_contract.rs` |
//! | [`OutcomePublisher`] | outcome events for the order service | `adapters::eventbridge::EventBridgePublisher` (feature `eventbridge`) | | |
//! | [`Clock`](charge_core::time::Clock), [`Sleeper`] | now, and waiting | `time::SystemClock`, `pacing::TokioSleeper` | `time::ManualClock` | |
//! | [`MetricsSink`] | CloudWatch EMF lines | `telemetry::StdoutMetrics` | `telemetry::CapturedMetrics`, `DiscardMetrics` | |
//!
//! A refused condition is a value ([`Claim::Settled`], [`Recorded::Refused`]: the store's answers
//! are the rules' values, `charge_core::store`), not an error; the errors ([`StoreError`],
//! [`QueueError`], [`PublishError`]) are the adapter failing, with their `#[source]`. One file per
//! port family; all of them are used from here (`ports::OperationStore`).
//!
//! [`Claim::Settled`]: charge_core::store::Claim::Settled
//! [`Recorded::Refused`]: charge_core::store::Recorded::Refused

mod audit;
mod clock;
mod gateway;
mod inbox;
mod metrics;
mod outbox;
mod queue;
mod store;

pub use audit::{AuditLog, StoredReports};
pub use clock::Sleeper;
pub use gateway::{
    refunds_not_supported, CancelPaymentIntent, CapturePaymentIntent, CreatePaymentIntent,
    CreateRefund, CreatedLists, ListPage, PaymentGateway, PaymentIntents, RequestTotals,
    StripeAccount, StripeDisputes, StripeRefunds, StripeRequests,
};
pub use inbox::{Admitted, EventInbox, INBOX_TTL};
pub use metrics::MetricsSink;
pub use outbox::{OutcomePublisher, PublishError, Published, MAX_BATCH};
pub use queue::{
    DeadLetter, DeadLetterQueue, MessageVisibility, OperationMessage, OperationQueue, QueueError,
    QueuedOperation,
};
pub use store::{
    AuditStore, DisputeWatchCursor, DoorStore, IndexQuery, ManualResolutions, OperationCreates,
    OperationLeases, OperationReads, OperationStore, Page, RefundWatchCursor, ReviewCount,
    SettledRecords, StoreCalls, StoreError, UnknownIndex, UnreadableRecord,
};
