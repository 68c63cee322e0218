//! How operations are printed: the `unknowns` table and JSON lines, the `show` record as text or
//! one JSON object. Pure functions of the operation and "now", so they are tested without a store.
//!
//! Times are RFC 3339 in UTC (`Timestamp::to_rfc3339`), ages are human (`3h12m`), money is minor
//! units and currency (`1250 usd`) — the amount exactly as stored, never converted.

use std::time::Duration;

use charge_core::operation::Params;
use charge_core::{
    operation::{AuditEntry, Operation},
    time::Timestamp,
};
use charge_once::ports::UnreadableRecord;
use serde::Serialize;
use serde_json::Value;

/// Longest last error shown in the table (`show` prints it whole).
pub const LAST_ERROR_WIDTH: usize = 40;
/// Longest review reason shown in the table.
pub const REVIEW_REASON_WIDTH: usize = 60;
/// `requested by` of a record written before checkout recorded its caller (`--json`: null).
const NOT_RECORDED: &str = "not recorded (written before release 2026-11-30)";

/// A duration as a short human age: `45s`, `12m5s`, `3h12m`, `2d3h`.
pub fn human_age(age: Duration) -> String {
    let secs = age.as_secs();
    let (d, h, m, s) = (secs / 86_400, secs / 3_600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d{h}h")
    } else if h > 0 {
        format!("{h}h{m}m")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// One line of text for a table cell: control characters (newlines, tabs) become spaces, and
/// anything past `max` characters is cut, at the last space when one is in the second half (a word
/// is never shown half), and marked with `…`.
pub fn cell(text: &str, max: usize) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.chars().count() <= max {
        return clean;
    }
    let mut cut: String = clean.chars().take(max.saturating_sub(1)).collect();
    let half = cut.len() / 2;
    if let Some(space) = cut.rfind(' ').filter(|&at| at >= half) {
        cut.truncate(space);
    }
    cut.push('…');
    cut
}

/// `1250 usd`.
pub fn money(op: &Operation) -> String {
    format!(
        "{} {}",
        op.params.amount().minor_units(),
        op.params.currency().as_str()
    )
}

/// One `unknowns --json` line.
#[derive(Debug, Serialize)]
pub struct UnknownLine<'a> {
    pub operation_id: String,
    pub order_id: &'a str,
    pub amount: i64,
    pub currency: &'a str,
    pub status: &'static str,
    pub age_secs: u64,
    pub attempts: u32,
    pub last_error: Option<&'a str>,
    pub review_reason: Option<&'a str>,
    pub created_at: String,
    pub next_due_at: Option<String>,
    pub external_id: Option<&'a str>,
    pub redrives: u32,
    /// `charge` or `refund` (added with refunds; the keys above keep their names).
    pub kind: &'static str,
    /// The merchant's refund id of a refund; null for a charge.
    pub refund_id: Option<&'a str>,
    /// A dispute's Stripe id (`kind` `dispute`); null for every other kind (added with
    /// disputes, as the three below).
    pub dispute_id: Option<&'a str>,
    /// Stripe's dispute status, verbatim (`needs_response`, `under_review`, ...).
    pub dispute_status: Option<&'a str>,
    /// The dispute's evidence deadline (RFC 3339), while Stripe states one.
    pub due_by: Option<String>,
    /// A later charge attempt's number (`kind` `charge`, from 2); absent for the first attempt
    /// and every other kind (added with attempts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub charge_attempt: Option<u32>,
}

