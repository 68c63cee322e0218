//! [`SimStore`]: the operation table for a simulation of millions of orders. Its writes are the
//! store's rules (`charge_core::store_rules`, which `charge_once::memory::MemoryStore` calls and
//! DynamoDB sends as condition expressions), applied under one lock; what it adds is what makes it
//! scale: the unknown index is a sorted set kept up to date on every write
//! (a page costs its length, not the table's), and lookups by operation id use a map instead of a
//! scan. It passes the store contract suite (`tests/store_contract.rs`).
//!
//! It also stands in for the table's stream and the `notify` relay: every committed
//! write is offered to the relay's decision (`outcome_of`'s, as [`outcome_change`]) with the
//! images before and after it, under the same lock, in commit order, and the outcome events that
//! would be published are counted per operation. The
//! judge then checks that every settled operation published its outcome's `event_id` and that no
//! event contradicts the record.
//!
//! Records of other shapes: with the `legacy_record` fault, an order's record is kept
//! as the DynamoDB item release 2026-11-29 wrote (the attributes of `operation_to_item`, without
//! `requested_by`, which that release did not record) and what the store answers for it is always
//! what the real reader, `operation_from_item`, makes of that item: parsed at the put and again
//! after every write, so a regression in the reader shows up here. With `unreadable_record`, the
//! record is corrupted right after the checkout's put (one attribute, as a bad hand edit leaves
//! it): every call on it fails with the real reader's error (`malformed item: <field>: <why>`,
//! naming the key as `StoreError::unreadable`), and an index page lists it in `Page::unreadable`
//! instead of failing, as `DynamoStore` does. An operator repairs it [`REPAIR_AFTER`] later
//! ([`SimStore::repair_due`], called by the driver): the attribute is restored, nothing else moved.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use charge_core::audit::{AuditReport, AuditWindow};
use charge_core::charge::state::{ChargeState, Taker};
use charge_core::domain::{CaptureMethod, DisputeId};
use charge_core::operation::{AuditEntry, Lease, Params, Review};
use charge_core::outbox::{outcome_change, Outcome};
use charge_core::refund::request::RefundParams;
use charge_core::refund::state::RefundState;
use charge_core::store::{
    Claim, ClaimRequest, Created, CreatedAttempt, DisputeMove, DisputeRecorded, ManualResolution,
    NewAttempt, OutcomeRecord, Recorded, RefundFailedLater, ReleaseRefund, Reschedule,
};
use charge_core::store_rules::{self, Guard, Transition, Written};
use charge_core::store_rules::{ChargeClaim, CreatedBeside};
use charge_core::{
    domain::{
        Amount, ChargeParams, Currency, CustomerId, Fingerprint, OperationId, PaymentIntentId,
        PaymentMethodId, Principal, StripeRefundId,
    },
    operation::{Operation, OperationKey, OperationStatus},
    time::Timestamp,
};
use charge_once::adapters::dynamodb::item::{key_of, operation_from_item, stored_item, Attrs};
use charge_once::memory::{ReportShelf, WatchShelf};
use charge_once::ports::{
    AuditLog, DisputeWatchCursor, IndexQuery, ManualResolutions, OperationCreates, OperationLeases,
    OperationReads, Page, RefundWatchCursor, SettledRecords, StoreCalls, StoreError, StoredReports,
    UnknownIndex, UnreadableRecord,
};

use crate::faults::{Faults, Kind};
use crate::fx::{hash_one, FxHashMap, FxHashSet};
use crate::trace::Trace;

/// How long an unreadable record waits for an operator's repair (virtual time, from its put).
pub const REPAIR_AFTER: Duration = Duration::from_secs(2 * 3600);

/// The attributes release 2026-11-29 did not write on a record (`tests/fixtures/releases/`): the
/// caller (`requested_by`, from 2026-11-30) and the history list (its one operator resolution was
/// flat `resolved_*` attributes, which the simulation never writes: it has no operator resolving).
pub const NOT_IN_2026_11_29: [&str; 2] = ["requested_by", "history"];

/// The same operation as release 2026-11-29 left it (today's writes to such a record touch only
/// the attributes they change, so it never gains a `requested_by`).
pub fn legacy_item(op: &Operation) -> Attrs {
    let mut item = stored_item(op);
    item.remove(NOT_IN_2026_11_29[0]);
    if op.history.is_empty() {
        item.remove(NOT_IN_2026_11_29[1]);
    }
    item
}

/// The corruptions of `unreadable_record`: one attribute, as a hand edit or a bug leaves it
/// (name, DynamoDB type, value).
const CORRUPTIONS: [(&str, &str, &str); 3] = [
    // Major units typed in by hand.
    ("amount", "N", "42.00"),
    // A status no release writes.
    ("status", "S", "PAID"),
    // A number where a string belongs.
    ("currency", "N", "840"),
];

/// `item` with one attribute corrupted, chosen by `which`; returns the attribute's name.
pub fn corrupt(item: &mut Attrs, which: u64) -> &'static str {
    let (field, ty, value) = CORRUPTIONS[(which % CORRUPTIONS.len() as u64) as usize];
    let value = match ty {
        "N" => AttributeValue::N(value.to_owned()),
        _ => AttributeValue::S(value.to_owned()),
    };
    item.insert(field.to_owned(), value);
    field
}

/// A record nobody can read until an operator repairs it.
struct Unreadable {
    /// What the real reader said of the item as stored (corrupted), once, when it was stored:
    /// the same item gives the same answer, and a tick re-reads every unreadable record on
    /// each page (20,000 of them read 364,000 times in a 1,000,000-order run).
    reason: String,
    /// The stored key as the error names it (`ORDER#…/charge`).
    stored_key: String,
    /// When the operator repairs it; `None`: never (the reader refused a record the simulation
    /// wrote in a shape a release wrote — a regression, left for the judge to find).
    repair_at: Option<Timestamp>,
}

impl Unreadable {
    /// Runs the real reader on `item`, the record stored under `key`.
    fn new(key: &OperationKey, item: &Attrs, repair_at: Option<Timestamp>) -> Self {
        let (pk, sk) = key_of(key);
        let error = match operation_from_item(item) {
            Err(e) => e,
            Ok(_) => StoreError::new("malformed item: the reader accepted a corrupted item"),
        };
        // The reader's errors carry no source (`item.rs` builds each from a message), so the
        // message is the whole of what a caller sees.
        debug_assert!(std::error::Error::source(&error).is_none());
        Self {
            reason: error.message,
            stored_key: format!("{pk}/{sk}"),
            repair_at,
        }
    }

    /// What the real reader says about the stored item.
    fn error(&self) -> StoreError {
        StoreError::new(self.reason.clone()).of_unreadable(self.stored_key.clone())
    }
}

/// Position in the index: due time, then the business key (the order id: as the GSI sorts).
type Position = (i64, OperationKey);

/// What records repeat: the charge's currency, customer, payment method and fingerprint, and the
/// caller. Kept once in the table ([`Interner`]) and named by number in each record.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Shared {
    currency: Currency,
    customer_id: CustomerId,
    payment_method: PaymentMethodId,
    fingerprint: Fingerprint,
    requested_by: Option<Principal>,
}

#[derive(Default)]
struct Interner {
    values: Vec<Shared>,
    numbers: FxHashMap<Shared, u32>,
}

impl Interner {
    /// The number of `shared`. `was`: the number the record held before, if it was stored:
    /// kept without a hash lookup when the strings did not change (a claim or record never
    /// changes them).
    fn number(&mut self, shared: Shared, was: Option<u32>) -> u32 {
        if let Some(n) = was.filter(|n| self.values.get(*n as usize) == Some(&shared)) {
            return n;
        }
        if let Some(n) = self.numbers.get(&shared) {
            return *n;
        }
        let n = u32::try_from(self.values.len()).unwrap_or(u32::MAX);
        self.values.push(shared.clone());
        self.numbers.insert(shared, n);
        n
    }
}

/// A record as the table keeps it: every field of the [`Operation`] but its key (the slot's) and
/// the strings records share (by number): about a quarter of an `Operation`'s bytes, for the
/// millions a run keeps. [`Packed::pack`] and [`Packed::unpack`] name every field, so a field
/// added to `Operation` does not compile until it is kept here too.
struct Packed {
    operation_id: OperationId,
    amount: Amount,
    what: What,
    /// A charge's refunds' reservations.
    refund_reserved: i64,
    status: OperationStatus,
    attempts: u32,
    redrives: u32,
    external_id: Option<PaymentIntentId>,
    first_attempted_at: Option<Timestamp>,
    created_at: Timestamp,
    updated_at: Timestamp,
    next_due_at: Option<Timestamp>,
    lease: Option<Lease>,
    last_error: Option<Box<str>>,
    review: Option<Box<Review>>,
    /// Boxed on purpose: 8 bytes in every packed record, where nearly none has a history.
    #[allow(clippy::box_collection)]
    history: Option<Box<Vec<AuditEntry>>>,
    /// An authorization's facts (a charge made with `capture: manual`); `None` for every other
    /// record: 8 bytes where nearly none has one.
    hold: Option<Box<HoldRest>>,
    /// When it settled (what the audit's window selects by).
    settled_at: Option<Timestamp>,
}

