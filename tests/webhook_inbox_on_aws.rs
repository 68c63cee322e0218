//! The webhook inbox on DynamoDB (moto, real AWS protocol) and the whole webhook path on real
//! components: the DynamoDB store and inbox on moto, Stripe's retrieve over HTTP to stripe-sim,
//! a delivery signed as Stripe signs it.

use std::sync::Arc;
use std::time::Duration;

use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::inbox::{DynamoInbox, TTL_ATTRIBUTE};
use charge_once::executor::{ChargeDeps, ChargePolicy};
use charge_once::ports::{OperationStore, PaymentGateway};
use charge_once::testing;
use charge_once::webhook::signature::sign_header;
use charge_once::webhook::{
    receive, Admitted, Ignored, Reception, WebhookDeps, WebhookInbox, DEFAULT_TOLERANCE, INBOX_TTL,
};
use charge_once::{Clock, Operation, OperationStatus, Timestamp};
use testkit::aws::{fresh_store, sdk_config, unique};
use testkit::stripe::StripeSide;

async fn fresh_inbox() -> DynamoInbox {
    let config = sdk_config().await;
    let inbox = DynamoInbox::new(aws_sdk_dynamodb::Client::new(&config), unique("inbox"));
    inbox
        .create_table()
        .await
        .expect("create the inbox table on moto");
    inbox
}

#[tokio::test]
async fn admit_is_conditional_expires_and_can_be_forgotten() {
    let inbox = fresh_inbox().await;
    let now = Timestamp::from_millis(1_800_000_000_000);
    let expires = now.plus(INBOX_TTL);
    assert_eq!(
        inbox.admit("evt_1", now, expires).await.unwrap(),
        Admitted::New
    );
    assert_eq!(
        inbox
            .admit("evt_1", now.plus(Duration::from_secs(5)), expires)
            .await
            .unwrap(),
        Admitted::Duplicate
    );
    assert_eq!(
        inbox.admit("evt_2", now, expires).await.unwrap(),
        Admitted::New
    );

    // The TTL attribute is in seconds, 30 days on.
    let config = sdk_config().await;
    let client = aws_sdk_dynamodb::Client::new(&config);
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
    let ttl = item.item().unwrap()[TTL_ATTRIBUTE]
        .as_n()
        .unwrap()
        .parse::<i64>()
        .unwrap();
    assert_eq!(ttl, 1_800_000_000 + 30 * 24 * 3600);
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

    // Forgotten: the next delivery is processed again.
    inbox.forget("evt_1").await.unwrap();
    assert_eq!(
        inbox.admit("evt_1", now, expires).await.unwrap(),
        Admitted::New
    );
    // Expired but not yet deleted by DynamoDB: admitted again.
    let later = expires.plus(Duration::from_secs(1));
    assert_eq!(
        inbox
            .admit("evt_2", later, later.plus(INBOX_TTL))
            .await
            .unwrap(),
        Admitted::New
    );
}

/// An operation whose charge went `unknown` (the answer was lost).
async fn unknown_op(store: &DynamoStore, order: &str, now: Timestamp) -> Operation {
    let op = testing::order(order)
        .requested_by("webhook-tests")
        .at(now)
        .create_in(store)
        .await;
    testing::settle_as(store, &op, OperationStatus::Unknown, None, now).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_event_settles_on_real_components_once() {
    let stripe = StripeSide::with_new_clock().await;
    let store = Arc::new(fresh_store().await);
    let inbox = Arc::new(fresh_inbox().await);
    let now = stripe.clock.now();
    let op = unknown_op(&store, "order-webhook-aws", now).await;
    // The charge did happen at Stripe (its answer was lost): the PaymentIntent succeeded.
    let gateway = Arc::new(stripe.gateway());
    let pi = gateway
        .create(&charge_once::ports::CreatePaymentIntent::for_operation(&op))
        .await
        .unwrap();
    let creates_before = stripe.sim.request_counts().create;

    let secret = testing::webhook_secret("webhook_inbox_on_aws");
    let deps = WebhookDeps {
        charge: ChargeDeps {
            store: store.clone(),
            gateway,
            clock: Arc::new(stripe.clock.clone()),
            policy: ChargePolicy::default(),
        },
        inbox: inbox.clone(),
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
