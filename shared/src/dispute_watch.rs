//! The dispute watch, one step of the reconciler's tick: the disputes Stripe created since the
//! watch's cursor, listed at Stripe (`GET /v1/disputes?created[gte]=…&created[lt]=…`) and each
//! one of ours recorded through the same dispute shell the events function uses
//! ([`crate::executor::dispute::record_dispute`]). With or without an events source: this is what
//! records a dispute on a stack that has none, or when every event of it was lost. A listed
//! dispute is Stripe's answer, as a retrieve is: it is recorded as listed, never from an event.
//!
//! One step, in order:
//! 1. read the cursor ([`DisputeWatchCursor`]): the span of creation times listed so far ends at
//!    `through` (absent before the first tick: the first tick lists the span before now less the
//!    lag, [`MAX_SPAN`] long, so a dispute opened just before the watch began is recorded too);
//! 2. list `[through, min(now - LAG, through + MAX_SPAN))` page by page within the tick's time;
//! 3. for each dispute of a PaymentIntent, one retrieve of the intent (the order its metadata
//!    names: a dispute's charge carries no metadata of ours), then the shell's one write, or
//!    nothing when it holds it already (a dispute its events recorded first);
//! 4. move the cursor to the span's end when every dispute of the span was recorded (or found
//!    not ours). The span's disputes are listed whole first (Stripe lists newest first), then
//!    recorded oldest first, so a span cut short by the tick's time, by Stripe saying "later" or
//!    by the store moves the cursor to the creation time of the first dispute not done: the next
//!    tick lists from it (`created[gte]`, so that one and any created in the same second are
//!    listed again; the writes already made are found as Stripe holds them, nothing written
//!    twice). Under Stripe's rate limit, where any one of a span's reads may be refused, the
//!    watch still moves on by every dispute it did record, rather than listing a growing span
//!    again whole until one tick gets every answer. A span whose list itself is cut short
//!    stays where it was.
//!
//! A read Stripe refuses with 429 (its rate limiter, which runs before anything is done) is
//! asked again within the tick: Stripe documents 429s as safe to retry and asks for an
//! exponential backoff (docs.stripe.com/rate-limits, "Handling limiting gracefully"). At most
//! [`READ_RETRIES`] times per read, after [`FIRST_BACKOFF`], doubled each time, on the injected
//! sleeper, and only while the tick's time allows the wait; each retry also takes its slot of the
//! reconciler's share of the Stripe budget ([`crate::pacing::PacedGateway`], as every call of
//! the reconciler does), so a burst of refusals is never a tight loop. Without it, at half of
//! Stripe's calls refused, the span's list or one of its intent reads was refused on 85% of the
//! ticks and the cursor fell up to 62 hours behind (the simulation, seed 3).
//!
//! Cost per tick: one GetItem and (when it moves) one UpdateItem for the cursor, one list request
//! per 100 disputes created in the span; per dispute listed, one PaymentIntent retrieve, and the
//! shell's two reads and one write the first time (its reads only after); per read Stripe
//! refused with 429, at most [`READ_RETRIES`] more.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use charge_core::audit::AuditWindow;
use charge_core::domain::OrderId;
use charge_core::outcome::{GatewayError, RetryCause};
use charge_core::time::Timestamp;
use tracing::{error, info, warn};

use crate::executor::dispute::{record_dispute, DisputeRecordError, DisputeRecording};
use crate::executor::EngineDeps;
use crate::ports::{DisputeWatchCursor, Sleeper};
use crate::telemetry::ErrorChain;

/// How far behind now the span ends: a dispute Stripe is creating at this second is listed by
/// the next tick rather than missed at the span's edge.
pub const LAG: Duration = Duration::from_secs(60);

/// The most creation time one tick lists: a cursor left behind (a tick that failed, a stack that
/// was off) catches up this much per tick rather than all at once.
pub const MAX_SPAN: Duration = Duration::from_secs(6 * 3600);

/// How many times one read (a page of the list, an intent's retrieve) Stripe refused with 429 is
/// asked again within the tick.
pub const READ_RETRIES: u32 = 3;

/// The wait before a refused read is asked again the first time; doubled for each next time
/// (0.25 s, 0.5 s, 1 s: under 2 s of a tick's time per read at most).
pub const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// Where the dispute watch keeps its cursor, and how it waits before asking a refused read again.
#[derive(Clone)]
pub struct DisputeWatchDeps {
    pub cursor: Arc<dyn DisputeWatchCursor>,
    /// Production sleeps on tokio's timer ([`crate::pacing::TokioSleeper`]); a test or the
    /// simulation on its virtual clock.
    pub sleeper: Arc<dyn Sleeper>,
}

