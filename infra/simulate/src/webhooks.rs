//! Stripe's webhooks in the simulation: the stripe-sim engine queues a signed event for every
//! PaymentIntent change (with its seeded webhook faults: duplicate, out-of-order, delayed,
//! dropped deliveries); the loop hands each due delivery to the real webhook handler as an HTTP
//! API v2 request, and reports non-2xx answers back so the engine retries with back-off.
//!
//! The webhook function gets the same faulty store and gateway as the charge function, wrapped
//! to count what it does: its DynamoDB reads and writes, its Stripe retrieves, and its creates,
//! which must stay 0.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use aws_lambda_events::http::header::{HeaderValue, CONTENT_TYPE};
use aws_lambda_events::http::Method;
use charge_once::memory::MemoryInbox;
use charge_once::ports::{
    Claim, ClaimRequest, CreatePaymentIntent, Created, IndexQuery, ManualResolution,
    OperationStore, OutcomeRecord, Page, PaymentGateway, Recorded, Reschedule, StoreError,
};
use charge_once::webhook::{WebhookDeps, WebhookSecret, DEFAULT_TOLERANCE};
use charge_once::{Clock, GatewayError, Operation, OperationId, OperationKey, PaymentIntent};
use lambda_runtime::{Context, LambdaEvent};
use stripe_sim::{StripeSim, WebhookConfig, WebhookFaults};
use webhook::handler::WebhookFunction;

use crate::trace::Trace;

/// The endpoint secret of the simulated webhook endpoint.
const SECRET: &str = "whsec_SimulatedEndpointKey4Qp9Rt2Vw7Yz1Bc5";

/// What the webhook function did, counted at its ports.
#[derive(Debug, Default)]
pub struct WebhookCalls {
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub retrieves: AtomicU64,
    pub creates: AtomicU64,
}

struct CountingStore {
    inner: Arc<dyn OperationStore>,
    calls: Arc<WebhookCalls>,
}

impl CountingStore {
    fn read(&self) {
        self.calls.reads.fetch_add(1, Ordering::Relaxed);
    }
    fn write(&self) {
        self.calls.writes.fetch_add(1, Ordering::Relaxed);
    }
}

#[async_trait]
impl OperationStore for CountingStore {
    async fn create_if_absent(&self, op: &Operation) -> Result<Created, StoreError> {
        self.write();
        self.inner.create_if_absent(op).await
    }
    async fn get(&self, key: &OperationKey) -> Result<Option<Operation>, StoreError> {
        self.read();
        self.inner.get(key).await
    }
    async fn get_by_operation_id(
        &self,
        operation_id: &OperationId,
    ) -> Result<Option<Operation>, StoreError> {
        self.read();
        self.inner.get_by_operation_id(operation_id).await
    }
    async fn claim(&self, req: &ClaimRequest) -> Result<Claim, StoreError> {
        self.write();
        self.inner.claim(req).await
    }
    async fn record(&self, rec: &OutcomeRecord) -> Result<Recorded, StoreError> {
        self.write();
        self.inner.record(rec).await
    }
    async fn reschedule(&self, req: &Reschedule) -> Result<Recorded, StoreError> {
        self.write();
        self.inner.reschedule(req).await
    }
    async fn resolve(&self, req: &ManualResolution) -> Result<Recorded, StoreError> {
        self.write();
        self.inner.resolve(req).await
    }
    async fn query_index(
        &self,
        query: IndexQuery,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.read();
        self.inner.query_index(query, cursor, limit).await
    }
}

struct CountingGateway {
    inner: Arc<dyn PaymentGateway>,
    calls: Arc<WebhookCalls>,
}

#[async_trait]
impl PaymentGateway for CountingGateway {
    fn livemode(&self) -> bool {
        self.inner.livemode()
    }
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.calls.creates.fetch_add(1, Ordering::Relaxed);
        self.inner.create(req).await
    }
    async fn retrieve(
        &self,
        id: &charge_once::PaymentIntentId,
    ) -> Result<PaymentIntent, GatewayError> {
        self.calls.retrieves.fetch_add(1, Ordering::Relaxed);
        self.inner.retrieve(id).await
    }
    async fn search_by_operation(
        &self,
        operation_id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        self.inner.search_by_operation(operation_id).await
    }
}

/// The webhook fault rates of a run with faults (none with `--no-faults`).
pub fn default_faults(with_faults: bool) -> WebhookFaults {
    if !with_faults {
        return WebhookFaults::default();
    }
    WebhookFaults {
        duplicate: 0.05,
        out_of_order: 0.05,
        delayed: 0.05,
        dropped: 0.02,
        ..WebhookFaults::default()
    }
}

/// The webhook endpoint of a simulation.
pub struct Webhooks {
    sim: StripeSim,
    function: WebhookFunction,
    inbox: Arc<MemoryInbox>,
    pub calls: Arc<WebhookCalls>,
    /// Answers by HTTP status.
    pub answers: Mutex<BTreeMap<u16, u64>>,
    trace: Arc<Trace>,
}

