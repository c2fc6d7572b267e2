package marketspread.jvm;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.List;

/**
 * Links the classes a JVM loaded from jars, before its classes are dumped into a class archive.
 *
 * JDK 17's {@code jcmd VM.cds dynamic_dump} skips every class that was loaded but never
 * linked ("Skipping ...: Not linked"): the exception types and interfaces a verifier
 * loads, ~3,800 of a replay's classes, which later JVMs then read from the jars again.
 * HotSpot links a class before it answers reflection about its members, so asking each
 * class for its constructors links it, without running its static initialiser.
 * Used by engine/spark/jvm_archive.py.
 */
public final class ClassLinker {
    private ClassLinker() {
    }

    /**
     * Link each class named in a {@code -Xlog:class+load} file whose source is a jar or the
     * JDK's modules; return how many were linked (the others, e.g. hidden classes, are skipped).
     */
    public static int linkLoaded(String classLoadLog) throws IOException {
        List<String> lines = Files.readAllLines(Paths.get(classLoadLog), StandardCharsets.UTF_8);
        ClassLoader loader = Thread.currentThread().getContextClassLoader();
        int linked = 0;
        for (String line : lines) {
            int tag = line.indexOf("[class,load] ");
            int source = line.indexOf(" source: ");
            if (tag < 0 || source < 0) {
                continue;
            }
            String from = line.substring(source + 9);
            if (!from.startsWith("file:") && !from.startsWith("jar:") && !from.startsWith("jrt:")) {
                continue;
            }
            String name = line.substring(tag + 13, source).trim();
            try {
                Class.forName(name, false, loader).getDeclaredConstructors();
                linked++;
            } catch (Throwable e) {
                // not visible to this loader, or fails to link: it stays out of the archive
            }
        }
        return linked;
    }
}
