"""Sluice's client over TLS and SASL (sluice_client.security), and what is built on it: the
Spark connector's kafka.security.protocol / kafka.ssl.* / kafka.sasl.* options and the
admin CLI's --command-config.

Against real Apache Kafka (bench/kafka_broker.py's KafkaBrokerProcess, KRaft, started
once for the module) with these listeners beside PLAINTEXT and the controller's:
- SSL, and MTLS (SSL with ssl.client.auth=required);
- SSL_OTHER_NAME: SSL with a certificate for another host name (hostname verification);
- SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, and SASL_PLAINTEXT with PLAIN and
  SCRAM-SHA-256 only.
Certificates come from trustme, given to Kafka as PEM files. PLAIN users are in the
listeners' JAAS configuration, SCRAM users are added when the storage is formatted
(`kafka-storage format --add-scram`), with a different password, so each mechanism
proves it used its own store. Without Java or Maven the Kafka tests are skipped.
"""

from __future__ import annotations

import asyncio
import pickle
import shutil
import time
import uuid

import pytest

from sluice_client import (AsyncClient, AuthenticationFailed, Client, ClientSecurity, ConnectionFailed,
                           NewTopic, ProtocolViolation, SecurityConfigError, TlsHandshakeFailed)
from sluice_client.security import ScramExchange

trustme = pytest.importorskip("trustme")
scramp = pytest.importorskip("scramp")
pytestmark = pytest.mark.timeout(300)

PLAIN_PASSWORD = "alice-plain-secret"
SCRAM_PASSWORD = "alice-scram-secret"
KEY_PASSWORD = "client-key-secret"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
LISTENERS = {"SSL": "SSL", "MTLS": "SSL", "SSL_OTHER_NAME": "SSL", "SASL_SSL": "SASL_SSL",
             "SASL_PLAINTEXT": "SASL_PLAINTEXT"}
