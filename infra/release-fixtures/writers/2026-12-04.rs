//! Release fixture adapter of release 2026-12-04 (commit 2a0acd9): what its API does differently
//! from the common writer's steps (`writers/common/main.rs`, which says how the two are put together).
//!
//! Compared with 2026-12-03 (copied from its adapter): refunds. The ten charge cases are written as
//! before (the same API for them). After the inbox and the outcome events are read, this adapter
//! writes `refunds.json` and `refund_messages.json` ([`refunds`]): one more order,
//! `ord-fx-refunded`, whose succeeded charge carries the reservations of nine refunds (sort key
//! `refund#r-NN`), one in each state a refund record is stored in, each driven there by the
//! release's own door write (`create_refund`), executor (`execute` over `FakeGateway`'s
//! Refunds), store (`fail_refund_later`) and operator re-drive. They come after the outcome
//! events so the stream those read holds the ten charge cases only, as in earlier releases.

#[path = "inbox.rs"]
mod inbox;
#[path = "operator.rs"]
mod operator;
#[path = "outcome_events.rs"]
mod outcome_events;

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::dynamodb::EventRecord;
use charge_once::adapters::eventbridge::EventBridgePublisher;
use charge_once::adapters::sqs::SqsDeadLetters;
use charge_once::telemetry::DiscardMetrics;
use charge_core::{operation::{AuditEntry, Operation, OperationStatus}, domain::{ChargeParams, OrderId, Principal}, time::{Clock, Timestamp}, outcome::PaymentIntentStatus};
use notify::handler::{relay, Notify};
use serde_json::Value;
use testkit::aws::fresh_queue;

// Where this release keeps what `inbox.rs` and `outcome_events.rs` use.
use charge_once::adapters::dynamodb::item::item_json as image_json;
use charge_once::ports::{Admitted, EventInbox, INBOX_TTL};

use crate::{Release, World, OPERATOR_ARN, OPERATOR_LABEL, REQUESTED_BY};

/// chargectl's REDRIVE_DUE_IN and LEASE_MARGIN at this commit.
const REDRIVE_DUE_IN: Duration = Duration::from_secs(5 * 60);
const LEASE_MARGIN: Duration = Duration::from_secs(120);

pub struct Adapter;

impl Release for Adapter {
    fn new() -> Self {
        Adapter
    }

    fn operation(
        order_id: OrderId,
        params: ChargeParams,
        now: Timestamp,
        pending_grace: Duration,
    ) -> Operation {
        ChargeParams::check_chargeable(params.amount, &params.currency)
            .expect("an amount Stripe accepts");
        let requested_by = Principal::iam(REQUESTED_BY).unwrap();
        Operation::new(order_id, params, requested_by, now, pending_grace)
    }

    async fn execute_processing(&self, w: &World, op: &Operation) -> Operation {
        w.gateway.set_first_status(PaymentIntentStatus::Processing);
        let after = w.execute(op).await;
        w.gateway.set_first_status(PaymentIntentStatus::Succeeded);
        after
    }

    async fn resolve_failed(&self, w: &World, reviewed: &Operation, note: &str) {
        operator::resolve_failed(w, reviewed, note).await;
    }

    async fn redrive(&self, w: &World, reviewed: &Operation, note: &str) {
        operator::redrive(w, reviewed, note).await;
    }

    async fn more_files(&self, w: &World) -> Vec<(&'static str, Vec<Value>)> {
        let inbox = inbox::entries(w).await;
        let events = outcome_events::delivered(w).await;
        let (refunds, messages) = refunds::written(w).await;
        vec![
            ("inbox.json", inbox),
            ("outcome_events.json", events),
            ("refunds.json", refunds),
            ("refund_messages.json", messages),
        ]
    }
}

/// What chargectl writes into the history for an operator's action at this commit.
fn audit(
    w: &World,
    action: &str,
    op: &Operation,
    new_status: OperationStatus,
    note: &str,
) -> AuditEntry {
    AuditEntry {
        action: action.into(),
        previous_status: op.status,
        new_status,
        note: note.into(),
        at: w.clock.now(),
        caller: OPERATOR_ARN.into(),
        label: Some(OPERATOR_LABEL.into()),
        forced: None,
        // chargectl moves the record's review reason into the entry, so a settled record keeps why
        // it was in review.
        review: op.review.as_ref().map(|r| r.reason.clone()),
        replaced_external_id: None,
    }
}

