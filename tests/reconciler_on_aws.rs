//! The reconciler against moto and the Stripe simulator (on the core's clock): every unsettled
//! operation converges, never by creating past the key window, and two overlapping ticks are safe.
//! moto never fires EventBridge schedules, so ticks are invoked directly, as the schedule would.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemInput;
use aws_sdk_dynamodb::operation::query::QueryInput;
use aws_sdk_dynamodb::types::AttributeValue;
use charge_core::plan::ReviewClass;
use charge_core::reconcile_plan::QueueDepth;
use charge_core::store_rules::ChargeClaim;
use charge_core::{
    domain::PaymentMethodId,
    operation::{Operation, OperationStatus, Review},
    time::{Clock, ManualClock},
};
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::executor::execute;
use charge_once::ports::{
    CreatePaymentIntent, OperationCreates, OperationQueue, OperationReads, PaymentIntents,
    QueuedOperation,
};
use charge_once::reconciler::{reconcile_tick, TickReport, REVIEW_READ_RESERVE};
use charge_once::telemetry::{parse_emf, CapturedMetrics};
use stripe_sim::FaultKind;
use testkit::aws::sdk_config;
use testkit::stack::{Stack, TICK_BUDGET};
use testkit::store_contract::operation;

const HOUR: Duration = Duration::from_secs(3600);

async fn tick(s: &Stack) -> TickReport {
    s.tick().await.expect("a tick")
}

/// A checked-out operation (pending, never attempted), recorded at the current time.
async fn pending(s: &Stack, order: &str) -> Operation {
    let op = operation(order, 1500, s.clock().now());
    s.store.create_if_absent(&op).await.unwrap();
    op
}

#[tokio::test]
async fn an_unreadable_record_is_counted_and_skipped_and_the_rest_of_its_page_goes_on() {
    let s = Stack::spawn().await;
    let mut ops = Vec::new();
    for i in 0..6 {
        ops.push(pending(&s, &format!("rec-unreadable-{i}")).await);
    }
    // One record loses an attribute every release wrote (a hand edit, a shape nobody wrote):
    // it stays in the index, due like the others.
    let bad = &ops[2];
    s.dynamo
        .update_item()
        .table_name(s.store.table())
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S(format!("ORDER#{}", bad.order_id)),
        )
        .key(
            "sk",
            aws_sdk_dynamodb::types::AttributeValue::S("charge".into()),
        )
        .update_expression("REMOVE amount")
        .send()
        .await
        .unwrap();
    assert!(
        s.store.get(&bad.key()).await.is_err(),
        "the record is unreadable"
    );
    s.side.clock.advance(Duration::from_secs(301));
    let report = tick(&s).await;
    assert_eq!(report.unreadable, 1, "counted");
    assert_eq!(report.reenqueued, 5, "the other five in the same tick");
    assert_eq!(
        s.metrics
            .sum("UnreadableRecords", &[("Function", "reconciler")]),
        1.0
    );
    while s.deliver().await > 0 {}
    for op in ops.iter().filter(|o| o.order_id != bad.order_id) {
        assert_eq!(s.current(op).await.status, OperationStatus::Succeeded);
    }
    // Every tick counts it again (and pages) until a person deals with it.
    assert_eq!(tick(&s).await.unreadable, 1);
}

#[tokio::test]
async fn a_lost_send_message_is_recovered() {
    let s = Stack::spawn().await;
    // Checkout recorded it but the SendMessage never happened.
    let op = pending(&s, "rec-lost-send").await;
    assert_eq!(s.depth().await, 0);

    assert_eq!(
        tick(&s).await.reenqueued,
        0,
        "inside the grace period: left alone"
    );
    s.side.clock.advance(Duration::from_secs(301));
    let report = tick(&s).await;
    assert_eq!(report.reenqueued, 1);
    assert_eq!(s.depth().await, 1);

    assert_eq!(s.deliver().await, 1);
    assert_eq!(s.current(&op).await.status, OperationStatus::Succeeded);
    assert_eq!(s.ledger_for(&op), 1);
}

