//! The reconciler against moto and the Stripe simulator (on the core's clock): every unsettled
//! operation converges, never by creating past the key window, and two overlapping ticks are safe.
//! moto never fires EventBridge schedules, so ticks are invoked directly, as the schedule would.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::sqs::SqsQueue;
use charge_once::executor::{execute_charge, ChargeDeps, ChargePolicy, ReviewClass};
use charge_once::ports::{CreatePaymentIntent, OperationStore, PaymentGateway};
use charge_once::reconciler::{reconcile_tick, ReconcilerDeps, TickReport};
use charge_once::{Clock, Operation, OperationStatus, PaymentMethodId};
use lambda_runtime::{Context, LambdaEvent};
use stripe_sim::FaultKind;
use testkit::aws::{fresh_fifo_queue, fresh_store, queue_depth, receive_as_event, sdk_config};
use testkit::store_contract::operation;
use testkit::stripe::StripeSide;

const HOUR: Duration = Duration::from_secs(3600);
const PLENTY: Duration = Duration::from_secs(3600);

/// A fresh table and FIFO queue on moto, stripe-sim on the core's clock, and the reconciler's
/// dependencies on them (also `release_fixtures.rs`'s stack).
pub(crate) struct Stack {
    pub(crate) store: Arc<DynamoStore>,
    pub(crate) sqs: aws_sdk_sqs::Client,
    pub(crate) queue_url: String,
    pub(crate) side: StripeSide,
    pub(crate) deps: ReconcilerDeps,
}

impl Stack {
    pub(crate) async fn new() -> Self {
        let config = sdk_config().await;
        let sqs = aws_sdk_sqs::Client::new(&config);
        let queue_url = fresh_fifo_queue(&sqs).await;
        let store = Arc::new(fresh_store().await);
        let side = StripeSide::with_new_clock().await;
        let deps = ReconcilerDeps {
            charge: ChargeDeps {
                store: store.clone(),
                gateway: Arc::new(side.gateway()),
                clock: Arc::new(side.clock.clone()),
                policy: ChargePolicy::default(),
            },
            queue: Arc::new(SqsQueue::new(sqs.clone(), &queue_url)),
            page_size: 50,
        };
        Self {
            store,
            sqs,
            queue_url,
            side,
            deps,
        }
    }

    async fn tick(&self) -> TickReport {
        reconcile_tick(&self.deps, &|| PLENTY, Duration::from_secs(25))
            .await
            .unwrap()
    }

    /// A checked-out operation (pending, never attempted), recorded at the current time.
    async fn pending(&self, order: &str) -> Operation {
        let op = operation(order, 1500, self.side.clock.now());
        self.store.create_if_absent(&op).await.unwrap();
        op
    }

    /// What the charge function's event source does: receive a batch, run the handler, delete what
    /// succeeded. Returns how many records the batch had.
    async fn deliver(&self) -> usize {
        let batch = receive_as_event(&self.sqs, &self.queue_url).await;
        let n = batch.records.len();
        let f = charge::handler::ChargeFunction::local(self.deps.charge.clone());
        self.charge(&f, batch).await;
        n
    }

    /// `f` on `batch`, then what the event source does: delete each record the handler did not
    /// report failed (records without a receipt handle did not come from the queue). Returns the
    /// ids of the failed ones.
    pub(crate) async fn charge(
        &self,
        f: &charge::handler::ChargeFunction,
        batch: aws_lambda_events::sqs::SqsEvent,
    ) -> Vec<String> {
        let resp =
            charge::handler::handle(f, LambdaEvent::new(batch.clone(), Context::default())).await;
        let failed: Vec<String> = resp
            .batch_item_failures
            .into_iter()
            .map(|f| f.item_identifier)
            .collect();
        for r in &batch.records {
            let Some(handle) = &r.receipt_handle else {
                continue;
            };
            if !r.message_id.as_ref().is_some_and(|id| failed.contains(id)) {
                self.sqs
                    .delete_message()
                    .queue_url(&self.queue_url)
                    .receipt_handle(handle)
                    .send()
                    .await
                    .unwrap();
            }
        }
        failed
    }

    async fn current(&self, op: &Operation) -> Operation {
        self.store.get(&op.key()).await.unwrap().unwrap()
    }

    fn ledger_for(&self, op: &Operation) -> usize {
        let id = op.operation_id.to_string();
        self.side
            .sim
            .ledger()
            .iter()
            .filter(|e| e.operation_id.as_deref() == Some(id.as_str()))
            .count()
    }
}

