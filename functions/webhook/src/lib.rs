//! The webhook function: `POST /stripe/webhook` (API Gateway HTTP API, payload v2), the one route
//! without an IAM/JWT authorizer: Stripe cannot sign SigV4, so the function authenticates every
//! delivery by Stripe's signature before anything else ([`charge_once::webhook`]).
//!
//! - [`handler`]: the request → [`charge_once::webhook::receive`] → an HTTP answer and its
//!   metrics; never a panic, never internals.
//! - [`WebhookConfig`]: what it reads from the environment, once, at init.

pub mod handler;

use std::time::Duration;

use charge_once::config::{self, ConfigError, Env, FromEnv};

/// Configuration of the webhook function.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    pub table_name: String,
    pub inbox_table_name: String,
    /// `STRIPE_WEBHOOK_SECRET_ARN`: the endpoint's `whsec_…` secret, read once at init.
    pub webhook_secret_arn: String,
    /// The Stripe API (retrieve only) and its key's secret.
    pub stripe: config::StripeEnv,
    pub lease_ttl: Duration,
}

impl FromEnv for WebhookConfig {
    fn from_env(env: &dyn Env) -> Result<Self, ConfigError> {
        let webhook_secret_arn = config::required(env, config::STRIPE_WEBHOOK_SECRET_ARN)?;
        if !webhook_secret_arn.starts_with("arn:") {
            return Err(ConfigError::Invalid {
                name: config::STRIPE_WEBHOOK_SECRET_ARN,
                reason: "must be the ARN of a Secrets Manager secret".into(),
            });
        }
        Ok(Self {
            table_name: config::required(env, config::TABLE_NAME)?,
            inbox_table_name: config::required(env, config::INBOX_TABLE_NAME)?,
            webhook_secret_arn,
            stripe: config::stripe_env(env)?,
            lease_ttl: config::lease_ttl(env)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn config_names_what_is_missing() {
        let mut env = HashMap::from([
            (config::TABLE_NAME, "ops"),
            (config::INBOX_TABLE_NAME, "inbox"),
            (config::STRIPE_SECRET_ARN, "arn:aws:secretsmanager:x"),
        ]);
        assert_eq!(
            WebhookConfig::from_env(&env).unwrap_err(),
            ConfigError::Missing(config::STRIPE_WEBHOOK_SECRET_ARN)
        );
        env.insert(config::STRIPE_WEBHOOK_SECRET_ARN, "whsec_not_an_arn");
        assert!(matches!(
            WebhookConfig::from_env(&env),
            Err(ConfigError::Invalid { .. })
        ));
        env.insert(
            config::STRIPE_WEBHOOK_SECRET_ARN,
            "arn:aws:secretsmanager:y",
        );
        let c = WebhookConfig::from_env(&env).unwrap();
        assert_eq!(c.inbox_table_name, "inbox");
        assert_eq!(c.lease_ttl, Duration::from_secs(60));
    }
}
