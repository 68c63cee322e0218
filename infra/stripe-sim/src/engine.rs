//! Pure simulator state: PaymentIntents, idempotency keys, faults, counters.
//! No I/O and no clock reads: every method takes `now_ms`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hasher;
use std::sync::Arc;

use bytes::Bytes;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::Serialize;

use crate::capacity::{Capacity, CapacityState};
use crate::faults::{FaultConfig, FaultState};
use crate::fx::{Fx, FxHasher};
use crate::pi::{
    cancelable, confirmable, CaptureParams, CreateOutcome, CreateParams, PaymentIntent, STATUSES,
};
use crate::version::ApiVersion;
use crate::webhooks::{Outbox, WebhookConfig};
use crate::wire::{random_id, ApiError, MetadataQuery};

mod disputes;
mod lists;
pub(crate) use lists::CreatedRange;
mod refunds;
pub use disputes::{DisputeEntry, DisputeRequest, DisputeTiming, CLOSES_AFTER_DUE_MS};
pub(crate) use disputes::{DisputeFilter, Disputes};
pub use refunds::RefundEntry;
pub(crate) use refunds::Refunds;

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
    /// A `200` with this JSON body.
    pub(crate) fn ok(json: String) -> Self {
        Saved {
            status: 200,
            body: Bytes::from(json),
            should_retry: None,
        }
    }

    pub(crate) fn from_error(e: &ApiError) -> Self {
        Saved {
            status: e.status,
            body: Bytes::from(e.to_json().to_string()),
            should_retry: e.should_retry(),
        }
    }
}

/// A card decline's error fields, as the create answered them.
#[derive(Clone, Copy, Debug)]
struct Decline {
    code: &'static str,
    decline_code: &'static str,
    message: &'static str,
}

/// A saved first response as kept under its key: the answer itself, or — for a create's own
/// answer — the PaymentIntent to render it from again (the same bytes: the answer is that
/// PaymentIntent's JSON, and it is rendered into [`Kept::Answer`] before the PaymentIntent
/// changes, see [`Engine::freeze_answer`]). Keeps an idempotency key to a few bytes instead of
/// the answer's kilobyte and a half, for the day it is kept.
#[derive(Clone, Debug)]
enum Kept {
    Answer(Box<Saved>),
    Created {
        at: u32,
        declined: Option<Box<Decline>>,
    },
}

enum KeyState {
    InFlight,
    Done { saved: Kept, saved_ms: i64 },
}

struct KeyEntry {
    /// The request's decoded form parameters, sorted, as [`encode_params`] packs them.
    params: Box<[u8]>,
    state: KeyState,
}

/// Form parameters in one allocation: each name and value as its length (LEB128) and bytes.
/// Injective, so two forms are equal exactly when their encodings are.
fn encode_params(params: &[&(String, String)]) -> Box<[u8]> {
    let mut out = Vec::with_capacity(params.iter().map(|(k, v)| k.len() + v.len() + 4).sum());
    for s in params.iter().flat_map(|(k, v)| [k, v]) {
        let mut n = s.len();
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                break;
            }
            out.push(byte | 0x80);
        }
        out.extend_from_slice(s.as_bytes());
    }
    out.into_boxed_slice()
}

/// The hash of some strings, for the position indexes (each hit is checked against the
/// PaymentIntent itself, so a collision costs a comparison, never a wrong answer).
fn hash_of(parts: &[&str]) -> u64 {
    let mut h = FxHasher::default();
    for p in parts {
        h.write(p.as_bytes());
        h.write_u8(0xff);
    }
    h.finish()
}

/// PaymentIntent positions under one hash, in creation order: nearly always one.
#[derive(Debug)]
enum Positions {
    One(u32),
    /// Boxed on purpose: the enum stays 16 bytes (a bare `Vec` makes it 32), and there is one
    /// per hash in indexes of millions; the rare second position pays the extra allocation.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<u32>>),
}

impl Positions {
    fn push(&mut self, at: u32) {
        match self {
            Positions::One(first) if *first != at => {
                *self = Positions::Many(Box::new(vec![*first, at]));
            }
            Positions::Many(v) if v.last() != Some(&at) => v.push(at),
            _ => {}
        }
    }

    fn as_slice(&self) -> &[u32] {
        match self {
            Positions::One(at) => std::slice::from_ref(at),
            Positions::Many(v) => v.as_slice(),
        }
    }
}

fn add_position(index: &mut HashMap<u64, Positions, Fx>, hash: u64, at: u32) {
    index
        .entry(hash)
        .and_modify(|p| p.push(at))
        .or_insert(Positions::One(at));
}

/// Why a keyed write (a cancel, a capture) did not happen, and whether its answer is kept under
/// the request's key.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Not saved (the key is forgotten): an unknown intent, or a refusal Stripe does not keep.
    Forget(ApiError),
    /// Saved under the key, as Stripe saves the answer of a request that started executing: a
    /// retry with the same key replays this error even once the state would allow the request.
    Save(ApiError),
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

/// How a create's answer is kept under its key (see [`Engine::finish_key_created`]).
pub(crate) struct Created(Kept);

impl Created {
    /// An answer kept as sent (an expanded one: see [`Engine::create_expanded`]).
    fn answer(saved: Saved) -> Self {
        Created(Kept::Answer(Box::new(saved)))
    }

    /// The created PaymentIntent's position, while the answer is kept as that intent.
    fn position(&self) -> Option<usize> {
        match &self.0 {
            Kept::Created { at, .. } => Some(*at as usize),
            Kept::Answer(_) => None,
        }
    }
}

