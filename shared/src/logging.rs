//! The functions' tracing subscriber: lambda_runtime's default (`init_default_subscriber`: the
//! level from `AWS_LAMBDA_LOG_LEVEL`, else `RUST_LOG`, else INFO; no time, which Lambda adds; no
//! target; JSON lines when Lambda's `AWS_LAMBDA_LOG_FORMAT` is `JSON`, as the template sets it),
//! less one thing: a JSON line carries the spans it is in once, as `spans` (outermost first, so
//! the innermost, the current one, is last), not a second time as `span`.
//!
//! lambda_runtime's subscriber writes both, so every line repeated its innermost span's fields
//! (the order and operation ids, the caller's ARN at checkout): a third of the bytes a charge
//! logged at INFO, paid per charge in CloudWatch Logs ingestion (BENCHMARKS.md section 5). No
//! field is dropped: `spans` holds every span's fields, the current one's included.

use std::str::FromStr;

use tracing_subscriber::filter::{EnvFilter, LevelFilter};
use tracing_subscriber::fmt::MakeWriter;

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
    let level = std::env::var("AWS_LAMBDA_LOG_LEVEL")
        .or_else(|_| std::env::var("RUST_LOG"))
        .ok()
        .and_then(|l| LevelFilter::from_str(&l).ok())
        .unwrap_or(LevelFilter::INFO);
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt()
        .with_target(false)
        .without_time()
        .with_env_filter(
            EnvFilter::builder()
                .with_default_directive(level.into())
                .from_env_lossy(),
        )
        .with_writer(writer);
    if json {
        builder
            .json()
            .with_current_span(false)
            .with_span_list(true)
            .init();
    } else {
        builder.init();
    }
}
