//! A disputed order, end to end on the local stack: the real handlers against moto (DynamoDB,
//! SQS FIFO, the table's stream, an EventBridge bus) and stripe-sim over HTTP on the core's clock.
//! An order checked out with Stripe's dispute test card is charged, stripe-sim disputes the
//! charge and posts its `charge.dispute.*` events signed to the events function (as Stripe posts
//! them to the webhook route), which retrieves the dispute and records it under its order with
//! the amount reserved on the charge; the notify relay publishes `DisputeOpened`; the refund door
//! answers 409 `disputed` and writes nothing (an inquiry's refund, in the same stack, is
//! accepted); the reconciler pages the deadline on the simulator's clock and settles the dispute
//! `lost` once stripe-sim closes it unanswered. A dispute answered with winning evidence ends
//! `won`: the record `failed`, the reservation given back, `DisputeWon` published; an inquiry
//! answered with losing evidence escalates and `DisputeFundsWithdrawn` is published.
//!
//! Then the requests each step costs on the wire (DynamoDB by target, Stripe by endpoint), the
//! rows of BENCHMARKS.md section 1 for disputes.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use charge_core::dispute::DisputeStatus;
use charge_core::domain::{DisputeId, OperationKind, OrderId};
use charge_core::operation::{Operation, OperationKey, OperationStatus};
use charge_core::time::{Clock as _, Timestamp};
use charge_once::events::{EventsDeps, WebhookSecret, DEFAULT_TOLERANCE};
use charge_once::ports::OperationReads;
use events::handler::EventsFunction;
use lambda_runtime::{Context, LambdaEvent};
use notify::handler::relay;
use serde_json::{json, Value};
use stripe_sim::DisputeEntry;
use testkit::stack::{api_event, json_body, Stack};

use crate::outcomes_on_aws::{for_order, Outcomes};

const HOUR: Duration = Duration::from_secs(3600);
const SECRET: &str = "whsec_DisputedOrderWebhook0123456789abcdefgh";
/// The charged order, paid with `pm_card_createDispute` (a chargeback, funds withdrawn).
const DISPUTED: &str = "ord-1001";
/// The twin, paid with `pm_card_createDisputeInquiry` (an inquiry: nothing withdrawn).
const INQUIRY: &str = "ord-1002";

fn order(id: &str) -> OrderId {
    OrderId::parse(id).unwrap()
}

fn charge_key(id: &str) -> OperationKey {
    OperationKey::charge(order(id))
}

fn dispute_key(id: &str, dp: &DisputeId) -> OperationKey {
    OperationKey::of_kind(order(id), OperationKind::Dispute(dp.clone()))
}

async fn get(s: &Stack, key: &OperationKey) -> Operation {
    s.store.get(key).await.unwrap().expect("the record")
}

/// stripe-sim posts its events signed with [`SECRET`] (taken with `take_due_webhooks`).
fn events_on(s: &Stack) {
    s.side
        .sim
        .set_webhooks(stripe_sim::WebhookConfig {
            secret: Some(SECRET.to_owned()),
            ..stripe_sim::WebhookConfig::default()
        })
        .unwrap();
}

/// The events function as deployed behind its webhook route, on `s`'s store, inbox and
/// stripe-sim.
fn events_function(s: &Stack) -> EventsFunction {
    EventsFunction {
        events: EventsDeps {
            charge: s.charge_deps(),
            inbox: s.inbox.clone(),
            secrets: Some(vec![WebhookSecret::parse(SECRET).unwrap()]),
            tolerance: DEFAULT_TOLERANCE,
            event_source: None,
        },
        metrics: s.metrics.clone(),
    }
}

/// Every event stripe-sim has due now, posted signed to the events function as Stripe posts it,
/// each answer reported back to stripe-sim: (type, outcome) of each.
async fn deliver_events(s: &Stack) -> Vec<(String, String)> {
    let f = events_function(s);
    let mut seen = Vec::new();
    for d in s.side.sim.take_due_webhooks() {
        let req = events::handler::delivery_request(&d.body, &d.signature);
        let resp =
            events::handler::handle_http(&f, LambdaEvent::new(req, Context::default())).await;
        let body = json_body(&resp);
        assert_eq!(resp.status_code, 200, "{}: {body}", d.event_type);
        s.side.sim.webhook_result(&d, true);
        let outcome = body["outcome"].as_str().unwrap_or("").to_owned();
        seen.push((d.event_type, outcome));
    }
    seen
}

