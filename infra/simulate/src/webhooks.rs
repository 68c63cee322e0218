//! Stripe's events in the simulation, by either source the stack offers: the stripe-sim engine
//! queues an event for every PaymentIntent change (with its seeded delivery faults: duplicate,
//! out-of-order, delayed, dropped deliveries), and the loop hands each due delivery to the real
//! events function:
//! - `eventbridge` (the default, the stack's recommended source): the event in the EventBridge
//!   envelope of a Stripe event destination, to `events::handler::handle_eventbridge`. A failed
//!   invocation is retried as Lambda retries an asynchronous invocation (twice, 1 and 2 minutes
//!   later, virtual time), then counted dead-lettered (the function's on-failure DLQ).
//! - `webhook`: a signed HTTP API v2 request to `handle_http`; non-2xx answers go back to the
//!   engine, which retries with back-off as Stripe does.
//!
//! The `forged_event` fault: beside a real event, at its rate, a validly delivered event (signed
//! with the endpoint's secret, or in a proper envelope) that names a state Stripe does not hold:
//! `canceled` for a PaymentIntent that succeeded (or is processing, which only succeeds),
//! `succeeded` for one that was canceled or waits for an action that never comes, or `succeeded`
//! for a PaymentIntent id Stripe never created (the only forgery beside a declined intent's event:
//! its customer may still pay it, and we cancel it, so either final state may come true). None
//! can ever become true, so an honest events
//! function must never move a record on one ([`Forged`] counts what it did).
//!
//! The events function gets the same faulty store and gateway as the charge function, wrapped
//! to count what it does: its DynamoDB reads and writes, its Stripe retrieves, and its creates and
//! cancels, which must stay 0 (it records a declined intent for the charge path to cancel).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_lambda_events::encodings::Body;
use charge_core::charge::event_plan::EventIntent;
use charge_core::store::{
    Claim, ClaimRequest, Created, ManualResolution, OutcomeRecord, Recorded, RefundFailedLater,
    Reschedule,
};
use charge_core::store_rules::{ChargeClaim, CreatedBeside};
use charge_core::{
    domain::OperationId,
    operation::{Operation, OperationKey},
    outcome::{GatewayError, PaymentIntent},
    time::Clock,
};
use charge_once::events::{
    EventBridgeEvent, EventsDeps, StripeEvent, WebhookSecret, DEFAULT_TOLERANCE,
};
use charge_once::executor::EngineDeps;
use charge_once::memory::MemoryInbox;
use charge_once::ports::{
    CancelPaymentIntent, CapturePaymentIntent, CreatePaymentIntent, CreatedLists, IndexQuery,
    ManualResolutions, OperationCreates, OperationLeases, OperationReads, OperationStore, Page,
    PaymentGateway, PaymentIntents, SettledRecords, StoreError, UnknownIndex,
};
use events::handler::{EventsFunction, Incoming};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;
use stripe_sim::{Delivery, DeliveryMode, StripeSim, WebhookConfig, WebhookFaults};

use crate::faults::{Faults, Kind};
use crate::mutations::{Claimed, TrustEventPayload};
use crate::trace::Trace;

/// The endpoint secret of the simulated webhook endpoint.
const SECRET: &str = "whsec_SimulatedEndpointKey4Qp9Rt2Vw7Yz1Bc5";

