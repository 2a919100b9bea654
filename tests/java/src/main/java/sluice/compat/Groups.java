package sluice.compat;

import static sluice.compat.CompatSuite.*;

import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberToRemove;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;

/** Consumer groups: two members sharing a topic (classic and KIP-848 protocols); static membership. */
final class Groups {
    private Groups() {}

    static final int PARTITIONS = 6;
    static final int PER_PARTITION = 10;

    /** True once the two members hold every partition of `topic` exactly once between them. */
    static boolean covers(KafkaConsumer<?, ?> a, KafkaConsumer<?, ?> b, int partitions) {
        Set<TopicPartition> first = a.assignment();
        Set<TopicPartition> second = b.assignment();
        if (first.isEmpty() || second.isEmpty()) return false;
        Set<TopicPartition> both = new HashSet<>(first);
        both.retainAll(second);
        return both.isEmpty() && first.size() + second.size() == partitions;
    }

    /** Polls both members (records go to `sink`, by member) until they cover the topic. */
    static boolean settle(KafkaConsumer<String, String> a, KafkaConsumer<String, String> b, int partitions,
                          long timeoutMs, Map<String, Integer> sink) {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : a.poll(Duration.ofMillis(100))) sink.merge(r.value(), 1, Integer::sum);
            for (ConsumerRecord<String, String> r : b.poll(Duration.ofMillis(100))) sink.merge(r.value(), 1, Integer::sum);
            if (covers(a, b, partitions)) return true;
        }
        return false;
    }

    /** Two members of the classic protocol with the client-side `assignor`. */
    static Map<String, Object> shared(String assignor) throws Exception {
        return shared(assignor.substring(assignor.lastIndexOf('.') + 1),
                props("partition.assignment.strategy", assignor));
    }

    /** Two members of the consumer group protocol (KIP-848): the broker assigns. */
    static Map<String, Object> consumerProtocol() throws Exception {
        return shared("kip848", props("group.protocol", "consumer"));
    }

    static Map<String, Object> shared(String label, java.util.Properties extra) throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        String topic = name("group-" + label);
        String group = topic + "-g";
        try (Admin admin = admin()) {
            createTopic(admin, topic, PARTITIONS);
        }
        try (KafkaConsumer<String, String> a = consumer(group, extra);
             KafkaConsumer<String, String> b = consumer(group, extra)) {
            a.subscribe(List.of(topic));
            b.subscribe(List.of(topic));
            Map<String, Integer> seen = new HashMap<>();
            boolean settled = settle(a, b, PARTITIONS, 30_000, seen);
            obs.put("settled", settled);
            obs.put("assignment_a", partitionNumbers(a.assignment()));
            obs.put("assignment_b", partitionNumbers(b.assignment()));
            if (!settled) return obs;

            try (KafkaProducer<String, String> producer = producer(props("acks", "all"))) {
                for (int p = 0; p < PARTITIONS; p++) {
                    for (int i = 0; i < PER_PARTITION; i++) {
                        producer.send(new ProducerRecord<>(topic, p, "k", "p" + p + "-" + i));
                    }
                }
                producer.flush();
            }
            int total = PARTITIONS * PER_PARTITION;
            int byA = 0;
            int byB = 0;
            long deadline = System.currentTimeMillis() + 20_000;
            while (byA + byB < total && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : a.poll(Duration.ofMillis(100))) {
                    seen.merge(r.value(), 1, Integer::sum);
                    byA++;
                }
                for (ConsumerRecord<String, String> r : b.poll(Duration.ofMillis(100))) {
                    seen.merge(r.value(), 1, Integer::sum);
                    byB++;
                }
            }
            obs.put("consumed_by_a", byA);
            obs.put("consumed_by_b", byB);
            obs.put("distinct", seen.size());
            obs.put("duplicates", seen.values().stream().filter(n -> n > 1).count());
            obs.put("final_assignment_a", partitionNumbers(a.assignment()));
            obs.put("final_assignment_b", partitionNumbers(b.assignment()));
            a.commitSync(Duration.ofSeconds(10));
            b.commitSync(Duration.ofSeconds(10));
            // a leaves (LeaveGroup): b takes every partition, from the committed offsets.
            a.close(Duration.ofSeconds(10));
            int after = 0;
            deadline = System.currentTimeMillis() + 20_000;
            while (b.assignment().size() < PARTITIONS && System.currentTimeMillis() < deadline) {
                after += b.poll(Duration.ofMillis(100)).count();
            }
            after += b.poll(Duration.ofMillis(100)).count();
            obs.put("after_leave_b", partitionNumbers(b.assignment()));
            obs.put("consumed_after_leave", after);
        }
        return obs;
    }

    static Map<String, Object> staticMembership() throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        int partitions = 4;
        String topic = name("static");
        String group = topic + "-g";
        try (Admin admin = admin()) {
            createTopic(admin, topic, partitions);
        }
        Map<String, Integer> ignored = new HashMap<>();
        try (KafkaConsumer<String, String> b = consumer(group, props("group.instance.id", "member-b"))) {
            KafkaConsumer<String, String> a = consumer(group, props("group.instance.id", "member-a"));
            try {
                a.subscribe(List.of(topic));
                b.subscribe(List.of(topic));
                boolean settled = settle(a, b, partitions, 30_000, ignored);
                obs.put("settled", settled);
                obs.put("a_before", partitionNumbers(a.assignment()));
                obs.put("b_before", partitionNumbers(b.assignment()));
                obs.put("generation_before", b.groupMetadata().generationId());
                if (!settled) return obs;
            } finally {
                a.close(Duration.ofSeconds(5));  // a static member leaves no LeaveGroup behind
            }
            try (KafkaConsumer<String, String> again = consumer(group, props("group.instance.id", "member-a"))) {
                again.subscribe(List.of(topic));
                boolean settled = settle(again, b, partitions, 20_000, ignored);
                obs.put("resettled", settled);
                obs.put("a_after", partitionNumbers(again.assignment()));
                obs.put("b_after", partitionNumbers(b.assignment()));
                obs.put("generation_after", b.groupMetadata().generationId());
            }
            b.close(Duration.ofSeconds(5));
        }
        // Both static members closed without leaving: the admin removes them by instance id.
        try (Admin admin = admin()) {
            step(obs, "remove_members", () -> {
                admin.removeMembersFromConsumerGroup(group, new RemoveMembersFromConsumerGroupOptions(List.of(
                        new MemberToRemove("member-a"), new MemberToRemove("member-b")))).all().get();
                return "ok";
            });
            step(obs, "after_remove", () -> {
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
                return d.state().name() + "/" + d.members().size();
            });
            step(obs, "remove_unknown", () -> {
                admin.removeMembersFromConsumerGroup(group, new RemoveMembersFromConsumerGroupOptions(List.of(
                        new MemberToRemove("member-zzz")))).all().get();
                return "ok";
            });
        }
        return obs;
    }
}
