//! The specification of the store's conditional writes ([`charge_core::store_rules`]): the
//! record as stored (or none), a write → written, or refused by the first of its guards that
//! fails (in the order the write lists them). Every rule has its accepted case and a refusal per
//! guard.
//!
//! The same table runs on moto against the DynamoDB adapter (`tests/store_rules_on_aws.rs`
//! includes this file): there each guard's clause, sent alone, must match exactly when the guard
//! holds, and `DynamoStore` must answer what the rule answers. That is how the adapter is held to
//! these rules.

#![allow(dead_code)] // the moto run uses what the pure run does not, and the other way round

mod spec;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use charge_core::domain::PaymentIntentId;
use charge_core::operation::{AuditEntry, Lease, LeaseToken, Operation, OperationStatus, Review};
use charge_core::store::{
    Claim, ClaimRequest, ManualResolution, OperatorGuard, OutcomeRecord, Recorded, Reschedule,
};
use charge_core::store_rules::{self, Guard, Transition, Written};
use charge_core::testing::{claim_request, LEASE, T0};
use spec::Row;

/// (the record as stored, `None`: there is none; the write) → written, or the guard that
/// refuses it. A write's request carries its own time, so `now` is `()`; what the write makes of
/// the record is the store contract's to check, so `next` is `()` here.
pub type StoreRow = Row<Option<Operation>, Write, (), Then, ()>;

/// The write, made for the record it goes to (with no record, for a fresh order's record that
/// is never stored).
pub type Write = Box<dyn FnOnce(&Operation) -> Request>;

/// What the rule answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    Written,
    /// Refused by the guard of this name (`"no record"` without a record).
    Refused(&'static str),
}

/// A fresh order id for every record the table stores, so no row finds another's record.
fn unique_order() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "rules-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn at(secs: u64) -> charge_core::time::Timestamp {
    T0.plus(Duration::from_secs(secs))
}

pub fn pi(id: &str) -> Option<PaymentIntentId> {
    Some(PaymentIntentId::parse(id).unwrap())
}

pub fn audit(action: &str, from: OperationStatus, to: OperationStatus) -> AuditEntry {
    AuditEntry {
        action: action.into(),
        previous_status: from,
        new_status: to,
        note: "checked in the dashboard".into(),
        at: at(30),
        caller: "arn:aws:sts::123456789012:assumed-role/oncall/alice".into(),
        label: Some("alice".into()),
        forced: None,
        review: Some("search_ambiguous: found 0".into()),
        replaced_external_id: None,
    }
}

/// The records the table starts from, each for a fresh order.
pub mod state {
    use super::*;

    pub fn pending() -> Operation {
        charge_core::testing::order(&unique_order()).at(T0).build()
    }

    /// Claimed at 1 s with `token`, the lease running to 61 s.
    pub fn leased(token: LeaseToken) -> Operation {
        let mut op = pending();
        op.attempts = 1;
        op.first_attempted_at = Some(at(1));
        op.lease = Some(Lease {
            token,
            expires_at: at(1).plus(LEASE),
        });
        op.updated_at = at(1);
        op
    }

    /// Attempted once, the outcome unknown, due again at 120 s.
    pub fn unknown() -> Operation {
        let mut op = leased(LeaseToken::new_random());
        op.lease = None;
        op.status = OperationStatus::Unknown;
        op.last_error = Some("timeout".into());
        op.updated_at = at(2);
        op.next_due_at = Some(at(120));
        op
    }

    pub fn in_review() -> Operation {
        let mut op = unknown();
        op.review = Some(Review {
            reason: "search_ambiguous: found 0".into(),
            flagged_at: at(2),
        });
        op
    }

    pub fn settled(status: OperationStatus) -> Operation {
        let mut op = unknown();
        op.status = status;
        op.external_id = pi("pi_settled");
        op.last_error = None;
        op.next_due_at = None;
        op
    }

    /// A record no write leaves (a hand edit): settled, with a lease still on it.
    pub fn settled_with_lease(token: LeaseToken) -> Operation {
        let mut op = settled(OperationStatus::Succeeded);
        op.lease = Some(Lease {
            token,
            expires_at: at(61),
        });
        op
    }

    /// A record no write leaves (a hand edit): unknown, out of the index.
    pub fn unscheduled() -> Operation {
        let mut op = unknown();
        op.next_due_at = None;
        op
    }
}

/// One write of the table.
#[derive(Debug, Clone)]
pub enum Request {
    Claim(ClaimRequest),
    Record(OutcomeRecord),
    Reschedule(Reschedule),
    Resolve(ManualResolution),
}

/// What a store answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Claim(Claim),
    Recorded(Recorded),
}

