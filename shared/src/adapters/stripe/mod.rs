//! [`StripeGateway`]: the [`PaymentGateway`] over Stripe's HTTP API (HTTP/1.1 over rustls on
//! ring, with the hyper client the AWS SDK already links; not reqwest, a second HTTP client,
//! which was about 100 KB of every zip).
//!
//! Every answer is classified here, once, into [`GatewayError`]; nothing downstream sees an HTTP
//! status. Any retry inside a call re-sends the **same** request with the **same** idempotency key,
//! a bounded number of times; a different key is never used.
//!
//! The secret key never appears in `Debug`, in a log line or in an error: [`SecretKey`] redacts
//! itself, and error messages from Stripe are scrubbed of anything that looks like a key.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use charge_core::audit::AuditWindow;
use charge_core::domain::{CaptureMethod, OperationId, PaymentIntentId, StripeRefundId};
use charge_core::outcome::{GatewayError, PaymentIntent, PaymentIntentStatus, RetryCause};
use charge_core::refund::StripeRefund;
use charge_core::stripe_version::StripeVersion;
use charge_core::time::Timestamp;
use http::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use serde_json::Value;
use tracing::{debug, warn};

use crate::ports::{
    CancelPaymentIntent, CapturePaymentIntent, CreatePaymentIntent, CreateRefund, CreatedLists,
    ListPage, PaymentIntents, StripeAccount, StripeRefunds,
};

pub mod disputes;
pub mod lists;
pub mod refunds;

use lists::{created_list_query, parse_intent_list, parse_refund_list};
use refunds::{
    collect_refund_pages, parse_refund, parse_refund_page, refund_form, refund_list_query,
};

/// The API version every request pins unless configured otherwise (`STRIPE_API_VERSION`), so a
/// dashboard upgrade cannot change the shapes we parse. Every version in
/// [`charge_core::stripe_version::KNOWN`] is read by the same rules.
pub const STRIPE_VERSION: &str = charge_core::stripe_version::PINNED;
pub const DEFAULT_API_BASE: &str = "https://api.stripe.com";

/// A Stripe secret key. `Debug` shows only its kind; there is no `Display`.
#[derive(Clone)]
pub struct SecretKey(String);

impl SecretKey {
    pub fn new(raw: impl Into<String>) -> Self {
        Self(raw.into())
    }

    fn expose(&self) -> &str {
        &self.0
    }

    /// True for a live-mode key (`sk_live_…`, `rk_live_…`): the mode every PaymentIntent we act
    /// on must carry (`livemode`). Anything else is a test-mode key.
    pub fn is_live(&self) -> bool {
        self.0.starts_with("sk_live_") || self.0.starts_with("rk_live_")
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = self.0.split('_').take(2).collect::<Vec<_>>().join("_");
        write!(f, "SecretKey({kind}_[redacted])")
    }
}

/// How to reach Stripe.
#[derive(Debug, Clone)]
pub struct StripeConfig {
    /// `STRIPE_API_BASE`, e.g. `https://api.stripe.com` or a local `stripe-sim`.
    pub api_base: String,
    pub secret_key: SecretKey,
    pub connect_timeout: Duration,
    /// Whole-request timeout, connection included.
    pub timeout: Duration,
    /// Extra attempts inside one call, same key, for answers that say nothing happened or for a
    /// lost response (which the key turns into a replay). Bounded.
    pub max_network_retries: u32,
    /// Pause before the first in-call retry; doubles each time.
    pub retry_backoff: Duration,
    /// `STRIPE_API_VERSION`: the `Stripe-Version` header of every request (the pin by default).
    pub api_version: StripeVersion,
}

impl StripeConfig {
    pub fn new(api_base: impl Into<String>, secret_key: SecretKey) -> Self {
        Self {
            api_base: api_base.into(),
            secret_key,
            connect_timeout: Duration::from_secs(3),
            timeout: Duration::from_secs(10),
            max_network_retries: 1,
            retry_backoff: Duration::from_millis(250),
            api_version: StripeVersion::PINNED,
        }
    }

    /// The longest one gateway call can take, its in-call retries included: every attempt runs
    /// to the whole-request timeout and every back-off is waited out (10 s, 1 retry, 250 ms:
    /// 20.25 s). What a function's timeout and a lease must cover.
    pub fn worst_case_call(&self) -> Duration {
        let mut total = self.timeout;
        let mut backoff = self.retry_backoff;
        for _ in 0..self.max_network_retries {
            total += self.timeout + backoff;
            backoff *= 2;
        }
        total
    }
}

