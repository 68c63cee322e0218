//! The events function: Stripe's events about our PaymentIntents, delivered either by Amazon
//! EventBridge from the account's Stripe partner event source (AWS authenticates the delivery; no
//! public route) or, where a team chooses it, by the signed webhook route `POST /stripe/webhook`
//! (API Gateway HTTP API, payload v2), the one route without an IAM/JWT authorizer, present only
//! when its secret is configured. Either way an event is a hint and Stripe is the proof
//! ([`charge_once::events`]).
//!
//! - [`handler`]: an invocation (an HTTP request or an EventBridge event) →
//!   [`charge_once::events`] → an HTTP answer, or an invocation result that EventBridge and
//!   Lambda retry, and its metrics; never a panic, never internals.
//! - [`EventsConfig`]: what it reads from the environment, once, at init.
//! - [`paced`]: its Stripe client paced to its share of the account's budget.

pub mod handler;

use std::sync::Arc;
use std::time::Duration;

use charge_core::plan::Policy;
use charge_core::time::Clock;
use charge_once::config::{self, ConfigError, Env, FromEnv, StripeBudget};
use charge_once::events::STRIPE_PARTNER_SOURCE_PREFIX;
use charge_once::pacing::{Budget, PacedGateway};
use charge_once::ports::{PaymentGateway, Sleeper};

/// Configuration of the events function.
#[derive(Debug, Clone)]
pub struct EventsConfig {
    pub table_name: String,
    pub inbox_table_name: String,
    /// `STRIPE_WEBHOOK_SECRET_ARN`: the endpoint's signing secret(s), read once at init. `None`:
    /// the stack has no webhook route and the function refuses HTTP deliveries.
    pub webhook_secret_arn: Option<String>,
    /// `STRIPE_EVENTS_KEY_SECRET_ARN`: a restricted key (PaymentIntents read) for the retrieves;
    /// `None`: the key in `STRIPE_SECRET_ARN`.
    pub events_key_secret_arn: Option<String>,
    /// `STRIPE_EVENT_SOURCE_NAME`: the partner event source EventBridge events must come from.
    pub event_source: Option<String>,
    /// The Stripe API (retrieve only) and its key's secret.
    pub stripe: config::StripeEnv,
    /// The executor's policy: events are decided by the executor's own plan.
    pub policy: Policy,
    /// Its retrieves are paced to `budget.events_share()` per second, beside the charge
    /// environments' and the reconciler's shares.
    pub budget: StripeBudget,
}

/// The longest a retrieve waits for its slot. Past it the call is not made: the event is not
/// acted on and its entry forgotten, so Stripe's (or Lambda's) retry brings it back; well inside
/// the 27 s an HTTP delivery may take.
pub const PACING_MAX_WAIT: Duration = Duration::from_secs(5);

/// The events function's Stripe client as `main` wires it: every call first takes a slot of this
/// environment's share of the account's Stripe budget ([`StripeBudget::events_share`]), one at a
/// time, so a flood of events for unsettled operations cannot spend the charges' budget.
pub fn paced(
    gateway: Arc<dyn PaymentGateway>,
    budget: &StripeBudget,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
) -> PacedGateway {
    let calls = Arc::new(Budget::new(budget.events_share(), 1, clock, sleeper));
    PacedGateway::new(gateway, calls, None, PACING_MAX_WAIT)
}

impl EventsConfig {
    /// The secret holding the key the retrieves use.
    pub fn stripe_key_arn(&self) -> &str {
        self.events_key_secret_arn
            .as_deref()
            .unwrap_or(&self.stripe.secret_arn)
    }
}

fn optional_arn(env: &dyn Env, name: &'static str) -> Result<Option<String>, ConfigError> {
    match env.var(name) {
        None => Ok(None),
        Some(arn) if arn.starts_with("arn:") => Ok(Some(arn)),
        Some(_) => Err(ConfigError::Invalid {
            name,
            reason: "must be empty or the ARN of a Secrets Manager secret".into(),
        }),
    }
}

