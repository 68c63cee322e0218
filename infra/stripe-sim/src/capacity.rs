//! Stripe's capacity: token buckets per endpoint and for the account overall, and a seeded
//! latency model for creates.
//!
//! # Rate limits
//! Stripe counts each named operation as its own endpoint (`POST /v1/payment_intents`,
//! `GET /v1/payment_intents/{id}`, `GET /v1/payment_intents/search` and
//! `POST /v1/payment_intents/{id}/cancel` and `POST /v1/payment_intents/{id}/capture` are five; refunds are two more: create (with cancel) and
//! reads (retrieve with list)), each with its own limit, and every request also counts against the account's overall limit. Stripe's
//! documented defaults (<https://docs.stripe.com/rate-limits>): 25 requests/s per endpoint, 20/s
//! for search, 100 operations/s per live-mode account (25/s in test mode/sandboxes).
//!
//! Each limit is a token bucket holding one second's worth (burst = rate), full at the start,
//! refilled continuously at the rate. A request takes one token from its endpoint's bucket **and**
//! one from the account's; if either is empty it takes none and is refused with Stripe's
//! `429 rate_limit` error, before the idempotency layer (nothing is saved under its key) and
//! before any random fault is decided. Such refusals are counted in [`Capacity429s`], apart from
//! the random `rate_limit` fault (counted in [`crate::StripeSim::injected`]).
//!
//! The arithmetic is exact: levels are kept in thousandths of a token and time in whole
//! milliseconds, so a bucket of `r`/s regains one token every `1000 / r` ms (25/s: one per 40 ms).
//!
//! # Create latency
//! [`CreateLatency`] is a lognormal distribution given by its median (`p50`) and the standard
//! deviation `sigma` of its logarithm. Draws come from their own generator seeded from the
//! simulator's seed, so the same seed and the same sequence of requests give the same latencies
//! (and turning latency on changes no fault decision or id).

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Which time the buckets refill on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacityClock {
    /// The simulator's clock (manual, or the external time source): virtual time, moved by
    /// [`crate::StripeSim::advance`] or by the time source. The default.
    #[default]
    Simulated,
    /// Real elapsed time (a monotonic clock), whatever the simulated clock says. What the
    /// `stripe-sim` binary uses: its simulated clock moves only when advanced.
    Real,
}

impl CapacityClock {
    /// The wire name: `simulated` or `real`.
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityClock::Simulated => "simulated",
            CapacityClock::Real => "real",
        }
    }
}

impl std::str::FromStr for CapacityClock {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "simulated" => Ok(CapacityClock::Simulated),
            "real" => Ok(CapacityClock::Real),
            _ => Err(format!("unknown capacity clock {s:?} (simulated or real)")),
        }
    }
}

/// A lognormal latency: the median is `p50`, the logarithm's standard deviation `sigma`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CreateLatency {
    /// The median (default 300 ms).
    pub p50: Duration,
    /// Standard deviation of `ln(latency)` (default 0.6: p90 ≈ 2.2 × p50, p99 ≈ 4 × p50).
    /// 0 makes every draw exactly `p50`.
    pub sigma: f64,
}

impl CreateLatency {
    /// The default median: 300 ms.
    pub const DEFAULT_P50: Duration = Duration::from_millis(300);
    /// The default spread: 0.6.
    pub const DEFAULT_SIGMA: f64 = 0.6;

    /// Median `p50`, default spread.
    pub fn with_p50(p50: Duration) -> Self {
        CreateLatency {
            p50,
            ..CreateLatency::default()
        }
    }

    /// The latency at standard-normal deviate `z`: `p50 · e^(sigma·z)`.
    pub fn at_z(&self, z: f64) -> Duration {
        let sigma = if self.sigma.is_finite() && self.sigma > 0.0 {
            self.sigma
        } else {
            0.0
        };
        let secs = self.p50.as_secs_f64() * (sigma * z).exp();
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    }

    /// One draw (Box–Muller from two uniforms of `rng`).
    pub fn sample(&self, rng: &mut impl Rng) -> Duration {
        let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]
        let u2: f64 = rng.random();
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        self.at_z(z)
    }

    /// Checks `sigma` is finite and not negative.
    pub fn validate(&self) -> Result<(), String> {
        if !self.sigma.is_finite() || self.sigma < 0.0 {
            return Err(format!(
                "create latency sigma must be a finite number >= 0, got {}",
                self.sigma
            ));
        }
        Ok(())
    }
}

