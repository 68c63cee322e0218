//! Webhook events, sent the way Stripe sends them: one event per PaymentIntent change
//! (`payment_intent.created`, then `succeeded` / `processing` / `requires_action` /
//! `payment_failed` / `canceled`, and the final state of a `processing` intent when it settles),
//! each signed with the endpoint secret exactly as Stripe signs (`Stripe-Signature:
//! t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, re-signed with the current time on every
//! attempt), delivered at least once and retried with exponential back-off while the endpoint
//! fails.
//!
//! Faults, seeded like the API faults and counted: `duplicate` (a second delivery of the same
//! event id), `out_of_order` (held back so later events of the intent overtake it), `delayed`
//! (held back for minutes), `dropped` (never delivered: what a misconfigured endpoint or a
//! disabled event type looks like to the receiver).
//!
//! Two delivery modes ([`DeliveryMode`]): `webhook` (the signed HTTP POST above) and
//! `eventbridge` (what a Stripe event destination puts on an Amazon EventBridge partner event bus:
//! the same event as the `detail` of an EventBridge envelope, unsigned, since AWS authenticates
//! the delivery). The same events, the same faults and the same counts in both; only the wire
//! form of a delivery differs.
//!
//! [`crate::StripeSim::inject_event`] delivers an event Stripe did not create (a forged one)
//! through the same signing or envelope and the same retries, so a receiver can be tested against
//! a validly delivered lie.
//!
//! The queue is pure state with an explicit `now_ms` (`Outbox`); the HTTP sender in
//! [`crate::StripeSim::start`] and the in-process simulation both drain it.

use std::collections::BTreeMap;

use hmac::{Hmac, KeyInit, Mac};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::version::ApiVersion;
use crate::wire::random_id;

/// The signature header Stripe sends for `body` at `timestamp` (seconds).
pub fn signature_header(secret: &str, timestamp: i64, body: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(format!("{timestamp}.{body}").as_bytes());
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("t={timestamp},v1={hex}")
}

/// Webhook fault rates (each in `[0, 1]`) and how long the held-back deliveries wait.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookFaults {
    pub duplicate: f64,
    pub out_of_order: f64,
    pub delayed: f64,
    pub dropped: f64,
    /// How long an out-of-order event is held back (default 20 s).
    pub reorder_ms: i64,
    /// How long a delayed event is held back at most (uniform in `[1 s, delay_ms]`, default 5 min).
    pub delay_ms: i64,
    /// An outage of the event destination: every event of this span of simulated time
    /// (`[from, to)`, unix ms) is dropped, none delivered, whatever the rates.
    pub outage_ms: Option<(i64, i64)>,
}

impl Default for WebhookFaults {
    fn default() -> Self {
        Self {
            duplicate: 0.0,
            out_of_order: 0.0,
            delayed: 0.0,
            dropped: 0.0,
            reorder_ms: 20_000,
            delay_ms: 300_000,
            outage_ms: None,
        }
    }
}

impl WebhookFaults {
    /// Rates clamped to `[0, 1]` (NaN counts as 0), times at least 1 ms.
    pub fn sanitized(mut self) -> Self {
        for r in [
            &mut self.duplicate,
            &mut self.out_of_order,
            &mut self.delayed,
            &mut self.dropped,
        ] {
            *r = if r.is_nan() { 0.0 } else { r.clamp(0.0, 1.0) };
        }
        self.reorder_ms = self.reorder_ms.max(1);
        self.delay_ms = self.delay_ms.max(1_000);
        self
    }
}

/// How a delivery goes on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryMode {
    /// A signed HTTP POST of the event (`Stripe-Signature`), as a webhook endpoint receives it.
    #[default]
    Webhook,
    /// The event as the `detail` of an EventBridge envelope, unsigned, as a Stripe event
    /// destination delivers it to an Amazon EventBridge partner event bus.
    #[serde(rename = "eventbridge")]
    EventBridge,
}

impl DeliveryMode {
    pub fn as_str(&self) -> &'static str {
        match self {
            DeliveryMode::Webhook => "webhook",
            DeliveryMode::EventBridge => "eventbridge",
        }
    }
}

impl std::str::FromStr for DeliveryMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "webhook" => Ok(DeliveryMode::Webhook),
            "eventbridge" => Ok(DeliveryMode::EventBridge),
            other => Err(format!(
                "unknown delivery mode {other:?} (webhook or eventbridge)"
            )),
        }
    }
}

