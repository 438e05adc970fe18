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
import java.util.ArrayDeque;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;

public final class Probe {
    private Probe() {
    }

    static final int HEADER = 128, WRITE = 0, DROPPED = 8, READ = 64; // see probe_rings.h
    static final int RECORD = 24;
    static final int ENTER = 1, EXIT = 2, EXIT_THROW = 3, FORK = 4, TIMER = 16, TIMER_THROW = 17;
    // ring-internal: the identity of the segment that the next root ENTER opens
    static final int SEG_BEGIN = 5, SEG_TRACE = 6, SEG_PARENT_AGENT = 7;
    static final int AGENT_ID = 16;     // header: the agent id, written by the agent when known
    static final int SEGMENT_BASE = 24; // header: first segment id of this agent run
    static final int SEGMENT_BLOCK = 1 << 16;
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
        // the open segment (depth > 0): its id, trace id and events put so far
        long segment, traceHi, traceLo, seq;
        long nextSegment, segmentLimit;
        Context pending; // parent of the segment the next root call opens
        long ctxStack;   // one bit per open ctxBegin: did it open a segment?
        long ctxSite;    // the hand-off node ctxBegin opened (ctxEnd closes that one)
        final long[] starts = new long[TIMER_STACK];

        Ring(ByteBuffer buf) {
            this.buf = buf;
            long records = buf == null ? 0 : (buf.capacity() - HEADER) / RECORD;
            this.cap = records;
            this.mask = (int) (records - 1);
            this.half = records / 2;
            this.nextWake = half;
        }

        /** Writes one record; false when it was dropped (ring full, or no ring). */
        boolean put(int kind, long id, long time, int aux) {
            ByteBuffer b = buf;
            if (b == null)
                return false;
            long w = write;
            if (w - readSeen >= half) {
                if (w - readSeen >= cap && --recheck > 0) { // full: drop without touching
                    countDrop(b, kind);                     // the publisher's cache line
                    return false;
                }
                recheck = 64;
                readSeen = (long) LONGS.getAcquire(b, READ);
                if (w >= nextWake && w - readSeen >= half) {
                    nextWake = w + half;
                    wake0();
                }
                if (w - readSeen >= cap) {
                    countDrop(b, kind);
                    return false;
                }
            }
            int off = HEADER + ((int) w & mask) * RECORD;
            LONGS.set(b, off, id);
            LONGS.set(b, off + 8, time);
            LONGS.set(b, off + 16, ((long) aux << 32) | kind); // kind and aux, little endian

            write = w + 1;
            LONGS.setRelease(b, WRITE, w + 1);
            return true;
        }

        /** Counts a lost event; the ring-internal segment records are not events. */
        private void countDrop(ByteBuffer b, int kind) {
            if (kind < SEG_BEGIN || kind > SEG_PARENT_AGENT)
                LONGS.setOpaque(b, DROPPED, ++dropped);
        }

        /** An event of the open segment: counted, so that forks can name their position. */
        void event(int kind, long id, int aux) {
            if (put(kind, id, System.nanoTime(), aux))
                seq++;
        }

        /** The root call of a segment: new identity, the pending parent's trace if any. */
        void beginSegment() {
            if (nextSegment == segmentLimit) {
                nextSegment = SEGMENTS.getAndAdd(SEGMENT_BLOCK);
                segmentLimit = nextSegment + SEGMENT_BLOCK;
            }
            segment = nextSegment++;
            Context p = pending;
            pending = null;
            if (p != null) {
                traceHi = p.traceHi;
                traceLo = p.traceLo;
            } else {
                ThreadLocalRandom rnd = ThreadLocalRandom.current();
                traceHi = rnd.nextLong();
                traceLo = rnd.nextLong() | 1; // never all zero
            }
            seq = 0;
            put(SEG_BEGIN, segment, traceHi, p == null ? 0 : p.remote ? 3 : 1);
            put(SEG_TRACE, traceLo, p != null ? p.segment : 0, p != null ? (int) p.event : 0);
            if (p != null && p.remote)
                put(SEG_PARENT_AGENT, p.agent, p.event, 0);
        }

