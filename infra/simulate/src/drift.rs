//! The production drift audit as the simulation's second judge.
//!
//! After the run, once the ledger judge has read every order, the simulation runs
//! `charge_once::audit::run_audit` — the audit function's own code — over the simulated Stripe
//! (through the gateway port, faults off as for the judge) and the store, for every 24 h window
//! from the run's start to its end. So every mutation that breaks a record must be caught by the
//! audit too, which proves it; and a clean run must show no finding at all.
//!
//! Before the audit it injects the drift only the audit can see ([`inject`], unless `--no-faults`):
//! - an intent **created with our metadata outside the engine** (another program with our key: a
//!   fresh operation id, an order of the run) → `at_stripe_not_here`;
//! - a settled record **edited by hand** (a succeeded charge set to `failed`) → `status_differs`;
//! - a **refund made in the dashboard** (no metadata) of a succeeded charge → `at_stripe_not_here`.
//!
//! Each must be found, in its class, naming its object or order ([`judge`]); anything else the
//! audit finds is unexplained drift, and breaks the run's invariants.

use std::collections::BTreeMap;
use std::time::Duration;

use charge_core::audit::{AuditPolicy, AuditReport, AuditWindow, DriftClass, Finding};
use charge_core::plan::Policy;
use charge_core::{
    domain::{OperationId, OrderId},
    operation::{OperationKey, OperationStatus},
    time::{Clock, ManualClock, Timestamp},
};
use charge_once::audit::{run_audit, AuditDeps, AuditRun};
use charge_once::ports::{
    AuditLog, CreatePaymentIntent, MetricsSink, OperationReads, OperationStore, PaymentGateway,
};
use serde::Serialize;
use stripe_sim::StripeSim;

use crate::store::SimStore;
use crate::BoxError;

/// One audit window: what the scheduled audit covers by default.
pub const WINDOW: Duration = Duration::from_secs(24 * 3600);

/// [`Injected::what`] of a refund that failed late at Stripe while every event about it went to
/// the events DLQ: not injected by the audit's set-up, but drift it must report all the same.
pub const LATE_FAILURE_IN_EVENTS_DLQ: &str = "late_failure_in_events_dlq";

/// A drift injected, and how the audit must report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Injected {
    pub what: &'static str,
    pub class: DriftClass,
    /// The Stripe object or the order the finding must name.
    pub names: String,
}

/// What the audit found over the run, against what was injected.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AuditSummary {
    /// Windows audited (24 h each, from the run's start to its end).
    pub windows: u64,
    pub intents: u64,
    pub refunds: u64,
    /// Disputes Stripe listed as created in the windows.
    pub disputes: u64,
    pub settled_records: u64,
    pub matched: u64,
    pub in_flight: u64,
    pub not_ours: u64,
    pub unchecked: u64,
    /// Objects and records with no verdict: must stay 0.
    pub unexplained: i64,
    /// Findings per class, over every window.
    pub by_class: BTreeMap<String, u64>,
    /// The drift injected, each with whether the audit found it in its class.
    pub injected: Vec<(Injected, bool)>,
    /// Invariant: findings no injected drift explains (a record the engine got wrong). 0 in a
    /// clean run; a mutation that breaks a record makes it > 0.
    pub unexpected: u64,
    /// The first of them.
    pub first_unexpected: Option<String>,
    /// Stripe calls the audits made (lists, reads by id).
    pub stripe_calls: u64,
    /// Every window was read whole.
    pub complete: bool,
}

impl AuditSummary {
    /// The audit's invariants: every injected drift found in its class, nothing unexplained,
    /// every window read whole, and no finding nothing explains.
    pub fn holds(&self) -> bool {
        self.unexpected == 0 && self.missed() == 0 && self.unexplained == 0 && self.complete
    }

    pub fn missed(&self) -> u64 {
        self.injected.iter().filter(|(_, found)| !found).count() as u64
    }
}

