"""The console in a real browser: Playwright (pinned, tests/browser/requirements.txt) driving
Debian's Chromium (/usr/bin/chromium) against a real gateway with a store, which the Rust test
`console_in_a_browser` (tests/it/console.rs) starts and hands over in the environment:

  SY_BASE        the gateway's URL
  SY_ADMIN       an admin token          SY_VIEWER   a viewer token
  SY_KEY         a gateway key (file-defined) for the failover request
  SY_UPSTREAM    an OpenAI-compatible mock upstream's base URL, for the channel made here
  SY_SHOTS       where the screenshots go (every page at 1280x800, some at phone width)

Every step asserts; the first failure ends the run with a non-zero exit and says which step.
"""

import json
import os
import re
import sys
import time

from openai import OpenAI
from playwright.sync_api import expect, sync_playwright

from pages import Problems, api

BASE = os.environ["SY_BASE"]
ADMIN = os.environ["SY_ADMIN"]
VIEWER = os.environ["SY_VIEWER"]
KEY = os.environ["SY_KEY"]
UPSTREAM = os.environ["SY_UPSTREAM"]
SHOTS = os.environ["SY_SHOTS"]
MCP = os.environ.get("SY_MCP") == "1"
PAGES = ["channels", "keys", "logs", "performance", "health", "usage", "playground", "mcp", "audit"]
TITLES = {
    "channels": "Channels", "keys": "Keys", "logs": "Request log", "performance": "Performance",
    "health": "Health", "usage": "Usage", "playground": "Route playground",
    "mcp": "MCP", "audit": "Audit and events",
}
expect.set_options(timeout=10_000)


def sign_in(context, token):
    page = context.new_page()
    problems = Problems(page)
    page.goto(BASE + "/console")
    expect(page.locator("h1")).to_have_text("Sign in")
    secrets = page.locator("input[type=password]")
    assert secrets.count() == 1, "one secret field, type=password"
    secrets.fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/console/channels$"))
    return page, problems


def controls_are_labelled(page, where):
    unlabelled = page.evaluate(
        """() => [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
            .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
            .map(e => e.id || e.name)"""
    )
    assert not unlabelled, f"{where}: controls without a label: {unlabelled}"


def fits(page, where):
    wide = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert wide <= 1, f"{where}: the page is {wide}px wider than the window"


def every_page(page, problems, who):
    """Each page: its one h1, labelled controls, no overflow, no console error; a screenshot."""
    for slug in PAGES:
        if slug == "playground":
            explain_a_route(page)
        else:
            page.goto(f"{BASE}/console/{slug}")
        expect(page.locator("h1")).to_have_count(1)
        expect(page.locator("h1")).to_have_text(TITLES[slug])
        # The page's script has run when its status line says something.
        expect(page.locator("p.status")).not_to_be_empty()
        controls_are_labelled(page, slug)
        fits(page, slug)
        page.screenshot(path=os.path.join(SHOTS, f"{who}-{slug}-1280x800.png"), full_page=False)
        problems.none(slug)


def create_channel(page):
    page.goto(BASE + "/console/channels")
    page.get_by_role("button", name="New channel").click()
    page.get_by_label("Name").fill("browser-made")
    page.get_by_label("Provider").select_option("openai")
    page.get_by_label("Base URL").fill(UPSTREAM)
    page.get_by_label("Models").fill("console-model")
    page.get_by_label("API keys").fill("sk-upstream-made-in-the-browser")
    page.get_by_role("button", name="Save channel").click()
    row = page.locator("#channels tbody tr", has_text="browser-made")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("console-model")
    expect(row).to_contain_text("api")


def create_key(page):
    page.goto(BASE + "/console/keys")
    page.get_by_role("button", name="New key").click()
    page.get_by_label("Name").fill("browser-key")
    page.get_by_role("button", name="Save key").click()
    secret = page.locator("#secret-value")
    expect(secret).to_have_value(re.compile(r"^sk-sy-"))
    value = secret.input_value()
    expect(page.locator("#keys tbody tr", has_text="browser-key")).to_have_count(1)
    # Shown once: a reload shows no secret anywhere.
    page.reload()
    assert value not in page.content(), "the key's secret is shown again after a reload"
    return value