/// What one dispute-watch step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DisputeWatchReport {
    /// Disputes listed at Stripe in the span (`DisputesListed`).
    pub listed: u64,
    /// Of those, written now (created or moved): none before, or its events were behind.
    pub recorded: u64,
    /// Of those written, without their reservation (`DisputeUnreserved`, paged).
    pub unreserved: u64,
    /// Listed disputes not of ours (no PaymentIntent, or one without our metadata).
    pub not_ours: u64,
    /// Store or Stripe failures: the span is listed again next tick (`SkippedOnError`).
    pub failures: u64,
    /// Reads Stripe refused with 429, each refusal, retried or not (`DisputeWatchRateLimited`).
    pub rate_limited: u64,
    /// Of those, asked again within the tick after a backoff (`DisputeWatchRetried`).
    pub retried: u64,
    /// The span was not finished (time, or a failure): the cursor stays.
    pub incomplete: bool,
    /// How far the cursor is behind now after this step (`DisputeWatchLag`).
    pub lag: Duration,
}

/// Runs one watch step (see the module doc). Never fails the tick: what fails is counted and
/// listed again next tick.
pub async fn watch_disputes(
    deps: &EngineDeps,
    watch: &DisputeWatchDeps,
    remaining: &(dyn Fn() -> Duration + Send + Sync),
    safety: Duration,
) -> DisputeWatchReport {
    let mut report = DisputeWatchReport::default();
    let now = deps.clock.now();
    let end = Timestamp::from_millis(now.as_millis() - LAG.as_millis() as i64);
    let through = match watch.cursor.disputes_listed_through().await {
        Ok(through) => through,
        Err(e) => {
            warn!(error = %ErrorChain(&e), "cannot read the dispute watch's cursor; the watch waits for the next tick");
            report.failures += 1;
            report.incomplete = true;
            return report;
        }
    };
    // The first tick looks back one span: a dispute Stripe opened just before the watch began
    // (the stack deployed, or the cursor's item new) is recorded too; older ones are the
    // audit's (`dispute_unrecorded`).
    let from = through.unwrap_or_else(|| end.minus(MAX_SPAN));
    let to = end.min(from.plus(MAX_SPAN));
    let covered = if to > from {
        match list_and_record(
            deps,
            &*watch.sleeper,
            &AuditWindow { from, to },
            remaining,
            safety,
            &mut report,
        )
        .await
        {
            Ok(()) => to,
            Err(Stop { why, done_before }) => {
                report.incomplete = true;
                let resume = done_before.map_or(from, |t| t.max(from));
                info!(
                    reason = why,
                    resume_from_ms = resume.as_millis(),
                    "the dispute watch's span is listed again next tick from its first dispute not recorded"
                );
                resume
            }
        }
    } else {
        from
    };
    if through.is_none() || covered > from {
        match watch.cursor.advance_dispute_watch(through, covered).await {
            Ok(true) => {}
            Ok(false) => info!("another tick moved the dispute watch's cursor first"),
            Err(e) => {
                warn!(error = %ErrorChain(&e), "cannot move the dispute watch's cursor; the span is listed again next tick");
                report.failures += 1;
            }
        }
    }
    report.lag = now.since(covered);
    info!(
        listed = report.listed,
        recorded = report.recorded,
        unreserved = report.unreserved,
        not_ours = report.not_ours,
        failures = report.failures,
        rate_limited = report.rate_limited,
        retried = report.retried,
        incomplete = report.incomplete,
        lag_secs = report.lag.as_secs(),
        "dispute watch"
    );
    report
}

/// Why a span was not finished, and where it stopped: every dispute created before
/// `done_before` was recorded (or found not ours); `None` when the span's list itself was cut
/// short, so nothing of it is known done.
struct Stop {
    why: &'static str,
    done_before: Option<Timestamp>,
}

/// One read, asked again after a backoff while Stripe refuses it with 429 (see the module doc):
/// at most [`READ_RETRIES`] more times, and only while the tick has the wait and `safety` left.
async fn read_with_retries<T, F, Fut>(
    sleeper: &dyn Sleeper,
    remaining: &(dyn Fn() -> Duration + Send + Sync),
    safety: Duration,
    report: &mut DisputeWatchReport,
    mut read: F,
) -> Result<T, GatewayError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, GatewayError>>,
{
    let mut backoff = FIRST_BACKOFF;
    let mut retries = 0;
    loop {
        match read().await {
            Err(
                e @ GatewayError::RetryLater {
                    cause: RetryCause::RateLimited,
                    ..
                },
            ) => {
                report.rate_limited += 1;
                if retries >= READ_RETRIES || remaining() < safety + backoff {
                    return Err(e);
                }
                info!(error = %ErrorChain(&e), backoff_ms = backoff.as_millis() as u64, "the dispute watch's read was refused (429); asked again after the backoff");
                report.retried += 1;
                retries += 1;
                sleeper.sleep(backoff).await;
                backoff *= 2;
            }
            answer => return answer,
        }
    }
}

