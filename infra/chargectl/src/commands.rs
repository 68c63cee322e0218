//! The subcommands, written against the ports (`OperationStore`, `ChargeQueue`, `Clock`) so they
//! run the same on DynamoDB/SQS and on the in-memory adapters in unit tests.
//!
//! Every read goes through the store's key, the operation-id index or the unknown index — never a
//! table scan. Every write is one of the store's conditional writes (`resolve`, `reschedule`), so an
//! operator can never overwrite a settled operation or race a charge that is running right now:
//! the condition refuses, and the command says why and exits 1.

use std::error::Error as StdError;
use std::fmt;
use std::io::{self, Write};
use std::time::Duration;

use charge_once::operation::Resolution;
use charge_once::ports::{
    ChargeQueue, IndexQuery, ManualResolution, OperationStore, QueuedCharge, Recorded, Reschedule,
};
use charge_once::{Clock, Operation, OperationId, OperationKey, OperationStatus, OrderId};

use crate::cli::{RedriveArgs, ResolveArgs, ShowArgs, UnknownsArgs};
use crate::render;

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
                write!(f, "{context}: {source}")?;
                let mut next = source.source();
                while let Some(cause) = next {
                    write!(f, ": {cause}")?;
                    next = cause.source();
                }
                Ok(())
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
/// operations, not of all operations), keeps those old enough, prints the oldest first.
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
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    ops.sort_by_key(|op| (op.created_at, op.operation_id));
    if let Some(limit) = args.limit {
        ops.truncate(limit as usize);
    }
    if ops.is_empty() {
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
        render::unknowns_json_lines(&ops, now)
    } else {
        render::unknowns_table(&ops, now)
    };
    console.out.write_all(text.as_bytes())?;
    Ok(())
}

/// Reads one operation by its id, or refuses with "no operation ...".
async fn fetch(store: &dyn OperationStore, id: &OperationId) -> Result<Operation, Failure> {
    store
        .get_by_operation_id(id)
        .await
        .map_err(|e| Failure::infra(format!("reading operation {id}"), e))?
        .ok_or_else(|| Failure::Refused(format!("no operation with id {id}")))
}

/// `chargectl show`: by operation id when the argument is a UUID (falling back to an order id of
/// that spelling), else by order id.
pub async fn show(
    store: &dyn OperationStore,
    clock: &dyn Clock,
    args: &ShowArgs,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    let mut found = None;
    if let Ok(id) = OperationId::parse(&args.id) {
        found = store
            .get_by_operation_id(&id)
            .await
            .map_err(|e| Failure::infra(format!("reading operation {id}"), e))?;
    }
    if found.is_none() {
        // A UUID is also a valid order id: try that spelling before giving up.
        let order = OrderId::parse(&args.id).map_err(|e| {
            Failure::Usage(format!(
                "{:?} is neither an operation id nor an order id ({e})",
                args.id
            ))
        })?;
        found = store
            .get(&OperationKey::charge(order))
            .await
            .map_err(|e| Failure::infra(format!("reading order {}", args.id), e))?;
    }
    let op = found.ok_or_else(|| {
        Failure::Refused(format!(
            "no operation for order or operation id {}",
            args.id
        ))
    })?;
    if args.json {
        let value =
            render::show_json(&op).map_err(|e| Failure::infra("cannot encode the record", e))?;
        writeln!(console.out, "{value}")?;
    } else {
        console
            .out
            .write_all(render::show_text(&op, clock.now()).as_bytes())?;
    }
    Ok(())
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
        .map(|l| format!(" (lease until {})", l.expires_at.to_rfc3339()))
        .unwrap_or_default();
    Failure::Refused(format!(
        "operation {} is being executed right now{until}; nothing changed. \
         Look again after the lease expires",
        op.operation_id
    ))
}

