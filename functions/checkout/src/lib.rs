//! The checkout function: `POST /orders/{order_id}/charge` and
//! `POST /orders/{order_id}/refunds/{refund_id}` (API Gateway HTTP API, payload v2).
//!
//! - [`handler`]: validate → create-if-absent → send; every answer an HTTP response, never a panic
//!   and never internals.
//! - `refunds`: a refund of the order's charge, its amount reserved in the same write.
//! - `takes`: the capture or the cancel of an authorization, each taking the charge in its write.
//! - [`door`]: what they share: the dependencies ([`door::Checkout`]), the replies, and the
//!   read/decide/write/queue loop of the doors that write beside the charge.
//! - [`CheckoutConfig`]: what it reads from the environment, once, at init.

pub mod door;
pub mod handler;
mod refunds;
mod takes;

use std::time::Duration;

use charge_once::config::{self, ConfigError, Env, FromEnv};

/// Configuration of the checkout function.
#[derive(Debug, Clone)]
pub struct CheckoutConfig {
    pub table_name: String,
    pub queue_url: String,
    /// How long a fresh operation waits for its queue message before the reconciler re-sends it.
    pub pending_grace: Duration,
    /// How many charge attempts one order may make (`MAX_CHARGE_ATTEMPTS`, the template's
    /// `MaxChargeAttempts`; 5 unset).
    pub max_charge_attempts: charge_core::attempt::AttemptLimit,
}

impl FromEnv for CheckoutConfig {
    fn from_env(env: &dyn Env) -> Result<Self, ConfigError> {
        Ok(Self {
            table_name: config::required(env, config::TABLE_NAME)?,
            queue_url: config::required(env, config::QUEUE_URL)?,
            pending_grace: config::pending_grace(env)?,
            max_charge_attempts: config::max_charge_attempts(env)?,
        })
    }
}
