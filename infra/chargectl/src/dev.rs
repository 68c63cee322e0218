//! `chargectl dev`: local-development helpers that play the part of Lambda's SQS event source
//! (the "poller") against a local queue, so `cargo lambda invoke charge` gets what production
//! gets.
//!
//! - `chargectl dev sqs-event` — the poller's *receive*: one `ReceiveMessage` (all system and
//!   message attributes), printed as the SQS event Lambda would deliver to the charge function:
//!   `messageId`, `receiptHandle`, `body`, the FIFO `attributes` (`ApproximateReceiveCount`,
//!   `SentTimestamp`, `SequenceNumber`, `MessageGroupId`, `MessageDeduplicationId`,
//!   `ApproximateFirstReceiveTimestamp`, ...), `messageAttributes`, `md5OfBody`,
//!   `eventSource: "aws:sqs"`, `eventSourceARN` (the queue's real ARN) and `awsRegion`.
//!   It deletes nothing: the messages are in flight (invisible for the visibility timeout) exactly
//!   as while Lambda runs the function.
//! - `chargectl dev sqs-ack` — the poller's *after*: given that event and the function's answer,
//!   deletes the messages the function did not report in `batchItemFailures`, by Lambda's rules
//!   for `ReportBatchItemFailures` (an invalid answer, or an `itemIdentifier` that is empty,
//!   missing or not in the batch, fails the whole batch: nothing is deleted). A message that is
//!   not deleted comes back after the visibility timeout, as in production.
//!
//! Why two steps and not "receive and delete": deleting on receive would lose a message whose
//! charge invoke fails (production never does that; only the unknown index would still find the
//! operation), and never deleting would redeliver every message after 30 s, so each later event
//! would carry old messages too. Receive → invoke → ack is the poller's own order.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::Path;

use aws_sdk_sqs::types::{Message, MessageAttributeValue, MessageSystemAttributeName};
use aws_sdk_sqs::Client;
use serde_json::{json, Map, Value};

use crate::aws::aws_config;
use crate::cli::{DevArgs, DevCommand, GlobalArgs, SqsEventArgs};
use crate::commands::{Console, Failure};

/// Runs a `dev` subcommand against the queue named by `--queue-url` / `QUEUE_URL`.
pub async fn run(
    global: &GlobalArgs,
    args: DevArgs,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    let queue_url = global
        .queue_url
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Failure::Usage("`dev` needs --queue-url (or QUEUE_URL)".into()))?
        .to_owned();
    match args.command {
        DevCommand::SqsEvent(a) => {
            let client = Client::new(&aws_config(global).await);
            sqs_event(&client, &queue_url, &a, console).await
        }
        DevCommand::SqsAck(a) => {
            // Both inputs are read and checked before anything is deleted.
            let event_text = read_input(&a.event)?;
            let response_text = read_input(&a.response)?;
            let event = parse_event(&event_text)
                .map_err(|e| Failure::Usage(format!("{}: {e}", a.event)))?;
            let plan = ack_plan(&event, &response_text);
            let client = Client::new(&aws_config(global).await);
            sqs_ack(&client, &queue_url, &plan, console).await
        }
    }
}

fn read_input(path: &str) -> Result<String, Failure> {
    let mut text = String::new();
    let read = if path == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(Path::new(path)).map(|t| text = t)
    };
    read.map_err(|e| Failure::Usage(format!("cannot read {path}: {e}")))?;
    Ok(text)
}