/// Checks a Stripe API base URL: `https://` to any host, plain `http://` only to a loopback
/// address (`localhost`, `127.0.0.0/8`, `[::1]`: the simulator on this machine). The secret key
/// travels in every request's `Authorization` header, so nothing else may go in clear text.
/// Also refuses credentials, a query or a fragment in the base (they would leak into every URL).
pub fn check_api_base(base: &str) -> Result<(), String> {
    let url: http::Uri = base
        .parse()
        .map_err(|e| format!("{base:?} is not a URL ({e})"))?;
    let Some(authority) = url.authority() else {
        return Err(format!("{base:?} must be an https:// URL"));
    };
    if authority.as_str().contains('@') {
        return Err("must not carry credentials".into());
    }
    if url.query().is_some() || base.contains('#') {
        return Err(format!("{base:?} must not have a query or fragment"));
    }
    let host = url.host().unwrap_or("");
    match url.scheme_str().unwrap_or("") {
        "https" if !host.is_empty() => Ok(()),
        "http" if is_loopback(host) => Ok(()),
        "http" => Err(format!(
            "{base:?}: plain http:// is allowed only to a loopback address (the simulator); \
             use https:// for {host:?}"
        )),
        _ => Err(format!("{base:?} must be an https:// URL")),
    }
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[derive(Debug, thiserror::Error)]
pub enum StripeInitError {
    #[error("STRIPE_API_BASE is refused: {0}")]
    BadBase(String),
    #[error("cannot build the HTTPS client: {0}")]
    Client(String),
}

pub use crate::ports::{RequestTotals, StripeRequests};

/// The Stripe adapter. Build once per process and share.
pub struct StripeGateway {
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// Whole-request bound of one attempt (connection, request and the whole answer).
    timeout: Duration,
    base: String,
    key: SecretKey,
    livemode: bool,
    max_retries: u32,
    retry_backoff: Duration,
    /// `limit` of each page of a refund list (Stripe's most, 100, unless a test asks for less).
    list_page_size: u32,
    /// The `Stripe-Version` every request carries.
    api_version: StripeVersion,
    pub requests: StripeRequests,
}

impl fmt::Debug for StripeGateway {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StripeGateway")
            .field("base", &self.base)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl StripeGateway {
    pub fn new(cfg: StripeConfig) -> Result<Self, StripeInitError> {
        let base = cfg.api_base.trim_end_matches('/').to_owned();
        check_api_base(&base).map_err(StripeInitError::BadBase)?;
        let http = https_client(cfg.connect_timeout, base.starts_with("https://"))?;
        Ok(Self {
            http,
            timeout: cfg.timeout,
            base,
            livemode: cfg.secret_key.is_live(),
            key: cfg.secret_key,
            max_retries: cfg.max_network_retries,
            retry_backoff: cfg.retry_backoff,
            list_page_size: REFUND_PAGE_SIZE,
            api_version: cfg.api_version,
            requests: StripeRequests::default(),
        })
    }

    /// Lists refunds `size` to a page (clamped to Stripe's 1..=100) instead of 100: lets a test
    /// walk several pages without making a hundred refunds.
    pub fn with_list_page_size(mut self, size: u32) -> Self {
        self.list_page_size = size.clamp(1, REFUND_PAGE_SIZE);
        self
    }

    /// A request to `path_and_query` with the headers every request carries: the key as a bearer
    /// token (marked sensitive), the configured API version (the pin by default), our user agent.
    fn request(
        &self,
        method: Method,
        path_and_query: &str,
        content_type: Option<&'static str>,
        body: Bytes,
    ) -> Result<Request<Full<Bytes>>, http::Error> {
        let mut auth = HeaderValue::try_from(format!("Bearer {}", self.key.expose()))?;
        auth.set_sensitive(true);
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base, path_and_query))
            .header(AUTHORIZATION, auth)
            .header("Stripe-Version", self.api_version.as_str())
            .header(
                USER_AGENT,
                concat!("charge-once/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(ct) = content_type {
            req = req.header(CONTENT_TYPE, ct);
        }
        req.body(Full::new(body))
    }

    /// One attempt: the request, its answer's status and headers and its whole body, within the
    /// whole-request timeout.
    async fn exchange(&self, req: Request<Full<Bytes>>) -> Result<Answer, GatewayError> {
        let attempt = async {
            let resp = self
                .http
                .request(req)
                .await
                .map_err(|e| transport_error("no response", &e, e.is_connect(), &self.key))?;
            let (parts, body) = resp.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| transport_error("response body cut off", &e, false, &self.key))?;
            Ok(Answer {
                status: parts.status,
                should_retry: header_bool(&parts.headers, "stripe-should-retry"),
                replayed: header_bool(&parts.headers, "idempotent-replayed").unwrap_or(false),
                body: body.to_bytes().to_vec(),
            })
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(answer) => answer,
            Err(_) => Err(GatewayError::Ambiguous {
                detail: format!("no response: timeout after {:?}", self.timeout),
            }),
        }
    }

    /// POSTs `form` to `path` under `Idempotency-Key: idempotency_key` through [`Self::send`]
    /// (every retry sends the same body under the same key) and reads the object Stripe answers
    /// with: every call that makes or changes something at Stripe (a create, a capture, a cancel,
    /// a refund). A replayed answer is logged, naming the object.
    async fn post_object<T, I, K, V>(
        &self,
        counter: &AtomicU64,
        path: &str,
        form: I,
        idempotency_key: &str,
    ) -> Result<T, GatewayError>
    where
        T: Posted,
        I: IntoIterator,
        I::Item: std::borrow::Borrow<(K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let form_body = Bytes::from(
            form_urlencoded::Serializer::new(String::new())
                .extend_pairs(form)
                .finish(),
        );
        let (body, replayed) = self
            .send(counter, || {
                let mut r = self.request(
                    Method::POST,
                    path,
                    Some("application/x-www-form-urlencoded"),
                    form_body.clone(),
                )?;
                r.headers_mut()
                    .insert("Idempotency-Key", HeaderValue::from_str(idempotency_key)?);
                Ok(r)
            })
            .await?;
        let object = T::read(&body, replayed)?;
        if replayed {
            object.log_replay();
        }
        Ok(object)
    }

    /// GETs `path` (a read: no idempotency key, safe to retry) and answers the body.
    async fn get(&self, counter: &AtomicU64, path: &str) -> Result<Vec<u8>, GatewayError> {
        let (body, _) = self
            .send(counter, || {
                self.request(Method::GET, path, None, Bytes::new())
            })
            .await?;
        Ok(body)
    }

    /// One page of a list endpoint's objects created in `window`, oldest first (the audit's read).
    async fn created_page(
        &self,
        counter: &AtomicU64,
        list: &str,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<Vec<u8>, GatewayError> {
        let query = created_list_query(window, self.list_page_size, starting_after);
        self.get(counter, &format!("{list}?{query}")).await
    }

    /// Sends the request built by `build` (the same request every time), retrying within the bound
    /// while the answer says a retry is safe and useful.
    async fn send(
        &self,
        counter: &AtomicU64,
        build: impl Fn() -> Result<Request<Full<Bytes>>, http::Error>,
    ) -> Result<(Vec<u8>, bool), GatewayError> {
        let mut attempt = 0;
        let mut earlier_lost = false;
        loop {
            counter.fetch_add(1, Ordering::Relaxed);
            let answer = match build() {
                Ok(req) => self.exchange(req).await,
                // A header our own values cannot produce (the key or the idempotency key with a
                // control character): nothing was sent, and no retry can change that.
                Err(e) => {
                    return Err(GatewayError::Ambiguous {
                        detail: redact(&format!("request not built, not sent: {e}"), &self.key),
                    })
                }
            };
            if matches!(&answer, Ok(a) if a.status == StatusCode::TOO_MANY_REQUESTS) {
                self.requests.rate_limited.fetch_add(1, Ordering::Relaxed);
            }
            let retry = attempt < self.max_retries && worth_retrying(&answer);
            if !retry {
                return settle_answer(answer, earlier_lost, &self.key);
            }
            earlier_lost |= answer.is_err();
            attempt += 1;
            let pause = self.retry_backoff.saturating_mul(1 << (attempt - 1).min(8));
            debug!(
                attempt,
                ?pause,
                "retrying the same request with the same key"
            );
            tokio::time::sleep(pause).await;
        }
    }
}

// The answer rules below (`worth_retrying`, `settle_answer`, `classify`, the body parsers) are
// public for one other caller: the simulator's in-process gateway (`infra/simulate`), which drives
// the Stripe simulator's engine without sockets and must judge its answers exactly as this client
// does. One copy of the rules, so the simulation cannot prove a rule production does not follow.

/// The classification of the last answer of a call. If an earlier attempt of the same call got no
/// answer, that attempt may have executed, so a later "nothing happened" (409 key in use, 429) does
/// not prove nothing happened: the call as a whole is ambiguous.
pub fn settle_answer(
    answer: Result<Answer, GatewayError>,
    earlier_lost: bool,
    key: &SecretKey,
) -> Result<(Vec<u8>, bool), GatewayError> {
    match classify(answer?, key) {
        Err(GatewayError::RetryLater { detail, .. }) if earlier_lost => {
            Err(GatewayError::Ambiguous {
                detail: format!("an earlier attempt got no answer; then {detail}"),
            })
        }
        other => other,
    }
}

/// What came back over HTTP, before classification.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    /// `Stripe-Should-Retry`, when present.
    pub should_retry: Option<bool>,
    /// `Idempotent-Replayed: true`.
    pub replayed: bool,
    pub body: Vec<u8>,
}

