//! Section 3 of BENCHMARKS.md (core throughput) from the `sim-*.json` reports `simulate --json`
//! writes (their keys read as they are) and `cpu*.json`.

use std::path::Path;

use serde_json::Value;

use crate::markdown::{rows_string, Template};
use crate::records::{f, read_all, read_opt, u, CpuRecord};
use crate::template;

type Error = Box<dyn std::error::Error + Send + Sync>;

const TEMPLATE: Template = template!("3-throughput.md");

/// What section 3 reads from the output directory.
pub struct Throughput {
    pub sim_profile: String,
    pub cpu: Option<CpuRecord>,
    pub cpu_logs: Option<CpuRecord>,
    pub faults: Value,
    pub clean: Value,
    pub wire: Option<Value>,
    /// `sim-scale-*.json`, by orders.
    pub scale: Vec<Value>,
    pub eventbridge: Value,
    pub webhooks: Value,
    pub no_webhooks: Value,
}

impl Throughput {
    /// Section 3's reports from `dir`; a step left out of the run reads as null.
    pub fn read(dir: &Path, sim_profile: &str) -> Result<Self, Error> {
        let value = |name: &str| Ok::<_, Error>(read_opt(dir, name)?.unwrap_or(Value::Null));
        let mut scale = read_all(dir, "sim-scale-")?;
        scale.sort_by_key(|s| u(&s["orders"]));
        Ok(Self {
            sim_profile: sim_profile.to_owned(),
            cpu: read_opt(dir, "cpu.json")?,
            cpu_logs: read_opt(dir, "cpu-logs.json")?,
            faults: value("sim-faults.json")?,
            clean: value("sim-nofaults.json")?,
            wire: read_opt(dir, "sim-wire.json").ok().flatten(),
            scale,
            eventbridge: value("sim-eventbridge.json")?,
            webhooks: value("sim-webhooks.json")?,
            no_webhooks: value("sim-no-webhooks.json")?,
        })
    }

    fn runs(&self) -> Vec<(&'static str, &Value)> {
        let mut runs = vec![
            ("default faults, in memory", &self.faults),
            ("--no-faults, in memory", &self.clean),
        ];
        if let Some(wire) = &self.wire {
            runs.push(("default faults, moto + stripe-sim over HTTP", wire));
        }
        runs
    }
}

fn invariants(s: &Value, broken: impl Fn(&Value) -> String) -> String {
    if s["invariants_hold"].as_bool() == Some(true) {
        "hold".to_owned()
    } else {
        broken(s)
    }
}

/// `cells` for a measured run, else the run's name and "not measured in this run".
fn row_or_not(name: &str, s: &Value, width: usize, cells: impl Fn() -> Vec<String>) -> Vec<String> {
    let mut row = vec![name.to_owned()];
    if s.is_null() {
        row.push("not measured in this run".into());
        row.resize(width, String::new());
    } else {
        row.extend(cells());
    }
    row
}

fn runs_table(runs: &[(&str, &Value)]) -> String {
    rows_string(runs.iter().map(|(name, s)| {
        row_or_not(name, s, 9, || {
            let cpu = f(&s["cpu_secs"]);
            vec![
                u(&s["orders"]).to_string(),
                format!("{:.0}", f(&s["orders_per_sec"])),
                format!("{:.1}", f(&s["wall_secs"])),
                format!("{cpu:.1}"),
                format!("{:.0}", u(&s["orders"]) as f64 / cpu.max(1e-9)),
                format!("{:.1}", f(&s["virtual_hours"])),
                invariants(s, |s| {
                    format!("BROKEN: {}", s["first_violation"].as_str().unwrap_or("?"))
                }),
                format!("`{}`", s["trace_hash"].as_str().unwrap_or("-")),
            ]
        })
    }))
}

