//! The HTTP/1.1 server (hyper) and the `/v1` routes, including the
//! idempotency layer and fault application.
//!
//! `drop_after_commit` is implemented by returning `Err` from the hyper
//! service: hyper then closes the connection without writing a response.

use std::fmt;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use crate::capacity::{Api, Limiter};
use crate::engine::{Engine, Idem, Refusal, RequestCounts, Saved};
use crate::faults::{Endpoint, FaultKind};
use crate::pi::CreateParams;
use crate::refund::RefundParams;
use crate::reply::Reply;
use crate::version::ApiVersion;
use crate::wire::{parse_search_query, ApiError};
use crate::StripeSim;

mod disputes;
mod list_query;
mod refunds;
pub(crate) use disputes::{
    close as close_dispute, list as list_disputes, retrieve as retrieve_dispute,
    update as update_dispute,
};
pub(crate) use refunds::{
    cancel as cancel_refund, list as list_refunds, refund_begin, retrieve as retrieve_refund,
};

const MAX_BODY: usize = 1 << 20;

/// Returned by the service to make hyper drop the connection unanswered.
#[derive(Debug)]
pub(crate) struct DropConnection;

impl fmt::Display for DropConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("stripe-sim: drop_after_commit")
    }
}

impl std::error::Error for DropConnection {}

/// Accept loop: one task per connection, all aborted on shutdown.
pub(crate) async fn serve(
    listener: TcpListener,
    sim: StripeSim,
    mut shutdown: oneshot::Receiver<()>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let sim = sim.clone();
                    conns.spawn(async move {
                        // Each request runs in its own task: like Stripe, a request that has
                        // started executing finishes even if the client hangs up (a timed-out
                        // create still creates).
                        let svc = service_fn(move |req| {
                            let task = tokio::spawn(handle(sim.clone(), req));
                            async move { task.await.unwrap_or(Err(DropConnection)) }
                        });
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    });
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

async fn handle(
    sim: StripeSim,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, DropConnection> {
    let (parts, body) = req.into_parts();
    let reply = match Limited::new(body, MAX_BODY).collect().await {
        Err(_) => Reply::error(&ApiError::invalid(
            "parameter_invalid_string",
            "body",
            "Request body unreadable or larger than 1 MiB.",
        )),
        Ok(collected) => {
            let body = collected.to_bytes();
            let path = parts.uri.path().to_string();
            let query = parts.uri.query().unwrap_or("").to_string();
            if let Some(rest) = path.strip_prefix("/_sim/") {
                crate::admin::handle(&sim, &parts.method, rest, &body)
            } else {
                route_v1(&sim, &parts.method, &path, &query, &parts.headers, body).await?
            }
        }
    };
    Ok(finish(&sim, reply))
}

fn finish(sim: &StripeSim, reply: Reply) -> Response<Full<Bytes>> {
    let request_id = sim.engine().request_id();
    let mut resp = Response::new(Full::new(reply.body));
    *resp.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        h.insert("request-id", v);
    }
    for (k, v) in reply.headers {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert(k, v);
        }
    }
    resp
}