impl Answer {
    /// An answer with status `status` (`None` outside 100..=999).
    pub fn new(
        status: u16,
        should_retry: Option<bool>,
        replayed: bool,
        body: Vec<u8>,
    ) -> Option<Self> {
        Some(Self {
            status: StatusCode::from_u16(status).ok()?,
            should_retry,
            replayed,
            body,
        })
    }
}

fn header_bool(headers: &HeaderMap, name: &str) -> Option<bool> {
    match headers.get(name)?.to_str().ok()? {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// The HTTP/1.1 client of one gateway: hyper-util's pooled client (the one the AWS SDK's HTTPS
/// client is built on), rustls on ring with the system's root certificates (as the SDK's), TCP
/// connect bounded by `connect_timeout`. Plain `http://` is accepted by the connector;
/// [`check_api_base`] has already allowed it only to a loopback address.
fn https_client(
    connect_timeout: Duration,
    needs_roots: bool,
) -> Result<Client<HttpsConnector<HttpConnector>, Full<Bytes>>, StripeInitError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (added, _ignored) = roots.add_parsable_certificates(native.certs);
    if needs_roots && added == 0 {
        return Err(StripeInitError::Client(format!(
            "no root certificate found on this system ({} errors loading them): cannot verify Stripe's",
            native.errors.len()
        )));
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| StripeInitError::Client(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_connect_timeout(Some(connect_timeout));
    tcp.set_nodelay(true);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

fn transport_error(
    what: &str,
    e: &(dyn std::error::Error + 'static),
    connect: bool,
    key: &SecretKey,
) -> GatewayError {
    let kind = if connect {
        "connect error"
    } else {
        "connection lost"
    };
    // The client's messages carry neither the URL nor the Authorization header. Scrub anyway.
    let mut detail = format!("{what}: {kind}: {e}");
    let mut source = e.source();
    while let Some(s) = source {
        detail.push_str(&format!(": {s}"));
        source = s.source();
    }
    GatewayError::Ambiguous {
        detail: redact(&detail, key),
    }
}

/// A retry inside the call, with the same key, is safe for any answer (the key replays a request
/// that executed). It is only *useful* where another try can change the answer: Stripe says so
/// with `Stripe-Should-Retry`; otherwise a lost connection (the replay recovers the first answer)
/// and a 409 key-in-use (the other request finishes). Not a plain 429: the account's budget is
/// spent, and a retry 250 ms later spends another call of it; the caller hands the message back
/// for a few seconds instead (`pacing::return_after`), and its budget paces the next try.
pub fn worth_retrying(answer: &Result<Answer, GatewayError>) -> bool {
    match answer {
        Err(_) => true,
        Ok(a) => match a.should_retry {
            Some(flag) => flag,
            None => a.status.as_u16() == 409,
        },
    }
}

#[derive(Debug, Deserialize)]
struct WirePaymentIntent {
    /// Parsed as it arrives: an answer naming no valid PaymentIntent id is unreadable.
    id: PaymentIntentId,
    status: String,
    #[serde(default)]
    amount: Option<i64>,
    #[serde(default)]
    currency: Option<String>,
    /// Absent or `null`: none. Anything but an object makes the answer unreadable.
    #[serde(default)]
    metadata: Option<WireMetadata>,
    #[serde(default)]
    livemode: Option<bool>,
    #[serde(default)]
    amount_received: Option<i64>,
    #[serde(default)]
    cancellation_reason: Option<String>,
    /// The charge's id, or (asked with `expand[]=latest_charge`) the charge itself, whose card
    /// details carry an authorization's deadline.
    #[serde(default)]
    latest_charge: Option<WireLatestCharge>,
}

/// `latest_charge`: an id, or the expanded charge. Anything else makes the answer unreadable.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum WireLatestCharge {
    Id(#[allow(dead_code)] String),
    Expanded(WireCharge),
}

#[derive(Debug, Deserialize)]
struct WireCharge {
    #[serde(default)]
    payment_method_details: Option<WirePaymentMethodDetails>,
}

#[derive(Debug, Deserialize)]
struct WirePaymentMethodDetails {
    #[serde(default)]
    card: Option<WireCard>,
}

#[derive(Debug, Deserialize)]
struct WireCard {
    /// Seconds since the epoch: the card network's deadline for the capture.
    #[serde(default)]
    capture_before: Option<i64>,
}

impl WireLatestCharge {
    fn capture_before(&self) -> Option<Timestamp> {
        match self {
            WireLatestCharge::Id(_) => None,
            WireLatestCharge::Expanded(c) => c
                .payment_method_details
                .as_ref()?
                .card
                .as_ref()?
                .capture_before
                .map(|s| Timestamp::from_millis(s.saturating_mul(1000))),
        }
    }
}

/// The two keys our create sets; the others are skipped unread. Stripe's metadata values are
/// strings: one that is not is read as no value.
#[derive(Debug, Deserialize)]
struct WireMetadata {
    operation_id: Option<Value>,
    order_id: Option<Value>,
}

impl WirePaymentIntent {
    fn into_domain(self, replayed: bool) -> PaymentIntent {
        let (operation_id, order_id) = match self.metadata {
            Some(m) => (string(m.operation_id), string(m.order_id)),
            None => (None, None),
        };
        let capture_before = self.latest_charge.as_ref().and_then(|c| c.capture_before());
        PaymentIntent {
            amount_received: self.amount_received,
            cancellation_reason: self.cancellation_reason,
            capture_before,
            status: PaymentIntentStatus::parse(&self.status),
            operation_id,
            order_id,
            id: self.id,
            replayed,
            amount: self.amount,
            currency: self.currency.map(|c| c.to_ascii_lowercase()),
            livemode: self.livemode,
        }
    }
}

/// A metadata value, if it is a string.
fn string(value: Option<Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s),
        _ => None,
    }
}

#[derive(Debug, Deserialize)]
struct WireSearch {
    data: Vec<WirePaymentIntent>,
}

#[derive(Debug, Default, Deserialize)]
struct WireErrorBody {
    error: WireError,
}

#[derive(Debug, Default, Deserialize)]
struct WireError {
    #[serde(rename = "type")]
    kind: Option<String>,
    code: Option<String>,
    decline_code: Option<String>,
    message: Option<String>,
    param: Option<String>,
    payment_intent: Option<WireErrorPaymentIntent>,
}

#[derive(Debug, Deserialize)]
struct WireErrorPaymentIntent {
    id: String,
}

/// Replaces anything that looks like a Stripe secret or restricted key, and our own key, with a
/// redaction marker.
fn redact(text: &str, key: &SecretKey) -> String {
    let mut out = if key.expose().is_empty() {
        text.to_owned()
    } else {
        text.replace(key.expose(), "[redacted]")
    };
    for prefix in ["sk_live_", "sk_test_", "rk_live_", "rk_test_"] {
        while let Some(start) = out.find(prefix) {
            let end = out[start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '*'))
                .map_or(out.len(), |n| start + n);
            out.replace_range(start..end, "[redacted]");
        }
    }
    out
}

/// Classifies an HTTP answer. `Ok(bytes)` is a 2xx body for the caller to parse.
fn classify(answer: Answer, key: &SecretKey) -> Result<(Vec<u8>, bool), GatewayError> {
    let status = answer.status.as_u16();
    if answer.status.is_success() {
        return Ok((answer.body, answer.replayed));
    }
    let parsed: Option<WireErrorBody> = serde_json::from_slice(&answer.body).ok();
    let Some(WireErrorBody { error }) = parsed else {
        // A 4xx/5xx whose body is not Stripe's: a proxy or a truncated answer. We cannot tell.
        return Err(GatewayError::Ambiguous {
            detail: format!("HTTP {status} with an unreadable body"),
        });
    };
    let kind = error.kind.as_deref().unwrap_or("");
    let code = error.code.as_deref().unwrap_or("");
    let replayed = if answer.replayed { " (replayed)" } else { "" };
    let detail = redact(
        &format!(
            "HTTP {status} {kind}{}{}: {}{replayed}",
            if code.is_empty() { "" } else { "/" },
            code,
            error.message.as_deref().unwrap_or("")
        ),
        key,
    );
    Err(match status {
        402 => GatewayError::Declined {
            code: error
                .decline_code
                .or(error.code)
                .unwrap_or_else(|| "card_error".into()),
            payment_intent_id: error
                .payment_intent
                .and_then(|pi| PaymentIntentId::parse(&pi.id).ok()),
        },
        400 if kind == "idempotency_error" => GatewayError::KeyMisuse { detail },
        400 if code == "payment_intent_unexpected_state" => {
            GatewayError::UnexpectedState { detail }
        }
        409 if code == "idempotency_key_in_use" => GatewayError::RetryLater {
            cause: RetryCause::KeyInUse,
            detail,
        },
        429 => GatewayError::RetryLater {
            cause: RetryCause::RateLimited,
            detail,
        },
        401 | 403 => GatewayError::RetryLater {
            cause: RetryCause::Configuration,
            detail,
        },
        // Other 409s (lock timeouts) and every 5xx: the request may have executed.
        409 | 500..=599 => GatewayError::Ambiguous { detail },
        _ => GatewayError::Rejected {
            detail,
            param: error.param,
        },
    })
}

/// A 2xx PaymentIntent body; unreadable (or naming no valid id) is ambiguous.
pub fn parse_payment_intent(body: &[u8], replayed: bool) -> Result<PaymentIntent, GatewayError> {
    let pi: WirePaymentIntent =
        serde_json::from_slice(body).map_err(|_| GatewayError::Ambiguous {
            detail: "2xx with an unreadable PaymentIntent body".into(),
        })?;
    Ok(pi.into_domain(replayed))
}

/// What Stripe answers a POST with ([`StripeGateway::post_object`]), read from the body.
trait Posted: Sized {
    /// The object in a 2xx body; `replayed`: Stripe says it replayed its first answer.
    fn read(body: &[u8], replayed: bool) -> Result<Self, GatewayError>;

    /// Logs that Stripe replayed it, naming it.
    fn log_replay(&self);
}

impl Posted for PaymentIntent {
    fn read(body: &[u8], replayed: bool) -> Result<Self, GatewayError> {
        parse_payment_intent(body, replayed)
    }

    fn log_replay(&self) {
        debug!(payment_intent = %self.id, "idempotent replay");
    }
}

impl Posted for StripeRefund {
    fn read(body: &[u8], replayed: bool) -> Result<Self, GatewayError> {
        Ok(StripeRefund {
            replayed,
            ..parse_refund(body)?
        })
    }

    fn log_replay(&self) {
        debug!(refund = %self.id, "idempotent replay");
    }
}

/// A 2xx search body: the PaymentIntents found; unreadable is ambiguous.
pub fn parse_search(body: &[u8]) -> Result<Vec<PaymentIntent>, GatewayError> {
    let found: WireSearch = serde_json::from_slice(body).map_err(|_| {
        warn!("search answered 2xx with an unreadable body");
        GatewayError::Ambiguous {
            detail: "2xx with an unreadable search body".into(),
        }
    })?;
    Ok(found
        .data
        .into_iter()
        .map(|pi| pi.into_domain(false))
        .collect())
}

/// The form of a cancel: Stripe's `cancellation_reason` (none when the merchant gave none), the
/// only parameter sent.
pub fn cancel_form(req: &CancelPaymentIntent) -> Vec<(String, String)> {
    req.reason
        .map(|r| ("cancellation_reason".to_owned(), r.as_str().to_owned()))
        .into_iter()
        .collect()
}

/// The form of a capture: the amount it takes (the rest of the hold is released).
pub fn capture_form(req: &CapturePaymentIntent) -> Vec<(String, String)> {
    vec![(
        "amount_to_capture".to_owned(),
        req.amount_to_capture.minor_units().to_string(),
    )]
}

/// `metadata['operation_id']:'<id>'` with Stripe's search escaping (backslash before `'` and `\`).
pub fn search_query(operation_id: &OperationId) -> String {
    let value = operation_id
        .to_string()
        .replace('\\', "\\\\")
        .replace('\'', "\\'");
    format!("metadata['operation_id']:'{value}'")
}

/// Stripe's largest page (`limit`), what a refund list asks for.
pub const REFUND_PAGE_SIZE: u32 = 100;

impl StripeAccount for StripeGateway {
    fn livemode(&self) -> bool {
        self.livemode
    }

    fn requests(&self) -> Option<&StripeRequests> {
        Some(&self.requests)
    }
}

#[async_trait]
impl PaymentIntents for StripeGateway {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        let mut form = vec![
            ("amount", req.params.amount.minor_units().to_string()),
            ("currency", req.params.currency.as_str().to_owned()),
            ("customer", req.params.customer_id.as_str().to_owned()),
            (
                "payment_method",
                req.params.payment_method.as_str().to_owned(),
            ),
            ("confirm", "true".to_owned()),
            ("off_session", "true".to_owned()),
            ("metadata[operation_id]", req.operation_id.to_string()),
            ("metadata[order_id]", req.order_id.as_str().to_owned()),
        ];
        if req.attempt > 1 {
            // Additive: the first attempt's intent is created as before attempts.
            form.push(("metadata[attempt]", req.attempt.to_string()));
        }
        if req.params.capture_method == CaptureMethod::Manual {
            // Held, not taken; the charge expanded, so the answer states the hold's deadline.
            form.push(("capture_method", "manual".to_owned()));
            form.push(("expand[]", "latest_charge".to_owned()));
        }
        self.post_object(
            &self.requests.create,
            "/v1/payment_intents",
            form.iter(),
            req.idempotency_key.as_str(),
        )
        .await
    }

    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError> {
        // A `PaymentIntentId` holds only letters, digits and `_` after `pi_`: safe in a path.
        // The charge expanded: an authorization's deadline is on it (`capture_before`).
        let path = format!("/v1/payment_intents/{id}?expand%5B%5D=latest_charge");
        let body = self.get(&self.requests.retrieve, &path).await?;
        parse_payment_intent(&body, false)
    }

    async fn search_by_operation(
        &self,
        operation_id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        let query = search_query(operation_id);
        let path = format!(
            "/v1/payment_intents/search?{}",
            form_urlencoded::Serializer::new(String::new())
                .append_pair("query", &query)
                .append_pair("limit", "10")
                .finish()
        );
        let body = self.get(&self.requests.search, &path).await?;
        parse_search(&body)
    }

    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        // A `PaymentIntentId` holds only letters, digits and `_` after `pi_`: safe in a path.
        let path = format!("/v1/payment_intents/{}/cancel", req.id);
        self.post_object(
            &self.requests.cancel,
            &path,
            cancel_form(req),
            req.idempotency_key.as_str(),
        )
        .await
    }

    async fn capture(&self, req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        // A `PaymentIntentId` holds only letters, digits and `_` after `pi_`: safe in a path.
        let path = format!("/v1/payment_intents/{}/capture", req.id);
        self.post_object(
            &self.requests.capture,
            &path,
            capture_form(req),
            req.idempotency_key.as_str(),
        )
        .await
    }
}

