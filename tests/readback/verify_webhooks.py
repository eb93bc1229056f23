"""Verifies webhook signatures independently of the relay's own code.

Reads a JSON array of received requests ({"id", "timestamp", "signature",
"body"}) from the file named by --requests. With a `whsec_` secret it uses
the `standardwebhooks` package (the specification's reference library);
with a plain secret it recomputes the HMAC with Python's hmac module, the
key being the secret's UTF-8 bytes. Prints `verified=N` and exits 1 on the
first mismatch."""

import argparse
import base64
import hashlib
import hmac
import json
import sys

from standardwebhooks.webhooks import Webhook


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--secret", required=True)
    p.add_argument("--requests", required=True)
    a = p.parse_args()
    with open(a.requests) as f:
        requests = json.load(f)

    for r in requests:
        body = r["body"]
        if a.secret.startswith("whsec_"):
            headers = {
                "webhook-id": r["id"],
                "webhook-timestamp": str(r["timestamp"]),
                "webhook-signature": r["signature"],
            }
            try:
                Webhook(a.secret).verify(body, headers)
            except Exception as e:  # the library raises its own error types
                print(f"signature of {r['id']} rejected: {e}", file=sys.stderr)
                sys.exit(1)
        else:
            signed = f"{r['id']}.{r['timestamp']}.{body}".encode()
            tag = hmac.new(a.secret.encode(), signed, hashlib.sha256).digest()
            want = "v1," + base64.b64encode(tag).decode()
            if not any(hmac.compare_digest(want, s) for s in r["signature"].split(" ")):
                print(f"signature of {r['id']} does not match", file=sys.stderr)
                sys.exit(1)
    print(f"verified={len(requests)}")


if __name__ == "__main__":
    main()