/// A create's answer: the PaymentIntent's JSON (`json`, its text), or the card error carrying it.
fn created_answer(pi: &PaymentIntent, json: String, declined: Option<Decline>) -> Saved {
    match declined {
        None => Saved {
            status: 200,
            body: Bytes::from(json),
            should_retry: None,
        },
        Some(d) => declined_answer(pi, d),
    }
}

/// A declined create's `402 card_error` carrying the PaymentIntent (`ApiError`'s envelope, and
/// `decline_code`, `charge`, `payment_intent`), its keys sorted as a `serde_json::Map` sorts
/// them, written without building the PaymentIntent as a `Value` tree.
fn declined_answer(pi: &PaymentIntent, d: Decline) -> Saved {
    #[derive(serde::Serialize)]
    struct Body<'a> {
        error: CardErrorJson<'a>,
    }
    #[derive(serde::Serialize)]
    struct CardErrorJson<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        charge: Option<&'a str>,
        code: &'static str,
        decline_code: &'static str,
        doc_url: String,
        message: &'static str,
        payment_intent: crate::pi::PaymentIntentJson<'a>,
        #[serde(rename = "type")]
        kind: &'static str,
    }
    let body = Body {
        error: CardErrorJson {
            charge: pi.latest_charge.as_deref(),
            code: d.code,
            decline_code: d.decline_code,
            doc_url: crate::wire::doc_url(d.code),
            message: d.message,
            payment_intent: pi.view(),
            kind: "card_error",
        },
    };
    Saved {
        status: 402,
        body: Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
        should_retry: None,
    }
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

/// A ledger row's identity and state, borrowed from the engine while a reader looks at it
/// ([`crate::StripeSim::each_ledger_row`]): what [`LedgerEntry`] holds, without copying it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LedgerRowView<'a> {
    pub id: &'a str,
    pub operation_id: Option<&'a str>,
    pub idempotency_key: Option<&'a str>,
    pub status: &'a str,
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
    /// `POST /v1/payment_intents/{id}/cancel`
    pub cancel: u64,
    /// `POST /v1/payment_intents/{id}/capture`
    pub capture: u64,
    /// `POST /v1/refunds`
    pub refund: u64,
    /// `POST /v1/refunds/{id}/cancel`
    pub refund_cancel: u64,
    /// `GET /v1/refunds/{id}` and `GET /v1/refunds`
    pub refund_read: u64,
    /// `GET /v1/payment_intents` (a list by creation time)
    pub list: u64,
    /// `GET /v1/disputes/{id}` and `GET /v1/disputes`
    pub dispute_read: u64,
    /// `POST /v1/disputes/{id}` and `POST /v1/disputes/{id}/close`
    pub dispute_update: u64,
}

/// All mutable state, kept behind one mutex by [`crate::StripeSim`].
/// PaymentIntents in creation order, in chunks of a fixed size: growing never moves them (a
/// doubling vector of ten million would copy gigabytes, and hold both copies while it did).
///
/// Beside them, the JSON text of recently written ones (direct-mapped by position, a few
/// thousand): a retrieve soon after a change (the events function checking an event) reads the
/// text instead of writing it again. Any mutable access to a PaymentIntent drops its text.
#[derive(Default)]
struct Intents {
    chunks: Vec<Vec<PaymentIntent>>,
    len: usize,
    json: Vec<Option<(usize, String)>>,
    /// Whether creation times never went down from one intent to the next (the clock was never
    /// set back between creates): a list by creation time then finds its range by bisection.
    out_of_order: bool,
}

const CHUNK: usize = 1 << 14;

/// How many PaymentIntents' JSON text [`Intents`] keeps.
const JSON_SLOTS: usize = 1 << 12;

impl Intents {
    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, pi: PaymentIntent) {
        if self.len > 0 && pi.created_ms < self[self.len - 1].created_ms {
            self.out_of_order = true;
        }
        if self.len % CHUNK == 0 {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        if let Some(chunk) = self.chunks.last_mut() {
            chunk.push(pi);
            self.len += 1;
        }
    }

    fn get(&self, at: usize) -> Option<&PaymentIntent> {
        self.chunks.get(at / CHUNK)?.get(at % CHUNK)
    }

    /// The JSON text of the PaymentIntent at `at` (`PaymentIntent::json_string`), kept.
    fn json(&mut self, at: usize) -> String {
        if let Some(Some((kept, text))) = self.json.get(at % JSON_SLOTS) {
            if *kept == at {
                return text.clone();
            }
        }
        let text = self[at].json_string();
        self.keep_json(at, &text);
        text
    }

    /// Keeps `text` as the JSON of the PaymentIntent at `at`, as it is now.
    fn keep_json(&mut self, at: usize, text: &str) {
        if self.json.is_empty() {
            self.json.resize(JSON_SLOTS, None);
        }
        self.json[at % JSON_SLOTS] = Some((at, text.to_owned()));
    }
}

impl std::ops::Index<usize> for Intents {
    type Output = PaymentIntent;
    fn index(&self, at: usize) -> &PaymentIntent {
        &self.chunks[at / CHUNK][at % CHUNK]
    }
}