async fn route_v1(
    sim: &StripeSim,
    method: &Method,
    path: &str,
    query: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Reply, DropConnection> {
    let Some(rest) = path.strip_prefix("/v1/") else {
        return Ok(Reply::error(&ApiError::unrecognized_url(
            method.as_str(),
            path,
        )));
    };
    if let Err(e) = authenticate(sim.api_key(), headers) {
        return Ok(Reply::error(&e));
    }
    // The request's `Stripe-Version`, else the account's default: what the answer is written in,
    // and (before basil) whether a capture or a cancel leaves a refund of the released part.
    let version = match headers.get("stripe-version") {
        None => sim.api_version(),
        Some(raw) => {
            let raw = String::from_utf8_lossy(raw.as_bytes());
            match ApiVersion::parse(raw.trim()) {
                Ok(v) => v,
                Err(e) => return Ok(Reply::error(&e)),
            }
        }
    };
    route_in_version(sim, method, rest, path, query, headers, body, &version)
        .await
        .map(|reply| reply.in_version(&version))
}

/// The `/v1` routes, answered in `version`.
#[allow(clippy::too_many_arguments)]
async fn route_in_version(
    sim: &StripeSim,
    method: &Method,
    rest: &str,
    path: &str,
    query: &str,
    headers: &HeaderMap,
    body: Bytes,
    version: &ApiVersion,
) -> Result<Reply, DropConnection> {
    if let Some(reply) = refunds::route(sim, method, rest, query, headers, &body).await {
        return reply;
    }
    if let Some(reply) = disputes::route(sim, method, rest, query, &body) {
        return Ok(reply);
    }
    Ok(match (method, rest) {
        (&Method::POST, "payment_intents") => return create(sim, headers, &body).await,
        (&Method::POST, r) => match r
            .strip_prefix("payment_intents/")
            .and_then(|r| r.split_once('/'))
        {
            Some((id, action @ ("cancel" | "capture"))) if !id.is_empty() => {
                let form: Vec<(String, String)> =
                    form_urlencoded::parse(&body).into_owned().collect();
                let key = idempotency_key(headers);
                return if action == "cancel" {
                    cancel(sim, id, key, &form, version)
                } else {
                    capture(sim, id, key, &form, version)
                };
            }
            _ => Reply::error(&ApiError::unrecognized_url(method.as_str(), path)),
        },
        (&Method::GET, "payment_intents/search") => search(sim, query),
        (&Method::GET, "payment_intents") => list_intents(sim, query),
        (&Method::GET, r) => match r.strip_prefix("payment_intents/") {
            Some(id) if !id.is_empty() && !id.contains('/') => {
                retrieve_expanding(sim, id, expands_latest_charge(query))
            }
            _ => Reply::error(&ApiError::unrecognized_url(method.as_str(), path)),
        },
        _ => Reply::error(&ApiError::unrecognized_url(method.as_str(), path)),
    })
}

/// Checks `Authorization: Bearer KEY` or HTTP basic with KEY as username.
fn authenticate(expected: &str, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(raw) = headers.get(AUTHORIZATION) else {
        return Err(ApiError::unauthorized(None));
    };
    let raw = String::from_utf8_lossy(raw.as_bytes()).trim().to_string();
    let provided = if let Some(k) = strip_scheme(&raw, "bearer") {
        k.trim().to_string()
    } else if let Some(b64) = strip_scheme(&raw, "basic") {
        let decoded = base64_decode(b64.trim()).unwrap_or_default();
        let decoded = String::from_utf8_lossy(&decoded).to_string();
        decoded.split(':').next().unwrap_or("").to_string()
    } else {
        raw.clone()
    };
    if provided == expected {
        Ok(())
    } else {
        Err(ApiError::unauthorized(Some(&provided)))
    }
}

fn strip_scheme<'a>(raw: &'a str, scheme: &str) -> Option<&'a str> {
    let head = raw.get(..scheme.len())?;
    if head.eq_ignore_ascii_case(scheme) && raw[scheme.len()..].starts_with(' ') {
        Some(&raw[scheme.len() + 1..])
    } else {
        None
    }
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes().filter(|c| *c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Removes an in-flight idempotency key if the request never completes
/// (validation failure, or the client went away during `latency`).
pub(crate) struct KeyGuard {
    sim: StripeSim,
    key: Option<String>,
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.sim.engine().abort_key(&k);
        }
    }
}

/// Stripe's `429 rate_limit` for a request refused for capacity (the same body as the random
/// `rate_limit` fault's), with the `Stripe-Rate-Limited-Reason` Stripe sends.
fn capacity_reply(limiter: Limiter) -> Reply {
    let mut r = Reply::error(&ApiError::rate_limited());
    r.headers
        .push(("stripe-rate-limited-reason", limiter.reason().to_string()));
    r
}

/// Counts the request, then the capacity check and the random faults decided before the
/// idempotency layer, in that order. `Some` is the final answer.
fn gate(sim: &StripeSim, api: Api) -> Option<Reply> {
    let (ep, count): (Endpoint, fn(&mut RequestCounts)) = match api {
        Api::Create => (Endpoint::Create, |c| c.create += 1),
        Api::Retrieve => (Endpoint::Read, |c| c.retrieve += 1),
        Api::Search => (Endpoint::Read, |c| c.search += 1),
        Api::Cancel => (Endpoint::Cancel, |c| c.cancel += 1),
        // A capture is a keyed write faulted as a cancel is.
        Api::Capture => (Endpoint::Cancel, |c| c.capture += 1),
        // Refund routes name their own counter and fault endpoint (`gate_as`).
        Api::Refund => (Endpoint::Create, |c| c.refund += 1),
        Api::RefundRead => (Endpoint::Read, |c| c.refund_read += 1),
    };
    gate_as(sim, api, ep, count)
}

