//! The `OperationStore` contract: every condition the charge core relies on, races included.
//! Each case takes a fresh, empty store and uses order ids unique to the case.

use charge_core::domain::{OperationId, OperationKind};
use charge_core::operation::{Lease, Review};
use charge_core::operation::{LeaseToken, Operation, OperationStatus, Params};
use charge_core::refund::{self, request::RefundRequest, RefundRefusal};
use charge_core::store_rules;
use charge_core::store_rules::Guard;
use charge_core::testing::{claim_request, GRACE, LEASE, T0};
use charge_core::time::Timestamp;
use std::sync::Arc;
use std::time::Duration;

use charge_core::audit::AuditWindow;
use charge_core::charge::state::Taker;
use charge_core::domain::RefundId;
use charge_core::operation::AuditEntry;
use charge_core::store::OperatorGuard;
use charge_core::{
    domain::CaptureMethod,
    take::request::{CancelParams, CancelRequest, CaptureParams, CaptureRequest},
};
use charge_core::{
    store::{
        AuthorizationOutcome, Claim, ClaimRequest, Created, CreatedAttempt, ManualResolution,
        NewAttempt, OutcomeRecord, Recorded, RefundFailedLater, ReleaseRefund, Reschedule,
        ReserveRefund, SettleAuthorization, TakeAuthorization, TakeFrom,
    },
    store_rules::{ChargeClaim, CreatedBeside},
};
use charge_once::ports::{IndexQuery, OperationStore};
use charge_once::testing::claim;

/// The contract's operation for `order`, of `amount`, created at `now` (customer `cus_contract`).
pub fn operation(order: &str, amount: i64, now: Timestamp) -> Operation {
    charge_core::testing::order(order)
        .amount(amount)
        .customer("cus_contract")
        .requested_by("contract-tests")
        .at(now)
        .build()
}

/// The lease holder's outcome: the PaymentIntent `pi_contract` and no error.
fn outcome(
    op: &Operation,
    token: LeaseToken,
    status: OperationStatus,
    now: Timestamp,
) -> OutcomeRecord {
    OutcomeRecord {
        external_id: Some(charge_core::domain::PaymentIntentId::parse("pi_contract").unwrap()),
        last_error: None,
        ..charge_core::testing::outcome(op, token, status, now)
    }
}

pub async fn create_if_absent_returns_the_winner_unchanged(store: Arc<dyn OperationStore>) {
    let first = operation("contract-create", 1000, T0);
    assert_eq!(
        store.create_if_absent(&first).await.unwrap(),
        Created::New(first.clone())
    );
    let second = operation("contract-create", 2000, T0.plus(LEASE));
    match store.create_if_absent(&second).await.unwrap() {
        Created::Existing(existing) => assert_eq!(existing, first),
        other => panic!("expected the existing record, got {other:?}"),
    }
    assert_eq!(store.get(&first.key()).await.unwrap(), Some(first));
}

pub async fn get_of_a_missing_record_is_none(store: Arc<dyn OperationStore>) {
    let op = operation("contract-missing", 1000, T0);
    assert_eq!(store.get(&op.key()).await.unwrap(), None);
    assert_eq!(
        store.get_by_operation_id(&op.operation_id).await.unwrap(),
        None
    );
}

/// Operators find unsettled work by operation id (the unknown index lists it); once settled, an
/// operation is found by its order id only (no index by operation id: it would cost a write per
/// operation).
pub async fn get_by_operation_id_finds_unsettled_records_only(store: Arc<dyn OperationStore>) {
    let op = operation("contract-by-id", 1000, T0);
    store.create_if_absent(&op).await.unwrap();
    let other = operation("contract-by-id-other", 1000, T0);
    store.create_if_absent(&other).await.unwrap();
    assert_eq!(
        store.get_by_operation_id(&op.operation_id).await.unwrap(),
        Some(op.clone())
    );
    // Claimed (leased, attempted) it is still found, with what the claim wrote.
    let (token, claimed) = claim(store.as_ref(), &op, T0).await;
    assert_eq!(
        store.get_by_operation_id(&op.operation_id).await.unwrap(),
        Some(claimed)
    );
    let settled = store
        .record(&outcome(&op, token, OperationStatus::Succeeded, T0))
        .await
        .unwrap();
    assert!(matches!(settled, Recorded::Written(_)), "{settled:?}");
    assert_eq!(
        store.get_by_operation_id(&op.operation_id).await.unwrap(),
        None
    );
    let by_order = store.get(&op.key()).await.unwrap().unwrap();
    assert_eq!(by_order.status, OperationStatus::Succeeded);
    assert_eq!(
        store
            .get_by_operation_id(&other.operation_id)
            .await
            .unwrap(),
        Some(other)
    );
}

pub async fn an_operator_redrive_takes_an_operation_out_of_review(store: Arc<dyn OperationStore>) {
    let op = operation("contract-unreview", 1000, T0);
    store.create_if_absent(&op).await.unwrap();
    let (token, _) = claim(store.as_ref(), &op, T0).await;
    let mut flag = outcome(&op, token, OperationStatus::Unknown, T0);
    flag.review = Some(Review {
        reason: "search found 0".into(),
        flagged_at: T0,
    });
    let Recorded::Written(flagged) = store.record(&flag).await.unwrap() else {
        panic!("flagging must land");
    };
    let in_review = store
        .query_index(IndexQuery::InReview, None, 10)
        .await
        .unwrap();
    assert_eq!(in_review.operations.len(), 1);

    let later = T0.plus(Duration::from_secs(10));
    let req = Reschedule {
        key: op.key(),
        operation_id: op.operation_id,
        expected_status: OperationStatus::Unknown,
        expected_updated_at: flagged.updated_at,
        next_due_at: later,
        clear_review: true,
        sends: true,
        now: later,
        operator: Some(OperatorGuard {
            lease_cutoff: later,
            audit: audit(
                "redrive",
                OperationStatus::Unknown,
                OperationStatus::Unknown,
                later,
            ),
        }),
    };
    let Recorded::Written(back) = store.reschedule(&req).await.unwrap() else {
        panic!("the operator's re-drive must land");
    };
    assert_eq!(back.review, None);
    assert_eq!(back.redrives, 1);
    assert_eq!(back.history.len(), 1, "the re-drive is on the record");
    assert_eq!(back.history[0].action, "redrive");
    assert!(store
        .query_index(IndexQuery::InReview, None, 10)
        .await
        .unwrap()
        .operations
        .is_empty());
    let due = store
        .query_index(IndexQuery::DueBy(later), None, 10)
        .await
        .unwrap();
    assert_eq!(due.operations.len(), 1, "back in automatic work");
    assert!(matches!(
        store
            .claim(&claim_request(&op, LeaseToken::new_random(), later))
            .await
            .unwrap(),
        Claim::Claimed(_)
    ));
}

pub async fn claim_sets_lease_first_attempt_and_attempts(store: Arc<dyn OperationStore>) {
    let op = operation("contract-claim", 1000, T0);
    store.create_if_absent(&op).await.unwrap();
    let (token, rec) = claim(store.as_ref(), &op, T0).await;
    assert_eq!(rec.attempts, 1);
    assert_eq!(rec.first_attempted_at, Some(T0));
    assert_eq!(rec.lease.map(|l| l.token), Some(token));
    assert_eq!(
        store.get(&op.key()).await.unwrap(),
        Some(rec.clone()),
        "durable"
    );

    // While the lease is live, nobody else gets it.
    let other = LeaseToken::new_random();
    match store
        .claim(&claim_request(&op, other, T0.plus(Duration::from_secs(59))))
        .await
        .unwrap()
    {
        Claim::Leased(cur) => assert_eq!(cur.lease.map(|l| l.token), Some(token)),
        c => panic!("expected Leased, got {c:?}"),
    }
    // After it expires, the next claim wins; first_attempted_at never moves.
    let later = T0.plus(LEASE).plus(Duration::from_millis(1));
    let (_, again) = claim(store.as_ref(), &op, later).await;
    assert_eq!(again.attempts, 2);
    assert_eq!(again.first_attempted_at, Some(T0));
}

pub async fn claim_refuses_missing_settled_and_review(store: Arc<dyn OperationStore>) {
    let missing = operation("contract-claim-missing", 1000, T0);
    assert_eq!(
        store
            .claim(&claim_request(&missing, LeaseToken::new_random(), T0))
            .await
            .unwrap(),
        Claim::NotFound
    );

    let op = operation("contract-claim-id", 1000, T0);
    store.create_if_absent(&op).await.unwrap();
    let mut wrong_id = claim_request(&op, LeaseToken::new_random(), T0);
    wrong_id.operation_id = OperationId::new_random();
    assert_eq!(store.claim(&wrong_id).await.unwrap(), Claim::NotFound);

    let (token, _) = claim(store.as_ref(), &op, T0).await;
    store
        .record(&outcome(&op, token, OperationStatus::Succeeded, T0))
        .await
        .unwrap();
    match store
        .claim(&claim_request(&op, LeaseToken::new_random(), T0))
        .await
        .unwrap()
    {
        Claim::Settled(rec) => assert_eq!(rec.status, OperationStatus::Succeeded),
        c => panic!("expected Settled, got {c:?}"),
    }

    let rev = operation("contract-claim-review", 1000, T0);
    store.create_if_absent(&rev).await.unwrap();
    let (token, _) = claim(store.as_ref(), &rev, T0).await;
    let mut flag = outcome(&rev, token, OperationStatus::Unknown, T0);
    flag.review = Some(Review {
        reason: "key window passed; search found 0".into(),
        flagged_at: T0,
    });
    store.record(&flag).await.unwrap();
    match store
        .claim(&claim_request(
            &rev,
            LeaseToken::new_random(),
            T0.plus(LEASE * 2),
        ))
        .await
        .unwrap()
    {
        Claim::InReview(rec) => assert!(rec.review.is_some()),
        c => panic!("expected InReview, got {c:?}"),
    }
}

pub async fn record_is_fenced_on_the_lease_and_on_an_unsettled_status(
    store: Arc<dyn OperationStore>,
) {
    let op = operation("contract-record", 1000, T0);
    store.create_if_absent(&op).await.unwrap();
    let (token, _) = claim(store.as_ref(), &op, T0).await;

    let stranger = outcome(&op, LeaseToken::new_random(), OperationStatus::Failed, T0);
    assert!(matches!(
        store.record(&stranger).await.unwrap(),
        Recorded::Refused(Some(_))
    ));

    let mut unknown = outcome(&op, token, OperationStatus::Unknown, T0);
    unknown.last_error = Some("outcome unknown: timeout".into());
    let Recorded::Written(rec) = store.record(&unknown).await.unwrap() else {
        panic!("the lease holder's write must land");
    };
    assert_eq!(rec.status, OperationStatus::Unknown);
    assert_eq!(rec.lease, None, "recording releases the lease");
    assert_eq!(rec.external_id.as_deref(), Some("pi_contract"));
    assert_eq!(rec.last_error.as_deref(), Some("outcome unknown: timeout"));
    assert_eq!(rec.next_due_at, Some(T0.plus(Duration::from_secs(60))));

    // The old token is spent: it cannot write again.
    let replay = outcome(&op, token, OperationStatus::Failed, T0);
    assert!(matches!(
        store.record(&replay).await.unwrap(),
        Recorded::Refused(_)
    ));

    let later = T0.plus(Duration::from_secs(1));
    let (token2, _) = claim(store.as_ref(), &op, later).await;
    let Recorded::Written(done) = store
        .record(&outcome(&op, token2, OperationStatus::Succeeded, later))
        .await
        .unwrap()
    else {
        panic!("settling write must land");
    };
    assert_eq!(done.status, OperationStatus::Succeeded);
    assert_eq!(done.next_due_at, None, "settling leaves the index");
    assert_eq!(done.last_error, None);

    // Settled is final, whatever token is presented.
    let overwrite = outcome(&op, token2, OperationStatus::Failed, later);
    match store.record(&overwrite).await.unwrap() {
        Recorded::Refused(Some(cur)) => assert_eq!(cur.status, OperationStatus::Succeeded),
        r => panic!("a settled record was overwritten: {r:?}"),
    }
}