/// What only an authorized (or disputed) charge has.
struct HoldRest {
    capture_method: CaptureMethod,
    capture_before: Option<Timestamp>,
    amount_captured: Option<Amount>,
    taken_by: Option<Taker>,
    /// The open dispute on the charge, and whether Stripe says it is still refundable.
    disputed_by: Option<DisputeId>,
    dispute_refundable: bool,
    /// On an order's first attempt: its latest charge attempt's number, once there are more.
    latest_attempt: Option<u32>,
}

/// What kind of record it is, with what only its kind has: a charge's strings are shared (by
/// number, see [`Interner`]); a refund's are its own, boxed (8 bytes in the record).
enum What {
    Charge(u32),
    Refund(Box<RefundRest>),
    /// A capture, a cancel or a dispute: its own parameters (and a dispute's state), boxed.
    Taking(Box<TakingRest>),
}

/// The fields of a capture or cancel record.
struct TakingRest {
    params: Params,
    fingerprint: Fingerprint,
    requested_by: Option<Principal>,
}

/// The fields of a refund record a charge does not have, or does not share.
struct RefundRest {
    params: RefundParams,
    fingerprint: Fingerprint,
    requested_by: Option<Principal>,
    stripe_refund_id: Option<StripeRefundId>,
}

impl Packed {
    /// `same`: the number of the shared strings the record held before, if it was stored
    /// ([`Interner::number`]).
    fn pack(op: Operation, strings: &mut Interner, same: Option<u32>) -> Self {
        let Operation {
            order_id: _,
            kind: _,
            operation_id,
            params,
            fingerprint,
            requested_by,
            status,
            external_id,
            attempts,
            first_attempted_at,
            last_error,
            created_at,
            updated_at,
            lease,
            review,
            next_due_at,
            redrives,
            history,
            settled_at,
        } = op;
        let (stripe_refund_id, charge_state) = match &params {
            Params::Charge(_, state) => (None, state.clone()),
            Params::Refund(_, state) => (state.stripe_refund_id.clone(), ChargeState::default()),
            Params::Capture(_) | Params::Cancel(_) | Params::Dispute(..) => {
                (None, ChargeState::default())
            }
        };
        let ChargeState {
            refund_reserved,
            capture_before,
            amount_captured,
            taken_by,
            disputed_by,
            dispute_refundable,
            latest_attempt,
        } = charge_state;
        let mut hold = (capture_before.is_some()
            || amount_captured.is_some()
            || taken_by.is_some()
            || disputed_by.is_some()
            || latest_attempt.is_some())
        .then(|| {
            Box::new(HoldRest {
                capture_method: CaptureMethod::Automatic,
                capture_before,
                amount_captured,
                taken_by,
                disputed_by,
                dispute_refundable,
                latest_attempt,
            })
        });
        let (amount, what) = match params {
            Params::Charge(
                ChargeParams {
                    amount,
                    currency,
                    customer_id,
                    payment_method,
                    capture_method,
                },
                _,
            ) => {
                if capture_method == CaptureMethod::Manual {
                    hold.get_or_insert_with(|| {
                        Box::new(HoldRest {
                            capture_method,
                            capture_before: None,
                            amount_captured: None,
                            taken_by: None,
                            disputed_by: None,
                            dispute_refundable: false,
                            latest_attempt: None,
                        })
                    })
                    .capture_method = capture_method;
                }
                let shared = Shared {
                    currency,
                    customer_id,
                    payment_method,
                    fingerprint,
                    requested_by,
                };
                (amount, What::Charge(strings.number(shared, same)))
            }
            Params::Refund(params, _) => (
                params.amount,
                What::Refund(Box::new(RefundRest {
                    params,
                    fingerprint,
                    requested_by,
                    stripe_refund_id,
                })),
            ),
            taking @ (Params::Capture(_) | Params::Cancel(_) | Params::Dispute(..)) => (
                taking.amount(),
                What::Taking(Box::new(TakingRest {
                    params: taking,
                    fingerprint,
                    requested_by,
                })),
            ),
        };
        Packed {
            operation_id,
            amount,
            what,
            refund_reserved,
            status,
            attempts,
            redrives,
            external_id,
            first_attempted_at,
            created_at,
            updated_at,
            next_due_at,
            lease,
            last_error: last_error.map(String::into_boxed_str),
            review: review.map(Box::new),
            history: (!history.is_empty()).then(|| Box::new(history)),
            hold,
            settled_at,
        }
    }

    fn unpack(&self, key: &OperationKey, strings: &Interner) -> Operation {
        let (params, fingerprint, requested_by) = match &self.what {
            What::Charge(n) => {
                let shared = &strings.values[*n as usize];
                let params = ChargeParams {
                    amount: self.amount,
                    currency: shared.currency.clone(),
                    customer_id: shared.customer_id.clone(),
                    payment_method: shared.payment_method.clone(),
                    capture_method: self
                        .hold
                        .as_ref()
                        .map_or(CaptureMethod::Automatic, |h| h.capture_method),
                };
                let (fingerprint, by) = (shared.fingerprint.clone(), shared.requested_by.clone());
                let state = ChargeState {
                    refund_reserved: self.refund_reserved,
                    capture_before: self.hold.as_ref().and_then(|h| h.capture_before),
                    amount_captured: self.hold.as_ref().and_then(|h| h.amount_captured),
                    taken_by: self.hold.as_ref().and_then(|h| h.taken_by),
                    disputed_by: self.hold.as_ref().and_then(|h| h.disputed_by.clone()),
                    dispute_refundable: self.hold.as_ref().is_some_and(|h| h.dispute_refundable),
                    latest_attempt: self.hold.as_ref().and_then(|h| h.latest_attempt),
                };
                (Params::Charge(params, state), fingerprint, by)
            }
            What::Refund(r) => (
                Params::Refund(
                    r.params.clone(),
                    RefundState {
                        stripe_refund_id: r.stripe_refund_id.clone(),
                    },
                ),
                r.fingerprint.clone(),
                r.requested_by.clone(),
            ),
            What::Taking(t) => (
                t.params.clone(),
                t.fingerprint.clone(),
                t.requested_by.clone(),
            ),
        };
        Operation {
            order_id: key.order_id.clone(),
            kind: key.kind.clone(),
            operation_id: self.operation_id,
            params,
            fingerprint,
            requested_by,
            status: self.status,
            external_id: self.external_id.clone(),
            attempts: self.attempts,
            first_attempted_at: self.first_attempted_at,
            last_error: self.last_error.as_deref().map(str::to_owned),
            created_at: self.created_at,
            updated_at: self.updated_at,
            lease: self.lease,
            review: self.review.as_deref().cloned(),
            next_due_at: self.next_due_at,
            redrives: self.redrives,
            history: self.history.as_deref().cloned().unwrap_or_default(),
            settled_at: self.settled_at,
        }
    }

    /// Where the record sits in the unknown index, if it is listed: (in review, position).
    fn position(&self, key: &OperationKey) -> Option<(bool, Position)> {
        if self.status.is_settled() {
            return None;
        }
        let due = self.next_due_at?;
        Some((self.review.is_some(), (due.as_millis(), key.clone())))
    }
}

/// One order's record, and what the relay published for its current operation.
struct Slot {
    key: OperationKey,
    /// Inline: one pointer less to follow on every read (slots never move, see [`Chunked`]).
    record: Packed,
    published: Published,
    /// The next slot whose key hashes the same (`NO_SLOT`: none).
    next: u32,
}

const NO_SLOT: u32 = u32::MAX;

/// A vector in chunks of a fixed size: growing never moves what it holds (a doubling vector of
/// ten million records would copy them all, and hold both copies while it did).
struct Chunked<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

const CHUNK: usize = 1 << 14;

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Self {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Chunked<T> {
    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, value: T) {
        if self.len % CHUNK == 0 {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        if let Some(chunk) = self.chunks.last_mut() {
            chunk.push(value);
            self.len += 1;
        }
    }

    fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }
}

impl<T> std::ops::Index<usize> for Chunked<T> {
    type Output = T;
    fn index(&self, at: usize) -> &T {
        &self.chunks[at / CHUNK][at % CHUNK]
    }
}

impl<T> std::ops::IndexMut<usize> for Chunked<T> {
    fn index_mut(&mut self, at: usize) -> &mut T {
        &mut self.chunks[at / CHUNK][at % CHUNK]
    }
}

