//! The seed's scenarios over the in-memory fake gateway (the same suite runs over HTTP against
//! stripe-sim in `seed_scenarios_http.rs`), plus the two faults only the fake can make.

testkit::seed_scenario_tests!(testkit::seed_scenarios::FakeSide, fake_only);
