//! [`EventBridgePublisher`]: the [`OutcomePublisher`] on an EventBridge bus. One PutEvents call per
//! batch of at most ten; an entry EventBridge refuses comes back in [`Published::failed`].
//!
//! Behind the crate feature `eventbridge`: only the notify function (and the tests) link the
//! EventBridge SDK.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use aws_sdk_eventbridge::Client;
use charge_core::outbox::{OutcomeEvent, SOURCE};

use crate::ports::{OutcomePublisher, PublishError, Published, MAX_BATCH};

pub struct EventBridgePublisher {
    client: Client,
    bus: String,
    /// PutEvents calls made.
    pub calls: AtomicU64,
}

impl fmt::Debug for EventBridgePublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventBridgePublisher")
            .field("bus", &self.bus)
            .finish_non_exhaustive()
    }
}

impl EventBridgePublisher {
    pub fn new(client: Client, bus: impl Into<String>) -> Self {
        Self {
            client,
            bus: bus.into(),
            calls: AtomicU64::new(0),
        }
    }
}

#[async_trait]
impl OutcomePublisher for EventBridgePublisher {
    async fn publish(&self, events: &[OutcomeEvent]) -> Result<Published, PublishError> {
        if events.is_empty() {
            return Ok(Published::default());
        }
        if events.len() > MAX_BATCH {
            return Err(PublishError::new(format!(
                "PutEvents takes at most {MAX_BATCH} entries, got {}",
                events.len()
            )));
        }
        let entries = events
            .iter()
            .map(|e| {
                let detail = serde_json::to_string(&e.detail())
                    .map_err(|err| PublishError::with_source("outcome event detail", err))?;
                Ok(PutEventsRequestEntry::builder()
                    .event_bus_name(&self.bus)
                    .source(SOURCE)
                    .detail_type(e.detail_type())
                    .detail(detail)
                    .build())
            })
            .collect::<Result<Vec<_>, PublishError>>()?;
        self.calls.fetch_add(1, Ordering::Relaxed);
        let out = self
            .client
            .put_events()
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| PublishError::with_source("PutEvents", e))?;
        // Entries answer in request order; a failed one carries an error code and no event id.
        let results = out.entries();
        let failed = (0..events.len())
            .filter(|&i| {
                results
                    .get(i)
                    .is_none_or(|r| r.error_code().is_some() || r.event_id().is_none())
            })
            .collect();
        Ok(Published { failed })
    }
}
