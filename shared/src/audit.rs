//! The drift audit's shell: reads both sides of a window, asks the rules
//! ([`charge_core::audit`]) for the verdicts, keeps the report and emits one metric per class.
//!
//! It never changes an operation record. What it reads, in order:
//! 1. Stripe's lists of PaymentIntents, refunds and disputes **created** in the window (every
//!    page; lists are not delayed as search is);
//! 2. the records **settled** in the window (the store's settled-by-day index);
//! 3. the records Stripe's metadata names and the charges of settled refunds, captures and
//!    cancels ([`orders_to_read`]): one read per order, all of an order's refunds where a refund
//!    is involved;
//! 4. by id, the Stripe objects of records whose object was created before the window, and the
//!    intent of a refund made without our metadata ([`objects_to_retrieve`]); the intent of a
//!    listed dispute not known yet and the dispute of a settled dispute record
//!    ([`dispute_reads`]); then the record of each listed dispute whose intent is ours, under the
//!    order the intent's metadata names ([`dispute_orders`]: one read per dispute);
//! 5. the refunds recorded `succeeded` that settled in the window `AuditRefundRecheckDays`
//!    earlier ([`rechecked_window`]), each read again by id: a refund that failed after it
//!    succeeded, and that no event and no watch recorded, is `status_differs`;
//! 6. the unknown index (unsettled records: deadlines), and the REVIEW count.
//!
//! A failure before step 3 is done leaves nothing to judge fairly (an intent whose record was
//! not read would look foreign): the report is kept as incomplete, with what was listed, and
//! `AuditIncomplete` pages. A retrieve that fails later leaves its item unchecked, not drift.
//! Every Stripe call goes through the gateway it is given (in production paced to the audit's
//! share, so a charge never meets a 429 of the audit's making); the audit stops reading at its
//! deadline.

use std::collections::{BTreeMap, BTreeSet};

use charge_core::audit::{
    dispute_orders, dispute_reads, judge, objects_to_retrieve, orders_to_read, rechecked_window,
    AuditCounts, AuditPolicy, AuditReport, AuditWindow, DriftClass, Evidence,
};
use charge_core::dispute::StripeDispute;
use charge_core::domain::{DisputeId, OperationKind};
use charge_core::domain::{OrderId, PaymentIntentId, StripeRefundId};
use charge_core::operation::{Operation, OperationKey};
use charge_core::outcome::GatewayError;
use charge_core::refund::watch::watched;
use charge_core::time::Clock;
use charge_core::time::Timestamp;
use tracing::{info, warn};

use charge_core::outcome::PaymentIntent;
use charge_core::refund::StripeRefund;
use charge_core::stripe_object::StripeObject;

use crate::ports::{
    AuditLog, AuditStore, IndexQuery, ListPage, MetricsSink, PaymentGateway, StoreError,
};
use crate::telemetry::{emf_line, emf_line_classed, stripe_requests_lines, ErrorChain};

/// The `Function` dimension of the audit's metrics.
pub const FUNCTION: &str = "audit";

/// The kinds of operation, as the `Kind` dimension names them.
pub const KINDS: [&str; 4] = ["charge", "refund", "capture", "cancel"];

/// Records per page of the store's reads.
pub const PAGE_SIZE: usize = 500;

/// What the audit needs.
pub struct AuditDeps<'a> {
    pub store: &'a dyn AuditStore,
    pub log: &'a dyn AuditLog,
    /// Paced to the audit's share of the Stripe budget.
    pub gateway: &'a dyn PaymentGateway,
    pub clock: &'a dyn Clock,
    pub metrics: &'a dyn MetricsSink,
}

/// One audit's request.
#[derive(Debug, Clone)]
pub struct AuditRun {
    pub window: AuditWindow,
    pub policy: AuditPolicy,
    /// Who asked: `schedule`, or the operator's IAM identity.
    pub ran_by: String,
    /// Stop reading at this time (the invocation's deadline less a margin).
    pub deadline: Timestamp,
}

