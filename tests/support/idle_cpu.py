#!/usr/bin/env python3
"""The CPU the CMR's processes use while idle (docs/benchmarks.md, "The CMR while idle"):
the embedded broker, cmr-config, cmr-instrumenter and cmr-ingest of a build, started as
the fleet benchmark starts them (tests/fleet/environment-default.yaml applied), left alone
for a settling spell, then measured over SECONDS: each process's CPU (/proc/PID/stat) in
ms per second and its librdkafka handles (one `rdk:main` thread each).

    idle_cpu.py BUILD_DIR [SECONDS]
"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cmrstack import Stack  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cpu_s(pid):
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def handles(pid):
    tasks = "/proc/%d/task" % pid
    return sum(1 for t in os.listdir(tasks) if open("%s/%s/comm" % (tasks, t)).read().strip() == "rdk:main")


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip())
        return 2
    b, seconds = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 40
    work = tempfile.mkdtemp(prefix="cmr-idle-")
    stack = None
    try:
        stack = Stack(work, b + "/cmr-broker/cmr-broker", b + "/cmr-config/cmr-config",
                      b + "/cmr-instrumenter/cmr-instrumenter", b + "/cmr-ingest/cmr-ingest",
                      os.path.join(ROOT, "tests/fleet/environment-default.yaml"), quick=False)
        time.sleep(15)  # group joins, topics read whole
        c0 = [cpu_s(p.p.pid) for p in stack.procs]
        time.sleep(seconds)
        c1 = [cpu_s(p.p.pid) for p in stack.procs]
        total = 0.0
        for p, a, z in zip(stack.procs, c0, c1):
            total += (z - a) / seconds * 1000
            print("%-13s %5.1f ms of CPU a second  (%d librdkafka handles)" % (p.name, (z - a) / seconds * 1000,
                                                                             handles(p.p.pid)), flush=True)
        print("%-13s %5.1f ms of CPU a second" % ("all", total), flush=True)
    finally:
        for p in reversed(stack.procs if stack else []):
            p.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
