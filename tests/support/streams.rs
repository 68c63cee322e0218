//! DynamoDB Streams records as the Lambda event the notify relay receives, and the event filter
//! Lambda applies to them before the relay sees one ([`pattern_matches`]).

use aws_sdk_dynamodb::types::AttributeValue as D;
use aws_sdk_dynamodbstreams::types::{AttributeValue as S, Record};
use charge_once::adapters::dynamodb::item::item_json;
use serde_json::{json, Value};

/// A DynamoDB Streams record read with the SDK (`GetRecords` on moto) as the record JSON of
/// Lambda's DynamoDB stream event (`NEW_AND_OLD_IMAGES`, as the template's stream), from the
/// stream `arn`. Panics on an attribute type our items never hold, or a record without its
/// `dynamodb` part: either is a bug in the harness, not a case to measure.
pub fn lambda_record(r: &Record, arn: &str) -> Value {
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
    let image = |m: Option<&std::collections::HashMap<String, S>>| {
        m.map(|m| item_json(&m.iter().map(|(k, v)| (k.clone(), convert(v))).collect()))
    };
    let d = r.dynamodb().expect("a stream record has its dynamodb part");
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

/// Whether a Lambda event filter pattern matches `record` (a record as [`lambda_record`] gives
/// it), for the part of EventBridge's pattern syntax the notify relay's filter uses: nested
/// objects, and at a leaf a list of alternatives, each an exact string or
/// `{"exists": true|false}`. Anything else panics rather than be judged wrongly.
pub fn pattern_matches(pattern: &Value, record: &Value) -> bool {
    let fields = pattern.as_object().expect("a pattern is an object");
    fields.iter().all(|(key, want)| {
        let got = record.get(key);
        match want {
            Value::Object(_) => got.is_some_and(|g| g.is_object() && pattern_matches(want, g)),
            Value::Array(alternatives) => alternatives.iter().any(|alt| match alt {
                Value::String(s) => got.and_then(Value::as_str) == Some(s.as_str()),
                Value::Object(o) if o.len() == 1 && o.contains_key("exists") => {
                    got.is_some() == o["exists"].as_bool().expect("exists: a bool")
                }
                other => panic!("pattern syntax not evaluated here: {other}"),
            }),
            other => panic!("pattern syntax not evaluated here: {other}"),
        }
    })
}

/// Every record on the stream `arn` so far, each shard read from its start (`TRIM_HORIZON`) until
/// a read comes back empty, in shard order. Panics on a failed call: a harness on moto.
pub async fn read_all(client: &aws_sdk_dynamodbstreams::Client, arn: &str) -> Vec<Record> {
    let stream = client
        .describe_stream()
        .stream_arn(arn)
        .send()
        .await
        .expect("DescribeStream");
    let mut records = Vec::new();
    for shard in stream
        .stream_description()
        .expect("DescribeStream describes the stream")
        .shards()
    {
        let mut iterator = client
            .get_shard_iterator()
            .stream_arn(arn)
            .shard_id(shard.shard_id().expect("a shard has an id"))
            .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("GetShardIterator")
            .shard_iterator()
            .map(str::to_owned);
        while let Some(it) = iterator {
            let out = client
                .get_records()
                .shard_iterator(it)
                .send()
                .await
                .expect("GetRecords");
            if out.records().is_empty() {
                break;
            }
            records.extend(out.records().iter().cloned());
            iterator = out.next_shard_iterator().map(str::to_owned);
        }
    }
    records
}
