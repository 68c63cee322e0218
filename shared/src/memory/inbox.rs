//! [`MemoryInbox`]: the [`EventInbox`] in a map, with the DynamoDB adapter's semantics
//! (an expired entry counts as absent, as a TTL-deleted item would).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use charge_core::time::Timestamp;

use crate::ports::StoreError;
use crate::ports::{Admitted, EventInbox};

#[derive(Default)]
pub struct MemoryInbox {
    entries: Mutex<HashMap<String, Timestamp>>,
    /// Conditional writes made (admitted or refused), as DynamoDB would bill them.
    pub writes: AtomicU64,
}

impl MemoryInbox {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn contains(&self, event_id: &str) -> bool {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(event_id)
    }
}

#[async_trait]
impl EventInbox for MemoryInbox {
    async fn admit(
        &self,
        event_id: &str,
        received_at: Timestamp,
        expires_at: Timestamp,
    ) -> Result<Admitted, StoreError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match entries.get(event_id) {
            Some(expiry) if *expiry > received_at => Ok(Admitted::Duplicate),
            _ => {
                entries.insert(event_id.to_owned(), expires_at);
                Ok(Admitted::New)
            }
        }
    }

    async fn forget(&self, event_id: &str) -> Result<(), StoreError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(event_id);
        Ok(())
    }
}
