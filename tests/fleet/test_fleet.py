#!/usr/bin/env python3
"""A fleet of three JVMs under load, every request one complete trace (docs/COVERAGE.md).

Starts the embedded broker, the three CMR workers, a PostgreSQL server of Debian's, and
three JVMs with the agent, all on loopback with free ports, in a scratch directory removed
at the end:

  front  Tomcat 10, a servlet (fleet.front.FrontServlet) that calls the stock service with
         OkHttp 3
  stock  Jetty 9 (fleet.middle.StockService): reads the order's parts from PostgreSQL through
         HikariCP, then prices them in parallel on a thread pool, each part a call to the
         price service with Apache HttpClient 4
  price  the JDK's HttpServer (fleet.back.PriceService)

Once the instrumentation is in place (a request whose trace is right, bounded), a load
generator sends REQUESTS requests from CONCURRENCY threads, and the test counts the traces
that started since: exactly one per request, each complete, across the three JVMs, rooted in
the front servlet, with the expected nodes (the OkHttp call, the database's connection and
query with its SQL, one priced part per pool task with its Apache call and the price
service under it), no missing parent and no remote caller anywhere, and no other trace
(no orphan segment made a trace of its own).

Exit status: 0 passed, 1 failed, 77 skipped (a library or server of the fleet is missing).
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from cmrstack import (TC_HOME, Postgres, Proc, Stack, agent_id, free_port, java_feature, log,  # noqa: E402
                      show_tails, tomcat_base, walk, wind_down)

J = "/usr/share/java/"
STOCK_JARS = [J + j for j in (
    "jetty9-server.jar", "jetty9-servlet.jar", "jetty9-http.jar", "jetty9-io.jar", "jetty9-util.jar",
    "jetty9-security.jar", "servlet-api.jar", "httpclient.jar", "httpcore.jar", "commons-logging.jar",
    "HikariCP.jar", "slf4j-api.jar", "slf4j-nop.jar", "postgresql.jar")]
SERVLET = "jakarta.servlet.http.HttpServlet.service"
STOCK_SERVLET = "javax.servlet.http.HttpServlet.service"
PRICE_ENTRY = "com.sun.net.httpserver.Filter$Chain.doFilter"
SQL = "select part from parts where order_id = ? order by part"


def wait_port(proc, path, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(path):
            return int(open(path).read().strip())
        if proc.p.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError("%s did not start (see its log)" % proc.name)


def method(n):
    return n["method"].split("(")[0] if n["kind"] == "call" else "(" + n["kind"] + ")"


def check_trace(tree, agents, virtual):
    """Problems of one request's trace (empty: right); virtual: the pricing fan-out runs on
    virtual threads (JDK 21+), else on a pool of platform threads."""
    p = []
    if not tree["complete"] or tree["jvms"] != 3 or len(tree["roots"]) != 1:
        return ["complete=%s jvms=%d roots=%d" % (tree["complete"], tree["jvms"], len(tree["roots"]))]
    nodes = [n for n, _ in walk(tree["roots"][0])]
    names = [method(n) for n in nodes]
    for kind in ("(missing_parent)", "(remote_caller)"):
        if kind in names:
            p.append("a %s node" % kind)
    if not names[0].startswith(SERVLET) or tree["roots"][0]["agent_id"] != agents["front"]:
        p.append("root %s on %s" % (names[0], tree["roots"][0]["agent_id"]))
    http = tree.get("http") or {}
    if (http.get("method"), http.get("path"), http.get("status")) != ("GET", "/front/order", 200):
        p.append("the trace's HTTP data %s" % http)
    okhttp = [n for n in nodes if method(n) == "okhttp3.RealCall.execute"]
    if len(okhttp) != 1 or (okhttp[0].get("attributes") or {}).get("http.response.status_code") != "200":
        p.append("OkHttp calls: %s" % [n.get("attributes") for n in okhttp])
    stock = [n for n in nodes if method(n) == STOCK_SERVLET]
    if len(stock) != 1 or stock[0]["agent_id"] != agents["stock"] or not stock[0]["remote"] or stock[0]["async"]:
        p.append("stock servlets: %s" % [(n["agent_id"], n["remote"], n["async"]) for n in stock])
    sql = [(n.get("attributes") or {}).get("db.statement") for n in nodes
           if method(n).startswith("com.zaxxer.hikari.pool.HikariProxyPreparedStatement.executeQuery")]
    if sql != [SQL]:
        p.append("queries %s" % sql)
    if sum(1 for n in names if n == "com.zaxxer.hikari.HikariDataSource.getConnection") != 1:
        p.append("not one pool checkout")
    # the pricing pool's tasks (a request that makes HikariCP open a connection also has the
    # pool's "connection adder" task in its trace: it asked for it)
    if virtual:  # a virtual thread per price: its first call opens a segment of its own
        tasks = [n for n, parent in walk(tree["roots"][0]) if n["thread"].startswith("virtual-") and
                 n["agent_id"] == agents["stock"] and (parent is None or parent["thread"] != n["thread"])]
        if [method(n) for n in tasks] != ["fleet.middle.StockService$Pricing.lambda$total$0"] * 3 and \
                [method(n) for n in tasks] != ["fleet.middle.StockService$Pricing.price"] * 3:
            p.append("pricing on virtual threads: %s" % [method(n) for n in tasks])
    else:
        tasks = [n for n in nodes if method(n) == "java.util.concurrent.ThreadPoolExecutor.beforeExecute" and
                 n["agent_id"] == agents["stock"] and n["thread"] == "pricing"]
    if len(tasks) != 3 or not all(t["async"] for t in tasks):
        p.append("%d pricing tasks (async: %s)" % (len(tasks), [t["async"] for t in tasks]))
    apache = [n for n in nodes if method(n) == "org.apache.http.impl.client.InternalHttpClient.doExecute"]
    prices = [n for n in nodes if method(n) == PRICE_ENTRY]
    if len(apache) != 3 or any((a.get("attributes") or {}).get("http.response.status_code") != "200" for a in apache):
        p.append("Apache calls: %s" % [a.get("attributes") for a in apache])
    if len(prices) != 3 or any(n["agent_id"] != agents["price"] or not n["remote"] or n["async"] for n in prices):
        p.append("price service entries: %s" % [(n["agent_id"], n["remote"], n["async"]) for n in prices])
    for a in apache:  # the price service's tree under each Apache call
        if [method(c) for c in a.get("children", [])] != [PRICE_ENTRY]:
            p.append("under an Apache call: %s" % [method(c) for c in a.get("children", [])])
    return p


def named_transaction(api, name, want, timeout=60):
    """The metrics' transaction `name` (the agents name an incoming request's transaction by
    its method and route) over the last hour, once its count reaches `want`, or as it is when
    the time is up (None: not there)."""
    end = time.time() + timeout
    while True:
        items = api.get("/api/metrics/top", env="fleet", kind="transaction", stat="count", last="1h",
                        limit="50").get("items", [])
        hit = next((i for i in items if i.get("name") == name), None)
        if (hit and hit["count"] >= want) or time.time() > end:
            return hit
        time.sleep(2)


def traces_since(api, since_ns, want, timeout=60):
    """The summaries of every trace that started after since_ns, once `want` of them are
    complete or the time is up (then as they are)."""
    end = time.time() + timeout
    while True:
        got = api.traces(**{"from": str(since_ns), "limit": "5000"})
        if sum(1 for t in got if t["complete"]) >= want or time.time() > end:
            time.sleep(1)  # whatever else comes late (an orphan) comes now
            return api.traces(**{"from": str(since_ns), "limit": "5000"})
        time.sleep(0.5)


def warm_until_right(api, url, agents, virtual, limit_s=240):
    """Sends a request at a time until its trace is right: the instrumentation arrives
    while the JVMs run (bounded)."""
    end, problems = time.time() + limit_s, ["no request answered"]
    while time.time() < end:
        since = time.time_ns()
        try:
            urllib.request.urlopen(url + "?id=1", timeout=30).read()
        except OSError as e:
            problems = ["request failed: %s" % e]
            time.sleep(1)
            continue
        got = [t for t in traces_since(api, since, 1, timeout=5) if t["complete"]]
        problems = check_trace(api.trace(got[0]["trace_id"]), agents, virtual) if got else ["no complete trace"]
        if not problems:
            return
        time.sleep(1)
    raise RuntimeError("no right trace within %d s: %s" % (limit_s, problems))


def cpu_s(pid):
    """CPU seconds (user + system) process pid has used, from /proc."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid, top=8):
    """A JVM's threads grouped by name (digits dropped), their CPU seconds since it started,
    the top ones."""
    by = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                st = f.read()
        except OSError:
            continue
        name = re.sub(r"[0-9]+", "#", st[st.index("(") + 1:st.rindex(")")])
        fields = st.rsplit(")", 1)[1].split()
        by[name] = by.get(name, 0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return ", ".join("%s %.1f" % kv for kv in sorted(by.items(), key=lambda kv: -kv[1])[:top])


def each_thread(pid, set_one):
    """Calls set_one(tid) for every thread of process pid: Linux keeps nice values and CPU
    affinity per thread, and threads started later inherit their creator's."""
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            set_one(int(tid))
        except OSError:
            pass  # the thread ended meanwhile


def renice(pid, nice):
    """Sets the nice value of every thread of process pid."""
    each_thread(pid, lambda tid: os.setpriority(os.PRIO_PROCESS, tid, nice))


def pin(pid, cpus):
    """Keeps every thread of process pid on cpus."""
    each_thread(pid, lambda tid: os.sched_setaffinity(tid, cpus))


def pinning():
    """CMR_BENCH_PIN=APP/OTHER (CPU lists, e.g. 0/1): the CPUs of the application (the three
    JVMs and PostgreSQL) and of the rest (the CMR, wrk) during the measured load; None when
    unset."""
    v = os.environ.get("CMR_BENCH_PIN")
    if not v:
        return None
    m = re.fullmatch(r"([0-9]+(?:,[0-9]+)*)/([0-9]+(?:,[0-9]+)*)", v.strip())
    cpus = [{int(c) for c in m.group(i).split(",")} for i in (1, 2)] if m else None
    if not cpus or cpus[0] & cpus[1] or not (cpus[0] | cpus[1]) <= os.sched_getaffinity(0):
        sys.exit("CMR_BENCH_PIN must be two disjoint CPU lists of this machine, APP/OTHER (e.g. 0/1), not %r" % v)
    return cpus


def wrk(url, seconds, conns, cpus=None):
    """wrk's requests/s, p50 and p99 (ms) and non-2xx count for seconds of closed-loop load
    (on cpus when given)."""
    on = ["taskset", "-c", ",".join(str(c) for c in sorted(cpus))] if cpus else []
    out = subprocess.run(on + ["wrk", "-t2", "-c%d" % conns, "-d%ds" % seconds, "--latency", url],
                         capture_output=True, text=True, timeout=seconds + 60).stdout

    def ms(pct):
        m = re.search(r"\s%s%%\s+([\d.]+)(us|ms|s)\b" % pct, out)
        return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]

    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), ms(50), ms(99), \
        int(errors.group(1)) if errors else 0


