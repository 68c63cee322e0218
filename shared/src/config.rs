//! Configuration read once at init from the environment, into typed values. A missing or invalid
//! variable fails the init with its name; nothing is read again per request.
//!
//! Which variables a function reads is not a list typed by hand: [`vars_read`] runs the
//! function's own `from_env` on a [`RecordingEnv`] and collects the names it asks for, so
//! `tests/template.rs` holds the deployment template to what the code actually reads.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::time::Duration;

use charge_core::plan::Policy;
use charge_core::refund::watch::RefundWatch;

use charge_core::stripe_version::StripeVersion;

use crate::adapters::stripe::{check_api_base, SecretKey, StripeConfig, DEFAULT_API_BASE};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("environment variable {0} is not set")]
    Missing(&'static str),
    #[error("environment variable {name} is invalid: {reason}")]
    Invalid { name: &'static str, reason: String },
}

/// Where variables come from: the process environment in production, a map in tests.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl Env for std::collections::HashMap<&str, &str> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).map(|v| (*v).to_owned())
    }
}

pub fn required(env: &dyn Env, name: &'static str) -> Result<String, ConfigError> {
    env.var(name).ok_or(ConfigError::Missing(name))
}

fn number(env: &dyn Env, name: &'static str, default: u64) -> Result<u64, ConfigError> {
    match env.var(name) {
        None => Ok(default),
        Some(raw) => raw.trim().parse().map_err(|_| ConfigError::Invalid {
            name,
            reason: format!("{raw:?} is not a whole number"),
        }),
    }
}

pub const TABLE_NAME: &str = "TABLE_NAME";
pub const QUEUE_URL: &str = "QUEUE_URL";
pub const STRIPE_API_BASE: &str = "STRIPE_API_BASE";
pub const STRIPE_SECRET_ARN: &str = "STRIPE_SECRET_ARN";
pub const STRIPE_TIMEOUT_MS: &str = "STRIPE_TIMEOUT_MS";
pub const STRIPE_CONNECT_TIMEOUT_MS: &str = "STRIPE_CONNECT_TIMEOUT_MS";
pub const STRIPE_MAX_NETWORK_RETRIES: &str = "STRIPE_MAX_NETWORK_RETRIES";
/// The `Stripe-Version` every request carries: one of the versions this engine knows
/// ([`charge_core::stripe_version::KNOWN`]); the pin when unset.
pub const STRIPE_API_VERSION: &str = "STRIPE_API_VERSION";
pub const PENDING_GRACE_SECS: &str = "PENDING_GRACE_SECS";
/// How many charge attempts one order may make (the template's `MaxChargeAttempts`): 1 to 20,
/// 5 when unset.
pub const MAX_CHARGE_ATTEMPTS: &str = "MAX_CHARGE_ATTEMPTS";
pub const LEASE_TTL_SECS: &str = "LEASE_TTL_SECS";
pub const SEARCH_MIN_AGE_SECS: &str = "SEARCH_MIN_AGE_SECS";
pub const STUCK_INTENT_HOURS: &str = "STUCK_INTENT_HOURS";
/// How many hours before an authorization's deadline an uncaptured one pages.
pub const AUTHORIZATION_PAGE_LEAD_HOURS: &str = "AUTHORIZATION_PAGE_LEAD_HOURS";
/// How many hours before a dispute's evidence deadline one still needing a response pages (1 to
/// 336).
pub const DISPUTE_DEADLINE_PAGE_HOURS: &str = "DISPUTE_DEADLINE_PAGE_HOURS";
pub const DEAD_LETTER_QUEUE_URL: &str = "DEAD_LETTER_QUEUE_URL";
/// The account's Stripe budget (calls per second) every function's calls come out of.
pub const STRIPE_REQUESTS_PER_SECOND: &str = "STRIPE_REQUESTS_PER_SECOND";
/// The Stripe calls per second the stack may make to any one endpoint (see [`StripeBudget`]).
pub const STRIPE_ENDPOINT_REQUESTS_PER_SECOND: &str = "STRIPE_ENDPOINT_REQUESTS_PER_SECOND";
/// The charge event source's `MaximumConcurrency`: how many environments split the budget.
pub const CHARGE_MAX_CONCURRENCY: &str = "CHARGE_MAX_CONCURRENCY";
/// The events function: the Secrets Manager secret holding the endpoint's `whsec_…` secret.
pub const STRIPE_WEBHOOK_SECRET_ARN: &str = "STRIPE_WEBHOOK_SECRET_ARN";
/// The events function: an optional restricted key (`rk_…`, PaymentIntents read) for its
/// retrieves; without it the function uses the key in `STRIPE_SECRET_ARN`.
pub const STRIPE_EVENTS_KEY_SECRET_ARN: &str = "STRIPE_EVENTS_KEY_SECRET_ARN";
/// The events function: the Stripe partner event source (`aws.partner/stripe.com/…`) its
/// EventBridge events must come from, when Stripe delivers through EventBridge.
pub const STRIPE_EVENT_SOURCE_NAME: &str = "STRIPE_EVENT_SOURCE_NAME";
/// The events function: the inbox table of processed Stripe event ids.
pub const INBOX_TABLE_NAME: &str = "INBOX_TABLE_NAME";

/// The audit function: how many hours before its run one audit's window starts (its schedule's
/// period, so windows tile).
pub const AUDIT_WINDOW_HOURS: &str = "AUDIT_WINDOW_HOURS";
/// The reconciler: how many days after it settled a succeeded refund is read again at Stripe
/// (0: never), and how many hours apart ([`charge_core::refund::watch`]).
pub const REFUND_WATCH_DAYS: &str = "REFUND_WATCH_DAYS";
pub const REFUND_WATCH_EVERY_HOURS: &str = "REFUND_WATCH_EVERY_HOURS";
/// The audit function: the succeeded refunds that settled in its window this many days earlier
/// are read again at Stripe (0: none).
pub const AUDIT_REFUND_RECHECK_DAYS: &str = "AUDIT_REFUND_RECHECK_DAYS";

