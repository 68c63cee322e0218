//! `POST /orders/{order_id}/capture` with `{"amount"?}` and `POST /orders/{order_id}/cancel` with
//! `{"reason"?}`, and `GET` on the same paths: the capture of an authorization (a charge made
//! with `"capture": "manual"`), or the cancel of the order's charge, each exactly once, and never
//! both.
//!
//! Each is an operation of its own (kind `capture` / `cancel`, one cancel per order, one live or
//! succeeded capture per order: a capture Stripe refused for what it asked fails and gives the
//! authorization back, and a capture of another amount is then a record of its own,
//! `capture#<n>`, with its own operation id and key; `GET` shows the latest), each of the order's
//! latest charge attempt (the one `charge_of` reads: a failed capture or cancel of an earlier
//! attempt took an authorization that ended since, so it is never the answer to one asked now;
//! every answer names its `attempt`), recorded with its claim on the order's charge in one
//! conditional write (`OperationCreates::create_beside`): the charge names the one that took it, so a capture and a cancel asked at once can never both be
//! accepted. Then queued (message version 3); the charge function captures or cancels with the key
//! `capture-op:<operation_id>` / `cancel-op:<operation_id>`, reading the intent first on every
//! attempt after the first. A cancel of a charge never sent to Stripe is settled by the write
//! itself: the charge `failed`, nothing queued, no Stripe call ever.
//!
//! | answer | when | what changed |
//! |---|---|---|
//! | 202 `{operation_id, order_id, kind, status, amount, currency, attempt, queued}` | a new capture or cancel of the latest attempt's authorization (the body of an earlier attempt's failed capture too: a new one) | the operation written, the charge taken, one message sent |
//! | 200 `{…, status: "succeeded"}` | a cancel of a charge never sent | the cancel written settled and the charge `failed`, in one write; nothing sent |
//! | 200 (same body) | the same request again, same caller, of the same attempt | nothing written; still `pending`, the message is sent again |
//! | 409 `take_conflict` | a capture (cancel) already exists with another body, or another caller's | nothing |
//! | 409 `taken` | the other of the two took the authorization first | nothing |
//! | 409 `cancel_used` | a cancel of an order charged again whose one cancel record is an earlier attempt's (Stripe refused it, the authorization given back, then lapsed): capture the latest, or Stripe releases it at its deadline | nothing |
//! | 409 `too_many_captures` | Stripe refused 10 captures of the order's authorizations (the records are the order's, over all its attempts): cancel it | nothing |
//! | 409 `not_authorized_yet` / `in_flight` | capture: the charge is not authorized yet; cancel: it is at Stripe, not yet authorized | nothing |
//! | 409 `automatic_capture` / `captured` / `ended` | capture of an automatic charge; cancel of a captured charge (refund it instead); the charge already ended | nothing |
//! | 400 `over_authorized` | capture amount over what was authorized | nothing |
//! | 404 | no charge for this order, or another caller's order | nothing |
//! | 400 | invalid body (`amount` a positive integer of minor units, in the digits Stripe captures in the charge's currency: a three-decimal currency's last digit 0, ISK in hundreds; `reason` one of Stripe's) | nothing |
//! | GET 200 / 404 | where the order's latest capture (its cancel) stands, naming the `attempt` it acted on / none of the caller's | nothing |
//! | 503 | DynamoDB failed | nothing, or the operation (then `pending`: the reconciler sends it) |

use charge_core::charge::state::Taker;
use charge_core::store::TakeAuthorization;
use charge_core::store_rules::{ChargeClaim, Guard};
use charge_core::take::request::{CancelRequest, CancellationReason, CaptureRequest};
use charge_core::take::{self, TakeRefusal, TakeRequest};
use charge_core::{
    domain::{
        Amount, Fingerprint, OperationId, OperationKind, OrderId, Principal, ValidationError,
    },
    operation::{Operation, OperationKey, OperationStatus},
    time::Timestamp,
};
use serde_json::{json, Value};

use crate::door::{
    self, created_by, error, invalid, json_object, no_charge, read, reply, Answer, Beside,
    Checkout, Reply,
};

/// `POST`: a capture or a cancel (`kind`) of `order_id`'s charge, as `body` asks.
pub(crate) async fn create(
    deps: &Checkout,
    order_id: OrderId,
    kind: OperationKind,
    body: &str,
    caller: &Principal,
) -> Answer {
    let request = parse(&kind, body)?;
    let (kind, charge) = if kind.is_capture() {
        capture_asked(deps, &order_id, &request, caller).await?
    } else {
        (kind, None)
    };
    let door = Take {
        request,
        key: OperationKey::of_kind(order_id.clone(), kind),
    };
    door::create_from(deps, &door, &order_id, caller, charge).await
}

/// Which of the order's captures `request` is: the first that is not a failed one asked
/// otherwise, or of an earlier charge attempt than the order's latest. A capture Stripe refused
/// for what it asked failed and gave the authorization back, so another amount is a new
/// capture, `capture#<n>` with its own operation id and key (`capture-op:<operation_id>`); the
/// same body again is still that failed capture (200, as asked). A failed capture of an earlier
/// attempt took that attempt's authorization, which ended since: whatever its body, a capture
/// asked now is of the latest attempt's, a new one. A live or succeeded capture is the one
/// (only the latest attempt can have one: a capture holds its attempt until it ends, and a later
/// attempt starts only after a failed one that no capture or cancel holds): another body is
/// `take_conflict`, as ever.
///
/// Only a failed capture asked as this one needs the attempt the order is at: then the charge
/// the door decides on is read here (`charge_of`, as the door would right after) and handed
/// back with the kind, so no request reads it twice, and the reads of every other request are
/// the ones they always were (the captures, then the charge).
///
/// The capture records are the order's (`capture` to `capture#10`, whatever the attempt): the
/// store's key is the guard that makes each capture once, so the failed captures of earlier
/// attempts count towards [`OperationKind::MAX_CAPTURES`].
async fn capture_asked(
    deps: &Checkout,
    order_id: &OrderId,
    request: &TakeRequest,
    caller: &Principal,
) -> Result<(OperationKind, Option<Operation>), Reply> {
    let mut charge: Option<Operation> = None;
    for n in 1..=OperationKind::MAX_CAPTURES {
        let kind = OperationKind::Capture(n);
        let key = OperationKey::of_kind(order_id.clone(), kind.clone());
        let Some(earlier) = read(deps, &key).await? else {
            return Ok((kind, charge));
        };
        if earlier.status != OperationStatus::Failed {
            return Ok((kind, charge));
        }
        if !created_by(&earlier, caller) || earlier.fingerprint != request.fingerprint() {
            continue;
        }
        let latest = match &charge {
            Some(charge) => charge,
            None => charge.insert(door::callers_charge(deps, order_id, caller).await?),
        };
        if !door::of_earlier_attempt(&earlier, latest) {
            return Ok((kind, charge));
        }
    }
    Err(error(
        409,
        "too_many_captures",
        &format!(
            "Stripe refused {} captures of this order's authorizations: cancel it (POST /orders/{{order_id}}/cancel)",
            OperationKind::MAX_CAPTURES
        ),
        None,
    ))
}

