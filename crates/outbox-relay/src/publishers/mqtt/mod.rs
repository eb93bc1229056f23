//! `mqtt://`: MQTT 3.1.1 through `rumqttc`, QoS 1.
//!
//! A message counts as published when the broker's PUBACK for it arrives.
//! The client's event loop runs in a task of its own (it must be polled
//! between batches too, for keep-alive pings) and reports which packet id
//! each publish got and which packet ids were acknowledged; since one batch
//! is in flight at a time and the event loop assigns packet ids in request
//! order, the n-th id reported belongs to the n-th message sent.
//!
//! MQTT 3.1.1 has no headers, so the body is the envelope's native JSON.

mod config;

pub use config::{MqttConfig, TopicMap};

use crate::publishers::kit::declare::{Declaration, Declared};
use crate::publishers::PublisherContext;
use crate::envelope::Envelope;
use crate::publishers::kit::lazy::{publish_exclusive, Exclusive, Lazy};
use crate::publishers::kit::outcome::Settling;
use crate::publishers::limits;
use crate::{Message, Outcome, PublishError, Publisher, Result};
use rumqttc::{AsyncClient, Event, EventLoop, MqttOptions, Outgoing, Packet, QoS};
use std::collections::{HashMap, VecDeque};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// MQTT's largest remaining length (the packet less its 1 to 5 byte fixed
/// header): the default `max_packet_size`.
pub(crate) const MAX_REMAINING: usize = 268_435_455;

/// The MQTT publisher: one session, opened on first use and reopened on
/// the batch after a loss.
#[derive(Debug)]
pub struct MqttPublisher {
    cfg: MqttConfig,
    session: Lazy<Session>,
}

/// What the event-loop task reports.
enum Ev {
    Connected,
    Sent(u16),
    Acked(u16),
}

pub(crate) struct Session {
    client: AsyncClient,
    events: mpsc::UnboundedReceiver<Result<Ev, String>>,
    task: JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MqttPublisher {
    /// A publisher for `cfg`; connects lazily.
    pub fn new(cfg: MqttConfig) -> Self {
        Self {
            cfg,
            session: Lazy::default(),
        }
    }

    /// Parses a publisher URL (see [`MqttConfig::from_url`]).
    pub fn from_url(url: &str) -> Result<Self> {
        Ok(Self::new(MqttConfig::from_url(url)?))
    }

    /// The configuration in use.
    pub fn config(&self) -> &MqttConfig {
        &self.cfg
    }
}

// One batch at a time: acks map to messages by packet id in send order.
impl Exclusive for MqttPublisher {
    type Conn = Session;

    async fn connect(&self) -> Result<Session, PublishError> {
        let c = &self.cfg;
        let mut opts = MqttOptions::new(&c.client_id, &c.host, c.port);
        opts.set_keep_alive(c.keep_alive)
            .set_clean_session(true)
            .set_inflight(c.inflight)
            // rumqttc counts the whole packet; a larger one would end the
            // event loop (and the session) instead of failing one message,
            // so publish_on refuses it first.
            .set_max_packet_size(MAX_REMAINING + 5, MAX_REMAINING + 5);
        if let Some((user, pass)) = &c.credentials {
            opts.set_credentials(user, pass);
        }
        let (client, mut eventloop) = AsyncClient::new(opts, 64);
        let mut net = eventloop.network_options();
        net.set_connection_timeout(c.timeout.as_secs().max(1));
        eventloop.set_network_options(net);
        let (tx, mut events) = mpsc::unbounded_channel();
        let task = tokio::spawn(drive(eventloop, tx));
        let first = tokio::time::timeout(c.timeout, events.recv()).await;
        let failure = match first {
            Ok(Some(Ok(Ev::Connected))) => {
                return Ok(Session {
                    client,
                    events,
                    task,
                })
            }
            Ok(Some(Err(e))) => format!("MQTT broker {}:{} unreachable: {e}", c.host, c.port),
            Ok(_) => "MQTT connection closed".to_owned(),
            Err(_) => format!(
                "no MQTT CONNACK from {}:{} within {:?}",
                c.host, c.port, c.timeout
            ),
        };
        task.abort();
        Err(PublishError::retryable(failure))
    }

