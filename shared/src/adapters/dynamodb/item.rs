//! The operation record as a DynamoDB item, and back. Reading an item parses every field through
//! the domain types, so a corrupted item is an error, never a silently wrong charge.
//!
//! | attribute | type | |
//! |---|---|---|
//! | `pk`, `sk` | S | `ORDER#<order_id>`, `charge` or `refund#<refund_id>` |
//! | `operation_id` | S | uuid |
//! | `amount` | N | minor units: charged, or refunded |
//! | `currency`, `fingerprint` | S | |
//! | `customer_id`, `payment_method` | S | a charge's |
//! | `payment_intent` (S), `refund_reason` (S, optional) | | a refund's: the charge's intent, Stripe's reason |
//! | `refund_reserved` | N | a charge's: what its refunds reserved and did not give back; absent (0) on records written before refunds |
//! | `stripe_refund_id` | S | a refund's `re_…`, once Stripe named it |
//! | `capture_method` | S | a charge's: `manual` when authorized at checkout and captured later; absent: automatic (every record before authorizations) |
//! | `capture_before` (N), `amount_captured` (N), `taken_by` (S) | | an authorized charge's: Stripe's deadline (ms), what its capture took, the capture or cancel that took it (`capture:<uuid>`, `cancel:<uuid>`) |
//! | `disputed_by` (S), `dispute_refundable` (BOOL) | | a charge's open dispute (`dp_…`) and whether Stripe says the charge is still refundable; both absent when none is open, and on records written before disputes |
//! | `payment_intent`, `stripe_charge` (S), `dispute_reason` (S), `dispute_created` (N) | | a dispute's (sort key `dispute#<dp_…>`): the intent it was found under, the charge (`ch_…`), the bank's reason, Stripe's `created` (ms) |
//! | `dispute_status` (S), `due_by` (N, optional), `has_evidence`, `charge_refundable`, `dispute_reserved` (BOOL) | | a dispute's as Stripe moves it: its status verbatim, the evidence deadline (ms), and whether its amount is reserved on its charge |
//! | `charge_attempt` | N | a refund's, capture's, cancel's or dispute's: the attempt of the order's charge it acts on (`charge#<n>`, 2 to 20); absent: the first (`charge`), as on every record written before attempts |
//! | `amount_to_capture` | | a capture's is its `amount`; a cancel's `amount` is what it released, `payment_intent` absent when the charge was never sent, `cancellation_reason` (S, optional) |
//! | `requested_by` | S | the authenticated caller of checkout (`iam:<ARN>` / `jwt:<subject>`); absent on records of releases before 2026-11-30: "not recorded" |
//! | `status` | S | `pending`, `unknown`, `authorized`, `succeeded`, `failed` |
//! | `external_id`, `last_error` | S | optional |
//! | `attempts`, `redrives` | N | |
//! | `first_attempted_at`, `created_at`, `updated_at` | N | ms since the epoch |
//! | `lease_token` (S), `lease_expires_at` (N) | | only while leased |
//! | `review_reason` (S), `review_flagged_at` (N) | | only when flagged |
//! | `history` | L of M | operator actions, appended by `resolve`/`redrive`: `action`, `previous_status`, `new_status`, `note`, `caller` (S), `at` (N), `label`, `forced`, `review`, `replaced_external_id` (S, optional) |
//! | `due_shard` (S), `due_at` (N) | | the unknown index; only while unsettled |
//! | `settled_on` (S), `settled_at` (N) | | the settled index (`settled-by-day`): the UTC day `YYYY-MM-DD` and the time (ms) the record settled; set by the write that settles it, never changed after; absent while unsettled and on records settled before 2026-12-04 |
//!
//! A kind's own attributes (`refund_reserved`, `capture_before`, `amount_captured`, `taken_by` a
//! charge's, `stripe_refund_id` a refund's) are read on that kind's record only: an item of
//! another kind holding one (a refund with a `capture_before`) is malformed, as a corrupted one.
//!
//! The drift audit's reports share the table under `pk = AUDIT` (never an operation's: those are
//! `ORDER#…`), `sk = <window end>/<window start>` (RFC 3339), with `window_from`, `window_to`,
//! `ran_at` (N, ms), `drift` (N) and `report` (S, the report as JSON): [`report_to_item`].

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use charge_core::audit::AuditReport;
use charge_core::charge::state::{ChargeState, Taker};
use charge_core::operation::{
    AuditEntry, Lease, LeaseToken, Operation, OperationKey, OperationStatus, Params, Review,
};
use charge_core::refund::request::{RefundParams, RefundReason};
use charge_core::refund::state::RefundState;
use charge_core::time::Timestamp;
use charge_core::{
    domain::{
        Amount, CaptureMethod, ChargeParams, Currency, CustomerId, Fingerprint, OperationId,
        OperationKind, OrderId, PaymentIntentId, PaymentMethodId, Principal, StripeRefundId,
    },
    take::request::{CancelParams, CancellationReason, CaptureParams},
};

use super::paging::IndexPosition;
use super::schema::{
    audit_sort_key, due_shard, settled_day, IndexKeys, AMOUNT_CAPTURED, ATTEMPTS, AUDIT_DRIFT,
    AUDIT_PK, AUDIT_RAN_AT, AUDIT_REPORT, AUDIT_WINDOW_FROM, AUDIT_WINDOW_TO, CAPTURE_BEFORE,
    DUE_AT, DUE_SHARD, EXTERNAL_ID, FIRST_ATTEMPTED_AT, HISTORY, LAST_ERROR, LEASE_EXPIRES_AT,
    LEASE_TOKEN, OPERATION_ID, PK, REDRIVES, REFUND_RESERVED, REVIEW_FLAGGED_AT, REVIEW_REASON,
    REVIEW_SHARD, SETTLED_AT, SETTLED_ON, SK, STATUS, STRIPE_REFUND_ID, TAKEN_BY, UPDATED_AT,
};
use super::schema::{
    CHARGE_ATTEMPT, CHARGE_REFUNDABLE, DISPUTED_BY, DISPUTE_CREATED, DISPUTE_REASON,
    DISPUTE_REFUNDABLE, DISPUTE_RESERVED, DISPUTE_STATUS, DUE_BY, HAS_EVIDENCE, LATEST_ATTEMPT,
    STRIPE_CHARGE,
};
use crate::ports::{StoreError, UnreadableRecord};
use charge_core::dispute::state::{DisputeParams, DisputeState};
use charge_core::dispute::DisputeStatus;
use charge_core::domain::{DisputeId, StripeChargeId};

