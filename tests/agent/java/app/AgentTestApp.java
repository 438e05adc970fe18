/*
 * AgentTestApp - the application the agent tests run under the agent. It reads commands
 * on stdin and answers on stdout, one line each, so a test can drive it step by step:
 *
 *   ping                  -> pong
 *   greet                 -> greet: <what demo.Greeter says>
 *   load CLASS...         -> loaded CLASS...     (Class.forName: a class load the agent sees)
 *   work THREADS CALLS    -> work: calls=N       (each thread calls demo.Work.call CALLS times)
 *   slow MS               -> slow: started       (a thread named slow-sleeper calls demo.Slow.call,
 *                                                  whose innermost invocation sleeps MS ms)
 *   fanout TASKS          -> fanout: tasks=N     (demo.Fanout hands TASKS tasks to a pool)
 *   pool TASKS            -> pool: tasks=N       (demo.PoolWork: plain ThreadPoolExecutor.execute)
 *   loadjar JAR [RATE]    -> loadjar: classes=N  (loads, without initializing, every class
 *                                                  of JAR, which must be on the class path;
 *                                                  at most RATE classes per second)
 *   diag CALLS [MS]       -> diag: sum=N         (demo.DiagAnchor.run: the anchor calls demo.DiagHelper.step
 *                                                  CALLS times on this thread, then sleeps MS ms)
 *   diagdirect CALLS      -> diagdirect: sum=N   (demo.DiagHelper.step CALLS times, outside the anchor)
 *   diagother CALLS       -> diagother: sum=N    (while this thread is inside DiagAnchor.run, which calls
 *                                                  nothing itself, a thread named diag-other, started
 *                                                  before, calls DiagHelper.step CALLS times)
 *   latesub MS            -> latesub: started, later latesub: <LateSub.hello()>  (a thread loads
 *                                                  demo.LateSub through demo.SlowBaseLoader, which
 *                                                  defines its superclass only after MS ms)
 *   exit                  -> the JVM ends normally
 */
import demo.Greeter;
import demo.Work;

import java.io.BufferedReader;
import java.io.InputStreamReader;

public class AgentTestApp {
    static final java.util.concurrent.ExecutorService POOL =
            java.util.concurrent.Executors.newFixedThreadPool(3, r -> {
                Thread t = new Thread(r, "pool-worker");
                t.setDaemon(true);
                return t;
            });

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split("\\s+");
            switch (w[0]) {
                case "ping":
                    System.out.println("pong");
                    break;
                case "greet":
                    System.out.println("greet: " + new Greeter().greet());
                    break;
                case "load": {
                    StringBuilder sb = new StringBuilder("loaded");
                    for (int i = 1; i < w.length; i++) {
                        Class.forName(w[i]);
                        sb.append(' ').append(w[i]);
                    }
                    System.out.println(sb);
                    break;
                }
                case "work":
                    System.out.println("work: calls=" + work(Integer.parseInt(w[1]), Long.parseLong(w[2])));
                    break;
                case "slow": {
                    long ms = Long.parseLong(w[1]);
                    Thread t = new Thread(() -> {
                        try {
                            demo.Slow.call(2, ms);
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                        }
                    }, "slow-sleeper");
                    t.setDaemon(true);
                    t.start();
                    System.out.println("slow: started");
                    break;
                }
                case "fanout":
                    System.out.println("fanout: tasks=" + demo.Fanout.run(POOL, Integer.parseInt(w[1])));
                    break;
                case "pool":
                    System.out.println("pool: tasks=" + demo.PoolWork.run(POOL, Integer.parseInt(w[1])));
                    break;
                case "loadjar": {
                    int n = 0;
                    long rate = w.length > 2 ? Long.parseLong(w[2]) : 0, start = System.nanoTime();
                    try (java.util.jar.JarFile jar = new java.util.jar.JarFile(w[1])) {
                        for (java.util.Enumeration<java.util.jar.JarEntry> e = jar.entries(); e.hasMoreElements();) {
                            String name = e.nextElement().getName();
                            if (!name.endsWith(".class") || name.contains("-") || name.startsWith("META-INF"))
                                continue;
                            try {
                                if (rate > 0) { // pace: class n at n / rate seconds
                                    long due = start + n * 1_000_000_000L / rate - System.nanoTime();
                                    if (due > 0)
                                        Thread.sleep(due / 1_000_000, (int) (due % 1_000_000));
                                }
                                Class.forName(name.substring(0, name.length() - 6).replace('/', '.'), false,
                                        AgentTestApp.class.getClassLoader());
                                n++;
                            } catch (Throwable t) {
                                // a class whose dependencies are not on the class path
                            }
                        }
                    }
                    System.out.println("loadjar: classes=" + n);
                    break;
                }
                case "diag":
                    System.out.println("diag: sum=" + demo.DiagAnchor.run(Integer.parseInt(w[1]),
                            w.length > 2 ? Long.parseLong(w[2]) : 0, null, null));
                    break;
                case "diagdirect": {
                    long sum = 0;
                    for (int i = 0, n = Integer.parseInt(w[1]); i < n; i++)
                        sum += demo.DiagHelper.step(i);
                    System.out.println("diagdirect: sum=" + sum);
                    break;
                }
                case "diagother":
                    System.out.println("diagother: sum=" + diagOther(Integer.parseInt(w[1])));
                    break;
                case "latesub": {
                    long ms = Long.parseLong(w[1]);
                    Thread t = new Thread(() -> {
                        try {
                            Object o = new demo.SlowBaseLoader(AgentTestApp.class.getClassLoader(), ms)
                                    .loadClass("demo.LateSub").getDeclaredConstructor().newInstance();
                            System.out.println("latesub: " + o.getClass().getMethod("hello").invoke(o));
                        } catch (ReflectiveOperationException e) {
                            System.out.println("latesub: failed " + e);
                        }
                    }, "late-loader");
                    t.setDaemon(true);
                    t.start();
                    System.out.println("latesub: started");
                    break;
                }
                case "exit":
                    System.out.println("bye");
                    return;
                default:
                    System.out.println("unknown command " + w[0]);
            }
        }
    }

    /** The helper on another thread while this one is inside the anchor (its context open). */
    static long diagOther(int calls) throws InterruptedException {
        java.util.concurrent.CountDownLatch inside = new java.util.concurrent.CountDownLatch(1);
        java.util.concurrent.CountDownLatch leave = new java.util.concurrent.CountDownLatch(1);
        long[] sum = new long[1];
        Thread t = new Thread(() -> {
            try {
                inside.await();
                for (int i = 0; i < calls; i++)
                    sum[0] += demo.DiagHelper.step(i);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } finally {
                leave.countDown();
            }
        }, "diag-other");
        t.start();
        long in = demo.DiagAnchor.run(0, 0, inside, leave);
        t.join();
        return in < 0 ? -1 : sum[0];
    }

    static long work(int threads, long calls) throws InterruptedException {
        Thread[] t = new Thread[threads];
        long[] done = new long[threads];
        for (int i = 0; i < threads; i++) {
            final int k = i;
            t[i] = new Thread(() -> {
                long sum = 0;
                for (long c = 0; c < calls; c++)
                    sum += Work.call(3);
                done[k] = calls;
                if (sum == 42)
                    System.out.print("");
            }, "worker-" + i);
            t[i].start();
        }
        long total = 0;
        for (int i = 0; i < threads; i++) {
            t[i].join();
            total += done[i];
        }
        return total;
    }
}
