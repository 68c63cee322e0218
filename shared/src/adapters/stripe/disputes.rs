//! A dispute at Stripe over the client's wire, read only: a dispute's and a dispute list's
//! bodies read (unreadable is an error, never a guess: a dispute's record is written only from
//! what Stripe answered), and a PaymentIntent's disputes followed page after page to their end.

use charge_core::dispute::{DisputeStatus, StripeDispute};
use charge_core::domain::{DisputeId, PaymentIntentId, StripeChargeId};
use charge_core::outcome::GatewayError;
use charge_core::time::Timestamp;
use serde::Deserialize;
use tracing::warn;

use crate::ports::ListPage;

/// The most pages one PaymentIntent's dispute list follows: a charge is disputed once or twice,
/// so a list that has not ended after 10 000 disputes is a server that never says the end.
pub const MAX_DISPUTE_PAGES: usize = 100;

/// What Stripe answers for a dispute. Every field the engine records is required: a dispute
/// missing one is refused whole rather than recorded with a guess.
#[derive(Debug, Deserialize)]
struct WireDispute {
    id: DisputeId,
    /// The charge's id; an expanded charge makes the answer unreadable (we never expand it).
    charge: StripeChargeId,
    #[serde(default)]
    payment_intent: Option<PaymentIntentId>,
    amount: i64,
    currency: String,
    reason: String,
    status: String,
    #[serde(default)]
    evidence_details: Option<WireEvidenceDetails>,
    is_charge_refundable: bool,
    /// Expanded balance transactions: only how many there are is read.
    #[serde(default)]
    balance_transactions: Vec<serde::de::IgnoredAny>,
    livemode: bool,
    created: i64,
}

#[derive(Debug, Deserialize)]
struct WireEvidenceDetails {
    /// Seconds since the epoch; `null` once nothing more can be submitted.
    #[serde(default)]
    due_by: Option<i64>,
    #[serde(default)]
    has_evidence: bool,
}

impl WireDispute {
    fn into_domain(self) -> Result<StripeDispute, GatewayError> {
        if self.amount < 0 {
            return Err(unreadable("a dispute with a negative amount"));
        }
        let seconds = |s: i64| Timestamp::from_millis(s.saturating_mul(1000));
        let (due_by, has_evidence) = match self.evidence_details {
            Some(d) => (d.due_by.map(seconds), d.has_evidence),
            None => (None, false),
        };
        Ok(StripeDispute {
            id: self.id,
            charge: self.charge,
            payment_intent: self.payment_intent,
            amount: self.amount,
            currency: self.currency.to_ascii_lowercase(),
            reason: self.reason,
            status: DisputeStatus::parse(&self.status),
            due_by,
            has_evidence,
            is_charge_refundable: self.is_charge_refundable,
            balance_transactions: u32::try_from(self.balance_transactions.len())
                .unwrap_or(u32::MAX),
            livemode: self.livemode,
            created: seconds(self.created),
        })
    }
}

/// One page of `GET /v1/disputes`. `has_more` is required: without it the end is not known.
#[derive(Debug, Deserialize)]
struct WireDisputeList {
    data: Vec<WireDispute>,
    has_more: bool,
}

fn unreadable(what: &str) -> GatewayError {
    warn!(what, "a dispute read answered 2xx with an unreadable body");
    GatewayError::Ambiguous {
        detail: format!("2xx with an unreadable dispute body: {what}"),
    }
}

/// A 2xx dispute body; unreadable (no valid dispute or charge id, a field missing, a negative
/// amount) is an error: nothing is recorded from it.
pub fn parse_dispute(body: &[u8]) -> Result<StripeDispute, GatewayError> {
    let dispute: WireDispute =
        serde_json::from_slice(body).map_err(|e| unreadable(&e.to_string()))?;
    dispute.into_domain()
}

/// A 2xx page of a dispute list; unreadable is an error. A page that says more follow but
/// holds nothing to start the next one after is refused too: following it would loop.
pub fn parse_dispute_list(body: &[u8]) -> Result<ListPage<StripeDispute>, GatewayError> {
    let page: WireDisputeList =
        serde_json::from_slice(body).map_err(|e| unreadable(&e.to_string()))?;
    let items = page
        .data
        .into_iter()
        .map(WireDispute::into_domain)
        .collect::<Result<Vec<_>, _>>()?;
    let next = match (page.has_more, items.last()) {
        (false, _) => None,
        (true, Some(last)) => Some(last.id.as_str().to_owned()),
        (true, None) => {
            return Err(GatewayError::Ambiguous {
                detail: "a dispute list page says has_more but is empty".into(),
            })
        }
    };
    Ok(ListPage { items, next })
}

/// The query of one page of `payment_intent`'s disputes: `limit` a page, after `starting_after`.
pub fn dispute_list_query(
    payment_intent: &PaymentIntentId,
    limit: u32,
    starting_after: Option<&str>,
) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("payment_intent", payment_intent.as_str())
        .append_pair("limit", &limit.to_string());
    if let Some(after) = starting_after {
        q.append_pair("starting_after", after);
    }
    q.finish()
}

