//! Stripe API versions: what a request's `Stripe-Version` header (else the account's default) and a
//! webhook endpoint's version change in what the simulator answers and makes.
//!
//! The engine keeps the pinned version's words (`2024-06-20`); an answer in a later version is
//! rewritten at the edge ([`ApiVersion::render`]). What differs (docs.stripe.com/changelog,
//! `2025-03-31.basil`): an authorization Stripe cancels at its expiry reports
//! `cancellation_reason: expired` instead of `automatic`; a partial capture or a cancel of an
//! authorization no longer makes a refund of the released part (before basil: a `succeeded`
//! refund, `reason: expired_uncaptured_charge`, no metadata). Whether such a refund is made
//! follows the version of the request that captures or cancels, and the account's default for a
//! lapse (Stripe's own action).

use std::borrow::Cow;

use crate::wire::ApiError;

/// The version the simulator answers in unless told otherwise: the client's pin.
pub const PINNED: &str = "2024-06-20";
/// Stripe's current version (December 2026).
pub const CURRENT: &str = "2026-09-30.endive";
/// The first version without remainder refunds, and with `expired` for a lapse.
const BASIL: &str = "2025-03-31";
/// A refund's reason for an authorization's released part, before basil.
pub const RELEASED_REASON: &str = "expired_uncaptured_charge";

/// A Stripe API version: `YYYY-MM-DD`, optionally `.name` (`2026-09-30.endive`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiVersion(String);

impl Default for ApiVersion {
    fn default() -> Self {
        ApiVersion(PINNED.to_owned())
    }
}

impl ApiVersion {
    /// Stripe refuses a version that is not a date (optionally named):
    /// `400 invalid_request_error`, "Invalid Stripe API version: …".
    pub fn parse(raw: &str) -> Result<Self, ApiError> {
        let (date, name) = raw.split_once('.').unwrap_or((raw, ""));
        let b = date.as_bytes();
        let is_date = b.len() == 10
            && b[4] == b'-'
            && b[7] == b'-'
            && b.iter()
                .enumerate()
                .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
        let is_name = name.bytes().all(|c| c.is_ascii_lowercase());
        if is_date && is_name && !raw.ends_with('.') {
            Ok(ApiVersion(raw.to_owned()))
        } else {
            Err(ApiError::new(
                400,
                "invalid_request_error",
                format!("Invalid Stripe API version: {raw}"),
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn date(&self) -> &str {
        self.0.split('.').next().unwrap_or(&self.0)
    }

    /// Before basil: a partial capture or a cancel of an authorization makes a refund of the
    /// released part, and a lapse says `automatic`.
    pub fn makes_remainder_refunds(&self) -> bool {
        self.date() < BASIL
    }

    /// An answer (a PaymentIntent, a list, an event's object) as this version writes it: the
    /// engine's `automatic` lapse becomes `expired` from basil on. Nothing else the simulator
    /// writes differs.
    pub fn render<'a>(&self, body: &'a str) -> Cow<'a, str> {
        const PINNED_LAPSE: &str = "\"cancellation_reason\":\"automatic\"";
        if self.makes_remainder_refunds() || !body.contains(PINNED_LAPSE) {
            return Cow::Borrowed(body);
        }
        Cow::Owned(body.replace(PINNED_LAPSE, "\"cancellation_reason\":\"expired\""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_as_stripe_names_them_and_render_their_words() {
        for ok in [PINNED, CURRENT, "2025-03-31.basil", "2024-09-30.acacia"] {
            assert_eq!(ApiVersion::parse(ok).unwrap().as_str(), ok);
        }
        for bad in [
            "",
            "latest",
            "2024-6-20",
            "2024-06-20.",
            "2024-06-20.Basil",
            "2024-06-20x",
        ] {
            let e = ApiVersion::parse(bad).unwrap_err();
            assert!(e.message.contains("Invalid Stripe API version"), "{bad}");
        }
        let body = r#"{"cancellation_reason":"automatic","status":"canceled"}"#;
        let pinned = ApiVersion::default();
        let current = ApiVersion::parse(CURRENT).unwrap();
        assert!(pinned.makes_remainder_refunds() && !current.makes_remainder_refunds());
        assert_eq!(pinned.render(body), body);
        assert_eq!(
            current.render(body),
            r#"{"cancellation_reason":"expired","status":"canceled"}"#
        );
        let merchant = r#"{"cancellation_reason":"requested_by_customer"}"#;
        assert_eq!(current.render(merchant), merchant);
    }
}
