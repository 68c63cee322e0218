//! Where metrics go: CloudWatch Embedded Metric Format lines ([`crate::telemetry`] builds them).

/// Where EMF lines go.
pub trait MetricsSink: Send + Sync {
    fn emit(&self, line: String);
}
