//! `nats://`: JetStream. Each message goes to the subject
//! `<subject_prefix><topic>` with the payload's JSON as the body and, as
//! headers, `Nats-Msg-Id` = event_id (the server drops a duplicate within
//! the stream's duplicate window), the CloudEvents binary-mode `ce-*`
//! attributes, and the envelope's metadata under its field names
//! (`event_id`, …, `headers` as a JSON object) so [`Envelope::from_fields`]
//! reads it back. A batch is published in full, then every PubAck awaited.

mod config;

pub use config::NatsConfig;

use crate::publishers::kit::declare::{Declaration, Declared};
use crate::publishers::PublisherContext;
use crate::publishers::kit::lazy::Lazy;
use crate::publishers::kit::outcome::all_failed;
use crate::publishers::kit::record::Record;
use crate::publishers::limits;
use crate::{Message, Outcome, PublishError, Publisher, Result};
use async_nats::jetstream::{self, context::PublishErrorKind};
use async_nats::HeaderMap;
use futures_util::future::join_all;
use std::future::IntoFuture;

/// The NATS JetStream publisher.
#[derive(Debug)]
pub struct NatsPublisher {
    config: NatsConfig,
    /// async-nats reconnects by itself once connected: the slot is only
    /// ever filled, never reset.
    js: Lazy<jetstream::Context>,
}

impl NatsPublisher {
    /// A publisher for `config`; connects on first use, so a relay started
    /// while NATS is down keeps running and reports messages retryable.
    pub fn new(config: NatsConfig) -> Self {
        Self {
            config,
            js: Lazy::default(),
        }
    }

    /// Parses `url` (see [`NatsConfig::from_url`]) and builds the publisher.
    pub fn from_url(url: &str) -> Result<Self> {
        Ok(Self::new(NatsConfig::from_url(url)?))
    }

    /// The options in force.
    pub fn config(&self) -> &NatsConfig {
        &self.config
    }

    async fn context(&self) -> Result<jetstream::Context, PublishError> {
        self.js.get(|| self.connect()).await
    }

    async fn connect(&self) -> Result<jetstream::Context, PublishError> {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(self.config.connect_timeout)
            .connect(self.config.servers.as_str())
            .await
            .map_err(|e| PublishError::retryable(format!("nats unreachable: {e}")))?;
        let mut js = jetstream::new(client);
        js.set_timeout(self.config.ack_timeout);
        if let Some(name) = &self.config.create_stream {
            let subjects = format!("{}>", self.config.subject_prefix);
            js.get_or_create_stream(jetstream::stream::Config {
                name: name.clone(),
                subjects: vec![subjects.clone()],
                ..Default::default()
            })
            .await
            .map_err(|e| {
                PublishError::retryable(format!(
                    "nats: cannot create stream {name} for {subjects}: {e}"
                ))
            })?;
        }
        Ok(js)
    }

    /// The subject, headers and body of `m`, or why it cannot be sent.
    pub fn encode(&self, m: &Message) -> Result<(String, HeaderMap, bytes::Bytes), PublishError> {
        self.encode_sized(m).map(|(s, h, b, _)| (s, h, b))
    }

    /// [`Self::encode`], plus the size the server checks against its
    /// max_payload: the header block and the body together (the client
    /// checks the body alone, so a body just under the limit passes it and
    /// the server then closes the connection under the whole batch).
    fn encode_sized(
        &self,
        m: &Message,
    ) -> Result<(String, HeaderMap, bytes::Bytes, usize), PublishError> {
        let subject = self.config.subject(&m.topic);
        check_subject(&subject, self.config.allow_reserved)?;
        let record = Record::new(m);
        let mut pairs = record.envelope.binary_headers(&self.config.source);
        pairs.extend(record.fields);
        pairs.push((
            "Nats-Msg-Id".to_owned(),
            record.envelope.event_id.to_string(),
        ));
        let mut headers = HeaderMap::new();
        // On the wire: `NATS/1.0\r\n`, `key: value\r\n` each, `\r\n`.
        let mut size = HEADER_PREAMBLE.len() + 2;
        for (k, v) in pairs {
            // A line break would end the header block early on the wire.
            if v.contains(['\r', '\n']) {
                return Err(limits::header(
                    "nats",
                    &k,
                    "holds a line break, which NATS headers cannot carry",
                ));
            }
            size += k.len() + 2 + v.len() + 2;
            headers.insert(k.as_str(), v.as_str());
        }
        let body: bytes::Bytes = record.payload.into();
        size += body.len();
        Ok((subject, headers, body, size))
    }
}

/// What starts every NATS header block.
const HEADER_PREAMBLE: &str = "NATS/1.0\r\n";

/// The subjects messages go to.
const SUBJECTS: limits::Destination = limits::Destination {
    publisher: "nats",
    what: "subject",
    reserved: &config::RESERVED,
    role: "the server's own API and reply subjects",
};

