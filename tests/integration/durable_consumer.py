"""A durable subscriber as an application should write one, run as its own process by the tests.

    python durable_consumer.py BROKER PATTERN OUT

Each event goes to OUT as one JSON line together with the checkpoint token after it, in one write
followed by fsync, so the application's state (its lines) and its token can never disagree. On start
it resumes from the token of the last complete line (a torn last line, from a kill -9 in the middle
of a write, is cut off), or subscribes durably from now and records that first token. It prints
"ready" once subscribed, and exits 3 when its broker goes away (the test starts it elsewhere).
"""

import json
import os
import sys

from tidings import sync
from tidings.core.errors import TidingsError


def last_token(path):
    if not os.path.exists(path):
        return None
    with open(path, "rb+") as f:
        data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) != len(data):
            f.truncate(len(complete))
    lines = complete.splitlines()
    return json.loads(lines[-1])["token"] if lines else None


def main(address, pattern, out):
    token = last_token(out)
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        with sync.connect(address, service="durable-test", follow_advice=False, request_timeout=None) as client:
            sub = client.subscribe(pattern, token=token) if token else client.subscribe(pattern, durable=True)
            if token is None:
                os.write(fd, (json.dumps({"token": sub.token}) + "\n").encode())
                os.fsync(fd)
            print("ready", flush=True)
            while True:
                event = sub.get()
                if event is None:
                    return 3
                line = {"pubend": event.pubend, "tick": event.tick, "payload": event.payload.decode(),
                        "token": sub.token}
                os.write(fd, (json.dumps(line) + "\n").encode())
                os.fsync(fd)
    except TidingsError as exc:
        print(f"broker gone: {exc}", file=sys.stderr, flush=True)
        return 3


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
