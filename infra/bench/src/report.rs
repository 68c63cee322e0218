//! Cost per 1M charges from the counted requests and published prices, and the Markdown
//! (section 7's in [`crate::burst`]).

use std::fmt::Write as _;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::index_cost::{IndexRow, PAGE_SIZE};
use crate::wire::counter::WireTally;
use crate::wire::scenarios::{Counts, StripeCounts};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// One scenario of `wire.json`: what `bench wire` writes and `render` reads back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireRow {
    /// The [`crate::wire::scenarios::Scenario`] variant's name.
    pub scenario: String,
    pub label: String,
    pub ours: Counts,
    pub seed: Counts,
}

/// `rss.json`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct RssRecord {
    pub batch_size: usize,
    pub vm_hwm_kb: u64,
}

/// `logs.json`: CloudWatch Logs bytes of one happy path.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogsRecord {
    pub function_bytes: u64,
    pub function_lines: u64,
    pub messages: Vec<String>,
    pub platform_bytes: u64,
    pub access_log_bytes: u64,
}

/// `cpu.json` and `cpu-logs.json` as `footprint::cpu::CpuResult::to_json` writes them: the fields
/// the report reads.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct CpuRecord {
    pub charges: u64,
    pub batch_size: u64,
    pub cpu_us_per_charge: f64,
    pub wall_us_per_charge: f64,
}

/// A Markdown table: the header, its rule, one line per row of cells.
pub(crate) fn table(
    w: &mut String,
    header: &[&str],
    rows: impl IntoIterator<Item = Vec<String>>,
) -> std::fmt::Result {
    writeln!(w, "| {} |", header.join(" | "))?;
    writeln!(w, "|{}", "---|".repeat(header.len()))?;
    for row in rows {
        writeln!(w, "| {} |", row.join(" | "))?;
    }
    Ok(())
}

/// Published unit prices (us-east-1, `/work/shared/REFERENCE.md`).
pub const LAMBDA_ARM_GB_S: f64 = 0.000_013_333_4;
pub const LAMBDA_PER_REQUEST: f64 = 0.20 / 1e6;
pub const DDB_PER_WRU: f64 = 0.625 / 1e6;
pub const DDB_PER_RRU: f64 = 0.125 / 1e6;
pub const SQS_FIFO_PER_REQUEST: f64 = 0.50 / 1e6;
/// The rest of the all-in figure (us-east-1 public price pages, checked November 2026): HTTP API
/// requests (first 300M a month), CloudWatch Logs ingestion (standard class; the first tier of
/// Lambda's tiered log pricing is the same), Secrets Manager API calls ($0.05 per 10,000).
pub const HTTP_API_PER_REQUEST: f64 = 1.00 / 1e6;
pub const LOGS_PER_GB: f64 = 0.50;
pub const SECRETS_PER_CALL: f64 = 0.05 / 10_000.0;
/// Share of invocations that start a new execution environment: **assumed** (AWS's Lambda docs say
/// cold starts are typically under 1 % of invocations in production; a steady flow is far below).
pub const COLD_START_SHARE: f64 = 0.01;
/// `MemorySize` of every function in template.yaml.
pub const MEMORY_GB: f64 = 256.0 / 1024.0;

/// Assumed latencies (not measured here): a warm DynamoDB write or SQS send from Lambda in the
/// same region, and a Stripe PaymentIntent create with confirm.
pub const AWS_CALL_MS: f64 = 10.0;
pub const STRIPE_CALL_MS: f64 = 300.0;

/// Function sizes before issue 15 (two HTTP/TLS stacks, thin LTO), measured once by `sam build`
/// (cargo lambda, arm64, release) and `zip -9` of the bootstrap: the "before" row of the footprint.
pub const SIZES_BEFORE: [(&str, u64, u64); 3] = [
    ("checkout", 11_949_592, 5_088_461),
    ("charge", 12_807_280, 5_448_746),
    ("reconciler", 13_155_864, 5_572_798),
];

fn read<T: DeserializeOwned>(dir: &Path, name: &str) -> Result<T, Error> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?)
}

