//! The whole bill of one charge, counted on the wire: every request the
//! deployed stack makes for one happy-path charge, by function, with each way Stripe's events
//! come in (none, a signed webhook, an EventBridge partner event) and the outcome relay.
//!
//! One order through the real handlers against moto (DynamoDB, its stream, SQS FIFO, EventBridge)
//! and an embedded stripe-sim whose events are on, subscribed to the types the template's
//! rule and docs/deploy.md enable ([`charge_once::events::HANDLED_TYPES`]):
//! 1. checkout (`events/checkout-valid.json`, for a fresh order id), then one charge delivery
//!    (receive, invoke, delete, as the event source does);
//! 2. events in: every delivery the simulator makes for that order, to the events function as
//!    the configuration delivers it (`handle_http` with the `Stripe-Signature` it signed, or
//!    `handle_eventbridge` with the envelope); the inbox table on its own counted client;
//! 3. the relay: the table's stream read from moto (as Lambda's event source reads it; those
//!    reads are free for a Lambda trigger, and counted apart), the records the template's
//!    `FilterCriteria` lets through ([`passes_filter`]) handed to `notify::handler::handle`,
//!    whose `PutEvents` go to a bus on moto through a client with [`PutEventsCounter`] (calls,
//!    entries, and each entry's size by EventBridge's rule, for its 64 KB chunks).
//!
//! Each path runs twice on its stack, the first order as a warm-up (connections, first-call
//! costs), and only the second is kept. Counted per phase: DynamoDB requests by operation (table
//! and inbox apart), SQS, Stripe (the simulator's counters), EventBridge; our log lines under
//! the functions' own subscriber ([`crate::logs::take_lines`]) and the EMF lines each function
//! writes to stdout (also CloudWatch Logs bytes); and the thread's CPU time around each handler
//! call on a current-thread runtime (`/proc/thread-self/schedstat`): our code, the AWS SDK and
//! the HTTP clients without TLS, and, in the charge and events phases, the embedded simulator's
//! answering too (it runs on the same thread): an upper bound of the function's own CPU.

use std::sync::{Arc, Mutex};

use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use aws_sdk_eventbridge::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_eventbridge::config::{ConfigBag, Intercept, RuntimeComponents};
use charge_core::plan::Policy;
use charge_core::time::Clock;
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::eventbridge::EventBridgePublisher;
use charge_once::adapters::inbox::DynamoInbox;
use charge_once::adapters::sqs::{SqsDeadLetters, SqsQueue};
use charge_once::events::{EventsDeps, WebhookSecret, DEFAULT_TOLERANCE, HANDLED_TYPES};
use charge_once::executor::EngineDeps;
use charge_once::ports::OperationReads;
use charge_once::telemetry::CapturedMetrics;
use lambda_runtime::{Context, LambdaEvent};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use stripe_sim::{DeliveryMode, WebhookConfig, DEFAULT_EVENT_SOURCE};
use testkit::aws::{receive_as_event, sdk_config, unique, wait_until_active};
use testkit::streams::{lambda_record, pattern_matches, read_all};

use crate::wire::counter::{counted_dynamodb, WireCounter, WireTally};
use crate::wire::scenarios::{Counts, Stack, StripeCounts};

/// The sample checkout (12.50 USD, `pm_card_visa`); its order id is replaced per run.
const CHECKOUT_EVENT: &str = include_str!("../../../events/checkout-valid.json");
/// A signing secret of Stripe's form (the webhook configuration only).
const SECRET: &str = "whsec_bill7Kq2mZx9Lr4Tn8Vb3Hc6Jd1Fg5Ws0Ye";

/// How Stripe's events reach the stack (the template's two optional parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Neither parameter set (the default): the reconciler alone settles.
    None,
    /// `StripeWebhookSecretArn`: signed HTTPS to `POST /stripe/webhook`.
    Webhook,
    /// `StripeEventSourceName`: the partner event bus, a rule, the events function.
    EventBridge,
}

impl Source {
    pub const ALL: [Source; 3] = [Source::None, Source::EventBridge, Source::Webhook];

    pub fn label(self) -> &'static str {
        match self {
            Source::None => "no events in (default)",
            Source::EventBridge => "EventBridge partner events",
            Source::Webhook => "signed webhook",
        }
    }
}

