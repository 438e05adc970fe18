/*
 * Probe - the static methods instrumented bytecode calls (docs/ARCHITECTURE.md, "The probe
 * contract"). Loaded from the bootstrap class path, so every class loader sees it.
 *
 * Each thread writes fixed 24-byte records into its own ring of native memory, owned by
 * the agent and seen here as a direct ByteBuffer (layout in agent/src/probe_rings.h): a
 * few plain stores and one release store of the write index per event, no JNI, no lock,
 * no allocation. It never waits for room.
 *
 * Loss is whole, never random (docs/ARCHITECTURE.md, "When a thread records faster than
 * it sends"): an ENTER (a FORK, DATA, a timer sample) is written only when the ring has
 * room for it plus one exit per open recorded call plus MARGIN records, so the exits of
 * recorded calls always fit and every recorded tree is well formed. A segment whose root
 * call does not fit is skipped whole (counted as a dropped trace); a deeper call that does
 * not fit, or that would take the segment past its size limit (the strategy's
 * max_segment_events), is not recorded, nor anything below it, and the segment ends with a
 * LOSS record: the calls not recorded and why.
 *
 * Re-entry: a probe that runs while this thread is inside a probe records nothing (the
 * first call of a thread registers its ring through JNI, which may load classes).
 *
 * No lambdas or method references in the static initialisers: whichever instrumented
 * class calls a probe first initialises this class, possibly during the JVM's start-up or
 * inside java.lang.invoke itself, where bootstrapping a call site may fail.
 */
package cmr.agent;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.invoke.VarHandle;
import java.lang.ref.ReferenceQueue;
import java.lang.ref.WeakReference;
import java.lang.reflect.Method;
import java.net.HttpURLConnection;
import java.net.URLConnection;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayDeque;
import java.util.IdentityHashMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BiConsumer;
import java.util.function.BiPredicate;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

public final class Probe {
    private Probe() {
    }

    static final int HEADER = 128, WRITE = 0, DROPPED = 8, READ = 64; // see probe_rings.h
    static final int MAX_EVENTS = 32;      // header: events a segment may hold (the agent's; 0: no limit)
    static final int TRACES_DROPPED = 40;  // header: segments skipped whole (ring full)
    static final int DROPPED_CALLS = 48;   // header: the calls of those segments
    static final int LOSS = 11;            // ring-internal: calls of the segment not recorded
    static final int LOSS_LIMIT = 1, LOSS_RING = 2; // why (LOSS aux bits)
    /** Records kept free beyond one exit per open recorded call: a DIAG_END and the LOSS
     *  record, which are written without a check of their own. */
    static final int MARGIN = 4;
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
        int skipFrom;    // 0: recording; else the depth of the outermost call not recorded
                         // (1: the whole segment is skipped)
        long notRecorded; // calls of the open segment not recorded (skipFrom > 1)
        int lossWhy;     // LOSS_LIMIT | LOSS_RING
        long maxEvents;  // the open segment's size limit, read when it begins
        long tracesDropped, droppedCalls; // segments skipped whole, and their calls
        int timerDepth;
        // the open segment (depth > 0): its id, trace id and events put so far
        long segment, traceHi, traceLo, seq;
        long nextSegment, segmentLimit;
        // the trace ids of the traces this thread begins: a random 64-bit prefix drawn when
        // the ring is made, then a counter from a random start (unique across JVMs by the
        // prefix; the publisher codes a thread's next trace id as a step, cmr/event.h)
        final long tracePrefix;
        long traceNext;
        Context pending; // parent of the segment the next root call opens
        long ctxStack;   // one bit per open ctxBegin: did it open a segment?
        long ctxSite;    // the hand-off node ctxBegin opened (ctxEnd closes that one)
        int quiet;       // inside a virtual thread's scheduling (quietBegin): no capture
        Object request;  // the incoming request the open segment began with (httpIn)
        Object response; // and its response, for a servlet's (httpInServlet)
        long sqlStack;   // one bit per open sqlEnter: did it open a JDBC node?
        int sqlDepth;    // JDBC nodes open (a pool's proxy calls the driver: one node)
        long httpStack;  // one bit per open httpCall: did it open an HTTP client node?
        int httpCalls;   // HTTP client nodes open
        int httpVoidCall; // that count when the innermost is a call without a response (0: none)
        AsyncSend asyncSend; // the JDK HttpClient's sendAsync being called (httpSendAsync)
        Object httpUrlConn; // the HttpURLConnection whose exchange is the open node (httpUrlCall)
        AsyncNode asyncDone; // async nodes completed on this thread inside a segment, newest
        int asyncDoneCount;  // first (written when the segment ends), and how many
        int diagDepth;   // anchors open since the thread entered a diagnosis' context
        long diagnosis;  // that diagnosis (diagDepth > 0)
        int diagCalls;   // conditional calls recorded in it so far
        Object anchorArg; // the argument anchorEnterArg hands to the conditions, during it
        final long[] starts = new long[TIMER_STACK];

        Ring(ByteBuffer buf) {
            this.buf = buf;
            ThreadLocalRandom rnd = ThreadLocalRandom.current();
            this.tracePrefix = rnd.nextLong();
            this.traceNext = rnd.nextLong() >>> 1; // far from wrapping: steps stay small
            long records = buf == null ? 0 : (buf.capacity() - HEADER) / RECORD;
            this.cap = records;
            this.mask = (int) (records - 1);
            this.half = records / 2;
            this.nextWake = half;
        }

        /** Writes one record if `need` records (this one included) fit; false when not
         *  (no ring, or not enough room). Callers that reserved room pass need = 1. */
        boolean put(int kind, long id, long time, int aux, long need) {
            ByteBuffer b = buf;
            if (b == null)
                return false;
            long w = write;
            if (w - readSeen + need > half && !room(w, need))
                return false;
            int off = HEADER + ((int) w & mask) * RECORD;
            LONGS.set(b, off, id);
            LONGS.set(b, off + 8, time);
            LONGS.set(b, off + 16, ((long) aux << 32) | kind); // kind and aux, little endian

            write = w + 1;
            LONGS.setRelease(b, WRITE, w + 1);
            return true;
        }

        /** Past half full: whether `need` records fit, reading the publisher's index (not
         *  more than once every 64 refusals when full: its cache line is left alone). */
        private boolean room(long w, long need) {
            if (w - readSeen + need > cap && --recheck > 0)
                return false;
            recheck = 64;
            readSeen = (long) LONGS.getAcquire(buf, READ);
            if (w >= nextWake && w - readSeen >= half) {
                nextWake = w + half;
                wake0();
            }
            return w - readSeen + need <= cap;
        }

        /** A record that must not be lost (an exit of a recorded call, a DIAG_END, LOSS):
         *  its room was reserved; if it is not there after all, counted. */
        void putReserved(int kind, long id, long time, int aux) {
            if (!put(kind, id, time, aux, 1) && buf != null)
                countDrop(buf, kind);
        }

        /** A record of the open segment that needs room of its own (FORK, DATA, a timer
         *  sample): `n` records plus the reserve of the open recorded calls. */
        boolean putChecked(int kind, long id, long time, int aux, int n) {
            return put(kind, id, time, aux, n + recorded() + MARGIN);
        }

        /** Whether n records of the open segment fit with the reserve (nothing written). */
        boolean fits(int n) {
            long w = write, need = n + recorded() + MARGIN;
            return buf != null && (w - readSeen + need <= half || room(w, need));
        }

        /** Open calls of this thread that are recorded (their exits are owed). */
        int recorded() {
            return skipFrom == 0 ? depth : skipFrom - 1;
        }

        /** Counts a lost event; the ring-internal records are not events. */
        void countDrop(ByteBuffer b, int kind) {
            if ((kind < SEG_BEGIN || kind > SEG_PARENT_AGENT) && kind != DIAG && kind != DIAG_END && kind != DATA
                    && kind != LOSS)
                LONGS.setOpaque(b, DROPPED, ++dropped);
        }

        /** The enter of a call at depth d > 1 of the open segment, if it fits. */
        void enter(long methodId, int d) {
            if (seq + d >= maxEvents) // its enter and the exits of d open calls
                skip(d, LOSS_LIMIT);
            else if (put(ENTER, methodId, System.nanoTime(), d, d + 1 + MARGIN))
                seq++;
            else
                skip(d, LOSS_RING);
        }

        /** The call at depth d and everything below it are not recorded. */
        private void skip(int d, int why) {
            skipFrom = d;
            notRecorded++;
            lossWhy |= why;
        }

        /** The root call of a segment: new identity, the pending parent's trace if any,
         *  written with its enter only if they fit; else the segment is skipped whole. */
        void beginSegment(long methodId) {
            beginSegment(methodId, -1, System.nanoTime());
        }

        /** As beginSegment(methodId), with a segment id given beforehand (-1: a new one) and
         *  the root call's enter time. */
        void beginSegment(long methodId, long id, long time) {
            Context p = pending;
            pending = null;
            ByteBuffer b = buf;
            if (b == null) {
                skipFrom = 1;
                return;
            }
            boolean remote = p != null && p.remote;
            int n = remote ? 4 : 3; // segment records and the enter
            long w = write;
            if (w - readSeen + n + 1 + MARGIN > half && !room(w, n + 1 + MARGIN)) {
                skipFrom = 1;
                notRecorded = 0;
                LONGS.setOpaque(b, TRACES_DROPPED, ++tracesDropped);
                return;
            }
            segment = id >= 0 ? id : newSegmentId();
            if (p != null) {
                traceHi = p.traceHi;
                traceLo = p.traceLo;
            } else { // this thread's random prefix and its next number (never all zero)
                traceHi = tracePrefix;
                traceLo = ++traceNext != 0 ? traceNext : ++traceNext;
            }
            long max = (long) LONGS.getOpaque(b, MAX_EVENTS);
            maxEvents = max > 0 ? max : Long.MAX_VALUE;
            notRecorded = 0;
            lossWhy = 0;
            seq = 0;
            // the room for these was found above
            put(SEG_BEGIN, segment, traceHi, p == null ? 0 : remote ? 3 : 1, 1);
            put(SEG_TRACE, traceLo, p != null ? p.segment : 0, p != null ? (int) p.event : 0, 1);
            if (remote)
                put(SEG_PARENT_AGENT, p.agent, p.event, 0, 1);
            put(ENTER, methodId, time, 1, 1);
            seq = 1;
        }

