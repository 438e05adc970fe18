package trace;

/** run starts a thread (its body: Threads.body -> Leaf.work) and joins it. */
public class Threads {
    public static void run() throws InterruptedException {
        Thread t = new Thread(Threads::body, "trace-thread");
        t.start();
        t.join();
    }

    static void body() {
        Leaf.work(1);
    }
}
