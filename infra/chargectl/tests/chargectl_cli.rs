//! `chargectl` end to end: the real binary against DynamoDB and SQS on moto (run through
//! `infra/local/with-stack.sh`, which exports `AWS_ENDPOINT_URL`, dummy credentials and a region).
//!
//! Each test builds its own fresh table (and queue), fills it through the store's own writes —
//! created, claimed, recorded unknown, flagged for review, settled — then runs the binary and checks
//! its output, its exit code and what is (or is not) in the table and on the queue afterwards.

use charge_core::operation::{LeaseToken, Operation, OperationStatus, Review};
use charge_core::time::{Clock as _, SystemClock, Timestamp};
use charge_once::ports::{
    CreatePaymentIntent, CreateRefund, OperationCreates, OperationLeases, OperationReads,
    PaymentIntents, StripeRefunds, UnknownIndex,
};
use std::process::{Command, Output};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use charge_core::{
    store::{Claim, OutcomeRecord},
    store_rules::{ChargeClaim, CreatedBeside},
};
use charge_once::adapters::dynamodb::DynamoStore;
use charge_once::testing;
use serde_json::Value;
use testkit::aws::{fresh_fifo_queue, fresh_store, sdk_config, unique};
use testkit::store_contract::operation;
use testkit::stripe::StripeSide;

const HOUR: Duration = Duration::from_secs(3600);

/// Runs the binary with `args`; `TABLE_NAME`/`QUEUE_URL` from the caller's environment never leak in.
fn chargectl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chargectl"))
        .args(args)
        .env_remove("TABLE_NAME")
        .env_remove("QUEUE_URL")
        .env_remove("STRIPE_SECRET_ARN")
        .env_remove("STRIPE_API_BASE")
        .output()
        .expect("run chargectl")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn assert_exit(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "exit status\n--- stdout\n{}\n--- stderr\n{}",
        stdout(o),
        stderr(o)
    );
    assert!(!stderr(o).contains("panicked"), "{}", stderr(o));
}

/// A table with one operation in each state the CLI distinguishes.
struct Fixture {
    store: DynamoStore,
    /// `pending`, created 2 h ago, never attempted.
    pending: Operation,
    /// `unknown` after a timeout, created 30 min ago.
    unknown: Operation,
    /// `unknown` and flagged for review, created 26 h ago.
    review: Operation,
    /// `succeeded`, created 3 h ago.
    settled: Operation,
}

impl Fixture {
    async fn new() -> Self {
        let store = fresh_store().await;
        let now = SystemClock.now();
        let tag = unique("o");
        let pending = create(&store, &format!("{tag}-pending"), now.minus(2 * HOUR)).await;
        let unknown = create(
            &store,
            &format!("{tag}-unknown"),
            now.minus(Duration::from_secs(1800)),
        )
        .await;
        let unknown = attempt(
            &store,
            &unknown,
            OperationStatus::Unknown,
            Some("timeout after 10s waiting for api.stripe.com (connection reset by peer)"),
            None,
        )
        .await;
        let review = create(&store, &format!("{tag}-review"), now.minus(26 * HOUR)).await;
        let review = attempt(
            &store,
            &review,
            OperationStatus::Unknown,
            Some("stripe 500"),
            Some("search by operation_id found 0 PaymentIntents"),
        )
        .await;
        let settled = create(&store, &format!("{tag}-settled"), now.minus(3 * HOUR)).await;
        let settled = attempt(&store, &settled, OperationStatus::Succeeded, None, None).await;
        Self {
            store,
            pending,
            unknown,
            review,
            settled,
        }
    }

    fn table(&self) -> &str {
        self.store.table()
    }

    /// `chargectl --table <fresh table> <args>`.
    fn run(&self, args: &[&str]) -> Output {
        let mut all = vec!["--table", self.table()];
        all.extend_from_slice(args);
        chargectl(&all)
    }

    async fn get(&self, op: &Operation) -> Operation {
        self.store.get(&op.key()).await.unwrap().expect("record")
    }

    async fn snapshot(&self) -> Vec<Operation> {
        let mut all = Vec::new();
        for op in [&self.pending, &self.unknown, &self.review, &self.settled] {
            all.push(self.get(op).await);
        }
        all
    }
}

async fn create(store: &DynamoStore, order: &str, created: Timestamp) -> Operation {
    let op = operation(order, 1250, created);
    store.create_if_absent(&op).await.unwrap();
    op
}

async fn claim(store: &DynamoStore, op: &Operation) -> (LeaseToken, Operation) {
    let now = SystemClock.now();
    let token = LeaseToken::new_random();
    let mut req = charge_core::testing::claim_request(op, token, now);
    req.lease.expires_at = now.plus(Duration::from_secs(600));
    match store.claim(&req).await.unwrap() {
        Claim::Claimed(op) => (token, op),
        other => panic!("claim: {other:?}"),
    }
}

/// One attempt through the store: claim, then record `status`.
async fn attempt(
    store: &DynamoStore,
    op: &Operation,
    status: OperationStatus,
    last_error: Option<&str>,
    review: Option<&str>,
) -> Operation {
    let (token, _) = claim(store, op).await;
    let now = SystemClock.now();
    let rec = OutcomeRecord {
        external_id: status
            .is_settled()
            .then(|| charge_core::domain::PaymentIntentId::parse("pi_settled_1").unwrap()),
        last_error: last_error.map(str::to_owned),
        review: review.map(|reason| Review {
            reason: reason.into(),
            flagged_at: now,
        }),
        ..charge_core::testing::outcome(op, token, status, now)
    };
    testing::record(store, &rec).await
}