#[derive(Default)]
struct Table {
    slots: Chunked<Slot>,
    /// The first slot of each key hash (the others chained through `Slot::next`).
    by_key: FxHashMap<u64, u32>,
    /// The slot each operation id was minted in (also after its record was replaced).
    by_operation_id: FxHashMap<OperationId, u32>,
    /// The refund slots of each order (by the hash of its order id, so orders whose ids hash
    /// the same share a list), in slot order: an order's refunds are read as DynamoDB reads
    /// one partition, not by a scan of the table.
    refunds_by_order: FxHashMap<u64, Vec<u32>>,
    strings: Interner,
    /// Unsettled, due, not in review: each position with its record's slot (a page reads the
    /// record there, without looking its key up again).
    automatic: BTreeMap<Position, u32>,
    /// Unsettled, waiting for a person (with the slot, as `automatic`).
    review: BTreeMap<Position, u32>,
    /// The outcomes published by operations that stopped being their order's record (an
    /// unconditional put replaced them); a current operation's are in its slot.
    replaced_published: FxHashMap<OperationId, Published>,
    /// Outcome events published in all.
    outcome_events: u64,
    /// Lose every this-many-th outcome (the `relay-loses-outcomes` mutation); 0: lose none.
    lose_every: u64,
    /// Outcomes offered to the relay, published or not.
    offered: u64,
    /// Lose every dispute's outcome (the `no-dispute-events` mutation).
    lose_disputes: bool,
    /// Dispute records first written open (`DisputeOpened` due), and those first written as an
    /// open inquiry: what the judge expects each dispute to have published.
    disputes_first_open: FxHashSet<OperationId>,
    disputes_first_inquiry: FxHashSet<OperationId>,
    /// Audit: writes that changed a settled record's status or PaymentIntent. Must stay 0.
    settled_changes: u64,
    /// When each operation (not a dispute) first went `unknown` (virtual ms), until it settles.
    unknown_since: FxHashMap<OperationId, i64>,
    /// For each operation that went `unknown` and later settled: how long that took (ms).
    settle_times_ms: Vec<(OperationId, i64)>,
    /// Operations that settled.
    settled: u64,
    /// Every operation that settled: (created, first settled) in virtual ms, in settle order
    /// (kept only with [`SimStore::keep_settle_log`]).
    settle_log: Option<Vec<(i64, i64)>>,
    /// Every outcome offered to the relay, with its operation's key and when (virtual ms), not
    /// yet taken (kept only with [`SimStore::keep_outcome_log`]): what the order service hears.
    outcome_log: Option<Vec<(OperationKey, Outcome, i64)>>,
    /// Records kept as release 2026-11-29's items (`legacy_record`): their record is always
    /// what `operation_from_item` read from that item, [`legacy_item`] of the record written
    /// (the item itself is not kept: it is that function of the record, see
    /// [`SimStore::legacy_item_of`]).
    legacy: FxHashSet<OperationKey>,
    /// Records that cannot be read (`unreadable_record`, or a legacy item the reader refused).
    unreadable: FxHashMap<OperationKey, Unreadable>,
    /// Unreadable records an operator repaired.
    repaired: u64,
    /// Every settled record's (settle time in ms, slot), kept up to date on every write: the
    /// audit's pages ([`SettledRecords::settled_between`]) cost their own length. (Sorted again
    /// on the first page after a write, it cost a sort of the table per page: quadratic in a run
    /// audited while it goes on.)
    settled_index: BTreeSet<(i64, u32)>,
}

/// The outcomes published for one operation. The event id is a function of the operation id and
/// the outcome (`charge_core::outbox`), so a set of outcomes is the set of event ids.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Published(u8);

impl Published {
    fn bit(outcome: Outcome) -> u8 {
        match outcome {
            Outcome::Succeeded => 1,
            Outcome::Failed => 2,
            Outcome::NeedsReview => 4,
            Outcome::Authorized => 8,
            Outcome::DisputeOpened => 16,
            Outcome::DisputeFundsWithdrawn => 32,
        }
    }

    fn insert(&mut self, outcome: Outcome) {
        self.0 |= Self::bit(outcome);
    }

    pub fn contains(&self, outcome: Outcome) -> bool {
        self.0 & Self::bit(outcome) != 0
    }
}

fn position(op: &Operation) -> Option<(bool, Position)> {
    if op.status.is_settled() {
        return None;
    }
    let due = op.next_due_at?;
    Some((op.review.is_some(), (due.as_millis(), op.key())))
}

impl Table {
    /// The slot of `key`.
    fn slot(&self, key: &OperationKey) -> Option<usize> {
        let mut at = *self.by_key.get(&hash_one(key))?;
        while at != NO_SLOT {
            let slot = &self.slots[at as usize];
            if slot.key == *key {
                return Some(at as usize);
            }
            at = slot.next;
        }
        None
    }

    /// The record at `key` as it is stored, whether readable or not.
    fn get(&self, key: &OperationKey) -> Option<Operation> {
        self.slot(key).map(|at| self.unpack(at))
    }

    fn unpack(&self, at: usize) -> Operation {
        let slot = &self.slots[at];
        slot.record.unpack(&slot.key, &self.strings)
    }

    /// Stores `op` as the record at its key (a new slot if the key has none); returns the slot.
    fn store(&mut self, op: Operation) -> usize {
        let key = op.key();
        let at = self.slot(&key);
        let same = at.and_then(|at| match self.slots[at].record.what {
            What::Charge(n) => Some(n),
            What::Refund(_) | What::Taking(_) => None,
        });
        let packed = Packed::pack(op, &mut self.strings, same);
        let settled = packed.settled_at;
        let at = match at {
            Some(at) => {
                if let Some(was) = self.slots[at]
                    .record
                    .settled_at
                    .filter(|w| Some(*w) != settled)
                {
                    let at32 = u32::try_from(at).unwrap_or(NO_SLOT);
                    self.settled_index.remove(&(was.as_millis(), at32));
                }
                // In place: no new allocation for a record written again.
                self.slots[at].record = packed;
                at
            }
            None => {
                let record = packed;
                let at = self.slots.len();
                let at32 = u32::try_from(at).unwrap_or(NO_SLOT);
                let head = self.by_key.entry(hash_one(&key)).or_insert(NO_SLOT);
                let next = std::mem::replace(head, at32);
                if key.kind.refund_id().is_some() {
                    let order = hash_one(&key.order_id);
                    self.refunds_by_order.entry(order).or_default().push(at32);
                }
                self.slots.push(Slot {
                    key,
                    record,
                    published: Published::default(),
                    next,
                });
                at
            }
        };
        if let Some(settled) = settled {
            self.settled_index
                .insert((settled.as_millis(), u32::try_from(at).unwrap_or(NO_SLOT)));
        }
        at
    }

    fn unindex(&mut self, op: &Operation) {
        if let Some((review, pos)) = position(op) {
            if review {
                self.review.remove(&pos);
            } else {
                self.automatic.remove(&pos);
            }
        }
    }

    fn index(&mut self, at: usize) {
        let slot = &self.slots[at];
        if let Some((review, pos)) = slot.record.position(&slot.key) {
            let at = u32::try_from(at).unwrap_or(NO_SLOT);
            if review {
                self.review.insert(pos, at);
            } else {
                self.automatic.insert(pos, at);
            }
        }
    }

    /// The record in slot `at` (the slot of `key`), unless it cannot be read.
    fn read_at(&self, key: &OperationKey, at: u32) -> Result<Operation, StoreError> {
        match self.unreadable.get(key) {
            Some(bad) => Err(bad.error()),
            None => Ok(self.unpack(at as usize)),
        }
    }

    /// The record at `key`, unless it cannot be read.
    fn read(&self, key: &OperationKey) -> Result<Option<Operation>, StoreError> {
        match self.unreadable.get(key) {
            Some(bad) => Err(bad.error()),
            None => Ok(self.get(key)),
        }
    }

    /// What a write of `op` leaves as the record: for a legacy record, the item as that
    /// release's shape stores it, and the record as the real reader reads it back; if the
    /// reader refuses it, the record is unreadable from now on.
    fn reshape(&mut self, op: Operation) -> Operation {
        let key = op.key();
        if !self.legacy.contains(&key) {
            return op;
        }
        let item = legacy_item(&op);
        match operation_from_item(&item) {
            Ok(read) => read,
            Err(_) => {
                let bad = Unreadable::new(&key, &item, None);
                self.unreadable.insert(key, bad);
                op
            }
        }
    }

