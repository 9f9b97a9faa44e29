"""One redis-py client of the redis peers comparison (bench/src/bin/redis_peers.rs,
which runs this file's text with the Python of bench/redis-setup): it takes
and gives back a redis-py Lock in a loop for a set time, then says how often.

    python bench/redis_py_lock.py (--port PORT | --socket PATH) --name NAME --seconds S [--ttl S]

It connects, makes r.lock(NAME, timeout=TTL), takes and gives back the lock
once (so that the connection is made and the release script loaded before
the clock runs, as the Rust clients' first pair does), prints "ready", waits
for a line on its standard input, and loops for S seconds:
acquire(blocking=False), then release() when it was taken. A try that
finds the lock taken is tried again at once (a blocking acquire would sleep
0.1 s between tries). Last it prints "tally PAIRS FAILED_TRIES CPU_SECONDS
SECONDS", the CPU being this process's own during the loop.
"""

import argparse
import sys
import time

import redis


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    server = parser.add_mutually_exclusive_group(required=True)
    server.add_argument("--port", type=int, help="the server's port on 127.0.0.1")
    server.add_argument("--socket", help="the server's unix socket")
    parser.add_argument("--name", required=True, help="the lock's key")
    parser.add_argument("--seconds", type=float, required=True, help="how long to loop")
    parser.add_argument("--ttl", type=float, default=30.0, help="the lock's timeout, in seconds")
    args = parser.parse_args()

    if args.socket:
        client = redis.Redis(unix_socket_path=args.socket)
    else:
        client = redis.Redis(host="127.0.0.1", port=args.port)
    lock = client.lock(args.name, timeout=args.ttl)
    if lock.acquire(blocking=True, blocking_timeout=30):
        lock.release()
    print("ready", flush=True)
    sys.stdin.readline()

    pairs = failed = 0
    cpu, start = time.process_time(), time.monotonic()
    end = start + args.seconds
    while time.monotonic() < end:
        if lock.acquire(blocking=False):
            lock.release()
            pairs += 1
        else:
            failed += 1
    elapsed = time.monotonic() - start
    print(f"tally {pairs} {failed} {time.process_time() - cpu:.6f} {elapsed:.6f}", flush=True)


if __name__ == "__main__":
    main()