/// What the events function did, counted at its ports.
#[derive(Debug, Default)]
pub struct WebhookCalls {
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub retrieves: AtomicU64,
    pub cancels: AtomicU64,
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
impl OperationReads for CountingStore {
    async fn get(&self, key: &OperationKey) -> Result<Option<Operation>, StoreError> {
        self.read();
        self.inner.get(key).await
    }
    async fn refunds_of(
        &self,
        order_id: &charge_core::domain::OrderId,
    ) -> Result<Vec<Operation>, StoreError> {
        self.read();
        self.inner.refunds_of(order_id).await
    }
}

#[async_trait]
impl OperationCreates for CountingStore {
    async fn create_if_absent(&self, op: &Operation) -> Result<Created, StoreError> {
        self.write();
        self.inner.create_if_absent(op).await
    }
    async fn create_beside(
        &self,
        op: &Operation,
        claim: ChargeClaim<'_>,
    ) -> Result<CreatedBeside, StoreError> {
        self.write();
        self.inner.create_beside(op, claim).await
    }
    async fn record_dispute(
        &self,
        req: &charge_core::store::DisputeMove,
    ) -> Result<charge_core::store::DisputeRecorded, StoreError> {
        self.write();
        self.inner.record_dispute(req).await
    }
    async fn create_attempt(
        &self,
        req: &charge_core::store::NewAttempt,
    ) -> Result<charge_core::store::CreatedAttempt, StoreError> {
        self.write();
        self.inner.create_attempt(req).await
    }
}

#[async_trait]
impl OperationLeases for CountingStore {
    async fn claim(&self, req: &ClaimRequest) -> Result<Claim, StoreError> {
        self.write();
        self.inner.claim(req).await
    }
    async fn record(&self, rec: &OutcomeRecord) -> Result<Recorded, StoreError> {
        self.write();
        self.inner.record(rec).await
    }
    async fn fail_refund_later(&self, req: &RefundFailedLater) -> Result<Recorded, StoreError> {
        self.write();
        self.inner.fail_refund_later(req).await
    }
}

#[async_trait]
impl UnknownIndex for CountingStore {
    async fn query_index(
        &self,
        query: IndexQuery,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.read();
        self.inner.query_index(query, cursor, limit).await
    }
    async fn reschedule(&self, req: &Reschedule) -> Result<Recorded, StoreError> {
        self.write();
        self.inner.reschedule(req).await
    }
}

#[async_trait]
impl ManualResolutions for CountingStore {
    async fn get_by_operation_id(
        &self,
        operation_id: &OperationId,
    ) -> Result<Option<Operation>, StoreError> {
        self.read();
        self.inner.get_by_operation_id(operation_id).await
    }
    async fn resolve(&self, req: &ManualResolution) -> Result<Recorded, StoreError> {
        self.write();
        self.inner.resolve(req).await
    }
}

impl SettledRecords for CountingStore {}

struct CountingGateway {
    inner: Arc<dyn PaymentGateway>,
    calls: Arc<WebhookCalls>,
}

// Not counted: the counts are of the charge calls the events function makes; its one refund
// call (a refund event's retrieve) is left out of them.
crate::forward_gateway!(CountingGateway, inner: StripeAccount, StripeRefunds, StripeDisputes);

#[async_trait]
impl PaymentIntents for CountingGateway {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.calls.creates.fetch_add(1, Ordering::Relaxed);
        self.inner.create(req).await
    }
    async fn retrieve(
        &self,
        id: &charge_core::domain::PaymentIntentId,
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
    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.calls.cancels.fetch_add(1, Ordering::Relaxed);
        self.inner.cancel(req).await
    }
    // Not counted: the events function reads and cancels; it never captures.
    async fn capture(&self, req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.capture(req).await
    }
}

impl CreatedLists for CountingGateway {}

/// The delivery fault rates of a run with faults (none with `--no-faults`).
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

/// Lambda's asynchronous invocation: a failed invocation is tried again twice, about 1 and 2
/// minutes later, then sent to the on-failure destination.
pub const LAMBDA_ASYNC_RETRIES: u32 = 2;
const LAMBDA_RETRY_AFTER_MS: i64 = 60_000;

/// How the events source is set up.
pub struct Setup {
    pub mode: DeliveryMode,
    /// The engine's delivery faults.
    pub delivery_faults: WebhookFaults,
    /// The simulation's faults (`forged_event` is rolled here).
    pub faults: Arc<Faults>,
    /// The `trust-event-payload` mutation: the function's `retrieve` answers with the payload.
    pub trust_payload: bool,
    /// Where the function's metrics go (nowhere, or the dashboard's tape).
    pub metrics: Arc<dyn charge_once::ports::MetricsSink>,
}

/// What forged events did. `forged_settles` is the number of operations (by order) whose record a
/// forged event moved: a forged delivery that the events function answered as applied (it
/// settled the operation, recorded the PaymentIntent, or sent it to review; the outcome labels
/// `succeeded`, `failed`, `unknown`, `pending`, `review`). Every forged event names a state
/// Stripe does not hold and never will, so the honest function refuses each one it checks
/// (`event_mismatches`: answered `status_contradicted`, `unknown_payment_intent` or an intent
/// mismatch, and paged), or changes nothing without asking (a duplicate, a record in review).
#[derive(Debug, Default, Clone)]
pub struct Forged {
    /// Forged deliveries made (first attempts; their retries are not counted again).
    pub injected: u64,
    /// Forged deliveries refused as a mismatch (paged).
    pub mismatches: u64,
    /// Orders whose record a forged event moved.
    pub moved: BTreeSet<String>,
    /// Every answer to a forged delivery, by outcome label.
    pub outcomes: BTreeMap<String, u64>,
}

