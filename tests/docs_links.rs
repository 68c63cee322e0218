//! The docs stay true to the tree:
//! - every relative link in every Markdown file of the repository resolves to a file or folder that
//!   exists (a moved module, a renamed doc, a link written against an older layout fails here).
//!   Links to the web, to `mailto:` and to anchors of the same page are not checked; a link's own
//!   `#anchor` is not checked either, only the file it names;
//! - wherever the docs count the functions ("three functions"), the count is the template's, and
//!   the template's functions are the crates under `functions/`, each named in the README (its flow);
//! - the runbook's alarm table (`docs/operations.md`) is the template's alarms, each with its own
//!   `AlarmDescription`, in the template's order (`DOCS_WRITE=1` writes it again from the
//!   template), and no other doc keeps a second alarm table to drift from it;
//! - the README's table of figures is rows of BENCHMARKS.md's opening table, as they are there;
//! - docs/how-it-works.md's subscription rule names every outcome `detail-type` the schema
//!   (`docs/outcome-event.schema.json`) allows, so a team that copies it hears every outcome;
//! - docs/deploy.md's table of emulator gaps is `infra/deploy-local/gaps.json`, the file the
//!   deploy names them from (`DOCS_WRITE=1` writes it again), and each resource it leaves out is
//!   one the template has, of the type it says.

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
    assert_eq!(names.len(), 6, "the template's functions: {names:?}");
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
    let yaml = "  CheckoutFunction:\n    Type: AWS::Serverless::Function\n    Properties:\n      CodeUri: functions/checkout\n  Queue:\n    Type: AWS::SQS::Queue\n";
    assert_eq!(template_functions(yaml), vec!["checkout".to_string()]);
}

