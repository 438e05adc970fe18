package demo;

/** A call tree of depth+1 invocations whose innermost one sleeps: a stalled call. */
public class Slow {
    public static long call(int depth, long ms) throws InterruptedException {
        if (depth > 0)
            return 1 + call(depth - 1, ms);
        Thread.sleep(ms);
        return 1;
    }
}
