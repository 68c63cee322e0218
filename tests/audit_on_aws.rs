//! The drift audit (`charge_once::audit::run_audit`, the audit function's own code) against moto
//! (the settled-by-day index, the kept report) and stripe-sim over HTTP (its lists, on the core's
//! clock): a clean window first — every object and record matched, nothing found — then each
//! drift injected the way it happens in production, found in its class, naming its object or
//! order, and never a record changed by the audit.

use std::time::Duration;

use aws_lambda_events::apigw::ApiGatewayV2httpResponse;
use aws_sdk_dynamodb::types::AttributeValue;
use charge_core::audit::{AuditPolicy, AuditReport, AuditWindow, DriftClass};
use charge_core::plan::Policy;
use charge_core::{
    domain::{OperationId, OrderId},
    operation::{OperationKey, OperationStatus},
    time::Clock,
};
use charge_once::audit::{run_audit, AuditDeps, AuditRun};
use charge_once::ports::{AuditLog, CreatePaymentIntent, OperationReads, PaymentIntents};
use charge_once::telemetry::CapturedMetrics;
use checkout::door::Checkout;
use lambda_runtime::{Context, LambdaEvent};
use testkit::stack::{api_event, Stack};

const HOUR: Duration = Duration::from_secs(3600);

async fn post(deps: &Checkout, file: &str) -> ApiGatewayV2httpResponse {
    checkout::handler::handle(deps, LambdaEvent::new(api_event(file), Context::default())).await
}

fn charge_key(order: &str) -> OperationKey {
    OperationKey::charge(OrderId::parse(order).unwrap())
}

/// The audit of the two hours around now, as the scheduled function runs it, its metrics in
/// `metrics`.
async fn audit(s: &Stack, metrics: &CapturedMetrics) -> AuditReport {
    let now = s.clock().now();
    let gateway = s.side.gateway();
    let policy = Policy::default();
    let deps = AuditDeps {
        store: s.store.as_ref(),
        log: s.store.as_ref(),
        gateway: &gateway,
        clock: s.clock(),
        metrics,
    };
    let run = AuditRun {
        window: AuditWindow::ending_at(now.plus(HOUR), 2 * HOUR),
        policy: AuditPolicy {
            key_window: policy.key_window,
            page_lead: policy.authorization_page_lead,
            refund_recheck: Duration::ZERO,
        },
        ran_by: "test".into(),
        deadline: now.plus(HOUR),
    };
    run_audit(&deps, &run).await
}

/// ord-1001 charged and refunded 500 of it, both through the real functions.
async fn charged_and_refunded(s: &Stack) {
    assert_eq!(
        post(&s.checkout(), "checkout-valid.json").await.status_code,
        202
    );
    assert_eq!(s.deliver().await, 1);
    assert_eq!(
        post(&s.checkout(), "refund-valid.json").await.status_code,
        202
    );
    assert_eq!(s.deliver().await, 1);
    let charge = s.store.get(&charge_key("ord-1001")).await.unwrap().unwrap();
    assert_eq!(charge.status, OperationStatus::Succeeded);
}

/// The findings' classes, and whether each names `what` (an object id or an order id).
fn found(report: &AuditReport, class: DriftClass, what: &str) -> bool {
    report.findings.iter().any(|f| {
        f.class == class
            && (f.stripe_id.as_deref() == Some(what) || f.order_id.as_deref() == Some(what))
    })
}

/// Sets `attr` of ord-1001's record `sk` by hand, as a person with the console would.
async fn edit(s: &Stack, sk: &str, attr: &str, value: AttributeValue) {
    s.dynamo
        .update_item()
        .table_name(s.store.table())
        .key("pk", AttributeValue::S("ORDER#ord-1001".into()))
        .key("sk", AttributeValue::S(sk.into()))
        .update_expression("SET #a = :v")
        .expression_attribute_names("#a", attr)
        .expression_attribute_values(":v", value)
        .send()
        .await
        .expect("the hand edit");
}

