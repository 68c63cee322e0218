//! Shared pieces of the workspace integration tests.
//!
//! - [`stripe`]: an embedded `stripe-sim` on the core's clock and the real Stripe client.
//! - [`aws`]: the local AWS stack (moto) for tests: SDK config, fresh tables and queues.
//! - [`store_contract`]: the behaviour every [`charge_once::ports::OperationStore`] must have, as
//!   plain async functions; [`store_contract_tests!`] turns them into one `#[tokio::test]` each for a
//!   given store constructor, so the in-memory store and the DynamoDB adapter run the same suite.
//! - [`seed_scenarios`]: the charge scenarios of the seed over any Stripe side;
//!   [`seed_scenario_tests!`] runs them over the fake gateway and over HTTP against `stripe-sim`.

pub mod aws;
pub mod seed_scenarios;
pub mod store_contract;
pub mod stripe;
