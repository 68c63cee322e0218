//! The real handlers against moto (DynamoDB, SQS FIFO, Secrets Manager) and the Stripe simulator:
//! what a customer sees when checkout runs twice, when a crash falls between the PutItem and the
//! SendMessage, when a batch carries a settled operation or a poison message, and when Stripe
//! refuses a create (review, loudly).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_lambda_events::apigw::ApiGatewayV2httpResponse;
use charge_core::{
    domain::OrderId,
    operation::{OperationKey, OperationStatus},
    time::Clock,
};
use charge_once::adapters::secrets::fetch_stripe_key;
use charge_once::adapters::sqs::SqsQueue;
use charge_once::ports::{OperationQueue, OperationStore, QueueError, QueuedOperation};
use checkout::door::Checkout;
use lambda_runtime::{Context, LambdaEvent};
use testkit::aws::sdk_config;
use testkit::stack::{api_event, json_body, Stack};

async fn post(deps: &Checkout, file: &str) -> ApiGatewayV2httpResponse {
    checkout::handler::handle(deps, LambdaEvent::new(api_event(file), Context::default())).await
}

fn order_1001() -> OperationKey {
    OperationKey::charge(OrderId::parse("ord-1001").unwrap())
}

#[tokio::test]
async fn checkout_twice_makes_one_item_and_one_message() {
    let s = Stack::spawn().await;
    let deps = s.checkout();
    let first = post(&deps, "checkout-valid.json").await;
    assert_eq!(first.status_code, 202, "{:?}", json_body(&first));
    let second = post(&deps, "checkout-duplicate.json").await;
    assert_eq!(second.status_code, 200);
    assert_eq!(
        json_body(&first)["operation_id"],
        json_body(&second)["operation_id"]
    );
    assert_eq!(s.item_count().await, 1);
    assert_eq!(s.depth().await, 1, "FIFO dedup by operation id");
}

#[tokio::test]
async fn mismatch_is_409_and_the_item_is_unchanged() {
    let s = Stack::spawn().await;
    let deps = s.checkout();
    post(&deps, "checkout-valid.json").await;
    let before = s.store.get(&order_1001()).await.unwrap().unwrap();
    let resp = post(&deps, "checkout-mismatch.json").await;
    assert_eq!(resp.status_code, 409);
    assert_eq!(s.store.get(&order_1001()).await.unwrap().unwrap(), before);
    assert_eq!(before.params.amount().minor_units(), 1250);
    assert_eq!(s.depth().await, 1);
}

#[tokio::test]
async fn bad_input_is_400_and_nothing_is_written_or_sent() {
    let s = Stack::spawn().await;
    let deps = s.checkout();
    let resp = post(&deps, "checkout-bad.json").await;
    assert_eq!(resp.status_code, 400);
    assert!(
        json_body(&resp)["error"]["fields"]
            .as_array()
            .unwrap()
            .len()
            >= 2
    );
    assert_eq!(s.item_count().await, 0);
    assert_eq!(s.depth().await, 0);
}

/// A queue whose first send dies, as if the function crashed between PutItem and SendMessage.
struct CrashOnFirstSend {
    inner: Arc<SqsQueue>,
    crashes: AtomicU32,
}

#[async_trait]
impl OperationQueue for CrashOnFirstSend {
    async fn send(&self, charge: &QueuedOperation) -> Result<(), QueueError> {
        if self.crashes.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(QueueError::new("injected: process died before SendMessage"));
        }
        self.inner.send(charge).await
    }
}

