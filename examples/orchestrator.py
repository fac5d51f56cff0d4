#!/usr/bin/env python3
"""A minimal orchestrator driving `sandgate serve` over JSON lines.

    python3 examples/orchestrator.py [path/to/sandgate]

Creates a namespace-jail environment, runs two tool calls with intents (one that blows its
memory grant), prints each call's structured outcome, and destroys the environment.
Exits non-zero if anything is not as expected, so CI runs it as a test.
"""
import json
import subprocess
import sys

sandgate = sys.argv[1] if len(sys.argv) > 1 else "sandgate"
server = subprocess.Popen([sandgate, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True)
next_id = 0


def request(op, **fields):
    global next_id
    next_id += 1
    server.stdin.write(json.dumps({"id": next_id, "op": op, **fields}) + "\n")
    server.stdin.flush()
    reply = json.loads(server.stdout.readline())
    assert reply["id"] == next_id, reply
    if not reply["ok"]:
        raise RuntimeError(reply["error"])
    return reply


env = request("create", provider="namespaces")["env"]
try:
    ok = request("exec", env=env, argv=["sh", "-c", "echo built > out.txt; cat out.txt"],
                 intent="compile")["outcome"]
    print(ok["call_id"], ok["intent"]["name"], ok["termination"], repr(ok["stdout"]))
    assert ok["termination"] == "exited" and ok["stdout"] == "built\n"

    # 'search' grants 256MiB: this call allocates far more and is stopped, attributed and
    # explained, not returned as a bare "exit 137".
    hog = request("exec", env=env,
                  argv=["sh", "-c", "x=$(head -c 400000000 /dev/zero | tr '\\0' a); echo ${#x}"],
                  intent="search")["outcome"]
    print(hog["call_id"], hog["termination"], "-", hog["reason"])
    print("  advice:", hog["retry"], "-", hog["advice"])
    assert hog["termination"] == "memory_limit", hog

    # The run survived its call's OOM: the workspace is still there.
    again = request("exec", env=env, argv=["cat", "out.txt"])["outcome"]
    assert again["stdout"] == "built\n", again
    print(again["call_id"], "inferred intent:", again["intent"]["name"],
          "(" + again["intent"]["because"] + ")")
finally:
    request("destroy", env=env)
    server.stdin.close()
if server.wait() != 0:
    sys.exit("sandgate serve exited with status %d" % server.returncode)
