//! The reconciler: every unsettled operation converges, without a human for the common cases.
//!
//! One tick reads the unknown index for operations due now (never the table), page by page, and for
//! each decides with [`plan()`]:
//! - `pending`, never attempted, past the grace period → **re-enqueue** (the SendMessage after the
//!   checkout's PutItem was lost), unless the queue is behind ([`wait_for_queue`]: more messages
//!   waiting than the charge environments take at once, read once a tick when one is due; at a
//!   later look, also more work than the grace): then
//!   its message is most likely still waiting there, and the operation is due again once the
//!   charge path has worked through the queue (and no sooner than it has already waited, up to an
//!   hour: a wait is a write), nothing sent;
//! - attempted (`unknown`, or `pending` after a retry-later) inside the key window → **re-drive**
//!   through the queue with a fresh dedup id `operation_id:<n>` and an exponential backoff recorded
//!   as the next due time;
//! - past the key window → **settle** through [`execute`], which never creates past the
//!   window: retrieve when the PaymentIntent id is known, else search by operation id once search
//!   can be trusted; one match decides, 0 or several go to review.
//!
//! Two overlapping ticks are safe by the store's conditions, not by luck: a re-drive first moves the
//! due time with a write guarded by the `updated_at` it read (only one tick wins, and only the
//! winner sends), and settling goes through the lease.
//!
//! A tick stops before its time budget runs out; what it did not reach is still due and is picked
//! up by the next tick. Its metrics go out as soon as the due work is done (`Ticks`, the
//! heartbeat, among them), before anything else is read.
//!
//! Then the tick reads again the succeeded refunds whose next read has come
//! ([`crate::refund_watch`]): a refund Stripe now says failed takes the events function's write
//! (failed, its reservation given back, `RefundFailed` published, paged), with or without an
//! events source.
//!
//! Then the dispute watch ([`crate::dispute_watch`]) lists the disputes Stripe created since its
//! cursor and records each one of ours through the dispute's shell: with no events source (or
//! every event of one lost), this is what records a dispute.
//!
//! An open dispute's record is due too (status `unknown`: its outcome is not known until Stripe
//! closes it), but nothing is ever sent for it: the tick reads the dispute again at Stripe
//! ([`reread_dispute`]), pages by the evidence deadline's rule
//! ([`charge_core::dispute::deadline`]: `DisputeDeadlineNear` inside `DisputeDeadlinePageHours`
//! of `due_by` with nothing submitted, `DisputeDeadlinePassed` after it), and writes what Stripe
//! holds through the dispute's own shell ([`crate::executor::dispute::record_dispute`]: moved,
//! settled once Stripe closed it, due again at its next read; one whose funds did not fit the
//! order's refunds is written without its reservation and counted, `DisputeUnreserved`, at every
//! read until Stripe closes it: it is never put in review). It is never re-enqueued, and
//! nothing is created at Stripe for it. Last in the tick (after the REVIEW count below) it
//! counts the open disputes and the nearest deadline for the dashboard ([`read_disputes`]:
//! `DisputesOpen`, `DisputeNearestDeadlineHours`), within the time left.
//!
//! Then every tick counts the REVIEW partition of the index ([`read_review`]) and reports how many
//! operations wait for a person and for how long (`InReview`, `OldestInReviewAge`): an alarm pages
//! while anything stays there, whichever function sent it. The count comes from the index entries
//! alone, within the time left, so a review storm costs its index pages and never the tick; a
//! record this release cannot read is counted there like any other, and the oldest review
//! records are read whole once per tick to count those (`UnreadableRecords`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use charge_core::dispute::deadline::{
    deadline, nearest_deadline_hours, DeadlineFacts, DeadlinePage,
};
use charge_core::domain::DisputeId;
use charge_core::operation::{Operation, OperationStatus};
use charge_core::plan::{Disposition, ReviewClass};
use charge_core::reconcile_plan::{
    plan, redrive_due_at, wait_for_queue, Action, ChargeThroughput, QueueBacklog, QueueDepth,
};
use charge_core::store::{Recorded, Reschedule};
use charge_core::time::Timestamp;
use tracing::{error, info, warn};

use crate::dispute_watch::{watch_disputes, DisputeWatchDeps, DisputeWatchReport};
use crate::executor::dispute::{record_dispute, DisputeRecording};
use crate::executor::{execute, EngineDeps};
use crate::ports::{
    IndexQuery, MetricsSink, OperationQueue, QueueError, QueuedOperation, StoreError, UnknownIndex,
};
use crate::refund_watch::{watch_refunds, RefundWatchDeps, WatchReport};
use crate::telemetry::{
    emf_line, refund_failed_after_success_line, sent_to_review_line, stripe_requests_lines,
    ErrorChain,
};
use charge_core::dispute::plan::Unchanged;

/// Below this much time left the end-of-tick REVIEW read stops: its next step is one DynamoDB
/// call, 3 s at its worst with the SDK's retries (`adapters::aws`), and the metrics line must
/// still go out after it.
pub const REVIEW_READ_RESERVE: Duration = Duration::from_secs(5);

/// How many review records a tick reads whole, the oldest first, to find those this release
/// cannot read: one BatchGetItem (DynamoDB's limit per call). Counting reads none.
pub const REVIEW_RECORDS_CHECKED: usize = 100;

/// What [`redrive`] did.
#[derive(Debug)]
pub enum Redriven {
    /// Rescheduled (the record as written) and sent with this message.
    Sent {
        op: Operation,
        message: QueuedOperation,
    },
    /// The guarded reschedule was refused: the record changed since it was read (the current
    /// record, `None` if it is gone). Nothing was sent.
    Refused(Option<Operation>),
    /// Rescheduled, but the send failed: the record stays due at its new time, so the reconciler
    /// tries again then.
    NotSent { op: Operation, error: QueueError },
}

