// The discovery test's application (cmr-instrumenter/tests/discover_test.c): a service
// whose handle() calls one of each kind of callee the discovery must find.
package disc;

import java.util.function.Function;

public class Service extends BaseService {
    private final Repo repo;
    private final Shape shape;

    public Service(Repo repo, Shape shape) {
        this.repo = repo;
        this.shape = shape;
    }

    public String handle(int n) {
        int h = Util.hash(n);                          // static helper (depth chain below)
        int p = prepare(h);                            // private method
        int b = base(p) + base(p + 1);                 // inherited method, two call sites
        String s = repo.find(p);                       // interface: SqlRepo (loaded), MemRepo (not)
        double a = shape.area();                       // abstract class: Circle and Square override
        Runnable r = () -> Util.log("ran");            // lambda
        r.run();
        Function<Integer, Integer> f = Util::twice;    // method reference
        int t = f.apply(n);
        int fa = fact(n);                              // direct recursion
        boolean e = isEven(n);                         // mutual recursion
        String fmt = String.format("%d", n);           // JDK
        int x = disc.ext.Lib.call(n);                  // excluded package
        int k = Broken.run(n);                         // malformed bytes in the test's source
        String g = new Polite().greet();               // inherited default method (invokevirtual)
        Greeter gr = new Polite();
        g += gr.greet();                               // the same through the interface
        return s + fmt + a + b + t + fa + e + x + k + g; // string concatenation (indy, skipped)
    }

    private int prepare(int h) {
        return h * 3;
    }

    static int fact(int n) {
        return n <= 1 ? 1 : n * fact(n - 1);
    }

    static boolean isEven(int n) {
        return n == 0 || isOdd(n - 1);
    }

    static boolean isOdd(int n) {
        return n != 0 && isEven(n - 1);
    }

    public String handle(String s) { // an overload of handle
        return s.trim();
    }
}
