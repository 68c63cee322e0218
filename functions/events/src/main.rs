//! Wires the events function: configuration, its secrets from Secrets Manager (the webhook
//! endpoint's signing secrets when the webhook route exists, and the Stripe key for `retrieve`:
//! the restricted one when configured), the DynamoDB and Stripe clients (Stripe paced to the
//! function's share of the account's budget; all once per execution
//! environment), tracing (`charge_once::logging`), then the runtime loop.
//! An init that fails is reported to the runtime API before the process exits, so the invoke
//! hears why (`charge_once::startup`).

use std::sync::Arc;

use charge_core::time::{Clock, SystemClock};
use charge_once::adapters::aws::FUNCTION_TIMEOUTS;
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::inbox::DynamoInbox;
use charge_once::adapters::secrets::{fetch_stripe_key, fetch_webhook_secrets};
use charge_once::adapters::stripe::StripeGateway;
use charge_once::config::{FromEnv, ProcessEnv};
use charge_once::events::{EventsDeps, DEFAULT_TOLERANCE};
use charge_once::executor::EngineDeps;
use charge_once::pacing::TokioSleeper;
use charge_once::startup::started;
use charge_once::telemetry::StdoutMetrics;
use events::handler::{handle, EventsFunction};
use events::EventsConfig;
use lambda_runtime::{service_fn, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    charge_once::logging::init_subscriber();
    let deps = started(wire().await).await?;
    let deps = &deps;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| async move {
        handle(deps, event).await
    }))
    .await
}

/// Configuration, secrets and clients, once per execution environment.
async fn wire() -> Result<EventsFunction, Error> {
    let config = EventsConfig::from_env(&ProcessEnv)?;
    let aws = FUNCTION_TIMEOUTS.lambda(&ProcessEnv)?;
    let secrets = aws_sdk_secretsmanager::Client::new(&aws);
    // A placeholder or malformed signing secret fails the init here, naming the parameter.
    let webhook_secrets = match &config.webhook_secret_arn {
        Some(arn) => Some(fetch_webhook_secrets(&secrets, arn).await?),
        None => None,
    };
    let key = fetch_stripe_key(&secrets, config.stripe_key_arn()).await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    Ok(EventsFunction {
        events: EventsDeps {
            charge: EngineDeps {
                store: Arc::new(DynamoStore::new(dynamodb.clone(), &config.table_name)),
                gateway: Arc::new(events::paced(
                    Arc::new(StripeGateway::new(config.stripe.with_key(key))?),
                    &config.budget,
                    clock.clone(),
                    Arc::new(TokioSleeper),
                )),
                clock,
                policy: config.policy,
            },
            inbox: Arc::new(DynamoInbox::new(dynamodb, &config.inbox_table_name)),
            secrets: webhook_secrets,
            tolerance: DEFAULT_TOLERANCE,
            event_source: config.event_source,
        },
        metrics: Arc::new(StdoutMetrics),
    })
}
