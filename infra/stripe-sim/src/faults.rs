//! Fault kinds, their configuration, and the seeded decision procedure.
//!
//! Every decision is taken under the engine's single mutex from one seeded
//! [`SmallRng`], so the same seed and the same sequence of requests always
//! yield the same sequence of faults.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// One kind of injected fault.
///
/// The wire names (admin API, README) are the `snake_case` forms:
/// `drop_after_commit`, `server_error_before_commit`,
/// `server_error_after_commit`, `latency`, `rate_limit`, `key_in_use`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// The PaymentIntent is created and the idempotency key saved with the
    /// success response, then the TCP connection is closed without any HTTP
    /// response bytes.
    DropAfterCommit,
    /// `500 api_error` before anything executes: nothing created, key not saved.
    ServerErrorBeforeCommit,
    /// The PaymentIntent is created and a `500 api_error` is saved under the
    /// idempotency key (replays return the 500 again).
    ServerErrorAfterCommit,
    /// Sleep [`FaultConfig::latency`] (real time) while the key is in flight,
    /// then complete normally.
    Latency,
    /// `429 rate_limit`, decided before the idempotency layer; nothing saved.
    RateLimit,
    /// `409 idempotency_key_in_use` as if a same-key request were in flight;
    /// nothing created, nothing saved.
    KeyInUse,
}

/// When a fault is decided relative to the idempotency layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Before the idempotency layer; always ends the request.
    Pre,
    /// Only for requests that actually execute (create a PaymentIntent).
    Exec,
}

impl FaultKind {
    /// All kinds, in the fixed order used for rate rolls.
    pub const ALL: [FaultKind; 6] = [
        FaultKind::RateLimit,
        FaultKind::ServerErrorBeforeCommit,
        FaultKind::KeyInUse,
        FaultKind::DropAfterCommit,
        FaultKind::ServerErrorAfterCommit,
        FaultKind::Latency,
    ];

    /// The wire name, e.g. `"drop_after_commit"`.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::DropAfterCommit => "drop_after_commit",
            FaultKind::ServerErrorBeforeCommit => "server_error_before_commit",
            FaultKind::ServerErrorAfterCommit => "server_error_after_commit",
            FaultKind::Latency => "latency",
            FaultKind::RateLimit => "rate_limit",
            FaultKind::KeyInUse => "key_in_use",
        }
    }

    pub(crate) fn phase(self) -> Phase {
        match self {
            FaultKind::RateLimit | FaultKind::ServerErrorBeforeCommit | FaultKind::KeyInUse => {
                Phase::Pre
            }
            FaultKind::DropAfterCommit | FaultKind::ServerErrorAfterCommit | FaultKind::Latency => {
                Phase::Exec
            }
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FaultKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown fault kind: {s}"))
    }
}

/// Fault injection settings.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultConfig {
    /// Probability in `[0, 1]` per kind. One uniform number is drawn per
    /// decision and compared against the cumulative rates of the kinds that
    /// can apply at that point, in [`FaultKind::ALL`] order.
    pub rates: BTreeMap<FaultKind, f64>,
    /// Real sleep used by [`FaultKind::Latency`] (default 12 s).
    pub latency: Duration,
    /// FIFO of faults applied to the next matching create requests. While it
    /// is non-empty, rates are not used for create requests.
    pub script: Vec<FaultKind>,
    /// Whether `rate_limit` and `server_error_before_commit` rates also apply
    /// to retrieve and search (default true).
    pub faults_on_reads: bool,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            rates: BTreeMap::new(),
            latency: Duration::from_millis(12_000),
            script: Vec::new(),
            faults_on_reads: true,
        }
    }
}

impl FaultConfig {
    /// Checks every rate is a finite number in `[0, 1]`.
    pub fn validate(&self) -> Result<(), String> {
        for (k, r) in &self.rates {
            if !r.is_finite() || *r < 0.0 || *r > 1.0 {
                return Err(format!("rate for {k} must be within [0, 1], got {r}"));
            }
        }
        Ok(())
    }
}

/// Which kind of request a decision is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Create,
    Read,
    /// A cancel (or a capture): a keyed write like a create, faulted at the same rates (never by the script,
    /// which is for creates, and never `latency`, which only a create's in-process path models:
    /// a cancel's lost answer is `drop_after_commit`).
    Cancel,
}

/// Mutable fault state: config, remaining script, RNG, counters.
pub(crate) struct FaultState {
    pub(crate) rates: BTreeMap<FaultKind, f64>,
    pub(crate) latency: Duration,
    pub(crate) script: VecDeque<FaultKind>,
    pub(crate) faults_on_reads: bool,
    pub(crate) seed: u64,
    rng: SmallRng,
    pub(crate) injected: BTreeMap<FaultKind, u64>,
}

impl FaultState {
    pub(crate) fn new(seed: u64, cfg: FaultConfig) -> Self {
        let mut s = FaultState {
            rates: BTreeMap::new(),
            latency: Duration::ZERO,
            script: VecDeque::new(),
            faults_on_reads: true,
            seed,
            rng: SmallRng::seed_from_u64(seed),
            injected: BTreeMap::new(),
        };
        s.apply(cfg);
        s
    }

