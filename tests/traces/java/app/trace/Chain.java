package trace;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ForkJoinPool;

/** run: two CompletableFuture chains, each supplyAsync(first) -> thenApplyAsync(second) ->
 *  thenApply(third). One on a ForkJoinPool of its own, one on the default executor (the
 *  common pool, or a thread per task when the common pool has a single thread). `first`
 *  waits until both chains are built, so that no stage is complete when the next one is
 *  added (third would then run on the caller's thread), however slow the machine. */
public class Chain {
    static final ForkJoinPool FJ = new ForkJoinPool(2);
    static volatile CountDownLatch built;

    public static long run() {
        CountDownLatch gate = new CountDownLatch(1);
        built = gate;
        CompletableFuture<Long> a = CompletableFuture.supplyAsync(Chain::first, FJ)
                .thenApplyAsync(Chain::second, FJ).thenApply(Chain::third);
        CompletableFuture<Long> b = CompletableFuture.supplyAsync(Chain::first)
                .thenApplyAsync(Chain::second).thenApply(Chain::third);
        gate.countDown();
        return a.join() + b.join();
    }

    static long first() {
        try {
            built.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return Leaf.work(1) & 0xff;
    }

    static long second(long x) {
        return x + (Leaf.work(1) & 0xff);
    }

    static long third(long x) {
        return x + 1;
    }
}
