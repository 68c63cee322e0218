//! A declined order charged again, end to end on the local stack: the real checkout and charge
//! handlers against moto (DynamoDB, SQS FIFO) and stripe-sim over HTTP. An order checked out
//! with stripe-sim's declining test card ends `failed`; the same order asked again with
//! `pm_card_visa` is attempt 2 (202), charged by the charge function as its event source runs
//! it, and `succeeded`; its PaymentIntent names the attempt in its metadata; a third card is 409
//! `paid` and writes nothing. Two retries of another declined order at once, with different
//! cards, make one attempt (the other 409 `attempt_in_flight`).
//!
//! Then the requests each step of the retried order costs on the wire (DynamoDB by target,
//! Stripe by endpoint), the rows of BENCHMARKS.md section 1 for attempts.

use std::io::{Read, Write};
use std::sync::Arc;

use aws_lambda_events::apigw::ApiGatewayV2httpResponse;
use charge_core::domain::OrderId;
use charge_core::operation::{OperationKey, OperationStatus};
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::ports::OperationReads;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;
use stripe_sim::RequestCounts;
use testkit::aws::sdk_config;
use testkit::stack::{api_event, json_body, Stack};

use crate::outcomes_on_aws::for_order;
use crate::request_counts::wire::counter::{counted_dynamodb, WireCounter, WireTally};

const DECLINED: &str = "pm_card_chargeDeclined";

/// A [`Stack`] whose functions reach the operations table through a client that counts every
/// request by its `X-Amz-Target`.
struct Counted {
    stack: Stack,
    table: WireCounter,
}

impl std::ops::Deref for Counted {
    type Target = Stack;
    fn deref(&self) -> &Stack {
        &self.stack
    }
}

/// Requests of one step: the operations table's, stripe-sim's.
#[derive(Debug)]
struct Step {
    table: WireTally,
    stripe: RequestCounts,
}

impl Counted {
    async fn spawn() -> Self {
        let stack = Stack::spawn().await;
        let config = sdk_config().await;
        let table = WireCounter::new();
        let store = Arc::new(DynamoStore::new(
            counted_dynamodb(&config, &table),
            stack.store.table(),
        ));
        Counted {
            stack: Stack { store, ..stack },
            table,
        }
    }

    /// The requests `f` makes.
    async fn count<T, F: std::future::Future<Output = T>>(&self, f: F) -> (T, Step) {
        let (table, stripe) = (self.table.snapshot(), self.side.sim.request_counts());
        let out = f.await;
        let now = self.side.sim.request_counts();
        let step = Step {
            table: self.table.snapshot().since(&table),
            stripe: RequestCounts {
                retrieve: now.retrieve - stripe.retrieve,
                search: now.search - stripe.search,
                create: now.create - stripe.create,
                cancel: now.cancel - stripe.cancel,
                ..RequestCounts::default()
            },
        };
        (out, step)
    }
}

/// The DynamoDB requests of a step, by target, those made only.
fn tally(t: &WireTally) -> Vec<(String, u64)> {
    [
        "GetItem",
        "Query",
        "PutItem",
        "UpdateItem",
        "TransactWriteItems",
    ]
    .iter()
    .map(|op| ((*op).to_owned(), t.get(op)))
    .filter(|(_, n)| *n > 0)
    .collect()
}