/// [`gate`] with the request counted by `count` and faulted as `ep`.
fn gate_as(
    sim: &StripeSim,
    api: Api,
    ep: Endpoint,
    count: fn(&mut RequestCounts),
) -> Option<Reply> {
    let now = sim.capacity_now();
    let mut eng = sim.engine();
    count(&mut eng.requests);
    let at = now.on(eng.capacity.config().clock);
    if let Err(limiter) = eng.capacity.admit(api, at) {
        return Some(capacity_reply(limiter));
    }
    eng.faults.decide_pre(ep).map(pre_fault_reply)
}

fn pre_fault_reply(kind: FaultKind) -> Reply {
    match kind {
        FaultKind::RateLimit => Reply::error(&ApiError::rate_limited()),
        FaultKind::KeyInUse => Reply::error(&ApiError::key_in_use()),
        _ => Reply::error(&ApiError::server_error()),
    }
}

/// What an executing create makes.
enum Job {
    PaymentIntent(CreateParams),
    Refund(RefundParams),
}

/// A create past the idempotency layer and validation, about to execute: the key (if any) is in
/// flight until [`create_exec`] saves it or the value is dropped (which forgets the key).
pub(crate) struct Executing {
    job: Job,
    key: Option<String>,
    guard: KeyGuard,
    /// The execution fault decided for it, if any.
    pub(crate) fault: Option<FaultKind>,
    /// The request asked `expand[]=latest_charge`: a PaymentIntent's answer carries the charge
    /// object (an authorization's `capture_before` is on it).
    expand_charge: bool,
    /// The latency fault's delay.
    pub(crate) latency: std::time::Duration,
    /// The create latency drawn for it, when [`crate::Capacity::create_latency`] is on.
    pub(crate) create_latency: Option<std::time::Duration>,
}

impl Executing {
    /// Whether the server takes time before it executes (the latency fault, or create latency).
    pub(crate) fn is_slow(&self) -> bool {
        self.fault == Some(FaultKind::Latency) || self.create_latency.is_some()
    }

    /// How long: the latency fault's delay (if that is its fault) plus the create latency.
    pub(crate) fn delay(&self) -> std::time::Duration {
        let fault = if self.fault == Some(FaultKind::Latency) {
            self.latency
        } else {
            std::time::Duration::ZERO
        };
        fault.saturating_add(self.create_latency.unwrap_or_default())
    }
}

/// The first half of a create, up to the execution fault decision. `Err` is the final answer.
pub(crate) fn create_begin(
    sim: &StripeSim,
    idempotency_key: Option<String>,
    form: &[(String, String)],
) -> Result<Executing, Reply> {
    if let Some(reply) = gate(sim, Api::Create) {
        return Err(reply);
    }
    if let Some(k) = &idempotency_key {
        if k.chars().count() > 255 {
            return Err(Reply::error(&ApiError::idempotency_key_too_long(
                k.chars().count(),
            )));
        }
    }
    let mut guard = KeyGuard {
        sim: sim.clone(),
        key: None,
    };
    if let Some(k) = &idempotency_key {
        let now = sim.now_ms();
        let decision = sim.engine().begin_key(k, form, now);
        let echo = ("idempotency-key", k.clone());
        match decision {
            Idem::Proceed => guard.key = Some(k.clone()),
            Idem::Replay(saved) => {
                let mut r = Reply::saved(&saved, true);
                r.headers.push(echo);
                return Err(r);
            }
            Idem::Mismatch => return Err(Reply::error(&ApiError::idempotency_mismatch(k))),
            Idem::InFlight => return Err(Reply::error(&ApiError::key_in_use())),
        }
    }
    let params = match CreateParams::parse(form) {
        Ok(p) => p,
        Err(e) => return Err(Reply::error(&e)), // guard forgets the key
    };
    let (fault, latency, create_latency) = {
        let mut eng = sim.engine();
        let fault = eng.faults.decide_exec();
        (
            fault,
            eng.faults.latency,
            eng.capacity.draw_create_latency(),
        )
    };
    Ok(Executing {
        job: Job::PaymentIntent(params),
        expand_charge: form_expands_latest_charge(form),
        key: idempotency_key,
        guard,
        fault,
        latency,
        create_latency,
    })
}

