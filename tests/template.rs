//! Holds `template.yaml` (the SAM template) to the code, offline — no AWS, no moto:
//!
//! - each function's environment variables are exactly the names its config's `from_env` reads;
//! - no IAM statement anywhere has a `*` in its Action or Resource, and no SAM policy template or
//!   managed policy is attached by hand;
//! - the charge queue's visibility timeout is at least 6 × the charge function's timeout;
//! - the table's keys and its one index are the ones `DynamoStore` queries (`UNKNOWN_INDEX`, with
//!   `UNKNOWN_INDEX_PROJECTED` only, so a claim writes no index entry), and the reconciler may
//!   query exactly the unknown index;
//! - the Lambda settings the deployment relies on (runtime, arm64, cargo-lambda build, JSON logs,
//!   partial batch responses, one reconciler at a time);
//! - the door: every HTTP route has an IAM or JWT authorizer in every configuration (IAM by
//!   default, no unauthenticated choice), the invoke grant names exactly the checkout route and the
//!   caller-role parameter, the API writes JSON access logs and pages on 5xx.
//!
//! CloudFormation's short tags (`!Ref`, `!GetAtt`, `!Sub`, …) parse as tagged values; [`plain`]
//! looks through them.

use std::collections::{BTreeMap, BTreeSet};

use charge_once::adapters::dynamodb::{UNKNOWN_INDEX, UNKNOWN_INDEX_PROJECTED};
use serde_norway::Value;

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

