"""Shared pieces of the Python integration tests (tests/traces, tests/fleet): child
processes with their logs, the CMR stack on the embedded broker, cmr-ingest's HTTP API, a
PostgreSQL server of Debian's, a Tomcat 10 base directory. Everything binds loopback,
picks free ports and lives in the caller's scratch directory.
"""
import glob
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

TC_HOME = "/usr/share/tomcat10"


def log(*a):
    print(*a, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Proc:
    """A child process with its output in a file (or, for `interactive`, on a pipe)."""

    def __init__(self, name, argv, work, interactive=False, env=None):
        self.name = name
        self.logpath = os.path.join(work, name + ".log")
        self.logf = open(self.logpath, "w")
        self.lines = queue.Queue()
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE if interactive else subprocess.DEVNULL,
                                  stdout=subprocess.PIPE if interactive else self.logf,
                                  stderr=self.logf, text=True, env=env, start_new_session=True)
        if interactive:
            threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, cmd, expect, timeout=60):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        end = time.time() + timeout
        while time.time() < end:
            try:
                line = self.lines.get(timeout=max(0.1, end - time.time()))
            except queue.Empty:
                break
            if line is None:
                raise RuntimeError("%s ended while waiting for %r" % (self.name, expect))
            if line.startswith(expect):
                return line
            if line.startswith("error:") or line.startswith("unknown"):
                raise RuntimeError("%s: %s" % (self.name, line))
        raise RuntimeError("%s: no %r within %ds" % (self.name, expect, timeout))

    def wait_log(self, pattern, timeout=60):
        end = time.time() + timeout
        rx = re.compile(pattern)
        while time.time() < end:
            with open(self.logpath) as f:
                m = rx.search(f.read())
            if m:
                return m
            if self.p.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("%s: no /%s/ in its log within %ds (exit %s)" % (self.name, pattern, timeout, self.p.poll()))

    def stop(self, timeout=30):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self.logf.close()


# --- the CMR stack -------------------------------------------------------------------------

class Stack:
    """The embedded broker and the three CMR workers in `work`, the environment file applied
    and a command signing key pair made for this run. procs: started processes, to stop in
    reverse order; api: cmr-ingest's HTTP API; agent_opts: the options an agent needs (for a
    test, with commands fetched every 5 ms instead of librdkafka's 500 ms long poll, so that
    instrumentation arrives at once; a benchmark passes quick=False and measures the
    defaults)."""

    def __init__(self, work, broker, config, instrumenter, ingest, environment, quick=True):
        self.procs = []
        boot_file = os.path.join(work, "bootstrap")
        self.procs.append(Proc("broker", [broker, "--bootstrap-file", boot_file], work))
        for _ in range(100):
            if os.path.exists(boot_file) and open(boot_file).read().strip():
                break
            time.sleep(0.1)
        bs = open(boot_file).read().strip()
        # the workers sign with the key, the agents pin its public half
        subprocess.run([config, "keygen", "--dir", work, "--name", "cmr"], check=True, timeout=60,
                       stdout=subprocess.DEVNULL)
        signing = "trust.signing_key=" + os.path.join(work, "cmr.key")
        subprocess.run([config, "--bootstrap", bs, "--log-level", "warn", "apply", environment], check=True, timeout=60)
        # quick: the control plane's consumers too fetch every 5 ms (the embedded broker
        # answers a fetch only when its wait is over, which caps a partition's reading at
        # 1 MB per wait: three JVMs starting at once outrun the 5 MB it keeps)
        fetch = ["-X", "kafka.fetch.wait.max.ms=5"] if quick else []
        self.procs.append(Proc("config", [config, "--bootstrap", bs, "-X", signing] + fetch + ["run"], work))
        instr = Proc("instrumenter", [instrumenter, "--bootstrap", bs, "-X", signing] + fetch +
                     ["--db", os.path.join(work, "instrumenter"), "run"], work)
        self.procs.append(instr)
        ing = Proc("ingest", [ingest, "--bootstrap", bs, "--store", os.path.join(work, "store"),
                              "--http-port", "0", "--log-level", "info", "run"], work)
        self.procs.append(ing)
        self.api = Ingest(int(ing.wait_log(r"event=ingest\.http_listening .*port=(\d+)").group(1)))
        # the CMR runs before the JVMs, as in a deployment: their classes are read as they come
        instr.wait_log(r"event=instr\.partitions_assigned")
        self.agent_opts = "bootstrap=%s,trust.keys=%s" % (bs, os.path.join(work, "cmr.pub")) + \
            (",kafka.fetch.wait.max.ms=5" if quick else "")


