//! Section 7 of `BENCHMARKS.md`: the reference burst at Stripe's rate limit, before and after
//! pacing, from the simulator's load model (`simulate --arrival-rate`, issue 25).
//!
//! [`RUNS`] is the one list of runs: `bench burst` runs each through the `simulate` binary and
//! keeps its `--json` report as `burst-<name>.json`; [`section`] renders them; [`splice`] puts the
//! section into an existing `BENCHMARKS.md` in place of the old one (`BENCH_ONLY=burst`). Every
//! figure of the section is read from those reports or computed from them, except the model's
//! settings the reports do not carry (the create latency, which the run passes explicitly; the
//! budget burst of a row, which is the row's flag; batch size, visibility timeout and the account
//! limit, read from the constants the simulator is built from).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use charge_once::config::StripeBudget;
use serde_json::Value;
use stripe_sim::{Capacity, CreateLatency};

use crate::report::{read_opt, table, thousands};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The heading of section 7, the line [`splice`] looks for.
pub const HEADING: &str = "## 7. A burst at Stripe's rate limit (`simulate --arrival-rate`)";

/// What a row stands for in the section's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The reference burst without pacing (the stall issue 25 removed).
    Unpaced,
    /// The reference burst as the functions ship: paced, default concurrency and burst.
    Paced,
    /// The reference burst paced, with another `--charge-concurrency` or `--charge-burst`.
    Variant,
    /// Well below Stripe's limit: latency, not drain.
    BelowLimit,
}

/// One `simulate --arrival-rate` run of the section.
#[derive(Debug, Clone, Copy)]
pub struct BurstRun {
    /// `burst-<name>.json` in the bench output directory.
    pub name: &'static str,
    pub role: Role,
    pub orders: u64,
    pub arrival_rate: f64,
    pub seed: u64,
    /// `--charge-concurrency`; `None`: the template's default (`charge::EVENT_SOURCE`).
    pub charge_concurrency: Option<u32>,
    /// `--charge-burst`; `None`: the charge function's `charge::BURST`. Not in the report.
    pub charge_burst: Option<u32>,
    /// `--svg`, a file name in the SVG directory (`docs/bench`).
    pub svg: Option<&'static str>,
}

const fn reference(name: &'static str, role: Role, seed: u64) -> BurstRun {
    BurstRun {
        name,
        role,
        orders: 20_000,
        arrival_rate: 200.0,
        seed,
        charge_concurrency: None,
        charge_burst: None,
        svg: None,
    }
}

/// The section's runs, in the table's order: the reference burst (20,000 orders at 200/s, 8 ×
/// the create limit) without and with pacing on two seeds, with more charge environments and
/// smaller budget bursts; then 2,000 orders at 10/s. The two unpaced runs are most of the time
/// (about 60 and 100 s in a release build, less in the `sim` build `make bench` uses): they wait
/// out 1,800 s visibility timeouts with thousands of messages queued.
pub const RUNS: [BurstRun; 11] = [
    BurstRun {
        svg: Some("burst-unpaced.svg"),
        ..reference("unpaced-seed1", Role::Unpaced, 1)
    },
    reference("unpaced-seed2", Role::Unpaced, 2),
    BurstRun {
        svg: Some("burst-paced.svg"),
        ..reference("paced-seed1", Role::Paced, 1)
    },
    reference("paced-seed2", Role::Paced, 2),
    BurstRun {
        charge_concurrency: Some(5),
        ..reference("concurrency5-seed1", Role::Variant, 1)
    },
    BurstRun {
        charge_concurrency: Some(5),
        ..reference("concurrency5-seed2", Role::Variant, 2)
    },
    BurstRun {
        charge_concurrency: Some(20),
        ..reference("concurrency20-seed1", Role::Variant, 1)
    },
    BurstRun {
        charge_concurrency: Some(20),
        ..reference("concurrency20-seed2", Role::Variant, 2)
    },
    BurstRun {
        charge_burst: Some(2),
        ..reference("burst2-seed1", Role::Variant, 1)
    },
    BurstRun {
        charge_burst: Some(10),
        ..reference("burst10-seed1", Role::Variant, 1)
    },
    BurstRun {
        name: "below-limit-seed1",
        role: Role::BelowLimit,
        orders: 2_000,
        arrival_rate: 10.0,
        seed: 1,
        charge_concurrency: None,
        charge_burst: None,
        svg: None,
    },
];

