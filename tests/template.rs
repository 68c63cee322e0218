//! Holds `template.yaml` (the SAM template) to the code, offline — no AWS, no moto:
//!
//! - each function's environment variables are exactly the names its config's `from_env` reads;
//! - no IAM statement anywhere has a `*` in its Action or Resource, and no SAM policy template or
//!   managed policy is attached by hand;
//! - the charge queue's visibility timeout is at least 6 × the charge function's timeout;
//! - the table's keys and its one index are the ones `DynamoStore` queries (`UNKNOWN_INDEX`, with
//!   `UNKNOWN_INDEX_PROJECTED` only, so a claim writes no index entry), and the reconciler may
//!   query exactly the unknown index and (its refund watch) the settled index;
//! - the Lambda settings the deployment relies on (runtime, arm64, cargo-lambda build, JSON logs,
//!   partial batch responses, one reconciler at a time);
//! - the door: every HTTP route has an IAM or JWT authorizer in every configuration (IAM by
//!   default, no unauthenticated choice), the invoke grant names exactly the checkout route and the
//!   caller-role parameter, the API writes JSON access logs and pages on 5xx;
//! - Stripe events in, per parameter set ([`configured`] evaluates the template's
//!   `Conditions` and drops what they exclude): with default parameters no route lacks an
//!   authorizer and nothing receives Stripe events; with `StripeWebhookSecretArn` exactly one
//!   route has none, `POST /stripe/webhook`, throttled on its own; with `StripeEventSourceName` a
//!   partner bus, a rule on the handled types, a target with retries and a DLQ, a permission
//!   scoped to the rule and a least-privilege role; every reference resolves in each of them;
//! - what the emulators do not evaluate, held statically: every UpdateItem's `dynamodb:Attributes`
//!   is exactly what the role's writes name (derived from the write builders, both ways), checkout's
//!   only inside its transactions; the audit's and the operator's PutItem only under the AUDIT
//!   partition the report writer puts to; the operator policy grants what each chargectl command
//!   calls;
//! - the `Rules` use CloudFormation's rule functions only, and notify's stream filter passes every
//!   write the outbox turns into an outcome.
//!
//! CloudFormation's short tags (`!Ref`, `!GetAtt`, `!Sub`, …) parse as tagged values; [`plain`]
//! looks through them.

use std::collections::{BTreeMap, BTreeSet};

use charge_once::adapters::dynamodb::{SETTLED_INDEX, UNKNOWN_INDEX, UNKNOWN_INDEX_PROJECTED};
use serde_norway::value::TaggedValue;
use serde_norway::{Mapping, Value};
use testkit::streams::pattern_matches;

const TEMPLATE: &str = include_str!("../template.yaml");

fn template() -> Value {
    serde_norway::from_str(TEMPLATE).expect("template.yaml parses as YAML")
}

/// The value under a tag (`!Ref X` → `X`), or the value itself.
fn plain(v: &Value) -> &Value {
    match v {
        Value::Tagged(t) => plain(&t.value),
        other => other,
    }
}

fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    plain(v).as_mapping()?.get(key).map(plain)
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    get(v, key)?.as_str()
}

fn resources(t: &Value) -> Vec<(String, &Value)> {
    get(t, "Resources")
        .and_then(Value::as_mapping)
        .expect("Resources")
        .iter()
        .map(|(k, v)| (k.as_str().expect("logical id").to_owned(), v))
        .collect()
}

fn of_type<'a>(t: &'a Value, ty: &str) -> Vec<(String, &'a Value)> {
    resources(t)
        .into_iter()
        .filter(|(_, r)| str_at(r, "Type") == Some(ty))
        .collect()
}

fn props(resource: &Value) -> &Value {
    get(resource, "Properties").expect("Properties")
}

/// A function property, falling back to `Globals.Function` (SAM's merge for scalars).
fn function_prop<'a>(t: &'a Value, function: &'a Value, key: &str) -> Option<&'a Value> {
    get(props(function), key).or_else(|| get(get(get(t, "Globals")?, "Function")?, key))
}

/// The serverless function whose `CodeUri` is `functions/<crate_dir>`.
fn function<'a>(t: &'a Value, crate_dir: &str) -> (String, &'a Value) {
    let want = format!("functions/{crate_dir}");
    let found: Vec<_> = of_type(t, "AWS::Serverless::Function")
        .into_iter()
        .filter(|(_, f)| {
            str_at(props(f), "CodeUri").map(|c| c.trim_end_matches('/')) == Some(&want)
        })
        .collect();
    assert_eq!(found.len(), 1, "exactly one function with CodeUri {want}");
    found.into_iter().next().unwrap()
}

/// Environment variable names: `Globals.Function.Environment.Variables` merged with the
/// function's own (SAM merges maps).
fn env_names(t: &Value, function: &Value) -> BTreeSet<String> {
    let vars = |env: Option<&Value>| -> Vec<String> {
        env.and_then(|e| get(e, "Variables"))
            .and_then(Value::as_mapping)
            .map(|m| {
                m.keys()
                    .filter_map(|k| k.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let global = get(t, "Globals")
        .and_then(|g| get(g, "Function"))
        .and_then(|f| get(f, "Environment"));
    let mut names: BTreeSet<String> = vars(global).into_iter().collect();
    names.extend(vars(get(props(function), "Environment")));
    names
}

/// Variables the template sets for the events function ahead of the code: the events
/// function's `from_env` is to read them. Until `WebhookConfig::env_vars()`
/// lists them they are added to what it reads; once it does, this adds nothing.
#[test]
fn each_function_gets_exactly_the_variables_its_config_reads() {
    use charge_once::config::FromEnv;
    // Every function exists in this configuration.
    let t = config(EVERYTHING);
    for (dir, expected) in [
        ("checkout", checkout::CheckoutConfig::env_vars()),
        ("charge", charge::ChargeConfig::env_vars()),
        ("reconciler", reconciler::ReconcilerConfig::env_vars()),
        ("notify", notify::NotifyConfig::env_vars()),
        ("events", events::EventsConfig::env_vars()),
    ] {
        let (id, f) = function(&t, dir);
        let actual = env_names(&t, f);
        let expected = expected
            .unwrap_or_else(|e| panic!("{dir}: from_env refuses the example environment: {e}"));
        assert_eq!(
            actual,
            expected,
            "{id}: template sets {:?} it does not read, lacks {:?}",
            actual.difference(&expected).collect::<Vec<_>>(),
            expected.difference(&actual).collect::<Vec<_>>()
        );
    }
}

/// Every string inside a value, through tags, lists and maps (`!Sub "…"`, `!Join`, …).
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Tagged(t) => strings(&t.value, out),
        Value::Sequence(items) => items.iter().for_each(|i| strings(i, out)),
        Value::Mapping(m) => m.values().for_each(|i| strings(i, out)),
        _ => {}
    }
}

/// Every IAM statement in the template: under any `Statement` key (inline `Policies`,
/// `PolicyDocument`, `AssumeRolePolicyDocument`, queue/topic policies), with its path.
fn statements(v: &Value, path: String, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Tagged(t) => statements(&t.value, path, out),
        Value::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                statements(item, format!("{path}[{i}]"), out);
            }
        }
        Value::Mapping(m) => {
            for (k, val) in m {
                let key = k.as_str().unwrap_or("?");
                if key == "Statement" {
                    // A conditional statement (`!If [cond, {…}, !Ref AWS::NoValue]`) counts as
                    // each of its branches, so no check skips it.
                    match plain(val) {
                        Value::Sequence(list) => {
                            for (i, st) in list.iter().enumerate() {
                                for b in statement_branches(st) {
                                    out.push((format!("{path}/Statement[{i}]"), b.clone()));
                                }
                            }
                        }
                        other => out.push((format!("{path}/Statement"), other.clone())),
                    }
                } else {
                    statements(val, format!("{path}/{key}"), out);
                }
            }
        }
        _ => {}
    }
}

#[test]
fn no_iam_statement_has_a_wildcard_and_no_policy_is_attached_by_name() {
    // The template as written (both branches of each conditional statement) and as deployed.
    no_wildcard_and_no_policy_by_name(&template());
    for (name, set) in CONFIGURATIONS {
        println!("configuration: {name}");
        no_wildcard_and_no_policy_by_name(&config(set));
    }
}

fn no_wildcard_and_no_policy_by_name(t: &Value) {
    let t = t.clone();
    let mut found = Vec::new();
    statements(
        get(&t, "Resources").unwrap(),
        "Resources".into(),
        &mut found,
    );
    assert!(
        found.len() >= 9,
        "expected the functions' statements, found {}",
        found.len()
    );
    for (path, st) in &found {
        for field in ["Action", "NotAction", "Resource", "NotResource"] {
            // The one `*` allowed: a path parameter in the route grant (`/orders/*/charge`).
            if field == "Resource" && is_route_grant(st) {
                continue;
            }
            let Some(v) = get(st, field) else { continue };
            let mut texts = Vec::new();
            strings(v, &mut texts);
            assert!(
                texts.iter().all(|s| !s.contains('*')),
                "{path}: wildcard in {field}: {texts:?}"
            );
        }
        assert!(
            get(st, "NotAction").is_none() && get(st, "NotResource").is_none(),
            "{path}: NotAction/NotResource grant everything else"
        );
        assert!(
            get(st, "Action").is_some() && get(st, "Resource").is_some(),
            "{path}: Action and Resource"
        );
    }
    // Every `Policies` entry of a function is an inline document: no SAM policy template
    // (`DynamoDBCrudPolicy: …`, which expands to broad actions) and no managed policy by name.
    for (id, f) in of_type(&t, "AWS::Serverless::Function") {
        let policies = get(props(f), "Policies")
            .and_then(Value::as_sequence)
            .unwrap_or_else(|| panic!("{id}: explicit Policies"));
        assert!(!policies.is_empty(), "{id}: explicit Policies");
        for p in policies {
            assert!(
                get(p, "Statement").is_some(),
                "{id}: policy entry is not an inline statement list: {p:?}"
            );
        }
        // SAM's SQS event attaches AWSLambdaSQSQueueExecutionRole (Resource "*"): the poller
        // permissions are scoped by hand instead, with a plain event source mapping.
        if let Some(events) = get(props(f), "Events").and_then(Value::as_mapping) {
            for (name, e) in events {
                assert_ne!(
                    str_at(e, "Type"),
                    Some("SQS"),
                    "{id}: event {name:?} is a SAM SQS event"
                );
            }
        }
    }
    for (id, r) in of_type(&t, "AWS::IAM::Role") {
        assert!(
            get(props(r), "ManagedPolicyArns").is_none(),
            "{id}: managed policies"
        );
    }
}

fn logical_id_of(v: &Value) -> Option<String> {
    // `!Ref X`, `!GetAtt X.Arn`, `!GetAtt [X, Arn]`, or the long forms.
    let text = |v: &Value| -> Option<String> {
        match plain(v) {
            Value::String(s) => Some(s.split('.').next().unwrap_or(s).to_owned()),
            Value::Sequence(items) => items
                .first()
                .and_then(|i| plain(i).as_str())
                .map(str::to_owned),
            _ => None,
        }
    };
    match v {
        Value::Tagged(t) => text(&t.value),
        Value::Mapping(m) => m
            .iter()
            .find(|(k, _)| matches!(k.as_str(), Some("Ref" | "Fn::GetAtt")))
            .and_then(|(_, v)| text(v)),
        _ => None,
    }
}

fn number(v: &Value) -> u64 {
    match plain(v) {
        Value::Number(n) => n.as_u64().expect("whole number"),
        Value::String(s) => s.parse().expect("whole number"),
        other => panic!("not a literal number: {other:?}"),
    }
}

#[test]
fn the_charge_queue_outlives_six_charge_timeouts_and_reports_partial_failures() {
    let t = template();
    let (charge_id, charge) = function(&t, "charge");
    let timeout = number(function_prop(&t, charge, "Timeout").expect("charge Timeout"));

    let mappings: Vec<_> = of_type(&t, "AWS::Lambda::EventSourceMapping")
        .into_iter()
        .filter(|(_, m)| logical_id_of(raw_prop(m, "FunctionName")).as_deref() == Some(&charge_id))
        .collect();
    assert_eq!(
        mappings.len(),
        1,
        "one event source mapping into {charge_id}"
    );
    let m = props(mappings[0].1);
    let queue_id = logical_id_of(raw(m, "EventSourceArn")).expect("EventSourceArn names the queue");
    let types: Vec<_> = get(m, "FunctionResponseTypes")
        .and_then(Value::as_sequence)
        .map(|s| s.iter().filter_map(|v| plain(v).as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        types,
        ["ReportBatchItemFailures"],
        "partial batch responses"
    );
    assert!(
        get(m, "ScalingConfig")
            .and_then(|s| get(s, "MaximumConcurrency"))
            .is_some(),
        "MaximumConcurrency bounds the Stripe request rate"
    );

    let queue = resources(&t)
        .into_iter()
        .find(|(id, _)| *id == queue_id)
        .map(|(_, q)| q)
        .expect("the mapped queue");
    let q = props(queue);
    assert_eq!(get(q, "FifoQueue").and_then(Value::as_bool), Some(true));
    assert_eq!(
        get(q, "ContentBasedDeduplication").and_then(Value::as_bool),
        Some(false),
        "the sender sets the dedup id"
    );
    assert_eq!(
        get(q, "SqsManagedSseEnabled").and_then(Value::as_bool),
        Some(true)
    );
    let visibility = number(get(q, "VisibilityTimeout").expect("VisibilityTimeout"));
    assert!(
        visibility >= 6 * timeout,
        "visibility timeout {visibility} s < 6 x charge timeout {timeout} s"
    );
    let dlq = get(q, "RedrivePolicy")
        .and_then(|r| logical_id_of(raw(r, "deadLetterTargetArn")))
        .expect("a dead-letter queue");
    let dlq = resources(&t)
        .into_iter()
        .find(|(id, _)| *id == dlq)
        .unwrap()
        .1;
    assert_eq!(
        get(props(dlq), "FifoQueue").and_then(Value::as_bool),
        Some(true)
    );
}

/// The event source's numbers are the ones `charge::EVENT_SOURCE` states, which the simulator's
/// load model runs by.
#[test]
fn the_charge_event_source_is_the_one_the_simulator_models() {
    let t = template();
    let es = charge::EVENT_SOURCE;
    let (charge_id, charge) = function(&t, "charge");
    assert_eq!(
        number(function_prop(&t, charge, "Timeout").expect("charge Timeout")),
        es.function_timeout_secs,
        "the charge function's Timeout"
    );
    let mappings: Vec<_> = of_type(&t, "AWS::Lambda::EventSourceMapping")
        .into_iter()
        .filter(|(_, m)| logical_id_of(raw_prop(m, "FunctionName")).as_deref() == Some(&charge_id))
        .collect();
    assert_eq!(
        mappings.len(),
        1,
        "one event source mapping into {charge_id}"
    );
    let m = props(mappings[0].1);
    assert_eq!(
        number(get(m, "BatchSize").expect("BatchSize")),
        es.batch_size as u64,
        "BatchSize"
    );
    assert_eq!(
        get(m, "MaximumBatchingWindowInSeconds").map_or(0, number),
        es.max_batching_window_secs,
        "MaximumBatchingWindowInSeconds (absent = 0)"
    );
    let concurrency = raw(raw(m, "ScalingConfig"), "MaximumConcurrency");
    assert_eq!(
        logical_id_of(concurrency).as_deref(),
        Some("ChargeMaxConcurrency"),
        "MaximumConcurrency is the ChargeMaxConcurrency parameter"
    );
    assert_eq!(
        number(get(parameter(&t, "ChargeMaxConcurrency"), "Default").expect("a Default")),
        u64::from(es.default_max_concurrency),
        "ChargeMaxConcurrency's default"
    );
    let queue_id = logical_id_of(raw(m, "EventSourceArn")).expect("EventSourceArn names the queue");
    let queue = resource(&t, &queue_id).expect("the mapped queue");
    assert_eq!(
        number(get(props(queue), "VisibilityTimeout").expect("VisibilityTimeout")),
        es.visibility_timeout_secs,
        "ChargeQueue's VisibilityTimeout"
    );
    assert_eq!(
        number(
            get(
                get(props(queue), "RedrivePolicy").expect("a RedrivePolicy"),
                "maxReceiveCount"
            )
            .expect("maxReceiveCount")
        ),
        u64::from(es.max_receive_count),
        "ChargeQueue's maxReceiveCount"
    );
}

/// The property as written (tag kept), for [`logical_id_of`].
fn raw<'a>(v: &'a Value, key: &str) -> &'a Value {
    plain(v)
        .as_mapping()
        .and_then(|m| m.get(key))
        .unwrap_or_else(|| panic!("missing {key}"))
}

fn raw_prop<'a>(resource: &'a Value, key: &str) -> &'a Value {
    raw(props(resource), key)
}

fn key_schema(v: &Value) -> Vec<(String, String)> {
    get(v, "KeySchema")
        .and_then(Value::as_sequence)
        .expect("KeySchema")
        .iter()
        .map(|k| {
            (
                str_at(k, "AttributeName").unwrap().to_owned(),
                str_at(k, "KeyType").unwrap().to_owned(),
            )
        })
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[test]
fn the_table_is_the_one_the_store_queries() {
    let t = template();
    // The operations table; the webhook inbox has its own test below.
    let tables: Vec<_> = of_type(&t, "AWS::DynamoDB::Table")
        .into_iter()
        .filter(|(id, _)| id != "WebhookInboxTable")
        .collect();
    assert_eq!(tables.len(), 1, "one operations AWS::DynamoDB::Table");
    let (table_id, table) = &tables[0];
    let p = props(table);
    assert_eq!(str_at(p, "BillingMode"), Some("PAY_PER_REQUEST"));
    assert_eq!(key_schema(p), pairs(&[("pk", "HASH"), ("sk", "RANGE")]));
    let defs: BTreeMap<String, String> = get(p, "AttributeDefinitions")
        .and_then(Value::as_sequence)
        .expect("AttributeDefinitions")
        .iter()
        .map(|d| {
            (
                str_at(d, "AttributeName").unwrap().to_owned(),
                str_at(d, "AttributeType").unwrap().to_owned(),
            )
        })
        .collect();
    let want: BTreeMap<String, String> = pairs(&[
        ("pk", "S"),
        ("sk", "S"),
        ("due_shard", "S"),
        ("due_at", "N"),
        ("settled_on", "S"),
        ("settled_at", "N"),
    ])
    .into_iter()
    .collect();
    assert_eq!(defs, want);

    let indexes: BTreeMap<String, &Value> = get(p, "GlobalSecondaryIndexes")
        .and_then(Value::as_sequence)
        .expect("GlobalSecondaryIndexes")
        .iter()
        .map(|i| (str_at(i, "IndexName").unwrap().to_owned(), i))
        .collect();
    assert_eq!(
        indexes.keys().map(String::as_str).collect::<Vec<_>>(),
        [SETTLED_INDEX, UNKNOWN_INDEX],
        "two indexes: no index by operation id (it would cost a write per operation)"
    );
    // The audit's: each record once, on the day it settled, keys only (one small write per
    // settle, nothing written again while it stays settled).
    let settled = indexes[SETTLED_INDEX];
    assert_eq!(
        key_schema(settled),
        pairs(&[("settled_on", "HASH"), ("settled_at", "RANGE")])
    );
    assert_eq!(
        get(settled, "Projection").and_then(|p| str_at(p, "ProjectionType")),
        Some("KEYS_ONLY")
    );
    let unknown = indexes[UNKNOWN_INDEX];
    assert_eq!(
        key_schema(unknown),
        pairs(&[("due_shard", "HASH"), ("due_at", "RANGE")])
    );
    // Nothing a claim changes is projected: a claim writes no index entry.
    assert_eq!(
        get(unknown, "Projection").and_then(|p| str_at(p, "ProjectionType")),
        Some("INCLUDE")
    );
    let projected: Vec<&str> = get(unknown, "Projection")
        .and_then(|p| get(p, "NonKeyAttributes"))
        .and_then(Value::as_sequence)
        .map(|s| s.iter().filter_map(|v| plain(v).as_str()).collect())
        .unwrap_or_default();
    assert_eq!(projected, UNKNOWN_INDEX_PROJECTED);
    assert_eq!(
        get(p, "PointInTimeRecoverySpecification")
            .and_then(|s| get(s, "PointInTimeRecoveryEnabled"))
            .and_then(Value::as_bool),
        Some(true)
    );
    assert_eq!(
        get(p, "SSESpecification")
            .and_then(|s| get(s, "SSEEnabled"))
            .and_then(Value::as_bool),
        Some(true)
    );
    assert_eq!(str_at(table, "DeletionPolicy"), Some("Retain"));

    // The reconciler may Query the unknown index, and the settled index for its refund watch
    // (the refunds settled a day, two days, ... ago), and nothing else.
    let (_, reconciler) = function(&t, "reconciler");
    let mut found = Vec::new();
    statements(
        get(props(reconciler), "Policies").unwrap(),
        String::new(),
        &mut found,
    );
    let query: Vec<String> = found
        .iter()
        .filter(|(_, st)| {
            let mut actions = Vec::new();
            strings(get(st, "Action").unwrap(), &mut actions);
            actions.iter().any(|a| a == "dynamodb:Query")
        })
        .flat_map(|(_, st)| {
            let mut r = Vec::new();
            strings(get(st, "Resource").unwrap(), &mut r);
            r
        })
        .collect();
    assert_eq!(
        query,
        [
            format!("${{{table_id}.Arn}}/index/{SETTLED_INDEX}"),
            format!("${{{table_id}.Arn}}/index/{UNKNOWN_INDEX}")
        ]
    );
}

#[test]
fn functions_are_arm64_cargo_lambda_builds_with_json_logs() {
    let t = template();
    for dir in [
        "checkout",
        "charge",
        "reconciler",
        "notify",
        "events",
        "audit",
    ] {
        let (id, f) = function(&t, dir);
        let prop = |k: &str| {
            function_prop(&t, f, k)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        assert_eq!(prop("Runtime").as_deref(), Some("provided.al2023"), "{id}");
        assert_eq!(prop("Handler").as_deref(), Some("bootstrap"), "{id}");
        let arch: Vec<_> = function_prop(&t, f, "Architectures")
            .and_then(Value::as_sequence)
            .map(|a| a.iter().filter_map(|v| plain(v).as_str()).collect())
            .unwrap_or_default();
        assert_eq!(arch, ["arm64"], "{id}");
        assert_eq!(
            get(f, "Metadata").and_then(|m| str_at(m, "BuildMethod")),
            Some("rust-cargolambda"),
            "{id}"
        );
        assert_eq!(
            function_prop(&t, f, "LoggingConfig").and_then(|l| str_at(l, "LogFormat")),
            Some("JSON"),
            "{id}"
        );
        let timeout = function_prop(&t, f, "Timeout").map(number);
        assert!(timeout.is_some(), "{id}: an explicit Timeout");
    }
    let (_, reconciler) = function(&t, "reconciler");
    assert_eq!(
        get(props(reconciler), "ReservedConcurrentExecutions").map(number),
        Some(1),
        "never two reconciler ticks at once"
    );
}

/// `execute-api:Invoke` on one route: `…:execute-api:…:<api>/<stage>/<METHOD>/<path>`, whose only
/// `*` are whole path segments standing for path parameters; never in the API id, stage or method.
fn is_route_grant(st: &Value) -> bool {
    if str_at(st, "Action") != Some("execute-api:Invoke") {
        return false;
    }
    let Some(resource) = str_at(st, "Resource") else {
        return false;
    };
    let Some((_, tail)) = resource.split_once(":execute-api:") else {
        return false;
    };
    let parts: Vec<&str> = tail.split('/').collect();
    parts.len() >= 4
        && parts[..3].iter().all(|p| !p.contains('*'))
        && parts[3..].iter().all(|p| *p == "*" || !p.contains('*'))
        && parts[3..].iter().any(|p| *p != "*")
}

/// The branches of a value that may be `!If [condition, a, b]`: `[a, b]`, or `[value]`.
fn branches(v: &Value) -> Vec<&Value> {
    if let Value::Tagged(t) = v {
        if t.tag == "If" {
            if let Some(seq) = plain(&t.value).as_sequence() {
                return seq.iter().skip(1).flat_map(branches).collect();
            }
        }
    }
    vec![v]
}

fn parameter<'a>(t: &'a Value, name: &str) -> &'a Value {
    get(get(t, "Parameters").expect("Parameters"), name)
        .unwrap_or_else(|| panic!("parameter {name}"))
}