/// Whether `subject` can be published to, and is nobody's control plane.
fn check_subject(subject: &str, allow_reserved: bool) -> Result<(), PublishError> {
    let why = (!config::valid_subject(subject)).then_some(
        "subjects are non-empty dot-separated tokens without whitespace, \
         control characters or the wildcards * and >",
    );
    SUBJECTS.check(subject, why, allow_reserved)
}

impl Publisher for NatsPublisher {
    const NAME: &'static str = "nats";
    // Published in order on one connection; acks awaited after.
    const BATCH_ORDER: crate::BatchOrder = crate::BatchOrder::Sequential;

    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        let js = match self.context().await {
            Ok(js) => js,
            Err(e) => return all_failed(batch.len(), e),
        };
        // Learnt from the server at connect (and again on reconnect).
        let max_payload = js.client().server_info().max_payload;
        let mut acks = Vec::with_capacity(batch.len());
        for m in batch {
            let encoded = self.encode_sized(m).and_then(|(s, h, b, size)| {
                limits::size("nats", size, "NATS server max_payload", max_payload)?;
                Ok((s, h, b))
            });
            let sent = match encoded {
                Ok((subject, headers, body)) => js
                    .publish_with_headers(subject.clone(), headers, body)
                    .await
                    .map(|ack| (subject, ack))
                    .map_err(|e| classify(&e, &self.config.subject(&m.topic))),
                Err(e) => Err(e),
            };
            acks.push(sent);
        }
        join_all(acks.into_iter().map(|sent| async move {
            let (subject, ack) = sent?;
            ack.into_future()
                .await
                .map(drop)
                .map_err(|e| classify(&e, &subject))
        }))
        .await
    }

    async fn check(&self) -> Result<(), PublishError> {
        let js = self.context().await?;
        // async-nats reconnects by itself and, meanwhile, queues requests
        // instead of failing them: asked while the server is away, the
        // request below would wait out the outage and then succeed, so the
        // relay would spend attempts instead of opening its breaker. The
        // client knows it is disconnected: ask it first.
        let state = js.client().connection_state();
        if state != async_nats::connection::State::Connected {
            return Err(PublishError::retryable(format!(
                "nats: not connected to the server ({state:?}); reconnecting"
            )));
        }
        // The raw account-info request, read loosely: the typed one fails on
        // servers older than the client (2.9 answers without newer fields).
        // Bounded like a PubAck, not by the client's 10 s request timeout.
        let empty = serde_json::json!({});
        let request = js.request("INFO", &empty);
        let reply: jetstream::response::Response<serde_json::Value> =
            tokio::time::timeout(self.config.ack_timeout, request)
                .await
                .map_err(|_| {
                    PublishError::retryable(format!(
                        "nats: JetStream did not answer within {:?}",
                        self.config.ack_timeout
                    ))
                })?
                .map_err(|e| {
                    PublishError::retryable(format!("nats: JetStream unavailable: {e}"))
                })?;
        match reply {
            jetstream::response::Response::Ok(_) => Ok(()),
            jetstream::response::Response::Err { error } => Err(PublishError::retryable(format!(
                "nats: JetStream unavailable: {error}"
            ))),
        }
    }
}

/// No stream for the subject, or a JetStream error reply in the 4xx range
/// (the message or its stream's limits refuse it), are permanent. Timeouts,
/// a broken connection, backpressure and 5xx replies (JetStream unavailable,
/// no quorum) are retryable.
fn classify(e: &jetstream::context::PublishError, subject: &str) -> PublishError {
    match e.kind() {
        PublishErrorKind::StreamNotFound => PublishError::permanent(format!(
            "nats: no JetStream stream captures subject {subject} (create one, or use create_stream=NAME)"
        )),
        PublishErrorKind::WrongLastMessageId | PublishErrorKind::WrongLastSequence => {
            PublishError::permanent(format!("nats: {subject}: {e}"))
        }
        PublishErrorKind::Other => {
            let api = std::error::Error::source(e)
                .and_then(|s| s.downcast_ref::<jetstream::Error>());
            match api {
                Some(api) if (400..500).contains(&api.code()) => {
                    PublishError::permanent(format!("nats refused {subject}: {api}"))
                }
                _ => PublishError::retryable(format!("nats: {subject}: {e}")),
            }
        }
        _ => PublishError::retryable(format!("nats: {subject}: {e}")),
    }
}

impl Declared for NatsPublisher {
    const DECLARATION: Declaration = config::DECLARATION;

    async fn build(url: &str, _: &PublisherContext) -> Result<Self> {
        Self::from_url(url)
    }

    fn check(url: &str) -> Result<()> {
        Self::from_url(url).map(drop)
    }
}
