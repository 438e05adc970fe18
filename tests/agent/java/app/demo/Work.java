package demo;

/** A call tree of depth+1 invocations per call: what the probes record in the tests. */
public class Work {
    public static long call(int depth) {
        return depth == 0 ? 1 : 1 + call(depth - 1);
    }
}
