//! Refund events (`refund.created`, `refund.updated`, `refund.failed`, `charge.refund.updated`)
//! through the events function's whole path ([`charge_once::events::receive`]) on the in-memory
//! ports: the refund is retrieved at the fake Stripe and the refund rules decide. Every test
//! counts Stripe's refund reads, and that no refund was ever made by an event.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use charge_core::charge::event_plan::{EventMismatch, Ignored};
use charge_core::domain::{PaymentIntentId, StripeRefundId};
use charge_core::outbox::{outcome_of, Outcome};
use charge_core::outcome::{GatewayError, PaymentIntent};
use charge_core::plan::Policy;
use charge_core::refund::StripeRefund;
use charge_core::refund::{self, request::RefundRequest, RefundRefusal, RefundStatus};
use charge_core::store_rules::{ChargeClaim, CreatedBeside};
use charge_core::{
    domain::{Amount, Principal, RefundId},
    operation::{Operation, OperationStatus},
    time::{Clock, ManualClock, Timestamp},
};
use charge_once::events::signature::sign_header;
use charge_once::events::{
    receive, receive_eventbridge, EventsDeps, Reception, WebhookSecret, DEFAULT_TOLERANCE,
};
use charge_once::executor::{execute, EngineDeps};
use charge_once::memory::{FakeGateway, MemoryInbox, MemoryStore};
use charge_once::ports::{
    CancelPaymentIntent, CreatePaymentIntent, CreatedLists, OperationCreates, OperationReads,
    PaymentIntents, StripeAccount, StripeRefunds,
};
use charge_once::testing::{self, CreateIn as _};

struct World {
    store: Arc<MemoryStore>,
    gateway: Arc<FakeGateway>,
    clock: ManualClock,
    secret: WebhookSecret,
    deps: EventsDeps,
}

