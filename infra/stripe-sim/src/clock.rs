//! The simulated clock: a manual clock, or an external time source plus an
//! adjustable offset.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// An external time source returning unix **milliseconds**.
pub type TimeSource = Arc<dyn Fn() -> i64 + Send + Sync>;

/// `now = source() + offset` (manual clocks have no source: `now = offset`).
pub(crate) struct Clock {
    source: Option<TimeSource>,
    offset_ms: AtomicI64,
}

/// Real wall-clock time in unix milliseconds.
pub fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Clock {
    /// A manual clock starting at `start_ms`, or an external one.
    pub(crate) fn new(source: Option<TimeSource>, start_ms: Option<i64>) -> Self {
        let offset = match (&source, start_ms) {
            (None, s) => s.unwrap_or_else(wall_ms),
            (Some(f), Some(s)) => s.saturating_sub(f()),
            (Some(_), None) => 0,
        };
        Clock {
            source,
            offset_ms: AtomicI64::new(offset),
        }
    }

    pub(crate) fn is_external(&self) -> bool {
        self.source.is_some()
    }

    pub(crate) fn now_ms(&self) -> i64 {
        let base = self.source.as_ref().map_or(0, |f| f());
        base.saturating_add(self.offset_ms.load(Ordering::SeqCst))
    }

    pub(crate) fn advance_ms(&self, ms: i64) {
        self.offset_ms.fetch_add(ms, Ordering::SeqCst);
    }

    pub(crate) fn set_ms(&self, ms: i64) {
        let base = self.source.as_ref().map_or(0, |f| f());
        self.offset_ms
            .store(ms.saturating_sub(base), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_and_external() {
        let c = Clock::new(None, Some(1_000));
        c.advance_ms(500);
        assert_eq!(c.now_ms(), 1_500);
        c.set_ms(10);
        assert_eq!(c.now_ms(), 10);

        let t = Arc::new(AtomicI64::new(5_000));
        let t2 = t.clone();
        let c = Clock::new(Some(Arc::new(move || t2.load(Ordering::SeqCst))), None);
        assert_eq!(c.now_ms(), 5_000);
        t.store(6_000, Ordering::SeqCst);
        assert_eq!(c.now_ms(), 6_000);
        c.advance_ms(1);
        assert_eq!(c.now_ms(), 6_001);
        assert!(c.is_external());
    }
}