/// `read`, or `None` when the file does not exist (a step left out of the run).
pub(crate) fn read_opt<T: DeserializeOwned>(dir: &Path, name: &str) -> Result<Option<T>, Error> {
    if dir.join(name).exists() {
        read(dir, name).map(Some)
    } else {
        Ok(None)
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn by_op(t: &WireTally) -> String {
    if t.requests.is_empty() {
        return "—".into();
    }
    t.requests
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn stripe_str(s: &StripeCounts) -> String {
    let parts: Vec<String> = [
        ("create", s.create),
        ("retrieve", s.retrieve),
        ("search", s.search),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(k, n)| format!("{k} {n}"))
    .collect();
    if parts.is_empty() {
        "0".into()
    } else {
        format!("{} ({})", s.total(), parts.join(", "))
    }
}

fn ratio(a: u64, b: u64) -> String {
    match (a, b) {
        (0, 0) => "— (0 / 0)".into(),
        (_, 0) => format!("∞ ({a} / 0)"),
        _ => format!("{:.2} ({a} / {b})", a as f64 / b as f64),
    }
}

/// `1000` as `1,000`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn machine() -> (usize, String) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name") || l.starts_with("Model"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    (cores, model)
}

/// What the cost model takes besides the counted requests.
#[derive(Debug, Clone, Copy)]
pub struct CostInputs {
    /// Measured CPU per charge of our code (µs).
    pub cpu_us: f64,
    /// Measured init (median ms) of the checkout and charge functions.
    pub checkout_init_ms: f64,
    pub charge_init_ms: f64,
    /// CloudWatch Logs bytes per charge: our own lines (measured, per charge whatever the batch).
    pub log_function_bytes: f64,
    /// Lambda's platform records (start + report) per invocation.
    pub log_platform_bytes_per_invocation: f64,
    /// The HTTP API's access-log line of the checkout request.
    pub log_access_bytes: f64,
}

/// What a cost table describes: the index write pattern, and how many messages (of different
/// message groups) share one charge invocation.
#[derive(Debug, Clone, Copy)]
pub struct Design {
    pub label: &'static str,
    /// Before issue 15 part 5: the unknown index projected ALL (the claim rewrote its entry) and
    /// a KEYS_ONLY index by operation id (one write per operation).
    pub index_before: bool,
    /// Messages per charge invocation, ReceiveMessage and DeleteMessageBatch (n).
    pub batch: f64,
    /// Before issue 15 part 4 the messages of a batch ran one after another: the invocation
    /// lasted n Stripe calls. Since, the groups of a batch run concurrently: one Stripe call.
    pub concurrent: bool,
}

/// The designs compared in section 5, the "before" first, the detailed one last.
pub const DESIGNS: [Design; 5] = [
    Design {
        label: "before (main): index ALL + by-operation-id, one message per invocation",
        index_before: true,
        batch: 1.0,
        concurrent: false,
    },
    Design {
        label: "part 5 only: 2 index writes, one message per invocation (low traffic)",
        index_before: false,
        batch: 1.0,
        concurrent: true,
    },
    Design {
        label: "parts 4 + 5, batches of 3 groups",
        index_before: false,
        batch: 3.0,
        concurrent: true,
    },
    Design {
        label: "parts 4 + 5, batches of 5 groups",
        index_before: false,
        batch: 5.0,
        concurrent: true,
    },
    Design {
        label: "parts 4 + 5, full batches of 10 groups (BatchSize 10, messages waiting)",
        index_before: false,
        batch: 10.0,
        concurrent: true,
    },
];

/// One row of the cost table, per charge.
#[derive(Debug, Clone)]
pub struct CostRow {
    pub item: String,
    pub qty: f64,
    pub price: f64,
    pub unit: &'static str,
    /// Lambda + DynamoDB + SQS (the target); else API Gateway, logs, secrets.
    pub core: bool,
}

fn row(item: String, qty: f64, price: f64, unit: &'static str, core: bool) -> CostRow {
    CostRow {
        item,
        qty,
        price,
        unit,
        core,
    }
}

/// Core (Lambda + DynamoDB + SQS) and all-in cost per 1M charges of a set of rows.
pub fn totals(rows: &[CostRow]) -> (f64, f64) {
    let cost = |r: &CostRow| r.qty * r.price * 1e6;
    (
        rows.iter().filter(|r| r.core).map(cost).sum(),
        rows.iter().map(cost).sum(),
    )
}

/// Per 1M happy-path charges, core rows first.
pub fn cost_rows(happy: &WireRow, m: &CostInputs, d: &Design) -> Vec<CostRow> {
    let ours = &happy.ours;
    let puts = ours.dynamodb.get("PutItem") as f64;
    let updates = ours.dynamodb.get("UpdateItem") as f64;
    let reads = ours.dynamodb_reads() as f64;
    let sends = ours.sqs.total() as f64;
    // Counted for one message: one ReceiveMessage and one DeleteMessage. A batch of n makes the
    // same two requests (DeleteMessageBatch for n), so per charge they divide by n.
    let source = ours.source.total() as f64;
    let n = d.batch;
    // Index writes are not on the wire (moto does not bill them); they follow from the write
    // pattern by DynamoDB's GSI write rules (a put into the index, a REMOVE of its key, or a
    // change of a projected attribute each write the entry; anything else does not):
    // - before: projection ALL, so the create, the claim and the settling record each wrote the
    //   unknown index; the by-operation-id index took the create's put.
    // - after: only keys and operation_id projected: the create puts the entry, the settling
    //   record (1 of the counted UpdateItems) removes it, the claim (the other) writes nothing.
    let settling_records = 1.0;
    let (gsi_unknown, gsi_by_id) = if d.index_before {
        (puts + updates, puts)
    } else {
        (puts + settling_records, 0.0)
    };
    let checkout_ms = (puts + sends) * AWS_CALL_MS + m.cpu_us / 1e3;
    // One invocation for n messages: concurrently, as long as its slowest group (one message
    // each: claim + Stripe + record); before, one message after another.
    let per_message_ms = updates * AWS_CALL_MS + STRIPE_CALL_MS;
    let batch_ms = if d.concurrent {
        per_message_ms + n * m.cpu_us / 1e3
    } else {
        n * (per_message_ms + m.cpu_us / 1e3)
    };
    let gbs = |ms: f64| MEMORY_GB * ms.ceil() / 1e3;
    let init_gbs = COLD_START_SHARE * (gbs(m.checkout_init_ms) + gbs(m.charge_init_ms) / n);
    let charge_invocation = if d.concurrent {
        format!(
            "Stripe {STRIPE_CALL_MS} ms + {updates} writes × {AWS_CALL_MS} ms + measured CPU, the {n:.0} groups concurrently"
        )
    } else {
        format!(
            "{n:.0} × (Stripe {STRIPE_CALL_MS} ms + {updates} writes × {AWS_CALL_MS} ms + measured CPU), in order"
        )
    };
    let log_bytes = m.log_function_bytes
        + m.log_platform_bytes_per_invocation * (1.0 + 1.0 / n)
        + m.log_access_bytes;
    vec![
        row(
            format!("Lambda checkout, 1 invocation × {:.0} ms (assumed: {} AWS calls × {AWS_CALL_MS} ms)", checkout_ms.ceil(), puts + sends),
            gbs(checkout_ms),
            LAMBDA_ARM_GB_S,
            "GB-s",
            true,
        ),
        row("Lambda checkout, requests".into(), 1.0, LAMBDA_PER_REQUEST, "request", true),
        row(
            format!("Lambda charge, 1/{n:.0} of an invocation × {:.0} ms (assumed: {charge_invocation})", batch_ms.ceil()),
            gbs(batch_ms) / n,
            LAMBDA_ARM_GB_S,
            "GB-s",
            true,
        ),
        row(format!("Lambda charge, requests ({n:.0} messages per invocation)"), 1.0 / n, LAMBDA_PER_REQUEST, "request", true),
        row(
            format!(
                "Lambda init, cold starts (assumed {:.0} % of invocations × measured init: checkout {:.0} ms, charge {:.0} ms)",
                COLD_START_SHARE * 100.0,
                m.checkout_init_ms.ceil(),
                m.charge_init_ms.ceil()
            ),
            init_gbs,
            LAMBDA_ARM_GB_S,
            "GB-s",
            true,
        ),
        row(
            format!("DynamoDB table writes (counted: PutItem {puts}, UpdateItem {updates}; items < 1 KB)"),
            puts + updates,
            DDB_PER_WRU,
            "WRU",
            true,
        ),
        row(
            if d.index_before {
                "DynamoDB unknown-index writes (projection ALL: create, claim, settle, 1 each)".into()
            } else {
                "DynamoDB unknown-index writes (keys + operation_id projected: create puts, settle removes; the claim writes none)".into()
            },
            gsi_unknown,
            DDB_PER_WRU,
            "WRU",
            true,
        ),
        row(
            if d.index_before {
                "DynamoDB by-operation-id index write (create only)".into()
            } else {
                "DynamoDB by-operation-id index (removed)".into()
            },
            gsi_by_id,
            DDB_PER_WRU,
            "WRU",
            true,
        ),
        row(format!("DynamoDB reads (counted: {reads})"), reads, DDB_PER_RRU, "RRU", true),
        row(
            format!("SQS FIFO: SendMessage {sends} (counted) + event source Receive/Delete {source} per batch (counted for one message) ÷ {n:.0} messages"),
            sends + source / n,
            SQS_FIFO_PER_REQUEST,
            "request",
            true,
        ),
        row("API Gateway HTTP API, the checkout request".into(), 1.0, HTTP_API_PER_REQUEST, "request", false),
        row(
            format!("CloudWatch Logs ingestion ({log_bytes:.0} B per charge, see above)"),
            log_bytes / 1073741824.0,
            LOGS_PER_GB,
            "GB",
            false,
        ),
        row(
            format!("Secrets Manager GetSecretValue (charge function cold starts, assumed {:.0} % of its invocations)", COLD_START_SHARE * 100.0),
            COLD_START_SHARE / n,
            SECRETS_PER_CALL,
            "call",
            false,
        ),
    ]
}

/// `footprint-*.json` of `make bench` (one per profile), release first.
fn read_footprints(dir: &Path) -> Result<Vec<Value>, Error> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with("footprint-") && name.ends_with(".json") {
            out.push(read::<Value>(dir, &name)?);
        }
    }
    out.sort_by_key(|fp| {
        let p = fp["profile"].as_str().unwrap_or("").to_owned();
        (p != "release", p)
    });
    Ok(out)
}

