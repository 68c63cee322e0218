//! Requests per operation, counted on the wire: an interceptor on the DynamoDB and SQS
//! clients counts every attempt by its `X-Amz-Target`, and the embedded stripe-sim counts what it
//! receives. The real handlers run against moto. A regression in any count fails here; the
//! published figures (`BENCHMARKS.md`, `make bench`) come from the same scenario code, compiled in
//! from `infra/bench/src/wire/`.
//!
//! What each scenario counts is in that module's docs; each assertion below derives its numbers.

#[allow(dead_code)]
#[path = "../infra/bench/src/wire/mod.rs"]
pub(crate) mod wire;

use std::collections::BTreeMap;

use wire::scenarios::{Counts, Ours, Scenario};

fn ops(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

fn stripe(c: &Counts) -> (u64, u64, u64) {
    (c.stripe.create, c.stripe.retrieve, c.stripe.search)
}

#[tokio::test]
async fn happy_path_is_three_writes_no_read_one_send_one_stripe_call() {
    let c = Ours::run(Scenario::HappyPath).await;
    // Checkout: conditional PutItem (create). Charge: UpdateItem (claim, lease + first_attempted_at),
    // POST /v1/payment_intents, UpdateItem (record, fenced). Checkout's one SendMessage.
    // The same on the wire whatever the index projects; what changed is off the wire: of these 3
    // writes only the put and the settling record write the unknown index (the claim changes
    // nothing it projects), and no by-operation-id index exists: 5 write units, not 7
    // (BENCHMARKS.md §5).
    assert_eq!(
        c.dynamodb.requests,
        ops(&[("PutItem", 1), ("UpdateItem", 2)])
    );
    assert_eq!((c.dynamodb_writes(), c.dynamodb_reads()), (3, 0));
    assert_eq!(c.sqs.requests, ops(&[("SendMessage", 1)]));
    assert_eq!(stripe(&c), (1, 0, 0));
}

#[tokio::test]
async fn a_settled_duplicate_costs_one_dynamodb_call_and_no_stripe_call() {
    let c = Ours::run(Scenario::SettledDuplicate).await;
    // The claim's condition fails on a settled status and ALL_OLD returns the record: one
    // (billed) UpdateItem, nothing else.
    assert_eq!(c.dynamodb.requests, ops(&[("UpdateItem", 1)]));
    assert_eq!(c.dynamodb.total(), 1);
    assert_eq!(c.sqs.total(), 0);
    assert_eq!(c.stripe.total(), 0);
}

#[tokio::test]
async fn a_lost_response_retried_in_call_costs_one_more_stripe_request_only() {
    let c = Ours::run(Scenario::LostResponseInCallRetry).await;
    // As the happy path, but the create's response is dropped after Stripe committed and the
    // client's one in-call retry (same key) gets the replay: 2 POSTs, still 1 PaymentIntent
    // (checked by the scenario against the simulator's ledger). DynamoDB is unchanged: 3 writes.
    assert_eq!(
        c.dynamodb.requests,
        ops(&[("PutItem", 1), ("UpdateItem", 2)])
    );
    assert_eq!(c.sqs.requests, ops(&[("SendMessage", 1)]));
    assert_eq!(stripe(&c), (2, 0, 0));
}

#[tokio::test]
async fn a_lost_response_recorded_unknown_is_retried_by_a_redrive() {
    let c = Ours::run(Scenario::LostResponseRetriedLater).await;
    // Checkout: PutItem + SendMessage. Delivery 1: claim + create (response lost, no in-call
    // retry) + record `unknown` = 2 UpdateItem, 1 POST. Tick after the 60 s backoff: one Query per
    // index shard (8) + one of the REVIEW partition (InReview) + one BatchGetItem reading the due
    // operation's record (the index projects keys and operation_id only; the REVIEW
    // partition is empty, so no read for it) + the guarded reschedule (1 UpdateItem) + the
    // re-drive SendMessage + the open disputes' count: one Query per shard (8) of the index
    // entries due within a day, and no BatchGetItem: the one listed (the re-driven operation,
    // due again in minutes) is not a dispute, told by its sort key in the entry.
    // Delivery 2: claim + create (replayed by the key) + record `succeeded` = 2 UpdateItem, 1 POST.
    assert_eq!(
        c.dynamodb.requests,
        ops(&[
            ("BatchGetItem", 1),
            ("PutItem", 1),
            ("Query", 17),
            ("UpdateItem", 5)
        ])
    );
    assert_eq!(c.sqs.requests, ops(&[("SendMessage", 2)]));
    assert_eq!(stripe(&c), (2, 0, 0));
}

#[tokio::test]
async fn reconciliation_past_the_window_searches_and_never_creates() {
    let c = Ours::run(Scenario::ReconcilePastWindow).await;
    // One tick 23 h 11 min after the first attempt (a replayed 500 kept it unknown): 8 Queries
    // (one per index shard) + 1 of the REVIEW partition, 1 BatchGetItem for the due record (the
    // index carries no record), claim (UpdateItem), search by operation id (GET),
    // record (UpdateItem); then the open disputes' count: one Query per shard (8) of what is due
    // within a day (nothing: the settled record left the index). No create, no SendMessage.
    assert_eq!(
        c.dynamodb.requests,
        ops(&[("BatchGetItem", 1), ("Query", 17), ("UpdateItem", 2)])
    );
    assert_eq!(c.sqs.total(), 0);
    assert_eq!(stripe(&c), (0, 0, 1));
}

#[tokio::test]
async fn a_refund_is_one_read_one_transaction_two_updates_one_send_one_stripe_call() {
    let c = Ours::refund().await;
    // The door: GetItem (the charge as it is), TransactWriteItems (the refund's conditional Put and
    // the charge's guarded reservation), SendMessage. The charge function: UpdateItem (claim),
    // POST /v1/refunds, UpdateItem (record, fenced).
    assert_eq!(
        c.dynamodb.requests,
        ops(&[("GetItem", 1), ("TransactWriteItems", 1), ("UpdateItem", 2)])
    );
    assert_eq!((c.dynamodb_writes(), c.dynamodb_reads()), (3, 1));
    assert_eq!(c.sqs.requests, ops(&[("SendMessage", 1)]));
    assert_eq!((c.stripe.refund, c.stripe.total()), (1, 1));
}

#[tokio::test]
async fn an_authorization_costs_a_charge_and_its_capture_two_reads_two_transactions_one_call() {
    let (authorized, captured) = Ours::authorize_and_capture().await;
    // Authorized: the charge's happy path (PutItem, claim, record), one create that states the
    // deadline (`expand[]=latest_charge`), no second read of it.
    assert_eq!(
        authorized.dynamodb.requests,
        ops(&[("PutItem", 1), ("UpdateItem", 2)])
    );
    assert_eq!(authorized.sqs.requests, ops(&[("SendMessage", 1)]));
    assert_eq!(
        (authorized.stripe.create, authorized.stripe.total()),
        (1, 1)
    );
    // Captured: the door reads the order's first capture record (GetItem: absent, so this is
    // the first; a capture Stripe refused for its amount would send it to `capture#2`), reads the
    // charge (GetItem) and writes the capture with its claim on the charge (TransactWriteItems),
    // one SendMessage; the charge function claims (UpdateItem), captures (one POST), and records
    // the capture with the charge's end in one TransactWriteItems, which returns no item: the
    // record is read back (a third GetItem). Two GetItems before the door's read of the capture.
    assert_eq!(
        captured.dynamodb.requests,
        ops(&[("GetItem", 3), ("TransactWriteItems", 2), ("UpdateItem", 1)])
    );
    assert_eq!(captured.sqs.requests, ops(&[("SendMessage", 1)]));
    assert_eq!((captured.stripe.capture, captured.stripe.total()), (1, 1));
}
