//! Outcomes flow back, on the local stack: the real handlers write to a DynamoDB table on moto, the
//! test reads that table's stream from moto (DescribeStream, GetShardIterator, GetRecords), hands
//! the records to the notify relay as Lambda's stream event source would, and reads what reached
//! the EventBridge bus on moto through a rule with an SQS target. Also the `GET` status route.
//!
//! A stream record that is not an operation is copied to the relay's DLQ (a standard queue, as in
//! the template) with its reason, and the rest of its batch is published.
//!
//! What moto cannot show, the template test holds instead: Lambda's own retries, bisection and
//! on-failure destination (the relay's DLQ) for records reported failed.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::apigw::ApiGatewayV2httpRequest;
use aws_lambda_events::dynamodb::Event as StreamEvent;
use charge_core::refund::{self, request::RefundRequest};
use charge_core::store_rules::{ChargeClaim, CreatedBeside};
use charge_core::{operation::OperationStatus, time::Clock as _};
use charge_once::adapters::dynamodb::item::operation_to_item;
use charge_once::adapters::eventbridge::EventBridgePublisher;
use charge_once::adapters::sqs::SqsDeadLetters;
use charge_once::events::{EventsDeps, DEFAULT_TOLERANCE};
use charge_once::executor::execute;
use charge_once::ports::{OperationCreates, OperationReads};
use charge_once::telemetry::CapturedMetrics;
use charge_once::testing::CreateIn as _;
use events::handler::EventsFunction;
use lambda_runtime::{Context, LambdaEvent};
use notify::handler::{relay, Notify};
use serde_json::{json, Value};
use testkit::aws::{fresh_queue, sdk_config, unique};
use testkit::stack::{api_event, json_body, Stack};
use testkit::streams::{lambda_record, read_all};

pub(crate) fn for_order(
    mut req: ApiGatewayV2httpRequest,
    order: &str,
    payment_method: &str,
) -> ApiGatewayV2httpRequest {
    req.path_parameters.insert("order_id".into(), order.into());
    req.raw_path = Some(format!("/orders/{order}/charge"));
    if req.body.is_some() {
        req.body = Some(
            json!({"amount": 1250, "currency": "usd", "customer_id": "cus_Q8xYz12AbC",
                   "payment_method": payment_method})
            .to_string(),
        );
    }
    req
}

/// A [`Stack`], plus the outcome side: an event bus with the order service's rule (every
/// charge-once event to an SQS queue), the relay's DLQ, and the stream and bus clients.
pub(crate) struct Outcomes {
    pub(crate) stack: Stack,
    streams: aws_sdk_dynamodbstreams::Client,
    events: aws_sdk_eventbridge::Client,
    pub(crate) bus: String,
    /// The bus's rule delivers every charge-once event here.
    outcomes_url: String,
    /// The relay's DLQ: a standard queue, as `NotifyDeadLetterQueue` is.
    notify_dlq_url: String,
}

impl std::ops::Deref for Outcomes {
    type Target = Stack;
    fn deref(&self) -> &Stack {
        &self.stack
    }
}

