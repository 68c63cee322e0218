//! A dispute's part of the shell: no claim, no lease, no call to make (a dispute is only read
//! at Stripe, never created there). Given the dispute as Stripe holds it (retrieved by the
//! caller: the events function after an event, the reconciler on an open one's re-read) and the
//! order it belongs to, read the dispute's record and the order's charge, ask the plan
//! ([`charge_core::dispute::plan::plan`]) and send its one conditional write: the first record
//! beside the charge's side (`create_beside`), or the move (`record_dispute`). A write refused
//! because another writer came first (a second delivery of the same event, a refund reserved
//! in between) is read and planned again, a bounded number of times: the plan over the record
//! as it is now says what is left to do, usually nothing.

use charge_core::dispute::plan::{plan, DisputeWrite, Unchanged};
use charge_core::dispute::StripeDispute;
use charge_core::domain::{OperationKind, OrderId};
use charge_core::operation::{Operation, OperationKey};
use charge_core::plan::DisputePolicy;
use charge_core::store::DisputeRecorded;
use charge_core::store_rules::{ChargeClaim, CreatedBeside};
use charge_core::time::Timestamp;
use tracing::{info, warn};

use crate::ports::{OperationStore, StoreError};

/// How many times a refused write is read and planned again before the caller is told to come
/// back later (two deliveries at once need two; more means something writes the order in a
/// loop).
pub const ATTEMPTS: u32 = 4;

/// What recording a dispute did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DisputeRecording {
    /// The record as written: created (`created`) or moved.
    Written {
        record: Box<Operation>,
        created: bool,
        /// The record as written holds a dispute whose funds Stripe withdrew without their
        /// reservation (they did not fit the order's refunds): the caller counts it
        /// (`DisputeUnreserved`, paged) on every such write, until Stripe closes it.
        unreserved: bool,
    },
    /// Nothing written, and why (`NotOurs`: no charge of ours under its intent).
    Unchanged(Unchanged),
}

/// Why a dispute could not be recorded now: the caller retries later.
#[derive(Debug, thiserror::Error)]
pub enum DisputeRecordError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the dispute's record or its charge kept moving under {ATTEMPTS} writes")]
    Contended,
}

/// Records what Stripe holds of `dispute` under `order_id` (the order its PaymentIntent's
/// metadata names), as the plan says: see the module doc.
pub async fn record_dispute(
    store: &dyn OperationStore,
    order_id: &OrderId,
    dispute: &StripeDispute,
    now: Timestamp,
    policy: &DisputePolicy,
) -> Result<DisputeRecording, DisputeRecordError> {
    let key = OperationKey::of_kind(order_id.clone(), OperationKind::Dispute(dispute.id.clone()));
    for _ in 0..ATTEMPTS {
        // The record first, then the charge: a delivery's transaction writes both at once, so a
        // charge read after the record is never older than it. Read the other way round, a
        // charge read just before another delivery's create and its record just after made a
        // second, needless write of the charge's mark.
        let record = store.get(&key).await?;
        // The order's latest attempt: the only one that can be paid, so the one a dispute
        // can be on (an earlier attempt's intent was declined and canceled). The plan checks
        // the dispute's intent is this attempt's, or it is not ours.
        let charge = store.charge_of(order_id).await?;
        let write = plan(record.as_ref(), charge.as_ref(), dispute, now, policy);
        let unreserved = write.unreserved();
        match write {
            DisputeWrite::Nothing(why) => {
                info!(
                    dispute = %dispute.id,
                    reason = why.as_str(),
                    "dispute: nothing to write"
                );
                return Ok(DisputeRecording::Unchanged(why));
            }
            DisputeWrite::Create { record, on_charge } => {
                match store
                    .create_beside(&record, ChargeClaim::Dispute(&on_charge))
                    .await?
                {
                    CreatedBeside::New(record) => {
                        info!(
                            dispute = %dispute.id,
                            status = %record.status,
                            dispute_status = %dispute.status,
                            unreserved,
                            "dispute recorded"
                        );
                        return Ok(DisputeRecording::Written {
                            record: Box::new(record),
                            created: true,
                            unreserved,
                        });
                    }
                    // Another delivery created it, or the charge moved: read both again.
                    CreatedBeside::Existing(_) | CreatedBeside::ChargeRefused(_) => {}
                }
            }
            DisputeWrite::Move(change) => match store.record_dispute(&change).await? {
                DisputeRecorded::Written(record) => {
                    info!(
                        dispute = %dispute.id,
                        status = %record.status,
                        dispute_status = %dispute.status,
                        unreserved,
                        "dispute moved"
                    );
                    return Ok(DisputeRecording::Written {
                        record: Box::new(record),
                        created: false,
                        unreserved,
                    });
                }
                DisputeRecorded::Refused(_) | DisputeRecorded::ChargeRefused => {}
            },
        }
    }
    warn!(dispute = %dispute.id, "dispute: every write refused; it must come again");
    Err(DisputeRecordError::Contended)
}
