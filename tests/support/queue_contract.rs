//! The `OperationQueue` contract, with `MessageVisibility` (the same queue, bringing a received
//! message back sooner): what checkout, the reconciler and the charge function rely on
//! (`charge_once::ports`).
//!
//! - A send carries the versioned [`OperationMessage`] (no amount), in the order's message group,
//!   under the dedup id [`QueuedOperation`] chose: a re-send of [`QueuedOperation::first`] within the
//!   dedup window is delivered once, also while the first is in flight; a
//!   [`QueuedOperation::redrive`] has a fresh dedup id and is never swallowed.
//! - One order's messages come in send order, and none while any message of its group is in
//!   flight (also a later one, after an earlier one came back); other orders never wait for it.
//! - `return_after(receipt, delay)`: the message is visible again `delay` from now, never sooner
//!   (SQS counts whole seconds: its adapter rounds up), and its group waits for it meanwhile.
//!
//! The queue is reached through a [`QueueHarness`]: the port itself, plus what the charge
//! function's event source does (receive, delete) and a way to let time pass (the manual clock
//! in memory, real time on moto). Each case takes a fresh, empty queue.
//!
//! Not here, because moto cannot show it: the end of the 5-minute dedup window (real time), and
//! dedup after the first message was deleted (moto forgets a deleted message's dedup id; SQS
//! does not). `MemoryQueue`'s own tests hold both.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use charge_core::operation::Operation;
use charge_once::memory::ReceivedMessage;
use charge_once::ports::{MessageVisibility, OperationMessage, OperationQueue, QueuedOperation};

/// A queue under the contract, and the consumer's side of it.
#[async_trait]
pub trait QueueHarness: Send + Sync {
    /// The port under test.
    fn queue(&self) -> &dyn OperationQueue;
    /// The same queue's visibility port.
    fn visibility(&self) -> &dyn MessageVisibility;
    /// Receives up to `max` messages (at most 10), each then in flight for the queue's
    /// visibility timeout (30 s, longer than any case runs).
    async fn receive(&self, max: usize) -> Vec<ReceivedMessage>;
    /// Deletes a received message (the event source, after the handler acknowledged it).
    async fn delete(&self, receipt_handle: &str);
    /// Lets `d` pass for the queue.
    async fn wait(&self, d: Duration);
}

fn operation(order: &str) -> Operation {
    charge_core::testing::order(order)
        .requested_by("contract-tests")
        .build()
}

async fn send(h: &dyn QueueHarness, charge: &QueuedOperation) {
    h.queue()
        .send(charge)
        .await
        .unwrap_or_else(|e| panic!("send {}: {e}", charge.dedup_id));
}

fn bodies(messages: &[ReceivedMessage]) -> Vec<OperationMessage> {
    messages
        .iter()
        .map(|m| serde_json::from_str(&m.body).expect("the body is a OperationMessage"))
        .collect()
}

fn dedup_ids(messages: &[ReceivedMessage]) -> Vec<&str> {
    messages.iter().map(|m| m.dedup_id.as_str()).collect()
}

pub async fn a_send_carries_the_versioned_message_in_the_order_s_group(h: Arc<dyn QueueHarness>) {
    let op = operation("contract-queue-body");
    send(h.as_ref(), &QueuedOperation::first(&op)).await;
    let got = h.receive(10).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let m = &got[0];
    assert_eq!(bodies(&got), [OperationMessage::for_operation(&op)]);
    let body: serde_json::Value = serde_json::from_str(&m.body).unwrap();
    assert_eq!(body["v"], OperationMessage::VERSION);
    for field in ["amount", "currency", "customer", "payment_method"] {
        assert!(body.get(field).is_none(), "no {field} on the queue: {body}");
    }
    assert_eq!(m.group_id, op.order_id.as_str());
    assert_eq!(m.dedup_id, op.operation_id.to_string());
    assert_eq!(m.receive_count, 1);
}

pub async fn a_re_send_of_the_first_message_is_delivered_once(h: Arc<dyn QueueHarness>) {
    let op = operation("contract-queue-dedup");
    // A checkout retried: the same message twice.
    send(h.as_ref(), &QueuedOperation::first(&op)).await;
    send(h.as_ref(), &QueuedOperation::first(&op)).await;
    let got = h.receive(10).await;
    assert_eq!(dedup_ids(&got), [op.operation_id.to_string()]);
    // Retried again while the charge function holds the first: still one message.
    send(h.as_ref(), &QueuedOperation::first(&op)).await;
    h.delete(&got[0].receipt_handle).await;
    assert_eq!(h.receive(10).await, [], "nothing left to deliver");
}

pub async fn a_redrive_has_a_fresh_dedup_id_and_is_never_swallowed(h: Arc<dyn QueueHarness>) {
    let op = operation("contract-queue-redrive");
    send(h.as_ref(), &QueuedOperation::first(&op)).await;
    send(h.as_ref(), &QueuedOperation::redrive(&op, 1)).await;
    // The same re-drive sent twice (a reconciler tick retried) is still one message.
    send(h.as_ref(), &QueuedOperation::redrive(&op, 1)).await;
    send(h.as_ref(), &QueuedOperation::redrive(&op, 2)).await;
    let got = h.receive(10).await;
    let id = op.operation_id;
    assert_eq!(
        dedup_ids(&got),
        [id.to_string(), format!("{id}:1"), format!("{id}:2")],
        "the first, then each re-drive once, in send order"
    );
    assert_eq!(bodies(&got), vec![OperationMessage::for_operation(&op); 3]);
}

