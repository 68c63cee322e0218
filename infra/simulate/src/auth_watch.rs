//! What the judge of authorizations needs to have seen while the run went on: which orders were
//! paged before their deadline, and what the capture and cancel calls cost at Stripe.
//!
//! The page: the charge function and the reconciler page (`AuthorizationNearDeadline`) for an
//! execution whose report says `deadline_near`, which is the write of an `authorized` charge
//! looked at from the page's moment on — the one write that schedules the next look past the
//! deadline (the next look before the page's moment is the page's moment itself). [`PageWatch`]
//! sits on the store those functions write through and notes, per order, the first such write
//! and its time; the metric's sums are counted beside it ([`crate::driver::LoopCounts`]).

use charge_core::domain::{OperationId, PaymentIntentId};
use charge_core::operation::{Operation, OperationStatus};
use charge_core::outcome::{GatewayError, PaymentIntent};
use charge_core::time::Timestamp;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use charge_core::store::{Claim, ClaimRequest, OutcomeRecord, Recorded, RefundFailedLater};
use charge_once::ports::{
    CancelPaymentIntent, CapturePaymentIntent, CreatePaymentIntent, CreatedLists, OperationLeases,
    OperationStore, PaymentGateway, PaymentIntents, StoreError,
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
    op.kind.is_charge()
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

crate::forward_store!(
    PageWatch, inner:
    OperationReads,
    OperationCreates,
    UnknownIndex,
    ManualResolutions,
);

#[async_trait]
impl OperationLeases for PageWatch {
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
}

crate::forward_store!(PageWatch, inner: SettledRecords);

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

crate::forward_gateway!(CountingTakes, inner: StripeAccount, StripeRefunds, StripeDisputes);

#[async_trait]
impl PaymentIntents for CountingTakes {
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
}

/// The dispute watch's list passes through (the other lists are the audit's, not asked here).
#[async_trait]
impl CreatedLists for CountingTakes {
    async fn list_disputes_created(
        &self,
        window: &charge_core::audit::AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<
        charge_once::ports::ListPage<charge_core::dispute::StripeDispute>,
        charge_core::outcome::GatewayError,
    > {
        self.inner
            .list_disputes_created(window, starting_after)
            .await
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
