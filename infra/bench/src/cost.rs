//! Section 5 of BENCHMARKS.md: the whole bill of one charge (issue 27, part 4). Every request the
//! deployed stack makes for one happy-path charge, counted on the wire by `bench bill`
//! ([`crate::bill`]), priced per 1M charges at one message per batch and at full batches, with
//! each way Stripe's events come in (none, EventBridge, webhook) and the outcome relay; then the
//! three reductions measured before and after (log volume, memory sizes, the relay's batching).
//!
//! Every figure is a count from `bill.json` times a published price, except what is marked
//! **assumed** in the tables: durations of AWS and Stripe calls, the cold-start share, this
//! host's core against a Graviton vCPU, and the relay's batch at the stack's ceiling.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use crate::bill::{BillRecord, BillRun, Phase, Source};
use crate::report::{read_opt, CpuRecord};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The heading [`splice`] replaces.
pub const HEADING: &str = "## 5. AWS cost per 1M charges: the whole bill";

/// Published unit prices, us-east-1. `/work/shared/REFERENCE.md`: Lambda (arm64 GB-s, requests),
/// DynamoDB on-demand, SQS FIFO, and EventBridge partner events ($1.00 per million on the bus).
pub const LAMBDA_ARM_GB_S: f64 = 0.000_013_333_4;
pub const LAMBDA_PER_REQUEST: f64 = 0.20 / 1e6;
pub const DDB_PER_WRU: f64 = 0.625 / 1e6;
pub const DDB_PER_RRU: f64 = 0.125 / 1e6;
pub const SQS_FIFO_PER_REQUEST: f64 = 0.50 / 1e6;
pub const PARTNER_EVENT: f64 = 1.00 / 1e6;
/// The public price pages (us-east-1, checked November/December 2026): EventBridge custom events
/// (`PutEvents`, $1.00 per million, each started 64 KB of an entry one event; delivery to a
/// target in the same account is not charged), HTTP API requests ($1.00 per million, first 300M a
/// month, per 512 KB), CloudWatch Logs ingestion ($0.50 per GB, standard class; the first tier of
/// Lambda's tiered log pricing is the same), Secrets Manager API calls ($0.05 per 10,000).
pub const CUSTOM_EVENT: f64 = 1.00 / 1e6;
pub const HTTP_API_PER_REQUEST: f64 = 1.00 / 1e6;
pub const LOGS_PER_GB: f64 = 0.50;
pub const SECRETS_PER_CALL: f64 = 0.05 / 10_000.0;
/// Share of invocations that start a new execution environment: **assumed** (AWS's Lambda docs say
/// cold starts are typically under 1 % of invocations in production; a steady flow is far below).
pub const COLD_START_SHARE: f64 = 0.01;
/// Lambda's docs ("Configure Lambda function memory"): at 1,769 MB a function has the equivalent
/// of one vCPU; CPU is allocated in proportion to memory.
pub const MB_PER_VCPU: f64 = 1769.0;
/// `MemorySize` of every function before issue 27 (the template's Globals).
pub const MEMORY_BEFORE_MB: f64 = 256.0;

/// Assumed latencies (not measured here): a warm DynamoDB, SQS or EventBridge call from Lambda in
/// the same region, and a Stripe PaymentIntent create with confirm.
pub const AWS_CALL_MS: f64 = 10.0;
pub const STRIPE_CALL_MS: f64 = 300.0;
/// A Stripe retrieve (none on the happy path; priced if counted).
pub const STRIPE_RETRIEVE_MS: f64 = 150.0;

/// Our log lines per charge before issue 27 (main at 0ff5510: lambda_runtime's subscriber, two
/// checkout lines per new operation), measured by `bench bill lambda_runtime` on that code:
/// (function, lines, bytes). Every line of these is per charge.
pub const LOGS_BEFORE: [(&str, u64, u64); 5] = [
    ("checkout", 2, 1273),
    ("charge", 2, 1324),
    ("notify", 2, 394),
    ("webhook (EventBridge)", 2, 896),
    ("webhook (signed route)", 2, 900),
];

/// Log lines a function writes once per invocation, not once per charge: split by message.
const PER_BATCH_MESSAGES: &[&str] = &["INFO stream batch relayed"];

/// The functions, as the template names them (`<Name>Function`).
const FUNCTIONS: [&str; 4] = ["checkout", "charge", "webhook", "notify"];

/// Lambda platform records (start + report, JSON format) per invocation, and the access-log
/// lines: from [`crate::logs`] (their documented shapes, the template's access-log format).
#[derive(Debug, Clone, Copy)]
pub struct Fixed {
    pub platform_per_invocation: f64,
    pub checkout_access_line: f64,
    pub webhook_access_line: f64,
}

impl Fixed {
    pub fn from_template(template: &str) -> Self {
        Self {
            platform_per_invocation: (crate::logs::PLATFORM_START.len()
                + crate::logs::PLATFORM_REPORT.len()) as f64,
            checkout_access_line: crate::logs::access_log_line(template).len() as f64,
            webhook_access_line: crate::logs::webhook_access_log_line(template).len() as f64,
        }
    }
}

/// What the template says that the bill depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateFacts {
    /// `MemorySize` per function (MB): its own, else the Globals'.
    pub memory_mb: Vec<(&'static str, f64)>,
    pub charge_batch: f64,
    pub relay_batch: f64,
    pub relay_window_secs: f64,
}

impl TemplateFacts {
    pub fn memory(&self, function: &str) -> f64 {
        self.memory_mb
            .iter()
            .find(|(f, _)| *f == function)
            .map_or(MEMORY_BEFORE_MB, |(_, m)| *m)
    }
}

/// The `Key: number` under the resource `resource` (its block: the lines up to the next one
/// indented like it).
fn resource_number(template: &str, resource: &str, key: &str) -> Option<f64> {
    let start = template.find(&format!("\n  {resource}:\n"))? + resource.len() + 5;
    template[start..]
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with("   ") || l.starts_with("  #"))
        .find_map(|l| {
            l.trim()
                .strip_prefix(&format!("{key}:"))
                .and_then(|v| v.split('#').next())
                .and_then(|v| v.trim().parse().ok())
        })
}

/// Reads [`TemplateFacts`] from template.yaml's text.
pub fn template_facts(template: &str) -> Result<TemplateFacts, Error> {
    let globals = template
        .split("\nGlobals:\n")
        .nth(1)
        .and_then(|g| g.split("\nResources:\n").next())
        .and_then(|g| {
            g.lines().find_map(|l| {
                l.trim()
                    .strip_prefix("MemorySize:")
                    .and_then(|v| v.split('#').next())
                    .and_then(|v| v.trim().parse::<f64>().ok())
            })
        })
        .ok_or("template.yaml: no Globals MemorySize")?;
    let mut memory_mb = Vec::new();
    for f in FUNCTIONS.iter().copied().chain(["reconciler"]) {
        let name = format!("{}{}Function", f[..1].to_uppercase(), &f[1..]);
        memory_mb.push((
            f,
            resource_number(template, &name, "MemorySize").unwrap_or(globals),
        ));
    }
    let need = |resource: &str, key: &str| {
        resource_number(template, resource, key)
            .ok_or_else(|| format!("template.yaml: no {resource} {key}"))
    };
    Ok(TemplateFacts {
        memory_mb,
        charge_batch: need("ChargeQueueEventSource", "BatchSize")?,
        relay_batch: need("NotifyStreamSource", "BatchSize")?,
        relay_window_secs: need("NotifyStreamSource", "MaximumBatchingWindowInSeconds")?,
    })
}

