//! Stripe's budget as the charge function's and the reconciler's main.rs split it, on the
//! virtual clock: waiting for a slot sleeps on the scheduler's timers ([`SchedSleeper`]), or
//! moves the clock where no timers are installed (one caller at a time). Against a Stripe whose
//! limits refill on real time, on this machine's clock instead ([`Pacing::on_real_time`]).

use std::sync::Arc;
use std::time::Duration;

use charge_core::time::{Clock, ManualClock};
use charge_once::config::StripeBudget;
use charge_once::pacing::{Budget, MessageBudget, PacedGateway, TokioSleeper};
use charge_once::ports::PaymentGateway;
use charge_once::ports::Sleeper;

use crate::sched::SchedSleeper;

/// The budget's shares, each a [`Budget`] on the virtual clock.
pub struct Pacing {
    budget: StripeBudget,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
}

impl Pacing {
    /// The budget (`StripeRequestsPerSecond`, `StripeEndpointRequestsPerSecond`) split over
    /// `ChargeMaxConcurrency` environments and the callers of work that can wait.
    pub fn new(budget: StripeBudget, clock: &ManualClock) -> Self {
        Self {
            budget,
            clock: Arc::new(clock.clone()),
            sleeper: Arc::new(SchedSleeper(clock.clone())),
        }
    }

    /// The same split on this machine's clock, waiting real time for a slot: for a Stripe whose
    /// limits refill on real time (a separately started `stripe-sim`, as its binary starts), so
    /// the functions pace on the clock its limits keep.
    pub fn on_real_time(budget: StripeBudget) -> Self {
        Self {
            budget,
            clock: Arc::new(charge_core::time::SystemClock),
            sleeper: Arc::new(TokioSleeper),
        }
    }

    fn paced(&self, per_second: f64, burst: u32) -> Arc<Budget> {
        Arc::new(Budget::new(
            per_second,
            burst,
            self.clock.clone(),
            self.sleeper.clone(),
        ))
    }

    /// How the functions wait: on the virtual clock's timers (or this machine's clock).
    pub fn sleeper(&self) -> Arc<dyn Sleeper> {
        self.sleeper.clone()
    }

    /// The budget as configured.
    pub fn budget(&self) -> StripeBudget {
        self.budget
    }

    /// One charge environment's shares (the account's, each endpoint's), with its burst and carry
    /// as the charge function has them ([`StripeBudget::charge_burst`],
    /// [`StripeBudget::charge_carry`]), or a fixed burst and no carry.
    pub fn charge(&self, burst: Option<u32>) -> Arc<MessageBudget> {
        // A fixed burst stands for a bank as it was before the carry: none.
        let (burst, carried) = match burst {
            Some(b) => (b, false),
            None => (self.budget.charge_burst(), true),
        };
        let share = |per_second: f64| {
            let carry = if carried {
                StripeBudget::charge_carry(per_second)
            } else {
                0
            };
            Arc::new(
                Budget::new(per_second, burst, self.clock.clone(), self.sleeper.clone())
                    .with_carry(carry),
            )
        };
        Arc::new(MessageBudget::new(
            share(self.budget.charge_share()),
            || share(self.budget.charge_endpoint_share()),
        ))
    }

    /// The reconciler's gateway: paced to its share, search to its own.
    pub fn reconciler(&self, gateway: Arc<dyn PaymentGateway>) -> Arc<dyn PaymentGateway> {
        Arc::new(PacedGateway::new(
            gateway,
            self.paced(self.budget.reconciler_share(), 1),
            Some(self.paced(self.budget.reconciler_search_share(), 1)),
            Duration::from_secs(10),
        ))
    }
}
