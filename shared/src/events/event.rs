//! A Stripe event as the events function reads it: its id, type and the PaymentIntent or the
//! refund it names. What an event may then do to an operation is a rule of the core
//! ([`charge_core::charge::event_plan`], and [`charge_core::refund::event_plan`] for a refund).

use charge_core::charge::event_plan::EventIntent;
use charge_core::domain::{
    DisputeId, OperationId, OperationKind, OrderId, PaymentIntentId, StripeRefundId,
};
use charge_core::outcome::PaymentIntentStatus;
use charge_core::refund::event_plan::EventRefund;
use charge_core::refund::RefundStatus;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// The event types the endpoint acts on (the ones to select in Stripe's dashboard).
pub const HANDLED_TYPES: &[&str] = &[
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "payment_intent.canceled",
    "payment_intent.processing",
    "payment_intent.requires_action",
    "payment_intent.amount_capturable_updated",
    CHARGE_CAPTURED,
    "refund.created",
    "refund.updated",
    "refund.failed",
    "charge.refund.updated",
    "charge.dispute.created",
    "charge.dispute.updated",
    "charge.dispute.closed",
    "charge.dispute.funds_withdrawn",
    "charge.dispute.funds_reinstated",
];

/// An authorization's capture, told of its charge (`data.object` is the charge): read as a hint
/// that its PaymentIntent (`payment_intent`) succeeded.
pub const CHARGE_CAPTURED: &str = "charge.captured";

/// The event types whose `data.object` is a refund (`charge.refund.updated` too: its object is
/// the refund, not the charge).
fn names_a_refund(event_type: &str) -> bool {
    event_type.starts_with("refund.") || event_type == "charge.refund.updated"
}

/// The event types whose `data.object` is a dispute.
fn names_a_dispute(event_type: &str) -> bool {
    event_type.starts_with("charge.dispute.")
}

/// A Stripe event, as far as the webhook reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeEvent {
    /// `evt_…`: the inbox key. Stripe re-sends the same id on every retry of one event.
    pub id: String,
    pub event_type: String,
    /// The PaymentIntent in `data.object`, for `payment_intent.*` events.
    pub intent: Option<EventIntent>,
    /// The refund in `data.object`, for `refund.*` and `charge.refund.updated` events.
    pub refund: Option<EventRefund>,
    /// The dispute in `data.object`, for `charge.dispute.*` events: its id only. Everything
    /// else it claims is a hint never read: the dispute is retrieved at Stripe.
    pub dispute: Option<DisputeId>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unreadable event: {0}")]
pub struct EventParseError(pub String);

/// The prefix of every Stripe partner event source on EventBridge.
pub const STRIPE_PARTNER_SOURCE_PREFIX: &str = "aws.partner/stripe.com/";

/// An EventBridge event as the runtime hands it to the events function: its JSON text, read by
/// [`StripeEvent::from_eventbridge`]. Any JSON value reads as one, so an event of the wrong shape
/// gets the function's own `unreadable` answer (its metric and log line) instead of failing in
/// the runtime. The default, `{}`, is refused as unreadable.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct EventBridgeEvent(Box<RawValue>);

impl Default for EventBridgeEvent {
    fn default() -> Self {
        Self(RawValue::from_string("{}".to_owned()).expect("`{}` is JSON"))
    }
}

impl From<Box<RawValue>> for EventBridgeEvent {
    fn from(json: Box<RawValue>) -> Self {
        Self(json)
    }
}

/// An EventBridge event from a Stripe event destination, as far as it is read: the Stripe event
/// is its `detail`, exactly what a webhook body carries.
#[derive(Deserialize)]
struct Envelope<T> {
    source: String,
    #[serde(rename = "detail-type")]
    detail_type: String,
    detail: T,
}

/// What every Stripe event has. Its `data` is skipped here and read ([`IntentEvent`]) only for a
/// `payment_intent.*` event: an event of a type we do not act on is acknowledged whatever its
/// `data` holds.
#[derive(Deserialize)]
struct EventHead {
    id: String,
    #[serde(rename = "type")]
    event_type: String,
}

/// A `payment_intent.*` or refund event, as far as its object (`Intent`, `Refund`).
#[derive(Deserialize)]
struct ObjectEvent<T> {
    data: ObjectData<T>,
}

#[derive(Deserialize)]
struct ObjectData<T> {
    object: T,
}

