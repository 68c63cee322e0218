//! The webhook inbox on DynamoDB beyond its contract (`dynamodb_inbox_contract.rs` runs the
//! shared suite): the TTL attribute and its unit. And the whole webhook path on real components:
//! the DynamoDB store and inbox on moto, Stripe's retrieve over HTTP to stripe-sim, a delivery
//! signed as Stripe signs it.

use charge_core::charge::event_plan::Ignored;
use charge_core::{
    operation::{Operation, OperationStatus},
    time::{Clock, Timestamp},
};
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::inbox::TTL_ATTRIBUTE;
use charge_once::events::signature::sign_header;
use charge_once::events::{receive, EventsDeps, Reception, DEFAULT_TOLERANCE};
use charge_once::ports::{Admitted, EventInbox, OperationStore, PaymentGateway, INBOX_TTL};
use charge_once::testing::{self, CreateIn as _};
use testkit::aws::fresh_inbox;
use testkit::stack::Stack;

#[tokio::test]
async fn the_ttl_attribute_is_in_seconds_and_the_table_expires_on_it() {
    let inbox = fresh_inbox().await;
    let now = Timestamp::from_millis(1_800_000_000_999);
    assert_eq!(
        inbox
            .admit("evt_1", now, now.plus(INBOX_TTL))
            .await
            .unwrap(),
        Admitted::New
    );
    let client = aws_sdk_dynamodb::Client::new(&testkit::aws::sdk_config().await);
    let item = client
        .get_item()
        .table_name(inbox.table_name())
        .key(
            "event_id",
            aws_sdk_dynamodb::types::AttributeValue::S("evt_1".into()),
        )
        .send()
        .await
        .unwrap();
    let number = |name: &str| {
        item.item().unwrap()[name]
            .as_n()
            .unwrap()
            .parse::<i64>()
            .unwrap()
    };
    // DynamoDB's TTL reads seconds since the epoch (milliseconds would be 50,000 years away):
    // 30 days on, the fraction of a second dropped.
    assert_eq!(number(TTL_ATTRIBUTE), 1_800_000_000 + 30 * 24 * 3600);
    assert_eq!(number("received_at"), 1_800_000_000_999, "milliseconds");
    let desc = client
        .describe_time_to_live()
        .table_name(inbox.table_name())
        .send()
        .await
        .unwrap();
    assert_eq!(
        desc.time_to_live_description()
            .and_then(|d| d.attribute_name()),
        Some(TTL_ATTRIBUTE)
    );
}

/// An operation whose charge went `unknown` (the answer was lost).
async fn unknown_op(store: &DynamoStore, order: &str, now: Timestamp) -> Operation {
    let op = charge_core::testing::order(order)
        .requested_by("webhook-tests")
        .at(now)
        .create_in(store)
        .await;
    testing::settle_as(store, &op, OperationStatus::Unknown, None, now).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_event_settles_on_real_components_once() {
    let s = Stack::spawn().await;
    let (stripe, store) = (&s.side, &s.store);
    let now = s.clock().now();
    let op = unknown_op(store, "order-webhook-aws", now).await;
    // The charge did happen at Stripe (its answer was lost): the PaymentIntent succeeded.
    let pi = stripe
        .gateway()
        .create(
            &charge_once::ports::CreatePaymentIntent::for_operation(&op)
                .expect("a charge operation"),
        )
        .await
        .unwrap();
    let creates_before = stripe.sim.request_counts().create;

    let secret = testing::webhook_secret("webhook_inbox_on_aws");
    let deps = EventsDeps {
        charge: s.charge_deps(),
        inbox: s.inbox.clone(),
        secrets: Some(vec![secret.clone()]),
        tolerance: DEFAULT_TOLERANCE,
        event_source: None,
    };
    // A late `processing` event: the webhook must read the PaymentIntent before acting.
    let body = serde_json::json!({
        "id": "evt_aws_1",
        "object": "event",
        "type": "payment_intent.processing",
        "data": {"object": {
            "id": pi.id,
            "object": "payment_intent",
            "status": "processing",
            "metadata": {"order_id": op.order_id.as_str(), "operation_id": op.operation_id.to_string()},
        }},
    })
    .to_string();
    let header = sign_header(&secret, now.as_millis() / 1000, body.as_bytes());
    let report = receive(&deps, Some(&header), body.as_bytes(), None).await;
    assert_eq!(
        report.reception,
        Reception::Applied {
            status: OperationStatus::Succeeded,
            review: None
        }
    );
    assert_eq!(report.gateway_calls, 1);
    let settled = store.get(&op.key()).await.unwrap().unwrap();
    assert_eq!(settled.status, OperationStatus::Succeeded);
    assert_eq!(settled.external_id.as_deref(), Some(pi.id.as_str()));

    // Stripe delivers it again: a duplicate, nothing changes, no Stripe call.
    let report = receive(&deps, Some(&header), body.as_bytes(), None).await;
    assert_eq!(report.reception, Reception::Ignored(Ignored::Duplicate));
    assert_eq!(report.gateway_calls, 0);
    assert_eq!(store.get(&op.key()).await.unwrap().unwrap(), settled);
    let counts = stripe.sim.request_counts();
    assert_eq!(counts.create, creates_before, "the webhook never creates");
    assert_eq!(counts.retrieve, 1);
}