pub async fn concurrent_claims_have_exactly_one_winner(store: Arc<dyn OperationStore>) {
    let op = operation("contract-race", 1000, T0);
    store.create_if_absent(&op).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        let req = claim_request(&op, LeaseToken::new_random(), T0);
        tasks.push(tokio::spawn(
            async move { store.claim(&req).await.unwrap() },
        ));
    }
    let mut winners = 0;
    let mut leased = 0;
    for t in tasks {
        match t.await.unwrap() {
            Claim::Claimed(_) => winners += 1,
            Claim::Leased(_) => leased += 1,
            c => panic!("unexpected {c:?}"),
        }
    }
    assert_eq!((winners, leased), (1, 7));
    assert_eq!(store.get(&op.key()).await.unwrap().unwrap().attempts, 1);
}

pub async fn concurrent_creates_have_exactly_one_winner(store: Arc<dyn OperationStore>) {
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        let op = operation("contract-create-race", 1000 + i, T0);
        tasks.push(tokio::spawn(async move {
            store.create_if_absent(&op).await.unwrap()
        }));
    }
    let mut new = Vec::new();
    let mut existing = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Created::New(op) => new.push(op),
            Created::Existing(op) => existing.push(op),
        }
    }
    assert_eq!(new.len(), 1);
    assert!(
        existing.iter().all(|op| *op == new[0]),
        "losers see the winner"
    );
}

pub async fn index_lists_due_unsettled_work_in_due_order_by_pages(store: Arc<dyn OperationStore>) {
    // Five pending operations due at T0+grace+i s, one settled, one in review, one not due yet.
    let mut due = Vec::new();
    for i in 0..5u64 {
        let op = operation(
            &format!("contract-index-{i}"),
            1000,
            T0.plus(Duration::from_secs(i)),
        );
        store.create_if_absent(&op).await.unwrap();
        due.push(op);
    }
    let settled = operation("contract-index-settled", 1000, T0);
    store.create_if_absent(&settled).await.unwrap();
    let (token, _) = claim(store.as_ref(), &settled, T0).await;
    store
        .record(&outcome(&settled, token, OperationStatus::Succeeded, T0))
        .await
        .unwrap();

    let review = operation("contract-index-review", 1000, T0);
    store.create_if_absent(&review).await.unwrap();
    let (token, _) = claim(store.as_ref(), &review, T0).await;
    let mut flag = outcome(&review, token, OperationStatus::Unknown, T0);
    flag.review = Some(Review {
        reason: "search found 2".into(),
        flagged_at: T0,
    });
    store.record(&flag).await.unwrap();

    let future = operation(
        "contract-index-future",
        1000,
        T0.plus(Duration::from_secs(3600)),
    );
    store.create_if_absent(&future).await.unwrap();

    let now = T0.plus(GRACE).plus(Duration::from_secs(10));
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = store
            .query_index(IndexQuery::DueBy(now), cursor, 2)
            .await
            .unwrap();
        pages += 1;
        assert!(page.operations.len() <= 2);
        seen.extend(page.operations.iter().map(|op| op.order_id.to_string()));
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
        assert!(pages < 10, "pagination must end");
    }
    let want: Vec<String> = due.iter().map(|op| op.order_id.to_string()).collect();
    assert_eq!(
        seen, want,
        "due, unsettled, not in review, oldest due first"
    );
    assert!(pages >= 3);

    let review_page = store
        .query_index(IndexQuery::InReview, None, 10)
        .await
        .unwrap();
    let names: Vec<_> = review_page
        .operations
        .iter()
        .map(|o| o.order_id.to_string())
        .collect();
    assert_eq!(names, vec!["contract-index-review".to_owned()]);

    let all = store
        .query_index(IndexQuery::Unsettled, None, 100)
        .await
        .unwrap();
    assert_eq!(all.operations.len(), 6, "5 due + 1 not yet due");
    assert_eq!(
        all.operations.last().unwrap().order_id.as_str(),
        "contract-index-future"
    );
}

pub async fn reschedule_is_guarded_by_what_was_read(store: Arc<dyn OperationStore>) {
    let op = operation("contract-reschedule", 1000, T0);
    store.create_if_absent(&op).await.unwrap();
    let req = Reschedule::redrive(
        &op,
        T0.plus(Duration::from_secs(900)),
        T0.plus(Duration::from_secs(1)),
    );
    assert_eq!(req.expected_status, OperationStatus::Pending);
    let Recorded::Written(rec) = store.reschedule(&req).await.unwrap() else {
        panic!("first reschedule must land");
    };
    assert_eq!(rec.redrives, 1);
    assert_eq!(rec.next_due_at, Some(T0.plus(Duration::from_secs(900))));
    // The same read again is stale now: refused, nothing changes.
    assert!(matches!(
        store.reschedule(&req).await.unwrap(),
        Recorded::Refused(Some(_))
    ));
    assert_eq!(store.get(&op.key()).await.unwrap().unwrap().redrives, 1);

    // The reconciler waiting for a long queue moves the due time and sends nothing: the count
    // the next message's dedup id ends with stays as it was.
    let waited = Reschedule::wait(
        &rec,
        T0.plus(Duration::from_secs(1800)),
        T0.plus(Duration::from_secs(2)),
    );
    let Recorded::Written(rec) = store.reschedule(&waited).await.unwrap() else {
        panic!("a wait on a fresh read must land");
    };
    assert_eq!(rec.redrives, 1);
    assert_eq!(rec.next_due_at, Some(T0.plus(Duration::from_secs(1800))));
    let stored = store.get(&op.key()).await.unwrap().unwrap();
    assert_eq!((stored.redrives, stored.next_due_at), (1, rec.next_due_at));
}

fn audit(action: &str, from: OperationStatus, to: OperationStatus, at: Timestamp) -> AuditEntry {
    AuditEntry {
        action: action.into(),
        previous_status: from,
        new_status: to,
        note: "found in dashboard".into(),
        at,
        caller: "arn:aws:sts::123456789012:assumed-role/oncall/alice".into(),
        label: Some("alice".into()),
        forced: None,
        review: Some("search_ambiguous: found 0".into()),
        replaced_external_id: None,
    }
}

fn resolution(op: &Operation, status: OperationStatus, at: Timestamp) -> ManualResolution {
    ManualResolution {
        key: op.key(),
        operation_id: op.operation_id,
        status,
        external_id: Some(charge_core::domain::PaymentIntentId::parse("pi_by_hand").unwrap()),
        expected_updated_at: op.updated_at,
        stripe_refund_id: None,
        release: None,
        guard: OperatorGuard {
            lease_cutoff: at,
            audit: audit(&format!("resolve_{status}"), op.status, status, at),
        },
        authorization: None,
    }
}

pub async fn resolve_settles_once_and_refuses_a_settled_record(store: Arc<dyn OperationStore>) {
    let mut op = operation("contract-resolve", 1000, T0);
    // In review when the operator resolves it: the reason leaves the record (the audit entry
    // carries it), so nothing later reads a settled record as "a person owns it".
    op.review = Some(charge_core::operation::Review {
        reason: "search_ambiguous: found 0".into(),
        flagged_at: T0,
    });
    store.create_if_absent(&op).await.unwrap();
    let req = resolution(
        &op,
        OperationStatus::Succeeded,
        T0.plus(Duration::from_secs(5)),
    );
    let Recorded::Written(rec) = store.resolve(&req).await.unwrap() else {
        panic!("resolve of an unsettled operation must land");
    };
    assert_eq!(rec.status, OperationStatus::Succeeded);
    assert_eq!(rec.external_id.as_deref(), Some("pi_by_hand"));
    assert_eq!(rec.history, vec![req.guard.audit.clone()]);
    assert_eq!(rec.next_due_at, None);
    assert_eq!(rec.review, None, "the review moved into the history");
    let read = store.get(&op.key()).await.unwrap().unwrap();
    assert_eq!(read.review, None);
    assert_eq!(
        read.history[0].review.as_deref(),
        Some("search_ambiguous: found 0")
    );

    let mut again = resolution(
        &rec,
        OperationStatus::Failed,
        T0.plus(Duration::from_secs(6)),
    );
    again.expected_updated_at = rec.updated_at;
    match store.resolve(&again).await.unwrap() {
        Recorded::Refused(Some(cur)) => {
            assert_eq!(cur.status, OperationStatus::Succeeded);
            assert_eq!(cur.history.len(), 1, "nothing appended by a refused write");
        }
        r => panic!("a settled operation was resolved again: {r:?}"),
    }
}

pub async fn resolve_is_guarded_by_what_was_read_and_by_the_lease(store: Arc<dyn OperationStore>) {
    let op = operation("contract-resolve-guard", 1000, T0);
    store.create_if_absent(&op).await.unwrap();
    // A stale read: the record changed (a claim) after the operator looked.
    let stale = resolution(
        &op,
        OperationStatus::Failed,
        T0.plus(Duration::from_secs(120)),
    );
    let lease = Lease {
        token: LeaseToken::new_random(),
        expires_at: T0.plus(Duration::from_secs(61)),
    };
    let Claim::Claimed(claimed) = store
        .claim(&ClaimRequest {
            key: op.key(),
            operation_id: op.operation_id,
            lease,
            now: T0.plus(Duration::from_secs(1)),
        })
        .await
        .unwrap()
    else {
        panic!("claim")
    };
    assert!(matches!(
        store.resolve(&stale).await.unwrap(),
        Recorded::Refused(Some(_))
    ));
    // Read fresh, but the lease (until T0+61 s) is after the cutoff: refused.
    let mut leased = resolution(
        &claimed,
        OperationStatus::Failed,
        T0.plus(Duration::from_secs(90)),
    );
    leased.guard.lease_cutoff = T0.plus(Duration::from_secs(30));
    assert!(matches!(
        store.resolve(&leased).await.unwrap(),
        Recorded::Refused(Some(_))
    ));
    // Past the lease and its margin: lands, with the history entry.
    let ok = resolution(
        &claimed,
        OperationStatus::Failed,
        T0.plus(Duration::from_secs(200)),
    );
    let Recorded::Written(rec) = store.resolve(&ok).await.unwrap() else {
        panic!("a fresh read past the lease must land");
    };
    assert_eq!(rec.status, OperationStatus::Failed);
    assert_eq!(rec.lease, None);
    assert_eq!(rec.history.len(), 1);
    assert_eq!(rec.history[0].previous_status, OperationStatus::Pending);
}

/// The REVIEW partition counted page by page: every operation in review once, nothing else
/// (automatic work, settled records), the oldest flag time of each page, and the cursor to the end.
pub async fn count_in_review_counts_the_review_partition_by_pages(store: Arc<dyn OperationStore>) {
    let flag = |op: &Operation, token, at: Timestamp| OutcomeRecord {
        review: Some(Review {
            reason: "rejected: No such customer".into(),
            flagged_at: at,
        }),
        next_due_at: Some(at),
        ..outcome(op, token, OperationStatus::Unknown, at)
    };
    for i in 0..3u64 {
        let op = operation(&format!("contract-count-review-{i}"), 1000, T0);
        store.create_if_absent(&op).await.unwrap();
        let (token, _) = claim(store.as_ref(), &op, T0).await;
        let at = T0.plus(Duration::from_secs(10 * (3 - i)));
        let written = store.record(&flag(&op, token, at)).await.unwrap();
        assert!(matches!(written, Recorded::Written(_)), "{written:?}");
    }
    // Automatic work and a settled record are not counted.
    let due = operation("contract-count-due", 1000, T0);
    store.create_if_absent(&due).await.unwrap();
    let settled = operation("contract-count-settled", 1000, T0);
    store.create_if_absent(&settled).await.unwrap();
    let (token, _) = claim(store.as_ref(), &settled, T0).await;
    store
        .record(&outcome(&settled, token, OperationStatus::Succeeded, T0))
        .await
        .unwrap();

    let first = store.count_in_review(None, 2).await.unwrap();
    assert_eq!(first.entries, 2);
    assert_eq!(
        first.oldest_flagged_at,
        Some(T0.plus(Duration::from_secs(10))),
        "the oldest first"
    );
    let next = first.next.expect("one more page");
    let second = store.count_in_review(Some(next), 2).await.unwrap();
    assert_eq!(second.entries, 1);
    assert_eq!(
        second.oldest_flagged_at,
        Some(T0.plus(Duration::from_secs(30)))
    );
    assert_eq!(second.next, None);
    let whole = store.count_in_review(None, 10).await.unwrap();
    assert_eq!((whole.entries, whole.next), (3, None));
}

