//! The PaymentIntent model: create-parameter validation, test payment
//! methods, lazy settlement of `processing`, cancel and the customer's later
//! confirm, and the JSON representation.

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::{json, Value};

use crate::wire::ApiError;

/// Every status a PaymentIntent can have.
pub const STATUSES: [&str; 7] = [
    "requires_payment_method",
    "requires_confirmation",
    "requires_action",
    "processing",
    "requires_capture",
    "canceled",
    "succeeded",
];

/// Stripe's `cancellation_reason` values a cancel may give.
pub const CANCELLATION_REASONS: [&str; 4] = [
    "duplicate",
    "fraudulent",
    "requested_by_customer",
    "abandoned",
];

/// The statuses Stripe lets a PaymentIntent be canceled from. (`processing` only in cases this
/// simulator does not model, so never here.)
pub(crate) fn cancelable(status: &str) -> bool {
    matches!(
        status,
        "requires_payment_method"
            | "requires_capture"
            | "requires_confirmation"
            | "requires_action"
    )
}

/// The statuses a customer's confirm (with the client secret, on Stripe.js) may start from.
pub(crate) fn confirmable(status: &str) -> bool {
    matches!(
        status,
        "requires_payment_method" | "requires_confirmation" | "requires_action"
    )
}

/// Validated parameters of `POST /v1/payment_intents/{id}/cancel`.
pub(crate) fn parse_cancel(form: &[(String, String)]) -> Result<Option<&'static str>, ApiError> {
    let mut reason = None;
    for (k, v) in form {
        match k.as_str() {
            "cancellation_reason" => {
                reason = Some(
                    CANCELLATION_REASONS
                        .iter()
                        .copied()
                        .find(|r| r == v)
                        .ok_or_else(|| {
                            ApiError::invalid(
                                "parameter_invalid_string",
                                k,
                                format!(
                                    "Invalid cancellation_reason: must be one of {}",
                                    CANCELLATION_REASONS.join(", ")
                                ),
                            )
                        })?,
                )
            }
            "expand" => {}
            _ if k.starts_with("expand[") => {}
            _ => {
                return Err(ApiError::invalid(
                    "parameter_unknown",
                    k,
                    format!("Received unknown parameter: {k}"),
                ))
            }
        }
    }
    Ok(reason)
}

/// Validated parameters of `POST /v1/payment_intents/{id}/capture`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct CaptureParams {
    /// `None`: all of `amount_capturable`.
    pub amount_to_capture: Option<i64>,
    /// `metadata[...]` parameters, checked, applied to the intent's metadata as on create (an
    /// empty value unsets a key).
    pub metadata: Vec<(String, String)>,
}

/// Validates the form of a capture: `amount_to_capture` (integer ≥ 1), `metadata[...]`,
/// `expand[]`; anything else is Stripe's `parameter_unknown`.
pub(crate) fn parse_capture(form: &[(String, String)]) -> Result<CaptureParams, ApiError> {
    let mut p = CaptureParams::default();
    for (k, v) in form {
        match k.as_str() {
            "amount_to_capture" => {
                let amount = v.parse::<i64>().map_err(|_| {
                    ApiError::invalid(
                        "parameter_invalid_integer",
                        k,
                        format!("Invalid integer: {v}"),
                    )
                })?;
                if amount < 1 {
                    return Err(ApiError::invalid(
                        "amount_too_small",
                        k,
                        "Amount must be at least 1 (in the currency's smallest unit).",
                    ));
                }
                p.amount_to_capture = Some(amount);
            }
            "expand" => {}
            _ if k.starts_with("expand[") => {}
            _ if metadata_param(&mut Metadata::default(), k, v)? => {
                p.metadata.push((k.clone(), v.clone()))
            }
            _ => {
                return Err(ApiError::invalid(
                    "parameter_unknown",
                    k,
                    format!("Received unknown parameter: {k}"),
                ))
            }
        }
    }
    Ok(p)
}

/// How long Stripe keeps an uncaptured PaymentIntent before canceling it (`automatic`): 7 days.
pub const UNCAPTURED_EXPIRY_MS: i64 = 7 * 24 * 3600 * 1000;

