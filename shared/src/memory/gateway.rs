//! [`FakeGateway`]: the seed's `FakeStripe`, a model of Stripe's idempotency layer in memory.
//!
//! Same key and same parameters replay the first answer (errors included); same key and other
//! parameters is a key misuse; faults are scripted per create call (and, apart, per cancel and per
//! capture call); keys can be pruned as Stripe does after 24 h; statuses can change later. Every
//! PaymentIntent actually created is kept, so a test asserts how many charges really happened.
//! Refunds the same way ([`refunds`]): keyed, refused as Stripe refuses them, kept, their statuses
//! scripted.
//! Authorizations too ([`captures`]): a manual charge waits in `requires_capture` until it is
//! captured (all or part), canceled, or its deadline passes on the fake's clock.
//! Disputes ([`disputes`]): opened on an intent and moved by a test, read by the engine, and a
//! refund of a disputed charge refused as Stripe refuses it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use charge_core::domain::{
    CaptureMethod, Fingerprint, OperationId, PaymentIntentId, StripeRefundId,
};
use charge_core::operation::Operation;
use charge_core::outcome::{GatewayError, PaymentIntent, PaymentIntentStatus, RetryCause};
use charge_core::refund::{RefundStatus, StripeRefund};
use charge_core::stripe_version::StripeVersion;
use charge_core::time::{SystemClock, Timestamp};
use charge_core::{audit::AuditWindow, time::Clock};

use crate::ports::{
    CancelPaymentIntent, CapturePaymentIntent, CreatePaymentIntent, CreateRefund, CreatedLists,
    ListPage, PaymentIntents, StripeAccount, StripeRefunds,
};

mod captures;
mod disputes;
mod refunds;

pub use captures::FAKE_CAPTURE_WINDOW;
pub use refunds::FakeRefund;

/// A fault applied to the next create call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeFault {
    /// Created and saved under the key, but the caller sees a connection reset.
    LoseResponse,
    /// Created, and the 500 is saved under the key (so retries with the key replay the 500).
    ServerErrorAfterCommit,
    /// 500 before anything executed: nothing created, nothing saved.
    ServerErrorBeforeCommit,
    /// 429 from the rate limiter in front of the idempotency layer.
    RateLimited,
    /// 409 `idempotency_key_in_use`.
    KeyInUse,
    /// 401: our API key is wrong.
    Unauthorized,
    /// 400 `invalid_request_error` (validation; not saved).
    Rejected,
    /// The card is declined (402); the PaymentIntent is left in `requires_payment_method`.
    Decline(&'static str),
}

/// A PaymentIntent that exists at the fake Stripe, with the facts its answers carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeCharge {
    pub status: PaymentIntentStatus,
    pub operation_id: OperationId,
    pub order_id: String,
    pub amount: i64,
    pub currency: String,
    /// The fake is a test-mode account unless a test says otherwise.
    pub livemode: bool,
    pub idempotency_key: String,
    /// What a capture took (`amount_received`); `None` until one did.
    pub amount_received: Option<i64>,
    /// Why it was canceled (`automatic`: its authorization lapsed uncaptured).
    pub cancellation_reason: Option<String>,
    /// A manual charge's deadline (the charge's `capture_before`): uncaptured by then, the fake
    /// cancels it as Stripe does.
    pub capture_before: Option<Timestamp>,
}

impl FakeCharge {
    fn of(req: &CreatePaymentIntent, status: PaymentIntentStatus, key: &str) -> Self {
        Self {
            status,
            operation_id: req.operation_id,
            order_id: req.order_id.as_str().to_owned(),
            amount: req.params.amount.minor_units(),
            currency: req.params.currency.as_str().to_owned(),
            livemode: false,
            idempotency_key: key.to_owned(),
            amount_received: None,
            cancellation_reason: None,
            capture_before: None,
        }
    }

