package sluice.compat;

import static sluice.compat.CompatSuite.*;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;

/** Producing: the idempotent producer under every codec, and timestamps found again. */
final class Producing {
    private Producing() {}

    static final int RECORDS = 40;

    static Map<String, Object> idempotent(String codec) throws Exception {
        return idempotent(codec, null);
    }

    /** With `topicCodec`, the topic's compression.type differs: the broker recompresses. */
    static Map<String, Object> idempotent(String codec, String topicCodec) throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        String topic = name("idem-" + codec + (topicCodec == null ? "" : "-to-" + topicCodec));
        try (Admin admin = admin()) {
            NewTopic newTopic = new NewTopic(topic, 2, (short) 1);
            if (topicCodec != null) newTopic.configs(Map.of("compression.type", topicCodec));
            admin.createTopics(List.of(newTopic)).all().get(20, TimeUnit.SECONDS);
        }
        List<ProducerRecord<String, String>> sent = new ArrayList<>();
        List<Future<RecordMetadata>> acks = new ArrayList<>();
        try (KafkaProducer<String, String> producer = producer(props(
                "enable.idempotence", "true", "acks", "all", "compression.type", codec,
                "linger.ms", "20", "max.in.flight.requests.per.connection", "5"))) {
            for (int i = 0; i < RECORDS; i++) {
                ProducerRecord<String, String> record = new ProducerRecord<>(topic, i % 2,
                        "key-" + i, "value-" + i + "-" + "abc".repeat(i * 5));
                record.headers().add("index", utf8(Integer.toString(i)));
                record.headers().add("codec", utf8(codec));
                if (i % 3 == 0) record.headers().add("empty", new byte[0]);
                if (i % 4 == 0) record.headers().add("null", null);
                if (i % 5 == 0) record.headers().add("index", utf8("repeated key"));
                sent.add(record);
                acks.add(producer.send(record));
            }
            producer.flush();
        }
        // Acknowledged offsets: per partition, in send order, 0, 1, 2, ... on a fresh topic.
        Map<Integer, Long> next = new HashMap<>();
        Map<String, ProducerRecord<String, String>> byPosition = new HashMap<>();
        int acked = 0;
        boolean consecutive = true;
        for (int i = 0; i < RECORDS; i++) {
            RecordMetadata meta = acks.get(i).get(10, TimeUnit.SECONDS);
            acked++;
            long expected = next.getOrDefault(meta.partition(), 0L);
            if (meta.offset() != expected) consecutive = false;
            next.put(meta.partition(), meta.offset() + 1);
            byPosition.put(meta.partition() + "@" + meta.offset(), sent.get(i));
        }
        obs.put("sent", RECORDS);
        obs.put("acked", acked);
        obs.put("offsets_consecutive", consecutive);