impl Outcomes {
    pub(crate) async fn spawn() -> Self {
        let stack = Stack::spawn().await;
        let config = sdk_config().await;
        let sqs = &stack.sqs;
        let events = aws_sdk_eventbridge::Client::new(&config);
        let bus = unique("charge-once");
        events
            .create_event_bus()
            .name(&bus)
            .send()
            .await
            .expect("CreateEventBus");
        let outcomes_url = fresh_queue(sqs, "outcomes").await;
        let outcomes_arn = sqs
            .get_queue_attributes()
            .queue_url(&outcomes_url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
            .send()
            .await
            .unwrap()
            .attributes()
            .unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn]
            .clone();
        let notify_dlq_url = fresh_queue(sqs, "notify-dlq").await;
        // What the order service deploys: a rule on the bus for our source, an SQS target.
        events
            .put_rule()
            .name("order-service")
            .event_bus_name(&bus)
            .event_pattern(r#"{"source":["charge-once"]}"#)
            .send()
            .await
            .expect("PutRule");
        events
            .put_targets()
            .rule("order-service")
            .event_bus_name(&bus)
            .targets(
                aws_sdk_eventbridge::types::Target::builder()
                    .id("queue")
                    .arn(outcomes_arn)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .expect("PutTargets");
        Self {
            streams: aws_sdk_dynamodbstreams::Client::new(&config),
            events,
            bus,
            outcomes_url,
            notify_dlq_url,
            stack,
        }
    }

    pub(crate) fn notify(&self, bus: &str) -> (Notify, Arc<EventBridgePublisher>) {
        let publisher = Arc::new(EventBridgePublisher::new(self.events.clone(), bus));
        let deps = Notify {
            // The real adapter on the test's table: a strongly consistent GetItem.
            store: self.store.clone(),
            publisher: publisher.clone(),
            dead_letters: Arc::new(SqsDeadLetters::new(self.sqs.clone(), &self.notify_dlq_url)),
            clock: Arc::new(self.side.clock.clone()),
            metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
        };
        (deps, publisher)
    }

    pub(crate) async fn post(&self, order: &str, payment_method: &str) -> Value {
        let req = for_order(api_event("checkout-valid.json"), order, payment_method);
        let resp =
            checkout::handler::handle(&self.checkout(), LambdaEvent::new(req, Context::default()))
                .await;
        assert_eq!(resp.status_code, 202, "{}", json_body(&resp));
        json_body(&resp)
    }

    async fn deliver_charges(&self) {
        let batch = self.receive().await;
        assert!(!batch.records.is_empty());
        let failed = self.run_charge(&self.charge_function(), batch).await;
        assert_eq!(failed, Vec::<String>::new());
    }

    /// Every record on the table's stream so far, as Lambda's event source delivers them.
    pub(crate) async fn stream_records(&self) -> StreamEvent {
        let table = self
            .dynamo
            .describe_table()
            .table_name(self.store.table())
            .send()
            .await
            .unwrap();
        let arn = table
            .table()
            .unwrap()
            .latest_stream_arn()
            .expect("the table has a stream")
            .to_owned();
        let records: Vec<Value> = read_all(&self.streams, &arn)
            .await
            .iter()
            .map(|r| lambda_record(r, &arn))
            .collect();
        serde_json::from_value(json!({ "Records": records }))
            .expect("a Lambda DynamoDB stream event")
    }

    /// Every event the order service's rule delivered so far (EventBridge envelopes).
    pub(crate) async fn delivered(&self) -> Vec<Value> {
        self.drain(&self.outcomes_url)
            .await
            .iter()
            .map(|m| serde_json::from_str(m.body().unwrap()).unwrap())
            .collect()
    }

    /// Writes `item` to the table as it is (no store, no checks), so the real stream carries it.
    async fn put_raw(&self, item: charge_once::adapters::dynamodb::item::Attrs) {
        self.dynamo
            .put_item()
            .table_name(self.store.table())
            .set_item(Some(item))
            .send()
            .await
            .expect("PutItem");
    }
}

#[tokio::test]
async fn a_settled_charge_publishes_one_outcome_and_a_replay_the_same_event_id() {
    let s = Outcomes::spawn().await;
    let accepted = s.post("ord-out-1", "pm_card_visa").await;
    s.deliver_charges().await;
    let stream = s.stream_records().await;
    assert!(
        stream.records.len() >= 3,
        "insert, claim, record: {}",
        stream.records.len()
    );

    let (deps, publisher) = s.notify(&s.bus);
    let (response, report) = relay(&deps, &stream.records).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(report.published, 1, "{report:?}");
    let delivered = s.delivered().await;
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    let e = &delivered[0];
    assert_eq!(e["source"], "charge-once");
    assert_eq!(e["detail-type"], "ChargeSucceeded");
    let detail = &e["detail"];
    assert_eq!(detail["v"], 1);
    assert_eq!(detail["order_id"], "ord-out-1");
    assert_eq!(detail["operation_id"], accepted["operation_id"]);
    assert_eq!(detail["status"], "succeeded");
    assert_eq!(detail["amount"], 1250);
    assert_eq!(detail["currency"], "usd");
    let ledger = s.side.sim.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(detail["payment_intent"], ledger[0].id.as_str());

    // The same stream records again (a retried batch, a replay): the same event id, nothing new.
    let (_, again) = relay(&deps, &stream.records).await;
    assert_eq!(again.published, 1);
    let replayed = s.delivered().await;
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0]["detail"]["event_id"], detail["event_id"]);
    assert_eq!(publisher.calls.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn a_review_publishes_charge_needs_review() {
    let s = Outcomes::spawn().await;
    // A payment method Stripe does not know: a 400 that is our data's fault, not the card's, so
    // the charge function sends the order to a person.
    s.post("ord-out-unknown-pm", "pm_card_notAttachedToCustomer")
        .await;
    s.deliver_charges().await;
    let (deps, _) = s.notify(&s.bus);
    let (_, report) = relay(&deps, &s.stream_records().await.records).await;
    assert_eq!(report.published, 1);
    let delivered = s.delivered().await;
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0]["detail-type"], "ChargeNeedsReview");
    assert_eq!(delivered[0]["detail"]["status"], "needs_review");
    assert!(delivered[0]["detail"]["review_reason"]
        .as_str()
        .is_some_and(|r| !r.is_empty()));
    assert!(s.side.sim.ledger().is_empty(), "nothing was charged");
}

