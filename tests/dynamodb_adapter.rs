//! What only the DynamoDB adapter can show: the conflict answer comes back without another read
//! (ALL_OLD), and the sharded index pages in global due order without scanning settled items.

use charge_core::operation::OperationStatus;
use charge_core::testing::T0;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use charge_core::{
    store::{Created, OutcomeRecord},
    store_rules::ChargeClaim,
};
use charge_once::ports::{IndexQuery, OperationStore};
use charge_once::testing;
use testkit::store_contract::operation;

#[tokio::test]
async fn conflict_returns_the_winner_without_a_read() {
    let store = testkit::aws::fresh_store().await;
    let first = operation("dyn-conflict", 1000, T0);
    store.create_if_absent(&first).await.unwrap();
    let second = operation("dyn-conflict", 1000, T0);
    let reads_before = store.calls().reads.load(Ordering::Relaxed);
    match store.create_if_absent(&second).await.unwrap() {
        Created::Existing(op) => assert_eq!(op.operation_id, first.operation_id),
        other => panic!("expected Existing, got {other:?}"),
    }
    assert_eq!(
        store.calls().reads.load(Ordering::Relaxed),
        reads_before,
        "ALL_OLD, no GetItem"
    );
}

#[tokio::test]
async fn sharded_index_pages_in_due_order_and_skips_settled() {
    let store = testkit::aws::fresh_store().await;
    let mut want = Vec::new();
    for i in 0..30u64 {
        let op = operation(
            &format!("dyn-page-{i:02}"),
            1000,
            T0.plus(Duration::from_secs(i)),
        );
        store.create_if_absent(&op).await.unwrap();
        // Every third one settles and must leave the index.
        if i % 3 == 0 {
            let (token, _) = testing::claim(&store, &op, T0).await;
            let settled = OutcomeRecord {
                external_id: Some(charge_core::domain::PaymentIntentId::parse("pi_x").unwrap()),
                last_error: None,
                ..charge_core::testing::outcome(&op, token, OperationStatus::Succeeded, T0)
            };
            store.record(&settled).await.unwrap();
        } else {
            want.push(op.order_id.to_string());
        }
    }
    let now = T0.plus(Duration::from_secs(3600));
    let mut got = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .query_index(IndexQuery::DueBy(now), cursor, 7)
            .await
            .unwrap();
        got.extend(page.operations.iter().map(|o| o.order_id.to_string()));
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(
        got, want,
        "global oldest-due-first, nothing skipped or repeated"
    );
    assert_eq!(got.iter().collect::<HashSet<_>>().len(), got.len());
}

/// A wrong table or queue name: DynamoDB and SQS answer only "resource not found" (moto, like
/// AWS: `ResourceNotFoundException: Requested resource not found`); the adapters' errors say which
/// table or queue, so a wrong `TABLE_NAME` or `QUEUE_URL` is found from the message alone.
#[tokio::test]
async fn a_wrong_table_or_queue_is_named_in_the_error() {
    use charge_once::adapters::dynamodb::DynamoStore;
    use charge_once::adapters::inbox::DynamoInbox;
    use charge_once::adapters::sqs::SqsQueue;
    use charge_once::ports::{EventInbox, OperationQueue, QueuedOperation};
    use charge_once::telemetry::ErrorChain;

    let config = testkit::aws::sdk_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let missing = testkit::aws::unique("no-such-table");
    let store = DynamoStore::new(dynamodb.clone(), &missing);
    let op = operation("dyn-missing-table", 1000, T0);
    let get = store.get(&op.key()).await.unwrap_err();
    let put = store.create_if_absent(&op).await.unwrap_err();
    for err in [get, put] {
        let text = ErrorChain(&err).to_string();
        assert!(text.contains(&format!("on table {missing}")), "{text}");
        assert!(text.contains("ResourceNotFoundException"), "{text}");
    }
    let inbox = DynamoInbox::new(dynamodb, &missing);
    let err = inbox.admit("evt_1", T0, T0).await.unwrap_err();
    let text = ErrorChain(&err).to_string();
    assert!(
        text.contains(&format!("on inbox table {missing}")),
        "{text}"
    );

    // The twin: the same calls on a table that exists answer.
    let there = testkit::aws::fresh_store().await;
    assert_eq!(there.get(&op.key()).await.unwrap(), None);

    let sqs = aws_sdk_sqs::Client::new(&config);
    let existing = testkit::aws::fresh_fifo_queue(&sqs).await;
    let wrong = format!("{}-gone.fifo", existing.trim_end_matches(".fifo"));
    let err = SqsQueue::new(sqs.clone(), &wrong)
        .send(&QueuedOperation::first(&op))
        .await
        .unwrap_err();
    let text = ErrorChain(&err).to_string();
    assert!(text.contains(&format!("on queue {wrong}")), "{text}");
    SqsQueue::new(sqs, &existing)
        .send(&QueuedOperation::first(&op))
        .await
        .expect("the queue that exists takes it");
}

/// One refund record this release cannot read (a hand edit removed its amount) is left out of
/// the order's refunds, not allowed to hide the others or fail the list; its twin: readable, it
/// is listed.
#[tokio::test]
async fn an_unreadable_refund_is_left_out_of_the_order_s_refunds() {
    use std::sync::Arc;

    use aws_sdk_dynamodb::types::AttributeValue;
    use testkit::store_contract::{refund_of, succeeded_charge};

    let dynamo = testkit::aws::fresh_store().await;
    let table = dynamo.table().to_owned();
    let store: Arc<dyn OperationStore> = Arc::new(dynamo);
    let charge = succeeded_charge(&store, "dyn-refunds-unreadable", 1000).await;
    for id in ["r-a", "r-b"] {
        let current = store.get(&charge.key()).await.unwrap().unwrap();
        let (refund, reserve) = refund_of(&current, id, Some(100)).unwrap();
        store
            .create_beside(&refund, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap();
    }
    let listed = |ops: Vec<charge_core::operation::Operation>| -> Vec<String> {
        ops.iter().map(|op| op.kind.sort_key()).collect()
    };
    let refunds = store.refunds_of(&charge.order_id).await.unwrap();
    assert_eq!(listed(refunds), ["refund#r-a", "refund#r-b"]);
    let client = aws_sdk_dynamodb::Client::new(&testkit::aws::sdk_config().await);
    client
        .update_item()
        .table_name(&table)
        .key(
            "pk",
            AttributeValue::S(format!("ORDER#{}", charge.order_id)),
        )
        .key("sk", AttributeValue::S("refund#r-a".into()))
        .update_expression("REMOVE amount")
        .send()
        .await
        .unwrap();
    let refunds = store.refunds_of(&charge.order_id).await.unwrap();
    assert_eq!(
        listed(refunds),
        ["refund#r-b"],
        "the unreadable one left out"
    );
}