/// Every dispute created in `window`, listed whole, then each of ours recorded, oldest first;
/// `Err` when the span is not done, with how far it got.
async fn list_and_record(
    deps: &EngineDeps,
    sleeper: &dyn Sleeper,
    window: &AuditWindow,
    remaining: &(dyn Fn() -> Duration + Send + Sync),
    safety: Duration,
    report: &mut DisputeWatchReport,
) -> Result<(), Stop> {
    let listed_short = |why| Stop {
        why,
        done_before: None,
    };
    let mut after: Option<String> = None;
    let mut disputes = Vec::new();
    loop {
        if remaining() < safety {
            return Err(listed_short("out of time"));
        }
        let page_after = after.as_deref();
        let page = match read_with_retries(sleeper, remaining, safety, report, || {
            deps.gateway.list_disputes_created(window, page_after)
        })
        .await
        {
            Ok(page) => page,
            Err(e) => {
                warn!(error = %ErrorChain(&e), "the dispute watch's list got no answer");
                report.failures += 1;
                return Err(listed_short("stripe"));
            }
        };
        disputes.extend(page.items);
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    // Oldest first (ties by id, so a replay does the same): a stop leaves everything before
    // the stopped one done.
    disputes.sort_by(|a, b| (a.created, a.id.as_str()).cmp(&(b.created, b.id.as_str())));
    for dispute in &disputes {
        let stop = |why| Stop {
            why,
            done_before: Some(dispute.created),
        };
        if remaining() < safety {
            return Err(stop("out of time"));
        }
        report.listed += 1;
        let Some(intent) = &dispute.payment_intent else {
            report.not_ours += 1;
            continue;
        };
        let order_id = match read_with_retries(sleeper, remaining, safety, report, || {
            deps.gateway.retrieve(intent)
        })
        .await
        {
            Ok(pi) => pi.order_id.as_deref().and_then(|o| OrderId::parse(o).ok()),
            Err(e @ (GatewayError::RetryLater { .. } | GatewayError::Ambiguous { .. })) => {
                warn!(dispute = %dispute.id, payment_intent = %intent, error = %ErrorChain(&e), "the dispute watch's retrieve of the intent got no answer");
                report.failures += 1;
                return Err(stop("stripe"));
            }
            Err(e) => {
                warn!(dispute = %dispute.id, payment_intent = %intent, error = %ErrorChain(&e), "Stripe refused the retrieve of a disputed charge's intent: not ours");
                None
            }
        };
        let Some(order_id) = order_id else {
            report.not_ours += 1;
            continue;
        };
        let now = deps.clock.now();
        match record_dispute(&*deps.store, &order_id, dispute, now, &deps.policy.dispute).await {
            Ok(DisputeRecording::Written {
                record, unreserved, ..
            }) => {
                report.recorded += 1;
                info!(order_id = %order_id, dispute = %dispute.id, status = %record.status,
                        dispute_status = %dispute.status, "dispute recorded from Stripe's list");
                if unreserved {
                    report.unreserved += 1;
                    error!(order_id = %order_id, dispute = %dispute.id,
                            reason = record.last_error.as_deref().unwrap_or(""),
                            "dispute recorded without its reservation: answer it in Stripe's \
                             dashboard (Payments > Disputes) with the refund as evidence; \
                             chargectl show <order_id>");
                }
            }
            Ok(DisputeRecording::Unchanged(why)) => {
                info!(order_id = %order_id, dispute = %dispute.id, reason = why.as_str(), "listed dispute: nothing to write");
                if why == charge_core::dispute::plan::Unchanged::NotOurs {
                    report.not_ours += 1;
                }
            }
            Err(e @ (DisputeRecordError::Store(_) | DisputeRecordError::Contended)) => {
                warn!(order_id = %order_id, dispute = %dispute.id, error = %ErrorChain(&e), "cannot record a listed dispute; listed again next tick");
                report.failures += 1;
                return Err(stop("store"));
            }
        }
    }
    Ok(())
}
