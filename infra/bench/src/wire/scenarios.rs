//! The request-count scenarios, run through the real handlers against moto (DynamoDB, SQS FIFO)
//! and an embedded `stripe-sim`, each on a fresh table, queue and simulator, counted on the wire.
//!
//! | scenario | what is counted |
//! |---|---|
//! | [`Scenario::HappyPath`] | checkout (`events/checkout-valid.json`) + one charge-function delivery |
//! | [`Scenario::SettledDuplicate`] | one more delivery of the same, already settled message |
//! | [`Scenario::LostResponseInCallRetry`] | checkout + one delivery whose create response is dropped after Stripe committed; the client's in-call retry (production setting, 1 retry, same key) gets the replay |
//! | [`Scenario::LostResponseRetriedLater`] | checkout + a delivery whose lost response surfaces (client retries off) and is recorded `unknown`, then the retry: for ours one reconciler tick after the backoff (re-drive) and the re-driven delivery; for the seed a redelivery of the same message |
//! | [`Scenario::ReconcilePastWindow`] | only the reconciliation run that settles an operation left `unknown` (a replayed 500) 23 h 11 min after its first attempt: by search, never by create |
//!
//! The event source's ReceiveMessage/DeleteMessage are made by Lambda, not by our functions: they
//! go through a separately counted client ([`Counts::source`]) and are not in [`Counts::sqs`].

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use aws_lambda_events::sqs::SqsEvent;
use charge_core::plan::Policy;
use charge_core::{
    domain::OrderId,
    operation::{OperationKey, OperationStatus},
    time::Clock,
};
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::sqs::SqsQueue;
use charge_once::executor::EngineDeps;
use charge_once::ports::{OperationReads, PaymentGateway};
use charge_once::reconciler::{reconcile_tick, ReconcilerDeps};
use checkout::door::Checkout;
use lambda_runtime::{Context, LambdaEvent};
use stripe_sim::FaultKind;
use testkit::aws::{fresh_fifo_queue, receive_as_event, sdk_config, unique};
use testkit::stripe::StripeSide;

use super::counter::{counted_dynamodb, counted_sqs, WireCounter, WireTally};
use super::seed::SeedPort;

/// The sample checkout (order `ord-1001`, 12.50 USD, `pm_card_visa`).
const CHECKOUT_EVENT: &str = include_str!("../../../../events/checkout-valid.json");
/// The sample refund of it (5.00 USD, refund id `refund-1`).
const REFUND_EVENT: &str = include_str!("../../../../events/refund-valid.json");
const AUTHORIZE_EVENT: &str = include_str!("../../../../events/checkout-authorize.json");
const CAPTURE_EVENT: &str = include_str!("../../../../events/capture-valid.json");
/// Index page size and safety margin of the reconciler function, as it runs.
const PAGE_SIZE: usize = reconciler::handler::PAGE_SIZE;
const SAFETY: Duration = reconciler::handler::SAFETY_MARGIN;
const PLENTY: Duration = Duration::from_secs(3600);

/// A minute past the key window and the search lag of the default policy: search may settle.
fn past_window() -> Duration {
    let policy = Policy::default();
    policy.key_window + policy.search_min_age + Duration::from_secs(60)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    HappyPath,
    SettledDuplicate,
    LostResponseInCallRetry,
    LostResponseRetriedLater,
    ReconcilePastWindow,
}

impl Scenario {
    pub const ALL: [Scenario; 5] = [
        Scenario::HappyPath,
        Scenario::SettledDuplicate,
        Scenario::LostResponseInCallRetry,
        Scenario::LostResponseRetriedLater,
        Scenario::ReconcilePastWindow,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Scenario::HappyPath => "happy path (checkout + 1 delivery)",
            Scenario::SettledDuplicate => "duplicate delivery of a settled operation",
            Scenario::LostResponseInCallRetry => "lost response, in-call retry (same key)",
            Scenario::LostResponseRetriedLater => "lost response, recorded unknown, retried later",
            Scenario::ReconcilePastWindow => "reconciliation past the key window",
        }
    }
}