/// A long queue is told from a lost message by SQS's own counts: while more messages wait than
/// the charge environments take at once (the default 2 × 10), a pending operation past its grace
/// is left to the queue (no send, counted `WaitedForQueue`); once the queue is worked through,
/// the same operation, its message lost, is re-enqueued and charged once.
#[tokio::test]
async fn a_lost_send_waits_while_the_queue_is_behind_then_is_recovered() {
    let s = Stack::spawn().await;
    let lost = pending(&s, "rec-behind-lost").await;
    let queue = s.queue();
    // More waiting than the charge environments take at once (the template's default: 4 × 10).
    let waiting = charge_once::config::StripeBudget::default_throughput().in_flight + 5;
    for i in 0..waiting {
        let op = pending(&s, &format!("rec-behind-{i}")).await;
        queue.send(&QueuedOperation::first(&op)).await.unwrap();
    }
    assert_eq!(s.depth().await, waiting);
    s.side.clock.advance(Duration::from_secs(301));

    let report = tick(&s).await;
    assert_eq!(
        report.queue_depth,
        Some(QueueDepth {
            visible: waiting,
            in_flight: 0
        }),
        "read from SQS"
    );
    // The others are due too (their messages wait on the queue): nothing is sent for any.
    assert_eq!(
        (report.waited_for_queue, report.reenqueued),
        (waiting + 1, 0),
        "{report:?}"
    );
    assert_eq!(s.depth().await, waiting, "nothing sent");
    assert_eq!(s.current(&lost).await.redrives, 0);
    assert_eq!(
        emitted_since(&s.metrics, 0, "WaitedForQueue"),
        (waiting + 1) as f64
    );

    // The charge environments work through the queue.
    while s.deliver().await > 0 {}
    assert_eq!(s.depth().await, 0);
    s.side.clock.advance(Duration::from_secs(300));
    let report = tick(&s).await;
    assert_eq!(
        (report.waited_for_queue, report.reenqueued),
        (0, 1),
        "{report:?}"
    );
    assert_eq!(s.depth().await, 1);
    assert_eq!(s.deliver().await, 1);
    assert_eq!(s.current(&lost).await.status, OperationStatus::Succeeded);
    assert_eq!(s.ledger_for(&lost), 1);
}

#[tokio::test]
async fn a_replayed_500_stays_unknown_until_the_window_then_search_settles_it() {
    let s = Stack::spawn().await;
    let op = pending(&s, "rec-500").await;
    s.side.sim.push_script([FaultKind::ServerErrorAfterCommit]);
    execute(&s.charge_deps(), &op.key(), &op.operation_id)
        .await
        .unwrap();
    assert_eq!(s.current(&op).await.status, OperationStatus::Unknown);
    assert_eq!(s.side.sim.injected()[&FaultKind::ServerErrorAfterCommit], 1);

    // Inside the window the reconciler re-drives; the key replays the 500; still unknown.
    let mut redriven = 0;
    for _ in 0..5 {
        s.side.clock.advance(HOUR);
        redriven += tick(&s).await.redriven;
        while s.deliver().await > 0 {}
        assert_eq!(s.current(&op).await.status, OperationStatus::Unknown);
    }
    assert!(redriven >= 3, "re-driven with backoff, got {redriven}");
    assert_eq!(s.ledger_for(&op), 1, "never a second PaymentIntent");

    // Past the window and the search lag: settled by search.
    s.side.clock.advance(19 * HOUR);
    let report = tick(&s).await;
    assert_eq!(report.settled, 1, "{report:?}");
    let rec = s.current(&op).await;
    assert_eq!(rec.status, OperationStatus::Succeeded);
    assert_eq!(rec.next_due_at, None, "left the unknown index");
    assert_eq!(s.ledger_for(&op), 1);
    assert_eq!(s.side.sim.request_counts().search, 1);
}

#[tokio::test]
async fn search_waits_for_its_lag() {
    let s = Stack::spawn().await;
    let op = pending(&s, "rec-lag").await;
    s.side.sim.push_script([FaultKind::DropAfterCommit]);
    execute(&s.charge_deps(), &op.key(), &op.operation_id)
        .await
        .unwrap();
    s.side.clock.advance(23 * HOUR + Duration::from_secs(60));
    let report = tick(&s).await;
    assert_eq!(report.still_unknown, 1);
    assert_eq!(
        s.side.sim.request_counts().search,
        0,
        "too early to trust search"
    );
    assert_eq!(
        s.side.sim.request_counts().create,
        1,
        "and never a create past the window"
    );

    s.side.clock.advance(Duration::from_secs(600));
    assert_eq!(tick(&s).await.settled, 1);
    assert_eq!(s.side.sim.request_counts().search, 1);
    assert_eq!(s.ledger_for(&op), 1);
}

