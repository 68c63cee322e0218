//! [`SimQueue`]: SQS FIFO in memory at simulation scale — the same rules as
//! `charge_once::memory::MemoryQueue` (deduplication by id over a 5-minute window, order and
//! blocking per message group, visibility timeouts, receipt handles, receive counts) on the
//! virtual clock, with deduplication entries expiring from a queue in time order, deletes by
//! receipt in O(log n), and a receive that reads only the messages of groups with nothing in
//! flight (kept in send order, a group moved back in when its last visibility timeout runs out),
//! instead of scans of every message and every id per call.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use charge_core::time::{Clock, Timestamp};
use charge_once::memory::ReceivedMessage;
use charge_once::ports::{MessageVisibility, OperationQueue, QueueError, QueuedOperation};

use crate::fx::{FxHashMap, FxHashSet};

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
    sent_at: Timestamp,
    last_received: Option<Timestamp>,
}

/// One message group's messages, and whether a message of it is in flight.
#[derive(Default)]
struct Group {
    /// Its messages' send sequences, in order.
    seqs: Vec<u64>,
    /// The latest visibility timeout of its received messages: the group is blocked (a message
    /// of it in flight) while this is after now.
    blocked_until: Option<Timestamp>,
    /// Its messages are in `State::ready` (it was not blocked when last looked at).
    ready: bool,
}

#[derive(Default)]
struct State {
    /// By send sequence: the queue's order.
    messages: BTreeMap<u64, Stored>,
    /// The messages of groups with nothing in flight, by send sequence: what a receive reads.
    ready: BTreeSet<u64>,
    groups: FxHashMap<String, Group>,
    /// When blocked groups may be unblocked (an entry is stale once the group's
    /// `blocked_until` moved).
    unblock: BTreeSet<(Timestamp, String)>,
    receipts: FxHashMap<String, u64>,
    dedup_seen: FxHashMap<String, Timestamp>,
    dedup_order: VecDeque<(Timestamp, String)>,
    next_id: u64,
    /// Groups (orders) with a receive at least `long_wait` after the message's previous one.
    waited: FxHashSet<String>,
    /// Messages sent (and not deduplicated), for waiters.
    generation: u64,
}

impl State {
    /// Moves the groups whose last visibility timeout has run out by `now` back into `ready`.
    fn unblock_due(&mut self, now: Timestamp) {
        while let Some((at, _)) = self.unblock.first() {
            if *at > now {
                break;
            }
            let Some((at, name)) = self.unblock.pop_first() else {
                break;
            };
            if let Some(group) = self.groups.get_mut(&name) {
                if group.blocked_until == Some(at) && !group.ready {
                    group.ready = true;
                    self.ready.extend(group.seqs.iter().copied());
                }
            }
        }
    }

    /// Recomputes whether `name` is blocked at `now` after one of its messages changed, and
    /// moves its messages into or out of `ready`.
    fn refresh(&mut self, name: &str, now: Timestamp) {
        let Some(group) = self.groups.get_mut(name) else {
            return;
        };
        group.blocked_until = group
            .seqs
            .iter()
            .filter_map(|s| self.messages.get(s))
            .filter(|m| m.receipt.is_some())
            .map(|m| m.visible_at)
            .max();
        match group.blocked_until {
            Some(until) if until > now => {
                if group.ready {
                    group.ready = false;
                    for s in &group.seqs {
                        self.ready.remove(s);
                    }
                }
                self.unblock.insert((until, name.to_owned()));
            }
            _ => {
                if !group.ready {
                    group.ready = true;
                    self.ready.extend(group.seqs.iter().copied());
                }
            }
        }
    }
}

pub struct SimQueue {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    /// Successful `SendMessage` calls (deduplicated ones included, as SQS bills them).
    pub sends: AtomicU64,
    /// Audit of the message contract: sends whose deduplication id is not the operation id (or
    /// `operation_id:n` for the n-th re-drive), so FIFO dedup cannot catch a re-send. Must stay 0.
    pub foreign_dedup_ids: AtomicU64,
    /// The order of the first one.
    pub first_foreign: Mutex<Option<String>>,
    /// A receive this long after the previous receive of the same message counts as a wait of
    /// the visibility timeout ([`SimQueue::waited_timeout`]); `None` counts nothing.
    pub long_wait: Option<Duration>,
    /// `ChangeMessageVisibility` calls that found their message.
    pub visibility_changes: AtomicU64,
}