/// The function applied the event: the record moved (an `Applied` reception's labels).
fn is_applied(outcome: &str) -> bool {
    matches!(
        outcome,
        "pending" | "unknown" | "succeeded" | "failed" | "review"
    )
}

/// Stripe did not confirm the event: nothing moved, paged (a `Mismatch` reception's labels).
fn is_mismatch(outcome: &str) -> bool {
    matches!(
        outcome,
        "status_contradicted"
            | "unknown_payment_intent"
            | "operation_id"
            | "order_id"
            | "amount"
            | "currency"
            | "livemode"
    )
}

/// An EventBridge invocation waiting for Lambda's retry.
struct Invocation {
    envelope: String,
    event_id: String,
    event_type: String,
    order: String,
    /// 1 for the first invocation.
    attempt: u32,
    forged: bool,
}

/// The events source of a simulation and the events function it feeds.
pub struct Webhooks {
    sim: StripeSim,
    mode: DeliveryMode,
    function: EventsFunction,
    inbox: Arc<MemoryInbox>,
    clock: Arc<dyn Clock>,
    faults: Arc<Faults>,
    pub calls: Arc<WebhookCalls>,
    /// Answers by class: `http_<status>` (webhook), `invocations_ok` / `invocations_failed`
    /// (EventBridge).
    pub answers: Mutex<BTreeMap<String, u64>>,
    /// Lambda's pending retries of failed EventBridge invocations, by (due ms, sequence).
    retries: Mutex<BTreeMap<(i64, u64), Invocation>>,
    retry_seq: AtomicU64,
    lambda_retries: AtomicU64,
    dead_lettered: AtomicU64,
    /// The Stripe refunds (`re_...`) that an event saying `failed` was about, by whether one
    /// such event's invocation succeeded (`true`) or each went to the DLQ: only a person
    /// replaying the DLQ applies what a dead-lettered event says of a settled refund.
    failed_refunds_told: Mutex<BTreeMap<String, bool>>,
    forged: Mutex<Forged>,
    /// `trust-event-payload`: the PaymentIntent the delivery in hand carries.
    claimed: Option<Arc<Claimed>>,
    trace: Arc<Trace>,
}

/// Has `sim` queue the events the stack subscribes to, in `setup.mode`, with its delivery
/// faults; nothing is sent until [`Webhooks::deliver_due`] asks.
fn configure(sim: &StripeSim, setup: &Setup) -> Result<(), String> {
    let webhook = setup.mode == DeliveryMode::Webhook;
    sim.set_webhooks(WebhookConfig {
        url: None,
        // A webhook endpoint's secret; an event destination to EventBridge needs none.
        secret: webhook.then(|| SECRET.to_owned()),
        faults: setup.delivery_faults.clone(),
        max_attempts: 0,
        // The endpoint was made with the version the client sends (docs/deploy.md).
        api_version: Some(sim.api_version().as_str().to_owned()),
        // The types docs/deploy.md selects (the dashboard's webhook endpoint, or the event
        // destination and the stack's rule).
        enabled_events: Some(
            charge_once::events::HANDLED_TYPES
                .iter()
                .map(|t| (*t).to_owned())
                .collect(),
        ),
        mode: setup.mode,
        ..WebhookConfig::default()
    })
}