    /// The PaymentIntent as Stripe's answers show it.
    fn intent(&self, id: &str) -> PaymentIntent {
        PaymentIntent {
            amount: Some(self.amount),
            currency: Some(self.currency.clone()),
            operation_id: Some(self.operation_id.to_string()),
            order_id: Some(self.order_id.clone()),
            livemode: Some(self.livemode),
            amount_received: self.amount_received,
            cancellation_reason: self.cancellation_reason.clone(),
            capture_before: self.capture_before,
            ..PaymentIntent::new(fake_id(id), self.status.clone())
        }
    }
}

/// Calls received, by endpoint.
#[derive(Debug, Default)]
pub struct GatewayCalls {
    pub create: AtomicU64,
    pub retrieve: AtomicU64,
    pub search: AtomicU64,
    pub cancel: AtomicU64,
    pub capture: AtomicU64,
    pub refund_create: AtomicU64,
    /// Refund retrieves and lists.
    pub refund_read: AtomicU64,
    /// PaymentIntent lists by creation time (the audit's).
    pub list: AtomicU64,
    /// Dispute retrieves and lists.
    pub dispute_read: AtomicU64,
}

impl GatewayCalls {
    pub fn total(&self) -> u64 {
        self.create.load(Ordering::SeqCst)
            + self.retrieve.load(Ordering::SeqCst)
            + self.search.load(Ordering::SeqCst)
            + self.cancel.load(Ordering::SeqCst)
            + self.capture.load(Ordering::SeqCst)
            + self.refund_create.load(Ordering::SeqCst)
            + self.refund_read.load(Ordering::SeqCst)
            + self.list.load(Ordering::SeqCst)
            + self.dispute_read.load(Ordering::SeqCst)
    }
}

struct Saved {
    fingerprint: Fingerprint,
    answer: Result<PaymentIntent, GatewayError>,
}

struct State {
    saved: HashMap<String, Saved>,
    charges: BTreeMap<String, FakeCharge>,
    next_id: u64,
    first_status: PaymentIntentStatus,
    script: VecDeque<FakeFault>,
    /// Faults for the next cancel calls: `RateLimited`, `ServerErrorBeforeCommit`,
    /// `LoseResponse` (canceled, answer lost), `Rejected`.
    cancel_script: VecDeque<FakeFault>,
    /// Answers for the next PaymentIntent retrieves: `Some(RateLimited)` a 429, `None` the
    /// intent as held (empty: every retrieve answers).
    retrieve_script: VecDeque<Option<FakeFault>>,
    /// Faults for the next capture calls (see [`FakeGateway::script_capture`]).
    capture_script: VecDeque<FakeFault>,
    /// How long a manual charge's authorization waits for its capture.
    capture_window: Duration,
    in_flight: HashMap<String, u32>,
    /// Refund keys and the answers they replay (apart from the creates' keys, which a refund
    /// create may not reuse).
    refunds_saved: HashMap<String, refunds::SavedRefund>,
    refunds: BTreeMap<String, FakeRefund>,
    next_refund_id: u64,
    refund_first_status: RefundStatus,
    refund_script: VecDeque<FakeFault>,
    /// Faults for the next refund reads (retrieve by id), in order.
    refund_read_script: VecDeque<FakeFault>,
    /// When each PaymentIntent and refund was made, by id, on the fake's clock: what a list by
    /// creation time filters on.
    created: HashMap<String, Timestamp>,
    /// The authorizations made with a deadline, by deadline: what [`State::lapse_holds`] looks
    /// at, so a call costs the same however many intents the fake holds.
    holds: BTreeSet<(Timestamp, String)>,
    /// The API version the fake answers in (the pinned one unless set): a lapse's word.
    version: StripeVersion,
    /// The disputes the customers' banks opened, by id ([`disputes`]).
    disputes: BTreeMap<String, charge_core::dispute::StripeDispute>,
}

impl State {
    /// Keeps `charge` under `id`, and its deadline among the holds if it has one.
    fn put_charge(&mut self, id: String, charge: FakeCharge) {
        if let Some(at) = charge.capture_before {
            self.holds.insert((at, id.clone()));
        }
        self.charges.insert(id, charge);
    }

