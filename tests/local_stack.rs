//! The local stack (`infra/local/up.sh`) gives every function what it needs to start: its
//! provisioning (`infra/local/provision.py`, run here against the tests' moto) prints an
//! environment on which every function's configuration reads, and the resources and secrets it
//! names exist. Before, the events function's init failed with `Missing("INBOX_TABLE_NAME")` and
//! notify's with `Missing("EVENT_BUS_NAME")`, seen only in the watch log.

use std::collections::HashMap;
use std::process::Command;

use charge_once::adapters::secrets::{fetch_stripe_key, fetch_webhook_secrets};
use charge_once::config::{ConfigError, Env, FromEnv};
use testkit::aws::sdk_config;

/// What provision.py prints, as the env file `cargo lambda watch` reads.
struct Provisioned(HashMap<String, String>);

impl Env for Provisioned {
    fn var(&self, name: &str) -> Option<String> {
        self.0.get(name).filter(|v| !v.is_empty()).cloned()
    }
}

fn provision(secret_file: &std::path::Path) -> Provisioned {
    let venv = std::env::var("CHARGE_ONCE_VENV")
        .expect("CHARGE_ONCE_VENV is not set: run through infra/local/with-stack.sh");
    let endpoint = std::env::var("AWS_ENDPOINT_URL").expect("AWS_ENDPOINT_URL (with-stack.sh)");
    let out = Command::new(format!("{venv}/bin/python"))
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../infra/local/provision.py"
        ))
        .arg(&endpoint)
        .arg("http://127.0.0.1:12111")
        .arg(secret_file)
        .output()
        .expect("run provision.py");
    assert!(
        out.status.success(),
        "provision.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    Provisioned(
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    )
}

#[tokio::test]
async fn every_function_starts_on_the_local_stacks_environment() {
    let dir = std::env::temp_dir().join(testkit::aws::unique("local-stack"));
    std::fs::create_dir_all(&dir).unwrap();
    let secret_file = dir.join("webhook-secret");
    let env = provision(&secret_file);
    let ok = |name: &str, r: Result<(), ConfigError>| {
        r.unwrap_or_else(|e| panic!("{name} cannot start on the local stack: {e}"))
    };
    ok(
        "checkout",
        checkout::CheckoutConfig::from_env(&env).map(drop),
    );
    ok("charge", charge::ChargeConfig::from_env(&env).map(drop));
    ok(
        "reconciler",
        reconciler::ReconcilerConfig::from_env(&env).map(drop),
    );
    ok("notify", notify::NotifyConfig::from_env(&env).map(drop));
    ok("audit", audit::AuditConfig::from_env(&env).map(drop));
    let events = events::EventsConfig::from_env(&env)
        .unwrap_or_else(|e| panic!("the events function cannot start on the local stack: {e}"));

    // What the configurations name exists on moto, and the secrets read as the functions read them.
    let config = sdk_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    for table in [&events.table_name, &events.inbox_table_name] {
        dynamodb
            .describe_table()
            .table_name(table)
            .send()
            .await
            .unwrap_or_else(|e| panic!("table {table}: {e}"));
    }
    let bus = notify::NotifyConfig::from_env(&env).unwrap().event_bus_name;
    aws_sdk_eventbridge::Client::new(&config)
        .describe_event_bus()
        .name(&bus)
        .send()
        .await
        .unwrap_or_else(|e| panic!("bus {bus}: {e}"));
    let secrets = aws_sdk_secretsmanager::Client::new(&config);
    fetch_stripe_key(&secrets, events.stripe_key_arn())
        .await
        .expect("the Stripe key");
    let arn = events
        .webhook_secret_arn
        .as_deref()
        .expect("a signing secret");
    let signing = fetch_webhook_secrets(&secrets, arn)
        .await
        .expect("a signing secret of Stripe's form");
    assert_eq!(signing.len(), 1);
    // The file holds the same secret, for whoever signs deliveries; provisioning again keeps it.
    let written = std::fs::read_to_string(&secret_file).unwrap();
    assert!(written.trim().starts_with("whsec_"));
    let again = provision(&secret_file);
    assert_eq!(std::fs::read_to_string(&secret_file).unwrap(), written);
    assert_eq!(again.0, env.0);
    assert!(
        !env.0.values().any(|v| v.contains(written.trim())),
        "the signing secret is never printed"
    );
    std::fs::remove_dir_all(&dir).ok();
}
