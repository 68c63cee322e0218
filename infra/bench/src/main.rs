//! `bench`: the steps of `make bench` (driven by `infra/bench/run.sh`). Each step writes JSON;
//! `render` turns them into `BENCHMARKS.md`.
//!
//! ```text
//! bench wire   OUT.json                 request counts, ours and the seed's (needs moto)
//! bench index  OUT.json SETTLED         reconciler reads vs unsettled/settled (needs moto)
//! bench cpu    OUT.json CHARGES BATCH [logs|stderr]  CPU time per charge, in-memory ports
//! bench rss    OUT.json BATCH           peak RSS after one batch (run in a fresh process)
//! bench init   OUT.json FUNCTION BOOTSTRAP RUNS  init ms: exec to first invocation/next (needs moto + provisioned env)
//! bench bill   OUT.json [lambda_runtime]  every request of one charge by function, each event source and the relay (needs moto)
//! bench burst  DIR SIMULATE SVG_DIR     section 7's simulate --arrival-rate runs: DIR/burst-*.json, SVG_DIR/*.svg
//! bench lines  OUT.json [ROOT]          section 8's non-test lines of the tree at ROOT (default .)
//! bench render DIR OUT.md               BENCHMARKS.md from DIR/*.json
//! bench render-section burst DIR FILE.md  section 7 alone from DIR/burst-*.json, in place in FILE.md
//! bench render-section footprint DIR FILE.md  section 4 alone from DIR/footprint-*.json, likewise
//! bench render-section cost DIR FILE.md   section 5 alone from DIR/*.json, in place in FILE.md
//! bench render-section sim DIR FILE.md    section 3 alone from DIR/sim-*.json and DIR/cpu*.json, likewise
//! bench render-section lines DIR FILE.md  section 8 alone from DIR/lines.json, likewise
//! ```

use std::path::Path;

use bench::records::{RssRecord, WireRow};
use bench::wire::scenarios::{Ours, Scenario, Seed};

type Error = Box<dyn std::error::Error + Send + Sync>;

fn write_json(path: &str, value: &serde_json::Value) -> Result<(), Error> {
    std::fs::write(path, serde_json::to_string_pretty(value)? + "\n")?;
    Ok(())
}

fn arg(args: &[String], i: usize, what: &str) -> Result<String, Error> {
    args.get(i)
        .cloned()
        .ok_or_else(|| format!("missing {what}; see the usage in infra/bench/src/main.rs").into())
}

/// `bench wire OUT.json`.
fn wire(args: &[String]) -> Result<(), Error> {
    let out = arg(args, 2, "OUT.json")?;
    let rt = tokio::runtime::Runtime::new()?;
    let rows = rt.block_on(async {
        let mut rows = Vec::new();
        for scenario in Scenario::ALL {
            let ours = Ours::run(scenario).await;
            let seed = Seed::run(scenario).await;
            eprintln!("{scenario:?}: ours {ours:?}\n  seed {seed:?}");
            rows.push(WireRow {
                scenario: format!("{scenario:?}"),
                label: scenario.label().to_owned(),
                ours,
                seed: Some(seed),
            });
        }
        let refund = Ours::refund().await;
        eprintln!("Refund: ours {refund:?}");
        rows.push(WireRow {
            scenario: "Refund".into(),
            label: "a refund of the happy path's charge (the door + 1 delivery)".into(),
            ours: refund,
            seed: None,
        });
        let (authorized, captured) = Ours::authorize_and_capture().await;
        eprintln!("Authorize: ours {authorized:?}\n  Capture: ours {captured:?}");
        rows.push(WireRow {
            scenario: "Authorize".into(),
            label: "an authorization (checkout with capture manual + 1 delivery)".into(),
            ours: authorized,
            seed: None,
        });
        rows.push(WireRow {
            scenario: "Capture".into(),
            label: "its capture (the door + 1 delivery)".into(),
            ours: captured,
            seed: None,
        });
        rows
    });
    write_json(&out, &serde_json::to_value(&rows)?)
}

/// `bench index OUT.json SETTLED`.
fn index(args: &[String]) -> Result<(), Error> {
    let out = arg(args, 2, "OUT.json")?;
    let settled: usize = arg(args, 3, "SETTLED")?.parse()?;
    let rt = tokio::runtime::Runtime::new()?;
    let rows = rt.block_on(async {
        use bench::index_cost::IndexTable;
        let mut rows = Vec::new();
        // The same 1,000 unsettled among fewer settled operations, then among `settled`.
        let mut small = IndexTable::new().await;
        small.settled_to(settled / 10).await;
        small.unsettled_to(1_000).await;
        rows.push(small.measure().await);
        let mut big = IndexTable::new().await;
        let t = std::time::Instant::now();
        big.settled_to(settled).await;
        eprintln!("{settled} settled items written in {:?}", t.elapsed());
        for n in [10, 100, 1_000] {
            big.unsettled_to(n).await;
            rows.push(big.measure().await);
        }
        rows
    });
    for r in &rows {
        eprintln!("{r:?}");
    }
    write_json(&out, &serde_json::to_value(&rows)?)
}

