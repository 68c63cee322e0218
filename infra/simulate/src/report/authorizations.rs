//! Authorizations (`--authorizations`) judged against the PaymentIntents Stripe holds for them.
//!
//! Invariants (each must stay 0):
//! - `over_captures`: an intent that received more than it authorized, a charge record that
//!   captured more than its amount, or a capture recorded for another amount than Stripe took;
//! - `captured_and_canceled`: an order whose capture and cancel both succeeded, or whose cancel
//!   succeeded while Stripe took the money (the record of a charge captured with a cancel
//!   succeeded, or canceled with a capture succeeded, included);
//! - `unconverged`: a capture or cancel neither settled nor in review at the end;
//! - `lapsed_unpaged`: an authorization Stripe canceled at its deadline (`automatic`, or
//!   `expired` from basil on) that was
//!   not paged (`AuthorizationNearDeadline`, seen as the write that pages) before that moment;
//! - `record_mismatches`: a record that disagrees with Stripe: a charge `succeeded` without its
//!   intent captured for the amount recorded, `failed` as expired without the intent canceled
//!   `automatic`, `failed` as canceled without it canceled by us, stopped before it was sent while
//!   an intent exists, `authorized` while Stripe no longer holds it, or not `authorized` while
//!   Stripe still does; a capture `succeeded` without the money taken, `failed` while it was; a
//!   cancel `succeeded` while the intent is not canceled;
//! - `event_mismatches`: an authorization that ended (captured, canceled or lapsed) whose
//!   `ChargeAuthorized` was never published, or a `ChargeAuthorized` published for a charge
//!   that was never held;
//! - `needless_reviews`: a capture or cancel in review (nothing in the simulation needs a
//!   person for one: Stripe refuses none that the store let take the charge);
//! - `answers_changed`: the door answering a capture (cancel) of an order with two operations.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use charge_core::operation::{Operation, OperationStatus};
use charge_core::outbox::Outcome;
use charge_core::store_rules::{AUTHORIZATION_EXPIRED, CANCELED_BEFORE_SENT, CANCELED_BY_MERCHANT};
use serde::Serialize;

use super::section::{self, list, Invariant};
use super::{violated, Report};
use crate::auth_asks::Fate;
use crate::driver::Order;
use crate::store::Published;

/// Authorizations asked and judged.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AuthorizationReport {
    /// `--authorizations`: the share of orders checked out with `"capture": "manual"`.
    pub rate: f64,
    /// Orders checked out so, by what the seed planned for them.
    pub orders: u64,
    pub fates: BTreeMap<String, u64>,
    /// Captures and cancels sent to the door (a 503 sent again counted twice), its answers by
    /// kind, status and code, and the distinct (order, kind) it accepted.
    pub asked: u64,
    pub answers: BTreeMap<String, u64>,
    pub accepted: u64,
    /// Charges authorized at Stripe (intents that held money for a manual charge), and how they
    /// ended there: captured (of which in part), canceled by us, lapsed, still held.
    pub authorized_at_stripe: u64,
    pub captured: u64,
    pub captured_part: u64,
    pub canceled: u64,
    pub lapsed: u64,
    /// The lapses by the word Stripe answered with (`automatic` on the pinned version, `expired`
    /// from basil on): both are lapses.
    pub lapse_reasons: BTreeMap<String, u64>,
    pub held_at_end: u64,
    /// Charges stopped at the door before they were sent (no Stripe call).
    pub canceled_before_sent: u64,
    /// Races (a capture and a cancel asked at once): won by the capture, by the cancel.
    pub races: u64,
    pub races_captured: u64,
    pub races_canceled: u64,
    /// Capture and cancel operations, and how they ended.
    pub capture_ops: u64,
    pub cancel_ops: u64,
    pub take_succeeded: u64,
    pub take_failed: u64,
    pub take_in_review: u64,
    /// Orders paged before their deadline, page writes in all, and the metric's sums
    /// (`AuthorizationNearDeadline`) from the charge function and the reconciler.
    pub paged_orders: u64,
    pub page_writes: u64,
    pub pages_metric_charge: u64,
    pub pages_metric_reconciler: u64,
    /// Lapses that were paged before their deadline.
    pub lapsed_paged: u64,
    /// Capture and cancel calls the functions made, and Stripe calls per capture operation.
    pub stripe_capture_calls: u64,
    pub stripe_cancel_calls: u64,
    pub stripe_calls_per_capture: f64,
    // The invariants.
    pub over_captures: u64,
    pub captured_and_canceled: u64,
    pub unconverged: u64,
    pub lapsed_unpaged: u64,
    pub record_mismatches: u64,
    pub event_mismatches: u64,
    pub needless_reviews: u64,
    pub answers_changed: u64,
}

