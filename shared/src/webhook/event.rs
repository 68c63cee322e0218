//! What a Stripe event says about an operation, and what the webhook may do about it: a pure
//! function of (operation record, PaymentIntent state, whether that state is fresh), so every case
//! is a line of a table test.
//!
//! The webhook only ever *settles*: it moves an unsettled operation through the same transitions
//! the executor records ([`crate::outcome::outcome_for`] decides what a status means), never
//! creates or confirms anything, and never touches a settled record.

use serde::Deserialize;

use crate::domain::{OperationId, OrderId, PaymentIntentId};
use crate::operation::{Operation, OperationStatus};
use crate::outcome::{outcome_for, PaymentIntentStatus};

/// The event types the endpoint acts on (the ones to select in Stripe's dashboard).
pub const HANDLED_TYPES: &[&str] = &[
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "payment_intent.canceled",
    "payment_intent.processing",
    "payment_intent.requires_action",
];

/// The review reason for a succeeded PaymentIntent other than the one recorded: a suspected
/// double charge.
pub const SECOND_PAYMENT_INTENT: &str = "second_payment_intent";

/// A Stripe event, as far as the webhook reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeEvent {
    /// `evt_…`: the inbox key. Stripe re-sends the same id on every retry of one event.
    pub id: String,
    pub event_type: String,
    /// The PaymentIntent in `data.object`, for `payment_intent.*` events.
    pub intent: Option<EventIntent>,
}

/// The PaymentIntent an event carries (its state when the event was created).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventIntent {
    pub id: PaymentIntentId,
    pub status: PaymentIntentStatus,
    /// `metadata.order_id` and `metadata.operation_id`, set by our create. Absent on
    /// PaymentIntents this system did not create.
    pub order_id: Option<OrderId>,
    pub operation_id: Option<OperationId>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unreadable event: {0}")]
pub struct EventParseError(pub String);

#[derive(Deserialize)]
struct WireEvent {
    id: String,
    #[serde(rename = "type")]
    event_type: String,
    #[serde(default)]
    data: Option<WireData>,
}

#[derive(Deserialize)]
struct WireData {
    object: serde_json::Value,
}

#[derive(Deserialize)]
struct WireIntent {
    id: PaymentIntentId,
    status: String,
    #[serde(default)]
    metadata: std::collections::HashMap<String, serde_json::Value>,
}

impl StripeEvent {
    /// Reads a (verified) body. Fields this code does not use are ignored; a PaymentIntent event
    /// without a readable intent is an error.
    pub fn parse(body: &[u8]) -> Result<Self, EventParseError> {
        let wire: WireEvent =
            serde_json::from_slice(body).map_err(|e| EventParseError(e.to_string()))?;
        if !wire.id.starts_with("evt_") || wire.id.len() > 255 {
            return Err(EventParseError("id must be an evt_ id".into()));
        }
        let intent = if wire.event_type.starts_with("payment_intent.") {
            let object = wire
                .data
                .ok_or_else(|| EventParseError("no data.object".into()))?
                .object;
            let pi: WireIntent = serde_json::from_value(object)
                .map_err(|e| EventParseError(format!("data.object: {e}")))?;
            let meta = |k: &str| pi.metadata.get(k).and_then(|v| v.as_str());
            Some(EventIntent {
                status: PaymentIntentStatus::parse(&pi.status),
                order_id: meta("order_id").and_then(|v| OrderId::parse(v).ok()),
                operation_id: meta("operation_id").and_then(|v| OperationId::parse(v).ok()),
                id: pi.id,
            })
        } else {
            None
        };
        Ok(Self {
            id: wire.id,
            event_type: wire.event_type,
            intent,
        })
    }

    pub fn is_handled(&self) -> bool {
        HANDLED_TYPES.contains(&self.event_type.as_str()) && self.intent.is_some()
    }
}

/// Why an event changes nothing (the `Reason` of the `WebhookIgnored` metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ignored {
    /// A type the endpoint does not act on.
    UnhandledType,
    /// No `metadata.order_id` / `operation_id`: not one of ours.
    NotOurs,
    /// No operation with that key and operation id.
    UnknownOperation,
    /// Already settled the same way: the duplicate or late event of an outcome we know.
    AlreadySettled,
    /// Unsettled, and the event says nothing we have not recorded.
    NothingNew,
    /// A person owns the operation (in review).
    InReview,
    /// A non-succeeded state of a PaymentIntent other than the recorded one.
    OtherIntent,
    /// The same Stripe event id was processed before.
    Duplicate,
    /// The PaymentIntent could not be read back (a definitive refusal): the reconciler settles it.
    RetrieveRefused,
}

