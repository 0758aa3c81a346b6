import java.io.BufferedOutputStream;
import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TransactionAbortedException;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The Java client's side of a load run (delivery_semantics.workload.java_client drives it). The
 * Python session writes every event to the ledger before it asks for it here, and turns each
 * report below into a ledger outcome, as it does for librdkafka's delivery reports.
 *
 * <p>Settings and commands come on stdin as tab-separated lines; reports and replies go to stdout,
 * anything else (the client's own logging) to stderr. Secrets travel on stdin only. The framing
 * cannot be broken by text: a line ends at '\n' alone, and every field that carries text (written
 * below in lower case: key, value, message, ...) is Base64 of its UTF-8, so no setting, run id or
 * broker's error message can hold a separator. The other fields are numbers and fixed words.
 *
 * <pre>
 * every one:   conf key value ...   end
 * check:       replies "ok" then "setting key value" lines then "end", or "refused message"
 * sizes:       topic name ...   start
 *              replies "size name BYTES" per named topic the brokers hold (every replica's log
 *              summed, Admin.describeLogDirs), then "end"; or "fatal message"
 * run:         gen run_id KEYS KEY_BASE PAYLOAD_BYTES pool topic    txn id ...    start
 *              replies "ready" or "fatal message"; then, per producer turn T (one without transactions):
 *   p T PUBLISH_AT N N N ...   send events N (no reply; each one's report comes as a line:
 *                              "a N PARTITION OFFSET LATENCY_US" or "e N EXCEPTION LATENCY_US message")
 *   b T | f T | c T | x T      begin, flush, commit, abort: replies "done T CMD ok|abortable|fenced|error message"
 *   q                          close every producer, reply "closed", exit
 * </pre>
 *
 * End of input without q (the Python process died) halts at once, with nothing flushed or
 * committed: a crash of the producer process.
 */
public final class SemanticsProducer {
    private static final PrintStream OUT =
            new PrintStream(new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16), false,
                    StandardCharsets.UTF_8);

    // The settings whose effective values (after the client's defaults and its own adjustments)
    // the check reports: what a finding about a promise reads.
    private static final String[] REPORTED = {
        "acks", "enable.idempotence", "retries", "max.in.flight.requests.per.connection", "delivery.timeout.ms",
        "request.timeout.ms", "linger.ms", "batch.size", "compression.type", "transaction.timeout.ms",
        "client.id", "bootstrap.servers",
    };

    private final List<KafkaProducer<byte[], byte[]>> turns = new ArrayList<>();
    private final List<ExecutorService> executors = new ArrayList<>();
    private String runIdDash;
    private int keys;
    private long keyBase;
    private int payloadBytes;
    private byte[] pool;
    private int span;
    private String topic;

    public static void main(String[] args) throws Exception {
        // The protocol owns stdout: anything printed through System.out goes to stderr.
        System.setOut(System.err);
        InputStream in = new BufferedInputStream(System.in, 1 << 16);
        Properties conf = readConf(in);
        if (args.length == 1 && args[0].equals("check")) {
            check(conf);
        } else if (args.length == 1 && args[0].equals("run")) {
            new SemanticsProducer().run(conf, in);
        } else if (args.length == 1 && args[0].equals("sizes")) {
            sizes(conf, in);
        } else {
            System.err.println("usage: SemanticsProducer check|run|sizes (settings on stdin)");
            System.exit(2);
        }
    }

    private static Properties readConf(InputStream in) throws Exception {
        Properties conf = new Properties();
        String line;
        while ((line = readLine(in)) != null && !line.equals("end")) {
            String[] f = line.split("\t", -1);
            if (f.length == 3 && f[0].equals("conf")) {
                conf.setProperty(text(f[1]), text(f[2]));
            }
        }
        return conf;
    }

    /** A line ended by '\n' alone (BufferedReader.readLine also ends one at '\r'), or null at the end. */
    private static String readLine(InputStream in) throws IOException {
        ByteArrayOutputStream line = new ByteArrayOutputStream(128);
        int b;
        while ((b = in.read()) != -1 && b != '\n') {
            line.write(b);
        }
        return b == -1 && line.size() == 0 ? null : line.toString(StandardCharsets.US_ASCII);
    }

    /** A text field of the protocol: Base64 of UTF-8. */
    private static String text(String field) {
        return new String(Base64.getDecoder().decode(field), StandardCharsets.UTF_8);
    }

    private static String field(String text) {
        return Base64.getEncoder().encodeToString((text == null ? "" : text).getBytes(StandardCharsets.UTF_8));
    }

    private static Properties withSerializers(Properties conf) {
        Properties p = new Properties();
        p.putAll(conf);
        p.setProperty("key.serializer", ByteArraySerializer.class.getName());
        p.setProperty("value.serializer", ByteArraySerializer.class.getName());
        return p;
    }

    /** What each named topic takes on the brokers' disks: librdkafka has no DescribeLogDirs. */
    private static void sizes(Properties conf, InputStream in) throws Exception {
        Set<String> wanted = new HashSet<>();
        String line;
        while ((line = readLine(in)) != null && !line.equals("start")) {
            String[] f = line.split("\t", -1);
            if (f.length == 2 && f[0].equals("topic")) {
                wanted.add(text(f[1]));
            }
        }
        Map<String, Long> bytes = new TreeMap<>();
        try (Admin admin = Admin.create(conf)) {
            List<Integer> brokers = new ArrayList<>();
            for (Node node : admin.describeCluster().nodes().get(60, TimeUnit.SECONDS)) {
                brokers.add(node.id());
            }
            for (Map<String, LogDirDescription> dirs :
                    admin.describeLogDirs(brokers).allDescriptions().get(60, TimeUnit.SECONDS).values()) {
                for (LogDirDescription dir : dirs.values()) {
                    for (Map.Entry<TopicPartition, ReplicaInfo> r : dir.replicaInfos().entrySet()) {
                        if (wanted.contains(r.getKey().topic())) {
                            bytes.merge(r.getKey().topic(), r.getValue().size(), Long::sum);
                        }
                    }
                }
            }
        } catch (Exception e) {
            reply("fatal\t" + field(e.toString()));
            OUT.flush();
            Runtime.getRuntime().halt(1);
        }
        for (Map.Entry<String, Long> e : bytes.entrySet()) {
            reply("size\t" + field(e.getKey()) + "\t" + e.getValue());
        }
        reply("end");
    }

    /** ProducerConfig's own validation, with unknown keys refused first (it only warns of them). */
    private static void check(Properties conf) {
        for (String key : conf.stringPropertyNames()) {
            if (!ProducerConfig.configNames().contains(key)) {
                reply("refused\t" + field("unknown setting " + key + ": not a setting of the Java producer (ProducerConfig)"));
                return;
            }
        }
        try {
            ProducerConfig parsed = new ProducerConfig(withSerializers(conf));
            StringBuilder sb = new StringBuilder("ok");
            for (String key : REPORTED) {
                Object v = parsed.values().get(key);
                sb.append("\nsetting\t").append(field(key)).append('\t').append(field(v == null ? "" : String.valueOf(v)));
            }
            reply(sb.append("\nend").toString());
        } catch (ConfigException e) {
            reply("refused\t" + field(e.getMessage()));
        }
    }

    private void run(Properties conf, InputStream in) throws Exception {
        List<String> txnIds = new ArrayList<>();
        String line;
        while ((line = readLine(in)) != null && !line.equals("start")) {
            String[] f = line.split("\t");
            if (f[0].equals("gen")) {
                runIdDash = text(f[1]) + "-";
                keys = Integer.parseInt(f[2]);
                keyBase = Long.parseLong(f[3]);
                payloadBytes = Integer.parseInt(f[4]);
                pool = Base64.getDecoder().decode(f[5]);
                span = pool.length - payloadBytes;
                topic = text(f[6]);
            } else if (f[0].equals("txn")) {
                txnIds.add(text(f[1]));
            }
        }
        if (line == null) {
            Runtime.getRuntime().halt(3);
        }
        try {
            if (txnIds.isEmpty()) {
                open(conf, null);
            }
            for (String id : txnIds) {
                open(conf, id).initTransactions();
            }
        } catch (KafkaException e) {
            // "Failed to construct kafka producer" says nothing: the cause it wraps says why.
            Throwable root = e;
            while (root.getCause() != null && root.getCause() != root) {
                root = root.getCause();
            }
            String why = root == e ? "" : " (" + root.getClass().getSimpleName() + ": " + root.getMessage() + ")";
            reply("fatal\t" + field(e.getClass().getSimpleName() + ": " + e.getMessage() + why));
            Runtime.getRuntime().halt(1);
        }
        reply("ready");
        Thread flusher = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(20);
                } catch (InterruptedException e) {
                    return;
                }
                synchronized (OUT) {
                    OUT.flush();
                }
            }
        });
        flusher.setDaemon(true);
        flusher.start();
        while ((line = readLine(in)) != null) {
            if (line.equals("q")) {
                close();
                reply("closed");
                System.exit(0);
            }
            String[] f = line.split("\t", 4);
            int turn = Integer.parseInt(f[1]);
            String cmd = f[0];
            String[] rest = f.length > 2 ? f : null;
            // One thread per turn: a commit under one transactional.id runs while the next
            // transaction is written under the other.
            executors.get(turn).execute(() -> command(cmd, turn, rest));
        }
        Runtime.getRuntime().halt(3); // the driving process is gone: a crash, nothing more is sent
    }

    private KafkaProducer<byte[], byte[]> open(Properties conf, String transactionalId) {
        Properties p = withSerializers(conf);
        if (transactionalId != null) {
            p.setProperty("transactional.id", transactionalId);
        }
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
        turns.add(producer);
        executors.add(Executors.newSingleThreadExecutor());
        return producer;
    }

    private void command(String cmd, int turn, String[] f) {
        KafkaProducer<byte[], byte[]> producer = turns.get(turn);
        if (cmd.equals("p")) {
            send(producer, Long.parseLong(f[2]), f[3]);
            return;
        }
        String status = "ok";
        String message = "";
        try {
            switch (cmd) {
                case "b" -> producer.beginTransaction();
                case "f" -> producer.flush();
                case "c" -> producer.commitTransaction();
                case "x" -> producer.abortTransaction();
                default -> throw new IllegalArgumentException("unknown command " + cmd);
            }
        } catch (ProducerFencedException | InvalidProducerEpochException e) {
            status = "fenced";
            message = e.getClass().getSimpleName() + ": " + e.getMessage();
        } catch (KafkaException e) {
            // After an abortable error the transaction can still be aborted; a fatal one fences.
            status = cmd.equals("c") || cmd.equals("b") ? "abortable" : "error";
            message = e.getClass().getSimpleName() + ": " + e.getMessage();
        } catch (RuntimeException e) {
            status = "error";
            message = e.getClass().getSimpleName() + ": " + e.getMessage();
        }
        reply("done\t" + turn + "\t" + cmd + "\t" + status + "\t" + field(message));
    }

    private void send(KafkaProducer<byte[], byte[]> producer, long publishAt, String numbers) {
        for (String s : numbers.split(" ")) {
            long n = Long.parseLong(s);
            byte[] key = ("k" + (keyBase + n % keys)).getBytes(StandardCharsets.US_ASCII);
            byte[] head = (runIdDash + n + " " + (n / keys) + " " + publishAt + " ").getBytes(StandardCharsets.US_ASCII);
            byte[] value = new byte[head.length + payloadBytes];
            System.arraycopy(head, 0, value, 0, head.length);
            System.arraycopy(pool, (int) ((n * 7919) % (span + 1)), value, head.length, payloadBytes);
            long t0 = System.nanoTime();
            try {
                producer.send(new ProducerRecord<>(topic, key, value), (md, e) -> {
                    long us = (System.nanoTime() - t0) / 1000;
                    if (e == null) {
                        report("a\t" + n + "\t" + md.partition() + "\t" + md.offset() + "\t" + us);
                    } else {
                        report("e\t" + n + "\t" + name(e) + "\t" + us + "\t" + field(e.getMessage()));
                    }
                });
            } catch (KafkaException | IllegalStateException e) {
                report("e\t" + n + "\t" + name(e) + "\t0\t" + field(e.getMessage()));
            }
        }
    }

    /** A record of an aborted transaction is named by its cause: what went wrong first. */
    private static String name(Exception e) {
        Throwable t = e instanceof TransactionAbortedException && e.getCause() != null ? e.getCause() : e;
        return t.getClass().getSimpleName();
    }

    private void close() throws InterruptedException {
        for (ExecutorService ex : executors) {
            ex.shutdown();
            ex.awaitTermination(60, TimeUnit.SECONDS);
        }
        for (KafkaProducer<byte[], byte[]> p : turns) {
            p.close(Duration.ofSeconds(5));
        }
    }

    private static void report(String line) {
        synchronized (OUT) {
            OUT.print(line);
            OUT.print('\n');
        }
    }

    private static void reply(String line) {
        synchronized (OUT) {
            OUT.print(line);
            OUT.print('\n');
            OUT.flush();
        }
    }
}
