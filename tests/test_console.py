"""`sluice console` as a real subprocess against a real broker process, looked at through
HTTP and through a real headless browser (Debian's chromium and chromedriver, driven by
selenium): the overview, a topic's partitions and recent messages (escaped), a group's
members and its lag chart redrawn live as a confluent-kafka consumer commits, the
offset reset: refused without --allow-offset-reset, and with it a dry run first and a
confirmation that moves the committed offsets, and the Quotas page: the quotas set and
the clients the broker throttles (read from its metrics, --metrics-port).

One broker, one browser and two consoles (read-only, reset allowed) serve the module;
a ZooKeeper cluster of two brokers, one of them killed, shows under-replicated and
offline partitions highlighted. Every wait is bounded and waits on a condition.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import re
import subprocess
import sys
import threading
from urllib.parse import quote, urlencode

import confluent_kafka
import pytest

from sluice.broker_process import BrokerProcess
from tests.support.polling import wait_for
from tests.cluster import FAST_FAILOVER, Cluster, free_ports
from sluice.console.lag import LagHistory, LagSample
from sluice_client import Client, NewTopic, ProducerRecord
from wire.quota_types import CLIENT_ID, USER

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
TOTAL_COLOUR = (0xD9, 0x48, 0x0F)  # the lag chart's total line (sluice/console/assets.py)
LAG_INTERVAL_MS = 300
WAIT = 20  # seconds, for any one condition


class Console:
    """`python -m sluice.cli console` on a free port, its output kept for the failure report."""

    def __init__(self, bootstrap: str, *extra: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sluice.cli", "console", "--bootstrap-server", bootstrap,
             "--port", "0", "--lag-interval-ms", str(LAG_INTERVAL_MS), "--timeout", "5", *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            cwd=ROOT)
        self.output: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        found = wait_for(lambda: self._url() or self.proc.poll() is not None, WAIT, "the console's URL")
        if found is True:
            raise AssertionError("the console exited:\n" + "".join(self.output))
        self.url = found
        self.port = int(found.rsplit(":", 1)[1].strip("/"))

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line)

    def _url(self) -> str | None:
        for line in list(self.output):
            match = re.search(r"http://127\.0\.0\.1:\d+/", line)
            if match:
                return match.group(0)
        return None

    def request(self, method: str, path: str, form: dict | None = None, host: str | None = None):
        """(status, headers, body text) of one request, redirects not followed."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            body = urlencode(form).encode() if form is not None else None
            headers = {"Content-Type": "application/x-www-form-urlencoded"} if form is not None else {}
            if host is not None:
                headers["Host"] = host
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read().decode()
        finally:
            conn.close()

    def json(self, path: str):
        status, _, body = self.request("GET", path)
        assert status == 200, (path, status, body)
        return json.loads(body)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            assert self.proc.wait(15) == 0, "".join(self.output)
        assert "Traceback" not in "".join(self.output), "".join(self.output)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """Its metrics on a port known in advance: the console is told it (--metrics-port)."""
    directory = tmp_path_factory.mktemp("console")
    config = directory / "server.properties"
    config.write_text("group.initial.rebalance.delay.ms=0\noffsets.topic.num.partitions=3\n"
                      f"metrics.port={free_ports(1)[0]}\n")
    with BrokerProcess(directory / "data", config_file=str(config)) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(broker):
    with Client(broker.bootstrap_servers) as c:
        yield c


@pytest.fixture(scope="module")
def console(broker):
    """A read-only console."""
    running = Console(broker.bootstrap_servers, "--metrics-port", str(broker.metrics_port))
    yield running
    running.close()


@pytest.fixture(scope="module")
def resetting_console(broker):
    running = Console(broker.bootstrap_servers, "--allow-offset-reset")
    yield running
    running.close()


@pytest.fixture(scope="module")
def browser():
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip(f"needs Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER}; "
                    f"apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the test extra)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1400",
                     "--force-device-scale-factor=1", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def _by():
    from selenium.webdriver.common.by import By
    return By


def _wait(driver, condition, what: str):
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, WAIT, poll_frequency=0.1).until(condition, f"timed out waiting for {what}")