def sdk_request(api_key, model):
    client = OpenAI(base_url=BASE + "/v1", api_key=api_key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "hello from the console test"}]
    )
    done = raw.parse()
    assert done.choices[0].message.content, "an answer"
    return raw.headers["x-request-id"], raw.headers.get("x-switchyard-channel")


def open_in_log(page, request_id):
    page.goto(BASE + "/console/logs")
    page.get_by_label("Request id").fill(request_id)
    page.get_by_role("button", name="Apply filters").click()
    row = page.locator("#log tbody tr", has_text=request_id)
    expect(row).to_have_count(1)
    # The time in the browser's own zone (the context runs in Asia/Tokyo, never UTC here).
    ts = api(page, "/admin/requests?id=" + request_id)["body"]["data"][0]["ts_ms"]
    local = page.evaluate("(ts) => new Date(ts).toLocaleString()", ts)
    utc = page.evaluate("(ts) => new Date(ts).toLocaleString('en-US', {timeZone: 'UTC'})", ts)
    assert local != utc, (local, utc)
    expect(row.locator("td").first).to_have_text(local)
    # The row shows the full id, and opens that request.
    row.get_by_role("button", name="Open request " + request_id).click()
    expect(page.locator("#detail")).to_be_visible()
    expect(page.locator("#detail-title")).to_have_text("Request " + request_id)
    return row


def charts_draw(page):
    page.goto(BASE + "/console/performance")
    canvas = page.locator("#chart-ttfb canvas").first
    expect(canvas).to_be_visible()
    box = canvas.bounding_box()
    assert box and box["width"] > 100 and box["height"] > 50, f"an empty chart: {box}"
    stats = api(page, "/admin/stats?window=3600")["body"]
    by = {(s["channel"], s["model"]): s for s in stats["series"]}
    s = by[("browser-made", "console-model")]
    row = page.locator("#perf tbody tr", has_text="browser-made")
    expect(row.locator("td").nth(2)).to_have_text(str(s["total"]["calls"]))
    page.goto(BASE + "/console/usage")
    expect(page.locator("#chart-spend canvas").first).to_be_visible()
    usage = api(page, "/admin/usage?group_by=day")["body"]
    expect(page.locator("#usage tbody tr")).to_have_count(max(1, len(usage["rows"])))
        # What the providers' prompt caches served and saved, per group.
    for column in ["Cached input", "Cache writes", "Cache hits", "Cache saved (USD)"]:
        expect(page.locator("#usage")).to_contain_text(column)
    # Spend by team, filtered to one team: the test key's.
    page.get_by_label("Group by").select_option("team")
    page.get_by_label("Team", exact=True).select_option("console-team")
    page.get_by_role("button", name="Show").click()
    by_team = api(page, "/admin/usage?group_by=team&team=console-team")["body"]
    assert by_team["rows"] and by_team["rows"][0]["team"] == "console-team", by_team
    expect(page.locator("#usage tbody tr").first).to_contain_text("console-team")


