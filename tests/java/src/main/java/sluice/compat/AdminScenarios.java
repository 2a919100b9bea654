package sluice.compat;

import static sluice.compat.CompatSuite.*;

import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigResource;

/** The AdminClient, one operation per step: a failing step is recorded and the rest go on. */
final class AdminScenarios {
    private AdminScenarios() {}

    static <T> T get(KafkaFuture<T> future) throws Exception {
        return future.get(20, TimeUnit.SECONDS);
    }

    static Map<String, Object> topics() throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        String topic = name("admin-topics");
        try (Admin admin = admin()) {
            step(obs, "create", () -> {
                get(admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all());
                return "ok";
            });
            step(obs, "create_again", () -> {
                get(admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all());
                return "ok";
            });
            step(obs, "describe", () -> {
                TopicDescription d = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("name", d.name());
                out.put("partitions", d.partitions().size());
                out.put("leaders", d.partitions().stream().map(p -> p.leader() == null ? -1 : p.leader().id()).toList());
                out.put("replicas", d.partitions().get(0).replicas().size());
                out.put("isr", d.partitions().get(0).isr().size());
                out.put("internal", d.isInternal());
                out.put("topic_id_set", d.topicId() != null && !d.topicId().toString().isEmpty());
                return out;
            });
            step(obs, "listed", () -> get(admin.listTopics().names()).contains(topic));
            step(obs, "describe_by_id", () -> {
                TopicDescription byName = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
                Map<Uuid, TopicDescription> byId = get(admin.describeTopics(
                        TopicCollection.ofTopicIds(List.of(byName.topicId()))).allTopicIds());
                return byId.get(byName.topicId()).name().equals(topic);
            });
            step(obs, "create_validate_only", () -> {
                String other = topic + "-validated";
                get(admin.createTopics(List.of(new NewTopic(other, 3, (short) 1)),
                        new CreateTopicsOptions().validateOnly(true)).all());
                return get(admin.listTopics().names()).contains(other);
            });
            step(obs, "create_replication_3", () -> {
                get(admin.createTopics(List.of(new NewTopic(topic + "-rf3", 1, (short) 3))).all());
                return "ok";
            });
            step(obs, "create_bad_name", () -> {
                get(admin.createTopics(List.of(new NewTopic("bad/name" + topic, 1, (short) 1))).all());
                return "ok";
            });
            step(obs, "create_bad_config", () -> {
                get(admin.createTopics(List.of(new NewTopic(topic + "-badcfg", 1, (short) 1)
                        .configs(Map.of("retention.ms", "soon")))).all());
                return "ok";
            });
            step(obs, "create_partitions", () -> {
                get(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all());
                return "ok";
            });
            step(obs, "partitions_after", () ->
                    get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic).partitions().size());
            step(obs, "create_partitions_fewer", () -> {
                get(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all());
                return "ok";
            });
            step(obs, "delete", () -> {
                get(admin.deleteTopics(List.of(topic)).all());
                return "ok";
            });
            step(obs, "listed_after_delete", () -> {
                long deadline = System.currentTimeMillis() + 10_000;
                boolean listed = true;
                while (listed && System.currentTimeMillis() < deadline) {
                    listed = get(admin.listTopics().names()).contains(topic);
                }
                return listed;
            });
            step(obs, "describe_deleted", () -> {
                get(admin.describeTopics(List.of(topic)).allTopicNames());
                return "ok";
            });
        }
        return obs;
    }

    static Map<String, Object> describeConfig(Admin admin, ConfigResource resource, List<String> keys)
            throws Exception {
        Config config = get(admin.describeConfigs(List.of(resource)).all()).get(resource);
        Map<String, Object> out = new TreeMap<>();
        for (String key : keys) {
            ConfigEntry entry = config.get(key);
            out.put(key, entry == null ? null : List.of(String.valueOf(entry.value()), entry.source().name()));
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> configs() throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        String topic = name("admin-configs");
        List<String> keys = List.of("retention.ms", "max.message.bytes", "cleanup.policy");
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        try (Admin admin = admin()) {
            step(obs, "create", () -> {
                NewTopic newTopic = new NewTopic(topic, 1, (short) 1)
                        .configs(Map.of("retention.ms", "3600000", "max.message.bytes", "500000"));
                get(admin.createTopics(List.of(newTopic)).all());
                return "ok";
            });
            step(obs, "describe", () -> describeConfig(admin, resource, keys));
            step(obs, "synonyms", () -> {
                Config config = get(admin.describeConfigs(List.of(resource),
                        new DescribeConfigsOptions().includeSynonyms(true).includeDocumentation(true)).all()).get(resource);
                Map<String, Object> out = new TreeMap<>();
                for (String key : List.of("retention.ms", "max.message.bytes")) {
                    ConfigEntry entry = config.get(key);
                    List<String> synonyms = new ArrayList<>();
                    for (ConfigEntry.ConfigSynonym synonym : entry.synonyms()) {
                        synonyms.add(synonym.name() + "=" + synonym.value() + " " + synonym.source().name());
                    }
                    out.put(key, synonyms);
                    out.put(key + ".type", entry.type().name());
                }
                return out;
            });
            step(obs, "describe_broker", () -> {
                String node = String.valueOf(get(admin.describeCluster().nodes()).iterator().next().id());
                Config config = get(admin.describeConfigs(List.of(
                        new ConfigResource(ConfigResource.Type.BROKER, node))).all()).values().iterator().next();
                return config.entries().size() > 0;
            });
            step(obs, "incremental_alter", () -> {
                Map<ConfigResource, Collection<AlterConfigOp>> ops = Map.of(resource, List.of(
                        new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                        new AlterConfigOp(new ConfigEntry("max.message.bytes", null), AlterConfigOp.OpType.DELETE),
                        new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND)));
                get(admin.incrementalAlterConfigs(ops).all());
                return "ok";
            });
            step(obs, "after_incremental", () -> describeConfig(admin, resource, keys));
            step(obs, "incremental_alter_unknown_key", () -> {
                get(admin.incrementalAlterConfigs(Map.of(resource, List.of(new AlterConfigOp(
                        new ConfigEntry("no.such.config", "1"), AlterConfigOp.OpType.SET)))).all());
                return "ok";
            });
            // The legacy AlterConfigs (replaces every override): gone from the 4.x Admin.
            Method legacy = null;
            try {
                legacy = Admin.class.getMethod("alterConfigs", Map.class);
            } catch (NoSuchMethodException e) {
                obs.put("legacy_alter", "unavailable");
            }
            if (legacy != null) {
                Method alter = legacy;
                step(obs, "legacy_alter", () -> {
                    Object result = alter.invoke(admin, Map.of(resource,
                            new Config(List.of(new ConfigEntry("max.message.bytes", "400000")))));
                    get((KafkaFuture<Void>) result.getClass().getMethod("all").invoke(result));
                    return "ok";
                });
                step(obs, "after_legacy", () -> describeConfig(admin, resource, keys));
            }
        }
        return obs;
    }

    static Map<String, Object> cluster() throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        try (Admin admin = admin()) {
            DescribeClusterResult cluster = admin.describeCluster();
            step(obs, "cluster_id_set", () -> {
                String id = get(cluster.clusterId());
                return id != null && !id.isEmpty();
            });
            step(obs, "nodes", () -> {
                List<String> nodes = new ArrayList<>();
                for (Node node : get(cluster.nodes())) nodes.add(node.id() + "@" + node.host() + ":" + node.port());
                return nodes;
            });
            step(obs, "controller", () -> {
                Node node = get(cluster.controller());
                return node == null ? null : node.id();
            });
        }
        return obs;
    }

    static Map<String, Object> listOffsets() throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        String topic = name("admin-offsets");
        TopicPartition tp = new TopicPartition(topic, 0);
        long base = (System.currentTimeMillis() / 1000) * 1000 - 3_600_000;
        obs.put("base", base);
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            // One batch whose largest timestamp is not its last record's.
            try (KafkaProducer<String, String> producer = producer(props("acks", "all", "linger.ms", "50"))) {
                long[] seconds = {5, 1, 9, 3, 7};
                for (int i = 0; i < seconds.length; i++) {
                    producer.send(new ProducerRecord<>(topic, 0, base + seconds[i] * 1000, "k" + i, "v" + i));
                }
                producer.flush();
            }
            Map<String, OffsetSpec> specs = new LinkedHashMap<>();
            specs.put("earliest", OffsetSpec.earliest());
            specs.put("latest", OffsetSpec.latest());
            specs.put("max_timestamp", OffsetSpec.maxTimestamp());
            specs.put("for_timestamp_6s", OffsetSpec.forTimestamp(base + 6000));
            specs.put("for_timestamp_first", OffsetSpec.forTimestamp(base));
            specs.put("for_timestamp_after", OffsetSpec.forTimestamp(base + 10_000));
            for (Map.Entry<String, OffsetSpec> spec : specs.entrySet()) {
                step(obs, spec.getKey(), () -> {
                    ListOffsetsResult.ListOffsetsResultInfo info =
                            get(admin.listOffsets(Map.of(tp, spec.getValue())).partitionResult(tp));
                    return List.of(info.offset(), info.timestamp());
                });
            }
            step(obs, "delete_records", () ->
                    get(admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(2))).lowWatermarks().get(tp))
                            .lowWatermark());
            step(obs, "earliest_after_delete", () ->
                    get(admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp)).offset());
            step(obs, "delete_records_beyond_end", () ->
                    get(admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(99))).lowWatermarks().get(tp))
                            .lowWatermark());
        }
        return obs;
    }

    static Map<String, Object> groups() throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        String topic = name("admin-groups");
        String group = topic + "-g";
        obs.put("topic", topic);
        TopicPartition tp0 = new TopicPartition(topic, 0);
        TopicPartition tp1 = new TopicPartition(topic, 1);
        try (Admin admin = admin()) {
            createTopic(admin, topic, 2);
            try (KafkaConsumer<String, String> member = consumer(group, props("client.id", "admin-groups-member"))) {
                member.subscribe(List.of(topic));
                long deadline = System.currentTimeMillis() + 20_000;
                while (member.assignment().isEmpty() && System.currentTimeMillis() < deadline) {
                    member.poll(Duration.ofMillis(100));
                }
                obs.put("joined", !member.assignment().isEmpty());
                member.commitSync(Map.of(tp0, new OffsetAndMetadata(0, "from-member")), Duration.ofSeconds(10));
                step(obs, "listed", () -> {
                    List<String> ids = new ArrayList<>();
                    for (ConsumerGroupListing listing : get(admin.listConsumerGroups().all())) ids.add(listing.groupId());
                    return ids.contains(group);
                });
                step(obs, "describe_active", () -> describeGroup(admin, group));
                step(obs, "alter_offsets_while_active", () -> {
                    get(admin.alterConsumerGroupOffsets(group, Map.of(tp0, new OffsetAndMetadata(1))).all());
                    return "ok";
                });
                step(obs, "delete_while_active", () -> {
                    get(admin.deleteConsumerGroups(List.of(group)).all());
                    return "ok";
                });
            }
            step(obs, "describe_empty", () -> describeGroup(admin, group));
            step(obs, "alter_offsets", () -> {
                get(admin.alterConsumerGroupOffsets(group, Map.of(
                        tp0, new OffsetAndMetadata(0, "altered"), tp1, new OffsetAndMetadata(0))).all());
                return "ok";
            });
            step(obs, "list_offsets", () -> groupOffsets(admin, group));
            step(obs, "delete_offsets", () -> {
                get(admin.deleteConsumerGroupOffsets(group, java.util.Set.of(tp1)).all());
                return groupOffsets(admin, group);
            });
            step(obs, "delete", () -> {
                get(admin.deleteConsumerGroups(List.of(group)).all());
                return "ok";
            });
            step(obs, "listed_after_delete", () -> {
                List<String> ids = new ArrayList<>();
                for (ConsumerGroupListing listing : get(admin.listConsumerGroups().all())) ids.add(listing.groupId());
                return ids.contains(group);
            });
            step(obs, "list_offsets_after_delete", () -> groupOffsets(admin, group));
            step(obs, "delete_unknown", () -> {
                get(admin.deleteConsumerGroups(List.of(group + "-never")).all());
                return "ok";
            });
        }
        return obs;
    }

    static Map<String, Object> groupOffsets(Admin admin, String group) throws Exception {
        Map<String, Object> out = new TreeMap<>();
        Map<TopicPartition, OffsetAndMetadata> offsets =
                get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
            OffsetAndMetadata o = e.getValue();
            out.put(e.getKey().toString(), o == null ? null : List.of(o.offset(), o.metadata()));
        }
        return out;
    }

    static Map<String, Object> describeGroup(Admin admin, String group) throws Exception {
        ConsumerGroupDescription d = get(admin.describeConsumerGroups(List.of(group)).all()).get(group);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("state", d.state().name());
        out.put("assignor", d.partitionAssignor());
        out.put("coordinator_set", d.coordinator() != null && d.coordinator().id() >= 0);
        List<Object> members = new ArrayList<>();
        for (MemberDescription m : d.members()) {
            Map<String, Object> member = new LinkedHashMap<>();
            member.put("client_id", m.clientId());
            member.put("assignment", partitionNumbers(m.assignment().topicPartitions()));
            members.add(member);
        }
        out.put("members", members);
        return out;
    }
}
