package marketspread.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's raw local file system, setting permissions with java.nio instead of a forked
 * {@code chmod}.
 *
 * Without Hadoop's native library (pip's PySpark has none), {@link RawLocalFileSystem}
 * runs {@code chmod} in a child process for every file and folder it creates: the
 * streaming query's offset and commit logs make a few such files per micro-batch, on
 * the batch's critical path. The driver's checkpoint logs use this class
 * (engine/spark/local_fs.py); everything else is Hadoop's own.
 */
public class NioLocalFileSystem extends RawLocalFileSystem {
    private static final PosixFilePermission[] BITS = {
        PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
        PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
        PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
    };

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
        int mode = permission.toShort();
        Set<PosixFilePermission> perms = EnumSet.noneOf(PosixFilePermission.class);
        for (int i = 0; i < BITS.length; i++) {
            if ((mode & (1 << i)) != 0) {
                perms.add(BITS[i]);
            }
        }
        Files.setPosixFilePermissions(pathToFile(p).toPath(), perms);
    }
}
