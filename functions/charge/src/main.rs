//! Wires the charge function: configuration, the Stripe key from Secrets Manager, the DynamoDB
//! client and the Stripe client (all once per execution environment), tracing, then the runtime loop.

use std::sync::Arc;

use charge::handler::{handle, ChargeFunction};
use charge::ChargeConfig;
use charge_once::adapters::aws::{charge_deps, FUNCTION_TIMEOUTS};
use charge_once::adapters::sqs::SqsDeadLetters;
use charge_once::config::{FromEnv, ProcessEnv};
use charge_once::telemetry::StdoutMetrics;
use lambda_runtime::{service_fn, tracing, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let config = ChargeConfig::from_env(&ProcessEnv)?;
    let aws = FUNCTION_TIMEOUTS.load().await;
    let deps = ChargeFunction {
        charge: charge_deps(&aws, &config.table_name, config.stripe, config.policy).await?,
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
