//! The `EventInbox` contract: what the webhook endpoint relies on (`charge_once::ports::EventInbox`).
//! An event id is admitted once, every later delivery of it is a duplicate, until its entry
//! expires (an expired entry counts as absent, as a TTL-deleted item would) or is forgotten (acting
//! on it failed, so Stripe's retry must be processed again). Admission is one conditional write:
//! of racing deliveries, exactly one is new.
//!
//! Each case takes a fresh, empty inbox and uses event ids of its own. Times are whole seconds:
//! the DynamoDB adapter keeps expiry in seconds, its TTL attribute's unit.

use std::sync::Arc;
use std::time::Duration;

use charge_core::testing::T0;
use charge_core::time::Timestamp;
use charge_once::ports::{Admitted, EventInbox, INBOX_TTL};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `admit` at `at`, remembered for the production TTL.
async fn admit(inbox: &dyn EventInbox, event_id: &str, at: Timestamp) -> Admitted {
    inbox
        .admit(event_id, at, at.plus(INBOX_TTL))
        .await
        .unwrap_or_else(|e| panic!("admit {event_id}: {e}"))
}

pub async fn the_first_delivery_is_new_and_every_redelivery_a_duplicate(
    inbox: Arc<dyn EventInbox>,
) {
    let inbox = inbox.as_ref();
    assert_eq!(admit(inbox, "evt_contract_once", T0).await, Admitted::New);
    for later in [secs(0), secs(5), secs(3 * 24 * 3600), INBOX_TTL - secs(1)] {
        assert_eq!(
            admit(inbox, "evt_contract_once", T0.plus(later)).await,
            Admitted::Duplicate,
            "{later:?} after the first delivery, inside the TTL"
        );
    }
}

pub async fn event_ids_are_admitted_independently(inbox: Arc<dyn EventInbox>) {
    let inbox = inbox.as_ref();
    // Ids that share a prefix: the inbox keys on the whole id.
    for id in ["evt_contract_1", "evt_contract_10", "evt_contract_1x"] {
        assert_eq!(admit(inbox, id, T0).await, Admitted::New, "{id}");
    }
    for id in ["evt_contract_1", "evt_contract_10", "evt_contract_1x"] {
        assert_eq!(
            admit(inbox, id, T0.plus(secs(1))).await,
            Admitted::Duplicate,
            "{id}"
        );
    }
}

pub async fn an_expired_entry_counts_as_absent_and_is_replaced(inbox: Arc<dyn EventInbox>) {
    let id = "evt_contract_expiry";
    let expires = T0.plus(secs(60));
    assert_eq!(inbox.admit(id, T0, expires).await.unwrap(), Admitted::New);
    assert_eq!(
        inbox
            .admit(id, expires.minus(secs(1)), expires.plus(INBOX_TTL))
            .await
            .unwrap(),
        Admitted::Duplicate,
        "a second before it expires"
    );
    // From its expiry on, the entry is as good as deleted: the delivery is new, and it writes the
    // entry again with the new expiry.
    assert_eq!(
        admit(inbox.as_ref(), id, expires).await,
        Admitted::New,
        "at its expiry"
    );
    assert_eq!(
        admit(inbox.as_ref(), id, expires.plus(secs(1))).await,
        Admitted::Duplicate,
        "the new entry is remembered"
    );
    assert_eq!(
        admit(inbox.as_ref(), id, expires.plus(INBOX_TTL)).await,
        Admitted::New,
        "until the new entry's own expiry"
    );
}

pub async fn a_duplicate_leaves_the_entry_as_it_was(inbox: Arc<dyn EventInbox>) {
    let id = "evt_contract_no_extend";
    let expires = T0.plus(secs(60));
    assert_eq!(inbox.admit(id, T0, expires).await.unwrap(), Admitted::New);
    // A redelivery offers a later expiry; it is a duplicate and changes nothing...
    assert_eq!(
        inbox
            .admit(id, T0.plus(secs(30)), T0.plus(secs(30)).plus(INBOX_TTL))
            .await
            .unwrap(),
        Admitted::Duplicate
    );
    // ...so the entry still expires when the first delivery said.
    assert_eq!(admit(inbox.as_ref(), id, expires).await, Admitted::New);
}

pub async fn a_forgotten_event_is_admitted_again_and_only_that_one(inbox: Arc<dyn EventInbox>) {
    let inbox = inbox.as_ref();
    assert_eq!(admit(inbox, "evt_contract_forget", T0).await, Admitted::New);
    assert_eq!(admit(inbox, "evt_contract_keep", T0).await, Admitted::New);
    inbox.forget("evt_contract_forget").await.unwrap();
    let retry = T0.plus(secs(60));
    assert_eq!(
        admit(inbox, "evt_contract_forget", retry).await,
        Admitted::New,
        "Stripe's retry after a failed attempt is processed again"
    );
    assert_eq!(
        admit(inbox, "evt_contract_forget", retry.plus(secs(1))).await,
        Admitted::Duplicate,
        "and remembered again"
    );
    assert_eq!(
        admit(inbox, "evt_contract_keep", retry).await,
        Admitted::Duplicate,
        "forgetting one event forgets no other"
    );
}

pub async fn concurrent_deliveries_of_one_event_have_exactly_one_new(inbox: Arc<dyn EventInbox>) {
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..16u64 {
        let inbox = inbox.clone();
        tasks.spawn(async move {
            let at = T0.plus(Duration::from_millis(n));
            inbox
                .admit("evt_contract_race", at, at.plus(INBOX_TTL))
                .await
                .unwrap()
        });
    }
    let mut new = 0;
    let mut duplicate = 0;
    while let Some(result) = tasks.join_next().await {
        match result.unwrap() {
            Admitted::New => new += 1,
            Admitted::Duplicate => duplicate += 1,
        }
    }
    assert_eq!(
        (new, duplicate),
        (1, 15),
        "one delivery acts, fifteen do not"
    );
}

/// One `#[tokio::test]` per contract case, for the inbox built by `$make` (an async expression
/// returning `Arc<dyn EventInbox>`).
#[macro_export]
macro_rules! inbox_contract_tests {
    ($make:expr) => {
        $crate::contract_cases!(inbox_contract, $make;
            the_first_delivery_is_new_and_every_redelivery_a_duplicate,
            event_ids_are_admitted_independently,
            an_expired_entry_counts_as_absent_and_is_replaced,
            a_duplicate_leaves_the_entry_as_it_was,
            a_forgotten_event_is_admitted_again_and_only_that_one,
            concurrent_deliveries_of_one_event_have_exactly_one_new,
        );
    };
}