impl std::ops::IndexMut<usize> for Intents {
    /// The PaymentIntent may change: its kept JSON text is dropped.
    fn index_mut(&mut self, at: usize) -> &mut PaymentIntent {
        if let Some(slot) = self.json.get_mut(at % JSON_SLOTS) {
            if slot.as_ref().is_some_and(|(kept, _)| *kept == at) {
                *slot = None;
            }
        }
        &mut self.chunks[at / CHUNK][at % CHUNK]
    }
}

pub(crate) struct Engine {
    pis: Intents,
    /// PaymentIntent positions by the hash of their id.
    index: HashMap<u64, Positions, Fx>,
    keys: HashMap<Arc<str>, KeyEntry, Fx>,
    /// Saved keys by (saved at, sequence): pruning takes the expired ones off the front instead of
    /// scanning every key on every request.
    expiry: BTreeMap<(i64, u64), Arc<str>>,
    expiry_seq: u64,
    /// PaymentIntent positions by the hash of a metadata (key, value), for search.
    by_metadata: HashMap<u64, Positions, Fx>,
    pub(crate) faults: FaultState,
    /// Rate limits (token buckets), their refusals, and the create latency generator.
    pub(crate) capacity: CapacityState,
    pub(crate) requests: RequestCounts,
    pub(crate) search_lag_ms: i64,
    pub(crate) settle_ms: i64,
    ids: SmallRng,
    /// Webhook events waiting for delivery (see [`crate::webhooks`]).
    pub(crate) webhooks: Outbox,
    /// Refunds and how long their transitions take.
    pub(crate) refunds: Refunds,
    /// Disputes, their timers and how long their steps take.
    pub(crate) disputes: Disputes,
    /// How long after its creation Stripe cancels an uncaptured PaymentIntent (7 days).
    pub(crate) uncaptured_expiry_ms: i64,
    /// Authorizations waiting for a capture, by (expiry, position): the clock's advance cancels
    /// the due ones without scanning every intent.
    holds: BTreeSet<(i64, u32)>,
    /// The account's default API version: what Stripe's own actions (a lapse) follow, and what
    /// a request without `Stripe-Version` answers in.
    pub(crate) api_version: ApiVersion,
}

