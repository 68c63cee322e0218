//! One scheduled tick. It stops taking new work while a Stripe call and a write still fit in the
//! invocation's remaining time; what it did not reach stays due and the next tick takes it.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::eventbridge::EventBridgeEvent;
use charge_once::ports::MetricsSink;
use charge_once::reconciler::{reconcile_tick, ReconcilerDeps};
use lambda_runtime::{Error, LambdaEvent};
use serde_json::{json, Value};

/// What the handler needs, built once in `main`.
#[derive(Clone)]
pub struct ReconcilerFunction {
    pub reconciler: ReconcilerDeps,
    /// Where the tick's EMF lines go (stdout in Lambda, where CloudWatch Logs picks them up).
    pub metrics: Arc<dyn MetricsSink>,
}

/// Index page size per read. Large on purpose: a page is merged from eight shards, each read up to
/// this many, and what is not kept is read again for the next page; one page holding everything
/// due reads each due item once (measured in BENCHMARKS.md: 50 per page read ~4.5 items per due
/// operation at 1,000 due).
pub const PAGE_SIZE: usize = 1000;
/// Stop taking new operations with less than this left: a claim, one Stripe call (10 s total
/// timeout, plus a bounded same-key retry: ~21 s) and a record (3 s each at most, see
/// `charge_once::adapters::aws`) must still fit; the REVIEW partition's count then takes what is
/// left, down to `charge_once::reconciler::REVIEW_READ_RESERVE`.
pub const SAFETY_MARGIN: Duration = Duration::from_secs(30);
/// Used when the invocation carries no deadline (a local `cargo lambda invoke`).
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(60);

/// Time left before `deadline_ms` (the Lambda context's deadline, ms since the epoch).
pub fn remaining_until(deadline_ms: u64) -> Duration {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    Duration::from_millis(deadline_ms.saturating_sub(now_ms))
}

/// Lambda's longest function timeout: a deadline further ahead than this was not sent by Lambda.
const LAMBDA_MAX_TIMEOUT: Duration = Duration::from_secs(900);

/// The tick's deadline (ms since the epoch): the context's when Lambda could have sent it (ahead
/// of `now_ms` by at most Lambda's longest timeout), else [`DEFAULT_BUDGET`] from now. None (0),
/// a time already past, or a duration — `cargo lambda watch` sends 600000, ten minutes after
/// 1970, which read as a time would leave the tick no time at all — is no deadline, and a
/// non-zero one is said in a log line.
pub fn tick_deadline(deadline_ms: u64, now_ms: u64) -> u64 {
    let ahead = deadline_ms.saturating_sub(now_ms);
    if ahead > 0 && ahead <= LAMBDA_MAX_TIMEOUT.as_millis() as u64 {
        return deadline_ms;
    }
    if deadline_ms != 0 {
        tracing::warn!(
            deadline_ms,
            now_ms,
            budget_ms = DEFAULT_BUDGET.as_millis() as u64,
            "the invocation's deadline is not a time within Lambda's longest timeout (a local \
             runtime); the tick works to its default budget instead"
        );
    }
    now_ms + DEFAULT_BUDGET.as_millis() as u64
}

