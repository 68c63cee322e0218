//! What the report's per-kind sections (authorizations, disputes, retries) share: their
//! invariants as one table of (count, name) rows, from which the section's verdict (`holds`),
//! its first broken invariant and its invariants line are all read, and the `name n, ...` lists
//! of their counts. What each invariant means, and how it is counted, stays in its section.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One invariant of a section: how many times it broke (must stay 0), and its name as the
/// report and the verdict say it.
pub(crate) type Invariant = (u64, &'static str);

/// Every invariant of the table holds.
pub(crate) fn holds(rows: &[Invariant]) -> bool {
    rows.iter().all(|(n, _)| *n == 0)
}

/// The first invariant of the table broken, by name, for the verdict.
pub(crate) fn first_broken(rows: &[Invariant]) -> Option<&'static str> {
    rows.iter().find(|(n, _)| *n > 0).map(|(_, name)| *name)
}

/// The section's invariants line: `  <label> <name> <n>  <name> <n> ...`.
pub(crate) fn render_invariants(s: &mut String, label: &str, rows: &[Invariant]) {
    let rows: Vec<String> = rows.iter().map(|(n, name)| format!("{name} {n}")).collect();
    let _ = writeln!(s, "  {label} {}", rows.join("  "));
}

/// Counts by name as the report lists them: `name n, name n`.
pub(crate) fn list(m: &BTreeMap<String, u64>) -> String {
    m.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_reads_the_verdict_the_first_broken_and_the_line() {
        let rows = [(0, "paid twice"), (2, "two at once"), (1, "lost")];
        assert!(!holds(&rows));
        assert_eq!(first_broken(&rows), Some("two at once"));
        let mut s = String::new();
        render_invariants(&mut s, "retry invariants", &rows);
        assert_eq!(
            s,
            "  retry invariants paid twice 0  two at once 2  lost 1\n"
        );
        let clean = [(0, "paid twice")];
        assert!(holds(&clean) && first_broken(&clean).is_none());
    }
}
