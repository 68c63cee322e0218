//! One fresh, isolated local stack per test, as zero2prod's `spawn_app`: [`Stack::spawn`] creates
//! an operations table and a webhook inbox table (both used once `ACTIVE`), the charge queue and
//! its dead-letter queue (SQS FIFO), every one under a name of its own, and starts an embedded
//! stripe-sim on the core's manual clock. The functions are built on them on demand, wired as
//! their `main`s wire them, so a test reads as "spawn, act through the real handlers, look".
//! Nothing is shared between tests, so they run in any order and in parallel.
//!
//! A file that needs more (the outcomes tests' event bus) builds it beside a `Stack`.

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use aws_lambda_events::encodings::Body;
use aws_lambda_events::sqs::SqsEvent;
use charge::handler::ChargeFunction;
use charge_core::plan::Policy;
use charge_core::{operation::Operation, time::ManualClock};
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::inbox::DynamoInbox;
use charge_once::adapters::sqs::{SqsDeadLetters, SqsQueue};
use charge_once::executor::EngineDeps;
use charge_once::ports::{OperationQueue, OperationReads, StoreError};
use charge_once::reconciler::{reconcile_tick, ReconcilerDeps, TickReport};
use charge_once::telemetry::CapturedMetrics;
use checkout::door::Checkout;
use lambda_runtime::{Context, LambdaEvent};

use crate::aws::{
    fresh_fifo_queue, fresh_inbox, fresh_store, queue_depth, receive_as_event, sdk_config,
    table_item_count,
};
use crate::stripe::StripeSide;

/// The budget a [`Stack::tick`] is given: more than any tick here needs.
pub const TICK_BUDGET: Duration = Duration::from_secs(3600);

/// A fresh local stack and the clients to look at it.
pub struct Stack {
    pub dynamo: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
    /// The operations table.
    pub store: Arc<DynamoStore>,
    /// The webhook inbox table.
    pub inbox: Arc<DynamoInbox>,
    /// The charge queue (visibility timeout 30 s here, 1,800 s deployed).
    pub queue_url: String,
    /// The charge queue's dead-letter queue, where the charge function parks poison.
    pub dlq_url: String,
    /// stripe-sim, and the clock it shares with the core.
    pub side: StripeSide,
    /// Every metrics line the functions built here emit.
    pub metrics: Arc<CapturedMetrics>,
}

impl Stack {
    /// Tables, queues and stripe-sim, all new. The clock starts at `charge_core::testing::T0`.
    pub async fn spawn() -> Self {
        let config = sdk_config().await;
        let sqs = aws_sdk_sqs::Client::new(&config);
        let queue_url = fresh_fifo_queue(&sqs).await;
        let dlq_url = fresh_fifo_queue(&sqs).await;
        Self {
            dynamo: aws_sdk_dynamodb::Client::new(&config),
            store: Arc::new(fresh_store().await),
            inbox: Arc::new(fresh_inbox().await),
            sqs,
            queue_url,
            dlq_url,
            side: StripeSide::with_new_clock().await,
            metrics: Arc::new(CapturedMetrics::new()),
        }
    }

    /// The core's clock (stripe-sim follows it).
    pub fn clock(&self) -> &ManualClock {
        &self.side.clock
    }

    /// The charge queue's adapter (a new one, with its own send counter).
    pub fn queue(&self) -> Arc<SqsQueue> {
        Arc::new(SqsQueue::new(self.sqs.clone(), &self.queue_url))
    }

    /// The charge core on this stack: the store, the real Stripe client to stripe-sim (no in-call
    /// retries), the manual clock, the default policy.
    pub fn charge_deps(&self) -> EngineDeps {
        EngineDeps {
            store: self.store.clone(),
            gateway: Arc::new(self.side.gateway()),
            clock: Arc::new(self.side.clock.clone()),
            policy: Policy::default(),
        }
    }

    /// The charge function as deployed, unpaced: poison to the DLQ, refused messages back
    /// through the charge queue's `ChangeMessageVisibility`, metrics to [`Stack::metrics`].
    pub fn charge_function(&self) -> ChargeFunction {
        ChargeFunction {
            charge: self.charge_deps(),
            dead_letters: Arc::new(SqsDeadLetters::new(self.sqs.clone(), &self.dlq_url)),
            visibility: self.queue(),
            budget: None,
            metrics: self.metrics.clone(),
        }
    }

    /// The checkout function, sending to the charge queue.
    pub fn checkout(&self) -> Checkout {
        self.checkout_with(self.queue())
    }

