//! `footprint`: the per-profile steps of `make bench` (driven by `infra/bench/run.sh`).
//!
//! ```text
//! footprint cpu  OUT.json CHARGES BATCH [logs]         CPU time per charge, in-memory ports
//! footprint init OUT.json FUNCTION BOOTSTRAP RUNS      init ms: exec to the first invocation/next
//! footprint rss  OUT.json BATCH                        peak RSS after one batch (a fresh process)
//! ```

type Error = Box<dyn std::error::Error + Send + Sync>;

fn arg(args: &[String], i: usize, what: &str) -> Result<String, Error> {
    args.get(i)
        .cloned()
        .ok_or_else(|| format!("missing {what}; see infra/footprint/src/main.rs").into())
}

fn write_json(path: &str, value: &serde_json::Value) -> Result<(), Error> {
    std::fs::write(path, serde_json::to_string_pretty(value)? + "\n")?;
    Ok(())
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    match arg(&args, 1, "command")?.as_str() {
        "cpu" => {
            let out = arg(&args, 2, "OUT.json")?;
            let charges: usize = arg(&args, 3, "CHARGES")?.parse()?;
            let batch: usize = arg(&args, 4, "BATCH")?.parse()?;
            let with_logs = args.get(5).map(String::as_str) == Some("logs");
            if with_logs {
                charge_once::logging::init_subscriber_with_writer(std::io::sink);
            }
            footprint::cpu::measure(charges.min(1_000), batch, with_logs);
            let r = footprint::cpu::measure(charges, batch, with_logs);
            eprintln!(
                "{} charges, batch {}: {:.2} us CPU / charge",
                r.charges,
                r.batch_size,
                r.cpu_us_per_charge()
            );
            write_json(&out, &r.to_json())
        }
        "init" => {
            let out = arg(&args, 2, "OUT.json")?;
            let function = arg(&args, 3, "FUNCTION")?;
            let bootstrap = arg(&args, 4, "BOOTSTRAP")?;
            let runs: usize = arg(&args, 5, "RUNS")?.parse()?;
            let r = footprint::init::measure(std::path::Path::new(&bootstrap), &function, runs)?;
            eprintln!(
                "{function} ({bootstrap}): init median {:.1} ms, min {:.1}, max {:.1} over {runs} runs",
                r["median_ms"], r["min_ms"], r["max_ms"]
            );
            write_json(&out, &r)
        }
        "rss" => {
            let out = arg(&args, 2, "OUT.json")?;
            let batch: usize = arg(&args, 3, "BATCH")?.parse()?;
            charge_once::logging::init_subscriber_with_writer(std::io::sink);
            let kb = footprint::cpu::rss_after_one_batch(batch);
            write_json(
                &out,
                &serde_json::json!({"batch_size": batch, "vm_hwm_kb": kb}),
            )
        }
        other => Err(format!("unknown command {other:?}; see infra/footprint/src/main.rs").into()),
    }
}