impl Request {
    pub fn guards(&self) -> Vec<Guard> {
        match self {
            Request::Claim(r) => r.guards(),
            Request::Record(r) => r.guards(),
            Request::Reschedule(r) => r.guards(),
            Request::Resolve(r) => r.guards(),
        }
    }

    /// The rule: the record after the write, or the guard that refuses it.
    pub fn rule(&self, op: &Operation) -> Result<Operation, Guard> {
        match self {
            Request::Claim(r) => store_rules::apply(op, r),
            Request::Record(r) => store_rules::apply(op, r),
            Request::Reschedule(r) => store_rules::apply(op, r),
            Request::Resolve(r) => store_rules::apply(op, r),
        }
    }

    /// What a store following the rule answers, from the rule's verdict.
    pub fn answer(&self, written: Written) -> Answer {
        match self {
            Request::Claim(_) => Answer::Claim(store_rules::claimed(written)),
            _ => Answer::Recorded(store_rules::recorded(written)),
        }
    }
}

pub fn claim_at(secs: u64) -> Write {
    Box::new(move |op| Request::Claim(claim_request(op, LeaseToken::new_random(), at(secs))))
}

pub fn outcome(
    token: LeaseToken,
    status: OperationStatus,
    change: impl FnOnce(&mut OutcomeRecord) + 'static,
) -> Write {
    Box::new(move |op| {
        let mut rec = OutcomeRecord {
            external_id: status.is_settled().then(|| pi("pi_rules")).flatten(),
            ..charge_core::testing::outcome(op, token, status, at(10))
        };
        change(&mut rec);
        Request::Record(rec)
    })
}

pub fn redrive(change: impl FnOnce(&mut Reschedule) + 'static) -> Write {
    Box::new(move |op| {
        let mut req = Reschedule::redrive(op, at(900), at(20));
        change(&mut req);
        Request::Reschedule(req)
    })
}

/// An operator's re-drive out of review, at 30 s, with a 5 s margin on leases.
pub fn operator(req: &mut Reschedule) {
    req.clear_review = true;
    req.operator = Some(OperatorGuard {
        lease_cutoff: at(25),
        audit: audit("redrive", req.expected_status, req.expected_status),
    });
}

pub fn resolve(
    status: OperationStatus,
    change: impl FnOnce(&mut ManualResolution) + 'static,
) -> Write {
    Box::new(move |op| {
        let mut req = ManualResolution {
            key: op.key(),
            operation_id: op.operation_id,
            status,
            external_id: pi("pi_by_hand"),
            expected_updated_at: op.updated_at,
            stripe_refund_id: None,
            release: None,
            guard: OperatorGuard {
                lease_cutoff: at(25),
                audit: audit(&format!("resolve_{status}"), op.status, status),
            },
            authorization: None,
        };
        change(&mut req);
        Request::Resolve(req)
    })
}

/// The same write, made for another operation at the same key.
pub fn for_another(write: Write) -> Write {
    Box::new(move |op| write(&other_operation(op)))
}

pub fn other_operation(op: &Operation) -> Operation {
    let mut other = op.clone();
    other.operation_id = charge_core::domain::OperationId::new_random();
    other
}

