//! Metrics as CloudWatch Embedded Metric Format: one JSON object per line on stdout, which
//! CloudWatch Logs turns into metrics without an API call from the function.

use serde_json::{json, Map, Value};

use crate::time::Timestamp;

pub const NAMESPACE: &str = "ChargeOnce";

/// One EMF record with `metrics` (name, value, unit) under the dimension `Function=<function>`.
pub fn emf_line(function: &str, at: Timestamp, metrics: &[(&str, f64, &str)]) -> String {
    let definitions: Vec<Value> = metrics
        .iter()
        .map(|(name, _, unit)| json!({"Name": name, "Unit": unit}))
        .collect();
    let mut root = Map::new();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": at.as_millis(),
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [["Function"]],
                "Metrics": definitions,
            }],
        }),
    );
    root.insert("Function".into(), json!(function));
    for (name, value, _) in metrics {
        root.insert((*name).into(), json!(value));
    }
    Value::Object(root).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
