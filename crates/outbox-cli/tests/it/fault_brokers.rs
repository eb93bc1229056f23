//! A broker outage under a running relay, for each real broker on the
//! machine. The relay reaches the broker through a TCP proxy in the test;
//! mid-run the proxy cuts every connection and refuses new ones for longer
//! than the whole retry schedule (`--max-attempts 3 --backoff 200ms`: a
//! relay that spent attempts on the outage would dead-letter within about
//! half a second) while producers keep committing. Then the proxy lets
//! connections through again. The relay must keep running, open its breaker
//! rather than spend attempts, and end with every row sent, none dead,
//! every event_id read back from the broker by the broker's own client (in
//! a second process), and exit 0 on SIGTERM.

use crate::common;

use common::net::Running;
use common::outbox;
use outbox_testkit::litter::Litter;
use outbox_testkit::readback::{self, Reader};
use outbox_testkit::{FaultyProxy, TestSchema};
use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Committed and sent before the outage.
const BEFORE: i64 = 100;
/// Committed during the outage, in `CHUNKS` transactions a second apart.
const DURING: i64 = 100;
const CHUNKS: i64 = 5;
const TOTAL: i64 = BEFORE + DURING;
/// How long the broker is unreachable: ten times the retry schedule.
const OUTAGE: Duration = Duration::from_secs(5);
const BATCH: i64 = 50;
/// Pipelines the relay runs (its default), each with a batch in flight.
const PIPELINES: i64 = 4;
/// Per chunk, each way, on the link before the outage.
const LINK_DELAY: Duration = Duration::from_millis(50);
/// The topic of every message; each test has its own stream, exchange,
/// subject or topic prefix.
const TOPIC: &str = "orders";

#[derive(Debug, Clone, Copy)]
enum Broker {
    Redis,
    Amqp,
    Nats,
    Mqtt,
}

/// One broker, with names of its own for this test run.
struct Case {
    broker: Broker,
    tag: String,
    /// Its Redis keys or JetStream stream, removed with it.
    _litter: Litter,
}

impl Case {
    fn new(broker: Broker) -> Self {
        let tag = format!("outbox_fault_{:08x}", rand::random::<u32>());
        let litter = Litter::default();
        match broker {
            Broker::Redis => litter.redis_keys("redis://127.0.0.1:6379", &format!("{tag}:*")),
            Broker::Nats => litter.nats_stream(&tag.to_uppercase()),
            Broker::Amqp | Broker::Mqtt => {}
        }
        Self {
            broker,
            tag,
            _litter: litter,
        }
    }