/// The second half: creates the PaymentIntent at the simulator's current time and saves the
/// response under the key. `Err(DropConnection)`: committed, but no answer goes back.
pub(crate) fn create_exec(sim: &StripeSim, mut ex: Executing) -> Result<Reply, DropConnection> {
    let saved = {
        let now = sim.now_ms();
        let mut eng = sim.engine();
        let (saved, created) = match ex.job {
            Job::PaymentIntent(params) => {
                let (saved, created) = if ex.expand_charge {
                    eng.create_expanded(params, ex.key.as_deref(), now)
                } else {
                    eng.create(params, ex.key.as_deref(), now)
                };
                (saved, Some(created))
            }
            Job::Refund(params) => match eng.refund(params, now) {
                Ok(json) => (Saved::ok(json), None),
                // Refused now (another refund took the rest meanwhile): not saved; the guard
                // forgets the key once the engine is released.
                Err(e) => {
                    drop(eng);
                    return Ok(Reply::error(&e));
                }
            },
        };
        let key = ex.guard.key.take();
        if ex.fault == Some(FaultKind::ServerErrorAfterCommit) {
            let saved = Saved::from_error(&ApiError::server_error());
            if let Some(k) = key {
                eng.finish_key(&k, saved.clone(), now);
            }
            saved
        } else {
            match (key, created) {
                (Some(k), Some(created)) => eng.finish_key_created(&k, created, now),
                (Some(k), None) => eng.finish_key(&k, saved.clone(), now),
                (None, _) => {}
            }
            saved
        }
    };
    if ex.fault == Some(FaultKind::DropAfterCommit) {
        return Err(DropConnection);
    }
    let mut r = Reply::saved(&saved, false);
    if let Some(k) = ex.key {
        r.headers.push(("idempotency-key", k));
    }
    Ok(r)
}

async fn create(
    sim: &StripeSim,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Reply, DropConnection> {
    let form: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    let ex = match create_begin(sim, idempotency_key(headers), &form) {
        Ok(ex) => ex,
        Err(reply) => return Ok(reply),
    };
    if ex.is_slow() {
        // Real time, with the key in flight (a same-key request meanwhile gets a 409).
        tokio::time::sleep(ex.delay()).await;
    }
    create_exec(sim, ex)
}

fn idempotency_key(headers: &HeaderMap) -> Option<String> {
    headers
        .get("idempotency-key")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).to_string())
}

/// `POST /v1/payment_intents/{id}/cancel`: the gate (capacity, faults before the idempotency
/// layer), the idempotency layer (the same key and form replays the first answer; the key is
/// compared with the intent it was used on, so another request under it is an
/// `idempotency_error`), validation, then the cancel, which may meet `drop_after_commit` or
/// `server_error_after_commit`. A refusal (unknown intent, a status Stripe does not cancel from)
/// is not saved under the key. `expand[]=latest_charge` answers (and saves) the intent with its
/// charge object. `Err(DropConnection)`: canceled, but no answer goes back.
pub(crate) fn cancel(
    sim: &StripeSim,
    id: &str,
    idempotency_key: Option<String>,
    form: &[(String, String)],
    version: &ApiVersion,
) -> Result<Reply, DropConnection> {
    if let Some(reply) = gate(sim, Api::Cancel) {
        return Ok(reply);
    }
    let guard = match begin_keyed(
        sim,
        idempotency_key.as_deref(),
        form,
        format!("cancel {id}"),
    ) {
        Ok(g) => g,
        Err(reply) => return Ok(reply),
    };
    let reason = match crate::pi::parse_cancel(form) {
        Ok(r) => r,
        Err(e) => return Ok(Reply::error(&e)), // guard forgets the key
    };
    let expand_charge = form_expands_latest_charge(form);
    commit_cancel(sim, guard, idempotency_key, |eng, now| {
        let json = eng.cancel(id, reason, version, now)?;
        Ok(eng.expanding(id, json, expand_charge, now))
    })
}

/// `POST /v1/payment_intents/{id}/capture`: as a cancel (the gate with its own rate-limit bucket
/// and the cancel's faults, the idempotency layer binding the key to this intent's capture,
/// validation that forgets the key), then the capture. Unlike a cancel's, a capture's refusal
/// from the intent's state (captured, canceled or expired meanwhile; more than is capturable) is
/// saved under the key, as Stripe saves it: a retry with that key replays the `400` until the
/// key expires. `expand[]=latest_charge` answers (and saves) a success with the charge object.
/// `Err(DropConnection)`: the answer (a success or a saved refusal) is kept, but none goes back.
pub(crate) fn capture(
    sim: &StripeSim,
    id: &str,
    idempotency_key: Option<String>,
    form: &[(String, String)],
    version: &ApiVersion,
) -> Result<Reply, DropConnection> {
    if let Some(reply) = gate(sim, Api::Capture) {
        return Ok(reply);
    }
    let guard = match begin_keyed(
        sim,
        idempotency_key.as_deref(),
        form,
        format!("capture {id}"),
    ) {
        Ok(g) => g,
        Err(reply) => return Ok(reply),
    };
    let params = match crate::pi::parse_capture(form) {
        Ok(p) => p,
        Err(e) => return Ok(Reply::error(&e)), // guard forgets the key
    };
    let expand_charge = form_expands_latest_charge(form);
    commit_keyed(sim, guard, idempotency_key, |eng, now| {
        let json = eng.capture(id, params, version, now)?;
        Ok(eng.expanding(id, json, expand_charge, now))
    })
}

