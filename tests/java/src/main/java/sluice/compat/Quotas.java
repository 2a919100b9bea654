package sluice.compat;

import static sluice.compat.AdminScenarios.get;
import static sluice.compat.CompatSuite.*;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterClientQuotasOptions;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;

/** Client quotas (issue 37): the AdminClient's alterClientQuotas and describeClientQuotas, and
 * the producer's and consumer's throttle-time metrics once the broker throttles them. */
final class Quotas {
    private Quotas() {}

    static final long THROTTLED_RUN_MS = 3_000;
    static final int VALUE_BYTES = 10_240;

    /** {user, client-id} with null for the default, as one sorted "type=name" string. */
    static String entity(Map<String, String> names) {
        List<String> parts = new ArrayList<>();
        new TreeMap<>(names).forEach((type, name) -> parts.add(type + "=" + (name == null ? "<default>" : name)));
        return String.join(",", parts);
    }

    static ClientQuotaEntity entityOf(String... typesAndNames) {
        Map<String, String> names = new HashMap<>();
        for (int i = 0; i + 1 < typesAndNames.length; i += 2) names.put(typesAndNames[i], typesAndNames[i + 1]);
        return new ClientQuotaEntity(names);
    }

    static ClientQuotaAlteration alteration(ClientQuotaEntity entity, String key, Double value) {
        return new ClientQuotaAlteration(entity, List.of(new ClientQuotaAlteration.Op(key, value)));
    }

    static Map<String, Object> described(Admin admin, ClientQuotaFilter filter) throws Exception {
        Map<String, Object> out = new TreeMap<>();
        get(admin.describeClientQuotas(filter).entities())
                .forEach((entity, quotas) -> out.put(entity(entity.entries()), new TreeMap<>(quotas)));
        return out;
    }

