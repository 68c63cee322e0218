//! Test fixtures, one copy for every test in the workspace: a valid order, its [`ChargeParams`]
//! and [`Operation`] ([`order`], [`charge_params`]), and the claim and outcome writes that put an
//! operation in a given state ([`claim_request`], [`outcome`]; the shell's `charge_once::testing`
//! adds the helpers that send them to a store).
//!
//! For tests only. Compiled for this crate's own unit tests, and elsewhere behind the `testing`
//! feature, which test code asks for from its `[dev-dependencies]`
//! (`charge-core = { workspace = true, features = ["testing"] }`; the integration tests' `testkit`
//! from its own dependencies). A Lambda's build never has it.
//!
//! Defaults are the values most tests had written out: 1250 (12.50) `usd`, customer `cus_1`,
//! `pm_card_visa`, requested by `jwt:order-service`, created at [`T0`] with [`GRACE`]. A test that
//! asserts on one of them (or needs another) says it with the builder.

use std::time::Duration;

use crate::domain::{
    Amount, ChargeParams, Currency, CustomerId, OperationId, OrderId, PaymentIntentId,
    PaymentMethodId, Principal,
};
use crate::operation::{Lease, LeaseToken, Operation, OperationStatus};
use crate::store::{ClaimRequest, OutcomeRecord};
use crate::time::Timestamp;

/// The fixtures' "now": far from the epoch, so subtracting hours never underflows.
pub const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);
/// The pending grace of a fixture operation (the charge policy's default).
pub const GRACE: Duration = Duration::from_secs(300);
/// How long a fixture claim's lease lasts.
pub const LEASE: Duration = Duration::from_secs(60);

/// The valid charge every fixture starts from: 1250 `usd`, `cus_1`, `pm_card_visa`.
pub fn charge_params() -> ChargeParams {
    ChargeParams {
        amount: Amount::new(1250).expect("valid amount"),
        currency: Currency::parse("usd").expect("valid currency"),
        customer_id: CustomerId::parse("cus_1").expect("valid customer id"),
        payment_method: PaymentMethodId::parse("pm_card_visa").expect("valid payment method"),
        capture_method: Default::default(),
    }
}

/// A builder for the operation of order `order_id`; [`OrderBuilder::build`] makes it.
pub fn order(order_id: &str) -> OrderBuilder {
    OrderBuilder {
        order_id: OrderId::parse(order_id).expect("valid order id"),
        params: charge_params(),
        requested_by: "order-service".to_owned(),
        at: T0,
        grace: GRACE,
        operation_id: None,
        status: OperationStatus::Pending,
        external_id: None,
    }
}

/// A valid order's operation, with what a test changes; see [`order`].
#[derive(Debug, Clone)]
pub struct OrderBuilder {
    order_id: OrderId,
    params: ChargeParams,
    requested_by: String,
    at: Timestamp,
    grace: Duration,
    operation_id: Option<OperationId>,
    status: OperationStatus,
    external_id: Option<PaymentIntentId>,
}

impl OrderBuilder {
    /// The amount in the currency's smallest unit.
    pub fn amount(mut self, amount: i64) -> Self {
        self.params.amount = Amount::new(amount).expect("valid amount");
        self
    }

    /// The ISO currency, lowercase.
    pub fn currency(mut self, currency: &str) -> Self {
        self.params.currency = Currency::parse(currency).expect("valid currency");
        self
    }

    pub fn customer(mut self, customer_id: &str) -> Self {
        self.params.customer_id = CustomerId::parse(customer_id).expect("valid customer id");
        self
    }

    pub fn payment_method(mut self, payment_method: &str) -> Self {
        self.params.payment_method =
            PaymentMethodId::parse(payment_method).expect("valid payment method");
        self
    }

    /// The JWT subject of the caller (`jwt:<subject>`).
    pub fn requested_by(mut self, subject: &str) -> Self {
        self.requested_by = subject.to_owned();
        self
    }

    /// When the operation is created (its `created_at`; the grace runs from here).
    pub fn at(mut self, now: Timestamp) -> Self {
        self.at = now;
        self
    }

    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// A given operation id instead of a fresh one (one a sample event or message names).
    pub fn operation_id(mut self, id: &str) -> Self {
        self.operation_id = Some(OperationId::parse(id).expect("valid operation id"));
        self
    }

    /// The record's status, set directly (no store write; see [`settle_as`] for that).
    pub fn status(mut self, status: OperationStatus) -> Self {
        self.status = status;
        self
    }

    /// The recorded PaymentIntent id, set directly.
    pub fn external_id(mut self, id: &str) -> Self {
        self.external_id = Some(PaymentIntentId::parse(id).expect("valid PaymentIntent id"));
        self
    }

    /// Authorized at checkout, captured later (`capture: manual`).
    pub fn manual(mut self) -> Self {
        self.params.capture_method = crate::domain::CaptureMethod::Manual;
        self
    }

    /// The charge parameters so far.
    pub fn params(&self) -> ChargeParams {
        self.params.clone()
    }

    pub fn build(self) -> Operation {
        let mut op = Operation::new(
            self.order_id,
            self.params,
            Principal::jwt(&self.requested_by).expect("valid principal"),
            self.at,
            self.grace,
        );
        if let Some(id) = self.operation_id {
            op.operation_id = id;
        }
        op.status = self.status;
        op.external_id = self.external_id;
        op
    }
}

/// A claim on `op` at `now` with lease `token`, held for [`LEASE`].
pub fn claim_request(op: &Operation, token: LeaseToken, now: Timestamp) -> ClaimRequest {
    ClaimRequest {
        key: op.key(),
        operation_id: op.operation_id,
        lease: Lease {
            token,
            expires_at: now.plus(LEASE),
        },
        now,
    }
}

/// The lease holder's outcome `status` for `op` at `now`, as after a timed-out call: no
/// PaymentIntent id, last error `timeout`, no review, due again in a minute while unsettled.
/// Change a field with struct update syntax (`OutcomeRecord { review, ..outcome(..) }`).
pub fn outcome(
    op: &Operation,
    token: LeaseToken,
    status: OperationStatus,
    now: Timestamp,
) -> OutcomeRecord {
    OutcomeRecord {
        key: op.key(),
        operation_id: op.operation_id,
        lease_token: token,
        status,
        external_id: None,
        last_error: Some("timeout".into()),
        review: None,
        next_due_at: (!status.is_settled()).then(|| now.plus(Duration::from_secs(60))),
        now,
        stripe_refund_id: None,
        release: None,
        authorization: None,
        capture_before: None,
        amount_captured: None,
    }
}

/// What Stripe holds for a dispute `id` of intent `payment_intent` just opened: 1250 `usd`,
/// `fraudulent`, `needs_response` with evidence due a week after [`T0`], funds withdrawn (one
/// balance transaction), not refundable, created at [`T0`].
pub fn stripe_dispute(id: &str, payment_intent: &str) -> crate::dispute::StripeDispute {
    crate::dispute::StripeDispute {
        id: crate::domain::DisputeId::parse(id).expect("valid dispute id"),
        charge: crate::domain::StripeChargeId::parse("ch_1").expect("valid charge id"),
        payment_intent: Some(PaymentIntentId::parse(payment_intent).expect("valid intent id")),
        amount: 1250,
        currency: "usd".into(),
        reason: "fraudulent".into(),
        status: crate::dispute::DisputeStatus::NeedsResponse,
        due_by: Some(T0.plus(Duration::from_secs(7 * 24 * 3600))),
        has_evidence: false,
        is_charge_refundable: false,
        balance_transactions: 1,
        livemode: false,
        created: T0,
    }
}