#[tokio::test]
async fn zero_or_two_matches_go_to_review_with_a_reason() {
    let s = Stack::spawn().await;
    let zero = pending(&s, "rec-zero").await;
    let two = pending(&s, "rec-two").await;
    s.side.sim.push_script([FaultKind::ServerErrorBeforeCommit]);
    execute(&s.charge_deps(), &zero.key(), &zero.operation_id)
        .await
        .unwrap();
    s.side.sim.push_script([FaultKind::DropAfterCommit]);
    execute(&s.charge_deps(), &two.key(), &two.operation_id)
        .await
        .unwrap();
    // A second PaymentIntent for the same operation, made by hand under another key.
    let mut by_hand = CreatePaymentIntent::for_operation(&two).expect("a charge operation");
    by_hand.idempotency_key = charge_core::domain::OperationId::new_random().idempotency_key();
    s.side.gateway().create(&by_hand).await.unwrap();

    s.side.clock.advance(24 * HOUR);
    let report = tick(&s).await;
    assert_eq!(report.sent_to_review, 2, "{report:?}");
    let z = s.current(&zero).await;
    let t = s.current(&two).await;
    assert!(z.review.unwrap().reason.contains("found 0"));
    assert!(t.review.unwrap().reason.contains("found 2"));
    assert_eq!(z.status, OperationStatus::Unknown);
    assert_eq!(s.ledger_for(&zero), 0);
    assert_eq!(s.ledger_for(&two), 2);

    assert_eq!(
        report.review_classes.get(&ReviewClass::SearchAmbiguous),
        Some(&2)
    );
    assert_eq!(
        report.in_review, 2,
        "the REVIEW partition is read every tick"
    );

    // In review, later ticks leave them to a person, and keep reporting them.
    s.side.clock.advance(Duration::from_secs(300));
    let later = tick(&s).await;
    assert_eq!(later.examined, 0);
    assert_eq!(later.in_review, 2);
    assert_eq!(later.oldest_in_review_age, Duration::from_secs(300));
}

#[tokio::test]
async fn a_requires_action_intent_goes_to_review_after_the_stuck_bound() {
    let s = Stack::spawn().await;
    let mut op = operation("rec-stuck", 1500, s.side.clock.now());
    op.params.charge_mut().expect("a charge").payment_method =
        PaymentMethodId::parse("pm_card_sim_requiresAction").unwrap();
    s.store.create_if_absent(&op).await.unwrap();
    let first = execute(&s.charge_deps(), &op.key(), &op.operation_id)
        .await
        .unwrap();
    assert_eq!(first.status, OperationStatus::Unknown);
    let pi = first.external_id.clone().expect("the intent exists");

    // Past the key window but inside the bound (72 h by default): looked at, left unknown.
    s.side.clock.advance(71 * HOUR);
    let report = tick(&s).await;
    assert_eq!(
        (report.still_unknown, report.sent_to_review),
        (1, 0),
        "{report:?}"
    );
    assert!(s.current(&op).await.review.is_none());

    s.side.clock.advance(2 * HOUR);
    let before = s.metrics.lines().len();
    let report = tick(&s).await;
    assert_eq!(report.sent_to_review, 1, "{report:?}");
    assert_eq!(
        report.review_classes.get(&ReviewClass::StuckRequiresAction),
        Some(&1)
    );
    let now = s.current(&op).await;
    let review = now.review.clone().expect("in review");
    assert!(
        review.reason.starts_with("stuck_requires_action"),
        "{}",
        review.reason
    );
    assert!(review.reason.contains(pi.as_str()));
    assert_eq!(
        now.status,
        OperationStatus::Unknown,
        "never rounded to failed"
    );
    assert_eq!(s.ledger_for(&op), 1, "never created again");

    // The tick's EMF lines: the due work's (the heartbeat), SentToReview by reason class, its
    // Stripe requests (the one retrieve, and the 429s met: none), the REVIEW partition's
    // InReview / OldestInReviewAge, then the open disputes' gauge (none).
    let lines: Vec<serde_json::Value> = s.metrics.lines()[before..]
        .iter()
        .filter_map(|l| charge_once::telemetry::parse_emf(l))
        .collect();
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert_eq!(lines[2]["StripeRequests"], 1.0);
    assert_eq!(lines[2]["Endpoint"], "retrieve");
    assert_eq!(lines[3]["StripeRateLimited"], 0.0);
    assert_eq!(lines[5]["DisputesOpen"], 0.0);
    let lines = [lines[0].clone(), lines[1].clone(), lines[4].clone()];
    assert_eq!(lines[0]["Ticks"], 1.0);
    assert!(
        lines[0].get("SentToReview").is_none(),
        "counted once, by class"
    );
    assert_eq!(lines[1]["ReasonClass"], "stuck_requires_action");
    assert_eq!(lines[1]["SentToReview"], 1.0);
    assert_eq!(lines[1]["Function"], "reconciler");
    assert_eq!(lines[2]["InReview"], 1.0);
    assert_eq!(lines[2]["OldestInReviewAge"], 0.0);
    assert_eq!(lines[2]["UnreadableRecords"], 0.0);
}

