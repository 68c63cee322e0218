//! The AWS side of chargectl, from the global flags: the SDK configuration (the operator's time
//! bounds, `--endpoint-url`), the operations table, the Stripe gateway with its key from Secrets
//! Manager, and the caller's identity from STS. The commands never see these types: they take
//! the ports ([`crate::commands`]).

use charge_once::adapters::aws::OPERATOR_TIMEOUTS;
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::secrets::fetch_stripe_key;
use charge_once::adapters::stripe::StripeGateway;
use charge_once::config;

use crate::cli::GlobalArgs;
use crate::commands::{CallerIdentity, Failure};

/// `value` of a flag `command` needs, trimmed; a usage error (exit 2) naming `flag` if absent.
pub fn required<'a>(
    value: &'a Option<String>,
    flag: &str,
    command: &str,
) -> Result<&'a str, Failure> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Failure::Usage(format!("`{command}` needs {flag}")))
}

/// The caller's identity from STS `GetCallerIdentity` (needs no IAM permission).
pub struct StsIdentity(pub aws_sdk_sts::Client);

#[async_trait::async_trait]
impl CallerIdentity for StsIdentity {
    async fn caller_arn(&self) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
        let out = self.0.get_caller_identity().send().await?;
        out.arn()
            .map(str::to_owned)
            .ok_or_else(|| "GetCallerIdentity answered without an ARN".into())
    }
}

/// The Stripe client, with the key read the way the functions read it: from the Secrets Manager
/// secret named by `--stripe-secret-arn` / `STRIPE_SECRET_ARN`.
pub async fn stripe_gateway(global: &GlobalArgs, command: &str) -> Result<StripeGateway, Failure> {
    let arn = required(
        &global.stripe_secret_arn,
        "--stripe-secret-arn (or STRIPE_SECRET_ARN), to read Stripe",
        command,
    )?;
    let mut vars = std::collections::HashMap::from([(config::STRIPE_SECRET_ARN, arn)]);
    if let Some(base) = global.stripe_api_base.as_deref() {
        vars.insert(config::STRIPE_API_BASE, base);
    }
    let stripe = config::stripe_env(&vars).map_err(|e| Failure::Usage(e.to_string()))?;
    let sdk = aws_config(global).await;
    let key = fetch_stripe_key(
        &aws_sdk_secretsmanager::Client::new(&sdk),
        &stripe.secret_arn,
    )
    .await
    .map_err(|e| Failure::infra("reading the Stripe key", e))?;
    StripeGateway::new(stripe.with_key(key))
        .map_err(|e| Failure::infra("building the Stripe client", e))
}

/// The standard AWS configuration chain (env, profile, region) with the operator's time bounds
/// (`charge_once::adapters::aws::OPERATOR_TIMEOUTS`), and `--endpoint-url` on top; without
/// credentials a call says "no AWS credentials found".
pub async fn aws_config(global: &GlobalArgs) -> aws_config::SdkConfig {
    let mut loader = OPERATOR_TIMEOUTS.loader();
    if let Some(url) = &global.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    charge_once::adapters::aws::explaining_missing_credentials(loader.load().await)
}

/// The operations table named by `--table` / `TABLE_NAME`.
pub async fn dynamo_store(global: &GlobalArgs, command: &str) -> Result<DynamoStore, Failure> {
    let table = required(&global.table, "--table (or TABLE_NAME)", command)?;
    let config = aws_config(global).await;
    Ok(DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&config),
        table,
    ))
}