/// The latest of the order's captures (`None`: none was asked): what `GET …/capture` shows.
async fn latest_capture(deps: &Checkout, order_id: &OrderId) -> Result<Option<Operation>, Reply> {
    let mut latest = None;
    for n in 1..=OperationKind::MAX_CAPTURES {
        let key = OperationKey::of_kind(order_id.clone(), OperationKind::Capture(n));
        match read(deps, &key).await? {
            Some(op) => latest = Some(op),
            None => break,
        }
    }
    Ok(latest)
}

/// A capture or a cancel asked: its record's key and the body.
struct Take {
    key: OperationKey,
    request: TakeRequest,
}

/// A capture or a cancel is recorded and takes the charge in one write: of the two, the first
/// to write is the one.
impl Beside for Take {
    type Refusal = TakeRefusal;
    type OnCharge = TakeAuthorization;

    fn key(&self) -> &OperationKey {
        &self.key
    }

    fn fingerprint(&self) -> Fingerprint {
        self.request.fingerprint()
    }

    fn decide(
        &self,
        deps: &Checkout,
        charge: &Operation,
        caller: &Principal,
        now: Timestamp,
    ) -> Result<(Operation, TakeAuthorization), TakeRefusal> {
        let operation_id = OperationId::new_random();
        let taker = Taker {
            capture: self.request.kind().is_capture(),
            operation_id,
        };
        let taking = take::take(charge, &self.request, taker, now)?;
        let op = Operation {
            operation_id,
            ..Operation::new_taking(
                charge.order_id.clone(),
                self.key.kind.clone(),
                self.request.fingerprint(),
                taking.params.clone(),
                caller.clone(),
                now,
                deps.pending_grace,
            )
        };
        // A cancel of a charge never sent is settled by its write: nothing to queue.
        let op = take::initial(op, &taking);
        Ok((op, taking.take))
    }

    fn claim(take: &TakeAuthorization) -> ChargeClaim<'_> {
        ChargeClaim::Take(take)
    }

    /// The charge moved on since it was read; not when it is no longer the charge it was.
    fn moved(guard: &Guard) -> bool {
        !matches!(guard, Guard::IsOperation(_) | Guard::IsCharge)
    }

    fn refused(refusal: TakeRefusal) -> Reply {
        let message = refusal.to_string();
        match refusal {
            TakeRefusal::NoCharge => no_charge(),
            TakeRefusal::AutomaticCapture => error(409, "automatic_capture", &message, None),
            TakeRefusal::NotAuthorizedYet(_) => error(409, "not_authorized_yet", &message, None),
            TakeRefusal::InFlight(_) => error(409, "in_flight", &message, None),
            TakeRefusal::Captured => error(409, "captured", &message, None),
            TakeRefusal::Ended(_) | TakeRefusal::NoPaymentIntent => {
                error(409, "ended", &message, None)
            }
            TakeRefusal::TakenBy(_) => error(409, "taken", &message, None),
            // Stripe would refuse it (400); refused here, the same 400 as a checkout's amount.
            TakeRefusal::Indivisible(problem) => invalid(vec![problem]),
            TakeRefusal::OverAuthorized { authorized, .. } => {
                let mut reply = error(400, "over_authorized", &message, None);
                reply.body["error"]["authorized"] = json!(authorized);
                reply
            }
        }
    }

    fn conflict(existing: &Operation) -> Reply {
        let what = existing.kind.as_str();
        error(
            409,
            "take_conflict",
            &format!("this order already has a {what} with a different amount or reason"),
            None,
        )
    }

    /// The order has one cancel record: a cancel Stripe refused on an earlier attempt (the
    /// only one a later attempt can follow: a cancel that released it ended the order) leaves
    /// none for the latest attempt's authorization.
    fn earlier_attempt(existing: &Operation, charge: &Operation) -> Reply {
        if existing.kind != OperationKind::Cancel {
            return door::earlier_attempt(existing, charge);
        }
        error(
            409,
            "cancel_used",
            &format!(
                "this order's one cancel was made on its charge attempt {} ({}), before the order was charged again: attempt {}'s authorization cannot be canceled through the API; capture it (POST /orders/{{order_id}}/capture), or Stripe releases it at its deadline",
                existing.params.charge_attempt().unwrap_or(1),
                existing.status.as_str(),
                charge.kind.attempt_no().unwrap_or(1),
            ),
            None,
        )
    }

    fn summary(op: &Operation) -> Value {
        summary(op)
    }
}

/// `GET`: where the capture (cancel) stands, from one strongly consistent read.
pub(crate) async fn status(
    deps: &Checkout,
    order_id: OrderId,
    kind: OperationKind,
    caller: &Principal,
) -> Answer {
    let what = kind.as_str();
    let op = if kind.is_capture() {
        latest_capture(deps, &order_id).await?
    } else {
        read(deps, &OperationKey::of_kind(order_id, kind)).await?
    };
    let op = op.filter(|op| created_by(op, caller)).ok_or_else(|| {
        error(
            404,
            &format!("{what}_not_found"),
            &format!("no {what} of this order"),
            None,
        )
    })?;
    let mut body = summary(&op);
    body["updated_at"] = json!(op.updated_at.to_rfc3339());
    body["payment_intent"] = json!(op.params.payment_intent());
    if let Some(review) = &op.review {
        body["review_reason"] = json!(review.reason);
    }
    Ok(reply(200, body))
}