def _click_to(browser, element, selector: str) -> None:
    """Click a link or button and wait for the next page, known by an element it has."""
    By = _by()
    element.click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, selector), f"a page with {selector}")


# -- tests --------------------------------------------------------------------------------

def test_lag_history_is_bounded_in_samples_and_groups():
    history = LagHistory(max_samples=3, max_groups=2)
    for at in range(5):
        for group in ("a", "b", "c"):
            history.record(group, LagSample(at, {("t", 0): at}))
    assert [s.at_ms for s in history.samples("a")] == [2, 3, 4]
    assert history.samples("c") == []  # beyond max_groups
    history.keep_only(["b"])
    assert history.samples("a") == [] and len(history.samples("b")) == 3
    history.record("c", LagSample(5, {("t", 0): 1, ("t", 1): 2}))
    assert history.samples("c")[0].to_json() == {"t": 5, "total": 3, "partitions": {"t-0": 1, "t-1": 2}}


def test_an_unreachable_cluster_is_one_line_at_start_and_a_page_once_running(tmp_path):
    closed, = free_ports(1)
    result = subprocess.run([sys.executable, "-m", "sluice.cli", "console", "--bootstrap-server",
                             f"127.0.0.1:{closed}", "--port", "0", "--timeout", "2"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 1
    assert result.stderr.startswith(f"sluice: cannot reach the cluster at 127.0.0.1:{closed}"), result.stderr
    assert "Traceback" not in result.stderr
    for port, message in (("70000", "70000 is outside 0-65535"), ("80a", "'80a' is not a port number")):
        refused = subprocess.run([sys.executable, "-m", "sluice.cli", "console", "--bootstrap-server",
                                  f"127.0.0.1:{closed}", "--port", port],
                                 capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr

    short_lived = BrokerProcess(tmp_path / "data").start()
    running = Console(short_lived.bootstrap_servers)
    try:
        assert running.request("GET", "/")[0] == 200
        short_lived.kill()
        status, headers, body = running.request("GET", "/topics")
        assert status == 502 and headers["content-type"].startswith("text/html")
        assert "cannot reach the cluster" in body and "Traceback" not in body
        status, _, body = running.request("GET", "/api/cluster")
        assert status == 502 and "cannot reach the cluster" in json.loads(body)["error"]
    finally:
        short_lived.kill()
        running.close()


def test_overview_and_a_topic_with_its_recent_messages(browser, console, client, broker):
    By = _by()
    client.admin.create_topics({"orders": NewTopic(2, 1)})
    markup = "<b>bold</b> & <script>alert(1)</script>"
    client.producer.produce("orders", 0, [ProducerRecord(f"k{i}".encode(), f"order {i}".encode()) for i in range(25)])
    client.producer.produce("orders", 1, [ProducerRecord(b"html", markup.encode(), (("trace", b"\x00\xff"),)),
                                 ProducerRecord(None, b"\x00\x01\x02binary")])

    browser.get(console.url)
    brokers = browser.find_elements(By.CSS_SELECTOR, "#brokers tr")[1:]
    assert len(brokers) == 1
    cells = [c.text for c in brokers[0].find_elements(By.TAG_NAME, "td")]
    assert cells[:2] == ["0", broker.bootstrap_servers] and cells[3] == "controller"

    _click_to(browser, browser.find_element(By.LINK_TEXT, "Topics"), "#topics")
    _click_to(browser, browser.find_element(By.LINK_TEXT, "orders"), "#partitions")
    rows = browser.find_elements(By.CSS_SELECTOR, "#partitions tr[data-partition]")
    assert [[c.text for c in r.find_elements(By.TAG_NAME, "td")][:6] for r in rows] == [
        ["0", "0", "0", "0", "0", "25"], ["1", "0", "0", "0", "0", "2"]]
    messages = browser.find_elements(By.CSS_SELECTOR, "#messages tr")[1:]
    assert len(messages) == 20  # the default: the 20 newest, merged over partitions
    texts = [[c.text for c in m.find_elements(By.TAG_NAME, "td")] for m in messages]
    by_offset = {(int(t[0]), int(t[1])): t for t in texts}
    assert by_offset[(1, 0)][3:] == ["html", markup, "trace: 0x00ff"]  # text, never markup
    assert by_offset[(1, 1)][3:5] == ["null", "0x000102" + b"binary".hex()]
    assert by_offset[(0, 24)][4] == "order 24"
    assert not browser.find_elements(By.CSS_SELECTOR, "#messages b, #messages script")

    one = console.json("/api/topics/orders/messages?partition=0&limit=3")
    assert [m["offset"] for m in one["messages"]] == [24, 23, 22]
    assert one["messages"][0]["value"] == {"text": "order 24", "encoding": "utf-8", "size": 8,
                                           "truncated": False}
    status, _, body = console.request("GET", "/topics/missing")
    assert status == 404 and "topic &#x27;missing&#x27; does not exist" in body
    assert console.request("GET", "/topics/orders?limit=0")[0] == 400


def _consumer(broker, group: str, client_id: str, topic: str, partitions: int):
    """A confluent-kafka consumer in `group`, once it has its assignment."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap_servers, "group.id": group, "client.id": client_id,
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 0})
    consumer.subscribe([topic])

    def assigned() -> bool:
        consumer.poll(0.2)
        return len(consumer.assignment()) == partitions

    try:
        wait_for(assigned, WAIT, f"the assignment of {client_id}")
    except BaseException:
        consumer.close()
        raise
    return consumer


def test_a_group_page_and_its_lag_chart_drawn_live(browser, console, client, broker):
    By = _by()
    from PIL import Image

    client.admin.create_topics({"lagged": NewTopic(2, 1)})
    for partition in (0, 1):
        client.producer.produce("lagged", partition, [ProducerRecord(None, b"x" * 10) for _ in range(20)])
    consumer = _consumer(broker, "chart-readers", "chart-consumer", "lagged", 2)
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition("lagged", 0, 5),
                                 confluent_kafka.TopicPartition("lagged", 1, 5)], asynchronous=False)

        browser.get(console.url + "groups/chart-readers")
        assert browser.find_element(By.ID, "group-state").text == "Stable"
        member = browser.find_element(By.CSS_SELECTOR, "#members tr:nth-child(2)")
        assert "chart-consumer" in member.text and "lagged:0,1" in member.text
        assert browser.find_element(By.ID, "total-lag").text == "30"
        assert "when this page loaded" in browser.find_element(By.ID, "offsets-as-of").text  # the table is a snapshot
        listed = {g["group"]: g for g in console.json("/api/groups")["groups"]}
        assert (listed["chart-readers"]["state"], listed["chart-readers"]["members"]) == ("Stable", 1)
        assert not browser.find_elements(By.ID, "reset-form")  # read-only console
        _click_to(browser, browser.find_element(By.LINK_TEXT, "Topics"), "#topics")
        offsets_topic = browser.find_element(
            By.XPATH, "//table[@id='topics']//tr[td/a[text()='__consumer_offsets']]")
        assert "internal" in offsets_topic.text
        browser.back()

        def points():
            charts = browser.find_elements(By.CSS_SELECTOR, "#lag-chart svg")
            return int(charts[0].get_attribute("data-points")) if charts else 0

        _wait(browser, lambda d: points() >= 2 and "total lag 30" in
              d.find_element(By.ID, "lag-status").text, "a chart of two samples of lag 30")
        first_count, first = points(), _chart_pixels(browser, Image)
        line = sum(1 for pixel in first.get_flattened_data() if _near(pixel, TOTAL_COLOUR))
        assert line >= 100, f"only {line} pixels of the total line's colour in the chart"

        consumer.commit(offsets=[confluent_kafka.TopicPartition("lagged", 0, 15),
                                 confluent_kafka.TopicPartition("lagged", 1, 18)], asynchronous=False)
        _wait(browser, lambda d: "total lag 7" in d.find_element(By.ID, "lag-status").text,
              "a sample of the new lag 7")
        assert points() > first_count
        polyline = browser.find_element(By.ID, "lag-total")
        assert browser.execute_script("return arguments[0].points.numberOfItems", polyline) == points()
        second = _chart_pixels(browser, Image)
        assert second.size == first.size and second.tobytes() != first.tobytes()

        lag = console.json("/api/groups/chart-readers/lag")
        assert lag["samples"][0]["partitions"] == {"lagged-0": 15, "lagged-1": 15}
        assert lag["samples"][-1]["partitions"] == {"lagged-0": 5, "lagged-1": 2}
    finally:
        consumer.close()


def _chart_pixels(browser, Image):
    """The lag chart's area of a screenshot of the whole window."""
    By = _by()
    chart = browser.find_element(By.CSS_SELECTOR, "#lag-chart svg")
    left, top, width, height, ratio = browser.execute_script(
        "arguments[0].scrollIntoView(); const r = arguments[0].getBoundingClientRect();"
        "return [r.left, r.top, r.width, r.height, window.devicePixelRatio];", chart)
    shot = Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("RGB")
    return shot.crop((int(left * ratio), int(top * ratio), int((left + width) * ratio),
                      int((top + height) * ratio)))


def _near(pixel, colour, tolerance: int = 40) -> bool:
    return sum(abs(a - b) for a, b in zip(pixel, colour)) <= tolerance


def test_offset_reset_is_refused_without_the_flag(console, client):
    client.admin.create_topics({"guarded": NewTopic(1, 1)})
    client.producer.produce("guarded", 0, [ProducerRecord(None, b"v") for _ in range(10)])
    client.consumer.commit_offsets("guarded-readers", {("guarded", 0): 7})
    status, _, body = console.request("GET", "/groups/guarded-readers")
    assert status == 200 and "reset-form" not in body and 'name="csrf"' not in body
    for path in ("/groups/guarded-readers/reset", "/groups/guarded-readers/reset/confirm"):
        status, _, body = console.request("POST", path, {"target": "earliest"})
        assert status == 403 and "--allow-offset-reset" in body
    assert client.consumer.fetch_offsets("guarded-readers")[("guarded", 0)].offset == 7
    # A page whose DNS name was rebound to 127.0.0.1 reaches the port, but not the console.
    assert console.request("GET", "/groups/guarded-readers", host=f"rebound.example:{console.port}")[0] == 403
    assert console.request("GET", "/api/cluster", host=f"localhost:{console.port}")[0] == 200


def test_offset_reset_shows_the_plan_then_commits_it_once_confirmed(browser, resetting_console, client,
                                                                   broker):
    By = _by()
    group = 'resets <&"'  # a group name is any string: escaped in pages, quoted in URLs
    client.admin.create_topics({"replayed": NewTopic(2, 1)})
    for partition in (0, 1):
        client.producer.produce("replayed", partition, [ProducerRecord(None, b"v") for _ in range(12)])
    client.consumer.commit_offsets(group, {("replayed", 0): 9, ("replayed", 1): 11})
    console = resetting_console

    browser.get(console.url + "groups")
    _click_to(browser, browser.find_element(By.LINK_TEXT, group), "#reset-form")
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Consumer group {group}"
    browser.find_element(By.CSS_SELECTOR, "#reset-form input[value='offset']").click()
    number = browser.find_element(By.CSS_SELECTOR, "#reset-form input[name='offset']")
    number.clear()
    number.send_keys("4")
    _click_to(browser, browser.find_element(By.ID, "reset-plan"), "#plan")
    plan = [[c.text for c in r.find_elements(By.TAG_NAME, "td")]
            for r in browser.find_elements(By.CSS_SELECTOR, "#plan tr")[1:]]
    assert plan == [["replayed", "0", "9", "4"], ["replayed", "1", "11", "4"]]
    committed = client.consumer.fetch_offsets(group)  # a dry run so far
    assert (committed[("replayed", 0)].offset, committed[("replayed", 1)].offset) == (9, 11)

    # The confirmation must carry the token of the plan shown: a changed plan is refused.
    fields = {i.get_attribute("name"): i.get_attribute("value")
              for i in browser.find_elements(By.CSS_SELECTOR, "#confirm-form input[type='hidden']")}
    path = f"/groups/{quote(group, safe='')}/reset/confirm"
    forged = dict(fields, plan=json.dumps([["replayed", 0, 0], ["replayed", 1, 0]]))
    assert console.request("POST", path, forged)[0] == 403
    assert console.request("POST", path, dict(fields, csrf="guessed"))[0] == 403
    planning = f"/groups/{quote(group, safe='')}/reset"
    assert console.request("POST", planning, {"csrf": "é", "target": "earliest"})[0] == 403
    status, _, body = console.request("POST", planning, {"csrf": fields["csrf"], "target": "offset",
                                                         "offset": "²"})
    assert status == 400 and "must be a number" in body

    _click_to(browser, browser.find_element(By.ID, "reset-confirm"), ".notice")
    assert "Committed the new offsets." in browser.find_element(By.CLASS_NAME, "notice").text
    committed = client.consumer.fetch_offsets(group)
    assert (committed[("replayed", 0)].offset, committed[("replayed", 1)].offset) == (4, 4)

    # A group with an active member is not reset: no form, and a plan is refused with the reason.
    consumer = _consumer(broker, "busy-readers", "busy-consumer", "replayed", 2)
    try:
        status, _, body = console.request("GET", "/groups/busy-readers")
        assert status == 200 and "reset-unavailable" in body and "reset-form" not in body
        status, _, body = console.request("POST", "/groups/busy-readers/reset",
                                          {"csrf": fields["csrf"], "target": "earliest"})
        assert status == 409 and "1 active member(s)" in body
    finally:
        consumer.close()


def test_under_replicated_and_offline_partitions_are_highlighted(browser, zookeeper, tmp_path):
    By = _by()
    with Cluster(tmp_path, zookeeper, brokers=2, properties=FAST_FAILOVER) as cluster:
        cluster.create_topic("mirrored", partitions=2, replication_factor=2)
        cluster.create_topic("single", partitions=2, replication_factor=1)
        cluster.wait_for_leaders("mirrored", full_isr=True)
        victim = next(b for b in cluster.ids if b != cluster.controller_id())
        lost = sorted(p for p, info in cluster.partitions("single").items() if info.leader_id == victim)
        assert lost, "both partitions of 'single' landed on one broker"
        running = Console(cluster.all_servers)
        try:
            assert _statuses(running, "mirrored") == {0: "ok", 1: "ok"}
            cluster.kill(victim)

            wanted = {"mirrored": {0: "under-replicated", 1: "under-replicated"},
                      "single": {p: "offline" if p in lost else "ok" for p in (0, 1)}}
            wait_for(lambda: all(_statuses(running, t) == s for t, s in wanted.items()), 40,
                     f"the console to show the partitions of broker {victim} under-replicated or offline")

            browser.get(running.url + "topics/mirrored")
            rows = browser.find_elements(By.CSS_SELECTOR, "#partitions tr.under-replicated")
            assert len(rows) == 2 and all(r.text.endswith("under-replicated") for r in rows)
            cell = rows[0].find_element(By.TAG_NAME, "td")
            assert cell.value_of_css_property("background-color") == "rgba(255, 243, 191, 1)"
            browser.get(running.url + "topics/single")
            offline = browser.find_elements(By.CSS_SELECTOR, "#partitions tr.offline")
            assert [int(r.get_attribute("data-partition")) for r in offline] == lost
            assert all(r.text.endswith("offline") for r in offline)
            browser.get(running.url + "topics")
            assert "2 under-replicated" in browser.find_element(By.LINK_TEXT, "mirrored").find_element(
                By.XPATH, "..").text
            browser.get(running.url)
            brokers = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#brokers tr")[1:]]
            assert len(brokers) == 1 and str(victim) not in brokers[0].split()[0]
        finally:
            running.close()


def _statuses(console: Console, topic: str) -> dict[int, str] | None:
    """{partition: status} as the console's JSON shows it; None while it answers an error
    (a leader just lost, not yet replaced in the metadata)."""
    status, _, body = console.request("GET", f"/api/topics/{topic}")
    if status != 200:
        return None
    return {p["partition"]: p["status"] for p in json.loads(body)["partitions"]}


def test_the_quotas_page_lists_the_throttled_clients(browser, console, client, broker):
    """A producer past its client id's producer_byte_rate is listed as throttled, with the
    broker, its measured rate beside its quota and its throttle time, on the Quotas page and
    in /api/quotas; a producer without a quota is not. The quotas set are listed, a
    default as <default>."""
    By = _by()
    client.admin.create_topics({"quoted": NewTopic(1, 1)})
    quotas = {((CLIENT_ID, "throttled-app"),): {"producer_byte_rate": 1024},
              ((USER, None),): {"request_percentage": 100}}
    client.admin.alter_client_quotas(quotas)
    try:
        for client_id in ("throttled-app", "free-app"):
            producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers,
                                                 "client.id": client_id, "log_level": 0})
            producer.produce("quoted", os.urandom(50_000))  # 1024 B/s: 10 windows' worth at once, then throttled
            assert producer.flush(WAIT) == 0
            del producer

        def throttled() -> list[dict]:
            return [row for row in console.json("/api/quotas")["throttled"] if row["client_id"] == "throttled-app"]

        [row] = wait_for(throttled, WAIT, "the throttled producer in /api/quotas")
        assert (row["broker"], row["quota_type"], row["user"], row["quota"]) == (0, "producer_byte_rate", "", 1024)
        assert row["measured"] > 1024 and row["throttle_time_ms"] > 0, row
        browser.get(console.url)
        _click_to(browser, browser.find_element(By.LINK_TEXT, "Quotas"), "#throttled")
        rows = [[c.text for c in r.find_elements(By.TAG_NAME, "td")]
                for r in browser.find_elements(By.CSS_SELECTOR, "#throttled tr")[1:]]
        assert [r[:4] + [r[5]] for r in rows] == [["0", "producer_byte_rate", "any", "throttled-app", "1,024"]]
        assert rows[0][4].endswith(" bytes/s") and int(rows[0][6].replace(",", "")) > 0, rows
        configured = [[c.text for c in r.find_elements(By.TAG_NAME, "td")]
                      for r in browser.find_elements(By.CSS_SELECTOR, "#quotas tr")[1:]]
        assert configured == [["any", "throttled-app", "producer_byte_rate=1,024"],
                              ["<default>", "any", "request_percentage=100"]]
    finally:
        client.admin.alter_client_quotas({entity: {key: None for key in keys} for entity, keys in quotas.items()})


def test_a_throttled_rate_is_shown_beside_the_quota_kafkas_precedence_gives_it():
    """Each row of Kafka's table, set along with every less specific one: the rate tagged
    as the broker tags that row's clients is shown beside that row's quota."""
    from sluice.console.quotas import applying_quota
    from tests.test_client_quota_enforcement import ROWS

    for row, (_, tags) in enumerate(ROWS):
        configured = {frozenset(entity): {"producer_byte_rate": 1000.0 * (i + 1)}
                      for i, (entity, _) in enumerate(ROWS) if i >= row}
        assert applying_quota(configured, *tags, "producer_byte_rate") == 1000.0 * (row + 1), row
        assert applying_quota(configured, *tags, "consumer_byte_rate") is None