/// Charges per second the stack can make at most: the template's default Stripe budget less the
/// twelfth kept for the reconciler and the events function ([`charge_once::config::StripeBudget`]).
pub fn ceiling_rate() -> f64 {
    let b = charge_once::config::StripeBudget {
        per_second: charge_once::config::StripeBudget::DEFAULT_PER_SECOND,
        charge_concurrency: charge_once::config::StripeBudget::DEFAULT_CONCURRENCY,
    };
    b.charge_share() * b.charge_concurrency as f64
}

/// How full the batches are.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Batching {
    pub label: &'static str,
    /// Messages per charge invocation.
    pub charge: f64,
    /// Outcome records per relay invocation.
    pub relay: f64,
}

/// One message per batch (low traffic), and full batches: the charge function's `BatchSize`, the
/// relay's batch at the stack's ceiling rate within its batching window (at most its
/// `BatchSize`; **assumed** all on one stream shard: more shards make smaller batches).
pub fn batchings(t: &TemplateFacts) -> [Batching; 2] {
    [
        Batching {
            label: "one message per batch",
            charge: 1.0,
            relay: 1.0,
        },
        Batching {
            label: "full batches",
            charge: t.charge_batch,
            relay: relay_batch(t, t.relay_window_secs),
        },
    ]
}

/// Outcome records per relay invocation at the ceiling rate with a batching window of `window`.
pub fn relay_batch(t: &TemplateFacts, window: f64) -> f64 {
    (ceiling_rate() * window).floor().clamp(1.0, t.relay_batch)
}

