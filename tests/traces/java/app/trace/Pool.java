package trace;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

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

    static long task() {
        return Leaf.work(1);
    }
}