/// Every dispute of a list, page after page from `fetch(starting_after)`, at most
/// [`MAX_DISPUTE_PAGES`] pages: a list that has not ended by then is refused, never cut short.
pub async fn collect_dispute_pages<F, Fut>(mut fetch: F) -> Result<Vec<StripeDispute>, GatewayError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<ListPage<StripeDispute>, GatewayError>>,
{
    let mut all = Vec::new();
    let mut after = None;
    for _ in 0..MAX_DISPUTE_PAGES {
        let page = fetch(after.take()).await?;
        all.extend(page.items);
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(all),
        }
    }
    Err(GatewayError::Ambiguous {
        detail: format!("the dispute list did not end within {MAX_DISPUTE_PAGES} pages"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DISPUTE: &str = r#"{"id":"dp_1","object":"dispute","amount":1000,"balance_transactions":[{"id":"txn_1","amount":-1000}],
        "charge":"ch_1","created":1700000000,"currency":"USD","evidence":{"uncategorized_text":null},
        "evidence_details":{"due_by":1700604800,"has_evidence":false,"past_due":false,"submission_count":0},
        "is_charge_refundable":false,"livemode":false,"metadata":{},"payment_intent":"pi_1",
        "reason":"fraudulent","status":"needs_response"}"#;

    #[test]
    fn a_dispute_is_read_as_stripe_answers_it() {
        let d = parse_dispute(DISPUTE.as_bytes()).unwrap();
        assert_eq!(d.id.as_str(), "dp_1");
        assert_eq!(d.charge.as_str(), "ch_1");
        assert_eq!(d.payment_intent.as_ref().map(|p| p.as_str()), Some("pi_1"));
        assert_eq!((d.amount, d.currency.as_str()), (1000, "usd"));
        assert_eq!(d.status, DisputeStatus::NeedsResponse);
        assert_eq!(d.due_by, Some(Timestamp::from_millis(1_700_604_800_000)));
        assert_eq!(d.created, Timestamp::from_millis(1_700_000_000_000));
        assert_eq!((d.balance_transactions, d.is_charge_refundable), (1, false));
        assert!(!d.has_evidence && !d.livemode);
    }

    #[test]
    fn an_unknown_status_and_a_closed_deadline_are_read_not_refused() {
        let body = DISPUTE
            .replace("needs_response", "prearbitration")
            .replace("\"due_by\":1700604800", "\"due_by\":null");
        let d = parse_dispute(body.as_bytes()).unwrap();
        assert_eq!(d.status, DisputeStatus::Other("prearbitration".into()));
        assert_eq!(d.due_by, None);
    }

    /// Each malformed answer is a clear error, never a panic or a guess; its well-formed twin
    /// above is read.
    #[test]
    fn a_malformed_dispute_is_an_error() {
        for (what, body) in [
            ("not json", "{".to_owned()),
            ("no id", DISPUTE.replace("\"id\":\"dp_1\",", "")),
            ("a refund id", DISPUTE.replace("dp_1", "re_1")),
            ("no amount", DISPUTE.replace("\"amount\":1000,", "")),
            (
                "a negative amount",
                DISPUTE.replace("\"amount\":1000", "\"amount\":-5"),
            ),
            (
                "a string amount",
                DISPUTE.replace("\"amount\":1000", "\"amount\":\"1000\""),
            ),
            (
                "no status",
                DISPUTE.replace("\"status\":\"needs_response\"", "\"x\":1"),
            ),
            (
                "an expanded charge",
                DISPUTE.replace("\"ch_1\"", "{\"id\":\"ch_1\"}"),
            ),
            ("no created", DISPUTE.replace("\"created\":1700000000,", "")),
            (
                "no refundability",
                DISPUTE.replace("\"is_charge_refundable\":false,", ""),
            ),
        ] {
            let e = parse_dispute(body.as_bytes()).unwrap_err();
            assert!(matches!(e, GatewayError::Ambiguous { .. }), "{what}: {e:?}");
        }
    }

    #[test]
    fn a_list_page_says_where_the_next_starts() {
        let page = |has_more: bool, data: &str| {
            format!(r#"{{"object":"list","data":[{data}],"has_more":{has_more}}}"#)
        };
        let two = format!("{DISPUTE},{}", DISPUTE.replace("dp_1", "dp_2"));
        let p = parse_dispute_list(page(true, &two).as_bytes()).unwrap();
        assert_eq!((p.items.len(), p.next.as_deref()), (2, Some("dp_2")));
        let last = parse_dispute_list(page(false, DISPUTE).as_bytes()).unwrap();
        assert_eq!(last.next, None);
        assert!(parse_dispute_list(page(true, "").as_bytes()).is_err());
        assert!(
            parse_dispute_list(br#"{"data":[]}"#).is_err(),
            "no has_more"
        );
        let bad = page(false, &DISPUTE.replace("\"amount\":1000", "\"amount\":-1"));
        assert!(
            parse_dispute_list(bad.as_bytes()).is_err(),
            "one bad dispute spoils the page"
        );
    }

    #[tokio::test]
    async fn a_list_that_never_ends_is_refused_at_the_bound() {
        let mut pages = 0;
        let r = collect_dispute_pages(|_| {
            pages += 1;
            async {
                parse_dispute_list(format!(r#"{{"data":[{DISPUTE}],"has_more":true}}"#).as_bytes())
            }
        })
        .await;
        assert!(r.is_err());
        assert_eq!(pages, MAX_DISPUTE_PAGES);
    }

    #[test]
    fn the_list_query_names_the_intent_and_the_page() {
        let pi = PaymentIntentId::parse("pi_1").unwrap();
        assert_eq!(
            dispute_list_query(&pi, 100, Some("dp_9")),
            "payment_intent=pi_1&limit=100&starting_after=dp_9"
        );
    }
}