/// The card network's capture window of a Visa merchant-initiated (off-session) authorization:
/// 4 days 18 hours, shorter than Stripe's 7 days.
pub const VISA_MIT_CAPTURE_WINDOW_MS: i64 = (4 * 24 + 18) * 3600 * 1000;

/// The card brand of a test payment method (the simulator's cards are Visa unless named).
pub(crate) fn card_brand(pm: Option<&str>) -> &'static str {
    match pm {
        Some("pm_card_mastercard") => "mastercard",
        Some("pm_card_amex") => "amex",
        _ => "visa",
    }
}

/// How long the card network lets an authorization wait for its capture: a Visa
/// merchant-initiated one 4 days 18 hours, any other 7 days (the charge's `capture_before`).
pub(crate) fn capture_window_ms(pm: Option<&str>, off_session: bool) -> i64 {
    if off_session && card_brand(pm) == "visa" {
        VISA_MIT_CAPTURE_WINDOW_MS
    } else {
        UNCAPTURED_EXPIRY_MS
    }
}

/// An authorization waiting for its capture (`capture_method=manual`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Hold {
    /// The card network's deadline: the charge's `payment_method_details.card.capture_before`.
    pub capture_before_ms: i64,
    /// When Stripe cancels the intent if still uncaptured: the earlier of its creation plus the
    /// uncaptured expiry (7 days by default) and `capture_before`.
    pub expires_ms: i64,
    /// The amount captured, once it is.
    pub captured: Option<i64>,
}

/// When and why a PaymentIntent was canceled.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Cancellation {
    pub at_ms: i64,
    pub reason: Option<&'static str>,
}

/// Outcome class of a test payment method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TestCard {
    Succeeds,
    Declined {
        decline_code: &'static str,
        message: &'static str,
    },
    ProcessingThen {
        succeeds: bool,
    },
    RequiresAction,
    /// Simulator-only: stays `requires_action` even off-session (real Stripe declines such a card
    /// off-session), so a client's handling of a lingering `requires_action` can be exercised.
    AlwaysRequiresAction,
}

/// Maps a test payment method id to its behaviour.
pub(crate) fn test_card(pm: &str) -> Option<TestCard> {
    Some(match pm {
        "pm_card_visa" | "pm_card_mastercard" | "pm_card_amex" | "pm_card_us" => TestCard::Succeeds,
        // Pay like a Visa; their refunds take the paths of `crate::refund::refund_path`.
        "pm_card_pendingRefund" | "pm_card_refundFail" | "pm_card_sim_refundRequiresAction" => {
            TestCard::Succeeds
        }
        // Pay like a Visa, then are disputed (`crate::dispute::dispute_card`).
        "pm_card_createDispute"
        | "pm_card_createDisputeProductNotReceived"
        | "pm_card_createDisputeInquiry" => TestCard::Succeeds,
        "pm_card_chargeDeclined" | "pm_card_visa_chargeDeclined" => TestCard::Declined {
            decline_code: "generic_decline",
            message: "Your card was declined.",
        },
        "pm_card_visa_chargeDeclinedInsufficientFunds"
        | "pm_card_chargeDeclinedInsufficientFunds" => TestCard::Declined {
            decline_code: "insufficient_funds",
            message: "Your card has insufficient funds.",
        },
        "pm_card_processing_succeeds" => TestCard::ProcessingThen { succeeds: true },
        "pm_card_processing_fails" => TestCard::ProcessingThen { succeeds: false },
        "pm_card_threeDSecureRequired"
        | "pm_card_threeDSecure2Required"
        | "pm_card_authenticationRequired" => TestCard::RequiresAction,
        "pm_card_sim_requiresAction" => TestCard::AlwaysRequiresAction,
        _ => return None,
    })
}

/// Validated parameters of `POST /v1/payment_intents`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CreateParams {
    pub amount: i64,
    pub currency: String,
    pub customer: Option<String>,
    pub payment_method: Option<String>,
    pub confirm: bool,
    pub off_session: bool,
    pub description: Option<String>,
    pub metadata: Metadata,
    /// `capture_method=manual`: an authorization waits in `requires_capture` for a capture.
    pub manual_capture: bool,
}