#[tokio::test]
async fn two_overlapping_ticks_reach_the_same_state_without_extra_charges() {
    let s = Stack::spawn().await;
    let mut lost_sends = Vec::new();
    for i in 0..6 {
        lost_sends.push(pending(&s, &format!("rec-overlap-send-{i}")).await);
    }
    let mut unknowns = Vec::new();
    for i in 0..6 {
        let op = pending(&s, &format!("rec-overlap-unknown-{i}")).await;
        s.side.sim.push_script([FaultKind::DropAfterCommit]);
        execute(&s.charge_deps(), &op.key(), &op.operation_id)
            .await
            .unwrap();
        unknowns.push(op);
    }
    let created_before = s.side.sim.ledger().len();
    s.side.clock.advance(24 * HOUR);

    let (a, b) = tokio::join!(tick(&s), tick(&s));
    assert_eq!(
        a.reenqueued + b.reenqueued,
        6,
        "each lost send re-enqueued once: {a:?} {b:?}"
    );
    assert_eq!(
        a.settled + b.settled,
        6,
        "each unknown settled once: {a:?} {b:?}"
    );
    assert_eq!(s.depth().await, 6);
    assert_eq!(
        s.side.sim.ledger().len(),
        created_before,
        "no PaymentIntent created by reconciling"
    );
    for op in &unknowns {
        assert_eq!(s.current(op).await.status, OperationStatus::Succeeded);
        assert_eq!(s.ledger_for(op), 1);
    }
    while s.deliver().await > 0 {}
    for op in &lost_sends {
        assert_eq!(s.current(op).await.status, OperationStatus::Succeeded);
        assert_eq!(s.ledger_for(op), 1);
    }
}

#[tokio::test]
async fn a_tick_pages_through_the_index_and_stops_before_its_time_runs_out() {
    let s = Stack::spawn().await;
    for i in 0..120 {
        pending(&s, &format!("rec-page-{i:03}")).await;
    }
    s.side.clock.advance(Duration::from_secs(301));

    // A budget that runs out after 40 operations: the tick stops cleanly, the rest stays due.
    let calls = AtomicU32::new(0);
    let budget = move || {
        if calls.fetch_add(1, Ordering::SeqCst) < 42 {
            TICK_BUDGET
        } else {
            Duration::ZERO
        }
    };
    let first = reconcile_tick(
        &s.reconciler(),
        &budget,
        Duration::from_secs(25),
        &CapturedMetrics::new(),
    )
    .await
    .unwrap();
    assert!(first.stopped_early);
    assert!(first.reenqueued > 0 && first.reenqueued < 120, "{first:?}");
    assert_eq!(s.depth().await, first.reenqueued);

    // The charge function works through what the first tick sent (a queue more than its
    // environments take at once would be waited for), then the next tick sends the rest.
    while s.deliver().await > 0 {}
    let second = tick(&s).await;
    assert!(!second.stopped_early);
    assert_eq!(second.waited_for_queue, 0, "{second:?}");
    assert_eq!(
        first.reenqueued + second.reenqueued,
        120,
        "nothing lost, nothing twice"
    );
    assert!(second.pages >= 2, "paged: {second:?}");
    assert_eq!(s.depth().await, 120 - first.reenqueued);
}

