/*
 * Probe - the static methods instrumented bytecode calls (docs/ARCHITECTURE.md, "The probe
 * contract"). Loaded from the bootstrap class path, so every class loader sees it.
 *
 * Each thread writes fixed 24-byte records into its own ring of native memory, owned by
 * the agent and seen here as a direct ByteBuffer (layout in agent/src/probe_rings.h): a
 * few plain stores and one release store of the write index per event, no JNI, no lock,
 * no allocation. A full ring drops the event and counts it; it never waits.
 *
 * Re-entry: a probe that runs while this thread is inside a probe records nothing (the
 * first call of a thread registers its ring through JNI, which may load classes).
 */
package cmr.agent;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

public final class Probe {
    private Probe() {
    }

    static final int HEADER = 128, WRITE = 0, DROPPED = 8, READ = 64; // see probe_rings.h
    static final int RECORD = 24;
    static final int ENTER = 1, EXIT = 2, EXIT_THROW = 3, TIMER = 16, TIMER_THROW = 17;
    static final int TIMER_STACK = 256;

    private static final VarHandle LONGS =
            MethodHandles.byteBufferViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);

    /** A thread's ring; NONE when the agent gave none (limit reached, or registering). */
    static final class Ring {
        final ByteBuffer buf;
        final long cap;
        final int mask;
        final long half;
        long write;      // this thread's copy of the write index
        long readSeen;   // last read index seen: free space without reading shared memory
        long dropped;
        long nextWake;
        int recheck;     // drops left before the read index is looked at again
        int depth;       // invocation depth on this thread
        int timerDepth;
        final long[] starts = new long[TIMER_STACK];

        Ring(ByteBuffer buf) {
            this.buf = buf;
            long records = buf == null ? 0 : (buf.capacity() - HEADER) / RECORD;
            this.cap = records;
            this.mask = (int) (records - 1);
            this.half = records / 2;
            this.nextWake = half;
        }

        void put(int kind, long id, long time, int aux) {
            ByteBuffer b = buf;
            if (b == null)
                return;
            long w = write;
            if (w - readSeen >= half) {
                if (w - readSeen >= cap && --recheck > 0) { // full: drop without touching
                    LONGS.setOpaque(b, DROPPED, ++dropped);  // the publisher's cache line
                    return;
                }
                recheck = 64;
                readSeen = (long) LONGS.getAcquire(b, READ);
                if (w >= nextWake && w - readSeen >= half) {
                    nextWake = w + half;
                    wake0();
                }
                if (w - readSeen >= cap) {
                    LONGS.setOpaque(b, DROPPED, ++dropped);
                    return;
                }
            }
            int off = HEADER + ((int) w & mask) * RECORD;
            LONGS.set(b, off, id);
            LONGS.set(b, off + 8, time);
            LONGS.set(b, off + 16, ((long) aux << 32) | kind); // kind and aux, little endian

            write = w + 1;
            LONGS.setRelease(b, WRITE, w + 1);
        }
    }

    private static final Ring NONE = new Ring(null);
    private static final ThreadLocal<Ring> RINGS = new ThreadLocal<>();

    private static Ring ring() {
        Ring r = RINGS.get();
        return r != null ? r : register();
    }

    private static Ring register() {
        RINGS.set(NONE); // probes reached while registering record nothing
        Ring r = NONE;
        try {
            Thread t = Thread.currentThread();
            ByteBuffer b = register0(t.getId(), t.getName());
            if (b != null)
                r = new Ring(b.order(ByteOrder.LITTLE_ENDIAN));
        } catch (Throwable e) {
            // no ring for this thread: its probes record nothing
        }
        RINGS.set(r);
        return r;
    }

    private static native ByteBuffer register0(long threadId, String threadName);

    private static native void wake0();

    // --- invocation sequence -------------------------------------------------------------

    public static void enter(long methodId) {
        Ring r = ring();
        r.put(ENTER, methodId, System.nanoTime(), ++r.depth);
    }

    public static void exit(long methodId) {
        Ring r = ring();
        int d = r.depth;
        if (d > 0)
            r.depth = d - 1;
        r.put(EXIT, methodId, System.nanoTime(), d > 0 ? d : 0);
    }

    public static void exitThrow(long methodId) {
        Ring r = ring();
        int d = r.depth;
        if (d > 0)
            r.depth = d - 1;
        r.put(EXIT_THROW, methodId, System.nanoTime(), d > 0 ? d : 0);
    }

    // --- timer: one sample per call, aggregated by the agent ------------------------------

    public static void timerEnter(long methodId) {
        Ring r = ring();
        int d = r.timerDepth++;
        if (d < TIMER_STACK)
            r.starts[d] = System.nanoTime();
    }

    public static void timerExit(long methodId) {
        timerDone(methodId, TIMER);
    }

    public static void timerExitThrow(long methodId) {
        timerDone(methodId, TIMER_THROW);
    }

    private static void timerDone(long methodId, int kind) {
        Ring r = ring();
        int d = r.timerDepth - 1;
        if (d < 0)
            return; // an exit without its entry (instrumentation changed meanwhile)
        r.timerDepth = d;
        if (d < TIMER_STACK)
            r.put(kind, methodId, System.nanoTime() - r.starts[d], 0);
    }

    // --- anchors: recorded as invocations until conditional instrumentation uses them ------

    public static void anchorEnter(long methodId) {
        enter(methodId);
    }

    public static void anchorExit(long methodId) {
        exit(methodId);
    }

    public static void anchorExitThrow(long methodId) {
        exitThrow(methodId);
    }
}
