//! `chargectl dev sqs-event` / `dev sqs-ack`: the real binary against SQS FIFO on moto (run through
//! `infra/local/with-stack.sh`). The event must be what Lambda's SQS event source delivers, and the
//! ack must delete exactly what Lambda's poller deletes.

use std::process::{Command, Output};

use aws_lambda_events::sqs::SqsEvent;
use charge_core::time::{Clock, SystemClock};
use charge_once::adapters::sqs::SqsQueue;
use charge_once::ports::{OperationQueue, QueuedOperation};
use serde_json::Value;
use testkit::aws::{fresh_fifo_queue, queue_depth, sdk_config, unique};
use testkit::store_contract::operation;

fn chargectl(args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_chargectl"))
        .args(args)
        .env_remove("TABLE_NAME")
        .env_remove("QUEUE_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run chargectl");
    let mut input = child.stdin.take().expect("stdin");
    // A command refused for its arguments exits before it reads stdin: a closed pipe is fine.
    if let Err(e) = input.write_all(stdin.unwrap_or("").as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
    }
    drop(input);
    child.wait_with_output().expect("chargectl output")
}

#[track_caller]
fn assert_exit(o: &Output, code: i32) {
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(
        o.status.code(),
        Some(code),
        "--- stdout\n{out}\n--- stderr\n{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

struct Queued {
    sqs: aws_sdk_sqs::Client,
    url: String,
    ops: Vec<charge_core::operation::Operation>,
}

/// A fresh FIFO queue holding one first send per order, as checkout sends it.
async fn queued(orders: usize) -> Queued {
    let sqs = aws_sdk_sqs::Client::new(&sdk_config().await);
    let url = fresh_fifo_queue(&sqs).await;
    let queue = SqsQueue::new(sqs.clone(), url.clone());
    let mut ops = Vec::new();
    for _ in 0..orders {
        let op = operation(&unique("ord"), 1250, SystemClock.now());
        queue.send(&QueuedOperation::first(&op)).await.unwrap();
        ops.push(op);
    }
    Queued { sqs, url, ops }
}

fn event_of(o: &Output) -> (Value, SqsEvent) {
    let value: Value = serde_json::from_slice(&o.stdout).expect("JSON event on stdout");
    let typed: SqsEvent = serde_json::from_value(value.clone()).expect("an SqsEvent");
    (value, typed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_event_is_lambdas_fifo_event_and_deletes_nothing() {
    let q = queued(2).await;
    let out = chargectl(&["--queue-url", &q.url, "dev", "sqs-event"], None);
    assert_exit(&out, 0);
    let (value, event) = event_of(&out);
    assert_eq!(event.records.len(), 2);
    for (record, op) in value["Records"].as_array().unwrap().iter().zip(&q.ops) {
        let body: Value = serde_json::from_str(record["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["operation_id"], op.operation_id.to_string());
        let attrs = &record["attributes"];
        assert_eq!(attrs["MessageGroupId"], op.order_id.as_str());
        assert_eq!(attrs["MessageDeduplicationId"], op.operation_id.to_string());
        assert_eq!(attrs["ApproximateReceiveCount"], "1");
        for key in [
            "SentTimestamp",
            "SequenceNumber",
            "ApproximateFirstReceiveTimestamp",
        ] {
            assert!(attrs[key].as_str().is_some_and(|v| !v.is_empty()), "{key}");
        }
        assert!(record["messageId"].as_str().is_some_and(|v| !v.is_empty()));
        assert!(record["receiptHandle"]
            .as_str()
            .is_some_and(|v| !v.is_empty()));
        assert_eq!(record["md5OfBody"].as_str().map(str::len), Some(32));
        assert_eq!(record["messageAttributes"], serde_json::json!({}));
        assert_eq!(record["eventSource"], "aws:sqs");
        let arn = record["eventSourceARN"].as_str().unwrap();
        let name = q.url.rsplit('/').next().unwrap();
        assert!(
            arn.starts_with("arn:aws:sqs:us-east-1:") && arn.ends_with(&format!(":{name}")),
            "{arn}"
        );
        assert_eq!(record["awsRegion"], "us-east-1");
    }
    // In flight, not deleted: both still counted on the queue.
    assert_eq!(queue_depth(&q.sqs, &q.url).await, 2);
    // And invisible: a second receive finds nothing and says so.
    let again = chargectl(
        &[
            "--queue-url",
            &q.url,
            "dev",
            "sqs-event",
            "--wait-secs",
            "0",
        ],
        None,
    );
    assert_exit(&again, 1);
    assert!(String::from_utf8_lossy(&again.stderr).contains("no visible message on"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_ack_deletes_what_the_function_did_not_report_failed() {
    let q = queued(2).await;
    let out = chargectl(&["--queue-url", &q.url, "dev", "sqs-event"], None);
    assert_exit(&out, 0);
    let (_, event) = event_of(&out);
    let dir = std::env::temp_dir().join(unique("dev-sqs"));
    std::fs::create_dir_all(&dir).unwrap();
    let event_file = dir.join("event.json");
    std::fs::write(&event_file, &out.stdout).unwrap();
    let event_path = event_file.to_str().unwrap();

    // An answer that fails the whole batch: nothing deleted.
    let bad = chargectl(
        &[
            "--queue-url",
            &q.url,
            "dev",
            "sqs-ack",
            "--event",
            event_path,
        ],
        Some(r#"{"batchItemFailures":[{"itemIdentifier":"not-in-this-batch"}]}"#),
    );
    assert_exit(&bad, 0);
    assert!(
        String::from_utf8_lossy(&bad.stdout).contains("deleted 0 messages: the whole batch failed")
    );
    assert_eq!(queue_depth(&q.sqs, &q.url).await, 2);

    // The second record reported failed: only the first is deleted.
    let second = event.records[1].message_id.clone().unwrap();
    let response = format!(r#"{{"batchItemFailures":[{{"itemIdentifier":"{second}"}}]}}"#);
    let ack = chargectl(
        &[
            "--queue-url",
            &q.url,
            "dev",
            "sqs-ack",
            "--event",
            event_path,
        ],
        Some(&response),
    );
    assert_exit(&ack, 0);
    let text = String::from_utf8_lossy(&ack.stdout);
    assert!(text.contains("deleted 1 message(s)"), "{text}");
    assert!(
        text.contains(&format!(
            "kept 1 reported failed (back after the visibility timeout): {second}"
        )),
        "{text}"
    );
    assert_eq!(queue_depth(&q.sqs, &q.url).await, 1);
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_exits_non_zero_with_a_reason() {
    // No queue URL: a usage error before anything is read.
    let out = chargectl(&["dev", "sqs-event"], None);
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs --queue-url (or QUEUE_URL)"));
    // Out-of-range batch size.
    let out = chargectl(
        &["--queue-url", "http://x", "dev", "sqs-event", "--max", "11"],
        None,
    );
    assert_exit(&out, 2);
    // An event file that is not an SQS event.
    let path = std::env::temp_dir().join(format!("{}.json", unique("not-an-event")));
    std::fs::write(&path, r#"{"detail-type":"Scheduled Event"}"#).unwrap();
    let out = chargectl(
        &[
            "--queue-url",
            "http://x",
            "dev",
            "sqs-ack",
            "--event",
            path.to_str().unwrap(),
        ],
        Some("{}"),
    );
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no \"Records\" array"));
    std::fs::remove_file(&path).ok();
    let out = chargectl(
        &[
            "--queue-url",
            "http://x",
            "dev",
            "sqs-ack",
            "--event",
            "/nonexistent/event.json",
        ],
        Some("{}"),
    );
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/event.json"));
}