/// The dispute event types among `seen`, in order.
fn dispute_types(seen: &[(String, String)]) -> Vec<&str> {
    seen.iter()
        .map(|(t, _)| t.as_str())
        .filter(|t| t.starts_with("charge.dispute."))
        .collect()
}

/// The dispute stripe-sim holds on `order_id`'s PaymentIntent (exactly one).
async fn dispute_of(s: &Stack, order_id: &str) -> (DisputeId, DisputeEntry) {
    let op = get(s, &charge_key(order_id)).await.operation_id.to_string();
    let intent: Vec<String> = s
        .side
        .sim
        .ledger()
        .into_iter()
        .filter(|p| p.operation_id.as_deref() == Some(op.as_str()))
        .map(|p| p.id)
        .collect();
    assert_eq!(intent.len(), 1, "one PaymentIntent for {order_id}");
    let found: Vec<DisputeEntry> = s
        .side
        .sim
        .dispute_ledger()
        .into_iter()
        .filter(|d| d.payment_intent == intent[0])
        .collect();
    assert_eq!(found.len(), 1, "one dispute on {order_id}: {found:?}");
    (DisputeId::parse(&found[0].id).unwrap(), found[0].clone())
}

/// `events/refund-valid.json` (refund-1 of 500) for `order_id`, through the checkout function.
async fn refund(s: &Stack, order_id: &str) -> ApiGatewayV2httpResponse {
    let mut req: ApiGatewayV2httpRequest = api_event("refund-valid.json");
    req.path_parameters
        .insert("order_id".into(), order_id.into());
    req.raw_path = Some(format!("/orders/{order_id}/refunds/refund-1"));
    checkout::handler::handle(&s.checkout(), LambdaEvent::new(req, Context::default())).await
}

/// `order_id` checked out for 1250 usd paid with `pm` (`events/checkout-valid.json`).
async fn checkout(s: &Stack, order_id: &str, pm: &str) {
    let req = for_order(api_event("checkout-valid.json"), order_id, pm);
    let resp =
        checkout::handler::handle(&s.checkout(), LambdaEvent::new(req, Context::default())).await;
    assert_eq!(resp.status_code, 202, "{}", json_body(&resp));
}

/// Answers dispute `dp` at stripe-sim as a person does in Stripe's dashboard: the evidence
/// `text` (`winning_evidence` / `losing_evidence` decide it in test mode), submitted.
/// `POST /v1/disputes/{id}` over HTTP; stripe-sim's answer status.
async fn answer_dispute(s: &Stack, dp: &DisputeId, text: &str) -> u16 {
    let base = s.side.running.base_url();
    let host = base
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let body = format!("evidence[uncategorized_text]={text}&submit=true");
    let request = format!(
        "POST /v1/disputes/{dp} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len}\r\n\
         Connection: close\r\n\r\n{body}",
        dp = dp.as_str(),
        key = stripe_sim::DEFAULT_API_KEY,
        len = body.len(),
    );
    let answer = tokio::task::spawn_blocking(move || {
        let mut conn = std::net::TcpStream::connect(&host).expect("connect to stripe-sim");
        conn.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        conn.read_to_string(&mut out).unwrap();
        out
    })
    .await
    .unwrap();
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP answer: {answer}"))
}

/// The events the order service's rule delivered for `order_id`, after relaying the table's
/// stream so far: (detail-type, detail).
async fn published(o: &Outcomes, order_id: &str) -> Vec<(String, Value)> {
    let (deps, _) = o.notify(&o.bus);
    let (response, _) = relay(&deps, &o.stream_records().await.records).await;
    assert!(response.batch_item_failures.is_empty());
    o.delivered()
        .await
        .into_iter()
        .filter(|e| e["detail"]["order_id"] == order_id)
        .map(|e| {
            (
                e["detail-type"].as_str().unwrap().to_owned(),
                e["detail"].clone(),
            )
        })
        .collect()
}

