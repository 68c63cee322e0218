//! The decision log: every delivery, claim, gateway call and answer, record, send, tick and fault
//! firing, in the order the scheduler made them happen. Its hash (`trace_hash` in the report) is
//! the fingerprint of a run: the same seed and flags give the same hash on every machine; and
//! `--trace ORDER_ID` keeps the lines of one order, with their virtual times, to read a red seed.

use std::fmt::Write as _;
use std::sync::{Mutex, MutexGuard};

use charge_core::time::{Clock, ManualClock};

/// FNV-1a, 64 bits: stable across platforms and releases (std's hashers are not promised to be).
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Fnv {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0100_0000_01b3;

    fn raw(&mut self, b: &[u8]) {
        for x in b {
            self.0 = (self.0 ^ u64::from(*x)).wrapping_mul(Self::PRIME);
        }
    }

    fn bytes(&mut self, b: &[u8]) {
        self.raw(b);
        self.end();
    }

    /// A separator, so ("ab", "c") and ("a", "bc") differ.
    fn end(&mut self) {
        self.0 = (self.0 ^ 0xff).wrapping_mul(Self::PRIME);
    }
}

/// Formatting straight into the hash: no string is built for an event nobody reads.
impl std::fmt::Write for Fnv {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.raw(s.as_bytes());
        Ok(())
    }
}

struct State {
    /// The traced order's other names: its operation id, its PaymentIntents.
    aliases: Vec<String>,
    hash: Fnv,
    events: u64,
    lines: Vec<String>,
}

/// The log.
pub struct Trace {
    clock: ManualClock,
    target: Option<String>,
    state: Mutex<State>,
}

impl Trace {
    pub fn new(clock: ManualClock, target: Option<String>) -> Self {
        Self {
            clock,
            target,
            state: Mutex::new(State {
                aliases: Vec::new(),
                hash: Fnv(Fnv::OFFSET),
                events: 0,
                lines: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `subject` (an order id, an operation id or a PaymentIntent id) is the traced
    /// order's (so its lines are kept).
    pub fn wants(&self, subject: &str) -> bool {
        match self.target.as_deref() {
            None => false,
            Some(t) if t == subject => true,
            Some(_) => self.lock().aliases.iter().any(|a| a == subject),
        }
    }

    /// `alias` names the same order as `subject` from now on (if `subject` is traced).
    pub fn alias(&self, subject: &str, alias: &str) {
        if self.target.is_some() && !alias.is_empty() && self.wants(subject) && !self.wants(alias) {
            self.lock().aliases.push(alias.to_owned());
        }
    }

    pub fn tracing(&self) -> bool {
        self.target.is_some()
    }

    /// One decision about `order` (or its operation id or PaymentIntent id; empty for events of
    /// no single order, e.g. a tick).
    pub fn event(&self, order: &str, what: &str, detail: std::fmt::Arguments<'_>) {
        let now = self.clock.now();
        let keep = self.wants(order);
        let mut st = self.lock();
        st.events += 1;
        let mut h = st.hash;
        h.bytes(&now.as_millis().to_le_bytes());
        h.bytes(order.as_bytes());
        h.bytes(what.as_bytes());
        let _ = h.write_fmt(detail);
        h.end();
        st.hash = h;
        if keep {
            let mut line = String::new();
            let _ = write!(line, "{}  {what:<22} {detail}", now);
            st.lines.push(line);
        }
    }

    pub fn hash_hex(&self) -> String {
        format!("{:016x}", self.lock().hash.0)
    }

    pub fn events(&self) -> u64 {
        self.lock().events
    }

    /// The traced order's timeline.
    pub fn lines(&self) -> Vec<String> {
        self.lock().lines.clone()
    }
}
