//! The subcommands, written against the ports (`OperationStore`, `OperationQueue`, `Clock`) so they
//! run the same on DynamoDB/SQS and on the in-memory adapters in unit tests.
//!
//! Every read goes through the store's key, the operation-id index or the unknown index — never a
//! table scan. Every write is one of the store's conditional writes (`resolve`, `reschedule`), so an
//! operator can never overwrite a settled operation or race a charge that is running right now:
//! the condition refuses, and the command says why and exits 1.
//!
//! The operator's writes (`resolve`, `redrive`) are guarded three ways, in the store's condition:
//! - by the record they read: `updated_at` (the "version" `show` prints; `--expect-version` pins
//!   the one the operator looked at) must be unchanged, else the command shows what changed;
//! - by the lease: a lease counts as live until its own `lease_expires_at` plus [`LEASE_MARGIN`],
//!   so an operator's clock running ahead cannot see a running charge as finished;
//! - by Stripe, for `resolve`: `--succeeded pi_…` must be a succeeded PaymentIntent of this
//!   operation's amount, currency and `metadata.operation_id`; `--failed` must find every one by
//!   search (and the recorded one) canceled, so that Stripe can no longer take the money: a
//!   declined one is canceled first with `--cancel-intent`. `--force "<reason>"` overrides, with
//!   the reason kept.
//!
//! Each write appends an [`AuditEntry`] to the record's history in the same conditional write,
//! with the caller's IAM identity from STS (`--by` is only an extra label).

use std::error::Error as StdError;
use std::fmt;
use std::io::{self, Write};
use std::time::Duration;

use async_trait::async_trait;
use charge_core::refund::plan::{OperatorRead, RefundStep};
use charge_core::store::{ManualResolution, OperatorGuard, Recorded, ReleaseRefund, Reschedule};
use charge_core::{charge, refund};
use charge_core::{
    domain::{OperationId, OperationKind, OrderId, PaymentIntentId},
    operation::{AuditEntry, Operation, OperationKey, OperationStatus},
    outcome::{PaymentIntent, PaymentIntentStatus},
    time::{Clock, Timestamp},
};
use charge_once::ports::{
    CancelPaymentIntent, IndexQuery, OperationQueue, OperationStore, PaymentGateway, StoreError,
    UnreadableRecord,
};
use charge_once::reconciler::{self, Redriven};
use charge_once::telemetry::ErrorChain;

use crate::cli::{AuditArgs, RedriveArgs, ResolveArgs, ShowArgs, SucceededAs, UnknownsArgs};
use crate::render;

/// How long past its own expiry a lease still counts as live for an operator's write: covers the
/// skew between the operator's clock and the function's, and a Stripe call finishing late.
pub const LEASE_MARGIN: Duration = Duration::from_secs(120);

/// Who is calling, as AWS knows them (STS `GetCallerIdentity` in production).
#[async_trait]
pub trait CallerIdentity: Send + Sync {
    /// The caller's ARN.
    async fn caller_arn(&self) -> Result<String, Box<dyn StdError + Send + Sync>>;
}

/// A fixed identity, for tests.
pub struct FixedIdentity(pub String);

#[async_trait]
impl CallerIdentity for FixedIdentity {
    async fn caller_arn(&self) -> Result<String, Box<dyn StdError + Send + Sync>> {
        Ok(self.0.clone())
    }
}

/// Page size for reading the unknown index.
pub const INDEX_PAGE: usize = 100;
/// How far ahead a re-driven operation becomes due for the reconciler again.
pub const REDRIVE_DUE_IN: Duration = Duration::from_secs(5 * 60);

/// Where a command writes: its result on `out`, notes and diagnostics on `err`.
pub struct Console<'a> {
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
}

/// Why a command did not complete. Each maps to an exit code: usage 2, everything else 1.
#[derive(Debug)]
pub enum Failure {
    /// The arguments cannot work (a missing table or queue URL): nothing was read or written.
    Usage(String),
    /// Not found, already settled, leased, changed concurrently: nothing was changed.
    Refused(String),
    /// The store, the queue or the output failed; `context` says what was being done.
    Infra {
        context: String,
        source: Box<dyn StdError + Send + Sync>,
    },
}

impl Failure {
    pub fn infra(
        context: impl Into<String>,
        source: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> Self {
        Self::Infra {
            context: context.into(),
            source: source.into(),
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Usage(_) => 2,
            Failure::Refused(_) | Failure::Infra { .. } => 1,
        }
    }
}

impl fmt::Display for Failure {
    /// The message and, for infrastructure errors, the whole error chain on one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(m) | Failure::Refused(m) => f.write_str(m),
            Failure::Infra { context, source } => {
                write!(f, "{context}: {}", ErrorChain(source.as_ref()))
            }
        }
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::infra("cannot write the output", e)
    }
}

/// `chargectl unknowns`: reads the unknown index page by page (its size is the number of unsettled
/// operations, not of all operations), keeps those old enough, prints the oldest first. Records
/// this release cannot read are listed after them with their key and why (whatever `--older-than`
/// and `--limit` say: their age cannot be read, and nothing else shows them), and a note on
/// stderr points at `show`, which prints one raw.
pub async fn unknowns(
    store: &dyn OperationStore,
    clock: &dyn Clock,
    args: &UnknownsArgs,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    let query = if args.review {
        IndexQuery::InReview
    } else {
        IndexQuery::Unsettled
    };
    let now = clock.now();
    let mut ops: Vec<Operation> = Vec::new();
    let mut unreadable: Vec<UnreadableRecord> = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .query_index(query, cursor.take(), INDEX_PAGE)
            .await
            .map_err(|e| Failure::infra("reading the unknown index", e))?;
        ops.extend(page.operations.into_iter().filter(|op| {
            args.older_than
                .is_none_or(|min| now.since(op.created_at) >= min)
        }));
        unreadable.extend(page.unreadable);
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    ops.sort_by_key(|op| (op.created_at, op.operation_id));
    if let Some(limit) = args.limit {
        ops.truncate(limit as usize);
    }
    if !unreadable.is_empty() {
        writeln!(
            console.err,
            "{} record(s) this release cannot read (UnreadableRecords): listed with the reason; \
             `chargectl show <order id>` prints one as stored",
            unreadable.len()
        )?;
    }
    if ops.is_empty() && unreadable.is_empty() {
        let what = if args.review {
            "no operations in review"
        } else {
            "no unsettled operations"
        };
        let older = args
            .older_than
            .map(|d| format!(" older than {}", render::human_age(d)))
            .unwrap_or_default();
        writeln!(console.err, "{what}{older}")?;
        return Ok(());
    }
    let text = if args.json {
        render::unknowns_json_lines(&ops, now) + &render::unreadable_json_lines(&unreadable)
    } else {
        let mut text = String::new();
        if !ops.is_empty() {
            text += &render::unknowns_table(&ops, now);
        }
        if !unreadable.is_empty() {
            if !text.is_empty() {
                text.push('\n');
            }
            text += &render::unreadable_table(&unreadable);
        }
        text
    };
    console.out.write_all(text.as_bytes())?;
    Ok(())
}

/// Reads one unsettled operation by its id, or refuses with "no operation ...". Settled ones are
/// not found by id (no index by operation id: it would cost a write per operation): there is
/// nothing left to resolve or re-drive on them, and `show` finds them by order id.
async fn fetch(store: &dyn OperationStore, id: &OperationId) -> Result<Operation, Failure> {
    store
        .get_by_operation_id(id)
        .await
        .map_err(|e| Failure::infra(format!("reading operation {id}"), e))?
        .ok_or_else(|| Failure::Refused(not_unsettled(id)))
}

fn not_unsettled(id: &OperationId) -> String {
    format!(
        "no operation with id {id} waiting for work: it is already settled (nothing to change; \
         `chargectl show <order id>` shows it) or does not exist"
    )
}

/// A stored record as it is, unparsed: what `show` prints for a record this release cannot read.
#[async_trait]
pub trait RawRecords: Send + Sync {
    /// The record stored under `key` (`ORDER#…/charge`, as [`StoreError::unreadable`] names it),
    /// in the store's own notation (DynamoDB JSON).
    async fn raw(&self, key: &str) -> Result<Option<serde_json::Value>, StoreError>;
}

#[async_trait]
impl RawRecords for charge_once::adapters::dynamodb::DynamoStore {
    async fn raw(&self, key: &str) -> Result<Option<serde_json::Value>, StoreError> {
        use charge_once::adapters::dynamodb::item;
        let (pk, sk) = key
            .split_once('/')
            .ok_or_else(|| StoreError::new(format!("{key:?} is not a stored key (pk/sk)")))?;
        let kind = OperationKind::parse(sk).map_err(|e| StoreError::new(e.to_string()))?;
        let key = OperationKey {
            order_id: item::order_id_of_pk(pk)?,
            kind,
        };
        Ok(self.raw_item(&key).await?.as_ref().map(item::item_json))
    }
}

