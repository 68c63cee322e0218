//! Wires the webhook function: configuration, both secrets from Secrets Manager (the endpoint's
//! signing secret and the Stripe API key for `retrieve`), the DynamoDB and Stripe clients (all
//! once per execution environment), tracing, then the runtime loop.

use std::sync::Arc;

use charge_once::adapters::aws::FUNCTION_TIMEOUTS;
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::inbox::DynamoInbox;
use charge_once::adapters::secrets::{fetch_stripe_key, fetch_webhook_secret};
use charge_once::adapters::stripe::StripeGateway;
use charge_once::config::{FromEnv, ProcessEnv};
use charge_once::telemetry::StdoutMetrics;
use charge_once::webhook::{WebhookDeps, DEFAULT_TOLERANCE};
use charge_once::SystemClock;
use lambda_runtime::{service_fn, tracing, Error, LambdaEvent};
use webhook::handler::{handle, WebhookFunction};
use webhook::WebhookConfig;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let config = WebhookConfig::from_env(&ProcessEnv)?;
    let aws = FUNCTION_TIMEOUTS.load().await;
    let secrets = aws_sdk_secretsmanager::Client::new(&aws);
    let secret = fetch_webhook_secret(&secrets, &config.webhook_secret_arn).await?;
    let key = fetch_stripe_key(&secrets, &config.stripe.secret_arn).await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let deps = WebhookFunction {
        webhook: WebhookDeps {
            store: Arc::new(DynamoStore::new(dynamodb.clone(), &config.table_name)),
            inbox: Arc::new(DynamoInbox::new(dynamodb, &config.inbox_table_name)),
            gateway: Arc::new(StripeGateway::new(config.stripe.with_key(key))?),
            clock: Arc::new(SystemClock),
            secret,
            tolerance: DEFAULT_TOLERANCE,
            lease_ttl: config.lease_ttl,
        },
        metrics: Arc::new(StdoutMetrics),
    };
    let deps = &deps;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| async move {
        Ok::<_, Error>(handle(deps, event).await)
    }))
    .await
}
