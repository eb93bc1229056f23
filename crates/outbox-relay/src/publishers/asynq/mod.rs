//! `asynq://`: enqueues each message as a task for Go
//! [asynq](https://github.com/hibiken/asynq) workers, writing exactly what
//! asynq's own `Client.Enqueue` writes to Redis:
//!
//! - the task hash `asynq:{<queue>}:t:<task id>` with `msg` (the
//!   protobuf-encoded `TaskMessage`), `state` = `pending` and
//!   `pending_since` (Unix nanoseconds);
//! - the task id pushed on the list `asynq:{<queue>}:pending`;
//! - the queue name in the set `asynq:queues`.
//!
//! The task type is the topic (or the event type), the payload is the
//! envelope's native JSON, the task id is `outbox:<message id>`. The hash
//! and the list are written by one Lua script, atomically, which does
//! nothing if the task already exists: asynq calls that a task id conflict,
//! and here it means an earlier attempt of the same message got through,
//! so it counts as success.

mod config;
mod task;

pub use config::{AsynqConfig, TaskType};
pub use task::TaskMessage;

use crate::publishers::kit::declare::{Declaration, Declared};
use crate::publishers::PublisherContext;
use super::kit::outcome::Settling;
use super::limits;
use super::redis::conn::{reply_outcome, RedisConn};
use crate::{Envelope, Message, Outcome, PublishError, Publisher, Result};
use redis::Value;

/// Same steps as asynq's enqueue script: `EXISTS`, then `HSET` the task and
/// `LPUSH` its id. Returns 1 when enqueued, 0 when the id already exists.
const ENQUEUE_SCRIPT: &str = r#"
if redis.call("EXISTS", KEYS[1]) == 1 then
  return 0
end
redis.call("HSET", KEYS[1], "msg", ARGV[1], "state", "pending", "pending_since", ARGV[3])
redis.call("LPUSH", KEYS[2], ARGV[2])
return 1
"#;

/// The set of every queue name, read by asynq's inspector and web UI.
pub const ALL_QUEUES_KEY: &str = "asynq:queues";

/// The key of a task's hash.
pub fn task_key(queue: &str, task_id: &str) -> String {
    format!("asynq:{{{queue}}}:t:{task_id}")
}

/// The key of a queue's pending list.
pub fn pending_key(queue: &str) -> String {
    format!("asynq:{{{queue}}}:pending")
}

/// The asynq task id of an outbox message.
pub fn task_id(message_id: i64) -> String {
    format!("outbox:{message_id}")
}

/// The asynq publisher.
#[derive(Debug)]
pub struct AsynqPublisher {
    config: AsynqConfig,
    conn: RedisConn,
}

impl AsynqPublisher {
    /// A publisher for `config`; connects on first use.
    pub fn new(config: AsynqConfig) -> Result<Self> {
        let conn = RedisConn::new("asynq", &config.server)?;
        Ok(Self { config, conn })
    }

    /// Parses `url` (see [`AsynqConfig::from_url`]) and builds the publisher.
    pub fn from_url(url: &str) -> Result<Self> {
        Self::new(AsynqConfig::from_url(url)?)
    }

    /// The options in force.
    pub fn config(&self) -> &AsynqConfig {
        &self.config
    }

    /// The task asynq will hand to a worker for `m`.
    pub fn task(&self, m: &Message) -> TaskMessage {
        let e = Envelope::from(m);
        let task_type = match self.config.task_type {
            TaskType::Topic => &m.topic,
            TaskType::EventType => &m.event_type,
        };
        TaskMessage {
            r#type: task_type.clone(),
            payload: e.to_json().into_bytes(),
            id: task_id(m.id),
            queue: self.config.queue.clone(),
            retry: self.config.max_retry,
            timeout: i64::try_from(self.config.task_timeout.as_secs()).unwrap_or(i64::MAX),
            headers: m.headers.clone().into_iter().collect(),
            ..TaskMessage::default()
        }
    }
}

impl Publisher for AsynqPublisher {
    const NAME: &'static str = "asynq";
    // Pipelined commands on one connection, applied in order.
    const BATCH_ORDER: crate::BatchOrder = crate::BatchOrder::Sequential;

    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        if batch.is_empty() {
            return Vec::new();
        }
        let queue = &self.config.queue;
        let now_ns = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX);
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        // asynq registers the queue outside its script too, so the script's
        // keys stay in one cluster slot (`{<queue>}`).
        pipe.cmd("SADD").arg(ALL_QUEUES_KEY).arg(queue);
        // Refused messages get their outcome now; the rest get a reply each.
        let outcomes: Settling = batch
            .iter()
            .map(|m| {
                let task = self.task(m);
                let encoded = task.encode();
                // Past proto-max-bulk-len the server closes the connection
                // under the whole pipeline.
                if let Err(e) = limits::size(
                    "asynq",
                    encoded.len(),
                    "the publisher's max_message_size",
                    self.config.max_message_size,
                ) {
                    return Some(Err(e));
                }
                pipe.cmd("EVAL")
                    .arg(ENQUEUE_SCRIPT)
                    .arg(2)
                    .arg(task_key(queue, &task.id))
                    .arg(pending_key(queue))
                    .arg(encoded)
                    .arg(&task.id)
                    .arg(now_ns);
                None
            })
            .collect();
        let sent = outcomes.sent();
        if sent == 0 {
            return outcomes.finish(std::iter::empty());
        }
        // The SADD, then one reply per task.
        let mut replies = match self.conn.replies(&pipe, sent + 1).await {
            Ok(r) => r.into_iter(),
            Err(e) => return outcomes.fail_sent(e),
        };
        if let Some(Err(e)) = replies.next().map(reply_outcome) {
            return outcomes.fail_sent(e);
        }
        let sent = replies.map(|r| match reply_outcome(r)? {
            // 1: enqueued; 0: the task id exists, an earlier attempt won.
            Value::Int(0 | 1) => Ok(()),
            other => Err(PublishError::permanent(format!(
                "unexpected reply from the asynq enqueue script: {other:?}"
            ))),
        });
        outcomes.finish(sent)
    }

    async fn check(&self) -> Result<(), PublishError> {
        self.conn.ping().await
    }
}

impl Declared for AsynqPublisher {
    const DECLARATION: Declaration = config::DECLARATION;

    async fn build(url: &str, _: &PublisherContext) -> Result<Self> {
        Self::from_url(url)
    }

    fn check(url: &str) -> Result<()> {
        Self::from_url(url).map(drop)
    }
}