#[tokio::test]
async fn an_unreadable_record_is_counted_and_skipped_and_the_rest_of_its_page_goes_on() {
    let s = Stack::new().await;
    let mut ops = Vec::new();
    for i in 0..6 {
        ops.push(s.pending(&format!("rec-unreadable-{i}")).await);
    }
    // One record loses an attribute every release wrote (a hand edit, a shape nobody wrote):
    // it stays in the index, due like the others.
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let bad = &ops[2];
    dynamodb
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
    let report = s.tick().await;
    assert_eq!(report.unreadable, 1, "counted");
    assert_eq!(report.reenqueued, 5, "the other five in the same tick");
    let line = &report.emf_lines(s.side.clock.now())[0];
    assert!(line.contains("\"UnreadableRecords\":1"), "{line}");
    while s.deliver().await > 0 {}
    for op in ops.iter().filter(|o| o.order_id != bad.order_id) {
        assert_eq!(s.current(op).await.status, OperationStatus::Succeeded);
    }
    // Every tick counts it again (and pages) until a person deals with it.
    assert_eq!(s.tick().await.unreadable, 1);
}

#[tokio::test]
async fn a_lost_send_message_is_recovered() {
    let s = Stack::new().await;
    // Checkout recorded it but the SendMessage never happened.
    let op = s.pending("rec-lost-send").await;
    assert_eq!(queue_depth(&s.sqs, &s.queue_url).await, 0);

    assert_eq!(
        s.tick().await.reenqueued,
        0,
        "inside the grace period: left alone"
    );
    s.side.clock.advance(Duration::from_secs(301));
    let report = s.tick().await;
    assert_eq!(report.reenqueued, 1);
    assert_eq!(queue_depth(&s.sqs, &s.queue_url).await, 1);

    assert_eq!(s.deliver().await, 1);
    assert_eq!(s.current(&op).await.status, OperationStatus::Succeeded);
    assert_eq!(s.ledger_for(&op), 1);
}

#[tokio::test]
async fn a_replayed_500_stays_unknown_until_the_window_then_search_settles_it() {
    let s = Stack::new().await;
    let op = s.pending("rec-500").await;
    s.side.sim.push_script([FaultKind::ServerErrorAfterCommit]);
    execute_charge(&s.deps.charge, &op.key(), &op.operation_id)
        .await
        .unwrap();
    assert_eq!(s.current(&op).await.status, OperationStatus::Unknown);
    assert_eq!(s.side.sim.injected()[&FaultKind::ServerErrorAfterCommit], 1);

    // Inside the window the reconciler re-drives; the key replays the 500; still unknown.
    let mut redriven = 0;
    for _ in 0..5 {
        s.side.clock.advance(HOUR);
        redriven += s.tick().await.redriven;
        while s.deliver().await > 0 {}
        assert_eq!(s.current(&op).await.status, OperationStatus::Unknown);
    }
    assert!(redriven >= 3, "re-driven with backoff, got {redriven}");
    assert_eq!(s.ledger_for(&op), 1, "never a second PaymentIntent");

    // Past the window and the search lag: settled by search.
    s.side.clock.advance(19 * HOUR);
    let report = s.tick().await;
    assert_eq!(report.settled, 1, "{report:?}");
    let rec = s.current(&op).await;
    assert_eq!(rec.status, OperationStatus::Succeeded);
    assert_eq!(rec.next_due_at, None, "left the unknown index");
    assert_eq!(s.ledger_for(&op), 1);
    assert_eq!(s.side.sim.request_counts().search, 1);
}

#[tokio::test]
async fn search_waits_for_its_lag() {
    let s = Stack::new().await;
    let op = s.pending("rec-lag").await;
    s.side.sim.push_script([FaultKind::DropAfterCommit]);
    execute_charge(&s.deps.charge, &op.key(), &op.operation_id)
        .await
        .unwrap();
    s.side.clock.advance(23 * HOUR + Duration::from_secs(60));
    let report = s.tick().await;
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
    assert_eq!(s.tick().await.settled, 1);
    assert_eq!(s.side.sim.request_counts().search, 1);
    assert_eq!(s.ledger_for(&op), 1);
}