def agent_id(proc, timeout=120):
    """The agent id a JVM's agent logged once configured."""
    proc.wait_log(r"event=agent\.configured", timeout)
    with open(proc.logpath) as f:
        m = re.search(r"agent_id=([0-9a-f]{16})", f.read())
    if not m:
        raise RuntimeError("no agent_id in %s's log" % proc.name)
    return m.group(1)


def show_tails(procs, lines=15):
    """The last lines of each process's log (after a set-up failure)."""
    for p in procs:
        try:
            with open(p.logpath) as f:
                tail = f.readlines()[-lines:]
            log("--- %s (%s)" % (p.name, p.logpath))
            print("".join(tail), end="", flush=True)
        except OSError:
            pass


def show_warnings(procs, last=6):
    """Per process, its warnings and errors: how many of each event, and the last few lines
    (after a failure: lost records, refused commands, timeouts say why a tree was wrong)."""
    for p in procs:
        try:
            with open(p.logpath, errors="replace") as f:
                bad = [ln.rstrip("\n") for ln in f if "level=warn" in ln or "level=error" in ln]
        except OSError:
            continue
        if not bad:
            continue
        counts = {}
        for ln in bad:
            m = re.search(r"event=(\S+)", ln)
            event = m.group(1) if m else "?"
            counts[event] = counts.get(event, 0) + 1
        log("--- %s: warnings and errors %s" % (p.name, ", ".join("%s x%d" % kv for kv in sorted(counts.items()))))
        for ln in bad[-last:]:
            print("    " + ln[:400], flush=True)


def crashes(procs):
    """JVM crashes and aborts the logs show, per process."""
    for p in procs:
        with open(p.logpath) as f:
            crash = [ln for ln in f if "SIGSEGV" in ln or "fatal error" in ln or "Aborted" in ln]
        if crash:
            log("%s: %s" % (p.name, crash[:3]))