/// One tick; its EMF metrics lines go to the function's [`MetricsSink`]: the due work's as soon as
/// it is done, the REVIEW partition's after it (a tick that fails on the way answers the error,
/// with what it emitted before).
pub async fn handle(
    f: &ReconcilerFunction,
    event: LambdaEvent<EventBridgeEvent<Value>>,
) -> Result<Value, Error> {
    let deps = &f.reconciler;
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let deadline = tick_deadline(event.context.deadline, now_ms);
    let remaining = move || remaining_until(deadline);
    // With a short budget (a small timeout, a local invoke) keep half of it as the margin rather
    // than doing nothing: stopping mid-operation is safe anyway (the lease expires, the operation
    // stays due), it is only less tidy.
    let safety = SAFETY_MARGIN.min(remaining() / 2);
    let report = reconcile_tick(deps, &remaining, safety, f.metrics.as_ref()).await?;
    Ok(json!({
        "examined": report.examined,
        "reenqueued": report.reenqueued,
        "redriven": report.redriven,
        "waited_for_queue": report.waited_for_queue,
        "queue_visible": report.queue_depth.map(|d| d.visible),
        "queue_in_flight": report.queue_depth.map(|d| d.in_flight),
        "settled": report.settled,
        "sent_to_review": report.sent_to_review,
        "still_unknown": report.still_unknown,
        "skipped": report.skipped,
        "send_failures": report.send_failures,
        "failures": report.failures,
        "unreadable": report.unreadable,
        "in_review": report.in_review,
        "in_review_complete": report.review_complete,
        "unreadable_in_review": report.unreadable_in_review,
        "oldest_in_review_age_secs": report.oldest_in_review_age.as_secs(),
        "disputes_read": report.disputes_read,
        "dispute_deadline_near": report.dispute_deadline_near,
        "dispute_deadline_passed": report.dispute_deadline_passed,
        "disputes_open": report.disputes_open,
        "pages": report.pages,
        "stopped_early": report.stopped_early,
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use charge_core::plan::Policy;
    use charge_core::time::{Clock, ManualClock, Timestamp};
    use charge_once::executor::EngineDeps;
    use charge_once::memory::{FakeGateway, MemoryQueue, MemoryStore};
    use charge_once::telemetry::CapturedMetrics;
    use charge_once::testing::CreateIn as _;
    use lambda_runtime::Context;

    use super::*;

    /// A deadline Lambda could have sent is the tick's; none, one already past, and the
    /// duration `cargo lambda watch` sends give the default budget from now.
    #[test]
    fn a_deadline_that_is_not_a_time_ahead_gives_the_default_budget() {
        let now = 1_764_000_000_000u64;
        let default = now + DEFAULT_BUDGET.as_millis() as u64;
        assert_eq!(tick_deadline(now + 300_000, now), now + 300_000);
        assert_eq!(tick_deadline(0, now), default);
        assert_eq!(tick_deadline(600_000, now), default, "cargo lambda watch");
        assert_eq!(tick_deadline(now - 1, now), default, "past");
        assert_eq!(tick_deadline(now + 901_000, now), default);
    }

    fn scheduled() -> EventBridgeEvent<Value> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../events/reconciler-scheduled.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn sample_event_deserialises() {
        let e = scheduled();
        assert_eq!(e.detail_type, "Scheduled Event");
        assert_eq!(e.source, "aws.events");
    }

    #[tokio::test]
    async fn a_lost_send_is_reenqueued_after_the_grace_period() {
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        let store = Arc::new(MemoryStore::new());
        let queue = Arc::new(MemoryQueue::new(Arc::new(clock.clone())));
        let metrics = Arc::new(CapturedMetrics::new());
        let deps = ReconcilerFunction {
            reconciler: ReconcilerDeps {
                charge: EngineDeps {
                    store: store.clone(),
                    gateway: Arc::new(FakeGateway::new()),
                    clock: Arc::new(clock.clone()),
                    policy: Policy::default(),
                },
                queue: queue.clone(),
                page_size: 10,
                charge_throughput: charge_once::config::StripeBudget::default_throughput(),
                dispute_watch: None,
                refund_watch: None,
            },
            metrics: metrics.clone(),
        };
        charge_core::testing::order("ord-lost-send")
            .amount(100)
            .at(clock.now())
            .create_in(store.as_ref())
            .await;

        let out = handle(&deps, LambdaEvent::new(scheduled(), Context::default()))
            .await
            .unwrap();
        assert_eq!(out["reenqueued"], 0, "inside the grace period");
        assert!(queue.is_empty());
        assert_eq!(
            metrics.lines().len(),
            3,
            "the due work's line, the open disputes' and the REVIEW partition's, no review class"
        );
        assert_eq!(
            metrics.sum("DisputesOpen", &[("Function", "reconciler")]),
            0.0
        );
        assert_eq!(metrics.sum("Ticks", &[("Function", "reconciler")]), 1.0);
        assert_eq!(metrics.sum("InReview", &[("Function", "reconciler")]), 0.0);
        assert_eq!(
            metrics.sum("StillUnknown", &[("Function", "reconciler")]),
            0.0
        );

        clock.advance(Duration::from_secs(301));
        let out = handle(&deps, LambdaEvent::new(scheduled(), Context::default()))
            .await
            .unwrap();
        assert_eq!(out["reenqueued"], 1);
        assert_eq!(queue.len(), 1);
        // Re-enqueued counts as `Redriven`, through the function's sink.
        assert_eq!(metrics.lines().len(), 6);
        assert_eq!(metrics.sum("Redriven", &[("Function", "reconciler")]), 1.0);
    }
}
