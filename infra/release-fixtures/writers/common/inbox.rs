//! `inbox.json`: the webhook inbox's cases, written by the release's `DynamoInbox` (`admit` and
//! `forget`, from 2026-11-30 on) into a table of its own, then a `Scan` of it. The adapter names
//! where the release keeps `Admitted`, `EventInbox` and `INBOX_TTL`.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use charge_once::adapters::inbox::DynamoInbox;
use charge_core::time::Timestamp;
use serde_json::{json, Value};
use testkit::aws::unique;

use super::{Admitted, EventInbox, INBOX_TTL};
use crate::{item_json, scan, World, T0};

/// Inbox cases, in order, with their event ids.
const INBOX_CASES: &[(&str, &str)] = &[
    ("admitted_finished", "evt_FxAdmittedFinished"),
    ("admitted_unfinished", "evt_FxAdmittedUnfinished"),
    ("duplicate_refused", "evt_FxDuplicate"),
    ("readmitted_after_expiry", "evt_FxReadmitted"),
];

async fn admit(inbox: &DynamoInbox, id: &str, at: Timestamp) -> Admitted {
    inbox.admit(id, at, at.plus(INBOX_TTL)).await.unwrap()
}

/// Drives the inbox cases, then reads the table back: one entry per case, in case order.
pub async fn entries(w: &World) -> Vec<Value> {
    let inbox = DynamoInbox::new(w.dynamo.clone(), unique("webhook-inbox"));
    inbox.create_table().await.unwrap();
    let inbox_time = |i: usize| Timestamp::from_millis(T0 + 40 * 3600 * 1000 + i as i64 * 60_000);
    // admitted_finished: admitted, then acted on; the release writes nothing more on the entry.
    assert_eq!(
        admit(&inbox, "evt_FxAdmittedFinished", inbox_time(0)).await,
        Admitted::New
    );
    // admitted_unfinished: admitted, the invocation ended before acting or forgetting.
    assert_eq!(
        admit(&inbox, "evt_FxAdmittedUnfinished", inbox_time(1)).await,
        Admitted::New
    );
    // duplicate_refused: admitted, then a redelivery 5 s later is a duplicate (entry unchanged).
    let at = inbox_time(2);
    assert_eq!(admit(&inbox, "evt_FxDuplicate", at).await, Admitted::New);
    let again = at.plus(Duration::from_secs(5));
    assert_eq!(
        admit(&inbox, "evt_FxDuplicate", again).await,
        Admitted::Duplicate
    );
    // readmitted_after_expiry: an entry 31 days old whose TTL passed (DynamoDB had not deleted it
    // yet) is admitted again and overwritten.
    let at = inbox_time(3);
    let old = at.minus(Duration::from_secs(31 * 24 * 3600));
    assert_eq!(admit(&inbox, "evt_FxReadmitted", old).await, Admitted::New);
    assert_eq!(admit(&inbox, "evt_FxReadmitted", at).await, Admitted::New);
    // (forgotten: admitted, acting failed, forget deleted it: no item, so not in inbox.json.)
    assert_eq!(admit(&inbox, "evt_FxForgotten", at).await, Admitted::New);
    inbox.forget("evt_FxForgotten").await.unwrap();

    let mut entries: Vec<(usize, Value)> = scan(&w.dynamo, inbox.table_name())
        .await
        .iter()
        .map(|item| {
            let id = match item.get("event_id") {
                Some(AttributeValue::S(s)) => s.clone(),
                other => panic!("inbox item without event_id: {other:?}"),
            };
            let i = INBOX_CASES
                .iter()
                .position(|(_, event)| *event == id)
                .unwrap_or_else(|| panic!("unexpected inbox entry {id}"));
            (
                i,
                json!({ "case": INBOX_CASES[i].0, "item": item_json(item) }),
            )
        })
        .collect();
    assert_eq!(entries.len(), INBOX_CASES.len());
    entries.sort_by_key(|(i, _)| *i);
    entries.into_iter().map(|(_, v)| v).collect()
}