fn of_type<'a>(events: &'a [(String, Value)], kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|(t, _)| t == kind)
        .map(|(_, d)| d)
        .collect()
}

/// The whole order's path: checkout → charge → stripe-sim's dispute → its events to the events
/// function → the record (Stripe's status, amount, due_by; the charge reserving it) →
/// `DisputeOpened` published → the refund door's 409 `disputed` with nothing written (the
/// inquiry's refund accepted beside it) → `DisputeDeadlineNear` paged inside the page window on
/// the simulator's clock → unanswered past `due_by`, `DisputeDeadlinePassed` paged while Stripe
/// keeps it open → stripe-sim closes it lost and the tick
/// settles it `succeeded` (the amount kept), `DisputeLost` published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disputed_order_is_recorded_published_refused_a_refund_and_paged_before_its_deadline() {
    let o = Outcomes::spawn().await;
    let s: &Stack = &o;
    events_on(s);
    checkout(s, DISPUTED, "pm_card_createDispute").await;
    checkout(s, INQUIRY, "pm_card_createDisputeInquiry").await;
    while s.deliver().await > 0 {}
    for id in [DISPUTED, INQUIRY] {
        assert_eq!(
            get(s, &charge_key(id)).await.status,
            OperationStatus::Succeeded
        );
    }
    let (dp, at_stripe) = dispute_of(s, DISPUTED).await;
    let (inquiry, _) = dispute_of(s, INQUIRY).await;
    assert_eq!(at_stripe.status, "needs_response");

    // stripe-sim's events, posted to the webhook route: the dispute retrieved and recorded.
    let seen = deliver_events(s).await;
    let mut types = dispute_types(&seen);
    types.sort();
    assert_eq!(
        types,
        [
            "charge.dispute.created",
            "charge.dispute.created",
            "charge.dispute.funds_withdrawn"
        ],
        "{seen:?}"
    );
    let record = get(s, &dispute_key(DISPUTED, &dp)).await;
    let state = record.params.dispute_state().unwrap().clone();
    let due_by = state.due_by.expect("Stripe's evidence_details.due_by");
    assert_eq!(
        (
            record.status,
            state.status.clone(),
            record.params.amount().minor_units(),
            due_by,
            state.reserved,
            state.is_charge_refundable,
        ),
        (
            OperationStatus::Unknown,
            DisputeStatus::NeedsResponse,
            1250,
            Timestamp::from_millis(at_stripe.due_by_ms),
            true,
            false
        ),
        "{record:?}"
    );
    assert_eq!(due_by, s.clock().now().plus(7 * 24 * HOUR));
    let charge = get(s, &charge_key(DISPUTED)).await;
    assert_eq!(
        charge.refund_reserved(),
        1250,
        "the disputed amount reserved"
    );
    assert_eq!(
        charge.params.charge_state().unwrap().refund_blocked_by(),
        Some(&dp)
    );
    let asked = get(s, &dispute_key(INQUIRY, &inquiry)).await;
    let asked_state = asked.params.dispute_state().unwrap();
    assert_eq!(
        (
            asked.status,
            asked_state.status.clone(),
            asked_state.reserved
        ),
        (
            OperationStatus::Unknown,
            DisputeStatus::WarningNeedsResponse,
            false
        )
    );
    assert_eq!(get(s, &charge_key(INQUIRY)).await.refund_reserved(), 0);

    // The outbox: the relay publishes DisputeOpened, with Stripe's status and deadline.
    let events = published(&o, DISPUTED).await;
    let opened = of_type(&events, "DisputeOpened");
    assert_eq!(opened.len(), 1, "{events:?}");
    assert_eq!(
        (
            opened[0]["dispute_id"].as_str(),
            opened[0]["dispute_status"].as_str(),
            opened[0]["status"].as_str()
        ),
        (
            Some(dp.as_str()),
            Some("needs_response"),
            Some("dispute_opened")
        ),
        "{}",
        opened[0]
    );
    assert!(opened[0]["due_by"].is_string(), "{}", opened[0]);

    // The refund door: 409 disputed, naming the dispute, and nothing written or sent.
    let items = s.item_count().await;
    let resp = refund(s, DISPUTED).await;
    let body = json_body(&resp);
    assert_eq!(
        (resp.status_code, body["error"]["code"].as_str()),
        (409, Some("disputed")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(dp.as_str())),
        "{body}"
    );
    assert_eq!(s.item_count().await, items, "nothing written");
    assert_eq!(
        get(s, &charge_key(DISPUTED)).await,
        charge,
        "the charge as it was"
    );
    assert_eq!(s.depth().await, 0, "nothing queued");
    // Its twin: the inquiry leaves the charge refundable at Stripe, and the door lets it through.
    let resp = refund(s, INQUIRY).await;
    assert_eq!(resp.status_code, 202, "{}", json_body(&resp));
    assert_eq!(s.deliver().await, 1);
    let refunds = s.store.refunds_of(&order(INQUIRY)).await.unwrap();
    assert_eq!(
        refunds.iter().map(|r| r.status).collect::<Vec<_>>(),
        [OperationStatus::Succeeded],
        "refunded at Stripe"
    );
    assert_eq!(
        s.side.sim.request_counts().refund,
        1,
        "one refund reached Stripe"
    );
    let _ = deliver_events(s).await;

    // The simulator's clock: outside the 72 h page window nothing pages (the tick reads both
    // open disputes, due a day after they were recorded).
    let near = |s: &Stack| {
        s.metrics
            .sum("DisputeDeadlineNear", &[("Function", "reconciler")])
    };
    s.clock().set(due_by.minus(73 * HOUR));
    let report = s.tick().await.unwrap();
    assert_eq!(
        (report.disputes_read, report.dispute_deadline_near),
        (2, 0),
        "{report:?}"
    );
    assert_eq!(near(s), 0.0);
    // Inside it, nothing submitted: both need a response, both page.
    s.clock().set(due_by.minus(71 * HOUR));
    let report = s.tick().await.unwrap();
    assert_eq!(
        (report.disputes_read, report.dispute_deadline_near),
        (2, 2),
        "{report:?}"
    );
    assert_eq!(near(s), 2.0, "DisputeDeadlineNear counted");
    assert_eq!(
        get(s, &dispute_key(DISPUTED, &dp)).await.status,
        OperationStatus::Unknown
    );

    // Past due_by unanswered: Stripe keeps both open until the network decides (stripe-sim 2
    // days, `CLOSES_AFTER_DUE_MS`), still needing a response: the tick at due_by (Near's next
    // read) reads both and pages each passed, settling neither.
    let passed = |s: &Stack| {
        s.metrics
            .sum("DisputeDeadlinePassed", &[("Function", "reconciler")])
    };
    s.clock().set(due_by.plus(Duration::from_secs(120)));
    let report = s.tick().await.unwrap();
    assert_eq!(
        (
            report.disputes_read,
            report.settled,
            report.dispute_deadline_passed
        ),
        (2, 0, 2),
        "{report:?}"
    );
    assert_eq!(passed(s), 2.0, "DisputeDeadlinePassed counted");
    // Then stripe-sim closes the chargeback lost (the inquiry closed); the next daily read
    // settles both. Closed, neither needs a response: no page.
    s.clock().set(
        due_by
            .plus(Duration::from_millis(
                stripe_sim::CLOSES_AFTER_DUE_MS as u64,
            ))
            .plus(Duration::from_secs(120)),
    );
    let report = s.tick().await.unwrap();
    assert_eq!(
        (
            report.disputes_read,
            report.settled,
            report.dispute_deadline_passed
        ),
        (2, 2, 0),
        "{report:?}"
    );
    assert_eq!(passed(s), 2.0, "no more pages once closed");
    let lost = get(s, &dispute_key(DISPUTED, &dp)).await;
    assert_eq!(
        (
            lost.status,
            lost.params.dispute_state().unwrap().status.clone(),
            lost.next_due_at
        ),
        (OperationStatus::Succeeded, DisputeStatus::Lost, None),
        "lost: the bank's take succeeded"
    );
    let charge = get(s, &charge_key(DISPUTED)).await;
    assert_eq!(charge.refund_reserved(), 1250, "lost keeps the amount");
    assert_eq!(charge.params.charge_state().unwrap().disputed_by, None);
    assert_eq!(
        get(s, &dispute_key(INQUIRY, &inquiry)).await.status,
        OperationStatus::Failed,
        "the inquiry closed: nothing taken"
    );
    // Its closed events come after: the records are settled, nothing moves.
    let before = (lost.clone(), charge.clone());
    let seen = deliver_events(s).await;
    assert_eq!(
        dispute_types(&seen),
        ["charge.dispute.closed", "charge.dispute.closed"],
        "{seen:?}"
    );
    assert_eq!(
        (
            get(s, &dispute_key(DISPUTED, &dp)).await,
            get(s, &charge_key(DISPUTED)).await
        ),
        before
    );
    // The order is spent: the 1250 lost leaves nothing to refund.
    let resp = refund(s, DISPUTED).await;
    assert_eq!(
        (resp.status_code, json_body(&resp)["error"]["code"].clone()),
        (409, json!("nothing_left_to_refund"))
    );
    let events = published(&o, DISPUTED).await;
    let lost_events = of_type(&events, "DisputeLost");
    assert_eq!(lost_events.len(), 1, "{events:?}");
    assert_eq!(lost_events[0]["dispute_status"], "lost");
    assert_eq!(lost_events[0]["status"], "succeeded");
    let closed = of_type(&published(&o, INQUIRY).await, "DisputeClosed").len();
    assert_eq!(closed, 1);
    assert_eq!(
        s.side.sim.payment_intents_created(),
        2,
        "nothing created for a dispute"
    );
}