/// A PaymentIntent's metadata: (key, value) pairs sorted by key, serialized as a JSON object in
/// that order (as a `BTreeMap` is), in one small vector instead of a tree node per PaymentIntent
/// (a simulation keeps millions of them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Metadata(Vec<(String, String)>);

impl Metadata {
    fn position(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    pub(crate) fn insert(&mut self, key: String, value: String) {
        match self.position(&key) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => self.0.insert(i, (key, value)),
        }
    }

    pub(crate) fn remove(&mut self, key: &str) {
        if let Ok(i) = self.position(key) {
            self.0.remove(i);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    pub(crate) fn get(&self, key: &str) -> Option<&String> {
        self.position(key).ok().map(|i| &self.0[i].1)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &String)> {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl Serialize for Metadata {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

const IGNORED_PARAMS: [&str; 12] = [
    "receipt_email",
    "statement_descriptor",
    "statement_descriptor_suffix",
    "setup_future_usage",
    "return_url",
    "confirmation_method",
    "capture_method",
    "error_on_requires_action",
    "use_stripe_sdk",
    "payment_method_types",
    "automatic_payment_methods",
    "expand",
];

fn parse_bool(param: &str, v: &str) -> Result<bool, ApiError> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ApiError::invalid(
            "parameter_invalid_boolean",
            param,
            format!("Invalid boolean: {v}"),
        )),
    }
}

/// Applies a `metadata[KEY]` (or an empty `metadata`) form parameter as Stripe does (an empty
/// value unsets the key); false if `k` is not a metadata parameter.
pub(crate) fn metadata_param(metadata: &mut Metadata, k: &str, v: &str) -> Result<bool, ApiError> {
    if let Some(mk) = k
        .strip_prefix("metadata[")
        .and_then(|r| r.strip_suffix(']'))
    {
        if mk.is_empty() || mk.len() > 40 {
            return Err(ApiError::invalid(
                "parameter_invalid_string",
                k,
                "Metadata keys must be 1 to 40 characters.",
            ));
        }
        if v.is_empty() {
            metadata.remove(mk);
        } else {
            metadata.insert(mk.to_string(), v.to_string());
        }
        Ok(true)
    } else if k == "metadata" && v.is_empty() {
        metadata.clear();
        Ok(true)
    } else {
        Ok(false)
    }
}

/// Whether a `capture_method` asks for a manual capture (`automatic_async` captures by itself,
/// as `automatic` does).
fn parse_manual_capture(v: &str) -> Result<bool, ApiError> {
    match v {
        "automatic" | "automatic_async" => Ok(false),
        "manual" => Ok(true),
        _ => Err(ApiError::invalid(
            "parameter_invalid_string",
            "capture_method",
            format!("Invalid capture_method: must be one of automatic, automatic_async, manual (got {v})"),
        )),
    }
}

/// `amount`: required, an integer of at least 1 minor unit.
fn parse_create_amount(amount: Option<&str>) -> Result<i64, ApiError> {
    let amount = amount.ok_or_else(|| ApiError::missing("amount"))?;
    let parsed = amount.parse::<i64>().map_err(|_| {
        ApiError::invalid(
            "parameter_invalid_integer",
            "amount",
            format!("Invalid integer: {amount}"),
        )
    })?;
    if parsed < 1 {
        return Err(ApiError::invalid(
            "amount_too_small",
            "amount",
            "Amount must be at least 1 (in the currency's smallest unit).",
        ));
    }
    Ok(parsed)
}

/// `currency`: required, three ASCII letters, kept lowercase as Stripe answers it.
fn parse_currency(currency: Option<&str>) -> Result<String, ApiError> {
    let currency = currency.ok_or_else(|| ApiError::missing("currency"))?;
    if currency.len() != 3 || !currency.chars().all(|c| c.is_ascii_alphabetic()) {
        return Err(ApiError::invalid(
            "parameter_invalid_string",
            "currency",
            format!("Invalid currency: {currency}"),
        ));
    }
    Ok(currency.to_ascii_lowercase())
}

impl CreateParams {
    /// Validates the decoded form. Errors are `400`s that Stripe would not
    /// save under an idempotency key.
    pub(crate) fn parse(form: &[(String, String)]) -> Result<Self, ApiError> {
        let mut amount = None;
        let mut currency = None;
        let mut p = CreateParams {
            amount: 0,
            currency: String::new(),
            customer: None,
            payment_method: None,
            confirm: false,
            off_session: false,
            description: None,
            metadata: Metadata::default(),
            manual_capture: false,
        };
        for (k, v) in form {
            match k.as_str() {
                "amount" => amount = Some(v.as_str()),
                "currency" => currency = Some(v.as_str()),
                "customer" => p.customer = Some(v.clone()).filter(|s| !s.is_empty()),
                "payment_method" => p.payment_method = Some(v.clone()).filter(|s| !s.is_empty()),
                "confirm" => p.confirm = parse_bool(k, v)?,
                "off_session" => {
                    p.off_session = match v.as_str() {
                        "one_off" | "recurring" => true,
                        other => parse_bool(k, other)?,
                    }
                }
                "description" => p.description = Some(v.clone()),
                "capture_method" => p.manual_capture = parse_manual_capture(v)?,
                _ => {
                    if metadata_param(&mut p.metadata, k, v)? {
                    } else if !IGNORED_PARAMS
                        .iter()
                        .any(|ig| k == ig || k.starts_with(&format!("{ig}[")))
                    {
                        return Err(ApiError::invalid(
                            "parameter_unknown",
                            k,
                            format!("Received unknown parameter: {k}"),
                        ));
                    }
                }
            }
        }
        p.amount = parse_create_amount(amount)?;
        p.currency = parse_currency(currency)?;
        if p.off_session && !p.confirm {
            return Err(ApiError::invalid(
                "parameter_invalid_string",
                "off_session",
                "You may only specify `off_session` when `confirm` is true.",
            ));
        }
        p.metadata.0.shrink_to_fit();
        if let Some(pm) = &p.payment_method {
            if test_card(pm).is_none() {
                return Err(ApiError::invalid(
                    "resource_missing",
                    "payment_method",
                    format!("No such PaymentMethod: '{pm}'"),
                ));
            }
        }
        if p.confirm && p.payment_method.is_none() {
            return Err(ApiError::invalid(
                "parameter_missing",
                "payment_method",
                "You cannot confirm this PaymentIntent because it's missing a payment method.",
            ));
        }
        Ok(p)
    }
}

/// A pending transition of a `processing` PaymentIntent.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Settlement {
    pub at_ms: i64,
    pub succeeds: bool,
}

/// One stored PaymentIntent.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PaymentIntent {
    pub id: String,
    pub client_secret: String,
    pub params: CreateParams,
    /// The payment method currently attached (cleared by a decline).
    pub payment_method: Option<String>,
    /// One of [`STATUSES`].
    pub status: &'static str,
    pub latest_charge: Option<String>,
    /// Boxed: only a declined PaymentIntent has one.
    pub last_payment_error: Option<Box<Value>>,
    pub created_ms: i64,
    pub settlement: Option<Settlement>,
    pub idempotency_key: Option<String>,
    /// Boxed: only a canceled PaymentIntent has one.
    pub canceled: Option<Box<Cancellation>>,
    /// Boxed: only an authorized `capture_method=manual` PaymentIntent has one.
    pub hold: Option<Box<Hold>>,
}