/// The seed port's DynamoDB cost per happy-path charge, for comparison (no index; its GetItem is
/// strongly consistent: 1 RRU).
fn seed_ddb_cost(happy: &WireRow) -> f64 {
    happy.seed.dynamodb_writes() as f64 * DDB_PER_WRU
        + happy.seed.dynamodb_reads() as f64 * DDB_PER_RRU
}

pub fn render(dir: &Path) -> Result<String, Error> {
    let rows: Vec<WireRow> = read(dir, "wire.json")?;
    let mut index: Vec<IndexRow> = read(dir, "index.json")?;
    // Steps left out of a run (BENCH_STEPS) whose JSON is absent render as "not measured".
    let cpu: Option<CpuRecord> = read_opt(dir, "cpu.json")?;
    let cpu_logs: Option<CpuRecord> = read_opt(dir, "cpu-logs.json")?;
    let rss: Option<RssRecord> = read_opt(dir, "rss.json")?;
    // Written by `simulate --json`: its report's keys, read as they are.
    let sim_clean: Value = read_opt(dir, "sim-nofaults.json")?.unwrap_or(Value::Null);
    let sim_faults: Value = read_opt(dir, "sim-faults.json")?.unwrap_or(Value::Null);
    let scenario = |name: &str| {
        rows.iter()
            .find(|r| r.scenario == name)
            .ok_or_else(|| format!("wire.json has no {name} scenario"))
    };
    let happy = scenario("HappyPath")?;
    let dup = scenario("SettledDuplicate")?;
    let (cores, model) = machine();
    let date = std::env::var("BENCH_DATE").unwrap_or_else(|_| "unknown".into());
    let sim_profile = std::env::var("BENCH_SIM_PROFILE").unwrap_or_else(|_| "release".into());

    let mut md = String::new();
    let w = &mut md;
    writeln!(w, "# Benchmarks")?;
    writeln!(w)?;
    writeln!(w, "Generated by `make bench` (`infra/bench/run.sh`) on {date}; machine: {cores} cores, {model}.")?;
    writeln!(w, "Do not edit by hand: run `make bench` again. Every figure says how it was obtained; what is")?;
    writeln!(w, "assumed rather than measured is marked **assumed**.")?;
    writeln!(w)?;

    // 1
    writeln!(w, "## 1. Requests per operation, counted on the wire")?;
    writeln!(w)?;
    writeln!(w, "The real handlers (`checkout::handler::handle` on `events/checkout-valid.json`, `charge::handler::handle` on")?;
    writeln!(w, "an `SqsEvent` built from a real moto ReceiveMessage, `reconcile_tick`) against moto (DynamoDB, SQS FIFO) and")?;
    writeln!(w, "an embedded `stripe-sim`, each scenario on a fresh table, queue and simulator. DynamoDB and SQS: an SDK")?;
    writeln!(w, "interceptor (`read_before_transmit`, once per attempt) counts each request by its `X-Amz-Target`. Stripe:")?;
    writeln!(w, "the simulator's own per-endpoint counters (server side). The event source's ReceiveMessage/DeleteMessage")?;
    writeln!(w, "are Lambda's, not our functions': counted on a separate client and shown apart. `tests/request_counts.rs`")?;
    writeln!(w, "asserts these counts in `make test` with the same scenario code (`infra/bench/src/wire/`).")?;
    writeln!(w)?;
    table(
        w,
        &[
            "scenario",
            "DynamoDB requests",
            "reads / writes",
            "our SQS",
            "event source SQS",
            "Stripe requests",
        ],
        rows.iter().map(|r| {
            let o = &r.ours;
            vec![
                r.label.clone(),
                by_op(&o.dynamodb),
                format!("{} / {}", o.dynamodb_reads(), o.dynamodb_writes()),
                by_op(&o.sqs),
                by_op(&o.source),
                stripe_str(&o.stripe),
            ]
        }),
    )?;
    writeln!(w)?;
    writeln!(w, "What each scenario counts:")?;
    writeln!(
        w,
        "- *happy path*: checkout + one charge delivery (claim, create, record)."
    )?;
    writeln!(
        w,
        "- *duplicate delivery of a settled operation*: only the extra delivery."
    )?;
    writeln!(w, "- *lost response, in-call retry*: checkout + one delivery whose create response is dropped after Stripe")?;
    writeln!(w, "  committed (`drop_after_commit`); the client's one in-call retry (the production setting,")?;
    writeln!(
        w,
        "  `STRIPE_MAX_NETWORK_RETRIES=1`) sends the same key and gets the replay."
    )?;
    writeln!(w, "- *lost response, recorded unknown, retried later*: the same loss with in-call retries off, so it is")?;
    writeln!(w, "  recorded `unknown`; ours then re-drives it from the unknown index (one reconciler tick after the 60 s")?;
    writeln!(w, "  backoff) and a second delivery settles it by the key's replay. Counted from checkout to settled.")?;
    writeln!(w, "- *reconciliation past the key window*: only the tick that settles an operation left `unknown` by a")?;
    writeln!(
        w,
        "  replayed 500, 23 h 11 min after its first attempt: by search, never by create."
    )?;
    writeln!(w, "Every scenario ends with the operation `succeeded` and exactly one PaymentIntent in the simulator's ledger.")?;
    writeln!(w)?;
    let ho = &happy.ours;
    let happy_ok = ho.dynamodb_writes() == 3
        && ho.dynamodb_reads() == 0
        && ho.sqs.get("SendMessage") == 1
        && ho.sqs.total() == 1
        && ho.stripe.total() == 1;
    let dup_ok = dup.ours.dynamodb.total() == 1 && dup.ours.stripe.total() == 0;
    let met = |ok: bool| if ok { "yes" } else { "**no**" }.to_owned();
    table(
        w,
        &["target", "measured", "met"],
        [
            vec![
                "happy path: 3 DynamoDB writes, 0 reads, 1 SQS send, 1 Stripe call".into(),
                format!(
                    "{} writes, {} reads, {} SendMessage, {} Stripe",
                    ho.dynamodb_writes(),
                    ho.dynamodb_reads(),
                    ho.sqs.get("SendMessage"),
                    ho.stripe.total()
                ),
                met(happy_ok),
            ],
            vec![
                "settled duplicate: 1 DynamoDB call, 0 Stripe calls".into(),
                format!(
                    "{} DynamoDB ({}), {} Stripe",
                    dup.ours.dynamodb.total(),
                    by_op(&dup.ours.dynamodb),
                    dup.ours.stripe.total()
                ),
                met(dup_ok),
            ],
        ],
    )?;
    writeln!(w)?;
    writeln!(w, "The settled duplicate's one call is the claim's conditional UpdateItem refused by the settled status")?;
    writeln!(w, "(the record comes back through `ALL_OLD`): DynamoDB bills a refused conditional write as a write (1 WRU,")?;
    writeln!(
        w,
        "$0.625/M), where the seed's GetItem is a read (1 RRU strongly consistent, $0.125/M)."
    )?;
    writeln!(w)?;

    // 2
    writeln!(w, "## 2. Ours beside the seed's straight port")?;
    writeln!(w)?;
    writeln!(w, "`infra/bench/src/wire/seed.rs`: the seed's flow one SQL statement per request (a counting baseline, not")?;
    writeln!(w, "production code): checkout = conditional PutItem, GetItem on conflict, SendMessage; `execute_charge` =")?;
    writeln!(w, "`_load` GetItem (consistent) → `_mark_attempt_started` UpdateItem → create → `_record` UpdateItem; no")?;
    writeln!(w, "lease, no index. The seed has no scheduler: its \"retried later\" is a redelivery of the same message,")?;
    writeln!(w, "and its reconciliation finds work with a Scan on the status. Same stack, same counting. Ratio = ours / seed.")?;
    writeln!(w)?;
    table(
        w,
        &[
            "scenario",
            "seed DynamoDB requests",
            "DynamoDB ours/seed",
            "SQS (ours) ours/seed",
            "Stripe ours/seed",
        ],
        rows.iter().map(|r| {
            let (o, s) = (&r.ours, &r.seed);
            vec![
                r.label.clone(),
                by_op(&s.dynamodb),
                ratio(o.dynamodb.total(), s.dynamodb.total()),
                ratio(o.sqs.total(), s.sqs.total()),
                ratio(o.stripe.total(), s.stripe.total()),
            ]
        }),
    )?;
    writeln!(w)?;
    writeln!(w, "Where ours makes more requests: the re-drive and the past-window tick read the unknown index with one")?;
    writeln!(w, "Query per shard (8 shards, `DUE_SHARDS`) plus one of the REVIEW partition, then read the due records with one")?;
    writeln!(w, "BatchGetItem (the index projects keys only since issue 15); the re-drive adds a guarded reschedule and a SendMessage.")?;
    writeln!(w, "The seed's single Scan looks cheaper in requests but is billed for every item in the table (section 6).")?;
    writeln!(w)?;

    // 3
    writeln!(w, "## 3. Core throughput")?;
    writeln!(w)?;
    writeln!(w, "`simulate` ({sim_profile} build, `infra/simulate`): the whole pipeline on one thread, the real checkout, charge")?;
    writeln!(w, "and reconciler handlers with real Lambda event types, 8 consumers interleaved by the seeded scheduler on a")?;
    writeln!(w, "virtual clock; in memory with the Stripe simulator's engine in process (deterministic: `trace_hash` replays),")?;
    writeln!(w, "or over the wire (moto + a separately started `stripe-sim` over HTTP, not deterministic). Every fault kind on")?;
    writeln!(w, "unless `--no-faults`. CPU s is the process's user + system time: the box is shared with other builds, so")?;
    writeln!(
        w,
        "CPU seconds, not wall seconds, are the honest figure of what the run costs."
    )?;
    writeln!(w)?;
    writeln!(w, "| run | orders | orders/s (wall) | wall s | CPU s | orders / CPU s | virtual h | invariants | trace_hash |")?;
    writeln!(w, "|---|---|---|---|---|---|---|---|---|")?;
    let sim_wire: Option<Value> = read(dir, "sim-wire.json").ok();
    let mut runs = vec![
        ("default faults, in memory", &sim_faults),
        ("--no-faults, in memory", &sim_clean),
    ];
    if let Some(wire) = &sim_wire {
        runs.push(("default faults, moto + stripe-sim over HTTP", wire));
    }
    for (name, s) in &runs {
        if s.is_null() {
            writeln!(w, "| {name} | not measured in this run | | | | | | | |")?;
            continue;
        }
        let cpu = f(&s["cpu_secs"]);
        writeln!(
            w,
            "| {name} | {} | {:.0} | {:.1} | {:.1} | {:.0} | {:.1} | {} | `{}` |",
            u(&s["orders"]),
            f(&s["orders_per_sec"]),
            f(&s["wall_secs"]),
            cpu,
            u(&s["orders"]) as f64 / cpu.max(1e-9),
            f(&s["virtual_hours"]),
            if s["invariants_hold"].as_bool() == Some(true) {
                "hold".to_owned()
            } else {
                format!("BROKEN: {}", s["first_violation"].as_str().unwrap_or("?"))
            },
            s["trace_hash"].as_str().unwrap_or("-"),
        )?;
    }
    writeln!(w)?;
    sim_rates(
        w,
        dir,
        &runs_for_rates(&sim_faults, &sim_clean, sim_wire.as_ref()),
    )?;
    time_to_settle(
        w,
        read_opt(dir, "sim-eventbridge.json")?.unwrap_or(Value::Null),
        read_opt(dir, "sim-webhooks.json")?.unwrap_or(Value::Null),
        read_opt(dir, "sim-no-webhooks.json")?.unwrap_or(Value::Null),
    )?;
    let profile = concat!(env!("CARGO_MANIFEST_DIR"), "/profile.md");
    if let Ok(text) = std::fs::read_to_string(profile) {
        writeln!(w, "{}", text.trim_end())?;
        writeln!(w)?;
    }
    writeln!(w, "CPU time per charge: `footprint cpu` (the release profile) drives `charge::handler::handle` over batches of the template's")?;
    writeln!(w, "`BatchSize` with `MemoryStore` + `FakeGateway` on a current-thread runtime, after a 1,000-charge warm-up;")?;
    writeln!(w, "CPU = the thread's on-CPU time from `/proc/thread-self/schedstat`, only around the handler calls. It is our")?;
    writeln!(w, "code alone: no network, no AWS SDK serialisation, no TLS (those are in the real function and not measured).")?;
    writeln!(w)?;
    table(
        w,
        &[
            "logging",
            "charges",
            "batch",
            "CPU µs / charge",
            "wall µs / charge",
        ],
        [
            ("no subscriber", &cpu),
            ("lambda_runtime's default subscriber → sink", &cpu_logs),
        ]
        .map(|(name, c)| match c {
            None => vec![
                name.into(),
                "not measured in this run".into(),
                String::new(),
                String::new(),
                String::new(),
            ],
            Some(c) => vec![
                name.into(),
                c.charges.to_string(),
                c.batch_size.to_string(),
                format!("{:.1}", c.cpu_us_per_charge),
                format!("{:.1}", c.wall_us_per_charge),
            ],
        }),
    )?;
    writeln!(w)?;

    // 4
    let footprints = read_footprints(dir)?;
    writeln!(w, "## 4. Footprint: size, init and CPU per release profile")?;
    writeln!(w)?;
    writeln!(w, "`make bench` builds each function on its own (`cargo build --profile P -p FUNCTION`, so features resolve as")?;
    writeln!(w, "`sam build` resolves them) for every profile in `BENCH_PROFILES`, on this x86-64 host: **not arm64**, the")?;
    writeln!(w, "template's architecture (a cross build of each candidate through cargo-lambda/zig would double the optimised")?;
    writeln!(w, "builds on this shared 2-core machine; the before row is arm64). Binary = the `strip = true` bootstrap;")?;
    writeln!(w, "zip = `zip -9` of it as `bootstrap`.")?;
    writeln!(w, "Init = from `spawn` of the bootstrap to its first `GET /2018-06-01/runtime/invocation/next` against a tiny")?;
    writeln!(w, "Runtime API on loopback (`footprint init`, `infra/footprint/src/init.rs`), with the real `main`: JSON tracing,")?;
    writeln!(w, "typed config, `aws_config::load_from_env`, the SDK clients, the Stripe key's GetSecretValue from moto")?;
    writeln!(w, "(charge, reconciler; plain HTTP on loopback, no TLS handshake) and the reqwest/rustls client; median of")?;
    writeln!(w, "the runs after a warm-up, on a shared 2-core machine. CPU = `footprint cpu` (section 3's measure, with")?;
    writeln!(
        w,
        "lambda_runtime's subscriber) built with the same profile."
    )?;
    writeln!(w)?;
    writeln!(
        w,
        "| profile | settings | function | stripped bootstrap | zip | init ms, median (min–max) |"
    )?;
    writeln!(w, "|---|---|---|---|---|---|")?;
    for (name, bin, zip) in SIZES_BEFORE {
        writeln!(
            w,
            "| before issue 15 (`sam build`, arm64) | thin LTO, opt 3, unwind; two HTTP/TLS stacks | {name} | {bin} B ({:.1} MiB) | {zip} B ({:.2} MiB) | not measured |",
            bin as f64 / 1048576.0,
            zip as f64 / 1048576.0
        )?;
    }
    for fp in &footprints {
        for func in fp["functions"].as_array().cloned().unwrap_or_default() {
            let init = &func["init"];
            writeln!(
                w,
                "| `{}` | {} | {} | {} B ({:.1} MiB) | {} B ({:.2} MiB) | {:.1} ({:.1}–{:.1}), {} runs |",
                fp["profile"].as_str().unwrap_or(""),
                fp["settings"].as_str().unwrap_or(""),
                func["function"].as_str().unwrap_or(""),
                u(&func["binary_bytes"]),
                f(&func["binary_bytes"]) / 1048576.0,
                u(&func["zip_bytes"]),
                f(&func["zip_bytes"]) / 1048576.0,
                f(&init["median_ms"]),
                f(&init["min_ms"]),
                f(&init["max_ms"]),
                u(&init["runs"]),
            )?;
        }
    }
    writeln!(w)?;
    let baseline = std::env::var("BENCH_BASELINE_PROFILE").unwrap_or_else(|_| "fp-thin3".into());
    writeln!(w, "| profile | CPU µs / charge | vs `{baseline}` (the settings before issue 15) | largest zip | slowest init median | zip ≤ 3 MB, init ≤ 30 ms, CPU ≤ +10 % |")?;
    writeln!(w, "|---|---|---|---|---|---|")?;
    let baseline_cpu = footprints
        .iter()
        .find(|fp| fp["profile"] == baseline.as_str())
        .map(|fp| f(&fp["cpu"]["cpu_us_per_charge"]));
    for fp in &footprints {
        let cpu_us = f(&fp["cpu"]["cpu_us_per_charge"]);
        let funcs = fp["functions"].as_array().cloned().unwrap_or_default();
        let max_zip = funcs.iter().map(|x| u(&x["zip_bytes"])).max().unwrap_or(0);
        let max_init = funcs
            .iter()
            .map(|x| f(&x["init"]["median_ms"]))
            .fold(0.0, f64::max);
        let vs = baseline_cpu
            .filter(|b| *b > 0.0)
            .map(|b| format!("{:+.1} %", (cpu_us / b - 1.0) * 100.0));
        let cpu_ok = baseline_cpu.is_none_or(|b| cpu_us <= b * 1.10);
        let met = [
            (max_zip <= 3_000_000, "zip"),
            (max_init <= 30.0, "init"),
            (cpu_ok, "CPU"),
        ];
        let verdict = if met.iter().all(|(ok, _)| *ok) {
            "yes".to_owned()
        } else {
            format!(
                "**no** ({})",
                met.iter()
                    .filter(|(ok, _)| !ok)
                    .map(|(_, n)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let name = fp["profile"].as_str().unwrap_or("");
        let shipped_name =
            std::env::var("BENCH_SHIPPED_PROFILE").unwrap_or_else(|_| "release".into());
        writeln!(
            w,
            "| `{name}`{} | {cpu_us:.1} | {} | {max_zip} B ({:.2} MB) | {max_init:.1} ms | {verdict} |",
            if name == shipped_name && name != "release" { " (= `release` now)" } else { "" },
            vs.unwrap_or_else(|| "—".into()),
            max_zip as f64 / 1e6,
        )?;
    }
    writeln!(w)?;
    if let Some(rss) = rss {
        writeln!(
            w,
            "Peak RSS: {} kB (`VmHWM`) of a fresh `bench rss` process (release, x86-64 host) after handling one batch of {} with",
            rss.vm_hwm_kb,
            rss.batch_size
        )?;
        writeln!(w, "the in-memory ports and lambda_runtime's log subscriber: the handler in a plain process, **not** the Lambda")?;
        writeln!(w, "runtime, and without the AWS SDK and reqwest/rustls clients the real function also holds (not measured).")?;
        writeln!(w)?;
    }

    // 5
    // The profile the functions ship with: `release`, or the measured candidate whose settings it
    // has (BENCH_SHIPPED_PROFILE) when `release` itself was not rebuilt.
    let shipped = std::env::var("BENCH_SHIPPED_PROFILE").unwrap_or_else(|_| "release".into());
    let release = footprints
        .iter()
        .find(|fp| fp["profile"] == shipped.as_str())
        .or(footprints.first());
    let init_of = |name: &str| {
        release
            .and_then(|fp| {
                fp["functions"]
                    .as_array()?
                    .iter()
                    .find(|x| x["function"] == name)
                    .map(|x| f(&x["init"]["median_ms"]))
            })
            .unwrap_or(0.0)
    };
    // CPU per charge with the functions' subscriber: section 3's, else the shipped profile's.
    let cpu_us = match cpu_logs {
        None => release.map_or(0.0, |fp| f(&fp["cpu"]["cpu_us_per_charge"])),
        Some(c) => c.cpu_us_per_charge,
    };
    let init_profile = release
        .and_then(|fp| fp["profile"].as_str())
        .unwrap_or("none")
        .to_owned();
    let logs: LogsRecord = read(dir, "logs.json")?;
    let model = CostInputs {
        cpu_us,
        checkout_init_ms: init_of("checkout"),
        charge_init_ms: init_of("charge"),
        log_function_bytes: logs.function_bytes as f64,
        // Measured scenario: one checkout and one charge invocation.
        log_platform_bytes_per_invocation: logs.platform_bytes as f64 / 2.0,
        log_access_bytes: logs.access_log_bytes as f64,
    };
    let detailed = DESIGNS[DESIGNS.len() - 1];
    writeln!(w, "## 5. AWS cost per 1M charges (happy path)")?;
    writeln!(w)?;
    writeln!(w, "From the counted requests of section 1 and us-east-1 prices (`REFERENCE.md` for Lambda, DynamoDB and SQS;")?;
    writeln!(w, "the public price pages for the rest: HTTP API $1.00 per 1M requests, CloudWatch Logs ingestion $0.50 per GB")?;
    writeln!(w, "(GB = 2^30 B), Secrets Manager $0.05 per 10,000 calls). Assumptions: Lambda arm64, 256 MB (template.yaml),")?;
    writeln!(w, "billed per 1 ms; durations **assumed**: {AWS_CALL_MS} ms per DynamoDB/SQS call, {STRIPE_CALL_MS} ms per Stripe create, plus")?;
    writeln!(w, "the measured CPU per charge ({cpu_us:.1} µs); items measured at 400–550 B (< 1 KB: 1 WRU per write). The event source")?;
    writeln!(w, "makes one ReceiveMessage and one DeleteMessage(Batch) per batch; a batch of n messages from n orders is one")?;
    writeln!(w, "charge invocation whose groups run concurrently, so it lasts about one Stripe call (its slowest group).")?;
    writeln!(w, "**n is not ours to choose**: `BatchSize` 10 caps it, and a FIFO event source has no batching window, so a")?;
    writeln!(w, "batch holds what is waiting: n = 10 only while messages queue up (a burst, or a steady rate above what the")?;
    writeln!(w, "running invocations drain), n = 1 at low traffic. Index writes are not on the wire; they follow from the")?;
    writeln!(w, "write pattern by DynamoDB's GSI rules (a put into the index, a REMOVE of its key or a change of a projected")?;
    writeln!(w, "attribute writes the entry, nothing else does). Cold starts: **assumed** {:.0} % of invocations, each billed", COLD_START_SHARE * 100.0)?;
    writeln!(w, "its init (section 4's median, profile `{init_profile}`, x86-64 on loopback) and, for the charge function, one")?;
    writeln!(w, "GetSecretValue. Logs: **measured** {} B of our own JSON lines for one happy path ({} lines, checkout +", logs.function_bytes, logs.function_lines)?;
    writeln!(w, "charge, `bench logs` on moto, AWS SDK and reqwest lines included; per message, so per charge whatever the batch),")?;
    writeln!(w, "plus Lambda's platform records ({} B for start + report of 2 invocations, JSON format, their documented", logs.platform_bytes)?;
    writeln!(w, "shape; the charge function's share divides by n) and the {} B access-log line the template's format gives", logs.access_log_bytes)?;
    writeln!(w, "for the sample request.")?;
    writeln!(w)?;
    writeln!(w, "Before and after issue 15 parts 4 (concurrent groups) and 5 (fewer index writes), same model:")?;
    writeln!(w)?;
    writeln!(w, "| design | DynamoDB write units | charge invocations | SQS requests | Lambda + DynamoDB + SQS | all-in |")?;
    writeln!(w, "|---|---|---|---|---|---|")?;
    for d in &DESIGNS {
        let rows = cost_rows(happy, &model, d);
        let (core, all_in) = totals(&rows);
        let qty = |prefix: &str| -> f64 {
            rows.iter()
                .filter(|r| r.item.starts_with(prefix) && r.unit == "WRU")
                .map(|r| r.qty)
                .sum()
        };
        let sqs: f64 = rows
            .iter()
            .filter(|r| r.item.starts_with("SQS"))
            .map(|r| r.qty)
            .sum();
        writeln!(
            w,
            "| {} | {:.0} | {:.2} | {sqs:.2} | ${core:.2} | ${all_in:.2} |",
            d.label,
            qty("DynamoDB"),
            1.0 / d.batch,
        )?;
    }
    writeln!(w)?;
    writeln!(w, "In detail, {}:", detailed.label)?;
    writeln!(w)?;
    writeln!(
        w,
        "| item | quantity per charge | unit price | cost per 1M charges |"
    )?;
    writeln!(w, "|---|---|---|---|")?;
    let mut core = 0.0;
    let mut all_in = 0.0;
    let mut ddb = 0.0;
    let mut printed_core_total = false;
    for row in cost_rows(happy, &model, &detailed) {
        let cost = row.qty * row.price * 1e6;
        if !row.core && !printed_core_total {
            writeln!(
                w,
                "| **Lambda + DynamoDB + SQS (target ≤ $4.00)** | | | **${core:.2}** |"
            )?;
            printed_core_total = true;
        }
        if row.core {
            core += cost;
        }
        all_in += cost;
        if row.item.starts_with("DynamoDB") {
            ddb += cost;
        }
        let qty = if row.qty != 0.0 && row.qty.abs() < 0.001 {
            format!("{:.3e}", row.qty)
        } else {
            format!("{:.4}", row.qty)
        };
        writeln!(
            w,
            "| {} | {qty} {} | ${:.10}/{} | ${cost:.3} |",
            row.item, row.unit, row.price, row.unit
        )?;
    }
    writeln!(
        w,
        "| **all-in (+ API Gateway, logs, secrets)** | | | **${all_in:.2}** |"
    )?;
    writeln!(w)?;
    let (low_core, _) = totals(&cost_rows(happy, &model, &DESIGNS[1]));
    let verdict = |c: f64| {
        if c <= 4.0 {
            format!("**met** (${c:.2})")
        } else {
            format!(
                "**missed** (${c:.2}, ${:.2} over, {:.0} %)",
                c - 4.0,
                (c / 4.0 - 1.0) * 100.0
            )
        }
    };
    writeln!(
        w,
        "Target ≤ $4.00 per 1M for Lambda + DynamoDB + SQS: with full batches {}; at low traffic (one message per",
        verdict(core)
    )?;
    writeln!(
        w,
        "invocation) {}. The all-in figure with full batches is ${all_in:.2}.",
        verdict(low_core)
    )?;
    writeln!(
        w,
        "DynamoDB is ${ddb:.3} per 1M of it (5 write units: 3 table writes, 2 index writes); the seed's port would be ${:.3}",
        seed_ddb_cost(happy) * 1e6
    )?;
    writeln!(w, "(3 writes + 1 consistent read, no index). What is left is the design's floor: the conditional put, the")?;
    writeln!(w, "lease (claim) and the fenced record are the promise's three writes, and the index entry the checkout puts")?;
    writeln!(w, "(what recovers a lost SendMessage) must be removed when the operation settles. The rest of the core is")?;
    writeln!(w, "the checkout invocation and its SendMessage (${:.2} together), which no batching on the charge side reaches.",
        (LAMBDA_PER_REQUEST + SQS_FIFO_PER_REQUEST) * 1e6 + MEMORY_GB * ((2.0 * AWS_CALL_MS + cpu_us / 1e3).ceil() / 1e3) * LAMBDA_ARM_GB_S * 1e6)?;
    writeln!(w)?;

    // 6
    writeln!(w, "## 6. Reconciler reads as unsettled operations grow")?;
    writeln!(w)?;
    writeln!(w, "Two tables on moto: one with 1,000 settled operations and 1,000 unsettled; one with 10,000 settled to which")?;
    writeln!(w, "unsettled ones are added in steps (10, then 100, then 1,000). Settled operations as the charge function")?;
    writeln!(w, "leaves them (no index attributes), unsettled ones `unknown` and due now (BatchWriteItem, 25 per call, uncounted). Then")?;
    writeln!(w, "exactly what a tick reads: `query_index(IndexQuery::DueBy(now))` page by page with the reconciler's page size")?;
    writeln!(w, "({}), counted on the wire: the index Queries (entries of keys and `operation_id` since issue 15) and the", thousands(PAGE_SIZE as u64))?;
    writeln!(w, "BatchGetItems that read each page's records from the table. Read units are **computed** from the items in")?;
    writeln!(w, "each answer (DynamoDB's item size rules; eventually consistent GSI read = 0.5 RU per 4 KB, rounded up per")?;
    writeln!(
        w,
        "request, at least one unit; strongly consistent BatchGetItem = 1 RU per item per 4 KB) —"
    )?;
    writeln!(w, "moto's `ReturnConsumedCapacity` answers a constant 1.0 whatever is read, so it is not used. The last two")?;
    writeln!(w, "columns are the seed port's way of finding work, a Scan of the table, on the same table (computed the same way).")?;
    writeln!(w)?;
    index.sort_by_key(|r| (r.unsettled, r.settled));
    table(
        w,
        &[
            "settled",
            "unsettled",
            "pages",
            "Query requests",
            "BatchGetItem requests",
            "items read",
            "read units",
            "seed Scan requests",
            "seed Scan read units",
        ],
        index.iter().map(|r| {
            vec![
                r.settled.to_string(),
                r.unsettled.to_string(),
                r.pages.to_string(),
                r.queries.to_string(),
                r.batch_gets.to_string(),
                r.items_read.to_string(),
                format!("{:.1}", r.read_units),
                r.scan_requests.to_string(),
                format!("{:.1}", r.scan_read_units),
            ]
        }),
    )?;
    writeln!(w)?;
    writeln!(w, "The tick's reads do not grow with the settled count (1,000 unsettled among 1,000 or 10,000 settled read the")?;
    writeln!(w, "same); the Scan's do. Each due item is read once: a page is merged from the 8 shards, and what a page")?;
    writeln!(w, "does not keep is read again for the next one, so the reconciler reads pages of up to 1,000. With pages of")?;
    writeln!(w, "50 (an earlier setting) the same 1,000 due operations took 93 Queries, 4,478 items and 269 read units.")?;
    writeln!(w)?;
    writeln!(w, "Since issue 15 the index carries no record, so each due operation costs one strongly consistent read of its")?;
    writeln!(w, "record (1 RU, items < 4 KB) on top of the small index entries: with projection ALL the 1,000 due operations")?;
    writeln!(w, "above cost about 56 read units. That is the price of the claim's index write: 1 RU ($0.125 per 1M) per")?;
    writeln!(w, "due operation per tick, paid only for unsettled work, against 1 WRU ($0.625 per 1M) on every charge.")?;
    writeln!(w)?;

    // 7
    crate::burst::section(w, &crate::burst::read_reports(dir)?, &date)?;
    Ok(md)
}

/// Section 3's time to settle of `unknown` operations with Stripe's events by EventBridge (the
/// default), by signed webhook, and with neither (`--events none`): issues 17 and 23.
fn time_to_settle(w: &mut String, bridge: Value, hook: Value, none: Value) -> std::fmt::Result {
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    let u = |v: &Value| v.as_u64().unwrap_or(0);
    writeln!(
        w,
        "### Time to settle: EventBridge events, webhooks, neither"
    )?;
    writeln!(w)?;
    writeln!(w, "`simulate --orders 20000` (every fault kind) with `--events eventbridge` (the default: a Stripe event")?;
    writeln!(w, "destination's envelopes to the events function, a failed invocation retried by Lambda 1 and 2 minutes later,")?;
    writeln!(w, "then dead-lettered), `--events webhook` (signed webhooks, a non-2xx retried by Stripe after 10 s, doubling)")?;
    writeln!(w, "and `--events none` (re-drives and the reconciler only); deliveries have duplicate / out-of-order / delayed /")?;
    writeln!(w, "dropped faults, and forged events (validly delivered, naming a state Stripe does not hold) are among them.")?;
    writeln!(w, "For each operation that went `unknown`, the virtual time from its first `unknown` write to the write that")?;
    writeln!(w, "settled it (nearest-rank percentiles). \"Final at Stripe\" leaves out the `processing` cards, which Stripe itself")?;
    writeln!(w, "settles 10 minutes later (no event can be sooner). The p99 is the `key_pruned` scenario in every run: the")?;
    writeln!(w, "operation is unreachable for ~24 h by design.")?;
    writeln!(w)?;
    let rows = [
        ("EventBridge events (default)", &bridge),
        ("webhooks (`--events webhook`)", &hook),
        ("neither (`--events none`)", &none),
    ];
    if rows.iter().all(|(_, s)| s.is_null()) {
        writeln!(w, "Not measured in this run.")?;
        writeln!(w)?;
        return Ok(());
    }
    writeln!(w, "| run | unknowns | settled | median s | p99 s | final at Stripe: median s | p99 s | Stripe creates / order | forged settles | invariants | trace_hash |")?;
    writeln!(w, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    for (name, s) in rows {
        if s.is_null() {
            writeln!(w, "| {name} | not measured in this run | | | | | | | | | |")?;
            continue;
        }
        let t = &s["time_to_settle"];
        let fin = &s["time_to_settle_final_at_stripe"];
        writeln!(
            w,
            "| {name} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.3} | {} | {} | `{}` |",
            u(&t["went_unknown"]),
            u(&t["settled"]),
            f(&t["median_secs"]),
            f(&t["p99_secs"]),
            f(&fin["median_secs"]),
            f(&fin["p99_secs"]),
            f(&s["requests_per_charge"]["stripe_creates"]),
            u(&s["forged_settles"]),
            if s["invariants_hold"].as_bool() == Some(true) {
                "hold"
            } else {
                "BROKEN"
            },
            s["trace_hash"].as_str().unwrap_or("-"),
        )?;
    }
    writeln!(w)?;
    for (name, s) in [("EventBridge", &bridge), ("webhook", &hook)] {
        if s.is_null() {
            continue;
        }
        let c = &s["webhook_counts"];
        let deliveries = u(&c["deliveries"]).max(1) as f64;
        let retries = if name == "webhook" {
            format!(
                "{} retried by Stripe after a non-2xx answer (409 while the charge function held the lease: {}; \
                 500: {})",
                u(&c["retried"]),
                u(&c["http_409"]),
                u(&c["http_500"]),
            )
        } else {
            format!(
                "{} invocations failed (the lease held, DynamoDB or Stripe unavailable), {} Lambda retries, {} \
                 dead-lettered",
                u(&c["invocations_failed"]),
                u(&c["lambda_retries"]),
                u(&s["events_dead_lettered"]),
            )
        };
        writeln!(
            w,
            "Per {name} delivery: {:.2} DynamoDB reads, {:.2} writes (inbox put, and claim + record when it \
             settles), {:.3} Stripe retrieves, {} Stripe creates; {} events, {} deliveries, {retries}; faults: {} \
             duplicated, {} out of order, {} delayed, {} dropped; {} forged events, {} refused as a mismatch and \
             paged, {} settled by one.",
            f(&c["dynamodb_reads"]) / deliveries,
            f(&c["dynamodb_writes"]) / deliveries,
            f(&c["stripe_retrieves"]) / deliveries,
            u(&c["stripe_creates"]),
            u(&c["events"]),
            u(&c["deliveries"]),
            u(&c["fault_duplicate"]),
            u(&c["fault_out_of_order"]),
            u(&c["fault_delayed"]),
            u(&c["fault_dropped"]),
            u(&c["forged_events"]),
            u(&s["event_mismatches"]),
            u(&s["forged_settles"]),
        )?;
        writeln!(w)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn time_to_settle_has_a_row_per_event_source() {
        let run = |median: f64, counts: Value| {
            serde_json::json!({
                "time_to_settle": {"went_unknown": 10, "settled": 9, "median_secs": median,
                    "p99_secs": 900.0},
                "time_to_settle_final_at_stripe": {"median_secs": median, "p99_secs": 800.0},
                "requests_per_charge": {"stripe_creates": 1.1},
                "forged_settles": 0, "event_mismatches": 3, "events_dead_lettered": 1,
                "invariants_hold": true, "trace_hash": "abc", "webhook_counts": counts,
            })
        };
        let mut w = String::new();
        time_to_settle(
            &mut w,
            run(
                60.0,
                serde_json::json!({"deliveries": 10, "lambda_retries": 2}),
            ),
            run(94.0, serde_json::json!({"deliveries": 10, "http_409": 4})),
            run(800.0, serde_json::json!({})),
        )
        .unwrap();
        let rows: Vec<&str> = w.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(rows.len(), 4, "{w}");
        assert!(
            rows[1].starts_with("| EventBridge events (default) | 10 | 9 | 60 |"),
            "{w}"
        );
        assert!(
            rows[2].starts_with("| webhooks (`--events webhook`) | 10 | 9 | 94 |"),
            "{w}"
        );
        assert!(
            rows[3].starts_with("| neither (`--events none`) | 10 | 9 | 800 |"),
            "{w}"
        );
        assert!(w.contains("2 Lambda retries, 1 dead-lettered"), "{w}");
        assert!(
            w.contains("409 while the charge function held the lease: 4"),
            "{w}"
        );
        let mut partial = String::new();
        time_to_settle(
            &mut partial,
            Value::Null,
            run(1.0, Value::Null),
            Value::Null,
        )
        .unwrap();
        assert!(partial.contains("| neither (`--events none`) | not measured in this run"));
    }

    #[test]
    fn a_wire_row_reads_back_as_written() {
        let tally = |ops: &[(&str, u64)]| WireTally {
            requests: ops
                .iter()
                .map(|(k, n)| ((*k).to_owned(), *n))
                .collect::<BTreeMap<_, _>>(),
            read_units: 1.5,
            read_bytes: 660,
            read_items: 2,
        };
        let counts = Counts {
            dynamodb: tally(&[("PutItem", 1), ("UpdateItem", 2)]),
            sqs: tally(&[("SendMessage", 1)]),
            source: tally(&[("ReceiveMessage", 1), ("DeleteMessage", 1)]),
            stripe: StripeCounts {
                create: 1,
                retrieve: 0,
                search: 2,
            },
        };
        let row = WireRow {
            scenario: "HappyPath".into(),
            label: "happy path".into(),
            ours: counts.clone(),
            seed: Counts::default(),
        };
        let json = serde_json::to_value(&row).unwrap();
        assert_eq!(
            json["ours"]["event_source_sqs"]["requests"]["ReceiveMessage"],
            1
        );
        let back: WireRow = serde_json::from_value(json).unwrap();
        assert_eq!(back.ours, counts);
        assert_eq!(back.seed, Counts::default());
        assert_eq!(stripe_str(&back.ours.stripe), "3 (create 1, search 2)");
        assert_eq!(by_op(&back.ours.dynamodb), "PutItem 1, UpdateItem 2");
        assert_eq!(by_op(&back.seed.dynamodb), "—");
    }

    #[test]
    fn tables_and_numbers() {
        let mut w = String::new();
        table(&mut w, &["a", "b"], [vec!["1".into(), "x / y".into()]]).unwrap();
        assert_eq!(w, "| a | b |\n|---|---|\n| 1 | x / y |\n");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}

/// The in-memory runs and the wire run, for the rates table.
fn runs_for_rates<'a>(
    faults: &'a Value,
    clean: &'a Value,
    wire: Option<&'a Value>,
) -> Vec<(&'static str, &'a Value)> {
    let mut runs = vec![
        ("default faults, in memory", faults),
        ("--no-faults, in memory", clean),
    ];
    if let Some(wire) = wire {
        runs.push(("default faults, moto + stripe-sim over HTTP", wire));
    }
    runs
}

/// Section 3's second table: what a run does per wall second, in the units other
/// simulation-testing projects publish (simulated time, messages, storage and Stripe calls,
/// decisions), and its peak memory; then the peak memory at each `BENCH_SIM_SCALE` size.
fn sim_rates(w: &mut String, dir: &Path, runs: &[(&str, &Value)]) -> Result<(), Error> {
    writeln!(w, "Per wall second (the simulator's own counts: messages received, store calls, Stripe calls, and the")?;
    writeln!(
        w,
        "scheduler's decisions), and peak resident memory (`VmHWM`, read by the run itself):"
    )?;
    writeln!(w)?;
    writeln!(w, "| run | simulated s / wall s | messages / s | store calls / s | Stripe calls / s | decisions / s | peak RSS MB | KB / order |")?;
    writeln!(w, "|---|---|---|---|---|---|---|---|")?;
    for (name, s) in runs {
        if s.is_null() || s.get("sim_secs_per_wall_sec").is_none() {
            writeln!(w, "| {name} | not measured in this run | | | | | | |")?;
            continue;
        }
        let rss = f(&s["peak_rss_mb"]);
        writeln!(
            w,
            "| {name} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} |",
            f(&s["sim_secs_per_wall_sec"]),
            f(&s["messages_per_wall_sec"]),
            f(&s["store_calls_per_wall_sec"]),
            f(&s["stripe_calls_per_wall_sec"]),
            f(&s["decisions_per_wall_sec"]),
            rss,
            rss * 1024.0 / (u(&s["orders"]).max(1) as f64),
        )?;
    }
    writeln!(w)?;
    let mut scale: Vec<Value> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("sim-scale-") && name.ends_with(".json") {
                scale.push(read::<Value>(dir, &name)?);
            }
        }
    }
    scale.sort_by_key(|s| u(&s["orders"]));
    if scale.is_empty() {
        return Ok(());
    }
    writeln!(
        w,
        "Peak memory by size (`BENCH_SIM_SCALE`, every fault kind, seed 1):"
    )?;
    writeln!(w)?;
    writeln!(
        w,
        "| orders | peak RSS MB | KB / order | CPU s | orders / CPU s | invariants | trace_hash |"
    )?;
    writeln!(w, "|---|---|---|---|---|---|---|")?;
    for s in &scale {
        let rss = f(&s["peak_rss_mb"]);
        let cpu = f(&s["cpu_secs"]);
        writeln!(
            w,
            "| {} | {:.0} | {:.2} | {:.1} | {:.0} | {} | `{}` |",
            u(&s["orders"]),
            rss,
            rss * 1024.0 / (u(&s["orders"]).max(1) as f64),
            cpu,
            u(&s["orders"]) as f64 / cpu.max(1e-9),
            if s["invariants_hold"].as_bool() == Some(true) {
                "hold"
            } else {
                "BROKEN"
            },
            s["trace_hash"].as_str().unwrap_or("-"),
        )?;
    }
    writeln!(w)?;
    Ok(())
}
