//! Section 8 of BENCHMARKS.md: the lines a reader reads, counted from the tree (`bench lines`)
//! beside the same count at an earlier commit (`infra/bench/lines-before.json`).
//!
//! Counted as the architecture reviews count, so the figures compare: a file's non-test lines are
//! its lines up to its first `#[cfg(test)]` module. A file under a `tests/` folder, or one that a
//! `#[cfg(test)] mod name;` brings in, is test code and counts none.
//!
//! The charge path is the README's reading list ("Start reading here"), read from the README at
//! each count: when the list changes, the count follows it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::markdown::{paragraph, thousands, Template};
use crate::template;

type Error = Box<dyn std::error::Error + Send + Sync>;

pub const TEMPLATE: Template = template!("8-code.md");

/// The figures before, checked in (see the file's `how`).
const BEFORE: &str = include_str!("../lines-before.json");

/// The product: what is deployed and what it is built from.
pub const PRODUCT: [&str; 3] = ["core", "shared", "functions"];
/// The tools: everything in Rust under `infra/`.
pub const TOOLS: [&str; 6] = [
    "infra/simulate",
    "infra/stripe-sim",
    "infra/bench",
    "infra/chargectl",
    "infra/release-fixtures",
    "infra/footprint",
];
/// Where a refund's own files are (its door, its rule, its plans): there, the files whose path
/// names `refund` (`refund_plan.rs`, a `refund/` folder).
pub const REFUND_IN: [&str; 2] = ["core/src", "functions/checkout/src"];

/// Non-test lines in so many files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Count {
    pub files: usize,
    pub lines: usize,
}

/// What `bench lines` writes (`lines.json`), and what `lines-before.json` records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lines {
    pub charge_path: Count,
    pub refund_path: Count,
    pub product: Count,
    pub tools: Count,
}

/// `lines-before.json`: [`Lines`] at `commit`, and how they were counted.
#[derive(Deserialize)]
struct Before {
    commit: String,
    how: String,
    lines: Lines,
}

/// The link targets of the README's reading list: the numbered list after "Start reading here".
pub fn reading_list(readme: &str) -> Vec<String> {
    let after = readme
        .split_once("Start reading here")
        .map_or("", |(_, a)| a);
    let numbered = |l: &str| {
        l.split_once(". ")
            .is_some_and(|(n, _)| n.parse::<u32>().is_ok())
    };
    let list = after.lines().skip_while(|l| !numbered(l));
    let mut targets = Vec::new();
    for line in list.take_while(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        for (_, rest) in line.match_indices("](").map(|(i, _)| line.split_at(i + 2)) {
            let target = &rest[..rest.find(')').unwrap_or(rest.len())];
            if !target.contains("://") && !targets.iter().any(|t| t == target) {
                targets.push(target.to_owned());
            }
        }
    }
    targets
}

/// The lines of `text` before its first `#[cfg(test)]` module.
pub fn non_test_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    (0..lines.len())
        .find(|&i| {
            lines[i].trim_start().starts_with("#[cfg(test)]") && test_module(&lines[i..]).is_some()
        })
        .unwrap_or(lines.len())
}

/// The module `lines` (from a `#[cfg(test)]` on) opens, past any further attributes: its name,
/// and whether its body is in another file (`mod name;`).
fn test_module<'a>(lines: &[&'a str]) -> Option<(&'a str, bool)> {
    let first = lines[0].trim_start()["#[cfg(test)]".len()..].trim();
    let item = std::iter::once(first)
        .chain(lines[1..].iter().map(|l| l.trim()))
        .find(|l| !l.is_empty() && !l.starts_with("#["))?;
    let item = item
        .strip_prefix("pub ")
        .or(item.strip_prefix("pub(crate) "))
        .unwrap_or(item);
    let rest = item.strip_prefix("mod ")?;
    let name = rest
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .next()?;
    Some((name, rest[name.len()..].trim_start().starts_with(';')))
}

/// Every `.rs` file at or under `path`, in name order.
fn rust_files(path: &Path, out: &mut BTreeSet<PathBuf>) -> Result<(), Error> {
    if path.is_file() {
        if path.extension().is_some_and(|e| e == "rs") {
            out.insert(path.to_owned());
        }
        return Ok(());
    }
    let entries = std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for entry in entries {
        let p = entry?.path();
        if p.file_name().is_some_and(|n| n != "target") {
            rust_files(&p, out)?;
        }
    }
    Ok(())
}

/// The non-test lines of `paths` (files or folders under `root`) and how many files hold them.
pub fn count(root: &Path, paths: &[impl AsRef<str>]) -> Result<Count, Error> {
    let mut files = BTreeSet::new();
    for p in paths {
        rust_files(&root.join(p.as_ref()), &mut files)?;
    }
    let mut test_files = BTreeSet::new();
    let mut texts = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        // `a/lib.rs`, `a/main.rs`, `a/mod.rs` keep their modules in `a/`; `a/b.rs` in `a/b/`.
        let stem = file.file_stem().unwrap_or_default();
        let dir = match stem.to_str() {
            Some("lib" | "main" | "mod") => file.with_file_name(""),
            _ => file.with_extension(""),
        };
        let lines: Vec<&str> = text.lines().collect();
        for i in (0..lines.len()).filter(|&i| lines[i].trim_start().starts_with("#[cfg(test)]")) {
            if let Some((name, true)) = test_module(&lines[i..]) {
                test_files.insert(dir.join(format!("{name}.rs")));
                test_files.insert(dir.join(name).join("mod.rs"));
            }
        }
        texts.push((file.clone(), non_test_lines(&text)));
    }
    let production = texts.into_iter().filter(|(file, _)| {
        !test_files.contains(file)
            && !file
                .strip_prefix(root)
                .unwrap_or(file)
                .components()
                .any(|c| c.as_os_str() == "tests")
    });
    let (files, lines) = production.fold((0, 0), |(f, l), (_, n)| (f + 1, l + n));
    Ok(Count { files, lines })
}