impl FromEnv for EventsConfig {
    fn from_env(env: &dyn Env) -> Result<Self, ConfigError> {
        let webhook_secret_arn = optional_arn(env, config::STRIPE_WEBHOOK_SECRET_ARN)?;
        let events_key_secret_arn = optional_arn(env, config::STRIPE_EVENTS_KEY_SECRET_ARN)?;
        let event_source = env.var(config::STRIPE_EVENT_SOURCE_NAME);
        if let Some(source) = &event_source {
            if !source.starts_with(STRIPE_PARTNER_SOURCE_PREFIX) {
                return Err(ConfigError::Invalid {
                    name: config::STRIPE_EVENT_SOURCE_NAME,
                    reason: format!("must be empty or a Stripe partner event source ({STRIPE_PARTNER_SOURCE_PREFIX}…)"),
                });
            }
        }
        Ok(Self {
            table_name: config::required(env, config::TABLE_NAME)?,
            inbox_table_name: config::required(env, config::INBOX_TABLE_NAME)?,
            webhook_secret_arn,
            events_key_secret_arn,
            event_source,
            stripe: config::stripe_env(env)?,
            policy: config::charge_policy(env)?,
            budget: config::stripe_budget(env)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;

    #[test]
    fn config_names_what_is_wrong() {
        let mut env = HashMap::from([
            (config::TABLE_NAME, "ops"),
            (config::INBOX_TABLE_NAME, "inbox"),
            (config::STRIPE_SECRET_ARN, "arn:aws:secretsmanager:x"),
        ]);
        // Neither a webhook secret nor a restricted key: EventBridge only, the main key.
        let c = EventsConfig::from_env(&env).unwrap();
        assert_eq!(c.webhook_secret_arn, None);
        assert_eq!(c.stripe_key_arn(), "arn:aws:secretsmanager:x");
        assert_eq!(c.policy.lease_ttl, Duration::from_secs(60));
        for (name, bad) in [
            (config::STRIPE_WEBHOOK_SECRET_ARN, "whsec_not_an_arn"),
            (config::STRIPE_EVENTS_KEY_SECRET_ARN, "rk_live_not_an_arn"),
            (
                config::STRIPE_EVENT_SOURCE_NAME,
                "aws.partner/example.com/x",
            ),
        ] {
            let mut env = env.clone();
            env.insert(name, bad);
            let err = EventsConfig::from_env(&env).unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { name: n, reason } if *n == name && !reason.contains(bad)),
                "{name}: {err:?}"
            );
        }
        env.insert(
            config::STRIPE_WEBHOOK_SECRET_ARN,
            "arn:aws:secretsmanager:y",
        );
        env.insert(
            config::STRIPE_EVENTS_KEY_SECRET_ARN,
            "arn:aws:secretsmanager:z",
        );
        let c = EventsConfig::from_env(&env).unwrap();
        assert_eq!(
            c.webhook_secret_arn.as_deref(),
            Some("arn:aws:secretsmanager:y")
        );
        assert_eq!(c.stripe_key_arn(), "arn:aws:secretsmanager:z");
        assert_eq!(c.inbox_table_name, "inbox");
        assert_eq!(c.budget.events_share(), 2.0 / 3.0);
    }

    /// The waits a caller was asked for; each moves the clock when `moves` (one caller at a
    /// time), or leaves it standing (callers at once).
    #[derive(Clone)]
    struct Waits {
        clock: charge_core::time::ManualClock,
        moves: bool,
        asked: Arc<std::sync::Mutex<Vec<Duration>>>,
    }

    impl Sleeper for Waits {
        fn sleep(
            &self,
            d: Duration,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
            self.asked.lock().unwrap().push(d);
            if self.moves {
                self.clock.advance(d);
            }
            Box::pin(async {})
        }
    }

    /// The gateway as main.rs wires it: at the default budget (24/s) the events function's
    /// retrieves go out at 1/s; a burst of them waits for its slots, and one that would wait
    /// past [`PACING_MAX_WAIT`] is not made (retry later, as a 429 would say, without spending a
    /// call).
    #[tokio::test]
    async fn the_events_functions_retrieves_are_paced_to_its_share() {
        use charge_core::outcome::{GatewayError, PaymentIntentStatus, RetryCause};
        use charge_once::memory::FakeGateway;
        let waits = |moves| Waits {
            clock: charge_core::time::ManualClock::new(charge_core::time::Timestamp::from_millis(
                1_800_000_000_000,
            )),
            moves,
            asked: Default::default(),
        };
        let stripe = Arc::new(FakeGateway::new());
        let op = charge_core::testing::order("ord-paced").build();
        let pi = stripe.insert_charge(&op, PaymentIntentStatus::Succeeded);
        let budget = StripeBudget::new(
            StripeBudget::DEFAULT_PER_SECOND,
            StripeBudget::DEFAULT_CONCURRENCY,
        );
        let wired = |w: &Waits| {
            paced(
                stripe.clone(),
                &budget,
                Arc::new(w.clock.clone()),
                Arc::new(w.clone()),
            )
        };
        let one_at_a_time = waits(true);
        let gateway = wired(&one_at_a_time);
        for _ in 0..4 {
            gateway.retrieve(&pi).await.unwrap();
        }
        // Its share of the default budget: a third of the 2/s kept aside, one call every 1.5 s.
        assert_eq!(
            *one_at_a_time.asked.lock().unwrap(),
            [Duration::from_millis(1500); 3],
            "the first at once, then one every 1.5 s"
        );
        let calls = || {
            stripe
                .calls
                .retrieve
                .load(std::sync::atomic::Ordering::SeqCst)
        };
        assert_eq!(calls(), 4);
        // Callers at once (the clock stands still while they wait): each takes the next slot,
        // 1.5 s further (0, 1.5, 3 and 4.5 s); the one whose slot is more than 5 s away is refused
        // without a call.
        let at_once = waits(false);
        let gateway = wired(&at_once);
        for _ in 0..4 {
            gateway.retrieve(&pi).await.unwrap();
        }
        assert_eq!(
            at_once.asked.lock().unwrap().last(),
            Some(&Duration::from_millis(4500))
        );
        let refused = gateway.retrieve(&pi).await.unwrap_err();
        assert!(
            matches!(
                refused,
                GatewayError::RetryLater {
                    cause: RetryCause::RateLimited,
                    ..
                }
            ),
            "{refused:?}"
        );
        assert_eq!(calls(), 4 + 4, "the refused call never reached Stripe");
    }
}
