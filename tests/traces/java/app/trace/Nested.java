package trace;

/** run -> a -> b -> Leaf.work, and run -> c: one thread. */
public class Nested {
    public static void run() {
        a();
        c();
    }

    static void a() {
        b();
    }

    static void b() {
        Leaf.work(2);
    }

    static void c() {
        Leaf.work(1);
    }
}