fn json_lines(o: &Output) -> Vec<Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknowns_lists_automatic_work_oldest_first_and_review_apart() {
    let f = Fixture::new().await;

    let out = f.run(&["unknowns"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "header + pending + unknown:\n{text}");
    for column in [
        "OPERATION",
        "ORDER",
        "AMOUNT",
        "STATUS",
        "AGE",
        "ATTEMPTS",
        "LAST ERROR",
        "REVIEW REASON",
    ] {
        assert!(lines[0].contains(column), "{column}");
    }
    // Oldest first: pending (2 h) before unknown (30 min).
    assert!(lines[1].starts_with(&f.pending.operation_id.to_string()));
    assert!(lines[1].contains("1250 usd") && lines[1].contains("pending"));
    assert!(
        lines[1].contains("2h0m") || lines[1].contains("2h1m"),
        "{}",
        lines[1]
    );
    assert!(lines[2].starts_with(&f.unknown.operation_id.to_string()));
    assert!(lines[2].contains("unknown") && lines[2].contains("timeout after 10s"));
    assert!(!lines[2].contains("connection reset by peer"), "truncated");
    assert!(!text.contains(&f.review.operation_id.to_string()));
    assert!(!text.contains(&f.settled.operation_id.to_string()));

    let out = f.run(&["unknowns", "--review"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.contains(&f.review.operation_id.to_string()));
    assert!(text.contains("search by operation_id found 0 PaymentIntents"));
    assert!(text.contains("1d2h"), "{text}");

    let out = f.run(&["unknowns", "--limit", "1"]);
    assert_exit(&out, 0);
    assert_eq!(stdout(&out).lines().count(), 2);
    assert!(stdout(&out).contains(&f.pending.operation_id.to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknowns_json_lines_have_the_keys_and_older_than_filters() {
    let f = Fixture::new().await;

    let out = f.run(&["unknowns", "--json"]);
    assert_exit(&out, 0);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2);
    for line in &lines {
        for key in [
            "operation_id",
            "order_id",
            "amount",
            "currency",
            "status",
            "age_secs",
            "attempts",
            "last_error",
            "review_reason",
            "created_at",
            "next_due_at",
            "external_id",
            "redrives",
        ] {
            assert!(line.get(key).is_some(), "{key} in {line}");
        }
    }
    assert_eq!(lines[0]["operation_id"], f.pending.operation_id.to_string());
    assert_eq!(lines[0]["order_id"], f.pending.order_id.as_str());
    assert_eq!(lines[0]["amount"], 1250);
    assert_eq!(lines[0]["currency"], "usd");
    assert_eq!(lines[0]["status"], "pending");
    assert_eq!(lines[0]["attempts"], 0);
    assert_eq!(lines[0]["created_at"], f.pending.created_at.to_rfc3339());
    assert!(lines[0]["age_secs"].as_u64().unwrap() >= 7200);
    assert_eq!(lines[1]["status"], "unknown");
    assert_eq!(lines[1]["attempts"], 1);
    assert!(lines[1]["last_error"]
        .as_str()
        .unwrap()
        .ends_with("(connection reset by peer)"));

    let out = f.run(&["unknowns", "--json", "--older-than", "1h"]);
    assert_exit(&out, 0);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["operation_id"], f.pending.operation_id.to_string());

    let out = f.run(&["unknowns", "--json", "--review", "--older-than", "1d"]);
    assert_exit(&out, 0);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["operation_id"], f.review.operation_id.to_string());
    assert_eq!(
        lines[0]["review_reason"],
        "search by operation_id found 0 PaymentIntents"
    );

    let out = f.run(&["unknowns", "--older-than", "3d"]);
    assert_exit(&out, 0);
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).contains("no unsettled operations"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_by_order_id_and_by_operation_id() {
    let f = Fixture::new().await;
    let id = f.review.operation_id.to_string();

    let by_order = f.run(&["show", f.review.order_id.as_str()]);
    assert_exit(&by_order, 0);
    let by_id = f.run(&["show", &id]);
    assert_exit(&by_id, 0);
    let text = stdout(&by_id);
    for needle in [
        id.as_str(),
        f.review.order_id.as_str(),
        "unknown",
        "1250 usd",
        "cus_contract",
        "pm_card_visa",
        "stripe 500",
        "search by operation_id found 0 PaymentIntents",
        &f.review.created_at.to_rfc3339(),
        &format!("payment-op:{id}"),
    ] {
        assert!(text.contains(needle), "{needle} in\n{text}");
    }
    // Same record either way (only the "ago" of the age may differ by a second).
    let strip_age = |s: String| -> Vec<String> {
        s.lines()
            .filter(|l| !l.starts_with("created at"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(strip_age(stdout(&by_order)), strip_age(text));

    let out = f.run(&["show", "--json", f.settled.order_id.as_str()]);
    assert_exit(&out, 0);
    let json: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(json["operation_id"], f.settled.operation_id.to_string());
    assert_eq!(json["status"], "succeeded");
    assert_eq!(json["external_id"], "pi_settled_1");
    assert_eq!(json["created_at"], f.settled.created_at.to_rfc3339());
    assert_eq!(json["next_due_at"], Value::Null);

    let missing = f.run(&["show", "no-such-order"]);
    assert_exit(&missing, 1);
    assert_eq!(stdout(&missing), "");
    assert!(stderr(&missing).contains("no operation for order or operation id no-such-order"));
    let missing = f.run(&["show", &unique_op_id()]);
    assert_exit(&missing, 1);
}

/// An order declined and charged again: `show <order>` shows its latest attempt (what refunds
/// act on) and lists every attempt, one line each, with which one paid (`--json`: `attempts`,
/// `paid_attempt`); `unknowns` names a later attempt `charge_attempt 2`. The twin: an order
/// charged once shows as before, `attempts` its one attempt, `paid_attempt` 1, no attempts
/// section in the text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_lists_an_order_s_attempts_and_unknowns_names_a_later_one() {
    use charge_core::domain::{OperationId, OperationKind};
    let f = Fixture::new().await;
    let now = SystemClock.now();
    let order = format!("{}-retried", unique("o"));
    let mut head = operation(&order, 1250, now.minus(HOUR));
    head.status = OperationStatus::Failed;
    head.external_id = Some(charge_core::domain::PaymentIntentId::parse("pi_declined").unwrap());
    head.last_error = Some("card_declined".into());
    head.first_attempted_at = Some(now.minus(HOUR));
    head.next_due_at = None;
    head.settled_at = Some(now.minus(HOUR));
    head.params.charge_state_mut().unwrap().latest_attempt = Some(2);
    let second = Operation {
        kind: OperationKind::Charge(2),
        operation_id: OperationId::new_random(),
        ..operation(&order, 1250, now.minus(Duration::from_secs(600)))
    };
    f.store.create_if_absent(&head).await.unwrap();
    f.store.create_if_absent(&second).await.unwrap();
    let second = attempt(
        &f.store,
        &second,
        OperationStatus::Unknown,
        Some("stripe 500"),
        None,
    )
    .await;

    let listed = f.run(&["unknowns", "--json"]);
    assert_exit(&listed, 0);
    let line = json_lines(&listed)
        .into_iter()
        .find(|l| l["order_id"] == order.as_str())
        .expect("the second attempt is unsettled");
    assert_eq!(
        (line["kind"].as_str(), line["charge_attempt"].as_u64()),
        (Some("charge"), Some(2))
    );
    let table = stdout(&f.run(&["unknowns"]));
    assert!(table.contains("charge_attempt 2"), "{table}");
    let first_line = json_lines(&listed)
        .into_iter()
        .find(|l| l["order_id"] == f.unknown.order_id.as_str())
        .unwrap();
    assert!(first_line.get("charge_attempt").is_none(), "{first_line}");

    let settled = attempt(&f.store, &second, OperationStatus::Succeeded, None, None).await;
    let out = f.run(&["show", "--json", &order]);
    assert_exit(&out, 0);
    let json: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(json["operation_id"], settled.operation_id.to_string());
    assert_eq!(json["paid_attempt"], 2);
    let attempts = json["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(
        (
            attempts[0]["attempt"].as_u64(),
            attempts[0]["status"].as_str(),
            attempts[0]["last_error"].as_str()
        ),
        (Some(1), Some("failed"), Some("card_declined"))
    );
    assert_eq!(
        (
            attempts[1]["attempt"].as_u64(),
            attempts[1]["status"].as_str(),
            attempts[1]["payment_intent"].as_str()
        ),
        (Some(2), Some("succeeded"), Some("pi_settled_1"))
    );
    let text = stdout(&f.run(&["show", &order]));
    assert!(text.contains("attempts (2, paid by attempt 2):"), "{text}");
    assert!(
        text.contains("attempt 1  failed  pm_card_visa  pi_declined  card_declined"),
        "{text}"
    );
    assert!(
        text.contains("attempt 2  succeeded  pm_card_visa  pi_settled_1"),
        "{text}"
    );

    let once = f.run(&["show", "--json", f.settled.order_id.as_str()]);
    let json: Value = serde_json::from_str(stdout(&once).trim()).unwrap();
    assert_eq!(json["paid_attempt"], 1);
    assert_eq!(json["attempts"].as_array().map(Vec::len), Some(1));
    let text = stdout(&f.run(&["show", f.settled.order_id.as_str()]));
    assert!(!text.contains("attempts ("), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_prints_an_unreadable_record_raw_with_the_parse_error() {
    use charge_once::adapters::dynamodb::item::attr_n;
    let f = Fixture::new().await;
    // The pending record (still in the unknown index) with an amount this release refuses,
    // written behind the store's back.
    let mut item = f.store.raw_item(&f.pending.key()).await.unwrap().unwrap();
    item.insert("amount".into(), attr_n("-5"));
    aws_sdk_dynamodb::Client::new(&sdk_config().await)
        .put_item()
        .table_name(f.table())
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
    let before = f.store.raw_item(&f.pending.key()).await.unwrap();

    let out = f.run(&["show", f.pending.order_id.as_str()]);
    assert_exit(&out, 1);
    let text = stdout(&out);
    let key = format!("ORDER#{}/charge", f.pending.order_id);
    for needle in [
        format!("record {key} cannot be read"),
        "malformed item: amount".to_owned(),
        "\"N\": \"-5\"".to_owned(),
        f.pending.operation_id.to_string(),
    ] {
        assert!(text.contains(&needle), "{needle} in\n{text}");
    }
    assert!(
        stderr(&out).contains("UnreadableRecords"),
        "{}",
        stderr(&out)
    );

    // By operation id, as JSON: one object with the key, the reason and the item as stored.
    let out = f.run(&["show", "--json", &f.pending.operation_id.to_string()]);
    assert_exit(&out, 1);
    let json: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(json["unreadable"], true);
    assert_eq!(json["key"], key.as_str());
    assert!(json["reason"].as_str().unwrap().contains("amount"));
    assert_eq!(json["item"]["amount"]["N"], "-5");
    assert_eq!(json["item"]["status"]["S"], "pending");
    // Showing it changed nothing; the readable records still show.
    assert_eq!(f.store.raw_item(&f.pending.key()).await.unwrap(), before);
    assert_exit(&f.run(&["show", f.unknown.order_id.as_str()]), 0);
}

/// Writes `attribute = value` into `op`'s stored item behind the store's back (a hand edit).
async fn hand_edit(f: &Fixture, op: &Operation, attribute: &str, value: AttributeValue) {
    let mut item = f.store.raw_item(&op.key()).await.unwrap().unwrap();
    item.insert(attribute.into(), value);
    aws_sdk_dynamodb::Client::new(&sdk_config().await)
        .put_item()
        .table_name(f.table())
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
    assert!(f.store.get(&op.key()).await.is_err(), "unreadable now");
}

/// A record this release cannot read still waits where the index puts it, so `unknowns` lists it
/// there, with its key and why, after the readable ones: in review (an operator's raw
/// `update-item` wrote `review_flagged_at` as a string) and in automatic work (an amount this
/// release refuses). Before, both lists dropped it, and `--review` said "no operations in review".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknowns_lists_a_record_it_cannot_read_with_the_reason() {
    use charge_once::adapters::dynamodb::item::{attr_n, attr_s};
    let f = Fixture::new().await;
    hand_edit(&f, &f.review, "review_flagged_at", attr_s("yesterday")).await;
    hand_edit(&f, &f.pending, "amount", attr_n("-5")).await;
    let key = |op: &Operation| format!("ORDER#{}/charge", op.order_id);

    let out = f.run(&["unknowns", "--review"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "header + the unreadable one:\n{text}");
    assert!(lines[0].starts_with("UNREADABLE RECORD"), "{text}");
    assert!(lines[1].starts_with(&key(&f.review)), "{text}");
    assert!(
        lines[1].contains("review_flagged_at: not a number"),
        "{text}"
    );
    assert!(
        stderr(&out).contains("1 record(s) this release cannot read"),
        "{}",
        stderr(&out)
    );

    // Automatic work: the readable operation as before, then the unreadable one.
    let out = f.run(&["unknowns"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        5,
        "table, a blank line, the unreadable one:\n{text}"
    );
    assert!(lines[1].starts_with(&f.unknown.operation_id.to_string()));
    assert!(lines[4].starts_with(&key(&f.pending)), "{text}");
    assert!(lines[4].contains("amount"), "{text}");

    // As JSON lines: the readable ones, then one per unreadable record, shaped as `show --json`
    // prints one (without the item).
    let out = f.run(&["unknowns", "--json"]);
    assert_exit(&out, 0);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["operation_id"], f.unknown.operation_id.to_string());
    assert_eq!(lines[1]["unreadable"], true);
    assert_eq!(lines[1]["key"], key(&f.pending));
    assert!(lines[1]["reason"].as_str().unwrap().contains("amount"));
    let out = f.run(&["unknowns", "--review", "--json"]);
    assert_exit(&out, 0);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["key"], key(&f.review));
}

/// An operation id that is in no table.
fn unique_op_id() -> String {
    charge_core::domain::OperationId::new_random().to_string()
}

/// Stripe for `resolve`: the simulator on loopback, and its key in a Secrets Manager secret on
/// moto, read by the binary the way the functions read theirs.
struct Stripe {
    side: StripeSide,
    secret_arn: String,
}

impl Stripe {
    async fn new() -> Self {
        let side = StripeSide::with_new_clock().await;
        let sm = aws_sdk_secretsmanager::Client::new(&sdk_config().await);
        let secret_arn = sm
            .create_secret()
            .name(unique("stripe-key"))
            .secret_string(stripe_sim::DEFAULT_API_KEY)
            .send()
            .await
            .unwrap()
            .arn()
            .unwrap()
            .to_owned();
        Self { side, secret_arn }
    }

    /// `--stripe-secret-arn … --stripe-api-base …`.
    fn args(&self) -> Vec<String> {
        vec![
            "--stripe-secret-arn".into(),
            self.secret_arn.clone(),
            "--stripe-api-base".into(),
            self.side.running.base_url(),
        ]
    }

    /// A PaymentIntent for `op` at the simulator, created as the charge function would (its key,
    /// its parameters), with `payment_method` instead of the operation's.
    async fn intent_for(&self, op: &Operation, payment_method: &str) -> String {
        self.create(
            CreatePaymentIntent::for_operation(op).expect("a charge operation"),
            payment_method,
        )
        .await
    }

    /// Another PaymentIntent for `op` (its metadata and amount, another idempotency key): what a
    /// second charge for the same operation looks like at Stripe.
    async fn second_intent_for(&self, op: &Operation, payment_method: &str) -> String {
        let mut req = CreatePaymentIntent::for_operation(op).expect("a charge operation");
        req.idempotency_key = charge_core::domain::OperationId::new_random().idempotency_key();
        self.create(req, payment_method).await
    }

    async fn create(&self, mut req: CreatePaymentIntent, payment_method: &str) -> String {
        req.params.payment_method =
            charge_core::domain::PaymentMethodId::parse(payment_method).unwrap();
        self.side
            .gateway()
            .create(&req)
            .await
            .expect("create")
            .id
            .to_string()
    }

    /// A declined PaymentIntent for `op` at the simulator, as the charge function's create leaves
    /// it (`requires_payment_method`: the customer could still confirm it).
    async fn declined_intent_for(&self, op: &Operation) -> String {
        let mut req = CreatePaymentIntent::for_operation(op).expect("a charge operation");
        req.params.payment_method =
            charge_core::domain::PaymentMethodId::parse("pm_card_chargeDeclined").unwrap();
        match self.side.gateway().create(&req).await {
            Err(charge_core::outcome::GatewayError::Declined {
                payment_intent_id: Some(id),
                ..
            }) => id.to_string(),
            other => panic!("not declined: {other:?}"),
        }
    }

    fn status_at_stripe(&self, pi: &str) -> String {
        self.side
            .sim
            .ledger()
            .into_iter()
            .find(|e| e.id == pi)
            .expect("in the ledger")
            .status
    }
}

impl Fixture {
    /// `chargectl --table … --stripe-… <args>`.
    fn run_with(&self, stripe: &Stripe, args: &[&str]) -> Output {
        let extra = stripe.args();
        let mut all: Vec<&str> = extra.iter().map(String::as_str).collect();
        all.extend_from_slice(args);
        self.run(&all)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_settles_once_stripe_confirms_and_appends_history_with_the_caller_arn() {
    let f = Fixture::new().await;
    let stripe = Stripe::new().await;
    let id = f.review.operation_id.to_string();
    let pi = stripe.intent_for(&f.review, "pm_card_visa").await;

    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &id,
            "--succeeded",
            &pi,
            "--note",
            "n",
            "--by",
            "alice",
        ],
    );
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains(&format!("unknown -> succeeded (PaymentIntent {pi})")),
        "{}",
        stdout(&out)
    );

    let after = f.get(&f.review).await;
    assert_eq!(after.status, OperationStatus::Succeeded);
    assert_eq!(after.external_id.as_deref(), Some(pi.as_str()));
    assert_eq!(after.next_due_at, None, "out of the unknown index");
    assert_eq!(after.history.len(), 1, "{:?}", after.history);
    let entry = &after.history[0];
    // moto answers GetCallerIdentity with its default identity: an STS/IAM ARN, not what was typed.
    assert!(entry.caller.starts_with("arn:aws:"), "{}", entry.caller);
    assert_eq!(
        (
            entry.action.as_str(),
            entry.previous_status,
            entry.new_status,
            entry.note.as_str(),
            entry.label.as_deref()
        ),
        (
            "resolve_succeeded",
            OperationStatus::Unknown,
            OperationStatus::Succeeded,
            "n",
            Some("alice")
        )
    );

    // Settled now: shown by its order id (there is no index by operation id).
    let show = f.run(&["show", f.review.order_id.as_str()]);
    assert_exit(&show, 0);
    let text = stdout(&show);
    assert!(
        text.contains(&format!(
            "{} {} (alice) resolve_succeeded: unknown -> succeeded \
             [was in review: search by operation_id found 0 PaymentIntents]: n",
            entry.at.to_rfc3339(),
            entry.caller
        )),
        "{text}"
    );
    assert_eq!(
        after.review, None,
        "the review moved into the history entry"
    );
    assert_eq!(
        entry.review.as_deref(),
        Some("search by operation_id found 0 PaymentIntents")
    );

    let review = f.run(&["unknowns", "--review"]);
    assert_exit(&review, 0);
    assert_eq!(stdout(&review), "");

    // --failed on the pending one: Stripe has nothing for it.
    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &f.pending.operation_id.to_string(),
            "--failed",
            "--note",
            "customer cancelled; no PaymentIntent in Stripe",
        ],
    );
    assert_exit(&out, 0);
    let after = f.get(&f.pending).await;
    assert_eq!(after.status, OperationStatus::Failed);
    assert_eq!(after.external_id, None);
    assert_eq!(after.history[0].label, None, "--by is optional");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_refuses_what_stripe_does_not_confirm_and_a_stale_version() {
    let f = Fixture::new().await;
    let stripe = Stripe::new().await;
    let id = f.review.operation_id.to_string();
    let before = f.get(&f.review).await;
    // Another operation's intent (metadata and amount differ), and one of this operation that
    // never completed.
    let other = stripe.intent_for(&f.unknown, "pm_card_visa").await;
    let stuck = stripe
        .intent_for(&f.review, "pm_card_sim_requiresAction")
        .await;
    for (pi, want) in [
        (other.as_str(), "has metadata.operation_id"),
        (stuck.as_str(), "is requires_action, not succeeded"),
        ("pi_doesNotExist", "cannot retrieve pi_doesNotExist"),
    ] {
        let out = f.run_with(&stripe, &["resolve", &id, "--succeeded", pi, "--note", "n"]);
        assert_exit(&out, 1);
        assert!(stderr(&out).contains(want), "{pi}: {}", stderr(&out));
        assert!(stderr(&out).contains("nothing changed"));
    }
    // --failed while Stripe shows the unknown one's intent succeeded (once search, which is not
    // read-after-write, shows it).
    stripe.side.clock.advance(HOUR);
    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &f.unknown.operation_id.to_string(),
            "--failed",
            "--note",
            "n",
        ],
    );
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains(&format!("{other} succeeded")),
        "{}",
        stderr(&out)
    );

    // The version `show` printed is stale once the record changed.
    let stale = (before.updated_at.as_millis() - 1).to_string();
    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &id,
            "--failed",
            "--note",
            "n",
            "--expect-version",
            &stale,
        ],
    );
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("is not the version you looked at"),
        "{}",
        stderr(&out)
    );
    assert_eq!(f.get(&f.review).await, before, "nothing written");

    // --force overrides with the reason recorded.
    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &f.unknown.operation_id.to_string(),
            "--failed",
            "--note",
            "refunded",
            "--force",
            "refunded by support, ticket 7",
        ],
    );
    assert_exit(&out, 0);
    let after = f.get(&f.unknown).await;
    assert_eq!(after.status, OperationStatus::Failed);
    assert!(after.history[0]
        .forced
        .as_deref()
        .unwrap()
        .starts_with("refunded by support, ticket 7"));
}

