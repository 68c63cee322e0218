//! # charge-once: the charge core
//!
//! One confirmed order must become **exactly one** charge at Stripe, although every hop under it
//! (API retries, SQS, Lambda, the network) delivers at least once. This crate holds everything that
//! decides what happens; the Lambda functions under `functions/` only wire it to AWS.
//!
//! Map of the crate:
//! - [`domain`]: parse-don't-validate newtypes for what arrives from outside (`OrderId`, `Amount`,
//!   `Currency`, ...), the charge parameters and their fingerprint, the idempotency key.
//! - [`ids`]: where fresh UUIDs come from (a per-thread seam the deterministic simulation seeds).
//! - [`time`]: `Timestamp` (milliseconds since the epoch), the system and the manual clock.
//! - [`operation`]: the durable operation record and its status (`pending | unknown | succeeded | failed`).
//! - [`outcome`]: Stripe's answers, classified once: [`outcome::outcome_for`] and [`outcome::GatewayError`].
//! - [`outbox`]: which committed change is an outcome the order service must learn, the event
//!   that says it (stable `event_id`).
//! - [`ports`]: every trait the core needs from the world, in one place: [`ports::OperationStore`],
//!   [`ports::ChargeQueue`], [`ports::PaymentGateway`], [`ports::WebhookInbox`],
//!   [`ports::OutcomePublisher`], the [`Clock`], ... (its module doc maps each to its adapters).
//! - [`store_rules`]: the store's conditional writes as pure transitions (guards, then the change),
//!   called by the in-memory stores and sent by the DynamoDB adapter as condition expressions.
//! - [`executor`]: [`executor::execute_charge`], safe to call any number of times for one operation,
//!   built on the pure decisions in [`executor::plan`].
//! - [`adapters`]: the real adapters: Stripe over HTTPS (hyper-util), DynamoDB, SQS FIFO.
//! - [`reconciler`]: one scheduled tick over the unknown index: re-enqueue, re-drive, settle.
//! - [`webhook`]: Stripe's webhooks as an idempotent inbox: signature, event → transition,
//!   [`webhook::receive`] on the ports (settles, never creates).
//! - [`config`]: typed configuration from the environment, read once at init.
//! - [`startup`]: a function that cannot start reports why to the Lambda runtime API, so the
//!   invoker hears it.
//! - [`telemetry`]: CloudWatch Embedded Metric Format lines.
//! - `testing` (tests only: this crate's unit tests and the `testing` feature): the fixtures every
//!   test builds orders, operations and store writes from.
//! - [`memory`]: in-memory adapters with the same conditional semantics as DynamoDB/SQS, a Stripe-like
//!   fake gateway, for fast tests and the embedded simulation.
//!
//! Domain logic never imports an AWS or HTTP type; adapters never decide business outcomes.

// The rules, re-exported where the shells have always found them (`charge_once::domain`, ...).
pub use charge_core::{domain, ids, operation, outbox, outcome, store_rules, time};

pub mod adapters;
pub mod config;
pub mod executor;
pub mod logging;
pub mod memory;
pub mod pacing;
pub mod ports;
pub mod reconciler;
pub mod startup;
pub mod telemetry;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod webhook;

pub use domain::{
    Amount, ChargeParams, Currency, CustomerId, Fingerprint, IdempotencyKey, OperationId,
    OperationKind, OrderId, PaymentIntentId, PaymentMethodId, Principal, ValidationError,
};
pub use operation::{
    AuditEntry, Lease, LeaseToken, Operation, OperationKey, OperationStatus, Review,
};
pub use outcome::{outcome_for, GatewayError, PaymentIntent, PaymentIntentStatus, RetryCause};
pub use ports::Clock;
pub use time::{ManualClock, SystemClock, Timestamp};
