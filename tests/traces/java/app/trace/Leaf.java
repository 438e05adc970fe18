package trace;

/** The work at the end of every scenario: a little CPU, then a short sleep, so that every
 *  node has a measurable duration. */
public class Leaf {
    static volatile long sink;

    public static long work(int n) {
        long s = 0;
        for (int i = 0; i < 1000 * n; i++)
            s += i ^ (s >>> 3);
        sink = s;
        pause(1);
        return s;
    }

    static void pause(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
