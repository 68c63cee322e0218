//! The whole bill of one charge, per 1M charges (section 5 of BENCHMARKS.md renders it): every
//! request the deployed stack makes for one happy-path charge, counted on the wire by `bench bill`
//! ([`crate::bill`]), priced at one message per batch and at full batches, with each way Stripe's
//! events come in (none, EventBridge, webhook) and the outcome relay.
//!
//! Every figure is a count from `bill.json` times a published price, except what is marked
//! **assumed** in the tables: durations of AWS and Stripe calls, the cold-start share, this
//! host's core against a Graviton vCPU, and the relay's batch at the stack's ceiling.

use std::path::Path;

use serde_json::Value;

use crate::bill::{BillRecord, BillRun, EventsIn, Phase, Source};
use crate::records::{read_opt, CpuRecord};

type Error = Box<dyn std::error::Error + Send + Sync>;

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
/// The `MemorySize` section 5 compares the template's with (and of a function it does not name).
pub const MEMORY_COMPARED_MB: f64 = 256.0;

/// Assumed latencies (not measured here): a warm DynamoDB, SQS or EventBridge call from Lambda in
/// the same region, and a Stripe PaymentIntent create with confirm.
pub const AWS_CALL_MS: f64 = 10.0;
pub const STRIPE_CALL_MS: f64 = 300.0;
/// A Stripe retrieve (none on the happy path; priced if counted).
pub const STRIPE_RETRIEVE_MS: f64 = 150.0;

/// Log lines a function writes once per invocation, not once per charge: split by message.
const PER_BATCH_MESSAGES: &[&str] = &["INFO stream batch relayed"];

