//! The charge queue, the way back for a message refused at the rate limit, and the dead-letter
//! queue: what a charge message is, how it is deduplicated and grouped, and where poison goes.

use std::error::Error as StdError;

use async_trait::async_trait;
use charge_core::domain::{OperationId, OperationKind, OrderId, RefundId};
use charge_core::operation::{Operation, OperationKey};
use charge_core::reconcile_plan::QueueDepth;
use serde::{Deserialize, Serialize};

/// The body of a message of the charge queue. Versioned by kind; carries no amount and no card
/// data, only what identifies the operation, which the charge function reads back from the store:
/// version 1 a charge (`kind: "charge"`), version 2 a refund (`kind: "refund"`, with its
/// `refund_id`), version 3 a capture or a cancel of the order's authorization (`kind: "capture"`,
/// `"cancel"`), version 4 a capture after the first (`kind: "capture"` with its `capture_no`, 2
/// onwards: the record `capture#<n>`; a release that knows only version 3 would claim the first
/// capture's record with it, so it is a version of its own). A release that does not know a version parks its message as
/// `unsupported_version` on the dead-letter queue, and the reconciler re-sends the operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "MessageBody", into = "MessageBody")]
pub struct OperationMessage {
    pub v: u32,
    pub operation_id: OperationId,
    pub order_id: OrderId,
    pub kind: OperationKind,
}

/// The message as it is written on the queue.
#[derive(Serialize, Deserialize)]
struct MessageBody {
    v: u32,
    operation_id: OperationId,
    order_id: OrderId,
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refund_id: Option<RefundId>,
    /// A capture's number, from 2 (absent: the first capture, or another kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    capture_no: Option<u32>,
    /// A charge attempt's number, from 2 (absent: the order's first attempt, or another kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    attempt: Option<u32>,
}

impl TryFrom<MessageBody> for OperationMessage {
    type Error = String;

    fn try_from(b: MessageBody) -> Result<Self, String> {
        if let Some(n) = b.attempt {
            return match (b.kind.as_str(), b.refund_id, b.capture_no) {
                ("charge", None, None) if n > 1 => Ok(Self {
                    v: b.v,
                    operation_id: b.operation_id,
                    order_id: b.order_id,
                    kind: OperationKind::charge_attempt(n).map_err(|e| e.to_string())?,
                }),
                (kind, _, _) => Err(format!("kind {kind:?} with attempt {n}")),
            };
        }
        let kind = match (b.kind.as_str(), b.refund_id, b.capture_no) {
            ("charge", None, None) => OperationKind::FIRST_CHARGE,
            ("refund", Some(id), None) => OperationKind::Refund(id),
            ("capture", None, None) => OperationKind::FIRST_CAPTURE,
            ("capture", None, Some(n)) if n > 1 => {
                OperationKind::capture_number(n).map_err(|e| e.to_string())?
            }
            ("cancel", None, None) => OperationKind::Cancel,
            (kind, _, Some(n)) => return Err(format!("kind {kind:?} with capture_no {n}")),
            (kind, id, None) => {
                return Err(format!(
                    "kind {kind:?} with{} a refund_id",
                    if id.is_some() { "" } else { "out" }
                ))
            }
        };
        Ok(Self {
            v: b.v,
            operation_id: b.operation_id,
            order_id: b.order_id,
            kind,
        })
    }
}

impl From<OperationMessage> for MessageBody {
    fn from(m: OperationMessage) -> Self {
        Self {
            v: m.v,
            operation_id: m.operation_id,
            order_id: m.order_id,
            kind: m.kind.as_str().to_owned(),
            refund_id: m.kind.refund_id().cloned(),
            capture_no: m.kind.capture_no().filter(|n| *n > 1),
            attempt: m.kind.attempt_no().filter(|n| *n > 1),
        }
    }
}

impl OperationMessage {
    /// A charge's message version.
    pub const VERSION: u32 = 1;
    /// A refund's message version.
    pub const REFUND_VERSION: u32 = 2;
    /// A capture's or a cancel's message version.
    pub const TAKE_VERSION: u32 = 3;
    /// A capture's message after the first capture of its order.
    pub const CAPTURE_AGAIN_VERSION: u32 = 4;
    /// A charge attempt's message after the order's first attempt: a release before attempts
    /// does not read it (it would charge the first attempt's record), so it parks on its
    /// dead-letter queue while the unknown index drives the attempt.
    pub const CHARGE_AGAIN_VERSION: u32 = 5;
    /// A dispute never has a message (it is read at Stripe, never created there): a message
    /// naming one is a writer's bug, written with a version no release reads, so it parks on
    /// the dead-letter queue (which pages) instead of driving anything.
    pub const NO_DISPUTE_MESSAGE: u32 = 0;