/// `!Ref AWS::NoValue` (short or long form).
fn is_no_value(v: &Value) -> bool {
    intrinsic(v).is_some_and(|(f, arg)| f == "Ref" && plain(arg).as_str() == Some("AWS::NoValue"))
}

/// A statement, or each branch of a conditional one (`AWS::NoValue` dropped).
fn statement_branches(st: &Value) -> Vec<&Value> {
    branches(st)
        .into_iter()
        .filter(|b| !is_no_value(b))
        .map(plain)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Configurations: the template as CloudFormation would deploy it for one parameter set. The
// `Conditions` are evaluated (Equals / Not / And / Or / Condition over parameter Refs, with
// `!Join` for list parameters; the Rules' EachMemberEquals), resources and outputs whose
// `Condition` is false are dropped, every `!If` is replaced by its branch and `AWS::NoValue`
// removed. The `Rules` are checked too, so a
// configuration here is one CloudFormation would accept.
// ---------------------------------------------------------------------------------------------

/// Names, not secrets: ARNs of secrets and a partner event source, for parameter sets.
const WEBHOOK_SECRET_ARN: &str =
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:charge-once/stripe-webhook-AbCdEf";
const EVENTS_KEY_SECRET_ARN: &str =
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:charge-once/stripe-events-key-AbCdEf";
const EVENT_SOURCE_NAME: &str = "aws.partner/stripe.com/ed_test_61RkTemplateTest0001";
/// Values for the parameters that have no Default.
const REQUIRED: &[(&str, &str)] = &[(
    "StripeSecretArn",
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:charge-once/stripe-AbCdEf",
)];

type Params = &'static [(&'static str, &'static str)];
/// Someone to page: every configuration here starts from it, as a deploy must (rule
/// AlarmsPageSomebody refuses a stack without AlarmTopicArn or AlarmEmail). A set that gives
/// `AlarmEmail` `""` starts from the bare Defaults instead.
const PAGED: Params = &[("AlarmEmail", "on-call@example.com")];
/// Every parameter at its Default but [`PAGED`].
const DEFAULTS: Params = &[];
/// The bare Defaults: the alarm topic without a subscriber.
const UNPAGED: Params = &[("AlarmEmail", "")];
const WEBHOOK: Params = &[("StripeWebhookSecretArn", WEBHOOK_SECRET_ARN)];
const EVENT_SOURCE: Params = &[("StripeEventSourceName", EVENT_SOURCE_NAME)];
const EVERYTHING: Params = &[
    ("StripeWebhookSecretArn", WEBHOOK_SECRET_ARN),
    ("StripeEventSourceName", EVENT_SOURCE_NAME),
    ("StripeEventsKeySecretArn", EVENTS_KEY_SECRET_ARN),
];
/// Alarms page only with a topic (`!If [HasAlarmTopic, …]`): set it to see them page.
const ALARM_TOPIC: Params = &[(
    "AlarmTopicArn",
    "arn:aws:sns:us-east-1:123456789012:charge-once-on-call",
)];
const JWT: Params = &[
    ("CheckoutAuth", "JWT"),
    ("JwtIssuer", "https://auth.example.com/"),
    ("JwtAudience", "charge-once"),
];
/// The configurations of Stripe events in, by name.
const CONFIGURATIONS: &[(&str, Params)] = &[
    ("defaults", DEFAULTS),
    ("webhook", WEBHOOK),
    ("event source", EVENT_SOURCE),
    ("everything", EVERYTHING),
];

/// A function call in the template, short (`!Equals [...]`) or long (`{"Fn::Equals": [...]}`):
/// its name without `Fn::` and its argument.
fn intrinsic(v: &Value) -> Option<(String, &Value)> {
    match v {
        Value::Tagged(t) => Some((
            t.tag.to_string().trim_start_matches('!').to_owned(),
            &t.value,
        )),
        Value::Mapping(m) if m.len() == 1 => {
            let (k, arg) = m.iter().next()?;
            let k = k.as_str()?;
            match k {
                "Ref" | "Condition" => Some((k.to_owned(), arg)),
                _ => k.strip_prefix("Fn::").map(|f| (f.to_owned(), arg)),
            }
        }
        _ => None,
    }
}

fn scalar_text(v: &Value) -> String {
    match plain(v) {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

/// One parameter set and the values of the template's conditions under it.
struct Configuration {
    params: BTreeMap<String, String>,
    lists: BTreeSet<String>,
    conditions: BTreeMap<String, bool>,
}

impl Configuration {
    /// The configuration of `set` over [`PAGED`] (every other parameter at its Default); panics
    /// when a rule refuses it, as CloudFormation would.
    fn new(t: &Value, set: &[(&str, &str)]) -> Self {
        let (c, refused) = Self::checked(t, set);
        assert!(refused.is_empty(), "{set:?} refused: {refused:?}");
        c
    }

    /// The configuration and the rules that refuse it: (rule name, AssertDescription).
    fn checked(t: &Value, set: &[(&str, &str)]) -> (Self, Vec<(String, String)>) {
        let set: Vec<_> = PAGED.iter().chain(set).copied().collect();
        let mut params = BTreeMap::new();
        let mut lists = BTreeSet::new();
        for (name, p) in get(t, "Parameters")
            .and_then(Value::as_mapping)
            .expect("Parameters")
        {
            let name = name.as_str().expect("parameter name").to_owned();
            if str_at(p, "Type") == Some("CommaDelimitedList") {
                lists.insert(name.clone());
            }
            let value = get(p, "Default").map(scalar_text).or_else(|| {
                REQUIRED
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| (*v).to_owned())
            });
            params.insert(
                name.clone(),
                value.unwrap_or_else(|| panic!("{name}: no Default; add a value to REQUIRED")),
            );
        }
        for (name, value) in &set {
            assert!(params.contains_key(*name), "no parameter {name}");
            params.insert((*name).to_owned(), (*value).to_owned());
        }
        let mut c = Self {
            params,
            lists,
            conditions: BTreeMap::new(),
        };
        let conditions = get(t, "Conditions")
            .and_then(Value::as_mapping)
            .expect("Conditions");
        // Conditions may name others (`!Condition X`): evaluate until every one has a value.
        while c.conditions.len() < conditions.len() {
            let before = c.conditions.len();
            for (name, expr) in conditions {
                let name = name.as_str().expect("condition name");
                if !c.conditions.contains_key(name) {
                    if let Some(v) = c.condition_expr(expr) {
                        c.conditions.insert(name.to_owned(), v);
                    }
                }
            }
            assert!(
                c.conditions.len() > before,
                "conditions refer to each other in a cycle"
            );
        }
        // CloudFormation refuses a parameter set that breaks a rule.
        let mut refused = Vec::new();
        if let Some(rules) = get(t, "Rules").and_then(Value::as_mapping) {
            for (name, rule) in rules {
                let applies = plain(rule)
                    .as_mapping()
                    .and_then(|m| m.get("RuleCondition"))
                    .is_none_or(|e| c.condition_expr(e).expect("rule condition"));
                if !applies {
                    continue;
                }
                for a in get(rule, "Assertions")
                    .and_then(Value::as_sequence)
                    .unwrap()
                {
                    let assert = plain(a).as_mapping().unwrap().get("Assert").unwrap();
                    if !c.condition_expr(assert).expect("assertion") {
                        refused.push((
                            name.as_str().expect("rule name").to_owned(),
                            str_at(a, "AssertDescription")
                                .unwrap_or_default()
                                .to_owned(),
                        ));
                    }
                }
            }
        }
        (c, refused)
    }

    fn condition(&self, name: &str) -> bool {
        *self
            .conditions
            .get(name)
            .unwrap_or_else(|| panic!("no condition {name}"))
    }

    /// The value of a condition expression; None while a condition it names has none yet.
    fn condition_expr(&self, v: &Value) -> Option<bool> {
        let (f, arg) = intrinsic(v).unwrap_or_else(|| panic!("not a condition: {v:?}"));
        let args = || plain(arg).as_sequence().expect("a list of arguments");
        Some(match f.as_str() {
            "Equals" => self.text(&args()[0]) == self.text(&args()[1]),
            "Not" => !self.condition_expr(&args()[0])?,
            "And" => {
                let vs: Option<Vec<bool>> = args().iter().map(|a| self.condition_expr(a)).collect();
                vs?.into_iter().all(|b| b)
            }
            "Or" => {
                let vs: Option<Vec<bool>> = args().iter().map(|a| self.condition_expr(a)).collect();
                vs?.into_iter().any(|b| b)
            }
            "Condition" => *self.conditions.get(plain(arg).as_str().expect("a name"))?,
            // A rule function (Rules only): every member of the list equals the value.
            "EachMemberEquals" => {
                let value = self.text(&args()[1]);
                self.list(&args()[0]).iter().all(|m| *m == value)
            }
            other => panic!("condition function {other} is not evaluated here"),
        })
    }

    /// A string value in a condition: a literal, `!Ref Parameter`, or `!Join [delim, list]`.
    fn text(&self, v: &Value) -> String {
        match intrinsic(v) {
            Some((f, arg)) if f == "Ref" => self.param(plain(arg).as_str().unwrap()).to_owned(),
            Some((f, arg)) if f == "Join" => {
                let args = plain(arg).as_sequence().expect("!Join [delimiter, list]");
                self.list(&args[1]).join(&self.text(&args[0]))
            }
            Some((f, _)) => panic!("{f} in a condition is not evaluated here"),
            None => scalar_text(v),
        }
    }

    fn list(&self, v: &Value) -> Vec<String> {
        match intrinsic(v) {
            Some((f, arg)) if f == "Ref" => {
                let name = plain(arg).as_str().unwrap();
                assert!(self.lists.contains(name), "{name} is not a list parameter");
                self.param(name)
                    .split(',')
                    .map(|s| s.trim().to_owned())
                    .collect()
            }
            _ => plain(v)
                .as_sequence()
                .expect("a list")
                .iter()
                .map(|i| self.text(i))
                .collect(),
        }
    }

    fn param(&self, name: &str) -> &str {
        self.params
            .get(name)
            .unwrap_or_else(|| panic!("no parameter {name}"))
    }

    /// The value with every `!If` replaced by its branch; None for `AWS::NoValue`.
    fn resolve(&self, v: &Value) -> Option<Value> {
        if is_no_value(v) {
            return None;
        }
        if let Some((f, arg)) = intrinsic(v) {
            if f == "If" {
                let args = plain(arg).as_sequence().expect("!If [condition, a, b]");
                let name = plain(&args[0]).as_str().expect("a condition name");
                return self.resolve(&args[if self.condition(name) { 1 } else { 2 }]);
            }
        }
        Some(match v {
            Value::Tagged(t) => Value::Tagged(Box::new(TaggedValue {
                tag: t.tag.clone(),
                value: self.resolve(&t.value)?,
            })),
            Value::Sequence(items) => {
                Value::Sequence(items.iter().filter_map(|i| self.resolve(i)).collect())
            }
            Value::Mapping(m) => {
                let mut out = Mapping::new();
                for (k, val) in m {
                    if let Some(r) = self.resolve(val) {
                        out.insert(k.clone(), r);
                    }
                }
                Value::Mapping(out)
            }
            other => other.clone(),
        })
    }
}

/// The template as deployed with `set` (every other parameter at its Default): resources and
/// outputs whose `Condition` is false are gone, `!If`s are resolved, `AWS::NoValue` removed.
fn configured(t: &Value, set: &[(&str, &str)]) -> Value {
    let c = Configuration::new(t, set);
    let mut out = Mapping::new();
    for (section, v) in plain(t).as_mapping().expect("a template") {
        let v = match section.as_str() {
            Some("Resources" | "Outputs") => {
                let mut kept = Mapping::new();
                for (id, r) in plain(v).as_mapping().unwrap() {
                    let on = str_at(r, "Condition").is_none_or(|name| c.condition(name));
                    if on {
                        kept.insert(id.clone(), c.resolve(r).expect("a resource"));
                    }
                }
                Value::Mapping(kept)
            }
            Some("Globals") => c.resolve(v).expect("Globals"),
            _ => v.clone(),
        };
        out.insert(section.clone(), v);
    }
    Value::Mapping(out)
}

fn config(set: &[(&str, &str)]) -> Value {
    configured(&template(), set)
}

/// `set` followed by `more` (a later value wins).
fn and(set: Params, more: Params) -> Vec<(&'static str, &'static str)> {
    set.iter().chain(more).copied().collect()
}

/// The serverless function whose `CodeUri` is `functions/<crate_dir>`, if the configuration has it.
fn find_function<'a>(t: &'a Value, crate_dir: &str) -> Option<(String, &'a Value)> {
    let want = format!("functions/{crate_dir}");
    of_type(t, "AWS::Serverless::Function")
        .into_iter()
        .find(|(_, f)| str_at(props(f), "CodeUri").map(|c| c.trim_end_matches('/')) == Some(&want))
}

fn resource<'a>(t: &'a Value, id: &str) -> Option<&'a Value> {
    resources(t)
        .into_iter()
        .find(|(i, _)| i == id)
        .map(|(_, r)| r)
}

/// The routes of a configuration without an IAM or JWT authorizer: `(logical id, route key)`
/// (a route without `AuthorizationType` is NONE).
fn unauthenticated_routes(t: &Value) -> Vec<(String, String)> {
    of_type(t, "AWS::ApiGatewayV2::Route")
        .into_iter()
        .filter(|(_, r)| {
            !matches!(
                str_at(props(r), "AuthorizationType"),
                Some("AWS_IAM" | "JWT")
            )
        })
        .map(|(id, r)| (id, str_at(props(r), "RouteKey").unwrap().to_owned()))
        .collect()
}

/// Checks every authenticated route of a configuration: IAM or JWT, a JWT route with a scope and
/// the JWT authorizer of the issuer/audience parameters. Returns the route keys checked.
fn authenticated_routes_are_sound(t: &Value) -> Vec<String> {
    let mut checked = Vec::new();
    for (id, r) in of_type(t, "AWS::ApiGatewayV2::Route") {
        let p = props(r);
        let kind = str_at(p, "AuthorizationType").unwrap_or("NONE");
        if kind == "NONE" {
            continue;
        }
        assert!(
            matches!(kind, "AWS_IAM" | "JWT"),
            "{id}: authorization {kind}"
        );
        if kind == "JWT" {
            assert!(
                get(p, "AuthorizationScopes")
                    .and_then(Value::as_sequence)
                    .is_some_and(|s| !s.is_empty()),
                "{id}: a JWT route requires a scope"
            );
            let authorizer =
                logical_id_of(raw(p, "AuthorizerId")).expect("a JWT route names its authorizer");
            let a = props(resource(t, &authorizer).expect("the JWT authorizer"));
            assert_eq!(str_at(a, "AuthorizerType"), Some("JWT"));
            let jwt = get(a, "JwtConfiguration").expect("JwtConfiguration");
            assert_eq!(
                logical_id_of(raw(jwt, "Issuer")).as_deref(),
                Some("JwtIssuer")
            );
            assert_eq!(
                logical_id_of(raw(jwt, "Audience")).as_deref(),
                Some("JwtAudience")
            );
        } else {
            assert!(
                get(p, "AuthorizerId").is_none(),
                "{id}: IAM needs no authorizer"
            );
        }
        checked.push(str_at(p, "RouteKey").unwrap().to_owned());
    }
    checked
}

#[test]
fn every_route_is_authenticated_and_iam_is_the_default() {
    let t = template();
    // No unauthenticated choice exists, and IAM is what a deploy without parameters gets.
    let auth = parameter(&t, "CheckoutAuth");
    assert_eq!(str_at(auth, "Default"), Some("IAM"));
    let allowed: Vec<&str> = get(auth, "AllowedValues")
        .and_then(Value::as_sequence)
        .expect("CheckoutAuth AllowedValues")
        .iter()
        .filter_map(|v| plain(v).as_str())
        .collect();
    assert_eq!(allowed, ["IAM", "JWT"]);

    // Routes come only from plain ApiGatewayV2 routes, each checked here: no SAM API event or
    // SAM API resource could add one without an authorizer.
    for (id, f) in of_type(&t, "AWS::Serverless::Function") {
        if let Some(events) = get(props(f), "Events").and_then(Value::as_mapping) {
            for (name, e) in events {
                let ty = str_at(e, "Type").unwrap_or_default();
                assert!(
                    !matches!(ty, "HttpApi" | "Api"),
                    "{id}: event {name:?} adds an API route outside the checked ones"
                );
            }
        }
    }
    for ty in ["AWS::Serverless::HttpApi", "AWS::Serverless::Api"] {
        assert!(
            of_type(&t, ty).is_empty(),
            "{ty}: routes are declared as ApiGatewayV2 routes"
        );
    }

    // In every configuration, IAM and JWT: the checkout routes are authenticated, and the only
    // route without an authorizer is Stripe's webhook, when its secret is set (Stripe
    // cannot present IAM or JWT credentials; the events function verifies Stripe's signature).
    for (name, set) in CONFIGURATIONS {
        for auth in [DEFAULTS, JWT] {
            let c = config(&and(set, auth));
            let what = format!(
                "{name}, CheckoutAuth {}",
                if auth.is_empty() { "IAM" } else { "JWT" }
            );
            let checked = authenticated_routes_are_sound(&c);
            for key in [
                "POST /orders/{order_id}/charge",
                "GET /orders/{order_id}/charge",
                "POST /orders/{order_id}/refunds/{refund_id}",
                "GET /orders/{order_id}/refunds/{refund_id}",
            ] {
                assert!(
                    checked.iter().any(|k| k == key),
                    "{what}: {key} is authenticated"
                );
            }
            let public = unauthenticated_routes(&c);
            let webhook = Configuration::new(&t, &and(set, auth)).condition("HasStripeWebhook");
            if webhook {
                assert_eq!(
                    public,
                    [("WebhookRoute".to_owned(), "POST /stripe/webhook".to_owned())],
                    "{what}: the only route without an authorizer"
                );
            } else {
                assert!(
                    public.is_empty(),
                    "{what}: a route without an authorizer: {public:?}"
                );
            }
        }
    }

    let c = config(WEBHOOK);
    let webhook = resource(&c, "WebhookRoute").expect("the webhook route");
    let target: Vec<String> = {
        let mut out = Vec::new();
        strings(raw_prop(webhook, "Target"), &mut out);
        out
    };
    assert_eq!(target, ["integrations/${WebhookIntegration}"]);
    let integration = resource(&c, "WebhookIntegration").expect("WebhookIntegration");
    assert_eq!(
        logical_id_of(raw_prop(integration, "IntegrationUri")).as_deref(),
        Some("WebhookFunction")
    );

    let checkout = of_type(&t, "AWS::ApiGatewayV2::Route")
        .into_iter()
        .find(|(_, r)| str_at(props(r), "RouteKey") == Some("POST /orders/{order_id}/charge"))
        .expect("the checkout route");
    // IAM unless the parameter says JWT: the condition that picks JWT is CheckoutAuth = JWT.
    let auth_type = raw_prop(checkout.1, "AuthorizationType");
    let Value::Tagged(tagged) = auth_type else {
        panic!("the checkout route's authorization follows CheckoutAuth")
    };
    let seq = plain(&tagged.value)
        .as_sequence()
        .expect("!If [cond, JWT, AWS_IAM]");
    assert_eq!(
        (plain(&seq[1]).as_str(), plain(&seq[2]).as_str()),
        (Some("JWT"), Some("AWS_IAM"))
    );
    let condition = plain(&seq[0]).as_str().expect("condition name");
    let cond = get(get(&t, "Conditions").unwrap(), condition).expect("the condition");
    let mut words = Vec::new();
    strings(cond, &mut words);
    assert_eq!(words, ["CheckoutAuth", "JWT"], "{condition}");
}

