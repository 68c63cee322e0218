//! A loopback HTTP/1.1 endpoint that keeps every request it gets: where a test points the
//! simulator's deliveries (signed webhooks, EventBridge envelopes) to see them as the receiving
//! end would, and to make that end fail. For tests; the simulator itself never uses it.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use stripe_sim::receiver::{wait_until, Receiver};
//! let endpoint = Receiver::start(1).await?; // the first request gets a 500, the rest a 200
//! let url = endpoint.url("/stripe/webhook"); // configure the simulator's webhook with it
//! // ... create a PaymentIntent ...
//! wait_until("a delivery", || endpoint.count() == 1).await;
//! let signature = endpoint.received()[0].header("stripe-signature").map(str::to_owned);
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One request the endpoint got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Header names lowercased (HTTP's are case-insensitive); a repeated header keeps its last
    /// value.
    pub headers: BTreeMap<String, String>,
    /// The body, as text (lossy if it was not UTF-8).
    pub body: String,
}

impl Received {
    /// A header's value, by any case of its name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

/// The endpoint: runs until dropped.
pub struct Receiver {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Received>>>,
    task: JoinHandle<()>,
}

impl Receiver {
    /// Listens on a free loopback port; answers `500` to the first `fail_first` requests, `200`
    /// with an empty body after.
    pub async fn start(fail_first: usize) -> std::io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| keep(record.clone(), fail_first, req));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok(Self { addr, seen, task })
    }

    /// `http://127.0.0.1:<port><path>`: every path reaches this endpoint.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.seen).clone()
    }

    /// How many requests so far.
    pub fn count(&self) -> usize {
        lock(&self.seen).len()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(seen: &Mutex<Vec<Received>>) -> MutexGuard<'_, Vec<Received>> {
    seen.lock().unwrap_or_else(|p| p.into_inner())
}

async fn keep(
    seen: Arc<Mutex<Vec<Received>>>,
    fail_first: usize,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    // A body that breaks off is kept as far as it came.
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let received = Received {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let n = {
        let mut seen = lock(&seen);
        seen.push(received);
        seen.len()
    };
    let status = if n <= fail_first {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    };
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = status;
    Ok(resp)
}

/// Polls `done` every 20 ms of real time, for at most 30 s (a bound for a loaded 2-core CI
/// machine, where 5 s was once not enough for a retry; a passing wait returns at once); panics
/// naming `what` after that.
pub async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..1_500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out after 30 s waiting for {what}");
}
