//! One SQS FIFO batch: its message groups concurrently, each group in order.
//!
//! For each record: parse the body, then run the executor. An item fails (is reported as a batch
//! item failure, so SQS delivers it again) only when retrying can help: the executor says nothing
//! happened and it should be retried (429, 409 in flight, auth, a live lease elsewhere) or the
//! store is unavailable. After a failed item, the later items of the **same message group** in the
//! batch fail too, so one order's messages never overtake each other; other groups go on.
//!
//! **Groups run concurrently, a group never does.** The records are split by `MessageGroupId`
//! (each group keeps its batch order) and the groups are awaited together on this one task
//! (`join_all`: no spawned tasks, so the spans and the borrowed ports stay as they are). A message
//! of a group starts only after the previous one of that group has finished. Why: an invocation
//! is billed for its duration, and that duration is almost all waiting on Stripe; a batch of n
//! orders then costs about one Stripe call of time instead of n (measured in BENCHMARKS.md), and the
//! slowest group bounds the invocation. Failures are reported in batch order.
//!
//! **Poison never blocks.** A message no retry can fix — an unreadable body, an unknown version,
//! no such operation, a record this release cannot read — is copied to the dead-letter queue with its reason (message attributes),
//! acknowledged at once, counted (`PoisonMessages`, alarmed) and logged with its message id, so
//! the rest of its group goes on in the same batch. Failing it back to SQS instead would hold the
//! whole FIFO group for five receives × the visibility timeout (~2.5 h) and push the valid
//! messages behind it towards the DLQ too. If the DLQ itself cannot be written, the item fails as
//! before: never acknowledged without a copy. An operation the message named, if it exists, is
//! still driven by the unknown index.
//!
//! Who drives the retry of an `unknown` outcome: **the unknown index**, not SQS. The item is
//! acknowledged once `unknown` and its next due time are recorded, and the reconciler re-drives it
//! with backoff. Leaving it to SQS would hold the order's FIFO group hostage to visibility timeouts
//! for up to 23 hours and push it to the DLQ after the receive limit, while the index keeps a durable,
//! queryable schedule that also survives a lost message. "Nothing happened" answers do go back to
//! SQS.
//!
//! **A refusal at the rate limit comes back in seconds.** Stripe's 429 (or the budget of
//! [`charge_once::pacing`] too full to wait for), a 409 key-in-use and a lease held elsewhere all
//! mean "nothing happened, try again shortly": the record, and the later records of its group that
//! wait behind it, are made visible again after [`charge_once::pacing::return_after`] (2 s
//! growing to 60 s with the receive count, jittered) with `ChangeMessageVisibility`, instead of the
//! queue's 30-minute visibility timeout (which is there to cover a running charge). Counted as
//! `ReturnedSoon`. Other retries (store unavailable, our key refused) wait the timeout.
//!
//! **Refused at the last receive: left to the reconciler, not the DLQ.** Back in seconds, a
//! message reaches the queue's receive limit (`maxReceiveCount`,
//! [`crate::EVENT_SOURCE`]`.max_receive_count`) in about 30 s of refusals, and failing it then
//! would park it in the DLQ, whose alarm pages a person for a message nothing is wrong with. So at
//! that receive a budget too full to wait for does not refuse (the call goes out; Stripe's own
//! 429 is the backstop), and a refusal the executor reports (429, key in use, lease elsewhere) is
//! acknowledged: the executor has just read the operation and left it unsettled with a due time
//! (no later than it was), so the reconciler re-drives it from the unknown index when it is due,
//! as it does for a lost message. Counted as `LeftToReconciler`.
//!
//! Metrics (EMF, `Function=charge`), one set per batch: `PoisonMessages`, `StripeReplays`
//! (Stripe answered `Idempotent-Replayed: true`: our key was used before), and `SentToReview` per
//! reason class (alarmed).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use charge_core::message_plan::{fate, Fate, Item, Receive, Seen};
use charge_core::plan::ReviewClass;
use charge_core::time::Timestamp;
use charge_once::executor::{execute, EngineDeps, ExecuteError};
use charge_once::pacing::MessageBudget;
use charge_once::ports::{
    DeadLetter, DeadLetterQueue, MessageVisibility, MetricsSink, OperationMessage,
};
use charge_once::telemetry::{emf_line, sent_to_review_line, stripe_requests_lines};
use futures_util::future::join_all;
use lambda_runtime::LambdaEvent;
use tracing::{error, info, warn, Instrument};

/// The `Function` dimension of this function's metrics.
pub const FUNCTION: &str = "charge";

/// What the handler needs, built once in `main`.
#[derive(Clone)]
pub struct ChargeFunction {
    pub charge: EngineDeps,
    /// Where poison messages are copied (the charge queue's DLQ).
    pub dead_letters: Arc<dyn DeadLetterQueue>,
    /// The charge queue, to bring a message refused at the rate limit back in seconds.
    pub visibility: Arc<dyn MessageVisibility>,
    /// This environment's shares of the account's Stripe budget and of each endpoint's: each
    /// message takes a slot of both, for the call it makes, before its claim (`None`: unpaced).
    pub budget: Option<Arc<MessageBudget>>,
    pub metrics: Arc<dyn MetricsSink>,
}

/// For callers whose queue has no receipt handles to act on (benches, tests that build their own
/// records): every retried message waits the queue's own visibility timeout.
pub struct QueueTimeout;

#[async_trait::async_trait]
impl MessageVisibility for QueueTimeout {
    async fn return_after(
        &self,
        _receipt_handle: &str,
        _delay: std::time::Duration,
    ) -> Result<(), charge_once::ports::QueueError> {
        Ok(())
    }
}

impl ChargeFunction {
    /// For benches and tests that do not look at poison or metrics: poison messages are parked
    /// in memory, metrics lines dropped.
    pub fn local(charge: EngineDeps) -> Self {
        Self {
            charge,
            dead_letters: Arc::new(charge_once::memory::MemoryDeadLetters::new()),
            visibility: Arc::new(QueueTimeout),
            budget: None,
            metrics: Arc::new(charge_once::telemetry::DiscardMetrics),
        }
    }
}

/// What a batch did, for its metrics line.
#[derive(Debug, Default)]
struct BatchTally {
    poison: u64,
    replays: u64,
    returned_soon: u64,
    left_to_reconciler: u64,
    /// Authorizations found uncaptured with their deadline near (paged).
    deadline_near: u64,
    reviews: BTreeMap<ReviewClass, u64>,
}

impl BatchTally {
    /// Adds one group's counts.
    fn add(&mut self, group: BatchTally) {
        self.poison += group.poison;
        self.replays += group.replays;
        self.returned_soon += group.returned_soon;
        self.left_to_reconciler += group.left_to_reconciler;
        self.deadline_near += group.deadline_near;
        for (class, n) in group.reviews {
            *self.reviews.entry(class).or_default() += n;
        }
    }
}