/// `chargectl show`: by operation id when the argument is a UUID and the operation is unsettled
/// (falling back to an order id of that spelling), else by order id. A record this release cannot
/// read is shown raw, with the parse error, and the command exits 1.
pub async fn show(
    store: &dyn OperationStore,
    raw: &dyn RawRecords,
    clock: &dyn Clock,
    args: &ShowArgs,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    let found = match find(store, args).await {
        Ok(found) => found,
        Err(ShowError::Unreadable(e)) => return show_unreadable(raw, &e, args, console).await,
        Err(ShowError::Failure(f)) => return Err(f),
    };
    let op = found.ok_or_else(|| {
        Failure::Refused(format!(
            "no operation for order or operation id {} (a settled operation is shown by its \
             order id, which Stripe's metadata carries as order_id)",
            args.id
        ))
    })?;
    // A charge's refunds and disputes are listed with it (`refunds`, `disputes`), each as
    // `show` prints a record.
    // A charge's attempts too (one read more only for an order charged again).
    let attempts = match op.kind.attempt_no() {
        Some(1) if op.latest_attempt() <= 1 => vec![op.clone()],
        Some(_) => store
            .attempts_of(&op.order_id)
            .await
            .map_err(|e| Failure::infra("cannot list the order's charge attempts", e))?,
        None => Vec::new(),
    };
    let (refunds, disputes) = match op.kind {
        charge_core::domain::OperationKind::Charge(_) => (
            store
                .refunds_of(&op.order_id)
                .await
                .map_err(|e| Failure::infra("cannot list the order's refunds", e))?,
            store
                .disputes_of(&op.order_id)
                .await
                .map_err(|e| Failure::infra("cannot list the order's disputes", e))?,
        ),
        _ => (Vec::new(), Vec::new()),
    };
    if args.json {
        let mut value =
            render::show_json(&op).map_err(|e| Failure::infra("cannot encode the record", e))?;
        let listed = refunds
            .iter()
            .map(render::show_json)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Failure::infra("cannot encode a refund", e))?;
        value["refunds"] = serde_json::Value::Array(listed);
        let listed = disputes
            .iter()
            .map(render::show_json)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Failure::infra("cannot encode a dispute", e))?;
        value["disputes"] = serde_json::Value::Array(listed);
        if op.kind.is_charge() {
            value["attempts"] = attempts.iter().map(render::attempt_json).collect();
            value["paid_attempt"] = serde_json::json!(render::paid_attempt(&attempts));
        }
        writeln!(console.out, "{value}")?;
    } else {
        console
            .out
            .write_all(render::show_text(&op, clock.now()).as_bytes())?;
        if attempts.len() > 1 {
            let paid = render::paid_attempt(&attempts).map_or_else(
                || "none paid".to_owned(),
                |n| format!("paid by attempt {n}"),
            );
            writeln!(console.out, "attempts ({}, {paid}):", attempts.len())?;
            for attempt in &attempts {
                writeln!(console.out, "  {}", render::attempt_line(attempt))?;
            }
        }
        if !refunds.is_empty() {
            writeln!(console.out, "refunds ({}):", refunds.len())?;
            for refund in &refunds {
                writeln!(console.out, "  {}", render::refund_line(refund))?;
            }
        }
        if !disputes.is_empty() {
            writeln!(
                console.out,
                "disputes ({}; evidence is answered in Stripe's dashboard, Payments > Disputes):",
                disputes.len()
            )?;
            for dispute in &disputes {
                writeln!(console.out, "  {}", render::dispute_line(dispute))?;
            }
        }
    }
    Ok(())
}

enum ShowError {
    Unreadable(StoreError),
    Failure(Failure),
}

async fn find(store: &dyn OperationStore, args: &ShowArgs) -> Result<Option<Operation>, ShowError> {
    let failed = |context: String| {
        move |e: StoreError| match e.unreadable {
            Some(_) => ShowError::Unreadable(e),
            None => ShowError::Failure(Failure::infra(context, e)),
        }
    };
    if let Ok(id) = OperationId::parse(&args.id) {
        let found = store
            .get_by_operation_id(&id)
            .await
            .map_err(failed(format!("reading operation {id}")))?;
        if found.is_some() {
            return Ok(found);
        }
    }
    // A UUID is also a valid order id: try that spelling before giving up.
    let order = OrderId::parse(&args.id).map_err(|e| {
        ShowError::Failure(Failure::Usage(format!(
            "{:?} is neither an operation id nor an order id ({e})",
            args.id
        )))
    })?;
    // The order's charge: its latest attempt (the one refunds act on), its head when charged
    // once.
    store
        .charge_of(&order)
        .await
        .map_err(failed(format!("reading order {}", args.id)))
}

/// The record as stored and why this release cannot read it: on stdout (text, or one JSON object
/// `{"unreadable": true, "key", "reason", "item"}` with `--json`), then exit 1 with the reason.
async fn show_unreadable(
    raw: &dyn RawRecords,
    e: &StoreError,
    args: &ShowArgs,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    let key = e.unreadable.clone().unwrap_or_default();
    let reason = charge_once::telemetry::ErrorChain(e).to_string();
    let item = raw
        .raw(&key)
        .await
        .map_err(|e| Failure::infra(format!("reading record {key} raw"), e))?
        .unwrap_or(serde_json::Value::Null);
    if args.json {
        let value = serde_json::json!({
            "unreadable": true,
            "key": key,
            "reason": reason,
            "item": item,
        });
        writeln!(console.out, "{value}")?;
    } else {
        let pretty = serde_json::to_string_pretty(&item)
            .map_err(|e| Failure::infra("cannot encode the raw record", e))?;
        writeln!(
            console.out,
            "record {key} cannot be read by this release\nreason: {reason}\nas stored (DynamoDB JSON):\n{pretty}"
        )?;
    }
    Err(Failure::Refused(format!(
        "record {key} cannot be read: {reason} (shown raw above; the reconciler counts it in \
         UnreadableRecords and settles the others; fix the attribute with `aws dynamodb \
         update-item` under a role that may write it (the stack's OperatorPolicy allows only \
         what resolve and redrive write), then `chargectl show` reads it)"
    )))
}

/// A dispute's record is never written by hand: it is what Stripe holds, read there by the
/// events function and the reconciler; evidence is a person's work in Stripe's dashboard.
fn dispute_not_by_hand(op: &Operation, what: &str) -> Option<Failure> {
    let id = op.kind.dispute_id()?;
    Some(Failure::Refused(format!(
        "operation {} is dispute {id} of order {}: a dispute is never {what} by hand, its record \
         follows Stripe (the reconciler reads it again there at least daily, and Stripe's events \
         at once); answer it with evidence, or accept it, in Stripe's dashboard, Payments > \
         Disputes; `chargectl show {}` shows it; nothing changed",
        op.operation_id, op.order_id, op.order_id
    )))
}

fn already_settled(op: &Operation, what: &str) -> Failure {
    Failure::Refused(format!(
        "operation {} is already {}; nothing {what}",
        op.operation_id, op.status
    ))
}

fn leased(op: &Operation) -> Failure {
    let until = op
        .lease
        .map(|l| {
            format!(
                " (lease until {}, counted live {} s longer)",
                l.expires_at.to_rfc3339(),
                LEASE_MARGIN.as_secs()
            )
        })
        .unwrap_or_default();
    Failure::Refused(format!(
        "operation {} is being executed right now{until}; nothing changed. \
         Look again after the lease expires",
        op.operation_id
    ))
}

/// True while the lease may still be live: until its own expiry plus [`LEASE_MARGIN`].
fn lease_may_be_live(op: &Operation, now: Timestamp) -> bool {
    op.lease
        .is_some_and(|l| l.expires_at.plus(LEASE_MARGIN) > now)
}

/// The fields that differ between what was read and what is there now, one per line.
pub fn changes(read: &Operation, now: &Operation) -> String {
    let mut out = Vec::new();
    let mut diff = |name: &str, a: String, b: String| {
        if a != b {
            out.push(format!("  {name}: {a} -> {b}"));
        }
    };
    let opt = |s: Option<&str>| s.unwrap_or("-").to_owned();
    diff("status", read.status.to_string(), now.status.to_string());
    diff(
        "payment intent",
        opt(read.external_id.as_deref()),
        opt(now.external_id.as_deref()),
    );
    diff(
        "last error",
        opt(read.last_error.as_deref()),
        opt(now.last_error.as_deref()),
    );
    diff(
        "review",
        opt(read.review.as_ref().map(|r| r.reason.as_str())),
        opt(now.review.as_ref().map(|r| r.reason.as_str())),
    );
    diff(
        "attempts",
        read.attempts.to_string(),
        now.attempts.to_string(),
    );
    diff(
        "lease until",
        read.lease.map_or("-".into(), |l| l.expires_at.to_rfc3339()),
        now.lease.map_or("-".into(), |l| l.expires_at.to_rfc3339()),
    );
    diff(
        "history entries",
        read.history.len().to_string(),
        now.history.len().to_string(),
    );
    diff(
        "version",
        read.updated_at.as_millis().to_string(),
        now.updated_at.as_millis().to_string(),
    );
    out.join("\n")
}

