//! The simulator in process: the same engine, idempotency layer, ledger, search lag and fault
//! decisions as the HTTP server, called directly (no sockets, no sleeping). What a client would
//! see over HTTP comes back as an [`Answer`] (status, body, the two headers clients read), or as
//! [`Outcome::Dropped`] when the connection would close unanswered.
//!
//! The `latency` fault, and every executing create while [`crate::Capacity::create_latency`] is
//! on, is handed to the caller as a [`SlowCreate`]: the key stays in flight (a same-key request
//! meanwhile gets `409 idempotency_key_in_use`, as over HTTP) until the caller completes it — a
//! deterministic simulation decides when on its virtual clock (after [`SlowCreate::latency`]),
//! instead of a real sleep. Capacity limits apply in process too, on the capacity clock.

use std::time::Duration;

use bytes::Bytes;

use crate::faults::FaultKind;
use crate::http::{self, Executing};
use crate::reply::Reply;
use crate::StripeSim;

/// An HTTP answer as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
    /// `Stripe-Should-Retry`, when sent.
    pub should_retry: Option<bool>,
    /// `Idempotent-Replayed: true`.
    pub replayed: bool,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Answered(Answer),
    /// Committed (`drop_after_commit`): the connection closes without any response bytes.
    Dropped,
}

/// A create (of a PaymentIntent or a refund) delayed by the `latency` fault, its key in flight. Dropping it forgets the key
/// without creating anything (the client went away and the server gave up).
pub struct SlowCreate {
    sim: StripeSim,
    ex: Executing,
}

impl SlowCreate {
    /// How long the server takes before it executes: the `latency` fault's delay (if that is
    /// what made it slow) plus the create latency drawn for it (when
    /// [`crate::Capacity::create_latency`] is on).
    pub fn latency(&self) -> Duration {
        self.ex.delay()
    }

    /// The create latency drawn for it alone (`None` while [`crate::Capacity::create_latency`]
    /// is off: then only the `latency` fault made it slow).
    pub fn create_latency(&self) -> Option<Duration> {
        self.ex.create_latency
    }

    /// Whether the `latency` fault was injected into it.
    pub fn is_latency_fault(&self) -> bool {
        self.ex.fault == Some(FaultKind::Latency)
    }

    /// The server wakes up: creates the PaymentIntent at the simulator's current time and saves
    /// the answer under the key.
    pub fn complete(self) -> Outcome {
        finish(&self.sim, http::create_exec(&self.sim, self.ex))
    }
}

/// A create's first answer.
pub enum CreateStart {
    Done(Outcome),
    Slow(SlowCreate),
}

fn answer(sim: &StripeSim, reply: Reply) -> Answer {
    // In process is a client without `Stripe-Version`: the account's default version.
    let reply = reply.in_version(&sim.api_version());
    // The request id the HTTP layer would put on the answer: keeps the id RNG in step.
    let _ = sim.engine().request_id();
    let header = |name: &str| {
        reply
            .headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v == "true")
    };
    Answer {
        status: reply.status,
        should_retry: header("stripe-should-retry"),
        replayed: header("idempotent-replayed").unwrap_or(false),
        body: reply.body,
    }
}

fn finish(sim: &StripeSim, r: Result<Reply, http::DropConnection>) -> Outcome {
    match r {
        Ok(reply) => Outcome::Answered(answer(sim, reply)),
        Err(http::DropConnection) => Outcome::Dropped,
    }
}

impl StripeSim {
    /// `POST /v1/payment_intents` with this form and `Idempotency-Key`, in process.
    pub fn create_in_process(
        &self,
        idempotency_key: Option<&str>,
        form: Vec<(String, String)>,
    ) -> CreateStart {
        self.create_in_process_with(idempotency_key, &form)
    }

    /// [`StripeSim::create_in_process`] with a borrowed form (a client retrying the same
    /// request sends it again without copying it).
    pub fn create_in_process_with(
        &self,
        idempotency_key: Option<&str>,
        form: &[(String, String)],
    ) -> CreateStart {
        self.create_started(http::create_begin(
            self,
            idempotency_key.map(str::to_owned),
            form,
        ))
    }

    /// `GET /v1/payment_intents/{id}`, in process.
    pub fn retrieve_in_process(&self, id: &str) -> Answer {
        answer(self, http::retrieve(self, id))
    }

    /// `GET /v1/payment_intents/{id}?expand[]=latest_charge`, in process: the intent with its
    /// charge object (an authorization's `capture_before` is on it), as the charge-once client
    /// reads every intent.
    pub fn retrieve_expanded_in_process(&self, id: &str) -> Answer {
        answer(self, http::retrieve_expanding(self, id, true))
    }

