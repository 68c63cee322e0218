//! What the judge of authorizations needs to have seen while the run went on: which orders were
//! paged before their deadline, and what the capture and cancel calls cost at Stripe.
//!
//! The page: the charge function and the reconciler page (`AuthorizationNearDeadline`) for an
//! execution whose report says `deadline_near`, which is the write of an `authorized` charge
//! looked at from the page's moment on — the one write that schedules the next look past the
//! deadline (the next look before the page's moment is the page's moment itself). [`PageWatch`]
//! sits on the store those functions write through and notes, per order, the first such write
//! and its time; the metric's sums are counted beside it ([`crate::driver::LoopCounts`]).

use charge_core::domain::{OperationId, OperationKind, OrderId, PaymentIntentId};
use charge_core::operation::{Operation, OperationKey, OperationStatus};
use charge_core::outcome::{GatewayError, PaymentIntent};
use charge_core::refund::StripeRefund;
use charge_core::time::Timestamp;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use charge_core::domain::StripeRefundId;
use charge_core::{
    store::{
        Claim, ClaimRequest, Created, ManualResolution, OutcomeRecord, Recorded, RefundFailedLater,
        Reschedule,
    },
    store_rules::{ChargeClaim, CreatedBeside},
};
use charge_once::ports::{
    CancelPaymentIntent, CapturePaymentIntent, CreatePaymentIntent, CreateRefund, IndexQuery,
    OperationStore, Page, PaymentGateway, ReviewCount, StoreError,
};

/// The first page of each order's authorization (virtual ms), as written.
#[derive(Debug, Default)]
pub struct Pages {
    first: Mutex<HashMap<String, i64>>,
    /// Page writes in all (an authorization may be paged more than once).
    pub writes: AtomicU64,
}

impl Pages {
    /// When `order_id` was first paged, if it was.
    pub fn first(&self, order_id: &str) -> Option<i64> {
        self.first
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(order_id)
            .copied()
    }

    /// Orders paged at least once.
    pub fn orders(&self) -> u64 {
        self.first.lock().unwrap_or_else(|p| p.into_inner()).len() as u64
    }

    fn note(&self, op: &Operation, at: Timestamp) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.first
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(op.order_id.as_str().to_owned())
            .or_insert(at.as_millis());
    }
}

/// Whether `op`, as written, is an authorization looked at once its deadline was near: due
/// again only after its deadline.
pub fn paged(op: &Operation) -> bool {
    op.kind == OperationKind::Charge
        && op.status == OperationStatus::Authorized
        && op
            .capture_before()
            .is_some_and(|deadline| op.next_due_at.is_some_and(|due| due > deadline))
}

/// The store as the charge function, the reconciler and the events function write through,
/// noting each page ([`paged`]) as it is written.
pub struct PageWatch {
    pub inner: Arc<dyn OperationStore>,
    pub pages: Arc<Pages>,
}

