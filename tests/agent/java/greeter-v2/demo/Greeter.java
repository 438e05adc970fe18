package demo;

/** Version 2: the bytes a Redefine installs. */
public class Greeter {
    public String greet() {
        return "redefined";
    }
}
