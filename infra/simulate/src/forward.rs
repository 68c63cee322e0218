//! A wrapper of a store or a gateway (a fault, a count, a mutation) implements the capabilities it
//! changes; these macros write the others, each call handed to the wrapped one as it is.

/// Implements the named [`OperationStore`](charge_once::ports::OperationStore) capabilities for a
/// wrapper by handing every call to its field, unchanged:
/// `forward_store!(PageWatch, inner: OperationReads, OperationCreates, UnknownIndex);`.
/// `UnknownIndex` forwards `count_in_review` too (the wrapped store's count); a capability left
/// out is the wrapper's to implement.
#[macro_export]
macro_rules! forward_store {
    ($ty:ty, $field:tt: $($cap:ident),+ $(,)?) => {
        $($crate::forward_store!(@$cap $ty, $field);)+
    };
    (@OperationReads $ty:ty, $f:tt) => {
        #[::async_trait::async_trait]
        impl ::charge_once::ports::OperationReads for $ty {
            async fn get(
                &self,
                key: &::charge_core::operation::OperationKey,
            ) -> Result<Option<::charge_core::operation::Operation>, ::charge_once::ports::StoreError> {
                ::charge_once::ports::OperationReads::get(&*self.$f, key).await
            }
            async fn refunds_of(
                &self,
                order_id: &::charge_core::domain::OrderId,
            ) -> Result<Vec<::charge_core::operation::Operation>, ::charge_once::ports::StoreError> {
                ::charge_once::ports::OperationReads::refunds_of(&*self.$f, order_id).await
            }
        }
    };
    (@OperationCreates $ty:ty, $f:tt) => {
        #[::async_trait::async_trait]
        impl ::charge_once::ports::OperationCreates for $ty {
            async fn create_if_absent(
                &self,
                op: &::charge_core::operation::Operation,
            ) -> Result<::charge_core::store::Created, ::charge_once::ports::StoreError> {
                ::charge_once::ports::OperationCreates::create_if_absent(&*self.$f, op).await
            }
            async fn create_beside(
                &self,
                op: &::charge_core::operation::Operation,
                claim: ::charge_core::store_rules::ChargeClaim<'_>,
            ) -> Result<::charge_core::store_rules::CreatedBeside, ::charge_once::ports::StoreError> {
                ::charge_once::ports::OperationCreates::create_beside(&*self.$f, op, claim).await
            }
        }
    };
    (@OperationLeases $ty:ty, $f:tt) => {
        #[::async_trait::async_trait]
        impl ::charge_once::ports::OperationLeases for $ty {
            async fn claim(
                &self,
                req: &::charge_core::store::ClaimRequest,
            ) -> Result<::charge_core::store::Claim, ::charge_once::ports::StoreError> {
                ::charge_once::ports::OperationLeases::claim(&*self.$f, req).await
            }
            async fn record(
                &self,
                rec: &::charge_core::store::OutcomeRecord,
            ) -> Result<::charge_core::store::Recorded, ::charge_once::ports::StoreError> {
                ::charge_once::ports::OperationLeases::record(&*self.$f, rec).await
            }
            async fn fail_refund_later(
                &self,
                req: &::charge_core::store::RefundFailedLater,
            ) -> Result<::charge_core::store::Recorded, ::charge_once::ports::StoreError> {
                ::charge_once::ports::OperationLeases::fail_refund_later(&*self.$f, req).await
            }
        }
    };
    (@UnknownIndex $ty:ty, $f:tt) => {
        #[::async_trait::async_trait]
        impl ::charge_once::ports::UnknownIndex for $ty {
            async fn query_index(
                &self,
                query: ::charge_once::ports::IndexQuery,
                cursor: Option<String>,
                limit: usize,
            ) -> Result<::charge_once::ports::Page, ::charge_once::ports::StoreError> {
                ::charge_once::ports::UnknownIndex::query_index(&*self.$f, query, cursor, limit).await
            }
            async fn reschedule(
                &self,
                req: &::charge_core::store::Reschedule,
            ) -> Result<::charge_core::store::Recorded, ::charge_once::ports::StoreError> {
                ::charge_once::ports::UnknownIndex::reschedule(&*self.$f, req).await
            }
            async fn count_in_review(
                &self,
                cursor: Option<String>,
                limit: usize,
            ) -> Result<::charge_once::ports::ReviewCount, ::charge_once::ports::StoreError> {
                ::charge_once::ports::UnknownIndex::count_in_review(&*self.$f, cursor, limit).await
            }
        }
    };
    (@ManualResolutions $ty:ty, $f:tt) => {
        #[::async_trait::async_trait]
        impl ::charge_once::ports::ManualResolutions for $ty {
            async fn get_by_operation_id(
                &self,
                operation_id: &::charge_core::domain::OperationId,
            ) -> Result<Option<::charge_core::operation::Operation>, ::charge_once::ports::StoreError> {
                ::charge_once::ports::ManualResolutions::get_by_operation_id(&*self.$f, operation_id).await
            }
            async fn resolve(
                &self,
                req: &::charge_core::store::ManualResolution,
            ) -> Result<::charge_core::store::Recorded, ::charge_once::ports::StoreError> {
                ::charge_once::ports::ManualResolutions::resolve(&*self.$f, req).await
            }
        }
    };
    (@SettledRecords $ty:ty, $f:tt) => {
        #[::async_trait::async_trait]
        impl ::charge_once::ports::SettledRecords for $ty {
            async fn settled_between(
                &self,
                window: &::charge_core::audit::AuditWindow,
                cursor: Option<String>,
                limit: usize,
            ) -> Result<::charge_once::ports::Page, ::charge_once::ports::StoreError> {
                ::charge_once::ports::SettledRecords::settled_between(&*self.$f, window, cursor, limit)
                    .await
            }
        }
    };
}

