//! The AWS SDK configuration every process uses, with **time bounds on every call** (DynamoDB,
//! SQS, Secrets Manager): without them a hung connection runs into the Lambda timeout, which kills
//! the whole batch or tick instead of failing one call that the code already handles.
//!
//! The one place where the SDK's timeouts are chosen, against the functions' timeouts in
//! template.yaml (tests/template.rs checks the arithmetic):
//!
//! | | connect | per attempt | per operation (all retries) |
//! |---|---|---|---|
//! | functions ([`FUNCTION_TIMEOUTS`]) | 1 s | 1 s | 3 s |
//! | `chargectl` ([`OPERATOR_TIMEOUTS`]) | 3 s | 5 s | 15 s |
//!
//! The arithmetic, each line checked against template.yaml by a test in `tests/template.rs`
//! (`the_sdk_timeouts_fit_inside_every_function_timeout`, and the events function's own test),
//! which also holds the function timeouts written here to the template's:
//! - checkout (10 s): PutItem + SendMessage ≤ 2 × 3 s = 6 s, an answer well inside the timeout.
//! - charge (300 s, batches of 10): per message a claim and a record ≤ 2 × 3 s, the Stripe call
//!   with its one same-key retry ≤ 2 × 10 s + 1 s = 21 s: 27 s (`charge::handler::WORST_MESSAGE`),
//!   × 10 = 270 s < 300 s even if every message of the batch is in one group (groups run
//!   concurrently, a group in order).
//! - events (40 s): inbox put, get, claim, record, inbox delete ≤ 5 × 3 s, one retrieve at its
//!   worst 20.25 s: 35.25 s, 2 s to spare; an HTTP delivery keeps to 27 s under the HTTP API's 30 s.
//! - reconciler (120 s): a tick stops taking work with 30 s left (claim + Stripe + record ≈ 27 s).
//! - notify (65 s): a batch of up to 100 stream records: its settled outcomes read back from the
//!   table at once (≤ 3 s), then published in PutEvents calls of 10 entries, in order:
//!   ≤ 10 × 3 s = 30 s, and 30 s more for DLQ copies of records not published: 63 s.
//! - audit (900 s, Lambda's longest): it reads until 20 s before its deadline (one Stripe call at
//!   its worst 21 s is what may run over), then keeps its report with one PutItem (≤ 3 s).
//! - DynamoDB and SQS answer in milliseconds; a 1 s attempt leaves room for a slow one, and the
//!   SDK's standard retries (3 attempts) fit inside the 3 s operation bound.
//! - An operator on a laptop over a VPN gets looser bounds; nothing there races a Lambda timeout.

use std::sync::Arc;
use std::time::Duration;

use aws_config::environment::EnvironmentVariableCredentialsProvider;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
// The SDK re-exports the credential types (aws-credential-types, already in every function).
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::future::ProvideCredentials as ProvideCredentialsFuture;
use aws_sdk_dynamodb::config::{ProvideCredentials, SharedCredentialsProvider};
use charge_core::plan::Policy;
use charge_core::time::SystemClock;

use crate::adapters::dynamodb::DynamoStore;
use crate::adapters::secrets::fetch_stripe_key;
use crate::adapters::stripe::StripeGateway;
use crate::config::{ConfigError, Env, StripeEnv};
use crate::executor::EngineDeps;

/// The time bounds of one process's AWS calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AwsTimeouts {
    pub connect: Duration,
    pub attempt: Duration,
    pub operation: Duration,
}

/// The five functions.
pub const FUNCTION_TIMEOUTS: AwsTimeouts = AwsTimeouts {
    connect: Duration::from_secs(1),
    attempt: Duration::from_secs(1),
    operation: Duration::from_secs(3),
};

/// `chargectl`.
pub const OPERATOR_TIMEOUTS: AwsTimeouts = AwsTimeouts {
    connect: Duration::from_secs(3),
    attempt: Duration::from_secs(5),
    operation: Duration::from_secs(15),
};

impl AwsTimeouts {
    pub fn timeout_config(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.connect)
            .operation_attempt_timeout(self.attempt)
            .operation_timeout(self.operation)
            .build()
    }

    /// The standard configuration chain (environment, profile, `AWS_ENDPOINT_URL`, region) with
    /// these bounds, and [`explaining_missing_credentials`].
    pub async fn load(&self) -> aws_config::SdkConfig {
        explaining_missing_credentials(self.loader().load().await)
    }

    /// The loader, for callers that add to it (an endpoint override), with [`https_client`].
    pub fn loader(&self) -> aws_config::ConfigLoader {
        aws_config::defaults(BehaviorVersion::latest())
            .timeout_config(self.timeout_config())
            .http_client(https_client())
    }

    /// What a function needs on Lambda, from the environment only, with these bounds: the region
    /// (`AWS_REGION`, else `AWS_DEFAULT_REGION`; Lambda sets both), the execution role's
    /// credentials from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN`
    /// (Lambda sets them), `AWS_ENDPOINT_URL` when set (the local stack, moto), the SDK's standard
    /// retries (3 attempts) and [`https_client`].
    ///
    /// Not [`Self::load`]'s whole chain (profile files, SSO, web identity through STS, IMDS,
    /// container credentials, per-service endpoint variables): a function uses none of it, and
    /// linking it made every function's zip larger (BENCHMARKS.md section 4). Operators'
    /// tools (`chargectl`) keep the chain.
    pub fn lambda(&self, env: &dyn Env) -> Result<aws_config::SdkConfig, ConfigError> {
        let region = env
            .var("AWS_REGION")
            .or_else(|| env.var("AWS_DEFAULT_REGION"))
            .ok_or(ConfigError::Missing("AWS_REGION"))?;
        let mut config = aws_config::SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(region))
            .credentials_provider(SharedCredentialsProvider::new(
                EnvironmentVariableCredentialsProvider::new(),
            ))
            .retry_config(RetryConfig::standard())
            .timeout_config(self.timeout_config())
            .http_client(https_client());
        if let Some(url) = env.var("AWS_ENDPOINT_URL").filter(|u| !u.is_empty()) {
            config = config.endpoint_url(url);
        }
        Ok(config.build())
    }
}