/// `n` operations waiting for a person, stored as a review leaves them (unknown, attempted,
/// flagged and due at the flag time, in the REVIEW partition), flagged a second apart, the first
/// the oldest.
async fn in_review(s: &Stack, prefix: &str, n: u64) -> Vec<Operation> {
    let now = s.clock().now();
    let mut ops = Vec::new();
    for i in 0..n {
        let flagged = now.minus(Duration::from_secs(n - i));
        let mut op = operation(&format!("{prefix}-{i:03}"), 1500, flagged.minus(HOUR));
        op.status = OperationStatus::Unknown;
        op.attempts = 1;
        op.first_attempted_at = Some(flagged.minus(HOUR));
        op.review = Some(Review {
            reason: "rejected: No such customer".into(),
            flagged_at: flagged,
        });
        op.next_due_at = Some(flagged);
        s.store.create_if_absent(&op).await.unwrap();
        ops.push(op);
    }
    ops
}

/// What C3's operator does: a raw `update-item` writing `review_flagged_at` as a string.
async fn break_review_flag(s: &Stack, op: &Operation) {
    s.dynamo
        .update_item()
        .table_name(s.store.table())
        .key("pk", AttributeValue::S(format!("ORDER#{}", op.order_id)))
        .key("sk", AttributeValue::S("charge".into()))
        .update_expression("SET review_flagged_at = :v")
        .expression_attribute_values(":v", AttributeValue::S("yesterday".into()))
        .send()
        .await
        .unwrap();
    let err = s.store.get(&op.key()).await.unwrap_err();
    assert!(err.unreadable.is_some(), "unreadable: {err}");
}

/// The sum of metric `name` (Function=reconciler) over the lines emitted since `from`.
fn emitted_since(metrics: &CapturedMetrics, from: usize, name: &str) -> f64 {
    metrics.lines()[from..]
        .iter()
        .filter_map(|l| parse_emf(l))
        .filter(|v| v["Function"] == "reconciler")
        .filter_map(|v| v[name].as_f64())
        .sum()
}

/// C3: an operator's raw `update-item` leaves a record in review that this release cannot read.
/// It still waits for a person: InReview counts it (from the index) and the tick counts it as
/// unreadable, so neither InReviewAlarm nor UnreadableRecordsAlarm returns to OK while it waits.
#[tokio::test]
async fn an_unreadable_record_in_review_is_counted_in_review_and_as_unreadable() {
    let s = Stack::spawn().await;
    let ops = in_review(&s, "rec-review-unreadable", 2).await;
    // Both readable: both counted, none unreadable.
    let report = tick(&s).await;
    assert_eq!((report.in_review, report.unreadable_in_review), (2, 0));

    break_review_flag(&s, &ops[0]).await;
    let before = s.metrics.lines().len();
    let report = tick(&s).await;
    assert_eq!(report.in_review, 2, "it still waits for a person");
    assert!(report.review_complete);
    assert_eq!(report.unreadable_in_review, 1);
    assert_eq!(report.oldest_in_review_age, Duration::from_secs(2));
    assert_eq!(emitted_since(&s.metrics, before, "InReview"), 2.0);
    assert_eq!(emitted_since(&s.metrics, before, "UnreadableRecords"), 1.0);
}

/// Every DynamoDB operation its client sends costs `step` of the core's clock (the one the tick's
/// budget reads), and is counted by kind, with the keys each BatchGetItem asks for.
#[derive(Debug, Clone)]
struct Slow {
    clock: ManualClock,
    step: Duration,
    seen: Arc<Mutex<BTreeMap<&'static str, u64>>>,
}

impl Slow {
    fn count(&self, what: &str) -> u64 {
        self.seen.lock().unwrap().get(what).copied().unwrap_or(0)
    }
}

