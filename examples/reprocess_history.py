"""Reprocessing history: a consumer group's offsets are one integer per partition.

A streaming query records its progress in the consumer group given by kafka.group.id.
To reprocess, reset the group with `sluice groups reset-offsets` (here: to a point in
time) and run a batch job with startingOffsets=group.

    python -m examples.reprocess_history [--bootstrap-server HOST:PORT]
"""

import subprocess
import sys
import tempfile
import time

from examples._support import broker_from_args, spark_session
from sluice_client import Client, NewTopic

with broker_from_args(__doc__) as bootstrap:
    now = int(time.time() * 1000)
    with Client(bootstrap) as client:
        client.admin.create_topics({"clicks": NewTopic(2, 1)})
        for p in range(2):  # an hour of clicks, one a minute, oldest first
            client.producer.produce("clicks", p, [(None, b"click-%d" % m, [], now - (60 - m) * 60_000)
                                         for m in range(60)])

    spark = spark_session("reprocess")
    source = (spark.readStream.format("sluice").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", "clicks").option("startingOffsets", "earliest")
              .option("kafka.group.id", "click-report").load())
    query = (source.writeStream.format("noop")
             .option("checkpointLocation", tempfile.mkdtemp(prefix="clicks-checkpoint-"))
             .trigger(availableNow=True).start())
    query.awaitTermination()

    def sluice(*args):
        return subprocess.run([sys.executable, "-m", "sluice.cli", *args], check=True,
                              capture_output=True, text=True, timeout=60).stdout

    print(sluice("groups", "--bootstrap-server", bootstrap, "describe", "click-report"))
    # Go back 15 minutes: the group's offsets move to the first click at or after then.
    print(sluice("groups", "--bootstrap-server", bootstrap, "reset-offsets", "--group",
                 "click-report", "--topic", "clicks", "--by-duration", "PT15M", "--execute"))
    again = (spark.read.format("sluice").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", "clicks").option("startingOffsets", "group")
             .option("kafka.group.id", "click-report").load())
    print(f"reprocessed {again.count()} clicks from the last 15 minutes")
    spark.stop()
