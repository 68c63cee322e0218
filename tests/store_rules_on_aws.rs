//! The store's rules (`charge_core::store_rules`) against the conditions the DynamoDB adapter
//! sends, on moto: the specification's table (`core/tests/spec_store_rules.rs`, included here) of
//! (stored record, write, answer), every rule's accept and refuse cases with the guard that
//! refuses. For each row:
//!
//! - the pure rule ([`store_rules::apply`], what both in-memory stores run) gives the table's
//!   answer;
//! - each of the write's guards, sent alone as a filter on the stored item ([`writes::condition`]),
//!   matches exactly when [`Guard::holds`] says it holds: every clause is its guard;
//! - `DynamoStore` answers what the rule answers: the record as the rule writes it (the update
//!   expression is the change) or, refused, the stored record untouched, with no read: moto, as
//!   DynamoDB, returns the item (ALL_OLD) with every refusal of an existing record, and a write
//!   refused for want of a record reads nothing either (the functions' roles have no GetItem).
//!
//! The same table runs again on a client that never asks for `ReturnValuesOnConditionCheckFailure`
//! (an SDK interceptor takes it off every request, as a server without the feature, dynalite,
//! would ignore it) with a store built `reading_refusals`: the answers are the same, each refused
//! write paying one read (the store must not depend on a feature some servers lack).
//! Last, the unknown index on moto (which applies the INCLUDE projection) shows `status`, and a
//! claim leaves an operation's entry exactly as it was.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextMut;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::operation::put_item::PutItemInput;
use aws_sdk_dynamodb::operation::update_item::UpdateItemInput;
use aws_sdk_dynamodb::types::AttributeValue;
use charge_core::store::{OutcomeRecord, Recorded};
use charge_core::store_rules::{self, Guard, Written};
use charge_core::testing::T0;
use charge_core::{
    domain::PaymentIntentId,
    operation::{LeaseToken, Operation, OperationStatus},
};
use charge_once::adapters::dynamodb::item::{attr_s, key_of, stored_item, Attrs};
use charge_once::adapters::dynamodb::{due_shard, schema, writes, DynamoStore, UNKNOWN_INDEX};
use charge_once::ports::{
    ManualResolutions, OperationCreates, OperationLeases, OperationReads, UnknownIndex,
};
use charge_once::testing;
use testkit::aws::{sdk_config, unique};

#[path = "../core/tests/spec_store_rules.rs"]
mod spec_store_rules;

use spec_store_rules::{at, pi, sent, state, table, Answer, Request, Then};

/// What `DynamoStore` answers the write.
async fn send(write: &Request, store: &DynamoStore) -> Answer {
    match write {
        Request::Claim(r) => Answer::Claim(store.claim(r).await.unwrap()),
        Request::Record(r) => Answer::Recorded(store.record(r).await.unwrap()),
        Request::Reschedule(r) => Answer::Recorded(store.reschedule(r).await.unwrap()),
        Request::Resolve(r) => Answer::Recorded(store.resolve(r).await.unwrap()),
    }
}

async fn put(client: &aws_sdk_dynamodb::Client, table: &str, op: &Operation) {
    client
        .put_item()
        .table_name(table)
        .set_item(Some(stored_item(op)))
        .send()
        .await
        .expect("PutItem on moto");
}

/// Whether `guard`'s clause, as the adapter sends it, holds of the stored item: the item read
/// with the clause as a filter.
async fn clause_holds(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    op: &Operation,
    guard: Guard,
) -> Option<bool> {
    let condition = writes::condition(&[guard]).ok()?;
    if condition.expression.is_empty() {
        // A guard on the request: no clause, nothing sent.
        return None;
    }
    let (pk, sk) = key_of(&op.key());
    let out = client
        .query()
        .table_name(table)
        .key_condition_expression("#key_pk = :key_pk AND #key_sk = :key_sk")
        .filter_expression(&condition.expression)
        .set_expression_attribute_names(Some(condition.names))
        .expression_attribute_names("#key_pk", schema::PK)
        .expression_attribute_names("#key_sk", schema::SK)
        .set_expression_attribute_values(Some(condition.values))
        .expression_attribute_values(":key_pk", attr_s(&pk))
        .expression_attribute_values(":key_sk", attr_s(&sk))
        .consistent_read(true)
        .send()
        .await
        .expect("Query on moto");
    Some(out.count() == 1)
}

