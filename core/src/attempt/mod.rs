//! Charge attempts at the door: an order whose latest charge attempt was declined may be charged
//! again (another card, or the same after the customer topped up), as a new attempt of the same
//! order: its own operation id, idempotency key and PaymentIntent. An attempt **is** a charge
//! (the same plan, the same lease/claim/record shell); what this room holds is only the door's
//! rule, [`decide`]: (the order's attempts as read, the request, the caller, the limit) → the
//! attempt that answers the request as it is, a new attempt `n + 1`, or why not.
//!
//! The store's write that creates the attempt checks the latest attempt's part again, atomically
//! ([`crate::store_rules::start_attempt`]): two retries at once make one attempt, and an attempt
//! starts only after a `failed` one that no cancel ended. So at most one attempt of an order is
//! ever unsettled, authorized or paid.

use std::fmt;

use crate::domain::{OperationKind, PaymentIntentId, Principal};
use crate::operation::{Operation, OperationStatus};
use crate::store::NewAttempt;

/// How many charge attempts the deployment lets one order make (template parameter
/// `MaxChargeAttempts`, env `MAX_CHARGE_ATTEMPTS`): 1 to [`OperationKind::MAX_CHARGE_ATTEMPTS`].
/// A bound on the PaymentIntents one caller can create for one order (card testing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptLimit(u32);

impl AttemptLimit {
    /// The template's default.
    pub const DEFAULT: AttemptLimit = AttemptLimit(5);

