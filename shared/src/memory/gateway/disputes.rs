//! The fake's disputes: Stripe opens one on a charge when the customer's bank asks, never the
//! merchant, so a test puts one on an intent ([`FakeGateway::open_dispute`]) and moves it through
//! Stripe's statuses ([`FakeGateway::move_dispute`]); the engine only reads them (retrieve, list
//! by intent). A refund of a charge whose open dispute Stripe holds not refundable is refused as
//! Stripe refuses it (400 `charge_disputed`).

use std::sync::atomic::Ordering;

use async_trait::async_trait;
use charge_core::dispute::{DisputeStatus, StripeDispute};
use charge_core::domain::{DisputeId, PaymentIntentId, StripeChargeId};
use charge_core::outcome::GatewayError;
use charge_core::time::Timestamp;

use super::{FakeGateway, State};
use crate::ports::StripeDisputes;

impl FakeGateway {
    /// Opens dispute `id` on the charge of intent `pi` as Stripe would: the intent's whole amount
    /// and currency, `fraudulent`, in `status` (funds withdrawn unless an inquiry), evidence due
    /// by `due_by`, created now on the fake's clock. Panics if the fake holds no such intent
    /// (a test's own mistake).
    pub fn open_dispute(
        &self,
        id: &str,
        pi: &PaymentIntentId,
        status: DisputeStatus,
        due_by: Option<Timestamp>,
    ) -> StripeDispute {
        let now = self.now();
        let mut st = self.lock();
        let charge = st
            .charges
            .get(pi.as_str())
            .unwrap_or_else(|| panic!("the fake holds no intent {pi}"));
        let inquiry = status.is_inquiry();
        let dispute = StripeDispute {
            id: DisputeId::parse(id).expect("a dispute id"),
            charge: StripeChargeId::parse(&format!("ch_{}", &pi.as_str()[3..]))
                .expect("a charge id"),
            payment_intent: Some(pi.clone()),
            amount: charge.amount_received.unwrap_or(charge.amount),
            currency: charge.currency.clone(),
            reason: "fraudulent".into(),
            is_charge_refundable: inquiry,
            balance_transactions: u32::from(!inquiry),
            status,
            due_by,
            has_evidence: false,
            livemode: charge.livemode,
            created: now,
        };
        st.created.insert(id.to_owned(), now);
        st.disputes.insert(id.to_owned(), dispute.clone());
        dispute
    }

    /// Moves dispute `id` as Stripe does: to `status` (a closed one has no deadline left; `won`
    /// reinstates the funds; an inquiry escalated withdraws them).
    pub fn move_dispute(&self, id: &str, status: DisputeStatus) -> StripeDispute {
        let mut st = self.lock();
        let dispute = st
            .disputes
            .get_mut(id)
            .unwrap_or_else(|| panic!("the fake holds no dispute {id}"));
        if status.is_closed() || status == DisputeStatus::UnderReview {
            dispute.due_by = None;
        }
        dispute.has_evidence |= status == DisputeStatus::UnderReview;
        dispute.is_charge_refundable = status.is_inquiry() && !status.is_closed();
        if !status.is_inquiry() && dispute.balance_transactions == 0 {
            dispute.balance_transactions = 1;
        }
        if status == DisputeStatus::Won {
            dispute.balance_transactions = 2;
        }
        dispute.status = status;
        dispute.clone()
    }

    /// Every dispute the fake holds, by id.
    pub fn disputes(&self) -> std::collections::BTreeMap<String, StripeDispute> {
        self.lock().disputes.clone()
    }
}

impl State {
    /// Stripe's refusal of a refund while the charge's dispute does not let it be refunded.
    pub(super) fn refuse_disputed(&self, pi: &PaymentIntentId) -> Result<(), GatewayError> {
        let blocked = self.disputes.values().any(|d| {
            d.payment_intent.as_ref() == Some(pi)
                && !d.is_charge_refundable
                && d.status != DisputeStatus::Won
        });
        if blocked {
            return Err(GatewayError::ChargeDisputed {
                detail: format!(
                    "400 invalid_request_error/charge_disputed: the charge of {pi} has been \
                     charged back"
                ),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl StripeDisputes for FakeGateway {
    async fn retrieve_dispute(&self, id: &DisputeId) -> Result<StripeDispute, GatewayError> {
        self.calls.dispute_read.fetch_add(1, Ordering::SeqCst);
        self.lock()
            .disputes
            .get(id.as_str())
            .cloned()
            .ok_or_else(|| GatewayError::Rejected {
                detail: format!("404 resource_missing: No such dispute: '{id}'"),
                param: Some("dispute".into()),
            })
    }

    async fn list_disputes(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<StripeDispute>, GatewayError> {
        self.calls.dispute_read.fetch_add(1, Ordering::SeqCst);
        let mut found: Vec<StripeDispute> = self
            .lock()
            .disputes
            .values()
            .filter(|d| d.payment_intent.as_ref() == Some(payment_intent))
            .cloned()
            .collect();
        found.sort_by_key(|d| std::cmp::Reverse(d.created));
        Ok(found)
    }
}