impl AuthorizationReport {
    /// The invariants, in the order the report lists them.
    fn invariants(&self) -> [Invariant; 8] {
        [
            (self.over_captures, "over-captures"),
            (self.captured_and_canceled, "captured and canceled"),
            (self.unconverged, "unconverged"),
            (self.lapsed_unpaged, "lapsed without a page"),
            (self.record_mismatches, "record mismatches"),
            (self.event_mismatches, "event mismatches"),
            (self.needless_reviews, "needless reviews"),
            (self.answers_changed, "answers changed"),
        ]
    }

    pub fn holds(&self) -> bool {
        section::holds(&self.invariants())
    }

    pub(super) fn render(&self, s: &mut String) {
        if self.rate <= 0.0 {
            return;
        }
        let _ = writeln!(
            s,
            "  authorizations  rate {}: {} orders ({}); {} asked, {} accepted",
            self.rate,
            self.orders,
            list(&self.fates),
            self.asked,
            self.accepted
        );
        let _ = writeln!(s, "  take answers    {}", list(&self.answers));
        let _ = writeln!(
            s,
            "  held at Stripe  {} authorized: captured {} (in part {}), canceled {}, lapsed {} (paged before {}), held at the end {}; stopped before sent {}; races {} (capture won {}, cancel won {})",
            self.authorized_at_stripe,
            self.captured,
            self.captured_part,
            self.canceled,
            self.lapsed,
            self.lapsed_paged,
            self.held_at_end,
            self.canceled_before_sent,
            self.races,
            self.races_captured,
            self.races_canceled
        );
        let _ = writeln!(
            s,
            "  takes           {} captures, {} cancels: succeeded {}  failed {}  in review {}; Stripe calls: {} captures, {} cancels ({:.2} per capture)",
            self.capture_ops,
            self.cancel_ops,
            self.take_succeeded,
            self.take_failed,
            self.take_in_review,
            self.stripe_capture_calls,
            self.stripe_cancel_calls,
            self.stripe_calls_per_capture
        );
        let _ = writeln!(
            s,
            "  deadline pages  {} orders paged ({} page writes; AuthorizationNearDeadline: charge {}, reconciler {})",
            self.paged_orders,
            self.page_writes,
            self.pages_metric_charge,
            self.pages_metric_reconciler
        );
        section::render_invariants(s, "take invariants", &self.invariants());
    }
}

/// A PaymentIntent as Stripe holds it at the end of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntentAtStripe {
    pub id: String,
    pub status: String,
    pub amount: i64,
    pub amount_received: i64,
    pub cancellation_reason: Option<String>,
    /// When it was canceled, ms (Stripe says seconds).
    pub canceled_at_ms: Option<i64>,
}

impl IntentAtStripe {
    /// Read from Stripe's JSON body of the intent.
    pub fn parse(body: &[u8]) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        Some(Self {
            id: v["id"].as_str()?.to_owned(),
            status: v["status"].as_str()?.to_owned(),
            amount: v["amount"].as_i64()?,
            amount_received: v["amount_received"].as_i64().unwrap_or(0),
            cancellation_reason: v["cancellation_reason"].as_str().map(str::to_owned),
            canceled_at_ms: v["canceled_at"].as_i64().map(|s| s * 1000),
        })
    }

    fn lapsed(&self) -> bool {
        self.status == "canceled"
            && charge_core::stripe_version::is_lapse(self.cancellation_reason.as_deref())
    }

    /// Whether it ever held money: authorized, captured, or canceled other than as a declined
    /// intent nobody will pay (`abandoned`, the charge function's own cancel).
    fn held_once(&self) -> bool {
        match self.status.as_str() {
            "requires_capture" | "succeeded" => true,
            "canceled" => self.cancellation_reason.as_deref() != Some("abandoned"),
            _ => false,
        }
    }
}

