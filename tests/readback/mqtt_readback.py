"""Reads messages back from an MQTT broker with its own client (paho-mqtt),
in a second process: subscribes at QoS 1, prints READY once the broker has
granted the subscription, then prints one JSON line per message until
--count messages have arrived (with --distinct: --count distinct event_ids,
duplicates printed too). Exits 2 on timeout."""

import argparse
import json
import sys
import threading

import paho.mqtt.client as mqtt


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=1883)
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--distinct", action="store_true")
    a = p.parse_args()

    done = threading.Event()
    got = [0]
    seen = set()

    def on_connect(client, userdata, flags, reason_code, properties):
        client.subscribe(a.topic, qos=1)

    def on_subscribe(client, userdata, mid, reason_codes, properties):
        print("READY", flush=True)

    def on_message(client, userdata, msg):
        body = json.loads(msg.payload)
        print(json.dumps({
            "topic": msg.topic,
            "qos": msg.qos,
            "body": body,
        }), flush=True)
        got[0] += 1
        seen.add(body.get("event_id") if isinstance(body, dict) else None)
        if (len(seen) if a.distinct else got[0]) == a.count:
            done.set()

    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv311)
    c.on_connect = on_connect
    c.on_subscribe = on_subscribe
    c.on_message = on_message
    c.connect(a.host, a.port)
    c.loop_start()
    ok = done.wait(a.timeout)
    c.disconnect()
    c.loop_stop()
    if not ok:
        print(f"timeout after {got[0]} of {a.count} messages", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