/// What the model takes besides the counts.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub template: TemplateFacts,
    pub fixed: Fixed,
    /// CPU per invocation on one full core (µs) and where it comes from.
    pub cpu_us: Vec<(&'static str, f64)>,
    pub cpu_source: String,
    /// Section 3's CPU per charge (our code alone, µs): the lower bound.
    pub cpu_lower_bound: f64,
    /// Init (median ms) per function; `None` when not measured.
    pub init_ms: Vec<(&'static str, Option<f64>)>,
}

impl Inputs {
    fn cpu(&self, f: &str) -> f64 {
        self.cpu_us
            .iter()
            .find(|(n, _)| *n == f)
            .map_or(0.0, |(_, c)| *c)
    }

    /// Measured init, else the largest measured one (**assumed**), else 0.
    fn init(&self, f: &str) -> (f64, bool) {
        match self
            .init_ms
            .iter()
            .find(|(n, _)| *n == f)
            .and_then(|(_, m)| *m)
        {
            Some(m) => (m, true),
            None => (
                self.init_ms
                    .iter()
                    .filter_map(|(_, m)| *m)
                    .fold(0.0, f64::max),
                false,
            ),
        }
    }
}

/// One line of the bill, per charge.
#[derive(Debug, Clone)]
pub struct Item {
    /// `charge path`, `relay`, `events in` (with the source), `logs`, `other`.
    pub group: &'static str,
    /// Which configurations pay it: `all`, `EventBridge`, `webhook`.
    pub applies: &'static str,
    pub item: String,
    pub qty: f64,
    pub price: f64,
    pub unit: &'static str,
    /// Lambda, DynamoDB or SQS (the target).
    pub core: bool,
}

impl Item {
    pub fn cost_per_million(&self) -> f64 {
        self.qty * self.price * 1e6
    }
}

/// A function's billed duration per invocation (ms, whole ms) at `memory_mb`: the assumed waits
/// plus its CPU at the share of a vCPU that memory buys.
pub fn billed_ms(io_ms: f64, cpu_us_full_core: f64, memory_mb: f64) -> f64 {
    (io_ms + cpu_us_full_core / 1e3 * MB_PER_VCPU / memory_mb).ceil()
}

fn gb_s(ms: f64, memory_mb: f64) -> f64 {
    memory_mb / 1024.0 * ms / 1e3
}

fn writes(p: &Phase) -> f64 {
    p.counts.dynamodb_writes() as f64
}

fn reads(p: &Phase) -> f64 {
    p.counts.dynamodb_reads() as f64
}

/// Bytes of a function's lines per charge: per-charge lines, plus per-invocation lines (EMF,
/// per-batch messages, platform records) over the charges an invocation carries.
fn log_bytes(p: &Phase, per_invocation: f64, fixed: &Fixed, charges_per_invocation: f64) -> f64 {
    let mut per_charge = 0.0;
    let mut per_batch = p.emf_bytes() as f64 + fixed.platform_per_invocation * per_invocation;
    for (line, message) in p.lines.iter().zip(&p.messages) {
        if PER_BATCH_MESSAGES.contains(&message.as_str()) {
            per_batch += line.len() as f64;
        } else {
            per_charge += line.len() as f64;
        }
    }
    per_charge + per_batch / charges_per_invocation
}

/// The bill of one configuration at one batching, `memory` giving each function's MB.
pub fn items(
    run: &BillRun,
    logs: &BillRun,
    inputs: &Inputs,
    b: &Batching,
    memory: &dyn Fn(&str) -> f64,
) -> Vec<Item> {
    let mut out = Vec::new();
    let mut push = |group, applies, item: String, qty: f64, price, unit, core| {
        out.push(Item {
            group,
            applies,
            item,
            qty,
            price,
            unit,
            core,
        })
    };
    let n = b.charge;
    let k = b.relay;
    let fixed = &inputs.fixed;
    // Checkout.
    let c = &run.checkout;
    let c_calls = c.counts.dynamodb.total() as f64 + c.counts.sqs.total() as f64;
    let c_mb = memory("checkout");
    let c_ms = billed_ms(c_calls * AWS_CALL_MS, inputs.cpu("checkout"), c_mb);
    push("charge path", "all", format!("Lambda checkout {c_mb:.0} MB, 1 invocation × {c_ms:.0} ms (**assumed** {c_calls:.0} AWS calls × {AWS_CALL_MS} ms + CPU)"), gb_s(c_ms, c_mb), LAMBDA_ARM_GB_S, "GB-s", true);
    push(
        "charge path",
        "all",
        "Lambda checkout requests".into(),
        1.0,
        LAMBDA_PER_REQUEST,
        "request",
        true,
    );
    // Charge: n groups concurrently, as long as one (claim, Stripe, record) plus n CPUs.
    let ch = &run.charge;
    let ch_mb = memory("charge");
    let ch_io = ch.counts.dynamodb.total() as f64 * AWS_CALL_MS
        + ch.counts.stripe.create as f64 * STRIPE_CALL_MS;
    let ch_ms = billed_ms(ch_io, n * inputs.cpu("charge"), ch_mb);
    push("charge path", "all", format!("Lambda charge {ch_mb:.0} MB, 1/{n:.0} of an invocation × {ch_ms:.0} ms (**assumed** Stripe {STRIPE_CALL_MS} ms + {} writes × {AWS_CALL_MS} ms + {n:.0} × CPU, groups concurrently)", ch.counts.dynamodb.total()), gb_s(ch_ms, ch_mb) / n, LAMBDA_ARM_GB_S, "GB-s", true);
    push(
        "charge path",
        "all",
        format!("Lambda charge requests ({n:.0} messages per invocation)"),
        1.0 / n,
        LAMBDA_PER_REQUEST,
        "request",
        true,
    );
    let (ci, ci_measured) = inputs.init("checkout");
    let (chi, chi_measured) = inputs.init("charge");
    push(
        "charge path",
        "all",
        format!(
            "Lambda init, cold starts (**assumed** {:.0} % of invocations × init: checkout {ci:.0} ms{}, charge {chi:.0} ms{}, on a full core, scaled to the memory's share as if all CPU: **assumed**)",
            COLD_START_SHARE * 100.0,
            if ci_measured { "" } else { " **assumed**" },
            if chi_measured { "" } else { " **assumed**" },
        ),
        COLD_START_SHARE
            * (gb_s(billed_ms(0.0, ci * 1e3, c_mb), c_mb)
                + gb_s(billed_ms(0.0, chi * 1e3, ch_mb), ch_mb) / n),
        LAMBDA_ARM_GB_S,
        "GB-s",
        true,
    );
    let puts = c.counts.dynamodb.get("PutItem") as f64;
    let table_writes = writes(c) + writes(ch);
    push(
        "charge path",
        "all",
        format!(
            "DynamoDB table writes (counted: checkout {}, charge {}; items < 1 KB)",
            writes(c),
            writes(ch)
        ),
        table_writes,
        DDB_PER_WRU,
        "WRU",
        true,
    );
    // Index writes are not on the wire: the create's put enters the unknown index, the settling
    // record's REMOVE leaves it; the claim changes nothing the index projects.
    push("charge path", "all", "DynamoDB unknown-index writes (derived: the create puts the entry, the settling record removes it)".into(), puts + 1.0, DDB_PER_WRU, "WRU", true);
    push(
        "charge path",
        "all",
        format!("DynamoDB table reads (counted: {})", reads(c) + reads(ch)),
        reads(c) + reads(ch),
        DDB_PER_RRU,
        "RRU",
        true,
    );
    let sends = c.counts.sqs.total() as f64 + ch.counts.sqs.total() as f64;
    let source = ch.counts.source.total() as f64;
    push("charge path", "all", format!("SQS FIFO: SendMessage {sends:.0} + the event source's Receive/Delete {source:.0} per batch ÷ {n:.0} (counted)"), sends + source / n, SQS_FIFO_PER_REQUEST, "request", true);

    // The relay.
    let r = &run.relay.phase;
    let r_mb = memory("notify");
    let calls_per_invocation = (k / charge_once::ports::MAX_BATCH as f64).ceil();
    // Measured with one record and one PutEvents call: counted once per call of up to ten.
    let r_ms = billed_ms(
        calls_per_invocation * AWS_CALL_MS,
        calls_per_invocation * inputs.cpu("notify"),
        r_mb,
    );
    push("relay", "all", format!("Lambda notify {r_mb:.0} MB, 1/{k:.0} of an invocation × {r_ms:.0} ms (**assumed** {calls_per_invocation:.0} PutEvents × {AWS_CALL_MS} ms + the measured CPU per call)"), gb_s(r_ms, r_mb) / k, LAMBDA_ARM_GB_S, "GB-s", true);
    push("relay", "all", format!("Lambda notify requests (counted: {} of the charge's {} stream records pass the FilterCriteria; {k:.0} outcomes per invocation)", run.relay.filtered_in, run.relay.stream_records), run.relay.filtered_in as f64 / k, LAMBDA_PER_REQUEST, "request", true);
    let (ni, ni_measured) = inputs.init("notify");
    push(
        "relay",
        "all",
        format!(
            "Lambda notify init, cold starts (**assumed** {:.0} % × {ni:.0} ms{})",
            COLD_START_SHARE * 100.0,
            if ni_measured {
                ""
            } else {
                " **assumed**: not measured, the largest measured init"
            }
        ),
        COLD_START_SHARE * gb_s(billed_ms(0.0, ni * 1e3, r_mb), r_mb) / k,
        LAMBDA_ARM_GB_S,
        "GB-s",
        true,
    );
    push("relay", "all", format!("DynamoDB Streams reads by the Lambda trigger ({} records; GetRecords by Lambda is not charged, DynamoDB pricing page)", run.relay.stream_records), 0.0, 0.0, "request", true);
    let pe = &r.put_events;
    push("relay", "all", format!("EventBridge PutEvents, custom events (counted: {} entry of {} B in {} call; billed per started 64 KB of an entry)", pe.entries, pe.entry_bytes.iter().max().copied().unwrap_or(0), pe.calls), pe.billed_events() as f64, CUSTOM_EVENT, "event", false);

    // Events in.
    if let Some(ev) = &run.events_in {
        let applies = match run.source {
            Source::Webhook => "webhook",
            _ => "EventBridge",
        };
        let p = &ev.phase;
        let deliveries = ev.deliveries.len() as f64;
        if run.source == Source::EventBridge {
            push(
                "events in",
                applies,
                format!(
                    "EventBridge partner events on the bus (counted: {deliveries:.0}, {})",
                    types(ev)
                ),
                deliveries,
                PARTNER_EVENT,
                "event",
                false,
            );
            push("events in", applies, "EventBridge rule → the events function (same-account delivery to a target: not charged)".into(), deliveries, 0.0, "event", false);
        } else {
            push("events in", applies, format!("API Gateway HTTP API, POST /stripe/webhook (counted: {deliveries:.0} deliveries, {})", types(ev)), deliveries, HTTP_API_PER_REQUEST, "request", false);
        }
        let w_mb = memory("webhook");
        let w_calls = (p.counts.dynamodb.total() + p.inbox.total()) as f64;
        let w_io = w_calls * AWS_CALL_MS + p.counts.stripe.retrieve as f64 * STRIPE_RETRIEVE_MS;
        let w_ms = billed_ms(w_io / deliveries.max(1.0), inputs.cpu("webhook"), w_mb);
        push("events in", applies, format!("Lambda webhook {w_mb:.0} MB, {deliveries:.0} invocation × {w_ms:.0} ms (**assumed** {w_calls:.0} DynamoDB calls × {AWS_CALL_MS} ms + CPU)"), deliveries * gb_s(w_ms, w_mb), LAMBDA_ARM_GB_S, "GB-s", true);
        push(
            "events in",
            applies,
            "Lambda webhook requests (one per event)".into(),
            p.invocations as f64,
            LAMBDA_PER_REQUEST,
            "request",
            true,
        );
        let (wi, wi_measured) = inputs.init("webhook");
        push(
            "events in",
            applies,
            format!(
                "Lambda webhook init, cold starts (**assumed** {:.0} % × {wi:.0} ms{})",
                COLD_START_SHARE * 100.0,
                if wi_measured {
                    ""
                } else {
                    " **assumed**: not measured, the largest measured init"
                }
            ),
            COLD_START_SHARE * deliveries * gb_s(billed_ms(0.0, wi * 1e3, w_mb), w_mb),
            LAMBDA_ARM_GB_S,
            "GB-s",
            true,
        );
        push(
            "events in",
            applies,
            format!("DynamoDB inbox writes (counted: {})", ops(&p.inbox)),
            (p.inbox.get("PutItem") + p.inbox.get("DeleteItem") + p.inbox.get("UpdateItem")) as f64,
            DDB_PER_WRU,
            "WRU",
            true,
        );
        push(
            "events in",
            applies,
            format!(
                "DynamoDB table reads (counted: {}; GetItem strongly consistent, item < 4 KB)",
                ops(&p.counts.dynamodb)
            ),
            reads(p),
            DDB_PER_RRU,
            "RRU",
            true,
        );
        push(
            "events in",
            applies,
            "DynamoDB table writes (counted)".into(),
            writes(p),
            DDB_PER_WRU,
            "WRU",
            true,
        );
        push("events in", applies, format!("Stripe retrieves (counted: {}; not an AWS cost, a share of Stripe's 25/s per endpoint)", p.counts.stripe.retrieve), 0.0, 0.0, "request", false);
        let secrets = if run.source == Source::Webhook {
            2.0
        } else {
            1.0
        };
        push("events in", applies, format!("Secrets Manager at the events function's cold starts ({secrets:.0} GetSecretValue, **assumed** {:.0} % of its invocations)", COLD_START_SHARE * 100.0), COLD_START_SHARE * secrets * deliveries, SECRETS_PER_CALL, "call", false);
        let access = if run.source == Source::Webhook {
            fixed.webhook_access_line * deliveries
        } else {
            0.0
        };
        let lp = logs.events_in.as_ref().map_or(p, |e| &e.phase);
        let bytes = log_bytes(lp, 1.0, fixed, 1.0 / deliveries.max(1.0)) + access;
        push("logs", applies, format!("CloudWatch Logs, webhook function: {bytes:.0} B per charge (measured lines + EMF{}, platform records)", if access > 0.0 { " + the route's access-log line" } else { "" }), bytes / 1073741824.0, LOGS_PER_GB, "GB", false);
    }

    // Logs (measured lines of the chosen subscriber's run) and the rest.
    let lc = log_bytes(&logs.checkout, 1.0, fixed, 1.0) + fixed.checkout_access_line;
    push("logs", "all", format!("CloudWatch Logs, checkout: {lc:.0} B per charge (measured lines, platform records, the access-log line)"), lc / 1073741824.0, LOGS_PER_GB, "GB", false);
    let lch = log_bytes(&logs.charge, 1.0, fixed, n);
    push("logs", "all", format!("CloudWatch Logs, charge: {lch:.0} B per charge (measured lines per message; EMF line and platform records per batch ÷ {n:.0})"), lch / 1073741824.0, LOGS_PER_GB, "GB", false);
    let ln = log_bytes(&logs.relay.phase, 1.0, fixed, k);
    push("logs", "all", format!("CloudWatch Logs, notify: {ln:.0} B per charge (measured line per outcome; batch line, EMF and platform records ÷ {k:.0})"), ln / 1073741824.0, LOGS_PER_GB, "GB", false);
    push(
        "other",
        "all",
        "API Gateway HTTP API, the checkout request".into(),
        1.0,
        HTTP_API_PER_REQUEST,
        "request",
        false,
    );
    push("other", "all", format!("Secrets Manager at the charge function's cold starts (1 GetSecretValue, **assumed** {:.0} % of its invocations)", COLD_START_SHARE * 100.0), COLD_START_SHARE / n, SECRETS_PER_CALL, "call", false);
    out
}

/// `PutItem 1, GetItem 1`, or `none`.
fn ops(t: &crate::wire::counter::WireTally) -> String {
    if t.requests.is_empty() {
        return "none".into();
    }
    t.requests
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn types(ev: &crate::bill::EventsIn) -> String {
    let t: Vec<String> = ev
        .deliveries
        .iter()
        .map(|(t, a)| format!("{t} → {a}"))
        .collect();
    t.join(", ")
}

/// Totals of a bill per 1M charges: the charge path's Lambda + DynamoDB + SQS (the previous
/// figure), Lambda + DynamoDB + SQS of every function, and all-in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Totals {
    pub charge_path: f64,
    pub core: f64,
    pub relay: f64,
    pub events_in: f64,
    pub logs: f64,
    pub all_in: f64,
}

pub fn totals(items: &[Item]) -> Totals {
    let sum = |f: &dyn Fn(&Item) -> bool| -> f64 {
        items
            .iter()
            .filter(|i| f(i))
            .map(Item::cost_per_million)
            .sum()
    };
    Totals {
        charge_path: sum(&|i| i.group == "charge path" && i.core),
        core: sum(&|i| i.core),
        relay: sum(&|i| i.group == "relay"),
        events_in: sum(&|i| i.group == "events in"),
        logs: sum(&|i| i.group == "logs"),
        all_in: sum(&|_| true),
    }
}

fn money(x: f64) -> String {
    // `+ 0.0`: no "-0.00" for a sum of nothing.
    format!("${:.2}", x + 0.0)
}

fn run_of(record: &BillRecord, s: Source) -> Result<&BillRun, Error> {
    record
        .runs
        .iter()
        .find(|r| r.source == s)
        .ok_or_else(|| format!("bill.json has no {s:?} run").into())
}

/// The inputs from the run's JSON: CPU per invocation, init per function.
pub fn inputs(
    dir: &Path,
    record: &BillRecord,
    template: &str,
    footprints: &[Value],
) -> Result<Inputs, Error> {
    let facts = template_facts(template)?;
    let cpu_logs: Option<CpuRecord> = read_opt(dir, "cpu-logs.json")?;
    let cpu_lower_bound = cpu_logs.map_or(0.0, |c| c.cpu_us_per_charge);
    // A release build's measurement of the whole path (our code + SDK + HTTP, no TLS, the
    // embedded simulator's answers included): an upper bound. A debug build's would not be.
    // The mean over the configurations that ran the function (one sample each).
    let mean = |f: &dyn Fn(&BillRun) -> Option<u64>| {
        let v: Vec<f64> = record
            .runs
            .iter()
            .filter_map(f)
            .map(|ns| ns as f64 / 1e3)
            .collect();
        v.iter().sum::<f64>() / (v.len().max(1) as f64)
    };
    let (cpu_us, cpu_source) = if record.build == "release" {
        (
            vec![
                ("checkout", mean(&|r| Some(r.checkout.cpu_ns))),
                ("charge", mean(&|r| Some(r.charge.cpu_ns))),
                ("notify", mean(&|r| Some(r.relay.phase.cpu_ns))),
                ("webhook", mean(&|r| r.events_in.as_ref().map(|e| e.phase.cpu_ns))),
            ],
            "measured by `bench bill` (release build, x86-64 host, the mean of the configurations, one invocation each): the thread's CPU around each handler call on moto, our code + AWS SDK + HTTP without TLS (+ the embedded stripe-sim's answers in the charge and events phases), an upper bound".to_owned(),
        )
    } else {
        let c = cpu_logs.map_or(0.0, |c| c.cpu_us_per_charge);
        (
            FUNCTIONS.iter().map(|f| (*f, c)).collect(),
            format!("section 3's measured {c:.1} µs per charge for every function (our code only, no SDK or network: `bench bill` ran as a {} build, whose CPU times are not used)", record.build),
        )
    };
    let shipped = std::env::var("BENCH_SHIPPED_PROFILE").unwrap_or_else(|_| "release".into());
    let release = footprints
        .iter()
        .find(|fp| fp["profile"] == shipped.as_str())
        .or(footprints.first());
    let init_ms = FUNCTIONS
        .iter()
        .map(|name| {
            let m = release.and_then(|fp| {
                fp["functions"]
                    .as_array()?
                    .iter()
                    .find(|x| x["function"] == *name)
                    .and_then(|x| x["init"]["median_ms"].as_f64())
            });
            (*name, m)
        })
        .collect();
    Ok(Inputs {
        template: facts,
        fixed: Fixed::from_template(template),
        cpu_us,
        cpu_source,
        cpu_lower_bound,
        init_ms,
    })
}

/// Section 5, from `DIR/bill.json` (and `bill-lambda-subscriber.json`, the logs before, when
/// there), section 3's CPU and section 4's init.
pub fn section(w: &mut String, dir: &Path, footprints: &[Value]) -> Result<(), Error> {
    let template =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml"))?;
    let Some(record) = read_opt::<BillRecord>(dir, "bill.json")? else {
        writeln!(w, "{HEADING}")?;
        writeln!(w)?;
        writeln!(
            w,
            "Not measured in this run (`bench bill` wrote no bill.json)."
        )?;
        writeln!(w)?;
        return Ok(());
    };
    let before_logs: Option<BillRecord> = read_opt(dir, "bill-lambda-subscriber.json")?;
    let inputs = inputs(dir, &record, &template, footprints)?;
    let facts = &inputs.template;
    let now_memory = |f: &str| facts.memory(f);
    let [low, full] = batchings(facts);
    let bill = |s: Source,
                b: &Batching,
                logs: &BillRecord,
                memory: &dyn Fn(&str) -> f64|
     -> Result<Vec<Item>, Error> {
        Ok(items(
            run_of(&record, s)?,
            run_of(logs, s)?,
            &inputs,
            b,
            memory,
        ))
    };

    writeln!(w, "{HEADING}")?;
    writeln!(w)?;
    writeln!(w, "Every request the deployed stack makes for one happy-path charge, counted on the wire by `bench bill`")?;
    writeln!(w, "(`infra/bench/src/bill.rs`): the real checkout, charge, events (webhook) and notify handlers against moto")?;
    writeln!(w, "(DynamoDB and its stream, SQS FIFO, EventBridge) and an embedded stripe-sim whose events are on and subscribed")?;
    writeln!(w, "to the five types docs/deploy.md enables; each configuration on a fresh stack, a warm-up order first. DynamoDB")?;
    writeln!(w, "and SQS by an interceptor on the SDK clients (the inbox table on its own), Stripe by the simulator's counters,")?;
    writeln!(w, "`PutEvents` by an interceptor that reads each call's entries (moto's EventBridge answers `PutEvents`, so the")?;
    writeln!(w, "calls are real; the count is the client's), the stream from moto through the template's `FilterCriteria`.")?;
    writeln!(w, "Until issue 27 this section priced the charge path, API Gateway and logs only ($4.12 Lambda + DynamoDB + SQS and")?;
    writeln!(w, "$6.52 all-in per 1M at full batches, then): not the events in, the relay, the EMF lines, nor CPU beyond our code.")?;
    writeln!(w)?;
    let none = run_of(&record, Source::None)?;
    table_counts(w, &record)?;
    writeln!(w)?;
    writeln!(w, "Each event source adds one delivery per charge (`payment_intent.succeeded`; the other four types do not occur on")?;
    writeln!(w, "the happy path and `payment_intent.created` is not subscribed), which finds the operation already settled by the")?;
    writeln!(w, "charge function: an inbox PutItem and one GetItem, no Stripe call. Not measured: an event that overtakes the")?;
    writeln!(w, "charge function's record (it then retrieves at Stripe, finds the lease held, forgets its inbox entry and is")?;
    writeln!(w, "delivered again), which costs one more delivery, one retrieve and an inbox DeleteItem when it happens.")?;
    writeln!(w, "The relay: the charge's {} stream records (create, claim, record), {} passing the filter, one outcome published.", none.relay.stream_records, none.relay.filtered_in)?;
    writeln!(w)?;
    writeln!(w, "Prices, us-east-1: `REFERENCE.md` for Lambda ($0.0000133334 per GB-s arm64, $0.20 per 1M requests), DynamoDB")?;
    writeln!(w, "on demand ($0.625 per 1M write units, $0.125 per 1M read units), SQS FIFO ($0.50 per 1M requests) and Stripe's")?;
    writeln!(w, "EventBridge partner events ($1.00 per 1M on the bus). The public price pages for the rest: EventBridge custom")?;
    writeln!(w, "events (`PutEvents`) $1.00 per 1M, each started 64 KB of an entry one event, delivery to a target in the same")?;
    writeln!(w, "account not charged; DynamoDB: \"You are not charged for GetRecords API calls invoked by AWS Lambda as part of")?;
    writeln!(w, "DynamoDB triggers\"; HTTP API $1.00 per 1M requests; CloudWatch Logs ingestion $0.50 per GB (2^30 B); Secrets")?;
    writeln!(w, "Manager $0.05 per 10,000 calls. Lambda billed per 1 ms at the template's `MemorySize`, CPU in proportion to it")?;
    writeln!(w, "(Lambda's docs: 1,769 MB = one vCPU). **Assumed**: {AWS_CALL_MS} ms per DynamoDB, SQS or EventBridge call, {STRIPE_CALL_MS} ms per")?;
    writeln!(w, "Stripe create, this host's core = one Graviton vCPU, cold starts {:.0} % of invocations. CPU per invocation: {}.", COLD_START_SHARE * 100.0, inputs.cpu_source)?;
    writeln!(w, "Logs: our lines **measured** (JSON, `bench bill` under the functions' subscriber), EMF lines **measured**")?;
    writeln!(w, "(CloudWatch Logs bytes too, one per invocation), Lambda's platform records and the access-log lines from their")?;
    writeln!(w, "documented shape (`infra/bench/src/logs.rs`).")?;
    writeln!(w)?;
    writeln!(w, "**Batches.** One message per batch: low traffic. Full batches: the charge function's `BatchSize` ({:.0}; a FIFO", facts.charge_batch)?;
    writeln!(w, "event source has no batching window, so only while messages queue up), and the relay's batch at the stack's")?;
    writeln!(w, "ceiling of {:.0} charges/s (the default Stripe budget of {}/s less the reconciler's and the events function's share) within its {:.0} s", ceiling_rate(), charge_once::config::StripeBudget::DEFAULT_PER_SECOND, facts.relay_window_secs)?;
    writeln!(w, "batching window: {:.0} outcomes per invocation (of at most {:.0}; **assumed** on one stream shard, more shards", full.relay, facts.relay_batch)?;
    writeln!(w, "make smaller batches).")?;
    writeln!(w)?;

    // The summary.
    writeln!(w, "| event source | batches | Lambda + DynamoDB + SQS, charge path | relay (notify + PutEvents) | events in | logs | Lambda + DynamoDB + SQS, every function | all-in |")?;
    writeln!(w, "|---|---|---|---|---|---|---|---|")?;
    for s in Source::ALL {
        for b in [&low, &full] {
            let t = totals(&bill(s, b, &record, &now_memory)?);
            writeln!(
                w,
                "| {} | {} ({:.0} / {:.0}) | {} | {} | {} | {} | {} | **{}** |",
                s.label(),
                b.label,
                b.charge,
                b.relay,
                money(t.charge_path),
                money(t.relay),
                money(t.events_in),
                money(t.logs),
                money(t.core),
                money(t.all_in)
            )?;
        }
    }
    writeln!(w)?;
    writeln!(w, "(n / k: messages per charge invocation / outcomes per relay invocation.) In detail, per charge, at one")?;
    writeln!(w, "message per batch and at full batches; \"applies to\" says which configurations pay a line:")?;
    writeln!(w)?;
    writeln!(w, "| item | applies to | quantity, one per batch | quantity, full | unit price | per 1M, one per batch | per 1M, full |")?;
    writeln!(w, "|---|---|---|---|---|---|---|")?;
    let mut detail: Vec<(Item, Item)> = Vec::new();
    for s in Source::ALL {
        let lo = bill(s, &low, &record, &now_memory)?;
        let hi = bill(s, &full, &record, &now_memory)?;
        for (a, b) in lo.into_iter().zip(hi) {
            if (s == Source::None) == (a.applies == "all") {
                detail.push((a, b));
            }
        }
    }
    let order = ["charge path", "relay", "events in", "logs", "other"];
    detail.sort_by_key(|(a, _)| order.iter().position(|g| *g == a.group).unwrap_or(9));
    for (a, b) in &detail {
        let qty = |q: f64| {
            if q != 0.0 && q.abs() < 0.001 {
                format!("{q:.3e}")
            } else {
                format!("{q:.4}")
            }
        };
        writeln!(
            w,
            "| {} | {} | {} {} | {} {} | ${:.10}/{} | ${:.3} | ${:.3} |",
            if a.item == b.item {
                a.item.clone()
            } else {
                format!("{} / full: {}", a.item, b.item)
            },
            a.applies,
            qty(a.qty),
            a.unit,
            qty(b.qty),
            b.unit,
            a.price,
            a.unit,
            a.cost_per_million(),
            b.cost_per_million()
        )?;
    }
    writeln!(w)?;

    // Reductions.
    reductions(w, &record, before_logs.as_ref(), &inputs, &bill)?;
    Ok(())
}

fn table_counts(w: &mut String, record: &BillRecord) -> Result<(), Error> {
    writeln!(
        w,
        "| event source | checkout | charge | events in (per charge) | relay (per charge) |"
    )?;
    writeln!(w, "|---|---|---|---|---|")?;
    for s in Source::ALL {
        let r = run_of(record, s)?;
        let phase = |p: &Phase| {
            let mut parts = Vec::new();
            for (name, t) in [
                ("DynamoDB", &p.counts.dynamodb),
                ("inbox", &p.inbox),
                ("SQS", &p.counts.sqs),
                ("event source SQS", &p.counts.source),
            ] {
                if t.total() > 0 {
                    parts.push(format!("{name} {}", ops(t)));
                }
            }
            let st = &p.counts.stripe;
            if st.total() > 0 {
                parts.push(format!(
                    "Stripe create {} retrieve {} search {}",
                    st.create, st.retrieve, st.search
                ));
            }
            if p.put_events.calls > 0 {
                parts.push(format!(
                    "PutEvents {} call, {} entry",
                    p.put_events.calls, p.put_events.entries
                ));
            }
            parts.push(format!("{} invocation", p.invocations));
            parts.join("; ")
        };
        writeln!(
            w,
            "| {} | {} | {} | {} | {} stream records, {} through the filter; {} |",
            s.label(),
            phase(&r.checkout),
            phase(&r.charge),
            r.events_in.as_ref().map_or("—".into(), |e| format!(
                "{} delivery ({}); {}",
                e.deliveries.len(),
                types(e),
                phase(&e.phase)
            )),
            r.relay.stream_records,
            r.relay.filtered_in,
            phase(&r.relay.phase)
        )?;
    }
    Ok(())
}

type BillFn<'a> =
    dyn Fn(Source, &Batching, &BillRecord, &dyn Fn(&str) -> f64) -> Result<Vec<Item>, Error> + 'a;

fn reductions(
    w: &mut String,
    record: &BillRecord,
    before_logs: Option<&BillRecord>,
    inputs: &Inputs,
    bill: &BillFn<'_>,
) -> Result<(), Error> {
    let facts = &inputs.template;
    let [low, full] = batchings(facts);
    let now_memory = |f: &str| facts.memory(f);
    let old_memory = |_: &str| MEMORY_BEFORE_MB;
    writeln!(w, "### Reductions, before and after (issue 27)")?;
    writeln!(w)?;
    // (a) logs
    writeln!(w, "**Log volume at INFO.** Our lines per charge, by function: before (main at 0ff5510, lambda_runtime's")?;
    writeln!(w, "default subscriber, measured then by this bench), this code under that subscriber (measured now), and after: the")?;
    writeln!(w, "functions' own subscriber, `charge_once::logging`, which writes each line's spans once, as `spans`, not again as")?;
    writeln!(w, "`span` (no field dropped), and checkout's one line per new operation (`operation recorded and queued`, status")?;
    writeln!(w, "202; `checkout answered` said nothing more). No audit, error or warning line is dropped; EMF lines unchanged:")?;
    writeln!(w)?;
    writeln!(w, "| function | lines before → after | before (main) | lambda_runtime's subscriber | after | saved |")?;
    writeln!(w, "|---|---|---|---|---|---|")?;
    let phases = |r: &BillRecord| -> Result<Vec<Phase>, Error> {
        let n = run_of(r, Source::None)?;
        let h = run_of(r, Source::Webhook)?;
        let e = run_of(r, Source::EventBridge)?;
        let events = |x: &BillRun| {
            x.events_in
                .as_ref()
                .map(|x| x.phase.clone())
                .unwrap_or_default()
        };
        Ok(vec![
            n.checkout.clone(),
            n.charge.clone(),
            n.relay.phase.clone(),
            events(e),
            events(h),
        ])
    };
    let after = phases(record)?;
    let middle = before_logs.map(phases).transpose()?;
    let mut saved_per_charge = [0.0f64; 5];
    for (i, ((name, lines, before), p)) in LOGS_BEFORE.iter().zip(&after).enumerate() {
        saved_per_charge[i] = *before as f64 - p.log_bytes() as f64;
        writeln!(
            w,
            "| {name} | {lines} → {} | {before} | {} | {} | {} B ({:.0} %) |",
            p.lines.len(),
            middle
                .as_ref()
                .map_or("not measured".into(), |m| m[i].log_bytes().to_string()),
            p.log_bytes(),
            *before as i64 - p.log_bytes() as i64,
            (1.0 - p.log_bytes() as f64 / (*before).max(1) as f64) * 100.0
        )?;
    }
    writeln!(w)?;
    let per_million = |bytes: f64| bytes / 1073741824.0 * LOGS_PER_GB * 1e6;
    for (s, extra) in [
        (Source::None, 0.0),
        (Source::EventBridge, saved_per_charge[3]),
        (Source::Webhook, saved_per_charge[4]),
    ] {
        let lo = totals(&bill(s, &low, record, &now_memory)?).logs;
        let hi = totals(&bill(s, &full, record, &now_memory)?).logs;
        let saved = per_million(saved_per_charge[0] + saved_per_charge[1] + extra);
        writeln!(
            w,
            "Logs per 1M charges, {}: one message per batch {} → {}, full batches {} → {}.",
            s.label(),
            money(lo + saved),
            money(lo),
            money(hi + saved),
            money(hi)
        )?;
    }
    writeln!(w)?;
    // (b) memory
    writeln!(w, "**Memory.** Our functions wait on DynamoDB, SQS, EventBridge and Stripe; CPU is the smaller part of their time.")?;
    writeln!(w, "A GB-s of waiting costs the same whatever it waits at, so halving the memory halves the waits' cost; the CPU")?;
    writeln!(w, "part costs the same GB-s at any size (half the share, twice the time) and adds that time as latency. Per function:")?;
    writeln!(w, "the CPU per invocation above (on one full core), its billed duration at each size (the waits **assumed** as above,")?;
    writeln!(w, "the CPU at the memory's share of a vCPU), and the GB-s cost per 1M charges at full batches:")?;
    writeln!(w)?;
    writeln!(w, "| function | CPU µs per invocation (full core) | waits ms (**assumed**) | 128 MB | 256 MB | 512 MB | template now |")?;
    writeln!(w, "|---|---|---|---|---|---|---|")?;
    let none = run_of(record, Source::None)?;
    let hook = run_of(record, Source::EventBridge)?;
    let rows: [(&str, f64, f64, f64); 4] = [
        (
            "checkout",
            inputs.cpu("checkout"),
            (none.checkout.counts.dynamodb.total() + none.checkout.counts.sqs.total()) as f64
                * AWS_CALL_MS,
            1.0,
        ),
        (
            "charge",
            inputs.cpu("charge") * full.charge,
            none.charge.counts.dynamodb.total() as f64 * AWS_CALL_MS + STRIPE_CALL_MS,
            full.charge,
        ),
        (
            "notify",
            inputs.cpu("notify") * (full.relay / charge_once::ports::MAX_BATCH as f64).ceil(),
            (full.relay / charge_once::ports::MAX_BATCH as f64).ceil() * AWS_CALL_MS,
            full.relay,
        ),
        (
            "webhook",
            inputs.cpu("webhook"),
            hook.events_in.as_ref().map_or(0.0, |e| {
                (e.phase.counts.dynamodb.total() + e.phase.inbox.total()) as f64 * AWS_CALL_MS
            }),
            1.0,
        ),
    ];
    let mut slower = Vec::new();
    for (f, cpu, io, per) in rows {
        slower.push(format!(
            "{f}{} {:.0} → {:.0} ms",
            if per > 1.0 {
                format!(" (batch of {per:.0})")
            } else {
                String::new()
            },
            billed_ms(io, cpu, 256.0),
            billed_ms(io, cpu, 128.0)
        ));
        let cell = |mb: f64| {
            let ms = billed_ms(io, cpu, mb);
            format!(
                "{ms:.0} ms, ${:.3}",
                gb_s(ms, mb) / per * LAMBDA_ARM_GB_S * 1e6
            )
        };
        writeln!(
            w,
            "| {f}{} | {cpu:.0} | {io:.0} | {} | {} | {} | {:.0} MB |",
            if per > 1.0 {
                format!(" (batch of {per:.0})")
            } else {
                String::new()
            },
            cell(128.0),
            cell(256.0),
            cell(512.0),
            facts.memory(f)
        )?;
    }
    writeln!(w)?;
    writeln!(w, "So the functions that run once per charge go to 128 MB (template.yaml's Globals; the reconciler, billed per")?;
    writeln!(w, "tick, keeps 256 MB). What it costs is time: from 256 to 128 MB {}, and a cold start's init", slower.join(", "))?;
    writeln!(w, "about twice as long where it is CPU (section 4's init is on a full core). None of it is near a timeout, and the")?;
    writeln!(
        w,
        "charge function's rate is Stripe's budget (section 7), not its CPU."
    )?;
    writeln!(w)?;
    let core = |m: &dyn Fn(&str) -> f64, b: &Batching, s: Source| -> Result<Totals, Error> {
        Ok(totals(&bill(s, b, record, m)?))
    };
    writeln!(
        w,
        "Lambda + DynamoDB + SQS of the charge path, before (256 MB everywhere) → now: one message per batch {} → {},",
        money(core(&old_memory, &low, Source::None)?.charge_path),
        money(core(&now_memory, &low, Source::None)?.charge_path)
    )?;
    writeln!(
        w,
        "full batches {} → {}; every function with EventBridge events, full batches {} → {}.",
        money(core(&old_memory, &full, Source::None)?.charge_path),
        money(core(&now_memory, &full, Source::None)?.charge_path),
        money(core(&old_memory, &full, Source::EventBridge)?.core),
        money(core(&now_memory, &full, Source::EventBridge)?.core)
    )?;
    writeln!(w)?;
    // (c) relay batching
    writeln!(w, "**Relay batching.** `PutEvents` takes at most {} entries per call and the relay already sends that many, and", charge_once::ports::MAX_BATCH)?;
    writeln!(w, "EventBridge bills per entry (per 64 KB of it), not per call: fuller calls save nothing on the bus. What batching")?;
    writeln!(w, "changes is the notify function's invocations, at the price of the outcome events' delay (up to the window):")?;
    writeln!(w)?;
    writeln!(w, "| MaximumBatchingWindowInSeconds | outcomes per invocation at {:.0}/s | relay per 1M charges (Lambda + PutEvents) | outcome delay added, at most |", ceiling_rate())?;
    writeln!(w, "|---|---|---|---|")?;
    for window in [facts.relay_window_secs, 5.0, 10.0] {
        let k = relay_batch(facts, window);
        let b = Batching {
            label: "",
            charge: full.charge,
            relay: k,
        };
        let t = core(&now_memory, &b, Source::None)?;
        writeln!(
            w,
            "| {window:.0} s{} | {k:.0} | {} (${:.3}) | {window:.0} s |",
            if window == facts.relay_window_secs {
                " (template)"
            } else {
                ""
            },
            money(t.relay),
            t.relay
        )?;
    }
    writeln!(w)?;
    writeln!(w, "A longer window saves under a cent per 1M charges and delays every `ChargeSucceeded` the order service ships on:")?;
    writeln!(w, "not worth it, so the window stays. At low traffic each outcome is an invocation of its own whatever the window.")?;
    writeln!(w)?;
    // Verdict.
    let t_full = core(&now_memory, &full, Source::None)?;
    let t_low = core(&now_memory, &low, Source::None)?;
    let verdict = |c: f64| {
        if c <= 4.0 {
            format!("**met** ({})", money(c))
        } else {
            format!(
                "**missed** ({}, ${:.2} over, {:.1} %)",
                money(c),
                c - 4.0,
                (c / 4.0 - 1.0) * 100.0
            )
        }
    };
    writeln!(w, "**Target ≤ $4.00 per 1M for Lambda + DynamoDB + SQS at full batches**: the charge path {}; every function", verdict(t_full.charge_path))?;
    writeln!(
        w,
        "(+ the relay's Lambda) {}; at one message per batch the charge path is {}.",
        verdict(t_full.core),
        money(t_low.charge_path)
    )?;
    let items_full = bill(Source::None, &full, record, &now_memory)?;
    let sum = |pred: &dyn Fn(&Item) -> bool| {
        items_full
            .iter()
            .filter(|i| pred(i))
            .map(Item::cost_per_million)
            .sum::<f64>()
    };
    let ddb = sum(&|i| i.group == "charge path" && i.item.starts_with("DynamoDB"));
    let sqs = sum(&|i| i.group == "charge path" && i.item.starts_with("SQS"));
    let req =
        sum(&|i| i.group == "charge path" && i.unit == "request" && i.item.starts_with("Lambda"));
    let gbs = sum(&|i| i.group == "charge path" && i.unit == "GB-s");
    writeln!(w, "The floor: DynamoDB {} (the conditional put, the claim and the fenced record, 3 writes, and the unknown", money(ddb))?;
    writeln!(w, "index's entry, put and removed, 2), SQS {} (the send, and the event source's receive and delete ÷ n), Lambda", money(sqs))?;
    writeln!(w, "requests {} (checkout's one, charge's 1/n): {} before any duration; the GB-s add {} (the **assumed** waits,", money(req), money(ddb + sqs + req), money(gbs))?;
    writeln!(w, "mostly the Stripe call a charge invocation lasts, and the CPU above, an upper bound). With section 3's CPU")?;
    let lower = Inputs {
        cpu_us: FUNCTIONS
            .iter()
            .map(|f| (*f, inputs.cpu_lower_bound))
            .collect(),
        ..inputs.clone()
    };
    let lower_items = items(
        run_of(record, Source::None)?,
        run_of(record, Source::None)?,
        &lower,
        &full,
        &now_memory,
    );
    writeln!(w, "instead ({:.1} µs per charge, our code alone: a lower bound) the charge path is {}. Meeting $4.00 would take", inputs.cpu_lower_bound, money(totals(&lower_items).charge_path))?;
    writeln!(w, "the Stripe call or the DynamoDB writes away, which are the product; nothing is assumed lower to get there.")?;
    let all_low: Vec<String> = Source::ALL
        .iter()
        .map(|s| {
            Ok::<_, Error>(format!(
                "{} {}",
                s.label(),
                money(core(&now_memory, &low, *s)?.all_in)
            ))
        })
        .collect::<Result<_, _>>()?;
    let all_full: Vec<String> = Source::ALL
        .iter()
        .map(|s| {
            Ok::<_, Error>(format!(
                "{} {}",
                s.label(),
                money(core(&now_memory, &full, *s)?.all_in)
            ))
        })
        .collect::<Result<_, _>>()?;
    writeln!(
        w,
        "All-in, with events in and out: one message per batch: {}; full batches: {}.",
        all_low.join(", "),
        all_full.join(", ")
    )?;
    writeln!(w)?;
    Ok(())
}

/// Section 5 alone (`BENCH_ONLY=cost`), from the JSON in `dir`.
pub fn render_alone(dir: &Path) -> Result<String, Error> {
    let mut footprints = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with("footprint-") && name.ends_with(".json") {
            footprints.extend(read_opt::<Value>(dir, &name)?);
        }
    }
    let mut w = String::new();
    section(&mut w, dir, &footprints)?;
    Ok(w)
}