/// Handles a batch; returns the items to retry, in batch order.
pub async fn handle(f: &ChargeFunction, event: LambdaEvent<SqsEvent>) -> SqsBatchResponse {
    let records = &event.payload.records;
    let groups = message_groups(records);
    let deadline = invocation_deadline(event.context.deadline, f.charge.clock.now());
    let done = join_all(
        groups
            .into_iter()
            .map(|group| run_group(f, records, group, deadline)),
    )
    .await;

    let mut outcomes: Vec<(usize, Item)> = Vec::with_capacity(records.len());
    let mut tally = BatchTally::default();
    for (group_outcomes, group_tally) in done {
        outcomes.extend(group_outcomes);
        tally.add(group_tally);
    }
    outcomes.sort_by_key(|(index, _)| *index);

    let mut response = SqsBatchResponse::default();
    for (index, outcome) in outcomes {
        if let Item::RetrySoon(reason) = outcome {
            if return_soon(f, &records[index], reason).await {
                tally.returned_soon += 1;
            }
        }
        if outcome.is_retry() {
            // An empty identifier makes Lambda retry the whole batch: the safe reading of a
            // record without a message id.
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = records[index].message_id.clone().unwrap_or_default();
            response.batch_item_failures.push(failure);
        }
    }
    emit(f, &tally);
    response
}

/// The records of one message group, by their index in the batch, in batch order.
#[derive(Debug, PartialEq, Eq)]
struct MessageGroup {
    id: Option<String>,
    records: Vec<usize>,
}

/// Splits a batch by `MessageGroupId`, groups in the order they first appear. A record without a
/// group id (a FIFO queue always sets one) is a group of its own: it was never held back by, nor
/// held back, anything else.
fn message_groups(records: &[SqsMessage]) -> Vec<MessageGroup> {
    let mut groups: Vec<MessageGroup> = Vec::new();
    let mut by_id: HashMap<&str, usize> = HashMap::new();
    for (index, record) in records.iter().enumerate() {
        match record.attributes.get("MessageGroupId") {
            Some(id) => {
                let at = *by_id.entry(id.as_str()).or_insert_with(|| {
                    groups.push(MessageGroup {
                        id: Some(id.clone()),
                        records: Vec::new(),
                    });
                    groups.len() - 1
                });
                groups[at].records.push(index);
            }
            None => groups.push(MessageGroup {
                id: None,
                records: vec![index],
            }),
        }
    }
    groups
}

/// One group, one message at a time; after a failed item the rest of the group fails unprocessed.
async fn run_group(
    f: &ChargeFunction,
    records: &[SqsMessage],
    group: MessageGroup,
    deadline: Option<Timestamp>,
) -> (Vec<(usize, Item)>, BatchTally) {
    let span = tracing::info_span!(
        "charge_group",
        group = group.id.as_deref().unwrap_or(""),
        messages = group.records.len()
    );
    async {
        let mut tally = BatchTally::default();
        let mut outcomes = Vec::with_capacity(group.records.len());
        // How the first failed item of the group comes back; the rest of the group follows it.
        let mut failed: Option<Item> = None;
        for index in group.records {
            let record = &records[index];
            let message_id = record.message_id.clone().unwrap_or_default();
            let outcome = match &failed {
                Some(first) => {
                    info!(%message_id, "an earlier message of this group failed; keeping order");
                    let soon = matches!(first, Item::RetrySoon(_));
                    decided(fate(&Seen::BehindFailed { soon }, receive(record)))
                }
                None => process(f, record, &message_id, &mut tally, deadline).await,
            };
            match outcome {
                Item::Acknowledged => {}
                Item::Poisoned(_) => tally.poison += 1,
                Item::LeftToReconciler(_) => tally.left_to_reconciler += 1,
                // The rest of this group waits for the next delivery, in order.
                Item::Retry(_) | Item::RetrySoon(_) => {
                    failed.get_or_insert(outcome.clone());
                }
            }
            outcomes.push((index, outcome));
        }
        (outcomes, tally)
    }
    .instrument(span)
    .await
}

fn emit(f: &ChargeFunction, tally: &BatchTally) {
    let now = f.charge.clock.now();
    f.metrics.emit(emf_line(
        FUNCTION,
        now,
        &[
            ("PoisonMessages", tally.poison as f64, "Count"),
            ("StripeReplays", tally.replays as f64, "Count"),
            ("ReturnedSoon", tally.returned_soon as f64, "Count"),
            ("LeftToReconciler", tally.left_to_reconciler as f64, "Count"),
            (
                "AuthorizationNearDeadline",
                tally.deadline_near as f64,
                "Count",
            ),
        ],
    ));
    for (class, n) in &tally.reviews {
        f.metrics
            .emit(sent_to_review_line(FUNCTION, *class, *n, now));
    }
    if let Some(requests) = f.charge.gateway.requests() {
        for line in stripe_requests_lines(FUNCTION, &requests.since_last_report(), now) {
            f.metrics.emit(line);
        }
    }
}

/// Why a message can never succeed.
struct Poison {
    reason: &'static str,
    detail: String,
}

/// One message: read it, wait for its Stripe slot, run the executor, each answer asking the
/// message plan ([`fate`]) what becomes of the message.
async fn process(
    f: &ChargeFunction,
    record: &SqsMessage,
    message_id: &str,
    tally: &mut BatchTally,
    deadline: Option<Timestamp>,
) -> Item {
    let message = match parse(record) {
        Ok(m) => m,
        Err(poison) => return park(f, record, message_id, poison).await,
    };
    if let Err(saturated) = take_slot(f, &message.kind, deadline).await {
        if fate(&Seen::BudgetSaturated, receive(record)) != Fate::Charge {
            info!(%message_id, %saturated, "Stripe budget saturated; back soon");
            return decided(fate(&Seen::BudgetSaturated, receive(record)));
        }
        // Refusing now would park it in the DLQ; one call over the budget is cheaper, and
        // Stripe's own 429 is the backstop.
        warn!(%message_id, %saturated, "Stripe budget saturated at the last receive; calling anyway");
    }
    let span = tracing::info_span!(
        "charge_message",
        %message_id,
        order_id = %message.order_id,
        operation_id = %message.operation_id
    );
    async {
        let executed = execute(&f.charge, &message.key(), &message.operation_id).await;
        let seen = match executed {
            Ok(report) => {
                tally.replays += u64::from(report.replayed);
                if report.deadline_near {
                    tally.deadline_near += 1;
                    error!(
                        capture_before = ?report.record.as_ref().and_then(|o| o.capture_before()).map(|t| t.to_rfc3339()),
                        "an authorization is not captured and its deadline is near: capture or \
                         cancel it (POST /orders/{{order_id}}/capture or /cancel) before Stripe \
                         cancels it"
                    );
                }
                if let Some(class) = report.sent_to_review {
                    *tally.reviews.entry(class).or_default() += 1;
                }
                info!(status = %report.status, disposition = ?report.disposition,
                    gateway_calls = report.gateway_calls, replayed = report.replayed, "executed");
                Seen::Executed(report.disposition)
            }
            Err(e) => return failed(f, record, message_id, &message, e).await,
        };
        let outcome = decided(fate(&seen, receive(record)));
        info!(?outcome, "done with the message");
        outcome
    }
    .instrument(span)
    .await
}

