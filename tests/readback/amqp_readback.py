"""Reads messages back from RabbitMQ with its own client (pika), in a second
process: declares the exchange (topic, durable) and an exclusive queue bound
to it, prints READY, then prints one JSON line per message received until
--count messages have arrived (with --distinct: --count distinct message_ids,
duplicates printed too). Exits 2 on timeout."""

import argparse
import json
import sys
import time

import pika


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/%2f")
    p.add_argument("--exchange", required=True)
    p.add_argument("--binding", default="#")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--delete-exchange", action="store_true")
    p.add_argument("--distinct", action="store_true")
    a = p.parse_args()

    conn = pika.BlockingConnection(pika.URLParameters(a.url))
    ch = conn.channel()
    ch.exchange_declare(a.exchange, exchange_type="topic", durable=True)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, a.exchange, routing_key=a.binding)
    print("READY", flush=True)

    got = 0
    seen = set()
    deadline = time.monotonic() + a.timeout
    for method, props, body in ch.consume(q, inactivity_timeout=1):
        if method is None:
            if time.monotonic() > deadline:
                print(f"timeout after {got} of {a.count} messages", file=sys.stderr)
                sys.exit(2)
            continue
        print(json.dumps({
            "routing_key": method.routing_key,
            "exchange": method.exchange,
            "body": json.loads(body),
            "properties": {
                "message_id": props.message_id,
                "type": props.type,
                "timestamp": props.timestamp,
                "content_type": props.content_type,
                "delivery_mode": props.delivery_mode,
                "headers": {k: (v.decode() if isinstance(v, bytes) else v)
                            for k, v in (props.headers or {}).items()},
            },
        }), flush=True)
        ch.basic_ack(method.delivery_tag)
        got += 1
        seen.add(props.message_id)
        if (len(seen) if a.distinct else got) == a.count:
            break
    ch.cancel()
    if a.delete_exchange:
        ch.exchange_delete(a.exchange)
    conn.close()


if __name__ == "__main__":
    main()
