//! Wires the checkout function: configuration, the DynamoDB and SQS clients (once per execution
//! environment), tracing (`charge_once::logging`), then the runtime loop.
//! An init that fails is reported to the runtime API before the process exits, so the invoke
//! hears why (`charge_once::startup`).

use std::sync::Arc;

use charge_core::time::SystemClock;
use charge_once::adapters::aws::FUNCTION_TIMEOUTS;
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::sqs::SqsQueue;
use charge_once::config::{FromEnv, ProcessEnv};
use charge_once::startup::started;
use checkout::door::Checkout;
use checkout::handler::handle;
use checkout::CheckoutConfig;
use lambda_runtime::{service_fn, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    charge_once::logging::init_subscriber();
    let deps = started(wire().await).await?;
    let deps = &deps;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| async move {
        Ok::<_, Error>(handle(deps, event).await)
    }))
    .await
}

/// Configuration, secrets and clients, once per execution environment.
async fn wire() -> Result<Checkout, Error> {
    let config = CheckoutConfig::from_env(&ProcessEnv)?;
    let aws = FUNCTION_TIMEOUTS.lambda(&ProcessEnv)?;
    Ok(Checkout {
        store: Arc::new(DynamoStore::new(
            aws_sdk_dynamodb::Client::new(&aws),
            &config.table_name,
        )),
        queue: Arc::new(SqsQueue::new(
            aws_sdk_sqs::Client::new(&aws),
            &config.queue_url,
        )),
        clock: Arc::new(SystemClock),
        pending_grace: config.pending_grace,
        max_charge_attempts: config.max_charge_attempts,
        metrics: Arc::new(charge_once::telemetry::StdoutMetrics),
    })
}