/// The events function as its main.rs wires it, its store and gateway calls counted.
fn events_function(
    webhook: bool,
    ports: EngineDeps,
    calls: &Arc<WebhookCalls>,
    inbox: &Arc<MemoryInbox>,
    metrics: Arc<dyn charge_once::ports::MetricsSink>,
) -> Result<EventsFunction, String> {
    Ok(EventsFunction {
        events: EventsDeps {
            charge: EngineDeps {
                store: Arc::new(CountingStore {
                    inner: ports.store,
                    calls: calls.clone(),
                }),
                gateway: crate::gateway::FunctionRequests::wrap(Arc::new(CountingGateway {
                    inner: ports.gateway,
                    calls: calls.clone(),
                })),
                clock: ports.clock,
                policy: ports.policy,
            },
            inbox: inbox.clone(),
            // The stack's parameters: the webhook route only with a webhook secret; with
            // EventBridge, the partner event source named.
            secrets: if webhook {
                Some(vec![
                    WebhookSecret::parse(SECRET).map_err(|e| e.to_string())?
                ])
            } else {
                None
            },
            tolerance: DEFAULT_TOLERANCE,
            event_source: (!webhook).then(|| stripe_sim::DEFAULT_EVENT_SOURCE.to_owned()),
        },
        metrics,
    })
}

impl Webhooks {
    /// Configures `sim` to queue events in `setup.mode` (no URL: delivered by
    /// [`Webhooks::deliver_due`]) and builds the events function on the given (faulty) ports.
    pub fn new(
        sim: StripeSim,
        setup: Setup,
        ports: EngineDeps,
        trace: Arc<Trace>,
    ) -> Result<Self, String> {
        configure(&sim, &setup)?;
        let calls = Arc::new(WebhookCalls::default());
        let inbox = Arc::new(MemoryInbox::new());
        let claimed = setup.trust_payload.then(|| Arc::new(Claimed::default()));
        let gateway: Arc<dyn PaymentGateway> = match &claimed {
            Some(claimed) => Arc::new(TrustEventPayload {
                inner: ports.gateway.clone(),
                claimed: claimed.clone(),
            }),
            None => ports.gateway.clone(),
        };
        let clock = ports.clock.clone();
        let webhook = setup.mode == DeliveryMode::Webhook;
        let ports = EngineDeps { gateway, ..ports };
        let function = events_function(webhook, ports, &calls, &inbox, setup.metrics.clone())?;
        Ok(Self {
            sim,
            mode: setup.mode,
            function,
            inbox,
            clock,
            faults: setup.faults,
            calls,
            answers: Mutex::new(BTreeMap::new()),
            retries: Mutex::new(BTreeMap::new()),
            retry_seq: AtomicU64::new(0),
            lambda_retries: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            failed_refunds_told: Mutex::new(BTreeMap::new()),
            forged: Mutex::new(Forged::default()),
            claimed,
            trace,
        })
    }

    /// `eventbridge` or `webhook`.
    pub fn mode(&self) -> DeliveryMode {
        self.mode
    }