/// Stripe requests as the simulator received them (its own counters, server side).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StripeCounts {
    pub create: u64,
    pub retrieve: u64,
    pub search: u64,
    /// `POST /v1/refunds` (absent from runs before refunds: 0).
    #[serde(default)]
    pub refund: u64,
    /// `GET /v1/refunds/{id}` and `GET /v1/refunds` (absent from runs before refunds: 0).
    #[serde(default)]
    pub refund_read: u64,
    /// `POST /v1/payment_intents/{id}/capture` (absent from runs before captures: 0).
    #[serde(default)]
    pub capture: u64,
    /// `POST /v1/payment_intents/{id}/cancel` (absent from runs before it was counted: 0).
    #[serde(default)]
    pub cancel: u64,
}

impl StripeCounts {
    pub fn total(&self) -> u64 {
        self.create
            + self.retrieve
            + self.search
            + self.refund
            + self.refund_read
            + self.capture
            + self.cancel
    }
}

/// Requests of one scenario, by service.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    pub dynamodb: WireTally,
    /// Our functions' SQS requests (SendMessage).
    pub sqs: WireTally,
    /// The event source's ReceiveMessage / DeleteMessage (Lambda's, not ours).
    #[serde(rename = "event_source_sqs")]
    pub source: WireTally,
    pub stripe: StripeCounts,
}

impl Counts {
    pub fn dynamodb_reads(&self) -> u64 {
        ["GetItem", "Query", "Scan", "BatchGetItem"]
            .iter()
            .map(|op| self.dynamodb.get(op))
            .sum()
    }

    /// Write requests (a TransactWriteItems is one request, of two items).
    pub fn dynamodb_writes(&self) -> u64 {
        [
            "PutItem",
            "UpdateItem",
            "DeleteItem",
            "BatchWriteItem",
            "TransactWriteItems",
        ]
        .iter()
        .map(|op| self.dynamodb.get(op))
        .sum()
    }

    fn since(&self, before: &Counts) -> Counts {
        Counts {
            dynamodb: self.dynamodb.since(&before.dynamodb),
            sqs: self.sqs.since(&before.sqs),
            source: self.source.since(&before.source),
            stripe: StripeCounts {
                create: self.stripe.create - before.stripe.create,
                retrieve: self.stripe.retrieve - before.stripe.retrieve,
                search: self.stripe.search - before.stripe.search,
                refund: self.stripe.refund - before.stripe.refund,
                refund_read: self.stripe.refund_read - before.stripe.refund_read,
                capture: self.stripe.capture - before.stripe.capture,
                cancel: self.stripe.cancel - before.stripe.cancel,
            },
        }
    }
}

/// One fresh world: counted clients, a FIFO queue, an embedded stripe-sim on a manual clock.
pub struct Stack {
    pub dynamo: WireCounter,
    pub sqs: WireCounter,
    pub source: WireCounter,
    pub dynamo_client: aws_sdk_dynamodb::Client,
    pub sqs_client: aws_sdk_sqs::Client,
    pub source_client: aws_sdk_sqs::Client,
    /// Not counted: for setup and for checking outcomes inside a counted window.
    pub plain_dynamo: aws_sdk_dynamodb::Client,
    pub queue_url: String,
    pub side: StripeSide,
}

impl Stack {
    pub async fn new() -> Self {
        let config = sdk_config().await;
        let (dynamo, sqs, source) = (WireCounter::new(), WireCounter::new(), WireCounter::new());
        let queue_url = fresh_fifo_queue(&aws_sdk_sqs::Client::new(&config)).await;
        Self {
            dynamo_client: counted_dynamodb(&config, &dynamo),
            sqs_client: counted_sqs(&config, &sqs),
            source_client: counted_sqs(&config, &source),
            plain_dynamo: aws_sdk_dynamodb::Client::new(&config),
            dynamo,
            sqs,
            source,
            queue_url,
            side: StripeSide::with_new_clock().await,
        }
    }

