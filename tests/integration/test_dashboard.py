"""The live dashboard in a real headless browser (Debian's Chromium, driven by selenium through
Debian's chromedriver; `make browser` installs both): a 3-broker cluster's brokers and links, a
channel's tree with its root and member, and an event published during the test shown by the
inspector with its attributes and payload. A screenshot is kept in build/test-artefacts/."""

import shutil
import tempfile
from pathlib import Path

import pytest

from tidings import sync
from tidings.testing import Cluster

pytestmark = pytest.mark.integration
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTEFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artefacts"
WAIT_S = 20


@pytest.fixture
def browser():
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("Chromium and chromedriver are not installed: run `make browser`")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="tidings-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1280,1200", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def test_dashboard_shows_cluster_tree_and_inspected_event(tmp_path, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def until(condition, what):
        return WebDriverWait(browser, WAIT_S, poll_frequency=0.1).until(condition, message=what)

    with Cluster(tmp_path / "c", 3, http=True) as cluster:
        a, b, c = cluster[0], cluster[1], cluster[2]
        with sync.connect(b.address) as sub_client, sub_client.subscribe("sensors/#") as sub, \
                sync.connect(c.address, service="thermometer") as pub:
            cluster.wait(lambda: any(t["name"] == "sensors/#" and t["member"]
                                     for t in (cluster.status(b) or {}).get("trees", [])), what="b in sensors/#")
            browser.get(f"http://{a.http_address}/dashboard")

            # every broker of the cluster, read from broker a, with the links between them
            until(lambda d: {g.get_attribute("data-address") for g in d.find_elements(By.CSS_SELECTOR, "g.broker")}
                  == {a.address, b.address, c.address}, "the three brokers drawn")
            until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "line.link")) == 3, "three links drawn")
            # each broker's row is its own status (three pubends), not another's it was advised to
            until(lambda d: len({r.find_elements(By.TAG_NAME, "td")[2].text
                                 for r in d.find_elements(By.CSS_SELECTOR, "#brokers tr")
                                 if len(r.find_elements(By.TAG_NAME, "td")) > 2}) == 3, "three pubends listed")

            # the tree of sensors/#: a root and broker b as a member
            def tree_nodes(d):
                return {g.get_attribute("data-address"): g.get_attribute("data-role")
                        for g in d.find_elements(By.CSS_SELECTOR, 'g.tree-view[data-tree="sensors/#"] g.tree-node')}

            # the page redraws from snapshots: wait for one that has the tree with b in it
            until(lambda d: "member" in (tree_nodes(d).get(b.address) or ""), "the tree drawn with b a member")
            assert any("root" in role for role in tree_nodes(browser).values())

            # the inspector: subscribe, then an event published now appears with attributes and payload
            pattern = browser.find_element(By.ID, "pattern")
            pattern.clear()
            pattern.send_keys("sensors/#")
            browser.find_element(By.ID, "filter").send_keys("celsius > 20")
            browser.find_element(By.CSS_SELECTOR, "#inspect-form button").click()
            until(lambda d: d.find_element(By.ID, "inspector-state").get_attribute("data-state") == "subscribed",
                  "the inspector subscribed")
            for i in range(20):
                pub.publish(f"sensors/room{i % 3}", f"reading {i}", attributes={"celsius": 15 + i})
            pub.publish("sensors/lab", "too hot", attributes={"celsius": 41, "unit": "C"})
            until(lambda d: any("too hot" in r.text for r in d.find_elements(By.CSS_SELECTOR, "#events tr.event")),
                  "the event in the inspector")
            rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#events tr.event")]
            hot = next(r for r in rows if "too hot" in r)
            assert "sensors/lab" in hot and '"celsius":41' in hot and "thermometer/" in hot
            assert not any("reading 5" in r for r in rows)  # 15 + 5 = 20: not > 20, filtered out
            assert sum(1 for r in rows if "reading" in r) == 14  # readings 6..19

            # the traffic timeline draws the channels published on
            until(lambda d: d.find_elements(By.CSS_SELECTOR, 'polyline[data-channel="sensors/lab"]'), "traffic drawn")
            for _ in range(20):
                sub.get(WAIT_S)
            browser.execute_script("window.scrollTo(0, 0)")
            ARTEFACTS.mkdir(parents=True, exist_ok=True)
            assert browser.save_screenshot(str(ARTEFACTS / "dashboard.png"))
