//! The notify function: the relay of the outbox. It reads the operations table's DynamoDB Stream
//! (old and new image of every committed write) and publishes each outcome — succeeded, failed, or
//! into review — to the stack's EventBridge bus, at least once.
//!
//! - [`handler`]: stream batch → outcomes ([`charge_core::outbox::outcome_of`]) → settled ones
//!   read back from the table (only what it holds is published) → PutEvents;
//!   partial batch failures so Lambda retries from the first record not published; a record whose
//!   image is not an operation is copied to the relay's DLQ with the reason and the batch goes on.
//! - `main.rs`: the wiring. The adapters are the core's: the stream image decoder
//!   ([`charge_once::adapters::dynamodb::stream`]) and the publisher on EventBridge
//!   (`charge_once::adapters::eventbridge`, the crate's `eventbridge` feature).
//! - [`NotifyConfig`]: what it reads from the environment, once, at init.
//!
//! Why a function and not EventBridge Pipes: the event id is a hash of the operation id and the
//! outcome (Pipes' input transformers cannot hash), deciding "is this change an outcome" needs the
//! old and the new image compared (a filter sees one pattern at a time), and the relay must be
//! testable on the local stack (moto serves the stream and PutEvents, not Pipes).

pub mod handler;

use charge_once::config::{self, ConfigError, Env, FromEnv};

/// `EVENT_BUS_NAME`: the bus outcome events go to.
pub use charge_once::config::EVENT_BUS_NAME;

/// Configuration of the notify function.
#[derive(Debug, Clone)]
pub struct NotifyConfig {
    pub event_bus_name: String,
    /// `TABLE_NAME`: the operations table, whose records are read back before a settled outcome
    /// is published (only what the table holds goes out).
    pub table_name: String,
    /// `DEAD_LETTER_QUEUE_URL`: the relay's DLQ (a standard queue, `NotifyDeadLetterQueue`), where
    /// unreadable stream records are copied; also the stream mapping's on-failure destination.
    pub dead_letter_queue_url: String,
}

impl FromEnv for NotifyConfig {
    fn from_env(env: &dyn Env) -> Result<Self, ConfigError> {
        Ok(Self {
            event_bus_name: config::required(env, EVENT_BUS_NAME)?,
            table_name: config::required(env, config::TABLE_NAME)?,
            dead_letter_queue_url: config::required(env, config::DEAD_LETTER_QUEUE_URL)?,
        })
    }
}