/// The functions, as the template names them (`<Name>Function`).
pub const FUNCTIONS: [&str; 4] = ["checkout", "charge", "webhook", "notify"];

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
            .map_or(MEMORY_COMPARED_MB, |(_, m)| *m)
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
/// twelfth kept for the reconciler, the events function and the audit
/// ([`charge_once::config::StripeBudget`]).
pub fn ceiling_rate() -> f64 {
    use charge_once::config::StripeBudget;
    let b = StripeBudget::new(
        StripeBudget::DEFAULT_PER_SECOND,
        StripeBudget::DEFAULT_CONCURRENCY,
    );
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
    pub fn cpu(&self, f: &str) -> f64 {
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
    /// Lambda, DynamoDB or SQS (the target section 5 holds the charge path to).
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

pub fn gb_s(ms: f64, memory_mb: f64) -> f64 {
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

/// What every line of one bill is computed from.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    run: &'a BillRun,
    inputs: &'a Inputs,
    /// Messages per charge invocation.
    n: f64,
    /// Outcomes per relay invocation.
    k: f64,
    memory: &'a dyn Fn(&str) -> f64,
}

fn item(
    group: &'static str,
    applies: &'static str,
    item: String,
    qty: f64,
    price: f64,
    unit: &'static str,
    core: bool,
) -> Item {
    Item {
        group,
        applies,
        item,
        qty,
        price,
        unit,
        core,
    }
}

/// The bill of one configuration at one batching, `memory` giving each function's MB.
pub fn items(
    run: &BillRun,
    inputs: &Inputs,
    b: &Batching,
    memory: &dyn Fn(&str) -> f64,
) -> Vec<Item> {
    let ctx = Ctx {
        run,
        inputs,
        n: b.charge,
        k: b.relay,
        memory,
    };
    let mut out = Vec::new();
    checkout_and_charge(&ctx, &mut out);
    charge_path_store(&ctx, &mut out);
    relay(&ctx, &mut out);
    if let Some(ev) = &run.events_in {
        events_in(&ctx, ev, &mut out);
        events_in_store(&ctx, ev, &mut out);
    }
    logs_and_rest(&ctx, &mut out);
    out
}

/// The charge path's Lambda lines: checkout, charge and their cold starts.
fn checkout_and_charge(ctx: &Ctx, out: &mut Vec<Item>) {
    let Ctx {
        run,
        inputs,
        n,
        memory,
        ..
    } = *ctx;
    // Checkout.
    let c = &run.checkout;
    let c_calls = c.counts.dynamodb.total() as f64 + c.counts.sqs.total() as f64;
    let c_mb = memory("checkout");
    let c_ms = billed_ms(c_calls * AWS_CALL_MS, inputs.cpu("checkout"), c_mb);
    out.push(item("charge path", "all", format!("Lambda checkout {c_mb:.0} MB, 1 invocation × {c_ms:.0} ms (**assumed** {c_calls:.0} AWS calls × {AWS_CALL_MS} ms + CPU)"), gb_s(c_ms, c_mb), LAMBDA_ARM_GB_S, "GB-s", true));
    out.push(item(
        "charge path",
        "all",
        "Lambda checkout requests".into(),
        1.0,
        LAMBDA_PER_REQUEST,
        "request",
        true,
    ));
    // Charge: n groups concurrently, as long as one (claim, Stripe, record) plus n CPUs.
    let ch = &run.charge;
    let ch_mb = memory("charge");
    let ch_io = ch.counts.dynamodb.total() as f64 * AWS_CALL_MS
        + ch.counts.stripe.create as f64 * STRIPE_CALL_MS;
    let ch_ms = billed_ms(ch_io, n * inputs.cpu("charge"), ch_mb);
    out.push(item("charge path", "all", format!("Lambda charge {ch_mb:.0} MB, 1/{n:.0} of an invocation × {ch_ms:.0} ms (**assumed** Stripe {STRIPE_CALL_MS} ms + {} writes × {AWS_CALL_MS} ms + {n:.0} × CPU, groups concurrently)", ch.counts.dynamodb.total()), gb_s(ch_ms, ch_mb) / n, LAMBDA_ARM_GB_S, "GB-s", true));
    out.push(item(
        "charge path",
        "all",
        format!("Lambda charge requests ({n:.0} messages per invocation)"),
        1.0 / n,
        LAMBDA_PER_REQUEST,
        "request",
        true,
    ));
    let (ci, ci_measured) = inputs.init("checkout");
    let (chi, chi_measured) = inputs.init("charge");
    out.push(item(
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
    ));
}

/// The charge path's DynamoDB and SQS lines.
fn charge_path_store(ctx: &Ctx, out: &mut Vec<Item>) {
    let Ctx { run, n, .. } = *ctx;
    let (c, ch) = (&run.checkout, &run.charge);
    let puts = c.counts.dynamodb.get("PutItem") as f64;
    let table_writes = writes(c) + writes(ch);
    out.push(item(
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
    ));
    // Index writes are not on the wire: the create's put enters the unknown index, the settling
    // record's REMOVE leaves it; the claim changes nothing the index projects.
    out.push(item("charge path", "all", "DynamoDB unknown-index writes (derived: the create puts the entry, the settling record removes it)".into(), puts + 1.0, DDB_PER_WRU, "WRU", true));
    // The drift audit's record side: each settling write stamps its day (`settled_on`), one
    // entry of the keys-only settled-by-day index; the daily audit reads the entry and the record
    // once (BatchGetItem, strongly consistent, one item < 4 KB). Its own group, outside the
    // charge path's target: what the audit adds is read off on its own lines.
    out.push(item(
        "drift audit",
        "all",
        "DynamoDB settled-by-day index write (derived: the settling record stamps its day)".into(),
        1.0,
        DDB_PER_WRU,
        "WRU",
        false,
    ));
    out.push(item(
        "drift audit",
        "all",
        "DynamoDB audit reads (derived: the daily audit reads each settled record once)".into(),
        1.0,
        DDB_PER_RRU,
        "RRU",
        false,
    ));
    out.push(item(
        "charge path",
        "all",
        format!("DynamoDB table reads (counted: {})", reads(c) + reads(ch)),
        reads(c) + reads(ch),
        DDB_PER_RRU,
        "RRU",
        true,
    ));
    let sends = c.counts.sqs.total() as f64 + ch.counts.sqs.total() as f64;
    let source = ch.counts.source.total() as f64;
    out.push(item("charge path", "all", format!("SQS FIFO: SendMessage {sends:.0} + the event source's Receive/Delete {source:.0} per batch ÷ {n:.0} (counted)"), sends + source / n, SQS_FIFO_PER_REQUEST, "request", true));
}

/// The relay: the notify function and its `PutEvents`.
fn relay(ctx: &Ctx, out: &mut Vec<Item>) {
    let Ctx {
        run,
        inputs,
        k,
        memory,
        ..
    } = *ctx;
    let r = &run.relay.phase;
    let r_mb = memory("notify");
    let calls_per_invocation = (k / charge_once::ports::MAX_BATCH as f64).ceil();
    // Measured with one record and one PutEvents call: counted once per call of up to ten.
    let r_ms = billed_ms(
        calls_per_invocation * AWS_CALL_MS,
        calls_per_invocation * inputs.cpu("notify"),
        r_mb,
    );
    out.push(item("relay", "all", format!("Lambda notify {r_mb:.0} MB, 1/{k:.0} of an invocation × {r_ms:.0} ms (**assumed** {calls_per_invocation:.0} PutEvents × {AWS_CALL_MS} ms + the measured CPU per call)"), gb_s(r_ms, r_mb) / k, LAMBDA_ARM_GB_S, "GB-s", true));
    out.push(item("relay", "all", format!("Lambda notify requests (counted: {} of the charge's {} stream records pass the FilterCriteria; {k:.0} outcomes per invocation)", run.relay.filtered_in, run.relay.stream_records), run.relay.filtered_in as f64 / k, LAMBDA_PER_REQUEST, "request", true));
    let (ni, ni_measured) = inputs.init("notify");
    out.push(item(
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
    ));
    out.push(item("relay", "all", format!("DynamoDB Streams reads by the Lambda trigger ({} records; GetRecords by Lambda is not charged, DynamoDB pricing page)", run.relay.stream_records), 0.0, 0.0, "request", true));
    let pe = &r.put_events;
    out.push(item("relay", "all", format!("EventBridge PutEvents, custom events (counted: {} entry of {} B in {} call; billed per started 64 KB of an entry)", pe.entries, pe.entry_bytes.iter().max().copied().unwrap_or(0), pe.calls), pe.billed_events() as f64, CUSTOM_EVENT, "event", false));
}

/// Stripe's events in: the bus or the route, and the events function's Lambda lines.
fn events_in(ctx: &Ctx, ev: &EventsIn, out: &mut Vec<Item>) {
    let Ctx {
        run,
        inputs,
        memory,
        ..
    } = *ctx;
    let applies = match run.source {
        Source::Webhook => "webhook",
        _ => "EventBridge",
    };
    let p = &ev.phase;
    let deliveries = ev.deliveries.len() as f64;
    if run.source == Source::EventBridge {
        out.push(item(
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
        ));
        out.push(item("events in", applies, "EventBridge rule → the events function (same-account delivery to a target: not charged)".into(), deliveries, 0.0, "event", false));
    } else {
        out.push(item("events in", applies, format!("API Gateway HTTP API, POST /stripe/webhook (counted: {deliveries:.0} deliveries, {})", types(ev)), deliveries, HTTP_API_PER_REQUEST, "request", false));
    }
    let w_mb = memory("webhook");
    let w_calls = (p.counts.dynamodb.total() + p.inbox.total()) as f64;
    let w_io = w_calls * AWS_CALL_MS + p.counts.stripe.retrieve as f64 * STRIPE_RETRIEVE_MS;
    let w_ms = billed_ms(w_io / deliveries.max(1.0), inputs.cpu("webhook"), w_mb);
    out.push(item("events in", applies, format!("Lambda webhook {w_mb:.0} MB, {deliveries:.0} invocation × {w_ms:.0} ms (**assumed** {w_calls:.0} DynamoDB calls × {AWS_CALL_MS} ms + CPU)"), deliveries * gb_s(w_ms, w_mb), LAMBDA_ARM_GB_S, "GB-s", true));
    out.push(item(
        "events in",
        applies,
        "Lambda webhook requests (one per event)".into(),
        p.invocations as f64,
        LAMBDA_PER_REQUEST,
        "request",
        true,
    ));
    let (wi, wi_measured) = inputs.init("webhook");
    out.push(item(
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
    ));
}

/// Stripe's events in: the inbox, the table, Stripe, Secrets Manager and the logs.
fn events_in_store(ctx: &Ctx, ev: &EventsIn, out: &mut Vec<Item>) {
    let Ctx { run, inputs, .. } = *ctx;
    let fixed = &inputs.fixed;
    let applies = match run.source {
        Source::Webhook => "webhook",
        _ => "EventBridge",
    };
    let p = &ev.phase;
    let deliveries = ev.deliveries.len() as f64;
    out.push(item(
        "events in",
        applies,
        format!("DynamoDB inbox writes (counted: {})", ops(&p.inbox)),
        (p.inbox.get("PutItem") + p.inbox.get("DeleteItem") + p.inbox.get("UpdateItem")) as f64,
        DDB_PER_WRU,
        "WRU",
        true,
    ));
    out.push(item(
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
    ));
    out.push(item(
        "events in",
        applies,
        "DynamoDB table writes (counted)".into(),
        writes(p),
        DDB_PER_WRU,
        "WRU",
        true,
    ));
    out.push(item("events in", applies, format!("Stripe retrieves (counted: {}; not an AWS cost, a share of Stripe's 25/s per endpoint)", p.counts.stripe.retrieve), 0.0, 0.0, "request", false));
    let secrets = if run.source == Source::Webhook {
        2.0
    } else {
        1.0
    };
    out.push(item("events in", applies, format!("Secrets Manager at the events function's cold starts ({secrets:.0} GetSecretValue, **assumed** {:.0} % of its invocations)", COLD_START_SHARE * 100.0), COLD_START_SHARE * secrets * deliveries, SECRETS_PER_CALL, "call", false));
    let access = if run.source == Source::Webhook {
        fixed.webhook_access_line * deliveries
    } else {
        0.0
    };
    let bytes = log_bytes(p, 1.0, fixed, 1.0 / deliveries.max(1.0)) + access;
    out.push(item("logs", applies, format!("CloudWatch Logs, events function: {bytes:.0} B per charge (measured lines + EMF{}, platform records)", if access > 0.0 { " + the route's access-log line" } else { "" }), bytes / 1073741824.0, LOGS_PER_GB, "GB", false));
}

/// Logs (measured lines of the chosen subscriber's run) and the rest.
fn logs_and_rest(ctx: &Ctx, out: &mut Vec<Item>) {
    let Ctx {
        run, n, inputs, k, ..
    } = *ctx;
    let fixed = &inputs.fixed;
    let lc = log_bytes(&run.checkout, 1.0, fixed, 1.0) + fixed.checkout_access_line;
    out.push(item("logs", "all", format!("CloudWatch Logs, checkout: {lc:.0} B per charge (measured lines, platform records, the access-log line)"), lc / 1073741824.0, LOGS_PER_GB, "GB", false));
    let lch = log_bytes(&run.charge, 1.0, fixed, n);
    out.push(item("logs", "all", format!("CloudWatch Logs, charge: {lch:.0} B per charge (measured lines per message; EMF line and platform records per batch ÷ {n:.0})"), lch / 1073741824.0, LOGS_PER_GB, "GB", false));
    let ln = log_bytes(&run.relay.phase, 1.0, fixed, k);
    out.push(item("logs", "all", format!("CloudWatch Logs, notify: {ln:.0} B per charge (measured line per outcome; batch line, EMF and platform records ÷ {k:.0})"), ln / 1073741824.0, LOGS_PER_GB, "GB", false));
    out.push(item(
        "other",
        "all",
        "API Gateway HTTP API, the checkout request".into(),
        1.0,
        HTTP_API_PER_REQUEST,
        "request",
        false,
    ));
    out.push(item("other", "all", format!("Secrets Manager at the charge function's cold starts (1 GetSecretValue, **assumed** {:.0} % of its invocations)", COLD_START_SHARE * 100.0), COLD_START_SHARE / n, SECRETS_PER_CALL, "call", false));
}

/// `PutItem 1, GetItem 1`, or `none`.
pub fn ops(t: &crate::wire::counter::WireTally) -> String {
    if t.requests.is_empty() {
        return "none".into();
    }
    t.requests
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn types(ev: &crate::bill::EventsIn) -> String {
    let t: Vec<String> = ev
        .deliveries
        .iter()
        .map(|(t, a)| format!("{t} → {a}"))
        .collect();
    t.join(", ")
}

/// Totals of a bill per 1M charges: the charge path's Lambda + DynamoDB + SQS, Lambda + DynamoDB + SQS of every function, and all-in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Totals {
    pub charge_path: f64,
    pub core: f64,
    pub relay: f64,
    pub events_in: f64,
    pub logs: f64,
    /// The drift audit's own lines (the settled-by-day index, the daily reads).
    pub audit: f64,
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
        audit: sum(&|i| i.group == "drift audit"),
        all_in: sum(&|_| true),
    }
}

pub fn run_of(record: &BillRecord, s: Source) -> Result<&BillRun, Error> {
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
}
