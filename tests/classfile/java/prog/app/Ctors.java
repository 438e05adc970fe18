package app;

class Base {
  final String tag;
  Base(String t) {
    if (t == null) throw new IllegalArgumentException("null tag");
    tag = t;
  }
}

class Ctors extends Base {
  int n;
  Ctors(int n) {
    super(n > 0 ? "pos" : n < 0 ? "neg" : "zero");  // branches before super()
    int k = 0;
    try {
      for (int i = 0; i < n; i++) k += i;
      if (n == 13) throw new RuntimeException("thirteen");
    } catch (RuntimeException e) {
      k = -1;
    }
    this.n = k;
  }
  Ctors() { this(4); }                                // this() delegation
  Ctors(String s) { super(s); if (s.isEmpty()) throw new IllegalStateException("empty"); }

  class Inner {                                       // stores this$0 before super()
    int twice() { return n * 2; }
  }

  static String run() {
    StringBuilder b = new StringBuilder();
    b.append(new Ctors(5).n).append(',').append(new Ctors().n).append(',')
     .append(new Ctors(13).n).append(',').append(new Ctors(-2).tag).append(',');
    try { new Ctors(""); } catch (IllegalStateException e) { b.append(e.getMessage()).append(','); }
    try { new Ctors((String) null); } catch (IllegalArgumentException e) { b.append(e.getMessage()); }
    b.append(',').append(new Ctors(3).new Inner().twice());
    return b.toString();
  }
}
