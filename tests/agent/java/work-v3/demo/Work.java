package demo;

/**
 * Version 3 of demo.Work, with one more method: bytes the JVM cannot go back from to the
 * original ones (RetransformClasses would delete a method). The agent's cache of
 * instrumented classes serves it at load in test_agent_jvm, to make restoring the
 * original bytes fail.
 */
public class Work {
    public static long call(int depth) {
        return depth == 0 ? 1 : 1 + call(depth - 1);
    }

    public static int extra() {
        return 3;
    }
}