/// A refund event's refund, as far as it is read.
#[derive(Deserialize)]
struct Refund {
    id: StripeRefundId,
    /// Nullable in Stripe's reference: absent or `null` claims no status (read as the
    /// gateway reads it, `Other`); the event is still a hint worth a retrieve.
    #[serde(default)]
    status: Option<String>,
    /// Absent: none. `null`, or anything but an object, makes the event unreadable.
    #[serde(default)]
    metadata: Metadata,
}

/// A dispute event's dispute, as far as it is read: its id.
#[derive(Deserialize)]
struct Dispute {
    id: DisputeId,
}

/// A `charge.captured` event's charge, as far as it is read: its PaymentIntent and metadata.
/// `payment_intent` is absent or `null` on a charge made without one (another integration's
/// legacy Charges API call): not ours, acknowledged, never an unreadable event that Stripe would
/// retry into the events DLQ.
#[derive(Deserialize)]
struct CapturedCharge {
    #[serde(default)]
    payment_intent: Option<PaymentIntentId>,
    #[serde(default)]
    metadata: Metadata,
}

impl CapturedCharge {
    /// The charge's intent, claimed captured (`succeeded`); checked at Stripe like any claim.
    /// None for a charge without a PaymentIntent.
    fn intent(self) -> Option<Intent> {
        Some(Intent {
            id: self.payment_intent?,
            status: "succeeded".to_owned(),
            metadata: self.metadata,
        })
    }
}

#[derive(Deserialize)]
struct Intent {
    id: PaymentIntentId,
    status: String,
    /// Absent: none. `null`, or anything but an object, makes the event unreadable.
    #[serde(default)]
    metadata: Metadata,
}

/// The keys our create sets (`attempt` only on a later charge attempt's intent); the others are
/// skipped unread. A value that is not a string is not ours.
#[derive(Default, Deserialize)]
struct Metadata {
    order_id: Option<Value>,
    operation_id: Option<Value>,
    /// A later charge attempt's number (`"2"`); absent on a first attempt's intent.
    #[serde(default)]
    attempt: Option<Value>,
}

impl StripeEvent {
    /// Reads a (verified) body: its `id` and `type`, and for a `payment_intent.*` event the
    /// PaymentIntent in `data.object` (an event without a readable one is an error). Fields this
    /// code does not use are skipped unread.
    pub fn parse(body: &[u8]) -> Result<Self, EventParseError> {
        let head: EventHead = from_json(body)?;
        let captured = head.event_type == CHARGE_CAPTURED;
        Self::from_head(
            head,
            "",
            || match captured {
                true => {
                    from_json::<ObjectEvent<CapturedCharge>>(body).map(|e| e.data.object.intent())
                }
                false => from_json::<ObjectEvent<Intent>>(body).map(|e| Some(e.data.object)),
            },
            || from_json::<ObjectEvent<Refund>>(body).map(|e| e.data.object),
            || from_json::<ObjectEvent<Dispute>>(body).map(|e| e.data.object.id),
        )
    }

    /// Reads an EventBridge event from Stripe's partner event source. AWS authenticated the
    /// delivery; we still refuse one that is not from a Stripe source (or not from `source` when
    /// the deployment names it) or whose `detail-type` is not its event's type.
    pub fn from_eventbridge(
        envelope: &EventBridgeEvent,
        source: Option<&str>,
    ) -> Result<Self, EventParseError> {
        let json = envelope.0.get().as_bytes();
        let Envelope {
            source: wire_source,
            detail_type,
            detail,
        } = from_json::<Envelope<EventHead>>(json)?;
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
        let captured = detail.event_type == CHARGE_CAPTURED;
        let event = Self::from_head(
            detail,
            "detail.",
            || match captured {
                true => from_json::<Envelope<ObjectEvent<CapturedCharge>>>(json)
                    .map(|e| e.detail.data.object.intent()),
                false => from_json::<Envelope<ObjectEvent<Intent>>>(json)
                    .map(|e| Some(e.detail.data.object)),
            },
            || from_json::<Envelope<ObjectEvent<Refund>>>(json).map(|e| e.detail.data.object),
            || from_json::<Envelope<ObjectEvent<Dispute>>>(json).map(|e| e.detail.data.object.id),
        )?;
        if detail_type != event.event_type {
            return Err(EventParseError(format!(
                "detail-type {detail_type:?} is not the event's type {:?}",
                event.event_type
            )));
        }
        Ok(event)
    }

