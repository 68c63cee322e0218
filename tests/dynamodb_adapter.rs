//! What only the DynamoDB adapter can show: the conflict answer comes back without another read
//! (ALL_OLD), and the sharded index pages in global due order without scanning settled items.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use charge_once::ports::{Created, IndexQuery, OperationStore, OutcomeRecord};
use charge_once::testing;
use charge_once::OperationStatus;
use testkit::store_contract::{operation, T0};

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
                external_id: Some(charge_once::PaymentIntentId::parse("pi_x").unwrap()),
                last_error: None,
                ..testing::outcome(&op, token, OperationStatus::Succeeded, T0)
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