impl Engine {
    pub(crate) fn new(
        seed: u64,
        faults: FaultConfig,
        capacity: Capacity,
        search_lag_ms: i64,
        settle_ms: i64,
        refund_settle_ms: i64,
        uncaptured_expiry_ms: i64,
    ) -> Self {
        Engine {
            disputes: Disputes::new(DisputeTiming::default()),
            uncaptured_expiry_ms,
            holds: BTreeSet::new(),
            refunds: Refunds::new(refund_settle_ms),
            pis: Intents::default(),
            index: HashMap::default(),
            keys: HashMap::default(),
            expiry: BTreeMap::new(),
            expiry_seq: 0,
            by_metadata: HashMap::default(),
            faults: FaultState::new(seed, faults),
            capacity: CapacityState::new(seed, capacity),
            requests: RequestCounts::default(),
            search_lag_ms,
            settle_ms,
            ids: SmallRng::seed_from_u64(seed ^ 0x05EE_D1D5_u64),
            webhooks: Outbox::new(seed, WebhookConfig::default()),
            api_version: ApiVersion::default(),
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
        let version = std::mem::take(&mut self.api_version);
        let dispute_timing = self.disputes.timing;
        *self = Engine::new(
            seed,
            FaultConfig::default(),
            capacity,
            self.search_lag_ms,
            self.settle_ms,
            self.refunds.settle_ms,
            self.uncaptured_expiry_ms,
        );
        // The endpoint and its secret survive a reset, like the API key.
        self.webhooks = webhooks;
        self.api_version = version;
        self.disputes.timing = dispute_timing;
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
                self.keys.get(&*key).map(|e| &e.state),
                Some(KeyState::Done { saved_ms, .. }) if *saved_ms == saved_at
            ) {
                self.keys.remove(&*key);
            }
        }
    }

    /// Number of idempotency keys currently held (saved or in flight).
    pub(crate) fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// The idempotency layer. `params` compare as a sorted multimap.
    pub(crate) fn begin_key(
        &mut self,
        key: &str,
        params: &[(String, String)],
        now_ms: i64,
    ) -> Idem {
        self.prune_keys(now_ms);
        let mut sorted: Vec<&(String, String)> = params.iter().collect();
        sorted.sort();
        let encoded = encode_params(&sorted);
        match self.keys.get(key) {
            Some(e) => match &e.state {
                KeyState::InFlight => Idem::InFlight,
                KeyState::Done { saved, .. } if e.params == encoded => {
                    Idem::Replay(self.render(saved))
                }
                KeyState::Done { .. } => Idem::Mismatch,
            },
            None => {
                self.keys.insert(
                    Arc::from(key),
                    KeyEntry {
                        params: encoded,
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
        self.keep_answer(key, Kept::Answer(Box::new(saved)), now_ms);
    }

    /// Saves a create's own answer under its in-flight key: [`Engine::create`]'s [`Created`].
    pub(crate) fn finish_key_created(&mut self, key: &str, created: Created, now_ms: i64) {
        self.keep_answer(key, created.0, now_ms);
    }

    fn keep_answer(&mut self, key: &str, saved: Kept, now_ms: i64) {
        let Some((name, _)) = self.keys.get_key_value(key) else {
            return;
        };
        let name = name.clone();
        if let Some(e) = self.keys.get_mut(key) {
            e.state = KeyState::Done {
                saved,
                saved_ms: now_ms,
            };
        }
        self.expiry_seq += 1;
        self.expiry.insert((now_ms, self.expiry_seq), name);
    }

    /// The bytes of a kept answer.
    fn render(&self, kept: &Kept) -> Saved {
        match kept {
            Kept::Answer(saved) => Saved::clone(saved),
            Kept::Created { at, declined } => {
                let pi = &self.pis[*at as usize];
                created_answer(pi, pi.json_string(), declined.as_deref().copied())
            }
        }
    }

    /// Before the PaymentIntent at `at` changes: the answer its create saved under its key is
    /// rendered now, while it still says what that answer said.
    fn freeze_answer(&mut self, at: usize) {
        let Some(key) = self
            .pis
            .get(at)
            .and_then(|pi| pi.idempotency_key.as_deref())
        else {
            return;
        };
        let kept = match self.keys.get(key).map(|e| &e.state) {
            Some(KeyState::Done {
                saved: kept @ Kept::Created { at: of, .. },
                ..
            }) if *of as usize == at => kept.clone(),
            _ => return,
        };
        let saved = self.render(&kept);
        let key = key.to_owned();
        if let Some(KeyEntry {
            state: KeyState::Done { saved: slot, .. },
            ..
        }) = self.keys.get_mut(key.as_str())
        {
            *slot = Kept::Answer(Box::new(saved));
        }
    }

    /// Applies the due settlement of the PaymentIntent at `at` (its saved answer frozen first).
    fn settle_at(&mut self, at: usize, now_ms: i64) {
        let due = self.pis[at]
            .settlement
            .as_ref()
            .is_some_and(|s| now_ms >= s.at_ms);
        if due {
            self.freeze_answer(at);
            let settled_at = self.pis[at].settlement.as_ref().map_or(now_ms, |s| s.at_ms);
            self.pis[at].settle(now_ms);
            self.track_hold(at, settled_at);
        }
        self.expire_if_due(at, now_ms);
    }

    /// Records the hold of the PaymentIntent at `at` if it was just authorized (at `now_ms`) for
    /// a manual capture, so its expiry can find it.
    fn track_hold(&mut self, at: usize, now_ms: i64) {
        let expiry = self.uncaptured_expiry_ms;
        if let Some(expires) = self.pis[at].hold_authorized(now_ms, expiry) {
            self.holds.insert((expires, at as u32));
        }
    }

    /// Forgets the hold of the PaymentIntent at `at` (captured or canceled: it no longer expires).
    fn release_hold(&mut self, at: usize) {
        if let Some(hold) = &self.pis[at].hold {
            self.holds.remove(&(hold.expires_ms, at as u32));
        }
    }

    /// Stripe cancels an uncaptured PaymentIntent at its hold's expiry (`cancellation_reason:
    /// automatic`, the hold released): done here when it is first touched at or after that
    /// moment, dated the moment itself, with its `payment_intent.canceled` and `charge.expired`
    /// events.
    fn expire_if_due(&mut self, at: usize, now_ms: i64) {
        let pi = &self.pis[at];
        let Some(expires) = pi.hold.as_ref().map(|h| h.expires_ms) else {
            return;
        };
        if pi.status != "requires_capture" || now_ms < expires {
            return;
        }
        self.release_hold(at);
        self.freeze_answer(at);
        self.pis[at].cancel(Some("automatic"), expires);
        let json = self.pis[at].json_string();
        self.webhooks.emit("canceled", &json, false, expires);
        // Stripe's event for an uncaptured charge that expired.
        if self.webhooks.enabled() {
            if let Some(charge) = self.charge_json(at, expires) {
                self.webhooks
                    .emit_object("charge.expired", &charge, expires);
            }
        }
        if self.api_version.makes_remainder_refunds() {
            self.refund_released(at, expires);
        }
    }

    /// Cancels every uncaptured PaymentIntent whose hold expired by `now_ms` (the clock moved).
    pub(crate) fn expire_due(&mut self, now_ms: i64) {
        while let Some(&(expires, at)) = self.holds.first() {
            if expires > now_ms {
                break;
            }
            self.holds.pop_first();
            self.settle_at(at as usize, now_ms);
        }
        self.disputes_due(now_ms);
    }

    /// When the next uncaptured PaymentIntent expires (simulated unix ms), if any waits.
    pub(crate) fn next_expiry_ms(&self) -> Option<i64> {
        let hold = self.holds.first().map(|(expires, _)| *expires);
        match (hold, self.disputes.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The position of the PaymentIntent `id`.
    fn position(&self, id: &str) -> Option<usize> {
        self.index
            .get(&hash_of(&[id]))?
            .as_slice()
            .iter()
            .map(|at| *at as usize)
            .find(|at| self.pis[*at].id == id)
    }

    /// Creates a PaymentIntent and returns the response Stripe would send, and how to keep it
    /// under the request's key ([`Engine::finish_key_created`]).
    pub(crate) fn create(
        &mut self,
        params: CreateParams,
        idempotency_key: Option<&str>,
        now_ms: i64,
    ) -> (Saved, Created) {
        let id = random_id(&mut self.ids, "pi_", 24);
        let secret = random_id(&mut self.ids, &format!("{id}_secret_"), 25);
        let charge = random_id(&mut self.ids, "ch_", 24);
        let (mut pi, outcome) = PaymentIntent::create(
            id,
            secret,
            charge,
            params,
            idempotency_key.map(str::to_string),
            now_ms,
            self.settle_ms,
        );
        let expires = pi.hold_authorized(now_ms, self.uncaptured_expiry_ms);
        let at = self.pis.len();
        let at32 = u32::try_from(at).unwrap_or(u32::MAX);
        for (k, v) in pi.params.metadata.iter() {
            add_position(&mut self.by_metadata, hash_of(&[k, v]), at32);
        }
        add_position(&mut self.index, hash_of(&[&pi.id]), at32);
        // Written once: the create's answer and its event carry the same state.
        let json = pi.json_string();
        if self.webhooks.enabled() {
            self.webhooks.emit(pi.status, &json, true, now_ms);
            if let Some(settlement) = &pi.settlement {
                // The event Stripe sends when `processing` ends, queued for that moment.
                let mut settled = pi.clone();
                settled.settle(settlement.at_ms);
                self.webhooks.emit(
                    settled.status,
                    &settled.json_string(),
                    false,
                    settlement.at_ms,
                );
            }
        }
        let declined = match outcome {
            CreateOutcome::Ok => None,
            CreateOutcome::Declined {
                code,
                decline_code,
                message,
            } => Some(Decline {
                code,
                decline_code,
                message,
            }),
        };
        let paid = pi.status == "succeeded";
        self.pis.push(pi);
        self.pis.keep_json(at, &json);
        if let Some(expires) = expires {
            self.holds.insert((expires, at32));
        }
        if paid {
            self.schedule_card_dispute(at, now_ms);
        }
        let saved = created_answer(&self.pis[at], json, declined);
        (
            saved,
            Created(Kept::Created {
                at: at32,
                declined: declined.map(Box::new),
            }),
        )
    }

    /// The current JSON of one PaymentIntent, settled as of `now_ms`.
    pub(crate) fn retrieve(&mut self, id: &str, now_ms: i64) -> Option<String> {
        let at = self.position(id)?;
        self.settle_at(at, now_ms);
        Some(self.pis.json(at))
    }

    /// `text`, the JSON of the PaymentIntent `id`, with its `latest_charge` expanded into the
    /// charge object when `expand` (a request's `expand[]=latest_charge`); as it is when not
    /// asked, or when there is no charge to expand.
    pub(crate) fn expanding(
        &mut self,
        id: &str,
        text: String,
        expand: bool,
        now_ms: i64,
    ) -> String {
        if !expand {
            return text;
        }
        let Some(at) = self.position(id) else {
            return text;
        };
        self.with_charge(at, &text, now_ms).unwrap_or(text)
    }

    /// `text` (the JSON of the PaymentIntent at `at`) with the charge object in `latest_charge`;
    /// `None` when it has no charge.
    fn with_charge(&mut self, at: usize, text: &str, now_ms: i64) -> Option<String> {
        let charge = self.charge_json(at, now_ms)?;
        // The charge's id appears once, as `latest_charge`'s value: spliced as text (every
        // retrieve of the charge-once client expands; a simulation makes millions of them).
        let id = self.pis[at].latest_charge.as_deref()?;
        let named = format!("\"latest_charge\":\"{id}\"");
        if text.contains(&named) {
            return Some(text.replacen(&named, &format!("\"latest_charge\":{charge}"), 1));
        }
        let mut pi: serde_json::Value = serde_json::from_str(text).ok()?;
        pi["latest_charge"] = serde_json::from_str(&charge).ok()?;
        Some(pi.to_string())
    }

    /// [`Engine::create`] answering with `latest_charge` expanded (`expand[]=latest_charge`), as
    /// Stripe expands on any call: a manual create's answer states its `capture_before`. The
    /// expanded answer is kept under the key as sent (not re-rendered from the intent, whose
    /// charge changes with refunds while the intent does not), so a replay answers the same
    /// bytes. A declined create's `402` carries the intent unexpanded.
    pub(crate) fn create_expanded(
        &mut self,
        params: CreateParams,
        idempotency_key: Option<&str>,
        now_ms: i64,
    ) -> (Saved, Created) {
        let (saved, created) = self.create(params, idempotency_key, now_ms);
        let Some(at) = created.position().filter(|_| saved.status == 200) else {
            return (saved, created);
        };
        let text = String::from_utf8_lossy(&saved.body).into_owned();
        let Some(expanded) = self.with_charge(at, &text, now_ms) else {
            return (saved, created);
        };
        let saved = Saved::ok(expanded);
        let kept = Created::answer(saved.clone());
        (saved, kept)
    }

    /// Cancels the PaymentIntent `id` (settled as of `now_ms` first), if its status allows it:
    /// its JSON after the cancel, and a `payment_intent.canceled` event.
    pub(crate) fn cancel(
        &mut self,
        id: &str,
        reason: Option<&'static str>,
        version: &ApiVersion,
        now_ms: i64,
    ) -> Result<String, ApiError> {
        let at = self
            .position(id)
            .ok_or_else(|| ApiError::no_such_payment_intent(id))?;
        self.settle_at(at, now_ms);
        let status = self.pis[at].status;
        if !cancelable(status) {
            return Err(ApiError::unexpected_state(
                "cancel",
                status,
                "requires_payment_method, requires_capture, requires_confirmation, requires_action",
            ));
        }
        self.freeze_answer(at);
        // Canceling an authorization releases its hold.
        self.release_hold(at);
        self.pis[at].cancel(reason, now_ms);
        let json = self.pis[at].json_string();
        self.pis.keep_json(at, &json);
        self.webhooks.emit("canceled", &json, false, now_ms);
        if version.makes_remainder_refunds() {
            self.refund_released(at, now_ms);
        }
        self.schedule_card_dispute(at, now_ms);
        Ok(json)
    }

    /// The customer confirms the PaymentIntent `id` with its client secret and pays (Stripe's
    /// recovery for a declined off-session payment, `authentication_required`): from
    /// `requires_payment_method`, `requires_confirmation` or `requires_action` to `succeeded`,
    /// with a `payment_intent.succeeded` event. A canceled (or any other) intent is refused.
    pub(crate) fn confirm_by_customer(
        &mut self,
        id: &str,
        now_ms: i64,
    ) -> Result<String, ApiError> {
        let at = self
            .position(id)
            .ok_or_else(|| ApiError::no_such_payment_intent(id))?;
        self.settle_at(at, now_ms);
        let status = self.pis[at].status;
        if !confirmable(status) {
            return Err(ApiError::unexpected_state(
                "confirm",
                status,
                "requires_payment_method, requires_confirmation, requires_action",
            ));
        }
        let charge = random_id(&mut self.ids, "ch_", 24);
        self.freeze_answer(at);
        self.pis[at].confirm_by_customer(charge);
        self.track_hold(at, now_ms);
        let json = self.pis[at].json_string();
        self.pis.keep_json(at, &json);
        let status = self.pis[at].status;
        self.webhooks.emit(status, &json, false, now_ms);
        Ok(json)
    }

    /// `POST /v1/payment_intents/{id}/capture`: captures `amount_to_capture` (default: all) of a
    /// `requires_capture` intent, settled and expired as of `now_ms` first: `succeeded`, the
    /// rest of the hold released, `amount_received` the captured amount, with the
    /// `payment_intent.succeeded` and `charge.captured` events. An unknown intent is not saved
    /// under the key; a status that cannot be captured (captured, canceled, expired) or more than
    /// is capturable is Stripe's `400`, saved under it; an amount in a digit Stripe does not
    /// capture in the currency ([`ApiError::indivisible`]) is a `400` not saved.
    pub(crate) fn capture(
        &mut self,
        id: &str,
        p: CaptureParams,
        version: &ApiVersion,
        now_ms: i64,
    ) -> Result<String, Refusal> {
        let at = self
            .position(id)
            .ok_or_else(|| Refusal::Forget(ApiError::no_such_payment_intent(id)))?;
        self.settle_at(at, now_ms);
        let pi = &self.pis[at];
        if pi.status != "requires_capture" {
            return Err(Refusal::Save(ApiError::unexpected_state(
                "capture",
                pi.status,
                "requires_capture",
            )));
        }
        let capturable = pi.amount_capturable();
        let amount = p.amount_to_capture.unwrap_or(capturable);
        if amount > capturable {
            return Err(Refusal::Save(ApiError::invalid(
                "amount_too_large",
                "amount_to_capture",
                format!("The amount to capture ({amount}) is greater than the amount capturable ({capturable})."),
            )));
        }
        // Validation: Stripe saves no result under the key for it.
        if let Some(refused) =
            ApiError::indivisible("amount_to_capture", amount, &pi.params.currency)
        {
            return Err(Refusal::Forget(refused));
        }
        self.freeze_answer(at);
        self.release_hold(at);
        self.merge_metadata(at, &p.metadata);
        self.pis[at].capture(amount);
        let json = self.pis[at].json_string();
        self.pis.keep_json(at, &json);
        self.webhooks.emit("succeeded", &json, false, now_ms);
        if self.webhooks.enabled() {
            if let Some(charge) = self.charge_json(at, now_ms) {
                self.webhooks
                    .emit_object("charge.captured", &charge, now_ms);
            }
        }
        if version.makes_remainder_refunds() {
            self.refund_released(at, now_ms);
        }
        self.schedule_card_dispute(at, now_ms);
        Ok(json)
    }

    /// Applies checked `metadata[...]` parameters to the PaymentIntent at `at`, indexing the
    /// pairs it did not have for search (an intent is indexed once per pair).
    fn merge_metadata(&mut self, at: usize, metadata: &[(String, String)]) {
        let at32 = u32::try_from(at).unwrap_or(u32::MAX);
        for (k, v) in metadata {
            let mine = &mut self.pis[at].params.metadata;
            let before = mine
                .iter()
                .map(|(k, v)| hash_of(&[k, v]))
                .collect::<Vec<_>>();
            // Checked by `parse_capture`: cannot fail.
            let _ = crate::pi::metadata_param(mine, k, v);
            let added: Vec<u64> = mine
                .iter()
                .map(|(k, v)| hash_of(&[k, v]))
                .filter(|h| !before.contains(h))
                .collect();
            for hash in added {
                add_position(&mut self.by_metadata, hash, at32);
            }
        }
    }

    /// Matching PaymentIntents visible to search (older than the lag),
    /// newest first.
    pub(crate) fn search(&mut self, q: &MetadataQuery, now_ms: i64) -> Vec<String> {
        let lag = self.search_lag_ms;
        self.matching(&q.key, &q.value)
            .into_iter()
            .rev()
            .filter_map(|at| {
                if now_ms < self.pis[at].created_ms.saturating_add(lag) {
                    return None;
                }
                self.settle_at(at, now_ms);
                Some(self.pis.json(at))
            })
            .collect()
    }

    /// The positions of the PaymentIntents whose `metadata[key]` is `value`, oldest first.
    fn matching(&self, key: &str, value: &str) -> Vec<usize> {
        let Some(at) = self.by_metadata.get(&hash_of(&[key, value])) else {
            return Vec::new();
        };
        at.as_slice()
            .iter()
            .map(|at| *at as usize)
            .filter(|at| self.pis[*at].params.metadata.get(key).map(String::as_str) == Some(value))
            .collect()
    }

    /// The ledger row of the PaymentIntent at `at`, settled as of `now_ms`.
    fn entry(&mut self, at: usize, now_ms: i64) -> LedgerEntry {
        self.settle_at(at, now_ms);
        let pi = &self.pis[at];
        LedgerEntry {
            id: pi.id.clone(),
            operation_id: pi.params.metadata.get("operation_id").cloned(),
            idempotency_key: pi.idempotency_key.clone(),
            amount: pi.params.amount,
            currency: pi.params.currency.clone(),
            status: pi.status.to_owned(),
            payment_method: pi.params.payment_method.clone(),
            customer: pi.params.customer.clone(),
            created_ms: pi.created_ms,
        }
    }

    /// Every PaymentIntent ever created, oldest first.
    pub(crate) fn ledger(&mut self, now_ms: i64) -> Vec<LedgerEntry> {
        (0..self.pis.len())
            .map(|at| self.entry(at, now_ms))
            .collect()
    }

    /// Calls `f` with each ledger row, borrowed, oldest first (`key`/`value`: only those whose
    /// `metadata[key]` is `value`), statuses settled as of `now_ms`.
    pub(crate) fn each_row(
        &mut self,
        only: Option<(&str, &str)>,
        now_ms: i64,
        f: &mut dyn FnMut(LedgerRowView<'_>),
    ) {
        let mut visit = |e: &mut Engine, at: usize| {
            e.settle_at(at, now_ms);
            let pi = &e.pis[at];
            f(LedgerRowView {
                id: &pi.id,
                operation_id: pi.params.metadata.get("operation_id").map(String::as_str),
                idempotency_key: pi.idempotency_key.as_deref(),
                status: pi.status,
            });
        };
        match only {
            Some((key, value)) => {
                for at in self.matching(key, value) {
                    visit(self, at);
                }
            }
            None => {
                for at in 0..self.pis.len() {
                    visit(self, at);
                }
            }
        }
    }

    /// Sizes the PaymentIntent indexes for `payment_intents` more (by id, and by each of
    /// `metadata_keys` metadata pairs), so a long run does not rehash them as they grow.
    pub(crate) fn reserve(&mut self, payment_intents: usize, metadata_keys: usize) {
        self.index.reserve(payment_intents);
        self.by_metadata
            .reserve(payment_intents.saturating_mul(metadata_keys));
    }

    /// PaymentIntents created so far.
    pub(crate) fn created(&self) -> usize {
        self.pis.len()
    }

    /// Forces a status (cancels any pending settlement).
    pub(crate) fn set_status(&mut self, id: &str, status: &str, now_ms: i64) -> bool {
        if !STATUSES.contains(&status) {
            return false;
        }
        let Some(status) = STATUSES.iter().copied().find(|s| *s == status) else {
            return false;
        };
        let Some(at) = self.position(id) else {
            return false;
        };
        self.freeze_answer(at);
        let pi = &mut self.pis[at];
        pi.settlement = None;
        pi.status = status;
        let pi = &self.pis[at];
        self.webhooks
            .emit(pi.status, &pi.json_string(), false, now_ms);
        true
    }

    pub(crate) fn injected(&self) -> BTreeMap<crate::FaultKind, u64> {
        self.faults.injected.clone()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn params(pm: &str, order: &str) -> CreateParams {
        let form: Vec<(String, String)> = [
            ("amount", "4200"),
            ("currency", "eur"),
            ("payment_method", pm),
            ("confirm", "true"),
            ("metadata[order_id]", order),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        CreateParams::parse(&form).unwrap()
    }

    /// A declined create's answer, written directly, is byte for byte what the `ApiError` path
    /// wrote from a `Value` of the PaymentIntent (its card branch, kept here as the oracle): for
    /// each decline card, with and without a charge.
    #[test]
    fn a_declined_answer_is_the_api_errors_text() {
        let mut e = Engine::new(
            1,
            FaultConfig::default(),
            Capacity::default(),
            0,
            60_000,
            60_000,
            crate::pi::UNCAPTURED_EXPIRY_MS,
        );
        for pm in [
            "pm_card_chargeDeclined",
            "pm_card_chargeDeclinedInsufficientFunds",
        ] {
            let (saved, _) = e.create(params(pm, "o-\"q\u{e9}"), Some("k"), 1_000);
            let at = e.pis.len() - 1;
            for charge in [e.pis[at].latest_charge.clone(), None] {
                e.pis[at].latest_charge = charge;
                let pi = &e.pis[at];
                let (code, decline_code, message) = match crate::pi::test_card(pm) {
                    Some(crate::pi::TestCard::Declined {
                        decline_code,
                        message,
                    }) => ("card_declined", decline_code, message),
                    _ => unreachable!(),
                };
                let d = Decline {
                    code,
                    decline_code,
                    message,
                };
                let mut error = serde_json::Map::new();
                error.insert("message".into(), message.into());
                error.insert("type".into(), "card_error".into());
                error.insert("code".into(), code.into());
                error.insert("doc_url".into(), crate::wire::doc_url(code).into());
                error.insert("decline_code".into(), decline_code.into());
                if let Some(c) = &pi.latest_charge {
                    error.insert("charge".into(), c.as_str().into());
                }
                error.insert("payment_intent".into(), pi.to_json());
                let old = serde_json::json!({ "error": error }).to_string();
                let new = declined_answer(pi, d);
                assert_eq!(std::str::from_utf8(&new.body).unwrap(), old);
                // A 402 card_error: Stripe sends no Stripe-Should-Retry (`ApiError::should_retry`).
                assert_eq!((new.status, new.should_retry), (402, None));
            }
            assert_eq!(saved.status, 402);
        }
    }

    /// The charge spliced into an intent's text as text is what splicing it into the parsed
    /// JSON gave: for an automatic charge, an authorization, and a partial capture.
    #[test]
    fn an_expanded_charge_spliced_as_text_is_the_parsed_splice() {
        let mut e = Engine::new(
            1,
            FaultConfig::default(),
            Capacity::default(),
            0,
            60_000,
            60_000,
            crate::pi::UNCAPTURED_EXPIRY_MS,
        );
        let mut manual = params("pm_card_visa", "o-manual");
        manual.manual_capture = true;
        e.create(params("pm_card_visa", "o-auto"), None, 1_000);
        e.create(manual.clone(), None, 1_000);
        e.create(manual, None, 1_000);
        let third = e.pis[2].id.clone();
        let capture = CaptureParams {
            amount_to_capture: Some(600),
            ..CaptureParams::default()
        };
        assert!(e
            .capture(&third, capture, &ApiVersion::default(), 2_000)
            .is_ok());
        for at in 0..3 {
            let id = e.pis[at].id.clone();
            let text = e.retrieve(&id, 3_000).unwrap();
            let charge = e.charge_json(at, 3_000).unwrap();
            let mut oracle: Value = serde_json::from_str(&text).unwrap();
            oracle["latest_charge"] = serde_json::from_str(&charge).unwrap();
            assert_eq!(e.retrieve_expanded(&id, 3_000).unwrap(), oracle.to_string());
        }
    }

    /// A capture of a kwd authorization in a digit Stripe does not capture is refused (400, the
    /// parameter named, nothing saved, the hold untouched); its twin of 1.000 captures.
    #[test]
    fn a_capture_in_a_digit_stripe_does_not_move_is_refused() {
        let mut e = Engine::new(
            1,
            FaultConfig::default(),
            Capacity::default(),
            0,
            60_000,
            60_000,
            crate::pi::UNCAPTURED_EXPIRY_MS,
        );
        let mut manual = params("pm_card_visa", "o-kwd");
        manual.manual_capture = true;
        manual.currency = "kwd".into();
        manual.amount = 2000;
        e.create(manual, None, 1_000);
        let id = e.pis[0].id.clone();
        let capture = |n| CaptureParams {
            amount_to_capture: Some(n),
            ..CaptureParams::default()
        };
        match e.capture(&id, capture(1005), &ApiVersion::default(), 2_000) {
            Err(Refusal::Forget(err)) => {
                assert_eq!(
                    (err.status, err.param.as_deref()),
                    (400, Some("amount_to_capture"))
                );
            }
            other => panic!("refused, not saved: {other:?}"),
        }
        assert_eq!(e.pis[0].status, "requires_capture");
        let captured: Value = serde_json::from_str(
            &e.capture(&id, capture(1000), &ApiVersion::default(), 2_000)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (
                captured["status"].as_str(),
                captured["amount_received"].as_i64()
            ),
            (Some("succeeded"), Some(1000))
        );
    }

    /// The kept JSON text is always the PaymentIntent's as it is now: after a settlement, a
    /// forced status, and for positions that share a slot.
    #[test]
    fn a_retrieve_answers_the_current_state_through_the_kept_text() {
        let mut e = Engine::new(
            1,
            FaultConfig::default(),
            Capacity::default(),
            0,
            60_000,
            60_000,
            crate::pi::UNCAPTURED_EXPIRY_MS,
        );
        let (_, _) = e.create(params("pm_card_processing_succeeds", "o-0"), None, 1_000);
        let id = e.pis[0].id.clone();
        let text = |e: &mut Engine, now| -> Value {
            serde_json::from_str(&e.retrieve(&id, now).unwrap()).unwrap()
        };
        assert_eq!(text(&mut e, 2_000)["status"], "processing");
        assert_eq!(text(&mut e, 2_000)["status"], "processing", "kept");
        assert_eq!(text(&mut e, 61_000)["status"], "succeeded", "settled since");
        assert!(e.set_status(&id, "canceled", 62_000));
        assert_eq!(text(&mut e, 62_000)["status"], "canceled");
        // Positions 0 and JSON_SLOTS share a slot: each still answers its own text.
        for i in 1..=JSON_SLOTS {
            e.create(params("pm_card_visa", &format!("o-{i}")), None, 70_000);
        }
        let other = e.pis[JSON_SLOTS].id.clone();
        for _ in 0..2 {
            assert_eq!(text(&mut e, 80_000)["id"], id.as_str());
            let o: Value = serde_json::from_str(&e.retrieve(&other, 80_000).unwrap()).unwrap();
            assert_eq!(o["metadata"]["order_id"], format!("o-{JSON_SLOTS}"));
        }
        for at in [0, 1, JSON_SLOTS / 2, JSON_SLOTS] {
            let pi_id = e.pis[at].id.clone();
            assert_eq!(e.retrieve(&pi_id, 80_000).unwrap(), e.pis[at].json_string());
        }
    }
}
