//! Stripe's webhook signature, as Stripe documents it and its official libraries implement it
//! (stripe-python `WebhookSignature.verify_header`):
//!
//! - header `Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>…]` (other schemes, such as
//!   `v0` test signatures, are ignored);
//! - each `v1` is HMAC-SHA256 of `"<t>.<raw body>"` keyed with the endpoint secret (`whsec_…`,
//!   the whole string as the key), lower-case hex;
//! - any one `v1` may match (Stripe signs with every live secret while one is being rolled);
//! - the comparison is constant time (`Mac::verify_slice`);
//! - the timestamp must be within the tolerance (300 s, the libraries' default) of *our* clock,
//!   which stops replays of a captured request. Stripe's libraries only reject old timestamps;
//!   we also reject ones from the future by more than the tolerance.
//!
//! Verification happens before the body is parsed and before anything is written.

use std::fmt;
use std::time::Duration;

use charge_core::time::Timestamp;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// How far the signed timestamp may be from our clock.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// The largest body accepted. Stripe's PaymentIntent events are a few KiB; this bounds the HMAC
/// and the parse whatever a caller sends.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// The endpoint's signing secret. Never printed: `Debug` redacts it.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(String);

/// Words that mark a secret somebody typed instead of copying Stripe's (`whsec_placeholder` was
/// in our own docs once: anyone who read them could sign events for a stack that stored it).
const PLACEHOLDER_WORDS: &[&str] = &[
    "placeholder",
    "example",
    "changeme",
    "replace",
    "dummy",
    "sample",
    "your",
    "xxxx",
    "secret",
];

/// The fewest letters and digits after `whsec_`: Stripe's dashboard secrets have 32, the Stripe
/// CLI's 64.
pub const MIN_SECRET_CHARS: usize = 32;

