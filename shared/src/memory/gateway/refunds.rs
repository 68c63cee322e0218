//! The fake's refunds: Stripe's `POST /v1/refunds` behind the same idempotency layer as its
//! creates, with Stripe's refusals (in Stripe's order, none saved under the key), retrieve and
//! list; a test scripts a refund's first status, a later change of it, and faults.

use charge_core::domain::{Fingerprint, PaymentIntentId, StripeRefundId};
use charge_core::outcome::{GatewayError, PaymentIntentStatus};
use charge_core::refund::{RefundStatus, StripeRefund};
use charge_core::time::Timestamp;

use super::{before_the_key, FakeFault, FakeGateway, State};
use crate::ports::CreateRefund;

/// A refund that exists at the fake Stripe, with the facts its answers carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeRefund {
    pub status: RefundStatus,
    pub payment_intent: PaymentIntentId,
    pub amount: i64,
    pub currency: String,
    pub operation_id: String,
    pub order_id: String,
    pub idempotency_key: String,
    pub failure_reason: Option<String>,
}

impl FakeRefund {
    /// The refund as Stripe's answers show it.
    pub(super) fn refund(&self, id: &StripeRefundId) -> StripeRefund {
        StripeRefund {
            id: id.clone(),
            status: self.status.clone(),
            replayed: false,
            amount: Some(self.amount),
            currency: Some(self.currency.clone()),
            payment_intent: Some(self.payment_intent.as_str().to_owned()),
            operation_id: Some(self.operation_id.clone()),
            order_id: Some(self.order_id.clone()),
            failure_reason: self.failure_reason.clone(),
            reason: None,
        }
    }

    /// Stripe's rule: a refund not failed or canceled holds its amount of the charge.
    fn holds_money(&self) -> bool {
        !matches!(self.status, RefundStatus::Failed | RefundStatus::Canceled)
    }
}

/// A refund key's first request and the answer it replays.
pub(super) struct SavedRefund {
    fingerprint: Fingerprint,
    answer: StripeRefund,
}

/// What the refund create sends, as Stripe compares a key's requests.
fn fingerprint(req: &CreateRefund) -> Fingerprint {
    Fingerprint::from_stored(format!(
        "refund {} {} {} {} {}",
        req.params.payment_intent,
        req.params.amount.minor_units(),
        req.params.reason.map_or("-", |r| r.as_str()),
        req.operation_id,
        req.order_id.as_str()
    ))
}

fn rejected(detail: String, param: &str) -> GatewayError {
    GatewayError::Rejected {
        detail,
        param: Some(param.to_owned()),
    }
}

impl State {
    /// The idempotency layer for a refund key: its first answer replayed for the same request; a
    /// key used with another request, or on a PaymentIntent create, is misused.
    fn replay_refund(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
    ) -> Option<Result<StripeRefund, GatewayError>> {
        let misuse = || {
            Err(GatewayError::KeyMisuse {
                detail: "400 idempotency_error: keys can only be used with the same parameters"
                    .into(),
            })
        };
        if self.saved.contains_key(key) {
            return Some(misuse());
        }
        let saved = self.refunds_saved.get(key)?;
        if saved.fingerprint != *fingerprint {
            return Some(misuse());
        }
        Some(Ok(saved.answer.clone()))
    }

    /// Stripe's refusals of a refund, in its order: an unknown intent, one not succeeded, nothing
    /// left, more than is left.
    fn refuse_refund(&self, req: &CreateRefund) -> Result<(), GatewayError> {
        let pi = &req.params.payment_intent;
        let Some(charge) = self.charges.get(pi.as_str()) else {
            return Err(rejected(
                format!("404 resource_missing: No such payment_intent: '{pi}'"),
                "payment_intent",
            ));
        };
        self.refuse_disputed(pi)?;
        if charge.status != PaymentIntentStatus::Succeeded {
            return Err(GatewayError::UnexpectedState {
                detail: format!(
                    "400 payment_intent_unexpected_state: this PaymentIntent's status is {}",
                    charge.status
                ),
            });
        }
        let held: i64 = self
            .refunds
            .values()
            .filter(|r| r.payment_intent == *pi && r.holds_money())
            .map(|r| r.amount)
            .sum();
        // A captured authorization refunds what its capture took, not what it held.
        let left = charge.amount_received.unwrap_or(charge.amount) - held;
        if left <= 0 {
            return Err(rejected(
                format!("400 invalid_request_error/charge_already_refunded: {pi} is refunded"),
                "charge",
            ));
        }
        let asked = req.params.amount.minor_units();
        if asked > left {
            return Err(rejected(
                format!(
                    "400 invalid_request_error/amount_too_large: refund amount ({asked}) is \
                     greater than what is left ({left})"
                ),
                "amount",
            ));
        }
        Ok(())
    }