/// `op` created, claimed and recorded `unknown` with `pi` as its PaymentIntent (as after a
/// create that answered and a retrieve that did not).
async fn recorded_unknown(store: &DynamoStore, op: &Operation, pi: &str) -> Operation {
    store.create_if_absent(op).await.unwrap();
    let (token, _) = claim(store, op).await;
    let rec = OutcomeRecord {
        external_id: Some(charge_core::domain::PaymentIntentId::parse(pi).unwrap()),
        ..charge_core::testing::outcome(op, token, OperationStatus::Unknown, SystemClock.now())
    };
    testing::record(store, &rec).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_succeeded_over_another_recorded_intent_needs_force_and_keeps_the_old_id() {
    let f = Fixture::new().await;
    let stripe = Stripe::new().await;
    // The record holds pi_A; pi_B is another intent of the same operation. Both took the money.
    let two = operation(&unique("o-two"), 1250, SystemClock.now());
    let pi_a = stripe.intent_for(&two, "pm_card_visa").await;
    let pi_b = stripe.second_intent_for(&two, "pm_card_visa").await;
    let two = recorded_unknown(&f.store, &two, &pi_a).await;
    let id = two.operation_id.to_string();

    let out = f.run_with(
        &stripe,
        &["resolve", &id, "--succeeded", &pi_b, "--note", "n"],
    );
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "the operation records {pi_a}, which succeeded too: two charges"
        )),
        "{err}"
    );
    assert!(
        err.contains("nothing changed") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(f.get(&two).await, two, "nothing written");

    // Recorded but not succeeded: still refused, the recorded id named with its state.
    let held = operation(&unique("o-held"), 1250, SystemClock.now());
    let stuck = stripe.intent_for(&held, "pm_card_sim_requiresAction").await;
    let paid = stripe.second_intent_for(&held, "pm_card_visa").await;
    let held = recorded_unknown(&f.store, &held, &stuck).await;
    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &held.operation_id.to_string(),
            "--succeeded",
            &paid,
            "--note",
            "n",
        ],
    );
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains(&format!(
            "the operation records {stuck} (requires_action at Stripe), not {paid}: settling \
             replaces it"
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(f.get(&held).await, held, "nothing written");

    // --force settles as pi_B, and the history keeps pi_A.
    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &id,
            "--succeeded",
            &pi_b,
            "--note",
            "refunded pi_A",
            "--force",
            "support refunded the first charge",
        ],
    );
    assert_exit(&out, 0);
    let after = f.get(&two).await;
    assert_eq!(after.status, OperationStatus::Succeeded);
    assert_eq!(after.external_id.as_deref(), Some(pi_b.as_str()));
    let entry = after.history.last().expect("an entry");
    assert_eq!(
        entry.replaced_external_id.as_deref(),
        Some(pi_a.as_str()),
        "the history keeps the replaced id"
    );
    assert!(entry
        .forced
        .as_deref()
        .unwrap()
        .starts_with("support refunded the first charge"));
    let show = f.run(&["show", two.order_id.as_str()]);
    assert_exit(&show, 0);
    assert!(
        stdout(&show).contains(&format!("[replaced PaymentIntent {pi_a}]")),
        "{}",
        stdout(&show)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_succeeded_with_the_recorded_intent_replaces_nothing() {
    // The twin: the record holds pi_A, the operator settles it as pi_A, which search shows too.
    let f = Fixture::new().await;
    let stripe = Stripe::new().await;
    let op = operation(&unique("o-same"), 1250, SystemClock.now());
    let pi_a = stripe.intent_for(&op, "pm_card_visa").await;
    let op = recorded_unknown(&f.store, &op, &pi_a).await;
    stripe.side.clock.advance(HOUR);

    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &op.operation_id.to_string(),
            "--succeeded",
            &pi_a,
            "--note",
            "n",
        ],
    );
    assert_exit(&out, 0);
    let after = f.get(&op).await;
    assert_eq!(after.status, OperationStatus::Succeeded);
    assert_eq!(after.external_id.as_deref(), Some(pi_a.as_str()));
    let entry = after.history.last().unwrap();
    assert_eq!(entry.replaced_external_id, None);
    assert_eq!(entry.forced, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_succeeded_refuses_while_search_shows_another_succeeded_intent() {
    let f = Fixture::new().await;
    let stripe = Stripe::new().await;
    // Nothing recorded; two intents of the operation at Stripe, both succeeded.
    let op = f.pending.clone();
    let first = stripe.intent_for(&op, "pm_card_visa").await;
    let second = stripe.second_intent_for(&op, "pm_card_visa").await;
    // Search is not read-after-write: once it shows them.
    stripe.side.clock.advance(HOUR);
    let before = f.get(&op).await;
    let resolve = |first: &str, op: &Operation| {
        f.run_with(
            &stripe,
            &[
                "resolve",
                &op.operation_id.to_string(),
                "--succeeded",
                first,
                "--note",
                "n",
            ],
        )
    };
    let out = resolve(&first, &op);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains(&format!(
            "{second} succeeded for this operation too (found by search): two charges"
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(f.get(&op).await, before, "nothing written");

    // The twin in the same setup: the other intent did not take the money.
    let op = f.unknown.clone();
    let first = stripe.intent_for(&op, "pm_card_visa").await;
    stripe
        .second_intent_for(&op, "pm_card_sim_requiresAction")
        .await;
    stripe.side.clock.advance(HOUR);
    assert_exit(&resolve(&first, &op), 0);
    let after = f.get(&op).await;
    assert_eq!(after.status, OperationStatus::Succeeded);
    assert_eq!(after.external_id.as_deref(), Some(first.as_str()));
}

/// `--failed` means Stripe can never take the money: a declined intent (which the customer can
/// still confirm) refuses it and stays as it is, unless `--cancel-intent` cancels it at Stripe;
/// then the operation is failed and the customer's later confirm is refused by Stripe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_failed_requires_a_declined_intent_canceled_and_cancels_it_when_asked() {
    let f = Fixture::new().await;
    let stripe = Stripe::new().await;
    let id = f.pending.operation_id.to_string();
    let declined = stripe.declined_intent_for(&f.pending).await;
    // Search, which is not read-after-write, shows it.
    stripe.side.clock.advance(HOUR);
    let before = f.get(&f.pending).await;

    let out = f.run_with(&stripe, &["resolve", &id, "--failed", "--note", "n"]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{declined} is requires_payment_method at Stripe (found by search): declined, but the customer can still confirm it"
        )) && err.contains("--cancel-intent"),
        "{err}"
    );
    assert_eq!(f.get(&f.pending).await, before, "nothing written");
    assert_eq!(
        stripe.status_at_stripe(&declined),
        "requires_payment_method",
        "nothing canceled"
    );
    assert_eq!(stripe.side.sim.request_counts().cancel, 0);

    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &id,
            "--failed",
            "--cancel-intent",
            "--note",
            "declined; the customer will not be asked again",
        ],
    );
    assert_exit(&out, 0);
    assert!(
        stderr(&out).contains(&format!("canceled {declined} at Stripe")),
        "{}",
        stderr(&out)
    );
    assert_eq!(stripe.status_at_stripe(&declined), "canceled");
    assert_eq!(stripe.side.sim.request_counts().cancel, 1);
    let after = f.get(&f.pending).await;
    assert_eq!(after.status, OperationStatus::Failed);
    assert_eq!(
        after.history[0].forced, None,
        "confirmed by Stripe, not forced"
    );
    // The customer's later confirm of that intent no longer takes the money.
    assert!(stripe.side.sim.confirm_as_customer(&declined).is_err());
    assert_eq!(stripe.status_at_stripe(&declined), "canceled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_of_a_settled_or_leased_operation_is_refused_and_changes_nothing() {
    let f = Fixture::new().await;
    let stripe = Stripe::new().await;
    let before = f.get(&f.settled).await;
    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &f.settled.operation_id.to_string(),
            "--failed",
            "--note",
            "n",
        ],
    );
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains(&format!(
            "no operation with id {} waiting for work: it is already settled",
            f.settled.operation_id
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(stdout(&out), "");
    assert_eq!(f.get(&f.settled).await, before);

    // Someone is executing it right now.
    let pi = stripe.intent_for(&f.unknown, "pm_card_visa").await;
    let (_, leased) = claim(&f.store, &f.unknown).await;
    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &f.unknown.operation_id.to_string(),
            "--succeeded",
            &pi,
            "--note",
            "n",
        ],
    );
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("is being executed right now"),
        "{}",
        stderr(&out)
    );
    assert_eq!(f.get(&f.unknown).await, leased);

    let out = f.run_with(
        &stripe,
        &["resolve", &unique_op_id(), "--failed", "--note", "n"],
    );
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("no operation with id"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_sends_one_message_and_takes_the_operation_out_of_review() {
    let f = Fixture::new().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk_config().await);
    let queue_url = fresh_fifo_queue(&sqs).await;
    let id = f.review.operation_id.to_string();

    let out = f.run(&[
        "--queue-url",
        &queue_url,
        "redrive",
        &id,
        "--note",
        "Stripe answered again",
    ]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains(&format!("message {id}:1 sent")),
        "{}",
        stdout(&out)
    );

    let received = sqs
        .receive_message()
        .queue_url(&queue_url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    let messages = received.messages();
    assert_eq!(messages.len(), 1);
    let body: Value = serde_json::from_str(messages[0].body().unwrap()).unwrap();
    assert_eq!(body["operation_id"], id);
    assert_eq!(body["order_id"], f.review.order_id.as_str());
    assert_eq!(body["kind"], "charge");
    assert_eq!(body["v"], 1);
    let attrs = messages[0].attributes().expect("system attributes");
    assert_eq!(
        attrs
            .get(&MessageSystemAttributeName::MessageDeduplicationId)
            .map(String::as_str),
        Some(format!("{id}:1").as_str())
    );
    assert_eq!(
        attrs
            .get(&MessageSystemAttributeName::MessageGroupId)
            .map(String::as_str),
        Some(f.review.order_id.as_str())
    );

    let after = f.get(&f.review).await;
    assert_eq!(after.review, None);
    assert_eq!(after.redrives, 1);
    assert_eq!(after.status, OperationStatus::Unknown);
    assert_eq!(after.history.len(), 1);
    assert_eq!(after.history[0].action, "redrive");
    assert_eq!(after.history[0].note, "Stripe answered again");
    assert!(after.history[0].caller.starts_with("arn:aws:"));
    let review = f.run(&["unknowns", "--review"]);
    assert_exit(&review, 0);
    assert_eq!(stdout(&review), "");
    let work = f.run(&["unknowns", "--json"]);
    assert!(stdout(&work).contains(&id), "back in automatic work");

    // A settled operation is never re-driven.
    let before = f.get(&f.settled).await;
    let out = f.run(&[
        "--queue-url",
        &queue_url,
        "redrive",
        &f.settled.operation_id.to_string(),
        "--note",
        "n",
    ]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("waiting for work: it is already settled"));
    assert_eq!(f.get(&f.settled).await, before);
    let again = sqs
        .receive_message()
        .queue_url(&queue_url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    assert!(again.messages().is_empty(), "nothing more was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_exit_non_zero_and_write_nothing() {
    let f = Fixture::new().await;
    let before = f.snapshot().await;
    let id = f.review.operation_id.to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["resolve", &id, "--succeeded", "pi_x", "--by", "alice"],
            "--note",
        ),
        (vec!["unknowns", "--older-than", "5x"], "5x"),
        (
            vec![
                "resolve",
                &id,
                "--succeeded",
                "pi_x",
                "--failed",
                "--note",
                "n",
                "--by",
                "alice",
            ],
            "cannot be used with",
        ),
        (
            vec![
                "resolve",
                &id,
                "--succeeded",
                "ch_123",
                "--note",
                "n",
                "--by",
                "alice",
            ],
            "is not a PaymentIntent id",
        ),
        (
            vec!["resolve", &id, "--failed", "--note", "", "--by", "alice"],
            "must not be empty",
        ),
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
            "is not an operation id",
        ),
        (vec!["redrive", &id, "--note", "n"], "needs --queue-url"),
        (vec!["redrive", &id], "--note"),
        (
            vec!["resolve", &id, "--failed", "--note", "n"],
            "needs --stripe-secret-arn",
        ),
        (vec!["show"], "ORDER_ID|OPERATION_ID"),
        (vec!["frobnicate"], "unrecognized subcommand"),
    ];
    for (args, expect) in cases {
        let out = f.run(&args);
        assert_exit(&out, 2);
        assert!(
            stderr(&out).contains(expect),
            "{args:?}: want {expect:?} in {}",
            stderr(&out)
        );
        assert_eq!(stdout(&out), "", "{args:?}");
    }
    // No table at all.
    let out = chargectl(&["unknowns"]);
    assert_exit(&out, 2);
    assert!(stderr(&out).contains("needs --table (or TABLE_NAME)"));

    assert_eq!(f.snapshot().await, before, "nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infrastructure_errors_exit_1_with_the_error_chain() {
    // Nothing listens on port 9 of the loopback: the SDK's connection fails.
    let out = chargectl(&[
        "--table",
        "operations",
        "--endpoint-url",
        "http://127.0.0.1:9",
        "show",
        "order-1",
    ]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.starts_with(
            "chargectl: reading order order-1: operation store: GetItem on table operations: "
        ),
        "{err}"
    );
    assert!(err.lines().count() == 1, "one line: {err}");
    assert!(
        !err.contains("testing"),
        "no credential in the message: {err}"
    );
    assert_eq!(stdout(&out), "");
}

#[test]
fn without_credentials_the_error_says_none_were_found() {
    // An operator's shell with no AWS credentials anywhere: no variables, no profile files (an
    // empty HOME), instance metadata off (as on a laptop, where it does not answer).
    let home = std::env::temp_dir().join(unique("chargectl-home"));
    std::fs::create_dir_all(&home).unwrap();
    let run = |extra: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_chargectl"));
        cmd.env_clear()
            .env("HOME", &home)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .envs(extra.iter().copied())
            .args([
                "--table",
                "operations",
                "--endpoint-url",
                "http://127.0.0.1:9",
                "show",
                "order-1",
            ]);
        cmd.output().expect("run chargectl")
    };
    let out = run(&[]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("no AWS credentials found"), "{err}");
    assert!(err.contains("GetItem on table operations"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    // The twin: with credentials the same call gets as far as the network (nothing listens).
    let out = run(&[
        ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
        ("AWS_SECRET_ACCESS_KEY", "not-a-secret"),
    ]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(!err.contains("credentials"), "{err}");
    assert!(!err.contains("not-a-secret"), "{err}");
    std::fs::remove_dir_all(&home).ok();
}

/// One `aws dynamodb query` of docs/operations.md's operator section, as written there.
#[derive(Debug)]
struct DocQuery {
    index: String,
    key_condition: String,
    projection: Option<String>,
    names: Option<String>,
    /// The partition values it is run for (`DUE#0`..`DUE#7` from its `for s in ...` loop, or `REVIEW`).
    shards: Vec<String>,
    uses_now: bool,
}

/// The value after `flag` in a shell command, inside single quotes.
fn quoted_after(command: &str, flag: &str) -> Option<String> {
    let rest = &command[command.find(flag)? + flag.len()..];
    let rest = rest.trim_start().strip_prefix('\'')?;
    Some(rest[..rest.find('\'')?].to_owned())
}

/// The `aws dynamodb query` commands of the "Reading the unknown index" section, in order.
fn docs_queries() -> Vec<DocQuery> {
    let doc = include_str!("../../../docs/operations.md");
    let start = doc
        .find("## Reading the unknown index")
        .expect("docs/operations.md has the operators' section");
    let section = &doc[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut queries = Vec::new();
    let mut loop_values: Vec<String> = Vec::new();
    let mut lines = section.lines().peekable();
    while let Some(line) = lines.next() {
        let line = line.trim();
        if let Some(values) = line.strip_prefix("for s in ") {
            loop_values = values
                .trim_end_matches("; do")
                .split_whitespace()
                .map(str::to_owned)
                .collect();
        }
        if line == "done" {
            loop_values.clear();
        }
        if !line.starts_with("aws dynamodb query") {
            continue;
        }
        let mut command = line.trim_end_matches('\\').to_owned();
        let mut continued = line.ends_with('\\');
        while continued {
            let next = lines.next().expect("continuation line").trim();
            continued = next.ends_with('\\');
            command.push(' ');
            command.push_str(next.trim_end_matches('\\'));
        }
        let shards = if command.contains("DUE#$s") {
            assert!(
                !loop_values.is_empty(),
                "DUE#$s outside a for loop: {command}"
            );
            loop_values.iter().map(|s| format!("DUE#{s}")).collect()
        } else if command.contains(r#""S":"REVIEW""#) {
            vec!["REVIEW".to_owned()]
        } else {
            panic!("a query for an unknown partition: {command}")
        };
        queries.push(DocQuery {
            index: command
                .split("--index-name ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .expect("--index-name")
                .to_owned(),
            key_condition: quoted_after(&command, "--key-condition-expression")
                .expect("--key-condition-expression"),
            projection: quoted_after(&command, "--projection-expression"),
            names: quoted_after(&command, "--expression-attribute-names"),
            shards,
            uses_now: command.contains(":now"),
        });
    }
    queries
}

/// Runs `q` as the AWS CLI would (every page, every shard) and returns each operation id with the
/// status the index entry shows (the index projects it).
async fn run_doc_query(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    q: &DocQuery,
    now_ms: i64,
) -> std::collections::BTreeMap<String, String> {
    use aws_sdk_dynamodb::types::AttributeValue;
    let names: Option<std::collections::HashMap<String, String>> = q
        .names
        .as_deref()
        .map(|n| serde_json::from_str(n).expect("--expression-attribute-names is JSON"));
    let mut ids = std::collections::BTreeMap::new();
    for shard in &q.shards {
        let mut start = None;
        loop {
            let mut req = client
                .query()
                .table_name(table)
                .index_name(&q.index)
                .key_condition_expression(&q.key_condition)
                .expression_attribute_values(":s", AttributeValue::S(shard.clone()))
                .set_exclusive_start_key(start.take());
            if q.uses_now {
                req =
                    req.expression_attribute_values(":now", AttributeValue::N(now_ms.to_string()));
            }
            if let Some(p) = &q.projection {
                req = req.projection_expression(p);
            }
            if let Some(n) = &names {
                req = req.set_expression_attribute_names(Some(n.clone()));
            }
            let out = req.send().await.expect("the docs' query runs");
            for item in out.items() {
                let id = item
                    .get("operation_id")
                    .and_then(|v| v.as_s().ok())
                    .expect("operation_id in the projection");
                let status = item
                    .get("status")
                    .and_then(|v| v.as_s().ok())
                    .expect("status in the projection");
                ids.insert(id.clone(), status.clone());
            }
            match out.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
    }
    ids
}

/// Each listed operation id with its status.
fn json_ids(o: &Output) -> std::collections::BTreeMap<String, String> {
    json_lines(o)
        .iter()
        .map(|l| {
            let field = |name: &str| l[name].as_str().expect(name).to_owned();
            (field("operation_id"), field("status"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_aws_cli_queries_list_what_chargectl_lists() {
    use charge_once::ports::IndexQuery;
    let f = Fixture::new().await;
    // A burst of unknowns just recorded: each due only after its backoff (60 s).
    let mut burst = Vec::new();
    for i in 0..5 {
        let op = create(
            &f.store,
            &format!("{}-burst-{i}", unique("o")),
            SystemClock.now(),
        )
        .await;
        burst.push(
            attempt(
                &f.store,
                &op,
                OperationStatus::Unknown,
                Some("stripe 503"),
                None,
            )
            .await,
        );
    }
    let queries = docs_queries();
    assert_eq!(
        queries.len(),
        3,
        "all unsettled, due now, review: {queries:#?}"
    );
    let client = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let now = SystemClock.now();

    // 1. Every unsettled operation == `chargectl unknowns --json`, not-yet-due ones included.
    let all = run_doc_query(&client, f.table(), &queries[0], now.as_millis()).await;
    let listed = f.run(&["unknowns", "--json"]);
    assert_exit(&listed, 0);
    assert_eq!(all, json_ids(&listed));
    for op in burst.iter().chain([&f.unknown, &f.pending]) {
        assert!(
            all.contains_key(&op.operation_id.to_string()),
            "{}",
            op.order_id.as_str()
        );
    }
    assert!(!all.contains_key(&f.settled.operation_id.to_string()));
    assert!(!all.contains_key(&f.review.operation_id.to_string()));

    // 2. Due now == the reconciler's own query, and leaves out what is not due yet.
    let due = run_doc_query(&client, f.table(), &queries[1], now.as_millis()).await;
    let page = f
        .store
        .query_index(IndexQuery::DueBy(now), None, 1000)
        .await
        .unwrap();
    assert!(page.next.is_none());
    let reconciler: std::collections::BTreeMap<String, String> = page
        .operations
        .iter()
        .map(|op| (op.operation_id.to_string(), op.status.to_string()))
        .collect();
    assert_eq!(due, reconciler);
    assert!(
        due.contains_key(&f.pending.operation_id.to_string()),
        "pending, 2 h old: due"
    );
    for op in burst.iter().chain([&f.unknown]) {
        assert!(
            !due.contains_key(&op.operation_id.to_string()),
            "not due for 60 s"
        );
    }

    // 3. Review == `chargectl unknowns --review --json`.
    let review = run_doc_query(&client, f.table(), &queries[2], now.as_millis()).await;
    let listed = f.run(&["unknowns", "--review", "--json"]);
    assert_exit(&listed, 0);
    assert_eq!(review, json_ids(&listed));
    assert_eq!(
        review.into_keys().collect::<Vec<_>>(),
        [f.review.operation_id.to_string()]
    );
}

// ---- refunds ----

/// A charge of 1250 usd for `order`, succeeded (`pi_settled_1`), through the store's own writes.
async fn charged(store: &DynamoStore, order: &str) -> Operation {
    let op = create(store, order, SystemClock.now().minus(3 * HOUR)).await;
    charged_as(store, &op, "pi_settled_1").await
}

/// The refund `refund_id` of `amount` of `charge` as stored now, accepted as the door accepts it:
/// the refund written and its amount reserved on the charge in one write.
async fn refund(
    store: &DynamoStore,
    charge: &Operation,
    refund_id: &str,
    amount: i64,
) -> Operation {
    use charge_core::refund::{request::RefundRequest, reserve};
    let charge = store.get(&charge.key()).await.unwrap().unwrap();
    let request = RefundRequest {
        amount: Some(charge_core::domain::Amount::new(amount).unwrap()),
        reason: None,
    };
    let now = SystemClock.now();
    let (params, reservation) = reserve(&charge, &request, now).unwrap();
    let op = Operation::new_refund(
        charge.order_id.clone(),
        charge_core::domain::RefundId::parse(refund_id).unwrap(),
        &request,
        params,
        charge_core::domain::Principal::jwt("support").unwrap(),
        now,
        Duration::from_secs(300),
    );
    let created = store
        .create_beside(&op, ChargeClaim::Reserve(&reservation))
        .await
        .unwrap();
    assert!(matches!(created, CreatedBeside::New(_)), "{created:?}");
    op
}

/// One attempt of `refund` recorded unknown (a lost answer), with its Stripe id when learned.
async fn refund_unknown(
    store: &DynamoStore,
    refund: &Operation,
    stripe_id: Option<&str>,
) -> Operation {
    let (token, _) = claim(store, refund).await;
    let rec = OutcomeRecord {
        stripe_refund_id: stripe_id
            .map(|id| charge_core::domain::StripeRefundId::parse(id).unwrap()),
        last_error: Some("timeout after 10s waiting for api.stripe.com".into()),
        ..charge_core::testing::outcome(refund, token, OperationStatus::Unknown, SystemClock.now())
    };
    testing::record(store, &rec).await
}

async fn reserved(f: &Fixture, charge: &Operation) -> i64 {
    f.get(charge).await.refund_reserved()
}

impl Stripe {
    /// `refund` made at the simulator as the charge function makes it (its key, its parameters):
    /// the Stripe refund's id.
    async fn refund_for(&self, refund: &Operation) -> String {
        let req = CreateRefund::for_operation(refund).expect("a refund operation");
        self.side
            .gateway()
            .create_refund(&req)
            .await
            .expect("refund create")
            .id
            .to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknowns_lists_a_refund_with_its_kind() {
    let f = Fixture::new().await;
    let charge = charged(&f.store, &unique("o-refunded")).await;
    let r = refund(&f.store, &charge, "r-1", 400).await;

    let out = f.run(&["unknowns"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].contains("KIND"), "{text}");
    let row = lines
        .iter()
        .find(|l| l.starts_with(&r.operation_id.to_string()))
        .unwrap_or_else(|| panic!("the refund is listed:\n{text}"));
    assert!(
        row.contains("refund r-1") && row.contains("400 usd"),
        "{row}"
    );
    let charge_row = lines
        .iter()
        .find(|l| l.starts_with(&f.pending.operation_id.to_string()))
        .unwrap();
    assert!(charge_row.contains(" charge "), "{charge_row}");

    let out = f.run(&["unknowns", "--json"]);
    assert_exit(&out, 0);
    let lines = json_lines(&out);
    let listed = lines
        .iter()
        .find(|l| l["operation_id"] == r.operation_id.to_string())
        .expect("the refund in --json");
    assert_eq!(listed["kind"], "refund");
    assert_eq!(listed["refund_id"], "r-1");
    assert_eq!(listed["amount"], 400);
    assert_eq!(listed["order_id"], charge.order_id.as_str());
    let charge_line = lines
        .iter()
        .find(|l| l["operation_id"] == f.pending.operation_id.to_string())
        .unwrap();
    assert_eq!(charge_line["kind"], "charge");
    assert_eq!(charge_line["refund_id"], Value::Null);
}

/// Its Stripe id recorded: the refund is retrieved. The operator's `--failed` is contradicted
/// (Stripe holds it succeeded): refused, nothing changed; `--succeeded` with its id is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_of_a_refund_with_its_stripe_id_records_what_stripe_holds() {
    let f = Fixture::new().await;
    let stripe = Stripe::new().await;
    let charge = create(&f.store, &unique("o-refund-known"), SystemClock.now()).await;
    let pi = stripe.intent_for(&charge, "pm_card_visa").await;
    let charge_order = charge.order_id.to_string();
    let charge = charged_as(&f.store, &charge, &pi).await;
    let r = refund(&f.store, &charge, "r-1", 400).await;
    let re = stripe.refund_for(&r).await;
    let r = refund_unknown(&f.store, &r, Some(&re)).await;
    let id = r.operation_id.to_string();

    let out = f.run_with(
        &stripe,
        &["resolve", &id, "--failed", "--note", "bank says no"],
    );
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains(&format!("Stripe holds {re} succeeded, not failed")),
        "{err}"
    );
    assert!(err.contains("nothing changed"), "{err}");
    assert_eq!(f.get(&r).await, r, "refused: the refund untouched");
    assert_eq!(reserved(&f, &charge).await, 400, "nothing given back");

    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &id,
            "--succeeded",
            &re,
            "--note",
            "seen in the dashboard",
            "--by",
            "alice",
        ],
    );
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains(&format!(
            "(refund r-1 of order {charge_order}): unknown -> succeeded (Stripe refund {re})"
        )),
        "{}",
        stdout(&out)
    );
    let after = f.get(&r).await;
    assert_eq!(after.status, OperationStatus::Succeeded);
    assert_eq!(
        after.stripe_refund_id().map(|id| id.as_str()),
        Some(re.as_str())
    );
    assert_eq!(after.next_due_at, None);
    let entry = &after.history[0];
    assert_eq!(entry.action, "resolve_succeeded");
    assert!(entry.caller.starts_with("arn:aws:"), "{}", entry.caller);
    assert_eq!(entry.label.as_deref(), Some("alice"));
    assert_eq!(
        reserved(&f, &charge).await,
        400,
        "a succeeded refund keeps it"
    );
}

/// Its Stripe id never learned: the intent's refunds are listed and ours found by
/// `metadata.operation_id`. A refund Stripe made is settled as it holds it; one that never
/// reached Stripe is resolved failed with its reservation given back, but not claimed succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_of_a_refund_without_its_stripe_id_lists_the_intent_s_refunds() {
    let f = Fixture::new().await;
    let stripe = Stripe::new().await;
    let charge = create(&f.store, &unique("o-refund-list"), SystemClock.now()).await;
    let pi = stripe.intent_for(&charge, "pm_card_visa").await;
    let charge = charged_as(&f.store, &charge, &pi).await;
    let made = refund(&f.store, &charge, "r-1", 400).await;
    let re = stripe.refund_for(&made).await;
    let made = refund_unknown(&f.store, &made, None).await;
    let never = refund(&f.store, &charge, "r-2", 200).await;
    assert_eq!(reserved(&f, &charge).await, 600);

    // r-2 is not at Stripe: claiming it succeeded (by r-1's refund) is refused.
    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &never.operation_id.to_string(),
            "--succeeded",
            &re,
            "--note",
            "n",
        ],
    );
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("lists 0 refunds"), "{}", stderr(&out));
    assert_eq!(f.get(&never).await, never);
    assert_eq!(reserved(&f, &charge).await, 600);

    // r-1 is: settled by the list, its Stripe id recorded.
    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &made.operation_id.to_string(),
            "--succeeded",
            &re,
            "--note",
            "n",
        ],
    );
    assert_exit(&out, 0);
    let after = f.get(&made).await;
    assert_eq!(after.status, OperationStatus::Succeeded);
    assert_eq!(
        after.stripe_refund_id().map(|id| id.as_str()),
        Some(re.as_str())
    );

    // r-2 failed: nothing went back, its 200 is given back to the charge in the same write.
    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &never.operation_id.to_string(),
            "--failed",
            "--note",
            "never sent",
        ],
    );
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("200 usd given back to the charge"),
        "{}",
        stdout(&out)
    );
    let after = f.get(&never).await;
    assert_eq!(after.status, OperationStatus::Failed);
    assert_eq!(after.history[0].action, "resolve_failed");
    assert_eq!(reserved(&f, &charge).await, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_sends_a_refund_s_message_as_version_2() {
    let f = Fixture::new().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk_config().await);
    let queue_url = fresh_fifo_queue(&sqs).await;
    let charge = charged(&f.store, &unique("o-refund-redrive")).await;
    let r = refund(&f.store, &charge, "r-1", 400).await;
    let r = refund_unknown(&f.store, &r, None).await;
    let id = r.operation_id.to_string();

    let out = f.run(&[
        "--queue-url",
        &queue_url,
        "redrive",
        &id,
        "--note",
        "Stripe is back",
    ]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("(refund r-1 of order"),
        "{}",
        stdout(&out)
    );
    let received = sqs
        .receive_message()
        .queue_url(&queue_url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    let messages = received.messages();
    assert_eq!(messages.len(), 1);
    let body: Value = serde_json::from_str(messages[0].body().unwrap()).unwrap();
    assert_eq!(body["v"], 2);
    assert_eq!(body["kind"], "refund");
    assert_eq!(body["refund_id"], "r-1");
    assert_eq!(body["operation_id"], id);
    assert_eq!(body["order_id"], charge.order_id.as_str());
    let attrs = messages[0].attributes().expect("system attributes");
    assert_eq!(
        attrs
            .get(&MessageSystemAttributeName::MessageDeduplicationId)
            .map(String::as_str),
        Some(format!("{id}:1").as_str())
    );
    let after = f.get(&r).await;
    assert_eq!(after.redrives, 1);
    assert_eq!(after.history[0].action, "redrive");
    assert!(after.history[0].caller.starts_with("arn:aws:"));
    assert_eq!(
        reserved(&f, &charge).await,
        400,
        "a re-drive moves no money"
    );
}

/// `op` recorded succeeded with the PaymentIntent `pi`.
async fn charged_as(store: &DynamoStore, op: &Operation, pi: &str) -> Operation {
    let (token, _) = claim(store, op).await;
    let rec = OutcomeRecord {
        external_id: Some(charge_core::domain::PaymentIntentId::parse(pi).unwrap()),
        last_error: None,
        ..charge_core::testing::outcome(op, token, OperationStatus::Succeeded, SystemClock.now())
    };
    testing::record(store, &rec).await
}

/// A capture whose answer was lost (unknown): `resolve` refuses it (its outcome ends its charge's
/// authorization in the same write, which only its own execution makes) and names the way,
/// `redrive`, which sends its message as version 3; the charge is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_is_redriven_not_resolved_by_hand() {
    use charge_core::take::{take, TakeRequest};
    let f = Fixture::new().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk_config().await);
    let queue_url = fresh_fifo_queue(&sqs).await;
    let order = unique("o-capture");
    let mut charge = operation(&order, 1250, SystemClock.now().minus(3 * HOUR));
    charge.params.charge_mut().unwrap().capture_method = charge_core::domain::CaptureMethod::Manual;
    f.store.create_if_absent(&charge).await.unwrap();
    // Authorized, as the charge function leaves it once Stripe holds it.
    let (token, _) = claim(&f.store, &charge).await;
    let held = OutcomeRecord {
        external_id: Some(charge_core::domain::PaymentIntentId::parse("pi_held_1").unwrap()),
        last_error: None,
        next_due_at: Some(SystemClock.now().plus(96 * HOUR)),
        ..charge_core::testing::outcome(
            &charge,
            token,
            OperationStatus::Authorized,
            SystemClock.now(),
        )
    };
    charge = testing::record(&f.store, &held).await;
    let request = TakeRequest::Capture(Default::default());
    let operation_id = charge_core::domain::OperationId::new_random();
    let taker = charge_core::charge::state::Taker {
        capture: true,
        operation_id,
    };
    let taking = take(&charge, &request, taker, SystemClock.now()).unwrap();
    let capture = Operation {
        operation_id,
        ..Operation::new_taking(
            charge.order_id.clone(),
            request.kind(),
            request.fingerprint(),
            taking.params.clone(),
            charge_core::domain::Principal::jwt("shop").unwrap(),
            SystemClock.now(),
            Duration::from_secs(300),
        )
    };
    f.store
        .create_beside(&capture, ChargeClaim::Take(&taking.take))
        .await
        .unwrap();
    let (token, _) = claim(&f.store, &capture).await;
    let lost = OutcomeRecord {
        last_error: Some("timeout after 10s waiting for api.stripe.com".into()),
        ..charge_core::testing::outcome(
            &capture,
            token,
            OperationStatus::Unknown,
            SystemClock.now(),
        )
    };
    let capture = testing::record(&f.store, &lost).await;
    let id = capture.operation_id.to_string();

    let stripe = Stripe::new().await;
    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &id,
            "--succeeded",
            "pi_held_1",
            "--note",
            "captured",
        ],
    );
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("chargectl redrive"),
        "{}",
        stderr(&out)
    );
    assert_eq!(f.get(&capture).await, capture, "nothing changed");

    let out = f.run(&[
        "--queue-url",
        &queue_url,
        "redrive",
        &id,
        "--note",
        "Stripe is back",
    ]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("capture of order"),
        "{}",
        stdout(&out)
    );
    let received = sqs
        .receive_message()
        .queue_url(&queue_url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    let messages = received.messages();
    assert_eq!(messages.len(), 1);
    let body: Value = serde_json::from_str(messages[0].body().unwrap()).unwrap();
    assert_eq!(
        (body["v"].clone(), body["kind"].clone()),
        (3.into(), "capture".into())
    );
    assert_eq!(
        f.get(&charge).await.status,
        OperationStatus::Authorized,
        "the charge as it was"
    );
}

