"""The operator page in a real browser: Debian's Chromium, driven headless
by Playwright. Run by crates/outbox-cli/tests/it/ui_browser.rs, which starts
`outbox ui` and `outbox relay` (to a webhook receiver) on a seeded schema
and passes where they are; it checks the webhook afterwards.

Checks, in order: the page renders counts; a new dead letter appears
without a reload; a `<script>` in its reason is shown as text and runs
nothing; signing in and replaying through the page sends the row back to
pending and the relay sends it; POSTs without the token, or marked
cross-site, are refused. Saves a screenshot for the README.
"""

import argparse
import subprocess
import sys
import time
import urllib.error
import urllib.request

from playwright.sync_api import expect, sync_playwright

EVIL = "<script>window.__xss = 1</script><img src=x onerror=\"window.__xss = 2\">"


def psql(db, sql):
    out = subprocess.run(
        ["psql", db, "-X", "-Atq", "-v", "ON_ERROR_STOP=1", "-c", sql],
        check=True, capture_output=True, text=True,
    )
    return out.stdout.strip()


def wait_until(what, cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            sys.exit(f"gave up waiting for {what}")
        time.sleep(0.2)


def post(url, data, headers):
    req = urllib.request.Request(url, data=data.encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--database-url", required=True)
    ap.add_argument("--schema", required=True)
    ap.add_argument("--dead-id", required=True, type=int)
    ap.add_argument("--screenshot", required=True)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    a = ap.parse_args()
    db, s = a.database_url, a.schema

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=a.chromium,
            args=["--headless", "--no-sandbox", "--disable-gpu"],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))

        # 1. Counts render, and the live feed connects.
        page.goto(a.url)
        expect(page.locator("#count-dead")).to_have_text("1")
        expect(page.locator("#conn")).to_have_text("live", timeout=15000)
        expect(page.locator(f'#dead-rows tr[data-id="{a.dead_id}"]')).to_be_visible()
        print("ok: the page renders counts and connects live")

        # 2. A new dead letter appears without a reload.
        page.evaluate("window.__samePage = 42")
        evil = psql(db, f"""
            INSERT INTO {s}.messages (event_type, aggregate_type, aggregate_id, topic, payload,
                status, attempts, dead_at, dead_reason, last_error)
            VALUES ('order.created', 'order', 'x', 'evil', '{{"note": "</pre><script>window.__xss = 3</script>"}}',
                'dead', 3, now(), $${EVIL}$$, $${EVIL}$$)
            RETURNING id""")
        row = page.locator(f'#dead-rows tr[data-id="{evil}"]')
        expect(row).to_be_visible(timeout=15000)
        expect(page.locator("#count-dead")).to_have_text("2")
        assert page.evaluate("window.__samePage") == 42, "the page reloaded"
        print("ok: a new dead letter appeared without a reload")

        # 3. ... shown as text, running nothing, on the list and the detail.
        expect(row.locator("td.reason")).to_have_text(EVIL)
        assert page.evaluate("window.__xss") is None, "injected script ran"
        assert page.locator("#dead script, #dead img").count() == 0
        page.click(f'#dead-rows tr[data-id="{evil}"] a')
        expect(page.locator("#dead-reason")).to_have_text(EVIL)
        expect(page.locator("#payload")).to_contain_text("</pre><script>")
        assert page.evaluate("window.__xss") is None, "injected script ran on the detail page"
        assert page.locator("main script, main img").count() == 0
        assert not dialogs, dialogs
        print("ok: <script> in a reason and a payload is shown as text and runs nothing")

        # 4. Sign in, select the first dead letter, replay it, confirm.
        page.goto(a.url)
        page.fill("#login input[name=token]", a.token)
        page.click("#login button")
        expect(page.locator("#access-state")).to_contain_text("Signed in")
        page.check(f'#dead-rows tr[data-id="{a.dead_id}"] input[type=checkbox]')
        page.click("#replay-selected")
        expect(page.locator("h1")).to_contain_text(f"Replay dead letter {a.dead_id}")
        assert psql(db, f"SELECT status FROM {s}.messages WHERE id = {a.dead_id}") == "dead", \
            "replayed before confirmation"
        page.click("#confirm")
        expect(page.locator("#flash")).to_contain_text("Replayed 1")
        by = psql(db, f"SELECT replayed_by FROM {s}.dead_replays WHERE message_id = {a.dead_id}")
        assert by == "outbox-ui (cookie from 127.0.0.1)", by
        status = lambda: psql(db, f"SELECT status FROM {s}.all_messages WHERE id = {a.dead_id}")
        wait_until("the relay to send the replayed message", lambda: status() == "sent")
        expect(page.locator("#replays-table")).to_contain_text(str(a.dead_id), timeout=15000)
        print("ok: replay through the page sent the row back to pending; the relay sent it")

        # 5. Refusals: no token; the browser's own cookie on a cross-site POST.
        form = f"id={evil}&confirm=yes"
        ctype = {"Content-Type": "application/x-www-form-urlencoded"}
        code = post(f"{a.url}replay", form, ctype)
        assert code == 401, code
        r = page.request.post(f"{a.url}replay", data=form,
                              headers={**ctype, "Sec-Fetch-Site": "cross-site"})
        assert r.status == 403, r.status
        r = page.request.post(f"{a.url}replay", data=form,
                              headers={**ctype, "Sec-Fetch-Site": "cross-site",
                                       "Authorization": f"Bearer {a.token}"})
        assert r.status == 403, r.status
        assert psql(db, f"SELECT status FROM {s}.messages WHERE id = {evil}") == "dead"
        print("ok: POSTs without the token, or cross-site, were refused")

        # A little traffic for the throughput chart, then the screenshot.
        for i in range(1, 7):
            psql(db, f"""INSERT INTO {s}.messages (event_type, aggregate_type, aggregate_id, topic, payload)
                SELECT 'order.created', 'order', g::text, 'orders', '{{}}'
                  FROM generate_series(1, {i * 40}) g""")
            time.sleep(1)
        page.goto(a.url)
        expect(page.locator("svg.spark")).to_be_visible(timeout=15000)
        page.screenshot(path=a.screenshot, full_page=True)
        assert not errors, errors
        browser.close()
    print(f"ok: screenshot saved to {a.screenshot}")


if __name__ == "__main__":
    main()