impl Ignored {
    pub fn as_str(&self) -> &'static str {
        match self {
            Ignored::UnhandledType => "unhandled_type",
            Ignored::NotOurs => "not_ours",
            Ignored::UnknownOperation => "unknown_operation",
            Ignored::AlreadySettled => "already_settled",
            Ignored::NothingNew => "nothing_new",
            Ignored::InReview => "in_review",
            Ignored::OtherIntent => "other_intent",
            Ignored::Duplicate => "duplicate",
            Ignored::RetrieveRefused => "retrieve_refused",
        }
    }
}

/// What the webhook does with one event for one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Ignore(Ignored),
    /// The event's state may be stale (a state a PaymentIntent can leave): read the
    /// PaymentIntent and decide again on its current state.
    Retrieve(PaymentIntentId),
    /// Settle the unsettled operation (`Succeeded` or `Failed`) with this PaymentIntent.
    Settle {
        status: OperationStatus,
        external_id: PaymentIntentId,
    },
    /// Still unknown; record the PaymentIntent id so the next look is a retrieve.
    RecordIntent {
        external_id: PaymentIntentId,
    },
    /// A succeeded PaymentIntent other than the recorded one, on an unsettled operation:
    /// flag it for review ([`SECOND_PAYMENT_INTENT`]).
    Review {
        external_id: PaymentIntentId,
    },
    /// The same on a settled record (or a settled record that Stripe contradicts): settled is
    /// final, so nothing is written; the caller pages (`WebhookSettledConflict`).
    PageSettled {
        reason: &'static str,
    },
}

/// True for the states a PaymentIntent never leaves (what an event says about them is current).
fn is_final(status: &PaymentIntentStatus) -> bool {
    matches!(
        status,
        PaymentIntentStatus::Succeeded | PaymentIntentStatus::Canceled
    )
}