/// The executor could not run the message: poison (no such operation, a record this release
/// cannot read) or the store unavailable.
async fn failed(
    f: &ChargeFunction,
    record: &SqsMessage,
    message_id: &str,
    message: &OperationMessage,
    e: ExecuteError,
) -> Item {
    let (seen, detail) = match e {
        ExecuteError::NotFound { .. } => (
            Seen::NoSuchOperation,
            format!(
                "no operation {} for order {}",
                message.operation_id, message.order_id
            ),
        ),
        // The record exists but this release cannot read it (a hand edit, a rollback past the
        // release that wrote it): no retry reads it better, and five receives at the visibility
        // timeout would only delay the page. The claim may have committed (a condition cannot
        // check what parsing checks), so the key window has started; the operation stays in the
        // unknown index, where the reconciler counts it unreadable every tick and drives it again
        // once repaired.
        ExecuteError::Store(e) if e.unreadable.is_some() => (
            Seen::UnreadableRecord,
            format!(
                "record {} cannot be read by this release: {}",
                e.unreadable.as_deref().unwrap_or_default(),
                charge_once::telemetry::ErrorChain(&e)
            ),
        ),
        ExecuteError::Store(e) => {
            warn!(%message_id, error = %charge_once::telemetry::ErrorChain(&e), "store unavailable");
            (Seen::StoreUnavailable, String::new())
        }
    };
    match fate(&seen, receive(record)) {
        Fate::Park(reason) => park(f, record, message_id, Poison { reason, detail }).await,
        other => decided(other),
    }
}

/// A fate that needs no more work from the shell. A fate asking for more work (charge, park) is
/// the shell's to do before it reports; if one reaches here, failing the item is the safe
/// reading (SQS delivers it again).
fn decided(fate: Fate) -> Item {
    match fate {
        Fate::Done(item) => item,
        Fate::Charge | Fate::Park(_) => {
            debug_assert!(false, "undone fate {fate:?}");
            Item::Retry("retry later")
        }
    }
}

/// The longest one message can take once it has its slot: a claim and a record (3 s each at
/// worst) and a Stripe call at its worst with one retry (2 x 10 s + 1 s), as the template's
/// timeout arithmetic counts it.
pub const WORST_MESSAGE: Duration = Duration::from_secs(27);
/// How long a message waits for its slot when the invocation's deadline is unknown (tests).
const UNBOUNDED_WAIT: Duration = Duration::from_secs(10);

/// Lambda's longest function timeout: a deadline further ahead than this was not sent by Lambda.
const LAMBDA_MAX_TIMEOUT: Duration = Duration::from_secs(900);

/// The invocation's deadline, when the context carries one Lambda could have sent: milliseconds
/// since the epoch, ahead of `now` by at most Lambda's longest timeout. Anything else is unknown,
/// and a non-zero one is said in a log line: `cargo lambda watch` sends 600000 (a duration: ten
/// minutes after 1970), which read as a time would leave no message any time to wait for its
/// Stripe slot.
fn invocation_deadline(deadline_ms: u64, now: Timestamp) -> Option<Timestamp> {
    if deadline_ms == 0 {
        return None;
    }
    let deadline = Timestamp::from_millis(i64::try_from(deadline_ms).unwrap_or(i64::MAX));
    let ahead = deadline.since(now);
    if ahead.is_zero() || ahead > LAMBDA_MAX_TIMEOUT {
        warn!(
            deadline_ms,
            now_ms = now.as_millis(),
            "the invocation's deadline is not a time within Lambda's longest timeout (a local \
             runtime); each message waits for its Stripe slot as if it had none"
        );
        return None;
    }
    Some(deadline)
}

/// Waits for this environment's next Stripe slot, as long as the invocation can afford: its
/// deadline less one worst message. Nothing is claimed yet, so a refusal changes nothing.
async fn take_slot(
    f: &ChargeFunction,
    kind: &charge_core::domain::OperationKind,
    deadline: Option<Timestamp>,
) -> Result<(), charge_once::pacing::Saturated> {
    let Some(budget) = &f.budget else {
        return Ok(());
    };
    let max_wait = match deadline {
        Some(d) => d.since(f.charge.clock.now()).saturating_sub(WORST_MESSAGE),
        None => UNBOUNDED_WAIT,
    };
    budget.acquire(kind, max_wait).await.map(|_| ())
}

