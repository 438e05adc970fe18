#!/usr/bin/env python3
"""Call trees end to end, checked where an operator reads them: cmr-ingest's HTTP API.

Starts the embedded broker, the three CMR workers (cmr-config, cmr-instrumenter,
cmr-ingest), a client JVM with the agent (TraceApp) and Tomcat 10 with the agent and a small
servlet (trace.web.OrderServlet), all on loopback with free ports, in a scratch directory
removed at the end. Each scenario runs one command of TraceApp (or one HTTP request) and
then checks the stored tree: its exact shape in application methods, which calls ran on
another thread or JVM (async), the thread and JVM of every node, and that every child lies
within its parent in time.

  nested    calls in one thread
  pool      ExecutorService.submit on a pool of reused threads
  scheduled a task of a scheduled pool
  thread    Thread.start
  chain     CompletableFuture stages on a ForkJoinPool and on the default executor
  forkjoin  a RecursiveTask forking and joining in a ForkJoinPool
  http      HttpURLConnection and HttpClient calls into Tomcat (two JVMs, one trace)
  local     a call into the JDK's own HttpServer (jdk.httpserver)
  foreign   a request with another tracer's traceparent starts a trace of its own, linked to
            the foreign parent (the environment's trace-context policy is "authenticated")
  forged    a cmr-parent without a valid MAC that names an existing trace does not join it
  malformed unparsable trace headers are ignored: served, a trace of its own
  plain     a request without headers starts a trace in Tomcat
  async_servlet  AsyncContext.start: the async part continues the request's trace
  running   a root call still running is visible (running), and complete later
  jdbc      JDBC on H2: one node per statement with its SQL, literals masked
  pooled    JDBC through HikariCP on a PostgreSQL server the test starts
  clients   Apache HttpClient 4 and 5 and OkHttp 3 (sync, async) into Tomcat: nodes with
            method, URL and status, the servlet's tree under each
  jetty     Jetty 9 in a third JVM, called with Apache HttpClient 4, and directly
  jetty_async  an async servlet on Jetty: AsyncContext.start continues the request's trace
  jetty_late  a Jetty server started inside a trace: that trace completes, and the requests
            the server serves do not continue it
  jetty_pipelined  two requests pipelined on one connection, the first async: two traces
  timer     java.util.Timer: a periodic task's first run continues the trace, later ones not
  vthreads  (JDK 21+) tasks on virtual threads continue the trace (one segment each, across
            sleeps and carriers); 5,000 of them give their rings back
  structured (JDK 21+) the subtasks of a StructuredTaskScope continue the trace

The JDK's hand-off points are instrumented by cmr-instrumenter while the JVMs run, so a
scenario is repeated until its tree is right (bounded), then once more, which must be right
at once.

Exit status: 0 passed, 1 failed, 77 skipped (no Tomcat 10).
"""
import argparse
import glob
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from cmrstack import (TC_HOME, Postgres, Proc, Stack, agent_id, free_port, java_feature, log,  # noqa: E402
                      show_tails, tomcat_base, walk, wind_down)

H2_JAR = "/usr/share/java/h2.jar"  # Debian's libh2-java
# the clients scenario: Debian's libhttpclient-java, libhttpclient5-java, libokhttp-java
CLIENT_JARS = ["/usr/share/java/" + j for j in (
    "httpclient.jar", "httpcore.jar", "commons-logging.jar", "httpclient5.jar", "httpcore5.jar", "httpcore5-h2.jar",
    "slf4j-api.jar", "okhttp.jar", "okio.jar")]
# the jetty scenario: Debian's libjetty9-java (and javax.servlet 4, libservlet-api-java)
JETTY_JARS = ["/usr/share/java/" + j for j in (
    "jetty9-server.jar", "jetty9-servlet.jar", "jetty9-http.jar", "jetty9-io.jar", "jetty9-util.jar",
    "jetty9-security.jar", "servlet-api.jar")]
# the pooled scenario: Debian's postgresql, libpostgresql-jdbc-java, libhikaricp-java (and
# the SLF4J API HikariCP logs through, from libslf4j-java)
PG_JARS = ["/usr/share/java/postgresql.jar", "/usr/share/java/HikariCP.jar", "/usr/share/java/slf4j-api.jar",
           "/usr/share/java/slf4j-nop.jar"]
JDK_PREFIXES = ("java.", "jdk.", "sun.", "javax.", "jakarta.", "com.sun.")
# the incoming side of HTTP: kept in the application view (a JVM's entry point)
SERVER_ENTRIES = ("jakarta.servlet.http.HttpServlet.service", "com.sun.net.httpserver.Filter$Chain.doFilter",
                  "javax.servlet.http.HttpServlet.service")
DEADLINE_S = 120          # per scenario, while instrumentation arrives
AGAIN_PATIENCE_S = 20     # the repeat's wait for its complete trace
CROSS_JVM_SLACK_NS = 2_000_000  # clocks of two JVMs: wall clock read once per JVM


def short(method):
    """'trace.Nested.a()V' -> 'Nested.a'; JDK methods keep their package."""
    name = method.split("(")[0]
    if name.startswith("trace."):
        name = name[len("trace."):]
        if name.startswith("web."):
            name = name[len("web."):]
    return name


def is_app(node):
    return node["kind"] != "call" or not node["method"].startswith(JDK_PREFIXES) or \
        node["method"].startswith(SERVER_ENTRIES)


def app_view(node, async_above=False):
    """The node's subtree in application methods: JDK hand-off nodes are left out, their
    children lifted (async when a left-out node above them was)."""
    out = []
    for c in node.get("children", []):
        if is_app(c):
            out.append(dict(c, async_=c["async"] or async_above,
                            children_view=app_view(c, False)))
        else:
            out.extend(app_view(c, async_above or c["async"]))
    return out


def shape(nodes):
    """Comparable shape: (name, async, [children]) with children in order."""
    return [(short(n["method"]) if n["kind"] == "call" else "(" + n["kind"] + ")", n["async_"],
             shape(n["children_view"])) for n in nodes]


def within(n, p, is_async, detached=False):
    """None if call n lies within call p in time (two JVMs: within the clocks' slack). An
    async call (another thread or JVM) must start within its parent; it may end after it:
    a caller that waits for a result (a Future, an HTTP response) is released before the
    other side's method has returned. So may a synchronous remote call (remote: another
    JVM's side of an HTTP call, counted as the caller's wait time). `detached`: an async
    call whose caller did not wait for it at all (fire and forget) may also start after
    its parent returned, never before it began."""
    slack = 0 if n["agent_id"] == p["agent_id"] else CROSS_JVM_SLACK_NS
    late_end = not is_async and n["end_ns"] > p["end_ns"] + slack
    late_start = n["start_ns"] > p["end_ns"] + slack and not (is_async and detached)
    if n["start_ns"] + slack < p["start_ns"] or late_start or late_end:
        return "%s [%d..%d]%s not within its parent %s [%d..%d]" % (
            short(n["method"]), n["start_ns"], n["end_ns"], " async" if is_async else "",
            short(p["method"]), p["start_ns"], p["end_ns"])
    return None