def explain_a_route(page):
    """The playground: a key, a model and a prompt give the plan, with no upstream called."""
    page.goto(BASE + "/console/playground")
    page.get_by_label("Key").select_option("team-a")
    page.get_by_label("Model").fill("fo-model")
    page.get_by_label("Prompt").fill("Which channel would take this?")
    page.get_by_role("button", name="Explain the route").click()
    rows = page.locator("#candidates tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("flaky")
    expect(rows.nth(1)).to_contain_text("steady")
    expect(page.locator("#plan-facts")).to_contain_text("Worst-case cost")
    plan = api(page, "/admin/route/explain", "POST", {"key": "team-a", "model": "fo-model",
               "messages": [{"role": "user", "content": "Which channel would take this?"}]})["body"]
    first = plan["chain"][0]["candidates"][0]
    expect(rows.nth(0).locator("td").nth(4)).to_have_text(f"{first['first_try_share'] * 100:.1f} %")
    # A model routed by a measured strategy: the plan says which channel it would try first
    # and why, and each candidate's figures.
    page.get_by_label("Model").fill("pick-model")
    page.get_by_role("button", name="Explain the route").click()
    expect(page.locator("#plan-facts")).to_contain_text("pick-model: least_busy → ")
    expect(page.locator("#plan-facts")).to_contain_text("(least_busy.fewest_in_flight)")
    plan = api(page, "/admin/route/explain", "POST", {"key": "team-a", "model": "pick-model",
               "messages": [{"role": "user", "content": "Which channel would take this?"}]})["body"]
    chosen = plan["chain"][0]["first_try"]["channel"]
    expect(rows.nth(0)).to_contain_text(chosen)
    expect(rows.nth(0).locator("td").nth(8)).to_have_text("0")


def send_a_test_event(page):
    """The audit page's "Send test": the delivery shows up in the webhook's log."""
    page.goto(BASE + "/console/audit")
    page.get_by_role("button", name="Send a test event to ops").click()
    expect(page.locator("p.status")).to_contain_text("Test event queued for ops")
    for _ in range(40):
        page.reload()
        expect(page.locator("p.status")).to_contain_text("Updated")
        if page.locator("#deliveries-ops tbody tr", has_text="webhook.test").count():
            break
        time.sleep(0.5)
    row = page.locator("#deliveries-ops tbody tr", has_text="webhook.test").first
    expect(row).to_contain_text("delivered")
    expect(page.locator("#events tbody tr", has_text="webhook.test").first).to_be_visible()


def a_credential_refresh_error_shows(page):
    page.goto(BASE + "/console/health")
    row = page.locator("#circuits tbody tr", has_text="vertex-token")
    expect(row).to_contain_text("refresh failed")
    expect(row).to_contain_text("service account")


def an_mcp_call_shows(page):
    """The MCP page: the server with its replica's circuit and tools, and the tool call."""
    page.goto(BASE + "/console/mcp")
    server = page.locator("#mcp-servers tbody tr", has_text="docs")
    expect(server).to_contain_text("closed")
    expect(server).to_contain_text("echo (safe to repeat)")
    call = page.locator("#mcp-calls tbody tr", has_text="docs__echo")
    expect(call).to_have_count(1)
    expect(call).to_contain_text("ok")
    page.get_by_label("Outcome").fill("denied")
    page.get_by_role("button", name="Apply filters").click()
    expect(page.locator("#mcp-calls tbody tr", has_text="docs__echo")).to_have_count(0)


def viewer_has_no_write_controls(page):
    for slug, absent in [("channels", "New channel"), ("keys", "New key")]:
        page.goto(f"{BASE}/console/{slug}")
        expect(page.locator("p.status")).not_to_be_empty()
        assert page.get_by_role("button", name=absent).count() == 0, f"{slug}: {absent}"
        for verb in ["Edit", "Delete", "Revoke", "Disable", "Enable"]:
            assert page.get_by_role("button", name=re.compile("^" + verb)).count() == 0, f"{slug}: {verb}"
    page.goto(BASE + "/console/audit")
    expect(page.locator("p.status")).not_to_be_empty()
    assert page.get_by_role("button", name="Send test").count() == 0
    refused = api(page, "/admin/keys", "POST", {"name": "viewer-made"})
    assert refused["status"] == 403, refused


def main():
    os.makedirs(SHOTS, exist_ok=True)
    steps = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        ctx = browser.new_context(viewport={"width": 1280, "height": 800}, timezone_id="Asia/Tokyo")
        page, problems = sign_in(ctx, ADMIN)
        steps.append("signed in as admin")

        create_channel(page)
        steps.append("channel created")
        secret = create_key(page)
        steps.append("key created, secret shown once")
        request_id, channel = sdk_request(secret, "console-model")
        assert channel == "browser-made", channel
        steps.append("the openai SDK with the new key, served by the new channel")

        open_in_log(page, request_id)
        expect(page.locator("#timeline li")).to_have_count(1)
        ttfb = page.locator("#detail-facts dt", has_text="TTFB").locator("xpath=following-sibling::dd[1]")
        expect(ttfb).to_have_text(re.compile(r"^\d+ ms$"))
        steps.append("the request in the log, found by its full id, with TTFB")

        failed_over, served_by = sdk_request(KEY, "fo-model")
        assert served_by == "steady", served_by
        open_in_log(page, failed_over)
        items = page.locator("#timeline li")
        expect(items).to_have_count(2)
        expect(items.nth(0)).to_contain_text("flaky")
        expect(items.nth(0)).to_contain_text("server_error")
        expect(items.nth(1)).to_contain_text("steady")
        page.get_by_label("Request id").fill("")
        page.get_by_label("Failed over only").check()
        page.get_by_role("button", name="Apply filters").click()
        expect(page.locator("#log tbody tr", has_text=failed_over)).to_have_count(1)
        expect(page.locator("#log tbody tr", has_text=request_id)).to_have_count(0)
        steps.append("a failed-over request shows both attempts")

        charts_draw(page)
        steps.append("charts draw, values match the API")
        explain_a_route(page)
        steps.append("the playground explains a route")
        send_a_test_event(page)
        steps.append("a webhook's test event sent and its delivery listed")
        a_credential_refresh_error_shows(page)
        steps.append("the health page shows a cloud credential's refresh error")
        if MCP:
            an_mcp_call_shows(page)
            steps.append("the MCP page shows the server, its tools and the tool call, filtered")

        forged = api(page, "/admin/keys", "POST", {"name": "forged"}, csrf=False)
        assert forged["status"] == 403 and forged["body"]["error"]["code"] == "csrf_failed", forged
        steps.append("a write without the CSRF token is refused")
        # That refusal was asked for: the browser logs it as a failed load; nothing else may be.
        problems.seen = [p for p in problems.seen if "403 (Forbidden)" not in p]

        every_page(page, problems, "admin")
        phone = browser.new_context(viewport={"width": 390, "height": 844}, storage_state=ctx.storage_state())
        ppage = phone.new_page()
        pproblems = Problems(ppage)
        for slug in ["channels", "logs", "performance"]:
            ppage.goto(f"{BASE}/console/{slug}")
            expect(ppage.locator("p.status")).not_to_be_empty()
            fits(ppage, "phone " + slug)
            ppage.screenshot(path=os.path.join(SHOTS, f"phone-{slug}-390x844.png"))
        pproblems.none("phone")
        steps.append("every page: one h1, labelled controls, no console error, fits 1280x800 and a phone")

        # Keyboard: from the top of a page, Tab reaches the navigation and the first write control.
        page.goto(BASE + "/console/channels")
        reached = set()
        for _ in range(20):
            page.keyboard.press("Tab")
            reached.add(page.evaluate("() => document.activeElement.textContent.trim()"))
        assert "Keys" in reached and "New channel" in reached, reached
        steps.append("keyboard reachable")

        vctx = browser.new_context(viewport={"width": 1280, "height": 800})
        vpage, vproblems = sign_in(vctx, VIEWER)
        viewer_has_no_write_controls(vpage)
        vproblems.seen = [p for p in vproblems.seen if "403 (Forbidden)" not in p]
        every_page(vpage, vproblems, "viewer")
        steps.append("a viewer sees every page and no write control")

        page.get_by_role("button", name="Sign out").click()
        expect(page.locator("h1")).to_have_text("Sign in")
        page.goto(BASE + "/console/keys")
        expect(page.locator("h1")).to_have_text("Sign in")
        steps.append("signed out")
        problems.none("end")
        browser.close()
    print(json.dumps({"ok": True, "steps": steps, "screenshots": sorted(os.listdir(SHOTS))}))


if __name__ == "__main__":
    started = time.time()
    try:
        main()
    except Exception as e:  # the Rust test shows this line
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}))
        raise
    print(f"browser run took {time.time() - started:.1f} s", file=sys.stderr)
