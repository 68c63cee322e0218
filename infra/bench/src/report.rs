//! The Markdown of BENCHMARKS.md (section 5's, the cost per 1M charges, in [`crate::cost`];
//! section 7's in [`crate::burst`]).

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

/// `doc` with its section `number` (from the line starting `## {number}.` to the next `## `
/// heading or the end) replaced by `section` (which ends with a blank line); an error if `doc` has
/// no such section. `bench render-section` renders one section in place with it.
pub fn replace_section(doc: &str, number: u32, section: &str) -> Result<String, Error> {
    let heading = format!("## {number}.");
    let start = if doc.starts_with(&heading) {
        0
    } else {
        doc.find(&format!("\n{heading}"))
            .map(|i| i + 1)
            .ok_or_else(|| {
                format!(
                    "BENCHMARKS.md has no section {number} to replace; run `make bench` in full"
                )
            })?
    };
    let end = doc[start + 1..]
        .find("\n## ")
        .map_or(doc.len(), |i| start + 1 + i + 1);
    let mut out = String::with_capacity(doc.len() + section.len());
    out.push_str(&doc[..start]);
    out.push_str(section);
    out.push_str(&doc[end..]);
    Ok(out)
}

fn read<T: DeserializeOwned>(dir: &Path, name: &str) -> Result<T, Error> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?)
}

/// `read`, or `None` when the file does not exist (a step left out of the run).
pub fn read_opt<T: DeserializeOwned>(dir: &Path, name: &str) -> Result<Option<T>, Error> {
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

/// `footprint-*.json` of `make bench` (one per profile), release first.
pub fn read_footprints(dir: &Path) -> Result<Vec<Value>, Error> {
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
    throughput_section(
        w,
        dir,
        &sim_profile,
        (&cpu, &cpu_logs),
        (&sim_faults, &sim_clean),
    )?;

    // 4
    let footprints = read_footprints(dir)?;
    let previous = crate::footprint_table::previous()?;
    crate::footprint_table::section(w, &footprints, &previous, rss, &date)?;

    // 5
    crate::cost::section(w, dir, &footprints)?;

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

/// Section 3 (core throughput) from DIR's `sim-*.json` and `cpu*.json`: `render` writes it in
/// place, `bench render-section sim` alone (`BENCH_ONLY=sim make bench`).
pub fn throughput_section(
    w: &mut String,
    dir: &Path,
    sim_profile: &str,
    (cpu, cpu_logs): (&Option<CpuRecord>, &Option<CpuRecord>),
    (sim_faults, sim_clean): (&Value, &Value),
) -> Result<(), Error> {
    writeln!(w, "## 3. Core throughput")?;
    writeln!(w)?;
    writeln!(w, "`simulate` ({sim_profile} build, `infra/simulate`): the whole pipeline on one thread, the real checkout, charge")?;
    writeln!(w, "and reconciler handlers with real Lambda event types, 8 consumers interleaved by the seeded scheduler on a")?;
    writeln!(w, "virtual clock; in memory with the Stripe simulator's engine in process (deterministic: `trace_hash` replays),")?;
    writeln!(w, "or over the wire (moto + a separately started `stripe-sim` over HTTP, not deterministic). Every fault kind on")?;
    writeln!(w, "unless `--no-faults`. Built with the `sim` profile (opt-level 3; the functions' `release` is opt-level \"z\" for")?;
    writeln!(w, "their 2 MB zips, and ran this at half the speed). CPU s is the process's user + system time: the box is shared with other builds, so")?;
    writeln!(
        w,
        "CPU seconds, not wall seconds, are the honest figure of what the run costs."
    )?;
    writeln!(w)?;
    writeln!(w, "| run | orders | orders/s (wall) | wall s | CPU s | orders / CPU s | virtual h | invariants | trace_hash |")?;
    writeln!(w, "|---|---|---|---|---|---|---|---|---|")?;
    let sim_wire: Option<Value> = read(dir, "sim-wire.json").ok();
    let mut runs = vec![
        ("default faults, in memory", sim_faults),
        ("--no-faults, in memory", sim_clean),
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
    if !sim_faults.is_null() {
        // Issue 27's target, on the first row's CPU seconds (the run is one thread).
        let per_cpu_s = u(&sim_faults["orders"]) as f64 / f(&sim_faults["cpu_secs"]).max(1e-9);
        let verdict = if per_cpu_s >= 33_000.0 {
            "met"
        } else {
            "**not met**"
        };
        writeln!(w, "Target (issue 27): 1,000,000 orders with every fault in 30 s on one core, 33,000 orders per CPU second:")?;
        writeln!(w, "{verdict} ({per_cpu_s:.0}). The run keeps every record and PaymentIntent to the end for the judge, so its")?;
        writeln!(w, "memory grows with the orders (the peak-memory table below); checking each order as it goes quiet, and")?;
        writeln!(w, "dropping it, is not built yet.")?;
        writeln!(w)?;
    }
    sim_rates(w, dir, &runs)?;
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
    Ok(())
}

/// Section 3 alone from DIR (see [`throughput_section`]).
pub fn render_throughput(dir: &Path) -> Result<String, Error> {
    let sim_profile = std::env::var("BENCH_SIM_PROFILE").unwrap_or_else(|_| "sim".into());
    let mut w = String::new();
    throughput_section(
        &mut w,
        dir,
        &sim_profile,
        (
            &read_opt(dir, "cpu.json")?,
            &read_opt(dir, "cpu-logs.json")?,
        ),
        (
            &read_opt(dir, "sim-faults.json")?.unwrap_or(Value::Null),
            &read_opt(dir, "sim-nofaults.json")?.unwrap_or(Value::Null),
        ),
    )?;
    Ok(w)
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
