//! A function that cannot start says why to whoever invoked it.
//!
//! Every `main` reads its configuration and secrets before the runtime loop. lambda_runtime (1.5)
//! talks to the Lambda runtime API only inside `run`, so an error returned from `main` before it (a
//! variable not set, a secret that cannot be read) ended the process with the reason on stderr and
//! nothing else: Lambda answers such an invoke with a bare `Runtime.ExitError`, and `cargo lambda
//! watch` does not answer at all (an invoke waited 173 s with nothing on the terminal for a missing
//! `INBOX_TABLE_NAME`, visible only in the watch log). The runtime API has the call for it:
//! `POST /2018-06-01/runtime/init/error` with the error's type and message, which Lambda returns to
//! the invocation that started the environment ([`report_init_error`]). The process then exits
//! with the error, as before: the next invocation starts a fresh environment, so a transient
//! failure (Secrets Manager unreachable) is tried again rather than kept.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tracing::error;

use crate::telemetry::ErrorChain;

/// What `main` returns: lambda_runtime's error type.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The `errorType` of the report.
pub const INIT_ERROR_TYPE: &str = "Runtime.InitError";

/// The most the report may take: the process exits after it either way.
const REPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// What `main` wired, or its error told to the runtime API too ([`report_init_error`]), so the
/// invoke that started this environment gets the reason instead of waiting on a process that has
/// exited.
pub async fn started<D>(wired: Result<D, BoxError>) -> Result<D, BoxError> {
    match wired {
        Ok(deps) => Ok(deps),
        Err(e) => Err(report_init_error(e).await),
    }
}

/// Logs the init failure, reports it to the runtime API named by `AWS_LAMBDA_RUNTIME_API` (set by
/// Lambda and by `cargo lambda watch`; nothing is sent without it), and gives the error back for
/// `main` to return.
pub async fn report_init_error(err: BoxError) -> BoxError {
    let api = std::env::var("AWS_LAMBDA_RUNTIME_API").ok();
    report_init_error_to(api.as_deref(), err).await
}

/// [`report_init_error`] to the runtime API at `api`: `host:port` as Lambda sets it, or a URL with
/// a path, as `cargo lambda watch` sets it (`http://127.0.0.1:9000/.rt/<function>`), read the way
/// lambda_runtime reads it.
pub async fn report_init_error_to(api: Option<&str>, err: BoxError) -> BoxError {
    error!(error = %ErrorChain(err.as_ref()), "the function cannot start");
    let message = ErrorChain(err.as_ref()).to_string();
    let Some(api) = api.filter(|a| !a.is_empty()) else {
        return err;
    };
    let body = serde_json::json!({"errorType": INIT_ERROR_TYPE, "errorMessage": message});
    let sent = tokio::time::timeout(REPORT_TIMEOUT, post(api, body.to_string())).await;
    match sent {
        Ok(Ok(status)) if status.is_success() => {}
        Ok(Ok(status)) => error!(%status, api, "the runtime API refused the init error report"),
        Ok(Err(e)) => error!(
            error = %ErrorChain(e.as_ref()),
            api,
            "could not report the init error to the runtime API"
        ),
        Err(_) => error!(
            api,
            "the runtime API did not take the init error report in time"
        ),
    }
    err
}

/// The init error endpoint under the runtime API's base: its scheme (HTTP when none), authority and
/// path, as lambda_runtime_api_client joins them.
fn init_error_uri(api: &str) -> Result<http::Uri, BoxError> {
    let base: http::Uri = api.parse()?;
    let authority = base.authority().ok_or("the runtime API has no host")?;
    let scheme = base.scheme_str().unwrap_or("http");
    let path = base.path().trim_end_matches('/');
    Ok(format!("{scheme}://{authority}{path}/2018-06-01/runtime/init/error").parse()?)
}

async fn post(api: &str, body: String) -> Result<http::StatusCode, BoxError> {
    let req = http::Request::post(init_error_uri(api)?)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header("Lambda-Runtime-Function-Error-Type", INIT_ERROR_TYPE)
        .body(Full::new(Bytes::from(body)))?;
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    Ok(client.request(req).await?.status())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// One request as the runtime API receives it: (request line and headers, body).
    async fn one_request(listener: TcpListener) -> (String, String) {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = sock.read(&mut buf).await.unwrap();
            raw.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&raw).to_string();
            if let Some(end) = text.find("\r\n\r\n") {
                let head = text[..end].to_owned();
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if raw.len() >= end + 4 + length || n == 0 {
                    let body = text[end + 4..].to_owned();
                    sock.write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
                        .await
                        .unwrap();
                    return (head, body);
                }
            }
        }
    }

    #[tokio::test]
    async fn the_init_error_goes_to_the_runtime_api_with_its_reason() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(one_request(listener));
        let err: BoxError = Box::new(crate::config::ConfigError::Missing("INBOX_TABLE_NAME"));
        let back = report_init_error_to(Some(&api), err).await;
        assert_eq!(
            back.to_string(),
            "environment variable INBOX_TABLE_NAME is not set"
        );
        let (head, body) = server.await.unwrap();
        assert!(
            head.starts_with("POST /2018-06-01/runtime/init/error HTTP/1.1"),
            "{head}"
        );
        assert!(
            head.to_ascii_lowercase()
                .contains("lambda-runtime-function-error-type: runtime.initerror"),
            "{head}"
        );
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["errorType"], INIT_ERROR_TYPE);
        assert_eq!(
            body["errorMessage"],
            "environment variable INBOX_TABLE_NAME is not set"
        );
    }

    #[test]
    fn the_endpoint_is_under_the_runtime_apis_base_as_either_runtime_sets_it() {
        for (api, uri) in [
            (
                "127.0.0.1:9001",
                "http://127.0.0.1:9001/2018-06-01/runtime/init/error",
            ),
            (
                "http://127.0.0.1:9000/.rt/webhook",
                "http://127.0.0.1:9000/.rt/webhook/2018-06-01/runtime/init/error",
            ),
            (
                "http://[::1]:9000/",
                "http://[::1]:9000/2018-06-01/runtime/init/error",
            ),
        ] {
            assert_eq!(init_error_uri(api).unwrap().to_string(), uri, "{api}");
        }
        assert!(init_error_uri("/no/host").is_err());
    }

    #[tokio::test]
    async fn without_a_runtime_api_or_with_one_that_is_down_the_error_comes_back() {
        let err: BoxError = Box::new(crate::config::ConfigError::Missing("TABLE_NAME"));
        let back = report_init_error_to(None, err).await;
        assert!(back.to_string().contains("TABLE_NAME"));
        // A port nobody listens on: the report fails, logged; the error is still returned.
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let api = free.local_addr().unwrap().to_string();
        drop(free);
        let err: BoxError = Box::new(crate::config::ConfigError::Missing("TABLE_NAME"));
        let back = report_init_error_to(Some(&api), err).await;
        assert!(back.to_string().contains("TABLE_NAME"));
    }
}
