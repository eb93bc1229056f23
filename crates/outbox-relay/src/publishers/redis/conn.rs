//! One lazily opened ([`Lazy`]), multiplexed Redis connection and the
//! error classes, shared by the `redis` and `asynq` publishers.

use super::RedisServer;
use crate::publishers::kit::lazy::Lazy;
use crate::{Error, PublishError, Result};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError, ServerErrorKind, Value};

/// A Redis server, connected on demand.
pub(crate) struct RedisConn {
    client: redis::Client,
    /// `host:port` only, for error messages.
    addr: String,
    config: AsyncConnectionConfig,
    conn: Lazy<MultiplexedConnection>,
}

crate::debug::debug_showing!(RedisConn { addr });

impl RedisConn {
    /// The connection of the `publisher` publisher to `server`; nothing
    /// connects yet.
    pub(crate) fn new(publisher: &str, server: &RedisServer) -> Result<Self> {
        let url = &server.url;
        let client = redis::Client::open(url.as_str())
            .map_err(|e| Error::publisher_from(format!("{publisher} publisher"), e))?;
        let addr = format!(
            "{}:{}",
            url.host_str().unwrap_or_default(),
            url.port().unwrap_or(6379)
        );
        Ok(Self {
            client,
            addr,
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(server.connect_timeout))
                .set_response_timeout(Some(server.response_timeout)),
            conn: Lazy::default(),
        })
    }

    async fn connection(&self) -> Result<MultiplexedConnection, PublishError> {
        self.conn
            .get(|| async {
                self.client
                    .get_multiplexed_async_connection_with_config(&self.config)
                    .await
                    .map_err(|e| {
                        PublishError::retryable(format!("redis at {} unreachable: {e}", self.addr))
                    })
            })
            .await
    }

    /// Sends `pipe` in one round trip and returns one reply per command,
    /// error replies included (the pipeline must ignore errors), so each
    /// message gets its own outcome. A connection-level failure fails the
    /// whole call and drops the connection so the next call reconnects.
    pub(crate) async fn query(&self, pipe: &redis::Pipeline) -> Result<Vec<Value>, PublishError> {
        let mut c = self.connection().await?;
        match pipe.query_async::<Vec<Value>>(&mut c).await {
            Ok(replies) => Ok(replies),
            Err(e) => {
                if !matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension) {
                    self.conn.reset().await;
                }
                Err(classify(&e).in_context(&self.addr))
            }
        }
    }

    /// [`Self::query`] for a pipeline of `commands` commands: fewer or more
    /// replies than that fails the whole call, since replies could no
    /// longer be matched to messages.
    pub(crate) async fn replies(
        &self,
        pipe: &redis::Pipeline,
        commands: usize,
    ) -> Result<Vec<Value>, PublishError> {
        let replies = self.query(pipe).await?;
        if replies.len() != commands {
            return Err(PublishError::retryable(format!(
                "redis answered {} replies to {commands} commands",
                replies.len()
            )));
        }
        Ok(replies)
    }

    /// A round trip (`PING`), for the publishers' `check`.
    pub(crate) async fn ping(&self) -> Result<(), PublishError> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors().cmd("PING");
        let reply = self.query(&pipe).await?;
        reply
            .into_iter()
            .try_for_each(|r| reply_outcome(r).map(drop))
    }
}

/// Error replies about the command itself (WRONGTYPE, ERR syntax, NOPERM,
/// a script error, ...) are permanent: resending the same command gets the
/// same reply. Replies that describe the server's state (LOADING, BUSY,
/// OOM, READONLY, cluster moves) and everything below the protocol (I/O,
/// timeouts, refused connections, failed authentication) are retryable:
/// they are not the message's fault and must not burn its attempts.
pub(crate) fn classify(e: &RedisError) -> PublishError {
    const TRANSIENT_CODES: [&str; 4] = ["BUSY", "OOM", "MISCONF", "NOREPLICAS"];
    let permanent = match e.kind() {
        ErrorKind::Server(kind) => matches!(
            kind,
            ServerErrorKind::ResponseError
                | ServerErrorKind::ExecAbort
                | ServerErrorKind::CrossSlot
                | ServerErrorKind::NoPerm
        ),
        ErrorKind::Extension => !e.code().is_some_and(|c| TRANSIENT_CODES.contains(&c)),
        _ => false,
    };
    if permanent {
        PublishError::permanent(format!("redis refused: {e}"))
    } else {
        PublishError::retryable(format!("redis: {e}"))
    }
}

/// The outcome a pipeline reply stands for: an error reply is classified,
/// anything else is success.
pub(crate) fn reply_outcome(reply: Value) -> Result<Value, PublishError> {
    match reply {
        Value::ServerError(e) => Err(classify(&e.into())),
        v => Ok(v),
    }
}

trait InContext {
    fn in_context(self, addr: &str) -> Self;
}

impl InContext for PublishError {
    fn in_context(mut self, addr: &str) -> Self {
        self.message = format!("{} (redis at {addr})", self.message);
        self
    }
}
