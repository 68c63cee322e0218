//! The fake's authorizations: a manual charge waits in `requires_capture` until a capture takes
//! all or part of it (`POST /v1/payment_intents/{id}/capture`, keyed: its answer, a refusal
//! included, is saved under the key and replayed, as Stripe does), a cancel releases it, or its
//! deadline passes on the fake's clock (canceled, `cancellation_reason: automatic`).
//!
//! The deadline is one window after the create for every card: the fake knows no card brands,
//! so Visa's shorter merchant-initiated window (4 days 18 hours) is stripe-sim's to model. A test
//! that needs another window sets it ([`FakeGateway::set_capture_window`]).

use std::time::Duration;

use charge_core::domain::Fingerprint;
use charge_core::outcome::{GatewayError, PaymentIntent, PaymentIntentStatus, RetryCause};
use charge_core::time::Timestamp;

use super::{before_the_key, FakeCharge, FakeFault, FakeGateway, Saved, State};
use crate::ports::CapturePaymentIntent;

/// How long a manual charge's authorization waits for its capture: Stripe cancels an uncaptured
/// PaymentIntent 7 days after its creation by default.
pub const FAKE_CAPTURE_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

impl State {
    /// Stripe cancels an uncaptured authorization at its deadline: every one due by `now` is
    /// canceled, `automatic` (`expired` since basil: [`State::version`]).
    pub(super) fn lapse_holds(&mut self, now: Timestamp) {
        // A due hold is done with once its intent is captured or canceled; one not yet
        // authorized (processing, awaiting action) stays due and is looked at again.
        let mut not_yet = Vec::new();
        while self.holds.first().is_some_and(|(at, _)| *at <= now) {
            let Some((at, id)) = self.holds.pop_first() else {
                break;
            };
            let Some(c) = self.charges.get_mut(&id) else {
                continue;
            };
            match c.status {
                PaymentIntentStatus::RequiresCapture => {
                    c.status = PaymentIntentStatus::Canceled;
                    c.cancellation_reason = Some(self.version.lapse_reason().to_owned());
                }
                PaymentIntentStatus::Canceled | PaymentIntentStatus::Succeeded => {}
                _ => not_yet.push((at, id)),
            }
        }
        self.holds.extend(not_yet);
    }
}

/// Stripe's capture of one intent: from `requires_capture` only, at most what it holds; the
/// rest released. Either answer is saved under the key.
fn capture_charge(
    c: &mut FakeCharge,
    id: &str,
    amount: i64,
) -> Result<PaymentIntent, GatewayError> {
    if c.status != PaymentIntentStatus::RequiresCapture {
        return Err(GatewayError::UnexpectedState {
            detail: format!(
                "400 payment_intent_unexpected_state: You cannot capture this PaymentIntent because it has a status of {}.",
                c.status
            ),
        });
    }
    if amount > c.amount {
        return Err(GatewayError::Rejected {
            detail: format!(
                "400 invalid_request_error/amount_too_large: The amount to capture ({amount}) is greater than the amount capturable ({}).",
                c.amount
            ),
            param: Some("amount_to_capture".into()),
        });
    }
    c.status = PaymentIntentStatus::Succeeded;
    c.amount_received = Some(amount);
    Ok(c.intent(id))
}

fn key_in_use() -> GatewayError {
    GatewayError::RetryLater {
        cause: RetryCause::KeyInUse,
        detail: "409 idempotency_key_in_use".into(),
    }
}

impl FakeGateway {
    /// Applies `fault` to the next capture call (queued after earlier ones), as to a create:
    /// `RateLimited`, `ServerErrorBeforeCommit` (nothing done or saved), `KeyInUse`,
    /// `LoseResponse` (done and saved, the answer lost), `ServerErrorAfterCommit` (done, the
    /// `500` saved under the key).
    pub fn script_capture(&self, fault: FakeFault) {
        self.lock().capture_script.push_back(fault);
    }

    /// From now on, manual charges wait this long for their capture instead of
    /// [`FAKE_CAPTURE_WINDOW`].
    pub fn set_capture_window(&self, window: Duration) {
        self.lock().capture_window = window;
    }

