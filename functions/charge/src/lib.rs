//! The charge function: SQS FIFO batches → [`charge_once::executor::execute`] per message,
//! in order, with partial batch failures.
//!
//! - [`handler`]: the batch loop and what fails an item.
//! - [`ChargeConfig`]: what it reads from the environment, once, at init.

pub mod handler;

use charge_core::plan::Policy;
use charge_once::config::{self, ConfigError, Env, FromEnv};

#[derive(Debug, Clone)]
pub struct ChargeConfig {
    pub table_name: String,
    /// The charge queue itself: a message refused at the rate limit is made visible again soon.
    pub queue_url: String,
    /// The charge queue's dead-letter queue, where poison messages are copied.
    pub dead_letter_queue_url: String,
    pub stripe: config::StripeEnv,
    pub policy: Policy,
    /// This environment paces its Stripe calls to `budget.charge_share()` per second.
    pub budget: config::StripeBudget,
}

impl FromEnv for ChargeConfig {
    fn from_env(env: &dyn Env) -> Result<Self, ConfigError> {
        Ok(Self {
            table_name: config::required(env, config::TABLE_NAME)?,
            queue_url: config::required(env, config::QUEUE_URL)?,
            dead_letter_queue_url: config::required(env, config::DEAD_LETTER_QUEUE_URL)?,
            stripe: config::stripe_env(env)?,
            policy: config::charge_policy(env)?,
            budget: config::stripe_budget(env)?,
        })
    }
}

/// How the SQS event source feeds this function, as the template configures it (the
/// `ChargeQueueEventSource` mapping and the `OperationQueue` it reads). One place for the numbers:
/// `tests/template.rs` holds the template to them, and the simulator's load model
/// (`simulate --arrival-rate`) runs its pollers by them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSource {
    /// `BatchSize`: records per invocation (10, the FIFO maximum).
    pub batch_size: usize,
    /// The queue's `VisibilityTimeout` in seconds: how long a received message stays invisible
    /// unless deleted or returned sooner.
    pub visibility_timeout_secs: u64,
    /// `MaximumBatchingWindowInSeconds` (absent = 0: FIFO batches are never held back to fill).
    pub max_batching_window_secs: u64,
    /// The function's `Timeout` in seconds: an invocation's deadline.
    pub function_timeout_secs: u64,
    /// The default of `ChargeMaxConcurrency` (`ScalingConfig.MaximumConcurrency`).
    pub default_max_concurrency: u32,
    /// The queue's redrive policy `maxReceiveCount`: a message failed at this receive goes to
    /// the DLQ (which pages) instead of being delivered again.
    pub max_receive_count: u32,
}

/// The charge function's event source (see [`EventSource`]).
pub const EVENT_SOURCE: EventSource = EventSource {
    batch_size: config::CHARGE_BATCH_SIZE as usize,
    visibility_timeout_secs: 1_800,
    max_batching_window_secs: 0,
    function_timeout_secs: 300,
    default_max_concurrency: config::StripeBudget::DEFAULT_CONCURRENCY as u32,
    max_receive_count: 5,
};
