//! A Stripe event as the events function reads it: its id, type and the PaymentIntent it names.
//! What an event may then do to an operation is a rule of the core
//! ([`charge_core::event_plan`], re-exported here).

pub use charge_core::event_plan::{
    decide, is_final, needs_no_check, Action, EventIntent, EventMismatch, Ignored,
    SECOND_PAYMENT_INTENT,
};

use crate::domain::{OperationId, OrderId, PaymentIntentId};
use crate::outcome::PaymentIntentStatus;

use super::wire::{DataFields, EventBridgeEvent, EventFields, Shaped};

/// The event types the endpoint acts on (the ones to select in Stripe's dashboard).
pub const HANDLED_TYPES: &[&str] = &[
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "payment_intent.canceled",
    "payment_intent.processing",
    "payment_intent.requires_action",
];

/// A Stripe event, as far as the webhook reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeEvent {
    /// `evt_…`: the inbox key. Stripe re-sends the same id on every retry of one event.
    pub id: String,
    pub event_type: String,
    /// The PaymentIntent in `data.object`, for `payment_intent.*` events.
    pub intent: Option<EventIntent>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unreadable event: {0}")]
pub struct EventParseError(pub String);

/// The prefix of every Stripe partner event source on EventBridge.
pub const STRIPE_PARTNER_SOURCE_PREFIX: &str = "aws.partner/stripe.com/";

impl StripeEvent {
    /// Reads a (verified) body. Fields this code does not use are skipped unread
    /// ([`super::wire`]); a PaymentIntent event without a readable intent is an error.
    pub fn parse(body: &[u8]) -> Result<Self, EventParseError> {
        let fields: Shaped<EventFields> =
            serde_json::from_slice(body).map_err(|e| EventParseError(e.to_string()))?;
        Self::from_fields(fields)
    }

    /// Reads an EventBridge event from Stripe's partner event source. AWS authenticated the
    /// delivery; we still refuse one that is not from a Stripe source (or not from `source` when
    /// the deployment names it) or whose `detail-type` is not its event's type.
    pub fn from_eventbridge(
        envelope: EventBridgeEvent,
        source: Option<&str>,
    ) -> Result<Self, EventParseError> {
        if let Some(kind) = envelope.not_object {
            return Err(EventParseError(format!(
                "the event is {kind}, not an object"
            )));
        }
        let wire_source = envelope
            .source
            .required("source")
            .map_err(EventParseError)?;
        let detail_type = envelope
            .detail_type
            .required("detail-type")
            .map_err(EventParseError)?;
        let detail = envelope
            .detail
            .ok_or_else(|| EventParseError("missing field `detail`".into()))?;
        if !wire_source.starts_with(STRIPE_PARTNER_SOURCE_PREFIX) {
            return Err(EventParseError(format!(
                "source {wire_source:?} is not a Stripe partner event source"
            )));
        }
        if source.is_some_and(|want| want != wire_source) {
            return Err(EventParseError(format!(
                "source {wire_source:?} is not the configured Stripe event source"
            )));
        }
        let event =
            Self::from_fields(detail).map_err(|e| EventParseError(format!("detail: {}", e.0)))?;
        if detail_type != event.event_type {
            return Err(EventParseError(format!(
                "detail-type {detail_type:?} is not the event's type {:?}",
                event.event_type
            )));
        }
        Ok(event)
    }

    fn from_fields(wire: Shaped<EventFields>) -> Result<Self, EventParseError> {
        let wire = wire
            .into_object()
            .map_err(|kind| EventParseError(format!("the event is {kind}, not an object")))?;
        let id = wire.id.required("id").map_err(EventParseError)?;
        let event_type = wire.event_type.required("type").map_err(EventParseError)?;
        if !id.starts_with("evt_") || id.len() > 255 {
            return Err(EventParseError("id must be an evt_ id".into()));
        }
        let intent = if event_type.starts_with("payment_intent.") {
            Some(
                Self::intent(wire.data)
                    .map_err(|e| EventParseError(format!("data.object: {e}")))?,
            )
        } else {
            None
        };
        Ok(Self {
            id,
            event_type,
            intent,
        })
    }

    /// The PaymentIntent of a `payment_intent.*` event.
    fn intent(data: Option<Shaped<DataFields>>) -> Result<EventIntent, String> {
        let object = data
            .and_then(|d| d.into_object().ok())
            .and_then(|d| d.object)
            .ok_or("missing")?
            .into_object()
            .map_err(|kind| format!("{kind}, not an object"))?;
        let id = object.id.required("id")?;
        let id = PaymentIntentId::parse(&id).map_err(|e| format!("`id`: {e}"))?;
        let status = object.status.required("status")?;
        let (order_id, operation_id) = match object.metadata {
            None => (None, None),
            Some(meta) => {
                let meta = meta
                    .into_object()
                    .map_err(|kind| format!("`metadata` is {kind}, not an object"))?;
                (
                    meta.order_id.as_str().and_then(|v| OrderId::parse(v).ok()),
                    meta.operation_id
                        .as_str()
                        .and_then(|v| OperationId::parse(v).ok()),
                )
            }
        };
        Ok(EventIntent {
            id,
            status: PaymentIntentStatus::parse(&status),
            order_id,
            operation_id,
        })
    }

