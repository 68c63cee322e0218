//! Section 5 of BENCHMARKS.md: the bill of one charge per 1M charges ([`crate::cost`]'s model)
//! from `bill.json`, with the logs under lambda_runtime's subscriber from
//! `bill-lambda-subscriber.json` when there, section 3's CPU and section 4's init.

use std::path::Path;

use serde_json::Value;

use crate::bill::{BillRecord, BillRun, Phase, Source};
use crate::cost::{
    batchings, billed_ms, ceiling_rate, gb_s, inputs, items, ops, relay_batch, run_of, totals,
    types, Batching, Inputs, Item, Totals, AWS_CALL_MS, COLD_START_SHARE, FUNCTIONS,
    LAMBDA_ARM_GB_S, LOGS_PER_GB, MEMORY_COMPARED_MB, STRIPE_CALL_MS,
};
use crate::markdown::{rows_string, Template};
use crate::records::read_opt;
use crate::template;

type Error = Box<dyn std::error::Error + Send + Sync>;

const TEMPLATE: Template = template!("5-cost.md");

fn money(x: f64) -> String {
    // `+ 0.0`: no "-0.00" for a sum of nothing.
    format!("${:.2}", x + 0.0)
}

/// One `bench bill` record priced with its inputs, at one message per batch (`low`) and at full
/// batches (`full`).
struct Bill<'a> {
    record: &'a BillRecord,
    inputs: Inputs,
    low: Batching,
    full: Batching,
}

impl Bill<'_> {
    /// The template's `MemorySize` of `function`.
    fn memory(&self, function: &str) -> f64 {
        self.inputs.template.memory(function)
    }

    /// The bill of source `s` at batching `b`, each function at `memory` MB.
    fn items_with(
        &self,
        s: Source,
        b: &Batching,
        memory: &dyn Fn(&str) -> f64,
    ) -> Result<Vec<Item>, Error> {
        Ok(items(run_of(self.record, s)?, &self.inputs, b, memory))
    }

    /// The bill of source `s` at batching `b` as the template sizes the functions.
    fn items(&self, s: Source, b: &Batching) -> Result<Vec<Item>, Error> {
        self.items_with(s, b, &|f| self.memory(f))
    }

    fn totals(&self, s: Source, b: &Batching) -> Result<Totals, Error> {
        Ok(totals(&self.items(s, b)?))
    }

    /// The totals with every function at 256 MB.
    fn totals_at_256(&self, s: Source, b: &Batching) -> Result<Totals, Error> {
        Ok(totals(&self.items_with(s, b, &|_| MEMORY_COMPARED_MB)?))
    }
}

/// The requests of one charge, by configuration and function.
fn counts_table(record: &BillRecord) -> Result<String, Error> {
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
    let mut rows = Vec::new();
    for s in Source::ALL {
        let r = run_of(record, s)?;
        rows.push(vec![
            s.label().to_owned(),
            phase(&r.checkout),
            phase(&r.charge),
            r.events_in.as_ref().map_or("—".into(), |e| {
                format!(
                    "{} delivery ({}); {}",
                    e.deliveries.len(),
                    types(e),
                    phase(&e.phase)
                )
            }),
            format!(
                "{} stream records, {} through the filter; {}",
                r.relay.stream_records,
                r.relay.filtered_in,
                phase(&r.relay.phase)
            ),
        ]);
    }
    Ok(rows_string(rows))
}

/// The totals of each configuration at each batching.
fn summary_table(bill: &Bill) -> Result<String, Error> {
    let mut rows = Vec::new();
    for s in Source::ALL {
        for b in [&bill.low, &bill.full] {
            let t = bill.totals(s, b)?;
            rows.push(vec![
                s.label().to_owned(),
                format!("{} ({:.0} / {:.0})", b.label, b.charge, b.relay),
                money(t.charge_path),
                money(t.relay),
                money(t.events_in),
                money(t.logs),
                money(t.audit),
                money(t.core),
                format!("**{}**", money(t.all_in)),
            ]);
        }
    }
    Ok(rows_string(rows))
}