MECHANISMS = {"SASL_SSL": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", "SASL_PLAINTEXT": "PLAIN,SCRAM-SHA-256"}
CONNECT_TIMEOUT = 5.0


# -- certificates and the broker --------------------------------------------------------------

def _pkcs8(leaf, password: bytes | None = None) -> bytes:
    """The leaf's private key as PKCS#8 PEM (Kafka's PEM keystores read no other form)."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
    encryption = (serialization.BestAvailableEncryption(password) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _chain(leaf) -> bytes:
    return b"".join(pem.bytes() for pem in leaf.cert_chain_pems)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("pki")
    ca, other_ca = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    misnamed = ca.issue_cert("broker.example")
    client = ca.issue_cert("client.example", common_name="client")
    files = {
        "ca": ca.cert_pem.bytes(), "other_ca": other_ca.cert_pem.bytes(),
        "server": _pkcs8(server) + _chain(server), "misnamed": _pkcs8(misnamed) + _chain(misnamed),
        "client_keystore": _pkcs8(client) + _chain(client), "client_cert": _chain(client),
        "client_key": _pkcs8(client, KEY_PASSWORD.encode()),
    }
    for name, data in files.items():
        (d / f"{name}.pem").write_bytes(data)
    return {name: str(d / f"{name}.pem") for name in files}


@pytest.fixture(scope="module")
def kafka(pki, tmp_path_factory):
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not on PATH: Apache Kafka cannot run")
    from bench.kafka_broker import KafkaBrokerProcess

    config = {"ssl.keystore.type": "PEM", "ssl.keystore.location": pki["server"],
              "ssl.truststore.type": "PEM", "ssl.truststore.location": pki["ca"],
              "listener.name.mtls.ssl.client.auth": "required",
              "listener.name.ssl_other_name.ssl.keystore.location": pki["misnamed"],
              "sasl.enabled.mechanisms": MECHANISMS["SASL_SSL"]}
    for listener, mechanisms in MECHANISMS.items():
        prefix = f"listener.name.{listener.lower()}"
        config[f"{prefix}.sasl.enabled.mechanisms"] = mechanisms
        config[f"{prefix}.plain.sasl.jaas.config"] = f'{PLAIN_MODULE} required user_alice="{PLAIN_PASSWORD}";'
        for mechanism in ("scram-sha-256", "scram-sha-512"):
            config[f"{prefix}.{mechanism}.sasl.jaas.config"] = f"{SCRAM_MODULE} required;"
    broker = KafkaBrokerProcess(str(tmp_path_factory.mktemp("kafka")), config=config,
                                listeners=LISTENERS)
    try:
        broker.format(extra_args=[arg for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512") for arg in (
            "--add-scram", f"{mechanism}=[name=alice,password={SCRAM_PASSWORD}]")])
        broker.start()
        yield broker
    finally:
        broker.stop()


def settings(pki, listener: str, mechanism: str | None = None, password: str | None = None,
             jaas: bool = False) -> dict[str, str]:
    """Client settings for one listener: SASL credentials as sasl.username/sasl.password
    (librdkafka's names) or, with `jaas`, as sasl.jaas.config (Java's)."""
    conf = {"security.protocol": LISTENERS[listener]}
    if "SSL" in conf["security.protocol"]:
        conf["ssl.ca.location"] = pki["ca"]
    if mechanism:
        if password is None:
            password = PLAIN_PASSWORD if mechanism == "PLAIN" else SCRAM_PASSWORD
        module = PLAIN_MODULE if mechanism == "PLAIN" else SCRAM_MODULE
        if jaas:
            conf.update({"sasl.mechanism": mechanism,
                         "sasl.jaas.config": f'{module} required username="alice" password="{password}";'})
        else:
            conf.update({"sasl.mechanisms": mechanism, "sasl.username": "alice", "sasl.password": password})
    return conf


def run(coroutine, timeout: float = 120.0):
    async def bounded():
        return await asyncio.wait_for(coroutine, timeout)

    return asyncio.run(bounded())


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


class CountingForwarder:
    """A loopback TCP forwarder to one broker address that counts the connections it
    accepts: how many times a client tried."""

    def __init__(self, upstream: str):
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.accepted = 0
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc_info) -> None:
        self.server.close()
        for writer in self._writers:
            writer.close()

    async def _serve(self, reader, writer) -> None:
        self.accepted += 1
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
        self._writers += [writer, upstream_writer]
        await asyncio.gather(self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer))

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()


# -- every protocol and mechanism, with real Kafka -----------------------------------------------

ROUND_TRIPS = [
    ("SSL", None, False, "ca"),
    ("MTLS", None, False, "keystore"),
    ("MTLS", None, False, "cert+encrypted key"),
    ("SASL_SSL", "PLAIN", True, ""),
    ("SASL_SSL", "SCRAM-SHA-256", False, ""),
    ("SASL_SSL", "SCRAM-SHA-512", True, ""),
    ("SASL_PLAINTEXT", "PLAIN", False, ""),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256", True, ""),
]


@pytest.mark.parametrize("listener, mechanism, jaas, tls", ROUND_TRIPS,
                         ids=[f"{l}-{m or t}-{'jaas' if j else 'username'}" for l, m, j, t in ROUND_TRIPS])
def test_metadata_create_produce_fetch(kafka, pki, listener, mechanism, jaas, tls):
    conf = settings(pki, listener, mechanism, jaas=jaas)
    if tls == "keystore":
        conf["ssl.keystore.location"] = pki["client_keystore"]
    elif tls == "cert+encrypted key":
        conf.update({"ssl.certificate.location": pki["client_cert"], "ssl.key.location": pki["client_key"],
                     "ssl.key.password": KEY_PASSWORD})
    port = kafka.listener_ports[listener]
    topic = unique(f"secure-{listener.lower()}")
    # Bootstrap by name: Kafka advertises 127.0.0.1, so produce and fetch go over a second,
    # discovered connection, which must be secured the same way.
    with Client(f"localhost:{port}", security=ClientSecurity(conf), connect_timeout=CONNECT_TIMEOUT,
                request_timeout=30) as client:
        metadata = client.metadata()
        assert [(b.host, b.port) for b in metadata.brokers.values()] == [("127.0.0.1", port)]
        created = client.admin.create_topics({topic: NewTopic(2, 1)})
        assert created[topic].error is None, created
        written = client.producer.produce(topic, 1, [(b"k", f"over {listener}".encode())])
        fetched = client.consumer.fetch_records(topic, 1, written.base_offset)
        assert [(r.key, r.value) for r in fetched.records] == [(b"k", f"over {listener}".encode())]


def refused_once(upstream: str, security: ClientSecurity, error_type) -> tuple[Exception, float]:
    """A metadata call refused with `error_type` through a counting forwarder, by a client
    that would retry 5 times 2 s apart: the error and the call's duration, after checking
    that the client connected once."""
    async def attempt():
        forwarder = CountingForwarder(upstream)
        async with forwarder as address:
            async with AsyncClient(address, security=security, connect_timeout=CONNECT_TIMEOUT,
                                   retries=5, retry_backoff=2.0, retry_timeout=30) as client:
                started = time.monotonic()
                with pytest.raises(error_type) as caught:
                    await client.metadata()
                return caught.value, time.monotonic() - started, forwarder.accepted

    error, elapsed, connections = run(attempt())
    assert connections == 1, f"{connections} connections: retried after {error!r}"
    assert elapsed < CONNECT_TIMEOUT, elapsed
    return error, elapsed


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_fails_once_without_retries(kafka, pki, mechanism):
    wrong = "not-the-password-" + uuid.uuid4().hex[:6]
    security = ClientSecurity(settings(pki, "SASL_SSL", mechanism, password=wrong, jaas=True))
    assert wrong not in repr(security)
    error, _ = refused_once(kafka.bootstrap("SASL_SSL"), security, AuthenticationFailed)
    assert error.error_code == 58  # SASL_AUTHENTICATION_FAILED, with Kafka's own message
    assert "SASL_AUTHENTICATION_FAILED: Authentication failed" in str(error)
    assert wrong not in str(error)


def test_mechanism_the_listener_does_not_enable(kafka, pki):
    security = ClientSecurity(settings(pki, "SASL_PLAINTEXT", "SCRAM-SHA-512"))
    with Client(kafka.bootstrap("SASL_PLAINTEXT"), security=security, retries=5) as client:
        with pytest.raises(AuthenticationFailed) as caught:
            client.metadata()
    assert "does not enable SASL mechanism SCRAM-SHA-512; it enables PLAIN, SCRAM-SHA-256" in str(caught.value)


def test_plaintext_client_on_a_tls_port_fails_cleanly(kafka):
    started = time.monotonic()
    with Client(kafka.bootstrap("SSL"), connect_timeout=CONNECT_TIMEOUT, retries=5) as client:
        with pytest.raises(ProtocolViolation) as caught:
            client.metadata()
    assert "answered with TLS" in str(caught.value) and "security.protocol" in str(caught.value)
    assert time.monotonic() - started < CONNECT_TIMEOUT


def test_tls_client_on_a_plaintext_port_fails_cleanly(kafka, pki):
    security = ClientSecurity({"security.protocol": "SSL", "ssl.ca.location": pki["ca"]})
    started = time.monotonic()
    with Client(kafka.bootstrap_servers, security=security, connect_timeout=CONNECT_TIMEOUT,
                retries=2, retry_backoff=0.1) as client:
        with pytest.raises(ConnectionFailed) as caught:
            client.metadata()
    assert "TLS handshake" in str(caught.value)
    assert time.monotonic() - started < CONNECT_TIMEOUT


def test_client_trusting_another_ca_fails_with_a_certificate_error(kafka, pki):
    security = ClientSecurity({"security.protocol": "SSL", "ssl.truststore.location": pki["other_ca"],
                               "ssl.truststore.type": "PEM"})
    error, _ = refused_once(kafka.bootstrap("SSL"), security, TlsHandshakeFailed)
    assert "certificate is not accepted" in str(error)


def test_hostname_verification_and_turning_it_off(kafka, pki):
    """SSL_OTHER_NAME's certificate names broker.example, not 127.0.0.1."""
    conf = {"security.protocol": "SSL", "ssl.ca.location": pki["ca"]}
    with Client(kafka.bootstrap("SSL_OTHER_NAME"), security=ClientSecurity(conf), retries=0) as client:
        with pytest.raises(TlsHandshakeFailed) as caught:
            client.metadata()
    assert "127.0.0.1" in str(caught.value) and "mismatch" in str(caught.value).lower()
    for off in ("", "none"):
        unchecked = ClientSecurity({**conf, "ssl.endpoint.identification.algorithm": off})
        with Client(kafka.bootstrap("SSL_OTHER_NAME"), security=unchecked) as client:
            assert client.metadata().brokers


def test_client_without_a_certificate_on_the_client_auth_listener(kafka, pki):
    security = ClientSecurity({"security.protocol": "SSL", "ssl.ca.location": pki["ca"]})
    error, _ = refused_once(kafka.bootstrap("MTLS"), security, TlsHandshakeFailed)
    assert "client's certificate" in str(error)


# -- the CLI ----------------------------------------------------------------------------------

def test_cli_topics_with_command_config(kafka, pki, tmp_path, capsys):
    from sluice.cli import main

    config = tmp_path / "client.properties"
    config.write_text("# as for kafka-topics.sh --command-config\n"
                      "security.protocol=SASL_SSL\n"
                      "sasl.mechanism=SCRAM-SHA-512\n"
                      f"sasl.jaas.config={SCRAM_MODULE} required \\\n"
                      '    username="alice" \\\n'
                      f'    password="{SCRAM_PASSWORD}";\n'
                      f"ssl.truststore.type=PEM\nssl.truststore.location={pki['ca']}\n"
                      "request.timeout.ms=5000\n")
    topic = unique("cli")
    bootstrap = kafka.bootstrap("SASL_SSL")
    assert main(["topics", "--bootstrap-server", bootstrap, "--command-config", str(config),
                 "create", topic, "--partitions", "3"]) == 0
    assert main(["topics", "list", "--bootstrap-server", bootstrap, "--command-config", str(config),
                 "--output", "json"]) == 0
    out, err = capsys.readouterr()
    assert topic in out
    assert "ignoring request.timeout.ms" in err and SCRAM_PASSWORD not in err

    wrong = tmp_path / "wrong.properties"
    wrong.write_text(config.read_text().replace(SCRAM_PASSWORD, "guessed-password"))
    assert main(["topics", "list", "--bootstrap-server", bootstrap, "--command-config", str(wrong)]) == 1
    _, err = capsys.readouterr()
    assert "SASL_AUTHENTICATION_FAILED" in err and "guessed-password" not in err

    assert main(["topics", "list", "--bootstrap-server", bootstrap]) == 1  # no settings: plaintext
    _, err = capsys.readouterr()
    assert "answered with TLS" in err


# -- the Spark connector -------------------------------------------------------------------------

SPARK_SECURITY = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-256",
                  "kafka.sasl.jaas.config": f'{SCRAM_MODULE} required username="alice" '
                                            f'password="{SCRAM_PASSWORD}";'}