#[tokio::test]
async fn a_failed_publish_is_reported_for_retry_from_its_record() {
    let s = Outcomes::spawn().await;
    s.post("ord-out-2", "pm_card_visa").await;
    s.deliver_charges().await;
    let stream = s.stream_records().await;
    // The bus does not exist: PutEvents fails, and the batch resumes at the outcome's record.
    let (deps, publisher) = s.notify(&unique("no-such-bus"));
    let (response, report) = relay(&deps, &stream.records).await;
    assert_eq!((report.published, report.failed), (0, 1), "{report:?}");
    assert_eq!(
        publisher.calls.load(Ordering::Relaxed),
        1,
        "the publish was attempted"
    );
    let outcome_seq = stream
        .records
        .iter()
        .find(|r| notify::handler::outcome_in(r).unwrap().is_some())
        .and_then(|r| r.change.sequence_number.clone())
        .unwrap();
    assert_eq!(
        response.batch_item_failures[0].item_identifier.as_deref(),
        Some(outcome_seq.as_str())
    );
    assert!(s.delivered().await.is_empty());
    // The retry, once the bus answers, publishes it.
    let (deps, _) = s.notify(&s.bus);
    let (response, report) = relay(&deps, &stream.records).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(report.published, 1);
    assert_eq!(s.delivered().await.len(), 1);
}

