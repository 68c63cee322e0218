//! `make bench`: the measurements behind `BENCHMARKS.md`, and its rendering.
//!
//! Measurements, each writing JSON to the output directory:
//! - [`wire`]: requests per operation counted on the wire (an interceptor on the SDK clients, the
//!   Stripe simulator's own counters), our handlers and the seed's straight port.
//! - [`index_cost`]: what a reconciler tick reads as unsettled and settled operations grow.
//! - [`cpu`], [`init`] (from the `footprint` crate, built once per candidate profile): CPU time per
//!   charge and peak RSS of the charge handler on in-memory ports; init time of a `bootstrap`.
//! - [`logs`]: the log capture and the platform and access-log lines section 5 prices.
//! - [`bill`]: every request of one charge by function, with each event source and the relay;
//!   [`cost`] prices it per 1M charges.
//! - [`burst`]: the reference burst at Stripe's rate limit (`simulate --arrival-rate`), and
//!   [`grid`]: bursts at other limits, latencies and concurrencies.
//! - [`lines`]: non-test lines of the charge path, the refund path, the product and the tools.
//!
//! Rendering: [`records`] reads the JSON back, [`render`] fills each section's template
//! (`infra/bench/templates/`) with [`markdown`]'s building blocks.

pub use footprint::{cpu, init};
pub mod bill;
pub mod burst;
pub mod cost;
pub mod grid;
pub mod index_cost;
pub mod lines;
pub mod logs;
pub mod markdown;
pub mod records;
pub mod render;
pub mod wire;