/// Every line of the bill, at one message per batch and at full batches.
fn detail_table(bill: &Bill) -> Result<String, Error> {
    let mut detail: Vec<(Item, Item)> = Vec::new();
    for s in Source::ALL {
        let lo = bill.items(s, &bill.low)?;
        let hi = bill.items(s, &bill.full)?;
        for (a, b) in lo.into_iter().zip(hi) {
            if (s == Source::None) == (a.applies == "all") {
                detail.push((a, b));
            }
        }
    }
    let order = ["charge path", "relay", "events in", "logs", "other"];
    detail.sort_by_key(|(a, _)| order.iter().position(|g| *g == a.group).unwrap_or(9));
    let qty = |q: f64| {
        if q != 0.0 && q.abs() < 0.001 {
            format!("{q:.3e}")
        } else {
            format!("{q:.4}")
        }
    };
    let rows = detail.iter().map(|(a, b)| {
        vec![
            if a.item == b.item {
                a.item.clone()
            } else {
                format!("{} / full: {}", a.item, b.item)
            },
            a.applies.to_owned(),
            format!("{} {}", qty(a.qty), a.unit),
            format!("{} {}", qty(b.qty), b.unit),
            format!("${:.10}/{}", a.price, a.unit),
            format!("${:.3}", a.cost_per_million()),
            format!("${:.3}", b.cost_per_million()),
        ]
    });
    Ok(rows_string(rows))
}

/// The phases whose log lines section 5 compares: checkout, charge, notify, the events function
/// by EventBridge and by the signed route.
fn log_phases(r: &BillRecord) -> Result<Vec<Phase>, Error> {
    let events = |x: &BillRun| {
        x.events_in
            .as_ref()
            .map(|x| x.phase.clone())
            .unwrap_or_default()
    };
    let n = run_of(r, Source::None)?;
    Ok(vec![
        n.checkout.clone(),
        n.charge.clone(),
        n.relay.phase.clone(),
        events(run_of(r, Source::EventBridge)?),
        events(run_of(r, Source::Webhook)?),
    ])
}

/// Our log lines under lambda_runtime's subscriber and under ours, and what it saves per 1M.
fn logs_part(bill: &Bill, lambda_subscriber: &BillRecord) -> Result<String, Error> {
    const NAMES: [&str; 5] = [
        "checkout",
        "charge",
        "notify",
        "webhook (EventBridge)",
        "webhook (signed route)",
    ];
    let ours = log_phases(bill.record)?;
    let theirs = log_phases(lambda_subscriber)?;
    let mut saved = [0.0f64; 5];
    let mut rows = Vec::new();
    for (i, name) in NAMES.iter().enumerate() {
        let (before, after) = (theirs[i].log_bytes(), ours[i].log_bytes());
        saved[i] = before as f64 - after as f64;
        rows.push(vec![
            name.to_string(),
            format!("{} → {}", theirs[i].lines.len(), ours[i].lines.len()),
            before.to_string(),
            after.to_string(),
            format!(
                "{} B ({:.0} %)",
                before as i64 - after as i64,
                (1.0 - after as f64 / before.max(1) as f64) * 100.0
            ),
        ]);
    }
    let per_million = |bytes: f64| bytes / 1073741824.0 * LOGS_PER_GB * 1e6;
    let mut lines = String::new();
    for (s, extra) in [
        (Source::None, 0.0),
        (Source::EventBridge, saved[3]),
        (Source::Webhook, saved[4]),
    ] {
        let lo = bill.totals(s, &bill.low)?.logs;
        let hi = bill.totals(s, &bill.full)?.logs;
        let more = per_million(saved[0] + saved[1] + extra);
        lines += &TEMPLATE.fill(
            "logs-per-million",
            &[
                ("source", s.label().to_owned()),
                ("low_before", money(lo + more)),
                ("low", money(lo)),
                ("full_before", money(hi + more)),
                ("full", money(hi)),
            ],
        )?;
    }
    TEMPLATE.fill(
        "logs",
        &[("table", rows_string(rows)), ("per_million", lines)],
    )
}

