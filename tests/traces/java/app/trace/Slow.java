package trace;

/** run(ms): a root call that lasts ms, with a first child done at once (so the trace is
 *  visible, and running, long before it ends). */
public class Slow {
    public static void run(long ms) {
        step();
        Leaf.pause(ms);
        step();
    }

    static void step() {
        Leaf.work(1);
    }
}
