//! Section 7 of BENCHMARKS.md: the reference burst at Stripe's rate limit, from the reports of
//! [`crate::burst::RUNS`] (as [`crate::burst::read_reports`] gives them).

use charge_once::config::StripeBudget;
use serde_json::Value;
use stripe_sim::{Capacity, CreateLatency};

use crate::burst::{BurstRun, Role};
use crate::grid::{self, GridPoint};
use crate::markdown::{paragraph, rows_string, thousands, Template};
use crate::records::{f, u};
use crate::template;

type Error = Box<dyn std::error::Error + Send + Sync>;

const TEMPLATE: Template = template!("7-burst.md");

/// Seconds: `4,375 s` from 1,000 up, `918.7 s` below.
fn secs(s: f64) -> String {
    if s >= 1_000.0 {
        format!("{} s", thousands(s.round() as u64))
    } else {
        format!("{s:.1} s")
    }
}

/// A part that is one sentence, without its line end.
fn sentence(part: &str, values: &[(&str, String)]) -> Result<String, Error> {
    Ok(TEMPLATE.fill(part, values)?.trim_end().to_owned())
}

/// Why a run of `orders` does not count, if it does not: broken invariants, orders unsettled,
/// checkouts refused.
fn fault(orders: u64, report: &Value) -> Option<String> {
    let load = &report["load"];
    let mut faults = Vec::new();
    if report["invariants_hold"].as_bool() != Some(true) {
        faults.push(format!(
            "invariant broken: {}",
            report["first_violation"].as_str().unwrap_or("?")
        ));
    }
    // Every order's charge, and in a mixed burst the captures and refunds asked of them.
    let asks = u(&load["mix"]["captures_accepted"]) + u(&load["mix"]["refunds_accepted"]);
    if u(&load["settled"]) != orders + asks {
        faults.push(format!(
            "{} of {} operations settled",
            u(&load["settled"]),
            orders + asks
        ));
    }
    if u(&load["checkout_errors"]) > 0 {
        faults.push(format!("{} checkout errors", u(&load["checkout_errors"])));
    }
    (!faults.is_empty()).then(|| faults.join(", "))
}

fn row(run: &BurstRun, report: &Option<Value>) -> Vec<String> {
    let label = match (run.role, report) {
        (Role::Unpaced, _) => "no pacing".to_owned(),
        (_, Some(v)) => format!(
            "paced, `ChargeMaxConcurrency` {}",
            u(&v["load"]["charge_concurrency"])
        ),
        (_, None) => "paced".to_owned(),
    };
    let mut row = vec![label, run.flags(), run.seed.to_string()];
    match report {
        None => row.push("not measured in this run".into()),
        Some(v) => {
            let l = &v["load"];
            row.extend([
                secs(f(&l["drain_secs"])),
                format!("{:.3}", f(&l["drain_ratio"])),
                secs(f(&l["latency_p99_secs"])),
                thousands(u(&l["capacity_429s"])),
                format!("{:.4}", f(&l["creates_per_charge"])),
                thousands(u(&l["waited_visibility_timeout"])),
            ]);
            if let Some(why) = fault(run.orders, v) {
                row[0] = format!("{} (**{why}**)", row[0]);
            }
        }
    }
    row.resize(9, String::new());
    row
}

fn reference_part(
    runs: &[(BurstRun, Option<Value>)],
    run: &BurstRun,
    load: &Value,
) -> Result<String, Error> {
    let rows = runs
        .iter()
        .filter(|(r, _)| !matches!(r.role, Role::BelowLimit | Role::Mixed))
        .map(|(r, v)| row(r, v));
    TEMPLATE.fill(
        "reference",
        &[
            ("orders", thousands(run.orders)),
            ("rate", run.arrival_rate.to_string()),
            ("limit", u(&load["create_limit"]).to_string()),
            ("ideal", f(&load["ideal_drain_secs"]).to_string()),
            ("table", rows_string(rows)),
        ],
    )
}