impl World {
    fn new() -> Self {
        let store = Arc::new(MemoryStore::new());
        let gateway = Arc::new(FakeGateway::new());
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        let secret = testing::webhook_secret("refund_events");
        let deps = EventsDeps {
            charge: EngineDeps {
                store: store.clone(),
                gateway: gateway.clone(),
                clock: Arc::new(clock.clone()),
                policy: Policy::default(),
            },
            inbox: Arc::new(MemoryInbox::new()),
            secrets: Some(vec![secret.clone()]),
            tolerance: DEFAULT_TOLERANCE,
            event_source: None,
        };
        Self {
            store,
            gateway,
            clock,
            secret,
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
        let r = execute(&self.deps.charge, &op.key(), &op.operation_id)
            .await
            .unwrap();
        assert_eq!(r.status, OperationStatus::Succeeded);
        self.current(&op).await
    }

    /// The refund `id` of `amount` of `charge` as stored now, accepted as the door does, or the
    /// door's refusal.
    async fn ask_refund(
        &self,
        charge: &Operation,
        id: &str,
        amount: i64,
    ) -> Result<Operation, RefundRefusal> {
        let charge = self.current(charge).await;
        let request = RefundRequest {
            amount: Some(Amount::new(amount).unwrap()),
            reason: None,
        };
        let now = self.clock.now();
        let (params, reserve) = refund::reserve(&charge, &request, now)?;
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
        Ok(op)
    }

    /// A refund of 400 of a fresh charge, executed (the fake Stripe answers `first` to the
    /// create): the charge and the refund as stored.
    async fn refunded(&self, order: &str, first: RefundStatus) -> (Operation, Operation) {
        let charge = self.charged(order).await;
        let refund = self.ask_refund(&charge, "r-1", 400).await.unwrap();
        self.gateway.set_refund_first_status(first);
        execute(&self.deps.charge, &refund.key(), &refund.operation_id)
            .await
            .unwrap();
        (charge, self.current(&refund).await)
    }

    async fn current(&self, op: &Operation) -> Operation {
        self.store.get(&op.key()).await.unwrap().unwrap()
    }

    async fn reserved(&self, charge: &Operation) -> i64 {
        self.current(charge).await.refund_reserved()
    }

    fn refund_reads(&self) -> u64 {
        self.gateway.calls.refund_read.load(Ordering::SeqCst)
    }

    fn stripe_says(&self, refund: &Operation, status: RefundStatus, why: Option<&str>) {
        let id = refund.stripe_refund_id().unwrap();
        self.gateway.set_refund_status(id, status, why);
    }

    async fn deliver(&self, body: &[u8]) -> Reception {
        let header = sign_header(&self.secret, self.clock.now().as_millis() / 1000, body);
        receive(&self.deps, Some(&header), body, None)
            .await
            .reception
    }
}

/// A refund event for `refund` (its recorded Stripe id unless `re` names one) claiming
/// `status`, with our metadata.
fn event(id: &str, kind: &str, refund: &Operation, re: Option<&str>, status: &str) -> Vec<u8> {
    event_json(id, kind, refund, re, status)
        .to_string()
        .into_bytes()
}

fn event_json(
    id: &str,
    kind: &str,
    refund: &Operation,
    re: Option<&str>,
    status: &str,
) -> serde_json::Value {
    let re = re
        .or(refund.stripe_refund_id().map(|id| id.as_str()))
        .unwrap();
    serde_json::json!({
        "id": id, "object": "event", "type": kind, "created": 1_800_000_000,
        "data": {"object": {
            "id": re, "object": "refund", "status": status, "amount": 400, "currency": "usd",
            "payment_intent": refund.params.refund().unwrap().payment_intent.as_str(),
            "failure_reason": (status == "failed").then_some("expired_or_canceled_card"),
            "metadata": {
                "order_id": refund.order_id.as_str(),
                "operation_id": refund.operation_id.to_string(),
            },
        }},
    })
}

#[tokio::test]
async fn a_refund_stripe_fails_after_it_succeeded_is_recorded_failed_and_its_amount_released() {
    let w = World::new();
    let (charge, succeeded) = w.refunded("ord-late", RefundStatus::Succeeded).await;
    assert_eq!(succeeded.status, OperationStatus::Succeeded);
    assert_eq!(w.reserved(&charge).await, 400);
    w.stripe_says(
        &succeeded,
        RefundStatus::Failed,
        Some("expired_or_canceled_card"),
    );
    let reads = w.refund_reads();
    let body = event("evt_late", "refund.failed", &succeeded, None, "failed");
    assert_eq!(w.deliver(&body).await, Reception::RefundFailedLater);
    assert_eq!(w.refund_reads(), reads + 1, "Stripe's word, asked first");
    let failed = w.current(&succeeded).await;
    assert_eq!(failed.status, OperationStatus::Failed);
    assert!(failed
        .last_error
        .as_deref()
        .unwrap()
        .contains("expired_or_canceled_card"));
    assert_eq!(
        w.reserved(&charge).await,
        0,
        "the 400 is back on the charge"
    );
    // The outbox: a RefundFailed of its own, saying it failed after succeeding.
    let event_out = outcome_of(Some(&succeeded), &failed).unwrap();
    assert_eq!(event_out.outcome, Outcome::Failed);
    assert_eq!(event_out.detail_type(), "RefundFailed");
    let detail = serde_json::to_value(event_out.detail()).unwrap();
    assert_eq!(detail["failed_after_success"], true);
    assert_eq!(detail["failure_reason"], "expired_or_canceled_card");
    assert_ne!(
        event_out.event_id,
        outcome_of(None, &succeeded).unwrap().event_id
    );
    // The same event again, and another event of the same news: nothing more.
    assert_eq!(
        w.deliver(&body).await,
        Reception::Ignored(Ignored::Duplicate)
    );
    let other = event(
        "evt_late_2",
        "charge.refund.updated",
        &succeeded,
        None,
        "failed",
    );
    assert_eq!(
        w.deliver(&other).await,
        Reception::Ignored(Ignored::AlreadySettled)
    );
    // An old `succeeded` event arriving late: Stripe says failed, recorded failed: nothing.
    let old = event("evt_old", "refund.updated", &succeeded, None, "succeeded");
    assert_eq!(
        w.deliver(&old).await,
        Reception::Ignored(Ignored::AlreadySettled)
    );
    assert_eq!(w.reserved(&charge).await, 0, "released once");
    // The twin of a refusal: the released amount may be refunded again, all of it.
    assert!(w.ask_refund(&charge, "r-2", 1000).await.is_ok());
    assert_eq!(w.gateway.refund_count(), 1, "an event never makes a refund");
}

#[tokio::test]
async fn a_forged_failure_of_a_succeeded_refund_changes_nothing_and_pages() {
    let w = World::new();
    let (charge, succeeded) = w.refunded("ord-forged", RefundStatus::Succeeded).await;
    // The payload says failed; Stripe says succeeded.
    let body = event("evt_forged", "refund.failed", &succeeded, None, "failed");
    assert_eq!(
        w.deliver(&body).await,
        Reception::Mismatch(EventMismatch::StatusContradicted)
    );
    assert_eq!(w.current(&succeeded).await, succeeded, "nothing written");
    assert_eq!(w.reserved(&charge).await, 400);
    assert_eq!(
        w.ask_refund(&charge, "r-2", 601).await.unwrap_err(),
        RefundRefusal::OverWhatIsLeft {
            asked: 601,
            left: 600
        },
        "nothing released"
    );
    // A payload naming a refund that is not the operation's (Stripe's has other metadata).
    let stray = event(
        "evt_stray",
        "refund.failed",
        &succeeded,
        Some("re_999"),
        "failed",
    );
    assert_eq!(
        w.deliver(&stray).await,
        Reception::Mismatch(EventMismatch::UnknownRefund),
        "Stripe has no such refund"
    );
    assert_eq!(w.current(&succeeded).await, succeeded);
}

#[tokio::test]
async fn a_pending_refund_settles_on_stripe_s_answer_and_late_events_are_harmless() {
    let w = World::new();
    let (charge, pending) = w.refunded("ord-pending", RefundStatus::Pending).await;
    assert_eq!(pending.status, OperationStatus::Unknown);
    assert!(pending.stripe_refund_id().is_some());
    // Stripe still pending, its id recorded: nothing new.
    let created = event("evt_c", "refund.created", &pending, None, "pending");
    assert_eq!(
        w.deliver(&created).await,
        Reception::Ignored(Ignored::NothingNew)
    );
    assert_eq!(w.current(&pending).await, pending);
    w.stripe_says(&pending, RefundStatus::Succeeded, None);
    let updated = event("evt_u", "refund.updated", &pending, None, "succeeded");
    assert_eq!(
        w.deliver(&updated).await,
        Reception::Applied {
            status: OperationStatus::Succeeded,
            review: None
        }
    );
    let settled = w.current(&pending).await;
    assert_eq!(settled.status, OperationStatus::Succeeded);
    assert_eq!(settled.next_due_at, None);
    // The `refund.created` of before, delivered again out of order under a new id: nothing.
    let late = event("evt_c2", "refund.created", &pending, None, "pending");
    assert_eq!(
        w.deliver(&late).await,
        Reception::Ignored(Ignored::AlreadySettled)
    );
    assert_eq!(w.current(&pending).await, settled);
    assert_eq!(w.reserved(&charge).await, 400);
}

#[tokio::test]
async fn a_pending_refund_that_fails_gives_its_reservation_back() {
    let w = World::new();
    let (charge, pending) = w.refunded("ord-pending-fail", RefundStatus::Pending).await;
    w.stripe_says(&pending, RefundStatus::Failed, Some("lost_or_stolen_card"));
    let body = event("evt_f", "refund.failed", &pending, None, "failed");
    assert_eq!(
        w.deliver(&body).await,
        Reception::Applied {
            status: OperationStatus::Failed,
            review: None
        }
    );
    assert_eq!(w.current(&pending).await.status, OperationStatus::Failed);
    assert_eq!(w.reserved(&charge).await, 0);
}

#[tokio::test]
async fn a_failed_refund_stripe_says_succeeded_is_left_and_pages() {
    let w = World::new();
    let (charge, failed) = w.refunded("ord-failed", RefundStatus::Failed).await;
    assert_eq!(failed.status, OperationStatus::Failed);
    assert_eq!(w.reserved(&charge).await, 0);
    w.stripe_says(&failed, RefundStatus::Succeeded, None);
    let body = event("evt_s", "refund.updated", &failed, None, "succeeded");
    assert_eq!(
        w.deliver(&body).await,
        Reception::SettledConflict {
            reason: "refund_failed_but_succeeded"
        }
    );
    assert_eq!(w.current(&failed).await, failed, "settled is final");
    assert_eq!(w.reserved(&charge).await, 0);
}

#[tokio::test]
async fn refunds_that_are_not_ours_are_ignored_without_asking_stripe() {
    let w = World::new();
    let (_, succeeded) = w.refunded("ord-foreign", RefundStatus::Succeeded).await;
    let reads = w.refund_reads();
    let mut foreign = event_json("evt_x", "refund.failed", &succeeded, None, "failed");
    foreign["data"]["object"]["metadata"] = serde_json::json!({});
    let body = foreign.to_string().into_bytes();
    assert_eq!(w.deliver(&body).await, Reception::Ignored(Ignored::NotOurs));
    let mut unknown = event_json("evt_y", "refund.failed", &succeeded, None, "failed");
    unknown["data"]["object"]["metadata"]["operation_id"] =
        "6f1c2a4e-8a3b-4c5d-9e0f-112233445566".into();
    let body = unknown.to_string().into_bytes();
    assert_eq!(
        w.deliver(&body).await,
        Reception::Ignored(Ignored::UnknownOperation)
    );
    assert_eq!(w.refund_reads(), reads, "Stripe not asked");
    assert_eq!(w.current(&succeeded).await, succeeded);
}

/// On the pinned version a partial capture's remainder (or a canceled hold) is a refund Stripe
/// makes itself, of our charge's intent, `expired_uncaptured_charge`, without our metadata; an
/// event endpoint on acacia or later sends `refund.created` for it. It is never taken for one of
/// our refunds: ignored, Stripe not asked, nothing written. The twin, the same event carrying our
/// refund's metadata, is read at Stripe.
#[tokio::test]
async fn an_authorizations_released_part_is_not_taken_for_our_refund() {
    let w = World::new();
    let (_, ours) = w.refunded("ord-rest", RefundStatus::Pending).await;
    let reads = w.refund_reads();
    for kind in ["refund.created", "charge.refund.updated", "refund.updated"] {
        let mut rest = event_json("evt_rest", kind, &ours, Some("re_rest"), "succeeded");
        rest["id"] = format!("evt_rest_{kind}").into();
        rest["data"]["object"]["reason"] = "expired_uncaptured_charge".into();
        rest["data"]["object"]["metadata"] = serde_json::json!({});
        let body = rest.to_string().into_bytes();
        assert_eq!(
            w.deliver(&body).await,
            Reception::Ignored(Ignored::NotOurs),
            "{kind}"
        );
    }
    assert_eq!(w.refund_reads(), reads, "Stripe not asked");
    assert_eq!(w.current(&ours).await, ours);
    let body = event("evt_ours", "refund.updated", &ours, None, "succeeded");
    w.deliver(&body).await;
    assert_eq!(
        w.refund_reads(),
        reads + 1,
        "our refund's event is read at Stripe"
    );
}

#[tokio::test]
async fn a_refund_event_from_eventbridge_takes_the_same_path() {
    let w = World::new();
    let (charge, succeeded) = w.refunded("ord-bridge", RefundStatus::Succeeded).await;
    w.stripe_says(&succeeded, RefundStatus::Failed, Some("unknown"));
    let envelope = serde_json::json!({
        "version": "0", "id": "1b2c", "detail-type": "refund.failed",
        "source": "aws.partner/stripe.com/ed_test_1", "account": "123456789012",
        "time": "2027-01-15T08:00:00Z", "region": "us-east-1", "resources": [],
        "detail": event_json("evt_eb", "refund.failed", &succeeded, None, "failed"),
    });
    let read = || serde_json::from_slice(&serde_json::to_vec(&envelope).unwrap()).unwrap();
    let report = receive_eventbridge(&w.deps, read(), None).await;
    assert_eq!(report.reception, Reception::RefundFailedLater);
    assert_eq!(w.reserved(&charge).await, 0);
    let again = receive_eventbridge(&w.deps, read(), None).await;
    assert_eq!(again.reception, Reception::Ignored(Ignored::Duplicate));
}

/// A gateway whose first refund retrieve lets the charge path settle the refund first (Stripe
/// then says `succeeded`), and then answers what Stripe says after (`then`): the record the
/// events function read was unsettled, the one its shell then claims is settled.
struct SettledMeanwhile {
    inner: Arc<FakeGateway>,
    charge_path: EngineDeps,
    refund: std::sync::Mutex<Option<Operation>>,
    then: RefundStatus,
}

impl StripeAccount for SettledMeanwhile {
    fn livemode(&self) -> bool {
        self.inner.livemode()
    }
}

#[async_trait::async_trait]
impl PaymentIntents for SettledMeanwhile {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.create(req).await
    }
    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError> {
        self.inner.retrieve(id).await
    }
    async fn search_by_operation(
        &self,
        id: &charge_core::domain::OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        self.inner.search_by_operation(id).await
    }
    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.cancel(req).await
    }
}

