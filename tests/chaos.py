#!/usr/bin/env python3
"""Killed at the worst moment: kill -9 of sandgate, of a run's supervisor or of a call, then
`sandgate gc`, and a look from the host that nothing is left.

    tests/chaos.py --sandgate build/dev/cli/sandgate [--iterations N] [--seed S]
    tests/chaos.py --sandgate ... --seed S --iteration I      (replay one iteration)
    tests/chaos.py --sandgate ... --command exec --kill-at NAME#N
                                        (one kill at one step: a regression case; fails if
                                         the step is not reached, which would prove nothing)

Each iteration runs one sandgate command (exec, serve, probe, replay, record) against the
namespaces provider and kills something in it:

  point       sandgate stops itself with SIGKILL at a named step (core/state.h, kill points:
              every change of a run record, and every resource as it is released). The step
              is drawn from the list a first, unkilled run of the same command passed.
              Needs a build with kill points (SANDGATE_KILL_POINTS: the Debug/dev build).
  delay       kill -9 of sandgate after a random delay within that first run's duration
  supervisor  kill -9 of a run's supervisor (pid and start time from the run record), then
              sandgate left to finish by itself (it must, within a bound)
  call        kill -9 of a call's processes (from the call's cgroup), then the same

Then `sandgate gc` (timed), and from the host: no cgroup of the test's root in any hierarchy
(every v1 controller and the unified mount), no mount under the test's directories, no network
namespace file, no new network link, no process that carries the iteration's token, that a
record named or that lived in a run's pid namespace, no run record, no workspace, and nothing
in the commands' TMPDIR. Every iteration uses the test's own --state-dir, --work-dir and
--cgroup-root (sandgate-chaos-<pid>), so nothing touches another run. Processes are killed by
recorded pid (and start time) only.

The seed and the kill of each iteration are printed; `--seed S --iteration I` runs that one
again (the point is drawn from the first run's list, so a replay kills at the same step as
long as the command passes the same steps). Exit status: 0 nothing left behind; 1 something
was (each leftover is named, then removed); 77 skipped (needs root; a failure with
SANDGATE_MUST_WORK=1).
"""
import argparse
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

COMMANDS = ["exec", "serve", "probe", "replay", "record"]
MODES = [("point", 50), ("delay", 20), ("supervisor", 15), ("call", 15)]
COMMAND_TIMEOUT = 180.0  # a command left to finish by itself must, well within this
GC_TIMEOUT = 180.0


OWN_PIDNS = os.readlink("/proc/self/ns/pid")


def log(msg):
    print(msg, flush=True)


# ---- looking at the host -------------------------------------------------------------------

def mountinfo():
    """(mount point, fstype) of every mount in this mount namespace."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            mp = fields[4].encode().decode("unicode_escape")
            out.append((mp, right.split()[0]))
    return out


# The host-wide lock directory of host id ranges (core/host_paths.h): sandgate's runs take
# their ranges there whatever their state directory; a lock names the state directory whose
# record owns it.
ID_RANGE_DIR = "/run/sandgate/id-ranges"


def id_range_locks_of(state_dir):
    held = []
    try:
        names = os.listdir(ID_RANGE_DIR)
    except FileNotFoundError:
        return held
    for n in names:
        path = os.path.join(ID_RANGE_DIR, n)
        try:
            with open(path) as f:
                lock = json.load(f)
        except (OSError, ValueError):
            continue
        # A lock that names no state directory (older, or not sandgate's) is nobody's here.
        owner = lock.get("state_dir") if isinstance(lock, dict) else None
        if owner and os.path.abspath(owner) == os.path.abspath(state_dir):
            held.append(path)
    return held


def cgroup_mounts():
    return sorted({mp for mp, fs in mountinfo() if fs in ("cgroup", "cgroup2")})


def start_time(pid):
    """/proc/<pid>/stat field 22, and whether it is a zombie; None when gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rfind(")") + 2:].split()
    return int(rest[19]), rest[0] == "Z"