/// A capture's body: `amount` (optional: all that was authorized); a cancel's: `reason`
/// (optional, Stripe's `cancellation_reason`). Nothing else.
fn parse(kind: &OperationKind, body: &str) -> Result<TakeRequest, Reply> {
    let body = if body.trim().is_empty() { "{}" } else { body };
    let obj = json_object(body)?;
    let allowed = match kind {
        OperationKind::Capture(_) => "amount",
        _ => "reason",
    };
    let mut problems: Vec<ValidationError> = obj
        .keys()
        .filter(|k| k.as_str() != allowed)
        .map(|k| ValidationError::new("body", format!("unknown field {k:?}")))
        .collect();
    let request = match kind {
        OperationKind::Capture(_) => TakeRequest::Capture(CaptureRequest {
            amount: match obj.get("amount") {
                None | Some(Value::Null) => None,
                Some(v) => v
                    .as_i64()
                    .ok_or_else(|| {
                        ValidationError::new("amount", "must be an integer number of minor units")
                    })
                    .and_then(Amount::new)
                    .map_err(|e| problems.push(e))
                    .ok(),
            },
        }),
        _ => TakeRequest::Cancel(CancelRequest {
            reason: match obj.get("reason") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => CancellationReason::parse(s)
                    .map_err(|e| problems.push(e))
                    .ok(),
                Some(_) => {
                    problems.push(ValidationError::new("reason", "must be a string"));
                    None
                }
            },
        }),
    };
    if !problems.is_empty() {
        return Err(invalid(problems));
    }
    Ok(request)
}

