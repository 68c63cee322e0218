//! Two rules of the code that reviews miss and no behaviour test sees, read from the sources:
//!
//! - **One way to emit metrics.** Every function emits its EMF lines into the
//!   `charge_once::ports::MetricsSink` its deps carry (stdout in Lambda, captured in tests, summed
//!   in the simulation); nothing in the functions or the core prints to stdout itself, where
//!   CloudWatch would take any JSON line for a metric.
//! - **An error is logged whole.** A logged error goes through `telemetry::ErrorChain` (the
//!   whole `source()` chain on one field), never `error = %e`, which keeps only the first level
//!   of a wrapped SDK or transport error, nor interpolated into the message.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path, text));
            }
        }
    }
    out.sort();
    out
}

/// The production sources the rules cover: the core, the functions and the operator CLI.
fn covered() -> Vec<(PathBuf, String)> {
    let root = root();
    let mut all = sources(&root.join("shared/src"));
    for function in [
        "checkout",
        "charge",
        "reconciler",
        "notify",
        "events",
        "audit",
    ] {
        all.extend(sources(&root.join("functions").join(function).join("src")));
    }
    all.extend(sources(&root.join("infra/chargectl/src")));
    all
}

/// Whether `code` calls `name` (a macro or function name ending in `(`) as a word of its own:
/// `println!(` is not found in `eprintln!(`.
fn calls(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(at, _)| {
        !code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// The tracing macro calls in `text` (`info!(…)`, `tracing::warn!(…)`, …), whole, with their line.
fn log_calls(text: &str) -> Vec<(usize, String)> {
    let mut calls = Vec::new();
    for name in ["error!(", "warn!(", "info!(", "debug!(", "trace!("] {
        let mut from = 0;
        while let Some(at) = text[from..].find(name) {
            let start = from + at;
            from = start + name.len();
            // `eprintln!(` and friends end in these letters too; a macro name starts a word.
            let before = text[..start].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let mut depth = 1;
            let mut end = from;
            for (i, c) in text[from..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    end = from + i;
                    break;
                }
            }
            let line = text[..start].matches('\n').count() + 1;
            calls.push((line, text[start..=end.min(text.len() - 1)].to_owned()));
        }
    }
    calls.sort();
    calls
}

/// Why `call` logs an error other than through `ErrorChain`, if it does.
fn unchained(call: &str) -> Option<&'static str> {
    for field in ["error = %", "error = ?", "err = %", "source = %"] {
        let mut from = 0;
        while let Some(at) = call[from..].find(field) {
            let value = &call[from + at + field.len()..];
            let wrapped = value.trim_start_matches("charge_once::telemetry::");
            let wrapped = wrapped.trim_start_matches("crate::telemetry::");
            if !wrapped.starts_with("ErrorChain(") {
                return Some("an error field that is not an ErrorChain");
            }
            from += at + field.len();
        }
    }
    // An error variable as any field's value (`reason = %e`, the shorthand `%e`).
    for name in ["e", "err", "error"] {
        for sigil in ['%', '?'] {
            let value = format!("{sigil}{name}");
            let bare = call.match_indices(&value).any(|(at, _)| {
                let before = call[..at].chars().next_back();
                let after = call[at + value.len()..].chars().next();
                matches!(before, Some(' ' | '(')) && matches!(after, Some(',' | ')' | ' ' | '\n'))
            });
            if bare {
                return Some("an error as a field that is not an ErrorChain");
            }
        }
    }
    for interpolated in ["{e}", "{err}", "{error}", "{e:?}", "{err:?}", "{error:?}"] {
        if call.contains(interpolated) {
            return Some("an error interpolated into the message");
        }
    }
    None
}

#[test]
fn the_rule_finds_what_it_forbids() {
    // The scanner itself: every way out of the rule is caught, every way in passes.
    let bad = r#"fn f() {
        warn!(error = %e, "store down");
        tracing::error!(order_id = %o, error = ?e, "x");
        info!(reason = "unreadable", "event rejected: {e}");
        eprintln!("not a log: {e}");
        warn!(reason = %e, "refused");
        debug!(%err);
        info!(order_id = %e.order_id, "not an error");
    }"#;
    let found: Vec<_> = log_calls(bad)
        .into_iter()
        .filter_map(|(line, call)| unchained(&call).map(|_| line))
        .collect();
    assert_eq!(found, [2, 3, 4, 6, 7]);
    let good = r#"warn!(error = %ErrorChain(&e), "a"); error!(error = %charge_once::telemetry::ErrorChain(&e), "b");"#;
    assert!(log_calls(good)
        .iter()
        .all(|(_, call)| unchained(call).is_none()));
    assert!(calls("    println!(\"{}\", line);", "println!("));
    assert!(!calls("    eprintln!(\"x\");", "println!("));
    assert!(calls("std::io::stdout().lock()", "stdout("));
}

#[test]
fn every_logged_error_goes_through_error_chain() {
    let mut offenders = Vec::new();
    for (path, text) in covered() {
        for (line, call) in log_calls(&text) {
            if let Some(why) = unchained(&call) {
                offenders.push(format!("{}:{line}: {why}: {call}", path.display()));
            }
        }
    }
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

#[test]
fn nothing_but_the_stdout_sink_writes_to_stdout() {
    let mut offenders = Vec::new();
    for (path, text) in covered() {
        // chargectl is a CLI: its stdout is its output (through its `Console`), not metrics.
        if path.starts_with(root().join("infra/chargectl")) {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let prints = ["println!(", "print!(", "stdout("]
                .iter()
                .any(|p| calls(code, p));
            if prints && !path.ends_with("shared/src/telemetry.rs") {
                offenders.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "metrics go through a MetricsSink (telemetry::StdoutMetrics in Lambda):\n{}",
        offenders.join("\n")
    );
}