def alive(pid, start):
    st = start_time(pid)
    return st is not None and st[0] == start and not st[1]


def all_pids():
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def pidns(pid):
    try:
        return os.readlink("/proc/%d/ns/pid" % pid)
    except OSError:
        return None


def ns_pid(pid):
    """The pid in its own pid namespace (the last NSpid field); None when gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return None


def namespace_init(ns):
    """(pid, start) of the init of pid namespace `ns` (a /proc/<pid>/ns/pid link), or None."""
    for pid in all_pids():
        if pidns(pid) == ns and ns_pid(pid) == 1:
            st = start_time(pid)
            if st:
                return (pid, st[0])
    return None


def live_run_namespaces(seen):
    """The runs' pid namespaces seen that still exist. A namespace's inode number is reused once
    it is gone (its init died, and the kernel killed the rest), so a process found in a
    namespace of that number whose init is not the one seen is another run's: a test beside this
    one (seen at ctest -j2: another test's supervisor killed as a leftover of ours)."""
    live = set()
    for ns in seen["pidns"] - {OWN_PIDNS}:
        init = seen.get("inits", {}).get(ns)
        if init is None or (alive(*init) and pidns(init[0]) == ns):
            live.add(ns)
    return live


def host_links():
    return set(os.listdir("/sys/class/net"))


def cgroup_procs_below(dirpath, name_prefix):
    """pids in every cgroup below dirpath whose last component starts with name_prefix."""
    pids = []
    for root, dirs, _ in os.walk(dirpath):
        for d in dirs:
            if d.startswith(name_prefix):
                try:
                    with open(os.path.join(root, d, "cgroup.procs")) as f:
                        pids += [int(x) for x in f.read().split()]
                except OSError:
                    pass
    return pids


# ---- the test ------------------------------------------------------------------------------

class Chaos:
    def __init__(self, args):
        self.args = args
        self.sandgate = os.path.abspath(args.sandgate)
        self.source = args.source
        self.tmp = tempfile.mkdtemp(prefix="sgchaos-", dir="/var/tmp")
        os.chmod(self.tmp, 0o711)
        self.state = self.tmp + "/state"
        self.work = self.tmp + "/work"
        self.tmpdir = self.tmp + "/tmp"
        self.files = self.tmp + "/files"
        for d in (self.state, self.work, self.tmpdir, self.files):
            os.makedirs(d)
        self.root = "sandgate-chaos-%d" % os.getpid()
        self.recipe = self.files + "/recipe"
        os.makedirs(self.recipe + "/src")
        with open(self.recipe + "/src/main.c", "w") as f:
            f.write("int main(void) { return 0; }\n")
        self.secret = self.files + "/secret"
        with open(self.secret, "w") as f:
            f.write("s3cret\n")
        os.chmod(self.secret, 0o600)
        self.baseline_links = host_links()
        self.dry = {}  # command -> (points, duration)
        self.figures = {"iterations": 0, "killed": 0, "missed": 0, "leftovers": 0, "hangs": 0,
                        "gc_errors": 0, "gc_s": [], "points_hit": set(), "points_known": set(),
                        "by_mode": {}, "by_command": {}}

    # The environment of every sandgate this test starts.
    def env(self, token, extra=None):
        e = dict(os.environ)
        for k in ("SANDGATE_KILL_AT", "SANDGATE_KILL_TRACE"):
            e.pop(k, None)
        e.update({"SANDGATE_STATE_DIR": self.state, "SANDGATE_WORK_DIR": self.work,
                  "SANDGATE_CGROUP_ROOT": self.root, "TMPDIR": self.tmpdir,
                  "CHAOS_TOKEN": token, "SANDGATE_BIN": self.sandgate})
        e.update(extra or {})
        return e

    def globals(self):
        return [self.sandgate, "--state-dir", self.state, "--work-dir", self.work,
                "--cgroup-root", self.root]

    # A command in the sandbox that carries the token as a whole argument ($0 of sh -c), with a
    # daemon of its own that also does (it must die with the run).
    @staticmethod
    def script(token, sleep="0.4"):
        return ["sh", "-c",
                "echo started > started; "
                "setsid sh -c 'while :; do sleep 1; done' \"$0\" </dev/null >/dev/null 2>&1 & "
                "cat /run/secrets/TOKEN >/dev/null 2>&1; sleep %s; echo done" % sleep, token]

    def start(self, command, token, extra_env):
        """Starts one scenario; returns (Popen, driver thread or None)."""
        env = self.env(token, extra_env)
        g = self.globals()
        devnull = subprocess.DEVNULL
        # A file, not a pipe nobody reads while the command runs (a full pipe would block it).
        self.stderr_path = self.files + "/stderr.log"
        err = open(self.stderr_path, "w")
        if command == "exec":
            argv = g + ["exec", "--secret", "TOKEN=" + self.secret, "--workspace", self.recipe,
                        "--provider", "namespaces", "--"] + self.script(token)
            return subprocess.Popen(argv, env=env, stdin=devnull, stdout=devnull,
                                    stderr=err), None
        if command == "serve":
            p = subprocess.Popen(g + ["serve"], env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=err, text=True)

            def drive():
                try:
                    def req(i, op, **fields):
                        p.stdin.write(json.dumps({"id": i, "op": op, **fields}) + "\n")
                        p.stdin.flush()
                        line = p.stdout.readline()
                        return json.loads(line) if line else None
                    r = req(1, "create", provider="namespaces", workspace=self.recipe,
                            secrets={"TOKEN": self.secret})
                    if r and r.get("ok"):
                        envid = r["env"]
                        req(2, "exec", env=envid, argv=self.script(token, "0.2"), intent="compile")
                        req(3, "exec", env=envid, argv=["sh", "-c", "sleep 0.2; ls", token])
                        req(4, "destroy", env=envid)
                    p.stdin.close()
                except (OSError, ValueError):
                    pass  # killed under us: that is the point
            t = threading.Thread(target=drive, daemon=True)
            t.start()
            return p, t
        if command == "probe":
            argv = g + ["probe", "--provider", "namespaces", "--only", "creds"]
            return subprocess.Popen(argv, env=env, stdin=devnull, stdout=devnull,
                                    stderr=err), None
        if command == "replay":
            argv = g + ["replay", "--policy", "default", "--time-scale", "4",
                        self.source + "/traces/burst.trace"]
            return subprocess.Popen(argv, env=env, stdin=devnull, stdout=devnull,
                                    stderr=err), None
        if command == "record":
            driver = self.files + "/record-driver.sh"
            if not os.path.exists(driver):
                with open(driver, "w") as f:
                    f.write('#!/bin/sh\n'
                            '"$SANDGATE_BIN" exec --socket "$SANDGATE_SOCKET" --intent compile -- '
                            'sh -c "setsid sh -c \'while :; do sleep 1; done\' \\"\\$0\\" '
                            '</dev/null >/dev/null 2>&1 & sleep 0.3; echo one" "$CHAOS_TOKEN"\n'
                            '"$SANDGATE_BIN" exec --socket "$SANDGATE_SOCKET" -- '
                            'sh -c "sleep 0.2; echo two" "$CHAOS_TOKEN"\n')
                os.chmod(driver, 0o755)
            argv = g + ["record", "--out", self.files + "/out.trace", "--interval", "20ms",
                        "--", driver]
            return subprocess.Popen(argv, env=env, stdin=devnull, stdout=devnull,
                                    stderr=err), None
        raise ValueError(command)

    # What a record names: (pid, start) of processes, and their pid namespaces.
    def watch(self, seen, stop):
        while not stop.is_set():
            self.note_recorded(seen)
            time.sleep(0.02)

    def recorded_processes(self, provider=None):
        """(pid, start) of the processes the run records name (of one provider's records)."""
        out = []
        runs = self.state + "/runs"
        try:
            names = os.listdir(runs)
        except OSError:
            return out
        for n in names:
            try:
                with open(os.path.join(runs, n)) as f:
                    j = json.load(f)
            except (OSError, ValueError):
                continue
            if provider and j.get("provider") != provider:
                continue
            for r in j.get("resources", []):
                if r.get("kind") == "process" and r.get("pid", 0) > 0:
                    out.append((r["pid"], r.get("start_time", 0)))
        return out

    def note_recorded(self, seen):
        for pid, start in self.recorded_processes():
            if (pid, start) not in seen["procs"] and alive(pid, start):
                seen["procs"].add((pid, start))
                ns = pidns(pid)
                # Only a run's own pid namespace: a recorded process on the host (the probes'
                # canary sentinel, record's driver) is in this test's, which holds everything.
                if ns and ns != OWN_PIDNS and ns not in seen["pidns"]:
                    seen["pidns"].add(ns)
                    seen.setdefault("inits", {})[ns] = namespace_init(ns)

    def call_pids(self):
        pids = []
        for mp in cgroup_mounts():
            pids += cgroup_procs_below(os.path.join(mp, self.root), "call-")
        return sorted(set(pids))

    def wait(self, p, timeout):
        try:
            p.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def dry_run(self, command):
        """One unkilled run: the kill points it passes and how long it takes."""
        trace = self.files + "/dry-%s.trace" % command
        token = "sgchaos-dry-%d-%s" % (os.getpid(), command)
        t0 = time.monotonic()
        p, drv = self.start(command, token, {"SANDGATE_KILL_TRACE": trace})
        finished = self.wait(p, COMMAND_TIMEOUT)
        duration = time.monotonic() - t0
        if not finished:
            p.kill()  # our child: by its pid
            p.wait()
        with open(self.stderr_path) as f:
            err = f.read()
        if drv:
            drv.join(5)
        points = []
        if os.path.exists(trace):
            with open(trace) as f:
                points = [l.strip() for l in f if l.strip()]
        if p.returncode != 0 and command != "probe":  # probe: 1 is a verdict
            log("chaos: dry run of %s exited %s: %s" % (command, p.returncode,
                                                        (err or "")[-2000:]))
        self.gc()
        left = self.leftovers(token, {"procs": set(), "pidns": set()}, p.pid)
        if left:
            log("chaos: the UNKILLED run of %s left: %s" % (command, "; ".join(left)))
            self.figures["leftovers"] += len(left)
            self.clean(token, {"procs": set(), "pidns": set()})
        self.dry[command] = (points, duration)
        self.figures["points_known"].update(points)
        return points, duration

    def gc(self):
        t0 = time.monotonic()
        r = subprocess.run(self.globals() + ["gc"], env=self.env("gc"), capture_output=True,
                           text=True, timeout=GC_TIMEOUT)
        dt = time.monotonic() - t0
        self.figures["gc_s"].append(dt)
        if r.returncode != 0:
            self.figures["gc_errors"] += 1
            return dt, "gc exited %d: %s" % (r.returncode, (r.stdout + r.stderr).strip()[-1500:])
        return dt, None

    def leftovers(self, token, seen, sandgate_pid):
        """Everything left; a process must still be there after a grace period (one that the
        kernel is killing, as it does a pid namespace's others when its init dies, is on its
        way out, not left)."""
        found = self.look(token, seen, sandgate_pid)
        deadline = time.monotonic() + 3
        while any(f.startswith(("process", "recorded process")) for f in found) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
            found = self.look(token, seen, sandgate_pid)
        return found

    def look(self, token, seen, sandgate_pid):
        found = []
        for mp in cgroup_mounts():
            d = os.path.join(mp, self.root)
            if os.path.exists(d):
                found.append("cgroup " + d)
        for mp, fs in mountinfo():
            if mp.startswith(self.tmp):
                found.append("mount %s (%s)" % (mp, fs))
        # Directories that hold one entry per live run (records, lab namespaces, host id
        # range locks, egress address slots): the directory stays, an entry is a leftover.
        holders = ("runs", "netns", "id-ranges", "egress-slots")
        for sub in holders:
            d = os.path.join(self.state, sub)
            if os.path.isdir(d):
                for n in os.listdir(d):
                    found.append("state %s/%s" % (sub, n))
        for n in os.listdir(self.state) if os.path.isdir(self.state) else []:
            if n not in holders:
                found.append("state file " + n)
        found += ["id range lock " + p for p in id_range_locks_of(self.state)]
        for n in os.listdir(self.work) if os.path.isdir(self.work) else []:
            found.append("workspace " + os.path.join(self.work, n))
        for n in os.listdir(self.tmpdir):
            found.append("temporary " + os.path.join(self.tmpdir, n))
        new_links = host_links() - self.baseline_links
        if new_links:
            time.sleep(1)  # one that is on its way out
            for l in sorted(host_links() - self.baseline_links):
                found.append("network link " + l)
        tok = token.encode()
        runs_ns = live_run_namespaces(seen)
        for pid in all_pids():
            if pid == os.getpid():
                continue
            if tok in cmdline(pid):
                st = start_time(pid)
                if st and not st[1]:
                    found.append("process %d carrying the token: %s" % (
                        pid, b" ".join(cmdline(pid)).decode(errors="replace")[:200]))
            elif pidns(pid) in runs_ns:
                st = start_time(pid)
                if st and not st[1]:
                    found.append("process %d in a run's pid namespace: %s" % (
                        pid, b" ".join(cmdline(pid)).decode(errors="replace")[:200]))
        for pid, start in seen["procs"]:
            if alive(pid, start):
                found.append("recorded process %d" % pid)
        st = start_time(sandgate_pid)
        if st and not st[1]:
            found.append("sandgate %d itself" % sandgate_pid)
        return sorted(set(found))

    def clean(self, token, seen):
        """After a finding: removes what was left, so the next iteration starts clean."""
        tok = token.encode()
        runs_ns = live_run_namespaces(seen)  # never this test's own namespace (the host's)
        for pid in all_pids():
            if pid in (1, os.getpid(), os.getppid()):
                continue
            if tok in cmdline(pid) or (runs_ns and pidns(pid) in runs_ns):
                os.kill(pid, signal.SIGKILL)  # a pid found by its token or namespace just now
        for pid, start in seen["procs"]:
            if alive(pid, start):
                os.kill(pid, signal.SIGKILL)
        for mp, _ in sorted(mountinfo(), key=lambda m: -len(m[0])):
            if mp.startswith(self.tmp):
                subprocess.run(["umount", "-l", mp], capture_output=True)
        for mp in cgroup_mounts():
            d = os.path.join(mp, self.root)
            for root, dirs, _ in sorted(os.walk(d, topdown=False), key=lambda w: -w[0].count("/")):
                try:
                    with open(os.path.join(root, "cgroup.procs")) as f:
                        for p in f.read().split():
                            os.kill(int(p), signal.SIGKILL)  # a pid in our own cgroup root
                except OSError:
                    pass
                for _ in range(100):
                    try:
                        os.rmdir(root)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.02)
        for d in (self.state, self.work, self.tmpdir):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d, exist_ok=True)

    def iteration(self, i, fixed_point=None):
        rng = random.Random("%d:%d" % (self.args.seed, i))
        command = rng.choice(self.commands)
        mode = rng.choices([m for m, _ in MODES], weights=[w for _, w in MODES])[0]
        if fixed_point:
            mode, points, duration = "point", [fixed_point], 0
        else:
            points, duration = self.dry[command]
        if mode == "point" and not points:
            mode = "delay"  # a build without kill points
        token = "sgchaos-%d-%d-%d" % (os.getpid(), self.args.seed, i)
        extra, what = {}, ""
        trace = self.files + "/iter.trace"
        if os.path.exists(trace):
            os.unlink(trace)
        if mode == "point":
            point = rng.choice(points)
            extra = {"SANDGATE_KILL_AT": point, "SANDGATE_KILL_TRACE": trace}
            what = "kill sandgate at %s" % point
        else:
            delay = rng.uniform(0.0, duration)
            what = "kill %s after %.2f s" % ({"delay": "sandgate"}.get(mode, "the " + mode), delay)
        seen = {"procs": set(), "pidns": set()}
        stop = threading.Event()
        p, drv = self.start(command, token, extra)
        st = start_time(p.pid)
        seen["procs"].add((p.pid, st[0] if st else 0))
        watcher = threading.Thread(target=self.watch, args=(seen, stop), daemon=True)
        watcher.start()
        outcome = ""
        hit = False
        if mode == "point":
            if not self.wait(p, COMMAND_TIMEOUT):
                p.kill()
                p.wait()
                outcome = "HANG (killed after %.0f s)" % COMMAND_TIMEOUT
                self.figures["hangs"] += 1
            else:
                hit = p.returncode == -signal.SIGKILL
                outcome = "killed itself" if hit else "point not reached (exit %d)" % p.returncode
                if hit:
                    self.figures["points_hit"].add(point)
        else:
            if self.wait(p, delay):
                outcome = "finished before the kill (exit %d)" % p.returncode
            elif mode == "delay":
                p.kill()  # sandgate: our child, by its pid
                p.wait()
                hit = True
                outcome = "killed"
            else:
                # From the moment drawn on, the first moment such a process exists (within the
                # unkilled run's duration): a call is a small part of a command's life.
                targets = []
                deadline = time.monotonic() + duration
                while not targets and time.monotonic() < deadline and p.poll() is None:
                    if mode == "supervisor":
                        self.note_recorded(seen)
                        targets = [(pid, st) for pid, st in self.recorded_processes("namespaces")
                                   if pid != p.pid and alive(pid, st)]
                    else:
                        # One read per pid: a call may end between two.
                        targets = [(pid, st[0]) for pid, st in
                                   ((q, start_time(q)) for q in self.call_pids()) if st]
                    if not targets:
                        time.sleep(0.005)
                for pid, st in targets:
                    if alive(pid, st):  # still the process we named
                        os.kill(pid, signal.SIGKILL)
                        hit = True
                if hit:
                    outcome = "killed %d %s process(es)" % (len(targets), mode)
                else:
                    outcome = "no %s process at that moment" % mode
                if not self.wait(p, COMMAND_TIMEOUT):
                    p.kill()
                    p.wait()
                    outcome += "; sandgate HUNG afterwards (killed after %.0f s)" % COMMAND_TIMEOUT
                    self.figures["hangs"] += 1
                else:
                    outcome += "; sandgate exited %d" % p.returncode
        if drv:
            drv.join(10)
        stop.set()
        watcher.join()
        with open(self.stderr_path, errors="replace") as f:
            stderr = f.read()
        gc_s, gc_err = self.gc()
        left = self.leftovers(token, seen, p.pid)
        if gc_err:
            left.insert(0, gc_err)
        self.figures["iterations"] += 1
        self.figures["killed" if hit else "missed"] += 1
        bm = self.figures["by_mode"].setdefault(mode, [0, 0])
        bm[0 if hit else 1] += 1
        self.figures["by_command"][command] = self.figures["by_command"].get(command, 0) + 1
        log("chaos: iteration %d seed=%d: %s, %s: %s; gc %.2f s; leftovers: %s" % (
            i, self.args.seed, command, what, outcome, gc_s, "none" if not left else len(left)))
        if left:
            self.figures["leftovers"] += len(left)
            for l in left:
                log("  LEFT: " + l)
            if stderr:
                log("  sandgate's stderr (end): " + stderr[-1500:].replace("\n", "\n    "))
            if fixed_point:
                log("  replay: %s --sandgate %s --command %s --kill-at '%s'" % (
                    sys.argv[0], self.args.sandgate, command, fixed_point))
            else:
                log("  replay: %s --sandgate %s --seed %d --iteration %d" % (
                    sys.argv[0], self.args.sandgate, self.args.seed, i))
            self.clean(token, seen)
        return hit

    def run(self):
        self.commands = [c for c in self.args.commands.split(",") if c]
        t0 = time.monotonic()
        if self.args.kill_at:
            hit = self.iteration(0, self.args.kill_at)
            if not hit:
                log("chaos: %s was not reached: this case proves nothing" % self.args.kill_at)
                return 1
            return 0 if self.figures["leftovers"] == 0 and self.figures["gc_errors"] == 0 else 1
        for c in self.commands:
            points, duration = self.dry_run(c)
            log("chaos: %s passes %d kill point(s) unkilled, in %.1f s" % (c, len(points), duration))
        if not any(self.dry[c][0] for c in self.commands):
            log("chaos: this sandgate has no kill points (a release build?): random delays only")
        iters = [self.args.iteration] if self.args.iteration is not None else range(
            self.args.iterations)
        for i in iters:
            self.iteration(i)
        f = self.figures
        gcs = sorted(f["gc_s"])
        log("")
        log("chaos summary (seed %d, %.0f s)" % (self.args.seed, time.monotonic() - t0))
        log("  iterations          %d  (%s)" % (f["iterations"], ", ".join(
            "%s %d" % kv for kv in sorted(f["by_command"].items()))))
        log("  kills               %d done, %d not (the command finished first or had no "
            "such process)" % (f["killed"], f["missed"]))
        for m, (h, miss) in sorted(f["by_mode"].items()):
            log("    %-10s        %d killed, %d not" % (m, h, miss))
        log("  kill points         %d distinct hit of %d known" % (
            len(f["points_hit"]), len(f["points_known"])))
        log("  hangs               %d" % f["hangs"])
        log("  gc                  %d runs, p50 %.2f s, max %.2f s, %d failed" % (
            len(gcs), gcs[len(gcs) // 2] if gcs else 0, gcs[-1] if gcs else 0, f["gc_errors"]))
        log("  leftovers found     %d  (must be 0)" % f["leftovers"])
        return 0 if f["leftovers"] == 0 and f["hangs"] == 0 and f["gc_errors"] == 0 else 1

    def close(self):
        self.clean("sgchaos-close-%d" % os.getpid(), {"procs": set(), "pidns": set()})
        shutil.rmtree(self.tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sandgate", required=True)
    ap.add_argument("--source", default=os.environ.get(
        "SANDGATE_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    ap.add_argument("--iterations", type=int, default=int(os.environ.get("CHAOS_ITERATIONS", 20)))
    ap.add_argument("--seed", type=int, default=int(os.environ.get(
        "CHAOS_SEED", random.SystemRandom().randrange(1, 1 << 31))))
    ap.add_argument("--iteration", type=int, help="run only this iteration of --seed")
    ap.add_argument("--commands", default=",".join(COMMANDS))
    ap.add_argument("--command", choices=COMMANDS, help="with --kill-at: the command to kill")
    ap.add_argument("--kill-at", help="NAME#N: one kill at that step (needs --command)")
    args = ap.parse_args()
    if args.kill_at:
        if not args.command:
            ap.error("--kill-at needs --command")
        args.commands = args.command
    if os.geteuid() != 0:
        if os.environ.get("SANDGATE_MUST_WORK") == "1":
            log("chaos: SANDGATE_MUST_WORK=1 but this test cannot run: needs root")
            return 1
        log("chaos: SKIPPED: needs root (cgroups, mounts, namespaces)")
        return 77
    log("chaos: seed %d (replay with --seed %d)" % (args.seed, args.seed))
    c = Chaos(args)
    try:
        return c.run()
    finally:
        c.close()


if __name__ == "__main__":
    sys.exit(main())
