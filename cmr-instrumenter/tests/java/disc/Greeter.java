package disc;

// An interface with a default method that its implementation does not override.
public interface Greeter {
    default String greet() {
        return "hi " + Util.hash(2);
    }
}