/// What one function did for the charge: its requests and what it wrote to CloudWatch Logs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// Invocations of the function (a batch of one message, one event, one stream batch).
    pub invocations: u64,
    pub counts: Counts,
    /// The inbox table's requests (the events function only).
    pub inbox: WireTally,
    /// `PutEvents` (the relay only).
    pub put_events: PutEventsTally,
    /// Our log lines as written, and their "LEVEL message".
    pub lines: Vec<String>,
    pub messages: Vec<String>,
    /// The EMF lines the function wrote to stdout (CloudWatch Logs bytes too).
    pub emf_lines: Vec<String>,
    /// The thread's CPU time around the handler calls (ns; see the module docs).
    pub cpu_ns: u64,
}

impl Phase {
    pub fn log_bytes(&self) -> u64 {
        self.lines.iter().map(|l| l.len() as u64).sum()
    }

    pub fn emf_bytes(&self) -> u64 {
        self.emf_lines.iter().map(|l| l.len() as u64).sum()
    }
}

/// The events in of one charge.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventsIn {
    /// Each delivery's event type and the answer (HTTP status, or `ok`/`failed` for EventBridge).
    pub deliveries: Vec<(String, String)>,
    /// The bytes of each delivery's body (the event, or its EventBridge envelope).
    pub body_bytes: Vec<u64>,
    pub phase: Phase,
}

/// The relay of one charge.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Relay {
    /// Stream records the charge's writes made (all kinds).
    pub stream_records: u64,
    /// Of those, what the template's FilterCriteria passes to the function.
    pub filtered_in: u64,
    /// Outcome events the relay reported published.
    pub published: u64,
    pub phase: Phase,
}

/// One configuration's whole path for one charge.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BillRun {
    pub source: Source,
    pub checkout: Phase,
    pub charge: Phase,
    pub events_in: Option<EventsIn>,
    pub relay: Relay,
}

/// `bill.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BillRecord {
    /// The log subscriber the lines were written by (`Ours`, `LambdaDefault`).
    pub subscriber: String,
    /// The build of `bench` that measured the CPU times (`debug` or `release`).
    pub build: String,
    pub runs: Vec<BillRun>,
}

/// `PutEvents` as the client sent them: calls, entries, and each entry's size by EventBridge's
/// published rule (Source, DetailType, Detail, each Resource in UTF-8 bytes, 14 bytes for a
/// Time), which bills every started 64 KB of an entry as one event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PutEventsTally {
    pub calls: u64,
    pub entries: u64,
    pub entry_bytes: Vec<u64>,
}

impl PutEventsTally {
    /// Events billed: each entry's 64 KB chunks.
    pub fn billed_events(&self) -> u64 {
        self.entry_bytes
            .iter()
            .map(|b| b.div_ceil(64 * 1024).max(1))
            .sum()
    }

    fn since(&self, before: &PutEventsTally) -> PutEventsTally {
        PutEventsTally {
            calls: self.calls - before.calls,
            entries: self.entries - before.entries,
            entry_bytes: self.entry_bytes[before.entry_bytes.len()..].to_vec(),
        }
    }
}

/// Counts the `PutEvents` of one EventBridge client before they are serialised: once per call
/// (a retried attempt is the same entries; the SDK does not split or merge them).
#[derive(Debug, Clone, Default)]
pub struct PutEventsCounter {
    tally: Arc<Mutex<PutEventsTally>>,
}