#[tokio::test]
async fn a_clean_window_matches_everything_and_is_kept_with_its_metrics() {
    let s = Stack::spawn().await;
    charged_and_refunded(&s).await;
    let before = s.store.get(&charge_key("ord-1001")).await.unwrap();
    let metrics = CapturedMetrics::new();
    let report = audit(&s, &metrics).await;
    assert!(report.complete, "{report:?}");
    assert_eq!(report.drift(), 0, "{:?}", report.findings);
    assert!(report.findings.is_empty(), "{:?}", report.findings);
    let c = &report.counts;
    assert_eq!(
        (c.intents, c.refunds, c.settled_records),
        (1, 1, 2),
        "{c:?}"
    );
    assert_eq!(c.matched, 4, "both objects and both records: {c:?}");
    assert!(c.stripe_calls >= 2, "a list of each: {c:?}");
    // Kept, readable back; the records untouched.
    let kept = s.store.latest_reports(5).await.unwrap();
    assert_eq!(kept.reports, vec![report.clone()]);
    assert_eq!(s.store.get(&charge_key("ord-1001")).await.unwrap(), before);
    // One line per class, 0 included, and the run's own.
    for class in DriftClass::ALL {
        assert_eq!(
            metrics.sum(
                "AuditDrift",
                &[("Function", "audit"), ("DriftClass", class.as_str())]
            ),
            0.0
        );
    }
    assert_eq!(metrics.sum("AuditRuns", &[("Function", "audit")]), 1.0);
    assert_eq!(
        metrics.sum("AuditIncomplete", &[("Function", "audit")]),
        0.0
    );
}

#[tokio::test]
async fn an_intent_with_our_metadata_and_a_dashboard_refund_are_at_stripe_not_here() {
    let s = Stack::spawn().await;
    charged_and_refunded(&s).await;
    let metrics = CapturedMetrics::new();
    assert_eq!(audit(&s, &metrics).await.drift(), 0);
    // Another program with our key and our metadata.
    let charge = s.store.get(&charge_key("ord-1001")).await.unwrap().unwrap();
    let outside = OperationId::new_random();
    let pi = s
        .side
        .gateway()
        .create(&CreatePaymentIntent {
            idempotency_key: outside.idempotency_key(),
            operation_id: outside,
            order_id: charge.order_id.clone(),
            params: charge.params.charge().unwrap().clone(),
            attempt: 1,
        })
        .await
        .unwrap();
    // A refund of our charge made in the dashboard: no metadata.
    let intent = charge.external_id.clone().unwrap();
    let dashboard = match s.side.sim.refund_in_process(
        None,
        &[
            ("payment_intent".to_owned(), intent.as_str().to_owned()),
            ("amount".to_owned(), "100".to_owned()),
        ],
    ) {
        stripe_sim::CreateStart::Done(stripe_sim::Outcome::Answered(a)) => {
            serde_json::from_slice::<serde_json::Value>(&a.body).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        }
        _ => panic!("the dashboard refund was not answered"),
    };
    let metrics = CapturedMetrics::new();
    let report = audit(&s, &metrics).await;
    assert!(
        found(&report, DriftClass::AtStripeNotHere, pi.id.as_str()),
        "{:?}",
        report.findings
    );
    assert!(
        found(&report, DriftClass::AtStripeNotHere, &dashboard),
        "{:?}",
        report.findings
    );
    assert_eq!(report.drift(), 2, "{:?}", report.findings);
    assert_eq!(
        metrics.sum(
            "AuditDrift",
            &[("Function", "audit"), ("DriftClass", "at_stripe_not_here")]
        ),
        2.0
    );
}

