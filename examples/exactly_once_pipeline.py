"""Kafka -> Spark -> Kafka, exactly once: large orders copied to their own topic.

The sink writes each micro-batch inside Kafka transactions that the driver commits
(see docs/exactly-once-sink.md); a read_committed consumer never sees a partial batch
or a duplicate, even across crashes and restarts of the query.

    python -m examples.exactly_once_pipeline [--bootstrap-server HOST:PORT]
"""

import json
import tempfile

from pyspark.sql import functions as F

from examples._support import broker_from_args, spark_session
from sluice_client import Client, NewTopic

with broker_from_args(__doc__) as bootstrap:
    with Client(bootstrap) as client:
        client.admin.create_topics({"orders": NewTopic(2, 1), "large-orders": NewTopic(2, 1)})
        for p in range(2):
            client.producer.produce("orders", p, [(None, json.dumps({"order": i, "amount": i % 1000}).encode(),
                                          [], None) for i in range(p, 2000, 2)])

    spark = spark_session("exactly-once")
    orders = (spark.readStream.format("sluice").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", "orders").option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "500").load())
    amount = F.get_json_object(F.col("value").cast("string"), "$.amount").cast("long")
    query = (orders.where(amount >= 900).select("key", "value")
             .writeStream.format("sluice")                  # exactly_once is the default
             .option("kafka.bootstrap.servers", bootstrap)
             .option("topic", "large-orders")
             .option("checkpointLocation", tempfile.mkdtemp(prefix="eos-checkpoint-"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    copied = (spark.read.format("sluice").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", "large-orders").load())   # read_committed by default
    print(f"{copied.count()} large orders copied in {len(query.recentProgress)} micro-batches "
          f"(expected {sum(1 for i in range(2000) if i % 1000 >= 900)})")
    spark.stop()
