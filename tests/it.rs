//! The workspace integration tests, one binary: each file beside this one is a module (shared
//! pieces are in `support/`, the `testkit` library). One binary links the AWS SDK, the functions and
//! stripe-sim once, where one binary per file linked them once per file.
//!
//! Tests that need the local AWS stack (moto) run under `infra/local/with-stack.sh`; select a
//! file's tests with its module name as the filter: `cargo test -p integration-tests --test it
//! template::` runs the template checks only (they need no stack).

mod attempts_on_aws;
mod audit_on_aws;
mod captures_on_aws;
mod disputes_on_aws;
mod docs_links;
mod dynamodb_adapter;
mod dynamodb_inbox_contract;
mod dynamodb_store_contract;
mod functions_on_aws;
mod local_stack;
mod memory_inbox_contract;
mod memory_queue_contract;
mod memory_store_contract;
mod module_layers;
mod observability_rules;
mod outcomes_on_aws;
mod reconciler_on_aws;
mod refund_watch_on_aws;
mod release_fixtures;
mod request_counts;
mod samconfig;
mod seed_scenarios_fake;
mod seed_scenarios_http;
mod sqs_queue_contract;
mod store_rules_on_aws;
mod stripe_gateway;
mod stripe_gateway_captures;
mod stripe_gateway_disputes;
mod stripe_gateway_refunds;
mod stripe_official_client;
mod stripe_webhooks;
mod template;
mod webhook_inbox_on_aws;