/// `doc` with its section 5 replaced by `section` ([`crate::report::replace_section`]).
pub fn splice(doc: &str, section: &str) -> Result<String, Error> {
    crate::report::replace_section(doc, 5, section)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_facts_are_read() {
        let t = template_facts(include_str!("../../../template.yaml")).unwrap();
        assert_eq!(t.charge_batch, 10.0);
        assert_eq!(t.relay_batch, 100.0);
        assert_eq!(t.relay_window_secs, 1.0);
        for f in FUNCTIONS {
            assert!(t.memory(f) >= 128.0, "{f}: {t:?}");
        }
        let own = "Globals:\n  Function:\n    MemorySize: 256\nResources:\n  NotifyFunction:\n    Type: x\n    Properties:\n      MemorySize: 128\n  Other:\n    Type: y\n";
        assert_eq!(
            resource_number(own, "NotifyFunction", "MemorySize"),
            Some(128.0)
        );
        assert_eq!(resource_number(own, "Other", "MemorySize"), None);
    }

    #[test]
    fn the_ceiling_and_the_relay_batch() {
        assert_eq!(ceiling_rate(), 22.0);
        let t = template_facts(include_str!("../../../template.yaml")).unwrap();
        assert_eq!(relay_batch(&t, 1.0), 22.0);
        assert_eq!(relay_batch(&t, 10.0), 100.0);
    }

    #[test]
    fn duration_counts_cpu_at_the_memory_share() {
        // 1 ms of CPU on a full core is 1769/128 ms at 128 MB.
        assert_eq!(billed_ms(10.0, 1000.0, MB_PER_VCPU), 11.0);
        assert_eq!(
            billed_ms(10.0, 1000.0, 128.0),
            (10.0f64 + 1769.0 / 128.0).ceil()
        );
    }

    #[test]
    fn splice_replaces_section_5_only() {
        let doc = "# B\n\n## 4. x\n\nfour\n\n## 5. old\n\nold five\n\n## 6. y\n\nsix\n";
        let out = splice(doc, "## 5. new\n\nnew five\n\n").unwrap();
        assert_eq!(
            out,
            "# B\n\n## 4. x\n\nfour\n\n## 5. new\n\nnew five\n\n## 6. y\n\nsix\n"
        );
        assert!(splice("# B\n", "x").is_err());
    }
}
