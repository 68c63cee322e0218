//! Section 4 of BENCHMARKS.md: the five functions' footprint, from the `footprint-P.json` files
//! `infra/bench/footprint.sh` writes, beside the figures of the build they are compared with
//! (`infra/bench/previous-footprint.json`, the same shape, measured the same way from the build
//! its `release` field names).

use serde_json::Value;

use crate::markdown::{rows_string, Template};
use crate::records::{f, u, RssRecord};
use crate::template;

type Error = Box<dyn std::error::Error + Send + Sync>;

const TEMPLATE: Template = template!("4-footprint.md");

/// The five functions, in the template's order.
pub const FUNCTIONS: [&str; 5] = ["checkout", "charge", "reconciler", "webhook", "notify"];

/// The figures compared with, checked in (see the file's `method`).
pub const PREVIOUS: &str = include_str!("../../previous-footprint.json");

pub fn previous() -> Result<Value, Error> {
    Ok(serde_json::from_str(PREVIOUS).map_err(|e| format!("previous-footprint.json: {e}"))?)
}

fn function<'a>(fp: &'a Value, name: &str) -> Option<&'a Value> {
    fp["functions"]
        .as_array()?
        .iter()
        .find(|x| x["function"] == name)
}

fn mb(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 / 1e6)
}

/// "before → after (±x %)", or what is missing.
fn change(before: Option<f64>, after: Option<f64>, fmt: impl Fn(f64) -> String) -> String {
    match (before, after) {
        (Some(b), Some(a)) if b > 0.0 => {
            format!("{} → {} ({:+.0} %)", fmt(b), fmt(a), (a / b - 1.0) * 100.0)
        }
        (Some(b), Some(a)) => format!("{} → {}", fmt(b), fmt(a)),
        (None, Some(a)) => format!("not measured → {}", fmt(a)),
        (Some(b), None) => format!("{} → not measured", fmt(b)),
        (None, None) => "not measured".into(),
    }
}

/// The table of each function's zips and init, before → now.
fn functions_table(now: Option<&Value>, previous: &Value) -> String {
    let rows = FUNCTIONS.iter().map(|name| {
        let before = function(previous, name);
        let after = now.and_then(|fp| function(fp, name));
        let bytes = |key: &str| {
            let get = |x: Option<&Value>| x.and_then(|x| x[key].as_u64()).map(|v| v as f64);
            change(get(before), get(after), |v| mb(v as u64))
        };
        let init = |x: Option<&Value>| x.and_then(|x| x["init"]["median_ms"].as_f64());
        vec![
            name.to_string(),
            bytes("arm64_zip_bytes"),
            bytes("zip_bytes"),
            bytes("binary_bytes"),
            change(init(before), init(after), |v| format!("{v:.1} ms")),
        ]
    });
    rows_string(rows)
}

/// The rows of one build in the per-profile table: each function, then its CPU per charge.
fn profile_rows(fp: &Value, label: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for func in fp["functions"].as_array().cloned().unwrap_or_default() {
        let init = &func["init"];
        let measured = func["binary_bytes"].is_u64();
        let or_not = |text: String| {
            if measured {
                text
            } else {
                "not measured".into()
            }
        };
        rows.push(vec![
            label.to_owned(),
            fp["settings"].as_str().unwrap_or("").to_owned(),
            func["function"].as_str().unwrap_or("").to_owned(),
            or_not(format!("{} B", u(&func["binary_bytes"]))),
            or_not(format!(
                "{} B ({})",
                u(&func["zip_bytes"]),
                mb(u(&func["zip_bytes"]))
            )),
            or_not(format!(
                "{:.1} ({:.1}–{:.1}), {} runs",
                f(&init["median_ms"]),
                f(&init["min_ms"]),
                f(&init["max_ms"]),
                u(&init["runs"])
            )),
        ]);
    }
    rows.push(vec![
        label.to_owned(),
        String::new(),
        "CPU per charge".into(),
        String::new(),
        String::new(),
        format!("{:.2} µs", f(&fp["cpu"]["cpu_us_per_charge"])),
    ]);
    rows
}