    /// Replaces rates, latency, script and the reads flag.
    pub(crate) fn apply(&mut self, cfg: FaultConfig) {
        self.rates = cfg.rates;
        self.latency = cfg.latency;
        self.script = cfg.script.into();
        self.faults_on_reads = cfg.faults_on_reads;
    }

    pub(crate) fn config(&self) -> FaultConfig {
        FaultConfig {
            rates: self.rates.clone(),
            latency: self.latency,
            script: self.script.iter().copied().collect(),
            faults_on_reads: self.faults_on_reads,
        }
    }

    /// Restarts the RNG from `seed`.
    pub(crate) fn reseed(&mut self, seed: u64) {
        self.seed = seed;
        self.rng = SmallRng::seed_from_u64(seed);
    }

    fn roll(&mut self, kinds: &[FaultKind]) -> Option<FaultKind> {
        if kinds
            .iter()
            .all(|k| self.rates.get(k).copied().unwrap_or(0.0) <= 0.0)
        {
            return None;
        }
        let u: f64 = self.rng.random();
        let mut cum = 0.0;
        for k in kinds {
            cum += self.rates.get(k).copied().unwrap_or(0.0);
            if u < cum {
                return Some(*k);
            }
        }
        None
    }

    /// Decision taken before the idempotency layer. A returned kind is
    /// already counted as injected.
    pub(crate) fn decide_pre(&mut self, ep: Endpoint) -> Option<FaultKind> {
        let kind = match ep {
            Endpoint::Create => match self.script.front().copied() {
                Some(k) if k.phase() == Phase::Pre => self.script.pop_front(),
                Some(_) => None,
                None => self.roll(&[
                    FaultKind::RateLimit,
                    FaultKind::ServerErrorBeforeCommit,
                    FaultKind::KeyInUse,
                ]),
            },
            Endpoint::Read if self.faults_on_reads => {
                self.roll(&[FaultKind::RateLimit, FaultKind::ServerErrorBeforeCommit])
            }
            Endpoint::Read => None,
            Endpoint::Cancel => self.roll(&[
                FaultKind::RateLimit,
                FaultKind::ServerErrorBeforeCommit,
                FaultKind::KeyInUse,
            ]),
        };
        if let Some(k) = kind {
            *self.injected.entry(k).or_default() += 1;
        }
        kind
    }

    /// Decision for a cancel that is about to execute: `drop_after_commit` or
    /// `server_error_after_commit`. A returned kind is already counted as injected.
    pub(crate) fn decide_exec_cancel(&mut self) -> Option<FaultKind> {
        let kind = self.roll(&[
            FaultKind::DropAfterCommit,
            FaultKind::ServerErrorAfterCommit,
        ]);
        if let Some(k) = kind {
            *self.injected.entry(k).or_default() += 1;
        }
        kind
    }

    /// Decision for a create request that is about to execute. A returned
    /// kind is already counted as injected.
    pub(crate) fn decide_exec(&mut self) -> Option<FaultKind> {
        let kind = match self.script.front().copied() {
            Some(k) if k.phase() == Phase::Exec => self.script.pop_front(),
            Some(_) => None,
            None => self.roll(&[
                FaultKind::DropAfterCommit,
                FaultKind::ServerErrorAfterCommit,
                FaultKind::Latency,
            ]),
        };
        if let Some(k) = kind {
            *self.injected.entry(k).or_default() += 1;
        }
        kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in FaultKind::ALL {
            assert_eq!(k.as_str().parse::<FaultKind>().unwrap(), k);
            assert_eq!(
                serde_json::to_string(&k).unwrap(),
                format!("\"{}\"", k.as_str())
            );
        }
        assert!("nope".parse::<FaultKind>().is_err());
    }

    #[test]
    fn same_seed_same_decisions() {
        let cfg = FaultConfig {
            rates: [
                (FaultKind::RateLimit, 0.3),
                (FaultKind::DropAfterCommit, 0.3),
            ]
            .into(),
            ..FaultConfig::default()
        };
        let run = |seed| {
            let mut s = FaultState::new(seed, cfg.clone());
            (0..200)
                .map(|_| s.decide_pre(Endpoint::Create).or_else(|| s.decide_exec()))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn script_takes_precedence_and_waits_for_its_phase() {
        let cfg = FaultConfig {
            rates: [(FaultKind::RateLimit, 1.0)].into(),
            script: vec![FaultKind::DropAfterCommit, FaultKind::KeyInUse],
            ..FaultConfig::default()
        };
        let mut s = FaultState::new(0, cfg);
        assert_eq!(s.decide_pre(Endpoint::Create), None);
        assert_eq!(s.decide_exec(), Some(FaultKind::DropAfterCommit));
        assert_eq!(s.decide_pre(Endpoint::Create), Some(FaultKind::KeyInUse));
        assert_eq!(s.decide_pre(Endpoint::Create), Some(FaultKind::RateLimit));
        assert_eq!(s.injected[&FaultKind::RateLimit], 1);
    }
}