impl BurstRun {
    pub fn file(&self) -> String {
        format!("burst-{}.json", self.name)
    }

    fn pacing(&self) -> bool {
        self.role != Role::Unpaced
    }

    /// The `simulate` arguments of this run, `--json` and `--svg` left out.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--orders".to_owned(),
            self.orders.to_string(),
            "--arrival-rate".to_owned(),
            self.arrival_rate.to_string(),
            "--seed".to_owned(),
            self.seed.to_string(),
            // Passed, not left to simulate's default, so the section's text says what ran.
            "--create-latency-p50-ms".to_owned(),
            CreateLatency::DEFAULT_P50.as_millis().to_string(),
        ];
        if let Some(c) = self.charge_concurrency {
            args.extend(["--charge-concurrency".to_owned(), c.to_string()]);
        }
        if let Some(b) = self.charge_burst {
            args.extend(["--charge-burst".to_owned(), b.to_string()]);
        }
        if !self.pacing() {
            args.push("--no-pacing".to_owned());
        }
        args
    }

    /// The flags that tell this row from the reference command, for the table.
    fn flags(&self) -> String {
        let mut flags: Vec<String> = Vec::new();
        if !self.pacing() {
            flags.push("--no-pacing".into());
        }
        if let Some(c) = self.charge_concurrency {
            flags.push(format!("--charge-concurrency {c}"));
        }
        if let Some(b) = self.charge_burst {
            flags.push(format!("--charge-burst {b}"));
        }
        if flags.is_empty() {
            "—".into()
        } else {
            format!("`{}`", flags.join(" "))
        }
    }

    /// An error when `report` is not this run's (a stale or misplaced file): its settings as the
    /// report states them. The budget burst is not in the report and cannot be checked.
    fn check(&self, report: &Value) -> Result<(), Error> {
        let load = &report["load"];
        let concurrency = self
            .charge_concurrency
            .unwrap_or(charge::EVENT_SOURCE.default_max_concurrency);
        let matches = report["seed"].as_u64() == Some(self.seed)
            && load["orders"].as_u64() == Some(self.orders)
            && load["arrival_rate"].as_f64() == Some(self.arrival_rate)
            && load["charge_concurrency"].as_u64() == Some(u64::from(concurrency))
            && load["pacing"].as_bool() == Some(self.pacing());
        if matches {
            Ok(())
        } else {
            Err(format!(
                "{}: not the report of `simulate {}` (seed {}, load {}); run `BENCH_ONLY=burst make bench`",
                self.file(),
                self.args().join(" "),
                report["seed"],
                load
            )
            .into())
        }
    }
}