impl Intercept for Slow {
    fn name(&self) -> &'static str {
        "Slow"
    }

    fn read_before_serialization(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let input = context.input();
        let mut seen = self.seen.lock().unwrap();
        if input.downcast_ref::<QueryInput>().is_some() {
            *seen.entry("Query").or_default() += 1;
        } else if let Some(batch) = input.downcast_ref::<BatchGetItemInput>() {
            *seen.entry("BatchGetItem").or_default() += 1;
            let keys: usize = batch
                .request_items()
                .into_iter()
                .flat_map(|r| r.values())
                .map(|k| k.keys().len())
                .sum();
            *seen.entry("records read").or_default() += keys as u64;
        } else {
            *seen.entry("other").or_default() += 1;
        }
        self.clock.advance(self.step);
        Ok(())
    }
}

/// A review storm (a Stripe 400 on a batch of orders with a bad payment method) larger than an
/// index page. The tick counts the REVIEW partition from the index entries alone, page by page
/// while time is left; the records are read whole once, the oldest 100 only, to find the one this
/// release cannot read. With a tight budget it stops counting with its reserve left, InReview is
/// what it counted, and the due work's metrics (the heartbeat) went out before the REVIEW read.
/// Every DynamoDB request costs a second of the core's clock here.
#[tokio::test]
async fn a_review_storm_is_counted_from_the_index_within_the_time_left() {
    let s = Stack::spawn().await;
    let ops = in_review(&s, "rec-storm", 130).await;
    break_review_flag(&s, &ops[0]).await;
    let slow = Slow {
        clock: s.clock().clone(),
        step: Duration::from_secs(1),
        seen: Arc::default(),
    };
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk_config().await)
            .interceptor(slow.clone())
            .build(),
    );
    let mut deps = s.reconciler();
    deps.charge.store = Arc::new(DynamoStore::new(client, s.store.table()));
    assert_eq!(deps.page_size, 50, "the storm is more than two pages");
    let safety = Duration::from_secs(5);

    // Time enough: 8 index queries for due work (none), 3 pages of the REVIEW count, one page
    // of the oldest 100 review records read whole, then 8 index queries for the open disputes
    // due within a day (none).
    let metrics = CapturedMetrics::new();
    let report = reconcile_tick(&deps, &|| TICK_BUDGET, safety, &metrics)
        .await
        .unwrap();
    assert_eq!(report.in_review, 130, "every entry, the unreadable one too");
    assert!(report.review_complete);
    assert_eq!(report.unreadable_in_review, 1);
    assert_eq!(
        report.oldest_in_review_age,
        Duration::from_secs(130 + 8),
        "flagged 130 s before the tick, counted after its 8 s of due work"
    );
    assert_eq!(slow.count("Query"), 8 + 3 + 1 + 8);
    assert_eq!(
        slow.count("BatchGetItem"),
        1,
        "the unreadable check, not the count"
    );
    assert_eq!(slow.count("records read"), 100, "never the whole storm");
    assert_eq!(slow.count("other"), 0);
    let lines: Vec<serde_json::Value> = metrics
        .lines()
        .iter()
        .filter_map(|l| parse_emf(l))
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[2]["DisputesOpen"], 0.0, "the disputes' gauge last");
    assert_eq!(lines[0]["Ticks"], 1.0, "the due work's line first");
    assert!(lines[0].get("InReview").is_none());
    assert_eq!(lines[1]["InReview"], 130.0);
    assert_eq!(lines[1]["UnreadableRecords"], 1.0);

    // A tight budget: the due work (8 s) and two pages of the count fit before the reserve; the
    // tick stops there, with what it counted, having read no record, inside its time.
    let slow = Slow {
        seen: Arc::default(),
        ..slow
    };
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk_config().await)
            .interceptor(slow.clone())
            .build(),
    );
    deps.charge.store = Arc::new(DynamoStore::new(client, s.store.table()));
    let clock = s.clock().clone();
    let deadline = clock
        .now()
        .plus(Duration::from_secs(8 + 1) + REVIEW_READ_RESERVE + Duration::from_millis(500));
    let remaining = move || deadline.since(clock.now());
    let metrics = CapturedMetrics::new();
    let report = reconcile_tick(&deps, &remaining, safety, &metrics)
        .await
        .unwrap();
    assert!(s.clock().now() < deadline, "finished inside its time");
    assert!(!report.stopped_early, "the due work was done");
    assert_eq!(report.review_pages, 2);
    assert!(!report.review_complete);
    assert_eq!(
        report.in_review, 100,
        "a lower bound, more than 0: the alarm holds"
    );
    assert_eq!(slow.count("Query"), 8 + 2);
    assert_eq!(slow.count("BatchGetItem"), 0, "no record read");
    let lines: Vec<serde_json::Value> = metrics
        .lines()
        .iter()
        .filter_map(|l| parse_emf(l))
        .collect();
    assert_eq!(lines.len(), 2, "both lines out");
    assert_eq!(lines[0]["Ticks"], 1.0);
    assert_eq!(lines[1]["InReview"], 100.0);
}

