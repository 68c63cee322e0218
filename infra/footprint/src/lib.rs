//! The measurements `make bench` repeats for each candidate release profile:
//!
//! - [`cpu`]: CPU time per charge and peak RSS of the charge handler on in-memory ports.
//! - [`init`]: init time of a function's `bootstrap` against a tiny local Runtime API.
//!
//! `bench` re-exports both; this crate exists so that building them with another profile costs a
//! link, not a second dependency tree (its dependencies are the charge function's).

pub mod cpu;
pub mod init;