    fn name(&self) -> &'static str {
        match self.broker {
            Broker::Redis => "redis",
            Broker::Amqp => "rabbitmq",
            Broker::Nats => "nats",
            Broker::Mqtt => "mosquitto",
        }
    }

    /// Where the broker listens on this machine.
    fn port(&self) -> u16 {
        match self.broker {
            Broker::Redis => 6379,
            Broker::Amqp => 5672,
            Broker::Nats => 4222,
            Broker::Mqtt => 1883,
        }
    }

    /// The JetStream stream capturing this test's subjects.
    fn stream(&self) -> String {
        self.tag.to_uppercase()
    }

    /// The publisher URL, through the proxy on `port`. Default options,
    /// except NATS's PubAck timeout: async-nats holds a publish made while
    /// disconnected until it reconnects, so with the default 10 s a relay
    /// would need 30 s of outage to use up three attempts; with 1 s it
    /// would dead-letter within this outage if it spent attempts on it.
    fn publisher(&self, port: u16) -> String {
        let tag = &self.tag;
        match self.broker {
            Broker::Redis => format!("redis://127.0.0.1:{port}?stream_prefix={tag}:"),
            Broker::Amqp => format!("amqp://guest:guest@127.0.0.1:{port}/%2f?exchange={tag}"),
            Broker::Nats => format!(
                "nats://127.0.0.1:{port}?subject_prefix={tag}.&create_stream={}&ack_timeout=1s",
                self.stream()
            ),
            Broker::Mqtt => format!("mqtt://127.0.0.1:{port}?prefix={tag}"),
        }
    }

    /// RabbitMQ and Mosquitto deliver only to subscribers already there:
    /// their reader starts (and the exchange exists) before the relay.
    async fn subscribe(&self) -> Option<Reader> {
        let count = TOTAL as usize;
        match self.broker {
            Broker::Amqp => Some(readback::amqp_distinct(&self.tag, "#", count).await),
            Broker::Mqtt => Some(readback::mqtt_distinct(&format!("{}/#", self.tag), count).await),
            Broker::Redis | Broker::Nats => None,
        }
    }

    /// The event_id of every copy the broker holds or delivered.
    async fn read_back(&self, reader: Option<Reader>) -> Vec<String> {
        let (entries, path): (Vec<serde_json::Value>, &[&str]) = match self.broker {
            Broker::Redis => {
                let stream = format!("{}:{TOPIC}", self.tag);
                let url = "redis://127.0.0.1:6379";
                let entries = readback::redis_stream(url, &stream).await;
                (entries, &["fields", "event_id"])
            }
            Broker::Nats => {
                let entries = readback::nats_stream("nats://127.0.0.1:4222", &self.stream()).await;
                (entries, &["headers", "event_id"])
            }
            Broker::Amqp | Broker::Mqtt => {
                let reader = reader.expect("subscribed before the relay started");
                let entries = tokio::time::timeout(Duration::from_secs(30), reader.finish())
                    .await
                    .expect("every message delivered to the subscriber within 30 s");
                let path: &[&str] = match self.broker {
                    Broker::Amqp => &["properties", "message_id"],
                    _ => &["body", "event_id"],
                };
                (entries, path)
            }
        };
        entries
            .iter()
            .map(|e| {
                path.iter()
                    .fold(e, |v, k| &v[k])
                    .as_str()
                    .unwrap_or_else(|| panic!("no event_id at {path:?} in {e}"))
                    .to_owned()
            })
            .collect()
    }
}

async fn enqueue(t: &TestSchema, n: i64) {
    t.exec(&format!(
        "INSERT INTO {{schema}}.messages (event_type, aggregate_type, aggregate_id, topic, payload) \
         SELECT 'order.created', 'order', g::text, '{TOPIC}', jsonb_build_object('n', g) \
         FROM generate_series(1, {n}) g"
    ))
    .await;
}

async fn count(t: &TestSchema, status: &str) -> i64 {
    t.count(&format!(
        "SELECT count(*) FROM {{schema}}.all_messages WHERE status = '{status}'"
    ))
    .await
}

/// Waits (bounded; no timing is asserted) until `want` rows are sent,
/// looking every `poll`.
async fn wait_sent(t: &TestSchema, want: i64, poll: Duration) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let sent = count(t, "sent").await;
        if sent >= want || Instant::now() > deadline {
            return sent;
        }
        tokio::time::sleep(poll).await;
    }
}

