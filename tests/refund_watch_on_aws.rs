//! The reconciler's refund watch against moto (the settled-by-day index read for refunds only,
//! their records read back, the cursor item, the late failure's TransactWriteItems) and
//! stripe-sim over HTTP, on the core's clock, with no events source: a refund the bank returns
//! three days after it succeeded is recorded `failed` with its reservation given back; its twin,
//! a refund of another order that stays succeeded, is read in the same tick and left alone. The
//! test counts what one tick's watch costs (DynamoDB calls as billed, Stripe's refund reads).

use std::sync::atomic::Ordering;
use std::time::Duration;

use charge_core::domain::{Amount, Principal, RefundId};
use charge_core::operation::{Operation, OperationStatus};
use charge_core::refund::watch::RefundWatch;
use charge_core::refund::{self, request::RefundRequest};
use charge_core::store_rules::{ChargeClaim, CreatedBeside};
use charge_core::time::Clock;
use charge_once::executor::execute;
use charge_once::ports::{DisputeWatchCursor, OperationCreates, OperationReads, RefundWatchCursor};
use charge_once::reconciler::{reconcile_tick, ReconcilerDeps};
use charge_once::refund_watch::RefundWatchDeps;
use testkit::stack::{Stack, TICK_BUDGET};

const DAY: Duration = Duration::from_secs(86_400);

/// A charge of 1000 paid with `pm`, and a refund of 400 of it, both executed at stripe-sim.
async fn refunded(s: &Stack, order: &str, pm: &str) -> (Operation, Operation) {
    let deps = s.charge_deps();
    let charge = charge_core::testing::order(order)
        .amount(1000)
        .payment_method(pm)
        .at(s.clock().now())
        .build();
    s.store.create_if_absent(&charge).await.unwrap();
    let done = execute(&deps, &charge.key(), &charge.operation_id)
        .await
        .unwrap();
    assert_eq!(done.status, OperationStatus::Succeeded);
    let charge = s.store.get(&charge.key()).await.unwrap().unwrap();
    let request = RefundRequest {
        amount: Some(Amount::new(400).unwrap()),
        reason: None,
    };
    let now = s.clock().now();
    let (params, reserve) = refund::reserve(&charge, &request, now).unwrap();
    let op = Operation::new_refund(
        charge.order_id.clone(),
        RefundId::parse("r-1").unwrap(),
        &request,
        params,
        Principal::jwt("support").unwrap(),
        now,
        Duration::from_secs(300),
    );
    let created = s
        .store
        .create_beside(&op, ChargeClaim::Reserve(&reserve))
        .await
        .unwrap();
    assert_eq!(created, CreatedBeside::New(op.clone()));
    execute(&deps, &op.key(), &op.operation_id).await.unwrap();
    let refund = s.store.get(&op.key()).await.unwrap().unwrap();
    assert_eq!(refund.status, OperationStatus::Succeeded);
    (charge, refund)
}

