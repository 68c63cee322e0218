//! [`Reply`]: a response before the common headers are added. Its own module so that the `/v1`
//! routes (`http.rs`), the admin API (`admin.rs`) and the in-process path (`direct.rs`) all build
//! on it without the admin API and the server importing each other.

use bytes::Bytes;
use serde_json::Value;

use crate::engine::Saved;
use crate::wire::ApiError;

/// A response before the common headers are added.
pub(crate) struct Reply {
    pub status: u16,
    pub body: Bytes,
    pub headers: Vec<(&'static str, String)>,
}

impl Reply {
    pub(crate) fn json(status: u16, v: &Value) -> Self {
        Reply {
            status,
            body: Bytes::from(v.to_string()),
            headers: Vec::new(),
        }
    }

    /// A JSON body already written.
    pub(crate) fn text(status: u16, body: String) -> Self {
        Reply {
            status,
            body: Bytes::from(body),
            headers: Vec::new(),
        }
    }

    pub(crate) fn error(e: &ApiError) -> Self {
        Reply::saved(&Saved::from_error(e), false)
    }

    pub(crate) fn saved(s: &Saved, replayed: bool) -> Self {
        let mut headers = Vec::new();
        if let Some(r) = s.should_retry {
            headers.push(("stripe-should-retry", r.to_string()));
        }
        if replayed {
            headers.push(("idempotent-replayed", "true".to_string()));
        }
        Reply {
            status: s.status,
            body: s.body.clone(),
            headers,
        }
    }
}