/// An authorization of 1250 held at stripe-sim (`requires_capture`, captured there too when
/// `captured_at_stripe`) and a capture of it in review (Stripe said its key was used with other
/// parameters), the charge taken by it: what `resolve` of a take finds.
async fn capture_in_review(
    f: &Fixture,
    stripe: &Stripe,
    captured_at_stripe: bool,
) -> (Operation, Operation) {
    use charge_core::take::{take, TakeRequest};
    let order = unique("o-refused");
    let mut charge = operation(&order, 1250, SystemClock.now().minus(3 * HOUR));
    charge.params.charge_mut().unwrap().capture_method = charge_core::domain::CaptureMethod::Manual;
    f.store.create_if_absent(&charge).await.unwrap();
    let pi = stripe.intent_for(&charge, "pm_card_visa").await;
    let (token, _) = claim(&f.store, &charge).await;
    let held = OutcomeRecord {
        external_id: Some(charge_core::domain::PaymentIntentId::parse(&pi).unwrap()),
        last_error: None,
        next_due_at: Some(SystemClock.now().plus(96 * HOUR)),
        ..charge_core::testing::outcome(
            &charge,
            token,
            OperationStatus::Authorized,
            SystemClock.now(),
        )
    };
    let charge = testing::record(&f.store, &held).await;
    assert_eq!(stripe.status_at_stripe(&pi), "requires_capture");
    let request = TakeRequest::Capture(Default::default());
    let operation_id = charge_core::domain::OperationId::new_random();
    let taker = charge_core::charge::state::Taker {
        capture: true,
        operation_id,
    };
    let taking = take(&charge, &request, taker, SystemClock.now()).unwrap();
    let capture = Operation {
        operation_id,
        ..Operation::new_taking(
            charge.order_id.clone(),
            request.kind(),
            request.fingerprint(),
            taking.params.clone(),
            charge_core::domain::Principal::jwt("shop").unwrap(),
            SystemClock.now(),
            Duration::from_secs(300),
        )
    };
    f.store
        .create_beside(&capture, ChargeClaim::Take(&taking.take))
        .await
        .unwrap();
    let (token, _) = claim(&f.store, &capture).await;
    let why = "key_misuse: capture idempotency key misuse: idempotency_error";
    let in_review = OutcomeRecord {
        last_error: Some(why.into()),
        review: Some(Review {
            reason: why.into(),
            flagged_at: SystemClock.now(),
        }),
        next_due_at: Some(SystemClock.now()),
        ..charge_core::testing::outcome(
            &capture,
            token,
            OperationStatus::Pending,
            SystemClock.now(),
        )
    };
    let capture = testing::record(&f.store, &in_review).await;
    if captured_at_stripe {
        let req = charge_once::ports::CapturePaymentIntent::for_operation(&capture).unwrap();
        stripe.side.gateway().capture(&req).await.expect("captured");
    }
    (f.get(&charge).await, capture)
}