/// The release's notify relay over `records`, publishing to `bus` with its EventBridge publisher,
/// reading back from the operations table, with a fresh standard queue as its DLQ: how many events
/// it published.
async fn publish(
    w: &World,
    events: &aws_sdk_eventbridge::Client,
    bus: &str,
    records: &[EventRecord],
) -> usize {
    let dlq = fresh_queue(&w.sqs, "notify-dlq").await;
    let deps = Notify {
        store: w.store.clone(),
        publisher: Arc::new(EventBridgePublisher::new(events.clone(), bus)),
        dead_letters: Arc::new(SqsDeadLetters::new(w.sqs.clone(), &dlq)),
        clock: Arc::new(w.clock.clone()),
        metrics: Arc::new(DiscardMetrics),
    };
    let (response, report) = relay(&deps, records).await;
    assert!(response.batch_item_failures.is_empty(), "{report:?}");
    assert_eq!(report.not_in_table + report.parked, 0, "{report:?}");
    report.published
}

/// The refund cases: one order's charge and its nine refunds, each in one state.
mod refunds {
    use std::time::Duration;

    use charge_once::ports::{OperationQueue, OperationStore, QueuedOperation};
    use charge_core::{store::{Claim, ClaimRequest, RefundFailedLater, ReleaseRefund}, store_rules::RefundCreated};
    use charge_core::refund::{self, request::RefundRequest, RefundStatus};
    use charge_core::{domain::{Amount, OperationId, OrderId, Principal, RefundId}, time::{Clock, Timestamp}, operation::{Lease, LeaseToken, Operation, OperationStatus}, outcome::PaymentIntentStatus};
    use serde_json::{json, Value};

    use super::{Adapter, REQUESTED_BY};
    use crate::{item_json, params, scan, Release, World, T0};

    /// The refund cases, in order: refund `r-NN` (NN = i + 1) is operation
    /// `f1f1f1f1-0000-4000-8000-0000000001NN`, 300 eur each of the 4200 charged.
    pub const CASES: &[&str] = &[
        "refund_pending",
        "refund_unknown_with_id",
        "refund_unknown_without_id",
        "refund_leased",
        "refund_succeeded",
        "refund_failed",
        "refund_failed_later",
        "refund_in_review",
        "refund_redriven",
    ];
    /// The charge the refunds are of (the case after the ten charge cases).
    const CHARGE_CASE: &str = "refunded";
    const CHARGE_OPERATION: &str = "f1f1f1f1-0000-4000-8000-000000000011";
    /// The lease token of `refund_leased`.
    const LEASE_TOKEN: &str = "f1f1f1f1-1ea5-4e00-8000-000000000002";
    const AMOUNT: i64 = 300;

    fn refund_id(i: usize) -> RefundId {
        RefundId::parse(&format!("r-{:02}", i + 1)).unwrap()
    }

    /// The charge, checked out and executed: succeeded at the fake Stripe, 30 h after `T0`.
    async fn charge(w: &World) -> Operation {
        w.clock
            .set(Timestamp::from_millis(T0 + 10 * 3 * 3600 * 1000));
        let order_id = OrderId::parse(&format!("ord-fx-{CHARGE_CASE}")).unwrap();
        let mut op = Adapter::operation(order_id, params(0), w.clock.now(), w.policy.pending_grace);
        op.operation_id = OperationId::parse(CHARGE_OPERATION).unwrap();
        w.store.create_if_absent(&op).await.unwrap();
        let after = w.execute(&op).await;
        assert_eq!(after.status, OperationStatus::Succeeded);
        after
    }