#[async_trait]
impl OperationStore for PageWatch {
    async fn create_if_absent(&self, op: &Operation) -> Result<Created, StoreError> {
        self.inner.create_if_absent(op).await
    }
    async fn create_beside(
        &self,
        op: &Operation,
        claim: ChargeClaim<'_>,
    ) -> Result<CreatedBeside, StoreError> {
        self.inner.create_beside(op, claim).await
    }
    async fn refunds_of(&self, order_id: &OrderId) -> Result<Vec<Operation>, StoreError> {
        self.inner.refunds_of(order_id).await
    }
    async fn get(&self, key: &OperationKey) -> Result<Option<Operation>, StoreError> {
        self.inner.get(key).await
    }
    async fn get_by_operation_id(
        &self,
        operation_id: &OperationId,
    ) -> Result<Option<Operation>, StoreError> {
        self.inner.get_by_operation_id(operation_id).await
    }
    async fn claim(&self, req: &ClaimRequest) -> Result<Claim, StoreError> {
        self.inner.claim(req).await
    }
    async fn record(&self, rec: &OutcomeRecord) -> Result<Recorded, StoreError> {
        let recorded = self.inner.record(rec).await?;
        if let Recorded::Written(op) = &recorded {
            if paged(op) {
                self.pages.note(op, rec.now);
            }
        }
        Ok(recorded)
    }
    async fn fail_refund_later(&self, req: &RefundFailedLater) -> Result<Recorded, StoreError> {
        self.inner.fail_refund_later(req).await
    }
    async fn reschedule(&self, req: &Reschedule) -> Result<Recorded, StoreError> {
        self.inner.reschedule(req).await
    }
    async fn resolve(&self, req: &ManualResolution) -> Result<Recorded, StoreError> {
        self.inner.resolve(req).await
    }
    async fn query_index(
        &self,
        query: IndexQuery,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.inner.query_index(query, cursor, limit).await
    }
    async fn count_in_review(
        &self,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<ReviewCount, StoreError> {
        self.inner.count_in_review(cursor, limit).await
    }
}

/// The capture and cancel calls the functions made (whatever they met), counted.
#[derive(Debug, Default)]
pub struct TakeCalls {
    pub captures: AtomicU64,
    /// Cancels of a merchant's cancel operation (not of a declined intent).
    pub cancels: AtomicU64,
}

/// Stripe as the functions see it, counting their capture and cancel calls.
pub struct CountingTakes {
    pub inner: Arc<dyn PaymentGateway>,
    pub calls: Arc<TakeCalls>,
}

#[async_trait]
impl PaymentGateway for CountingTakes {
    fn livemode(&self) -> bool {
        self.inner.livemode()
    }
    fn requests(&self) -> Option<&charge_once::ports::StripeRequests> {
        self.inner.requests()
    }
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.inner.create(req).await
    }
    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError> {
        self.inner.retrieve(id).await
    }
    async fn search_by_operation(
        &self,
        operation_id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        self.inner.search_by_operation(operation_id).await
    }
    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        if req.idempotency_key.as_str().starts_with("cancel-op:") {
            self.calls.cancels.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.cancel(req).await
    }
    async fn capture(&self, req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.calls.captures.fetch_add(1, Ordering::Relaxed);
        self.inner.capture(req).await
    }
    async fn create_refund(&self, req: &CreateRefund) -> Result<StripeRefund, GatewayError> {
        self.inner.create_refund(req).await
    }
    async fn retrieve_refund(&self, id: &StripeRefundId) -> Result<StripeRefund, GatewayError> {
        self.inner.retrieve_refund(id).await
    }
    async fn list_refunds(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<StripeRefund>, GatewayError> {
        self.inner.list_refunds(payment_intent).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use charge_core::testing::{order, T0};

    use super::*;

    /// A page is an authorized charge due again past its deadline; one due at the page's moment
    /// (before the deadline), one without a deadline, and any other status are not.
    #[test]
    fn a_page_is_an_authorization_due_again_past_its_deadline() {
        let deadline = T0.plus(Duration::from_secs(100 * 3600));
        let held = |due: Timestamp| {
            let mut op = Operation {
                next_due_at: Some(due),
                ..order("ord-page")
                    .manual()
                    .status(OperationStatus::Authorized)
                    .build()
            };
            op.params.charge_state_mut().unwrap().capture_before = Some(deadline);
            op
        };
        assert!(paged(&held(deadline.plus(Duration::from_secs(60)))));
        assert!(!paged(&held(
            deadline.minus(Duration::from_secs(12 * 3600))
        )));
        let mut no_deadline = held(deadline.plus(Duration::from_secs(60)));
        no_deadline
            .params
            .charge_state_mut()
            .unwrap()
            .capture_before = None;
        assert!(!paged(&no_deadline));
        let unknown = Operation {
            status: OperationStatus::Unknown,
            ..held(deadline.plus(Duration::from_secs(60)))
        };
        assert!(!paged(&unknown));
    }
}
