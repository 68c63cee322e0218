//! CloudWatch Logs bytes, for section 5.
//!
//! [`install_capture`] puts a subscriber (the functions' own, `charge_once::logging`, or
//! lambda_runtime's default, to compare with) in front of an in-memory writer, with
//! `AWS_LAMBDA_LOG_FORMAT` as the template sets it (JSON); [`take_lines`] hands back what was
//! written since, less the test harness's own lines (stripe-sim, the test kit, this crate): the AWS
//! SDK's and the HTTP client's lines would reach CloudWatch in the real function, so they count.
//! `bench bill` ([`crate::bill`]) takes them per function.
//!
//! Not captured, and given here from their documented shape: Lambda's `platform.start` and
//! `platform.report` records per invocation (JSON log format), and the HTTP API's access-log line
//! (the template's `AccessLogSettings.Format`, filled with a sample request's values), for the
//! checkout route and for the webhook route.

use std::io::Write;
use std::sync::Mutex;

static CAPTURED: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct Capture;

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Names of the harness, not of the functions.
const HARNESS: &[&str] = &["stripe_sim", "testkit", "integration_tests", "bench"];

/// Which subscriber writes the captured lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subscriber {
    /// The functions' own ([`charge_once::logging`]).
    Ours,
    /// lambda_runtime's default (every span twice per line).
    LambdaDefault,
}

/// Installs `subscriber` (JSON when `AWS_LAMBDA_LOG_FORMAT` is `JSON`) writing into memory.
/// Once per process.
pub fn install_capture(subscriber: Subscriber) {
    match subscriber {
        Subscriber::Ours => charge_once::logging::init_subscriber_with_writer(|| Capture),
        Subscriber::LambdaDefault => {
            lambda_runtime::tracing::init_default_subscriber_with_writer(|| Capture)
        }
    }
    CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// Our lines captured since the last call, the harness's left out: each line as written (without
/// the newline) with its "LEVEL message".
pub fn take_lines() -> Vec<(String, String)> {
    let text = {
        let mut captured = CAPTURED.lock().unwrap_or_else(|e| e.into_inner());
        let text = String::from_utf8_lossy(&captured).into_owned();
        captured.clear();
        text
    };
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        // lambda_runtime's subscriber prints no target: a line is the harness's when its message
        // or span names it; what is kept is listed (`messages`) so a reader can check.
        if HARNESS.iter().any(|h| line.contains(h)) {
            continue;
        }
        let parsed = serde_json::from_str::<serde_json::Value>(line).unwrap_or_default();
        let message = parsed["fields"]["message"].as_str().unwrap_or(line);
        let level = parsed["level"].as_str().unwrap_or("");
        out.push((line.to_owned(), format!("{level} {message}")));
    }
    out
}

/// Lambda's platform records per invocation in the JSON log format (the Lambda docs' shape; a
/// 36-character request id, a realistic duration): start and report.
pub const PLATFORM_START: &str = r#"{"time":"2026-11-29T15:04:05.123Z","type":"platform.start","record":{"requestId":"6d68ca91-49c9-448d-89b8-7ca3e6dc66aa","version":"$LATEST"}}"#;
pub const PLATFORM_REPORT: &str = r#"{"time":"2026-11-29T15:04:05.444Z","type":"platform.report","record":{"requestId":"6d68ca91-49c9-448d-89b8-7ca3e6dc66aa","metrics":{"durationMs":320.412,"billedDurationMs":321,"memorySizeMB":128,"maxMemoryUsedMB":38},"status":"success"}}"#;

