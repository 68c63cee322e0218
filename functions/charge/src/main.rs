//! The `charge` Lambda. Its AWS adapters arrive with issue 4; until then the function refuses every
//! event with an error rather than pretending to handle it.

use lambda_runtime::{service_fn, tracing, Error, LambdaEvent};
use serde_json::Value;

async fn handler(_event: LambdaEvent<Value>) -> Result<Value, Error> {
    Err("the charge function is not wired to DynamoDB/SQS yet".into())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    lambda_runtime::run(service_fn(handler)).await
}