/// Section 4: `footprints` as `records::read_footprints` returns them (release first).
pub fn section(
    footprints: &[Value],
    previous: &Value,
    rss: Option<RssRecord>,
    date: &str,
) -> Result<String, Error> {
    let now = footprints.iter().find(|fp| fp["profile"] == "release");
    let before_label = "before".to_owned();
    let mut rows = profile_rows(previous, &before_label);
    for fp in footprints {
        rows.extend(profile_rows(
            fp,
            &format!("`{}`", fp["profile"].as_str().unwrap_or("")),
        ));
    }
    let cpu = |fp: &Value| f(&fp["cpu"]["cpu_us_per_charge"]);
    let mut out = TEMPLATE.fill(
        "main",
        &[
            ("date", date.to_owned()),
            (
                "previous",
                previous["release"]
                    .as_str()
                    .unwrap_or("the previous release")
                    .to_owned(),
            ),
            ("functions", functions_table(now, previous)),
            (
                "charges",
                now.map_or(0, |fp| u(&fp["cpu"]["charges"])).to_string(),
            ),
            (
                "batch",
                now.map_or(0, |fp| u(&fp["cpu"]["batch_size"])).to_string(),
            ),
            (
                "cpu",
                change(Some(cpu(previous)), now.map(cpu), |v| format!("{v:.1} µs")),
            ),
            ("profiles", rows_string(rows)),
        ],
    )?;
    let rss = now
        .and_then(|fp| serde_json::from_value::<RssRecord>(fp["rss"].clone()).ok())
        .or(rss);
    if let Some(rss) = rss {
        out += &TEMPLATE.fill(
            "rss",
            &[
                ("kb", rss.vm_hwm_kb.to_string()),
                ("batch", rss.batch_size.to_string()),
            ],
        )?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn footprint(zips: [u64; 5], cpu: f64) -> Value {
        let functions: Vec<Value> = FUNCTIONS
            .iter()
            .zip(zips)
            .map(|(name, zip)| {
                serde_json::json!({
                    "function": name, "binary_bytes": zip * 2, "zip_bytes": zip + 1,
                    "init": {"median_ms": 10.0, "min_ms": 8.0, "max_ms": 12.0, "runs": 20},
                })
            })
            .collect();
        serde_json::json!({
            "profile": "release", "settings": "opt-level=s", "functions": functions,
            "cpu": {"cpu_us_per_charge": cpu, "charges": 1000, "batch_size": 10},
        })
    }

    #[test]
    fn the_checked_in_figures_have_all_five_functions() {
        let p = previous().unwrap();
        for name in FUNCTIONS {
            let x = function(&p, name).unwrap_or_else(|| panic!("{name} missing"));
            assert!(u(&x["zip_bytes"]) > 0, "{name}");
            assert!(f(&x["init"]["median_ms"]) > 0.0, "{name}");
        }
        assert!(f(&p["cpu"]["cpu_us_per_charge"]) > 0.0);
        assert!(p["commit"].as_str().is_some_and(|c| c.len() == 40));
    }

    #[test]
    fn the_section_lists_every_function_beside_the_figures_before() {
        let before = footprint([3_000_000; 5], 10.0);
        let w = section(&[footprint([1_500_000; 5], 10.5)], &before, None, "today").unwrap();
        for name in FUNCTIONS {
            assert!(
                w.contains(&format!(
                    "| {name} | not measured | 3.00 MB → 1.50 MB (-50 %) | 6.00 MB → 3.00 MB (-50 %) | 10.0 ms → 10.0 ms (+0 %) |"
                )),
                "{name}: {w}"
            );
        }
        assert!(w.contains("10.0 µs → 10.5 µs (+5 %)"), "{w}");
        assert!(!w.contains("Peak RSS"), "{w}");
        let rss = RssRecord {
            batch_size: 10,
            vm_hwm_kb: 2752,
        };
        let w = section(&[], &before, Some(rss), "today").unwrap();
        assert!(
            w.contains("| checkout | not measured | 3.00 MB → not measured |"),
            "{w}"
        );
        assert!(w.contains("Peak RSS: 2752 kB"), "{w}");
    }
}