#[tokio::test]
async fn a_record_edited_by_hand_is_found_by_what_was_edited() {
    let cases: [(&str, &str, AttributeValue, DriftClass); 3] = [
        (
            "charge",
            "status",
            AttributeValue::S("failed".into()),
            DriftClass::StatusDiffers,
        ),
        (
            "charge",
            "amount",
            AttributeValue::N("999".into()),
            DriftClass::AmountDiffers,
        ),
        (
            "charge",
            "external_id",
            AttributeValue::S("pi_NotAtStripe000000000000".into()),
            DriftClass::HereNotAtStripe,
        ),
    ];
    for (sk, attr, value, class) in cases {
        let s = Stack::spawn().await;
        charged_and_refunded(&s).await;
        let metrics = CapturedMetrics::new();
        assert_eq!(audit(&s, &metrics).await.drift(), 0, "{attr}: clean first");
        edit(&s, sk, attr, value).await;
        let report = audit(&s, &metrics).await;
        assert!(
            found(&report, class, "ord-1001"),
            "{attr}: {:?}",
            report.findings
        );
    }
}

/// A settled record this release cannot read (a hand edit gone wrong) leaves the window not
/// vouched for: the report is incomplete and AuditIncomplete pages, beside its count. The same
/// window before the edit is complete.
#[tokio::test]
async fn an_unreadable_settled_record_makes_the_window_incomplete() {
    let s = Stack::spawn().await;
    charged_and_refunded(&s).await;
    let clean = CapturedMetrics::new();
    let report = audit(&s, &clean).await;
    assert!(report.complete, "{report:?}");
    assert_eq!(report.counts.unreadable, 0);
    assert_eq!(clean.sum("AuditIncomplete", &[("Function", "audit")]), 0.0);
    edit(
        &s,
        "charge",
        "status",
        AttributeValue::S("settled-ish".into()),
    )
    .await;
    let metrics = CapturedMetrics::new();
    let report = audit(&s, &metrics).await;
    assert!(!report.complete, "{report:?}");
    // Counted per read: the record in the window's page, and again as the refund's charge.
    assert!(report.counts.unreadable >= 1, "{:?}", report.counts);
    assert_eq!(
        metrics.sum("AuditIncomplete", &[("Function", "audit")]),
        1.0
    );
    assert_eq!(
        metrics.sum("UnreadableRecords", &[("Function", "audit")]),
        report.counts.unreadable as f64
    );
}

#[tokio::test]
async fn a_second_succeeded_intent_and_refunds_over_the_charge_are_found() {
    let s = Stack::spawn().await;
    charged_and_refunded(&s).await;
    let metrics = CapturedMetrics::new();
    assert_eq!(audit(&s, &metrics).await.drift(), 0);
    // The same operation's metadata on a second intent that succeeds (a key made otherwise).
    let charge = s.store.get(&charge_key("ord-1001")).await.unwrap().unwrap();
    let twin = s
        .side
        .gateway()
        .create(&CreatePaymentIntent {
            idempotency_key: OperationId::new_random().idempotency_key(),
            operation_id: charge.operation_id,
            order_id: charge.order_id.clone(),
            params: charge.params.charge().unwrap().clone(),
            attempt: 1,
        })
        .await
        .unwrap();
    // The refund's record says more went back than the charge took.
    edit(
        &s,
        "refund#refund-1",
        "amount",
        AttributeValue::N("5000".into()),
    )
    .await;
    let report = audit(&s, &metrics).await;
    assert!(
        found(&report, DriftClass::DuplicateSuccess, twin.id.as_str()),
        "{:?}",
        report.findings
    );
    assert!(
        found(&report, DriftClass::OverRefunded, "ord-1001"),
        "{:?}",
        report.findings
    );
    assert!(
        found(&report, DriftClass::AmountDiffers, "ord-1001"),
        "the refund's amount: {:?}",
        report.findings
    );
}