/// A capture in review whose authorization Stripe still holds untouched: `resolve --failed`
/// ends it failed and gives the charge back (authorized, `taken_by` removed) in one write, with
/// the caller's ARN in the history. Its twin, the same capture after Stripe captured the intent
/// (in the dashboard, say), is refused and changes nothing: `redrive` settles that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_failed_gives_a_take_in_review_back_only_while_stripe_holds_it() {
    let f = Fixture::new().await;
    let stripe = Stripe::new().await;

    let (charge, capture) = capture_in_review(&f, &stripe, true).await;
    let id = capture.operation_id.to_string();
    let out = f.run_with(&stripe, &["resolve", &id, "--failed", "--note", "checked"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("not requires_capture"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("chargectl redrive"),
        "{}",
        stderr(&out)
    );
    assert_eq!(f.get(&capture).await, capture, "nothing changed");
    assert_eq!(f.get(&charge).await, charge, "nothing changed");

    let (charge, capture) = capture_in_review(&f, &stripe, false).await;
    assert!(charge.taken_by().is_some());
    let id = capture.operation_id.to_string();
    let out = f.run_with(
        &stripe,
        &[
            "resolve",
            &id,
            "--failed",
            "--note",
            "Stripe still holds it",
            "--by",
            "alice",
        ],
    );
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("given back"), "{}", stdout(&out));
    let after = f.get(&capture).await;
    assert_eq!(after.status, OperationStatus::Failed);
    assert!(after.review.is_none());
    let entry = after.history.last().expect("the history entry");
    assert_eq!(entry.action, "resolve_failed");
    assert!(entry.caller.starts_with("arn:aws:"), "{}", entry.caller);
    assert!(entry
        .review
        .as_deref()
        .is_some_and(|r| r.starts_with("key_misuse")));
    let given_back = f.get(&charge).await;
    assert_eq!(
        (given_back.status, given_back.taken_by()),
        (OperationStatus::Authorized, None)
    );
    let pi = charge.external_id.clone().unwrap();
    assert_eq!(
        stripe.status_at_stripe(pi.as_str()),
        "requires_capture",
        "untouched"
    );
}

