//! Pure simulator state: PaymentIntents, idempotency keys, faults, counters.
//! No I/O and no clock reads: every method takes `now_ms`.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::Serialize;

use crate::capacity::{Capacity, CapacityState};
use crate::faults::{FaultConfig, FaultState};
use crate::pi::{CreateOutcome, CreateParams, PaymentIntent, STATUSES};
use crate::webhooks::{Outbox, WebhookConfig};
use crate::wire::{random_id, ApiError, MetadataQuery};

/// How long Stripe keeps idempotency keys: 24 hours.
pub const KEY_TTL_MS: i64 = 24 * 60 * 60 * 1000;

/// A response as first sent, kept for idempotent replays.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Saved {
    pub status: u16,
    pub body: Bytes,
    pub should_retry: Option<bool>,
}

impl Saved {
    pub(crate) fn from_error(e: &ApiError) -> Self {
        Saved {
            status: e.status,
            body: Bytes::from(e.to_json().to_string()),
            should_retry: e.should_retry(),
        }
    }
}

enum KeyState {
    InFlight,
    Done { saved: Saved, saved_ms: i64 },
}

struct KeyEntry {
    /// Sorted multimap of the request's decoded form parameters.
    params: Vec<(String, String)>,
    state: KeyState,
}

/// What the idempotency layer decided for a keyed request.
pub(crate) enum Idem {
    /// New key, now marked in flight: execute, then [`Engine::finish_key`]
    /// or [`Engine::abort_key`].
    Proceed,
    /// Saved response for the same parameters.
    Replay(Saved),
    /// Saved with different parameters.
    Mismatch,
    /// Another request with this key is executing.
    InFlight,
}

/// One row of the ledger: every PaymentIntent ever created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LedgerEntry {
    /// `pi_...`
    pub id: String,
    /// `metadata[operation_id]`, if given.
    pub operation_id: Option<String>,
    /// The `Idempotency-Key` of the creating request, if any.
    pub idempotency_key: Option<String>,
    /// Amount in the smallest currency unit.
    pub amount: i64,
    /// Lowercase ISO currency.
    pub currency: String,
    /// Current status (after lazy settlement).
    pub status: String,
    /// The payment method given at creation.
    pub payment_method: Option<String>,
    /// The customer given at creation.
    pub customer: Option<String>,
    /// Simulated creation time, unix milliseconds.
    pub created_ms: i64,
}

/// Per-endpoint request counters (authenticated requests only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RequestCounts {
    /// `POST /v1/payment_intents`
    pub create: u64,
    /// `GET /v1/payment_intents/{id}`
    pub retrieve: u64,
    /// `GET /v1/payment_intents/search`
    pub search: u64,
}

/// All mutable state, kept behind one mutex by [`crate::StripeSim`].
pub(crate) struct Engine {
    pis: Vec<PaymentIntent>,
    index: HashMap<String, usize>,
    keys: HashMap<String, KeyEntry>,
    /// Saved keys by (saved at, sequence): pruning takes the expired ones off the front instead of
    /// scanning every key on every request.
    expiry: BTreeMap<(i64, u64), String>,
    expiry_seq: u64,
    /// PaymentIntent positions by metadata (key, value), for search.
    by_metadata: HashMap<(String, String), Vec<usize>>,
    pub(crate) faults: FaultState,
    /// Rate limits (token buckets), their refusals, and the create latency generator.
    pub(crate) capacity: CapacityState,
    pub(crate) requests: RequestCounts,
    pub(crate) search_lag_ms: i64,
    pub(crate) settle_ms: i64,
    ids: SmallRng,
    /// Webhook events waiting for delivery (see [`crate::webhooks`]).
    pub(crate) webhooks: Outbox,
}

