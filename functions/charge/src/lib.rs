//! The charge function: SQS FIFO batches → [`charge_once::executor::execute_charge`] per message,
//! in order, with partial batch failures.
//!
//! - [`handler`]: the batch loop and what fails an item.
//! - [`ChargeConfig`]: what it reads from the environment, once, at init.

pub mod handler;

use charge_once::config::{self, ConfigError, Env};
use charge_once::executor::ChargePolicy;

#[derive(Debug, Clone)]
pub struct ChargeConfig {
    pub table_name: String,
    pub stripe: config::StripeEnv,
    pub policy: ChargePolicy,
}

impl ChargeConfig {
    /// Every variable this function reads.
    pub const ENV_VARS: &'static [&'static str] = &[
        config::TABLE_NAME,
        config::STRIPE_API_BASE,
        config::STRIPE_SECRET_ARN,
        config::STRIPE_TIMEOUT_MS,
        config::STRIPE_CONNECT_TIMEOUT_MS,
        config::STRIPE_MAX_NETWORK_RETRIES,
        config::PENDING_GRACE_SECS,
        config::LEASE_TTL_SECS,
        config::SEARCH_MIN_AGE_SECS,
    ];

    pub fn from_env(env: &dyn Env) -> Result<Self, ConfigError> {
        Ok(Self {
            table_name: config::required(env, config::TABLE_NAME)?,
            stripe: config::stripe_env(env)?,
            policy: config::charge_policy(env)?,
        })
    }
}