#[tokio::test]
async fn deadlines_are_watched_an_authorization_near_its_own_and_an_unknown_past_the_key_window() {
    let s = Stack::spawn().await;
    assert_eq!(
        post(&s.checkout(), "checkout-authorize.json")
            .await
            .status_code,
        202
    );
    assert_eq!(s.deliver().await, 1);
    let held = s.store.get(&charge_key("ord-3003")).await.unwrap().unwrap();
    let deadline = held.capture_before().expect("Stripe's deadline");
    // A checkout whose message is never delivered: pending, no intent.
    assert_eq!(
        post(&s.checkout(), "checkout-valid.json").await.status_code,
        202
    );
    let metrics = CapturedMetrics::new();
    let report = audit(&s, &metrics).await;
    assert_eq!(
        report.by_class.values().sum::<u64>(),
        0,
        "{:?}",
        report.findings
    );
    // A day later: past the key window, and (for a hold of a few days) not yet near its deadline.
    s.clock().advance(24 * HOUR);
    let report = audit(&s, &metrics).await;
    assert!(
        found(&report, DriftClass::UnsettledPastKeyWindow, "ord-1001"),
        "{:?}",
        report.findings
    );
    assert!(!found(
        &report,
        DriftClass::AuthorizationNearDeadline,
        "ord-3003"
    ));
    // Eleven hours before the deadline.
    let now = s.clock().now();
    s.clock().advance(deadline.minus(11 * HOUR).since(now));
    let report = audit(&s, &metrics).await;
    assert!(
        found(&report, DriftClass::AuthorizationNearDeadline, "ord-3003"),
        "{:?}",
        report.findings
    );
    assert_eq!(
        report.drift(),
        0,
        "watch classes are not drift: {:?}",
        report.findings
    );
}

