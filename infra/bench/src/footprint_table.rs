//! Section 4 of BENCHMARKS.md: the five functions' footprint (issues 15 and 27), from the
//! `footprint-P.json` files `infra/bench/footprint.sh` writes, beside the previous release's
//! figures (`infra/bench/previous-footprint.json`, the same shape, measured the same way from the
//! commit it names).
//!
//! The goal (issue 27): every function's arm64 zip, as `sam build` makes it, at most
//! [`ZIP_LIMIT`] bytes, with CPU per charge within [`CPU_TOLERANCE`] of the previous release's.

use std::fmt::Write as _;

use serde_json::Value;

use crate::report::{table, RssRecord};

type Error = Box<dyn std::error::Error + Send + Sync>;

pub const HEADING: &str = "## 4. Footprint: size, init and CPU per charge";

/// 2 MB (decimal, as Lambda's and the MB): the largest arm64 zip allowed.
pub const ZIP_LIMIT: u64 = 2_000_000;
/// CPU per charge may grow by at most this share of the previous release's.
pub const CPU_TOLERANCE: f64 = 0.10;
/// The five functions, in the template's order.
pub const FUNCTIONS: [&str; 5] = ["checkout", "charge", "reconciler", "webhook", "notify"];

/// The previous release's footprint, checked in (see the file's `method`).
pub const PREVIOUS: &str = include_str!("../previous-footprint.json");