/// The one re-drive, for the reconciler and `chargectl redrive`: a reschedule guarded by the
/// status and `updated_at` read before (so of two concurrent re-drivers only one wins, and only
/// the winner sends), counting one more re-drive, then a send with the dedup id
/// `operation_id:<redrives>` so FIFO deduplication does not swallow it. The charge function
/// re-uses the operation's idempotency key and never creates past the key window, so a re-drive
/// cannot make a second charge.
pub async fn redrive(
    store: &dyn UnknownIndex,
    queue: &dyn OperationQueue,
    request: Reschedule,
) -> Result<Redriven, StoreError> {
    let written = match store.reschedule(&request).await? {
        Recorded::Written(written) => written,
        Recorded::Refused(current) => return Ok(Redriven::Refused(current)),
    };
    let message = QueuedOperation::redrive(&written, written.redrives);
    Ok(match queue.send(&message).await {
        Ok(()) => Redriven::Sent {
            op: written,
            message,
        },
        Err(error) => Redriven::NotSent { op: written, error },
    })
}

/// Everything a tick needs.
#[derive(Clone)]
pub struct ReconcilerDeps {
    pub charge: EngineDeps,
    pub queue: Arc<dyn OperationQueue>,
    /// Index page size.
    pub page_size: usize,
    /// How fast the charge path drains the queue: a tick that finds more on it than the charge
    /// environments hold at once waits for it before re-enqueuing ([`wait_for_queue`]).
    pub charge_throughput: ChargeThroughput,
    /// The refund watch, run after the due work ([`crate::refund_watch`]); `None`: not watched
    /// by this tick (tests of the due work alone).
    pub refund_watch: Option<RefundWatchDeps>,
    /// The dispute watch, run after the refund watch ([`crate::dispute_watch`]): the disputes
    /// Stripe created since its cursor, listed and recorded, with or without events; `None`: not
    /// watched by this tick (tests of the due work alone).
    pub dispute_watch: Option<DisputeWatchDeps>,
}

/// What one tick did, for the log and the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    pub examined: u64,
    pub reenqueued: u64,
    pub redriven: u64,
    pub settled: u64,
    pub sent_to_review: u64,
    /// Past the window but not settled yet (search not trusted yet, or still processing).
    pub still_unknown: u64,
    /// Left alone: leased by someone, or another tick got there first (or one of `failures`).
    pub skipped: u64,
    /// Of `skipped`, those left because something failed: the store refused to answer, Stripe
    /// said "retry later" (rate limit, our key's configuration). Alarmed: `SkippedOnError`.
    pub failures: u64,
    /// Sent to review by this tick, by class (the sum is `sent_to_review`).
    pub review_classes: BTreeMap<ReviewClass, u64>,
    /// Operations waiting for a person (the REVIEW partition), counted from the index at the end
    /// of the tick, readable or not. A lower bound when `review_complete` is false.
    pub in_review: u64,
    /// How long the longest-waiting of them has been flagged.
    pub oldest_in_review_age: Duration,
    /// Pages of the REVIEW partition counted (0: no time was left for one, and the tick reports
    /// no `InReview`).
    pub review_pages: u64,
    /// The whole REVIEW partition was counted before the time ran out.
    pub review_complete: bool,
    /// Of the oldest [`REVIEW_RECORDS_CHECKED`] review records, those this release cannot read:
    /// counted (`UnreadableRecords`) and logged with their key.
    pub unreadable_in_review: u64,
    /// Queue sends that failed (the operation stays due and is retried next tick).
    pub send_failures: u64,
    /// Never-attempted operations past their grace left to a queue that is behind: due again
    /// once the charge path has worked through it, nothing sent (`WaitedForQueue`).
    pub waited_for_queue: u64,
    /// The queue's depth (visible and in flight), read at the tick's first re-enqueue; `None` if
    /// none was due or the queue could not say.
    pub queue_depth: Option<QueueDepth>,
    /// Due records this release could not read: counted, logged with their key, skipped; the
    /// rest of their page is worked as usual. Alarmed: `UnreadableRecords`.
    pub unreadable: u64,
    pub pages: u64,
    /// The time budget ran out before the index was exhausted.
    pub stopped_early: bool,
    /// Age of the oldest operation seen due in this tick.
    pub oldest_due_age: Duration,
    /// Authorizations looked at and still held uncaptured (due again at their deadline's page).
    pub authorized: u64,
    /// Of those, paged: uncaptured with the deadline less than the policy's lead away
    /// (`AuthorizationNearDeadline`, alarmed).
    pub deadline_near: u64,
    /// What the refund watch did this tick (its failures and unreadable records are also in
    /// `failures` and `unreadable`); `None` when the tick has no watch.
    pub refund_watch: Option<WatchReport>,
    /// What the dispute watch did this tick (its failures are also in `failures`, its unreserved
    /// disputes in `dispute_unreserved`); `None` when the tick has no watch.
    pub dispute_watch: Option<DisputeWatchReport>,
    /// Open disputes read again at Stripe this tick (their failures are in `failures`; those
    /// Stripe closed are in `settled`).
    pub disputes_read: u64,
    /// Of those, paged: needing a response with `due_by` inside the page window
    /// (`DisputeDeadlineNear`), and past it (`DisputeDeadlinePassed`).
    pub dispute_deadline_near: u64,
    pub dispute_deadline_passed: u64,
    /// Of those, written without their reservation on the order's charge (the order's refunds
    /// leave too little): `DisputeUnreserved`, paged at every re-read until Stripe closes it.
    pub dispute_unreserved: u64,
    /// Open disputes recorded, counted after the due work (`DisputesOpen`); `None` when the
    /// tick ran out of time before it counted them all (a partial count would read as fewer).
    pub disputes_open: Option<u64>,
    /// The nearest `due_by` of those still needing a response (`DisputeNearestDeadlineHours`).
    pub nearest_dispute_deadline: Option<Timestamp>,
}

