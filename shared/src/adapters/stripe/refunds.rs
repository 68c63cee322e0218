//! A refund at Stripe over the client's wire: the create's form, a refund's and a refund list's
//! bodies read (unreadable is ambiguous), and a list followed page after page to its end or refused.

use charge_core::domain::{PaymentIntentId, StripeRefundId};
use charge_core::outcome::GatewayError;
use charge_core::refund::{RefundStatus, StripeRefund};
use serde::Deserialize;
use tracing::warn;

use crate::ports::CreateRefund;

use super::{string, WireMetadata};

/// The most pages one refund list follows: 10 000 refunds of one PaymentIntent at 100 a page,
/// far past any real charge. Past it the answer is refused rather than followed forever (a
/// server whose `has_more` never ends).
pub const MAX_REFUND_PAGES: usize = 100;

#[derive(Debug, Deserialize)]
struct WireRefund {
    /// Parsed as it arrives: an answer naming no valid refund id is unreadable.
    id: StripeRefundId,
    /// Stripe documents it nullable: absent or `null` is a status this code does not know.
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    amount: Option<i64>,
    #[serde(default)]
    currency: Option<String>,
    /// The id, as we never expand it; an expanded object makes the answer unreadable.
    #[serde(default)]
    payment_intent: Option<String>,
    #[serde(default)]
    metadata: Option<WireMetadata>,
    #[serde(default)]
    failure_reason: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

impl WireRefund {
    fn into_domain(self) -> StripeRefund {
        let (operation_id, order_id) = match self.metadata {
            Some(m) => (string(m.operation_id), string(m.order_id)),
            None => (None, None),
        };
        StripeRefund {
            id: self.id,
            status: RefundStatus::parse(self.status.as_deref().unwrap_or("null")),
            amount: self.amount,
            currency: self.currency.map(|c| c.to_ascii_lowercase()),
            replayed: false,
            payment_intent: self.payment_intent,
            operation_id,
            order_id,
            failure_reason: self.failure_reason,
            reason: self.reason,
        }
    }
}

/// One page of `GET /v1/refunds`. `has_more` is required: without it the end is not known.
#[derive(Debug, Deserialize)]
struct WireRefundList {
    data: Vec<WireRefund>,
    has_more: bool,
}

/// One page of a refund list: its refunds, and where the next page starts (`None`: the last).
#[derive(Debug)]
pub struct RefundPage {
    pub refunds: Vec<StripeRefund>,
    pub next: Option<StripeRefundId>,
}

/// The form of a refund create: the intent, the amount, the reason if any, and the metadata that
/// names the operation and its order.
pub fn refund_form(req: &CreateRefund) -> Vec<(String, String)> {
    let mut form = vec![
        (
            "payment_intent".to_owned(),
            req.params.payment_intent.as_str().to_owned(),
        ),
        (
            "amount".to_owned(),
            req.params.amount.minor_units().to_string(),
        ),
    ];
    if let Some(reason) = req.params.reason {
        form.push(("reason".to_owned(), reason.as_str().to_owned()));
    }
    form.push((
        "metadata[operation_id]".to_owned(),
        req.operation_id.to_string(),
    ));
    form.push((
        "metadata[order_id]".to_owned(),
        req.order_id.as_str().to_owned(),
    ));
    form
}

/// A 2xx refund body; unreadable (or naming no valid refund id) is ambiguous: a refund may have
/// been made.
pub fn parse_refund(body: &[u8]) -> Result<StripeRefund, GatewayError> {
    let refund: WireRefund = serde_json::from_slice(body).map_err(|_| {
        warn!("a refund call answered 2xx with an unreadable body");
        GatewayError::Ambiguous {
            detail: "2xx with an unreadable refund body".into(),
        }
    })?;
    Ok(refund.into_domain())
}

/// A 2xx page of a refund list; unreadable is ambiguous. A page that says more follow but holds
/// nothing to start the next one after is refused too: following it would loop.
pub fn parse_refund_page(body: &[u8]) -> Result<RefundPage, GatewayError> {
    let page: WireRefundList = serde_json::from_slice(body).map_err(|_| {
        warn!("a refund list answered 2xx with an unreadable body");
        GatewayError::Ambiguous {
            detail: "2xx with an unreadable refund list body".into(),
        }
    })?;
    let refunds: Vec<StripeRefund> = page.data.into_iter().map(WireRefund::into_domain).collect();
    let next = match (page.has_more, refunds.last()) {
        (false, _) => None,
        (true, Some(last)) => Some(last.id.clone()),
        (true, None) => {
            return Err(GatewayError::Ambiguous {
                detail: "a refund list page says has_more but is empty".into(),
            })
        }
    };
    Ok(RefundPage { refunds, next })
}

/// The query of one page of `payment_intent`'s refunds: `limit` a page, after `starting_after`.
pub fn refund_list_query(
    payment_intent: &PaymentIntentId,
    limit: u32,
    starting_after: Option<&StripeRefundId>,
) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("payment_intent", payment_intent.as_str())
        .append_pair("limit", &limit.to_string());
    if let Some(after) = starting_after {
        q.append_pair("starting_after", after.as_str());
    }
    q.finish()
}

/// Every refund of a list, page after page from `fetch(starting_after)`, at most
/// [`MAX_REFUND_PAGES`] pages: a list that has not ended by then is refused (ambiguous), never cut
/// short, since a refund left off could be the one looked for.
pub async fn collect_refund_pages<F, Fut>(mut fetch: F) -> Result<Vec<StripeRefund>, GatewayError>
where
    F: FnMut(Option<StripeRefundId>) -> Fut,
    Fut: std::future::Future<Output = Result<RefundPage, GatewayError>>,
{
    let mut all = Vec::new();
    let mut after = None;
    for _ in 0..MAX_REFUND_PAGES {
        let page = fetch(after.take()).await?;
        all.extend(page.refunds);
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(all),
        }
    }
    Err(GatewayError::Ambiguous {
        detail: format!("the refund list did not end within {MAX_REFUND_PAGES} pages"),
    })
}
