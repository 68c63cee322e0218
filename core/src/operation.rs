//! The durable operation record: one per business identity `(order_id, kind)`, written before any
//! side effect, and the only place where "did we charge this customer?" is answered.
//!
//! What only one kind records rides in that kind's [`Params`] variant, beside what it sends to
//! Stripe: a charge's refunds and authorization ([`ChargeState`], in the charge's room) and a
//! refund's Stripe id ([`RefundState`]). A refund with a capture deadline cannot be built, so no
//! rule has to ask. In the variant rather than in a field of its own, because a second enum
//! beside `params` could name another kind than `params` does; and read through [`Operation`]'s
//! accessors, which answer for any kind, so a reader of the common rules never matches on kinds.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::charge::state::{ChargeState, Taker};
use crate::dispute::state::{DisputeParams, DisputeState};
use crate::refund::state::RefundState;
use crate::time::Timestamp;
use crate::{
    domain::{
        Amount, CaptureMethod, ChargeParams, Currency, Fingerprint, IdempotencyKey, OperationId,
        OperationKind, OrderId, PaymentIntentId, Principal, RefundId, StripeRefundId,
        ValidationError,
    },
    refund::request::{RefundParams, RefundRequest},
    take::request::{CancelParams, CaptureParams},
};

/// Where an operation stands.
///
/// `Unknown` is a state, not a failure: a timeout, a reset or a 5xx may have charged the customer,
/// so it is kept apart until Stripe tells us. `Succeeded` and `Failed` are settled and final.
///
/// `Authorized` is a charge made with `capture: manual` that Stripe holds as `requires_capture`:
/// money held, not taken. Not settled: it ends `succeeded` when captured, `failed` when canceled
/// or when the hold lapsed, and stays in the unknown index, due when its deadline nears.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationStatus {
    Pending,
    Unknown,
    Authorized,
    Succeeded,
    Failed,
}

impl OperationStatus {
    pub fn is_settled(&self) -> bool {
        matches!(self, OperationStatus::Succeeded | OperationStatus::Failed)
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            OperationStatus::Pending => "pending",
            OperationStatus::Unknown => "unknown",
            OperationStatus::Authorized => "authorized",
            OperationStatus::Succeeded => "succeeded",
            OperationStatus::Failed => "failed",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        match raw {
            "pending" => Ok(Self::Pending),
            "unknown" => Ok(Self::Unknown),
            "authorized" => Ok(Self::Authorized),
            "succeeded" => Ok(Self::Succeeded),
            "failed" => Ok(Self::Failed),
            _ => Err(ValidationError::new(
                "status",
                "must be pending, unknown, authorized, succeeded or failed",
            )),
        }
    }
}

impl fmt::Display for OperationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The business identity of an operation, which is also its primary key: a second operation for
/// the same order and kind cannot exist.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationKey {
    pub order_id: OrderId,
    pub kind: OperationKind,
}

impl OperationKey {
    /// The order's first charge attempt: its head, the record every release before attempts
    /// knew as the order's charge. What refunds, captures, cancels and disputes act on is the
    /// order's *latest* attempt (`OperationReads::charge_of` in the engine's ports), which is
    /// this one unless the order was charged again after a decline.
    pub fn charge(order_id: OrderId) -> Self {
        Self {
            order_id,
            kind: OperationKind::FIRST_CHARGE,
        }
    }

    /// The order's `n`-th charge attempt (`n` from 1).
    pub fn charge_attempt(order_id: OrderId, n: u32) -> Result<Self, ValidationError> {
        Ok(Self {
            order_id,
            kind: OperationKind::charge_attempt(n)?,
        })
    }

    pub fn refund(order_id: OrderId, refund_id: RefundId) -> Self {
        Self {
            order_id,
            kind: OperationKind::Refund(refund_id),
        }
    }

