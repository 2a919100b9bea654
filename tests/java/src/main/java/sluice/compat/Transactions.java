package sluice.compat;

import static sluice.compat.CompatSuite.*;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;

/** Consume-transform-produce: one committed transaction, one aborted. */
final class Transactions {
    private Transactions() {}

    static final int RECORDS = 10;

    static Map<String, Object> consumeTransformProduce() throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        String in = name("txn-in");
        String out = name("txn-out");
        String group = name("txn-group");
        try (Admin admin = admin()) {
            createTopic(admin, in, 1);
            createTopic(admin, out, 1);
        }
        try (KafkaProducer<String, String> producer = producer(props("acks", "all"))) {
            for (int i = 0; i < RECORDS; i++) producer.send(new ProducerRecord<>(in, 0, "k" + i, "in-" + i));
            producer.flush();
        }
        TopicPartition inTp = new TopicPartition(in, 0);
        TopicPartition outTp = new TopicPartition(out, 0);
        String transactionalId = name("txn-id");
        try (Admin admin = admin();
             KafkaConsumer<String, String> consumer = consumer(group, props("isolation.level", "read_committed"));
             KafkaProducer<String, String> producer = producer(props(
                     "transactional.id", transactionalId, "enable.idempotence", "true", "acks", "all",
                     "transaction.timeout.ms", "30000"))) {
            consumer.subscribe(List.of(in));
            List<ConsumerRecord<String, String>> input = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 20_000;
            while (input.size() < RECORDS && System.currentTimeMillis() < deadline) {
                consumer.poll(Duration.ofMillis(200)).forEach(input::add);
            }
            obs.put("consumed_input", input.size());
            if (input.size() < RECORDS) return obs;
            obs.put("generation", consumer.groupMetadata().generationId());

            producer.initTransactions();
            for (int txn = 0; txn < 2; txn++) {
                producer.beginTransaction();
                List<ConsumerRecord<String, String>> batch = input.subList(txn * 5, txn * 5 + 5);
                for (ConsumerRecord<String, String> record : batch) {
                    producer.send(new ProducerRecord<>(out, 0, record.key(), "out-" + record.value()));
                }
                producer.flush();  // an abort drops what is still unsent: this one must abort written records
                long next = batch.get(batch.size() - 1).offset() + 1;
                producer.sendOffsetsToTransaction(Map.of(inTp, new OffsetAndMetadata(next)),
                        consumer.groupMetadata());
                String label = txn == 0 ? "open_first" : "open_second";
                // While it is open: the last stable offset stops at its first record.
                step(obs, label + "_latest_committed", () -> admin.listOffsets(Map.of(outTp, OffsetSpec.latest()),
                        new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).partitionResult(outTp).get().offset());
                step(obs, label + "_latest_uncommitted", () -> admin.listOffsets(Map.of(outTp, OffsetSpec.latest()),
                        new ListOffsetsOptions(IsolationLevel.READ_UNCOMMITTED)).partitionResult(outTp).get().offset());
                step(obs, label + "_described", () -> describe(admin, transactionalId));
                step(obs, label + "_listed", () -> listed(admin, transactionalId));
                if (txn == 0) {
                    producer.commitTransaction();
                    obs.put("sent_offset_committed_txn", next);
                } else {
                    producer.abortTransaction();
                    obs.put("sent_offset_aborted_txn", next);
                }
                step(obs, (txn == 0 ? "committed" : "aborted") + "_described", () -> describeEnded(admin, transactionalId));
            }
            // A second producer with the same transactional id fences this one.
            try (KafkaProducer<String, String> successor = producer(props(
                    "transactional.id", transactionalId, "enable.idempotence", "true", "acks", "all"))) {
                successor.initTransactions();
                step(obs, "fenced", () -> {
                    producer.beginTransaction();
                    producer.send(new ProducerRecord<>(out, 0, "k", "from-the-fenced-producer")).get();
                    producer.commitTransaction();
                    return "ok";
                });
                step(obs, "successor_commits", () -> {
                    successor.beginTransaction();
                    successor.send(new ProducerRecord<>(out, 0, "k", "from-the-successor"));
                    successor.commitTransaction();
                    return "ok";
                });
            }
            OffsetAndMetadata committed = consumer.committed(Set.of(inTp), Duration.ofSeconds(10)).get(inTp);
            obs.put("group_committed_offset", committed == null ? null : committed.offset());
        }
        for (String isolation : List.of("read_committed", "read_uncommitted")) {
            try (KafkaConsumer<String, String> reader = consumer(null, props("isolation.level", isolation))) {
                List<String> values = new ArrayList<>();
                for (ConsumerRecord<String, String> record : readAll(reader, List.of(outTp), 15_000)) {
                    values.add(record.value());
                }
                obs.put(isolation, values);
                obs.put(isolation + "_end_offset",
                        reader.endOffsets(List.of(outTp), Duration.ofSeconds(10)).get(outTp));
            }
        }
        return obs;
    }

    /** A transaction left open past its timeout is aborted by the coordinator; a producer
     * fenced by the admin (fenceProducers) cannot commit. Neither's records are visible. */
    static Map<String, Object> abortedForThem() throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        String topic = name("txn-timeout");
        TopicPartition tp = new TopicPartition(topic, 0);
        String slow = name("txn-slow");
        String fenced = name("txn-fenced");
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            try (KafkaProducer<String, String> producer = producer(props(
                    "transactional.id", slow, "acks", "all", "transaction.timeout.ms", "1500"))) {
                producer.initTransactions();
                producer.beginTransaction();
                producer.send(new ProducerRecord<>(topic, 0, "k", "timed-out"));
                producer.flush();
                step(obs, "timeout_state", () -> {
                    long deadline = System.currentTimeMillis() + 20_000;
                    String state = describe(admin, slow).get("state").toString();
                    while ((state.equals("ONGOING") || state.equals("PREPARE_ABORT"))
                            && System.currentTimeMillis() < deadline) {
                        Thread.sleep(100);  // polling the coordinator's state, bounded above
                        state = describe(admin, slow).get("state").toString();
                    }
                    return state;
                });
                step(obs, "timeout_commit", () -> {
                    producer.commitTransaction();
                    return "ok";
                });
            }
            try (KafkaProducer<String, String> producer = producer(props("transactional.id", fenced, "acks", "all"))) {
                producer.initTransactions();
                step(obs, "fence_producers", () -> {
                    admin.fenceProducers(List.of(fenced)).all().get();
                    return "ok";
                });
                step(obs, "fenced_commit", () -> {
                    producer.beginTransaction();
                    producer.send(new ProducerRecord<>(topic, 0, "k", "fenced")).get();
                    producer.commitTransaction();
                    return "ok";
                });
            }
        }
        for (String isolation : List.of("read_committed", "read_uncommitted")) {
            try (KafkaConsumer<String, String> reader = consumer(null, props("isolation.level", isolation))) {
                List<String> values = new ArrayList<>();
                for (ConsumerRecord<String, String> record : readAll(reader, List.of(tp), 15_000)) {
                    values.add(record.value());
                }
                obs.put(isolation, values);
            }
        }
        return obs;
    }

    static Map<String, Object> describe(Admin admin, String transactionalId) throws Exception {
        TransactionDescription d = admin.describeTransactions(List.of(transactionalId)).all().get().get(transactionalId);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("state", d.state().name());
        out.put("producer_id_set", d.producerId() >= 0);
        out.put("timeout_ms", d.transactionTimeoutMs());
        List<String> partitions = new ArrayList<>();
        for (TopicPartition tp : d.topicPartitions()) partitions.add(tp.toString());
        partitions.sort(null);
        out.put("partitions", partitions);
        return out;
    }

    /** The description once the markers are written: EndTxn is answered as soon as the
     *  decision (PrepareCommit/PrepareAbort) is, as Kafka answers it; polled up to 30 s. */
    static Map<String, Object> describeEnded(Admin admin, String transactionalId) throws Exception {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (true) {
            Map<String, Object> described = describe(admin, transactionalId);
            String state = (String) described.get("state");
            if (!state.startsWith("PREPARE_") || System.nanoTime() > deadline) return described;
            Thread.sleep(20);
        }
    }

    static String listed(Admin admin, String transactionalId) throws Exception {
        for (TransactionListing listing : admin.listTransactions().all().get()) {
            if (listing.transactionalId().equals(transactionalId)) return listing.state().name();
        }
        return null;
    }
}