/// The template's functions by crate (`CodeUri: functions/checkout` → `checkout`), sorted: the
/// crate, not the logical id, which for the events function stays `WebhookFunction` (deployed).
fn template_functions(template: &str) -> Vec<String> {
    let lines: Vec<&str> = template.lines().collect();
    let mut names: Vec<String> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.trim() == "Type: AWS::Serverless::Function")
        .filter_map(|(i, _)| {
            let uri = lines[i..]
                .iter()
                .find_map(|l| l.trim().strip_prefix("CodeUri:"))?;
            Some(
                uri.trim()
                    .trim_end_matches('/')
                    .rsplit('/')
                    .next()?
                    .to_owned(),
            )
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

const ALARMS_BEGIN: &str = "<!-- alarms: from template.yaml";
const ALARMS_END: &str = "<!-- /alarms -->";

#[test]
fn the_runbook_s_alarm_table_is_the_template_s_alarms_as_described_there() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let template = std::fs::read_to_string(root.join("template.yaml")).unwrap();
    let alarms = alarm_descriptions(&template);
    assert!(alarms.len() >= 20, "the template's alarms: {alarms:?}");
    hold_generated_block(
        &root.join("docs/operations.md"),
        (ALARMS_BEGIN, ALARMS_END),
        &alarm_table(&alarms),
        "template.yaml",
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

/// The twin: a row missing, a description reworded and an alarm the template lacks are each seen;
/// the table written from the template is accepted.
#[test]
fn a_runbook_row_missing_or_worded_otherwise_is_seen() {
    let yaml = "  QueueAgeAlarm:\n    Type: AWS::CloudWatch::Alarm\n    Properties:\n      AlarmDescription: >-\n        The oldest message is\n        old. First run: x.\n      Namespace: AWS/SQS\n  Q:\n    Type: AWS::SQS::Queue\n  DlqAlarm:\n    Type: AWS::CloudWatch::Alarm\n    Properties:\n      AlarmDescription: >-\n        The DLQ holds a message.\n";
    let alarms = alarm_descriptions(yaml);
    assert_eq!(
        alarms,
        vec![
            (
                "QueueAgeAlarm".to_owned(),
                "The oldest message is old. First run: x.".to_owned()
            ),
            ("DlqAlarm".to_owned(), "The DLQ holds a message.".to_owned()),
        ]
    );
    let good = alarm_table(&alarms);
    let doc = format!("# Runbook\n{ALARMS_BEGIN} -->\n{good}{ALARMS_END}\nmore\n");
    let (_, table, _) = block(&doc, ALARMS_BEGIN, ALARMS_END).unwrap();
    assert!(differing_rows(table, &good).is_empty());
    let reworded = good.replace("is old.", "is stale.");
    let missing: String = good
        .lines()
        .filter(|l| !l.contains("Dlq"))
        .map(|l| format!("{l}\n"))
        .collect();
    let extra = format!("{good}| `GoneAlarm` | removed from the template |\n");
    for wrong in [reworded, missing, extra] {
        assert!(!differing_rows(&wrong, &good).is_empty(), "{wrong}");
    }
}

/// Each `AWS::CloudWatch::Alarm` of the template with its `AlarmDescription` (a folded `>-`
/// scalar: its lines joined by spaces), in the template's order.
fn alarm_descriptions(template: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = template.lines().collect();
    let mut out = Vec::new();
    for (i, w) in lines.windows(2).enumerate() {
        if w[1].trim() != "Type: AWS::CloudWatch::Alarm" {
            continue;
        }
        let name = w[0].trim().trim_end_matches(':').to_owned();
        let indent = |l: &str| l.len() - l.trim_start().len();
        let resource_indent = indent(w[0]);
        let body = lines[i + 1..]
            .iter()
            .take_while(|l| l.trim().is_empty() || indent(l) > resource_indent);
        let mut description = None::<Vec<&str>>;
        let mut key_indent = 0;
        for l in body {
            match &mut description {
                None if l.trim() == "AlarmDescription: >-" => {
                    key_indent = indent(l);
                    description = Some(Vec::new());
                }
                Some(words) if indent(l) > key_indent => words.push(l.trim()),
                Some(_) => break,
                None => {}
            }
        }
        out.push((name, description.unwrap_or_default().join(" ")));
    }
    out
}

/// The runbook's table, as the template describes its alarms.
fn alarm_table(alarms: &[(String, String)]) -> String {
    let mut out = String::from(
        "| alarm | what it means, and the first command (its `AlarmDescription`) |\n|---|---|\n",
    );
    for (name, description) in alarms {
        out += &format!("| `{name}` | {} |\n", description.replace('|', "\\|"));
    }
    out
}

/// The rows of `table` that `expected` lacks, and those of `expected` that `table` lacks.
fn differing_rows(table: &str, expected: &str) -> Vec<String> {
    let rows = |t: &str| t.lines().map(str::to_owned).collect::<Vec<_>>();
    let (have, want) = (rows(table), rows(expected));
    let mut out: Vec<String> = want
        .iter()
        .filter(|r| !have.contains(r))
        .map(|r| format!("missing or worded otherwise: {r}"))
        .collect();
    out.extend(
        have.iter()
            .filter(|r| !want.contains(r))
            .map(|r| format!("not the template's: {r}")),
    );
    out
}

/// The header of a table of alarms: its first column is `alarm`.
fn is_alarm_table_header(line: &str) -> bool {
    line.trim_start()
        .strip_prefix('|')
        .and_then(|rest| rest.split('|').next())
        .is_some_and(|first| first.trim().eq_ignore_ascii_case("alarm"))
}

const FIGURES_BEGIN: &str = "<!-- figures: rows of BENCHMARKS.md's opening table";
const FIGURES_END: &str = "<!-- /figures -->";

#[test]
fn the_readme_s_figures_are_benchmarks_md_s() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let benchmarks = std::fs::read_to_string(root.join("BENCHMARKS.md")).unwrap();
    let quoted = figure_rows(&readme);
    assert!(
        quoted.len() >= 3,
        "the README quotes no figures: {quoted:?}"
    );
    let stale = rows_not_in_opening_table(&quoted, &benchmarks);
    assert!(
        stale.is_empty(),
        "README.md quotes figures BENCHMARKS.md's opening table does not have (copy its rows again): {stale:#?}"
    );
}

/// The twin: a figure changed in the README, or a row from a later section, is seen.
#[test]
fn a_readme_figure_other_than_benchmarks_md_s_is_seen() {
    let bench = "# B\n\n| target | measured | met |\n|---|---|---|\n| drain ≤ 1.15 × N/L | 1.148 × N/L | yes |\n\n## 1. x\n\n| later | 1 | yes |\n";
    let readme = |row: &str| {
        format!("intro\n{FIGURES_BEGIN} -->\n| target | measured | met |\n|---|---|---|\n{row}\n{FIGURES_END}\n")
    };
    let rows = figure_rows(&readme("| drain ≤ 1.15 × N/L | 1.148 × N/L | yes |"));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows_not_in_opening_table(&rows, bench).is_empty());
    for wrong in [
        "| drain ≤ 1.15 × N/L | 1.100 × N/L | yes |",
        "| later | 1 | yes |",
    ] {
        let rows = figure_rows(&readme(wrong));
        assert_eq!(
            rows_not_in_opening_table(&rows, bench),
            vec![wrong.to_owned()]
        );
    }
}

/// The data rows of the README's figures block (its header and separator left out).
fn figure_rows(readme: &str) -> Vec<String> {
    let Some(begin) = readme.find(FIGURES_BEGIN) else {
        return Vec::new();
    };
    let block = &readme[begin..];
    let block = &block[..block.find(FIGURES_END).unwrap_or(block.len())];
    block
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---") && !l.starts_with("| target |"))
        .map(str::to_owned)
        .collect()
}

/// The rows of `rows` that BENCHMARKS.md's opening table (the text before its section 1) lacks.
fn rows_not_in_opening_table(rows: &[String], benchmarks: &str) -> Vec<String> {
    let opening = &benchmarks[..benchmarks.find("\n## 1.").unwrap_or(benchmarks.len())];
    let table: Vec<&str> = opening.lines().filter(|l| l.starts_with('|')).collect();
    rows.iter()
        .filter(|r| !table.contains(&r.as_str()))
        .cloned()
        .collect()
}

const GAPS_BEGIN: &str = "<!-- emulator gaps: rendered from infra/deploy-local/gaps.json";
const GAPS_END: &str = "<!-- /emulator gaps -->";

/// The emulator gaps `make deploy-local` meets (infra/deploy-local/gaps.json, which deploy.py
/// reads to name them in its output and to leave out what cannot be provisioned) are the table of
/// docs/deploy.md, each with the emulator's reason, its source line and what holds that part
/// instead (`DOCS_WRITE=1` writes it again from the file).
#[test]
fn docs_deploy_lists_every_emulator_gap_the_deploy_names() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let gaps: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("infra/deploy-local/gaps.json")).unwrap(),
    )
    .unwrap();
    let expected = gaps_table(&gaps);
    assert!(
        expected.lines().count() >= 2 + 6,
        "every kind of gap has its rows: {expected}"
    );
    hold_generated_block(
        &root.join("docs/deploy.md"),
        (GAPS_BEGIN, GAPS_END),
        &expected,
        "infra/deploy-local/gaps.json",
    );
    // Every resource left out names one the template has, of the type it says.
    let template = std::fs::read_to_string(root.join("template.yaml")).unwrap();
    for gap in gaps["not_provisioned"].as_array().unwrap() {
        let name = gap["resource"].as_str().unwrap();
        let start = template
            .find(&format!("\n  {name}:\n"))
            .unwrap_or_else(|| panic!("gaps.json leaves out {name}, which template.yaml lacks"));
        let ty = gap["type"].as_str().unwrap().split(' ').next().unwrap();
        let type_line = template[start + 1..]
            .lines()
            .find(|l| l.trim_start().starts_with("Type:"))
            .unwrap();
        assert_eq!(type_line.trim(), format!("Type: {ty}"), "{name}");
    }
}