pub type Attrs = HashMap<String, AttributeValue>;

const PK_PREFIX: &str = "ORDER#";

pub fn attr_s(s: &str) -> AttributeValue {
    AttributeValue::S(s.to_owned())
}

pub fn attr_n(n: impl ToString) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

pub fn attr_bool(b: bool) -> AttributeValue {
    AttributeValue::Bool(b)
}

/// The table key of an operation.
pub fn key_of(key: &OperationKey) -> (String, String) {
    (format!("{PK_PREFIX}{}", key.order_id), key.kind.sort_key())
}

/// The order id in a partition key (`ORDER#<order_id>`): the inverse of [`key_of`].
pub fn order_id_of_pk(pk: &str) -> Result<OrderId, StoreError> {
    let raw = pk
        .strip_prefix(PK_PREFIX)
        .ok_or_else(|| malformed(PK, "no ORDER# prefix"))?;
    domain(PK, OrderId::parse(raw))
}

pub fn operation_to_item(op: &Operation) -> Attrs {
    let (pk, sk) = key_of(&op.key());
    let mut item = HashMap::from([
        (PK.to_owned(), attr_s(&pk)),
        (SK.to_owned(), attr_s(&sk)),
        (
            OPERATION_ID.to_owned(),
            attr_s(&op.operation_id.to_string()),
        ),
        ("order_id".to_owned(), attr_s(op.order_id.as_str())),
        (
            "amount".to_owned(),
            attr_n(op.params.amount().minor_units()),
        ),
        ("currency".to_owned(), attr_s(op.params.currency().as_str())),
        ("fingerprint".to_owned(), attr_s(op.fingerprint.as_str())),
        (STATUS.to_owned(), attr_s(op.status.as_str())),
        (ATTEMPTS.to_owned(), attr_n(op.attempts)),
        (REDRIVES.to_owned(), attr_n(op.redrives)),
        ("created_at".to_owned(), attr_n(op.created_at.as_millis())),
        (UPDATED_AT.to_owned(), attr_n(op.updated_at.as_millis())),
    ]);
    let mut put = |name: &str, value: Option<AttributeValue>| {
        if let Some(v) = value {
            item.insert(name.to_owned(), v);
        }
    };
    put(
        "requested_by",
        op.requested_by.as_ref().map(|p| attr_s(p.as_str())),
    );
    match &op.params {
        Params::Charge(p, state) => {
            put("customer_id", Some(attr_s(p.customer_id.as_str())));
            put("payment_method", Some(attr_s(p.payment_method.as_str())));
            put(
                "capture_method",
                (!p.capture_method.is_automatic()).then(|| attr_s(p.capture_method.as_str())),
            );
            put(
                CAPTURE_BEFORE,
                state.capture_before.map(|t| attr_n(t.as_millis())),
            );
            put(
                AMOUNT_CAPTURED,
                state.amount_captured.map(|a| attr_n(a.minor_units())),
            );
            put(TAKEN_BY, state.taken_by.map(|t| attr_s(&t.to_string())));
            put(
                REFUND_RESERVED,
                (state.refund_reserved != 0).then(|| attr_n(state.refund_reserved)),
            );
            put(DISPUTED_BY, state.disputed_by.as_deref().map(attr_s));
            put(
                DISPUTE_REFUNDABLE,
                state
                    .disputed_by
                    .as_ref()
                    .map(|_| attr_bool(state.dispute_refundable)),
            );
            put(
                LATEST_ATTEMPT,
                state.latest_attempt.map(|n| attr_n(i64::from(n))),
            );
        }
        Params::Refund(p, state) => {
            put("payment_intent", Some(attr_s(p.payment_intent.as_str())));
            put(CHARGE_ATTEMPT, charge_attempt_attr(p.charge_attempt));
            put("refund_reason", p.reason.map(|r| attr_s(r.as_str())));
            put(
                STRIPE_REFUND_ID,
                state.stripe_refund_id.as_deref().map(attr_s),
            );
        }
        Params::Capture(p) => {
            put("payment_intent", Some(attr_s(p.payment_intent.as_str())));
            put(CHARGE_ATTEMPT, charge_attempt_attr(p.charge_attempt));
        }
        Params::Cancel(p) => {
            put("payment_intent", p.payment_intent.as_deref().map(attr_s));
            put(CHARGE_ATTEMPT, charge_attempt_attr(p.charge_attempt));
            put(
                "cancellation_reason",
                p.cancellation_reason.map(|r| attr_s(r.as_str())),
            );
        }
        Params::Dispute(p, state) => {
            put("payment_intent", Some(attr_s(p.payment_intent.as_str())));
            put(CHARGE_ATTEMPT, charge_attempt_attr(p.charge_attempt));
            put(STRIPE_CHARGE, Some(attr_s(p.charge.as_str())));
            put(DISPUTE_REASON, Some(attr_s(&p.reason)));
            put(DISPUTE_CREATED, Some(attr_n(p.created.as_millis())));
            put(DISPUTE_STATUS, Some(attr_s(state.status.as_str())));
            put(DUE_BY, state.due_by.map(|t| attr_n(t.as_millis())));
            put(HAS_EVIDENCE, Some(attr_bool(state.has_evidence)));
            put(
                CHARGE_REFUNDABLE,
                Some(attr_bool(state.is_charge_refundable)),
            );
            put(DISPUTE_RESERVED, Some(attr_bool(state.reserved)));
        }
    }
    put(SETTLED_AT, op.settled_at.map(|t| attr_n(t.as_millis())));
    put(SETTLED_ON, op.settled_at.map(|t| attr_s(&settled_day(t))));
    put(EXTERNAL_ID, op.external_id.as_deref().map(attr_s));
    put(LAST_ERROR, op.last_error.as_deref().map(attr_s));
    put(
        FIRST_ATTEMPTED_AT,
        op.first_attempted_at.map(|t| attr_n(t.as_millis())),
    );
    put(LEASE_TOKEN, op.lease.map(|l| attr_s(&l.token.to_string())));
    put(
        LEASE_EXPIRES_AT,
        op.lease.map(|l| attr_n(l.expires_at.as_millis())),
    );
    put(REVIEW_REASON, op.review.as_ref().map(|r| attr_s(&r.reason)));
    put(
        REVIEW_FLAGGED_AT,
        op.review.as_ref().map(|r| attr_n(r.flagged_at.as_millis())),
    );
    if !op.history.is_empty() {
        put(
            HISTORY,
            Some(AttributeValue::L(
                op.history.iter().map(audit_to_attr).collect(),
            )),
        );
    }
    item
}