        /** A segment id of this JVM never given before (a block of them per thread). */
        long newSegmentId() {
            if (nextSegment == segmentLimit) {
                nextSegment = SEGMENTS.getAndAdd(SEGMENT_BLOCK);
                segmentLimit = nextSegment + SEGMENT_BLOCK;
            }
            return nextSegment++;
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

    /** Tasks (and threads) handed over, with the contexts they carry. */
    private static final Handoffs HANDOFF = new Handoffs();

    /**
     * Objects handed to another thread, each with the contexts it carries, oldest first: the
     * same object may be handed over many times (a non-capturing lambda is one shared
     * instance), and executors run tasks in about the order they were handed over.
     *
     * Keys are held weakly and compared by identity: a task that is never run (a
     * CompletableFuture stage completed inline, a thread that runs nothing instrumented)
     * goes away with its object. Bounded: past MAX pending hand-offs the table is emptied.
     *
     * Nothing inside the lock may park: a virtual thread that parks holding a monitor leaves
     * its carrier (JDK 24+) and needs a carrier back to release it, so the reference queue
     * (which has a lock of its own) is polled outside, and carriers never come here.
     */
    static final class Handoffs {
        static final int MAX = 1 << 16;

        static final class Entry extends WeakReference<Object> {
            final int hash;
            Entry next;
            final ArrayDeque<Object> contexts = new ArrayDeque<>(2); // a Context, or put's value

            Entry(Object key, int hash, Entry next, ReferenceQueue<Object> q) {
                super(key, q);
                this.hash = hash;
                this.next = next;
            }
        }

        private final ReferenceQueue<Object> gone = new ReferenceQueue<>();
        private Entry[] table = new Entry[64];
        private int entries, pending;
        private volatile boolean empty = true; // lets ctxBegin skip the lock

        /** key carries v in place of whatever it carried (peek reads it). */
        void put(Object key, Object v) {
            expunge();
            synchronized (this) {
                Entry e = find(key, System.identityHashCode(key));
                if (e != null)
                    unlink(e);
                addLocked(key, v);
            }
        }

        /** What key carries (the oldest), left in place; null if nothing. */
        String peek(Object key) {
            if (empty)
                return null;
            synchronized (this) {
                Entry e = find(key, System.identityHashCode(key));
                Object v = e == null ? null : e.contexts.peekFirst();
                return v instanceof String ? (String) v : null;
            }
        }

        void add(Object key, Object c) {
            expunge();
            synchronized (this) {
                addLocked(key, c);
            }
        }

        private void addLocked(Object key, Object c) {
            if (pending >= MAX) { // contexts nobody took: forget them rather than grow
                table = new Entry[64];
                entries = pending = 0;
            }
            int h = System.identityHashCode(key);
            Entry e = find(key, h);
            if (e == null) {
                if (entries >= table.length * 3 / 4)
                    grow();
                int i = h & (table.length - 1);
                e = table[i] = new Entry(key, h, table[i], gone);
                entries++;
            }
            e.contexts.addLast(c);
            pending++;
            empty = false;
        }

        /** The oldest context `key` carries, taken; null if none. */
        Context take(Object key) {
            if (empty)
                return null;
            synchronized (this) {
                int h = System.identityHashCode(key);
                Entry e = find(key, h);
                if (e == null)
                    return null;
                Object o = e.contexts.pollFirst();
                Context c = o instanceof Context ? (Context) o : null;
                pending--;
                if (e.contexts.isEmpty())
                    unlink(e);
                empty = entries == 0;
                return c;
            }
        }

        private Entry find(Object key, int h) {
            for (Entry e = table[h & (table.length - 1)]; e != null; e = e.next)
                if (e.hash == h && e.get() == key)
                    return e;
            return null;
        }

        private void unlink(Entry dead) {
            int i = dead.hash & (table.length - 1);
            for (Entry e = table[i], prev = null; e != null; prev = e, e = e.next)
                if (e == dead) {
                    if (prev == null)
                        table[i] = e.next;
                    else
                        prev.next = e.next;
                    entries--;
                    pending -= e.contexts.size();
                    e.contexts.clear();
                    return;
                }
        }

        /** Unlinks the entries whose keys went away (outside the lock: see above). */
        private void expunge() {
            for (Object r; (r = gone.poll()) != null; )
                synchronized (this) {
                    unlink((Entry) r);
                }
        }

        private void grow() {
            Entry[] old = table, t = new Entry[old.length * 2];
            for (Entry head : old)
                for (Entry e = head, n; e != null; e = n) {
                    n = e.next;
                    int i = e.hash & (t.length - 1);
                    e.next = t[i];
                    t[i] = e;
                }
            table = t;
        }
    }

    private static final Ring NONE = new Ring(null);
    private static final ThreadLocal<Ring> RINGS = new ThreadLocal<>();

    private static Ring ring() {
        Ring r = RINGS.get();
        return r != null ? r : register();
    }

    /** Thread.isVirtual (JDK 21+), null before. */
    private static final MethodHandle IS_VIRTUAL = isVirtualHandle();

    private static MethodHandle isVirtualHandle() {
        try {
            return MethodHandles.publicLookup().findVirtual(Thread.class, "isVirtual",
                    MethodType.methodType(boolean.class));
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    /** Virtual threads get a small ring each (the agent frees it on JVMTI's VirtualThreadEnd,
     *  and gives none where the JVM does not post it). */
    static boolean isVirtual(Thread t) {
        if (IS_VIRTUAL == null)
            return false;
        try {
            return (boolean) IS_VIRTUAL.invokeExact(t);
        } catch (Throwable e) {
            return false;
        }
    }

    private static Ring register() {
        RINGS.set(NONE); // probes reached while registering record nothing
        Ring r = NONE;
        try {
            Thread t = Thread.currentThread();
            if (t.getClass().getName().equals("jdk.internal.misc.CarrierThread"))
                return NONE; // it only runs virtual threads, which record for themselves
            boolean virtual = isVirtual(t);
            String name = t.getName();
            ByteBuffer b = register0(t.getId(), virtual && name.isEmpty() ? "virtual-" + t.getId() : name, virtual);
            if (b != null) {
                r = new Ring(b.order(ByteOrder.LITTLE_ENDIAN));
                SEGMENTS.compareAndSet(0, (long) LONGS.getOpaque(b, SEGMENT_BASE));
                r.pending = HANDOFF.take(t); // started by Thread.start inside a trace
            }
        } catch (Throwable e) {
            // no ring for this thread: its probes record nothing
        }
        RINGS.set(r);
        return r;
    }

    private static native ByteBuffer register0(long threadId, String threadName, boolean virtual);

    private static native void wake0();

    // --- invocation sequence -------------------------------------------------------------

    public static void enter(long methodId) {
        Ring r = ring();
        int d = r.depth + 1;
        r.depth = d; // before beginSegment: JDK code it runs cannot open a second segment
        if (r.skipFrom != 0)
            r.notRecorded++; // below a call not recorded
        else if (d == 1)
            r.beginSegment(methodId);
        else
            r.enter(methodId, d);
    }

    public static void exit(long methodId) {
        leave(ring(), EXIT, methodId);
    }

    public static void exitThrow(long methodId) {
        leave(ring(), EXIT_THROW, methodId);
    }

    private static void leave(Ring r, int kind, long methodId) {
        leaveAt(r, kind, methodId, System.nanoTime());
    }

    /** leave, with the exit's time given (a sendAsync's node, written after it ended). */
    private static void leaveAt(Ring r, int kind, long methodId, long time) {
        int d = r.depth;
        if (d <= 0) // an exit without its entry (the method was redefined meanwhile): nothing to pair
            return;
        r.depth = d - 1;
        int s = r.skipFrom;
        if (s == 0) {
            if (d == 1 && r.notRecorded != 0) // the segment ends: what it did not record
                r.putReserved(LOSS, r.notRecorded, 0, r.lossWhy);
            r.putReserved(kind, methodId, time, d);
            r.seq++;
        } else if (d == s) { // the outermost call not recorded returned
            r.skipFrom = 0;
            if (d == 1 && r.buf != null) // a segment skipped whole ended
                LONGS.setOpaque(r.buf, DROPPED_CALLS, r.droppedCalls += 1 + r.notRecorded);
        }
        if (d == 1) {
            r.request = null;
            r.response = null;
            r.notRecorded = 0;
            if (r.asyncDone != null) // sendAsync nodes completed while this segment was open
                writeWaitingAsyncCalls(r);
        }
    }

    // --- the probes' own cost --------------------------------------------------------------

    static final long CALIBRATION_ID = 0x63616c6962726174L; // a method id no class has in practice
    static final int CALIBRATION_CALLS = 1000;               // calls per round
    static final int CALIBRATION_RECORDS = 4096;             // the round's records fit in half

    /**
     * What the probes of one recorded call cost this JVM, in picoseconds: an enter and an exit
     * inside an open segment, as a hot instrumented method pays them once compiled, timed
     * against the same loop without probes. The agent's control thread calls it 1, 10 and 60 s
     * after the configuration and keeps the least figure (the overhead budget holds every
     * method's own time against it: MetricBatch.probe_ps); no application thread ever runs it. `warmup` rounds are run first and not counted (they
     * let the JIT compile the loops), then the median of `rounds` rounds is returned, or -1
     * when they were too few or the clock went backwards.
     *
     * The calls are written to a ring of its own that nothing publishes, emptied before each
     * round, with segment ids of its own: the thread's ring (if any) is put back after,
     * untouched, and no trace of the calibration leaves the JVM.
     */
    static long calibrate(int warmup, int rounds) {
        if (rounds <= 0 || warmup < 0)
            return -1;
        Ring saved = RINGS.get();
        RINGS.set(NONE); // whatever else this runs records nothing
        try {
            ByteBuffer b = ByteBuffer.allocateDirect(HEADER + RECORD * CALIBRATION_RECORDS)
                    .order(ByteOrder.LITTLE_ENDIAN);
            Ring own = new Ring(b);
            own.nextSegment = 1;
            own.segmentLimit = Long.MAX_VALUE; // never takes a block of this JVM's segment ids
            long[] extra = new long[rounds];
            for (int i = -warmup; i < rounds; i++) {
                LONGS.setRelease(b, READ, own.write); // all read: the round never waits for room
                own.readSeen = own.write;
                RINGS.set(own);
                long t0 = System.nanoTime();
                calibrationProbed(CALIBRATION_CALLS);
                long t1 = System.nanoTime();
                calibrationBare(CALIBRATION_CALLS);
                long t2 = System.nanoTime();
                RINGS.set(NONE);
                if (i >= 0)
                    extra[i] = (t1 - t0) - (t2 - t1);
            }
            java.util.Arrays.sort(extra);
            long median = extra[rounds / 2];
            return median < 0 ? -1 : median * 1000 / CALIBRATION_CALLS;
        } finally {
            if (saved != null)
                RINGS.set(saved);
            else
                RINGS.remove();
        }
    }

    /** One segment of `calls` recorded calls of an empty method with its probes. */
    private static void calibrationProbed(int calls) {
        enter(CALIBRATION_ID);
        for (int i = 0; i < calls; i++)
            calibrationProbedCall(CALIBRATION_ID + i);
        exit(CALIBRATION_ID);
    }

    private static void calibrationProbedCall(long id) {
        enter(id);
        exit(id);
    }

    /** The same without probes (the loop's own cost). */
    private static void calibrationBare(int calls) {
        calibrationBareCall(CALIBRATION_ID);
        for (int i = 0; i < calls; i++)
            calibrationBareCall(CALIBRATION_ID + i);
        calibrationBareCall(CALIBRATION_ID);
    }

    private static long calibrationSink;

    private static void calibrationBareCall(long id) {
        calibrationSink = id;
    }

    // --- context hand-off between threads and JVMs --------------------------------------
    //
    // The instrumentation of the JDK's hand-off points calls these (docs/ARCHITECTURE.md,
    // "Segments, traces and how they link"): the submitting thread records a FORK event and
    // remembers the context with the task; the thread that runs the task opens a segment
    // whose parent is that FORK.

    /** On the submitting thread: `task` carries the current context to whoever runs it.
     *  Also Thread.start (the task is the thread) and ForkJoinTask's constructor. */
    public static void ctxCapture(Object task, long siteId) {
        Ring r = RINGS.get(); // a thread without a ring is outside any trace
        if (task == null || r == null || r.depth == 0 || r.buf == null || r.skipFrom == 1 || r.quiet > 0)
            return; // (a segment skipped whole: the task starts a trace of its own)
        HANDOFF.add(task, fork(r, siteId));
    }

    /** Around a virtual thread's submits of its continuation to its scheduler (at start, and
     *  when it is unparked by whichever thread): the ForkJoinTask made there is the virtual
     *  thread's own scheduling, not work handed over, so it captures no context (the start
     *  itself does, ctxCapture on VirtualThread.start). */
    public static void quietBegin(long siteId) {
        Ring r = RINGS.get();
        if (r != null && r != NONE)
            r.quiet++;
    }

    public static void quietEnd(long siteId) {
        Ring r = RINGS.get();
        if (r != null && r != NONE && r.quiet > 0)
            r.quiet--;
    }

    /** Records a FORK event in the open segment: the context a child continues. */
    private static Context fork(Ring r, long siteId) {
        long at = r.seq;
        boolean recorded = forkFits(r) && r.putChecked(FORK, siteId, System.nanoTime(), 0, 1);
        if (recorded)
            r.seq++;
        return new Context(r.traceHi, r.traceLo, 0, r.segment, recorded ? at : -1, false);
    }

    /** A FORK may be recorded here: inside a recorded call, within the size limit. */
    private static boolean forkFits(Ring r) {
        return r.skipFrom == 0 && r.seq + 1 + r.depth <= r.maxEvents;
    }

    /** On the thread that runs `task`: continue the trace it carries, under a node for the
     *  hand-off point itself (so that the subtree has a root even if nothing inside is
     *  instrumented). Pair with ctxEnd / ctxEndThrow. */
    public static void ctxBegin(Object task, long siteId) {
        Ring r = ring();
        if (r == NONE)
            return; // a carrier of virtual threads (or a thread without a ring): nothing to open
        Context c = task == null ? null : HANDOFF.take(task);
        open(r, c, c != null, siteId);
    }

    /** Opens a segment under `c` (a new trace when null) with a node for the hand-off
     *  point, if `wanted` and this thread is outside any recorded call. Outside a call, what
     *  started the thread (Thread.start) no longer applies either way: a hand-off point
     *  decides. */
    private static void open(Ring r, Context c, boolean wanted, long siteId) {
        if (r.depth == 0)
            r.pending = null;
        boolean opens = wanted && r.depth == 0 && r.buf != null;
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
        if (r == NONE)
            return; // ctxBegin opened nothing either
        boolean opened = (r.ctxStack & 1) != 0;
        r.ctxStack >>>= 1;
        AsyncRequest later = null;
        if (opened && r.request != null && r.depth == 1) { // the incoming request's answer
            later = answeredLater(r, siteId);
            if (later == null)
                data(r, DATA_HTTP_STATUS, responseStatus(r.response != null ? r.response : r.request));
        }
        if (opened) { // ctxEnd may run in another method than ctxBegin (afterExecute)
            long t = System.nanoTime();
            leaveAt(r, kind, r.ctxSite, t);
            if (later != null)
                later.begins(t); // where service returned
        }
    }

    // --- transaction data -----------------------------------------------------------------
    //
    // What a segment captures about its transaction goes into the ring as DATA records
    // (kind 10): a value's UTF-8 bytes, 16 per record in the id and timestamp fields, aux =
    // key << 24 | chunk index << 16 | the value's length. The publisher puts the values on
    // the segment's next batch (EventBatch.attributes), where cmr-ingest stores them on the
    // trace. Values are cut at DATA_MAX bytes.

    static final int DATA = 10, DATA_MAX = 256;
    static final int DATA_HTTP_METHOD = 1, DATA_HTTP_PATH = 2, DATA_HTTP_STATUS = 3; // as probe_rings.h
    // Keys from 16 on are attributes of the call whose ENTER came right before (the
    // publisher gives them to that call), values up to NODE_DATA_MAX bytes.
    static final int NODE_DB_STATEMENT = 16, NODE_HTTP_METHOD = 17, NODE_URL = 18, NODE_HTTP_STATUS = 19,
            NODE_DB_ROWS = 20, NODE_HTTP_HEADER = 21, NODE_HTTP_ROUTE = 22, NODE_DB_SYSTEM = 23;
    static final int NODE_DATA_MAX = 2048; // as probe_rings.h

    static void data(Ring r, int key, String value) {
        data(r, key, value, DATA_MAX);
    }

    static void data(Ring r, int key, String value, int max) {
        if (value == null || r.buf == null || r.skipFrom != 0)
            return;
        byte[] b = value.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        int len = Math.min(b.length, max);
        while (len < b.length && len > 0 && (b[len] & 0xC0) == 0x80)
            len--; // cut at a character's start: the value stays UTF-8
        int chunks = len == 0 ? 1 : (len + 15) / 16;
        if (!r.fits(chunks)) // the whole value or nothing
            return;
        for (int chunk = 0, off = 0; off < len || (len == 0 && chunk == 0); chunk++, off += 16) {
            long lo = 0, hi = 0;
            for (int i = 0; i < 16 && off + i < len; i++) {
                long v = b[off + i] & 0xffL;
                if (i < 8)
                    lo |= v << (8 * i);
                else
                    hi |= v << (8 * (i - 8));
            }
            r.put(DATA, lo, hi, key << 24 | chunk << 16 | len, 1);
        }
    }

    /** The status a servlet's response or an HttpExchange (the JDK's server) answered
     *  with; null when unknown. */
    private static String responseStatus(Object request) {
        try {
            Method m = SERVLET_STATUS.of(request.getClass());
            if (m == null)
                m = EXCHANGE_STATUS.of(request.getClass());
            Object code = m == null ? null : m.invoke(request);
            return code instanceof Integer && (Integer) code > 0 ? code.toString() : null;
        } catch (Throwable e) {
            return null;
        }
    }

    // --- JDBC -------------------------------------------------------------------------------
    //
    // The instrumenter's JDBC rules (instr_rules.c) put these on the driver's classes: a
    // statement's execution inside a trace is a node of its own with the SQL as its
    // db.statement attribute, raw here; the publisher normalises it and masks its literals
    // before it leaves the JVM (agent/src/sql_text.c). Calls outside any trace record
    // nothing; a JDBC call inside another (a pool's proxy calling the driver) is one node.

    /** The SQL of prepared statements, by identity, held weakly (bounded as Handoffs). */
    private static final Handoffs SQL_TEXTS = new Handoffs();

    /** Entry of a PreparedStatement's execute*() (o is the statement) or of a DataSource's
     *  getConnection (o is the data source). Pair with sqlExit. */
    public static void sqlEnter(Object o, long siteId) {
        sqlEnterText(o, null, siteId);
    }

    /** Entry of Statement.execute*(String sql, ...): the statement and its SQL. Pair with
     *  sqlExit. */
    public static void sqlEnterText(Object statement, Object sql, long siteId) {
        Ring r = RINGS.get();
        boolean opens = r != null && r.depth > 0 && r.sqlDepth == 0 && r.buf != null;
        if (r == null)
            return; // a thread outside any trace: sqlExit finds no ring either
        r.sqlStack = (r.sqlStack << 1) | (opens ? 1 : 0);
        if (!opens)
            return;
        r.sqlDepth++; // from here JDBC calls record nothing (dbSystem's own included)
        enter(siteId);
        if (r.skipFrom != 0 || statement == null)
            return;
        String text = sql instanceof String ? (String) sql : SQL_TEXTS.peek(statement);
        data(r, NODE_DB_STATEMENT, text, NODE_DATA_MAX);
        data(r, NODE_DB_SYSTEM, dbSystem(statement), NODE_DATA_MAX);
    }

    /** The database product a statement's driver names in its JDBC URL (jdbc:<name>:...,
     *  OpenTelemetry's db.system: h2, postgresql, ...), through a pool's proxy
     *  (Wrapper.unwrap), read once per driver's statement class; null for anything not a
     *  statement (a data source), or when the driver does not say. */
    static String dbSystem(Object statement) {
        try {
            Class<?> k = statement.getClass();
            String s = knownDbSystem(k);
            if (s != UNKNOWN)
                return s; // a driver's statement class seen before
            Method connection = STATEMENT_CONNECTION.of(k);
            if (connection == null)
                return null; // a data source
            Object driver = statement;
            Method unwrap = WRAPPER_UNWRAP.of(k);
            Object inner = unwrap == null ? null : unwrap.invoke(statement, connection.getDeclaringClass());
            if (inner != null && inner != statement) { // a pool's proxy (never kept: it may wrap any driver)
                driver = inner;
                k = inner.getClass();
                if ((s = knownDbSystem(k)) != UNKNOWN)
                    return s;
            }
            Object c = STATEMENT_CONNECTION.of(k).invoke(driver);
            Method meta = c == null ? null : CONNECTION_META.of(c.getClass());
            Object md = meta == null ? null : meta.invoke(c);
            Method url = md == null ? null : META_URL.of(md.getClass());
            s = url == null ? null : jdbcSubprotocol((String) url.invoke(md));
            DB_SYSTEMS.get(k)[0] = s == null ? "" : s;
            return s;
        } catch (Throwable e) {
            return null; // the driver would not say: no db.system
        }
    }

    private static final String UNKNOWN = new String("?"); // compared by identity

    /** What is known of a driver's statement class: its db.system, null when it says
     *  nothing, UNKNOWN before it was asked. */
    private static String knownDbSystem(Class<?> k) {
        String s = DB_SYSTEMS.get(k)[0];
        return s == null ? UNKNOWN : s.isEmpty() ? null : s;
    }

    /** Per statement class, once asked: its db.system, "" for none (a ClassValue: no lock,
     *  and nothing that keeps a web application's classes from being unloaded). */
    private static final ClassValue<String[]> DB_SYSTEMS = new ClassValue<String[]>() {
        @Override
        protected String[] computeValue(Class<?> k) {
            return new String[1];
        }
    };

    /** "postgresql" of "jdbc:postgresql://host/db", "h2" of "jdbc:h2:mem:x"; null when the
     *  URL is none (or the name is not [a-z0-9]+ after lower-casing). */
    static String jdbcSubprotocol(String url) {
        if (url == null || !url.regionMatches(true, 0, "jdbc:", 0, 5))
            return null;
        int end = url.indexOf(':', 5);
        String name = (end < 0 ? url.substring(5) : url.substring(5, end)).toLowerCase(java.util.Locale.ROOT);
        if (name.isEmpty() || name.length() > 32)
            return null;
        for (int i = 0; i < name.length(); i++) {
            char ch = name.charAt(i);
            if (!(ch >= 'a' && ch <= 'z') && !(ch >= '0' && ch <= '9'))
                return null;
        }
        return name;
    }

    private static final HeaderMethods STATEMENT_CONNECTION = new HeaderMethods("java.sql.Statement", "getConnection");
    private static final HeaderMethods CONNECTION_META = new HeaderMethods("java.sql.Connection", "getMetaData");
    private static final HeaderMethods META_URL = new HeaderMethods("java.sql.DatabaseMetaData", "getURL");
    private static final HeaderMethods WRAPPER_UNWRAP = new HeaderMethods("java.sql.Wrapper", "unwrap", Class.class);

    public static void sqlExit(long siteId) {
        sqlDone(siteId, EXIT);
    }

    public static void sqlExitThrow(long siteId) {
        sqlDone(siteId, EXIT_THROW);
    }

    /** The normal exit of executeUpdate: the row count on the node. */
    public static void sqlExitRows(int rows, long siteId) {
        sqlRows(rows);
        sqlDone(siteId, EXIT);
    }

    /** The normal exit of executeLargeUpdate. */
    public static void sqlExitLargeRows(long rows, long siteId) {
        sqlRows(rows);
        sqlDone(siteId, EXIT);
    }

    /** The normal exit of executeBatch (int[]) / executeLargeBatch (long[]): the sum of the
     *  counts the driver knows (SUCCESS_NO_INFO and EXECUTE_FAILED are negative: left out). */
    public static void sqlExitBatch(Object counts, long siteId) {
        long sum = 0;
        if (counts instanceof int[]) {
            for (int c : (int[]) counts)
                sum += Math.max(c, 0);
        } else if (counts instanceof long[]) {
            for (long c : (long[]) counts)
                sum += Math.max(c, 0);
        } else {
            sum = -1;
        }
        sqlRows(sum);
        sqlDone(siteId, EXIT);
    }

    /** A count of rows on the JDBC node being left, if it opened one. */
    private static void sqlRows(long rows) {
        Ring r = RINGS.get();
        if (r != null && rows >= 0 && (r.sqlStack & 1) != 0)
            data(r, NODE_DB_ROWS, Long.toString(rows), NODE_DATA_MAX);
    }

    private static void sqlDone(long siteId, int kind) {
        Ring r = RINGS.get();
        if (r == null)
            return;
        boolean opened = (r.sqlStack & 1) != 0;
        r.sqlStack >>>= 1;
        if (!opened)
            return;
        r.sqlDepth--;
        leave(r, kind, siteId);
    }

    /** The prepareStatement / prepareCall running on a thread: its SQL, and how deep (a
     *  pool's proxy prepares through the driver). Kept apart from the rings: a thread that
     *  only prepares (a statement cache filled at start-up) needs no ring. */
    private static final class Preparing {
        String sql;
        int depth;
    }

    private static final ThreadLocal<Preparing> PREPARING = new ThreadLocal<>();

    /** Entry of Connection.prepareStatement / prepareCall(String sql, ...). */
    public static void sqlPrepare(Object sql, long siteId) {
        Preparing p = PREPARING.get();
        if (p == null)
            PREPARING.set(p = new Preparing());
        if (p.depth++ == 0 && sql instanceof String)
            p.sql = (String) sql;
    }

    public static void sqlPrepared(long siteId) {
        Preparing p = PREPARING.get();
        if (p != null && p.depth > 0 && --p.depth == 0)
            p.sql = null;
    }

    /** A PreparedStatement's constructor: made inside a prepare, it keeps that SQL. */
    public static void sqlBind(Object statement, long siteId) {
        Preparing p = PREPARING.get();
        if (p != null && p.sql != null && statement != null)
            SQL_TEXTS.put(statement, p.sql);
    }

    // --- across JVMs: HTTP ---------------------------------------------------------------
    //
    // An outgoing request carries the context in two headers: W3C `traceparent` (the trace
    // id, and the low 64 bits of the segment id as parent-id), which other tracers read, and
    // `cmr-parent: <agent hex>:<segment hex>:<event seq hex>[:<time hex>:<mac>]`, which names
    // the FORK event exactly, authenticated by a MAC (HMAC-SHA-256 over the trace id, those
    // three numbers and the time it was sent in seconds, 128 bits in hex) under the fleet's
    // trace-context key from the agent's configuration (docs/SECURITY.md). A MAC is valid
    // for MAC_VALID_S around its time: a header seen by a callee outside the fleet (every
    // outgoing call carries one) cannot be replayed into the trace later. What an incoming
    // request may join is the environment's policy:
    //   AUTHENTICATED  a cmr-parent with a valid MAC joins the caller's trace; anything else
    //                  (a bare traceparent, a wrong or missing MAC) starts a trace of its own
    //                  whose root is a "remote caller" (agent 0, event -1) naming the foreign
    //                  parent-id: linked to it, but not inside someone else's trace;
    //   ANY            a valid cmr-parent joins exactly, a traceparent joins that trace under
    //                  a remote caller (behind a gateway that strips outside headers);
    //   NONE           every request starts its own trace, linked to the foreign parent.

    static final String TRACEPARENT = "traceparent", CMR_PARENT = "cmr-parent";
    static final int POLICY_AUTHENTICATED = 0, POLICY_ANY = 1, POLICY_NONE = 2; // as the wire's enum
    private static final int MAC_HEX = 32;
    static final long MAC_VALID_S = 300; // either side of the time in the header (clock skew included)

    /** The policy and key in force, replaced whole by configureTraceContext. */
    private static final class TraceContextSettings {
        final int policy;
        final SecretKeySpec key; // null: no key, so no MAC is sent and none verifies

        TraceContextSettings(int policy, SecretKeySpec key) {
            this.policy = policy;
            this.key = key;
        }
    }

    private static volatile TraceContextSettings traceContext = new TraceContextSettings(POLICY_AUTHENTICATED, null);
    private static volatile String[] requestHeaders = new String[0];
    private static volatile long settingsFetchedNs;
    private static volatile boolean settingsFetched;

    /** {policy, key...} from the agent's configuration, or null before one arrived. */
    private static native byte[] traceContext0();

    /** The settings in force, fetched from the agent at most once a second (a configuration
     *  may change them while the JVM runs). */
    private static TraceContextSettings traceContext() {
        fetchSettings();
        return traceContext;
    }

    /** The request headers the environment asks entry traces to keep (lower-case names),
     *  fetched with the trace-context settings. */
    static String[] requestHeaders() {
        fetchSettings();
        return requestHeaders;
    }

    /** The configuration's settings the probes use (trace context, request headers), fetched
     *  from the agent at most once a second (a configuration may change them while the JVM
     *  runs). */
    private static void fetchSettings() {
        long now = System.nanoTime();
        if (settingsFetched && now - settingsFetchedNs <= 1_000_000_000L)
            return;
        settingsFetchedNs = now;
        settingsFetched = true;
        try {
            byte[] b = traceContext0();
            if (b != null && b.length >= 1)
                configureTraceContext(b[0], java.util.Arrays.copyOfRange(b, 1, b.length));
            String h = requestHeaders0();
            requestHeaders = h == null || h.isEmpty() ? new String[0] : h.split("\n");
        } catch (Throwable e) {
            // natives not bound (no agent): the defaults stay
        }
    }
    /** A thread's HMAC, and the key it was last initialised with (doFinal leaves it ready
     *  for the next value under the same key: no init per header). */
    private static final class KeyedMac {
        Mac mac;
        SecretKeySpec key;
    }

    private static final ThreadLocal<KeyedMac> MACS = new ThreadLocal<>(); // (no lambda: see the class comment)

    /** Replaces the settings (from traceContext0; tests call it directly). */
    static void configureTraceContext(int policy, byte[] key) {
        SecretKeySpec k = key != null && key.length >= 16 ? new SecretKeySpec(key.clone(), "HmacSHA256") : null;
        traceContext = new TraceContextSettings(policy < POLICY_AUTHENTICATED || policy > POLICY_NONE
                ? POLICY_AUTHENTICATED : policy, k);
    }

    /** The MAC of a cmr-parent header's numbers under key, in hex; null when no MAC can be made. */
    static String contextMac(SecretKeySpec key, long hi, long lo, long agent, long segment, long event,
                             long timeS) {
        if (key == null)
            return null;
        try {
            KeyedMac k = MACS.get();
            if (k == null)
                MACS.set(k = new KeyedMac());
            if (k.mac == null)
                k.mac = Mac.getInstance("HmacSHA256");
            Mac mac = k.mac;
            if (k.key != key) {
                k.key = null; // until init succeeded
                mac.init(key);
                k.key = key;
            }
            ByteBuffer b = ByteBuffer.allocate(48);
            b.putLong(hi).putLong(lo).putLong(agent).putLong(segment).putLong(event).putLong(timeS);
            byte[] d = mac.doFinal(b.array());
            StringBuilder s = new StringBuilder(MAC_HEX);
            for (int i = 0; i < MAC_HEX / 2; i++)
                s.append(Character.forDigit((d[i] >> 4) & 15, 16)).append(Character.forDigit(d[i] & 15, 16));
            return s.toString();
        } catch (Exception e) {
            return null;
        }
    }

    /** Compares two MACs in time that does not depend on where they differ. */
    private static boolean macEquals(String a, String b) {
        if (a == null || b == null || a.length() != b.length())
            return false;
        int diff = 0;
        for (int i = 0; i < a.length(); i++)
            diff |= a.charAt(i) ^ b.charAt(i);
        return diff == 0;
    }

    /** Before an outgoing request: `request` is a java.net.URLConnection not yet connected. */
    public static void httpOut(Object request, long siteId) {
        Ring r = RINGS.get();
        if (request == null || r == null || r.depth == 0 || r.buf == null || r.skipFrom == 1)
            return; // (a segment skipped whole: the request goes out untraced)
        if (request == r.httpUrlConn)
            return; // the connect() inside its exchange's node: the node put the headers on
        propagate(r, request, siteId);
    }

    /** Puts the context headers on `request` (anything headerSetter knows) and records the
     *  FORK they name; a request that takes no headers goes out untraced. */
    private static void propagate(Ring r, Object request, long siteId) {
        long at = r.seq;
        boolean fork = forkFits(r) && r.fits(1); // checked before the headers name it
        String[] h = contextHeaders(r, r.segment, at);
        try {
            if (request instanceof URLConnection) {
                URLConnection u = (URLConnection) request;
                u.setRequestProperty(TRACEPARENT, h[0]);
                if (h[1] != null)
                    u.setRequestProperty(CMR_PARENT, h[1]);
            } else {
                Method set = headerSetter(request.getClass());
                if (set == null)
                    return;
                set.invoke(request, TRACEPARENT, h[0]);
                if (h[1] != null)
                    set.invoke(request, CMR_PARENT, h[1]);
            }
        } catch (Throwable e) {
            return; // already connected, or headers refused: the call goes out untraced
        }
        if (fork && r.put(FORK, siteId, System.nanoTime(), 0, 1))
            r.seq++;
    }

    /** {traceparent, cmr-parent} naming event `event` of segment `segment` of the open
     *  segment's trace; cmr-parent null when the agent has no id yet. */
    private static String[] contextHeaders(Ring r, long segment, long event) {
        long agent = r.agentId();
        String tp = traceparent(r.traceHi, r.traceLo, segment);
        if (agent == 0)
            return new String[] {tp, null};
        String cp = Long.toHexString(agent) + ':' + Long.toHexString(segment) + ':' + Long.toHexString(event);
        long now = System.currentTimeMillis() / 1000;
        String mac = contextMac(traceContext().key, r.traceHi, r.traceLo, agent, segment, event, now);
        if (mac != null)
            cp = cp + ':' + Long.toHexString(now) + ':' + mac;
        return new String[] {tp, cp};
    }

    /** A method that sets a request header on objects of class k: the JDK HttpClient's
     *  (for its copies, httpSend) and OkHttp's request builders, Apache HttpClient 4 and 5 requests; null when none. */
    private static Method headerSetter(Class<?> k) {
        Method m = HEADER_SETTERS.of(k);
        if (m == null)
            m = OKHTTP_HEADER.of(k);
        if (m == null)
            m = APACHE4_SET_HEADER.of(k);
        if (m == null)
            m = APACHE5_SET_HEADER.of(k);
        return m;
    }

    // --- outgoing HTTP calls as nodes -----------------------------------------------------
    //
    // An HTTP client's call inside a trace (Apache HttpClient 4 and 5: doExecute; OkHttp:
    // RealCall.execute, and AsyncCall.execute for enqueue) is a node of its own: its method
    // and URL (without query string or user info) as it begins, its status as it returns,
    // the trace context on the request it sends and the FORK those headers name inside it,
    // so that the callee's tree hangs under the call, as the time the caller waited. A
    // client whose call holds a request that takes no headers (OkHttp's is immutable) gets
    // them where it builds the request it sends, inside the call (httpOutInCall on
    // Request.Builder.build: OkHttp's BridgeInterceptor builds one per request it sends).

    /** Entry of a client's call; `request` is what it sends, or the call (OkHttp). Pair
     *  with httpCallExit (the response) / httpCallEnd / httpCallExitThrow. */
    public static void httpCall(Object request, long siteId) {
        Ring r = RINGS.get();
        if (r == null)
            return; // a thread outside any trace: the exits find no ring either
        boolean opens = r.depth > 0 && r.buf != null && r.skipFrom != 1;
        r.httpStack = (r.httpStack << 1) | (opens ? 1 : 0);
        if (!opens)
            return;
        r.httpCalls++;
        enter(siteId);
        if (request == null)
            return;
        requestData(r, requestLineOf(request));
        propagate(r, request, siteId);
    }

    /** Entry of a client's call that returns no response (OkHttp's AsyncCall.execute): as
     *  httpCall; the response's status comes from httpCallResponse inside it. Pair with
     *  httpCallEnd / httpCallExitThrow. */
    public static void httpCallVoid(Object request, long siteId) {
        httpCall(request, siteId);
        Ring r = RINGS.get();
        if (r != null && (r.httpStack & 1) != 0)
            r.httpVoidCall = r.httpCalls;
    }

    /** Exit of the method inside a call opened by httpCallVoid that returns its response
     *  (OkHttp's RealCall.getResponseWithInterceptorChain): the status on that call's node,
     *  once; inside any other call (a sync execute gives its own), nothing. */
    public static void httpCallResponse(Object response, long siteId) {
        Ring r = RINGS.get();
        if (r == null || r.httpCalls == 0 || r.httpVoidCall != r.httpCalls)
            return;
        r.httpVoidCall = 0;
        statusData(r, response);
    }

    /** A client's response's status on the innermost open call (the client's node). */
    private static void statusData(Ring r, Object response) {
        try {
            int code = statusOf(response);
            if (code > 0)
                data(r, NODE_HTTP_STATUS, Integer.toString(code), NODE_DATA_MAX);
        } catch (Throwable e) {
            // unreadable response: no status
        }
    }

    public static void httpCallExit(Object response, long siteId) {
        Ring r = httpCallDone();
        if (r == null)
            return;
        statusData(r, response);
        leave(r, EXIT, siteId);
    }

    /** The normal exit of a call that returns no response (OkHttp's AsyncCall.execute). */
    public static void httpCallEnd(long siteId) {
        Ring r = httpCallDone();
        if (r != null)
            leave(r, EXIT, siteId);
    }

    public static void httpCallExitThrow(long siteId) {
        Ring r = httpCallDone();
        if (r != null)
            leave(r, EXIT_THROW, siteId);
    }

    /** The ring, if the call being left opened a node. */
    private static Ring httpCallDone() {
        Ring r = popHttpStack();
        if (r != null) {
            if (r.httpVoidCall == r.httpCalls)
                r.httpVoidCall = 0;
            r.httpCalls--;
        }
        return r;
    }

    /** Leaves an HTTP client probe's call: the ring, if its entry began something. */
    private static Ring popHttpStack() {
        Ring r = RINGS.get();
        if (r == null)
            return null;
        boolean opened = (r.httpStack & 1) != 0;
        r.httpStack >>>= 1;
        return opened ? r : null;
    }

    // --- the JDK's HttpURLConnection as a node --------------------------------------------
    //
    // Its exchange happens in getInputStream (getResponseCode, getHeaderField... all call
    // it): the node is that call, when the exchange is still to come (the instrumenter
    // passes its responseCode field: -1 until a response was read) and no other client call
    // is open on the thread. The headers go on the request at the node's entry when it is
    // not connected yet; an application that called connect() or getOutputStream() first
    // (a POST's body) had them put on there (httpOut), naming its own method: the callee
    // then hangs beside the node, under that method, and the node still has method, URL
    // and status. The status of an exchange that threw (a 404 is a FileNotFoundException)
    // is read as getResponseCode reads it: from the remembered exception and the status
    // line, without a second request.

    /** Entry of sun.net.www.protocol.http.HttpURLConnection.getInputStream: `conn` the
     *  connection, `responseCode` its field. Pair with httpUrlCallExit / httpUrlCallExitThrow. */
    public static void httpUrlCall(Object conn, int responseCode, long siteId) {
        Ring r = RINGS.get();
        if (r == null)
            return; // a thread outside any trace: the exits find no ring either
        boolean opens = conn instanceof HttpURLConnection && responseCode == -1 && r.depth > 0 && r.buf != null
                && r.skipFrom != 1 && r.httpCalls == 0 && r.asyncSend == null;
        r.httpStack = (r.httpStack << 1) | (opens ? 1 : 0);
        if (!opens)
            return; // read again after its exchange, or inside another client's call
        r.httpCalls++;
        r.httpUrlConn = conn;
        enter(siteId);
        HttpURLConnection c = (HttpURLConnection) conn;
        requestData(r, new String[] {c.getRequestMethod(), String.valueOf(c.getURL())});
        propagate(r, conn, siteId); // refused (connected already): put on before, by httpOut
    }

    public static void httpUrlCallExit(Object conn, long siteId) {
        Ring r = RINGS.get();
        if (r != null && (r.httpStack & 1) != 0)
            urlStatus(r, conn);
        httpUrlCallDone(siteId, EXIT);
    }

    public static void httpUrlCallExitThrow(long siteId) {
        Ring r = RINGS.get();
        if (r != null && (r.httpStack & 1) != 0)
            urlStatus(r, r.httpUrlConn); // while the node is open: the nested reads open none
        httpUrlCallDone(siteId, EXIT_THROW);
    }

    private static void httpUrlCallDone(long siteId, int kind) {
        Ring r = httpCallDone();
        if (r != null) {
            r.httpUrlConn = null;
            leave(r, kind, siteId);
        }
    }

    /** The connection's response status on the open node, when it has one. */
    private static void urlStatus(Ring r, Object conn) {
        try {
            int code = conn instanceof HttpURLConnection ? ((HttpURLConnection) conn).getResponseCode() : -1;
            if (code > 0)
                data(r, NODE_HTTP_STATUS, Integer.toString(code), NODE_DATA_MAX);
        } catch (Throwable e) {
            // no response (refused, timed out): the node without a status
        }
    }

    /** A request builder about to build, inside a client's call node: the request it builds
     *  carries the context (OkHttp). Outside one, nothing. */
    public static void httpOutInCall(Object builder, long siteId) {
        Ring r = RINGS.get();
        if (builder != null && r != null && r.httpCalls > 0 && r.buf != null && r.skipFrom != 1)
            propagate(r, builder, siteId);
    }

    /** {method, URL} of a client's request (Apache 4, Apache 5, an OkHttp call, the JDK's
     *  HttpRequest); null when the object is none of them. */
    static String[] requestLine(Object req) throws ReflectiveOperationException {
        Method m = JDK_METHOD.of(req.getClass());
        if (m != null) {
            Method uri = JDK_URI.of(req.getClass());
            return new String[] {(String) m.invoke(req), uri == null ? null : String.valueOf(uri.invoke(req))};
        }
        m = APACHE4_REQUEST_LINE.of(req.getClass());
        if (m != null) {
            Object line = m.invoke(req);
            Method method = line == null ? null : APACHE4_LINE_METHOD.of(line.getClass());
            Method uri = line == null ? null : APACHE4_LINE_URI.of(line.getClass());
            return method == null || uri == null ? null
                    : new String[] {(String) method.invoke(line), (String) uri.invoke(line)};
        }
        m = APACHE5_METHOD.of(req.getClass());
        if (m != null) {
            Method uri = APACHE5_URI.of(req.getClass());
            return new String[] {(String) m.invoke(req), uri == null ? null : String.valueOf(uri.invoke(req))};
        }
        m = OKHTTP_CALL_REQUEST.of(req.getClass());
        if (m == null)
            m = okhttpAsyncRequest(req.getClass());
        Object r = m == null ? null : m.invoke(req);
        Method method = r == null ? null : OKHTTP_METHOD.of(r.getClass());
        Method url = r == null ? null : OKHTTP_URL.of(r.getClass());
        return method == null || url == null ? null
                : new String[] {(String) method.invoke(r), String.valueOf(url.invoke(r))};
    }

    private static volatile Method asyncRequest; // okhttp3.RealCall$AsyncCall.request()

    /** OkHttp's AsyncCall.request(), package-private (the class is on the class path, in no
     *  named module: it may be opened); null for any other class. */
    private static Method okhttpAsyncRequest(Class<?> k) throws ReflectiveOperationException {
        if (!k.getName().equals("okhttp3.RealCall$AsyncCall"))
            return null;
        Method m = asyncRequest;
        if (m == null || m.getDeclaringClass() != k) {
            m = k.getDeclaredMethod("request");
            m.setAccessible(true);
            asyncRequest = m;
        }
        return m;
    }

    /** The status code of a client's response (Apache 4, Apache 5, OkHttp, the JDK's
     *  HttpResponse); 0 when unknown. */
    static int statusOf(Object resp) throws ReflectiveOperationException {
        if (resp == null)
            return 0;
        Method m = APACHE4_STATUS_LINE.of(resp.getClass());
        if (m != null) {
            Object line = m.invoke(resp);
            Method code = line == null ? null : APACHE4_STATUS_CODE.of(line.getClass());
            return code == null ? 0 : (Integer) code.invoke(line);
        }
        m = APACHE5_CODE.of(resp.getClass());
        if (m == null)
            m = OKHTTP_CODE.of(resp.getClass());
        if (m == null)
            m = JDK_STATUS.of(resp.getClass());
        return m == null ? 0 : (Integer) m.invoke(resp);
    }

    // --- the JDK HttpClient ----------------------------------------------------------------
    //
    // HttpClientImpl.send and sendAsync (every HttpClient is one): the context is taken when
    // the request is sent. Its requests are immutable, so the entry probe returns a copy
    // with the context headers (HttpRequest.newBuilder(request, every header), JDK 16+) and
    // the method sends that copy instead (the instrumenter stores it in the parameter).
    // send is a node like the other clients' calls. sendAsync returns before the response:
    // the caller records a FORK, and the node is written when the future completes, by the
    // thread that completes it, as a segment of its own under that FORK (an async child of
    // the caller's call) spanning the send to the completion, with the FORK its headers
    // name inside it (event 1), so the callee hangs under the node, waited for. While
    // either runs, the client's own hand-offs (its executor, its futures' stages) capture
    // nothing: the node is the call.

    /** Entry of HttpClientImpl.send: the request to send in place of `request`. Pair with
     *  httpSendExit (the response) / httpSendExitThrow. */
    public static Object httpSend(Object request, long siteId) {
        Ring r = RINGS.get();
        if (r == null)
            return request; // outside any trace: the exits find no ring either
        boolean opens = request != null && r.depth > 0 && r.buf != null && r.skipFrom != 1 && r.httpCalls == 0
                && r.asyncSend == null;
        r.httpStack = (r.httpStack << 1) | (opens ? 1 : 0);
        if (!opens)
            return request; // a send inside another client call (sendAsync's own overloads)
        r.httpCalls++;
        r.quiet++;
        enter(siteId);
        requestData(r, requestLineOf(request));
        if (!forkFits(r) || !r.fits(1))
            return request; // no room for the FORK the headers would name: untraced
        String[] h = contextHeaders(r, r.segment, r.seq);
        Object copy = withHeaders(request, h[0], h[1]);
        if (copy == null)
            return request;
        if (r.put(FORK, siteId, System.nanoTime(), 0, 1))
            r.seq++;
        return copy;
    }

    public static void httpSendExit(Object response, long siteId) {
        sendQuietEnd();
        httpCallExit(response, siteId);
    }

    public static void httpSendExitThrow(long siteId) {
        sendQuietEnd();
        httpCallExitThrow(siteId);
    }

    /** A send being left that opened a node: its client's hand-offs capture again. */
    private static void sendQuietEnd() {
        Ring r = RINGS.get();
        if (r != null && (r.httpStack & 1) != 0 && r.quiet > 0)
            r.quiet--;
    }

    /** Entry of HttpClientImpl.sendAsync: the request to send in place of `request`. Pair
     *  with httpSendAsyncExit (the future) / httpSendAsyncExitThrow. */
    public static Object httpSendAsync(Object request, long siteId) {
        Ring r = RINGS.get();
        if (r == null)
            return request;
        Object copy = null;
        AsyncSend a = null;
        if (request != null && r.depth > 0 && r.buf != null && r.skipFrom == 0 && r.httpCalls == 0
                && r.asyncSend == null && forkFits(r) && r.fits(1)) {
            long segment = r.newSegmentId();
            String[] h = contextHeaders(r, segment, 1); // the node's FORK, right after its enter
            copy = withHeaders(request, h[0], h[1]);
            Context parent = copy == null ? null : fork(r, siteId);
            if (parent != null && parent.event >= 0)
                a = new AsyncSend(parent, segment, siteId, System.nanoTime(), requestLineOf(request));
        }
        r.httpStack = (r.httpStack << 1) | (a != null ? 1 : 0);
        if (a == null)
            return request; // outside a trace, inside another call, or no room: untraced
        r.asyncSend = a;
        r.quiet++;
        return copy;
    }

    public static void httpSendAsyncExit(Object future, long siteId) {
        AsyncSend a = asyncSendDone();
        if (a != null && future instanceof CompletableFuture)
            ((CompletableFuture<?>) future).whenComplete(a);
    }

    public static void httpSendAsyncExitThrow(long siteId) {
        asyncSendDone(); // refused at once: nothing was sent
    }

    /** The sendAsync being left, if its entry began one (with the ring's state put back). */
    private static AsyncSend asyncSendDone() {
        Ring r = popHttpStack();
        if (r == null)
            return null;
        AsyncSend a = r.asyncSend;
        r.asyncSend = null;
        if (r.quiet > 0)
            r.quiet--;
        return a;
    }

    /** A node that ends after the call that began it returned, on another thread: written
     *  as a segment of its own under `parent` by the thread it ends on (asyncCallDone). */
    abstract static class AsyncNode {
        Context parent;           // (set before the node can end)
        final long segment, site; // segment: its id, or -1 for a new one
        long start, end;          // when it began and ended
        boolean failed;
        AsyncNode next; // Ring.asyncDone's list

        AsyncNode(Context parent, long segment, long site, long start) {
            this.parent = parent;
            this.segment = segment;
            this.site = site;
            this.start = start;
        }

        /** What the node records between its enter and its exit, on x. */
        abstract void writeInside(Ring x);
    }

    /** A sendAsync's call, from the send to the completion of its future: written then as a
     *  segment of its own by the completing thread (accept). */
    static final class AsyncSend extends AsyncNode implements BiConsumer<Object, Throwable> {
        final String[] line; // {method, URL}, or null
        int status;          // the response's status (0: none)

        AsyncSend(Context parent, long segment, long site, long start, String[] line) {
            super(parent, segment, site, start);
            this.line = line;
        }

        @Override
        public void accept(Object response, Throwable failure) {
            try {
                end = System.nanoTime();
                failed = failure != null;
                try {
                    status = statusOf(response);
                } catch (Throwable e) {
                    // unreadable response: no status
                }
                asyncCallDone(this);
            } catch (Throwable e) {
                // never into the application's future
            }
        }

        @Override
        void writeInside(Ring x) {
            if (x.putChecked(FORK, site, start, 0, 1)) // event 1, named by the headers
                x.seq++;
            requestData(x, line);
            if (status > 0)
                data(x, NODE_HTTP_STATUS, Integer.toString(status), NODE_DATA_MAX);
        }
    }

    static final int MAX_ASYNC_WAITING = 64;

    /** On the thread an async node ended on: the node, as a whole segment, now; or, on a
     *  thread inside a segment of its own (a sendAsync's future completed at once, on the
     *  caller; a container completing a request inside a task of the trace), when that
     *  segment ends: one segment at a time in a ring. More than MAX_ASYNC_WAITING waiting:
     *  counted as calls not recorded. */
    static void asyncCallDone(AsyncNode a) {
        Ring x = ring();
        if (x == NONE || x.buf == null)
            return; // a carrier thread, or no ring to be had: nowhere to write or count
        if (x.depth == 0) {
            writeAsyncCall(x, a);
        } else if (x.asyncDoneCount < MAX_ASYNC_WAITING) {
            a.next = x.asyncDone;
            x.asyncDone = a;
            x.asyncDoneCount++;
        } else {
            LONGS.setOpaque(x.buf, DROPPED_CALLS, ++x.droppedCalls);
        }
    }

    /** The async nodes that waited for x's segment to end (oldest first). */
    private static void writeWaitingAsyncCalls(Ring x) {
        AsyncNode list = x.asyncDone, reversed = null;
        x.asyncDone = null;
        x.asyncDoneCount = 0;
        for (AsyncNode a = list, n; a != null; a = n) {
            n = a.next;
            a.next = reversed;
            reversed = a;
        }
        for (AsyncNode a = reversed; a != null; a = a.next)
            writeAsyncCall(x, a);
    }

    /** An async node as a segment of its own, on x outside any segment. */
    private static void writeAsyncCall(Ring x, AsyncNode a) {
        x.depth = 1;
        x.pending = a.parent;
        x.beginSegment(a.site, a.segment, a.start);
        if (x.skipFrom == 0)
            a.writeInside(x);
        leaveAt(x, a.failed ? EXIT_THROW : EXIT, a.site, a.end);
    }

    // --- async servlets ---------------------------------------------------------------------
    //
    // A servlet that started async processing (request.startAsync) returns from service
    // before its request is answered: whoever completes it later sets the status. At
    // service's end such a request records a FORK and gets a listener (a proxy of the
    // servlet API's AsyncListener); when the container calls its onComplete, the thread
    // there writes a node under that FORK spanning service's return to the completion,
    // with the request's final status as its segment's http.status, which cmr-ingest then
    // takes as the trace's (cmr/ids.h: the node's id is the method id of onComplete).

    /** At the end of a servlet's service, r's open segment its request's: the completion
     *  listening, its FORK recorded, when the request goes on asynchronously (the caller
     *  then gives it the time service returned, AsyncRequest.begins); null otherwise. */
    private static AsyncRequest answeredLater(Ring r, long siteId) {
        Object request = r.request, response = r.response;
        if (response == null || !forkFits(r))
            return null;
        try {
            Method started = SERVLET_ASYNC_STARTED.of(request.getClass());
            if (started == null || !Boolean.TRUE.equals(started.invoke(request)))
                return null;
            Method context = SERVLET_ASYNC_CONTEXT.of(request.getClass());
            Object ac = context == null ? null : context.invoke(request);
            AsyncApi api = ac == null ? null : ASYNC_APIS.get(started.getDeclaringClass());
            if (api == null)
                return null;
            AsyncRequest a = new AsyncRequest(api, response);
            // the container completes the request only after service returned
            api.addListener.invoke(ac, a.listener);
            Context parent = fork(r, siteId);
            if (parent.event < 0)
                return null; // no FORK to hang it under: the listener writes nothing (parent null)
            a.parent = parent;
            return a;
        } catch (Throwable e) {
            return null; // not async, or the listener refused: the status as it is now
        }
    }

    /** The async part of one servlet API (jakarta or javax), and the method id of its
     *  completion node (cmr/ids.h, from the agent). */
    static final class AsyncApi {
        final long completionId;
        final Class<?> listenerType;
        final Method addListener, contextOfEvent;

        /** For the ServletRequest interface `servletRequest`'s API. */
        AsyncApi(Class<?> servletRequest) throws ReflectiveOperationException {
            String pkg = servletRequest.getPackageName();
            ClassLoader l = servletRequest.getClassLoader();
            listenerType = Class.forName(pkg + ".AsyncListener", false, l);
            addListener = Class.forName(pkg + ".AsyncContext", false, l).getMethod("addListener", listenerType);
            contextOfEvent = Class.forName(pkg + ".AsyncEvent", false, l).getMethod("getAsyncContext");
            completionId = asyncCompletionId0(pkg.startsWith("jakarta."));
        }
    }

    /** Per ServletRequest interface: its API's async part, null when it has none (a
     *  ClassValue, as DB_SYSTEMS: no lock, nothing that keeps a container's classes). */
    private static final ClassValue<AsyncApi> ASYNC_APIS = new ClassValue<AsyncApi>() {
        @Override
        protected AsyncApi computeValue(Class<?> servletRequest) {
            try {
                return new AsyncApi(servletRequest);
            } catch (Throwable e) {
                return null; // no async part to be found (or no agent to name the node)
            }
        }
    };

    private static native long asyncCompletionId0(boolean jakarta);

    /** An async request's completion: its listener's onComplete writes the node. */
    static final class AsyncRequest extends AsyncNode implements java.lang.reflect.InvocationHandler {
        final AsyncApi api;
        final Object response, listener;
        String status; // the response's, once completed (null: unknown)
        private boolean begun, done;

        AsyncRequest(AsyncApi api, Object response) {
            super(null, -1, api.completionId, 0);
            this.api = api;
            this.response = response;
            this.listener = java.lang.reflect.Proxy.newProxyInstance(api.listenerType.getClassLoader(),
                                                                    new Class<?>[] {api.listenerType}, this);
        }

        @Override
        public Object invoke(Object proxy, Method m, Object[] args) {
            try {
                switch (m.getName()) {
                case "onComplete":
                    completed();
                    return null;
                case "onStartAsync": // async again (a dispatch started it anew): listen to that too
                    api.addListener.invoke(api.contextOfEvent.invoke(args[0]), listener);
                    return null;
                case "hashCode":
                    return System.identityHashCode(proxy);
                case "equals":
                    return proxy == args[0];
                case "toString":
                    return "cmr async request listener";
                default: // onTimeout, onError: onComplete follows
                    return null;
                }
            } catch (Throwable e) {
                return null; // never into the container
            }
        }

        /** Service returned at t (the node's start). */
        synchronized void begins(long t) {
            start = t;
            begun = true;
        }

        private void completed() {
            synchronized (this) {
                if (done || !begun || parent == null)
                    return; // once; never before service returned
                done = true;
            }
            end = Math.max(System.nanoTime(), start);
            status = responseStatus(response);
            asyncCallDone(this);
        }

        @Override
        void writeInside(Ring x) {
            data(x, DATA_HTTP_STATUS, status); // (null: nothing)
        }
    }

    /** The method and URL of a client's request (requestLine), on the node just entered. */
    private static void requestData(Ring r, String[] line) {
        if (line != null) {
            data(r, NODE_HTTP_METHOD, line[0], NODE_DATA_MAX);
            data(r, NODE_URL, plainUrl(line[1]), NODE_DATA_MAX);
        }
    }

    /** requestLine, or null when the request does not let itself be read. */
    private static String[] requestLineOf(Object request) {
        try {
            return requestLine(request);
        } catch (Throwable e) {
            return null; // unreadable request: the node without them
        }
    }

    private static volatile Method copyRequest; // HttpRequest.newBuilder(HttpRequest, BiPredicate)

    /** Keeps every header of the request copied. */
    private static final class AllHeaders implements BiPredicate<String, String> {
        @Override
        public boolean test(String name, String value) {
            return true;
        }
    }

    private static final AllHeaders ALL_HEADERS = new AllHeaders();

    /** A copy of a java.net.http.HttpRequest with the context headers (cmr-parent when not
     *  null); null when it cannot be copied (before JDK 16, a request that refuses). */
    static Object withHeaders(Object request, String traceparent, String cmrParent) {
        try {
            Method copy = copyRequest;
            if (copy == null || !copy.getDeclaringClass().isInstance(request)) {
                Class<?> k = request.getClass();
                while (k != null && !k.getName().equals("java.net.http.HttpRequest"))
                    k = k.getSuperclass();
                if (k == null)
                    return null;
                copy = k.getMethod("newBuilder", k, BiPredicate.class);
                copyRequest = copy;
            }
            Object b = copy.invoke(null, request, ALL_HEADERS);
            Method set = HEADER_SETTERS.of(b.getClass()), build = JDK_BUILD.of(b.getClass());
            if (set == null || build == null)
                return null;
            set.invoke(b, TRACEPARENT, traceparent);
            if (cmrParent != null)
                set.invoke(b, CMR_PARENT, cmrParent);
            return build.invoke(b);
        } catch (Throwable e) {
            return null;
        }
    }

    /** A URL without its query string, fragment and user info (they may carry secrets). */
    static String plainUrl(String url) {
        if (url == null)
            return null;
        int cut = url.length();
        int q = url.indexOf('?'), f = url.indexOf('#');
        if (q >= 0)
            cut = q;
        if (f >= 0 && f < cut)
            cut = f;
        String u = url.substring(0, cut);
        int scheme = u.indexOf("://");
        if (scheme > 0) {
            int hostStart = scheme + 3;
            int slash = u.indexOf('/', hostStart);
            int at = u.lastIndexOf('@', slash < 0 ? u.length() : slash);
            if (at >= hostStart)
                u = u.substring(0, hostStart) + u.substring(at + 1);
        }
        return u;
    }

    /** Around an incoming request (a servlet's service, an HttpServer exchange's filter
     *  chain): continue the caller's trace, or begin a new one. Pair with ctxEnd /
     *  ctxEndThrow. */
    public static void httpIn(Object request, long siteId) {
        Ring r = ring();
        if (onlyHandOff(r) && request != null && newRequest(request))
            leaveHandOff(r);
        Context c = null;
        if (r.depth == 0 && request != null) {
            try {
                c = remoteContext(header(request, TRACEPARENT), header(request, CMR_PARENT));
            } catch (Throwable e) {
                c = null; // unreadable headers: a trace of its own
            }
        }
        boolean outside = r.depth == 0;
        open(r, c, true, siteId);
        if (outside && r.depth > 0 && request != null) {
            r.request = request; // for the diagnoses' conditions, while the segment is open
            try {
                data(r, DATA_HTTP_METHOD, requestValue(request, COND_HTTP_METHOD, null));
                data(r, DATA_HTTP_PATH, requestValue(request, COND_HTTP_PATH, null));
                data(r, NODE_HTTP_ROUTE, routeOf(request), NODE_DATA_MAX);
                for (String name : requestHeaders()) { // the environment's selection, on the entry call
                    String v = header(request, name);
                    if (v != null)
                        data(r, NODE_HTTP_HEADER, name + '\n' + v, DATA_MAX);
                }
            } catch (Throwable e) {
                // unreadable request: no data
            }
        }
    }

    /** An incoming request is a transaction of its own, never the context a pool's job
     *  carried onto its thread: a server's loops run as jobs of its pool (Jetty's selector
     *  and reserved threads, a keep-alive or pipelined connection handed on while a request
     *  was open), so the context captured when the job was queued (the thread that started
     *  the server, the previous request) is not this request's caller. When the open
     *  segment is only such a hand-off's node (depth 1, opened by ctxBegin), it ends here and
     *  the request begins its own; the hand-off's ctxEnd then finds nothing to close. */
    private static void leaveHandOff(Ring r) {
        r.ctxStack = 0; // the only set bit was the hand-off's (one segment is open at a time)
        leave(r, EXIT, r.ctxSite);
    }

    /** Whether the open segment is only a hand-off's node: depth 1, opened by ctxBegin
     *  (ctxStack's only set bit), not by httpIn (which keeps its request). */
    private static boolean onlyHandOff(Ring r) {
        return r.depth == 1 && r.ctxStack != 0 && r.request == null;
    }

    /** At the start of a server's loop (Jetty's acceptor, selector, reserved thread), in a
     *  pool job that carried a context onto its thread: that segment ends here (as for a
     *  request, leaveHandOff), so that the loop, which runs for the server's life, keeps no
     *  trace open and carries none into the jobs it queues. */
    public static void ctxDetach(long siteId) {
        Ring r = RINGS.get();
        if (r != null && r != NONE && onlyHandOff(r))
            leaveHandOff(r);
    }

    /** Whether a request is new from the network (a servlet's REQUEST dispatch, any
     *  HttpServer exchange), not an async or error dispatch of a request already under way,
     *  which continues the context its dispatch was handed on with. */
    private static boolean newRequest(Object request) {
        try {
            Method m = SERVLET_DISPATCHER_TYPE.of(request.getClass());
            Object type = m == null ? null : m.invoke(request);
            return !(type instanceof Enum) || ((Enum<?>) type).name().equals("REQUEST");
        } catch (Throwable e) {
            return false; // unreadable: as before, the request continues the open segment
        }
    }

    /** route, or null when the request does not let itself be read. */
    private static String routeOf(Object request) {
        try {
            return route(request);
        } catch (Throwable e) {
            return null;
        }
    }

    /** The route that matched an incoming request (OpenTelemetry's http.route): a servlet's
     *  mapping under its context path, or the JDK HttpServer's context; null when unknown. */
    static String route(Object request) throws ReflectiveOperationException {
        Class<?> k = request.getClass();
        Method context = SERVLET_CONTEXT_PATH.of(k);
        if (context == null) {
            Method m = EXCHANGE_CONTEXT.of(k);
            Object hc = m == null ? null : m.invoke(request);
            Method path = hc == null ? null : HTTP_CONTEXT_PATH.of(hc.getClass());
            return path == null ? null : (String) path.invoke(hc);
        }
        String ctx = (String) context.invoke(request);
        Method mapping = SERVLET_MAPPING.of(k);
        Object map = null;
        try {
            map = mapping == null ? null : mapping.invoke(request);
        } catch (ReflectiveOperationException | LinkageError e) {
            map = null; // a Servlet 3.1 container under a Servlet 4 API: the paths below
        }
        if (map != null) {
            Method pattern = MAPPING_PATTERN.of(map.getClass()), match = MAPPING_MATCH.of(map.getClass());
            Object how = match == null ? null : match.invoke(map);
            if (pattern != null && how instanceof Enum)
                return servletRoute(ctx, ((Enum<?>) how).name(), (String) pattern.invoke(map), null, null);
        }
        Method servletPath = SERVLET_SERVLET_PATH.of(k), pathInfo = SERVLET_PATH_INFO.of(k);
        return servletPath == null || pathInfo == null ? null
                : servletRoute(ctx, null, null, (String) servletPath.invoke(request), (String) pathInfo.invoke(request));
    }

    /** A servlet's route: from its mapping (Servlet 4: how it matched, and the pattern),
     *  or, without one (Servlet 3.1), from the request's servlet path and path info: a path
     *  mapping ("/orders/*") leaves path info, an exact or extension mapping does not (the
     *  servlet path is then the route). Under the context path; null when unknown. */
    static String servletRoute(String context, String match, String pattern, String servletPath, String pathInfo) {
        String c = context == null ? "" : context;
        if (match != null) {
            switch (match) {
            case "EXACT":
            case "PATH":
                return pattern == null ? null : c + pattern;
            case "EXTENSION": // "*.jsp"
                return pattern == null ? null : c + "/" + pattern;
            case "DEFAULT": // the default servlet ("/"): whatever nothing else matched
                return c + "/*";
            case "CONTEXT_ROOT":
                return c + "/";
            default:
                return null;
            }
        }
        if (servletPath == null)
            return null;
        if (pathInfo != null)
            return c + servletPath + "/*";
        return c + servletPath;
    }

    /** The configuration's request headers, names joined by '\n' ("" for none). */
    private static native String requestHeaders0();

    /** Around a servlet's service(request, response): as httpIn, and the response's status
     *  is the transaction's when the segment ends. */
    public static void httpInServlet(Object request, Object response, long siteId) {
        httpIn(request, siteId);
        Ring r = RINGS.get();
        if (r != null && r.depth == 1 && r.request == request)
            r.response = response;
    }

    /** A request header: HttpServletRequest.getHeader, or for the JDK's HttpServer
     *  HttpExchange.getRequestHeaders().getFirst. */
    private static String header(Object request, String name) throws ReflectiveOperationException {
        Method get = SERVLET_HEADER.of(request.getClass());
        if (get != null)
            return (String) get.invoke(request, name);
        Method headers = EXCHANGE_HEADERS.of(request.getClass());
        if (headers == null)
            return null;
        Object h = headers.invoke(request);
        Method first = h == null ? null : HEADERS_FIRST.of(h.getClass());
        return first == null ? null : (String) first.invoke(h, name);
    }

    static String traceparent(long hi, long lo, long segment) {
        StringBuilder b = new StringBuilder(55).append("00-");
        hex16(b, hi);
        hex16(b, lo);
        b.append('-');
        hex16(b, segment == 0 ? 1 : segment); // an all-zero parent-id is invalid
        return b.append("-01").toString();
    }

    private static void hex16(StringBuilder b, long v) {
        for (int shift = 60; shift >= 0; shift -= 4)
            b.append(Character.forDigit((int) (v >>> shift) & 15, 16));
    }

    /** The context an incoming request carries under the policy in force; null when it
     *  carries none (or garbage). */
    static Context remoteContext(String traceparent, String cmrParent) {
        TraceContextSettings s = traceContext();
        return remoteContext(traceparent, cmrParent, s.policy, s.key);
    }

    static Context remoteContext(String traceparent, String cmrParent, int policy, SecretKeySpec key) {
        if (traceparent == null)
            return null;
        String tp = traceparent.trim();
        // version "-" trace-id(32) "-" parent-id(16) "-" flags(2); future versions may append
        if (tp.length() < 55 || tp.charAt(2) != '-' || tp.charAt(35) != '-' || tp.charAt(52) != '-' ||
                tp.startsWith("ff"))
            return null;
        try {
            long hi = Long.parseUnsignedLong(tp.substring(3, 19), 16);
            long lo = Long.parseUnsignedLong(tp.substring(19, 35), 16);
            long parent = Long.parseUnsignedLong(tp.substring(36, 52), 16);
            if ((hi | lo) == 0 || parent == 0)
                return null;
            Context exact = cmrParent == null || policy == POLICY_NONE
                    ? null : exactParent(hi, lo, parent, cmrParent, policy == POLICY_AUTHENTICATED, key);
            if (exact != null)
                return exact;
            if (policy == POLICY_ANY)
                return new Context(hi, lo, 0, parent, -1, true);
            ThreadLocalRandom rnd = ThreadLocalRandom.current(); // a trace of its own, linked
            return new Context(rnd.nextLong(), rnd.nextLong() | 1, 0, parent, -1, true);
        } catch (RuntimeException e) {
            return null;
        }
    }

    /** The caller's FORK that a cmr-parent header names, if it parses, agrees with the
     *  traceparent's parent-id and (when the MAC is required) carries a valid MAC under key
     *  (no key: nothing verifies); null otherwise (the traceparent alone then counts, as the
     *  policy says). */
    private static Context exactParent(long hi, long lo, long parent, String cmrParent, boolean requireMac,
                                       SecretKeySpec key) {
        String[] p = cmrParent.trim().split(":");
        if (p.length != 3 && p.length != 5)
            return null;
        try {
            long agent = Long.parseUnsignedLong(p[0], 16);
            long segment = Long.parseUnsignedLong(p[1], 16);
            long event = Long.parseUnsignedLong(p[2], 16);
            if (agent == 0 || segment != parent)
                return null;
            if (requireMac) {
                if (p.length != 5)
                    return null;
                long sent = Long.parseUnsignedLong(p[3], 16);
                if (Math.abs(System.currentTimeMillis() / 1000 - sent) > MAC_VALID_S ||
                        !macEquals(p[4], contextMac(key, hi, lo, agent, segment, event, sent)))
                    return null;
            }
            return new Context(hi, lo, agent, segment, event, true);
        } catch (NumberFormatException e) {
            return null;
        }
    }

    /** Public header methods found through the object's class (the servlet, HttpServer and
     *  HTTP client APIs are not visible from the bootstrap loader), one lookup per class:
     *  the method `name` of the first class or interface named in `types` that the object's
     *  class extends or implements. */
    static final class HeaderMethods {
        private final String[] types;
        private final String name;
        private final Class<?>[] params;
        private final IdentityHashMap<Class<?>, Method> found = new IdentityHashMap<>();

        HeaderMethods(String types, String name, Class<?>... params) {
            this.types = types.split("\\|");
            this.name = name;
            this.params = params;
        }

        synchronized Method of(Class<?> k) {
            if (found.containsKey(k))
                return found.get(k);
            Method m = null;
            for (Class<?> c = k; c != null && m == null; c = c.getSuperclass()) {
                m = named(c);
                for (Class<?> i : c.getInterfaces())
                    if (m == null)
                        m = lookup(i);
            }
            if (found.size() > 256)
                found.clear();
            found.put(k, m);
            return m;
        }

        /** The method, if c is one of the named types. */
        private Method named(Class<?> c) {
            for (String n : types)
                if (c.getName().equals(n))
                    try {
                        return c.getMethod(name, params);
                    } catch (NoSuchMethodException e) {
                        return null;
                    }
            return null;
        }

        private Method lookup(Class<?> i) {
            Method found = named(i);
            if (found != null)
                return found;
            for (Class<?> sup : i.getInterfaces()) {
                Method m = lookup(sup);
                if (m != null)
                    return m;
            }
            return null;
        }
    }

    private static final HeaderMethods SERVLET_HEADER = new HeaderMethods(
            "jakarta.servlet.http.HttpServletRequest|javax.servlet.http.HttpServletRequest", "getHeader", String.class);
    private static final HeaderMethods EXCHANGE_HEADERS = new HeaderMethods(
            "com.sun.net.httpserver.HttpExchange", "getRequestHeaders");
    private static final HeaderMethods HEADERS_FIRST = new HeaderMethods(
            "com.sun.net.httpserver.Headers", "getFirst", String.class);
    private static final HeaderMethods HEADER_SETTERS = new HeaderMethods(
            "java.net.http.HttpRequest$Builder", "setHeader", String.class, String.class);
    // HTTP clients of the class path (docs/COVERAGE.md)
    private static final HeaderMethods OKHTTP_HEADER = new HeaderMethods(
            "okhttp3.Request$Builder", "header", String.class, String.class);
    private static final HeaderMethods APACHE4_SET_HEADER = new HeaderMethods(
            "org.apache.http.HttpMessage", "setHeader", String.class, String.class);
    private static final HeaderMethods APACHE5_SET_HEADER = new HeaderMethods(
            "org.apache.hc.core5.http.HttpMessage", "setHeader", String.class, Object.class);
    private static final HeaderMethods APACHE4_REQUEST_LINE = new HeaderMethods(
            "org.apache.http.HttpRequest", "getRequestLine");
    private static final HeaderMethods APACHE4_LINE_METHOD = new HeaderMethods(
            "org.apache.http.RequestLine", "getMethod");
    private static final HeaderMethods APACHE4_LINE_URI = new HeaderMethods("org.apache.http.RequestLine", "getUri");
    private static final HeaderMethods APACHE4_STATUS_LINE = new HeaderMethods(
            "org.apache.http.HttpResponse", "getStatusLine");
    private static final HeaderMethods APACHE4_STATUS_CODE = new HeaderMethods(
            "org.apache.http.StatusLine", "getStatusCode");
    private static final HeaderMethods APACHE5_METHOD = new HeaderMethods(
            "org.apache.hc.core5.http.HttpRequest", "getMethod");
    private static final HeaderMethods APACHE5_URI = new HeaderMethods("org.apache.hc.core5.http.HttpRequest", "getUri");
    private static final HeaderMethods APACHE5_CODE = new HeaderMethods(
            "org.apache.hc.core5.http.HttpResponse", "getCode");
    private static final HeaderMethods OKHTTP_CALL_REQUEST = new HeaderMethods("okhttp3.Call", "request");
    private static final HeaderMethods OKHTTP_METHOD = new HeaderMethods("okhttp3.Request", "method");
    private static final HeaderMethods OKHTTP_URL = new HeaderMethods("okhttp3.Request", "url");
    private static final HeaderMethods OKHTTP_CODE = new HeaderMethods("okhttp3.Response", "code");
    private static final HeaderMethods JDK_METHOD = new HeaderMethods("java.net.http.HttpRequest", "method");
    private static final HeaderMethods JDK_URI = new HeaderMethods("java.net.http.HttpRequest", "uri");
    private static final HeaderMethods JDK_STATUS = new HeaderMethods("java.net.http.HttpResponse", "statusCode");
    private static final HeaderMethods JDK_BUILD = new HeaderMethods("java.net.http.HttpRequest$Builder", "build");

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
        if (d < TIMER_STACK && !r.putChecked(kind, methodId, System.nanoTime() - r.starts[d], 0, 1) && r.buf != null)
            r.countDrop(r.buf, kind);
    }

    // --- diagnoses: anchors and conditional probes (docs/DIAGNOSIS.md) --------------------
    //
    // A diagnosis' selected method carries the anchor probes, the methods discovered under
    // it the conditional ones. An anchor records its call like enter/exit; when the agent
    // has named it the anchor of a running diagnosis and the transaction's data matches the
    // diagnosis' conditions, the thread is in that diagnosis' context until the anchor
    // returns: its segment gets a DIAG record (the publisher tags the segment, counts a hit)
    // and the conditional probes on this thread record like enter/exit. At the outermost
    // anchor's exit a DIAG_END record carries how many conditional calls were recorded.
    //
    // Outside every context a conditional probe costs one load of ANCHORED (the number of
    // threads in a context, JVM-wide) and a branch; in some other thread's context, a
    // thread-local lookup more.

    static final int DIAG = 8, DIAG_END = 9; // ring-internal, see probe_rings.h

    /** An anchor in force: the diagnosis whose context its method opens, and the
     *  conditions (kind, name, glob pattern) its transaction must meet. */
    static final class Anchor {
        final long method, diagnosis;
        final int[] kinds;
        final String[] names, patterns;

        Anchor(long method, long diagnosis, int[] kinds, String[] names, String[] patterns) {
            this.method = method;
            this.diagnosis = diagnosis;
            this.kinds = kinds;
            this.names = names;
            this.patterns = patterns;
        }
    }

    // condition kinds, as the wire's DiagnosisConditionKind
    static final int COND_HTTP_METHOD = 0, COND_HTTP_PATH = 1, COND_HTTP_STATUS = 2, COND_HTTP_HEADER = 3,
            COND_HTTP_PARAMETER = 4, COND_SQL = 5, COND_ARGUMENT = 6;

    private static final Anchor[] NO_ANCHORS = new Anchor[0];
    private static volatile Anchor[] anchors = NO_ANCHORS;
    private static volatile long anchorsSeen = -1; // the agent's generation of the anchors read
    private static boolean refreshing;             // (under the class lock) parsing them now
    private static volatile ByteBuffer control; // the agent's control block (generation at 0)
    private static volatile boolean controlTried;
    /** Threads in a diagnosis' context now, JVM-wide. */
    private static final java.util.concurrent.atomic.AtomicInteger ANCHORED =
            new java.util.concurrent.atomic.AtomicInteger();

    private static native ByteBuffer control0();

    /** The anchors in force as text: one line per anchor, tab-separated: method id and
     *  diagnosis id in hex, then kind, name, pattern per condition. */
    private static native String anchors0();

    /** The anchor of methodId, or null; re-reads the agent's table when it changed. */
    private static Anchor anchorOf(long methodId) {
        ByteBuffer c = control;
        if (c == null && !controlTried) {
            controlTried = true;
            try {
                c = control0();
                if (c != null)
                    control = c = c.order(ByteOrder.LITTLE_ENDIAN);
            } catch (Throwable e) {
                c = null; // no agent (tests call setAnchors)
            }
        }
        if (c != null) {
            long gen = (long) LONGS.getAcquire(c, 0);
            if (gen != anchorsSeen)
                refreshAnchors(gen);
        }
        for (Anchor a : anchors)
            if (a.method == methodId)
                return a;
        return null;
    }

    private static synchronized void refreshAnchors(long gen) {
        if (gen == anchorsSeen || refreshing)
            return; // (refreshing: an anchor reached from the parsing itself, on this thread)
        refreshing = true;
        try {
            anchors = parseAnchors(anchors0());
        } catch (Throwable e) {
            anchors = NO_ANCHORS; // unreadable: no context opens (the anchors still record)
        } finally {
            refreshing = false;
        }
        anchorsSeen = gen;
    }

    static Anchor[] parseAnchors(String text) {
        if (text == null || text.isEmpty())
            return NO_ANCHORS;
        java.util.ArrayList<Anchor> out = new java.util.ArrayList<>();
        for (String line : text.split("\n")) {
            String[] f = line.split("\t", -1);
            if (f.length < 2 || (f.length - 2) % 3 != 0)
                continue;
            int n = (f.length - 2) / 3;
            int[] kinds = new int[n];
            String[] names = new String[n], patterns = new String[n];
            for (int i = 0; i < n; i++) {
                kinds[i] = Integer.parseInt(f[2 + 3 * i]);
                names[i] = f[3 + 3 * i];
                patterns[i] = f[4 + 3 * i];
            }
            out.add(new Anchor(Long.parseUnsignedLong(f[0], 16), Long.parseUnsignedLong(f[1], 16), kinds, names,
                    patterns));
        }
        return out.toArray(NO_ANCHORS);
    }

    /** Gives the calling thread a ring over `buf` (tests, without the agent: a direct
     *  buffer of HEADER + a power of two of RECORD bytes). */
    static void testRing(ByteBuffer buf) {
        RINGS.set(new Ring(buf.order(ByteOrder.LITTLE_ENDIAN)));
    }

    /** Replaces the anchors in force (tests; the agent's table wins at its next change). */
    static void setAnchors(Anchor[] a) {
        anchors = a == null ? NO_ANCHORS : a;
    }

    public static void anchorEnter(long methodId) {
        Ring r = ring();
        enter(methodId);
        if (r.diagDepth > 0) { // already in a context: nested anchors only count
            r.diagDepth++;
            return;
        }
        Anchor a = anchorOf(methodId);
        if (a == null || r.buf == null || !matches(a, r))
            return;
        // what can throw (a StackOverflowError) first, the plain stores last: the context
        // is either fully open or not at all (the method's exit probes cover only the code
        // after this probe)
        if (r.skipFrom == 0) // the anchor's call is recorded (its DIAG_END is in the reserve)
            r.putChecked(DIAG, a.diagnosis, System.nanoTime(), 0, 1);
        ANCHORED.incrementAndGet();
        r.diagnosis = a.diagnosis;
        r.diagCalls = 0;
        r.diagDepth = 1;
    }

    /** An anchor whose diagnosis looks at an argument (arg:N): the probe gets it. */
    public static void anchorEnterArg(Object arg, long methodId) {
        Ring r = ring();
        r.anchorArg = arg;
        try {
            anchorEnter(methodId);
        } finally {
            r.anchorArg = null;
        }
    }

    public static void anchorExit(long methodId) {
        anchorLeave(ring());
        exit(methodId);
    }

    public static void anchorExitThrow(long methodId) {
        anchorLeave(ring());
        exitThrow(methodId);
    }

    private static void anchorLeave(Ring r) {
        if (r.diagDepth <= 0 || --r.diagDepth > 0)
            return;
        ANCHORED.decrementAndGet();
        r.putReserved(DIAG_END, r.diagnosis, System.nanoTime(), r.diagCalls);
        r.diagnosis = 0;
    }

    public static void condEnter(long methodId) {
        if (ANCHORED.get() == 0)
            return;
        Ring r = RINGS.get();
        if (r == null || r.diagDepth <= 0)
            return;
        if (r.diagCalls != Integer.MAX_VALUE)
            r.diagCalls++;
        enter(methodId);
    }

    public static void condExit(long methodId) {
        if (ANCHORED.get() == 0)
            return;
        Ring r = RINGS.get();
        if (r != null && r.diagDepth > 0)
            leave(r, EXIT, methodId);
    }

    public static void condExitThrow(long methodId) {
        if (ANCHORED.get() == 0)
            return;
        Ring r = RINGS.get();
        if (r != null && r.diagDepth > 0)
            leave(r, EXIT_THROW, methodId);
    }

    /** Whether the transaction this thread runs meets every condition of the anchor. The
     *  HTTP conditions read the request of the incoming call this segment began with
     *  (httpIn); without one they do not hold. arg:N reads the argument anchorEnterArg was
     *  given. Conditions the JVM cannot judge at the anchor's entry (status, SQL) do not
     *  hold: cmr-config refuses them. */
    static boolean matches(Anchor a, Ring r) {
        for (int i = 0; i < a.kinds.length; i++) {
            String v;
            try {
                v = a.kinds[i] == COND_ARGUMENT ? argumentText(r.anchorArg)
                                                : requestValue(r.request, a.kinds[i], a.names[i]);
            } catch (Throwable e) {
                v = null;
            }
            if (v == null || !glob(a.patterns[i], v))
                return false;
        }
        return true;
    }

    private static String requestValue(Object request, int kind, String name) throws ReflectiveOperationException {
        if (request == null)
            return null;
        switch (kind) {
        case COND_HTTP_METHOD: {
            Method m = SERVLET_METHOD.of(request.getClass());
            if (m == null)
                m = EXCHANGE_METHOD.of(request.getClass());
            return m == null ? null : (String) m.invoke(request);
        }
        case COND_HTTP_PATH: {
            Method m = SERVLET_URI.of(request.getClass());
            if (m != null)
                return servletPath((String) m.invoke(request));
            m = EXCHANGE_URI.of(request.getClass());
            Object uri = m == null ? null : m.invoke(request);
            return uri instanceof java.net.URI ? ((java.net.URI) uri).getPath() : null;
        }
        case COND_HTTP_HEADER:
            return header(request, name);
        case COND_HTTP_PARAMETER: {
            // the query string only: a servlet's getParameter would read (and consume) a
            // form body before the application does
            Method m = SERVLET_QUERY.of(request.getClass());
            if (m != null)
                return queryParameter((String) m.invoke(request), name);
            m = EXCHANGE_URI.of(request.getClass());
            Object uri = m == null ? null : m.invoke(request);
            return uri instanceof java.net.URI ? queryParameter(((java.net.URI) uri).getRawQuery(), name) : null;
        }
        default:
            return null;
        }
    }

    /** An argument's text for an arg:N condition: only values whose text the JDK defines
     *  (strings, numbers, booleans, characters, enum constants), so that no application
     *  code (a toString) runs in the probe; null otherwise. */
    static String argumentText(Object arg) {
        if (arg instanceof String)
            return (String) arg;
        if (arg instanceof Number || arg instanceof Boolean || arg instanceof Character) {
            Class<?> k = arg.getClass();
            if (k.getClassLoader() == null) // the JDK's own Integer, Long, BigDecimal ...
                return arg.toString();
            return null;
        }
        if (arg instanceof Enum)
            return ((Enum<?>) arg).name();
        return null;
    }

    /** A servlet's request URI as a path: without path parameters (`;jsessionid=...`, which
     *  must not reach traces) and percent-decoded, as HttpExchange's URI.getPath() is. */
    static String servletPath(String uri) {
        if (uri == null)
            return null;
        int semi = uri.indexOf(';');
        String p = semi < 0 ? uri : uri.substring(0, semi);
        if (p.indexOf('%') < 0)
            return p;
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream(p.length());
        for (int i = 0; i < p.length();) {
            int c = p.codePointAt(i), hi, lo;
            if (c == '%' && i + 2 < p.length() && (hi = Character.digit(p.charAt(i + 1), 16)) >= 0
                    && (lo = Character.digit(p.charAt(i + 2), 16)) >= 0) {
                out.write(hi << 4 | lo);
                i += 3;
            } else {
                byte[] b = new String(Character.toChars(c)).getBytes(java.nio.charset.StandardCharsets.UTF_8);
                out.write(b, 0, b.length);
                i += Character.charCount(c);
            }
        }
        return new String(out.toByteArray(), java.nio.charset.StandardCharsets.UTF_8);
    }

    /** The first value of parameter `name` in a raw query string, decoded; null if absent. */
    static String queryParameter(String query, String name) {
        if (query == null)
            return null;
        for (String pair : query.split("&")) {
            int eq = pair.indexOf('=');
            String k = eq < 0 ? pair : pair.substring(0, eq);
            if (java.net.URLDecoder.decode(k, java.nio.charset.StandardCharsets.UTF_8).equals(name))
                return eq < 0 ? "" : java.net.URLDecoder.decode(pair.substring(eq + 1),
                        java.nio.charset.StandardCharsets.UTF_8);
        }
        return null;
    }

    /** Glob match: `*` any run of characters, `?` one character, everything else itself. */
    static boolean glob(String p, String s) {
        int pi = 0, si = 0, star = -1, mark = 0;
        while (si < s.length()) {
            if (pi < p.length() && (p.charAt(pi) == '?' || p.charAt(pi) == s.charAt(si))) {
                pi++;
                si++;
            } else if (pi < p.length() && p.charAt(pi) == '*') {
                star = pi++;
                mark = si;
            } else if (star >= 0) {
                pi = star + 1;
                si = ++mark;
            } else {
                return false;
            }
        }
        while (pi < p.length() && p.charAt(pi) == '*')
            pi++;
        return pi == p.length();
    }

    private static final HeaderMethods SERVLET_METHOD = new HeaderMethods(
            "jakarta.servlet.http.HttpServletRequest|javax.servlet.http.HttpServletRequest", "getMethod");
    private static final HeaderMethods SERVLET_URI = new HeaderMethods(
            "jakarta.servlet.http.HttpServletRequest|javax.servlet.http.HttpServletRequest", "getRequestURI");
    private static final HeaderMethods SERVLET_QUERY = new HeaderMethods(
            "jakarta.servlet.http.HttpServletRequest|javax.servlet.http.HttpServletRequest", "getQueryString");
    private static final HeaderMethods EXCHANGE_METHOD = new HeaderMethods(
            "com.sun.net.httpserver.HttpExchange", "getRequestMethod");
    private static final HeaderMethods EXCHANGE_URI = new HeaderMethods(
            "com.sun.net.httpserver.HttpExchange", "getRequestURI");
    private static final String SERVLET_REQUEST = "jakarta.servlet.http.HttpServletRequest|javax.servlet.http.HttpServletRequest";
    private static final String SERVLET_REQUEST_BASE = "jakarta.servlet.ServletRequest|javax.servlet.ServletRequest";
    private static final String SERVLET_MAPPING_TYPE = "jakarta.servlet.http.HttpServletMapping|javax.servlet.http.HttpServletMapping";
    private static final HeaderMethods SERVLET_CONTEXT_PATH = new HeaderMethods(SERVLET_REQUEST, "getContextPath");
    private static final HeaderMethods SERVLET_SERVLET_PATH = new HeaderMethods(SERVLET_REQUEST, "getServletPath");
    private static final HeaderMethods SERVLET_PATH_INFO = new HeaderMethods(SERVLET_REQUEST, "getPathInfo");
    private static final HeaderMethods SERVLET_MAPPING = new HeaderMethods(SERVLET_REQUEST, "getHttpServletMapping");
    private static final HeaderMethods MAPPING_PATTERN = new HeaderMethods(SERVLET_MAPPING_TYPE, "getPattern");
    private static final HeaderMethods MAPPING_MATCH = new HeaderMethods(SERVLET_MAPPING_TYPE, "getMappingMatch");
    private static final HeaderMethods EXCHANGE_CONTEXT = new HeaderMethods(
            "com.sun.net.httpserver.HttpExchange", "getHttpContext");
    private static final HeaderMethods HTTP_CONTEXT_PATH = new HeaderMethods(
            "com.sun.net.httpserver.HttpContext", "getPath");
    private static final HeaderMethods SERVLET_DISPATCHER_TYPE = new HeaderMethods(SERVLET_REQUEST_BASE,
            "getDispatcherType");
    private static final HeaderMethods SERVLET_ASYNC_STARTED = new HeaderMethods(SERVLET_REQUEST_BASE, "isAsyncStarted");
    private static final HeaderMethods SERVLET_ASYNC_CONTEXT = new HeaderMethods(SERVLET_REQUEST_BASE, "getAsyncContext");
    private static final HeaderMethods SERVLET_STATUS = new HeaderMethods(
            "jakarta.servlet.http.HttpServletResponse|javax.servlet.http.HttpServletResponse", "getStatus");
    private static final HeaderMethods EXCHANGE_STATUS = new HeaderMethods(
            "com.sun.net.httpserver.HttpExchange", "getResponseCode");
}