    /// The event with `head`'s id and type (`at`: where the event is in its JSON, for an error),
    /// and for a `payment_intent.*` event the PaymentIntent that `intent` reads, for a refund
    /// event the refund that `refund` reads.
    fn from_head(
        head: EventHead,
        at: &str,
        intent: impl FnOnce() -> Result<Option<Intent>, EventParseError>,
        refund: impl FnOnce() -> Result<Refund, EventParseError>,
        dispute: impl FnOnce() -> Result<DisputeId, EventParseError>,
    ) -> Result<Self, EventParseError> {
        if !head.id.starts_with("evt_") || head.id.len() > 255 {
            return Err(EventParseError(format!("{at}id must be an evt_ id")));
        }
        let names_an_intent =
            head.event_type.starts_with("payment_intent.") || head.event_type == CHARGE_CAPTURED;
        let intent = match names_an_intent {
            true => intent()?,
            false => None,
        };
        let intent = if let Some(intent) = intent {
            let Intent {
                id,
                status,
                metadata,
            } = intent;
            let Metadata {
                order_id,
                operation_id,
                attempt,
            } = metadata;
            Some(EventIntent {
                id,
                status: PaymentIntentStatus::parse(&status),
                order_id: order_id_of(&order_id),
                operation_id: operation_id_of(&operation_id),
                attempt: attempt_of(&attempt),
            })
        } else {
            None
        };
        let refund = if names_a_refund(&head.event_type) {
            let Refund {
                id,
                status,
                metadata,
            } = refund()?;
            Some(EventRefund {
                id,
                status: RefundStatus::parse(status.as_deref().unwrap_or("null")),
                order_id: order_id_of(&metadata.order_id),
                operation_id: operation_id_of(&metadata.operation_id),
            })
        } else {
            None
        };
        // A dispute event whose object names no readable dispute is acknowledged as an event
        // of a type not acted on (today's answer to any event it cannot act on), never refused:
        // the dispute is Stripe's, and the reconciler and the audit still find it.
        let dispute = match names_a_dispute(&head.event_type) {
            true => dispute().ok(),
            false => None,
        };
        Ok(Self {
            id: head.id,
            event_type: head.event_type,
            intent,
            refund,
            dispute,
        })
    }

    pub fn is_handled(&self) -> bool {
        HANDLED_TYPES.contains(&self.event_type.as_str())
            && (self.intent.is_some() || self.refund.is_some() || self.dispute.is_some())
    }
}

/// `metadata.order_id` when it is a string and an order id; else not ours.
fn order_id_of(value: &Option<Value>) -> Option<OrderId> {
    value
        .as_ref()
        .and_then(Value::as_str)
        .and_then(|v| OrderId::parse(v).ok())
}

/// `metadata.attempt` when it is a string of a charge attempt's number (1 to 20, as our create
/// writes it); else none, and the record is found by the operation id among the order's
/// attempts (the operation id is what is checked either way).
fn attempt_of(value: &Option<Value>) -> Option<u32> {
    value
        .as_ref()
        .and_then(Value::as_str)
        .filter(|v| !v.starts_with(['0', '+']))
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|n| OperationKind::charge_attempt(*n).is_ok())
}

/// `metadata.operation_id` when it is a string and an operation id; else not ours.
fn operation_id_of(value: &Option<Value>) -> Option<OperationId> {
    value
        .as_ref()
        .and_then(Value::as_str)
        .and_then(|v| OperationId::parse(v).ok())
}

