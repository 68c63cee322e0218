//! The charge: one confirmed order, one PaymentIntent at Stripe.
//!
//! - [`plan`]: (record as claimed, Stripe's answer, now) → the next record: create inside the key
//!   window, retrieve once the intent's id is known, search past it; a declined intent canceled
//!   before `failed` is recorded; a manual capture's authorization watched to its deadline.
//! - [`event_plan`]: (record as claimed, what Stripe holds for an event's intent, now) → the next
//!   record, or why nothing changes.
//! - [`state`]: what only a charge's record holds (its refunds' reservations, its authorization).
//!
//! What the charge's door checks (the order as the merchant sends it) is [`crate::domain`]'s; how
//! its record is created is [`crate::store_rules`]'s.

pub mod event_plan;
pub mod plan;
pub mod state;