/// `chargectl resolve`: settles by hand through the store's conditional `resolve` (only an
/// unsettled, unleased operation), with who, when and why kept on the record.
pub async fn resolve(
    store: &dyn OperationStore,
    clock: &dyn Clock,
    args: &ResolveArgs,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    let op = fetch(store, &args.operation_id).await?;
    let now = clock.now();
    if op.status.is_settled() {
        return Err(already_settled(&op, "changed"));
    }
    if op.has_live_lease(now) {
        return Err(leased(&op));
    }
    let (status, external_id) = match &args.outcome.succeeded {
        Some(pi) => (OperationStatus::Succeeded, Some(pi.clone())),
        None => (OperationStatus::Failed, None),
    };
    match (&external_id, &op.external_id) {
        (Some(new), Some(old)) if new != old => writeln!(
            console.err,
            "warning: the record named PaymentIntent {old}; it now names {new}"
        )?,
        (None, Some(old)) => writeln!(
            console.err,
            "warning: the record names PaymentIntent {old}; it is settled as failed \
             (make sure {old} did not succeed)"
        )?,
        _ => {}
    }
    let request = ManualResolution {
        key: op.key(),
        operation_id: op.operation_id,
        status,
        external_id,
        resolution: Resolution {
            by: args.by.clone(),
            note: args.note.clone(),
            at: now,
        },
    };
    let written = match store
        .resolve(&request)
        .await
        .map_err(|e| Failure::infra(format!("resolving operation {}", op.operation_id), e))?
    {
        Recorded::Written(written) => written,
        Recorded::Refused(None) => {
            return Err(Failure::Refused(format!(
                "operation {} no longer exists; nothing changed",
                op.operation_id
            )))
        }
        Recorded::Refused(Some(current)) if current.status.is_settled() => {
            return Err(already_settled(&current, "changed"))
        }
        Recorded::Refused(Some(current)) if current.has_live_lease(now) => {
            return Err(leased(&current))
        }
        Recorded::Refused(Some(current)) => {
            return Err(Failure::Refused(format!(
                "operation {} changed concurrently; nothing changed, try again",
                current.operation_id
            )))
        }
    };
    let pi = written
        .external_id
        .as_deref()
        .map(|id| format!(" (PaymentIntent {id})"))
        .unwrap_or_default();
    writeln!(
        console.out,
        "operation {} (order {}): {} -> {}{pi}; resolved by {} at {}: {}",
        written.operation_id,
        written.order_id,
        op.status,
        written.status,
        request.resolution.by,
        request.resolution.at.to_rfc3339(),
        request.resolution.note
    )?;
    if let Some(review) = &op.review {
        writeln!(
            console.out,
            "review reason kept on the record: {}",
            review.reason
        )?;
    }
    Ok(())
}

