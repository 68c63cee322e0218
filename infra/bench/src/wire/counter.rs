//! Requests counted on the wire: an SDK interceptor on the DynamoDB and SQS clients.
//!
//! [`WireCounter::read_before_transmit`] runs once per attempt, just before the request leaves the
//! process, so a retried call counts once per attempt, as AWS bills it. The operation comes from the
//! request itself (`X-Amz-Target: DynamoDB_20120810.PutItem`, `AmazonSQS.SendMessage`), not from
//! the adapter: nothing in the core is trusted to count.
//!
//! For reads it also computes what DynamoDB would bill, from the items in each answer (moto's
//! `ConsumedCapacity` is a constant 1.0, not a measurement): a Query or Scan costs
//! `max(1, ceil(bytes / 4 KB))` half units (eventually consistent), bytes summed over the items
//! returned, with item sizes by DynamoDB's published rules ([`item_size`]); a BatchGetItem (the
//! store reads it strongly consistent) costs one full unit per item per 4 KB, each item rounded up
//! on its own.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::{
    AfterDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::types::AttributeValue;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Default)]
struct Tally {
    requests: BTreeMap<String, u64>,
    /// Computed read units of Query, Scan and BatchGetItem answers, in half units (0.5 RCU each).
    read_half_units: u64,
    /// Bytes of the items in Query, Scan and BatchGetItem answers.
    read_bytes: u64,
    /// Items in Query, Scan and BatchGetItem answers.
    read_items: u64,
}

/// A snapshot of one counter.
/// Serialised as `bench wire` writes it and `bench render` reads it back (the report's typed rows).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WireTally {
    /// Wire requests by operation name.
    pub requests: BTreeMap<String, u64>,
    /// Computed read units of Query and Scan answers (eventually consistent) and of BatchGetItem
    /// answers (strongly consistent).
    pub read_units: f64,
    pub read_bytes: u64,
    pub read_items: u64,
}

impl WireTally {
    pub fn get(&self, op: &str) -> u64 {
        self.requests.get(op).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.requests.values().sum()
    }

    /// What happened between `before` and `self`.
    pub fn since(&self, before: &WireTally) -> WireTally {
        let mut requests = BTreeMap::new();
        for (op, n) in &self.requests {
            let d = n - before.get(op);
            if d > 0 {
                requests.insert(op.clone(), d);
            }
        }
        WireTally {
            requests,
            read_units: self.read_units - before.read_units,
            read_bytes: self.read_bytes - before.read_bytes,
            read_items: self.read_items - before.read_items,
        }
    }
}

/// Counts the requests of one client. Cheap to clone; clones share the tally.
#[derive(Debug, Clone, Default)]
pub struct WireCounter {
    tally: Arc<Mutex<Tally>>,
}

impl WireCounter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn snapshot(&self) -> WireTally {
        let t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        WireTally {
            requests: t.requests.clone(),
            read_units: t.read_half_units as f64 / 2.0,
            read_bytes: t.read_bytes,
            read_items: t.read_items,
        }
    }

    fn add_read(&self, items: &[std::collections::HashMap<String, AttributeValue>]) {
        let bytes: u64 = items.iter().map(item_size).sum();
        let half_units = bytes.div_ceil(4096).max(1);
        let mut t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        t.read_half_units += half_units;
        t.read_bytes += bytes;
        t.read_items += items.len() as u64;
    }

    /// A strongly consistent BatchGetItem: 1 unit (2 half units) per item per 4 KB.
    fn add_consistent_items(&self, items: &[std::collections::HashMap<String, AttributeValue>]) {
        let sizes: Vec<u64> = items.iter().map(item_size).collect();
        let mut t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        t.read_half_units += sizes
            .iter()
            .map(|b| 2 * b.div_ceil(4096).max(1))
            .sum::<u64>();
        t.read_bytes += sizes.iter().sum::<u64>();
        t.read_items += items.len() as u64;
    }
}

impl Intercept for WireCounter {
    fn name(&self) -> &'static str {
        "WireCounter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = context
            .request()
            .headers()
            .get("x-amz-target")
            .and_then(|t| t.rsplit('.').next())
            .unwrap_or("(no X-Amz-Target)")
            .to_owned();
        let mut t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        *t.requests.entry(op).or_default() += 1;
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Ok(output) = context.output_or_error() else {
            return Ok(());
        };
        if let Some(q) = output.downcast_ref::<aws_sdk_dynamodb::operation::query::QueryOutput>() {
            self.add_read(q.items());
        } else if let Some(s) =
            output.downcast_ref::<aws_sdk_dynamodb::operation::scan::ScanOutput>()
        {
            self.add_read(s.items());
        } else if let Some(b) =
            output.downcast_ref::<aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput>()
        {
            let items: Vec<_> = b
                .responses()
                .into_iter()
                .flat_map(|r| r.values())
                .flatten()
                .cloned()
                .collect();
            self.add_consistent_items(&items);
        }
        Ok(())
    }
}

/// The size DynamoDB bills for an item: attribute names plus values (strings and binaries by
/// length, numbers about one byte per two significant digits plus one, 1 byte for booleans and
/// nulls, 3 bytes plus 1 per element of a list or map).
pub fn item_size(item: &std::collections::HashMap<String, AttributeValue>) -> u64 {
    item.iter()
        .map(|(name, v)| name.len() as u64 + value_size(v))
        .sum()
}

fn number_size(n: &str) -> u64 {
    let digits: String = n.chars().filter(char::is_ascii_digit).collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0');
    (significant.len() as u64).div_ceil(2) + 1
}

fn value_size(v: &AttributeValue) -> u64 {
    match v {
        AttributeValue::S(s) => s.len() as u64,
        AttributeValue::N(n) => number_size(n),
        AttributeValue::B(b) => b.as_ref().len() as u64,
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(v) => v.iter().map(|s| s.len() as u64).sum(),
        AttributeValue::Ns(v) => v.iter().map(|n| number_size(n)).sum(),
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len() as u64).sum(),
        AttributeValue::L(l) => 3 + l.iter().map(|e| 1 + value_size(e)).sum::<u64>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, e)| 1 + k.len() as u64 + value_size(e))
                .sum::<u64>()
        }
        _ => 0,
    }
}

/// A DynamoDB client whose every request is counted by `counter`.
pub fn counted_dynamodb(
    config: &aws_config::SdkConfig,
    counter: &WireCounter,
) -> aws_sdk_dynamodb::Client {
    let conf = aws_sdk_dynamodb::config::Builder::from(config)
        .interceptor(counter.clone())
        .build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

/// An SQS client whose every request is counted by `counter`.
pub fn counted_sqs(config: &aws_config::SdkConfig, counter: &WireCounter) -> aws_sdk_sqs::Client {
    let conf = aws_sdk_sqs::config::Builder::from(config)
        .interceptor(counter.clone())
        .build();
    aws_sdk_sqs::Client::from_conf(conf)
}