    /// Stripe's idempotency layer: a key seen before replays its first answer when the request
    /// is the same, and is refused (`idempotency_error`) when it is not; `None` for a new key.
    fn replay(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
    ) -> Option<Result<PaymentIntent, GatewayError>> {
        let saved = self.saved.get(key)?;
        if saved.fingerprint != *fingerprint {
            return Some(Err(GatewayError::KeyMisuse {
                detail: "400 idempotency_error: keys can only be used with the same parameters"
                    .into(),
            }));
        }
        Some(match &saved.answer {
            Ok(pi) => Ok(PaymentIntent {
                replayed: true,
                ..pi.clone()
            }),
            Err(e) => Err(e.clone()),
        })
    }
}

pub struct FakeGateway {
    state: Mutex<State>,
    create_delay: Mutex<Option<Duration>>,
    /// When a manual charge was authorized and when its hold lapses (the wall clock unless a
    /// test shares its own, [`FakeGateway::set_clock`]).
    clock: Mutex<Arc<dyn Clock>>,
    pub calls: GatewayCalls,
}

impl Default for FakeGateway {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeGateway {
    /// Creates succeed with status `succeeded`.
    pub fn new() -> Self {
        Self::with_first_status(PaymentIntentStatus::Succeeded)
    }

    /// Creates return this status (e.g. `processing`) unless a fault says otherwise.
    pub fn with_first_status(first_status: PaymentIntentStatus) -> Self {
        Self {
            state: Mutex::new(State {
                saved: HashMap::new(),
                charges: BTreeMap::new(),
                next_id: 0,
                first_status,
                script: VecDeque::new(),
                cancel_script: VecDeque::new(),
                retrieve_script: VecDeque::new(),
                capture_script: VecDeque::new(),
                capture_window: FAKE_CAPTURE_WINDOW,
                in_flight: HashMap::new(),
                refunds_saved: HashMap::new(),
                refunds: BTreeMap::new(),
                next_refund_id: 0,
                refund_first_status: RefundStatus::Succeeded,
                refund_script: VecDeque::new(),
                refund_read_script: VecDeque::new(),
                created: HashMap::new(),
                holds: BTreeSet::new(),
                version: StripeVersion::PINNED,
                disputes: BTreeMap::new(),
            }),
            create_delay: Mutex::new(None),
            clock: Mutex::new(Arc::new(SystemClock)),
            calls: GatewayCalls::default(),
        }
    }