impl WebhookSecret {
    /// Accepts only what has Stripe's form: `whsec_` and at least [`MIN_SECRET_CHARS`] ASCII
    /// letters and digits, with at least 10 different ones (a random secret has about 25), and
    /// no placeholder word. A made-up secret is refused before it can authenticate anything.
    pub fn parse(raw: &str) -> Result<Self, SignatureError> {
        let raw = raw.trim();
        let Some(rest) = raw.strip_prefix("whsec_") else {
            return Err(SignatureError::BadSecret("it does not start with whsec_"));
        };
        if rest.len() < MIN_SECRET_CHARS || !rest.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(SignatureError::BadSecret(
                "it is not whsec_ followed by at least 32 letters and digits, as Stripe shows it",
            ));
        }
        let lower = rest.to_ascii_lowercase();
        let distinct = lower
            .bytes()
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        if distinct < 10 || PLACEHOLDER_WORDS.iter().any(|w| lower.contains(w)) {
            return Err(SignatureError::BadSecret(
                "it looks made up (a placeholder), not a secret Stripe generated",
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC accepts keys of any length; this cannot fail.
        <Hmac<Sha256> as KeyInit>::new_from_slice(self.0.as_bytes())
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"))
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

/// Why a delivery was refused. The messages never include the secret or a signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the Stripe-Signature header is missing")]
    MissingHeader,
    #[error("the Stripe-Signature header has no readable timestamp")]
    NoTimestamp,
    #[error("the Stripe-Signature header has no v1 signature")]
    NoSignature,
    #[error("no v1 signature matches the payload")]
    Mismatch,
    #[error("the signed timestamp is outside the tolerance")]
    OutsideTolerance,
    #[error("the body is larger than {MAX_BODY_BYTES} bytes")]
    BodyTooLarge,
    #[error("the webhook signing secret is refused: {0}")]
    BadSecret(&'static str),
}

impl SignatureError {
    /// A short, fixed label for the `Reason` of the `WebhookRejected` metric and the log.
    pub fn as_str(&self) -> &'static str {
        match self {
            SignatureError::MissingHeader => "missing_header",
            SignatureError::NoTimestamp => "no_timestamp",
            SignatureError::NoSignature => "no_signature",
            SignatureError::Mismatch => "signature_mismatch",
            SignatureError::OutsideTolerance => "outside_tolerance",
            SignatureError::BodyTooLarge => "body_too_large",
            SignatureError::BadSecret(_) => "bad_secret",
        }
    }
}

/// The hex HMAC-SHA256 of `"<t>.<body>"` (Stripe's `v1`).
pub fn compute_v1(secret: &WebhookSecret, timestamp: i64, body: &[u8]) -> String {
    let mut mac = secret.mac();
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    charge_core::domain::lower_hex(&mac.finalize().into_bytes())
}

/// The header Stripe would send for `body` at `timestamp` (what the simulator sends).
pub fn sign_header(secret: &WebhookSecret, timestamp: i64, body: &[u8]) -> String {
    format!("t={timestamp},v1={}", compute_v1(secret, timestamp, body))
}

/// Checks a delivery against every secret of the endpoint (two while one is being rolled). `now`
/// is the injected clock; see the module docs for the rules.
pub fn verify(
    header: Option<&str>,
    body: &[u8],
    secrets: &[WebhookSecret],
    now: Timestamp,
    tolerance: Duration,
) -> Result<i64, SignatureError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(SignatureError::BodyTooLarge);
    }
    let header = header
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .ok_or(SignatureError::MissingHeader)?;
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for item in header.split(',') {
        let Some((key, value)) = item.trim().split_once('=') else {
            continue;
        };
        match key {
            "t" if timestamp.is_none() => timestamp = value.parse::<i64>().ok(),
            "v1" => signatures.push(value),
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(SignatureError::NoTimestamp)?;
    if signatures.is_empty() {
        return Err(SignatureError::NoSignature);
    }
    let tags: Vec<Vec<u8>> = signatures.iter().filter_map(|s| decode_hex(s)).collect();
    let matched = secrets.iter().any(|secret| {
        let mut mac = secret.mac();
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        tags.iter().any(|tag| mac.clone().verify_slice(tag).is_ok())
    });
    if !matched {
        return Err(SignatureError::Mismatch);
    }
    let now_secs = now.as_millis().div_euclid(1000);
    let tolerance = i64::try_from(tolerance.as_secs()).unwrap_or(i64::MAX);
    if timestamp.abs_diff(now_secs) > tolerance.unsigned_abs() {
        return Err(SignatureError::OutsideTolerance);
    }
    Ok(timestamp)
}

fn decode_hex(raw: &str) -> Option<Vec<u8>> {
    let raw = raw.as_bytes();
    if raw.len() % 2 != 0 || raw.len() > 128 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    raw.chunks(2)
        .map(|pair| Some((nibble(pair[0])? << 4) | nibble(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_9Tq2LmV7xK4pR8sWn3Yb6Zc1Hd5Jf0GaEe";

    fn secret() -> WebhookSecret {
        WebhookSecret::parse(SECRET).unwrap()
    }

    const BODY: &[u8] = br#"{"id":"evt_1","type":"payment_intent.succeeded"}"#;
    const T: i64 = 1_700_000_000;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_millis(secs * 1000)
    }

    #[test]
    fn known_vector() {
        // HMAC-SHA256(key=SECRET, "1700000000.{body}"), computed independently with Python's
        // hmac module (the same call stripe-python's _compute_signature makes).
        assert_eq!(
            compute_v1(&secret(), T, BODY),
            "39191e087bd28ddd12d80fbe6c1d3c0e1e61a501ea23afe92f7a5f6f6e7984a1"
        );
    }

    #[test]
    fn table() {
        let good = sign_header(&secret(), T, BODY);
        let other = WebhookSecret::parse("whsec_Other7Key2Mq9Zr4Lp8Wx1Cv6Bn3Ty5Hs0").unwrap();
        let wrong_secret = sign_header(&other, T, BODY);
        let rotated = format!(
            "t={T},v1={},v1={}",
            compute_v1(&other, T, BODY),
            compute_v1(&secret(), T, BODY)
        );
        let with_v0 = format!("{good},v0=deadbeef");
        let altered: &[u8] = br#"{"id":"evt_1","type":"payment_intent.succeedeD"}"#;
        let big = vec![b' '; MAX_BODY_BYTES + 1];
        let tol = DEFAULT_TOLERANCE;
        // (name, header, body, our clock in seconds, expected result)
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            &'a [u8],
            i64,
            Result<i64, SignatureError>,
        );
        let cases: Vec<Case<'_>> = vec![
            ("valid", Some(&good), BODY, T, Ok(T)),
            ("valid at the edge", Some(&good), BODY, T + 300, Ok(T)),
            ("valid, clock behind", Some(&good), BODY, T - 300, Ok(T)),
            ("any v1 matches", Some(&rotated), BODY, T, Ok(T)),
            ("other schemes ignored", Some(&with_v0), BODY, T, Ok(T)),
            (
                "missing header",
                None,
                BODY,
                T,
                Err(SignatureError::MissingHeader),
            ),
            (
                "empty header",
                Some(" "),
                BODY,
                T,
                Err(SignatureError::MissingHeader),
            ),
            (
                "wrong secret",
                Some(&wrong_secret),
                BODY,
                T,
                Err(SignatureError::Mismatch),
            ),
            (
                "altered body",
                Some(&good),
                altered,
                T,
                Err(SignatureError::Mismatch),
            ),
            (
                "stale",
                Some(&good),
                BODY,
                T + 301,
                Err(SignatureError::OutsideTolerance),
            ),
            (
                "future",
                Some(&good),
                BODY,
                T - 301,
                Err(SignatureError::OutsideTolerance),
            ),
            (
                "no timestamp",
                Some("v1=abcd"),
                BODY,
                T,
                Err(SignatureError::NoTimestamp),
            ),
            (
                "bad timestamp",
                Some("t=soon,v1=ab"),
                BODY,
                T,
                Err(SignatureError::NoTimestamp),
            ),
            (
                "no v1",
                Some("t=1700000000,v0=ab"),
                BODY,
                T,
                Err(SignatureError::NoSignature),
            ),
            (
                "not hex",
                Some("t=1700000000,v1=zz"),
                BODY,
                T,
                Err(SignatureError::Mismatch),
            ),
            (
                "odd hex",
                Some("t=1700000000,v1=abc"),
                BODY,
                T,
                Err(SignatureError::Mismatch),
            ),
            (
                "garbage",
                Some(",,=,=="),
                BODY,
                T,
                Err(SignatureError::NoTimestamp),
            ),
            (
                "too big",
                Some(&good),
                &big,
                T,
                Err(SignatureError::BodyTooLarge),
            ),
        ];
        for (name, header, body, now, want) in cases {
            assert_eq!(
                verify(header, body, &[secret()], at(now), tol),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn a_signature_is_bound_to_its_timestamp() {
        let v1 = compute_v1(&secret(), T, BODY);
        let moved = format!("t={},v1={v1}", T + 10);
        assert_eq!(
            verify(Some(&moved), BODY, &[secret()], at(T), DEFAULT_TOLERANCE),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn secrets_never_print() {
        assert_eq!(format!("{:?}", secret()), "WebhookSecret(<redacted>)");
    }

    #[test]
    fn only_secrets_of_stripes_form_are_accepted() {
        for bad in [
            "sk_test_123",
            "whsec_",
            "whsec_placeholder",
            // Long enough, but a placeholder or typed by hand.
            "whsec_placeholderPLACEHOLDERplaceholder123",
            "whsec_REPLACEwithYOURendpointSIGNINGkey99",
            "whsec_exampleExampleExample0123456789ab",
            "whsec_00000000000000000000000000000000",
            "whsec_abababababababababababababababababab",
            // Not letters and digits.
            "whsec_9Tq2LmV7xK4pR8sWn3Yb6Zc1Hd5Jf0G-Ee",
            "whsec_9Tq2LmV7xK4pR8sWn3Yb6Zc1Hd5Jf0G",
        ] {
            assert!(
                matches!(WebhookSecret::parse(bad), Err(SignatureError::BadSecret(_))),
                "{bad} was accepted"
            );
        }
        // The shapes Stripe issues: the dashboard's 32 characters, the CLI's 64 hex digits.
        assert!(WebhookSecret::parse("whsec_Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0fG").is_ok());
        assert!(WebhookSecret::parse(
            "whsec_4f1c2a4e8a3b4c5d9e0f1122334455667788990aabbccddeeff0011223344a"
        )
        .is_ok());
    }

    #[test]
    fn either_secret_of_a_rotation_verifies() {
        let old = secret();
        let new = WebhookSecret::parse("whsec_Other7Key2Mq9Zr4Lp8Wx1Cv6Bn3Ty5Hs0").unwrap();
        let both = [new.clone(), old.clone()];
        for signer in [&old, &new] {
            let header = sign_header(signer, T, BODY);
            assert_eq!(
                verify(Some(&header), BODY, &both, at(T), DEFAULT_TOLERANCE),
                Ok(T)
            );
        }
        let header = sign_header(&old, T, BODY);
        assert_eq!(
            verify(Some(&header), BODY, &[new], at(T), DEFAULT_TOLERANCE),
            Err(SignatureError::Mismatch)
        );
    }
}
