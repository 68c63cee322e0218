//! The seed's scenarios through the real Stripe client and the Stripe simulator over HTTP, the
//! simulator running on the core's clock (the same suite runs over the fake gateway in
//! `seed_scenarios_fake.rs`). Each counts what the simulator's ledger shows was really created.

testkit::seed_scenario_tests!(testkit::seed_scenarios::HttpSide);