fn ops(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

/// `POST /orders/{order_id}/charge` for 1250 usd paid with `pm`.
async fn post(s: &Stack, order_id: &str, pm: &str) -> ApiGatewayV2httpResponse {
    let req = for_order(api_event("checkout-valid.json"), order_id, pm);
    checkout::handler::handle(&s.checkout(), LambdaEvent::new(req, Context::default())).await
}

/// `GET /orders/{order_id}/charge`.
async fn get_charge(s: &Stack, order_id: &str) -> Value {
    let mut req = for_order(api_event("checkout-valid.json"), order_id, "pm_card_visa");
    req.request_context.http.method = aws_lambda_events::http::Method::GET;
    req.body = None;
    let resp =
        checkout::handler::handle(&s.checkout(), LambdaEvent::new(req, Context::default())).await;
    assert_eq!(resp.status_code, 200, "{}", json_body(&resp));
    json_body(&resp)
}

/// The PaymentIntent `pi` as stripe-sim holds it, over HTTP (its metadata included).
async fn intent(s: &Stack, pi: &str) -> Value {
    let base = s.side.running.base_url();
    let host = base
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let request = format!(
        "GET /v1/payment_intents/{pi} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\
         Connection: close\r\n\r\n",
        key = stripe_sim::DEFAULT_API_KEY,
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
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    let body = body.trim();
    // A chunked answer: the JSON object between its first `{` and last `}`.
    let (from, to) = (body.find('{').unwrap(), body.rfind('}').unwrap());
    serde_json::from_str(&body[from..=to]).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

fn order(id: &str) -> OrderId {
    OrderId::parse(id).unwrap()
}

/// The retried order end to end, each step counted on the wire (BENCHMARKS.md section 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_order_is_paid_with_a_second_card_and_a_third_try_is_refused() {
    let s = Counted::spawn().await;
    let id = "ord-1001";
    let (resp, first) = s.count(post(&s, id, DECLINED)).await;
    assert_eq!(resp.status_code, 202, "{}", json_body(&resp));
    let (n, declined) = s.count(s.deliver()).await;
    assert_eq!(n, 1);
    let head = s.store.charge_of(&order(id)).await.unwrap().unwrap();
    assert_eq!(head.status, OperationStatus::Failed, "declined: {head:?}");

    let (resp, again) = s.count(post(&s, id, "pm_card_visa")).await;
    assert_eq!(resp.status_code, 202, "{}", json_body(&resp));
    let body = json_body(&resp);
    assert_eq!(body["attempt"], 2);
    assert_ne!(body["operation_id"], head.operation_id.to_string());
    let (n, charged) = s.count(s.deliver()).await;
    assert_eq!(n, 1, "attempt 2's message (version 5) is delivered and run");
    let paid = s.store.charge_of(&order(id)).await.unwrap().unwrap();
    assert_eq!(paid.kind.attempt_no(), Some(2));
    assert_eq!(paid.status, OperationStatus::Succeeded, "{paid:?}");
    let pi = paid.external_id.clone().unwrap();
    assert_ne!(
        Some(&pi),
        head.external_id.as_ref(),
        "its own PaymentIntent"
    );
    let at_stripe = intent(&s, pi.as_str()).await;
    assert_eq!(at_stripe["metadata"]["attempt"], "2", "{at_stripe}");
    assert_eq!(at_stripe["metadata"]["order_id"], id);
    if let Some(first_pi) = &head.external_id {
        let first = intent(&s, first_pi.as_str()).await;
        assert!(first["metadata"].get("attempt").is_none(), "{first}");
    }

    let (got, shown) = s.count(get_charge(&s, id)).await;
    assert_eq!(got["paid_attempt"], 2);
    assert_eq!(got["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(got["payment_intent"], pi.as_str());

    let items = s.item_count().await;
    let (resp, third) = s.count(post(&s, id, "pm_card_mastercard")).await;
    assert_eq!(resp.status_code, 409, "{}", json_body(&resp));
    assert_eq!(json_body(&resp)["error"]["code"], "paid");
    assert_eq!(s.item_count().await, items, "nothing written");
    assert_eq!(s.depth().await, 0, "nothing queued");

    // The requests each step cost (BENCHMARKS.md section 1, "a declined order charged again").
    // The first checkout: one conditional Put. Its charge, declined: claim, create, record,
    // and the declined intent canceled at Stripe (a customer cannot pay it later).
    assert_eq!(tally(&first.table), ops(&[("PutItem", 1)]));
    assert_eq!(tally(&declined.table), ops(&[("UpdateItem", 2)]));
    assert_eq!((declined.stripe.create, declined.stripe.cancel), (1, 1));
    // Checkout after a decline: the conditional Put finds the head (refused, the head
    // returned), then one transaction (the attempt's Put, the head's Update).
    assert_eq!(
        tally(&again.table),
        ops(&[("PutItem", 1), ("TransactWriteItems", 1)])
    );
    assert_eq!(again.stripe.create, 0);
    // Attempt 2 charged as any charge: claim, create, record.
    assert_eq!(tally(&charged.table), ops(&[("UpdateItem", 2)]));
    assert_eq!(
        (
            charged.stripe.create,
            charged.stripe.retrieve,
            charged.stripe.search
        ),
        (1, 0, 0)
    );
    // GET: the head, attempt 2, the order's refunds.
    assert_eq!(tally(&shown.table), ops(&[("GetItem", 2), ("Query", 1)]));
    // The third card: the conditional Put finds the head, attempt 2 read; nothing written.
    assert_eq!(tally(&third.table), ops(&[("GetItem", 1), ("PutItem", 1)]));
    assert_eq!(third.stripe.create, 0);
}

/// Two retries of a declined order at once, with different cards: one attempt, the other
/// refused `attempt_in_flight`, exactly two charge records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_retries_at_once_with_different_cards_make_one_attempt() {
    let s = Stack::spawn().await;
    let id = "ord-1002";
    let resp = post(&s, id, DECLINED).await;
    assert_eq!(resp.status_code, 202, "{}", json_body(&resp));
    assert_eq!(s.deliver().await, 1);
    let head = s.store.get(&OperationKey::charge(order(id))).await.unwrap();
    assert_eq!(head.unwrap().status, OperationStatus::Failed);

    let (a, b) = tokio::join!(
        post(&s, id, "pm_card_visa"),
        post(&s, id, "pm_card_mastercard")
    );
    let mut statuses = [a.status_code, b.status_code];
    statuses.sort();
    assert_eq!(statuses, [202, 409], "{} {}", json_body(&a), json_body(&b));
    let loser = if a.status_code == 409 { &a } else { &b };
    assert_eq!(json_body(loser)["error"]["code"], "attempt_in_flight");
    let attempts = s.store.attempts_of(&order(id)).await.unwrap();
    assert_eq!(attempts.len(), 2, "one attempt");
    assert_eq!(s.item_count().await, 2);
}
