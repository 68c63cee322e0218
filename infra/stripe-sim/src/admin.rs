//! The unauthenticated admin API under `/_sim/`: faults, capacity, clock, ledger,
//! stats, reset, forced statuses. Bad JSON is a `400`, never a panic.

use std::collections::BTreeMap;
use std::time::Duration;

use hyper::Method;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::capacity::{Capacity, CapacityClock, CreateLatency};
use crate::faults::FaultKind;
use crate::reply::Reply;
use crate::StripeSim;

fn bad_request(msg: impl Into<String>) -> Reply {
    Reply::json(
        400,
        &json!({ "error": { "type": "invalid_request_error", "message": msg.into() } }),
    )
}

fn parse<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, Reply> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| bad_request(format!("invalid JSON body: {e}")))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FaultsUpdate {
    rates: Option<BTreeMap<FaultKind, f64>>,
    latency_ms: Option<u64>,
    script: Option<Vec<FaultKind>>,
    append_script: Option<Vec<FaultKind>>,
    faults_on_reads: Option<bool>,
    search_lag_secs: Option<u64>,
    search_lag_ms: Option<u64>,
    processing_settle_secs: Option<u64>,
    processing_settle_ms: Option<u64>,
    refund_settle_secs: Option<u64>,
    refund_settle_ms: Option<u64>,
    uncaptured_expiry_secs: Option<u64>,
    uncaptured_expiry_ms: Option<u64>,
    seed: Option<u64>,
}

