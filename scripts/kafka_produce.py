"""The Kafka broker alone, for scripts/bench-publishers.sh: produces N records
shaped as the relay's (key, JSON body, the 20 envelope headers the relay
sends) with confluent-kafka (librdkafka, as the relay: idempotent, acks=all,
murmur2) and no database, and prints messages/s. What the broker takes from
a plain producer is the ceiling of the relay's figure against it.

    kafka_produce.py BOOTSTRAP TOPIC N
"""

import json
import sys
import time
import uuid

from confluent_kafka import Producer

bootstrap, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
producer = Producer(
    {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "partitioner": "murmur2_random",
    }
)
failed = []


def report(err, _msg):
    if err is not None:
        failed.append(err)


def headers(i):
    event_id = str(uuid.uuid4()).encode()
    at = b"2026-12-04T03:13:49.181451+00:00"
    key = str(i).encode()
    return [
        ("event_id", event_id), ("message_id", key), ("event_type", b"order.created"),
        ("event_version", b"1"), ("aggregate_type", b"order"), ("aggregate_id", key),
        ("topic", topic.encode()), ("created_at", at), ("headers", b"{}"),
        ("ce_specversion", b"1.0"), ("ce_id", event_id), ("ce_source", b"/outbox"),
        ("ce_type", b"order.created"), ("ce_subject", key), ("ce_time", at),
        ("ce_eventversion", b"1"), ("ce_aggregatetype", b"order"), ("ce_outboxid", key),
        ("ce_topic", topic.encode()), ("content-type", b"application/json"),
    ]


start = time.monotonic()
for i in range(1, n + 1):
    body = json.dumps({"order_id": i, "total": 1999}, separators=(",", ":")).encode()
    while True:
        try:
            producer.produce(topic, key=str(i).encode(), value=body, headers=headers(i), on_delivery=report)
            break
        except BufferError:
            producer.poll(0.01)
    producer.poll(0)
left = producer.flush(120)
elapsed = time.monotonic() - start
if failed or left:
    sys.exit(f"kafka_produce.py: {len(failed)} failed, {left} undelivered: {failed[:3]}")
print(f"{n / elapsed:.0f}")