impl Default for CreateLatency {
    fn default() -> Self {
        CreateLatency {
            p50: CreateLatency::DEFAULT_P50,
            sigma: CreateLatency::DEFAULT_SIGMA,
        }
    }
}

/// Stripe's capacity as the simulator models it: requests per second per endpoint and for the
/// account (`None` = unlimited; `Some(0)` refuses every request), the clock the buckets refill on,
/// and the latency of creates.
///
/// [`crate::SimConfig::default`] uses [`Capacity::unlimited`] (no limits, no latency), so nothing
/// changes until a caller opts in; the `stripe-sim` binary uses [`Capacity::stripe_defaults`] on
/// the real clock, without latency unless `--create-latency-p50-ms` is given.
#[derive(Clone, Debug, PartialEq)]
pub struct Capacity {
    /// `POST /v1/payment_intents`, requests/s.
    pub create_per_sec: Option<u32>,
    /// `GET /v1/payment_intents/{id}`, requests/s.
    pub retrieve_per_sec: Option<u32>,
    /// `GET /v1/payment_intents/search`, requests/s.
    pub search_per_sec: Option<u32>,
    /// `POST /v1/payment_intents/{id}/cancel`, requests/s.
    pub cancel_per_sec: Option<u32>,
    /// `POST /v1/payment_intents/{id}/capture`, requests/s.
    pub capture_per_sec: Option<u32>,
    /// `POST /v1/refunds` (and `POST /v1/refunds/{id}/cancel`), requests/s.
    pub refund_per_sec: Option<u32>,
    /// `GET /v1/refunds/{id}` and `GET /v1/refunds` together, requests/s.
    pub refund_read_per_sec: Option<u32>,
    /// The account overall (all endpoints together), requests/s.
    pub account_per_sec: Option<u32>,
    /// What time refills the buckets.
    pub clock: CapacityClock,
    /// How long a create that executes takes (`None`: no time at all). When set, the HTTP
    /// server really sleeps it with the key in flight, and in process
    /// [`crate::StripeSim::create_in_process`] hands every executing create back as a
    /// [`crate::SlowCreate`] whose [`crate::SlowCreate::latency`] includes it.
    pub create_latency: Option<CreateLatency>,
}

impl Capacity {
    /// Stripe's default limit of one endpoint: 25 requests/s.
    pub const STRIPE_ENDPOINT_PER_SEC: u32 = 25;
    /// Stripe's Search API limit: 20 requests/s.
    pub const STRIPE_SEARCH_PER_SEC: u32 = 20;
    /// Stripe's overall limit of a live-mode account: 100 operations/s.
    pub const STRIPE_ACCOUNT_PER_SEC: u32 = 100;
    /// Stripe's overall limit in test mode (sandboxes): 25 operations/s.
    pub const STRIPE_TEST_MODE_ACCOUNT_PER_SEC: u32 = 25;

    /// Stripe's documented limits (live mode): create 25/s, retrieve 25/s, search 20/s, cancel
    /// 25/s, capture 25/s, account 100/s, on the simulated clock, no create latency (add it with
    /// [`Capacity::with_create_latency`]).
    pub fn stripe_defaults() -> Self {
        Capacity {
            create_per_sec: Some(Self::STRIPE_ENDPOINT_PER_SEC),
            retrieve_per_sec: Some(Self::STRIPE_ENDPOINT_PER_SEC),
            search_per_sec: Some(Self::STRIPE_SEARCH_PER_SEC),
            cancel_per_sec: Some(Self::STRIPE_ENDPOINT_PER_SEC),
            capture_per_sec: Some(Self::STRIPE_ENDPOINT_PER_SEC),
            refund_per_sec: Some(Self::STRIPE_ENDPOINT_PER_SEC),
            refund_read_per_sec: Some(Self::STRIPE_ENDPOINT_PER_SEC),
            account_per_sec: Some(Self::STRIPE_ACCOUNT_PER_SEC),
            clock: CapacityClock::Simulated,
            create_latency: None,
        }
    }

