//! Wires the charge function: configuration, the Stripe key from Secrets Manager, the DynamoDB
//! client and the Stripe client (all once per execution environment), tracing, then the runtime loop.

use std::sync::Arc;

use charge::handler::handle;
use charge::ChargeConfig;
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::secrets::fetch_stripe_key;
use charge_once::adapters::stripe::StripeGateway;
use charge_once::config::ProcessEnv;
use charge_once::executor::ChargeDeps;
use charge_once::SystemClock;
use lambda_runtime::{service_fn, tracing, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let config = ChargeConfig::from_env(&ProcessEnv)?;
    let aws = aws_config::load_from_env().await;
    let key = fetch_stripe_key(
        &aws_sdk_secretsmanager::Client::new(&aws),
        &config.stripe.secret_arn,
    )
    .await?;
    let deps = ChargeDeps {
        store: Arc::new(DynamoStore::new(
            aws_sdk_dynamodb::Client::new(&aws),
            &config.table_name,
        )),
        gateway: Arc::new(StripeGateway::new(config.stripe.with_key(key))?),
        clock: Arc::new(SystemClock),
        policy: config.policy,
    };
    let deps = &deps;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| async move {
        Ok::<_, Error>(handle(deps, event).await)
    }))
    .await
}
