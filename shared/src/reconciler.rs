//! The reconciler: every unsettled operation converges, without a human for the common cases.
//!
//! One tick reads the unknown index for operations due now (never the table), page by page, and for
//! each decides with [`plan`]:
//! - `pending`, never attempted, past the grace period → **re-enqueue** (the SendMessage after the
//!   checkout's PutItem was lost);
//! - attempted (`unknown`, or `pending` after a retry-later) inside the key window → **re-drive**
//!   through the queue with a fresh dedup id `operation_id:<n>` and an exponential backoff recorded
//!   as the next due time;
//! - past the key window → **settle** through [`execute_charge`], which never creates past the
//!   window: retrieve when the PaymentIntent id is known, else search by operation id once search
//!   can be trusted; one match decides, 0 or several go to review.
//!
//! Two overlapping ticks are safe by the store's conditions, not by luck: a re-drive first moves the
//! due time with a write guarded by the `updated_at` it read (only one tick wins, and only the
//! winner sends), and settling goes through the lease.
//!
//! A tick stops before its time budget runs out; what it did not reach is still due and is picked
//! up by the next tick.
//!
//! Every tick also reads the REVIEW partition of the index (a Query, like the rest) and reports
//! how many operations wait for a person and for how long (`InReview`, `OldestInReviewAge`): an
//! alarm pages while anything stays there, whichever function sent it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use crate::executor::{execute_charge, plan as charge_plan, ChargeDeps, Disposition, ReviewClass};
use crate::operation::Operation;
use crate::ports::{ChargeQueue, IndexQuery, QueuedCharge, Recorded, Reschedule, StoreError};
use crate::telemetry::{emf_line, emf_line_classed};
use crate::time::Timestamp;

/// What to do with one due operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Someone holds a live lease: leave it to them.
    Skip,
    /// Never attempted: put it on the queue again.
    Reenqueue,
    /// Attempted inside the key window: re-drive through the queue.
    Redrive,
    /// Past the key window: settle without creating.
    Settle,
}

pub fn plan(op: &Operation, now: Timestamp, deps: &ChargeDeps) -> Action {
    if op.status.is_settled() || op.has_live_lease(now) {
        return Action::Skip;
    }
    match op.first_attempted_at {
        None => Action::Reenqueue,
        Some(_) if op.key_window_passed(now, deps.policy.key_window) => Action::Settle,
        Some(_) => Action::Redrive,
    }
}

/// The next due time after a re-drive or re-enqueue: `base * 2^redrives`, capped, and never past
/// the moment search may settle the operation.
pub fn redrive_due_at(op: &Operation, now: Timestamp, deps: &ChargeDeps) -> Timestamp {
    let policy = &deps.policy;
    let backoff = policy
        .unknown_backoff_base
        .saturating_mul(1u32 << op.redrives.min(20))
        .min(policy.unknown_backoff_max);
    let due = now.plus(backoff);
    if op.first_attempted_at.is_some() {
        let search_at = charge_plan::search_allowed_at(op, policy);
        if now < search_at && due > search_at {
            return search_at;
        }
    }
    due
}

/// Everything a tick needs.
#[derive(Clone)]
pub struct ReconcilerDeps {
    pub charge: ChargeDeps,
    pub queue: Arc<dyn ChargeQueue>,
    /// Index page size.
    pub page_size: usize,
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
    /// Operations waiting for a person (the REVIEW partition), read at the end of the tick.
    pub in_review: u64,
    /// How long the longest-waiting of them has been flagged.
    pub oldest_in_review_age: Duration,
    /// Queue sends that failed (the operation stays due and is retried next tick).
    pub send_failures: u64,
    pub pages: u64,
    /// The time budget ran out before the index was exhausted.
    pub stopped_early: bool,
    /// Age of the oldest operation seen due in this tick.
    pub oldest_due_age: Duration,
}

impl TickReport {
    /// The tick's metrics as CloudWatch EMF lines: one with the tick's counts, then one per
    /// review class sent to review (`SentToReview` under `Function` and `Function, ReasonClass`).
    pub fn emf_lines(&self, at: Timestamp) -> Vec<String> {
        let mut lines = vec![emf_line(
            "reconciler",
            at,
            &[
                ("Settled", self.settled as f64, "Count"),
                (
                    "Redriven",
                    (self.redriven + self.reenqueued) as f64,
                    "Count",
                ),
                ("StillUnknown", self.still_unknown as f64, "Count"),
                ("SendFailures", self.send_failures as f64, "Count"),
                ("SkippedOnError", self.failures as f64, "Count"),
                (
                    "OldestUnsettledAge",
                    self.oldest_due_age.as_secs_f64(),
                    "Seconds",
                ),
                ("InReview", self.in_review as f64, "Count"),
                (
                    "OldestInReviewAge",
                    self.oldest_in_review_age.as_secs_f64(),
                    "Seconds",
                ),
            ],
        )];
        lines.extend(
            self.review_classes
                .iter()
                .map(|(class, n)| sent_to_review_line("reconciler", *class, *n, at)),
        );
        lines
    }
}