/// A succeeded charge of `amount` for `order`, with its intent, written to `store`.
pub async fn succeeded_charge(
    store: &Arc<dyn OperationStore>,
    order: &str,
    amount: i64,
) -> Operation {
    let mut op = operation(order, amount, T0);
    op.status = OperationStatus::Succeeded;
    op.external_id = Some(charge_core::domain::PaymentIntentId::parse("pi_contract").unwrap());
    op.attempts = 1;
    op.first_attempted_at = Some(T0);
    op.next_due_at = None;
    store.create_if_absent(&op).await.unwrap();
    op
}

/// The refund `refund_id` of `amount` (all that is left when `None`) against `charge` as read.
pub fn refund_of(
    charge: &Operation,
    refund_id: &str,
    amount: Option<i64>,
) -> Result<(Operation, ReserveRefund), RefundRefusal> {
    let request = RefundRequest {
        amount: amount.map(|a| charge_core::domain::Amount::new(a).unwrap()),
        reason: None,
    };
    let (params, reserve) = refund::reserve(charge, &request, T0.plus(LEASE))?;
    let op = Operation::new_refund(
        charge.order_id.clone(),
        RefundId::parse(refund_id).unwrap(),
        &request,
        params,
        charge_core::domain::Principal::jwt("support").unwrap(),
        T0.plus(LEASE),
        GRACE,
    );
    Ok((op, reserve))
}