    /// Writes `next` over `before`, the record at `key`, keeping the index and the outbox in
    /// step; returns the record as now stored (for a legacy record, as the real reader reads
    /// it back).
    fn update(&mut self, key: &OperationKey, before: &Operation, next: Operation) -> Operation {
        self.unindex(before);
        let after = self.reshape(next);
        // A refund that succeeded and then failed at Stripe (a late failure, taken only from a
        // retrieve) is the one change a settled record may see.
        let failed_late = before.kind.refund_id().is_some()
            && before.status == OperationStatus::Succeeded
            && after.status == OperationStatus::Failed;
        if before.status.is_settled()
            && !failed_late
            && (after.status != before.status || after.external_id != before.external_id)
        {
            self.settled_changes += 1;
        }
        let (id, now) = (after.operation_id, after.updated_at.as_millis());
        match after.status {
            // A dispute is `unknown` while Stripe holds it open (days, its outcome the bank's):
            // not an outcome of ours we lost, so not in the time to settle.
            charge_core::operation::OperationStatus::Unknown
                if after.params.dispute_state().is_none() =>
            {
                self.unknown_since.entry(id).or_insert(now);
            }
            s if s.is_settled() && !before.status.is_settled() => {
                self.settled += 1;
                if let Some(log) = &mut self.settle_log {
                    log.push((after.created_at.as_millis(), now));
                }
                if let Some(since) = self.unknown_since.remove(&id) {
                    self.settle_times_ms.push((id, now - since));
                }
            }
            _ => {}
        }
        let event = outcome_change(Some(before), &after).map(|o| (after.operation_id, o));
        if let (Some(log), Some((_, outcome))) = (&mut self.outcome_log, event) {
            log.push((key.clone(), outcome, now));
        }
        let at = self.store(after.clone());
        self.index(at);
        self.publish(event, after.params.dispute_state().is_some());
        debug_assert_eq!(&self.slots[at].key, key);
        after
    }

    /// The stream record of one committed write, after the relay's decision ([`outcome_change`]:
    /// `outcome_of`'s, without building the event).
    fn publish(&mut self, event: Option<(OperationId, Outcome)>, dispute: bool) {
        if let Some((operation_id, outcome)) = event {
            self.offered += 1;
            if self.lose_every > 0 && self.offered % self.lose_every == 0 {
                return;
            }
            if self.lose_disputes && dispute {
                return;
            }
            self.outcome_events += 1;
            self.published_mut(operation_id).insert(outcome);
        }
    }

    /// A dispute record as first written: open (its `DisputeOpened` due), and an open inquiry
    /// (its `DisputeFundsWithdrawn` due if it later withdraws funds).
    fn note_first_dispute(&mut self, op: &Operation) {
        if let Some(state) = op.params.dispute_state() {
            if !op.status.is_settled() {
                self.disputes_first_open.insert(op.operation_id);
                if !charge_core::dispute::plan::funds_withdrawn(&state.status) {
                    self.disputes_first_inquiry.insert(op.operation_id);
                }
            }
        }
    }

    /// Where the outcomes of `operation_id` are kept: its slot while it is the record there.
    fn published_mut(&mut self, operation_id: OperationId) -> &mut Published {
        match self.by_operation_id.get(&operation_id) {
            Some(at) if self.slots[*at as usize].record.operation_id == operation_id => {
                &mut self.slots[*at as usize].published
            }
            _ => self.replaced_published.entry(operation_id).or_default(),
        }
    }

    fn published(&self, operation_id: &OperationId) -> Published {
        match self.by_operation_id.get(operation_id) {
            Some(at) if self.slots[*at as usize].record.operation_id == *operation_id => {
                self.slots[*at as usize].published
            }
            _ => self
                .replaced_published
                .get(operation_id)
                .copied()
                .unwrap_or_default(),
        }
    }

    /// Whether `operation_id` is its order's record now, and readable.
    fn is_current(&self, operation_id: &OperationId) -> bool {
        self.by_operation_id.get(operation_id).is_some_and(|at| {
            let slot = &self.slots[*at as usize];
            slot.record.operation_id == *operation_id && !self.unreadable.contains_key(&slot.key)
        })
    }
}

/// How the store writes a new charge attempt ([`OperationCreates::create_attempt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AttemptWrite {
    /// By the store's rules ([`store_rules::start_attempt`]): all its conditions.
    #[default]
    Guarded,
    /// `attempt-unguarded`: attempt n is not checked (failed, not canceled, the one read); the
    /// head still names n and no record is at the new key.
    Unguarded,
    /// `attempt-race`: the head's `latest_attempt` guard dropped, and with it the new key's
    /// absence (a Put and an Update with no condition but attempt n failed): two retries that
    /// read the same latest both write the next attempt, the later one over the earlier.
    Unraced,
}

pub struct SimStore {
    table: Mutex<Table>,
    pub calls: StoreCalls,
    /// Records are fenced on the lease token (off only for the `no-lease-fence` mutation).
    pub lease_fence: bool,
    /// Creates are conditional (off only for the `settled-overwritten` mutation).
    pub conditional_put: bool,
    /// How a new charge attempt is written: by the store's rules, or broken by a mutation.
    pub attempt_write: AttemptWrite,
    /// Audit, as a DynamoDB stream would show it: outcome writes that landed although the writer
    /// did not hold the current lease. Must stay 0.
    /// Audit: refund writes that left a charge reserving more than it charged. Must stay 0.
    pub over_reserved_writes: AtomicU64,
    /// The first order such a write was made for.
    pub first_over_reserved: Mutex<Option<String>>,
    pub stale_lease_writes: AtomicU64,
    /// The order of the first one.
    pub first_stale_write: Mutex<Option<String>>,
    /// Where `legacy_record` and `unreadable_record` are decided and counted (none: neither).
    pub faults: Option<Arc<Faults>>,
    pub trace: Option<Arc<Trace>>,
    /// The drift audit's reports, as the memory store keeps them.
    reports: ReportShelf,
    /// The refund watch's cursor, as the memory store keeps it.
    watch: WatchShelf,
    /// The dispute watch's cursor, likewise.
    dispute_watch: WatchShelf,
}

impl Default for SimStore {
    fn default() -> Self {
        Self {
            table: Mutex::default(),
            calls: StoreCalls::default(),
            lease_fence: true,
            conditional_put: true,
            attempt_write: AttemptWrite::Guarded,
            over_reserved_writes: AtomicU64::new(0),
            first_over_reserved: Mutex::new(None),
            stale_lease_writes: AtomicU64::new(0),
            first_stale_write: Mutex::new(None),
            faults: None,
            trace: None,
            reports: ReportShelf::default(),
            watch: WatchShelf::default(),
            dispute_watch: WatchShelf::default(),
        }
    }
}

