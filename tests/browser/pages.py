"""What the browser tests share about a console page: an admin API call made from it with its
session, and the errors it must not show."""


class Problems:
    """Console errors and failed requests seen by a page, which must stay empty."""

    def __init__(self, page):
        self.seen = []
        page.on("console", lambda m: m.type == "error" and self.seen.append("console: " + m.text))
        page.on("pageerror", lambda e: self.seen.append("page error: " + str(e)))
        # A load cut short by leaving the page is the browser's doing, not a failure.
        page.on("requestfailed", lambda r: "ERR_ABORTED" not in (r.failure or "")
                and self.seen.append(f"request failed: {r.url} ({r.failure})"))

    def none(self, where):
        assert not self.seen, f"{where}: {self.seen}"


def api(page, path, method="GET", body=None, csrf=True):
    """An admin API call from the page, with its session cookie (and CSRF token when asked)."""
    return page.evaluate(
        """async ([path, method, body, csrf]) => {
            const token = document.querySelector('meta[name="csrf-token"]').content;
            const headers = {"content-type": "application/json"};
            if (csrf) headers["x-csrf-token"] = token;
            const r = await fetch(path, {method, headers, body: body === null ? undefined : JSON.stringify(body)});
            let json = null; try { json = await r.json(); } catch (_) {}
            return {status: r.status, body: json};
        }""",
        [path, method, body, csrf],
    )