#[tokio::test]
async fn a_crash_between_put_and_send_is_recovered_by_the_next_identical_checkout() {
    let s = Stack::spawn().await;
    let crashing = Arc::new(CrashOnFirstSend {
        inner: s.queue(),
        crashes: AtomicU32::new(0),
    });
    let deps = s.checkout_with(crashing.clone());
    let first = post(&deps, "checkout-valid.json").await;
    assert_eq!(first.status_code, 503, "the client is told to retry");
    assert!(first.headers.contains_key("retry-after"));
    assert!(
        !json_body(&first).to_string().contains("injected"),
        "no internals in the answer"
    );
    assert_eq!(
        crashing.crashes.load(Ordering::SeqCst),
        1,
        "the crash happened"
    );
    assert_eq!(s.item_count().await, 1, "the operation was recorded");
    assert_eq!(s.depth().await, 0, "but never queued");

    let retry = post(&deps, "checkout-duplicate.json").await;
    assert_eq!(retry.status_code, 200);
    assert_eq!(json_body(&retry)["status"], "pending");
    assert_eq!(s.depth().await, 1, "re-sent");
    assert_eq!(s.item_count().await, 1);
}

#[tokio::test]
async fn a_message_refused_at_stripe_s_rate_limit_is_back_in_seconds_not_at_the_visibility_timeout()
{
    let s = Stack::spawn().await;
    let deps = s.checkout();
    post(&deps, "checkout-valid.json").await;
    s.side.sim.set_faults(stripe_sim::FaultConfig {
        script: vec![stripe_sim::FaultKind::RateLimit],
        ..stripe_sim::FaultConfig::default()
    });
    let batch = s.receive().await;
    assert_eq!(batch.records.len(), 1);
    let charge = s.charge_function();
    let resp =
        charge::handler::handle(&charge, LambdaEvent::new(batch.clone(), Context::default())).await;
    assert_eq!(resp.batch_item_failures.len(), 1, "the 429 fails the item");
    assert_eq!(
        s.side.sim.injected().get(&stripe_sim::FaultKind::RateLimit),
        Some(&1),
        "the 429 happened"
    );
    // The queue's visibility timeout is 30 s here (1,800 s deployed); the refused message is
    // visible again within its return delay (1–2 s on a first receive).
    let mut again = Vec::new();
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        again = s.receive().await.records;
        if !again.is_empty() {
            break;
        }
    }
    assert_eq!(again.len(), 1, "back within 4 s");
    assert_eq!(again[0].message_id, batch.records[0].message_id);
    let mut redelivered = aws_lambda_events::sqs::SqsEvent::default();
    redelivered.records = again;
    let resp =
        charge::handler::handle(&charge, LambdaEvent::new(redelivered, Context::default())).await;
    assert!(resp.batch_item_failures.is_empty());
    let op = s.store.get(&order_1001()).await.unwrap().unwrap();
    assert_eq!(op.status, OperationStatus::Succeeded);
    assert_eq!(
        s.side.sim.request_counts().create,
        2,
        "one refused, one charged"
    );
}

#[tokio::test]
async fn a_batch_with_a_settled_operation_makes_no_stripe_call() {
    let s = Stack::spawn().await;
    let deps = s.checkout();
    post(&deps, "checkout-valid.json").await;
    let batch = s.receive().await;
    assert_eq!(batch.records.len(), 1);
    let charge = s.charge_function();

    let resp =
        charge::handler::handle(&charge, LambdaEvent::new(batch.clone(), Context::default())).await;
    assert!(resp.batch_item_failures.is_empty());
    let op = s.store.get(&order_1001()).await.unwrap().unwrap();
    assert_eq!(op.status, OperationStatus::Succeeded);
    let after_first = s.side.sim.request_counts();
    assert_eq!(after_first.create, 1);

    // The same batch again (a duplicate delivery): the settled operation costs no Stripe call.
    let resp = charge::handler::handle(&charge, LambdaEvent::new(batch, Context::default())).await;
    assert!(resp.batch_item_failures.is_empty());
    let after_second = s.side.sim.request_counts();
    assert_eq!(
        (
            after_second.create,
            after_second.retrieve,
            after_second.search
        ),
        (after_first.create, after_first.retrieve, after_first.search)
    );
    assert_eq!(s.side.sim.ledger().len(), 1);
}