    /// Answers as Stripe does in `version` (what a client pinning it sees): a lapsed hold's
    /// `cancellation_reason` is that version's word.
    pub fn set_stripe_version(&self, version: StripeVersion) {
        self.lock().version = version;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state with every authorization whose deadline passed by the fake's clock lapsed
    /// (canceled, in the version's word), as Stripe cancels them: what any call then sees.
    fn lock_now(&self) -> (std::sync::MutexGuard<'_, State>, Timestamp) {
        let now = self.now();
        let mut st = self.lock();
        st.lapse_holds(now);
        (st, now)
    }

    fn now(&self) -> Timestamp {
        self.clock.lock().unwrap_or_else(|p| p.into_inner()).now()
    }

    /// From now on, the fake dates authorizations and lapses them by `clock` (a test's
    /// [`charge_core::time::ManualClock`], shared with the code under test).
    pub fn set_clock(&self, clock: Arc<dyn Clock>) {
        *self.clock.lock().unwrap_or_else(|p| p.into_inner()) = clock;
    }

    /// From now on, creates return this status unless a fault says otherwise (as
    /// [`FakeGateway::with_first_status`]).
    pub fn set_first_status(&self, first_status: PaymentIntentStatus) {
        self.lock().first_status = first_status;
    }

    /// Applies `fault` to the next create call (queued after earlier ones).
    pub fn script(&self, fault: FakeFault) {
        self.lock().script.push_back(fault);
    }

    /// Applies `fault` to the next cancel call (queued after earlier ones).
    pub fn script_cancel(&self, fault: FakeFault) {
        self.lock().cancel_script.push_back(fault);
    }

    /// The next PaymentIntent retrieves, in order: `Some(RateLimited)` answers 429 (nothing
    /// read), `None` answers as usual (queued after earlier ones).
    pub fn script_retrieves(&self, answers: impl IntoIterator<Item = Option<FakeFault>>) {
        self.lock().retrieve_script.extend(answers);
    }

    /// Makes every create take this long inside the call (to make races real).
    pub fn set_create_delay(&self, delay: Duration) {
        *self.create_delay.lock().unwrap_or_else(|p| p.into_inner()) = Some(delay);
    }

    /// Forgets every saved key, as Stripe may once keys are 24 h old: the same key creates anew.
    pub fn prune_keys(&self) {
        let mut st = self.lock();
        st.saved.clear();
        st.refunds_saved.clear();
    }

    /// Changes a PaymentIntent's status, as Stripe does when `processing` settles.
    pub fn set_status(&self, id: &str, status: PaymentIntentStatus) {
        if let Some(c) = self.lock().charges.get_mut(id) {
            c.status = status;
        }
    }

    /// Adds a PaymentIntent for `op` (its metadata, amount and currency) that was not created
    /// through this gateway's create (a duplicate made by hand in the dashboard, say).
    pub fn insert_charge(&self, op: &Operation, status: PaymentIntentStatus) -> PaymentIntentId {
        self.insert_intent(FakeCharge::of(
            &CreatePaymentIntent::for_operation(op).expect("a charge operation"),
            status,
            "",
        ))
    }

    /// Adds this PaymentIntent as it is (to model one that is not what its metadata claims).
    pub fn insert_intent(&self, charge: FakeCharge) -> PaymentIntentId {
        let now = self.now();
        let mut st = self.lock();
        st.next_id += 1;
        let id = format!("pi_fake{}", st.next_id);
        st.created.insert(id.clone(), now);
        st.put_charge(id.clone(), charge);
        fake_id(&id)
    }

    /// Adds this PaymentIntent under a given id (the one a sample event names).
    pub fn insert_intent_as(&self, id: &PaymentIntentId, charge: FakeCharge) {
        let now = self.now();
        let mut st = self.lock();
        st.created.insert(id.as_str().to_owned(), now);
        st.put_charge(id.as_str().to_owned(), charge);
    }

    /// The facts a create for `op` would leave at Stripe, to alter and [`Self::insert_intent`].
    pub fn charge_for(op: &Operation, status: PaymentIntentStatus) -> FakeCharge {
        FakeCharge::of(
            &CreatePaymentIntent::for_operation(op).expect("a charge operation"),
            status,
            "",
        )
    }

    /// Every PaymentIntent created, by id: the external side effect.
    pub fn charges(&self) -> BTreeMap<String, FakeCharge> {
        self.lock_now().0.charges.clone()
    }

    pub fn charge_count(&self) -> usize {
        self.lock().charges.len()
    }

    /// Makes the PaymentIntent a create asked for, `status` unless it is a manual charge the
    /// fake would have charged: that one is authorized (`requires_capture`), its deadline
    /// `now` plus the capture window.
    fn commit(
        st: &mut State,
        req: &CreatePaymentIntent,
        status: PaymentIntentStatus,
        now: Timestamp,
    ) -> PaymentIntent {
        st.next_id += 1;
        let id = format!("pi_fake{}", st.next_id);
        let mut charge = FakeCharge::of(req, status, req.idempotency_key.as_str());
        if req.params.capture_method == CaptureMethod::Manual {
            if charge.status == PaymentIntentStatus::Succeeded {
                charge.status = PaymentIntentStatus::RequiresCapture;
            }
            charge.capture_before = Some(now.plus(st.capture_window));
        }
        let pi = charge.intent(&id);
        st.created.insert(id.clone(), now);
        st.put_charge(id, charge);
        pi
    }

    fn answer(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        let (mut st, now) = self.lock_now();
        let fault = st.script.pop_front();
        // Rate limiting, auth and validation run before the idempotency layer: nothing is saved.
        match &fault {
            Some(FakeFault::RateLimited) => {
                return Err(GatewayError::RetryLater {
                    cause: RetryCause::RateLimited,
                    detail: "429 rate_limit".into(),
                })
            }
            Some(FakeFault::Unauthorized) => {
                return Err(GatewayError::RetryLater {
                    cause: RetryCause::Configuration,
                    detail: "401 invalid api key".into(),
                })
            }
            Some(FakeFault::Rejected) => {
                return Err(GatewayError::Rejected {
                    detail: "400 invalid_request_error: No such customer".into(),
                    param: Some("customer".into()),
                })
            }
            _ => {}
        }
        let key = req.idempotency_key.as_str().to_owned();
        let fingerprint = req.params.fingerprint();
        if let Some(answer) = st.replay(&key, &fingerprint) {
            return answer;
        }
        if fault == Some(FakeFault::KeyInUse) || st.in_flight.get(&key).copied().unwrap_or(0) > 1 {
            return Err(GatewayError::RetryLater {
                cause: RetryCause::KeyInUse,
                detail: "409 idempotency_key_in_use".into(),
            });
        }
        if fault == Some(FakeFault::ServerErrorBeforeCommit) {
            return Err(GatewayError::Ambiguous {
                detail: "500 api_error".into(),
            });
        }
        let (answer, returned) = match fault {
            Some(FakeFault::Decline(code)) => {
                let pi = Self::commit(
                    &mut st,
                    req,
                    PaymentIntentStatus::RequiresPaymentMethod,
                    now,
                );
                let e = GatewayError::Declined {
                    code: code.to_owned(),
                    payment_intent_id: Some(pi.id),
                };
                (Err(e.clone()), Err(e))
            }
            Some(FakeFault::ServerErrorAfterCommit) => {
                let status = st.first_status.clone();
                Self::commit(&mut st, req, status, now);
                let e = GatewayError::Ambiguous {
                    detail: "500 api_error".into(),
                };
                (Err(e.clone()), Err(e))
            }
            Some(FakeFault::LoseResponse) => {
                let status = st.first_status.clone();
                let pi = Self::commit(&mut st, req, status, now);
                (
                    Ok(pi),
                    Err(GatewayError::Ambiguous {
                        detail: "connection reset".into(),
                    }),
                )
            }
            _ => {
                let status = st.first_status.clone();
                let pi = Self::commit(&mut st, req, status, now);
                (Ok(pi.clone()), Ok(pi))
            }
        };
        st.saved.insert(
            key,
            Saved {
                fingerprint,
                answer,
            },
        );
        returned
    }
}

/// Stripe's rule for a cancel: allowed while nobody has taken the money and it is not canceled
/// already (`processing` only in cases this code never makes, so never here).
pub fn cancelable(status: &PaymentIntentStatus) -> bool {
    matches!(
        status,
        PaymentIntentStatus::RequiresPaymentMethod
            | PaymentIntentStatus::RequiresCapture
            | PaymentIntentStatus::RequiresConfirmation
            | PaymentIntentStatus::RequiresAction
    )
}

impl FakeGateway {
    fn cancel_answer(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        let (mut st, _) = self.lock_now();
        let fault = st.cancel_script.pop_front();
        match fault {
            Some(FakeFault::RateLimited) => {
                return Err(GatewayError::RetryLater {
                    cause: RetryCause::RateLimited,
                    detail: "429 rate_limit".into(),
                })
            }
            Some(FakeFault::ServerErrorBeforeCommit) => {
                return Err(GatewayError::Ambiguous {
                    detail: "500 api_error".into(),
                })
            }
            Some(FakeFault::Rejected) => {
                return Err(GatewayError::Rejected {
                    detail: "400 invalid_request_error".into(),
                    param: None,
                })
            }
            _ => {}
        }
        // The key is saved with its request (the intent and the reason, Stripe's parameters).
        let key = req.idempotency_key.as_str().to_owned();
        let fingerprint = Fingerprint::from_stored(format!(
            "cancel {} {}",
            req.id,
            req.reason.map_or("-", |r| r.as_str())
        ));
        if let Some(answer) = st.replay(&key, &fingerprint) {
            return answer;
        }
        let answer = match st.charges.get_mut(req.id.as_str()) {
            None => Err(GatewayError::Rejected {
                detail: format!("404 resource_missing: No such payment_intent: '{}'", req.id),
                param: Some("intent".into()),
            }),
            Some(c) if cancelable(&c.status) => {
                // Canceling an authorization releases its hold.
                c.status = PaymentIntentStatus::Canceled;
                c.cancellation_reason = req.reason.map(|r| r.as_str().to_owned());
                Ok(c.intent(req.id.as_str()))
            }
            // Not saved under the key: Stripe does not keep a refusal of this kind.
            Some(c) => {
                return Err(GatewayError::UnexpectedState {
                    detail: format!(
                        "400 payment_intent_unexpected_state: You cannot cancel this PaymentIntent because it has a status of {}.",
                        c.status
                    ),
                })
            }
        };
        if answer.is_ok() {
            st.saved.insert(
                key,
                Saved {
                    fingerprint,
                    answer: answer.clone(),
                },
            );
        }
        match (fault, answer) {
            (Some(FakeFault::LoseResponse), Ok(_)) => Err(GatewayError::Ambiguous {
                detail: "connection reset".into(),
            }),
            (_, answer) => answer,
        }
    }
}

/// A fault that stops a keyed write (a refund create, a capture) before Stripe's idempotency
/// layer: nothing made or saved.
pub(super) fn before_the_key(fault: &Option<FakeFault>) -> Option<GatewayError> {
    match fault {
        Some(FakeFault::RateLimited) => Some(GatewayError::RetryLater {
            cause: RetryCause::RateLimited,
            detail: "429 rate_limit".into(),
        }),
        Some(FakeFault::ServerErrorBeforeCommit) => Some(GatewayError::Ambiguous {
            detail: "500 api_error".into(),
        }),
        _ => None,
    }
}

/// The fake's ids (`pi_fake<n>`) are valid PaymentIntent ids by construction.
fn fake_id(id: &str) -> PaymentIntentId {
    PaymentIntentId::parse(id).expect("pi_fake<n> is a PaymentIntent id")
}

impl StripeAccount for FakeGateway {
    fn livemode(&self) -> bool {
        false
    }
}

#[async_trait]
impl PaymentIntents for FakeGateway {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.calls.create.fetch_add(1, Ordering::SeqCst);
        let delay = *self.create_delay.lock().unwrap_or_else(|p| p.into_inner());
        let key = req.idempotency_key.as_str().to_owned();
        *self.lock().in_flight.entry(key.clone()).or_default() += 1;
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        let result = self.answer(req);
        let mut st = self.lock();
        if let Some(n) = st.in_flight.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                st.in_flight.remove(&key);
            }
        }
        result
    }

    async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError> {
        self.calls.retrieve.fetch_add(1, Ordering::SeqCst);
        let (mut st, _) = self.lock_now();
        if let Some(Some(FakeFault::RateLimited)) = st.retrieve_script.pop_front() {
            return Err(GatewayError::RetryLater {
                cause: RetryCause::RateLimited,
                detail: "429 rate_limit".into(),
            });
        }
        match st.charges.get(id.as_str()) {
            Some(c) => Ok(c.intent(id.as_str())),
            None => Err(GatewayError::Rejected {
                detail: format!("404 resource_missing: No such payment_intent: '{id}'"),
                param: Some("id".into()),
            }),
        }
    }

    async fn search_by_operation(
        &self,
        operation_id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        self.calls.search.fetch_add(1, Ordering::SeqCst);
        Ok(self
            .lock_now()
            .0
            .charges
            .iter()
            .filter(|(_, c)| c.operation_id == *operation_id)
            .map(|(id, c)| c.intent(id))
            .collect())
    }

    async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.calls.cancel.fetch_add(1, Ordering::SeqCst);
        self.cancel_answer(req)
    }

    async fn capture(&self, req: &CapturePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        self.calls.capture.fetch_add(1, Ordering::SeqCst);
        self.capture_answer(req)
    }
}

