//! The Stripe side of a simulation: the embedded `stripe-sim` on the simulation's virtual clock, or
//! a separately started `stripe-sim` driven through its admin API (`--stripe-url`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use charge_core::time::{Clock, ManualClock};
use serde_json::{json, Value};
use stripe_sim::{
    DisputeEntry, DisputeRequest, DisputeTiming, FaultConfig, LedgerRowView, RunningSim, SimConfig,
    StripeSim,
};

use super::BoxError;
use crate::fx::FxHashMap;

/// One PaymentIntent as the simulator's ledger shows it.
#[derive(Debug, Clone)]
pub struct LedgerRow {
    pub id: String,
    pub operation_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub status: String,
}

impl LedgerRow {
    fn view(&self) -> LedgerRowView<'_> {
        LedgerRowView {
            id: &self.id,
            operation_id: self.operation_id.as_deref(),
            idempotency_key: self.idempotency_key.as_deref(),
            status: &self.status,
        }
    }
}

impl From<LedgerRowView<'_>> for LedgerRow {
    fn from(v: LedgerRowView<'_>) -> Self {
        Self {
            id: v.id.to_owned(),
            operation_id: v.operation_id.map(str::to_owned),
            idempotency_key: v.idempotency_key.map(str::to_owned),
            status: v.status.to_owned(),
        }
    }
}

