//! Stripe in process: a [`PaymentGateway`] that drives the Stripe simulator's engine directly
//! (its idempotency layer, ledger, search lag and fault engine), without sockets or sleeps.
//!
//! It behaves as the production client [`charge_once::adapters::stripe::StripeGateway`] does over
//! HTTP: the same form, the same `Idempotency-Key`, the same in-call retry rule (a lost answer, a
//! 409 or a 429 is retried once with the same key, and a "nothing happened" after a lost answer
//! is ambiguous), and the same classification of answers (a copy of the production client's
//! private `classify`: a differential test of the two against the same scripted faults is still to
//! be written; `--stripe http` runs the production client against the same engine meanwhile).
//!
//! The `timeout` fault: Stripe answers after the client's timeout. The client gives up (an
//! ambiguous outcome), its retry finds the key still in flight (409), and the server then
//! finishes and commits — all within the call, at the same virtual instant.

use std::time::Duration;

use async_trait::async_trait;
use charge_once::ports::{CreatePaymentIntent, PaymentGateway};
use charge_once::{GatewayError, OperationId, PaymentIntent, PaymentIntentStatus, RetryCause};
use serde::Deserialize;
use stripe_sim::{Answer, CreateStart, Outcome, SlowCreate, StripeSim};

use crate::sched::yield_now;

pub struct InProcessGateway {
    pub sim: StripeSim,
    /// As `StripeConfig::max_network_retries`.
    pub max_retries: u32,
    /// As `StripeConfig::timeout`: a slower answer is a timeout.
    pub timeout: Duration,
}

#[derive(Deserialize)]
struct WirePaymentIntent {
    id: String,
    status: String,
}

#[derive(Deserialize)]
struct WireSearch {
    data: Vec<WirePaymentIntent>,
}

#[derive(Default, Deserialize)]
struct WireErrorBody {
    error: WireError,
}

#[derive(Default, Deserialize)]
struct WireError {
    #[serde(rename = "type")]
    kind: Option<String>,
    code: Option<String>,
    decline_code: Option<String>,
    message: Option<String>,
    param: Option<String>,
    payment_intent: Option<WireErrorPaymentIntent>,
}

#[derive(Deserialize)]
struct WireErrorPaymentIntent {
    id: String,
}

type Attempt = Result<Answer, GatewayError>;

fn lost(what: &str) -> GatewayError {
    GatewayError::Ambiguous {
        detail: format!("no response: {what}"),
    }
}

/// As the production client's `worth_retrying`.
fn worth_retrying(answer: &Attempt) -> bool {
    match answer {
        Err(_) => true,
        Ok(a) => match a.should_retry {
            Some(flag) => flag,
            None => matches!(a.status, 409 | 429),
        },
    }
}

/// As the production client's `classify`: `Ok` is a 2xx body.
fn classify(a: Answer) -> Result<(bytes::Bytes, bool), GatewayError> {
    let status = a.status;
    if (200..300).contains(&status) {
        return Ok((a.body, a.replayed));
    }
    let Ok(WireErrorBody { error }) = serde_json::from_slice::<WireErrorBody>(&a.body) else {
        return Err(GatewayError::Ambiguous {
            detail: format!("HTTP {status} with an unreadable body"),
        });
    };
    let kind = error.kind.as_deref().unwrap_or("");
    let code = error.code.as_deref().unwrap_or("");
    let replayed = if a.replayed { " (replayed)" } else { "" };
    let detail = format!(
        "HTTP {status} {kind}{}{}: {}{replayed}",
        if code.is_empty() { "" } else { "/" },
        code,
        error.message.as_deref().unwrap_or("")
    );
    Err(match status {
        402 => GatewayError::Declined {
            code: error
                .decline_code
                .or(error.code)
                .unwrap_or_else(|| "card_error".into()),
            payment_intent_id: error.payment_intent.map(|pi| pi.id),
        },
        400 if kind == "idempotency_error" => GatewayError::KeyMisuse { detail },
        409 if code == "idempotency_key_in_use" => GatewayError::RetryLater {
            cause: RetryCause::KeyInUse,
            detail,
        },
        429 => GatewayError::RetryLater {
            cause: RetryCause::RateLimited,
            detail,
        },
        401 | 403 => GatewayError::RetryLater {
            cause: RetryCause::Configuration,
            detail,
        },
        409 | 500..=599 => GatewayError::Ambiguous { detail },
        _ => GatewayError::Rejected {
            detail,
            param: error.param,
        },
    })
}