/// The audit's re-read of refunds settled in its window `refund_recheck` earlier, on moto (the
/// settled index, refunds only) and stripe-sim: a refund the bank returned after it succeeded,
/// that nothing recorded, is `status_differs`; its twin, a refund of another order still
/// succeeded, is matched; each read once, by id.
#[tokio::test]
async fn a_late_failure_nothing_recorded_is_found_by_the_re_read_of_refunds_settled_days_before() {
    use charge_core::domain::{Amount, Principal, RefundId};
    use charge_core::operation::Operation;
    use charge_core::refund::{self, request::RefundRequest};
    use charge_core::store_rules::ChargeClaim;
    use charge_once::executor::execute;
    use charge_once::ports::OperationCreates;
    const DAY: Duration = Duration::from_secs(86_400);
    let s = Stack::spawn().await;
    s.side.sim.set_refund_fail_after(3 * DAY);
    let mut refunds = Vec::new();
    for (order, pm) in [
        ("recheck-late", "pm_card_refundFail"),
        ("recheck-fine", "pm_card_visa"),
    ] {
        let deps = s.charge_deps();
        let charge = charge_core::testing::order(order)
            .amount(1000)
            .payment_method(pm)
            .at(s.clock().now())
            .build();
        s.store.create_if_absent(&charge).await.unwrap();
        execute(&deps, &charge.key(), &charge.operation_id)
            .await
            .unwrap();
        let charge = s.store.get(&charge.key()).await.unwrap().unwrap();
        let request = RefundRequest {
            amount: Some(Amount::new(400).unwrap()),
            reason: None,
        };
        let now = s.clock().now();
        let (params, reserve) = refund::reserve(&charge, &request, now).unwrap();
        let op = Operation::new_refund(
            charge.order_id.clone(),
            RefundId::parse("r-1").unwrap(),
            &request,
            params,
            Principal::jwt("support").unwrap(),
            now,
            Duration::from_secs(300),
        );
        s.store
            .create_beside(&op, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap();
        execute(&deps, &op.key(), &op.operation_id).await.unwrap();
        let refund = s.store.get(&op.key()).await.unwrap().unwrap();
        assert_eq!(refund.status, OperationStatus::Succeeded);
        refunds.push(refund);
    }
    // Thirty days on, no event and no watch: the late one is still recorded succeeded.
    let settled = refunds[0].settled_at.unwrap();
    s.clock().set(settled.plus(30 * DAY));
    let gateway = s.side.gateway();
    let metrics = CapturedMetrics::new();
    let deps = AuditDeps {
        store: s.store.as_ref(),
        log: s.store.as_ref(),
        gateway: &gateway,
        clock: s.clock(),
        metrics: &metrics,
    };
    let policy = Policy::default();
    let audit = |recheck: Duration| AuditRun {
        window: AuditWindow::ending_at(s.clock().now().plus(HOUR), 2 * HOUR),
        policy: AuditPolicy {
            key_window: policy.key_window,
            page_lead: policy.authorization_page_lead,
            refund_recheck: recheck,
        },
        ran_by: "test".into(),
        deadline: s.clock().now().plus(HOUR),
    };
    // Without the re-read (its twin in the same setup): the window holds nothing, nothing found.
    let blind = run_audit(&deps, &audit(Duration::ZERO)).await;
    assert_eq!((blind.drift(), blind.counts.rechecked_refunds), (0, 0));
    let report = run_audit(&deps, &audit(30 * DAY)).await;
    assert!(report.complete, "{report:?}");
    assert_eq!(report.counts.rechecked_refunds, 2, "{:?}", report.counts);
    let late_id = refunds[0].stripe_refund_id().unwrap().as_str();
    assert!(
        found(&report, DriftClass::StatusDiffers, late_id),
        "{:?}",
        report.findings
    );
    assert_eq!(report.drift(), 1, "the twin matched: {:?}", report.findings);
    assert_eq!(report.counts.matched, 1, "{:?}", report.counts);
    assert_eq!(
        metrics.sum(
            "AuditDrift",
            &[("Function", "audit"), ("DriftClass", "status_differs")]
        ),
        1.0,
        "paged"
    );
    // Nothing changed by the audit.
    assert_eq!(
        s.store
            .get(&refunds[0].key())
            .await
            .unwrap()
            .unwrap()
            .status,
        OperationStatus::Succeeded
    );
}

/// A dispute stripe-sim opens on ord-1001's charge (the admin route, as a bank would) with no
/// event delivered: the audit lists it by creation time, finds the intent ours, and finds no
/// record (`dispute_unrecorded`, with the order and the dispute). Once the dispute is recorded
/// (as the events function records it), the same window has no finding: open, it is the
/// reconciler's (in flight).
#[tokio::test]
async fn a_dispute_of_our_intent_without_its_record_is_found_and_once_recorded_is_not() {
    use charge_core::domain::DisputeId;
    use charge_once::executor::dispute::record_dispute;
    use charge_once::ports::StripeDisputes;

    let s = Stack::spawn().await;
    charged_and_refunded(&s).await;
    let charge = s.store.get(&charge_key("ord-1001")).await.unwrap().unwrap();
    let pi = charge.external_id.clone().unwrap();
    let json = s
        .side
        .sim
        .dispute_charge(&stripe_sim::DisputeRequest {
            payment_intent: pi.as_str().to_owned(),
            amount: None,
            reason: None,
            inquiry: false,
        })
        .expect("stripe-sim disputes the charge");
    let dp: serde_json::Value = serde_json::from_str(&json).unwrap();
    let dp = DisputeId::parse(dp["id"].as_str().unwrap()).unwrap();

    let metrics = CapturedMetrics::new();
    let report = audit(&s, &metrics).await;
    assert_eq!(report.counts.disputes, 1);
    assert!(
        found(&report, DriftClass::DisputeUnrecorded, dp.as_str()),
        "{:?}",
        report.findings
    );
    assert!(found(&report, DriftClass::DisputeUnrecorded, "ord-1001"));
    assert_eq!(report.count(DriftClass::DisputeUnrecorded), 1);
    assert!(report.complete);
    assert_eq!(
        metrics.sum(
            "AuditDrift",
            &[("Function", "audit"), ("DriftClass", "dispute_unrecorded")]
        ),
        1.0
    );

    // Recorded from what Stripe holds: the same window has nothing to report about it.
    let dispute = s.side.gateway().retrieve_dispute(&dp).await.unwrap();
    record_dispute(
        s.store.as_ref(),
        &charge.order_id,
        &dispute,
        s.clock().now(),
        &Policy::default().dispute,
    )
    .await
    .unwrap();
    let report = audit(&s, &CapturedMetrics::new()).await;
    assert_eq!(report.count(DriftClass::DisputeUnrecorded), 0);
    assert_eq!(report.drift(), 0, "{:?}", report.findings);
    assert!(report.complete);
}