/// Each function's CPU per invocation, its waits and what it is billed per charge, and how many
/// charges an invocation carries, at full batches.
fn memory_rows(bill: &Bill) -> Result<[(&'static str, f64, f64, f64); 4], Error> {
    let (inputs, full) = (&bill.inputs, &bill.full);
    let none = run_of(bill.record, Source::None)?;
    let hook = run_of(bill.record, Source::EventBridge)?;
    let relay_calls = (full.relay / charge_once::ports::MAX_BATCH as f64).ceil();
    Ok([
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
            inputs.cpu("notify") * relay_calls,
            relay_calls * AWS_CALL_MS,
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
    ])
}

/// What each function's memory size costs and saves.
fn memory_part(bill: &Bill) -> Result<String, Error> {
    let mut slower = Vec::new();
    let mut rows = Vec::new();
    for (f, cpu, io, per) in memory_rows(bill)? {
        let name = if per > 1.0 {
            format!("{f} (batch of {per:.0})")
        } else {
            f.to_owned()
        };
        slower.push(format!(
            "{name} {:.0} → {:.0} ms",
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
        rows.push(vec![
            name,
            format!("{cpu:.0}"),
            format!("{io:.0}"),
            cell(128.0),
            cell(256.0),
            cell(512.0),
            format!("{:.0} MB", bill.memory(f)),
        ]);
    }
    let (low, full) = (&bill.low, &bill.full);
    let path = |t: Totals| money(t.charge_path);
    TEMPLATE.fill(
        "memory",
        &[
            ("table", rows_string(rows)),
            ("slower", slower.join(", ")),
            ("low_256", path(bill.totals_at_256(Source::None, low)?)),
            ("low_now", path(bill.totals(Source::None, low)?)),
            ("full_256", path(bill.totals_at_256(Source::None, full)?)),
            ("full_now", path(bill.totals(Source::None, full)?)),
            (
                "events_256",
                money(bill.totals_at_256(Source::EventBridge, full)?.core),
            ),
            (
                "events_now",
                money(bill.totals(Source::EventBridge, full)?.core),
            ),
        ],
    )
}

/// What the relay's batching window costs and delays.
fn relay_part(bill: &Bill) -> Result<String, Error> {
    let facts = &bill.inputs.template;
    let mut rows = Vec::new();
    for window in [facts.relay_window_secs, 5.0, 10.0] {
        let k = relay_batch(facts, window);
        let b = Batching {
            label: "",
            charge: bill.full.charge,
            relay: k,
        };
        let t = bill.totals(Source::None, &b)?;
        let template = if window == facts.relay_window_secs {
            " (template)"
        } else {
            ""
        };
        rows.push(vec![
            format!("{window:.0} s{template}"),
            format!("{k:.0}"),
            format!("{} (${:.3})", money(t.relay), t.relay),
            format!("{window:.0} s"),
        ]);
    }
    TEMPLATE.fill(
        "relay",
        &[
            ("max_batch", charge_once::ports::MAX_BATCH.to_string()),
            ("ceiling", format!("{:.0}", ceiling_rate())),
            ("table", rows_string(rows)),
        ],
    )
}

/// The charge path against $4.00 per 1M, and what its floor is made of.
fn target_part(bill: &Bill) -> Result<String, Error> {
    let (low, full) = (&bill.low, &bill.full);
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
    let items_full = bill.items(Source::None, full)?;
    let sum = |pred: &dyn Fn(&Item) -> bool| {
        items_full
            .iter()
            .filter(|i| i.group == "charge path" && pred(i))
            .map(Item::cost_per_million)
            .sum::<f64>()
    };
    let ddb = sum(&|i| i.item.starts_with("DynamoDB"));
    let sqs = sum(&|i| i.item.starts_with("SQS"));
    let req = sum(&|i| i.unit == "request" && i.item.starts_with("Lambda"));
    let lower = Inputs {
        cpu_us: FUNCTIONS
            .iter()
            .map(|f| (*f, bill.inputs.cpu_lower_bound))
            .collect(),
        ..bill.inputs.clone()
    };
    let none = run_of(bill.record, Source::None)?;
    let lower_items = items(none, &lower, full, &|f| bill.memory(f));
    let all = |b: &Batching| -> Result<String, Error> {
        let each: Result<Vec<String>, Error> = Source::ALL
            .iter()
            .map(|s| {
                Ok(format!(
                    "{} {}",
                    s.label(),
                    money(bill.totals(*s, b)?.all_in)
                ))
            })
            .collect();
        Ok(each?.join(", "))
    };
    let t_full = bill.totals(Source::None, full)?;
    TEMPLATE.fill(
        "target",
        &[
            ("charge_path", verdict(t_full.charge_path)),
            ("core", verdict(t_full.core)),
            (
                "low_charge_path",
                money(bill.totals(Source::None, low)?.charge_path),
            ),
            ("ddb", money(ddb)),
            ("sqs", money(sqs)),
            ("requests", money(req)),
            ("floor", money(ddb + sqs + req)),
            ("gbs", money(sum(&|i| i.unit == "GB-s"))),
            ("lower_cpu", format!("{:.1}", bill.inputs.cpu_lower_bound)),
            ("lower", money(totals(&lower_items).charge_path)),
            ("all_low", all(low)?),
            ("all_full", all(full)?),
        ],
    )
}

/// The section's opening: what was counted, the prices and assumptions, the totals and every line.
fn main_part(bill: &Bill) -> Result<String, Error> {
    let facts = &bill.inputs.template;
    let none = run_of(bill.record, Source::None)?;
    TEMPLATE.fill(
        "main",
        &[
            ("counts", counts_table(bill.record)?),
            ("stream_records", none.relay.stream_records.to_string()),
            ("filtered_in", none.relay.filtered_in.to_string()),
            ("aws_call_ms", AWS_CALL_MS.to_string()),
            ("stripe_call_ms", STRIPE_CALL_MS.to_string()),
            (
                "cold_start_percent",
                format!("{:.0}", COLD_START_SHARE * 100.0),
            ),
            ("cpu_source", bill.inputs.cpu_source.clone()),
            ("charge_batch", format!("{:.0}", facts.charge_batch)),
            ("ceiling", format!("{:.0}", ceiling_rate())),
            (
                "budget",
                charge_once::config::StripeBudget::DEFAULT_PER_SECOND.to_string(),
            ),
            ("window", format!("{:.0}", facts.relay_window_secs)),
            ("relay_full", format!("{:.0}", bill.full.relay)),
            ("relay_batch", format!("{:.0}", facts.relay_batch)),
            ("summary", summary_table(bill)?),
            ("detail", detail_table(bill)?),
        ],
    )
}

/// The bill of `dir`'s run handed to `body`, or `None` when the run wrote no bill.json.
fn with_bill<T>(
    dir: &Path,
    footprints: &[Value],
    body: impl FnOnce(&Bill) -> Result<T, Error>,
) -> Result<Option<T>, Error> {
    let Some(record) = read_opt::<BillRecord>(dir, "bill.json")? else {
        return Ok(None);
    };
    let template =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../template.yaml"))?;
    let inputs = inputs(dir, &record, &template, footprints)?;
    let [low, full] = batchings(&inputs.template);
    let bill = Bill {
        record: &record,
        inputs,
        low,
        full,
    };
    body(&bill).map(Some)
}

/// The charge path's Lambda + DynamoDB + SQS per 1M charges at full batches (the $4.00 target).
pub fn charge_path_full(dir: &Path, footprints: &[Value]) -> Result<Option<f64>, Error> {
    with_bill(dir, footprints, |bill| {
        Ok(bill.totals(Source::None, &bill.full)?.charge_path)
    })
}

/// Section 5 from `DIR/bill.json` (and `bill-lambda-subscriber.json` when there), section 3's
/// CPU (`cpu-logs.json`) and the init of `footprints`' release build.
pub fn section(dir: &Path, footprints: &[Value]) -> Result<String, Error> {
    let lambda_subscriber = read_opt::<BillRecord>(dir, "bill-lambda-subscriber.json")?;
    let out = with_bill(dir, footprints, |bill| {
        let mut out = main_part(bill)?;
        if let Some(lambda_subscriber) = &lambda_subscriber {
            out += &logs_part(bill, lambda_subscriber)?;
        }
        out += &memory_part(bill)?;
        out += &relay_part(bill)?;
        out += &target_part(bill)?;
        Ok(out)
    })?;
    match out {
        Some(out) => Ok(out),
        None => TEMPLATE.fill("missing", &[]),
    }
}