    /// The order's capture, or its cancel (`kind` is one of the two).
    pub fn of_kind(order_id: OrderId, kind: OperationKind) -> Self {
        Self { order_id, kind }
    }
}

/// What an operation sends to Stripe on every attempt, by kind, and beside a charge's and a
/// refund's params what only that kind's record holds (see the module doc); captures and
/// cancels hold none. [`Params::sends_same`] compares what is sent, the state aside.
///
/// Shown (`chargectl show --json`) as the record always was: the kind's params under `params`,
/// and `refund_reserved`, `stripe_refund_id`, `capture_before`, `amount_captured`, `taken_by`
/// beside it on the record (0 or null when the kind holds none); a disputed charge adds
/// `disputed_by` and `dispute_refundable`, a dispute its state under `dispute` (Stripe's status
/// verbatim, `due_by`, `has_evidence`, `is_charge_refundable`, `reserved`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Params {
    Charge(ChargeParams, ChargeState),
    Refund(RefundParams, RefundState),
    Capture(CaptureParams),
    Cancel(CancelParams),
    /// A dispute: what never changes of it and what Stripe moves. Nothing is ever sent to
    /// Stripe for it; it is written only from a dispute retrieved there.
    Dispute(DisputeParams, DisputeState),
}

impl Params {
    /// The amount this operation moves: charged (or authorized), refunded, captured, or released
    /// by a cancel.
    pub fn amount(&self) -> Amount {
        match self {
            Params::Charge(p, _) => p.amount,
            Params::Refund(p, _) => p.amount,
            Params::Capture(p) => p.amount_to_capture,
            Params::Cancel(p) => p.amount_released,
            Params::Dispute(p, _) => p.amount,
        }
    }

    pub fn currency(&self) -> &Currency {
        match self {
            Params::Charge(p, _) => &p.currency,
            Params::Refund(p, _) => &p.currency,
            Params::Capture(p) => &p.currency,
            Params::Cancel(p) => &p.currency,
            Params::Dispute(p, _) => &p.currency,
        }
    }

    pub fn charge(&self) -> Option<&ChargeParams> {
        match self {
            Params::Charge(p, _) => Some(p),
            _ => None,
        }
    }

    pub fn charge_mut(&mut self) -> Option<&mut ChargeParams> {
        match self {
            Params::Charge(p, _) => Some(p),
            _ => None,
        }
    }

    pub fn charge_state(&self) -> Option<&ChargeState> {
        match self {
            Params::Charge(_, state) => Some(state),
            _ => None,
        }
    }

    pub fn charge_state_mut(&mut self) -> Option<&mut ChargeState> {
        match self {
            Params::Charge(_, state) => Some(state),
            _ => None,
        }
    }

    pub fn refund(&self) -> Option<&RefundParams> {
        match self {
            Params::Refund(p, _) => Some(p),
            _ => None,
        }
    }

    pub fn refund_state(&self) -> Option<&RefundState> {
        match self {
            Params::Refund(_, state) => Some(state),
            _ => None,
        }
    }

    pub fn refund_state_mut(&mut self) -> Option<&mut RefundState> {
        match self {
            Params::Refund(_, state) => Some(state),
            _ => None,
        }
    }

    /// Whether `other` sends Stripe the same (the kind's state aside).
    pub fn sends_same(&self, other: &Params) -> bool {
        match (self, other) {
            (Params::Charge(a, _), Params::Charge(b, _)) => a == b,
            (Params::Refund(a, _), Params::Refund(b, _)) => a == b,
            (Params::Capture(a), Params::Capture(b)) => a == b,
            (Params::Cancel(a), Params::Cancel(b)) => a == b,
            (Params::Dispute(a, _), Params::Dispute(b, _)) => a == b,
            _ => false,
        }
    }

    pub fn capture(&self) -> Option<&CaptureParams> {
        match self {
            Params::Capture(p) => Some(p),
            _ => None,
        }
    }