/// `summary` on moto: the fixture's unsettled operations per kind with the oldest's age, the
/// one in review, and a dead-letter queue's depth read from SQS (two messages sent to it), as
/// text and as JSON; a queue URL SQS does not know fails with its URL, exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_shows_what_is_open_and_a_dead_letter_queues_depth() {
    let f = Fixture::new().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk_config().await);
    let dlq = fresh_fifo_queue(&sqs).await;
    for i in 0..2 {
        sqs.send_message()
            .queue_url(&dlq)
            .message_body(format!("{{\"poison\":{i}}}"))
            .message_group_id("g")
            .message_deduplication_id(format!("d{i}"))
            .send()
            .await
            .unwrap();
    }
    let out = f.run(&["summary", "--json", "--dead-letter-queue", &dlq]);
    assert_exit(&out, 0);
    let p: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    // The fixture's table is its own: pending and unknown are automatic work, one in review.
    assert_eq!(p["unsettled"]["charge"]["count"], 3, "{p}");
    assert_eq!(p["in_review"]["count"], 1, "{p}");
    assert!(
        p["in_review"]["oldest_age_secs"].as_u64().unwrap() >= 26 * 3600,
        "{p}"
    );
    assert_eq!(p["dead_letter_queues"][&dlq], 2, "{p}");
    let text = f.run(&["summary", "--dead-letter-queue", &dlq]);
    assert_exit(&text, 0);
    assert!(
        stdout(&text).contains("in review       1"),
        "{}",
        stdout(&text)
    );

    let missing = format!("{dlq}-missing");
    let out = f.run(&["summary", "--dead-letter-queue", &missing]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains(&missing), "{}", stderr(&out));
}

