//! # charge-once: the shells and the adapters
//!
//! One confirmed order must become **exactly one** charge at Stripe, although every hop under it
//! (API retries, SQS, Lambda, the network) delivers at least once. The rules that decide what
//! happens are the crate `charge_core` (`core/`: no I/O); this crate runs them against the world:
//! the ports, the async shells that call Stripe, DynamoDB and SQS as a plan says, and the adapters.
//! The Lambda functions under `functions/` only wire it to AWS.
//!
//! Re-exported from `charge_core` under the paths the shells have always used: [`domain`],
//! [`ids`], [`time`], [`operation`], [`outcome`], [`outbox`], [`store_rules`] (and the plans, as
//! [`executor::plan`] and [`reconciler::plan`]).
//!
//! Map of the crate:
//! - [`ports`]: every trait the shells need from the world, in one place: [`ports::OperationStore`],
//!   [`ports::ChargeQueue`], [`ports::PaymentGateway`], [`ports::WebhookInbox`],
//!   [`ports::OutcomePublisher`], the [`Clock`], ... (its module doc maps each to its adapters).
//! - [`executor`]: [`executor::execute_charge`], safe to call any number of times for one operation:
//!   claim, act as the charge plan decides, record fenced.
//! - [`adapters`]: the real adapters: Stripe over HTTPS (hyper-util), DynamoDB, SQS FIFO.
//! - [`reconciler`]: one scheduled tick over the unknown index: re-enqueue, re-drive, settle.
//! - [`webhook`]: Stripe's events as an idempotent inbox: signature, parsing,
//!   [`webhook::receive`] on the ports (settles, never creates).
//! - [`pacing`]: the Stripe request budget shared by an environment's calls.
//! - [`config`]: typed configuration from the environment, read once at init.
//! - [`startup`]: a function that cannot start reports why to the Lambda runtime API, so the
//!   invoker hears it.
//! - [`telemetry`]: CloudWatch Embedded Metric Format lines.
//! - `testing` (tests only: this crate's unit tests and the `testing` feature): the rules' fixtures
//!   and the helpers that write them to a store.
//! - [`memory`]: in-memory adapters with the same conditional semantics as DynamoDB/SQS, a Stripe-like
//!   fake gateway, for fast tests and the embedded simulation.
//!
//! Adapters never decide business outcomes; the rules cannot import an adapter (Cargo keeps them
//! apart) and `tests/module_layers.rs` keeps this crate's modules from importing each other back.

pub mod adapters;
pub mod audit;
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