    pub fn snapshot(&self) -> Counts {
        let s = self.side.sim.request_counts();
        Counts {
            dynamodb: self.dynamo.snapshot(),
            sqs: self.sqs.snapshot(),
            source: self.source.snapshot(),
            stripe: StripeCounts {
                create: s.create,
                retrieve: s.retrieve,
                search: s.search,
                refund: s.refund,
                refund_read: s.refund_read,
                capture: s.capture,
                cancel: s.cancel,
            },
        }
    }

    /// The production client setting: one in-call retry with the same key (short backoff here).
    fn gateway(&self) -> Arc<dyn PaymentGateway> {
        Arc::new(self.side.gateway_with(|c| c.max_network_retries = 1))
    }

    /// No in-call retry: a lost response surfaces to the executor (as in the seed's own test).
    fn gateway_no_retry(&self) -> Arc<dyn PaymentGateway> {
        Arc::new(self.side.gateway())
    }

    fn clock(&self) -> Arc<dyn Clock> {
        Arc::new(self.side.clock.clone())
    }

    /// What the event source does before invoking: receive a batch (with the FIFO attributes).
    async fn receive(&self) -> SqsEvent {
        receive_as_event(&self.source_client, &self.queue_url).await
    }

    /// What the event source does after: delete the records the function did not report failed.
    async fn delete_except(&self, event: &SqsEvent, failed: &[String]) {
        for r in &event.records {
            if r.message_id.as_ref().is_some_and(|id| failed.contains(id)) {
                continue;
            }
            self.source_client
                .delete_message()
                .queue_url(&self.queue_url)
                .receipt_handle(r.receipt_handle.clone().unwrap_or_default())
                .send()
                .await
                .expect("DeleteMessage on moto");
        }
    }
}

fn checkout_event() -> ApiGatewayV2httpRequest {
    serde_json::from_str(CHECKOUT_EVENT).expect("events/checkout-valid.json")
}

fn order_key() -> OperationKey {
    OperationKey::charge(OrderId::parse("ord-1001").expect("order id"))
}

/// Our functions on one stack.
pub struct Ours {
    pub stack: Stack,
    pub store: Arc<DynamoStore>,
    /// The same table through the uncounted client.
    inspect: DynamoStore,
    checkout: Checkout,
    charge: EngineDeps,
    charge_no_retry: EngineDeps,
    reconciler: ReconcilerDeps,
}

impl Ours {
    pub async fn new() -> Self {
        let stack = Stack::new().await;
        let store = Arc::new(DynamoStore::new(
            stack.dynamo_client.clone(),
            unique("operations"),
        ));
        store.create_table().await.expect("create table on moto");
        let queue = Arc::new(SqsQueue::new(stack.sqs_client.clone(), &stack.queue_url));
        let charge = EngineDeps {
            store: store.clone(),
            gateway: stack.gateway(),
            clock: stack.clock(),
            policy: Policy::default(),
        };
        let charge_no_retry = EngineDeps {
            gateway: stack.gateway_no_retry(),
            ..charge.clone()
        };
        Self {
            inspect: DynamoStore::new(stack.plain_dynamo.clone(), store.table()),
            checkout: Checkout {
                store: store.clone(),
                queue: queue.clone(),
                clock: stack.clock(),
                pending_grace: Policy::default().pending_grace,
                max_charge_attempts: Default::default(),
                metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
            },
            reconciler: ReconcilerDeps {
                charge: charge.clone(),
                queue,
                page_size: PAGE_SIZE,
                charge_throughput: charge_once::config::StripeBudget::default_throughput(),
                dispute_watch: None,
                refund_watch: None,
            },
            charge,
            charge_no_retry,
            store,
            stack,
        }
    }

    async fn checkout(&self) {
        let resp = checkout::handler::handle(
            &self.checkout,
            LambdaEvent::new(checkout_event(), Context::default()),
        )
        .await;
        assert_eq!(resp.status_code, 202, "checkout: {:?}", resp.body);
    }