fn rates_table(runs: &[(&str, &Value)]) -> String {
    rows_string(runs.iter().map(|(name, s)| {
        let measured = if s.get("sim_secs_per_wall_sec").is_none() {
            &Value::Null
        } else {
            *s
        };
        row_or_not(name, measured, 8, || {
            let rss = f(&s["peak_rss_mb"]);
            vec![
                format!("{:.0}", f(&s["sim_secs_per_wall_sec"])),
                format!("{:.0}", f(&s["messages_per_wall_sec"])),
                format!("{:.0}", f(&s["store_calls_per_wall_sec"])),
                format!("{:.0}", f(&s["stripe_calls_per_wall_sec"])),
                format!("{:.0}", f(&s["decisions_per_wall_sec"])),
                format!("{rss:.0}"),
                format!("{:.2}", rss * 1024.0 / (u(&s["orders"]).max(1) as f64)),
            ]
        })
    }))
}

fn scale_table(scale: &[Value]) -> String {
    rows_string(scale.iter().map(|s| {
        let rss = f(&s["peak_rss_mb"]);
        let cpu = f(&s["cpu_secs"]);
        vec![
            u(&s["orders"]).to_string(),
            format!("{rss:.0}"),
            format!("{:.2}", rss * 1024.0 / (u(&s["orders"]).max(1) as f64)),
            format!("{cpu:.1}"),
            format!("{:.0}", u(&s["orders"]) as f64 / cpu.max(1e-9)),
            invariants(s, |_| "BROKEN".to_owned()),
            format!("`{}`", s["trace_hash"].as_str().unwrap_or("-")),
        ]
    }))
}

/// The target paragraph, on the faulted run's CPU seconds (the run is one thread).
fn target(faults: &Value) -> Result<String, Error> {
    let per_cpu_s = u(&faults["orders"]) as f64 / f(&faults["cpu_secs"]).max(1e-9);
    let verdict = if per_cpu_s >= 33_000.0 {
        "met"
    } else {
        "**not met**"
    };
    TEMPLATE.fill(
        "target",
        &[
            ("verdict", verdict.into()),
            ("per_cpu_s", format!("{per_cpu_s:.0}")),
        ],
    )
}

fn settle_table(rows: &[(&str, &Value)]) -> String {
    rows_string(rows.iter().map(|(name, s)| {
        row_or_not(name, s, 11, || {
            let (t, fin) = (&s["time_to_settle"], &s["time_to_settle_final_at_stripe"]);
            vec![
                u(&t["went_unknown"]).to_string(),
                u(&t["settled"]).to_string(),
                format!("{:.0}", f(&t["median_secs"])),
                format!("{:.0}", f(&t["p99_secs"])),
                format!("{:.0}", f(&fin["median_secs"])),
                format!("{:.0}", f(&fin["p99_secs"])),
                format!("{:.3}", f(&s["requests_per_charge"]["stripe_creates"])),
                u(&s["forged_settles"]).to_string(),
                invariants(s, |_| "BROKEN".to_owned()),
                format!("`{}`", s["trace_hash"].as_str().unwrap_or("-")),
            ]
        })
    }))
}

/// The line on what one delivery of `name` (`EventBridge` or `webhook`) cost in run `s`.
fn delivery(name: &str, s: &Value) -> Result<String, Error> {
    let c = &s["webhook_counts"];
    let n = |v: &Value| u(v).to_string();
    let retries = if name == "webhook" {
        TEMPLATE.fill(
            "retries-webhook",
            &[
                ("retried", n(&c["retried"])),
                ("http_409", n(&c["http_409"])),
                ("http_500", n(&c["http_500"])),
            ],
        )?
    } else {
        TEMPLATE.fill(
            "retries-eventbridge",
            &[
                ("failed", n(&c["invocations_failed"])),
                ("retries", n(&c["lambda_retries"])),
                ("dead_lettered", n(&s["events_dead_lettered"])),
            ],
        )?
    };
    let deliveries = u(&c["deliveries"]).max(1) as f64;
    TEMPLATE.fill(
        "delivery",
        &[
            ("name", name.to_owned()),
            (
                "reads",
                format!("{:.2}", f(&c["dynamodb_reads"]) / deliveries),
            ),
            (
                "writes",
                format!("{:.2}", f(&c["dynamodb_writes"]) / deliveries),
            ),
            (
                "retrieves",
                format!("{:.3}", f(&c["stripe_retrieves"]) / deliveries),
            ),
            ("creates", n(&c["stripe_creates"])),
            ("events", n(&c["events"])),
            ("deliveries", n(&c["deliveries"])),
            ("retries", retries.trim_end().to_owned()),
            ("duplicated", n(&c["fault_duplicate"])),
            ("out_of_order", n(&c["fault_out_of_order"])),
            ("delayed", n(&c["fault_delayed"])),
            ("dropped", n(&c["fault_dropped"])),
            ("forged", n(&c["forged_events"])),
            ("mismatches", n(&s["event_mismatches"])),
            ("forged_settles", n(&s["forged_settles"])),
        ],
    )
}