#[test]
fn the_invoke_grant_names_the_checkout_routes_and_the_caller_roles_only() {
    let t = template();
    let mut grants = Vec::new();
    for (id, r) in resources(&t) {
        let mut found = Vec::new();
        statements(r, id.clone(), &mut found);
        for (path, st) in found {
            let mut actions = Vec::new();
            strings(get(&st, "Action").unwrap(), &mut actions);
            if actions.iter().any(|a| a.starts_with("execute-api:")) {
                grants.push((id.clone(), path, st));
            }
        }
    }
    // Exactly one statement per authenticated route, each naming that route of this API's stage:
    // the route key with {params} as `*`.
    let (api_id, _) = of_type(&t, "AWS::ApiGatewayV2::Api")
        .into_iter()
        .next()
        .expect("the HTTP API");
    let route_arn = |route_key: &str| {
        let (method, route_path) = route_key.split_once(' ').unwrap();
        let arn_path: Vec<&str> = route_path
            .split('/')
            .map(|seg| if seg.starts_with('{') { "*" } else { seg })
            .collect();
        format!(
            "arn:${{AWS::Partition}}:execute-api:${{AWS::Region}}:${{AWS::AccountId}}:${{{api_id}}}/$default/{method}{}",
            arn_path.join("/")
        )
    };
    // Every route but Stripe's webhook, which callers never invoke (it has no authorizer).
    let mut want: Vec<String> = of_type(&t, "AWS::ApiGatewayV2::Route")
        .iter()
        .filter(|(id, _)| id != "WebhookRoute")
        .map(|(_, r)| route_arn(str_at(props(r), "RouteKey").unwrap()))
        .collect();
    want.sort();
    let mut granted: Vec<String> = grants
        .iter()
        .map(|(_, path, st)| {
            assert_eq!(str_at(st, "Action"), Some("execute-api:Invoke"), "{path}");
            assert_eq!(str_at(st, "Effect"), Some("Allow"), "{path}");
            assert!(is_route_grant(st), "{path}: one route");
            str_at(st, "Resource").unwrap().to_owned()
        })
        .collect();
    granted.sort();
    assert_eq!(granted, want);
    assert!(want.iter().any(|a| a.ends_with("/POST/orders/*/charge")));

    // Two policies, each granted to its own caller-role parameter and nothing else: creating
    // charges and reading (CheckoutCallerRoleNames), and moving money back out or ending an
    // authorization (RefundCallerRoleNames), so a role that only creates charges cannot refund.
    let owners: BTreeSet<&String> = grants.iter().map(|(id, _, _)| id).collect();
    assert_eq!(
        owners.iter().map(|o| o.as_str()).collect::<Vec<_>>(),
        ["CheckoutInvokePolicy", "RefundInvokePolicy"]
    );
    let routes_of = |policy: &str| -> Vec<String> {
        let mut r: Vec<String> = grants
            .iter()
            .filter(|(id, _, _)| id == policy)
            .map(|(_, _, st)| {
                let arn = str_at(st, "Resource").unwrap();
                let (_, route) = arn.split_once("/$default/").unwrap();
                route.to_owned()
            })
            .collect();
        r.sort();
        r
    };
    assert_eq!(
        routes_of("RefundInvokePolicy"),
        [
            "POST/orders/*/cancel",
            "POST/orders/*/capture",
            "POST/orders/*/refunds/*"
        ]
    );
    assert!(routes_of("CheckoutInvokePolicy")
        .iter()
        .all(|r| r == "POST/orders/*/charge" || r.starts_with("GET/")));
    for (policy_id, parameter_name) in [
        ("CheckoutInvokePolicy", "CheckoutCallerRoleNames"),
        ("RefundInvokePolicy", "RefundCallerRoleNames"),
    ] {
        let policy = resource(&t, policy_id).unwrap();
        assert_eq!(str_at(policy, "Type"), Some("AWS::IAM::ManagedPolicy"));
        let p = props(policy);
        assert!(get(p, "Users").is_none() && get(p, "Groups").is_none());
        let roles: Vec<String> = branches(raw(p, "Roles"))
            .into_iter()
            .filter_map(|b| match b {
                Value::Tagged(t) if t.tag == "Ref" => plain(&t.value).as_str().map(str::to_owned),
                _ => None,
            })
            .filter(|r| r != "AWS::NoValue")
            .collect();
        assert_eq!(roles, [parameter_name], "{policy_id}");
        assert_eq!(
            str_at(parameter(&t, parameter_name), "Type"),
            Some("CommaDelimitedList")
        );
    }
}

/// Under JWT the routes that move money back out or end an authorization (refund, capture,
/// cancel) ask for JwtRefundScope; creating a charge and every read ask for JwtScope.
#[test]
fn money_out_routes_ask_for_their_own_jwt_scope() {
    let t = template();
    let mut by_scope: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (id, r) in of_type(&t, "AWS::ApiGatewayV2::Route") {
        if id == "WebhookRoute" {
            continue;
        }
        let p = props(r);
        let scope = branches(raw(p, "AuthorizationScopes"))
            .into_iter()
            .find_map(|b| {
                b.as_sequence()?.iter().find_map(|v| match v {
                    Value::Tagged(t) if t.tag == "Ref" => {
                        plain(&t.value).as_str().map(str::to_owned)
                    }
                    _ => None,
                })
            })
            .unwrap_or_else(|| panic!("{id}: no scope"));
        by_scope
            .entry(scope)
            .or_default()
            .push(str_at(p, "RouteKey").unwrap().to_owned());
    }
    let mut refund_routes = by_scope.remove("JwtRefundScope").unwrap_or_default();
    refund_routes.sort();
    assert_eq!(
        refund_routes,
        [
            "POST /orders/{order_id}/cancel",
            "POST /orders/{order_id}/capture",
            "POST /orders/{order_id}/refunds/{refund_id}"
        ]
    );
    let charge_routes = by_scope.remove("JwtScope").unwrap_or_default();
    assert!(charge_routes.contains(&"POST /orders/{order_id}/charge".to_owned()));
    assert!(charge_routes
        .iter()
        .all(|r| r == "POST /orders/{order_id}/charge" || r.starts_with("GET ")));
    assert!(by_scope.is_empty(), "{by_scope:?}");
    assert_ne!(
        str_at(parameter(&t, "JwtRefundScope"), "Default"),
        str_at(parameter(&t, "JwtScope"), "Default")
    );
}

#[test]
fn the_outbox_stream_feeds_a_least_privilege_relay_with_a_dlq_and_alarms() {
    // Defaults: the outcome bus is the only bus (the partner bus is Stripe events in's).
    let t = config(ALARM_TOPIC);
    let (table_id, table) = of_type(&t, "AWS::DynamoDB::Table")
        .into_iter()
        .next()
        .unwrap();
    assert_eq!(
        get(props(table), "StreamSpecification").and_then(|s| str_at(s, "StreamViewType")),
        Some("NEW_AND_OLD_IMAGES"),
        "the relay compares old and new images"
    );
    let buses = of_type(&t, "AWS::Events::EventBus");
    assert_eq!(buses.len(), 1);
    let (bus_id, bus) = &buses[0];
    let mut name = Vec::new();
    strings(get(props(bus), "Name").unwrap(), &mut name);
    assert_eq!(name, ["charge-once-${Stage}"]);

    let (notify_id, notify) = function(&t, "notify");
    let mut found = Vec::new();
    statements(
        get(props(notify), "Policies").unwrap(),
        String::new(),
        &mut found,
    );
    let mut by_action: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (_, st) in &found {
        let (mut actions, mut res) = (Vec::new(), Vec::new());
        strings(get(st, "Action").unwrap(), &mut actions);
        strings(get(st, "Resource").unwrap(), &mut res);
        for a in actions {
            by_action.entry(a).or_default().extend(res.clone());
        }
    }
    assert_eq!(
        by_action["events:PutEvents"],
        [format!("{bus_id}.Arn")],
        "that bus only"
    );
    for a in [
        "dynamodb:GetRecords",
        "dynamodb:GetShardIterator",
        "dynamodb:DescribeStream",
    ] {
        assert_eq!(by_action[a], [format!("{table_id}.StreamArn")], "{a}");
    }
    assert!(
        by_action.keys().all(|a| a.starts_with("events:")
            || a.starts_with("dynamodb:")
            || a == "sqs:SendMessage"),
        "{by_action:?}"
    );
    assert!(
        !by_action.contains_key("dynamodb:PutItem")
            && !by_action.contains_key("dynamodb:UpdateItem"),
        "the relay never writes the table"
    );
    // It reads a settled outcome's record back before publishing it: on the table only.
    assert_eq!(
        by_action["dynamodb:GetItem"],
        [format!("{table_id}.Arn")],
        "GetItem on the table"
    );

    let mappings: Vec<_> = of_type(&t, "AWS::Lambda::EventSourceMapping")
        .into_iter()
        .filter(|(_, m)| logical_id_of(raw_prop(m, "FunctionName")).as_deref() == Some(&notify_id))
        .collect();
    assert_eq!(mappings.len(), 1);
    let m = props(mappings[0].1);
    let mut source = Vec::new();
    strings(raw(m, "EventSourceArn"), &mut source);
    assert_eq!(source, [format!("{table_id}.StreamArn")]);
    assert_eq!(str_at(m, "StartingPosition"), Some("TRIM_HORIZON"));
    assert_eq!(
        get(m, "BisectBatchOnFunctionError").and_then(Value::as_bool),
        Some(true)
    );
    let types: Vec<_> = get(m, "FunctionResponseTypes")
        .and_then(Value::as_sequence)
        .map(|s| s.iter().filter_map(|v| plain(v).as_str()).collect())
        .unwrap_or_default();
    assert_eq!(types, ["ReportBatchItemFailures"]);
    assert!(number(get(m, "MaximumRetryAttempts").unwrap()) >= 1);
    let dlq = get(m, "DestinationConfig")
        .and_then(|d| get(d, "OnFailure"))
        .map(|o| logical_id_of(raw(o, "Destination")).unwrap())
        .expect("an on-failure destination");
    assert_eq!(by_action["sqs:SendMessage"], [format!("{dlq}.Arn")]);

    let alarm = of_type(&t, "AWS::CloudWatch::Alarm")
        .into_iter()
        .find(|(_, a)| {
            get(props(a), "Dimensions")
                .and_then(Value::as_sequence)
                .is_some_and(|d| {
                    d.iter().any(|d| {
                        let mut v = Vec::new();
                        strings(raw(d, "Value"), &mut v);
                        v == [format!("{dlq}.QueueName")]
                    })
                })
        })
        .expect("an alarm on the relay's DLQ");
    let mut actions = Vec::new();
    strings(get(props(alarm.1), "AlarmActions").unwrap(), &mut actions);
    assert!(actions.iter().any(|a| a == "AlarmTopicArn"));
}

#[test]
fn the_api_writes_json_access_logs_and_pages_on_5xx() {
    let t = template();
    let (api_id, _) = of_type(&t, "AWS::ApiGatewayV2::Api")
        .into_iter()
        .next()
        .expect("the HTTP API");
    let stages = of_type(&t, "AWS::ApiGatewayV2::Stage");
    assert_eq!(stages.len(), 1);
    let stage = props(stages[0].1);
    let logs = get(stage, "AccessLogSettings").expect("access logging on");
    let group = logical_id_of(raw(logs, "DestinationArn")).expect("a log group");
    let group = resources(&t)
        .into_iter()
        .find(|(i, _)| *i == group)
        .unwrap()
        .1;
    assert_eq!(str_at(group, "Type"), Some("AWS::Logs::LogGroup"));
    assert_eq!(
        logical_id_of(raw_prop(group, "RetentionInDays")).as_deref(),
        Some("LogRetentionDays"),
        "the stack's retention"
    );
    let format: serde_json::Value =
        serde_json::from_str(str_at(logs, "Format").expect("Format")).expect("JSON access log");
    for key in [
        "requestId",
        "sourceIp",
        "callerArn",
        "jwtSub",
        "routeKey",
        "status",
        "latencyMs",
    ] {
        assert!(format.get(key).is_some(), "access log lacks {key}");
    }

    let alarms: Vec<_> = of_type(&t, "AWS::CloudWatch::Alarm")
        .into_iter()
        .filter(|(_, a)| {
            let p = props(a);
            str_at(p, "Namespace") == Some("AWS/ApiGateway")
                && str_at(p, "MetricName") == Some("5xx")
        })
        .collect();
    assert_eq!(alarms.len(), 1, "one API 5xx alarm");
    let p = props(alarms[0].1);
    let dims = get(p, "Dimensions").and_then(Value::as_sequence).unwrap();
    assert!(dims.iter().any(|d| str_at(d, "Name") == Some("ApiId")
        && logical_id_of(raw(d, "Value")).as_deref() == Some(api_id.as_str())));
    let mut actions = Vec::new();
    strings(get(p, "AlarmActions").expect("AlarmActions"), &mut actions);
    assert!(actions.iter().any(|a| a == "AlarmTopicArn"), "{actions:?}");
}

#[test]
fn stripe_is_reached_over_tls_only() {
    let t = template();
    let base = parameter(&t, "StripeApiBase");
    assert!(str_at(base, "Default").unwrap().starts_with("https://"));
    // https:// to any host; plain http:// only to a loopback simulator (what `make deploy-local`
    // points the stack at), and only to hosts the functions' own check also lets through.
    let pattern = str_at(base, "AllowedPattern").unwrap();
    let alternatives: Vec<&str> = pattern.split("$|").collect();
    assert_eq!(
        alternatives,
        [
            "^https://[A-Za-z0-9.-]+(:[0-9]+)?/?",
            r"^http://(127\.0\.0\.1|localhost)(:[0-9]+)?/?$"
        ],
        "the parameter admits https://, and http:// to loopback only"
    );
    for host in ["127.0.0.1", "localhost"] {
        let url = format!("http://{host}:12111");
        assert_eq!(
            charge_once::adapters::stripe::check_api_base(&url),
            Ok(()),
            "{url}"
        );
    }
    assert!(charge_once::adapters::stripe::check_api_base("http://stripe.example:80").is_err());
}

/// The alarms of the stack by logical id.
fn alarms(t: &Value) -> Vec<(String, &Value)> {
    of_type(t, "AWS::CloudWatch::Alarm")
}

/// Whether an alarm notifies the alarm topic (`AlarmActions: !If [HasAlarmTopic, [!Ref
/// AlarmTopicArn], …]`), on alarm and on recovery.
fn notifies_alarm_topic(alarm: &Value) -> bool {
    ["AlarmActions", "OKActions"].iter().all(|k| {
        let mut texts = Vec::new();
        if let Some(v) = plain(props(alarm)).as_mapping().and_then(|m| m.get(*k)) {
            strings(v, &mut texts);
        }
        texts.iter().any(|s| s == "AlarmTopicArn")
    })
}

/// The alarm on `metric` in `namespace` whose dimensions include `dimension` (name, value as
/// written: a literal or the logical id a `!Ref`/`!GetAtt` names), looking into metric math too.
fn alarm_on<'a>(
    t: &'a Value,
    namespace: &str,
    metric: &str,
    dimension: (&str, &str),
) -> Option<(String, &'a Value)> {
    let matches = |stat: &Value| {
        str_at(stat, "Namespace") == Some(namespace)
            && str_at(stat, "MetricName") == Some(metric)
            && get(stat, "Dimensions")
                .and_then(Value::as_sequence)
                .is_some_and(|dims| {
                    dims.iter().any(|d| {
                        str_at(d, "Name") == Some(dimension.0)
                            && (str_at(d, "Value") == Some(dimension.1)
                                || plain(d)
                                    .as_mapping()
                                    .and_then(|m| m.get("Value"))
                                    .and_then(logical_id_of)
                                    .as_deref()
                                    == Some(dimension.1))
                    })
                })
    };
    alarms(t).into_iter().find(|(_, a)| {
        let p = props(a);
        matches(p)
            || get(p, "Metrics")
                .and_then(Value::as_sequence)
                .is_some_and(|ms| {
                    ms.iter().any(|m| {
                        get(m, "MetricStat")
                            .and_then(|s| get(s, "Metric"))
                            .is_some_and(matches)
                    })
                })
    })
}

#[test]
fn every_state_that_needs_a_person_has_an_alarm_on_the_alarm_topic_with_a_first_command() {
    // Every alarm exists in this configuration (the events function's only with events in).
    let t = config(&and(EVERYTHING, ALARM_TOPIC));
    // (1) review is loud, (2) every failure class, (4) poison. The API 5xx alarm belongs to the
    // API section and is not asserted here.
    let wanted = [
        ("ChargeOnce", "InReview", ("Function", "reconciler")),
        // The reconciler's heartbeat.
        ("ChargeOnce", "Ticks", ("Function", "reconciler")),
        ("ChargeOnce", "SentToReview", ("Function", "charge")),
        ("ChargeOnce", "SentToReview", ("Function", "reconciler")),
        (
            "ChargeOnce",
            "CheckoutUnavailable",
            ("Function", "checkout"),
        ),
        (
            "AWS/SQS",
            "ApproximateAgeOfOldestMessage",
            ("QueueName", "ChargeQueue"),
        ),
        ("ChargeOnce", "SendFailures", ("Function", "reconciler")),
        // A record this release cannot read is skipped and pages.
        (
            "ChargeOnce",
            "UnreadableRecords",
            ("Function", "reconciler"),
        ),
        ("ChargeOnce", "SkippedOnError", ("Function", "reconciler")),
        ("ChargeOnce", "PoisonMessages", ("Function", "charge")),
        (
            "AWS/SQS",
            "ApproximateNumberOfMessagesVisible",
            ("QueueName", "ChargeDeadLetterQueue"),
        ),
        (
            "AWS/Lambda",
            "Throttles",
            ("FunctionName", "ChargeFunction"),
        ),
        // The events function's refusals, its suspected double charges, and Stripe
        // contradicting a settled record.
        ("ChargeOnce", "WebhookRejected", ("Function", "webhook")),
        ("ChargeOnce", "SentToReview", ("Function", "webhook")),
        (
            "ChargeOnce",
            "WebhookSettledConflict",
            ("Function", "webhook"),
        ),
        ("AWS/Lambda", "Errors", ("FunctionName", "WebhookFunction")),
        // A refund Stripe failed after it succeeded: the customer was told wrongly.
        (
            "ChargeOnce",
            "RefundFailedAfterSuccess",
            ("Function", "webhook"),
        ),
        // The same news learned by the reconciler's refund watch, with or without events.
        (
            "ChargeOnce",
            "RefundFailedAfterSuccess",
            ("Function", "reconciler"),
        ),
        (
            "ChargeOnce",
            "RefundWatchConflicts",
            ("Function", "reconciler"),
        ),
        // A dispute that took money the order's refunds already gave back: counted wherever
        // the dispute's shell writes it (never in review, so read again), one alarm over both.
        ("ChargeOnce", "DisputeUnreserved", ("Function", "webhook")),
        (
            "ChargeOnce",
            "DisputeUnreserved",
            ("Function", "reconciler"),
        ),
        // An event Stripe does not confirm, and events not processed after the retries.
        ("ChargeOnce", "EventMismatch", ("Function", "webhook")),
        (
            "AWS/SQS",
            "ApproximateNumberOfMessagesVisible",
            ("QueueName", "StripeEventsDeadLetterQueue"),
        ),
        // An event naming a PaymentIntent of an operation in review: evidence for the operator.
        ("ChargeOnce", "WebhookIgnored", ("Reason", "in_review")),
    ];
    for (namespace, metric, dimension) in wanted {
        let (id, alarm) = alarm_on(&t, namespace, metric, dimension)
            .unwrap_or_else(|| panic!("no alarm on {namespace} {metric} {dimension:?}"));
        assert!(notifies_alarm_topic(alarm), "{id}: notifies AlarmTopicArn");
        let description = str_at(props(alarm), "AlarmDescription").unwrap_or_default();
        assert!(
            description.contains("First run:")
                && (description.contains("chargectl") || description.contains("aws ")),
            "{id}: the description says the first command to run: {description}"
        );
    }
    // Every alarm of the stack pages the topic and says what to run first.
    for (id, alarm) in alarms(&t) {
        assert!(notifies_alarm_topic(alarm), "{id}: notifies AlarmTopicArn");
        let description = str_at(props(alarm), "AlarmDescription").unwrap_or_default();
        assert!(description.contains("First run:"), "{id}: {description}");
    }
    // InReview pages only when it lasts longer than one tick: two consecutive periods.
    let in_review = resource(&t, "InReviewAlarm").expect("InReviewAlarm");
    assert_eq!(
        get(props(in_review), "EvaluationPeriods").map(number),
        Some(2)
    );
    assert_eq!(
        get(props(in_review), "DatapointsToAlarm").map(number),
        Some(2)
    );
    // The DLQ alarm that re-arms: metric math on the rise of the depth, not the depth itself.
    let (id, growing) = alarm_on(
        &t,
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        ("QueueName", "ChargeDeadLetterQueue"),
    )
    .filter(|(_, a)| get(props(a), "Metrics").is_some())
    .or_else(|| {
        alarms(&t)
            .into_iter()
            .find(|(_, a)| get(props(a), "Metrics").is_some())
    })
    .expect("a metric-math DLQ alarm");
    let expressions: Vec<String> = get(props(growing), "Metrics")
        .and_then(Value::as_sequence)
        .unwrap()
        .iter()
        .filter_map(|m| str_at(m, "Expression").map(str::to_owned))
        .collect();
    assert_eq!(expressions, ["DIFF(depth)"], "{id}");
    // The queue-age threshold is a parameter.
    let (_, age) = alarm_on(
        &t,
        "AWS/SQS",
        "ApproximateAgeOfOldestMessage",
        ("QueueName", "ChargeQueue"),
    )
    .unwrap();
    assert_eq!(
        logical_id_of(raw_prop(age, "Threshold")).as_deref(),
        Some("QueueAgeAlarmSecs")
    );
    // The stuck bound is a parameter (72 h by default) reaching both functions that decide it.
    let stuck = get(get(&t, "Parameters").unwrap(), "StuckIntentHours").expect("StuckIntentHours");
    assert_eq!(get(stuck, "Default").map(number), Some(72));
    for dir in ["charge", "reconciler"] {
        let (id, f) = function(&t, dir);
        let vars = get(props(f), "Environment")
            .and_then(|e| get(e, "Variables"))
            .unwrap();
        assert_eq!(
            logical_id_of(raw(vars, charge_once::config::STUCK_INTENT_HOURS)).as_deref(),
            Some("StuckIntentHours"),
            "{id}"
        );
    }
}