/// The links to the runs drawn with `--svg`, if any was measured.
fn drawn_part(runs: &[(BurstRun, Option<Value>)]) -> Result<String, Error> {
    let drawn: Vec<(&BurstRun, &str)> = runs
        .iter()
        .filter(|(_, v)| v.is_some())
        .filter_map(|(r, _)| Some((r, r.svg?)))
        .collect();
    let Some((first, _)) = drawn.first() else {
        return Ok(String::new());
    };
    let links: Vec<String> = drawn
        .iter()
        .map(|(r, svg)| {
            let name = if r.pacing() { "paced" } else { "no pacing" };
            format!("[{name}](docs/bench/{svg})")
        })
        .collect();
    let what = if drawn.len() == 1 { "run" } else { "two runs" };
    TEMPLATE.fill(
        "drawn",
        &[
            ("what", what.into()),
            ("seed", first.seed.to_string()),
            ("links", links.join(", ")),
        ],
    )
}

/// The mixed bursts' table; empty when none was measured.
fn mixed_part(runs: &[(BurstRun, Option<Value>)]) -> Result<String, Error> {
    let measured: Vec<(&BurstRun, &Value)> = runs
        .iter()
        .filter(|(r, _)| r.role == Role::Mixed)
        .filter_map(|(r, v)| Some((r, v.as_ref()?)))
        .collect();
    let Some((first, _)) = measured.first() else {
        return Ok(String::new());
    };
    let Some(shares) = first.mix else {
        return Ok(String::new());
    };
    let rows = measured.iter().map(|(run, v)| {
        let (l, m) = (&v["load"], &v["load"]["mix"]);
        let account = u(&m["account_limit"]);
        let mode = if account <= u64::from(Capacity::STRIPE_TEST_MODE_ACCOUNT_PER_SEC) {
            "test mode"
        } else {
            "live"
        };
        let mut label = format!("{mode}, {account}/s");
        if let Some(why) = fault(run.orders, v) {
            label = format!("{label} (**{why}**)");
        }
        vec![
            label,
            format!("{}/s", u(&l["stripe_rps"])),
            secs(f(&m["charges_done_secs"])),
            format!(
                "{:.3}",
                f(&m["charges_done_secs"]) / f(&l["ideal_drain_secs"]).max(1e-9)
            ),
            secs(f(&l["drain_secs"])),
            format!(
                "{}, {}",
                thousands(u(&m["captures_accepted"])),
                thousands(u(&m["refunds_accepted"]))
            ),
            format!(
                "{}, {}, {}, {}",
                u(&m["create_429s"]),
                u(&m["capture_429s"]),
                u(&m["refund_429s"]),
                u(&m["account_429s"])
            ),
            format!(
                "{} ({})",
                thousands(u(&m["refunds_at_stripe"])),
                u(&m["over_refunded"])
            ),
        ]
    });
    let alone = runs
        .iter()
        .find(|(r, v)| r.role == Role::Paced && r.seed == first.seed && v.is_some())
        .and_then(|(_, v)| v.as_ref())
        .map_or("(not measured in this run)".to_owned(), |v| {
            format!(
                "{}, {:.3} × N/L",
                secs(f(&v["load"]["drain_secs"])),
                f(&v["load"]["drain_ratio"])
            )
        });
    TEMPLATE.fill(
        "mixed",
        &[
            ("alone", alone),
            ("captures", format!("{:.0} %", shares.captures * 100.0)),
            ("refunds", format!("{:.0} %", shares.refunds * 100.0)),
            ("table", rows_string(rows)),
        ],
    )
}

/// The drain's floor at `point`: L over what the charge environments get of its budget.
fn floor(point: &GridPoint) -> f64 {
    let budget = StripeBudget {
        endpoint_per_second: point.budget(),
        ..StripeBudget::new(point.budget(), u64::from(point.concurrency))
    };
    f64::from(point.limit) / (budget.charge_endpoint_share() * budget.charge_concurrency as f64)
}

