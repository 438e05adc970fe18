package demo;

/* A class whose definition waits for its superclass (SlowBaseLoader): the agent ships its
 * bytes from ClassFileLoadHook well before the JVM has defined it. */
public class LateSub extends LateBase {
    @Override
    public String hello() {
        return "late";
    }
}