def check_common(tree, detached=False):
    """Nothing running, nothing lost; every call within its parent in time (see within),
    in the tree as stored and in its application view."""
    problems = []
    for root in tree["roots"]:
        for n, p in walk(root):
            if n.get("running"):
                problems.append("%s still running" % short(n["method"]))
            if n.get("exit_lost"):
                problems.append("%s lost its exit" % short(n["method"]))
            if p is None or p["kind"] != "call" or n["kind"] != "call":
                continue
            w = within(n, p, n["async"] or n.get("remote", False), detached)
            if w:
                problems.append(w)
        if root["kind"] == "call":
            view = dict(root, async_=False, children_view=app_view(root))
            for v in app_nodes(view):
                for c in v["children_view"]:
                    w = within(c, v, c["async_"] or c.get("remote", False), detached) if c["kind"] == "call" else None
                    if w and w not in problems:
                        problems.append(w)
    if tree.get("missing_batches"):
        problems.append("missing batches: %s" % tree["missing_batches"])
    return problems


def check_route(tree, want):
    """Problems unless the trace's entry call names the route its request matched."""
    got = (tree["roots"][0].get("attributes") or {}).get("http.route")
    return [] if got == want else ["the entry call's http.route %r, want %r" % (got, want)]


def check_completion(tree, api, agent):
    """Problems unless the async servlet's request has its completion node: one async child
    of the servlet's service, on its JVM, from service's return (within 1 µs: the tree's
    times are rounded per segment) to the request's end."""
    root = tree["roots"][0]
    done = [c for c in root.get("children", [])
            if c["method"].startswith(api + ".servlet.AsyncListener.onComplete(")]
    if len(done) != 1:
        return ["%d completion nodes under the servlet, want 1: %s" % (
            len(done), [short(c["method"]) for c in root.get("children", [])])]
    c = done[0]
    p = []
    if not c["async"] or c["agent_id"] != agent:
        p.append("the completion node async=%s on %s" % (c["async"], c["agent_id"]))
    if abs(c["start_ns"] - root["end_ns"]) > 1000 or c["end_ns"] <= c["start_ns"]:  # (ns rounding)
        p.append("the completion node [%d, %d] does not begin where service [%d, %d] returned" % (
            c["start_ns"], c["end_ns"], root["start_ns"], root["end_ns"]))
    return p


def root_view(tree):
    roots = tree["roots"]
    if len(roots) != 1:
        return None, ["%d roots" % len(roots)]
    r = roots[0]
    return dict(r, async_=False, children_view=app_view(r)), []


def fmt(sh, indent=0):
    lines = []
    for name, a, kids in sh:
        lines.append("  " * indent + name + (" async" if a else ""))
        lines.extend(fmt(kids, indent + 1))
    return lines


def expect_shape(view, want):
    got = shape([view])
    if got != want:
        return ["shape differs:\n    got:\n      " + "\n      ".join(fmt(got)) +
                "\n    want:\n      " + "\n      ".join(fmt(want))]
    return []


def app_nodes(view):
    yield view
    for c in view["children_view"]:
        yield from app_nodes(c)


def check_db_system(nodes, want):
    """Problems unless every JDBC node names its database as its driver's URL does."""
    got = [(n.get("attributes") or {}).get("db.system") for n in nodes]
    return [] if got and all(g == want for g in got) else ["db.system of the JDBC nodes %s, want %s" % (got, want)]


def check_rows(nodes):
    """The JDBC nodes of Db.statements: each update with its row count (the insert 1),
    no count on a query."""
    rows = [(n.get("attributes") or {}).get("db.response.affected_rows") for n in nodes]
    want_some = [n["method"].split("(")[0].endswith("executeUpdate") for n in nodes]
    if len(rows) != 5 or rows[2] != "1" or any((r is not None and r.isdigit()) != w for r, w in zip(rows, want_some)):
        return ["rows per JDBC node %s" % rows]
    return []


# --- scenarios ------------------------------------------------------------------------------