def wind_down(procs, pg, work, ok, keep):
    """The end of a test: stops the processes (newest first) and the database, shows any
    crash, keeps the scratch directory when asked or on failure, prints the result; the
    exit status."""
    for p in reversed(procs):
        p.stop()
    if pg:
        pg.stop()
    if not ok:
        show_warnings(procs)
        crashes(procs)
    if keep or not ok:
        log("scratch directory kept: %s" % work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    log("RESULT: %s" % ("OK" if ok else "FAILED"))
    return 0 if ok else 1


# --- the ingest API -----------------------------------------------------------------------

class Ingest:
    """cmr-ingest's HTTP API. patience: how long complete_trace waits by default (a test
    may raise it where a slow machine, not a wrong tree, would make it fail)."""
    API_TIMEOUT_S = 30

    def __init__(self, port):
        self.base = "http://127.0.0.1:%d" % port
        self.patience = 4

    def get(self, path, **q):
        url = self.base + path + ("?" + urllib.parse.urlencode(q) if q else "")
        t0 = time.time()
        try:
            with urllib.request.urlopen(url, timeout=self.API_TIMEOUT_S) as r:
                return json.load(r)
        except (TimeoutError, urllib.error.URLError) as e:
            if isinstance(e, urllib.error.HTTPError):
                raise
            raise RuntimeError("the ingest API did not answer %s (%s after %.1f s)" % (url, e, time.time() - t0))

    def traces(self, **q):
        return self.get("/api/traces", **q)["traces"]

    def trace(self, tid):
        return self.get("/api/traces/" + tid)

    def complete_trace(self, since_ns, timeout=None, **q):
        """The newest complete trace that started after since_ns and matches q, waiting up
        to timeout s (default: patience)."""
        end = time.time() + (self.patience if timeout is None else timeout)
        while time.time() < end:
            for t in self.traces(**({"from": str(since_ns), "limit": "20"} | q)):
                if t["complete"]:
                    return self.trace(t["trace_id"])
            time.sleep(0.2)
        return None


def walk(node, parent=None):
    yield node, parent
    for c in node.get("children", []):
        yield from walk(c, node)



# --- servers ------------------------------------------------------------------------------

class Postgres:
    """A PostgreSQL server of Debian's in a temporary directory, on a free loopback port,
    trust authentication, no fsync; as the postgres user when run as root (the server
    refuses root). None of it outlives stop()."""
    def __init__(self):
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not bins:
            raise FileNotFoundError("no initdb (Debian's postgresql)")
        self.bin = os.path.dirname(bins[-1])
        self.dir = tempfile.mkdtemp(prefix="cmr-pg-")
        self.as_user = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.port = free_port()
        data = os.path.join(self.dir, "data")
        self._run("initdb", "-D", data, "-A", "trust", "-U", "cmr", "-E", "UTF8", "--no-sync")
        self._run("pg_ctl", "-D", data, "-l", os.path.join(self.dir, "log"), "-w", "-t", "60", "-o",
                  "-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off" % (self.port, self.dir), "start")
        self.url = "jdbc:postgresql://127.0.0.1:%d/postgres?user=cmr" % self.port

    def _run(self, tool, *a):
        subprocess.run(self.as_user + [os.path.join(self.bin, tool)] + list(a), check=True, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def pids(self):
        """The server's processes: the postmaster (from its pid file) and its children."""
        with open(os.path.join(self.dir, "data", "postmaster.pid")) as f:
            main = int(f.readline())
        out = [main]
        for d in os.listdir("/proc"):
            try:
                with open("/proc/%s/stat" % d) as f:
                    if d.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == main:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass  # not a process, or it ended meanwhile
        return out

    def stop(self):
        try:
            self._run("pg_ctl", "-D", os.path.join(self.dir, "data"), "-m", "immediate", "-w", "stop")
        except (subprocess.SubprocessError, OSError) as e:
            log("PostgreSQL did not stop: %s" % e)
        shutil.rmtree(self.dir, ignore_errors=True)


def tomcat_base(work, webapp, port, context="orders"):
    b = os.path.join(work, "tomcat")
    for d in ("conf", "logs", "temp", "work", "webapps"):
        os.makedirs(os.path.join(b, d), exist_ok=True)
    conf = "/etc/tomcat10" if os.path.isfile("/etc/tomcat10/server.xml") else "/var/lib/tomcat10/conf"
    for f in os.listdir(conf):
        src = os.path.join(conf, f)
        if os.path.isfile(src):
            shutil.copy(src, os.path.join(b, "conf", f))
    with open(os.path.join(b, "conf", "server.xml")) as f:
        x = f.read()
    x = x.replace('<Connector port="8080"', '<Connector address="127.0.0.1" port="%d"' % port)
    x = re.sub(r'<Server port="[0-9-]*"', '<Server port="-1"', x)
    with open(os.path.join(b, "conf", "server.xml"), "w") as f:
        f.write(x)
    os.symlink(webapp, os.path.join(b, "webapps", context))
    return b


def java_feature(java):
    """The JVM's feature version (17, 25 ...); 0 when it does not say."""
    out = subprocess.run([java, "-XshowSettings:properties", "-version"], capture_output=True, text=True,
                         timeout=60).stderr
    m = re.search(r"java\.specification\.version = (\d+)", out)
    return int(m.group(1)) if m else 0
