//! Lists by creation time (`GET /v1/payment_intents` and `GET /v1/refunds` with `created`
//! filters): newest first, a page at a time after `starting_after`, as Stripe pages them. Lists
//! are current, not delayed as search is.

use super::Engine;
use crate::wire::ApiError;

/// A `created` filter, in unix milliseconds, half-open: `from_ms <= created_ms < until_ms`.
/// Stripe's filter is in whole seconds (`created[gte]`, `[gt]`, `[lte]`, `[lt]`, or `created`
/// itself for one second); [`CreatedRange::narrow`] turns each into this form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CreatedRange {
    pub from_ms: i64,
    pub until_ms: i64,
}

impl Default for CreatedRange {
    fn default() -> Self {
        CreatedRange {
            from_ms: i64::MIN,
            until_ms: i64::MAX,
        }
    }
}

impl CreatedRange {
    /// Narrows the range by one query parameter; `Ok(false)` when `key` is not a `created`
    /// filter, an error when its value is not a whole number of seconds.
    pub(crate) fn narrow(&mut self, key: &str, value: &str) -> Result<bool, ApiError> {
        let op = match key {
            "created" => "eq",
            "created[gte]" => "gte",
            "created[gt]" => "gt",
            "created[lte]" => "lte",
            "created[lt]" => "lt",
            _ => return Ok(false),
        };
        let secs: i64 = value.trim().parse().map_err(|_| {
            ApiError::invalid(
                "parameter_invalid_integer",
                key,
                format!("Invalid integer: {value}"),
            )
        })?;
        let at = secs.saturating_mul(1000);
        let next = secs.saturating_add(1).saturating_mul(1000);
        match op {
            "eq" => {
                self.from_ms = self.from_ms.max(at);
                self.until_ms = self.until_ms.min(next);
            }
            "gte" => self.from_ms = self.from_ms.max(at),
            "gt" => self.from_ms = self.from_ms.max(next),
            "lte" => self.until_ms = self.until_ms.min(next),
            _ => self.until_ms = self.until_ms.min(at),
        }
        Ok(true)
    }

    fn contains(&self, ms: i64) -> bool {
        self.from_ms <= ms && ms < self.until_ms
    }
}

/// One page of positions (`0..len`, creation order) created in `range`, newest first: at most
/// `limit`, older than the position `after` when given, and whether more follow.
///
/// When creation times never went down (`in_order`), the range is found by bisection and a page
/// costs its own length; otherwise (the clock was set back between creates) by a scan.
pub(crate) fn page_by_created(
    len: usize,
    in_order: bool,
    created_ms: impl Fn(usize) -> i64,
    range: CreatedRange,
    after: Option<usize>,
    limit: usize,
) -> (Vec<usize>, bool) {
    let top = after.map_or(len, |a| a.min(len));
    if in_order {
        let first_at_or_after = |ms: i64| {
            let (mut lo, mut hi) = (0, len);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if created_ms(mid) < ms {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        let lo = first_at_or_after(range.from_ms);
        let hi = first_at_or_after(range.until_ms).min(top);
        if hi <= lo {
            return (Vec::new(), false);
        }
        let start = lo.max(hi.saturating_sub(limit));
        ((start..hi).rev().collect(), start > lo)
    } else {
        let mut found = (0..top)
            .rev()
            .filter(|at| range.contains(created_ms(*at)))
            .take(limit + 1)
            .collect::<Vec<_>>();
        let more = found.len() > limit;
        found.truncate(limit);
        (found, more)
    }
}

/// One page of a list: the objects' JSON, newest first, and whether more follow.
pub(crate) struct ListedPage {
    pub data: Vec<String>,
    pub has_more: bool,
}

impl Engine {
    /// `GET /v1/payment_intents?created[…]=…&limit=…&starting_after=…`: the PaymentIntents
    /// created in `range`, newest first, each settled as of `now_ms`.
    pub(crate) fn list_intents(
        &mut self,
        range: CreatedRange,
        limit: usize,
        starting_after: Option<&str>,
        now_ms: i64,
    ) -> Result<ListedPage, ApiError> {
        let after = match starting_after {
            None => None,
            Some(id) => Some(
                self.position(id)
                    .ok_or_else(|| ApiError::no_such_payment_intent(id).param("starting_after"))?,
            ),
        };
        let pis = &self.pis;
        let (page, has_more) = page_by_created(
            pis.len(),
            !pis.out_of_order,
            |at| pis[at].created_ms,
            range,
            after,
            limit,
        );
        let data = page
            .into_iter()
            .map(|at| {
                self.settle_at(at, now_ms);
                self.pis.json(at)
            })
            .collect();
        Ok(ListedPage { data, has_more })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(
        times: &[i64],
        in_order: bool,
        range: CreatedRange,
        after: Option<usize>,
        limit: usize,
    ) -> (Vec<usize>, bool) {
        page_by_created(times.len(), in_order, |at| times[at], range, after, limit)
    }

    #[test]
    fn created_filters_are_whole_seconds() {
        let mut r = CreatedRange::default();
        assert_eq!(r.narrow("created[gte]", "10"), Ok(true));
        assert_eq!(r.narrow("created[lt]", "20"), Ok(true));
        assert_eq!((r.from_ms, r.until_ms), (10_000, 20_000));
        let mut r = CreatedRange::default();
        r.narrow("created[gt]", "10").unwrap();
        r.narrow("created[lte]", "20").unwrap();
        assert_eq!((r.from_ms, r.until_ms), (11_000, 21_000));
        let mut r = CreatedRange::default();
        r.narrow("created", "7").unwrap();
        assert_eq!((r.from_ms, r.until_ms), (7_000, 8_000));
        assert_eq!(r.narrow("limit", "7"), Ok(false));
        let e = r.narrow("created[gte]", "soon").unwrap_err();
        assert_eq!(e.status, 400);
    }

    /// Bisection and the scan agree on every page, and paging by `after` walks the range once.
    #[test]
    fn pages_walk_the_range_newest_first() {
        let times: Vec<i64> = (0..50).map(|i| i * 100).collect();
        let range = CreatedRange {
            from_ms: 1_000,
            until_ms: 3_050,
        };
        for in_order in [true, false] {
            let mut seen = Vec::new();
            let mut after = None;
            loop {
                let (p, more) = page(&times, in_order, range, after, 7);
                seen.extend(p.iter().copied());
                if !more {
                    break;
                }
                after = p.last().copied();
            }
            let want: Vec<usize> = (10..=30).rev().collect();
            assert_eq!(seen, want, "in_order {in_order}");
        }
        let (p, more) = page(
            &times,
            true,
            CreatedRange {
                from_ms: 9_000,
                until_ms: 9_999,
            },
            None,
            7,
        );
        assert!(p.is_empty() && !more);
    }

    /// A clock set back between creates: the scan still finds every intent in the range.
    #[test]
    fn out_of_order_times_are_scanned() {
        let times = [5_000, 1_000, 6_000, 2_000];
        let range = CreatedRange {
            from_ms: 1_500,
            until_ms: 5_500,
        };
        assert_eq!(page(&times, false, range, None, 10), (vec![3, 0], false));
    }
}
