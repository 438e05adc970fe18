package trace;

/** run starts a thread (its body: Threads.body -> Leaf.work) and joins it. virtuals(n)
 *  starts n virtual threads with the same body (JDK 21+; by reflection, the tests compile
 *  for 11) and joins them. fanout(n) runs n tasks on the thread-per-task executor of
 *  virtual threads, each two calls around a 2 ms sleep (the virtual thread leaves its
 *  carrier and comes back, maybe on another). structured(n) forks n such tasks in a
 *  StructuredTaskScope (a preview API: JDK 21+ with --enable-preview; by reflection) and
 *  joins them. */
public class Threads {
    public static int structured(int n) throws Exception {
        Class<?> sts = Class.forName("java.util.concurrent.StructuredTaskScope");
        Object scope;
        try {
            scope = sts.getMethod("open").invoke(null); // JDK 25: open() joins all, fails on a failure
        } catch (NoSuchMethodException e) { // JDK 21 - 24
            scope = Class.forName("java.util.concurrent.StructuredTaskScope$ShutdownOnFailure")
                            .getConstructor()
                            .newInstance();
        }
        try {
            java.lang.reflect.Method fork = sts.getMethod("fork", java.util.concurrent.Callable.class);
            for (int i = 0; i < n; i++)
                fork.invoke(scope, (java.util.concurrent.Callable<Object>) Threads::subtask);
            sts.getMethod("join").invoke(scope);
        } finally {
            ((AutoCloseable) scope).close();
        }
        return n;
    }

    static Object subtask() {
        parked();
        return null;
    }

    public static int fanout(int n) throws Exception {
        java.util.concurrent.ExecutorService ex = (java.util.concurrent.ExecutorService)
                java.util.concurrent.Executors.class.getMethod("newVirtualThreadPerTaskExecutor").invoke(null);
        java.util.List<java.util.concurrent.Future<?>> fs = new java.util.ArrayList<>();
        for (int i = 0; i < n; i++)
            fs.add(ex.submit(Threads::parked));
        for (java.util.concurrent.Future<?> f : fs)
            f.get();
        ex.shutdown();
        return n;
    }

    static void parked() {
        Leaf.work(1);
        try {
            Thread.sleep(2);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        Leaf.work(1);
    }

    public static int virtuals(int n) throws Exception {
        java.lang.reflect.Method ofVirtual = Thread.class.getMethod("ofVirtual");
        Object builder = ofVirtual.invoke(null);
        java.lang.reflect.Method unstarted =
                Class.forName("java.lang.Thread$Builder").getMethod("unstarted", Runnable.class);
        Thread[] ts = new Thread[n];
        for (int i = 0; i < n; i++) {
            ts[i] = (Thread) unstarted.invoke(builder, (Runnable) Threads::body);
            ts[i].start();
        }
        for (Thread t : ts)
            t.join();
        return n;
    }

    public static void run() throws InterruptedException {
        Thread t = new Thread(Threads::body, "trace-thread");
        t.start();
        t.join();
    }

    static void body() {
        Leaf.work(1);
    }
}
