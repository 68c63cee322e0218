//! `chargectl audit`: the drift audit on demand (`--since 24h`), or the reports kept by earlier
//! runs (`--show`). The audit is the production one (`charge_once::audit::run_audit`): it reads
//! Stripe's lists and the records, keeps its report (one per window, the same item the scheduled
//! audit writes) and changes no operation record. The report names who ran it: the caller's IAM
//! identity.

use std::time::Duration;

use charge_core::audit::{AuditPolicy, AuditReport, AuditWindow};
use charge_core::plan::Policy;
use charge_core::time::Clock;
use charge_once::audit::{run_audit, AuditDeps, AuditRun};
use charge_once::ports::{AuditLog, OperationStore, PaymentGateway};
use charge_once::telemetry::DiscardMetrics;
use serde_json::{json, Value};

use crate::commands::{CallerIdentity, Console, Failure};
use crate::render::cell;

/// How long an on-demand audit may read before it reports what it has (incomplete).
pub const READ_BUDGET: Duration = Duration::from_secs(15 * 60);
/// Longest detail shown in the findings table (`--json` has it whole).
const DETAIL_WIDTH: usize = 70;

/// What `audit` needs.
pub struct DriftDeps<'a> {
    pub store: &'a dyn OperationStore,
    pub log: &'a dyn AuditLog,
    pub gateway: &'a dyn PaymentGateway,
    pub identity: &'a dyn CallerIdentity,
    pub clock: &'a dyn Clock,
}

/// Runs the audit over the `since` before now, keeps and prints its report.
pub async fn run(
    deps: &DriftDeps<'_>,
    since: Duration,
    json: bool,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    let caller = deps
        .identity
        .caller_arn()
        .await
        .map_err(|e| Failure::infra("finding who you are (STS GetCallerIdentity)", e))?;
    let now = deps.clock.now();
    let policy = Policy::default();
    let run = AuditRun {
        window: AuditWindow::ending_at(now, since),
        policy: AuditPolicy {
            key_window: policy.key_window,
            page_lead: policy.authorization_page_lead,
            refund_recheck: charge_core::audit::DEFAULT_REFUND_RECHECK,
        },
        ran_by: caller,
        deadline: now.plus(READ_BUDGET),
    };
    // The metrics lines are the scheduled audit's; an operator's run pages nobody.
    let audit = AuditDeps {
        store: deps.store,
        log: deps.log,
        gateway: deps.gateway,
        clock: deps.clock,
        metrics: &DiscardMetrics,
    };
    let report = run_audit(&audit, &run).await;
    print(&[report], json, console)
}

/// Prints the latest `last` kept reports, newest first; a stored report this release cannot
/// read is named on stderr and skipped.
pub async fn show(
    log: &dyn AuditLog,
    last: usize,
    json: bool,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    let stored = log
        .latest_reports(last)
        .await
        .map_err(|e| Failure::infra("reading the kept audit reports", e))?;
    for bad in &stored.unreadable {
        writeln!(
            console.err,
            "chargectl: skipped a kept report this release cannot read ({}): {}",
            bad.key, bad.reason
        )?;
    }
    if stored.reports.is_empty() {
        return Err(Failure::Refused(
            "no audit report is kept yet (the scheduled audit runs daily; run one with chargectl audit --since 24h)".into(),
        ));
    }
    print(&stored.reports, json, console)
}

fn print(reports: &[AuditReport], json: bool, console: &mut Console<'_>) -> Result<(), Failure> {
    for report in reports {
        if json {
            writeln!(console.out, "{}", report_json(report))?;
        } else {
            write!(console.out, "{}", report_text(report))?;
        }
    }
    Ok(())
}

/// One report as one JSON object (stable snake_case keys; times RFC 3339).
pub fn report_json(r: &AuditReport) -> Value {
    json!({
        "window_from": r.window.from.to_rfc3339(),
        "window_to": r.window.to.to_rfc3339(),
        "ran_at": r.ran_at.to_rfc3339(),
        "ran_by": r.ran_by,
        "complete": r.complete,
        "stopped_by": r.stopped_by,
        "drift": r.drift(),
        "by_class": r.by_class.iter().map(|(c, n)| (c.as_str().to_owned(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "counts": r.counts,
        "findings": r.findings,
        "findings_left_out": r.findings_left_out,
    })
}

/// One report as text: the window, what was looked at, the classes, the findings.
pub fn report_text(r: &AuditReport) -> String {
    use std::fmt::Write as _;
    let c = &r.counts;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "audit {} .. {}  (ran {} by {}){}",
        r.window.from.to_rfc3339(),
        r.window.to.to_rfc3339(),
        r.ran_at.to_rfc3339(),
        r.ran_by,
        if r.complete { "" } else { "  INCOMPLETE" }
    );
    if let Some(why) = &r.stopped_by {
        let _ = writeln!(out, "stopped: {why}");
    }
    let _ = writeln!(
        out,
        "looked at: {} intents, {} refunds, {} settled records ({} Stripe calls); matched {}, in flight {}, not ours {}, unchecked {}, in review {}, unreadable {}",
        c.intents, c.refunds, c.settled_records, c.stripe_calls, c.matched, c.in_flight, c.not_ours, c.unchecked, c.in_review, c.unreadable
    );
    let _ = writeln!(out, "drift: {}", r.drift());
    for (class, n) in &r.by_class {
        let _ = writeln!(out, "  {:<28} {n}", class.as_str());
    }
    if !r.findings.is_empty() {
        let _ = writeln!(
            out,
            "{:<28} {:<20} {:<36} {:<8} {:<28} DETAIL",
            "CLASS", "ORDER", "OPERATION", "KIND", "STRIPE"
        );
        for f in &r.findings {
            let _ = writeln!(
                out,
                "{:<28} {:<20} {:<36} {:<8} {:<28} {}",
                f.class.as_str(),
                f.order_id.as_deref().unwrap_or("-"),
                f.operation_id.as_deref().unwrap_or("-"),
                f.kind.as_deref().unwrap_or("-"),
                f.stripe_id.as_deref().unwrap_or("-"),
                cell(&f.detail, DETAIL_WIDTH)
            );
        }
    }
    if r.findings_left_out > 0 {
        let _ = writeln!(
            out,
            "… and {} more findings not kept (counted above)",
            r.findings_left_out
        );
    }
    out
}