/// Evidence answers a dispute: winning evidence on the chargeback (under review, then `won`:
/// the record `failed`, the 1250 given back, `DisputeWon`, and the order refundable again);
/// losing evidence on the inquiry escalates it into a chargeback (funds withdrawn, reserved,
/// `DisputeFundsWithdrawn`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evidence_wins_a_dispute_back_and_an_inquiry_lost_withdraws_its_funds() {
    let o = Outcomes::spawn().await;
    let s: &Stack = &o;
    events_on(s);
    checkout(s, DISPUTED, "pm_card_createDispute").await;
    checkout(s, INQUIRY, "pm_card_createDisputeInquiry").await;
    while s.deliver().await > 0 {}
    let (dp, _) = dispute_of(s, DISPUTED).await;
    let (inquiry, _) = dispute_of(s, INQUIRY).await;
    let _ = deliver_events(s).await;
    assert_eq!(get(s, &charge_key(DISPUTED)).await.refund_reserved(), 1250);

    assert_eq!(
        answer_dispute(s, &dp, stripe_sim::WINNING_EVIDENCE).await,
        200
    );
    assert_eq!(
        answer_dispute(s, &inquiry, stripe_sim::LOSING_EVIDENCE).await,
        200
    );
    assert_eq!(s.side.sim.request_counts().dispute_update, 2);
    let seen = deliver_events(s).await;
    assert_eq!(
        dispute_types(&seen),
        ["charge.dispute.updated", "charge.dispute.updated"],
        "{seen:?}"
    );
    let in_review = get(s, &dispute_key(DISPUTED, &dp)).await;
    let state = in_review.params.dispute_state().unwrap();
    assert_eq!(
        (in_review.status, state.status.clone(), state.has_evidence),
        (OperationStatus::Unknown, DisputeStatus::UnderReview, true)
    );

    // The bank's review ends (an hour on stripe-sim's clock).
    s.clock().advance(2 * HOUR);
    let seen = deliver_events(s).await;
    let mut types = dispute_types(&seen);
    types.sort();
    assert_eq!(
        types,
        [
            "charge.dispute.closed",
            "charge.dispute.funds_reinstated",
            "charge.dispute.funds_withdrawn",
            "charge.dispute.updated"
        ],
        "{seen:?}"
    );
    let won = get(s, &dispute_key(DISPUTED, &dp)).await;
    assert_eq!(
        (
            won.status,
            won.params.dispute_state().unwrap().status.clone(),
            won.next_due_at
        ),
        (OperationStatus::Failed, DisputeStatus::Won, None),
        "won: nothing taken in the end"
    );
    let charge = get(s, &charge_key(DISPUTED)).await;
    assert_eq!(charge.refund_reserved(), 0, "the reservation given back");
    assert_eq!(charge.params.charge_state().unwrap().disputed_by, None);
    let escalated = get(s, &dispute_key(INQUIRY, &inquiry)).await;
    let state = escalated.params.dispute_state().unwrap();
    assert_eq!(
        (escalated.status, state.status.clone(), state.reserved),
        (OperationStatus::Unknown, DisputeStatus::NeedsResponse, true)
    );
    assert_eq!(get(s, &charge_key(INQUIRY)).await.refund_reserved(), 1250);

    let events = published(&o, DISPUTED).await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|(t, _)| t.as_str())
        .filter(|t| t.starts_with("Dispute"))
        .collect();
    assert_eq!(kinds, ["DisputeOpened", "DisputeWon"], "{events:?}");
    let withdrawn = published(&o, INQUIRY).await;
    let kinds: Vec<&str> = withdrawn
        .iter()
        .map(|(t, _)| t.as_str())
        .filter(|t| t.starts_with("Dispute"))
        .collect();
    assert_eq!(
        kinds,
        ["DisputeOpened", "DisputeFundsWithdrawn"],
        "{withdrawn:?}"
    );
    assert_eq!(
        of_type(&withdrawn, "DisputeFundsWithdrawn")[0]["dispute_status"],
        "needs_response"
    );

    // Won: the order may be refunded again (the door and Stripe both let it through).
    let resp = refund(s, DISPUTED).await;
    assert_eq!(resp.status_code, 202, "{}", json_body(&resp));
    assert_eq!(s.deliver().await, 1);
    let refunds = s.store.refunds_of(&order(DISPUTED)).await.unwrap();
    assert_eq!(refunds[0].status, OperationStatus::Succeeded, "{refunds:?}");
    // The escalated inquiry: refused now.
    let resp = refund(s, INQUIRY).await;
    assert_eq!(json_body(&resp)["error"]["code"], "disputed");
}