    /// The version a message of `kind` is written with.
    pub fn version_of(kind: &OperationKind) -> u32 {
        match kind {
            OperationKind::Charge(n) if *n > 1 => Self::CHARGE_AGAIN_VERSION,
            OperationKind::Charge(_) => Self::VERSION,
            OperationKind::Refund(_) => Self::REFUND_VERSION,
            OperationKind::Capture(n) if *n > 1 => Self::CAPTURE_AGAIN_VERSION,
            OperationKind::Capture(_) | OperationKind::Cancel => Self::TAKE_VERSION,
            OperationKind::Dispute(_) => Self::NO_DISPUTE_MESSAGE,
        }
    }

    /// Whether `v` is a version this release reads.
    pub fn known_version(v: u64) -> bool {
        [
            Self::VERSION,
            Self::REFUND_VERSION,
            Self::TAKE_VERSION,
            Self::CAPTURE_AGAIN_VERSION,
            Self::CHARGE_AGAIN_VERSION,
        ]
        .iter()
        .any(|known| v == u64::from(*known))
    }

    pub fn for_operation(op: &Operation) -> Self {
        Self {
            v: Self::version_of(&op.kind),
            operation_id: op.operation_id,
            order_id: op.order_id.clone(),
            kind: op.kind.clone(),
        }
    }

    pub fn key(&self) -> OperationKey {
        OperationKey {
            order_id: self.order_id.clone(),
            kind: self.kind.clone(),
        }
    }
}

/// A message as it goes onto the FIFO queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedOperation {
    pub message: OperationMessage,
    /// `operation_id`, or `operation_id:<n>` for the n-th deliberate re-drive.
    pub dedup_id: String,
    /// `order_id`: one order's messages stay in order, unrelated orders never block each other.
    pub group_id: String,
}

impl QueuedOperation {
    /// The first send for an operation (and any re-send of it within the dedup window).
    pub fn first(op: &Operation) -> Self {
        Self {
            message: OperationMessage::for_operation(op),
            dedup_id: op.operation_id.to_string(),
            group_id: op.order_id.as_str().to_owned(),
        }
    }

