//! [`MemoryQueue`]: an SQS FIFO queue in memory — deduplication by id over a 5-minute window,
//! ordering and blocking per message group, visibility timeouts and receipt handles — driven by the
//! injected clock.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use charge_core::reconcile_plan::QueueDepth;
use charge_core::time::Clock;
use charge_core::time::Timestamp;

use crate::ports::{
    DeadLetter, DeadLetterQueue, MessageVisibility, OperationQueue, QueueError, QueuedOperation,
};

/// SQS FIFO's deduplication interval.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(5 * 60);

struct Stored {
    message_id: String,
    body: String,
    group_id: String,
    dedup_id: String,
    visible_at: Timestamp,
    receipt: Option<String>,
    receive_count: u32,
}

/// A message handed to a consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
    pub group_id: String,
    pub dedup_id: String,
    pub receive_count: u32,
}

#[derive(Default)]
struct State {
    messages: VecDeque<Stored>,
    dedup_seen: HashMap<String, Timestamp>,
    next_id: u64,
}

pub struct MemoryQueue {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    /// Successful `SendMessage` calls (deduplicated ones included, as SQS bills them).
    pub sends: AtomicU64,
}

impl MemoryQueue {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            clock,
            sends: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends a raw body (used to put malformed messages on the queue in tests).
    pub fn send_raw(&self, body: &str, group_id: &str, dedup_id: &str) -> bool {
        self.sends.fetch_add(1, Ordering::Relaxed);
        let now = self.clock.now();
        let mut st = self.lock();
        st.dedup_seen.retain(|_, at| now.since(*at) < DEDUP_WINDOW);
        if st.dedup_seen.contains_key(dedup_id) {
            return false;
        }
        st.dedup_seen.insert(dedup_id.to_owned(), now);
        st.next_id += 1;
        let message_id = format!("msg-{}", st.next_id);
        st.messages.push_back(Stored {
            message_id,
            body: body.to_owned(),
            group_id: group_id.to_owned(),
            dedup_id: dedup_id.to_owned(),
            visible_at: now,
            receipt: None,
            receive_count: 0,
        });
        true
    }

    /// Receives up to `max` messages, FIFO rules: in order within a group, and no message from a
    /// group that has a message in flight.
    pub fn receive(&self, max: usize, visibility: Duration) -> Vec<ReceivedMessage> {
        let now = self.clock.now();
        let mut st = self.lock();
        let blocked: HashSet<String> = st
            .messages
            .iter()
            .filter(|m| m.receipt.is_some() && m.visible_at > now)
            .map(|m| m.group_id.clone())
            .collect();
        let mut out = Vec::new();
        let mut skipped_groups: HashSet<String> = HashSet::new();
        let st = &mut *st;
        let next_id = &mut st.next_id;
        for m in st.messages.iter_mut() {
            if out.len() >= max {
                break;
            }
            if blocked.contains(&m.group_id) || skipped_groups.contains(&m.group_id) {
                continue;
            }
            if m.visible_at > now {
                // An earlier message of the group is not visible yet: keep the group's order.
                skipped_groups.insert(m.group_id.clone());
                continue;
            }
            *next_id += 1;
            let receipt = format!("rh-{}", next_id);
            m.receipt = Some(receipt.clone());
            m.visible_at = now.plus(visibility);
            m.receive_count += 1;
            out.push(ReceivedMessage {
                message_id: m.message_id.clone(),
                receipt_handle: receipt,
                body: m.body.clone(),
                group_id: m.group_id.clone(),
                dedup_id: m.dedup_id.clone(),
                receive_count: m.receive_count,
            });
        }
        out
    }

    /// Deletes a received message; false if the receipt is stale.
    pub fn delete(&self, receipt_handle: &str) -> bool {
        let mut st = self.lock();
        let before = st.messages.len();
        st.messages
            .retain(|m| m.receipt.as_deref() != Some(receipt_handle));
        st.messages.len() != before
    }

    /// Sets the visibility timeout of a received message (0 makes it visible at once).
    pub fn change_visibility(&self, receipt_handle: &str, timeout: Duration) -> bool {
        let now = self.clock.now();
        let mut st = self.lock();
        match st
            .messages
            .iter_mut()
            .find(|m| m.receipt.as_deref() == Some(receipt_handle))
        {
            Some(m) => {
                m.visible_at = now.plus(timeout);
                true
            }
            None => false,
        }
    }

