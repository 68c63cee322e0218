//! The `/v1/refunds` routes. A refund create goes through everything a PaymentIntent create
//! does (capacity, the faults before the idempotency layer, the layer itself, validation, the
//! execution faults — `latency`, `drop_after_commit`, `server_error_after_commit`, scripted or by
//! rate — and the saved answer), on its own rate-limit bucket. A refusal (unknown intent, no
//! successful charge, more than is left) is not saved under the key, as a PaymentIntent cancel's
//! is not. A refund cancel is keyed and faulted like a PaymentIntent cancel; reads like a
//! PaymentIntent retrieve.

use bytes::Bytes;
use hyper::header::HeaderMap;
use hyper::Method;

use super::list_query::{self, ListQuery};
use super::{
    begin_keyed, commit_cancel, create_exec, gate_as, idempotency_key, DropConnection, Executing,
    Job,
};
use crate::capacity::Api;
use crate::faults::Endpoint;
use crate::refund::{self, RefundParams};
use crate::reply::Reply;
use crate::wire::ApiError;
use crate::StripeSim;

/// The refund routes; `None` for any other path.
pub(super) async fn route(
    sim: &StripeSim,
    method: &Method,
    rest: &str,
    query: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Option<Result<Reply, DropConnection>> {
    let tail = rest.strip_prefix("refunds")?;
    let form = || -> Vec<(String, String)> { form_urlencoded::parse(body).into_owned().collect() };
    Some(match (method, tail) {
        (&Method::POST, "") => create(sim, idempotency_key(headers), &form()).await,
        (&Method::GET, "") => Ok(list(sim, query)),
        (m, t) => {
            let t = t.strip_prefix('/')?;
            match (m, t.split_once('/')) {
                (&Method::GET, None) if !t.is_empty() => Ok(retrieve(sim, t)),
                (&Method::POST, Some((id, "cancel"))) if !id.is_empty() => {
                    cancel(sim, id, idempotency_key(headers), &form())
                }
                _ => Ok(Reply::error(&ApiError::unrecognized_url(
                    method.as_str(),
                    &format!("/v1/{rest}"),
                ))),
            }
        }
    })
}

/// The first half of a refund create, up to the execution fault decision (as
/// [`super::create_begin`]). `Err` is the final answer.
pub(crate) fn refund_begin(
    sim: &StripeSim,
    idempotency_key: Option<String>,
    form: &[(String, String)],
) -> Result<Executing, Reply> {
    if let Some(reply) = gate_as(sim, Api::Refund, Endpoint::Create, |c| c.refund += 1) {
        return Err(reply);
    }
    let guard = begin_keyed(sim, idempotency_key.as_deref(), form, "refund".into())?;
    let params = RefundParams::parse(form).map_err(|e| Reply::error(&e))?;
    let (fault, latency) = {
        let now = sim.now_ms();
        let mut eng = sim.engine();
        // Refused before anything executes: no execution fault is spent on it.
        eng.refund_plan(&params, now)
            .map_err(|e| Reply::error(&e))?;
        (eng.faults.decide_exec(), eng.faults.latency)
    };
    Ok(Executing {
        job: Job::Refund(params),
        key: idempotency_key,
        guard,
        fault,
        expand_charge: false,
        latency,
        create_latency: None,
    })
}

async fn create(
    sim: &StripeSim,
    key: Option<String>,
    form: &[(String, String)],
) -> Result<Reply, DropConnection> {
    let ex = match refund_begin(sim, key, form) {
        Ok(ex) => ex,
        Err(reply) => return Ok(reply),
    };
    if ex.is_slow() {
        // Real time, with the key in flight (a same-key request meanwhile gets a 409).
        tokio::time::sleep(ex.delay()).await;
    }
    create_exec(sim, ex)
}

/// `POST /v1/refunds/{id}/cancel`: keyed and faulted as a PaymentIntent cancel; only a
/// `requires_action` refund is canceled, anything else is a `400` not saved under the key.
pub(crate) fn cancel(
    sim: &StripeSim,
    id: &str,
    idempotency_key: Option<String>,
    form: &[(String, String)],
) -> Result<Reply, DropConnection> {
    if let Some(reply) = gate_as(sim, Api::Refund, Endpoint::Cancel, |c| c.refund_cancel += 1) {
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
    if let Some((k, _)) = form.iter().find(|(k, _)| !k.starts_with("expand")) {
        return Ok(Reply::error(&ApiError::invalid(
            "parameter_unknown",
            k,
            format!("Received unknown parameter: {k}"),
        )));
    }
    commit_cancel(sim, guard, idempotency_key, |eng, now| {
        eng.cancel_refund(id, now)
    })
}

fn read_gate(sim: &StripeSim) -> Option<Reply> {
    gate_as(sim, Api::RefundRead, Endpoint::Read, |c| c.refund_read += 1)
}

/// `GET /v1/refunds/{id}`.
pub(crate) fn retrieve(sim: &StripeSim, id: &str) -> Reply {
    if let Some(r) = read_gate(sim) {
        return r;
    }
    let now = sim.now_ms();
    match sim.engine().retrieve_refund(id, now) {
        Some(json) => Reply::text(200, json),
        None => Reply::error(&refund::no_such_refund(id, "id")),
    }
}

/// The parameters of `GET /v1/refunds`: the common ones and `payment_intent`.
fn parse_list(query: &str) -> Result<(ListQuery, Option<String>), ApiError> {
    let mut payment_intent = None;
    let q = list_query::parse(
        query,
        "stripe-sim lists by payment_intent, created, limit and starting_after",
        |k, v| match k {
            "payment_intent" => {
                payment_intent = Some(v);
                true
            }
            _ => false,
        },
    )?;
    Ok((q, payment_intent))
}

/// `GET /v1/refunds?payment_intent=…&created[gte]=…&limit=…&starting_after=…`: newest first, current (lists
/// are not delayed as search is).
pub(crate) fn list(sim: &StripeSim, query: &str) -> Reply {
    if let Some(r) = read_gate(sim) {
        return r;
    }
    let (q, payment_intent) = match parse_list(query) {
        Ok(q) => q,
        Err(e) => return Reply::error(&e),
    };
    let now = sim.now_ms();
    let page = sim.engine().list_refunds(
        payment_intent.as_deref(),
        q.created,
        q.limit,
        q.starting_after.as_deref(),
        now,
    );
    match page {
        Ok(page) => Reply::text(
            200,
            format!(
                "{{\"data\":[{}],\"has_more\":{},\"object\":\"list\",\"url\":\"/v1/refunds\"}}",
                page.data.join(","),
                page.has_more
            ),
        ),
        Err(e) => Reply::error(&e),
    }
}