impl Engine {
    pub(crate) fn new(
        seed: u64,
        faults: FaultConfig,
        capacity: Capacity,
        search_lag_ms: i64,
        settle_ms: i64,
    ) -> Self {
        Engine {
            pis: Vec::new(),
            index: HashMap::new(),
            keys: HashMap::new(),
            expiry: BTreeMap::new(),
            expiry_seq: 0,
            by_metadata: HashMap::new(),
            faults: FaultState::new(seed, faults),
            capacity: CapacityState::new(seed, capacity),
            requests: RequestCounts::default(),
            search_lag_ms,
            settle_ms,
            ids: SmallRng::seed_from_u64(seed ^ 0x05EE_D1D5_u64),
            webhooks: Outbox::new(seed, WebhookConfig::default()),
        }
    }

    /// Clears PaymentIntents, keys, faults and counters; reseeds the RNGs. The capacity
    /// configuration stays (its buckets start full, its counters at zero).
    pub(crate) fn reset(&mut self) {
        let seed = self.faults.seed;
        let mut webhooks = std::mem::replace(
            &mut self.webhooks,
            Outbox::new(seed, WebhookConfig::default()),
        );
        webhooks.clear(seed);
        let capacity = self.capacity.config().clone();
        *self = Engine::new(
            seed,
            FaultConfig::default(),
            capacity,
            self.search_lag_ms,
            self.settle_ms,
        );
        // The endpoint and its secret survive a reset, like the API key.
        self.webhooks = webhooks;
    }

    pub(crate) fn request_id(&mut self) -> String {
        random_id(&mut self.ids, "req_", 14)
    }

    /// Drops saved keys older than [`KEY_TTL_MS`].
    pub(crate) fn prune_keys(&mut self, now_ms: i64) {
        while let Some(entry) = self.expiry.first_entry() {
            let (saved_at, _) = *entry.key();
            if now_ms.saturating_sub(saved_at) < KEY_TTL_MS {
                break;
            }
            let key = entry.remove();
            if matches!(
                self.keys.get(&key).map(|e| &e.state),
                Some(KeyState::Done { saved_ms, .. }) if *saved_ms == saved_at
            ) {
                self.keys.remove(&key);
            }
        }
    }

    /// Number of idempotency keys currently held (saved or in flight).
    pub(crate) fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// The idempotency layer. `params` must already be sorted.
    pub(crate) fn begin_key(
        &mut self,
        key: &str,
        params: &[(String, String)],
        now_ms: i64,
    ) -> Idem {
        self.prune_keys(now_ms);
        match self.keys.get(key) {
            Some(e) => match &e.state {
                KeyState::InFlight => Idem::InFlight,
                KeyState::Done { saved, .. } if e.params == params => Idem::Replay(saved.clone()),
                KeyState::Done { .. } => Idem::Mismatch,
            },
            None => {
                self.keys.insert(
                    key.to_string(),
                    KeyEntry {
                        params: params.to_vec(),
                        state: KeyState::InFlight,
                    },
                );
                Idem::Proceed
            }
        }
    }

    /// Forgets an in-flight key without saving (validation failure, abort).
    pub(crate) fn abort_key(&mut self, key: &str) {
        if matches!(
            self.keys.get(key).map(|e| &e.state),
            Some(KeyState::InFlight)
        ) {
            self.keys.remove(key);
        }
    }

    /// Saves the first response under an in-flight key.
    pub(crate) fn finish_key(&mut self, key: &str, saved: Saved, now_ms: i64) {
        if let Some(e) = self.keys.get_mut(key) {
            e.state = KeyState::Done {
                saved,
                saved_ms: now_ms,
            };
            self.expiry_seq += 1;
            self.expiry
                .insert((now_ms, self.expiry_seq), key.to_string());
        }
    }

