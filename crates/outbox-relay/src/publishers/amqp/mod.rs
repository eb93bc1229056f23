//! `amqp://`: RabbitMQ (AMQP 0-9-1) through `lapin`, with publisher confirms.
//!
//! Each message goes to the configured exchange with routing key = topic,
//! persistent and mandatory. The whole batch is published first and the
//! confirms are awaited together, so a batch costs one round trip, not one
//! per message. A message the broker could not route to any queue comes
//! back (mandatory) and is reported permanent: no retry creates a binding.

mod config;

pub use config::{AmqpConfig, DEFAULT_EXCHANGE};

use crate::publishers::kit::declare::{Declaration, Declared};
use crate::publishers::PublisherContext;
use crate::envelope::Envelope;
use crate::publishers::kit::lazy::{publish_exclusive, Exclusive, Lazy};
use crate::publishers::kit::outcome::all_failed;
use crate::publishers::limits;
use crate::{Message, Outcome, PublishError, Publisher, Result};
use futures_util::future::join_all;
use lapin::message::BasicReturnMessage;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// AMQP 0-9-1 short strings (routing keys, property values, header names).
const SHORT_MAX: usize = 255;

/// RabbitMQ's frame_max when the connection negotiated none.
const DEFAULT_FRAME_MAX: usize = 131_072;

/// The RabbitMQ publisher. One connection and one confirm-mode channel,
/// opened on first use and reopened on the batch after a loss.
#[derive(Debug)]
pub struct AmqpPublisher {
    cfg: AmqpConfig,
    // Boxed: a connection and a channel are large, and idle most of the time.
    link: Lazy<Box<Link>>,
}

/// A publisher confirm as it came back, with the return lapin attached to
/// it (not necessarily this message's: see `settle_returns`).
struct Confirmed {
    acked: bool,
    ret: Option<Box<BasicReturnMessage>>,
}

pub(crate) struct Link {
    // Held so the connection lives as long as its channel.
    _connection: Connection,
    channel: Channel,
    /// The negotiated frame size: a message's properties travel in one
    /// frame, and a larger one makes the broker close the connection.
    frame_max: usize,
}

impl AmqpPublisher {
    /// A publisher for `cfg`; connects lazily, so a broker that is down at
    /// start-up delays publishing instead of failing the relay.
    pub fn new(cfg: AmqpConfig) -> Self {
        Self {
            cfg,
            link: Lazy::default(),
        }
    }

    /// Parses a publisher URL (see [`AmqpConfig::from_url`]).
    pub fn from_url(url: &str) -> Result<Self> {
        Ok(Self::new(AmqpConfig::from_url(url)?))
    }

    /// The configuration in use.
    pub fn config(&self) -> &AmqpConfig {
        &self.cfg
    }
}

// One batch at a time: its confirms are awaited on the link's channel.
impl Exclusive for AmqpPublisher {
    type Conn = Box<Link>;

