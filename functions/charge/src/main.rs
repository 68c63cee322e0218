//! Wires the charge function: configuration, the Stripe key from Secrets Manager, the DynamoDB
//! client and the Stripe client (all once per execution environment), tracing (`charge_once::logging`), then the runtime loop.
//! An init that fails is reported to the runtime API before the process exits, so the invoke
//! hears why (`charge_once::startup`).

use std::sync::Arc;

use charge::handler::{handle, ChargeFunction};
use charge::ChargeConfig;
use charge_once::adapters::aws::{charge_deps, FUNCTION_TIMEOUTS};
use charge_once::adapters::sqs::{SqsDeadLetters, SqsQueue};
use charge_once::config::{FromEnv, ProcessEnv, StripeBudget};
use charge_once::pacing::{Budget, MessageBudget, TokioSleeper};
use charge_once::startup::started;
use charge_once::telemetry::StdoutMetrics;
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
async fn wire() -> Result<ChargeFunction, Error> {
    let config = ChargeConfig::from_env(&ProcessEnv)?;
    let aws = FUNCTION_TIMEOUTS.lambda(&ProcessEnv)?;
    let charge = charge_deps(&aws, &config.table_name, config.stripe, config.policy).await?;
    // Each message takes a slot of this environment's share of the account's Stripe budget and
    // of the endpoint's its call goes to, before its claim; a slot further away than the
    // invocation can wait sends it back soon.
    let share = |per_second: f64| {
        Arc::new(
            Budget::new(
                per_second,
                config.budget.charge_burst(),
                charge.clock.clone(),
                Arc::new(TokioSleeper),
            )
            .with_carry(StripeBudget::charge_carry(per_second)),
        )
    };
    let budget = Arc::new(MessageBudget::new(
        share(config.budget.charge_share()),
        || share(config.budget.charge_endpoint_share()),
    ));
    let sqs = aws_sdk_sqs::Client::new(&aws);
    Ok(ChargeFunction {
        charge,
        dead_letters: Arc::new(SqsDeadLetters::new(
            sqs.clone(),
            &config.dead_letter_queue_url,
        )),
        visibility: Arc::new(SqsQueue::new(sqs, &config.queue_url)),
        budget: Some(budget),
        metrics: Arc::new(StdoutMetrics),
    })
}
