//! Release fixture adapter of release 2026-12-07 (commit 6345861): what its API does differently
//! from the common writer's steps (`writers/common/main.rs`, which says how the two are put together).
//!
//! Compared with 2026-12-04 (copied from its adapter): charge attempts (a declined order charged
//! again, as attempt `n` under the same order). The ten charge cases, the inbox, the outcome
//! events and the refund cases are written as before; their files are byte-identical to
//! 2026-12-04's (the release writes those records as before: `capture_method` automatic is not
//! stored, `charge_attempt` 1 is not stored on a refund, a first attempt's message stays v1).
//! What moved in the API: the store port is split (`OperationReads`, `OperationCreates`, ...; the
//! common writer has every port trait in scope), a refund is created by `create_beside` with its
//! `ChargeClaim::Reserve` (was `create_refund`), `Operation::stripe_refund_id` is a method, and
//! `ManualResolution` carries `stripe_refund_id`, `release` and `authorization` (so this adapter
//! writes chargectl's resolve and redrive itself, [`operator`], instead of declaring the common
//! `operator.rs`).
//!
//! What it adds, after the refund cases ([`attempts`]): `attempts.json` and
//! `attempt_messages.json`, three orders with more than one charge attempt, each attempt started
//! by the door's own rule (`charge_core::attempt::decide`) and the store's `create_attempt`, each
//! executed by the release's executor over `FakeGateway`: a head (sort key `charge`) naming its
//! `latest_attempt`, later attempts `charge#<n>` (message version 5 with `attempt`), and a refund
//! of attempt 2 (`charge_attempt` 2, its reservation on `charge#2`).
//!
//! And the first fixtures of captures, cancels and disputes ([`takes`], after the attempts):
//! `captures.json`, `cancels.json`, `disputes.json` and `take_messages.json`: a manual-capture
//! order authorized then captured (the capture record, the charge's `taken_by` and
//! `amount_captured`), one authorized then canceled (the charge `failed`, `taken_by` the cancel),
//! and a paid order's dispute record beside the charge's side, each by the door's own rules
//! (`take::take`, `take::initial`; the dispute plan the events function's shell runs) and the
//! store's `create_beside`.