impl SimStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sizes the key and operation-id maps for `records` records up front, so a long run does
    /// not rehash millions of entries as it grows.
    pub fn reserve(&self, records: usize) {
        let mut t = self.lock();
        t.by_key.reserve(records);
        t.by_operation_id.reserve(records);
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) {
        self.calls.write();
    }

    /// One conditional write under the lock, by the store's rules (`charge_core::store_rules`),
    /// keeping the index and the outbox in step ([`Table::update`]); the record written is
    /// returned as read back (for a legacy record, through the real reader).
    /// `write` at `key` and the charge's `release`: the charge's guards checked first, then the
    /// two writes with no await between (nothing else runs in the simulation meanwhile), so the
    /// two are one write, both or neither.
    fn with_release(
        &self,
        key: &OperationKey,
        write: &impl Transition,
        release: &ReleaseRefund,
    ) -> Result<Recorded, StoreError> {
        let refused = store_rules::RELEASE_REFUSED;
        self.with_charge(key, write, &release.charge, release, refused)
    }

    /// `write` at `key` and `on_charge` at `charge`, as [`Self::with_release`]: the charge's
    /// refusal is the error `refused`, and nothing is written.
    fn with_charge(
        &self,
        key: &OperationKey,
        write: &impl Transition,
        charge: &OperationKey,
        on_charge: &impl Transition,
        refused: &'static str,
    ) -> Result<Recorded, StoreError> {
        // The write's own refusal first (the record as it is, nothing written), as DynamoDB
        // names the first item of a transaction.
        let (current, charge_now) = {
            let t = self.lock();
            (t.get(key), t.get(charge))
        };
        let writes = current.is_some_and(|op| store_rules::check(&op, &write.guards()).is_ok());
        if writes && charge_now.is_none_or(|c| store_rules::check(&c, &on_charge.guards()).is_err())
        {
            return Err(StoreError::new(refused));
        }
        let written = self.conditional(key, write)?;
        if written.is_ok() {
            self.conditional(charge, on_charge)?
                .map_err(|_| StoreError::new(refused))?;
        }
        Ok(store_rules::recorded(written))
    }

    fn conditional(
        &self,
        key: &OperationKey,
        write: &impl Transition,
    ) -> Result<Written, StoreError> {
        self.write();
        let mut t = self.lock();
        let Some(op) = t.read(key)? else {
            return Ok(Err(None));
        };
        let fence = |g: &Guard| !matches!(g, Guard::HoldsLease(_));
        let mut guards = write.guards();
        let stale = guards.iter().any(|g| !fence(g) && !g.holds(&op));
        if !self.lease_fence {
            guards.retain(fence);
        }
        let next = match store_rules::apply_guarded(&op, write, &guards) {
            Ok(next) => next,
            Err(by) => return Ok(Err(Some((op, by)))),
        };
        if stale {
            self.stale_lease_writes.fetch_add(1, Ordering::Relaxed);
            self.first_stale_write
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(|| key.order_id.as_str().to_owned());
        }
        let written = t.update(key, &op, next);
        // Read back: a write can leave a record nobody can read (a legacy item the reader
        // refuses).
        if let Some(bad) = t.unreadable.get(key) {
            return Err(bad.error());
        }
        Ok(Ok(written))
    }

    /// The order an operation id was minted for (also after its record was replaced).
    pub fn order_of(&self, operation_id: &OperationId) -> Option<String> {
        let t = self.lock();
        t.by_operation_id
            .get(operation_id)
            .map(|at| t.slots[*at as usize].key.order_id.as_str().to_owned())
    }

    /// The `relay-loses-outcomes` mutation: every `n`th outcome is acknowledged, not published.
    pub fn lose_every_nth_outcome(&self, n: u64) {
        self.lock().lose_every = n;
    }

    /// The `no-dispute-events` mutation: every dispute's outcome is acknowledged, not published.
    pub fn lose_dispute_outcomes(&self) {
        self.lock().lose_disputes = true;
    }

    /// Whether the dispute record `operation_id` was first written open, and as an open inquiry.
    pub fn dispute_first_written(&self, operation_id: &OperationId) -> (bool, bool) {
        let t = self.lock();
        (
            t.disputes_first_open.contains(operation_id),
            t.disputes_first_inquiry.contains(operation_id),
        )
    }

    /// The outcomes published for an operation (empty if none).
    pub fn published(&self, operation_id: &OperationId) -> Published {
        self.lock().published(operation_id)
    }

    /// Outcome events published in all, and the operations that published any and are not
    /// their order's readable record now (in order): the publishers the judge must look at,
    /// the others being the records it judges.
    pub fn outcome_events(&self) -> (u64, Vec<OperationId>) {
        let t = self.lock();
        let mut ops: Vec<OperationId> = t
            .slots
            .iter()
            .filter(|slot| slot.published != Published::default())
            .map(|slot| slot.record.operation_id)
            .chain(t.replaced_published.keys().copied())
            .filter(|op| !t.is_current(op))
            .collect();
        ops.sort_unstable();
        (t.outcome_events, ops)
    }

    /// What the driver's outlook reads (`Pipeline::outlook`: pages of `page` from the unknown
    /// index until one lists an operation that is not `unreachable`), without reading the
    /// records: whether the index lists anything, and that operation's due time. The pages the
    /// outlook would have read are counted as its queries.
    pub fn outlook(
        &self,
        page: usize,
        unreachable: impl Fn(&OperationId) -> bool,
    ) -> (bool, Option<Timestamp>) {
        let page = page.max(1);
        let t = self.lock();
        let mut found = None;
        for (i, ((_, key), at)) in t.automatic.iter().enumerate() {
            if t.unreadable.contains_key(key) {
                continue;
            }
            let record = &t.slots[*at as usize].record;
            if !unreachable(&record.operation_id) {
                found = Some((i, record.next_due_at));
                break;
            }
        }
        let listed = t.automatic.len();
        drop(t);
        let pages = match found {
            Some((i, _)) => i / page + 1,
            None => listed.div_ceil(page).max(1),
        };
        for _ in 0..pages {
            self.calls.query();
        }
        (listed > 0, found.and_then(|(_, due)| due))
    }

    /// Whether `operation_id` is its order's record now, and readable (what the judge reads).
    pub fn is_current(&self, operation_id: &OperationId) -> bool {
        self.lock().is_current(operation_id)
    }

    /// Keeps [`SimStore::settle_log`] from now on (the load model's latencies).
    pub fn keep_settle_log(&self) {
        self.lock().settle_log.get_or_insert_with(Vec::new);
    }

    /// Keeps the outcomes published from now on, for [`SimStore::take_outcomes`].
    pub fn keep_outcome_log(&self) {
        self.lock().outcome_log.get_or_insert_with(Vec::new);
    }

    /// The outcomes published since the last call, in order: (the operation's key, the
    /// outcome, when in virtual ms).
    pub fn take_outcomes(&self) -> Vec<(OperationKey, Outcome, i64)> {
        self.lock()
            .outcome_log
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Writes that changed a settled record (an audit that must read 0).
    pub fn settled_changes(&self) -> u64 {
        self.lock().settled_changes
    }

    /// Every operation that settled, as (created, first settled) in virtual ms, in settle order:
    /// checkout → settled for the load model.
    pub fn settle_log(&self) -> Vec<(i64, i64)> {
        self.lock().settle_log.clone().unwrap_or_default()
    }

    /// How many operations have settled.
    pub fn settled_count(&self) -> usize {
        self.lock().settled as usize
    }

    /// Time to settle of the operations that went `unknown`: the ones still unknown (or in
    /// review), and the settle time in ms of each that settled, in the order they settled.
    pub fn settle_times(&self) -> (Vec<OperationId>, Vec<(OperationId, i64)>) {
        let t = self.lock();
        let mut open: Vec<OperationId> = t.unknown_since.keys().copied().collect();
        open.sort();
        (open, t.settle_times_ms.clone())
    }

    /// The operator's repairs due by `now`: each unreadable record whose repair time has come is
    /// readable again (its corrupted attribute restored, nothing else moved). Returns their keys,
    /// in key order.
    pub fn repair_due(&self, now: Timestamp) -> Vec<OperationKey> {
        let mut t = self.lock();
        let mut due: Vec<OperationKey> = t
            .unreadable
            .iter()
            .filter(|(_, bad)| bad.repair_at.is_some_and(|at| at <= now))
            .map(|(key, _)| key.clone())
            .collect();
        due.sort_by(|a, b| a.order_id.as_str().cmp(b.order_id.as_str()));
        for key in &due {
            t.unreadable.remove(key);
        }
        t.repaired += due.len() as u64;
        due
    }

    /// When the operator's next repair is due.
    pub fn next_repair(&self) -> Option<Timestamp> {
        self.lock()
            .unreadable
            .values()
            .filter_map(|bad| bad.repair_at)
            .min()
    }

    /// Unreadable records repaired so far, and those still unreadable.
    pub fn unreadable_counts(&self) -> (u64, u64) {
        let t = self.lock();
        (t.repaired, t.unreadable.len() as u64)
    }

    /// Records kept in a legacy shape.
    pub fn legacy_records(&self) -> u64 {
        self.lock().legacy.len() as u64
    }

    /// The stored item of a legacy record (for tests): that release's shape of its record (the
    /// record is what the reader read from it, and reads back the same).
    pub fn legacy_item_of(&self, key: &OperationKey) -> Option<Attrs> {
        let t = self.lock();
        if !t.legacy.contains(key) {
            return None;
        }
        t.get(key).map(|op| legacy_item(&op))
    }

    /// The faults of a record just put: `legacy_record`, then `unreadable_record`.
    fn after_put(&self, t: &mut Table, op: &Operation) {
        let Some(faults) = &self.faults else { return };
        let key = op.key();
        let order = key.order_id.as_str();
        if faults.fixed(Kind::LegacyRecord, order) {
            faults.count(Kind::LegacyRecord);
            t.legacy.insert(key.clone());
            t.unindex(op);
            let stored = t.reshape(op.clone());
            let at = t.store(stored);
            t.index(at);
            if let Some(trace) = &self.trace {
                trace.event(
                    order,
                    "fault",
                    format_args!(
                        "legacy_record: stored in release 2026-11-29's shape (no requested_by), read through operation_from_item"
                    ),
                );
            }
        }
        if faults.fixed(Kind::UnreadableRecord, order) && !t.unreadable.contains_key(&key) {
            faults.count(Kind::UnreadableRecord);
            // The item as stored: release 2026-11-29's shape of a legacy record.
            let mut item = if t.legacy.contains(&key) {
                legacy_item(op)
            } else {
                stored_item(op)
            };
            let which = order.bytes().fold(0u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            let field = corrupt(&mut item, which);
            let bad = Unreadable::new(&key, &item, Some(op.created_at.plus(REPAIR_AFTER)));
            t.unreadable.insert(key.clone(), bad);
            if let Some(trace) = &self.trace {
                trace.event(
                    order,
                    "fault",
                    format_args!(
                        "unreadable_record: {field} corrupted after the put; an operator repairs it in {} s",
                        REPAIR_AFTER.as_secs()
                    ),
                );
            }
        }
    }

    /// Changes the record at `key` as a person with write access to the table would: no rule,
    /// no condition, no outcome published, its settle time kept (the drift the audit exists to
    /// find). False when there is no such record.
    pub fn edit_by_hand(&self, key: &OperationKey, edit: impl FnOnce(&mut Operation)) -> bool {
        let mut t = self.lock();
        let Some(mut op) = t.get(key) else {
            return false;
        };
        t.unindex(&op);
        edit(&mut op);
        let at = t.store(op);
        t.index(at);
        true
    }

    /// Records in the table.
    pub fn len(&self) -> usize {
        self.lock().slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The position as JSON (due, order, sort key): the whole key, so an order's operations due at
/// the same millisecond (a charge and its capture, its refunds) are each listed once.
fn encode_cursor(pos: &Position) -> String {
    let (due, key) = pos;
    serde_json::to_string(&(due, key.order_id.as_str(), key.kind.sort_key())).unwrap_or_default()
}

fn decode_cursor(cursor: &str) -> Result<Position, StoreError> {
    let malformed = || StoreError::new("malformed page cursor");
    let (due, order, sk): (i64, String, String) =
        serde_json::from_str(cursor).map_err(|_| malformed())?;
    let order = charge_core::domain::OrderId::parse(&order).map_err(|_| malformed())?;
    let kind = charge_core::domain::OperationKind::parse(&sk).map_err(|_| malformed())?;
    Ok((due, OperationKey::of_kind(order, kind)))
}

impl SimStore {
    /// Stores `raw` as the report of `window`, as given: for a test of a report this release
    /// cannot read.
    pub fn put_raw_report_for_tests(&self, window: &AuditWindow, raw: &str) {
        self.reports.put_raw(window, raw);
    }
}

#[async_trait]
impl RefundWatchCursor for SimStore {
    async fn watched_through(&self) -> Result<Option<Timestamp>, StoreError> {
        self.calls.read();
        Ok(self.watch.get())
    }

    async fn advance_watch(
        &self,
        from: Option<Timestamp>,
        to: Timestamp,
    ) -> Result<bool, StoreError> {
        self.calls.write();
        Ok(self.watch.advance(from, to))
    }
}

#[async_trait]
impl DisputeWatchCursor for SimStore {
    async fn disputes_listed_through(&self) -> Result<Option<Timestamp>, StoreError> {
        self.calls.read();
        Ok(self.dispute_watch.get())
    }

    async fn advance_dispute_watch(
        &self,
        from: Option<Timestamp>,
        to: Timestamp,
    ) -> Result<bool, StoreError> {
        self.calls.write();
        Ok(self.dispute_watch.advance(from, to))
    }
}

#[async_trait]
impl AuditLog for SimStore {
    async fn put_report(&self, report: &AuditReport) -> Result<(), StoreError> {
        self.calls.write();
        self.reports.put(report)
    }

    async fn latest_reports(&self, limit: usize) -> Result<StoredReports, StoreError> {
        self.calls.query();
        Ok(self.reports.latest(limit))
    }
}

#[async_trait]
impl OperationReads for SimStore {
    async fn get(&self, key: &OperationKey) -> Result<Option<Operation>, StoreError> {
        self.calls.read();
        self.lock().read(key)
    }

    async fn refunds_of(
        &self,
        order_id: &charge_core::domain::OrderId,
    ) -> Result<Vec<Operation>, StoreError> {
        self.calls.query();
        let t = self.lock();
        let mut refunds = Vec::new();
        let slots = t.refunds_by_order.get(&hash_one(order_id));
        for at in slots.into_iter().flatten() {
            let key = &t.slots[*at as usize].key;
            if key.order_id == *order_id {
                refunds.push(t.read_at(key, *at)?);
            }
        }
        // As DynamoDB's Query returns them: by sort key.
        refunds.sort_by_key(|op| op.kind.sort_key());
        Ok(refunds)
    }

    /// Only the store contract asks (chargectl's `show` is not simulated): a walk of every slot,
    /// not an index kept on every write for it.
    async fn disputes_of(
        &self,
        order_id: &charge_core::domain::OrderId,
    ) -> Result<Vec<Operation>, StoreError> {
        self.calls.query();
        let t = self.lock();
        let mut keys: Vec<OperationKey> = t
            .slots
            .iter()
            .map(|slot| &slot.key)
            .filter(|key| key.order_id == *order_id && key.kind.dispute_id().is_some())
            .cloned()
            .collect();
        // As DynamoDB's Query returns them: by sort key, each record once, as it is now.
        keys.sort_by_key(|key| key.kind.sort_key());
        keys.dedup();
        let mut disputes = Vec::new();
        for key in &keys {
            disputes.extend(t.read(key)?);
        }
        Ok(disputes)
    }
}

/// The head naming `req`'s attempt as the order's latest, nothing else moved: the head's side of
/// the write without its guards (the `attempt-unguarded` and `attempt-race` mutations).
fn named_latest(head: &Operation, req: &NewAttempt) -> Operation {
    let mut next = head.clone();
    req.on_head().change(&mut next);
    next
}

#[async_trait]
impl OperationCreates for SimStore {
    async fn create_if_absent(&self, op: &Operation) -> Result<Created, StoreError> {
        self.write();
        let mut t = self.lock();
        let key = op.key();
        let mut before = None;
        if let Some(existing) = t.get(&key) {
            if self.conditional_put {
                // The condition failed: the existing item comes back (ALL_OLD) and is read.
                return t
                    .read(&key)
                    .map(|op| Created::Existing(op.unwrap_or(existing)));
            }
            t.unindex(&existing);
            // An unconditional put replaces the whole item, whatever its shape.
            t.legacy.remove(&key);
            t.unreadable.remove(&key);
            if existing.operation_id != op.operation_id {
                // What the replaced operation published stays its own.
                if let Some(at) = t.slot(&key) {
                    let published = std::mem::take(&mut t.slots[at].published);
                    if published != Published::default() {
                        t.replaced_published
                            .insert(existing.operation_id, published);
                    }
                }
            }
            before = Some(existing);
        }
        let at = t.store(op.clone());
        let at32 = u32::try_from(at).unwrap_or(NO_SLOT);
        t.by_operation_id.insert(op.operation_id, at32);
        t.index(at);
        let event = outcome_change(before.as_ref(), op).map(|o| (op.operation_id, o));
        t.note_first_dispute(op);
        t.publish(event, op.params.dispute_state().is_some());
        self.after_put(&mut t, op);
        Ok(Created::New(op.clone()))
    }

    /// The operation and its claim on the charge under one lock, by the store's rules; the
    /// operation is indexed and published as a new operation is. A refund's reservation is kept
    /// on its charge as written: the charge is settled, so it stays out of the index and its
    /// outcome is unchanged (nothing published). A capture's or cancel's take is written as any
    /// update is ([`Table::update`]): a cancel of a charge never sent settles it, which takes it
    /// out of the index and publishes its end.
    async fn create_beside(
        &self,
        op: &Operation,
        claim: ChargeClaim<'_>,
    ) -> Result<CreatedBeside, StoreError> {
        self.write();
        let mut t = self.lock();
        let before = t.get(claim.charge());
        let (created, charge) =
            store_rules::create_beside(t.get(&op.key()).as_ref(), before.as_ref(), op, &claim);
        let (Some(charge), Some(before)) = (charge, before) else {
            return Ok(created);
        };
        match claim {
            // A dispute's reservation is a refund's, counted the same (refunded + disputed).
            ChargeClaim::Reserve(_) | ChargeClaim::Dispute(_) => {
                if charge.refund_reserved() > charge.params.amount().minor_units() {
                    self.over_reserved_writes.fetch_add(1, Ordering::Relaxed);
                    self.first_over_reserved
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert_with(|| charge.order_id.as_str().to_owned());
                }
                t.store(charge);
            }
            ChargeClaim::Take(_) => {
                t.update(claim.charge(), &before, charge);
            }
        }
        let at = t.store(op.clone());
        let at32 = u32::try_from(at).unwrap_or(NO_SLOT);
        t.by_operation_id.insert(op.operation_id, at32);
        t.index(at);
        let event = outcome_change(None, op).map(|o| (op.operation_id, o));
        t.note_first_dispute(op);
        t.publish(event, op.params.dispute_state().is_some());
        self.after_put(&mut t, op);
        Ok(created)
    }

    /// The new attempt, the head naming it, attempt n checked: under one lock, by the store's
    /// rules ([`store_rules::start_attempt`]), all or nothing. The head's change is an update
    /// (its status does not move: no outcome); the new attempt is indexed and published as any
    /// new operation is.
    async fn create_attempt(&self, req: &NewAttempt) -> Result<CreatedAttempt, StoreError> {
        self.write();
        let mut t = self.lock();
        let head_key = req.head_key();
        let head = t.read(&head_key)?;
        let after = match req.on_after() {
            Some(_) => t.read(&req.after_key())?,
            None => None,
        };
        let existing = t.get(&req.op.key());
        let next = match self.attempt_write {
            AttemptWrite::Guarded => {
                store_rules::start_attempt(existing.as_ref(), head.as_ref(), after.as_ref(), req)
                    .ok()
            }
            AttemptWrite::Unguarded => head
                .as_ref()
                .filter(|h| existing.is_none() && Guard::LatestAttemptIs(req.after()).holds(h))
                .map(|h| named_latest(h, req)),
            AttemptWrite::Unraced => {
                let failed = req.on_after().map_or(head.as_ref(), |_| after.as_ref());
                let guards = store_rules::AttemptFailed(req.after_operation_id).guards();
                head.as_ref()
                    .filter(|_| failed.is_some_and(|f| store_rules::check(f, &guards).is_ok()))
                    .map(|h| named_latest(h, req))
            }
        };
        let (Some(before), Some(next)) = (head.as_ref(), next) else {
            return Ok(CreatedAttempt::Refused);
        };
        t.update(&head_key, before, next);
        if let Some(replaced) = &existing {
            // `attempt-race` only: the unconditioned Put replaces the attempt another retry wrote.
            t.unindex(replaced);
        }
        let op = &req.op;
        let at = t.store(op.clone());
        let at32 = u32::try_from(at).unwrap_or(NO_SLOT);
        t.by_operation_id.insert(op.operation_id, at32);
        t.index(at);
        let event = outcome_change(None, op).map(|o| (op.operation_id, o));
        t.publish(event, false);
        self.after_put(&mut t, op);
        Ok(CreatedAttempt::New(op.clone()))
    }

    /// The dispute's move, then its charge's side, each by the store's rules as any update is
    /// ([`Table::update`]); both checked first, so a refusal writes neither, as one
    /// transaction.
    async fn record_dispute(&self, req: &DisputeMove) -> Result<DisputeRecorded, StoreError> {
        let (current, charge_now) = {
            let t = self.lock();
            let charge = req.on_charge.as_ref().and_then(|on| t.get(&on.charge));
            (t.get(&req.key), charge)
        };
        let Some(current) = current else {
            return Ok(DisputeRecorded::Refused(None));
        };
        if store_rules::check(&current, &req.guards()).is_err() {
            return Ok(DisputeRecorded::Refused(Some(current)));
        }
        if let Some(on) = &req.on_charge {
            if charge_now.is_none_or(|c| store_rules::check(&c, &on.guards()).is_err()) {
                return Ok(DisputeRecorded::ChargeRefused);
            }
        }
        let written = match self.conditional(&req.key, req)? {
            Ok(op) => op,
            Err(current) => return Ok(DisputeRecorded::Refused(current.map(|(op, _)| op))),
        };
        if let Some(on) = &req.on_charge {
            if self.conditional(&on.charge, on)?.is_err() {
                return Ok(DisputeRecorded::ChargeRefused);
            }
        }
        Ok(DisputeRecorded::Written(written))
    }
}

#[async_trait]
impl OperationLeases for SimStore {
    async fn claim(&self, req: &ClaimRequest) -> Result<Claim, StoreError> {
        // The lease and attempts are not index attributes: no index change. Nor is a claim an
        // outcome (status and review stay), so the relay publishes nothing for it.
        Ok(store_rules::claimed(self.conditional(&req.key, req)?))
    }

    /// With a refund's release or an authorization's end: the charge's guards checked first,
    /// then the operation's write and the charge's, with no await between (nothing else runs in the simulation meanwhile), so
    /// the two are one write, both or neither.
    async fn record(&self, rec: &OutcomeRecord) -> Result<Recorded, StoreError> {
        match (&rec.release, &rec.authorization) {
            (None, None) => Ok(store_rules::recorded(self.conditional(&rec.key, rec)?)),
            (Some(release), None) => self.with_release(&rec.key, rec, release),
            (None, Some(settle)) => self.with_charge(
                &rec.key,
                rec,
                &settle.charge,
                settle,
                store_rules::AUTHORIZATION_REFUSED,
            ),
            (Some(_), Some(_)) => Err(StoreError::new(store_rules::RELEASE_AND_AUTHORIZATION)),
        }
    }

    async fn fail_refund_later(&self, req: &RefundFailedLater) -> Result<Recorded, StoreError> {
        self.with_release(&req.key, req, &req.release)
    }
}

#[async_trait]
impl UnknownIndex for SimStore {
    async fn query_index(
        &self,
        query: IndexQuery,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.calls.query();
        let after = cursor.as_deref().map(decode_cursor).transpose()?;
        let t = self.lock();
        let set = match query {
            IndexQuery::DueBy(_) | IndexQuery::Unsettled => &t.automatic,
            IndexQuery::InReview => &t.review,
        };
        let lower = match &after {
            Some(a) => Bound::Excluded(a.clone()),
            None => Bound::Unbounded,
        };
        let limit = limit.max(1);
        let mut positions: Vec<(&Position, &u32)> = set
            .range((lower, Bound::Unbounded))
            .take_while(|((due, _), _)| match query {
                IndexQuery::DueBy(now) => *due <= now.as_millis(),
                _ => true,
            })
            .take(limit + 1)
            .collect();
        let more = positions.len() > limit;
        positions.truncate(limit);
        let next = if more {
            positions.last().map(|(p, _)| encode_cursor(p))
        } else {
            None
        };
        // A record that cannot be read is set aside with its key and the reader's reason, as
        // `DynamoStore` does: it never stops the rest of the page.
        let mut operations = Vec::with_capacity(positions.len());
        let mut unreadable = Vec::new();
        for ((_, key), at) in &positions {
            match t.read_at(key, **at) {
                Ok(op) => operations.push(op),
                Err(e) => unreadable.push(UnreadableRecord {
                    key: e.unreadable.clone().unwrap_or_default(),
                    reason: charge_once::telemetry::ErrorChain(&e).to_string(),
                }),
            }
        }
        Ok(Page {
            operations,
            unreadable,
            next,
        })
    }

    async fn reschedule(&self, req: &Reschedule) -> Result<Recorded, StoreError> {
        Ok(store_rules::recorded(self.conditional(&req.key, req)?))
    }
}

#[async_trait]
impl ManualResolutions for SimStore {
    async fn get_by_operation_id(
        &self,
        operation_id: &OperationId,
    ) -> Result<Option<Operation>, StoreError> {
        self.calls.read();
        let t = self.lock();
        // As DynamoDB's: only what the unknown index lists (unsettled, with a due time), then
        // the record read.
        let Some(at) = t.by_operation_id.get(operation_id) else {
            return Ok(None);
        };
        let slot = &t.slots[*at as usize];
        let listed = !slot.record.status.is_settled() && slot.record.next_due_at.is_some();
        if !listed {
            return Ok(None);
        }
        let key = slot.key.clone();
        t.read(&key)
    }

    /// With a refund's release: as [`record`](Self::record)'s, one write, both or neither.
    async fn resolve(&self, req: &ManualResolution) -> Result<Recorded, StoreError> {
        match &req.release {
            None => Ok(store_rules::recorded(self.conditional(&req.key, req)?)),
            Some(release) => self.with_release(&req.key, req, release),
        }
    }
}

#[async_trait]
impl SettledRecords for SimStore {
    /// From the index of settled records ([`Table::settled_index`]): a page costs its length.
    async fn settled_between(
        &self,
        window: &AuditWindow,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.calls.query();
        let after = cursor.as_deref().map(decode_cursor).transpose()?;
        let t = &*self.lock();
        // The cursor names (settle time, key): the page starts after its key's slot, or at its
        // time if the key has none.
        let start = match &after {
            Some((ms, key)) => match t.slot(key).and_then(|at| u32::try_from(at).ok()) {
                Some(at) => Bound::Excluded((*ms, at)),
                None => Bound::Included((*ms, 0)),
            },
            None => Bound::Included((window.from.as_millis(), 0)),
        };
        let limit = limit.max(1);
        let in_window: Vec<(i64, u32)> = t
            .settled_index
            .range((start, Bound::Unbounded))
            .take_while(|(m, _)| *m < window.to.as_millis())
            .take(limit + 1)
            .copied()
            .collect();
        let more = in_window.len() > limit;
        let positions = &in_window[..in_window.len().min(limit)];
        let key_at = |at: u32| t.slots[at as usize].key.clone();
        let next = match (more, positions.last()) {
            (true, Some((ms, at))) => Some(encode_cursor(&(*ms, key_at(*at)))),
            _ => None,
        };
        let mut page = Page {
            next,
            ..Page::default()
        };
        for (_, at) in positions {
            match t.read_at(&key_at(*at), *at) {
                Ok(op) => page.operations.push(op),
                Err(e) => page.unreadable.push(UnreadableRecord {
                    key: e.unreadable.clone().unwrap_or_default(),
                    reason: charge_once::telemetry::ErrorChain(&e).to_string(),
                }),
            }
        }
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use charge_core::{
        domain::{Amount, ChargeParams, Currency, CustomerId, OrderId, PaymentMethodId, Principal},
        operation::{Lease, LeaseToken, OperationStatus},
    };
    use charge_once::adapters::dynamodb::schema;

    use super::*;

    const T0: i64 = 1_800_000_000_000;

    fn store_with(kind: Kind) -> SimStore {
        let mut store = SimStore::new();
        store.faults = Some(Arc::new(Faults::new(1, BTreeMap::from([(kind, 1.0)]))));
        store
    }

    fn op(order: &str) -> Operation {
        Operation::new(
            OrderId::parse(order).unwrap(),
            ChargeParams {
                amount: Amount::new(4200).unwrap(),
                currency: Currency::parse("eur").unwrap(),
                customer_id: CustomerId::parse("cus_1").unwrap(),
                payment_method: PaymentMethodId::parse("pm_card_visa").unwrap(),
                capture_method: Default::default(),
            },
            Principal::iam("arn:aws:sts::000000000000:assumed-role/order-service/t").unwrap(),
            Timestamp::from_millis(T0),
            Duration::from_secs(300),
        )
    }

    fn claim_of(op: &Operation, at: i64) -> ClaimRequest {
        ClaimRequest {
            key: op.key(),
            operation_id: op.operation_id,
            lease: Lease {
                token: LeaseToken::new_random(),
                expires_at: Timestamp::from_millis(at + 60_000),
            },
            now: Timestamp::from_millis(at),
        }
    }

    fn names(item: &Attrs) -> BTreeSet<String> {
        item.keys().cloned().collect()
    }

    #[tokio::test]
    async fn a_legacy_record_is_read_through_the_real_mapping_and_settles() {
        let store = store_with(Kind::LegacyRecord);
        let op = op("ord-legacy");
        store.create_if_absent(&op).await.unwrap();
        assert_eq!(store.legacy_records(), 1);
        let item = store.legacy_item_of(&op.key()).unwrap();
        assert!(!item.contains_key("requested_by"), "{item:?}");
        assert!(item.contains_key("redrives") && item.contains_key(schema::DUE_AT));
        let read = store.get(&op.key()).await.unwrap().unwrap();
        assert_eq!(read.requested_by, None, "not recorded");
        assert_eq!(
            Operation {
                requested_by: op.requested_by.clone(),
                ..read
            },
            op
        );

        let req = claim_of(&op, T0 + 1_000);
        let Claim::Claimed(claimed) = store.claim(&req).await.unwrap() else {
            panic!("not claimed");
        };
        assert_eq!((claimed.attempts, claimed.requested_by), (1, None));
        let rec = OutcomeRecord {
            key: op.key(),
            operation_id: op.operation_id,
            lease_token: req.lease.token,
            status: OperationStatus::Succeeded,
            external_id: Some(charge_core::domain::PaymentIntentId::parse("pi_1").unwrap()),
            last_error: None,
            review: None,
            next_due_at: None,
            now: Timestamp::from_millis(T0 + 2_000),
            stripe_refund_id: None,
            release: None,
            amount_captured: None,
            authorization: None,
            capture_before: None,
        };
        let Recorded::Written(written) = store.record(&rec).await.unwrap() else {
            panic!("refused");
        };
        assert_eq!(written.status, OperationStatus::Succeeded);
        let item = store.legacy_item_of(&op.key()).unwrap();
        assert!(!item.contains_key("requested_by") && !item.contains_key(schema::DUE_AT));
        assert_eq!(store.get(&op.key()).await.unwrap().unwrap(), written);
        assert_eq!(store.published(&op.operation_id), {
            let mut p = Published::default();
            p.insert(Outcome::Succeeded);
            p
        });
    }

    #[tokio::test]
    async fn an_unreadable_record_fails_its_reads_is_set_aside_by_a_page_and_is_repaired() {
        let mut store = store_with(Kind::UnreadableRecord);
        let op = op("ord-bad");
        let mut other = self::op("ord-good");
        other.next_due_at = op.next_due_at.map(|t| t.plus(Duration::from_millis(1)));
        store.create_if_absent(&op).await.unwrap();
        store.faults = None;
        store.create_if_absent(&other).await.unwrap();

        let err = store.get(&op.key()).await.unwrap_err();
        assert!(err.to_string().contains("malformed item: "), "{err}");
        assert_eq!(err.unreadable.as_deref(), Some("ORDER#ord-bad/charge"));
        assert!(store.claim(&claim_of(&op, T0 + 1_000)).await.is_err());
        assert!(store.get_by_operation_id(&op.operation_id).await.is_err());
        assert!(
            store.create_if_absent(&op).await.is_err(),
            "ALL_OLD is read"
        );

        let due = IndexQuery::DueBy(Timestamp::from_millis(T0 + 3_600_000));
        let page = store.query_index(due, None, 10).await.unwrap();
        assert_eq!(page.operations, vec![other.clone()]);
        assert_eq!(page.unreadable.len(), 1);
        assert_eq!(page.unreadable[0].key, "ORDER#ord-bad/charge");
        assert!(page.unreadable[0].reason.contains("malformed item: "));

        let repair = Timestamp::from_millis(T0).plus(REPAIR_AFTER);
        assert_eq!(store.next_repair(), Some(repair));
        assert!(store
            .repair_due(Timestamp::from_millis(repair.as_millis() - 1))
            .is_empty());
        assert_eq!(store.repair_due(repair), vec![op.key()]);
        assert_eq!(store.unreadable_counts(), (1, 0));
        assert_eq!(store.get(&op.key()).await.unwrap(), Some(op));
        let page = store.query_index(due, None, 10).await.unwrap();
        assert_eq!((page.operations.len(), page.unreadable.len()), (2, 0));
    }

    /// The outlook read in place answers what its pages answer, and counts their queries.
    #[tokio::test]
    async fn the_outlook_in_place_reads_what_its_pages_read() {
        for (orders, unreadable) in [(0, 0.0), (49, 0.0), (50, 0.3), (51, 0.3), (230, 0.5)] {
            let mut store = SimStore::new();
            store.faults = Some(Arc::new(Faults::new(
                3,
                BTreeMap::from([(Kind::UnreadableRecord, unreadable)]),
            )));
            let mut ids = Vec::new();
            for i in 0..orders {
                let mut op = op(&format!("ord-{i:04}"));
                // Due in creation order: the first `cut` below are the index's first.
                op.next_due_at = Some(Timestamp::from_millis(T0 + i as i64));
                ids.push(op.operation_id);
                store.create_if_absent(&op).await.unwrap();
            }
            for cut in [0, 1, 49, 50, 51, 120, orders] {
                // The first `cut` operations are out of reach (as blacked out).
                let unreachable = |id: &OperationId| ids.iter().take(cut).any(|x| x == id);
                let before = store.calls.queries.load(Ordering::Relaxed);
                let fast = store.outlook(50, unreachable);
                let fast_queries = store.calls.queries.load(Ordering::Relaxed) - before;
                let (mut any, mut due, mut cursor, mut pages) = (false, None, None, 0);
                while due.is_none() {
                    let page = store
                        .query_index(IndexQuery::Unsettled, cursor, 50)
                        .await
                        .unwrap();
                    pages += 1;
                    any |= !page.operations.is_empty() || !page.unreadable.is_empty();
                    due = page
                        .operations
                        .iter()
                        .find(|op| !unreachable(&op.operation_id))
                        .and_then(|op| op.next_due_at);
                    cursor = page.next;
                    if cursor.is_none() {
                        break;
                    }
                }
                assert_eq!(fast, (any, due), "{orders} orders, {cut} unreachable");
                assert_eq!(fast_queries, pages, "{orders} orders, {cut} unreachable");
            }
        }
    }

    #[test]
    fn every_corruption_is_refused_by_the_real_reader_naming_its_field() {
        for which in 0..CORRUPTIONS.len() as u64 {
            let mut item = stored_item(&op("ord-c"));
            let field = corrupt(&mut item, which);
            let err = operation_from_item(&item).unwrap_err().to_string();
            assert!(
                err.contains(&format!("malformed item: {field}: ")),
                "{field}: {err}"
            );
        }
    }

    /// The legacy shape is the one release 2026-11-29 really wrote, where its fixtures exist
    /// (`tests/fixtures/releases/`, generated from that release's code; skipped without them).
    #[test]
    fn the_legacy_shape_is_release_2026_11_29s_where_its_fixtures_exist() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/releases/2026-11-29/operations.json"
        );
        let Ok(raw) = std::fs::read_to_string(path) else {
            return;
        };
        let cases: serde_json::Value = serde_json::from_str(&raw).unwrap();
        let pending = cases
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["case"] == "pending")
            .expect("a pending case");
        let theirs: BTreeSet<String> = pending["item"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(names(&legacy_item(&op("ord-fx"))), theirs);
    }
}