/// A refund whose create answered a 500 after Stripe made it (saved under its key, replayed):
/// unknown, and no Stripe id to retrieve. Inside the window nothing creates it again under
/// another key; past it the reconciler lists the intent's refunds (not delayed like search) and
/// settles by the one carrying our operation id: one refund at Stripe, recorded succeeded with
/// its id, the reservation kept.
#[tokio::test]
async fn a_refund_whose_answer_was_lost_is_settled_past_the_window_by_the_intent_s_list() {
    use testkit::store_contract::refund_of;

    let s = Stack::spawn().await;
    let charge = pending(&s, "rec-refund-list").await;
    execute(&s.charge_deps(), &charge.key(), &charge.operation_id)
        .await
        .unwrap();
    let charge = s.current(&charge).await;
    assert_eq!(charge.status, OperationStatus::Succeeded);

    let (refund, reserve) = refund_of(&charge, "r-lost", Some(600)).unwrap();
    s.store
        .create_beside(&refund, ChargeClaim::Reserve(&reserve))
        .await
        .unwrap();
    s.side.sim.push_script([FaultKind::ServerErrorAfterCommit]);
    execute(&s.charge_deps(), &refund.key(), &refund.operation_id)
        .await
        .unwrap();
    assert_eq!(s.side.sim.injected()[&FaultKind::ServerErrorAfterCommit], 1);
    let lost = s.current(&refund).await;
    assert_eq!(
        (lost.status, lost.stripe_refund_id()),
        (OperationStatus::Unknown, None),
        "made at Stripe, the answer lost: unknown, no id to retrieve"
    );
    assert_eq!(s.side.sim.refunds_created(), 1);

    // Inside the key window: re-driven, the key replays the saved 500, still unknown.
    s.side.clock.advance(2 * HOUR);
    tick(&s).await;
    while s.deliver().await > 0 {}
    assert_eq!(s.current(&refund).await.status, OperationStatus::Unknown);

    // Past it: listed and settled by our operation id, never created again.
    s.side.clock.advance(22 * HOUR);
    let report = tick(&s).await;
    while s.deliver().await > 0 {}
    let settled = s.current(&refund).await;
    assert_eq!(settled.status, OperationStatus::Succeeded, "{report:?}");
    assert!(
        settled.stripe_refund_id().is_some(),
        "its Stripe id recorded"
    );
    assert_eq!(settled.next_due_at, None, "left the unknown index");
    assert_eq!(s.side.sim.refunds_created(), 1, "one refund at Stripe");
    assert_eq!(
        s.current(&charge).await.refund_reserved(),
        600,
        "the reservation stays: the money went back"
    );
}

// ---- disputes ----