/// The partner event source of an EventBridge delivery when none is configured (Stripe names
/// sources `aws.partner/stripe.com/<event destination id>`).
pub const DEFAULT_EVENT_SOURCE: &str = "aws.partner/stripe.com/ed_test_61SimulatedDestination";
/// The AWS account and region of an EventBridge delivery when none is configured.
pub const DEFAULT_ACCOUNT: &str = "000000000000";
pub const DEFAULT_REGION: &str = "us-east-1";

/// Where events go and how. Events are generated only while a secret is set (`webhook` mode) or
/// in `eventbridge` mode (no secret: AWS authenticates that delivery).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookConfig {
    /// `http://127.0.0.1:PORT/path` for the HTTP sender; `None` for in-process delivery only.
    pub url: Option<String>,
    /// The endpoint's signing secret (`whsec_…`).
    pub secret: Option<String>,
    pub faults: WebhookFaults,
    /// Attempts per event before giving up (default 0 = 12, roughly Stripe's days of retries
    /// compressed: 10 s doubling to a 1 h cap).
    pub max_attempts: u32,
    /// The event types the endpoint subscribed to, as selected in Stripe's dashboard (`None`:
    /// every type, `payment_intent.created` included).
    pub enabled_events: Option<Vec<String>>,
    /// `webhook` (default) or `eventbridge`.
    pub mode: DeliveryMode,
    /// `eventbridge` mode: the envelope's `source` (default [`DEFAULT_EVENT_SOURCE`]).
    pub event_source: Option<String>,
    /// `eventbridge` mode: the envelope's `account` (default [`DEFAULT_ACCOUNT`]).
    pub account: Option<String>,
    /// `eventbridge` mode: the envelope's `region` (default [`DEFAULT_REGION`]).
    pub region: Option<String>,
    /// The endpoint's (or event destination's) API version, fixed at its creation: each event's
    /// `api_version` and the version its object is written in (`None`: the pinned `2024-06-20`).
    pub api_version: Option<String>,
}

impl WebhookConfig {
    /// The endpoint's API version ([`WebhookConfig::api_version`]; the pin when unset or unreadable,
    /// which [`crate::StripeSim::set_webhooks`] refuses).
    pub fn version(&self) -> ApiVersion {
        self.api_version
            .as_deref()
            .and_then(|v| ApiVersion::parse(v).ok())
            .unwrap_or_default()
    }

    /// The `source` of this configuration's EventBridge envelopes.
    pub fn event_source(&self) -> &str {
        self.event_source.as_deref().unwrap_or(DEFAULT_EVENT_SOURCE)
    }
}

/// Counts of what happened to events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WebhookCounts {
    /// Events generated (each may be delivered several times).
    pub events: u64,
    /// Deliveries handed to the endpoint (attempts, duplicates included).
    pub attempts: u64,
    /// Attempts the endpoint acknowledged with 2xx.
    pub delivered: u64,
    /// Attempts that failed (non-2xx or no answer) and were scheduled again.
    pub failed: u64,
    /// Events given up after the last attempt.
    pub given_up: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub delayed: u64,
    pub dropped: u64,
    /// Of `dropped`, the events of the outage span ([`WebhookFaults::outage_ms`]).
    pub outage: u64,
    /// Events delivered through [`crate::StripeSim::inject_event`] (not Stripe's; not in
    /// `events`, and no fault applies to them; their attempts are counted like the others).
    pub injected: u64,
}

/// One delivery to make: the body and the header to send with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    pub event_id: String,
    pub event_type: String,
    /// What goes on the wire: the Stripe event (`webhook` mode) or its EventBridge envelope
    /// (`eventbridge` mode).
    pub body: String,
    /// `Stripe-Signature`, signed at the time the delivery was taken (empty in `eventbridge`
    /// mode: that delivery is not signed).
    pub signature: String,
    /// 1 for the first attempt.
    pub attempt: u32,
    pub mode: DeliveryMode,
    /// Delivered through [`crate::StripeSim::inject_event`]: not an event Stripe created.
    pub injected: bool,
    /// Internal queue sequence (to report the result).
    pub(crate) seq: u64,
}

impl Delivery {
    /// The Stripe event this delivery carries (the envelope's `detail` in `eventbridge` mode).
    pub fn event(&self) -> Option<Value> {
        let v: Value = serde_json::from_str(&self.body).ok()?;
        match self.mode {
            DeliveryMode::Webhook => Some(v),
            DeliveryMode::EventBridge => v.get("detail").cloned(),
        }
    }
}