#[async_trait]
impl StripeRefunds for FakeGateway {
    async fn create_refund(&self, req: &CreateRefund) -> Result<StripeRefund, GatewayError> {
        self.calls.refund_create.fetch_add(1, Ordering::SeqCst);
        self.refund_answer(req)
    }

    async fn retrieve_refund(&self, id: &StripeRefundId) -> Result<StripeRefund, GatewayError> {
        self.calls.refund_read.fetch_add(1, Ordering::SeqCst);
        self.refund_read(id)
    }

    async fn list_refunds(
        &self,
        payment_intent: &PaymentIntentId,
    ) -> Result<Vec<StripeRefund>, GatewayError> {
        self.calls.refund_read.fetch_add(1, Ordering::SeqCst);
        Ok(self.refund_list(payment_intent))
    }
}

#[async_trait]
impl CreatedLists for FakeGateway {
    /// Every PaymentIntent made in the window, newest first, on one page.
    async fn list_intents_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<PaymentIntent>, GatewayError> {
        self.calls.list.fetch_add(1, Ordering::SeqCst);
        let (st, _) = self.lock_now();
        let ids = newest_first(&st.created, st.charges.keys(), window, starting_after);
        let items = ids.iter().map(|id| st.charges[*id].intent(id)).collect();
        Ok(ListPage { items, next: None })
    }