    /// When the next delivery (or Lambda retry) is due (virtual unix ms).
    pub fn next_due_ms(&self) -> Option<i64> {
        let retry = lock(&self.retries).keys().next().map(|(due, _)| *due);
        match (self.sim.next_webhook_due_ms(), retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether a delivery is due now.
    pub fn any_due(&self, now_ms: i64) -> bool {
        self.next_due_ms().is_some_and(|due| due <= now_ms)
    }

    /// Delivers everything due to the function, one after another (Lambda's retries first):
    /// false when nothing was due. Beside a real event's first delivery, at the `forged_event`
    /// rate, a forged one goes first.
    pub async fn deliver_due(&self) -> bool {
        let now = self.clock.now().as_millis();
        let retries: Vec<Invocation> = {
            let mut queue = lock(&self.retries);
            let later = queue.split_off(&(now + 1, 0));
            std::mem::replace(&mut *queue, later)
                .into_values()
                .collect()
        };
        let due = self.sim.take_due_webhooks();
        if due.is_empty() && retries.is_empty() {
            return false;
        }
        for invocation in retries {
            self.invoke(invocation, None).await;
        }
        for d in due {
            // Read once: the event for the forger, and (EventBridge) the invocation's payload.
            let read = Read::of(&d);
            if d.attempt == 1 && !d.injected {
                if let Some(forged) = read.event().and_then(|event| self.forge(&d, event)) {
                    let forged_read = Read::of(&forged);
                    self.deliver(forged, forged_read).await;
                }
            }
            self.deliver(d, read).await;
        }
        true
    }

    /// A forged event beside the one `d` delivers (`read`: as far as read), when the
    /// `forged_event` fault fires for it: a validly delivered event claiming a state Stripe does
    /// not hold (see the module docs).
    fn forge(&self, d: &Delivery, read: &EventIntent) -> Option<Delivery> {
        let order = read.order_id.as_ref()?.as_str();
        let status = read.status.as_str();
        let contradiction = match status {
            // Final, or only ever succeeds: `canceled` can never be true.
            "succeeded" | "processing" => Some("canceled"),
            // Canceled (final), or waiting for an action off-session never takes: never
            // `succeeded`.
            "canceled" | "requires_action" => Some("succeeded"),
            // Declined: its customer may still pay it (`customer_confirms_declined`) and we cancel
            // it, so either final state may come true. Only an intent Stripe never created.
            "requires_payment_method" => None,
            _ => return None,
        };
        if !self.faults.roll(Kind::ForgedEvent) {
            return None;
        }
        let n = {
            let mut forged = lock(&self.forged);
            forged.injected += 1;
            forged.injected
        };
        // The whole event, parsed only for the forgery.
        let real = event_json(d);
        let mut pi = real["data"]["object"].clone();
        // Every third names a PaymentIntent Stripe never created.
        let (claimed, unknown) = match contradiction {
            Some(claimed) if n % 3 != 0 => (claimed, false),
            _ => {
                pi["id"] = Value::from(format!("pi_Forged{n:015}"));
                ("succeeded", true)
            }
        };
        pi["status"] = Value::from(claimed);
        pi["amount_received"] = if claimed == "succeeded" {
            pi["amount"].clone()
        } else {
            Value::from(0)
        };
        if claimed == "canceled" {
            pi["canceled_at"] = real["created"].clone();
            pi["cancellation_reason"] = Value::from("requested_by_customer");
        }
        let mut event = real.clone();
        event["id"] = Value::from(format!("evt_Forged{n:014}"));
        event["type"] = Value::from(format!("payment_intent.{claimed}"));
        event["data"]["object"] = pi;
        self.trace.event(
            order,
            "fault",
            format_args!(
                "forged_event: {} {} for {} (Stripe holds {})",
                event["type"].as_str().unwrap_or(""),
                event["id"].as_str().unwrap_or(""),
                event["data"]["object"]["id"].as_str().unwrap_or(""),
                if unknown {
                    "no such PaymentIntent"
                } else {
                    status
                }
            ),
        );
        self.sim.inject_event(&event)
    }

    /// One delivery from the engine (`read`: its body, read), to the function the way its mode
    /// goes.
    async fn deliver(&self, d: Delivery, read: Read) {
        let order = order_of(read.event());
        if let Read::EventBridge(payload, _) = read {
            // The event destination's put was accepted: Stripe is done with it. What happens to
            // the invocation is Lambda's affair.
            self.sim.webhook_result(&d, true);
            self.invoke(
                Invocation {
                    envelope: d.body,
                    event_id: d.event_id,
                    event_type: d.event_type,
                    order,
                    attempt: 1,
                    forged: d.injected,
                },
                Some(payload),
            )
            .await;
            return;
        }
        let req = events::handler::delivery_request(&d.body, &d.signature);
        self.claim(Some((&d.body, DeliveryMode::Webhook)));
        let resp =
            events::handler::handle_http(&self.function, LambdaEvent::new(req, Context::default()))
                .await;
        self.claim(None);
        let status = u16::try_from(resp.status_code).unwrap_or(0);
        self.count(format!("http_{status}"));
        self.trace.event(
            &order,
            "webhook",
            format_args!(
                "{} {} attempt {}: HTTP {status}",
                d.event_type, d.event_id, d.attempt
            ),
        );
        if d.injected {
            let body: Value = match &resp.body {
                Some(Body::Text(t)) => serde_json::from_str(t).unwrap_or(Value::Null),
                _ => Value::Null,
            };
            let outcome = body["outcome"]
                .as_str()
                .or(body["error"]["code"].as_str())
                .unwrap_or("");
            self.tally_forged(&order, outcome);
        }
        self.sim.webhook_result(&d, (200..300).contains(&status));
    }

    /// One asynchronous invocation by EventBridge (`payload`: the envelope, if already read);
    /// a failure is retried as Lambda does, then dead-lettered.
    async fn invoke(&self, inv: Invocation, payload: Option<EventBridgeEvent>) {
        let payload = payload.unwrap_or_else(|| read_envelope(&inv.envelope));
        self.claim(Some((&inv.envelope, DeliveryMode::EventBridge)));
        let result = events::handler::handle_eventbridge(
            &self.function,
            LambdaEvent::new(payload, Context::default()),
        )
        .await;
        self.claim(None);
        let (ok, outcome) = match &result {
            Ok(v) => (true, v["outcome"].as_str().unwrap_or("").to_owned()),
            Err(e) => (false, e.outcome.to_owned()),
        };
        self.count(
            if ok {
                "invocations_ok"
            } else {
                "invocations_failed"
            }
            .to_owned(),
        );
        if inv.forged {
            self.tally_forged(&inv.order, &outcome);
        } else if ok || inv.attempt > LAMBDA_ASYNC_RETRIES {
            if let Some(refund) = failed_refund_of(&inv.envelope) {
                *lock(&self.failed_refunds_told).entry(refund).or_default() |= ok;
            }
        }
        let what = if ok {
            format!("ok: {outcome}")
        } else if inv.attempt <= LAMBDA_ASYNC_RETRIES {
            let after = LAMBDA_RETRY_AFTER_MS * i64::from(inv.attempt);
            self.lambda_retries.fetch_add(1, Ordering::Relaxed);
            format!("failed: {outcome}, Lambda retries in {} s", after / 1000)
        } else {
            self.dead_lettered.fetch_add(1, Ordering::Relaxed);
            format!("failed: {outcome}, to the on-failure DLQ")
        };
        self.trace.event(
            &inv.order,
            "eventbridge",
            format_args!(
                "{} {} invocation {}: {what}",
                inv.event_type, inv.event_id, inv.attempt
            ),
        );
        if !ok && inv.attempt <= LAMBDA_ASYNC_RETRIES {
            let due = self.clock.now().as_millis() + LAMBDA_RETRY_AFTER_MS * i64::from(inv.attempt);
            let seq = self.retry_seq.fetch_add(1, Ordering::Relaxed);
            lock(&self.retries).insert(
                (due, seq),
                Invocation {
                    attempt: inv.attempt + 1,
                    ..inv
                },
            );
        }
    }

    /// Sets (or, with `None`, clears) what `trust-event-payload`'s `retrieve` answers with: the
    /// PaymentIntent the event in hand (its delivery's body, sent in that mode) carries.
    fn claim(&self, delivery: Option<(&str, DeliveryMode)>) {
        if let Some(claimed) = &self.claimed {
            let pi = delivery
                .map(|(body, mode)| parse_in(body, mode))
                .and_then(|e| serde_json::to_vec(&e["data"]["object"]).ok())
                .and_then(|body| {
                    charge_once::adapters::stripe::parse_payment_intent(&body, false).ok()
                });
            claimed.set(pi);
        }
    }

    /// Tallies the function's answer to a forged delivery.
    fn tally_forged(&self, order: &str, outcome: &str) {
        let mut forged = lock(&self.forged);
        *forged.outcomes.entry(outcome.to_owned()).or_default() += 1;
        if is_mismatch(outcome) {
            forged.mismatches += 1;
        }
        if is_applied(outcome) {
            forged.moved.insert(order.to_owned());
        }
    }

    fn count(&self, what: String) {
        *lock(&self.answers).entry(what).or_default() += 1;
    }

    /// What forged events did.
    pub fn forged(&self) -> Forged {
        lock(&self.forged).clone()
    }

    /// EventBridge invocations that failed three times (to the function's on-failure DLQ).
    pub fn dead_lettered(&self) -> u64 {
        self.dead_lettered.load(Ordering::Relaxed)
    }

    /// The refunds whose every event saying `failed` went to the DLQ.
    pub fn dead_lettered_refunds(&self) -> BTreeSet<String> {
        lock(&self.failed_refunds_told)
            .iter()
            .filter(|(_, told)| !**told)
            .map(|(refund, _)| refund.clone())
            .collect()
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
            ("forged_events".to_owned(), c.injected),
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
                "stripe_cancels".to_owned(),
                self.calls.cancels.load(Ordering::Relaxed),
            ),
            (
                "stripe_creates".to_owned(),
                self.calls.creates.load(Ordering::Relaxed),
            ),
        ]);
        if self.mode == DeliveryMode::EventBridge {
            out.insert(
                "lambda_retries".to_owned(),
                self.lambda_retries.load(Ordering::Relaxed),
            );
            out.insert("dead_lettered".to_owned(), self.dead_lettered());
            out.insert("invocations_ok".to_owned(), 0);
            out.insert("invocations_failed".to_owned(), 0);
        }
        for (what, n) in lock(&self.answers).iter() {
            out.insert(what.clone(), *n);
        }
        out
    }
}