#[test]
fn the_sdk_timeouts_fit_inside_every_function_timeout() {
    use charge_once::adapters::aws::FUNCTION_TIMEOUTS;
    let t = template();
    let op = FUNCTION_TIMEOUTS.operation.as_secs();
    assert!(FUNCTION_TIMEOUTS.attempt < FUNCTION_TIMEOUTS.operation);
    // The Stripe call at worst: the client's total timeout per try, tries = 1 + retries, + 1 s
    // of backoff.
    let mapping = get(
        get(get(&t, "Mappings").unwrap(), "Stripe").unwrap(),
        "Client",
    )
    .unwrap();
    let stripe_ms = number(get(mapping, "TimeoutMs").unwrap());
    let tries = 1 + number(get(mapping, "MaxNetworkRetries").unwrap());
    let stripe = stripe_ms * tries / 1000 + 1;
    let timeout = |dir: &str| {
        let (_, f) = function(&t, dir);
        number(function_prop(&t, f, "Timeout").unwrap())
    };
    // checkout: PutItem + SendMessage.
    assert!(2 * op < timeout("checkout"), "checkout: 2 x {op} s");
    // charge: per message claim + Stripe + record, a batch in order.
    let (charge_id, _) = function(&t, "charge");
    let batch = of_type(&t, "AWS::Lambda::EventSourceMapping")
        .into_iter()
        .find(|(_, m)| logical_id_of(raw_prop(m, "FunctionName")).as_deref() == Some(&charge_id))
        .map(|(_, m)| number(get(props(m), "BatchSize").unwrap()))
        .unwrap();
    let per_message = 2 * op + stripe;
    assert!(
        batch * per_message < timeout("charge"),
        "charge: {batch} x {per_message} s must fit in {} s",
        timeout("charge")
    );
    // reconciler: the margin it keeps holds one settle (claim + Stripe + record).
    assert!(
        reconciler::handler::SAFETY_MARGIN.as_secs() >= per_message,
        "reconciler margin {:?} < {per_message} s",
        reconciler::handler::SAFETY_MARGIN
    );
    assert!(reconciler::handler::SAFETY_MARGIN.as_secs() < timeout("reconciler"));
    // notify: a full stream batch published in PutEvents calls of MAX_BATCH entries, in order,
    // each at its bound, and at least as long again for DLQ copies of unreadable records.
    let (notify_id, _) = function(&t, "notify");
    let stream_batch = of_type(&t, "AWS::Lambda::EventSourceMapping")
        .into_iter()
        .find(|(_, m)| logical_id_of(raw_prop(m, "FunctionName")).as_deref() == Some(&notify_id))
        .map(|(_, m)| number(get(props(m), "BatchSize").expect("BatchSize")))
        .expect("the notify function's stream mapping");
    let puts = stream_batch.div_ceil(charge_once::ports::MAX_BATCH as u64);
    // The read-back of the batch's settled outcomes runs at once: one call's bound.
    assert!(
        op + 2 * puts * op <= timeout("notify"),
        "notify: a read-back of {op} s and {puts} PutEvents x {op} s, twice over, must fit in {} s",
        timeout("notify")
    );
    // The doc's table names each function's timeout as the template sets it.
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/src/adapters/aws.rs"
    ))
    .unwrap();
    for dir in [
        "checkout",
        "charge",
        "events",
        "reconciler",
        "notify",
        "audit",
    ] {
        let secs = timeout(dir);
        assert!(
            doc.contains(&format!("//! - {dir} ({secs} s")),
            "shared/src/adapters/aws.rs states {dir}'s timeout as {secs} s"
        );
    }
}

/// The Stripe client configured from the template's `Stripe` mapping (the values the functions
/// get as STRIPE_TIMEOUT_MS, STRIPE_CONNECT_TIMEOUT_MS, STRIPE_MAX_NETWORK_RETRIES).
fn stripe_client_of_the_template(t: &Value) -> charge_once::adapters::stripe::StripeConfig {
    use std::time::Duration;

    use charge_once::adapters::stripe::{SecretKey, StripeConfig};
    let mapping = get(
        get(get(t, "Mappings").unwrap(), "Stripe").unwrap(),
        "Client",
    )
    .unwrap();
    let mut c = StripeConfig::new("https://api.stripe.com", SecretKey::new("sk_test_unused"));
    c.timeout = Duration::from_millis(number(get(mapping, "TimeoutMs").unwrap()));
    c.connect_timeout = Duration::from_millis(number(get(mapping, "ConnectTimeoutMs").unwrap()));
    c.max_network_retries =
        u32::try_from(number(get(mapping, "MaxNetworkRetries").unwrap())).unwrap();
    c
}

#[test]
fn the_events_function_outlives_five_dynamodb_calls_and_a_worst_case_stripe_call() {
    use std::time::Duration;

    use charge_once::adapters::aws::FUNCTION_TIMEOUTS;
    let t = config(EVERYTHING);
    let (id, f) = function(&t, "events");
    let timeout = Duration::from_secs(number(function_prop(&t, f, "Timeout").unwrap()));
    // Inbox put, get, claim, record, inbox delete, each at its SDK bound; one Stripe retrieve at
    // its worst (10 s x 2 + 250 ms = 20.25 s): 35.25 s, with at least 2 s to spare.
    let stripe = stripe_client_of_the_template(&t).worst_case_call();
    assert_eq!(
        stripe,
        Duration::from_millis(20_250),
        "the contract's figure"
    );
    let work = FUNCTION_TIMEOUTS.operation * 5 + stripe;
    assert!(
        timeout >= work + Duration::from_secs(2),
        "{id}: Timeout {timeout:?} < 5 x {:?} + {stripe:?} + 2 s",
        FUNCTION_TIMEOUTS.operation
    );
    // The HTTP path: the integration waits the HTTP API's maximum, 30 s, explicitly, and the
    // handler's own bound on an HTTP delivery fits under it.
    let integration = resource(&t, "WebhookIntegration").expect("WebhookIntegration");
    let wait = Duration::from_millis(number(get(props(integration), "TimeoutInMillis").unwrap()));
    assert_eq!(wait, Duration::from_secs(30));
    assert!(events::handler::HTTP_BUDGET < wait && events::handler::HTTP_BUDGET < timeout);
    // A runtime that sends no usable deadline (cargo lambda watch) gets the template's timeout.
    assert_eq!(events::handler::FUNCTION_TIMEOUT, timeout, "{id}");
}

/// The one `AWS::Lambda::Permission` on the events function in this configuration.
fn the_events_function_permission(t: &Value) -> &Value {
    let permissions: Vec<_> = of_type(t, "AWS::Lambda::Permission")
        .into_iter()
        .filter(|(_, p)| {
            logical_id_of(raw_prop(p, "FunctionName")).as_deref() == Some("WebhookFunction")
        })
        .collect();
    assert_eq!(
        permissions.len(),
        1,
        "one permission on the events function"
    );
    permissions[0].1
}

/// `(actions, resources)` of every statement of a function's inline policies.
fn function_grants(t: &Value, dir: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let (_, f) = function(t, dir);
    let mut found = Vec::new();
    statements(
        get(props(f), "Policies").unwrap(),
        String::new(),
        &mut found,
    );
    found
        .iter()
        .map(|(_, st)| {
            let (mut a, mut r) = (Vec::new(), Vec::new());
            strings(get(st, "Action").unwrap(), &mut a);
            if let Some(v) = plain(st).as_mapping().and_then(|m| m.get("Resource")) {
                if let Some(id) = logical_id_of(v) {
                    r.push(id);
                }
                strings(v, &mut r);
            }
            (a, r)
        })
        .collect()
}

#[test]
fn least_privilege_the_charge_role_sends_only_to_the_dlq_and_nobody_reads_items_it_never_reads() {
    let t = template();
    let charge = function_grants(&t, "charge");
    let sends: Vec<&Vec<String>> = charge
        .iter()
        .filter(|(a, _)| a.iter().any(|x| x == "sqs:SendMessage"))
        .map(|(_, r)| r)
        .collect();
    assert_eq!(sends.len(), 1);
    assert!(
        sends[0].contains(&"ChargeDeadLetterQueue".to_owned()),
        "{sends:?}"
    );
    assert!(!sends[0].contains(&"ChargeQueue".to_owned()));
    // Claim, record and reschedule are conditional UpdateItems returning the item; an outcome
    // written with its charge's change is a TransactWriteItems, which returns no item, and is read
    // back: the charge function and the reconciler GetItem the operations table, and nothing else.
    for dir in ["charge", "reconciler"] {
        for (actions, resources) in function_grants(&t, dir) {
            if actions.iter().any(|a| a == "dynamodb:GetItem") {
                assert!(
                    resources.iter().all(|r| r.starts_with("OperationsTable")),
                    "{dir}: {resources:?}"
                );
            }
        }
    }
    let (_, charge_fn) = function(&t, "charge");
    let vars = get(props(charge_fn), "Environment")
        .and_then(|e| get(e, "Variables"))
        .unwrap();
    assert_eq!(
        logical_id_of(raw(vars, charge_once::config::DEAD_LETTER_QUEUE_URL)).as_deref(),
        Some("ChargeDeadLetterQueue")
    );
}

/// The operator policy's id and the `(action, resource)` of each of its statements in
/// configuration `t`: a lone resource as the logical id it names, a list's items as their text
/// (`OperationQueue.Arn`, `${OperationsTable.Arn}/index/…`).
fn operator_grants(t: &Value) -> (String, Vec<(String, String)>) {
    // The other managed policy is the route grant (CheckoutInvokePolicy, its own test).
    let policies: Vec<_> = of_type(t, "AWS::IAM::ManagedPolicy")
        .into_iter()
        .filter(|(id, _)| id.contains("Operator"))
        .collect();
    assert_eq!(policies.len(), 1, "one operator policy");
    let (id, policy) = &policies[0];
    assert_eq!(
        str_at(policy, "Condition"),
        Some("OperatorPolicyOn"),
        "{id}: optional"
    );
    let mut found = Vec::new();
    statements(props(policy), String::new(), &mut found);
    let mut grants: Vec<(String, String)> = Vec::new();
    for (_, st) in &found {
        let (mut actions, mut resources) = (Vec::new(), Vec::new());
        strings(get(st, "Action").unwrap(), &mut actions);
        let raw_resource = plain(st).as_mapping().unwrap().get("Resource").unwrap();
        match plain(raw_resource) {
            Value::Sequence(items) => items.iter().for_each(|i| strings(i, &mut resources)),
            _ => resources.push(logical_id_of(raw_resource).unwrap_or_else(|| {
                let mut s = Vec::new();
                strings(raw_resource, &mut s);
                s.join("")
            })),
        }
        for a in &actions {
            for r in &resources {
                grants.push((a.clone(), r.clone()));
            }
        }
    }
    grants.sort();
    (id.clone(), grants)
}

/// The operator policy grants what chargectl's commands call (infra/chargectl/src/lib.rs
/// `dispatch`, through the store's, the audit log's, SQS's and Secrets Manager's adapters), each
/// grant tied below to the commands that need it, and nothing else. STS GetCallerIdentity (who
/// resolves, re-drives or runs an audit) needs no permission.
#[test]
fn the_operator_policy_has_exactly_what_chargectl_needs() {
    let table = |suffix: &str| format!("${{OperationsTable.Arn}}{suffix}");
    let needs = |dead_letter_queues: &[&str]| {
        let mut needs: Vec<(&str, &str, String)> = vec![
            // unknowns, summary (open and in review), show/resolve/redrive by operation id, audit
            // (deadlines, the REVIEW count): DynamoStore::query_index, get_by_operation_id,
            // count_in_review.
            (
                "unknowns, summary, show, resolve, redrive, audit",
                "dynamodb:Query",
                table(&format!("/index/{UNKNOWN_INDEX}")),
            ),
            // audit: the records settled in its window (DynamoStore::settled_between).
            (
                "audit",
                "dynamodb:Query",
                table(&format!("/index/{SETTLED_INDEX}")),
            ),
            // show and audit: an order's refunds (refunds_of); audit --show and summary: the kept
            // reports (AuditLog::latest_reports, the AUDIT partition).
            ("show, audit, summary", "dynamodb:Query", table("")),
            (
                "show, resolve, redrive, audit",
                "dynamodb:GetItem",
                "OperationsTable".into(),
            ),
            // An index page's records (records_of).
            (
                "unknowns, summary, audit",
                "dynamodb:BatchGetItem",
                "OperationsTable".into(),
            ),
            // resolve and redrive: a conditional UpdateItem returning the record (ALL_NEW).
            (
                "resolve, redrive",
                "dynamodb:UpdateItem",
                "OperationsTable".into(),
            ),
            // resolve of a failed refund: its record and its charge's in one transaction.
            ("resolve", "dynamodb:UpdateItem", "OperationsTable".into()),
            // audit keeps its report (AuditLog::put_report), under the AUDIT partition only.
            ("audit", "dynamodb:PutItem", "OperationsTable".into()),
            ("redrive", "sqs:SendMessage", "ChargeQueue".into()),
            // resolve checks Stripe; audit lists and retrieves.
            (
                "resolve, audit",
                "secretsmanager:GetSecretValue",
                "StripeSecretArn".into(),
            ),
        ];
        // summary --dead-letter-queue: each queue's ApproximateNumberOfMessages (SqsDepth).
        for q in dead_letter_queues {
            needs.push(("summary", "sqs:GetQueueAttributes", format!("{q}.Arn")));
        }
        needs
    };
    for (name, set) in [("defaults", DEFAULTS), ("event source", EVENT_SOURCE)] {
        let t = config(set);
        let (id, grants) = operator_grants(&t);
        // Every dead-letter queue of the stack, each with the output that gives its URL.
        let queues: Vec<String> = of_type(&t, "AWS::SQS::Queue")
            .into_iter()
            .map(|(q, _)| q)
            .filter(|q| q.ends_with("DeadLetterQueue"))
            .collect();
        assert!(queues.len() >= 2, "{name}: {queues:?}");
        let outputs = get(&t, "Outputs").and_then(Value::as_mapping).unwrap();
        for q in &queues {
            assert!(
                outputs
                    .values()
                    .any(|o| logical_id_of(raw(o, "Value")).as_deref() == Some(q)),
                "{name}: no output gives the URL of {q}"
            );
        }
        let queues: Vec<&str> = queues.iter().map(String::as_str).collect();
        let needs = needs(&queues);
        for (commands, action, resource) in &needs {
            assert!(
                grants.contains(&((*action).to_owned(), resource.clone())),
                "{name} {id}: {commands} need {action} on {resource}"
            );
        }
        // And nothing no command needs.
        let mut want: Vec<(String, String)> = needs
            .into_iter()
            .map(|(_, a, r)| (a.to_owned(), r))
            .collect();
        want.sort();
        assert_eq!(grants, want, "{name} {id}");
    }
    // The events DLQ exists only with the event source: its depth is granted only then.
    let (_, defaults) = operator_grants(&config(DEFAULTS));
    assert!(!defaults
        .iter()
        .any(|(_, r)| r.starts_with("StripeEventsDeadLetterQueue")));

    // UpdateItem only as chargectl's resolve and redrive send it: the attributes they name (the
    // adapter's list, held to the writes by the_operator_updates_name_exactly_what_resolve_and_
    // redrive_name) and the record back as ALL_NEW, or inside a transaction.
    use charge_once::adapters::dynamodb::writes::OPERATOR_WRITE_ATTRIBUTES;
    let t = template();
    let policy = props(resource(&t, "OperatorPolicy").expect("OperatorPolicy"));
    let want: BTreeSet<String> = OPERATOR_WRITE_ATTRIBUTES
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
    let grants = update_grants(policy, "OperatorPolicy");
    assert_eq!(grants.len(), 2, "two UpdateItem statements");
    let mut how: Vec<(String, String)> = Vec::new();
    for g in &grants {
        assert_eq!(
            g.attributes, want,
            "{}: exactly what chargectl's writes name",
            g.sid
        );
        assert_eq!(g.equals.len(), 1, "{}: {:?}", g.sid, g.equals);
        how.extend(g.equals.clone());
    }
    how.sort();
    // Either a plain UpdateItem returning what the adapter asks for, or one inside a transaction
    // (which carries no ReturnValues): never one without either.
    assert_eq!(
        how,
        [
            (
                "dynamodb:EnclosingOperation".to_owned(),
                "TransactWriteItems".to_owned()
            ),
            (
                "dynamodb:ReturnValues".to_owned(),
                charge_once::adapters::dynamodb::UPDATE_RETURNS
                    .as_str()
                    .to_owned()
            ),
        ]
    );
    // The report's PutItem is held to the AUDIT partition (with the audit function's, in
    // the_audit_s_write_is_held_to_the_audit_partition_its_writer_puts_to); every other statement
    // but the UpdateItems has no condition.
    let mut found = Vec::new();
    statements(policy, String::new(), &mut found);
    for (_, st) in &found {
        let mut actions = Vec::new();
        strings(get(st, "Action").unwrap(), &mut actions);
        let conditioned = get(st, "Condition").is_some();
        let put_or_update = actions
            .iter()
            .any(|a| a == "dynamodb:UpdateItem" || a == "dynamodb:PutItem");
        assert_eq!(conditioned, put_or_update, "{actions:?}");
    }
}

/// `(action, resource)` of every statement of a function's inline policies, the resource as the
/// logical id or parameter it names (`OperationsTable`, `StripeSecretArn`).
fn grant_pairs(t: &Value, dir: &str) -> BTreeSet<(String, String)> {
    let mut pairs = BTreeSet::new();
    for (actions, resources) in function_grants(t, dir) {
        let ids: BTreeSet<String> = resources
            .iter()
            .filter(|r| !r.contains('$') && !r.contains(':'))
            .map(|r| r.trim_end_matches(".Arn").to_owned())
            .collect();
        for a in &actions {
            for r in &ids {
                pairs.insert((a.clone(), r.clone()));
            }
        }
    }
    pairs
}

#[test]
fn the_webhook_role_settles_and_remembers_events_only_and_its_inbox_expires() {
    let p = |a: &str, r: &str| (a.to_owned(), r.to_owned());
    // In every configuration: the operation read on its key, then the executor's claim and
    // record (no Scan); a dispute's first record (a Put inside its transaction: the only one);
    // the inbox's conditional admit and the forget after a failure. Nothing else, but:
    let always = [
        p("dynamodb:GetItem", "OperationsTable"),
        // A refund event's operation, among its order's refunds.
        p("dynamodb:Query", "OperationsTable"),
        p("dynamodb:UpdateItem", "OperationsTable"),
        p("dynamodb:PutItem", "OperationsTable"),
        p("dynamodb:PutItem", "WebhookInboxTable"),
        p("dynamodb:DeleteItem", "WebhookInboxTable"),
    ];
    let read = |secret: &str| p("secretsmanager:GetSecretValue", secret);
    let keep_failed = p("sqs:SendMessage", "StripeEventsDeadLetterQueue");
    for (name, set, extra) in [
        // The route: the signing secret, and the main key for retrieve.
        (
            "webhook",
            WEBHOOK,
            vec![read("StripeSecretArn"), read("StripeWebhookSecretArn")],
        ),
        // The bus: no signing secret; Lambda's on-failure records go to the DLQ with this role.
        (
            "event source",
            EVENT_SOURCE,
            vec![read("StripeSecretArn"), keep_failed.clone()],
        ),
        // With the restricted key the main key (which can create charges) is not readable.
        (
            "everything",
            EVERYTHING,
            vec![
                read("StripeEventsKeySecretArn"),
                read("StripeWebhookSecretArn"),
                keep_failed,
            ],
        ),
    ] {
        let t = config(set);
        let want: BTreeSet<_> = always.iter().cloned().chain(extra).collect();
        assert_eq!(grant_pairs(&t, "events"), want, "{name}");
    }
    let t = template();
    // The webhook secret and the events key are the events function's alone.
    for dir in ["checkout", "charge", "reconciler", "notify", "audit"] {
        for (_, resources) in function_grants(&t, dir) {
            for secret in ["StripeWebhookSecretArn", "StripeEventsKeySecretArn"] {
                assert!(
                    !resources.iter().any(|r| r == secret),
                    "{dir} may not read {secret}"
                );
            }
        }
    }
    // The inbox table: the adapter's key and TTL attribute.
    let t = config(EVENT_SOURCE);
    let inbox = resource(&t, "WebhookInboxTable").expect("WebhookInboxTable");
    assert_eq!(
        key_schema(props(inbox)),
        pairs(&[(charge_once::adapters::inbox::KEY, "HASH")])
    );
    let ttl = get(props(inbox), "TimeToLiveSpecification").expect("TTL");
    assert_eq!(
        str_at(ttl, "AttributeName"),
        Some(charge_once::adapters::inbox::TTL_ATTRIBUTE)
    );
    assert_eq!(
        get(ttl, "Enabled").and_then(|v| plain(v).as_bool()),
        Some(true)
    );
}

/// The logical ids and parameters a value names: `!Ref X`, `!GetAtt X.Attr` (both forms), and
/// `${X}` / `${X.Attr}` in `!Sub` strings (`${!Literal}` and pseudo parameters excluded).
fn references(v: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    collect_references(v, &mut out);
    out
}

fn collect_references(v: &Value, out: &mut BTreeSet<String>) {
    if let Some((f, arg)) = intrinsic(v) {
        match f.as_str() {
            "Ref" | "GetAtt" => {
                if let Some(id) = logical_id_of(v) {
                    out.insert(id);
                }
                return;
            }
            "Sub" => {
                // `!Sub [text, {name: value}]`: the names it defines are not references.
                let mut defined = BTreeSet::new();
                let text = match plain(arg) {
                    Value::Sequence(items) => {
                        items.iter().skip(1).for_each(|i| {
                            collect_references(i, out);
                            if let Some(m) = plain(i).as_mapping() {
                                defined
                                    .extend(m.keys().filter_map(|k| k.as_str()).map(str::to_owned));
                            }
                        });
                        items.first().map(scalar_text).unwrap_or_default()
                    }
                    other => scalar_text(other),
                };
                for part in text.split("${").skip(1) {
                    let name = part.split('}').next().unwrap_or_default();
                    if !name.starts_with('!') && !defined.contains(name) {
                        out.insert(name.split('.').next().unwrap().to_owned());
                    }
                }
                return;
            }
            _ => {}
        }
    }
    match v {
        Value::Tagged(t) => collect_references(&t.value, out),
        Value::Sequence(items) => items.iter().for_each(|i| collect_references(i, out)),
        Value::Mapping(m) => m.values().for_each(|i| collect_references(i, out)),
        _ => {}
    }
}