/// The notify function: the EventBridge bus outcome events go to.
pub const EVENT_BUS_NAME: &str = "EVENT_BUS_NAME";

/// Every variable a function may read, each with a value its reader accepts: what
/// [`RecordingEnv`] answers with. The one place that lists them all.
pub const EXAMPLE_ENV: &[(&str, &str)] = &[
    (TABLE_NAME, "charge-once-operations"),
    (
        QUEUE_URL,
        "https://sqs.us-east-1.amazonaws.com/123456789012/charges.fifo",
    ),
    (
        DEAD_LETTER_QUEUE_URL,
        "https://sqs.us-east-1.amazonaws.com/123456789012/charges-dlq.fifo",
    ),
    (INBOX_TABLE_NAME, "charge-once-webhook-inbox"),
    (STRIPE_REQUESTS_PER_SECOND, "24"),
    (STRIPE_ENDPOINT_REQUESTS_PER_SECOND, "24"),
    (CHARGE_MAX_CONCURRENCY, "2"),
    (EVENT_BUS_NAME, "charge-once-outcomes"),
    (STRIPE_API_BASE, DEFAULT_API_BASE),
    (
        STRIPE_SECRET_ARN,
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:stripe-AbCdEf",
    ),
    (
        STRIPE_WEBHOOK_SECRET_ARN,
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:whsec-AbCdEf",
    ),
    (
        STRIPE_EVENTS_KEY_SECRET_ARN,
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:stripe-events-AbCdEf",
    ),
    (
        STRIPE_EVENT_SOURCE_NAME,
        "aws.partner/stripe.com/ed_61SbnzCsTqRyYB0CT16S6RR8eIQp8vbLaK7AZp9Uy3vw",
    ),
    (STRIPE_TIMEOUT_MS, "10000"),
    (STRIPE_API_VERSION, charge_core::stripe_version::PINNED),
    (STRIPE_CONNECT_TIMEOUT_MS, "3000"),
    (STRIPE_MAX_NETWORK_RETRIES, "1"),
    (PENDING_GRACE_SECS, "300"),
    (LEASE_TTL_SECS, "60"),
    (SEARCH_MIN_AGE_SECS, "600"),
    (STUCK_INTENT_HOURS, "72"),
    (AUTHORIZATION_PAGE_LEAD_HOURS, "12"),
    (DISPUTE_DEADLINE_PAGE_HOURS, "72"),
    (AUDIT_WINDOW_HOURS, "24"),
    (REFUND_WATCH_DAYS, "30"),
    (REFUND_WATCH_EVERY_HOURS, "24"),
    (AUDIT_REFUND_RECHECK_DAYS, "30"),
];

/// A function's configuration, read once at init.
pub trait FromEnv: Sized {
    /// Reads and checks every variable; the first missing or invalid one fails with its name.
    fn from_env(env: &dyn Env) -> Result<Self, ConfigError>;

    /// Every variable this configuration reads: the names [`FromEnv::from_env`] asks for (see
    /// [`vars_read`]), so no list typed by hand can drift from the code.
    fn env_vars() -> Result<BTreeSet<String>, ConfigError> {
        vars_read(Self::from_env)
    }
}

/// An environment that answers from [`EXAMPLE_ENV`] and remembers every name it was asked for,
/// known or not.
#[derive(Debug, Default)]
pub struct RecordingEnv {
    asked: RefCell<BTreeSet<String>>,
}

impl Env for RecordingEnv {
    fn var(&self, name: &str) -> Option<String> {
        self.asked.borrow_mut().insert(name.to_owned());
        EXAMPLE_ENV
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, value)| (*value).to_owned())
    }
}

impl RecordingEnv {
    pub fn asked(&self) -> BTreeSet<String> {
        self.asked.borrow().clone()
    }
}

/// The variables a configuration reader reads: its names, as `from_env` asked for them on a
/// [`RecordingEnv`]. Fails if the reader refuses the example environment (a name missing from
/// [`EXAMPLE_ENV`], or an example it does not accept).
pub fn vars_read<T>(
    from_env: impl FnOnce(&dyn Env) -> Result<T, ConfigError>,
) -> Result<BTreeSet<String>, ConfigError> {
    let env = RecordingEnv::default();
    from_env(&env)?;
    Ok(env.asked())
}

/// How to reach Stripe, before the secret is fetched.
#[derive(Debug, Clone)]
pub struct StripeEnv {
    /// `STRIPE_SECRET_ARN`: the Secrets Manager secret holding the API key, read once at init.
    pub secret_arn: String,
    config: StripeConfig,
}

impl StripeEnv {
    /// The longest one gateway call can take ([`StripeConfig::worst_case_call`]).
    pub fn worst_case_call(&self) -> Duration {
        self.config.worst_case_call()
    }

    /// The client configuration, once the key is known.
    pub fn with_key(self, key: SecretKey) -> StripeConfig {
        StripeConfig {
            secret_key: key,
            ..self.config
        }
    }
}

