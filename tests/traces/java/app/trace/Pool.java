package trace;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/** run submits TASKS tasks (each: Task.call -> Leaf.work) to a fixed pool of 2 reused
 *  threads and waits for them. */
public class Pool {
    static final ExecutorService POOL = Executors.newFixedThreadPool(2, r -> {
        Thread t = new Thread(r, "trace-pool");
        t.setDaemon(true);
        return t;
    });

    public static int run(int tasks) throws Exception {
        List<Future<Long>> f = new ArrayList<>();
        for (int i = 0; i < tasks; i++)
            f.add(POOL.submit(Pool::task));
        int n = 0;
        for (Future<Long> x : f) {
            x.get();
            n++;
        }
        return n;
    }

    static final ScheduledExecutorService TIMER = Executors.newScheduledThreadPool(1, r -> {
        Thread t = new Thread(r, "trace-timer");
        t.setDaemon(true);
        return t;
    });

    /** scheduled: one task run 5 ms later by a scheduled pool. */
    public static long scheduled() throws Exception {
        return TIMER.schedule(Pool::task, 5, TimeUnit.MILLISECONDS).get();
    }

    static final java.util.Timer UTIL_TIMER = new java.util.Timer("trace-util-timer", true);

    /** timer: a java.util.Timer task every 5 ms (Tick.run -> task), cancelled after its
     *  third run: the first continues this trace, the later ones start their own. */
    public static long timer() throws Exception {
        Tick t = new Tick(3);
        UTIL_TIMER.schedule(t, 5, 5);
        t.runs.await();
        t.cancel();
        return t.sum;
    }

    static final class Tick extends java.util.TimerTask {
        final java.util.concurrent.CountDownLatch runs;
        volatile long sum;

        Tick(int n) {
            runs = new java.util.concurrent.CountDownLatch(n);
        }

        @Override
        public void run() {
            if (runs.getCount() > 0) {
                sum += task();
                runs.countDown();
            }
        }
    }

    static long task() {
        return Leaf.work(1);
    }
}