#[tokio::test]
async fn a_poison_message_is_parked_with_its_reason_and_its_group_goes_on_in_the_same_batch() {
    let s = Stack::spawn().await;
    let queue = s.queue();
    let deps = s.checkout_with(queue.clone());
    // Three orders through checkout: ord-a, ord-b, ord-c.
    let mut ops = Vec::new();
    for order in ["ord-a", "ord-b", "ord-c"] {
        let mut req = api_event("checkout-valid.json");
        req.path_parameters.insert("order_id".into(), order.into());
        let resp =
            checkout::handler::handle(&deps, LambdaEvent::new(req, Context::default())).await;
        assert_eq!(resp.status_code, 202);
        ops.push(
            json_body(&resp)["operation_id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    // A malformed message lands in ord-b's group, then ord-b's message again after it: the group
    // reads [ord-b charge, malformed, ord-b again].
    s.sqs
        .send_message()
        .queue_url(&s.queue_url)
        .message_body("{\"v\":1,\"operation_id\":\"not-a-uuid\"")
        .message_group_id("ord-b")
        .message_deduplication_id("malformed-1")
        .send()
        .await
        .unwrap();
    let ord_b = s
        .store
        .get(&OperationKey::charge(OrderId::parse("ord-b").unwrap()))
        .await
        .unwrap()
        .unwrap();
    queue
        .send(&QueuedOperation::redrive(&ord_b, 1))
        .await
        .unwrap();

    let batch = s.receive().await;
    assert_eq!(batch.records.len(), 5, "moto returned the whole batch");
    let malformed_id = batch
        .records
        .iter()
        .find(|r| r.body.as_deref().is_some_and(|b| b.contains("not-a-uuid")))
        .and_then(|r| r.message_id.clone())
        .unwrap();

    let resp = charge::handler::handle(
        &s.charge_function(),
        LambdaEvent::new(batch, Context::default()),
    )
    .await;
    assert!(
        resp.batch_item_failures.is_empty(),
        "poison acknowledged, nothing held back: {:?}",
        resp.batch_item_failures
    );
    // Every order was charged exactly once, ord-b's second message (after the poison) in this
    // same batch: it found ord-b settled and called nobody.
    let ledger = s.side.sim.ledger();
    assert_eq!(ledger.len(), 3);
    for op in &ops {
        assert_eq!(
            ledger
                .iter()
                .filter(|e| e.operation_id.as_deref() == Some(op.as_str()))
                .count(),
            1
        );
    }
    // The poison message is on the DLQ with its reason, counted once.
    let parked = s.parked().await;
    assert_eq!(parked.len(), 1);
    let attrs = parked[0].message_attributes().unwrap();
    let attr = |k: &str| attrs.get(k).and_then(|v| v.string_value()).unwrap_or("");
    assert_eq!(attr("reason"), "unparseable");
    assert_eq!(attr("source_message_id"), malformed_id);
    assert_eq!(attr("source_group_id"), "ord-b");
    assert!(parked[0].body().unwrap().contains("not-a-uuid"));
    assert_eq!(
        s.metrics.sum("PoisonMessages", &[("Function", "charge")]),
        1.0
    );
}

#[tokio::test]
async fn a_create_stripe_refuses_goes_to_review_with_a_sent_to_review_metric() {
    let s = Stack::spawn().await;
    let deps = s.checkout();
    let mut req = api_event("checkout-valid.json");
    // A payment method Stripe does not know: 400 resource_missing, our data is wrong.
    req.body = Some(
        r#"{"amount": 1250, "currency": "usd", "customer_id": "cus_Q8xYz12AbC", "payment_method": "pm_not_attached"}"#
            .into(),
    );
    let resp = checkout::handler::handle(&deps, LambdaEvent::new(req, Context::default())).await;
    assert_eq!(resp.status_code, 202);
    let batch = s.receive().await;
    let resp = charge::handler::handle(
        &s.charge_function(),
        LambdaEvent::new(batch, Context::default()),
    )
    .await;
    assert!(resp.batch_item_failures.is_empty());
    let op = s.store.get(&order_1001()).await.unwrap().unwrap();
    assert!(op.review.is_some(), "in review: {op:?}");
    assert!(!op.status.is_settled(), "never rounded to failed");
    // The EMF line, parsed back: SentToReview under Function=charge, by reason class.
    let lines: Vec<serde_json::Value> = s
        .metrics
        .lines()
        .iter()
        .filter_map(|l| charge_once::telemetry::parse_emf(l))
        .filter(|v| v.get("SentToReview").is_some())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["Function"], "charge");
    assert_eq!(lines[0]["ReasonClass"], "rejected");
    assert_eq!(lines[0]["SentToReview"], 1.0);
    assert_eq!(
        lines[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        "ChargeOnce"
    );
}

#[tokio::test]
async fn the_stripe_key_comes_from_secrets_manager_and_never_leaks() {
    let config = sdk_config().await;
    let client = aws_sdk_secretsmanager::Client::new(&config);
    let name = testkit::aws::unique("stripe");
    let arn = client
        .create_secret()
        .name(&name)
        .secret_string("sk_test_fromSecretsManager42")
        .send()
        .await
        .unwrap()
        .arn()
        .unwrap()
        .to_owned();
    let key = fetch_stripe_key(&client, &arn).await.unwrap();
    assert!(!format!("{key:?}").contains("fromSecretsManager42"));

    let bad = client
        .create_secret()
        .name(format!("{name}-bad"))
        .secret_string("pk_live_publishableKey99")
        .send()
        .await
        .unwrap()
        .arn()
        .unwrap()
        .to_owned();
    let err = fetch_stripe_key(&client, &bad).await.unwrap_err();
    assert!(!err.to_string().contains("publishableKey99"));

    let missing = format!("{arn}-missing");
    let err = fetch_stripe_key(&client, &missing).await.unwrap_err();
    assert!(err.to_string().contains("cannot read secret"));
}

/// The poison messages parked on the stack's DLQ, as `(reason, detail)`.
async fn parked_reasons(s: &Stack) -> Vec<(String, String)> {
    s.parked()
        .await
        .iter()
        .map(|m| {
            let attrs = m.message_attributes().cloned().unwrap_or_default();
            let attr = |k: &str| {
                attrs
                    .get(k)
                    .and_then(|v| v.string_value())
                    .unwrap_or("")
                    .to_owned()
            };
            (attr("reason"), attr("detail"))
        })
        .collect()
}

/// A message naming an order no checkout created (an operator's typo in a hand-sent message):
/// parked as `no_such_operation` on its first receive, with no read. DynamoDB returns the item
/// with every refusal of an existing record (ALL_OLD; moto too), so a refused claim without one
/// is "no record": the charge role has no GetItem, and a read here was refused on AWS and sent
/// the message round five receives of 30 minutes as "store unavailable".
#[tokio::test]
async fn a_message_for_a_record_that_does_not_exist_is_poison_at_its_first_receive_without_a_read()
{
    let s = Stack::spawn().await;
    let queue = s.queue();
    let ghost = testkit::store_contract::operation("ord-typo", 1500, s.clock().now());
    queue.send(&QueuedOperation::first(&ghost)).await.unwrap();
    // The twin, in the same batch: an order that exists is charged.
    let real = testkit::store_contract::operation("ord-real", 1500, s.clock().now());
    s.store.create_if_absent(&real).await.unwrap();
    queue.send(&QueuedOperation::first(&real)).await.unwrap();

    let batch = s.receive().await;
    assert_eq!(batch.records.len(), 2);
    for r in &batch.records {
        assert_eq!(r.attributes["ApproximateReceiveCount"], "1");
    }
    let reads = s.store.calls().reads.load(Ordering::Relaxed);
    let failed = s.run_charge(&s.charge_function(), batch).await;
    assert_eq!(failed, Vec::<String>::new(), "nothing back to the queue");
    assert_eq!(
        s.store.calls().reads.load(Ordering::Relaxed) - reads,
        0,
        "no GetItem: a refusal without the item is no record"
    );
    let parked = parked_reasons(&s).await;
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!(parked[0].0, "no_such_operation");
    assert!(parked[0].1.contains("ord-typo"), "{}", parked[0].1);
    assert_eq!(
        s.metrics.sum("PoisonMessages", &[("Function", "charge")]),
        1.0
    );
    assert_eq!(s.current(&real).await.status, OperationStatus::Succeeded);
    assert_eq!(s.ledger_for(&real), 1);
    assert_eq!(s.ledger_for(&ghost), 0);
    assert_eq!(s.depth().await, 0);
}

/// A claim on a record this release cannot read (an amount written as a string by hand): the
/// claim's ALL_NEW cannot be parsed, and the message is parked as `unreadable_record` with the key
/// and the parse error on its first receive, counted, with no Stripe call; its group goes on.
/// Before, it was "store unavailable" five times at the visibility timeout. The operation stays in
/// the unknown index: repaired, the reconciler drives it to its one charge.
#[tokio::test]
async fn a_message_for_a_record_this_release_cannot_read_is_poison_at_its_first_receive() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let s = Stack::spawn().await;
    let queue = s.queue();
    let bad = testkit::store_contract::operation("ord-corrupt", 1500, s.clock().now());
    let good = testkit::store_contract::operation("ord-fine", 1500, s.clock().now());
    for op in [&bad, &good] {
        s.store.create_if_absent(op).await.unwrap();
        queue.send(&QueuedOperation::first(op)).await.unwrap();
    }
    let set_amount = |value: AttributeValue| {
        s.dynamo
            .update_item()
            .table_name(s.store.table())
            .key("pk", AttributeValue::S("ORDER#ord-corrupt".into()))
            .key("sk", AttributeValue::S("charge".into()))
            .update_expression("SET amount = :a")
            .expression_attribute_values(":a", value)
            .send()
    };
    set_amount(AttributeValue::S("15.00".into())).await.unwrap();
    let err = s.store.get(&bad.key()).await.unwrap_err();
    assert_eq!(
        err.unreadable.as_deref(),
        Some("ORDER#ord-corrupt/charge"),
        "unreadable: {err}"
    );

    let batch = s.receive().await;
    assert_eq!(batch.records.len(), 2);
    assert!(batch
        .records
        .iter()
        .all(|r| r.attributes["ApproximateReceiveCount"] == "1"));
    let failed = s.run_charge(&s.charge_function(), batch).await;
    assert_eq!(failed, Vec::<String>::new(), "acknowledged, not retried");
    let parked = parked_reasons(&s).await;
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!(parked[0].0, "unreadable_record");
    for needle in ["ORDER#ord-corrupt/charge", "amount"] {
        assert!(parked[0].1.contains(needle), "{needle} in {}", parked[0].1);
    }
    assert_eq!(
        s.metrics.sum("PoisonMessages", &[("Function", "charge")]),
        1.0,
        "counted once"
    );
    assert_eq!(s.ledger_for(&bad), 0, "no Stripe call for it");
    assert_eq!(s.current(&good).await.status, OperationStatus::Succeeded);
    assert_eq!(s.depth().await, 0);

    // Repaired, it is still unsettled work in the index: the next tick past the grace period
    // re-drives it, and it is charged once.
    set_amount(AttributeValue::N("1500".into())).await.unwrap();
    assert_eq!(s.current(&bad).await.status, OperationStatus::Pending);
    s.side.clock.advance(Duration::from_secs(301));
    let report = s.tick().await.unwrap();
    assert_eq!(report.unreadable, 0);
    assert_eq!(report.redriven + report.reenqueued, 1, "{report:?}");
    while s.deliver().await > 0 {}
    assert_eq!(s.current(&bad).await.status, OperationStatus::Succeeded);
    assert_eq!(s.ledger_for(&bad), 1);
}