def test_spark_options_build_the_clients_security(pki):
    pytest.importorskip("pyspark")
    from pyspark.sql.types import StringType, StructField, StructType

    from spark_connector.options import SluiceOptionError, parse_sink_options, parse_source_options

    options = {**SPARK_SECURITY, "kafka.ssl.truststore.location": pki["ca"], "kafka.ssl.truststore.type": "PEM"}
    expected = ClientSecurity({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                               "sasl.jaas.config": SPARK_SECURITY["kafka.sasl.jaas.config"],
                               "ssl.truststore.location": pki["ca"], "ssl.truststore.type": "PEM"})
    source = parse_source_options({"kafka.bootstrap.servers": "h:9093", "subscribe": "t", **options}, True)
    assert source.client["security"] == expected and not source.warnings
    schema = StructType([StructField("value", StringType())])
    sink = parse_sink_options({"kafka.bootstrap.servers": "h:9093", "topic": "t", **options}, schema)
    assert dict(sink.client)["security"] == expected and not sink.warnings
    shipped = pickle.loads(pickle.dumps(source))  # as Spark ships options to tasks
    assert shipped.client["security"] == expected and shipped.client["security"].ssl_context is not None
    assert SCRAM_PASSWORD not in repr(source) + repr(sink)
    assert "security" not in parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"},
                                                  True).client

    for bad, option in [
        ({"kafka.sasl.jaas.config": SPARK_SECURITY["kafka.sasl.jaas.config"].replace(SCRAM_MODULE, "x.Login")},
         "kafka.sasl.jaas.config"),
        ({"kafka.sasl.jaas.config": SPARK_SECURITY["kafka.sasl.jaas.config"].rstrip(";")},
         "kafka.sasl.jaas.config"),
        ({"kafka.ssl.keystore.type": "PKCS12"}, "kafka.ssl.keystore.type"),
        ({"kafka.ssl.truststore.password": SCRAM_PASSWORD}, "kafka.ssl.truststore.password"),
        ({"kafka.sasl.mechanism": "GSSAPI"}, "kafka.sasl.mechanism"),
    ]:
        with pytest.raises(SluiceOptionError) as caught:
            parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **options, **bad}, True)
        assert f"option '{option}'" in str(caught.value) and SCRAM_PASSWORD not in str(caught.value)