/// `chargectl dev sqs-event`: one receive, printed as Lambda's SQS event.
pub async fn sqs_event(
    client: &Client,
    queue_url: &str,
    args: &SqsEventArgs,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    let attrs = client
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| Failure::infra(format!("reading the attributes of {queue_url}"), e))?;
    let queue_arn = attrs
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn))
        .cloned()
        .ok_or_else(|| Failure::Refused(format!("{queue_url} has no QueueArn attribute")))?;
    let region = region_of_arn(&queue_arn)
        .ok_or_else(|| {
            Failure::Refused(format!(
                "cannot read a region from the queue ARN {queue_arn:?}"
            ))
        })?
        .to_owned();

    let mut receive = client
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(args.max)
        .wait_time_seconds(args.wait_secs)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .message_attribute_names("All");
    if let Some(vt) = args.visibility_timeout {
        receive = receive.visibility_timeout(vt);
    }
    let out = receive
        .send()
        .await
        .map_err(|e| Failure::infra(format!("receiving from {queue_url}"), e))?;
    let messages = out.messages();
    if messages.is_empty() {
        return Err(Failure::Refused(format!(
            "no visible message on {queue_url} within {} s: nothing to turn into an event \
             (already received and not yet back from its visibility timeout, or already deleted; \
             `chargectl unknowns` lists what is still unsettled)",
            args.wait_secs
        )));
    }
    let event = event_from_messages(messages, &queue_arn, &region);
    let text = serde_json::to_string_pretty(&event)
        .map_err(|e| Failure::infra("cannot encode the event", e))?;
    writeln!(console.out, "{text}")?;
    writeln!(
        console.err,
        "{} message(s) received from {queue_url}; in flight until the visibility timeout. \
         After the charge invoke, `chargectl dev sqs-ack` deletes those not reported failed.",
        messages.len()
    )?;
    Ok(())
}

/// The region of an ARN (`arn:aws:sqs:<region>:<account>:<name>`).
pub fn region_of_arn(arn: &str) -> Option<&str> {
    let mut parts = arn.split(':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("arn"), Some(_), Some(_), Some(region)) if !region.is_empty() => Some(region),
        _ => None,
    }
}

/// Lambda's SQS event for `messages` received from the queue `queue_arn`.
pub fn event_from_messages(messages: &[Message], queue_arn: &str, region: &str) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|m| record_from_message(m, queue_arn, region))
        .collect();
    json!({ "Records": records })
}

fn record_from_message(m: &Message, queue_arn: &str, region: &str) -> Value {
    let attributes: Map<String, Value> = m
        .attributes()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str().to_owned(), Value::String(v.clone())))
        .collect();
    let message_attributes: Map<String, Value> = m
        .message_attributes()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), message_attribute(v)))
        .collect();
    let mut record = Map::new();
    record.insert("messageId".into(), opt(m.message_id()));
    record.insert("receiptHandle".into(), opt(m.receipt_handle()));
    record.insert("body".into(), opt(m.body()));
    record.insert("attributes".into(), Value::Object(attributes));
    record.insert(
        "messageAttributes".into(),
        Value::Object(message_attributes),
    );
    record.insert("md5OfBody".into(), opt(m.md5_of_body()));
    // Lambda includes it only when the message has attributes.
    if let Some(md5) = m.md5_of_message_attributes() {
        record.insert(
            "md5OfMessageAttributes".into(),
            Value::String(md5.to_owned()),
        );
    }
    record.insert("eventSource".into(), Value::String("aws:sqs".into()));
    record.insert("eventSourceARN".into(), Value::String(queue_arn.to_owned()));
    record.insert("awsRegion".into(), Value::String(region.to_owned()));
    Value::Object(record)
}

fn opt(v: Option<&str>) -> Value {
    v.map_or(Value::Null, |s| Value::String(s.to_owned()))
}

/// A message attribute as Lambda spells it (binary values in base64).
fn message_attribute(v: &MessageAttributeValue) -> Value {
    let mut a = Map::new();
    if let Some(s) = v.string_value() {
        a.insert("stringValue".into(), Value::String(s.to_owned()));
    }
    if let Some(b) = v.binary_value() {
        a.insert("binaryValue".into(), Value::String(base64(b.as_ref())));
    }
    a.insert(
        "stringListValues".into(),
        Value::Array(
            v.string_list_values()
                .iter()
                .cloned()
                .map(Value::String)
                .collect(),
        ),
    );
    a.insert(
        "binaryListValues".into(),
        Value::Array(
            v.binary_list_values()
                .iter()
                .map(|b| Value::String(base64(b.as_ref())))
                .collect(),
        ),
    );
    a.insert("dataType".into(), Value::String(v.data_type().to_owned()));
    Value::Object(a)
}