/// An operation as [`super::DynamoStore`] puts it: the record's attributes and, while it is
/// unsettled, its place in the unknown index (`REVIEW` while in review, else its `DUE#<n>`).
pub fn stored_item(op: &Operation) -> Attrs {
    let mut item = operation_to_item(op);
    if let Some(due) = op.next_due_at.filter(|_| !op.status.is_settled()) {
        let shard = match op.review {
            Some(_) => REVIEW_SHARD.to_owned(),
            None => due_shard(&op.operation_id),
        };
        item.insert(DUE_SHARD.into(), attr_s(&shard));
        item.insert(DUE_AT.into(), attr_n(due.as_millis()));
    }
    item
}

/// An attribute in DynamoDB JSON (`{"S": "…"}`, `{"N": "…"}`, …), as the AWS CLI prints it.
pub fn attribute_json(a: &AttributeValue) -> serde_json::Value {
    use serde_json::json;
    match a {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(_) => json!({ "NULL": true }),
        AttributeValue::Ss(v) => json!({ "SS": v }),
        AttributeValue::Ns(v) => json!({ "NS": v }),
        AttributeValue::L(v) => json!({ "L": v.iter().map(attribute_json).collect::<Vec<_>>() }),
        AttributeValue::M(m) => json!({ "M": item_json(m) }),
        _ => json!({ "NULL": true }),
    }
}

/// An item in DynamoDB JSON, keys sorted.
pub fn item_json(item: &Attrs) -> serde_json::Value {
    serde_json::Value::Object(
        item.iter()
            .map(|(k, v)| (k.clone(), attribute_json(v)))
            .collect::<std::collections::BTreeMap<_, _>>()
            .into_iter()
            .collect(),
    )
}

/// An item from DynamoDB JSON (S, N, BOOL, NULL, SS, NS, L, M): release fixtures and raw dumps.
pub fn item_from_json(value: &serde_json::Value) -> Result<Attrs, String> {
    let obj = value.as_object().ok_or("an item is a JSON object")?;
    obj.iter()
        .map(|(k, v)| {
            Ok((
                k.clone(),
                attribute_from_json(v).map_err(|e| format!("{k}: {e}"))?,
            ))
        })
        .collect()
}

fn attribute_from_json(v: &serde_json::Value) -> Result<AttributeValue, String> {
    let obj = v
        .as_object()
        .filter(|o| o.len() == 1)
        .ok_or("not {\"<type>\": value}")?;
    let (ty, v) = obj.iter().next().expect("one entry");
    let s = || {
        v.as_str()
            .map(str::to_owned)
            .ok_or(format!("{ty}: not a string"))
    };
    let strings = || -> Result<Vec<String>, String> {
        v.as_array()
            .ok_or(format!("{ty}: not a list"))?
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_owned)
                    .ok_or(format!("{ty}: not a string"))
            })
            .collect()
    };
    Ok(match ty.as_str() {
        "S" => AttributeValue::S(s()?),
        "N" => AttributeValue::N(s()?),
        "BOOL" => AttributeValue::Bool(v.as_bool().ok_or("BOOL: not a boolean")?),
        "NULL" => AttributeValue::Null(true),
        "SS" => AttributeValue::Ss(strings()?),
        "NS" => AttributeValue::Ns(strings()?),
        "L" => AttributeValue::L(
            v.as_array()
                .ok_or("L: not a list")?
                .iter()
                .map(attribute_from_json)
                .collect::<Result<_, _>>()?,
        ),
        "M" => AttributeValue::M(item_from_json(v)?),
        other => return Err(format!("unsupported type {other}")),
    })
}

/// One history entry as a DynamoDB map.
pub fn audit_to_attr(entry: &AuditEntry) -> AttributeValue {
    let mut m = HashMap::from([
        ("action".to_owned(), attr_s(&entry.action)),
        (
            "previous_status".to_owned(),
            attr_s(entry.previous_status.as_str()),
        ),
        ("new_status".to_owned(), attr_s(entry.new_status.as_str())),
        ("note".to_owned(), attr_s(&entry.note)),
        ("at".to_owned(), attr_n(entry.at.as_millis())),
        ("caller".to_owned(), attr_s(&entry.caller)),
    ]);
    if let Some(label) = &entry.label {
        m.insert("label".into(), attr_s(label));
    }
    if let Some(forced) = &entry.forced {
        m.insert("forced".into(), attr_s(forced));
    }
    if let Some(review) = &entry.review {
        m.insert("review".into(), attr_s(review));
    }
    if let Some(replaced) = &entry.replaced_external_id {
        m.insert(REPLACED_EXTERNAL_ID.into(), attr_s(replaced.as_str()));
    }
    AttributeValue::M(m)
}

fn audit_from_attr(v: &AttributeValue) -> Result<AuditEntry, StoreError> {
    let AttributeValue::M(m) = v else {
        return Err(malformed(HISTORY, "entry is not a map"));
    };
    let status = |field: &str| -> Result<OperationStatus, StoreError> {
        domain(HISTORY, OperationStatus::parse(req_s(m, field)?))
    };
    Ok(AuditEntry {
        action: req_s(m, "action")?.to_owned(),
        previous_status: status("previous_status")?,
        new_status: status("new_status")?,
        note: get_s(m, "note")?.unwrap_or("").to_owned(),
        at: req_t(m, "at")?,
        caller: req_s(m, "caller")?.to_owned(),
        label: get_s(m, "label")?.map(str::to_owned),
        forced: get_s(m, "forced")?.map(str::to_owned),
        review: get_s(m, "review")?.map(str::to_owned),
        replaced_external_id: get_s(m, REPLACED_EXTERNAL_ID)?
            .map(|id| domain(HISTORY, PaymentIntentId::parse(id)))
            .transpose()?,
    })
}

/// A history entry's PaymentIntent replaced by `resolve --succeeded`; absent on older entries.
const REPLACED_EXTERNAL_ID: &str = "replaced_external_id";

