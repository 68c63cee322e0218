//! The runs of section 7 of `BENCHMARKS.md`: the reference burst at Stripe's rate limit, without
//! and with pacing, in the simulator's load model (`simulate --arrival-rate`).
//!
//! [`RUNS`] is the one list of runs: `bench burst` runs each through the `simulate` binary and
//! keeps its `--json` report as `burst-<name>.json`; [`crate::render::burst`] renders them. Every
//! figure of the section is read from those reports or computed from them, except the model's
//! settings the reports do not carry (the create latency, which the run passes explicitly; the
//! budget burst of a row, which is the row's flag; batch size, visibility timeout and the account
//! limit, read from the constants the simulator is built from).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::Value;
use stripe_sim::CreateLatency;

use crate::records::read_opt;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// What a row stands for in the section's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The reference burst without pacing: the stall pacing prevents.
    Unpaced,
    /// The reference burst as the functions ship: paced, default concurrency and burst.
    Paced,
    /// The reference burst paced, with another `--charge-concurrency` or `--charge-burst`.
    Variant,
    /// Well below Stripe's limit: latency, not drain.
    BelowLimit,
    /// The reference burst mixed with captures and refunds the order service asks of it.
    Mixed,
}

/// A mixed burst's settings: the account's limit and budget, the shares captured and refunded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mix {
    /// `--account-limit`: Stripe's overall limit of the account, requests/s.
    pub account_limit: u32,
    /// `--stripe-rps`: the account's budget.
    pub stripe_rps: u64,
    /// `--burst-captures` and `--burst-refunds`.
    pub captures: f64,
    pub refunds: f64,
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
    /// `--charge-burst`; `None`: the charge function's (`StripeBudget::charge_burst`). Not in the
    /// report.
    pub charge_burst: Option<u32>,
    /// `--svg`, a file name in the SVG directory (`docs/bench`).
    pub svg: Option<&'static str>,
    /// A mixed burst's settings (`Role::Mixed`).
    pub mix: Option<Mix>,
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
        mix: None,
    }
}

/// The section's runs, in the table's order: the reference burst (20,000 orders at 200/s, 8 ×
/// the create limit) without and with pacing on two seeds, with more charge environments, and
/// with each environment banking 20 calls instead of one second of its share; then 2,000 orders
/// at 10/s; then the reference burst mixed with captures and refunds, in test mode (the account's
/// 25/s binds every call) and on a live account (100/s, budget 96). The two unpaced runs are most of the time
/// (about 60 and 100 s in a release build, less in the `sim` build `make bench` uses): they wait
/// out 1,800 s visibility timeouts with thousands of messages queued.
pub const RUNS: [BurstRun; 13] = [
    // Unpaced at 2 environments, as the stall was first measured: more environments only add
    // 429s and visibility timeouts to a run that already shows the stall (and to its wall time).
    BurstRun {
        svg: Some("burst-unpaced.svg"),
        charge_concurrency: Some(2),
        ..reference("unpaced-seed1", Role::Unpaced, 1)
    },
    BurstRun {
        charge_concurrency: Some(2),
        ..reference("unpaced-seed2", Role::Unpaced, 2)
    },
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
        charge_burst: Some(20),
        ..reference("bank20-seed1", Role::Variant, 1)
    },
    BurstRun {
        charge_burst: Some(20),
        charge_concurrency: Some(20),
        ..reference("bank20-concurrency20-seed1", Role::Variant, 1)
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
        mix: None,
    },
    BurstRun {
        mix: Some(Mix {
            account_limit: 25,
            stripe_rps: 24,
            captures: 0.3,
            refunds: 0.3,
        }),
        ..reference("mixed-test-mode-seed1", Role::Mixed, 1)
    },
    BurstRun {
        mix: Some(Mix {
            account_limit: 100,
            stripe_rps: 96,
            captures: 0.3,
            refunds: 0.3,
        }),
        ..reference("mixed-live-seed1", Role::Mixed, 1)
    },
];

impl BurstRun {
    pub fn file(&self) -> String {
        format!("burst-{}.json", self.name)
    }

    pub(crate) fn pacing(&self) -> bool {
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
        if let Some(m) = self.mix {
            args.extend([
                "--account-limit".to_owned(),
                m.account_limit.to_string(),
                "--stripe-rps".to_owned(),
                m.stripe_rps.to_string(),
                "--burst-captures".to_owned(),
                m.captures.to_string(),
                "--burst-refunds".to_owned(),
                m.refunds.to_string(),
            ]);
        }
        args
    }

