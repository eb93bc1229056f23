"""Prints every record of a Kafka topic as one JSON object per line
(`{"partition", "offset", "key", "headers": {...}, "value"}`), read with
confluent-kafka (librdkafka) from offset 0 of each partition up to the
high watermark the broker reports when it starts. Exits non-zero, saying
how far it got, if nothing arrives for 15 s before that.

    kafka_readback.py BOOTSTRAP TOPIC PARTITIONS
"""

import json
import sys

from confluent_kafka import Consumer, TopicPartition


def main() -> None:
    bootstrap, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"readback-{topic}",
                  "enable.auto.commit": False})
    high = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1]
            for p in range(partitions)}
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    upto = {p: 0 for p in range(partitions)}
    while any(upto[p] < high[p] for p in high):
        m = c.poll(15)
        if m is None:
            sys.exit(f"nothing arrived for 15 s: read up to {upto}, high watermarks {high}")
        if m.error():
            print(m.error(), file=sys.stderr)
            continue
        upto[m.partition()] = m.offset() + 1
        print(json.dumps({
            "partition": m.partition(),
            "offset": m.offset(),
            "key": m.key().decode() if m.key() is not None else None,
            "headers": {k: v.decode() for k, v in (m.headers() or [])},
            "value": json.loads(m.value()),
        }))
    c.close()


if __name__ == "__main__":
    main()