#[derive(Clone, Debug)]
struct Pending {
    event_id: String,
    event_type: String,
    body: String,
    attempt: u32,
    injected: bool,
}

/// An id shaped like EventBridge's (a UUID), derived from `(event_id, seq)`: deterministic, and
/// drawing nothing from the seeded generator (so both modes make the same events and faults).
fn envelope_id(event_id: &str, seq: u64) -> String {
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for b in event_id.bytes().chain(seq.to_le_bytes()) {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    // `h` as 32 lowercase hex digits, dashed 8-4-4-4-12.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(36);
    for i in 0..32 {
        if matches!(i, 8 | 12 | 16 | 20) {
            out.push('-');
        }
        out.push(char::from(HEX[((h >> (124 - 4 * i)) & 0xf) as usize]));
    }
    out
}

/// `ms` (unix) as EventBridge writes `time`: RFC 3339 UTC, whole seconds.
pub fn rfc3339_utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    if !(0..=9_999).contains(&year) {
        return format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
            rem / 3_600,
            rem % 3_600 / 60,
            rem % 60
        );
    }
    fn digits(out: &mut String, n: i64, width: u32) {
        for p in (0..width).rev() {
            out.push(char::from(b'0' + (n / 10_i64.pow(p) % 10) as u8));
        }
    }
    let mut out = String::with_capacity(20);
    digits(&mut out, year, 4);
    out.push('-');
    digits(&mut out, month, 2);
    out.push('-');
    digits(&mut out, day, 2);
    out.push('T');
    digits(&mut out, rem / 3_600, 2);
    out.push(':');
    digits(&mut out, rem % 3_600 / 60, 2);
    out.push(':');
    digits(&mut out, rem % 60, 2);
    out.push('Z');
    out
}

/// The EventBridge envelope a Stripe event destination delivers `event` (a JSON string) in.
pub fn eventbridge_envelope(config: &WebhookConfig, id: &str, event: &str, now_ms: i64) -> String {
    let detail: Value = serde_json::from_str(event).unwrap_or(Value::Null);
    json!({
        "version": "0",
        "id": id,
        "detail-type": detail["type"],
        "source": config.event_source(),
        "account": config.account.as_deref().unwrap_or(DEFAULT_ACCOUNT),
        "time": rfc3339_utc(now_ms),
        "region": config.region.as_deref().unwrap_or(DEFAULT_REGION),
        "resources": [],
        "detail": detail,
    })
    .to_string()
}

/// A Stripe event's JSON for `intent` reaching `kind` at `at_ms`: the bytes `json!` would
/// write for it (keys in order, compact), without copying the intent into a new tree.
fn event_body(
    event_id: &str,
    kind: &str,
    intent: &str,
    at_ms: i64,
    version: &ApiVersion,
) -> String {
    let text = |s: &str| serde_json::to_string(s).unwrap_or_default();
    // The fields in key order, as a `serde_json::Map` keeps them.
    let mut out = String::with_capacity(intent.len() + 256);
    out.push_str("{\"api_version\":");
    out.push_str(&text(version.as_str()));
    out.push_str(",\"created\":");
    out.push_str(&at_ms.div_euclid(1000).to_string());
    out.push_str(",\"data\":{\"object\":");
    out.push_str(&version.render(intent));
    out.push_str("},\"id\":");
    out.push_str(&text(event_id));
    out.push_str(
        ",\"livemode\":false,\"object\":\"event\",\"pending_webhooks\":1,\
         \"request\":{\"id\":null,\"idempotency_key\":null},\"type\":",
    );
    out.push_str(&text(kind));
    out.push('}');
    out
}

/// [`eventbridge_envelope`] of an event the outbox wrote itself (`event`: compact JSON, keys in
/// order, as `serde_json` writes a `Value`; `event_type`: its `type`): the same bytes, with the
/// event spliced in as it is instead of parsed and written again.
fn envelope_around(
    config: &WebhookConfig,
    id: &str,
    event_type: &str,
    event: &str,
    now_ms: i64,
) -> String {
    let text = |s: &str| serde_json::to_string(s).unwrap_or_default();
    // The envelope's keys in order: account, detail, detail-type, id, region, resources, source,
    // time, version.
    let mut out = String::with_capacity(event.len() + 320);
    out.push_str("{\"account\":");
    out.push_str(&text(config.account.as_deref().unwrap_or(DEFAULT_ACCOUNT)));
    out.push_str(",\"detail\":");
    out.push_str(event);
    out.push_str(",\"detail-type\":");
    out.push_str(&text(event_type));
    out.push_str(",\"id\":");
    out.push_str(&text(id));
    out.push_str(",\"region\":");
    out.push_str(&text(config.region.as_deref().unwrap_or(DEFAULT_REGION)));
    out.push_str(",\"resources\":[],\"source\":");
    out.push_str(&text(config.event_source()));
    out.push_str(",\"time\":");
    out.push_str(&text(&rfc3339_utc(now_ms)));
    out.push_str(",\"version\":\"0\"}");
    out
}

