//! The reconciler function: one [`charge_once::reconciler::reconcile_tick`] per scheduled event.
//!
//! - [`handler`]: the tick within the invocation's remaining time, and its EMF metrics lines
//!   (into the function's `MetricsSink`).
//! - [`ReconcilerConfig`]: what it reads from the environment, once, at init.

pub mod handler;

use charge_core::plan::Policy;
use charge_core::refund::watch::RefundWatch;
use charge_once::config::{self, ConfigError, Env, FromEnv};

#[derive(Debug, Clone)]
pub struct ReconcilerConfig {
    pub table_name: String,
    pub queue_url: String,
    pub stripe: config::StripeEnv,
    pub policy: Policy,
    /// The reconciler paces its Stripe calls to `budget.reconciler_share()` per second (search to
    /// `reconciler_search_share()`), beside the charge environments' shares.
    pub budget: config::StripeBudget,
    /// How long and how often succeeded refunds are read again (`REFUND_WATCH_DAYS`,
    /// `REFUND_WATCH_EVERY_HOURS`).
    pub refund_watch: RefundWatch,
}

impl FromEnv for ReconcilerConfig {
    fn from_env(env: &dyn Env) -> Result<Self, ConfigError> {
        Ok(Self {
            table_name: config::required(env, config::TABLE_NAME)?,
            queue_url: config::required(env, config::QUEUE_URL)?,
            stripe: config::stripe_env(env)?,
            policy: config::charge_policy(env)?,
            budget: config::stripe_budget(env)?,
            refund_watch: config::refund_watch(env)?,
        })
    }
}
