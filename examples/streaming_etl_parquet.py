"""Streaming ETL: JSON orders from Kafka, parsed and written to Parquet by Spark.

    python -m examples.streaming_etl_parquet [--bootstrap-server HOST:PORT]
"""

import json
import tempfile

from pyspark.sql import functions as F

from examples._support import broker_from_args, spark_session
from sluice_client import Client, NewTopic

with broker_from_args(__doc__) as bootstrap:
    # Some orders to process: three partitions, keyed by customer.
    with Client(bootstrap) as client:
        client.admin.create_topics({"orders": NewTopic(3, 1)})
        for p in range(3):
            client.producer.produce("orders", p, [
                (f"customer-{i % 7}".encode(),
                 json.dumps({"order": p * 1000 + i, "amount": (i * 37) % 500}).encode(), [], None)
                for i in range(300)])

    spark = spark_session("streaming-etl")
    orders = (spark.readStream.format("sluice")           # the only change from format("kafka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", "orders")
              .option("startingOffsets", "earliest")
              .load())
    schema = "order long, amount long"
    parsed = orders.select(F.from_json(F.col("value").cast("string"), schema).alias("o"),
                           "timestamp").select("o.*", "timestamp")
    out = tempfile.mkdtemp(prefix="orders-parquet-")
    query = (parsed.writeStream.format("parquet")
             .option("path", out + "/data").option("checkpointLocation", out + "/checkpoint")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    written = spark.read.parquet(out + "/data")
    print(f"wrote {written.count()} orders to {out}/data; total amount "
          f"{written.agg(F.sum('amount')).first()[0]}")
    spark.stop()