/// `config` whose credentials, when there are none, fail with an error that says so. The SDK's
/// chain tries the environment, the profile files (SSO included), web identity, the container and
/// last the instance metadata service (IMDS), and reports only what the last one answered: on a
/// laptop without credentials a call fails with "failed to load IMDS session token" or similar,
/// which says nothing of what is missing. For the tools (`load`'s chain); a function reads its
/// credentials from the environment only ([`AwsTimeouts::lambda`]).
pub fn explaining_missing_credentials(config: aws_config::SdkConfig) -> aws_config::SdkConfig {
    let Some(inner) = config.credentials_provider() else {
        return config;
    };
    config
        .into_builder()
        .credentials_provider(SharedCredentialsProvider::new(ExplainedCredentials(inner)))
        .build()
}

#[derive(Debug)]
struct ExplainedCredentials(SharedCredentialsProvider);

impl ProvideCredentials for ExplainedCredentials {
    fn provide_credentials<'a>(&'a self) -> ProvideCredentialsFuture<'a>
    where
        Self: 'a,
    {
        ProvideCredentialsFuture::new(async move {
            self.0
                .provide_credentials()
                .await
                .map_err(explain_credentials_error)
        })
    }
}

/// `err` as "no AWS credentials found: …" when it means there are none: no provider of the chain
/// had any (`CredentialsNotLoaded`), or the last one, IMDS, failed, which the chain reaches only
/// when every provider before it had nothing. Any other error (an expired SSO session, a bad
/// profile) is what is wrong, and is kept as it is.
pub fn explain_credentials_error(err: CredentialsError) -> CredentialsError {
    // The chain lists each provider it tried on a line of its own: one line here.
    let said = crate::telemetry::ErrorChain(&err)
        .to_string()
        .lines()
        .map(str::trim)
        .collect::<Vec<_>>()
        .join("; ");
    let lower = said.to_ascii_lowercase();
    let none = matches!(err, CredentialsError::CredentialsNotLoaded(_))
        || said.contains("IMDS")
        || lower.contains("instance metadata");
    if !none {
        return err;
    }
    CredentialsError::provider_error(format!(
        "no AWS credentials found: none in the environment (AWS_ACCESS_KEY_ID / \
         AWS_SECRET_ACCESS_KEY), the profile files (AWS_PROFILE, ~/.aws; SSO included), web \
         identity or the container, and the instance metadata service gave none ({said})"
    ))
}