fn changed_since(read: &Operation, current: &Operation, what: &str) -> Failure {
    Failure::Refused(format!(
        "operation {} changed since it was read; nothing {what}. What changed:\n{}\n\
         Look at it again (chargectl show {}) and decide on what is there now",
        read.operation_id,
        changes(read, current),
        read.operation_id
    ))
}

/// The record as the operator's command reads it, held to `--expect-version` when given.
async fn read_for_write(
    store: &dyn OperationStore,
    id: &OperationId,
    audit: &AuditArgs,
    what: &str,
) -> Result<Operation, Failure> {
    let op = fetch(store, id).await?;
    if let Some(version) = audit.expect_version {
        if op.updated_at.as_millis() != version {
            return Err(Failure::Refused(format!(
                "operation {} is not the version you looked at ({version}); nothing {what}. \
                 It is now version {}: status {}, payment intent {}, review {}, {} history \
                 entries. Look at it again (chargectl show {})",
                op.operation_id,
                op.updated_at.as_millis(),
                op.status,
                op.external_id.as_deref().unwrap_or("-"),
                op.review.as_ref().map_or("-", |r| r.reason.as_str()),
                op.history.len(),
                op.operation_id
            )));
        }
    }
    Ok(op)
}

/// What the operator's own store write was refused for, as a failure.
fn refused_write(
    read: &Operation,
    current: Option<Operation>,
    now: Timestamp,
    what: &str,
) -> Failure {
    match current {
        None => Failure::Refused(format!(
            "operation {} no longer exists; nothing {what}",
            read.operation_id
        )),
        Some(current) if current.status.is_settled() => already_settled(&current, what),
        Some(current) if current.updated_at != read.updated_at => {
            changed_since(read, &current, what)
        }
        Some(current) if lease_may_be_live(&current, now) => leased(&current),
        Some(current) => Failure::Refused(format!(
            "operation {} changed concurrently; nothing {what}, try again",
            current.operation_id
        )),
    }
}

/// Checks Stripe before an operator declares an outcome. `Ok` when Stripe agrees, with the
/// declined PaymentIntents it canceled on the way (`cancel_declined`, for `--failed` only, once
/// every other check passed); the refusal's reasons otherwise.
async fn check_stripe(
    gateway: &dyn PaymentGateway,
    op: &Operation,
    succeeded: Option<&PaymentIntentId>,
    cancel_declined: bool,
    now: Timestamp,
) -> Result<Vec<PaymentIntentId>, Vec<String>> {
    let mut problems = Vec::new();
    let mut declined = Vec::new();
    match succeeded {
        Some(pi_id) => {
            match gateway.retrieve(pi_id).await {
                Err(e) => problems.push(format!("cannot retrieve {pi_id} from Stripe: {e}")),
                Ok(pi) => {
                    if pi.status != PaymentIntentStatus::Succeeded {
                        problems.push(format!("{pi_id} is {}, not succeeded", pi.status));
                    }
                    // The same check the automatic path makes before it settles from an intent.
                    if let Some(m) = charge::plan::intent_mismatch(op, &pi, gateway.livemode()) {
                        problems.push(describe_mismatch(pi_id, &pi, op, m));
                    }
                }
            }
            problems.extend(other_intents(gateway, op, pi_id).await);
        }
        None => {
            // Search is not read-after-write (up to an hour behind during Stripe's incidents):
            // an attempt younger than that may have made an intent search cannot show yet.
            let last_attempt = op.updated_at;
            if op.first_attempted_at.is_some() && now < last_attempt.plus(SEARCH_LAG_BOUND) {
                problems.push(format!(
                    "the last attempt was {} min ago: Stripe search may be up to {} min behind, \
                     so an intent it made may not show yet; wait until {} (ms since epoch)",
                    (now.as_millis() - last_attempt.as_millis()) / 60_000,
                    SEARCH_LAG_BOUND.as_secs() / 60,
                    last_attempt.plus(SEARCH_LAG_BOUND).as_millis()
                ));
            }
            let mut seen = Vec::new();
            match gateway.search_by_operation(&op.operation_id).await {
                Err(e) => problems.push(format!("cannot search Stripe: {e}")),
                Ok(found) => seen.extend(found.into_iter().map(|pi| (pi, "found by search"))),
            }
            // The recorded id is read directly too.
            if let Some(id) = &op.external_id {
                match gateway.retrieve(id).await {
                    Ok(pi) if !seen.iter().any(|(s, _)| s.id == pi.id) => {
                        seen.push((pi, "recorded on the operation"))
                    }
                    Ok(_) => {}
                    Err(e) => problems.push(format!("cannot retrieve {id} from Stripe: {e}")),
                }
            }
            for (pi, how) in seen {
                match pi.status {
                    PaymentIntentStatus::Succeeded => {
                        problems.push(format!("{} succeeded for this operation ({how})", pi.id))
                    }
                    PaymentIntentStatus::Canceled => {}
                    PaymentIntentStatus::RequiresPaymentMethod if cancel_declined => {
                        declined.push(pi.id)
                    }
                    // Declined, but the customer can still confirm it (Stripe's recovery for
                    // `authentication_required`): declared failed now, the order service would
                    // ask for another card, and both could charge.
                    PaymentIntentStatus::RequiresPaymentMethod => problems.push(format!(
                        "{} is {} at Stripe ({how}): declined, but the customer can still confirm \
                         it; cancel it first (repeat with --cancel-intent)",
                        pi.id, pi.status
                    )),
                    // Not final: it may still take the money.
                    _ => problems.push(format!(
                        "{} is {} at Stripe ({how}): not final, it may still succeed",
                        pi.id, pi.status
                    )),
                }
            }
        }
    }
    if !problems.is_empty() {
        // A refused resolve changes nothing, at Stripe either.
        return Err(problems);
    }
    let mut canceled = Vec::new();
    for id in declined {
        let req = CancelPaymentIntent::for_operation(op, id.clone());
        match gateway.cancel(&req).await {
            Ok(pi) if pi.status == PaymentIntentStatus::Canceled => canceled.push(id),
            Ok(pi) => problems.push(format!(
                "{id} is {} after its cancel, not canceled",
                pi.status
            )),
            Err(e) => problems.push(format!("cannot cancel {id} at Stripe: {e}")),
        }
    }
    if problems.is_empty() {
        Ok(canceled)
    } else {
        Err(problems)
    }
}

/// Why settling `op` as `pi_id` would hide another PaymentIntent: the one the record holds when
/// it is a different one (replacing it would drop the only pointer to it), and any other intent
/// of the operation that succeeded (found by search: two charges for one order).
async fn other_intents(
    gateway: &dyn PaymentGateway,
    op: &Operation,
    pi_id: &PaymentIntentId,
) -> Vec<String> {
    let mut problems = Vec::new();
    let recorded = op.external_id.as_ref().filter(|r| *r != pi_id);
    if let Some(recorded) = recorded {
        problems.push(match gateway.retrieve(recorded).await {
            Ok(pi) if pi.status == PaymentIntentStatus::Succeeded => format!(
                "the operation records {recorded}, which succeeded too: two charges for one \
                 operation; refund one before settling (the history keeps {recorded})"
            ),
            Ok(pi) => format!(
                "the operation records {recorded} ({} at Stripe), not {pi_id}: settling \
                 replaces it (the history keeps {recorded})",
                pi.status
            ),
            Err(e) => format!(
                "the operation records {recorded}, not {pi_id}, and it cannot be retrieved \
                 from Stripe: {e}"
            ),
        });
    }
    // Search is not read-after-write: an intent made in the last hour may not show yet.
    match gateway.search_by_operation(&op.operation_id).await {
        Err(e) => problems.push(format!(
            "cannot search Stripe for the operation's other PaymentIntents: {e}"
        )),
        Ok(found) => problems.extend(
            found
                .into_iter()
                .filter(|pi| pi.id != *pi_id && Some(&pi.id) != recorded)
                .filter(|pi| pi.status == PaymentIntentStatus::Succeeded)
                .map(|pi| {
                    format!(
                        "{} succeeded for this operation too (found by search): two charges \
                         for one operation; refund one before settling",
                        pi.id
                    )
                }),
        ),
    }
    problems
}