/// `STRIPE_API_BASE` (default `https://api.stripe.com`), `STRIPE_SECRET_ARN` (required),
/// `STRIPE_TIMEOUT_MS` (10000), `STRIPE_CONNECT_TIMEOUT_MS` (3000), `STRIPE_MAX_NETWORK_RETRIES` (1),
/// `STRIPE_API_VERSION` (the pin, `2024-06-20`; else one of the versions this engine knows).
pub fn stripe_env(env: &dyn Env) -> Result<StripeEnv, ConfigError> {
    let base = env
        .var(STRIPE_API_BASE)
        .unwrap_or_else(|| DEFAULT_API_BASE.to_owned());
    check_api_base(base.trim_end_matches('/')).map_err(|reason| ConfigError::Invalid {
        name: STRIPE_API_BASE,
        reason,
    })?;
    let secret_arn = required(env, STRIPE_SECRET_ARN)?;
    if !secret_arn.starts_with("arn:") {
        return Err(ConfigError::Invalid {
            name: STRIPE_SECRET_ARN,
            reason: "must be the ARN of a Secrets Manager secret".into(),
        });
    }
    let mut config = StripeConfig::new(base, SecretKey::new(String::new()));
    config.timeout = Duration::from_millis(number(env, STRIPE_TIMEOUT_MS, 10_000)?);
    config.connect_timeout = Duration::from_millis(number(env, STRIPE_CONNECT_TIMEOUT_MS, 3_000)?);
    config.max_network_retries =
        u32::try_from(number(env, STRIPE_MAX_NETWORK_RETRIES, 1)?.min(5)).unwrap_or(1);
    if let Some(raw) = env.var(STRIPE_API_VERSION) {
        config.api_version =
            StripeVersion::parse(raw.trim()).map_err(|e| ConfigError::Invalid {
                name: STRIPE_API_VERSION,
                reason: e.to_string(),
            })?;
    }
    Ok(StripeEnv { secret_arn, config })
}

/// Checks that a value read from the secret looks like a Stripe secret or restricted key, without
/// ever echoing it.
pub fn parse_secret_key(raw: &str) -> Result<SecretKey, ConfigError> {
    let raw = raw.trim();
    // A secret may hold the bare key or JSON like {"api_key": "sk_..."}.
    let key = if raw.starts_with('{') {
        serde_json::from_str::<serde_json::Value>(raw)
            .ok()
            .and_then(|v| v.get("api_key").and_then(|k| k.as_str()).map(str::to_owned))
            .unwrap_or_default()
    } else {
        raw.to_owned()
    };
    if key.starts_with("sk_") || key.starts_with("rk_") {
        Ok(SecretKey::new(key))
    } else {
        Err(ConfigError::Invalid {
            name: STRIPE_SECRET_ARN,
            reason: "the secret must hold a Stripe secret (sk_…) or restricted (rk_…) key, \
                     bare or as {\"api_key\": …}"
                .into(),
        })
    }
}

/// Reads the endpoint's signing secrets from the value of the webhook secret, without ever
/// echoing it: one `whsec_…`, or two while Stripe rolls the secret (separated by a comma or
/// whitespace), bare or as JSON `{"webhook_secret": …, "previous_webhook_secret": …}`. Each must
/// have Stripe's form ([`crate::events::WebhookSecret::parse`]): a placeholder is refused here,
/// at init, naming the parameter, before it can authenticate a single request.
pub fn parse_webhook_secrets(raw: &str) -> Result<Vec<crate::events::WebhookSecret>, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        name: STRIPE_WEBHOOK_SECRET_ARN,
        reason: format!("the secret of the StripeWebhookSecretArn parameter {reason}"),
    };
    let raw = raw.trim();
    let values: Vec<String> = if raw.starts_with('{') {
        let json: serde_json::Value =
            serde_json::from_str(raw).map_err(|_| invalid("is not readable JSON".into()))?;
        ["webhook_secret", "previous_webhook_secret"]
            .iter()
            .filter_map(|k| json.get(k).and_then(|v| v.as_str()).map(str::to_owned))
            .collect()
    } else {
        raw.split(|c: char| c == ',' || c.is_whitespace())
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .collect()
    };
    if values.is_empty() || values.len() > 2 {
        return Err(invalid(format!(
            "must hold one Stripe webhook signing secret (whsec_…), or two during a rotation, \
             bare or as {{\"webhook_secret\": …, \"previous_webhook_secret\": …}}; it holds {}",
            values.len()
        )));
    }
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            crate::events::WebhookSecret::parse(v)
                .map_err(|e| invalid(format!("(value {} of {}): {e}", i + 1, values.len())))
        })
        .collect()
}

/// The timings of [`Policy`] that operators may tune. The 23 h key window is not one of
/// them: it is tied to Stripe's 24 h key lifetime, not to a deployment.
pub fn charge_policy(env: &dyn Env) -> Result<Policy, ConfigError> {
    let defaults = Policy::default();
    let policy = Policy {
        pending_grace: pending_grace(env)?,
        lease_ttl: lease_ttl(env)?,
        search_min_age: secs(env, SEARCH_MIN_AGE_SECS, defaults.search_min_age)?,
        stuck_after: Duration::from_secs(
            number(
                env,
                STUCK_INTENT_HOURS,
                defaults.stuck_after.as_secs() / 3600,
            )?
            .saturating_mul(3600),
        ),
        authorization_page_lead: Duration::from_secs(
            number(
                env,
                AUTHORIZATION_PAGE_LEAD_HOURS,
                defaults.authorization_page_lead.as_secs() / 3600,
            )?
            .saturating_mul(3600),
        ),
        dispute: charge_core::plan::DisputePolicy {
            page_window: dispute_page_window(env)?,
            ..defaults.dispute
        },
        ..defaults
    };
    if policy.authorization_page_lead.is_zero() {
        // A page at the deadline itself comes too late to capture anything.
        return Err(ConfigError::Invalid {
            name: AUTHORIZATION_PAGE_LEAD_HOURS,
            reason: "must be at least 1 (hours before an authorization's deadline)".into(),
        });
    }
    if policy.stuck_after <= policy.key_window {
        // Before the key window closes an unsettled intent is still being re-driven with its key;
        // a bound inside it would page for intents that are simply slow.
        return Err(ConfigError::Invalid {
            name: STUCK_INTENT_HOURS,
            reason: "must be more than 23 (the idempotency key window, in hours)".into(),
        });
    }
    Ok(policy)
}

