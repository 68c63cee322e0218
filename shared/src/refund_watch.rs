//! The refund watch's shell, one step of the reconciler's tick: the succeeded refunds whose next
//! read has come ([`charge_core::refund::watch`]) read again at Stripe by id, and a late failure
//! Stripe reports taken as the same write the events function takes
//! ([`crate::executor::refund::fail_later`]). With or without an events source: this is what
//! learns it on a stack that has none, or when an event was lost.
//!
//! One step, in order:
//! 1. read the cursor ([`RefundWatchCursor`]): the span of settle times covered so far ends at
//!    `through` (absent before the first tick: the first tick starts it at now, and reads
//!    nothing);
//! 2. cover `[through, min(now, through + MAX_SPAN))`: for each offset of the watch, the refunds
//!    settled in that span less the offset (the settled index, refunds only; keys first, then the
//!    refunds' records);
//! 3. for each one still recorded `succeeded`, one retrieve (paced to the reconciler's Stripe
//!    share), and the rule's answer: left alone, failed later (written, paged), or a
//!    contradiction (nothing written, paged);
//! 4. move the cursor to the span's end, only when every read of the span was answered: a span cut
//!    short by the tick's time or by Stripe saying "later" is read again by the next tick (the
//!    reads already made are repeated; the write is made once).
//!
//! Cost per refund watched, over its window: one retrieve and its share of one BatchGetItem per
//! read ([`RefundWatch::reads_per_refund`], 30 by default); per tick, one GetItem, one UpdateItem
//! and one index Query per offset and UTC day touched (30 by default), whatever the refunds.

use std::time::Duration;

use charge_core::audit::AuditWindow;
use charge_core::outcome::GatewayError;
use charge_core::refund::event_plan::RefundEventAction;
use charge_core::refund::watch::{after_read, watched, RefundWatch};
use tracing::{error, info, warn};

use crate::executor::refund::{fail_later, LateFailure};
use crate::executor::EngineDeps;
use charge_core::operation::Operation;
use charge_core::time::Timestamp;

use crate::ports::{RefundWatchCursor, SettledRecords, StoreError};
use crate::telemetry::ErrorChain;

/// The most settle time one tick covers: a cursor left behind (a tick that failed, a stack that
/// was off) catches up this much per tick rather than all at once.
pub const MAX_SPAN: Duration = Duration::from_secs(3600);

/// Records per page of the settled index.
const PAGE_SIZE: usize = 100;

/// The watch's settings and where its cursor is kept.
#[derive(Clone)]
pub struct RefundWatchDeps {
    pub watch: RefundWatch,
    pub cursor: std::sync::Arc<dyn RefundWatchCursor>,
}

/// What one watch step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchReport {
    /// Refunds read again at Stripe (`RefundsWatched`).
    pub read: u64,
    /// Of those, Stripe said failed after success, and the write was made now
    /// (`RefundFailedAfterSuccess`, paged).
    pub failed_later: u64,
    /// Stripe contradicts the record in another way, or refused the read: nothing written,
    /// logged for a person (`RefundWatchConflict`, paged).
    pub conflicts: u64,
    /// Store or Stripe failures, and records this release cannot read: the span is read again
    /// next tick (counted in the reconciler's `SkippedOnError` / `UnreadableRecords`).
    pub failures: u64,
    pub unreadable: u64,
    /// The span was not finished (time, or a failure): the cursor stays.
    pub incomplete: bool,
    /// How far the cursor is behind now after this step (`RefundWatchLag`).
    pub lag: Duration,
}

/// Runs one watch step (see the module doc). Never fails the tick: what fails is counted and
/// read again next tick.
pub async fn watch_refunds(
    deps: &EngineDeps,
    watch: &RefundWatchDeps,
    remaining: &(dyn Fn() -> Duration + Send + Sync),
    safety: Duration,
) -> WatchReport {
    let mut report = WatchReport::default();
    let now = deps.clock.now();
    let through = match watch.cursor.watched_through().await {
        Ok(through) => through,
        Err(e) => {
            warn!(error = %ErrorChain(&e), "cannot read the refund watch's cursor; the watch waits for the next tick");
            report.failures += 1;
            report.incomplete = true;
            return report;
        }
    };
    let from = through.unwrap_or(now);
    let to = now.min(from.plus(MAX_SPAN));
    let mut due = DueReads::new(&watch.watch, from, to);
    let covered = match read_due(deps, &mut due, remaining, safety, &mut report).await {
        Ok(()) => to,
        Err(stop) => {
            report.incomplete = true;
            match stop {
                Stop::Time => {
                    info!("out of time in the refund watch; the rest of its span is read next tick")
                }
                Stop::Stripe => info!(
                    "Stripe answered later; the refund watch goes on from that refund next tick"
                ),
                Stop::Store(e) => {
                    warn!(error = %ErrorChain(&e), "the settled index could not be read; the rest of the span is read next tick");
                    report.failures += 1;
                }
            }
            due.done_until
        }
    };
    if through.is_none() || covered > from {
        match watch.cursor.advance_watch(through, covered).await {
            Ok(true) => {}
            Ok(false) => info!("another tick moved the refund watch's cursor first"),
            Err(e) => {
                warn!(error = %ErrorChain(&e), "cannot move the refund watch's cursor; the span is read again next tick");
                report.failures += 1;
            }
        }
    }
    report.lag = now.since(covered);
    info!(
        read = report.read,
        failed_later = report.failed_later,
        conflicts = report.conflicts,
        failures = report.failures,
        incomplete = report.incomplete,
        lag_secs = report.lag.as_secs(),
        "refund watch"
    );
    report
}

