//! One scheduled audit. Its window ends at the whole hour at or before the schedule's time (the
//! event's `time`, not the clock: a late or retried invocation audits the same window, and
//! consecutive runs tile), and it stops reading a margin before the invocation's deadline.

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::eventbridge::EventBridgeEvent;
use charge_core::audit::{AuditPolicy, AuditWindow};
use charge_core::time::Clock;
use charge_core::time::Timestamp;
use charge_once::audit::{run_audit, AuditDeps, AuditRun};
use charge_once::ports::{AuditLog, AuditStore, MetricsSink, PaymentGateway};
use lambda_runtime::{Error, LambdaEvent};
use serde_json::{json, Value};

/// What the handler needs, built once in `main`.
#[derive(Clone)]
pub struct AuditFunction {
    pub store: Arc<dyn AuditStore>,
    pub log: Arc<dyn AuditLog>,
    pub gateway: Arc<dyn PaymentGateway>,
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<dyn MetricsSink>,
    pub policy: AuditPolicy,
    pub window: Duration,
}

/// Stop reading with this much left: the report's write and the metrics lines must still fit.
pub const SAFETY_MARGIN: Duration = Duration::from_secs(20);
/// Used when the invocation carries no usable deadline (a local `cargo lambda invoke`).
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(300);
const HOUR_MS: i64 = 3_600_000;

/// The window a run at `scheduled` audits: `length`, ending at the whole hour at or before it.
pub fn window_for(scheduled: Timestamp, length: Duration) -> AuditWindow {
    let to = Timestamp::from_millis(scheduled.as_millis().div_euclid(HOUR_MS) * HOUR_MS);
    AuditWindow::ending_at(to, length)
}

/// The time to stop reading: the invocation's deadline less the margin, when Lambda could have
/// sent it (ahead of now, within Lambda's longest timeout), else the default budget from now.
pub fn read_deadline(deadline_ms: u64, now: Timestamp) -> Timestamp {
    let ahead = deadline_ms as i64 - now.as_millis();
    if ahead > 0 && ahead <= 900_000 {
        return Timestamp::from_millis(deadline_ms as i64)
            .minus(SAFETY_MARGIN.min(Duration::from_millis(ahead as u64 / 2)));
    }
    now.plus(DEFAULT_BUDGET)
}

pub async fn handle(
    f: &AuditFunction,
    event: LambdaEvent<EventBridgeEvent<Value>>,
) -> Result<Value, Error> {
    let now = f.clock.now();
    // An event without a time (a hand-made invoke) audits the window before now.
    let scheduled = event
        .payload
        .time
        .map(|t| Timestamp::from_millis(t.timestamp_millis()))
        .unwrap_or(now);
    let run = AuditRun {
        window: window_for(scheduled, f.window),
        policy: f.policy,
        ran_by: "schedule".to_owned(),
        deadline: read_deadline(event.context.deadline, now),
    };
    let deps = AuditDeps {
        store: f.store.as_ref(),
        log: f.log.as_ref(),
        gateway: f.gateway.as_ref(),
        clock: f.clock.as_ref(),
        metrics: f.metrics.as_ref(),
    };
    let report = run_audit(&deps, &run).await;
    Ok(json!({
        "window_from": report.window.from.to_rfc3339(),
        "window_to": report.window.to.to_rfc3339(),
        "complete": report.complete,
        "drift": report.drift(),
        "by_class": report.by_class.iter().map(|(c, n)| (c.as_str().to_owned(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "intents": report.counts.intents,
        "refunds": report.counts.refunds,
        "settled_records": report.counts.settled_records,
        "stripe_calls": report.counts.stripe_calls,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scheduled() -> EventBridgeEvent<Value> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../events/audit-scheduled.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn the_sample_event_audits_the_day_before_the_whole_hour_of_its_time() {
        let e = scheduled();
        assert_eq!(e.detail_type, "Scheduled Event");
        let at = Timestamp::from_millis(e.time.unwrap().timestamp_millis());
        let w = window_for(at, Duration::from_secs(24 * 3600));
        assert_eq!(w.from.to_rfc3339(), "2026-11-29T00:00:00.000Z");
        assert_eq!(w.to.to_rfc3339(), "2026-11-30T00:00:00.000Z");
    }

    #[test]
    fn the_deadline_keeps_a_margin_and_a_local_invoke_gets_the_default_budget() {
        let now = Timestamp::from_millis(1_800_000_000_000);
        let lambda = now.as_millis() as u64 + 900_000;
        assert_eq!(
            read_deadline(lambda, now),
            now.plus(Duration::from_secs(880))
        );
        assert_eq!(read_deadline(0, now), now.plus(DEFAULT_BUDGET));
        assert_eq!(
            read_deadline(600_000, now),
            now.plus(DEFAULT_BUDGET),
            "cargo lambda watch"
        );
        assert_eq!(
            read_deadline(lambda + 1_000_000, now),
            now.plus(DEFAULT_BUDGET)
        );
    }
}