#[test]
fn every_reference_resolves_in_every_configuration() {
    // A resource kept by its condition that names one dropped by another (a route without its
    // integration, a permission without its function) would fail the deploy of that
    // configuration only; cfn-lint does not know which configurations matter.
    for (name, set) in CONFIGURATIONS
        .iter()
        .map(|(n, s)| (n.to_string(), s.to_vec()))
        .chain([("defaults, JWT".to_owned(), JWT.to_vec())])
    {
        let t = config(&set);
        let mut known: BTreeSet<String> = resources(&t).into_iter().map(|(id, _)| id).collect();
        // The role SAM generates for each function without a `Role` (`<logical id>Role`).
        for (id, f) in of_type(&t, "AWS::Serverless::Function") {
            if get(props(f), "Role").is_none() {
                known.insert(format!("{id}Role"));
            }
        }
        known.extend(
            get(&t, "Parameters")
                .and_then(Value::as_mapping)
                .unwrap()
                .keys()
                .map(|k| k.as_str().unwrap().to_owned()),
        );
        for (section, entries) in ["Resources", "Outputs"]
            .iter()
            .map(|s| (s, get(&t, s).and_then(Value::as_mapping).unwrap()))
        {
            for (id, v) in entries {
                for r in references(v) {
                    assert!(
                        r.starts_with("AWS::") || known.contains(&r),
                        "{name}: {section}.{} names {r}, absent in this configuration",
                        id.as_str().unwrap()
                    );
                }
                if let Some(deps) = get(v, "DependsOn") {
                    let mut d = Vec::new();
                    strings(deps, &mut d);
                    for r in d {
                        assert!(known.contains(&r), "{name}: {id:?} depends on absent {r}");
                    }
                }
            }
        }
        // The stage's RouteSettings name routes of this configuration.
        let stage = props(of_type(&t, "AWS::ApiGatewayV2::Stage")[0].1);
        let keys: BTreeSet<String> = of_type(&t, "AWS::ApiGatewayV2::Route")
            .into_iter()
            .map(|(_, r)| str_at(props(r), "RouteKey").unwrap().to_owned())
            .collect();
        if let Some(settings) = get(stage, "RouteSettings").and_then(Value::as_mapping) {
            for k in settings.keys() {
                let k = k.as_str().unwrap();
                assert!(
                    keys.contains(k),
                    "{name}: RouteSettings for {k}, not a route here"
                );
            }
        }
    }
}

#[test]
fn with_default_parameters_no_route_is_public_and_nothing_receives_stripe_events() {
    // Neither event source is the default; the reconciler alone settles.
    for p in [
        "StripeEventSourceName",
        "StripeWebhookSecretArn",
        "StripeEventsKeySecretArn",
    ] {
        assert_eq!(
            str_at(parameter(&template(), p), "Default"),
            Some(""),
            "{p}"
        );
    }
    for auth in [DEFAULTS, JWT] {
        let t = config(auth);
        assert!(unauthenticated_routes(&t).is_empty());
        assert!(find_function(&t, "events").is_none(), "no events function");
        for id in [
            "WebhookRoute",
            "WebhookIntegration",
            "WebhookApiPermission",
            "WebhookInboxTable",
            "WebhookLogGroup",
        ] {
            assert!(resource(&t, id).is_none(), "{id} exists by default");
        }
        let buses: Vec<String> = of_type(&t, "AWS::Events::EventBus")
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(buses, ["OutcomeBus"]);
        assert!(of_type(&t, "AWS::Events::Rule").is_empty());
        assert!(of_type(&t, "AWS::Lambda::EventInvokeConfig").is_empty());
        // No alarm on the events function's metrics, no webhook outputs.
        for (id, a) in alarms(&t) {
            let mut words = Vec::new();
            strings(props(a), &mut words);
            assert!(
                !words
                    .iter()
                    .any(|w| w == "webhook" || w == "WebhookFunction"),
                "{id}: an alarm on the events function"
            );
        }
        let outputs = get(&t, "Outputs").and_then(Value::as_mapping).unwrap();
        for o in ["WebhookUrl", "WebhookInboxTableName", "StripeEventBusArn"] {
            assert!(!outputs.contains_key(o), "output {o} by default");
        }
    }
}

#[test]
fn with_the_webhook_secret_exactly_one_route_is_public_and_it_has_its_own_throttle() {
    let t = config(WEBHOOK);
    assert_eq!(
        unauthenticated_routes(&t),
        [("WebhookRoute".to_owned(), "POST /stripe/webhook".to_owned())]
    );
    // Its own throttle, from its own parameters, no higher than the API's default.
    let stage = props(of_type(&t, "AWS::ApiGatewayV2::Stage")[0].1);
    let settings = get(stage, "RouteSettings")
        .and_then(|r| get(r, "POST /stripe/webhook"))
        .expect("RouteSettings for POST /stripe/webhook");
    for (key, param, api) in [
        (
            "ThrottlingRateLimit",
            "WebhookThrottlingRateLimit",
            "ApiThrottlingRateLimit",
        ),
        (
            "ThrottlingBurstLimit",
            "WebhookThrottlingBurstLimit",
            "ApiThrottlingBurstLimit",
        ),
    ] {
        assert_eq!(
            logical_id_of(raw(settings, key)).as_deref(),
            Some(param),
            "{key}"
        );
        let own = number(get(parameter(&t, param), "Default").unwrap());
        let default = number(get(parameter(&t, api), "Default").unwrap());
        assert!(own <= default, "{param} {own} > {api} {default}");
    }
    // The route's permission: API Gateway, for that route of this API only.
    let p = props(the_events_function_permission(&t));
    assert_eq!(str_at(p, "Principal"), Some("apigateway.amazonaws.com"));
    let mut source = Vec::new();
    strings(raw(p, "SourceArn"), &mut source);
    assert!(
        source[0].ends_with("${ChargeApi}/*/POST/stripe/webhook"),
        "{source:?}"
    );
    // No partner bus in this configuration; the URL to register is an output.
    assert_eq!(of_type(&t, "AWS::Events::EventBus").len(), 1);
    assert!(get(&t, "Outputs")
        .and_then(|o| get(o, "WebhookUrl"))
        .is_some());
    // The rejection alarm fires on a rate, not one stray request, and exists only with the route.
    let (id, rejected) =
        alarm_on(&t, "ChargeOnce", "WebhookRejected", ("Function", "webhook")).expect("rejections");
    let a = props(rejected);
    let threshold = number(get(a, "Threshold").unwrap());
    assert!(threshold > 1, "{id}: threshold {threshold}");
    assert!(
        number(get(a, "EvaluationPeriods").unwrap()) > 1,
        "{id}: more than one period"
    );
    assert!(alarm_on(
        &config(EVENT_SOURCE),
        "ChargeOnce",
        "WebhookRejected",
        ("Function", "webhook")
    )
    .is_none());
}

#[test]
fn with_the_event_source_a_partner_bus_feeds_the_events_function_with_retries_and_a_dlq() {
    use charge_once::events::HANDLED_TYPES;
    let t = config(&and(EVENT_SOURCE, ALARM_TOPIC));
    // No public route comes with it.
    assert!(unauthenticated_routes(&t).is_empty());
    assert!(resource(&t, "WebhookRoute").is_none());

    // The partner bus: named as the event source, which associates it.
    let buses: Vec<_> = of_type(&t, "AWS::Events::EventBus")
        .into_iter()
        .filter(|(id, _)| id != "OutcomeBus")
        .collect();
    assert_eq!(buses.len(), 1, "one partner bus");
    let (bus_id, bus) = &buses[0];
    for key in ["Name", "EventSourceName"] {
        assert_eq!(
            logical_id_of(raw_prop(bus, key)).as_deref(),
            Some("StripeEventSourceName"),
            "{bus_id}.{key}"
        );
    }
    assert!(
        get(props(bus), "Policy").is_none(),
        "{bus_id}: nobody else puts events on it"
    );
    assert!(of_type(&t, "AWS::Events::EventBusPolicy")
        .iter()
        .all(
            |(_, p)| logical_id_of(raw_prop(p, "EventBusName")).as_deref() != Some(bus_id.as_str())
        ));

    // One rule on it: Stripe's source, exactly the handled types.
    let rules = of_type(&t, "AWS::Events::Rule");
    assert_eq!(rules.len(), 1);
    let (rule_id, rule) = &rules[0];
    let r = props(rule);
    assert_eq!(
        logical_id_of(raw(r, "EventBusName")).as_deref(),
        Some(bus_id.as_str())
    );
    assert_eq!(str_at(r, "State"), Some("ENABLED"));
    let pattern = get(r, "EventPattern").expect("EventPattern");
    let sources = get(pattern, "source")
        .and_then(Value::as_sequence)
        .expect("source");
    assert_eq!(sources.len(), 1);
    assert_eq!(
        str_at(&sources[0], "prefix"),
        Some("aws.partner/stripe.com")
    );
    let types: Vec<String> = get(pattern, "detail-type")
        .and_then(Value::as_sequence)
        .expect("detail-type")
        .iter()
        .map(scalar_text)
        .collect();
    let mut sorted = types.clone();
    sorted.sort();
    sorted.dedup();
    let mut handled: Vec<String> = HANDLED_TYPES.iter().map(|s| (*s).to_owned()).collect();
    handled.sort();
    assert_eq!(sorted, handled, "{rule_id}: detail-type is HANDLED_TYPES");
    assert_eq!(types.len(), handled.len(), "{rule_id}: no type twice");

    // One target: the events function, with a retry policy and a DLQ.
    let targets = get(r, "Targets")
        .and_then(Value::as_sequence)
        .expect("Targets");
    assert_eq!(targets.len(), 1);
    let target = &targets[0];
    assert_eq!(
        logical_id_of(raw(target, "Arn")).as_deref(),
        Some("WebhookFunction")
    );
    let retry = get(target, "RetryPolicy").expect("RetryPolicy");
    let attempts = number(get(retry, "MaximumRetryAttempts").expect("MaximumRetryAttempts"));
    let age = number(get(retry, "MaximumEventAgeInSeconds").expect("MaximumEventAgeInSeconds"));
    assert!(
        attempts <= 185 && (60..=86_400).contains(&age),
        "{attempts} / {age}"
    );
    let dlq = get(target, "DeadLetterConfig")
        .map(|d| logical_id_of(raw(d, "Arn")).expect("the DLQ's Arn"))
        .expect("DeadLetterConfig");
    let q = props(resource(&t, &dlq).expect("the DLQ"));
    assert_ne!(
        get(q, "FifoQueue").and_then(Value::as_bool),
        Some(true),
        "EventBridge DLQs are standard queues"
    );
    assert_eq!(
        get(q, "SqsManagedSseEnabled").and_then(Value::as_bool),
        Some(true),
        "{dlq}: SSE"
    );
    assert_eq!(
        get(q, "MessageRetentionPeriod").map(number),
        Some(1_209_600),
        "{dlq}: 14 days"
    );

    // The queue policy: EventBridge may send, for this rule only.
    let policies: Vec<_> = of_type(&t, "AWS::SQS::QueuePolicy")
        .into_iter()
        .filter(|(_, p)| {
            get(props(p), "Queues")
                .and_then(Value::as_sequence)
                .is_some_and(|qs| {
                    qs.iter()
                        .any(|q| logical_id_of(q).as_deref() == Some(dlq.as_str()))
                })
        })
        .collect();
    assert_eq!(policies.len(), 1, "one policy on {dlq}");
    let mut found = Vec::new();
    statements(props(policies[0].1), String::new(), &mut found);
    assert!(!found.is_empty());
    for (path, st) in &found {
        assert_eq!(str_at(st, "Effect"), Some("Allow"), "{path}");
        assert_eq!(
            get(st, "Principal").and_then(|p| str_at(p, "Service")),
            Some("events.amazonaws.com"),
            "{path}: EventBridge only"
        );
        assert_eq!(str_at(st, "Action"), Some("sqs:SendMessage"), "{path}");
        let source = get(st, "Condition")
            .and_then(|c| get(c, "ArnEquals"))
            .map(|a| logical_id_of(raw(a, "aws:SourceArn")))
            .unwrap_or_else(|| panic!("{path}: ArnEquals aws:SourceArn"));
        assert_eq!(source.as_deref(), Some(rule_id.as_str()), "{path}");
    }

    // EventBridge may invoke the function, for this rule only.
    let p = props(the_events_function_permission(&t));
    assert_eq!(str_at(p, "Principal"), Some("events.amazonaws.com"));
    assert_eq!(str_at(p, "Action"), Some("lambda:InvokeFunction"));
    assert_eq!(
        logical_id_of(raw(p, "SourceArn")).as_deref(),
        Some(rule_id.as_str())
    );

    // A failed invocation: two Lambda retries, then the same DLQ with its error.
    let configs = of_type(&t, "AWS::Lambda::EventInvokeConfig");
    assert_eq!(configs.len(), 1);
    let c = props(configs[0].1);
    assert_eq!(
        logical_id_of(raw(c, "FunctionName")).as_deref(),
        Some("WebhookFunction")
    );
    assert_eq!(get(c, "MaximumRetryAttempts").map(number), Some(2));
    let on_failure = get(c, "DestinationConfig")
        .and_then(|d| get(d, "OnFailure"))
        .map(|o| logical_id_of(raw(o, "Destination")))
        .expect("an on-failure destination");
    assert_eq!(on_failure.as_deref(), Some(dlq.as_str()));

    // The DLQ pages on its first message.
    let (alarm_id, alarm) = alarm_on(
        &t,
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        ("QueueName", dlq.as_str()),
    )
    .expect("an alarm on the events DLQ");
    let a = props(alarm);
    let fires_at_one = match str_at(a, "ComparisonOperator") {
        Some("GreaterThanOrEqualToThreshold") => number(get(a, "Threshold").unwrap()) <= 1,
        Some("GreaterThanThreshold") => number(get(a, "Threshold").unwrap()) == 0,
        _ => false,
    };
    assert!(fires_at_one, "{alarm_id}: fires on one message");
    assert!(notifies_alarm_topic(alarm), "{alarm_id}");

    // The function is told the source it must see; the optional variables are their parameters
    // (empty string when not set).
    let (_, f) = function(&t, "events");
    let vars = get(props(f), "Environment")
        .and_then(|e| get(e, "Variables"))
        .unwrap();
    for (var, param) in [
        ("STRIPE_EVENT_SOURCE_NAME", "StripeEventSourceName"),
        (
            charge_once::config::STRIPE_WEBHOOK_SECRET_ARN,
            "StripeWebhookSecretArn",
        ),
        ("STRIPE_EVENTS_KEY_SECRET_ARN", "StripeEventsKeySecretArn"),
    ] {
        assert_eq!(
            logical_id_of(raw(vars, var)).as_deref(),
            Some(param),
            "{var}"
        );
    }
    let outputs = get(&t, "Outputs").and_then(Value::as_mapping).unwrap();
    for o in [
        "StripeEventBusArn",
        "StripeEventsRuleArn",
        "StripeEventsDeadLetterQueueUrl",
    ] {
        assert!(outputs.contains_key(o), "output {o}");
    }
    assert!(!outputs.contains_key("WebhookUrl"), "no route, no URL");
}

#[test]
fn an_event_stripe_does_not_confirm_pages_at_once() {
    for (name, set) in [("webhook", WEBHOOK), ("event source", EVENT_SOURCE)] {
        let t = config(&and(set, ALARM_TOPIC));
        let (id, alarm) = alarm_on(&t, "ChargeOnce", "EventMismatch", ("Function", "webhook"))
            .unwrap_or_else(|| panic!("{name}: an EventMismatch alarm"));
        assert_eq!(id, "EventMismatchAlarm");
        let a = props(alarm);
        // [Function] only: the Reason dimension set is another metric.
        let dims = get(a, "Dimensions").and_then(Value::as_sequence).unwrap();
        assert_eq!(dims.len(), 1, "{id}: [Function] only");
        assert_eq!(str_at(a, "Statistic"), Some("Sum"));
        assert_eq!(
            str_at(a, "ComparisonOperator"),
            Some("GreaterThanOrEqualToThreshold")
        );
        assert_eq!(
            get(a, "Threshold").map(number),
            Some(1),
            "{id}: one is enough"
        );
        assert_eq!(get(a, "EvaluationPeriods").map(number), Some(1));
        assert!(notifies_alarm_topic(alarm), "{id}");
        let d = str_at(a, "AlarmDescription").unwrap();
        assert!(
            d.contains("--filter-pattern mismatch") && d.contains("Nothing was moved"),
            "{d}"
        );
    }
}

#[test]
fn only_the_relay_may_publish_on_the_outcome_bus() {
    let t = config(DEFAULTS);
    let (notify_id, notify) = function(&t, "notify");
    // The role SAM generates for a function without `Role`: `<logical id>Role`.
    assert!(get(props(notify), "Role").is_none());
    let role = format!("{notify_id}Role");
    let policies: Vec<_> = of_type(&t, "AWS::Events::EventBusPolicy")
        .into_iter()
        .filter(|(_, p)| {
            logical_id_of(raw_prop(p, "EventBusName")).as_deref() == Some("OutcomeBus")
        })
        .collect();
    assert_eq!(policies.len(), 1, "one policy on the outcome bus");
    let p = props(policies[0].1);
    let st = get(p, "Statement").expect("Statement");
    assert_eq!(str_at(st, "Effect"), Some("Deny"));
    assert_eq!(
        str_at(st, "Principal"),
        Some("*"),
        "every principal but the relay's role"
    );
    assert_eq!(str_at(st, "Action"), Some("events:PutEvents"));
    assert_eq!(
        logical_id_of(raw(st, "Resource")).as_deref(),
        Some("OutcomeBus")
    );
    let except = get(st, "Condition")
        .and_then(|c| get(c, "StringNotEquals"))
        .map(|c| logical_id_of(raw(c, "aws:PrincipalArn")))
        .expect("StringNotEquals aws:PrincipalArn");
    assert_eq!(except.as_deref(), Some(role.as_str()));
    let mut attr = Vec::new();
    strings(
        raw(
            get(get(st, "Condition").unwrap(), "StringNotEquals").unwrap(),
            "aws:PrincipalArn",
        ),
        &mut attr,
    );
    assert_eq!(attr, [format!("{role}.Arn")]);
}

#[test]
fn the_sample_eventbridge_event_is_what_the_rule_delivers() {
    use charge_once::events::HANDLED_TYPES;
    let sample: serde_json::Value = serde_json::from_str(include_str!(
        "../events/stripe-eventbridge-payment-intent-succeeded.json"
    ))
    .expect("the sample parses");
    let detail_type = sample["detail-type"].as_str().unwrap();
    assert!(HANDLED_TYPES.contains(&detail_type));
    assert!(sample["source"]
        .as_str()
        .unwrap()
        .starts_with("aws.partner/stripe.com/"));
    // The Stripe event is the envelope's detail, as a webhook body.
    assert_eq!(sample["detail"]["type"], detail_type);
    assert_eq!(sample["detail"]["object"], "event");
    assert!(sample["detail"]["id"].as_str().unwrap().starts_with("evt_"));
    assert_eq!(
        sample["detail"]["data"]["object"]["object"],
        "payment_intent"
    );
    assert_eq!(sample["version"], "0");
}

#[test]
fn the_condition_evaluator_reads_the_parameters() {
    // The evaluator itself, on the template's own conditions: each source alone, both, neither.
    let t = template();
    let on = |set: &[(&str, &str)], c: &str| Configuration::new(&t, set).condition(c);
    for (set, source, webhook) in [
        (DEFAULTS, false, false),
        (WEBHOOK, false, true),
        (EVENT_SOURCE, true, false),
        (EVERYTHING, true, true),
    ] {
        assert_eq!(on(set, "HasStripeEventSource"), source, "{set:?}");
        assert_eq!(on(set, "HasStripeWebhook"), webhook, "{set:?}");
        assert_eq!(on(set, "HasEventsIn"), source || webhook, "{set:?}");
    }
    assert!(on(EVERYTHING, "HasEventsKey") && !on(WEBHOOK, "HasEventsKey"));
    assert!(on(DEFAULTS, "UseIamAuth") && !on(JWT, "UseIamAuth") && on(JWT, "UseJwtAuth"));
    // !And over a !Join of a list parameter.
    assert!(!on(DEFAULTS, "GrantCallerRoles"));
    assert!(on(
        &[("CheckoutCallerRoleNames", "order-service")],
        "GrantCallerRoles"
    ));
    assert!(!on(
        &and(JWT, &[("CheckoutCallerRoleNames", "order-service")]),
        "GrantCallerRoles"
    ));
}

/// The Mappings entry `map[key][field]` as a number.
fn mapped(t: &Value, map: &str, key: &str, field: &str) -> u64 {
    let m = get(get(t, "Mappings").expect("Mappings"), map).unwrap_or_else(|| panic!("{map}"));
    number(get(get(m, key).unwrap_or_else(|| panic!("{map}.{key}")), field).unwrap())
}

/// A `!FindInMap [map, !Ref ReconcileEveryMinutes, field]` read for one cadence.
fn period_for(t: &Value, alarm: &Value, minutes: u64) -> u64 {
    let period = get(props(alarm), "Period").expect("Period");
    match period {
        Value::Number(_) => number(period),
        _ => {
            let (f, arg) = intrinsic(raw(props(alarm), "Period")).expect("!FindInMap");
            assert_eq!(f, "FindInMap");
            let args = plain(arg).as_sequence().unwrap();
            let map = plain(&args[0]).as_str().unwrap();
            let (r, param) = intrinsic(&args[1]).expect("!Ref ReconcileEveryMinutes");
            assert_eq!(
                (r.as_str(), plain(param).as_str()),
                ("Ref", Some("ReconcileEveryMinutes"))
            );
            mapped(
                t,
                map,
                &minutes.to_string(),
                plain(&args[2]).as_str().unwrap(),
            )
        }
    }
}