// ---- requests on the wire ----

mod wire_counts {
    use super::*;
    use crate::request_counts::wire::counter::{counted_dynamodb, WireCounter, WireTally};
    use charge_once::adapters::dynamodb::DynamoStore;
    use charge_once::adapters::inbox::DynamoInbox;
    use stripe_sim::RequestCounts;
    use testkit::aws::sdk_config;

    /// A [`Stack`] whose functions reach the operations table and the inbox through a client
    /// that counts every request by its `X-Amz-Target` (one counter each).
    struct Counted {
        stack: Stack,
        table: WireCounter,
        inbox: WireCounter,
    }

    impl std::ops::Deref for Counted {
        type Target = Stack;
        fn deref(&self) -> &Stack {
            &self.stack
        }
    }

    /// Requests of one step: the operations table's, the inbox's, stripe-sim's.
    #[derive(Debug)]
    struct Step {
        table: WireTally,
        inbox: WireTally,
        stripe: RequestCounts,
    }

    impl Counted {
        async fn spawn() -> Self {
            let stack = Stack::spawn().await;
            let config = sdk_config().await;
            let (table, inbox) = (WireCounter::new(), WireCounter::new());
            let store = Arc::new(DynamoStore::new(
                counted_dynamodb(&config, &table),
                stack.store.table(),
            ));
            let events_inbox = Arc::new(DynamoInbox::new(
                counted_dynamodb(&config, &inbox),
                stack.inbox.table_name(),
            ));
            Counted {
                stack: Stack {
                    store,
                    inbox: events_inbox,
                    ..stack
                },
                table,
                inbox,
            }
        }