// ---- disputes ----

/// `charge` (1250 usd, `pi_settled_1`) disputed at Stripe as `dp` (`needs_response`, due a week
/// after its creation), recorded as the events function records it: the dispute's record.
async fn disputed(store: &DynamoStore, charge: &Operation, dp: &str) -> Operation {
    use charge_once::executor::dispute::{record_dispute, DisputeRecording};
    let d = charge_core::testing::stripe_dispute(dp, "pi_settled_1");
    let written = record_dispute(
        store,
        &charge.order_id,
        &d,
        SystemClock.now(),
        &charge_core::plan::Policy::default().dispute,
    )
    .await
    .unwrap();
    let DisputeRecording::Written { record, .. } = written else {
        panic!("recorded: {written:?}")
    };
    *record
}

/// `unknowns` lists an open dispute as kind `dispute` with Stripe's status (and `--json`'s
/// added keys, null on every other kind); `show <order_id>` lists the order's disputes under its
/// charge, with status, amount, reason, due_by and whether evidence is saved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknowns_and_show_list_an_order_s_open_dispute() {
    let f = Fixture::new().await;
    let charge = charged(&f.store, &unique("o-disputed")).await;
    let dp = disputed(&f.store, &charge, "dp_cli_1").await;

    let out = f.run(&["unknowns"]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    let row = text
        .lines()
        .find(|l| l.starts_with(&dp.operation_id.to_string()))
        .unwrap_or_else(|| panic!("the dispute is listed:\n{text}"));
    assert!(
        row.contains("dispute dp_cli_1 needs_response")
            && row.contains("1250 usd")
            && row.contains(" unknown "),
        "{row}"
    );

    let out = f.run(&["unknowns", "--json"]);
    assert_exit(&out, 0);
    let lines = json_lines(&out);
    let listed = lines
        .iter()
        .find(|l| l["operation_id"] == dp.operation_id.to_string())
        .expect("the dispute in --json");
    assert_eq!(listed["kind"], "dispute");
    assert_eq!(listed["dispute_id"], "dp_cli_1");
    assert_eq!(listed["dispute_status"], "needs_response");
    assert_eq!(listed["status"], "unknown");
    assert_eq!(listed["refund_id"], Value::Null);
    assert!(listed["due_by"].as_str().is_some(), "{listed}");
    let charge_line = lines
        .iter()
        .find(|l| l["operation_id"] == f.pending.operation_id.to_string())
        .unwrap();
    assert_eq!(charge_line["dispute_id"], Value::Null);
    assert_eq!(charge_line["dispute_status"], Value::Null);

    let out = f.run(&["show", charge.order_id.as_str()]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("dp_cli_1"))
        .unwrap_or_else(|| panic!("the dispute under its charge:\n{text}"));
    assert!(text.contains("disputes (1;"), "{text}");
    assert!(text.contains("Payments > Disputes"), "{text}");
    for part in [
        "needs_response (ours: unknown)",
        "1250 usd",
        "fraudulent",
        "due_by 20",
        "evidence none",
    ] {
        assert!(line.contains(part), "{part:?} in {line}");
    }

    let out = f.run(&["show", charge.order_id.as_str(), "--json"]);
    assert_exit(&out, 0);
    let value: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(value["refunds"], Value::Array(vec![]), "refunds as before");
    let disputes = value["disputes"].as_array().expect("disputes");
    assert_eq!(disputes.len(), 1);
    assert_eq!(disputes[0]["kind"]["dispute"], "dp_cli_1");
    assert_eq!(disputes[0]["dispute"]["status"], "needs_response");
    assert_eq!(disputes[0]["params"]["reason"], "fraudulent");

    // An order without a dispute shows none, and its --json an empty list.
    let out = f.run(&["show", f.settled.order_id.as_str(), "--json"]);
    assert_exit(&out, 0);
    let value: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(value["disputes"], Value::Array(vec![]));
}

