//! What the judge of disputes needs to have seen while the run went on: the reconciler's reads
//! of open disputes at Stripe, and which of them had to page.
//!
//! The reconciler pages (`DisputeDeadlineNear`) each read of a dispute that still needs a
//! response inside the page window before its `due_by`; the metric carries no dispute id, so
//! [`DisputeReads`] sits on the reconciler's gateway and notes every dispute it read, when, and
//! whether that read had to page by the template's window (72 h). The driver compares, tick by
//! tick, the reads that had to page with the tick's `DisputeDeadlineNear` ([`Watch::tick_ends`]):
//! a tick that paged fewer is a deficit, and a dispute that reached `due_by` needing a response
//! with no such read before it was never paged. The same for `DisputeDeadlinePassed`: a read at
//! or past `due_by` of a dispute still needing a response (Stripe closes one nobody answered
//! some time after its `due_by`, stripe-sim 2 days) must be paged passed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::lock;

use async_trait::async_trait;
use charge_core::dispute::deadline::DEFAULT_PAGE_WINDOW;
use charge_core::dispute::StripeDispute;
use charge_core::domain::{DisputeId, PaymentIntentId};
use charge_core::outcome::GatewayError;
use charge_core::time::{Clock, ManualClock};
use charge_once::ports::{PaymentGateway, StripeDisputes};

/// The reconciler's dispute reads, as they went.
#[derive(Debug, Default)]
pub struct Watch {
    /// Per dispute id: the first read that had to page Near in a tick whose pages covered it
    /// (ms).
    near: Mutex<BTreeMap<String, i64>>,
    /// Reads this tick that had to page Near: the dispute, when.
    this_tick: Mutex<Vec<(String, i64)>>,
    /// The same for `DisputeDeadlinePassed`: per dispute, the first read past `due_by` needing
    /// a response in a tick whose Passed pages covered it; and this tick's such reads.
    passed: Mutex<BTreeMap<String, i64>>,
    this_tick_passed: Mutex<Vec<(String, i64)>>,
    /// Reads that had to page Near, in all; the pages the ticks counted; and the ticks' deficit
    /// (fewer pages than reads that had to page).
    pub had_to_page: AtomicU64,
    /// Reads that had to page Passed.
    pub had_to_page_passed: AtomicU64,
    pub paged_near: AtomicU64,
    pub paged_passed: AtomicU64,
    pub deficit: AtomicU64,
    /// Reads of open disputes by the reconciler, and those refused (the `no-dispute-reread`
    /// mutation).
    pub reads: AtomicU64,
    pub refused: AtomicU64,
    /// The dispute watch's reads Stripe refused with 429 (`DisputeWatchRateLimited`), those it
    /// asked again within the tick (`DisputeWatchRetried`), and how far its cursor was behind
    /// now after the last tick (`DisputeWatchLag`, s).
    pub watch_rate_limited: AtomicU64,
    pub watch_retried: AtomicU64,
    pub watch_lag_secs: AtomicU64,
    /// Ticks the run made at its end only because the watch was still behind.
    pub catch_up_ticks: AtomicU64,
}

impl Watch {
    fn note(&self, dispute: &StripeDispute, now_ms: i64, window: Duration) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let Some(due_by) = dispute.due_by.map(|t| t.as_millis()) else {
            return;
        };
        let opens = due_by - window.as_millis() as i64;
        if !dispute.status.needs_response() || due_by <= 0 {
            return;
        }
        let (count, tick) = if (opens..due_by).contains(&now_ms) {
            (&self.had_to_page, &self.this_tick)
        } else if now_ms >= due_by {
            (&self.had_to_page_passed, &self.this_tick_passed)
        } else {
            return;
        };
        count.fetch_add(1, Ordering::Relaxed);
        lock(tick).push((dispute.id.as_str().to_owned(), now_ms));
    }

    /// A tick ended, having counted `near` and `passed` pages: the reads that had to page count
    /// as paged when the tick's pages of their kind cover them all, none of them otherwise.
    pub fn tick_ends(&self, near: u64, passed: u64) {
        self.paged_near.fetch_add(near, Ordering::Relaxed);
        self.paged_passed.fetch_add(passed, Ordering::Relaxed);
        for (pages, tick, paged) in [
            (near, &self.this_tick, &self.near),
            (passed, &self.this_tick_passed, &self.passed),
        ] {
            let had_to = std::mem::take(&mut *lock(tick));
            let short = (had_to.len() as u64).saturating_sub(pages);
            self.deficit.fetch_add(short, Ordering::Relaxed);
            if short > 0 {
                continue;
            }
            let mut paged = lock(paged);
            for (id, at) in had_to {
                paged.entry(id).or_insert(at);
            }
        }
    }

    /// A tick's dispute watch: its 429s, its retries, its cursor's lag after it.
    pub fn watched(&self, rate_limited: u64, retried: u64, lag_secs: u64) {
        self.watch_rate_limited
            .fetch_add(rate_limited, Ordering::Relaxed);
        self.watch_retried.fetch_add(retried, Ordering::Relaxed);
        self.watch_lag_secs.store(lag_secs, Ordering::Relaxed);
    }

    /// Whether the watch's cursor was behind after the last tick: more than its `LAG` behind
    /// now (a span's list refused, or the clock jumped further than one tick lists).
    pub fn behind(&self) -> bool {
        self.watch_lag_secs.load(Ordering::Relaxed) > charge_once::dispute_watch::LAG.as_secs()
    }

    /// When the reconciler first read dispute `id` inside its page window, needing a response,
    /// in a tick that paged it.
    pub fn first_near(&self, id: &str) -> Option<i64> {
        lock(&self.near).get(id).copied()
    }

    /// When the reconciler first read dispute `id` past its `due_by`, still needing a response,
    /// in a tick that paged it passed.
    pub fn first_passed(&self, id: &str) -> Option<i64> {
        lock(&self.passed).get(id).copied()
    }
}

/// The reconciler's gateway, its dispute reads noted in [`Watch`] at the run's true time.
pub struct DisputeReads {
    pub inner: Arc<dyn PaymentGateway>,
    pub watch: Arc<Watch>,
    pub clock: ManualClock,
    /// The `no-dispute-reread` mutation: the reconciler's reads of open disputes refused, so it
    /// never learns a dispute's outcome by itself.
    pub refuse: bool,
}

crate::forward_gateway!(
    DisputeReads, inner:
    StripeAccount,
    PaymentIntents,
    StripeRefunds,
    CreatedLists,
);

#[async_trait]
impl StripeDisputes for DisputeReads {
    async fn retrieve_dispute(&self, id: &DisputeId) -> Result<StripeDispute, GatewayError> {
        if self.refuse {
            self.watch.refused.fetch_add(1, Ordering::Relaxed);
            return Err(GatewayError::Ambiguous {
                detail: "no-dispute-reread: the reconciler does not read open disputes".into(),
            });
        }
        let dispute = self.inner.retrieve_dispute(id).await?;
        self.watch
            .note(&dispute, self.clock.now().as_millis(), DEFAULT_PAGE_WINDOW);
        Ok(dispute)
    }
    async fn list_disputes(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<StripeDispute>, GatewayError> {
        self.inner.list_disputes(payment_intent).await
    }
}
