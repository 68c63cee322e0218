//! The command line as clap types: global flags, one variant of [`Command`] per subcommand.
//!
//! Arguments are parsed into domain types here (operation ids, PaymentIntent ids, durations,
//! non-empty notes), so a bad argument is a usage error (exit 2) before anything is read or written.
//! To add a subcommand: a variant in [`Command`] with its `Args` struct, and one arm in
//! [`crate::run`].

use std::time::Duration;

use charge_core::domain::{OperationId, PaymentIntentId, StripeRefundId};
use clap::{Args, Parser, Subcommand};

use crate::duration::parse_duration;

#[derive(Debug, Parser)]
#[command(
    name = "chargectl",
    version,
    about = "Operator CLI for charge-once: list, show, resolve and re-drive charge operations.",
    long_about = "Operator CLI for charge-once: list, show, resolve and re-drive charge operations.\n\n\
        Reads the sparse unknown index of the operations table (never a table scan). AWS \
        credentials, region and endpoint come from the standard AWS configuration and environment \
        (AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL, ...) unless --endpoint-url is given.\n\n\
        Exit codes: 0 done, 1 refused / not found / infrastructure error, 2 bad arguments."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every subcommand understands.
/// `chargectl simulate ARGS…`: everything after `simulate` goes to the `simulate` binary.
#[derive(Debug, Clone, Args)]
pub struct SimulateAlias {
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<String>,
}

#[derive(Debug, Clone, Default, Args)]
pub struct GlobalArgs {
    /// The DynamoDB operations table.
    #[arg(long, env = "TABLE_NAME", global = true, value_name = "NAME")]
    pub table: Option<String>,

    /// Send AWS requests to this endpoint instead of the configured one (e.g. a local stack).
    #[arg(long, global = true, value_name = "URL")]
    pub endpoint_url: Option<String>,

    /// The SQS FIFO charge queue (needed only by `redrive`).
    #[arg(long, env = "QUEUE_URL", global = true, value_name = "URL")]
    pub queue_url: Option<String>,

    /// The Secrets Manager secret holding the Stripe key, the same one the functions read
    /// (needed only by `resolve`, which checks Stripe before declaring an outcome).
    #[arg(long, env = "STRIPE_SECRET_ARN", global = true, value_name = "ARN")]
    pub stripe_secret_arn: Option<String>,

    /// Stripe's API base URL (default https://api.stripe.com; plain HTTP only to loopback).
    #[arg(long, env = "STRIPE_API_BASE", global = true, value_name = "URL")]
    pub stripe_api_base: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List unsettled operations from the unknown index, oldest first.
    ///
    /// Without --review: automatic work (pending/unknown, not waiting for a person). With
    /// --review: the operations waiting for an operator, with the reason.
    Unknowns(UnknownsArgs),

    /// Show one operation in full, with its audit notes (review, resolution, last error).
    ///
    /// The argument is an operation id (a UUID) or an order id.
    Show(ShowArgs),

    /// Settle an unsettled operation by hand, with an audit note.
    ///
    /// Checks Stripe first: --succeeded retrieves the PaymentIntent and refuses unless it
    /// succeeded for this operation's amount, currency and operation id, and refuses while the
    /// record holds a different PaymentIntent (kept in the history when forced) or a search by
    /// the operation id finds another one that succeeded; --failed refuses unless every
    /// PaymentIntent of the operation (found by a search by the operation id, and the recorded
    /// one) is canceled: one that succeeded or is not final yet (processing, requires_action, ...)
    /// refuses, and so does a declined one (requires_payment_method: the customer can still
    /// confirm it) unless --cancel-intent cancels it at Stripe first; and while the last attempt
    /// is younger than an hour (Stripe search may lag that much). --force "<reason>" overrides a
    /// failed check, with the
    /// reason kept on the record. A refund (--succeeded re_... or --failed) is read at Stripe by
    /// the charge function's rules (retrieved by its recorded id, else found in its
    /// PaymentIntent's refunds by metadata.operation_id) and resolved only as Stripe holds it;
    /// failed gives its reservation back to the charge; --force does not apply. The record's review reason moves into the history entry. Refused if the record changed since it
    /// was read (or since --expect-version), if it is settled, or while a lease may be live. The
    /// action is appended to the record's history with your IAM identity.
    Resolve(ResolveArgs),

