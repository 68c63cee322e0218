//! The events function's inbox: every Stripe event id the endpoint acted on, recorded with a conditional
//! put before it acts, so a redelivery of the same event (Stripe delivers at least once) changes
//! nothing.
//!
//! Entries expire ([`INBOX_TTL`], DynamoDB TTL in production): Stripe retries one event for at
//! most three days, so 30 days outlive every redelivery of it. Even a delivery after expiry is
//! harmless, because every transition the webhook makes is itself conditional (an inbox miss
//! costs a few reads and refused writes, never a second effect).

use std::time::Duration;

use async_trait::async_trait;
use charge_core::time::Timestamp;

use super::store::StoreError;

/// How long an event id is remembered.
pub const INBOX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Result of [`EventInbox::admit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// First time this event id is seen: act on it.
    New,
    /// Seen before (and not forgotten): answer 200 and do nothing.
    Duplicate,
}

/// The set of processed Stripe event ids.
#[async_trait]
pub trait EventInbox: Send + Sync {
    /// Records `event_id` unless it is already there (one conditional write), with an expiry.
    async fn admit(
        &self,
        event_id: &str,
        received_at: Timestamp,
        expires_at: Timestamp,
    ) -> Result<Admitted, StoreError>;

    /// Removes `event_id` after acting on it failed, so Stripe's retry is processed again.
    async fn forget(&self, event_id: &str) -> Result<(), StoreError>;
}