/// `T` from JSON; an error names where in it (`data.object.id: invalid type: …`).
fn from_json<T: DeserializeOwned>(json: &[u8]) -> Result<T, EventParseError> {
    serde_json::from_slice(json).map_err(|e| {
        // Read again only to name where: tracking the path on every read would copy every key.
        let mut de = serde_json::Deserializer::from_slice(json);
        let e = serde_path_to_error::deserialize::<_, T>(&mut de)
            .map_or_else(|e| e.to_string(), |_| e.to_string());
        EventParseError(e)
    })
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

    /// A dispute event's dispute id is read from `data.object`, for each of the five types;
    /// nothing else of it (a forged status is never read). A dispute event whose object names
    /// no dispute, and a dispute type this code does not act on, are acknowledged unhandled,
    /// as any event it cannot act on: never refused.
    #[test]
    fn a_dispute_event_names_its_dispute_and_a_malformed_one_is_unhandled() {
        for kind in [
            "created",
            "updated",
            "closed",
            "funds_withdrawn",
            "funds_reinstated",
        ] {
            let body = format!(
                r#"{{"id":"evt_d","type":"charge.dispute.{kind}","data":{{"object":{{"id":"dp_1",
                "object":"dispute","status":"won","payment_intent":"pi_1","amount":1}}}}}}"#
            );
            let ev = StripeEvent::parse(body.as_bytes()).unwrap();
            assert!(ev.is_handled(), "{kind}");
            assert_eq!(ev.dispute.unwrap().as_str(), "dp_1");
            assert!(ev.intent.is_none() && ev.refund.is_none());
        }
        for body in [
            r#"{"id":"evt_d","type":"charge.dispute.created","data":{"object":{"id":"ch_1"}}}"#,
            r#"{"id":"evt_d","type":"charge.dispute.created","data":{"object":{}}}"#,
            r#"{"id":"evt_d","type":"charge.dispute.created"}"#,
            r#"{"id":"evt_d","type":"charge.dispute.a_type_added_later","data":{"object":{"id":"dp_1"}}}"#,
        ] {
            let ev = StripeEvent::parse(body.as_bytes()).unwrap();
            assert!(!ev.is_handled(), "{body}");
        }
    }

    /// A refund event's refund is read from `data.object` (for `charge.refund.updated` too);
    /// `charge.refunded` (its object is the charge) is not acted on.
    #[test]
    fn refund_events_name_their_refund() {
        for event_type in [
            "refund.created",
            "refund.updated",
            "refund.failed",
            "charge.refund.updated",
        ] {
            let body = format!(
                r#"{{"id":"evt_r","type":"{event_type}","data":{{"object":{{"id":"re_1","object":"refund","status":"failed","amount":400,
                "metadata":{{"order_id":"order-1","operation_id":"6f1c2a4e-8a3b-4c5d-9e0f-112233445566"}}}}}}}}"#
            );
            let ev = StripeEvent::parse(body.as_bytes()).unwrap();
            assert!(ev.is_handled(), "{event_type}");
            assert_eq!(ev.intent, None);
            let refund = ev.refund.unwrap();
            assert_eq!(refund.id, "re_1");
            assert_eq!(refund.status, RefundStatus::Failed);
            assert_eq!(refund.order_id.unwrap().as_str(), "order-1");
            assert!(refund.operation_id.is_some());
        }
        let foreign = StripeEvent::parse(
            br#"{"id":"evt_r","type":"refund.updated","data":{"object":{"id":"re_2","status":"succeeded"}}}"#,
        )
        .unwrap();
        assert_eq!(foreign.refund.unwrap().operation_id, None);
        // A status absent or null (Stripe's reference has it nullable) claims none: still read.
        for object in [r#"{"id":"re_3"}"#, r#"{"id":"re_3","status":null}"#] {
            let body =
                format!(r#"{{"id":"evt_r","type":"refund.updated","data":{{"object":{object}}}}}"#);
            let refund = StripeEvent::parse(body.as_bytes()).unwrap().refund.unwrap();
            assert!(matches!(refund.status, RefundStatus::Other(_)), "{object}");
        }
        // An object that is not a refund (its id) makes the event unreadable.
        let bad = br#"{"id":"evt_r","type":"refund.failed","data":{"object":{"id":"pi_1","status":"failed"}}}"#;
        let e = StripeEvent::parse(bad).unwrap_err();
        assert!(e.0.contains("data.object.id: "), "{e}");
    }

    /// `metadata.attempt` names a later charge attempt as our create writes it (`"2"`); absent,
    /// or anything else (a number, out of 1 to 20, a sign or a leading zero), it names none and
    /// the record is found by its operation id. Never an unreadable event.
    #[test]
    fn an_intent_s_attempt_is_read_from_its_metadata() {
        let attempt = |value: &str| {
            let body = format!(
                r#"{{"id":"evt_8","type":"payment_intent.succeeded","data":{{"object":{{"id":"pi_1","status":"succeeded","metadata":{{"order_id":"o-1","attempt":{value}}}}}}}}}"#
            );
            StripeEvent::parse(body.as_bytes())
                .unwrap()
                .intent
                .unwrap()
                .attempt
        };
        assert_eq!(attempt(r#""2""#), Some(2));
        assert_eq!(attempt(r#""20""#), Some(20));
        assert_eq!(attempt(r#""1""#), Some(1));
        for none in [
            r#""0""#, r#""21""#, r#""02""#, r#""+2""#, "2", "null", r#""x""#,
        ] {
            assert_eq!(attempt(none), None, "{none}");
        }
    }

    /// Only the fields used are read: the rest of any shape is skipped; under a type we do not
    /// act on, even `data` is never required.
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
        let unused = br#"{"id":"evt_5","type":"payment_intent.succeeded","data":{"object":{
            "id":"pi_1","status":"succeeded","amount":100,"charges":{"data":[{"x":1}]},
            "metadata":{"order_id":"order-new","operation_id":"6f1c2a4e-8a3b-4c5d-9e0f-112233445566","note":"\u00e9"}}}}"#;
        let pi = StripeEvent::parse(unused).unwrap().intent.unwrap();
        assert_eq!(pi.status, PaymentIntentStatus::Succeeded);
        assert_eq!(pi.order_id.unwrap().as_str(), "order-new");
        assert!(pi.operation_id.is_some());
        // A metadata value that is not a string is not ours (absent and `null` neither); metadata
        // that is not an object, or a PaymentIntent that is not one, is unreadable.
        for metadata in [
            r#""metadata":{"order_id":7}"#,
            r#""metadata":{"order_id":null,"operation_id":["x"]}"#,
            r#""metadata":{}"#,
            r#""other":1"#,
        ] {
            let body = format!(
                r#"{{"id":"evt_6","type":"payment_intent.succeeded","data":{{"object":{{"id":"pi_1","status":"succeeded",{metadata}}}}}}}"#
            );
            let pi = StripeEvent::parse(body.as_bytes()).unwrap().intent.unwrap();
            assert_eq!((pi.order_id, pi.operation_id), (None, None), "{body}");
        }
        for (bad, says) in [
            (&br#"{"id":"evt_7","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","status":"succeeded","metadata":null}}}"#[..], "data.object.metadata: invalid type: null"),
            (br#"{"id":"evt_7","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","status":"succeeded","metadata":"x"}}}"#, "data.object.metadata: invalid type: string"),
            (br#"{"id":"evt_7","type":"payment_intent.succeeded","data":{"object":"pi_1"}}"#, "data.object: invalid type: string"),
            (br#"{"id":"evt_7","type":"payment_intent.succeeded","data":{"object":{"id":7,"status":"succeeded"}}}"#, "data.object.id: invalid type: integer"),
            (br#"{"id":"evt_7","type":"payment_intent.succeeded","data":{"object":{"id":"ch_1","status":"succeeded"}}}"#, "data.object.id: "),
            (br#"{"id":"evt_7","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}}"#, "data.object: missing field `status`"),
            (br#"{"id":"evt_7","type":"payment_intent.succeeded","data":{}}"#, "data: missing field `object`"),
            (br#"{"id":"evt_7","type":"payment_intent.succeeded","data":null}"#, "data: invalid type: null"),
            (br#"["evt_7"]"#, "invalid length 1"),
            (br#""evt_7""#, "invalid type: string"),
            (br#"{"id":null,"type":"payment_intent.succeeded"}"#, "id: invalid type: null"),
            (br#"{"id":"evt_7","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","status":"succeeded"}}} x"#, "trailing characters"),
        ] {
            let e = StripeEvent::parse(bad).unwrap_err();
            assert!(e.0.contains(says), "{}: {e}", String::from_utf8_lossy(bad));
        }
    }

    /// A field this code reads, given twice, is refused: JSON readers differ on which of the two
    /// counts, and Stripe never sends one. A key it skips may come any number of times.
    #[test]
    fn a_field_given_twice_is_refused() {
        for (body, says) in [
            (&br#"{"id":"evt_1","id":"evt_2","type":"charge.refunded"}"#[..], "duplicate field `id`"),
            (br#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","status":"processing","status":"succeeded"}}}"#, "data.object: duplicate field `status`"),
            (br#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","status":"succeeded","metadata":{"order_id":"a","order_id":"b"}}}}"#, "data.object.metadata: duplicate field `order_id`"),
        ] {
            let e = StripeEvent::parse(body).unwrap_err();
            assert!(e.0.contains(says), "{}: {e}", String::from_utf8_lossy(body));
        }
        let skipped = br#"{"id":"evt_1","type":"payment_intent.succeeded","created":1,"created":2,"data":{"object":{"id":"pi_1","status":"succeeded","amount":1,"amount":2,"metadata":{"note":"a","note":"b"}}}}"#;
        assert!(StripeEvent::parse(skipped).unwrap().is_handled());
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
        let a = StripeEvent::from_eventbridge(&from_bytes, None).unwrap();
        assert_eq!(a, StripeEvent::from_eventbridge(&from_tree, None).unwrap());
        assert_eq!(a.intent.unwrap().order_id.unwrap().as_str(), "order-8");
        let with = |key: &str, value: serde_json::Value| {
            let mut e = envelope.clone();
            e[key] = value;
            e
        };
        let mut wrong_id = envelope.clone();
        wrong_id["detail"]["id"] = "x_8".into();
        let mut wrong_intent = envelope.clone();
        wrong_intent["detail"]["data"]["object"]["id"] = 8.into();
        for (bad, says) in [
            (with("source", "aws.events".into()), "not a Stripe partner"),
            (
                with("detail-type", "payment_intent.canceled".into()),
                "is not the event's type",
            ),
            (serde_json::json!("x"), "invalid type: string"),
            (
                serde_json::json!({"detail-type":"payment_intent.succeeded","source":"aws.partner/stripe.com/x"}),
                "missing field `detail`",
            ),
            (
                with("detail", serde_json::json!([])),
                "detail: invalid length 0",
            ),
            (
                with("detail-type", 7.into()),
                "detail-type: invalid type: integer",
            ),
            (
                with("source", serde_json::Value::Null),
                "source: invalid type: null",
            ),
            (wrong_id, "detail.id must be an evt_ id"),
            (wrong_intent, "detail.data.object.id: invalid type: integer"),
            (serde_json::json!({}), "missing field `source`"),
        ] {
            let read = EventBridgeEvent::deserialize(&bad).unwrap();
            let e = StripeEvent::from_eventbridge(&read, None).unwrap_err();
            assert!(e.0.contains(says), "{bad}: {e}");
        }
        let e = StripeEvent::from_eventbridge(&EventBridgeEvent::default(), None).unwrap_err();
        assert!(e.0.contains("missing field `source`"), "{e}");
        let e = StripeEvent::from_eventbridge(&from_bytes, Some("aws.partner/stripe.com/other"))
            .unwrap_err();
        assert!(
            e.0.contains("not the configured Stripe event source"),
            "{e}"
        );
    }

    /// An authorization's events: `amount_capturable_updated` names its intent like any
    /// `payment_intent.*` event; `charge.captured` names the charge, read as a claim that its
    /// `payment_intent` succeeded (no metadata of ours: the events function asks Stripe whose it
    /// is). A `charge.captured` whose charge names no intent (a charge made without one, by
    /// another integration) is read and not handled: acknowledged, never retried into the DLQ;
    /// one whose `payment_intent` is not an intent id is still unreadable.
    #[test]
    fn an_authorization_s_events_name_its_intent() {
        let held = StripeEvent::parse(br#"{"id":"evt_h","type":"payment_intent.amount_capturable_updated","data":{"object":{"id":"pi_h","status":"requires_capture","metadata":{"order_id":"ord-1"}}}}"#).unwrap();
        assert!(held.is_handled());
        let intent = held.intent.unwrap();
        assert_eq!(intent.status, PaymentIntentStatus::RequiresCapture);
        assert_eq!(
            intent.order_id.map(|o| o.to_string()).as_deref(),
            Some("ord-1")
        );
        let captured = StripeEvent::parse(br#"{"id":"evt_c","type":"charge.captured","data":{"object":{"id":"ch_1","object":"charge","payment_intent":"pi_h","captured":true}}}"#).unwrap();
        assert!(captured.is_handled());
        let intent = captured.intent.unwrap();
        assert_eq!(intent.id.as_str(), "pi_h");
        assert_eq!(intent.status, PaymentIntentStatus::Succeeded);
        assert_eq!(
            intent.operation_id, None,
            "a charge carries no metadata of ours"
        );
        for no_intent in [
            &br#"{"id":"evt_c","type":"charge.captured","data":{"object":{"id":"ch_1"}}}"#[..],
            br#"{"id":"evt_c","type":"charge.captured","data":{"object":{"id":"ch_1","payment_intent":null}}}"#,
        ] {
            let legacy = StripeEvent::parse(no_intent).unwrap();
            assert!(legacy.intent.is_none() && !legacy.is_handled());
        }
        let not_an_intent = br#"{"id":"evt_c","type":"charge.captured","data":{"object":{"id":"ch_1","payment_intent":"ch_2"}}}"#;
        assert!(StripeEvent::parse(not_an_intent).is_err());
    }
}