/// The result of a create that executed.
pub(crate) enum CreateOutcome {
    Ok,
    Declined {
        code: &'static str,
        decline_code: &'static str,
        message: &'static str,
    },
}

impl PaymentIntent {
    /// Builds a PaymentIntent and runs confirmation if requested.
    /// `charge_id` is used if a charge is attempted.
    pub(crate) fn create(
        id: String,
        client_secret: String,
        charge_id: String,
        params: CreateParams,
        idempotency_key: Option<String>,
        now_ms: i64,
        settle_ms: i64,
    ) -> (Self, CreateOutcome) {
        let mut pi = PaymentIntent {
            id,
            client_secret,
            payment_method: params.payment_method.clone(),
            status: "",
            latest_charge: None,
            last_payment_error: None,
            created_ms: now_ms,
            settlement: None,
            idempotency_key,
            params,
            canceled: None,
            hold: None,
        };
        let card = pi.payment_method.as_deref().and_then(test_card);
        let mut outcome = CreateOutcome::Ok;
        let status = match (pi.params.confirm, card) {
            (_, None) => "requires_payment_method",
            (false, Some(_)) => "requires_confirmation",
            (true, Some(TestCard::Succeeds)) => {
                pi.latest_charge = Some(charge_id);
                pi.paid_status()
            }
            (true, Some(TestCard::ProcessingThen { succeeds })) => {
                pi.latest_charge = Some(charge_id);
                pi.settlement = Some(Settlement {
                    at_ms: now_ms.saturating_add(settle_ms),
                    succeeds,
                });
                "processing"
            }
            (true, Some(TestCard::RequiresAction)) if !pi.params.off_session => "requires_action",
            (true, Some(TestCard::AlwaysRequiresAction)) => "requires_action",
            (true, Some(TestCard::RequiresAction)) => {
                outcome = pi.fail(
                    None,
                    "authentication_required",
                    "authentication_required",
                    "Your card was declined. This transaction requires authentication.",
                );
                "requires_payment_method"
            }
            (
                true,
                Some(TestCard::Declined {
                    decline_code,
                    message,
                }),
            ) => {
                outcome = pi.fail(Some(charge_id), "card_declined", decline_code, message);
                "requires_payment_method"
            }
        };
        pi.status = status;
        (pi, outcome)
    }

