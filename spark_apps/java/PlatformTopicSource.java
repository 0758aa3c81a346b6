package deliverysemantics;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A platform run's topic, read over exact offset ranges with Kafka's own consumer, each record's
 * fields cut out of its value (the value layout, "event_id seq publish_at payload") or its headers
 * (the headers layout) as text, the way Spark's Kafka source and the checker's expressions would
 * (checker/formats.py): Spark then casts and parses the text as it does for any other read. Only
 * the columns a query reads are made, so a read without the copy never copies a payload.
 *
 * Options: "ranges" (partition:from:until, comma-separated; a task each), "topic", "layout"
 * (value or headers), "poll.timeout.ms", and the consumer's settings as "kafka.*".
 */
public final class PlatformTopicSource implements TableProvider {
  static final StructType SCHEMA = new StructType(new StructField[] {
    DataTypes.createStructField("event_id", DataTypes.StringType, true),
    DataTypes.createStructField("key", DataTypes.StringType, true),
    DataTypes.createStructField("seq", DataTypes.StringType, true),
    DataTypes.createStructField("publish_at", DataTypes.StringType, true),
    DataTypes.createStructField("partition", DataTypes.IntegerType, false),
    DataTypes.createStructField("offset", DataTypes.LongType, false),
    DataTypes.createStructField("value", DataTypes.BinaryType, true),
    DataTypes.createStructField("timestamp", DataTypes.TimestampType, false),
  });
  static final int EVENT_ID = 0, KEY = 1, SEQ = 2, PUBLISH_AT = 3, PARTITION = 4, OFFSET = 5, VALUE = 6,
      TIMESTAMP = 7;
  // layouts.HEADERS: the headers layout's names of the three fields.
  static final String[] HEADER_NAMES = {"event_id", "seq", "publish_at"};

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return SCHEMA;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new TopicTable();
  }

  static final class TopicTable implements Table, SupportsRead {
    @Override
    public String name() {
      return "platform_topic";
    }

    @Override
    public StructType schema() {
      return SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return Collections.singleton(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return new TopicScan(options.asCaseSensitiveMap());
    }
  }

  static final class TopicScan implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, Batch {
    private final Map<String, String> options;
    private StructType required = SCHEMA;

    TopicScan(Map<String, String> options) {
      this.options = new HashMap<>(options);
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
      required = requiredSchema;
    }

    @Override
    public Scan build() {
      return this;
    }

    @Override
    public StructType readSchema() {
      return required;
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      List<InputPartition> splits = new ArrayList<>();
      for (String range : options.getOrDefault("ranges", "").split(",")) {
        if (range.isEmpty()) {
          continue;
        }
        String[] p = range.split(":");
        splits.add(new Split(Integer.parseInt(p[0]), Long.parseLong(p[1]), Long.parseLong(p[2])));
      }
      return splits.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      int[] columns = new int[required.fields().length];
      for (int i = 0; i < columns.length; i++) {
        columns[i] = SCHEMA.fieldIndex(required.fields()[i].name());
      }
      Map<String, String> client = new HashMap<>();
      options.forEach((k, v) -> {
        if (k.startsWith("kafka.")) {
          client.put(k.substring("kafka.".length()), v);
        }
      });
      return new ReaderFactory(
          options.get("topic"),
          "headers".equals(options.get("layout")),
          Long.parseLong(options.getOrDefault("poll.timeout.ms", "120000")),
          client,
          columns);
    }
  }

  static final class Split implements InputPartition {
    final int partition;
    final long from;
    final long until;

    Split(int partition, long from, long until) {
      this.partition = partition;
      this.from = from;
      this.until = until;
    }
  }

  static final class ReaderFactory implements PartitionReaderFactory {
    final String topic;
    final boolean headers;
    final long pollTimeoutMs;
    final Map<String, String> client;
    final int[] columns;

    ReaderFactory(String topic, boolean headers, long pollTimeoutMs, Map<String, String> client, int[] columns) {
      this.topic = topic;
      this.headers = headers;
      this.pollTimeoutMs = pollTimeoutMs;
      this.client = client;
      this.columns = columns;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition split) {
      return new Reader(this, (Split) split);
    }
  }

  /** One split's records, in offset order. */
  static final class Reader implements PartitionReader<InternalRow> {
    private final ReaderFactory f;
    private final Split split;
    private final TopicPartition tp;
    private final KafkaConsumer<byte[], byte[]> consumer;
    private final UnsafeRowWriter writer;
    private Iterator<ConsumerRecord<byte[], byte[]>> batch = Collections.emptyIterator();
    private ConsumerRecord<byte[], byte[]> record;
    private boolean done;
    // The value's fields: [start, end) of each, or start -1 when the value is malformed.
    private final int[] cuts = new int[8];
    private byte[][] decoded; // the fields of a value that is not ASCII, as Spark's split makes them
    private final boolean cutsValue; // the value layout, and a field of it is read

    Reader(ReaderFactory f, Split split) {
      this.f = f;
      this.split = split;
      this.tp = new TopicPartition(f.topic, split.partition);
      Properties props = new Properties();
      props.putAll(f.client);
      props.put("enable.auto.commit", "false");
      props.put("auto.offset.reset", "earliest");
      props.remove("group.id");
      this.consumer = new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
      consumer.assign(Collections.singletonList(tp));
      consumer.seek(tp, split.from);
      this.writer = new UnsafeRowWriter(f.columns.length, 256);
      boolean readsField = false;
      for (int c : f.columns) {
        readsField |= c == EVENT_ID || c == SEQ || c == PUBLISH_AT;
      }
      this.cutsValue = !f.headers && readsField;
      this.done = split.from >= split.until;
    }

    @Override
    public boolean next() {
      while (!done) {
        if (batch.hasNext()) {
          record = batch.next();
          if (record.offset() >= split.until) {
            done = true;
            return false;
          }
          if (record.offset() >= split.from) {
            return true;
          }
          continue;
        }
        if (consumer.position(tp) >= split.until) {
          done = true;
          return false;
        }
        long started = System.currentTimeMillis();
        ConsumerRecords<byte[], byte[]> polled = consumer.poll(Duration.ofMillis(500));
        while (polled.isEmpty() && consumer.position(tp) < split.until) {
          long end = consumer.endOffsets(Collections.singletonList(tp)).get(tp);
          if (end <= consumer.position(tp)) {
            // The log ends before the range does (records lost, or behind an open transaction
            // for read_committed): what is not there is not read, as Spark's source does with
            // failOnDataLoss=false, and the checker reports what the ledger misses.
            done = true;
            return false;
          }
          if (System.currentTimeMillis() - started > f.pollTimeoutMs) {
            throw new IllegalStateException("partition " + split.partition + " of " + f.topic
                + " gave no record in " + f.pollTimeoutMs + " ms at offset " + consumer.position(tp)
                + " (its end " + end + "): the topic cannot be read");
          }
          polled = consumer.poll(Duration.ofMillis(500));
        }
        batch = polled.records(tp).iterator();
      }
      return false;
    }

    @Override
    public InternalRow get() {
      writer.reset();
      writer.zeroOutNullBytes();
      byte[] value = record.value();
      if (cutsValue) {
        cutValue(value);
      }
      for (int i = 0; i < f.columns.length; i++) {
        switch (f.columns[i]) {
          case EVENT_ID:
          case SEQ:
          case PUBLISH_AT:
            int field = f.columns[i] == EVENT_ID ? 0 : f.columns[i] == SEQ ? 1 : 2;
            if (f.headers) {
              writeHeader(i, HEADER_NAMES[field]);
            } else {
              writeField(i, value, field);
            }
            break;
          case KEY:
            writeBytes(i, record.key());
            break;
          case PARTITION:
            writer.write(i, record.partition());
            break;
          case OFFSET:
            writer.write(i, record.offset());
            break;
          case VALUE:
            writeBytes(i, value);
            break;
          case TIMESTAMP:
            writer.write(i, record.timestamp() * 1000L);
            break;
          default:
            throw new IllegalStateException("column " + f.columns[i]);
        }
      }
      return writer.getRow();
    }

    private void writeBytes(int ordinal, byte[] bytes) {
      if (bytes == null) {
        writer.setNullAt(ordinal);
      } else {
        writer.write(ordinal, bytes);
      }
    }

    /** The first header of that name, as `formats.header` takes it (a header without a value is none). */
    private void writeHeader(int ordinal, String name) {
      for (Header h : record.headers()) {
        if (h.key().equals(name)) {
          writeBytes(ordinal, h.value());
          return;
        }
      }
      writer.setNullAt(ordinal);
    }

    /**
     * Spark's split(value, " ", 4) on the value as text, by bytes when the value is ASCII (a space
     * is one byte, and nothing is decoded), through Java's String otherwise, as Spark does it
     * (malformed UTF-8 becomes U+FFFD there).
     */
    private void cutValue(byte[] value) {
      decoded = null;
      cuts[0] = -1;
      if (value == null) {
        return;
      }
      for (byte b : value) {
        if (b < 0) {
          String[] parts = new String(value, StandardCharsets.UTF_8).split(" ", 4);
          if (parts.length == 4) {
            decoded = new byte[3][];
            for (int i = 0; i < 3; i++) {
              decoded[i] = parts[i].getBytes(StandardCharsets.UTF_8);
            }
          }
          return;
        }
      }
      int at = 0;
      for (int field = 0; field < 3; field++) {
        int space = at;
        while (space < value.length && value[space] != ' ') {
          space++;
        }
        if (space >= value.length) {
          cuts[0] = -1; // fewer than four fields: malformed, every field none
          return;
        }
        cuts[2 * field] = at;
        cuts[2 * field + 1] = space;
        at = space + 1;
      }
    }

    private void writeField(int ordinal, byte[] value, int field) {
      if (decoded != null) {
        writer.write(ordinal, decoded[field]);
      } else if (value == null || cuts[0] < 0) {
        writer.setNullAt(ordinal);
      } else {
        writer.write(ordinal, value, cuts[2 * field], cuts[2 * field + 1] - cuts[2 * field]);
      }
    }

    @Override
    public void close() {
      consumer.close(Duration.ZERO);
    }
  }
}
