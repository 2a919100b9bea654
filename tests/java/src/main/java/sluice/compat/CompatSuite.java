package sluice.compat;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Scenarios run by Apache Kafka's Java client against a broker, each printing one JSON object
 * of what it observed on stdout: {"scenario": name, ...}. A scenario catches its own failures
 * (reported as "error": "ExceptionClass: message"); every wait is bounded.
 *
 * Usage: CompatSuite BOOTSTRAP [SCENARIO...]
 */
public final class CompatSuite {
    static final long SCENARIO_TIMEOUT_MS = 60_000;
    static final String CLIENT_VERSION = clientVersion();
    static String bootstrap;
    static String runId;

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: CompatSuite BOOTSTRAP [SCENARIO...]");
            System.exit(2);
        }
        bootstrap = args[0];
        runId = CLIENT_VERSION.replace('.', '_') + "-"
                + UUID.randomUUID().toString().substring(0, 8);
        Map<String, Callable<Map<String, Object>>> scenarios = new LinkedHashMap<>();
        for (String codec : List.of("none", "gzip", "snappy", "lz4", "zstd")) {
            scenarios.put("idempotent_" + codec, () -> Producing.idempotent(codec));
        }
        scenarios.put("idempotent_gzip_to_zstd", () -> Producing.idempotent("gzip", "zstd"));
        scenarios.put("idempotent_none_to_lz4", () -> Producing.idempotent("none", "lz4"));
        scenarios.put("transactions", Transactions::consumeTransformProduce);
        scenarios.put("transactions_aborted_for_them", Transactions::abortedForThem);
        scenarios.put("group_eager", () -> Groups.shared("org.apache.kafka.clients.consumer.RangeAssignor"));
        scenarios.put("group_cooperative",
                () -> Groups.shared("org.apache.kafka.clients.consumer.CooperativeStickyAssignor"));
        scenarios.put("group_consumer_protocol", Groups::consumerProtocol);
        scenarios.put("static_membership", Groups::staticMembership);
        scenarios.put("record_too_large", Producing::recordTooLarge);
        scenarios.put("offsets_for_times", Producing::offsetsForTimes);
        scenarios.put("resume", Consuming::resume);
        scenarios.put("small_fetches", Consuming::smallFetches);
        scenarios.put("out_of_range", Consuming::outOfRange);
        scenarios.put("admin_topics", AdminScenarios::topics);
        scenarios.put("admin_configs", AdminScenarios::configs);
        scenarios.put("admin_cluster", AdminScenarios::cluster);
        scenarios.put("admin_list_offsets", AdminScenarios::listOffsets);
        scenarios.put("admin_groups", AdminScenarios::groups);
        scenarios.put("quotas_admin", Quotas::administration);
        scenarios.put("quotas_throttle", Quotas::throttle);
        if (args.length > 1) {
            scenarios.keySet().retainAll(List.of(args).subList(1, args.length));
        }

        // Scenarios use their own topics and groups: they run side by side to keep time low.
        ExecutorService pool = Executors.newFixedThreadPool(6, runnable -> {
            Thread thread = new Thread(runnable);
            thread.setDaemon(true);
            return thread;
        });
        Map<String, Future<Map<String, Object>>> running = new LinkedHashMap<>();
        for (Map.Entry<String, Callable<Map<String, Object>>> entry : scenarios.entrySet()) {
            String name = entry.getKey();
            Callable<Map<String, Object>> body = entry.getValue();
            running.put(name, pool.submit(() -> {
                long start = System.nanoTime();
                Map<String, Object> result;
                try {
                    result = body.call();
                } catch (Throwable t) {
                    result = new LinkedHashMap<>();
                    result.put("error", describe(t));
                }
                result.put("elapsed_ms", (System.nanoTime() - start) / 1_000_000);
                return result;
            }));
        }
        long deadline = System.currentTimeMillis() + SCENARIO_TIMEOUT_MS;
        for (Map.Entry<String, Future<Map<String, Object>>> entry : running.entrySet()) {
            Map<String, Object> line = new LinkedHashMap<>();
            line.put("scenario", entry.getKey());
            line.put("client_version", CLIENT_VERSION);
            try {
                long left = Math.max(1, deadline - System.currentTimeMillis());
                line.putAll(entry.getValue().get(left, TimeUnit.MILLISECONDS));
            } catch (TimeoutException e) {
                line.put("error", "TimeoutException: scenario still running after "
                        + SCENARIO_TIMEOUT_MS + " ms");
            } catch (ExecutionException e) {
                line.put("error", describe(e.getCause()));
            }
            System.out.println(Json.write(line));
            System.out.flush();
        }
        // Daemon threads of a timed-out scenario must not keep the JVM alive.
        System.exit(0);
    }

    // -- helpers shared by the scenarios --------------------------------------------------

    /** kafka-clients' version, from the properties file its jar carries. */
    static String clientVersion() {
        try (java.io.InputStream in = KafkaProducer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            Properties props = new Properties();
            if (in != null) props.load(in);
            return props.getProperty("version", "unknown");
        } catch (java.io.IOException e) {
            return "unknown";
        }
    }

    static String name(String what) {
        return "jc-" + what + "-" + runId;
    }

    static String describe(Throwable t) {
        while ((t instanceof ExecutionException || t instanceof CompletionException)
                && t.getCause() != null) {
            t = t.getCause();
        }
        return t.getClass().getSimpleName() + ": " + t.getMessage();
    }

    /** Runs `step`, recording its value (or its error) under `key`; returns the value or null. */
    static <T> T step(Map<String, Object> obs, String key, Callable<T> step) {
        try {
            T value = step.call();
            obs.put(key, value);
            return value;
        } catch (Throwable t) {
            Map<String, Object> failed = new LinkedHashMap<>();
            failed.put("error", describe(t));
            obs.put(key, failed);
            return null;
        }
    }

    static Properties common() {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("request.timeout.ms", "10000");
        props.put("metadata.max.age.ms", "5000");
        props.put("reconnect.backoff.max.ms", "500");
        props.put("retry.backoff.ms", "100");
        return props;
    }

    static Admin admin() {
        Properties props = common();
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        return Admin.create(props);
    }

    static KafkaProducer<String, String> producer(Properties extra) {
        Properties props = common();
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "20000");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.putAll(extra);
        return new KafkaProducer<>(props);
    }

    static KafkaConsumer<String, String> consumer(String group, Properties extra) {
        Properties props = common();
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        if (!"consumer".equals(extra.getProperty(ConsumerConfig.GROUP_PROTOCOL_CONFIG))) {
            // The consumer group protocol (KIP-848) takes both from the broker and refuses them.
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
            props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
        }
        props.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "30000");
        props.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        if (group != null) props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.putAll(extra);
        return new KafkaConsumer<>(props);
    }

    static Properties props(String... keyValues) {
        Properties props = new Properties();
        for (int i = 0; i + 1 < keyValues.length; i += 2) props.put(keyValues[i], keyValues[i + 1]);
        return props;
    }

    static void createTopic(Admin admin, String topic, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1)))
                .all().get(20, TimeUnit.SECONDS);
    }

    /** Every record of `partitions` from the beginning up to their end offsets (as this
     * consumer's isolation level sees them), within `timeoutMs`. */
    static List<ConsumerRecord<String, String>> readAll(KafkaConsumer<String, String> consumer,
            Collection<TopicPartition> partitions, long timeoutMs) {
        consumer.assign(partitions);
        consumer.seekToBeginning(partitions);
        Map<TopicPartition, Long> end = consumer.endOffsets(partitions, Duration.ofSeconds(10));
        List<ConsumerRecord<String, String>> records = new ArrayList<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (System.currentTimeMillis() < deadline) {
            boolean done = true;
            for (TopicPartition tp : partitions) {
                if (consumer.position(tp, Duration.ofSeconds(10)) < end.get(tp)) done = false;
            }
            if (done) break;
            consumer.poll(Duration.ofMillis(200)).forEach(records::add);
        }
        return records;
    }

    static List<Integer> partitionNumbers(Set<TopicPartition> assignment) {
        Set<Integer> sorted = new TreeSet<>();
        for (TopicPartition tp : assignment) sorted.add(tp.partition());
        return new ArrayList<>(sorted);
    }

    static byte[] utf8(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }
}