/// Why an audit read stopped.
#[derive(Debug, thiserror::Error)]
enum Stopped {
    #[error("Stripe: {0}")]
    Stripe(#[from] GatewayError),
    #[error("{}", ErrorChain(.0))]
    Store(#[from] StoreError),
    #[error("the audit's deadline came before it read everything")]
    Deadline,
}

/// Runs one audit: reads, judges, keeps the report (one per window) and emits its metrics. The
/// report is returned even when it could not be kept (the error is logged and counted).
pub async fn run_audit(deps: &AuditDeps<'_>, run: &AuditRun) -> AuditReport {
    let started = deps.clock.now();
    let mut reader = Reader {
        deps,
        run,
        stripe_calls: 0,
    };
    let mut ev = Evidence::empty(run.window, started, deps.gateway.livemode());
    let report = match reader.read(&mut ev).await {
        Ok(()) => {
            let mut judgement = judge(&ev, &run.policy);
            judgement.counts.stripe_calls = reader.stripe_calls;
            // A settled record this release cannot read is not vouched for either: the window
            // is incomplete (paged), not clean with a count nobody is alarmed on.
            let complete = judgement.counts.unchecked == 0 && judgement.counts.unreadable == 0;
            let mut report = judgement.into_report(run.window, started, &run.ran_by);
            report.complete = complete;
            report
        }
        Err(stopped) => {
            warn!(error = %ErrorChain(&stopped), window_from = %run.window.from.to_rfc3339(), "the audit could not read the whole window; its report is incomplete and judges nothing");
            incomplete(&ev, run, started, reader.stripe_calls, &stopped)
        }
    };
    let kept = match deps.log.put_report(&report).await {
        Ok(()) => true,
        Err(e) => {
            warn!(error = %ErrorChain(&e), "the audit's report could not be kept");
            false
        }
    };
    emit(deps, &report, kept);
    info!(
        drift = report.drift(),
        complete = report.complete,
        intents = report.counts.intents,
        refunds = report.counts.refunds,
        disputes = report.counts.disputes,
        settled_records = report.counts.settled_records,
        stripe_calls = report.counts.stripe_calls,
        "audit done"
    );
    report
}

/// The report of an audit that could not read enough to judge: what it listed, no findings.
fn incomplete(
    ev: &Evidence,
    run: &AuditRun,
    ran_at: Timestamp,
    stripe_calls: u64,
    why: &Stopped,
) -> AuditReport {
    AuditReport {
        window: run.window,
        ran_at,
        ran_by: run.ran_by.clone(),
        counts: AuditCounts {
            intents: ev.intents.len() as u64,
            refunds: ev.refunds.len() as u64,
            disputes: ev.disputes.len() as u64,
            settled_records: ev.settled.len() as u64,
            unreadable: ev.unreadable,
            stripe_calls,
            ..AuditCounts::default()
        },
        by_class: DriftClass::ALL.iter().map(|c| (*c, 0)).collect(),
        findings: vec![],
        findings_left_out: 0,
        complete: false,
        stopped_by: Some(why.to_string()),
        settle_times: BTreeMap::new(),
        unsettled: BTreeMap::new(),
    }
}

/// The metrics: one line per class (`AuditDrift`, 0 included, so a clean day draws as 0), the
/// run itself (`AuditRuns`), and `AuditIncomplete` (the window is not vouched for: not read
/// whole, or its report not kept where a person would look).
fn emit(deps: &AuditDeps<'_>, report: &AuditReport, kept: bool) {
    let at = deps.clock.now();
    for class in DriftClass::ALL {
        deps.metrics.emit(emf_line_classed(
            FUNCTION,
            ("DriftClass", class.as_str()),
            at,
            &[("AuditDrift", report.count(class) as f64, "Count")],
        ));
    }
    // The operator's picture per kind: settle times of the window's settled records (none
    // emitted for a kind that settled nothing: no time is not a time of 0), and what is
    // unsettled now (0 included).
    for kind in KINDS {
        let open = report.unsettled.get(kind).copied().unwrap_or_default();
        deps.metrics.emit(emf_line_classed(
            FUNCTION,
            ("Kind", kind),
            at,
            &[
                ("UnsettledAtAudit", open.count as f64, "Count"),
                (
                    "OldestUnsettledAtAuditAge",
                    open.oldest_age_secs as f64,
                    "Seconds",
                ),
            ],
        ));
        if let Some(t) = report.settle_times.get(kind).filter(|t| t.count > 0) {
            deps.metrics.emit(emf_line_classed(
                FUNCTION,
                ("Kind", kind),
                at,
                &[
                    ("SettleP50Seconds", t.p50_secs as f64, "Seconds"),
                    ("SettleP99Seconds", t.p99_secs as f64, "Seconds"),
                ],
            ));
        }
    }
    if let Some(requests) = deps.gateway.requests() {
        for line in stripe_requests_lines(FUNCTION, &requests.since_last_report(), at) {
            deps.metrics.emit(line);
        }
    }
    deps.metrics.emit(emf_line(
        FUNCTION,
        at,
        &[
            ("AuditRuns", 1.0, "Count"),
            (
                "AuditIncomplete",
                f64::from(!report.complete || !kept),
                "Count",
            ),
            (
                "AuditStripeCalls",
                report.counts.stripe_calls as f64,
                "Count",
            ),
            (
                "UnreadableRecords",
                report.counts.unreadable as f64,
                "Count",
            ),
        ],
    ));
}

/// Reads the evidence, counting Stripe calls and minding the deadline.
struct Reader<'d, 'a> {
    deps: &'d AuditDeps<'a>,
    run: &'d AuditRun,
    stripe_calls: u64,
}

impl Reader<'_, '_> {
    async fn read(&mut self, ev: &mut Evidence) -> Result<(), Stopped> {
        self.list_stripe(ev).await?;
        self.settled_records(ev).await?;
        self.related_records(ev).await?;
        self.retrieve_objects(ev).await;
        self.dispute_records(ev).await?;
        self.recheck_refunds(ev).await?;
        self.unsettled_records(ev).await?;
        Ok(())
    }

    /// The succeeded refunds settled in the window the recheck earlier, each read again by id
    /// (see the module docs, step 5): a late failure is judged as a settled record's
    /// disagreement. A read that fails leaves the refund unchecked.
    async fn recheck_refunds(&mut self, ev: &mut Evidence) -> Result<(), Stopped> {
        let span = rechecked_window(&self.run.window, &self.run.policy);
        if span.to <= span.from {
            return Ok(());
        }
        let mut cursor = None;
        loop {
            self.mind_deadline()?;
            let page = self
                .deps
                .store
                .settled_refunds_between(&span, cursor, PAGE_SIZE)
                .await?;
            ev.rechecked.extend(
                page.operations
                    .into_iter()
                    .filter(|op| watched(op).is_some()),
            );
            ev.unreadable += unreadable(&page.unreadable);
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let ids = ev
            .rechecked
            .iter()
            .filter_map(|op| watched(op).map(|id| id.as_str().to_owned()))
            .filter(|id| !ev.retrieved_refunds.contains_key(id))
            .collect();
        self.retrieve_each(ids, &mut ev.retrieved_refunds).await;
        Ok(())
    }

    fn mind_deadline(&self) -> Result<(), Stopped> {
        if self.deps.clock.now() >= self.run.deadline {
            return Err(Stopped::Deadline);
        }
        Ok(())
    }

    async fn list_stripe(&mut self, ev: &mut Evidence) -> Result<(), Stopped> {
        self.list_created(&mut ev.intents).await?;
        self.list_created(&mut ev.refunds).await?;
        self.list_created(&mut ev.disputes).await
    }

    /// Every page of one kind's objects created in the window, each page one request counted,
    /// the deadline minded before each.
    async fn list_created<O: ListedByCreation>(
        &mut self,
        found: &mut Vec<O>,
    ) -> Result<(), Stopped> {
        let window = self.run.window;
        let mut after: Option<String> = None;
        loop {
            self.mind_deadline()?;
            self.stripe_calls += 1;
            let page = O::list_page(self.deps.gateway, &window, after.as_deref()).await?;
            found.extend(page.items);
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(()),
            }
        }
    }

    async fn settled_records(&mut self, ev: &mut Evidence) -> Result<(), Stopped> {
        let mut cursor = None;
        loop {
            self.mind_deadline()?;
            let page = self
                .deps
                .store
                .settled_between(&self.run.window, cursor, PAGE_SIZE)
                .await?;
            ev.settled.extend(page.operations);
            ev.unreadable += unreadable(&page.unreadable);
            match page.next {
                Some(next) => cursor = Some(next),
                None => return Ok(()),
            }
        }
    }

    /// The records of every order something named (see the module docs, step 3).
    async fn related_records(&mut self, ev: &mut Evidence) -> Result<(), Stopped> {
        let have: BTreeSet<(String, String)> = ev.settled.iter().map(record_key).collect();
        for (order, reads) in orders_to_read(&ev.intents, &ev.refunds, &ev.settled) {
            self.mind_deadline()?;
            let Ok(order_id) = OrderId::parse(&order) else {
                // Metadata naming no valid order: no record can have it; the rules find the
                // object has no record.
                continue;
            };
            // Every charge attempt of the order (one read for an order charged once, as
            // before attempts): an intent is matched to its own attempt by operation id, the
            // refunds are held against the paid one, and two paid ones are `paid_twice`.
            let head_settled = have.contains(&(order.clone(), "charge".to_owned()));
            if reads.charge && (!head_settled || reads.attempts) {
                match self.deps.store.attempts_of(&order_id).await {
                    Ok(attempts) => ev.related.extend(
                        attempts
                            .into_iter()
                            .filter(|op| !have.contains(&record_key(op))),
                    ),
                    Err(e) if e.unreadable.is_some() => ev.unreadable += 1,
                    Err(e) => return Err(e.into()),
                }
            }
            if reads.refunds {
                match self.deps.store.refunds_of(&order_id).await {
                    Ok(refunds) => {
                        ev.related.extend(refunds);
                        ev.refunds_read.insert(order);
                    }
                    Err(e) if e.unreadable.is_some() => ev.unreadable += 1,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// Objects read by id (see the module docs, step 4).
    async fn retrieve_objects(&mut self, ev: &mut Evidence) {
        let (intents, refunds) =
            objects_to_retrieve(&ev.intents, &ev.refunds, &ev.settled, &ev.related);
        self.retrieve_each(intents, &mut ev.retrieved_intents).await;
        self.retrieve_each(refunds, &mut ev.retrieved_refunds).await;
        let (intents, disputes) = dispute_reads(
            &ev.disputes,
            &ev.intents,
            &ev.retrieved_intents,
            &ev.settled,
        );
        self.retrieve_each(intents, &mut ev.retrieved_intents).await;
        self.retrieve_each(disputes, &mut ev.retrieved_disputes)
            .await;
    }

    /// The record of every listed dispute whose intent is ours, by its key under the order the
    /// intent names (found or not: either is what the rules judge; one this release cannot read
    /// is counted and left unchecked).
    async fn dispute_records(&mut self, ev: &mut Evidence) -> Result<(), Stopped> {
        for (order, ids) in dispute_orders(ev) {
            let Ok(order_id) = OrderId::parse(&order) else {
                continue;
            };
            for id in ids {
                self.mind_deadline()?;
                let key =
                    OperationKey::of_kind(order_id.clone(), OperationKind::Dispute(id.clone()));
                match self.deps.store.get(&key).await {
                    Ok(record) => {
                        ev.related.extend(record);
                        ev.disputes_read.insert(id.as_str().to_owned());
                    }
                    Err(e) if e.unreadable.is_some() => ev.unreadable += 1,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// Each of `ids` read at Stripe into `found`, until the deadline. Stripe's refusal of an id
    /// (it has no such object), or an id that is none of this kind, is an answer: `None`. Any
    /// other failure leaves the item unchecked.
    async fn retrieve_each<O: ReadById>(
        &mut self,
        ids: BTreeSet<String>,
        found: &mut BTreeMap<String, Option<O>>,
    ) {
        for id in ids {
            if self.mind_deadline().is_err() {
                return;
            }
            let Some(parsed) = O::parse_id(&id) else {
                found.insert(id, None);
                continue;
            };
            self.stripe_calls += 1;
            match O::retrieve(self.deps.gateway, &parsed).await {
                Ok(object) => {
                    found.insert(id, Some(object));
                }
                Err(GatewayError::Rejected { .. }) => {
                    found.insert(id, None);
                }
                Err(e) => {
                    warn!(object = O::NOUN, id = %id, error = %ErrorChain(&e), "the audit could not read a Stripe object; left unchecked")
                }
            }
        }
    }

    /// The unknown index (deadlines) and the REVIEW count.
    async fn unsettled_records(&mut self, ev: &mut Evidence) -> Result<(), Stopped> {
        let mut cursor = None;
        loop {
            self.mind_deadline()?;
            let page = self
                .deps
                .store
                .query_index(IndexQuery::Unsettled, cursor, PAGE_SIZE)
                .await?;
            ev.unsettled.extend(page.operations);
            ev.unreadable += unreadable(&page.unreadable);
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let mut cursor = None;
        loop {
            self.mind_deadline()?;
            let page = self.deps.store.count_in_review(cursor, PAGE_SIZE).await?;
            ev.in_review += page.entries;
            match page.next {
                Some(next) => cursor = Some(next),
                None => return Ok(()),
            }
        }
    }
}

/// A kind of Stripe object the audit reads by id when a record or another object names one it
/// did not list.
trait ReadById: StripeObject + Sized {
    type Id;

    /// The id as this kind's, or `None` when it cannot be one (Stripe would have no such object).
    fn parse_id(id: &str) -> Option<Self::Id>;

    async fn retrieve(gateway: &dyn PaymentGateway, id: &Self::Id) -> Result<Self, GatewayError>;
}

impl ReadById for PaymentIntent {
    type Id = PaymentIntentId;

    fn parse_id(id: &str) -> Option<Self::Id> {
        PaymentIntentId::parse(id).ok()
    }

    async fn retrieve(gateway: &dyn PaymentGateway, id: &Self::Id) -> Result<Self, GatewayError> {
        gateway.retrieve(id).await
    }
}

impl ReadById for StripeRefund {
    type Id = StripeRefundId;

    fn parse_id(id: &str) -> Option<Self::Id> {
        StripeRefundId::parse(id).ok()
    }

    async fn retrieve(gateway: &dyn PaymentGateway, id: &Self::Id) -> Result<Self, GatewayError> {
        gateway.retrieve_refund(id).await
    }
}

impl ReadById for StripeDispute {
    type Id = DisputeId;

    fn parse_id(id: &str) -> Option<Self::Id> {
        DisputeId::parse(id).ok()
    }

    async fn retrieve(gateway: &dyn PaymentGateway, id: &Self::Id) -> Result<Self, GatewayError> {
        gateway.retrieve_dispute(id).await
    }
}

/// A kind of Stripe object the audit lists by creation time (step 1 of the module docs).
trait ListedByCreation: Sized {
    /// One page of the kind created in `window`, after `starting_after`.
    async fn list_page(
        gateway: &dyn PaymentGateway,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<Self>, GatewayError>;
}

impl ListedByCreation for PaymentIntent {
    async fn list_page(
        gateway: &dyn PaymentGateway,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<Self>, GatewayError> {
        gateway.list_intents_created(window, starting_after).await
    }
}

impl ListedByCreation for StripeRefund {
    async fn list_page(
        gateway: &dyn PaymentGateway,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<Self>, GatewayError> {
        gateway.list_refunds_created(window, starting_after).await
    }
}

impl ListedByCreation for StripeDispute {
    async fn list_page(
        gateway: &dyn PaymentGateway,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<Self>, GatewayError> {
        gateway.list_disputes_created(window, starting_after).await
    }
}

/// Unreadable records of a page, logged by key (never their contents) and counted.
fn unreadable(records: &[crate::ports::UnreadableRecord]) -> u64 {
    for r in records {
        warn!(key = %r.key, reason = %r.reason, "the audit skipped a record this release cannot read");
    }
    records.len() as u64
}

/// A record's table key, as `(order id, sort key)`.
fn record_key(op: &Operation) -> (String, String) {
    (op.order_id.as_str().to_owned(), op.kind.sort_key())
}
