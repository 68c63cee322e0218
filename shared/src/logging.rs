//! The functions' log subscriber, installed first thing in every `main`.
//!
//! It writes what `lambda_runtime::tracing::init_default_subscriber` wrote, with two differences.
//! What stays: one line per event on stdout, no timestamp (Lambda adds one) and no target; JSON
//! when `AWS_LAMBDA_LOG_FORMAT` is `JSON` (the template's `LoggingConfig: LogFormat: JSON`); the
//! level from `AWS_LAMBDA_LOG_LEVEL` (Lambda sets it from `ApplicationLogLevel`), else `RUST_LOG`,
//! else INFO; a value that is not a level (`FATAL`) means INFO.
//!
//! The differences:
//! - a JSON line carries the spans it is in once, as `spans` (outermost first, so the innermost,
//!   the current one, is last), not a second time as `span`. lambda_runtime's subscriber writes
//!   both, so every line repeated its innermost span's fields (the order and operation ids, the
//!   caller's ARN at checkout): a third of the bytes a charge logged at INFO, paid per charge in
//!   CloudWatch Logs ingestion (BENCHMARKS.md section 5). No field is dropped: `spans`
//!   holds every span's fields, the current one's included.
//! - `RUST_LOG` is one level (`debug`), not `EnvFilter` directives per target
//!   (`info,aws_smithy_runtime=debug`): tracing-subscriber's `env-filter` links a regex engine
//!   (regex-automata, regex-syntax) into every function (BENCHMARKS.md section 4).
//! - Other crates' lines stop at DEBUG whatever the level ([`filter`]): lambda_runtime (1.5) logs
//!   every raw event at TRACE ("raw JSON event received from Lambda", its
//!   `layers/api_response.rs`): a checkout's bearer token and body, a whole Stripe event, a stream
//!   record's images; hyper and the AWS SDK log wire details there. A TRACE set in the console's
//!   `ApplicationLogLevel` to chase a bug turns on this code's own TRACE lines only.

use std::str::FromStr;

use tracing::Subscriber;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;

/// The crates whose lines follow the level asked for: this workspace's (a target is a module path,
/// matched by prefix: `charge` covers `charge_once` too).
const OWN_CRATES: &[&str] = &[
    "charge",
    "checkout",
    "reconciler",
    "notify",
    "events",
    "audit",
];

/// The most any other crate may log, whatever the level asked for.
const OTHER_CRATES_AT_MOST: LevelFilter = LevelFilter::DEBUG;

/// The level the environment asks for (see the module docs).
pub fn level_from(lambda_level: Option<&str>, rust_log: Option<&str>) -> LevelFilter {
    lambda_level
        .or(rust_log)
        .and_then(|v| LevelFilter::from_str(v.trim()).ok())
        .unwrap_or(LevelFilter::INFO)
}

/// Which lines are written at `level`: this workspace's at `level`, every other crate's at no more
/// than DEBUG (see the module docs).
pub fn filter(level: LevelFilter) -> Targets {
    Targets::new()
        .with_default(level.min(OTHER_CRATES_AT_MOST))
        .with_targets(OWN_CRATES.iter().map(|c| (*c, level)))
}

/// Installs the subscriber writing to stdout (what Lambda sends to CloudWatch Logs). Once per
/// process, in `main`.
pub fn init_subscriber() {
    init_subscriber_with_writer(std::io::stdout);
}

/// [`init_subscriber`] with another writer (the benchmarks capture or discard the lines).
pub fn init_subscriber_with_writer<W>(writer: W)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let var = |name: &str| std::env::var(name).ok();
    let level = level_from(
        var("AWS_LAMBDA_LOG_LEVEL").as_deref(),
        var("RUST_LOG").as_deref(),
    );
    let json = var("AWS_LAMBDA_LOG_FORMAT").is_some_and(|f| f.eq_ignore_ascii_case("json"));
    // A second install (a test that already has one) is not an error worth failing on.
    let _ = tracing::subscriber::set_global_default(subscriber(level, json, writer));
}