/// The second half of a keyed cancel (a PaymentIntent's or a refund's): `cancel` runs under the
/// engine's lock; its refusal is answered and not saved under the key (the guard forgets it);
/// otherwise the fault engine may answer `500` after the commit (saved so) or drop the
/// connection after it (`Err(DropConnection)`: canceled, but no answer goes back).
pub(crate) fn commit_cancel(
    sim: &StripeSim,
    guard: KeyGuard,
    idempotency_key: Option<String>,
    cancel: impl FnOnce(&mut Engine, i64) -> Result<String, ApiError>,
) -> Result<Reply, DropConnection> {
    commit_keyed(sim, guard, idempotency_key, |eng, now| {
        cancel(eng, now).map_err(Refusal::Forget)
    })
}

/// The second half of a keyed write: `write` runs under the engine's lock. A
/// [`Refusal::Forget`] is answered and not saved (the guard forgets the key). Any other answer —
/// the write's JSON or a [`Refusal::Save`] error — is saved under the key after the fault engine
/// had its say: `500` after the commit (saved so), or the connection dropped after it
/// (`Err(DropConnection)`: done, but no answer goes back).
fn commit_keyed(
    sim: &StripeSim,
    mut guard: KeyGuard,
    idempotency_key: Option<String>,
    write: impl FnOnce(&mut Engine, i64) -> Result<String, Refusal>,
) -> Result<Reply, DropConnection> {
    let now = sim.now_ms();
    let (saved, fault) = {
        let mut eng = sim.engine();
        let answer = match write(&mut eng, now) {
            Ok(json) => Saved::ok(json),
            Err(Refusal::Save(e)) => Saved::from_error(&e),
            Err(Refusal::Forget(e)) => {
                drop(eng);
                return Ok(Reply::error(&e)); // guard forgets the key
            }
        };
        let fault = eng.faults.decide_exec_cancel();
        let saved = if fault == Some(FaultKind::ServerErrorAfterCommit) {
            Saved::from_error(&ApiError::server_error())
        } else {
            answer
        };
        if let Some(k) = guard.key.take() {
            eng.finish_key(&k, saved.clone(), now);
        }
        (saved, fault)
    };
    if fault == Some(FaultKind::DropAfterCommit) {
        return Err(DropConnection);
    }
    let mut r = Reply::saved(&saved, false);
    if let Some(k) = idempotency_key {
        r.headers.push(("idempotency-key", k));
    }
    Ok(r)
}

/// The idempotency layer for a keyed request (a cancel, a refund): `Ok` with the key in flight (forgotten
/// when the guard drops unless saved), or the final answer (replay, mismatch, in flight, too
/// long). `request` names the endpoint, so a key used on another one is an `idempotency_error`.
pub(crate) fn begin_keyed(
    sim: &StripeSim,
    key: Option<&str>,
    form: &[(String, String)],
    request: String,
) -> Result<KeyGuard, Reply> {
    let mut guard = KeyGuard {
        sim: sim.clone(),
        key: None,
    };
    let Some(k) = key else { return Ok(guard) };
    if k.chars().count() > 255 {
        return Err(Reply::error(&ApiError::idempotency_key_too_long(
            k.chars().count(),
        )));
    }
    let mut keyed = form.to_vec();
    keyed.push(("(request)".into(), request));
    let now = sim.now_ms();
    let decision = sim.engine().begin_key(k, &keyed, now);
    match decision {
        Idem::Proceed => {
            guard.key = Some(k.to_owned());
            Ok(guard)
        }
        Idem::Replay(saved) => {
            let mut r = Reply::saved(&saved, true);
            r.headers.push(("idempotency-key", k.to_owned()));
            Err(r)
        }
        Idem::Mismatch => Err(Reply::error(&ApiError::idempotency_mismatch(k))),
        Idem::InFlight => Err(Reply::error(&ApiError::key_in_use())),
    }
}