        List<String> mismatches = new ArrayList<>();
        int read = 0;
        try (KafkaConsumer<String, String> consumer = consumer(null, props())) {
            List<TopicPartition> partitions = List.of(new TopicPartition(topic, 0),
                    new TopicPartition(topic, 1));
            for (ConsumerRecord<String, String> got : readAll(consumer, partitions, 15_000)) {
                read++;
                ProducerRecord<String, String> want = byPosition.remove(got.partition() + "@" + got.offset());
                if (want == null) {
                    mismatches.add("unexpected record at " + got.partition() + "@" + got.offset());
                    continue;
                }
                String wantHeaders = headers(want.headers().toArray());
                String gotHeaders = headers(got.headers().toArray());
                if (!want.key().equals(got.key()) || !want.value().equals(got.value())
                        || !wantHeaders.equals(gotHeaders)) {
                    mismatches.add(got.partition() + "@" + got.offset() + ": key " + got.key()
                            + " headers " + gotHeaders + " (wanted " + want.key() + " " + wantHeaders + ")");
                }
            }
        }
        obs.put("read", read);
        obs.put("missing", byPosition.size());
        obs.put("mismatches", mismatches.subList(0, Math.min(5, mismatches.size())));
        return obs;
    }

    static String headers(Header[] headers) {
        StringBuilder out = new StringBuilder();
        for (Header header : headers) {
            out.append(header.key()).append('=')
                    .append(header.value() == null ? "<null>" : new String(header.value(), StandardCharsets.UTF_8))
                    .append(';');
        }
        return out.toString();
    }

    /** A record over the topic's max.message.bytes is refused; the producer carries on. */
    static Map<String, Object> recordTooLarge() throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        String topic = name("too-large");
        try (Admin admin = admin()) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1)
                    .configs(Map.of("max.message.bytes", "2000")))).all().get(20, TimeUnit.SECONDS);
        }
        try (KafkaProducer<String, String> producer = producer(props(
                "enable.idempotence", "true", "acks", "all", "compression.type", "none"))) {
            step(obs, "large", () -> producer.send(new ProducerRecord<>(topic, 0, "k", "x".repeat(5000)))
                    .get(15, TimeUnit.SECONDS).offset());
            step(obs, "small_after", () -> producer.send(new ProducerRecord<>(topic, 0, "k", "small"))
                    .get(15, TimeUnit.SECONDS).offset());
        }
        // The limit is on the batch as stored: compressed, 5000 bytes of one letter fit.
        try (KafkaProducer<String, String> producer = producer(props(
                "enable.idempotence", "true", "acks", "all", "compression.type", "gzip"))) {
            step(obs, "large_compressible", () -> producer.send(new ProducerRecord<>(topic, 0, "k", "x".repeat(5000)))
                    .get(15, TimeUnit.SECONDS).offset());
        }
        for (String acks : List.of("0", "1")) {
            try (KafkaProducer<String, String> producer = producer(props(
                    "enable.idempotence", "false", "acks", acks))) {
                step(obs, "acks_" + acks, () -> producer.send(new ProducerRecord<>(topic, 0, "k", "acks=" + acks))
                        .get(15, TimeUnit.SECONDS).offset());
            }
        }
        try (KafkaConsumer<String, String> consumer = consumer(null, props())) {
            List<String> values = new ArrayList<>();
            for (ConsumerRecord<String, String> record : readAll(consumer, List.of(new TopicPartition(topic, 0)), 15_000)) {
                values.add(record.value().length() > 20 ? record.value().length() + " bytes" : record.value());
            }
            obs.put("read", values);
        }
        return obs;
    }

    /** Records with set timestamps, then `offsetsForTimes` and a seek to what it found. */
    static Map<String, Object> offsetsForTimes() throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        String topic = name("times");
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
        }
        long base = (System.currentTimeMillis() / 1000) * 1000 - 3_600_000;
        obs.put("base", base);
        try (KafkaProducer<String, String> producer = producer(props("acks", "all"))) {
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>(topic, 0, base + i * 1000L, "k" + i, "v" + i));
            }
            producer.flush();
        }
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> consumer = consumer(null, props())) {
            consumer.assign(List.of(tp));
            Map<String, Long> queries = new LinkedHashMap<>();
            queries.put("before_first", base - 5000);
            queries.put("first", base);
            queries.put("between_3_and_4", base + 3500);
            queries.put("last", base + 9000);
            queries.put("after_last", base + 9001);
            Map<String, Object> found = new LinkedHashMap<>();
            for (Map.Entry<String, Long> query : queries.entrySet()) {
                OffsetAndTimestamp at = consumer.offsetsForTimes(Map.of(tp, query.getValue()),
                        Duration.ofSeconds(10)).get(tp);
                found.put(query.getKey(), at == null ? null : List.of(at.offset(), at.timestamp()));
            }
            obs.put("found", found);
            OffsetAndTimestamp mid = consumer.offsetsForTimes(Map.of(tp, base + 3500),
                    Duration.ofSeconds(10)).get(tp);
            if (mid != null) {
                consumer.seek(tp, mid.offset());
                long deadline = System.currentTimeMillis() + 10_000;
                while (System.currentTimeMillis() < deadline) {
                    List<ConsumerRecord<String, String>> got = consumer.poll(Duration.ofMillis(200)).records(tp);
                    if (!got.isEmpty()) {
                        ConsumerRecord<String, String> first = got.get(0);
                        obs.put("first_after_seek", List.of(first.offset(), first.timestamp(), first.value()));
                        break;
                    }
                }
            }
        }
        return obs;
    }
}
