//! Time, injected: "now" ([`Clock`](charge_core::time::Clock)) and waiting ([`Sleeper`]). Nothing
//! in the core reads the system time or sleeps on a timer directly, so a test or the simulation
//! runs on a virtual clock (and can jump past Stripe's 24 h idempotency-key lifetime).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// Waits. Production sleeps on tokio's timer; a simulation on its virtual clock.
pub trait Sleeper: Send + Sync {
    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}