/// A delivery's body, read once as the events function reads it: an EventBridge invocation's
/// payload as its runtime does ([`Incoming`]), with the Stripe event in it, or a webhook's body.
enum Read {
    EventBridge(EventBridgeEvent, Option<StripeEvent>),
    Webhook(Option<StripeEvent>),
}

impl Read {
    fn of(d: &Delivery) -> Self {
        match d.mode {
            DeliveryMode::EventBridge => {
                let payload = read_envelope(&d.body);
                let event = StripeEvent::from_eventbridge(&payload, None).ok();
                Read::EventBridge(payload, event)
            }
            DeliveryMode::Webhook => Read::Webhook(StripeEvent::parse(d.body.as_bytes()).ok()),
        }
    }

    /// The PaymentIntent of the Stripe event it carries.
    fn event(&self) -> Option<&EventIntent> {
        match self {
            Read::EventBridge(_, e) | Read::Webhook(e) => e.as_ref()?.intent.as_ref(),
        }
    }
}

/// An EventBridge invocation's payload as the runtime hands it to the function (anything but an
/// EventBridge event reads as an empty one, which the function refuses as unreadable).
fn read_envelope(body: &str) -> EventBridgeEvent {
    match serde_json::from_str(body) {
        Ok(Incoming::EventBridge(e)) => e,
        _ => EventBridgeEvent::default(),
    }
}

