/*
 * Probe helper for the class-file engine's JVM tests. The JVMTI test agent appends this
 * class to the bootstrap class path; instrumented code calls these static methods. They only
 * count, through one native method that the agent registers when this class is prepared
 * (an atomic add in C): no Java method is called, so there is no recursion into instrumented
 * code, and no monitor is taken (a contended monitor in a thread that is still attaching,
 * before it has its Thread object, crashes HotSpot 25). The agent reads the counters at VM
 * death. Signatures must match classfile/tools/cf_testprobes.c; the
 * counter numbers must match tests/classfile/agent/cf_test_agent.c.
 */
package cmrtest;

public final class Probes {
  private Probes() {}

  static final int ENTER = 0, EXIT = 1, EXC_EXIT = 2;                // timer kind
  static final int ANCHOR_ENTER = 3, ANCHOR_EXIT = 4, ANCHOR_EXC = 5; // anchor kind
  static final int COND_ENTER = 6, COND_EXIT = 7, COND_EXC = 8;       // conditional kind
  static final int BAD_ARGS = 9;                                      // arguments not as expected

  private static native void count(int counter);

  public static void enter(long id) { count(ENTER); }
  public static void exit(long id) { count(EXIT); }
  public static void excExit(Throwable t, long id) {
    if (t == null) count(BAD_ARGS);
    count(EXC_EXIT);
  }

  public static void anchorEnter(long id, String name) {
    if (name == null) count(BAD_ARGS);
    count(ANCHOR_ENTER);
  }
  public static void anchorExit(long id) { count(ANCHOR_EXIT); }
  public static void anchorExc(long id) { count(ANCHOR_EXC); }

  public static boolean condEnter(long id, int k) {
    if (k != 123456) count(BAD_ARGS);
    count(COND_ENTER);
    return true;
  }
  public static long condExit(long v, String ctx) {
    if (v != 7 || ctx == null) count(BAD_ARGS);
    count(COND_EXIT);
    return v;
  }
  public static void condExc(Object t, int k) {
    if (k != -1 || t == null) count(BAD_ARGS);
    count(COND_EXC);
  }
}
