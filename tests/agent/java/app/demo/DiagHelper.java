package demo;

/**
 * Called by DiagAnchor.run (in a diagnosis' context), and directly by AgentTestApp (outside
 * any context, on its own thread or on another one while the anchor runs): each step is two
 * invocations, step and inner.
 */
public class DiagHelper {
    public static long step(int i) {
        return inner(i) + 1;
    }

    private static long inner(int i) {
        return (long) i * 31 % 7;
    }
}