    async fn connect(&self) -> Result<Box<Link>, PublishError> {
        let props = ConnectionProperties::default()
            .with_executor(tokio_executor_trait::Tokio::current())
            .with_reactor(tokio_reactor_trait::Tokio)
            .with_connection_name(LongString::from(self.cfg.connection_name.clone()));
        let connect = Connection::connect(&self.cfg.uri, props);
        let connection = tokio::time::timeout(self.cfg.confirm_timeout, connect)
            .await
            .map_err(|_| PublishError::retryable("AMQP connect timed out"))?
            .map_err(|e| retryable("AMQP connect failed", &e))?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| retryable("AMQP channel open failed", &e))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| retryable("AMQP confirm.select failed", &e))?;
        if !self.cfg.exchange.is_empty() {
            // Passive when not asked to declare: fail here with a clear
            // message rather than on the first publish, which would close
            // the channel.
            let opts = ExchangeDeclareOptions {
                durable: true,
                passive: !self.cfg.declare,
                ..ExchangeDeclareOptions::default()
            };
            channel
                .exchange_declare(
                    &self.cfg.exchange,
                    ExchangeKind::Topic,
                    opts,
                    FieldTable::default(),
                )
                .await
                .map_err(|e| {
                    // A missing exchange is retryable: a deploy may be
                    // creating it, and the messages are not at fault.
                    retryable(
                        &format!(
                            "exchange {:?} is not usable (create it, or add declare=true to the URL)",
                            self.cfg.exchange
                        ),
                        &e,
                    )
                })?;
        }
        let frame_max = match connection.configuration().frame_max() {
            // 0 means no limit was negotiated; RabbitMQ then caps at 128 KiB anyway.
            0 => DEFAULT_FRAME_MAX,
            n => n as usize,
        };
        Ok(Box::new(Link {
            _connection: connection,
            channel,
            frame_max,
        }))
    }

    async fn publish_on(&self, link: &mut Box<Link>, batch: &[Message]) -> (Vec<Outcome>, bool) {
        let channel = &link.channel;
        let mut pending = Vec::with_capacity(batch.len());
        let mut broken: Option<PublishError> = None;
        for m in batch {
            if let Some(e) = &broken {
                pending.push(Err(e.clone()));
                continue;
            }
            let env = Envelope::from(m);
            let body = env.payload.get().as_bytes().to_vec();
            let checked = self.admissible(m, body.len()).and_then(|()| {
                let (props, size) = self.properties(&env)?;
                limits::part_size(
                    "amqp",
                    "the frame of its properties and headers",
                    size,
                    "AMQP frame_max",
                    link.frame_max,
                )?;
                Ok(props)
            });
            let props = match checked {
                Ok(props) => props,
                Err(e) => {
                    pending.push(Err(e));
                    continue;
                }
            };
            let sent = channel
                .basic_publish(
                    &self.cfg.exchange,
                    &m.topic,
                    BasicPublishOptions {
                        mandatory: true,
                        ..BasicPublishOptions::default()
                    },
                    &body,
                    props,
                )
                .await;
            match sent {
                Ok(confirm) => pending.push(Ok(confirm)),
                Err(e) => {
                    let e = retryable("AMQP publish failed", &e);
                    broken = Some(e.clone());
                    pending.push(Err(e));
                }
            }
        }
        // Set when the channel can no longer be trusted for the next batch.
        let unusable = &AtomicBool::new(broken.is_some());
        let waits = pending.into_iter().map(|p| async move {
            let confirm = p?;
            match confirm.await {
                Ok(Confirmation::Ack(ret)) => Ok(Confirmed { acked: true, ret }),
                Ok(Confirmation::Nack(ret)) => Ok(Confirmed { acked: false, ret }),
                Ok(Confirmation::NotRequested) => {
                    unusable.store(true, Ordering::Relaxed);
                    Err(PublishError::retryable("channel is not in confirm mode"))
                }
                Err(e) => {
                    unusable.store(true, Ordering::Relaxed);
                    Err(retryable("AMQP confirm failed", &e))
                }
            }
        });
        match tokio::time::timeout(self.cfg.confirm_timeout, join_all(waits)).await {
            Ok(confirmed) => {
                let lost = unusable.load(Ordering::Relaxed) || !channel.status().connected();
                (self.settle_returns(batch, confirmed), lost)
            }
            Err(_) => {
                let e = PublishError::retryable(format!(
                    "no publisher confirm within {:?}",
                    self.cfg.confirm_timeout
                ));
                (all_failed(batch.len(), e), true)
            }
        }
    }
}

impl AmqpPublisher {
    /// Each message's outcome from the confirms of its batch. lapin hands a
    /// returned (unroutable) message to whichever confirm resolves next, and
    /// a multiple ack resolves its tags in no set order, so the return that
    /// rides on a confirm may be another message's. Returns are matched back
    /// by `message_id` (the event id) instead: a message is unroutable when a
    /// return carries its id, whichever confirm brought it.
    fn settle_returns(
        &self,
        batch: &[Message],
        confirmed: Vec<Result<Confirmed, PublishError>>,
    ) -> Vec<Outcome> {
        let returned: HashMap<String, &BasicReturnMessage> = confirmed
            .iter()
            .filter_map(|c| c.as_ref().ok()?.ret.as_deref())
            .filter_map(|r| {
                let id = r.delivery.properties.message_id().as_ref()?;
                Some((id.to_string(), r))
            })
            .collect();
        let exchange = &self.cfg.exchange;
        confirmed
            .iter()
            .zip(batch)
            .map(|(c, m)| {
                let c = c.as_ref().map_err(Clone::clone)?;
                if let Some(ret) = returned.get(&m.event_id.to_string()) {
                    return Err(PublishError::permanent(format!(
                        "unroutable: exchange {exchange:?} has no queue bound for routing key {:?} ({} {})",
                        m.topic, ret.reply_code, ret.reply_text
                    )));
                }
                if c.acked {
                    Ok(())
                } else {
                    Err(PublishError::retryable(
                        "broker nacked the message (publisher confirm)",
                    ))
                }
            })
            .collect()
    }

