package demo;

import cmr.agent.Probe;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;

/**
 * Hands work to a thread pool and calls the probes' context API itself, exactly where the
 * instrumentation of the JDK's hand-off points calls it: ctxCapture on the submitting
 * thread, ctxBegin / ctxEnd around the task on the worker. Only used under the agent (the
 * Probe class is on the bootstrap class path then).
 */
public class Fanout {
    public static final long SITE = 0x5A5A5A5AL;

    public static int run(ExecutorService pool, int tasks) throws Exception {
        List<Future<?>> done = new ArrayList<>();
        for (int i = 0; i < tasks; i++) {
            Runnable task = () -> Work.call(2);
            Probe.ctxCapture(task, SITE);
            done.add(pool.submit(() -> {
                Probe.ctxBegin(task, SITE);
                try {
                    task.run();
                } finally {
                    Probe.ctxEnd(SITE);
                }
            }));
        }
        for (Future<?> f : done)
            f.get();
        return tasks;
    }
}
