//! `outcome_events.json`: the outcome events as the order service receives them (from 2026-11-30 on).
//! The operations table's stream, read from moto, is handed to the release's notify relay, which
//! publishes to a bus on moto; a rule on that bus delivers to an SQS queue. The adapter supplies
//! `publish` (the release's relay with its EventBridge publisher) and `image_json` (an item as the
//! DynamoDB JSON image a stream record carries), which move between releases.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};
use testkit::aws::unique;

use super::{image_json, publish};
use crate::{case_index, case_of_order, World};

/// The operations table's stream, through the release's notify relay and EventBridge publisher to
/// a bus on moto, and what a rule on that bus delivered to an SQS queue: (source, detail-type,
/// detail) per event, in case order, then stream order.
pub async fn delivered(w: &World) -> Vec<Value> {
    let events = aws_sdk_eventbridge::Client::new(&w.config);
    let streams = aws_sdk_dynamodbstreams::Client::new(&w.config);
    let (bus, url) = bus_to_queue(&events, &w.sqs).await;
    let records = stream_records(&w.dynamo, &streams, w.store.table()).await;
    assert!(
        !records.records.is_empty(),
        "the table has a stream with records"
    );
    let published = publish(w, &events, &bus, &records.records).await;

    let mut delivered: Vec<(usize, usize, Value)> = Vec::new();
    let mut seq = 0;
    loop {
        let out = w
            .sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        if out.messages().is_empty() {
            break;
        }
        for m in out.messages() {
            let envelope: Value = serde_json::from_str(m.body().unwrap()).unwrap();
            let detail = envelope["detail"].clone();
            let case = case_of_order(detail["order_id"].as_str().expect("order_id"));
            delivered.push((
                case_index(&case),
                seq,
                json!({
                    "case": case,
                    "source": envelope["source"],
                    "detail_type": envelope["detail-type"],
                    "detail": sorted(&detail),
                }),
            ));
            seq += 1;
            w.sqs
                .delete_message()
                .queue_url(&url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
    assert_eq!(
        delivered.len(),
        published,
        "every published event was delivered"
    );
    delivered.sort_by_key(|(i, s, _)| (*i, *s));
    delivered.into_iter().map(|(.., v)| v).collect()
}

/// A fresh bus whose rule (`{"source":["charge-once"]}`, as the order service's) delivers to a
/// fresh SQS queue: (bus name, queue URL).
async fn bus_to_queue(
    events: &aws_sdk_eventbridge::Client,
    sqs: &aws_sdk_sqs::Client,
) -> (String, String) {
    let bus = unique("charge-once");
    events
        .create_event_bus()
        .name(&bus)
        .send()
        .await
        .expect("CreateEventBus");
    let url = sqs
        .create_queue()
        .queue_name(unique("outcomes"))
        .send()
        .await
        .expect("CreateQueue")
        .queue_url()
        .unwrap()
        .to_owned();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes()
        .unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn]
        .clone();
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
                .arn(arn)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("PutTargets");
    (bus, url)
}

/// Every record on the table's stream so far, as Lambda's event source delivers them.
async fn stream_records(
    dynamo: &aws_sdk_dynamodb::Client,
    streams: &aws_sdk_dynamodbstreams::Client,
    table: &str,
) -> aws_lambda_events::dynamodb::Event {
    let arn = dynamo
        .describe_table()
        .table_name(table)
        .send()
        .await
        .unwrap()
        .table()
        .unwrap()
        .latest_stream_arn()
        .expect("the table has a stream")
        .to_owned();
    let stream = streams
        .describe_stream()
        .stream_arn(&arn)
        .send()
        .await
        .unwrap();
    let mut records = Vec::new();
    for shard in stream.stream_description().unwrap().shards() {
        let mut iterator = streams
            .get_shard_iterator()
            .stream_arn(&arn)
            .shard_id(shard.shard_id().unwrap())
            .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap()
            .shard_iterator()
            .map(str::to_owned);
        while let Some(it) = iterator {
            let out = streams
                .get_records()
                .shard_iterator(it)
                .send()
                .await
                .unwrap();
            if out.records().is_empty() {
                break;
            }
            for r in out.records() {
                records.push(lambda_record(r, &arn));
            }
            iterator = out.next_shard_iterator().map(str::to_owned);
        }
    }
    serde_json::from_value(json!({ "Records": records })).expect("a Lambda DynamoDB stream event")
}

/// A DynamoDB Streams record from the SDK as the Lambda event record JSON (as the release's own
/// tests/outcomes_on_aws.rs builds it).
fn lambda_record(r: &aws_sdk_dynamodbstreams::types::Record, arn: &str) -> Value {
    use aws_sdk_dynamodb::types::AttributeValue as D;
    use aws_sdk_dynamodbstreams::types::AttributeValue as S;
    fn convert(a: &S) -> D {
        match a {
            S::S(s) => D::S(s.clone()),
            S::N(n) => D::N(n.clone()),
            S::Bool(b) => D::Bool(*b),
            S::Null(b) => D::Null(*b),
            S::Ss(v) => D::Ss(v.clone()),
            S::Ns(v) => D::Ns(v.clone()),
            S::L(v) => D::L(v.iter().map(convert).collect()),
            S::M(m) => D::M(m.iter().map(|(k, v)| (k.clone(), convert(v))).collect()),
            other => panic!("attribute type not in our items: {other:?}"),
        }
    }
    let image = |m: Option<&HashMap<String, S>>| {
        m.map(|m| image_json(&m.iter().map(|(k, v)| (k.clone(), convert(v))).collect()))
    };
    let d = r.dynamodb().unwrap();
    let mut change = json!({
        "Keys": image(d.keys()),
        "SequenceNumber": d.sequence_number(),
        "SizeBytes": d.size_bytes().unwrap_or(0),
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    });
    if let Some(new) = image(d.new_image()) {
        change["NewImage"] = new;
    }
    if let Some(old) = image(d.old_image()) {
        change["OldImage"] = old;
    }
    json!({
        "eventID": r.event_id(),
        "eventName": r.event_name().map(|n| n.as_str()),
        "eventVersion": r.event_version(),
        "eventSource": "aws:dynamodb",
        "awsRegion": r.aws_region(),
        "dynamodb": change,
        "eventSourceARN": arn,
    })
}

/// A JSON value with every object's keys sorted.
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let s: BTreeMap<&String, Value> = m.iter().map(|(k, v)| (k, sorted(v))).collect();
            Value::Object(s.into_iter().map(|(k, v)| (k.clone(), v)).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}
