//! Init time of a function: from the exec of its `bootstrap` to its first
//! `GET /2018-06-01/runtime/invocation/next`, against a tiny Runtime API on loopback.
//!
//! The bootstrap runs as Lambda runs it: the Lambda variables (`AWS_LAMBDA_RUNTIME_API`, function
//! name, memory, version, `AWS_LAMBDA_LOG_FORMAT=JSON`) plus the function's own configuration and the
//! AWS endpoint from the environment of `bench init` (infra/bench/run.sh provisions moto: table,
//! FIFO queue and the Stripe secret). So init includes the real work of `main`: the tracing
//! subscriber, the typed config, the SDK config from the environment, the SDK clients, the Stripe key's
//! GetSecretValue (charge, reconciler and webhook, which also reads its signing secret; one HTTP
//! round trip each to moto on loopback, no TLS) and the Stripe client (hyper-util, rustls) with its root
//! certificates (all but checkout and notify). Not included: Lambda's own sandbox start, the
//! download of the zip, and the TLS handshake to Secrets Manager a real init pays.
//!
//! The clock starts just before `spawn` (fork + exec) and stops when the whole request line of
//! the first GET has arrived; the process is then killed. The first run is a warm-up (page cache)
//! and is not counted.

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Variables passed through from `bench init`'s own environment when set (nothing else is).
const PASS_THROUGH: &[&str] = &[
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "TABLE_NAME",
    "QUEUE_URL",
    "DEAD_LETTER_QUEUE_URL",
    "STRIPE_API_BASE",
    "STRIPE_SECRET_ARN",
    // The events function: its inbox table (no call at init) and the endpoint's signing secret
    // (a second GetSecretValue at init).
    "INBOX_TABLE_NAME",
    "STRIPE_WEBHOOK_SECRET_ARN",
    // The notify function: the outcome bus (no call at init).
    "EVENT_BUS_NAME",
];

const NEXT: &str = "GET /2018-06-01/runtime/invocation/next";

/// Milliseconds from spawn to the first `invocation/next` request line.
pub fn once(bootstrap: &Path, function: &str) -> Result<f64, Error> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let api = listener.local_addr()?.to_string();
    let mut cmd = Command::new(bootstrap);
    cmd.env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", &api)
        .env("AWS_LAMBDA_FUNCTION_NAME", function)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
        .env(
            "AWS_LAMBDA_LOG_GROUP_NAME",
            format!("/aws/lambda/{function}"),
        )
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for name in PASS_THROUGH {
        if let Ok(v) = std::env::var(name) {
            cmd.env(name, v);
        }
    }
    let start = Instant::now();
    let mut child = cmd.spawn()?;
    let result = (|| -> Result<f64, Error> {
        let mut stream = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if let Some(status) = child.try_wait()? {
                        let mut err = String::new();
                        if let Some(mut e) = child.stderr.take() {
                            let _ = e.read_to_string(&mut err);
                        }
                        return Err(format!("{function}: bootstrap exited ({status}) before asking for an event: {err}").into());
                    }
                    if start.elapsed() > Duration::from_secs(30) {
                        return Err(format!("{function}: no request within 30 s").into());
                    }
                    std::thread::sleep(Duration::from_micros(50));
                }
                Err(e) => return Err(e.into()),
            }
        };
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.windows(2).any(|w| w == b"\r\n") {
            let n = stream.read(&mut buf)?;
            if n == 0 {
                return Err(format!("{function}: connection closed before a request line").into());
            }
            got.extend_from_slice(&buf[..n]);
        }
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let line = String::from_utf8_lossy(&got);
        if !line.starts_with(NEXT) {
            return Err(format!("{function}: first request was not {NEXT}: {line:?}").into());
        }
        Ok(ms)
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// `runs` measured runs after one warm-up: every run (sorted), median, min, max, as JSON.
pub fn measure(bootstrap: &Path, function: &str, runs: usize) -> Result<serde_json::Value, Error> {
    once(bootstrap, function)?;
    let mut all = (0..runs.max(1))
        .map(|_| once(bootstrap, function))
        .collect::<Result<Vec<_>, _>>()?;
    all.sort_by(f64::total_cmp);
    Ok(serde_json::json!({
        "function": function,
        "bootstrap": bootstrap.display().to_string(),
        "runs": all.len(),
        "init_ms": all,
        "median_ms": median(&all),
        "min_ms": all[0],
        "max_ms": all[all.len() - 1],
    }))
}

/// The median of sorted values.
pub fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}