impl<'a> UnknownLine<'a> {
    pub fn of(op: &'a Operation, now: Timestamp) -> Self {
        Self {
            operation_id: op.operation_id.to_string(),
            order_id: op.order_id.as_str(),
            amount: op.params.amount().minor_units(),
            currency: op.params.currency().as_str(),
            status: op.status.as_str(),
            age_secs: now.since(op.created_at).as_secs(),
            attempts: op.attempts,
            last_error: op.last_error.as_deref(),
            review_reason: op.review.as_ref().map(|r| r.reason.as_str()),
            created_at: op.created_at.to_rfc3339(),
            next_due_at: op.next_due_at.map(|t| t.to_rfc3339()),
            external_id: op.external_id.as_deref(),
            redrives: op.redrives,
            kind: op.kind.as_str(),
            refund_id: op.kind.refund_id().map(|id| id.as_str()),
            dispute_id: op.kind.dispute_id().map(|id| id.as_str()),
            dispute_status: op.params.dispute_state().map(|s| s.status.as_str()),
            due_by: op
                .params
                .dispute_state()
                .and_then(|s| s.due_by)
                .map(|t| t.to_rfc3339()),
            charge_attempt: op.kind.attempt_no().filter(|n| *n > 1),
        }
    }
}

/// The `unknowns --json` output: one JSON object per line.
pub fn unknowns_json_lines(ops: &[Operation], now: Timestamp) -> String {
    ops.iter()
        .map(|op| {
            // Serializing a struct of strings and integers cannot fail.
            let mut line = serde_json::to_string(&UnknownLine::of(op, now))
                .unwrap_or_else(|e| format!("{{\"error\":{:?}}}", e.to_string()));
            line.push('\n');
            line
        })
        .collect()
}

const TABLE_HEADER: [&str; 9] = [
    "OPERATION",
    "ORDER",
    "KIND",
    "AMOUNT",
    "STATUS",
    "AGE",
    "ATTEMPTS",
    "LAST ERROR",
    "REVIEW REASON",
];

/// The `unknowns` table: a header and one aligned row per operation.
pub fn unknowns_table(ops: &[Operation], now: Timestamp) -> String {
    let rows: Vec<[String; 9]> = ops
        .iter()
        .map(|op| {
            [
                op.operation_id.to_string(),
                cell(op.order_id.as_str(), 128),
                kind_cell(op),
                money(op),
                op.status.to_string(),
                human_age(now.since(op.created_at)),
                op.attempts.to_string(),
                op.last_error
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), |e| cell(e, LAST_ERROR_WIDTH)),
                op.review
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |r| cell(&r.reason, REVIEW_REASON_WIDTH)),
            ]
        })
        .collect();
    aligned(TABLE_HEADER, &rows)
}

/// `charge`, `charge_attempt <n>` (an order's later attempt), `refund <refund id>`, or
/// `dispute <dispute id> <Stripe's status>`.
pub fn kind_cell(op: &Operation) -> String {
    if let (Some(id), Some(state)) = (op.kind.dispute_id(), op.params.dispute_state()) {
        return format!("dispute {} {}", cell(id.as_str(), 64), state.status);
    }
    if let Some(n) = op.kind.attempt_no().filter(|n| *n > 1) {
        return format!("charge_attempt {n}");
    }
    match op.kind.refund_id() {
        Some(id) => format!("refund {}", cell(id.as_str(), 64)),
        None => op.kind.as_str().to_owned(),
    }
}

/// One of the order's charge attempts as `show` lists them (`--json` `attempts`, the same
/// fields as `GET /orders/{id}/charge`'s): its number, operation, status, payment method, intent
/// and last error.
pub fn attempt_json(op: &Operation) -> serde_json::Value {
    serde_json::json!({
        "attempt": op.kind.attempt_no().unwrap_or(1),
        "operation_id": op.operation_id.to_string(),
        "status": op.status.as_str(),
        "payment_method": op.params.charge().map(|p| p.payment_method.as_str()),
        "payment_intent": op.external_id.as_deref(),
        "last_error": op.last_error.as_deref(),
    })
}

/// One attempt on one line of `show`'s text: `attempt 2  succeeded  pm_…  pi_…  <last error>`.
pub fn attempt_line(op: &Operation) -> String {
    format!(
        "attempt {}  {}  {}  {}  {}  operation {}",
        op.kind.attempt_no().unwrap_or(1),
        op.status,
        op.params
            .charge()
            .map_or("-", |p| p.payment_method.as_str()),
        op.external_id.as_deref().unwrap_or("-"),
        op.last_error
            .as_deref()
            .map_or_else(|| "-".to_owned(), |e| cell(e, LAST_ERROR_WIDTH)),
        op.operation_id,
    )
}

