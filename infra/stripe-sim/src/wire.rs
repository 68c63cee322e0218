//! Stripe wire shapes: the error envelope, canned errors, ID generation, and
//! the search query language subset.

use rand::Rng;
use serde_json::{json, Map, Value};

/// A Stripe-shaped API error plus the HTTP status it is sent with.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// `error.type`, e.g. `invalid_request_error`, `card_error`.
    pub kind: &'static str,
    /// `error.code`.
    pub code: Option<&'static str>,
    /// `error.message`.
    pub message: String,
    /// `error.param`.
    pub param: Option<String>,
}

impl ApiError {
    pub(crate) fn new(status: u16, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            code: None,
            message: message.into(),
            param: None,
        }
    }

    pub(crate) fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub(crate) fn param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// `400 invalid_request_error` with a code and a param.
    pub fn invalid(code: &'static str, param: &str, message: impl Into<String>) -> Self {
        ApiError::new(400, "invalid_request_error", message)
            .code(code)
            .param(param)
    }

    /// `400 invalid_request_error` for an amount in a digit Stripe does not move in `currency`
    /// (docs.stripe.com/currencies: three-decimal currencies' last digit 0 "for the standard
    /// payment flows, including Payment Intents, Refunds, and Disputes"; ISK divisible by 100),
    /// or `None` when the amount passes. Stripe documents the rule and the 400, not a code, so
    /// none is sent.
    pub fn indivisible(param: &str, amount: i64, currency: &str) -> Option<Self> {
        const THREE_DECIMAL: [&str; 5] = ["bhd", "jod", "kwd", "omr", "tnd"];
        let why = if THREE_DECIMAL.contains(&currency) && amount % 10 != 0 {
            format!("Invalid {param}: {amount} {currency} must be rounded to the nearest ten (the last digit must be 0).")
        } else if currency == "isk" && amount % 100 != 0 {
            format!("Invalid {param}: {amount} isk must be divisible by 100.")
        } else {
            return None;
        };
        Some(ApiError::new(400, "invalid_request_error", why).param(param))
    }

    /// `400 parameter_missing`.
    pub fn missing(param: &str) -> Self {
        ApiError::invalid(
            "parameter_missing",
            param,
            format!("Missing required param: {param}."),
        )
    }

    /// `404 resource_missing` for an unknown PaymentIntent.
    pub fn no_such_payment_intent(id: &str) -> Self {
        ApiError::new(
            404,
            "invalid_request_error",
            format!("No such payment_intent: '{id}'"),
        )
        .code("resource_missing")
        .param("intent")
    }

    /// `404` for a URL the simulator does not serve.
    pub fn unrecognized_url(method: &str, path: &str) -> Self {
        ApiError::new(
            404,
            "invalid_request_error",
            format!("Unrecognized request URL ({method}: {path}). stripe-sim implements only PaymentIntents create, retrieve, list, search, cancel and capture, and Refunds."),
        )
    }

    /// `400 payment_intent_unexpected_state`: the PaymentIntent's status does not allow `action`
    /// (e.g. a cancel of one that succeeded or was canceled already).
    pub fn unexpected_state(action: &str, status: &str, allowed: &str) -> Self {
        let done = if action.ends_with('e') { "d" } else { "ed" };
        ApiError::new(
            400,
            "invalid_request_error",
            format!(
                "You cannot {action} this PaymentIntent because it has a status of {status}. \
                 Only a PaymentIntent with one of the following statuses may be {action}{done}: {allowed}."
            ),
        )
        .code("payment_intent_unexpected_state")
    }

    /// `401` for a missing or wrong API key. Never echoes the full key.
    pub fn unauthorized(provided: Option<&str>) -> Self {
        let message = match provided {
            None | Some("") => "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').".to_string(),
            Some(k) => format!("Invalid API Key provided: {}", mask_key(k)),
        };
        ApiError::new(401, "invalid_request_error", message)
    }

    /// `400 idempotency_error`: same key, different parameters.
    pub fn idempotency_mismatch(key: &str) -> Self {
        ApiError::new(
            400,
            "idempotency_error",
            format!("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '{key}' if you meant to execute a different request."),
        )
    }

    /// `400` for an `Idempotency-Key` longer than 255 characters.
    pub fn idempotency_key_too_long(len: usize) -> Self {
        ApiError::new(
            400,
            "invalid_request_error",
            format!(
                "Invalid idempotency key: keys must be at most 255 characters long (got {len})."
            ),
        )
        .param("Idempotency-Key")
    }

    /// `409 idempotency_key_in_use`.
    pub fn key_in_use() -> Self {
        ApiError::new(
            409,
            "invalid_request_error",
            "There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): please try again later.",
        )
        .code("idempotency_key_in_use")
    }

    /// `429 rate_limit`.
    pub fn rate_limited() -> Self {
        ApiError::new(
            429,
            "invalid_request_error",
            "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.",
        )
        .code("rate_limit")
    }

    /// `500 api_error`.
    pub fn server_error() -> Self {
        ApiError::new(
            500,
            "api_error",
            "An unknown error occurred while processing your request (stripe-sim injected fault).",
        )
    }

    /// The `Stripe-Should-Retry` header value, where Stripe sends one.
    pub fn should_retry(&self) -> Option<bool> {
        match (self.status, self.kind, self.code) {
            (409, _, Some("idempotency_key_in_use")) => Some(true),
            (500, "api_error", _) => Some(false),
            (_, "idempotency_error", _) => Some(false),
            _ => None,
        }
    }

    /// The JSON body `{"error": {...}}`; absent fields are omitted. (A decline's `card_error`,
    /// which carries its PaymentIntent, is written by the engine's `declined_answer`.)
    pub fn to_json(&self) -> Value {
        let mut e = Map::new();
        e.insert("type".into(), json!(self.kind));
        e.insert("message".into(), json!(self.message));
        if let Some(c) = self.code {
            e.insert("code".into(), json!(c));
            e.insert("doc_url".into(), json!(doc_url(c)));
        }
        if let Some(p) = &self.param {
            e.insert("param".into(), json!(p));
        }
        json!({ "error": e })
    }
}