    pub fn cancel(&self) -> Option<&CancelParams> {
        match self {
            Params::Cancel(p) => Some(p),
            _ => None,
        }
    }

    pub fn dispute(&self) -> Option<&DisputeParams> {
        match self {
            Params::Dispute(p, _) => Some(p),
            _ => None,
        }
    }

    pub fn dispute_state(&self) -> Option<&DisputeState> {
        match self {
            Params::Dispute(_, state) => Some(state),
            _ => None,
        }
    }

    pub fn dispute_state_mut(&mut self) -> Option<&mut DisputeState> {
        match self {
            Params::Dispute(_, state) => Some(state),
            _ => None,
        }
    }

    /// The attempt of the order's charge a refund, capture, cancel or dispute acts on (see
    /// [`Operation::charge_key`]); `None` for a charge, which is an attempt itself.
    pub fn charge_attempt(&self) -> Option<u32> {
        match self {
            Params::Charge(..) => None,
            Params::Refund(p, _) => Some(p.charge_attempt),
            Params::Capture(p) => Some(p.charge_attempt),
            Params::Cancel(p) => Some(p.charge_attempt),
            Params::Dispute(p, _) => Some(p.charge_attempt),
        }
    }

    /// The PaymentIntent a refund, capture, cancel or dispute acts on (`None` for a charge, and
    /// for a cancel of a charge that was never sent).
    pub fn payment_intent(&self) -> Option<&PaymentIntentId> {
        match self {
            Params::Charge(..) => None,
            Params::Refund(p, _) => Some(&p.payment_intent),
            Params::Capture(p) => Some(&p.payment_intent),
            Params::Cancel(p) => p.payment_intent.as_ref(),
            Params::Dispute(p, _) => Some(&p.payment_intent),
        }
    }
}

impl From<ChargeParams> for Params {
    fn from(p: ChargeParams) -> Self {
        Params::Charge(p, ChargeState::default())
    }
}

impl Serialize for Params {
    /// The record's view (see [`Params`]): flattened into the record by [`Operation`].
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let none = ChargeState::default();
        let (charge, refund) = (self.charge_state().unwrap_or(&none), self.refund_state());
        let mut map = s.serialize_map(Some(6))?;
        match self {
            Params::Charge(p, _) => map.serialize_entry("params", p)?,
            Params::Refund(p, _) => map.serialize_entry("params", p)?,
            Params::Capture(p) => map.serialize_entry("params", p)?,
            Params::Cancel(p) => map.serialize_entry("params", p)?,
            Params::Dispute(p, _) => map.serialize_entry("params", p)?,
        }
        map.serialize_entry("refund_reserved", &charge.refund_reserved)?;
        map.serialize_entry(
            "stripe_refund_id",
            &refund.and_then(|r| r.stripe_refund_id.as_ref()),
        )?;
        map.serialize_entry("capture_before", &charge.capture_before)?;
        map.serialize_entry("amount_captured", &charge.amount_captured)?;
        map.serialize_entry("taken_by", &charge.taken_by)?;
        // Shown only where there is one, so every record without a dispute reads as before.
        if let Some(id) = &charge.disputed_by {
            map.serialize_entry("disputed_by", id)?;
            map.serialize_entry("dispute_refundable", &charge.dispute_refundable)?;
        }
        if let Params::Dispute(_, state) = self {
            map.serialize_entry("dispute", state)?;
        }
        map.end()
    }
}

/// A fencing token: whoever holds the live lease is the only one whose outcome is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LeaseToken(Uuid);

impl LeaseToken {
    pub fn new_random() -> Self {
        Self(crate::ids::fresh_uuid())
    }

    pub fn parse(raw: &str) -> Result<Self, ValidationError> {
        Uuid::parse_str(raw)
            .map(Self)
            .map_err(|_| ValidationError::new("lease_token", "must be a UUID"))
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.hyphenated())
    }
}