/// The queue of events waiting for delivery, by due time.
pub(crate) struct Outbox {
    pub(crate) config: WebhookConfig,
    queue: BTreeMap<(i64, u64), Pending>,
    in_flight: BTreeMap<u64, Pending>,
    seq: u64,
    rng: SmallRng,
    pub(crate) counts: WebhookCounts,
}

/// The event type Stripe sends when a PaymentIntent reaches `status` (`None`: no event).
pub fn event_type_for(status: &str) -> Option<&'static str> {
    match status {
        "succeeded" => Some("payment_intent.succeeded"),
        "processing" => Some("payment_intent.processing"),
        "requires_action" => Some("payment_intent.requires_action"),
        "requires_payment_method" => Some("payment_intent.payment_failed"),
        "canceled" => Some("payment_intent.canceled"),
        // An authorization waiting for its capture (`capture_method=manual`).
        "requires_capture" => Some("payment_intent.amount_capturable_updated"),
        _ => None,
    }
}

impl Outbox {
    pub(crate) fn new(seed: u64, config: WebhookConfig) -> Self {
        Self {
            config,
            queue: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            seq: 0,
            rng: SmallRng::seed_from_u64(seed ^ 0x0057_EB40_u64),
            counts: WebhookCounts::default(),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.config.secret.is_some() || self.config.mode == DeliveryMode::EventBridge
    }

    fn max_attempts(&self) -> u32 {
        match self.config.max_attempts {
            0 => 12,
            n => n,
        }
    }

    /// Queues the events for a PaymentIntent that just reached `status` at `at_ms` (`intent`:
    /// its JSON then; `created`: also `payment_intent.created` first).
    pub(crate) fn emit(&mut self, status: &str, intent: &str, created: bool, at_ms: i64) {
        if !self.enabled() {
            return;
        }
        if created {
            self.push_event("payment_intent.created", intent, at_ms);
        }
        if let Some(kind) = event_type_for(status) {
            self.push_event(kind, intent, at_ms);
        }
    }

    /// Queues one event of type `kind` about `object` (its JSON) at `at_ms`: the refund and
    /// charge events, whose object is not a PaymentIntent.
    pub(crate) fn emit_object(&mut self, kind: &str, object: &str, at_ms: i64) {
        if self.enabled() {
            self.push_event(kind, object, at_ms);
        }
    }

    fn push_event(&mut self, kind: &str, intent: &str, at_ms: i64) {
        if let Some(enabled) = &self.config.enabled_events {
            if !enabled.iter().any(|e| e == kind) {
                return;
            }
        }
        self.counts.events += 1;
        let event_id = random_id(&mut self.rng, "evt_", 24);
        let version = self.config.version();
        let body = event_body(&event_id, kind, intent, at_ms, &version);
        let f = self.config.faults.clone();
        if f.outage_ms
            .is_some_and(|(from, to)| from <= at_ms && at_ms < to)
        {
            self.counts.dropped += 1;
            self.counts.outage += 1;
            return;
        }
        if self.rng.random_bool(f.dropped) {
            self.counts.dropped += 1;
            return;
        }
        let mut due = at_ms;
        if self.rng.random_bool(f.out_of_order) {
            self.counts.reordered += 1;
            due += f.reorder_ms;
        }
        if self.rng.random_bool(f.delayed) {
            self.counts.delayed += 1;
            due += self.rng.random_range(1_000..=f.delay_ms);
        }
        let pending = Pending {
            event_id,
            event_type: kind.to_owned(),
            body,
            attempt: 1,
            injected: false,
        };
        if self.rng.random_bool(f.duplicate) {
            self.counts.duplicated += 1;
            let gap = self.rng.random_range(1..=5_000);
            self.enqueue(due + gap, pending.clone());
        }
        self.enqueue(due, pending);
    }

    fn enqueue(&mut self, due: i64, p: Pending) {
        self.seq += 1;
        self.queue.insert((due, self.seq), p);
    }

    /// When the next delivery is due (`None`: nothing queued).
    pub(crate) fn next_due(&self) -> Option<i64> {
        self.queue.keys().next().map(|(due, _)| *due)
    }

    /// Takes every delivery due at `now_ms`, signed (or wrapped) at `now_ms`, oldest first.
    pub(crate) fn take_due(&mut self, now_ms: i64) -> Vec<Delivery> {
        if !self.enabled() {
            return Vec::new();
        }
        let mut out = Vec::new();
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            let ((_, seq), p) = entry.remove_entry();
            if let Some(d) = self.deliver(seq, p, now_ms) {
                out.push(d);
            }
        }
        out
    }

