//! What the measurements write and the sections read: the JSON files of `make bench`'s output
//! directory, as records, and how they are read back.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::wire::scenarios::Counts;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// One scenario of `wire.json`: what `bench wire` writes and `render` reads back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireRow {
    /// The [`crate::wire::scenarios::Scenario`] variant's name.
    pub scenario: String,
    pub label: String,
    pub ours: Counts,
    /// The seed's straight port on the same scenario; `None` where it has none (refunds).
    pub seed: Option<Counts>,
}

/// `rss.json`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct RssRecord {
    pub batch_size: usize,
    pub vm_hwm_kb: u64,
}

/// `cpu.json` and `cpu-logs.json` as `footprint::cpu::CpuResult::to_json` writes them: the fields
/// the report reads.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct CpuRecord {
    pub charges: u64,
    pub batch_size: u64,
    pub cpu_us_per_charge: f64,
    pub wall_us_per_charge: f64,
}

/// `DIR/name` read as JSON.
pub fn read<T: DeserializeOwned>(dir: &Path, name: &str) -> Result<T, Error> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?)
}

/// [`read`], or `None` when the file does not exist (a step left out of the run).
pub fn read_opt<T: DeserializeOwned>(dir: &Path, name: &str) -> Result<Option<T>, Error> {
    if dir.join(name).exists() {
        read(dir, name).map(Some)
    } else {
        Ok(None)
    }
}

/// Every `DIR/{prefix}*.json`, in file-name order.
pub fn read_all(dir: &Path, prefix: &str) -> Result<Vec<Value>, Error> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with(prefix) && name.ends_with(".json") {
            names.push(name);
        }
    }
    names.sort();
    names.iter().map(|name| read(dir, name)).collect()
}

/// `footprint-*.json` of `make bench` (one per profile), release first.
pub fn read_footprints(dir: &Path) -> Result<Vec<Value>, Error> {
    let mut out = read_all(dir, "footprint-")?;
    out.sort_by_key(|fp| {
        let p = fp["profile"].as_str().unwrap_or("").to_owned();
        (p != "release", p)
    });
    Ok(out)
}

/// A number of a report read as it is: 0 when absent.
pub fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// A number of a report read as it is: 0.0 when absent.
pub fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}
