//! Metrics as CloudWatch Embedded Metric Format: one JSON object per line on stdout, which
//! CloudWatch Logs turns into metrics without an API call from the function.
//!
//! Every metric has the dimension `Function=<function>` (what the alarms watch); a metric that
//! also has a class (`SentToReview` by `ReasonClass`) is emitted with two dimension sets in one
//! line, so the per-function total and the per-class series come from the same data point.
//!
//! Where lines go is a [`MetricsSink`], the one way every function emits (its handler's deps
//! carry one; nothing prints a metrics line itself): stdout in Lambda ([`StdoutMetrics`]), a
//! buffer in tests ([`CapturedMetrics`], parse it back with [`parse_emf`]), a sink that sums what
//! it checks in the simulation, or nowhere ([`DiscardMetrics`]). The lines more than one function
//! emits are built here ([`sent_to_review_line`]).

use std::fmt;
use std::sync::Mutex;

use charge_core::plan::ReviewClass;
use charge_core::time::Timestamp;
use serde_json::Value;

use crate::ports::MetricsSink;

pub const NAMESPACE: &str = "ChargeOnce";

/// Lambda: one line on stdout, which CloudWatch Logs turns into metrics.
pub struct StdoutMetrics;

impl MetricsSink for StdoutMetrics {
    fn emit(&self, line: String) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        // A lost metrics line must never fail a charge.
        let _ = writeln!(out, "{line}");
    }
}

/// Keeps every line (tests parse them back).
#[derive(Default)]
pub struct CapturedMetrics {
    lines: Mutex<Vec<String>>,
}

impl CapturedMetrics {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sum of metric `name` over every captured line whose dimensions include `dims`.
    pub fn sum(&self, name: &str, dims: &[(&str, &str)]) -> f64 {
        self.lines()
            .iter()
            .filter_map(|l| parse_emf(l))
            .filter(|v| dims.iter().all(|(k, want)| v[*k].as_str() == Some(*want)))
            .filter_map(|v| v[name].as_f64())
            .sum()
    }
}

impl MetricsSink for CapturedMetrics {
    fn emit(&self, line: String) {
        self.lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    }
}

/// Drops every line (the simulation counts for itself).
pub struct DiscardMetrics;

impl MetricsSink for DiscardMetrics {
    fn emit(&self, _line: String) {}
}

/// An EMF line parsed back, if it is one (has `_aws.CloudWatchMetrics`).
pub fn parse_emf(line: &str) -> Option<Value> {
    let v: Value = serde_json::from_str(line).ok()?;
    v.get("_aws")?.get("CloudWatchMetrics")?;
    Some(v)
}

/// One EMF record with `metrics` (name, value, unit) under the dimension `Function=<function>`.
pub fn emf_line(function: &str, at: Timestamp, metrics: &[(&str, f64, &str)]) -> String {
    emf_line_with(function, None, at, metrics)
}

/// One EMF record whose metrics are published both under `Function=<function>` and under
/// `Function=<function>, <class.0>=<class.1>`.
pub fn emf_line_classed(
    function: &str,
    class: (&str, &str),
    at: Timestamp,
    metrics: &[(&str, f64, &str)],
) -> String {
    emf_line_with(function, Some(class), at, metrics)
}

/// One `SentToReview` line: `n` operations `function` sent to review for reasons of `class`. The
/// charge function, the reconciler and the webhook each send operations to review; one line shape
/// for all three, so the alarms and the per-class series add them up.
pub fn sent_to_review_line(function: &str, class: ReviewClass, n: u64, at: Timestamp) -> String {
    emf_line_classed(
        function,
        ("ReasonClass", class.as_str()),
        at,
        &[("SentToReview", n as f64, "Count")],
    )
}

/// One `RefundFailedAfterSuccess` line: `n` refunds recorded `succeeded` that Stripe then said
/// failed (a closed or lost card), recorded `failed` with their amount refundable again. Alarmed
/// (paged): the merchant told a customer the money was returned, and it was not.
pub fn refund_failed_after_success_line(function: &str, n: u64, at: Timestamp) -> String {
    emf_line(
        function,
        at,
        &[("RefundFailedAfterSuccess", n as f64, "Count")],
    )
}

/// One `DisputeUnreserved` line: `n` writes of a dispute whose funds Stripe withdrew without
/// their reservation on the order's charge (its refunds left too little: refunded + disputed
/// would exceed what was taken). Alarmed (paged): the customer may be paid twice, and only the
/// dispute's answer in Stripe's dashboard (the refund as evidence) can win it back. Counted by
/// the events function and the reconciler, wherever the dispute's shell writes such a record.
pub fn dispute_unreserved_line(function: &str, n: u64, at: Timestamp) -> String {
    emf_line(function, at, &[("DisputeUnreserved", n as f64, "Count")])
}