/// The right to call Stripe for an operation until `expires_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub token: LeaseToken,
    pub expires_at: Timestamp,
}

/// Why an operation waits for a person, and since when. An operation in review stays unsettled,
/// is left alone by the automatic re-drive, and is settled only by an operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Review {
    pub reason: String,
    pub flagged_at: Timestamp,
}

/// One operator action on an operation (`chargectl resolve`, `chargectl redrive`), appended to
/// the record's `history` in the same conditional write as the change itself: the history is
/// append-only, and no action is ever recorded without its entry or the other way round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// `resolve_succeeded`, `resolve_failed`, `redrive`.
    pub action: String,
    pub previous_status: OperationStatus,
    pub new_status: OperationStatus,
    /// What the operator checked and found.
    pub note: String,
    pub at: Timestamp,
    /// The caller's IAM identity (STS `GetCallerIdentity` ARN), not something they typed.
    pub caller: String,
    /// An optional extra label given by the operator (`--by`).
    pub label: Option<String>,
    /// Set when the operator overrode a Stripe check (`--force`): the reason they gave.
    pub forced: Option<String>,
    /// The review reason the record carried when the operator resolved or re-drove it: the
    /// evidence moves here, off the record, so a settled record carries no review. Absent in entries written before it
    /// existed: none was kept.
    pub review: Option<String>,
    /// The PaymentIntent the record held before a `resolve --succeeded` replaced it with another:
    /// the pointer to a possible second charge is kept, not erased. Absent when nothing was
    /// replaced, and in entries written before it existed.
    pub replaced_external_id: Option<PaymentIntentId>,
}

/// The operation record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Operation {
    pub order_id: OrderId,
    pub kind: OperationKind,
    pub operation_id: OperationId,
    /// The kind's params, and its state beside them.
    #[serde(flatten)]
    pub params: Params,
    /// The request's fingerprint: a second request for the same identity is accepted only with
    /// the same one (the charge's parameters; a refund's request as asked).
    pub fingerprint: Fingerprint,
    /// Who asked for the charge (the authenticated caller of checkout), for the audit trail. Not
    /// part of the fingerprint: a retried caller re-sending the same order is the same order.
    ///
    /// `None`: not recorded. Records written by the releases before 2026-11-30 have no
    /// `requested_by` (their checkout did not authenticate its caller); they are read, charged and
    /// settled like any other, and shown as "not recorded". Every record written since has it.
    pub requested_by: Option<Principal>,
    pub status: OperationStatus,
    /// The PaymentIntent id (`pi_…`) once we know one exists at Stripe.
    pub external_id: Option<PaymentIntentId>,
    /// How many times the operation was claimed for a Stripe call.
    pub attempts: u32,
    /// When the first Stripe call was about to be made: the start of the idempotency key's life.
    /// Written before the call, never changed afterwards.
    pub first_attempted_at: Option<Timestamp>,
    pub last_error: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub lease: Option<Lease>,
    pub review: Option<Review>,
    /// When the reconciler should look at this operation next. `None` exactly when settled: the
    /// operation then leaves the unknown index.
    pub next_due_at: Option<Timestamp>,
    /// How many times the reconciler put the operation back on the queue (numbers the dedup ids).
    pub redrives: u32,
    /// Operator actions, oldest first (append-only).
    pub history: Vec<AuditEntry>,
    /// When the record became settled (`succeeded` or `failed`): what the drift audit selects a
    /// window's records by. Set once, by the write that settles it (a refund that fails after it
    /// succeeded keeps its first). `None` while unsettled, and on records settled by releases
    /// before 2026-12-04, which had no settle time: those are read and shown as any other, only
    /// never listed by a window.
    pub settled_at: Option<Timestamp>,
}