    pub fn new(n: u32) -> Result<Self, String> {
        if (1..=OperationKind::MAX_CHARGE_ATTEMPTS).contains(&n) {
            Ok(Self(n))
        } else {
            Err(format!(
                "the charge attempt limit must be 1 to {}, not {n}",
                OperationKind::MAX_CHARGE_ATTEMPTS
            ))
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

impl Default for AttemptLimit {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// What the door does with a charge request for an order that already has attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Door {
    /// The order's latest attempt answers the request (200): the request is the latest's own
    /// while it is not failed, or a replay of an earlier attempt's (which never starts another).
    Latest(Operation),
    /// Start attempt `n + 1` (202 once the store wrote it).
    Start(NewAttempt),
}

/// Why a request for an order with attempts is refused (409). Nothing is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptRefusal {
    /// The order is another caller's: answered as [`Self::Conflict`], so it says nothing of it.
    OtherCaller,
    /// Another amount, currency, customer or capture method than the order's.
    Conflict,
    /// The latest attempt is unsettled or authorized, and this is another request.
    InFlight {
        attempt: u32,
        status: OperationStatus,
    },
    /// The latest attempt took the money.
    Paid {
        attempt: u32,
        payment_intent: Option<PaymentIntentId>,
    },
    /// The order's charge was canceled by the merchant (a cancel ended the latest attempt).
    Canceled,
    /// The order made as many attempts as the deployment allows.
    TooMany { limit: u32 },
}

impl AttemptRefusal {
    /// The error code the door answers with.
    pub fn code(&self) -> &'static str {
        match self {
            AttemptRefusal::OtherCaller | AttemptRefusal::Conflict => "order_conflict",
            AttemptRefusal::InFlight { .. } => "attempt_in_flight",
            AttemptRefusal::Paid { .. } => "paid",
            AttemptRefusal::Canceled => "canceled",
            AttemptRefusal::TooMany { .. } => "too_many_attempts",
        }
    }

    /// The message, naming the order.
    pub fn message(&self, order_id: &str) -> String {
        match self {
            AttemptRefusal::OtherCaller | AttemptRefusal::Conflict => {
                "this order already has a charge with different parameters".to_owned()
            }
            AttemptRefusal::InFlight { attempt, status } => format!(
                "order {order_id}'s charge attempt {attempt} is {status}: another attempt may start only once it failed"
            ),
            AttemptRefusal::Paid {
                attempt,
                payment_intent,
            } => format!(
                "order {order_id} is paid by attempt {attempt} ({}); refund it instead",
                payment_intent.as_ref().map_or("no PaymentIntent recorded", |p| p.as_str())
            ),
            AttemptRefusal::Canceled => format!(
                "order {order_id}'s charge was canceled: it is not charged again"
            ),
            AttemptRefusal::TooMany { limit } => format!(
                "order {order_id} made {limit} charge attempts, as many as this deployment allows (MaxChargeAttempts)"
            ),
        }
    }
}

impl fmt::Display for AttemptRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// What the door decides for `request` (a fresh first-attempt record built from what was asked:
/// its parameters, fingerprint, caller and times) against the order's `attempts` as read, first
/// to latest (never empty: an order without a charge is a plain create). In order:
/// 1. another caller's order: refused as a conflict, saying nothing;
/// 2. another amount, currency, customer or capture method than the first attempt's: conflict
///    (only the payment method may differ);
/// 3. the latest attempt's own request while it is not failed: that attempt (200, as today);
/// 4. an earlier attempt's request (not the latest's): a replay of an old request, answered
///    with the latest attempt, never a new one;
/// 5. the latest paid: `paid`; unsettled or authorized: `attempt_in_flight`; failed by a cancel:
///    `canceled`; failed with the limit reached: `too_many_attempts`;
/// 6. else attempt `n + 1`, after the failed latest (the same request as the failed latest
///    starts a new attempt too: Stripe declined it, the customer may have topped up).
pub fn decide(
    attempts: &[Operation],
    request: &Operation,
    caller: &Principal,
    limit: AttemptLimit,
) -> Result<Door, AttemptRefusal> {
    let (Some(head), Some(latest)) = (attempts.first(), attempts.last()) else {
        return Err(AttemptRefusal::Conflict);
    };
    if head
        .requested_by
        .as_ref()
        .is_some_and(|owner| !owner.same_owner(caller))
    {
        return Err(AttemptRefusal::OtherCaller);
    }
    if !same_order(head, request) {
        return Err(AttemptRefusal::Conflict);
    }
    let n = latest.kind.attempt_no().unwrap_or(1);
    let failed = latest.status == OperationStatus::Failed;
    if request.fingerprint == latest.fingerprint && !failed {
        return Ok(Door::Latest(latest.clone()));
    }
    let earlier = &attempts[..attempts.len() - 1];
    if request.fingerprint != latest.fingerprint
        && earlier.iter().any(|a| a.fingerprint == request.fingerprint)
    {
        return Ok(Door::Latest(latest.clone()));
    }
    match latest.status {
        OperationStatus::Succeeded => {
            return Err(AttemptRefusal::Paid {
                attempt: n,
                payment_intent: latest.external_id.clone(),
            })
        }
        OperationStatus::Pending | OperationStatus::Unknown | OperationStatus::Authorized => {
            return Err(AttemptRefusal::InFlight {
                attempt: n,
                status: latest.status,
            })
        }
        // A capture that found the authorization lapsed ended the attempt too, with nothing
        // taken: only a cancel ends the order.
        OperationStatus::Failed if latest.taken_by().is_some_and(|t| !t.capture) => {
            return Err(AttemptRefusal::Canceled)
        }
        OperationStatus::Failed => {}
    }
    if n >= limit.get() {
        return Err(AttemptRefusal::TooMany { limit: limit.get() });
    }
    let mut op = request.clone();
    op.kind = OperationKind::charge_attempt(n + 1)
        .map_err(|_| AttemptRefusal::TooMany { limit: limit.get() })?;
    Ok(Door::Start(NewAttempt {
        op,
        after_operation_id: latest.operation_id,
    }))
}

/// The request asks for the order's charge as its first attempt was asked: same amount,
/// currency, customer and capture method (the payment method may differ).
fn same_order(head: &Operation, request: &Operation) -> bool {
    match (head.params.charge(), request.params.charge()) {
        (Some(a), Some(b)) => {
            a.amount == b.amount
                && a.currency == b.currency
                && a.customer_id == b.customer_id
                && a.capture_method == b.capture_method
        }
        _ => false,
    }
}

/// The attempt that paid the order, if one did: its number (at most one ever does; the store's
/// write makes every later attempt follow a failed one).
pub fn paid_attempt(attempts: &[Operation]) -> Option<u32> {
    attempts
        .iter()
        .find(|a| a.status == OperationStatus::Succeeded)
        .and_then(|a| a.kind.attempt_no())
}