/// Injects one drift of each kind (see the module docs) on orders the seed picks among the run's
/// succeeded charges; `orders` are the run's order ids in order.
pub async fn inject(
    store: &SimStore,
    sim: &StripeSim,
    gateway: &dyn PaymentGateway,
    orders: &[String],
    seed: u64,
) -> Result<Vec<Injected>, BoxError> {
    let picks = succeeded_charges(store, orders, seed, 3).await?;
    let mut injected = Vec::new();
    if let Some(order) = picks.first() {
        injected.push(outside_intent(store, gateway, order).await?);
    }
    if let Some(order) = picks.get(1) {
        let key = OperationKey::charge(OrderId::parse(order)?);
        store.edit_by_hand(&key, |op| op.status = OperationStatus::Failed);
        injected.push(Injected {
            what: "a settled record edited by hand (succeeded set to failed)",
            class: DriftClass::StatusDiffers,
            names: order.clone(),
        });
    }
    if let Some(order) = picks.get(2) {
        injected.push(dashboard_refund(store, sim, order).await?);
    }
    Ok(injected)
}

/// Up to `n` orders whose charge succeeded (automatic capture, nothing refunded), starting at an
/// order the seed picks.
async fn succeeded_charges(
    store: &SimStore,
    orders: &[String],
    seed: u64,
    n: usize,
) -> Result<Vec<String>, BoxError> {
    let mut picks = Vec::new();
    if orders.is_empty() {
        return Ok(picks);
    }
    let start = (seed as usize).wrapping_mul(7919) % orders.len();
    for i in 0..orders.len() {
        let order = &orders[(start + i) % orders.len()];
        let key = OperationKey::charge(OrderId::parse(order)?);
        // A record this release cannot read (left unrepaired by a mutation) is no pick.
        let Ok(Some(op)) = store.get(&key).await else {
            continue;
        };
        let plain = op.status == OperationStatus::Succeeded
            && op.amount_captured().is_none()
            && op.refund_reserved() == 0
            && op.external_id.is_some();
        if plain {
            picks.push(order.clone());
            if picks.len() == n {
                break;
            }
        }
    }
    Ok(picks)
}

/// Another program creates and confirms an intent with our metadata and our key: a fresh
/// operation id, the order's id, the order's customer and card.
async fn outside_intent(
    store: &SimStore,
    gateway: &dyn PaymentGateway,
    order: &str,
) -> Result<Injected, BoxError> {
    let key = OperationKey::charge(OrderId::parse(order)?);
    let op = store.get(&key).await?.ok_or("the picked charge is gone")?;
    let params = op
        .params
        .charge()
        .ok_or("the picked charge has no params")?
        .clone();
    let operation_id = OperationId::new_random();
    let req = CreatePaymentIntent {
        idempotency_key: operation_id.idempotency_key(),
        operation_id,
        order_id: op.order_id.clone(),
        params,
        attempt: 1,
    };
    let pi = gateway.create(&req).await?;
    Ok(Injected {
        what: "an intent created with our metadata outside the engine",
        class: DriftClass::AtStripeNotHere,
        names: pi.id.as_str().to_owned(),
    })
}

/// A refund made in Stripe's dashboard: no metadata, a part of the charge.
async fn dashboard_refund(
    store: &SimStore,
    sim: &StripeSim,
    order: &str,
) -> Result<Injected, BoxError> {
    let key = OperationKey::charge(OrderId::parse(order)?);
    let op = store.get(&key).await?.ok_or("the picked charge is gone")?;
    let pi = op.external_id.ok_or("the picked charge has no intent")?;
    let form = vec![
        ("payment_intent".to_owned(), pi.as_str().to_owned()),
        ("amount".to_owned(), "100".to_owned()),
    ];
    let answer = match sim.refund_in_process(None, &form) {
        stripe_sim::CreateStart::Done(stripe_sim::Outcome::Answered(a)) => a,
        _ => return Err("the dashboard refund got no answer".into()),
    };
    let body: serde_json::Value = serde_json::from_slice(&answer.body)?;
    let id = body["id"]
        .as_str()
        .ok_or("the dashboard refund has no id")?;
    Ok(Injected {
        what: "a refund made in the dashboard (no metadata)",
        class: DriftClass::AtStripeNotHere,
        names: id.to_owned(),
    })
}