/// `bench burst`: every run of [`RUNS`] through `simulate` (the `sim` build), its report's last
/// line (the `--json` object) to `out_dir/burst-<name>.json`, the SVGs to `svg_dir`. Fails on the
/// first run whose invariants break (simulate exits 1), after keeping its report.
pub fn run_all(simulate: &Path, out_dir: &Path, svg_dir: &Path) -> Result<(), Error> {
    for run in &RUNS {
        let mut cmd = Command::new(simulate);
        cmd.args(run.args()).arg("--json");
        if let Some(svg) = run.svg {
            cmd.arg("--svg").arg(svg_dir.join(svg));
        }
        let started = Instant::now();
        let output = cmd
            .output()
            .map_err(|e| format!("{}: {e}", simulate.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let last = stdout.lines().last().unwrap_or("");
        let report: Value = serde_json::from_str(last).map_err(|e| {
            format!(
                "simulate {}: no JSON report on its last line ({e}); stderr: {}",
                run.args().join(" "),
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
        std::fs::write(out_dir.join(run.file()), format!("{last}\n"))?;
        let load = &report["load"];
        eprintln!(
            "{}: drain {:.1} s ({:.3} N/L), {} capacity 429s; {:.1} s wall",
            run.name,
            load["drain_secs"].as_f64().unwrap_or(f64::NAN),
            load["drain_ratio"].as_f64().unwrap_or(f64::NAN),
            load["capacity_429s"],
            started.elapsed().as_secs_f64()
        );
        if !output.status.success() {
            return Err(format!(
                "simulate {} failed ({}): {}",
                run.args().join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
    }
    Ok(())
}

/// The reports of [`RUNS`] in `dir`, each checked against its run; `None` for a run not measured.
pub fn read_reports(dir: &Path) -> Result<Vec<(BurstRun, Option<Value>)>, Error> {
    RUNS.iter()
        .map(|run| {
            let report: Option<Value> = read_opt(dir, &run.file())?;
            if let Some(r) = &report {
                run.check(r)?;
            }
            Ok((*run, report))
        })
        .collect()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Seconds: `4,375 s` from 1,000 up, `918.7 s` below.
fn secs(s: f64) -> String {
    if s >= 1_000.0 {
        format!("{} s", thousands(s.round() as u64))
    } else {
        format!("{s:.1} s")
    }
}

/// Why a run does not count, if it does not: broken invariants, orders unsettled, checkouts refused.
fn fault(run: &BurstRun, report: &Value) -> Option<String> {
    let load = &report["load"];
    let mut faults = Vec::new();
    if report["invariants_hold"].as_bool() != Some(true) {
        faults.push(format!(
            "invariant broken: {}",
            report["first_violation"].as_str().unwrap_or("?")
        ));
    }
    if u(&load["settled"]) != run.orders {
        faults.push(format!(
            "{} of {} orders settled",
            u(&load["settled"]),
            run.orders
        ));
    }
    if u(&load["checkout_errors"]) > 0 {
        faults.push(format!("{} checkout errors", u(&load["checkout_errors"])));
    }
    (!faults.is_empty()).then(|| faults.join(", "))
}

/// Section 7 from the runs' reports (as [`read_reports`] gives them). `date` is when they ran.
pub fn section(
    w: &mut String,
    runs: &[(BurstRun, Option<Value>)],
    date: &str,
) -> Result<(), Error> {
    let measured = |role: Role| {
        runs.iter()
            .filter(move |(r, _)| r.role == role)
            .filter_map(|(r, v)| v.as_ref().map(|v| (r, &v["load"])))
    };
    let es = charge::EVENT_SOURCE;
    let p50_ms = CreateLatency::DEFAULT_P50.as_millis();
    let reference = measured(Role::Paced).next();
    // The limit the runs were given (in every report), else the one they would be.
    let limit = reference.map_or(u64::from(Capacity::STRIPE_ENDPOINT_PER_SEC), |(_, l)| {
        u(&l["create_limit"])
    });
    writeln!(w, "{HEADING}")?;
    writeln!(w)?;
    writeln!(w, "The load model (issue 25): the real checkout, charge and reconciler handlers on virtual time,")?;
    writeln!(w, "Stripe with its capacity (stripe-sim: create {limit}/s per endpoint, {}/s account) and a lognormal", Capacity::STRIPE_ACCOUNT_PER_SEC)?;
    writeln!(w, "create latency (p50 {p50_ms} ms), the SQS event source as the template configures it (batches of {},", es.batch_size)?;
    writeln!(w, "{} s visibility timeout, FIFO groups, `MaximumConcurrency` pollers). Figures are virtual time and", thousands(es.visibility_timeout_secs))?;
    writeln!(w, "counts, the same on every machine; asserted by `infra/simulate/tests/load.rs`. Each row is one run")?;
    writeln!(
        w,
        "of simulate's `sim` build (opt-level 3) by `make bench` (`bench burst`, `infra/bench/src/burst.rs`):"
    )?;
    writeln!(w)?;
    writeln!(w, "```sh")?;
    writeln!(w, "simulate --orders N --arrival-rate R --seed S --create-latency-p50-ms {p50_ms} [FLAGS] --json")?;
    writeln!(w, "```")?;
    writeln!(w)?;
    writeln!(w, "rendered from its report's `load` object (`BENCH_ONLY=burst make bench` runs only these and")?;
    writeln!(w, "replaces only this section).")?;
    writeln!(w)?;
    let Some((reference_run, reference)) = reference else {
        writeln!(w, "Not measured in this run.")?;
        return Ok(());
    };
    let ideal = f(&reference["ideal_drain_secs"]);
    writeln!(
        w,
        "Reference burst: N = {} orders at R = {}/s, create limit L = {}/s, so N/L = {} s.",
        thousands(reference_run.orders),
        reference_run.arrival_rate,
        u(&reference["create_limit"]),
        ideal
    )?;
    writeln!(w)?;
    let rows = runs
        .iter()
        .filter(|(r, _)| r.role != Role::BelowLimit)
        .map(|(run, report)| {
            let label = match run.role {
                Role::Unpaced => "before (no pacing)".to_owned(),
                _ => match report {
                    Some(v) => format!(
                        "after, `ChargeMaxConcurrency` {}",
                        u(&v["load"]["charge_concurrency"])
                    ),
                    None => "after".to_owned(),
                },
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
                    if let Some(why) = fault(run, v) {
                        row[0] = format!("{} (**{why}**)", row[0]);
                    }
                }
            }
            row.resize(9, String::new());
            row
        });
    table(
        w,
        &[
            "run",
            "flags",
            "seed",
            "drain",
            "drain ÷ N/L",
            "p99 checkout → settled",
            "capacity 429s",
            "creates per charge",
            "waited a visibility timeout",
        ],
        rows,
    )?;
    writeln!(w)?;
    let drawn: Vec<(&BurstRun, &str)> = runs
        .iter()
        .filter(|(_, v)| v.is_some())
        .filter_map(|(r, _)| Some((r, r.svg?)))
        .collect();
    if let Some((first, _)) = drawn.first() {
        let links: Vec<String> = drawn
            .iter()
            .map(|(r, svg)| {
                let name = if r.pacing() { "after" } else { "before" };
                format!("[{name}](docs/bench/{svg})")
            })
            .collect();
        writeln!(
            w,
            "The {} of seed {}, drawn by `--svg` (queue depth, in flight, settled, 429s per virtual second):",
            if drawn.len() == 1 { "run" } else { "two runs" },
            first.seed
        )?;
        writeln!(w, "{}.", links.join(", "))?;
        writeln!(w)?;
    }

    let mut notes: Vec<String> = Vec::new();
    // Two paragraphs: below the limit and what bounds the paced drain; whether the runs count and
    // what they took.
    if let Some((run, l)) = measured(Role::BelowLimit).next() {
        notes.push(format!(
            "Below the limit ({} orders at {}/s): p50 {:.2} s, p99 {:.2} s, max {:.2} s checkout → settled \
             (the slowest create {:.2} s), {} capacity 429s.",
            thousands(run.orders),
            run.arrival_rate,
            f(&l["latency_p50_secs"]),
            f(&l["latency_p99_secs"]),
            f(&l["latency_max_secs"]),
            f(&l["max_create_latency_secs"]),
            thousands(u(&l["capacity_429s"])),
        ));
    }
    // The charge environments together get what the reconciler and the events function leave of the budget
    // (`StripeBudget`, the split the functions make at init).
    let budget = StripeBudget {
        per_second: u(&reference["stripe_rps"]),
        charge_concurrency: u(&reference["charge_concurrency"]),
    };
    let kept = budget.reconciler_share() + budget.events_share();
    let charges = budget.charge_share() * budget.charge_concurrency as f64;
    let limit = limit as f64;
    notes.push(format!(
        "The floor of the paced drain is {limit}/{charges} = {:.3} × N/L: the charge environments share \
         {charges} of `StripeRequestsPerSecond` {}, the reconciler and the events function keep {kept}.",
        limit / charges,
        budget.per_second,
    ));
    let with_burst: Vec<String> = measured(Role::Variant)
        .filter_map(|(r, l)| Some((r.charge_burst?, l)))
        .enumerate()
        .map(|(i, (b, l))| {
            let was = if i == 0 { " the drain was" } else { "" };
            format!(
                "with {b}{was} {:.2}{}",
                f(&l["drain_ratio"]),
                if i == 0 { " × N/L" } else { "" }
            )
        })
        .collect();
    if !with_burst.is_empty() {
        notes.push(format!(
            "Each environment may bank {} calls (`charge::BURST`): {}, because an environment takes no slot \
             while its batch waits for its slowest create.",
            charge::BURST,
            with_burst.join(", ")
        ));
    }
    paragraph(w, &notes.join(" "))?;
    notes.clear();
    writeln!(w)?;
    let measured_runs: Vec<(&BurstRun, &Value)> = runs
        .iter()
        .filter_map(|(r, v)| Some((r, v.as_ref()?)))
        .collect();
    let faulty: Vec<String> = measured_runs
        .iter()
        .filter_map(|(r, v)| Some(format!("{}: {}", r.name, fault(r, v)?)))
        .collect();
    if faulty.is_empty() {
        notes.push(format!(
            "In each of the {} runs every invariant held, every order settled and every checkout was answered 2xx.",
            measured_runs.len()
        ));
    } else {
        notes.push(format!(
            "**Runs that do not count**: {}.",
            faulty.join("; ")
        ));
    }
    let wall: f64 = measured_runs.iter().map(|(_, v)| f(&v["wall_secs"])).sum();
    let unpaced_wall: f64 = measured_runs
        .iter()
        .filter(|(r, _)| r.role == Role::Unpaced)
        .map(|(_, v)| f(&v["wall_secs"]))
        .sum();
    notes.push(format!(
        "They took {wall:.0} s of wall time in all on {date} (the unpaced ones {unpaced_wall:.0} s of it, \
         waiting out visibility timeouts with thousands of messages queued)."
    ));
    paragraph(w, &notes.join(" "))?;
    Ok(())
}

/// `text` as lines of at most 100 characters, broken at spaces (a longer word gets a line of its
/// own), as the rest of the file is written. No blank line after it.
fn paragraph(w: &mut String, text: &str) -> std::fmt::Result {
    const WIDTH: usize = 100;
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > WIDTH {
            writeln!(w, "{line}")?;
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    writeln!(w, "{line}")
}

/// `doc` with its section 7 (from [`HEADING`] to the next `## ` heading or the end) replaced by
/// `section`; an error if `doc` has none.
pub fn splice(doc: &str, section: &str) -> Result<String, Error> {
    let start = doc
        .find(&format!("\n{HEADING}\n"))
        .map(|i| i + 1)
        .ok_or("BENCHMARKS.md has no section 7 to replace; run `make bench` in full")?;
    let rest = &doc[start + HEADING.len()..];
    let end = rest
        .find("\n## ")
        .map_or(doc.len(), |i| start + HEADING.len() + i + 1);
    let mut out = String::with_capacity(doc.len());
    out.push_str(&doc[..start]);
    out.push_str(section);
    if end < doc.len() {
        out.push('\n');
    }
    out.push_str(&doc[end..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(run: &BurstRun, drain: f64, p99: f64, creates: f64) -> Value {
        serde_json::json!({
            "seed": run.seed, "invariants_hold": true, "first_violation": null, "wall_secs": 2.0,
            "load": {
                "orders": run.orders, "arrival_rate": run.arrival_rate,
                "charge_concurrency": run.charge_concurrency.unwrap_or(2),
                "create_limit": 25, "stripe_rps": 24, "pacing": run.pacing(),
                "settled": run.orders, "checkout_errors": 0,
                "drain_secs": drain, "ideal_drain_secs": run.orders as f64 / 25.0,
                "drain_ratio": drain / (run.orders as f64 / 25.0),
                "latency_p50_secs": 0.47, "latency_p99_secs": p99, "latency_max_secs": 2.37,
                "max_create_latency_secs": 2.01, "capacity_429s": 15343,
                "creates_per_charge": creates, "waited_visibility_timeout": 0,
            }
        })
    }

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
        let mut w = String::new();
        section(&mut w, &runs, "today").unwrap();
        // The prose is wrapped: compare it as one line.
        let flat = w.split_whitespace().collect::<Vec<_>>().join(" ");
        let rows: Vec<&str> = w.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(rows.len(), 1 + 10, "{w}");
        assert_eq!(
            rows[1],
            "| before (no pacing) | `--no-pacing` | 1 | 4,375 s | 5.469 | 4,161 s | 15,343 | 1.7672 | 0 |"
        );
        assert!(
            rows[3].starts_with(
                "| after, `ChargeMaxConcurrency` 2 | — | 1 | 918.7 s | 1.148 | 810.5 s |"
            ),
            "{w}"
        );
        assert!(
            rows[5]
                .starts_with("| after, `ChargeMaxConcurrency` 5 | `--charge-concurrency 5` | 1 |"),
            "{w}"
        );
        assert!(flat.contains("so N/L = 800 s."), "{w}");
        assert!(flat.contains("25/22 = 1.136 × N/L"), "{w}");
        assert!(
            flat.contains("the reconciler and the events function keep 2."),
            "{w}"
        );
        assert!(
            flat.contains("with 2 the drain was 1.58 × N/L, with 10 1.15, because"),
            "{w}"
        );
        assert!(
            flat.contains("Below the limit (2,000 orders at 10/s): p50 0.47 s"),
            "{w}"
        );
        assert!(
            flat.contains(
                "[before](docs/bench/burst-unpaced.svg), [after](docs/bench/burst-paced.svg)"
            ),
            "{w}"
        );
        assert!(
            flat.contains("In each of the 11 runs every invariant held"),
            "{w}"
        );
        assert!(
            flat.contains("took 22 s of wall time in all on today (the unpaced ones 4 s"),
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
        let mut w = String::new();
        section(&mut w, &runs, "today").unwrap();
        // The prose is wrapped: compare it as one line.
        let flat = w.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("| before (no pacing) | `--no-pacing` | 2 | not measured in this run |"),
            "{w}"
        );
        assert!(
            flat.contains(
                "(**invariant broken: double charge, 19999 of 20000 orders settled**) | — | 2 |"
            ),
            "{w}"
        );
        assert!(
            flat.contains("**Runs that do not count**: paced-seed2: invariant broken"),
            "{w}"
        );

        let mut none = String::new();
        section(&mut none, &RUNS.map(|r| (r, None)), "today").unwrap();
        assert!(none.ends_with("Not measured in this run.\n"), "{none}");
    }

    #[test]
    fn a_report_of_another_run_is_refused() {
        let unpaced = report(&RUNS[0], 4375.4, 4160.8, 1.77);
        assert!(RUNS[0].check(&unpaced).is_ok());
        // The paced seed-1 row given the unpaced report, and a report of seed 2.
        assert!(RUNS[2].check(&unpaced).is_err());
        assert!(RUNS[1].check(&unpaced).is_err());
        assert!(RUNS[4].check(&report(&RUNS[2], 918.7, 810.5, 1.0)).is_err());
    }

    #[test]
    fn splice_replaces_section_7_only() {
        let old = format!("# B\n\n## 6. Six\n\nsix\n\n{HEADING}\n\nold\n");
        let new_section = format!("{HEADING}\n\nnew\n");
        assert_eq!(
            splice(&old, &new_section).unwrap(),
            format!("# B\n\n## 6. Six\n\nsix\n\n{HEADING}\n\nnew\n")
        );
        let followed = format!("# B\n\n{HEADING}\n\nold\nolder\n\n## 8. Eight\n\neight\n");
        assert_eq!(
            splice(&followed, &new_section).unwrap(),
            format!("# B\n\n{HEADING}\n\nnew\n\n## 8. Eight\n\neight\n")
        );
        assert!(splice("# B\n\n## 6. Six\n", &new_section).is_err());
    }
}