/// The history, plus the single resolution that records written before it existed carry
/// (`resolved_by`, `resolution_note`, `resolved_at`), so an old record's audit is not lost.
fn history_from_item(item: &Attrs) -> Result<Vec<AuditEntry>, StoreError> {
    let mut history = match item.get(HISTORY) {
        None => Vec::new(),
        Some(AttributeValue::L(entries)) => entries
            .iter()
            .map(audit_from_attr)
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(malformed(HISTORY, "not a list")),
    };
    if let (Some(by), Some(at)) = (get_s(item, "resolved_by")?, get_t(item, "resolved_at")?) {
        let status = domain(STATUS, OperationStatus::parse(req_s(item, STATUS)?))?;
        history.insert(
            0,
            AuditEntry {
                action: format!("resolve_{status}"),
                previous_status: OperationStatus::Unknown,
                new_status: status,
                note: get_s(item, "resolution_note")?.unwrap_or("").to_owned(),
                at,
                caller: format!("label:{by}"),
                label: Some(by.to_owned()),
                forced: None,
                review: None,
                replaced_external_id: None,
            },
        );
    }
    Ok(history)
}

fn malformed(field: &str, why: &str) -> StoreError {
    StoreError::new(format!("malformed item: {field}: {why}"))
}

fn get_s<'a>(item: &'a Attrs, field: &str) -> Result<Option<&'a str>, StoreError> {
    match item.get(field) {
        None => Ok(None),
        Some(AttributeValue::S(s)) => Ok(Some(s)),
        Some(_) => Err(malformed(field, "not a string")),
    }
}

fn req_s<'a>(item: &'a Attrs, field: &str) -> Result<&'a str, StoreError> {
    get_s(item, field)?.ok_or_else(|| malformed(field, "missing"))
}

/// A string attribute every item and index entry has (`pk`, `sk`), owned.
pub fn req_key(item: &Attrs, field: &str) -> Result<String, StoreError> {
    req_s(item, field).map(str::to_owned)
}

fn get_n<T: std::str::FromStr>(item: &Attrs, field: &str) -> Result<Option<T>, StoreError> {
    match item.get(field) {
        None => Ok(None),
        Some(AttributeValue::N(n)) => n
            .parse()
            .map(Some)
            .map_err(|_| malformed(field, "not an integer in range")),
        Some(_) => Err(malformed(field, "not a number")),
    }
}

fn req_n<T: std::str::FromStr>(item: &Attrs, field: &str) -> Result<T, StoreError> {
    get_n(item, field)?.ok_or_else(|| malformed(field, "missing"))
}