    /// The flags that tell this row from the reference command, for the table.
    pub(crate) fn flags(&self) -> String {
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
            && load["pacing"].as_bool() == Some(self.pacing())
            && load["mix"]["account_limit"].as_u64()
                == self.mix.map(|m| u64::from(m.account_limit));
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

/// `bench burst`'s reference runs: every run of [`RUNS`] through `simulate` (the `sim` build),
/// its report's last line (the `--json` object) to `out_dir/burst-<name>.json`, the SVGs to
/// `svg_dir`. Fails on the first run whose invariants break (simulate exits 1), after keeping
/// its report.
pub fn run_all(simulate: &Path, out_dir: &Path, svg_dir: &Path) -> Result<(), Error> {
    for run in &RUNS {
        let svg = run.svg.map(|svg| svg_dir.join(svg));
        run_simulate(
            simulate,
            &run.args(),
            svg.as_deref(),
            &out_dir.join(run.file()),
            run.name,
        )?;
    }
    Ok(())
}

/// One `simulate ARGS --json [--svg SVG]` run: its report (the last line of its output) to
/// `out`, a line on stderr with its drain; an error when it has no report or fails.
pub(crate) fn run_simulate(
    simulate: &Path,
    args: &[String],
    svg: Option<&Path>,
    out: &Path,
    name: &str,
) -> Result<(), Error> {
    let mut cmd = Command::new(simulate);
    cmd.args(args).arg("--json");
    if let Some(svg) = svg {
        cmd.arg("--svg").arg(svg);
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
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    std::fs::write(out, format!("{last}\n"))?;
    let load = &report["load"];
    eprintln!(
        "{name}: drain {:.1} s ({:.3} N/L), {} capacity 429s; {:.1} s wall",
        load["drain_secs"].as_f64().unwrap_or(f64::NAN),
        load["drain_ratio"].as_f64().unwrap_or(f64::NAN),
        load["capacity_429s"],
        started.elapsed().as_secs_f64()
    );
    if !output.status.success() {
        return Err(format!(
            "simulate {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
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

/// A report of `run` as `simulate --json` writes it, with the figures a test needs.
#[cfg(test)]
pub(crate) fn test_report(run: &BurstRun, drain: f64, p99: f64, creates: f64) -> Value {
    serde_json::json!({
        "seed": run.seed, "invariants_hold": true, "first_violation": null, "wall_secs": 2.0,
        "load": {
            "orders": run.orders, "arrival_rate": run.arrival_rate,
            "charge_concurrency": run.charge_concurrency.unwrap_or(charge::EVENT_SOURCE.default_max_concurrency),
            "create_limit": 25, "stripe_rps": run.mix.map_or(24, |m| m.stripe_rps), "pacing": run.pacing(),
            "settled": run.orders, "checkout_errors": 0,
            "drain_secs": drain, "ideal_drain_secs": run.orders as f64 / 25.0,
            "drain_ratio": drain / (run.orders as f64 / 25.0),
            "latency_p50_secs": 0.47, "latency_p99_secs": p99, "latency_max_secs": 2.37,
            "max_create_latency_secs": 2.01, "capacity_429s": 15343,
            "creates_per_charge": creates, "waited_visibility_timeout": 0,
            "mix": run.mix.map(|m| serde_json::json!({
                "account_limit": m.account_limit, "charges_done_secs": 0.9 * drain,
                "captures_accepted": 0, "refunds_accepted": 0, "refunds_at_stripe": 0,
                "over_refunded": 0, "create_429s": 0, "capture_429s": 0, "refund_429s": 0,
                "account_429s": 0,
            })),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_of_another_run_is_refused() {
        let unpaced = test_report(&RUNS[0], 4375.4, 4160.8, 1.77);
        assert!(RUNS[0].check(&unpaced).is_ok());
        // The paced seed-1 row given the unpaced report, and a report of seed 2.
        assert!(RUNS[2].check(&unpaced).is_err());
        assert!(RUNS[1].check(&unpaced).is_err());
        assert!(RUNS[4]
            .check(&test_report(&RUNS[2], 918.7, 810.5, 1.0))
            .is_err());
    }
}
