//! Values that arrive from outside, parsed once into types that cannot hold a bad value
//! ("parse, don't validate"). Everything downstream takes these types, so a malformed order id or a
//! negative amount is refused at the door with a field-level message and never reaches a store,
//! a queue or Stripe.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// A field-level reason why an input was refused. `field` is the wire name of the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    pub field: &'static str,
    pub message: String,
}

impl ValidationError {
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}

/// The merchant's order id: the business identity of a charge.
///
/// Non-empty, at most 128 characters, printable ASCII without spaces (`!`..=`~`). The space is
/// excluded because the id is also the SQS FIFO `MessageGroupId`, which only allows alphanumerics and
/// punctuation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct OrderId(String);

impl OrderId {
    pub const MAX_LEN: usize = 128;

    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        const FIELD: &str = "order_id";
        if raw.is_empty() {
            return Err(ValidationError::new(FIELD, "must not be empty"));
        }
        if raw.len() > Self::MAX_LEN {
            return Err(ValidationError::new(
                FIELD,
                format!("must be at most {} characters", Self::MAX_LEN),
            ));
        }
        if !raw.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ValidationError::new(
                FIELD,
                "must be printable ASCII without spaces",
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OrderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for OrderId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// The durable identity of one charge operation, minted once when the operation is recorded.
/// The idempotency key is derived from it, so the same key survives restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OperationId(Uuid);

impl OperationId {
    pub fn new_random() -> Self {
        Self(crate::ids::fresh_uuid())
    }

    pub fn from_uuid(uuid: Uuid) -> Self {
        Self(uuid)
    }

    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        Uuid::parse_str(raw)
            .map(Self)
            .map_err(|_| ValidationError::new("operation_id", "must be a UUID"))
    }

    pub fn as_uuid(&self) -> Uuid {
        self.0
    }

    /// The Stripe idempotency key for every create of this operation.
    pub fn idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey(format!("{}{}", IdempotencyKey::PREFIX, self.0.hyphenated()))
    }

    /// The Stripe idempotency key for every create of this refund operation's refund: a namespace
    /// of its own, so no refund key can ever equal a charge's (Stripe would replay the charge's
    /// answer, or refuse the key as used on another endpoint).
    pub fn refund_idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey(format!(
            "{}{}",
            IdempotencyKey::REFUND_PREFIX,
            self.0.hyphenated()
        ))
    }

    /// The Stripe idempotency key for every capture of a capture operation: its own namespace
    /// (Stripe refuses a key used on another endpoint), the same on every attempt.
    pub fn capture_idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey(format!(
            "{}{}",
            IdempotencyKey::CAPTURE_PREFIX,
            self.0.hyphenated()
        ))
    }

    /// The Stripe idempotency key for every cancel made by a cancel operation (the merchant's
    /// `POST /orders/{id}/cancel`): apart from `payment-op-cancel:`, which is the charge's own
    /// cancel of a declined intent, derived from the charge's operation id.
    pub fn cancel_op_idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey(format!(
            "{}{}",
            IdempotencyKey::CANCEL_OP_PREFIX,
            self.0.hyphenated()
        ))
    }

    /// A dispute's key: never sent (a dispute is never created by us), named only so that
    /// every record answers [`crate::operation::Operation::idempotency_key`] with a namespace of
    /// its own.
    pub fn dispute_idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey(format!(
            "{}{}",
            IdempotencyKey::DISPUTE_PREFIX,
            self.0.hyphenated()
        ))
    }

    /// The Stripe idempotency key for every cancel of this operation's PaymentIntent: its own,
    /// because Stripe refuses a key used on another endpoint (`idempotency_error`), and the same
    /// on every attempt, so a cancel whose answer was lost replays its first answer.
    pub fn cancel_idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey(format!(
            "{}{}",
            IdempotencyKey::CANCEL_PREFIX,
            self.0.hyphenated()
        ))
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.hyphenated())
    }
}

/// `Idempotency-Key` sent to Stripe: `payment-op:<operation_id>` for creates,
/// `payment-op-cancel:<operation_id>` for the cancel of a declined intent,
/// `refund-op:<operation_id>` for a refund's create.
///
/// Only constructible from an [`OperationId`], so it never carries personal data, is at most 54
/// characters (Stripe allows 255) and is the same on every attempt of the operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub const PREFIX: &'static str = "payment-op:";
    pub const CANCEL_PREFIX: &'static str = "payment-op-cancel:";
    pub const REFUND_PREFIX: &'static str = "refund-op:";
    pub const CAPTURE_PREFIX: &'static str = "capture-op:";
    pub const CANCEL_OP_PREFIX: &'static str = "cancel-op:";
    pub const DISPUTE_PREFIX: &'static str = "dispute-op:";
    pub const MAX_LEN: usize = 255;

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An amount in the currency's minor units (cents for usd). Integer only: money is never a float.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Amount(i64);

impl Amount {
    /// Stripe's maximum for most currencies (eight digits).
    pub const MAX: i64 = 99_999_999;

    pub fn new(minor_units: i64) -> Result<Self, ValidationError> {
        if minor_units <= 0 {
            return Err(ValidationError::new(
                "amount",
                "must be a positive integer in minor units",
            ));
        }
        if minor_units > Self::MAX {
            return Err(ValidationError::new(
                "amount",
                format!("must be at most {}", Self::MAX),
            ));
        }
        Ok(Self(minor_units))
    }