/// Disputes are read only: a retrieve, and a PaymentIntent's list page after page.
#[async_trait]
impl crate::ports::StripeDisputes for StripeGateway {
    async fn retrieve_dispute(
        &self,
        id: &charge_core::domain::DisputeId,
    ) -> Result<charge_core::dispute::StripeDispute, GatewayError> {
        // A `DisputeId` holds only letters, digits and `_` after its prefix: safe in a path.
        let body = self
            .get(&self.requests.dispute_read, &format!("/v1/disputes/{id}"))
            .await?;
        disputes::parse_dispute(&body)
    }

    async fn list_disputes(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<charge_core::dispute::StripeDispute>, GatewayError> {
        disputes::collect_dispute_pages(|after| async move {
            let path = format!(
                "/v1/disputes?{}",
                disputes::dispute_list_query(payment_intent, self.list_page_size, after.as_deref())
            );
            let body = self.get(&self.requests.dispute_read, &path).await?;
            disputes::parse_dispute_list(&body)
        })
        .await
    }
}

#[async_trait]
impl StripeRefunds for StripeGateway {
    async fn create_refund(&self, req: &CreateRefund) -> Result<StripeRefund, GatewayError> {
        self.post_object(
            &self.requests.refund_create,
            "/v1/refunds",
            refund_form(req),
            req.idempotency_key.as_str(),
        )
        .await
    }

