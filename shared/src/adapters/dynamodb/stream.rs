//! The table's stream, read back: a DynamoDB Streams image (`NewImage` / `OldImage` of a stream
//! record, the item in DynamoDB JSON, `{"amount": {"N": "100"}, …}`, as Lambda's stream event
//! carries it; [`super::item::item_json`] writes the same shape) as an operation record.
//!
//! An image goes through the same item mapping as every read of the table
//! ([`super::item::operation_from_item`]), so an image this release cannot read is an error that
//! names the field, never an operation with a wrong status or amount.

use charge_core::operation::Operation;
use serde::Serialize;

use super::item::{item_from_json, operation_from_item};
use super::schema::{AUDIT_PK, PK, WATCH_PK};

/// Whether a stream image (or a record's `Keys`) is one of the drift audit's reports (`pk =
/// AUDIT`) or the refund watch's cursor (`pk = WATCH`): an item of the table that is not an
/// operation, and never an outcome. The relay skips it as it skips a claim: it is neither
/// unreadable nor anything to park.
pub fn is_audit_report(image: &impl Serialize) -> bool {
    serde_json::to_value(image)
        .is_ok_and(|json| json[PK]["S"] == AUDIT_PK || json[PK]["S"] == WATCH_PK)
}

/// The operation an image holds. `Ok(None)` when there is no image (an empty map: the old image of
/// an INSERT, the new image of a REMOVE); `Err` with the reason when the image is not an operation
/// record this release can read.
///
/// Takes any serialisable image (Lambda's event types carry it as their own item type), read
/// through its DynamoDB JSON form.
pub fn operation_from_image(image: &impl Serialize) -> Result<Option<Operation>, String> {
    let json = serde_json::to_value(image).map_err(|e| format!("image: {e}"))?;
    if json.as_object().is_some_and(|m| m.is_empty()) {
        return Ok(None);
    }
    let attrs = item_from_json(&json).map_err(|e| format!("image: {e}"))?;
    operation_from_item(&attrs)
        .map(Some)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::adapters::dynamodb::item::{item_json, operation_to_item};

    #[test]
    fn an_image_reads_back_as_its_operation() {
        let op = charge_core::testing::order("ord-stream")
            .amount(1234)
            .build();
        let read = operation_from_image(&item_json(&operation_to_item(&op)))
            .unwrap()
            .unwrap();
        assert_eq!(read.operation_id, op.operation_id);
        assert_eq!(read.params.amount(), op.params.amount());
        assert_eq!(read.status, op.status);
    }

    #[test]
    fn an_audit_report_is_told_from_an_operation() {
        let op = item_json(&operation_to_item(
            &charge_core::testing::order("ord-audit").build(),
        ));
        assert!(!is_audit_report(&op));
        let report = json!({"pk": {"S": "AUDIT"}, "sk": {"S": "2026-12-04T00:00:00.000Z/x"}});
        assert!(is_audit_report(&report));
        let cursor = json!({"pk": {"S": "WATCH"}, "sk": {"S": "refunds"}});
        assert!(
            is_audit_report(&cursor),
            "the refund watch's cursor is no operation either"
        );
        assert!(!is_audit_report(&json!({})));
        // An operation whose order id is AUDIT is stored under ORDER#AUDIT: still an operation.
        assert!(!is_audit_report(&json!({"pk": {"S": "ORDER#AUDIT"}})));
    }

    #[test]
    fn no_image_is_none_and_a_bad_one_names_its_field() {
        assert_eq!(operation_from_image(&json!({})), Ok(None));
        let mut bad = item_json(&operation_to_item(
            &charge_core::testing::order("ord-bad").build(),
        ));
        bad["amount"] = json!({"N": "-5"});
        let reason = operation_from_image(&bad).unwrap_err();
        assert!(reason.contains("amount"), "{reason}");
        let reason = operation_from_image(&json!({"amount": "100"})).unwrap_err();
        assert!(reason.starts_with("image: amount"), "{reason}");
    }
}