// Disputes are read only; this gateway does not read them yet.
impl charge_once::ports::StripeDisputes for SettledMeanwhile {}

#[async_trait::async_trait]
impl StripeRefunds for SettledMeanwhile {
    async fn retrieve_refund(&self, id: &StripeRefundId) -> Result<StripeRefund, GatewayError> {
        let refund = self.refund.lock().unwrap().take();
        if let Some(refund) = refund {
            self.inner
                .set_refund_status(id, RefundStatus::Succeeded, None);
            let r = execute(&self.charge_path, &refund.key(), &refund.operation_id)
                .await
                .unwrap();
            assert_eq!(r.status, OperationStatus::Succeeded, "settled meanwhile");
            let why = (self.then == RefundStatus::Failed).then_some("expired_or_canceled_card");
            self.inner.set_refund_status(id, self.then.clone(), why);
        }
        self.inner.retrieve_refund(id).await
    }
}

impl CreatedLists for SettledMeanwhile {}

/// The refund settles between the events function's read and its shell's claim: the shell finds
/// it settled, and its answer for that record is what the event does. Stripe saying it failed
/// after that is the one settled transition (failed, its 400 back on the charge); agreeing, it
/// is a late event.
#[tokio::test]
async fn a_refund_settled_before_the_claim_is_answered_by_the_shell_on_what_stands() {
    let cases = [
        (
            RefundStatus::Failed,
            "failed",
            Reception::RefundFailedLater,
            OperationStatus::Failed,
            0,
        ),
        (
            RefundStatus::Succeeded,
            "succeeded",
            Reception::Ignored(Ignored::AlreadySettled),
            OperationStatus::Succeeded,
            400,
        ),
    ];
    for (then, claims, want, stands, reserved) in cases {
        let mut w = World::new();
        let order = format!("ord-meanwhile-{claims}");
        let (charge, pending) = w.refunded(&order, RefundStatus::Pending).await;
        assert_eq!(pending.status, OperationStatus::Unknown);
        w.deps.charge.gateway = Arc::new(SettledMeanwhile {
            inner: w.gateway.clone(),
            charge_path: w.deps.charge.clone(),
            refund: std::sync::Mutex::new(Some(pending.clone())),
            then,
        });
        let body = event("evt_meanwhile", "refund.updated", &pending, None, claims);
        assert_eq!(w.deliver(&body).await, want, "{claims}");
        assert_eq!(w.current(&pending).await.status, stands, "{claims}");
        assert_eq!(w.reserved(&charge).await, reserved, "{claims}");
        assert_eq!(w.gateway.refund_count(), 1, "an event never makes a refund");
    }
}
