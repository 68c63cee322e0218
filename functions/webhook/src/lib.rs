//! The events function: Stripe's events about our PaymentIntents, delivered either by Amazon
//! EventBridge from the account's Stripe partner event source (AWS authenticates the delivery; no
//! public route) or, where a team chooses it, by the signed webhook route `POST /stripe/webhook`
//! (API Gateway HTTP API, payload v2), the one route without an IAM/JWT authorizer, present only
//! when its secret is configured. Either way an event is a hint and Stripe is the proof
//! ([`charge_once::webhook`]).
//!
//! - [`handler`]: an invocation (an HTTP request or an EventBridge event) →
//!   [`charge_once::webhook`] → an HTTP answer, or an invocation result that EventBridge and
//!   Lambda retry, and its metrics; never a panic, never internals.
//! - [`WebhookConfig`]: what it reads from the environment, once, at init.

pub mod handler;

use charge_once::config::{self, ConfigError, Env, FromEnv};
use charge_once::executor::ChargePolicy;
use charge_once::webhook::STRIPE_PARTNER_SOURCE_PREFIX;

/// Configuration of the events function.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    pub table_name: String,
    pub inbox_table_name: String,
    /// `STRIPE_WEBHOOK_SECRET_ARN`: the endpoint's signing secret(s), read once at init. `None`:
    /// the stack has no webhook route and the function refuses HTTP deliveries.
    pub webhook_secret_arn: Option<String>,
    /// `STRIPE_EVENTS_KEY_SECRET_ARN`: a restricted key (PaymentIntents read) for the retrieves;
    /// `None`: the key in `STRIPE_SECRET_ARN`.
    pub events_key_secret_arn: Option<String>,
    /// `STRIPE_EVENT_SOURCE_NAME`: the partner event source EventBridge events must come from.
    pub event_source: Option<String>,
    /// The Stripe API (retrieve only) and its key's secret.
    pub stripe: config::StripeEnv,
    /// The executor's policy: events are decided by the executor's own plan.
    pub policy: ChargePolicy,
}

impl WebhookConfig {
    /// The secret holding the key the retrieves use.
    pub fn stripe_key_arn(&self) -> &str {
        self.events_key_secret_arn
            .as_deref()
            .unwrap_or(&self.stripe.secret_arn)
    }
}

fn optional_arn(env: &dyn Env, name: &'static str) -> Result<Option<String>, ConfigError> {
    match env.var(name) {
        None => Ok(None),
        Some(arn) if arn.starts_with("arn:") => Ok(Some(arn)),
        Some(_) => Err(ConfigError::Invalid {
            name,
            reason: "must be empty or the ARN of a Secrets Manager secret".into(),
        }),
    }
}

impl FromEnv for WebhookConfig {
    fn from_env(env: &dyn Env) -> Result<Self, ConfigError> {
        let webhook_secret_arn = optional_arn(env, config::STRIPE_WEBHOOK_SECRET_ARN)?;
        let events_key_secret_arn = optional_arn(env, config::STRIPE_EVENTS_KEY_SECRET_ARN)?;
        let event_source = env.var(config::STRIPE_EVENT_SOURCE_NAME);
        if let Some(source) = &event_source {
            if !source.starts_with(STRIPE_PARTNER_SOURCE_PREFIX) {
                return Err(ConfigError::Invalid {
                    name: config::STRIPE_EVENT_SOURCE_NAME,
                    reason: format!("must be empty or a Stripe partner event source ({STRIPE_PARTNER_SOURCE_PREFIX}…)"),
                });
            }
        }
        Ok(Self {
            table_name: config::required(env, config::TABLE_NAME)?,
            inbox_table_name: config::required(env, config::INBOX_TABLE_NAME)?,
            webhook_secret_arn,
            events_key_secret_arn,
            event_source,
            stripe: config::stripe_env(env)?,
            policy: config::charge_policy(env)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;

    #[test]
    fn config_names_what_is_wrong() {
        let mut env = HashMap::from([
            (config::TABLE_NAME, "ops"),
            (config::INBOX_TABLE_NAME, "inbox"),
            (config::STRIPE_SECRET_ARN, "arn:aws:secretsmanager:x"),
        ]);
        // Neither a webhook secret nor a restricted key: EventBridge only, the main key.
        let c = WebhookConfig::from_env(&env).unwrap();
        assert_eq!(c.webhook_secret_arn, None);
        assert_eq!(c.stripe_key_arn(), "arn:aws:secretsmanager:x");
        assert_eq!(c.policy.lease_ttl, Duration::from_secs(60));
        for (name, bad) in [
            (config::STRIPE_WEBHOOK_SECRET_ARN, "whsec_not_an_arn"),
            (config::STRIPE_EVENTS_KEY_SECRET_ARN, "rk_live_not_an_arn"),
            (
                config::STRIPE_EVENT_SOURCE_NAME,
                "aws.partner/example.com/x",
            ),
        ] {
            let mut env = env.clone();
            env.insert(name, bad);
            let err = WebhookConfig::from_env(&env).unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { name: n, reason } if *n == name && !reason.contains(bad)),
                "{name}: {err:?}"
            );
        }
        env.insert(
            config::STRIPE_WEBHOOK_SECRET_ARN,
            "arn:aws:secretsmanager:y",
        );
        env.insert(
            config::STRIPE_EVENTS_KEY_SECRET_ARN,
            "arn:aws:secretsmanager:z",
        );
        let c = WebhookConfig::from_env(&env).unwrap();
        assert_eq!(
            c.webhook_secret_arn.as_deref(),
            Some("arn:aws:secretsmanager:y")
        );
        assert_eq!(c.stripe_key_arn(), "arn:aws:secretsmanager:z");
        assert_eq!(c.inbox_table_name, "inbox");
    }
}