impl PutEventsCounter {
    pub fn snapshot(&self) -> PutEventsTally {
        self.tally.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Intercept for PutEventsCounter {
    fn name(&self) -> &'static str {
        "PutEventsCounter"
    }

    fn read_before_serialization(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        use aws_sdk_eventbridge::operation::put_events::PutEventsInput;
        let Some(input) = context.input().downcast_ref::<PutEventsInput>() else {
            return Ok(());
        };
        let mut t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        t.calls += 1;
        for e in input.entries() {
            t.entries += 1;
            let size = e.source().map_or(0, str::len)
                + e.detail_type().map_or(0, str::len)
                + e.detail().map_or(0, str::len)
                + e.resources().iter().map(String::len).sum::<usize>()
                + if e.time().is_some() { 14 } else { 0 };
            t.entry_bytes.push(size as u64);
        }
        Ok(())
    }
}

/// The template's `NotifyStreamSource` `FilterCriteria` patterns, as [`passes_filter`] applies
/// them (a test holds these to template.yaml).
pub const FILTER_PATTERNS: [&str; 3] = [
    r#"{"eventName":["INSERT","MODIFY"],"dynamodb":{"NewImage":{"status":{"S":["authorized","succeeded","failed"]}}}}"#,
    r#"{"eventName":["INSERT","MODIFY"],"dynamodb":{"NewImage":{"review_reason":{"S":[{"exists":true}]}}}}"#,
    r#"{"eventName":["INSERT","MODIFY"],"dynamodb":{"NewImage":{"dispute_status":{"S":[{"exists":true}]}}}}"#,
];

/// Whether Lambda's event filtering passes `record` (the Lambda event's record) to the relay:
/// one of [`FILTER_PATTERNS`] matches it, by the matcher the template's own filter is checked
/// with (`tests/template.rs`).
pub fn passes_filter(record: &Value) -> bool {
    FILTER_PATTERNS.iter().any(|p| {
        let pattern: Value = serde_json::from_str(p).expect("a filter pattern is JSON");
        pattern_matches(&pattern, record)
    })
}

/// A Lambda context with a request id of the real length (lines carry it in their spans).
fn invocation() -> Context {
    let mut context = Context::default();
    context.request_id = "6d68ca91-49c9-448d-89b8-7ca3e6dc66aa".into();
    context
}

fn cpu_ns() -> u64 {
    footprint::cpu::thread_cpu_ns()
}

/// One configuration's stack: the wire stack, the inbox, the bus, the functions' deps.
struct World {
    source: Source,
    stack: Stack,
    store: Arc<DynamoStore>,
    inbox: WireCounter,
    events: PutEventsCounter,
    streams: aws_sdk_dynamodbstreams::Client,
    stream_arn: String,
    checkout: checkout::door::Checkout,
    charge: charge::handler::ChargeFunction,
    webhook: Option<events::handler::EventsFunction>,
    notify: notify::handler::Notify,
    metrics: Metrics,
    /// Stream records already relayed (the warm-up's).
    relayed: usize,
}

/// Each function's EMF lines, captured apart.
struct Metrics {
    checkout: Arc<CapturedMetrics>,
    charge: Arc<CapturedMetrics>,
    webhook: Arc<CapturedMetrics>,
    notify: Arc<CapturedMetrics>,
}

/// The stream of the operations table.
async fn stream_arn(stack: &Stack, table: &str) -> String {
    stack
        .plain_dynamo
        .describe_table()
        .table_name(table)
        .send()
        .await
        .expect("DescribeTable")
        .table()
        .and_then(|t| t.latest_stream_arn())
        .expect("the table has a stream")
        .to_owned()
}

/// A fresh event bus, and a client whose `PutEvents` are counted.
async fn event_bus(
    config: &aws_config::SdkConfig,
) -> (String, PutEventsCounter, aws_sdk_eventbridge::Client) {
    let bus = unique("charge-once");
    aws_sdk_eventbridge::Client::new(config)
        .create_event_bus()
        .name(&bus)
        .send()
        .await
        .expect("CreateEventBus on moto");
    let events = PutEventsCounter::default();
    let client = aws_sdk_eventbridge::Client::from_conf(
        aws_sdk_eventbridge::config::Builder::from(config)
            .interceptor(events.clone())
            .build(),
    );
    (bus, events, client)
}

/// Stripe's events on in the simulator, delivered as `source` delivers them.
fn events_on(stack: &Stack, source: Source) {
    stack
        .side
        .sim
        .set_webhooks(WebhookConfig {
            url: None,
            secret: (source == Source::Webhook).then(|| SECRET.to_owned()),
            enabled_events: Some(HANDLED_TYPES.iter().map(|t| (*t).to_owned()).collect()),
            mode: if source == Source::Webhook {
                DeliveryMode::Webhook
            } else {
                DeliveryMode::EventBridge
            },
            ..WebhookConfig::default()
        })
        .expect("stripe-sim events on");
}

/// The events function as `source` configures it.
fn webhook_function(
    source: Source,
    charge: EngineDeps,
    inbox: DynamoInbox,
    metrics: Arc<CapturedMetrics>,
) -> events::handler::EventsFunction {
    events::handler::EventsFunction {
        events: EventsDeps {
            charge,
            inbox: Arc::new(inbox),
            secrets: (source == Source::Webhook)
                .then(|| vec![WebhookSecret::parse(SECRET).expect("a secret of Stripe's form")]),
            tolerance: DEFAULT_TOLERANCE,
            event_source: (source == Source::EventBridge).then(|| DEFAULT_EVENT_SOURCE.to_owned()),
        },
        metrics,
    }
}

impl World {
    async fn new(source: Source) -> Self {
        let stack = Stack::new().await;
        let config = sdk_config().await;
        let store = Arc::new(DynamoStore::new(
            stack.dynamo_client.clone(),
            unique("operations"),
        ));
        store.create_table().await.expect("create table on moto");
        let inbox_counter = WireCounter::new();
        let inbox = DynamoInbox::new(counted_dynamodb(&config, &inbox_counter), unique("inbox"));
        inbox.create_table().await.expect("create inbox on moto");
        wait_until_active(&stack.plain_dynamo, inbox.table_name()).await;
        let stream_arn = stream_arn(&stack, store.table()).await;
        let (bus, events, events_client) = event_bus(&config).await;
        let plain_sqs = aws_sdk_sqs::Client::new(&config);
        let notify_dlq = testkit::aws::fresh_queue(&plain_sqs, "notify-dlq").await;
        let metrics = Metrics {
            checkout: Arc::new(CapturedMetrics::new()),
            charge: Arc::new(CapturedMetrics::new()),
            webhook: Arc::new(CapturedMetrics::new()),
            notify: Arc::new(CapturedMetrics::new()),
        };
        let clock: Arc<dyn charge_core::time::Clock> = Arc::new(stack.side.clock.clone());
        // The production client setting: one in-call retry with the same key.
        let gateway = Arc::new(stack.side.gateway_with(|c| c.max_network_retries = 1));
        let deps = EngineDeps {
            store: store.clone(),
            gateway,
            clock: clock.clone(),
            policy: Policy::default(),
        };
        let queue = Arc::new(SqsQueue::new(stack.sqs_client.clone(), &stack.queue_url));
        let mut charge = charge::handler::ChargeFunction::local(deps.clone());
        charge.metrics = metrics.charge.clone();
        let webhook = (source != Source::None).then(|| {
            events_on(&stack, source);
            webhook_function(source, deps.clone(), inbox, metrics.webhook.clone())
        });
        Self {
            source,
            checkout: checkout::door::Checkout {
                store: store.clone(),
                queue,
                clock: clock.clone(),
                pending_grace: Policy::default().pending_grace,
                max_charge_attempts: Default::default(),
                metrics: metrics.checkout.clone(),
            },
            charge,
            webhook,
            notify: notify::handler::Notify {
                // The relay reads each settled outcome back from the table: counted with the rest.
                store: store.clone(),
                publisher: Arc::new(EventBridgePublisher::new(events_client, bus)),
                dead_letters: Arc::new(SqsDeadLetters::new(plain_sqs, &notify_dlq)),
                clock,
                metrics: metrics.notify.clone(),
            },
            metrics,
            streams: aws_sdk_dynamodbstreams::Client::new(&config),
            stream_arn,
            events,
            inbox: inbox_counter,
            store,
            stack,
            relayed: 0,
        }
    }

