package demo;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;

/** Hands work to a ThreadPoolExecutor the ordinary way: the context follows it only
 *  through the instrumentation of the JDK's ThreadPoolExecutor. */
public class PoolWork {
    public static int run(ExecutorService pool, int tasks) throws InterruptedException {
        CountDownLatch done = new CountDownLatch(tasks);
        for (int i = 0; i < tasks; i++)
            pool.execute(() -> {
                Work.call(2);
                done.countDown();
            });
        done.await();
        return tasks;
    }
}
