//! A wrapper of a store or a gateway (a fault, a count, a mutation) implements the capabilities it
//! changes; these macros write the others, each call handed to the wrapped one as it is.

/// Implements the named [`OperationStore`](charge_once::ports::OperationStore) capabilities for a
/// wrapper by handing every call to its field, unchanged:
/// `forward_store!(PageWatch, inner: OperationReads, UnknownIndex);`. `UnknownIndex` forwards
/// `count_in_review` too (the wrapped store's count); a capability left out is the wrapper's to
/// implement.
#[macro_export]
macro_rules! forward_store {
    ($ty:ty, $field:tt: $($cap:ident),+ $(,)?) => {
        $($crate::forward_store!(@$cap $ty, $field);)+
    };
    (@OperationReads $ty:ty, $f:tt) => { $crate::forward!($ty, $f, OperationReads {
        get(key: &OperationKey) -> Result<Option<Operation>, StoreError>;
        refunds_of(order_id: &OrderId) -> Result<Vec<Operation>, StoreError>;
    }); };
    (@OperationCreates $ty:ty, $f:tt) => { $crate::forward!($ty, $f, OperationCreates {
        create_if_absent(op: &Operation) -> Result<Created, StoreError>;
        create_beside(op: &Operation, claim: ChargeClaim<'_>) -> Result<CreatedBeside, StoreError>;
        record_dispute(req: &DisputeMove) -> Result<DisputeRecorded, StoreError>;
        create_attempt(req: &NewAttempt) -> Result<CreatedAttempt, StoreError>;
    }); };
    (@OperationLeases $ty:ty, $f:tt) => { $crate::forward!($ty, $f, OperationLeases {
        claim(req: &ClaimRequest) -> Result<Claim, StoreError>;
        record(rec: &OutcomeRecord) -> Result<Recorded, StoreError>;
        fail_refund_later(req: &RefundFailedLater) -> Result<Recorded, StoreError>;
    }); };
    (@UnknownIndex $ty:ty, $f:tt) => { $crate::forward!($ty, $f, UnknownIndex {
        query_index(q: IndexQuery, cursor: Option<String>, limit: usize)
            -> Result<Page, StoreError>;
        reschedule(req: &Reschedule) -> Result<Recorded, StoreError>;
        count_in_review(cursor: Option<String>, limit: usize) -> Result<ReviewCount, StoreError>;
    }); };
    (@ManualResolutions $ty:ty, $f:tt) => { $crate::forward!($ty, $f, ManualResolutions {
        get_by_operation_id(id: &OperationId) -> Result<Option<Operation>, StoreError>;
        resolve(req: &ManualResolution) -> Result<Recorded, StoreError>;
    }); };
    (@SettledRecords $ty:ty, $f:tt) => { $crate::forward!($ty, $f, SettledRecords {
        settled_between(w: &AuditWindow, cursor: Option<String>, limit: usize)
            -> Result<Page, StoreError>;
        settled_refunds_between(w: &AuditWindow, cursor: Option<String>, limit: usize)
            -> Result<Page, StoreError>;
    }); };
}

/// Implements the named [`PaymentGateway`](charge_once::ports::PaymentGateway) capabilities for a
/// wrapper by handing every call to its field, unchanged:
/// `forward_gateway!(CountingTakes, inner: StripeAccount, StripeRefunds, StripeDisputes);`. A capability left out
/// is the wrapper's to implement.
#[macro_export]
macro_rules! forward_gateway {
    ($ty:ty, $field:tt: $($cap:ident),+ $(,)?) => {
        $($crate::forward_gateway!(@$cap $ty, $field);)+
    };
    (@StripeAccount $ty:ty, $f:tt) => {
        impl ::charge_once::ports::StripeAccount for $ty {
            fn livemode(&self) -> bool {
                self.$f.livemode()
            }
            fn requests(&self) -> Option<&::charge_once::ports::StripeRequests> {
                self.$f.requests()
            }
        }
    };
    (@PaymentIntents $ty:ty, $f:tt) => { $crate::forward!($ty, $f, PaymentIntents {
        create(req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError>;
        retrieve(id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError>;
        search_by_operation(id: &OperationId) -> Result<Vec<PaymentIntent>, GatewayError>;
        cancel(req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError>;
        capture(req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError>;
    }); };
    (@StripeRefunds $ty:ty, $f:tt) => { $crate::forward!($ty, $f, StripeRefunds {
        create_refund(req: &CreateRefund) -> Result<StripeRefund, GatewayError>;
        retrieve_refund(id: &StripeRefundId) -> Result<StripeRefund, GatewayError>;
        list_refunds(pi: &PaymentIntentId) -> Result<Vec<StripeRefund>, GatewayError>;
    }); };
    (@StripeDisputes $ty:ty, $f:tt) => { $crate::forward!($ty, $f, StripeDisputes {
        retrieve_dispute(id: &DisputeId) -> Result<StripeDispute, GatewayError>;
        list_disputes(pi: &PaymentIntentId) -> Result<Vec<StripeDispute>, GatewayError>;
    }); };
    (@CreatedLists $ty:ty, $f:tt) => { $crate::forward!($ty, $f, CreatedLists {
        list_intents_created(w: &AuditWindow, after: Option<&str>)
            -> Result<ListPage<PaymentIntent>, GatewayError>;
        list_refunds_created(w: &AuditWindow, after: Option<&str>)
            -> Result<ListPage<StripeRefund>, GatewayError>;
        list_disputes_created(w: &AuditWindow, after: Option<&str>)
            -> Result<ListPage<StripeDispute>, GatewayError>;
    }); };
}

/// One capability's impl for `$ty`: each method calls the same method of `self.$f`. The types
/// are named as the ports and the rules name them, in a block of their own.
#[doc(hidden)]
#[macro_export]
macro_rules! forward {
    ($ty:ty, $f:tt, $cap:ident { $($m:ident($($a:ident: $t:ty),*) -> $r:ty;)+ }) => {
        // Each capability names a few of these types; the block imports them all.
        #[allow(unused_imports)]
        const _: () = {
            use ::charge_core::audit::AuditWindow;
            use ::charge_core::dispute::StripeDispute;
            use ::charge_core::domain::{
                DisputeId, OperationId, OrderId, PaymentIntentId, StripeRefundId,
            };
            use ::charge_core::operation::{Operation, OperationKey};
            use ::charge_core::outcome::{GatewayError, PaymentIntent};
            use ::charge_core::refund::StripeRefund;
            use ::charge_core::store::{
                Claim, ClaimRequest, Created, CreatedAttempt, DisputeMove, DisputeRecorded,
                ManualResolution, NewAttempt, OutcomeRecord, Recorded, RefundFailedLater,
                Reschedule,
            };
            use ::charge_core::store_rules::{ChargeClaim, CreatedBeside};
            use ::charge_once::ports::*;

            #[::async_trait::async_trait]
            impl $cap for $ty {
                $(async fn $m(&self, $($a: $t),*) -> $r {
                    $cap::$m(&*self.$f, $($a),*).await
                })+
            }
        };
    };
}