/// The grid's table and what it says of the goals; empty when no point was measured.
fn grid_part(points: &[(GridPoint, Option<Value>)]) -> Result<String, Error> {
    let measured: Vec<(&GridPoint, &Value)> = points
        .iter()
        .filter_map(|(p, v)| Some((p, &v.as_ref()?["load"])))
        .collect();
    if measured.is_empty() {
        return Ok(String::new());
    }
    let rows = points.iter().map(|(p, v)| {
        let mut row = vec![
            format!("{}/s", p.limit),
            format!("{} ms", p.p50_ms),
            format!(
                "{} ({})",
                p.concurrency,
                if p.at_rule { "the rule" } else { "twice" }
            ),
        ];
        match v {
            None => row.push("not measured in this run".into()),
            Some(v) => {
                let l = &v["load"];
                let ideal = f(&l["ideal_drain_secs"]).max(1e-9);
                row.extend([
                    format!("{:.3}", f(&l["drain_ratio"])),
                    format!("{:.3}", floor(p)),
                    format!("{:.3}", f(&l["latency_p99_secs"]) / ideal),
                    format!("{:.4}", f(&l["creates_per_charge"])),
                    thousands(u(&l["capacity_429s"])),
                    format!("{:.3}", f(&l["sends_per_order"])),
                    thousands(u(&l["waited_visibility_timeout"])),
                ]);
                if let Some(why) = fault(p.orders(), v) {
                    row[0] = format!("{} (**{why}**)", row[0]);
                }
            }
        }
        row.resize(10, String::new());
        row
    });
    let mut out = TEMPLATE.fill(
        "grid",
        &[
            ("seconds", grid::SECONDS_AT_LIMIT.to_string()),
            ("arrival", grid::ARRIVAL_OVER_LIMIT.to_string()),
            ("seed", grid::SEED.to_string()),
            ("table", rows_string(rows)),
        ],
    )?;
    let worst = |key: &str| {
        measured.iter().map(|(p, l)| (*p, f(&l[key]))).fold(
            None,
            |acc: Option<(&GridPoint, f64)>, (p, x)| match acc {
                Some((_, y)) if y >= x => acc,
                _ => Some((p, x)),
            },
        )
    };
    let p99 = |l: &Value| f(&l["latency_p99_secs"]) / f(&l["ideal_drain_secs"]).max(1e-9);
    let count = |pred: &dyn Fn(&Value) -> bool| measured.iter().filter(|(_, l)| pred(l)).count();
    let (drain_at, worst_drain) = worst("drain_ratio").unwrap_or((measured[0].0, 0.0));
    let worst_over_floor = measured
        .iter()
        .map(|(p, l)| f(&l["drain_ratio"]) / floor(p))
        .fold(0.0, f64::max);
    // Each limit and latency: the rule's concurrency against twice it.
    let pairs: Vec<(&GridPoint, f64, f64)> = measured
        .iter()
        .filter(|(p, _)| p.at_rule)
        .filter_map(|(p, l)| {
            let (_, twice) = measured
                .iter()
                .find(|(q, _)| !q.at_rule && q.limit == p.limit && q.p50_ms == p.p50_ms)?;
            Some((*p, f(&l["drain_ratio"]), f(&twice["drain_ratio"])))
        })
        .collect();
    let worse: Vec<String> = pairs
        .iter()
        .filter(|(_, at, twice)| *twice > at * 1.01)
        .map(|(p, at, twice)| format!("L = {}/s, {} ms: {at:.3} → {twice:.3}", p.limit, p.p50_ms))
        .collect();
    let goals = sentence(
        "grid-goals",
        &[
            ("points", measured.len().to_string()),
            ("worst_drain", format!("{worst_drain:.3}")),
            (
                "worst_drain_at",
                format!(
                    "L = {}/s, {} ms, {} environments",
                    drain_at.limit, drain_at.p50_ms, drain_at.concurrency
                ),
            ),
            (
                "drain_within",
                count(&|l| f(&l["drain_ratio"]) <= 1.10).to_string(),
            ),
            ("worst_over_floor", format!("{worst_over_floor:.3}")),
            (
                "worst_p99",
                format!(
                    "{:.3}",
                    measured.iter().map(|(_, l)| p99(l)).fold(0.0, f64::max)
                ),
            ),
            ("p99_within", count(&|l| p99(l) <= 1.15).to_string()),
            (
                "worst_creates",
                format!("{:.4}", worst("creates_per_charge").map_or(0.0, |w| w.1)),
            ),
            (
                "waited",
                thousands(
                    measured
                        .iter()
                        .map(|(_, l)| u(&l["waited_visibility_timeout"]))
                        .sum(),
                ),
            ),
            (
                "worst_sends",
                format!("{:.3}", worst("sends_per_order").map_or(0.0, |w| w.1)),
            ),
            ("worse", worse.len().to_string()),
            ("pairs", pairs.len().to_string()),
            (
                "worse_at",
                if worse.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", worse.join("; "))
                },
            ),
        ],
    )?;
    out += &paragraph(&goals);
    out.push('\n');
    Ok(out)
}