/// The sample checkout's `$context` values (events/checkout-valid.json).
const CHECKOUT_VALUES: [(&str, &str); 16] = [
    ("$context.requestId", "CkQ0bi0YoAMEV9Q="),
    ("$context.identity.sourceIp", "203.0.113.10"),
    (
        "$context.identity.userArn",
        "arn:aws:sts::123456789012:assumed-role/order-service/i-0a1b2c3d4e5f60718",
    ),
    ("$context.identity.accountId", "123456789012"),
    ("$context.authorizer.claims.sub", "-"),
    ("$context.authorizer.claims.client_id", "-"),
    ("$context.routeKey", "POST /orders/{order_id}/charge"),
    ("$context.path", "/orders/ord-1001/charge"),
    ("$context.status", "202"),
    ("$context.responseLatency", "38"),
    ("$context.integrationLatency", "35"),
    ("$context.authorizer.error", "-"),
    ("$context.integrationErrorMessage", "-"),
    ("$context.requestTime", "29/Nov/2026:15:04:05 +0000"),
    ("$context.protocol", "HTTP/1.1"),
    ("$context.identity.userAgent", "curl/8.5.0"),
];

/// A webhook delivery's `$context` values (events/webhook-payment-intent-succeeded.json).
const WEBHOOK_VALUES: [(&str, &str); 16] = [
    ("$context.requestId", "CkQ1cj2ZoAMEX3w="),
    ("$context.identity.sourceIp", "54.187.174.169"),
    ("$context.identity.userArn", "-"),
    ("$context.identity.accountId", "-"),
    ("$context.authorizer.claims.sub", "-"),
    ("$context.authorizer.claims.client_id", "-"),
    ("$context.routeKey", "POST /stripe/webhook"),
    ("$context.path", "/stripe/webhook"),
    ("$context.status", "200"),
    ("$context.responseLatency", "38"),
    ("$context.integrationLatency", "35"),
    ("$context.authorizer.error", "-"),
    ("$context.integrationErrorMessage", "-"),
    ("$context.requestTime", "29/Nov/2026:15:04:05 +0000"),
    ("$context.protocol", "HTTP/1.1"),
    (
        "$context.identity.userAgent",
        "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
    ),
];

/// The HTTP API access-log line for the sample checkout (events/checkout-valid.json): the
/// template's `Format` with each `$context` variable replaced as API Gateway would (`-` when empty).
pub fn access_log_line(template_yaml: &str) -> String {
    access_log_line_with(template_yaml, &CHECKOUT_VALUES)
}

/// The access-log line of one Stripe webhook delivery (`POST /stripe/webhook`, no authorizer:
/// no caller identity; Stripe's user agent and its documented source range).
pub fn webhook_access_log_line(template_yaml: &str) -> String {
    access_log_line_with(template_yaml, &WEBHOOK_VALUES)
}

/// The template's `Format` with `values` for its `$context` variables.
fn access_log_line_with(template_yaml: &str, values: &[(&str, &str)]) -> String {
    let mut format = String::new();
    let mut inside = false;
    for line in template_yaml.lines() {
        if line.trim_start().starts_with("Format: >-") {
            inside = true;
            continue;
        }
        if inside {
            if !line.trim_start().starts_with(['{', '"']) {
                break;
            }
            if !format.is_empty() {
                format.push(' '); // a folded scalar joins its lines with spaces
            }
            format.push_str(line.trim());
        }
    }
    // Longest names first, so `$context.path` never eats a longer variable's prefix.
    let mut sorted = values.to_vec();
    sorted.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
    for (k, v) in sorted {
        format = format.replace(k, v);
    }
    format
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_line_fills_every_variable_of_the_template() {
        let template = include_str!("../../../template.yaml");
        let line = access_log_line(template);
        assert!(line.starts_with('{') && line.ends_with('}'), "{line}");
        assert!(!line.contains("$context"), "{line}");
        let parsed: serde_json::Value =
            serde_json::from_str(&line).expect("the access line is JSON");
        assert_eq!(parsed["status"], "202");
    }

    #[test]
    fn the_webhook_line_has_no_caller() {
        let template = include_str!("../../../template.yaml");
        let line = webhook_access_log_line(template);
        assert!(!line.contains("$context"), "{line}");
        let parsed: serde_json::Value =
            serde_json::from_str(&line).expect("the access line is JSON");
        assert_eq!(parsed["status"], "200");
        assert!(!line.contains("assumed-role"), "{line}");
    }
}
