//! # chargectl: the operator CLI of charge-once
//!
//! Operators look at what the automatic path could not settle and settle it by hand, through the
//! same store conditions as the charge function and the reconciler:
//!
//! - `chargectl unknowns [--review] [--older-than 23h] [--json] [--limit N]` — unsettled operations
//!   (or those waiting in review) from the sparse unknown index, oldest first;
//! - `chargectl show <order_id|operation_id>` — one record, with its history of operator actions;
//! - `chargectl resolve <operation_id> (--succeeded <pi_id> | --failed) --note … [--by …]
//!   [--expect-version N] [--force "<why>"]` — settle by hand once Stripe confirms it; a refund
//!   with `--succeeded <re_id> | --failed`, only as Stripe holds it (no `--force`);
//! - `chargectl redrive <operation_id> --note … [--by …] [--expect-version N]` — back on the
//!   charge queue, out of review;
//! - `chargectl audit [--since 24h] [--json]` / `audit --show [--last N] [--json]` — the drift
//!   audit on demand, or the reports kept (see [`drift`]);
//! - `chargectl simulate …` — an alias of the `simulate` binary (crate `infra/simulate`), which
//!   runs the whole pipeline locally with faults; chargectl itself does not link the handlers;
//! - `chargectl dev sqs-event` / `dev sqs-ack` — Lambda's SQS poller by hand, for
//!   `cargo lambda invoke charge` against a local queue (see [`dev`]).
//!
//! Every operator write is conditional on the record read, refuses while a lease may be live, and
//! appends to the record's history with the caller's IAM identity (STS `GetCallerIdentity`).
//!
//! Modules, each using only those after it (no module reaches back up):
//! - here: [`main_with_args`] and [`run`], which dispatch a parsed command;
//! - [`dev`]: the `dev` subcommands (the SQS poller by hand);
//! - [`drift`]: `audit`, the drift audit on demand and its kept reports;
//! - [`aws`]: the AWS clients from the global flags (table, queue, Stripe key, caller identity);
//! - [`commands`]: the operator subcommands against the ports, [`Console`], [`Failure`];
//! - [`render`] (table, JSON) and [`cli`] (the clap types of every subcommand, `dev`'s too),
//!   [`duration`] (the `--older-than` parser).
//!
//! The binary (`src/main.rs`) only parses the arguments and calls [`main_with_args`].
//!
//! Exit codes: 0 done; 1 refused, not found, or an infrastructure error (with its error chain);
//! 2 bad arguments (nothing read or written).

pub mod aws;
pub mod cli;
pub mod commands;
pub mod dev;
pub mod drift;
pub mod duration;
pub mod render;
pub mod summary;

use std::ffi::OsString;
use std::process::ExitCode;

use charge_core::time::SystemClock;
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::adapters::sqs::SqsQueue;
use charge_once::telemetry::ErrorChain;
use clap::Parser;

use aws::{aws_config, dynamo_store, required, stripe_gateway, StsIdentity};
pub use cli::{Cli, Command, GlobalArgs};
pub use commands::{Console, Failure};

/// Parses `args` (the first is the program name), runs the command, returns the exit code. Usage
/// errors and `--help` are printed by clap.
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if let Some(code) = simulate_alias(&args) {
        return code;
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) => {
            // `--help` and `--version` exit 0 on stdout; bad arguments exit 2 on stderr.
            let _ = err.print();
            return ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2));
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!(
                "chargectl: cannot start the async runtime: {}",
                ErrorChain(&e)
            );
            return ExitCode::from(1);
        }
    };
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
    let mut console = Console {
        out: &mut out,
        err: &mut err,
    };
    let code = runtime.block_on(run(cli, &mut console));
    let _ = console.out.flush();
    code
}

/// `chargectl [global flags] simulate ARGS…` runs the `simulate` binary with the same arguments
/// (minus `simulate`): next to this executable, else on `PATH`. `None` when the command is not
/// `simulate` (or only asks for `--help` at the top level).
fn simulate_alias(args: &[OsString]) -> Option<ExitCode> {
    // Global flags come before the subcommand; those with a value take the next argument.
    let mut i = 1;
    let at = loop {
        let a = args.get(i)?.to_string_lossy();
        if a == "simulate" {
            break i;
        }
        if !a.starts_with('-') {
            return None;
        }
        let takes_value = ["--table", "--endpoint-url", "--queue-url"].contains(&a.as_ref());
        i += if takes_value { 2 } else { 1 };
    };
    let rest: Vec<&OsString> = args[1..at].iter().chain(&args[at + 1..]).collect();
    let sibling = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("simulate")))
        .filter(|p| p.is_file());
    let program = sibling.unwrap_or_else(|| "simulate".into());
    match std::process::Command::new(&program).args(rest).status() {
        Ok(status) => Some(ExitCode::from(
            status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(1),
        )),
        Err(e) => {
            eprintln!(
                "chargectl: `simulate` moved to its own binary and {} could not be run: {}; \
                 build it with `cargo build -p simulate` (or `make run`)",
                program.display(),
                ErrorChain(&e)
            );
            Some(ExitCode::from(1))
        }
    }
}