impl Operation {
    /// A fresh `pending` charge, due for the reconciler after `pending_grace` in case the queue
    /// message never gets sent.
    pub fn new(
        order_id: OrderId,
        params: ChargeParams,
        requested_by: Principal,
        now: Timestamp,
        pending_grace: Duration,
    ) -> Self {
        let fingerprint = params.fingerprint();
        let fresh = Fresh {
            requested_by,
            now,
            pending_grace,
        };
        fresh.operation(
            order_id,
            OperationKind::FIRST_CHARGE,
            params.into(),
            fingerprint,
        )
    }

    /// A fresh `pending` refund of `order_id`'s charge, for `request` as the merchant asked it
    /// and `params` as the door resolved it (the amount reserved, the charge's intent).
    pub fn new_refund(
        order_id: OrderId,
        refund_id: RefundId,
        request: &RefundRequest,
        params: RefundParams,
        requested_by: Principal,
        now: Timestamp,
        pending_grace: Duration,
    ) -> Self {
        let fresh = Fresh {
            requested_by,
            now,
            pending_grace,
        };
        fresh.operation(
            order_id,
            OperationKind::Refund(refund_id),
            Params::Refund(params, RefundState::default()),
            request.fingerprint(),
        )
    }

    /// A fresh `pending` capture or cancel (`kind`) of `order_id`'s charge, for the request's
    /// `fingerprint`, with `params` as the door resolved them.
    pub fn new_taking(
        order_id: OrderId,
        kind: OperationKind,
        fingerprint: Fingerprint,
        params: Params,
        requested_by: Principal,
        now: Timestamp,
        pending_grace: Duration,
    ) -> Self {
        let fresh = Fresh {
            requested_by,
            now,
            pending_grace,
        };
        fresh.operation(order_id, kind, params, fingerprint)
    }

    /// A dispute's record as first read at Stripe: `unknown` (its outcome not known yet), due
    /// again at `next_due_at`, nobody's request (`requested_by` absent: Stripe's bank asked),
    /// never attempted (nothing is ever sent for it). The PaymentIntent it was found under is
    /// its `external_id`, as a refund's or capture's is its params'.
    pub fn new_dispute(
        order_id: OrderId,
        params: DisputeParams,
        state: DisputeState,
        now: Timestamp,
        next_due_at: Timestamp,
    ) -> Self {
        Operation {
            order_id,
            kind: OperationKind::Dispute(params.dispute_id.clone()),
            operation_id: OperationId::new_random(),
            fingerprint: params.fingerprint(),
            external_id: Some(params.payment_intent.clone()),
            params: Params::Dispute(params, state),
            requested_by: None,
            status: OperationStatus::Unknown,
            attempts: 0,
            first_attempted_at: None,
            last_error: None,
            created_at: now,
            updated_at: now,
            lease: None,
            review: None,
            next_due_at: Some(next_due_at),
            redrives: 0,
            history: Vec::new(),
            settled_at: None,
        }
    }

    /// What was taken of a succeeded charge: the captured amount of an authorization, else the
    /// amount charged. Refunds reserve against it.
    pub fn amount_taken(&self) -> Amount {
        self.amount_captured().unwrap_or(self.params.amount())
    }

    /// A charge's refunds' reservations ([`ChargeState::refund_reserved`]); 0 for another kind.
    pub fn refund_reserved(&self) -> i64 {
        self.params.charge_state().map_or(0, |s| s.refund_reserved)
    }

    /// The order's latest charge attempt's number, as its first attempt's record (the head)
    /// names it ([`ChargeState::latest_attempt`]): 1 when there is no later attempt, and for a
    /// record that is no first attempt (only the head says).
    pub fn latest_attempt(&self) -> u32 {
        self.params
            .charge_state()
            .and_then(|s| s.latest_attempt)
            .unwrap_or(1)
    }

    /// An authorized charge's deadline ([`ChargeState::capture_before`]).
    pub fn capture_before(&self) -> Option<Timestamp> {
        self.params.charge_state().and_then(|s| s.capture_before)
    }

