//! Wires the charge function: configuration, the Stripe key from Secrets Manager, the DynamoDB
//! client and the Stripe client (all once per execution environment), tracing, then the runtime loop.

use std::sync::Arc;

use charge::handler::{handle, ChargeFunction};
use charge::ChargeConfig;
use charge_once::adapters::aws::FUNCTION_TIMEOUTS;
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::secrets::fetch_stripe_key;
use charge_once::adapters::sqs::SqsDeadLetters;
use charge_once::adapters::stripe::StripeGateway;
use charge_once::config::ProcessEnv;
use charge_once::executor::ChargeDeps;
use charge_once::telemetry::StdoutMetrics;
use charge_once::SystemClock;
use lambda_runtime::{service_fn, tracing, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let config = ChargeConfig::from_env(&ProcessEnv)?;
    let aws = FUNCTION_TIMEOUTS.load().await;
    let key = fetch_stripe_key(
        &aws_sdk_secretsmanager::Client::new(&aws),
        &config.stripe.secret_arn,
    )
    .await?;
    let deps = ChargeFunction {
        charge: ChargeDeps {
            store: Arc::new(DynamoStore::new(
                aws_sdk_dynamodb::Client::new(&aws),
                &config.table_name,
            )),
            gateway: Arc::new(StripeGateway::new(config.stripe.with_key(key))?),
            clock: Arc::new(SystemClock),
            policy: config.policy,
        },
        dead_letters: Arc::new(SqsDeadLetters::new(
            aws_sdk_sqs::Client::new(&aws),
            &config.dead_letter_queue_url,
        )),
        metrics: Arc::new(StdoutMetrics),
    };
    let deps = &deps;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| async move {
        Ok::<_, Error>(handle(deps, event).await)
    }))
    .await
}