/// The twin: a gap missing from the doc, or reworded there, is seen.
#[test]
fn an_emulator_gap_missing_from_the_doc_is_seen() {
    let gaps = serde_json::json!({
        "not_provisioned": [{"resource": "R", "type": "AWS::X::Y", "emulator": "refused", "source": "a.py:1", "held_by": "a test"}],
        "stand_ins": [{"what": "K", "emulator": "a list", "source": "b.py:2", "held_by": "a shim"}],
        "not_evaluated": [{"what": "L", "emulator": "ignored", "source": "c.py:3", "held_by": "a static test"}],
    });
    let good = gaps_table(&gaps);
    assert!(good.contains("`R`") && good.contains("b.py:2") && good.contains("a static test"));
    let doc = format!("x\n{GAPS_BEGIN} -->\n{good}{GAPS_END}\n");
    let (_, table, _) = block(&doc, GAPS_BEGIN, GAPS_END).unwrap();
    assert!(differing_rows(table, &good).is_empty());
    let missing: String = good
        .lines()
        .filter(|l| !l.contains("`R`"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(differing_rows(&missing, &good).len(), 1);
    assert_eq!(
        differing_rows(&good.replace("refused", "ignored"), &good).len(),
        2
    );
}

/// docs/deploy.md's table of the emulator's gaps, from gaps.json.
fn gaps_table(gaps: &serde_json::Value) -> String {
    let mut out = String::from(
        "| gap | what | the emulator | source (ministack) | what holds it instead |\n|---|---|---|---|---|\n",
    );
    let cell = |s: &str| s.replace('|', "\\|");
    for (kind, label, what) in [
        ("not_provisioned", "not provisioned", "resource"),
        ("stand_ins", "stood in for", "what"),
        ("not_evaluated", "not evaluated", "what"),
    ] {
        for gap in gaps[kind].as_array().into_iter().flatten() {
            let named = gap[what].as_str().unwrap_or_default();
            let named = if kind == "not_provisioned" {
                format!("`{named}` ({})", gap["type"].as_str().unwrap_or_default())
            } else {
                named.to_owned()
            };
            out += &format!(
                "| {label} | {} | {} | {} | {} |\n",
                cell(&named),
                cell(gap["emulator"].as_str().unwrap_or_default()),
                cell(gap["source"].as_str().unwrap_or_default()),
                cell(gap["held_by"].as_str().unwrap_or_default()),
            );
        }
    }
    out
}

/// Holds the block of `path` between `markers` to `expected` (rendered from `source`), row by row;
/// with `DOCS_WRITE` set, writes it again instead.
fn hold_generated_block(path: &Path, markers: (&str, &str), expected: &str, source: &str) {
    let doc = std::fs::read_to_string(path).unwrap();
    let shown = path.display();
    let (before, table, after) = block(&doc, markers.0, markers.1)
        .unwrap_or_else(|| panic!("{shown} lacks its block {}", markers.0));
    if table != expected && std::env::var_os("DOCS_WRITE").is_some() {
        std::fs::write(path, format!("{before}{expected}{after}")).unwrap();
        return;
    }
    let differ = differing_rows(table, expected);
    assert!(
        differ.is_empty(),
        "{shown}'s table differs from {source} (write it again with \
         `DOCS_WRITE=1 cargo test -p integration-tests --test it docs_links`): {differ:#?}"
    );
}

/// `doc` cut around a generated block: up to and including the opening marker's line, the block,
/// and from the closing marker on.
fn block<'a>(doc: &'a str, begin: &str, end: &str) -> Option<(&'a str, &'a str, &'a str)> {
    let at = doc.find(begin)?;
    let start = at + doc[at..].find('\n')? + 1;
    let stop = start + doc[start..].find(end)?;
    Some((&doc[..start], &doc[start..stop], &doc[stop..]))
}

/// The rule example a team copies to subscribe (docs/how-it-works.md) names every outcome type
/// the schema allows: a type published but missing there is an outcome the order service never
/// hears. Its twin: a list with one type left out is seen.
#[test]
fn the_subscription_rule_example_names_every_outcome_type() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("docs/outcome-event.schema.json")).unwrap(),
    )
    .unwrap();
    let published: Vec<&str> = schema["properties"]["detail-type"]["enum"]
        .as_array()
        .expect("the schema's detail-type enum")
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(published.len() >= 12, "{published:?}");
    let doc = std::fs::read_to_string(root.join("docs/how-it-works.md")).unwrap();
    let rule = doc
        .lines()
        .find(|l| l.contains(r#""source": ["charge-once"]"#))
        .expect("the subscription rule example");
    assert_eq!(missing_types(rule, &published), Vec::<&str>::new());
    let one_short = rule.replace(r#", "RefundNeedsReview""#, "");
    assert_eq!(
        missing_types(&one_short, &published),
        vec!["RefundNeedsReview"]
    );
}

/// The types of `published` the rule line does not name (each quoted, as JSON spells it).
fn missing_types<'a>(rule: &str, published: &[&'a str]) -> Vec<&'a str> {
    published
        .iter()
        .filter(|t| !rule.contains(&format!("\"{t}\"")))
        .copied()
        .collect()
}