/// What differs, in the operator's words.
fn describe_mismatch(
    pi_id: &PaymentIntentId,
    pi: &PaymentIntent,
    op: &Operation,
    m: charge::plan::Mismatch,
) -> String {
    let or_unknown = |v: Option<String>| v.unwrap_or_else(|| "?".into());
    match m {
        charge::plan::Mismatch::OperationId => format!(
            "{pi_id} has metadata.operation_id {}, not {}",
            pi.operation_id.as_deref().unwrap_or("(none)"),
            op.operation_id
        ),
        charge::plan::Mismatch::OrderId => format!(
            "{pi_id} has metadata.order_id {}, not {}",
            or_unknown(pi.order_id.clone()),
            op.order_id
        ),
        charge::plan::Mismatch::Amount => format!(
            "{pi_id} is for amount {}, the operation for {}",
            or_unknown(pi.amount.map(|a| a.to_string())),
            op.params.amount().minor_units()
        ),
        charge::plan::Mismatch::Currency => format!(
            "{pi_id} is in {}, the operation in {}",
            or_unknown(pi.currency.clone()),
            op.params.currency().as_str()
        ),
        charge::plan::Mismatch::Livemode => format!(
            "{pi_id} is {} mode, our key is not",
            match pi.livemode {
                Some(true) => "a live",
                Some(false) => "a test",
                None => "of an unknown",
            }
        ),
    }
}

/// How far behind Stripe search may be during incidents (docs.stripe.com/search: "up to an hour").
pub const SEARCH_LAG_BOUND: Duration = Duration::from_secs(3600);

/// Everything `resolve` talks to.
pub struct ResolveDeps<'a> {
    pub store: &'a dyn OperationStore,
    pub gateway: &'a dyn PaymentGateway,
    pub identity: &'a dyn CallerIdentity,
    pub clock: &'a dyn Clock,
}

async fn caller(identity: &dyn CallerIdentity) -> Result<String, Failure> {
    identity.caller_arn().await.map_err(|e| Failure::Infra {
        context: "finding out who you are (STS GetCallerIdentity); nothing changed".into(),
        source: e,
    })
}

/// `chargectl resolve`: checks Stripe, then settles by hand through the store's conditional
/// `resolve` (unchanged since read, unsettled, no lease that may be live), appending the action
/// to the history with the caller's identity.
pub async fn resolve(
    deps: &ResolveDeps<'_>,
    args: &ResolveArgs,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    let op = read_for_write(deps.store, &args.operation_id, &args.audit, "changed").await?;
    if let Some(refused) = dispute_not_by_hand(&op, "resolved") {
        return Err(refused);
    }
    let now = deps.clock.now();
    if op.status.is_settled() {
        return Err(already_settled(&op, "changed"));
    }
    if lease_may_be_live(&op, now) {
        return Err(leased(&op));
    }
    if op.kind.refund_id().is_some() {
        return resolve_refund(deps, args, &op, console).await;
    }
    if op.kind.takes_authorization() {
        return resolve_take(deps, args, &op, console).await;
    }
    let (status, external_id) = match &args.outcome.succeeded {
        Some(SucceededAs::PaymentIntent(pi)) => (OperationStatus::Succeeded, Some(pi.clone())),
        Some(SucceededAs::Refund(re)) => {
            return Err(Failure::Refused(format!(
                "operation {} is a charge: it succeeded by a PaymentIntent (pi_...), not by \
                 refund {re}; nothing changed",
                op.operation_id
            )))
        }
        None => (OperationStatus::Failed, None),
    };
    let caller = caller(deps.identity).await?;
    let checked = check_stripe(
        deps.gateway,
        &op,
        external_id.as_ref(),
        args.cancel_intent,
        now,
    )
    .await;
    let forced = match checked {
        Ok(canceled) => {
            for id in canceled {
                writeln!(
                    console.err,
                    "canceled {id} at Stripe: declined, and nobody can confirm it any more"
                )?;
            }
            None
        }
        Err(problems) => match &args.force {
            Some(reason) => {
                writeln!(
                    console.err,
                    "warning: Stripe disagrees, resolving anyway (--force: {reason}):\n  {}",
                    problems.join("\n  ")
                )?;
                Some(format!("{reason} (overrode: {})", problems.join("; ")))
            }
            None => {
                return Err(Failure::Refused(format!(
                    "Stripe does not confirm operation {} as {status}; nothing changed:\n  {}\n\
                     Check the Stripe dashboard; if you are sure, repeat with --force \"<why>\"",
                    op.operation_id,
                    problems.join("\n  ")
                )))
            }
        },
    };
    let audit = AuditEntry {
        forced,
        // A different recorded intent is overwritten by this one: the history keeps it.
        replaced_external_id: op
            .external_id
            .clone()
            .filter(|old| external_id.as_ref().is_some_and(|new| new != old)),
        ..resolution_entry(&op, status, args, caller, now)
    };
    let request = ManualResolution {
        key: op.key(),
        operation_id: op.operation_id,
        status,
        external_id,
        expected_updated_at: op.updated_at,
        stripe_refund_id: None,
        release: None,
        guard: OperatorGuard {
            lease_cutoff: now.minus(LEASE_MARGIN),
            audit: audit.clone(),
        },
        authorization: None,
    };
    let written = match deps
        .store
        .resolve(&request)
        .await
        .map_err(|e| Failure::infra(format!("resolving operation {}", op.operation_id), e))?
    {
        Recorded::Written(written) => written,
        Recorded::Refused(current) => return Err(refused_write(&op, current, now, "changed")),
    };
    let pi = written
        .external_id
        .as_deref()
        .map(|id| format!(" (PaymentIntent {id})"))
        .unwrap_or_default();
    writeln!(
        console.out,
        "operation {} (order {}): {} -> {}{pi}",
        written.operation_id, written.order_id, op.status, written.status,
    )?;
    writeln!(console.out, "history: {}", render::history_line(&audit))?;
    if let Some(review) = &op.review {
        writeln!(
            console.out,
            "review reason moved into the history: {}",
            review.reason
        )?;
    }
    Ok(())
}

/// `chargectl resolve --failed` of a capture or a cancel left unsettled (in review: a key
/// misuse, a refused read, another intent): only while Stripe holds its intent untouched
/// (`requires_capture`: nothing captured or released), and then the take ends `failed` with
/// its charge given back (`authorized`, free for another capture or a cancel through the
/// API), in one write with the history entry, as the executor does when Stripe refuses a take.
/// An intent Stripe moved (captured or canceled, also in the dashboard) is settled by the
/// take's own execution, which reads it first: `chargectl redrive`. No `--force`, no
/// `--succeeded`: the charge's end is written only as Stripe holds it.
async fn resolve_take(
    deps: &ResolveDeps<'_>,
    args: &ResolveArgs,
    op: &Operation,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    use charge_core::charge::state::Taker;
    use charge_core::store::{AuthorizationOutcome, SettleAuthorization};
    let what = describe(op);
    let redrive = format!(
        "`chargectl redrive {}` settles it by what Stripe holds (it reads the PaymentIntent first)",
        op.operation_id
    );
    if args.outcome.succeeded.is_some() || args.force.is_some() || args.cancel_intent {
        return Err(Failure::Refused(format!(
            "operation {} is {what}: it is resolved only --failed, while Stripe still holds the              authorization untouched (the charge is then given back); {redrive}; nothing changed",
            op.operation_id
        )));
    }
    let (Some(pi_id), Some(taker)) = (
        op.params.payment_intent(),
        Taker::of(&op.kind, op.operation_id),
    ) else {
        return Err(Failure::Refused(format!(
            "operation {} ({what}) names no PaymentIntent: look at the order's charge; nothing              changed",
            op.operation_id
        )));
    };
    let caller = caller(deps.identity).await?;
    let pi = deps.gateway.retrieve(pi_id).await.map_err(|e| {
        Failure::Refused(format!(
            "cannot read {pi_id} at Stripe ({e}): nothing is given back unread; nothing changed"
        ))
    })?;
    if pi.id != *pi_id || pi.status != PaymentIntentStatus::RequiresCapture {
        return Err(Failure::Refused(format!(
            "{pi_id} is {} at Stripe, not requires_capture: the authorization is not held untouched, so it is not given back; {redrive}; nothing changed",
            pi.status.as_str()
        )));
    }
    let now = deps.clock.now();
    let audit = resolution_entry(op, OperationStatus::Failed, args, caller, now);
    let request = ManualResolution {
        key: op.key(),
        operation_id: op.operation_id,
        status: OperationStatus::Failed,
        external_id: None,
        expected_updated_at: op.updated_at,
        stripe_refund_id: None,
        release: None,
        authorization: Some(SettleAuthorization {
            charge: op.charge_key(),
            taker,
            outcome: AuthorizationOutcome::GivenBack,
            now,
        }),
        guard: OperatorGuard {
            lease_cutoff: now.minus(LEASE_MARGIN),
            audit: audit.clone(),
        },
    };
    let written = match deps
        .store
        .resolve(&request)
        .await
        .map_err(|e| Failure::infra(format!("resolving operation {}", op.operation_id), e))?
    {
        Recorded::Written(written) => written,
        Recorded::Refused(current) => return Err(refused_write(op, current, now, "changed")),
    };
    writeln!(
        console.out,
        "operation {} ({what}): {} -> {}; the authorization is given back to the charge          (authorized: capture another amount or cancel it through the API)",
        written.operation_id, op.status, written.status,
    )?;
    writeln!(console.out, "history: {}", render::history_line(&audit))?;
    Ok(())
}