/// The HTTPS client of every SDK client built from [`AwsTimeouts::lambda`] or
/// [`AwsTimeouts::loader`]: the SDK's own (hyper 1, rustls 0.23, the system's root certificates,
/// connect and read timeouts from the SDK config) with ring as rustls' crypto provider, the one
/// backend a function links (root Cargo.toml; `infra/supply-chain/one-stack.sh` checks it). The
/// SDK's default client would be the same on aws-lc-rs.
pub fn https_client() -> aws_sdk_dynamodb::config::SharedHttpClient {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// The charge executor as the charge function and the reconciler run it: the Stripe key read once
/// from Secrets Manager, the operations table, the Stripe client, the system clock.
pub async fn charge_deps(
    aws: &aws_config::SdkConfig,
    table_name: &str,
    stripe: StripeEnv,
    policy: Policy,
) -> Result<EngineDeps, Box<dyn std::error::Error + Send + Sync>> {
    let secrets = aws_sdk_secretsmanager::Client::new(aws);
    let key = fetch_stripe_key(&secrets, &stripe.secret_arn).await?;
    Ok(EngineDeps {
        store: Arc::new(DynamoStore::new(
            aws_sdk_dynamodb::Client::new(aws),
            table_name,
        )),
        gateway: Arc::new(StripeGateway::new(stripe.with_key(key))?),
        clock: Arc::new(SystemClock),
        policy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bound_is_set_and_consistent() {
        for t in [FUNCTION_TIMEOUTS, OPERATOR_TIMEOUTS] {
            let c = t.timeout_config();
            assert_eq!(c.connect_timeout(), Some(t.connect));
            assert_eq!(c.operation_attempt_timeout(), Some(t.attempt));
            assert_eq!(c.operation_timeout(), Some(t.operation));
            assert!(t.attempt <= t.operation && t.connect <= t.operation);
        }
    }

    #[test]
    fn the_lambda_config_is_the_environment_and_these_bounds() {
        use std::collections::HashMap;
        struct Vars(HashMap<&'static str, &'static str>);
        impl Env for Vars {
            fn var(&self, name: &str) -> Option<String> {
                self.0.get(name).map(|v| v.to_string())
            }
        }
        let vars = Vars(HashMap::from([
            ("AWS_REGION", "eu-west-1"),
            ("AWS_DEFAULT_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:5000"),
        ]));
        let c = FUNCTION_TIMEOUTS.lambda(&vars).unwrap();
        assert_eq!(c.region().map(|r| r.as_ref()), Some("eu-west-1"));
        assert_eq!(c.endpoint_url(), Some("http://127.0.0.1:5000"));
        assert!(c.credentials_provider().is_some());
        let t = c.timeout_config().expect("timeouts set");
        assert_eq!(t.operation_timeout(), Some(Duration::from_secs(3)));
        assert_eq!(c.retry_config().map(|r| r.max_attempts()), Some(3));
        // AWS_DEFAULT_REGION when AWS_REGION is absent; no endpoint override unless set.
        let fallback = Vars(HashMap::from([("AWS_DEFAULT_REGION", "us-east-2")]));
        let c = FUNCTION_TIMEOUTS.lambda(&fallback).unwrap();
        assert_eq!(c.region().map(|r| r.as_ref()), Some("us-east-2"));
        assert_eq!(c.endpoint_url(), None);
        let err = FUNCTION_TIMEOUTS.lambda(&Vars(HashMap::new())).unwrap_err();
        assert!(matches!(err, ConfigError::Missing("AWS_REGION")), "{err}");
    }

    /// A provider that fails the way the default chain does.
    #[derive(Debug)]
    struct Failing(fn() -> CredentialsError);

    impl ProvideCredentials for Failing {
        fn provide_credentials<'a>(&'a self) -> ProvideCredentialsFuture<'a>
        where
            Self: 'a,
        {
            ProvideCredentialsFuture::ready(Err((self.0)()))
        }
    }

    #[test]
    fn missing_credentials_are_said_to_be_missing_and_other_errors_are_kept() {
        let said = |e: CredentialsError| {
            crate::telemetry::ErrorChain(&explain_credentials_error(e)).to_string()
        };
        // Nothing in the chain; the chain ending at IMDS (what a laptop without credentials gets).
        for (case, err) in [
            (
                "no provider had any",
                CredentialsError::not_loaded("no credentials found in chain"),
            ),
            (
                "IMDS answered last",
                CredentialsError::provider_error(
                    "failed to load IMDS session token: service error: request forbidden",
                ),
            ),
        ] {
            let text = said(err);
            assert!(text.contains("no AWS credentials found"), "{case}: {text}");
            assert!(text.contains("AWS_PROFILE"), "{case}: {text}");
        }
        assert!(
            said(CredentialsError::provider_error(
                "failed to load IMDS session token"
            ))
            .contains("failed to load IMDS session token"),
            "what IMDS said is kept"
        );
        // The twin: credentials that exist but fail say what failed, not "none found".
        let expired = said(CredentialsError::provider_error(
            "the SSO session has expired or is invalid",
        ));
        assert!(!expired.contains("no AWS credentials found"), "{expired}");
        assert!(expired.contains("the SSO session has expired"), "{expired}");
    }

    #[tokio::test]
    async fn a_call_without_credentials_fails_saying_so_and_naming_the_table() {
        use charge_core::operation::OperationKey;

        use crate::ports::OperationStore;
        // No network needed: the request is signed before it is sent, and signing fails.
        let bare = aws_config::SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url("http://127.0.0.1:9")
            .credentials_provider(SharedCredentialsProvider::new(Failing(|| {
                CredentialsError::provider_error("failed to load IMDS session token")
            })))
            .http_client(https_client())
            .build();
        let config = explaining_missing_credentials(bare);
        let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&config), "orders-table");
        let key = OperationKey::charge(charge_core::domain::OrderId::parse("ord-1").unwrap());
        let err = store.get(&key).await.unwrap_err();
        let text = crate::telemetry::ErrorChain(&err).to_string();
        assert!(text.contains("no AWS credentials found"), "{text}");
        assert!(text.contains("GetItem on table orders-table"), "{text}");
    }

    #[tokio::test]
    async fn the_loaded_config_carries_them() {
        let config = FUNCTION_TIMEOUTS
            .loader()
            .region(aws_config::Region::new("us-east-1"))
            .load()
            .await;
        let c = config.timeout_config().expect("timeouts set");
        assert_eq!(c.operation_timeout(), Some(Duration::from_secs(3)));
        assert_eq!(c.operation_attempt_timeout(), Some(Duration::from_secs(1)));
        assert_eq!(c.connect_timeout(), Some(Duration::from_secs(1)));
    }
}
