package app;

class Exc {
  static int depth(int n) {
    if (n == 0) throw new ArithmeticException("bottom");
    try {
      return depth(n - 1) + 1;
    } finally {
      counter++;
    }
  }
  static int counter;

  static String nested(int i) {
    try {
      try {
        if (i == 0) throw new IllegalStateException("a");
        if (i == 1) return "ret1";
        return "x" + (10 / (i - 2));
      } catch (IllegalStateException e) {
        return "caught-" + e.getMessage();
      } finally {
        counter += 10;
      }
    } catch (ArithmeticException e) {
      return "arith";
    }
  }

  static long lng(long v) throws Exception {
    if (v < 0) throw new Exception("neg");
    return v * 3L;
  }
  static double dbl(double d) { return d / 2; }

  static String run() throws Exception {
    StringBuilder b = new StringBuilder();
    try { depth(20); } catch (ArithmeticException e) { b.append(e.getMessage()).append(counter); }
    for (int i = 0; i < 4; i++) b.append(',').append(nested(i));
    b.append(',').append(lng(7)).append(',').append(dbl(5));
    try { lng(-1); } catch (Exception e) { b.append(',').append(e.getMessage()); }
    b.append(',').append(counter);
    return b.toString();
  }
}
