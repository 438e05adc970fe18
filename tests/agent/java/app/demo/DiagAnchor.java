package demo;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * The selected method of the diagnosis tests (tests/e2e/test_e2e_diagnosis.c): run is the
 * anchor, DiagHelper's methods (which no environment instruments) are what the diagnosis
 * discovers under it and instruments conditionally.
 */
public class DiagAnchor {
    /**
     * Calls DiagHelper.step `calls` times on this thread, then sleeps sleepMs (time in the
     * anchor with no conditional call: what the overhead budget divides by). With latches,
     * it then tells the caller it is inside (inside.countDown) and stays in until `leave` is
     * counted down: another thread can run the helper while this thread's context is open.
     */
    public static long run(int calls, long sleepMs, CountDownLatch inside, CountDownLatch leave)
            throws InterruptedException {
        long sum = 0;
        for (int i = 0; i < calls; i++)
            sum += DiagHelper.step(i);
        if (sleepMs > 0)
            Thread.sleep(sleepMs);
        if (inside != null) {
            inside.countDown();
            if (!leave.await(30, TimeUnit.SECONDS))
                sum = -1;
        }
        return sum;
    }
}