async fn event_ids(t: &TestSchema) -> BTreeSet<String> {
    let client = t.pool.get().await.unwrap();
    let sql = format!(
        "SELECT event_id::text FROM {}.all_messages",
        t.schema.quoted()
    );
    let rows = client.query(sql.as_str(), &[]).await.unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

/// Sends SIGTERM and waits (bounded) for the exit.
fn terminate(relay: &mut Running) -> std::process::ExitStatus {
    Command::new("kill")
        .args(["-TERM", &relay.0.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = relay.0.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the relay ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The whole scenario for one broker.
async fn broker_outage(broker: Broker) {
    let case = Case::new(broker);
    let name = case.name();
    let t = TestSchema::new(&format!("fault_{name}")).await;
    let proxy = FaultyProxy::start(([127, 0, 0, 1], case.port()).into()).await;
    let reader = case.subscribe().await;
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut relay = outbox(
        t.name(),
        &[
            "relay",
            "--publisher",
            &case.publisher(proxy.addr().port()),
            "--max-attempts",
            "3",
            "--backoff",
            "200ms",
            "--batch-size",
            &BATCH.to_string(),
            "--concurrency",
            &PIPELINES.to_string(),
            "--poll-interval",
            "100ms",
        ],
    )
    .stdout(Stdio::null())
    .stderr(log.reopen().unwrap())
    .spawn()
    .map(Running)
    .unwrap();
    let relay_log = || std::fs::read_to_string(log.path()).unwrap_or_default();

    // A slow link first (every chunk delayed), so that the cut finds the
    // relay mid-flow, a batch on the wire, rather than idle.
    proxy.set_delay(LINK_DELAY);
    enqueue(&t, BEFORE).await;
    let last_before = t.count("SELECT max(id) FROM {schema}.all_messages").await;
    let flowing = wait_sent(&t, 1, Duration::from_millis(10)).await;
    assert!(flowing >= 1, "{name}: nothing flows\n{}", relay_log());

    // The outage: every connection cut, new ones refused, producers still
    // committing.
    let unsent_at_cut = BEFORE - count(&t, "sent").await;
    let down = Instant::now();
    proxy.refuse(true);
    proxy.cut_all();
    proxy.set_delay(Duration::ZERO);
    for chunk in 0..CHUNKS {
        tokio::time::sleep_until((down + OUTAGE * chunk as u32 / CHUNKS as u32).into()).await;
        enqueue(&t, DURING / CHUNKS).await;
    }
    tokio::time::sleep_until((down + OUTAGE).into()).await;
    let sent_down = t
        .count(&format!(
            "SELECT count(*) FROM {{schema}}.all_messages WHERE status = 'sent' AND id > {last_before}"
        ))
        .await;
    let dead_down = count(&t, "dead").await;
    let outage = down.elapsed();
    proxy.refuse(false);
    let up = Instant::now();
    assert_eq!(
        sent_down, 0,
        "{name}: nothing committed during the outage can have reached the broker"
    );
    assert_eq!(
        dead_down,
        0,
        "{name}: dead during the outage\n{}",
        relay_log()
    );

    let sent = wait_sent(&t, TOTAL, Duration::from_millis(100)).await;
    let recovered = up.elapsed();
    assert!(
        relay.0.try_wait().unwrap().is_none(),
        "{name}: the relay must outlive a broker outage\n{}",
        relay_log()
    );
    let status = terminate(&mut relay);
    let dead = count(&t, "dead").await;
    // Not asserted: a batch that fails just before the proxy reopens may
    // meet a health check just after, which rightly counts the attempt.
    let retried = t
        .count("SELECT count(*) FROM {schema}.all_messages WHERE attempts > 1")
        .await;
    let copies = case.read_back(reader).await;
    let got: BTreeSet<String> = copies.iter().cloned().collect();
    let duplicates = copies.len() - got.len();
    let log_text = relay_log();
    let breaker_opened = log_text.matches("breaker open").count();
    eprintln!(
        "{name} outage: outage={:.1}s sent={sent}/{TOTAL} dead={dead} duplicates={duplicates} \
         retried={retried} unsent_at_cut={unsent_at_cut} breaker_opened={breaker_opened} \
         recovered_in={:.1}s",
        outage.as_secs_f64(),
        recovered.as_secs_f64()
    );
    assert_eq!(
        dead, 0,
        "{name}: an outage must not dead-letter\n{log_text}"
    );
    assert_eq!(
        sent, TOTAL,
        "{name}: every committed row ends sent\n{log_text}"
    );
    assert_eq!(
        got,
        event_ids(&t).await,
        "{name}: the broker holds every event_id (and no other)"
    );
    assert!(
        duplicates <= (BATCH * PIPELINES) as usize,
        "{name}: duplicates bounded by the claims in flight at the cut"
    );
    assert!(
        breaker_opened >= 1,
        "{name}: the health check must see the outage and open the breaker\n{log_text}"
    );
    assert!(status.success(), "{name}: {status:?}\n{log_text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_dead_letters_nothing() {
    let _solo = common::solo().await;
    broker_outage(Broker::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_outage_dead_letters_nothing() {
    let _solo = common::solo().await;
    broker_outage(Broker::Amqp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_outage_dead_letters_nothing() {
    let _solo = common::solo().await;
    broker_outage(Broker::Nats).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mosquitto_outage_dead_letters_nothing() {
    let _solo = common::solo().await;
    broker_outage(Broker::Mqtt).await;
}