/// Below the limit, and what bounds the paced drain.
fn limits_paragraph(
    runs: &[(BurstRun, Option<Value>)],
    reference: &Value,
) -> Result<String, Error> {
    let measured = |role: Role| {
        runs.iter()
            .filter(move |(r, _)| r.role == role)
            .filter_map(|(r, v)| v.as_ref().map(|v| (r, &v["load"])))
    };
    let mut notes = Vec::new();
    if let Some((run, l)) = measured(Role::BelowLimit).next() {
        let s = |key: &str| format!("{:.2}", f(&l[key]));
        notes.push(sentence(
            "below-limit",
            &[
                ("orders", thousands(run.orders)),
                ("rate", run.arrival_rate.to_string()),
                ("p50", s("latency_p50_secs")),
                ("p99", s("latency_p99_secs")),
                ("max", s("latency_max_secs")),
                ("slowest", s("max_create_latency_secs")),
                ("capacity_429s", thousands(u(&l["capacity_429s"]))),
            ],
        )?);
    }
    // The charge environments together get what the reconciler, the events function and the
    // audit leave of the budget (`StripeBudget`, the split the functions make at init).
    let budget = StripeBudget::new(
        u(&reference["stripe_rps"]),
        u(&reference["charge_concurrency"]),
    );
    let charges = budget.charge_share() * budget.charge_concurrency as f64;
    let limit = u(&reference["create_limit"]) as f64;
    notes.push(sentence(
        "floor",
        &[
            ("limit", limit.to_string()),
            ("charges", charges.to_string()),
            ("floor", format!("{:.3}", limit / charges)),
            ("budget", budget.per_second.to_string()),
            (
                "kept",
                (budget.reconciler_share() + budget.events_share() + budget.audit_share())
                    .to_string(),
            ),
        ],
    )?);
    // The rows run with a fixed bank instead of the budget's one second of share.
    let fixed: Vec<String> = measured(Role::Variant)
        .filter_map(|(r, l)| Some((r.charge_burst?, l)))
        .map(|(b, l)| {
            format!(
                "{b} calls at {} environments met {} capacity 429s ({:.3} creates per charge, drain {:.3} × N/L)",
                u(&l["charge_concurrency"]),
                thousands(u(&l["capacity_429s"])),
                f(&l["creates_per_charge"]),
                f(&l["drain_ratio"])
            )
        })
        .collect();
    if !fixed.is_empty() {
        notes.push(sentence(
            "burst",
            &[
                ("burst", budget.charge_burst().to_string()),
                ("concurrency", budget.charge_concurrency.to_string()),
                ("fixed", fixed.join("; ")),
            ],
        )?);
    }
    Ok(paragraph(&notes.join(" ")))
}