class Scenarios:
    def __init__(self, app, ingest, tomcat_url, app_agent, tc_agent):
        self.app, self.ingest, self.url = app, ingest, tomcat_url
        self.app_agent, self.tc_agent = app_agent, tc_agent
        self.jetty_url = self.jetty_late_url = None
        self.jetty_late_start = []

    def _run(self, cmd, expect, root):
        """Runs one command; its complete trace, the root's application view, and problems
        (when there is no such trace, or it has other than one root)."""
        since = time.time_ns()
        self.app.send(cmd, expect)
        tree = self.ingest.complete_trace(since, root=root)
        if not tree:
            return None, None, ["no complete trace rooted in %s" % root]
        v, p = root_view(tree)
        return tree, v, p

    def nested(self):
        tree, v, p = self._run("nested", "nested:", "trace.Nested.run")
        if p:
            return p
        p = expect_shape(v, [("Nested.run", False, [
            ("Nested.a", False, [("Nested.b", False, [("Leaf.work", False, [("Leaf.pause", False, [])])])]),
            ("Nested.c", False, [("Leaf.work", False, [("Leaf.pause", False, [])])])])])
        threads = {n["thread"] for n in app_nodes(v)}
        if threads != {"main"}:
            p.append("threads %s, want main only" % threads)
        return p + check_common(tree)

    def pool(self):
        tree, v, p = self._run("pool 3", "pool:", "trace.Pool.run")
        if p:
            return p
        task = ("Pool.task", True, [("Leaf.work", False, [("Leaf.pause", False, [])])])
        p = expect_shape(v, [("Pool.run", False, [task, task, task])])
        # each task under the pool's hand-off node, on a pool thread (reused: 2 threads, 3 tasks)
        handoffs = [c for c in tree["roots"][0]["children"]]
        if [short(c["method"]) for c in handoffs] != ["java.util.concurrent.ThreadPoolExecutor.beforeExecute"] * 3:
            p.append("hand-off nodes: %s" % [short(c["method"]) for c in handoffs])
        for c in handoffs:
            if c["thread"] != "trace-pool" or not c["async"]:
                p.append("task node on %s async=%s" % (c["thread"], c["async"]))
        if len({c["segment_id"] for c in handoffs}) != 3:
            p.append("the 3 tasks are not 3 segments")
        return p + check_common(tree)

    def scheduled(self):
        tree, v, p = self._run("scheduled", "scheduled:", "trace.Pool.scheduled")
        if p:
            return p
        p = expect_shape(v, [("Pool.scheduled", False, [
            ("Pool.task", True, [("Leaf.work", False, [("Leaf.pause", False, [])])])])])
        task = v["children_view"][0] if v["children_view"] else None
        if task and task["thread"] != "trace-timer":
            p.append("task ran on %s" % task["thread"])
        return p + check_common(tree)

    def timer(self):
        """java.util.Timer: the first run of a periodic task continues the trace that
        scheduled it (async, on the timer's thread), its later runs start traces of their
        own (no context was live for them)."""
        tree, v, p = self._run("timer", "timer:", "trace.Pool.timer")
        if p:
            return p
        run = ("Pool$Tick.run", True, [("Pool.task", False, [("Leaf.work", False, [("Leaf.pause", False, [])])])])
        p = expect_shape(v, [("Pool.timer", False, [run])])
        task = v["children_view"][0] if v["children_view"] else None
        if task and task["thread"] != "trace-util-timer":
            p.append("task ran on %s" % task["thread"])
        return p + check_common(tree, detached=True)

    def thread(self):
        tree, v, p = self._run("thread", "thread:", "trace.Threads.run")
        if p:
            return p
        p = expect_shape(v, [("Threads.run", False, [
            ("Threads.body", True, [("Leaf.work", False, [("Leaf.pause", False, [])])])])])
        body = v["children_view"][0] if v["children_view"] else None
        if body and body["thread"] != "trace-thread":
            p.append("body ran on %s" % body["thread"])
        return p + check_common(tree)

    def chain(self):
        tree, v, p = self._run("chain", "chain:", "trace.Chain.run")
        if p:
            return p
        leaf = ("Leaf.work", False, [("Leaf.pause", False, [])])
        first = ("Chain.first", True, [leaf])
        second = ("Chain.second", True, [leaf])
        third = ("Chain.third", True, [])
        # per chain: first (async), then second (async) with third after it in the same task
        # (second's thread, a sibling); the two chains interleave in time
        got = shape([v])
        kids = sorted(got[0][2]) if got else []
        want = sorted([first, first, second, second, third, third])
        if not got or got[0][0] != "Chain.run" or kids != want:
            p.append("shape differs:\n    got:\n      " + "\n      ".join(fmt(got)) +
                     "\n    want (any order): Chain.run -> first x2, second x2, third x2 (all async)")
        by_seg = {}
        for n, _ in walk(tree["roots"][0]):
            if n["kind"] == "call" and n["method"].startswith("trace.Chain."):
                by_seg.setdefault(n["segment_id"], []).append(short(n["method"]))
                if n["method"].startswith("trace.Chain.run"):
                    continue
                if n["thread"] == "main":
                    p.append("%s ran on main" % short(n["method"]))
        for seg, names in by_seg.items():
            if "Chain.third" in names and "Chain.second" not in names:
                p.append("third not on second's thread: %s" % names)
        return p + check_common(tree)

    def forkjoin(self):
        n = 64
        tree, v, p = self._run("forkjoin %d" % n, "forkjoin:", "trace.Sum.total")
        if p:
            return p

        def count(lo, hi):
            return 1 if hi - lo < 4 else 1 + count(lo, (lo + hi) >> 1) + count(((lo + hi) >> 1) + 1, hi)
        computes = [x for x in app_nodes(v) if x["kind"] == "call" and x["method"].startswith("trace.Sum.compute")]
        if len(computes) != count(1, n):
            p.append("%d Sum.compute calls, want %d" % (len(computes), count(1, n)))
        top = v["children_view"]
        if len(top) != 1 or short(top[0]["method"]) != "Sum.compute":
            p.append("Sum.total's child: %s" % fmt(shape(top)))
        elif top[0]["async_"] != (top[0]["thread"] != "main"):
            # the pool runs the first task, or (JDK 25, pool busy) the caller takes it back
            # and runs it itself: async exactly when on another thread
            p.append("first Sum.compute on %s, async=%s" % (top[0]["thread"], top[0]["async_"]))
        return p + check_common(tree)

    def _servlet(self, is_async):
        inner = [("OrderServlet.doGet", False, [("Inventory.check", False, [("Inventory.lookup", False, [])])])]
        return ("jakarta.servlet.http.HttpServlet.service", is_async, inner)

    def _servlet_nodes(self, tree):
        return [n for r in tree["roots"] for n, _ in walk(r)
                if n["kind"] == "call" and n["method"].startswith("jakarta.servlet.http.HttpServlet.service")]

    def http(self):
        """HttpURLConnection and the JDK HttpClient (send, sendAsync) into Tomcat; the
        HttpClient's requests are built before the trace began. The calls are nodes with
        method, URL and status (HttpURLConnection's: its exchange, in getInputStream, once
        although the application reads the connection twice), the servlet under each a
        synchronous remote child; the
        sendAsync's node an async child of its caller, written by the thread that completed
        it (the caller's own, after its segment, when the response came before sendAsync
        returned). A send the server redirects (302) and the client follows is one node
        with the final status, both requests under it as synchronous remote children (the
        client keeps the context headers on the request it follows with)."""
        tree, v, p = self._run("http " + self.url, "http:", "trace.Client.run")
        if p:
            return p
        p = expect_shape(v, [("Client.run", False, [
            ("Client.viaUrlConnection", False, [self._servlet(False)]),
            ("Client.viaHttpClient", False, [self._servlet(False)]),
            ("Client.viaHttpClientAsync", False, [self._servlet(True)]),
            ("Client.viaHttpClientRedirect", False, [
                ("jakarta.servlet.http.HttpServlet.service", False, [("OrderServlet.doGet", False, [])]),
                self._servlet(False)])])])
        p += self._redirected(tree)
        for caller, method, is_async in (
                ("Client.viaUrlConnection", "sun.net.www.protocol.http.HttpURLConnection.getInputStream(", False),
                ("Client.viaHttpClient", "jdk.internal.net.http.HttpClientImpl.send(", False),
                ("Client.viaHttpClientAsync", "jdk.internal.net.http.HttpClientImpl.sendAsync(", True)):
            call = method.split("(")[0].split(".")[-1]
            nodes = [n for r in tree["roots"] for c, _ in walk(r) if short(c["method"]) == caller
                     for n in c.get("children", []) if n["method"].startswith(method)]
            if len(nodes) != 1:
                p.append("%s: %d %s nodes under it" % (caller, len(nodes), call))
                continue
            n = nodes[0]
            a = n.get("attributes", {})
            if (a.get("http.request.method"), a.get("url.full"), a.get("http.response.status_code")) != \
                    ("GET", self.url, "200"):
                p.append("%s attributes %s" % (call, a))
            if n["async"] != is_async:
                p.append("%s async=%s" % (call, n["async"]))
            kids = n.get("children", [])
            if len(kids) != 1 or not kids[0]["method"].startswith(SERVER_ENTRIES[0]) or \
                    not kids[0].get("remote") or kids[0]["async"]:
                p.append("%s: the servlet is not one synchronous remote child: %s" % (
                    call, [(short(c["method"]), c.get("remote"), c["async"]) for c in kids]))
            elif n["wait_ns"] <= 0:
                p.append("%s waited %d ns for its callee" % (call, n["wait_ns"]))
        if tree["jvms"] != 2:
            p.append("%d JVMs, want 2" % tree["jvms"])
        for s in self._servlet_nodes(tree):
            if s["agent_id"] != self.tc_agent:
                p.append("servlet on agent %s, want Tomcat's %s" % (s["agent_id"], self.tc_agent))
            if not s["thread"].startswith("http-nio-"):
                p.append("servlet on thread %s" % s["thread"])
            if not s.get("remote"):
                p.append("servlet not marked remote (a synchronous call from another JVM)")
            for n, _ in walk(s):
                if n["agent_id"] != self.tc_agent:
                    p.append("%s under the servlet on agent %s" % (short(n["method"]), n["agent_id"]))
        for n in app_nodes(v):
            if n["method"].startswith("trace.Client") and (n["agent_id"] != self.app_agent or n["thread"] != "main"):
                p.append("%s on %s / %s" % (short(n["method"]), n["agent_id"], n["thread"]))
        return p + check_common(tree)

    def _redirected(self, tree):
        """Problems unless the redirected send is one node (the first request's URL, the
        final status) with both requests' servlets as synchronous remote children."""
        nodes = [n for r in tree["roots"] for c, _ in walk(r) if short(c["method"]) == "Client.viaHttpClientRedirect"
                 for n in c.get("children", []) if n["method"].startswith("jdk.internal.net.http.HttpClientImpl.send(")]
        if len(nodes) != 1:
            return ["the redirected send: %d nodes" % len(nodes)]
        n, p = nodes[0], []
        a = n.get("attributes", {})
        if (a.get("http.request.method"), a.get("url.full"), a.get("http.response.status_code")) != \
                ("GET", self.url, "200"):
            p.append("the redirected send's attributes %s" % a)
        kids = n.get("children", [])
        if len(kids) != 2 or any(not k["method"].startswith(SERVER_ENTRIES[0]) or not k.get("remote") or k["async"]
                                 for k in kids):
            p.append("the redirected send's children %s, want two synchronous remote servlets" % [
                (short(k["method"]), k.get("remote"), k["async"]) for k in kids])
        return p

    def local(self):
        """HttpURLConnection to the JDK's HTTP server in the same JVM: a GET, a POST that
        writes its body first, a GET answered 404. Each exchange is a node with method, URL
        and status (the 404's read from the exception getInputStream threw), the server's
        exchange under the caller (async: another thread of this JVM)."""
        tree, v, p = self._run("local", "local:", "trace.Client.local")
        if p:
            return p
        served = ("com.sun.net.httpserver.Filter$Chain.doFilter", True, [
            ("Client.handle", False, [("Leaf.work", False, [("Leaf.pause", False, [])])])])
        p = expect_shape(v, [("Client.local", False, [("Client.localUrl", False, []),
                                                      ("Client.viaUrlConnection", False, [served]),
                                                      ("Client.viaUrlConnectionPost", False, [served]),
                                                      ("Client.viaUrlConnectionMissing", False, [served])])])
        for caller, want in (("Client.viaUrlConnection", ("GET", "/local", "200")),
                             ("Client.viaUrlConnectionPost", ("POST", "/local", "200")),
                             ("Client.viaUrlConnectionMissing", ("GET", "/local/missing", "404"))):
            nodes = [n for c, _ in walk(tree["roots"][0]) if short(c["method"]) == caller
                     for n in c.get("children", [])
                     if n["method"].startswith("sun.net.www.protocol.http.HttpURLConnection.getInputStream(")]
            if len(nodes) != 1:
                p.append("%s: %d HttpURLConnection nodes under it, want 1" % (caller, len(nodes)))
                continue
            a = nodes[0].get("attributes", {})
            url = a.get("url.full") or ""
            if (a.get("http.request.method"), url[url.find("/", 8):] if "://" in url else url,
                    a.get("http.response.status_code")) != want:
                p.append("%s: node attributes %s, want %s" % (caller, a, want))
        for n, _ in walk(tree["roots"][0]):
            if n["kind"] == "call" and n["method"].startswith("trace.Client.handle") and n["thread"] != "trace-server":
                p.append("handler ran on %s" % n["thread"])
            if n["kind"] == "call" and n["method"].startswith("com.sun.net.httpserver.Filter$Chain.doFilter") and \
                    (n.get("attributes") or {}).get("http.route") != "/local":
                p.append("the exchange's route %s, want /local" % (n.get("attributes") or {}).get("http.route"))
        return p + check_common(tree)

    def jdbc(self):
        """JDBC on H2: each statement run inside the trace is a node of the driver's
        execute method with its SQL as db.statement, literals masked; the insert prepared
        outside the trace keeps its SQL; nothing else of H2 is recorded."""
        tree, v, p = self._run("jdbc", "jdbc:", "trace.Db.run")
        if p:
            return p
        want = [("executeUpdate", "delete from orders where customer = ? or amount > ?"),
                ("executeQuery", "select count(*) from orders where amount = ?"),
                ("executeUpdate", "insert into orders(customer, amount) values (?, ?)"),
                ("executeQuery", "select id, amount from orders where customer = ?"),
                ("executeQuery", "{call abs(?)}")]
        nodes = [n for n, _ in walk(tree["roots"][0]) if n["kind"] == "call" and n["method"].startswith("org.h2.")]
        got = [(n["method"].split("(")[0].rsplit(".", 1)[-1], n.get("attributes", {}).get("db.statement"))
               for n in nodes]
        if got != want:
            p.append("JDBC nodes %s, want %s" % (got, want))
        p += check_rows(nodes)
        p += check_db_system(nodes, "h2")
        text = json.dumps([n.get("attributes") for n, _ in walk(tree["roots"][0])])
        for secret in ("secret-customer", "42", "1000"):
            if secret in text:
                p.append("literal %r reached the stored trace" % secret)
        for n, parent in walk(tree["roots"][0]):
            if n["method"].startswith("org.h2.") and not (parent and parent["method"].startswith("trace.Db.statements")):
                p.append("%s not directly under Db.statements" % n["method"])
        p += check_common(tree)
        # more statements in a row than one batch carries call attributes for: each its SQL
        tree, v, q = self._run("jdbcmany 150", "jdbcmany:", "trace.Db.many")
        if q:
            return p + q
        sql = [(n.get("attributes") or {}).get("db.statement") for n, _ in walk(tree["roots"][0])
               if n["kind"] == "call" and n["method"].startswith("org.h2.")]
        if sql != ["select count(*) from orders where amount = ?"] * 150:
            p.append("150 queries: %d JDBC nodes, %d with their SQL" % (
                len(sql), sum(1 for x in sql if x == "select count(*) from orders where amount = ?")))
        return p + check_common(tree)

    def clients(self):
        """HTTP client libraries into Tomcat: each call is a node of the library's (its
        method, URL without the query string, status), the servlet's tree in the other JVM
        hangs under it as a synchronous remote child, and the call's wait is that time;
        OkHttp's async call runs on its dispatcher thread under the caller, async."""
        tree, v, p = self._run("clients " + self.url, "clients:", "trace.Clients.run")
        if p:
            return p
        want = {"Clients.apache4": "org.apache.http.impl.client.InternalHttpClient.doExecute",
                "Clients.apache5": "org.apache.hc.client5.http.impl.classic.InternalHttpClient.doExecute",
                "Clients.okhttpSync": "okhttp3.RealCall.execute",
                "Clients.okhttpAsync": "okhttp3.RealCall$AsyncCall.execute"}
        root = tree["roots"][0]
        for caller, client in want.items():
            callers = [n for n, _ in walk(root) if n["kind"] == "call" and short(n["method"]) == caller]
            calls = [n for c in callers for n, _ in walk(c) if n["kind"] == "call" and n["method"].startswith(client + "(")]
            if len(callers) != 1 or len(calls) != 1:
                p.append("%s: %d nodes, %d %s nodes under it" % (caller, len(callers), len(calls), client))
                continue
            call = calls[0]
            a = call.get("attributes", {})
            status = a.get("http.response.status_code")
            if (a.get("http.request.method"), a.get("url.full"), status) != ("GET", self.url, "200"):
                p.append("%s attributes %s" % (client, a))
            servlets = [c for c in call.get("children", []) if c["method"].startswith(SERVER_ENTRIES[0])]
            if len(servlets) != 1 or not servlets[0].get("remote") or servlets[0]["async"] or \
                    servlets[0]["agent_id"] != self.tc_agent:
                p.append("%s: the servlet is not one synchronous remote child: %s" % (
                    client, [(short(c["method"]), c.get("remote"), c["async"]) for c in call.get("children", [])]))
            elif call["wait_ns"] <= 0:
                p.append("%s waited %d ns for its callee" % (client, call["wait_ns"]))
        if "s3cret" in json.dumps([n.get("attributes") for n, _ in walk(root)]):
            p.append("the query string reached the stored trace")
        if tree["jvms"] != 2:
            p.append("%d JVMs, want 2" % tree["jvms"])
        return p + check_common(tree)

    def jetty(self):
        """Jetty 9 (javax.servlet) in a third JVM: called with Apache HttpClient 4, its
        servlet's tree hangs under the client's node as a synchronous remote child; a request
        straight to Jetty is a trace rooted in its servlet with the request's method, path
        and status."""
        return self._jetty(self.jetty_url)

    def jetty_late(self):
        """A Jetty server started inside a trace (a request to Jetty's /stock/late, once
        Jetty's pool is instrumented): its pool's long-lived jobs (acceptor, selector,
        reserved threads) are queued inside that trace, yet the trace completes (its
        segments in those jobs end where the loops begin), and every request the new server
        serves is a transaction of its own, as in the jetty scenario."""
        if not self.jetty_late_url:
            p = self.jetty_async()  # Jetty's servlets and pool instrumented
            if p:
                return p
            since = time.time_ns()
            with urllib.request.urlopen(self.jetty_url.replace("/check", "/late"), timeout=30) as r:
                self.jetty_late_url = "http://127.0.0.1:%d/stock/check" % int(r.read())
            self.jetty_late_start = self._late_start(since)  # the server starts once: kept
        return self.jetty_late_start + self._jetty(self.jetty_late_url)

    def jetty_pipelined(self):
        """Two requests pipelined on one connection, the first async: Jetty hands the
        connection on to its pool from the thread that completes the first (inside its
        trace's context), and the second request is still a transaction of its own. Three
        connections (whether the hand-on happens there depends on timing)."""
        p = []
        for _ in range(3):
            p += self._pipelined_pair()
            if p:
                break
        return p

    def _pipelined_pair(self):
        u = urllib.parse.urlsplit(self.jetty_url)
        since = time.time_ns()
        with socket.create_connection((u.hostname, u.port), timeout=30) as c:
            c.sendall(b"GET /stock/async HTTP/1.1\r\nHost: jetty\r\n\r\n"
                      b"GET /stock/check?item=p HTTP/1.1\r\nHost: jetty\r\nConnection: close\r\n\r\n")
            answer = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                answer += chunk
        if re.findall(rb"HTTP/1\.1 (\d+)", answer) != [b"202", b"200"]:
            return ["the pipelined requests' answers: %r" % answer[:400]]
        javax = "javax.servlet.http.HttpServlet.service"
        end = time.time() + self.ingest.patience
        while True:
            got = [t for t in self.ingest.traces(**{"from": str(since), "limit": "50"})
                   if t["complete"] and (t["root_method"] or "").startswith(javax)]
            paths = sorted((t.get("http") or {}).get("path") or "" for t in got)
            if paths == ["/stock/async", "/stock/check"] or time.time() > end:
                break
            time.sleep(0.2)
        if paths != ["/stock/async", "/stock/check"]:
            return ["complete traces rooted in Jetty's servlet: %s, want one per request" % paths]
        p = []
        for t in got:
            tree = self.ingest.trace(t["trace_id"])
            entries = [n for root in tree["roots"] for n, _ in walk(root) if n["method"].startswith(javax)]
            if len(entries) != 1:
                p.append("%s: %d servlet entries in its trace" % (t["http"]["path"], len(entries)))
        return p

    def _late_start(self, since):
        """Problems of the trace of the request that started the late server."""
        tree = self.ingest.complete_trace(since, root="javax.servlet.http.HttpServlet.service")
        if not tree:
            return ["the request that started a server has no complete trace (traces since: %s)" % [
                (t["root_method"], t["complete"], t.get("segments")) for t in self.ingest.traces(**{
                    "from": str(since), "limit": "50"})]]
        nodes = [n for root in tree["roots"] for n, _ in walk(root) if n["kind"] == "call"]
        methods = {short(n["method"]) for n in nodes}
        p = [] if "jetty.JettyService$StartLateServlet.doGet" in methods else ["not the late start's trace: %s" % methods]
        jobs = [n for n in nodes if short(n["method"]) == "org.eclipse.jetty.util.thread.QueuedThreadPool.runJob"]
        if not jobs or not all(n["async"] for n in jobs):  # the server's loops, ended where they begin
            p.append("the late server's pool jobs in its starter's trace: %s" % [(n["thread"], n["async"]) for n in jobs])
        return p

    def _jetty(self, url):
        tree, v, p = self._run("jetty " + url, "jetty:", "trace.Clients.jetty")
        if p:
            return p
        javax = "javax.servlet.http.HttpServlet.service"
        servlet = ("javax.servlet.http.HttpServlet.service", False, [
            ("jetty.JettyService$StockServlet.doGet", False, [("jetty.JettyService$Stock.level", False, [])])])
        p = expect_shape(v, [("Clients.jetty", False, [("Clients.clients", False, []), ("Clients.apache4", False, [
            ("org.apache.http.impl.client.InternalHttpClient.doExecute", False, [servlet])])])])
        for n, parent in walk(tree["roots"][0]):
            if n["method"].startswith(javax):
                if n["agent_id"] != self.jetty_agent or not n.get("remote") or n["async"]:
                    p.append("Jetty's servlet on %s remote=%s async=%s" % (n["agent_id"], n.get("remote"), n["async"]))
                if not n["thread"].startswith("qtp"):
                    p.append("Jetty's servlet on thread %s" % n["thread"])
        if tree["jvms"] != 2:
            p.append("%d JVMs, want 2" % tree["jvms"])
        p += check_common(tree)
        since = time.time_ns()
        with urllib.request.urlopen(url + "?item=x", timeout=30) as r:
            r.read()
        direct = self.ingest.complete_trace(since, root=javax)
        if not direct:
            return p + ["no complete trace rooted in Jetty's servlet"]
        http = direct.get("http") or {}
        if (http.get("method"), http.get("path"), http.get("status")) != ("GET", "/stock/check", 200):
            p.append("the direct request's HTTP data %s, want GET /stock/check 200" % http)
        agent = (direct["roots"][0].get("attributes") or {}).get("http.request.header.user-agent", "")
        if not agent.startswith("Python-urllib/"):  # the environment's request_headers, on Jetty too
            p.append("the direct request's user-agent on Jetty's servlet: %r" % agent)
        p += check_route(direct, "/stock/check")
        since = time.time_ns()  # a path mapping on Servlet 3.1: the route from the servlet path
        with urllib.request.urlopen(url.replace("/check", "/level/7"), timeout=30) as r:
            r.read()
        level = self.ingest.complete_trace(since, root=javax)
        return p + (check_route(level, "/stock/level/*") if level else ["no complete trace of /stock/level/7"])

    def pooled(self):
        """JDBC through HikariCP on a real PostgreSQL server: the pool's getConnection is a
        node (the wait for a connection), each statement one node of the pool's proxy with its
        SQL (the driver's execute under it adds no node), literals masked."""
        tree, v, p = self._run("pooled " + self.pg_url, "pooled:", "trace.Db.pooled")
        if p:
            return p
        want = [("getConnection", None),
                ("executeUpdate", "delete from orders where customer = ? or amount > ?"),
                ("executeQuery", "select count(*) from orders where amount = ?"),
                ("executeUpdate", "insert into orders(customer, amount) values (?, ?)"),
                ("executeQuery", "select id, amount from orders where customer = ?"),
                ("executeQuery", "{call abs(?)}")]
        lib = ("com.zaxxer.", "org.postgresql.")
        nodes = [n for n, _ in walk(tree["roots"][0]) if n["kind"] == "call" and n["method"].startswith(lib)]
        got = [(n["method"].split("(")[0].rsplit(".", 1)[-1], n.get("attributes", {}).get("db.statement"))
               for n in nodes]
        if got != want:
            p.append("JDBC nodes %s, want %s" % (got, want))
        p += check_rows(nodes[1:])
        p += check_db_system(nodes[1:], "postgresql")
        if nodes and "db.system" in (nodes[0].get("attributes") or {}):
            p.append("the pool's getConnection has a db.system")
        if nodes and not nodes[0]["method"].startswith("com.zaxxer.hikari.HikariDataSource.getConnection"):
            p.append("the pool's node is %s" % nodes[0]["method"])
        text = json.dumps([n.get("attributes") for n in nodes])
        for secret in ("secret-customer", "42", "1000"):
            if secret in text:
                p.append("literal %r reached the stored trace" % secret)
        return p + check_common(tree)

    def _request(self, headers):
        req = urllib.request.Request(self.url + "?client=curl", headers=headers)
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read().decode()
        if not body.startswith("ok "):
            raise RuntimeError("servlet answered %r" % body)

    def foreign(self):
        trace_id = os.urandom(16).hex()
        parent = os.urandom(8).hex()
        since = time.time_ns()
        self._request({"traceparent": "00-%s-%s-01" % (trace_id, parent)})
        return self._linked(since, trace_id, parent)

    def _linked(self, since, trace_id, parent):
        """The request that carried another tracer's trace_id and parent-id `parent` (no
        valid MAC) made a trace of its own: the servlet under a remote caller naming parent,
        and nothing was added to trace_id."""
        p = []
        try:
            self.ingest.trace(trace_id)
            p.append("the foreign trace id %s was joined" % trace_id)
        except urllib.error.HTTPError:
            pass
        end = time.time() + 15
        tree = None
        while time.time() < end and not tree:
            for t in self.ingest.traces(**{"from": str(since), "limit": "20"}):
                if t["complete"] and t.get("remote_root"):
                    cand = self.ingest.trace(t["trace_id"])
                    if parent in json.dumps(cand["roots"][:1]):
                        tree = cand
                        break
            time.sleep(0.2)
        if not tree:
            return p + ["no complete trace of its own linked to parent-id %s" % parent]
        if tree["trace_id"] == trace_id:
            p.append("the request joined the foreign trace id")
        roots = tree["roots"]
        if len(roots) != 1 or roots[0]["kind"] != "remote_caller":
            return p + ["roots: %s" % [r["kind"] for r in roots]]
        v = dict(roots[0], async_=False, children_view=app_view(roots[0]))
        p += expect_shape(v, [("(remote_caller)", False, [self._servlet(True)])])
        return p + check_common(tree)

    def forged(self):
        """A client outside the fleet copies the ids of a real trace (from a response it saw,
        or a log) into traceparent and cmr-parent, without the MAC or with a wrong one: its
        request must not graft into that trace."""
        since = time.time_ns()
        self._request({})
        victim = self.ingest.complete_trace(since, root="jakarta.servlet.http.HttpServlet.service")
        if not victim:
            return ["no victim trace"]
        root = victim["roots"][0]
        tid, seg, agent = victim["trace_id"], root["segment_id"], root["agent_id"]
        segments = victim["segments"]
        p = []
        for mac in ("", ":%x:%s" % (int(time.time()), "0" * 32)):
            since = time.time_ns()
            cp = "%s:%s:0%s" % (agent.lstrip("0") or "0", seg.lstrip("0") or "0", mac)
            self._request({"traceparent": "00-%s-%s-01" % (tid, seg), "cmr-parent": cp})
            p += self._linked(since, os.urandom(16).hex(), seg)
        after = self.ingest.trace(tid)
        if after["segments"] != segments:
            p.append("victim trace grew from %d to %d segments" % (segments, after["segments"]))
        return p

    def malformed(self):
        """Trace headers that do not parse are ignored, and the request is served: a bad
        traceparent starts a trace of its own, as without headers; a good traceparent with a
        garbage cmr-parent is another tracer's: a trace of its own, linked to it."""
        p = []
        for headers in ({"traceparent": "00-zz%s-%s-01" % ("0" * 30, "1" * 16)},
                        {"traceparent": "00-%s-%s-01" % ("0" * 32, "1" * 16)},  # all-zero trace id
                        {"traceparent": "nonsense", "cmr-parent": "1:2:3"}):
            since = time.time_ns()
            self._request(headers)
            tree = self.ingest.complete_trace(since, root="jakarta.servlet.http.HttpServlet.service")
            if not tree:
                p.append("%s: no trace rooted in the servlet" % headers)
                continue
            v, q = root_view(tree)
            p += q or expect_shape(v, [self._servlet(False)])
        trace_id, parent = os.urandom(16).hex(), os.urandom(8).hex()
        since = time.time_ns()
        self._request({"traceparent": "00-%s-%s-01" % (trace_id, parent), "cmr-parent": "x:y:z"})
        return p + self._linked(since, trace_id, parent)

    def plain(self):
        """A request without trace headers: a trace of its own rooted in the servlet, with the
        request's method, path and status, and the headers the environment names
        (request_headers) on the servlet's call, no other."""
        since = time.time_ns()
        self._request({"X-Request-Id": "req-4711", "User-Agent": "trace-test/1.0", "Cookie": "session=s3cret",
                       "X-Other": "unlisted"})
        tree = self.ingest.complete_trace(since, root="jakarta.servlet.http.HttpServlet.service")
        if not tree:
            return ["no complete trace rooted in the servlet"]
        v, p = root_view(tree)
        if p:
            return p
        p = expect_shape(v, [self._servlet(False)])
        http = tree.get("http") or {}
        if (http.get("method"), http.get("path"), http.get("status")) != ("GET", "/orders/check", 200):
            p.append("the trace's HTTP data %s, want GET /orders/check 200" % http)
        headers = {k: v for k, v in (tree["roots"][0].get("attributes") or {}).items()
                   if k.startswith("http.request.header.")}
        if headers != {"http.request.header.x-request-id": "req-4711",
                       "http.request.header.user-agent": "trace-test/1.0"}:
            p.append("the servlet's request headers %s" % headers)
        if "s3cret" in json.dumps(tree) or "unlisted" in json.dumps(tree):
            p.append("a header the environment does not name reached the stored trace")
        p += check_route(tree, "/orders/check")
        # a path mapping (/item/*): the route names the mapping, the path the request
        since = time.time_ns()
        with urllib.request.urlopen(self.url.replace("/check", "/item/42"), timeout=30) as r:
            r.read()
        item = self.ingest.complete_trace(since, root="jakarta.servlet.http.HttpServlet.service")
        if not item:
            return p + ["no complete trace of /orders/item/42"]
        if (item.get("http") or {}).get("path") != "/orders/item/42":
            p.append("the path-mapped request's HTTP data %s" % item.get("http"))
        p += check_route(item, "/orders/item/*")
        return p + check_common(tree)

    def async_servlet(self):
        """A servlet that starts async processing: what it hands to the container
        (AsyncContext.start, run by Tomcat's own pool) continues its trace, async, on
        another of Tomcat's threads, and the trace is complete once it ended."""
        since = time.time_ns()
        with urllib.request.urlopen(self.url.replace("/check", "/async"), timeout=30) as r:
            body = r.read().decode()
        if not body.startswith("async "):
            return ["the async servlet answered %r" % body]
        tree = self.ingest.complete_trace(since, root="jakarta.servlet.http.HttpServlet.service", http_status="202")
        if not tree:
            return ["no complete trace rooted in the servlet with the async part's status (202)"]
        v, p = root_view(tree)
        if p:
            return p
        p = check_completion(tree, "jakarta", self.tc_agent)
        # complete() usually hands the request's completion to Tomcat's pool (the
        # container's own processing of this request, in its trace); when the request's
        # thread has not left the container yet, that thread completes it instead
        pool = "org.apache.tomcat.util.threads.ThreadPoolExecutor.beforeExecute"
        check = ("Inventory.check", False, [("Inventory.lookup", False, [])])
        shapes = [[("jakarta.servlet.http.HttpServlet.service", False, [("AsyncOrderServlet.doGet", False, [
            (pool, True, [("AsyncOrderServlet.lambda$doGet$0", False, [check] + tail)])])])]
            for tail in ([(pool, True, [])], [])]
        q = expect_shape(v, shapes[0])
        if q and expect_shape(v, shapes[1]):
            p += q
        # on Tomcat's threads (the pool may give the task to the request's own thread once
        # it is back in the pool)
        threads = {n["thread"] for n, _ in walk(tree["roots"][0]) if n["kind"] == "call"}
        if not all(t.startswith("http-nio-") for t in threads):
            p.append("threads %s, want Tomcat's" % threads)
        p += check_common(tree, detached=True)
        # an async request nobody completes: the container times it out and answers 500
        # itself; that is the trace's status, from the completion node as well
        since = time.time_ns()
        try:
            urllib.request.urlopen(self.url.replace("/check", "/async?abandon=1"), timeout=30).read()
            p.append("the abandoned async request was answered without an error")
        except urllib.error.HTTPError as e:
            if e.code != 500:
                p.append("the abandoned async request answered %d, want 500" % e.code)
        timed_out = self.ingest.complete_trace(since, root="jakarta.servlet.http.HttpServlet.service",
                                               http_status="500")
        if not timed_out:
            return p + ["no complete trace of the timed-out async request with status 500"]
        return p + check_completion(timed_out, "jakarta", self.tc_agent)

    def jetty_async(self):
        """Async processing on Jetty 9: what the servlet hands over (AsyncContext.start, run
        by Jetty's QueuedThreadPool) continues its trace, async, on another of Jetty's
        threads, and so does the container's completion when complete() hands it to the
        pool; the trace is complete once they ended."""
        since = time.time_ns()
        with urllib.request.urlopen(self.jetty_url.replace("/check", "/async"), timeout=30) as r:
            body = r.read().decode()
        if not body.startswith("async "):
            return ["Jetty's async servlet answered %r" % body]
        tree = self.ingest.complete_trace(since, root="javax.servlet.http.HttpServlet.service", http_status="202")
        if not tree:
            return ["no complete trace rooted in Jetty's servlet with the async part's status (202)"]
        v, p = root_view(tree)
        if p:
            return p
        p = check_completion(tree, "javax", self.jetty_agent)
        pool = "org.eclipse.jetty.util.thread.QueuedThreadPool.runJob"
        level = ("jetty.JettyService$Stock.level", False, [])
        shapes = [[("javax.servlet.http.HttpServlet.service", False, [("jetty.JettyService$AsyncStockServlet.doGet", False, [
            (pool, True, [("jetty.JettyService$AsyncStockServlet.lambda$doGet$0", False, [level] + tail)])])])]
            for tail in ([(pool, True, [])], [])]
        q = expect_shape(v, shapes[0])
        if q and expect_shape(v, shapes[1]):
            p += q
        threads = {n["thread"] for n, _ in walk(tree["roots"][0]) if n["kind"] == "call"}
        if not all(t.startswith("qtp") for t in threads):
            p.append("threads %s, want Jetty's" % threads)
        if any(n["agent_id"] != self.jetty_agent for n, _ in walk(tree["roots"][0]) if n["kind"] == "call"):
            p.append("a call on another agent than Jetty's")
        http = tree.get("http") or {}
        if (http.get("method"), http.get("path")) != ("GET", "/stock/async"):
            p.append("the request's HTTP data %s, want GET /stock/async" % http)
        return p + check_common(tree, detached=True)

    def vthreads(self):
        """Virtual threads (JDK 21+): tasks on the thread-per-task executor of virtual threads
        continue the trace that submits them, one segment per virtual thread across its
        sleep (whichever carrier it comes back on), with nothing of the carriers or of the
        timer that wakes them. Then 5,000 virtual threads started at once: those that got
        one of the rings (agent.max.virtual.threads) continue the trace, none starts a
        trace of its own, and their rings come back (JVMTI's VirtualThreadEnd): a platform
        thread started after them records, and so do virtual threads again."""
        tree, v, p = self._run("vfanout 20", "vfanout:", "trace.Threads.fanout")
        if p:
            return p
        leaf = ("Leaf.work", False, [("Leaf.pause", False, [])])
        p = expect_shape(v, [("Threads.fanout", False, [("Threads.parked", True, [leaf, leaf])] * 20)])
        threads = {c["thread"] for c in v["children_view"]}
        if len(threads) != 20 or not all(t.startswith("virtual-") for t in threads):
            p.append("threads %s, want 20 virtual ones" % sorted(threads))
        jdk = sorted({n["method"] for n, _ in walk(tree["roots"][0]) if n["kind"] == "call" and
                      not n["method"].startswith("trace.")})
        if jdk:
            p.append("nodes of the JDK in the trace: %s" % jdk[:5])
        p += check_common(tree)
        since = time.time_ns()
        tree, v, q = self._run("vthreads 5000", "vthreads:", "trace.Threads.virtuals")
        if q:
            return p + q
        bodies = [n for n, _ in walk(tree["roots"][0]) if n["kind"] == "call" and short(n["method"]) == "Threads.body"]
        if not bodies:
            p.append("no virtual thread's call is in the trace")
        log("vthreads: %d of 5000 virtual threads recorded" % len(bodies))
        if any(t["root_method"] and t["root_method"].startswith("trace.Threads.body")
               for t in self.ingest.traces(**{"from": str(since), "limit": "1000"})):
            p.append("a virtual thread's call is a trace of its own")
        return p + self.thread() + [x for x in self.vthreads_again()]

    def structured(self):
        """Structured concurrency (a preview API of JDK 21+, the app runs with
        --enable-preview): the subtasks a StructuredTaskScope forks are virtual threads
        started through VirtualThread.start, each continuing the trace that forked it, async,
        across its sleep; nothing of the JDK in the trace."""
        tree, v, p = self._run("structured 5", "structured:", "trace.Threads.structured")
        if p:
            return p
        leaf = ("Leaf.work", False, [("Leaf.pause", False, [])])
        task = ("Threads.subtask", True, [("Threads.parked", False, [leaf, leaf])])
        p = expect_shape(v, [("Threads.structured", False, [task] * 5)])
        threads = {c["thread"] for c in v["children_view"]}
        if len(threads) != 5 or not all(t.startswith("virtual-") for t in threads):
            p.append("threads %s, want 5 virtual ones" % sorted(threads))
        jdk = sorted({n["method"] for n, _ in walk(tree["roots"][0]) if n["kind"] == "call" and
                      not n["method"].startswith("trace.")})
        if jdk:
            p.append("nodes of the JDK in the trace: %s" % jdk[:5])
        return p + check_common(tree)

    def vthreads_again(self):
        tree, v, p = self._run("vfanout 20", "vfanout:", "trace.Threads.fanout")
        if not p and len(v["children_view"]) != 20:
            p.append("after 5,000 virtual threads: %d of 20 recorded" % len(v["children_view"]))
        return p

    def running(self):
        since = time.time_ns()
        self.app.send("slow 8000", "slow:")
        end = time.time() + 7
        seen_running = None
        while time.time() < end and not seen_running:
            for t in self.ingest.traces(**{"from": str(since), "root": "trace.Slow.run"}):
                tree = self.ingest.trace(t["trace_id"])
                r = tree["roots"][0] if tree["roots"] else None
                if r and r.get("running") and not tree["complete"] and any(
                        c["method"].startswith("trace.Slow.step") for c in r["children"]):
                    seen_running = tree
            time.sleep(0.2)
        if not seen_running:
            return ["the running root call was not visible within 7 s"]
        tid = seen_running["trace_id"]
        end = time.time() + 20
        while time.time() < end:
            tree = self.ingest.trace(tid)
            if tree["complete"]:
                break
            time.sleep(0.3)
        else:
            return ["trace %s not complete 20 s after it started" % tid]
        v, p = root_view(tree)
        if p:
            return p
        step = ("Slow.step", False, [("Leaf.work", False, [("Leaf.pause", False, [])])])
        p = expect_shape(v, [("Slow.run", False, [step, ("Leaf.pause", False, []), step])])
        if tree["duration_ns"] < 8_000_000_000:
            p.append("duration %d ns, want >= 8 s" % tree["duration_ns"])
        return p + check_common(tree)


