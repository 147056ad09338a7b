"""A lock holder process for test_lock_under_faults.py: acquires the lock through the client library, writes
to the fenced resource with its token, releases, and again, until killed. One JSON line per acquisition on
stdout. Run as `python lock_holder.py DRIVER NAME RESOURCE_URL TTL_S ADDRESS...`, DRIVER being `blocking` or
`asyncio`: the same loop runs on either client."""

from __future__ import annotations

import json
import sys
import time
import urllib.request

from client_drivers import Driver

from coordinated.client import AsyncLock, CoordinatedError, Lock, LockTimeout, SessionNotFound

LOCK = "locks/resource"


def write(resource: str, holder: str, token: int, seq: int) -> bool:
    body = json.dumps({"holder": holder, "token": token, "seq": seq}).encode()
    request = urllib.request.Request(resource, data=body, method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        return bool(json.loads(response.read())["accepted"])


def main() -> None:
    driver = Driver(sys.argv[1])
    name, resource, ttl = sys.argv[2], sys.argv[3], float(sys.argv[4])
    # Not following the master: each holder goes through its own first node (followers forward).
    client = driver.client(sys.argv[5:], retry_timeout=10, request_timeout=5, follow_master=False)
    lock_class = driver.pick(Lock, AsyncLock)
    while True:
        try:
            session = driver.session(client, ttl=ttl)
            while not session.expired.is_set():
                lock = lock_class(client, LOCK, session, data=name)
                try:
                    token = driver.run(lock.acquire(timeout=10))
                except LockTimeout:
                    continue
                print(json.dumps({"holder": name, "token": token, "at": time.time()}), flush=True)
                for seq in range(10):
                    if not write(resource, name, token, seq):
                        break  # fenced off: a later holder exists
                    driver.sleep(0.1)
                driver.run(lock.release())
            driver.run(session.end())
        except (SessionNotFound, CoordinatedError, OSError):
            time.sleep(0.2)


if __name__ == "__main__":
    main()