/// Decides, for the operation `op` as read, what the PaymentIntent (`pi_id` in `status`) means.
/// `fresh` is true when the status was just retrieved from Stripe (not taken from the event).
pub fn decide(
    op: &Operation,
    pi_id: &PaymentIntentId,
    status: &PaymentIntentStatus,
    fresh: bool,
) -> Action {
    if op.review.is_some() {
        return Action::Ignore(Ignored::InReview);
    }
    if !fresh && !is_final(status) {
        // Events are not ordered: a `processing` or `payment_failed` may arrive after the
        // intent moved on. Only the intent itself knows its latest state.
        return Action::Retrieve(pi_id.clone());
    }
    let outcome = outcome_for(status);
    let other_intent = op.external_id.as_ref().is_some_and(|id| id != pi_id);
    if other_intent {
        return match (outcome, op.status.is_settled()) {
            (OperationStatus::Succeeded, true) => Action::PageSettled {
                reason: SECOND_PAYMENT_INTENT,
            },
            (OperationStatus::Succeeded, false) => Action::Review {
                external_id: pi_id.clone(),
            },
            _ => Action::Ignore(Ignored::OtherIntent),
        };
    }
    if op.status.is_settled() {
        return if outcome == OperationStatus::Succeeded && op.status == OperationStatus::Failed {
            // We recorded failed; Stripe says this intent took the money.
            Action::PageSettled {
                reason: "settled_failed_but_succeeded",
            }
        } else {
            Action::Ignore(Ignored::AlreadySettled)
        };
    }
    match outcome {
        OperationStatus::Succeeded | OperationStatus::Failed => Action::Settle {
            status: outcome,
            external_id: pi_id.clone(),
        },
        _ if op.external_id.as_deref() == Some(pi_id) => Action::Ignore(Ignored::NothingNew),
        _ => Action::RecordIntent {
            external_id: pi_id.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pi(id: &str) -> PaymentIntentId {
        PaymentIntentId::parse(id).unwrap()
    }
    use crate::operation::Review;
    use crate::testing;
    use crate::time::Timestamp;

    fn op(status: OperationStatus, external_id: Option<&str>) -> Operation {
        let mut op = testing::order("order-1")
            .requested_by("webhook-tests")
            .at(Timestamp::from_millis(0))
            .status(status)
            .build();
        op.external_id = external_id.map(pi);
        op
    }

    #[test]
    fn table() {
        use OperationStatus::*;
        use PaymentIntentStatus as P;
        let settle = |status| Action::Settle {
            status,
            external_id: pi("pi_a"),
        };
        let cases = [
            // (name, op status, recorded id, event status, fresh, want)
            (
                "succeeded settles unknown",
                Unknown,
                None,
                P::Succeeded,
                false,
                settle(Succeeded),
            ),
            (
                "succeeded settles pending",
                Pending,
                None,
                P::Succeeded,
                false,
                settle(Succeeded),
            ),
            (
                "same id succeeded",
                Unknown,
                Some("pi_a"),
                P::Succeeded,
                false,
                settle(Succeeded),
            ),
            (
                "canceled fails",
                Unknown,
                None,
                P::Canceled,
                false,
                settle(Failed),
            ),
            (
                "payment_failed is retrieved first",
                Unknown,
                None,
                P::RequiresPaymentMethod,
                false,
                Action::Retrieve(pi("pi_a")),
            ),
            (
                "payment_failed, fresh, fails",
                Unknown,
                None,
                P::RequiresPaymentMethod,
                true,
                settle(Failed),
            ),
            (
                "processing is retrieved first",
                Unknown,
                None,
                P::Processing,
                false,
                Action::Retrieve(pi("pi_a")),
            ),
            (
                "processing, fresh, records the id",
                Unknown,
                None,
                P::Processing,
                true,
                Action::RecordIntent {
                    external_id: pi("pi_a"),
                },
            ),
            (
                "requires_action, fresh, records the id",
                Pending,
                None,
                P::RequiresAction,
                true,
                Action::RecordIntent {
                    external_id: pi("pi_a"),
                },
            ),
            (
                "processing, id known",
                Unknown,
                Some("pi_a"),
                P::Processing,
                true,
                Action::Ignore(Ignored::NothingNew),
            ),
            (
                "fresh succeeded after a stale processing",
                Unknown,
                Some("pi_a"),
                P::Succeeded,
                true,
                settle(Succeeded),
            ),
            (
                "processing after succeeded",
                Succeeded,
                Some("pi_a"),
                P::Processing,
                true,
                Action::Ignore(Ignored::AlreadySettled),
            ),
            (
                "failed after succeeded",
                Succeeded,
                Some("pi_a"),
                P::Canceled,
                false,
                Action::Ignore(Ignored::AlreadySettled),
            ),
            (
                "succeeded twice",
                Succeeded,
                Some("pi_a"),
                P::Succeeded,
                false,
                Action::Ignore(Ignored::AlreadySettled),
            ),
            (
                "second intent, unsettled",
                Unknown,
                Some("pi_b"),
                P::Succeeded,
                false,
                Action::Review {
                    external_id: pi("pi_a"),
                },
            ),
            (
                "second intent, settled",
                Succeeded,
                Some("pi_b"),
                P::Succeeded,
                false,
                Action::PageSettled {
                    reason: SECOND_PAYMENT_INTENT,
                },
            ),
            (
                "other intent failed",
                Unknown,
                Some("pi_b"),
                P::Canceled,
                false,
                Action::Ignore(Ignored::OtherIntent),
            ),
            (
                "failed but stripe says succeeded",
                Failed,
                None,
                P::Succeeded,
                false,
                Action::PageSettled {
                    reason: "settled_failed_but_succeeded",
                },
            ),
        ];
        for (name, status, recorded, event, fresh, want) in cases {
            let op = op(status, recorded);
            assert_eq!(decide(&op, &pi("pi_a"), &event, fresh), want, "{name}");
        }
    }

    #[test]
    fn review_is_left_to_a_person() {
        let mut op = op(OperationStatus::Unknown, None);
        op.review = Some(Review {
            reason: "stuck_processing".into(),
            flagged_at: Timestamp::from_millis(1),
        });
        assert_eq!(
            decide(&op, &pi("pi_a"), &PaymentIntentStatus::Succeeded, true),
            Action::Ignore(Ignored::InReview)
        );
    }

    #[test]
    fn parse_events() {
        let body = br#"{"id":"evt_1","object":"event","type":"payment_intent.succeeded",
            "data":{"object":{"id":"pi_1","object":"payment_intent","status":"succeeded",
            "metadata":{"order_id":"order-1","operation_id":"6f1c2a4e-8a3b-4c5d-9e0f-112233445566"}}}}"#;
        let ev = StripeEvent::parse(body).unwrap();
        assert!(ev.is_handled());
        let pi = ev.intent.unwrap();
        assert_eq!(pi.id, "pi_1");
        assert_eq!(pi.status, PaymentIntentStatus::Succeeded);
        assert_eq!(pi.order_id.unwrap().as_str(), "order-1");
        assert!(pi.operation_id.is_some());

        let other =
            StripeEvent::parse(br#"{"id":"evt_2","type":"charge.refunded","data":{"object":{}}}"#)
                .unwrap();
        assert!(!other.is_handled());
        let foreign = StripeEvent::parse(br#"{"id":"evt_3","type":"payment_intent.succeeded","data":{"object":{"id":"pi_9","status":"succeeded"}}}"#).unwrap();
        assert_eq!(foreign.intent.unwrap().order_id, None);

        for bad in [
            &b"not json"[..],
            br#"{"type":"payment_intent.succeeded"}"#,
            br#"{"id":"x_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","status":"succeeded"}}}"#,
            br#"{"id":"evt_1","type":"payment_intent.succeeded"}"#,
            br#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"status":"succeeded"}}}"#,
        ] {
            assert!(StripeEvent::parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