/// The subscriber [`init_subscriber_with_writer`] installs: lines at `level` through [`filter`],
/// JSON or text.
pub fn subscriber<W>(level: LevelFilter, json: bool, writer: W) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let fmt = tracing_subscriber::fmt()
        .with_target(false)
        .without_time()
        .with_max_level(level)
        .with_writer(writer);
    if json {
        Box::new(
            fmt.json()
                .with_current_span(false)
                .with_span_list(true)
                .finish()
                .with(filter(level)),
        )
    } else {
        Box::new(fmt.finish().with(filter(level)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing::Level;

    #[test]
    fn the_lambda_level_wins_then_rust_log_then_info() {
        assert_eq!(level_from(Some("DEBUG"), Some("error")), LevelFilter::DEBUG);
        assert_eq!(level_from(None, Some("warn")), LevelFilter::WARN);
        assert_eq!(level_from(None, None), LevelFilter::INFO);
        // Lambda's FATAL and anything else that is not a level: INFO, as lambda_runtime did.
        assert_eq!(level_from(Some("FATAL"), None), LevelFilter::INFO);
        assert_eq!(
            level_from(None, Some("info,aws_smithy_runtime=debug")),
            LevelFilter::INFO
        );
        assert_eq!(level_from(Some("trace"), None), LevelFilter::TRACE);
    }

    /// At TRACE, the level a console setting can ask for, lambda_runtime's raw-event line (its
    /// target is `lambda_runtime::layers::api_response`) and the SDK's and hyper's wire lines are
    /// not written; this code's own TRACE lines are. At INFO nothing changes.
    #[test]
    fn trace_never_turns_on_other_crates_trace() {
        let f = filter(LevelFilter::TRACE);
        for target in [
            "lambda_runtime::layers::api_response",
            "lambda_runtime_api_client",
            "aws_smithy_runtime::client::orchestrator",
            "hyper_util::client::legacy::pool",
        ] {
            assert!(!f.would_enable(target, &Level::TRACE), "{target}");
            assert!(f.would_enable(target, &Level::DEBUG), "{target}");
        }
        for target in [
            "charge_once::adapters::stripe",
            "checkout::handler",
            "charge::handler",
            "reconciler::handler",
            "notify::handler",
            "events::handler",
        ] {
            assert!(f.would_enable(target, &Level::TRACE), "{target}");
        }
        let info = filter(LevelFilter::INFO);
        assert!(!info.would_enable("charge_once::events", &Level::DEBUG));
        assert!(info.would_enable("lambda_runtime::runtime", &Level::INFO));
        assert!(!info.would_enable("lambda_runtime::runtime", &Level::DEBUG));
    }

    /// The installed subscriber, with `AWS_LAMBDA_LOG_LEVEL=TRACE`: the raw event line as
    /// lambda_runtime writes it is dropped, ours is written.
    #[test]
    fn the_installed_subscriber_drops_the_raw_event_at_trace() {
        #[derive(Clone, Default)]
        struct Lines(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let sink = lines.clone();
        let level = level_from(Some("TRACE"), None);
        for json in [false, true] {
            let sink = sink.clone();
            tracing::subscriber::with_default(
                subscriber(level, json, move || sink.clone()),
                || {
                    tracing::trace!(
                        target: "lambda_runtime::layers::api_response",
                        body = "{\"headers\":{\"authorization\":\"Bearer eyJsecret\"}}",
                        "raw JSON event received from Lambda"
                    );
                    tracing::trace!("our own trace line");
                },
            );
        }
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert!(
            !text.contains("raw JSON event") && !text.contains("eyJsecret"),
            "{text}"
        );
        assert_eq!(text.matches("our own trace line").count(), 2, "{text}");
    }
}
