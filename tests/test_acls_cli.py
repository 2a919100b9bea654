"""The client's ACL and SCRAM-credential APIs and the `sluice acls` / `sluice users`
commands, against real Apache Kafka (KRaft, one combined node, started once for the module)
with Kafka's StandardAuthorizer: PLAINTEXT, whose User:ANONYMOUS is a super user so the tests
administer it without SASL, and a SASL_PLAINTEXT listener with SCRAM-SHA-256/512, where a
confluent-kafka client logs in as a user `sluice users add` made and sees what
`sluice acls add` let it see.

`sluice users` also runs against a Sluice broker, which keeps credentials in its data dir.

Kafka applies ACLs asynchronously (the controller commits, the broker's authorizer follows),
so reads after writes poll, bounded. A Maven or Java failure fails these tests.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import sys
import termios
import time
import uuid

import pytest

from bench.kafka_broker import KafkaBrokerProcess
from tests.support.polling import wait_for
from wire.acl_types import Operation, PatternType, Permission, ResourceType
from sluice_client import Client, NewTopic
from sluice_client.model import (AclBinding, AclBindingFilter, ScramDeletion, ScramMechanism,
                                 ScramUpsertion)
from wire.error_codes import ErrorCode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI_TIMEOUT = 60
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


@pytest.fixture(scope="module")
def kafka():
    process = KafkaBrokerProcess(config={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    }, listeners={"SASL_PLAINTEXT": "SASL_PLAINTEXT"})
    with process:
        yield process


@pytest.fixture(scope="module")
def client(kafka):
    with Client(kafka.bootstrap_servers, call_timeout=60) as c:
        yield c


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def acl(kind, name, principal, op, permission=Permission.ALLOW, pattern=PatternType.LITERAL,
        host="*") -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, op, permission)


def described(client, acl_filter: AclBindingFilter, expected: set) -> set:
    """The ACLs the filter selects, once they are `expected` (Kafka's authorizer catches up
    with the controller after CreateAcls and DeleteAcls have answered)."""
    found = set()

    def settled():
        nonlocal found
        found = set(client.admin.describe_acls(acl_filter))
        return found == expected

    wait_for(settled, 15, f"ACLs {expected} (last seen: {found})")
    return found


# -- the client's ACL API -----------------------------------------------------------------

def test_client_creates_describes_and_deletes_acls(client):
    topic, prefix, alice, mallory = unique("orders"), unique("pay"), unique("User:alice"), unique("User:mallory")
    literal = acl(ResourceType.TOPIC, topic, alice, Operation.READ)
    described_too = acl(ResourceType.TOPIC, topic, alice, Operation.DESCRIBE)
    prefixed_deny = acl(ResourceType.TOPIC, prefix, mallory, Operation.WRITE, Permission.DENY,
                        PatternType.PREFIXED, host="10.0.0.9")
    group = acl(ResourceType.GROUP, unique("readers"), alice, Operation.READ)
    cluster = acl(ResourceType.CLUSTER, "kafka-cluster", mallory, Operation.IDEMPOTENT_WRITE)
    created = client.admin.create_acls([literal, described_too, prefixed_deny, group, cluster])
    assert created == dict.fromkeys([literal, described_too, prefixed_deny, group, cluster])

    mine = {literal, described_too, group}
    assert described(client, AclBindingFilter(principal=alice), mine) == mine
    assert described(client, AclBindingFilter(ResourceType.TOPIC, topic, PatternType.LITERAL),
                     {literal, described_too})
    assert described(client, AclBindingFilter(ResourceType.TOPIC, prefix, PatternType.ANY),
                     {prefixed_deny})
    # MATCH: every ACL that applies to a name, here the prefixed one.
    assert described(client, AclBindingFilter(ResourceType.TOPIC, prefix + "-eu", PatternType.MATCH),
                     {prefixed_deny})
    assert described(client, AclBindingFilter(ResourceType.TOPIC, prefix + "-eu", PatternType.LITERAL),
                     set()) == set()
    assert described(client, AclBindingFilter(principal=alice, operation=Operation.DESCRIBE),
                     {described_too})
    assert described(client, AclBindingFilter(permission=Permission.DENY, principal=mallory),
                     {prefixed_deny})
    everything = set(client.admin.describe_acls())
    assert {literal, described_too, prefixed_deny, group, cluster} <= everything

    # An exact filter deletes one ACL; a principal's filter the rest of its ACLs.
    deleted = client.admin.delete_acls([literal.to_filter(), AclBindingFilter(principal=mallory)])
    assert deleted[literal.to_filter()].error is None
    assert [(m.binding, m.error) for m in deleted[literal.to_filter()].matches] == [(literal, None)]
    assert {m.binding for m in deleted[AclBindingFilter(principal=mallory)].matches} == \
        {prefixed_deny, cluster}
    assert described(client, AclBindingFilter(principal=alice), {described_too, group})
    again = client.admin.delete_acls([literal.to_filter()])[literal.to_filter()]
    assert again.error is None and again.matches == ()
    client.admin.delete_acls([AclBindingFilter(principal=alice)])
    assert described(client, AclBindingFilter(principal=alice), set()) == set()


def test_client_acl_errors_come_back_per_binding(client):
    good = acl(ResourceType.TOPIC, unique("t"), "User:bob", Operation.READ)
    no_colon = acl(ResourceType.TOPIC, unique("t"), "bob", Operation.READ)
    bad_cluster = acl(ResourceType.CLUSTER, "my-cluster", "User:bob", Operation.ALTER)
    results = client.admin.create_acls([good, no_colon, bad_cluster])
    assert results[good] is None
    assert results[no_colon].code == ErrorCode.INVALID_REQUEST
    assert "Could not parse principal" in results[no_colon].message
    assert results[bad_cluster].code == ErrorCode.INVALID_REQUEST
    assert "kafka-cluster" in results[bad_cluster].message
    # Indefinite values would make Kafka fail the whole request: refused before sending.
    with pytest.raises(ValueError, match="Match is not a definite PatternType"):
        client.admin.create_acls([acl(ResourceType.TOPIC, "t", "User:bob", Operation.READ,
                                pattern=PatternType.MATCH)])
    with pytest.raises(ValueError, match="Any is not a definite Operation"):
        client.admin.create_acls([acl(ResourceType.TOPIC, "t", "User:bob", Operation.ANY)])
    with pytest.raises(ValueError, match="UNKNOWN PatternType"):
        client.admin.describe_acls(AclBindingFilter(pattern_type=PatternType.UNKNOWN))
    client.admin.delete_acls([good.to_filter()])


# -- the client's SCRAM API ---------------------------------------------------------------

def test_client_scram_credentials(client):
    alice, bob, nobody = unique("alice"), unique("bob"), unique("nobody")
    upsert = ScramUpsertion(alice, SHA256, "alice-secret", 8192)
    assert "alice-secret" not in repr(upsert) and "alice-secret" not in str(upsert)
    results = client.admin.alter_user_scram_credentials([
        upsert, ScramUpsertion(alice, SHA512, "alice-secret-512"),
        ScramUpsertion(bob, SHA256, "bob-secret", 1000)])
    assert results[alice] is None
    assert results[bob].code == ErrorCode.UNACCEPTABLE_CREDENTIAL  # below Kafka's 4096

    def credentials():
        found = client.admin.describe_user_scram_credentials([alice])[alice]
        return found.error is None and set(found.credentials) or None

    assert wait_for(credentials, 15, "alice's credentials") == {(SHA256, 8192), (SHA512, 4096)}
    everyone = client.admin.describe_user_scram_credentials()
    assert alice in everyone and bob not in everyone
    missing = client.admin.describe_user_scram_credentials([nobody])[nobody]
    assert missing.error.code == ErrorCode.RESOURCE_NOT_FOUND and missing.credentials == ()

    results = client.admin.alter_user_scram_credentials(deletions=[ScramDeletion(alice, SHA512)])
    assert results == {alice: None}
    wait_for(lambda: credentials() == {(SHA256, 8192)}, 15, "SCRAM-SHA-512 of alice gone")
    gone = client.admin.alter_user_scram_credentials(deletions=[ScramDeletion(nobody, SHA512)])
    assert gone[nobody].code == ErrorCode.RESOURCE_NOT_FOUND
    with pytest.raises(ValueError, match="empty"):
        client.admin.alter_user_scram_credentials([ScramUpsertion(alice, SHA256, "")])
    client.admin.alter_user_scram_credentials(deletions=[ScramDeletion(alice, SHA256)])


# -- sluice acls ----------------------------------------------------------------------------

def sluice(*args: str, stdin=None, input_text: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "sluice.cli", *args], capture_output=True,
                            text=True, timeout=CLI_TIMEOUT, cwd=ROOT, input=input_text,
                            stdin=stdin if input_text is None else None)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def ok(*args: str, **kwargs) -> str:
    result = sluice(*args, **kwargs)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def ok_json(*args: str, **kwargs):
    return json.loads(ok(*args, "--output", "json", **kwargs))


def fails(*args: str, code: int, **kwargs) -> str:
    """The last line on stderr of a command that exits with `code`: one `sluice: ...`
    line, or argparse's usage and `error:` line (code 2)."""
    result = sluice(*args, **kwargs)
    assert result.returncode == code, (args, result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    if code == 2:
        assert "error:" in lines[-1], result.stderr
    else:
        assert len(lines) == 1 and lines[0].startswith("sluice: "), result.stderr
    return lines[-1]


def acl_rows(document) -> set[tuple]:
    return {(a["resource_type"], a["resource_name"], a["pattern_type"], a["principal"], a["host"],
             a["operation"], a["permission"]) for a in document}


def listed(bootstrap: str, *args: str, expected: set) -> set:
    """`sluice acls --list ...` once it shows `expected`."""
    rows = set()

    def settled():
        nonlocal rows
        rows = acl_rows(ok_json("acls", "--bootstrap-server", bootstrap, "--list", *args)["acls"])
        return rows == expected

    wait_for(settled, 20, f"sluice acls --list {args} to show {expected} (last: {rows})",
             interval=0.3)
    return rows


def test_acls_add_list_remove(kafka):
    b = ("acls", "--bootstrap-server", kafka.bootstrap_servers)
    topic, prefix, alice, mallory = unique("events"), unique("audit"), unique("User:alice"), unique("User:mallory")
    out = ok(*b, "--add", "--allow-principal", alice, "--operation", "Read",
             "--operation", "describe", "--topic", topic)
    assert out.startswith("Added 2 ACLs:") and "RESOURCE-TYPE" in out and alice in out
    added = ok_json(*b, "add", "--deny-principal", mallory, "--deny-host", "10.0.0.9",
                    "--operation", "Write", "--topic", prefix, "--resource-pattern-type", "prefixed")
    deny = ("Topic", prefix, "Prefixed", mallory, "10.0.0.9", "Write", "Deny")
    assert acl_rows(added["added"]) == {deny} and added["errors"] == []

    alices = {("Topic", topic, "Literal", alice, "*", "Read", "Allow"),
              ("Topic", topic, "Literal", alice, "*", "Describe", "Allow")}
    assert listed(kafka.bootstrap_servers, "--topic", topic, expected=alices)
    assert listed(kafka.bootstrap_servers, "--principal", alice, expected=alices)
    assert listed(kafka.bootstrap_servers, "--topic", prefix + "-2026",
                  "--resource-pattern-type", "match", expected={deny})
    assert listed(kafka.bootstrap_servers, "--topic", prefix, "--resource-pattern-type", "any",
                  expected={deny})
    assert listed(kafka.bootstrap_servers, "--topic", prefix, expected=set()) == set()  # literal
    everything = acl_rows(ok_json(*b, "list")["acls"])
    assert alices | {deny} <= everything
    table = ok(*b, "list", "--topic", topic).splitlines()
    assert table[0].split() == ["RESOURCE-TYPE", "RESOURCE-NAME", "PATTERN-TYPE", "PRINCIPAL",
                                "HOST", "OPERATION", "PERMISSION"]
    assert sorted(line.split() for line in table[1:]) == sorted(map(list, alices))

    # Remove one ACL by naming it, then the resource's others; the prefixed one by pattern.
    removed = ok_json(*b, "--remove", "--topic", topic, "--allow-principal", alice,
                      "--operation", "Read", "--force")
    assert acl_rows(removed["removed"]) == {("Topic", topic, "Literal", alice, "*", "Read", "Allow")}
    listed(kafka.bootstrap_servers, "--topic", topic,
           expected={("Topic", topic, "Literal", alice, "*", "Describe", "Allow")})
    out = ok(*b, "remove", "--topic", topic, "--force")
    assert out.startswith("Removed 1 ACL:") and "Describe" in out
    out = ok(*b, "remove", "--topic", prefix, "--resource-pattern-type", "prefixed",
             "--deny-principal", mallory, "--force")
    assert "Removed 1 ACL:" in out
    assert ok(*b, "remove", "--topic", topic, "--force") == "No ACL matched.\n"
    listed(kafka.bootstrap_servers, "--principal", alice, expected=set())
    listed(kafka.bootstrap_servers, "--principal", mallory, expected=set())


def test_acls_producer_and_consumer_roles(kafka):
    b = ("acls", "--bootstrap-server", kafka.bootstrap_servers)
    topic, group, txn = unique("jobs"), unique("workers"), unique("tx")
    producer, consumer = unique("User:producer"), unique("User:consumer")
    ok(*b, "--add", "--producer", "--allow-principal", producer, "--topic", topic,
       "--transactional-id", txn, "--idempotent")
    ok(*b, "--add", "--consumer", "--allow-principal", consumer, "--topic", topic,
       "--group", group)
    assert listed(kafka.bootstrap_servers, "--principal", producer, expected={
        ("Topic", topic, "Literal", producer, "*", "Write", "Allow"),
        ("Topic", topic, "Literal", producer, "*", "Describe", "Allow"),
        ("Topic", topic, "Literal", producer, "*", "Create", "Allow"),
        ("TransactionalId", txn, "Literal", producer, "*", "Write", "Allow"),
        ("TransactionalId", txn, "Literal", producer, "*", "Describe", "Allow"),
        ("Cluster", "kafka-cluster", "Literal", producer, "*", "IdempotentWrite", "Allow")})
    assert listed(kafka.bootstrap_servers, "--principal", consumer, expected={
        ("Topic", topic, "Literal", consumer, "*", "Read", "Allow"),
        ("Topic", topic, "Literal", consumer, "*", "Describe", "Allow"),
        ("Group", group, "Literal", consumer, "*", "Read", "Allow")})
    # Removing a role removes its operations only.
    ok(*b, "--allow-principal", consumer, "--operation", "Delete", "--group", group, "--add")
    ok(*b, "--remove", "--consumer", "--allow-principal", consumer, "--topic", topic,
       "--group", group, "--force")
    listed(kafka.bootstrap_servers, "--principal", consumer,
           expected={("Group", group, "Literal", consumer, "*", "Delete", "Allow")})
    for principal in (producer, consumer):
        ok(*b, "--remove", "--topic", topic, "--group", group, "--transactional-id", txn,
           "--cluster", "--allow-principal", principal, "--force")
        listed(kafka.bootstrap_servers, "--principal", principal, expected=set())


def test_acls_usage_and_kafka_errors(kafka):
    b = ("acls", "--bootstrap-server", kafka.bootstrap_servers)
    topic = unique("t")
    assert "expected a string in format principalType:principalName but got alice" in fails(
        *b, "--add", "--allow-principal", "alice", "--topic", topic, code=2)
    assert ("ResourceType Group only supports operations Read, Describe, Delete, "
            "DescribeConfigs, AlterConfigs, All") in fails(
        *b, "--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g", code=2)
    assert "'Fly' is not one of" in fails(*b, "--add", "--allow-principal", "User:a",
                                          "--operation", "Fly", "--topic", topic, code=2)
    assert "exactly one action" in fails(*b, "--add", "list", "--topic", topic, code=2)
    assert "exactly one action" in fails(*b, "--topic", topic, code=2)
    assert "not valid when adding" in fails(*b, "add", "--allow-principal", "User:a", "--topic",
                                            topic, "--resource-pattern-type", "match", code=2)
    assert "--allow-principal or --deny-principal" in fails(*b, "add", "--topic", topic, code=2)
    assert "at least one resource" in fails(*b, "remove", "--allow-principal", "User:a", code=2)
    assert "with --consumer you must specify" in fails(
        *b, "add", "--consumer", "--allow-principal", "User:a", "--topic", topic, code=2)
    # Kafka's own refusal, from the broker: one line naming the ACL and Kafka's message.
    line = fails(*b, "add", "--allow-principal", "User:a", "--operation", "Read", "--topic", "",
                 code=1)
    assert "INVALID_REQUEST" in line and "Invalid empty resource name" in line
    unreachable = fails("acls", "--bootstrap-server", "127.0.0.1:1", "--list", "--timeout", "2",
                        code=1)
    assert "127.0.0.1:1" in unreachable


def test_acls_remove_asks_first(kafka):
    b = ("acls", "--bootstrap-server", kafka.bootstrap_servers)
    topic, principal = unique("kept"), unique("User:carol")
    ok(*b, "add", "--allow-principal", principal, "--operation", "Read", "--topic", topic)
    row = ("Topic", topic, "Literal", principal, "*", "Read", "Allow")
    listed(kafka.bootstrap_servers, "--topic", topic, expected={row})

    line = fails(*b, "remove", "--topic", topic, code=1, stdin=subprocess.DEVNULL)
    assert "stdin is not a terminal" in line and "--force" in line
    code, output = on_terminal(["sluice", *b, "remove", "--topic", topic], [("(y/n)", "n")])
    assert code == 1 and "Remove every ACL that matches" in output and "nothing removed" in output
    assert listed(kafka.bootstrap_servers, "--topic", topic, expected={row})
    code, output = on_terminal(["sluice", *b, "remove", "--topic", topic], [("(y/n)", "y")])
    assert code == 0 and "Removed 1 ACL:" in output, output
    listed(kafka.bootstrap_servers, "--topic", topic, expected=set())


def on_terminal(argv: list[str], conversation: list[tuple[str, str]],
                timeout: float = CLI_TIMEOUT) -> tuple[int, str]:
    """Run `sluice` with a pseudo-terminal as stdin, stdout, stderr and controlling
    terminal; each answer is typed once its prompt has appeared. (exit code, all output)"""
    master, slave = os.openpty()

    def take_terminal():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([sys.executable, "-m", "sluice.cli", *argv[1:]], cwd=ROOT,
                            stdin=slave, stdout=slave, stderr=slave, preexec_fn=take_terminal)
    os.close(slave)
    output, pending, answered_up_to = b"", list(conversation), 0
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            readable, _, _ = select.select([master], [], [], 0.2)
            if readable:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: every process closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            at = output.find(pending[0][0].encode(), answered_up_to) if pending else -1
            if at >= 0:
                prompt, answer = pending.pop(0)
                answered_up_to = at + len(prompt)
                os.write(master, answer.encode() + b"\n")
            elif proc.poll() is not None and not readable:
                break
        code = proc.wait(max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert not pending, (pending, output)
    return code, output.decode(errors="replace")


# -- sluice users -------------------------------------------------------------------------

def sasl_metadata(kafka, user: str, password: str, mechanism: str, timeout: float = 10.0):
    """The topics a confluent-kafka client logged in as `user` sees (Metadata), or the
    KafkaException of a failed login."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({
        "bootstrap.servers": f"127.0.0.1:{kafka.listener_ports['SASL_PLAINTEXT']}",
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": mechanism,
        "sasl.username": user, "sasl.password": password, "log_level": 0})
    return set(admin.list_topics(timeout=timeout).topics)


def test_users_add_list_remove_and_login(kafka, client, tmp_path):
    u = ("users", "--bootstrap-server", kafka.bootstrap_servers)
    user, password = unique("alice"), "alice-secret-" + uuid.uuid4().hex[:6]
    password_file = tmp_path / "password"
    password_file.write_text(password + "\n")
    out = ok(*u, "add", "--user", user, "--add-config", "SCRAM-SHA-256=[iterations=8192]",
             "--password-file", str(password_file))
    assert out == f"Set the SCRAM-SHA-256 credential of user {user} (8192 iterations).\n"
    out = ok(*u, "add", "--entity-type", "users", "--entity-name", user, "--add-config",
             "SCRAM-SHA-512", "--password-file", "-", input_text="other-" + password + "\n")
    assert "SCRAM-SHA-512" in out and "4096" in out

    def listing():
        result = sluice(*u, "list", "--user", user, "--output", "json")
        return result.returncode == 0 and json.loads(result.stdout)

    document = wait_for(lambda: (d := listing()) and len(d["users"][0]["credentials"]) == 2 and d,
                        20, "both credentials listed", interval=0.3)
    assert document == {"users": [{"user": user, "credentials": [
        {"mechanism": "SCRAM-SHA-256", "iterations": 8192},
        {"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}], "errors": {}}
    table = ok(*u, "list")
    rows = [line.split() for line in table.splitlines()]
    assert rows[0] == ["USER", "MECHANISM", "ITERATIONS"]
    assert [user, "SCRAM-SHA-256", "8192"] in rows and [user, "SCRAM-SHA-512", "4096"] in rows
    assert password not in table and "salt" not in table.lower()

    # The salted password is right: Kafka lets the user in with either mechanism, and the
    # user sees the topic an ACL lets it describe, not the one without.
    visible, hidden = unique("visible"), unique("hidden")
    created = client.admin.create_topics({visible: NewTopic(1, 1), hidden: NewTopic(1, 1)})
    assert all(result.error is None for result in created.values())
    ok("acls", "--bootstrap-server", kafka.bootstrap_servers, "add", "--allow-principal",
       f"User:{user}", "--operation", "Describe", "--topic", visible)
    seen = wait_for(lambda: visible in (t := sasl_metadata(kafka, user, password, "SCRAM-SHA-256"))
                    and t, 20, "the ACL to let the user see its topic", interval=0.3)
    assert hidden not in seen
    assert visible in sasl_metadata(kafka, user, "other-" + password, "SCRAM-SHA-512")
    from confluent_kafka import KafkaException
    with pytest.raises(KafkaException):
        sasl_metadata(kafka, user, "wrong-" + password, "SCRAM-SHA-256", timeout=3)

    out = ok(*u, "remove", "--user", user, "--delete-config", "SCRAM-SHA-512")
    assert out == f"Removed the SCRAM-SHA-512 credential of user {user}.\n"
    wait_for(lambda: (d := listing()) and len(d["users"][0]["credentials"]) == 1, 20,
             "SCRAM-SHA-512 gone", interval=0.3)
    assert ok_json(*u, "remove", "--user", user) == {"user": user, "removed": ["SCRAM-SHA-256"]}
    line = wait_for(lambda: (r := sluice(*u, "list", "--user", user)).returncode == 1 and r.stderr,
                    20, "the user gone", interval=0.3)
    assert line.strip() == f"sluice: user {user!r} has no SCRAM credentials"
    assert fails(*u, "remove", "--user", user, "--delete-config", "SCRAM-SHA-256", code=1) == \
        f"sluice: user {user!r} has no SCRAM-SHA-256 credentials"
    ok("acls", "--bootstrap-server", kafka.bootstrap_servers, "remove", "--topic", visible, "--force")


def test_users_password_prompt_on_a_terminal(kafka):
    u = ("users", "--bootstrap-server", kafka.bootstrap_servers)
    user, password = unique("dave"), "dave-" + uuid.uuid4().hex[:8]
    code, output = on_terminal(["sluice", *u, "add", "--user", user, "--add-config", "SCRAM-SHA-256"],
                               [("Password for user", password), ("again", password)])
    assert code == 0 and "Set the SCRAM-SHA-256 credential" in output, output
    assert password not in output  # not echoed
    wait_for(lambda: visible_login(kafka, user, password), 20, "the prompted password to log in",
             interval=0.3)
    code, output = on_terminal(["sluice", *u, "add", "--user", user, "--add-config", "SCRAM-SHA-512"],
                               [("Password for user", password), ("again", password + "x")])
    assert code == 1 and "the two passwords differ" in output
    ok(*u, "remove", "--user", user)


def visible_login(kafka, user: str, password: str) -> bool:
    from confluent_kafka import KafkaException
    try:
        sasl_metadata(kafka, user, password, "SCRAM-SHA-256", timeout=3)
        return True
    except KafkaException:
        return False


def test_users_usage_errors_never_show_the_password(kafka):
    u = ("users", "--bootstrap-server", kafka.bootstrap_servers)
    secret = "hunter2-" + uuid.uuid4().hex[:6]
    for spec, complaint in [
            (f"SCRAM-SHA-256=[iterations=1000,password={secret}]", "Kafka takes 4096 to 16384"),
            (f"SCRAM-SHA-256=[iterations=20000,password={secret}]", "Kafka takes 4096 to 16384"),
            (f"SCRAM-SHA-1=[password={secret}]", "is not SCRAM-SHA-256 or SCRAM-SHA-512"),
            (f"SCRAM-SHA-256=[password={secret}", "a '[' without its ']'"),
            (f"SCRAM-SHA-256=[pasword={secret}]", "takes the keys iterations and password, not 'pasword'"),
            (f"SCRAM-SHA-256=password={secret}", "go in brackets")]:
        result = sluice(*u, "add", "--user", "x", "--add-config", spec)
        assert result.returncode == 2 and complaint in result.stderr, (spec, result.stderr)
        assert secret not in result.stderr + result.stdout
    result = sluice(*u, "add", "--user", "x", "--add-config", f"SCRAM-SHA-256=[password={secret}]",
                    "--unknown-option")
    assert result.returncode == 2 and secret not in result.stderr
    result = sluice(*u, "add", "--user", "x", "--add-config", "SCRAM-SHA-256", "--bogus",
                    f"password={secret}")
    assert result.returncode == 2 and secret not in result.stderr, result.stderr
    assert "--password-file" in fails(*u, "add", "--user", "x", "--add-config", "SCRAM-SHA-256",
                                      code=1, stdin=subprocess.DEVNULL)
    assert "cannot read --password-file" in fails(
        *u, "add", "--user", "x", "--add-config", "SCRAM-SHA-256", "--password-file",
        "/nonexistent/password", code=1)
    assert "is not SCRAM-SHA-256 or SCRAM-SHA-512" in fails(
        *u, "remove", "--user", "x", "--delete-config", "PLAIN", code=2)


def test_users_against_a_sluice_broker(broker, tmp_path):
    u = ("users", "--bootstrap-server", broker.bootstrap_servers)
    password_file = tmp_path / "password"
    password_file.write_text("erin-secret\n")
    ok(*u, "add", "--user", "erin", "--add-config",
       "SCRAM-SHA-256=[iterations=4096],SCRAM-SHA-512=[iterations=16384]",
       "--password-file", str(password_file))
    assert ok_json(*u, "list") == {"users": [{"user": "erin", "credentials": [
        {"mechanism": "SCRAM-SHA-256", "iterations": 4096},
        {"mechanism": "SCRAM-SHA-512", "iterations": 16384}]}], "errors": {}}
    ok(*u, "remove", "--user", "erin", "--delete-config", "SCRAM-SHA-256")
    assert [line.split() for line in ok(*u, "list").splitlines()] == [
        ["USER", "MECHANISM", "ITERATIONS"], ["erin", "SCRAM-SHA-512", "16384"]]
    ok(*u, "remove", "--user", "erin")
    assert fails(*u, "list", "--user", "erin", code=1) == "sluice: user 'erin' has no SCRAM credentials"
