package sluice.compat;

import static sluice.compat.CompatSuite.*;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/** Consuming: resuming from committed offsets, small fetch sizes, offsets out of range. */
final class Consuming {
    private Consuming() {}

    static void produce(String topic, int count, int valueSize) throws Exception {
        try (KafkaProducer<String, String> producer = producer(props("acks", "all"))) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, 0, "k" + i, value(i, valueSize)));
            }
            producer.flush();
        }
    }

    static String value(int i, int size) {
        String head = i + ":";
        return head + "v".repeat(Math.max(0, size - head.length()));
    }

    static long firstOffset(KafkaConsumer<String, String> consumer, long timeoutMs) {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                return record.offset();
            }
        }
        return -1;
    }

    /** A member commits (with metadata) and closes; the next member resumes from there. */
    static Map<String, Object> resume() throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        String topic = name("resume");
        String group = topic + "-g";
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
        }
        produce(topic, 20, 10);
        try (KafkaConsumer<String, String> first = consumer(group, props())) {
            first.subscribe(List.of(topic));
            obs.put("first_starts_at", firstOffset(first, 20_000));
            step(obs, "never_committed", () -> first.committed(Set.of(tp), Duration.ofSeconds(10)).get(tp));
            first.commitSync(Map.of(tp, new OffsetAndMetadata(12, "twelve")), Duration.ofSeconds(10));
            step(obs, "committed", () -> {
                OffsetAndMetadata committed = first.committed(Set.of(tp), Duration.ofSeconds(10)).get(tp);
                return List.of(committed.offset(), committed.metadata(), committed.leaderEpoch().isPresent());
            });
        }
        try (KafkaConsumer<String, String> next = consumer(group, props())) {
            next.subscribe(List.of(topic));
            obs.put("next_starts_at", firstOffset(next, 20_000));
        }
        return obs;
    }

    /** Records larger than max.partition.fetch.bytes and fetch.max.bytes still come, one by one. */
    static Map<String, Object> smallFetches() throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        String topic = name("small-fetch");
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
        }
        produce(topic, 12, 3000);
        try (KafkaConsumer<String, String> consumer = consumer(null, props(
                "max.partition.fetch.bytes", "1024", "fetch.max.bytes", "2048"))) {
            List<Long> offsets = new ArrayList<>();
            int intact = 0;
            for (ConsumerRecord<String, String> record : readAll(consumer, List.of(tp), 20_000)) {
                offsets.add(record.offset());
                if (record.value().equals(value((int) record.offset(), 3000))) intact++;
            }
            obs.put("offsets", offsets);
            obs.put("intact_values", intact);
        }
        return obs;
    }

    /** A position beyond the log end: reset by auto.offset.reset, or an error with "none". */
    static Map<String, Object> outOfRange() throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        String topic = name("out-of-range");
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
        }
        produce(topic, 10, 10);
        for (String reset : List.of("earliest", "latest", "none")) {
            try (KafkaConsumer<String, String> consumer = consumer(null, props("auto.offset.reset", reset))) {
                consumer.assign(List.of(tp));
                consumer.seek(tp, 1000);
                step(obs, reset, () -> {
                    long deadline = System.currentTimeMillis() + 10_000;
                    // The first record read after the reset, or the position when none comes.
                    while (System.currentTimeMillis() < deadline) {
                        for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                            return "record " + record.offset();
                        }
                        long position = consumer.position(tp, Duration.ofSeconds(10));
                        if (position != 1000) return "position " + position;
                    }
                    return "position 1000";
                });
            }
        }
        return obs;
    }
}