/// Implements the named [`PaymentGateway`](charge_once::ports::PaymentGateway) capabilities for a
/// wrapper by handing every call to its field, unchanged:
/// `forward_gateway!(CountingTakes, inner: StripeAccount, StripeRefunds);`. A capability left out
/// is the wrapper's to implement.
#[macro_export]
macro_rules! forward_gateway {
    ($ty:ty, $field:tt: $($cap:ident),+ $(,)?) => {
        $($crate::forward_gateway!(@$cap $ty, $field);)+
    };
    (@StripeAccount $ty:ty, $f:tt) => {
        impl ::charge_once::ports::StripeAccount for $ty {
            fn livemode(&self) -> bool {
                ::charge_once::ports::StripeAccount::livemode(&*self.$f)
            }
            fn requests(&self) -> Option<&::charge_once::ports::StripeRequests> {
                ::charge_once::ports::StripeAccount::requests(&*self.$f)
            }
        }
    };
    (@PaymentIntents $ty:ty, $f:tt) => {
        #[::async_trait::async_trait]
        impl ::charge_once::ports::PaymentIntents for $ty {
            async fn create(
                &self,
                req: &::charge_once::ports::CreatePaymentIntent,
            ) -> Result<::charge_core::outcome::PaymentIntent, ::charge_core::outcome::GatewayError>
            {
                ::charge_once::ports::PaymentIntents::create(&*self.$f, req).await
            }
            async fn retrieve(
                &self,
                id: &::charge_core::domain::PaymentIntentId,
            ) -> Result<::charge_core::outcome::PaymentIntent, ::charge_core::outcome::GatewayError>
            {
                ::charge_once::ports::PaymentIntents::retrieve(&*self.$f, id).await
            }
            async fn search_by_operation(
                &self,
                operation_id: &::charge_core::domain::OperationId,
            ) -> Result<
                Vec<::charge_core::outcome::PaymentIntent>,
                ::charge_core::outcome::GatewayError,
            > {
                ::charge_once::ports::PaymentIntents::search_by_operation(&*self.$f, operation_id).await
            }
            async fn cancel(
                &self,
                req: &::charge_once::ports::CancelPaymentIntent,
            ) -> Result<::charge_core::outcome::PaymentIntent, ::charge_core::outcome::GatewayError>
            {
                ::charge_once::ports::PaymentIntents::cancel(&*self.$f, req).await
            }
            async fn capture(
                &self,
                req: &::charge_once::ports::CapturePaymentIntent,
            ) -> Result<::charge_core::outcome::PaymentIntent, ::charge_core::outcome::GatewayError>
            {
                ::charge_once::ports::PaymentIntents::capture(&*self.$f, req).await
            }
        }
    };
    (@StripeRefunds $ty:ty, $f:tt) => {
        #[::async_trait::async_trait]
        impl ::charge_once::ports::StripeRefunds for $ty {
            async fn create_refund(
                &self,
                req: &::charge_once::ports::CreateRefund,
            ) -> Result<::charge_core::refund::StripeRefund, ::charge_core::outcome::GatewayError>
            {
                ::charge_once::ports::StripeRefunds::create_refund(&*self.$f, req).await
            }
            async fn retrieve_refund(
                &self,
                id: &::charge_core::domain::StripeRefundId,
            ) -> Result<::charge_core::refund::StripeRefund, ::charge_core::outcome::GatewayError>
            {
                ::charge_once::ports::StripeRefunds::retrieve_refund(&*self.$f, id).await
            }
            async fn list_refunds(
                &self,
                payment_intent: &::charge_core::domain::PaymentIntentId,
            ) -> Result<
                Vec<::charge_core::refund::StripeRefund>,
                ::charge_core::outcome::GatewayError,
            > {
                ::charge_once::ports::StripeRefunds::list_refunds(&*self.$f, payment_intent).await
            }
        }
    };
    (@CreatedLists $ty:ty, $f:tt) => {
        #[::async_trait::async_trait]
        impl ::charge_once::ports::CreatedLists for $ty {
            async fn list_intents_created(
                &self,
                window: &::charge_core::audit::AuditWindow,
                starting_after: Option<&str>,
            ) -> Result<
                ::charge_once::ports::ListPage<::charge_core::outcome::PaymentIntent>,
                ::charge_core::outcome::GatewayError,
            > {
                ::charge_once::ports::CreatedLists::list_intents_created(&*self.$f, window, starting_after)
                    .await
            }
            async fn list_refunds_created(
                &self,
                window: &::charge_core::audit::AuditWindow,
                starting_after: Option<&str>,
            ) -> Result<
                ::charge_once::ports::ListPage<::charge_core::refund::StripeRefund>,
                ::charge_core::outcome::GatewayError,
            > {
                ::charge_once::ports::CreatedLists::list_refunds_created(&*self.$f, window, starting_after)
                    .await
            }
        }
    };
}