/// `chargectl resolve` of a refund: the operator's claim is a hint, held to what Stripe answers
/// by the executor's own rules ([`refund::plan::confirm_by_hand`]): the refund retrieved when its
/// Stripe id is recorded, else the charge's PaymentIntent's refunds listed and matched by
/// `metadata.operation_id`. Only what Stripe confirms is recorded; a refund resolved `failed`
/// gives its reservation back to the charge in the same write. No `--force`: a forced outcome
/// would move the charge's refundable amount on a person's word alone.
/// The history entry of `resolve` settling `op` as `status` at `now` for `caller`: the operator's
/// note and label, and the review it ends; nothing forced, no intent replaced.
fn resolution_entry(
    op: &Operation,
    status: OperationStatus,
    args: &ResolveArgs,
    caller: String,
    now: Timestamp,
) -> AuditEntry {
    AuditEntry {
        action: format!("resolve_{status}"),
        previous_status: op.status,
        new_status: status,
        note: args.note.clone(),
        at: now,
        caller,
        label: args.audit.by.clone(),
        forced: None,
        review: op.review.as_ref().map(|r| r.reason.clone()),
        replaced_external_id: None,
    }
}

async fn resolve_refund(
    deps: &ResolveDeps<'_>,
    args: &ResolveArgs,
    op: &Operation,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    let what = describe(op);
    if args.force.is_some() || args.cancel_intent {
        return Err(Failure::Refused(format!(
            "operation {} is {what}: a refund is resolved only as Stripe confirms it (--force \
             and --cancel-intent are for charges); nothing changed",
            op.operation_id
        )));
    }
    let (claimed, claimed_id) = match &args.outcome.succeeded {
        Some(SucceededAs::Refund(re)) => (OperationStatus::Succeeded, Some(re)),
        Some(SucceededAs::PaymentIntent(pi)) => {
            return Err(Failure::Refused(format!(
                "operation {} is {what}: it succeeded by a Stripe refund (re_...), not by \
                 PaymentIntent {pi}; nothing changed",
                op.operation_id
            )))
        }
        None => (OperationStatus::Failed, None),
    };
    let caller = caller(deps.identity).await?;
    let read = read_refund_at_stripe(deps.gateway, op, &what).await?;
    let now = deps.clock.now();
    let policy = charge_core::plan::Policy::default();
    let confirmed = refund::plan::confirm_by_hand(op, claimed, claimed_id, read, now, &policy)
        .map_err(|why| {
            Failure::Refused(format!(
                "Stripe does not confirm operation {} ({what}) as {claimed}; nothing changed:\n  \
                 {why}\nLook at the refund in the Stripe dashboard, or re-drive it (chargectl \
                 redrive) to have the charge function read it again",
                op.operation_id
            ))
        })?;
    let audit = resolution_entry(op, confirmed.status, args, caller, now);
    let request = ManualResolution {
        key: op.key(),
        operation_id: op.operation_id,
        status: confirmed.status,
        external_id: None,
        expected_updated_at: op.updated_at,
        stripe_refund_id: confirmed.refund_id.clone(),
        release: confirmed.release.then(|| ReleaseRefund {
            charge: op.charge_key(),
            amount: op.params.amount(),
            now,
        }),
        guard: OperatorGuard {
            lease_cutoff: now.minus(LEASE_MARGIN),
            audit: audit.clone(),
        },
        authorization: None,
    };
    let written = match deps
        .store
        .resolve(&request)
        .await
        .map_err(|e| Failure::infra(format!("resolving operation {}", op.operation_id), e))?
    {
        Recorded::Written(written) => written,
        Recorded::Refused(current) => return Err(refused_write(op, current, now, "changed")),
    };
    let released = confirmed.release.then(|| render::money(op));
    print_refund_resolution(console, op, &written, released, &audit)
}

/// Where an operator's check of a refund reads at Stripe ([`refund::plan::operator_step`]): the
/// refund by its recorded id, else the intent's refunds.
async fn read_refund_at_stripe(
    gateway: &dyn PaymentGateway,
    op: &Operation,
    what: &str,
) -> Result<OperatorRead, Failure> {
    Ok(match refund::plan::operator_step(op) {
        Some(RefundStep::Retrieve(id)) => {
            OperatorRead::Retrieved(gateway.retrieve_refund(&id).await)
        }
        Some(RefundStep::List(pi)) => OperatorRead::Listed(gateway.list_refunds(&pi).await),
        // Only a record that is not a refund's has no intent to read (never a create).
        Some(RefundStep::Create) | None => {
            return Err(Failure::Refused(format!(
                "operation {} ({what}) names no PaymentIntent to read its refunds from; nothing \
                 changed",
                op.operation_id
            )))
        }
    })
}

/// What a refund's resolution did: the transition, its Stripe id, the amount given back to the
/// charge (`released`), and the history entry.
fn print_refund_resolution(
    console: &mut Console<'_>,
    read: &Operation,
    written: &Operation,
    released: Option<String>,
    audit: &AuditEntry,
) -> Result<(), Failure> {
    let stripe_id = written
        .stripe_refund_id()
        .map(|id| format!(" (Stripe refund {id})"))
        .unwrap_or_default();
    let released = released
        .map(|money| format!("; {money} given back to the charge"))
        .unwrap_or_default();
    writeln!(
        console.out,
        "operation {} ({}): {} -> {}{stripe_id}{released}",
        written.operation_id,
        describe(written),
        read.status,
        written.status,
    )?;
    writeln!(console.out, "history: {}", render::history_line(audit))?;
    Ok(())
}

/// `order O` for a charge, `refund R of order O` for a refund, `capture of order O`.
fn describe(op: &Operation) -> String {
    match &op.kind {
        OperationKind::Refund(id) => format!("refund {id} of order {}", op.order_id),
        OperationKind::Charge(1) => format!("order {}", op.order_id),
        OperationKind::Charge(n) => format!("charge attempt {n} of order {}", op.order_id),
        other => format!("{} of order {}", other.as_str(), op.order_id),
    }
}

