//! Wires the audit: configuration, the Stripe key from Secrets Manager, DynamoDB and a Stripe
//! client paced to the audit's share of the account's budget (all once per execution environment), tracing, then the
//! runtime loop. An init that fails is reported to the runtime API before the process exits.

use std::sync::Arc;
use std::time::Duration;

use audit::handler::{handle, AuditFunction};
use audit::AuditConfig;
use charge_core::audit::AuditPolicy;
use charge_once::adapters::aws::{charge_deps, FUNCTION_TIMEOUTS};
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::config::{FromEnv, ProcessEnv};
use charge_once::pacing::{Budget, PacedGateway, TokioSleeper};
use charge_once::startup::started;
use charge_once::telemetry::StdoutMetrics;
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

async fn wire() -> Result<AuditFunction, Error> {
    let config = AuditConfig::from_env(&ProcessEnv)?;
    let aws = FUNCTION_TIMEOUTS.lambda(&ProcessEnv)?;
    let policy = AuditPolicy {
        key_window: config.policy.key_window,
        page_lead: config.policy.authorization_page_lead,
        refund_recheck: config.audit.refund_recheck,
    };
    let charge = charge_deps(&aws, &config.table_name, config.stripe, config.policy).await?;
    let budget = Arc::new(Budget::new(
        config.budget.audit_share(),
        1,
        charge.clock.clone(),
        Arc::new(TokioSleeper),
    ));
    // The audit can wait: a slot up to 30 s away is waited for, within the run's deadline.
    let gateway = Arc::new(PacedGateway::new(
        charge.gateway,
        budget.clone(),
        Some(budget),
        Duration::from_secs(30),
    ));
    let log = Arc::new(DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&aws),
        &config.table_name,
    ));
    Ok(AuditFunction {
        store: charge.store,
        log,
        gateway,
        clock: charge.clock,
        metrics: Arc::new(StdoutMetrics),
        policy,
        window: config.audit.window,
    })
}