/// The charge function's event source `BatchSize`: records per invocation (10, the FIFO
/// maximum); `tests/template.rs` holds the template to it.
pub const CHARGE_BATCH_SIZE: u64 = 10;

/// The Stripe budget every function's calls come out of (see [`crate::pacing`]): the account's
/// overall limit (`per_second`) and each endpoint's (`endpoint_per_second`), both less headroom.
/// A twelfth of the account's (at least 1/s) is kept for the work that can wait, a third each for
/// the reconciler, the events function and the audit; each of the `charge_concurrency` charge
/// environments, the work a customer waits for, gets an equal part of the rest, and an equal
/// part of each endpoint's limit for the call its message makes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StripeBudget {
    pub per_second: u64,
    pub endpoint_per_second: u64,
    pub charge_concurrency: u64,
}

impl StripeBudget {
    /// Stripe's overall limit in test mode is 25/s (100/s live); 24 keeps one call a second of
    /// headroom for the dashboard and other clients of the key.
    pub const DEFAULT_PER_SECOND: u64 = 24;
    /// Stripe's default limit per endpoint is 25/s; the same headroom.
    pub const DEFAULT_ENDPOINT_PER_SECOND: u64 = 24;
    /// The template's default `ChargeMaxConcurrency`: docs/deploy.md's sizing rule (0.4 × the
    /// create limit × Stripe's median create latency in seconds) at Stripe's defaults, 0.4 × 25 ×
    /// 0.3 s = 3, and one more: the fewer the environments, the larger each one's share and
    /// carry ([`Self::charge_carry`]), and in the load model's reference burst (20,000 orders at
    /// 200/s) 2 environments met 34 capacity 429s, 3 met 1, 4 none (each drained it within
    /// 1.139 × N/L).
    pub const DEFAULT_CONCURRENCY: u64 = 4;

    /// The account's budget `per_second`, endpoints at the default, over `charge_concurrency`
    /// environments.
    pub fn new(per_second: u64, charge_concurrency: u64) -> Self {
        Self {
            per_second,
            endpoint_per_second: Self::DEFAULT_ENDPOINT_PER_SECOND,
            charge_concurrency,
        }
    }

    /// What the charge environments leave: a twelfth of the budget, at least 1/s.
    fn kept_aside(&self) -> f64 {
        (self.per_second as f64 / 12.0).max(1.0)
    }

    /// The reconciler's share: a third of what is kept aside.
    pub fn reconciler_share(&self) -> f64 {
        self.kept_aside() / 3.0
    }

    /// The reconciler's search share: Stripe's search limit is 20/s.
    pub fn reconciler_search_share(&self) -> f64 {
        self.reconciler_share().min(20.0)
    }

    /// The events function's share (per environment): its retrieves, one per event for an
    /// unsettled operation (an event for a settled one calls nothing), are calls of the same
    /// account. A third of what is kept aside, not taken from the charges: a burst's creates
    /// still run at the budget.
    pub fn events_share(&self) -> f64 {
        self.kept_aside() / 3.0
    }

    /// The audit's share: its lists and retrieves are calls of the same account (a third of what
    /// is kept aside; `chargectl audit` paces to it too).
    pub fn audit_share(&self) -> f64 {
        self.kept_aside() / 3.0
    }

    /// One charge environment's share of the account's budget.
    pub fn charge_share(&self) -> f64 {
        (self.per_second as f64 - self.kept_aside()) / self.charge_concurrency as f64
    }

    /// One charge environment's share of each endpoint's limit (never more than its share of
    /// the account's).
    pub fn charge_endpoint_share(&self) -> f64 {
        (self.endpoint_per_second as f64 / self.charge_concurrency as f64).min(self.charge_share())
    }

    /// Calls one charge environment may bank and make back to back: one second of its share of
    /// an endpoint (at least one). Stripe keeps a one-second bucket per endpoint; the
    /// environments' banks together stay within it however many there are, so a burst after an
    /// idle spell, every environment spending its bank at once, is not refused. A larger bank
    /// lets a lone environment catch up after a slow batch, but with more environments their banks
    /// pass Stripe's bucket: measured by the load model (`simulate --arrival-rate`, 20,000 orders
    /// at 200/s, create limit 25/s), a bank of 20 per environment met 48 capacity 429s at 4
    /// environments and 364 at 20 (1.018 creates per charge); one second of the share, with the
    /// carry, met none and drained in 1.136 × N/L, the budget's floor.
    pub fn charge_burst(&self) -> u32 {
        (self.charge_endpoint_share().floor() as u32).max(1)
    }

    /// How long a charge environment's wait between slots may be made up: a batch holds its
    /// environment until its slowest call returns, about 2.7 × Stripe's median create latency in
    /// the load model, and slots not taken meanwhile would be lost to a one-second bank. Three
    /// seconds cover a median up to about 1.1 s.
    pub const CHARGE_CARRY: Duration = Duration::from_secs(3);

    /// What a charge environment paced to `per_second` banks beyond its burst while it keeps
    /// taking slots ([`crate::pacing::Budget::with_carry`]): [`Self::CHARGE_CARRY`] of it. Lost
    /// after an idle spell, so environments coming back together spend their bursts only, within
    /// Stripe's one-second bucket. Measured by the load model at an 800 ms median (25/s, 8
    /// environments): the drain took 1.345 × N/L without a carry, 1.158 with it, and no
    /// capacity 429 either way; the reference burst 1.149 and 1.136 (its floor). A wait shorter
    /// than the carry keeps it: environments held up together (a store or a Stripe that slows for
    /// every caller at once, which the load model's call-by-call latency does not draw) spend
    /// their carries together, past Stripe's bucket. Measured over the wire, where moto holds
    /// every environment up at once (2,000 orders, create 5/s, budget 5/s, 4 environments): 21
    /// and 25 capacity 429s with the carry, none without, at the same drain.
    pub fn charge_carry(per_second: f64) -> u32 {
        (per_second * Self::CHARGE_CARRY.as_secs_f64()).floor() as u32
    }

