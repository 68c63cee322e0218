//! CPU time per charge of the charge handler, and peak RSS of a process handling a batch, with the
//! in-memory ports ([`MemoryStore`], [`FakeGateway`]): the cost of our code alone, without the
//! network, the AWS SDK or TLS.
//!
//! CPU time is the main thread's time on CPU from `/proc/thread-self/schedstat` (nanoseconds); the
//! handler runs on a current-thread Tokio runtime, so all its work is on that thread. The operations
//! and the events are built before the clock starts; only `charge::handler::handle` is timed.

use std::sync::Arc;
use std::time::Instant;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use charge_core::plan::Policy;
use charge_core::{
    domain::{Amount, ChargeParams, Currency, CustomerId, OrderId, PaymentMethodId},
    operation::{Operation, OperationStatus},
    time::{Clock, ManualClock, Timestamp},
};
use charge_once::executor::EngineDeps;
use charge_once::memory::{FakeGateway, MemoryStore};
use charge_once::ports::{OperationMessage, OperationStore};
use lambda_runtime::{Context, LambdaEvent};

#[derive(Debug, Clone)]
pub struct CpuResult {
    pub charges: usize,
    pub batch_size: usize,
    pub cpu_ns: u64,
    pub wall_ns: u64,
    pub with_logs: bool,
}

impl CpuResult {
    pub fn cpu_us_per_charge(&self) -> f64 {
        self.cpu_ns as f64 / 1e3 / self.charges as f64
    }

    pub fn wall_us_per_charge(&self) -> f64 {
        self.wall_ns as f64 / 1e3 / self.charges as f64
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "charges": self.charges,
            "batch_size": self.batch_size,
            "cpu_ns": self.cpu_ns,
            "wall_ns": self.wall_ns,
            "with_logs": self.with_logs,
            "cpu_us_per_charge": self.cpu_us_per_charge(),
            "wall_us_per_charge": self.wall_us_per_charge(),
        })
    }
}

/// Nanoseconds this thread has spent on a CPU.
pub fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("/proc/thread-self/schedstat (Linux only)")
}

/// `VmHWM` (peak resident set) of this process, in kB.
pub fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .expect("VmHWM in /proc/self/status (Linux only)")
}

fn params() -> ChargeParams {
    ChargeParams {
        amount: Amount::new(1250).expect("amount"),
        currency: Currency::parse("usd").expect("currency"),
        customer_id: CustomerId::parse("cus_Q8xYz12AbC").expect("customer"),
        payment_method: PaymentMethodId::parse("pm_card_visa").expect("payment method"),
        capture_method: Default::default(),
    }
}

/// `n` pending operations in `store`, and the batches of `batch_size` messages that carry them,
/// shaped as the SQS event source delivers them.
async fn world(store: &MemoryStore, now: Timestamp, n: usize, batch_size: usize) -> Vec<SqsEvent> {
    let mut events = Vec::new();
    let mut event = SqsEvent::default();
    for i in 0..n {
        let op = Operation::new(
            OrderId::parse(&format!("ord-bench-{i}")).expect("order id"),
            params(),
            charge_core::domain::Principal::jwt("bench").expect("principal"),
            now,
            Policy::default().pending_grace,
        );
        store.create_if_absent(&op).await.expect("memory store");
        let mut record = SqsMessage::default();
        record.message_id = Some(uuid::Uuid::new_v4().to_string());
        record.body =
            Some(serde_json::to_string(&OperationMessage::for_operation(&op)).expect("message"));
        record
            .attributes
            .insert("MessageGroupId".into(), op.order_id.as_str().to_owned());
        record
            .attributes
            .insert("MessageDeduplicationId".into(), op.operation_id.to_string());
        record.event_source = Some("aws:sqs".into());
        event.records.push(record);
        if event.records.len() == batch_size {
            events.push(std::mem::take(&mut event));
        }
    }
    if !event.records.is_empty() {
        events.push(event);
    }
    events
}

/// Handles `charges` operations in batches of `batch_size`; returns the timings.
pub fn measure(charges: usize, batch_size: usize, with_logs: bool) -> CpuResult {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        let clock = ManualClock::new(Timestamp::from_millis(1_800_000_000_000));
        let store = Arc::new(MemoryStore::new());
        let gateway = Arc::new(FakeGateway::new());
        let events = world(&store, clock.now(), charges, batch_size).await;
        let deps = charge::handler::ChargeFunction::local(EngineDeps {
            store: store.clone(),
            gateway: gateway.clone(),
            clock: Arc::new(clock),
            policy: Policy::default(),
        });
        let cpu0 = thread_cpu_ns();
        let wall0 = Instant::now();
        for event in events {
            let resp =
                charge::handler::handle(&deps, LambdaEvent::new(event, Context::default())).await;
            assert!(resp.batch_item_failures.is_empty());
        }
        let wall_ns = wall0.elapsed().as_nanos() as u64;
        let cpu_ns = thread_cpu_ns() - cpu0;
        assert_eq!(
            gateway.charge_count(),
            charges,
            "one PaymentIntent per operation"
        );
        assert!(store
            .all()
            .iter()
            .all(|op| op.status == OperationStatus::Succeeded));
        CpuResult {
            charges,
            batch_size,
            cpu_ns,
            wall_ns,
            with_logs,
        }
    })
}

/// Peak RSS of this process after handling one batch of `batch_size` (call in a fresh process).
pub fn rss_after_one_batch(batch_size: usize) -> u64 {
    measure(batch_size, batch_size, true);
    peak_rss_kb()
}