impl TickReport {
    /// The due work's metrics, as CloudWatch EMF lines into `metrics`: one with the tick's counts
    /// (`Ticks` = 1 is the heartbeat), then one per review class sent to review (`SentToReview`
    /// under `Function` and `Function, ReasonClass`).
    pub fn emit_work_metrics(&self, metrics: &dyn MetricsSink, at: Timestamp) {
        metrics.emit(emf_line(
            "reconciler",
            at,
            &[
                ("Ticks", 1.0, "Count"),
                ("Settled", self.settled as f64, "Count"),
                (
                    "Redriven",
                    (self.redriven + self.reenqueued) as f64,
                    "Count",
                ),
                ("StillUnknown", self.still_unknown as f64, "Count"),
                (
                    "AuthorizationNearDeadline",
                    self.deadline_near as f64,
                    "Count",
                ),
                (
                    "DisputeDeadlineNear",
                    self.dispute_deadline_near as f64,
                    "Count",
                ),
                (
                    "DisputeDeadlinePassed",
                    self.dispute_deadline_passed as f64,
                    "Count",
                ),
                ("DisputeUnreserved", self.dispute_unreserved as f64, "Count"),
                ("SendFailures", self.send_failures as f64, "Count"),
                ("WaitedForQueue", self.waited_for_queue as f64, "Count"),
                ("UnreadableRecords", self.unreadable as f64, "Count"),
                ("SkippedOnError", self.failures as f64, "Count"),
                (
                    "OldestUnsettledAge",
                    self.oldest_due_age.as_secs_f64(),
                    "Seconds",
                ),
            ],
        ));
        for (class, n) in &self.review_classes {
            metrics.emit(sent_to_review_line("reconciler", *class, *n, at));
        }
        if let Some(watch) = &self.dispute_watch {
            metrics.emit(emf_line(
                "reconciler",
                at,
                &[
                    ("DisputesListed", watch.listed as f64, "Count"),
                    ("DisputeWatchLag", watch.lag.as_secs_f64(), "Seconds"),
                    (
                        "DisputeWatchRateLimited",
                        watch.rate_limited as f64,
                        "Count",
                    ),
                    ("DisputeWatchRetried", watch.retried as f64, "Count"),
                ],
            ));
        }
        if let Some(watch) = &self.refund_watch {
            metrics.emit(emf_line(
                "reconciler",
                at,
                &[
                    ("RefundsWatched", watch.read as f64, "Count"),
                    ("RefundWatchConflicts", watch.conflicts as f64, "Count"),
                    ("RefundWatchLag", watch.lag.as_secs_f64(), "Seconds"),
                ],
            ));
            metrics.emit(refund_failed_after_success_line(
                "reconciler",
                watch.failed_later,
                at,
            ));
        }
    }

    /// The open disputes' gauges, one EMF line: `DisputesOpen` and, when one still needs a
    /// response, `DisputeNearestDeadlineHours` (negative once passed). None when the count was
    /// cut short: a made-up 0 would hide them.
    pub fn emit_dispute_metrics(&self, metrics: &dyn MetricsSink, at: Timestamp) {
        let Some(open) = self.disputes_open else {
            return;
        };
        let line = match nearest_deadline_hours(self.nearest_dispute_deadline, at) {
            Some(hours) => emf_line(
                "reconciler",
                at,
                &[
                    ("DisputesOpen", open as f64, "Count"),
                    ("DisputeNearestDeadlineHours", hours, "None"),
                ],
            ),
            None => emf_line("reconciler", at, &[("DisputesOpen", open as f64, "Count")]),
        };
        metrics.emit(line);
    }

    /// The REVIEW partition's metrics, one EMF line: `InReview`, `OldestInReviewAge` and the
    /// review records found unreadable (`UnreadableRecords`, summed with the due work's). None
    /// when not a page of it was counted: a made-up 0 would clear InReviewAlarm.
    pub fn emit_review_metrics(&self, metrics: &dyn MetricsSink, at: Timestamp) {
        if self.review_pages == 0 {
            return;
        }
        metrics.emit(emf_line(
            "reconciler",
            at,
            &[
                ("InReview", self.in_review as f64, "Count"),
                (
                    "OldestInReviewAge",
                    self.oldest_in_review_age.as_secs_f64(),
                    "Seconds",
                ),
                (
                    "UnreadableRecords",
                    self.unreadable_in_review as f64,
                    "Count",
                ),
            ],
        ));
    }
}