#[tokio::test]
async fn one_unreadable_record_in_twenty_is_parked_with_its_reason_and_nineteen_publish() {
    let s = Outcomes::spawn().await;
    // Twenty settled records written straight to the table, the 9th with an amount no operation
    // has (-5), and a settled status, so the mapping's filter would let it through to the relay.
    let mut good_orders = Vec::new();
    let mut bad_pk = String::new();
    for i in 0..20 {
        let order = format!("ord-batch-{i:02}");
        let op = charge_core::testing::order(&order)
            .status(OperationStatus::Succeeded)
            .external_id(&format!("pi_batch{i:02}"))
            .build();
        let mut item = operation_to_item(&op);
        if i == 8 {
            item.insert(
                "amount".into(),
                aws_sdk_dynamodb::types::AttributeValue::N("-5".into()),
            );
            bad_pk = format!("ORDER#{order}");
        } else {
            good_orders.push(order);
        }
        s.put_raw(item).await;
    }
    let stream = s.stream_records().await;
    assert_eq!(stream.records.len(), 20, "one batch of 20 stream records");
    let bad = stream
        .records
        .iter()
        .find(|r| notify::handler::outcome_in(r).is_err())
        .expect("the real stream carries the unreadable record");
    let bad_seq = bad.change.sequence_number.clone().unwrap();

    let (deps, publisher) = s.notify(&s.bus);
    let (response, report) = relay(&deps, &stream.records).await;
    assert!(
        response.batch_item_failures.is_empty(),
        "nothing to retry: {:?}",
        response.batch_item_failures
    );
    assert_eq!(
        (
            report.published,
            report.malformed,
            report.parked,
            report.failed
        ),
        (19, 1, 1, 0),
        "{report:?}"
    );
    assert_eq!(publisher.calls.load(Ordering::Relaxed), 2, "10 + 9 entries");

    // 19 outcome events reached the order service's queue, one per good order.
    let delivered = s.delivered().await;
    assert_eq!(delivered.len(), 19, "{delivered:?}");
    let mut orders: Vec<String> = delivered
        .iter()
        .map(|e| {
            assert_eq!(e["detail-type"], "ChargeSucceeded");
            e["detail"]["order_id"].as_str().unwrap().to_owned()
        })
        .collect();
    orders.sort();
    assert_eq!(orders, good_orders);

    // One message on the relay's (standard) DLQ: the reason, the record's coordinates, the record.
    assert!(!s.notify_dlq_url.ends_with(".fifo"));
    let parked = s.drain(&s.notify_dlq_url).await;
    assert_eq!(parked.len(), 1, "{parked:?}");
    let m = &parked[0];
    let attr = |name: &str| {
        m.message_attributes()
            .and_then(|a| a.get(name))
            .and_then(|v| v.string_value())
            .map(str::to_owned)
    };
    assert_eq!(
        attr("reason").as_deref(),
        Some(notify::handler::UNREADABLE_REASON)
    );
    assert_eq!(
        attr("source_message_id").as_deref(),
        Some(bad.event_id.as_str())
    );
    assert_eq!(attr("source_group_id"), None, "a standard queue: no group");
    let body: Value = serde_json::from_str(m.body().unwrap()).unwrap();
    let reason = body["reason"].as_str().unwrap();
    assert!(reason.contains("amount"), "{reason}");
    assert_eq!(attr("detail").as_deref(), Some(reason));
    assert_eq!(body["sequence_number"], bad_seq.as_str());
    assert_eq!(body["event_id"], bad.event_id.as_str());
    assert_eq!(body["event_name"], "INSERT");
    assert_eq!(body["keys"]["pk"]["S"], bad_pk.as_str());
    assert_eq!(body["record"]["dynamodb"]["NewImage"]["amount"]["N"], "-5");
    let raw: aws_lambda_events::dynamodb::EventRecord =
        serde_json::from_value(body["record"].clone()).unwrap();
    assert_eq!(
        &raw, bad,
        "the record as the stream gave it: replayable by hand"
    );
}