    /// Everything counted so far, and the EMF lines of `m` (to diff a phase by).
    fn mark(&self, m: &CapturedMetrics) -> (Counts, WireTally, PutEventsTally, usize) {
        (
            self.stack.snapshot(),
            self.inbox.snapshot(),
            self.events.snapshot(),
            m.lines().len(),
        )
    }

    fn phase(
        &self,
        before: (Counts, WireTally, PutEventsTally, usize),
        m: &CapturedMetrics,
        invocations: u64,
        cpu_ns: u64,
    ) -> Phase {
        let lines = crate::logs::take_lines();
        Phase {
            invocations,
            counts: since(&self.stack.snapshot(), &before.0),
            inbox: self.inbox.snapshot().since(&before.1),
            put_events: self.events.snapshot().since(&before.2),
            lines: lines.iter().map(|(l, _)| l.clone()).collect(),
            messages: lines.into_iter().map(|(_, m)| m).collect(),
            emf_lines: m.lines()[before.3..].to_vec(),
            cpu_ns,
        }
    }

    async fn one_order(&mut self, order: &str) -> BillRun {
        // Nothing of setup or of an earlier order in this order's phases.
        let _ = crate::logs::take_lines();
        let before = self.mark(&self.metrics.checkout);
        let t = cpu_ns();
        let resp = checkout::handler::handle(
            &self.checkout,
            LambdaEvent::new(checkout_event(order), invocation()),
        )
        .await;
        let cpu = cpu_ns() - t;
        assert_eq!(resp.status_code, 202, "checkout: {:?}", resp.body);
        let checkout = self.phase(before, &self.metrics.checkout, 1, cpu);

        // The event source's receive and delete are counted apart (Counts::source).
        let before = self.mark(&self.metrics.charge);
        let batch = receive_as_event(&self.stack.source_client, &self.stack.queue_url).await;
        assert_eq!(batch.records.len(), 1, "one message expected");
        let t = cpu_ns();
        let resp =
            charge::handler::handle(&self.charge, LambdaEvent::new(batch.clone(), invocation()))
                .await;
        let cpu = cpu_ns() - t;
        assert!(resp.batch_item_failures.is_empty(), "the charge failed");
        for r in &batch.records {
            self.stack
                .source_client
                .delete_message()
                .queue_url(&self.stack.queue_url)
                .receipt_handle(r.receipt_handle.clone().unwrap_or_default())
                .send()
                .await
                .expect("DeleteMessage on moto");
        }
        let charge = self.phase(before, &self.metrics.charge, 1, cpu);

        let events_in = match &self.webhook {
            None => None,
            Some(function) => Some(self.events_in(function).await),
        };

        let relay = self.relay().await;
        let op = self
            .store
            .get(&charge_core::operation::OperationKey::charge(
                charge_core::domain::OrderId::parse(order).expect("order id"),
            ))
            .await
            .expect("GetItem")
            .expect("the operation");
        assert_eq!(
            op.status,
            charge_core::operation::OperationStatus::Succeeded
        );
        BillRun {
            source: self.source,
            checkout,
            charge,
            events_in,
            relay,
        }
    }