/// Standard base64 with padding (RFC 4648), as Lambda encodes binary attributes.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// One record of an event file: what `sqs-ack` needs to delete it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    pub message_id: String,
    pub receipt_handle: String,
}

/// Reads an SQS event file: `{"Records": [{"messageId", "receiptHandle", ...}, ...]}`.
pub fn parse_event(text: &str) -> Result<Vec<EventRecord>, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let records = value
        .get("Records")
        .and_then(Value::as_array)
        .ok_or("not an SQS event (no \"Records\" array)")?;
    if records.is_empty() {
        return Err("the event has no records".into());
    }
    records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let field = |name: &str| {
                r.get(name)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .ok_or_else(|| format!("record {i} has no {name}"))
            };
            Ok(EventRecord {
                message_id: field("messageId")?,
                receipt_handle: field("receiptHandle")?,
            })
        })
        .collect()
}

/// What the poller does with a batch after the invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckPlan {
    /// Processed: delete these.
    pub delete: Vec<EventRecord>,
    /// Reported failed: left on the queue, back after the visibility timeout.
    pub keep: Vec<EventRecord>,
    /// Set when the answer fails the whole batch (then `delete` is empty).
    pub whole_batch_failed: Option<String>,
}

/// Lambda's `ReportBatchItemFailures` rules applied to the function's answer `response` (raw text).
///
/// Success for every record: an empty or `null` answer, `{}`, or `batchItemFailures` null or
/// empty. The whole batch fails: an answer that is not JSON (or not an object), or an entry whose
/// `itemIdentifier` is missing, null, empty, or not a message id of the batch.
pub fn ack_plan(records: &[EventRecord], response: &str) -> AckPlan {
    let fail_all = |why: String| AckPlan {
        delete: Vec::new(),
        keep: records.to_vec(),
        whole_batch_failed: Some(why),
    };
    let trimmed = response.trim();
    let value: Value = if trimmed.is_empty() {
        Value::Null
    } else {
        match serde_json::from_str(trimmed) {
            Ok(v) => v,
            Err(e) => return fail_all(format!("the answer is not JSON ({e})")),
        }
    };
    let failures: &[Value] = match &value {
        Value::Null => &[],
        Value::Object(o) => match o.get("batchItemFailures") {
            None | Some(Value::Null) => &[],
            Some(Value::Array(items)) => items,
            Some(other) => {
                return fail_all(format!("batchItemFailures is not a list: {other}"));
            }
        },
        other => return fail_all(format!("the answer is not a JSON object: {other}")),
    };
    let ids: HashSet<&str> = records.iter().map(|r| r.message_id.as_str()).collect();
    let mut failed: HashSet<&str> = HashSet::new();
    for item in failures {
        match item.get("itemIdentifier").and_then(Value::as_str) {
            Some(id) if ids.contains(id) => {
                failed.insert(id);
            }
            Some("") | None => {
                return fail_all(format!(
                    "a batchItemFailures entry has no itemIdentifier: {item}"
                ));
            }
            Some(id) => {
                return fail_all(format!(
                    "itemIdentifier {id:?} is not a message of this event"
                ));
            }
        }
    }
    let (keep, delete): (Vec<EventRecord>, Vec<EventRecord>) = records
        .iter()
        .cloned()
        .partition(|r| failed.contains(r.message_id.as_str()));
    AckPlan {
        delete,
        keep,
        whole_batch_failed: None,
    }
}