    /// Put an unsettled operation back on the charge queue (and out of review).
    ///
    /// Refused if the record changed since it was read (or since --expect-version) or while a
    /// lease may be live; appended to the record's history with your IAM identity and --note.
    ///
    /// A re-drive never creates a second charge: the charge function sends the same idempotency
    /// key (payment-op:<operation_id>) on every attempt, and once the 23 h key window since the
    /// first attempt has passed it never creates again — it retrieves or searches by the
    /// operation id instead, and sends the operation back to review if that cannot decide.
    /// The operation becomes due for the reconciler again 5 minutes from now.
    Redrive(RedriveArgs),

    /// The drift audit: match Stripe's objects and the settled records of a window, or show the
    /// reports kept.
    ///
    /// `--since 24h` runs the production audit over the 24 hours before now: every PaymentIntent
    /// and refund Stripe lists as created in the window, and every record settled in it, matched
    /// to the other side; a mismatch is a finding with its class (at_stripe_not_here,
    /// here_not_at_stripe, status_differs, amount_differs, duplicate_success, paid_twice,
    /// over_refunded, dispute_unrecorded, authorization_near_deadline, unsettled_past_key_window). It changes no operation record;
    /// its report is kept (one per window, with your IAM identity), as the scheduled audit's is.
    /// `--show` prints the latest kept reports instead (`--last N`). Needs the Stripe key
    /// (--stripe-secret-arn) to run, only the table to show.
    Audit(DriftAuditArgs),

    /// The operator's picture in the terminal: unsettled operations per kind and the oldest
    /// one's age against the 23 h key window, those in review, authorizations near their
    /// capture deadline, operations unsettled past the key window, unreadable records, the
    /// latest audit's drift per class and settle times per kind, and each dead-letter queue's
    /// depth (--dead-letter-queue, repeatable: the stack's outputs name them). The same numbers
    /// the dashboard draws; Stripe's requests and 429s are on the dashboard only. Reads only.
    Summary(SummaryArgs),

    /// Run checkout → queue → charge → reconciler end to end on this machine, with faults, and
    /// check the promise against what exists at (simulated) Stripe.
    ///
    /// An alias: runs the `simulate` binary (crate `infra/simulate`) with these arguments; see
    /// `simulate --help`. Deterministic by default (in-memory store and queue, the Stripe
    /// simulator's engine in process, a seeded scheduler on a virtual clock). Exits 1 when an
    /// invariant breaks, printing the seed and the order to replay.
    #[command(disable_help_flag = true)]
    Simulate(SimulateAlias),

    /// Local development: act as Lambda's SQS poller against a local queue.
    ///
    /// `dev sqs-event` receives from --queue-url and prints the SQS event Lambda would deliver
    /// (for `cargo lambda invoke charge --data-file`); `dev sqs-ack` then deletes the messages the
    /// function did not report in batchItemFailures.
    Dev(DevArgs),
}

#[derive(Debug, Clone, Args)]
pub struct UnknownsArgs {
    /// Only operations created at least this long ago (e.g. 90s, 15m, 23h, 2d, 1h30m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub older_than: Option<Duration>,

    /// List the operations waiting for an operator instead of automatic work.
    #[arg(long)]
    pub review: bool,

    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Print at most this many (the oldest).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, Args)]
pub struct ShowArgs {
    /// An operation id (UUID) or an order id.
    #[arg(value_name = "ORDER_ID|OPERATION_ID")]
    pub id: String,

    /// The record as one JSON object (times in RFC 3339).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ResolveArgs {
    /// The operation to settle.
    #[arg(value_name = "OPERATION_ID", value_parser = parse_operation_id)]
    pub operation_id: OperationId,

    #[command(flatten)]
    pub outcome: ResolveOutcome,

    /// Why: what you checked and found (kept on the record).
    #[arg(long, value_name = "TEXT", value_parser = non_empty)]
    pub note: String,

    #[command(flatten)]
    pub audit: AuditArgs,

    /// Settle even though the Stripe check refused; the reason is kept on the record.
    #[arg(long, value_name = "REASON", value_parser = non_empty)]
    pub force: Option<String>,

    /// With --failed: cancel the operation's declined PaymentIntents (requires_payment_method)
    /// at Stripe, so nobody can confirm them any more, then require canceled. Made only once
    /// every other check passed.
    #[arg(long, conflicts_with = "succeeded")]
    pub cancel_intent: bool,
}

