//! Shared helpers for the HTTP-level tests.
#![allow(dead_code)]

use std::process::Stdio;
use std::time::Duration;

use reqwest::{Client, Response};
use serde_json::Value;
use stripe_sim::{RunningSim, SimConfig, StripeSim, DEFAULT_API_KEY};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

pub struct Harness {
    pub sim: StripeSim,
    pub running: RunningSim,
    pub client: Client,
    pub base: String,
}

/// An HTTP client for the simulator. The workspace's reqwest runs rustls without a built-in
/// crypto provider (root Cargo.toml: ring is the one backend); a client needs one installed,
/// even for plain HTTP.
pub fn client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::new()
}

pub async fn start() -> Harness {
    start_with(SimConfig::default()).await
}

pub async fn start_with(cfg: SimConfig) -> Harness {
    let sim = StripeSim::new(cfg);
    let running = sim.start(0).await.expect("bind");
    let base = running.base_url();
    Harness {
        sim,
        running,
        client: client(),
        base,
    }
}

/// Create params for a confirmed charge of 1000 usd with `pm`.
pub fn charge(op: &str, pm: &str) -> Vec<(String, String)> {
    vec![
        ("amount".into(), "1000".into()),
        ("currency".into(), "usd".into()),
        ("customer".into(), "cus_test".into()),
        ("payment_method".into(), pm.into()),
        ("confirm".into(), "true".into()),
        ("off_session".into(), "true".into()),
        ("metadata[operation_id]".into(), op.into()),
    ]
}

pub fn visa(op: &str) -> Vec<(String, String)> {
    charge(op, "pm_card_visa")
}

impl Harness {
    pub async fn try_create(
        &self,
        key: Option<&str>,
        params: &[(String, String)],
    ) -> reqwest::Result<Response> {
        let mut req = self
            .client
            .post(format!("{}/v1/payment_intents", self.base))
            .bearer_auth(DEFAULT_API_KEY)
            .form(params);
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        req.send().await
    }

    pub async fn create(&self, key: Option<&str>, params: &[(String, String)]) -> Response {
        self.try_create(key, params).await.expect("http response")
    }

    pub async fn get(&self, path: &str) -> Response {
        self.client
            .get(format!("{}{}", self.base, path))
            .bearer_auth(DEFAULT_API_KEY)
            .send()
            .await
            .expect("http response")
    }

    pub async fn retrieve(&self, id: &str) -> Response {
        self.get(&format!("/v1/payment_intents/{id}")).await
    }

    /// Searches by `metadata['operation_id']`, quoting `op` with `\'`.
    pub async fn search_op(&self, op: &str) -> Value {
        let q = format!("metadata['operation_id']:'{}'", op.replace('\'', "\\'"));
        let resp = self.search_raw(&q).await;
        assert_eq!(resp.status(), 200);
        resp.json().await.unwrap()
    }

    pub async fn search_raw(&self, query: &str) -> Response {
        let qs = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", query)
            .finish();
        self.get(&format!("/v1/payment_intents/search?{qs}")).await
    }

    pub async fn admin_get(&self, path: &str) -> Value {
        let r = self
            .client
            .get(format!("{}/_sim/{path}", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.json().await.unwrap()
    }

    pub async fn admin_post(&self, path: &str, body: &str) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}/_sim/{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let s = r.status().as_u16();
        (s, r.json().await.unwrap())
    }
}

pub fn header<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).and_then(|v| v.to_str().ok())
}

pub fn replayed(r: &Response) -> bool {
    header(r, "idempotent-replayed") == Some("true")
}

/// The `stripe-sim` binary, killed when dropped.
pub struct Binary {
    pub child: Child,
    /// `http://<address it printed>`.
    pub base: String,
    /// Its stdout, kept open so a later line never meets a closed pipe.
    _stdout: Lines<BufReader<ChildStdout>>,
}

/// Starts the binary with `--port 0` and `args`, and reads its address from its first line.
pub async fn spawn_binary(args: &[&str]) -> Binary {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_stripe-sim"))
        .args(["--port", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn stripe-sim");
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), stdout.next_line())
        .await
        .expect("printed in time")
        .unwrap()
        .expect("a first line");
    let addr = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected line {line:?}"));
    Binary {
        base: format!("http://{addr}"),
        child,
        _stdout: stdout,
    }
}

/// `GET url`, its JSON body.
pub async fn get_json(url: &str) -> Value {
    client()
        .get(url)
        .send()
        .await
        .expect("http response")
        .json()
        .await
        .expect("a JSON body")
}
