package sluice.compat;

import static sluice.compat.CompatSuite.*;

import java.time.Duration;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;

/**
 * Copies SOURCE to SINK (same partition) in transactions, "<value>#<attempt>" per record,
 * with the consumer's positions sent along (sendOffsetsToTransaction), until EXPECTED
 * records are copied or TIMEOUT_S passes. Prints one JSON object per transaction attempt:
 * {"attempt", "records", "outcome": committed (commitTransaction returned) | aborted
 * (abortTransaction returned, or the producer was replaced before its commit was asked) |
 * unknown, "error" when it failed}. A failed attempt is aborted (or its producer replaced
 * when that fails too), and the consumer replaced, to resume from the committed offsets.
 *
 * Usage: TxnCopy BOOTSTRAP SOURCE SINK TRANSACTIONAL_ID GROUP EXPECTED TIMEOUT_S
 */
public final class TxnCopy {
    private TxnCopy() {}

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        String source = args[1], sink = args[2], transactionalId = args[3], group = args[4];
        int expected = Integer.parseInt(args[5]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[6]) * 1000;
        int copied = 0, attempt = 0;
        KafkaProducer<String, String> producer = newProducer(transactionalId);
        KafkaConsumer<String, String> consumer = newConsumer(group, source);
        try {
            while (copied < expected && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) continue;
                attempt++;
                Map<String, Object> line = new LinkedHashMap<>();
                line.put("attempt", attempt);
                line.put("records", records.count());
                String outcome = "unknown";
                try {
                    producer.beginTransaction();
                    Map<TopicPartition, OffsetAndMetadata> ends = new HashMap<>();
                    for (ConsumerRecord<String, String> r : records) {
                        producer.send(new ProducerRecord<>(sink, r.partition(), r.key(), r.value() + "#" + attempt));
                        ends.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    producer.sendOffsetsToTransaction(ends, consumer.groupMetadata());
                    outcome = "asked";
                    producer.commitTransaction();
                    outcome = "committed";
                    copied += records.count();
                } catch (KafkaException e) {
                    line.put("error", describe(e));
                    boolean commitAsked = outcome.equals("asked");
                    outcome = "unknown";
                    try {
                        if (e instanceof ProducerFencedException) throw e;
                        producer.abortTransaction();
                        outcome = "aborted";
                    } catch (KafkaException abortFailed) {
                        producer.close(Duration.ofSeconds(5));
                        producer = newProducer(transactionalId);  // fences the old one, aborts its transaction
                        if (!commitAsked) outcome = "aborted";
                    }
                    consumer.close(Duration.ofSeconds(5));
                    consumer = newConsumer(group, source);
                }
                line.put("outcome", outcome);
                System.out.println(Json.write(line));
                System.out.flush();
            }
        } finally {
            consumer.close(Duration.ofSeconds(5));
            producer.close(Duration.ofSeconds(5));
        }
        System.exit(0);
    }

    static KafkaProducer<String, String> newProducer(String transactionalId) {
        KafkaProducer<String, String> producer = producer(props(
                "transactional.id", transactionalId, "acks", "all", "transaction.timeout.ms", "30000",
                "max.block.ms", "60000", "delivery.timeout.ms", "60000"));
        producer.initTransactions();
        return producer;
    }

    static KafkaConsumer<String, String> newConsumer(String group, String source) {
        KafkaConsumer<String, String> consumer = consumer(group, props("isolation.level", "read_committed"));
        consumer.subscribe(List.of(source));
        return consumer;
    }
}
