//! The audit's lists over the client's wire: a window of PaymentIntents or refunds by creation
//! time, one page at a time.

use charge_core::audit::AuditWindow;
use charge_core::outcome::{GatewayError, PaymentIntent};
use charge_core::refund::StripeRefund;
use serde::Deserialize;
use tracing::warn;

use crate::ports::ListPage;

use super::refunds::parse_refund_page;
use super::WirePaymentIntent;

/// The query of one page of a list by creation time (the audit's): the window in whole seconds
/// (`created[gte]`, `created[lt]`), `limit` a page, after `starting_after`.
pub fn created_list_query(
    window: &AuditWindow,
    limit: u32,
    starting_after: Option<&str>,
) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("created[gte]", &window.from_secs().to_string())
        .append_pair("created[lt]", &window.to_secs().to_string())
        .append_pair("limit", &limit.to_string());
    if let Some(after) = starting_after {
        q.append_pair("starting_after", after);
    }
    q.finish()
}

/// One page of `GET /v1/payment_intents`. `has_more` is required: without it the end is not
/// known.
#[derive(Debug, Deserialize)]
struct WireIntentList {
    data: Vec<WirePaymentIntent>,
    has_more: bool,
}

/// Where the next page of a list starts: after its last object, when it says more follow; a
/// page that says more follow but holds nothing is refused (following it would loop).
fn next_after(
    has_more: bool,
    last: Option<&str>,
    what: &str,
) -> Result<Option<String>, GatewayError> {
    match (has_more, last) {
        (false, _) => Ok(None),
        (true, Some(last)) => Ok(Some(last.to_owned())),
        (true, None) => Err(GatewayError::Ambiguous {
            detail: format!("a {what} list page says has_more but is empty"),
        }),
    }
}

/// A 2xx page of a PaymentIntent list; unreadable is ambiguous (the audit then stops, incomplete).
pub fn parse_intent_list(body: &[u8]) -> Result<ListPage<PaymentIntent>, GatewayError> {
    let page: WireIntentList = serde_json::from_slice(body).map_err(|_| {
        warn!("a PaymentIntent list answered 2xx with an unreadable body");
        GatewayError::Ambiguous {
            detail: "2xx with an unreadable PaymentIntent list body".into(),
        }
    })?;
    let items: Vec<PaymentIntent> = page
        .data
        .into_iter()
        .map(|pi| pi.into_domain(false))
        .collect();
    let next = next_after(
        page.has_more,
        items.last().map(|pi| pi.id.as_str()),
        "PaymentIntent",
    )?;
    Ok(ListPage { items, next })
}

/// A 2xx page of a refund list, as a [`ListPage`].
pub fn parse_refund_list(body: &[u8]) -> Result<ListPage<StripeRefund>, GatewayError> {
    let page = parse_refund_page(body)?;
    Ok(ListPage {
        items: page.refunds,
        next: page.next.map(|id| id.as_str().to_owned()),
    })
}