#[path = "inbox.rs"]
mod inbox;
#[path = "outcome_events.rs"]
mod outcome_events;

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::dynamodb::EventRecord;
use charge_core::{
    domain::{ChargeParams, OrderId, Principal},
    operation::{AuditEntry, Operation, OperationStatus},
    outcome::PaymentIntentStatus,
    time::{Clock, Timestamp},
};
use charge_once::adapters::eventbridge::EventBridgePublisher;
use charge_once::adapters::sqs::SqsDeadLetters;
use charge_once::telemetry::DiscardMetrics;
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
        let (attempts, attempt_messages) = attempts::written(w).await;
        let taken = takes::written(w).await;
        vec![
            ("inbox.json", inbox),
            ("outcome_events.json", events),
            ("refunds.json", refunds),
            ("refund_messages.json", messages),
            ("attempts.json", attempts),
            ("attempt_messages.json", attempt_messages),
            ("captures.json", taken.captures),
            ("cancels.json", taken.cancels),
            ("disputes.json", taken.disputes),
            ("take_messages.json", taken.messages),
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

    use charge_core::refund::{self, request::RefundRequest, RefundStatus};
    use charge_core::store::{Claim, ClaimRequest, RefundFailedLater, ReleaseRefund};
    use charge_core::store_rules::{ChargeClaim, CreatedBeside};
    use charge_core::{
        domain::{Amount, OperationId, OrderId, Principal, RefundId},
        operation::{Lease, LeaseToken, Operation, OperationStatus},
        outcome::PaymentIntentStatus,
        time::{Clock, Timestamp},
    };
    use charge_once::ports::{
        OperationCreates, OperationLeases, OperationQueue, OperationReads, QueuedOperation,
    };
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
        let created = w
            .store
            .create_beside(&op, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap();
        assert_eq!(created, CreatedBeside::New(op.clone()), "{}", CASES[i]);
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
        assert!(after.status == OperationStatus::Unknown && after.stripe_refund_id().is_some());

        // refund_unknown_without_id: made, the answer lost: unknown, no Stripe id.
        let op = accept(w, &charge, next()).await;
        w.gateway
            .script_refund(charge_once::memory::FakeFault::LoseResponse);
        let after = w.execute(&op).await;
        assert!(after.status == OperationStatus::Unknown && after.stripe_refund_id().is_none());

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
        assert_eq!(now.refund_reserved(), 7 * AMOUNT);
        (records(w).await, super::drain_orders(w).await)
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

/// The messages on the FIFO queue, received with their attributes and deleted: each labelled
/// with its group's case (the order `ord-fx-<case>`), by group, then dedup id. For the refunds
/// (one group, `ord-fx-refunded`) that is by dedup id, as 2026-12-04 wrote them.
async fn drain_orders(w: &World) -> Vec<Value> {
    use aws_sdk_sqs::types::MessageSystemAttributeName as A;
    let mut got: Vec<(String, String, Value)> = Vec::new();
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
            let case = group
                .strip_prefix("ord-fx-")
                .expect("a fixture order")
                .to_owned();
            got.push((
                group.clone(),
                dedup.clone(),
                serde_json::json!({
                    "case": case,
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
    got.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    got.into_iter().map(|(.., v)| v).collect()
}

/// An operator's resolve and redrive as `chargectl` writes them at this commit: the common
/// `operator.rs` with the fields `ManualResolution` gained (`stripe_refund_id`, `release`,
/// `authorization`: none for a charge resolved `failed` from review, as chargectl sets them).
mod operator {
    use charge_core::store::{ManualResolution, OperatorGuard, Recorded, Reschedule};
    use charge_core::{
        operation::{Operation, OperationStatus},
        time::Clock,
    };
    use charge_once::ports::ManualResolutions;
    use charge_once::reconciler::{redrive as reconciler_redrive, Redriven};

    use super::{audit, LEASE_MARGIN, REDRIVE_DUE_IN};
    use crate::World;

    /// `chargectl resolve --failed`: the store's resolve.
    pub async fn resolve_failed(w: &World, reviewed: &Operation, note: &str) {
        let now = w.clock.now();
        let audit = audit(w, "resolve_failed", reviewed, OperationStatus::Failed, note);
        let resolved = w
            .store
            .resolve(&ManualResolution {
                key: reviewed.key(),
                operation_id: reviewed.operation_id,
                status: OperationStatus::Failed,
                external_id: None,
                expected_updated_at: reviewed.updated_at,
                guard: OperatorGuard {
                    lease_cutoff: now.minus(LEASE_MARGIN),
                    audit,
                },
                stripe_refund_id: None,
                release: None,
                authorization: None,
            })
            .await
            .unwrap();
        assert!(matches!(resolved, Recorded::Written(_)), "{resolved:?}");
    }

    /// `chargectl redrive`: the guarded reschedule (a re-drive counted, the review cleared, the
    /// history appended), then the message with dedup id `<operation_id>:<redrives>`.
    pub async fn redrive(w: &World, reviewed: &Operation, note: &str) {
        let now = w.clock.now();
        let audit = audit(w, "redrive", reviewed, reviewed.status, note);
        let request = Reschedule {
            clear_review: true,
            operator: Some(OperatorGuard {
                lease_cutoff: now.minus(LEASE_MARGIN),
                audit,
            }),
            ..Reschedule::redrive(reviewed, now.plus(REDRIVE_DUE_IN), now)
        };
        match reconciler_redrive(w.store.as_ref(), w.queue.as_ref(), request)
            .await
            .unwrap()
        {
            Redriven::Sent { .. } => {}
            Redriven::Refused(current) => panic!("redrive refused: {current:?}"),
            Redriven::NotSent { error, .. } => panic!("redrive not sent: {error}"),
        }
    }
}

/// The attempt cases: orders declined and charged again, each attempt started as the door
/// starts it and executed by the release's executor.
mod attempts {
    use std::time::Duration;

    use charge_core::attempt::{self, AttemptLimit, Door};
    use charge_core::refund::{self, request::RefundRequest};
    use charge_core::store::{Created, CreatedAttempt};
    use charge_core::store_rules::{ChargeClaim, CreatedBeside};
    use charge_core::{
        domain::{
            Amount, ChargeParams, OperationId, OrderId, PaymentMethodId, Principal, RefundId,
        },
        operation::{Operation, OperationStatus},
        time::{Clock, Timestamp},
    };
    use charge_once::memory::FakeFault;
    use charge_once::ports::{OperationCreates, OperationQueue, OperationReads, QueuedOperation};
    use serde_json::{json, Value};

    use super::{Adapter, REQUESTED_BY};
    use crate::{item_json, params, scan, Release, World, T0};

    /// The orders, in case order: order `ord-fx-<case>` is case number NN = 12 + i (after the
    /// ten charge cases and `refunded`), starts at `T0 + (NN - 1)·3 h`, and its attempt `n` is
    /// operation `f1f1f1f1-0000-4000-8000-00000000NN0n`.
    pub const CASES: &[&str] = &["retried", "retry-pending", "retry-third"];
    /// The refund of `retried`'s attempt 2, and its operation id.
    const REFUND_ID: &str = "r-01";
    const REFUND_OPERATION: &str = "f1f1f1f1-0000-4000-8000-000000000201";
    const REFUND_AMOUNT: i64 = 500;
    /// The cards order `i`'s attempts are made with, first to latest: stripe-sim's test cards
    /// for what the fake Stripe answered them here (a declined attempt's card declines there
    /// too), so a reader running the records on stripe-sim sees the same story. The pending
    /// attempts: `retry-pending`'s 2 succeeds there, `retry-third`'s 3 is declined.
    const CARDS: [&[&str]; 3] = [
        &["pm_card_chargeDeclined", "pm_card_mastercard"],
        &["pm_card_chargeDeclined", "pm_card_mastercard"],
        &[
            "pm_card_chargeDeclined",
            "pm_card_chargeDeclinedInsufficientFunds",
            "pm_card_visa_chargeDeclined",
        ],
    ];

    fn number(i: usize) -> usize {
        12 + i
    }

    fn order(i: usize) -> OrderId {
        OrderId::parse(&format!("ord-fx-{}", CASES[i])).unwrap()
    }

    fn operation_id(i: usize, n: u32) -> OperationId {
        OperationId::parse(&format!(
            "f1f1f1f1-0000-4000-8000-00000000{:02}0{n}",
            number(i)
        ))
        .unwrap()
    }

    /// What the customer asks for attempt `n`: the order's amount, currency and customer, its
    /// `n`-th card.
    fn asked(i: usize, n: u32) -> ChargeParams {
        ChargeParams {
            payment_method: PaymentMethodId::parse(CARDS[i][n as usize - 1]).unwrap(),
            ..params(number(i) - 1)
        }
    }

    /// The first attempt as checkout records and queues it, at `T0 + (NN - 1)·3 h`.
    async fn first(w: &World, i: usize) -> Operation {
        w.clock.set(Timestamp::from_millis(
            T0 + (number(i) as i64 - 1) * 3 * 3600 * 1000,
        ));
        let mut op =
            Adapter::operation(order(i), asked(i, 1), w.clock.now(), w.policy.pending_grace);
        op.operation_id = operation_id(i, 1);
        match w.store.create_if_absent(&op).await.unwrap() {
            Created::New(_) => {}
            Created::Existing(e) => panic!("{}: record existed: {e:?}", CASES[i]),
        }
        w.queue.send(&QueuedOperation::first(&op)).await.unwrap();
        op
    }

    /// Attempt `op` declined by Stripe (`code`): failed, its intent canceled.
    async fn declined(w: &World, op: &Operation, code: &'static str) {
        w.gateway.script(FakeFault::Decline(code));
        let after = w.execute(op).await;
        assert_eq!(after.status, OperationStatus::Failed, "{after:?}");
    }

    /// Attempt `n` asked 10 min later, as the door starts it: the order's attempts read
    /// (`attempts_of`), the door's rule (`attempt::decide`) answering a new attempt, the store's
    /// `create_attempt`, then its first message (version 5).
    async fn again(w: &World, i: usize, n: u32) -> Operation {
        w.advance(Duration::from_secs(600));
        let caller = Principal::iam(REQUESTED_BY).unwrap();
        let attempts = w.store.attempts_of(&order(i)).await.unwrap();
        assert_eq!(attempts.len(), n as usize - 1, "{}", CASES[i]);
        let request =
            Adapter::operation(order(i), asked(i, n), w.clock.now(), w.policy.pending_grace);
        let Ok(Door::Start(mut new)) =
            attempt::decide(&attempts, &request, &caller, AttemptLimit::DEFAULT)
        else {
            panic!("{}: the door starts no attempt {n}", CASES[i]);
        };
        assert_eq!(new.number(), n);
        new.op.operation_id = operation_id(i, n);
        let op = match w.store.create_attempt(&new).await.unwrap() {
            CreatedAttempt::New(op) => op,
            CreatedAttempt::Refused => panic!("{}: attempt {n} refused", CASES[i]),
        };
        w.queue.send(&QueuedOperation::first(&op)).await.unwrap();
        op
    }

    /// Drives the three orders; their records (`attempts.json`) and messages
    /// (`attempt_messages.json`).
    pub async fn written(w: &World) -> (Vec<Value>, Vec<Value>) {
        // Everything before was read already (refund_messages.json).

        // retried: attempt 1 declined, attempt 2 (another card) succeeded, then a refund of
        // attempt 2 accepted as the door accepts it, left pending.
        let op = first(w, 0).await;
        declined(w, &op, "card_declined").await;
        let op = again(w, 0, 2).await;
        assert_eq!(w.execute(&op).await.status, OperationStatus::Succeeded);
        w.advance(Duration::from_secs(600));
        let charge = w.store.charge_of(&order(0)).await.unwrap().unwrap();
        assert_eq!(
            charge.key(),
            op.key(),
            "the order's charge is its latest attempt"
        );
        let request = RefundRequest {
            amount: Some(Amount::new(REFUND_AMOUNT).unwrap()),
            reason: None,
        };
        let now = w.clock.now();
        let (refund_params, reserve) = refund::reserve(&charge, &request, now).unwrap();
        let mut refund = Operation::new_refund(
            charge.order_id.clone(),
            RefundId::parse(REFUND_ID).unwrap(),
            &request,
            refund_params,
            Principal::iam(REQUESTED_BY).unwrap(),
            now,
            w.policy.pending_grace,
        );
        refund.operation_id = OperationId::parse(REFUND_OPERATION).unwrap();
        let created = w
            .store
            .create_beside(&refund, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap();
        assert_eq!(created, CreatedBeside::New(refund.clone()));
        w.queue
            .send(&QueuedOperation::first(&refund))
            .await
            .unwrap();

        // retry-pending: attempt 1 declined, attempt 2 asked and queued, never executed.
        let op = first(w, 1).await;
        declined(w, &op, "card_declined").await;
        again(w, 1, 2).await;

        // retry-third: two declines, attempt 3 asked and queued (its write checks attempt 2,
        // not the head, for `failed`), never executed.
        let op = first(w, 2).await;
        declined(w, &op, "card_declined").await;
        let op = again(w, 2, 2).await;
        declined(w, &op, "insufficient_funds").await;
        again(w, 2, 3).await;

        (records(w).await, super::drain_orders(w).await)
    }

    /// The three orders' records in case order, each order's attempts first to latest, then its
    /// refund; each with the key its Stripe creates carry (checked against the key the fake
    /// Stripe received, where the executor called create).
    async fn records(w: &World) -> Vec<Value> {
        let sent: std::collections::HashMap<String, String> = w
            .gateway
            .charges()
            .into_values()
            .filter(|c| !c.idempotency_key.is_empty())
            .map(|c| (c.operation_id.to_string(), c.idempotency_key))
            .collect();
        let mut found = Vec::new();
        for item in &scan(&w.dynamo, w.store.table()).await {
            let op = charge_once::adapters::dynamodb::item::operation_from_item(item)
                .expect("the release reads back what it wrote");
            let Some(i) = CASES
                .iter()
                .position(|c| op.order_id.as_str() == format!("ord-fx-{c}"))
            else {
                continue;
            };
            let key = op.idempotency_key();
            if let Some(sent) = sent.get(&op.operation_id.to_string()) {
                assert_eq!(
                    sent,
                    key.as_str(),
                    "the key the executor sent is the derived one"
                );
            }
            // Attempts first to latest, then refunds.
            let at = op.kind.attempt_no().unwrap_or(u32::MAX);
            found.push((
                (i, at),
                json!({ "case": CASES[i], "idempotency_key": key.as_str(), "item": item_json(item) }),
            ));
        }
        assert_eq!(found.len(), 2 + 1 + 2 + 3);
        found.sort_by_key(|(at, _)| *at);
        found.into_iter().map(|(_, v)| v).collect()
    }
}

/// The take and dispute cases: captures, cancels and disputes had no fixtures before this
/// release.
mod takes {
    use std::sync::Arc;
    use std::time::Duration;

    use charge_core::charge::state::Taker;
    use charge_core::dispute::plan::{plan, DisputeWrite};
    use charge_core::dispute::DisputeStatus;
    use charge_core::store::Created;
    use charge_core::store_rules::{ChargeClaim, CreatedBeside};
    use charge_core::take::request::{CancelRequest, CancellationReason, CaptureRequest};
    use charge_core::take::{self, TakeRequest};
    use charge_core::{
        domain::{CaptureMethod, ChargeParams, OperationId, OperationKind, OrderId, Principal},
        operation::{Operation, OperationKey, OperationStatus},
        time::{Clock, Timestamp},
    };
    use charge_once::ports::{OperationCreates, OperationQueue, OperationReads, QueuedOperation};
    use serde_json::{json, Value};

    use super::{Adapter, REQUESTED_BY};
    use crate::{item_json, params, scan, Release, World, T0};

    /// The orders, in case order: order `ord-fx-<case>` is case number NN = 15 + i, starts at
    /// `T0 + (NN - 1)·3 h`; its charge is operation `f1f1f1f1-0000-4000-8000-00000000NN01`, the
    /// capture, cancel or dispute record `…00000000NN11`.
    pub const CASES: &[&str] = &["captured", "canceled", "disputed"];
    /// The dispute Stripe opens on `disputed`'s charge.
    const DISPUTE_ID: &str = "dp_FxDisputed17";

    pub struct Taken {
        pub captures: Vec<Value>,
        pub cancels: Vec<Value>,
        pub disputes: Vec<Value>,
        pub messages: Vec<Value>,
    }

    fn number(i: usize) -> usize {
        15 + i
    }

    fn order(i: usize) -> OrderId {
        OrderId::parse(&format!("ord-fx-{}", CASES[i])).unwrap()
    }

    fn operation_id(i: usize, xx: u32) -> OperationId {
        OperationId::parse(&format!(
            "f1f1f1f1-0000-4000-8000-00000000{:02}{xx:02}",
            number(i)
        ))
        .unwrap()
    }

    /// Order `i`'s charge checked out and executed at `T0 + (NN - 1)·3 h`: `capture` manual is
    /// authorized (`requires_capture` at the fake), automatic succeeded.
    async fn charged(w: &World, i: usize, capture: CaptureMethod) -> Operation {
        w.clock.set(Timestamp::from_millis(
            T0 + (number(i) as i64 - 1) * 3 * 3600 * 1000,
        ));
        let asked = ChargeParams {
            capture_method: capture,
            ..params(number(i) - 1)
        };
        let mut op = Adapter::operation(order(i), asked, w.clock.now(), w.policy.pending_grace);
        op.operation_id = operation_id(i, 1);
        assert!(matches!(
            w.store.create_if_absent(&op).await.unwrap(),
            Created::New(_)
        ));
        w.queue.send(&QueuedOperation::first(&op)).await.unwrap();
        let after = w.execute(&op).await;
        let expected = match capture {
            CaptureMethod::Manual => OperationStatus::Authorized,
            CaptureMethod::Automatic => OperationStatus::Succeeded,
        };
        assert_eq!(after.status, expected, "{after:?}");
        after
    }

    /// A capture or cancel of order `i`'s charge asked 10 min later, as the door writes it
    /// (`take::take` on the charge read by `charge_of`, `take::initial`, `create_beside` with its
    /// take), its first message (version 3), then executed.
    async fn taken(w: &World, i: usize, request: TakeRequest) -> Operation {
        w.advance(Duration::from_secs(600));
        let now = w.clock.now();
        let charge = w.store.charge_of(&order(i)).await.unwrap().unwrap();
        let kind = request.kind();
        let operation_id = operation_id(i, 11);
        let taker = Taker {
            capture: kind.is_capture(),
            operation_id,
        };
        let taking = take::take(&charge, &request, taker, now).unwrap();
        let op = Operation {
            operation_id,
            ..Operation::new_taking(
                charge.order_id.clone(),
                kind,
                request.fingerprint(),
                taking.params.clone(),
                Principal::iam(REQUESTED_BY).unwrap(),
                now,
                w.policy.pending_grace,
            )
        };
        let op = take::initial(op, &taking);
        let created = w
            .store
            .create_beside(&op, ChargeClaim::Take(&taking.take))
            .await
            .unwrap();
        assert_eq!(created, CreatedBeside::New(op.clone()), "{}", CASES[i]);
        w.queue.send(&QueuedOperation::first(&op)).await.unwrap();
        let after = w.execute(&op).await;
        assert_eq!(after.status, OperationStatus::Succeeded, "{after:?}");
        after
    }

    /// Drives the three orders; their files.
    pub async fn written(w: &World) -> Taken {
        // The fake dates authorizations (`capture_before`) and disputes by the writer's clock.
        w.gateway.set_clock(Arc::new(w.clock.clone()));

        // captured: authorized, then captured in full.
        charged(w, 0, CaptureMethod::Manual).await;
        let request = TakeRequest::Capture(CaptureRequest { amount: None });
        taken(w, 0, request).await;

        // canceled: authorized, then canceled (the customer asked): the charge ends failed.
        charged(w, 1, CaptureMethod::Manual).await;
        let request = TakeRequest::Cancel(CancelRequest {
            reason: Some(CancellationReason::RequestedByCustomer),
        });
        taken(w, 1, request).await;
        let charge = w.store.charge_of(&order(1)).await.unwrap().unwrap();
        assert_eq!(charge.status, OperationStatus::Failed, "{charge:?}");

        // disputed: paid, then 2 days later the customer's bank disputes it (needs response,
        // evidence due in 7 days); recorded as the events function's shell records it (the
        // plan over the record and the order's charge, then `create_beside`), with a fixed
        // operation id.
        let charge = charged(w, 2, CaptureMethod::Automatic).await;
        w.advance(Duration::from_secs(2 * 86_400));
        let now = w.clock.now();
        let pi = charge.external_id.clone().unwrap();
        let due_by = now.plus(Duration::from_secs(7 * 86_400));
        let dispute =
            w.gateway
                .open_dispute(DISPUTE_ID, &pi, DisputeStatus::NeedsResponse, Some(due_by));
        let key = OperationKey::of_kind(order(2), OperationKind::Dispute(dispute.id.clone()));
        let record = w.store.get(&key).await.unwrap();
        let charge = w.store.charge_of(&order(2)).await.unwrap();
        let DisputeWrite::Create {
            mut record,
            on_charge,
        } = plan(
            record.as_ref(),
            charge.as_ref(),
            &dispute,
            now,
            &w.policy.dispute,
        )
        else {
            panic!("the dispute's first record is a create");
        };
        record.operation_id = operation_id(2, 11);
        let created = w
            .store
            .create_beside(&record, ChargeClaim::Dispute(&on_charge))
            .await
            .unwrap();
        assert!(matches!(created, CreatedBeside::New(_)), "{created:?}");

        let mut files: [Vec<(usize, u32, Value)>; 3] = Default::default();
        for item in &scan(&w.dynamo, w.store.table()).await {
            let op = charge_once::adapters::dynamodb::item::operation_from_item(item)
                .expect("the release reads back what it wrote");
            let Some(i) = CASES
                .iter()
                .position(|c| op.order_id.as_str() == format!("ord-fx-{c}"))
            else {
                continue;
            };
            let key = op.idempotency_key();
            let at = u32::from(!op.kind.is_charge());
            files[i].push((
                i,
                at,
                json!({ "case": CASES[i], "idempotency_key": key.as_str(), "item": item_json(item) }),
            ));
        }
        let [captures, cancels, disputes] = files.map(|mut f| {
            assert_eq!(f.len(), 2, "a charge and its capture, cancel or dispute");
            f.sort_by_key(|(i, at, _)| (*i, *at));
            f.into_iter().map(|(.., v)| v).collect()
        });
        Taken {
            captures,
            cancels,
            disputes,
            messages: super::drain_orders(w).await,
        }
    }
}