    /// As [`Capacity::stripe_defaults`] with test mode's account limit (25/s).
    pub fn stripe_test_mode() -> Self {
        Capacity {
            account_per_sec: Some(Self::STRIPE_TEST_MODE_ACCOUNT_PER_SEC),
            ..Self::stripe_defaults()
        }
    }

    /// No limits, no latency: [`crate::SimConfig::default`]'s.
    pub fn unlimited() -> Self {
        Capacity {
            create_per_sec: None,
            retrieve_per_sec: None,
            search_per_sec: None,
            cancel_per_sec: None,
            capture_per_sec: None,
            refund_per_sec: None,
            refund_read_per_sec: None,
            account_per_sec: None,
            clock: CapacityClock::Simulated,
            create_latency: None,
        }
    }

    /// Sets the create latency.
    pub fn with_create_latency(mut self, latency: CreateLatency) -> Self {
        self.create_latency = Some(latency);
        self
    }

    /// Sets the clock the buckets refill on.
    pub fn with_clock(mut self, clock: CapacityClock) -> Self {
        self.clock = clock;
        self
    }

    /// Checks the latency model.
    pub fn validate(&self) -> Result<(), String> {
        self.create_latency
            .as_ref()
            .map_or(Ok(()), |l| l.validate())
    }
}

impl Default for Capacity {
    /// [`Capacity::unlimited`].
    fn default() -> Self {
        Capacity::unlimited()
    }
}

/// Requests refused for capacity (`429 rate_limit`), by endpoint. Not the random `rate_limit`
/// fault: that one is counted in [`crate::StripeSim::injected`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Capacity429s {
    /// `POST /v1/payment_intents` refused.
    pub create: u64,
    /// `GET /v1/payment_intents/{id}` refused.
    pub retrieve: u64,
    /// `GET /v1/payment_intents/search` refused.
    pub search: u64,
    /// `POST /v1/payment_intents/{id}/cancel` refused.
    pub cancel: u64,
    /// `POST /v1/payment_intents/{id}/capture` refused.
    pub capture: u64,
    /// `POST /v1/refunds` and `POST /v1/refunds/{id}/cancel` refused.
    pub refund: u64,
    /// `GET /v1/refunds/{id}` and `GET /v1/refunds` refused.
    pub refund_read: u64,
    /// Of the above (any endpoint), how many the account bucket refused while the endpoint's own
    /// bucket had a token.
    pub account: u64,
}

impl Capacity429s {
    /// All capacity 429s.
    pub fn total(&self) -> u64 {
        self.create
            + self.retrieve
            + self.search
            + self.cancel
            + self.capture
            + self.refund
            + self.refund_read
    }
}

/// A rate-limited endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    Create,
    Retrieve,
    Search,
    Cancel,
    Capture,
    /// Refund create and cancel.
    Refund,
    /// Refund retrieve and list.
    RefundRead,
}

/// Which bucket refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Limiter {
    Endpoint,
    Account,
}

impl Limiter {
    /// The `Stripe-Rate-Limited-Reason` value Stripe sends for it.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Limiter::Endpoint => "endpoint-rate",
            Limiter::Account => "global-rate",
        }
    }
}

/// Thousandths of a token.
const MILLI: i64 = 1000;

/// One token bucket; `rate: None` never refuses.
#[derive(Clone, Debug)]
struct Bucket {
    rate: Option<u32>,
    /// Level in thousandths of a token.
    level: i64,
    /// Time of the last refill; `None` until first used (then it is full).
    last_ms: Option<i64>,
}

impl Bucket {
    fn new(rate: Option<u32>) -> Self {
        Bucket {
            rate,
            level: Self::cap(rate),
            last_ms: None,
        }
    }

    fn cap(rate: Option<u32>) -> i64 {
        i64::from(rate.unwrap_or(0)) * MILLI
    }

    /// The level as of `now_ms`, without changing anything.
    fn level_at(&self, now_ms: i64) -> i64 {
        let Some(rate) = self.rate else { return 0 };
        let cap = Self::cap(Some(rate));
        match self.last_ms {
            None => cap,
            Some(last) if now_ms <= last => self.level,
            Some(last) => {
                let gained = (now_ms - last).saturating_mul(i64::from(rate));
                self.level.saturating_add(gained).min(cap)
            }
        }
    }

