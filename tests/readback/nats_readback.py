"""Prints every message of a JetStream stream as one JSON object per line
(`{"subject": ..., "headers": {...}, "data": "..."}`), read with nats-py,
oldest first.

    nats_readback.py URL STREAM
"""

import asyncio
import json
import sys

import nats


async def main() -> None:
    url, stream = sys.argv[1], sys.argv[2]
    nc = await nats.connect(url)
    js = nc.jetstream()
    info = await js.stream_info(stream)
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await js.get_msg(stream, seq)
        print(json.dumps({
            "subject": msg.subject,
            "headers": dict(msg.headers or {}),
            "data": msg.data.decode(),
        }))
    await nc.close()


if __name__ == "__main__":
    asyncio.run(main())
