//! Request counting on the wire and the scenarios it measures. This directory is also compiled
//! into `tests/request_counts.rs` (by `#[path]`), so the counts CI asserts are produced by the
//! same code as the counts `make bench` publishes.

pub mod counter;
pub mod scenarios;
pub mod seed;
