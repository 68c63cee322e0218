//! BENCHMARKS.md from the JSON `make bench` writes: each section's figures read from the output
//! directory and filled into its template (`infra/bench/templates/`, see [`crate::markdown`]).
//! `render` writes the whole file; `render_section` replaces one section of an existing one.

use std::path::Path;

use crate::index_cost::IndexRow;
use crate::markdown::{replace_section, Template};
use crate::records::{read, read_footprints, read_opt, WireRow};
use crate::template;

pub mod burst;
pub mod cost;
pub mod footprint;
pub mod requests;
pub mod targets;
pub mod throughput;

type Error = Box<dyn std::error::Error + Send + Sync>;

const HEADER: Template = template!("header.md");

/// When the measurements ran and on what.
pub struct Run {
    /// `BENCH_DATE`.
    pub date: String,
    /// `BENCH_SIM_PROFILE`: the profile `simulate` was built with.
    pub sim_profile: String,
    pub cores: usize,
    pub model: String,
}

impl Run {
    /// From the environment `infra/bench/run.sh` sets, and this machine.
    pub fn from_env() -> Self {
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find(|l| l.starts_with("model name") || l.starts_with("Model"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        Self {
            date: std::env::var("BENCH_DATE").unwrap_or_else(|_| "unknown".into()),
            sim_profile: std::env::var("BENCH_SIM_PROFILE").unwrap_or_else(|_| "sim".into()),
            cores,
            model,
        }
    }
}

fn throughput(dir: &Path, run: &Run) -> Result<String, Error> {
    let t = throughput::Throughput::read(dir, &run.sim_profile)?;
    throughput::section(&t)
}

fn footprint(dir: &Path, run: &Run) -> Result<String, Error> {
    footprint::section(
        &read_footprints(dir)?,
        &footprint::previous()?,
        read_opt(dir, "rss.json")?,
        &run.date,
    )
}

/// Section 7, ending with a blank line as every section before the last does.
fn burst(dir: &Path, run: &Run) -> Result<String, Error> {
    Ok(burst::section(
        &crate::burst::read_reports(dir)?,
        &crate::grid::read_reports(dir)?,
        read_opt::<serde_json::Value>(dir, "burst-wire.json")?.as_ref(),
        read_opt::<serde_json::Value>(dir, "burst-wire-no-carry.json")?.as_ref(),
        &run.date,
    )? + "\n")
}

/// Section 8, from `lines.json`.
fn lines(dir: &Path, run: &Run) -> Result<String, Error> {
    crate::lines::section(&read(dir, "lines.json")?, &run.date)
}

/// The opening: when and where the run was made, and every target against it.
fn header(dir: &Path, run: &Run) -> Result<String, Error> {
    let rows: Vec<WireRow> = read(dir, "wire.json")?;
    let index: Vec<IndexRow> = read(dir, "index.json")?;
    let footprints = read_footprints(dir)?;
    let faults = throughput::Throughput::read(dir, &run.sim_profile)?.faults;
    let charge_path = cost::charge_path_full(dir, &footprints)?;
    let targets = targets::all(dir, &rows, &index, &faults, &footprints, charge_path)?;
    HEADER.fill(
        "main",
        &[
            ("date", run.date.clone()),
            ("cores", run.cores.to_string()),
            ("model", run.model.clone()),
            ("targets", targets::table(&targets)),
        ],
    )
}

/// The whole of BENCHMARKS.md from `dir`, opening with every target against this run. Steps left
/// out of a run (`BENCH_STEPS`) whose JSON is absent render as "not measured"; sections 1, 2 and 6
/// need theirs.
pub fn render(dir: &Path, run: &Run) -> Result<String, Error> {
    let mut md = header(dir, run)?;
    md += &requests::requests(&read::<Vec<WireRow>>(dir, "wire.json")?)?;
    md += &throughput(dir, run)?;
    md += &footprint(dir, run)?;
    md += &cost::section(dir, &read_footprints(dir)?)?;
    md += &requests::reads(read::<Vec<IndexRow>>(dir, "index.json")?)?;
    md += &burst(dir, run)?;
    md += &lines(dir, run)?;
    Ok(md)
}

/// `doc` with the section `name` (`sim`, `footprint`, `cost`, `burst` or `lines`) rendered again
/// from `dir`, and that section's number. The opening table is rendered again too, from every
/// report in `dir` (the section's new ones and the last full run's others), so it never lags a
/// section; but not for `lines`, which no target reads.
pub fn render_section(
    name: &str,
    dir: &Path,
    run: &Run,
    doc: &str,
) -> Result<(String, u32), Error> {
    let (section, number) = match name {
        "sim" => (throughput(dir, run)?, 3),
        "footprint" => (footprint(dir, run)?, 4),
        "cost" => (cost::section(dir, &read_footprints(dir)?)?, 5),
        "burst" => (burst(dir, run)?, 7),
        "lines" => return Ok((replace_section(doc, 8, &lines(dir, run)?)?, 8)),
        _ => {
            return Err(format!(
                "unknown section {name:?}: `sim` (3), `footprint` (4), `cost` (5), `burst` (7) and `lines` (8) render alone"
            )
            .into())
        }
    };
    let doc = replace_section(doc, number, &section)?;
    let first = doc
        .find("\n## 1.")
        .ok_or("BENCHMARKS.md has no section 1; run `make bench` in full")?;
    let header = header(dir, run).map_err(|e| {
        format!(
            "the opening table needs a full run's reports in {}: {e}",
            dir.display()
        )
    })?;
    Ok((header + &doc[first + 1..], number))
}