    /// Runs the charge function on `event`; returns the ids it reported failed.
    async fn handle(&self, deps: &EngineDeps, event: &SqsEvent) -> Vec<String> {
        let resp = charge::handler::handle(
            &charge::handler::ChargeFunction::local(deps.clone()),
            LambdaEvent::new(event.clone(), Context::default()),
        )
        .await;
        resp.batch_item_failures
            .into_iter()
            .map(|f| f.item_identifier)
            .collect()
    }

    /// One delivery by the event source: receive, invoke, delete what succeeded.
    async fn deliver(&self, deps: &EngineDeps) -> SqsEvent {
        let event = self.stack.receive().await;
        assert_eq!(event.records.len(), 1, "one message expected");
        let failed = self.handle(deps, &event).await;
        assert!(failed.is_empty(), "the charge function failed {failed:?}");
        self.stack.delete_except(&event, &failed).await;
        event
    }

    async fn tick(&self) -> charge_once::reconciler::TickReport {
        reconcile_tick(
            &self.reconciler,
            &|| PLENTY,
            SAFETY,
            &charge_once::telemetry::DiscardMetrics,
        )
        .await
        .expect("reconciler tick")
    }

    async fn status(&self) -> OperationStatus {
        self.inspect
            .get(&order_key())
            .await
            .expect("GetItem")
            .expect("the operation")
            .status
    }

    /// Runs `scenario` on a fresh stack; returns what it cost on the wire.
    pub async fn run(scenario: Scenario) -> Counts {
        let s = Self::new().await;
        let side = &s.stack.side;
        let counts = match scenario {
            Scenario::HappyPath => {
                let before = s.stack.snapshot();
                s.checkout().await;
                s.deliver(&s.charge).await;
                s.stack.snapshot().since(&before)
            }
            Scenario::SettledDuplicate => {
                s.checkout().await;
                let event = s.deliver(&s.charge).await;
                let before = s.stack.snapshot();
                let failed = s.handle(&s.charge, &event).await;
                assert!(failed.is_empty());
                s.stack.snapshot().since(&before)
            }
            Scenario::LostResponseInCallRetry => {
                let before = s.stack.snapshot();
                s.checkout().await;
                side.sim.push_script([FaultKind::DropAfterCommit]);
                s.deliver(&s.charge).await;
                s.stack.snapshot().since(&before)
            }
            Scenario::LostResponseRetriedLater => {
                let before = s.stack.snapshot();
                s.checkout().await;
                side.sim.push_script([FaultKind::DropAfterCommit]);
                s.deliver(&s.charge_no_retry).await;
                assert_eq!(s.status().await, OperationStatus::Unknown);
                // The first unknown is due again after the 60 s backoff; the tick re-drives it.
                side.clock.advance(Duration::from_secs(61));
                assert_eq!(s.tick().await.redriven, 1);
                s.deliver(&s.charge).await;
                s.stack.snapshot().since(&before)
            }
            Scenario::ReconcilePastWindow => {
                s.checkout().await;
                side.sim.push_script([FaultKind::ServerErrorAfterCommit]);
                s.deliver(&s.charge).await;
                assert_eq!(s.status().await, OperationStatus::Unknown);
                side.clock.advance(past_window());
                let before = s.stack.snapshot();
                let report = s.tick().await;
                assert_eq!(report.settled, 1, "{report:?}");
                s.stack.snapshot().since(&before)
            }
        };
        let status = s.status().await;
        assert_eq!(status, OperationStatus::Succeeded, "{scenario:?}");
        assert_eq!(side.sim.ledger().len(), 1, "exactly one PaymentIntent");
        counts
    }
}