    /// The n-th deliberate re-drive: a fresh dedup id so FIFO dedup does not swallow it.
    pub fn redrive(op: &Operation, n: u32) -> Self {
        Self {
            dedup_id: format!("{}:{n}", op.operation_id),
            ..Self::first(op)
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("charge queue: {message}")]
pub struct QueueError {
    pub message: String,
    #[source]
    pub source: Option<Box<dyn StdError + Send + Sync>>,
}

impl QueueError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    pub fn with_source(
        message: impl Into<String>,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        Self {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

/// The queue that carries operations to the charge function (SQS FIFO in production).
#[async_trait]
pub trait OperationQueue: Send + Sync {
    async fn send(&self, charge: &QueuedOperation) -> Result<(), QueueError>;

    /// What the queue holds, visible and in flight, as it approximates it (SQS's
    /// `ApproximateNumberOfMessages` and `…NotVisible`); `None` from a queue that cannot say,
    /// which the reconciler reads as "not behind".
    async fn depth(&self) -> Result<Option<QueueDepth>, QueueError> {
        Ok(None)
    }
}

/// A message the charge function cannot act on, whatever the number of retries (unreadable,
/// unknown version, no such operation), copied to the dead-letter queue with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The body exactly as received.
    pub body: String,
    /// The source queue's message id (also the DLQ's dedup id).
    pub message_id: String,
    /// The source message group (`None` if the record had none).
    pub group_id: Option<String>,
    /// Why it can never succeed (`unparseable`, `unsupported_version`, `no_such_operation`).
    pub reason: String,
    /// The detail, for a person.
    pub detail: String,
}

/// Bringing a received message back sooner than the queue's visibility timeout (SQS
/// `ChangeMessageVisibility` on its receipt handle): a message Stripe's rate limit refused comes
/// back in seconds, not in the 30 minutes that protect a running charge.
#[async_trait]
pub trait MessageVisibility: Send + Sync {
    /// The message becomes visible again `delay` from now.
    async fn return_after(
        &self,
        receipt_handle: &str,
        delay: std::time::Duration,
    ) -> Result<(), QueueError>;
}

/// Where poison messages go (the charge queue's DLQ in production).
#[async_trait]
pub trait DeadLetterQueue: Send + Sync {
    async fn park(&self, letter: &DeadLetter) -> Result<(), QueueError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A later capture's message names its number and is a version of its own; the first
    /// capture's is written as every release since captures wrote it; a number on another kind,
    /// or a first capture numbered, is unreadable.
    #[test]
    fn a_later_capture_s_message_names_its_number() {
        let later = r#"{"v":4,"operation_id":"7f0c7a0e-1111-4a4a-8b8b-000000000002","order_id":"ord-1","kind":"capture","capture_no":2}"#;
        let m: OperationMessage = serde_json::from_str(later).unwrap();
        assert_eq!(m.kind, OperationKind::Capture(2));
        assert_eq!(OperationMessage::version_of(&m.kind), m.v);
        assert_eq!(serde_json::to_string(&m).unwrap(), later);
        assert_eq!(m.key().kind.sort_key(), "capture#2");

        let first = r#"{"v":3,"operation_id":"7f0c7a0e-1111-4a4a-8b8b-000000000002","order_id":"ord-1","kind":"capture"}"#;
        let m: OperationMessage = serde_json::from_str(first).unwrap();
        assert_eq!((m.kind.clone(), m.v), (OperationKind::FIRST_CAPTURE, 3));
        assert_eq!(serde_json::to_string(&m).unwrap(), first);

        for bad in [
            r#"{"v":4,"operation_id":"7f0c7a0e-1111-4a4a-8b8b-000000000002","order_id":"ord-1","kind":"cancel","capture_no":2}"#,
            r#"{"v":4,"operation_id":"7f0c7a0e-1111-4a4a-8b8b-000000000002","order_id":"ord-1","kind":"capture","capture_no":1}"#,
            r#"{"v":4,"operation_id":"7f0c7a0e-1111-4a4a-8b8b-000000000002","order_id":"ord-1","kind":"capture","capture_no":11}"#,
        ] {
            assert!(
                serde_json::from_str::<OperationMessage>(bad).is_err(),
                "{bad}"
            );
        }
    }

    /// A later charge attempt's message names its number and is a version of its own (one a
    /// release before attempts parks rather than charging the first attempt's record); the
    /// first attempt's is written as every release wrote it; an attempt number on another kind,
    /// or a first attempt numbered, is unreadable.
    #[test]
    fn a_later_attempt_s_message_names_its_number() {
        let later = r#"{"v":5,"operation_id":"7f0c7a0e-1111-4a4a-8b8b-000000000002","order_id":"ord-1","kind":"charge","attempt":2}"#;
        let m: OperationMessage = serde_json::from_str(later).unwrap();
        assert_eq!(m.kind, OperationKind::Charge(2));
        assert_eq!(OperationMessage::version_of(&m.kind), m.v);
        assert!(OperationMessage::known_version(5));
        assert_eq!(serde_json::to_string(&m).unwrap(), later);
        assert_eq!(m.key().kind.sort_key(), "charge#2");

        let first = r#"{"v":1,"operation_id":"7f0c7a0e-1111-4a4a-8b8b-000000000002","order_id":"ord-1","kind":"charge"}"#;
        let m: OperationMessage = serde_json::from_str(first).unwrap();
        assert_eq!((m.kind.clone(), m.v), (OperationKind::FIRST_CHARGE, 1));
        assert_eq!(serde_json::to_string(&m).unwrap(), first);

        for bad in [
            r#"{"v":5,"operation_id":"7f0c7a0e-1111-4a4a-8b8b-000000000002","order_id":"ord-1","kind":"refund","refund_id":"r1","attempt":2}"#,
            r#"{"v":5,"operation_id":"7f0c7a0e-1111-4a4a-8b8b-000000000002","order_id":"ord-1","kind":"charge","attempt":1}"#,
            r#"{"v":5,"operation_id":"7f0c7a0e-1111-4a4a-8b8b-000000000002","order_id":"ord-1","kind":"charge","attempt":21}"#,
            r#"{"v":5,"operation_id":"7f0c7a0e-1111-4a4a-8b8b-000000000002","order_id":"ord-1","kind":"capture","capture_no":2,"attempt":2}"#,
        ] {
            assert!(
                serde_json::from_str::<OperationMessage>(bad).is_err(),
                "{bad}"
            );
        }
    }
}
