//! The grid of section 7: bursts at other limits and latencies, each at the concurrency the
//! sizing rule of docs/deploy.md asks for and at twice that, in the load model
//! (`simulate --arrival-rate`, virtual time).
//!
//! [`points`] is the one list: `bench burst` runs each through the `simulate` binary after the
//! reference runs and keeps its `--json` report as `grid-<limit>-<p50>-<concurrency>.json`;
//! [`crate::render::burst`] renders them as a table and checks the goals against them.
//! Each burst is [`SECONDS_AT_LIMIT`] seconds of orders at the limit, arriving at 8 × the limit,
//! with both budgets (the account's and each endpoint's) at the limit less one call a second.

use std::path::Path;

use serde_json::Value;

use crate::burst::run_simulate;
use crate::records::read_opt;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Stripe's create limits the grid runs at, requests/s: below Stripe's default (10), its default
/// (25), and raised limits.
pub const LIMITS: [u32; 4] = [10, 25, 50, 100];
/// Stripe's median create latencies the grid runs at, ms.
pub const LATENCIES_MS: [u64; 3] = [150, 300, 800];
/// A burst is this many seconds of orders at the limit (N = L × this).
pub const SECONDS_AT_LIMIT: u64 = 200;
/// Orders arrive at this multiple of the limit.
pub const ARRIVAL_OVER_LIMIT: u32 = 8;
/// The seed of every point.
pub const SEED: u64 = 1;

/// docs/deploy.md's sizing rule: `ChargeMaxConcurrency` ≥ 0.4 × L × the median create latency in
/// seconds, at least 2 (the event source's minimum).
pub fn rule(limit: u32, p50_ms: u64) -> u32 {
    let c = (0.4 * f64::from(limit) * p50_ms as f64 / 1000.0).ceil() as u32;
    c.max(2)
}

/// One burst of the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GridPoint {
    /// Stripe's create limit L, requests/s (the account's is Stripe's live 100/s).
    pub limit: u32,
    /// The create latency's median, ms.
    pub p50_ms: u64,
    /// `ChargeMaxConcurrency`.
    pub concurrency: u32,
    /// Whether `concurrency` is the rule's (else twice it).
    pub at_rule: bool,
}

/// Every point: each limit × latency at the rule's concurrency and at twice it.
pub fn points() -> Vec<GridPoint> {
    let mut points = Vec::new();
    for limit in LIMITS {
        for p50_ms in LATENCIES_MS {
            let at = rule(limit, p50_ms);
            for (concurrency, at_rule) in [(at, true), (2 * at, false)] {
                points.push(GridPoint {
                    limit,
                    p50_ms,
                    concurrency,
                    at_rule,
                });
            }
        }
    }
    points
}

impl GridPoint {
    pub fn orders(&self) -> u64 {
        u64::from(self.limit) * SECONDS_AT_LIMIT
    }

    pub fn arrival_rate(&self) -> f64 {
        f64::from(self.limit * ARRIVAL_OVER_LIMIT)
    }

    /// Both budgets: the limit less one call a second of headroom.
    pub fn budget(&self) -> u64 {
        u64::from(self.limit) - 1
    }

    pub fn file(&self) -> String {
        format!(
            "grid-{}-{}-{}.json",
            self.limit, self.p50_ms, self.concurrency
        )
    }

    /// The `simulate` arguments of this point, `--json` left out.
    pub fn args(&self) -> Vec<String> {
        [
            ("--orders", self.orders().to_string()),
            ("--arrival-rate", self.arrival_rate().to_string()),
            ("--seed", SEED.to_string()),
            ("--create-limit", self.limit.to_string()),
            ("--create-latency-p50-ms", self.p50_ms.to_string()),
            ("--stripe-rps", self.budget().to_string()),
            ("--stripe-endpoint-rps", self.budget().to_string()),
            ("--charge-concurrency", self.concurrency.to_string()),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_owned(), value])
        .collect()
    }

    /// An error when `report` is not this point's (a stale or misplaced file).
    fn check(&self, report: &Value) -> Result<(), Error> {
        let load = &report["load"];
        let matches = report["seed"].as_u64() == Some(SEED)
            && load["orders"].as_u64() == Some(self.orders())
            && load["create_limit"].as_u64() == Some(u64::from(self.limit))
            && load["create_latency_p50_ms"].as_u64() == Some(self.p50_ms)
            && load["charge_concurrency"].as_u64() == Some(u64::from(self.concurrency))
            && load["stripe_rps"].as_u64() == Some(self.budget())
            && load["stripe_endpoint_rps"].as_u64() == Some(self.budget());
        if matches {
            Ok(())
        } else {
            Err(format!(
                "{}: not the report of `simulate {}`; run `BENCH_ONLY=burst make bench`",
                self.file(),
                self.args().join(" ")
            )
            .into())
        }
    }
}

/// `bench burst`'s grid: every point through `simulate`, its report to `out_dir`.
pub fn run_all(simulate: &Path, out_dir: &Path) -> Result<(), Error> {
    for point in points() {
        run_simulate(
            simulate,
            &point.args(),
            None,
            &out_dir.join(point.file()),
            &point.file(),
        )?;
    }
    Ok(())
}

/// The grid's reports in `dir`, each checked against its point; `None` for a point not measured.
pub fn read_reports(dir: &Path) -> Result<Vec<(GridPoint, Option<Value>)>, Error> {
    points()
        .into_iter()
        .map(|point| {
            let report: Option<Value> = read_opt(dir, &point.file())?;
            if let Some(r) = &report {
                point.check(r)?;
            }
            Ok((point, report))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_rounds_up_and_never_goes_under_two() {
        assert_eq!(rule(25, 300), 3);
        assert_eq!(rule(100, 800), 32);
        assert_eq!(rule(10, 150), 2);
        assert_eq!(rule(50, 150), 3);
    }

    #[test]
    fn every_limit_and_latency_runs_at_the_rule_and_at_twice_it() {
        let points = points();
        assert_eq!(points.len(), LIMITS.len() * LATENCIES_MS.len() * 2);
        let p = points
            .iter()
            .find(|p| p.limit == 100 && p.p50_ms == 800 && !p.at_rule)
            .unwrap();
        assert_eq!(p.concurrency, 64);
        assert_eq!(p.file(), "grid-100-800-64.json");
        let args = p.args().join(" ");
        assert!(args.contains("--orders 20000 --arrival-rate 800"), "{args}");
        assert!(
            args.contains("--stripe-rps 99 --stripe-endpoint-rps 99"),
            "{args}"
        );
    }

    #[test]
    fn a_report_of_another_point_is_refused() {
        let points = points();
        let report = |p: &GridPoint| {
            serde_json::json!({"seed": SEED, "load": {
                "orders": p.orders(), "create_limit": p.limit, "create_latency_p50_ms": p.p50_ms,
                "charge_concurrency": p.concurrency, "stripe_rps": p.budget(),
                "stripe_endpoint_rps": p.budget(),
            }})
        };
        assert!(points[0].check(&report(&points[0])).is_ok());
        assert!(points[1].check(&report(&points[0])).is_err());
        assert!(points[2].check(&report(&points[0])).is_err());
    }
}
