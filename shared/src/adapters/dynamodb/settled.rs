//! The settled index (`settled-by-day`) read over a window: what the drift audit matches to
//! Stripe. A window's records are those whose `settled_at` is in `[from, to)`; the index is
//! partitioned by UTC day, so the read is one Query per day the window touches, the days in
//! order (oldest settle first across the window), each Query paged by the index's own
//! `LastEvaluatedKey`. The entries are keys only: their records are read from the table as the
//! unknown index's are (one BatchGetItem per 100), and one this release cannot read is set aside
//! in [`Page::unreadable`], never failing the page.
//!
//! Cursor: `{"day": <n>, "after": <position or null>}` as JSON, opaque to callers: the day of the
//! window being read (its number, from 0) and the last entry taken there. It is only good for the
//! window it was made for.

use std::collections::HashMap;

use charge_core::audit::AuditWindow;
use charge_core::time::Timestamp;
use serde::{Deserialize, Serialize};

use super::item::{self, attr_n, attr_s};
use super::paging::IndexPosition;
use super::schema::{settled_day, SETTLED_KEYS};
use super::DynamoStore;
use crate::ports::{Page, StoreError};

const DAY_MS: i64 = 86_400_000;

/// The sort key of every refund record (`refund#<refund_id>`,
/// [`charge_core::domain::OperationKind::sort_key`]).
const REFUND_SORT_KEY_PREFIX: &str = "refund#";

/// The settled index's partitions (UTC days) that `[from, to)` touches, oldest first; none for an
/// empty window.
pub(super) fn window_days(window: &AuditWindow) -> Vec<String> {
    let (from, to) = (window.from.as_millis(), window.to.as_millis());
    if to <= from {
        return Vec::new();
    }
    (from.div_euclid(DAY_MS)..=(to - 1).div_euclid(DAY_MS))
        .map(|d| settled_day(Timestamp::from_millis(d * DAY_MS)))
        .collect()
}

/// Where a read of a window's days stands (see the module doc).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(super) struct DayCursor {
    day: usize,
    after: Option<IndexPosition>,
}

impl DayCursor {
    /// The cursor a caller passed back (`None`: from the start) for a read over `days` days.
    pub fn decode(raw: Option<&str>, days: usize) -> Result<Self, StoreError> {
        match raw {
            None => Ok(Self::default()),
            Some(raw) => serde_json::from_str::<Self>(raw)
                .ok()
                .filter(|c| c.day < days)
                .ok_or_else(|| StoreError::new("malformed page cursor")),
        }
    }

    /// What to hand back: `None` once every day is read.
    pub fn encode(&self, days: usize) -> Result<Option<String>, StoreError> {
        if self.day >= days {
            return Ok(None);
        }
        serde_json::to_string(self)
            .map(Some)
            .map_err(|e| StoreError::with_source("cannot encode page cursor", e))
    }
}

impl DynamoStore {
    /// One page of the records settled in `window` (see the module doc); with `only_refunds`,
    /// the index entries of other kinds are passed over before any record is read (the entry's
    /// sort key is the kind: `refund#<id>`), so a page may hold fewer records than `limit`.
    pub(super) async fn settled_page(
        &self,
        window: &AuditWindow,
        cursor: Option<String>,
        limit: usize,
        only_refunds: bool,
    ) -> Result<Page, StoreError> {
        let limit = limit.clamp(1, 1000);
        let days = window_days(window);
        let mut cursor = DayCursor::decode(cursor.as_deref(), days.len())?;
        let mut entries: Vec<(String, IndexPosition)> = Vec::new();
        while entries.len() < limit && cursor.day < days.len() {
            let day = &days[cursor.day];
            let (read, complete) = self
                .query_day(day, window, cursor.after.as_ref(), limit - entries.len())
                .await?;
            if let Some(last) = read.last() {
                cursor.after = Some(last.clone());
            }
            entries.extend(read.into_iter().map(|p| (day.clone(), p)));
            if complete {
                cursor = DayCursor {
                    day: cursor.day + 1,
                    after: None,
                };
            }
        }
        let next = cursor.encode(days.len())?;
        if only_refunds {
            entries.retain(|(_, p)| p.sk.starts_with(REFUND_SORT_KEY_PREFIX));
        }
        let (operations, unreadable) = self.records_of(SETTLED_KEYS, &entries).await?;
        Ok(Page {
            operations,
            unreadable,
            next,
        })
    }

    /// Up to `limit` entries of day `day` settled in `window`, after `after`, oldest first; and
    /// whether the day has nothing after them.
    async fn query_day(
        &self,
        day: &str,
        window: &AuditWindow,
        after: Option<&IndexPosition>,
        limit: usize,
    ) -> Result<(Vec<IndexPosition>, bool), StoreError> {
        let values = HashMap::from([
            (":day".to_owned(), attr_s(day)),
            (":from".to_owned(), attr_n(window.from.as_millis())),
            // BETWEEN is inclusive; the window's end is not in it.
            (":last".to_owned(), attr_n(window.to.as_millis() - 1)),
        ]);
        self.calls.query();
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(SETTLED_KEYS.name)
            .key_condition_expression("settled_on = :day AND settled_at BETWEEN :from AND :last")
            .set_expression_attribute_values(Some(values))
            .scan_index_forward(true)
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .set_exclusive_start_key(after.map(|p| item::index_start_key(SETTLED_KEYS, day, p)))
            .send()
            .await
            .map_err(|e| self.sdk_error("Query settled index", e))?;
        let entries = out
            .items()
            .iter()
            .map(|e| item::index_position(SETTLED_KEYS, e))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((entries, out.last_evaluated_key().is_none()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(from: i64, to: i64) -> AuditWindow {
        AuditWindow {
            from: Timestamp::from_millis(from),
            to: Timestamp::from_millis(to),
        }
    }

    // 2026-12-04T00:00:00Z.
    const DEC4: i64 = 1_796_342_400_000;

    #[test]
    fn a_window_reads_the_days_it_touches() {
        // A whole day: that day only (its end is the next midnight, not in it).
        assert_eq!(window_days(&window(DEC4, DEC4 + DAY_MS)), ["2026-12-04"]);
        // Across midnight: both days.
        assert_eq!(
            window_days(&window(DEC4 - 1, DEC4 + 1)),
            ["2026-12-03", "2026-12-04"]
        );
        // Empty or backwards: none.
        assert!(window_days(&window(DEC4, DEC4)).is_empty());
        assert!(window_days(&window(DEC4, DEC4 - 1)).is_empty());
    }

    #[test]
    fn cursors_round_trip_and_malformed_ones_are_refused() {
        let c = DayCursor {
            day: 1,
            after: Some(IndexPosition {
                pk: "ORDER#a".into(),
                sk: "charge".into(),
                due: DEC4,
            }),
        };
        let raw = c.encode(2).unwrap().expect("a day left");
        assert_eq!(DayCursor::decode(Some(&raw), 2).unwrap(), c);
        assert_eq!(c.encode(1).unwrap(), None, "past the last day: done");
        assert!(
            DayCursor::decode(Some(&raw), 1).is_err(),
            "not this window's"
        );
        assert!(DayCursor::decode(Some("not json"), 2).is_err());
        assert_eq!(DayCursor::decode(None, 0).unwrap(), DayCursor::default());
    }
}