/// One order's operations due at the same millisecond (three refunds of one charge, as a
/// capture and its charge can be): paged one at a time, each is listed once, none skipped at a
/// page boundary.
pub async fn one_order_s_operations_due_at_once_are_each_listed_once_by_pages(
    store: Arc<dyn OperationStore>,
) {
    let charge = succeeded_charge(&store, "contract-same-due", 1000).await;
    let mut want = Vec::new();
    for id in ["r-a", "r-b", "r-c"] {
        let now = store.get(&charge.key()).await.unwrap().unwrap();
        let (refund, reserve) = refund_of(&now, id, Some(100)).unwrap();
        store
            .create_beside(&refund, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap();
        want.push(refund.operation_id);
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .query_index(IndexQuery::Unsettled, cursor, 1)
            .await
            .unwrap();
        seen.extend(
            page.operations
                .iter()
                .filter(|op| op.order_id == charge.order_id)
                .map(|op| op.operation_id),
        );
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
    }
    seen.sort();
    want.sort();
    assert_eq!(seen, want, "each of the order's due operations once");
}

async fn reserved(store: &Arc<dyn OperationStore>, charge: &Operation) -> i64 {
    store
        .get(&charge.key())
        .await
        .unwrap()
        .expect("the charge")
        .refund_reserved()
}

pub async fn a_refund_reserves_its_amount_on_the_charge_in_the_same_write(
    store: Arc<dyn OperationStore>,
) {
    let charge = succeeded_charge(&store, "contract-refund", 1000).await;
    let (refund, reserve) = refund_of(&charge, "r-1", Some(400)).unwrap();
    assert_eq!(
        store
            .create_beside(&refund, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap(),
        CreatedBeside::New(refund.clone())
    );
    assert_eq!(
        store.get(&refund.key()).await.unwrap(),
        Some(refund.clone())
    );
    let after = store.get(&charge.key()).await.unwrap().unwrap();
    assert_eq!(after.refund_reserved(), 400);
    assert_eq!(
        (after.status, after.next_due_at, &after.external_id),
        (charge.status, None, &charge.external_id),
        "the charge's outcome is untouched"
    );
    // All that is left, from the charge as it is now: the rest, 600.
    let (rest, reserve) = refund_of(&after, "r-2", None).unwrap();
    assert_eq!(rest.params.amount().minor_units(), 600);
    assert!(matches!(
        store
            .create_beside(&rest, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap(),
        CreatedBeside::New(_)
    ));
    assert_eq!(reserved(&store, &charge).await, 1000);
}

pub async fn a_refund_asked_again_is_the_existing_one_and_reserves_nothing(
    store: Arc<dyn OperationStore>,
) {
    let charge = succeeded_charge(&store, "contract-refund-again", 1000).await;
    let (first, reserve) = refund_of(&charge, "r-1", Some(300)).unwrap();
    store
        .create_beside(&first, ChargeClaim::Reserve(&reserve))
        .await
        .unwrap();
    // The same refund id again, from a read before the first (its own fresh operation id).
    let (again, reserve) = refund_of(&charge, "r-1", Some(300)).unwrap();
    assert_ne!(again.operation_id, first.operation_id);
    assert_eq!(
        store
            .create_beside(&again, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap(),
        CreatedBeside::Existing(first.clone())
    );
    assert_eq!(reserved(&store, &charge).await, 300, "reserved once");
}

pub async fn a_refund_over_what_is_left_writes_nothing_and_its_twin_fits(
    store: Arc<dyn OperationStore>,
) {
    let charge = succeeded_charge(&store, "contract-refund-over", 1000).await;
    let (first, reserve) = refund_of(&charge, "r-1", Some(700)).unwrap();
    store
        .create_beside(&first, ChargeClaim::Reserve(&reserve))
        .await
        .unwrap();
    // Decided from the stale read (1000 left), 400 more no longer fits: 700 + 400 > 1000.
    let (over, reserve) = refund_of(&charge, "r-2", Some(400)).unwrap();
    match store
        .create_beside(&over, ChargeClaim::Reserve(&reserve))
        .await
        .unwrap()
    {
        CreatedBeside::ChargeRefused(Some((current, by))) => {
            assert_eq!(current.refund_reserved(), 700);
            assert_eq!(by, Guard::ReservedAtMost(600));
        }
        other => panic!("expected the charge's refusal, got {other:?}"),
    }
    assert_eq!(
        store.get(&over.key()).await.unwrap(),
        None,
        "no refund written"
    );
    assert_eq!(reserved(&store, &charge).await, 700, "nothing reserved");
    // The twin: 300, what is left, fits from the same stale read.
    let (fits, reserve) = refund_of(&charge, "r-3", Some(300)).unwrap();
    assert!(matches!(
        store
            .create_beside(&fits, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap(),
        CreatedBeside::New(_)
    ));
    assert_eq!(reserved(&store, &charge).await, 1000);
}

pub async fn a_refund_of_a_charge_no_longer_as_read_writes_nothing(store: Arc<dyn OperationStore>) {
    let charge = succeeded_charge(&store, "contract-refund-moved", 1000).await;
    let (refund, reserve) = refund_of(&charge, "r-1", Some(100)).unwrap();
    // The record at the charge's key is another operation now (replaced by hand).
    let mut other = charge.clone();
    other.operation_id = charge_core::domain::OperationId::new_random();
    let (_, elsewhere) = refund_of(&other, "r-x", Some(100)).unwrap();
    let crossed = ReserveRefund {
        charge_operation_id: other.operation_id,
        ..elsewhere
    };
    match store
        .create_beside(&refund, ChargeClaim::Reserve(&crossed))
        .await
        .unwrap()
    {
        CreatedBeside::ChargeRefused(Some((_, Guard::IsOperation(_)))) => {}
        got => panic!("expected is_operation, got {got:?}"),
    }
    assert_eq!(store.get(&refund.key()).await.unwrap(), None);
    // And with no charge at the key at all.
    let missing = ReserveRefund {
        charge: charge_core::operation::OperationKey::charge(
            charge_core::domain::OrderId::parse("no-such").unwrap(),
        ),
        ..reserve.clone()
    };
    assert_eq!(
        store
            .create_beside(&refund, ChargeClaim::Reserve(&missing))
            .await
            .unwrap(),
        CreatedBeside::ChargeRefused(None)
    );
    assert_eq!(store.get(&refund.key()).await.unwrap(), None);
    // The twin: the reservation as read.
    assert!(matches!(
        store
            .create_beside(&refund, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap(),
        CreatedBeside::New(_)
    ));
}

pub async fn concurrent_refunds_never_reserve_more_than_the_charge(store: Arc<dyn OperationStore>) {
    let charge = succeeded_charge(&store, "contract-refund-race", 1000).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        let (refund, reserve) = refund_of(&charge, &format!("r-{i}"), Some(300)).unwrap();
        tasks.push(tokio::spawn(async move {
            store
                .create_beside(&refund, ChargeClaim::Reserve(&reserve))
                .await
                .unwrap()
        }));
    }
    let (mut new, mut refused) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            CreatedBeside::New(_) => new += 1,
            CreatedBeside::ChargeRefused(Some(_)) => refused += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        (new, refused),
        (3, 5),
        "3 × 300 fit in 1000, a fourth does not"
    );
    assert_eq!(reserved(&store, &charge).await, 900);
}

/// A refund of 400 of a succeeded 1000 charge for `order`, created, then claimed with `token`.
async fn claimed_refund(
    store: &Arc<dyn OperationStore>,
    order: &str,
    token: LeaseToken,
) -> (Operation, Operation) {
    let charge = succeeded_charge(store, order, 1000).await;
    let (refund, reserve) = refund_of(&charge, "r-1", Some(400)).unwrap();
    store
        .create_beside(&refund, ChargeClaim::Reserve(&reserve))
        .await
        .unwrap();
    let now = T0.plus(LEASE).plus(LEASE);
    let Claim::Claimed(claimed) = store
        .claim(&claim_request(&refund, token, now))
        .await
        .unwrap()
    else {
        panic!("the refund is claimed");
    };
    (charge, claimed)
}

/// The refund's outcome by the lease holder, giving the reservation back when `release`.
fn refund_outcome(
    refund: &Operation,
    token: LeaseToken,
    status: OperationStatus,
    release: bool,
) -> OutcomeRecord {
    let now = T0.plus(LEASE).plus(LEASE).plus(LEASE);
    OutcomeRecord {
        stripe_refund_id: Some(charge_core::domain::StripeRefundId::parse("re_contract").unwrap()),
        last_error: None,
        release: release.then(|| ReleaseRefund {
            charge: refund.charge_key(),
            amount: refund.params.amount(),
            now,
        }),
        ..charge_core::testing::outcome(refund, token, status, now)
    }
}

pub async fn a_failed_refund_gives_its_reservation_back_in_the_same_write(
    store: Arc<dyn OperationStore>,
) {
    let token = LeaseToken::new_random();
    let (charge, refund) = claimed_refund(&store, "contract-refund-failed", token).await;
    assert_eq!(reserved(&store, &charge).await, 400);
    let rec = refund_outcome(&refund, token, OperationStatus::Failed, true);
    let Recorded::Written(written) = store.record(&rec).await.unwrap() else {
        panic!("the holder's outcome is written");
    };
    assert_eq!(written.status, OperationStatus::Failed);
    assert_eq!(
        written.stripe_refund_id().map(|id| id.as_str()),
        Some("re_contract")
    );
    assert_eq!(store.get(&refund.key()).await.unwrap(), Some(written));
    assert_eq!(reserved(&store, &charge).await, 0, "the 400 is back");
    // The twin: a succeeded refund keeps its reservation.
    let token = LeaseToken::new_random();
    let (charge, refund) = claimed_refund(&store, "contract-refund-kept", token).await;
    let rec = refund_outcome(&refund, token, OperationStatus::Succeeded, false);
    assert!(matches!(
        store.record(&rec).await.unwrap(),
        Recorded::Written(_)
    ));
    assert_eq!(reserved(&store, &charge).await, 400);
}

pub async fn a_release_is_fenced_with_its_refund_s_outcome(store: Arc<dyn OperationStore>) {
    let token = LeaseToken::new_random();
    let (charge, refund) = claimed_refund(&store, "contract-refund-fenced", token).await;
    // Another lease's outcome: refused, and nothing given back.
    let stale = refund_outcome(
        &refund,
        LeaseToken::new_random(),
        OperationStatus::Failed,
        true,
    );
    match store.record(&stale).await.unwrap() {
        Recorded::Refused(Some(current)) => assert_eq!(current.status, refund.status),
        other => panic!("expected the fence to refuse, got {other:?}"),
    }
    assert_eq!(reserved(&store, &charge).await, 400);
    // A release of more than the charge holds (as after a hand edit of its count): an error,
    // and nothing written, the refund's outcome included.
    let mut rec = refund_outcome(&refund, token, OperationStatus::Failed, true);
    if let Some(release) = rec.release.as_mut() {
        release.amount = charge_core::domain::Amount::new(500).unwrap();
    }
    let err = store.record(&rec).await.unwrap_err();
    assert!(err.to_string().contains("reservation"), "{err}");
    assert_eq!(
        store.get(&refund.key()).await.unwrap().unwrap().status,
        refund.status,
        "the refund's outcome is not written without its release"
    );
    assert_eq!(reserved(&store, &charge).await, 400);
    // The twin: the holder's release of what it reserved is written.
    let rec = refund_outcome(&refund, token, OperationStatus::Failed, true);
    assert!(matches!(
        store.record(&rec).await.unwrap(),
        Recorded::Written(_)
    ));
    assert_eq!(reserved(&store, &charge).await, 0);
}

pub async fn a_succeeded_refund_fails_later_only_on_the_one_write_that_gives_it_back(
    store: Arc<dyn OperationStore>,
) {
    let token = LeaseToken::new_random();
    let (charge, refund) = claimed_refund(&store, "contract-refund-later", token).await;
    let rec = refund_outcome(&refund, token, OperationStatus::Succeeded, false);
    let Recorded::Written(succeeded) = store.record(&rec).await.unwrap() else {
        panic!("succeeded is written");
    };
    let later = |op: &Operation| RefundFailedLater {
        key: op.key(),
        operation_id: op.operation_id,
        failure_reason: "expired_or_canceled_card".into(),
        release: ReleaseRefund {
            charge: charge.key(),
            amount: op.params.amount(),
            now: T0.plus(LEASE).plus(LEASE).plus(LEASE).plus(LEASE),
        },
        now: T0.plus(LEASE).plus(LEASE).plus(LEASE).plus(LEASE),
    };
    let Recorded::Written(failed) = store.fail_refund_later(&later(&succeeded)).await.unwrap()
    else {
        panic!("Stripe's word is written");
    };
    assert_eq!(failed.status, OperationStatus::Failed);
    assert!(failed
        .last_error
        .as_deref()
        .unwrap()
        .contains("expired_or_canceled_card"));
    assert_eq!(failed.next_due_at, None, "settled, out of the index");
    assert_eq!(reserved(&store, &charge).await, 0, "the 400 is back");
    // Once only: it is failed now (a charge never fails later: the rule's own test).
    match store.fail_refund_later(&later(&succeeded)).await.unwrap() {
        Recorded::Refused(Some(current)) => assert_eq!(current.status, OperationStatus::Failed),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(reserved(&store, &charge).await, 0, "given back once");
}

pub async fn refunds_of_lists_an_order_s_refunds_by_refund_id(store: Arc<dyn OperationStore>) {
    let charge = succeeded_charge(&store, "contract-refunds-of", 1000).await;
    let other = succeeded_charge(&store, "contract-refunds-of-2", 1000).await;
    for (c, id) in [(&charge, "r-b"), (&charge, "r-a"), (&other, "r-c")] {
        let current = store.get(&c.key()).await.unwrap().unwrap();
        let (refund, reserve) = refund_of(&current, id, Some(100)).unwrap();
        store
            .create_beside(&refund, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap();
    }
    let listed: Vec<String> = store
        .refunds_of(&charge.order_id)
        .await
        .unwrap()
        .iter()
        .map(|op| op.kind.sort_key())
        .collect();
    assert_eq!(
        listed,
        ["refund#r-a", "refund#r-b"],
        "this order's, not the charge"
    );
    let none = operation("contract-refunds-of-none", 1000, T0);
    assert!(store.refunds_of(&none.order_id).await.unwrap().is_empty());
}

pub async fn disputes_of_lists_an_order_s_disputes_by_dispute_id(store: Arc<dyn OperationStore>) {
    let charge = succeeded_charge(&store, "contract-disputes-of", 1000).await;
    let other = succeeded_charge(&store, "contract-disputes-of-2", 1000).await;
    let policy = charge_core::plan::Policy::default().dispute;
    // A refund of the same order (made before the disputes: the door refuses one after) is not
    // a dispute.
    let current = store.get(&charge.key()).await.unwrap().unwrap();
    let (refund, reserve) = refund_of(&current, "r-a", Some(100)).unwrap();
    store
        .create_beside(&refund, ChargeClaim::Reserve(&reserve))
        .await
        .unwrap();
    for (c, id) in [(&charge, "dp_b"), (&charge, "dp_a"), (&other, "dp_c")] {
        let mut d = charge_core::testing::stripe_dispute(id, "pi_contract");
        d.amount = 100;
        let written = charge_once::executor::dispute::record_dispute(
            store.as_ref(),
            &c.order_id,
            &d,
            T0,
            &policy,
        )
        .await
        .unwrap();
        assert!(matches!(
            written,
            charge_once::executor::dispute::DisputeRecording::Written { created: true, .. }
        ));
    }
    let listed: Vec<String> = store
        .disputes_of(&charge.order_id)
        .await
        .unwrap()
        .iter()
        .map(|op| op.kind.sort_key())
        .collect();
    assert_eq!(
        listed,
        ["dispute#dp_a", "dispute#dp_b"],
        "this order's, not its charge nor its refunds"
    );
    let none = operation("contract-disputes-of-none", 1000, T0);
    assert!(store.disputes_of(&none.order_id).await.unwrap().is_empty());
}

/// `charge_of` reads the order's head (its first attempt) and follows it to the latest attempt;
/// `attempts_of` lists them first to latest. An order with one attempt is its head, as every
/// record written before attempts reads; a head naming an attempt that is not there is an
/// error, never read as the first attempt.
pub async fn charge_of_follows_the_head_to_the_latest_attempt(store: Arc<dyn OperationStore>) {
    let once = operation("contract-attempts-once", 1000, T0);
    store.create_if_absent(&once).await.unwrap();
    assert_eq!(
        store.charge_of(&once.order_id).await.unwrap(),
        Some(once.clone())
    );
    assert_eq!(
        store.attempts_of(&once.order_id).await.unwrap(),
        vec![once.clone()]
    );

    let mut head = operation("contract-attempts", 1000, T0);
    head.status = OperationStatus::Failed;
    head.next_due_at = None;
    head.settled_at = Some(T0);
    head.params.charge_state_mut().unwrap().latest_attempt = Some(2);
    let second = Operation {
        operation_id: OperationId::new_random(),
        kind: OperationKind::Charge(2),
        ..operation("contract-attempts", 1000, T0)
    };
    store.create_if_absent(&head).await.unwrap();
    // The head names attempt 2 before it is there: an error, not the first attempt.
    assert!(store.charge_of(&head.order_id).await.is_err());
    assert!(store.attempts_of(&head.order_id).await.is_err());
    store.create_if_absent(&second).await.unwrap();
    assert_eq!(
        store.charge_of(&head.order_id).await.unwrap(),
        Some(second.clone())
    );
    assert_eq!(
        store.attempts_of(&head.order_id).await.unwrap(),
        vec![head.clone(), second.clone()]
    );
    assert_eq!(
        store
            .get(&head.key())
            .await
            .unwrap()
            .unwrap()
            .latest_attempt(),
        2,
        "the head's latest attempt is stored and read back"
    );

    let none = operation("contract-attempts-none", 1000, T0);
    assert_eq!(store.charge_of(&none.order_id).await.unwrap(), None);
    assert!(store.attempts_of(&none.order_id).await.unwrap().is_empty());
}

/// Attempt `n` of `order` with `card`, settled `failed` (declined) unless `status` says
/// otherwise; the head (`n` = 1) names `latest` when it is over 1.
fn attempt_record(
    order: &str,
    n: u32,
    card: &str,
    status: OperationStatus,
    latest: u32,
) -> Operation {
    let mut op = charge_core::testing::order(order)
        .amount(1000)
        .customer("cus_contract")
        .requested_by("contract-tests")
        .payment_method(card)
        .status(status)
        .at(T0)
        .build();
    op.kind = OperationKind::charge_attempt(n).unwrap();
    if status.is_settled() {
        op.next_due_at = None;
        op.settled_at = Some(T0);
    }
    if n == 1 && latest > 1 {
        op.params.charge_state_mut().unwrap().latest_attempt = Some(latest);
    }
    op
}

/// Attempt `n + 1` of what was read (`latest` is attempt `n`), with `card`, asked at `now`.
fn new_attempt(latest: &Operation, card: &str, now: Timestamp) -> NewAttempt {
    let mut op = charge_core::testing::order(latest.order_id.as_str())
        .amount(1000)
        .customer("cus_contract")
        .requested_by("contract-tests")
        .payment_method(card)
        .at(now)
        .build();
    op.kind = OperationKind::charge_attempt(latest.kind.attempt_no().unwrap() + 1).unwrap();
    NewAttempt {
        op,
        after_operation_id: latest.operation_id,
    }
}

/// Two retries of a declined order at once (another card each) make exactly one attempt: the
/// head names it, the loser wrote nothing. The head's `updated_at` and status do not move. The
/// same after a declined second attempt (its check is a record of its own).
pub async fn two_retries_at_once_make_exactly_one_attempt(store: Arc<dyn OperationStore>) {
    for (order, n) in [("contract-retry-1", 1), ("contract-retry-2", 2)] {
        let head = attempt_record(order, 1, "pm_a", OperationStatus::Failed, n);
        store.create_if_absent(&head).await.unwrap();
        let mut latest = head.clone();
        if n == 2 {
            latest = attempt_record(order, 2, "pm_b", OperationStatus::Failed, 1);
            store.create_if_absent(&latest).await.unwrap();
        }
        let at = T0.plus(Duration::from_secs(60));
        let (a, b) = (
            new_attempt(&latest, "pm_x", at),
            new_attempt(&latest, "pm_y", at),
        );
        let (ra, rb) = tokio::join!(store.create_attempt(&a), store.create_attempt(&b));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        let winner = match (&ra, &rb) {
            (CreatedAttempt::New(w), CreatedAttempt::Refused)
            | (CreatedAttempt::Refused, CreatedAttempt::New(w)) => w.clone(),
            other => panic!("{order}: exactly one attempt, got {other:?}"),
        };
        let attempts = store.attempts_of(&head.order_id).await.unwrap();
        assert_eq!(attempts.len() as u32, n + 1, "{order}");
        assert_eq!(
            attempts.last(),
            Some(&winner),
            "{order}: the winner is the latest"
        );
        assert_eq!(store.charge_of(&head.order_id).await.unwrap(), Some(winner));
        let head_now = &attempts[0];
        assert_eq!(head_now.latest_attempt(), n + 1);
        assert_eq!(
            head_now.updated_at, head.updated_at,
            "{order}: nothing else of the head moves"
        );
        assert_eq!(head_now.status, OperationStatus::Failed);
        // Asked again after it won: the key is there, refused, nothing written.
        assert_eq!(
            store.create_attempt(&a).await.unwrap(),
            CreatedAttempt::Refused
        );
        assert_eq!(store.attempts_of(&head.order_id).await.unwrap(), attempts);
    }
}

/// A new attempt after a latest that is live, paid or canceled (a cancel took it) is refused
/// and writes nothing, whether the latest is the head or a later attempt; its twin, the same
/// latest `failed` and not taken, is accepted.
pub async fn a_live_paid_or_canceled_latest_refuses_a_new_attempt_and_its_failed_twin_starts_one(
    store: Arc<dyn OperationStore>,
) {
    let canceled = |mut op: Operation| {
        op.params.charge_state_mut().unwrap().taken_by = Some(Taker {
            capture: false,
            operation_id: OperationId::new_random(),
        });
        op
    };
    for n in [1u32, 2] {
        let cases = ["pending", "authorized", "succeeded", "canceled", "failed"];
        let shape = |what: &str, op: Operation| {
            if what == "canceled" {
                canceled(op)
            } else {
                op
            }
        };
        for (i, what) in cases.iter().enumerate() {
            let order = format!("contract-attempt-{n}-{i}");
            let status = match *what {
                "pending" => OperationStatus::Pending,
                "authorized" => OperationStatus::Authorized,
                "succeeded" => OperationStatus::Succeeded,
                _ => OperationStatus::Failed,
            };
            let (head, latest) = if n == 1 {
                let head = shape(what, attempt_record(&order, 1, "pm_a", status, 1));
                (head.clone(), head)
            } else {
                let head = attempt_record(&order, 1, "pm_a", OperationStatus::Failed, 2);
                (
                    head,
                    shape(what, attempt_record(&order, 2, "pm_b", status, 1)),
                )
            };
            store.create_if_absent(&head).await.unwrap();
            if n == 2 {
                store.create_if_absent(&latest).await.unwrap();
            }
            let req = new_attempt(&latest, "pm_c", T0.plus(Duration::from_secs(60)));
            let got = store.create_attempt(&req).await.unwrap();
            if *what == "failed" {
                assert_eq!(
                    got,
                    CreatedAttempt::New(req.op.clone()),
                    "{order}: the twin"
                );
                assert_eq!(
                    store.charge_of(&head.order_id).await.unwrap(),
                    Some(req.op.clone())
                );
                continue;
            }
            assert_eq!(
                got,
                CreatedAttempt::Refused,
                "{order}: after a {what} latest"
            );
            assert_eq!(store.get(&req.op.key()).await.unwrap(), None, "{order}");
            assert_eq!(
                store.get(&head.key()).await.unwrap(),
                Some(head.clone()),
                "{order}"
            );
            assert_eq!(
                store.charge_of(&head.order_id).await.unwrap(),
                Some(latest),
                "{order}"
            );
        }
    }
}

/// An order charged again after a decline: its head (attempt 1) `failed` naming attempt 2 as
/// its latest, and attempt 2 as `second` makes it (its own operation id and intent), written
/// the way the door's write leaves them. Returns (head, attempt 2).
pub async fn retried_order(
    store: &Arc<dyn OperationStore>,
    order: &str,
    second: impl FnOnce(Operation) -> Operation,
) -> (Operation, Operation) {
    let mut head = operation(order, 1000, T0);
    head.status = OperationStatus::Failed;
    head.external_id = Some(charge_core::domain::PaymentIntentId::parse("pi_declined").unwrap());
    head.attempts = 1;
    head.first_attempted_at = Some(T0);
    head.next_due_at = None;
    head.settled_at = Some(T0);
    head.last_error = Some("card_declined".into());
    head.params.charge_state_mut().unwrap().latest_attempt = Some(2);
    let attempt = second(Operation {
        operation_id: OperationId::new_random(),
        kind: OperationKind::Charge(2),
        external_id: Some(charge_core::domain::PaymentIntentId::parse("pi_second").unwrap()),
        attempts: 1,
        first_attempted_at: Some(T0),
        ..operation(order, 1000, T0)
    });
    store.create_if_absent(&head).await.unwrap();
    store.create_if_absent(&attempt).await.unwrap();
    (head, attempt)
}

/// On an order charged again after a decline, a refund reserves on the attempt that was paid
/// (the order's latest, `charge_of`), names it on its record, and its failure gives the
/// reservation back to that attempt; a capture takes that attempt's authorization and its
/// outcome ends it there. The declined head is never touched. The twins on an order charged
/// once are the cases above.
pub async fn refunds_and_captures_act_on_the_order_s_latest_attempt(
    store: Arc<dyn OperationStore>,
) {
    let (head, paid) = retried_order(&store, "contract-attempt-refund", |mut op| {
        op.status = OperationStatus::Succeeded;
        op.next_due_at = None;
        op.settled_at = Some(T0);
        op
    })
    .await;
    let charge = store.charge_of(&head.order_id).await.unwrap().unwrap();
    assert_eq!(charge, paid, "the order's charge is its latest attempt");
    let (refund, reserve) = refund_of(&charge, "r-1", Some(400)).unwrap();
    assert_eq!(reserve.charge, paid.key(), "reserved on attempt 2");
    assert_eq!(
        refund.charge_key(),
        paid.key(),
        "the refund names attempt 2"
    );
    assert!(matches!(
        store
            .create_beside(&refund, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap(),
        CreatedBeside::New(_)
    ));
    assert_eq!(reserved(&store, &paid).await, 400);
    assert_eq!(
        stored(&store, &head).await,
        Some(head.clone()),
        "head untouched"
    );
    let read_back = stored(&store, &refund).await.unwrap();
    assert_eq!(
        read_back.params.charge_attempt(),
        Some(2),
        "stored and read back"
    );
    let token = LeaseToken::new_random();
    let now = T0.plus(LEASE).plus(LEASE);
    assert!(matches!(
        store
            .claim(&claim_request(&refund, token, now))
            .await
            .unwrap(),
        Claim::Claimed(_)
    ));
    let rec = refund_outcome(&read_back, token, OperationStatus::Failed, true);
    assert!(matches!(
        store.record(&rec).await.unwrap(),
        Recorded::Written(_)
    ));
    assert_eq!(
        reserved(&store, &paid).await,
        0,
        "the 400 is back on attempt 2"
    );
    assert_eq!(
        stored(&store, &head).await,
        Some(head.clone()),
        "head untouched"
    );

    let (head, held) = retried_order(&store, "contract-attempt-capture", |mut op| {
        if let Some(p) = op.params.charge_mut() {
            p.capture_method = CaptureMethod::Manual;
        }
        op.status = OperationStatus::Authorized;
        op.next_due_at = Some(T0.plus(Duration::from_secs(3600)));
        op
    })
    .await;
    let charge = store.charge_of(&head.order_id).await.unwrap().unwrap();
    let (taking, take) = taking_of(&charge, true, TakeFrom::Authorized);
    assert_eq!(
        taking.charge_key(),
        held.key(),
        "the capture names attempt 2"
    );
    assert!(matches!(
        store
            .create_beside(&taking, ChargeClaim::Take(&take))
            .await
            .unwrap(),
        CreatedBeside::New(_)
    ));
    assert_eq!(
        stored(&store, &held).await.unwrap().taken_by(),
        Some(take.taker)
    );
    let read_back = stored(&store, &taking).await.unwrap();
    assert_eq!(
        read_back.params.charge_attempt(),
        Some(2),
        "stored and read back"
    );
    let token = LeaseToken::new_random();
    claimed_taking(&store, &taking, token).await;
    let captured = charge_core::domain::Amount::new(1000).unwrap();
    let rec = taking_outcome(
        &read_back,
        token,
        OperationStatus::Succeeded,
        AuthorizationOutcome::Captured(captured),
    );
    assert!(matches!(
        store.record(&rec).await.unwrap(),
        Recorded::Written(_)
    ));
    let after = stored(&store, &held).await.unwrap();
    assert_eq!(
        (after.status, after.amount_captured()),
        (OperationStatus::Succeeded, Some(captured)),
        "attempt 2 captured"
    );
    assert_eq!(stored(&store, &head).await, Some(head), "head untouched");
}

/// An operator's resolution of the unsettled refund `refund` as read, `status`, with its Stripe
/// id and, when `release`, its reservation given back.
fn refund_resolution(
    refund: &Operation,
    status: OperationStatus,
    release: bool,
) -> ManualResolution {
    let at = T0.plus(LEASE).plus(LEASE);
    ManualResolution {
        stripe_refund_id: Some(charge_core::domain::StripeRefundId::parse("re_by_hand").unwrap()),
        release: release.then(|| ReleaseRefund {
            charge: refund.charge_key(),
            amount: refund.params.amount(),
            now: at,
        }),
        external_id: None,
        ..resolution(refund, status, at)
    }
}

pub async fn an_operator_resolves_a_refund_and_gives_its_reservation_back_in_the_same_write(
    store: Arc<dyn OperationStore>,
) {
    let charge = succeeded_charge(&store, "contract-refund-resolve", 1000).await;
    let (refund, reserve) = refund_of(&charge, "r-1", Some(400)).unwrap();
    store
        .create_beside(&refund, ChargeClaim::Reserve(&reserve))
        .await
        .unwrap();
    // An operator finds the unsettled refund by its operation id, as a charge.
    assert_eq!(
        store
            .get_by_operation_id(&refund.operation_id)
            .await
            .unwrap(),
        Some(refund.clone())
    );
    // A stale read: refused, and nothing given back.
    let mut stale = refund_resolution(&refund, OperationStatus::Failed, true);
    stale.expected_updated_at = refund.updated_at.minus(Duration::from_millis(1));
    assert!(matches!(
        store.resolve(&stale).await.unwrap(),
        Recorded::Refused(Some(_))
    ));
    assert_eq!(reserved(&store, &charge).await, 400);
    assert_eq!(
        store.get(&refund.key()).await.unwrap(),
        Some(refund.clone())
    );
    // The refund as read: failed, its Stripe id recorded, the 400 back, out of the index.
    let req = refund_resolution(&refund, OperationStatus::Failed, true);
    let Recorded::Written(written) = store.resolve(&req).await.unwrap() else {
        panic!("the operator's resolution is written");
    };
    assert_eq!(written.status, OperationStatus::Failed);
    assert_eq!(
        written.stripe_refund_id().map(|id| id.as_str()),
        Some("re_by_hand")
    );
    assert_eq!(written.next_due_at, None);
    assert_eq!(written.history.len(), 1);
    assert_eq!(store.get(&refund.key()).await.unwrap(), Some(written));
    assert_eq!(reserved(&store, &charge).await, 0, "the 400 is back");
    // Once only: settled now, refused, nothing given back twice.
    assert!(matches!(
        store.resolve(&req).await.unwrap(),
        Recorded::Refused(Some(_))
    ));
    assert_eq!(reserved(&store, &charge).await, 0);
    // The twin: a refund resolved succeeded keeps its reservation.
    let current = store.get(&charge.key()).await.unwrap().unwrap();
    let (kept, reserve) = refund_of(&current, "r-2", Some(300)).unwrap();
    store
        .create_beside(&kept, ChargeClaim::Reserve(&reserve))
        .await
        .unwrap();
    let req = refund_resolution(&kept, OperationStatus::Succeeded, false);
    let Recorded::Written(written) = store.resolve(&req).await.unwrap() else {
        panic!("the operator's resolution is written");
    };
    assert_eq!(written.status, OperationStatus::Succeeded);
    assert_eq!(
        written.stripe_refund_id().map(|id| id.as_str()),
        Some("re_by_hand")
    );
    assert_eq!(reserved(&store, &charge).await, 300);
}

/// An authorized charge of `amount` for `order` (made with `capture: manual`, Stripe holding it
/// `requires_capture`), written to `store`: attempted once, due again, taken by nobody.
pub async fn authorized_charge(
    store: &Arc<dyn OperationStore>,
    order: &str,
    amount: i64,
) -> Operation {
    let mut op = operation(order, amount, T0);
    if let Some(p) = op.params.charge_mut() {
        p.capture_method = CaptureMethod::Manual;
    }
    op.status = OperationStatus::Authorized;
    op.external_id = Some(charge_core::domain::PaymentIntentId::parse("pi_contract").unwrap());
    op.attempts = 1;
    op.first_attempted_at = Some(T0);
    op.next_due_at = Some(T0.plus(Duration::from_secs(3600)));
    store.create_if_absent(&op).await.unwrap();
    op
}

/// A fresh capture (`capture`) or cancel of `charge` as read, taking it `from` where it is.
pub fn taking_of(
    charge: &Operation,
    capture: bool,
    from: TakeFrom,
) -> (Operation, TakeAuthorization) {
    let currency = charge.params.currency().clone();
    let (kind, fingerprint, params) = if capture {
        let params = Params::Capture(CaptureParams {
            amount_to_capture: charge.params.amount(),
            currency,
            payment_intent: charge
                .external_id
                .clone()
                .expect("an authorized charge's intent"),
            charge_attempt: charge.kind.attempt_no().unwrap_or(1),
        });
        (
            OperationKind::FIRST_CAPTURE,
            CaptureRequest::default().fingerprint(),
            params,
        )
    } else {
        let params = Params::Cancel(CancelParams {
            amount_released: charge.params.amount(),
            currency,
            payment_intent: charge.external_id.clone(),
            cancellation_reason: None,
            charge_attempt: charge.kind.attempt_no().unwrap_or(1),
        });
        (
            OperationKind::Cancel,
            CancelRequest::default().fingerprint(),
            params,
        )
    };
    let now = T0.plus(LEASE);
    let op = Operation::new_taking(
        charge.order_id.clone(),
        kind,
        fingerprint,
        params,
        charge_core::domain::Principal::jwt("order-service").unwrap(),
        now,
        GRACE,
    );
    let take = TakeAuthorization {
        charge: charge.key(),
        charge_operation_id: charge.operation_id,
        taker: Taker::of(&op.kind, op.operation_id).expect("a capture or cancel"),
        from,
        now,
    };
    (op, take)
}

async fn stored(store: &Arc<dyn OperationStore>, op: &Operation) -> Option<Operation> {
    store.get(&op.key()).await.unwrap()
}

pub async fn a_capture_takes_an_authorized_charge_once_and_a_cancel_after_it_writes_nothing(
    store: Arc<dyn OperationStore>,
) {
    let charge = authorized_charge(&store, "contract-take", 1000).await;
    let (capture, take) = taking_of(&charge, true, TakeFrom::Authorized);
    assert_eq!(
        store
            .create_beside(&capture, ChargeClaim::Take(&take))
            .await
            .unwrap(),
        CreatedBeside::New(capture.clone())
    );
    assert_eq!(stored(&store, &capture).await, Some(capture.clone()));
    let taken = stored(&store, &charge).await.unwrap();
    assert_eq!(taken.taken_by(), Some(take.taker));
    assert_eq!(
        (taken.status, taken.next_due_at),
        (OperationStatus::Authorized, charge.next_due_at),
        "still authorized, its deadline still watched"
    );
    // The same capture asked again (its own fresh operation id): the first, the charge as it was.
    let (again, take_again) = taking_of(&charge, true, TakeFrom::Authorized);
    assert_eq!(
        store
            .create_beside(&again, ChargeClaim::Take(&take_again))
            .await
            .unwrap(),
        CreatedBeside::Existing(capture.clone())
    );
    assert_eq!(stored(&store, &charge).await, Some(taken.clone()));
    // The cancel, decided from the same read: the charge refuses it, nothing is written.
    let (cancel, take_cancel) = taking_of(&charge, false, TakeFrom::Authorized);
    match store
        .create_beside(&cancel, ChargeClaim::Take(&take_cancel))
        .await
        .unwrap()
    {
        CreatedBeside::ChargeRefused(Some((current, Guard::NotTaken))) => {
            assert_eq!(current, taken)
        }
        other => panic!("expected not_taken, got {other:?}"),
    }
    assert_eq!(stored(&store, &cancel).await, None, "no cancel written");
    assert_eq!(stored(&store, &charge).await, Some(taken));
    // The twin: on an order nobody took, the cancel alone is accepted.
    let other = authorized_charge(&store, "contract-take-cancel", 1000).await;
    let (cancel, take_cancel) = taking_of(&other, false, TakeFrom::Authorized);
    assert_eq!(
        store
            .create_beside(&cancel, ChargeClaim::Take(&take_cancel))
            .await
            .unwrap(),
        CreatedBeside::New(cancel.clone())
    );
    let missing = TakeAuthorization {
        charge: charge_core::operation::OperationKey::charge(
            charge_core::domain::OrderId::parse("no-such").unwrap(),
        ),
        ..take_cancel
    };
    let (lost, _) = taking_of(&charge, false, TakeFrom::Authorized);
    assert_eq!(
        store
            .create_beside(&lost, ChargeClaim::Take(&missing))
            .await
            .unwrap(),
        CreatedBeside::ChargeRefused(None)
    );
}

pub async fn a_cancel_stops_a_charge_never_sent_and_a_claimed_one_refuses_it(
    store: Arc<dyn OperationStore>,
) {
    let pending = operation("contract-stop", 1000, T0);
    store.create_if_absent(&pending).await.unwrap();
    let (cancel, take) = taking_of(&pending, false, TakeFrom::NeverSent);
    assert_eq!(
        store
            .create_beside(&cancel, ChargeClaim::Take(&take))
            .await
            .unwrap(),
        CreatedBeside::New(cancel.clone())
    );
    let stopped = stored(&store, &pending).await.unwrap();
    assert_eq!(stopped.status, OperationStatus::Failed);
    assert_eq!(
        stopped.last_error.as_deref(),
        Some(store_rules::CANCELED_BEFORE_SENT)
    );
    assert_eq!(
        (stopped.next_due_at, stopped.taken_by()),
        (None, Some(take.taker))
    );
    // Out of the index: a claim now finds it settled and calls nobody.
    assert_eq!(
        store
            .get_by_operation_id(&pending.operation_id)
            .await
            .unwrap(),
        None
    );
    let late = claim_request(&pending, LeaseToken::new_random(), T0.plus(LEASE));
    assert!(matches!(
        store.claim(&late).await.unwrap(),
        Claim::Settled(_)
    ));
    // A charge claimed for a Stripe call (attempted) is no longer "never sent".
    let sent = operation("contract-stop-sent", 1000, T0);
    store.create_if_absent(&sent).await.unwrap();
    let token = LeaseToken::new_random();
    let Claim::Claimed(claimed) = store.claim(&claim_request(&sent, token, T0)).await.unwrap()
    else {
        panic!("claimed");
    };
    let (cancel, take) = taking_of(&sent, false, TakeFrom::NeverSent);
    match store
        .create_beside(&cancel, ChargeClaim::Take(&take))
        .await
        .unwrap()
    {
        CreatedBeside::ChargeRefused(Some((current, Guard::NeverAttempted))) => {
            assert_eq!(current, claimed)
        }
        other => panic!("expected never_attempted, got {other:?}"),
    }
    assert_eq!(stored(&store, &cancel).await, None);
    assert_eq!(stored(&store, &sent).await, Some(claimed));
}

/// `taking` claimed with `token`, after its create.
async fn claimed_taking(
    store: &Arc<dyn OperationStore>,
    taking: &Operation,
    token: LeaseToken,
) -> Operation {
    let now = T0.plus(LEASE).plus(LEASE);
    match store
        .claim(&claim_request(taking, token, now))
        .await
        .unwrap()
    {
        Claim::Claimed(op) => op,
        other => panic!("the capture or cancel is claimed, got {other:?}"),
    }
}

/// The taking's outcome `status` by the lease holder, ending the charge's authorization as
/// `outcome` says.
fn taking_outcome(
    taking: &Operation,
    token: LeaseToken,
    status: OperationStatus,
    outcome: AuthorizationOutcome,
) -> OutcomeRecord {
    let now = T0.plus(LEASE).plus(LEASE).plus(LEASE);
    OutcomeRecord {
        last_error: None,
        authorization: Some(SettleAuthorization {
            charge: taking.charge_key(),
            taker: Taker::of(&taking.kind, taking.operation_id).unwrap(),
            outcome,
            now,
        }),
        ..charge_core::testing::outcome(taking, token, status, now)
    }
}

pub async fn a_taking_s_outcome_ends_its_charge_s_authorization_in_the_same_write(
    store: Arc<dyn OperationStore>,
) {
    let captured = charge_core::domain::Amount::new(600).unwrap();
    let cases = [
        (
            true,
            OperationStatus::Succeeded,
            AuthorizationOutcome::Captured(captured),
        ),
        (
            false,
            OperationStatus::Succeeded,
            AuthorizationOutcome::Canceled,
        ),
        (true, OperationStatus::Failed, AuthorizationOutcome::Expired),
        (
            true,
            OperationStatus::Failed,
            AuthorizationOutcome::GivenBack,
        ),
    ];
    for (i, (capture, status, outcome)) in cases.into_iter().enumerate() {
        let charge = authorized_charge(&store, &format!("contract-end-{i}"), 1000).await;
        let (taking, take) = taking_of(&charge, capture, TakeFrom::Authorized);
        store
            .create_beside(&taking, ChargeClaim::Take(&take))
            .await
            .unwrap();
        let token = LeaseToken::new_random();
        claimed_taking(&store, &taking, token).await;
        let rec = taking_outcome(&taking, token, status, outcome);
        let Recorded::Written(written) = store.record(&rec).await.unwrap() else {
            panic!("{outcome:?}: the holder's outcome is written");
        };
        assert_eq!(written.status, status, "{outcome:?}");
        assert_eq!(stored(&store, &taking).await, Some(written));
        let after = stored(&store, &charge).await.unwrap();
        let want = match outcome {
            AuthorizationOutcome::Captured(_) => (OperationStatus::Succeeded, None, None),
            AuthorizationOutcome::Canceled => (
                OperationStatus::Failed,
                Some(store_rules::CANCELED_BY_MERCHANT),
                None,
            ),
            AuthorizationOutcome::Expired => (
                OperationStatus::Failed,
                Some(store_rules::AUTHORIZATION_EXPIRED),
                None,
            ),
            // Free again for another capture or cancel, still watched.
            AuthorizationOutcome::GivenBack => {
                (OperationStatus::Authorized, None, charge.next_due_at)
            }
        };
        assert_eq!(
            (after.status, after.last_error.as_deref(), after.next_due_at),
            want,
            "{outcome:?}"
        );
        let taken_by = (outcome != AuthorizationOutcome::GivenBack).then_some(take.taker);
        assert_eq!(after.taken_by(), taken_by, "{outcome:?}");
        let amount_captured =
            matches!(outcome, AuthorizationOutcome::Captured(_)).then_some(captured);
        assert_eq!(after.amount_captured(), amount_captured, "{outcome:?}");
    }
}

pub async fn a_refused_authorization_end_leaves_both_records_unchanged(
    store: Arc<dyn OperationStore>,
) {
    let charge = authorized_charge(&store, "contract-end-refused", 1000).await;
    let (capture, take) = taking_of(&charge, true, TakeFrom::Authorized);
    store
        .create_beside(&capture, ChargeClaim::Take(&take))
        .await
        .unwrap();
    let token = LeaseToken::new_random();
    let claimed = claimed_taking(&store, &capture, token).await;
    let taken = stored(&store, &charge).await.unwrap();
    let amount = charge_core::domain::Amount::new(1000).unwrap();
    // The charge names another taker (as after a hand edit): an error, and neither is written.
    let mut rec = taking_outcome(
        &capture,
        token,
        OperationStatus::Succeeded,
        AuthorizationOutcome::Captured(amount),
    );
    if let Some(settle) = rec.authorization.as_mut() {
        settle.taker.operation_id = OperationId::new_random();
    }
    let err = store.record(&rec).await.unwrap_err();
    assert!(err.to_string().contains("authorization"), "{err}");
    assert_eq!(stored(&store, &capture).await, Some(claimed.clone()));
    assert_eq!(stored(&store, &charge).await, Some(taken.clone()));
    // Another lease's outcome: refused by the fence, the charge untouched.
    let stale = taking_outcome(
        &capture,
        LeaseToken::new_random(),
        OperationStatus::Succeeded,
        AuthorizationOutcome::Captured(amount),
    );
    match store.record(&stale).await.unwrap() {
        Recorded::Refused(Some(current)) => assert_eq!(current, claimed),
        other => panic!("expected the fence to refuse, got {other:?}"),
    }
    assert_eq!(stored(&store, &charge).await, Some(taken));
    // The twin: the holder's outcome, naming itself, is written with the charge's end.
    let rec = taking_outcome(
        &capture,
        token,
        OperationStatus::Succeeded,
        AuthorizationOutcome::Captured(amount),
    );
    assert!(matches!(
        store.record(&rec).await.unwrap(),
        Recorded::Written(_)
    ));
    let after = stored(&store, &charge).await.unwrap();
    assert_eq!(
        (after.status, after.amount_captured()),
        (OperationStatus::Succeeded, Some(amount))
    );
}

/// The charge's own outcome keeps what Stripe said of its authorization: the deadline and,
/// once captured, the amount taken; an outcome that says nothing of them keeps them.
pub async fn an_outcome_writes_stripe_s_deadline_and_the_amount_captured(
    store: Arc<dyn OperationStore>,
) {
    let op = operation("contract-deadline", 1000, T0);
    store.create_if_absent(&op).await.unwrap();
    let token = LeaseToken::new_random();
    store.claim(&claim_request(&op, token, T0)).await.unwrap();
    let deadline = T0.plus(Duration::from_secs(7 * 24 * 3600));
    let rec = OutcomeRecord {
        capture_before: Some(deadline),
        ..outcome(&op, token, OperationStatus::Authorized, T0)
    };
    let Recorded::Written(written) = store.record(&rec).await.unwrap() else {
        panic!("written");
    };
    assert_eq!(written.capture_before(), Some(deadline));
    assert_eq!(stored(&store, &op).await, Some(written));
    // A second look, as the lease holder, records it captured: the deadline stays.
    let token = LeaseToken::new_random();
    let later = T0.plus(LEASE).plus(LEASE);
    store
        .claim(&claim_request(&op, token, later))
        .await
        .unwrap();
    let amount = charge_core::domain::Amount::new(700).unwrap();
    let rec = OutcomeRecord {
        amount_captured: Some(amount),
        ..outcome(&op, token, OperationStatus::Succeeded, later)
    };
    let Recorded::Written(written) = store.record(&rec).await.unwrap() else {
        panic!("written");
    };
    assert_eq!(
        (written.capture_before(), written.amount_captured()),
        (Some(deadline), Some(amount))
    );
    assert_eq!(stored(&store, &op).await, Some(written));
}

/// A charge of `order` created at `T0`, claimed and settled by its holder's outcome `status` at
/// `at` (or left `unknown`, due again, when `status` is not settled).
async fn settled_by_record(
    store: &Arc<dyn OperationStore>,
    order: &str,
    status: OperationStatus,
    at: Timestamp,
) -> Operation {
    let op = operation(order, 1000, T0);
    store.create_if_absent(&op).await.unwrap();
    let token = LeaseToken::new_random();
    store.claim(&claim_request(&op, token, T0)).await.unwrap();
    match store
        .record(&outcome(&op, token, status, at))
        .await
        .unwrap()
    {
        Recorded::Written(written) => written,
        other => panic!("{order}: the holder's outcome is written, got {other:?}"),
    }
}

/// Every record `settled_between` lists for `window`, `limit` a page, in the order listed.
async fn settled_in(
    store: &Arc<dyn OperationStore>,
    window: &AuditWindow,
    limit: usize,
) -> Vec<Operation> {
    let mut all = Vec::new();
    let mut cursor = None;
    for _ in 0..100 {
        let page = store.settled_between(window, cursor, limit).await.unwrap();
        assert!(page.unreadable.is_empty(), "{:?}", page.unreadable);
        assert!(page.operations.len() <= limit);
        all.extend(page.operations);
        cursor = page.next;
        if cursor.is_none() {
            return all;
        }
    }
    panic!("settled_between never ended");
}

fn keys(ops: &[Operation]) -> Vec<(String, String)> {
    let mut keys: Vec<_> = ops
        .iter()
        .map(|op| (op.order_id.as_str().to_owned(), op.kind.sort_key()))
        .collect();
    keys.sort();
    keys
}

/// What the drift audit reads: every record settled in the window, whatever settled it (an
/// outcome, an operator, a capture's end of its charge, a cancel before the charge was sent),
/// once each across pages, oldest settle first; never an unsettled record, one settled outside
/// the window, or one a release before the settle time settled.
pub async fn settled_between_lists_what_settled_in_the_window_once_by_pages(
    store: Arc<dyn OperationStore>,
) {
    let s = Duration::from_secs;
    let window = AuditWindow {
        from: T0.plus(s(30)),
        to: T0.plus(s(180)).plus(Duration::from_millis(1)),
    };
    let first = settled_by_record(
        &store,
        "contract-settled-a",
        OperationStatus::Succeeded,
        window.from,
    )
    .await;
    assert_eq!(
        first.settled_at,
        Some(window.from),
        "the settling write's time"
    );
    let before = window.from.minus(Duration::from_millis(1));
    let early = settled_by_record(
        &store,
        "contract-settled-b",
        OperationStatus::Failed,
        before,
    )
    .await;
    assert_eq!(
        stored(&store, &early).await.unwrap().settled_at,
        Some(before)
    );
    settled_by_record(
        &store,
        "contract-settled-c",
        OperationStatus::Succeeded,
        window.to,
    )
    .await;
    let unknown = settled_by_record(
        &store,
        "contract-settled-d",
        OperationStatus::Unknown,
        T0.plus(s(60)),
    )
    .await;
    assert_eq!(unknown.settled_at, None);
    // An operator's resolution.
    let by_hand = operation("contract-settled-e", 1000, T0);
    store.create_if_absent(&by_hand).await.unwrap();
    let resolved_at = T0.plus(s(90));
    let req = resolution(&by_hand, OperationStatus::Succeeded, resolved_at);
    let Recorded::Written(resolved) = store.resolve(&req).await.unwrap() else {
        panic!("resolved");
    };
    assert_eq!(resolved.settled_at, Some(resolved_at));
    // A cancel before the charge was sent: the charge settles `failed` in the cancel's write,
    // and the cancel is written settled (as the door writes it).
    let pending = operation("contract-settled-f", 1000, T0);
    store.create_if_absent(&pending).await.unwrap();
    let (mut cancel, take) = taking_of(&pending, false, TakeFrom::NeverSent);
    cancel.status = OperationStatus::Succeeded;
    cancel.next_due_at = None;
    cancel.settled_at = Some(take.now);
    store
        .create_beside(&cancel, ChargeClaim::Take(&take))
        .await
        .unwrap();
    assert_eq!(
        stored(&store, &pending).await.unwrap().settled_at,
        Some(take.now)
    );
    // A capture's outcome ends its charge's authorization: both settle at the same millisecond.
    let charge = authorized_charge(&store, "contract-settled-g", 1000).await;
    let (capture, take) = taking_of(&charge, true, TakeFrom::Authorized);
    store
        .create_beside(&capture, ChargeClaim::Take(&take))
        .await
        .unwrap();
    let token = LeaseToken::new_random();
    claimed_taking(&store, &capture, token).await;
    let captured = charge_core::domain::Amount::new(1000).unwrap();
    let rec = taking_outcome(
        &capture,
        token,
        OperationStatus::Succeeded,
        AuthorizationOutcome::Captured(captured),
    );
    store.record(&rec).await.unwrap();
    // Settled by a release before the settle time: read as any other, never listed.
    let old = succeeded_charge(&store, "contract-settled-h", 1000).await;
    assert_eq!(stored(&store, &old).await.unwrap().settled_at, None);

    let want = vec![
        ("contract-settled-a".to_owned(), "charge".to_owned()),
        ("contract-settled-e".to_owned(), "charge".to_owned()),
        ("contract-settled-f".to_owned(), "cancel".to_owned()),
        ("contract-settled-f".to_owned(), "charge".to_owned()),
        ("contract-settled-g".to_owned(), "capture".to_owned()),
        ("contract-settled-g".to_owned(), "charge".to_owned()),
    ];
    for limit in [1, 2, 4, 100] {
        let listed = settled_in(&store, &window, limit).await;
        assert_eq!(keys(&listed), want, "limit {limit}: each once");
        let times: Vec<Timestamp> = listed.iter().map(|op| op.settled_at.unwrap()).collect();
        assert!(
            times.windows(2).all(|w| w[0] <= w[1]),
            "oldest first: {times:?}"
        );
        assert!(listed.iter().all(|op| op.status.is_settled()));
    }
    let g = settled_in(&store, &window, 100).await;
    let g_times: Vec<Timestamp> = g
        .iter()
        .filter(|op| op.order_id.as_str() == "contract-settled-g")
        .map(|op| op.settled_at.unwrap())
        .collect();
    assert_eq!(g_times, [rec.now, rec.now]);
}

/// The window is `[from, to)` to the millisecond, also where it crosses midnight UTC (DynamoDB
/// keeps a day per index partition).
pub async fn settled_between_is_half_open_across_midnight(store: Arc<dyn OperationStore>) {
    const DAY_MS: i64 = 86_400_000;
    let midnight = Timestamp::from_millis((T0.as_millis() / DAY_MS + 1) * DAY_MS);
    let ten = Duration::from_secs(10);
    let ms = Duration::from_millis(1);
    let at = [
        midnight.minus(ten),
        midnight.minus(ms),
        midnight,
        midnight.plus(ten),
    ];
    for (i, t) in at.iter().enumerate() {
        settled_by_record(
            &store,
            &format!("contract-midnight-{i}"),
            OperationStatus::Succeeded,
            *t,
        )
        .await;
    }
    let orders = |ops: Vec<Operation>| -> Vec<String> {
        ops.iter()
            .map(|op| op.order_id.as_str().to_owned())
            .collect()
    };
    let window = |from: Timestamp, to: Timestamp| AuditWindow { from, to };
    for limit in [1, 3] {
        assert_eq!(
            orders(settled_in(&store, &window(at[0], at[3]), limit).await),
            [
                "contract-midnight-0",
                "contract-midnight-1",
                "contract-midnight-2"
            ],
            "limit {limit}"
        );
    }
    assert_eq!(
        orders(settled_in(&store, &window(midnight, at[3]), 5).await),
        ["contract-midnight-2"]
    );
    assert_eq!(
        orders(settled_in(&store, &window(at[0], midnight), 5).await),
        ["contract-midnight-0", "contract-midnight-1"]
    );
    let empty = store
        .settled_between(&window(midnight, midnight), None, 5)
        .await
        .unwrap();
    assert!(empty.operations.is_empty() && empty.next.is_none());
}

/// What Stripe holds of dispute `id` of the contract's charges (`pi_contract`), of `amount`, in
/// `status`.
fn stripe_dispute(id: &str, amount: i64, status: &str) -> charge_core::dispute::StripeDispute {
    let mut d = charge_core::testing::stripe_dispute(id, "pi_contract");
    d.amount = amount;
    d.status = charge_core::dispute::DisputeStatus::parse(status);
    d.is_charge_refundable = d.status.is_inquiry();
    d
}

/// The dispute's write as the plan makes it over the two records as the store holds them now.
async fn dispute_write(
    store: &Arc<dyn OperationStore>,
    charge: &Operation,
    dispute: &charge_core::dispute::StripeDispute,
    now: Timestamp,
) -> charge_core::dispute::plan::DisputeWrite {
    let key = charge_core::operation::OperationKey::of_kind(
        charge.order_id.clone(),
        OperationKind::Dispute(dispute.id.clone()),
    );
    let record = store.get(&key).await.unwrap();
    let charge_now = store.get(&charge.key()).await.unwrap();
    charge_core::dispute::plan::plan(
        record.as_ref(),
        charge_now.as_ref(),
        dispute,
        now,
        &Default::default(),
    )
}

/// A dispute's record is created beside its charge (the amount reserved, the charge naming it,
/// in the same write), moved, and settled once: `won` gives the reservation back and clears
/// the charge's open dispute in the settling write; the same move again is refused (settled is
/// final), the record untouched.
pub async fn a_dispute_is_created_beside_its_charge_moved_and_settled_once(
    store: Arc<dyn OperationStore>,
) {
    use charge_core::dispute::plan::{DisputeWrite, Unchanged};
    use charge_core::store::DisputeRecorded;
    let charge = succeeded_charge(&store, "contract-dispute", 1000).await;
    let open = stripe_dispute("dp_contract", 1000, "needs_response");
    let DisputeWrite::Create { record, on_charge } =
        dispute_write(&store, &charge, &open, T0).await
    else {
        panic!("a create")
    };
    let record = *record;
    let created = store
        .create_beside(&record, ChargeClaim::Dispute(&on_charge))
        .await
        .unwrap();
    assert_eq!(created, CreatedBeside::New(record.clone()));
    assert_eq!(
        store.get(&record.key()).await.unwrap(),
        Some(record.clone())
    );
    let charge_now = store.get(&charge.key()).await.unwrap().unwrap();
    assert_eq!(charge_now.refund_reserved(), 1000);
    assert_eq!(
        charge_now
            .params
            .charge_state()
            .unwrap()
            .refund_blocked_by(),
        Some(&open.id)
    );
    // Created again (a second delivery that read before the first wrote): the existing one,
    // nothing reserved twice.
    assert_eq!(
        store
            .create_beside(&record, ChargeClaim::Dispute(&on_charge))
            .await
            .unwrap(),
        CreatedBeside::Existing(record.clone())
    );
    assert_eq!(reserved(&store, &charge).await, 1000);
    // Evidence submitted: moved, the charge not written.
    let later = T0.plus(LEASE);
    let DisputeWrite::Move(moved) = dispute_write(
        &store,
        &charge,
        &stripe_dispute("dp_contract", 1000, "under_review"),
        later,
    )
    .await
    else {
        panic!("a move")
    };
    assert_eq!(moved.on_charge, None);
    let DisputeRecorded::Written(under_review) = store.record_dispute(&moved).await.unwrap() else {
        panic!("written")
    };
    // The store's write is the rule's change, attribute for attribute.
    assert_eq!(under_review, store_rules::apply(&record, &*moved).unwrap());
    assert_eq!(
        under_review.params.dispute_state().unwrap().status.as_str(),
        "under_review"
    );
    assert_eq!(under_review.status, OperationStatus::Unknown);
    assert!(under_review.next_due_at.is_some());
    // Won: settled failed, the reservation back, the charge's open dispute cleared.
    let won = stripe_dispute("dp_contract", 1000, "won");
    let DisputeWrite::Move(settle) = dispute_write(&store, &charge, &won, later.plus(LEASE)).await
    else {
        panic!("a settle")
    };
    let charge_before = store.get(&charge.key()).await.unwrap().unwrap();
    let DisputeRecorded::Written(settled) = store.record_dispute(&settle).await.unwrap() else {
        panic!("written")
    };
    assert_eq!(
        settled,
        store_rules::apply(&under_review, &*settle).unwrap()
    );
    let on_charge = settle.on_charge.as_ref().expect("the charge's side");
    assert_eq!(
        store.get(&charge.key()).await.unwrap().unwrap(),
        store_rules::apply(&charge_before, on_charge).unwrap()
    );
    assert_eq!(
        (
            settled.status,
            settled.next_due_at,
            settled.settled_at.is_some()
        ),
        (OperationStatus::Failed, None, true)
    );
    let charge_now = store.get(&charge.key()).await.unwrap().unwrap();
    assert_eq!(charge_now.refund_reserved(), 0);
    assert_eq!(charge_now.params.charge_state().unwrap().disputed_by, None);
    assert_eq!(
        store.record_dispute(&settle).await.unwrap(),
        DisputeRecorded::Refused(Some(settled.clone())),
        "settled is final"
    );
    assert_eq!(reserved(&store, &charge).await, 0, "given back once");
    assert_eq!(
        dispute_write(&store, &charge, &won, later.plus(LEASE)).await,
        DisputeWrite::Nothing(Unchanged::Settled)
    );
}

/// Two deliveries of one dispute at once (each its own read, plan and write) make one record
/// and reserve its amount once; two of its closing at once settle it once and give the
/// reservation back once.
pub async fn two_deliveries_of_a_dispute_at_once_make_one_record(store: Arc<dyn OperationStore>) {
    use charge_once::executor::dispute::{record_dispute, DisputeRecording};
    let charge = succeeded_charge(&store, "contract-dispute-race", 1000).await;
    for (status, want_reserved) in [("needs_response", 1000), ("won", 0)] {
        let dispute = stripe_dispute("dp_race", 1000, status);
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let (store, order, dispute) = (store.clone(), charge.order_id.clone(), dispute.clone());
            tasks.push(tokio::spawn(async move {
                record_dispute(
                    &*store,
                    &order,
                    &dispute,
                    T0.plus(LEASE),
                    &Default::default(),
                )
                .await
                .unwrap()
            }));
        }
        // One record, created once (a second create would be a second record; the others
        // find it there). A delivery that read it may still move it to what it already holds
        // only if its read differed; the money below says none moved it twice.
        let (mut created, mut settled) = (0, 0);
        for t in tasks {
            if let DisputeRecording::Written {
                created: c, record, ..
            } = t.await.unwrap()
            {
                created += usize::from(c);
                settled += usize::from(record.status.is_settled());
            }
        }
        match status {
            "needs_response" => assert_eq!(created, 1, "{status}: created once"),
            _ => assert_eq!((created, settled), (0, 1), "{status}: settled once"),
        }
        assert_eq!(reserved(&store, &charge).await, want_reserved, "{status}");
    }
    let key = charge_core::operation::OperationKey::of_kind(
        charge.order_id.clone(),
        OperationKind::Dispute(charge_core::domain::DisputeId::parse("dp_race").unwrap()),
    );
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().status,
        OperationStatus::Failed
    );
}

/// A dispute whose amount does not fit beside the order's refunds is refused by the charge's
/// guard when its reservation was planned on an older read (a refund reserved in between), and
/// planned again it is recorded without the reservation, never in review (due again as any open
/// dispute, its reason in `last_error`); its twin, the same dispute
/// of an order without refunds, is reserved.
pub async fn a_dispute_that_does_not_fit_is_recorded_unreserved_and_its_twin_reserved(
    store: Arc<dyn OperationStore>,
) {
    use charge_core::dispute::plan::DisputeWrite;
    let charge = succeeded_charge(&store, "contract-dispute-fit", 1000).await;
    let open = stripe_dispute("dp_fit", 1000, "needs_response");
    let DisputeWrite::Create { record, on_charge } =
        dispute_write(&store, &charge, &open, T0).await
    else {
        panic!("a create")
    };
    // A refund of 600 reserved after the dispute's plan read the charge.
    let (refund, reserve) = refund_of(&charge, "r-before-dispute", Some(600)).unwrap();
    store
        .create_beside(&refund, ChargeClaim::Reserve(&reserve))
        .await
        .unwrap();
    match store
        .create_beside(&record, ChargeClaim::Dispute(&on_charge))
        .await
        .unwrap()
    {
        CreatedBeside::ChargeRefused(Some((_, Guard::ReservedAtMost(0)))) => {}
        other => panic!("expected the charge's refusal, got {other:?}"),
    }
    assert_eq!(
        store.get(&record.key()).await.unwrap(),
        None,
        "nothing written"
    );
    assert_eq!(reserved(&store, &charge).await, 600);
    let DisputeWrite::Create { record, on_charge } =
        dispute_write(&store, &charge, &open, T0).await
    else {
        panic!("a create")
    };
    assert_eq!(on_charge.reserve, None);
    assert!(matches!(
        store
            .create_beside(&record, ChargeClaim::Dispute(&on_charge))
            .await
            .unwrap(),
        CreatedBeside::New(_)
    ));
    let stored = store.get(&record.key()).await.unwrap().unwrap();
    assert!(!stored.params.dispute_state().unwrap().reserved);
    // Never in review (a record there leaves the due index and would never be read again):
    // its reason kept in last_error, due again as any open dispute.
    assert!(stored.review.is_none(), "{stored:?}");
    assert!(stored.last_error.is_some(), "{stored:?}");
    assert_eq!(reserved(&store, &charge).await, 600, "refunds only");
    let listed = |page: charge_once::ports::Page| {
        page.operations
            .iter()
            .any(|op| op.operation_id == stored.operation_id)
    };
    let unsettled = store
        .query_index(IndexQuery::Unsettled, None, 100)
        .await
        .unwrap();
    assert!(listed(unsettled), "due again");
    let in_review = store
        .query_index(IndexQuery::InReview, None, 100)
        .await
        .unwrap();
    assert!(!listed(in_review), "not in review");
    // The twin: an order without refunds reserves the dispute's amount.
    let twin = succeeded_charge(&store, "contract-dispute-fit-twin", 1000).await;
    let DisputeWrite::Create { record, on_charge } = dispute_write(&store, &twin, &open, T0).await
    else {
        panic!("a create")
    };
    assert!(matches!(
        store
            .create_beside(&record, ChargeClaim::Dispute(&on_charge))
            .await
            .unwrap(),
        CreatedBeside::New(_)
    ));
    assert_eq!(reserved(&store, &twin).await, 1000);
}

/// The dispute gauges' read: of the index entries due by a horizon, only the disputes' records,
/// by pages; the charge's other work due in the same window is in `query_index`'s page (the
/// twin) and never in this one, and a horizon before the dispute's next read lists nothing.
pub async fn disputes_due_by_lists_only_the_due_disputes_by_pages(store: Arc<dyn OperationStore>) {
    use charge_core::dispute::plan::DisputeWrite;
    let charge = succeeded_charge(&store, "contract-gauge", 1000).await;
    let open = stripe_dispute("dp_gauge", 1000, "needs_response");
    let DisputeWrite::Create { record, on_charge } =
        dispute_write(&store, &charge, &open, T0).await
    else {
        panic!("a create")
    };
    store
        .create_beside(&record, ChargeClaim::Dispute(&on_charge))
        .await
        .unwrap();
    let read_at = record.next_due_at.expect("an open dispute is due again");
    // Three other operations due before the dispute's next read.
    for i in 0..3u64 {
        let op = operation(
            &format!("contract-gauge-{i}"),
            1000,
            T0.plus(Duration::from_secs(i)),
        );
        store.create_if_absent(&op).await.unwrap();
    }
    let horizon = std::cmp::max(read_at, T0.plus(GRACE).plus(Duration::from_secs(60)))
        .plus(Duration::from_secs(1));
    let mut listed = Vec::new();
    let (mut cursor, mut pages) = (None, 0);
    loop {
        let page = store.disputes_due_by(horizon, cursor, 2).await.unwrap();
        pages += 1;
        assert!(page.unreadable.is_empty());
        listed.extend(page.operations);
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
        assert!(pages < 10, "pagination must end");
    }
    assert_eq!(listed, vec![*record], "the dispute alone, as stored");
    assert!(pages >= 2, "four entries due, two a page");
    let everything = store
        .query_index(IndexQuery::DueBy(horizon), None, 10)
        .await
        .unwrap();
    assert_eq!(everything.operations.len(), 4, "the twin lists every kind");
    let before = store
        .disputes_due_by(read_at.minus(Duration::from_secs(1)), None, 10)
        .await
        .unwrap();
    assert!(before.operations.is_empty(), "{before:?}");
}
/// One `#[tokio::test]` per contract case, for the store built by `$make` (an async expression
/// returning `Arc<dyn OperationStore>`).
#[macro_export]
macro_rules! store_contract_tests {
    ($make:expr) => {
        $crate::store_contract_tests!(@cases $make;
            create_if_absent_returns_the_winner_unchanged,
            get_of_a_missing_record_is_none,
            get_by_operation_id_finds_unsettled_records_only,
            an_operator_redrive_takes_an_operation_out_of_review,
            claim_sets_lease_first_attempt_and_attempts,
            claim_refuses_missing_settled_and_review,
            record_is_fenced_on_the_lease_and_on_an_unsettled_status,
            concurrent_claims_have_exactly_one_winner,
            concurrent_creates_have_exactly_one_winner,
            index_lists_due_unsettled_work_in_due_order_by_pages,
            one_order_s_operations_due_at_once_are_each_listed_once_by_pages,
            reschedule_is_guarded_by_what_was_read,
            resolve_settles_once_and_refuses_a_settled_record,
            resolve_is_guarded_by_what_was_read_and_by_the_lease,
            count_in_review_counts_the_review_partition_by_pages,
            a_refund_reserves_its_amount_on_the_charge_in_the_same_write,
            a_refund_asked_again_is_the_existing_one_and_reserves_nothing,
            a_refund_over_what_is_left_writes_nothing_and_its_twin_fits,
            a_refund_of_a_charge_no_longer_as_read_writes_nothing,
            concurrent_refunds_never_reserve_more_than_the_charge,
            a_failed_refund_gives_its_reservation_back_in_the_same_write,
            a_release_is_fenced_with_its_refund_s_outcome,
            a_succeeded_refund_fails_later_only_on_the_one_write_that_gives_it_back,
            refunds_of_lists_an_order_s_refunds_by_refund_id,
            disputes_of_lists_an_order_s_disputes_by_dispute_id,
            charge_of_follows_the_head_to_the_latest_attempt,
            two_retries_at_once_make_exactly_one_attempt,
            a_live_paid_or_canceled_latest_refuses_a_new_attempt_and_its_failed_twin_starts_one,
            refunds_and_captures_act_on_the_order_s_latest_attempt,
            an_operator_resolves_a_refund_and_gives_its_reservation_back_in_the_same_write,
            a_capture_takes_an_authorized_charge_once_and_a_cancel_after_it_writes_nothing,
            a_cancel_stops_a_charge_never_sent_and_a_claimed_one_refuses_it,
            a_taking_s_outcome_ends_its_charge_s_authorization_in_the_same_write,
            a_refused_authorization_end_leaves_both_records_unchanged,
            an_outcome_writes_stripe_s_deadline_and_the_amount_captured,
            settled_between_lists_what_settled_in_the_window_once_by_pages,
            settled_between_is_half_open_across_midnight,
            a_dispute_is_created_beside_its_charge_moved_and_settled_once,
            two_deliveries_of_a_dispute_at_once_make_one_record,
            a_dispute_that_does_not_fit_is_recorded_unreserved_and_its_twin_reserved,
            disputes_due_by_lists_only_the_due_disputes_by_pages,
        );
    };
    (@cases $make:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let store = $make.await;
                $crate::store_contract::$case(store).await;
            }
        )+
    };
}
