//! BENCHMARKS.md rendered from a recorded output directory (`tests/render/data`: every JSON file a
//! full `make bench` writes) is the expected file, byte for byte: a change to a template or to the
//! code that fills it shows here as a diff of `tests/render/expected.md`. After a deliberate
//! change, write the new file with `BENCH_EXPECT_WRITE=1 cargo test -p bench --test render`.

use std::path::Path;

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
    for (name, number) in [("sim", 3), ("footprint", 4), ("cost", 5), ("burst", 7)] {
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
