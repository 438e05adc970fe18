package demo;

/* The superclass of demo.LateSub, which SlowBaseLoader defines only after a pause. */
public class LateBase {
    public String hello() {
        return "base";
    }
}