    /// Messages in the queue, visible or in flight.
    pub fn len(&self) -> usize {
        self.lock().messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl MessageVisibility for MemoryQueue {
    async fn return_after(&self, receipt_handle: &str, delay: Duration) -> Result<(), QueueError> {
        if self.change_visibility(receipt_handle, delay) {
            Ok(())
        } else {
            Err(QueueError::new(format!(
                "no message in flight with receipt handle {receipt_handle}"
            )))
        }
    }
}

#[async_trait]
impl OperationQueue for MemoryQueue {
    async fn send(&self, charge: &QueuedOperation) -> Result<(), QueueError> {
        let body = serde_json::to_string(&charge.message)
            .map_err(|e| QueueError::with_source("cannot encode message", e))?;
        self.send_raw(&body, &charge.group_id, &charge.dedup_id);
        Ok(())
    }

    async fn depth(&self) -> Result<Option<QueueDepth>, QueueError> {
        let now = self.clock.now();
        let st = self.lock();
        let in_flight = st
            .messages
            .iter()
            .filter(|m| m.receipt.is_some() && m.visible_at > now)
            .count() as u64;
        Ok(Some(QueueDepth {
            visible: st.messages.len() as u64 - in_flight,
            in_flight,
        }))
    }
}

#[cfg(test)]
mod tests {
    use charge_core::time::ManualClock;

    use super::*;

    fn queue() -> (MemoryQueue, ManualClock) {
        let clock = ManualClock::new(Timestamp::from_millis(1_000_000));
        (MemoryQueue::new(Arc::new(clock.clone())), clock)
    }

    #[test]
    fn dedup_within_five_minutes_only() {
        let (q, clock) = queue();
        assert!(q.send_raw("a", "g", "d1"));
        assert!(!q.send_raw("a", "g", "d1"));
        clock.advance(DEDUP_WINDOW);
        assert!(q.send_raw("a", "g", "d1"));
        assert_eq!(q.len(), 2);
        assert_eq!(q.sends.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn group_order_and_blocking_and_visibility() {
        let (q, clock) = queue();
        q.send_raw("a1", "A", "1");
        q.send_raw("b1", "B", "2");
        q.send_raw("a2", "A", "3");
        let first = q.receive(1, Duration::from_secs(30));
        assert_eq!(first[0].body, "a1");
        // Group A is in flight: only B comes next.
        let second = q.receive(10, Duration::from_secs(30));
        assert_eq!(
            second.iter().map(|m| m.body.as_str()).collect::<Vec<_>>(),
            ["b1"]
        );
        assert!(q.delete(&first[0].receipt_handle));
        let third = q.receive(10, Duration::from_secs(30));
        assert_eq!(third[0].body, "a2");
        // Not deleted: comes back after the visibility timeout with a new receipt.
        clock.advance(Duration::from_secs(31));
        let again = q.receive(10, Duration::from_secs(30));
        let bodies: Vec<_> = again.iter().map(|m| m.body.as_str()).collect();
        assert_eq!(bodies, ["b1", "a2"]);
        assert_eq!(again[1].receive_count, 2);
        assert!(!q.delete(&third[0].receipt_handle), "stale receipt");
    }
}

/// A dead-letter queue in memory: keeps every parked letter.
#[derive(Default)]
pub struct MemoryDeadLetters {
    letters: Mutex<Vec<DeadLetter>>,
    /// When set, `park` fails (a DLQ outage).
    pub failing: std::sync::atomic::AtomicBool,
}

impl MemoryDeadLetters {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn letters(&self) -> Vec<DeadLetter> {
        self.letters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[async_trait]
impl DeadLetterQueue for MemoryDeadLetters {
    async fn park(&self, letter: &DeadLetter) -> Result<(), QueueError> {
        if self.failing.load(Ordering::Relaxed) {
            return Err(QueueError::new("dead-letter queue unavailable"));
        }
        self.letters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(letter.clone());
        Ok(())
    }
}