/// `error.doc_url` for an error code.
pub(crate) fn doc_url(code: &str) -> String {
    format!(
        "https://stripe.com/docs/error-codes/{}",
        code.replace('_', "-")
    )
}

/// Masks an API key: keeps the `sk_test_`-style prefix and the last 4
/// characters of long keys, stars the rest.
pub fn mask_key(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let prefix = key
        .rfind('_')
        .map(|i| key[..=i].chars().count())
        .unwrap_or(0);
    let prefix = prefix.min(chars.len().saturating_sub(1)).min(8);
    let tail = if chars.len() >= prefix + 12 { 4 } else { 0 };
    let mut out: String = chars[..prefix].iter().collect();
    out.extend(std::iter::repeat_n('*', chars.len() - prefix - tail));
    out.extend(&chars[chars.len() - tail..]);
    out
}

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// `prefix` followed by `n` random alphanumerics.
pub(crate) fn random_id(rng: &mut impl Rng, prefix: &str, n: usize) -> String {
    let mut s = String::with_capacity(prefix.len() + n);
    s.push_str(prefix);
    for _ in 0..n {
        s.push(ALNUM[rng.random_range(0..ALNUM.len())] as char);
    }
    s
}

/// A parsed search clause: `metadata['KEY']:'VALUE'`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataQuery {
    /// Metadata key.
    pub key: String,
    /// Exact value to match.
    pub value: String,
}

/// Parses the supported subset of Stripe's search query language: a single
/// `metadata['key']:'value'` clause. Quotes may be single or double; a
/// backslash escapes the next character inside a quoted string.
pub fn parse_search_query(q: &str) -> Result<MetadataQuery, ApiError> {
    let bad = |why: &str| {
        ApiError::invalid(
            "parameter_invalid_string",
            "query",
            format!("Unsupported search query {q:?}: {why}. stripe-sim supports only metadata['key']:'value'."),
        )
    };
    let rest = q.trim();
    let rest = rest
        .strip_prefix("metadata[")
        .ok_or_else(|| bad("expected metadata[...]"))?;
    let (key, rest) = quoted(rest).ok_or_else(|| bad("expected a quoted metadata key"))?;
    let rest = rest
        .trim_start()
        .strip_prefix(']')
        .ok_or_else(|| bad("expected ']'"))?;
    let rest = rest
        .trim_start()
        .strip_prefix(':')
        .ok_or_else(|| bad("expected ':' (only exact match is supported)"))?;
    let (value, rest) = quoted(rest.trim_start()).ok_or_else(|| bad("expected a quoted value"))?;
    if !rest.trim().is_empty() {
        return Err(bad("trailing input (AND/OR are not supported)"));
    }
    Ok(MetadataQuery { key, value })
}

/// Reads a `'...'` or `"..."` string with backslash escapes; returns the
/// unescaped content and the rest of the input.
fn quoted(s: &str) -> Option<(String, &str)> {
    let mut it = s.char_indices();
    let (_, q) = it.next()?;
    if q != '\'' && q != '"' {
        return None;
    }
    let mut out = String::new();
    let mut escaped = false;
    for (i, c) in it {
        if escaped {
            out.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == q {
            return Some((out, &s[i + c.len_utf8()..]));
        } else {
            out.push(c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_queries() {
        let q = parse_search_query("metadata['operation_id']:'op-1'").unwrap();
        assert_eq!((q.key.as_str(), q.value.as_str()), ("operation_id", "op-1"));
        let q = parse_search_query(r#"metadata["operation_id"]:"a\"b""#).unwrap();
        assert_eq!(q.value, "a\"b");
        let q = parse_search_query(r"  metadata['operation_id'] : 'it\'s'  ").unwrap();
        assert_eq!(q.value, "it's");
        for bad in [
            "",
            "status:'succeeded'",
            "metadata['a']:'b' AND metadata['c']:'d'",
            "metadata['a']~'b'",
            "metadata['a']:'unterminated",
            "metadata[a]:'b'",
        ] {
            let e = parse_search_query(bad).unwrap_err();
            assert_eq!(e.status, 400, "{bad}");
            assert_eq!(e.param.as_deref(), Some("query"));
        }
    }

    #[test]
    fn masks_keys() {
        assert_eq!(mask_key("sk_test_charge_once"), "sk_test_***********");
        assert!(!mask_key("sk_live_0123456789abcdef").contains("0123456789"));
        assert_eq!(mask_key("x"), "*");
        assert_eq!(mask_key(""), "");
    }
}
