package app;

class Types {
  static long l(long a, long b) { return a * b + 1; }
  static float f(float a) { return a * 1.5f; }
  static double d(double a) { return Math.sqrt(a); }
  static char c(int i) { return (char) ('a' + i); }
  static byte by(int i) { return (byte) i; }
  static short sh(int i) { return (short) i; }
  static boolean z(int i) { return i % 2 == 0; }
  static int[] arr(int n) { int[] a = new int[n]; for (int i = 0; i < n; i++) a[i] = i * i; return a; }
  static int sw(int k) {
    switch (k) {
      case 1: return 10;
      case 2: return 20;
      case 100: return 1000;
      case 1000000: return 7;
      default: return -k;
    }
  }
  static String run() {
    StringBuilder b = new StringBuilder();
    b.append(l(3, 4)).append(',').append(f(2)).append(',').append(d(16)).append(',').append(c(2))
     .append(',').append(by(300)).append(',').append(sh(70000)).append(',').append(z(3))
     .append(',').append(arr(5)[4]);
    for (int k : new int[] {1, 2, 3, 100, 1000000}) b.append(',').append(sw(k));
    return b.toString();
  }
}