    /// Every refund made in the window, newest first, on one page.
    async fn list_refunds_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<StripeRefund>, GatewayError> {
        self.calls.refund_read.fetch_add(1, Ordering::SeqCst);
        let st = self.lock();
        let ids = newest_first(&st.created, st.refunds.keys(), window, starting_after);
        let items = ids
            .iter()
            .filter_map(|id| Some(st.refunds[*id].refund(&StripeRefundId::parse(id).ok()?)))
            .collect();
        Ok(ListPage { items, next: None })
    }

    /// Every dispute opened in the window, newest first, on one page.
    async fn list_disputes_created(
        &self,
        window: &AuditWindow,
        starting_after: Option<&str>,
    ) -> Result<ListPage<charge_core::dispute::StripeDispute>, GatewayError> {
        self.calls.dispute_read.fetch_add(1, Ordering::SeqCst);
        let st = self.lock();
        let ids = newest_first(&st.created, st.disputes.keys(), window, starting_after);
        let items = ids.iter().map(|id| st.disputes[*id].clone()).collect();
        Ok(ListPage { items, next: None })
    }
}

/// The ids made in `window` (by `created`), newest first (by time, then by the number in the
/// id), those after `starting_after` when given.
fn newest_first<'a>(
    created: &HashMap<String, Timestamp>,
    ids: impl Iterator<Item = &'a String>,
    window: &AuditWindow,
    starting_after: Option<&str>,
) -> Vec<&'a String> {
    let number = |id: &str| -> u64 {
        id.trim_start_matches(|c: char| !c.is_ascii_digit())
            .parse()
            .unwrap_or(0)
    };
    let mut found: Vec<(Timestamp, u64, &String)> = ids
        .filter_map(|id| {
            let at = *created.get(id)?;
            window.contains(at).then(|| (at, number(id), id))
        })
        .collect();
    found.sort_by_key(|f| std::cmp::Reverse((f.0, f.1)));
    let skip = starting_after
        .and_then(|after| found.iter().position(|(_, _, id)| id.as_str() == after))
        .map_or(0, |i| i + 1);
    found.into_iter().skip(skip).map(|(_, _, id)| id).collect()
}