/// Whether the runs count, and what they took.
fn runs_paragraph(runs: &[(BurstRun, Option<Value>)], date: &str) -> Result<String, Error> {
    let measured: Vec<(&BurstRun, &Value)> = runs
        .iter()
        .filter_map(|(r, v)| Some((r, v.as_ref()?)))
        .collect();
    let faulty: Vec<String> = measured
        .iter()
        .filter_map(|(r, v)| Some(format!("{}: {}", r.name, fault(r.orders, v)?)))
        .collect();
    let counted = if faulty.is_empty() {
        sentence("all-count", &[("runs", measured.len().to_string())])?
    } else {
        sentence("some-do-not-count", &[("faulty", faulty.join("; "))])?
    };
    let wall: f64 = measured.iter().map(|(_, v)| f(&v["wall_secs"])).sum();
    let unpaced_wall: f64 = measured
        .iter()
        .filter(|(r, _)| r.role == Role::Unpaced)
        .map(|(_, v)| f(&v["wall_secs"]))
        .sum();
    let took = sentence(
        "wall",
        &[
            ("wall", format!("{wall:.0}")),
            ("date", date.to_owned()),
            ("unpaced_wall", format!("{unpaced_wall:.0}")),
        ],
    )?;
    Ok(paragraph(&format!("{counted} {took}")))
}

/// The burst over the wire on the real clock, if it was measured, and the same burst without the
/// carry (what its capacity 429s come from), if that was.
fn wire_part(wire: Option<&Value>, no_carry: Option<&Value>) -> Result<String, Error> {
    let Some(v) = wire else {
        return Ok(String::new());
    };
    let l = &v["load"];
    let budget = StripeBudget {
        endpoint_per_second: u(&l["stripe_endpoint_rps"]),
        ..StripeBudget::new(u(&l["stripe_rps"]), u(&l["charge_concurrency"]))
    };
    let charges = budget.charge_endpoint_share() * budget.charge_concurrency as f64;
    let verdict = match fault(u(&l["orders"]), v) {
        None => "every order charged once, every invariant held".to_owned(),
        Some(why) => format!("**{why}**"),
    };
    let text = sentence(
        "wire",
        &[
            ("orders", thousands(u(&l["orders"]))),
            ("rate", f(&l["arrival_rate"]).to_string()),
            ("concurrency", u(&l["charge_concurrency"]).to_string()),
            (
                "capacity",
                v["stripe_capacity"].as_str().unwrap_or("?").to_owned(),
            ),
            (
                "budgets",
                format!(
                    "{}/s for the account and {}/s an endpoint",
                    budget.per_second, budget.endpoint_per_second
                ),
            ),
            ("drain", secs(f(&l["drain_secs"]))),
            ("ratio", format!("{:.3}", f(&l["drain_ratio"]))),
            ("ideal", secs(f(&l["ideal_drain_secs"]))),
            (
                "floor",
                format!("{:.3}", f(&l["create_limit"]) / charges.max(1e-9)),
            ),
            ("p99", secs(f(&l["latency_p99_secs"]))),
            ("creates", format!("{:.3}", f(&l["creates_per_charge"]))),
            ("refused", thousands(u(&l["capacity_429s"]))),
            ("verdict", verdict),
        ],
    )?;
    let text = match no_carry {
        None => text,
        Some(n) => {
            let l = &n["load"];
            let verdict = match fault(u(&l["orders"]), n) {
                None => "every invariant held".to_owned(),
                Some(why) => format!("**{why}**"),
            };
            let no_carry = sentence(
                "wire-no-carry",
                &[
                    ("drain", secs(f(&l["drain_secs"]))),
                    ("ratio", format!("{:.3}", f(&l["drain_ratio"]))),
                    ("refused", thousands(u(&l["capacity_429s"]))),
                    ("creates", format!("{:.3}", f(&l["creates_per_charge"]))),
                    ("verdict", verdict),
                ],
            )?;
            // What the carry changes: fewer 429s without it says they are the carry's.
            let cause = if u(&l["capacity_429s"]) < u(&v["load"]["capacity_429s"]) {
                "wire-carry-cause"
            } else {
                "wire-carry-not-cause"
            };
            format!("{text} {no_carry} {}", sentence(cause, &[])?)
        }
    };
    let tail = sentence("wire-moto", &[])?;
    Ok(paragraph(&format!("{text} {tail}").replace('\n', " ")) + "\n")
}