    fn commit_refund(&mut self, req: &CreateRefund, now: Timestamp) -> StripeRefund {
        self.next_refund_id += 1;
        let id = fake_refund_id(self.next_refund_id);
        let refund = FakeRefund {
            status: self.refund_first_status.clone(),
            payment_intent: req.params.payment_intent.clone(),
            amount: req.params.amount.minor_units(),
            currency: req.params.currency.as_str().to_owned(),
            operation_id: req.operation_id.to_string(),
            order_id: req.order_id.as_str().to_owned(),
            idempotency_key: req.idempotency_key.as_str().to_owned(),
            failure_reason: None,
        };
        let answer = refund.refund(&id);
        self.created.insert(id.as_str().to_owned(), now);
        self.refunds.insert(id.as_str().to_owned(), refund);
        answer
    }
}

/// The fake's refund ids (`re_fake<n>`) are valid refund ids by construction.
fn fake_refund_id(n: u64) -> StripeRefundId {
    StripeRefundId::parse(&format!("re_fake{n}")).expect("re_fake<n> is a refund id")
}

impl FakeGateway {
    /// From now on, refunds are made with this status (`pending`, say) instead of `succeeded`.
    pub fn set_refund_first_status(&self, status: RefundStatus) {
        self.lock().refund_first_status = status;
    }

    /// Applies `fault` to the next refund create (queued after earlier ones): `RateLimited`,
    /// `ServerErrorBeforeCommit` (nothing made), `LoseResponse` (made and saved, answer lost).
    pub fn script_refund(&self, fault: FakeFault) {
        self.lock().refund_script.push_back(fault);
    }

    /// Applies `fault` to the next read of a refund by id (queued after earlier ones):
    /// `RateLimited` (429), `ServerErrorBeforeCommit` (500); nothing changes at the fake.
    pub fn script_refund_read(&self, fault: FakeFault) {
        self.lock().refund_read_script.push_back(fault);
    }

    /// Changes a refund's status as Stripe does later (`pending` settling, or `succeeded` then
    /// `failed` for a closed card, with its `failure_reason`). A replay under its key still
    /// answers what was first answered; a retrieve or a list sees the change.
    pub fn set_refund_status(
        &self,
        id: &StripeRefundId,
        status: RefundStatus,
        failure_reason: Option<&str>,
    ) {
        if let Some(r) = self.lock().refunds.get_mut(id.as_str()) {
            r.status = status;
            r.failure_reason = failure_reason.map(str::to_owned);
        }
    }

    /// A refund that exists at the fake Stripe under `id`, made elsewhere (a sample event's
    /// refund, with the id the sample names).
    pub fn insert_refund_as(&self, id: &StripeRefundId, refund: FakeRefund) {
        let now = self.now();
        let mut st = self.lock();
        st.created.insert(id.as_str().to_owned(), now);
        st.refunds.insert(id.as_str().to_owned(), refund);
    }

    /// Every refund made, by id: the external side effect.
    pub fn refunds(&self) -> std::collections::BTreeMap<String, FakeRefund> {
        self.lock().refunds.clone()
    }

    pub fn refund_count(&self) -> usize {
        self.lock().refunds.len()
    }

