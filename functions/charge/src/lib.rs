//! The charge function: SQS FIFO batches → [`charge_once::executor::execute_charge`] per message,
//! in order, with partial batch failures.
//!
//! - [`handler`]: the batch loop and what fails an item.
//! - [`ChargeConfig`]: what it reads from the environment, once, at init.

pub mod handler;

use charge_once::config::{self, ConfigError, Env, FromEnv};
use charge_once::executor::ChargePolicy;

#[derive(Debug, Clone)]
pub struct ChargeConfig {
    pub table_name: String,
    /// The charge queue itself: a message refused at the rate limit is made visible again soon.
    pub queue_url: String,
    /// The charge queue's dead-letter queue, where poison messages are copied.
    pub dead_letter_queue_url: String,
    pub stripe: config::StripeEnv,
    pub policy: ChargePolicy,
    /// This environment paces its Stripe calls to `budget.charge_share()` per second.
    pub budget: config::StripeBudget,
}

impl FromEnv for ChargeConfig {
    fn from_env(env: &dyn Env) -> Result<Self, ConfigError> {
        Ok(Self {
            table_name: config::required(env, config::TABLE_NAME)?,
            queue_url: config::required(env, config::QUEUE_URL)?,
            dead_letter_queue_url: config::required(env, config::DEAD_LETTER_QUEUE_URL)?,
            stripe: config::stripe_env(env)?,
            policy: config::charge_policy(env)?,
            budget: config::stripe_budget(env)?,
        })
    }
}

/// Calls one environment may make back to back before pacing starts: a batch's first groups.
pub const BURST: u32 = 2;