pub fn previous() -> Result<Value, Error> {
    Ok(serde_json::from_str(PREVIOUS).map_err(|e| format!("previous-footprint.json: {e}"))?)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
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

/// Whether the footprint meets the goal: every function's arm64 zip measured and within
/// [`ZIP_LIMIT`], and CPU per charge within [`CPU_TOLERANCE`] of the previous release's.
pub fn verdict(now: &Value, previous: &Value) -> (bool, Vec<String>) {
    let mut misses = Vec::new();
    for name in FUNCTIONS {
        match function(now, name).and_then(|x| x["arm64_zip_bytes"].as_u64()) {
            None => misses.push(format!("{name}: arm64 zip not measured")),
            Some(z) if z > ZIP_LIMIT => misses.push(format!("{name}: {} > 2 MB", mb(z))),
            Some(_) => {}
        }
    }
    let cpu_now = f(&now["cpu"]["cpu_us_per_charge"]);
    let cpu_before = f(&previous["cpu"]["cpu_us_per_charge"]);
    if cpu_before > 0.0 && cpu_now > cpu_before * (1.0 + CPU_TOLERANCE) {
        misses.push(format!(
            "CPU per charge {cpu_now:.1} µs > {cpu_before:.1} µs + 10 %"
        ));
    }
    (misses.is_empty(), misses)
}

/// Section 4: `footprints` as `report::read_footprints` returns them (release first).
pub fn section(
    w: &mut String,
    footprints: &[Value],
    previous: &Value,
    rss: Option<RssRecord>,
    date: &str,
) -> Result<(), Error> {
    writeln!(w, "{HEADING}")?;
    writeln!(w)?;
    let now = footprints.iter().find(|fp| fp["profile"] == "release");
    writeln!(w, "Measured {date} by `infra/bench/footprint.sh` (`make bench`, or `BENCH_ONLY=footprint make bench` for this section")?;
    writeln!(w, "alone). **Zip**: each function built as `sam build` builds it (`cargo lambda build --release --arm64` in the")?;
    writeln!(w, "function's directory, so features resolve for that function alone), `zip -9` of the stripped `bootstrap`;")?;
    writeln!(w, "the limit is 2 MB = 2,000,000 B. **Init** (x86-64 host: the arm64 binary cannot run here; same source, same")?;
    writeln!(
        w,
        "profile, `cargo build --release -p FUNCTION`): from `spawn` of the bootstrap to its first"
    )?;
    writeln!(w, "`GET /2018-06-01/runtime/invocation/next` against a tiny Runtime API on loopback (`footprint init`,")?;
    writeln!(w, "`infra/footprint/src/init.rs`), with the real `main`: JSON tracing, typed config, `aws_config` from the")?;
    writeln!(w, "environment, the SDK clients, GetSecretValue from moto (charge, reconciler: the Stripe key; webhook: the key")?;
    writeln!(w, "and the signing secret; plain HTTP on loopback, no TLS handshake) and the Stripe client (hyper-util, rustls) with its root certificates; median of")?;
    writeln!(w, "the runs after a warm-up, on a shared 2-core machine. **CPU per charge**: `footprint cpu` (section 3's measure:")?;
    writeln!(w, "`charge::handler::handle` over batches on in-memory ports, with the functions' log subscriber) built with")?;
    writeln!(
        w,
        "the same profile. **Previous**: {}.",
        previous["release"]
            .as_str()
            .unwrap_or("the previous release")
    )?;
    writeln!(w)?;

    let rows = FUNCTIONS.iter().map(|name| {
        let before = function(previous, name);
        let after = now.and_then(|fp| function(fp, name));
        let get = |x: Option<&Value>, k: &str| x.and_then(|x| x[k].as_u64()).map(|v| v as f64);
        let init = |x: Option<&Value>| x.and_then(|x| x["init"]["median_ms"].as_f64());
        let zip_after = after.and_then(|x| x["arm64_zip_bytes"].as_u64());
        vec![
            name.to_string(),
            change(
                get(before, "arm64_zip_bytes"),
                get(after, "arm64_zip_bytes"),
                |v| mb(v as u64),
            ),
            match zip_after {
                Some(z) if z <= ZIP_LIMIT => "yes".into(),
                Some(_) => "**no**".into(),
                None => "not measured".into(),
            },
            change(
                get(before, "arm64_binary_bytes"),
                get(after, "arm64_binary_bytes"),
                |v| mb(v as u64),
            ),
            change(init(before), init(after), |v| format!("{v:.1} ms")),
        ]
    });
    table(
        w,
        &[
            "function",
            "arm64 zip, previous → now",
            "≤ 2 MB",
            "arm64 bootstrap (stripped)",
            "init median (x86-64), previous → now",
        ],
        rows.collect::<Vec<_>>(),
    )?;
    writeln!(w)?;
    let cpu_before = f(&previous["cpu"]["cpu_us_per_charge"]);
    let cpu_now = now.map(|fp| f(&fp["cpu"]["cpu_us_per_charge"]));
    writeln!(
        w,
        "CPU per charge (x86-64, {} charges in batches of {}), previous → now: {}; allowed: +{:.0} %.",
        now.map_or(0, |fp| u(&fp["cpu"]["charges"])),
        now.map_or(0, |fp| u(&fp["cpu"]["batch_size"])),
        change(Some(cpu_before), cpu_now, |v| format!("{v:.1} µs")),
        CPU_TOLERANCE * 100.0
    )?;
    match now {
        None => writeln!(
            w,
            "**Goal not measured**: no `release` footprint in this run."
        )?,
        Some(fp) => match verdict(fp, previous) {
            (true, _) => writeln!(
                w,
                "**Goal met**: every function ≤ 2 MB zipped (arm64), CPU per charge within +10 %."
            )?,
            (false, misses) => writeln!(w, "**Goal not met**: {}.", misses.join("; "))?,
        },
    }
    writeln!(w)?;

    writeln!(w, "Per profile on the x86-64 host (`BENCH_PROFILES`; the arm64 zips above are the `release` profile's):")?;
    writeln!(w)?;
    let mut rows = Vec::new();
    for fp in std::iter::once(previous).chain(footprints) {
        let label = if std::ptr::eq(fp, previous) {
            "previous release".to_owned()
        } else {
            format!("`{}`", fp["profile"].as_str().unwrap_or(""))
        };
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
                label.clone(),
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
            label,
            String::new(),
            "CPU per charge".into(),
            String::new(),
            String::new(),
            format!("{:.2} µs", f(&fp["cpu"]["cpu_us_per_charge"])),
        ]);
    }
    table(
        w,
        &[
            "build",
            "settings",
            "function",
            "stripped bootstrap",
            "zip",
            "init ms, median (min–max)",
        ],
        rows,
    )?;
    writeln!(w)?;
    let rss = now
        .and_then(|fp| serde_json::from_value::<RssRecord>(fp["rss"].clone()).ok())
        .or(rss);
    if let Some(rss) = rss {
        writeln!(
            w,
            "Peak RSS: {} kB (`VmHWM`) of a fresh process (release, x86-64 host) after handling one batch of {} with",
            rss.vm_hwm_kb, rss.batch_size
        )?;
        writeln!(w, "the in-memory ports and the functions' log subscriber: the handler in a plain process, **not** the Lambda")?;
        writeln!(w, "runtime, and without the AWS SDK and Stripe clients the real function also holds (not measured).")?;
        writeln!(w)?;
    }
    Ok(())
}