/// Section 7 from the runs' reports, the grid's and the burst over the wire. `date` is when
/// they ran.
pub fn section(
    runs: &[(BurstRun, Option<Value>)],
    grid: &[(GridPoint, Option<Value>)],
    wire: Option<&Value>,
    wire_no_carry: Option<&Value>,
    date: &str,
) -> Result<String, Error> {
    let reference = runs
        .iter()
        .find(|(r, v)| r.role == Role::Paced && v.is_some())
        .and_then(|(r, v)| Some((r, &v.as_ref()?["load"])));
    let es = charge::EVENT_SOURCE;
    // The limit the runs were given (in every report), else the one they would be.
    let limit = reference.map_or(u64::from(Capacity::STRIPE_ENDPOINT_PER_SEC), |(_, l)| {
        u(&l["create_limit"])
    });
    let mut out = TEMPLATE.fill(
        "main",
        &[
            ("limit", limit.to_string()),
            ("account", Capacity::STRIPE_ACCOUNT_PER_SEC.to_string()),
            ("p50_ms", CreateLatency::DEFAULT_P50.as_millis().to_string()),
            ("batch", es.batch_size.to_string()),
            ("visibility", thousands(es.visibility_timeout_secs)),
        ],
    )?;
    let Some((run, load)) = reference else {
        return Ok(out + TEMPLATE.part("not-measured")?);
    };
    out += &reference_part(runs, run, load)?;
    out += &drawn_part(runs)?;
    out += &grid_part(grid)?;
    out += &mixed_part(runs)?;
    out += &wire_part(wire, wire_no_carry)?;
    out += &limits_paragraph(runs, load)?;
    out.push('\n');
    out += &runs_paragraph(runs, date)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::burst::{test_report as report, RUNS};

    fn all_runs() -> Vec<(BurstRun, Option<Value>)> {
        RUNS.iter()
            .map(|r| (*r, Some(report(r, 918.7, 810.5, 1.0002))))
            .collect()
    }

    #[test]
    fn the_table_has_a_row_per_reference_run_with_its_ratio() {
        let mut runs = all_runs();
        runs[0].1 = Some(report(&RUNS[0], 4375.4, 4160.77, 1.7672));
        runs[8].1 = Some(report(&RUNS[8], 1267.5, 1155.5, 1.0));
        let w = section(&runs, &[], None, None, "today").unwrap();
        // The prose is wrapped: compare it as one line.
        let flat = w.split_whitespace().collect::<Vec<_>>().join(" ");
        let rows: Vec<&str> = w.lines().filter(|l| l.starts_with("| ")).collect();
        // The reference runs, then the two mixed bursts.
        assert_eq!(rows.len(), 1 + 10 + 1 + 2, "{w}");
        assert_eq!(
            rows[12],
            "| test mode, 25/s | 24/s | 826.8 s | 1.034 | 918.7 s | 0, 0 | 0, 0, 0, 0 | 0 (0) |"
        );
        assert!(rows[13].starts_with("| live, 100/s | 96/s |"), "{w}");
        assert_eq!(
            rows[1],
            "| no pacing | `--no-pacing --charge-concurrency 2` | 1 | 4,375 s | 5.469 | 4,161 s | 15,343 | 1.7672 | 0 |"
        );
        assert!(
            rows[3].starts_with(
                "| paced, `ChargeMaxConcurrency` 4 | — | 1 | 918.7 s | 1.148 | 810.5 s |"
            ),
            "{w}"
        );
        assert!(
            rows[5]
                .starts_with("| paced, `ChargeMaxConcurrency` 5 | `--charge-concurrency 5` | 1 |"),
            "{w}"
        );
        assert!(flat.contains("so N/L = 800 s."), "{w}");
        assert!(flat.contains("25/22 = 1.136 × N/L"), "{w}");
        assert!(
            flat.contains("the reconciler, the events function and the audit keep 2."),
            "{w}"
        );
        assert!(
            flat.contains("banks one second of its share, 5 calls at 4 environments (`StripeBudget::charge_burst`)"),
            "{w}"
        );
        assert!(
            flat.contains("a fixed bank of 20 calls at 4 environments met 15,343 capacity 429s (1.000 creates per charge, drain 1.584 × N/L); 20 calls at 20 environments met"),
            "{w}"
        );
        assert!(
            flat.contains("Below the limit (2,000 orders at 10/s): p50 0.47 s"),
            "{w}"
        );
        assert!(
            flat.contains(
                "[no pacing](docs/bench/burst-unpaced.svg), [paced](docs/bench/burst-paced.svg)"
            ),
            "{w}"
        );
        assert!(
            flat.contains("In each of the 13 runs every invariant held"),
            "{w}"
        );
        assert!(
            flat.contains("took 26 s of wall time in all on today (the unpaced ones 4 s"),
            "{w}"
        );
    }

    #[test]
    fn a_broken_or_missing_run_shows() {
        let mut runs = all_runs();
        let broken = runs[3].1.as_mut().unwrap();
        broken["invariants_hold"] = false.into();
        broken["first_violation"] = "double charge".into();
        broken["load"]["settled"] = 19_999.into();
        runs[1].1 = None;
        let w = section(&runs, &[], None, None, "today").unwrap();
        // The prose is wrapped: compare it as one line.
        let flat = w.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("| no pacing | `--no-pacing --charge-concurrency 2` | 2 | not measured in this run |"),
            "{w}"
        );
        assert!(
            flat.contains(
                "(**invariant broken: double charge, 19999 of 20000 operations settled**) | — | 2 |"
            ),
            "{w}"
        );
        assert!(
            flat.contains("**Runs that do not count**: paced-seed2: invariant broken"),
            "{w}"
        );
        let none = section(&RUNS.map(|r| (r, None)), &[], None, None, "today").unwrap();
        assert!(none.ends_with("Not measured in this run.\n"), "{none}");
    }

    /// A grid point's report with this drain and p99 (× N/L).
    fn grid_report(p: &GridPoint, drain: f64, p99: f64) -> Value {
        let ideal = p.orders() as f64 / f64::from(p.limit);
        serde_json::json!({
            "seed": grid::SEED, "invariants_hold": true, "first_violation": null,
            "load": {
                "orders": p.orders(), "settled": p.orders(), "create_limit": p.limit,
                "create_latency_p50_ms": p.p50_ms, "charge_concurrency": p.concurrency,
                "stripe_rps": p.budget(), "stripe_endpoint_rps": p.budget(),
                "drain_ratio": drain, "ideal_drain_secs": ideal,
                "latency_p99_secs": p99 * ideal, "creates_per_charge": 1.004,
                "capacity_429s": 3, "sends_per_order": 1.0, "waited_visibility_timeout": 0,
            }
        })
    }

    #[test]
    fn the_grid_has_a_row_per_point_and_says_where_more_concurrency_drained_slower() {
        let grid: Vec<(GridPoint, Option<Value>)> = grid::points()
            .into_iter()
            .map(|p| {
                // Twice the rule's concurrency drains slower at L = 50/s, 300 ms only.
                let drain = if !p.at_rule && p.limit == 50 && p.p50_ms == 300 {
                    1.5
                } else {
                    1.08 + f64::from(p.limit) / 10_000.0
                };
                let v = grid_report(&p, drain, drain * 0.9);
                (p, Some(v))
            })
            .collect();
        let w = section(&all_runs(), &grid, None, None, "today").unwrap();
        let flat = w.split_whitespace().collect::<Vec<_>>().join(" ");
        let rows: Vec<&str> = w.lines().filter(|l| l.starts_with("| 10/s")).collect();
        assert_eq!(rows.len(), 6, "{w}");
        assert!(
            rows[0].starts_with(
                "| 10/s | 150 ms | 2 (the rule) | 1.081 | 1.250 | 0.973 | 1.0040 | 3 | 1.000 | 0 |"
            ),
            "{w}"
        );
        assert!(flat.contains("Over the 24 points: drain at most 1.500 × N/L (L = 50/s, 300 ms, 12 environments; 23 of 24 within 1.10)"), "{w}");
        assert!(
            flat.contains("slower than the rule's (by more than 1 %) at 1 of 12 points (L = 50/s, 300 ms: 1.085 → 1.500)"),
            "{w}"
        );
        // Its twin: without that point, no pair is worse.
        let fair: Vec<(GridPoint, Option<Value>)> = grid
            .iter()
            .map(|(p, _)| (*p, Some(grid_report(p, 1.1, 1.0))))
            .collect();
        let w = section(&all_runs(), &fair, None, None, "today").unwrap();
        let flat = w.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains("at 0 of 12 points."), "{w}");
        // None measured: no grid part at all.
        let none: Vec<(GridPoint, Option<Value>)> =
            grid::points().into_iter().map(|p| (p, None)).collect();
        assert!(!section(&all_runs(), &none, None, None, "today")
            .unwrap()
            .contains("The grid"));
    }

    #[test]
    fn the_burst_over_the_wire_shows_its_drain_against_its_floor() {
        let wire = serde_json::json!({
            "invariants_hold": true, "stripe_capacity": "create 10/s on real time",
            "load": {
                "orders": 2000, "settled": 2000, "arrival_rate": 40.0, "charge_concurrency": 4,
                "create_limit": 10, "stripe_rps": 96, "stripe_endpoint_rps": 9,
                "drain_secs": 226.0, "ideal_drain_secs": 200.0, "drain_ratio": 1.13,
                "latency_p99_secs": 180.0, "creates_per_charge": 1.0, "capacity_429s": 2,
            }
        });
        let w = section(&all_runs(), &[], Some(&wire), None, "today").unwrap();
        let flat = w.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(
                "drained in 226.0 s, 1.130 × N/L (N/L = 200.0 s; the budget's floor 1.111 × N/L)"
            ),
            "{w}"
        );
        assert!(
            flat.contains("every order charged once, every invariant held"),
            "{w}"
        );
        // Its twin: a run that broke an invariant says so.
        let mut broken = wire.clone();
        broken["invariants_hold"] = false.into();
        broken["first_violation"] = "1 double charges".into();
        let w = section(&all_runs(), &[], Some(&broken), None, "today").unwrap();
        assert!(w.contains("**invariant broken: 1 double charges**"), "{w}");
        // Not measured: no paragraph.
        let w = section(&all_runs(), &[], None, None, "today").unwrap();
        assert!(!w.contains("Over the wire"), "{w}");
        // The same burst without the carry: fewer 429s name the carry as their source; as many
        // (its twin) say it is not.
        let mut no_carry = wire.clone();
        no_carry["load"]["capacity_429s"] = 0.into();
        no_carry["load"]["drain_secs"] = 228.0.into();
        let w = section(&all_runs(), &[], Some(&wire), Some(&no_carry), "today").unwrap();
        let flat = w.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("no carry (`--charge-burst 1`) drained in 228.0 s"),
            "{w}"
        );
        assert!(flat.contains("come from the carry"), "{w}");
        no_carry["load"]["capacity_429s"] = 2.into();
        let w = section(&all_runs(), &[], Some(&wire), Some(&no_carry), "today").unwrap();
        assert!(w.contains("the carry is not what"), "{w}");
        assert!(!w.contains("come from the carry"), "{w}");
    }
}