#[test]
fn each_function_gets_exactly_the_variables_its_config_reads() {
    use charge_once::config::FromEnv;
    let t = template();
    for (dir, expected) in [
        ("checkout", checkout::CheckoutConfig::env_vars()),
        ("charge", charge::ChargeConfig::env_vars()),
        ("reconciler", reconciler::ReconcilerConfig::env_vars()),
        ("notify", notify::NotifyConfig::env_vars()),
        ("webhook", webhook::WebhookConfig::env_vars()),
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
                    match plain(val) {
                        Value::Sequence(list) => {
                            for (i, st) in list.iter().enumerate() {
                                out.push((format!("{path}/Statement[{i}]"), plain(st).clone()));
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
    let t = template();
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
    // The operations table; the webhook inbox (issue 17) has its own test below.
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
        [UNKNOWN_INDEX],
        "one index: no index by operation id (issue 15)"
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
    assert_eq!(projected, [UNKNOWN_INDEX_PROJECTED]);
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

    // The reconciler may Query the unknown index, and only it.
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
        [format!("${{{table_id}.Arn}}/index/{UNKNOWN_INDEX}")]
    );
}

#[test]
fn functions_are_arm64_cargo_lambda_builds_with_json_logs() {
    let t = template();
    for dir in ["checkout", "charge", "reconciler", "notify"] {
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
    let routes = of_type(&t, "AWS::ApiGatewayV2::Route");
    assert!(!routes.is_empty(), "the checkout route");
    // The one exception (issue 17): Stripe's webhook cannot sign SigV4 or carry our JWT; the
    // webhook function verifies Stripe's signature before reading anything, and that route
    // reaches the webhook function only (which can settle, never create).
    let unauthenticated: Vec<&String> = routes
        .iter()
        .filter(|(_, r)| {
            branches(raw_prop(r, "AuthorizationType"))
                .iter()
                .any(|v| plain(v).as_str() == Some("NONE"))
        })
        .map(|(id, _)| id)
        .collect();
    assert_eq!(
        unauthenticated,
        ["WebhookRoute"],
        "the only route without an authorizer"
    );
    let webhook = routes
        .iter()
        .find(|(id, _)| id == "WebhookRoute")
        .expect("the webhook route")
        .1;
    assert_eq!(
        str_at(props(webhook), "RouteKey"),
        Some("POST /stripe/webhook")
    );
    assert!(get(props(webhook), "AuthorizerId").is_none());
    let target: Vec<String> = {
        let mut out = Vec::new();
        strings(raw_prop(webhook, "Target"), &mut out);
        out
    };
    assert_eq!(target, ["integrations/${WebhookIntegration}"]);
    let integration = resources(&t)
        .into_iter()
        .find(|(id, _)| id == "WebhookIntegration")
        .expect("WebhookIntegration")
        .1;
    assert_eq!(
        logical_id_of(raw_prop(integration, "IntegrationUri")).as_deref(),
        Some("WebhookFunction")
    );
    for (id, r) in routes.iter().filter(|(id, _)| id != "WebhookRoute") {
        let kinds: Vec<&str> = branches(raw_prop(r, "AuthorizationType"))
            .into_iter()
            .map(|v| plain(v).as_str().expect("a literal authorization type"))
            .collect();
        assert!(
            kinds.iter().all(|k| matches!(*k, "AWS_IAM" | "JWT")),
            "{id}: authorization {kinds:?} (NONE is never allowed)"
        );
        if kinds.contains(&"JWT") {
            let scopes = raw_prop(r, "AuthorizationScopes");
            assert!(
                branches(scopes)
                    .iter()
                    .any(|b| plain(b).as_sequence().is_some()),
                "{id}: a JWT route requires a scope"
            );
            let authorizer = branches(raw_prop(r, "AuthorizerId"))
                .into_iter()
                .find_map(logical_id_of)
                .expect("a JWT route names its authorizer");
            let a = props(
                resources(&t)
                    .into_iter()
                    .find(|(i, _)| *i == authorizer)
                    .expect("the JWT authorizer")
                    .1,
            );
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
        }
    }
    let checkout = routes
        .iter()
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

    // Granted to the caller-role parameter and nothing else, by one policy.
    let owners: BTreeSet<&String> = grants.iter().map(|(id, _, _)| id).collect();
    assert_eq!(owners.len(), 1, "one invoke policy: {owners:?}");
    let policy_id = owners.into_iter().next().unwrap();
    let policy = resources(&t)
        .into_iter()
        .find(|(i, _)| i == policy_id)
        .unwrap()
        .1;
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
    assert_eq!(roles, ["CheckoutCallerRoleNames"]);
    assert_eq!(
        str_at(parameter(&t, "CheckoutCallerRoleNames"), "Type"),
        Some("CommaDelimitedList")
    );
}

#[test]
fn the_outbox_stream_feeds_a_least_privilege_relay_with_a_dlq_and_alarms() {
    let t = template();
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
    assert!(
        str_at(base, "AllowedPattern")
            .unwrap()
            .starts_with("^https://"),
        "the parameter admits https:// only"
    );
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
    let t = template();
    // (1) review is loud, (2) every failure class, (4) poison. The API 5xx alarm belongs to the
    // API section (issue 11) and is not asserted here.
    let wanted = [
        ("ChargeOnce", "InReview", ("Function", "reconciler")),
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
        // Issue 17: the webhook's refusals, its suspected double charges, and Stripe
        // contradicting a settled record.
        ("ChargeOnce", "WebhookRejected", ("Function", "webhook")),
        ("ChargeOnce", "SentToReview", ("Function", "webhook")),
        (
            "ChargeOnce",
            "WebhookSettledConflict",
            ("Function", "webhook"),
        ),
        ("AWS/Lambda", "Errors", ("FunctionName", "WebhookFunction")),
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
    let (_, in_review) =
        alarm_on(&t, "ChargeOnce", "InReview", ("Function", "reconciler")).unwrap();
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
    // Claim, record and reschedule are conditional UpdateItems returning the item: the charge
    // function and the reconciler never GetItem.
    for dir in ["charge", "reconciler"] {
        for (actions, _) in function_grants(&t, dir) {
            assert!(
                !actions.iter().any(|a| a == "dynamodb:GetItem"),
                "{dir}: GetItem is never called"
            );
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

#[test]
fn the_operator_policy_has_exactly_what_chargectl_needs() {
    let t = template();
    // The other managed policy is the route grant (CheckoutInvokePolicy, its own test).
    let policies: Vec<_> = of_type(&t, "AWS::IAM::ManagedPolicy")
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
    let table = |suffix: &str| format!("${{OperationsTable.Arn}}{suffix}");
    let mut want = vec![
        (
            "dynamodb:Query".to_owned(),
            table(&format!("/index/{UNKNOWN_INDEX}")),
        ),
        ("dynamodb:GetItem".to_owned(), "OperationsTable".to_owned()),
        (
            "dynamodb:BatchGetItem".to_owned(),
            "OperationsTable".to_owned(),
        ),
        (
            "dynamodb:UpdateItem".to_owned(),
            "OperationsTable".to_owned(),
        ),
        ("sqs:SendMessage".to_owned(), "ChargeQueue".to_owned()),
        (
            "secretsmanager:GetSecretValue".to_owned(),
            "StripeSecretArn".to_owned(),
        ),
    ];
    want.sort();
    assert_eq!(grants, want, "{id}");
}

#[test]
fn the_webhook_role_settles_and_remembers_events_only_and_its_inbox_expires() {
    let t = template();
    let mut grants: Vec<(Vec<String>, Vec<String>)> = function_grants(&t, "webhook")
        .into_iter()
        .map(|(mut a, r)| {
            a.sort();
            let mut r: Vec<String> = r
                .into_iter()
                .map(|x| x.trim_end_matches(".Arn").to_owned())
                .collect();
            r.sort();
            r.dedup();
            (a, r)
        })
        .collect();
    grants.sort();
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        grants,
        [
            // The inbox: the conditional admit and the forget after a failure. Nothing else.
            (
                s(&["dynamodb:DeleteItem", "dynamodb:PutItem"]),
                s(&["WebhookInboxTable"])
            ),
            // The operation: read on its key, then the executor's claim and record. No PutItem
            // (it never creates), no Query (no index), no Scan.
            (
                s(&["dynamodb:GetItem", "dynamodb:UpdateItem"]),
                s(&["OperationsTable"])
            ),
            (
                s(&["secretsmanager:GetSecretValue"]),
                s(&["StripeSecretArn", "StripeWebhookSecretArn"])
            ),
        ]
    );
    // The webhook secret parameter is the webhook function's alone.
    for dir in ["checkout", "charge", "reconciler", "notify"] {
        for (_, resources) in function_grants(&t, dir) {
            assert!(
                !resources.iter().any(|r| r == "StripeWebhookSecretArn"),
                "{dir} may not read the webhook secret"
            );
        }
    }
    // The inbox table: the adapter's key and TTL attribute.
    let inbox = resources(&t)
        .into_iter()
        .find(|(id, _)| id == "WebhookInboxTable")
        .expect("WebhookInboxTable")
        .1;
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
