//! A Stripe event read straight from its JSON, without building a tree of it: only the fields
//! the events function uses are kept (`id`, `type`, and of `data.object` its `id`, `status` and
//! two metadata keys); everything else is skipped as it is read.
//!
//! These readers never fail on a JSON value of the wrong shape: a missing or mistyped field is
//! kept as such and reported by [`super::StripeEvent`]'s checks, so an event with an unexpected
//! object under a type we do not act on is still read (and ignored), and an EventBridge event of
//! any shape reaches the function's own "unreadable" rejection instead of failing in the runtime.
//! A key given twice counts once, the last time, as in a parsed JSON object.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// A JSON value read as far as a string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Text {
    /// The key was not there.
    #[default]
    Missing,
    Str(String),
    /// Present, but not a string: what it is (`"null"`, `"a number"`, …).
    Other(&'static str),
}

impl Text {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Text::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn is_missing(&self) -> bool {
        matches!(self, Text::Missing)
    }

    /// The string, or why `field` has none.
    pub(super) fn required(self, field: &str) -> Result<String, String> {
        match self {
            Text::Str(s) => Ok(s),
            Text::Missing => Err(format!("missing field `{field}`")),
            Text::Other(kind) => Err(format!("`{field}` is {kind}, not a string")),
        }
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Text, E> {
        Ok(Text::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Text, E> {
        Ok(Text::Str(v))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Text, E> {
        Ok(Text::Other("a boolean"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Text, E> {
        Ok(Text::Other("a number"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Text, E> {
        Ok(Text::Other("a number"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Text, E> {
        Ok(Text::Other("a number"))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Text, E> {
        Ok(Text::Other("null"))
    }
    fn visit_none<E: de::Error>(self) -> Result<Text, E> {
        Ok(Text::Other("null"))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Text, D::Error> {
        Text::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Text, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Text::Other("an array"))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Text, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Text::Other("an object"))
    }
}

/// A JSON object read into `Self` field by field ([`Shaped`]).
trait Fields: Default {
    /// The keys read, in the order [`Fields::set`] numbers them.
    const KEYS: &'static [&'static str];
    /// Reads the value of `KEYS[key]`, replacing an earlier one.
    fn set<'de, A: MapAccess<'de>>(&mut self, key: usize, map: &mut A) -> Result<(), A::Error>;
}

/// A JSON value read as an object's [`Fields`], or what it was instead (`"null"`, `"a string"`, …).
#[derive(Debug, Clone)]
pub enum Shaped<T> {
    Object(T),
    Not(&'static str),
}

impl<T> Shaped<T> {
    /// The object, if it was one.
    pub fn object(&self) -> Option<&T> {
        match self {
            Shaped::Object(t) => Some(t),
            Shaped::Not(_) => None,
        }
    }

    /// The object, or what the value was instead.
    pub(crate) fn into_object(self) -> Result<T, &'static str> {
        match self {
            Shaped::Object(t) => Ok(t),
            Shaped::Not(kind) => Err(kind),
        }
    }
}

impl<'de, T: Fields> Deserialize<'de> for Shaped<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        read_object(d, FieldsReader(PhantomData))
    }
}

/// Reads `T`'s [`Fields`] from an object, skipping every other key.
struct FieldsReader<T>(PhantomData<T>);

impl<'de, T: Fields> ObjectReader<'de> for FieldsReader<T> {
    type Out = Shaped<T>;

    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Shaped<T>, A::Error> {
        let mut out = T::default();
        while let Some(key) = map.next_key_seed(KeyIndex(T::KEYS))? {
            match key {
                Some(i) => out.set(i, &mut map)?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Shaped::Object(out))
    }

    fn not_object(self, kind: &'static str) -> Shaped<T> {
        Shaped::Not(kind)
    }
}

/// A reader of a JSON object that takes any JSON value ([`read_object`]): an object is read
/// by [`ObjectReader::object`], anything else (skipped) is named by its kind (`"null"`,
/// `"a string"`, `"an array"`, …).
pub trait ObjectReader<'de>: Sized {
    type Out;
    fn object<A: MapAccess<'de>>(self, map: A) -> Result<Self::Out, A::Error>;
    fn not_object(self, kind: &'static str) -> Self::Out;
}

/// Reads any JSON value with `reader`: never an error for a value of the wrong shape.
pub fn read_object<'de, D: Deserializer<'de>, R: ObjectReader<'de>>(
    d: D,
    reader: R,
) -> Result<R::Out, D::Error> {
    d.deserialize_any(ObjectVisitor(reader))
}

struct ObjectVisitor<R>(R);

impl<'de, R: ObjectReader<'de>> Visitor<'de> for ObjectVisitor<R> {
    type Value = R::Out;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<R::Out, A::Error> {
        self.0.object(map)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<R::Out, E> {
        Ok(self.0.not_object("a string"))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<R::Out, E> {
        Ok(self.0.not_object("a boolean"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<R::Out, E> {
        Ok(self.0.not_object("a number"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<R::Out, E> {
        Ok(self.0.not_object("a number"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<R::Out, E> {
        Ok(self.0.not_object("a number"))
    }
    fn visit_unit<E: de::Error>(self) -> Result<R::Out, E> {
        Ok(self.0.not_object("null"))
    }
    fn visit_none<E: de::Error>(self) -> Result<R::Out, E> {
        Ok(self.0.not_object("null"))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<R::Out, D::Error> {
        read_object(d, self.0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<R::Out, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(self.0.not_object("an array"))
    }
}

/// A key, as its index in the keys read (`None`: skipped).
struct KeyIndex(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for KeyIndex {
    type Value = Option<usize>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de> Visitor<'de> for KeyIndex {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|k| *k == v))
    }
}

/// A value a [`Fields`] keeps: present (of any shape) or not.
fn next<'de, T: Fields, A: MapAccess<'de>>(map: &mut A) -> Result<Option<Shaped<T>>, A::Error> {
    map.next_value().map(Some)
}

/// A Stripe event (a webhook body, or an EventBridge event's `detail`).
#[derive(Debug, Clone, Default)]
pub struct EventFields {
    pub(super) id: Text,
    pub(super) event_type: Text,
    pub(super) data: Option<Shaped<DataFields>>,
}

impl EventFields {
    /// `data.object`, if it is an object.
    fn object(&self) -> Option<&ObjectFields> {
        self.data.as_ref()?.object()?.object.as_ref()?.object()
    }

    /// `data.object.status`, if a string.
    pub fn status(&self) -> Option<&str> {
        self.object()?.status.as_str()
    }

    /// `data.object.metadata.order_id`, if a string (unchecked).
    pub fn order_id(&self) -> Option<&str> {
        self.object()?
            .metadata
            .as_ref()?
            .object()?
            .order_id
            .as_str()
    }
}

impl Fields for EventFields {
    const KEYS: &'static [&'static str] = &["id", "type", "data"];
    fn set<'de, A: MapAccess<'de>>(&mut self, key: usize, map: &mut A) -> Result<(), A::Error> {
        match key {
            0 => self.id = map.next_value()?,
            1 => self.event_type = map.next_value()?,
            _ => self.data = next(map)?,
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default)]
pub(super) struct DataFields {
    pub(super) object: Option<Shaped<ObjectFields>>,
}

impl Fields for DataFields {
    const KEYS: &'static [&'static str] = &["object"];
    fn set<'de, A: MapAccess<'de>>(&mut self, _: usize, map: &mut A) -> Result<(), A::Error> {
        self.object = next(map)?;
        Ok(())
    }
}

/// `data.object`: for a `payment_intent.*` event, the PaymentIntent.
#[derive(Debug, Clone, Default)]
pub(super) struct ObjectFields {
    pub(super) id: Text,
    pub(super) status: Text,
    pub(super) metadata: Option<Shaped<MetadataFields>>,
}

impl Fields for ObjectFields {
    const KEYS: &'static [&'static str] = &["id", "status", "metadata"];
    fn set<'de, A: MapAccess<'de>>(&mut self, key: usize, map: &mut A) -> Result<(), A::Error> {
        match key {
            0 => self.id = map.next_value()?,
            1 => self.status = map.next_value()?,
            _ => self.metadata = next(map)?,
        }
        Ok(())
    }
}

/// A PaymentIntent's `metadata`, as far as we read it (the events function, and the Stripe
/// client's [`crate::adapters::stripe`] answers).
#[derive(Debug, Clone, Default)]
pub(crate) struct MetadataFields {
    pub(crate) order_id: Text,
    pub(crate) operation_id: Text,
}

impl Fields for MetadataFields {
    const KEYS: &'static [&'static str] = &["order_id", "operation_id"];
    fn set<'de, A: MapAccess<'de>>(&mut self, key: usize, map: &mut A) -> Result<(), A::Error> {
        match key {
            0 => self.order_id = map.next_value()?,
            _ => self.operation_id = map.next_value()?,
        }
        Ok(())
    }
}

/// An EventBridge event, as far as the events function reads it: `source`, `detail-type` and
/// the Stripe event in `detail`. What the runtime hands the function is read into this directly
/// (the events function's `Incoming`), or with [`EventBridgeEvent::deserialize`].
#[derive(Debug, Clone, Default)]
pub struct EventBridgeEvent {
    /// Set when the payload was not an object: what it was.
    pub(super) not_object: Option<&'static str>,
    pub(super) source: Text,
    pub(super) detail_type: Text,
    pub(super) detail: Option<Shaped<EventFields>>,
}

impl EventBridgeEvent {
    /// The keys [`EventBridgeEvent::take`] reads.
    pub const KEYS: &'static [&'static str] = &["source", "detail-type", "detail"];

    /// Reads the value of `key` if it is one of [`Self::KEYS`] (true), replacing an earlier
    /// one; otherwise leaves it for the caller (false). For a reader of a payload that may be
    /// an EventBridge event or something else, in one pass.
    pub fn take<'de, A: MapAccess<'de>>(
        &mut self,
        key: &str,
        map: &mut A,
    ) -> Result<bool, A::Error> {
        match Self::KEYS.iter().position(|k| *k == key) {
            Some(i) => self.set(i, map).map(|()| true),
            None => Ok(false),
        }
    }

    /// Whether it has a `detail-type` (of any value): what marks an EventBridge event.
    pub fn has_detail_type(&self) -> bool {
        !self.detail_type.is_missing()
    }

    /// The Stripe event in `detail`, if it is there and an object.
    pub fn detail(&self) -> Option<&EventFields> {
        self.detail.as_ref()?.object()
    }
}

impl Fields for EventBridgeEvent {
    const KEYS: &'static [&'static str] = EventBridgeEvent::KEYS;
    fn set<'de, A: MapAccess<'de>>(&mut self, key: usize, map: &mut A) -> Result<(), A::Error> {
        match key {
            0 => self.source = map.next_value()?,
            1 => self.detail_type = map.next_value()?,
            _ => self.detail = next(map)?,
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for EventBridgeEvent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Shaped::deserialize(d)? {
            Shaped::Object(event) => event,
            Shaped::Not(kind) => EventBridgeEvent {
                not_object: Some(kind),
                ..EventBridgeEvent::default()
            },
        })
    }
}