    pub(super) fn capture_answer(
        &self,
        req: &CapturePaymentIntent,
    ) -> Result<PaymentIntent, GatewayError> {
        let (mut st, _) = self.lock_now();
        let fault = st.capture_script.pop_front();
        if let Some(e) = before_the_key(&fault) {
            return Err(e);
        }
        let key = req.idempotency_key.as_str().to_owned();
        let amount = req.amount_to_capture.minor_units();
        let fingerprint = Fingerprint::from_stored(format!("capture {} {amount}", req.id));
        if let Some(answer) = st.replay(&key, &fingerprint) {
            return answer;
        }
        if fault == Some(FakeFault::KeyInUse) {
            return Err(key_in_use());
        }
        let answer = match st.charges.get_mut(req.id.as_str()) {
            // Not saved under the key: nothing executed.
            None => {
                return Err(GatewayError::Rejected {
                    detail: format!("404 resource_missing: No such payment_intent: '{}'", req.id),
                    param: Some("intent".into()),
                })
            }
            Some(c) => capture_charge(c, req.id.as_str(), amount),
        };
        let saved = match fault {
            Some(FakeFault::ServerErrorAfterCommit) => Err(GatewayError::Ambiguous {
                detail: "500 api_error".into(),
            }),
            _ => answer,
        };
        st.saved.insert(
            key,
            Saved {
                fingerprint,
                answer: saved.clone(),
            },
        );
        match fault {
            Some(FakeFault::LoseResponse) => Err(GatewayError::Ambiguous {
                detail: "connection reset".into(),
            }),
            _ => saved,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ports::{CancelPaymentIntent, CreatePaymentIntent, PaymentIntents, StripeRefunds};
    use std::sync::Arc;

    use charge_core::domain::PaymentIntentId;
    use charge_core::testing::order;
    use charge_core::time::ManualClock;
    use charge_core::{
        domain::{Amount, CaptureMethod, OperationId},
        take::request::CancellationReason,
    };

    use super::*;
    use crate::testing::refund_create;

    const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

    /// A fake on a manual clock, and a manual charge of 1000 it authorized.
    async fn authorized() -> (FakeGateway, ManualClock, PaymentIntent) {
        let fake = FakeGateway::new();
        let clock = ManualClock::new(T0);
        fake.set_clock(Arc::new(clock.clone()));
        let pi = authorize(&fake, "ord-hold").await;
        (fake, clock, pi)
    }

    async fn authorize(fake: &FakeGateway, order_id: &str) -> PaymentIntent {
        let op = order(order_id).amount(1000).build();
        let mut req = CreatePaymentIntent::for_operation(&op).unwrap();
        req.params.capture_method = CaptureMethod::Manual;
        fake.create(&req).await.unwrap()
    }

    /// The capture of `amount` of `id` under the capture key of operation `op`.
    fn capture(id: &PaymentIntentId, op: &OperationId, amount: i64) -> CapturePaymentIntent {
        CapturePaymentIntent {
            id: id.clone(),
            idempotency_key: op.capture_idempotency_key(),
            amount_to_capture: Amount::new(amount).unwrap(),
        }
    }

    fn cancel(id: &PaymentIntentId, op: &OperationId) -> CancelPaymentIntent {
        CancelPaymentIntent {
            id: id.clone(),
            idempotency_key: op.cancel_op_idempotency_key(),
            reason: Some(CancellationReason::RequestedByCustomer),
        }
    }

    #[tokio::test]
    async fn a_manual_charge_is_authorized_with_its_deadline_and_an_automatic_one_charged() {
        let (fake, _, pi) = authorized().await;
        assert_eq!(pi.status, PaymentIntentStatus::RequiresCapture);
        assert_eq!(pi.capture_before, Some(T0.plus(FAKE_CAPTURE_WINDOW)));
        assert_eq!(pi.amount_received, None);
        // Twin: an automatic charge is taken at once, with no deadline.
        let op = order("ord-now").amount(1000).build();
        let now = fake
            .create(&CreatePaymentIntent::for_operation(&op).unwrap())
            .await
            .unwrap();
        assert_eq!(
            (now.status, now.capture_before),
            (PaymentIntentStatus::Succeeded, None)
        );
    }

    #[tokio::test]
    async fn a_partial_capture_takes_part_and_bounds_refunds() {
        let op_1 = OperationId::new_random();
        let (fake, _, pi) = authorized().await;
        let refused = fake.create_refund(&refund_create(&pi.id, 100)).await;
        assert!(matches!(refused, Err(GatewayError::UnexpectedState { .. })));
        let taken = fake.capture(&capture(&pi.id, &op_1, 600)).await.unwrap();
        assert_eq!(
            (taken.status, taken.amount_received),
            (PaymentIntentStatus::Succeeded, Some(600))
        );
        assert_eq!(
            fake.calls.capture.load(std::sync::atomic::Ordering::SeqCst),
            1
        );
        // What the capture took, not what was held, is what refunds may take back.
        let too_much = fake.create_refund(&refund_create(&pi.id, 601)).await;
        assert!(matches!(too_much, Err(GatewayError::Rejected { .. })));
        assert!(fake
            .create_refund(&refund_create(&pi.id, 600))
            .await
            .is_ok());
    }

    #[tokio::test]
    async fn more_than_is_held_is_refused_and_saved_under_the_key() {
        let op_1 = OperationId::new_random();
        let op_2 = OperationId::new_random();
        let (fake, _, pi) = authorized().await;
        let too_much = fake.capture(&capture(&pi.id, &op_1, 1001)).await;
        assert!(
            matches!(&too_much, Err(GatewayError::Rejected { param: Some(p), .. }) if p == "amount_to_capture")
        );
        // Replayed under its key, though another key captures.
        let again = fake.capture(&capture(&pi.id, &op_1, 1001)).await;
        assert_eq!(again.unwrap_err(), too_much.unwrap_err());
        let all = fake.capture(&capture(&pi.id, &op_2, 1000)).await;
        assert_eq!(all.unwrap().amount_received, Some(1000));
    }

    #[tokio::test]
    async fn a_second_capture_is_unexpected_state_and_its_refusal_replays() {
        let op_a = OperationId::new_random();
        let op_b = OperationId::new_random();
        let (fake, _, pi) = authorized().await;
        let first = fake.capture(&capture(&pi.id, &op_a, 1000)).await;
        assert!(first.is_ok());
        let second = fake.capture(&capture(&pi.id, &op_b, 1000)).await;
        assert!(matches!(second, Err(GatewayError::UnexpectedState { .. })));
        // The first key replays its success; the second its refusal.
        let first_again = fake.capture(&capture(&pi.id, &op_a, 1000)).await.unwrap();
        assert!(first_again.replayed);
        let second_again = fake.capture(&capture(&pi.id, &op_b, 1000)).await;
        assert!(matches!(
            second_again,
            Err(GatewayError::UnexpectedState { .. })
        ));
        // The same key with another amount is a misuse.
        let misuse = fake.capture(&capture(&pi.id, &op_a, 500)).await;
        assert!(matches!(misuse, Err(GatewayError::KeyMisuse { .. })));
    }

    #[tokio::test]
    async fn a_lost_capture_answer_is_replayed_under_its_key() {
        let op_1 = OperationId::new_random();
        let (fake, _, pi) = authorized().await;
        fake.script_capture(FakeFault::LoseResponse);
        let lost = fake.capture(&capture(&pi.id, &op_1, 1000)).await;
        assert!(matches!(lost, Err(GatewayError::Ambiguous { .. })));
        assert_eq!(
            fake.charges()[pi.id.as_str()].status,
            PaymentIntentStatus::Succeeded,
            "captured though unanswered"
        );
        let retry = fake.capture(&capture(&pi.id, &op_1, 1000)).await.unwrap();
        assert_eq!((retry.replayed, retry.amount_received), (true, Some(1000)));
    }

    #[tokio::test]
    async fn faults_before_the_key_do_nothing_and_after_commit_replay_the_500() {
        let op_1 = OperationId::new_random();
        let (fake, _, pi) = authorized().await;
        for fault in [FakeFault::RateLimited, FakeFault::ServerErrorBeforeCommit] {
            fake.script_capture(fault);
            assert!(fake.capture(&capture(&pi.id, &op_1, 1000)).await.is_err());
            assert_eq!(
                fake.charges()[pi.id.as_str()].status,
                PaymentIntentStatus::RequiresCapture,
                "nothing done"
            );
        }
        fake.script_capture(FakeFault::ServerErrorAfterCommit);
        let after = fake.capture(&capture(&pi.id, &op_1, 1000)).await;
        assert!(matches!(after, Err(GatewayError::Ambiguous { .. })));
        let replay = fake.capture(&capture(&pi.id, &op_1, 1000)).await;
        assert!(
            matches!(replay, Err(GatewayError::Ambiguous { .. })),
            "the 500 is saved"
        );
        let read = fake.retrieve(&pi.id).await.unwrap();
        assert_eq!(
            (read.status, read.amount_received),
            (PaymentIntentStatus::Succeeded, Some(1000))
        );
        assert_eq!(
            fake.calls.capture.load(std::sync::atomic::Ordering::SeqCst),
            4
        );
    }

    #[tokio::test]
    async fn a_cancel_releases_the_hold_with_its_reason_and_a_capture_after_it_is_refused() {
        let cancel_1 = OperationId::new_random();
        let op_1 = OperationId::new_random();
        let (fake, _, pi) = authorized().await;
        let canceled = fake.cancel(&cancel(&pi.id, &cancel_1)).await.unwrap();
        assert_eq!(
            (canceled.status, canceled.cancellation_reason.as_deref()),
            (PaymentIntentStatus::Canceled, Some("requested_by_customer"))
        );
        let late = fake.capture(&capture(&pi.id, &op_1, 1000)).await;
        assert!(matches!(late, Err(GatewayError::UnexpectedState { .. })));
    }

    #[tokio::test]
    async fn an_uncaptured_authorization_lapses_at_its_deadline() {
        let cancel_1 = OperationId::new_random();
        let op_1 = OperationId::new_random();
        let op_twin = OperationId::new_random();
        let (fake, clock, pi) = authorized().await;
        let twin = authorize(&fake, "ord-twin").await;
        clock.advance(FAKE_CAPTURE_WINDOW - Duration::from_millis(1));
        assert_eq!(
            fake.retrieve(&pi.id).await.unwrap().status,
            PaymentIntentStatus::RequiresCapture
        );
        // The twin is captured in time; it never lapses.
        assert!(fake
            .capture(&capture(&twin.id, &op_twin, 1000))
            .await
            .is_ok());
        clock.advance(Duration::from_millis(1));
        let read = fake.retrieve(&pi.id).await.unwrap();
        assert_eq!(
            (read.status, read.cancellation_reason.as_deref()),
            (PaymentIntentStatus::Canceled, Some("automatic"))
        );
        let late = fake.capture(&capture(&pi.id, &op_1, 1000)).await;
        assert!(matches!(late, Err(GatewayError::UnexpectedState { .. })));
        let late_cancel = fake.cancel(&cancel(&pi.id, &cancel_1)).await;
        assert!(matches!(
            late_cancel,
            Err(GatewayError::UnexpectedState { .. })
        ));
        assert_eq!(
            fake.retrieve(&twin.id).await.unwrap().status,
            PaymentIntentStatus::Succeeded
        );
    }

    /// Answering as the current version, a lapse says `expired`; the core reads it as a lapse.
    #[tokio::test]
    async fn a_lapse_speaks_the_answering_versions_word() {
        let (fake, clock, pi) = authorized().await;
        fake.set_stripe_version(charge_core::stripe_version::StripeVersion::CURRENT);
        clock.advance(FAKE_CAPTURE_WINDOW);
        let read = fake.retrieve(&pi.id).await.unwrap();
        assert_eq!(read.cancellation_reason.as_deref(), Some("expired"));
        assert!(read.lapsed());
    }
}