/// `chargectl redrive`: moves the due time (guarded by the `updated_at` just read, counting a
/// re-drive and clearing the review flag), then sends the message with dedup id
/// `operation_id:<redrives>`. The charge function re-uses the operation's idempotency key and never
/// creates past the key window, so this cannot make a second charge.
pub async fn redrive(
    store: &dyn OperationStore,
    queue: &dyn ChargeQueue,
    clock: &dyn Clock,
    args: &RedriveArgs,
    console: &mut Console<'_>,
) -> Result<(), Failure> {
    let op = fetch(store, &args.operation_id).await?;
    let now = clock.now();
    if op.status.is_settled() {
        return Err(already_settled(&op, "to re-drive"));
    }
    if op.has_live_lease(now) {
        return Err(leased(&op));
    }
    let request = Reschedule {
        key: op.key(),
        operation_id: op.operation_id,
        expected_status: op.status,
        expected_updated_at: op.updated_at,
        next_due_at: now.plus(REDRIVE_DUE_IN),
        bump_redrives: true,
        clear_review: true,
        now,
    };
    let written = match store
        .reschedule(&request)
        .await
        .map_err(|e| Failure::infra(format!("rescheduling operation {}", op.operation_id), e))?
    {
        Recorded::Written(written) => written,
        Recorded::Refused(Some(current)) if current.status.is_settled() => {
            return Err(already_settled(&current, "to re-drive"))
        }
        Recorded::Refused(_) => {
            return Err(Failure::Refused(format!(
                "operation {} changed concurrently; nothing sent, try again",
                op.operation_id
            )))
        }
    };
    let message = QueuedCharge::redrive(&written, written.redrives);
    queue.send(&message).await.map_err(|e| {
        Failure::infra(
            format!(
                "operation {} was rescheduled (due {}) but the queue message was not sent; \
                 the reconciler will re-drive it when due",
                written.operation_id,
                request.next_due_at.to_rfc3339()
            ),
            e,
        )
    })?;
    let review = op
        .review
        .as_ref()
        .map(|r| format!("; taken out of review (was: {})", r.reason))
        .unwrap_or_default();
    writeln!(
        console.out,
        "operation {} (order {}, {}) re-driven: message {} sent{review}; next due {}",
        written.operation_id,
        written.order_id,
        written.status,
        message.dedup_id,
        request.next_due_at.to_rfc3339()
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use charge_once::memory::MemoryQueue;
    use charge_once::memory::MemoryStore;
    use charge_once::ports::{ClaimRequest, OutcomeRecord};
    use charge_once::{
        Amount, ChargeParams, Currency, CustomerId, Lease, LeaseToken, ManualClock,
        PaymentMethodId, Review, Timestamp,
    };

    use super::*;
    use crate::cli::ResolveOutcome;

    const T0: Timestamp = Timestamp::from_millis(1_800_000_000_000);

    fn op(order: &str, created: Timestamp) -> Operation {
        Operation::new(
            OrderId::parse(order).unwrap(),
            ChargeParams {
                amount: Amount::new(1250).unwrap(),
                currency: Currency::parse("usd").unwrap(),
                customer_id: CustomerId::parse("cus_1").unwrap(),
                payment_method: PaymentMethodId::parse("pm_card_visa").unwrap(),
            },
            charge_once::Principal::jwt("order-service").unwrap(),
            created,
            Duration::from_secs(300),
        )
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
        let token = LeaseToken::new_random();
        let claim = store
            .claim(&ClaimRequest {
                key: op.key(),
                operation_id: op.operation_id,
                lease: Lease {
                    token,
                    expires_at: now.plus(Duration::from_secs(60)),
                },
                now,
            })
            .await
            .unwrap();
        assert!(matches!(claim, charge_once::ports::Claim::Claimed(_)));
        token
    }

    async fn record(
        store: &MemoryStore,
        op: &Operation,
        token: LeaseToken,
        status: OperationStatus,
        review: Option<&str>,
        now: Timestamp,
    ) {
        let rec = store
            .record(&OutcomeRecord {
                key: op.key(),
                operation_id: op.operation_id,
                lease_token: token,
                status,
                external_id: None,
                last_error: Some("timeout".into()),
                review: review.map(|r| Review {
                    reason: r.into(),
                    flagged_at: now,
                }),
                next_due_at: (!status.is_settled()).then(|| now.plus(Duration::from_secs(60))),
                now,
            })
            .await
            .unwrap();
        assert!(matches!(rec, Recorded::Written(_)));
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

    #[tokio::test]
    async fn resolve_refuses_settled_and_leased_and_settles_otherwise() {
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

        let args = |id: OperationId| ResolveArgs {
            operation_id: id,
            outcome: ResolveOutcome {
                succeeded: Some("pi_found".into()),
                failed: false,
            },
            note: "seen in dashboard".into(),
            by: "alice".into(),
        };
        let mut c = Captured::new();
        let err = resolve(
            &store,
            &clock,
            &args(settled.operation_id),
            &mut c.console(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.exit_code(), 1);
        assert!(err
            .to_string()
            .contains("is already failed; nothing changed"));

        let err = resolve(
            &store,
            &clock,
            &args(leased_op.operation_id),
            &mut c.console(),
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string().contains("being executed right now"),
            "{err}"
        );

        let err = resolve(
            &store,
            &clock,
            &args(OperationId::new_random()),
            &mut c.console(),
        )
        .await
        .unwrap_err();
        assert!(err.to_string().starts_with("no operation with id"));

        resolve(&store, &clock, &args(open.operation_id), &mut c.console())
            .await
            .unwrap();
        assert!(c
            .out()
            .contains("unknown -> succeeded (PaymentIntent pi_found)"));
        let now = store.get(&open.key()).await.unwrap().unwrap();
        assert_eq!(now.status, OperationStatus::Succeeded);
        let resolution = now.resolution.unwrap();
        assert_eq!(
            (
                resolution.by.as_str(),
                resolution.note.as_str(),
                resolution.at
            ),
            ("alice", "seen in dashboard", T0)
        );
    }

    #[tokio::test]
    async fn redrive_reschedules_then_sends_with_a_fresh_dedup_id() {
        let store = MemoryStore::new();
        let clock = ManualClock::new(T0);
        let queue = MemoryQueue::new(Arc::new(clock.clone()));
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
        };
        redrive(&store, &queue, &clock, &args, &mut c.console())
            .await
            .unwrap();
        let msgs = queue.receive(10, Duration::from_secs(30));
        assert_eq!(msgs.len(), 1);
        let after = store.get(&o.key()).await.unwrap().unwrap();
        assert_eq!(after.review, None);
        assert_eq!(after.redrives, 1);
        assert_eq!(after.next_due_at, Some(clock.now().plus(REDRIVE_DUE_IN)));
        assert!(c
            .out()
            .contains(&format!("message {}:1 sent", o.operation_id)));
        assert!(c.out().contains("taken out of review (was: 0 matches)"));

        // Settled: refused, nothing sent.
        let t = claim(&store, &o, clock.now()).await;
        record(&store, &o, t, OperationStatus::Succeeded, None, clock.now()).await;
        let err = redrive(&store, &queue, &clock, &args, &mut c.console())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("already succeeded"), "{err}");
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