#[tokio::test]
async fn zero_or_two_matches_go_to_review_with_a_reason() {
    let s = Stack::new().await;
    let zero = s.pending("rec-zero").await;
    let two = s.pending("rec-two").await;
    s.side.sim.push_script([FaultKind::ServerErrorBeforeCommit]);
    execute_charge(&s.deps.charge, &zero.key(), &zero.operation_id)
        .await
        .unwrap();
    s.side.sim.push_script([FaultKind::DropAfterCommit]);
    execute_charge(&s.deps.charge, &two.key(), &two.operation_id)
        .await
        .unwrap();
    // A second PaymentIntent for the same operation, made by hand under another key.
    let mut by_hand = CreatePaymentIntent::for_operation(&two);
    by_hand.idempotency_key = charge_once::OperationId::new_random().idempotency_key();
    s.side.gateway().create(&by_hand).await.unwrap();

    s.side.clock.advance(24 * HOUR);
    let report = s.tick().await;
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
    let later = s.tick().await;
    assert_eq!(later.examined, 0);
    assert_eq!(later.in_review, 2);
    assert_eq!(later.oldest_in_review_age, Duration::from_secs(300));
}

#[tokio::test]
async fn a_requires_action_intent_goes_to_review_after_the_stuck_bound() {
    let s = Stack::new().await;
    let mut op = operation("rec-stuck", 1500, s.side.clock.now());
    op.params.payment_method = PaymentMethodId::parse("pm_card_sim_requiresAction").unwrap();
    s.store.create_if_absent(&op).await.unwrap();
    let first = execute_charge(&s.deps.charge, &op.key(), &op.operation_id)
        .await
        .unwrap();
    assert_eq!(first.status, OperationStatus::Unknown);
    let pi = first.external_id.clone().expect("the intent exists");

    // Past the key window but inside the bound (72 h by default): looked at, left unknown.
    s.side.clock.advance(71 * HOUR);
    let report = s.tick().await;
    assert_eq!(
        (report.still_unknown, report.sent_to_review),
        (1, 0),
        "{report:?}"
    );
    assert!(s.current(&op).await.review.is_none());

    s.side.clock.advance(2 * HOUR);
    let report = s.tick().await;
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

    // The tick's EMF lines: InReview / OldestInReviewAge, and SentToReview by reason class.
    let lines: Vec<serde_json::Value> = report
        .emf_lines(s.side.clock.now())
        .iter()
        .filter_map(|l| charge_once::telemetry::parse_emf(l))
        .collect();
    assert_eq!(lines[0]["InReview"], 1.0);
    assert_eq!(lines[0]["OldestInReviewAge"], 0.0);
    assert!(
        lines[0].get("SentToReview").is_none(),
        "counted once, by class"
    );
    assert_eq!(lines[1]["ReasonClass"], "stuck_requires_action");
    assert_eq!(lines[1]["SentToReview"], 1.0);
    assert_eq!(lines[1]["Function"], "reconciler");
}

#[tokio::test]
async fn two_overlapping_ticks_reach_the_same_state_without_extra_charges() {
    let s = Stack::new().await;
    let mut lost_sends = Vec::new();
    for i in 0..6 {
        lost_sends.push(s.pending(&format!("rec-overlap-send-{i}")).await);
    }
    let mut unknowns = Vec::new();
    for i in 0..6 {
        let op = s.pending(&format!("rec-overlap-unknown-{i}")).await;
        s.side.sim.push_script([FaultKind::DropAfterCommit]);
        execute_charge(&s.deps.charge, &op.key(), &op.operation_id)
            .await
            .unwrap();
        unknowns.push(op);
    }
    let created_before = s.side.sim.ledger().len();
    s.side.clock.advance(24 * HOUR);

    let (a, b) = tokio::join!(s.tick(), s.tick());
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
    assert_eq!(queue_depth(&s.sqs, &s.queue_url).await, 6);
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
    let s = Stack::new().await;
    for i in 0..120 {
        s.pending(&format!("rec-page-{i:03}")).await;
    }
    s.side.clock.advance(Duration::from_secs(301));

    // A budget that runs out after 40 operations: the tick stops cleanly, the rest stays due.
    let calls = AtomicU32::new(0);
    let budget = move || {
        if calls.fetch_add(1, Ordering::SeqCst) < 42 {
            PLENTY
        } else {
            Duration::ZERO
        }
    };
    let first = reconcile_tick(&s.deps, &budget, Duration::from_secs(25))
        .await
        .unwrap();
    assert!(first.stopped_early);
    assert!(first.reenqueued > 0 && first.reenqueued < 120, "{first:?}");

    let second = s.tick().await;
    assert!(!second.stopped_early);
    assert_eq!(
        first.reenqueued + second.reenqueued,
        120,
        "nothing lost, nothing twice"
    );
    assert!(second.pages >= 2, "paged: {second:?}");
    assert_eq!(queue_depth(&s.sqs, &s.queue_url).await, 120);
}