pub fn table() -> Vec<StoreRow> {
    use OperationStatus::{Failed, Pending, Succeeded, Unknown};
    let holder = LeaseToken::new_random();
    let nobody = |_: &mut OutcomeRecord| {};
    use Then::{Refused, Written};
    vec![
        // Claim: unsettled, not in review, no live lease, this operation.
        Row {
            says: "claim a pending record",
            found: Some(state::pending()),
            input: claim_at(5),
            now: (),
            next: (),
            then: Written,
        },
        Row {
            says: "claim under a live lease",
            found: Some(state::leased(holder)),
            input: claim_at(30),
            now: (),
            next: (),
            then: Refused("no_lease_after"),
        },
        Row {
            says: "claim as the lease expires (expires_at == now)",
            found: Some(state::leased(holder)),
            input: claim_at(61),
            now: (),
            next: (),
            then: Written,
        },
        Row {
            says: "claim a record in review",
            found: Some(state::in_review()),
            input: claim_at(30),
            now: (),
            next: (),
            then: Refused("not_in_review"),
        },
        Row {
            says: "claim a succeeded record",
            found: Some(state::settled(Succeeded)),
            input: claim_at(30),
            now: (),
            next: (),
            then: Refused("unsettled"),
        },
        Row {
            says: "claim a failed record",
            found: Some(state::settled(Failed)),
            input: claim_at(30),
            now: (),
            next: (),
            then: Refused("unsettled"),
        },
        Row {
            says: "claim for another operation at the key",
            found: Some(state::pending()),
            input: for_another(claim_at(5)),
            now: (),
            next: (),
            then: Refused("is_operation"),
        },
        Row {
            says: "claim with no record",
            found: None,
            input: claim_at(5),
            now: (),
            next: (),
            then: Refused("no record"),
        },
        // Record: the lease holder, over an unsettled record.
        Row {
            says: "the holder records unknown",
            found: Some(state::leased(holder)),
            input: outcome(holder, Unknown, nobody),
            now: (),
            next: (),
            then: Written,
        },
        Row {
            says: "the holder records succeeded",
            found: Some(state::leased(holder)),
            input: outcome(holder, Succeeded, nobody),
            now: (),
            next: (),
            then: Written,
        },
        Row {
            says: "the holder records failed, keeping no error",
            found: Some(state::leased(holder)),
            input: outcome(holder, Failed, |r| r.last_error = None),
            now: (),
            next: (),
            then: Written,
        },
        Row {
            says: "the holder flags it for review",
            found: Some(state::leased(holder)),
            input: outcome(holder, Unknown, |r| {
                r.review = Some(Review {
                    reason: "intent_mismatch: pi_x".into(),
                    flagged_at: at(10),
                })
            }),
            now: (),
            next: (),
            then: Written,
        },
        Row {
            says: "another token records",
            found: Some(state::leased(holder)),
            input: outcome(LeaseToken::new_random(), Succeeded, nobody),
            now: (),
            next: (),
            then: Refused("holds_lease"),
        },
        Row {
            says: "a record without a lease",
            found: Some(state::unknown()),
            input: outcome(holder, Succeeded, nobody),
            now: (),
            next: (),
            then: Refused("holds_lease"),
        },
        Row {
            says: "the holder over a settled record (a lease left by hand)",
            found: Some(state::settled_with_lease(holder)),
            input: outcome(holder, Failed, nobody),
            now: (),
            next: (),
            then: Refused("unsettled"),
        },
        Row {
            says: "the holder's token for another operation",
            found: Some(state::leased(holder)),
            input: for_another(outcome(holder, Succeeded, nobody)),
            now: (),
            next: (),
            then: Refused("is_operation"),
        },
        Row {
            says: "record with no record",
            found: None,
            input: outcome(holder, Succeeded, nobody),
            now: (),
            next: (),
            then: Refused("no record"),
        },
        // Reschedule: as read, unsettled, in the index; an operator's also not leased.
        Row {
            says: "the reconciler re-drives an unknown",
            found: Some(state::unknown()),
            input: redrive(|_| {}),
            now: (),
            next: (),
            then: Written,
        },
        Row {
            says: "a re-drive of a status that moved",
            found: Some(state::unknown()),
            input: redrive(|r| r.expected_status = Pending),
            now: (),
            next: (),
            then: Refused("status_is"),
        },
        Row {
            says: "a re-drive after another write",
            found: Some(state::unknown()),
            input: redrive(|r| r.expected_updated_at = at(1)),
            now: (),
            next: (),
            then: Refused("updated_at"),
        },
        Row {
            says: "a re-drive of a record read as settled",
            found: Some(state::settled(Succeeded)),
            input: redrive(|_| {}),
            now: (),
            next: (),
            then: Refused("unsettled"),
        },
        Row {
            says: "a re-drive of a record out of the index (a hand edit)",
            found: Some(state::unscheduled()),
            input: redrive(|_| {}),
            now: (),
            next: (),
            then: Refused("scheduled"),
        },
        Row {
            says: "an operator takes it out of review",
            found: Some(state::in_review()),
            input: redrive(operator),
            now: (),
            next: (),
            then: Written,
        },
        Row {
            says: "an operator re-drive under a lease live past the margin",
            found: Some(state::leased(holder)),
            input: redrive(operator),
            now: (),
            next: (),
            then: Refused("no_lease_after"),
        },
        // Resolve: settles, as read, unsettled, no lease that may be live.
        Row {
            says: "an operator resolves a review as succeeded",
            found: Some(state::in_review()),
            input: resolve(Succeeded, |_| {}),
            now: (),
            next: (),
            then: Written,
        },
        Row {
            says: "an operator resolves an unknown as failed",
            found: Some(state::unknown()),
            input: resolve(Failed, |r| r.external_id = None),
            now: (),
            next: (),
            then: Written,
        },
        Row {
            says: "a resolve under a lease live past the margin",
            found: Some(state::leased(holder)),
            input: resolve(Succeeded, |_| {}),
            now: (),
            next: (),
            then: Refused("no_lease_after"),
        },
        Row {
            says: "a resolve of a settled record",
            found: Some(state::settled(Failed)),
            input: resolve(Succeeded, |_| {}),
            now: (),
            next: (),
            then: Refused("unsettled"),
        },
        Row {
            says: "a resolve after another write",
            found: Some(state::in_review()),
            input: resolve(Succeeded, |r| r.expected_updated_at = at(1)),
            now: (),
            next: (),
            then: Refused("updated_at"),
        },
        Row {
            says: "a resolve to an unsettled status",
            found: Some(state::in_review()),
            input: resolve(Unknown, |_| {}),
            now: (),
            next: (),
            then: Refused("settles"),
        },
        Row {
            says: "a resolve for another operation",
            found: Some(state::in_review()),
            input: for_another(resolve(Succeeded, |_| {})),
            now: (),
            next: (),
            then: Refused("is_operation"),
        },
    ]
}