/// Stripe's ledger as the judge reads it: one operation's PaymentIntents at a time, and every
/// PaymentIntent in creation order — never the whole ledger copied at once (10 million rows).
pub trait Ledger {
    /// PaymentIntents ever created.
    fn created(&self) -> u64;
    /// The PaymentIntents whose `metadata[operation_id]` is `operation_id`, oldest first,
    /// borrowed while `f` looks at each.
    fn each_of_operation(&self, operation_id: &str, f: &mut dyn FnMut(LedgerRowView<'_>));
    /// Every PaymentIntent, oldest first, borrowed while `f` looks at it.
    fn each(&self, f: &mut dyn FnMut(LedgerRowView<'_>));
}

/// The ledger of a simulator in this process, read from its engine a piece at a time.
pub struct LocalLedger(pub StripeSim);

impl Ledger for LocalLedger {
    fn created(&self) -> u64 {
        self.0.payment_intents_created() as u64
    }

    fn each_of_operation(&self, operation_id: &str, f: &mut dyn FnMut(LedgerRowView<'_>)) {
        self.0
            .each_ledger_row(Some(("operation_id", operation_id)), f);
    }

    fn each(&self, f: &mut dyn FnMut(LedgerRowView<'_>)) {
        self.0.each_ledger_row(None, f);
    }
}

/// A ledger fetched whole (a separately started simulator, over its admin API).
pub struct CopiedLedger {
    rows: Vec<LedgerRow>,
    by_operation: FxHashMap<String, Vec<usize>>,
}

impl CopiedLedger {
    pub fn new(rows: Vec<LedgerRow>) -> Self {
        let mut by_operation: FxHashMap<String, Vec<usize>> = FxHashMap::default();
        for (i, row) in rows.iter().enumerate() {
            if let Some(op) = &row.operation_id {
                by_operation.entry(op.clone()).or_default().push(i);
            }
        }
        Self { rows, by_operation }
    }
}

impl Ledger for CopiedLedger {
    fn created(&self) -> u64 {
        self.rows.len() as u64
    }

    fn each_of_operation(&self, operation_id: &str, f: &mut dyn FnMut(LedgerRowView<'_>)) {
        for at in self.by_operation.get(operation_id).into_iter().flatten() {
            f(self.rows[*at].view());
        }
    }

    fn each(&self, f: &mut dyn FnMut(LedgerRowView<'_>)) {
        self.rows.iter().for_each(|row| f(row.view()));
    }
}

/// Requests Stripe received, by endpoint.
#[derive(Debug, Clone, Copy, Default)]
pub struct StripeCallCounts {
    pub create: u64,
    pub retrieve: u64,
    pub search: u64,
    pub cancel: u64,
    /// Calls refused for capacity (the simulator's rate limits), every endpoint.
    pub capacity_429s: u64,
}

pub enum SimStripe {
    /// The simulator's engine called in process (no sockets): the deterministic default.
    InProcess { sim: StripeSim },
    /// The simulator on loopback HTTP, reached through the real `StripeGateway` (`--stripe http`).
    Embedded { sim: StripeSim, running: RunningSim },
    /// A separately started `stripe-sim`, its clock moved to the simulation's before every call
    /// ([`crate::gateway::ClockSynced`]). Its rate limits are left as found: limits that refill
    /// on real time (as the binary starts) are paced on real time by the functions
    /// ([`crate::pacing::Pacing::on_real_time`]); pacing on the simulation's clock against them,
    /// whose hours pass in seconds of wall time, sent 88 creates per charge into 429s.
    Remote {
        base: String,
        http: reqwest::Client,
        /// Its capacity as the run found it, for the report.
        capacity_found: String,
        /// Some limit is set and refills on real time.
        limits_on_real_time: bool,
    },
}

/// The limits `GET /_sim/capacity` shows, as `create 25/s, account 25/s` (empty: unlimited).
fn describe_capacity(found: &Value) -> String {
    let limits: Vec<String> = found
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.strip_suffix("_per_sec")?, v.as_u64()?)))
        .map(|(name, rate)| format!("{name} {rate}/s"))
        .collect();
    limits.join(", ")
}

/// Search lag when the `search_lag` fault is on: visible to search only after 5 minutes (our
/// search waits 10 minutes past the key window, so this must never cause a wrong review).
const SEARCH_LAG: Duration = Duration::from_secs(300);

/// What the Stripe simulator is told to inject ([`crate::faults::Faults::at_stripe`]): its fault
/// rates and answer latency, and whether search lags.
#[derive(Debug, Clone)]
pub struct StripeFaults {
    pub config: FaultConfig,
    pub search_lag: bool,
}

impl StripeFaults {
    fn search_lag(&self) -> Duration {
        if self.search_lag {
            SEARCH_LAG
        } else {
            Duration::ZERO
        }
    }
}

impl SimStripe {
    /// The simulator's engine on the simulation's virtual clock, without a server.
    /// The simulator itself when it runs in this process (webhooks are delivered from it).
    pub fn local_sim(&self) -> Option<&StripeSim> {
        match self {
            Self::InProcess { sim } | Self::Embedded { sim, .. } => Some(sim),
            Self::Remote { .. } => None,
        }
    }

    pub fn in_process(clock: &ManualClock, faults: &StripeFaults, seed: u64) -> Self {
        Self::InProcess {
            sim: Self::sim(clock, faults, seed),
        }
    }

    fn sim(clock: &ManualClock, faults: &StripeFaults, seed: u64) -> StripeSim {
        let source = clock.clone();
        StripeSim::new(SimConfig {
            seed,
            search_lag: faults.search_lag(),
            time_source: Some(Arc::new(move || source.now().as_millis())),
            faults: faults.config.clone(),
            ..SimConfig::default()
        })
    }

    /// An embedded simulator on loopback HTTP whose time is the simulation's virtual clock.
    pub async fn embedded(
        clock: &ManualClock,
        faults: &StripeFaults,
        seed: u64,
    ) -> Result<Self, BoxError> {
        let sim = Self::sim(clock, faults, seed);
        let running = sim.start(0).await?;
        Ok(Self::Embedded { sim, running })
    }

    /// A running `stripe-sim`, reset and configured through its admin API.
    pub async fn remote(
        base: &str,
        clock: &ManualClock,
        faults: &StripeFaults,
        seed: u64,
    ) -> Result<Self, BoxError> {
        let base = base.trim_end_matches('/').to_owned();
        // reqwest runs rustls without a built-in provider (root Cargo.toml): ring, as the
        // functions' Stripe client installs it, even for this plain-HTTP client.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?;
        let mut side = Self::Remote {
            base,
            http,
            capacity_found: String::new(),
            limits_on_real_time: false,
        };
        side.admin("reset", json!({ "set_clock_ms": clock.now().as_millis() }))
            .await?;
        let cfg = &faults.config;
        let rates: BTreeMap<String, f64> = cfg
            .rates
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), *v))
            .collect();
        let lag = faults.search_lag().as_millis() as u64;
        side.admin(
            "faults",
            json!({
                "rates": rates,
                "latency_ms": cfg.latency.as_millis() as u64,
                "seed": seed,
                "search_lag_ms": lag,
            }),
        )
        .await?;
        let found = side.admin_get("capacity").await?;
        let described = describe_capacity(&found);
        let real_time = !described.is_empty() && found["clock"].as_str() != Some("simulated");
        let note = match (described.is_empty(), real_time) {
            (true, _) => "unlimited".to_owned(),
            (false, true) => format!("{described} on real time (paced on real time)"),
            (false, false) => format!("{described} on the simulation's clock"),
        };
        if let Self::Remote {
            capacity_found,
            limits_on_real_time,
            ..
        } = &mut side
        {
            *capacity_found = note;
            *limits_on_real_time = real_time;
        }
        Ok(side)
    }

    /// A remote simulator whose limits refill on real time: the functions must pace on it.
    pub fn limits_on_real_time(&self) -> bool {
        matches!(
            self,
            Self::Remote {
                limits_on_real_time: true,
                ..
            }
        )
    }

    /// A remote simulator's capacity as the run found it (`None` in process or embedded: no
    /// limits there).
    pub fn capacity_found(&self) -> Option<&str> {
        match self {
            Self::Remote { capacity_found, .. } => Some(capacity_found),
            _ => None,
        }
    }

    async fn admin_get(&self, path: &str) -> Result<Value, BoxError> {
        let Self::Remote { base, http, .. } = self else {
            return Err("admin API is for a remote simulator".into());
        };
        let resp = http.get(format!("{base}/_sim/{path}")).send().await?;
        let status = resp.status();
        let value: Value = resp.json().await?;
        if !status.is_success() {
            return Err(format!("stripe-sim GET /_sim/{path}: {status}: {value}").into());
        }
        Ok(value)
    }

    async fn admin(&self, path: &str, body: Value) -> Result<Value, BoxError> {
        let Self::Remote { base, http, .. } = self else {
            return Err("admin API is for a remote simulator".into());
        };
        let resp = http
            .post(format!("{base}/_sim/{path}"))
            .json(&body)
            .send()
            .await?;
        let status = resp.status();
        let value: Value = resp.json().await?;
        if !status.is_success() {
            return Err(format!("stripe-sim /_sim/{path}: {status}: {value}").into());
        }
        Ok(value)
    }

    /// The HTTP base URL (none in process).
    pub fn base_url(&self) -> Option<String> {
        match self {
            Self::InProcess { .. } => None,
            Self::Embedded { running, .. } => Some(running.base_url()),
            Self::Remote { base, .. } => Some(base.clone()),
        }
    }

    /// Moves a remote simulator's clock to the simulation's (the embedded one reads it directly).
    pub async fn sync_clock(&self, clock: &ManualClock) -> Result<(), BoxError> {
        if let Self::Remote { .. } = self {
            self.admin("clock", json!({ "set_ms": clock.now().as_millis() }))
                .await?;
        }
        Ok(())
    }

    /// The customer confirms the declined PaymentIntent `pi` with its client secret: true when
    /// it paid, false when Stripe refused (it was canceled, or moved on).
    pub async fn confirm_as_customer(&self, pi: &str) -> Result<bool, BoxError> {
        match self {
            Self::InProcess { sim } | Self::Embedded { sim, .. } => {
                match sim.confirm_as_customer(pi) {
                    Ok(()) => Ok(true),
                    Err(e) if e.status == 400 => Ok(false),
                    Err(e) => Err(format!("confirm of {pi}: {}", e.message).into()),
                }
            }
            Self::Remote { base, http, .. } => {
                let resp = http
                    .post(format!("{base}/_sim/payment_intents/{pi}/confirm"))
                    .send()
                    .await?;
                match resp.status().as_u16() {
                    200 => Ok(true),
                    400 => Ok(false),
                    s => Err(format!("stripe-sim confirm of {pi}: HTTP {s}").into()),
                }
            }
        }
    }

    /// The customer's bank disputes the charge of the succeeded PaymentIntent `req.payment_intent`
    /// now (`POST /_sim/disputes`): the dispute's JSON, or Stripe-sim's refusal as an error.
    pub async fn dispute_charge(&self, req: &DisputeRequest) -> Result<Value, BoxError> {
        match self {
            Self::InProcess { sim } | Self::Embedded { sim, .. } => {
                let json = sim
                    .dispute_charge(req)
                    .map_err(|e| format!("dispute of {}: {}", req.payment_intent, e.message))?;
                Ok(serde_json::from_str(&json)?)
            }
            Self::Remote { base, http, .. } => {
                let body = json!({
                    "payment_intent": req.payment_intent,
                    "amount": req.amount,
                    "reason": req.reason,
                    "inquiry": req.inquiry,
                });
                let resp = http
                    .post(format!("{base}/_sim/disputes"))
                    .json(&body)
                    .send()
                    .await?;
                let status = resp.status().as_u16();
                let v: Value = resp.json().await?;
                if status != 200 {
                    return Err(format!(
                        "stripe-sim dispute of {}: HTTP {status} {v}",
                        req.payment_intent
                    )
                    .into());
                }
                Ok(v)
            }
        }
    }

    /// Every dispute Stripe holds, oldest first, as of the simulator's now.
    pub async fn dispute_ledger(&self) -> Result<Vec<DisputeEntry>, BoxError> {
        match self {
            Self::InProcess { sim } | Self::Embedded { sim, .. } => Ok(sim.dispute_ledger()),
            Self::Remote { base, http, .. } => {
                let v: Value = http
                    .get(format!("{base}/_sim/disputes"))
                    .send()
                    .await?
                    .json()
                    .await?;
                Ok(serde_json::from_value(v["disputes"].clone())?)
            }
        }
    }

    /// Sets how long disputes take (a test card's delay, the response window, the review).
    pub async fn set_dispute_timing(&self, timing: DisputeTiming) -> Result<(), BoxError> {
        match self {
            Self::InProcess { sim } | Self::Embedded { sim, .. } => {
                sim.set_dispute_timing(timing);
                Ok(())
            }
            Self::Remote { .. } => {
                self.admin(
                    "disputes/timing",
                    json!({
                        "delay_ms": timing.delay_ms,
                        "response_window_ms": timing.response_window_ms,
                        "review_ms": timing.review_ms,
                        "closes_after_due_ms": timing.closes_after_due_ms,
                    }),
                )
                .await?;
                Ok(())
            }
        }
    }

    /// The ledger (every PaymentIntent created), read in place when the simulator runs in this
    /// process.
    pub async fn ledger(&self) -> Result<Box<dyn Ledger>, BoxError> {
        match self {
            Self::InProcess { sim } | Self::Embedded { sim, .. } => {
                Ok(Box::new(LocalLedger(sim.clone())))
            }
            Self::Remote { .. } => {
                let v = self.remote_ledger().await?;
                let text = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).map(str::to_owned);
                let rows = v["payment_intents"]
                    .as_array()
                    .ok_or("stripe-sim ledger: no payment_intents")?
                    .iter()
                    .map(|e| LedgerRow {
                        id: text(e, "id").unwrap_or_default(),
                        operation_id: text(e, "operation_id"),
                        idempotency_key: text(e, "idempotency_key"),
                        status: text(e, "status").unwrap_or_default(),
                    })
                    .collect();
                Ok(Box::new(CopiedLedger::new(rows)))
            }
        }
    }

    async fn remote_ledger(&self) -> Result<Value, BoxError> {
        let Self::Remote { base, http, .. } = self else {
            return Err("not a remote simulator".into());
        };
        Ok(http
            .get(format!("{base}/_sim/ledger"))
            .send()
            .await?
            .json()
            .await?)
    }

    /// The requests received and the faults injected.
    pub async fn snapshot(&self) -> Result<(StripeCallCounts, BTreeMap<String, u64>), BoxError> {
        match self {
            Self::InProcess { sim } | Self::Embedded { sim, .. } => {
                let r = sim.request_counts();
                let injected = sim
                    .injected()
                    .into_iter()
                    .map(|(k, v)| (k.as_str().to_owned(), v))
                    .collect();
                Ok((
                    StripeCallCounts {
                        create: r.create,
                        retrieve: r.retrieve,
                        search: r.search,
                        cancel: r.cancel,
                        capacity_429s: sim.capacity_429s().total(),
                    },
                    injected,
                ))
            }
            Self::Remote { .. } => {
                let v = self.remote_ledger().await?;
                let n = |k: &str| v["requests"][k].as_u64().unwrap_or(0);
                let injected = v["injected"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                            .collect()
                    })
                    .unwrap_or_default();
                Ok((
                    StripeCallCounts {
                        create: n("create"),
                        retrieve: n("retrieve"),
                        search: n("search"),
                        cancel: n("cancel"),
                        capacity_429s: v["capacity_429s"]
                            .as_object()
                            .map(|by_endpoint| by_endpoint.values().filter_map(Value::as_u64).sum())
                            .unwrap_or(0),
                    },
                    injected,
                ))
            }
        }
    }
}
