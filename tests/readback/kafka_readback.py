"""Prints every record of a Kafka topic as one JSON object per line
(`{"partition", "offset", "key", "headers": {...}, "value"}`), read with
confluent-kafka (librdkafka) from offset 0 of each partition, until
EXPECTED records are read or nothing arrives for 10 s.

    kafka_readback.py BOOTSTRAP TOPIC PARTITIONS EXPECTED
"""

import json
import sys

from confluent_kafka import Consumer, TopicPartition


def main() -> None:
    bootstrap, topic, partitions, expected = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"readback-{topic}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    while seen < expected:
        m = c.poll(10)
        if m is None:
            break
        if m.error():
            print(m.error(), file=sys.stderr)
            continue
        seen += 1
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
