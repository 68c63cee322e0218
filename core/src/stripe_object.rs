//! What the audit and the events function compare of a Stripe object with our record, whatever
//! kind of money movement it is: its id, what its status means for the operation, the amount and
//! currency it moved, and the operation its metadata names. A PaymentIntent (a charge) and a
//! refund are two views of the one shape, so each comparison is written once, over this trait,
//! and a new kind of object joins them by implementing it (a dispute did: it carries no
//! metadata of ours, and its status says whether the bank's take succeeded).

use crate::charge::event_plan::EventIntent;
use crate::dispute::{plan::status_of, DisputeStatus, StripeDispute};
use crate::operation::{Operation, OperationStatus};
use crate::outcome::{outcome_for, PaymentIntent, PaymentIntentStatus};
use crate::refund::event_plan::EventRefund;
use crate::refund::{refund_outcome_for, RefundStatus, StripeRefund};

/// A Stripe object as Stripe answered for it (a retrieve, a list), held against the record of
/// the operation that made it.
pub trait StripeObject {
    /// What the object is called in a finding or a log line (`PaymentIntent`, `refund`).
    const NOUN: &'static str;

    fn id(&self) -> &str;
    /// Stripe's status, as Stripe spells it.
    fn status_name(&self) -> &str;
    /// What the status means for the operation: succeeded (money moved), failed (none moved and
    /// none will), or unknown (not settled yet).
    fn outcome(&self) -> OperationStatus;
    /// What Stripe says it moved (minor units, lower-case currency), when its answer told.
    fn amount(&self) -> Option<i64>;
    fn currency(&self) -> Option<&str>;
    /// `metadata.operation_id`: the operation that made it, when it carries one.
    fn operation_id(&self) -> Option<&str>;
    /// The amount (minor units) and currency the record asked this kind of object for; `None`
    /// when the record holds another kind's parameters.
    fn asked(op: &Operation) -> Option<(i64, &str)>;
    /// What Stripe says was taken, where the object tells more than its amount (an intent's
    /// `amount_received`: a captured authorization's captured amount). A refund tells only its
    /// amount.
    fn received(&self) -> Option<i64> {
        None
    }
    /// What a disagreement of the object's status with the record `recorded` means beyond
    /// itself, for the person who reads the finding (empty when nothing more is known).
    fn disagreement_note(&self, _recorded: OperationStatus) -> &'static str {
        ""
    }
}

/// What an event carries of a Stripe object (its copy when the event was created): a hint, which
/// Stripe's own answer, an [`Self::Object`], confirms or refutes.
pub trait EventCopy {
    type Object: StripeObject;

    fn id(&self) -> &str;
    /// The status the event claims, as Stripe spells it.
    fn status_name(&self) -> &str;
}

impl StripeObject for PaymentIntent {
    const NOUN: &'static str = "PaymentIntent";

    fn id(&self) -> &str {
        self.id.as_str()
    }

    fn status_name(&self) -> &str {
        self.status.as_str()
    }

    /// As [`outcome_for`], except `requires_payment_method`: the charge path records `failed`
    /// only once the intent is canceled, because an intent in that state can still be confirmed
    /// (and paid). Against a record `failed` it is not agreement but an intent left confirmable.
    fn outcome(&self) -> OperationStatus {
        match self.status {
            PaymentIntentStatus::RequiresPaymentMethod => OperationStatus::Unknown,
            _ => outcome_for(&self.status),
        }
    }

    fn amount(&self) -> Option<i64> {
        self.amount
    }

    fn currency(&self) -> Option<&str> {
        self.currency.as_deref()
    }

    fn operation_id(&self) -> Option<&str> {
        self.operation_id.as_deref()
    }

    fn asked(op: &Operation) -> Option<(i64, &str)> {
        let p = op.params.charge()?;
        Some((p.amount.minor_units(), p.currency.as_str()))
    }

    fn received(&self) -> Option<i64> {
        self.amount_received
    }

    fn disagreement_note(&self, recorded: OperationStatus) -> &'static str {
        if recorded == OperationStatus::Failed
            && self.status == PaymentIntentStatus::RequiresPaymentMethod
        {
            " (failed here, but Stripe's intent can still be confirmed and paid: cancel it at Stripe)"
        } else {
            ""
        }
    }
}

impl StripeObject for StripeRefund {
    const NOUN: &'static str = "refund";

    fn id(&self) -> &str {
        self.id.as_str()
    }

    fn status_name(&self) -> &str {
        self.status.as_str()
    }

    fn outcome(&self) -> OperationStatus {
        refund_outcome_for(&self.status)
    }

    fn amount(&self) -> Option<i64> {
        self.amount
    }

    fn currency(&self) -> Option<&str> {
        self.currency.as_deref()
    }

    fn operation_id(&self) -> Option<&str> {
        self.operation_id.as_deref()
    }

    fn asked(op: &Operation) -> Option<(i64, &str)> {
        let p = op.params.refund()?;
        Some((p.amount.minor_units(), p.currency.as_str()))
    }

    /// The one change Stripe makes to a settled refund (a closed or lost card), told by its
    /// events and by the reconciler's refund watch.
    fn disagreement_note(&self, recorded: OperationStatus) -> &'static str {
        if recorded == OperationStatus::Succeeded && self.status == RefundStatus::Failed {
            " (a failure after success neither an event nor the refund watch recorded: the watch \
             is off, behind, or past RefundWatchDays; replay the refund's events from the events \
             DLQ if any, else the record stays succeeded: reach the customer another way)"
        } else {
            ""
        }
    }
}

/// A dispute: Stripe's, never ours (no metadata), held against the record written from it. Its
/// outcome is the record's: `lost` succeeded (the bank's take), `won` and `warning_closed`
/// failed (nothing taken in the end), anything else open.
impl StripeObject for StripeDispute {
    const NOUN: &'static str = "dispute";

    fn id(&self) -> &str {
        self.id.as_str()
    }

    fn status_name(&self) -> &str {
        self.status.as_str()
    }

    fn outcome(&self) -> OperationStatus {
        status_of(&self.status)
    }

    fn amount(&self) -> Option<i64> {
        Some(self.amount)
    }

    fn currency(&self) -> Option<&str> {
        Some(&self.currency)
    }

    /// A dispute names no operation: Stripe's bank opened it, not us.
    fn operation_id(&self) -> Option<&str> {
        None
    }

    fn asked(op: &Operation) -> Option<(i64, &str)> {
        let p = op.params.dispute()?;
        Some((p.amount.minor_units(), p.currency.as_str()))
    }

    fn disagreement_note(&self, recorded: OperationStatus) -> &'static str {
        match (recorded, &self.status) {
            (OperationStatus::Failed, DisputeStatus::Lost) => {
                " (recorded won or closed, Stripe says lost: the money is gone; the order's \
                 charge no longer holds the amount reserved)"
            }
            (OperationStatus::Succeeded, DisputeStatus::Won) => {
                " (recorded lost, Stripe says won: the money came back; the order's charge \
                 still holds the amount reserved)"
            }
            _ => "",
        }
    }
}

impl EventCopy for EventIntent {
    type Object = PaymentIntent;

    fn id(&self) -> &str {
        self.id.as_str()
    }

    fn status_name(&self) -> &str {
        self.status.as_str()
    }
}

impl EventCopy for EventRefund {
    type Object = StripeRefund;

    fn id(&self) -> &str {
        self.id.as_str()
    }

    fn status_name(&self) -> &str {
        self.status.as_str()
    }
}
