//! [`Reply`]: a response before the common headers are added. Its own module so that the `/v1`
//! routes (`http.rs`), the admin API (`admin.rs`) and the in-process path (`direct.rs`) all build
//! on it without the admin API and the server importing each other.

use bytes::Bytes;
use serde_json::Value;

use crate::engine::Saved;
use crate::version::ApiVersion;
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

    /// The reply as `version` writes it ([`ApiVersion::render`]): the engine writes the pinned
    /// version's words.
    pub(crate) fn in_version(mut self, version: &ApiVersion) -> Self {
        if version.makes_remainder_refunds() {
            return self; // the engine's own words
        }
        if let Ok(text) = std::str::from_utf8(&self.body) {
            if let std::borrow::Cow::Owned(other) = version.render(text) {
                self.body = Bytes::from(other);
            }
        }
        self
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