/// A principal with `lambda:InvokeFunction` on the relay hands it a stream-shaped event of its own
/// making: well-formed operation items, settled `succeeded`, with the table's own stream ARN in
/// `eventSourceARN`. The relay reads each back from the table (GetItem, strongly consistent, on
/// moto) and publishes none: one order the table holds `pending`, one it does not hold at all. In
/// the same batch, the genuine outcome of a charged order is published. Each forged record is on
/// the relay's DLQ with the reason.
#[tokio::test]
async fn a_forged_stream_event_publishes_nothing_the_table_does_not_hold() {
    let s = Outcomes::spawn().await;
    s.post("ord-out-real", "pm_card_visa").await;
    s.deliver_charges().await;
    let uncharged = s.post("ord-out-uncharged", "pm_card_visa").await;
    let genuine = s.stream_records().await;
    let arn = genuine.records[0].event_source_arn.clone();
    let forged = |seq: u32, order: &str, operation_id: Option<&str>| {
        let mut op = charge_core::testing::order(order)
            .status(OperationStatus::Succeeded)
            .external_id("pi_3ForgedIntent0000000001");
        if let Some(id) = operation_id {
            op = op.operation_id(id);
        }
        let op = op.build();
        let item = charge_once::adapters::dynamodb::item::item_json(&operation_to_item(&op));
        serde_json::from_value::<aws_lambda_events::dynamodb::EventRecord>(json!({
            "eventID": format!("forged-{seq}"),
            "eventName": "INSERT",
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "eventSourceARN": arn,
            "dynamodb": {
                "Keys": {"pk": {"S": format!("ORDER#{order}")}, "sk": {"S": "charge"}},
                "NewImage": item,
                "SequenceNumber": format!("{seq:021}"),
                "SizeBytes": 300,
                "StreamViewType": "NEW_AND_OLD_IMAGES",
            },
        }))
        .unwrap()
    };
    let mut records = vec![
        forged(1, "ord-out-uncharged", uncharged["operation_id"].as_str()),
        forged(2, "ord-out-nowhere", None),
    ];
    records.extend(genuine.records.iter().cloned());
    let (deps, _) = s.notify(&s.bus);
    let (response, report) = relay(&deps, &records).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");
    assert_eq!(
        (report.published, report.not_in_table),
        (1, 2),
        "{report:?}"
    );
    let delivered = s.delivered().await;
    let orders: Vec<_> = delivered
        .iter()
        .map(|e| (e["detail-type"].clone(), e["detail"]["order_id"].clone()))
        .collect();
    assert_eq!(orders, [(json!("ChargeSucceeded"), json!("ord-out-real"))]);
    let parked = s.drain(&s.notify_dlq_url).await;
    let mut reasons: Vec<_> = parked
        .iter()
        .map(|m| {
            let attr = |name: &str| {
                m.message_attributes()
                    .and_then(|a| a.get(name))
                    .and_then(|v| v.string_value())
                    .unwrap_or_default()
                    .to_owned()
            };
            (attr("source_message_id"), attr("reason"), attr("detail"))
        })
        .collect();
    reasons.sort();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert_eq!(reasons[0].0, "forged-1");
    assert_eq!(reasons[0].1, notify::handler::NOT_IN_TABLE_REASON);
    assert!(reasons[0].2.contains("status pending"), "{reasons:?}");
    assert_eq!(reasons[1].0, "forged-2");
    assert!(reasons[1].2.contains("no record"), "{reasons:?}");
    // The uncharged order is still pending; nothing was written.
    let still = s
        .store
        .get(&charge_core::operation::OperationKey::charge(
            charge_core::domain::OrderId::parse("ord-out-uncharged").unwrap(),
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(still.status, OperationStatus::Pending);
}

/// The read-back failing (the table unreachable: here, a relay configured with a table that does
/// not exist) publishes nothing and names the outcome's record for Lambda's retry.
#[tokio::test]
async fn a_read_back_that_fails_is_retried_from_its_record() {
    let s = Outcomes::spawn().await;
    s.post("ord-out-noread", "pm_card_visa").await;
    s.deliver_charges().await;
    let stream = s.stream_records().await;
    let (mut deps, publisher) = s.notify(&s.bus);
    deps.store = Arc::new(charge_once::adapters::dynamodb::DynamoStore::new(
        s.dynamo.clone(),
        unique("no-such-table"),
    ));
    let (response, report) = relay(&deps, &stream.records).await;
    assert_eq!(
        (report.published, report.not_in_table),
        (0, 0),
        "{report:?}"
    );
    assert_eq!(publisher.calls.load(Ordering::Relaxed), 0);
    let outcome_seq = stream
        .records
        .iter()
        .find(|r| notify::handler::outcome_in(r).unwrap().is_some())
        .and_then(|r| r.change.sequence_number.clone())
        .unwrap();
    assert_eq!(
        response.batch_item_failures[0].item_identifier.as_deref(),
        Some(outcome_seq.as_str())
    );
    assert!(s.delivered().await.is_empty());
}

#[tokio::test]
async fn get_answers_200_or_404_behind_the_same_door() {
    let s = Outcomes::spawn().await;
    let status = |order: &str| for_order(api_event("checkout-status.json"), order, "pm_card_visa");
    let deps = s.checkout();
    let resp = checkout::handler::handle(
        &deps,
        LambdaEvent::new(status("ord-out-3"), Context::default()),
    )
    .await;
    assert_eq!(resp.status_code, 404);
    let accepted = s.post("ord-out-3", "pm_card_visa").await;
    s.deliver_charges().await;
    let resp = checkout::handler::handle(
        &deps,
        LambdaEvent::new(status("ord-out-3"), Context::default()),
    )
    .await;
    assert_eq!(resp.status_code, 200);
    let b = json_body(&resp);
    assert_eq!(b["operation_id"], accepted["operation_id"]);
    assert_eq!(b["status"], "succeeded");
    assert!(b["payment_intent"].as_str().unwrap().starts_with("pi_"));
    let mut anonymous = status("ord-out-3");
    anonymous.request_context.authorizer = None;
    let resp =
        checkout::handler::handle(&deps, LambdaEvent::new(anonymous, Context::default())).await;
    assert_eq!(resp.status_code, 401);
}

/// The signing secret of the refund tests' webhook endpoint at stripe-sim (a fixture).
const REFUND_SECRET: &str = "whsec_RefundLateFailure0123456789abcdef";

/// A refund that Stripe fails after it succeeded, end to end on the local stack: the charge and
/// its refund made over HTTP at stripe-sim (paid with Stripe's `pm_card_refundFail`), recorded
/// on moto; stripe-sim's late failure and its events, delivered signed to the events function;
/// the refund recorded failed with its 400 back on the charge (a new refund of all 1000 accepted:
/// the twin of the refusal before), `RefundFailedAfterSuccess` counted, and the stream's relay
/// publishing a `RefundFailed` saying so beside the earlier `RefundSucceeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_stripe_fails_later_is_recorded_released_counted_and_published() {
    let s = Outcomes::spawn().await;
    let (charge, refund) = refunded_at_sim(&s, "ord-late-aws", "pm_card_refundFail").await;
    assert_eq!(s.current(&refund).await.status, OperationStatus::Succeeded);
    // The relay runs as the stream delivers: the refund's success is published first (the relay
    // publishes what the table holds when it reads).
    let (deps, _) = s.notify(&s.bus);
    let _ = relay(&deps, &s.stream_records().await.records).await;
    let mut delivered = s.delivered().await;
    // Before: only 600 is left, and asking for all 1000 is refused.
    assert!(ask_refund(&s, &charge, "r-all", 1000).await.is_err());
    s.side.clock.advance(REFUND_SETTLE + Duration::from_secs(1));
    let (events, metrics) = deliver_refund_events(&s).await;
    assert!(
        events.iter().any(|(t, _)| t == "refund.failed"),
        "{events:?}"
    );
    let failed = s.current(&refund).await;
    assert_eq!(failed.status, OperationStatus::Failed);
    assert!(failed
        .last_error
        .as_deref()
        .unwrap()
        .contains("expired_or_canceled_card"));
    assert_eq!(
        s.current(&charge).await.refund_reserved(),
        0,
        "the 400 is back"
    );
    assert_eq!(
        metrics.sum("RefundFailedAfterSuccess", &[("Function", "webhook")]),
        1.0,
        "counted once, however many of its events came: {events:?}"
    );
    // The twin: the released amount is refundable again, all of it.
    assert!(ask_refund(&s, &charge, "r-all", 1000).await.is_ok());
    // The outbox: the relay publishes the late failure as its own RefundFailed.
    let _ = relay(&deps, &s.stream_records().await.records).await;
    delivered.extend(s.delivered().await);
    let of_refund = |kind: &str| {
        delivered
            .iter()
            .filter(|e| e["detail-type"] == kind)
            .filter(|e| e["detail"]["operation_id"] == refund.operation_id.to_string())
            .cloned()
            .collect::<Vec<_>>()
    };
    let (succeeded, failed) = (of_refund("RefundSucceeded"), of_refund("RefundFailed"));
    assert_eq!((succeeded.len(), failed.len()), (1, 1), "{delivered:?}");
    let detail = &failed[0]["detail"];
    assert_eq!(detail["failed_after_success"], true, "{detail}");
    assert_eq!(detail["failure_reason"], "expired_or_canceled_card");
    assert_ne!(detail["event_id"], succeeded[0]["detail"]["event_id"]);
}

/// The twin of the late failure: an event that says a refund failed while Stripe holds it
/// succeeded (forged, with a valid signature) changes nothing, is paged as a mismatch, and is not
/// counted as a late failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_refund_failure_changes_nothing_on_the_local_stack() {
    let s = Outcomes::spawn().await;
    let (charge, refund) = refunded_at_sim(&s, "ord-forged-aws", "pm_card_visa").await;
    let before = s.current(&refund).await;
    assert_eq!(before.status, OperationStatus::Succeeded);
    let _ = deliver_refund_events(&s).await;
    let forged = json!({
        "id": "evt_forged_refund_failed", "object": "event", "type": "refund.failed",
        "created": 1_800_000_000,
        "data": {"object": {
            "id": before.stripe_refund_id().map(|id| id.as_str()).unwrap(), "object": "refund",
            "status": "failed", "failure_reason": "lost_or_stolen_card", "amount": 400,
            "currency": "usd",
            "metadata": {
                "order_id": refund.order_id.as_str(),
                "operation_id": refund.operation_id.to_string(),
            },
        }},
    });
    let (f, metrics) = webhook_function(&s);
    let body = forged.to_string();
    let now = s.side.clock.now().as_millis() / 1000;
    let secret = charge_once::events::WebhookSecret::parse(REFUND_SECRET).unwrap();
    let signature = charge_once::events::signature::sign_header(&secret, now, body.as_bytes());
    let resp = events::handler::handle_http(
        &f,
        LambdaEvent::new(
            events::handler::delivery_request(&body, &signature),
            Context::default(),
        ),
    )
    .await;
    assert_eq!(resp.status_code, 200);
    assert_eq!(json_body(&resp)["outcome"], "status_contradicted");
    assert_eq!(s.current(&refund).await, before, "nothing written");
    assert_eq!(s.current(&charge).await.refund_reserved(), 400);
    assert_eq!(
        metrics.sum("EventMismatch", &[("Function", "webhook")]),
        1.0
    );
    assert_eq!(
        metrics.sum("RefundFailedAfterSuccess", &[("Function", "webhook")]),
        0.0
    );
    assert!(ask_refund(&s, &charge, "r-more", 601).await.is_err());
}

