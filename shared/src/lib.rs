//! # charge-once: the shells and the adapters
//!
//! One confirmed order must become **exactly one** charge at Stripe, although every hop under it
//! (API retries, SQS, Lambda, the network) delivers at least once. The rules that decide what
//! happens are the crate `charge_core` (`core/`: no I/O); this crate runs them against the world:
//! the ports, the async shells that call Stripe, DynamoDB and SQS as a plan says, and the adapters.
//! The Lambda functions under `functions/` only wire it to AWS.
//!
//! Nothing of `charge_core` is re-exported here: the shells, the functions and the tools name each
//! rule and value where it lives (`charge_core::domain::OrderId`, `charge_core::plan::Decision`,
//! `charge_core::charge::plan::after_create`, ...).
//!
//! Map of the crate:
//! - [`ports`]: every trait the shells need from the world, in one place: [`ports::OperationStore`],
//!   [`ports::OperationQueue`], [`ports::PaymentGateway`], [`ports::EventInbox`],
//!   [`ports::OutcomePublisher`], the [`Clock`](charge_core::time::Clock), ... (its module doc maps
//!   each to its adapters).
//! - [`executor`]: [`executor::execute`], safe to call any number of times for one operation:
//!   claim, act as the charge plan decides, record fenced.
//! - [`adapters`]: the real adapters: Stripe over HTTPS (hyper-util), DynamoDB, SQS FIFO.
//! - [`reconciler`]: one scheduled tick over the unknown index: re-enqueue, re-drive, settle; then
//!   the [`refund_watch`]: succeeded refunds read again at Stripe until they can no longer fail.
//! - [`events`]: Stripe's events as an idempotent inbox: signature, parsing,
//!   [`events::receive`] on the ports (settles, never creates).
//! - [`pacing`]: the Stripe request budget shared by an environment's calls.
//! - [`config`]: typed configuration from the environment, read once at init.
//! - [`startup`]: a function that cannot start reports why to the Lambda runtime API, so the
//!   invoker hears it.
//! - [`telemetry`]: CloudWatch Embedded Metric Format lines.
//! - `testing` (tests only: this crate's unit tests and the `testing` feature): the helpers that
//!   write the rules' fixtures (`charge_core::testing`) to a store.
//! - [`memory`]: in-memory adapters with the same conditional semantics as DynamoDB/SQS, a Stripe-like
//!   fake gateway, for fast tests and the embedded simulation.
//!
//! Adapters never decide business outcomes; the rules cannot import an adapter (Cargo keeps them
//! apart) and `tests/module_layers.rs` keeps this crate's modules from importing each other back.

pub mod adapters;
pub mod audit;
pub mod config;
pub mod dispute_watch;
pub mod events;
pub mod executor;
pub mod logging;
pub mod memory;
pub mod pacing;
pub mod ports;
pub mod reconciler;
pub mod refund_watch;
pub mod startup;
pub mod telemetry;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