pub async fn a_group_waits_for_its_message_in_flight_and_other_groups_do_not(
    h: Arc<dyn QueueHarness>,
) {
    let a = operation("contract-queue-group-a");
    let b = operation("contract-queue-group-b");
    send(h.as_ref(), &QueuedOperation::first(&a)).await;
    send(h.as_ref(), &QueuedOperation::first(&b)).await;
    send(h.as_ref(), &QueuedOperation::redrive(&a, 1)).await;
    let first = h.receive(1).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].group_id, a.order_id.as_str(), "the oldest message");
    // a's first is in flight: its re-drive waits, b's message does not.
    let next = h.receive(10).await;
    assert_eq!(
        next.iter().map(|m| m.group_id.as_str()).collect::<Vec<_>>(),
        [b.order_id.as_str()]
    );
    h.delete(&first[0].receipt_handle).await;
    let last = h.receive(10).await;
    assert_eq!(
        dedup_ids(&last),
        [format!("{}:1", a.operation_id)],
        "a's next once its first was deleted"
    );
}

pub async fn a_group_stays_blocked_while_any_of_its_messages_is_in_flight(
    h: Arc<dyn QueueHarness>,
) {
    let op = operation("contract-queue-group-any");
    send(h.as_ref(), &QueuedOperation::first(&op)).await;
    send(h.as_ref(), &QueuedOperation::redrive(&op, 1)).await;
    let both = h.receive(10).await;
    assert_eq!(both.len(), 2, "one batch holds both");
    // The first comes back at once, the second is still being handled: the group waits for the
    // second, so the first is not handed to another consumer meanwhile.
    h.visibility()
        .return_after(&both[0].receipt_handle, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(h.receive(10).await, [], "the second is in flight");
    h.delete(&both[1].receipt_handle).await;
    let again = h.receive(10).await;
    assert_eq!(dedup_ids(&again), [op.operation_id.to_string()]);
    assert_eq!(again[0].receive_count, 2);
}

pub async fn return_after_zero_makes_the_message_visible_at_once(h: Arc<dyn QueueHarness>) {
    let op = operation("contract-queue-return-now");
    send(h.as_ref(), &QueuedOperation::first(&op)).await;
    let first = h.receive(10).await;
    assert_eq!(first.len(), 1);
    assert_eq!(h.receive(10).await, [], "in flight");
    h.visibility()
        .return_after(&first[0].receipt_handle, Duration::ZERO)
        .await
        .unwrap();
    let again = h.receive(10).await;
    assert_eq!(again.len(), 1, "back at once");
    assert_eq!(again[0].message_id, first[0].message_id);
    assert_eq!(again[0].receive_count, 2);
}

pub async fn return_after_hides_the_message_and_its_group_for_the_delay(h: Arc<dyn QueueHarness>) {
    let op = operation("contract-queue-return-later");
    let other = operation("contract-queue-return-other");
    send(h.as_ref(), &QueuedOperation::first(&op)).await;
    send(h.as_ref(), &QueuedOperation::redrive(&op, 1)).await;
    send(h.as_ref(), &QueuedOperation::first(&other)).await;
    let first = h.receive(1).await;
    assert_eq!(first[0].dedup_id, op.operation_id.to_string());
    h.visibility()
        .return_after(&first[0].receipt_handle, Duration::from_secs(1))
        .await
        .unwrap();
    // Meanwhile neither it nor the re-drive behind it is delivered; the other order is.
    let meanwhile = h.receive(10).await;
    assert_eq!(
        meanwhile
            .iter()
            .map(|m| m.group_id.as_str())
            .collect::<Vec<_>>(),
        [other.order_id.as_str()]
    );
    h.wait(Duration::from_millis(1200)).await;
    let back = h.receive(10).await;
    assert_eq!(
        dedup_ids(&back),
        [
            op.operation_id.to_string(),
            format!("{}:1", op.operation_id)
        ],
        "back after its delay, still ahead of its group"
    );
    assert_eq!(back[0].message_id, first[0].message_id);
    assert_eq!(back[0].receive_count, 2);
}

pub async fn return_after_under_a_second_is_never_now(h: Arc<dyn QueueHarness>) {
    let op = operation("contract-queue-return-subsecond");
    send(h.as_ref(), &QueuedOperation::first(&op)).await;
    let first = h.receive(10).await;
    h.visibility()
        .return_after(&first[0].receipt_handle, Duration::from_millis(400))
        .await
        .unwrap();
    assert_eq!(h.receive(10).await, [], "400 ms is not now");
    h.wait(Duration::from_millis(1200)).await;
    let back = h.receive(10).await;
    assert_eq!(back.len(), 1, "back within the next whole second");
    assert_eq!(back[0].message_id, first[0].message_id);
}

/// One `#[tokio::test]` per contract case, for the queue built by `$make` (an async expression
/// returning `Arc<dyn QueueHarness>`).
#[macro_export]
macro_rules! queue_contract_tests {
    ($make:expr) => {
        $crate::contract_cases!(queue_contract, $make;
            a_send_carries_the_versioned_message_in_the_order_s_group,
            a_re_send_of_the_first_message_is_delivered_once,
            a_redrive_has_a_fresh_dedup_id_and_is_never_swallowed,
            a_group_waits_for_its_message_in_flight_and_other_groups_do_not,
            a_group_stays_blocked_while_any_of_its_messages_is_in_flight,
            return_after_zero_makes_the_message_visible_at_once,
            return_after_hides_the_message_and_its_group_for_the_delay,
            return_after_under_a_second_is_never_now,
        );
    };
}
