package app;

class Sync {
  private int v;
  synchronized int inc() { return ++v; }
  synchronized void fail() { v += 100; throw new UnsupportedOperationException("sync"); }
  int block(Object lock) {
    synchronized (lock) {
      if (v > 1000) return -1;
      v += 5;
    }
    return v;
  }
  static synchronized String stat(String s) { return s + s; }

  static String run() throws InterruptedException {
    Sync s = new Sync();
    Thread[] ts = new Thread[4];
    for (int i = 0; i < ts.length; i++) {
      ts[i] = new Thread(() -> { for (int k = 0; k < 1000; k++) s.inc(); });
      ts[i].start();
    }
    for (Thread t : ts) t.join();
    String r = s.inc() + "," + s.block(new Object());
    try { s.fail(); } catch (UnsupportedOperationException e) { r += "," + e.getMessage(); }
    return r + "," + s.v + "," + stat("ab");
  }
}