#[test]
fn a_stack_that_would_page_nobody_is_refused_unless_declared_a_throwaway() {
    let t = template();
    // The bare Defaults: the stack's own topic and no subscriber. CloudFormation stops the deploy
    // with a message that names both ways to page somebody and the opt-out.
    let (_, refused) = Configuration::checked(&t, UNPAGED);
    assert_eq!(refused.len(), 1, "{refused:?}");
    let (rule, message) = &refused[0];
    assert_eq!(rule, "AlarmsPageSomebody");
    for name in [
        "Nobody would be paged",
        "AlarmTopicArn",
        "AlarmEmail",
        "AllowUnpagedAlarms=true",
    ] {
        assert!(message.contains(name), "{message:?} names {name}");
    }
    // The rule reads exactly these three parameters.
    let mut refs = Vec::new();
    strings(
        get(get(&t, "Rules").unwrap(), "AlarmsPageSomebody").unwrap(),
        &mut refs,
    );
    for name in ["AlarmTopicArn", "AlarmEmail", "AllowUnpagedAlarms"] {
        assert!(
            refs.iter().any(|r| r == name),
            "the rule reads {name}: {refs:?}"
        );
    }
    // The opt-out is off unless said, and says only true or false.
    let opt_out = parameter(&t, "AllowUnpagedAlarms");
    assert_eq!(str_at(opt_out, "Default"), Some("false"));
    let mut allowed = Vec::new();
    strings(get(opt_out, "AllowedValues").unwrap(), &mut allowed);
    assert_eq!(allowed, ["true", "false"]);

    // The twins, each from the bare Defaults: either parameter pages somebody, and so does the
    // explicit opt-out (which leaves the topic without a subscriber).
    for (what, set) in [
        ("AlarmEmail", vec![("AlarmEmail", "on-call@example.com")]),
        ("AlarmTopicArn", and(UNPAGED, ALARM_TOPIC)),
        (
            "the opt-out",
            and(UNPAGED, &[("AllowUnpagedAlarms", "true")]),
        ),
    ] {
        let (_, refused) = Configuration::checked(&t, &set);
        assert!(refused.is_empty(), "{what}: {refused:?}");
    }
    let throwaway = config(&and(UNPAGED, &[("AllowUnpagedAlarms", "true")]));
    assert!(resource(&throwaway, "AlarmTopic").is_some());
    assert!(resource(&throwaway, "AlarmTopicEmail").is_none());
    // A "true" opt-out does not hide a given address: it is still subscribed.
    let both = config(&[("AllowUnpagedAlarms", "true")]);
    assert!(resource(&both, "AlarmTopicEmail").is_some());
}

#[test]
fn every_alarm_pages_the_stacks_topic_or_the_given_one_and_the_safety_net_has_a_heartbeat() {
    // With AlarmTopicArn empty every alarm notifies the stack's own topic, and AlarmEmail is
    // subscribed to it.
    let t = config(DEFAULTS);
    assert!(
        resource(&t, "AlarmTopic").is_some(),
        "the stack's own topic"
    );
    let sub = props(resource(&t, "AlarmTopicEmail").expect("the address subscribed"));
    assert_eq!(str_at(sub, "Protocol"), Some("email"));
    assert_eq!(str_at(sub, "Endpoint"), Some("AlarmEmail"));
    for (id, alarm) in alarms(&t) {
        for key in ["AlarmActions", "OKActions"] {
            let actions = get(props(alarm), key)
                .and_then(Value::as_sequence)
                .unwrap_or_else(|| panic!("{id}: {key}"));
            assert!(
                !actions.is_empty(),
                "{id}: {key} empty with default parameters"
            );
            let mut names = Vec::new();
            strings(&Value::Sequence(actions.clone()), &mut names);
            assert!(
                names.iter().any(|n| n == "AlarmTopic"),
                "{id}: {key} {names:?}"
            );
        }
    }
    // A given topic replaces the stack's own.
    let theirs = config(ALARM_TOPIC);
    assert!(resource(&theirs, "AlarmTopic").is_none());
    for (id, alarm) in alarms(&theirs) {
        let mut names = Vec::new();
        strings(get(props(alarm), "AlarmActions").unwrap(), &mut names);
        assert_eq!(names, ["AlarmTopicArn"], "{id}");
    }

    // The heartbeat: no tick that finished its due work (no Ticks datapoint, emitted before the
    // REVIEW read) for three ticks pages.
    let hb = props(resource(&t, "ReconcilerHeartbeatAlarm").expect("ReconcilerHeartbeatAlarm"));
    assert_eq!(str_at(hb, "MetricName"), Some("Ticks"));
    assert_eq!(str_at(hb, "Statistic"), Some("SampleCount"));
    assert_eq!(str_at(hb, "TreatMissingData"), Some("breaching"));
    assert_eq!(str_at(hb, "ComparisonOperator"), Some("LessThanThreshold"));
    assert_eq!(get(hb, "EvaluationPeriods").map(number), Some(3));
    assert_eq!(get(hb, "DatapointsToAlarm").map(number), Some(3));
}

#[test]
fn the_review_alarms_fit_every_reconciler_cadence() {
    let t = template();
    let allowed: Vec<u64> = get(parameter(&t, "ReconcileEveryMinutes"), "AllowedValues")
        .and_then(Value::as_sequence)
        .expect("ReconcileEveryMinutes has AllowedValues")
        .iter()
        .map(number)
        .collect();
    // 1 minute is refused: ticks (120 s timeout, one at a time) would queue behind each other.
    assert!(!allowed.contains(&1) && allowed.contains(&5) && allowed.contains(&15));
    let in_review = resource(&t, "InReviewAlarm").unwrap();
    let heartbeat = resource(&t, "ReconcilerHeartbeatAlarm").unwrap();
    let sent = resource(&t, "SentToReviewAlarm").unwrap();
    for minutes in allowed {
        let tick = minutes * 60;
        // Every period of InReview holds at least one tick, so two periods in a row is two
        // ticks in a row at any cadence (a fixed 300 s period had none above 5 minutes).
        let p = period_for(&t, in_review, minutes);
        assert!(
            p >= tick && p % 60 == 0,
            "{minutes} min: InReview period {p}"
        );
        // The heartbeat waits three ticks, no fewer, no more than a day.
        let h = period_for(&t, heartbeat, minutes);
        assert_eq!(h, tick, "{minutes} min: heartbeat period");
        assert!(3 * h <= 86_400);
        // SentToReview sums what any tick reports: one period of any length catches it.
        let s = period_for(&t, sent, minutes);
        assert!(s % 60 == 0 && s > 0);
    }
}

/// Every attribute an UpdateItem built from `w` names, as IAM's `dynamodb:Attributes` counts them:
/// the placeholders of its condition and of its update, and the table's key (its `Key`).
fn write_names(w: &charge_once::adapters::dynamodb::writes::Write) -> BTreeSet<String> {
    use charge_once::adapters::dynamodb::schema::{PK, SK};
    let mut names: BTreeSet<String> = w.names.values().cloned().collect();
    names.extend([PK.to_owned(), SK.to_owned()]);
    names
}

/// One UpdateItem statement of a role: its Sid, the attributes it may name, and its
/// `StringEquals` conditions (`dynamodb:EnclosingOperation`, `dynamodb:ReturnValues`).
#[derive(Debug)]
struct UpdateGrant {
    sid: String,
    attributes: BTreeSet<String>,
    equals: BTreeMap<String, String>,
}

/// Every statement of `policies` that allows UpdateItem: each its own statement, conditioned on
/// an attribute list for every request (`ForAllValues:StringEquals`, no IfExists, no
/// ForAnyValue) and on nothing but that and `StringEquals`.
fn update_grants(policies: &Value, whose: &str) -> Vec<UpdateGrant> {
    let mut found = Vec::new();
    statements(policies, String::new(), &mut found);
    let mut grants = Vec::new();
    for (path, st) in &found {
        let mut actions = Vec::new();
        strings(get(st, "Action").unwrap(), &mut actions);
        if !actions.iter().any(|a| a == "dynamodb:UpdateItem") {
            continue;
        }
        let sid = str_at(st, "Sid").unwrap_or(path).to_owned();
        assert_eq!(
            actions,
            ["dynamodb:UpdateItem"],
            "{whose} {sid}: its own statement"
        );
        let condition = get(st, "Condition")
            .unwrap_or_else(|| panic!("{whose} {sid}: UpdateItem on any attribute"));
        let keys: BTreeSet<&str> = condition
            .as_mapping()
            .unwrap()
            .keys()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            keys.contains("ForAllValues:StringEquals")
                && keys.is_subset(&BTreeSet::from([
                    "ForAllValues:StringEquals",
                    "StringEquals"
                ])),
            "{whose} {sid}: conditioned on {keys:?}"
        );
        let all = get(condition, "ForAllValues:StringEquals").unwrap();
        let mut listed = Vec::new();
        strings(
            get(all, "dynamodb:Attributes")
                .unwrap_or_else(|| panic!("{whose} {sid}: no dynamodb:Attributes")),
            &mut listed,
        );
        let attributes: BTreeSet<String> = listed.iter().cloned().collect();
        assert_eq!(
            attributes.len(),
            listed.len(),
            "{whose} {sid}: a name twice"
        );
        let equals = get(condition, "StringEquals")
            .and_then(Value::as_mapping)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.as_str().unwrap().to_owned(), scalar_text(v)))
                    .collect()
            })
            .unwrap_or_default();
        grants.push(UpdateGrant {
            sid,
            attributes,
            equals,
        });
    }
    grants
}

/// A function's inline policies.
fn policies_of<'a>(t: &'a Value, dir: &str) -> &'a Value {
    get(props(function(t, dir).1), "Policies").expect("Policies")
}

/// The [`OperationStore`](charge_once::ports::OperationStore) methods the shipped code in `files`
/// calls: `….store.<method>(`, with whitespace and line breaks inside a call chain ignored and
/// `//` comments left out. What IAM must allow follows from these (each method's DynamoDB calls
/// are in shared/src/adapters/dynamodb/mod.rs).
fn store_calls(files: &[std::path::PathBuf]) -> BTreeSet<String> {
    let mut sources = Vec::new();
    for f in files {
        if f.is_dir() {
            shipped_sources(f, &mut sources);
        } else {
            let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{f:?}: {e}"));
            let shipped = text.split("#[cfg(test)]").next().unwrap_or("").to_owned();
            sources.push((f.clone(), shipped));
        }
    }
    assert!(!sources.is_empty(), "no source in {files:?}");
    let mut calls = BTreeSet::new();
    for (_, text) in sources {
        let code: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        // `deps\n    .store\n    .get(` as `deps.store.get(`.
        let mut joined = String::with_capacity(code.len());
        let chars: Vec<char> = code.chars().collect();
        for (i, c) in chars.iter().enumerate() {
            if c.is_whitespace() {
                let next = chars[i..].iter().find(|c| !c.is_whitespace());
                if joined.ends_with('.') || next == Some(&'.') {
                    continue;
                }
            }
            joined.push(*c);
        }
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        for (at, _) in joined.match_indices("store.") {
            if joined[..at].chars().next_back().is_some_and(ident) {
                continue;
            }
            let rest = &joined[at + "store.".len()..];
            let method: String = rest.chars().take_while(|c| ident(*c)).collect();
            if rest[method.len()..].starts_with('(') {
                calls.insert(method);
            }
        }
    }
    calls
}

/// Checkout's role: the conditional create and the reads it decides on, the queue, and two
/// UpdateItems, a refund's reservation and a capture's or cancel's claim on its charge, each
/// only inside their TransactWriteItems (a bare UpdateItem under this role is refused) and each
/// naming exactly what its write names (the key, its guards' and its change's): never the
/// charge's amount, intent or lease token, nor, for a reservation, its outcome. IAM cannot tell a
/// guard's attribute from an updated one, so `status` is on both lists (template.yaml says so).
#[test]
fn checkout_updates_nothing_but_a_refund_s_reservation_and_a_taking_s_claim() {
    use charge_core::store::{TakeAuthorization, TakeFrom};
    use charge_once::adapters::dynamodb::writes;
    let p = |a: &str, r: &str| (a.to_owned(), r.to_owned());
    let t = template();
    assert_eq!(
        grant_pairs(&t, "checkout"),
        BTreeSet::from([
            p("dynamodb:ConditionCheckItem", "OperationsTable"),
            p("dynamodb:GetItem", "OperationsTable"),
            p("dynamodb:PutItem", "OperationsTable"),
            p("dynamodb:Query", "OperationsTable"),
            p("dynamodb:UpdateItem", "OperationsTable"),
            p("sqs:SendMessage", "ChargeQueue"),
        ])
    );
    // What the checkout code asks of the store (charge_of: the order's latest attempt, one or
    // two GetItems). Of these only create_beside updates a record
    // (a refund's, a capture's or a cancel's charge), and sends its Put and its charge's
    // UpdateItem as one TransactWriteItems (DynamoStore::put_with_charge); create_if_absent is a plain PutItem.
    // A new call here (a claim, a record, a resolve: plain UpdateItems) fails this until the
    // role's conditions are looked at again.
    let root = workspace_root();
    assert_eq!(
        store_calls(&[root.join("functions/checkout/src")]),
        BTreeSet::from(
            [
                "attempts_after",
                "charge_of",
                "create_attempt",
                "create_beside",
                "create_if_absent",
                "get",
                "refunds_of"
            ]
            .map(str::to_owned)
        )
    );
    let charge = charge_core::operation::OperationKey::charge(
        charge_core::domain::OrderId::parse("o").unwrap(),
    );
    let now = charge_core::time::Timestamp::from_millis(0);
    let reserve = charge_core::store::ReserveRefund {
        charge: charge.clone(),
        charge_operation_id: charge_core::domain::OperationId::new_random(),
        amount: charge_core::domain::Amount::new(1).unwrap(),
        charged: charge_core::domain::Amount::new(2).unwrap(),
        now,
    };
    let reservation =
        write_names(&writes::write(&reserve).expect("a reservation has its expressions"));
    // Both ways a capture or cancel takes a charge, in one statement.
    let mut taking = BTreeSet::new();
    for from in [TakeFrom::Authorized, TakeFrom::NeverSent] {
        let take = TakeAuthorization {
            charge: charge.clone(),
            charge_operation_id: charge_core::domain::OperationId::new_random(),
            taker: charge_core::charge::state::Taker::parse(&format!(
                "cancel:{}",
                charge_core::domain::OperationId::new_random()
            ))
            .unwrap(),
            from,
            now,
        };
        taking.extend(write_names(
            &writes::write(&take).expect("a claim has its expressions"),
        ));
    }
    // A new charge attempt's side on the head, after the first attempt (its guards on the
    // head) and after a later one (the head's latest only): one statement.
    let mut on_head = BTreeSet::new();
    for latest in [1, 2] {
        let head = charge_core::store_rules::AttemptOnHead {
            latest,
            after_operation_id: charge_core::domain::OperationId::new_random(),
        };
        on_head.extend(write_names(
            &writes::write(&head).expect("an attempt has its expressions"),
        ));
    }
    let grants = update_grants(policies_of(&t, "checkout"), "checkout");
    let listed: BTreeSet<BTreeSet<String>> = grants.iter().map(|g| g.attributes.clone()).collect();
    assert_eq!(
        listed,
        BTreeSet::from([reservation.clone(), taking.clone(), on_head.clone()]),
        "exactly what the reservation, the claim and the attempt name"
    );
    assert_eq!(grants.len(), 3);
    for never in [
        "amount",
        "external_id",
        "updated_at",
        "due_at",
        "lease_token",
    ] {
        assert!(!on_head.contains(never), "{never}");
    }
    for g in &grants {
        assert_eq!(
            g.equals,
            BTreeMap::from([(
                "dynamodb:EnclosingOperation".to_owned(),
                "TransactWriteItems".to_owned()
            )]),
            "checkout {}: only inside its transaction",
            g.sid
        );
    }
    for never in ["amount", "external_id", "due_at", "lease_token", "taken_by"] {
        assert!(!reservation.contains(never), "{never}");
    }
    for never in [
        "amount",
        "external_id",
        "lease_token",
        "refund_reserved",
        "attempts",
    ] {
        assert!(!taking.contains(never), "{never}");
    }
}

/// The events function (behind the public route when the webhook is on) updates a record only
/// through the executor's writes, the charge function's own: the claim, the fenced record of any
/// outcome (a refund's with its charge's release), and a refund's late failure with its release.
/// Its UpdateItem names exactly what those writes name, derived from the write builders: a write
/// naming anything else would be refused by IAM in production (the emulators do not evaluate
/// `dynamodb:Attributes` of expressions), an attribute listed but never named is a grant nobody
/// needs. It never names the amount, the currency, the customer, the payment method, who asked,
/// a taker, the history or the redrives.
#[test]
fn the_events_function_updates_only_what_the_executor_s_writes_name() {
    use charge_core::operation::LeaseToken;
    use charge_core::operation::OperationStatus::*;
    use charge_core::store::{OutcomeRecord, RefundFailedLater, ReleaseRefund};
    use charge_core::testing::T0;
    use charge_once::adapters::dynamodb::writes;
    // What the events path asks of the store: reads (charge_of: a dispute's order's latest
    // attempt; attempts_of: an intent's attempt by operation id; GetItems), an order's
    // refunds, and the three writes.
    // The executor (shared/src/executor/) is the charge function's too; the events function
    // reaches it through charge::apply_event and refund::apply_refund_event only.
    let root = workspace_root();
    assert_eq!(
        store_calls(&[
            root.join("functions/events/src"),
            root.join("shared/src/events"),
            root.join("shared/src/executor"),
        ]),
        BTreeSet::from(
            [
                "attempts_of",
                "charge_of",
                "claim",
                "create_beside",
                "fail_refund_later",
                "get",
                "record",
                "record_dispute",
                "refunds_of"
            ]
            .map(str::to_owned)
        )
    );
    let op = charge_core::testing::order("ord-events").manual().build();
    let token = LeaseToken::new_random();
    let release = ReleaseRefund {
        charge: op.charge_key(),
        amount: op.params.amount(),
        now: T0,
    };
    let mut named = BTreeSet::new();
    named.extend(write_names(
        &writes::write(&charge_core::testing::claim_request(&op, token, T0)).unwrap(),
    ));
    // Every status an outcome records, with every optional part and with none (a record without
    // an error REMOVEs it; settled, it leaves the index and stamps its settle time; unsettled, it
    // moves in it).
    for status in [Pending, Unknown, Authorized, Succeeded, Failed] {
        let bare = OutcomeRecord {
            last_error: None,
            ..charge_core::testing::outcome(&op, token, status, T0)
        };
        let full = OutcomeRecord {
            external_id: Some(charge_core::domain::PaymentIntentId::parse("pi_1").unwrap()),
            stripe_refund_id: Some(charge_core::domain::StripeRefundId::parse("re_1").unwrap()),
            capture_before: Some(T0),
            amount_captured: Some(op.params.amount()),
            review: Some(charge_core::operation::Review {
                reason: "stuck".into(),
                flagged_at: T0,
            }),
            release: Some(release.clone()),
            ..charge_core::testing::outcome(&op, token, status, T0)
        };
        // A refund's outcome names its Stripe id, a charge's its authorization: each kind's
        // record is written only what it holds.
        let refund = OutcomeRecord {
            key: charge_core::operation::OperationKey::refund(
                op.order_id.clone(),
                charge_core::domain::RefundId::parse("r-1").unwrap(),
            ),
            ..full.clone()
        };
        for rec in [bare, full, refund] {
            named.extend(write_names(&writes::write(&rec).unwrap()));
        }
    }
    named.extend(write_names(&writes::write(&release).unwrap()));
    let late = RefundFailedLater {
        key: op.key(),
        operation_id: op.operation_id,
        failure_reason: "expired_or_canceled_card".into(),
        release: release.clone(),
        now: T0,
    };
    named.extend(write_names(&writes::write(&late).unwrap()));
    // A dispute's writes: its move (open, in review or not, and settled) and its charge's side
    // (the open dispute named or cleared, a reservation made or given back).
    {
        use charge_core::dispute::state::DisputeState;
        use charge_core::store::{DisputeMark, DisputeMove, DisputeOnCharge};
        let d = charge_core::testing::stripe_dispute("dp_1", "pi_1");
        for (status, review, in_review) in [
            (Unknown, None, false),
            (
                Unknown,
                Some(charge_core::operation::Review {
                    reason: "dispute_unreserved".into(),
                    flagged_at: T0,
                }),
                false,
            ),
            (Unknown, None, true),
            (Succeeded, None, false),
        ] {
            let moved = DisputeMove {
                key: op.key(),
                operation_id: op.operation_id,
                expected_updated_at: T0,
                status,
                state: DisputeState::of(&d, true),
                next_due_at: Some(T0),
                review,
                last_error: Some("x".into()),
                in_review,
                on_charge: None,
                now: T0,
            };
            named.extend(write_names(&writes::write(&moved).unwrap()));
            let no_deadline = DisputeMove {
                state: DisputeState {
                    due_by: None,
                    ..moved.state.clone()
                },
                ..moved
            };
            named.extend(write_names(&writes::write(&no_deadline).unwrap()));
        }
        for (mark, reserve, give_back) in [
            (
                DisputeMark::Open {
                    dispute: d.id.clone(),
                    refundable: false,
                },
                Some((op.params.amount(), op.params.amount())),
                None,
            ),
            (DisputeMark::Clear, None, Some(op.params.amount())),
        ] {
            let side = DisputeOnCharge {
                charge: op.key(),
                charge_operation_id: op.operation_id,
                mark,
                reserve,
                give_back,
                now: T0,
            };
            named.extend(write_names(&writes::write(&side).unwrap()));
        }
    }

    for (name, set) in [("webhook", WEBHOOK), ("event source", EVENT_SOURCE)] {
        let t = config(set);
        let grants = update_grants(policies_of(&t, "events"), "webhook");
        assert_eq!(grants.len(), 1, "{name}: one UpdateItem statement");
        let g = &grants[0];
        assert_eq!(
            g.attributes,
            named,
            "{name} {}: listed but never named {:?}, named but not listed {:?}",
            g.sid,
            g.attributes.difference(&named).collect::<Vec<_>>(),
            named.difference(&g.attributes).collect::<Vec<_>>()
        );
        // Claims and records are plain UpdateItems: no EnclosingOperation.
        assert!(g.equals.is_empty(), "{name}: {:?}", g.equals);
    }
    for never in [
        "amount",
        "currency",
        "customer_id",
        "payment_method",
        "payment_intent",
        "requested_by",
        "taken_by",
        "history",
        "redrives",
        "fingerprint",
    ] {
        assert!(!named.contains(never), "{never}");
    }
}