    /// Refund `i` as the door accepts it, 10 min after the previous one: written with its
    /// reservation, then (unless `lose_enqueue`) its first message.
    async fn accept(w: &World, charge: &Operation, i: usize) -> Operation {
        w.advance(Duration::from_secs(600));
        let charge = w.store.get(&charge.key()).await.unwrap().unwrap();
        let request = RefundRequest {
            amount: Some(Amount::new(AMOUNT).unwrap()),
            reason: None,
        };
        let now = w.clock.now();
        let (params, reserve) = refund::reserve(&charge, &request, now).unwrap();
        let mut op = Operation::new_refund(
            charge.order_id.clone(),
            refund_id(i),
            &request,
            params,
            Principal::iam(REQUESTED_BY).unwrap(),
            now,
            w.policy.pending_grace,
        );
        op.operation_id =
            OperationId::parse(&format!("f1f1f1f1-0000-4000-8000-0000000001{:02}", i + 1)).unwrap();
        let created = w.store.create_refund(&op, &reserve).await.unwrap();
        assert_eq!(created, RefundCreated::New(op.clone()), "{}", CASES[i]);
        w.queue.send(&QueuedOperation::first(&op)).await.unwrap();
        op
    }

    /// Refund `i` as Stripe refuses it while the intent is not succeeded there: in review.
    async fn reviewed(w: &World, charge: &Operation, i: usize) -> Operation {
        let op = accept(w, charge, i).await;
        let pi = charge.external_id.clone().unwrap();
        w.gateway.set_status(&pi, PaymentIntentStatus::Processing);
        let after = w.execute(&op).await;
        w.gateway.set_status(&pi, PaymentIntentStatus::Succeeded);
        assert!(after.review.is_some(), "{after:?}");
        after
    }

    /// Drives every refund case into its state; the records (`refunds.json`: the charge, then
    /// the refunds in case order) and the refunds' messages (`refund_messages.json`).
    pub async fn written(w: &World) -> (Vec<Value>, Vec<Value>) {
        // Everything the charge cases sent was read already (messages.json).
        let charge = charge(w).await;
        let mut i = 0..;
        let mut next = || i.next().unwrap();

        // refund_pending: accepted, its message sent, never executed.
        accept(w, &charge, next()).await;

        // refund_unknown_with_id: Stripe made it `pending`: unknown, its Stripe id recorded.
        let op = accept(w, &charge, next()).await;
        w.gateway.set_refund_first_status(RefundStatus::Pending);
        let after = w.execute(&op).await;
        w.gateway.set_refund_first_status(RefundStatus::Succeeded);
        assert!(after.status == OperationStatus::Unknown && after.stripe_refund_id.is_some());

        // refund_unknown_without_id: made, the answer lost: unknown, no Stripe id.
        let op = accept(w, &charge, next()).await;
        w.gateway
            .script_refund(charge_once::memory::FakeFault::LoseResponse);
        let after = w.execute(&op).await;
        assert!(after.status == OperationStatus::Unknown && after.stripe_refund_id.is_none());

        // refund_leased: claimed by the charge function, its Stripe call in flight.
        let op = accept(w, &charge, next()).await;
        w.advance(Duration::from_secs(2));
        let now = w.clock.now();
        let claim = w
            .store
            .claim(&ClaimRequest {
                key: op.key(),
                operation_id: op.operation_id,
                lease: Lease {
                    token: LeaseToken::parse(LEASE_TOKEN).unwrap(),
                    expires_at: now.plus(w.policy.lease_ttl),
                },
                now,
            })
            .await
            .unwrap();
        assert!(matches!(claim, Claim::Claimed(_)), "{claim:?}");

        // refund_succeeded: the money went back; the reservation stays.
        let op = accept(w, &charge, next()).await;
        assert_eq!(w.execute(&op).await.status, OperationStatus::Succeeded);

        // refund_failed: Stripe made it `failed`: failed, its reservation given back.
        let op = accept(w, &charge, next()).await;
        w.gateway.set_refund_first_status(RefundStatus::Failed);
        let after = w.execute(&op).await;
        w.gateway.set_refund_first_status(RefundStatus::Succeeded);
        assert_eq!(after.status, OperationStatus::Failed);

        // refund_failed_later: succeeded, then Stripe's word (a closed card) that it failed.
        let op = accept(w, &charge, next()).await;
        let succeeded = w.execute(&op).await;
        assert_eq!(succeeded.status, OperationStatus::Succeeded);
        w.advance(Duration::from_secs(3600));
        let now = w.clock.now();
        let later = w
            .store
            .fail_refund_later(&RefundFailedLater {
                key: succeeded.key(),
                operation_id: succeeded.operation_id,
                failure_reason: "expired_or_canceled_card".into(),
                release: ReleaseRefund {
                    charge: charge.key(),
                    amount: succeeded.params.amount(),
                    now,
                },
                now,
            })
            .await
            .unwrap();
        assert!(
            matches!(later, charge_core::store::Recorded::Written(_)),
            "{later:?}"
        );

        // refund_in_review: Stripe refused the create (the intent not succeeded there): review.
        reviewed(w, &charge, next()).await;

        // refund_redriven: in review, then `chargectl redrive` 2 h later.
        let op = reviewed(w, &charge, next()).await;
        w.advance(Duration::from_secs(2 * 3600));
        super::operator::redrive(w, &op, "intent succeeded again; try again").await;
        assert_eq!(next(), CASES.len());

        let now = w.store.get(&charge.key()).await.unwrap().unwrap();
        // Seven hold their 300 (pending, unknown twice, leased, succeeded, review twice); the two
        // failed gave theirs back.
        assert_eq!(now.refund_reserved, 7 * AMOUNT);
        (records(w).await, super::drain_refunds(w).await)
    }