    /// [`Self::charge_throughput`] of the template's defaults.
    pub fn default_throughput() -> charge_core::reconcile_plan::ChargeThroughput {
        Self::new(Self::DEFAULT_PER_SECOND, Self::DEFAULT_CONCURRENCY).charge_throughput()
    }

    /// How fast the charge environments take messages off the queue when the budget is the
    /// bound, and how many they hold at once: what the reconciler weighs the queue's depth by.
    pub fn charge_throughput(&self) -> charge_core::reconcile_plan::ChargeThroughput {
        charge_core::reconcile_plan::ChargeThroughput {
            in_flight: self.charge_concurrency * CHARGE_BATCH_SIZE,
            // A burst is of charges: each environment at its create endpoint's share.
            per_second: self.charge_endpoint_share() * self.charge_concurrency as f64,
        }
    }
}

/// `STRIPE_REQUESTS_PER_SECOND`, `STRIPE_ENDPOINT_REQUESTS_PER_SECOND` and
/// `CHARGE_MAX_CONCURRENCY`.
pub fn stripe_budget(env: &dyn Env) -> Result<StripeBudget, ConfigError> {
    let budget = StripeBudget {
        per_second: number(
            env,
            STRIPE_REQUESTS_PER_SECOND,
            StripeBudget::DEFAULT_PER_SECOND,
        )?,
        endpoint_per_second: number(
            env,
            STRIPE_ENDPOINT_REQUESTS_PER_SECOND,
            StripeBudget::DEFAULT_ENDPOINT_PER_SECOND,
        )?,
        charge_concurrency: number(
            env,
            CHARGE_MAX_CONCURRENCY,
            StripeBudget::DEFAULT_CONCURRENCY,
        )?,
    };
    if !(2..=1000).contains(&budget.charge_concurrency) {
        return Err(ConfigError::Invalid {
            name: CHARGE_MAX_CONCURRENCY,
            reason: "must be 2 to 1000 (the event source's MaximumConcurrency)".into(),
        });
    }
    if budget.per_second < 2 || budget.charge_share() < 0.5 {
        return Err(ConfigError::Invalid {
            name: STRIPE_REQUESTS_PER_SECOND,
            reason: format!(
                "{} leaves each of the {} charge environments {:.2} calls/s; at least 0.5 is \
                 needed (raise it, or lower ChargeMaxConcurrency)",
                budget.per_second,
                budget.charge_concurrency,
                budget.charge_share()
            ),
        });
    }
    if budget.charge_endpoint_share() < 0.5 {
        return Err(ConfigError::Invalid {
            name: STRIPE_ENDPOINT_REQUESTS_PER_SECOND,
            reason: format!(
                "{} leaves each of the {} charge environments {:.2} calls/s at an endpoint; at \
                 least 0.5 is needed (raise it, or lower ChargeMaxConcurrency)",
                budget.endpoint_per_second,
                budget.charge_concurrency,
                budget.charge_endpoint_share()
            ),
        });
    }
    Ok(budget)
}

/// The audit's window (its Stripe pace is its share of the budget, [`StripeBudget::audit_share`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AuditSettings {
    pub window: Duration,
    /// `AUDIT_REFUND_RECHECK_DAYS`: the succeeded refunds settled this long before the window
    /// are read again at Stripe.
    pub refund_recheck: Duration,
}

/// `AUDIT_WINDOW_HOURS` (1 to 168) and `AUDIT_REFUND_RECHECK_DAYS`.
pub fn audit_settings(env: &dyn Env) -> Result<AuditSettings, ConfigError> {
    let hours = number(env, AUDIT_WINDOW_HOURS, 24)?;
    if !(1..=168).contains(&hours) {
        return Err(ConfigError::Invalid {
            name: AUDIT_WINDOW_HOURS,
            reason: format!("{hours} is not 1 to 168 hours"),
        });
    }
    Ok(AuditSettings {
        window: Duration::from_secs(hours * 3600),
        refund_recheck: audit_refund_recheck(env)?,
    })
}

/// `REFUND_WATCH_DAYS` (0 to 120) and `REFUND_WATCH_EVERY_HOURS` (1 to 168): the reconciler's
/// refund watch.
pub fn refund_watch(env: &dyn Env) -> Result<RefundWatch, ConfigError> {
    let defaults = RefundWatch::DEFAULT;
    let days = number(env, REFUND_WATCH_DAYS, defaults.window.as_secs() / 86_400)?;
    if days > 120 {
        return Err(ConfigError::Invalid {
            name: REFUND_WATCH_DAYS,
            reason: format!("{days} is not 0 to 120 days"),
        });
    }
    let hours = number(
        env,
        REFUND_WATCH_EVERY_HOURS,
        defaults.every.as_secs() / 3600,
    )?;
    if !(1..=168).contains(&hours) {
        return Err(ConfigError::Invalid {
            name: REFUND_WATCH_EVERY_HOURS,
            reason: format!("{hours} is not 1 to 168 hours"),
        });
    }
    Ok(RefundWatch {
        window: Duration::from_secs(days * 86_400),
        every: Duration::from_secs(hours * 3600),
    })
}

/// `AUDIT_REFUND_RECHECK_DAYS` (0 to 120): how far back before its window the audit reads the
/// succeeded refunds again.
pub fn audit_refund_recheck(env: &dyn Env) -> Result<Duration, ConfigError> {
    let days = number(env, AUDIT_REFUND_RECHECK_DAYS, 30)?;
    if days > 120 {
        return Err(ConfigError::Invalid {
            name: AUDIT_REFUND_RECHECK_DAYS,
            reason: format!("{days} is not 0 to 120 days"),
        });
    }
    Ok(Duration::from_secs(days * 86_400))
}

