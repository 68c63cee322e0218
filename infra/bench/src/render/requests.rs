//! Sections 1 and 2 of BENCHMARKS.md (requests per operation on the wire, ours and the seed's)
//! from `wire.json`, and section 6 (reconciler reads) from `index.json`.

use crate::index_cost::{IndexRow, PAGE_SIZE};
use crate::markdown::{rows_string, thousands, Template};
use crate::records::WireRow;
use crate::template;
use crate::wire::counter::WireTally;
use crate::wire::scenarios::StripeCounts;

type Error = Box<dyn std::error::Error + Send + Sync>;

const REQUESTS: Template = template!("1-requests.md");
const READS: Template = template!("6-reads.md");

pub(crate) fn by_op(t: &WireTally) -> String {
    if t.requests.is_empty() {
        return "—".into();
    }
    t.requests
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn stripe_str(s: &StripeCounts) -> String {
    let parts: Vec<String> = [
        ("create", s.create),
        ("retrieve", s.retrieve),
        ("search", s.search),
        ("refund", s.refund),
        ("refund read", s.refund_read),
        ("capture", s.capture),
        ("cancel", s.cancel),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(k, n)| format!("{k} {n}"))
    .collect();
    if parts.is_empty() {
        "0".into()
    } else {
        format!("{} ({})", s.total(), parts.join(", "))
    }
}

fn ratio(a: u64, b: u64) -> String {
    match (a, b) {
        (0, 0) => "— (0 / 0)".into(),
        (_, 0) => format!("∞ ({a} / 0)"),
        _ => format!("{:.2} ({a} / {b})", a as f64 / b as f64),
    }
}

fn counts_table(rows: &[WireRow]) -> String {
    rows_string(rows.iter().map(|r| {
        let o = &r.ours;
        vec![
            r.label.clone(),
            by_op(&o.dynamodb),
            format!("{} / {}", o.dynamodb_reads(), o.dynamodb_writes()),
            by_op(&o.sqs),
            by_op(&o.source),
            stripe_str(&o.stripe),
        ]
    }))
}

/// The rows the seed's port has too (it has no refunds).
fn ratios_table(rows: &[WireRow]) -> String {
    rows_string(
        rows.iter()
            .filter_map(|r| Some((r, r.seed.as_ref()?)))
            .map(|(r, s)| {
                let o = &r.ours;
                vec![
                    r.label.clone(),
                    by_op(&s.dynamodb),
                    ratio(o.dynamodb.total(), s.dynamodb.total()),
                    ratio(o.sqs.total(), s.sqs.total()),
                    ratio(o.stripe.total(), s.stripe.total()),
                ]
            }),
    )
}

/// Sections 1 and 2 from `wire.json`'s rows.
pub fn requests(rows: &[WireRow]) -> Result<String, Error> {
    REQUESTS.fill(
        "main",
        &[
            ("counts", counts_table(rows)),
            ("ratios", ratios_table(rows)),
        ],
    )
}

/// Section 6 from `index.json`'s rows.
pub fn reads(mut index: Vec<IndexRow>) -> Result<String, Error> {
    index.sort_by_key(|r| (r.unsettled, r.settled));
    let table = rows_string(index.iter().map(|r| {
        vec![
            r.settled.to_string(),
            r.unsettled.to_string(),
            r.pages.to_string(),
            r.queries.to_string(),
            r.batch_gets.to_string(),
            r.items_read.to_string(),
            format!("{:.1}", r.read_units),
            r.scan_requests.to_string(),
            format!("{:.1}", r.scan_read_units),
        ]
    }));
    READS.fill(
        "main",
        &[("page_size", thousands(PAGE_SIZE as u64)), ("reads", table)],
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::wire::scenarios::Counts;

    #[test]
    fn a_wire_row_reads_back_as_written() {
        let tally = |ops: &[(&str, u64)]| WireTally {
            requests: ops
                .iter()
                .map(|(k, n)| ((*k).to_owned(), *n))
                .collect::<BTreeMap<_, _>>(),
            read_units: 1.5,
            read_bytes: 660,
            read_items: 2,
        };
        let counts = Counts {
            dynamodb: tally(&[("PutItem", 1), ("UpdateItem", 2)]),
            sqs: tally(&[("SendMessage", 1)]),
            source: tally(&[("ReceiveMessage", 1), ("DeleteMessage", 1)]),
            stripe: StripeCounts {
                create: 1,
                retrieve: 0,
                search: 2,
                ..StripeCounts::default()
            },
        };
        let row = WireRow {
            scenario: "HappyPath".into(),
            label: "happy path".into(),
            ours: counts.clone(),
            seed: Some(Counts::default()),
        };
        let json = serde_json::to_value(&row).unwrap();
        assert_eq!(
            json["ours"]["event_source_sqs"]["requests"]["ReceiveMessage"],
            1
        );
        let back: WireRow = serde_json::from_value(json).unwrap();
        assert_eq!(back.ours, counts);
        assert_eq!(back.seed, Some(Counts::default()));
        assert_eq!(stripe_str(&back.ours.stripe), "3 (create 1, search 2)");
        assert_eq!(by_op(&back.ours.dynamodb), "PutItem 1, UpdateItem 2");
        assert_eq!(by_op(&back.seed.unwrap().dynamodb), "—");
    }
}
