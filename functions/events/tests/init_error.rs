//! The events function's binary, started as Lambda (or `cargo lambda watch`) starts it, with its
//! inbox table's variable missing: it must tell the runtime API why it cannot start
//! (`/runtime/init/error`), not only exit. Before, the invoke that started it was never answered
//! locally (173 s of silence) and got a bare `Runtime.ExitError` on AWS.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Serves one request as the runtime API would and returns (request line and headers, body).
fn one_request(listener: &TcpListener) -> Option<(String, String)> {
    listener.set_nonblocking(false).ok()?;
    let (mut sock, _) = listener.accept().ok()?;
    sock.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = sock.read(&mut buf).ok()?;
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = text[..end].to_owned();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .and_then(|v| v.trim().parse().ok())
                })
                .unwrap_or(0);
            if raw.len() >= end + 4 + length || n == 0 {
                sock.write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
                    .ok()?;
                return Some((head, text[end + 4..].to_owned()));
            }
        }
        if n == 0 {
            return None;
        }
    }
}

#[test]
fn a_function_that_cannot_start_reports_why_to_the_runtime_api() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let api = listener.local_addr().unwrap().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_events"))
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", &api)
        .env("AWS_LAMBDA_FUNCTION_NAME", "webhook")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_REGION", "us-east-1")
        .env("TABLE_NAME", "charge-once-local")
        .env(
            "STRIPE_SECRET_ARN",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:stripe",
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let server = std::thread::spawn(move || one_request(&listener));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            panic!("the function neither started nor exited in 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert!(!status.success(), "it cannot start: {stdout}");
    assert!(
        stdout.contains("INBOX_TABLE_NAME"),
        "the log says why: {stdout}"
    );
    // A process that exited without calling leaves the accept waiting: connect once to end it.
    let _ = std::net::TcpStream::connect(&api);
    let (head, body) = server
        .join()
        .unwrap()
        .expect("a request to the runtime API");
    assert!(
        head.starts_with("POST /2018-06-01/runtime/init/error "),
        "the init error endpoint, not {head:?}"
    );
    let body: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(body["errorType"], "Runtime.InitError", "{body}");
    assert_eq!(
        body["errorMessage"], "environment variable INBOX_TABLE_NAME is not set",
        "{body}"
    );
}