/// The REVIEW partition at the end of a tick, each step only while [`REVIEW_READ_RESERVE`] is
/// left:
/// 1. counted from the index entries, page by page ([`UnknownIndex::count_in_review`]): how many
///    wait and since when the longest-waiting was flagged. A record this release cannot read
///    counts like any other, so InReview never falls while one waits. Cut short by the time, the
///    count is what was read, a lower bound (`review_complete` false): still more than 0 whenever
///    anything waits, which is what InReviewAlarm asks.
/// 2. the oldest [`REVIEW_RECORDS_CHECKED`] records read whole, once, to count those this release
///    cannot read (`UnreadableRecords`, logged with their key). In a storm larger than that the
///    newer ones are in InReview (which pages) and listed with their reason by `chargectl
///    unknowns --review`, not in UnreadableRecords: reading every review record each tick would
///    cost a read per record per tick for a count the index already gives.
pub async fn read_review(
    deps: &ReconcilerDeps,
    remaining: &(dyn Fn() -> Duration + Send + Sync),
    report: &mut TickReport,
) -> Result<(), StoreError> {
    let store = &deps.charge.store;
    let now = deps.charge.clock.now();
    let mut cursor = None;
    loop {
        if remaining() < REVIEW_READ_RESERVE {
            warn!(
                in_review_counted = report.in_review,
                pages = report.review_pages,
                "out of time counting the REVIEW partition; InReview is what was counted"
            );
            return Ok(());
        }
        let page = store.count_in_review(cursor.take(), deps.page_size).await?;
        report.review_pages += 1;
        report.in_review += page.entries;
        if let Some(flagged) = page.oldest_flagged_at {
            report.oldest_in_review_age = report.oldest_in_review_age.max(now.since(flagged));
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    report.review_complete = true;
    if report.in_review == 0 {
        return Ok(());
    }
    if remaining() < REVIEW_READ_RESERVE {
        warn!("out of time before reading the review records; unreadable ones are not counted this tick");
        return Ok(());
    }
    let page = store
        .query_index(IndexQuery::InReview, None, REVIEW_RECORDS_CHECKED)
        .await?;
    for bad in &page.unreadable {
        report.unreadable_in_review += 1;
        error!(
            key = %bad.key,
            reason = %bad.reason,
            "unreadable record in review: this release cannot read it (chargectl show prints it raw)"
        );
    }
    Ok(())
}

/// The open disputes at the end of the tick, for the dashboard: every dispute record of the
/// unknown index due within the dispute plan's longest wait between reads (an open dispute is
/// always due within it: its every write sets its next read no later), read page by page while
/// [`REVIEW_READ_RESERVE`] is left ([`UnknownIndex::disputes_due_by`]). Its cost is the index
/// pages of what is due within that day and the open disputes' records alone: the
/// authorizations and unknowns due soon are told apart by their entries' sort keys and never
/// read. It cannot ride on the due work's read, which lists only what is due now: an open
/// dispute is due at its next read, up to a day away, and the nearest deadline needs its
/// record's `due_by` (the index projects none). A dispute in review is counted by `InReview`,
/// not here.
pub async fn read_disputes(
    deps: &ReconcilerDeps,
    remaining: &(dyn Fn() -> Duration + Send + Sync),
    report: &mut TickReport,
) -> Result<(), StoreError> {
    let now = deps.charge.clock.now();
    let horizon = now.plus(deps.charge.policy.dispute.reread_at_most);
    let (mut open, mut nearest): (u64, Option<Timestamp>) = (0, None);
    let mut cursor = None;
    loop {
        if remaining() < REVIEW_READ_RESERVE {
            warn!(
                disputes_counted = open,
                "out of time counting open disputes; DisputesOpen is not reported this tick"
            );
            return Ok(());
        }
        let page = deps
            .charge
            .store
            .disputes_due_by(horizon, cursor.take(), deps.page_size)
            .await?;
        for op in &page.operations {
            let Some(state) = op.params.dispute_state() else {
                continue;
            };
            if op.status.is_settled() {
                continue;
            }
            open += 1;
            let due = state.due_by.filter(|t| t.as_millis() > 0);
            if let Some(due) = due.filter(|_| state.status.needs_response()) {
                nearest = Some(nearest.map_or(due, |n| n.min(due)));
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    report.disputes_open = Some(open);
    report.nearest_dispute_deadline = nearest;
    Ok(())
}

/// The tick's Stripe requests by endpoint (`StripeRequests`), when its gateway counts them.
fn emit_stripe_requests(deps: &ReconcilerDeps, metrics: &dyn MetricsSink) {
    if let Some(requests) = deps.charge.gateway.requests() {
        let sent = requests.since_last_report();
        for line in stripe_requests_lines("reconciler", &sent, deps.charge.clock.now()) {
            metrics.emit(line);
        }
    }
}

/// Runs one tick. `remaining` tells how much time is left; the tick stops taking new work once it
/// is below `safety` (one Stripe call and a write must still fit). The due work's metrics go into
/// `metrics` as soon as it is done, then the REVIEW partition is read ([`read_review`], within
/// the time left) and its metrics follow. A store failure fails the tick (the invocation's
/// error pages); what was emitted before it stays emitted.
pub async fn reconcile_tick(
    deps: &ReconcilerDeps,
    remaining: &(dyn Fn() -> Duration + Send + Sync),
    safety: Duration,
    metrics: &dyn MetricsSink,
) -> Result<TickReport, StoreError> {
    let mut report = TickReport::default();
    work_due(deps, remaining, safety, &mut report).await?;
    if let Some(watch) = &deps.refund_watch {
        let watched = watch_refunds(&deps.charge, watch, remaining, safety).await;
        report.failures += watched.failures;
        report.unreadable += watched.unreadable;
        report.refund_watch = Some(watched);
    }
    if let Some(watch) = &deps.dispute_watch {
        let watched = watch_disputes(&deps.charge, watch, remaining, safety).await;
        report.failures += watched.failures;
        report.dispute_unreserved += watched.unreserved;
        report.dispute_watch = Some(watched);
    }
    // Out before the REVIEW read: however large the review backlog, a tick that did its work
    // is seen to have done it (the heartbeat).
    report.emit_work_metrics(metrics, deps.charge.clock.now());
    emit_stripe_requests(deps, metrics);
    read_review(deps, remaining, &mut report).await?;
    report.emit_review_metrics(metrics, deps.charge.clock.now());
    // Last: a dashboard's gauges, after what pages (InReview) has had its time.
    read_disputes(deps, remaining, &mut report).await?;
    report.emit_dispute_metrics(metrics, deps.charge.clock.now());
    info!(
        examined = report.examined,
        reenqueued = report.reenqueued,
        redriven = report.redriven,
        waited_for_queue = report.waited_for_queue,
        queue_visible = report.queue_depth.map(|d| d.visible),
        queue_in_flight = report.queue_depth.map(|d| d.in_flight),
        settled = report.settled,
        sent_to_review = report.sent_to_review,
        still_unknown = report.still_unknown,
        skipped = report.skipped,
        failures = report.failures,
        unreadable = report.unreadable,
        in_review = report.in_review,
        in_review_complete = report.review_complete,
        unreadable_in_review = report.unreadable_in_review,
        pages = report.pages,
        stopped_early = report.stopped_early,
        "reconciler tick"
    );
    Ok(report)
}

/// The due work: the index's due pages, oldest due first, each operation as [`plan()`] says,
/// until the index is exhausted or less than `safety` is left.
async fn work_due(
    deps: &ReconcilerDeps,
    remaining: &(dyn Fn() -> Duration + Send + Sync),
    safety: Duration,
    report: &mut TickReport,
) -> Result<(), StoreError> {
    let now = deps.charge.clock.now();
    // The queue's depth tells a long queue from a lost message: read once a tick, at the first
    // operation it decides (a tick with nothing to re-enqueue does not read it).
    let mut backlog: Option<Option<QueueBacklog>> = None;
    let mut cursor = None;
    'pages: loop {
        if remaining() < safety {
            report.stopped_early = true;
            break;
        }
        let page = deps
            .charge
            .store
            .query_index(IndexQuery::DueBy(now), cursor.take(), deps.page_size)
            .await?;
        report.pages += 1;
        for bad in &page.unreadable {
            report.unreadable += 1;
            error!(
                key = %bad.key,
                reason = %bad.reason,
                "unreadable record skipped: this release cannot read it; the rest of the page goes on \
                 (chargectl show prints it raw)"
            );
        }
        for op in &page.operations {
            if remaining() < safety {
                report.stopped_early = true;
                break 'pages;
            }
            report.examined += 1;
            // A dispute is read again at Stripe, never sent anywhere; it is open for weeks by
            // design (Stripe's response window, then the bank's review), so it never ages here.
            if let Some(id) = op.kind.dispute_id() {
                reread_dispute(deps, op, id, now, report).await;
                continue;
            }
            // An authorization is due to be looked at until it is captured, canceled or lapses
            // (days, by design): only an operation whose outcome is not known yet ages here, so
            // the alarm on this age means a stuck unknown, never a held authorization (nor an open
            // dispute, read again above: its weeks are the bank's, watched by its deadline).
            if op.status != OperationStatus::Authorized {
                report.oldest_due_age = report.oldest_due_age.max(now.since(op.created_at));
            }
            let action = plan(op, now, &deps.charge.policy);
            if action == Action::Reenqueue && backlog.is_none() {
                backlog = Some(read_backlog(deps, report).await);
            }
            handle_one(deps, op, action, now, backlog.flatten().as_ref(), report).await;
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(()),
        }
    }
    Ok(())
}

/// The queue's depth (into the report) against the charge path's throughput; `None` when the
/// queue cannot say, which re-enqueues as before.
async fn read_backlog(deps: &ReconcilerDeps, report: &mut TickReport) -> Option<QueueBacklog> {
    report.queue_depth = match deps.queue.depth().await {
        Ok(depth) => depth,
        Err(e) => {
            warn!(error = %ErrorChain(&e), "cannot read the queue's depth; re-enqueuing as if it were not behind");
            None
        }
    };
    report
        .queue_depth
        .map(|depth| deps.charge_throughput.with_depth(depth))
}

#[tracing::instrument(
    name = "reconcile",
    skip_all,
    fields(order_id = %op.order_id, operation_id = %op.operation_id, status = %op.status)
)]
async fn handle_one(
    deps: &ReconcilerDeps,
    op: &Operation,
    action: Action,
    now: Timestamp,
    backlog: Option<&QueueBacklog>,
    report: &mut TickReport,
) {
    match action {
        Action::Skip => {
            info!(decision = "skip", "leased by another execution");
            report.skipped += 1;
        }
        Action::Reenqueue => match wait_for_queue(op, now, backlog, &deps.charge.policy) {
            Some(next_due_at) => wait(deps, op, next_due_at, now, report).await,
            None => send_again(deps, op, action, now, report).await,
        },
        Action::Redrive => send_again(deps, op, action, now, report).await,
        Action::Settle => settle(deps, op, report).await,
    }
}

/// An open dispute, due: read again at Stripe (the record is written only from what Stripe
/// answers), paged by the deadline's rule on what Stripe holds now, then written through the
/// dispute's shell (moved, settled once closed, due again at its next read). A read or a write
/// that fails leaves it due: the next tick tries again (`SkippedOnError`).
#[tracing::instrument(
    name = "dispute",
    skip_all,
    fields(order_id = %op.order_id, operation_id = %op.operation_id, dispute = %id)
)]
async fn reread_dispute(
    deps: &ReconcilerDeps,
    op: &Operation,
    id: &DisputeId,
    now: Timestamp,
    report: &mut TickReport,
) {
    report.disputes_read += 1;
    let dispute = match deps.charge.gateway.retrieve_dispute(id).await {
        Ok(dispute) => dispute,
        Err(e) => {
            warn!(error = %ErrorChain(&e), "cannot read the dispute at Stripe this tick; it stays due");
            report.skipped += 1;
            report.failures += 1;
            return;
        }
    };
    let policy = &deps.charge.policy;
    let rule = deadline(
        &DeadlineFacts::of(&dispute),
        now,
        policy.dispute.page_window,
    );
    let due_by = dispute.due_by.map(|t| t.to_rfc3339());
    match rule.page {
        Some(DeadlinePage::Near { draft_saved }) => {
            report.dispute_deadline_near += 1;
            error!(decision = "page", dispute_status = %dispute.status, due_by, draft_saved,
                amount = dispute.amount, currency = %dispute.currency, reason = %dispute.reason,
                "dispute deadline is near and no evidence is submitted: answer it in Stripe's \
                 dashboard (Payments > Disputes) before due_by; chargectl show <order_id>");
        }
        Some(DeadlinePage::Passed) => {
            report.dispute_deadline_passed += 1;
            error!(decision = "page", dispute_status = %dispute.status, due_by,
                amount = dispute.amount, currency = %dispute.currency,
                "dispute deadline passed with no evidence submitted: Stripe closes it lost; \
                 check it in Stripe's dashboard (Payments > Disputes); chargectl show <order_id>");
        }
        None => {}
    }
    match record_dispute(
        &*deps.charge.store,
        &op.order_id,
        &dispute,
        now,
        &policy.dispute,
    )
    .await
    {
        Ok(DisputeRecording::Written {
            record, unreserved, ..
        }) => {
            info!(decision = "dispute", status = %record.status, dispute_status = %dispute.status,
                next_due_at = ?record.next_due_at.map(|t| t.to_rfc3339()), "dispute read again and recorded as Stripe holds it");
            if record.status.is_settled() {
                report.settled += 1;
            }
            if unreserved {
                report.dispute_unreserved += 1;
                error!(decision = "page", dispute_status = %dispute.status,
                    reason = record.last_error.as_deref().unwrap_or(""),
                    "dispute recorded without its reservation: answer it in Stripe's dashboard \
                     (Payments > Disputes) with the refund as evidence; chargectl show <order_id>");
            }
        }
        // A record that exists but that the plan no longer calls ours, or cannot hold, was
        // written by hand or by a bug: it would stay due and be read every tick, so it is
        // counted as a failure (SkippedOnError pages) for a person to look at.
        Ok(DisputeRecording::Unchanged(
            why @ (Unchanged::NotOurs | Unchanged::Unrecordable(_)),
        )) => {
            error!(decision = "skip", reason = why.as_str(), dispute_status = %dispute.status,
                "a recorded dispute the plan cannot write: its charge no longer names the \
                 dispute's PaymentIntent, or Stripe's amount cannot be held; it stays due \
                 (chargectl show <order_id>)");
            report.skipped += 1;
            report.failures += 1;
        }
        Ok(DisputeRecording::Unchanged(why)) => {
            info!(
                decision = "dispute",
                reason = why.as_str(),
                "dispute read again; nothing to write"
            );
        }
        Err(e) => {
            warn!(error = %ErrorChain(&e), "cannot record the dispute this tick; it stays due");
            report.skipped += 1;
            report.failures += 1;
        }
    }
}