    async fn retrieve_refund(&self, id: &StripeRefundId) -> Result<StripeRefund, GatewayError> {
        // A `StripeRefundId` holds only letters, digits and `_` after its prefix: safe in a path.
        let path = format!("/v1/refunds/{id}");
        let body = self.get(&self.requests.refund_read, &path).await?;
        parse_refund(&body)
    }

    async fn list_refunds(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<StripeRefund>, GatewayError> {
        collect_refund_pages(|after| async move {
            let path = format!(
                "/v1/refunds?{}",
                refund_list_query(payment_intent, self.list_page_size, after.as_ref())
            );
            let body = self.get(&self.requests.refund_read, &path).await?;
            parse_refund_page(&body)
        })
        .await
    }
}

#[async_trait]
impl CreatedLists for StripeGateway {
    async fn list_intents_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<PaymentIntent>, GatewayError> {
        let body = self
            .created_page(
                &self.requests.list,
                "/v1/payment_intents",
                window,
                starting_after,
            )
            .await?;
        parse_intent_list(&body)
    }

    async fn list_refunds_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<StripeRefund>, GatewayError> {
        let body = self
            .created_page(
                &self.requests.refund_read,
                "/v1/refunds",
                window,
                starting_after,
            )
            .await?;
        parse_refund_list(&body)
    }

    async fn list_disputes_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<charge_core::dispute::StripeDispute>, GatewayError> {
        let body = self
            .created_page(
                &self.requests.dispute_read,
                "/v1/disputes",
                window,
                starting_after,
            )
            .await?;
        disputes::parse_dispute_list(&body)
    }
}

#[cfg(test)]
mod tests {
    use super::refunds::MAX_REFUND_PAGES;
    use super::*;
    use charge_core::refund::RefundStatus;

    /// Stripe leaves out, rather than sends `null` for, the keys its spec allows no null: a
    /// refund's `failure_balance_transaction`, `failure_reason`, `next_action`, `pending_reason`,
    /// a charge's `payment_method_details.card.capture_before`. Each object is read with them
    /// absent, as with them present; the pinned version's refund of a released remainder (its
    /// reason, no metadata) is read as Stripe's own.
    #[test]
    fn objects_are_read_with_the_keys_stripe_leaves_out_absent() {
        let refund = br#"{"id":"re_1","object":"refund","amount":300,"currency":"usd",
            "payment_intent":"pi_1","status":"succeeded","reason":"requested_by_customer",
            "metadata":{"operation_id":"op-1","order_id":"ord-1"}}"#;
        let read = parse_refund(refund).unwrap();
        assert_eq!(
            (read.status.clone(), read.amount),
            (RefundStatus::Succeeded, Some(300))
        );
        assert_eq!(
            (read.failure_reason.as_deref(), read.operation_id.as_deref()),
            (None, Some("op-1"))
        );
        assert!(!read.is_released_remainder());
        let failed = br#"{"id":"re_2","object":"refund","amount":300,"currency":"usd",
            "payment_intent":"pi_1","status":"failed","failure_reason":"lost_or_stolen_card",
            "failure_balance_transaction":"txn_2","metadata":{}}"#;
        let read = parse_refund(failed).unwrap();
        assert_eq!(read.failure_reason.as_deref(), Some("lost_or_stolen_card"));
        let released = br#"{"id":"re_3","object":"refund","amount":300,"currency":"usd",
            "payment_intent":"pi_1","status":"succeeded","reason":"expired_uncaptured_charge",
            "metadata":{}}"#;
        assert!(parse_refund(released).unwrap().is_released_remainder());