impl Ours {
    /// A refund of the happy path's charge: the door (`events/refund-valid.json`: the charge
    /// read, the refund and its reservation in one transaction, the message) and one delivery
    /// (claim, `POST /v1/refunds`, record). Counted from the refund request to the refund
    /// settled; the charge before it is not counted. The seed has no refunds to compare with.
    pub async fn refund() -> Counts {
        let s = Self::new().await;
        s.checkout().await;
        s.deliver(&s.charge).await;
        let before = s.stack.snapshot();
        let request: ApiGatewayV2httpRequest =
            serde_json::from_str(REFUND_EVENT).expect("events/refund-valid.json");
        let resp =
            checkout::handler::handle(&s.checkout, LambdaEvent::new(request, Context::default()))
                .await;
        assert_eq!(resp.status_code, 202, "refund: {:?}", resp.body);
        s.deliver(&s.charge).await;
        let counts = s.stack.snapshot().since(&before);
        let order = OrderId::parse("ord-1001").expect("order id");
        let refunds = s.inspect.refunds_of(&order).await.expect("Query");
        assert_eq!(refunds.len(), 1);
        assert_eq!(refunds[0].status, OperationStatus::Succeeded);
        assert_eq!(s.stack.side.sim.refunds_created(), 1, "exactly one refund");
        counts
    }
}

impl Ours {
    /// An authorization (`events/checkout-authorize.json` and its delivery), then, counted, its
    /// capture: `events/capture-valid.json` through the checkout function and one delivery.
    /// Returns (the authorization's counts, the capture's), each checked against stripe-sim:
    /// one PaymentIntent, held, then captured once.
    pub async fn authorize_and_capture() -> (Counts, Counts) {
        let s = Self::new().await;
        let before = s.stack.snapshot();
        s.answer(AUTHORIZE_EVENT, 202).await;
        s.deliver(&s.charge).await;
        let authorized = s.stack.snapshot().since(&before);
        let key = OperationKey::charge(OrderId::parse("ord-3003").expect("order id"));
        let charge = s
            .inspect
            .get(&key)
            .await
            .expect("GetItem")
            .expect("the charge");
        assert_eq!(charge.status, OperationStatus::Authorized);
        assert!(
            charge.capture_before().is_some(),
            "the deadline, read from Stripe"
        );
        let before = s.stack.snapshot();
        s.answer(CAPTURE_EVENT, 202).await;
        s.deliver(&s.charge).await;
        let captured = s.stack.snapshot().since(&before);
        let charge = s
            .inspect
            .get(&key)
            .await
            .expect("GetItem")
            .expect("the charge");
        assert_eq!(charge.status, OperationStatus::Succeeded);
        assert_eq!(
            charge.amount_captured().map(|a| a.minor_units()),
            Some(1000)
        );
        (authorized, captured)
    }

    /// Sends a sample event through the checkout function; asserts its status.
    async fn answer(&self, event: &str, status: i64) {
        let request: ApiGatewayV2httpRequest = serde_json::from_str(event).expect("sample event");
        let resp = checkout::handler::handle(
            &self.checkout,
            LambdaEvent::new(request, Context::default()),
        )
        .await;
        assert_eq!(resp.status_code, status, "{:?}", resp.body);
    }
}

/// The seed's straight port ([`SeedPort`]) on one stack.
pub struct Seed {
    pub stack: Stack,
    port: SeedPort,
    port_no_retry: SeedPort,
}

impl Seed {
    pub async fn new() -> Self {
        let stack = Stack::new().await;
        let table = unique("seed-operations");
        let queue: Arc<dyn charge_once::ports::OperationQueue> =
            Arc::new(SqsQueue::new(stack.sqs_client.clone(), &stack.queue_url));
        let port = SeedPort {
            client: stack.dynamo_client.clone(),
            table: table.clone(),
            queue: queue.clone(),
            gateway: stack.gateway(),
            clock: stack.clock(),
        };
        port.create_table()
            .await
            .expect("create seed table on moto");
        let port_no_retry = SeedPort {
            client: stack.dynamo_client.clone(),
            table,
            queue,
            gateway: stack.gateway_no_retry(),
            clock: stack.clock(),
        };
        Self {
            stack,
            port,
            port_no_retry,
        }
    }