async fn raw(client: &aws_sdk_dynamodb::Client, table: &str, op: &Operation) -> Option<Attrs> {
    let (pk, sk) = key_of(&op.key());
    client
        .get_item()
        .table_name(table)
        .key(schema::PK, attr_s(&pk))
        .key(schema::SK, attr_s(&sk))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem on moto")
        .item
}

/// Runs the table on `store`; returns (refused writes of an existing record sent, the reads they
/// cost). `reads_refusals`: the store was built with `reading_refusals` (a server without
/// ALL_OLD).
async fn run_table(
    store: &DynamoStore,
    client: &aws_sdk_dynamodb::Client,
    reads_refusals: bool,
) -> (u64, u64) {
    let rows = sent(table());
    let (mut refused_sent, mut refusal_reads) = (0, 0);
    for row in rows {
        let case = row.says;
        let written: Written = match &row.found {
            None => Err(None),
            Some(op) => row.input.rule(op).map_err(|by| Some((op.clone(), by))),
        };
        let verdict = match &written {
            Ok(_) => Then::Written,
            Err(None) => Then::Refused("no record"),
            Err(Some((_, by))) => Then::Refused(by.as_str()),
        };
        assert_eq!(verdict, row.then, "{case}: the rule");

        let before = match &row.found {
            Some(op) => {
                put(client, store.table(), op).await;
                assert_eq!(
                    store.get(&op.key()).await.unwrap().as_ref(),
                    Some(op),
                    "{case}: stored as it reads back"
                );
                for guard in row.input.guards() {
                    if let Some(holds) = clause_holds(client, store.table(), op, guard).await {
                        assert_eq!(holds, guard.holds(op), "{case}: the clause of {guard:?}");
                    }
                }
                raw(client, store.table(), op).await
            }
            None => None,
        };

        let reads = store.calls().reads.load(Ordering::Relaxed);
        let got = send(&row.input, store).await;
        let reads = store.calls().reads.load(Ordering::Relaxed) - reads;
        assert_eq!(got, row.input.answer(written.clone()), "{case}: DynamoDB");
        match written {
            Ok(_) => assert_eq!(reads, 0, "{case}: ALL_NEW, no read"),
            Err(_) if row.then == Then::Refused("settles") => {
                assert_eq!(reads, 1, "{case}: refused before sending, the record read")
            }
            // DynamoDB returns the item whenever the record exists, so a refusal without one
            // is "no record" with no read (the functions' roles have no GetItem); a server
            // without ALL_OLD must read to tell.
            Err(None) => assert_eq!(
                reads,
                u64::from(reads_refusals),
                "{case}: a missing record costs no read on DynamoDB"
            ),
            Err(Some((op, _))) => {
                refused_sent += 1;
                refusal_reads += reads;
                assert_eq!(
                    raw(client, store.table(), &op).await,
                    before,
                    "{case}: a refused write leaves the item as it was"
                );
            }
        }
    }
    (refused_sent, refusal_reads)
}

async fn store_on(client: aws_sdk_dynamodb::Client) -> DynamoStore {
    let store = DynamoStore::new(client, unique("rules"));
    store.create_table().await.expect("create table on moto");
    store
}

#[tokio::test]
async fn every_rule_is_the_condition_dynamodb_checks() {
    let client = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let store = store_on(client.clone()).await;
    let (refused, reads) = run_table(&store, &client, false).await;
    assert!(refused >= 15, "{refused}");
    assert_eq!(reads, 0, "ALL_OLD: a refusal needs no read");
}

