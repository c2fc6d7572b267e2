package marketspread.spark;

import java.io.IOException;
import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The ingress log as a streaming source, planned in the driver JVM.
 *
 * The same plan as engine/spark/source.py's Python source, which stays as the fallback
 * without this jar: offsets are log sequence numbers ({@code {"seq": N}}, the same JSON,
 * so either source resumes the other's checkpoint), and each batch is one
 * {@code (shard, lo, hi)} row per shard key over the log range from the last offset to
 * the durable head, at most {@code maxRowsPerBatch} records, at most
 * {@code firstBatchRows} in the first batch a stream plans. The shard keys come from
 * Python ({@code shardKeys}), which owns them.
 *
 * In the JVM, a query starts no Python process to find, create or plan its source: a
 * Python source cost three (~0.7 s each on a cold start) and a round trip to a Python
 * runner per trigger.
 *
 * Options: {@code path} (the log folder), {@code shardKeys} (comma-separated ints),
 * {@code maxRowsPerBatch}, {@code firstBatchRows} (0 or unset: {@code maxRowsPerBatch}).
 */
public class IngressSource implements TableProvider {
    static final StructType SCHEMA = new StructType()
        .add("shard", DataTypes.IntegerType)
        .add("lo", DataTypes.LongType)
        .add("hi", DataTypes.LongType);

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return SCHEMA;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new LogTable(new CaseInsensitiveStringMap(properties));
    }

    /** The number of durable records: the log's 8-byte little-endian {@code head} (0 before the first commit). */
    static long readHead(Path log) {
        try (FileChannel ch = FileChannel.open(log.resolve("head"), StandardOpenOption.READ)) {
            ByteBuffer buf = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
            while (buf.hasRemaining() && ch.read(buf) > 0) {
                // a partial read continues
            }
            return buf.hasRemaining() ? 0 : buf.getLong(0);
        } catch (NoSuchFileException e) {
            return 0;
        } catch (IOException e) {
            throw new IllegalStateException("cannot read the ingress log's head in " + log + ": " + e, e);
        }
    }

    static int[] parseKeys(String raw) {
        if (raw == null || raw.isBlank()) {
            throw new IllegalArgumentException("the ingress source needs the option shardKeys");
        }
        String[] parts = raw.split(",");
        int[] keys = new int[parts.length];
        for (int i = 0; i < parts.length; i++) {
            keys[i] = Integer.parseInt(parts[i].trim());
        }
        return keys;
    }

    static final class LogTable implements Table, SupportsRead {
        private final CaseInsensitiveStringMap options;

        LogTable(CaseInsensitiveStringMap options) {
            this.options = options;
        }

        @Override
        public String name() {
            return "marketspread_ingress";
        }

        @Override
        @SuppressWarnings("deprecation")
        public StructType schema() {
            return SCHEMA;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.MICRO_BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap scanOptions) {
            CaseInsensitiveStringMap opts = scanOptions.isEmpty() ? options : scanOptions;
            return () -> new LogScan(opts);
        }
    }

    static final class LogScan implements Scan {
        private final CaseInsensitiveStringMap options;

        LogScan(CaseInsensitiveStringMap options) {
            this.options = options;
        }

        @Override
        public StructType readSchema() {
            return SCHEMA;
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
            String path = options.get("path");
            if (path == null || path.isBlank()) {
                throw new IllegalArgumentException("the ingress source needs the option path (the log folder)");
            }
            long max = options.getLong("maxRowsPerBatch", 500_000L);
            if (max <= 0) {
                throw new IllegalArgumentException("maxRowsPerBatch must be positive, not " + max);
            }
            return new LogStream(path, parseKeys(options.get("shardKeys")), max,
                                 options.getLong("firstBatchRows", 0L));
        }
    }

    /**
     * Plans each batch as the log range from the last offset to the durable head.
     *
     * Admission control is the stream's own choice of end offset. A restarted query
     * builds a new stream, whose first batch is small again; a trigger that finds nothing
     * new does not use up the small first batch.
     */
    static final class LogStream implements MicroBatchStream, SupportsAdmissionControl {
        private final String path;
        private final int[] keys;
        private final long maxRows;
        private long nextRows;

        LogStream(String path, int[] keys, long maxRows, long firstRows) {
            this.path = path;
            this.keys = keys;
            this.maxRows = maxRows;
            this.nextRows = firstRows > 0 ? Math.min(maxRows, firstRows) : maxRows;
        }

        @Override
        public Offset initialOffset() {
            return new SeqOffset(0);
        }

        @Override
        public Offset deserializeOffset(String json) {
            return SeqOffset.parse(json);
        }

        @Override
        public ReadLimit getDefaultReadLimit() {
            return ReadLimit.allAvailable();
        }

        @Override
        public synchronized Offset latestOffset(Offset start, ReadLimit limit) {
            long lo = start == null ? 0 : ((SeqOffset) start).seq;
            long hi = Math.min(readHead(Paths.get(path)), lo + nextRows);
            if (hi <= lo) {
                return new SeqOffset(lo);
            }
            nextRows = maxRows;
            return new SeqOffset(hi);
        }

        @Override
        public Offset latestOffset() {
            throw new UnsupportedOperationException("latestOffset(start, limit) is the one Spark calls here");
        }

        @Override
        public InputPartition[] planInputPartitions(Offset start, Offset end) {
            long lo = ((SeqOffset) start).seq;
            long hi = ((SeqOffset) end).seq;
            if (hi <= lo) {
                return new InputPartition[0];
            }
            return new InputPartition[] {new Ranges(keys, lo, hi)};
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new RangeReaderFactory();
        }

        @Override
        public void commit(Offset end) {
            // Nothing to release: the log keeps its segments (progress.py publishes `consumed`).
        }

        @Override
        public void stop() {
        }
    }

    /** A log sequence number as {@code {"seq": N}}, byte for byte the Python source's JSON. */
    static final class SeqOffset extends Offset {
        private static final Pattern JSON = Pattern.compile("\\{\\s*\"seq\"\\s*:\\s*(\\d+)\\s*\\}");
        final long seq;

        SeqOffset(long seq) {
            this.seq = seq;
        }

        static SeqOffset parse(String json) {
            Matcher m = JSON.matcher(json == null ? "" : json.trim());
            if (!m.matches()) {
                throw new IllegalArgumentException("not an ingress log offset: " + json);
            }
            return new SeqOffset(Long.parseLong(m.group(1)));
        }

        @Override
        public String json() {
            return "{\"seq\": " + seq + "}";
        }
    }

    /** One batch's rows: every shard key with the same log range. */
    static final class Ranges implements InputPartition, Serializable {
        private static final long serialVersionUID = 1L;
        final int[] keys;
        final long lo;
        final long hi;

        Ranges(int[] keys, long lo, long hi) {
            this.keys = keys;
            this.lo = lo;
            this.hi = hi;
        }
    }

    static final class RangeReaderFactory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            Ranges r = (Ranges) partition;
            return new PartitionReader<InternalRow>() {
                private int i = -1;

                @Override
                public boolean next() {
                    return ++i < r.keys.length;
                }

                @Override
                public InternalRow get() {
                    return new GenericInternalRow(new Object[] {r.keys[i], r.lo, r.hi});
                }

                @Override
                public void close() {
                }
            };
        }
    }
}
