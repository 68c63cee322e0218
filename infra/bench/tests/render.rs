//! BENCHMARKS.md rendered from a recorded output directory (`tests/render/data`: every JSON file a
//! full `make bench` writes) is the expected file, byte for byte: a change to a template or to the
//! code that fills it shows here as a diff of `tests/render/expected.md`. After a deliberate
//! change, write the new file with `BENCH_EXPECT_WRITE=1 cargo test -p bench --test render`.
//! And the root's BENCHMARKS.md keeps no hand-written section 8: it is its template filled, from
//! paths that `bench lines` finds in the tree.

use std::path::Path;

use bench::lines::{count, count_tree, reading_list, refund_files, TEMPLATE};
use bench::markdown::replace_section;
use bench::render::{render, render_section, Run};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/render");

fn run() -> Run {
    Run {
        date: "2026-12-03 12:00 UTC".into(),
        sim_profile: "sim".into(),
        cores: 2,
        model: "AMD EPYC".into(),
    }
}

fn rendered() -> String {
    render(&Path::new(DIR).join("data"), &run()).unwrap()
}

#[test]
fn the_recorded_run_renders_as_expected() {
    let expected_path = Path::new(DIR).join("expected.md");
    let md = rendered();
    if std::env::var_os("BENCH_EXPECT_WRITE").is_some() {
        std::fs::write(&expected_path, &md).unwrap();
    }
    let expected = std::fs::read_to_string(&expected_path).unwrap();
    if md != expected {
        let first = md
            .lines()
            .zip(expected.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(md.lines().count().min(expected.lines().count()));
        panic!(
            "rendered BENCHMARKS.md differs from tests/render/expected.md from line {}:\n  rendered: {:?}\n  expected: {:?}",
            first + 1,
            md.lines().nth(first),
            expected.lines().nth(first)
        );
    }
}

#[test]
fn each_section_rendered_alone_replaces_its_stale_self_in_the_whole() {
    let dir = Path::new(DIR).join("data");
    let whole = render(&dir, &run()).unwrap();
    for (name, number) in [
        ("sim", 3),
        ("footprint", 4),
        ("cost", 5),
        ("burst", 7),
        ("lines", 8),
    ] {
        let stale =
            replace_section(&whole, number, &format!("## {number}. stale\n\nold\n\n")).unwrap();
        assert_ne!(stale, whole);
        let (again, n) = render_section(name, &dir, &run(), &stale).unwrap();
        assert_eq!(n, number);
        assert!(
            again == whole,
            "section {number} ({name}) rendered alone differs"
        );
    }
    assert!(render_section("index", &dir, &run(), &whole).is_err());
}

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// BENCHMARKS.md's section 8 is a snapshot of the counts, so it is not held to today's tree; but it
/// is the template's own text, every figure in a cell the renderer fills (none kept by hand).
#[test]
fn benchmarks_md_section_8_is_the_renderers() {
    let doc = std::fs::read_to_string(Path::new(ROOT).join("BENCHMARKS.md")).unwrap();
    let section = &doc[doc.find("\n## 8.").expect("BENCHMARKS.md has a section 8") + 1..];
    assert!(
        TEMPLATE.matches("main", section).unwrap(),
        "BENCHMARKS.md's section 8 is not its template filled: render it with `BENCH_ONLY=lines make bench`"
    );
}

/// The charge path `bench lines` counts is the README's reading list, every entry of it a file
/// (or folder) of Rust in the tree; the refund path adds a refund's door, rule and plans.
#[test]
fn the_counted_paths_are_the_readmes_reading_list_and_exist() {
    let root = Path::new(ROOT);
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let list = reading_list(&readme);
    assert!(
        list.iter().any(|p| p.starts_with("functions/checkout/")),
        "{list:?}"
    );
    for path in &list {
        let counted = count(root, &[path]).unwrap();
        assert!(
            counted.files > 0 && counted.lines > 0,
            "{path}: {counted:?}"
        );
    }
    let refund = refund_files(root).unwrap();
    assert!(
        refund.iter().any(|p| p.starts_with("functions/checkout/")),
        "{refund:?}"
    );
    assert!(refund.iter().any(|p| p.starts_with("core/")), "{refund:?}");
    let lines = count_tree(root).unwrap();
    assert_eq!(lines.charge_path, count(root, &list).unwrap());
    assert!(lines.refund_path.files > lines.charge_path.files);
}