#[derive(Debug, Clone, Args)]
pub struct SummaryArgs {
    /// A dead-letter queue whose depth to show (repeatable): the stack's DeadLetterQueueUrl,
    /// NotifyDeadLetterQueueUrl and StripeEventsDeadLetterQueueUrl outputs.
    #[arg(long, value_name = "URL")]
    pub dead_letter_queue: Vec<String>,

    /// One JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct DriftAuditArgs {
    /// The window: this long before now.
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_duration, conflicts_with = "show")]
    pub since: Duration,

    /// Print the latest kept reports instead of running an audit.
    #[arg(long)]
    pub show: bool,

    /// With --show: how many reports, newest window first.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "show", value_parser = clap::value_parser!(u16).range(1..=100))]
    pub last: u16,

    /// One JSON object per report.
    #[arg(long)]
    pub json: bool,
}

/// What every operator write takes besides its own arguments.
#[derive(Debug, Clone, Default, Args)]
pub struct AuditArgs {
    /// An extra label for the history (a ticket, your name); your IAM identity is recorded anyway.
    #[arg(long, value_name = "LABEL", value_parser = non_empty)]
    pub by: Option<String>,

    /// The record's version as `chargectl show` printed it: refuse if it changed since.
    #[arg(long, value_name = "VERSION")]
    pub expect_version: Option<i64>,
}

/// Exactly one of `--succeeded <pi_id|re_id>` or `--failed`.
#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false)]
pub struct ResolveOutcome {
    /// A charge: the customer was charged, by this PaymentIntent (pi_...). A refund: the money
    /// went back, by this Stripe refund (re_...).
    #[arg(long, value_name = "PI_ID|RE_ID", value_parser = parse_succeeded_as)]
    pub succeeded: Option<SucceededAs>,

    /// A charge: the customer was not charged. A refund: no money went back.
    #[arg(long)]
    pub failed: bool,
}

/// The Stripe object an operator names as the one that succeeded: a charge's PaymentIntent or a
/// refund's Stripe refund, told apart by Stripe's own prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SucceededAs {
    PaymentIntent(PaymentIntentId),
    Refund(StripeRefundId),
}

impl SucceededAs {
    pub fn as_str(&self) -> &str {
        match self {
            SucceededAs::PaymentIntent(id) => id,
            SucceededAs::Refund(id) => id.as_str(),
        }
    }
}

/// `--succeeded`'s value: a refund id (`re_…`) or a PaymentIntent id.
pub fn parse_succeeded_as(raw: &str) -> Result<SucceededAs, String> {
    if raw.starts_with("re_") {
        return StripeRefundId::parse(raw)
            .map(SucceededAs::Refund)
            .map_err(|e| format!("{raw:?} is not a Stripe refund id ({})", e.message));
    }
    parse_payment_intent_id(raw)
        .map(SucceededAs::PaymentIntent)
        .map_err(|e| format!("{e}, nor a Stripe refund id (re_...)"))
}

#[derive(Debug, Clone, Args)]
pub struct RedriveArgs {
    /// The operation to put back on the queue.
    #[arg(value_name = "OPERATION_ID", value_parser = parse_operation_id)]
    pub operation_id: OperationId,

    /// Why (kept in the record's history).
    #[arg(long, value_name = "TEXT", value_parser = non_empty)]
    pub note: String,

    #[command(flatten)]
    pub audit: AuditArgs,
}

/// An operation id argument: a UUID.
pub fn parse_operation_id(raw: &str) -> Result<OperationId, String> {
    OperationId::parse(raw).map_err(|_| format!("{raw:?} is not an operation id (a UUID)"))
}

/// A PaymentIntent id, by the domain's one rule ([`PaymentIntentId::parse`]).
pub fn parse_payment_intent_id(raw: &str) -> Result<PaymentIntentId, String> {
    PaymentIntentId::parse(raw)
        .map_err(|e| format!("{raw:?} is not a PaymentIntent id ({})", e.message))
}

/// A required free-text value: not empty, not only whitespace. Kept as given, minus outer spaces.
pub fn non_empty(raw: &str) -> Result<String, String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        Err("must not be empty".to_owned())
    } else {
        Ok(trimmed.to_owned())
    }
}

