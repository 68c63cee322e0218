//! A refund through the one shell ([`charge_once::executor::execute`]) on the in-memory
//! ports: accepted as the door accepts it (the charge as read, the reservation in the same write),
//! then executed any number of times. Every test counts the refunds the fake Stripe made.

use std::sync::Arc;
use std::time::Duration;

use charge_core::plan::{Disposition, Policy, ReviewClass};
use charge_core::refund::{self, request::RefundRequest, RefundStatus};
use charge_core::store_rules::{ChargeClaim, CreatedBeside};
use charge_core::{
    domain::{Amount, Principal, RefundId},
    operation::{Operation, OperationStatus},
    outcome::PaymentIntentStatus,
    time::{Clock, ManualClock, Timestamp},
};
use charge_once::executor::{execute, EngineDeps};
use charge_once::memory::{FakeFault, FakeGateway, MemoryStore};
use charge_once::ports::{OperationCreates, OperationReads};
use charge_once::testing::CreateIn as _;

struct World {
    store: Arc<MemoryStore>,
    gateway: Arc<FakeGateway>,
    clock: Arc<ManualClock>,
    deps: EngineDeps,
}

impl World {
    fn new() -> Self {
        let store = Arc::new(MemoryStore::new());
        let gateway = Arc::new(FakeGateway::new());
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_800_000_000_000)));
        let deps = EngineDeps {
            store: store.clone(),
            gateway: gateway.clone(),
            clock: clock.clone(),
            policy: Policy::default(),
        };
        Self {
            store,
            gateway,
            clock,
            deps,
        }
    }

    /// A charge of 1000 usd, executed: succeeded at the fake Stripe.
    async fn charged(&self, order: &str) -> Operation {
        let op = charge_core::testing::order(order)
            .amount(1000)
            .at(self.clock.now())
            .create_in(self.store.as_ref())
            .await;
        let r = execute(&self.deps, &op.key(), &op.operation_id)
            .await
            .unwrap();
        assert_eq!(r.status, OperationStatus::Succeeded);
        self.store.get(&op.key()).await.unwrap().unwrap()
    }

    /// The refund `id` of `amount` of `charge` as it is stored now, accepted as the door does.
    async fn refund(&self, charge: &Operation, id: &str, amount: i64) -> Operation {
        let charge = self.store.get(&charge.key()).await.unwrap().unwrap();
        let request = RefundRequest {
            amount: Some(Amount::new(amount).unwrap()),
            reason: None,
        };
        let now = self.clock.now();
        let (params, reserve) = refund::reserve(&charge, &request, now).unwrap();
        let op = Operation::new_refund(
            charge.order_id.clone(),
            RefundId::parse(id).unwrap(),
            &request,
            params,
            Principal::jwt("support").unwrap(),
            now,
            Duration::from_secs(300),
        );
        let created = self
            .store
            .create_beside(&op, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap();
        assert_eq!(created, CreatedBeside::New(op.clone()));
        op
    }

    async fn reserved(&self, charge: &Operation) -> i64 {
        let charge = self.store.get(&charge.key()).await.unwrap().unwrap();
        charge.refund_reserved()
    }

    async fn run(&self, op: &Operation) -> charge_once::executor::ChargeReport {
        execute(&self.deps, &op.key(), &op.operation_id)
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn a_refund_is_made_once_however_often_it_is_delivered() {
    let w = World::new();
    let charge = w.charged("ord-r1").await;
    let refund = w.refund(&charge, "r-1", 400).await;
    let first = w.run(&refund).await;
    assert_eq!(first.status, OperationStatus::Succeeded);
    assert_eq!(first.gateway_calls, 1);
    let stored = w.store.get(&refund.key()).await.unwrap().unwrap();
    assert!(
        stored.stripe_refund_id().is_some(),
        "the refund's id is recorded"
    );
    let made = w.gateway.refunds();
    assert_eq!(made.len(), 1);
    let (_, made) = made.into_iter().next().unwrap();
    assert_eq!(made.amount, 400);
    assert_eq!(made.operation_id, refund.operation_id.to_string());
    assert_eq!(
        made.idempotency_key,
        format!("refund-op:{}", refund.operation_id),
        "the refund key, never the charge's"
    );
    // Delivered again: settled, no call.
    let again = w.run(&refund).await;
    assert_eq!(again.disposition, Disposition::AlreadySettled);
    assert_eq!(again.gateway_calls, 0);
    assert_eq!(w.gateway.refund_count(), 1);
    assert_eq!(
        w.reserved(&charge).await,
        400,
        "a succeeded refund keeps its reservation"
    );
    // The charge itself is untouched but for its reservation.
    let charge_now = w.store.get(&charge.key()).await.unwrap().unwrap();
    assert_eq!(charge_now.status, OperationStatus::Succeeded);
    assert_eq!(w.gateway.charge_count(), 1);
}

#[tokio::test]
async fn a_lost_answer_is_unknown_then_settled_by_the_same_key() {
    let w = World::new();
    let charge = w.charged("ord-r2").await;
    let refund = w.refund(&charge, "r-1", 250).await;
    w.gateway.script_refund(FakeFault::LoseResponse);
    let first = w.run(&refund).await;
    assert_eq!(
        first.status,
        OperationStatus::Unknown,
        "never failed, never succeeded"
    );
    assert_eq!(
        w.gateway.refund_count(),
        1,
        "the fault happened: made, answer lost"
    );
    w.clock.advance(Duration::from_secs(120));
    let second = w.run(&refund).await;
    assert_eq!(second.status, OperationStatus::Succeeded);
    assert_eq!(
        w.gateway.refund_count(),
        1,
        "the same key: no second refund"
    );
}

#[tokio::test]
async fn a_failed_refund_gives_its_reservation_back_and_a_pending_one_waits() {
    let w = World::new();
    let charge = w.charged("ord-r3").await;
    w.gateway.set_refund_first_status(RefundStatus::Pending);
    let refund = w.refund(&charge, "r-1", 600).await;
    let pending = w.run(&refund).await;
    assert_eq!(
        pending.status,
        OperationStatus::Unknown,
        "pending is not settled"
    );
    assert_eq!(w.reserved(&charge).await, 600);
    // Stripe says it failed: read back on the next look, failed, the 600 given back.
    let stored = w.store.get(&refund.key()).await.unwrap().unwrap();
    let id = stored
        .stripe_refund_id()
        .cloned()
        .expect("its id is recorded");
    w.gateway
        .set_refund_status(&id, RefundStatus::Failed, Some("expired_or_canceled_card"));
    w.clock.advance(Duration::from_secs(120));
    let failed = w.run(&refund).await;
    assert_eq!(failed.status, OperationStatus::Failed);
    assert_eq!(failed.gateway_calls, 1, "one retrieve, no create");
    assert_eq!(w.reserved(&charge).await, 0, "given back");
    assert_eq!(w.gateway.refund_count(), 1);
    // The twin: what was given back can be refunded again.
    let again = w.refund(&charge, "r-2", 1000).await;
    w.gateway.set_refund_first_status(RefundStatus::Succeeded);
    assert_eq!(w.run(&again).await.status, OperationStatus::Succeeded);
}

#[tokio::test]
async fn past_the_key_window_a_refund_is_settled_by_the_intent_s_list_never_created_again() {
    let w = World::new();
    let charge = w.charged("ord-r4").await;
    let refund = w.refund(&charge, "r-1", 300).await;
    w.gateway.script_refund(FakeFault::LoseResponse);
    assert_eq!(w.run(&refund).await.status, OperationStatus::Unknown);
    w.clock.advance(Duration::from_secs(24 * 3600));
    let settled = w.run(&refund).await;
    assert_eq!(
        settled.status,
        OperationStatus::Succeeded,
        "found in the list"
    );
    assert_eq!(w.gateway.refund_count(), 1, "never created again");
    let stored = w.store.get(&refund.key()).await.unwrap().unwrap();
    assert!(stored.stripe_refund_id().is_some());
}

#[tokio::test]
async fn past_the_key_window_with_no_refund_at_stripe_a_person_looks() {
    let w = World::new();
    let charge = w.charged("ord-r5").await;
    let refund = w.refund(&charge, "r-1", 300).await;
    // Nothing reached Stripe (a 500 before commit), and then the key window passed.
    w.gateway.script_refund(FakeFault::ServerErrorBeforeCommit);
    assert_eq!(w.run(&refund).await.status, OperationStatus::Unknown);
    assert_eq!(
        w.gateway.refund_count(),
        0,
        "the fault happened: nothing made"
    );
    w.clock.advance(Duration::from_secs(24 * 3600));
    let r = w.run(&refund).await;
    assert_eq!(r.sent_to_review, Some(ReviewClass::RefundListAmbiguous));
    assert_eq!(
        w.gateway.refund_count(),
        0,
        "never created with the key past its window"
    );
    assert_eq!(
        w.reserved(&charge).await,
        300,
        "still held: a person decides"
    );
}

#[tokio::test]
async fn a_charge_s_intent_declined_is_never_refunded() {
    let w = World::new();
    w.gateway.set_first_status(PaymentIntentStatus::Processing);
    let op = charge_core::testing::order("ord-r6")
        .amount(1000)
        .at(w.clock.now())
        .create_in(w.store.as_ref())
        .await;
    execute(&w.deps, &op.key(), &op.operation_id).await.unwrap();
    let unknown = w.store.get(&op.key()).await.unwrap().unwrap();
    let request = RefundRequest::default();
    assert!(
        refund::reserve(&unknown, &request, w.clock.now()).is_err(),
        "an unknown charge may have taken nothing: no refund"
    );
}

/// A refund the door let through before the customer's bank disputed the charge: Stripe
/// refuses it (`charge_disputed`, counted: one create, no refund made), and it settles
/// `failed` with its reservation given back, not retried, not a person's. Its twin: the same
/// refund while the dispute is an inquiry (Stripe says still refundable) is made.
#[tokio::test]
async fn a_refund_stripe_refuses_as_disputed_settles_failed_and_gives_its_reservation_back() {
    use charge_core::dispute::DisputeStatus;
    use std::sync::atomic::Ordering;
    for (status, made) in [
        (DisputeStatus::NeedsResponse, false),
        (DisputeStatus::WarningNeedsResponse, true),
    ] {
        let w = World::new();
        let charge = w.charged("ord-disputed").await;
        let refund = w.refund(&charge, "r-1", 400).await;
        let pi = charge.external_id.clone().unwrap();
        w.gateway.open_dispute("dp_1", &pi, status.clone(), None);
        let report = w.run(&refund).await;
        assert_eq!(
            w.gateway.calls.refund_create.load(Ordering::SeqCst),
            1,
            "{status}: Stripe was asked once"
        );
        let stored = w.store.get(&refund.key()).await.unwrap().unwrap();
        if made {
            assert_eq!(report.status, OperationStatus::Succeeded, "{status}");
            assert_eq!(w.gateway.refund_count(), 1);
            assert_eq!(w.reserved(&charge).await, 400);
        } else {
            assert_eq!(report.status, OperationStatus::Failed, "{status}");
            assert_eq!(report.disposition, Disposition::Settled);
            assert_eq!(report.sent_to_review, None);
            assert_eq!(stored.last_error.as_deref(), Some("charge_disputed"));
            assert!(stored.review.is_none());
            assert_eq!(w.gateway.refund_count(), 0, "Stripe made none");
            assert_eq!(w.reserved(&charge).await, 0, "the 400 given back");
        }
    }
}