fn get_bool(item: &Attrs, field: &str) -> Result<Option<bool>, StoreError> {
    match item.get(field) {
        None => Ok(None),
        Some(AttributeValue::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(malformed(field, "not a boolean")),
    }
}

fn get_t(item: &Attrs, field: &str) -> Result<Option<Timestamp>, StoreError> {
    Ok(get_n::<i64>(item, field)?.map(Timestamp::from_millis))
}

fn req_t(item: &Attrs, field: &str) -> Result<Timestamp, StoreError> {
    req_n::<i64>(item, field).map(Timestamp::from_millis)
}

fn domain<T, E: std::fmt::Display>(field: &str, r: Result<T, E>) -> Result<T, StoreError> {
    r.map_err(|e| malformed(field, &e.to_string()))
}

pub fn operation_from_item(item: &Attrs) -> Result<Operation, StoreError> {
    let pk = req_s(item, PK)?;
    let order_id = order_id_of_pk(pk)?;
    let lease = match (get_s(item, LEASE_TOKEN)?, get_t(item, LEASE_EXPIRES_AT)?) {
        (Some(token), Some(expires_at)) => Some(Lease {
            token: domain(LEASE_TOKEN, LeaseToken::parse(token))?,
            expires_at,
        }),
        _ => None,
    };
    let review = match get_s(item, REVIEW_REASON)? {
        Some(reason) => Some(Review {
            reason: reason.to_owned(),
            flagged_at: get_t(item, REVIEW_FLAGGED_AT)?.unwrap_or(Timestamp::from_millis(0)),
        }),
        None => None,
    };
    let kind = domain(SK, OperationKind::parse(req_s(item, SK)?))?;
    Ok(Operation {
        order_id,
        params: params_from_item(item, &kind)?,
        kind,
        operation_id: domain(OPERATION_ID, OperationId::parse(req_s(item, OPERATION_ID)?))?,
        fingerprint: Fingerprint::from_stored(req_s(item, "fingerprint")?.to_owned()),
        requested_by: get_s(item, "requested_by")?
            .map(|p| domain("requested_by", Principal::parse(p)))
            .transpose()?,
        status: domain(STATUS, OperationStatus::parse(req_s(item, STATUS)?))?,
        external_id: get_s(item, EXTERNAL_ID)?
            .map(|id| domain(EXTERNAL_ID, PaymentIntentId::parse(id)))
            .transpose()?,
        attempts: req_n(item, ATTEMPTS)?,
        first_attempted_at: get_t(item, FIRST_ATTEMPTED_AT)?,
        last_error: get_s(item, LAST_ERROR)?.map(str::to_owned),
        created_at: req_t(item, "created_at")?,
        updated_at: req_t(item, UPDATED_AT)?,
        lease,
        review,
        next_due_at: get_t(item, DUE_AT)?,
        redrives: get_n(item, REDRIVES)?.unwrap_or(0),
        history: history_from_item(item)?,
        settled_at: get_t(item, SETTLED_AT)?,
    })
}

/// The attributes only a charge's record holds, only a refund's, and only a dispute's.
const CHARGE_STATE: [&str; 7] = [
    REFUND_RESERVED,
    CAPTURE_BEFORE,
    AMOUNT_CAPTURED,
    TAKEN_BY,
    DISPUTED_BY,
    DISPUTE_REFUNDABLE,
    LATEST_ATTEMPT,
];
const REFUND_STATE: [&str; 1] = [STRIPE_REFUND_ID];
const DISPUTE_STATE: [&str; 8] = [
    STRIPE_CHARGE,
    DISPUTE_REASON,
    DISPUTE_CREATED,
    DISPUTE_STATUS,
    DUE_BY,
    HAS_EVIDENCE,
    CHARGE_REFUNDABLE,
    DISPUTE_RESERVED,
];

/// What the operation sends to Stripe and what only its kind's record holds, by its kind (its
/// sort key). An attribute that only another kind holds (a refund's `capture_before`) makes the
/// item unreadable: the record would be read as something no write of ours makes.
fn params_from_item(item: &Attrs, kind: &OperationKind) -> Result<Params, StoreError> {
    let others: Vec<&str> = match kind {
        OperationKind::Charge(_) => [&REFUND_STATE[..], &DISPUTE_STATE, &[CHARGE_ATTEMPT]].concat(),
        OperationKind::Refund(_) => [&CHARGE_STATE[..], &DISPUTE_STATE].concat(),
        OperationKind::Dispute(_) => [&CHARGE_STATE[..], &REFUND_STATE].concat(),
        OperationKind::Capture(_) | OperationKind::Cancel => {
            [&CHARGE_STATE[..], &REFUND_STATE, &DISPUTE_STATE].concat()
        }
    };
    if let Some(field) = others.iter().find(|f| item.contains_key(**f)) {
        let why = format!("a {} record holds none", kind.as_str());
        return Err(malformed(field, &why));
    }
    let amount = domain("amount", Amount::new(req_n(item, "amount")?))?;
    let currency = domain("currency", Currency::parse(req_s(item, "currency")?))?;
    Ok(match kind {
        OperationKind::Charge(_) => Params::Charge(
            ChargeParams {
                amount,
                currency,
                customer_id: domain(
                    "customer_id",
                    CustomerId::parse(req_s(item, "customer_id")?),
                )?,
                payment_method: domain(
                    "payment_method",
                    PaymentMethodId::parse(req_s(item, "payment_method")?),
                )?,
                capture_method: get_s(item, "capture_method")?
                    .map(|m| domain("capture_method", CaptureMethod::parse(m)))
                    .transpose()?
                    .unwrap_or_default(),
            },
            charge_state_from_item(item)?,
        ),
        OperationKind::Refund(_) => Params::Refund(
            RefundParams {
                amount,
                currency,
                payment_intent: domain(
                    "payment_intent",
                    PaymentIntentId::parse(req_s(item, "payment_intent")?),
                )?,
                reason: get_s(item, "refund_reason")?
                    .map(|r| domain("refund_reason", RefundReason::parse(r)))
                    .transpose()?,
                charge_attempt: charge_attempt_from_item(item)?,
            },
            RefundState {
                stripe_refund_id: get_s(item, STRIPE_REFUND_ID)?
                    .map(|id| domain(STRIPE_REFUND_ID, StripeRefundId::parse(id)))
                    .transpose()?,
            },
        ),
        OperationKind::Capture(_) => Params::Capture(CaptureParams {
            amount_to_capture: amount,
            currency,
            payment_intent: domain(
                "payment_intent",
                PaymentIntentId::parse(req_s(item, "payment_intent")?),
            )?,
            charge_attempt: charge_attempt_from_item(item)?,
        }),
        OperationKind::Cancel => Params::Cancel(CancelParams {
            amount_released: amount,
            currency,
            payment_intent: get_s(item, "payment_intent")?
                .map(|id| domain("payment_intent", PaymentIntentId::parse(id)))
                .transpose()?,
            cancellation_reason: get_s(item, "cancellation_reason")?
                .map(|r| domain("cancellation_reason", CancellationReason::parse(r)))
                .transpose()?,
            charge_attempt: charge_attempt_from_item(item)?,
        }),
        OperationKind::Dispute(id) => Params::Dispute(
            DisputeParams {
                dispute_id: id.clone(),
                payment_intent: domain(
                    "payment_intent",
                    PaymentIntentId::parse(req_s(item, "payment_intent")?),
                )?,
                charge: domain(
                    STRIPE_CHARGE,
                    StripeChargeId::parse(req_s(item, STRIPE_CHARGE)?),
                )?,
                amount,
                currency,
                reason: req_s(item, DISPUTE_REASON)?.to_owned(),
                created: req_t(item, DISPUTE_CREATED)?,
                charge_attempt: charge_attempt_from_item(item)?,
            },
            DisputeState {
                status: DisputeStatus::parse(req_s(item, DISPUTE_STATUS)?),
                due_by: get_t(item, DUE_BY)?,
                has_evidence: get_bool(item, HAS_EVIDENCE)?.unwrap_or(false),
                is_charge_refundable: get_bool(item, CHARGE_REFUNDABLE)?.unwrap_or(false),
                reserved: get_bool(item, DISPUTE_RESERVED)?.unwrap_or(false),
            },
        ),
    })
}

/// `charge_attempt` as written: absent for the first attempt, so a record acting on the head
/// has the shape every earlier release wrote.
fn charge_attempt_attr(n: u32) -> Option<AttributeValue> {
    (!OperationKind::is_first_attempt(&n)).then(|| attr_n(i64::from(n)))
}

/// `charge_attempt` as read: absent is the first attempt (every record written before
/// attempts); present, 2 to 20, or the record is malformed (a `charge_attempt` of 1 is never
/// written, so it is no write of ours either).
fn charge_attempt_from_item(item: &Attrs) -> Result<u32, StoreError> {
    get_n::<u32>(item, CHARGE_ATTEMPT)?
        .map(|n| {
            Some(n)
                .filter(|n| (2..=OperationKind::MAX_CHARGE_ATTEMPTS).contains(n))
                .ok_or_else(|| {
                    malformed(
                        CHARGE_ATTEMPT,
                        &format!("must be 2 to {}", OperationKind::MAX_CHARGE_ATTEMPTS),
                    )
                })
        })
        .transpose()
        .map(|n| n.unwrap_or(OperationKind::first_attempt()))
}

fn charge_state_from_item(item: &Attrs) -> Result<ChargeState, StoreError> {
    Ok(ChargeState {
        refund_reserved: get_n(item, REFUND_RESERVED)?.unwrap_or(0),
        capture_before: get_t(item, CAPTURE_BEFORE)?,
        amount_captured: get_n(item, AMOUNT_CAPTURED)?
            .map(|a| domain(AMOUNT_CAPTURED, Amount::new(a)))
            .transpose()?,
        taken_by: get_s(item, TAKEN_BY)?
            .map(|t| domain(TAKEN_BY, Taker::parse(t)))
            .transpose()?,
        disputed_by: get_s(item, DISPUTED_BY)?
            .map(|id| domain(DISPUTED_BY, DisputeId::parse(id)))
            .transpose()?,
        dispute_refundable: get_bool(item, DISPUTE_REFUNDABLE)?.unwrap_or(false),
        latest_attempt: get_n::<u32>(item, LATEST_ATTEMPT)?
            .map(|n| {
                Some(n)
                    .filter(|n| (2..=OperationKind::MAX_CHARGE_ATTEMPTS).contains(n))
                    .ok_or_else(|| {
                        malformed(
                            LATEST_ATTEMPT,
                            &format!("must be 2 to {}", OperationKind::MAX_CHARGE_ATTEMPTS),
                        )
                    })
            })
            .transpose()?,
    })
}

/// A drift audit's report as its item (see the module doc): replaced whole by the next report of
/// the same window, which has the same key.
pub fn report_to_item(report: &AuditReport) -> Result<Attrs, StoreError> {
    let json = serde_json::to_string(report)
        .map_err(|e| StoreError::with_source("cannot encode the audit report", e))?;
    Ok(HashMap::from([
        (PK.to_owned(), attr_s(AUDIT_PK)),
        (SK.to_owned(), attr_s(&audit_sort_key(&report.window))),
        (
            AUDIT_WINDOW_FROM.to_owned(),
            attr_n(report.window.from.as_millis()),
        ),
        (
            AUDIT_WINDOW_TO.to_owned(),
            attr_n(report.window.to.as_millis()),
        ),
        (AUDIT_RAN_AT.to_owned(), attr_n(report.ran_at.as_millis())),
        (AUDIT_DRIFT.to_owned(), attr_n(report.drift())),
        (AUDIT_REPORT.to_owned(), attr_s(&json)),
    ]))
}

/// The report a stored item holds, or why it cannot be read (named by its key, `AUDIT/<sk>`).
pub fn report_from_item(item: &Attrs) -> Result<AuditReport, UnreadableRecord> {
    let key = format!(
        "{AUDIT_PK}/{}",
        get_s(item, SK).ok().flatten().unwrap_or("?")
    );
    let unreadable = |reason: String| UnreadableRecord {
        key: key.clone(),
        reason,
    };
    let raw = req_s(item, AUDIT_REPORT).map_err(|e| unreadable(e.message))?;
    serde_json::from_str(raw).map_err(|e| unreadable(format!("{AUDIT_REPORT}: {e}")))
}

/// Whether an item is one of the drift audit's reports (not an operation).
pub fn is_audit_item(item: &Attrs) -> bool {
    matches!(item.get(PK), Some(AttributeValue::S(pk)) if pk == AUDIT_PK)
}

/// The position of an entry of the index `keys` as a Query returns it (table keys and the
/// index's sort key).
pub(super) fn index_position(keys: IndexKeys, entry: &Attrs) -> Result<IndexPosition, StoreError> {
    Ok(IndexPosition {
        pk: req_key(entry, PK)?,
        sk: req_key(entry, SK)?,
        due: req_n(entry, keys.sort)?,
    })
}

/// The table key of an index entry (for reading its record).
pub(super) fn table_key(p: &IndexPosition) -> Attrs {
    HashMap::from([
        (PK.to_owned(), attr_s(&p.pk)),
        (SK.to_owned(), attr_s(&p.sk)),
    ])
}

/// Where a Query of partition `partition` of the index `keys` resumes after `p` (its
/// `ExclusiveStartKey`).
pub(super) fn index_start_key(keys: IndexKeys, partition: &str, p: &IndexPosition) -> Attrs {
    let mut key = table_key(p);
    key.insert(keys.partition.to_owned(), attr_s(partition));
    key.insert(keys.sort.to_owned(), attr_n(p.due));
    key
}

/// Whether a record still sits at position `p` of partition `partition` of the index `keys` (for
/// the unknown index: it did not settle, move to another due time, or move to or from review
/// since the index listed it; the settled index's keys never change once set).
pub(super) fn is_at(keys: IndexKeys, item: &Attrs, partition: &str, p: &IndexPosition) -> bool {
    matches!(item.get(keys.partition), Some(AttributeValue::S(s)) if s == partition)
        && matches!(item.get(keys.sort), Some(AttributeValue::N(n)) if n.parse::<i64>().ok() == Some(p.due))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_key_gives_back_its_order_id() {
        let key = OperationKey::charge(OrderId::parse("ord-42").unwrap());
        let (pk, _) = key_of(&key);
        assert_eq!(order_id_of_pk(&pk).unwrap(), key.order_id);
        for bad in ["ord-42", "ORDER#", "CUSTOMER#ord-42"] {
            let err = order_id_of_pk(bad).unwrap_err().to_string();
            assert!(err.contains("pk"), "{bad}: {err}");
        }
    }

    fn sample() -> Operation {
        let mut op = charge_core::testing::order("ord-item")
            .amount(4200)
            .currency("eur")
            .status(OperationStatus::Unknown)
            .external_id("pi_1")
            .build();
        op.attempts = 3;
        op.first_attempted_at = Some(Timestamp::from_millis(1_800_000_001_000));
        op.last_error = Some("timeout".into());
        op.lease = Some(Lease {
            token: LeaseToken::new_random(),
            expires_at: Timestamp::from_millis(1_800_000_060_000),
        });
        op.review = Some(Review {
            reason: "found 0".into(),
            flagged_at: Timestamp::from_millis(1_800_000_002_000),
        });
        op.history = vec![AuditEntry {
            action: "resolve_succeeded".into(),
            previous_status: OperationStatus::Unknown,
            new_status: OperationStatus::Succeeded,
            note: "checked".into(),
            at: Timestamp::from_millis(1_800_000_003_000),
            caller: "arn:aws:sts::123456789012:assumed-role/oncall/alice".into(),
            label: Some("alice".into()),
            forced: None,
            review: Some("search_ambiguous: found 0".into()),
            replaced_external_id: Some(PaymentIntentId::parse("pi_0").unwrap()),
        }];
        op.redrives = 2;
        op
    }

    #[test]
    fn round_trip() {
        let op = sample();
        let mut item = operation_to_item(&op);
        // The index attributes are written by the store, not by the mapping.
        item.insert("due_at".into(), attr_n(op.next_due_at.unwrap().as_millis()));
        assert_eq!(operation_from_item(&item).unwrap(), op);
    }

    #[test]
    fn a_settled_record_keeps_its_settle_time_and_day() {
        let mut op = charge_core::testing::order("ord-settled")
            .status(OperationStatus::Succeeded)
            .build();
        op.settled_at = Some(Timestamp::from_millis(1_796_342_400_000));
        op.next_due_at = None;
        let item = operation_to_item(&op);
        assert_eq!(item.get(SETTLED_ON), Some(&attr_s("2026-12-04")));
        assert_eq!(item.get(SETTLED_AT), Some(&attr_n(1_796_342_400_000_i64)));
        assert_eq!(operation_from_item(&item).unwrap(), op);
        // Unsettled, or settled by a release before the settle time: neither attribute, and
        // the record reads with none.
        op.settled_at = None;
        let item = operation_to_item(&op);
        assert!(!item.contains_key(SETTLED_ON) && !item.contains_key(SETTLED_AT));
        assert_eq!(operation_from_item(&item).unwrap().settled_at, None);
    }

    #[test]
    fn a_history_entry_without_a_replaced_intent_reads_as_none() {
        // Entries written before the field existed, and every entry that replaced nothing.
        let mut item = operation_to_item(&sample());
        let Some(AttributeValue::L(entries)) = item.get_mut(HISTORY) else {
            panic!("history")
        };
        let AttributeValue::M(entry) = &mut entries[0] else {
            panic!("entry")
        };
        assert_eq!(
            entry.remove(REPLACED_EXTERNAL_ID),
            Some(attr_s("pi_0")),
            "written when set"
        );
        let op = operation_from_item(&item).unwrap();
        assert_eq!(op.history[0].replaced_external_id, None);
        let AttributeValue::L(entries) = &operation_to_item(&op)[HISTORY] else {
            panic!("history")
        };
        let AttributeValue::M(entry) = &entries[0] else {
            panic!("entry")
        };
        assert!(
            !entry.contains_key(REPLACED_EXTERNAL_ID),
            "not written when absent"
        );
        // A value that is no PaymentIntent id is an error naming the field.
        let mut item = operation_to_item(&sample());
        if let Some(AttributeValue::L(entries)) = item.get_mut(HISTORY) {
            if let AttributeValue::M(entry) = &mut entries[0] {
                entry.insert(REPLACED_EXTERNAL_ID.into(), attr_s("ch_1"));
            }
        }
        let err = operation_from_item(&item).unwrap_err().to_string();
        assert!(err.contains(HISTORY), "{err}");
    }

    #[test]
    fn a_record_without_requested_by_reads_as_not_recorded() {
        // Releases before 2026-11-30 did not record the caller.
        let mut item = operation_to_item(&sample());
        item.remove("requested_by");
        let op = operation_from_item(&item).unwrap();
        assert_eq!(op.requested_by, None);
        assert!(!operation_to_item(&op).contains_key("requested_by"));
    }

    /// Each kind's state attributes are read on its own kind's record only: one that belongs to
    /// another kind (a refund's `capture_before`) makes the record unreadable, naming the
    /// attribute; its twin, the same attribute on the kind that holds it, reads.
    #[test]
    fn a_state_attribute_of_another_kind_is_an_error_and_on_its_own_kind_reads() {
        let charge = sample();
        let mut refund = charge_core::testing::order("ord-item")
            .status(OperationStatus::Succeeded)
            .build();
        refund.kind = OperationKind::Refund(charge_core::domain::RefundId::parse("r-1").unwrap());
        refund.params = Params::Refund(
            RefundParams {
                amount: Amount::new(100).unwrap(),
                currency: Currency::parse("eur").unwrap(),
                payment_intent: PaymentIntentId::parse("pi_1").unwrap(),
                reason: None,
                charge_attempt: 1,
            },
            RefundState::default(),
        );
        let mut capture = refund.clone();
        capture.kind = OperationKind::FIRST_CAPTURE;
        capture.params = Params::Capture(CaptureParams {
            amount_to_capture: Amount::new(100).unwrap(),
            currency: Currency::parse("eur").unwrap(),
            payment_intent: PaymentIntentId::parse("pi_1").unwrap(),
            charge_attempt: 1,
        });
        let taker = format!("capture:{}", capture.operation_id);
        let state = [
            (REFUND_RESERVED, attr_n(300)),
            (CAPTURE_BEFORE, attr_n(1_800_000_000_000_i64)),
            (AMOUNT_CAPTURED, attr_n(100)),
            (TAKEN_BY, attr_s(&taker)),
            (STRIPE_REFUND_ID, attr_s("re_1")),
        ];
        for (op, holds) in [
            (&charge, &CHARGE_STATE[..]),
            (&refund, &REFUND_STATE[..]),
            (&capture, &[][..]),
        ] {
            for (field, value) in &state {
                let mut item = operation_to_item(op);
                item.insert((*field).to_owned(), value.clone());
                let read = operation_from_item(&item);
                if holds.contains(field) {
                    let read = read.unwrap_or_else(|e| panic!("{} {field}: {e}", op.kind.as_str()));
                    assert_eq!(operation_to_item(&read)[*field], *value, "{field} kept");
                } else {
                    let err = read.unwrap_err().to_string();
                    assert!(
                        err.contains(field) && err.contains(op.kind.as_str()),
                        "{} {field}: {err}",
                        op.kind.as_str()
                    );
                }
            }
        }
        let refund_read = {
            let mut item = operation_to_item(&refund);
            item.insert(STRIPE_REFUND_ID.into(), attr_s("re_1"));
            operation_from_item(&item).unwrap()
        };
        assert_eq!(refund_read.stripe_refund_id().unwrap().as_str(), "re_1");
        assert_eq!(
            (refund_read.capture_before(), refund_read.refund_reserved()),
            (None, 0)
        );
    }

    /// A refund, capture, cancel or dispute acting on a later attempt names it
    /// (`charge_attempt`, read back); acting on the first it writes nothing (the item every
    /// earlier release wrote, read as the first). A number outside 2 to 20 (1 is never written),
    /// or the attribute on a charge, makes the record unreadable.
    #[test]
    fn the_attempt_an_operation_acts_on_round_trips_and_the_first_is_absent() {
        let mut refund = charge_core::testing::order("ord-item")
            .status(OperationStatus::Succeeded)
            .build();
        refund.kind = OperationKind::Refund(charge_core::domain::RefundId::parse("r-1").unwrap());
        let params = |n| RefundParams {
            amount: Amount::new(100).unwrap(),
            currency: Currency::parse("eur").unwrap(),
            payment_intent: PaymentIntentId::parse("pi_1").unwrap(),
            reason: None,
            charge_attempt: n,
        };
        refund.params = Params::Refund(params(1), RefundState::default());
        let first = operation_to_item(&refund);
        assert!(!first.contains_key(CHARGE_ATTEMPT));
        let read = operation_from_item(&first).unwrap();
        assert_eq!(
            read.charge_key(),
            OperationKey::charge(refund.order_id.clone())
        );
        refund.params = Params::Refund(params(2), RefundState::default());
        let second = operation_to_item(&refund);
        assert_eq!(second[CHARGE_ATTEMPT], attr_n(2));
        let read = operation_from_item(&second).unwrap();
        assert_eq!(read.params, refund.params);
        assert_eq!(read.charge_key().kind, OperationKind::Charge(2));
        let mut dispute = dispute_record();
        if let Params::Dispute(p, _) = &mut dispute.params {
            p.charge_attempt = 3;
        }
        let read = operation_from_item(&operation_to_item(&dispute)).unwrap();
        assert_eq!(read.charge_key().kind, OperationKind::Charge(3));
        for bad in [attr_n(1), attr_n(21), attr_n(0), attr_s("2")] {
            let mut item = second.clone();
            item.insert(CHARGE_ATTEMPT.into(), bad.clone());
            let err = operation_from_item(&item).unwrap_err().to_string();
            assert!(err.contains(CHARGE_ATTEMPT), "{bad:?}: {err}");
        }
        let mut charge = operation_to_item(&sample());
        charge.insert(CHARGE_ATTEMPT.into(), attr_n(2));
        let err = operation_from_item(&charge).unwrap_err().to_string();
        assert!(err.contains(CHARGE_ATTEMPT), "{err}");
    }

    fn dispute_record() -> Operation {
        let dispute = charge_core::testing::stripe_dispute("dp_1", "pi_1");
        let params = DisputeParams::of(&dispute, PaymentIntentId::parse("pi_1").unwrap()).unwrap();
        let mut op = Operation::new_dispute(
            OrderId::parse("ord-item").unwrap(),
            params,
            DisputeState::of(&dispute, true),
            Timestamp::from_millis(1_800_000_000_000),
            Timestamp::from_millis(1_800_086_400_000),
        );
        op.params.dispute_state_mut().unwrap().status =
            DisputeStatus::Other("a_status_added_later".into());
        op
    }

    /// A dispute's record is its own kind under its order (`dispute#dp_…`), every field read
    /// back as written: Stripe's status verbatim (one this release does not know too), the
    /// deadline, the reservation. Without a deadline the attribute is absent and reads as none.
    #[test]
    fn a_dispute_record_round_trips() {
        let op = dispute_record();
        let item = stored_item(&op);
        assert_eq!(item[SK], attr_s("dispute#dp_1"));
        assert_eq!(item[DISPUTE_STATUS], attr_s("a_status_added_later"));
        assert_eq!(item[DISPUTE_RESERVED], attr_bool(true));
        assert_eq!(operation_from_item(&item).unwrap(), op);
        let mut no_deadline = op.clone();
        no_deadline.params.dispute_state_mut().unwrap().due_by = None;
        let item = stored_item(&no_deadline);
        assert!(!item.contains_key(DUE_BY));
        assert_eq!(operation_from_item(&item).unwrap(), no_deadline);
        // A charge's attribute on a dispute's record is malformed, naming it.
        let mut item = stored_item(&op);
        item.insert(DISPUTED_BY.into(), attr_s("dp_1"));
        let err = operation_from_item(&item).unwrap_err().to_string();
        assert!(
            err.contains(DISPUTED_BY) && err.contains("dispute"),
            "{err}"
        );
    }

    /// A charge's open dispute is written and read back; a charge with none (and every charge
    /// written before disputes) has neither attribute and reads with none. A dispute's
    /// attribute on a charge is malformed.
    #[test]
    fn a_charge_s_open_dispute_round_trips_and_its_absence_reads_as_none() {
        let mut op = sample();
        let none = operation_to_item(&op);
        assert!(!none.contains_key(DISPUTED_BY) && !none.contains_key(DISPUTE_REFUNDABLE));
        let read = operation_from_item(&none).unwrap();
        assert_eq!(read.params.charge_state().unwrap().disputed_by, None);
        let state = op.params.charge_state_mut().unwrap();
        state.disputed_by = Some(DisputeId::parse("dp_1").unwrap());
        state.dispute_refundable = true;
        let item = operation_to_item(&op);
        assert_eq!(item[DISPUTE_REFUNDABLE], attr_bool(true));
        let mut with_due = item.clone();
        with_due.insert("due_at".into(), attr_n(op.next_due_at.unwrap().as_millis()));
        assert_eq!(operation_from_item(&with_due).unwrap(), op);
        let mut item = operation_to_item(&sample());
        item.insert(DISPUTE_STATUS.into(), attr_s("lost"));
        let err = operation_from_item(&item).unwrap_err().to_string();
        assert!(err.contains(DISPUTE_STATUS), "{err}");
        let mut item = operation_to_item(&op);
        item.insert(DISPUTE_REFUNDABLE.into(), attr_s("yes"));
        let err = operation_from_item(&item).unwrap_err().to_string();
        assert!(err.contains("not a boolean"), "{err}");
    }

    #[test]
    fn corrupted_items_are_errors() {
        let mut item = operation_to_item(&sample());
        item.insert("amount".into(), attr_n("-5"));
        assert!(operation_from_item(&item)
            .unwrap_err()
            .to_string()
            .contains("amount"));
        let mut item = operation_to_item(&sample());
        item.insert("amount".into(), attr_n("12.5"));
        assert!(operation_from_item(&item).is_err());
        let mut item = operation_to_item(&sample());
        item.insert("status".into(), attr_s("maybe"));
        assert!(operation_from_item(&item).is_err());
        let mut item = operation_to_item(&sample());
        item.remove("operation_id");
        assert!(operation_from_item(&item).is_err());
        let mut item = operation_to_item(&sample());
        item.insert("requested_by".into(), attr_s("anonymous"));
        assert!(operation_from_item(&item)
            .unwrap_err()
            .to_string()
            .contains("requested_by"));
    }
}