/// `chargectl dev`: Lambda's SQS poller by hand.
#[derive(Debug, Args)]
pub struct DevArgs {
    #[command(subcommand)]
    pub command: DevCommand,
}

#[derive(Debug, Subcommand)]
pub enum DevCommand {
    /// Receive from the charge queue and print the SQS event Lambda would deliver (FIFO attributes,
    /// eventSourceARN, receipt handles). Deletes nothing; see `sqs-ack`.
    ///
    /// Exits 1 when the queue has no visible message within --wait-secs.
    SqsEvent(SqsEventArgs),

    /// After `cargo lambda invoke charge`: delete the event's messages that the function did not
    /// report in batchItemFailures, as Lambda's poller does.
    ///
    /// An answer that is not valid JSON, or a batchItemFailures entry whose itemIdentifier is
    /// missing, empty or not in the event, fails the whole batch: nothing is deleted (exit 0, with
    /// the reason). Those messages come back after the visibility timeout.
    SqsAck(SqsAckArgs),
}

#[derive(Debug, Clone, Args)]
pub struct SqsEventArgs {
    /// At most this many messages in the event (Lambda's batch size; SQS caps one receive at 10).
    #[arg(long, value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(i32).range(1..=10))]
    pub max: i32,

    /// Long-poll this long for a first message (0-20 s).
    #[arg(long, value_name = "SECS", default_value_t = 2,
          value_parser = clap::value_parser!(i32).range(0..=20))]
    pub wait_secs: i32,

    /// Keep the received messages invisible this long instead of the queue's own timeout.
    #[arg(long, value_name = "SECS",
          value_parser = clap::value_parser!(i32).range(0..=43_200))]
    pub visibility_timeout: Option<i32>,
}

#[derive(Debug, Clone, Args)]
pub struct SqsAckArgs {
    /// The event file given to the charge function (from `chargectl dev sqs-event`).
    #[arg(long, value_name = "FILE")]
    pub event: String,

    /// The charge function's answer (`cargo lambda invoke charge ...` output); `-` reads stdin.
    #[arg(long, value_name = "FILE", default_value = "-")]
    pub response: String,
}