/// `bench cpu OUT.json CHARGES BATCH [logs|stderr]`.
fn cpu(args: &[String]) -> Result<(), Error> {
    let out = arg(args, 2, "OUT.json")?;
    let charges: usize = arg(args, 3, "CHARGES")?.parse()?;
    let batch: usize = arg(args, 4, "BATCH")?.parse()?;
    let mode = args.get(5).map(String::as_str).unwrap_or("");
    let with_logs = mode == "logs" || mode == "stderr";
    if mode == "logs" {
        // The functions' own subscriber, writing nowhere.
        charge_once::logging::init_subscriber_with_writer(std::io::sink);
    } else if mode == "stderr" {
        // The same, writing to stderr (to see the lines a charge logs).
        charge_once::logging::init_subscriber_with_writer(std::io::stderr);
    }
    // A warm-up round, as a warm Lambda environment has had.
    bench::cpu::measure(charges.min(1_000), batch, with_logs);
    let r = bench::cpu::measure(charges, batch, with_logs);
    eprintln!(
        "{} charges, batch {}: {:.2} us CPU / charge, {:.2} us wall / charge",
        r.charges,
        r.batch_size,
        r.cpu_us_per_charge(),
        r.wall_us_per_charge()
    );
    write_json(&out, &r.to_json())
}

/// `bench rss OUT.json BATCH`.
fn rss(args: &[String]) -> Result<(), Error> {
    let out = arg(args, 2, "OUT.json")?;
    let batch: usize = arg(args, 3, "BATCH")?.parse()?;
    charge_once::logging::init_subscriber_with_writer(std::io::sink);
    let kb = bench::cpu::rss_after_one_batch(batch);
    eprintln!("peak RSS after one batch of {batch}: {kb} kB");
    write_json(
        &out,
        &serde_json::to_value(RssRecord {
            batch_size: batch,
            vm_hwm_kb: kb,
        })?,
    )
}

/// `bench init OUT.json FUNCTION BOOTSTRAP RUNS`.
fn init(args: &[String]) -> Result<(), Error> {
    let out = arg(args, 2, "OUT.json")?;
    let function = arg(args, 3, "FUNCTION")?;
    let bootstrap = arg(args, 4, "BOOTSTRAP")?;
    let runs: usize = arg(args, 5, "RUNS")?.parse()?;
    let r = bench::init::measure(Path::new(&bootstrap), &function, runs)?;
    eprintln!("{function} ({bootstrap}): init {r}");
    write_json(&out, &r)
}

/// `bench bill OUT.json [lambda_runtime]`.
fn bill(args: &[String]) -> Result<(), Error> {
    let out = arg(args, 2, "OUT.json")?;
    // One thread: the CPU time around each handler call is the thread's (see bill.rs).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // `lambda_runtime`: lambda_runtime's own subscriber, the one section 5 compares ours with.
    let subscriber = match args.get(3).map(String::as_str) {
        Some("lambda_runtime") => bench::logs::Subscriber::LambdaDefault,
        _ => bench::logs::Subscriber::Ours,
    };
    let record = rt.block_on(bench::bill::measure(subscriber));
    write_json(&out, &serde_json::to_value(&record)?)
}

/// `bench lines OUT.json [ROOT]`.
fn lines(args: &[String]) -> Result<(), Error> {
    let out = arg(args, 2, "OUT.json")?;
    let root = args.get(3).map_or(".", String::as_str);
    let lines = bench::lines::count_tree(Path::new(root))?;
    eprintln!("{lines:?}");
    write_json(&out, &serde_json::to_value(&lines)?)
}

/// `bench render DIR OUT.md`.
fn render(args: &[String]) -> Result<(), Error> {
    let dir = arg(args, 2, "DIR")?;
    let out = arg(args, 3, "OUT.md")?;
    let md = bench::render::render(Path::new(&dir), &bench::render::Run::from_env())?;
    std::fs::write(&out, md)?;
    eprintln!("wrote {out}");
    Ok(())
}

/// `bench burst DIR SIMULATE SVG_DIR`: the reference runs, then the grid.
fn burst(args: &[String]) -> Result<(), Error> {
    let dir = arg(args, 2, "DIR")?;
    let simulate = arg(args, 3, "SIMULATE")?;
    let svg_dir = arg(args, 4, "SVG_DIR")?;
    bench::burst::run_all(Path::new(&simulate), Path::new(&dir), Path::new(&svg_dir))?;
    bench::grid::run_all(Path::new(&simulate), Path::new(&dir))
}

/// `bench render-section SECTION DIR FILE.md`.
fn render_section(args: &[String]) -> Result<(), Error> {
    let name = arg(args, 2, "SECTION")?;
    let dir = arg(args, 3, "DIR")?;
    let file = arg(args, 4, "FILE.md")?;
    let doc = std::fs::read_to_string(&file).map_err(|e| format!("{file}: {e}"))?;
    let run = bench::render::Run::from_env();
    let (doc, number) = bench::render::render_section(&name, Path::new(&dir), &run, &doc)?;
    std::fs::write(&file, doc)?;
    eprintln!("replaced section {number} ({name}) of {file}");
    Ok(())
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    match arg(&args, 1, "command")?.as_str() {
        "wire" => wire(&args),
        "index" => index(&args),
        "cpu" => cpu(&args),
        "rss" => rss(&args),
        "init" => init(&args),
        "bill" => bill(&args),
        "lines" => lines(&args),
        "render" => render(&args),
        "burst" => burst(&args),
        "render-section" => render_section(&args),
        other => Err(format!("unknown command {other:?}; see infra/bench/src/main.rs").into()),
    }
}