impl Webhooks {
    /// Configures `sim` to queue webhook events (no URL: delivered by [`Webhooks::deliver_due`])
    /// and builds the function on the given (faulty) ports.
    pub fn new(
        sim: StripeSim,
        faults: WebhookFaults,
        store: Arc<dyn OperationStore>,
        gateway: Arc<dyn PaymentGateway>,
        clock: Arc<dyn Clock>,
        policy: charge_once::executor::ChargePolicy,
        trace: Arc<Trace>,
    ) -> Result<Self, String> {
        sim.set_webhooks(WebhookConfig {
            url: None,
            secret: Some(SECRET.to_owned()),
            faults,
            max_attempts: 0,
            // The types docs/deploy.md selects in the dashboard.
            enabled_events: Some(
                charge_once::webhook::HANDLED_TYPES
                    .iter()
                    .map(|t| (*t).to_owned())
                    .collect(),
            ),
        })?;
        let calls = Arc::new(WebhookCalls::default());
        let inbox = Arc::new(MemoryInbox::new());
        let function = WebhookFunction {
            webhook: WebhookDeps {
                charge: charge_once::executor::ChargeDeps {
                    store: Arc::new(CountingStore {
                        inner: store,
                        calls: calls.clone(),
                    }),
                    gateway: Arc::new(CountingGateway {
                        inner: gateway,
                        calls: calls.clone(),
                    }),
                    clock,
                    policy,
                },
                inbox: inbox.clone(),
                secrets: Some(vec![
                    WebhookSecret::parse(SECRET).map_err(|e| e.to_string())?
                ]),
                tolerance: DEFAULT_TOLERANCE,
                event_source: None,
            },
            metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
        };
        Ok(Self {
            sim,
            function,
            inbox,
            calls,
            answers: Mutex::new(BTreeMap::new()),
            trace,
        })
    }

    /// When the next delivery is due (virtual unix ms).
    pub fn next_due_ms(&self) -> Option<i64> {
        self.sim.next_webhook_due_ms()
    }

    /// Whether a delivery is due now.
    pub fn any_due(&self, now_ms: i64) -> bool {
        self.next_due_ms().is_some_and(|due| due <= now_ms)
    }

    /// Delivers every due event to the handler, one after another; false when none was due.
    pub async fn deliver_due(&self) -> bool {
        let due = self.sim.take_due_webhooks();
        if due.is_empty() {
            return false;
        }
        for d in due {
            let order = serde_json::from_str::<serde_json::Value>(&d.body)
                .ok()
                .and_then(|v| {
                    v["data"]["object"]["metadata"]["order_id"]
                        .as_str()
                        .map(str::to_owned)
                })
                .unwrap_or_default();
            let mut req = ApiGatewayV2httpRequest::default();
            req.request_context.http.method = Method::POST;
            req.raw_path = Some("/stripe/webhook".into());
            req.headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/json; charset=utf-8"),
            );
            if let Ok(v) = HeaderValue::from_str(&d.signature) {
                req.headers.insert("stripe-signature", v);
            }
            req.body = Some(d.body.clone());
            let status = webhook::handler::handle_http(
                &self.function,
                LambdaEvent::new(req, Context::default()),
            )
            .await
            .status_code;
            let status = u16::try_from(status).unwrap_or(0);
            *self
                .answers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(status)
                .or_default() += 1;
            self.trace.event(
                &order,
                "webhook",
                format_args!(
                    "{} {} attempt {}: HTTP {status}",
                    d.event_type, d.event_id, d.attempt
                ),
            );
            self.sim.webhook_result(&d, (200..300).contains(&status));
        }
        true
    }

    /// Counts for the report.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        let c = self.sim.webhook_counts();
        let mut out = BTreeMap::from([
            ("events".to_owned(), c.events),
            ("deliveries".to_owned(), c.attempts),
            ("acknowledged".to_owned(), c.delivered),
            ("retried".to_owned(), c.failed),
            ("given_up".to_owned(), c.given_up),
            ("fault_duplicate".to_owned(), c.duplicated),
            ("fault_out_of_order".to_owned(), c.reordered),
            ("fault_delayed".to_owned(), c.delayed),
            ("fault_dropped".to_owned(), c.dropped),
            ("inbox_entries".to_owned(), self.inbox.len() as u64),
            (
                "dynamodb_reads".to_owned(),
                self.calls.reads.load(Ordering::Relaxed),
            ),
            (
                "dynamodb_writes".to_owned(),
                self.calls.writes.load(Ordering::Relaxed)
                    + self.inbox.writes.load(Ordering::Relaxed),
            ),
            (
                "stripe_retrieves".to_owned(),
                self.calls.retrieves.load(Ordering::Relaxed),
            ),
            (
                "stripe_creates".to_owned(),
                self.calls.creates.load(Ordering::Relaxed),
            ),
        ]);
        for (status, n) in self
            .answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            out.insert(format!("http_{status}"), *n);
        }
        out
    }
}