/// Runs the production audit over every 24 h window from `start` to `clock.now()` (the last one
/// reaching past now), unpaced (the run is over: nothing else calls Stripe), as `ran_by`
/// `simulation`.
pub async fn audit_windows(
    store: &dyn OperationStore,
    log: &dyn AuditLog,
    gateway: &dyn PaymentGateway,
    clock: &ManualClock,
    start: Timestamp,
    metrics: &dyn MetricsSink,
) -> Vec<AuditReport> {
    let policy = Policy::default();
    let policy = AuditPolicy {
        key_window: policy.key_window,
        page_lead: policy.authorization_page_lead,
        refund_recheck: charge_core::audit::DEFAULT_REFUND_RECHECK,
    };
    let end = clock.now().plus(Duration::from_secs(1));
    let mut reports = Vec::new();
    let mut from = start;
    while from < end {
        let window = AuditWindow {
            from,
            to: from.plus(WINDOW),
        };
        // Its metrics dated when the daily schedule would have run it (the window's end), not
        // when the run's end audits them all.
        let dated = AtTime {
            inner: metrics,
            at: window.to.min(end),
        };
        let deps = AuditDeps {
            store,
            log,
            gateway,
            clock,
            metrics: &dated,
        };
        let run = AuditRun {
            window,
            policy,
            ran_by: "simulation".to_owned(),
            deadline: clock.now().plus(Duration::from_secs(3600)),
        };
        reports.push(run_audit(&deps, &run).await);
        from = window.to;
    }
    reports
}

/// A sink that dates every line `at`.
struct AtTime<'a> {
    inner: &'a dyn MetricsSink,
    at: Timestamp,
}

impl MetricsSink for AtTime<'_> {
    fn emit(&self, line: String) {
        match serde_json::from_str::<serde_json::Value>(&line) {
            Ok(mut v) if v["_aws"].is_object() => {
                v["_aws"]["Timestamp"] = self.at.as_millis().into();
                self.inner.emit(v.to_string());
            }
            _ => self.inner.emit(line),
        }
    }
}

/// The reports against the injected drift.
pub fn judge(reports: &[AuditReport], injected: Vec<Injected>) -> AuditSummary {
    let mut s = AuditSummary {
        windows: reports.len() as u64,
        complete: true,
        ..AuditSummary::default()
    };
    let mut findings: Vec<&Finding> = Vec::new();
    for r in reports {
        let c = &r.counts;
        s.intents += c.intents;
        s.refunds += c.refunds;
        s.disputes += c.disputes;
        s.settled_records += c.settled_records;
        s.matched += c.matched;
        s.in_flight += c.in_flight;
        s.not_ours += c.not_ours;
        s.unchecked += c.unchecked;
        s.stripe_calls += c.stripe_calls;
        s.unexplained += (c.intents + c.refunds + c.disputes + c.settled_records) as i64
            - (c.not_ours + c.matched + c.in_flight + c.unchecked + c.drifted) as i64;
        s.complete &= r.complete && r.findings_left_out == 0;
        for (class, n) in &r.by_class {
            *s.by_class.entry(class.as_str().to_owned()).or_default() += n;
        }
        findings.extend(&r.findings);
    }
    let names = |f: &Finding, what: &str| {
        f.stripe_id.as_deref() == Some(what) || f.order_id.as_deref() == Some(what)
    };
    let mut explained = vec![false; findings.len()];
    // One drift may be found in two windows: an order whose record settled on a later day than
    // its intent was created is compared in the intent's window (listed by creation) and in the
    // record's (listed by settle time). Every finding of an injected drift is explained by it.
    for inj in injected {
        let mut hit = false;
        for (i, f) in findings.iter().enumerate() {
            if f.class == inj.class && names(f, &inj.names) {
                explained[i] = true;
                hit = true;
            }
        }
        s.injected.push((inj, hit));
    }
    for (f, ok) in findings.iter().zip(&explained) {
        if !ok {
            s.unexpected += 1;
            s.first_unexpected.get_or_insert_with(|| {
                format!(
                    "{} order {} operation {} {}: {}",
                    f.class.as_str(),
                    f.order_id.as_deref().unwrap_or("-"),
                    f.operation_id.as_deref().unwrap_or("-"),
                    f.stripe_id.as_deref().unwrap_or("-"),
                    f.detail
                )
            });
        }
    }
    s
}
