//! Wires the notify function: configuration, the DynamoDB, EventBridge and SQS clients (once per execution
//! environment), tracing (`charge_once::logging`), then the runtime loop.
//! An init that fails is reported to the runtime API before the process exits, so the invoke
//! hears why (`charge_once::startup`).

use std::sync::Arc;

use charge_core::time::SystemClock;
use charge_once::adapters::aws::FUNCTION_TIMEOUTS;
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::eventbridge::EventBridgePublisher;
use charge_once::adapters::sqs::SqsDeadLetters;
use charge_once::config::{FromEnv, ProcessEnv};
use charge_once::startup::started;
use charge_once::telemetry::StdoutMetrics;
use lambda_runtime::{service_fn, Error, LambdaEvent};
use notify::handler::{handle, Notify};
use notify::NotifyConfig;

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
async fn wire() -> Result<Notify, Error> {
    let config = NotifyConfig::from_env(&ProcessEnv)?;
    let aws = FUNCTION_TIMEOUTS.lambda(&ProcessEnv)?;
    Ok(Notify {
        store: Arc::new(DynamoStore::new(
            aws_sdk_dynamodb::Client::new(&aws),
            &config.table_name,
        )),
        publisher: Arc::new(EventBridgePublisher::new(
            aws_sdk_eventbridge::Client::new(&aws),
            &config.event_bus_name,
        )),
        // A standard queue (its URL has no `.fifo`): no group, no dedup id.
        dead_letters: Arc::new(SqsDeadLetters::new(
            aws_sdk_sqs::Client::new(&aws),
            &config.dead_letter_queue_url,
        )),
        clock: Arc::new(SystemClock),
        metrics: Arc::new(StdoutMetrics),
    })
}