/// Leaves a never-attempted operation to a queue that is behind: due again at `next_due_at`,
/// guarded by what was read, nothing sent.
async fn wait(
    deps: &ReconcilerDeps,
    op: &Operation,
    next_due_at: Timestamp,
    now: Timestamp,
    report: &mut TickReport,
) {
    match deps
        .charge
        .store
        .reschedule(&Reschedule::wait(op, next_due_at, now))
        .await
    {
        Ok(Recorded::Written(_)) => {
            info!(decision = "wait_for_queue", %next_due_at, "the queue is behind; its message is most likely waiting there");
            report.waited_for_queue += 1;
        }
        Ok(Recorded::Refused(_)) => {
            info!(
                decision = "skip",
                "changed since read; another writer got there first"
            );
            report.skipped += 1;
        }
        Err(e) => {
            warn!(error = %ErrorChain(&e), "cannot reschedule this tick");
            report.skipped += 1;
            report.failures += 1;
        }
    }
}

/// Re-enqueues a never-attempted operation, or re-drives one attempted inside the key window,
/// through the queue: rescheduled first (guarded by what was read), then sent.
async fn send_again(
    deps: &ReconcilerDeps,
    op: &Operation,
    action: Action,
    now: Timestamp,
    report: &mut TickReport,
) {
    let decision = action.as_str();
    let request = Reschedule::redrive(op, redrive_due_at(op, now, &deps.charge.policy), now);
    match redrive(&*deps.charge.store, &*deps.queue, request).await {
        Ok(Redriven::Sent { op: moved, message }) => {
            info!(decision, dedup_id = %message.dedup_id, next_due_at = %moved.next_due_at.unwrap_or(now), "sent");
            if action == Action::Reenqueue {
                report.reenqueued += 1;
            } else {
                report.redriven += 1;
            }
        }
        Ok(Redriven::Refused(_)) => {
            info!(
                decision = "skip",
                "changed since read; another writer got there first"
            );
            report.skipped += 1;
        }
        Ok(Redriven::NotSent { error, .. }) => {
            // Still due at its new time: the next tick after it tries again.
            warn!(decision, error = %ErrorChain(&error), "send failed; will retry at the next due time");
            report.send_failures += 1;
        }
        Err(e) => {
            warn!(error = %ErrorChain(&e), "cannot reschedule this tick");
            report.skipped += 1;
            report.failures += 1;
        }
    }
}