def until_right(name, fn):
    """Repeats a scenario until its tree is right (instrumentation arrives while the JVMs
    run), then once more: the repeat must be right at once, given AGAIN_PATIENCE_S for its
    complete trace to be stored (a loaded machine delays the store, not the tree)."""
    t0 = time.time()
    end = t0 + DEADLINE_S
    tries, problems = 0, None
    ingest = fn.__self__.ingest
    while time.time() < end:
        tries += 1
        problems = fn()
        if not problems:
            ingest.patience, saved = AGAIN_PATIENCE_S, ingest.patience
            try:
                again = fn()
            finally:
                ingest.patience = saved
            if again:
                log("FAIL %s: right after %d tries, then wrong:" % (name, tries))
                for x in again:
                    log("    " + x)
                return False
            log("ok   %s (right after %d tries, and again; %.1f s)" % (name, tries, time.time() - t0))
            return True
        time.sleep(1)
    log("FAIL %s after %d tries:" % (name, tries))
    for x in problems or []:
        log("    " + x)
    return False


# --- set-up -------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    for a in ("broker", "config", "instrumenter", "ingest", "java", "agent", "app", "webapp", "environment"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--jetty", help="the compiled Jetty service (the jetty scenario)")
    ap.add_argument("--only", help="comma-separated scenarios")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(TC_HOME, "bin", "bootstrap.jar")) or \
            not os.path.isfile(os.path.join(args.webapp, "WEB-INF", "web.xml")):
        log("SKIP: Tomcat 10 (tomcat10) or the compiled servlet is missing")
        return 77

    work = tempfile.mkdtemp(prefix="cmr-traces-")
    procs = []
    pg = None
    ok = False
    try:
        stack = Stack(work, args.broker, args.config, args.instrumenter, args.ingest, args.environment)
        procs.extend(stack.procs)
        api, agent_opts = stack.api, stack.agent_opts
        app_cp = args.app + (":" + H2_JAR if os.path.isfile(H2_JAR) else "")
        clients_ok = all(os.path.isfile(j) for j in CLIENT_JARS) and \
            os.path.isfile(os.path.join(args.app, "trace", "Clients.class"))
        if clients_ok:
            app_cp += ":" + ":".join(CLIENT_JARS)
        else:
            log("the clients scenario is skipped: an HTTP client library is missing")
        pg_ok = all(os.path.isfile(j) for j in PG_JARS) and glob.glob("/usr/lib/postgresql/*/bin/initdb")
        if pg_ok:
            pg = Postgres()
            app_cp += ":" + ":".join(PG_JARS)
        else:
            log("the pooled scenario is skipped: PostgreSQL, its JDBC driver, HikariCP or SLF4J is missing")
        preview = ["--enable-preview"] if java_feature(args.java) >= 21 else []  # StructuredTaskScope
        app = Proc("app", [args.java, "-agentpath:%s=%s,name=trace-app" % (args.agent, agent_opts)] + preview +
                   ["-cp", app_cp, "TraceApp"], work, interactive=True)
        procs.append(app)
        tc_port = free_port()
        base = tomcat_base(work, os.path.abspath(args.webapp), tc_port)
        tomcat = Proc("tomcat", [args.java, "-agentpath:%s=%s,name=trace-orders" % (args.agent, agent_opts),
                                 "-Dcatalina.home=" + TC_HOME, "-Dcatalina.base=" + base,
                                 "-Djava.io.tmpdir=" + os.path.join(base, "temp"),
                                 "-cp", TC_HOME + "/bin/bootstrap.jar:" + TC_HOME + "/bin/tomcat-juli.jar",
                                 "org.apache.catalina.startup.Bootstrap", "start"], work)
        procs.append(tomcat)
        jetty = None
        jetty_ok = clients_ok and args.jetty and all(os.path.isfile(j) for j in JETTY_JARS) and \
            os.path.isfile(os.path.join(args.jetty, "trace", "jetty", "JettyService.class"))
        if jetty_ok:
            jetty_port_file = os.path.join(work, "jetty.port")
            jetty = Proc("jetty", [args.java, "-agentpath:%s=%s,name=trace-jetty" % (args.agent, agent_opts),
                                   "-cp", args.jetty + ":" + ":".join(JETTY_JARS), "trace.jetty.JettyService",
                                   jetty_port_file], work)
            procs.append(jetty)
        else:
            log("the jetty scenario is skipped: Jetty 9, javax.servlet or an HTTP client library is missing")
        # the scenarios' classes load now, so that they are instrumented while Tomcat starts
        app.send("load trace.Nested trace.Pool trace.Threads trace.Chain trace.Sum trace.Client trace.Slow "
                 "trace.Leaf trace.Db" + (" org.h2.Driver org.h2.jdbc.JdbcConnection org.h2.jdbc.JdbcStatement "
                                          "org.h2.jdbc.JdbcPreparedStatement" if os.path.isfile(H2_JAR) else ""),
                 "loaded")
        url = "http://127.0.0.1:%d/orders/check" % tc_port
        end = time.time() + 120
        while time.time() < end:
            try:
                urllib.request.urlopen(url, timeout=5).read()
                break
            except Exception:
                if tomcat.p.poll() is not None:
                    raise RuntimeError("Tomcat ended (see its log)")
                time.sleep(0.5)
        else:
            raise RuntimeError("Tomcat did not answer within 120 s")
        # the agents' ids, from their logs
        ids = {"app": agent_id(app), "tc": agent_id(tomcat)}
        s = Scenarios(app, api, url, ids["app"], ids["tc"])
        if jetty:
            for _ in range(600):
                if os.path.exists(jetty_port_file) or jetty.p.poll() is not None:
                    break
                time.sleep(0.1)
            if not os.path.exists(jetty_port_file):
                raise RuntimeError("Jetty did not start (see its log)")
            s.jetty_url = "http://127.0.0.1:%s/stock/check" % open(jetty_port_file).read().strip()
            s.jetty_agent = agent_id(jetty)
        s.pg_url = pg.url if pg else None
        names = ["nested", "pool", "scheduled", "timer", "thread", "chain", "forkjoin", "http", "local", "foreign", "forged",
                 "malformed", "plain", "async_servlet", "running"] + (["jdbc"] if os.path.isfile(H2_JAR) else []) + \
            (["pooled"] if pg else []) + (["clients"] if clients_ok else []) + (["jetty", "jetty_async", "jetty_late", "jetty_pipelined"] if jetty else []) + \
            (["vthreads", "structured"] if java_feature(args.java) >= 21 else [])
        if args.only:
            names = args.only.split(",")
        results = [until_right(n, getattr(s, n)) for n in names]
        ok = all(results)
        app.send("exit", "bye")
    except Exception as e:  # a set-up failure: say what, and show the logs' tails
        log("FAIL: %s" % e)
        show_tails(procs)
    finally:
        code = wind_down(procs, pg, work, ok, args.keep)
    return code


if __name__ == "__main__":
    sys.exit(main())
