//! The unknown index read over several partitions (shards) as one paged read, oldest due first: a
//! pure k-way merge. The adapter queries each unfinished shard after the cursor's position there
//! and hands the pages to [`merge`], which picks the page and the next cursor. No SDK call happens
//! here, so the merge is tested on its own (below), not only through a DynamoDB server.
//!
//! Order: by due time; ties by shard, then in the order the shard's Query returned them. The index
//! sorts a partition by `due_at` only, so the index's own order is the one order a shard's ties are
//! known to come in; taking them in it means what a page takes from a shard is always a prefix of
//! what was read from it, and the cursor can resume the shard after the last entry taken.

use serde::{Deserialize, Serialize};

use crate::ports::StoreError;

/// Where an index entry sits: its table keys and its due time (the index's sort key).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(super) struct IndexPosition {
    pub pk: String,
    pub sk: String,
    pub due: i64,
}

/// A paged read over several shards: per shard, not started (`None` in `after`, `false` in
/// `done`), after an entry, or finished. Opaque to callers (JSON in [`crate::ports::Page::next`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(super) struct IndexCursor {
    after: Vec<Option<IndexPosition>>,
    done: Vec<bool>,
}

impl IndexCursor {
    /// The cursor a caller passed back (`None`: from the start) for a read over `shards` shards.
    pub fn decode(raw: Option<&str>, shards: usize) -> Result<Self, StoreError> {
        match raw {
            None => Ok(Self {
                after: vec![None; shards],
                done: vec![false; shards],
            }),
            Some(raw) => serde_json::from_str::<Self>(raw)
                .ok()
                .filter(|c| c.after.len() == shards && c.done.len() == shards)
                .ok_or_else(|| StoreError::new("malformed page cursor")),
        }
    }

    /// What to hand back to the caller: `None` once every shard is finished.
    pub fn encode(&self) -> Result<Option<String>, StoreError> {
        if self.done.iter().all(|d| *d) {
            return Ok(None);
        }
        serde_json::to_string(self)
            .map(Some)
            .map_err(|e| StoreError::with_source("cannot encode page cursor", e))
    }

    /// The shards still to read, each with the entry to read after (`None`: from its start).
    pub fn unfinished(&self) -> impl Iterator<Item = (usize, Option<&IndexPosition>)> {
        self.after
            .iter()
            .zip(&self.done)
            .enumerate()
            .filter(|(_, (_, done))| !**done)
            .map(|(i, (after, _))| (i, after.as_ref()))
    }
}

/// What one Query of a shard returned: entries in the index's order, and whether the shard has
/// nothing after them (no `LastEvaluatedKey`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ShardPage {
    pub entries: Vec<IndexPosition>,
    pub complete: bool,
}

impl ShardPage {
    /// The page of a shard that is not read (finished before this page).
    pub fn finished() -> Self {
        Self {
            entries: Vec::new(),
            complete: true,
        }
    }
}

/// One merged page: the entries taken, each with its shard's number, and the cursor after them.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Merged {
    pub entries: Vec<(usize, IndexPosition)>,
    pub next: IndexCursor,
}