    fn fail(
        &mut self,
        charge: Option<String>,
        code: &'static str,
        decline_code: &'static str,
        message: &'static str,
    ) -> CreateOutcome {
        let mut err = json!({
            "type": "card_error",
            "code": code,
            "decline_code": decline_code,
            "message": message,
            "payment_method": { "id": self.payment_method, "object": "payment_method", "type": "card" },
        });
        if let Some(ch) = &charge {
            err["charge"] = json!(ch);
        }
        self.last_payment_error = Some(Box::new(err));
        self.latest_charge = charge;
        self.payment_method = None;
        CreateOutcome::Declined {
            code,
            decline_code,
            message,
        }
    }

    /// Applies a due settlement (`processing` → final status).
    pub(crate) fn settle(&mut self, now_ms: i64) {
        if let Some(s) = &self.settlement {
            if now_ms >= s.at_ms {
                let succeeds = s.succeeds;
                self.settlement = None;
                if succeeds {
                    self.status = self.paid_status();
                } else {
                    self.fail(
                        self.latest_charge.clone(),
                        "payment_intent_payment_attempt_failed",
                        "generic_decline",
                        "The payment failed while processing.",
                    );
                    self.status = "requires_payment_method";
                }
            }
        }
    }

    /// The status of a payment the card accepted: `succeeded`, or `requires_capture` for a
    /// `capture_method=manual` intent (authorized, not captured).
    fn paid_status(&self) -> &'static str {
        if self.params.manual_capture {
            "requires_capture"
        } else {
            "succeeded"
        }
    }

    /// Records the authorization of a `requires_capture` intent made at `now_ms` (once): the
    /// card's `capture_before` and the moment Stripe cancels it uncaptured (the earlier of
    /// `created + expiry_ms` and `capture_before`). Its expiry, if it has a new hold.
    pub(crate) fn hold_authorized(&mut self, now_ms: i64, expiry_ms: i64) -> Option<i64> {
        if self.status != "requires_capture" || self.hold.is_some() {
            return None;
        }
        let window = capture_window_ms(
            self.params.payment_method.as_deref(),
            self.params.off_session,
        );
        let capture_before_ms = now_ms.saturating_add(window);
        let expires_ms = self
            .created_ms
            .saturating_add(expiry_ms)
            .min(capture_before_ms);
        self.hold = Some(Box::new(Hold {
            capture_before_ms,
            expires_ms,
            captured: None,
        }));
        Some(expires_ms)
    }

    /// What the charge received: the captured amount, all of it for an automatic payment that
    /// succeeded, else nothing.
    pub(crate) fn amount_received(&self) -> i64 {
        match self.hold.as_ref().and_then(|h| h.captured) {
            Some(captured) => captured,
            None if self.status == "succeeded" => self.params.amount,
            None => 0,
        }
    }

    /// What the charge gave back without a refund: the uncaptured rest of a partial capture, or
    /// the whole authorization once canceled (or expired) uncaptured.
    pub(crate) fn amount_released(&self) -> i64 {
        match self.hold.as_ref().map(|h| h.captured) {
            Some(Some(captured)) => self.params.amount - captured,
            Some(None) if self.status == "canceled" => self.params.amount,
            _ => 0,
        }
    }

    /// What a capture may still take: the whole amount while `requires_capture`.
    pub(crate) fn amount_capturable(&self) -> i64 {
        if self.status == "requires_capture" {
            self.params.amount
        } else {
            0
        }
    }

    /// Captures `amount` of the authorization (the caller checked the status and the amount):
    /// `succeeded`, the rest of the hold released.
    pub(crate) fn capture(&mut self, amount: i64) {
        self.status = "succeeded";
        if let Some(hold) = &mut self.hold {
            hold.captured = Some(amount);
        }
    }

    /// Cancels it (the caller checked [`cancelable`]): no one can confirm it any more.
    pub(crate) fn cancel(&mut self, reason: Option<&'static str>, now_ms: i64) {
        self.status = "canceled";
        self.settlement = None;
        self.canceled = Some(Box::new(Cancellation {
            at_ms: now_ms,
            reason,
        }));
    }

    /// The customer confirms it on Stripe.js with the client secret (the recovery Stripe
    /// documents for `authentication_required`), with the payment method the intent was made
    /// for, and the payment succeeds (the caller checked [`confirmable`]). `charge_id` is the
    /// new charge.
    pub(crate) fn confirm_by_customer(&mut self, charge_id: String) {
        self.status = self.paid_status();
        self.payment_method = self.params.payment_method.clone();
        self.last_payment_error = None;
        self.latest_charge = Some(charge_id);
        self.settlement = None;
    }

    /// `manual` or `automatic`.
    pub(crate) fn capture_method(&self) -> &'static str {
        if self.params.manual_capture {
            "manual"
        } else {
            "automatic"
        }
    }

    /// Stripe's JSON representation as text: the bytes `self.to_json().to_string()` writes,
    /// without building the tree.
    pub(crate) fn json_string(&self) -> String {
        serde_json::to_string(&self.view()).unwrap_or_default()
    }

    /// What [`PaymentIntent::to_json`] holds, borrowed, for writing it.
    pub(crate) fn view(&self) -> PaymentIntentJson<'_> {
        let p = &self.params;
        PaymentIntentJson {
            amount: p.amount,
            amount_capturable: self.amount_capturable(),
            amount_received: self.amount_received(),
            canceled_at: self.canceled.as_ref().map(|c| c.at_ms.div_euclid(1000)),
            cancellation_reason: self.canceled.as_ref().and_then(|c| c.reason),
            capture_method: self.capture_method(),
            client_secret: &self.client_secret,
            confirmation_method: "automatic",
            created: self.created_ms.div_euclid(1000),
            currency: &p.currency,
            customer: &p.customer,
            description: &p.description,
            id: &self.id,
            last_payment_error: self.last_payment_error.as_deref(),
            latest_charge: &self.latest_charge,
            livemode: false,
            metadata: &p.metadata,
            next_action: (self.status == "requires_action").then_some(NextAction {
                kind: "use_stripe_sdk",
                use_stripe_sdk: UseStripeSdk {
                    stripe_js: "",
                    kind: "three_d_secure_redirect",
                },
            }),
            object: "payment_intent",
            payment_method: &self.payment_method,
            payment_method_types: ["card"],
            receipt_email: None,
            setup_future_usage: None,
            status: self.status,
        }
    }

    /// Stripe's JSON representation as a `Value` tree: the oracle the tests hold the directly
    /// written texts ([`PaymentIntent::json_string`], a decline's answer) to.
    #[cfg(test)]
    pub(crate) fn to_json(&self) -> Value {
        let p = &self.params;
        let next_action = (self.status == "requires_action").then(|| {
            json!({ "type": "use_stripe_sdk", "use_stripe_sdk": { "type": "three_d_secure_redirect", "stripe_js": "" } })
        });
        json!({
            "id": self.id,
            "object": "payment_intent",
            "amount": p.amount,
            "amount_capturable": if self.status == "requires_capture" { p.amount } else { 0 },
            "amount_received": match self.hold.as_ref().and_then(|h| h.captured) {
                Some(captured) => captured,
                None if self.status == "succeeded" => p.amount,
                None => 0,
            },
            "canceled_at": self.canceled.as_ref().map(|c| c.at_ms.div_euclid(1000)),
            "cancellation_reason": self.canceled.as_ref().and_then(|c| c.reason),
            "capture_method": if p.manual_capture { "manual" } else { "automatic" },
            "client_secret": self.client_secret,
            "confirmation_method": "automatic",
            "created": self.created_ms.div_euclid(1000),
            "currency": p.currency,
            "customer": p.customer,
            "description": p.description,
            "last_payment_error": self.last_payment_error,
            "latest_charge": self.latest_charge,
            "livemode": false,
            "metadata": p.metadata,
            "next_action": next_action,
            "payment_method": self.payment_method,
            "payment_method_types": ["card"],
            "receipt_email": null,
            "setup_future_usage": null,
            "status": self.status,
        })
    }
}