#[tokio::test]
async fn a_refund_failing_three_days_later_is_recorded_from_the_settled_index_and_its_twin_left_alone(
) {
    let s = Stack::spawn().await;
    // The bank returns refunds of pm_card_refundFail three days after they succeeded.
    s.side.sim.set_refund_fail_after(3 * DAY);
    let (charge, late) = refunded(&s, "watch-late", "pm_card_refundFail").await;
    let (_, fine) = refunded(&s, "watch-fine", "pm_card_visa").await;
    let settled = late.settled_at.expect("settled");
    let deps = ReconcilerDeps {
        dispute_watch: None,
        refund_watch: Some(RefundWatchDeps {
            watch: RefundWatch {
                window: 5 * DAY,
                every: DAY,
            },
            cursor: s.store.clone(),
        }),
        ..s.reconciler()
    };
    // The watch has covered everything due until a minute before the third day's reads.
    let start = settled.plus(3 * DAY).minus(Duration::from_secs(60));
    assert!(s.store.advance_watch(None, start).await.unwrap());
    s.clock()
        .set(settled.plus(3 * DAY).plus(Duration::from_secs(120)));
    let gateway = deps.charge.gateway.clone();
    let reads_before = gateway.requests().unwrap().totals().refund_read;
    let calls = s.store.calls();
    let before = (
        calls.reads.load(Ordering::SeqCst),
        calls.writes.load(Ordering::SeqCst),
        calls.queries.load(Ordering::SeqCst),
    );
    let report = reconcile_tick(
        &deps,
        &|| TICK_BUDGET,
        Duration::from_secs(25),
        s.metrics.as_ref(),
    )
    .await
    .unwrap();
    let watched = report.refund_watch.expect("the watch ran");
    assert_eq!(
        (watched.read, watched.failed_later, watched.conflicts),
        (2, 1, 0),
        "{watched:?}"
    );
    assert!(!watched.incomplete, "{watched:?}");
    // The late one: failed, Stripe's reason, its 400 back on the charge.
    let failed = s.store.get(&late.key()).await.unwrap().unwrap();
    assert_eq!(failed.status, OperationStatus::Failed);
    assert!(failed
        .last_error
        .as_deref()
        .unwrap()
        .contains("expired_or_canceled_card"));
    let charge_now = s.store.get(&charge.key()).await.unwrap().unwrap();
    assert_eq!(charge_now.refund_reserved(), 0);
    // Its twin: read, still succeeded, untouched.
    assert_eq!(s.store.get(&fine.key()).await.unwrap().unwrap(), fine);
    // The cursor moved to now.
    assert_eq!(
        s.store.watched_through().await.unwrap(),
        Some(s.clock().now())
    );
    assert_eq!(
        s.metrics
            .sum("RefundFailedAfterSuccess", &[("Function", "reconciler")]),
        1.0
    );
    // What it cost: one Stripe read per refund due; DynamoDB as billed.
    let reads = gateway.requests().unwrap().totals().refund_read - reads_before;
    assert_eq!(reads, 2, "one retrieve per refund due");
    let after = (
        calls.reads.load(Ordering::SeqCst),
        calls.writes.load(Ordering::SeqCst),
        calls.queries.load(Ordering::SeqCst),
    );
    println!(
        "one tick's watch, 2 refunds due: {reads} Stripe reads, DynamoDB reads {}, writes {}, \
         queries {} (the due work's index pages included)",
        after.0 - before.0,
        after.1 - before.1,
        after.2 - before.2
    );
    // The late failure's TransactWriteItems of two items (billed as four writes) and the
    // cursor's UpdateItem; nothing written for the twin.
    assert_eq!(after.1 - before.1, 4 + 1);
}

/// The dispute watch's cursor on DynamoDB: its own item (`pk = WATCH`, `sk = disputes`), absent
/// before the first tick, moved only from the value read (a stale `from` is refused, nothing
/// written; its twin from the value read is accepted), and apart from the refund watch's.
#[tokio::test]
async fn the_dispute_watchs_cursor_is_its_own_item_moved_only_from_the_value_read() {
    let s = Stack::spawn().await;
    let t0 = s.clock().now();
    let later = t0.plus(Duration::from_secs(60));
    assert_eq!(s.store.disputes_listed_through().await.unwrap(), None);
    assert!(s.store.advance_dispute_watch(None, t0).await.unwrap());
    assert!(
        !s.store.advance_dispute_watch(None, later).await.unwrap(),
        "no longer absent: refused"
    );
    assert_eq!(s.store.disputes_listed_through().await.unwrap(), Some(t0));
    assert!(s
        .store
        .advance_dispute_watch(Some(t0), later)
        .await
        .unwrap());
    assert_eq!(
        s.store.disputes_listed_through().await.unwrap(),
        Some(later)
    );
    assert_eq!(
        s.store.watched_through().await.unwrap(),
        None,
        "the refund watch's cursor is another item"
    );
}
