//! The docs stay true to the tree:
//! - every relative link in every Markdown file of the repository resolves to a file or folder that
//!   exists (a moved module, a renamed doc, a link written against an older layout fails here).
//!   Links to the web, to `mailto:` and to anchors of the same page are not checked; a link's own
//!   `#anchor` is not checked either, only the file it names;
//! - wherever the docs count the functions ("three functions"), the count is the template's, and
//!   the template's functions are the crates under `functions/`, each named in the README (its flow);
//! - every alarm of the template has its row in the runbook (`docs/operations.md`), and no other
//!   doc keeps a second alarm table to drift from it.

use std::path::{Path, PathBuf};

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let files = markdown_files(root);
    assert!(files.len() > 5, "only {} Markdown files found", files.len());
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        // bench's expected render is BENCHMARKS.md as `make bench` writes it at the root: its links
        // are the root's.
        let base = if file.ends_with("infra/bench/tests/render/expected.md") {
            root
        } else {
            file.parent().unwrap()
        };
        for (line, target) in broken_links(&text, base) {
            let shown = file.strip_prefix(root).unwrap().display();
            broken.push(format!("{shown}:{line}: {target}"));
        }
    }
    assert!(
        broken.is_empty(),
        "links that resolve to nothing:\n{}",
        broken.join("\n")
    );
}

/// The twin: a link to a missing file is reported with its line, one to a present file, a web
/// address, an anchor or a link inside a code block is not.
#[test]
fn a_link_to_a_missing_file_is_found_and_the_others_are_not() {
    let dir = std::env::temp_dir().join(format!("docs-links-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("docs")).unwrap();
    std::fs::write(dir.join("docs/here.md"), "# Here\n").unwrap();
    let text = "see [here](docs/here.md#here) and [web](https://example.com/x.md)\n\
                and [top](#top), then [gone](docs/gone.md \"title\")\n\
                ```\n[in code](nowhere.md)\n```\n\
                [ref]: ./docs/missing.md\n";
    let found = broken_links(text, &dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        found,
        vec![
            (2, "docs/gone.md".to_string()),
            (6, "./docs/missing.md".to_string())
        ]
    );
}

/// (line, target) of each relative link in `text` that names nothing under `base`.
fn broken_links(text: &str, base: &Path) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_code = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        for target in link_targets(line) {
            let path = target.split('#').next().unwrap();
            if path.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            if !base.join(path).exists() {
                out.push((n + 1, target));
            }
        }
    }
    out
}

/// The targets of `[text](target "title")` links and `[ref]: target` definitions on one line,
/// leaving out what sits between backticks.
fn link_targets(line: &str) -> Vec<String> {
    let line: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
        rest = &after[end..];
    }
    let trimmed = line.trim_start();
    if trimmed.starts_with('[') {
        if let Some((_, target)) = trimmed.split_once("]: ") {
            out.push(target.split_whitespace().next().unwrap_or("").to_string());
        }
    }
    out
}

fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        let skipped = name.starts_with('.') || name.starts_with("target") || name == "node_modules";
        if path.is_dir() && !skipped && !path.is_symlink() {
            out.extend(markdown_files(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    out.sort();
    out
}

#[test]
fn the_docs_count_and_name_the_template_s_functions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let template = std::fs::read_to_string(root.join("template.yaml")).unwrap();
    let names = template_functions(&template);
    assert_eq!(names.len(), 5, "the template's functions: {names:?}");
    let mut crates: Vec<String> = std::fs::read_dir(root.join("functions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    crates.sort();
    assert_eq!(
        crates, names,
        "functions/ holds one crate per function of the template"
    );
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for name in &names {
        let named = readme
            .split(|c: char| !c.is_alphanumeric())
            .any(|word| word == name);
        assert!(named, "README.md does not name the {name} function");
    }
    let mut wrong = Vec::new();
    for file in markdown_files(root) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, count) in function_counts(&text) {
            if count != names.len() {
                let shown = file.strip_prefix(root).unwrap().display();
                wrong.push(format!("{shown}:{line}: {count} functions"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the template has {} functions:\n{}",
        names.len(),
        wrong.join("\n")
    );
}

/// The twin: a count in words or digits before "functions" (with words that describe a function
/// between) is read; other numbers are not.
#[test]
fn a_function_count_is_read_in_words_or_digits() {
    let text =
        "three arm64 `provided.al2023` functions\nthe 5 functions\nfive orders, two retries\n";
    assert_eq!(function_counts(text), vec![(1, 3), (2, 5)]);
    let yaml = "  CheckoutFunction:\n    Type: AWS::Serverless::Function\n  Queue:\n    Type: AWS::SQS::Queue\n";
    assert_eq!(template_functions(yaml), vec!["checkout".to_string()]);
}

/// The template's functions by resource name (`CheckoutFunction` → `checkout`), sorted.
fn template_functions(template: &str) -> Vec<String> {
    let lines: Vec<&str> = template.lines().collect();
    let mut names: Vec<String> = lines
        .windows(2)
        .filter(|w| w[1].trim() == "Type: AWS::Serverless::Function")
        .map(|w| {
            w[0].trim()
                .trim_end_matches(':')
                .trim_end_matches("Function")
                .to_lowercase()
        })
        .collect();
    names.sort();
    names
}

/// (line, count) of each "N … functions" in `text`: a number (a word up to ten, or digits), then
/// only words that describe a function (arm64, Lambda, Rust, ...), then "functions".
fn function_counts(text: &str) -> Vec<(usize, usize)> {
    const DESCRIBING: [&str; 7] = [
        "arm64",
        "lambda",
        "rust",
        "provided.al2023",
        "deployed",
        "aws",
        "x86-64",
    ];
    const WORDS: [&str; 11] = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    ];
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let words: Vec<String> = line
            .split_whitespace()
            .map(|w| {
                w.trim_matches(|c: char| !c.is_alphanumeric())
                    .to_lowercase()
            })
            .collect();
        for (i, word) in words.iter().enumerate() {
            let count = WORDS
                .iter()
                .position(|w| w == word)
                .or_else(|| word.parse().ok());
            let Some(count) = count else { continue };
            // Only the words that describe a function may stand between ("five arm64 functions").
            let between: Vec<&String> = words[i + 1..]
                .iter()
                .take_while(|w| DESCRIBING.contains(&w.as_str()))
                .collect();
            if words
                .get(i + 1 + between.len())
                .is_some_and(|w| w == "functions")
            {
                out.push((n + 1, count));
            }
        }
    }
    out
}

#[test]
fn every_alarm_of_the_template_is_in_the_runbook_once() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let template = std::fs::read_to_string(root.join("template.yaml")).unwrap();
    let alarms = resources_of_type(&template, "AWS::CloudWatch::Alarm");
    assert!(alarms.len() >= 20, "the template's alarms: {alarms:?}");
    let runbook = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
    let missing: Vec<&String> = alarms
        .iter()
        .filter(|a| {
            !table_rows(&runbook)
                .iter()
                .any(|row| row.contains(&format!("`{a}`")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "alarms with no row in docs/operations.md: {missing:?}"
    );
    for file in markdown_files(root) {
        let text = std::fs::read_to_string(&file).unwrap();
        let tables = text.lines().filter(|l| is_alarm_table_header(l)).count();
        let allowed = usize::from(file.ends_with("docs/operations.md"));
        assert!(
            tables <= allowed,
            "{} keeps an alarm table of its own: link to docs/operations.md instead",
            file.strip_prefix(root).unwrap().display()
        );
    }
}

/// The header of a table of alarms: its first column is `alarm`.
fn is_alarm_table_header(line: &str) -> bool {
    line.trim_start()
        .strip_prefix('|')
        .and_then(|rest| rest.split('|').next())
        .is_some_and(|first| first.trim().eq_ignore_ascii_case("alarm"))
}

/// The twin: an alarm resource is read by name; a table row names it; a missing row is seen.
#[test]
fn an_alarm_without_a_runbook_row_is_seen() {
    let yaml =
        "  QueueAgeAlarm:\n    Type: AWS::CloudWatch::Alarm\n  Q:\n    Type: AWS::SQS::Queue\n";
    assert_eq!(
        resources_of_type(yaml, "AWS::CloudWatch::Alarm"),
        vec!["QueueAgeAlarm"]
    );
    let runbook = "| alarm | means |\n|---|---|\n| `QueueAgeAlarm` | old |\nprose `OtherAlarm`\n";
    let rows = table_rows(runbook);
    assert!(rows.iter().any(|r| r.contains("`QueueAgeAlarm`")));
    assert!(
        !rows.iter().any(|r| r.contains("`OtherAlarm`")),
        "prose is not a row"
    );
}

/// The lines of `text` that are rows of a Markdown table.
fn table_rows(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.trim_start().starts_with('|'))
        .collect()
}

/// The names of the template's resources of `kind`, in order.
fn resources_of_type(template: &str, kind: &str) -> Vec<String> {
    let lines: Vec<&str> = template.lines().collect();
    lines
        .windows(2)
        .filter(|w| w[1].trim() == format!("Type: {kind}"))
        .map(|w| w[0].trim().trim_end_matches(':').to_string())
        .collect()
}