/// The refund an EventBridge envelope's event says `failed` (`refund.*`,
/// `charge.refund.updated`: their object is the refund), or `None`.
fn failed_refund_of(envelope: &str) -> Option<String> {
    let event = parse_in(envelope, DeliveryMode::EventBridge);
    let object = &event["data"]["object"];
    (object["object"] == "refund" && object["status"] == "failed")
        .then(|| object["id"].as_str().map(str::to_owned))
        .flatten()
}

/// The whole Stripe event a delivery carries, parsed: the body itself (webhook) or the
/// envelope's `detail` (EventBridge), as [`Delivery::event`] reads it (`null` if not JSON).
fn event_json(d: &Delivery) -> Value {
    parse_in(&d.body, d.mode)
}

fn parse_in(body: &str, mode: DeliveryMode) -> Value {
    let mut parsed: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    match mode {
        DeliveryMode::Webhook => parsed,
        DeliveryMode::EventBridge => parsed["detail"].take(),
    }
}

/// The order a Stripe event's PaymentIntent names (`metadata.order_id`), or "".
fn order_of(event: Option<&EventIntent>) -> String {
    event
        .and_then(|e| e.order_id.as_ref())
        .map_or_else(String::new, |o| o.as_str().to_owned())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use charge_core::charge::event_plan::EventMismatch;
    use charge_core::charge::plan::Mismatch;
    use charge_core::operation::OperationStatus;

    use super::*;

    #[test]
    fn the_outcome_labels_are_the_functions() {
        for status in [
            OperationStatus::Pending,
            OperationStatus::Unknown,
            OperationStatus::Succeeded,
            OperationStatus::Failed,
        ] {
            assert!(is_applied(status.as_str()), "{status}");
            assert!(!is_mismatch(status.as_str()));
        }
        assert!(is_applied("review"));
        let mut mismatches = vec![
            EventMismatch::StatusContradicted,
            EventMismatch::UnknownPaymentIntent,
        ];
        mismatches.extend(
            [
                Mismatch::OperationId,
                Mismatch::OrderId,
                Mismatch::Amount,
                Mismatch::Currency,
                Mismatch::Livemode,
            ]
            .map(EventMismatch::Intent),
        );
        for m in mismatches {
            assert!(is_mismatch(m.as_str()), "{}", m.as_str());
            assert!(!is_applied(m.as_str()));
        }
        for other in [
            "duplicate",
            "already_settled",
            "in_review",
            "second_payment_intent",
            "busy",
        ] {
            assert!(!is_applied(other) && !is_mismatch(other), "{other}");
        }
    }
}