    /// Whether `m`, with a body of `body_len` bytes, is one the broker
    /// takes on this exchange.
    fn admissible(&self, m: &Message, body_len: usize) -> Result<(), PublishError> {
        if m.topic.len() > SHORT_MAX {
            return Err(limits::invalid(
                "amqp",
                "routing key",
                &m.topic,
                &format!(
                    "it is {} bytes, AMQP routing keys are at most {SHORT_MAX}",
                    m.topic.len()
                ),
            ));
        }
        // Through the default exchange the routing key is a queue name.
        if self.cfg.exchange.is_empty() {
            limits::reserved(
                "amqp",
                "queue",
                &m.topic,
                &["amq."],
                "the broker's own queues, such as amq.rabbitmq.reply-to",
                self.cfg.allow_reserved,
            )?;
        }
        limits::size(
            "amqp",
            body_len,
            "RabbitMQ max_message_size",
            self.cfg.max_message_size,
        )
    }

    /// The properties of `env`'s message, and the size of the content
    /// header frame that carries them (with its 8 bytes of framing), or
    /// which header AMQP cannot carry.
    fn properties(&self, env: &Envelope) -> Result<(BasicProperties, usize), PublishError> {
        let mut headers = FieldTable::default();
        // Frame header and end (8), class, weight, body size, flags (14),
        // message_id, timestamp, content_type, delivery_mode, app_id, type,
        // and the table's own length.
        let mut size = 8 + 14 + (1 + 36) + 8 + (1 + 16) + 1 + (1 + 6) + (1 + SHORT_MAX) + 4;
        let mut put = |k: &str, v: String| {
            if k.len() > SHORT_MAX {
                return Err(limits::header(
                    "amqp",
                    k,
                    &format!(
                        "is {} bytes, AMQP header names are at most {SHORT_MAX}",
                        k.len()
                    ),
                ));
            }
            // Name (short string), type tag, value (long string).
            size += 1 + k.len() + 1 + 4 + v.len();
            headers.insert(
                ShortString::from(k.to_owned()),
                AMQPValue::LongString(LongString::from(v)),
            );
            Ok(())
        };
        for (k, v) in env.binary_headers(&self.cfg.source) {
            // content-type is a property of its own.
            if k != "content-type" {
                put(&k, v)?;
            }
        }
        for (k, v) in &env.headers {
            put(k, v.clone())?;
        }
        // Last, so a message header cannot impersonate the metadata.
        for (k, v) in env.metadata() {
            put(k, v)?;
        }
        let mut p = BasicProperties::default()
            .with_message_id(ShortString::from(env.event_id.to_string()))
            .with_timestamp(env.created_at.timestamp().max(0) as u64)
            .with_content_type(ShortString::from("application/json".to_owned()))
            .with_delivery_mode(2)
            .with_app_id(ShortString::from("outbox".to_owned()))
            .with_headers(headers);
        if env.event_type.len() <= SHORT_MAX {
            p = p.with_type(ShortString::from(env.event_type.clone()));
        }
        Ok((p, size))
    }
}

impl Publisher for AmqpPublisher {
    const NAME: &'static str = "amqp";
    // One channel with confirms: the broker keeps publish order.
    const BATCH_ORDER: crate::BatchOrder = crate::BatchOrder::Sequential;

    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        publish_exclusive(self, &self.link, |l| connected(l), batch).await
    }

    async fn check(&self) -> Result<(), PublishError> {
        let mut held = self.link.lock().await;
        held.open(|l| connected(l), || self.connect())
            .await
            .map(drop)
    }
}

/// Whether the link's channel is still open (the broker may have closed it,
/// or the connection under it, since the last batch).
fn connected(link: &Link) -> bool {
    link.channel.status().connected()
}

fn retryable(what: &str, e: &lapin::Error) -> PublishError {
    PublishError::retryable(format!("{what}: {e}"))
}

impl Declared for AmqpPublisher {
    const DECLARATION: Declaration = config::DECLARATION;

    async fn build(url: &str, _: &PublisherContext) -> Result<Self> {
        Self::from_url(url)
    }

    fn check(url: &str) -> Result<()> {
        Self::from_url(url).map(drop)
    }
}