    /// What a capture took of a charge ([`ChargeState::amount_captured`]).
    pub fn amount_captured(&self) -> Option<Amount> {
        self.params.charge_state().and_then(|s| s.amount_captured)
    }

    /// Who took a charge's authorization ([`ChargeState::taken_by`]).
    pub fn taken_by(&self) -> Option<Taker> {
        self.params.charge_state().and_then(|s| s.taken_by)
    }

    /// A refund's Stripe id ([`RefundState::stripe_refund_id`]).
    pub fn stripe_refund_id(&self) -> Option<&StripeRefundId> {
        self.params
            .refund_state()
            .and_then(|s| s.stripe_refund_id.as_ref())
    }

    /// A charge made with `capture: manual`.
    pub fn is_manual_capture(&self) -> bool {
        self.params
            .charge()
            .is_some_and(|p| p.capture_method == CaptureMethod::Manual)
    }

    pub fn key(&self) -> OperationKey {
        OperationKey {
            order_id: self.order_id.clone(),
            kind: self.kind.clone(),
        }
    }

    /// The order's charge this operation acts on: a charge attempt is its own; a refund,
    /// capture, cancel or dispute acts on the attempt its record names (the one its door read,
    /// the paid one; the first on every record written before attempts). What gives a
    /// reservation back, or settles a take, writes this record.
    pub fn charge_key(&self) -> OperationKey {
        match self.params.charge_attempt() {
            None => self.key(),
            Some(n) => OperationKey {
                order_id: self.order_id.clone(),
                kind: OperationKind::Charge(n),
            },
        }
    }

    /// The key every Stripe create of this operation carries: `payment-op:` for a charge,
    /// `refund-op:` for a refund, then the operation id.
    pub fn idempotency_key(&self) -> IdempotencyKey {
        match self.kind {
            OperationKind::Charge(_) => self.operation_id.idempotency_key(),
            OperationKind::Refund(_) => self.operation_id.refund_idempotency_key(),
            OperationKind::Capture(_) => self.operation_id.capture_idempotency_key(),
            OperationKind::Cancel => self.operation_id.cancel_op_idempotency_key(),
            // Never sent: a dispute is only read at Stripe. Its own namespace all the same, so
            // no writer's bug could ever replay another kind's answer under it.
            OperationKind::Dispute(_) => self.operation_id.dispute_idempotency_key(),
        }
    }

    /// True while someone holds an unexpired lease.
    pub fn has_live_lease(&self, now: Timestamp) -> bool {
        self.lease.is_some_and(|l| l.expires_at > now)
    }

    /// The end of the window in which a create may be re-sent with the same key.
    pub fn key_window_ends_at(&self, key_window: Duration) -> Option<Timestamp> {
        self.first_attempted_at.map(|t| t.plus(key_window))
    }

    /// True once the key may have been pruned by Stripe: from then on we never create again.
    pub fn key_window_passed(&self, now: Timestamp, key_window: Duration) -> bool {
        self.key_window_ends_at(key_window)
            .is_some_and(|end| now >= end)
    }
}

/// Who asked and when: what every fresh operation starts from.
struct Fresh {
    requested_by: Principal,
    now: Timestamp,
    pending_grace: Duration,
}

impl Fresh {
    fn operation(
        self,
        order_id: OrderId,
        kind: OperationKind,
        params: Params,
        fingerprint: Fingerprint,
    ) -> Operation {
        Operation {
            order_id,
            kind,
            operation_id: OperationId::new_random(),
            params,
            fingerprint,
            requested_by: Some(self.requested_by),
            status: OperationStatus::Pending,
            external_id: None,
            attempts: 0,
            first_attempted_at: None,
            last_error: None,
            created_at: self.now,
            updated_at: self.now,
            lease: None,
            review: None,
            next_due_at: Some(self.now.plus(self.pending_grace)),
            redrives: 0,
            history: Vec::new(),
            settled_at: None,
        }
    }
}