#[cfg(test)]
mod tests {
    use clap::error::ErrorKind;
    use clap::CommandFactory;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("chargectl").chain(args.iter().copied()))
    }

    const OP: &str = "6f1c2a9e-58d4-4c1b-9d8e-0a6b8e4f2c11";

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn resolve_takes_exactly_one_outcome() {
        let ok = parse(&[
            "resolve",
            OP,
            "--succeeded",
            "pi_3Abc_12",
            "--note",
            "n",
            "--by",
            "alice",
        ])
        .unwrap();
        let Command::Resolve(args) = ok.command else {
            panic!("resolve")
        };
        assert_eq!(
            args.outcome.succeeded.as_ref().map(SucceededAs::as_str),
            Some("pi_3Abc_12")
        );
        // A refund's Stripe id is told apart by its prefix.
        let Command::Resolve(refund_args) =
            parse(&["resolve", OP, "--succeeded", "re_3Abc", "--note", "n"])
                .unwrap()
                .command
        else {
            panic!("resolve")
        };
        assert!(matches!(
            refund_args.outcome.succeeded,
            Some(SucceededAs::Refund(_))
        ));
        assert!(!args.outcome.failed);
        assert_eq!(args.audit.by.as_deref(), Some("alice"));
        assert_eq!(args.force, None);

        // --by is an optional label; --expect-version pins the record read by `show`.
        let ok = parse(&[
            "resolve",
            OP,
            "--failed",
            "--note",
            "n",
            "--expect-version",
            "1800000000123",
            "--force",
            "dashboard shows it refunded",
        ])
        .unwrap();
        let Command::Resolve(args) = ok.command else {
            panic!("resolve")
        };
        assert_eq!(args.audit.by, None);
        assert_eq!(args.audit.expect_version, Some(1_800_000_000_123));
        assert_eq!(args.force.as_deref(), Some("dashboard shows it refunded"));

        let both = parse(&[
            "resolve",
            OP,
            "--succeeded",
            "pi_x",
            "--failed",
            "--note",
            "n",
            "--by",
            "a",
        ]);
        assert_eq!(both.unwrap_err().kind(), ErrorKind::ArgumentConflict);
        let neither = parse(&["resolve", OP, "--note", "n", "--by", "a"]);
        assert_eq!(
            neither.unwrap_err().kind(),
            ErrorKind::MissingRequiredArgument
        );

        // --cancel-intent goes with --failed only.
        let Command::Resolve(args) =
            parse(&["resolve", OP, "--failed", "--cancel-intent", "--note", "n"])
                .unwrap()
                .command
        else {
            panic!("resolve")
        };
        assert!(args.cancel_intent && args.outcome.failed);
        let with_succeeded = parse(&[
            "resolve",
            OP,
            "--succeeded",
            "pi_x",
            "--cancel-intent",
            "--note",
            "n",
        ]);
        assert_eq!(
            with_succeeded.unwrap_err().kind(),
            ErrorKind::ArgumentConflict
        );
    }

    #[test]
    fn resolve_validates_its_values() {
        for (args, kind) in [
            (
                vec![
                    "resolve",
                    OP,
                    "--succeeded",
                    "ch_123",
                    "--note",
                    "n",
                    "--by",
                    "a",
                ],
                ErrorKind::ValueValidation,
            ),
            (
                vec![
                    "resolve",
                    OP,
                    "--succeeded",
                    "pi_",
                    "--note",
                    "n",
                    "--by",
                    "a",
                ],
                ErrorKind::ValueValidation,
            ),
            (
                vec![
                    "resolve",
                    OP,
                    "--succeeded",
                    "pi_a-b",
                    "--note",
                    "n",
                    "--by",
                    "a",
                ],
                ErrorKind::ValueValidation,
            ),
            (
                vec!["resolve", OP, "--failed", "--note", "  ", "--by", "a"],
                ErrorKind::ValueValidation,
            ),
            (
                vec!["resolve", OP, "--failed", "--by", "a"],
                ErrorKind::MissingRequiredArgument,
            ),
            (
                vec!["resolve", OP, "--failed", "--note", "n", "--force", " "],
                ErrorKind::ValueValidation,
            ),
            (vec!["redrive", OP], ErrorKind::MissingRequiredArgument),
            (
                vec![
                    "resolve",
                    "not-a-uuid",
                    "--failed",
                    "--note",
                    "n",
                    "--by",
                    "a",
                ],
                ErrorKind::ValueValidation,
            ),
            (
                vec![
                    "resolve", OP, "--failed", "pi_x", "--note", "n", "--by", "a",
                ],
                ErrorKind::UnknownArgument,
            ),
        ] {
            let err = parse(&args).expect_err(&args.join(" "));
            assert_eq!(err.kind(), kind, "{}", args.join(" "));
            assert_eq!(err.exit_code(), 2);
        }
    }

    #[test]
    fn unknowns_flags() {
        let cli = parse(&[
            "--table",
            "ops",
            "unknowns",
            "--older-than",
            "23h",
            "--review",
            "--json",
            "--limit",
            "5",
        ])
        .unwrap();
        assert_eq!(cli.global.table.as_deref(), Some("ops"));
        let Command::Unknowns(args) = cli.command else {
            panic!("unknowns")
        };
        assert_eq!(args.older_than, Some(Duration::from_secs(23 * 3600)));
        assert!(args.review && args.json);
        assert_eq!(args.limit, Some(5));

        // Global flags also after the subcommand.
        let cli = parse(&["unknowns", "--table", "ops2"]).unwrap();
        assert_eq!(cli.global.table.as_deref(), Some("ops2"));

        let err = parse(&["unknowns", "--older-than", "5x"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ValueValidation);
        assert_eq!(
            parse(&["unknowns", "--limit", "0"]).unwrap_err().kind(),
            ErrorKind::ValueValidation
        );
    }

    #[test]
    fn pi_ids() {
        assert!(parse_payment_intent_id("pi_3MtwBwLkdIwHu7ix28a3tqPa").is_ok());
        assert!(parse_payment_intent_id("pi_x").is_ok());
        for bad in [
            "", "pi", "pi_", "ch_123", "PI_x", "pi_x y", "pi_é", "seti_1",
        ] {
            assert!(parse_payment_intent_id(bad).is_err(), "{bad}");
        }
        assert!(parse_payment_intent_id(&format!("pi_{}", "a".repeat(300))).is_err());
    }
}
