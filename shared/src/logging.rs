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
//!   CloudWatch Logs ingestion (issue 27, BENCHMARKS.md section 5). No field is dropped: `spans`
//!   holds every span's fields, the current one's included.
//! - `RUST_LOG` is one level (`debug`), not `EnvFilter` directives per target
//!   (`info,aws_smithy_runtime=debug`): tracing-subscriber's `env-filter` links a regex engine
//!   (regex-automata, regex-syntax) into every function (issue 27, BENCHMARKS.md section 4).

use std::str::FromStr;

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;

/// The level the environment asks for (see the module docs).
pub fn level_from(lambda_level: Option<&str>, rust_log: Option<&str>) -> LevelFilter {
    lambda_level
        .or(rust_log)
        .and_then(|v| LevelFilter::from_str(v.trim()).ok())
        .unwrap_or(LevelFilter::INFO)
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
    let fmt = tracing_subscriber::fmt()
        .with_target(false)
        .without_time()
        .with_max_level(level)
        .with_writer(writer);
    // A second install (a test that already has one) is not an error worth failing on.
    let _ = if json {
        fmt.json()
            .with_current_span(false)
            .with_span_list(true)
            .try_init()
    } else {
        fmt.try_init()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