/// `DISPUTE_DEADLINE_PAGE_HOURS` (1 to 336): how long before a dispute's evidence deadline one
/// still needing a response pages. At the deadline itself a page comes too late to answer, and
/// Stripe's response windows are days to three weeks: two weeks is already the whole of most.
pub fn dispute_page_window(env: &dyn Env) -> Result<Duration, ConfigError> {
    let default = charge_core::dispute::deadline::DEFAULT_PAGE_WINDOW.as_secs() / 3600;
    let hours = number(env, DISPUTE_DEADLINE_PAGE_HOURS, default)?;
    if !(1..=336).contains(&hours) {
        return Err(ConfigError::Invalid {
            name: DISPUTE_DEADLINE_PAGE_HOURS,
            reason: format!("{hours} is not 1 to 336 hours"),
        });
    }
    Ok(Duration::from_secs(hours * 3600))
}

/// `PENDING_GRACE_SECS` alone (checkout needs nothing else of the policy).
pub fn pending_grace(env: &dyn Env) -> Result<Duration, ConfigError> {
    secs(env, PENDING_GRACE_SECS, Policy::default().pending_grace)
}

/// `MAX_CHARGE_ATTEMPTS`: how many charge attempts one order may make, 1 to 20 (5 unset).
pub fn max_charge_attempts(
    env: &dyn Env,
) -> Result<charge_core::attempt::AttemptLimit, ConfigError> {
    let default = charge_core::attempt::AttemptLimit::DEFAULT.get();
    let n = number(env, MAX_CHARGE_ATTEMPTS, u64::from(default))?;
    u32::try_from(n)
        .map_err(|_| format!("{n} is over 20"))
        .and_then(charge_core::attempt::AttemptLimit::new)
        .map_err(|reason| ConfigError::Invalid {
            name: MAX_CHARGE_ATTEMPTS,
            reason,
        })
}

/// `LEASE_TTL_SECS` alone (the events function's claims need nothing else of the policy): at least 15 s.
pub fn lease_ttl(env: &dyn Env) -> Result<Duration, ConfigError> {
    let ttl = secs(env, LEASE_TTL_SECS, Policy::default().lease_ttl)?;
    if ttl < Duration::from_secs(15) {
        return Err(ConfigError::Invalid {
            name: LEASE_TTL_SECS,
            reason: "must be at least 15 s, longer than a Stripe call".into(),
        });
    }
    Ok(ttl)
}

