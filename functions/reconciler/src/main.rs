//! Wires the reconciler: configuration, the Stripe key from Secrets Manager, DynamoDB, SQS and
//! Stripe clients (all once per execution environment), tracing (`charge_once::logging`), then the runtime loop.
//! An init that fails is reported to the runtime API before the process exits, so the invoke
//! hears why (`charge_once::startup`).

use std::sync::Arc;
use std::time::Duration;

use charge_once::adapters::aws::{charge_deps, FUNCTION_TIMEOUTS};
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::sqs::SqsQueue;
use charge_once::config::{FromEnv, ProcessEnv};
use charge_once::dispute_watch::DisputeWatchDeps;
use charge_once::pacing::{Budget, PacedGateway, TokioSleeper};
use charge_once::reconciler::ReconcilerDeps;
use charge_once::refund_watch::RefundWatchDeps;
use charge_once::startup::started;
use charge_once::telemetry::StdoutMetrics;
use lambda_runtime::{service_fn, Error, LambdaEvent};
use reconciler::handler::{handle, ReconcilerFunction, PAGE_SIZE};
use reconciler::ReconcilerConfig;

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
async fn wire() -> Result<ReconcilerFunction, Error> {
    let config = ReconcilerConfig::from_env(&ProcessEnv)?;
    let aws = FUNCTION_TIMEOUTS.lambda(&ProcessEnv)?;
    let mut charge = charge_deps(&aws, &config.table_name, config.stripe, config.policy).await?;
    // The watches' cursors are items of the same table.
    let cursor = Arc::new(DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&aws),
        &config.table_name,
    ));
    let budget = |per_second: f64| {
        Arc::new(Budget::new(
            per_second,
            1,
            charge.clock.clone(),
            Arc::new(TokioSleeper),
        ))
    };
    let (calls, search) = (
        budget(config.budget.reconciler_share()),
        budget(config.budget.reconciler_search_share()),
    );
    // A tick works through its page call by call; waiting up to 10 s for a slot is within its
    // time budget, and a slot further away is retried next tick.
    charge.gateway = Arc::new(PacedGateway::new(
        charge.gateway,
        calls,
        Some(search),
        Duration::from_secs(10),
    ));
    Ok(ReconcilerFunction {
        reconciler: ReconcilerDeps {
            charge,
            queue: Arc::new(SqsQueue::new(
                aws_sdk_sqs::Client::new(&aws),
                &config.queue_url,
            )),
            page_size: PAGE_SIZE,
            charge_throughput: config.budget.charge_throughput(),
            dispute_watch: Some(DisputeWatchDeps {
                cursor: cursor.clone(),
                sleeper: Arc::new(TokioSleeper),
            }),
            refund_watch: Some(RefundWatchDeps {
                watch: config.refund_watch,
                cursor,
            }),
        },
        metrics: Arc::new(StdoutMetrics),
    })
}