        /// The requests `f` makes.
        async fn count<F: std::future::Future<Output = ()>>(&self, f: F) -> Step {
            let (table, inbox, stripe) = (
                self.table.snapshot(),
                self.inbox.snapshot(),
                self.side.sim.request_counts(),
            );
            f.await;
            let now = self.side.sim.request_counts();
            Step {
                table: self.table.snapshot().since(&table),
                inbox: self.inbox.snapshot().since(&inbox),
                stripe: RequestCounts {
                    retrieve: now.retrieve - stripe.retrieve,
                    dispute_read: now.dispute_read - stripe.dispute_read,
                    refund: now.refund - stripe.refund,
                    list: now.list - stripe.list,
                    search: now.search - stripe.search,
                    create: now.create - stripe.create,
                    ..RequestCounts::default()
                },
            }
        }
    }

    fn tally(t: &WireTally) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = [
            "GetItem",
            "Query",
            "BatchGetItem",
            "PutItem",
            "UpdateItem",
            "TransactWriteItems",
        ]
        .iter()
        .map(|op| ((*op).to_owned(), t.get(op)))
        .filter(|(_, n)| *n > 0)
        .collect();
        v.sort();
        v
    }

    fn ops(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    /// One event delivered to the events function (signed, on the webhook route).
    async fn one_event(s: &Counted, kind: &str) -> Step {
        let due = s.side.sim.take_due_webhooks();
        let mut of_kind: Vec<_> = due.into_iter().filter(|d| d.event_type == kind).collect();
        assert_eq!(of_kind.len(), 1, "one {kind}");
        let d = of_kind.remove(0);
        let f = events_function(s);
        s.count(async {
            let req = events::handler::delivery_request(&d.body, &d.signature);
            let resp =
                events::handler::handle_http(&f, LambdaEvent::new(req, Context::default())).await;
            assert_eq!(resp.status_code, 200, "{}", json_body(&resp));
        })
        .await
    }

    /// Every request of a dispute's steps on the wire, asserted (BENCHMARKS.md section 1 has
    /// these rows). DynamoDB: the functions' own requests, by target, on the operations table
    /// and on the webhook inbox apart; Stripe: stripe-sim's own per-endpoint counters.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dispute_s_steps_cost_on_the_wire() {
        let s = Counted::spawn().await;
        events_on(&s);
        checkout(&s, DISPUTED, "pm_card_createDispute").await;
        assert_eq!(s.deliver().await, 1);
        let (dp, _) = dispute_of(&s, DISPUTED).await;
        // Created: one event (`charge.dispute.created`; its `funds_withdrawn` twin, taken with
        // it, is not counted).
        let created = one_event(&s, "charge.dispute.created").await;
        assert_eq!(
            status(&s, &dp).await,
            (OperationStatus::Unknown, DisputeStatus::NeedsResponse)
        );
        // Moved: winning evidence submitted (under_review); its `updated` event.
        assert_eq!(
            answer_dispute(&s, &dp, stripe_sim::WINNING_EVIDENCE).await,
            200
        );
        let moved = one_event(&s, "charge.dispute.updated").await;
        assert_eq!(
            status(&s, &dp).await,
            (OperationStatus::Unknown, DisputeStatus::UnderReview)
        );
        // Settled: the review ends won; its `closed` event (the reservation given back).
        s.clock().advance(2 * HOUR);
        let settled = one_event(&s, "charge.dispute.closed").await;
        assert_eq!(
            status(&s, &dp).await,
            (OperationStatus::Failed, DisputeStatus::Won)
        );
        assert_eq!(get(&s, &charge_key(DISPUTED)).await.refund_reserved(), 0);

        // Another order disputed and recorded: its refund refused at the door, then the
        // reconciler's re-read of it, due a day after it was recorded.
        let (s2, dp2) = disputed_again().await;
        let refused = s2
            .count(async {
                let resp = refund(&s2, DISPUTED).await;
                assert_eq!(json_body(&resp)["error"]["code"], "disputed");
            })
            .await;
        s2.clock().advance(25 * HOUR);
        let reread = s2
            .count(async {
                let report = s2.tick().await.unwrap();
                assert_eq!(
                    (report.disputes_read, report.settled, report.failures),
                    (1, 0, 0),
                    "{report:?}"
                );
            })
            .await;
        let record = get(&s2, &dispute_key(DISPUTED, &dp2)).await;
        assert!(
            record.next_due_at.unwrap() > s2.clock().now(),
            "due again later"
        );
        // Each event: the dispute retrieved (`GET /v1/disputes/{id}`) and its intent
        // (`GET /v1/payment_intents/{id}`: the order's id is in its metadata); the dispute's
        // record and the order's charge read (GetItem 2); then the write: created beside the
        // charge (the record put, the reservation and the charge's open dispute: one
        // TransactWriteItems), moved alone (one conditional UpdateItem: nothing on the charge
        // changes), settled beside the charge (the reservation given back and the open dispute
        // cleared: one TransactWriteItems, which returns no item, so the record is read back: a
        // third GetItem). The inbox: the event's id remembered (one PutItem).
        for (step, table) in [
            (&created, CREATED_TABLE),
            (&moved, MOVED_TABLE),
            (&settled, SETTLED_TABLE),
        ] {
            assert_eq!(tally(&step.table), ops(table), "{step:?}");
            assert_eq!(tally(&step.inbox), ops(&[("PutItem", 1)]), "{step:?}");
            assert_eq!(stripe(&step.stripe), (1, 1, 0), "{step:?}");
        }
        // The refused refund: the door reads the charge, decides 409, and reads the refund's
        // own record (the same request again would be its answer); nothing written, nothing sent.
        assert_eq!(tally(&refused.table), ops(&[("GetItem", 2)]), "{refused:?}");
        assert_eq!(tally(&refused.inbox), ops(&[]));
        assert_eq!(stripe(&refused.stripe), (0, 0, 0));
        // The re-read, one tick: the due work (8 index shards + the REVIEW partition queried,
        // one BatchGetItem for the due record), the dispute's shell (its record and the
        // charge read, the dispute retrieved at Stripe, its next read written: one UpdateItem),
        // then the gauges (DisputesOpen, DisputeNearestDeadlineHours: the 8 shards queried
        // again to the 24 h horizon, one BatchGetItem for what they list).
        assert_eq!(tally(&reread.table), ops(REREAD_TABLE), "{reread:?}");
        assert_eq!(stripe(&reread.stripe), (1, 0, 0), "{reread:?}");
    }

    /// The dispute's record's status and Stripe's status in it.
    async fn status(s: &Stack, dp: &DisputeId) -> (OperationStatus, DisputeStatus) {
        let r = get(s, &dispute_key(DISPUTED, dp)).await;
        (r.status, r.params.dispute_state().unwrap().status.clone())
    }

    /// (dispute reads, PaymentIntent reads, every other request) at Stripe.
    fn stripe(c: &RequestCounts) -> (u64, u64, u64) {
        (
            c.dispute_read,
            c.retrieve,
            c.create + c.refund + c.list + c.search,
        )
    }

    /// A dispute event that creates its record, on the operations table.
    const CREATED_TABLE: &[(&str, u64)] = &[("GetItem", 2), ("TransactWriteItems", 1)];
    /// One that moves it (under review).
    const MOVED_TABLE: &[(&str, u64)] = &[("GetItem", 2), ("UpdateItem", 1)];
    /// One that settles it (won).
    const SETTLED_TABLE: &[(&str, u64)] = &[("GetItem", 3), ("TransactWriteItems", 1)];
    /// The reconciler's re-read of one open dispute, on the operations table.
    const REREAD_TABLE: &[(&str, u64)] = &[
        ("BatchGetItem", 2),
        ("GetItem", 2),
        ("Query", 17),
        ("UpdateItem", 1),
    ];

    /// A second stack with ord-1001 disputed and recorded (every due event delivered).
    async fn disputed_again() -> (Counted, DisputeId) {
        let s = Counted::spawn().await;
        events_on(&s);
        checkout(&s, DISPUTED, "pm_card_createDispute").await;
        assert_eq!(s.deliver().await, 1);
        let (dp, _) = dispute_of(&s, DISPUTED).await;
        let _ = deliver_events(&s).await;
        assert_eq!(
            get(&s, &dispute_key(DISPUTED, &dp)).await.status,
            OperationStatus::Unknown
        );
        (s, dp)
    }
}