/// Each row's write made for its record: (the record as stored, the write, what the rule answers).
pub fn sent(rows: Vec<StoreRow>) -> Vec<Row<Option<Operation>, Request, (), Then, ()>> {
    rows.into_iter()
        .map(|row| {
            let input = match &row.found {
                Some(op) => (row.input)(op),
                None => (row.input)(&state::pending()),
            };
            Row {
                says: row.says,
                found: row.found,
                input,
                now: (),
                next: (),
                then: row.then,
            }
        })
        .collect()
}

/// The rule's verdict on a write over the record as stored.
pub fn verdict(found: &Option<Operation>, write: &Request) -> Result<Operation, Option<Guard>> {
    match found {
        None => Err(None),
        Some(op) => write.rule(op).map_err(Some),
    }
}

#[test]
fn store_rules_table() {
    let rows = sent(table());
    let says: std::collections::BTreeSet<&str> = rows.iter().map(|r| r.says).collect();
    assert_eq!(says.len(), rows.len(), "each row says something of its own");
    spec::holds(&rows, |found, write, ()| {
        let then = match verdict(found, write) {
            Ok(_) => Then::Written,
            Err(None) => Then::Refused("no record"),
            Err(Some(by)) => Then::Refused(by.as_str()),
        };
        ((), then)
    });
}

/// The name of each verdict: written, or the guard that refuses (exhaustive over `Guard`).
fn variant(verdict: &Result<Operation, Option<Guard>>) -> &'static str {
    match verdict {
        Ok(_) => "written",
        Err(None) => "no record",
        Err(Some(guard)) => match guard {
            Guard::IsOperation(_) => "is_operation",
            Guard::Unsettled => "unsettled",
            Guard::NotInReview => "not_in_review",
            Guard::NoLeaseAfter(_) => "no_lease_after",
            Guard::HoldsLease(_) => "holds_lease",
            Guard::StatusIs(_) => "status_is",
            Guard::UpdatedAt(_) => "updated_at",
            Guard::Scheduled => "scheduled",
            Guard::Settles(_) => "settles",
            // The reservation's and the taking's guards: the store contract and their own moto
            // tests (`the_reservation_s_clauses_are_its_guards`, `the_taking_s_clauses_are_its_
            // guards`) refuse by each; this table holds the four writes every kind makes.
            Guard::IsCharge
            | Guard::ReservedAtMost(_)
            | Guard::ReservedAtLeast(_)
            | Guard::IsRefund
            | Guard::NotTaken
            | Guard::TakenBy(_)
            | Guard::NeverAttempted
            | Guard::AuthorizedOr(_) => "a reservation's or a taking's guard",
            // A new charge attempt's: `spec_attempt.rs` (`start_attempt_table`) refuses by each.
            Guard::LatestAttemptIs(_) | Guard::NotCanceled => "an attempt's guard",
        },
    }
}

const VERDICTS: &[&str] = &[
    "written",
    "no record",
    "is_operation",
    "unsettled",
    "not_in_review",
    "no_lease_after",
    "holds_lease",
    "status_is",
    "updated_at",
    "scheduled",
    "settles",
];

fn verdicts(
    rows: &[Row<Option<Operation>, Request, (), Then, ()>],
) -> Vec<Result<Operation, Option<Guard>>> {
    rows.iter()
        .map(|row| verdict(&row.found, &row.input))
        .collect()
}

#[test]
fn every_guard_refuses_in_some_row() {
    let rows = sent(table());
    spec::covers("the store rules", verdicts(&rows), VERDICTS, variant);
}

/// The twin: a table without its re-drives out of the index is caught, by the guard's name.
#[test]
fn a_table_missing_a_guard_is_caught() {
    let rows = sent(table());
    let kept: Vec<_> = verdicts(&rows)
        .into_iter()
        .filter(|v| !matches!(v, Err(Some(Guard::Scheduled))))
        .collect();
    assert_eq!(spec::uncovered(kept, VERDICTS, variant), ["scheduled"]);
}