    /// `POST /v1/payment_intents/{id}/cancel` with this form and `Idempotency-Key`, in process.
    pub fn cancel_in_process(
        &self,
        id: &str,
        idempotency_key: Option<&str>,
        form: &[(String, String)],
    ) -> Outcome {
        finish(
            self,
            http::cancel(
                self,
                id,
                idempotency_key.map(str::to_owned),
                form,
                &self.api_version(),
            ),
        )
    }

    /// `POST /v1/payment_intents/{id}/capture` with this form (`amount_to_capture`,
    /// `metadata[...]`) and `Idempotency-Key`, in process: keyed and faulted as a cancel, its
    /// refusal from the intent's state saved under the key.
    pub fn capture_in_process(
        &self,
        id: &str,
        idempotency_key: Option<&str>,
        form: &[(String, String)],
    ) -> Outcome {
        finish(
            self,
            http::capture(
                self,
                id,
                idempotency_key.map(str::to_owned),
                form,
                &self.api_version(),
            ),
        )
    }

    /// `POST /v1/refunds` with this form and `Idempotency-Key`, in process: faulted as a
    /// create (a `latency` fault comes back as [`CreateStart::Slow`]; create latency is for
    /// PaymentIntents only).
    pub fn refund_in_process(
        &self,
        idempotency_key: Option<&str>,
        form: &[(String, String)],
    ) -> CreateStart {
        self.create_started(http::refund_begin(
            self,
            idempotency_key.map(str::to_owned),
            form,
        ))
    }

    /// A create begun (a PaymentIntent's or a refund's): refused at the gate, held by a
    /// `latency` fault, or executed now.
    fn create_started(&self, begun: Result<Executing, Reply>) -> CreateStart {
        match begun {
            Err(reply) => CreateStart::Done(Outcome::Answered(answer(self, reply))),
            Ok(ex) if ex.is_slow() => CreateStart::Slow(SlowCreate {
                sim: self.clone(),
                ex,
            }),
            Ok(ex) => CreateStart::Done(finish(self, http::create_exec(self, ex))),
        }
    }

    /// `GET /v1/refunds/{id}`, in process.
    pub fn retrieve_refund_in_process(&self, id: &str) -> Answer {
        answer(self, http::retrieve_refund(self, id))
    }

    /// `GET /v1/refunds?payment_intent=…&limit=…&starting_after=…`, in process.
    pub fn list_refunds_in_process(
        &self,
        payment_intent: Option<&str>,
        limit: Option<usize>,
        starting_after: Option<&str>,
    ) -> Answer {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if let Some(pi) = payment_intent {
            q.append_pair("payment_intent", pi);
        }
        if let Some(n) = limit {
            q.append_pair("limit", &n.to_string());
        }
        if let Some(after) = starting_after {
            q.append_pair("starting_after", after);
        }
        answer(self, http::list_refunds(self, &q.finish()))
    }

    /// `GET /v1/refunds?…` with this query (already encoded: `created[gte]=…` and the rest),
    /// in process.
    pub fn list_refunds_query_in_process(&self, query: &str) -> Answer {
        answer(self, http::list_refunds(self, query))
    }

    /// `GET /v1/disputes/{id}`, in process.
    pub fn retrieve_dispute_in_process(&self, id: &str) -> Answer {
        answer(self, http::retrieve_dispute(self, id))
    }

    /// `GET /v1/disputes?…` with this query (already encoded: `payment_intent=…`,
    /// `created[gte]=…` and the rest), in process.
    pub fn list_disputes_in_process(&self, query: &str) -> Answer {
        answer(self, http::list_disputes(self, query))
    }

    /// `POST /v1/disputes/{id}` with this form (`evidence[...]`, `submit`, `metadata[...]`), in
    /// process: the merchant's answer, as the dashboard or the API sends it.
    pub fn update_dispute_in_process(&self, id: &str, form: &[(String, String)]) -> Answer {
        answer(self, http::update_dispute(self, id, form))
    }

    /// `POST /v1/disputes/{id}/close`, in process: the merchant accepts the dispute.
    pub fn close_dispute_in_process(&self, id: &str) -> Answer {
        answer(self, http::close_dispute(self, id, &[]))
    }

    /// `GET /v1/payment_intents?…` with this query (already encoded), in process.
    pub fn list_intents_in_process(&self, query: &str) -> Answer {
        answer(self, http::list_intents(self, query))
    }

    /// `POST /v1/refunds/{id}/cancel` with this form and `Idempotency-Key`, in process.
    pub fn cancel_refund_in_process(
        &self,
        id: &str,
        idempotency_key: Option<&str>,
        form: &[(String, String)],
    ) -> Outcome {
        finish(
            self,
            http::cancel_refund(self, id, idempotency_key.map(str::to_owned), form),
        )
    }

    /// `GET /v1/payment_intents/search?query=…`, in process (`query` unencoded).
    pub fn search_in_process(&self, query: &str) -> Answer {
        let encoded = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", query)
            .append_pair("limit", "10")
            .finish();
        answer(self, http::search(self, &encoded))
    }
}