    /// The checkout function, sending to `queue` (a test's wrapper around [`Stack::queue`]).
    pub fn checkout_with(&self, queue: Arc<dyn OperationQueue>) -> Checkout {
        Checkout {
            store: self.store.clone(),
            queue,
            clock: Arc::new(self.side.clock.clone()),
            pending_grace: Duration::from_secs(300),
            max_charge_attempts: Default::default(),
            metrics: self.metrics.clone(),
        }
    }

    /// The reconciler on this stack (index pages of 50).
    pub fn reconciler(&self) -> ReconcilerDeps {
        ReconcilerDeps {
            charge: self.charge_deps(),
            queue: self.queue(),
            page_size: 50,
            charge_throughput: charge_once::config::StripeBudget::default_throughput(),
            dispute_watch: None,
            refund_watch: None,
        }
    }

    /// One reconciler tick, as the schedule would invoke it, with [`TICK_BUDGET`]; its metrics
    /// lines go to [`Stack::metrics`].
    pub async fn tick(&self) -> Result<TickReport, StoreError> {
        reconcile_tick(
            &self.reconciler(),
            &|| TICK_BUDGET,
            Duration::from_secs(25),
            self.metrics.as_ref(),
        )
        .await
    }

    /// A batch from the charge queue (up to 10), as the event source hands it to the function.
    pub async fn receive(&self) -> SqsEvent {
        receive_as_event(&self.sqs, &self.queue_url).await
    }

    /// `f` on `batch`, then what the event source does: delete each record the handler did not
    /// report failed (records without a receipt handle did not come from the queue). Returns the
    /// ids of the failed ones.
    pub async fn run_charge(&self, f: &ChargeFunction, batch: SqsEvent) -> Vec<String> {
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
                    .expect("DeleteMessage on moto");
            }
        }
        failed
    }

    /// One batch through [`Stack::charge_function`] as its event source runs it; how many
    /// records the batch had (0: the queue had nothing visible).
    pub async fn deliver(&self) -> usize {
        let batch = self.receive().await;
        let n = batch.records.len();
        if n > 0 {
            self.run_charge(&self.charge_function(), batch).await;
        }
        n
    }

    /// Messages on the charge queue, visible or in flight.
    pub async fn depth(&self) -> u64 {
        queue_depth(&self.sqs, &self.queue_url).await
    }

    /// Items in the operations table.
    pub async fn item_count(&self) -> i32 {
        table_item_count(&self.dynamo, self.store.table()).await
    }

    /// The stored record of `op` (it must exist).
    pub async fn current(&self, op: &Operation) -> Operation {
        self.store
            .get(&op.key())
            .await
            .expect("GetItem on moto")
            .unwrap_or_else(|| panic!("no record for {}", op.order_id))
    }

    /// PaymentIntents stripe-sim holds for `op`.
    pub fn ledger_for(&self, op: &Operation) -> usize {
        let id = op.operation_id.to_string();
        self.side
            .sim
            .ledger()
            .iter()
            .filter(|e| e.operation_id.as_deref() == Some(id.as_str()))
            .count()
    }

    /// Every message on `queue_url` so far (with its message attributes), deleted once read.
    pub async fn drain(&self, queue_url: &str) -> Vec<aws_sdk_sqs::types::Message> {
        let mut all = Vec::new();
        loop {
            let out = self
                .sqs
                .receive_message()
                .queue_url(queue_url)
                .max_number_of_messages(10)
                .message_attribute_names("All")
                .send()
                .await
                .expect("ReceiveMessage on moto");
            if out.messages().is_empty() {
                return all;
            }
            for m in out.messages() {
                self.sqs
                    .delete_message()
                    .queue_url(queue_url)
                    .receipt_handle(m.receipt_handle().expect("receipt handle"))
                    .send()
                    .await
                    .expect("DeleteMessage on moto");
                all.push(m.clone());
            }
        }
    }

    /// What the charge function parked on the dead-letter queue so far (read once).
    pub async fn parked(&self) -> Vec<aws_sdk_sqs::types::Message> {
        self.drain(&self.dlq_url).await
    }
}

/// The API Gateway request in `events/<file>` (the events `sam local invoke` uses too).
pub fn api_event(file: &str) -> ApiGatewayV2httpRequest {
    let path = format!("{}/../events/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A function's JSON answer body.
pub fn json_body(resp: &ApiGatewayV2httpResponse) -> serde_json::Value {
    match &resp.body {
        Some(Body::Text(t)) => serde_json::from_str(t).expect("a JSON body"),
        other => panic!("expected a JSON body, got {other:?}"),
    }
}