/// `doc` with its section 4 replaced by `section` ([`crate::report::replace_section`]).
pub fn splice(doc: &str, section: &str) -> Result<String, Error> {
    crate::report::replace_section(doc, 4, section)
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
                    "arm64_binary_bytes": zip * 2, "arm64_zip_bytes": zip,
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
    fn the_checked_in_previous_release_has_all_five_functions() {
        let p = previous().unwrap();
        for name in FUNCTIONS {
            let x = function(&p, name).unwrap_or_else(|| panic!("{name} missing"));
            assert!(u(&x["arm64_zip_bytes"]) > 0, "{name}");
            assert!(f(&x["init"]["median_ms"]) > 0.0, "{name}");
        }
        assert!(f(&p["cpu"]["cpu_us_per_charge"]) > 0.0);
        assert!(p["commit"].as_str().is_some_and(|c| c.len() == 40));
    }

    #[test]
    fn the_verdict_holds_zips_and_cpu_to_their_limits() {
        let before = footprint([3_000_000; 5], 10.0);
        assert!(verdict(&footprint([ZIP_LIMIT; 5], 11.0), &before).0);
        let (ok, misses) = verdict(&footprint([1, 1, ZIP_LIMIT + 1, 1, 1], 10.0), &before);
        assert!(!ok);
        assert_eq!(misses, ["reconciler: 2.00 MB > 2 MB"]);
        let (ok, misses) = verdict(&footprint([1; 5], 11.1), &before);
        assert!(
            !ok && misses[0].starts_with("CPU per charge 11.1"),
            "{misses:?}"
        );
        // A function whose arm64 zip was not measured does not pass.
        let mut partial = footprint([1; 5], 10.0);
        partial["functions"].as_array_mut().unwrap().pop();
        assert_eq!(
            verdict(&partial, &before).1,
            ["notify: arm64 zip not measured"]
        );
    }

    #[test]
    fn the_section_lists_every_function_beside_the_previous_release() {
        let before = footprint([3_000_000; 5], 10.0);
        let mut w = String::new();
        section(
            &mut w,
            &[footprint([1_500_000; 5], 10.5)],
            &before,
            None,
            "today",
        )
        .unwrap();
        for name in FUNCTIONS {
            assert!(
                w.contains(&format!("| {name} | 3.00 MB → 1.50 MB (-50 %) | yes |")),
                "{name}: {w}"
            );
        }
        assert!(w.contains("10.0 µs → 10.5 µs (+5 %)"), "{w}");
        assert!(w.contains("**Goal met**"), "{w}");
    }

    #[test]
    fn splice_replaces_section_4_only() {
        let doc = "# B\n\n## 3. x\n\nthree\n\n## 4. Footprint: old\n\nold\n\n## 5. y\n\nfive\n";
        let out = splice(doc, "## 4. new\n\nnew\n\n").unwrap();
        assert_eq!(
            out,
            "# B\n\n## 3. x\n\nthree\n\n## 4. new\n\nnew\n\n## 5. y\n\nfive\n"
        );
        let last = splice("# B\n\n## 4. old\n\nold\n", "## 4. new\n").unwrap();
        assert_eq!(last, "# B\n\n## 4. new\n");
        assert!(splice("# B\n\n## 5. y\n", "x").is_err());
    }
}