/// One authorized order as the run left it.
pub struct OrderAuthorization<'r> {
    pub fate: Fate,
    pub charge: Option<&'r Operation>,
    pub capture: Option<&'r Operation>,
    pub cancel: Option<&'r Operation>,
    /// The intents Stripe holds for the charge's operation.
    pub intents: &'r [IntentAtStripe],
    /// When the order was first paged (virtual ms).
    pub first_page_ms: Option<i64>,
    /// The charge's outcomes published (the memory store only).
    pub published: Option<Published>,
    /// Whether Stripe's intents could be read (Stripe in this process): otherwise only what the
    /// records say of themselves is judged.
    pub at_stripe: bool,
}

/// One authorized order's verdict, counted into `report`.
pub fn judge(report: &mut Report, order: &Order, of: &OrderAuthorization<'_>) {
    let a = &mut report.authorizations;
    a.orders += 1;
    *a.fates.entry(of.fate.name().to_owned()).or_default() += 1;
    let Some(charge) = of.charge else { return };
    let external = charge
        .external_id
        .as_deref()
        .and_then(|id| of.intents.iter().find(|i| i.id == id));
    count_ends(a, of, charge);
    let mut broken = records_broken(a, charge, of);
    if of.at_stripe {
        broken.extend(stripe_broken(a, charge, of, external));
    }
    for why in broken {
        violated(report, order, why);
    }
}

/// The invariants the records alone tell: no capture over the authorization, never both taken,
/// every take converged and none in review.
fn records_broken(
    a: &mut AuthorizationReport,
    charge: &Operation,
    of: &OrderAuthorization<'_>,
) -> Vec<&'static str> {
    let mut broken = Vec::new();
    if over_captured(charge, of) {
        a.over_captures += 1;
        broken.push("capture over the authorization");
    }
    if captured_and_canceled(charge, of) {
        a.captured_and_canceled += 1;
        broken.push("both captured and canceled");
    }
    for take in [of.capture, of.cancel].into_iter().flatten() {
        if !take.status.is_settled() && take.review.is_none() {
            a.unconverged += 1;
            broken.push("capture or cancel unconverged");
        }
        if take.review.is_some() {
            a.needless_reviews += 1;
            broken.push("capture or cancel in review");
        }
    }
    broken
}

/// The invariants against Stripe's intents: every lapse paged before it, the records agree with
/// the holds, and `ChargeAuthorized` with the records.
fn stripe_broken(
    a: &mut AuthorizationReport,
    charge: &Operation,
    of: &OrderAuthorization<'_>,
    external: Option<&IntentAtStripe>,
) -> Vec<&'static str> {
    let mut broken = Vec::new();
    if let Some(lapse) = of.intents.iter().find(|i| i.lapsed()) {
        let before = lapse.canceled_at_ms.unwrap_or(i64::MAX).saturating_add(999);
        if of.first_page_ms.is_some_and(|p| p < before) {
            a.lapsed_paged += 1;
        } else {
            a.lapsed_unpaged += 1;
            broken.push("authorization lapsed without a page before its deadline");
        }
    }
    if let Some(why) = disagreement(charge, of, external) {
        a.record_mismatches += 1;
        broken.push(why);
    }
    if let Some(published) = of.published {
        let ended = charge.external_id.is_some()
            && (charge.amount_captured().is_some()
                || matches!(
                    charge.last_error.as_deref(),
                    Some(AUTHORIZATION_EXPIRED | CANCELED_BY_MERCHANT)
                ));
        let held = of.intents.iter().any(IntentAtStripe::held_once);
        let told = published.contains(Outcome::Authorized);
        if (ended && !told) || (told && !held) {
            a.event_mismatches += 1;
            broken.push("ChargeAuthorized disagrees with the authorization");
        }
    }
    broken
}

