//! # charge-core: the rules, without I/O
//!
//! One confirmed order must become **exactly one** charge at Stripe, although every hop under it
//! delivers at least once. This crate holds every rule that decides what happens, as plain values
//! and functions: no async, no network, no AWS, no JSON. The shells that call Stripe, DynamoDB and
//! SQS (`charge_once`, in `shared/`) ask it what to do and do it; Cargo keeps the wall, since
//! nothing here can import them.
//!
//! The values:
//! - [`domain`]: parse-don't-validate newtypes for what arrives from outside (`OrderId`, `Amount`,
//!   `Currency`, ...), the charge parameters and their fingerprint, the idempotency key.
//! - [`ids`]: where fresh UUIDs come from (a per-thread seam the deterministic simulation seeds).
//! - [`time`]: `Timestamp` (milliseconds since the epoch), the [`time::Clock`] trait, the system
//!   and the manual clock.
//! - [`operation`]: the durable operation record and its status (`pending | unknown | succeeded | failed`).
//! - [`outcome`]: Stripe's answers, classified once ([`outcome::outcome_for`], [`outcome::GatewayError`]).
//! - [`store`]: the store's conditional writes as requests and answers.
//! - [`stripe_version`]: the Stripe API versions the engine knows (the pin and the current one)
//!   and the words that differ between them (a lapse's reason, the released remainder's refund).
//! - [`stripe_object`]: what the audit and the events function compare of a Stripe object (a
//!   PaymentIntent, a refund) with the record that made it, one trait for every kind.
//!
//! The engine, one for every kind: [`plan`] holds what every plan shares (the [`plan::Decision`]
//! each answers with, the [`plan::Policy`] they run on, the [`plan::ReviewClass`] of what a
//! person must look at, the back-off).
//!
//! Each kind of money movement in a room of its own, its door rule, plan and event plan side by
//! side:
//! - [`charge`]: [`charge::plan`] (record as claimed, Stripe's answer, now) → the next record;
//!   [`charge::event_plan`] (record as claimed, what Stripe holds for an event's intent, now) →
//!   the next record, or why nothing changes.
//! - [`refund`]: what a refund asks, Stripe's refund statuses, and the reservation that keeps an
//!   order's refunds within what was charged; [`refund::plan`] (refund record as claimed,
//!   Stripe's answer, now) → the next record, and whether its reservation goes back to the charge;
//!   [`refund::event_plan`] (refund record as read, what a refund event claims, Stripe's answer)
//!   → settle through the refund plan, fail a succeeded refund later, or why nothing changes.
//! - [`take`]: what a capture or a cancel asks, and the door's rule over the order's charge (only
//!   one of them ever takes an authorization); [`take::plan`] (capture or cancel record as
//!   claimed, Stripe's answer, now) → the next record, and how the charge's authorization ends
//!   (captured, canceled, lapsed).
//!
//! - [`attempt`]: an order charged again after a decline, as its next charge attempt: the
//!   door's rule (which attempt answers a request, when a new one may start, why not). An
//!   attempt is a charge: [`charge::plan`] runs it.
//!
//! - [`dispute`]: money the customer's bank takes back, recorded from what Stripe holds (never
//!   created by us), within what the order's charge took, with its evidence deadline paged.
//!
//! The rules over every kind (each a table, the specification in full: `core/tests/spec_*.rs`):
//! - [`audit`]: (what Stripe created in a window, the records settled in it) → matched, in
//!   flight, or a drift class; the audit never changes a record.
//! - [`store_rules`]: each conditional write as guards in refusal order, then the change; the
//!   DynamoDB adapter compiles the same guards into condition expressions.
//! - [`reconcile_plan`]: (record as found by the reconciler, now) → re-enqueue, re-drive, settle.
//! - [`message_plan`]: (what the shell did with a queue message, its receive count, the budget)
//!   → what happens to the message.
//! - [`outbox`]: which committed change is an outcome the order service must learn.

pub mod attempt;
pub mod audit;
pub mod charge;
pub mod dispute;
pub mod domain;
pub mod ids;
pub mod message_plan;
pub mod operation;
pub mod outbox;
pub mod outcome;
pub mod plan;
pub mod reconcile_plan;
pub mod refund;
pub mod store;
pub mod store_rules;
pub mod stripe_object;
pub mod stripe_version;
pub mod take;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod time;