/// A PaymentIntent's JSON, borrowed from it: the fields in key order, as a `serde_json::Map`
/// keeps them, so its text is byte for byte [`PaymentIntent::to_json`]'s.
#[derive(Serialize)]
pub(crate) struct PaymentIntentJson<'a> {
    amount: i64,
    amount_capturable: i64,
    amount_received: i64,
    canceled_at: Option<i64>,
    cancellation_reason: Option<&'static str>,
    capture_method: &'static str,
    client_secret: &'a str,
    confirmation_method: &'static str,
    created: i64,
    currency: &'a str,
    customer: &'a Option<String>,
    description: &'a Option<String>,
    id: &'a str,
    last_payment_error: Option<&'a Value>,
    latest_charge: &'a Option<String>,
    livemode: bool,
    metadata: &'a Metadata,
    next_action: Option<NextAction>,
    object: &'static str,
    payment_method: &'a Option<String>,
    payment_method_types: [&'static str; 1],
    receipt_email: Option<()>,
    setup_future_usage: Option<()>,
    status: &'static str,
}

#[derive(Serialize)]
pub(crate) struct NextAction {
    #[serde(rename = "type")]
    kind: &'static str,
    use_stripe_sdk: UseStripeSdk,
}

#[derive(Serialize)]
pub(crate) struct UseStripeSdk {
    stripe_js: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The borrowed view writes the bytes the JSON tree writes, in every state.
    #[test]
    fn the_json_text_is_the_trees() {
        let cards = [
            "pm_card_visa",
            "pm_card_chargeDeclined",
            "pm_card_processing_succeeds",
            "pm_card_processing_fails",
            "pm_card_threeDSecureRequired",
            "pm_card_sim_requiresAction",
        ];
        for (i, pm) in cards.iter().enumerate() {
            for off_session in ["true", "false"] {
                let mut f = vec![
                    ("amount", "4200"),
                    ("currency", "EUR"),
                    ("customer", "cus_\"q\"\n"),
                    ("payment_method", pm),
                    ("confirm", "true"),
                    ("off_session", off_session),
                    ("metadata[order_id]", "o-1"),
                    ("metadata[operation_id]", "op-é"),
                ];
                if i % 2 == 0 {
                    f.push(("description", "a \\ description"));
                }
                let p = CreateParams::parse(&form(&f)).unwrap();
                let (mut pi, _) = PaymentIntent::create(
                    "pi_1".into(),
                    "pi_1_secret_x".into(),
                    "ch_1".into(),
                    p,
                    Some("key".into()),
                    1_700_000_000_999,
                    600_000,
                );
                assert_eq!(pi.json_string(), pi.to_json().to_string(), "{pm}");
                let mut canceled = pi.clone();
                pi.settle(1_800_000_000_000);
                assert_eq!(pi.json_string(), pi.to_json().to_string(), "{pm} settled");
                canceled.cancel(Some("abandoned"), 1_700_000_100_999);
                assert_eq!(
                    canceled.json_string(),
                    canceled.to_json().to_string(),
                    "{pm} canceled"
                );
                assert_eq!(canceled.to_json()["canceled_at"], 1_700_000_100);
                assert_eq!(canceled.to_json()["cancellation_reason"], "abandoned");
            }
        }
        let bare = CreateParams::parse(&form(&[("amount", "5"), ("currency", "usd")])).unwrap();
        let (pi, _) =
            PaymentIntent::create("pi_2".into(), "s".into(), "ch".into(), bare, None, 0, 0);
        assert_eq!(pi.json_string(), pi.to_json().to_string());
    }