    static Map<String, Object> administration() throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        String user = name("quota-user");
        String client = name("quota-client");
        ClientQuotaEntity byUser = entityOf(ClientQuotaEntity.USER, user);
        ClientQuotaEntity byUserAndClient = entityOf(ClientQuotaEntity.USER, user, ClientQuotaEntity.CLIENT_ID, client);
        ClientQuotaEntity byUserAnyClient = entityOf(ClientQuotaEntity.USER, user, ClientQuotaEntity.CLIENT_ID, null);
        ClientQuotaFilter ofUser = ClientQuotaFilter.contains(
                List.of(ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.USER, user)));
        obs.put("user", user);
        obs.put("client", client);
        try (Admin admin = admin()) {
            step(obs, "alter", () -> {
                get(admin.alterClientQuotas(List.of(
                        new ClientQuotaAlteration(byUser, List.of(
                                new ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0),
                                new ClientQuotaAlteration.Op("consumer_byte_rate", 2097152.0))),
                        alteration(byUserAndClient, "request_percentage", 50.5),
                        alteration(byUserAnyClient, "controller_mutation_rate", 10.0))).all());
                return "ok";
            });
            step(obs, "describe_user", () -> described(admin, ofUser));
            step(obs, "describe_user_only", () -> described(admin, ClientQuotaFilter.containsOnly(
                    List.of(ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.USER, user)))));
            step(obs, "describe_user_default_client", () -> described(admin, ClientQuotaFilter.containsOnly(List.of(
                    ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.USER, user),
                    ClientQuotaFilterComponent.ofDefaultEntity(ClientQuotaEntity.CLIENT_ID)))));
            step(obs, "validate_only", () -> {
                ClientQuotaEntity other = entityOf(ClientQuotaEntity.USER, user + "-validated");
                get(admin.alterClientQuotas(List.of(alteration(other, "producer_byte_rate", 1000.0)),
                        new AlterClientQuotasOptions().validateOnly(true)).all());
                return described(admin, ClientQuotaFilter.contains(
                        List.of(ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.USER, user + "-validated"))));
            });
            step(obs, "unknown_key", () -> {
                get(admin.alterClientQuotas(List.of(alteration(byUser, "no_such_quota", 1.0))).all());
                return "ok";
            });
            step(obs, "negative_rate", () -> {
                get(admin.alterClientQuotas(List.of(alteration(byUser, "producer_byte_rate", -1.0))).all());
                return "ok";
            });
            step(obs, "remove", () -> {
                get(admin.alterClientQuotas(List.of(
                        new ClientQuotaAlteration(byUser, List.of(
                                new ClientQuotaAlteration.Op("producer_byte_rate", null),
                                new ClientQuotaAlteration.Op("consumer_byte_rate", null))),
                        alteration(byUserAndClient, "request_percentage", null),
                        alteration(byUserAnyClient, "controller_mutation_rate", null))).all());
                return described(admin, ofUser);
            });
        }
        return obs;
    }

    /** A client-wide metric (not a node's or a topic's) by group and name, rounded (throttle
     * times in ms, counts); -1 while it has no value, -2 if the client has no such metric. */
    static long metric(Map<MetricName, ? extends Metric> metrics, String group, String name) {
        for (Map.Entry<MetricName, ? extends Metric> entry : metrics.entrySet()) {
            MetricName key = entry.getKey();
            if (key.group().equals(group) && key.name().equals(name) && Set.of("client-id").containsAll(key.tags().keySet())) {
                Object value = entry.getValue().metricValue();
                return value instanceof Double d && !d.isNaN() ? Math.round(d) : -1;
            }
        }
        return -2;
    }

    /** A producer and a consumer each limited to 10 KiB/s by their client id's quota, flat out
     * for THROTTLED_RUN_MS: what they sent or read, their throttle-time metrics and the
     * connections they made after their first request (none: no reconnection). */
    static Map<String, Object> throttle() throws Exception {
        Map<String, Object> obs = new LinkedHashMap<>();
        String topic = name("quota-throttle");
        String producerId = name("quota-producer");
        String consumerId = name("quota-consumer");
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            get(admin.alterClientQuotas(List.of(
                    alteration(entityOf(ClientQuotaEntity.CLIENT_ID, producerId), "producer_byte_rate", 10240.0),
                    alteration(entityOf(ClientQuotaEntity.CLIENT_ID, consumerId), "consumer_byte_rate", 10240.0)))
                    .all());
        }
        String value = "v".repeat(VALUE_BYTES);
        try (KafkaProducer<String, String> producer = producer(props(
                ProducerConfig.CLIENT_ID_CONFIG, producerId, ProducerConfig.ACKS_CONFIG, "1"))) {
            producer.send(new ProducerRecord<>(topic, value)).get();
            long connections = metric(producer.metrics(), "producer-metrics", "connection-creation-total");
            long deadline = System.currentTimeMillis() + THROTTLED_RUN_MS;
            int sent = 1;
            while (System.currentTimeMillis() < deadline) {
                producer.send(new ProducerRecord<>(topic, value)).get();
                sent++;
            }
            obs.put("produced", sent);
            obs.put("produce_throttle_time_avg", metric(producer.metrics(), "producer-metrics", "produce-throttle-time-avg"));
            obs.put("produce_throttle_time_max", metric(producer.metrics(), "producer-metrics", "produce-throttle-time-max"));
            obs.put("producer_reconnections",
                    metric(producer.metrics(), "producer-metrics", "connection-creation-total") - connections);
        }
        try (KafkaConsumer<String, String> consumer = consumer(null, props("client.id", consumerId))) {
            TopicPartition partition = new TopicPartition(topic, 0);
            consumer.assign(List.of(partition));
            consumer.seekToBeginning(List.of(partition));
            int read = consumer.poll(Duration.ofSeconds(10)).count();
            long connections = metric(consumer.metrics(), "consumer-metrics", "connection-creation-total");
            long deadline = System.currentTimeMillis() + THROTTLED_RUN_MS;
            while (System.currentTimeMillis() < deadline) {
                read += consumer.poll(Duration.ofMillis(200)).count();
            }
            obs.put("consumed", read);
            obs.put("fetch_throttle_time_avg",
                    metric(consumer.metrics(), "consumer-fetch-manager-metrics", "fetch-throttle-time-avg"));
            obs.put("fetch_throttle_time_max",
                    metric(consumer.metrics(), "consumer-fetch-manager-metrics", "fetch-throttle-time-max"));
            obs.put("consumer_reconnections",
                    metric(consumer.metrics(), "consumer-metrics", "connection-creation-total") - connections);
        }
        return obs;
    }
}