/// How the authorization ended at Stripe, and the takes' ends, counted.
fn count_ends(a: &mut AuthorizationReport, of: &OrderAuthorization<'_>, charge: &Operation) {
    for i in of
        .intents
        .iter()
        .filter(|i| i.held_once() || i.status == "canceled")
    {
        match i.status.as_str() {
            "succeeded" => {
                a.captured += 1;
                a.captured_part += u64::from(i.amount_received < i.amount);
            }
            "requires_capture" => a.held_at_end += 1,
            "canceled" if i.lapsed() => {
                a.lapsed += 1;
                let reason = i.cancellation_reason.clone().unwrap_or_default();
                *a.lapse_reasons.entry(reason).or_default() += 1;
            }
            "canceled" if of.cancel.is_some() => a.canceled += 1,
            _ => continue,
        }
        a.authorized_at_stripe += 1;
    }
    a.canceled_before_sent += u64::from(charge.last_error.as_deref() == Some(CANCELED_BEFORE_SENT));
    if of.fate == Fate::Race {
        let won = |t: Option<&Operation>| {
            u64::from(t.is_some_and(|t| t.status == OperationStatus::Succeeded))
        };
        a.races += 1;
        a.races_captured += won(of.capture);
        a.races_canceled += won(of.cancel);
    }
    for (take, capture) in [(of.capture, true), (of.cancel, false)] {
        let Some(t) = take else { continue };
        if capture {
            a.capture_ops += 1;
        } else {
            a.cancel_ops += 1;
        }
        match t.status {
            OperationStatus::Succeeded => a.take_succeeded += 1,
            OperationStatus::Failed => a.take_failed += 1,
            _ if t.review.is_some() => a.take_in_review += 1,
            _ => {}
        }
    }
}

fn over_captured(charge: &Operation, of: &OrderAuthorization<'_>) -> bool {
    let authorized = charge.params.amount().minor_units();
    let at_stripe = of.intents.iter().any(|i| i.amount_received > i.amount);
    let recorded = charge
        .amount_captured()
        .is_some_and(|a| a.minor_units() > authorized);
    let capture_over = of
        .capture
        .is_some_and(|c| c.params.amount().minor_units() > authorized);
    at_stripe || recorded || capture_over
}

fn captured_and_canceled(charge: &Operation, of: &OrderAuthorization<'_>) -> bool {
    let succeeded =
        |t: Option<&Operation>| t.is_some_and(|t| t.status == OperationStatus::Succeeded);
    let (captured, canceled) = (succeeded(of.capture), succeeded(of.cancel));
    let taken_at_stripe = of.intents.iter().any(|i| i.amount_received > 0);
    let charge_canceled = matches!(
        charge.last_error.as_deref(),
        Some(CANCELED_BY_MERCHANT | CANCELED_BEFORE_SENT)
    ) && charge.status == OperationStatus::Failed;
    let canceled_over_taken =
        taken_at_stripe || charge.status == OperationStatus::Succeeded || captured;
    (canceled && canceled_over_taken) || (captured && charge_canceled)
}

/// The first way the records disagree with Stripe, if any.
fn disagreement(
    charge: &Operation,
    of: &OrderAuthorization<'_>,
    external: Option<&IntentAtStripe>,
) -> Option<&'static str> {
    let status = external.map(|i| i.status.as_str());
    let charge_agrees = match (charge.status, charge.last_error.as_deref()) {
        (OperationStatus::Succeeded, _) => external.is_some_and(|i| {
            i.status == "succeeded"
                && charge.amount_captured().map(|a| a.minor_units()) == Some(i.amount_received)
        }),
        (OperationStatus::Failed, Some(AUTHORIZATION_EXPIRED)) => {
            external.is_some_and(IntentAtStripe::lapsed)
        }
        (OperationStatus::Failed, Some(CANCELED_BY_MERCHANT)) => {
            status == Some("canceled") && !external.is_some_and(IntentAtStripe::lapsed)
        }
        (OperationStatus::Failed, Some(CANCELED_BEFORE_SENT)) => of.intents.is_empty(),
        (OperationStatus::Authorized, _) if charge.review.is_none() => {
            status == Some("requires_capture")
        }
        _ => true,
    };
    if !charge_agrees {
        return Some("charge record disagrees with Stripe's authorization");
    }
    let still_held = of.intents.iter().any(|i| i.status == "requires_capture");
    if still_held && charge.status != OperationStatus::Authorized && charge.review.is_none() {
        return Some("Stripe still holds an authorization its charge record let go");
    }
    if let Some(c) = of.capture {
        let taken = external.map_or(0, |i| i.amount_received);
        let agrees = match c.status {
            OperationStatus::Succeeded => taken == c.params.amount().minor_units(),
            OperationStatus::Failed => taken == 0,
            _ => true,
        };
        if !agrees {
            return Some("capture record disagrees with Stripe");
        }
    }
    if let Some(c) = of.cancel {
        let canceled = of.intents.is_empty() || status == Some("canceled");
        if c.status == OperationStatus::Succeeded && !canceled {
            return Some("cancel record disagrees with Stripe");
        }
    }
    None
}