    /// The relay of the order's new stream records, through the template's filter, to notify.
    async fn relay(&mut self) -> Relay {
        let before = self.mark(&self.metrics.notify);
        let (records, filtered) = self.new_stream_records().await;
        let stream_records = records as u64;
        let t = cpu_ns();
        let event: aws_lambda_events::dynamodb::Event =
            serde_json::from_value(json!({ "Records": filtered }))
                .expect("a Lambda DynamoDB stream event");
        let filtered_in = event.records.len() as u64;
        let resp =
            notify::handler::handle(&self.notify, LambdaEvent::new(event, invocation())).await;
        let cpu = cpu_ns() - t;
        assert!(resp.batch_item_failures.is_empty(), "the relay failed");
        let phase = self.phase(before, &self.metrics.notify, 1, cpu);
        Relay {
            stream_records,
            filtered_in,
            published: phase.put_events.entries,
            phase,
        }
    }

    /// Every delivery Stripe makes for the order, as the configuration delivers it.
    async fn events_in(&self, function: &events::handler::EventsFunction) -> EventsIn {
        let sim = &self.stack.side.sim;
        let before = self.mark(&self.metrics.webhook);
        let mut deliveries = Vec::new();
        let mut body_bytes = Vec::new();
        let mut cpu = 0;
        // Deliveries fall due a little after the change: move the clock to each.
        while let Some(due) = sim.next_webhook_due_ms() {
            let now = self.stack.side.clock.now().as_millis();
            if due > now {
                self.stack
                    .side
                    .clock
                    .advance(std::time::Duration::from_millis((due - now) as u64));
            }
            for d in sim.take_due_webhooks() {
                body_bytes.push(d.body.len() as u64);
                let t = cpu_ns();
                let answer = if d.mode == DeliveryMode::EventBridge {
                    let payload = match serde_json::from_str(&d.body) {
                        Ok(events::handler::Incoming::EventBridge(e)) => e,
                        _ => Default::default(),
                    };
                    let r = events::handler::handle_eventbridge(
                        function,
                        LambdaEvent::new(payload, invocation()),
                    )
                    .await;
                    sim.webhook_result(&d, true);
                    if r.is_ok() { "ok" } else { "failed" }.to_owned()
                } else {
                    let req = events::handler::delivery_request(&d.body, &d.signature);
                    let resp =
                        events::handler::handle_http(function, LambdaEvent::new(req, invocation()))
                            .await;
                    sim.webhook_result(&d, (200..300).contains(&resp.status_code));
                    resp.status_code.to_string()
                };
                cpu += cpu_ns() - t;
                deliveries.push((d.event_type.clone(), answer));
            }
        }
        let phase = self.phase(before, &self.metrics.webhook, deliveries.len() as u64, cpu);
        EventsIn {
            deliveries,
            body_bytes,
            phase,
        }
    }