    pub fn is_handled(&self) -> bool {
        HANDLED_TYPES.contains(&self.event_type.as_str()) && self.intent.is_some()
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize as _;

    use super::*;

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

    /// Only the fields used are read: the rest of any shape is skipped; under a type we do not
    /// act on, even `data` is never required; a key given twice counts the last time.
    #[test]
    fn events_are_read_as_far_as_used() {
        let odd = [
            br#"{"id":"evt_4","type":"charge.refunded","data":"x"}"#.as_slice(),
            br#"{"id":"evt_4","type":"charge.refunded","data":{}}"#,
            br#"{"id":"evt_4","type":"charge.refunded","data":{"object":[1,{"a":null}]}}"#,
            br#"{"id":"evt_4","type":"charge.refunded"}"#,
        ];
        for body in odd {
            let ev = StripeEvent::parse(body).unwrap();
            assert!(!ev.is_handled(), "{}", String::from_utf8_lossy(body));
            assert_eq!(ev.intent, None);
        }
        let twice = br#"{"id":"evt_5","type":"payment_intent.succeeded","data":{"object":{
            "id":"pi_1","status":"processing","status":"succeeded","amount":100,"charges":{"data":[{"x":1}]},
            "metadata":{"order_id":"order-old","operation_id":"6f1c2a4e-8a3b-4c5d-9e0f-112233445566","order_id":"order-new","note":"\u00e9"}}}}"#;
        let pi = StripeEvent::parse(twice).unwrap().intent.unwrap();
        assert_eq!(pi.status, PaymentIntentStatus::Succeeded);
        assert_eq!(pi.order_id.unwrap().as_str(), "order-new");
        // A metadata value that is not a string is not ours; metadata that is not an object,
        // or a PaymentIntent that is not one, is unreadable.
        let number = br#"{"id":"evt_6","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","status":"succeeded","metadata":{"order_id":7}}}}"#;
        assert_eq!(
            StripeEvent::parse(number).unwrap().intent.unwrap().order_id,
            None
        );
        for (bad, says) in [
            (&br#"{"id":"evt_7","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","status":"succeeded","metadata":null}}}"#[..], "`metadata` is null"),
            (br#"{"id":"evt_7","type":"payment_intent.succeeded","data":{"object":"pi_1"}}"#, "a string, not an object"),
            (br#"{"id":"evt_7","type":"payment_intent.succeeded","data":{"object":{"id":7,"status":"succeeded"}}}"#, "`id` is a number"),
            (br#"{"id":"evt_7","type":"payment_intent.succeeded","data":{"object":{"id":"ch_1","status":"succeeded"}}}"#, "`id`"),
            (br#"{"id":"evt_7","type":"payment_intent.succeeded","data":{}}"#, "data.object: missing"),
            (br#"["evt_7"]"#, "an array, not an object"),
            (br#"{"id":null,"type":"payment_intent.succeeded"}"#, "`id` is null"),
        ] {
            let e = StripeEvent::parse(bad).unwrap_err();
            assert!(e.0.contains(says), "{}: {e}", String::from_utf8_lossy(bad));
        }
    }

    /// The same reader from bytes and from a parsed tree (as a test or a tool holds an event).
    #[test]
    fn an_eventbridge_event_reads_the_same_from_bytes_and_from_a_tree() {
        let detail = serde_json::json!({"id":"evt_8","type":"payment_intent.succeeded","data":{"object":{
            "id":"pi_8","status":"succeeded","metadata":{"order_id":"order-8","operation_id":"6f1c2a4e-8a3b-4c5d-9e0f-112233445566"}}}});
        let envelope = serde_json::json!({"version":"0","detail-type":"payment_intent.succeeded",
            "source":"aws.partner/stripe.com/ed_test_1","resources":[],"detail":detail});
        let from_bytes: EventBridgeEvent =
            serde_json::from_slice(&serde_json::to_vec(&envelope).unwrap()).unwrap();
        let from_tree = EventBridgeEvent::deserialize(&envelope).unwrap();
        let a = StripeEvent::from_eventbridge(from_bytes, None).unwrap();
        assert_eq!(a, StripeEvent::from_eventbridge(from_tree, None).unwrap());
        assert_eq!(a.intent.unwrap().order_id.unwrap().as_str(), "order-8");
        for (mut bad, says) in [
            (envelope.clone(), ""),
            (serde_json::json!("x"), "a string, not an object"),
            (
                serde_json::json!({"detail-type":"payment_intent.succeeded","source":"aws.partner/stripe.com/x"}),
                "missing field `detail`",
            ),
            (
                serde_json::json!({"detail-type":"payment_intent.succeeded","source":"aws.partner/stripe.com/x","detail":[]}),
                "detail: the event is an array",
            ),
            (
                serde_json::json!({"detail-type":7,"source":"aws.partner/stripe.com/x","detail":{}}),
                "`detail-type` is a number",
            ),
        ] {
            if says.is_empty() {
                bad["source"] = "aws.events".into();
                bad["detail-type"] = "payment_intent.canceled".into();
            }
            let read = EventBridgeEvent::deserialize(&bad).unwrap();
            let e = StripeEvent::from_eventbridge(read, None).unwrap_err();
            assert!(
                e.0.contains(if says.is_empty() {
                    "not a Stripe partner"
                } else {
                    says
                }),
                "{bad}: {e}"
            );
        }
    }
}