/// The record's `ApproximateReceiveCount` (1 if absent or unreadable: never taken for the last).
fn receives(record: &SqsMessage) -> u32 {
    record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// Which receive of the queue's limit this is.
fn receive(record: &SqsMessage) -> Receive {
    Receive {
        count: receives(record),
        limit: crate::EVENT_SOURCE.max_receive_count,
    }
}

/// Makes a record visible again in seconds; `false` (logged) if it could not be: it then waits
/// the queue's visibility timeout, as before.
async fn return_soon(f: &ChargeFunction, record: &SqsMessage, reason: &'static str) -> bool {
    let message_id = record.message_id.as_deref().unwrap_or_default();
    let Some(receipt) = record.receipt_handle.as_deref() else {
        return false;
    };
    let receives = receives(record);
    let delay = charge_once::pacing::return_after(message_id, receives);
    match f.visibility.return_after(receipt, delay).await {
        Ok(()) => {
            info!(%message_id, reason, ?delay, receives, "back on the queue soon");
            true
        }
        Err(e) => {
            warn!(%message_id, reason, error = %charge_once::telemetry::ErrorChain(&e),
                "could not shorten the visibility; the message waits the queue's timeout");
            false
        }
    }
}

/// Copies a poison message to the DLQ and acknowledges it; fails the item if the copy fails.
async fn park(f: &ChargeFunction, record: &SqsMessage, message_id: &str, poison: Poison) -> Item {
    let letter = DeadLetter {
        body: record.body.clone().unwrap_or_default(),
        message_id: message_id.to_owned(),
        group_id: record.attributes.get("MessageGroupId").cloned(),
        reason: poison.reason.to_owned(),
        detail: poison.detail,
    };
    match f.dead_letters.park(&letter).await {
        Ok(()) => {
            error!(
                %message_id,
                group = letter.group_id.as_deref().unwrap_or(""),
                reason = poison.reason,
                detail = %letter.detail,
                "poison message: copied to the dead-letter queue and acknowledged; its group goes on"
            );
            Item::Poisoned(poison.reason)
        }
        Err(e) => {
            error!(
                %message_id,
                reason = poison.reason,
                error = %charge_once::telemetry::ErrorChain(&e),
                "poison message, but the dead-letter queue is unavailable: failing the item"
            );
            decided(fate(&Seen::DeadLetterUnavailable, receive(record)))
        }
    }
}

fn parse(record: &SqsMessage) -> Result<OperationMessage, Poison> {
    let body = record.body.as_deref().ok_or_else(|| Poison {
        reason: "unparseable",
        detail: "no body".into(),
    })?;
    let unsupported = |v: u64| Poison {
        reason: "unsupported_version",
        detail: format!("unsupported message version {v}"),
    };
    match serde_json::from_str::<OperationMessage>(body) {
        Ok(message) if message.v == OperationMessage::version_of(&message.kind) => Ok(message),
        Ok(message) => Err(unsupported(u64::from(message.v))),
        Err(e) => {
            // A future message shape is named as such, not as garbage: its version, where the
            // body is JSON with a numeric `v` (read only for a body that is not this version's).
            let version = serde_json::from_str::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v.get("v").and_then(serde_json::Value::as_u64));
            match version.filter(|v| !OperationMessage::known_version(*v)) {
                Some(v) => Err(unsupported(v)),
                None => Err(Poison {
                    reason: "unparseable",
                    detail: format!("not a charge message: {e}"),
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use charge_core::plan::Policy;
    use charge_core::{
        domain::OperationId,
        operation::OperationStatus,
        time::{Clock, ManualClock, Timestamp},
    };
    use charge_once::memory::{FakeFault, FakeGateway, MemoryDeadLetters, MemoryStore};
    use charge_once::pacing::Budget;
    use charge_once::ports::{
        CreatedLists, DeadLetter, PaymentIntents, StripeAccount, StripeRefunds,
    };
    use charge_once::telemetry::CapturedMetrics;
    use charge_once::testing::CreateIn as _;
    use lambda_runtime::Context;

    use super::*;

    fn batch() -> SqsEvent {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../events/charge-sqs-batch.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    struct World {
        f: ChargeFunction,
        store: Arc<MemoryStore>,
        gateway: Arc<FakeGateway>,
        dlq: Arc<MemoryDeadLetters>,
        metrics: Arc<CapturedMetrics>,
        returned: Arc<Returned>,
    }

    /// A deadline Lambda could have sent is kept; none, one already past, and the duration
    /// `cargo lambda watch` sends are unknown (each message then waits as without a deadline).
    #[test]
    fn a_deadline_that_is_not_a_time_ahead_is_unknown() {
        let now = Timestamp::from_millis(1_764_000_000_000);
        let real = now.plus(Duration::from_secs(300));
        assert_eq!(
            invocation_deadline(real.as_millis() as u64, now),
            Some(real)
        );
        assert_eq!(invocation_deadline(0, now), None);
        assert_eq!(
            invocation_deadline(600_000, now),
            None,
            "cargo lambda watch"
        );
        assert_eq!(
            invocation_deadline(now.as_millis() as u64 - 1, now),
            None,
            "past"
        );
        let far = now.plus(Duration::from_secs(901));
        assert_eq!(invocation_deadline(far.as_millis() as u64, now), None);
    }

    /// Records each `return_after` (receipt handle, delay).
    #[derive(Default)]
    struct Returned(std::sync::Mutex<Vec<(String, std::time::Duration)>>);

    #[async_trait::async_trait]
    impl MessageVisibility for Returned {
        async fn return_after(
            &self,
            receipt_handle: &str,
            delay: std::time::Duration,
        ) -> Result<(), charge_once::ports::QueueError> {
            self.0
                .lock()
                .unwrap()
                .push((receipt_handle.to_owned(), delay));
            Ok(())
        }
    }

    /// The operations the sample batch refers to.
    const SAMPLE_ORDERS: [(&str, &str); 2] = [
        ("ord-1001", "0f8c6a52-3c1d-4e6f-9a2b-7d5e4c3b2a10"),
        ("ord-1003", "5b7e2d19-8a4c-4f1e-b6d3-2c9a8e7f6d50"),
    ];

    async fn world() -> World {
        world_with(&SAMPLE_ORDERS).await
    }

    /// A world whose store holds a pending operation for each `(order id, operation id)`.
    async fn world_with(orders: &[(&str, &str)]) -> World {
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        let store = Arc::new(MemoryStore::new());
        let gateway = Arc::new(FakeGateway::new());
        for (order, id) in orders.iter().copied() {
            charge_core::testing::order(order)
                .customer("cus_Q8xYz12AbC")
                .operation_id(id)
                .at(clock.now())
                .create_in(store.as_ref())
                .await;
        }
        let dlq = Arc::new(MemoryDeadLetters::new());
        let metrics = Arc::new(CapturedMetrics::new());
        let returned = Arc::new(Returned::default());
        let f = ChargeFunction {
            charge: EngineDeps {
                store: store.clone(),
                gateway: gateway.clone(),
                clock: Arc::new(clock),
                policy: Policy::default(),
            },
            dead_letters: dlq.clone(),
            visibility: returned.clone(),
            budget: None,
            metrics: metrics.clone(),
        };
        World {
            f,
            store,
            gateway,
            dlq,
            metrics,
            returned,
        }
    }

    fn failed(resp: &SqsBatchResponse) -> Vec<&str> {
        resp.batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect()
    }

    const MALFORMED: &str = "2e1424d4-f796-459a-8184-9c92662be6da";

    #[tokio::test]
    async fn a_malformed_record_is_parked_and_acknowledged_and_the_rest_is_charged() {
        let w = world().await;
        let resp = handle(&w.f, LambdaEvent::new(batch(), Context::default())).await;
        assert!(failed(&resp).is_empty(), "poison is acknowledged");
        let letters = w.dlq.letters();
        assert_eq!(letters.len(), 1);
        assert_eq!(letters[0].message_id, MALFORMED);
        assert_eq!(letters[0].reason, "unparseable");
        assert_eq!(letters[0].group_id.as_deref(), Some("ord-1002"));
        assert_eq!(w.gateway.charge_count(), 2);
        assert!(w
            .store
            .all()
            .iter()
            .all(|op| op.status == OperationStatus::Succeeded));
        assert_eq!(
            w.metrics.sum("PoisonMessages", &[("Function", FUNCTION)]),
            1.0
        );
    }

    #[tokio::test]
    async fn poison_does_not_hold_back_its_group_but_a_dlq_outage_does() {
        let w = world().await;
        let mut event = batch();
        // The valid ord-1001 message comes after a poison message of its own group, and after a
        // message for an operation that does not exist.
        let mut poison = event.records[1].clone();
        poison.message_id = Some("poison-in-group".into());
        poison
            .attributes
            .insert("MessageGroupId".into(), "ord-1001".into());
        let mut missing = event.records[0].clone();
        missing.message_id = Some("missing-op".into());
        missing.body = Some(
            r#"{"v":1,"operation_id":"11111111-2222-4333-8444-555555555555","order_id":"ord-1001","kind":"charge"}"#
                .into(),
        );
        let mut future = event.records[0].clone();
        future.message_id = Some("future-version".into());
        // Version 6: the first this release does not know (5 is a charge attempt after the
        // first).
        future.body = Some(r#"{"v":6,"anything":"new"}"#.into());
        event.records.splice(0..0, [poison, missing, future]);
        let resp = handle(&w.f, LambdaEvent::new(event.clone(), Context::default())).await;
        assert!(failed(&resp).is_empty(), "{:?}", failed(&resp));
        let reasons: Vec<_> = w
            .dlq
            .letters()
            .iter()
            .map(|l| (l.message_id.clone(), l.reason.clone()))
            .collect();
        assert_eq!(
            reasons,
            [
                ("poison-in-group".to_owned(), "unparseable".to_owned()),
                ("missing-op".to_owned(), "no_such_operation".to_owned()),
                (
                    "future-version".to_owned(),
                    "unsupported_version".to_owned()
                ),
                (MALFORMED.to_owned(), "unparseable".to_owned()),
            ]
        );
        assert_eq!(
            w.gateway.charge_count(),
            2,
            "ord-1001 charged in the same batch"
        );
        assert_eq!(w.metrics.sum("PoisonMessages", &[]), 4.0);

        // Without a DLQ to copy to, a poison message is failed as before (never dropped).
        let w = world().await;
        w.dlq
            .failing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let resp = handle(&w.f, LambdaEvent::new(event, Context::default())).await;
        assert_eq!(
            failed(&resp),
            [
                "poison-in-group",
                "missing-op",
                "future-version",
                "059f36b4-87a3-44ab-83d2-661975830a7d",
                MALFORMED
            ]
        );
        assert_eq!(w.gateway.charge_count(), 1, "ord-1003 went on");
    }

    #[tokio::test]
    async fn a_settled_operation_makes_no_gateway_call() {
        let w = world().await;
        handle(&w.f, LambdaEvent::new(batch(), Context::default())).await;
        let calls = w.gateway.calls.total();
        let resp = handle(&w.f, LambdaEvent::new(batch(), Context::default())).await;
        assert_eq!(
            w.gateway.calls.total(),
            calls,
            "redelivery of settled operations"
        );
        assert!(failed(&resp).is_empty());
    }

    #[tokio::test]
    async fn a_failure_holds_back_the_rest_of_its_group_only() {
        let w = world().await;
        let mut event = batch();
        // A second message for ord-1001 right after the first, and the first gets a 429.
        let mut second = event.records[0].clone();
        second.message_id = Some("later-in-group".into());
        event.records.insert(1, second);
        for (i, r) in event.records.iter_mut().enumerate() {
            r.receipt_handle = Some(format!("receipt-{i}"));
            r.attributes
                .insert("ApproximateReceiveCount".into(), "1".into());
        }
        w.gateway.script(FakeFault::RateLimited);
        let resp = handle(&w.f, LambdaEvent::new(event, Context::default())).await;
        assert_eq!(
            failed(&resp),
            ["059f36b4-87a3-44ab-83d2-661975830a7d", "later-in-group"]
        );
        assert_eq!(w.gateway.charge_count(), 1, "ord-1003 went on");
        // The 429'd message and the one waiting behind it come back in seconds, not in the
        // queue's 30 minutes; each at its own jittered delay.
        let returned = w.returned.0.lock().unwrap().clone();
        assert_eq!(
            returned.iter().map(|(r, _)| r.as_str()).collect::<Vec<_>>(),
            ["receipt-0", "receipt-1"]
        );
        for (_, delay) in &returned {
            assert!(
                (std::time::Duration::from_secs(1)..=std::time::Duration::from_secs(2))
                    .contains(delay),
                "{delay:?}"
            );
        }
        assert_eq!(w.metrics.sum("ReturnedSoon", &[]), 2.0);
    }

    /// The sample batch, every record at receive `n` with a receipt handle.
    fn batch_at_receive(n: u32) -> SqsEvent {
        let mut event = batch();
        for (i, r) in event.records.iter_mut().enumerate() {
            r.receipt_handle = Some(format!("receipt-{i}"));
            r.attributes
                .insert("ApproximateReceiveCount".into(), n.to_string());
        }
        event
    }

    #[tokio::test]
    async fn a_refusal_at_the_last_receive_is_left_to_the_reconciler_not_the_dlq() {
        let last = crate::EVENT_SOURCE.max_receive_count;
        // One receive earlier it still comes back soon: the limit is where the switch is.
        let w = world().await;
        w.gateway.script(FakeFault::RateLimited);
        let resp = handle(
            &w.f,
            LambdaEvent::new(batch_at_receive(last - 1), Context::default()),
        )
        .await;
        assert_eq!(failed(&resp), ["059f36b4-87a3-44ab-83d2-661975830a7d"]);
        assert_eq!(w.metrics.sum("LeftToReconciler", &[]), 0.0);

        let w = world().await;
        let before = w
            .store
            .all()
            .into_iter()
            .find(|op| op.order_id.as_str() == "ord-1001")
            .unwrap();
        w.gateway.script(FakeFault::RateLimited);
        let resp = handle(
            &w.f,
            LambdaEvent::new(batch_at_receive(last), Context::default()),
        )
        .await;
        // Acknowledged (failing it now would park it in the DLQ, which pages), not returned.
        assert!(failed(&resp).is_empty(), "{:?}", failed(&resp));
        assert!(w.returned.0.lock().unwrap().is_empty());
        assert_eq!(w.metrics.sum("LeftToReconciler", &[]), 1.0);
        assert_eq!(w.metrics.sum("ReturnedSoon", &[]), 0.0);
        assert_eq!(
            w.dlq
                .letters()
                .iter()
                .map(|l| l.message_id.as_str())
                .collect::<Vec<_>>(),
            [MALFORMED],
            "only the sample's malformed record is parked"
        );
        // The operation is where the reconciler finds it: unsettled, due no later than before.
        let after = w
            .store
            .all()
            .into_iter()
            .find(|op| op.order_id.as_str() == "ord-1001")
            .unwrap();
        assert_eq!(after.status, OperationStatus::Pending);
        let (due, was_due) = (after.next_due_at.unwrap(), before.next_due_at.unwrap());
        assert!(
            due <= was_due,
            "due no later than before: {due:?} > {was_due:?}"
        );
        assert_eq!(w.gateway.charge_count(), 1, "ord-1003 charged");
    }

    #[tokio::test]
    async fn a_full_budget_at_the_last_receive_calls_anyway() {
        let mut w = world().await;
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        w.f.charge.clock = Arc::new(clock.clone());
        // One call per 10 s and the invocation cannot wait: every message but the first is refused.
        w.f.budget = Some(Arc::new(MessageBudget::account_only(Arc::new(
            Budget::new(
                0.1,
                1,
                Arc::new(clock.clone()),
                Arc::new(ClockSleeper(clock.clone())),
            ),
        ))));
        let mut ctx = Context::default();
        ctx.deadline = clock.now().plus(WORST_MESSAGE).as_millis() as u64;
        let resp = handle(&w.f, LambdaEvent::new(batch_at_receive(2), ctx.clone())).await;
        assert_eq!(failed(&resp).len(), 1, "refused below the limit");
        assert_eq!(w.gateway.charge_count(), 1);

        let resp = handle(
            &w.f,
            LambdaEvent::new(batch_at_receive(crate::EVENT_SOURCE.max_receive_count), ctx),
        )
        .await;
        assert!(failed(&resp).is_empty(), "{:?}", failed(&resp));
        assert_eq!(
            w.gateway.charge_count(),
            2,
            "the refused one went out at its last receive"
        );
    }

    /// Sleeping moves the manual clock (the handler's awaits run one at a time here).
    struct ClockSleeper(ManualClock);

    impl charge_once::ports::Sleeper for ClockSleeper {
        fn sleep(
            &self,
            d: Duration,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
            self.0.advance(d);
            Box::pin(async {})
        }
    }

    #[tokio::test]
    async fn messages_wait_for_their_slot_and_one_the_invocation_cannot_wait_for_comes_back_soon() {
        let orders = [
            ("ord-p1", "6f1d1c1e-0000-4000-8000-000000000001"),
            ("ord-p2", "6f1d1c1e-0000-4000-8000-000000000002"),
            ("ord-p3", "6f1d1c1e-0000-4000-8000-000000000003"),
        ];
        let mut w = world_with(&orders).await;
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        w.f.charge.clock = Arc::new(clock.clone());
        // 2 calls/s, one at a time: slots at 0, 500 and 1,000 ms.
        w.f.budget = Some(Arc::new(MessageBudget::account_only(Arc::new(
            Budget::new(
                2.0,
                1,
                Arc::new(clock.clone()),
                Arc::new(ClockSleeper(clock.clone())),
            ),
        ))));
        let mut event = SqsEvent::default();
        for (i, (order, id)) in orders.iter().enumerate() {
            let mut r = SqsMessage::default();
            r.message_id = Some(format!("m-{i}"));
            r.receipt_handle = Some(format!("receipt-{i}"));
            r.body = Some(format!(
                r#"{{"v":1,"operation_id":"{id}","order_id":"{order}","kind":"charge"}}"#
            ));
            r.attributes
                .insert("MessageGroupId".into(), (*order).into());
            event.records.push(r);
        }
        // The invocation may wait 700 ms in all before its last worst-case message.
        let mut ctx = Context::default();
        ctx.deadline = (clock.now().plus(WORST_MESSAGE).as_millis() + 700) as u64;
        let start = clock.now();
        let resp = handle(&w.f, LambdaEvent::new(event, ctx)).await;
        assert_eq!(failed(&resp), ["m-2"]);
        assert_eq!(w.gateway.charge_count(), 2);
        assert_eq!(clock.now().since(start), Duration::from_millis(500));
        // The third was not claimed: nothing about it changed, and it comes back in seconds.
        let third = w
            .store
            .all()
            .into_iter()
            .find(|op| op.order_id.as_str() == "ord-p3")
            .unwrap();
        assert_eq!(
            (third.status, third.attempts),
            (OperationStatus::Pending, 0)
        );
        let returned = w.returned.0.lock().unwrap().clone();
        assert_eq!(returned.len(), 1);
        assert_eq!(returned[0].0, "receipt-2");
    }

    #[tokio::test]
    async fn a_retry_that_cannot_help_soon_waits_the_visibility_timeout() {
        let w = world().await;
        let mut event = batch();
        for (i, r) in event.records.iter_mut().enumerate() {
            r.receipt_handle = Some(format!("receipt-{i}"));
        }
        // Our key refused (401): an operator must fix it; coming back every 2 s would not help.
        w.gateway.script(FakeFault::Unauthorized);
        let resp = handle(&w.f, LambdaEvent::new(event, Context::default())).await;
        assert_eq!(failed(&resp).len(), 1);
        assert!(w.returned.0.lock().unwrap().is_empty());
        assert_eq!(w.metrics.sum("ReturnedSoon", &[]), 0.0);
    }

    #[tokio::test]
    async fn unknown_is_acknowledged_and_left_to_the_index() {
        let w = world().await;
        w.gateway.script(FakeFault::LoseResponse);
        let resp = handle(&w.f, LambdaEvent::new(batch(), Context::default())).await;
        assert!(failed(&resp).is_empty());
        let op = w
            .store
            .all()
            .into_iter()
            .find(|op| op.order_id.as_str() == "ord-1001")
            .unwrap();
        assert_eq!(op.status, OperationStatus::Unknown);
        assert!(op.next_due_at.is_some(), "scheduled in the unknown index");
    }

    #[tokio::test]
    async fn a_rejected_create_goes_to_review_loudly() {
        let w = world().await;
        w.gateway.script(FakeFault::Rejected);
        handle(&w.f, LambdaEvent::new(batch(), Context::default())).await;
        assert_eq!(
            w.metrics.sum(
                "SentToReview",
                &[("Function", FUNCTION), ("ReasonClass", "rejected")]
            ),
            1.0
        );
        let in_review: Vec<_> = w
            .store
            .all()
            .into_iter()
            .filter(|op| op.review.is_some())
            .collect();
        assert_eq!(in_review.len(), 1);
        assert_eq!(in_review[0].order_id.as_str(), "ord-1001");
    }

    // --- Concurrency: groups overlap, a group never does. ---------------------------------------
    //
    // No sleeps and no clocks: the ports below write to one shared timeline and hand control back
    // to the executor (`yield_now`) in the middle of each call, so whatever else is ready runs in
    // between. The timeline's order is then the proof: with groups run one after another it would
    // show no other group's event inside a call; with a group's messages run concurrently it would
    // show a second message of the group starting before the first ended.

    /// Events in the order they happened.
    #[derive(Default, Clone)]
    struct Timeline(Arc<std::sync::Mutex<Vec<String>>>);

    impl Timeline {
        fn push(&self, event: String) {
            self.0.lock().unwrap().push(event);
        }
        fn events(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
        fn position(&self, event: &str) -> Option<usize> {
            self.events().iter().position(|e| e == event)
        }
        /// The events whose text starts with `prefix`, in order.
        fn of(&self, prefix: &str) -> Vec<String> {
            self.events()
                .into_iter()
                .filter(|e| e.starts_with(prefix))
                .collect()
        }
    }

    /// Gives every other ready future a turn, a bounded number of times.
    async fn let_others_run() {
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }

    /// A gateway that logs `create <order> start|end` around the fake's answer, lets others run
    /// in the middle, and can hold a create until another order's create has started (bounded:
    /// if that never happens, it goes on and the timeline shows it).
    struct TimedGateway {
        inner: FakeGateway,
        timeline: Timeline,
        order_of: HashMap<OperationId, String>,
        /// order -> the order whose create must start first.
        wait_for: HashMap<String, String>,
        /// Orders whose create is answered 429 (nothing happened: retry later).
        rate_limited: HashSet<String>,
    }

    impl StripeAccount for TimedGateway {
        fn livemode(&self) -> bool {
            false
        }
    }

    #[async_trait::async_trait]
    impl PaymentIntents for TimedGateway {
        async fn create(
            &self,
            req: &charge_once::ports::CreatePaymentIntent,
        ) -> Result<charge_core::outcome::PaymentIntent, charge_core::outcome::GatewayError>
        {
            let order = self.order_of[&req.operation_id].clone();
            self.timeline.push(format!("create {order} start"));
            if let Some(other) = self.wait_for.get(&order) {
                let started = format!("create {other} start");
                for _ in 0..1000 {
                    if self.timeline.position(&started).is_some() {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            }
            let_others_run().await;
            let answer = if self.rate_limited.contains(&order) {
                Err(charge_core::outcome::GatewayError::RetryLater {
                    cause: charge_core::outcome::RetryCause::RateLimited,
                    detail: "429".into(),
                })
            } else {
                self.inner.create(req).await
            };
            self.timeline.push(format!("create {order} end"));
            answer
        }
        async fn retrieve(
            &self,
            id: &charge_core::domain::PaymentIntentId,
        ) -> Result<charge_core::outcome::PaymentIntent, charge_core::outcome::GatewayError>
        {
            self.inner.retrieve(id).await
        }
        async fn search_by_operation(
            &self,
            operation_id: &OperationId,
        ) -> Result<Vec<charge_core::outcome::PaymentIntent>, charge_core::outcome::GatewayError>
        {
            self.inner.search_by_operation(operation_id).await
        }
        async fn cancel(
            &self,
            req: &charge_once::ports::CancelPaymentIntent,
        ) -> Result<charge_core::outcome::PaymentIntent, charge_core::outcome::GatewayError>
        {
            self.inner.cancel(req).await
        }
    }

    impl StripeRefunds for TimedGateway {}

    impl charge_once::ports::StripeDisputes for TimedGateway {}

    impl CreatedLists for TimedGateway {}

    /// A DLQ that logs `park <message id> start|end` and lets others run in between.
    struct TimedDeadLetters {
        inner: MemoryDeadLetters,
        timeline: Timeline,
    }

    #[async_trait::async_trait]
    impl DeadLetterQueue for TimedDeadLetters {
        async fn park(&self, letter: &DeadLetter) -> Result<(), charge_once::ports::QueueError> {
            self.timeline
                .push(format!("park {} start", letter.message_id));
            let_others_run().await;
            let parked = self.inner.park(letter).await;
            self.timeline
                .push(format!("park {} end", letter.message_id));
            parked
        }
    }

    const ORDERS: [(&str, &str); 3] = [
        ("ord-a", "aaaaaaaa-0000-4000-8000-000000000001"),
        ("ord-b", "bbbbbbbb-0000-4000-8000-000000000002"),
        ("ord-c", "cccccccc-0000-4000-8000-000000000003"),
    ];

    /// A world over [`ORDERS`] whose gateway and DLQ write to one timeline.
    async fn timed_world(wait_for: &[(&str, &str)], rate_limited: &[&str]) -> (World, Timeline) {
        let mut w = world_with(&ORDERS).await;
        let timeline = Timeline::default();
        let gateway = TimedGateway {
            inner: FakeGateway::new(),
            timeline: timeline.clone(),
            order_of: ORDERS
                .iter()
                .map(|(order, id)| (OperationId::parse(id).unwrap(), (*order).to_owned()))
                .collect(),
            wait_for: wait_for
                .iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect(),
            rate_limited: rate_limited.iter().map(|o| (*o).to_owned()).collect(),
        };
        w.f.charge.gateway = Arc::new(gateway);
        w.f.dead_letters = Arc::new(TimedDeadLetters {
            inner: MemoryDeadLetters::new(),
            timeline: timeline.clone(),
        });
        (w, timeline)
    }

    /// A record of `group` with this message id: a charge message for `order`'s operation, or a
    /// poison body.
    fn record(message_id: &str, group: &str, body: Body) -> SqsMessage {
        let mut r = batch().records[0].clone();
        r.message_id = Some(message_id.into());
        r.attributes.insert("MessageGroupId".into(), group.into());
        r.body = Some(match body {
            Body::Charge(order) => {
                let id = ORDERS.iter().find(|(o, _)| *o == order).unwrap().1;
                format!(r#"{{"v":1,"operation_id":"{id}","order_id":"{order}","kind":"charge"}}"#)
            }
            Body::Poison => "{not json".into(),
        });
        r
    }

    enum Body {
        Charge(&'static str),
        Poison,
    }

    fn event_of(records: Vec<SqsMessage>) -> LambdaEvent<SqsEvent> {
        let mut event = SqsEvent::default();
        event.records = records;
        LambdaEvent::new(event, Context::default())
    }

    #[tokio::test]
    async fn two_groups_of_one_batch_overlap_in_time() {
        // ord-a's Stripe call cannot finish before ord-b's has started: run one after another,
        // ord-a would give up waiting and end first.
        let (w, timeline) = timed_world(&[("ord-a", "ord-b")], &[]).await;
        let resp = handle(
            &w.f,
            event_of(vec![
                record("a1", "ord-a", Body::Charge("ord-a")),
                record("b1", "ord-b", Body::Charge("ord-b")),
            ]),
        )
        .await;
        assert!(failed(&resp).is_empty());
        let at = |e: &str| timeline.position(e).unwrap_or_else(|| panic!("no {e:?}"));
        assert!(
            at("create ord-a start") < at("create ord-b start")
                && at("create ord-b start") < at("create ord-a end"),
            "ord-b's call started while ord-a's was in flight: {:?}",
            timeline.events()
        );
        assert_eq!(
            statuses(&w),
            [
                ("ord-a".to_owned(), OperationStatus::Succeeded),
                ("ord-b".to_owned(), OperationStatus::Succeeded),
                ("ord-c".to_owned(), OperationStatus::Pending),
            ]
        );
    }

    fn statuses(w: &World) -> Vec<(String, OperationStatus)> {
        let mut all: Vec<_> = w
            .store
            .all()
            .into_iter()
            .map(|op| (op.order_id.as_str().to_owned(), op.status))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    #[tokio::test]
    async fn one_group_runs_in_batch_order_while_others_interleave() {
        let (w, timeline) = timed_world(&[], &[]).await;
        // Group ord-a: poison, the charge, a duplicate of it, poison again; ord-b's and ord-c's
        // messages in between.
        let resp = handle(
            &w.f,
            event_of(vec![
                record("a1", "ord-a", Body::Poison),
                record("b1", "ord-b", Body::Charge("ord-b")),
                record("a2", "ord-a", Body::Charge("ord-a")),
                record("c1", "ord-c", Body::Poison),
                record("a3", "ord-a", Body::Charge("ord-a")),
                record("b2", "ord-b", Body::Poison),
                record("a4", "ord-a", Body::Poison),
                record("c2", "ord-c", Body::Charge("ord-c")),
            ]),
        )
        .await;
        assert!(failed(&resp).is_empty());
        // What each group did, in the order it happened: each call ends before the group's next
        // one starts, in batch order (a3, the duplicate, finds the operation settled: no call).
        let group = |events: &[&str]| -> Vec<String> {
            timeline
                .events()
                .into_iter()
                .filter(|e| events.iter().any(|id| e.contains(id)))
                .collect()
        };
        assert_eq!(
            group(&["a1 ", "a2 ", "a3 ", "a4 ", "ord-a "]),
            [
                "park a1 start",
                "park a1 end",
                "create ord-a start",
                "create ord-a end",
                "park a4 start",
                "park a4 end"
            ]
        );
        assert_eq!(
            group(&["b1 ", "b2 ", "ord-b "]),
            [
                "create ord-b start",
                "create ord-b end",
                "park b2 start",
                "park b2 end"
            ]
        );
        assert_eq!(
            group(&["c1 ", "c2 ", "ord-c "]),
            [
                "park c1 start",
                "park c1 end",
                "create ord-c start",
                "create ord-c end"
            ]
        );
        // And the groups did run together: other groups' events fall inside ord-a's first call.
        let at = |e: &str| timeline.position(e).unwrap();
        let inside = &timeline.events()[at("park a1 start")..at("park a1 end")];
        assert!(
            inside
                .iter()
                .any(|e| e.contains("ord-b") || e.contains("c1")),
            "{:?}",
            timeline.events()
        );
        assert_eq!(
            timeline.of("park").len(),
            2 * 4,
            "four poison messages parked"
        );
        assert_eq!(
            statuses(&w),
            [
                ("ord-a".to_owned(), OperationStatus::Succeeded),
                ("ord-b".to_owned(), OperationStatus::Succeeded),
                ("ord-c".to_owned(), OperationStatus::Succeeded),
            ]
        );
    }

    #[tokio::test]
    async fn a_failure_fails_the_rest_of_its_group_while_other_groups_finish() {
        // ord-a's first message gets a 429 while ord-b's call is in flight.
        let (w, timeline) = timed_world(&[("ord-a", "ord-b")], &["ord-a"]).await;
        let resp = handle(
            &w.f,
            event_of(vec![
                record("a1", "ord-a", Body::Charge("ord-a")),
                record("b1", "ord-b", Body::Charge("ord-b")),
                record("a2", "ord-a", Body::Charge("ord-a")),
                record("c1", "ord-c", Body::Charge("ord-c")),
                record("a3", "ord-a", Body::Poison),
                record("b2", "ord-b", Body::Charge("ord-b")),
            ]),
        )
        .await;
        // ord-a's first message and every later one of its group (even the poison one, which is
        // not parked out of turn), in batch order; ord-b and ord-c go on.
        assert_eq!(failed(&resp), ["a1", "a2", "a3"]);
        assert!(timeline.position("park a3 start").is_none());
        assert_eq!(timeline.of("create ord-a").len(), 2, "one call, no retry");
        assert_eq!(
            statuses(&w),
            [
                ("ord-a".to_owned(), OperationStatus::Pending),
                ("ord-b".to_owned(), OperationStatus::Succeeded),
                ("ord-c".to_owned(), OperationStatus::Succeeded),
            ]
        );
    }

    #[test]
    fn a_batch_splits_into_its_groups_in_order() {
        let mut records = vec![
            record("a1", "ord-a", Body::Poison),
            record("b1", "ord-b", Body::Poison),
            record("a2", "ord-a", Body::Poison),
            record("x", "unused", Body::Poison),
        ];
        records[3].attributes.remove("MessageGroupId");
        records.push(record("b2", "ord-b", Body::Poison));
        let groups = message_groups(&records);
        assert_eq!(
            groups,
            [
                MessageGroup {
                    id: Some("ord-a".into()),
                    records: vec![0, 2]
                },
                MessageGroup {
                    id: Some("ord-b".into()),
                    records: vec![1, 4]
                },
                MessageGroup {
                    id: None,
                    records: vec![3]
                },
            ]
        );
    }

    /// The parse before the typed-first order (the version read from a `Value` of every body):
    /// the reference the reader is held to.
    fn parse_value_first(body: &str) -> Result<OperationMessage, Poison> {
        let version = serde_json::from_str::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v.get("v").and_then(serde_json::Value::as_u64));
        let unsupported = |v: u64| Poison {
            reason: "unsupported_version",
            detail: format!("unsupported message version {v}"),
        };
        if let Some(v) = version.filter(|v| !OperationMessage::known_version(*v)) {
            return Err(unsupported(v));
        }
        let message: OperationMessage = serde_json::from_str(body).map_err(|e| Poison {
            reason: "unparseable",
            detail: format!("not a charge message: {e}"),
        })?;
        // Each kind has its version: a charge is 1, a refund 2.
        if message.v != OperationMessage::version_of(&message.kind) {
            return Err(unsupported(u64::from(message.v)));
        }
        Ok(message)
    }

    /// The typed message is read first and a body's version only when it is not this
    /// version's: every answer (message, reason, detail) is the value-first parse's.
    #[test]
    fn a_body_gets_the_same_answer_read_typed_first() {
        let op = "6f1c2a4e-8a3b-4c5d-9e0f-112233445566";
        let fields = format!(r#""operation_id":"{op}","order_id":"ord-1","kind":"charge""#);
        let bodies = [
            format!(r#"{{"v":1,{fields}}}"#),
            format!(r#"{{{fields},"v":1}}"#),
            format!(r#"{{"v":2,{fields}}}"#),
            format!(r#"{{"v":4294967296,{fields}}}"#),
            format!(r#"{{"v":1.0,{fields}}}"#),
            format!(r#"{{"v":"1",{fields}}}"#),
            format!(r#"{{"v":-1,{fields}}}"#),
            format!(r#"{{"v":1,"v":2,{fields}}}"#),
            format!(r#"{{"v":1,{fields},"extra":[1,2]}}"#),
            format!(r#"{{"v":1,{fields},"kind":"refund"}}"#),
            format!(
                r#"{{"v":2,"operation_id":"{op}","order_id":"ord-1","kind":"refund","refund_id":"r-1"}}"#
            ),
            format!(
                r#"{{"v":1,"operation_id":"{op}","order_id":"ord-1","kind":"refund","refund_id":"r-1"}}"#
            ),
            format!(r#"{{"v":2,"operation_id":"{op}","order_id":"ord-1","kind":"refund"}}"#),
            format!(r#"{{"v":1,{fields},"refund_id":"r-1"}}"#),
            format!(
                r#"{{"v":2,"operation_id":"{op}","order_id":"ord-1","kind":"refund","refund_id":"a b"}}"#
            ),
            r#"{"v":3}"#.to_owned(),
            r#"{"v":1}"#.to_owned(),
            r#"{"operation_id":"not-a-uuid","order_id":"ord-1","kind":"charge","v":1}"#.to_owned(),
            format!(r#"[1,"{op}","ord-1","charge"]"#),
            "{not json".to_owned(),
            String::new(),
            "null".to_owned(),
            "7".to_owned(),
        ];
        for body in &bodies {
            let mut r = batch().records[0].clone();
            r.body = Some(body.clone());
            let new = parse(&r).map_err(|p| (p.reason, p.detail));
            let old = parse_value_first(body).map_err(|p| (p.reason, p.detail));
            assert_eq!(new, old, "{body}");
        }
        // Read from an array too (serde's sequence form), the version is checked against the
        // kind: a version-2 charge is refused as such.
        let mut r = batch().records[0].clone();
        r.body = Some(format!(r#"[2,"{op}","ord-1","charge"]"#));
        assert!(parse(&r).is_err_and(|p| p.reason == "unsupported_version"));
        // A refund's message (version 2) is read as the refund's key.
        r.body = Some(format!(
            r#"{{"v":2,"operation_id":"{op}","order_id":"ord-1","kind":"refund","refund_id":"r-1"}}"#
        ));
        let Ok(message) = parse(&r) else {
            panic!("a refund message is read");
        };
        assert_eq!(message.key().kind.sort_key(), "refund#r-1");
    }

    #[test]
    fn sample_batch_deserialises() {
        let event = batch();
        assert_eq!(event.records.len(), 3);
        assert_eq!(
            event.records[0]
                .attributes
                .get("MessageGroupId")
                .map(String::as_str),
            Some("ord-1001")
        );
        assert!(parse(&event.records[0]).is_ok());
        assert!(parse(&event.records[1]).is_err_and(|p| p.reason == "unparseable"));
    }
}
