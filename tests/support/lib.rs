//! Shared pieces of the workspace integration tests.
//!
//! - [`stripe`]: an embedded `stripe-sim` on the core's clock and the real Stripe client.
//! - [`aws`]: the local AWS stack (moto) for tests: SDK config, fresh tables (used once ACTIVE)
//!   and queues.
//! - [`stack`]: one fresh, isolated stack per test (tables, queues, an embedded stripe-sim and
//!   the functions wired to them), what every `*_on_aws.rs` file starts from.
//! - [`store_contract`]: the behaviour every [`charge_once::ports::OperationStore`] must have, as
//!   plain async functions; [`store_contract_tests!`] turns them into one `#[tokio::test]` each for a
//!   given store constructor, so the in-memory store and the DynamoDB adapter run the same suite.
//! - [`inbox_contract`] and [`queue_contract`]: the same for the webhook inbox
//!   ([`inbox_contract_tests!`]) and for the charge queue with its visibility port
//!   ([`queue_contract_tests!`], through a [`queue_contract::QueueHarness`]).
//! - [`streams`]: a DynamoDB Streams record as the Lambda event record the notify relay gets.
//! - [`seed_scenarios`]: the charge scenarios of the seed over any Stripe side;
//!   [`seed_scenario_tests!`] runs them over the fake gateway and over HTTP against `stripe-sim`.

pub mod aws;
pub mod inbox_contract;
pub mod queue_contract;
pub mod seed_scenarios;
pub mod stack;
pub mod store_contract;
pub mod streams;
pub mod stripe;

/// The body of a `*_contract_tests!` macro: for each case, a `#[tokio::test]` of that name that
/// builds the implementation with `$make` (an async expression) and runs `$suite::$case` on it.
#[doc(hidden)]
#[macro_export]
macro_rules! contract_cases {
    ($suite:ident, $make:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::$suite::$case($make.await).await;
            }
        )+
    };
}
