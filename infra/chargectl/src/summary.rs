//! `chargectl summary`: the operator's picture in a terminal, from what the table holds and the
//! dead-letter queues say. Unsettled operations per kind and the oldest one's age against the
//! 23 h key window, those waiting for a person, authorizations close to their capture deadline
//! and operations unsettled past the key window (judged by the audit's own rules, over the
//! unknown index as it is now), records this release cannot read, the latest audit's drift per
//! class and settle times per kind, and the depth of each dead-letter queue given. Stripe's
//! budget used and the 429s met are metrics only: the dashboard draws them.
//!
//! It reads; it changes nothing.

use std::collections::BTreeMap;

use async_trait::async_trait;
use charge_core::audit::{judge, AuditPolicy, AuditReport, AuditWindow, DriftClass, Evidence};
use charge_core::operation::Operation;
use charge_core::plan::Policy;
use charge_core::time::Clock;
use charge_once::ports::{AuditLog, IndexQuery, OperationStore};
use serde_json::{json, Value};

use crate::commands::{Console, Failure, INDEX_PAGE};

/// How many messages wait in a queue (SQS `ApproximateNumberOfMessages`).
#[async_trait]
pub trait QueueDepth: Send + Sync {
    async fn depth(&self, queue_url: &str)
        -> Result<u64, Box<dyn std::error::Error + Send + Sync>>;
}

/// What `summary` reads.
pub struct SummaryDeps<'a> {
    pub store: &'a dyn OperationStore,
    pub log: &'a dyn AuditLog,
    pub queues: &'a dyn QueueDepth,
    pub clock: &'a dyn Clock,
}

/// Every unsettled operation of `query`, all pages, and how many could not be read.
async fn all_of(
    store: &dyn OperationStore,
    query: IndexQuery,
) -> Result<(Vec<Operation>, u64), Failure> {
    let (mut ops, mut unreadable, mut cursor) = (Vec::new(), 0, None);
    loop {
        let page = store
            .query_index(query, cursor.take(), INDEX_PAGE)
            .await
            .map_err(|e| Failure::infra("reading the unknown index", e))?;
        ops.extend(page.operations);
        unreadable += page.unreadable.len() as u64;
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok((ops, unreadable)),
        }
    }
}

/// The picture as one JSON object (what `--json` prints; the text is drawn from it).
pub async fn picture(
    deps: &SummaryDeps<'_>,
    dead_letter_queues: &[String],
) -> Result<Value, Failure> {
    let now = deps.clock.now();
    let (mut unsettled, unreadable_open) = all_of(deps.store, IndexQuery::Unsettled).await?;
    let (review, unreadable_review) = all_of(deps.store, IndexQuery::InReview).await?;
    let oldest_review = review
        .iter()
        .map(|op| now.since(op.created_at).as_secs())
        .max()
        .unwrap_or(0);
    let in_review = review.len() as u64;
    unsettled.extend(review);
    // The audit's own rules over the index as it is now: no Stripe object, no settled record,
    // only the watch classes and the per-kind picture.
    let policy = Policy::default();
    let policy = AuditPolicy {
        key_window: policy.key_window,
        page_lead: policy.authorization_page_lead,
        // No Stripe object is read here.
        refund_recheck: std::time::Duration::ZERO,
    };
    let evidence = Evidence {
        unsettled,
        ..Evidence::empty(AuditWindow { from: now, to: now }, now, false)
    };
    let judged = judge(&evidence, &policy);
    let open: BTreeMap<&str, Value> = judged
        .unsettled
        .iter()
        .map(|(kind, k)| {
            (
                kind.as_str(),
                json!({"count": k.count, "oldest_age_secs": k.oldest_age_secs, "in_review": k.in_review}),
            )
        })
        .collect();
    let count = |c: DriftClass| judged.by_class.get(&c).copied().unwrap_or(0);
    let latest = deps
        .log
        .latest_reports(1)
        .await
        .map_err(|e| Failure::infra("reading the latest audit report", e))?;
    let mut queues = BTreeMap::new();
    for url in dead_letter_queues {
        let depth = deps
            .queues
            .depth(url)
            .await
            .map_err(|e| Failure::infra(format!("reading the depth of {url}"), e))?;
        queues.insert(url.clone(), depth);
    }
    Ok(json!({
        "at": now.to_rfc3339(),
        "key_window_secs": policy.key_window.as_secs(),
        "unsettled": open,
        "in_review": {"count": in_review, "oldest_age_secs": oldest_review},
        "authorizations_near_deadline": count(DriftClass::AuthorizationNearDeadline),
        "unsettled_past_key_window": count(DriftClass::UnsettledPastKeyWindow),
        "unreadable": unreadable_open + unreadable_review,
        "latest_audit": latest.reports.first().map(audit_json),
        "dead_letter_queues": queues,
    }))
}

fn audit_json(r: &AuditReport) -> Value {
    json!({
        "window_from": r.window.from.to_rfc3339(),
        "window_to": r.window.to.to_rfc3339(),
        "ran_at": r.ran_at.to_rfc3339(),
        "complete": r.complete,
        "drift": r.drift(),
        "by_class": r.by_class.iter().map(|(c, n)| (c.as_str(), *n)).collect::<BTreeMap<_, _>>(),
        "settle_times": r.settle_times,
    })
}

