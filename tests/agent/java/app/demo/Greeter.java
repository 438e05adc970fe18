package demo;

/** Version 1: what the JVM loads. */
public class Greeter {
    public String greet() {
        return "hello";
    }
}
