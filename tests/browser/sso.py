"""Single sign-on in a real browser: Playwright driving Debian's Chromium through a real OpenID
provider's login and consent pages (oidc-provider, tests/sso/provider.mjs) into the console of
two gateway replicas sharing Redis, which the Rust test `sso_in_a_browser` (tests/it/sso.rs)
starts and hands over in the environment:

  SY_A, SY_B     the two replicas' URLs (the provider sends people back to SY_A)

People at the provider: alice (group sy-admins: an admin of team platform), victor
(sy-viewers: a viewer), mallory (no mapped group). Every step asserts; the first failure ends
the run with a non-zero exit and says which step.
"""

import os
import re
import time

from playwright.sync_api import expect, sync_playwright

from pages import api

A = os.environ["SY_A"]
B = os.environ["SY_B"]
expect.set_options(timeout=10_000)


def log_in_at_the_provider(page, person):
    """The provider's login page, then its consent page when it shows one."""
    page.locator("input[name=login]").fill(person)
    page.locator("input[name=password]").fill("any password")
    page.locator("button[type=submit]").click()
    expect(page.locator("input[name=login]")).to_have_count(0)
    page.wait_for_load_state("load")
    # The provider asks for consent once per person and client.
    consent = page.locator("button[type=submit]", has_text="Continue")
    if consent.count():
        consent.click()


def through_the_provider(page, person):
    """From the console's sign-in page through the provider's login and consent pages."""
    page.goto(A + "/console")
    page.get_by_role("link", name="Sign in with single sign-on").click()
    log_in_at_the_provider(page, person)


def an_admin_signs_in_and_out_on_every_replica(browser):
    context = browser.new_context()
    page = context.new_page()
    through_the_provider(page, "alice")
    expect(page).to_have_url(A + "/console/channels")
    expect(page.locator("header")).to_contain_text("alice@example.test")
    # An admin of team platform: its keys and teams, no channel, and writes within it.
    keys = api(page, "/admin/keys")
    assert keys["status"] == 200, keys
    assert [k["name"] for k in keys["body"]["data"]] == ["team-a"], keys
    made = api(page, "/admin/keys", "POST", {"name": "made-by-alice", "team": "platform"})
    assert made["status"] == 201, made
    other = api(page, "/admin/keys", "POST", {"name": "not-hers", "team": "data"})
    assert other["status"] == 403, other
    audit = api(page, "/admin/channels")
    assert audit["body"]["data"] == [], audit
    # The other replica takes the same session (cookies do not tell ports apart), and once the
    # store has told it of the new key, its keys page shows her team's keys only.
    def b_knows_the_key():
        r = page.request.get(B + "/admin/keys")
        return r.status == 200 and "made-by-alice" in [k["name"] for k in r.json()["data"]]

    deadline = time.monotonic() + 10
    while not b_knows_the_key():
        assert time.monotonic() < deadline, "replica B never saw the key made on A"
        time.sleep(0.05)
    page.goto(B + "/console/keys")
    expect(page).to_have_url(B + "/console/keys")
    rows = page.locator("#keys tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.filter(has_text="team-a")).to_have_count(1)
    expect(rows.filter(has_text="made-by-alice")).to_have_count(1)
    kept = context.cookies()
    # Signing out on A ends the session at the provider and on every replica.
    page.goto(A + "/console/channels")
    page.get_by_role("button", name="Sign out").click()
    # The provider asks whether to end its session too, then sends the browser back.
    page.get_by_role("button", name=re.compile("yes", re.I)).first.click()
    expect(page).to_have_url(re.compile(re.escape(A) + "/console/?$"))
    expect(page.locator("h1")).to_have_text("Sign in")
    context.add_cookies(kept)
    page.goto(B + "/console/keys")
    expect(page.locator("h1")).to_have_text("Sign in")
    context.close()


def a_viewer_reads_only(browser):
    context = browser.new_context()
    page = context.new_page()
    through_the_provider(page, "victor")
    expect(page).to_have_url(A + "/console/channels")
    assert api(page, "/admin/keys")["status"] == 200
    write = api(page, "/admin/keys", "POST", {"name": "by-a-viewer"})
    assert write["status"] == 403, write
    context.close()


def an_unmapped_person_is_refused(browser):
    context = browser.new_context()
    page = context.new_page()
    through_the_provider(page, "mallory")
    expect(page.locator("[role=alert]")).to_contain_text("in no group this gateway lets in")
    page.goto(A + "/console/keys")
    expect(page.locator("h1")).to_have_text("Sign in")
    context.close()


def a_tampered_state_or_nonce_is_refused(browser):
    context = browser.new_context()
    page = context.new_page()
    # The state: the provider's answer naming another sign-in's.
    page.goto(A + "/console/sso/login")
    page.locator("input[name=login]").wait_for()
    r = page.goto(A + "/console/sso/callback?code=stolen&state=" + "0" * 32)
    assert r.status == 400, r.status
    expect(page.locator("[role=alert]")).to_contain_text("state does not match")
    # The nonce: the flow's cookie changed on its way back (its seal no longer holds).
    page.goto(A + "/console/sso/login")
    page.locator("input[name=login]").wait_for()
    flow = next(c for c in context.cookies() if c["name"] == "sy_sso")
    state, nonce, rest = flow["value"].split(".", 2)
    forged = dict(flow, value=".".join([state, "f" * len(nonce), rest]))
    context.add_cookies([forged])
    log_in_at_the_provider(page, "alice")
    expect(page.locator("[role=alert]")).to_contain_text("not started here")
    page.goto(A + "/console/keys")
    expect(page.locator("h1")).to_have_text("Sign in")
    context.close()


def main():
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        for step in [an_admin_signs_in_and_out_on_every_replica, a_viewer_reads_only,
                     an_unmapped_person_is_refused, a_tampered_state_or_nonce_is_refused]:
            print("step:", step.__name__, flush=True)
            step(browser)
        browser.close()
    print("sso: every step passed")


if __name__ == "__main__":
    main()