    /// The stream records since the last call (all of them), and those the filter passes, as
    /// the Lambda event's records.
    async fn new_stream_records(&mut self) -> (usize, Vec<Value>) {
        let all = read_all(&self.streams, &self.stream_arn).await;
        let new = &all[self.relayed.min(all.len())..];
        self.relayed = all.len();
        let filtered = new
            .iter()
            .map(|r| lambda_record(r, &self.stream_arn))
            .filter(passes_filter)
            .collect();
        (new.len(), filtered)
    }
}

fn since(after: &Counts, before: &Counts) -> Counts {
    Counts {
        dynamodb: after.dynamodb.since(&before.dynamodb),
        sqs: after.sqs.since(&before.sqs),
        source: after.source.since(&before.source),
        stripe: StripeCounts {
            create: after.stripe.create - before.stripe.create,
            retrieve: after.stripe.retrieve - before.stripe.retrieve,
            search: after.stripe.search - before.stripe.search,
            refund: after.stripe.refund - before.stripe.refund,
            refund_read: after.stripe.refund_read - before.stripe.refund_read,
            cancel: 0,
            capture: 0,
        },
    }
}

fn checkout_event(order: &str) -> ApiGatewayV2httpRequest {
    let mut req: ApiGatewayV2httpRequest =
        serde_json::from_str(CHECKOUT_EVENT).expect("events/checkout-valid.json");
    req.path_parameters.insert("order_id".into(), order.into());
    req.raw_path = Some(format!("/orders/{order}/charge"));
    req
}

/// Runs every configuration (needs moto; installs the log capture: once per process).
pub async fn measure(subscriber: crate::logs::Subscriber) -> BillRecord {
    crate::logs::install_capture(subscriber);
    let mut runs = Vec::new();
    for source in Source::ALL {
        let mut world = World::new(source).await;
        let _warm_up = world.one_order(&unique("ord-warm")).await;
        let run = world.one_order(&unique("ord-bill")).await;
        eprintln!(
            "{source:?}: checkout {:?}; charge {:?}; events in {:?}; relay {} records, {} in, PutEvents {:?}",
            run.checkout.counts,
            run.charge.counts,
            run.events_in.as_ref().map(|e| (&e.deliveries, &e.phase.counts, &e.phase.inbox)),
            run.relay.stream_records,
            run.relay.filtered_in,
            run.relay.phase.put_events
        );
        runs.push(run);
    }
    BillRecord {
        subscriber: format!("{subscriber:?}"),
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .to_owned(),
        runs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_is_the_templates() {
        let template = include_str!("../../../template.yaml");
        for p in FILTER_PATTERNS {
            assert!(
                template.contains(&format!("- Pattern: '{p}'")),
                "template.yaml's NotifyStreamSource FilterCriteria no longer has {p}"
            );
        }
        assert_eq!(
            template.matches("- Pattern: '").count(),
            FILTER_PATTERNS.len()
        );
    }

    #[test]
    fn the_filter_passes_outcomes_only() {
        use aws_sdk_dynamodbstreams::types::{
            AttributeValue as S, OperationType, Record, StreamRecord,
        };
        let record = |name: OperationType, attrs: &[(&str, &str)]| {
            let image = attrs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), S::S((*v).to_owned())))
                .collect();
            let record = Record::builder()
                .event_name(name)
                .dynamodb(StreamRecord::builder().set_new_image(Some(image)).build())
                .build();
            lambda_record(&record, "arn:aws:dynamodb:us-east-1:1:table/t/stream/s")
        };
        assert!(passes_filter(&record(
            OperationType::Modify,
            &[("status", "succeeded")]
        )));
        assert!(passes_filter(&record(
            OperationType::Insert,
            &[("status", "failed")]
        )));
        assert!(passes_filter(&record(
            OperationType::Modify,
            &[("status", "authorized")]
        )));
        assert!(passes_filter(&record(
            OperationType::Modify,
            &[("status", "unknown"), ("review_reason", "stuck")]
        )));
        assert!(!passes_filter(&record(
            OperationType::Modify,
            &[("status", "pending")]
        )));
        assert!(!passes_filter(&record(
            OperationType::Remove,
            &[("status", "succeeded")]
        )));
    }

    #[test]
    fn an_entry_is_billed_per_started_64_kb() {
        let t = PutEventsTally {
            calls: 1,
            entries: 3,
            entry_bytes: vec![420, 65_536, 65_537],
        };
        assert_eq!(t.billed_events(), 1 + 1 + 2);
    }
}