/// Merges one page of each shard (`pages[i]` read after `cursor`'s position in shard `i`;
/// [`ShardPage::finished`] for a shard the cursor has finished) into at most `limit` entries.
///
/// Takes the oldest entries read, but none later than the last due time of a shard that has more:
/// its unread entries could sort before them. (A Query with `Limit` returns full pages, and then
/// that bound never cuts the page; it matters for a page cut short, as by DynamoDB's 1 MB.) So
/// oldest-due-first holds across pages too, and per shard the cursor moves to the last entry
/// taken: nothing is skipped or repeated. A shard is finished once its Query said it has no more
/// and every entry it returned was taken. (An empty page that says "more" bounds nothing: a Query
/// with only a key condition does not return one.)
pub(super) fn merge(cursor: IndexCursor, pages: Vec<ShardPage>, limit: usize) -> Merged {
    assert_eq!(pages.len(), cursor.after.len(), "one page per shard");
    let bound = pages
        .iter()
        .filter(|p| !p.complete)
        .filter_map(|p| p.entries.last().map(|e| e.due))
        .min();
    let read: Vec<usize> = pages.iter().map(|p| p.entries.len()).collect();
    let complete: Vec<bool> = pages.iter().map(|p| p.complete).collect();
    let mut candidates: Vec<(usize, IndexPosition)> = pages
        .into_iter()
        .enumerate()
        .flat_map(|(i, p)| p.entries.into_iter().map(move |e| (i, e)))
        .collect();
    // Stable: ties in shard order, then in each shard's own order.
    candidates.sort_by_key(|(i, e)| (e.due, *i));
    let entries: Vec<(usize, IndexPosition)> = candidates
        .into_iter()
        .take_while(|(_, e)| bound.is_none_or(|b| e.due <= b))
        .take(limit)
        .collect();
    let mut next = cursor;
    let mut taken = vec![0usize; read.len()];
    for (i, entry) in &entries {
        taken[*i] += 1;
        next.after[*i] = Some(entry.clone());
    }
    for i in 0..read.len() {
        if complete[i] && taken[i] == read[i] {
            next.done[i] = true;
        }
    }
    Merged { entries, next }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(shard: usize, n: usize, due: i64) -> IndexPosition {
        IndexPosition {
            pk: format!("ORDER#s{shard}-{n}"),
            sk: "charge".into(),
            due,
        }
    }

    fn page(complete: bool, entries: Vec<IndexPosition>) -> ShardPage {
        ShardPage { entries, complete }
    }

    fn start(shards: usize) -> IndexCursor {
        IndexCursor::decode(None, shards).unwrap()
    }

    #[test]
    fn takes_the_oldest_across_shards_ties_in_shard_order() {
        let (a, b, c) = (at(0, 0, 5), at(0, 1, 9), at(1, 0, 5));
        let d = at(2, 0, 1);
        let pages = vec![
            page(true, vec![a.clone(), b.clone()]),
            page(true, vec![c.clone()]),
            page(true, vec![d.clone()]),
        ];
        let m = merge(start(3), pages, 3);
        assert_eq!(
            m.entries,
            vec![(2, d.clone()), (0, a.clone()), (1, c.clone())]
        );
        // Shard 0 still has `b`; shards 1 and 2 gave all they had.
        assert_eq!(m.next.after, vec![Some(a), Some(c), Some(d)]);
        assert_eq!(m.next.done, vec![false, true, true]);
        assert_eq!(m.next.unfinished().map(|(i, _)| i).collect::<Vec<_>>(), [0]);
        let raw = m.next.encode().unwrap().expect("more to read");
        assert_eq!(IndexCursor::decode(Some(&raw), 3).unwrap(), m.next);

        let pages = vec![
            page(true, vec![b.clone()]),
            ShardPage::finished(),
            ShardPage::finished(),
        ];
        let last = merge(m.next, pages, 3);
        assert_eq!(last.entries, vec![(0, b)]);
        assert_eq!(last.next.encode().unwrap(), None);
    }

    #[test]
    fn a_shard_with_more_is_not_finished_even_when_all_of_its_page_is_taken() {
        let e = at(0, 0, 1);
        let m = merge(start(1), vec![page(false, vec![e.clone()])], 10);
        assert_eq!(m.entries, vec![(0, e.clone())]);
        assert_eq!(m.next.done, vec![false]);
        assert_eq!(m.next.unfinished().collect::<Vec<_>>(), [(0, Some(&e))]);
    }

    #[test]
    fn a_finished_shard_whose_page_was_cut_by_the_limit_is_read_again() {
        let (a, b) = (at(0, 0, 1), at(0, 1, 2));
        let m = merge(start(1), vec![page(true, vec![a.clone(), b])], 1);
        assert_eq!(m.entries, vec![(0, a)]);
        assert_eq!(m.next.done, vec![false]);
    }

    #[test]
    fn a_short_page_of_a_shard_with_more_bounds_the_merge() {
        // Shard 0 returned one entry but has more (due 2, unread); shard 1's due 5 and 6 must wait.
        let a = at(0, 0, 1);
        let pages = vec![
            page(false, vec![a.clone()]),
            page(true, vec![at(1, 0, 5), at(1, 1, 6)]),
        ];
        let m = merge(start(2), pages, 3);
        assert_eq!(m.entries, vec![(0, a.clone())]);
        assert_eq!(m.next.after, vec![Some(a), None]);
        assert_eq!(m.next.done, vec![false, false]);
    }

    #[test]
    fn an_empty_read_finishes_every_shard() {
        let m = merge(start(2), vec![page(true, vec![]), page(true, vec![])], 5);
        assert!(m.entries.is_empty());
        assert_eq!(m.next.encode().unwrap(), None);
    }

    #[test]
    fn malformed_cursors_are_refused() {
        let raw = start(3).encode().unwrap().unwrap();
        assert!(IndexCursor::decode(Some(&raw), 3).is_ok());
        assert!(IndexCursor::decode(Some(&raw), 2).is_err());
        assert!(IndexCursor::decode(Some("not json"), 3).is_err());
        assert!(IndexCursor::decode(Some("7|ord-1"), 3).is_err());
    }

    /// SplitMix64: a seeded, dependency-free source of cases.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        /// Uniform in `lo..=hi`.
        fn range(&mut self, lo: usize, hi: usize) -> usize {
            lo + (self.next() % (hi - lo + 1) as u64) as usize
        }
    }

    /// A shard's Query after `after`, at most `limit` entries: full pages mostly, pages cut short
    /// (as by the 1 MB limit) sometimes, and "has more" said of a page that took the last entry
    /// (as DynamoDB says when a page ends at `Limit`).
    fn query(
        rng: &mut Rng,
        shard: &[IndexPosition],
        after: Option<&IndexPosition>,
        limit: usize,
    ) -> ShardPage {
        let from = after.map_or(0, |a| {
            1 + shard
                .iter()
                .position(|e| e == a)
                .expect("the cursor names an entry of this shard")
        });
        let rest = &shard[from..];
        if rest.is_empty() {
            return page(true, vec![]);
        }
        let full = limit.min(rest.len());
        let n = if rng.range(0, 2) == 0 {
            rng.range(1, full)
        } else {
            full
        };
        let complete = n == rest.len() && rng.range(0, 3) != 0;
        page(complete, rest[..n].to_vec())
    }

    /// Pages through random shards with random page sizes; every case checks that each page is
    /// ordered and within its limit, that due order holds across pages, and that every entry comes
    /// exactly once, in its shard's order (so only entries after the cursor are returned).
    #[test]
    fn paging_through_returns_every_entry_once_oldest_first() {
        const CASES: u64 = 5_000;
        for case in 0..CASES {
            let mut rng = Rng(0x5eed_0000 + case);
            let shards: Vec<Vec<IndexPosition>> = (0..rng.range(1, 9))
                .map(|s| {
                    let max_due = rng.range(0, 12) as i64;
                    let mut entries: Vec<IndexPosition> = (0..rng.range(0, 25))
                        .map(|n| at(s, n, rng.range(0, max_due as usize) as i64))
                        .collect();
                    // The index's order within a shard: by due time, ties as they come.
                    entries.sort_by_key(|e| e.due);
                    entries
                })
                .collect();
            let total: usize = shards.iter().map(Vec::len).sum();
            let fixed_limit = rng.range(1, 10);
            let vary_limit = rng.range(0, 1) == 0;

            let mut out: Vec<(usize, IndexPosition)> = Vec::new();
            let mut raw: Option<String> = None;
            let mut pages = 0;
            loop {
                pages += 1;
                assert!(
                    pages <= 2 * total + shards.len() + 2,
                    "case {case}: no progress"
                );
                let limit = if vary_limit {
                    rng.range(1, 10)
                } else {
                    fixed_limit
                };
                let cursor = IndexCursor::decode(raw.as_deref(), shards.len()).unwrap();
                let mut read = vec![ShardPage::finished(); shards.len()];
                for (i, after) in cursor.unfinished() {
                    read[i] = query(&mut rng, &shards[i], after, limit);
                }
                let m = merge(cursor, read, limit);
                assert!(m.entries.len() <= limit, "case {case}: page over its limit");
                assert!(
                    m.entries
                        .windows(2)
                        .all(|w| (w[0].1.due, w[0].0) <= (w[1].1.due, w[1].0)),
                    "case {case}: page out of order: {:?}",
                    m.entries
                );
                raw = m.next.encode().unwrap();
                assert!(
                    !m.entries.is_empty() || raw.is_none(),
                    "case {case}: an empty page with more to read"
                );
                out.extend(m.entries);
                if raw.is_none() {
                    break;
                }
            }
            assert!(
                out.windows(2).all(|w| w[0].1.due <= w[1].1.due),
                "case {case}: due order broken across pages"
            );
            for (s, entries) in shards.iter().enumerate() {
                let got: Vec<&IndexPosition> = out
                    .iter()
                    .filter(|(i, _)| *i == s)
                    .map(|(_, e)| e)
                    .collect();
                assert_eq!(
                    got,
                    entries.iter().collect::<Vec<_>>(),
                    "case {case}: shard {s} not returned exactly once in its order"
                );
            }
            assert_eq!(out.len(), total);
        }
    }
}