/// The attempt that paid the order (`succeeded`), if one did.
pub fn paid_attempt(attempts: &[Operation]) -> Option<u32> {
    attempts
        .iter()
        .find(|op| op.status == charge_core::operation::OperationStatus::Succeeded)
        .and_then(|op| op.kind.attempt_no())
}

/// Records `unknowns` could not read, after its table: the stored key and why, on one line each
/// (a parse error is short; it is what a person repairs by, so it is not cut short).
pub fn unreadable_table(records: &[UnreadableRecord]) -> String {
    let rows: Vec<[String; 2]> = records
        .iter()
        .map(|r| [cell(&r.key, 200), cell(&r.reason, 1000)])
        .collect();
    aligned(
        ["UNREADABLE RECORD", "WHY THIS RELEASE CANNOT READ IT"],
        &rows,
    )
}

/// The `unknowns --json` line of a record it could not read: the shape `show --json` prints for
/// one, without the item (`show` prints that).
pub fn unreadable_json_lines(records: &[UnreadableRecord]) -> String {
    records
        .iter()
        .map(|r| {
            let line = serde_json::json!({ "unreadable": true, "key": r.key, "reason": r.reason });
            format!("{line}\n")
        })
        .collect()
}

/// A header and rows as left-aligned columns two spaces apart, trailing spaces trimmed.
fn aligned<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let header = header.map(str::to_owned);
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, (c, w)) in row.iter().zip(widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(c);
            line.extend(std::iter::repeat_n(' ', w - c.chars().count()));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn time_or_dash(t: Option<Timestamp>) -> String {
    t.map_or_else(|| "-".to_owned(), |t| t.to_rfc3339())
}

/// The `show` record as aligned `field  value` lines, every field and the audit notes.
pub fn show_text(op: &Operation, now: Timestamp) -> String {
    let dash = |s: Option<&str>| s.unwrap_or("-").to_owned();
    let lease = match &op.lease {
        None => "-".to_owned(),
        Some(l) => format!(
            "token {}, expires {} ({})",
            l.token,
            l.expires_at.to_rfc3339(),
            if l.expires_at > now {
                "live: being executed now"
            } else {
                "expired"
            }
        ),
    };
    let review = match &op.review {
        None => "-".to_owned(),
        Some(r) => format!("{} (flagged {})", r.reason, r.flagged_at.to_rfc3339()),
    };
    // What only its kind has: a charge's customer and card, a refund's intent and reason.
    let what: [(&str, String); 2] = match &op.params {
        Params::Charge(p, _) => [
            ("customer", p.customer_id.as_str().to_owned()),
            ("payment method", p.payment_method.as_str().to_owned()),
        ],
        Params::Refund(p, _) => [
            ("refund of", p.payment_intent.as_str().to_owned()),
            ("reason", dash(p.reason.map(|r| r.as_str()))),
        ],
        Params::Capture(p) => [
            ("capture of", p.payment_intent.as_str().to_owned()),
            ("reason", "-".to_owned()),
        ],
        Params::Cancel(p) => [
            (
                "cancel of",
                dash(p.payment_intent.as_ref().map(|id| id.as_str())),
            ),
            ("reason", dash(p.cancellation_reason.map(|r| r.as_str()))),
        ],
        // Stripe's status beside ours: ours says whether the money moved, Stripe's where the
        // dispute stands.
        Params::Dispute(p, state) => [
            ("dispute of", p.payment_intent.as_str().to_owned()),
            (
                "reason",
                format!("{} (Stripe status {})", p.reason, state.status),
            ),
        ],
    };
    let mut fields: Vec<(&str, String)> = vec![
        ("operation", op.operation_id.to_string()),
        ("order", op.order_id.to_string()),
        ("kind", op.kind.as_str().to_owned()),
        ("status", op.status.to_string()),
        ("amount", money(op)),
        what[0].clone(),
        what[1].clone(),
        ("fingerprint", op.fingerprint.as_str().to_owned()),
        (
            "requested by",
            op.requested_by
                .as_ref()
                .map_or_else(|| NOT_RECORDED.to_owned(), ToString::to_string),
        ),
        ("idempotency key", op.idempotency_key().to_string()),
        ("payment intent", dash(op.external_id.as_deref())),
        (
            "stripe refund",
            dash(op.stripe_refund_id().map(|id| id.as_str())),
        ),
        ("attempts", op.attempts.to_string()),
        ("redrives", op.redrives.to_string()),
        (
            "created at",
            format!(
                "{} ({} ago)",
                op.created_at.to_rfc3339(),
                human_age(now.since(op.created_at))
            ),
        ),
        (
            "updated at",
            format!(
                "{} (version {}: pass --expect-version {} to resolve/redrive)",
                op.updated_at.to_rfc3339(),
                op.updated_at.as_millis(),
                op.updated_at.as_millis()
            ),
        ),
        ("first attempt", time_or_dash(op.first_attempted_at)),
        ("next due at", time_or_dash(op.next_due_at)),
        ("lease", lease),
        ("last error", dash(op.last_error.as_deref())),
        ("review", review),
        (
            "history",
            if op.history.is_empty() {
                "-".to_owned()
            } else {
                format!("{} operator action(s), oldest first:", op.history.len())
            },
        ),
    ];
    if op.is_manual_capture() {
        // An authorization's: when Stripe cancels it uncaptured, what was captured, who took it.
        let deadline = op.capture_before().map(|t| {
            let left = if t > now {
                t.since(now)
            } else {
                std::time::Duration::ZERO
            };
            format!("{} (in {})", t.to_rfc3339(), human_age(left))
        });
        let captured = op.amount_captured().map(|a| a.minor_units().to_string());
        let taker = op.taken_by().map(|t| t.to_string());
        // Before the history, which the entries follow.
        let at = fields.len() - 1;
        fields.splice(
            at..at,
            [
                ("capture before", dash(deadline.as_deref())),
                ("amount captured", dash(captured.as_deref())),
                ("taken by", dash(taker.as_deref())),
            ],
        );
    }
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out: String = fields
        .into_iter()
        .map(|(k, v)| format!("{k:<width$}  {v}\n"))
        .collect();
    for entry in &op.history {
        out.push_str(&format!("  {}\n", history_line(entry)));
    }
    out
}

/// One refund of a charge on one line: its refund id, status, amount, Stripe id and operation.
pub fn refund_line(op: &Operation) -> String {
    format!(
        "{}  {}  {}  {}  operation {}",
        op.kind.refund_id().map_or("-", |id| id.as_str()),
        op.status,
        money(op),
        op.stripe_refund_id().map(|id| id.as_str()).unwrap_or("-"),
        op.operation_id
    )
}

/// One dispute under its order's charge: Stripe's id and status beside ours (ours says whether
/// the money moved: `unknown` while open, `succeeded` lost, `failed` won or an inquiry closed),
/// the amount, the bank's reason, the evidence deadline, whether evidence is saved, and the
/// operation.
pub fn dispute_line(op: &Operation) -> String {
    let (params, state) = (op.params.dispute(), op.params.dispute_state());
    format!(
        "{}  {} (ours: {})  {}  {}  due_by {}  evidence {}  operation {}",
        op.kind.dispute_id().map_or("-", |id| id.as_str()),
        state.map_or("-", |s| s.status.as_str()),
        op.status,
        money(op),
        params.map_or("-", |p| p.reason.as_str()),
        state
            .and_then(|s| s.due_by)
            .map_or_else(|| "-".to_owned(), |t| t.to_rfc3339()),
        match state.map(|s| s.has_evidence) {
            Some(true) => "saved",
            _ => "none",
        },
        op.operation_id
    )
}

/// One history entry on one line: when, who, what, why.
pub fn history_line(e: &AuditEntry) -> String {
    let label = e
        .label
        .as_deref()
        .map(|l| format!(" ({})", cell(l, 60)))
        .unwrap_or_default();
    let forced = e
        .forced
        .as_deref()
        .map(|f| format!(" [FORCED: {}]", cell(f, 200)))
        .unwrap_or_default();
    let review = e
        .review
        .as_deref()
        .map(|r| format!(" [was in review: {}]", cell(r, 300)))
        .unwrap_or_default();
    let replaced = e
        .replaced_external_id
        .as_ref()
        .map(|id| format!(" [replaced PaymentIntent {id}]"))
        .unwrap_or_default();
    format!(
        "{} {}{label} {}: {} -> {}{replaced}{forced}{review}: {}",
        e.at.to_rfc3339(),
        e.caller,
        e.action,
        e.previous_status,
        e.new_status,
        cell(&e.note, 500)
    )
}

/// The `show --json` object: the record as it serializes, with every time also readable —
/// each time field holds its RFC 3339 string (the stored milliseconds are under `<field>_ms`).
pub fn show_json(op: &Operation) -> Result<Value, serde_json::Error> {
    let mut value = serde_json::to_value(op)?;
    let times: [(&[&str], Option<Timestamp>); 7] = [
        (&["created_at"], Some(op.created_at)),
        (&["updated_at"], Some(op.updated_at)),
        (&["first_attempted_at"], op.first_attempted_at),
        (&["next_due_at"], op.next_due_at),
        (&["capture_before"], op.capture_before()),
        (&["lease", "expires_at"], op.lease.map(|l| l.expires_at)),
        (
            &["review", "flagged_at"],
            op.review.as_ref().map(|r| r.flagged_at),
        ),
    ];
    for (path, time) in times {
        let Some(time) = time else { continue };
        let (field, parents) = path.split_last().expect("non-empty path");
        let mut obj = &mut value;
        for p in parents {
            obj = &mut obj[*p];
        }
        if let Value::Object(map) = obj {
            map.insert((*field).to_owned(), time.to_rfc3339().into());
            map.insert(format!("{field}_ms"), time.as_millis().into());
        }
    }
    if let Some(Value::Array(entries)) = value.get_mut("history") {
        for (entry, e) in entries.iter_mut().zip(&op.history) {
            if let Value::Object(map) = entry {
                map.insert("at".into(), e.at.to_rfc3339().into());
                map.insert("at_ms".into(), e.at.as_millis().into());
            }
        }
    }
    if let Value::Object(map) = &mut value {
        map.insert(
            "idempotency_key".into(),
            op.idempotency_key().to_string().into(),
        );
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use charge_core::operation::Review;
    use charge_core::operation::{AuditEntry, OperationStatus};

    use super::*;

    const NOW: Timestamp = Timestamp::from_millis(1_800_000_000_000);

    fn op(order: &str, age: Duration) -> Operation {
        charge_core::testing::order(order)
            .at(NOW.minus(age))
            .build()
    }

    #[test]
    fn ages_are_short_and_human() {
        assert_eq!(human_age(Duration::ZERO), "0s");
        assert_eq!(human_age(Duration::from_secs(45)), "45s");
        assert_eq!(human_age(Duration::from_secs(12 * 60 + 5)), "12m5s");
        assert_eq!(
            human_age(Duration::from_secs(3 * 3600 + 12 * 60 + 59)),
            "3h12m"
        );
        assert_eq!(
            human_age(Duration::from_secs(2 * 86_400 + 3 * 3600)),
            "2d3h"
        );
    }

    #[test]
    fn cells_are_one_line_and_truncated() {
        assert_eq!(cell("short", 40), "short");
        assert_eq!(cell("a\nb\tc", 40), "a b c");
        let long = "x".repeat(100);
        let cut = cell(&long, LAST_ERROR_WIDTH);
        assert_eq!(cut.chars().count(), LAST_ERROR_WIDTH);
        assert!(cut.ends_with('…'));
        // Multi-byte characters are never split.
        assert_eq!(cell("ééééé", 3), "éé…");
        // Nor words, where a space is near the end.
        assert_eq!(cell("outcome unknown: timed out", 20), "outcome unknown:…");
        assert_eq!(
            cell("outcome unknown: timed out", 26),
            "outcome unknown: timed out"
        );
    }

    #[test]
    fn table_has_the_columns_and_aligned_rows() {
        let mut a = op("order-a", Duration::from_secs(3 * 3600 + 12 * 60));
        a.last_error = Some(format!("timeout talking to Stripe {}", "z".repeat(80)));
        a.attempts = 2;
        let mut b = op("order-bb", Duration::from_secs(30));
        b.review = Some(Review {
            reason: "search found 0 matches".into(),
            flagged_at: NOW,
        });
        let table = unknowns_table(&[a.clone(), b.clone()], NOW);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        for h in TABLE_HEADER {
            assert!(lines[0].contains(h), "{h}");
        }
        assert!(lines[1].starts_with(&a.operation_id.to_string()));
        assert!(lines[1].contains("order-a"));
        assert!(lines[1].contains("1250 usd"));
        assert!(lines[1].contains("pending"));
        assert!(lines[1].contains("3h12m"));
        assert!(lines[1].contains("timeout talking to Stripe"));
        assert!(!lines[1].contains(&"z".repeat(41)), "last error truncated");
        assert!(lines[2].contains("search found 0 matches"));
        assert!(lines[2].contains("30s"));
        // Columns line up: the status column starts at the same place on every line.
        let col = lines[0].find("STATUS").unwrap();
        assert_eq!(&lines[1][col..col + 7], "pending");
        assert_eq!(&lines[2][col..col + 7], "pending");
    }

    #[test]
    fn json_lines_have_every_key() {
        let mut a = op("order-a", Duration::from_secs(7200));
        a.external_id = Some(charge_core::domain::PaymentIntentId::parse("pi_1").unwrap());
        let out = unknowns_json_lines(&[a.clone(), op("order-b", Duration::ZERO)], NOW);
        let lines: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        let first = lines[0].as_object().unwrap();
        for key in [
            "operation_id",
            "order_id",
            "amount",
            "currency",
            "status",
            "age_secs",
            "attempts",
            "last_error",
            "review_reason",
            "created_at",
            "next_due_at",
            "external_id",
            "redrives",
        ] {
            assert!(first.contains_key(key), "{key}");
        }
        assert_eq!(first["operation_id"], a.operation_id.to_string());
        assert_eq!(first["amount"], 1250);
        assert_eq!(first["currency"], "usd");
        assert_eq!(first["age_secs"], 7200);
        assert_eq!(
            first["created_at"],
            NOW.minus(Duration::from_secs(7200)).to_rfc3339()
        );
        assert_eq!(first["external_id"], "pi_1");
        assert_eq!(first["last_error"], Value::Null);
    }

    #[test]
    fn show_prints_every_field_and_the_audit_notes() {
        let mut a = op("order-a", Duration::from_secs(60));
        a.last_error = Some("stripe 500".into());
        a.review = Some(Review {
            reason: "search found 2 matches".into(),
            flagged_at: NOW.minus(Duration::from_secs(30)),
        });
        a.history = vec![AuditEntry {
            action: "resolve_succeeded".into(),
            previous_status: OperationStatus::Unknown,
            new_status: OperationStatus::Succeeded,
            note: "refunded the duplicate".into(),
            at: NOW,
            caller: "arn:aws:sts::123456789012:assumed-role/oncall/alice".into(),
            label: Some("alice".into()),
            forced: None,
            review: None,
            replaced_external_id: None,
        }];
        let text = show_text(&a, NOW);
        for needle in [
            a.operation_id.to_string().as_str(),
            "order-a",
            "1250 usd",
            "cus_1",
            "pm_card_visa",
            "payment-op:",
            "jwt:order-service",
            "stripe 500",
            "search found 2 matches",
            &NOW.minus(Duration::from_secs(30)).to_rfc3339(),
            "assumed-role/oncall/alice (alice) resolve_succeeded: unknown -> succeeded",
            "refunded the duplicate",
            &NOW.to_rfc3339(),
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }

        let json = show_json(&a).unwrap();
        assert_eq!(json["created_at"], a.created_at.to_rfc3339());
        assert_eq!(json["created_at_ms"], a.created_at.as_millis());
        assert_eq!(
            json["review"]["flagged_at"],
            NOW.minus(Duration::from_secs(30)).to_rfc3339()
        );
        assert_eq!(json["history"][0]["at"], NOW.to_rfc3339());
        assert_eq!(json["history"][0]["label"], "alice");
        assert_eq!(json["first_attempted_at"], Value::Null);
        assert_eq!(json["params"]["amount"], 1250);
        assert_eq!(json["status"], "pending");
        assert_eq!(json["requested_by"], "jwt:order-service");
    }

    /// `show --json` keeps the keys it always had, whatever kind holds the state: a charge's
    /// authorization and refunds and a refund's Stripe id sit on the record, 0 or null on a kind
    /// that holds none (other people's scripts read them).
    #[test]
    fn show_json_keeps_every_kind_s_state_keys_on_the_record() {
        use charge_core::charge::state::Taker;
        use charge_core::domain::{Amount, OperationId, OperationKind, RefundId, StripeRefundId};
        use charge_core::operation::Params;
        use charge_core::refund::request::RefundParams;
        use charge_core::refund::state::RefundState;
        let mut charge = op("ord-json", Duration::from_secs(5));
        let state = charge.params.charge_state_mut().unwrap();
        state.refund_reserved = 300;
        state.capture_before = Some(NOW);
        state.amount_captured = Some(Amount::new(900).unwrap());
        let taker = OperationId::new_random();
        state.taken_by = Some(Taker {
            capture: true,
            operation_id: taker,
        });
        let json = show_json(&charge).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = vec![
            "amount_captured",
            "attempts",
            "capture_before",
            "capture_before_ms",
            "created_at",
            "created_at_ms",
            "external_id",
            "fingerprint",
            "first_attempted_at",
            "history",
            "idempotency_key",
            "kind",
            "last_error",
            "lease",
            "next_due_at",
            "next_due_at_ms",
            "operation_id",
            "order_id",
            "params",
            "redrives",
            "refund_reserved",
            "requested_by",
            "review",
            "settled_at",
            "status",
            "stripe_refund_id",
            "taken_by",
            "updated_at",
            "updated_at_ms",
        ];
        expected.sort_unstable();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, expected);
        assert_eq!(json["refund_reserved"], 300);
        assert_eq!(json["capture_before"], NOW.to_rfc3339());
        assert_eq!(json["capture_before_ms"], NOW.as_millis());
        assert_eq!(json["amount_captured"], 900);
        assert_eq!(json["taken_by"], format!("capture:{taker}"));
        assert_eq!(json["stripe_refund_id"], Value::Null);
        assert_eq!(json["params"]["customer_id"], "cus_1");

        let mut refund = charge.clone();
        refund.kind = OperationKind::Refund(RefundId::parse("r-1").unwrap());
        refund.params = Params::Refund(
            RefundParams {
                amount: Amount::new(300).unwrap(),
                currency: charge.params.currency().clone(),
                payment_intent: charge_core::domain::PaymentIntentId::parse("pi_1").unwrap(),
                reason: None,
                charge_attempt: 1,
            },
            RefundState {
                stripe_refund_id: Some(StripeRefundId::parse("re_1").unwrap()),
            },
        );
        let json = show_json(&refund).unwrap();
        assert_eq!(json["stripe_refund_id"], "re_1");
        assert_eq!(json["refund_reserved"], 0);
        for none in ["capture_before", "amount_captured", "taken_by"] {
            assert_eq!(json[none], Value::Null, "{none}");
        }
        assert!(json.get("capture_before_ms").is_none());
        assert_eq!(json["params"]["payment_intent"], "pi_1");
        assert_eq!(json["params"]["amount"], 300);
    }
}
