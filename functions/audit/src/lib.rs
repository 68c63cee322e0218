//! The audit function: one drift audit ([`charge_once::audit::run_audit`]) per scheduled event,
//! over the window that ends at the last whole hour before the schedule's time.
//!
//! - [`handler`]: the window from the event, the deadline from the invocation, the answer.
//! - [`AuditConfig`]: what it reads from the environment, once, at init.

pub mod handler;

use charge_core::plan::Policy;
use charge_once::config::{self, AuditSettings, ConfigError, Env, FromEnv};

#[derive(Debug, Clone)]
pub struct AuditConfig {
    pub table_name: String,
    pub stripe: config::StripeEnv,
    /// The key window and the authorization page lead come from the charge policy, so the audit
    /// watches the deadlines the engine keeps.
    pub policy: Policy,
    pub audit: AuditSettings,
    /// The audit paces its Stripe calls to its share of the account's budget.
    pub budget: config::StripeBudget,
}

impl FromEnv for AuditConfig {
    fn from_env(env: &dyn Env) -> Result<Self, ConfigError> {
        Ok(Self {
            table_name: config::required(env, config::TABLE_NAME)?,
            stripe: config::stripe_env(env)?,
            policy: config::charge_policy(env)?,
            audit: config::audit_settings(env)?,
            budget: config::stripe_budget(env)?,
        })
    }
}
