//! `redis://`: each message is one entry `XADD`ed to the stream
//! `<stream_prefix><topic>`. Its fields are the envelope's metadata
//! (`event_id`, `message_id`, `event_type`, `event_version`,
//! `aggregate_type`, `aggregate_id`, `topic`, `created_at`), `headers` (a
//! JSON object) and `payload` (JSON text): [`Envelope::from_fields`] reads
//! them back. A batch is one pipelined round trip; each entry gets its own
//! reply, hence its own outcome.

mod config;
pub(crate) mod conn;

pub use config::RedisConfig;
pub(crate) use config::{check_db, timeouts, CONNECTION_OPTIONS};

use crate::envelope::{field, Envelope};
use crate::{Error, Message, Outcome, PublishError, Publisher, Result};
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
        let conn = RedisConn::new(
            &config.server,
            config.connect_timeout,
            config.response_timeout,
        )
        .map_err(|e| Error::Publisher(format!("redis publisher: {e}")))?;
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

    fn xadd(&self, pipe: &mut redis::Pipeline, m: &Message) {
        let e = Envelope::from(m);
        let cmd = pipe.cmd("XADD").arg(self.config.stream(&m.topic));
        if let Some(n) = self.config.maxlen {
            cmd.arg("MAXLEN").arg("~").arg(n);
        }
        cmd.arg("*");
        for (name, value) in e.metadata() {
            cmd.arg(name).arg(value);
        }
        cmd.arg(field::HEADERS)
            .arg(serde_json::to_string(&e.headers).expect("string map serializes"))
            .arg(field::PAYLOAD)
            .arg(e.payload.to_string());
    }
}

impl Publisher for RedisPublisher {
    fn name(&self) -> &str {
        "redis"
    }

    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        if batch.is_empty() {
            return Vec::new();
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for m in batch {
            self.xadd(&mut pipe, m);
        }
        match self.conn.query(&pipe).await {
            Ok(replies) if replies.len() == batch.len() => replies
                .into_iter()
                .map(|r| reply_outcome(r).map(drop))
                .collect(),
            Ok(replies) => vec![
                Err(PublishError::retryable(format!(
                    "redis answered {} replies to {} XADDs",
                    replies.len(),
                    batch.len()
                )));
                batch.len()
            ],
            Err(e) => vec![Err(e); batch.len()],
        }
    }

    async fn check(&self) -> Result<(), PublishError> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors().cmd("PING");
        let reply = self.conn.query(&pipe).await?;
        reply
            .into_iter()
            .try_for_each(|r| reply_outcome(r).map(drop))
    }
}