    async fn publish_on(&self, session: &mut Session, batch: &[Message]) -> (Vec<Outcome>, bool) {
        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
        let mut order = VecDeque::new();
        let mut requests = Vec::new();
        for (i, m) in batch.iter().enumerate() {
            let topic = self.cfg.mqtt_topic(&m.topic);
            let body = Envelope::from(m).to_json().into_bytes();
            match self.admissible(&topic, body.len()) {
                Err(e) => outcomes[i] = Some(Err(e)),
                Ok(()) => {
                    order.push_back(i);
                    requests.push((topic, body));
                }
            }
        }
        let mut waiting = order.len();
        let client = session.client.clone();
        let send = async move {
            for (topic, body) in requests {
                client.publish(topic, QoS::AtLeastOnce, false, body).await?;
            }
            Ok::<_, rumqttc::ClientError>(())
        };
        tokio::pin!(send);
        let deadline = tokio::time::sleep(self.cfg.timeout);
        tokio::pin!(deadline);
        let mut sent_all = false;
        let mut inflight: HashMap<u16, usize> = HashMap::new();
        let failure = loop {
            if waiting == 0 {
                break None;
            }
            tokio::select! {
                r = &mut send, if !sent_all => {
                    sent_all = true;
                    if let Err(e) = r {
                        break Some(PublishError::retryable(format!("MQTT client: {e}")));
                    }
                }
                ev = session.events.recv() => match ev {
                    Some(Ok(Ev::Sent(pkid))) => {
                        if let Some(i) = order.pop_front() {
                            inflight.insert(pkid, i);
                        }
                    }
                    Some(Ok(Ev::Acked(pkid))) => {
                        if let Some(i) = inflight.remove(&pkid) {
                            outcomes[i] = Some(Ok(()));
                            waiting -= 1;
                        }
                    }
                    Some(Ok(Ev::Connected)) => {}
                    Some(Err(e)) => break Some(PublishError::retryable(format!("MQTT connection lost: {e}"))),
                    None => break Some(PublishError::retryable("MQTT connection closed")),
                },
                () = &mut deadline => {
                    break Some(PublishError::retryable(format!(
                        "no PUBACK within {:?}", self.cfg.timeout
                    )));
                }
            }
        };
        let lost = failure.is_some();
        let unacked = failure.unwrap_or_else(|| PublishError::retryable("no PUBACK"));
        (Settling::from(outcomes).fail_sent(unacked), lost)
    }
}

/// Whether `s` survived since the last batch: a loss while idle (broker
/// restart) shows up as an error queued since then. Events that are not
/// errors are left over from the last batch and dropped.
fn idle_session_intact(s: &mut Session) -> bool {
    loop {
        match s.events.try_recv() {
            Ok(Ok(_)) => continue,
            Err(mpsc::error::TryRecvError::Empty) => return true,
            Ok(Err(_)) | Err(mpsc::error::TryRecvError::Disconnected) => return false,
        }
    }
}

/// Polls the event loop until the connection fails or nobody listens.
async fn drive(mut eventloop: EventLoop, tx: mpsc::UnboundedSender<Result<Ev, String>>) {
    loop {
        let ev = match eventloop.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(_))) => Ok(Ev::Connected),
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) => Ok(Ev::Sent(pkid)),
            Ok(Event::Incoming(Packet::PubAck(ack))) => Ok(Ev::Acked(ack.pkid)),
            Ok(_) => continue,
            Err(e) => Err(e.to_string()),
        };
        let failed = ev.is_err();
        // Stop on error: polling again would reconnect and replay unacked
        // publishes into a session nobody maps to messages any more.
        if tx.send(ev).is_err() || failed {
            return;
        }
    }
}

/// The topics messages go to.
const TOPICS: limits::Destination = limits::Destination {
    publisher: "mqtt",
    what: "topic",
    reserved: &config::RESERVED,
    role: "the broker's $SYS tree and $share subscriptions",
};

impl MqttPublisher {
    /// Whether a PUBLISH of `body_len` bytes to `topic` is one the broker
    /// takes: Mosquitto answers a malformed topic or an oversized packet by
    /// closing the connection, under every message of the batch.
    fn admissible(&self, topic: &str, body_len: usize) -> Result<(), PublishError> {
        let why = if topic.is_empty() {
            Some("a topic name is at least one character")
        } else if topic.len() > 65_535 {
            Some("longer than 65535 bytes, the most an MQTT string holds")
        } else if topic.contains(['+', '#']) {
            Some("the wildcards + and # only belong in subscriptions")
        } else if topic.contains(limits::mqtt_forbidden) {
            Some("MQTT strings hold no NUL, control characters (TAB included) or Unicode non-characters")
        } else {
            None
        };
        TOPICS.check(topic, why, self.cfg.allow_reserved)?;
        // Remaining length of a QoS 1 PUBLISH: topic (length-prefixed),
        // packet id, body.
        let size = 2 + topic.len() + 2 + body_len;
        limits::size(
            "mqtt",
            size,
            "MQTT max_packet_size",
            self.cfg.max_packet_size,
        )
    }
}

impl Publisher for MqttPublisher {
    const NAME: &'static str = "mqtt";
    // QoS 1 publishes may be retransmitted out of order.
    const BATCH_ORDER: crate::BatchOrder = crate::BatchOrder::Concurrent;

    async fn publish(&self, batch: &[Message]) -> Vec<Outcome> {
        publish_exclusive(self, &self.session, idle_session_intact, batch).await
    }

    async fn check(&self) -> Result<(), PublishError> {
        let mut held = self.session.lock().await;
        held.open(|s| !s.task.is_finished(), || self.connect())
            .await
            .map(drop)
    }
}

impl Declared for MqttPublisher {
    const DECLARATION: Declaration = config::DECLARATION;

    async fn build(url: &str, _: &PublisherContext) -> Result<Self> {
        Self::from_url(url)
    }

    fn check(url: &str) -> Result<()> {
        Self::from_url(url).map(drop)
    }
}