/// `chargectl redrive`: moves the due time (guarded by the `updated_at` just read and by the
/// lease, counting a re-drive, clearing the review flag, appending to the history), then sends the
/// message with dedup id `operation_id:<redrives>`. The charge function re-uses the operation's
/// idempotency key and never creates past the key window, so this cannot make a second charge.
pub async fn redrive(
    store: &dyn OperationStore,
    queue: &dyn OperationQueue,
    identity: &dyn CallerIdentity,
    clock: &dyn Clock,
    args: &RedriveArgs,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    let op = read_for_write(store, &args.operation_id, &args.audit, "sent").await?;
    if let Some(refused) = dispute_not_by_hand(&op, "re-driven") {
        return Err(refused);
    }
    let now = clock.now();
    if op.status.is_settled() {
        return Err(already_settled(&op, "to re-drive"));
    }
    if lease_may_be_live(&op, now) {
        return Err(leased(&op));
    }
    let audit = AuditEntry {
        action: "redrive".into(),
        previous_status: op.status,
        new_status: op.status,
        note: args.note.clone(),
        at: now,
        caller: caller(identity).await?,
        label: args.audit.by.clone(),
        forced: None,
        // The redrive clears the flag; the evidence (the reason, with a second PaymentIntent's
        // id when there was one) stays in the history.
        review: op.review.as_ref().map(|r| r.reason.clone()),
        replaced_external_id: None,
    };
    let next_due_at = now.plus(REDRIVE_DUE_IN);
    let request = Reschedule {
        clear_review: true,
        operator: Some(OperatorGuard {
            lease_cutoff: now.minus(LEASE_MARGIN),
            audit: audit.clone(),
        }),
        ..Reschedule::redrive(&op, next_due_at, now)
    };
    let (written, message) = match reconciler::redrive(store, queue, request)
        .await
        .map_err(|e| Failure::infra(format!("rescheduling operation {}", op.operation_id), e))?
    {
        Redriven::Sent { op, message } => (op, message),
        Redriven::Refused(Some(current)) if current.status.is_settled() => {
            return Err(already_settled(&current, "to re-drive"))
        }
        Redriven::Refused(current) => return Err(refused_write(&op, current, now, "sent")),
        Redriven::NotSent { op: written, error } => {
            return Err(Failure::infra(
                format!(
                    "operation {} was rescheduled (due {}) but the queue message was not sent; \
                     the reconciler will re-drive it when due",
                    written.operation_id,
                    next_due_at.to_rfc3339()
                ),
                error,
            ))
        }
    };
    let review = op
        .review
        .as_ref()
        .map(|r| format!("; taken out of review (was: {})", r.reason))
        .unwrap_or_default();
    writeln!(
        console.out,
        "operation {} ({}, {}) re-driven: message {} sent{review}; next due {}",
        written.operation_id,
        describe(&written),
        written.status,
        message.dedup_id,
        next_due_at.to_rfc3339()
    )?;
    writeln!(console.out, "history: {}", render::history_line(&audit))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use charge_core::store::OutcomeRecord;
    use charge_core::store_rules::ChargeClaim;
    use charge_core::{
        operation::{LeaseToken, Review},
        outcome::{GatewayError, PaymentIntent},
        time::ManualClock,
    };
    use charge_once::memory::MemoryQueue;
    use charge_once::memory::MemoryStore;
    use charge_once::ports::{
        CancelPaymentIntent, CreatePaymentIntent, CreatedLists, OperationCreates, OperationReads,
        PaymentIntents, StripeAccount, StripeRefunds,
    };
    use charge_once::testing;

    use super::*;
    use crate::cli::ResolveOutcome;

    const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

    fn op(order: &str, created: Timestamp) -> Operation {
        charge_core::testing::order(order).at(created).build()
    }

    struct Captured {
        out: Vec<u8>,
        err: Vec<u8>,
    }

    impl Captured {
        fn new() -> Self {
            Self {
                out: Vec::new(),
                err: Vec::new(),
            }
        }
        fn console(&mut self) -> Console<'_> {
            Console {
                out: &mut self.out,
                err: &mut self.err,
            }
        }
        fn out(&self) -> String {
            String::from_utf8_lossy(&self.out).into_owned()
        }
        fn err(&self) -> String {
            String::from_utf8_lossy(&self.err).into_owned()
        }
    }

    async fn claim(store: &MemoryStore, op: &Operation, now: Timestamp) -> LeaseToken {
        testing::claim(store, op, now).await.0
    }

    async fn record(
        store: &MemoryStore,
        op: &Operation,
        token: LeaseToken,
        status: OperationStatus,
        review: Option<&str>,
        now: Timestamp,
    ) {
        let rec = OutcomeRecord {
            review: review.map(|r| Review {
                reason: r.into(),
                flagged_at: now,
            }),
            ..charge_core::testing::outcome(op, token, status, now)
        };
        testing::record(store, &rec).await;
    }

    fn unknowns_args(review: bool) -> UnknownsArgs {
        UnknownsArgs {
            older_than: None,
            review,
            json: false,
            limit: None,
        }
    }

    #[tokio::test]
    async fn unknowns_pages_filters_and_sorts_oldest_first() {
        let store = MemoryStore::new();
        let clock = ManualClock::new(T0);
        // More than one page, created in shuffled order.
        let mut created = Vec::new();
        for i in 0..(INDEX_PAGE + 20) {
            let age = Duration::from_secs(((i * 7919) % 1000) as u64 * 60);
            let o = op(&format!("order-{i}"), T0.minus(age));
            store.create_if_absent(&o).await.unwrap();
            created.push(o);
        }
        let mut c = Captured::new();
        unknowns(&store, &clock, &unknowns_args(false), &mut c.console())
            .await
            .unwrap();
        let rows: Vec<String> = c.out().lines().skip(1).map(str::to_owned).collect();
        assert_eq!(rows.len(), created.len());
        created.sort_by_key(|o| (o.created_at, o.operation_id));
        for (row, o) in rows.iter().zip(&created) {
            assert!(row.starts_with(&o.operation_id.to_string()), "oldest first");
        }

        let mut c = Captured::new();
        let args = UnknownsArgs {
            older_than: Some(Duration::from_secs(500 * 60)),
            limit: Some(3),
            json: true,
            ..unknowns_args(false)
        };
        unknowns(&store, &clock, &args, &mut c.console())
            .await
            .unwrap();
        let lines: Vec<serde_json::Value> = c
            .out()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert!(lines
            .iter()
            .all(|l| l["age_secs"].as_u64().unwrap() >= 500 * 60));
    }

    #[tokio::test]
    async fn unknowns_of_nothing_says_so_on_stderr() {
        let store = MemoryStore::new();
        let clock = ManualClock::new(T0);
        let mut c = Captured::new();
        unknowns(&store, &clock, &unknowns_args(true), &mut c.console())
            .await
            .unwrap();
        assert_eq!(c.out(), "");
        assert_eq!(c.err().trim(), "no operations in review");
    }

    /// Stripe as a list of PaymentIntents; a cancel cancels a declined one.
    struct StubStripe(std::sync::Mutex<Vec<PaymentIntent>>);

    impl StubStripe {
        fn new(intents: Vec<PaymentIntent>) -> Self {
            Self(std::sync::Mutex::new(intents))
        }

        fn status_of(&self, id: &str) -> PaymentIntentStatus {
            self.0
                .lock()
                .unwrap()
                .iter()
                .find(|p| p.id == id)
                .map(|p| p.status.clone())
                .unwrap()
        }
    }

    impl StripeAccount for StubStripe {
        fn livemode(&self) -> bool {
            false
        }
    }

    #[async_trait]
    impl PaymentIntents for StubStripe {
        async fn create(&self, _: &CreatePaymentIntent) -> Result<PaymentIntent, GatewayError> {
            unreachable!("an operator never creates")
        }
        async fn retrieve(&self, id: &PaymentIntentId) -> Result<PaymentIntent, GatewayError> {
            self.0
                .lock()
                .unwrap()
                .iter()
                .find(|p| p.id == *id)
                .cloned()
                .ok_or_else(|| GatewayError::Rejected {
                    detail: format!("404 No such payment_intent: '{id}'"),
                    param: Some("id".into()),
                })
        }
        async fn search_by_operation(
            &self,
            id: &OperationId,
        ) -> Result<Vec<PaymentIntent>, GatewayError> {
            let id = id.to_string();
            Ok(self
                .0
                .lock()
                .unwrap()
                .iter()
                .filter(|p| p.operation_id.as_deref() == Some(id.as_str()))
                .cloned()
                .collect())
        }
        async fn cancel(&self, req: &CancelPaymentIntent) -> Result<PaymentIntent, GatewayError> {
            let mut intents = self.0.lock().unwrap();
            let pi = intents.iter_mut().find(|p| p.id == req.id).unwrap();
            if pi.status != PaymentIntentStatus::RequiresPaymentMethod {
                return Err(GatewayError::UnexpectedState {
                    detail: format!("status of {}", pi.status),
                });
            }
            pi.status = PaymentIntentStatus::Canceled;
            Ok(pi.clone())
        }
    }

    impl StripeRefunds for StubStripe {}

    impl charge_once::ports::StripeDisputes for StubStripe {}

    impl CreatedLists for StubStripe {}

    fn pi(id: &str, op: &Operation, status: PaymentIntentStatus, amount: i64) -> PaymentIntent {
        PaymentIntent {
            amount: Some(amount),
            currency: Some("usd".into()),
            operation_id: Some(op.operation_id.to_string()),
            order_id: Some(op.order_id.to_string()),
            livemode: Some(false),
            ..PaymentIntent::new(PaymentIntentId::parse(id).unwrap(), status)
        }
    }

    const ALICE: &str = "arn:aws:sts::123456789012:assumed-role/oncall/alice";

    fn resolve_args(id: OperationId, succeeded: Option<&str>) -> ResolveArgs {
        ResolveArgs {
            operation_id: id,
            outcome: ResolveOutcome {
                succeeded: succeeded.map(|id| crate::cli::parse_succeeded_as(id).unwrap()),
                failed: succeeded.is_none(),
            },
            note: "seen in dashboard".into(),
            audit: AuditArgs {
                by: Some("INC-42".into()),
                expect_version: None,
            },
            force: None,
            cancel_intent: false,
        }
    }

    #[tokio::test]
    async fn resolve_failed_waits_for_every_intent_to_be_final_and_for_search_to_catch_up() {
        let store = MemoryStore::new();
        let clock = ManualClock::new(T0);
        let open = op("open-processing", T0);
        store.create_if_absent(&open).await.unwrap();
        let t = claim(&store, &open, T0).await;
        record(
            &store,
            &open,
            t,
            OperationStatus::Unknown,
            Some("search found 2"),
            T0,
        )
        .await;
        let stripe = StubStripe::new(vec![
            pi(
                "pi_declined",
                &open,
                PaymentIntentStatus::RequiresPaymentMethod,
                1250,
            ),
            pi("pi_slow", &open, PaymentIntentStatus::Processing, 1250),
        ]);
        let identity = FixedIdentity(ALICE.into());
        let deps = ResolveDeps {
            store: &store,
            gateway: &stripe,
            identity: &identity,
            clock: &clock,
        };
        let before = store.get(&open.key()).await.unwrap().unwrap();
        let mut c = Captured::new();
        // Minutes after the attempt: search may lag, and an intent is still processing.
        clock.set(T0.plus(Duration::from_secs(600)));
        let err = resolve(
            &deps,
            &resolve_args(open.operation_id, None),
            &mut c.console(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.exit_code(), 1);
        let text = err.to_string();
        assert!(text.contains("the last attempt was 10 min ago"), "{text}");
        assert!(text.contains("pi_slow is processing at Stripe"), "{text}");
        assert!(
            text.contains("pi_declined is requires_payment_method at Stripe")
                && text.contains("--cancel-intent"),
            "a declined intent can still be confirmed: {text}"
        );
        // Past the search-lag bound the processing intent alone still refuses.
        clock.set(T0.plus(SEARCH_LAG_BOUND));
        let err = resolve(
            &deps,
            &resolve_args(open.operation_id, None),
            &mut c.console(),
        )
        .await
        .unwrap_err();
        let text = err.to_string();
        assert!(!text.contains("last attempt"), "{text}");
        assert!(text.contains("pi_slow is processing at Stripe"), "{text}");
        assert_eq!(
            store.get(&open.key()).await.unwrap().unwrap(),
            before,
            "nothing written"
        );
        // --force: written, with the reason and what it overrode in the history.
        let forced = ResolveArgs {
            force: Some("bank confirmed the transfer was rejected, INC-9".into()),
            ..resolve_args(open.operation_id, None)
        };
        resolve(&deps, &forced, &mut c.console()).await.unwrap();
        let now = store.get(&open.key()).await.unwrap().unwrap();
        assert_eq!(now.status, OperationStatus::Failed);
        let entry = &now.history[0];
        let why = entry.forced.as_deref().unwrap();
        assert!(
            why.starts_with("bank confirmed the transfer was rejected, INC-9"),
            "{why}"
        );
        assert!(why.contains("pi_slow is processing"), "{why}");
        assert_eq!(entry.review.as_deref(), Some("search found 2"));
        assert_eq!(now.review, None);
    }

    /// `--failed` requires Stripe to hold every intent canceled: a declined one refuses unless
    /// `--cancel-intent` cancels it, which it does only once nothing else refuses.
    #[tokio::test]
    async fn resolve_failed_cancels_a_declined_intent_only_when_asked_and_only_when_all_else_agrees(
    ) {
        let store = MemoryStore::new();
        let clock = ManualClock::new(T0);
        let open = op("open-declined", T0);
        store.create_if_absent(&open).await.unwrap();
        let t = claim(&store, &open, T0).await;
        record(
            &store,
            &open,
            t,
            OperationStatus::Unknown,
            Some("0 matches"),
            T0,
        )
        .await;
        let stripe = StubStripe::new(vec![
            pi(
                "pi_declined",
                &open,
                PaymentIntentStatus::RequiresPaymentMethod,
                1250,
            ),
            pi("pi_slow", &open, PaymentIntentStatus::Processing, 1250),
        ]);
        let identity = FixedIdentity(ALICE.into());
        let deps = ResolveDeps {
            store: &store,
            gateway: &stripe,
            identity: &identity,
            clock: &clock,
        };
        clock.set(T0.plus(SEARCH_LAG_BOUND));
        let before = store.get(&open.key()).await.unwrap().unwrap();
        let mut c = Captured::new();
        let cancel = ResolveArgs {
            cancel_intent: true,
            ..resolve_args(open.operation_id, None)
        };
        // Another intent still processing: refused, and nothing canceled at Stripe.
        let err = resolve(&deps, &cancel, &mut c.console()).await.unwrap_err();
        assert!(err.to_string().contains("pi_slow is processing"), "{err}");
        assert_eq!(
            stripe.status_of("pi_declined"),
            PaymentIntentStatus::RequiresPaymentMethod
        );
        assert_eq!(store.get(&open.key()).await.unwrap().unwrap(), before);

        // Once that one failed too: without --cancel-intent, refused; with it, canceled, then
        // failed.
        stripe.0.lock().unwrap()[1].status = PaymentIntentStatus::Canceled;
        let err = resolve(
            &deps,
            &resolve_args(open.operation_id, None),
            &mut c.console(),
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("pi_declined is requires_payment_method"),
            "{err}"
        );
        assert_eq!(store.get(&open.key()).await.unwrap().unwrap(), before);
        resolve(&deps, &cancel, &mut c.console()).await.unwrap();
        assert_eq!(
            stripe.status_of("pi_declined"),
            PaymentIntentStatus::Canceled
        );
        assert!(
            c.err().contains("canceled pi_declined at Stripe"),
            "{}",
            c.err()
        );
        let now = store.get(&open.key()).await.unwrap().unwrap();
        assert_eq!(now.status, OperationStatus::Failed);
        assert_eq!(now.history[0].forced, None);
    }

    /// No raw reads: every record of the test is readable.
    struct NoRaw;

    #[async_trait::async_trait]
    impl RawRecords for NoRaw {
        async fn raw(&self, _: &str) -> Result<Option<serde_json::Value>, StoreError> {
            Ok(None)
        }
    }

    /// `show` of a charge lists its refunds (text and `--json`'s `refunds`); of an order without
    /// refunds, none.
    #[tokio::test]
    async fn show_lists_a_charge_s_refunds() {
        let store = MemoryStore::new();
        let clock = ManualClock::new(T0);
        let mut charge = op("with-refunds", T0);
        charge.status = OperationStatus::Succeeded;
        charge.external_id = Some(charge_core::domain::PaymentIntentId::parse("pi_r").unwrap());
        charge.next_due_at = None;
        store.create_if_absent(&charge).await.unwrap();
        let request = charge_core::refund::request::RefundRequest {
            amount: Some(charge_core::domain::Amount::new(300).unwrap()),
            reason: None,
        };
        let (params, reserve) = charge_core::refund::reserve(&charge, &request, T0).unwrap();
        let refund = Operation::new_refund(
            charge.order_id.clone(),
            charge_core::domain::RefundId::parse("r-7").unwrap(),
            &request,
            params,
            charge_core::domain::Principal::jwt("support").unwrap(),
            T0,
            Duration::from_secs(300),
        );
        store
            .create_beside(&refund, ChargeClaim::Reserve(&reserve))
            .await
            .unwrap();
        let args = |json| ShowArgs {
            id: "with-refunds".into(),
            json,
        };
        let mut c = Captured::new();
        show(&store, &NoRaw, &clock, &args(false), &mut c.console())
            .await
            .unwrap();
        let out = c.out();
        assert!(out.contains("refunds (1):"), "{out}");
        assert!(out.contains("r-7  pending  300 usd  -  operation"), "{out}");
        let mut c = Captured::new();
        show(&store, &NoRaw, &clock, &args(true), &mut c.console())
            .await
            .unwrap();
        let json: serde_json::Value = serde_json::from_str(c.out().trim()).unwrap();
        assert_eq!(json["refunds"].as_array().map(Vec::len), Some(1), "{json}");
        assert_eq!(json["refund_reserved"], 300);
        // The twin: an order without refunds lists none.
        store.create_if_absent(&op("without", T0)).await.unwrap();
        let mut c = Captured::new();
        let none = ShowArgs {
            id: "without".into(),
            json: false,
        };
        show(&store, &NoRaw, &clock, &none, &mut c.console())
            .await
            .unwrap();
        assert!(!c.out().contains("refunds ("), "{}", c.out());
    }

    /// A refund does not succeed by a PaymentIntent: refused, nothing changed; the twin, the
    /// charge it refunds, is resolvable by it in the same setup.
    #[tokio::test]
    async fn resolve_refuses_a_refund_named_by_a_payment_intent_and_changes_nothing() {
        let store = MemoryStore::new();
        let clock = ManualClock::new(T0);
        let mut charge = op("refunded", T0);
        charge.status = OperationStatus::Unknown;
        let mut refund = charge.clone();
        refund.operation_id = OperationId::new_random();
        refund.kind = charge_core::domain::OperationKind::Refund(
            charge_core::domain::RefundId::parse("r-1").unwrap(),
        );
        store.put_for_tests(refund.clone());
        store.create_if_absent(&charge).await.unwrap();
        let stripe = StubStripe::new(vec![pi(
            "pi_found",
            &charge,
            PaymentIntentStatus::Succeeded,
            1250,
        )]);
        let identity = FixedIdentity(ALICE.into());
        let deps = ResolveDeps {
            store: &store,
            gateway: &stripe,
            identity: &identity,
            clock: &clock,
        };
        let mut c = Captured::new();
        let err = resolve(
            &deps,
            &resolve_args(refund.operation_id, Some("pi_found")),
            &mut c.console(),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("refund r-1"), "{err}");
        assert_eq!(store.get(&refund.key()).await.unwrap(), Some(refund));
        clock.set(T0.plus(Duration::from_secs(3600)));
        resolve(
            &deps,
            &resolve_args(charge.operation_id, Some("pi_found")),
            &mut c.console(),
        )
        .await
        .expect("the charge is resolved");
    }

    #[tokio::test]
    async fn resolve_refuses_settled_leased_stale_and_unconfirmed_and_settles_otherwise() {
        let store = MemoryStore::new();
        let clock = ManualClock::new(T0);
        let settled = op("settled", T0);
        let leased_op = op("leased", T0);
        let open = op("open", T0);
        for o in [&settled, &leased_op, &open] {
            store.create_if_absent(o).await.unwrap();
        }
        let t = claim(&store, &settled, T0).await;
        record(&store, &settled, t, OperationStatus::Failed, None, T0).await;
        claim(&store, &leased_op, T0).await;
        let t = claim(&store, &open, T0).await;
        record(
            &store,
            &open,
            t,
            OperationStatus::Unknown,
            Some("0 matches"),
            T0,
        )
        .await;
        // pi_other_amount is canceled: a succeeded one would be a second charge of the operation
        // (its metadata names it), and settling as pi_found would be refused for it.
        let stripe = StubStripe::new(vec![
            pi("pi_found", &open, PaymentIntentStatus::Succeeded, 1250),
            pi("pi_other_amount", &open, PaymentIntentStatus::Canceled, 999),
            pi(
                "pi_processing",
                &open,
                PaymentIntentStatus::Processing,
                1250,
            ),
            pi(
                "pi_of_another",
                &settled,
                PaymentIntentStatus::Succeeded,
                1250,
            ),
        ]);
        let identity = FixedIdentity(ALICE.into());
        let deps = ResolveDeps {
            store: &store,
            gateway: &stripe,
            identity: &identity,
            clock: &clock,
        };
        let mut c = Captured::new();
        let err = resolve(
            &deps,
            &resolve_args(settled.operation_id, Some("pi_found")),
            &mut c.console(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.exit_code(), 1);
        assert!(err
            .to_string()
            .contains(&not_unsettled(&settled.operation_id)));

        // The lease expires at T0+60 s; with the margin it counts as live until T0+180 s.
        clock.set(T0.plus(Duration::from_secs(90)));
        let err = resolve(
            &deps,
            &resolve_args(leased_op.operation_id, Some("pi_found")),
            &mut c.console(),
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string().contains("being executed right now"),
            "{err}"
        );
        clock.set(T0);

        let err = resolve(
            &deps,
            &resolve_args(OperationId::new_random(), None),
            &mut c.console(),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().starts_with("no operation with id"));

        // Stripe must confirm: status, amount, currency and operation id.
        for (id, want) in [
            (
                "pi_other_amount",
                "is for amount 999, the operation for 1250",
            ),
            ("pi_processing", "is processing, not succeeded"),
            ("pi_of_another", "has metadata.operation_id"),
            ("pi_missing", "cannot retrieve pi_missing"),
        ] {
            let err = resolve(
                &deps,
                &resolve_args(open.operation_id, Some(id)),
                &mut c.console(),
            )
            .await
            .unwrap_err();
            assert_eq!(err.exit_code(), 1);
            assert!(err.to_string().contains(want), "{id}: {err}");
        }
        // --failed while a succeeded intent exists for the operation.
        let err = resolve(
            &deps,
            &resolve_args(open.operation_id, None),
            &mut c.console(),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("pi_found succeeded"), "{err}");
        // A stale --expect-version.
        let mut stale = resolve_args(open.operation_id, Some("pi_found"));
        stale.audit.expect_version = Some(T0.as_millis() - 1);
        let err = resolve(&deps, &stale, &mut c.console()).await.unwrap_err();
        assert!(
            err.to_string().contains("not the version you looked at"),
            "{err}"
        );
        let unchanged = store.get(&open.key()).await.unwrap().unwrap();
        assert_eq!(unchanged.status, OperationStatus::Unknown);
        assert!(unchanged.history.is_empty(), "refusals write nothing");

        let mut ok = resolve_args(open.operation_id, Some("pi_found"));
        ok.audit.expect_version = Some(unchanged.updated_at.as_millis());
        resolve(&deps, &ok, &mut c.console()).await.unwrap();
        assert!(c
            .out()
            .contains("unknown -> succeeded (PaymentIntent pi_found)"));
        let now = store.get(&open.key()).await.unwrap().unwrap();
        assert_eq!(now.status, OperationStatus::Succeeded);
        assert_eq!(
            now.history,
            vec![AuditEntry {
                action: "resolve_succeeded".into(),
                previous_status: OperationStatus::Unknown,
                new_status: OperationStatus::Succeeded,
                note: "seen in dashboard".into(),
                at: T0,
                caller: ALICE.into(),
                label: Some("INC-42".into()),
                forced: None,
                review: Some("0 matches".into()),
                replaced_external_id: None,
            }]
        );
        assert_eq!(now.review, None, "the review moved into the history");
    }

    #[tokio::test]
    async fn resolve_force_overrides_a_stripe_refusal_and_records_why() {
        let store = MemoryStore::new();
        let clock = ManualClock::new(T0);
        let o = op("forced", T0);
        store.create_if_absent(&o).await.unwrap();
        let stripe = StubStripe::new(vec![pi(
            "pi_paid",
            &o,
            PaymentIntentStatus::Succeeded,
            1250,
        )]);
        let identity = FixedIdentity(ALICE.into());
        let deps = ResolveDeps {
            store: &store,
            gateway: &stripe,
            identity: &identity,
            clock: &clock,
        };
        let mut args = resolve_args(o.operation_id, None);
        args.force = Some("refunded in the dashboard".into());
        let mut c = Captured::new();
        resolve(&deps, &args, &mut c.console()).await.unwrap();
        assert!(c.err().contains("Stripe disagrees"));
        let after = store.get(&o.key()).await.unwrap().unwrap();
        assert_eq!(after.status, OperationStatus::Failed);
        let forced = after.history[0].forced.as_deref().unwrap();
        assert!(
            forced.starts_with("refunded in the dashboard (overrode: pi_paid succeeded"),
            "{forced}"
        );
    }

    #[tokio::test]
    async fn a_stale_read_is_refused_with_what_changed() {
        let store = MemoryStore::new();
        let o = op("stale", T0);
        store.create_if_absent(&o).await.unwrap();
        let mut current = o.clone();
        current.status = OperationStatus::Unknown;
        current.external_id = Some(charge_core::domain::PaymentIntentId::parse("pi_new").unwrap());
        current.updated_at = T0.plus(Duration::from_secs(5));
        let text = changes(&o, &current);
        assert!(text.contains("status: pending -> unknown"), "{text}");
        assert!(text.contains("payment intent: - -> pi_new"), "{text}");
        let failure = refused_write(&o, Some(current), T0, "changed");
        assert!(failure.to_string().contains("changed since it was read"));
    }

    #[tokio::test]
    async fn redrive_reschedules_then_sends_with_a_fresh_dedup_id() {
        let store = MemoryStore::new();
        let clock = ManualClock::new(T0);
        let queue = MemoryQueue::new(Arc::new(clock.clone()));
        let identity = FixedIdentity(ALICE.into());
        let o = op("redrive-me", T0);
        store.create_if_absent(&o).await.unwrap();
        let t = claim(&store, &o, T0).await;
        record(
            &store,
            &o,
            t,
            OperationStatus::Unknown,
            Some("0 matches"),
            T0,
        )
        .await;
        clock.advance(Duration::from_secs(1));

        let mut c = Captured::new();
        let args = RedriveArgs {
            operation_id: o.operation_id,
            note: "Stripe outage over".into(),
            audit: AuditArgs::default(),
        };
        redrive(&store, &queue, &identity, &clock, &args, &mut c.console())
            .await
            .unwrap();
        let msgs = queue.receive(10, Duration::from_secs(30));
        assert_eq!(msgs.len(), 1);
        let after = store.get(&o.key()).await.unwrap().unwrap();
        assert_eq!(after.review, None);
        assert_eq!(after.redrives, 1);
        assert_eq!(after.next_due_at, Some(clock.now().plus(REDRIVE_DUE_IN)));
        assert_eq!(after.history.len(), 1);
        assert_eq!(after.history[0].action, "redrive");
        assert_eq!(after.history[0].caller, ALICE);
        assert_eq!(after.history[0].note, "Stripe outage over");
        assert!(c
            .out()
            .contains(&format!("message {}:1 sent", o.operation_id)));
        assert!(c.out().contains("taken out of review (was: 0 matches)"));

        // Settled: refused, nothing sent.
        let t = claim(&store, &o, clock.now()).await;
        record(&store, &o, t, OperationStatus::Succeeded, None, clock.now()).await;
        let err = redrive(&store, &queue, &identity, &clock, &args, &mut c.console())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("already settled"), "{err}");
        assert!(queue.receive(10, Duration::from_secs(30)).is_empty());
    }

    #[test]
    fn infra_failures_print_the_whole_chain() {
        let inner = io::Error::other("connection refused");
        let outer = charge_once::ports::StoreError::with_source("GetItem", inner);
        let failure = Failure::infra("reading operation x", outer);
        assert_eq!(
            failure.to_string(),
            "reading operation x: operation store: GetItem: connection refused"
        );
        assert_eq!(failure.exit_code(), 1);
        assert_eq!(Failure::Usage("u".into()).exit_code(), 2);
    }
}
