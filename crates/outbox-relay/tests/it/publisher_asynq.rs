//! The asynq publisher against the machine's Redis: the keys must sit
//! exactly where asynq's own server looks for them.
#![cfg(feature = "publisher-asynq")]

use crate::conformance;

use conformance::{closed_port, unique, Harness, Received, Scope, Target};
use outbox_relay::publishers::asynq::{
    pending_key, task_id, task_key, AsynqPublisher, TaskMessage, ALL_QUEUES_KEY,
};
use outbox_relay::{Envelope, Publisher};
use outbox_testkit::litter::Litter;
use redis::AsyncCommands;

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

fn asynq_url(query: &str) -> String {
    format!(
        "{}?{query}",
        redis_url().replacen("redis://", "asynq://", 1)
    )
}

async fn client() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("Redis on REDIS_URL (scripts/services.sh starts it)")
}

/// The tasks of `queue` in the order asynq's workers take them (they
/// `RPOPLPUSH` from the pending list's tail).
async fn pending_tasks(queue: &str) -> Vec<TaskMessage> {
    let mut c = client().await;
    let mut ids: Vec<String> = c.lrange(pending_key(queue), 0, -1).await.unwrap();
    ids.reverse();
    let mut tasks = Vec::new();
    for id in ids {
        let msg: Vec<u8> = c.hget(task_key(queue, &id), "msg").await.unwrap();
        tasks.push(TaskMessage::decode(&msg).expect("msg is a TaskMessage"));
    }
    tasks
}

/// Each queue it hands out is removed with it.
#[derive(Default)]
struct AsynqHarness {
    litter: Litter,
}

impl Harness for AsynqHarness {
    type P = AsynqPublisher;
    const DEDUPES: bool = true;

    /// One queue per target; the topic names the task type.
    async fn target(&self) -> Target<AsynqPublisher> {
        let queue = unique("outbox_test");
        self.litter.asynq_queue(&redis_url(), &queue);
        Target {
            publisher: AsynqPublisher::from_url(&asynq_url(&format!("queue={queue}"))).unwrap(),
            topic: unique("email:welcome"),
        }
    }

    async fn read_back(&self, t: &Target<AsynqPublisher>, topic: &str) -> Vec<Received> {
        pending_tasks(&t.publisher.config().queue)
            .await
            .into_iter()
            .filter(|task| task.r#type == topic)
            .map(|task| {
                let e = Envelope::from_json(std::str::from_utf8(&task.payload).unwrap())
                    .expect("payload is the envelope");
                Received {
                    event_id: e.event_id,
                    payload: e.payload.to_value().unwrap(),
                    envelope: Some(e),
                }
            })
            .collect()
    }

    async fn unreachable(&self) -> AsynqPublisher {
        AsynqPublisher::from_url(&format!("asynq://127.0.0.1:{}", closed_port())).unwrap()
    }

    /// asynq has one pending list per queue: spoil it and the whole queue
    /// refuses (WRONGTYPE inside the script).
    async fn refused_topic(&self, t: &Target<AsynqPublisher>) -> (String, Scope) {
        let _: () = client()
            .await
            .set(pending_key(&t.publisher.config().queue), "x")
            .await
            .unwrap();
        (unique("refused"), Scope::Destination)
    }
}

conformance_suite!(AsynqHarness::default());

#[tokio::test]
async fn writes_the_layout_asynq_reads() {
    let h = AsynqHarness::default();
    let t = h.target().await;
    let queue = t.publisher.config().queue.clone();
    let batch: Vec<_> = (0..3).map(|n| conformance::message(&t.topic, n)).collect();
    assert!(t.publisher.publish(&batch).await.iter().all(Result::is_ok));

    let mut c = client().await;
    let queues: Vec<String> = c.smembers(ALL_QUEUES_KEY).await.unwrap();
    assert!(
        queues.contains(&queue),
        "queue registered in {ALL_QUEUES_KEY}"
    );
    let tasks = pending_tasks(&queue).await;
    assert_eq!(tasks.len(), batch.len());
    for (task, m) in tasks.iter().zip(&batch) {
        assert_eq!(task.id, task_id(m.id));
        assert_eq!(task.id, format!("outbox:{}", m.id));
        assert_eq!(task.r#type, m.topic);
        assert_eq!(task.queue, queue);
        assert_eq!(task.retry, 25, "asynq's default MaxRetry");
        assert_eq!(task.timeout, 1800, "asynq's default timeout");
        assert_eq!(
            task.headers.get("X-Tenant").map(String::as_str),
            Some("acme")
        );
        let key = task_key(&queue, &task.id);
        let state: String = c.hget(&key, "state").await.unwrap();
        assert_eq!(state, "pending");
        let since: i64 = c.hget(&key, "pending_since").await.unwrap();
        assert!(since > 0, "pending_since in Unix nanoseconds");
    }
}

#[tokio::test]
async fn task_type_can_be_the_event_type() {
    let queue = unique("outbox_test");
    let litter = Litter::default();
    litter.asynq_queue(&redis_url(), &queue);
    let url = asynq_url(&format!("queue={queue}&task_type=event_type"));
    let p = AsynqPublisher::from_url(&url).unwrap();
    let m = conformance::message("ignored", 1);
    assert!(p.publish(std::slice::from_ref(&m)).await[0].is_ok());
    let tasks = pending_tasks(&queue).await;
    assert_eq!(tasks[0].r#type, m.event_type);
}

#[tokio::test]
async fn an_existing_task_id_counts_as_delivered_once() {
    let h = AsynqHarness::default();
    let t = h.target().await;
    let queue = t.publisher.config().queue.clone();
    let m = conformance::message(&t.topic, 1);
    for _ in 0..3 {
        assert!(t.publisher.publish(std::slice::from_ref(&m)).await[0].is_ok());
    }
    let len: usize = client().await.llen(pending_key(&queue)).await.unwrap();
    assert_eq!(len, 1, "the pending list holds the task once");
}

/// A task over max_message_size fails alone; the others are enqueued and
/// the connection carries the next batch.
#[tokio::test]
async fn oversized_task_fails_alone() {
    let h = AsynqHarness::default();
    let queue = unique("outbox_test");
    h.litter.asynq_queue(&redis_url(), &queue);
    let t = Target {
        publisher: AsynqPublisher::from_url(&asynq_url(&format!(
            "queue={queue}&max_message_size=20000"
        )))
        .unwrap(),
        topic: unique("email:welcome"),
    };
    let mut big = conformance::message(&t.topic, 99);
    big.payload = serde_json::json!({ "blob": "x".repeat(30_000) }).into();
    conformance::bad_message_fails_alone(&h, &t, big, "max_message_size is 20000").await;
}
