//! Where outcome events go (EventBridge in production): the relay's one port. What is an outcome,
//! and the event that says it, is the domain's ([`charge_core::outbox`]).

use std::fmt;

use async_trait::async_trait;
use charge_core::outbox::OutcomeEvent;

/// Publishing failed for the whole call (the entries' own failures are [`Published::failed`]).
#[derive(Debug, thiserror::Error)]
pub struct PublishError {
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl PublishError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    pub fn with_source(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// What a publish call did: the indexes (into the slice given) of the events not accepted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Published {
    pub failed: Vec<usize>,
}

/// Where outcome events go (EventBridge in production). At least once: a caller re-publishes what
/// failed, and consumers deduplicate on `event_id`.
#[async_trait]
pub trait OutcomePublisher: Send + Sync {
    /// Publishes up to [`MAX_BATCH`] events in one call.
    async fn publish(&self, events: &[OutcomeEvent]) -> Result<Published, PublishError>;
}

/// EventBridge's PutEvents takes at most 10 entries.
pub const MAX_BATCH: usize = 10;
