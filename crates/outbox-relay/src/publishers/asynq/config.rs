//! `asynq://host:port[/db]?queue=default&task_type=topic|event_type&max_retry=25&task_timeout=30m&max_message_size=…`
//!
//! `max_message_size` (bytes, default 536870912, Redis's
//! `proto-max-bulk-len`) bounds an encoded task: a larger one is refused
//! before sending, as the server would close the connection under the whole
//! pipeline. The queue comes from the URL and the task type is opaque to
//! Redis, so no topic reaches a reserved key: there is no `allow_reserved`.

use crate::publishers::kit::declare::{Declaration, Opt};
use crate::publishers::kit::options::UrlOptions;
use crate::publishers::redis::{RedisServer, PROTO_MAX_BULK_LEN};
use crate::Result;
use std::time::Duration;

/// Which message field becomes the asynq task type (what `ServeMux`
/// routes on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskType {
    /// The topic (default).
    Topic,
    /// The event type.
    EventType,
}

/// Options of the asynq publisher.
#[derive(Clone)]
pub struct AsynqConfig {
    /// The Redis server (its URL with the `redis://` scheme) and how long
    /// to wait on it.
    pub server: RedisServer,
    /// The asynq queue (default `default`).
    pub queue: String,
    /// What names the task type.
    pub task_type: TaskType,
    /// asynq's `MaxRetry` written into each task (default 25, as asynq's).
    pub max_retry: i32,
    /// asynq's per-task `Timeout` (default 30 minutes, as asynq's).
    pub task_timeout: Duration,
    /// The largest encoded task sent (`max_message_size`, bytes).
    pub max_message_size: usize,
}

crate::debug::debug_showing!(AsynqConfig {
    server,
    queue,
    task_type,
    ..
});

/// This publisher, as it declares itself (see `kit/declare.rs`): the
/// option table of its docs is rendered from this.
pub(crate) const DECLARATION: Declaration = Declaration {
    name: "asynq",
    schemes: &["asynq"],
    not_served: &[],
    settings: &[],
    summary: "asynq tasks on Redis",
    options: &[
        Opt::new(
            &["queue"],
            "`default`",
            "the asynq queue",
        ),
        Opt::new(
            &["task_type"],
            "`topic`",
            "what becomes the task type a `ServeMux` routes on: `topic` or `event_type`",
        ),
        Opt::new(
            &["max_retry"],
            "`25`",
            "asynq's `MaxRetry` written into each task (asynq's default)",
        ),
        Opt::new(
            &["task_timeout"],
            "`30m`",
            "asynq's per-task `Timeout` (asynq's default)",
        ),
        Opt::new(
            &["connect_timeout", "timeout"],
            "`5s`, `30s`",
            "as for `redis://`",
        ),
        Opt::new(
            &["max_message_size"],
            "`536870912`",
            "as for `redis://`, for the encoded task",
        ),
    ],
};

impl AsynqConfig {
    /// Parses and validates an `asynq://` URL (a Redis URL with another scheme).
    pub fn from_url(url: &str) -> Result<Self> {
        let o = UrlOptions::declared(&DECLARATION, url)?;
        // asynq's server speaks Redis: hand the client a redis:// URL.
        let server = url::Url::parse(&o.base.as_str().replacen("asynq://", "redis://", 1))
            .map_err(|e| o.error(e))?;
        let server = RedisServer::from_options(&o, server)?;
        let queue = o.get("queue").unwrap_or("default").to_owned();
        if queue.is_empty() || queue.contains(['{', '}']) {
            return Err(o.error(format!(
                "queue {queue:?} is not a usable asynq queue name (non-empty, no braces)"
            )));
        }
        let task_type = match o.get("task_type").unwrap_or("topic") {
            "topic" => TaskType::Topic,
            "event_type" => TaskType::EventType,
            other => {
                return Err(o.error(format!(
                    "option task_type={other:?} is invalid: expected topic or event_type"
                )))
            }
        };
        let max_retry = o
            .parsed::<u16>("max_retry", "a whole number from 0 to 65535")?
            .map_or(25, i32::from);
        let task_timeout = o.duration_or("task_timeout", Duration::from_secs(30 * 60))?;
        let max_message_size = o
            .parsed::<usize>("max_message_size", "a number of bytes")?
            .unwrap_or(PROTO_MAX_BULK_LEN);
        Ok(Self {
            max_message_size,
            server,
            queue,
            task_type,
            max_retry,
            task_timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publishers::kit::options::assert_refused;

    #[test]
    fn defaults_follow_asynq_and_bad_values_are_named() {
        let c = AsynqConfig::from_url("asynq://:pw@127.0.0.1:6379/1").unwrap();
        assert_eq!(c.queue, "default");
        assert_eq!(c.task_type, TaskType::Topic);
        assert_eq!(c.max_retry, 25);
        assert_eq!(c.server.url.as_str(), "redis://:pw@127.0.0.1:6379/1");
        assert!(!format!("{c:?}").contains("pw"));
        let c = AsynqConfig::from_url("asynq://h?queue=critical&task_type=event_type").unwrap();
        assert_eq!(
            (c.queue.as_str(), c.task_type),
            ("critical", TaskType::EventType)
        );
        assert_refused(
            AsynqConfig::from_url,
            &[
                ("asynq://h?task_type=kind", "task_type=\"kind\""),
                ("asynq://h?queue=a{b}", "queue"),
                ("asynq://h?max_retry=-1", "max_retry"),
                ("redis://h", "asynq://"),
            ],
        );
    }
}