/// The time to settle of `unknown` operations with Stripe's events by EventBridge (the
/// default), by signed webhook, and with neither (`--events none`).
fn time_to_settle(t: &Throughput) -> Result<String, Error> {
    let mut out = TEMPLATE.fill("settle", &[])?;
    let rows = [
        ("EventBridge events (default)", &t.eventbridge),
        ("webhooks (`--events webhook`)", &t.webhooks),
        ("neither (`--events none`)", &t.no_webhooks),
    ];
    if rows.iter().all(|(_, s)| s.is_null()) {
        return Ok(out + TEMPLATE.part("not-measured")?);
    }
    out += &TEMPLATE.fill("settle-table", &[("rows", settle_table(&rows))])?;
    for (name, s) in [("EventBridge", &t.eventbridge), ("webhook", &t.webhooks)] {
        if !s.is_null() {
            out += &delivery(name, s)?;
        }
    }
    Ok(out)
}

fn cpu_table(t: &Throughput) -> String {
    rows_string(
        [
            ("no subscriber", &t.cpu),
            ("the functions' subscriber → sink", &t.cpu_logs),
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
    )
}

/// Section 3.
pub fn section(t: &Throughput) -> Result<String, Error> {
    let runs = t.runs();
    let mut out = TEMPLATE.fill(
        "main",
        &[
            ("sim_profile", t.sim_profile.clone()),
            ("runs", runs_table(&runs)),
        ],
    )?;
    if !t.faults.is_null() {
        out += &target(&t.faults)?;
    }
    out += &TEMPLATE.fill("rates", &[("rates", rates_table(&runs))])?;
    if !t.scale.is_empty() {
        out += &TEMPLATE.fill("scale", &[("scale", scale_table(&t.scale))])?;
    }
    out += &time_to_settle(t)?;
    out += &TEMPLATE.fill("cpu", &[("cpu", cpu_table(t))])?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn throughput(eventbridge: Value, webhooks: Value, no_webhooks: Value) -> Throughput {
        Throughput {
            sim_profile: "sim".into(),
            cpu: None,
            cpu_logs: None,
            faults: Value::Null,
            clean: Value::Null,
            wire: None,
            scale: Vec::new(),
            eventbridge,
            webhooks,
            no_webhooks,
        }
    }

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
        let w = time_to_settle(&throughput(
            run(
                60.0,
                serde_json::json!({"deliveries": 10, "lambda_retries": 2}),
            ),
            run(94.0, serde_json::json!({"deliveries": 10, "http_409": 4})),
            run(800.0, serde_json::json!({})),
        ))
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
        let partial =
            time_to_settle(&throughput(Value::Null, run(1.0, Value::Null), Value::Null)).unwrap();
        assert!(partial.contains("| neither (`--events none`) | not measured in this run"));
        let none = time_to_settle(&throughput(Value::Null, Value::Null, Value::Null)).unwrap();
        assert!(none.ends_with("Not measured in this run.\n\n"), "{none}");
    }
}