def bench(args):
    """The fleet's throughput, latency and CPU per request with and without the agents
    (docs/benchmarks.md), each run on fresh JVMs warmed with as much load as is measured;
    with the agents once their traces are right. The CMR runs on the same machine."""
    pins = pinning()
    nice = os.environ.get("CMR_BENCH_CMR_NICE")
    if nice and not re.fullmatch(r"-?[0-9]+", nice.strip()):
        sys.exit("CMR_BENCH_CMR_NICE must be a nice value (an integer, e.g. 19), not %r" % nice)
    pg = Postgres()
    rows = []
    virtual = java_feature(args.java) >= 21
    try:
        for r in range(args.rounds):
            for with_agents in (False, True):
                work = tempfile.mkdtemp(prefix="cmr-fleet-bench-")
                procs = []
                try:
                    opts, api = None, None
                    if with_agents:
                        stack = Stack(work, args.broker, args.config, args.instrumenter, args.ingest,
                                      args.environment, quick=False)
                        procs.extend(stack.procs)
                        opts, api = stack.agent_opts, stack.api
                    url, agents = start_fleet(work, args, pg.url, procs, opts)
                    if with_agents:
                        warm_until_right(api, url, agents, virtual)
                    wrk(url + "?id=1", args.bench, args.concurrency)  # warm-up
                    jvms = [p for p in procs if p.name in ("front", "stock", "price")]
                    cmr = [p for p in procs if p.name in ("config", "instrumenter", "ingest", "broker")]
                    if nice:  # the CMR only on what the JVMs leave
                        for q in cmr:
                            renice(q.p.pid, int(nice))
                    if pins:  # the application on its CPUs, the CMR and the load generator on others
                        for pid in [q.p.pid for q in jvms] + pg.pids():
                            pin(pid, pins[0])
                        for q in cmr:
                            pin(q.p.pid, pins[1])
                    c0 = [cpu_s(p.p.pid) for p in jvms + cmr]
                    perf = []
                    if with_agents and os.environ.get("CMR_BENCH_PERF"):  # a profile of each JVM and CMR process
                        perf = [subprocess.Popen(["perf", "record", "-F", "499", "-g", "-q", "-p", str(q.p.pid),
                                                  "-o", "%s/perf-%s.data" % (os.environ["CMR_BENCH_PERF"], q.name),
                                                  "--", "sleep", str(max(1, args.bench - 2))],
                                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for q in jvms + cmr]
                    rps, p50, p99, errors = wrk(url + "?id=1", args.bench, args.concurrency, pins and pins[1])
                    for pp in perf:
                        pp.wait()
                    c1 = [cpu_s(p.p.pid) for p in jvms + cmr]
                    n = rps * args.bench
                    jvm_us = sum(c1[i] - c0[i] for i in range(len(jvms))) / n * 1e6
                    cmr_us = sum(c1[i] - c0[i] for i in range(len(jvms), len(c0))) / n * 1e6
                    rows.append((with_agents, rps, p50, p99, errors, jvm_us, cmr_us))
                    each = ", ".join("%s %.0f" % (q.name, (c1[i] - c0[i]) / n * 1e6) for i, q in enumerate(jvms + cmr))
                    log("round %d %-15s %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms  non-2xx %d  JVMs %6.0f us/req  "
                        "CMR %6.0f us/req" % (r + 1, "with agents" if with_agents else "without agents", rps, p50, p99,
                                               errors, jvm_us, cmr_us))
                    log("        CPU us per request: " + each)
                    if os.environ.get("CMR_BENCH_THREADS"):  # where each JVM's CPU went, by thread
                        for q in jvms:
                            log("        %s threads (CPU s since start): %s" % (q.name, thread_cpu(q.p.pid)))
                except BaseException:
                    log("kept the work directory of the failed run: %s" % work)  # its processes' logs
                    work = None
                    raise
                finally:
                    for p in reversed(procs):
                        p.stop()
                    if work:
                        shutil.rmtree(work, ignore_errors=True)
    finally:
        pg.stop()
    for w in (False, True):
        v = [x for x in rows if x[0] == w]
        log("%-15s median of %d: %.0f req/s, p99 %.2f ms, JVMs %.0f us/req" % (
            "with agents" if w else "without agents", len(v), sorted(x[1] for x in v)[len(v) // 2],
            sorted(x[3] for x in v)[len(v) // 2], sorted(x[5] for x in v)[len(v) // 2]))
    return 0 if all(x[4] == 0 for x in rows) else 1


def start_fleet(work, args, db_url, procs, agent_opts):
    """The three services (with the agent when agent_opts is given), appended to procs:
    the front's URL, and the agents' ids (empty without agents)."""
    extra = os.environ.get("CMR_BENCH_JVM_FLAGS", "").split()  # e.g. a perf map for CMR_BENCH_PERF

    def agent(name):
        return extra + (["-agentpath:%s=%s,name=fleet-%s" % (args.agent, agent_opts, name)] if agent_opts else [])

    price = Proc("price", [args.java] + agent("price") + ["-cp", args.price, "fleet.back.PriceService",
                                                          os.path.join(work, "price.port")], work)
    procs.append(price)
    price_url = "http://127.0.0.1:%d/price" % wait_port(price, os.path.join(work, "price.port"))
    stock = Proc("stock", [args.java] + agent("stock") + [
        "-cp", args.stock + ":" + ":".join(STOCK_JARS), "fleet.middle.StockService", os.path.join(work, "stock.port"),
        db_url, price_url], work)
    procs.append(stock)
    stock_url = "http://127.0.0.1:%d/stock/check" % wait_port(stock, os.path.join(work, "stock.port"))
    tc_port = free_port()
    base = tomcat_base(work, os.path.abspath(args.webapp), tc_port, context="front")
    front = Proc("front", [args.java] + agent("front") + [
        "-Dfleet.stock=" + stock_url, "-Dcatalina.home=" + TC_HOME, "-Dcatalina.base=" + base,
        "-Djava.io.tmpdir=" + os.path.join(base, "temp"),
        "-cp", TC_HOME + "/bin/bootstrap.jar:" + TC_HOME + "/bin/tomcat-juli.jar",
        "org.apache.catalina.startup.Bootstrap", "start"], work)
    procs.append(front)
    url = "http://127.0.0.1:%d/front/order" % tc_port
    end = time.time() + 120
    while time.time() < end:  # Tomcat answers
        try:
            urllib.request.urlopen(url + "?id=1", timeout=10).read()
            break
        except OSError:
            if front.p.poll() is not None:
                raise RuntimeError("Tomcat ended (see its log)")
            time.sleep(0.5)
    agents = {"front": agent_id(front), "stock": agent_id(stock), "price": agent_id(price)} if agent_opts else {}
    return url, agents


def main():
    ap = argparse.ArgumentParser()
    for a in ("broker", "config", "instrumenter", "ingest", "java", "agent", "webapp", "stock", "price",
              "environment"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--bench", type=int, metavar="SECONDS",
                    help="no test: throughput and latency with and without the agents, SECONDS of wrk load each")
    ap.add_argument("--rounds", type=int, default=2, help="--bench: runs of each")
    args = ap.parse_args()
    missing = [j for j in STOCK_JARS if not os.path.isfile(j)]
    if not os.path.isfile(os.path.join(TC_HOME, "bin", "bootstrap.jar")) or missing or \
            not os.path.isfile(os.path.join(args.webapp, "WEB-INF", "classes", "fleet", "front", "FrontServlet.class")):
        log("SKIP: Tomcat 10, the compiled services or a library is missing %s" % missing)
        return 77

    if args.bench:
        return bench(args)
    virtual = java_feature(args.java) >= 21
    work = tempfile.mkdtemp(prefix="cmr-fleet-")
    procs, pg, ok = [], None, False
    try:
        stack = Stack(work, args.broker, args.config, args.instrumenter, args.ingest, args.environment)
        procs.extend(stack.procs)
        api = stack.api
        pg = Postgres()
        url, agents = start_fleet(work, args, pg.url, procs, stack.agent_opts)
        def request(i):
            with urllib.request.urlopen("%s?id=%d" % (url, i), timeout=30) as r:
                return r.status, r.read().decode()

        t0 = time.time()
        warm_until_right(api, url, agents, virtual)
        log("instrumented: a request's trace is right after %.1f s" % (time.time() - t0))
        time.sleep(2)  # the warm-up's stragglers are older than the load's window

        since = time.time_ns()
        t1 = time.time()
        with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
            answers = list(pool.map(request, range(args.requests)))
        secs = time.time() - t1
        bad = [a for a in answers if a[0] != 200 or not a[1].startswith("order ")]
        log("load: %d requests from %d threads in %.1f s, %d bad answers" % (
            args.requests, args.concurrency, secs, len(bad)))
        got = traces_since(api, since, args.requests)
        front_roots = [t for t in got if (t.get("root_method") or "").startswith(SERVLET)]
        others = [t for t in got if t not in front_roots]
        problems = []
        if bad:
            problems.append("%d requests failed: %s" % (len(bad), bad[:3]))
        if len(front_roots) != args.requests:
            problems.append("%d traces rooted in the front servlet, want %d" % (len(front_roots), args.requests))
        if others:
            problems.append("%d other traces (orphans): %s" % (
                len(others), sorted({(t.get("root_method") or "?").split("(")[0] for t in others})))
        wrong = 0
        for t in front_roots:
            p = check_trace(api.trace(t["trace_id"]), agents, virtual)
            if p:
                wrong += 1
                if wrong <= 3:
                    problems.append("trace %s: %s" % (t["trace_id"], "; ".join(p)))
        if wrong:
            problems.append("%d of %d traces wrong" % (wrong, len(front_roots)))
        log("traces: %d rooted in the front servlet, %d complete across 3 JVMs and right, %d others" % (
            len(front_roots), len(front_roots) - wrong, len(others)))
        # the metrics: the front's requests are one transaction named by the servlet's route
        # (its context and mapping), with the servlet's service as its root method
        front_tx = named_transaction(api, "GET /front/order", args.requests)
        if not front_tx or front_tx["count"] < args.requests or \
                not front_tx.get("root_method", "").startswith(SERVLET):
            problems.append("the metrics' transaction GET /front/order: %s" % front_tx)
        else:
            log("metrics: transaction %s, %d calls, root method %s" % (
                front_tx["name"], front_tx["count"], front_tx["root_method"].split("(")[0]))
        for x in problems:
            log("FAIL: " + x)
        ok = not problems
    except Exception as e:  # a set-up failure: say what, and show the logs' tails
        log("FAIL: %s" % e)
        show_tails(procs)
    finally:
        code = wind_down(procs, pg, work, ok, args.keep)
    return code


if __name__ == "__main__":
    sys.exit(main())
