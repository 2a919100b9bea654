"""Topics that Sluice's clients own and brokers report as internal in Metadata.

Kafka's consumers leave topics Metadata calls internal out of pattern subscriptions
(`exclude.internal.topics`, on by default), as they leave out `__consumer_offsets`; Spark's
Kafka source subscribes by pattern through such a consumer. Unlike the broker's own
internal topics, these are created and written by clients like any topic.
"""

SINK_INTENTS_TOPIC = "__sluice_sink_intents"  # the exactly-once Spark sink's decisions (spark_connector.sink)
CLIENT_INTERNAL_TOPICS = frozenset({SINK_INTENTS_TOPIC})