fn settle(answer: Attempt, earlier_lost: bool) -> Result<(bytes::Bytes, bool), GatewayError> {
    match classify(answer?) {
        Err(GatewayError::RetryLater { detail, .. }) if earlier_lost => {
            Err(GatewayError::Ambiguous {
                detail: format!("an earlier attempt got no answer; then {detail}"),
            })
        }
        other => other,
    }
}

fn parse_pi(body: &[u8], replayed: bool) -> Result<PaymentIntent, GatewayError> {
    let pi: WirePaymentIntent =
        serde_json::from_slice(body).map_err(|_| GatewayError::Ambiguous {
            detail: "2xx with an unreadable PaymentIntent body".into(),
        })?;
    let mut intent = PaymentIntent::new(pi.id, PaymentIntentStatus::parse(&pi.status));
    intent.replayed = replayed;
    Ok(intent)
}

fn valid_payment_intent_id(id: &str) -> bool {
    id.strip_prefix("pi_").is_some_and(|rest| {
        !rest.is_empty()
            && rest.len() <= 250
            && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}

impl InProcessGateway {
    /// One call with the client's retry rule; `attempt` sends the request once.
    async fn call(
        &self,
        mut attempt: impl FnMut(&mut Vec<SlowCreate>) -> Attempt,
    ) -> Result<(bytes::Bytes, bool), GatewayError> {
        let mut slow = Vec::new();
        let mut tries = 0;
        let mut earlier_lost = false;
        let result = loop {
            let answer = attempt(&mut slow);
            if !(tries < self.max_retries && worth_retrying(&answer)) {
                break settle(answer, earlier_lost);
            }
            earlier_lost |= answer.is_err();
            tries += 1;
            // The back-off: virtual, but a point where others may run.
            yield_now().await;
        };
        // The slow requests the client gave up on finish now (committed, unanswered).
        for s in slow {
            let _ = s.complete();
        }
        result
    }
}

#[async_trait]
impl PaymentGateway for InProcessGateway {
    async fn create(&self, req: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
        let form = vec![
            (
                "amount".to_owned(),
                req.params.amount.minor_units().to_string(),
            ),
            (
                "currency".to_owned(),
                req.params.currency.as_str().to_owned(),
            ),
            (
                "customer".to_owned(),
                req.params.customer_id.as_str().to_owned(),
            ),
            (
                "payment_method".to_owned(),
                req.params.payment_method.as_str().to_owned(),
            ),
            ("confirm".to_owned(), "true".to_owned()),
            ("off_session".to_owned(), "true".to_owned()),
            (
                "metadata[operation_id]".to_owned(),
                req.operation_id.to_string(),
            ),
            (
                "metadata[order_id]".to_owned(),
                req.order_id.as_str().to_owned(),
            ),
        ];
        let key = req.idempotency_key.as_str();
        let (body, replayed) = self
            .call(
                |slow| match self.sim.create_in_process(Some(key), form.clone()) {
                    CreateStart::Done(Outcome::Answered(a)) => Ok(a),
                    CreateStart::Done(Outcome::Dropped) => Err(lost("connection lost")),
                    CreateStart::Slow(s) if s.latency() >= self.timeout => {
                        slow.push(s);
                        Err(lost("timeout"))
                    }
                    CreateStart::Slow(s) => match s.complete() {
                        Outcome::Answered(a) => Ok(a),
                        Outcome::Dropped => Err(lost("connection lost")),
                    },
                },
            )
            .await?;
        parse_pi(&body, replayed)
    }

    async fn retrieve(&self, id: &str) -> Result<PaymentIntent, GatewayError> {
        if !valid_payment_intent_id(id) {
            return Err(GatewayError::Rejected {
                detail: format!("not a PaymentIntent id: {id:?}"),
                param: Some("id".into()),
            });
        }
        let (body, _) = self.call(|_| Ok(self.sim.retrieve_in_process(id))).await?;
        parse_pi(&body, false)
    }

    async fn search_by_operation(
        &self,
        operation_id: &OperationId,
    ) -> Result<Vec<PaymentIntent>, GatewayError> {
        let query = charge_once::adapters::stripe::search_query(operation_id);
        let (body, _) = self
            .call(|_| Ok(self.sim.search_in_process(&query)))
            .await?;
        let found: WireSearch =
            serde_json::from_slice(&body).map_err(|_| GatewayError::Ambiguous {
                detail: "2xx with an unreadable search body".into(),
            })?;
        Ok(found
            .data
            .into_iter()
            .map(|pi| PaymentIntent::new(pi.id, PaymentIntentStatus::parse(&pi.status)))
            .collect())
    }
}
