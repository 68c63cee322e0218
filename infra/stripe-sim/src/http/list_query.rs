//! The parameters every list route takes (`limit`, `starting_after`, `expand[]`, `created[…]`),
//! parsed once, as Stripe reads them on every list; each resource adds its own filters
//! (`payment_intent`, `charge`) through [`parse`]'s `own`.

use crate::engine::CreatedRange;
use crate::wire::ApiError;

/// Stripe's default and largest page of a list.
pub(super) const DEFAULT_LIMIT: usize = 10;
pub(super) const MAX_LIMIT: usize = 100;

/// The common parameters of a list request.
pub(super) struct ListQuery {
    pub created: CreatedRange,
    pub limit: usize,
    pub starting_after: Option<String>,
}

/// Parses a list's query string: the common parameters here, any other key offered to `own`
/// (the resource's filters; `true` when it took the key). A key neither knows is refused as
/// Stripe does (`parameter_unknown`), the message ending with `lists_by` (what stripe-sim lists
/// this resource by); a `limit` outside 1..=100 or a `created` bound that is not whole seconds
/// is `parameter_invalid_integer`.
pub(super) fn parse(
    query: &str,
    lists_by: &str,
    mut own: impl FnMut(&str, String) -> bool,
) -> Result<ListQuery, ApiError> {
    let mut q = ListQuery {
        created: CreatedRange::default(),
        limit: DEFAULT_LIMIT,
        starting_after: None,
    };
    for (k, v) in form_urlencoded::parse(query.as_bytes()).into_owned() {
        match k.as_str() {
            "starting_after" => q.starting_after = Some(v),
            "limit" => {
                q.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "parameter_invalid_integer",
                            "limit",
                            format!("Invalid limit: must be an integer from 1 to {MAX_LIMIT}"),
                        )
                    })?
            }
            _ if k.starts_with("expand") => {}
            _ if q.created.narrow(&k, &v)? => {}
            _ if own(&k, v) => {}
            _ => {
                return Err(ApiError::invalid(
                    "parameter_unknown",
                    &k,
                    format!("Received unknown parameter: {k} ({lists_by})"),
                ))
            }
        }
    }
    Ok(q)
}