    /// The order's records: the charge, then its refunds in case order, each with the key its
    /// Stripe creates carry.
    async fn records(w: &World) -> Vec<Value> {
        let mut found = Vec::new();
        for item in &scan(&w.dynamo, w.store.table()).await {
            let op = charge_once::adapters::dynamodb::item::operation_from_item(item)
                .expect("the release reads back what it wrote");
            if op.order_id.as_str() != format!("ord-fx-{CHARGE_CASE}") {
                continue;
            }
            let (at, case) = match op.kind.refund_id() {
                None => (0, CHARGE_CASE.to_owned()),
                Some(id) => {
                    let n: usize = id.as_str().trim_start_matches("r-").parse().unwrap();
                    (n, CASES[n - 1].to_owned())
                }
            };
            let key = op.idempotency_key();
            found.push((
                at,
                json!({ "case": case, "idempotency_key": key.as_str(), "item": item_json(item) }),
            ));
        }
        assert_eq!(found.len(), 1 + CASES.len());
        found.sort_by_key(|(at, _)| *at);
        found.into_iter().map(|(_, v)| v).collect()
    }
}

/// The refunds' messages on the FIFO queue (one group: the order), received with their
/// attributes and deleted, by dedup id.
async fn drain_refunds(w: &World) -> Vec<Value> {
    use aws_sdk_sqs::types::MessageSystemAttributeName as A;
    let mut got: Vec<(String, Value)> = Vec::new();
    let mut empty = 0;
    while empty < 2 {
        let out = w
            .sqs
            .receive_message()
            .queue_url(&w.queue_url)
            .max_number_of_messages(10)
            .message_system_attribute_names(A::All)
            .send()
            .await
            .expect("ReceiveMessage on moto");
        if out.messages().is_empty() {
            empty += 1;
            continue;
        }
        empty = 0;
        for m in out.messages() {
            let attrs = m.attributes().cloned().unwrap_or_default();
            let group = attrs.get(&A::MessageGroupId).cloned().expect("group id");
            let dedup = attrs
                .get(&A::MessageDeduplicationId)
                .cloned()
                .expect("dedup id");
            got.push((
                dedup.clone(),
                serde_json::json!({
                    "case": "refunded",
                    "body": m.body().expect("body"),
                    "group_id": group,
                    "dedup_id": dedup,
                }),
            ));
            w.sqs
                .delete_message()
                .queue_url(&w.queue_url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
    got.sort_by(|a, b| a.0.cmp(&b.0));
    got.into_iter().map(|(_, v)| v).collect()
}