/// `Some(None)` for an explicit `null`, `None` for an absent field.
fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// `POST /_sim/capacity`: every field optional. A rate is requests/s, `null` = unlimited.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CapacityUpdate {
    /// First set all five rates to Stripe's defaults (`true`) ...
    stripe_defaults: Option<bool>,
    /// ... or to unlimited (`true`); then the single rates below apply.
    unlimited: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    create_per_sec: Option<Option<u32>>,
    #[serde(default, deserialize_with = "nullable")]
    retrieve_per_sec: Option<Option<u32>>,
    #[serde(default, deserialize_with = "nullable")]
    search_per_sec: Option<Option<u32>>,
    #[serde(default, deserialize_with = "nullable")]
    cancel_per_sec: Option<Option<u32>>,
    #[serde(default, deserialize_with = "nullable")]
    capture_per_sec: Option<Option<u32>>,
    #[serde(default, deserialize_with = "nullable")]
    refund_per_sec: Option<Option<u32>>,
    #[serde(default, deserialize_with = "nullable")]
    refund_read_per_sec: Option<Option<u32>>,
    #[serde(default, deserialize_with = "nullable")]
    account_per_sec: Option<Option<u32>>,
    clock: Option<CapacityClock>,
    /// `null` turns create latency off; an object turns it on (absent fields: the defaults).
    #[serde(default, deserialize_with = "nullable")]
    create_latency: Option<Option<LatencyUpdate>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LatencyUpdate {
    p50_ms: Option<u64>,
    sigma: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ClockUpdate {
    set_ms: Option<i64>,
    advance_secs: Option<i64>,
    advance_ms: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ResetBody {
    set_clock_ms: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct StatusBody {
    status: String,
}

/// Dispatches `/_sim/{rest}`.
pub(crate) fn handle(sim: &StripeSim, method: &Method, rest: &str, body: &[u8]) -> Reply {
    let result = match (method, rest) {
        (&Method::GET, "faults") => Ok(faults_json(sim)),
        (&Method::POST, "faults") => update_faults(sim, body),
        (&Method::GET, "capacity") => Ok(capacity_json(sim)),
        (&Method::POST, "capacity") => update_capacity(sim, body),
        (&Method::GET, "clock") => Ok(clock_json(sim)),
        (&Method::POST, "clock") => update_clock(sim, body),
        (&Method::GET, "ledger") => Ok(ledger_json(sim)),
        (&Method::GET, "stats") => Ok(stats_json(sim)),
        (&Method::POST, "reset") => reset(sim, body),
        (&Method::GET, "webhooks") => Ok(webhooks_json(sim)),
        (&Method::POST, "webhooks") => update_webhooks(sim, body),
        (&Method::POST, "webhooks/inject") => inject_event(sim, body),
        (&Method::GET, "disputes") => Ok(disputes_json(sim)),
        (&Method::POST, "disputes") => dispute_charge(sim, body),
        (&Method::GET, "disputes/timing") => Ok(dispute_timing_json(sim)),
        (&Method::POST, "disputes/timing") => update_dispute_timing(sim, body),
        (&Method::POST, r) => match r.strip_prefix("payment_intents/") {
            Some(r) => match (r.strip_suffix("/status"), r.strip_suffix("/confirm")) {
                (Some(id), _) => set_status(sim, id, body),
                (_, Some(id)) => confirm(sim, id),
                _ => Err(not_found(method, rest)),
            },
            None => Err(not_found(method, rest)),
        },
        _ => Err(not_found(method, rest)),
    };
    result.unwrap_or_else(|r| r)
}

fn not_found(method: &Method, rest: &str) -> Reply {
    Reply::json(
        404,
        &json!({ "error": { "type": "invalid_request_error", "message": format!("Unknown admin route {method} /_sim/{rest}") } }),
    )
}

fn kind_map<T: serde::Serialize + Copy + Default>(m: &BTreeMap<FaultKind, T>) -> Value {
    let full: BTreeMap<&str, T> = FaultKind::ALL
        .iter()
        .map(|k| (k.as_str(), m.get(k).copied().unwrap_or_default()))
        .collect();
    json!(full)
}

fn faults_json(sim: &StripeSim) -> Reply {
    let eng = sim.engine();
    let f = &eng.faults;
    Reply::json(
        200,
        &json!({
            "rates": kind_map(&f.rates),
            "latency_ms": f.latency.as_millis() as u64,
            "script": f.script.iter().collect::<Vec<_>>(),
            "faults_on_reads": f.faults_on_reads,
            "search_lag_secs": eng.search_lag_ms / 1000,
            "search_lag_ms": eng.search_lag_ms,
            "processing_settle_secs": eng.settle_ms / 1000,
            "processing_settle_ms": eng.settle_ms,
            "refund_settle_secs": eng.refunds.settle_ms / 1000,
            "refund_settle_ms": eng.refunds.settle_ms,
            "uncaptured_expiry_secs": eng.uncaptured_expiry_ms / 1000,
            "uncaptured_expiry_ms": eng.uncaptured_expiry_ms,
            "seed": f.seed,
            "injected": kind_map(&f.injected),
        }),
    )
}

fn update_faults(sim: &StripeSim, body: &[u8]) -> Result<Reply, Reply> {
    let u: FaultsUpdate = parse(body)?;
    if let Some(rates) = &u.rates {
        for (k, r) in rates {
            if !r.is_finite() || *r < 0.0 || *r > 1.0 {
                return Err(bad_request(format!("rate for {k} must be within [0, 1]")));
            }
        }
    }
    {
        let mut eng = sim.engine();
        if let Some(seed) = u.seed {
            eng.faults.reseed(seed);
        }
        if let Some(rates) = u.rates {
            eng.faults.rates = rates;
        }
        if let Some(ms) = u.latency_ms {
            eng.faults.latency = Duration::from_millis(ms);
        }
        if let Some(s) = u.script {
            eng.faults.script = s.into();
        }
        if let Some(s) = u.append_script {
            eng.faults.script.extend(s);
        }
        if let Some(b) = u.faults_on_reads {
            eng.faults.faults_on_reads = b;
        }
        let ms = |s: Option<u64>, m: Option<u64>| {
            m.or(s.map(|s| s.saturating_mul(1000)))
                .map(|v| i64::try_from(v).unwrap_or(i64::MAX))
        };
        if let Some(v) = ms(u.search_lag_secs, u.search_lag_ms) {
            eng.search_lag_ms = v;
        }
        if let Some(v) = ms(u.processing_settle_secs, u.processing_settle_ms) {
            eng.settle_ms = v;
        }
        if let Some(v) = ms(u.refund_settle_secs, u.refund_settle_ms) {
            eng.refunds.settle_ms = v;
        }
        if let Some(v) = ms(u.uncaptured_expiry_secs, u.uncaptured_expiry_ms) {
            eng.uncaptured_expiry_ms = v;
        }
    }
    Ok(faults_json(sim))
}

fn capacity_json(sim: &StripeSim) -> Reply {
    let c = sim.capacity();
    Reply::json(
        200,
        &json!({
            "create_per_sec": c.create_per_sec,
            "retrieve_per_sec": c.retrieve_per_sec,
            "search_per_sec": c.search_per_sec,
            "cancel_per_sec": c.cancel_per_sec,
            "capture_per_sec": c.capture_per_sec,
            "refund_per_sec": c.refund_per_sec,
            "refund_read_per_sec": c.refund_read_per_sec,
            "account_per_sec": c.account_per_sec,
            "clock": c.clock,
            "create_latency": c.create_latency.map(|l| json!({
                "p50_ms": l.p50.as_millis() as u64,
                "sigma": l.sigma,
            })),
            "tokens": sim.capacity_tokens(),
            "capacity_429s": sim.capacity_429s(),
        }),
    )
}

/// Applies a `POST /_sim/capacity`; every bucket starts full again.
fn update_capacity(sim: &StripeSim, body: &[u8]) -> Result<Reply, Reply> {
    let u: CapacityUpdate = parse(body)?;
    let mut c = sim.capacity();
    let base = match (u.stripe_defaults, u.unlimited) {
        (Some(true), Some(true)) => {
            return Err(bad_request(
                "stripe_defaults and unlimited exclude each other",
            ))
        }
        (Some(true), _) => Some(Capacity::stripe_defaults()),
        (_, Some(true)) => Some(Capacity::unlimited()),
        _ => None,
    };
    if let Some(b) = base {
        c.create_per_sec = b.create_per_sec;
        c.retrieve_per_sec = b.retrieve_per_sec;
        c.search_per_sec = b.search_per_sec;
        c.cancel_per_sec = b.cancel_per_sec;
        c.capture_per_sec = b.capture_per_sec;
        c.refund_per_sec = b.refund_per_sec;
        c.refund_read_per_sec = b.refund_read_per_sec;
        c.account_per_sec = b.account_per_sec;
    }
    let rates = [
        (u.create_per_sec, &mut c.create_per_sec),
        (u.retrieve_per_sec, &mut c.retrieve_per_sec),
        (u.search_per_sec, &mut c.search_per_sec),
        (u.cancel_per_sec, &mut c.cancel_per_sec),
        (u.capture_per_sec, &mut c.capture_per_sec),
        (u.refund_per_sec, &mut c.refund_per_sec),
        (u.refund_read_per_sec, &mut c.refund_read_per_sec),
        (u.account_per_sec, &mut c.account_per_sec),
    ];
    for (new, field) in rates {
        if let Some(v) = new {
            *field = v;
        }
    }
    if let Some(clock) = u.clock {
        c.clock = clock;
    }
    if let Some(l) = u.create_latency {
        c.create_latency = l.map(|l| {
            let d = CreateLatency::default();
            CreateLatency {
                p50: l.p50_ms.map_or(d.p50, Duration::from_millis),
                sigma: l.sigma.unwrap_or(d.sigma),
            }
        });
    }
    c.validate().map_err(bad_request)?;
    sim.set_capacity(c);
    Ok(capacity_json(sim))
}

fn clock_json(sim: &StripeSim) -> Reply {
    Reply::json(
        200,
        &json!({ "now_ms": sim.now_ms(), "external": sim.inner.clock.is_external() }),
    )
}

fn update_clock(sim: &StripeSim, body: &[u8]) -> Result<Reply, Reply> {
    let u: ClockUpdate = parse(body)?;
    if u.set_ms.is_none() && u.advance_secs.is_none() && u.advance_ms.is_none() {
        return Err(bad_request("expected set_ms, advance_secs or advance_ms"));
    }
    if let Some(ms) = u.set_ms {
        sim.inner.clock.set_ms(ms);
    }
    let adv = u
        .advance_secs
        .unwrap_or(0)
        .saturating_mul(1000)
        .saturating_add(u.advance_ms.unwrap_or(0));
    sim.inner.clock.advance_ms(adv);
    // Uncaptured PaymentIntents whose hold expired meanwhile are canceled now.
    sim.expire_due();
    Ok(clock_json(sim))
}

fn ledger_json(sim: &StripeSim) -> Reply {
    let now = sim.now_ms();
    let mut eng = sim.engine();
    let ledger = eng.ledger(now);
    Reply::json(
        200,
        &json!({
            "payment_intents": ledger,
            "refunds": eng.refund_ledger(now),
            "disputes": eng.dispute_ledger(now),
            "requests": eng.requests,
            "injected": kind_map(&eng.faults.injected),
            "capacity_429s": eng.capacity.refused,
            "now_ms": now,
        }),
    )
}

fn stats_json(sim: &StripeSim) -> Reply {
    let now = sim.now_ms();
    let mut eng = sim.engine();
    let count = eng.ledger(now).len();
    Reply::json(
        200,
        &json!({
            "requests": eng.requests,
            "injected": kind_map(&eng.faults.injected),
            "capacity_429s": eng.capacity.refused,
            "payment_intents": count,
            "refunds": eng.refunds.len(),
            "disputes": eng.disputes.len(),
            "idempotency_keys": eng.key_count(),
            "now_ms": now,
        }),
    )
}

fn reset(sim: &StripeSim, body: &[u8]) -> Result<Reply, Reply> {
    let u: ResetBody = parse(body)?;
    sim.reset();
    if let Some(ms) = u.set_clock_ms {
        sim.set_now_ms(ms);
    }
    Ok(Reply::json(
        200,
        &json!({ "reset": true, "now_ms": sim.now_ms() }),
    ))
}

fn set_status(sim: &StripeSim, id: &str, body: &[u8]) -> Result<Reply, Reply> {
    let u: StatusBody = parse(body)?;
    if !crate::STATUSES.contains(&u.status.as_str()) {
        return Err(bad_request(format!("unknown status {:?}", u.status)));
    }
    if sim.set_status(id, &u.status) {
        Ok(Reply::json(200, &json!({ "id": id, "status": u.status })))
    } else {
        Err(Reply::json(
            404,
            &json!({ "error": { "type": "invalid_request_error", "code": "resource_missing", "message": format!("No such payment_intent: '{id}'") } }),
        ))
    }
}

/// `GET /_sim/disputes`: every dispute, oldest first.
fn disputes_json(sim: &StripeSim) -> Reply {
    Reply::json(
        200,
        &json!({ "disputes": sim.dispute_ledger(), "now_ms": sim.now_ms() }),
    )
}

/// `POST /_sim/disputes` with `{"payment_intent", "amount"?, "reason"?, "inquiry"?}`: the
/// customer's bank disputes the intent's charge now; the dispute's JSON.
fn dispute_charge(sim: &StripeSim, body: &[u8]) -> Result<Reply, Reply> {
    let req: crate::DisputeRequest = parse(body)?;
    if req.payment_intent.is_empty() {
        return Err(bad_request("expected payment_intent"));
    }
    match sim.dispute_charge(&req) {
        Ok(json) => Ok(Reply::text(200, json)),
        Err(e) => Err(Reply::error(&e)),
    }
}

/// Dispute timing in milliseconds: every field optional on a `POST`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DisputeTimingUpdate {
    delay_ms: Option<i64>,
    response_window_ms: Option<i64>,
    review_ms: Option<i64>,
    closes_after_due_ms: Option<i64>,
}

fn dispute_timing_json(sim: &StripeSim) -> Reply {
    let t = sim.dispute_timing();
    Reply::json(
        200,
        &json!({
            "delay_ms": t.delay_ms,
            "response_window_ms": t.response_window_ms,
            "review_ms": t.review_ms,
            "closes_after_due_ms": t.closes_after_due_ms,
        }),
    )
}

/// `POST /_sim/disputes/timing`: how long a test card's dispute takes to appear, the response
/// window to `due_by`, the review of submitted evidence, and the close of an unanswered dispute
/// after its `due_by` (none negative).
fn update_dispute_timing(sim: &StripeSim, body: &[u8]) -> Result<Reply, Reply> {
    let u: DisputeTimingUpdate = parse(body)?;
    let mut t = sim.dispute_timing();
    for (given, slot) in [
        (u.delay_ms, &mut t.delay_ms),
        (u.response_window_ms, &mut t.response_window_ms),
        (u.review_ms, &mut t.review_ms),
        (u.closes_after_due_ms, &mut t.closes_after_due_ms),
    ] {
        if let Some(ms) = given {
            if ms < 0 {
                return Err(bad_request("dispute timings are not negative"));
            }
            *slot = ms;
        }
    }
    sim.set_dispute_timing(t);
    Ok(dispute_timing_json(sim))
}

/// `POST /_sim/payment_intents/{id}/confirm`: the customer confirms a declined intent and pays.
fn confirm(sim: &StripeSim, id: &str) -> Result<Reply, Reply> {
    match sim.confirm_as_customer(id) {
        Ok(()) => Ok(Reply::json(
            200,
            &json!({ "id": id, "status": "succeeded" }),
        )),
        Err(e) => Err(Reply::error(&e)),
    }
}

/// `POST /_sim/webhooks` with `{"url", "secret", "faults": {...}, "max_attempts", "mode",
/// "event_source"}`: the whole configuration, replaced (in `webhook` mode an absent `secret`
/// stops generating events).
fn update_webhooks(sim: &StripeSim, body: &[u8]) -> Result<Reply, Reply> {
    let config: crate::WebhookConfig = parse(body)?;
    if let Some(secret) = &config.secret {
        if !secret.starts_with("whsec_") {
            return Err(bad_request("secret must be a whsec_ secret"));
        }
    }
    sim.set_webhooks(config).map_err(bad_request)?;
    Ok(webhooks_json(sim))
}

/// `POST /_sim/webhooks/inject` with a whole Stripe event object: delivered now like Stripe's own
/// (signed, or in the EventBridge envelope), though Stripe never created it (a forged event).
fn inject_event(sim: &StripeSim, body: &[u8]) -> Result<Reply, Reply> {
    let event: Value =
        serde_json::from_slice(body).map_err(|e| bad_request(format!("invalid JSON body: {e}")))?;
    if !event["id"].is_string() || !event["type"].is_string() {
        return Err(bad_request("the event needs a string id and type"));
    }
    if !sim.queue_injected_event(&event) {
        return Err(bad_request(
            "events are off: set a secret, or mode eventbridge, with POST /_sim/webhooks",
        ));
    }
    Ok(webhooks_json(sim))
}

/// The configuration (the secret only as set or not) and the delivery counts.
fn webhooks_json(sim: &StripeSim) -> Reply {
    let c = sim.webhooks();
    Reply::json(
        200,
        &json!({
            "url": c.url,
            "mode": c.mode,
            "event_source": c.event_source(),
            "secret_set": c.secret.is_some(),
            "faults": c.faults,
            "max_attempts": c.max_attempts,
            "counts": sim.webhook_counts(),
            "next_due_ms": sim.next_webhook_due_ms(),
        }),
    )
}