/// The `StripeRequests` lines of one invocation: per endpoint that was called, the requests
/// sent (every in-call retry counts) under `Function` and `Function, Endpoint`, beside the 429s
/// met (`StripeRateLimited`, under `Function`). Nothing when no request was sent.
pub fn stripe_requests_lines(
    function: &str,
    sent: &crate::ports::RequestTotals,
    at: Timestamp,
) -> Vec<String> {
    let mut lines: Vec<String> = sent
        .by_endpoint()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(endpoint, n)| {
            emf_line_classed(
                function,
                ("Endpoint", endpoint),
                at,
                &[("StripeRequests", n as f64, "Count")],
            )
        })
        .collect();
    if !lines.is_empty() {
        lines.push(emf_line(
            function,
            at,
            &[("StripeRateLimited", sent.rate_limited as f64, "Count")],
        ));
    }
    lines
}

/// Writes the line directly, byte for byte what building it as a `serde_json::Value` and
/// printing that gives (the reference in the tests): keys in `Map`'s sorted order, a later key
/// replacing an earlier one of the same name, strings escaped and numbers printed by serde_json.
/// Built as a `Value` it was the largest part of an EMF line's cost: about 30 allocations for one
/// line, once per batch in every function.
fn emf_line_with(
    function: &str,
    class: Option<(&str, &str)>,
    at: Timestamp,
    metrics: &[(&str, f64, &str)],
) -> String {
    enum Field<'a> {
        Aws,
        Str(&'a str),
        Num(f64),
    }
    let mut root: Vec<(&str, Field<'_>)> = Vec::with_capacity(metrics.len() + 3);
    root.push(("_aws", Field::Aws));
    root.push(("Function", Field::Str(function)));
    if let Some((name, value)) = class {
        root.push((name, Field::Str(value)));
    }
    for (name, value, _) in metrics {
        root.push((name, Field::Num(*value)));
    }
    // As `Map::insert`: sorted by key; of equal keys the last inserted wins (a stable sort keeps
    // insertion order among equals, and the dedup below keeps the last of each run).
    root.sort_by(|a, b| a.0.cmp(b.0));
    let mut fields: Vec<(&str, Field<'_>)> = Vec::with_capacity(root.len());
    for entry in root {
        match fields.last_mut() {
            Some(last) if last.0 == entry.0 => *last = entry,
            _ => fields.push(entry),
        }
    }
    let mut out = Vec::with_capacity(160 + 48 * metrics.len());
    let string = |out: &mut Vec<u8>, s: &str| {
        // Writing a str into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    };
    out.push(b'{');
    for (i, (key, field)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(&mut out, key);
        out.push(b':');
        match field {
            Field::Str(v) => string(&mut out, v),
            Field::Num(v) => {
                let _ = serde_json::to_writer(&mut out, v);
            }
            Field::Aws => {
                out.extend_from_slice(b"{\"CloudWatchMetrics\":[{\"Dimensions\":");
                match class {
                    None => out.extend_from_slice(b"[[\"Function\"]]"),
                    Some((name, _)) => {
                        out.extend_from_slice(b"[[\"Function\"],[\"Function\",");
                        string(&mut out, name);
                        out.extend_from_slice(b"]]");
                    }
                }
                out.extend_from_slice(b",\"Metrics\":[");
                for (j, (name, _, unit)) in metrics.iter().enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(b"{\"Name\":");
                    string(&mut out, name);
                    out.extend_from_slice(b",\"Unit\":");
                    string(&mut out, unit);
                    out.push(b'}');
                }
                out.extend_from_slice(b"],\"Namespace\":");
                string(&mut out, NAMESPACE);
                out.extend_from_slice(b"}],\"Timestamp\":");
                let _ = serde_json::to_writer(&mut out, &at.as_millis());
                out.push(b'}');
            }
        }
    }
    out.push(b'}');
    // serde_json writes UTF-8 only.
    String::from_utf8(out).unwrap_or_default()
}

/// An error with its whole `source()` chain, for one log field: `outer: cause: root cause`.
/// Log `error = %ErrorChain(&e)` instead of `error = %e` plus one level of `source`, so a wrapped
/// SDK or transport error is never cut at its first level.
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'a));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map};

    use super::*;

    /// The line as it was built before: a `Value`, printed (the reference for `emf_line_with`).
    fn emf_line_as_value(
        function: &str,
        class: Option<(&str, &str)>,
        at: Timestamp,
        metrics: &[(&str, f64, &str)],
    ) -> String {
        let definitions: Vec<Value> = metrics
            .iter()
            .map(|(name, _, unit)| json!({"Name": name, "Unit": unit}))
            .collect();
        let dimensions = match class {
            None => json!([["Function"]]),
            Some((name, _)) => json!([["Function"], ["Function", name]]),
        };
        let mut root = Map::new();
        root.insert(
            "_aws".into(),
            json!({
                "Timestamp": at.as_millis(),
                "CloudWatchMetrics": [{
                    "Namespace": NAMESPACE,
                    "Dimensions": dimensions,
                    "Metrics": definitions,
                }],
            }),
        );
        root.insert("Function".into(), json!(function));
        if let Some((name, value)) = class {
            root.insert(name.into(), json!(value));
        }
        for (name, value, _) in metrics {
            root.insert((*name).into(), json!(value));
        }
        Value::Object(root).to_string()
    }

    #[test]
    fn the_direct_line_is_byte_for_byte_the_value_line() {
        let at = Timestamp::from_millis(1_800_000_000_123);
        type Case<'a> = (Option<(&'a str, &'a str)>, Vec<(&'a str, f64, &'a str)>);
        let cases: Vec<Case<'_>> = vec![
            (None, vec![]),
            (None, vec![("Charged", 1.0, "Count")]),
            (
                None,
                vec![
                    ("B", 2.5, "Count"),
                    ("A", -0.0, "Milliseconds"),
                    ("c", 1e21, "Count"),
                ],
            ),
            (
                None,
                vec![("NaN", f64::NAN, "Count"), ("Inf", f64::INFINITY, "Count")],
            ),
            // A metric named like a field replaces it, as a map insert does.
            (
                None,
                vec![
                    ("Function", 3.0, "Count"),
                    ("_aws", 4.0, "Count"),
                    ("X", 1.0, "Count"),
                    ("X", 2.0, "Count"),
                ],
            ),
            (
                Some(("ReasonClass", "stuck")),
                vec![("SentToReview", 7.0, "Count")],
            ),
            (
                Some(("Zed", "q\"uote\\ \u{1}\u{e9}")),
                vec![("M\n", 0.1, "Count"), ("Zed", 9.0, "Count")],
            ),
        ];
        for function in ["charge", "we\"ird\tname"] {
            for (class, metrics) in &cases {
                assert_eq!(
                    emf_line_with(function, *class, at, metrics),
                    emf_line_as_value(function, *class, at, metrics),
                    "class {class:?}, metrics {metrics:?}"
                );
            }
        }
    }

    #[test]
    fn an_error_chain_is_logged_whole() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl fmt::Display for E {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for E {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let e = E(
            "store unavailable",
            Some(Box::new(E(
                "dispatch failure",
                Some(Box::new(E("connection refused", None))),
            ))),
        );
        assert_eq!(
            ErrorChain(&e).to_string(),
            "store unavailable: dispatch failure: connection refused"
        );
        assert_eq!(ErrorChain(&E("alone", None)).to_string(), "alone");
    }

    #[test]
    fn emf_shape() {
        let line = emf_line(
            "reconciler",
            Timestamp::from_millis(1_000),
            &[
                ("Settled", 2.0, "Count"),
                ("OldestUnsettledAge", 30.0, "Seconds"),
            ],
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Namespace"], NAMESPACE);
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Metrics"][1]["Unit"],
            "Seconds"
        );
        assert_eq!(v["Settled"], 2.0);
        assert_eq!(v["Function"], "reconciler");
        assert!(!line.contains('\n'));
    }

    #[test]
    fn classed_lines_publish_both_dimension_sets() {
        let sink = CapturedMetrics::new();
        sink.emit(emf_line_classed(
            "charge",
            ("ReasonClass", "stuck_processing"),
            Timestamp::from_millis(1_000),
            &[("SentToReview", 1.0, "Count")],
        ));
        sink.emit("not json".into());
        let v = parse_emf(&sink.lines()[0]).unwrap();
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Function"], ["Function", "ReasonClass"]])
        );
        assert_eq!(sink.sum("SentToReview", &[("Function", "charge")]), 1.0);
        assert_eq!(
            sink.sum("SentToReview", &[("ReasonClass", "stuck_processing")]),
            1.0
        );
        assert_eq!(sink.sum("SentToReview", &[("Function", "reconciler")]), 0.0);
    }
}