/// How long stripe-sim takes to fail a `pm_card_refundFail` refund (simulated time).
const REFUND_SETTLE: Duration = Duration::from_secs(600);

/// A charge of 1000 usd paid with `pm`, and a refund of 400 of it, both executed over HTTP at
/// stripe-sim and recorded on moto; stripe-sim's webhooks on (in process, signed).
async fn refunded_at_sim(
    s: &Outcomes,
    order: &str,
    pm: &str,
) -> (
    charge_core::operation::Operation,
    charge_core::operation::Operation,
) {
    s.side.sim.set_refund_settle(REFUND_SETTLE);
    s.side
        .sim
        .set_webhooks(stripe_sim::WebhookConfig {
            secret: Some(REFUND_SECRET.to_owned()),
            ..stripe_sim::WebhookConfig::default()
        })
        .unwrap();
    let deps = s.charge_deps();
    let charge = charge_core::testing::order(order)
        .amount(1000)
        .payment_method(pm)
        .at(s.clock().now())
        .create_in(s.store.as_ref())
        .await;
    let r = execute(&deps, &charge.key(), &charge.operation_id)
        .await
        .unwrap();
    assert_eq!(r.status, OperationStatus::Succeeded);
    let refund = ask_refund(s, &charge, "r-1", 400).await.unwrap();
    execute(&deps, &refund.key(), &refund.operation_id)
        .await
        .unwrap();
    (s.current(&charge).await, s.current(&refund).await)
}

