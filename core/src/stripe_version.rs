//! Stripe's API versions this engine reads, and the words that differ between them.
//!
//! Stripe answers each request in the version its `Stripe-Version` header names (else the
//! account's default), and renders each event in its webhook endpoint's or event destination's
//! version: one engine can meet objects in either, so every rule here accepts both versions' words
//! whatever version the client pins. Read from Stripe's changelog (docs.stripe.com/changelog) from
//! the pin to the current version, for the fields this engine reads:
//! - `2025-03-31.basil`: an authorization Stripe cancels at its expiry reports
//!   `cancellation_reason: expired` (before: `automatic`); a partial capture or a cancel of an
//!   uncaptured payment no longer creates a Refund (before: the released remainder appears as a
//!   refund with `reason: expired_uncaptured_charge`, no metadata of ours, `succeeded`).
//! - `2024-10-28.acacia`: `refund.created`, `refund.updated` and `refund.failed` are sent for card
//!   refunds too (before: `charge.refund.updated` only); the events function reads both.
//!
//! Nothing else this engine reads (a PaymentIntent's `status`, `amount`, `amount_received`,
//! `currency`, `metadata`, `latest_charge.payment_method_details.card.capture_before`,
//! `last_payment_error`; a refund's `status`, `amount`, `failure_reason`, `metadata`,
//! `payment_intent`; lists, search, the event envelope) changed between them.

use std::fmt;

/// The version the client pins unless configured otherwise.
pub const PINNED: &str = "2024-06-20";

/// Stripe's current version (December 2026).
pub const CURRENT: &str = "2026-09-30.endive";

/// The versions this engine was read against and is tested under; a configured pin must be one.
pub const KNOWN: [&str; 2] = [PINNED, CURRENT];

/// The first version without remainder refunds and with `expired` for a lapse.
const BASIL: &str = "2025-03-31";

/// `cancellation_reason` of an authorization Stripe canceled at its expiry: `automatic` before
/// basil, `expired` since. Either means the hold lapsed.
pub const LAPSE_REASONS: [&str; 2] = ["automatic", "expired"];

/// A refund's `reason` for the released part of an authorization (a partial capture's remainder,
/// a canceled or lapsed hold) on versions before basil: Stripe's own, never one we create.
pub const RELEASED_REMAINDER_REASON: &str = "expired_uncaptured_charge";

/// Whether `cancellation_reason` says Stripe let the authorization lapse, in either version.
pub fn is_lapse(cancellation_reason: Option<&str>) -> bool {
    cancellation_reason.is_some_and(|r| LAPSE_REASONS.contains(&r))
}

/// A Stripe API version this engine knows ([`KNOWN`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StripeVersion(&'static str);

/// A configured version that is not one this engine was read against.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Stripe API version {given:?} is not one this engine knows (known: {known})")]
pub struct UnknownVersion {
    pub given: String,
    pub known: String,
}

impl StripeVersion {
    pub const PINNED: StripeVersion = StripeVersion(PINNED);
    pub const CURRENT: StripeVersion = StripeVersion(CURRENT);

    pub fn parse(s: &str) -> Result<Self, UnknownVersion> {
        KNOWN
            .iter()
            .find(|k| **k == s)
            .map(|k| StripeVersion(k))
            .ok_or_else(|| UnknownVersion {
                given: s.to_owned(),
                known: KNOWN.join(", "),
            })
    }

    pub fn as_str(&self) -> &'static str {
        self.0
    }

    /// Whether a partial capture or a cancel creates a refund for the released part (before basil).
    pub fn creates_remainder_refunds(&self) -> bool {
        date(self.0) < BASIL
    }

    /// The `cancellation_reason` of a lapsed authorization in this version.
    pub fn lapse_reason(&self) -> &'static str {
        if self.creates_remainder_refunds() {
            LAPSE_REASONS[0]
        } else {
            LAPSE_REASONS[1]
        }
    }
}

impl Default for StripeVersion {
    fn default() -> Self {
        Self::PINNED
    }
}

impl fmt::Display for StripeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// The date part of a version (`2026-09-30.endive` → `2026-09-30`), compared as text (ISO dates).
fn date(version: &str) -> &str {
    version.split('.').next().unwrap_or(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_known_versions_parse_and_nothing_else() {
        assert_eq!(StripeVersion::parse(PINNED), Ok(StripeVersion::PINNED));
        assert_eq!(StripeVersion::parse(CURRENT), Ok(StripeVersion::CURRENT));
        for bad in [
            "",
            "2024-06-21",
            "2026-09-30",
            "latest",
            "2025-03-31.basil ",
        ] {
            let e = StripeVersion::parse(bad).unwrap_err();
            assert!(e.to_string().contains(PINNED), "{e}");
        }
        assert_eq!(StripeVersion::default(), StripeVersion::PINNED);
    }

    #[test]
    fn each_version_says_its_own_words_and_both_are_read() {
        let (pinned, current) = (StripeVersion::PINNED, StripeVersion::CURRENT);
        assert!(pinned.creates_remainder_refunds());
        assert!(!current.creates_remainder_refunds());
        assert_eq!(
            (pinned.lapse_reason(), current.lapse_reason()),
            ("automatic", "expired")
        );
        assert!(is_lapse(Some("automatic")) && is_lapse(Some("expired")));
        for not in [
            None,
            Some("requested_by_customer"),
            Some("abandoned"),
            Some(""),
        ] {
            assert!(!is_lapse(not), "{not:?}");
        }
    }
}