/// One `SentToReview` EMF line for `function` and a reason class.
pub fn sent_to_review_line(function: &str, class: ReviewClass, n: u64, at: Timestamp) -> String {
    emf_line_classed(
        function,
        ("ReasonClass", class.as_str()),
        at,
        &[("SentToReview", n as f64, "Count")],
    )
}

/// Reads the whole REVIEW partition (one Query per page): how many wait, and the longest wait.
pub async fn review_backlog(
    deps: &ReconcilerDeps,
    now: Timestamp,
) -> Result<(u64, Duration), StoreError> {
    let (mut count, mut oldest) = (0u64, Duration::ZERO);
    let mut cursor = None;
    loop {
        let page = deps
            .charge
            .store
            .query_index(IndexQuery::InReview, cursor.take(), deps.page_size)
            .await?;
        for op in &page.operations {
            count += 1;
            let since = op.review.as_ref().map_or(op.updated_at, |r| r.flagged_at);
            oldest = oldest.max(now.since(since));
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok((count, oldest)),
        }
    }
}

/// Runs one tick. `remaining` tells how much time is left; the tick stops taking new work once it
/// is below `safety` (one Stripe call and a write must still fit).
pub async fn reconcile_tick(
    deps: &ReconcilerDeps,
    remaining: &(dyn Fn() -> Duration + Send + Sync),
    safety: Duration,
) -> Result<TickReport, StoreError> {
    let now = deps.charge.clock.now();
    let mut report = TickReport::default();
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
        for op in &page.operations {
            if remaining() < safety {
                report.stopped_early = true;
                break 'pages;
            }
            report.examined += 1;
            report.oldest_due_age = report.oldest_due_age.max(now.since(op.created_at));
            handle_one(deps, op, now, &mut report).await;
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    // Read after the work, so what this tick sent to review is counted at once.
    let (in_review, oldest) = review_backlog(deps, deps.charge.clock.now()).await?;
    report.in_review = in_review;
    report.oldest_in_review_age = oldest;
    info!(
        examined = report.examined,
        reenqueued = report.reenqueued,
        redriven = report.redriven,
        settled = report.settled,
        sent_to_review = report.sent_to_review,
        still_unknown = report.still_unknown,
        skipped = report.skipped,
        failures = report.failures,
        in_review = report.in_review,
        pages = report.pages,
        stopped_early = report.stopped_early,
        "reconciler tick"
    );
    Ok(report)
}

#[tracing::instrument(
    name = "reconcile",
    skip_all,
    fields(order_id = %op.order_id, operation_id = %op.operation_id, status = %op.status)
)]
async fn handle_one(
    deps: &ReconcilerDeps,
    op: &Operation,
    now: Timestamp,
    report: &mut TickReport,
) {
    let action = plan(op, now, &deps.charge);
    match action {
        Action::Skip => {
            info!(decision = "skip", "leased by another execution");
            report.skipped += 1;
        }
        Action::Reenqueue | Action::Redrive => {
            let moved = match deps
                .charge
                .store
                .reschedule(&Reschedule {
                    key: op.key(),
                    operation_id: op.operation_id,
                    expected_status: op.status,
                    expected_updated_at: op.updated_at,
                    next_due_at: redrive_due_at(op, now, &deps.charge),
                    bump_redrives: true,
                    clear_review: false,
                    now,
                    operator: None,
                })
                .await
            {
                Ok(moved) => moved,
                Err(e) => {
                    warn!(error = %e, "cannot reschedule this tick");
                    report.skipped += 1;
                    report.failures += 1;
                    return;
                }
            };
            let Recorded::Written(moved) = moved else {
                info!(
                    decision = "skip",
                    "changed since read; another writer got there first"
                );
                report.skipped += 1;
                return;
            };
            let charge = QueuedCharge::redrive(&moved, moved.redrives);
            let decision = if action == Action::Reenqueue {
                "reenqueue"
            } else {
                "redrive"
            };
            match deps.queue.send(&charge).await {
                Ok(()) => {
                    info!(decision, dedup_id = %charge.dedup_id, next_due_at = %moved.next_due_at.unwrap_or(now), "sent");
                    if action == Action::Reenqueue {
                        report.reenqueued += 1;
                    } else {
                        report.redriven += 1;
                    }
                }
                Err(e) => {
                    // Still due at its new time: the next tick after it tries again.
                    warn!(decision, error = %e, "send failed; will retry at the next due time");
                    report.send_failures += 1;
                }
            }
        }
        Action::Settle => match execute_charge(&deps.charge, &op.key(), &op.operation_id).await {
            Ok(r) => match r.disposition {
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
            },
            Err(e) => {
                // One operation's failure (the store throttled, the record vanished) must not
                // stop the tick: it stays due and the next tick tries again.
                warn!(error = %e, "cannot settle this tick");
                report.skipped += 1;
                report.failures += 1;
            }
        },
    }
}