    pub fn minor_units(&self) -> i64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Amount {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::new(i64::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Active ISO 4217 alphabetic codes (lowercase, as Stripe puts them on the wire).
const ISO_4217: &[&str] = &[
    "aed", "afn", "all", "amd", "ang", "aoa", "ars", "aud", "awg", "azn", "bam", "bbd", "bdt",
    "bgn", "bhd", "bif", "bmd", "bnd", "bob", "brl", "bsd", "btn", "bwp", "byn", "bzd", "cad",
    "cdf", "chf", "clp", "cny", "cop", "crc", "cup", "cve", "czk", "djf", "dkk", "dop", "dzd",
    "egp", "ern", "etb", "eur", "fjd", "fkp", "gbp", "gel", "ghs", "gip", "gmd", "gnf", "gtq",
    "gyd", "hkd", "hnl", "htg", "huf", "idr", "ils", "inr", "iqd", "irr", "isk", "jmd", "jod",
    "jpy", "kes", "kgs", "khr", "kmf", "kpw", "krw", "kwd", "kyd", "kzt", "lak", "lbp", "lkr",
    "lrd", "lsl", "lyd", "mad", "mdl", "mga", "mkd", "mmk", "mnt", "mop", "mru", "mur", "mvr",
    "mwk", "mxn", "myr", "mzn", "nad", "ngn", "nio", "nok", "npr", "nzd", "omr", "pab", "pen",
    "pgk", "php", "pkr", "pln", "pyg", "qar", "ron", "rsd", "rub", "rwf", "sar", "sbd", "scr",
    "sdg", "sek", "sgd", "shp", "sle", "sos", "srd", "ssp", "stn", "svc", "syp", "szl", "thb",
    "tjs", "tmt", "tnd", "top", "try", "ttd", "twd", "tzs", "uah", "ugx", "usd", "uyu", "uzs",
    "ves", "vnd", "vuv", "wst", "xaf", "xcd", "xof", "xpf", "yer", "zar", "zmw", "zwl",
];

/// An ISO 4217 alphabetic currency code, held lowercase (Stripe's wire form). Input in either case
/// is accepted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Currency(String);

impl Currency {
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        let lower = raw.to_ascii_lowercase();
        if lower.len() == 3 && ISO_4217.binary_search(&lower.as_str()).is_ok() {
            Ok(Self(lower))
        } else {
            Err(ValidationError::new(
                "currency",
                "must be an ISO 4217 currency code such as \"usd\"",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for Currency {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Checks a Stripe-style object id: one of the prefixes, then 1..=250 of `[A-Za-z0-9_]`.
fn parse_stripe_id(
    field: &'static str,
    raw: &str,
    prefixes: &[&str],
) -> Result<String, ValidationError> {
    let Some(rest) = prefixes.iter().find_map(|p| raw.strip_prefix(p)) else {
        return Err(ValidationError::new(
            field,
            format!(
                "must be a Stripe id starting with {}",
                prefixes.join(" or ")
            ),
        ));
    };
    if rest.is_empty()
        || rest.len() > 250
        || !rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(ValidationError::new(
            field,
            "must be a Stripe id of letters, digits and underscores",
        ));
    }
    Ok(raw.to_owned())
}

macro_rules! stripe_id {
    ($(#[$doc:meta])* $name:ident, $field:literal, [$($prefix:literal),+]) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn parse(raw: &str) -> Result<Self, ValidationError> {
                parse_stripe_id($field, raw, &[$($prefix),+]).map(Self)
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                self == &other.0
            }
        }

        /// Read-only: the id as text (for logs, paths and attributes); a value is only ever
        /// made by [`Self::parse`].
        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
            }
        }
    };
}

stripe_id!(
    /// A Stripe customer id (`cus_…`).
    CustomerId,
    "customer_id",
    ["cus_"]
);
stripe_id!(
    /// A Stripe payment method id (`pm_…`, or the legacy `card_…` / `src_…`).
    PaymentMethodId,
    "payment_method",
    ["pm_", "card_", "src_"]
);
stripe_id!(
    /// A Stripe PaymentIntent id (`pi_…`): what an operation records as its `external_id`, what a
    /// retrieve names in its URL path, and what an operator types. Parsed once, here, so a value
    /// that could escape the path (`pi_../x`) or exceed Stripe's id length never gets that far.
    PaymentIntentId,
    "payment_intent",
    ["pi_"]
);

stripe_id!(
    /// A Stripe refund id (`re_…`, or `pyr_…` for some payment methods' refunds): what a refund
    /// operation records once Stripe named it, and what its retrieve names in the URL path.
    StripeRefundId,
    "refund",
    ["re_", "pyr_"]
);

stripe_id!(
    /// A Stripe dispute id (`dp_…`, or `du_…` for some payment methods' disputes): what a
    /// dispute's record is keyed by under its order, and what its retrieve names in the URL path.
    DisputeId,
    "dispute",
    ["dp_", "du_"]
);

stripe_id!(
    /// A Stripe charge id (`ch_…`, or `py_…` for some payment methods): what a dispute names as
    /// the charge it takes money back from.
    StripeChargeId,
    "charge",
    ["ch_", "py_"]
);

/// The merchant's identity of one refund action (`POST /orders/{order_id}/refunds/{refund_id}`):
/// the same id again is the same refund; two ids are two refunds, even for the same amount.
///
/// Non-empty, at most 128 characters, letters, digits and `-`, `_`, `.` (it is part of the
/// record's key and of URL paths).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct RefundId(String);

impl RefundId {
    pub const MAX_LEN: usize = 128;

    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        const FIELD: &str = "refund_id";
        if raw.is_empty() || raw.len() > Self::MAX_LEN {
            return Err(ValidationError::new(
                FIELD,
                format!("must be 1 to {} characters", Self::MAX_LEN),
            ));
        }
        if !raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err(ValidationError::new(
                FIELD,
                "must be letters, digits, '-', '_' or '.'",
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RefundId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for RefundId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// What kind of effect an operation is. Part of the business identity `(order_id, kind)`: one
/// charge attempt per number (at most one in flight and at most one paid per order), one refund
/// per merchant refund id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "KindShown", try_from = "KindShown")]
pub enum OperationKind {
    /// The order's n-th charge attempt, counted from 1. The first is what every release before
    /// attempts wrote (sort key `charge`); a later one exists only because every earlier one
    /// ended `failed` (declined at Stripe, its intent canceled) and the order was asked again,
    /// with another card or the same: its own operation id, key and PaymentIntent. The store's
    /// write that creates attempt n+1 checks attempt n failed, so at most one attempt of an order
    /// is ever unsettled, authorized or paid.
    Charge(u32),
    /// A refund of the order's charge, named by the merchant's refund id.
    Refund(RefundId),
    /// The order's n-th capture of its authorization (a charge made with `capture: manual`),
    /// counted from 1. Stripe captures an intent once, so at most one ever succeeds; a later one
    /// exists only when every earlier one was refused by Stripe for what it asked and gave the
    /// authorization back (another amount, its own operation and key).
    Capture(u32),
    /// The cancel of the order's charge: before it was sent, or of its authorization.
    Cancel,
    /// A dispute of the order's charge, named by Stripe's dispute id: recorded from what Stripe
    /// holds, never created by us (no idempotency key, no lease, no queue message).
    Dispute(DisputeId),
}

/// How a kind is shown (`chargectl show --json`): as it always was, `"charge"`, `"capture"`,
/// `"cancel"`, `{"refund": id}`; a capture after the first as `{"capture_again": n}`; a dispute
/// as `{"dispute": "dp_…"}`; a charge attempt after the first as `{"charge_attempt": n}`.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum KindShown {
    Charge,
    ChargeAttempt(u32),
    Refund(RefundId),
    Capture,
    CaptureAgain(u32),
    Cancel,
    Dispute(DisputeId),
}

impl From<OperationKind> for KindShown {
    fn from(kind: OperationKind) -> Self {
        match kind {
            OperationKind::Charge(n) if n <= 1 => KindShown::Charge,
            OperationKind::Charge(n) => KindShown::ChargeAttempt(n),
            OperationKind::Refund(id) => KindShown::Refund(id),
            OperationKind::Capture(n) if n <= 1 => KindShown::Capture,
            OperationKind::Capture(n) => KindShown::CaptureAgain(n),
            OperationKind::Cancel => KindShown::Cancel,
            OperationKind::Dispute(id) => KindShown::Dispute(id),
        }
    }
}

impl TryFrom<KindShown> for OperationKind {
    type Error = ValidationError;

    fn try_from(shown: KindShown) -> Result<Self, ValidationError> {
        Ok(match shown {
            KindShown::Charge => OperationKind::FIRST_CHARGE,
            KindShown::ChargeAttempt(n) => OperationKind::charge_attempt(n)?,
            KindShown::Refund(id) => OperationKind::Refund(id),
            KindShown::Capture => OperationKind::FIRST_CAPTURE,
            KindShown::CaptureAgain(n) => OperationKind::capture_number(n)?,
            KindShown::Cancel => OperationKind::Cancel,
            KindShown::Dispute(id) => OperationKind::Dispute(id),
        })
    }
}

impl OperationKind {
    /// The order's first charge attempt: the only charge every release before attempts wrote
    /// (sort key `charge`). Its record is the order's head: it names the latest attempt once
    /// there are more ([`crate::charge::state::ChargeState::latest_attempt`]).
    pub const FIRST_CHARGE: OperationKind = OperationKind::Charge(1);

    /// How many charge attempts one order may ever have, whatever the deployment's limit (the
    /// template's parameter is at most this): a bound on the records the door and the readers
    /// walk, and on the PaymentIntents one order can create.
    pub const MAX_CHARGE_ATTEMPTS: u32 = 20;

    /// The attempt a refund, capture, cancel or dispute acts on when its record names none:
    /// the first (every record written before attempts).
    pub const fn first_attempt() -> u32 {
        1
    }

    /// Whether `n` is the first attempt: a record acting on it does not name it (its item and
    /// its `--json` stay as every earlier release wrote them).
    pub fn is_first_attempt(n: &u32) -> bool {
        *n == 1
    }

    /// The order's `n`-th charge attempt, `n` in 1..=[`Self::MAX_CHARGE_ATTEMPTS`].
    pub fn charge_attempt(n: u32) -> Result<Self, ValidationError> {
        if (1..=Self::MAX_CHARGE_ATTEMPTS).contains(&n) {
            Ok(OperationKind::Charge(n))
        } else {
            Err(ValidationError::new(
                "kind",
                format!(
                    "a charge attempt's number must be 1 to {}",
                    Self::MAX_CHARGE_ATTEMPTS
                ),
            ))
        }
    }

    /// A charge attempt (the first or a later one).
    pub fn is_charge(&self) -> bool {
        matches!(self, OperationKind::Charge(_))
    }

    /// A charge attempt's number; `None` for another kind.
    pub fn attempt_no(&self) -> Option<u32> {
        match self {
            OperationKind::Charge(n) => Some(*n),
            _ => None,
        }
    }

    /// The order's first capture: the only one every release before captures could be asked
    /// again wrote (sort key `capture`).
    pub const FIRST_CAPTURE: OperationKind = OperationKind::Capture(1);

    /// How many captures of one order the door writes: each after the first exists only because
    /// Stripe refused the one before for what it asked. Past this many, the merchant cancels
    /// (or a person looks), rather than the door reading one more record per request for ever.
    pub const MAX_CAPTURES: u32 = 10;

    /// The order's `n`-th capture, `n` in 1..=[`Self::MAX_CAPTURES`].
    pub fn capture_number(n: u32) -> Result<Self, ValidationError> {
        if (1..=Self::MAX_CAPTURES).contains(&n) {
            Ok(OperationKind::Capture(n))
        } else {
            Err(ValidationError::new(
                "kind",
                format!("a capture's number must be 1 to {}", Self::MAX_CAPTURES),
            ))
        }
    }

    /// The kind's name, for logs, metrics and the queue message (`charge`, `refund`).
    pub fn as_str(&self) -> &'static str {
        match self {
            OperationKind::Charge(_) => "charge",
            OperationKind::Refund(_) => "refund",
            OperationKind::Capture(_) => "capture",
            OperationKind::Cancel => "cancel",
            OperationKind::Dispute(_) => "dispute",
        }
    }

    /// The record's sort key: `charge` (the first attempt), `charge#<n>` (the n-th), `capture`
    /// (the first), `capture#<n>` (the n-th), `cancel`, `refund#<refund_id>`, or
    /// `dispute#<dp_id>`.
    pub fn sort_key(&self) -> String {
        match self {
            OperationKind::Refund(id) => format!("refund#{id}"),
            OperationKind::Dispute(id) => format!("dispute#{id}"),
            OperationKind::Capture(n) if *n > 1 => format!("capture#{n}"),
            OperationKind::Charge(n) if *n > 1 => format!("charge#{n}"),
            other => other.as_str().to_owned(),
        }
    }

    /// Reads a sort key back ([`Self::sort_key`]).
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        match raw.split_once('#') {
            None if raw == "charge" => Ok(OperationKind::FIRST_CHARGE),
            None if raw == "capture" => Ok(OperationKind::FIRST_CAPTURE),
            None if raw == "cancel" => Ok(OperationKind::Cancel),
            Some(("refund", id)) => Ok(OperationKind::Refund(RefundId::parse(id)?)),
            Some(("dispute", id)) => Ok(OperationKind::Dispute(DisputeId::parse(id)?)),
            // Only as `sort_key` writes it: `capture#2` onwards, no sign, no leading zero.
            Some(("capture", n))
                if !n.starts_with(['0', '+']) && n.parse::<u32>().is_ok_and(|n| n > 1) =>
            {
                Self::capture_number(n.parse().unwrap_or(0))
            }
            Some(("charge", n))
                if !n.starts_with(['0', '+']) && n.parse::<u32>().is_ok_and(|n| n > 1) =>
            {
                Self::charge_attempt(n.parse().unwrap_or(0))
            }
            _ => Err(ValidationError::new(
                "kind",
                "must be \"charge\", \"charge#<n>\", \"capture\", \"capture#<n>\", \"cancel\", \"refund#<refund_id>\" or \"dispute#<dispute_id>\"",
            )),
        }
    }

    /// The order's n-th capture's number; `None` for another kind.
    pub fn capture_no(&self) -> Option<u32> {
        match self {
            OperationKind::Capture(n) => Some(*n),
            _ => None,
        }
    }

    /// A capture (the first or a later one).
    pub fn is_capture(&self) -> bool {
        matches!(self, OperationKind::Capture(_))
    }

    pub fn refund_id(&self) -> Option<&RefundId> {
        match self {
            OperationKind::Refund(id) => Some(id),
            _ => None,
        }
    }

    /// A dispute's Stripe id; `None` for another kind.
    pub fn dispute_id(&self) -> Option<&DisputeId> {
        match self {
            OperationKind::Dispute(id) => Some(id),
            _ => None,
        }
    }

    /// A capture or a cancel: an operation that takes the order's authorization (or stops its
    /// charge before it was sent), fenced against the other by the charge record.
    pub fn takes_authorization(&self) -> bool {
        matches!(self, OperationKind::Capture(_) | OperationKind::Cancel)
    }
}

/// What the customer asked to be charged: the parameters sent to Stripe on every attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChargeParams {
    pub amount: Amount,
    pub currency: Currency,
    pub customer_id: CustomerId,
    pub payment_method: PaymentMethodId,
    /// When the money is taken: at once (`automatic`, the default and every record written
    /// before authorizations existed), or held at checkout and taken by a later capture
    /// (`manual`). Absent from a stored charge means automatic.
    #[serde(default, skip_serializing_if = "CaptureMethod::is_automatic")]
    pub capture_method: CaptureMethod,
}

/// Stripe's `capture_method` for a charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptureMethod {
    /// Charged at once: the create's `succeeded` is money taken.
    #[default]
    Automatic,
    /// Authorized at once (`requires_capture`: money held, not taken), captured or canceled later.
    Manual,
}

impl CaptureMethod {
    pub fn is_automatic(&self) -> bool {
        *self == CaptureMethod::Automatic
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Automatic => "automatic",
            Self::Manual => "manual",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        match raw {
            "automatic" => Ok(Self::Automatic),
            "manual" => Ok(Self::Manual),
            _ => Err(ValidationError::new(
                "capture",
                "must be \"automatic\" or \"manual\"",
            )),
        }
    }
}

/// What Stripe refuses to charge, by currency (docs.stripe.com/currencies, read 2026-12-01, as
/// REFERENCE.md records it). A violation is answered by Stripe with 400 `invalid_request_error`,
/// which the executor must send to review; refusing it at the door answers the order service with
/// a 400 naming the rule instead, and writes nothing.
pub mod stripe_rules {
    /// Currencies without minor units: the amount is in whole units (`1000` JPY is ¥1,000).
    pub const ZERO_DECIMAL: &[&str] = &[
        "bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv",
        "xaf", "xof", "xpf",
    ];

    /// Currencies with three decimals: Stripe requires the last digit to be 0.
    pub const THREE_DECIMAL: &[&str] = &["bhd", "jod", "kwd", "omr", "tnd"];

    /// The smallest amount Stripe charges, in the currency's minor units, for the currencies the
    /// reference lists. Stripe's minimum really depends on the **settlement** currency: a charge
    /// presented in one currency and settled in another must also be worth the settlement
    /// currency's minimum at the day's rate, which cannot be known here. This table checks each
    /// presentment currency against its own minimum only; a charge below the settlement minimum
    /// still reaches Stripe, is refused there and goes to review (`rejected`, paged).
    /// How many decimals Stripe's minor units have in `currency` (0, 3, or the usual 2).
    pub fn decimals(currency: &str) -> u32 {
        if ZERO_DECIMAL.contains(&currency) {
            0
        } else if THREE_DECIMAL.contains(&currency) {
            3
        } else {
            2
        }
    }

    /// `minor_units` in major units as a person reads them (`50` usd → `0.50 usd`).
    pub fn display(minor_units: i64, currency: &str) -> String {
        let d = decimals(currency);
        if d == 0 {
            return format!("{minor_units} {currency}");
        }
        let scale = 10_i64.pow(d);
        format!(
            "{}.{:0width$} {currency}",
            minor_units / scale,
            minor_units % scale,
            width = d as usize
        )
    }

    pub const MINIMUMS: &[(&str, i64)] = &[
        ("aud", 50),
        ("brl", 50),
        ("cad", 50),
        ("chf", 50),
        ("dkk", 250),
        ("eur", 50),
        ("gbp", 30),
        ("hkd", 400),
        ("inr", 50),
        ("jpy", 50),
        ("mxn", 1000),
        ("nok", 300),
        ("nzd", 50),
        ("pln", 200),
        ("sek", 300),
        ("sgd", 50),
        ("usd", 50),
    ];
}

impl ChargeParams {
    /// Stripe's per-currency rules ([`stripe_rules`]): the minimum charge, the last digit of a
    /// three-decimal currency, ISK in whole krónur (divisible by 100 since 2023-04-14). The
    /// error's message names the rule and the amount that would pass.
    pub fn check_chargeable(amount: Amount, currency: &Currency) -> Result<(), ValidationError> {
        let (n, c) = (amount.minor_units(), currency.as_str());
        if let Some((_, min)) = stripe_rules::MINIMUMS.iter().find(|(code, _)| *code == c) {
            if n < *min {
                return Err(ValidationError::new(
                    "amount",
                    format!(
                        "is below Stripe's minimum charge for {c}: at least {min} in minor units ({})",
                        stripe_rules::display(*min, c)
                    ),
                ));
            }
        }
        Self::check_divisible(amount, currency)
    }

    /// Stripe's per-currency digits for any amount it moves, not only a charge's: a
    /// three-decimal currency's last digit 0, ISK in whole krónur. Stripe documents them for
    /// "the standard payment flows, including Payment Intents, Refunds, and Disputes"
    /// (docs.stripe.com/currencies), so a capture's `amount_to_capture` and a refund's `amount`
    /// pass them too. Its minimum charge amounts are documented for charges only: a partial
    /// capture or refund below them is not refused here (Stripe's own answer decides, and a
    /// refused capture gives its authorization back).
    pub fn check_divisible(amount: Amount, currency: &Currency) -> Result<(), ValidationError> {
        let (n, c) = (amount.minor_units(), currency.as_str());
        if stripe_rules::THREE_DECIMAL.contains(&c) && n % 10 != 0 {
            return Err(ValidationError::new(
                "amount",
                format!("must end in 0 for {c}: Stripe charges three-decimal currencies in tens"),
            ));
        }
        if c == "isk" && n % 100 != 0 {
            return Err(ValidationError::new(
                "amount",
                "must be divisible by 100 for isk: Stripe charges whole krónur",
            ));
        }
        Ok(())
    }

    /// A stable digest of the parameters. A second checkout for the same order is accepted only with
    /// the same fingerprint; anything else is a different request and is refused.
    ///
    /// A manual capture is part of it (the same order asked once for an authorization and once
    /// for a charge is two different requests); an automatic one adds nothing, so the
    /// fingerprints stored before authorizations existed still match their orders.
    pub fn fingerprint(&self) -> Fingerprint {
        let mut canonical = format!(
            "v1\n{}\n{}\n{}\n{}",
            self.amount.minor_units(),
            self.currency.as_str(),
            self.customer_id.as_str(),
            self.payment_method.as_str()
        );
        if self.capture_method == CaptureMethod::Manual {
            canonical.push_str("\ncapture=manual");
        }
        let digest = Sha256::digest(canonical.as_bytes());
        Fingerprint(format!("sha256:{}", lower_hex(&digest)))
    }
}

/// The request fingerprint stored with the operation (see [`ChargeParams::fingerprint`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// The digest of a request's canonical text (each kind writes its own, versioned).
    pub(crate) fn of(canonical: &str) -> Self {
        Fingerprint(format!(
            "sha256:{}",
            lower_hex(&Sha256::digest(canonical.as_bytes()))
        ))
    }

    /// Takes a stored fingerprint back as it was written.
    pub fn from_stored(raw: String) -> Self {
        Self(raw)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Who asked for an operation: the caller API Gateway authenticated, as its authorizer reported it.
///
/// Stored on the operation as `requested_by` for the audit trail, and part of nothing else (not the
/// fingerprint: the same order sent again by a retried caller is still the same order). Two kinds:
/// - `iam:<caller ARN>`: a SigV4-signed request, the ARN API Gateway's IAM authorizer verified
///   (`requestContext.authorizer.iam.userArn`, e.g. `arn:aws:sts::…:assumed-role/order-service/…`);
/// - `jwt:<subject>`: a request with a JWT the authorizer verified (issuer, audience, scope); the
///   subject is the token's `sub`, or its `client_id` for client-credentials tokens without one.
///
/// At most [`Principal::MAX_LEN`] characters, no control characters (it is logged and shown).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Principal(String);

impl Principal {
    pub const MAX_LEN: usize = 512;
    const FIELD: &'static str = "requested_by";

    /// An IAM caller, by the ARN the IAM authorizer verified.
    pub fn iam(caller_arn: &str) -> Result<Self, ValidationError> {
        if !caller_arn.starts_with("arn:") {
            return Err(ValidationError::new(
                Self::FIELD,
                "an IAM caller must be an ARN",
            ));
        }
        Self::checked(format!("iam:{caller_arn}"))
    }

    /// A JWT caller, by the token's `sub` (or `client_id`).
    pub fn jwt(subject: &str) -> Result<Self, ValidationError> {
        if subject.is_empty() {
            return Err(ValidationError::new(
                Self::FIELD,
                "a JWT subject must not be empty",
            ));
        }
        Self::checked(format!("jwt:{subject}"))
    }

    /// Takes a stored principal back (`iam:…` or `jwt:…`).
    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        match raw.split_once(':') {
            Some(("iam", arn)) => Self::iam(arn),
            Some(("jwt", subject)) => Self::jwt(subject),
            _ => Err(ValidationError::new(
                Self::FIELD,
                "must be iam:<caller ARN> or jwt:<subject>",
            )),
        }
    }

    fn checked(value: String) -> Result<Self, ValidationError> {
        if value.chars().count() > Self::MAX_LEN {
            return Err(ValidationError::new(
                Self::FIELD,
                format!("must be at most {} characters", Self::MAX_LEN),
            ));
        }
        if value.chars().any(char::is_control) {
            return Err(ValidationError::new(
                Self::FIELD,
                "must not contain control characters",
            ));
        }
        Ok(Self(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Who this is across sessions, for "is it the same caller": an assumed role's ARN without
    /// its session name (`iam:arn:aws:sts::…:assumed-role/order-service`), since every task or
    /// environment of the order service signs as its own session of the same role; anything else
    /// (an IAM user, a JWT subject) as it is. Role and session names hold no `/`.
    pub fn owner(&self) -> &str {
        const ASSUMED: &str = ":assumed-role/";
        let Some(arn) = self.0.strip_prefix("iam:") else {
            return &self.0;
        };
        let Some(at) = arn.find(ASSUMED) else {
            return &self.0;
        };
        let role_start = "iam:".len() + at + ASSUMED.len();
        match self.0[role_start..].find('/') {
            Some(end) => &self.0[..role_start + end],
            None => &self.0,
        }
    }

    /// Whether `other` is the same caller ([`Principal::owner`]).
    pub fn same_owner(&self, other: &Principal) -> bool {
        self.owner() == other.owner()
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Principal {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// `bytes` in lowercase hex, two digits a byte: the request fingerprint, the outcome event id and
/// the webhook signature all write their digests so.
pub fn lower_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * bytes.len());
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A capture's or refund's amount: the digits, not the minimum charge; each refusal beside
    /// the amount that passes.
    #[test]
    fn a_captured_or_refunded_amount_passes_the_digits_not_the_minimum() {
        let check = |n: i64, c: &str| {
            ChargeParams::check_divisible(Amount::new(n).unwrap(), &Currency::parse(c).unwrap())
                .map_err(|e| e.message)
        };
        assert_eq!(check(1000, "kwd"), Ok(()));
        assert!(check(1005, "kwd").is_err_and(|m| m.contains("must end in 0")));
        assert_eq!(check(10_000, "isk"), Ok(()));
        assert!(check(10_050, "isk").is_err_and(|m| m.contains("divisible by 100")));
        assert_eq!(
            check(1, "usd"),
            Ok(()),
            "a partial capture or refund below the minimum"
        );
        assert!(ChargeParams::check_chargeable(
            Amount::new(1).unwrap(),
            &Currency::parse("usd").unwrap()
        )
        .is_err());
    }

    /// Every capture's sort key reads back as itself; the first keeps the key every release
    /// wrote, and nothing but `sort_key`'s own spelling is a capture.
    #[test]
    fn capture_sort_keys_read_back() {
        for n in 1..=OperationKind::MAX_CAPTURES {
            let kind = OperationKind::capture_number(n).unwrap();
            assert_eq!(OperationKind::parse(&kind.sort_key()), Ok(kind.clone()));
            let shown = serde_json::to_value(&kind).unwrap();
            assert_eq!(
                serde_json::from_value::<OperationKind>(shown).unwrap(),
                kind
            );
        }
        assert_eq!(OperationKind::FIRST_CAPTURE.sort_key(), "capture");
        assert_eq!(
            serde_json::to_value(OperationKind::FIRST_CAPTURE).unwrap(),
            "capture"
        );
        assert_eq!(OperationKind::Capture(2).sort_key(), "capture#2");
        for bad in [
            "capture#1",
            "capture#02",
            "capture#+2",
            "capture#x",
            "capture#",
            "capture#11",
            "capture#0",
        ] {
            assert!(OperationKind::parse(bad).is_err(), "{bad}");
        }
    }

    /// Every charge attempt's sort key reads back as itself; the first keeps the key every
    /// release wrote (`charge`, shown `"charge"`), a later one is `charge#<n>`, shown
    /// `{"charge_attempt": n}`; nothing but `sort_key`'s own spelling is an attempt.
    #[test]
    fn charge_attempt_sort_keys_read_back() {
        for n in 1..=OperationKind::MAX_CHARGE_ATTEMPTS {
            let kind = OperationKind::charge_attempt(n).unwrap();
            assert!(kind.is_charge());
            assert_eq!(kind.attempt_no(), Some(n));
            assert_eq!(OperationKind::parse(&kind.sort_key()), Ok(kind.clone()));
            let shown = serde_json::to_value(&kind).unwrap();
            assert_eq!(
                serde_json::from_value::<OperationKind>(shown).unwrap(),
                kind
            );
        }
        assert_eq!(OperationKind::FIRST_CHARGE.sort_key(), "charge");
        assert_eq!(
            serde_json::to_value(OperationKind::FIRST_CHARGE).unwrap(),
            "charge"
        );
        assert_eq!(OperationKind::Charge(2).sort_key(), "charge#2");
        assert_eq!(
            serde_json::to_value(OperationKind::Charge(2)).unwrap(),
            serde_json::json!({"charge_attempt": 2})
        );
        for bad in [
            "charge#1",
            "charge#02",
            "charge#+2",
            "charge#x",
            "charge#",
            "charge#21",
            "charge#0",
        ] {
            assert!(OperationKind::parse(bad).is_err(), "{bad}");
        }
        assert!(
            serde_json::from_value::<OperationKind>(serde_json::json!({"charge_attempt": 0}))
                .is_err()
        );
        assert!(!OperationKind::FIRST_CAPTURE.is_charge());
    }

    /// A dispute's kind: sort key `dispute#<dp_…>`, shown `{"dispute": "dp_…"}`, both read
    /// back; an id that is no dispute's is refused at either door.
    #[test]
    fn a_dispute_s_kind_reads_back_and_a_bad_id_is_refused() {
        let kind = OperationKind::Dispute(DisputeId::parse("dp_1Abc").unwrap());
        assert_eq!(kind.sort_key(), "dispute#dp_1Abc");
        assert_eq!(kind.as_str(), "dispute");
        assert_eq!(OperationKind::parse("dispute#dp_1Abc"), Ok(kind.clone()));
        let shown = serde_json::to_value(&kind).unwrap();
        assert_eq!(shown, serde_json::json!({"dispute": "dp_1Abc"}));
        assert_eq!(
            serde_json::from_value::<OperationKind>(shown).unwrap(),
            kind
        );
        for bad in ["dispute#", "dispute#ch_1", "dispute#dp_1/x", "dispute"] {
            assert!(OperationKind::parse(bad).is_err(), "{bad}");
        }
        assert!(
            serde_json::from_value::<OperationKind>(serde_json::json!({"dispute": "pi_1"}))
                .is_err()
        );
    }

    #[test]
    fn amounts_stripe_refuses_are_refused_naming_the_rule() {
        let check = |n: i64, c: &str| {
            ChargeParams::check_chargeable(Amount::new(n).unwrap(), &Currency::parse(c).unwrap())
                .map_err(|e| e.message)
        };
        // (amount, currency, accepted, words the refusal must contain)
        let cases: &[(i64, &str, bool, &str)] = &[
            (50, "usd", true, ""),
            (49, "usd", false, "0.50 usd"),
            (30, "gbp", true, ""),
            (29, "gbp", false, "0.30 gbp"),
            (50, "jpy", true, ""),
            (49, "jpy", false, "50 jpy"),
            (399, "hkd", false, "4.00 hkd"),
            (999, "mxn", false, "10.00 mxn"),
            (1, "ars", true, ""),
            (1230, "kwd", true, ""),
            (1235, "kwd", false, "must end in 0"),
            (5, "bhd", false, "must end in 0"),
            (10_000, "isk", true, ""),
            (10_050, "isk", false, "divisible by 100"),
        ];
        for (n, c, ok, words) in cases {
            match check(*n, c) {
                Ok(()) => assert!(ok, "{n} {c} accepted"),
                Err(m) => {
                    assert!(!ok, "{n} {c} refused: {m}");
                    assert!(m.contains(words), "{n} {c}: {m}");
                }
            }
        }
        assert_eq!(stripe_rules::display(1250, "usd"), "12.50 usd");
        assert_eq!(stripe_rules::display(1230, "kwd"), "1.230 kwd");
        // Every currency of the tables is one the domain accepts.
        for c in stripe_rules::ZERO_DECIMAL
            .iter()
            .chain(stripe_rules::THREE_DECIMAL)
            .chain(stripe_rules::MINIMUMS.iter().map(|(c, _)| c))
        {
            assert!(Currency::parse(c).is_ok(), "{c}");
        }
    }

    #[test]
    fn order_id_rules() {
        assert!(OrderId::parse("ord_123-A.b").is_ok());
        assert_eq!(OrderId::parse("").unwrap_err().field, "order_id");
        assert!(OrderId::parse("has space").is_err());
        assert!(OrderId::parse("tab\t").is_err());
        assert!(OrderId::parse("é").is_err());
        assert!(OrderId::parse(&"x".repeat(128)).is_ok());
        assert!(OrderId::parse(&"x".repeat(129)).is_err());
    }

    #[test]
    fn payment_intent_ids_are_parsed_by_one_rule() {
        for good in ["pi_3MtwBwLkdIwHu7ix28a3tqPa", "pi_x", "pi_A_1"] {
            let id = PaymentIntentId::parse(good).unwrap();
            assert_eq!(id.as_str(), good);
            assert_eq!(id.to_string(), good);
            let json: PaymentIntentId = serde_json::from_str(&format!("{good:?}")).unwrap();
            assert_eq!(json, id);
        }
        assert!(PaymentIntentId::parse(&format!("pi_{}", "a".repeat(250))).is_ok());
        for bad in [
            "",
            "pi",
            "pi_",
            "ch_123",
            "PI_x",
            "pi_x y",
            "pi_é",
            "seti_1",
            "pi_../../v1/customers",
            "pi_x?expand=1",
        ] {
            let err = PaymentIntentId::parse(bad).unwrap_err();
            assert_eq!(err.field, "payment_intent", "{bad}");
            assert!(serde_json::from_str::<PaymentIntentId>(&format!("{bad:?}")).is_err());
        }
        assert!(PaymentIntentId::parse(&format!("pi_{}", "a".repeat(251))).is_err());
    }

    #[test]
    fn amount_bounds() {
        assert!(Amount::new(0).is_err());
        assert!(Amount::new(-5).is_err());
        assert_eq!(Amount::new(1).unwrap().minor_units(), 1);
        assert!(Amount::new(99_999_999).is_ok());
        assert!(Amount::new(100_000_000).is_err());
        // Money is never a float on the wire either.
        assert!(serde_json::from_str::<Amount>("12.5").is_err());
        assert!(serde_json::from_str::<Amount>("1250").is_ok());
    }

    #[test]
    fn currency_is_iso_and_lowercase() {
        assert!(
            ISO_4217.windows(2).all(|w| w[0] < w[1]),
            "list must stay sorted"
        );
        assert_eq!(Currency::parse("USD").unwrap().as_str(), "usd");
        assert_eq!(Currency::parse("eur").unwrap().as_str(), "eur");
        assert!(Currency::parse("usdd").is_err());
        assert!(Currency::parse("xyz").is_err());
        assert!(Currency::parse("").is_err());
    }

    #[test]
    fn stripe_ids() {
        assert!(CustomerId::parse("cus_Abc123").is_ok());
        assert!(CustomerId::parse("cus_").is_err());
        assert!(CustomerId::parse("pm_card_visa").is_err());
        assert!(PaymentMethodId::parse("pm_card_visa").is_ok());
        assert!(PaymentMethodId::parse("pm_card_chargeDeclined").is_ok());
        assert!(PaymentMethodId::parse("pm_x;DROP").is_err());
        assert_eq!(
            PaymentMethodId::parse("").unwrap_err().field,
            "payment_method"
        );
    }

    #[test]
    fn idempotency_key_is_derived_from_operation_id_only() {
        let id = OperationId::parse("6f1c2a4e-8a3b-4c5d-9e0f-112233445566").unwrap();
        let key = id.idempotency_key();
        assert_eq!(
            key.as_str(),
            "payment-op:6f1c2a4e-8a3b-4c5d-9e0f-112233445566"
        );
        assert!(key.as_str().len() <= IdempotencyKey::MAX_LEN);
        assert_eq!(key, id.idempotency_key());
        let cancel = id.cancel_idempotency_key();
        assert_eq!(
            cancel.as_str(),
            "payment-op-cancel:6f1c2a4e-8a3b-4c5d-9e0f-112233445566"
        );
        assert_ne!(cancel, key, "a cancel never reuses the create's key");
        assert_eq!(cancel, id.cancel_idempotency_key());
    }

    #[test]
    fn fingerprint_changes_with_any_parameter() {
        let base = crate::testing::charge_params();
        let mut other = base.clone();
        assert_eq!(base.fingerprint(), other.fingerprint());
        other.amount = Amount::new(1001).unwrap();
        assert_ne!(base.fingerprint(), other.fingerprint());
        let mut other = base.clone();
        other.currency = Currency::parse("eur").unwrap();
        assert_ne!(base.fingerprint(), other.fingerprint());
    }
    #[test]
    fn principals() {
        let iam =
            Principal::iam("arn:aws:sts::123456789012:assumed-role/order-service/i-1").unwrap();
        assert_eq!(
            iam.as_str(),
            "iam:arn:aws:sts::123456789012:assumed-role/order-service/i-1"
        );
        assert_eq!(Principal::parse(iam.as_str()).unwrap(), iam);
        let jwt = Principal::jwt("order-service@clients").unwrap();
        assert_eq!(jwt.as_str(), "jwt:order-service@clients");
        assert_eq!(Principal::parse(jwt.as_str()).unwrap(), jwt);
        assert!(Principal::iam("order-service").is_err());
        assert!(Principal::jwt("").is_err());
        assert!(Principal::jwt("a\nb").is_err());
        assert!(Principal::jwt(&"x".repeat(Principal::MAX_LEN)).is_err());
        assert!(Principal::parse("anonymous").is_err());
        assert!(Principal::parse("jwt:").is_err());
    }

    #[test]
    fn the_owner_of_a_principal_is_its_role_across_sessions() {
        let iam = |arn: &str| Principal::iam(arn).unwrap();
        let task_1 = iam("arn:aws:sts::123456789012:assumed-role/order-service/i-1");
        assert_eq!(
            task_1.owner(),
            "iam:arn:aws:sts::123456789012:assumed-role/order-service"
        );
        // Another session of the same role is the same caller; another role, account or kind
        // is not.
        assert!(task_1.same_owner(&iam(
            "arn:aws:sts::123456789012:assumed-role/order-service/ecs-task-9f"
        )));
        for other in [
            iam("arn:aws:sts::123456789012:assumed-role/reporting/i-1"),
            iam("arn:aws:sts::210987654321:assumed-role/order-service/i-1"),
            iam("arn:aws:sts::123456789012:assumed-role/order-service-2/i-1"),
            iam("arn:aws:iam::123456789012:user/order-service"),
            Principal::jwt("order-service").unwrap(),
        ] {
            assert!(!task_1.same_owner(&other), "{other:?}");
        }
        // Users and JWT subjects are compared whole.
        let user = iam("arn:aws:iam::123456789012:user/ops/alice");
        assert_eq!(user.owner(), user.as_str());
        assert!(!user.same_owner(&iam("arn:aws:iam::123456789012:user/ops/bob")));
        let jwt = Principal::jwt("client-a/assumed-role/x").unwrap();
        assert_eq!(jwt.owner(), jwt.as_str());
        // An assumed-role ARN without a session (not what the authorizer sends) stays whole.
        let bare = iam("arn:aws:sts::123456789012:assumed-role/order-service");
        assert_eq!(bare.owner(), bare.as_str());
    }
}
