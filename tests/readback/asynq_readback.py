"""Prints the pending tasks of an asynq queue as one JSON object per line
(`{"id": ..., "state": ..., "msg_bytes": N}`), read with redis-py from the
keys asynq's server reads, in the order its workers take them.

    asynq_readback.py URL QUEUE
"""

import json
import sys

import redis


def main() -> None:
    url, queue = sys.argv[1], sys.argv[2]
    r = redis.Redis.from_url(url)
    if queue.encode() not in r.smembers("asynq:queues"):
        sys.exit(f"queue {queue} is not registered in asynq:queues")
    # Workers RPOPLPUSH from the tail: oldest first.
    for task_id in reversed(r.lrange(f"asynq:{{{queue}}}:pending", 0, -1)):
        task_id = task_id.decode()
        task = r.hgetall(f"asynq:{{{queue}}}:t:{task_id}")
        print(json.dumps({
            "id": task_id,
            "state": task[b"state"].decode(),
            "msg_bytes": len(task[b"msg"]),
        }))


if __name__ == "__main__":
    main()
