/*
 * Probe helper for the class-file engine's JVM tests. The JVMTI test agent appends this
 * class to the bootstrap class path; instrumented code calls these static methods. They only
 * count (static synchronized: no Java method is called, so there is no recursion into
 * instrumented code), and the agent reads the counters with JNI at VM death.
 * Signatures must match cmr-instrumenter/classfile/tools/cf_testprobes.c.
 */
package cmrtest;

public final class Probes {
  private Probes() {}

  static long enter, exit, excExit;           // timer kind
  static long anchorEnter, anchorExit, anchorExc; // anchor kind
  static long condEnter, condExit, condExc;   // conditional kind
  static long badArgs;                        // constant arguments not as expected

  public static synchronized void enter(long id) { enter++; }
  public static synchronized void exit(long id) { exit++; }
  public static synchronized void excExit(Throwable t, long id) {
    if (t == null) badArgs++;
    excExit++;
  }

  public static synchronized void anchorEnter(long id, String name) {
    if (name == null) badArgs++;
    anchorEnter++;
  }
  public static synchronized void anchorExit(long id) { anchorExit++; }
  public static synchronized void anchorExc(long id) { anchorExc++; }

  public static synchronized boolean condEnter(long id, int k) {
    if (k != 123456) badArgs++;
    condEnter++;
    return true;
  }
  public static synchronized long condExit(long v, String ctx) {
    if (v != 7 || ctx == null) badArgs++;
    condExit++;
    return v;
  }
  public static synchronized void condExc(Object t, int k) {
    if (k != -1 || t == null) badArgs++;
    condExc++;
  }
}