fn secs(env: &dyn Env, name: &'static str, default: Duration) -> Result<Duration, ConfigError> {
    number(env, name, default.as_secs()).map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    const ARN: &str = "arn:aws:secretsmanager:us-east-1:123456789012:secret:stripe-AbCdEf";

    /// The pin unless configured; a known version configured; an unknown one refuses the init,
    /// naming the variable and the versions it may be.
    #[test]
    fn the_stripe_version_is_the_pin_a_known_version_or_refused() {
        let pinned = stripe_env(&HashMap::from([(STRIPE_SECRET_ARN, ARN)])).unwrap();
        let pinned = pinned.with_key(SecretKey::new("sk_test_1")).api_version;
        assert_eq!(pinned, StripeVersion::PINNED);
        let current = HashMap::from([
            (STRIPE_SECRET_ARN, ARN),
            (STRIPE_API_VERSION, "2026-09-30.endive"),
        ]);
        let current = stripe_env(&current).unwrap();
        let current = current.with_key(SecretKey::new("sk_test_1")).api_version;
        assert_eq!(current, StripeVersion::CURRENT);
        for bad in ["2025-03-31.basil", "latest", ""] {
            let env = HashMap::from([(STRIPE_SECRET_ARN, ARN), (STRIPE_API_VERSION, bad)]);
            let err = stripe_env(&env).unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { name: STRIPE_API_VERSION, reason } if reason.contains("2024-06-20")),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn stripe_env_defaults_and_errors() {
        let env = HashMap::from([(STRIPE_SECRET_ARN, ARN)]);
        let cfg = stripe_env(&env).unwrap();
        assert_eq!(cfg.secret_arn, ARN);
        let cfg = cfg.with_key(SecretKey::new("sk_test_1"));
        assert_eq!(cfg.api_base, DEFAULT_API_BASE);
        assert_eq!(cfg.timeout, Duration::from_secs(10));
        assert_eq!(cfg.connect_timeout, Duration::from_secs(3));
        assert_eq!(
            stripe_env(&HashMap::new()).unwrap_err(),
            ConfigError::Missing(STRIPE_SECRET_ARN)
        );
        let bad = HashMap::from([(STRIPE_SECRET_ARN, "sk_live_oops")]);
        let err = stripe_env(&bad).unwrap_err().to_string();
        assert!(err.contains(STRIPE_SECRET_ARN) && !err.contains("sk_live_oops"));
        // The key travels in every request: clear text only to the simulator on loopback.
        let bad = HashMap::from([
            (STRIPE_SECRET_ARN, ARN),
            (STRIPE_API_BASE, "http://stripe.internal.example:12111"),
        ]);
        let err = stripe_env(&bad).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { name: STRIPE_API_BASE, reason } if reason.contains("loopback")),
            "{err}"
        );
        let local = HashMap::from([
            (STRIPE_SECRET_ARN, ARN),
            (STRIPE_API_BASE, "http://127.0.0.1:12111"),
        ]);
        assert_eq!(
            stripe_env(&local)
                .unwrap()
                .with_key(SecretKey::new("sk_test_1"))
                .api_base,
            "http://127.0.0.1:12111"
        );
        let bad = HashMap::from([(STRIPE_SECRET_ARN, ARN), (STRIPE_TIMEOUT_MS, "soon")]);
        assert!(matches!(
            stripe_env(&bad),
            Err(ConfigError::Invalid {
                name: STRIPE_TIMEOUT_MS,
                ..
            })
        ));
    }

    #[test]
    fn secret_values() {
        assert!(parse_secret_key("sk_test_abc\n").is_ok());
        assert!(parse_secret_key(r#"{"api_key":"rk_live_abc"}"#).is_ok());
        let err = parse_secret_key("pk_live_publishable")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("publishable"));
        assert!(parse_secret_key(r#"{"key":"sk_test_x"}"#).is_err());
        let err = parse_webhook_secrets("sk_live_notawebhooksecret")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("notawebhooksecret"));
    }

    const NEW: &str = "whsec_Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0fG";
    const OLD: &str = "whsec_Other7Key2Mq9Zr4Lp8Wx1Cv6Bn3Ty5Hs0";

    #[test]
    fn webhook_secrets_one_or_two_never_a_placeholder() {
        assert_eq!(parse_webhook_secrets(&format!("{NEW}\n")).unwrap().len(), 1);
        assert_eq!(
            parse_webhook_secrets(&format!("{NEW},{OLD}"))
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            parse_webhook_secrets(&format!("{NEW} {OLD}"))
                .unwrap()
                .len(),
            2
        );
        let json = format!(r#"{{"webhook_secret":"{NEW}","previous_webhook_secret":"{OLD}"}}"#);
        assert_eq!(parse_webhook_secrets(&json).unwrap().len(), 2);
        let json = format!(r#"{{"webhook_secret":"{NEW}"}}"#);
        assert_eq!(parse_webhook_secrets(&json).unwrap().len(), 1);
        for bad in [
            "whsec_placeholder".to_owned(),
            format!("{NEW},whsec_placeholder"),
            format!("{NEW},{OLD},{NEW}"),
            String::new(),
            r#"{"webhook_secret":"whsec_placeholder"}"#.to_owned(),
        ] {
            let err = parse_webhook_secrets(&bad).unwrap_err();
            let ConfigError::Invalid { name, reason } = &err else {
                panic!("{err:?}")
            };
            assert_eq!(*name, STRIPE_WEBHOOK_SECRET_ARN);
            assert!(reason.contains("StripeWebhookSecretArn"), "{reason}");
            // The refused value is never echoed.
            assert!(
                !reason.contains("placeholder,") && !reason.contains(&NEW[6..]),
                "{reason}"
            );
        }
    }

    #[test]
    fn policy_overrides() {
        let env = HashMap::from([(SEARCH_MIN_AGE_SECS, "120"), (PENDING_GRACE_SECS, "30")]);
        let p = charge_policy(&env).unwrap();
        assert_eq!(p.search_min_age, Duration::from_secs(120));
        assert_eq!(p.pending_grace, Duration::from_secs(30));
        assert_eq!(p.key_window, Duration::from_secs(23 * 3600));
        assert!(charge_policy(&HashMap::from([(LEASE_TTL_SECS, "1")])).is_err());
        assert_eq!(p.stuck_after, Duration::from_secs(72 * 3600), "default");
        let p = charge_policy(&HashMap::from([(STUCK_INTENT_HOURS, "48")])).unwrap();
        assert_eq!(p.stuck_after, Duration::from_secs(48 * 3600));
        assert!(matches!(
            charge_policy(&HashMap::from([(STUCK_INTENT_HOURS, "12")])),
            Err(ConfigError::Invalid {
                name: STUCK_INTENT_HOURS,
                ..
            })
        ));
    }

    #[test]
    fn the_recording_env_lists_what_a_reader_asks_for() {
        let read = vars_read(|env| {
            stripe_env(env)?;
            pending_grace(env)
        })
        .unwrap();
        let want: BTreeSet<String> = [
            STRIPE_API_BASE,
            STRIPE_SECRET_ARN,
            STRIPE_TIMEOUT_MS,
            STRIPE_CONNECT_TIMEOUT_MS,
            STRIPE_MAX_NETWORK_RETRIES,
            STRIPE_API_VERSION,
            PENDING_GRACE_SECS,
        ]
        .map(str::to_owned)
        .into();
        assert_eq!(read, want);
        // A name without an example is still recorded, and a required one fails the reader.
        let err = vars_read(|env| required(env, "NOT_A_KNOWN_VARIABLE")).unwrap_err();
        assert_eq!(err, ConfigError::Missing("NOT_A_KNOWN_VARIABLE"));
    }

    #[test]
    fn the_stripe_budget_is_split_and_refused_when_too_thin() {
        let env = |pairs: &[(&'static str, &'static str)]| {
            let map: std::collections::HashMap<&str, &str> = pairs.iter().copied().collect();
            stripe_budget(&MapEnv(map))
        };
        let b = env(&[]).unwrap();
        assert_eq!(
            (b.per_second, b.endpoint_per_second, b.charge_concurrency),
            (24, 24, 4)
        );
        // 2 of 24 kept for the work that can wait, a third each.
        let third = 2.0 / 3.0;
        assert_eq!(
            (b.reconciler_share(), b.events_share(), b.audit_share()),
            (third, third, third)
        );
        assert_eq!(b.charge_share(), 5.5);
        assert_eq!(b.charge_endpoint_share(), 5.5);
        // Each environment banks one second of its share, whole calls.
        assert_eq!(b.charge_burst(), 5);
        // A live account: 96 of its 100/s overall, 24 of each endpoint's 25/s, 4 environments.
        let b = env(&[
            (STRIPE_REQUESTS_PER_SECOND, "96"),
            (STRIPE_ENDPOINT_REQUESTS_PER_SECOND, "24"),
            (CHARGE_MAX_CONCURRENCY, "4"),
        ])
        .unwrap();
        assert_eq!(b.charge_share(), 22.0);
        assert_eq!(b.charge_endpoint_share(), 6.0);
        assert_eq!(b.audit_share(), 8.0 / 3.0);
        // The shares never add up to more than the account's budget (every caller counted), nor
        // the charge environments' to more than an endpoint's.
        for (per_second, endpoint, concurrency) in [
            (2, 2, 2),
            (24, 24, 2),
            (25, 25, 7),
            (96, 24, 4),
            (90, 40, 5),
            (1000, 300, 100),
        ] {
            let b = StripeBudget {
                per_second,
                endpoint_per_second: endpoint,
                charge_concurrency: concurrency,
            };
            let sum = b.reconciler_share()
                + b.events_share()
                + b.audit_share()
                + b.charge_share() * concurrency as f64;
            assert!(
                sum <= per_second as f64 + 1e-9,
                "{per_second}/{concurrency}"
            );
            assert!(b.charge_endpoint_share() * concurrency as f64 <= endpoint as f64 + 1e-9);
            // The environments' banks together never pass an endpoint's one-second bucket,
            // unless a single call each already does (a bank is at least one call).
            assert!(
                u64::from(b.charge_burst()) * concurrency <= endpoint.max(concurrency),
                "{per_second}/{endpoint}/{concurrency}"
            );
        }
        assert!(matches!(
            env(&[
                (STRIPE_REQUESTS_PER_SECOND, "6"),
                (CHARGE_MAX_CONCURRENCY, "20")
            ]),
            Err(ConfigError::Invalid {
                name: STRIPE_REQUESTS_PER_SECOND,
                ..
            })
        ));
        assert!(matches!(
            env(&[
                (STRIPE_REQUESTS_PER_SECOND, "96"),
                (STRIPE_ENDPOINT_REQUESTS_PER_SECOND, "5"),
                (CHARGE_MAX_CONCURRENCY, "20")
            ]),
            Err(ConfigError::Invalid {
                name: STRIPE_ENDPOINT_REQUESTS_PER_SECOND,
                ..
            })
        ));
        assert!(matches!(
            env(&[(CHARGE_MAX_CONCURRENCY, "1")]),
            Err(ConfigError::Invalid {
                name: CHARGE_MAX_CONCURRENCY,
                ..
            })
        ));
    }

    struct MapEnv(std::collections::HashMap<&'static str, &'static str>);

    impl Env for MapEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).map(|v| (*v).to_owned())
        }
    }

    #[test]
    fn the_refund_watch_and_the_audit_s_re_read_are_bounded_and_default_to_thirty_days() {
        let defaults = refund_watch(&MapEnv(std::collections::HashMap::new())).unwrap();
        assert_eq!(defaults, RefundWatch::DEFAULT);
        let days =
            |v: &'static str| MapEnv(std::collections::HashMap::from([(REFUND_WATCH_DAYS, v)]));
        assert_eq!(refund_watch(&days("0")).unwrap().window, Duration::ZERO);
        assert!(refund_watch(&days("121")).is_err(), "past 120 days");
        let every = |v: &'static str| {
            MapEnv(std::collections::HashMap::from([(
                REFUND_WATCH_EVERY_HOURS,
                v,
            )]))
        };
        assert!(refund_watch(&every("0")).is_err(), "never zero hours apart");
        assert_eq!(
            refund_watch(&every("48")).unwrap().every,
            Duration::from_secs(48 * 3600)
        );
        let recheck = |v: &'static str| {
            MapEnv(std::collections::HashMap::from([(
                AUDIT_REFUND_RECHECK_DAYS,
                v,
            )]))
        };
        assert_eq!(
            audit_refund_recheck(&recheck("7")).unwrap(),
            Duration::from_secs(7 * 86_400)
        );
        assert!(audit_refund_recheck(&recheck("121")).is_err());
    }

    #[test]
    fn the_dispute_page_window_defaults_to_72_hours_and_is_bounded() {
        let hours = |v: &'static str| {
            MapEnv(std::collections::HashMap::from([(
                DISPUTE_DEADLINE_PAGE_HOURS,
                v,
            )]))
        };
        let none = MapEnv(std::collections::HashMap::new());
        assert_eq!(
            dispute_page_window(&none).unwrap(),
            Duration::from_secs(72 * 3600)
        );
        assert_eq!(
            charge_policy(&hours("24")).unwrap().dispute.page_window,
            Duration::from_secs(24 * 3600),
            "read into the policy every function runs on"
        );
        assert!(
            dispute_page_window(&hours("0")).is_err(),
            "a page at due_by is too late"
        );
        assert!(
            dispute_page_window(&hours("337")).is_err(),
            "past two weeks"
        );
        assert!(charge_policy(&hours("0")).is_err());
    }

    #[test]
    fn every_example_is_accepted_by_its_reader() {
        let env = RecordingEnv::default();
        stripe_env(&env).unwrap();
        charge_policy(&env).unwrap();
        stripe_budget(&env).unwrap();
        audit_settings(&env).unwrap();
        refund_watch(&env).unwrap();
        for name in [
            TABLE_NAME,
            QUEUE_URL,
            DEAD_LETTER_QUEUE_URL,
            INBOX_TABLE_NAME,
            EVENT_BUS_NAME,
        ] {
            required(&env, name).unwrap();
        }
        required(&env, STRIPE_WEBHOOK_SECRET_ARN).unwrap();
        // The events function's optional variables (its reader, in functions/events, checks
        // these same examples in its own tests).
        assert!(required(&env, STRIPE_EVENTS_KEY_SECRET_ARN)
            .unwrap()
            .starts_with("arn:"));
        assert!(required(&env, STRIPE_EVENT_SOURCE_NAME)
            .unwrap()
            .starts_with(crate::events::STRIPE_PARTNER_SOURCE_PREFIX));
        let listed: BTreeSet<String> = EXAMPLE_ENV.iter().map(|(n, _)| (*n).to_owned()).collect();
        assert_eq!(
            env.asked(),
            listed,
            "every example is read by a reader above"
        );
    }
}