fn summary(op: &Operation) -> Value {
    json!({
        "operation_id": op.operation_id.to_string(),
        "order_id": op.order_id.as_str(),
        "kind": op.kind.as_str(),
        "status": op.status.as_str(),
        "amount": op.params.amount().minor_units(),
        "currency": op.params.currency().as_str(),
        "attempt": op.params.charge_attempt().unwrap_or(1),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
    use aws_lambda_events::encodings::Body;
    use aws_lambda_events::http::Method;
    use charge_core::store::{Claim, ClaimRequest};
    use charge_core::store_rules::CANCELED_BEFORE_SENT;
    use charge_core::{
        domain::PaymentIntentId,
        operation::{Lease, LeaseToken, OperationStatus},
        time::{ManualClock, Timestamp},
    };
    use charge_once::memory::{MemoryQueue, MemoryStore};

    use lambda_runtime::{Context, LambdaEvent};

    use super::*;
    use crate::handler::handle;
    use charge_once::ports::{OperationLeases, OperationReads};

    const T: Timestamp = Timestamp::from_millis(1_800_000_000_000);

    fn event(file: &str) -> ApiGatewayV2httpRequest {
        let path = format!("{}/../../events/{file}", env!("CARGO_MANIFEST_DIR"));
        let raw = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&raw).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn with_body(file: &str, body: Value) -> ApiGatewayV2httpRequest {
        let mut req = event(file);
        req.body = Some(body.to_string());
        req
    }

    fn get(file: &str) -> ApiGatewayV2httpRequest {
        let mut req = event(file);
        req.request_context.http.method = Method::GET;
        req.body = None;
        req
    }

    struct Fixture {
        store: Arc<MemoryStore>,
        queue: Arc<MemoryQueue>,
        deps: Checkout,
    }

    fn fixture() -> Fixture {
        let clock = Arc::new(ManualClock::new(T));
        let store = Arc::new(MemoryStore::new());
        let queue = Arc::new(MemoryQueue::new(clock.clone()));
        let deps = Checkout {
            store: store.clone(),
            queue: queue.clone(),
            clock,
            pending_grace: Duration::from_secs(300),
            max_charge_attempts: Default::default(),
            metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
        };
        Fixture { store, queue, deps }
    }

    async fn call(f: &Fixture, req: ApiGatewayV2httpRequest) -> (i64, Value) {
        let resp = handle(&f.deps, LambdaEvent::new(req, Context::default())).await;
        let body = match resp.body {
            Some(Body::Text(t)) => serde_json::from_str(&t).unwrap(),
            other => panic!("expected a JSON body, got {other:?}"),
        };
        (resp.status_code, body)
    }

    fn charge(f: &Fixture) -> Operation {
        f.store
            .all()
            .into_iter()
            .find(|op| op.kind.is_charge())
            .expect("the order's charge")
    }

    /// ord-3003 checked out with `capture: manual`, as the charge function leaves it once Stripe
    /// holds it: authorized, 1250 usd, `pi_3003`, its deadline a week away.
    async fn authorized(f: &Fixture) -> Operation {
        let (status, body) = call(f, event("checkout-authorize.json")).await;
        assert_eq!(status, 202, "{body}");
        held(f)
    }

    /// The order's charge as the charge function leaves it once Stripe holds it (see
    /// [`authorized`]).
    fn held(f: &Fixture) -> Operation {
        let mut op = charge(f);
        op.status = OperationStatus::Authorized;
        op.external_id = Some(PaymentIntentId::parse("pi_3003").unwrap());
        op.first_attempted_at = Some(T);
        op.attempts = 1;
        op.params.charge_state_mut().unwrap().capture_before =
            Some(T.plus(Duration::from_secs(7 * 24 * 3600)));
        op.next_due_at = op.capture_before();
        f.store.put_for_tests(op.clone());
        op
    }

    /// `order`, checked out by `request`, then declined and charged again: its head `failed`
    /// naming attempt 2 as its latest, and attempt 2 (its own operation id, `pi_second`) as
    /// `second` leaves it; both written the way the door's write leaves them. Returns (head,
    /// attempt 2).
    async fn retried(
        f: &Fixture,
        request: &str,
        order: &str,
        second: impl FnOnce(&mut Operation),
    ) -> (Operation, Operation) {
        let (status, body) = call(f, event(request)).await;
        assert_eq!(status, 202, "{body}");
        charge_again(f, order, None, second).await
    }

    /// `order`'s charge as it stands, ended `failed` (with `last_error`; its intent
    /// `pi_declined` if it had none) and charged again: attempt 2 (its own operation id,
    /// `pi_second`) as `second` leaves it, the head naming it as its latest; both written the
    /// way the door's write leaves them. Returns (head, attempt 2).
    async fn charge_again(
        f: &Fixture,
        order: &str,
        last_error: Option<&str>,
        second: impl FnOnce(&mut Operation),
    ) -> (Operation, Operation) {
        let order_id = OrderId::parse(order).unwrap();
        let mut head = f
            .store
            .get(&OperationKey::charge(order_id.clone()))
            .await
            .unwrap()
            .unwrap();
        let mut attempt = Operation {
            operation_id: charge_core::domain::OperationId::new_random(),
            kind: OperationKind::Charge(2),
            external_id: Some(PaymentIntentId::parse("pi_second").unwrap()),
            first_attempted_at: Some(T),
            attempts: 1,
            ..head.clone()
        };
        second(&mut attempt);
        head.status = OperationStatus::Failed;
        head.last_error = last_error.map(str::to_owned);
        head.external_id
            .get_or_insert_with(|| PaymentIntentId::parse("pi_declined").unwrap());
        head.first_attempted_at = Some(T);
        head.next_due_at = None;
        head.settled_at = Some(T);
        head.params.charge_state_mut().unwrap().latest_attempt = Some(2);
        f.store.put_for_tests(head.clone());
        f.store.put_for_tests(attempt.clone());
        (head, attempt)
    }

    async fn stored(f: &Fixture, op: &Operation) -> Operation {
        f.store.get(&op.key()).await.unwrap().unwrap()
    }

    /// On an order declined and paid by its second attempt, a refund reserves on attempt 2 and
    /// refunds its intent, naming the attempt on its record; the declined head is untouched.
    /// Its twin, the same refund while the latest attempt is the failed one, is refused as a
    /// refund of a failed charge always was, and writes nothing. (An order charged once: the
    /// refund tests of the handler, unchanged.)
    #[tokio::test]
    async fn a_refund_of_a_retried_order_reserves_on_the_paid_attempt() {
        let f = fixture();
        let (head, paid) = retried(&f, "checkout-valid.json", "ord-1001", |op| {
            op.status = OperationStatus::Succeeded;
            op.next_due_at = None;
            op.settled_at = Some(T);
        })
        .await;
        let (status, body) = call(&f, event("refund-valid.json")).await;
        assert_eq!(status, 202, "{body}");
        assert_eq!(stored(&f, &paid).await.refund_reserved(), 500);
        assert_eq!(
            stored(&f, &head).await,
            head,
            "the declined head is untouched"
        );
        let refund = f
            .store
            .all()
            .into_iter()
            .find(|op| op.kind.refund_id().is_some())
            .expect("the refund");
        assert_eq!(refund.charge_key(), paid.key());
        assert_eq!(
            refund.params.payment_intent().map(|pi| pi.as_str()),
            Some("pi_second")
        );

        let f = fixture();
        let (head, failed) = retried(&f, "checkout-valid.json", "ord-1001", |op| {
            op.status = OperationStatus::Failed;
            op.next_due_at = None;
            op.settled_at = Some(T);
        })
        .await;
        let before = f.store.all();
        let (status, body) = call(&f, event("refund-valid.json")).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (409, Some("charge_not_succeeded")),
            "{body}"
        );
        assert_eq!(f.store.all(), before, "nothing written");
        assert_eq!(stored(&f, &failed).await.refund_reserved(), 0);
        assert_eq!(stored(&f, &head).await.refund_reserved(), 0);
    }

    /// On an order whose second attempt holds the authorization, a capture takes attempt 2 and
    /// captures its intent; a cancel after it is refused (the capture took attempt 2), and
    /// nothing touches the declined head.
    #[tokio::test]
    async fn a_capture_of_a_retried_order_takes_the_latest_attempt_s_authorization() {
        let f = fixture();
        let (head, held) = retried(&f, "checkout-authorize.json", "ord-3003", |op| {
            op.status = OperationStatus::Authorized;
            op.params.charge_state_mut().unwrap().capture_before =
                Some(T.plus(Duration::from_secs(7 * 24 * 3600)));
            op.next_due_at = op.capture_before();
        })
        .await;
        let (status, body) = call(&f, event("capture-valid.json")).await;
        assert_eq!(status, 202, "{body}");
        let taken = stored(&f, &held).await.taken_by().expect("attempt 2 taken");
        assert!(taken.capture);
        assert_eq!(
            taken.operation_id.to_string(),
            body["operation_id"].as_str().unwrap()
        );
        let capture = capture_no(&f, 1).expect("the capture");
        assert_eq!(capture.charge_key(), held.key());
        assert_eq!(
            capture.params.payment_intent().map(|pi| pi.as_str()),
            Some("pi_second")
        );
        let (status, cancel) = call(&f, event("cancel-valid.json")).await;
        assert_eq!(
            (status, cancel["error"]["code"].as_str()),
            (409, Some("taken")),
            "{cancel}"
        );
        assert_eq!(
            stored(&f, &head).await,
            head,
            "the declined head is untouched"
        );
    }

    #[tokio::test]
    async fn an_authorization_is_captured_once_and_never_also_canceled() {
        let f = fixture();
        authorized(&f).await;
        let (status, body) = call(&f, event("capture-valid.json")).await;
        assert_eq!(status, 202, "{body}");
        assert_eq!(
            (
                body["kind"].as_str(),
                body["amount"].as_i64(),
                body["queued"].as_bool()
            ),
            (Some("capture"), Some(1000), Some(true))
        );
        assert_eq!(f.queue.len(), 2, "the charge's message and the capture's");
        let taken = charge(&f).taken_by().expect("the capture took the charge");
        assert!(taken.capture);
        assert_eq!(
            taken.operation_id.to_string(),
            body["operation_id"].as_str().unwrap()
        );
        // The same request again: the same capture.
        let (status, again) = call(&f, event("capture-valid.json")).await;
        assert_eq!(
            (status, &again["operation_id"]),
            (200, &body["operation_id"])
        );
        // Another amount: a conflict. A cancel now: refused, the capture took it. Nothing written.
        let before = f.store.all();
        let (status, other) =
            call(&f, with_body("capture-valid.json", json!({"amount": 900}))).await;
        assert_eq!(
            (status, other["error"]["code"].as_str()),
            (409, Some("take_conflict"))
        );
        let (status, cancel) = call(&f, event("cancel-valid.json")).await;
        assert_eq!(
            (status, cancel["error"]["code"].as_str()),
            (409, Some("taken")),
            "{cancel}"
        );
        assert_eq!(f.store.all(), before, "nothing written by either refusal");
        // GET says where it stands; the charge's status names who took it.
        let (status, got) = call(&f, get("capture-valid.json")).await;
        assert_eq!(
            (status, got["status"].as_str()),
            (200, Some("pending")),
            "{got}"
        );
        let (_, charge_status) = call(&f, {
            let mut r = get("checkout-status.json");
            r.path_parameters
                .insert("order_id".into(), "ord-3003".into());
            r.raw_path = Some("/orders/ord-3003/charge".into());
            r
        })
        .await;
        assert_eq!(
            (
                charge_status["status"].as_str(),
                charge_status["taken_by"].as_str()
            ),
            (Some("authorized"), Some("capture")),
            "{charge_status}"
        );
    }

    /// Bad input and the wrong states are refused and write nothing; each has its twin accepted
    /// in the same setup.
    #[tokio::test]
    async fn refusals_write_nothing_and_their_twins_are_accepted() {
        let f = fixture();
        let (status, _) = call(&f, event("checkout-authorize.json")).await;
        assert_eq!(status, 202);
        let before = f.store.all();
        // Not authorized yet (pending): a capture waits for it.
        let (status, body) = call(&f, event("capture-valid.json")).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (409, Some("not_authorized_yet"))
        );
        assert_eq!(f.store.all(), before);
        held(&f);
        let before = f.store.all();
        let cases = [
            (json!({"amount": 1251}), 400, "over_authorized"),
            (json!({"amount": 0}), 400, "invalid_request"),
            (json!({"amount": 10, "reason": "x"}), 400, "invalid_request"),
            (json!({"amount": "10"}), 400, "invalid_request"),
        ];
        for (body, status, code) in cases {
            let (got, answer) = call(&f, with_body("capture-valid.json", body.clone())).await;
            assert_eq!(got, status, "{body}: {answer}");
            if code != "invalid_request" {
                assert_eq!(answer["error"]["code"].as_str(), Some(code), "{answer}");
            }
            assert_eq!(f.store.all(), before, "{body}: nothing written");
        }
        let (status, bad) = call(
            &f,
            with_body("cancel-valid.json", json!({"reason": "bored"})),
        )
        .await;
        assert_eq!(status, 400, "{bad}");
        assert_eq!(f.store.all(), before);
        // The twin: all that was authorized, asked without an amount.
        let (status, ok) = call(&f, with_body("capture-valid.json", json!({}))).await;
        assert_eq!((status, ok["amount"].as_i64()), (202, Some(1250)), "{ok}");
    }

    #[tokio::test]
    async fn a_capture_of_an_automatic_charge_is_refused() {
        let f = fixture();
        let (status, _) = call(&f, event("checkout-valid.json")).await;
        assert_eq!(status, 202);
        let mut op = charge(&f);
        op.status = OperationStatus::Succeeded;
        op.external_id = Some(PaymentIntentId::parse("pi_1001").unwrap());
        op.next_due_at = None;
        f.store.put_for_tests(op);
        let mut capture = event("capture-valid.json");
        capture
            .path_parameters
            .insert("order_id".into(), "ord-1001".into());
        capture.raw_path = Some("/orders/ord-1001/capture".into());
        let (status, body) = call(&f, capture).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (409, Some("automatic_capture"))
        );
        let mut cancel = event("cancel-valid.json");
        cancel
            .path_parameters
            .insert("order_id".into(), "ord-1001".into());
        cancel.raw_path = Some("/orders/ord-1001/cancel".into());
        let (status, body) = call(&f, cancel).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (409, Some("captured")),
            "{body}"
        );
    }

    /// A cancel of a charge never sent stops it in the door's own write: the charge `failed`, the
    /// cancel `succeeded`, nothing queued; a claim afterwards finds it settled and calls nobody.
    /// The twin: once a claim made the charge attempted, the cancel is refused (in flight).
    #[tokio::test]
    async fn a_cancel_before_the_charge_is_sent_stops_it() {
        let f = fixture();
        let (status, _) = call(&f, event("checkout-authorize.json")).await;
        assert_eq!(status, 202);
        let queued = f.queue.len();
        let (status, body) = call(&f, event("cancel-valid.json")).await;
        assert_eq!(
            (status, body["status"].as_str()),
            (200, Some("succeeded")),
            "{body}"
        );
        assert_eq!(f.queue.len(), queued, "nothing queued");
        let stopped = charge(&f);
        assert_eq!(stopped.status, OperationStatus::Failed);
        assert_eq!(stopped.last_error.as_deref(), Some(CANCELED_BEFORE_SENT));
        let claim = ClaimRequest {
            key: stopped.key(),
            operation_id: stopped.operation_id,
            lease: Lease {
                token: LeaseToken::new_random(),
                expires_at: T.plus(Duration::from_secs(60)),
            },
            now: T,
        };
        assert!(matches!(
            f.store.claim(&claim).await.unwrap(),
            Claim::Settled(_)
        ));
        // The same cancel again: the same, settled.
        let (status, again) = call(&f, event("cancel-valid.json")).await;
        assert_eq!(
            (status, &again["operation_id"]),
            (200, &body["operation_id"])
        );

        let f = fixture();
        let (status, _) = call(&f, event("checkout-authorize.json")).await;
        assert_eq!(status, 202);
        let op = charge(&f);
        let claim = ClaimRequest {
            key: op.key(),
            operation_id: op.operation_id,
            lease: Lease {
                token: LeaseToken::new_random(),
                expires_at: T.plus(Duration::from_secs(60)),
            },
            now: T,
        };
        assert!(matches!(
            f.store.claim(&claim).await.unwrap(),
            Claim::Claimed(_)
        ));
        let before = f.store.all();
        let (status, body) = call(&f, event("cancel-valid.json")).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (409, Some("in_flight")),
            "{body}"
        );
        assert_eq!(f.store.all(), before);
    }

    /// The order's `n`-th capture as stored.
    fn capture_no(f: &Fixture, n: u32) -> Option<Operation> {
        f.store
            .all()
            .into_iter()
            .find(|op| op.kind == OperationKind::Capture(n))
    }

    /// The charge function's write for `taking` as it ends at Stripe: claimed, then settled
    /// `status` with the charge's authorization ended as `end`, in one fenced write.
    async fn settle_taking(
        f: &Fixture,
        taking: &Operation,
        status: OperationStatus,
        end: charge_core::store::AuthorizationOutcome,
    ) {
        use charge_core::store::{Recorded, SettleAuthorization};
        let token = LeaseToken::new_random();
        let claim = ClaimRequest {
            key: taking.key(),
            operation_id: taking.operation_id,
            lease: Lease {
                token,
                expires_at: T.plus(Duration::from_secs(60)),
            },
            now: T,
        };
        assert!(matches!(
            f.store.claim(&claim).await.unwrap(),
            Claim::Claimed(_)
        ));
        let record = charge_core::store::OutcomeRecord {
            key: taking.key(),
            operation_id: taking.operation_id,
            lease_token: token,
            status,
            external_id: None,
            last_error: None,
            review: None,
            next_due_at: None,
            now: T,
            stripe_refund_id: None,
            release: None,
            authorization: Some(SettleAuthorization {
                charge: taking.charge_key(),
                taker: Taker::of(&taking.kind, taking.operation_id).unwrap(),
                outcome: end,
                now: T,
            }),
            capture_before: None,
            amount_captured: None,
        };
        assert!(matches!(
            f.store.record(&record).await.unwrap(),
            Recorded::Written(_)
        ));
    }

    /// ord-3003 authorized, its capture of 1000 asked, then refused by Stripe for its amount:
    /// failed, the authorization given back.
    async fn refused_capture(f: &Fixture) -> Operation {
        use charge_core::store::AuthorizationOutcome::GivenBack;
        authorized(f).await;
        let (status, first) =
            call(f, with_body("capture-valid.json", json!({"amount": 1000}))).await;
        assert_eq!(status, 202, "{first}");
        let first_op = capture_no(f, 1).expect("the first capture");
        settle_taking(f, &first_op, OperationStatus::Failed, GivenBack).await;
        assert_eq!(charge(f).status, OperationStatus::Authorized);
        assert_eq!(charge(f).taken_by(), None, "given back");
        first_op
    }

    /// A capture Stripe refused for its amount gave the authorization back: the merchant can
    /// cancel it, or capture another amount, which is a capture of its own (`capture#2`, its
    /// own operation and key, message version 4). The same body as the refused one is still that
    /// one (200, failed); while the second is live, or once it succeeded, another is refused.
    #[tokio::test]
    async fn after_a_refused_capture_the_merchant_can_cancel_or_capture_again() {
        use charge_core::store::AuthorizationOutcome::Captured;
        use charge_once::ports::OperationMessage;

        // Cancel it.
        let f = fixture();
        refused_capture(&f).await;
        let (status, body) = call(&f, event("cancel-valid.json")).await;
        assert_eq!(
            (status, body["kind"].as_str()),
            (202, Some("cancel")),
            "{body}"
        );

        // Or capture another amount: a capture of its own.
        let f = fixture();
        let first = refused_capture(&f).await;
        let (status, same) =
            call(&f, with_body("capture-valid.json", json!({"amount": 1000}))).await;
        assert_eq!(
            (status, same["status"].as_str(), &same["operation_id"]),
            (200, Some("failed"), &json!(first.operation_id.to_string())),
            "the refused one asked again is the refused one: {same}"
        );
        let queued = f.queue.len();
        let (status, second) =
            call(&f, with_body("capture-valid.json", json!({"amount": 900}))).await;
        assert_eq!(
            (status, second["amount"].as_i64()),
            (202, Some(900)),
            "{second}"
        );
        let second_op = capture_no(&f, 2).expect("the second capture, capture#2");
        assert_ne!(second_op.operation_id, first.operation_id);
        assert_ne!(second_op.idempotency_key(), first.idempotency_key());
        assert_eq!(
            second_op.idempotency_key().as_str(),
            format!("capture-op:{}", second_op.operation_id)
        );
        assert_eq!(
            charge(&f).taken_by().map(|t| t.operation_id),
            Some(second_op.operation_id)
        );
        assert_eq!(f.queue.len(), queued + 1);
        let message = OperationMessage::for_operation(&second_op);
        assert_eq!(
            (message.v, message.kind.clone()),
            (4, OperationKind::Capture(2))
        );
        // GET shows the latest.
        let (_, got) = call(&f, get("capture-valid.json")).await;
        assert_eq!(got["operation_id"], second["operation_id"], "{got}");
        // While it is live: another amount is refused, nothing written.
        let before = f.store.all();
        let (status, third) =
            call(&f, with_body("capture-valid.json", json!({"amount": 800}))).await;
        assert_eq!(
            (status, third["error"]["code"].as_str()),
            (409, Some("take_conflict")),
            "{third}"
        );
        assert_eq!(f.store.all(), before);
        // Once it succeeded: nothing more to capture.
        settle_taking(
            &f,
            &second_op,
            OperationStatus::Succeeded,
            Captured(second_op.params.amount()),
        )
        .await;
        let before = f.store.all();
        let (status, fourth) =
            call(&f, with_body("capture-valid.json", json!({"amount": 800}))).await;
        assert_eq!(status, 409, "{fourth}");
        assert_eq!(f.store.all(), before);
        assert!(capture_no(&f, 3).is_none());
    }

    /// A capture belongs to the attempt it took: attempt 1's capture of 500, refused by Stripe
    /// (failed, the authorization given back), asked again on attempt 1 is still that one (200);
    /// once attempt 1's authorization lapsed and the order was charged again, the same body is a
    /// capture of attempt 2's authorization (202: its own record, operation id and key, attempt
    /// 2 taken), never attempt 1's failed one; asked again, it is that new capture (200).
    #[tokio::test]
    async fn a_capture_asked_of_a_later_attempt_is_that_attempt_s_own() {
        use charge_core::store::AuthorizationOutcome::GivenBack;
        use charge_core::store_rules::AUTHORIZATION_EXPIRED;

        let f = fixture();
        authorized(&f).await;
        let five_hundred = || with_body("capture-valid.json", json!({"amount": 500}));
        let (status, asked) = call(&f, five_hundred()).await;
        assert_eq!(status, 202, "{asked}");
        let refused = capture_no(&f, 1).expect("attempt 1's capture");
        settle_taking(&f, &refused, OperationStatus::Failed, GivenBack).await;
        // The same attempt: the same body is still the refused capture (today's rule, kept).
        let (status, same) = call(&f, five_hundred()).await;
        assert_eq!(
            (status, same["status"].as_str(), &same["operation_id"]),
            (
                200,
                Some("failed"),
                &json!(refused.operation_id.to_string())
            ),
            "{same}"
        );
        assert_eq!(same["attempt"], json!(1), "{same}");

        // Attempt 1 lapses uncaptured; the order is charged again and attempt 2 authorized.
        let (head, held) = charge_again(&f, "ord-3003", Some(AUTHORIZATION_EXPIRED), |op| {
            op.status = OperationStatus::Authorized;
            op.params.charge_state_mut().unwrap().capture_before =
                Some(T.plus(Duration::from_secs(7 * 24 * 3600)));
            op.next_due_at = op.capture_before();
        })
        .await;
        // GET shows the order's latest capture, naming the attempt it was of: attempt 1's.
        let (status, got) = call(&f, get("capture-valid.json")).await;
        assert_eq!(
            (status, &got["operation_id"], got["attempt"].as_u64()),
            (200, &json!(refused.operation_id.to_string()), Some(1)),
            "{got}"
        );
        let queued = f.queue.len();
        let (status, new) = call(&f, five_hundred()).await;
        assert_eq!(
            (status, new["status"].as_str(), new["attempt"].as_u64()),
            (202, Some("pending"), Some(2)),
            "attempt 2's own capture, not attempt 1's refused one: {new}"
        );
        let capture = capture_no(&f, 2).expect("attempt 2's capture, capture#2");
        assert_eq!(new["operation_id"], json!(capture.operation_id.to_string()));
        assert_ne!(capture.operation_id, refused.operation_id);
        assert_eq!(
            capture.idempotency_key().as_str(),
            format!("capture-op:{}", capture.operation_id)
        );
        assert_eq!(capture.params.charge_attempt(), Some(2));
        assert_eq!(capture.charge_key(), held.key());
        assert_eq!(
            capture.params.payment_intent().map(|pi| pi.as_str()),
            Some("pi_second")
        );
        assert_eq!(
            stored(&f, &held).await.taken_by().map(|t| t.operation_id),
            Some(capture.operation_id),
            "attempt 2 taken by its capture"
        );
        assert_eq!(f.queue.len(), queued + 1, "its message sent");
        assert_eq!(stored(&f, &head).await, head, "the lapsed head untouched");
        assert_eq!(stored(&f, &refused).await.status, OperationStatus::Failed);

        // Its twin: the same body again on attempt 2 is that capture; nothing written.
        let before = f.store.all();
        let (status, again) = call(&f, five_hundred()).await;
        assert_eq!(
            (status, &again["operation_id"]),
            (200, &new["operation_id"]),
            "{again}"
        );
        assert_eq!(f.store.all(), before, "nothing written");
        // GET shows the latest capture, attempt 2's.
        let (status, got) = call(&f, get("capture-valid.json")).await;
        assert_eq!(
            (status, &got["operation_id"], got["attempt"].as_u64()),
            (200, &new["operation_id"], Some(2)),
            "{got}"
        );
    }

    /// An order has one cancel record. A cancel Stripe refused on attempt 1 (failed, the
    /// authorization given back) asked again on attempt 1 is that cancel (200, as ever). Once
    /// attempt 1 lapsed and the order was charged again, a cancel of attempt 2 is never answered
    /// with attempt 1's (which released nothing of attempt 2's): while attempt 2 is at Stripe,
    /// 409 `in_flight` as for any cancel then; once authorized, 409 `cancel_used` naming attempt
    /// 1; nothing written, attempt 2 free. The twin in the same setup: its capture is accepted.
    #[tokio::test]
    async fn a_cancel_of_an_earlier_attempt_never_answers_for_the_latest() {
        use charge_core::store::AuthorizationOutcome::GivenBack;
        use charge_core::store_rules::AUTHORIZATION_EXPIRED;

        let f = fixture();
        authorized(&f).await;
        let (status, asked) = call(&f, event("cancel-valid.json")).await;
        assert_eq!(status, 202, "{asked}");
        let refused = f
            .store
            .all()
            .into_iter()
            .find(|op| op.kind == OperationKind::Cancel)
            .expect("attempt 1's cancel");
        settle_taking(&f, &refused, OperationStatus::Failed, GivenBack).await;
        let (status, same) = call(&f, event("cancel-valid.json")).await;
        assert_eq!(
            (status, same["status"].as_str(), &same["operation_id"]),
            (
                200,
                Some("failed"),
                &json!(refused.operation_id.to_string())
            ),
            "the same attempt: the refused cancel, as ever: {same}"
        );

        // Attempt 1 lapses; the order is charged again, attempt 2 at Stripe (unknown).
        let (_, at_stripe) = charge_again(&f, "ord-3003", Some(AUTHORIZATION_EXPIRED), |op| {
            op.status = OperationStatus::Unknown;
        })
        .await;
        let before = f.store.all();
        let queued = f.queue.len();
        let (status, body) = call(&f, event("cancel-valid.json")).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (409, Some("in_flight")),
            "attempt 2's own refusal, not attempt 1's cancel: {body}"
        );
        assert_eq!(f.store.all(), before, "nothing written");

        // Attempt 2 authorized: the order's one cancel is spent.
        let mut held = at_stripe;
        held.status = OperationStatus::Authorized;
        held.params.charge_state_mut().unwrap().capture_before =
            Some(T.plus(Duration::from_secs(7 * 24 * 3600)));
        held.next_due_at = held.capture_before();
        f.store.put_for_tests(held.clone());
        let before = f.store.all();
        let (status, body) = call(&f, event("cancel-valid.json")).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (409, Some("cancel_used")),
            "{body}"
        );
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("attempt 1") && message.contains("attempt 2"),
            "{body}"
        );
        assert_eq!(f.store.all(), before, "nothing written");
        assert_eq!(f.queue.len(), queued, "nothing queued");
        assert_eq!(stored(&f, &held).await.taken_by(), None, "attempt 2 free");

        // The twin: attempt 2's authorization is captured.
        let (status, capture) = call(&f, event("capture-valid.json")).await;
        assert_eq!(
            (status, capture["attempt"].as_u64()),
            (202, Some(2)),
            "{capture}"
        );
    }

    /// The capture records are the order's (`capture` to `capture#10`), whatever the attempt:
    /// with all ten failed, 4 of attempt 1 and 6 of attempt 2, a capture of attempt 2 is 409
    /// `too_many_captures` and writes nothing; the twin, the tenth absent, is written there as
    /// attempt 2's.
    #[tokio::test]
    async fn an_order_s_ten_capture_records_count_over_its_attempts() {
        use charge_core::operation::Params;
        use charge_core::store::AuthorizationOutcome::GivenBack;
        use charge_core::store_rules::AUTHORIZATION_EXPIRED;

        for failed in [10, 9] {
            let f = fixture();
            authorized(&f).await;
            let (status, asked) =
                call(&f, with_body("capture-valid.json", json!({"amount": 500}))).await;
            assert_eq!(status, 202, "{asked}");
            let first = capture_no(&f, 1).expect("attempt 1's capture");
            settle_taking(&f, &first, OperationStatus::Failed, GivenBack).await;
            let first = stored(&f, &first).await;
            charge_again(&f, "ord-3003", Some(AUTHORIZATION_EXPIRED), |op| {
                op.status = OperationStatus::Authorized;
                op.params.charge_state_mut().unwrap().capture_before =
                    Some(T.plus(Duration::from_secs(7 * 24 * 3600)));
                op.next_due_at = op.capture_before();
            })
            .await;
            for n in 2..=failed {
                let mut op = Operation {
                    operation_id: OperationId::new_random(),
                    kind: OperationKind::Capture(n),
                    ..first.clone()
                };
                if let Params::Capture(p) = &mut op.params {
                    p.amount_to_capture = Amount::new(500 - i64::from(n)).unwrap();
                    if n > 4 {
                        p.charge_attempt = 2;
                        p.payment_intent = PaymentIntentId::parse("pi_second").unwrap();
                    }
                }
                f.store.put_for_tests(op);
            }
            let before = f.store.all();
            let (status, body) =
                call(&f, with_body("capture-valid.json", json!({"amount": 400}))).await;
            if failed == 10 {
                assert_eq!(
                    (status, body["error"]["code"].as_str()),
                    (409, Some("too_many_captures")),
                    "{body}"
                );
                assert_eq!(f.store.all(), before, "nothing written");
            } else {
                assert_eq!((status, body["attempt"].as_u64()), (202, Some(2)), "{body}");
                let tenth = capture_no(&f, 10).expect("capture#10");
                assert_eq!(tenth.params.charge_attempt(), Some(2));
            }
        }
    }

    /// A capture of a kwd authorization in a digit Stripe does not capture is refused with a
    /// 400 naming the rule and writes nothing; the genuine amount is accepted in the same setup.
    #[tokio::test]
    async fn a_kwd_capture_of_1005_is_refused_and_of_1000_accepted() {
        let f = fixture();
        let mut checkout = event("checkout-authorize.json");
        let mut body: Value = serde_json::from_str(checkout.body.as_deref().unwrap()).unwrap();
        body["currency"] = json!("kwd");
        body["amount"] = json!(2000);
        checkout.body = Some(body.to_string());
        let (status, answer) = call(&f, checkout).await;
        assert_eq!(status, 202, "{answer}");
        held(&f);
        let before = f.store.all();
        let queued = f.queue.len();
        let (status, refused) =
            call(&f, with_body("capture-valid.json", json!({"amount": 1005}))).await;
        assert_eq!(
            (status, refused["error"]["code"].as_str()),
            (400, Some("invalid_request")),
            "{refused}"
        );
        assert!(
            refused["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("must end in 0 for kwd")),
            "{refused}"
        );
        assert_eq!(f.store.all(), before, "nothing written");
        assert_eq!(f.queue.len(), queued, "nothing queued");
        let (status, ok) = call(&f, with_body("capture-valid.json", json!({"amount": 1000}))).await;
        assert_eq!((status, ok["amount"].as_i64()), (202, Some(1000)), "{ok}");
    }

    /// A capture and a cancel asked at once: exactly one takes the authorization, whatever the
    /// order they interleave in; the other is refused and writes nothing.
    #[tokio::test]
    async fn a_capture_and_a_cancel_at_once_never_both_take() {
        for capture_first in [true, false] {
            let f = fixture();
            authorized(&f).await;
            let capture = call(&f, event("capture-valid.json"));
            let cancel = call(&f, event("cancel-valid.json"));
            let ((a, _), (b, _)) = if capture_first {
                tokio::join!(capture, cancel)
            } else {
                let (b, a) = tokio::join!(cancel, capture);
                (a, b)
            };
            let mut statuses = [a, b];
            statuses.sort();
            assert_eq!(statuses, [202, 409], "one takes it, the other is refused");
            let takers = f
                .store
                .all()
                .iter()
                .filter(|op| op.kind.takes_authorization())
                .count();
            assert_eq!(takers, 1, "one operation written");
        }
    }
}
