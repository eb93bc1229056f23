"""Prints every entry of a Redis stream as one JSON object per line
(`{"id": ..., "fields": {...}}`), read with redis-py, oldest first.

    redis_readback.py URL STREAM
"""

import json
import sys

import redis


def main() -> None:
    url, stream = sys.argv[1], sys.argv[2]
    r = redis.Redis.from_url(url, decode_responses=True)
    for entry_id, fields in r.xrange(stream, "-", "+"):
        print(json.dumps({"id": entry_id, "fields": fields}))


if __name__ == "__main__":
    main()