def test_spark_sink_and_source_over_sasl_ssl(kafka, pki, spark):
    topic = unique("spark-secure")
    options = {**SPARK_SECURITY, "kafka.ssl.ca.location": pki["ca"],
               "kafka.bootstrap.servers": kafka.bootstrap("SASL_SSL")}
    with Client(kafka.bootstrap("SASL_SSL"), security=ClientSecurity(
            {k[len("kafka."):]: v for k, v in options.items() if k != "kafka.bootstrap.servers"})) as client:
        client.admin.create_topics({topic: NewTopic(2, 1)})
    rows = [(f"k{i}", f"v{i}") for i in range(20)]
    writer = spark.createDataFrame(rows, "key string, value string").write.mode("append").format("sluice")
    for name, value in {**options, "topic": topic}.items():
        writer = writer.option(name, value)
    writer.save()
    reader = spark.read.format("sluice").option("subscribe", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    read = reader.load().selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v").collect()
    assert sorted((r.k, r.v) for r in read) == sorted(rows)


# -- ClientSecurity on its own -------------------------------------------------------------------

SECRET = "s3cr3t-Value"

BAD_SETTINGS = [
    ({"security.protocol": "TLS"}, "security.protocol"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism"),
    ({"security.protocol": "SASL_SSL"}, "sasl.mechanism"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u"}, "sasl.username"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.mechanisms": "SCRAM-SHA-256"},
     "sasl.mechanism"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'com.example.Login required username="u" password="{SECRET}";'}, "sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'{PLAIN_MODULE} required username="u" password="{SECRET}"'}, "sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'{PLAIN_MODULE} required username="u" password="{SECRET};'}, "sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'{PLAIN_MODULE} required password="{SECRET}";'}, "sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
      "sasl.jaas.config": f'{SCRAM_MODULE} required username="u" password="{SECRET}" tokenauth="true";'},
     "sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u",
      "sasl.password": SECRET, "sasl.jaas.config": f'{PLAIN_MODULE} required username="u" password="x";'},
     "sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u",
      "sasl.password": SECRET + "\u0007"}, "sasl.password"),  # a control character: not SASLprep
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u",
      "sasl.password": SECRET, "sasl.kerberos.service.name": "kafka"}, "sasl.kerberos.service.name"),
    ({"sasl.username": "u", "sasl.password": SECRET}, "sasl.password"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u",
      "sasl.password": SECRET, "ssl.ca.location": "/ca.pem"}, "ssl.ca.location"),
    ({"security.protocol": "SSL", "ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
    ({"security.protocol": "SSL", "ssl.truststore.type": "PKCS12"}, "ssl.truststore.type"),
    ({"security.protocol": "SSL", "ssl.keystore.password": SECRET}, "ssl.keystore.password"),
    ({"security.protocol": "SSL", "ssl.key.password": SECRET}, "ssl.key.password"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"},
     "ssl.endpoint.identification.algorithm"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"}, "ssl.ca.location"),
    ({"security.protocol": "SSL", "ssl.cipher.suites": "x"}, "ssl.cipher.suites"),
]


@pytest.mark.parametrize("conf, key", BAD_SETTINGS,
                         ids=[f"{key}-{i}" for i, (_, key) in enumerate(BAD_SETTINGS)])
def test_bad_settings_name_the_key_and_never_the_secret(conf, key):
    with pytest.raises(SecurityConfigError) as caught:
        ClientSecurity(conf)
    assert caught.value.key == key and key in str(caught.value)
    assert SECRET not in str(caught.value)


def test_key_files_wrong_password_missing_password_and_no_terminal_prompt(pki):
    base = {"security.protocol": "SSL", "ssl.ca.location": pki["ca"],
            "ssl.certificate.location": pki["client_cert"], "ssl.key.location": pki["client_key"]}
    for extra, said in [({}, "set ssl.key.password"),
                        ({"ssl.key.password": SECRET}, "wrong ssl.key.password")]:
        with pytest.raises(SecurityConfigError) as caught:
            ClientSecurity({**base, **extra})
        assert said in str(caught.value) and SECRET not in str(caught.value)
    with pytest.raises(SecurityConfigError) as caught:
        ClientSecurity({"security.protocol": "SSL", "ssl.truststore.location": pki["client_key"]})
    assert "holds no PEM certificate" in str(caught.value)


def test_jaas_quoting_repr_and_pickling(pki):
    password = 'pa ss"word;=x'
    security = ClientSecurity({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "scram-sha-512", "ssl.ca.location": pki["ca"],
        "sasl.jaas.config": f'{SCRAM_MODULE}  required\n username="alice"  password="pa ss\\"word;=x" ;',
        "ssl.endpoint.identification.algorithm": "", "unrelated.setting": "ignored"})
    assert (security.mechanism, security.username, security._password) == ("SCRAM-SHA-512", "alice", password)
    text = repr(security)
    assert text == f"ClientSecurity(SASL_SSL, SCRAM-SHA-512 as 'alice', CA {pki['ca']}, no hostname check)"
    assert "pa ss" not in text
    copy = pickle.loads(pickle.dumps(security))
    assert copy == security and hash(copy) == hash(security) and copy.ssl_context is not security.ssl_context
    assert not copy.ssl_context.check_hostname


def test_plain_token():
    security = ClientSecurity({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                               "sasl.username": "alice", "sasl.password": " with blanks "})
    exchange = security.sasl_exchange()
    assert exchange.start() == b"\0alice\0 with blanks "
    assert exchange.step(b"") is None
    with pytest.raises(AuthenticationFailed):
        exchange.step(b"")


def test_scramp_is_imported_by_a_scram_login_only():
    """Every Python worker of a Spark query imports the client; scramp (with asn1crypto)
    was a tenth of that import's time, and only SCRAM logins need it."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", (
        "import sys; import spark_connector.sink, spark_connector.source; "
        "print('scramp' in sys.modules); "
        "from sluice_client.security import ScramExchange; ScramExchange('SCRAM-SHA-256', 'alice', 'pw'); "
        "print('scramp' in sys.modules)")], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "True"], done.stderr


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_against_scramps_server_and_a_forged_server_signature(mechanism):
    """The client side against scramp's real server: the exchange completes; a server
    that checks the client's proof but signs with another key is refused."""
    server_mechanism = scramp.ScramMechanism(mechanism)
    salt, stored_key, server_key, iterations = server_mechanism.make_auth_info(SECRET, iteration_count=4096)
    *_, other_server_key, _ = server_mechanism.make_auth_info("another password", salt=salt,
                                                               iteration_count=4096)
    users = []
    for key, accepted in ((server_key, True), (other_server_key, False)):
        server = server_mechanism.make_server(
            lambda user, key=key: users.append(user) or (salt, stored_key, key, iterations))
        exchange = ScramExchange(mechanism, "al=i,ce", SECRET)
        server.set_client_first(exchange.start().decode())
        client_final = exchange.step(server.get_server_first().encode())
        server.set_client_final(client_final.decode())  # the proof checks out either way
        server_final = server.get_server_final().encode()
        if accepted:
            assert exchange.step(server_final) is None
        else:
            with pytest.raises(AuthenticationFailed) as caught:
                exchange.step(server_final)
            assert "server signature" in str(caught.value) and SECRET not in str(caught.value)
    assert users == ["al=i,ce", "al=i,ce"]  # escaped on the wire (n=al=3Di=2Cce), as RFC 5802 says
    with pytest.raises(AuthenticationFailed):
        exchange = ScramExchange(mechanism, "alice", SECRET)
        exchange.start()
        exchange.step(b"r=not-our-nonce,s=c2FsdA==,i=4096")