/// `chargectl summary [--json] [--dead-letter-queue URL]…`.
pub async fn run(
    deps: &SummaryDeps<'_>,
    dead_letter_queues: &[String],
    json: bool,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    let p = picture(deps, dead_letter_queues).await?;
    if json {
        writeln!(console.out, "{p}")?;
        return Ok(());
    }
    let out = &mut console.out;
    let hours = |secs: &Value| format!("{:.1} h", secs.as_f64().unwrap_or(0.0) / 3600.0);
    writeln!(out, "charge-once at {}", p["at"].as_str().unwrap_or(""))?;
    writeln!(
        out,
        "unsettled (key window {})",
        hours(&p["key_window_secs"])
    )?;
    let open = p["unsettled"].as_object().cloned().unwrap_or_default();
    if open.is_empty() {
        writeln!(out, "  none")?;
    }
    for (kind, k) in &open {
        writeln!(
            out,
            "  {kind:<8} {:>6}  oldest {:>8}  in review {}",
            k["count"].as_u64().unwrap_or(0),
            hours(&k["oldest_age_secs"]),
            k["in_review"]
        )?;
    }
    writeln!(
        out,
        "in review  {:>6}  oldest {:>8}",
        p["in_review"]["count"].as_u64().unwrap_or(0),
        hours(&p["in_review"]["oldest_age_secs"])
    )?;
    writeln!(
        out,
        "authorizations near their deadline {}   unsettled past the key window {}   unreadable records {}",
        p["authorizations_near_deadline"], p["unsettled_past_key_window"], p["unreadable"]
    )?;
    match p["latest_audit"].as_object() {
        None => writeln!(
            out,
            "latest audit  none kept yet (chargectl audit --since 24h)"
        )?,
        Some(a) => {
            writeln!(
                out,
                "latest audit  {} .. {}  drift {}{}",
                a["window_from"].as_str().unwrap_or(""),
                a["window_to"].as_str().unwrap_or(""),
                a["drift"],
                if a["complete"] == json!(true) {
                    ""
                } else {
                    "  (incomplete: not vouched for)"
                }
            )?;
            let classes: Vec<String> = a["by_class"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(_, n)| n.as_u64() != Some(0))
                .map(|(c, n)| format!("{c} {n}"))
                .collect();
            if !classes.is_empty() {
                writeln!(out, "  findings: {}", classes.join(", "))?;
            }
            for (kind, t) in a["settle_times"].as_object().into_iter().flatten() {
                writeln!(
                    out,
                    "  settle time {kind:<8} p50 {:>8}  p99 {:>8}  ({} settled)",
                    hours(&t["p50_secs"]),
                    hours(&t["p99_secs"]),
                    t["count"]
                )?;
            }
        }
    }
    for (url, depth) in p["dead_letter_queues"].as_object().into_iter().flatten() {
        writeln!(
            out,
            "dead letters {:>6}  {url}",
            depth.as_u64().unwrap_or(0)
        )?;
    }
    writeln!(
        out,
        "Stripe requests and 429s: the dashboard ({{stack}}-operator), metrics StripeRequests and StripeRateLimited"
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use charge_core::testing::order;
    use charge_core::{
        operation::OperationStatus,
        time::{ManualClock, Timestamp},
    };
    use charge_once::memory::MemoryStore;

    use super::*;

    struct Depths;

    #[async_trait]
    impl QueueDepth for Depths {
        async fn depth(
            &self,
            queue_url: &str,
        ) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
            match queue_url {
                "https://dlq" => Ok(3),
                _ => Err("no such queue".into()),
            }
        }
    }

    const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

    /// The picture of a table with two unsettled charges (one 30 h old: past the key window)
    /// and a dead-letter queue of 3; a clean table in the same setup shows nothing open.
    #[tokio::test]
    async fn the_picture_counts_what_is_open_and_past_the_key_window() {
        let store = MemoryStore::new();
        let clock = ManualClock::new(T0);
        let deps = SummaryDeps {
            store: &store,
            log: &store,
            queues: &Depths,
            clock: &clock,
        };
        let clean = picture(&deps, &[]).await.unwrap();
        assert_eq!(clean["unsettled"], json!({}));
        assert_eq!(clean["unsettled_past_key_window"], 0);
        assert_eq!(clean["latest_audit"], Value::Null);

        for (id, age_h) in [("ord-young", 1u64), ("ord-old", 30)] {
            let mut op = order(id).status(OperationStatus::Unknown).build();
            op.created_at = T0.minus(Duration::from_secs(age_h * 3600));
            op.next_due_at = Some(T0);
            store.put_for_tests(op);
        }
        let p = picture(&deps, &["https://dlq".to_owned()]).await.unwrap();
        assert_eq!(p["unsettled"]["charge"]["count"], 2);
        assert_eq!(p["unsettled"]["charge"]["oldest_age_secs"], 30 * 3600);
        assert_eq!(p["unsettled_past_key_window"], 1);
        assert_eq!(p["dead_letter_queues"]["https://dlq"], 3);
        // A queue that cannot be read fails the command with its URL; nothing is guessed.
        let e = picture(&deps, &["https://gone".to_owned()])
            .await
            .unwrap_err();
        assert!(e.to_string().contains("https://gone"), "{e}");
        let mut out = Vec::new();
        let mut err = Vec::new();
        let mut console = Console {
            out: &mut out,
            err: &mut err,
        };
        run(&deps, &["https://dlq".to_owned()], false, &mut console)
            .await
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("unsettled past the key window 1"), "{text}");
        assert!(text.contains("dead letters      3  https://dlq"), "{text}");
        assert!(
            text.contains("  charge        2  oldest   30.0 h"),
            "{text}"
        );
    }
}