/// Settles an operation past the key window through the executor (which never creates then).
async fn settle(deps: &ReconcilerDeps, op: &Operation, report: &mut TickReport) {
    let r = match execute(&deps.charge, &op.key(), &op.operation_id).await {
        Ok(r) => r,
        Err(e) => {
            // One operation's failure (the store throttled, the record vanished) must not
            // stop the tick: it stays due and the next tick tries again.
            warn!(error = %ErrorChain(&e), "cannot settle this tick");
            report.skipped += 1;
            report.failures += 1;
            return;
        }
    };
    match r.disposition {
        Disposition::AlreadySettled => {
            info!(decision = "skip", status = %r.status, "settled meanwhile by another run");
            report.skipped += 1;
        }
        Disposition::Settled => {
            info!(decision = "settle", status = %r.status, external_id = r.external_id.as_deref().unwrap_or(""), "settled");
            report.settled += 1;
        }
        Disposition::InReview(reason) => {
            info!(decision = "review", %reason, "sent to review");
            if let Some(class) = r.sent_to_review {
                report.sent_to_review += 1;
                *report.review_classes.entry(class).or_default() += 1;
            } else {
                report.skipped += 1;
            }
        }
        Disposition::Scheduled if r.status == OperationStatus::Authorized => {
            report.authorized += 1;
            report.deadline_near += u64::from(r.deadline_near);
            if r.deadline_near {
                error!(decision = "page", order_id = %op.order_id, operation_id = %op.operation_id,
                    capture_before = ?r.record.as_ref().and_then(|o| o.capture_before()).map(|t| t.to_rfc3339()),
                    "an authorization is not captured and its deadline is near: capture or cancel it \
                     (POST /orders/{{order_id}}/capture or /cancel) before Stripe cancels it");
            } else {
                info!(
                    decision = "watch",
                    "authorized; due again when its deadline nears"
                );
            }
        }
        Disposition::Scheduled => {
            info!(decision = "wait", status = %r.status, "not settled yet");
            report.still_unknown += 1;
        }
        other => {
            info!(decision = "skip", disposition = ?other, "not settled this tick");
            report.skipped += 1;
            if matches!(other, Disposition::RetryLater(_)) {
                report.failures += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ports::{OperationCreates, OperationReads};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;

    use async_trait::async_trait;
    use charge_core::store::Created;
    use charge_core::testing::{order, T0};

    use super::*;
    use crate::memory::MemoryStore;

    /// Records what was sent; refuses every send while `failing`; says it is `depth` deep.
    #[derive(Default)]
    struct Queue {
        sent: Mutex<Vec<QueuedOperation>>,
        refused: AtomicU32,
        failing: bool,
        depth: Option<QueueDepth>,
        depth_reads: AtomicU32,
    }

    #[async_trait]
    impl OperationQueue for Queue {
        async fn send(&self, charge: &QueuedOperation) -> Result<(), QueueError> {
            if self.failing {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Err(QueueError::new("injected: queue unavailable"));
            }
            self.sent.lock().unwrap().push(charge.clone());
            Ok(())
        }

        async fn depth(&self) -> Result<Option<QueueDepth>, QueueError> {
            self.depth_reads.fetch_add(1, Ordering::Relaxed);
            Ok(self.depth)
        }
    }

    /// One tick over `store` with `queue`, at `now`, the template's default throughput (2
    /// environments × 10 at once, 22 messages/s).
    async fn tick_with(store: Arc<MemoryStore>, queue: Arc<Queue>, now: Timestamp) -> TickReport {
        let deps = ReconcilerDeps {
            charge: EngineDeps {
                store,
                gateway: Arc::new(crate::memory::FakeGateway::new()),
                clock: Arc::new(charge_core::time::ManualClock::new(now)),
                policy: charge_core::plan::Policy::default(),
            },
            queue,
            page_size: 10,
            charge_throughput: crate::config::StripeBudget::default_throughput(),
            dispute_watch: None,
            refund_watch: None,
        };
        reconcile_tick(
            &deps,
            &|| Duration::from_secs(60),
            Duration::from_secs(1),
            &crate::telemetry::DiscardMetrics,
        )
        .await
        .unwrap()
    }

    /// A pending operation past its grace, with 2,200 messages waiting ahead of the charge
    /// environments' 20: its message is most likely among them. The tick sends nothing and looks
    /// again once the charge path has worked through them (2,220 at 22/s: 101 s).
    #[tokio::test]
    async fn a_pending_operation_waits_for_a_queue_that_is_behind() {
        let (store, op) = stored().await;
        let store = Arc::new(store);
        let queue = Arc::new(Queue {
            depth: Some(QueueDepth {
                visible: 2_200,
                in_flight: 20,
            }),
            ..Queue::default()
        });
        let now = op.created_at.plus(Duration::from_secs(301));
        let report = tick_with(store.clone(), queue.clone(), now).await;
        assert_eq!(queue.depth_reads.load(Ordering::Relaxed), 1);
        assert_eq!(
            (report.waited_for_queue, report.reenqueued),
            (1, 0),
            "{report:?}"
        );
        assert!(queue.sent.lock().unwrap().is_empty());
        let stored = store.get(&op.key()).await.unwrap().unwrap();
        assert_eq!(stored.redrives, 0, "nothing sent, nothing counted");
        assert_eq!(
            stored.next_due_at,
            Some(now.plus(Duration::from_secs_f64(2_220.0 / 22.0)))
        );
    }

    /// The same queue at the operation's next look (its record written by the first one's wait):
    /// 2,220 is 101 s of work, less than the 300 s grace, so what the queue held at the first
    /// look has been worked through. Its message was lost: re-enqueued now, not waited for again.
    #[tokio::test]
    async fn a_pending_operation_waited_for_once_is_reenqueued_when_the_queue_holds_less_than_its_grace(
    ) {
        let (store, op) = stored().await;
        let store = Arc::new(store);
        let first_look = op.created_at.plus(Duration::from_secs(301));
        let waited = store
            .reschedule(&Reschedule::wait(
                &op,
                first_look.plus(Duration::from_secs(101)),
                first_look,
            ))
            .await
            .unwrap();
        assert!(matches!(waited, Recorded::Written(_)), "{waited:?}");
        let queue = Arc::new(Queue {
            depth: Some(QueueDepth {
                visible: 2_200,
                in_flight: 20,
            }),
            ..Queue::default()
        });
        let now = first_look.plus(Duration::from_secs(300));
        let report = tick_with(store.clone(), queue.clone(), now).await;
        assert_eq!(
            (report.waited_for_queue, report.reenqueued),
            (0, 1),
            "{report:?}"
        );
        assert_eq!(queue.sent.lock().unwrap().len(), 1);
        assert_eq!(store.get(&op.key()).await.unwrap().unwrap().redrives, 1);
    }

    /// The twin: the same operation with no more waiting than the environments take at once lost
    /// its message, and is re-enqueued at once.
    #[tokio::test]
    async fn a_pending_operation_is_reenqueued_when_the_queue_is_not_behind() {
        let (store, op) = stored().await;
        let store = Arc::new(store);
        let queue = Arc::new(Queue {
            depth: Some(QueueDepth {
                visible: 20,
                in_flight: 20,
            }),
            ..Queue::default()
        });
        let now = op.created_at.plus(Duration::from_secs(301));
        let report = tick_with(store.clone(), queue.clone(), now).await;
        assert_eq!(
            (report.waited_for_queue, report.reenqueued),
            (0, 1),
            "{report:?}"
        );
        assert_eq!(queue.sent.lock().unwrap().len(), 1);
        assert_eq!(store.get(&op.key()).await.unwrap().unwrap().redrives, 1);
    }

    /// A held authorization is due for its deadline looks for days; it does not age the
    /// oldest-unsettled figure (whose alarm means a stuck unknown), while an unknown as old does.
    #[tokio::test]
    async fn a_held_authorization_does_not_age_the_oldest_unsettled_figure() {
        let now = T0.plus(Duration::from_secs(30 * 3600));
        for (status, counted) in [
            (OperationStatus::Authorized, false),
            (OperationStatus::Unknown, true),
        ] {
            let store = Arc::new(MemoryStore::new());
            let mut op = order("order-held")
                .manual()
                .status(status)
                .external_id("pi_held")
                .build();
            op.next_due_at = Some(T0.plus(Duration::from_secs(3600)));
            store.put_for_tests(op.clone());
            let report = tick_with(store, Arc::new(Queue::default()), now).await;
            assert_eq!(report.examined, 1, "{status:?}: {report:?}");
            let expected = match counted {
                true => now.since(op.created_at),
                false => Duration::ZERO,
            };
            assert_eq!(report.oldest_due_age, expected, "{status:?}");
        }
    }

    /// An open dispute due in the index is never put on the queue (it has no message and no
    /// key) and does not age the oldest-unsettled figure; nothing is sent, the record untouched.
    /// Its twin, an unknown charge as old, is re-driven and ages it (the test above). (The tick
    /// reads it again at Stripe; this fake holds no such dispute, so the read fails, counted:
    /// the re-read itself is `shared/tests/reconciler_disputes.rs`.)
    #[tokio::test]
    async fn an_open_dispute_is_never_queued_nor_ages_the_oldest_unsettled_figure() {
        use charge_core::dispute::state::{DisputeParams, DisputeState};
        let now = T0.plus(Duration::from_secs(30 * 3600));
        let store = Arc::new(MemoryStore::new());
        let d = charge_core::testing::stripe_dispute("dp_1", "pi_1");
        let op = Operation::new_dispute(
            charge_core::domain::OrderId::parse("order-disputed").unwrap(),
            DisputeParams::of(&d, d.payment_intent.clone().unwrap()).unwrap(),
            DisputeState::of(&d, true),
            T0,
            T0.plus(Duration::from_secs(3600)),
        );
        store.put_for_tests(op.clone());
        let queue = Arc::new(Queue::default());
        let report = tick_with(store.clone(), queue.clone(), now).await;
        assert_eq!((report.examined, report.skipped), (1, 1), "{report:?}");
        assert_eq!(
            (report.disputes_read, report.failures),
            (1, 1),
            "{report:?}"
        );
        assert_eq!(report.oldest_due_age, Duration::ZERO);
        assert!(queue.sent.lock().unwrap().is_empty());
        assert_eq!(store.get(&op.key()).await.unwrap(), Some(op));
    }

    async fn stored() -> (MemoryStore, Operation) {
        let op = order("order-redrive").build();
        let store = MemoryStore::new();
        assert!(matches!(
            store.create_if_absent(&op).await.unwrap(),
            Created::New(_)
        ));
        (store, op)
    }

    #[tokio::test]
    async fn redrive_reschedules_then_sends_with_the_next_dedup_id() {
        let (store, op) = stored().await;
        let queue = Queue::default();
        let due = T0.plus(Duration::from_secs(600));
        let now = T0.plus(Duration::from_secs(301));
        let Redriven::Sent {
            op: written,
            message,
        } = redrive(&store, &queue, Reschedule::redrive(&op, due, now))
            .await
            .unwrap()
        else {
            panic!("not sent")
        };
        assert_eq!(written.redrives, 1);
        assert_eq!(written.next_due_at, Some(due));
        assert_eq!(message.dedup_id, format!("{}:1", op.operation_id));
        assert_eq!(queue.sent.lock().unwrap().len(), 1);
        let stored = store.get(&op.key()).await.unwrap().unwrap();
        assert_eq!(stored, written);
    }

    #[tokio::test]
    async fn of_two_redrives_from_one_read_only_the_first_sends() {
        let (store, op) = stored().await;
        let queue = Queue::default();
        let now = T0.plus(Duration::from_secs(301));
        let request = || Reschedule::redrive(&op, now.plus(Duration::from_secs(60)), now);
        let first = redrive(&store, &queue, request()).await.unwrap();
        assert!(matches!(first, Redriven::Sent { .. }));
        let second = redrive(&store, &queue, request()).await.unwrap();
        let Redriven::Refused(Some(current)) = second else {
            panic!("the stale re-drive was not refused: {second:?}")
        };
        assert_eq!(current.redrives, 1);
        assert_eq!(
            queue.sent.lock().unwrap().len(),
            1,
            "the loser sent nothing"
        );
    }

    #[tokio::test]
    async fn a_failed_send_leaves_the_operation_rescheduled() {
        let (store, op) = stored().await;
        let queue = Queue {
            failing: true,
            ..Queue::default()
        };
        let due = T0.plus(Duration::from_secs(900));
        let now = T0.plus(Duration::from_secs(301));
        let outcome = redrive(&store, &queue, Reschedule::redrive(&op, due, now))
            .await
            .unwrap();
        let Redriven::NotSent { op: written, .. } = outcome else {
            panic!("not reported as unsent: {outcome:?}")
        };
        assert_eq!(
            queue.refused.load(Ordering::Relaxed),
            1,
            "the fault happened"
        );
        assert_eq!(written.next_due_at, Some(due));
        let stored = store.get(&op.key()).await.unwrap().unwrap();
        assert_eq!(
            stored.next_due_at,
            Some(due),
            "still due: the next tick retries"
        );
        assert_eq!(stored.redrives, 1);
    }

    /// Past the key window the reconciler settles through the executor's own plan: a recorded
    /// intent Stripe holds declined is retrieved and canceled, and only then is `failed`
    /// recorded.
    #[tokio::test]
    async fn past_the_window_a_declined_intent_is_canceled_before_failed() {
        use charge_core::operation::OperationStatus;
        use charge_core::outcome::PaymentIntentStatus;
        use charge_core::time::ManualClock;

        use crate::memory::FakeGateway;

        let (store, op) = stored().await;
        let store = Arc::new(store);
        let gateway = Arc::new(FakeGateway::new());
        let pi = gateway.insert_charge(&op, PaymentIntentStatus::RequiresPaymentMethod);
        crate::testing::settle_as(
            store.as_ref(),
            &op,
            OperationStatus::Unknown,
            Some(pi.as_str()),
            T0,
        )
        .await;
        let clock = ManualClock::new(T0.plus(Duration::from_secs(24 * 3600)));
        let deps = ReconcilerDeps {
            charge: EngineDeps {
                store: store.clone(),
                gateway: gateway.clone(),
                clock: Arc::new(clock),
                policy: charge_core::plan::Policy::default(),
            },
            queue: Arc::new(Queue::default()),
            page_size: 10,
            charge_throughput: crate::config::StripeBudget::default_throughput(),
            dispute_watch: None,
            refund_watch: None,
        };
        let report = reconcile_tick(
            &deps,
            &|| Duration::from_secs(60),
            Duration::from_secs(1),
            &crate::telemetry::DiscardMetrics,
        )
        .await
        .unwrap();
        assert_eq!(report.settled, 1, "{report:?}");
        let after = store.get(&op.key()).await.unwrap().unwrap();
        assert_eq!(after.status, OperationStatus::Failed);
        assert_eq!(after.external_id.as_ref(), Some(&pi));
        assert_eq!(
            gateway.charges()[pi.as_str()].status,
            PaymentIntentStatus::Canceled
        );
        assert_eq!(gateway.calls.cancel.load(Ordering::SeqCst), 1);
        assert_eq!(gateway.calls.create.load(Ordering::SeqCst), 0);
    }
}
