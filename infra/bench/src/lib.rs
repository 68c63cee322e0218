//! `make bench`: the measurements behind `BENCHMARKS.md` (issue 8).
//!
//! - [`wire`]: requests per operation counted on the wire (an interceptor on the SDK clients, the
//!   Stripe simulator's own counters), our handlers and the seed's straight port.
//! - [`index_cost`]: what a reconciler tick reads as unsettled and settled operations grow.
//! - [`cpu`], [`init`] (from the `footprint` crate, built once per candidate profile): CPU time per
//!   charge and peak RSS of the charge handler on in-memory ports; init time of a `bootstrap`.
//! - [`logs`]: the log capture and the platform and access-log lines section 5 prices.
//! - [`bill`]: every request of one charge by function, with each event source and the relay.
//! - [`report`]: the Markdown; [`footprint_table`]: section 4, the five functions' size, init and
//!   CPU per charge beside the previous release's; [`cost`]: section 5, the cost per 1M charges.
//! - [`burst`]: section 7, the reference burst at Stripe's rate limit (`simulate --arrival-rate`).

pub use footprint::{cpu, init};
pub mod bill;
pub mod burst;
pub mod cost;
pub mod footprint_table;
pub mod index_cost;
pub mod logs;
pub mod report;
pub mod wire;