    /// One attempt of `p`, as the configured mode sends it; `None` when it cannot be sent (a
    /// webhook without a secret).
    fn deliver(&mut self, seq: u64, p: Pending, now_ms: i64) -> Option<Delivery> {
        let (body, signature) = match self.config.mode {
            DeliveryMode::Webhook => {
                let secret = self.config.secret.as_deref()?;
                let signature = signature_header(secret, now_ms.div_euclid(1000), &p.body);
                (p.body.clone(), signature)
            }
            DeliveryMode::EventBridge => {
                let id = envelope_id(&p.event_id, seq);
                let body = envelope_around(&self.config, &id, &p.event_type, &p.body, now_ms);
                (body, String::new())
            }
        };
        self.counts.attempts += 1;
        let d = Delivery {
            event_id: p.event_id.clone(),
            event_type: p.event_type.clone(),
            body,
            signature,
            attempt: p.attempt,
            mode: self.config.mode,
            injected: p.injected,
            seq,
        };
        self.in_flight.insert(seq, p);
        Some(d)
    }

    /// Delivers `event` (a whole Stripe event object, with its `id` and `type`) now, through the
    /// same signing or envelope and retries as Stripe's own; no fault applies. `None` when no
    /// delivery can be made (events off, or an event without an `id` or `type`).
    pub(crate) fn inject(&mut self, event: &Value, now_ms: i64) -> Option<Delivery> {
        let pending = self.injected(event)?;
        self.seq += 1;
        let seq = self.seq;
        self.deliver(seq, pending, now_ms)
    }

    /// Queues `event` as [`Outbox::inject`] delivers it, due at `now_ms` (for the HTTP sender).
    pub(crate) fn queue_injected(&mut self, event: &Value, now_ms: i64) -> bool {
        let Some(pending) = self.injected(event) else {
            return false;
        };
        self.enqueue(now_ms, pending);
        true
    }

    fn injected(&mut self, event: &Value) -> Option<Pending> {
        if !self.enabled() {
            return None;
        }
        let pending = Pending {
            event_id: event["id"].as_str()?.to_owned(),
            event_type: event["type"].as_str()?.to_owned(),
            body: event.to_string(),
            attempt: 1,
            injected: true,
        };
        self.counts.injected += 1;
        Some(pending)
    }

    /// The endpoint's answer for a delivery: acknowledged, or failed (then retried with
    /// back-off: 10 s × 2^(attempt-1), at most 1 h, until `max_attempts`).
    pub(crate) fn report(&mut self, seq: u64, ok: bool, now_ms: i64) {
        let Some(mut p) = self.in_flight.remove(&seq) else {
            return;
        };
        if ok {
            self.counts.delivered += 1;
            return;
        }
        self.counts.failed += 1;
        if p.attempt >= self.max_attempts() {
            self.counts.given_up += 1;
            return;
        }
        let backoff = (10_000_i64 << (p.attempt - 1).min(20)).min(3_600_000);
        p.attempt += 1;
        self.enqueue(now_ms + backoff, p);
    }

    /// Clears the queue and counts, keeps the configuration.
    pub(crate) fn clear(&mut self, seed: u64) {
        *self = Outbox::new(seed, self.config.clone());
    }
}

/// Checks that a webhook URL is `http://` to a loopback address (the simulator only ever sends to
/// this machine).
pub fn check_url(url: &str) -> Result<(), String> {
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| format!("invalid URL {url:?}: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err("the webhook URL must be http://".into());
    }
    match uri.host() {
        Some("127.0.0.1" | "localhost" | "[::1]") => Ok(()),
        _ => Err(
            "the webhook URL must point to a loopback address (127.0.0.1, localhost, [::1])".into(),
        ),
    }
}

