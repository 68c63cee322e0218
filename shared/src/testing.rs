//! Test fixtures beside the pure ones of [`charge_core::testing`] (an order, its operation, the
//! claim and outcome writes; tests import those from there): the helpers that send those writes
//! to an [`OperationStore`] ([`CreateIn::create_in`], [`claim`], [`record`], [`settle_as`]), and a
//! webhook secret of Stripe's form. Test code that uses both asks for `charge-core` with its
//! `testing` feature too.
//!
//! For tests only. Compiled for this crate's own unit tests, and elsewhere behind the `testing`
//! feature, which test code asks for from its `[dev-dependencies]`
//! (`charge-once = { workspace = true, features = ["testing"] }`; the integration tests' `testkit`
//! from its own dependencies). A Lambda's build never has it.

use charge_core::domain::PaymentIntentId;
use charge_core::operation::{LeaseToken, Operation, OperationStatus};
use charge_core::store::{Claim, OutcomeRecord, Recorded};
use charge_core::testing::{claim_request, outcome, OrderBuilder};
use charge_core::time::Timestamp;

use crate::ports::OperationStore;

/// [`OrderBuilder::build`], then created in a store (as checkout does).
#[allow(async_fn_in_trait)] // test fixtures: never used as `dyn`, never sent across threads.
pub trait CreateIn {
    /// Builds the operation and creates it in `store`; panics unless the store answers.
    async fn create_in<S: OperationStore + ?Sized>(self, store: &S) -> Operation;
}

impl CreateIn for OrderBuilder {
    async fn create_in<S: OperationStore + ?Sized>(self, store: &S) -> Operation {
        let op = self.build();
        store
            .create_if_absent(&op)
            .await
            .expect("create the fixture operation");
        op
    }
}

/// Claims `op` at `now` with a fresh lease token; panics unless the claim is granted.
pub async fn claim<S: OperationStore + ?Sized>(
    store: &S,
    op: &Operation,
    now: Timestamp,
) -> (LeaseToken, Operation) {
    let token = LeaseToken::new_random();
    match store
        .claim(&claim_request(op, token, now))
        .await
        .expect("claim")
    {
        Claim::Claimed(rec) => (token, rec),
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// Writes `rec`; panics unless it is written. Returns the record as written.
pub async fn record<S: OperationStore + ?Sized>(store: &S, rec: &OutcomeRecord) -> Operation {
    match store.record(rec).await.expect("record") {
        Recorded::Written(op) => op,
        other => panic!("expected the outcome written, got {other:?}"),
    }
}

/// One attempt through the store at `now`: claims `op`, then records [`outcome`] `status` with
/// `external_id`. Returns the record as written.
pub async fn settle_as<S: OperationStore + ?Sized>(
    store: &S,
    op: &Operation,
    status: OperationStatus,
    external_id: Option<&str>,
    now: Timestamp,
) -> Operation {
    let (token, _) = claim(store, op, now).await;
    let rec = OutcomeRecord {
        external_id: external_id
            .map(|id| PaymentIntentId::parse(id).expect("valid PaymentIntent id")),
        ..outcome(op, token, status, now)
    };
    record(store, &rec).await
}

/// A webhook signing secret of Stripe's form for tests, the same for the same `label` (the
/// SHA-256 of it in hex after `whsec_`). A fixture's key: never a secret to store anywhere.
pub fn webhook_secret(label: &str) -> crate::events::WebhookSecret {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(label.as_bytes());
    let hex = charge_core::domain::lower_hex(&digest);
    crate::events::WebhookSecret::parse(&format!("whsec_{hex}"))
        .expect("a SHA-256 in hex has Stripe's form")
}

/// A refund create of `amount` (usd) against `payment_intent`, for a new refund operation of
/// order `ord-refund`: its own operation id and refund key each time.
pub fn refund_create(payment_intent: &PaymentIntentId, amount: i64) -> crate::ports::CreateRefund {
    let operation_id = charge_core::domain::OperationId::new_random();
    crate::ports::CreateRefund {
        idempotency_key: operation_id.refund_idempotency_key(),
        operation_id,
        order_id: charge_core::domain::OrderId::parse("ord-refund").expect("a valid order id"),
        params: charge_core::refund::request::RefundParams {
            amount: charge_core::domain::Amount::new(amount).expect("a valid amount"),
            currency: charge_core::domain::Currency::parse("usd").expect("usd"),
            payment_intent: payment_intent.clone(),
            reason: None,
            charge_attempt: 1,
        },
    }
}

/// Everything logged at INFO and above while `f` runs on this thread, as the functions write it
/// (the product's subscriber, JSON lines): for tests that a line carries its evidence.
pub async fn logged<T>(f: impl std::future::Future<Output = T>) -> (T, String) {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines::default();
    let sink = lines.clone();
    let subscriber =
        crate::logging::subscriber(tracing::level_filters::LevelFilter::INFO, true, move || {
            sink.clone()
        });
    // Held across `f`'s awaits: a test's runtime polls it on this one thread.
    let out = {
        let _guard = tracing::subscriber::set_default(subscriber);
        f.await
    };
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    (out, text)
}