    fn form(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn validation_errors_name_the_param() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("currency", "usd")], "amount"),
            (&[("amount", "x"), ("currency", "usd")], "amount"),
            (&[("amount", "0"), ("currency", "usd")], "amount"),
            (&[("amount", "5")], "currency"),
            (&[("amount", "5"), ("currency", "dollars")], "currency"),
            (
                &[
                    ("amount", "5"),
                    ("currency", "usd"),
                    ("payment_method", "pm_nope"),
                ],
                "payment_method",
            ),
            (
                &[("amount", "5"), ("currency", "usd"), ("confirm", "maybe")],
                "confirm",
            ),
            (
                &[("amount", "5"), ("currency", "usd"), ("bogus", "1")],
                "bogus",
            ),
        ];
        for (f, param) in cases {
            let e = CreateParams::parse(&form(f)).unwrap_err();
            assert_eq!(e.status, 400);
            assert_eq!(e.param.as_deref(), Some(*param), "{f:?}");
        }
    }

    /// A manual capture's states (authorized, partly captured, expired) write the tree's bytes,
    /// and its hold's deadline is the earlier of the window and the card's `capture_before`.
    #[test]
    fn a_manual_capture_writes_the_trees_json_and_holds_until_its_deadline() {
        let f = |pm: &str, off: &str| {
            let mut f = form(&[
                ("amount", "1000"),
                ("currency", "usd"),
                ("payment_method", pm),
                ("confirm", "true"),
                ("off_session", off),
                ("capture_method", "manual"),
            ]);
            f.sort();
            CreateParams::parse(&f).unwrap()
        };
        let make =
            |p| PaymentIntent::create("pi_1".into(), "s".into(), "ch".into(), p, None, 0, 0).0;
        let mut pi = make(f("pm_card_visa", "true"));
        assert_eq!(pi.status, "requires_capture");
        assert_eq!(
            pi.hold_authorized(0, UNCAPTURED_EXPIRY_MS),
            Some(VISA_MIT_CAPTURE_WINDOW_MS)
        );
        assert_eq!(pi.hold_authorized(0, UNCAPTURED_EXPIRY_MS), None, "once");
        assert_eq!(pi.json_string(), pi.to_json().to_string());
        assert_eq!(pi.to_json()["amount_capturable"], 1000);
        let mut expired = pi.clone();
        pi.capture(400);
        assert_eq!(pi.json_string(), pi.to_json().to_string());
        assert_eq!((pi.amount_received(), pi.amount_released()), (400, 600));
        expired.cancel(Some("automatic"), 5);
        assert_eq!(expired.json_string(), expired.to_json().to_string());
        assert_eq!(
            (expired.amount_received(), expired.amount_released()),
            (0, 1000)
        );
        let mut on_session = make(f("pm_card_amex", "false"));
        assert_eq!(
            on_session.hold_authorized(0, 3_600_000),
            Some(3_600_000),
            "the window first"
        );
        assert_eq!(
            on_session.hold.unwrap().capture_before_ms,
            UNCAPTURED_EXPIRY_MS
        );
    }

    #[test]
    fn processing_settles_lazily() {
        let p = CreateParams::parse(&form(&[
            ("amount", "5"),
            ("currency", "USD"),
            ("payment_method", "pm_card_processing_fails"),
            ("confirm", "true"),
            ("metadata[operation_id]", "op"),
        ]))
        .unwrap();
        assert_eq!(p.currency, "usd");
        let (mut pi, _) = PaymentIntent::create(
            "pi_1".into(),
            "s".into(),
            "ch_1".into(),
            p,
            None,
            1_000,
            600_000,
        );
        assert_eq!(pi.status, "processing");
        pi.settle(600_999);
        assert_eq!(pi.status, "processing");
        pi.settle(601_000);
        assert_eq!(pi.status, "requires_payment_method");
        assert!(pi.last_payment_error.is_some());
        assert_eq!(pi.to_json()["metadata"]["operation_id"], "op");
    }
}