/// `chargectl dev sqs-ack`: carries out `plan` on the queue.
pub async fn sqs_ack(
    client: &Client,
    queue_url: &str,
    plan: &AckPlan,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    if let Some(why) = &plan.whole_batch_failed {
        writeln!(
            console.out,
            "deleted 0 messages: the whole batch failed ({why}); its {} message(s) come back after \
             the visibility timeout",
            plan.keep.len()
        )?;
        return Ok(());
    }
    let mut errors: HashMap<String, String> = HashMap::new();
    for r in &plan.delete {
        if let Err(e) = client
            .delete_message()
            .queue_url(queue_url)
            .receipt_handle(&r.receipt_handle)
            .send()
            .await
        {
            errors.insert(
                r.message_id.clone(),
                Failure::infra("DeleteMessage", e).to_string(),
            );
        }
    }
    let deleted: Vec<&str> = plan
        .delete
        .iter()
        .map(|r| r.message_id.as_str())
        .filter(|id| !errors.contains_key(*id))
        .collect();
    writeln!(
        console.out,
        "deleted {} message(s): {}",
        deleted.len(),
        deleted.join(" ")
    )?;
    if !plan.keep.is_empty() {
        let kept: Vec<&str> = plan.keep.iter().map(|r| r.message_id.as_str()).collect();
        writeln!(
            console.out,
            "kept {} reported failed (back after the visibility timeout): {}",
            kept.len(),
            kept.join(" ")
        )?;
    }
    if errors.is_empty() {
        Ok(())
    } else {
        let mut list: Vec<String> = errors
            .into_iter()
            .map(|(id, e)| format!("{id}: {e}"))
            .collect();
        list.sort();
        Err(Failure::Refused(format!(
            "could not delete {} message(s) (receipt handle expired? the message comes back and is \
             a duplicate delivery the function absorbs): {}",
            list.len(),
            list.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sqs::primitives::Blob;

    fn message() -> Message {
        Message::builder()
            .message_id("m-1")
            .receipt_handle("rh-1")
            .body(r#"{"v":1}"#)
            .md5_of_body("abc")
            .attributes(MessageSystemAttributeName::ApproximateReceiveCount, "1")
            .attributes(MessageSystemAttributeName::SentTimestamp, "1795964645123")
            .attributes(
                MessageSystemAttributeName::SequenceNumber,
                "1884949646046769612",
            )
            .attributes(MessageSystemAttributeName::MessageGroupId, "ord-1")
            .attributes(MessageSystemAttributeName::MessageDeduplicationId, "op-1")
            .attributes(
                MessageSystemAttributeName::ApproximateFirstReceiveTimestamp,
                "1795964645200",
            )
            .build()
    }

    const ARN: &str = "arn:aws:sqs:eu-west-1:123456789012:charges.fifo";

    #[test]
    fn the_event_has_lambdas_shape() {
        let event = event_from_messages(&[message()], ARN, "eu-west-1");
        let r = &event["Records"][0];
        assert_eq!(r["messageId"], "m-1");
        assert_eq!(r["receiptHandle"], "rh-1");
        assert_eq!(r["body"], r#"{"v":1}"#);
        assert_eq!(r["md5OfBody"], "abc");
        assert_eq!(r["eventSource"], "aws:sqs");
        assert_eq!(r["eventSourceARN"], ARN);
        assert_eq!(r["awsRegion"], "eu-west-1");
        assert_eq!(r["messageAttributes"], json!({}));
        assert!(r.get("md5OfMessageAttributes").is_none());
        for (k, v) in [
            ("ApproximateReceiveCount", "1"),
            ("SentTimestamp", "1795964645123"),
            ("SequenceNumber", "1884949646046769612"),
            ("MessageGroupId", "ord-1"),
            ("MessageDeduplicationId", "op-1"),
            ("ApproximateFirstReceiveTimestamp", "1795964645200"),
        ] {
            assert_eq!(r["attributes"][k], v, "{k}");
        }
        // What the charge function deserialises.
        let typed: aws_lambda_events::sqs::SqsEvent = serde_json::from_value(event).unwrap();
        assert_eq!(typed.records[0].attributes["MessageGroupId"], "ord-1");
        assert_eq!(typed.records[0].event_source_arn.as_deref(), Some(ARN));
    }

    #[test]
    fn message_attributes_as_lambda_spells_them() {
        let m = Message::builder()
            .message_id("m")
            .md5_of_message_attributes("def")
            .message_attributes(
                "trace",
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value("t-1")
                    .build()
                    .unwrap(),
            )
            .message_attributes(
                "blob",
                MessageAttributeValue::builder()
                    .data_type("Binary")
                    .binary_value(Blob::new(b"hi!?".to_vec()))
                    .build()
                    .unwrap(),
            )
            .build();
        let event = event_from_messages(&[m], ARN, "eu-west-1");
        let r = &event["Records"][0];
        assert_eq!(r["md5OfMessageAttributes"], "def");
        assert_eq!(
            r["messageAttributes"]["trace"],
            json!({"stringValue": "t-1", "stringListValues": [], "binaryListValues": [], "dataType": "String"})
        );
        assert_eq!(r["messageAttributes"]["blob"]["binaryValue"], "aGkhPw==");
        let typed: aws_lambda_events::sqs::SqsEvent = serde_json::from_value(event).unwrap();
        assert_eq!(
            typed.records[0].message_attributes["trace"]
                .string_value
                .as_deref(),
            Some("t-1")
        );
    }

    #[test]
    fn base64_pads() {
        for (raw, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw.as_bytes()), enc, "{raw}");
        }
    }

    #[test]
    fn regions_from_arns() {
        assert_eq!(region_of_arn(ARN), Some("eu-west-1"));
        assert_eq!(region_of_arn("arn:aws:sqs::1:q"), None);
        assert_eq!(region_of_arn("http://x"), None);
    }

    fn records() -> Vec<EventRecord> {
        ["a", "b", "c"]
            .iter()
            .map(|id| EventRecord {
                message_id: (*id).into(),
                receipt_handle: format!("rh-{id}"),
            })
            .collect()
    }

    fn ids(rs: &[EventRecord]) -> Vec<&str> {
        rs.iter().map(|r| r.message_id.as_str()).collect()
    }

    #[test]
    fn ack_deletes_what_was_not_reported_failed() {
        for ok in [
            "",
            "null",
            "{}",
            r#"{"batchItemFailures":[]}"#,
            r#"{"batchItemFailures":null}"#,
        ] {
            let plan = ack_plan(&records(), ok);
            assert_eq!(ids(&plan.delete), ["a", "b", "c"], "{ok}");
            assert!(plan.keep.is_empty() && plan.whole_batch_failed.is_none());
        }
        let plan = ack_plan(
            &records(),
            r#"{"batchItemFailures":[{"itemIdentifier":"b"}]}"#,
        );
        assert_eq!(ids(&plan.delete), ["a", "c"]);
        assert_eq!(ids(&plan.keep), ["b"]);
        assert_eq!(plan.delete[0].receipt_handle, "rh-a");
    }

    #[test]
    fn ack_fails_the_whole_batch_by_lambdas_rules() {
        for bad in [
            "not json",
            "[1]",
            r#"{"batchItemFailures":[{"itemIdentifier":""}]}"#,
            r#"{"batchItemFailures":[{"itemIdentifier":null}]}"#,
            r#"{"batchItemFailures":[{"id":"a"}]}"#,
            r#"{"batchItemFailures":[{"itemIdentifier":"zzz"}]}"#,
            r#"{"batchItemFailures":"a"}"#,
        ] {
            let plan = ack_plan(&records(), bad);
            assert!(plan.delete.is_empty(), "{bad}");
            assert_eq!(plan.keep.len(), 3);
            assert!(plan.whole_batch_failed.is_some(), "{bad}");
        }
    }

    #[test]
    fn event_files_are_checked() {
        assert!(parse_event("{").is_err());
        assert!(parse_event(r#"{"Records":[]}"#).is_err());
        assert!(parse_event(r#"{"records":[]}"#).is_err());
        assert!(parse_event(r#"{"Records":[{"messageId":"a"}]}"#)
            .unwrap_err()
            .contains("receiptHandle"));
        let sample = include_str!("../../../events/charge-sqs-batch.json");
        assert_eq!(parse_event(sample).unwrap().len(), 3);
    }
}
