"""The first run in a real browser: Playwright (pinned, tests/browser/requirements.txt) driving
Debian's Chromium (/usr/bin/chromium) against `switchyard serve` without a config, which the
Rust test `the_demos_console_opens_from_the_banner_in_a_browser` (tests/it/demo.rs) starts and
hands over in the environment:

  SY_CONSOLE   the console URL the start banner printed (its fragment carries the token)
  SY_TOKEN     the demo admin token the banner printed
  SY_BASE      where the gateway listens

Every step asserts; the first failure ends the run with a non-zero exit and says which step.
"""

import json
import os
import re
import time

from openai import OpenAI
from playwright.sync_api import expect, sync_playwright

from pages import Problems, api

CONSOLE = os.environ["SY_CONSOLE"]
TOKEN = os.environ["SY_TOKEN"]
BASE = os.environ["SY_BASE"]
expect.set_options(timeout=10_000)


def the_failover(page):
    """The demo traffic's failed-over request, once the log has it (it is written in batches)."""
    deadline = time.time() + 20
    while time.time() < deadline:
        rows = api(page, "/admin/requests?failed_over=true")["body"]["data"]
        if rows:
            return rows[0]
        time.sleep(0.2)
    raise AssertionError("no failed-over request in the log within 20 s")


def main():
    steps = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
        problems = Problems(page)

        # One click: the banner's URL signs in, and the token leaves the address bar.
        page.goto(CONSOLE)
        expect(page).to_have_url(re.compile(r"/console/channels$"))
        assert "token" not in page.url, page.url
        expect(page.locator("h1")).to_have_text("Channels")
        for name in ["demo-primary", "demo-backup"]:
            expect(page.locator("tbody tr", has_text=name)).to_have_count(1)
        steps.append("the banner's URL signs in at once and lists the demo's channels")

        row = the_failover(page)
        assert row["requested_model"] == "demo-failover", row
        request_id = row["id"]
        page.goto(BASE + "/console/logs")
        page.get_by_label("Failed over only").check()
        page.get_by_role("button", name="Apply filters").click()
        listed = page.locator("#log tbody tr", has_text=request_id)
        expect(listed).to_have_count(1)
        listed.get_by_role("button", name="Open request " + request_id).click()
        items = page.locator("#timeline li")
        expect(items).to_have_count(2)
        expect(items.nth(0)).to_contain_text("demo-primary")
        expect(items.nth(0)).to_contain_text("503")
        expect(items.nth(1)).to_contain_text("demo-backup")
        steps.append("the demo's failed-over request shows both attempts")

        # The store takes writes: a key made here serves at once.
        made = api(page, "/admin/keys", "POST", {"name": "made-in-the-demo"})
        assert made["status"] == 201, made
        client = OpenAI(base_url=BASE + "/v1", api_key=made["body"]["key"], max_retries=0)
        answer = client.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "hi"}])
        assert "demo" in answer.choices[0].message.content, answer
        steps.append("a key made in the console serves a request")

        # The printed token signs in by hand too.
        other = browser.new_context().new_page()
        other.goto(BASE + "/console")
        other.locator("input[type=password]").fill(TOKEN)
        other.get_by_role("button", name="Sign in").click()
        expect(other).to_have_url(re.compile(r"/console/channels$"))
        steps.append("the printed token signs in")

        problems.none("the demo")
        browser.close()
    print(json.dumps({"ok": True, "steps": steps}))


if __name__ == "__main__":
    main()