        let intent = |card: &str| {
            format!(
                r#"{{"id":"pi_1","object":"payment_intent","status":"requires_capture","amount":1000,
                "currency":"usd","livemode":false,"metadata":{{}},
                "latest_charge":{{"id":"ch_1","payment_method_details":{{"card":{card},"type":"card"}}}}}}"#
            )
        };
        let without = parse_payment_intent(intent(r#"{"brand":"visa"}"#).as_bytes(), false);
        assert_eq!(without.unwrap().capture_before, None);
        let with = intent(r#"{"brand":"visa","capture_before":1800000000}"#);
        let with = parse_payment_intent(with.as_bytes(), false).unwrap();
        assert_eq!(
            with.capture_before,
            Some(Timestamp::from_millis(1_800_000_000_000))
        );
    }

    /// The answer's reader before `metadata` was read field by field: the whole map built as
    /// `Value`s. The reference [`parse_payment_intent`] is held to.
    fn parse_with_a_map(body: &[u8]) -> Option<PaymentIntent> {
        #[derive(Deserialize)]
        struct Old {
            id: PaymentIntentId,
            status: String,
            #[serde(default)]
            amount: Option<i64>,
            #[serde(default)]
            currency: Option<String>,
            #[serde(default)]
            metadata: Option<std::collections::HashMap<String, serde_json::Value>>,
            #[serde(default)]
            livemode: Option<bool>,
        }
        let old: Old = serde_json::from_slice(body).ok()?;
        let meta = |k: &str| {
            old.metadata
                .as_ref()
                .and_then(|m| m.get(k))
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        Some(PaymentIntent {
            status: PaymentIntentStatus::parse(&old.status),
            operation_id: meta("operation_id"),
            order_id: meta("order_id"),
            id: old.id.clone(),
            replayed: false,
            amount: old.amount,
            currency: old.currency.clone().map(|c| c.to_ascii_lowercase()),
            livemode: old.livemode,
            amount_received: None,
            cancellation_reason: None,
            capture_before: None,
        })
    }

    #[test]
    fn metadata_reads_as_the_whole_map_did() {
        let pi = |metadata: &str| {
            format!(
                r#"{{"id":"pi_3Abc","object":"payment_intent","amount":4200,"currency":"EUR","livemode":false,"status":"succeeded"{metadata}}}"#
            )
        };
        let bodies = [
            pi(""),
            pi(r#","metadata":null"#),
            pi(r#","metadata":{}"#),
            pi(r#","metadata":{"operation_id":"op-1","order_id":"ord-1"}"#),
            pi(
                r#","metadata":{"order_id":"ord-1","other":{"deep":[1,2,{"x":null}]},"operation_id":"op-1"}"#,
            ),
            pi(r#","metadata":{"operation_id":7,"order_id":null}"#),
            pi(r#","metadata":{"operation_id":"\u00e9\"q","order_id":["ord-1"]}"#),
            pi(r#","metadata":"op-1""#),
            pi(r#","metadata":["op-1"]"#),
            pi(r#","metadata":3"#),
            pi(r#","metadata":true"#),
            pi(r#","metadata":{"operation_id":"op-1""#),
            pi(r#","metadata":{"operation_id":}"#),
        ];
        let mut read = 0;
        for body in &bodies {
            let new = parse_payment_intent(body.as_bytes(), false).ok();
            assert_eq!(new, parse_with_a_map(body.as_bytes()), "{body}");
            read += usize::from(new.is_some());
        }
        // Both kinds of answer are covered: read, and refused as unreadable.
        assert_eq!(read, 7);
    }

    /// A metadata key we read, given twice, makes the answer unreadable (the whole map kept the
    /// last one): JSON readers differ on which of the two counts, and Stripe never sends one. A
    /// key we skip may come any number of times.
    #[test]
    fn a_metadata_key_given_twice_is_unreadable() {
        let body = |metadata: &str| {
            format!(r#"{{"id":"pi_3Abc","status":"succeeded","metadata":{{{metadata}}}}}"#)
        };
        assert!(matches!(
            parse_payment_intent(
                body(r#""operation_id":"op-1","operation_id":"op-2""#).as_bytes(),
                false
            ),
            Err(GatewayError::Ambiguous { .. })
        ));
        let pi = parse_payment_intent(
            body(r#""note":"a","operation_id":"op-1","note":"b""#).as_bytes(),
            false,
        )
        .unwrap();
        assert_eq!(pi.operation_id.as_deref(), Some("op-1"));
    }

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status: StatusCode::from_u16(status).unwrap(),
            should_retry: None,
            replayed: false,
            body: body.as_bytes().to_vec(),
        }
    }

    fn key() -> SecretKey {
        SecretKey::new("sk_test_abcdef123456")
    }

    fn err(status: u16, body: &str) -> GatewayError {
        classify(answer(status, body), &key()).unwrap_err()
    }

    #[test]
    fn classification_table() {
        assert!(matches!(
            err(402, r#"{"error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds","payment_intent":{"id":"pi_1"}}}"#),
            GatewayError::Declined { ref code, payment_intent_id: Some(ref id) } if code == "insufficient_funds" && id == "pi_1"
        ));
        assert!(matches!(
            err(
                400,
                r#"{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters"}}"#
            ),
            GatewayError::KeyMisuse { .. }
        ));
        assert!(matches!(
            err(
                409,
                r#"{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use"}}"#
            ),
            GatewayError::RetryLater {
                cause: RetryCause::KeyInUse,
                ..
            }
        ));
        assert!(matches!(
            err(
                429,
                r#"{"error":{"type":"invalid_request_error","code":"rate_limit"}}"#
            ),
            GatewayError::RetryLater {
                cause: RetryCause::RateLimited,
                ..
            }
        ));
        for status in [401, 403] {
            assert!(matches!(
                err(
                    status,
                    r#"{"error":{"type":"invalid_request_error","message":"Invalid API Key provided: sk_test_****3456"}}"#
                ),
                GatewayError::RetryLater {
                    cause: RetryCause::Configuration,
                    ..
                }
            ));
        }
        assert!(matches!(
            err(400, r#"{"error":{"type":"invalid_request_error","code":"resource_missing","param":"customer"}}"#),
            GatewayError::Rejected { param: Some(ref p), .. } if p == "customer"
        ));
        assert!(matches!(
            err(
                400,
                r#"{"error":{"type":"invalid_request_error","code":"payment_intent_unexpected_state","message":"You cannot cancel this PaymentIntent because it has a status of succeeded."}}"#
            ),
            GatewayError::UnexpectedState { ref detail } if detail.contains("status of succeeded")
        ));
        assert!(matches!(
            err(500, r#"{"error":{"type":"api_error"}}"#),
            GatewayError::Ambiguous { .. }
        ));
        assert!(matches!(
            err(503, "<html>bad gateway</html>"),
            GatewayError::Ambiguous { .. }
        ));
        assert!(matches!(
            err(400, "not json"),
            GatewayError::Ambiguous { .. }
        ));
        assert!(matches!(
            err(
                409,
                r#"{"error":{"type":"invalid_request_error","code":"lock_timeout"}}"#
            ),
            GatewayError::Ambiguous { .. }
        ));
    }

    #[test]
    fn nothing_happened_is_not_believed_after_a_lost_attempt() {
        let in_use = || {
            answer(
                409,
                r#"{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use"}}"#,
            )
        };
        assert!(matches!(
            settle_answer(Ok(in_use()), false, &key()),
            Err(GatewayError::RetryLater { .. })
        ));
        assert!(matches!(
            settle_answer(Ok(in_use()), true, &key()),
            Err(GatewayError::Ambiguous { .. })
        ));
    }

    #[test]
    fn success_bodies() {
        let (body, replayed) = classify(
            Answer {
                replayed: true,
                ..answer(
                    200,
                    r#"{"id":"pi_1","object":"payment_intent","status":"processing"}"#,
                )
            },
            &key(),
        )
        .unwrap();
        let pi = parse_payment_intent(&body, replayed).unwrap();
        assert_eq!(pi.status, PaymentIntentStatus::Processing);
        assert!(pi.replayed);
        // A truncated 2xx body may hide a created PaymentIntent: unknown, not failed.
        assert!(matches!(
            parse_payment_intent(br#"{"id":"pi_1","sta"#, false),
            Err(GatewayError::Ambiguous { .. })
        ));
    }

    #[test]
    fn secrets_never_show() {
        let k = key();
        assert_eq!(format!("{k:?}"), "SecretKey(sk_test_[redacted])");
        let e = err(
            401,
            r#"{"error":{"type":"invalid_request_error","message":"Invalid API Key provided: sk_test_abcdef123456 and sk_live_XYZ"}}"#,
        );
        let text = e.to_string();
        assert!(!text.contains("abcdef123456"), "{text}");
        assert!(!text.contains("sk_live_XYZ"), "{text}");
        assert!(text.contains("[redacted]"));
    }

    #[test]
    fn refund_answers_are_read_or_refused_as_unreadable() {
        let r = parse_refund(
            br#"{"id":"re_3Abc","object":"refund","amount":400,"currency":"USD","payment_intent":"pi_1","status":"failed","failure_reason":"expired_or_canceled_card","metadata":{"operation_id":"op-1","order_id":"ord-1","x":"y"}}"#,
        )
        .unwrap();
        assert_eq!(r.id, "re_3Abc");
        assert_eq!(r.status, RefundStatus::Failed);
        assert_eq!(r.amount, Some(400));
        assert_eq!(r.currency.as_deref(), Some("usd"));
        assert_eq!(r.payment_intent.as_deref(), Some("pi_1"));
        assert_eq!(r.operation_id.as_deref(), Some("op-1"));
        assert_eq!(
            r.failure_reason.as_deref(),
            Some("expired_or_canceled_card")
        );
        // Stripe documents the status nullable: read, as a status not known (never settled).
        let r = parse_refund(br#"{"id":"pyr_1","status":null}"#).unwrap();
        assert!(matches!(r.status, RefundStatus::Other(_)));
        for body in [
            r#"{"id":"pi_1","status":"succeeded"}"#,
            r#"{"id":"re_../x","status":"succeeded"}"#,
            r#"{"status":"succeeded"}"#,
            r#"{"id":"re_1","status":"succeeded","payment_intent":{"id":"pi_1"}}"#,
            r#"{"id":"re_1","sta"#,
        ] {
            assert!(
                matches!(
                    parse_refund(body.as_bytes()),
                    Err(GatewayError::Ambiguous { .. })
                ),
                "{body}"
            );
        }
    }

    #[test]
    fn a_refund_list_page_says_where_the_next_starts() {
        let page = |data: &str, more: &str| {
            format!(r#"{{"object":"list","data":[{data}],"has_more":{more},"url":"/v1/refunds"}}"#)
        };
        let two = r#"{"id":"re_2","status":"pending"},{"id":"re_1","status":"succeeded"}"#;
        let last = parse_refund_page(page(two, "false").as_bytes()).unwrap();
        assert_eq!(last.refunds.len(), 2);
        assert!(last.next.is_none());
        let more = parse_refund_page(page(two, "true").as_bytes()).unwrap();
        assert_eq!(more.next.unwrap(), "re_1");
        for body in [
            page("", "true"),
            r#"{"object":"list","data":[]}"#.to_owned(),
            page(r#"{"id":"ch_1","status":"pending"}"#, "false"),
        ] {
            assert!(
                matches!(
                    parse_refund_page(body.as_bytes()),
                    Err(GatewayError::Ambiguous { .. })
                ),
                "{body}"
            );
        }
        assert!(parse_refund_page(page("", "false").as_bytes())
            .unwrap()
            .refunds
            .is_empty());
    }

    #[test]
    fn the_refund_form_and_list_query() {
        let pi = PaymentIntentId::parse("pi_9").unwrap();
        let mut req = crate::testing::refund_create(&pi, 250);
        req.params.reason = Some(charge_core::refund::request::RefundReason::RequestedByCustomer);
        let form = refund_form(&req);
        let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("payment_intent"), Some("pi_9"));
        assert_eq!(get("amount"), Some("250"));
        assert_eq!(get("reason"), Some("requested_by_customer"));
        assert_eq!(
            get("metadata[operation_id]"),
            Some(req.operation_id.to_string().as_str())
        );
        assert_eq!(get("metadata[order_id]"), Some("ord-refund"));
        req.params.reason = None;
        assert_eq!(
            refund_form(&req).len(),
            4,
            "no reason sent when none is asked"
        );
        let after = StripeRefundId::parse("re_5").unwrap();
        assert_eq!(
            refund_list_query(&pi, 100, Some(&after)),
            "payment_intent=pi_9&limit=100&starting_after=re_5"
        );
        assert_eq!(
            refund_list_query(&pi, 3, None),
            "payment_intent=pi_9&limit=3"
        );
    }

    #[tokio::test]
    async fn a_refund_list_that_never_ends_is_refused_at_the_bound() {
        let fetched = std::sync::atomic::AtomicUsize::new(0);
        let endless = collect_refund_pages(|_| {
            let n = fetched.fetch_add(1, Ordering::Relaxed);
            async move {
                parse_refund_page(
                    format!(
                        r#"{{"data":[{{"id":"re_{n}","status":"succeeded"}}],"has_more":true}}"#
                    )
                    .as_bytes(),
                )
            }
        })
        .await;
        assert!(
            matches!(endless, Err(GatewayError::Ambiguous { .. })),
            "{endless:?}"
        );
        assert_eq!(fetched.load(Ordering::Relaxed), MAX_REFUND_PAGES);
        // Its twin that ends after three pages is read whole, each page after the last one's end.
        let asked = std::sync::Mutex::new(Vec::new());
        let all = collect_refund_pages(|after| {
            asked.lock().unwrap().push(after.map(|a| a.to_string()));
            let n = asked.lock().unwrap().len();
            async move {
                parse_refund_page(
                    format!(
                        r#"{{"data":[{{"id":"re_{n}","status":"succeeded"}}],"has_more":{}}}"#,
                        n < 3
                    )
                    .as_bytes(),
                )
            }
        })
        .await
        .unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(
            *asked.lock().unwrap(),
            vec![None, Some("re_1".to_owned()), Some("re_2".to_owned())]
        );
    }

    #[test]
    fn search_query_escapes_quotes() {
        let id = OperationId::parse("6f1c2a4e-8a3b-4c5d-9e0f-112233445566").unwrap();
        assert_eq!(
            search_query(&id),
            "metadata['operation_id']:'6f1c2a4e-8a3b-4c5d-9e0f-112233445566'"
        );
    }

    #[test]
    fn an_answer_naming_no_valid_payment_intent_is_unreadable() {
        // Only a `PaymentIntentId` reaches a URL; an id from Stripe is parsed by the same rule.
        for body in [
            r#"{"id":"pi_../../v1/customers","status":"succeeded"}"#,
            r#"{"id":"ch_123","status":"succeeded"}"#,
            r#"{"id":"pi_","status":"succeeded"}"#,
        ] {
            assert!(
                matches!(
                    parse_payment_intent(body.as_bytes(), false),
                    Err(GatewayError::Ambiguous { .. })
                ),
                "{body}"
            );
        }
        let pi = parse_payment_intent(br#"{"id":"pi_3Mtw","status":"succeeded"}"#, false).unwrap();
        assert_eq!(pi.id, "pi_3Mtw");
    }

    #[test]
    fn retry_only_where_it_can_help() {
        let lost: Result<Answer, GatewayError> =
            Err(GatewayError::Ambiguous { detail: "x".into() });
        assert!(worth_retrying(&lost));
        assert!(worth_retrying(&Ok(answer(409, "{}"))));
        assert!(!worth_retrying(&Ok(answer(429, "{}"))));
        assert!(
            !worth_retrying(&Ok(answer(500, "{}"))),
            "a 500 replays under the key"
        );
        assert!(!worth_retrying(&Ok(answer(402, "{}"))));
        let told_not_to = Answer {
            should_retry: Some(false),
            ..answer(409, "{}")
        };
        assert!(!worth_retrying(&Ok(told_not_to)));
        let told_to = Answer {
            should_retry: Some(true),
            ..answer(503, "{}")
        };
        assert!(worth_retrying(&Ok(told_to)));
    }
    /// A gateway to `base` whose attempts are bounded by `bound`, without in-call retries.
    fn gateway_to(base: &str, bound: Duration) -> StripeGateway {
        let mut cfg = StripeConfig::new(base, key());
        cfg.timeout = bound;
        cfg.connect_timeout = bound;
        cfg.max_network_retries = 0;
        StripeGateway::new(cfg).unwrap()
    }

    fn pi() -> PaymentIntentId {
        PaymentIntentId::parse("pi_transport").unwrap()
    }

    #[tokio::test]
    async fn an_answer_that_never_comes_is_ambiguous_at_the_whole_request_timeout() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        // Accepts the connection and never answers.
        let held = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(socket);
        });
        let g = gateway_to(&base, Duration::from_millis(300));
        let err = g.retrieve(&pi()).await.unwrap_err();
        assert!(
            matches!(&err, GatewayError::Ambiguous { detail } if detail.contains("timeout after 300ms")),
            "{err:?}"
        );
        assert_eq!(g.requests.retrieve.load(Ordering::Relaxed), 1);
        held.abort();
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error_and_a_dropped_one_lost() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let err = gateway_to(&closed, Duration::from_secs(2))
            .retrieve(&pi())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, GatewayError::Ambiguous { detail } if detail.starts_with("no response: connect error")),
            "{err:?}"
        );
        // Reads the request, then closes without a byte of answer.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = socket.read(&mut buf).await.unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        });
        let err = gateway_to(&base, Duration::from_secs(2))
            .retrieve(&pi())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, GatewayError::Ambiguous { detail } if detail.starts_with("no response: connection lost")),
            "{err:?}"
        );
        // What went out: the pinned version, the key as a bearer token, our user agent.
        let request = server.await.unwrap().to_ascii_lowercase();
        assert!(
            request.starts_with(
                "get /v1/payment_intents/pi_transport?expand%5b%5d=latest_charge http/1.1\r\n"
            ),
            "{request}"
        );
        assert!(
            request.contains("authorization: bearer sk_test_abcdef123456\r\n"),
            "{request}"
        );
        assert!(
            request.contains(&format!("stripe-version: {STRIPE_VERSION}\r\n")),
            "{request}"
        );
        assert!(request.contains("user-agent: charge-once/"), "{request}");
    }

    /// A configured version goes out in every request's `Stripe-Version` instead of the pin.
    #[tokio::test]
    async fn a_configured_version_is_the_header_every_request_carries() {
        for version in [StripeVersion::PINNED, StripeVersion::CURRENT] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let base = format!("http://{}", listener.local_addr().unwrap());
            let server = tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let n = socket.read(&mut buf).await.unwrap();
                String::from_utf8_lossy(&buf[..n]).into_owned()
            });
            let mut cfg = StripeConfig::new(&base, key());
            cfg.max_network_retries = 0;
            cfg.api_version = version;
            let _ = StripeGateway::new(cfg).unwrap().retrieve(&pi()).await;
            let request = server.await.unwrap().to_ascii_lowercase();
            let header = format!("stripe-version: {version}\r\n");
            assert!(request.contains(&header), "{request}");
            assert_eq!(request.matches("stripe-version:").count(), 1, "{request}");
        }
    }

    #[tokio::test]
    async fn an_https_base_is_spoken_to_in_tls() {
        // A plain TCP server: it reads what the client sends first, and closes.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("https://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut first = [0u8; 6];
            socket.read_exact(&mut first).await.unwrap();
            first
        });
        let err = gateway_to(&base, Duration::from_secs(2))
            .retrieve(&pi())
            .await
            .unwrap_err();
        assert!(matches!(err, GatewayError::Ambiguous { .. }), "{err:?}");
        // A TLS record of type handshake (22), version 3.x, then a ClientHello (1): rustls on ring
        // with the system's roots, and no request in clear text.
        let first = server.await.unwrap();
        assert_eq!((first[0], first[1], first[5]), (22, 3, 1), "{first:?}");
    }

    #[test]
    fn stripe_is_reached_over_tls_except_on_loopback() {
        for ok in [
            "https://api.stripe.com",
            "https://stripe-sim.staging.example.com:8443",
            "http://127.0.0.1:12111",
            "http://127.3.2.1",
            "http://localhost:12111",
            "http://[::1]:12111",
        ] {
            assert_eq!(check_api_base(ok), Ok(()), "{ok}");
        }
        for bad in [
            "http://api.stripe.com",
            "http://10.0.0.5:12111",
            "http://localhost.evil.example:80",
            "http://127.0.0.1.nip.io",
            "ftp://api.stripe.com",
            "https://user:pw@api.stripe.com",
            "https://api.stripe.com/?x=1",
            "api.stripe.com",
            "",
        ] {
            assert!(check_api_base(bad).is_err(), "{bad}");
        }
        let err = StripeGateway::new(StripeConfig::new(
            "http://api.stripe.com",
            SecretKey::new("sk_test_secret_value"),
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("loopback") && !err.contains("sk_test"),
            "{err}"
        );
    }
}