    fn refill(&mut self, now_ms: i64) {
        if self.rate.is_some() {
            self.level = self.level_at(now_ms);
            // A clock set backwards rebases the bucket instead of freezing it.
            self.last_ms = Some(now_ms);
        }
    }

    fn has_token(&self) -> bool {
        self.rate.is_none() || self.level >= MILLI
    }

    fn take(&mut self) {
        if self.rate.is_some() {
            self.level -= MILLI;
        }
    }

    /// Whole tokens as of `now_ms` (`None`: unlimited).
    fn tokens_at(&self, now_ms: i64) -> Option<f64> {
        self.rate
            .map(|_| self.level_at(now_ms) as f64 / MILLI as f64)
    }
}

/// Tokens left in each bucket (`None`: unlimited).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CapacityTokens {
    pub create: Option<f64>,
    pub retrieve: Option<f64>,
    pub search: Option<f64>,
    pub cancel: Option<f64>,
    pub capture: Option<f64>,
    pub refund: Option<f64>,
    pub refund_read: Option<f64>,
    pub account: Option<f64>,
}

/// Mutable capacity state, under the engine's mutex.
pub(crate) struct CapacityState {
    config: Capacity,
    create: Bucket,
    retrieve: Bucket,
    search: Bucket,
    cancel: Bucket,
    capture: Bucket,
    refund: Bucket,
    refund_read: Bucket,
    account: Bucket,
    pub(crate) refused: Capacity429s,
    latency_rng: SmallRng,
}

/// Mixed into the seed of the latency generator (apart from the fault and id generators).
const LATENCY_SEED: u64 = 0x1A7E_0C7E_5EED_0001;

impl CapacityState {
    pub(crate) fn new(seed: u64, config: Capacity) -> Self {
        let mut s = CapacityState {
            config: Capacity::unlimited(),
            create: Bucket::new(None),
            retrieve: Bucket::new(None),
            search: Bucket::new(None),
            cancel: Bucket::new(None),
            capture: Bucket::new(None),
            refund: Bucket::new(None),
            refund_read: Bucket::new(None),
            account: Bucket::new(None),
            refused: Capacity429s::default(),
            latency_rng: SmallRng::seed_from_u64(seed ^ LATENCY_SEED),
        };
        s.apply(config);
        s
    }

    pub(crate) fn config(&self) -> &Capacity {
        &self.config
    }

    /// Replaces the configuration; every bucket starts full again.
    pub(crate) fn apply(&mut self, config: Capacity) {
        self.create = Bucket::new(config.create_per_sec);
        self.retrieve = Bucket::new(config.retrieve_per_sec);
        self.search = Bucket::new(config.search_per_sec);
        self.cancel = Bucket::new(config.cancel_per_sec);
        self.capture = Bucket::new(config.capture_per_sec);
        self.refund = Bucket::new(config.refund_per_sec);
        self.refund_read = Bucket::new(config.refund_read_per_sec);
        self.account = Bucket::new(config.account_per_sec);
        self.config = config;
    }

    /// Takes a token from `api`'s bucket and the account's, or neither (counting the refusal).
    pub(crate) fn admit(&mut self, api: Api, now_ms: i64) -> Result<(), Limiter> {
        let endpoint = match api {
            Api::Create => &mut self.create,
            Api::Retrieve => &mut self.retrieve,
            Api::Search => &mut self.search,
            Api::Cancel => &mut self.cancel,
            Api::Capture => &mut self.capture,
            Api::Refund => &mut self.refund,
            Api::RefundRead => &mut self.refund_read,
        };
        endpoint.refill(now_ms);
        self.account.refill(now_ms);
        let refused = if !endpoint.has_token() {
            Some(Limiter::Endpoint)
        } else if !self.account.has_token() {
            Some(Limiter::Account)
        } else {
            None
        };
        match refused {
            None => {
                endpoint.take();
                self.account.take();
                Ok(())
            }
            Some(limiter) => {
                let r = &mut self.refused;
                match api {
                    Api::Create => r.create += 1,
                    Api::Retrieve => r.retrieve += 1,
                    Api::Search => r.search += 1,
                    Api::Cancel => r.cancel += 1,
                    Api::Capture => r.capture += 1,
                    Api::Refund => r.refund += 1,
                    Api::RefundRead => r.refund_read += 1,
                }
                if limiter == Limiter::Account {
                    r.account += 1;
                }
                Err(limiter)
            }
        }
    }