    pub(super) fn refund_answer(&self, req: &CreateRefund) -> Result<StripeRefund, GatewayError> {
        let (mut st, now) = self.lock_now();
        let fault = st.refund_script.pop_front();
        if let Some(e) = before_the_key(&fault) {
            return Err(e);
        }
        let key = req.idempotency_key.as_str().to_owned();
        let fingerprint = fingerprint(req);
        if let Some(answer) = st.replay_refund(&key, &fingerprint) {
            return answer;
        }
        st.refuse_refund(req)?;
        let answer = st.commit_refund(req, now);
        st.refunds_saved.insert(
            key,
            SavedRefund {
                fingerprint,
                answer: answer.clone(),
            },
        );
        match fault {
            Some(FakeFault::LoseResponse) => Err(GatewayError::Ambiguous {
                detail: "connection reset".into(),
            }),
            _ => Ok(answer),
        }
    }

    pub(super) fn refund_read(&self, id: &StripeRefundId) -> Result<StripeRefund, GatewayError> {
        let mut st = self.lock();
        if let Some(e) = before_the_key(&st.refund_read_script.pop_front()) {
            return Err(e);
        }
        match st.refunds.get(id.as_str()) {
            Some(r) => Ok(r.refund(id)),
            None => Err(rejected(
                format!("404 resource_missing: No such refund: '{id}'"),
                "id",
            )),
        }
    }

