package trace;

import java.util.concurrent.ForkJoinPool;
import java.util.concurrent.RecursiveTask;

/** total(n): sums 1..n with a RecursiveTask that splits down to 4 numbers (fork the left
 *  half, compute the right half, join). */
public class Sum extends RecursiveTask<Long> {
    static final ForkJoinPool FJ = new ForkJoinPool(2);
    final int lo, hi;

    Sum(int lo, int hi) {
        this.lo = lo;
        this.hi = hi;
    }

    public static long total(int n) {
        return FJ.invoke(new Sum(1, n));
    }

    @Override
    protected Long compute() {
        if (hi - lo < 4) {
            Leaf.pause(1);
            long s = 0;
            for (int i = lo; i <= hi; i++)
                s += i;
            return s;
        }
        int mid = (lo + hi) >>> 1;
        Sum left = new Sum(lo, mid);
        left.fork();
        long right = new Sum(mid + 1, hi).compute();
        return left.join() + right;
    }
}
