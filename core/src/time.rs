//! Time as the core sees it: a millisecond [`Timestamp`], where "now" comes from ([`Clock`]), and
//! the two clocks: the wall clock and a manual one.
//!
//! Nothing in the core reads the system time directly, so a test (or the simulation) can jump past
//! Stripe's 24 h idempotency-key lifetime with [`ManualClock::advance`].

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Where the core gets "now" from.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}

/// Milliseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(i64);

impl Timestamp {
    pub const fn from_millis(ms: i64) -> Self {
        Self(ms)
    }

    pub const fn as_millis(&self) -> i64 {
        self.0
    }

    /// `self + d`, saturating instead of overflowing.
    pub fn plus(&self, d: Duration) -> Self {
        Self(self.0.saturating_add(duration_millis(d)))
    }

    /// `self - d`, saturating instead of overflowing.
    pub fn minus(&self, d: Duration) -> Self {
        Self(self.0.saturating_sub(duration_millis(d)))
    }

    /// How long ago `earlier` was, zero if it is not in the past.
    pub fn since(&self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0).max(0) as u64)
    }

    /// RFC 3339 in UTC with milliseconds, e.g. `2026-11-29T15:04:05.123Z`.
    pub fn to_rfc3339(&self) -> String {
        let secs = self.0.div_euclid(1000);
        let millis = self.0.rem_euclid(1000);
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
            rem / 3600,
            (rem % 3600) / 60,
            rem % 60
        )
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

fn duration_millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The real wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Timestamp(duration_millis(since_epoch))
    }
}

/// A clock that moves only when told. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        Self(Arc::new(AtomicI64::new(start.0)))
    }

    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(duration_millis(d), Ordering::SeqCst);
    }

    pub fn set(&self, to: Timestamp) {
        self.0.store(to.0, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formatting() {
        assert_eq!(
            Timestamp::from_millis(0).to_rfc3339(),
            "1970-01-01T00:00:00.000Z"
        );
        assert_eq!(
            Timestamp::from_millis(1_796_000_000_123).to_rfc3339(),
            "2026-11-30T00:53:20.123Z"
        );
        assert_eq!(
            Timestamp::from_millis(951_782_400_000).to_rfc3339(),
            "2000-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(Timestamp::from_millis(1_000));
        let shared = clock.clone();
        assert_eq!(clock.now(), Timestamp::from_millis(1_000));
        shared.advance(Duration::from_secs(24 * 3600));
        assert_eq!(clock.now().as_millis(), 1_000 + 86_400_000);
        assert_eq!(
            clock.now().since(Timestamp::from_millis(1_000)),
            Duration::from_secs(86_400)
        );
        assert_eq!(
            Timestamp::from_millis(5).since(Timestamp::from_millis(10)),
            Duration::ZERO
        );
    }
}