pub(crate) fn retrieve(sim: &StripeSim, id: &str) -> Reply {
    retrieve_expanding(sim, id, false)
}

/// Whether a query asks for `expand[]=latest_charge` (the charge object, with its
/// `amount_refunded`, instead of its id).
fn expands_latest_charge(query: &str) -> bool {
    form_urlencoded::parse(query.as_bytes())
        .any(|(k, v)| k.starts_with("expand") && v == "latest_charge")
}

/// Whether a POST's form asks for `expand[]=latest_charge`: Stripe expands on any call, so a
/// manual create's own answer states the hold's `capture_before` without a second read.
fn form_expands_latest_charge(form: &[(String, String)]) -> bool {
    form.iter()
        .any(|(k, v)| k.starts_with("expand") && v == "latest_charge")
}

/// `GET /v1/payment_intents/{id}`, with `latest_charge` expanded if asked.
pub(crate) fn retrieve_expanding(sim: &StripeSim, id: &str, expand_charge: bool) -> Reply {
    if let Some(r) = gate(sim, Api::Retrieve) {
        return r;
    }
    let now = sim.now_ms();
    let found = if expand_charge {
        sim.engine().retrieve_expanded(id, now)
    } else {
        sim.engine().retrieve(id, now)
    };
    match found {
        Some(pi) => Reply::text(200, pi),
        None => Reply::error(&ApiError::no_such_payment_intent(id)),
    }
}

/// `GET /v1/payment_intents?created[gte]=…&created[lt]=…&limit=…&starting_after=…`: every
/// PaymentIntent created in the range, newest first, current (a list is not delayed as search
/// is). Counted as a list, limited as a read.
pub(crate) fn list_intents(sim: &StripeSim, query: &str) -> Reply {
    if let Some(r) = gate_as(sim, Api::Retrieve, Endpoint::Read, |c| c.list += 1) {
        return r;
    }
    let q = match list_query::parse(
        query,
        "stripe-sim lists PaymentIntents by created, limit and starting_after",
        |_, _| false,
    ) {
        Ok(q) => q,
        Err(e) => return Reply::error(&e),
    };
    let now = sim.now_ms();
    let page = sim
        .engine()
        .list_intents(q.created, q.limit, q.starting_after.as_deref(), now);
    match page {
        Ok(page) => Reply::text(
            200,
            format!(
                "{{\"data\":[{}],\"has_more\":{},\"object\":\"list\",\"url\":\"/v1/payment_intents\"}}",
                page.data.join(","),
                page.has_more
            ),
        ),
        Err(e) => Reply::error(&e),
    }
}

pub(crate) fn search(sim: &StripeSim, query: &str) -> Reply {
    if let Some(r) = gate(sim, Api::Search) {
        return r;
    }
    let q = form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "query")
        .map(|(_, v)| v.into_owned());
    let Some(q) = q else {
        return Reply::error(&ApiError::missing("query"));
    };
    let clause = match parse_search_query(&q) {
        Ok(c) => c,
        Err(e) => return Reply::error(&e),
    };
    let now = sim.now_ms();
    let data = sim.engine().search(&clause, now);
    // What `json!` writes for {object, url, has_more, next_page, data} (keys in order), with the
    // PaymentIntents' JSON spliced in.
    let mut body = String::with_capacity(data.iter().map(|d| d.len() + 1).sum::<usize>() + 110);
    body.push_str("{\"data\":[");
    body.push_str(&data.join(","));
    body.push_str(
        "],\"has_more\":false,\"next_page\":null,\"object\":\"search_result\",\"url\":\"/v1/payment_intents/search\"}",
    );
    Reply::text(200, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64() {
        assert_eq!(base64_decode("c2tfdGVzdF94Og==").unwrap(), b"sk_test_x:");
        assert!(base64_decode("!!").is_none());
    }

    #[test]
    fn auth_schemes() {
        let mut h = HeaderMap::new();
        assert!(authenticate("sk_test_x", &h).is_err());
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer sk_test_x"));
        assert!(authenticate("sk_test_x", &h).is_ok());
        h.insert(
            AUTHORIZATION,
            HeaderValue::from_static("Basic c2tfdGVzdF94Og=="),
        );
        assert!(authenticate("sk_test_x", &h).is_ok());
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer sk_test_y"));
        let e = authenticate("sk_test_x", &h).unwrap_err();
        assert_eq!(e.status, 401);
        assert!(!e.message.contains("sk_test_y"));
    }
}
