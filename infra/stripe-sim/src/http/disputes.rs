//! The `/v1/disputes` routes. Reads (`GET /v1/disputes/{id}`, `GET /v1/disputes`) go through the
//! same gate as a refund's reads (its rate-limit bucket and the account's, the read faults);
//! answers (`POST /v1/disputes/{id}` with evidence, `POST /v1/disputes/{id}/close`) through a
//! refund create's bucket and a cancel's faults, unkeyed: an answer given twice is the same
//! answer, refused the second time once the dispute no longer needs one.

use bytes::Bytes;
use hyper::Method;

use super::gate_as;
use super::list_query::{self, ListQuery};
use crate::capacity::Api;
use crate::dispute::{self, DisputeUpdate};
use crate::engine::DisputeFilter;
use crate::faults::Endpoint;
use crate::reply::Reply;
use crate::wire::ApiError;
use crate::StripeSim;

/// The dispute routes; `None` for any other path.
pub(super) fn route(
    sim: &StripeSim,
    method: &Method,
    rest: &str,
    query: &str,
    body: &Bytes,
) -> Option<Reply> {
    let tail = rest.strip_prefix("disputes")?;
    let form = || -> Vec<(String, String)> { form_urlencoded::parse(body).into_owned().collect() };
    Some(match (method, tail) {
        (&Method::GET, "") => list(sim, query),
        (m, t) => {
            let t = t.strip_prefix('/')?;
            match (m, t.split_once('/')) {
                (&Method::GET, None) if !t.is_empty() => retrieve(sim, t),
                (&Method::POST, None) if !t.is_empty() => update(sim, t, &form()),
                (&Method::POST, Some((id, "close"))) if !id.is_empty() => close(sim, id, &form()),
                _ => Reply::error(&ApiError::unrecognized_url(
                    method.as_str(),
                    &format!("/v1/{rest}"),
                )),
            }
        }
    })
}

fn read_gate(sim: &StripeSim) -> Option<Reply> {
    gate_as(sim, Api::RefundRead, Endpoint::Read, |c| {
        c.dispute_read += 1
    })
}

fn write_gate(sim: &StripeSim) -> Option<Reply> {
    gate_as(sim, Api::Refund, Endpoint::Cancel, |c| {
        c.dispute_update += 1
    })
}

/// `GET /v1/disputes/{id}`.
pub(crate) fn retrieve(sim: &StripeSim, id: &str) -> Reply {
    if let Some(r) = read_gate(sim) {
        return r;
    }
    let now = sim.now_ms();
    match sim.engine().retrieve_dispute(id, now) {
        Some(json) => Reply::text(200, json),
        None => Reply::error(&dispute::no_such_dispute(id, "id")),
    }
}

pub(crate) fn update(sim: &StripeSim, id: &str, form: &[(String, String)]) -> Reply {
    if let Some(r) = write_gate(sim) {
        return r;
    }
    let u = match DisputeUpdate::parse(form) {
        Ok(u) => u,
        Err(e) => return Reply::error(&e),
    };
    let now = sim.now_ms();
    match sim.engine().update_dispute(id, u, now) {
        Ok(json) => Reply::text(200, json),
        Err(e) => Reply::error(&e),
    }
}

pub(crate) fn close(sim: &StripeSim, id: &str, form: &[(String, String)]) -> Reply {
    if let Some(r) = write_gate(sim) {
        return r;
    }
    if let Some((k, _)) = form.iter().find(|(k, _)| !k.starts_with("expand")) {
        return Reply::error(&ApiError::invalid(
            "parameter_unknown",
            k,
            format!("Received unknown parameter: {k}"),
        ));
    }
    let now = sim.now_ms();
    match sim.engine().close_dispute(id, now) {
        Ok(json) => Reply::text(200, json),
        Err(e) => Reply::error(&e),
    }
}

/// The parameters of `GET /v1/disputes`: the common ones and `payment_intent` or `charge`.
fn parse_list(query: &str) -> Result<(ListQuery, DisputeFilter), ApiError> {
    let mut filter = DisputeFilter::All;
    let q = list_query::parse(
        query,
        "stripe-sim lists disputes by payment_intent, charge, created, limit and starting_after",
        |k, v| {
            filter = match k {
                "payment_intent" => DisputeFilter::PaymentIntent(v),
                "charge" => DisputeFilter::Charge(v),
                _ => return false,
            };
            true
        },
    )?;
    Ok((q, filter))
}

/// `GET /v1/disputes?payment_intent=…|charge=…&created[gte]=…&limit=…&starting_after=…`: newest
/// first, current.
pub(crate) fn list(sim: &StripeSim, query: &str) -> Reply {
    if let Some(r) = read_gate(sim) {
        return r;
    }
    let (q, filter) = match parse_list(query) {
        Ok(q) => q,
        Err(e) => return Reply::error(&e),
    };
    let now = sim.now_ms();
    let page = sim.engine().list_disputes(
        &filter,
        q.created,
        q.limit,
        q.starting_after.as_deref(),
        now,
    );
    match page {
        Ok(page) => Reply::text(
            200,
            format!(
                "{{\"data\":[{}],\"has_more\":{},\"object\":\"list\",\"url\":\"/v1/disputes\"}}",
                page.data.join(","),
                page.has_more
            ),
        ),
        Err(e) => Reply::error(&e),
    }
}
