//! `redis://`: each message is one entry `XADD`ed to the stream
//! `<stream_prefix><topic>`. Its fields are the envelope's metadata
//! (`event_id`, `message_id`, `event_type`, `event_version`,
//! `aggregate_type`, `aggregate_id`, `topic`, `created_at`), `headers` (a
//! JSON object) and `payload` (JSON text): [`Envelope::from_fields`] reads
//! them back. A batch is one pipelined round trip; each entry gets its own
//! reply, hence its own outcome.

mod config;
pub(crate) mod conn;

pub use config::{RedisConfig, RedisServer};
#[allow(unused_imports)] // used by asynq, when built
pub(crate) use config::PROTO_MAX_BULK_LEN;

use crate::publishers::kit::declare::{Declaration, Declared};
use crate::publishers::PublisherContext;
use crate::envelope::field;
use crate::publishers::kit::outcome::Settling;
use crate::publishers::kit::record::Record;
use crate::publishers::limits;
use crate::{Message, Outcome, PublishError, Publisher, Result};
use conn::{reply_outcome, RedisConn};

/// The Redis Streams publisher.
#[derive(Debug)]
pub struct RedisPublisher {
    config: RedisConfig,
    conn: RedisConn,
}

impl RedisPublisher {
    /// A publisher for `config`; connects on first use.
    pub fn new(config: RedisConfig) -> Result<Self> {
        let conn = RedisConn::new("redis", &config.server)?;
        Ok(Self { config, conn })
    }

    /// Parses `url` (see [`RedisConfig::from_url`]) and builds the publisher.
    pub fn from_url(url: &str) -> Result<Self> {
        Self::new(RedisConfig::from_url(url)?)
    }

    /// The options in force.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// Queues the XADD of `m` on `pipe`, or says why the server must not
    /// get it: an argument past its proto-max-bulk-len makes it close the
    /// connection under the whole pipeline.
    fn xadd(&self, pipe: &mut redis::Pipeline, m: &Message) -> Result<(), PublishError> {
        let stream = self.config.stream(&m.topic);
        limits::reserved(
            "redis",
            "stream",
            &stream,
            &config::RESERVED,
            "the asynq publisher's key layout on the same server",
            self.config.allow_reserved,
        )?;
        let record = Record::new(m);
        // A bound, not the server's own count (it limits each argument):
        // the stream, every field name and value, and the payload.
        let size = stream.len() + record.fields_len() + record.payload.len();
        limits::size(
            "redis",
            size,
            "the publisher's max_message_size",
            self.config.max_message_size,
        )?;
        let cmd = pipe.cmd("XADD").arg(stream);
        if let Some(n) = self.config.maxlen {
            cmd.arg("MAXLEN").arg("~").arg(n);
        }
        cmd.arg("*");
        for (name, value) in record.fields {
            cmd.arg(name).arg(value);
        }
        cmd.arg(field::PAYLOAD).arg(record.payload);
        Ok(())
    }
}

impl Publisher for RedisPublisher {
    const NAME: &'static str = "redis";
    // Pipelined XADDs on one connection, applied in order.
    const BATCH_ORDER: crate::BatchOrder = crate::BatchOrder::Sequential;

    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        if batch.is_empty() {
            return Vec::new();
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        // Refused messages get their outcome now; the rest get a reply each.
        let outcomes: Settling = batch
            .iter()
            .map(|m| self.xadd(&mut pipe, m).err().map(Err))
            .collect();
        let sent = outcomes.sent();
        if sent == 0 {
            return outcomes.finish(std::iter::empty());
        }
        match self.conn.replies(&pipe, sent).await {
            Ok(replies) => outcomes.finish(replies.into_iter().map(|r| reply_outcome(r).map(drop))),
            Err(e) => outcomes.fail_sent(e),
        }
    }

    async fn check(&self) -> Result<(), PublishError> {
        self.conn.ping().await
    }
}

impl Declared for RedisPublisher {
    const DECLARATION: Declaration = config::DECLARATION;

    async fn build(url: &str, _: &PublisherContext) -> Result<Self> {
        Self::from_url(url)
    }

    fn check(url: &str) -> Result<()> {
        Self::from_url(url).map(drop)
    }
}