    /// The intent's refunds, newest first as Stripe lists them.
    pub(super) fn refund_list(&self, pi: &PaymentIntentId) -> Vec<StripeRefund> {
        let st = self.lock();
        let mut found: Vec<(u64, StripeRefund)> = st
            .refunds
            .iter()
            .filter(|(_, r)| r.payment_intent == *pi)
            .filter_map(|(id, r)| {
                let n = id.strip_prefix("re_fake")?.parse().ok()?;
                Some((n, r.refund(&fake_refund_id(n))))
            })
            .collect();
        found.sort_by_key(|r| std::cmp::Reverse(r.0));
        found.into_iter().map(|(_, r)| r).collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::ports::{CreatePaymentIntent, PaymentIntents, StripeRefunds};
    use charge_core::refund::request::RefundReason;
    use charge_core::testing::order;

    use super::*;
    use crate::testing::refund_create;

    /// A fake with one succeeded charge of 1000 usd; its intent.
    async fn charged() -> (FakeGateway, PaymentIntentId) {
        let fake = FakeGateway::new();
        let op = order("ord-refund").amount(1000).build();
        let pi = fake
            .create(&CreatePaymentIntent::for_operation(&op).unwrap())
            .await
            .unwrap();
        (fake, pi.id)
    }

    #[tokio::test]
    async fn the_same_key_and_request_replays_the_first_refund() {
        let (fake, pi) = charged().await;
        let req = refund_create(&pi, 400);
        let first = fake.create_refund(&req).await.unwrap();
        assert_eq!(first.status, RefundStatus::Succeeded);
        assert_eq!(first.amount, Some(400));
        assert_eq!(first.operation_id, Some(req.operation_id.to_string()));
        // Its status changes later; the key still replays what was first answered.
        fake.set_refund_status(&first.id, RefundStatus::Failed, Some("lost_or_stolen_card"));
        assert_eq!(fake.create_refund(&req).await.unwrap(), first);
        assert_eq!(fake.refund_count(), 1);
        let read = fake.retrieve_refund(&first.id).await.unwrap();
        assert_eq!(read.status, RefundStatus::Failed);
        assert_eq!(read.failure_reason.as_deref(), Some("lost_or_stolen_card"));
    }

    #[tokio::test]
    async fn the_same_key_with_another_request_is_misuse_and_makes_nothing() {
        let (fake, pi) = charged().await;
        let req = refund_create(&pi, 400);
        fake.create_refund(&req).await.unwrap();
        let mut other = req.clone();
        other.params.reason = Some(RefundReason::Duplicate);
        assert!(matches!(
            fake.create_refund(&other).await,
            Err(GatewayError::KeyMisuse { .. })
        ));
        // A charge's key is no refund's either.
        let mut charge_key = refund_create(&pi, 100);
        charge_key.idempotency_key = charge_key.operation_id.idempotency_key();
        let charge_op = order("ord-other").amount(50).build();
        let mut create = CreatePaymentIntent::for_operation(&charge_op).unwrap();
        create.idempotency_key = charge_key.idempotency_key.clone();
        fake.create(&create).await.unwrap();
        assert!(matches!(
            fake.create_refund(&charge_key).await,
            Err(GatewayError::KeyMisuse { .. })
        ));
        assert_eq!(fake.refund_count(), 1);
        // Its twin under a key of its own is made.
        fake.create_refund(&refund_create(&pi, 100)).await.unwrap();
        assert_eq!(fake.refund_count(), 2);
    }

    #[tokio::test]
    async fn more_than_is_left_is_refused_and_not_saved() {
        let (fake, pi) = charged().await;
        fake.create_refund(&refund_create(&pi, 700)).await.unwrap();
        let over = refund_create(&pi, 301);
        let err = fake.create_refund(&over).await.unwrap_err();
        assert!(
            matches!(&err, GatewayError::Rejected { detail, param: Some(p) }
                if detail.contains("amount_too_large") && p == "amount"),
            "{err:?}"
        );
        assert_eq!(fake.refund_count(), 1);
        // The twin that fits is made; then nothing is left.
        fake.create_refund(&refund_create(&pi, 300)).await.unwrap();
        let err = fake
            .create_refund(&refund_create(&pi, 1))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, GatewayError::Rejected { detail, .. } if detail.contains("charge_already_refunded")),
            "{err:?}"
        );
        assert_eq!(fake.refund_count(), 2);
    }

    #[tokio::test]
    async fn a_failed_refund_gives_its_amount_back() {
        let (fake, pi) = charged().await;
        let first = fake.create_refund(&refund_create(&pi, 1000)).await.unwrap();
        let again = refund_create(&pi, 1000);
        assert!(fake.create_refund(&again).await.is_err());
        fake.set_refund_status(
            &first.id,
            RefundStatus::Failed,
            Some("expired_or_canceled_card"),
        );
        assert_eq!(
            fake.create_refund(&again).await.unwrap().status,
            RefundStatus::Succeeded
        );
    }

    #[tokio::test]
    async fn refunds_of_an_unknown_or_unpaid_intent_are_refused() {
        let fake = FakeGateway::new();
        let unknown = PaymentIntentId::parse("pi_nothing").unwrap();
        assert!(matches!(
            fake.create_refund(&refund_create(&unknown, 10)).await,
            Err(GatewayError::Rejected { param: Some(ref p), .. }) if p == "payment_intent"
        ));
        fake.set_first_status(PaymentIntentStatus::Processing);
        let op = order("ord-slow").amount(1000).build();
        let pi = fake
            .create(&CreatePaymentIntent::for_operation(&op).unwrap())
            .await
            .unwrap();
        assert!(matches!(
            fake.create_refund(&refund_create(&pi.id, 10)).await,
            Err(GatewayError::UnexpectedState { .. })
        ));
        assert_eq!(fake.refund_count(), 0);
    }

    #[tokio::test]
    async fn scripted_status_faults_and_the_list() {
        let (fake, pi) = charged().await;
        fake.set_refund_first_status(RefundStatus::Pending);
        let a = fake.create_refund(&refund_create(&pi, 100)).await.unwrap();
        assert_eq!(a.status, RefundStatus::Pending);
        // A lost answer: made and saved; the same key answers it.
        fake.script_refund(FakeFault::LoseResponse);
        let req = refund_create(&pi, 200);
        assert!(matches!(
            fake.create_refund(&req).await,
            Err(GatewayError::Ambiguous { .. })
        ));
        assert_eq!(fake.refund_count(), 2);
        let b = fake.create_refund(&req).await.unwrap();
        // Rate limited: nothing made.
        fake.script_refund(FakeFault::RateLimited);
        assert!(matches!(
            fake.create_refund(&refund_create(&pi, 1)).await,
            Err(GatewayError::RetryLater { .. })
        ));
        assert_eq!(fake.refund_count(), 2);
        fake.set_refund_status(&a.id, RefundStatus::Succeeded, None);
        let listed = fake.list_refunds(&pi).await.unwrap();
        let ids: Vec<_> = listed.iter().map(|r| r.id.clone()).collect();
        assert_eq!(ids, vec![b.id, a.id], "newest first");
        assert_eq!(listed[1].status, RefundStatus::Succeeded);
        let other = PaymentIntentId::parse("pi_other").unwrap();
        assert!(fake.list_refunds(&other).await.unwrap().is_empty());
    }
}