/// The refund `id` of `amount` of `charge` as stored now, as the door accepts it, or its refusal.
async fn ask_refund(
    s: &Outcomes,
    charge: &charge_core::operation::Operation,
    id: &str,
    amount: i64,
) -> Result<charge_core::operation::Operation, String> {
    let charge = s.current(charge).await;
    let request = RefundRequest {
        amount: Some(charge_core::domain::Amount::new(amount).unwrap()),
        reason: None,
    };
    let now = s.clock().now();
    let (params, reserve) = refund::reserve(&charge, &request, now).map_err(|e| e.to_string())?;
    let op = charge_core::operation::Operation::new_refund(
        charge.order_id.clone(),
        charge_core::domain::RefundId::parse(id).unwrap(),
        &request,
        params,
        charge_core::domain::Principal::jwt("support").unwrap(),
        now,
        Duration::from_secs(300),
    );
    match s
        .store
        .create_beside(&op, ChargeClaim::Reserve(&reserve))
        .await
        .unwrap()
    {
        CreatedBeside::New(op) => Ok(op),
        other => Err(format!("{other:?}")),
    }
}

/// The events function as deployed (webhook route), its metrics captured, on the stack's store,
/// a fresh inbox and stripe-sim.
fn webhook_function(s: &Outcomes) -> (EventsFunction, Arc<CapturedMetrics>) {
    let metrics = Arc::new(CapturedMetrics::new());
    let f = EventsFunction {
        events: EventsDeps {
            charge: s.charge_deps(),
            inbox: s.inbox.clone(),
            secrets: Some(vec![charge_once::events::WebhookSecret::parse(
                REFUND_SECRET,
            )
            .unwrap()]),
            tolerance: DEFAULT_TOLERANCE,
            event_source: None,
        },
        metrics: metrics.clone(),
    };
    (f, metrics)
}

