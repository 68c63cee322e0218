//! Adapters from the ports to the real world. They translate; they never decide a business outcome.
//!
//! - [`aws`]: the AWS SDK configuration with time bounds on every call (one place for them).
//! - [`stripe`]: the `PaymentGateway` over Stripe's HTTP API.
//! - [`dynamodb`]: the `OperationStore` on a DynamoDB table with a sparse "unknown index", and
//!   the table's stream images read back ([`dynamodb::stream`]).
//! - [`eventbridge`] (feature `eventbridge`): the notify relay's `OutcomePublisher` on an
//!   EventBridge bus.
//! - [`inbox`]: the events function's `EventInbox` on its own DynamoDB table with TTL.
//! - [`secrets`]: the Stripe key from Secrets Manager, read once at init.
//! - [`sqs`]: the `OperationQueue` on an SQS FIFO queue, and the `DeadLetterQueue` on its DLQ.

pub mod aws;
pub mod dynamodb;
#[cfg(feature = "eventbridge")]
pub mod eventbridge;
pub mod inbox;
pub mod secrets;
pub mod sqs;
pub mod stripe;