/// Sends due deliveries over HTTP until aborted: polls every `poll` (real time), posts each due
/// delivery, reports 2xx as delivered and anything else (or no answer within 10 s) as failed.
/// In `eventbridge` mode the envelope is posted unsigned (e.g. to a local Lambda invoke URL such
/// as `cargo lambda watch`'s `http://127.0.0.1:9000/2015-03-31/functions/events/invocations`).
pub(crate) async fn run_sender(sim: crate::StripeSim, poll: std::time::Duration) {
    loop {
        tokio::time::sleep(poll).await;
        let Some(url) = sim.webhooks().url else {
            continue;
        };
        for delivery in sim.take_due_webhooks() {
            let ok = post(&url, &delivery).await;
            sim.webhook_result(&delivery, ok);
        }
    }
}

async fn post(url: &str, d: &Delivery) -> bool {
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::Full;
    use hyper::header::{CONTENT_TYPE, HOST, USER_AGENT};
    use hyper_util::rt::TokioIo;

    let Ok(uri) = url.parse::<hyper::Uri>() else {
        return false;
    };
    let (Some(host), Some(authority)) = (uri.host(), uri.authority()) else {
        return false;
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(80);
    let attempt = async {
        let stream = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .ok()?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .ok()?;
        let conn = tokio::spawn(conn);
        let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let mut req = hyper::Request::post(path)
            .header(HOST, authority.as_str())
            .header(CONTENT_TYPE, "application/json; charset=utf-8")
            .header(USER_AGENT, "Stripe/1.0 (+https://stripe.com/docs/webhooks)");
        if d.mode == DeliveryMode::Webhook {
            req = req.header("Stripe-Signature", &d.signature);
        }
        let req = req.body(Full::new(Bytes::from(d.body.clone()))).ok()?;
        let resp = sender.send_request(req).await.ok()?;
        conn.abort();
        Some(resp.status().is_success())
    };
    tokio::time::timeout(Duration::from_secs(10), attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox(faults: WebhookFaults) -> Outbox {
        Outbox::new(
            7,
            WebhookConfig {
                secret: Some("whsec_test".into()),
                faults,
                ..WebhookConfig::default()
            },
        )
    }

    fn intent(status: &str) -> Value {
        json!({"id": "pi_1", "object": "payment_intent", "status": status})
    }

    /// The envelope's id and time are the text `format!` writes for them.
    #[test]
    fn envelope_ids_and_times_are_the_formatted_text() {
        for (i, event_id) in ["evt_1", "evt_", "", "evt_é\"x"].iter().enumerate() {
            for seq in [0, 1, 7, u64::MAX, 1_000_003 * i as u64] {
                let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
                for b in event_id.bytes().chain(seq.to_le_bytes()) {
                    h ^= u128::from(b);
                    h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
                }
                let hex = format!("{h:032x}");
                let want = format!(
                    "{}-{}-{}-{}-{}",
                    &hex[0..8],
                    &hex[8..12],
                    &hex[12..16],
                    &hex[16..20],
                    &hex[20..32]
                );
                assert_eq!(envelope_id(event_id, seq), want);
            }
        }
        // The formatted text, as `rfc3339_utc` wrote it before it wrote digits itself.
        let formatted = |ms: i64| {
            let secs = ms.div_euclid(1000);
            let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
            let z = days + 719_468;
            let era = z.div_euclid(146_097);
            let doe = z - era * 146_097;
            let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
            let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
            let mp = (5 * doy + 2) / 153;
            let day = doy - (153 * mp + 2) / 5 + 1;
            let month = if mp < 10 { mp + 3 } else { mp - 9 };
            let year = yoe + era * 400 + i64::from(month <= 2);
            format!(
                "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
                rem / 3_600,
                rem % 3_600 / 60,
                rem % 60
            )
        };
        // From before year 0 (the formatted fallback) to past 9999, in uneven steps.
        let mut ms = -62_167_219_200_001_i64;
        while ms < 253_402_300_800_000 * 2 {
            assert_eq!(rfc3339_utc(ms), formatted(ms), "{ms}");
            ms += 987_654_321_987;
        }
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(1_700_000_000_999), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(253_402_300_799_000), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339_utc(253_402_300_800_000), "10000-01-01T00:00:00Z");
    }

    /// The fast paths write the bytes the `json!` forms write.
    #[test]
    fn events_and_envelopes_are_the_bytes_json_writes() {
        let intent = json!({
            "id": "pi_1", "object": "payment_intent", "status": "succeeded", "amount": 4200,
            "metadata": {"order_id": "o-\"1\"\n", "operation_id": "op"}, "canceled_at": null,
            "payment_method_types": ["card"], "ratio": 0.5, "nested": {"b": [1, {"a": true}]},
        });
        for kind in ["payment_intent.succeeded", "odd \"type\"\u{1}é"] {
            let body = event_body(
                "evt_1",
                kind,
                &intent.to_string(),
                1_700_000_000_999,
                &ApiVersion::default(),
            );
            let by_json = json!({
                "id": "evt_1",
                "object": "event",
                "api_version": "2024-06-20",
                "created": 1_700_000_000_999_i64.div_euclid(1000),
                "data": { "object": intent },
                "livemode": false,
                "pending_webhooks": 1,
                "request": { "id": null, "idempotency_key": null },
                "type": kind,
            })
            .to_string();
            assert_eq!(body, by_json);
            for config in [
                WebhookConfig::default(),
                WebhookConfig {
                    account: Some("12345".into()),
                    region: Some("eu-\"west\"".into()),
                    event_source: Some("aws.partner/stripe.com/ed_x".into()),
                    ..WebhookConfig::default()
                },
            ] {
                assert_eq!(
                    envelope_around(&config, "env-1", kind, &body, 1_700_000_000_999),
                    eventbridge_envelope(&config, "env-1", &body, 1_700_000_000_999)
                );
            }
        }
    }

    #[test]
    fn signature_matches_an_independent_hmac() {
        // Python: hmac.new(b"whsec_test_secret", b'1700000000.{"id":"evt_1",...}', sha256)
        let body = r#"{"id":"evt_1","type":"payment_intent.succeeded"}"#;
        assert_eq!(
            signature_header("whsec_test_secret", 1_700_000_000, body),
            "t=1700000000,v1=22d8dc182f5c588077683bd378368e29765bfe5df2560112b4f28fef120f0e31"
        );
    }

    #[test]
    fn events_are_queued_signed_and_retried() {
        let mut o = outbox(WebhookFaults::default());
        o.emit("succeeded", &intent("succeeded").to_string(), true, 1_000);
        assert_eq!(o.next_due(), Some(1_000));
        let due = o.take_due(2_000);
        let kinds: Vec<&str> = due.iter().map(|d| d.event_type.as_str()).collect();
        assert_eq!(
            kinds,
            ["payment_intent.created", "payment_intent.succeeded"]
        );
        assert!(due[1].signature.starts_with("t=2,v1="));
        let body: Value = serde_json::from_str(&due[1].body).unwrap();
        assert_eq!(body["data"]["object"]["status"], "succeeded");
        assert_eq!(body["id"], due[1].event_id.as_str());
        o.report(due[0].seq, true, 2_000);
        o.report(due[1].seq, false, 2_000);
        assert_eq!(o.next_due(), Some(12_000), "first retry after 10 s");
        let again = o.take_due(12_000);
        assert_eq!(again[0].event_id, due[1].event_id);
        assert_eq!(again[0].attempt, 2);
        o.report(again[0].seq, false, 12_000);
        assert_eq!(o.next_due(), Some(32_000), "then 20 s");
        assert_eq!(o.counts.failed, 2);
        assert_eq!(o.counts.delivered, 1);
    }

    #[test]
    fn gives_up_after_max_attempts() {
        let mut o = outbox(WebhookFaults::default());
        o.config.max_attempts = 2;
        o.emit("succeeded", &intent("succeeded").to_string(), false, 0);
        let d = o.take_due(0);
        o.report(d[0].seq, false, 0);
        let d = o.take_due(10_000);
        o.report(d[0].seq, false, 10_000);
        assert_eq!(o.next_due(), None);
        assert_eq!(o.counts.given_up, 1);
    }

    #[test]
    fn faults_are_applied_and_counted() {
        let all = |rate| WebhookFaults {
            duplicate: rate,
            ..WebhookFaults::default()
        };
        let mut o = outbox(all(1.0));
        o.emit("succeeded", &intent("succeeded").to_string(), false, 0);
        let d = o.take_due(10_000);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].event_id, d[1].event_id, "the same event twice");
        assert_eq!(o.counts.duplicated, 1);

        let mut o = outbox(WebhookFaults {
            dropped: 1.0,
            ..WebhookFaults::default()
        });
        o.emit("succeeded", &intent("succeeded").to_string(), true, 0);
        assert_eq!(o.next_due(), None);
        assert_eq!(o.counts.dropped, 2);

        let mut o = outbox(WebhookFaults {
            out_of_order: 1.0,
            ..WebhookFaults::default()
        });
        o.emit("processing", &intent("processing").to_string(), false, 0);
        assert_eq!(o.next_due(), Some(20_000));
        assert_eq!(o.counts.reordered, 1);

        let mut o = outbox(WebhookFaults {
            delayed: 1.0,
            ..WebhookFaults::default()
        });
        o.emit("processing", &intent("processing").to_string(), false, 0);
        let due = o.next_due().unwrap();
        assert!((1_000..=300_000).contains(&due), "{due}");
        assert_eq!(o.counts.delayed, 1);
    }

    #[test]
    fn only_the_subscribed_types() {
        let mut o = outbox(WebhookFaults::default());
        o.config.enabled_events = Some(vec!["payment_intent.succeeded".into()]);
        o.emit("succeeded", &intent("succeeded").to_string(), true, 0);
        let d = o.take_due(0);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].event_type, "payment_intent.succeeded");
    }

    #[test]
    fn eventbridge_time_is_rfc3339_utc() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(1_800_000_000_000), "2027-01-15T08:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400_999), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(-1), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn eventbridge_mode_wraps_the_same_events_unsigned() {
        let faults = WebhookFaults {
            duplicate: 0.3,
            out_of_order: 0.3,
            delayed: 0.3,
            dropped: 0.1,
            ..WebhookFaults::default()
        };
        let mut hook = outbox(faults.clone());
        let mut bridge = Outbox::new(
            7,
            WebhookConfig {
                faults,
                mode: DeliveryMode::EventBridge,
                ..WebhookConfig::default()
            },
        );
        assert!(bridge.enabled(), "no secret needed");
        for i in 0..50 {
            hook.emit(
                "succeeded",
                &intent("succeeded").to_string(),
                true,
                i * 1_000,
            );
            bridge.emit(
                "succeeded",
                &intent("succeeded").to_string(),
                true,
                i * 1_000,
            );
        }
        assert_eq!(hook.counts, bridge.counts, "the same events and faults");
        let (a, b) = (hook.take_due(i64::MAX), bridge.take_due(i64::MAX));
        assert_eq!(a.len(), b.len());
        for (h, e) in a.iter().zip(&b) {
            assert_eq!((&h.event_id, h.attempt), (&e.event_id, e.attempt));
            assert_eq!(e.mode, DeliveryMode::EventBridge);
            assert!(e.signature.is_empty());
            let env: Value = serde_json::from_str(&e.body).unwrap();
            assert_eq!(env["version"], "0");
            assert_eq!(env["detail-type"], h.event_type.as_str());
            assert_eq!(env["source"], DEFAULT_EVENT_SOURCE);
            assert_eq!(env["region"], "us-east-1");
            assert_eq!(env["resources"], json!([]));
            assert_eq!(env["id"].as_str().unwrap().len(), 36);
            let hook_body: Value = serde_json::from_str(&h.body).unwrap();
            assert_eq!(env["detail"], hook_body, "the detail is the webhook body");
            assert_eq!(e.event(), Some(hook_body.clone()));
            assert_eq!(h.event(), Some(hook_body));
        }
    }

    #[test]
    fn injected_events_are_delivered_like_stripes_and_retried() {
        let mut o = outbox(WebhookFaults {
            dropped: 1.0,
            ..WebhookFaults::default()
        });
        let forged = json!({"id": "evt_forged", "type": "payment_intent.succeeded",
            "data": {"object": intent("succeeded")}});
        let d = o.inject(&forged, 5_000).unwrap();
        assert!(d.injected);
        assert_eq!(d.body, forged.to_string());
        assert!(
            d.signature.starts_with("t=5,v1="),
            "signed, no fault applies"
        );
        o.report(d.seq, false, 5_000);
        let again = o.take_due(15_000);
        assert_eq!(again.len(), 1);
        assert!(again[0].injected);
        assert_eq!(again[0].attempt, 2);
        assert_eq!((o.counts.events, o.counts.injected), (0, 1));
        assert!(o.inject(&json!({"type": "x"}), 0).is_none(), "no id");
        assert!(o.queue_injected(&forged, 20_000));
        assert_eq!(o.take_due(20_000).len(), 1);
    }

    #[test]
    fn nothing_without_a_secret() {
        let mut o = Outbox::new(1, WebhookConfig::default());
        o.emit("succeeded", &intent("succeeded").to_string(), true, 0);
        assert_eq!(o.counts.events, 0);
        assert!(o.take_due(1).is_empty());
    }
}