/// Every event stripe-sim has due now, delivered signed to the events function as Stripe posts
/// it: (type, outcome) of each, and the function's metrics.
async fn deliver_refund_events(s: &Outcomes) -> (Vec<(String, String)>, Arc<CapturedMetrics>) {
    let (f, metrics) = webhook_function(s);
    let mut seen = Vec::new();
    for d in s.side.sim.take_due_webhooks() {
        let req = events::handler::delivery_request(&d.body, &d.signature);
        let resp =
            events::handler::handle_http(&f, LambdaEvent::new(req, Context::default())).await;
        assert_eq!(
            resp.status_code,
            200,
            "{}: {}",
            d.event_type,
            json_body(&resp)
        );
        let outcome = json_body(&resp)["outcome"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        seen.push((d.event_type, outcome));
    }
    (seen, metrics)
}

/// An authorization and its capture through the real functions: the relay publishes
/// `ChargeAuthorized` (with Stripe's deadline) when the charge is held, then `ChargeCaptured` (with
/// what was taken) when the capture ends it; the capture's own record publishes nothing (its
/// outcome is the charge's), and a replay of the stream publishes the same event ids.
#[tokio::test]
async fn an_authorization_publishes_authorized_then_captured() {
    let s = Outcomes::spawn().await;
    let checkout = s.checkout();
    let post = |file: &'static str| {
        let checkout = &checkout;
        async move {
            let resp = checkout::handler::handle(
                checkout,
                LambdaEvent::new(api_event(file), Context::default()),
            )
            .await;
            assert_eq!(resp.status_code, 202, "{}", json_body(&resp));
        }
    };
    post("checkout-authorize.json").await;
    s.deliver_charges().await;
    post("capture-valid.json").await;
    s.deliver_charges().await;

    let stream = s.stream_records().await;
    let (deps, _) = s.notify(&s.bus);
    let (response, report) = relay(&deps, &stream.records).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(report.published, 2, "{report:?}");
    let delivered = s.delivered().await;
    let types: Vec<&str> = delivered
        .iter()
        .map(|e| e["detail-type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["ChargeAuthorized", "ChargeCaptured"]);
    let (held, captured) = (&delivered[0]["detail"], &delivered[1]["detail"]);
    assert_eq!(held["status"], "authorized");
    assert!(held["capture_before"].is_string(), "{held}");
    assert_eq!(captured["status"], "succeeded");
    assert_eq!(
        (
            captured["amount"].clone(),
            captured["amount_captured"].clone()
        ),
        (1250.into(), 1000.into())
    );
    assert_eq!(
        held["operation_id"], captured["operation_id"],
        "both are the charge's"
    );

    let (_, again) = relay(&deps, &stream.records).await;
    assert_eq!(again.published, 2);
    let replayed = s.delivered().await;
    let ids =
        |d: &[Value]| -> Vec<Value> { d.iter().map(|e| e["detail"]["event_id"].clone()).collect() };
    assert_eq!(ids(&replayed), ids(&delivered));
}