/// A charge made with Stripe's dispute test card (`pm_card_createDispute`): stripe-sim disputes
/// it at once, evidence due in 7 days. Its record is written as the events function writes it
/// (the dispute read at stripe-sim over HTTP, then the dispute's shell), and from then on only
/// the reconciler on moto reads it: inside the 72 h page window it pages Near; unanswered past
/// `due_by`, stripe-sim closes it lost and the tick settles it `succeeded` with the amount kept
/// on the order's charge. Nothing is ever queued or created for it.
#[tokio::test]
async fn an_open_dispute_is_read_again_at_stripe_paged_before_its_deadline_and_settled_lost() {
    use charge_core::dispute::DisputeStatus;
    use charge_core::domain::{DisputeId, OperationKind};
    use charge_core::operation::OperationKey;
    use charge_once::executor::dispute::{record_dispute, DisputeRecording};
    use charge_once::ports::StripeDisputes;

    let s = Stack::spawn().await;
    let op = charge_core::testing::order("ord-disputed")
        .amount(1500)
        .payment_method("pm_card_createDispute")
        .at(s.clock().now())
        .build();
    s.store.create_if_absent(&op).await.unwrap();
    execute(&s.charge_deps(), &op.key(), &op.operation_id)
        .await
        .unwrap();
    let ledger = s.side.sim.dispute_ledger();
    assert_eq!(ledger.len(), 1, "the test card's dispute");
    let dp = DisputeId::parse(&ledger[0].id).unwrap();
    let gateway = s.side.gateway();
    let dispute = gateway.retrieve_dispute(&dp).await.unwrap();
    assert_eq!(dispute.status, DisputeStatus::NeedsResponse);
    let written = record_dispute(
        s.store.as_ref(),
        &op.order_id,
        &dispute,
        s.clock().now(),
        &charge_core::plan::Policy::default().dispute,
    )
    .await
    .unwrap();
    assert!(matches!(
        written,
        DisputeRecording::Written { created: true, .. }
    ));
    let key = OperationKey::of_kind(op.order_id.clone(), OperationKind::Dispute(dp.clone()));
    let reads_before = s.side.sim.request_counts().dispute_read;
    let creates_before = s.side.sim.request_counts().create;

    // Day 5 of 7: inside the window, nothing submitted. The tick reads it at Stripe and pages.
    s.clock().advance(5 * 24 * HOUR);
    let report = tick(&s).await;
    assert_eq!(report.disputes_read, 1);
    assert_eq!(report.dispute_deadline_near, 1);
    assert_eq!(
        s.metrics
            .sum("DisputeDeadlineNear", &[("Function", "reconciler")]),
        1.0
    );
    assert_eq!(report.disputes_open, Some(1));
    assert_eq!(
        s.side.sim.request_counts().dispute_read - reads_before,
        1,
        "one retrieve"
    );
    let record = s.store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.status, OperationStatus::Unknown);
    assert!(
        record.next_due_at.unwrap() > s.clock().now(),
        "due again later, not every tick"
    );

    // An hour past due_by, unanswered: still open at Stripe (the network decides later; late
    // evidence can still be submitted), so the read pages that the deadline passed.
    s.clock().advance(2 * 24 * HOUR + HOUR);
    let report = tick(&s).await;
    assert_eq!(report.disputes_read, 1);
    assert_eq!(report.settled, 0, "still open at Stripe");
    assert_eq!(report.dispute_deadline_passed, 1);
    assert_eq!(
        s.metrics
            .sum("DisputeDeadlinePassed", &[("Function", "reconciler")]),
        1.0
    );
    // Closed lost by stripe-sim once its network's time after due_by is up; the next read
    // settles it.
    s.clock().advance(Duration::from_millis(
        u64::try_from(stripe_sim::CLOSES_AFTER_DUE_MS).unwrap(),
    ));
    let report = tick(&s).await;
    assert_eq!(report.disputes_read, 1);
    assert_eq!(report.settled, 1);
    assert_eq!(
        report.dispute_deadline_passed, 0,
        "closed: nothing left to answer"
    );
    let record = s.store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        record.status,
        OperationStatus::Succeeded,
        "lost: the bank's take succeeded"
    );
    assert_eq!(record.next_due_at, None);
    let charge = s.store.get(&op.key()).await.unwrap().unwrap();
    assert_eq!(
        charge.refund_reserved(),
        1500,
        "lost keeps the amount reserved"
    );
    assert_eq!(s.depth().await, 0, "nothing queued for a dispute");
    assert_eq!(
        s.side.sim.request_counts().create,
        creates_before,
        "nothing created at Stripe"
    );
    // Settled: never read again.
    s.clock().advance(2 * 24 * HOUR);
    assert_eq!(tick(&s).await.disputes_read, 0);
}