/// A dispute is never written by hand: `resolve` and `redrive` of its record are refused with
/// what to do instead, and nothing is written or sent; the same `redrive` of a charge in review
/// beside it is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_and_redrive_refuse_a_dispute_and_write_nothing() {
    let f = Fixture::new().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk_config().await);
    let queue_url = fresh_fifo_queue(&sqs).await;
    let stripe = Stripe::new().await;
    let charge = charged(&f.store, &unique("o-disputed")).await;
    let dp = disputed(&f.store, &charge, "dp_cli_2").await;
    let id = dp.operation_id.to_string();

    for (with_stripe, args) in [
        (
            true,
            vec![
                "resolve",
                &id,
                "--failed",
                "--note",
                "the customer withdrew it",
            ],
        ),
        (
            false,
            vec![
                "--queue-url",
                &queue_url,
                "redrive",
                &id,
                "--note",
                "read it again",
            ],
        ),
    ] {
        let out = if with_stripe {
            f.run_with(&stripe, &args)
        } else {
            f.run(&args)
        };
        assert_exit(&out, 1);
        let err = stderr(&out);
        assert!(
            err.contains("is dispute dp_cli_2")
                && err.contains("never")
                && err.contains("Payments > Disputes")
                && err.contains("nothing changed"),
            "{err}"
        );
        assert_eq!(
            f.store.get(&dp.key()).await.unwrap().unwrap(),
            dp,
            "nothing written"
        );
    }
    let none = sqs
        .receive_message()
        .queue_url(&queue_url)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    assert!(none.messages().is_empty(), "nothing sent for a dispute");

    // The twin: the same redrive of the charge in review is accepted and sends its message.
    let out = f.run(&[
        "--queue-url",
        &queue_url,
        "redrive",
        &f.review.operation_id.to_string(),
        "--note",
        "read it again",
    ]);
    assert_exit(&out, 0);
    assert_eq!(f.get(&f.review).await.redrives, 1);
}