    /// Tokens left as of `now_ms`.
    pub(crate) fn tokens(&self, now_ms: i64) -> CapacityTokens {
        CapacityTokens {
            create: self.create.tokens_at(now_ms),
            retrieve: self.retrieve.tokens_at(now_ms),
            search: self.search.tokens_at(now_ms),
            cancel: self.cancel.tokens_at(now_ms),
            capture: self.capture.tokens_at(now_ms),
            refund: self.refund.tokens_at(now_ms),
            refund_read: self.refund_read.tokens_at(now_ms),
            account: self.account.tokens_at(now_ms),
        }
    }

    /// The next create latency, when the model is on.
    pub(crate) fn draw_create_latency(&mut self) -> Option<Duration> {
        let model = self.config.create_latency?;
        Some(model.sample(&mut self.latency_rng))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limited(create: u32, account: Option<u32>) -> CapacityState {
        CapacityState::new(
            0,
            Capacity {
                create_per_sec: Some(create),
                account_per_sec: account,
                ..Capacity::stripe_defaults()
            },
        )
    }

    #[test]
    fn bucket_holds_one_second_and_refills_exactly() {
        let mut c = limited(25, None);
        let t0 = 1_000_000;
        for i in 0..25 {
            assert_eq!(c.admit(Api::Create, t0), Ok(()), "create {i}");
        }
        assert_eq!(c.admit(Api::Create, t0), Err(Limiter::Endpoint));
        assert_eq!(c.admit(Api::Create, t0 + 39), Err(Limiter::Endpoint));
        assert_eq!(c.admit(Api::Create, t0 + 40), Ok(()));
        assert_eq!(c.admit(Api::Create, t0 + 40), Err(Limiter::Endpoint));
        // A long pause refills to the burst, no more.
        let t1 = t0 + 3_600_000;
        assert_eq!(
            (0..40).filter(|_| c.admit(Api::Create, t1).is_ok()).count(),
            25
        );
        assert_eq!(c.refused.create, 3 + 15);
        assert_eq!(c.refused.account, 0);
    }

    #[test]
    fn zero_refuses_everything_and_none_nothing() {
        let mut c = limited(0, None);
        assert_eq!(c.admit(Api::Create, 0), Err(Limiter::Endpoint));
        let mut u = CapacityState::new(0, Capacity::unlimited());
        assert!((0..10_000).all(|_| u.admit(Api::Search, 0).is_ok()));
        assert_eq!(u.tokens(0), CapacityTokens::default());
    }

    #[test]
    fn account_refusal_takes_no_endpoint_token() {
        let mut c = limited(25, Some(2));
        assert_eq!(c.admit(Api::Create, 0), Ok(()));
        assert_eq!(c.admit(Api::Retrieve, 0), Ok(()));
        assert_eq!(c.admit(Api::Create, 0), Err(Limiter::Account));
        let t = c.tokens(0);
        assert_eq!(t.create, Some(24.0));
        assert_eq!(t.retrieve, Some(24.0));
        assert_eq!(t.account, Some(0.0));
        assert_eq!(c.refused.create, 1);
        assert_eq!(c.refused.account, 1);
    }

    #[test]
    fn latency_quantiles() {
        let l = CreateLatency::default();
        assert_eq!(l.at_z(0.0), Duration::from_millis(300));
        let p99 = l.at_z(2.326).as_millis();
        assert!((1_150..1_250).contains(&p99), "{p99}");
        let flat = CreateLatency {
            sigma: 0.0,
            ..CreateLatency::default()
        };
        let mut rng = SmallRng::seed_from_u64(1);
        assert_eq!(flat.sample(&mut rng), Duration::from_millis(300));
        assert!(CreateLatency {
            sigma: f64::NAN,
            ..l
        }
        .validate()
        .is_err());
    }
}