/// A refund's own files under `root` (see [`REFUND_IN`]), as paths from `root`.
pub fn refund_files(root: &Path) -> Result<Vec<String>, Error> {
    let mut files = BTreeSet::new();
    for dir in REFUND_IN {
        rust_files(&root.join(dir), &mut files)?;
    }
    let named = |f: &Path| f.iter().any(|c| c.to_string_lossy().starts_with("refund"));
    Ok(files
        .iter()
        .filter_map(|f| f.strip_prefix(root).ok())
        .filter(|f| named(f))
        .map(|f| f.to_string_lossy().into_owned())
        .collect())
}

/// The four counts of the tree at `root`.
pub fn count_tree(root: &Path) -> Result<Lines, Error> {
    let readme = std::fs::read_to_string(root.join("README.md"))?;
    let charge = reading_list(&readme);
    if charge.is_empty() {
        return Err("README.md: no reading list after \"Start reading here\"".into());
    }
    let refund = [charge.clone(), refund_files(root)?].concat();
    Ok(Lines {
        charge_path: count(root, &charge)?,
        refund_path: count(root, &refund)?,
        product: count(root, &PRODUCT)?,
        tools: count(root, &TOOLS)?,
    })
}

/// `a`, `b`, `c`.
fn listed<const N: usize>(paths: [&str; N]) -> String {
    paths.map(|p| format!("`{p}`")).join(", ")
}

/// Section 8 from `now` (counted on `date`) and the recorded figures before.
pub fn section(now: &Lines, date: &str) -> Result<String, Error> {
    let before: Before =
        serde_json::from_str(BEFORE).map_err(|e| format!("lines-before.json: {e}"))?;
    let cell = |c: Count| format!("{} ({} files)", thousands(c.lines as u64), c.files);
    let ratio = |l: &Lines| format!("{:.2}", l.tools.lines as f64 / l.product.lines as f64);
    let b = &before.lines;
    TEMPLATE.fill(
        "main",
        &[
            ("date", date.to_owned()),
            ("commit", before.commit.clone()),
            ("how", paragraph(&before.how).trim_end().to_owned()),
            ("refund", listed(REFUND_IN)),
            ("product", listed(PRODUCT)),
            ("tools", listed(TOOLS)),
            ("charge_before", cell(b.charge_path)),
            ("charge_now", cell(now.charge_path)),
            ("refund_before", cell(b.refund_path)),
            ("refund_now", cell(now.refund_path)),
            ("product_before", cell(b.product)),
            ("product_now", cell(now.product)),
            ("tools_before", cell(b.tools)),
            ("tools_now", cell(now.tools)),
            ("ratio_before", ratio(b)),
            ("ratio_now", ratio(now)),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_counts_up_to_its_first_test_module() {
        let text = "//! a\n#[cfg(test)]\nuse x;\nfn a() {}\n#[cfg(test)]\n#[allow(unused)]\nmod tests {\n}\n";
        assert_eq!(non_test_lines(text), 4);
        assert_eq!(
            non_test_lines("fn a() {}\n#[cfg(test)] pub(crate) mod t {}\n"),
            1
        );
        assert_eq!(non_test_lines("fn a() {}\nfn b() {}\n"), 2);
        assert_eq!(
            test_module(&["#[cfg(test)]", "mod spec;"]),
            Some(("spec", true))
        );
        assert_eq!(test_module(&["#[cfg(test)]", "fn f() {}"]), None);
    }

    #[test]
    fn the_reading_list_is_the_numbered_list_after_start_reading_here() {
        let readme = "[a](x.md)\n**Start reading here** ([core](core/src/lib.rs)):\n\
            1. [`a.rs`](a.rs): one, and [`b`](core/src/b/) beside it.\n\
            2. [`c.rs`](c.rs) and [docs](https://example.com) and [`a.rs`](a.rs) again.\n\
            \n3. [`d.rs`](d.rs): after the list.\n";
        assert_eq!(reading_list(readme), ["a.rs", "core/src/b/", "c.rs"]);
        assert!(reading_list("no list").is_empty());
    }

    #[test]
    fn tests_folders_and_files_a_test_module_brings_in_count_none() {
        let root = std::env::temp_dir().join(format!("bench-lines-{}", std::process::id()));
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write("c/src/lib.rs", "mod plan;\n#[cfg(test)]\nmod spec;\n");
        write("c/src/plan.rs", "fn a() {}\n\n#[cfg(test)]\nmod tests;\n");
        write("c/src/plan/tests.rs", "fn t() {}\n");
        write("c/src/spec.rs", "fn s() {}\n");
        write("c/tests/it.rs", "fn it() {}\n");
        write("c/target/debug/x.rs", "fn built() {}\n");
        write("c/README.md", "not Rust\n");
        let counted = count(&root, &["c"]).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(counted, Count { files: 2, lines: 3 });
    }
}