/// The on-demand audit's Stripe pace: the audit's share of the template's default budget
/// (`StripeBudget::audit_share`), so an operator's audit never takes a charge's slot. Run while
/// the scheduled audit runs, the two together take two thirds of what is kept aside.
fn audit_budget() -> std::sync::Arc<charge_once::pacing::Budget> {
    use charge_once::config::StripeBudget;
    let budget = StripeBudget::new(
        StripeBudget::DEFAULT_PER_SECOND,
        StripeBudget::DEFAULT_CONCURRENCY,
    );
    std::sync::Arc::new(charge_once::pacing::Budget::new(
        budget.audit_share(),
        1,
        std::sync::Arc::new(SystemClock),
        std::sync::Arc::new(charge_once::pacing::TokioSleeper),
    ))
}

/// A queue's depth from SQS (`GetQueueAttributes ApproximateNumberOfMessages`).
struct SqsDepth(aws_sdk_sqs::Client);

#[async_trait::async_trait]
impl summary::QueueDepth for SqsDepth {
    async fn depth(
        &self,
        queue_url: &str,
    ) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
        let attrs = self
            .0
            .get_queue_attributes()
            .queue_url(queue_url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
            .send()
            .await?;
        let n = attrs
            .attributes()
            .and_then(|a| {
                a.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
            })
            .ok_or("SQS answered without ApproximateNumberOfMessages")?;
        Ok(n.parse()?)
    }
}

/// Runs a parsed command against AWS and reports a failure on the console's `err`.
pub async fn run(cli: Cli, console: &mut Console<'_>) -> ExitCode {
    match dispatch(cli, console).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            let _ = console.out.flush();
            let _ = writeln!(console.err, "chargectl: {failure}");
            ExitCode::from(failure.exit_code())
        }
    }
}

async fn dispatch(cli: Cli, console: &mut Console<'_>) -> Result<(), Failure> {
    let global = cli.global;
    match cli.command {
        Command::Unknowns(args) => {
            let store = dynamo_store(&global, "unknowns").await?;
            commands::unknowns(&store, &SystemClock, &args, console).await
        }
        Command::Show(args) => {
            let store = dynamo_store(&global, "show").await?;
            commands::show(&store, &store, &SystemClock, &args, console).await
        }
        Command::Resolve(args) => {
            let store = dynamo_store(&global, "resolve").await?;
            let gateway = stripe_gateway(&global, "resolve").await?;
            let identity = StsIdentity(aws_sdk_sts::Client::new(&aws_config(&global).await));
            let deps = commands::ResolveDeps {
                store: &store,
                gateway: &gateway,
                identity: &identity,
                clock: &SystemClock,
            };
            commands::resolve(&deps, &args, console).await
        }
        Command::Redrive(args) => {
            // Both checked before anything is read or written.
            let table = required(&global.table, "--table (or TABLE_NAME)", "redrive")?;
            let queue_url = required(&global.queue_url, "--queue-url (or QUEUE_URL)", "redrive")?;
            let config = aws_config(&global).await;
            let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&config), table);
            let queue = SqsQueue::new(aws_sdk_sqs::Client::new(&config), queue_url);
            let identity = StsIdentity(aws_sdk_sts::Client::new(&config));
            commands::redrive(&store, &queue, &identity, &SystemClock, &args, console).await
        }
        Command::Audit(args) if args.show => {
            let store = dynamo_store(&global, "audit --show").await?;
            drift::show(&store, usize::from(args.last), args.json, console).await
        }
        Command::Audit(args) => {
            let store = dynamo_store(&global, "audit").await?;
            let gateway = stripe_gateway(&global, "audit").await?;
            let gateway = charge_once::pacing::PacedGateway::new(
                std::sync::Arc::new(gateway),
                audit_budget(),
                Some(audit_budget()),
                std::time::Duration::from_secs(30),
            );
            let identity = StsIdentity(aws_sdk_sts::Client::new(&aws_config(&global).await));
            let deps = drift::DriftDeps {
                store: &store,
                log: &store,
                gateway: &gateway,
                identity: &identity,
                clock: &SystemClock,
            };
            drift::run(&deps, args.since, args.json, console).await
        }
        Command::Summary(args) => {
            let store = dynamo_store(&global, "summary").await?;
            let queues = SqsDepth(aws_sdk_sqs::Client::new(&aws_config(&global).await));
            let deps = summary::SummaryDeps {
                store: &store,
                log: &store,
                queues: &queues,
                clock: &SystemClock,
            };
            summary::run(&deps, &args.dead_letter_queue, args.json, console).await
        }
        Command::Dev(args) => dev::run(&global, args, console).await,
        Command::Simulate(_) => Err(Failure::Usage(
            "`simulate` is the separate `simulate` binary".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    /// The module order of the crate doc: each module uses (`crate::<name>`) only modules after
    /// it, and nothing of the crate root, so there is no cycle (there was one: `cli` ↔ `commands` ↔
    /// `dev`).
    #[test]
    fn modules_depend_one_way() {
        let order = [
            "dev", "aws", "drift", "summary", "commands", "render", "cli", "duration",
        ];
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        for (i, module) in order.iter().enumerate() {
            let text = std::fs::read_to_string(format!("{src}/{module}.rs")).unwrap();
            let code: Vec<&str> = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect();
            for line in code {
                for (at, _) in line.match_indices("crate::") {
                    let name: String = line[at + "crate::".len()..]
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    match order.iter().position(|m| *m == name) {
                        Some(j) => assert!(
                            j >= i,
                            "{module}.rs uses crate::{name}, which comes before it: {line}"
                        ),
                        None => panic!("{module}.rs reaches up to the crate root: {line}"),
                    }
                }
            }
        }
    }
}