    /// Creates a PaymentIntent and returns the response Stripe would send.
    pub(crate) fn create(
        &mut self,
        params: CreateParams,
        idempotency_key: Option<&str>,
        now_ms: i64,
    ) -> Saved {
        let id = random_id(&mut self.ids, "pi_", 24);
        let secret = random_id(&mut self.ids, &format!("{id}_secret_"), 25);
        let charge = random_id(&mut self.ids, "ch_", 24);
        let (pi, outcome) = PaymentIntent::create(
            id,
            secret,
            charge,
            params,
            idempotency_key.map(str::to_string),
            now_ms,
            self.settle_ms,
        );
        let body = pi.to_json();
        let saved = match outcome {
            CreateOutcome::Ok => Saved {
                status: 200,
                body: Bytes::from(body.to_string()),
                should_retry: None,
            },
            CreateOutcome::Declined {
                code,
                decline_code,
                message,
            } => Saved::from_error(&ApiError::card_declined(
                code,
                decline_code,
                message,
                body,
                pi.latest_charge.clone(),
            )),
        };
        let at = self.pis.len();
        for (k, v) in &pi.params.metadata {
            self.by_metadata
                .entry((k.clone(), v.clone()))
                .or_default()
                .push(at);
        }
        self.index.insert(pi.id.clone(), at);
        if self.webhooks.enabled() {
            self.webhooks.emit(&pi.to_json(), true, now_ms);
            if let Some(settlement) = &pi.settlement {
                // The event Stripe sends when `processing` ends, queued for that moment.
                let mut settled = pi.clone();
                settled.settle(settlement.at_ms);
                self.webhooks
                    .emit(&settled.to_json(), false, settlement.at_ms);
            }
        }
        self.pis.push(pi);
        saved
    }

    /// The current JSON of one PaymentIntent, settled as of `now_ms`.
    pub(crate) fn retrieve(&mut self, id: &str, now_ms: i64) -> Option<serde_json::Value> {
        let pi = self.pis.get_mut(*self.index.get(id)?)?;
        pi.settle(now_ms);
        Some(pi.to_json())
    }

    /// Matching PaymentIntents visible to search (older than the lag),
    /// newest first.
    pub(crate) fn search(&mut self, q: &MetadataQuery, now_ms: i64) -> Vec<serde_json::Value> {
        let lag = self.search_lag_ms;
        let Some(at) = self.by_metadata.get(&(q.key.clone(), q.value.clone())) else {
            return Vec::new();
        };
        let pis = &mut self.pis;
        at.iter()
            .rev()
            .filter_map(|i| {
                let pi = &mut pis[*i];
                if now_ms < pi.created_ms.saturating_add(lag) {
                    return None;
                }
                pi.settle(now_ms);
                Some(pi.to_json())
            })
            .collect()
    }

    /// Every PaymentIntent ever created, oldest first.
    pub(crate) fn ledger(&mut self, now_ms: i64) -> Vec<LedgerEntry> {
        self.pis
            .iter_mut()
            .map(|pi| {
                pi.settle(now_ms);
                LedgerEntry {
                    id: pi.id.clone(),
                    operation_id: pi.params.metadata.get("operation_id").cloned(),
                    idempotency_key: pi.idempotency_key.clone(),
                    amount: pi.params.amount,
                    currency: pi.params.currency.clone(),
                    status: pi.status.clone(),
                    payment_method: pi.params.payment_method.clone(),
                    customer: pi.params.customer.clone(),
                    created_ms: pi.created_ms,
                }
            })
            .collect()
    }

    /// Forces a status (cancels any pending settlement).
    pub(crate) fn set_status(&mut self, id: &str, status: &str, now_ms: i64) -> bool {
        if !STATUSES.contains(&status) {
            return false;
        }
        let Some(pi) = self.index.get(id).and_then(|i| self.pis.get_mut(*i)) else {
            return false;
        };
        pi.settlement = None;
        pi.status = status.to_string();
        let json = pi.to_json();
        self.webhooks.emit(&json, false, now_ms);
        true
    }

    pub(crate) fn injected(&self) -> BTreeMap<crate::FaultKind, u64> {
        self.faults.injected.clone()
    }
}