    async fn checkout(&self) {
        let req = checkout_event();
        let body: serde_json::Value =
            serde_json::from_str(req.body.as_deref().unwrap_or("{}")).expect("checkout body");
        let params = charge_core::domain::ChargeParams {
            amount: charge_core::domain::Amount::new(body["amount"].as_i64().unwrap_or(0))
                .expect("amount"),
            currency: charge_core::domain::Currency::parse(body["currency"].as_str().unwrap_or(""))
                .expect("currency"),
            customer_id: charge_core::domain::CustomerId::parse(
                body["customer_id"].as_str().unwrap_or(""),
            )
            .expect("customer"),
            payment_method: charge_core::domain::PaymentMethodId::parse(
                body["payment_method"].as_str().unwrap_or(""),
            )
            .expect("payment method"),
            capture_method: Default::default(),
        };
        let op = charge_core::operation::Operation::new(
            OrderId::parse("ord-1001").expect("order id"),
            params,
            charge_core::domain::Principal::jwt("bench").expect("principal"),
            self.stack.side.clock.now(),
            Policy::default().pending_grace,
        );
        self.port.request_charge(&op).await.expect("seed checkout");
    }

    async fn handle(&self, port: &SeedPort, event: &SqsEvent) -> Vec<OperationStatus> {
        let mut out = Vec::new();
        for r in &event.records {
            let status = port
                .handle_message(r.body.as_deref().unwrap_or(""))
                .await
                .expect("seed execute");
            out.push(status);
        }
        out
    }

    async fn deliver(&self, port: &SeedPort) -> (SqsEvent, Vec<OperationStatus>) {
        let event = self.stack.receive().await;
        assert_eq!(event.records.len(), 1, "one message expected");
        let statuses = self.handle(port, &event).await;
        self.stack.delete_except(&event, &[]).await;
        (event, statuses)
    }

    pub async fn run(scenario: Scenario) -> Counts {
        let s = Self::new().await;
        let side = &s.stack.side;
        let counts = match scenario {
            Scenario::HappyPath => {
                let before = s.stack.snapshot();
                s.checkout().await;
                s.deliver(&s.port).await;
                s.stack.snapshot().since(&before)
            }
            Scenario::SettledDuplicate => {
                s.checkout().await;
                let (event, _) = s.deliver(&s.port).await;
                let before = s.stack.snapshot();
                s.handle(&s.port, &event).await;
                s.stack.snapshot().since(&before)
            }
            Scenario::LostResponseInCallRetry => {
                let before = s.stack.snapshot();
                s.checkout().await;
                side.sim.push_script([FaultKind::DropAfterCommit]);
                s.deliver(&s.port).await;
                s.stack.snapshot().since(&before)
            }
            Scenario::LostResponseRetriedLater => {
                let before = s.stack.snapshot();
                s.checkout().await;
                side.sim.push_script([FaultKind::DropAfterCommit]);
                let (event, statuses) = s.deliver(&s.port_no_retry).await;
                assert_eq!(statuses, [OperationStatus::Unknown]);
                side.clock.advance(Duration::from_secs(61));
                // The seed has no scheduler: the retry is the same message delivered again.
                s.handle(&s.port, &event).await;
                s.stack.snapshot().since(&before)
            }
            Scenario::ReconcilePastWindow => {
                s.checkout().await;
                side.sim.push_script([FaultKind::ServerErrorAfterCommit]);
                s.deliver(&s.port).await;
                side.clock.advance(past_window());
                let before = s.stack.snapshot();
                for op in s.port.unsettled().await.expect("seed scan") {
                    s.port
                        .execute(&op.key(), &op.operation_id)
                        .await
                        .expect("seed reconcile");
                }
                s.stack.snapshot().since(&before)
            }
        };
        let op = s.port.unsettled().await.expect("seed scan");
        assert!(
            op.is_empty(),
            "{scenario:?}: the seed left {op:?} unsettled"
        );
        assert_eq!(side.sim.ledger().len(), 1, "exactly one PaymentIntent");
        counts
    }
}