enum Stop {
    Time,
    /// Stripe said "later" (a 429, the pacer's slot too far away) or gave no answer.
    Stripe,
    Store(StoreError),
}

/// The reads a span holds, one stream of settled refunds per offset, taken in the order they
/// are due (settle time plus offset) across the streams, so a step cut short has read
/// everything due before `done_until` and the next one starts there.
struct DueReads {
    streams: Vec<Stream>,
    /// Every read due before this has been made.
    done_until: Timestamp,
}

struct Stream {
    offset: Duration,
    window: AuditWindow,
    /// The page read and not yet taken, oldest settle first.
    page: std::collections::VecDeque<Operation>,
    /// Where the next page starts; `None` with `started` once the window is read whole.
    next: Option<String>,
    started: bool,
}

impl Stream {
    fn exhausted(&self) -> bool {
        self.page.is_empty() && self.started && self.next.is_none()
    }

    fn head_due(&self) -> Option<Timestamp> {
        self.page
            .front()
            .and_then(|op| op.settled_at)
            .map(|at| at.plus(self.offset))
    }
}

impl DueReads {
    fn new(watch: &RefundWatch, from: Timestamp, to: Timestamp) -> Self {
        let streams = watch
            .offsets()
            .zip(watch.slots(from, to))
            .map(|(offset, (a, b))| Stream {
                offset,
                window: AuditWindow { from: a, to: b },
                page: Default::default(),
                next: None,
                started: false,
            })
            .collect();
        Self {
            streams,
            done_until: from,
        }
    }

    /// The next refund due across the streams (reading a page where a stream has none left),
    /// or `None` once every stream is read whole.
    async fn next(
        &mut self,
        store: &dyn SettledRecords,
        report: &mut WatchReport,
    ) -> Result<Option<Operation>, StoreError> {
        for stream in &mut self.streams {
            while stream.page.is_empty() && !stream.exhausted() {
                let page = store
                    .settled_refunds_between(&stream.window, stream.next.take(), PAGE_SIZE)
                    .await?;
                stream.started = true;
                stream.next = page.next;
                for bad in &page.unreadable {
                    report.unreadable += 1;
                    error!(key = %bad.key, reason = %bad.reason, "unreadable refund record skipped by the refund watch (chargectl show prints it raw)");
                }
                stream.page.extend(
                    page.operations
                        .into_iter()
                        .filter(|op| watched(op).is_some() && op.settled_at.is_some()),
                );
            }
        }
        let Some(first) = self
            .streams
            .iter_mut()
            .filter(|s| !s.page.is_empty())
            .min_by_key(|s| s.head_due())
        else {
            return Ok(None);
        };
        if let Some(due) = first.head_due() {
            self.done_until = self.done_until.max(due);
        }
        Ok(first.page.pop_front())
    }
}

/// Every refund due in the span, read again, in the order they are due.
async fn read_due(
    deps: &EngineDeps,
    due: &mut DueReads,
    remaining: &(dyn Fn() -> Duration + Send + Sync),
    safety: Duration,
    report: &mut WatchReport,
) -> Result<(), Stop> {
    loop {
        if remaining() < safety {
            return Err(Stop::Time);
        }
        let Some(op) = due.next(&*deps.store, report).await.map_err(Stop::Store)? else {
            return Ok(());
        };
        let Some(id) = watched(&op) else { continue };
        report.read += 1;
        let stripe = match deps.gateway.retrieve_refund(id).await {
            Ok(stripe) => stripe,
            Err(e @ (GatewayError::RetryLater { .. } | GatewayError::Ambiguous { .. })) => {
                warn!(order_id = %op.order_id, operation_id = %op.operation_id, refund = id.as_str(), error = %ErrorChain(&e), "the refund watch's read got no answer; read again next tick");
                report.failures += 1;
                return Err(Stop::Stripe);
            }
            Err(e) => {
                error!(order_id = %op.order_id, operation_id = %op.operation_id, refund = id.as_str(), error = %ErrorChain(&e), "Stripe refused to read a refund recorded succeeded; nothing written, an operator must check it at Stripe");
                report.conflicts += 1;
                continue;
            }
        };
        let now = deps.clock.now();
        match after_read(&op, &stripe, now) {
            RefundEventAction::Ignore(_) | RefundEventAction::Settle => {}
            RefundEventAction::FailLater(write) => match fail_later(&*deps.store, &write).await {
                Ok(LateFailure::Recorded(_)) => report.failed_later += 1,
                Ok(LateFailure::AlreadyFailed | LateFailure::Gone) => {}
                Ok(LateFailure::Moved(now)) => {
                    info!(order_id = %op.order_id, operation_id = %op.operation_id, status = %now.status, "the refund changed since it was read; read again next tick");
                    return Err(Stop::Stripe);
                }
                Err(e) => {
                    warn!(order_id = %op.order_id, operation_id = %op.operation_id, error = %ErrorChain(&e), "cannot record the refund's late failure; read again next tick");
                    report.failures += 1;
                    return Err(Stop::Stripe);
                }
            },
            RefundEventAction::PageSettled { reason } => {
                error!(order_id = %op.order_id, operation_id = %op.operation_id, refund = id.as_str(), stripe_status = %stripe.status, %reason, "Stripe contradicts a succeeded refund; nothing written, an operator must check it at Stripe");
                report.conflicts += 1;
            }
            RefundEventAction::Mismatch(why) => {
                error!(order_id = %op.order_id, operation_id = %op.operation_id, refund = id.as_str(), reason = why.as_str(), "Stripe's refund is not the one recorded; nothing written, an operator must check it at Stripe");
                report.conflicts += 1;
            }
        }
    }
}