impl SimQueue {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            clock,
            sends: AtomicU64::new(0),
            foreign_dedup_ids: AtomicU64::new(0),
            first_foreign: Mutex::new(None),
            long_wait: None,
            visibility_changes: AtomicU64::new(0),
        }
    }

    /// Makes a received message visible `delay` from now (`ChangeMessageVisibility`); false if
    /// the receipt is stale.
    pub fn change_visibility(&self, receipt_handle: &str, delay: Duration) -> bool {
        let now = self.clock.now();
        let mut st = self.lock();
        let Some(seq) = st.receipts.get(receipt_handle).copied() else {
            return false;
        };
        match st.messages.get_mut(&seq) {
            Some(m) => {
                m.visible_at = now.plus(delay);
                let group = m.group_id.clone();
                st.refresh(&group, now);
                self.visibility_changes.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// The earliest moment a message that is not visible now becomes visible.
    pub fn next_visible_at(&self) -> Option<Timestamp> {
        let now = self.clock.now();
        self.lock()
            .messages
            .values()
            .map(|m| m.visible_at)
            .filter(|at| *at > now)
            .min()
    }

    /// When the oldest message still in the queue was sent.
    pub fn oldest_sent_at(&self) -> Option<Timestamp> {
        // By send sequence: the first is the oldest.
        self.lock().messages.values().next().map(|m| m.sent_at)
    }

    /// (visible, in flight) messages now.
    pub fn visible_and_in_flight(&self) -> (u64, u64) {
        let now = self.clock.now();
        let st = self.lock();
        let in_flight = st
            .messages
            .values()
            .filter(|m| m.receipt.is_some() && m.visible_at > now)
            .count() as u64;
        (st.messages.len() as u64 - in_flight, in_flight)
    }

    /// Groups with a receive at least [`SimQueue::long_wait`] after the previous one.
    pub fn waited_timeout(&self) -> u64 {
        self.lock().waited.len() as u64
    }

    /// Changes whenever a message is sent.
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends a raw body; false when deduplicated.
    pub fn send_raw(&self, body: &str, group_id: &str, dedup_id: &str) -> bool {
        self.sends.fetch_add(1, Ordering::Relaxed);
        let now = self.clock.now();
        let mut st = self.lock();
        while let Some((at, _)) = st.dedup_order.front() {
            if now.since(*at) < DEDUP_WINDOW {
                break;
            }
            if let Some((at, id)) = st.dedup_order.pop_front() {
                if st.dedup_seen.get(&id) == Some(&at) {
                    st.dedup_seen.remove(&id);
                }
            }
        }
        if st
            .dedup_seen
            .get(dedup_id)
            .is_some_and(|at| now.since(*at) < DEDUP_WINDOW)
        {
            return false;
        }
        st.dedup_seen.insert(dedup_id.to_owned(), now);
        st.dedup_order.push_back((now, dedup_id.to_owned()));
        st.next_id += 1;
        st.generation += 1;
        let seq = st.next_id;
        let group = st
            .groups
            .entry(group_id.to_owned())
            .or_insert_with(|| Group {
                ready: true,
                ..Group::default()
            });
        group.seqs.push(seq);
        if group.ready {
            st.ready.insert(seq);
        }
        st.messages.insert(
            seq,
            Stored {
                message_id: format!("msg-{seq}"),
                body: body.to_owned(),
                group_id: group_id.to_owned(),
                dedup_id: dedup_id.to_owned(),
                visible_at: now,
                receipt: None,
                receive_count: 0,
                sent_at: now,
                last_received: None,
            },
        );
        true
    }

    /// Receives up to `max` messages, FIFO rules: in order within a group, and no message from a
    /// group that has a message in flight.
    pub fn receive(&self, max: usize, visibility: Duration) -> Vec<ReceivedMessage> {
        let now = self.clock.now();
        let mut st = self.lock();
        let st = &mut *st;
        st.unblock_due(now);
        // Only groups without a message in flight are in `ready`; an earlier message of a group
        // that is not visible yet keeps the group's order.
        let mut skipped: FxHashSet<&str> = FxHashSet::default();
        let mut picked: Vec<u64> = Vec::new();
        for seq in &st.ready {
            if picked.len() >= max {
                break;
            }
            let Some(m) = st.messages.get(seq) else {
                continue;
            };
            let g = m.group_id.as_str();
            if skipped.contains(g) {
                continue;
            }
            if m.visible_at > now {
                skipped.insert(g);
                continue;
            }
            picked.push(*seq);
        }
        drop(skipped);
        let mut touched: Vec<String> = Vec::new();
        let mut out = Vec::with_capacity(picked.len());
        for seq in picked {
            st.next_id += 1;
            let receipt = format!("rh-{}", st.next_id);
            let Some(m) = st.messages.get_mut(&seq) else {
                continue;
            };
            if let Some(old) = m.receipt.replace(receipt.clone()) {
                st.receipts.remove(&old);
            }
            m.visible_at = now.plus(visibility);
            m.receive_count += 1;
            if let (Some(prev), Some(long)) = (m.last_received, self.long_wait) {
                if now.since(prev) >= long {
                    st.waited.insert(m.group_id.clone());
                }
            }
            m.last_received = Some(now);
            if touched.last() != Some(&m.group_id) {
                touched.push(m.group_id.clone());
            }
            st.receipts.insert(receipt.clone(), seq);
            out.push(ReceivedMessage {
                message_id: m.message_id.clone(),
                receipt_handle: receipt,
                body: m.body.clone(),
                group_id: m.group_id.clone(),
                dedup_id: m.dedup_id.clone(),
                receive_count: m.receive_count,
            });
        }
        for g in touched {
            st.refresh(&g, now);
        }
        out
    }

    /// Deletes a received message; false if the receipt is stale.
    pub fn delete(&self, receipt_handle: &str) -> bool {
        let now = self.clock.now();
        let mut st = self.lock();
        let Some(seq) = st.receipts.remove(receipt_handle) else {
            return false;
        };
        let Some(m) = st.messages.remove(&seq) else {
            return false;
        };
        st.ready.remove(&seq);
        if let Some(group) = st.groups.get_mut(&m.group_id) {
            group.seqs.retain(|s| *s != seq);
            if group.seqs.is_empty() {
                st.groups.remove(&m.group_id);
            } else {
                st.refresh(&m.group_id, now);
            }
        }
        true
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
impl OperationQueue for SimQueue {
    async fn send(&self, charge: &QueuedOperation) -> Result<(), QueueError> {
        let op = charge.message.operation_id.to_string();
        let derived = charge.dedup_id == op
            || charge
                .dedup_id
                .strip_prefix(op.as_str())
                .and_then(|rest| rest.strip_prefix(':'))
                .is_some_and(|n| n.parse::<u32>().is_ok());
        if !derived {
            self.foreign_dedup_ids.fetch_add(1, Ordering::Relaxed);
            self.first_foreign
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(|| charge.message.order_id.as_str().to_owned());
        }
        let body = serde_json::to_string(&charge.message)
            .map_err(|e| QueueError::with_source("cannot encode message", e))?;
        self.send_raw(&body, &charge.group_id, &charge.dedup_id);
        Ok(())
    }

    async fn depth(&self) -> Result<Option<charge_core::reconcile_plan::QueueDepth>, QueueError> {
        let (visible, in_flight) = self.visible_and_in_flight();
        Ok(Some(charge_core::reconcile_plan::QueueDepth {
            visible,
            in_flight,
        }))
    }
}

/// `ChangeMessageVisibility` on the simulated queue: the charge function's refused messages come
/// back after `return_after`.
#[async_trait]
impl MessageVisibility for SimQueue {
    async fn return_after(&self, receipt_handle: &str, delay: Duration) -> Result<(), QueueError> {
        self.change_visibility(receipt_handle, delay);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use charge_core::time::ManualClock;
    use charge_once::memory::MemoryQueue;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// Random operations on both queues give the same answers.
    #[test]
    fn behaves_as_the_memory_queue() {
        let clock = ManualClock::new(Timestamp::from_millis(1_000_000));
        let ours = SimQueue::new(Arc::new(clock.clone()));
        let theirs = MemoryQueue::new(Arc::new(clock.clone()));
        let mut rng = SmallRng::seed_from_u64(9);
        let mut receipts: Vec<(String, String)> = Vec::new();
        for step in 0..20_000 {
            match rng.random_range(0..10) {
                0..=3 => {
                    let g = format!("g{}", rng.random_range(0..20));
                    let d = format!("d{}", rng.random_range(0..200));
                    let body = format!("b{step}");
                    assert_eq!(ours.send_raw(&body, &g, &d), theirs.send_raw(&body, &g, &d));
                }
                4..=6 => {
                    let max = rng.random_range(1..=10);
                    let vis = Duration::from_secs(rng.random_range(1..60));
                    let a = ours.receive(max, vis);
                    let b = theirs.receive(max, vis);
                    let strip = |v: &[ReceivedMessage]| {
                        v.iter()
                            .map(|m| (m.message_id.clone(), m.body.clone(), m.receive_count))
                            .collect::<Vec<_>>()
                    };
                    assert_eq!(strip(&a), strip(&b), "step {step}");
                    receipts.extend(
                        a.into_iter()
                            .zip(b)
                            .map(|(x, y)| (x.receipt_handle, y.receipt_handle)),
                    );
                }
                7 if !receipts.is_empty() => {
                    let i = rng.random_range(0..receipts.len());
                    let (x, y) = receipts.swap_remove(i);
                    assert_eq!(ours.delete(&x), theirs.delete(&y), "step {step}");
                }
                8 if !receipts.is_empty() => {
                    // Stale receipts too (deleted, or received again since): both refuse them.
                    let i = rng.random_range(0..receipts.len());
                    let (x, y) = receipts[i].clone();
                    let delay = Duration::from_secs(rng.random_range(0..90));
                    assert_eq!(
                        ours.change_visibility(&x, delay),
                        theirs.change_visibility(&y, delay),
                        "step {step}"
                    );
                }
                _ => clock.advance(Duration::from_secs(rng.random_range(0..40))),
            }
            assert_eq!(ours.len(), theirs.len());
        }
    }
}