/// The events function's one Put on the operations table is a dispute's first record: only
/// inside its transaction, naming exactly the attributes a dispute's record can hold
/// (`stored_item` of one open, in review, settled, with and without a deadline), none of a
/// charge's (customer, payment method, refunds' reservation, taker), nor a lease or a history.
#[test]
fn the_events_function_puts_only_a_dispute_s_record() {
    use charge_core::dispute::state::{DisputeParams, DisputeState};
    use charge_core::operation::{Operation, OperationStatus, Review};
    use charge_core::testing::T0;
    use charge_once::adapters::dynamodb::item::stored_item;
    let d = charge_core::testing::stripe_dispute("dp_1", "pi_1");
    let open = Operation::new_dispute(
        charge_core::domain::OrderId::parse("ord-put").unwrap(),
        DisputeParams::of(&d, d.payment_intent.clone().unwrap()).unwrap(),
        DisputeState::of(&d, true),
        T0,
        T0,
    );
    let mut reviewed = open.clone();
    reviewed.review = Some(Review {
        reason: "dispute_unreserved".into(),
        flagged_at: T0,
    });
    reviewed.last_error = Some("dispute_unreserved".into());
    let mut settled = open.clone();
    settled.status = OperationStatus::Succeeded;
    settled.next_due_at = None;
    settled.settled_at = Some(T0);
    let mut held: BTreeSet<String> = BTreeSet::new();
    for op in [open, reviewed, settled] {
        held.extend(stored_item(&op).into_keys());
    }
    for (name, set) in [("webhook", WEBHOOK), ("event source", EVENT_SOURCE)] {
        let t = config(set);
        let puts: Vec<Value> = statements_allowing(policies_of(&t, "events"), "dynamodb:PutItem")
            .into_iter()
            .filter(|st| str_at(st, "Sid") == Some("RecordDispute"))
            .collect();
        assert_eq!(puts.len(), 1, "{name}: one dispute put");
        let condition = get(&puts[0], "Condition").expect("conditioned");
        let listed: BTreeSet<String> = get(
            get(condition, "ForAllValues:StringEquals").expect("an attribute list"),
            "dynamodb:Attributes",
        )
        .and_then(Value::as_sequence)
        .expect("dynamodb:Attributes")
        .iter()
        .map(scalar_text)
        .collect();
        assert_eq!(
            listed,
            held,
            "{name}: listed but never held {:?}, held but not listed {:?}",
            listed.difference(&held).collect::<Vec<_>>(),
            held.difference(&listed).collect::<Vec<_>>()
        );
        assert_eq!(
            str_at(
                get(condition, "StringEquals").expect("EnclosingOperation"),
                "dynamodb:EnclosingOperation"
            ),
            Some("TransactWriteItems")
        );
    }
    for never in [
        "customer_id",
        "payment_method",
        "refund_reserved",
        "taken_by",
        "lease_token",
        "history",
        "requested_by",
    ] {
        assert!(!held.contains(never), "{never}");
    }
}

/// The operator policy's two UpdateItem lists are exactly what resolve's and redrive's writes
/// name, from the builders, with no constant in between: the operator policy test holds the lists
/// to `OPERATOR_WRITE_ATTRIBUTES` and writes.rs's
/// `the_operator_attributes_are_exactly_what_the_operator_writes_name` the constant to the writes
/// (adding the keys by hand, where here they come from the write's `Key`).
#[test]
fn the_operator_updates_name_exactly_what_resolve_and_redrive_name() {
    use charge_core::operation::OperationStatus::*;
    use charge_core::store::{ManualResolution, OperatorGuard, ReleaseRefund, Reschedule};
    use charge_core::testing::T0;
    use charge_once::adapters::dynamodb::schema::{DUE_AT, DUE_SHARD};
    use charge_once::adapters::dynamodb::writes;
    let op = charge_core::testing::order("ord-operator")
        .status(Unknown)
        .build();
    let audit = charge_core::operation::AuditEntry {
        action: "resolve".into(),
        previous_status: Unknown,
        new_status: Succeeded,
        note: "checked".into(),
        at: T0,
        caller: "arn:aws:iam::000000000000:user/alice".into(),
        label: None,
        forced: None,
        review: None,
        replaced_external_id: None,
    };
    let guard = OperatorGuard {
        lease_cutoff: T0,
        audit,
    };
    let release = ReleaseRefund {
        charge: op.charge_key(),
        amount: op.params.amount(),
        now: T0,
    };
    let resolve = |status, with: bool| ManualResolution {
        key: op.key(),
        operation_id: op.operation_id,
        status,
        external_id: with.then(|| charge_core::domain::PaymentIntentId::parse("pi_1").unwrap()),
        expected_updated_at: op.updated_at,
        stripe_refund_id: with.then(|| charge_core::domain::StripeRefundId::parse("re_1").unwrap()),
        release: with.then(|| release.clone()),
        guard: guard.clone(),
        authorization: None,
    };
    let mut named = BTreeSet::new();
    for status in [Succeeded, Failed] {
        for with in [false, true] {
            named.extend(write_names(&writes::write(&resolve(status, with)).unwrap()));
        }
        // A refund's resolution names its Stripe id (a charge's holds none).
        let refund = ManualResolution {
            key: charge_core::operation::OperationKey::refund(
                op.order_id.clone(),
                charge_core::domain::RefundId::parse("r-1").unwrap(),
            ),
            ..resolve(status, true)
        };
        named.extend(write_names(&writes::write(&refund).unwrap()));
    }
    for clear_review in [false, true] {
        let redrive = Reschedule {
            clear_review,
            operator: Some(guard.clone()),
            ..Reschedule::redrive(&op, T0, T0)
        };
        named.extend(write_names(&writes::write(&redrive).unwrap()));
    }
    named.extend(write_names(&writes::write(&release).unwrap()));
    // resolve --failed of a capture or cancel Stripe holds untouched: its charge given back.
    let given_back = charge_core::store::SettleAuthorization {
        charge: op.charge_key(),
        taker: charge_core::charge::state::Taker {
            capture: true,
            operation_id: op.operation_id,
        },
        outcome: charge_core::store::AuthorizationOutcome::GivenBack,
        now: T0,
    };
    named.extend(write_names(&writes::write(&given_back).unwrap()));
    // The index's keys are named by every one of them (a resolution removes them, a re-drive
    // moves them), listed by the constant in any case.
    assert!(named.contains(DUE_SHARD) && named.contains(DUE_AT));
    let t = template();
    let policy = resource(&t, "OperatorPolicy").expect("OperatorPolicy");
    let grants = update_grants(props(policy), "OperatorPolicy");
    assert_eq!(grants.len(), 2);
    for g in &grants {
        assert_eq!(g.attributes, named, "OperatorPolicy {}", g.sid);
    }
}

/// The audit's one write is its report, and IAM keeps it there: PutItem only under
/// `dynamodb:LeadingKeys` = [`AUDIT_PK`](charge_once::adapters::dynamodb::schema::AUDIT_PK), the
/// partition the report writer really puts to (`report_to_item`), which no operation's key can
/// be (`ORDER#<id>`). The emulators do not evaluate LeadingKeys, so nothing else would notice the
/// literal and the constant parting, or the writer moving its reports. The same condition holds
/// the operator policy's PutItem (`chargectl audit` keeps its report).
#[test]
fn the_audit_s_write_is_held_to_the_audit_partition_its_writer_puts_to() {
    use charge_core::audit::{judge, AuditPolicy, AuditWindow, Evidence};
    use charge_core::testing::T0;
    use charge_once::adapters::dynamodb::item::{attr_s, key_of, report_to_item};
    use charge_once::adapters::dynamodb::schema::{AUDIT_PK, PK};
    let window = AuditWindow {
        from: T0,
        to: T0.plus(std::time::Duration::from_secs(86_400)),
    };
    let policy = AuditPolicy {
        key_window: std::time::Duration::from_secs(23 * 3600),
        page_lead: std::time::Duration::from_secs(3600),
        refund_recheck: std::time::Duration::ZERO,
    };
    let report = judge(&Evidence::empty(window, window.to, false), &policy)
        .into_report(window, window.to, "audit");
    let item = report_to_item(&report).unwrap();
    assert_eq!(item[PK], attr_s(AUDIT_PK), "the report's partition");
    let order = charge_core::operation::OperationKey::charge(
        charge_core::domain::OrderId::parse(AUDIT_PK).unwrap(),
    );
    assert_ne!(
        key_of(&order).0,
        AUDIT_PK,
        "an order named AUDIT is not there"
    );

    // PutItem statements: each exactly `ForAllValues:StringEquals: dynamodb:LeadingKeys: [AUDIT]`.
    let held_to_audit = |policies: &Value, whose: &str| {
        let puts = statements_allowing(policies, "dynamodb:PutItem");
        assert_eq!(puts.len(), 1, "{whose}: one PutItem statement");
        let st = &puts[0];
        let mut actions = Vec::new();
        strings(get(st, "Action").unwrap(), &mut actions);
        assert_eq!(actions, ["dynamodb:PutItem"], "{whose}: its own statement");
        let condition = get(st, "Condition").expect("PutItem is conditioned");
        assert_eq!(
            condition.as_mapping().unwrap().len(),
            1,
            "{whose}: {condition:?}"
        );
        let all = get(condition, "ForAllValues:StringEquals").expect("ForAllValues");
        assert_eq!(all.as_mapping().unwrap().len(), 1, "{whose}: {all:?}");
        let mut keys = Vec::new();
        strings(get(all, "dynamodb:LeadingKeys").unwrap(), &mut keys);
        assert_eq!(keys, [AUDIT_PK], "{whose}: the AUDIT partition only");
    };
    let t = template();
    let audit = policies_of(&t, "audit");
    held_to_audit(audit, "audit");
    for never in [
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
    ] {
        assert!(
            statements_allowing(audit, never).is_empty(),
            "audit: {never}"
        );
    }
    held_to_audit(
        props(resource(&t, "OperatorPolicy").expect("OperatorPolicy")),
        "OperatorPolicy",
    );
}

/// The statements under `policies` that allow `action`.
fn statements_allowing(policies: &Value, action: &str) -> Vec<Value> {
    let mut found = Vec::new();
    statements(policies, String::new(), &mut found);
    found
        .into_iter()
        .map(|(_, st)| st)
        .filter(|st| {
            let mut actions = Vec::new();
            strings(get(st, "Action").unwrap(), &mut actions);
            actions.iter().any(|a| a == action)
        })
        .collect()
}

/// CloudFormation's rule functions (template reference, "Rule functions"): the only functions a
/// `Rules` block may use. Any other one (`Fn::Join`, `Fn::If`, `Fn::Sub`, …) makes CloudFormation
/// refuse the whole template ("Following functions are not supported in the Rules block"), which
/// no configuration evaluated here would show.
const RULE_FUNCTIONS: &[&str] = &[
    "Fn::And",
    "Fn::Contains",
    "Fn::EachMemberEquals",
    "Fn::EachMemberIn",
    "Fn::Equals",
    "Fn::Not",
    "Fn::Or",
    "Fn::RefAll",
    "Fn::ValueOf",
    "Fn::ValueOfAll",
    "Ref",
];

/// Every function used under `v`, long form (`Fn::Join: …`) or short tag (`!Join`, read as
/// `Fn::Join`), with where it is.
fn functions_in(v: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Tagged(t) => {
            let tag = t.tag.to_string();
            let name = tag.trim_start_matches('!');
            // `!Ref` and `!Condition` are `Ref:` and `Condition:`; every other tag is `Fn::<tag>`.
            let long = if name == "Ref" || name == "Condition" {
                name.to_owned()
            } else {
                format!("Fn::{name}")
            };
            out.push((long, path.to_owned()));
            functions_in(&t.value, path, out);
        }
        Value::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                functions_in(item, &format!("{path}[{i}]"), out);
            }
        }
        Value::Mapping(m) => {
            for (k, item) in m {
                let key = k.as_str().unwrap_or("?");
                if key == "Ref" || key.starts_with("Fn::") || key == "Condition" {
                    out.push((key.to_owned(), path.to_owned()));
                }
                functions_in(item, &format!("{path}/{key}"), out);
            }
        }
        _ => {}
    }
}

/// The functions of a template's `Rules` that are not rule functions, with where they are; and
/// how many functions the rules use in all.
fn non_rule_functions(t: &Value) -> (Vec<(String, String)>, usize) {
    let mut found = Vec::new();
    if let Some(rules) = get(t, "Rules") {
        functions_in(rules, "Rules", &mut found);
    }
    let all = found.len();
    found.retain(|(f, _)| !RULE_FUNCTIONS.contains(&f.as_str()));
    (found, all)
}

/// CloudFormation accepts the template's Rules: rule functions only, in either form. A refused
/// function there stops every deploy of the template, whatever the parameters. The rules still
/// do their work (the JWT rule, read with EachMemberEquals, refuses the default empty audience).
#[test]
fn the_rules_use_rule_functions_only() {
    let t = template();
    let (refused, all) = non_rule_functions(&t);
    assert!(refused.is_empty(), "not rule functions: {refused:?}");
    assert!(all >= 10, "the rules' functions are seen: {all}");
    // The JWT rule: the default audience list ([""]) is refused, one audience or more is not.
    let (_, refused) = Configuration::checked(
        &t,
        &[
            ("CheckoutAuth", "JWT"),
            ("JwtIssuer", "https://auth.example.com/"),
        ],
    );
    assert_eq!(
        refused,
        [(
            "JwtNeedsIssuerAndAudience".to_owned(),
            "CheckoutAuth=JWT needs JwtAudience".to_owned()
        )]
    );
    for audience in ["charge-once", "charge-once,orders"] {
        let set: Vec<_> = JWT
            .iter()
            .copied()
            .chain([("JwtAudience", audience)])
            .collect();
        let (_, refused) = Configuration::checked(&t, &set);
        assert!(refused.is_empty(), "{audience}: {refused:?}");
    }
}

/// The check refuses what CloudFormation refuses: `!Join` (what rule JwtNeedsIssuerAndAudience
/// used until CloudFormation refused the template), its long form, `!If`, `!Sub`, `!Condition`,
/// and accepts the rule functions in both forms.
#[test]
fn the_rules_check_refuses_functions_that_are_not_rule_functions() {
    let refused_in = |fragment: &str| -> Vec<String> {
        let t: Value = serde_norway::from_str(fragment).expect("a YAML fragment");
        non_rule_functions(&t)
            .0
            .into_iter()
            .map(|(f, _)| f)
            .collect()
    };
    for (fragment, function) in [
        (
            "Rules:\n  R:\n    Assertions:\n      - Assert: !Not [!Equals [!Join [\"\", !Ref JwtAudience], \"\"]]\n",
            "Fn::Join",
        ),
        (
            "Rules:\n  R:\n    Assertions:\n      - Assert:\n          Fn::Not:\n            - Fn::Equals:\n                - Fn::Join: [\"\", {Ref: JwtAudience}]\n                - \"\"\n",
            "Fn::Join",
        ),
        (
            "Rules:\n  R:\n    RuleCondition: !If [C, !Equals [a, a], !Equals [a, b]]\n    Assertions: []\n",
            "Fn::If",
        ),
        (
            "Rules:\n  R:\n    Assertions:\n      - Assert: !Equals [!Sub \"${Stage}\", prod]\n",
            "Fn::Sub",
        ),
        (
            "Rules:\n  R:\n    Assertions:\n      - Assert: !Condition UseJwtAuth\n",
            "Condition",
        ),
    ] {
        assert_eq!(refused_in(fragment), [function], "{fragment}");
    }
    let accepted = "Rules:\n  R:\n    RuleCondition: !Equals [!Ref CheckoutAuth, JWT]\n    Assertions:\n      - Assert: !And [!Not [!EachMemberEquals [!Ref JwtAudience, \"\"]], {\"Fn::Contains\": [[a, b], {Ref: Stage}]}]\n";
    assert_eq!(refused_in(accepted), Vec::<String>::new());
}

// ---- The outbox's stream filter ----

/// notify's event source mapping's filter patterns, parsed.
fn notify_filter_patterns(t: &Value) -> Vec<String> {
    let (notify_id, _) = function(t, "notify");
    let mappings: Vec<_> = of_type(t, "AWS::Lambda::EventSourceMapping")
        .into_iter()
        .filter(|(_, m)| logical_id_of(raw_prop(m, "FunctionName")).as_deref() == Some(&notify_id))
        .collect();
    assert_eq!(mappings.len(), 1);
    let filters = get(props(mappings[0].1), "FilterCriteria")
        .and_then(|f| get(f, "Filters"))
        .and_then(Value::as_sequence)
        .expect("FilterCriteria.Filters");
    filters
        .iter()
        .map(|f| str_at(f, "Pattern").expect("a Pattern").to_owned())
        .collect()
}

/// A stream record of the table (NEW_AND_OLD_IMAGES) for the write from `before` to `after`,
/// its images as the DynamoDB adapter writes the records (`stored_item`: the real attribute
/// names, the index keys while unsettled), in DynamoDB JSON as Lambda's event carries them.
fn stream_record(
    before: Option<&charge_core::operation::Operation>,
    after: &charge_core::operation::Operation,
) -> serde_json::Value {
    use charge_once::adapters::dynamodb::item::{item_json, stored_item};
    let mut dynamodb = serde_json::json!({ "NewImage": item_json(&stored_item(after)) });
    if let Some(b) = before {
        dynamodb["OldImage"] = item_json(&stored_item(b));
    }
    serde_json::json!({
        "eventName": if before.is_some() { "MODIFY" } else { "INSERT" },
        "eventSource": "aws:dynamodb",
        "dynamodb": dynamodb,
    })
}

/// A write as the stream carries it: what it is, the record before (none for an insert), after.
type StreamWrite = (
    String,
    Option<charge_core::operation::Operation>,
    charge_core::operation::Operation,
);

/// Every write the outbox could be asked about, as (what, before, after): a charge paid at once,
/// one authorized first, and a refund, each inserted or moved from every status, with and without
/// a review flag, to every status, with and without one.
fn every_write() -> Vec<StreamWrite> {
    use charge_core::operation::{
        Operation,
        OperationStatus::{self, *},
        Review,
    };
    use charge_core::testing::T0;
    let statuses = [Pending, Unknown, Authorized, Succeeded, Failed];
    // A status added to OperationStatus fails to compile here until it is in the list above.
    for s in statuses {
        match s {
            Pending | Unknown | Authorized | Succeeded | Failed => {}
        }
    }
    let refund = {
        let charge = charge_core::testing::order("ord-filter-r")
            .status(Succeeded)
            .external_id("pi_f")
            .build();
        let request = charge_core::refund::request::RefundRequest {
            amount: Some(charge_core::domain::Amount::new(100).unwrap()),
            reason: None,
        };
        let (params, _) = charge_core::refund::reserve(&charge, &request, T0).unwrap();
        Operation::new_refund(
            charge.order_id.clone(),
            charge_core::domain::RefundId::parse("r-1").unwrap(),
            &request,
            params,
            charge_core::domain::Principal::jwt("support").unwrap(),
            T0,
            charge_core::testing::GRACE,
        )
    };
    let dispute = {
        use charge_core::dispute::state::{DisputeParams, DisputeState};
        let d = charge_core::testing::stripe_dispute("dp_f", "pi_f");
        Operation::new_dispute(
            charge_core::domain::OrderId::parse("ord-filter-d").unwrap(),
            DisputeParams::of(&d, d.payment_intent.clone().unwrap()).unwrap(),
            DisputeState::of(&d, true),
            T0,
            T0,
        )
    };
    let kinds = [
        ("charge", charge_core::testing::order("ord-filter").build()),
        (
            "manual charge",
            charge_core::testing::order("ord-filter-m").manual().build(),
        ),
        ("refund", refund),
        ("dispute", dispute),
    ];
    let at = |op: &Operation, status: OperationStatus, reviewed: bool| {
        let mut op = op.clone();
        op.status = status;
        if status.is_settled() {
            op.next_due_at = None;
            op.settled_at = Some(T0);
        }
        op.review = reviewed.then(|| Review {
            reason: "search found 2".into(),
            flagged_at: T0,
        });
        op
    };
    let mut writes = Vec::new();
    for (kind, op) in &kinds {
        for status in statuses {
            for reviewed in [false, true] {
                let after = at(op, status, reviewed);
                let flag = |r: bool| if r { " (in review)" } else { "" };
                writes.push((
                    format!("{kind}: insert {status}{}", flag(reviewed)),
                    None,
                    after.clone(),
                ));
                for was in statuses {
                    for was_reviewed in [false, true] {
                        writes.push((
                            format!(
                                "{kind}: {was}{} -> {status}{}",
                                flag(was_reviewed),
                                flag(reviewed)
                            ),
                            Some(at(op, was, was_reviewed)),
                            after.clone(),
                        ));
                    }
                }
            }
        }
    }
    writes
}

/// The outcome writes (those `outcome_change` turns into an outcome) no pattern lets through.
fn outcomes_filtered_out(patterns: &[String]) -> Vec<String> {
    let patterns: Vec<serde_json::Value> = patterns
        .iter()
        .map(|p| serde_json::from_str(p).expect("a pattern is JSON"))
        .collect();
    let mut lost = Vec::new();
    for (what, before, after) in every_write() {
        let Some(outcome) = charge_core::outbox::outcome_change(before.as_ref(), &after) else {
            continue;
        };
        let record = stream_record(before.as_ref(), &after);
        if !patterns.iter().any(|p| pattern_matches(p, &record)) {
            lost.push(format!("{what} ({outcome:?})"));
        }
    }
    lost
}