        long agentId() {
            return buf == null ? 0 : (long) LONGS.getOpaque(buf, AGENT_ID);
        }
    }

    /** Where a hand-off came from: the trace, and the parent segment's FORK event. */
    static final class Context {
        final long traceHi, traceLo, agent, segment, event;
        final boolean remote; // the parent is in another JVM (agent 0: another tracer)

        Context(long traceHi, long traceLo, long agent, long segment, long event, boolean remote) {
            this.traceHi = traceHi;
            this.traceLo = traceLo;
            this.agent = agent;
            this.segment = segment;
            this.event = event;
            this.remote = remote;
        }
    }

    /** Segment ids: blocks handed to threads from a base the agent draws at random. */
    private static final AtomicLong SEGMENTS = new AtomicLong();

    /** Tasks handed to another thread, with the contexts they carry, oldest first: the
     *  same object may be handed over many times (a non-capturing lambda is one shared
     *  instance), and executors run tasks in about the order they were handed over.
     *  Bounded: past HANDOFF_MAX pending hand-offs the table is forgotten. */
    private static final int HANDOFF_MAX = 1 << 16;
    private static final Map<Object, ArrayDeque<Context>> HANDOFF = new IdentityHashMap<>();
    private static int handoffs;

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
            if (b != null) {
                r = new Ring(b.order(ByteOrder.LITTLE_ENDIAN));
                SEGMENTS.compareAndSet(0, (long) LONGS.getOpaque(b, SEGMENT_BASE));
            }
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
        int d = r.depth + 1;
        r.depth = d; // before beginSegment: JDK code it runs cannot open a second segment
        if (d == 1)
            r.beginSegment();
        r.event(ENTER, methodId, d);
    }

    public static void exit(long methodId) {
        leave(ring(), EXIT, methodId);
    }

    public static void exitThrow(long methodId) {
        leave(ring(), EXIT_THROW, methodId);
    }

    private static void leave(Ring r, int kind, long methodId) {
        int d = r.depth;
        if (d <= 0) { // an exit without its entry (the method was redefined meanwhile)
            r.put(kind, methodId, System.nanoTime(), 0);
            return;
        }
        r.depth = d - 1;
        r.event(kind, methodId, d);
    }

    // --- context hand-off between threads and JVMs --------------------------------------
    //
    // The instrumentation of the JDK's hand-off points calls these (docs/ARCHITECTURE.md,
    // "Segments, traces and how they link"): the submitting thread records a FORK event and
    // remembers the context with the task; the thread that runs the task opens a segment
    // whose parent is that FORK.

    /** On the submitting thread: `task` carries the current context to whoever runs it. */
    public static void ctxCapture(Object task, long siteId) {
        Ring r = ring();
        if (task == null || r.depth == 0 || r.buf == null)
            return;
        long at = r.seq;
        boolean recorded = r.put(FORK, siteId, System.nanoTime(), 0);
        if (recorded)
            r.seq++;
        Context c = new Context(r.traceHi, r.traceLo, 0, r.segment, recorded ? at : -1, false);
        synchronized (HANDOFF) {
            if (handoffs >= HANDOFF_MAX) { // tasks that never ran: forget them rather than grow
                HANDOFF.clear();
                handoffs = 0;
            }
            HANDOFF.computeIfAbsent(task, k -> new ArrayDeque<>(2)).addLast(c);
            handoffs++;
        }
    }

    /** On the thread that runs `task`: continue the trace it carries, under a node for the
     *  hand-off point itself (so that the subtree has a root even if nothing inside is
     *  instrumented). Pair with ctxEnd / ctxEndThrow. */
    public static void ctxBegin(Object task, long siteId) {
        Ring r = ring();
        Context c;
        if (task == null)
            c = null;
        else
            synchronized (HANDOFF) {
                ArrayDeque<Context> q = HANDOFF.get(task);
                c = q == null ? null : q.pollFirst();
                if (c != null)
                    handoffs--;
                if (q != null && q.isEmpty())
                    HANDOFF.remove(task);
            }
        boolean opens = c != null && r.depth == 0 && r.buf != null;
        r.ctxStack = (r.ctxStack << 1) | (opens ? 1 : 0);
        if (opens) {
            r.pending = c;
            r.ctxSite = siteId;
            enter(siteId);
        }
    }

    public static void ctxEnd(long siteId) {
        ctxDone(siteId, EXIT);
    }

    public static void ctxEndThrow(long siteId) {
        ctxDone(siteId, EXIT_THROW);
    }

    private static void ctxDone(long siteId, int kind) {
        Ring r = ring();
        boolean opened = (r.ctxStack & 1) != 0;
        r.ctxStack >>>= 1;
        if (opened) // ctxEnd may run in another method than ctxBegin (afterExecute)
            leave(r, kind, r.ctxSite);
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
