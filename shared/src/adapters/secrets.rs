//! The Stripe API key from AWS Secrets Manager, read once at init. The key never reaches a log
//! line: errors name the secret's ARN and the reason, never its value.

use aws_sdk_secretsmanager::Client;

use crate::adapters::stripe::SecretKey;
use crate::config::{parse_secret_key, ConfigError};

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot read secret {arn}")]
    Read {
        arn: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("secret {arn} has no SecretString")]
    Empty { arn: String },
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}

/// `GetSecretValue` on `arn`, parsed as a Stripe secret or restricted key.
pub async fn fetch_stripe_key(client: &Client, arn: &str) -> Result<SecretKey, SecretError> {
    Ok(parse_secret_key(&fetch_secret_string(client, arn).await?)?)
}

/// `GetSecretValue` on `arn`, parsed as the endpoint's signing secrets (one `whsec_…`, two
/// during a rotation; [`crate::config::parse_webhook_secrets`]).
pub async fn fetch_webhook_secrets(
    client: &Client,
    arn: &str,
) -> Result<Vec<crate::events::WebhookSecret>, SecretError> {
    Ok(crate::config::parse_webhook_secrets(
        &fetch_secret_string(client, arn).await?,
    )?)
}

/// `GetSecretValue` on `arn`: its `SecretString`, which the callers parse.
async fn fetch_secret_string(client: &Client, arn: &str) -> Result<String, SecretError> {
    let out = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| SecretError::Read {
            arn: arn.to_owned(),
            source: Box::new(e),
        })?;
    out.secret_string()
        .map(str::to_owned)
        .ok_or_else(|| SecretError::Empty {
            arn: arn.to_owned(),
        })
}