/// Lambda drops a stream record no filter pattern matches before notify sees it, so a write the
/// outbox would publish and the filter drops is an outcome never published (ChargeAuthorized was,
/// while `authorized` was missing from the status list). Every write `outcome_change` turns into
/// an outcome passes at least one of the template's patterns; and the filter does filter.
#[test]
fn the_notify_stream_filter_passes_every_outcome_write() {
    let patterns = notify_filter_patterns(&template());
    assert_eq!(patterns.len(), 3, "{patterns:?}");
    let writes = every_write();
    let outcomes = writes
        .iter()
        .filter(|(_, b, a)| charge_core::outbox::outcome_change(b.as_ref(), a).is_some())
        .count();
    assert!(outcomes >= 50, "outcome writes enumerated: {outcomes}");
    assert_eq!(outcomes_filtered_out(&patterns), Vec::<String>::new());

    // Not vacuous: writes that are no outcome are dropped (a claim of a pending charge, an
    // unknown one re-scheduled), by every pattern.
    let parsed: Vec<serde_json::Value> = patterns
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    let mut passes: BTreeMap<&str, bool> = BTreeMap::new();
    let mut dropped = 0;
    for (what, before, after) in &writes {
        let record = stream_record(before.as_ref(), after);
        let through = parsed.iter().any(|p| pattern_matches(p, &record));
        if charge_core::outbox::outcome_change(before.as_ref(), after).is_none() && !through {
            dropped += 1;
        }
        passes.insert(what, through);
    }
    assert!(dropped > 0);
    for example in [
        "charge: pending -> pending",
        "charge: unknown -> unknown",
        "refund: insert pending",
    ] {
        assert_eq!(
            passes.get(example),
            Some(&false),
            "{example} is no outcome and is filtered out"
        );
    }
}

/// The check fails on the filter as it was: without `authorized` in the status list, every write
/// that newly authorizes a manual charge (ChargeAuthorized) is dropped.
#[test]
fn the_stream_filter_check_finds_the_authorized_writes_a_filter_without_them_drops() {
    let patterns = notify_filter_patterns(&template());
    let without: Vec<String> = patterns
        .iter()
        .map(|p| p.replace(r#""authorized","#, ""))
        .collect();
    assert_ne!(without, patterns, "the template lists authorized");
    let lost = outcomes_filtered_out(&without);
    assert!(!lost.is_empty());
    assert!(
        lost.iter()
            .all(|w| w.contains("-> authorized") || w.contains("insert authorized")),
        "{lost:?}"
    );
    assert!(
        lost.iter()
            .any(|w| w.starts_with("manual charge: pending -> authorized")),
        "{lost:?}"
    );
    // And the matcher itself: exact strings, exists, nesting.
    let p = serde_json::json!({"a": {"b": ["x", "y"]}, "c": [{"exists": true}]});
    assert!(pattern_matches(
        &p,
        &serde_json::json!({"a": {"b": "y"}, "c": 1})
    ));
    assert!(!pattern_matches(
        &p,
        &serde_json::json!({"a": {"b": "z"}, "c": 1})
    ));
    assert!(!pattern_matches(&p, &serde_json::json!({"a": {"b": "x"}})));
    assert!(!pattern_matches(&p, &serde_json::json!({"a": "x", "c": 1})));
}

// ---- The operator's dashboard ----

/// The workspace root.
fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Every `.rs` file under `dir`, its text up to its first `#[cfg(test)]` (what ships).
fn shipped_sources(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            shipped_sources(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let shipped = text.split("#[cfg(test)]").next().unwrap_or("").to_owned();
            out.push((path, shipped));
        }
    }
}

/// The text of the call whose `(` is at `open`: its arguments, without the parentheses.
fn call_args(text: &str, open: usize) -> &str {
    let bytes = text.as_bytes();
    let (mut depth, mut in_str, mut i) = (0usize, false, open);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_str => i += 1,
            b'"' => in_str = !in_str,
            b'(' | b'[' if !in_str => depth += 1,
            b')' | b']' if !in_str => {
                depth -= 1;
                if depth == 0 {
                    return &text[open + 1..i];
                }
            }
            _ => {}
        }
        i += 1;
    }
    &text[open + 1..]
}

/// Splits at commas outside parentheses, brackets and strings.
fn top_level_args(args: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut in_str) = (Vec::new(), String::new(), 0i32, false);
    let mut chars = args.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if in_str => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
                continue;
            }
            '"' => in_str = !in_str,
            '(' | '[' if !in_str => depth += 1,
            ')' | ']' if !in_str => depth -= 1,
            ',' if !in_str && depth == 0 => {
                out.push(cur.trim().to_owned());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_owned());
    }
    out
}

/// The string literal an argument is, if it is one (`"charge"` → `charge`).
fn literal(arg: &str) -> Option<String> {
    let a = arg.trim();
    (a.len() >= 2 && a.starts_with('"') && a.ends_with('"')).then(|| a[1..a.len() - 1].to_owned())
}

const UNITS: [&str; 5] = ["Count", "Seconds", "Milliseconds", "Bytes", "None"];

/// The metric names of a metrics argument: each `("Name", value, "Unit")` tuple in it (on one
/// line or several).
fn metric_names(arg: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (open, _) in arg.match_indices('(') {
        if !arg[open + 1..].trim_start().starts_with('"') {
            continue;
        }
        let tuple = top_level_args(call_args(arg, open));
        if let (Some(name), Some(unit)) = (
            tuple.first().and_then(|a| literal(a)),
            tuple.last().and_then(|a| literal(a)),
        ) {
            if tuple.len() == 3 && UNITS.contains(&unit.as_str()) {
                names.push(name);
            }
        }
    }
    names
}

/// What the code emits, read from every shipped source of the functions and the shells: for
/// each `emf_line(function, at, metrics)` and `emf_line_classed(function, (class, _), at,
/// metrics)` call, its function (a literal, or the file's `FUNCTION` constant; `*` when it is a
/// helper's parameter, as `sent_to_review_line(function, …)`'s), and each metric in it with its
/// dimension sets: `[Function]`, and `[Function, <class>]` for a classed line. Also the names the
/// code gives functions.
struct Emitted {
    metrics: BTreeMap<(String, String), BTreeSet<Vec<String>>>,
    functions: BTreeSet<String>,
}

fn emitted() -> Emitted {
    let root = workspace_root();
    let mut sources = Vec::new();
    shipped_sources(&root.join("shared/src"), &mut sources);
    shipped_sources(&root.join("functions"), &mut sources);
    let mut e = Emitted {
        metrics: BTreeMap::new(),
        functions: BTreeSet::new(),
    };
    for (_, text) in &sources {
        let own = text.find("const FUNCTION: &str = \"").and_then(|i| {
            let rest = &text[i + "const FUNCTION: &str = \"".len()..];
            rest.split('"').next().map(str::to_owned)
        });
        for (call, classed) in [("emf_line(", false), ("emf_line_classed(", true)] {
            let mut at = 0;
            while let Some(i) = text[at..].find(call) {
                let start = at + i;
                at = start + call.len();
                let before = &text[..start];
                if before.ends_with("fn ") || before.ends_with('_') {
                    continue;
                }
                let args = top_level_args(call_args(text, start + call.len() - 1));
                let function = match args.first().map(String::as_str) {
                    Some("FUNCTION") => own.clone().unwrap_or_else(|| "*".to_owned()),
                    Some(a) => literal(a).unwrap_or_else(|| "*".to_owned()),
                    None => continue,
                };
                if function != "*" {
                    e.functions.insert(function.clone());
                }
                let mut dims = vec![vec!["Function".to_owned()]];
                if classed {
                    let class = args
                        .get(1)
                        .map(|a| {
                            top_level_args(a.trim().trim_start_matches('(').trim_end_matches(')'))
                        })
                        .and_then(|t| t.first().and_then(|k| literal(k)))
                        .unwrap_or_else(|| "?".to_owned());
                    dims.push(vec!["Function".to_owned(), class]);
                }
                let metrics_arg = args.last().map(String::as_str).unwrap_or("");
                for name in metric_names(metrics_arg) {
                    let entry = e.metrics.entry((function.clone(), name)).or_default();
                    for d in &dims {
                        let mut d = d.clone();
                        d.sort();
                        entry.insert(d);
                    }
                }
            }
        }
    }
    e
}

/// Why one widget metric (`[namespace, name, key, value, …, {options}?]`) is not one the code
/// emits with these dimensions; `None` when it is. A `SEARCH` expression names its namespace,
/// dimension keys and metric: those are held the same way, for any function.
fn widget_metric_problem(m: &serde_json::Value, e: &Emitted) -> Option<String> {
    if !m.is_array() {
        return Some(format!(
            "{m}: CloudWatch takes each metric, expressions too, as an array"
        ));
    }
    if let Some(expr) = m
        .get(0)
        .and_then(|o| o.get("expression"))
        .and_then(|x| x.as_str())
    {
        let Some(schema) = expr.split_once("SEARCH('{").map(|(_, r)| r) else {
            return None; // arithmetic over the other metrics of the widget, held one by one
        };
        let (keys, rest) = schema.split_once('}')?;
        let mut keys: Vec<String> = keys.split(',').map(|k| k.trim().to_owned()).collect();
        let namespace = keys.remove(0);
        let name = rest
            .split("MetricName=\"")
            .nth(1)?
            .split('"')
            .next()?
            .to_owned();
        keys.sort();
        let found = e
            .metrics
            .iter()
            .any(|((_, n), dims)| *n == name && dims.contains(&keys));
        return (namespace != "ChargeOnce" || !found)
            .then(|| format!("SEARCH of {namespace} {name} by {keys:?}: not emitted so"));
    }
    let parts: Vec<&serde_json::Value> = m.as_array()?.iter().collect();
    let text = |i: usize| parts.get(i).and_then(|v| v.as_str()).unwrap_or("");
    let namespace = text(0);
    let name = text(1).to_owned();
    let mut pairs = BTreeMap::new();
    let mut i = 2;
    while i + 1 < parts.len() && parts[i].is_string() {
        pairs.insert(text(i).to_owned(), text(i + 1).to_owned());
        i += 2;
    }
    if namespace != "ChargeOnce" {
        return None;
    }
    let Some(function) = pairs.get("Function") else {
        return Some(format!("{name}: no Function dimension"));
    };
    if !e.functions.contains(function) {
        return Some(format!("{name}: Function={function} is no function's name"));
    }
    let mut keys: Vec<String> = pairs.keys().cloned().collect();
    keys.sort();
    let emitted_so = [function.as_str(), "*"].iter().any(|f| {
        e.metrics
            .get(&(f.to_string(), name.clone()))
            .is_some_and(|dims| dims.contains(&keys))
    });
    if !emitted_so {
        return Some(format!(
            "{name} with {pairs:?}: the code emits no such metric with these dimensions"
        ));
    }
    let known = |key: &str, value: &str| match key {
        "DriftClass" => charge_core::audit::DriftClass::parse(value).is_some(),
        "Kind" => charge_once::audit::KINDS.contains(&value),
        _ => true,
    };
    pairs
        .iter()
        .find(|(k, v)| !known(k, v))
        .map(|(k, v)| format!("{name}: {k}={v} is not a value the code gives it"))
}

/// The dashboard's body with its substitutions made: the budget parameter as its default, every
/// other `${…}` (the region, a queue's name) as a placeholder string.
fn dashboard_widgets(t: &Value) -> (Vec<serde_json::Value>, String) {
    let (_, dash) = of_type(t, "AWS::CloudWatch::Dashboard")
        .into_iter()
        .find(|(id, _)| id == "OperatorDashboard")
        .expect("the OperatorDashboard resource");
    // `!Sub [text, {name: value}]`: the JSON text, and the names it substitutes beside the
    // stack's own references.
    let sub = get(props(dash), "DashboardBody").expect("a DashboardBody");
    let raw = match sub {
        Value::Sequence(parts) => scalar_text(&parts[0]),
        other => scalar_text(other),
    };
    let budget = scalar_text(get(parameter(t, "StripeRequestsPerSecond"), "Default").unwrap());
    let mut body = raw.replace("${StripeRequestsPerSecond}", &budget);
    while let Some(i) = body.find("${") {
        let end = body[i..].find('}').map_or(body.len(), |e| i + e + 1);
        body.replace_range(i..end, "substituted");
    }
    let json: serde_json::Value =
        serde_json::from_str(&body).expect("the dashboard body is JSON once substituted");
    let widgets = json["widgets"].as_array().cloned().expect("widgets");
    (widgets, raw)
}

/// The operator's dashboard: every ChargeOnce metric a widget draws is one the code emits, with
/// the same dimensions (and class values the code gives); every queue it draws is one of the
/// stack's; each widget has a title and its axes say their units.
#[test]
fn every_dashboard_widget_draws_a_metric_the_code_emits_with_its_dimensions() {
    let t = template();
    let e = emitted();
    // The scan found what it must: the audit's classed drift and the reconciler's ages.
    assert!(e.metrics[&("audit".into(), "AuditDrift".into())]
        .contains(&vec!["DriftClass".to_owned(), "Function".to_owned()]));
    assert!(
        e.metrics
            .contains_key(&("reconciler".into(), "OldestUnsettledAge".into())),
        "{:?}",
        e.metrics.keys().collect::<Vec<_>>()
    );
    let (widgets, raw) = dashboard_widgets(&t);
    assert!(widgets.len() >= 10, "{} widgets", widgets.len());
    let mut problems = Vec::new();
    let mut drawn = 0;
    for w in &widgets {
        let p = &w["properties"];
        let title = p["title"].as_str().unwrap_or("");
        assert!(!title.is_empty(), "a widget without a title: {w}");
        assert!(
            p["yAxis"]["left"]["label"]
                .as_str()
                .is_some_and(|l| !l.is_empty()),
            "{title}: its left axis says no unit"
        );
        let metrics = p["metrics"].as_array().expect("metrics");
        let ids: BTreeSet<&str> = metrics
            .iter()
            .filter_map(|m| m.as_array()?.last()?.get("id")?.as_str())
            .collect();
        for m in metrics {
            drawn += 1;
            if let Some(why) = widget_metric_problem(m, &e) {
                problems.push(format!("{title}: {why}"));
            }
            // An expression over the widget's metrics names only metrics it has.
            let expr = m
                .get(0)
                .and_then(|o| o.get("expression"))
                .and_then(|x| x.as_str());
            if let Some(list) = expr
                .and_then(|x| x.split_once("SUM(["))
                .and_then(|(_, r)| r.split_once(']'))
            {
                for id in list.0.split(',').map(str::trim) {
                    if !ids.contains(id) {
                        problems.push(format!(
                            "{title}: the expression names {id}, no metric's id"
                        ));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(drawn > 40, "{drawn} metrics drawn");
    // The queues it draws are the stack's.
    let queues: BTreeSet<String> = of_type(&t, "AWS::SQS::Queue")
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let mut named = 0;
    for part in raw.split("${").skip(1) {
        if let Some(id) = part
            .split('}')
            .next()
            .and_then(|r| r.strip_suffix(".QueueName"))
        {
            assert!(
                queues.contains(id),
                "the dashboard draws {id}, no queue of the stack"
            );
            named += 1;
        }
    }
    // The events' queue, by its variable: the stack's queue when events come in.
    let dash = resource(&t, "OperatorDashboard").unwrap();
    let vars = match get(props(dash), "DashboardBody") {
        Some(Value::Sequence(parts)) => parts[1].clone(),
        other => panic!("DashboardBody is not !Sub [text, variables]: {other:?}"),
    };
    let events = get(&vars, "EventsDeadLetterQueueName").expect("the events queue's variable");
    let text = format!("{events:?}");
    assert!(
        text.contains("StripeEventsDeadLetterQueue.QueueName"),
        "{text}"
    );
    assert!(raw.contains("${EventsDeadLetterQueueName}"));
    assert_eq!(
        named, 2,
        "the charge and notify dead-letter queues by their own names"
    );
}

/// Every class the audit finds is a metric with an alarm of its own that pages (docs/operations.md
/// says so); `paid_twice` (an order paid by two of its charge attempts) says to look at the
/// order's attempts first. The twin: a class the code never gives has no alarm.
#[test]
fn every_drift_class_has_its_own_alarm() {
    let t = template();
    for class in charge_core::audit::DriftClass::ALL {
        let (id, alarm) = alarm_on(
            &t,
            "ChargeOnce",
            "AuditDrift",
            ("DriftClass", class.as_str()),
        )
        .unwrap_or_else(|| panic!("no alarm on the audit's {}", class.as_str()));
        assert!(notifies_alarm_topic(alarm), "{id}: notifies AlarmTopicArn");
    }
    let (id, alarm) =
        alarm_on(&t, "ChargeOnce", "AuditDrift", ("DriftClass", "paid_twice")).unwrap();
    assert_eq!(id, "AuditPaidTwiceAlarm");
    let description = str_at(props(alarm), "AlarmDescription").unwrap_or_default();
    assert!(
        description.contains("First run: chargectl show <order_id>"),
        "{description}"
    );
    assert!(alarm_on(
        &t,
        "ChargeOnce",
        "AuditDrift",
        ("DriftClass", "paid_thrice")
    )
    .is_none());
}

/// The twin: a metric nobody emits, one under dimensions it is not emitted with, a function that
/// does not exist and a class value the code never gives are each refused; the genuine metric
/// in the same setup is accepted.
#[test]
fn the_dashboard_check_refuses_what_the_code_does_not_emit() {
    let e = emitted();
    let check = |m: serde_json::Value| widget_metric_problem(&m, &e);
    let genuine = serde_json::json!([
        "ChargeOnce",
        "AuditDrift",
        "Function",
        "audit",
        "DriftClass",
        "status_differs"
    ]);
    assert_eq!(check(genuine), None);
    for bad in [
        serde_json::json!({"expression": "SEARCH('{ChargeOnce,Function,Endpoint} MetricName=\"StripeRequests\"', 'Sum', 60)"}),
        serde_json::json!(["ChargeOnce", "NobodyEmitsThis", "Function", "audit"]),
        serde_json::json!([
            "ChargeOnce",
            "AuditDrift",
            "Function",
            "audit",
            "Kind",
            "charge"
        ]),
        serde_json::json!([
            "ChargeOnce",
            "AuditDrift",
            "Function",
            "auditor",
            "DriftClass",
            "status_differs"
        ]),
        serde_json::json!([
            "ChargeOnce",
            "AuditDrift",
            "Function",
            "audit",
            "DriftClass",
            "slightly_off"
        ]),
        serde_json::json!([{"expression": "SEARCH('{ChargeOnce,Function,Shard} MetricName=\"StripeRequests\"', 'Sum', 60)"}]),
    ] {
        assert!(check(bad.clone()).is_some(), "{bad} accepted");
    }
    assert_eq!(
        check(
            serde_json::json!([{"expression": "SEARCH('{ChargeOnce,Function,Endpoint} MetricName=\"StripeRequests\"', 'Sum', 60)"}])
        ),
        None
    );
}

/// The picture of the dashboard in the docs is this dashboard: drawn by `simulate --dashboard`
/// from a run (its title names the run), every widget of the template in it by its title. Made
/// again with `make dashboard` after the dashboard changes.
#[test]
fn the_dashboard_picture_in_the_docs_draws_every_widget_of_the_template() {
    let t = template();
    let (widgets, _) = dashboard_widgets(&t);
    let svg = std::fs::read_to_string(workspace_root().join("docs/operations-dashboard.svg"))
        .expect("docs/operations-dashboard.svg (make dashboard)");
    assert!(
        svg.contains("drawn from `simulate --seed"),
        "not drawn from a simulation run"
    );
    for w in &widgets {
        let title = w["properties"]["title"].as_str().unwrap();
        let escaped = title
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        assert!(
            svg.contains(&format!(">{escaped}</text>")),
            "the picture lacks the widget {title:?}: run make dashboard"
        );
    }
}

// ---- What the deployed stack's emulator does not ask: the pollers' grants ----

/// What an event source mapping's poller must be allowed on its source, by the function's own
/// role: AWS documents ReceiveMessage, DeleteMessage and GetQueueAttributes for an SQS source,
/// and DescribeStream, GetRecords, GetShardIterator and ListStreams for a DynamoDB stream.
fn poller_actions(source: &str) -> &'static [&'static str] {
    if source.ends_with(".StreamArn") {
        &[
            "dynamodb:DescribeStream",
            "dynamodb:GetRecords",
            "dynamodb:GetShardIterator",
            "dynamodb:ListStreams",
        ]
    } else {
        &[
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:GetQueueAttributes",
        ]
    }
}

/// Every poller action a mapping needs that its function's role does not grant on its source,
/// as `mapping: action on source`.
fn missing_poller_grants(t: &Value) -> Vec<String> {
    let resources = get(t, "Resources").unwrap();
    let mut missing = Vec::new();
    let mappings = of_type(t, "AWS::Lambda::EventSourceMapping");
    assert!(mappings.len() >= 2, "the charge queue's and the stream's");
    for (id, m) in mappings {
        let function = logical_id_of(raw_prop(m, "FunctionName")).expect("FunctionName");
        let code = str_at(props(get(resources, &function).unwrap()), "CodeUri").unwrap();
        let dir = code.trim_start_matches("functions/").trim_end_matches('/');
        let mut source = Vec::new();
        strings(raw_prop(m, "EventSourceArn"), &mut source);
        let source = source.join("");
        let grants = function_grants(t, dir);
        for action in poller_actions(&source) {
            let granted = grants
                .iter()
                .any(|(a, r)| a.iter().any(|x| x == action) && r.contains(&source));
            if !granted {
                missing.push(format!("{id}: {action} on {source}"));
            }
        }
    }
    missing
}

/// The emulator `make deploy-local` runs on polls the queue and the stream as itself and never
/// asks the function's role (a sweep that took each statement away found the charge function's
/// PollChargeQueue unneeded there): so this holds them, for every mapping.
#[test]
fn every_event_source_mapping_s_function_may_poll_its_source() {
    let missing = missing_poller_grants(&template());
    assert!(missing.is_empty(), "{missing:#?}");
}

/// The twin: the same check over a template whose charge role lost ReceiveMessage names it.
#[test]
fn a_poller_grant_taken_away_is_named() {
    let edited = TEMPLATE.replacen(
        "Action: [sqs:ReceiveMessage, sqs:DeleteMessage",
        "Action: [sqs:DeleteMessage",
        1,
    );
    assert_ne!(edited, TEMPLATE, "the charge function's poller statement");
    let t: Value = serde_norway::from_str(&edited).unwrap();
    assert_eq!(
        missing_poller_grants(&t),
        ["ChargeQueueEventSource: sqs:ReceiveMessage on ChargeQueue.Arn"]
    );
}
