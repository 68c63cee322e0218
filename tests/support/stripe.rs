//! The Stripe side of a test: an embedded `stripe-sim` on a loopback port, driven by the same
//! manual clock as the core, and the real [`StripeGateway`] pointed at it.

use std::sync::Arc;
use std::time::Duration;

use charge_core::time::{Clock, ManualClock, Timestamp};
use charge_once::adapters::stripe::{SecretKey, StripeConfig, StripeGateway};
use stripe_sim::{RunningSim, SimConfig, StripeSim};

pub struct StripeSide {
    pub sim: StripeSim,
    pub running: RunningSim,
    pub clock: ManualClock,
}

impl StripeSide {
    /// A simulator whose time is `clock`'s (search lag and key pruning follow the core's time).
    pub async fn start(clock: ManualClock) -> Self {
        let source = clock.clone();
        let sim = StripeSim::new(SimConfig {
            time_source: Some(Arc::new(move || source.now().as_millis())),
            ..SimConfig::default()
        });
        let running = sim.start(0).await.expect("start stripe-sim on loopback");
        Self {
            sim,
            running,
            clock,
        }
    }

    pub async fn with_new_clock() -> Self {
        Self::start(ManualClock::new(Timestamp::from_millis(1_800_000_000_000))).await
    }

    pub fn config(&self) -> StripeConfig {
        let mut cfg = StripeConfig::new(
            self.running.base_url(),
            SecretKey::new(stripe_sim::DEFAULT_API_KEY),
        );
        cfg.max_network_retries = 0;
        cfg.retry_backoff = Duration::from_millis(10);
        cfg.timeout = Duration::from_secs(5);
        cfg
    }

    /// The real client, with no in-call retries (each test says when it wants them).
    pub fn gateway(&self) -> StripeGateway {
        StripeGateway::new(self.config()).expect("build the Stripe client")
    }

    pub fn gateway_with(&self, f: impl FnOnce(&mut StripeConfig)) -> StripeGateway {
        let mut cfg = self.config();
        f(&mut cfg);
        StripeGateway::new(cfg).expect("build the Stripe client")
    }
}
