package demo;

import java.io.IOException;
import java.io.InputStream;

/* Defines demo.LateSub and demo.LateBase itself (child first, from the application's own
 * class files), and pauses pauseMs before defining LateBase: LateSub, whose superclass it
 * is, is then handed to the agent and not defined for that long. */
public class SlowBaseLoader extends ClassLoader {
    private final long pauseMs;

    public SlowBaseLoader(ClassLoader parent, long pauseMs) {
        super(parent);
        this.pauseMs = pauseMs;
    }

    @Override
    protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
        if (!name.equals("demo.LateSub") && !name.equals("demo.LateBase"))
            return super.loadClass(name, resolve);
        synchronized (getClassLoadingLock(name)) {
            Class<?> k = findLoadedClass(name);
            if (k != null)
                return k;
            if (name.equals("demo.LateBase")) {
                try {
                    Thread.sleep(pauseMs);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            try (InputStream in = getParent().getResourceAsStream(name.replace('.', '/') + ".class")) {
                if (in == null)
                    throw new ClassNotFoundException(name);
                byte[] b = in.readAllBytes();
                return defineClass(name, b, 0, b.length);
            } catch (IOException e) {
                throw new ClassNotFoundException(name, e);
            }
        }
    }
}
