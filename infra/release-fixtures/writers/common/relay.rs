//! The notify relay as 2026-11-30 has it, for `outcome_events.rs`: `Notify { publisher, clock }`,
//! the `EventBridgePublisher` in the notify crate, and `image_json` in its handler.

use std::sync::Arc;

use aws_lambda_events::dynamodb::EventRecord;
use notify::eventbridge::EventBridgePublisher;
pub use notify::handler::image_json;
use notify::handler::{relay, Notify};

use crate::World;

/// The release's notify relay over `records`, publishing to `bus` with its EventBridge publisher:
/// how many events it published.
pub async fn publish(
    w: &World,
    events: &aws_sdk_eventbridge::Client,
    bus: &str,
    records: &[EventRecord],
) -> usize {
    let deps = Notify {
        publisher: Arc::new(EventBridgePublisher::new(events.clone(), bus)),
        clock: Arc::new(w.clock.clone()),
    };
    let (response, report) = relay(&deps, records).await;
    assert!(response.batch_item_failures.is_empty(), "{report:?}");
    report.published
}