/// Takes `ReturnValuesOnConditionCheckFailure` off every PutItem and UpdateItem, as a server
/// without it (dynalite) ignores it: a refusal comes back without the item. Counts the requests.
#[derive(Debug, Default)]
struct WithoutAllOld {
    stripped: Arc<AtomicU64>,
}

impl Intercept for WithoutAllOld {
    fn name(&self) -> &'static str {
        "WithoutAllOld"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let input = context.input_mut();
        let taken = if let Some(update) = input.downcast_mut::<UpdateItemInput>() {
            update.return_values_on_condition_check_failure.take()
        } else if let Some(put) = input.downcast_mut::<PutItemInput>() {
            put.return_values_on_condition_check_failure.take()
        } else {
            None
        };
        if taken.is_some() {
            self.stripped.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

#[tokio::test]
async fn every_rule_holds_on_a_server_without_return_values_on_condition_check_failure() {
    let config = sdk_config().await;
    let stripped = Arc::new(AtomicU64::new(0));
    let without = aws_sdk_dynamodb::config::Builder::from(&config)
        .interceptor(WithoutAllOld {
            stripped: stripped.clone(),
        })
        .build();
    let store = store_on(aws_sdk_dynamodb::Client::from_conf(without))
        .await
        .reading_refusals();
    let client = aws_sdk_dynamodb::Client::new(&config);
    let (refused, reads) = run_table(&store, &client, true).await;
    assert!(refused >= 15, "{refused}");
    assert_eq!(
        stripped.load(Ordering::Relaxed),
        store.calls().writes.load(Ordering::Relaxed),
        "the feature was off for every write sent"
    );
    assert_eq!(reads, refused, "each refusal read the record once");

    // The create path too: the winner comes back, read.
    let first = state::pending();
    store.create_if_absent(&first).await.unwrap();
    let second = Operation {
        operation_id: charge_core::domain::OperationId::new_random(),
        ..first.clone()
    };
    assert_eq!(
        store.create_if_absent(&second).await.unwrap(),
        charge_core::store::Created::Existing(first)
    );
}

/// The index entry of `op` as an operator's Query returns it (no projection expression: every
/// projected attribute).
async fn index_entry(client: &aws_sdk_dynamodb::Client, table: &str, op: &Operation) -> Attrs {
    let shard = match op.review {
        Some(_) => schema::REVIEW_SHARD.to_owned(),
        None => due_shard(&op.operation_id),
    };
    let out = client
        .query()
        .table_name(table)
        .index_name(UNKNOWN_INDEX)
        .key_condition_expression("due_shard = :s")
        .expression_attribute_values(":s", AttributeValue::S(shard))
        .send()
        .await
        .expect("Query the unknown index on moto");
    let id = AttributeValue::S(op.operation_id.to_string());
    let mut entries = out
        .items()
        .iter()
        .filter(|e| e.get(schema::OPERATION_ID) == Some(&id));
    let entry = entries.next().expect("the operation's index entry").clone();
    assert!(entries.next().is_none());
    entry
}

#[tokio::test]
async fn the_unknown_index_shows_the_status_and_a_claim_leaves_the_entry_as_it_was() {
    let client = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let store = store_on(client.clone()).await;
    let op = charge_core::testing::order(&unique("index")).at(T0).build();
    store.create_if_absent(&op).await.unwrap();

    let created = index_entry(&client, store.table(), &op).await;
    let names: BTreeSet<&str> = created.keys().map(String::as_str).collect();
    let mut want: BTreeSet<&str> =
        [schema::PK, schema::SK, schema::DUE_SHARD, schema::DUE_AT].into();
    want.extend(schema::UNKNOWN_INDEX_PROJECTED);
    assert_eq!(names, want);
    assert_eq!(created.get(schema::STATUS), Some(&attr_s("pending")));

    // A claim changes nothing the entry holds (on DynamoDB: no index write).
    let (token, claimed) = testing::claim(&store, &op, at(1)).await;
    assert_eq!(claimed.attempts, 1);
    assert_eq!(index_entry(&client, store.table(), &op).await, created);

    // The outcome moves the entry and shows the new status.
    let rec = charge_core::testing::outcome(&op, token, OperationStatus::Unknown, at(2));
    let unknown = testing::record(&store, &rec).await;
    let entry = index_entry(&client, store.table(), &unknown).await;
    assert_eq!(entry.get(schema::STATUS), Some(&attr_s("unknown")));
    assert_ne!(entry.get(schema::DUE_AT), created.get(schema::DUE_AT));
}

/// The refund reservation's guards, each as the clause DynamoDB checks, hold of the stored item
/// exactly when the rule says: on charges with no count (written before refunds), part and all
/// of it reserved, and on a refund record.
#[tokio::test]
async fn the_reservation_s_clauses_are_its_guards() {
    let client = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let store = store_on(client.clone()).await;
    let charge = |reserved: i64| {
        let mut op = state::settled(OperationStatus::Succeeded);
        op.params.charge_state_mut().unwrap().refund_reserved = reserved;
        op
    };
    let refund = {
        let mut op = charge(0);
        op.kind = charge_core::domain::OperationKind::Refund(
            charge_core::domain::RefundId::parse("r-1").unwrap(),
        );
        op.params = charge_core::operation::Params::Refund(
            charge_core::refund::request::RefundParams {
                amount: charge_core::domain::Amount::new(500).unwrap(),
                currency: charge_core::domain::Currency::parse("usd").unwrap(),
                payment_intent: PaymentIntentId::parse("pi_settled").unwrap(),
                reason: None,
                charge_attempt: 1,
            },
            charge_core::refund::state::RefundState::default(),
        );
        op
    };
    let guards = [
        Guard::IsCharge,
        Guard::IsRefund,
        Guard::ReservedAtMost(400),
        Guard::ReservedAtMost(600),
        Guard::ReservedAtMost(0),
        Guard::ReservedAtMost(-1),
        Guard::ReservedAtLeast(600),
        Guard::ReservedAtLeast(601),
        Guard::ReservedAtLeast(0),
        Guard::StatusIs(OperationStatus::Succeeded),
    ];
    let mut checked = 0;
    for stored in [charge(0), charge(600), charge(1000), refund] {
        put(&client, store.table(), &stored).await;
        assert_eq!(
            store.get(&stored.key()).await.unwrap().as_ref(),
            Some(&stored)
        );
        for guard in guards {
            let holds = clause_holds(&client, store.table(), &stored, guard)
                .await
                .expect("every reservation guard has a clause");
            assert_eq!(
                holds,
                guard.holds(&stored),
                "{guard:?} on {} reserved {}",
                stored.kind.sort_key(),
                stored.refund_reserved()
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 40);
}

/// The records a capture's or cancel's guards are checked on: an authorized charge free, taken
/// by a capture, taken by a cancel; a charge never sent, one claimed, one failed; a capture.
mod taking {
    use charge_core::charge::state::Taker;
    use charge_core::{domain::CaptureMethod, take::request::CaptureParams};

    use super::*;

    pub fn authorized(taken_by: Option<Taker>) -> Operation {
        let mut op = state::unknown();
        if let Some(p) = op.params.charge_mut() {
            p.capture_method = CaptureMethod::Manual;
        }
        op.status = OperationStatus::Authorized;
        op.external_id = pi("pi_held");
        op.last_error = None;
        op.params.charge_state_mut().unwrap().capture_before = Some(at(7 * 24 * 3600));
        op.params.charge_state_mut().unwrap().taken_by = taken_by;
        op
    }

    pub fn taker(capture: bool) -> Taker {
        Taker {
            capture,
            operation_id: charge_core::domain::OperationId::new_random(),
        }
    }

    /// A capture of `charge`, claimed with `token` (put as it is, no write's history).
    pub fn capture_of(charge: &Operation, taker: Taker, token: LeaseToken) -> Operation {
        let mut op = state::leased(token);
        op.order_id = charge.order_id.clone();
        op.kind = charge_core::domain::OperationKind::FIRST_CAPTURE;
        op.operation_id = taker.operation_id;
        op.params = charge_core::operation::Params::Capture(CaptureParams {
            amount_to_capture: charge.params.amount(),
            currency: charge.params.currency().clone(),
            payment_intent: PaymentIntentId::parse("pi_held").unwrap(),
            charge_attempt: 1,
        });
        op.next_due_at = Some(at(120));
        op
    }
}

/// A capture's or cancel's guards on its charge, each as the clause DynamoDB checks, hold of the
/// stored item exactly when the rule says.
#[tokio::test]
async fn the_taking_s_clauses_are_its_guards() {
    let client = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let store = store_on(client.clone()).await;
    let (capture, cancel) = (taking::taker(true), taking::taker(false));
    let stored = [
        taking::authorized(None),
        taking::authorized(Some(capture)),
        taking::authorized(Some(cancel)),
        state::pending(),
        state::leased(LeaseToken::new_random()),
        state::settled(OperationStatus::Failed),
        taking::capture_of(&state::pending(), capture, LeaseToken::new_random()),
    ];
    let guards = [
        Guard::IsCharge,
        Guard::NotTaken,
        Guard::NotCanceled,
        Guard::TakenBy(capture.operation_id),
        Guard::TakenBy(cancel.operation_id),
        Guard::TakenBy(charge_core::domain::OperationId::new_random()),
        Guard::NeverAttempted,
        Guard::NoLeaseAfter(at(30)),
        Guard::StatusIs(OperationStatus::Authorized),
        Guard::StatusIs(OperationStatus::Pending),
        Guard::AuthorizedOr(OperationStatus::Succeeded),
        Guard::AuthorizedOr(OperationStatus::Failed),
        Guard::AuthorizedOr(OperationStatus::Authorized),
        Guard::Unsettled,
    ];
    let mut checked = 0;
    for op in &stored {
        put(&client, store.table(), op).await;
        assert_eq!(store.get(&op.key()).await.unwrap().as_ref(), Some(op));
        for guard in guards {
            let holds = clause_holds(&client, store.table(), op, guard)
                .await
                .expect("every taking guard has a clause");
            assert_eq!(
                holds,
                guard.holds(op),
                "{guard:?} on {} {} taken by {:?}",
                op.kind.sort_key(),
                op.status,
                op.taken_by()
            );
            checked += 1;
        }
    }
    assert_eq!(checked, stored.len() * guards.len());
}

/// A new charge attempt's guards, each as the clause DynamoDB checks, hold of the stored item
/// exactly when the rule says: a charge is the first attempt (`charge`) or a later one
/// (`charge#<n>`), never a capture; the head names its latest attempt (absent: 1); a cancel's
/// `taken_by` ends the order, a capture's does not.
#[tokio::test]
async fn the_attempt_s_clauses_are_its_guards() {
    let client = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let store = store_on(client.clone()).await;
    let head = state::settled(OperationStatus::Failed);
    let mut named = head.clone();
    named.order_id = charge_core::domain::OrderId::parse("ord-rules-named").unwrap();
    named.params.charge_state_mut().unwrap().latest_attempt = Some(2);
    let mut second = head.clone();
    second.kind = charge_core::domain::OperationKind::Charge(2);
    // Ended by a capture that found the authorization lapsed (may be charged again), and by a
    // cancel (may not).
    let taken = |capture: bool, order: &str| {
        let mut op = head.clone();
        op.order_id = charge_core::domain::OrderId::parse(order).unwrap();
        op.params.charge_state_mut().unwrap().taken_by = Some(taking::taker(capture));
        op
    };
    let stored = [
        head.clone(),
        named,
        second,
        taken(true, "ord-rules-lapsed"),
        taken(false, "ord-rules-canceled"),
        taking::capture_of(
            &state::pending(),
            taking::taker(true),
            LeaseToken::new_random(),
        ),
    ];
    let guards = [
        Guard::IsCharge,
        Guard::LatestAttemptIs(1),
        Guard::LatestAttemptIs(2),
        Guard::LatestAttemptIs(3),
        Guard::StatusIs(OperationStatus::Failed),
        Guard::NotTaken,
        Guard::NotCanceled,
        Guard::IsOperation(head.operation_id),
    ];
    let mut checked = 0;
    for op in &stored {
        put(&client, store.table(), op).await;
        assert_eq!(store.get(&op.key()).await.unwrap().as_ref(), Some(op));
        for guard in guards {
            let holds = clause_holds(&client, store.table(), op, guard)
                .await
                .expect("every attempt guard has a clause");
            assert_eq!(
                holds,
                guard.holds(op),
                "{guard:?} on {} latest {}",
                op.kind.sort_key(),
                op.latest_attempt()
            );
            checked += 1;
        }
    }
    assert_eq!(checked, stored.len() * guards.len());
}

/// Each change a capture or cancel makes to its charge, as the update DynamoDB applies, is the
/// rule's: the charge taken (or stopped, never sent), and each end of its authorization written
/// with the taker's outcome.
#[tokio::test]
async fn the_taking_s_changes_are_its_updates() {
    use charge_core::{
        store::{AuthorizationOutcome, SettleAuthorization, TakeAuthorization, TakeFrom},
        store_rules::{ChargeClaim, CreatedBeside},
    };
    let client = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let store = store_on(client.clone()).await;
    let take = |charge: &Operation, taker, from| TakeAuthorization {
        charge: charge.key(),
        charge_operation_id: charge.operation_id,
        taker,
        from,
        now: at(40),
    };
    for (charge, from) in [
        (taking::authorized(None), TakeFrom::Authorized),
        (state::pending(), TakeFrom::NeverSent),
    ] {
        put(&client, store.table(), &charge).await;
        let taker = taking::taker(from == TakeFrom::Authorized);
        let write = take(&charge, taker, from);
        let want = store_rules::apply(&charge, &write).expect("the rule accepts");
        let mut op = taking::capture_of(&charge, taker, LeaseToken::new_random());
        if !taker.capture {
            op.kind = charge_core::domain::OperationKind::Cancel;
        }
        let created = store
            .create_beside(&op, ChargeClaim::Take(&write))
            .await
            .unwrap();
        assert!(matches!(created, CreatedBeside::New(_)));
        assert_eq!(
            store.get(&charge.key()).await.unwrap(),
            Some(want),
            "{from:?}"
        );
    }
    let amount = charge_core::domain::Amount::new(900).unwrap();
    for outcome in [
        AuthorizationOutcome::Captured(amount),
        AuthorizationOutcome::Canceled,
        AuthorizationOutcome::Expired,
        AuthorizationOutcome::GivenBack,
    ] {
        let taker = taking::taker(true);
        let charge = taking::authorized(Some(taker));
        let token = LeaseToken::new_random();
        let capture = taking::capture_of(&charge, taker, token);
        put(&client, store.table(), &charge).await;
        put(&client, store.table(), &capture).await;
        let settle = SettleAuthorization {
            charge: charge.key(),
            taker,
            outcome,
            now: at(50),
        };
        let want = store_rules::apply(&charge, &settle).expect("the rule accepts");
        let rec = OutcomeRecord {
            authorization: Some(settle),
            ..charge_core::testing::outcome(&capture, token, OperationStatus::Succeeded, at(50))
        };
        let want_op = store_rules::apply(&capture, &rec).expect("the fence holds");
        let reads = store.calls().reads.load(Ordering::Relaxed);
        assert_eq!(
            store.record(&rec).await.unwrap(),
            Recorded::Written(want_op),
            "{outcome:?}"
        );
        // A transaction returns no item: the written record is read back, once (the charge
        // function's and the reconciler's roles may GetItem the table for it).
        assert_eq!(
            store.calls().reads.load(Ordering::Relaxed),
            reads + 1,
            "one read back"
        );
        assert_eq!(
            store.get(&charge.key()).await.unwrap(),
            Some(want),
            "{outcome:?}"
        );
    }
}
