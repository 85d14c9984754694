// Deterministic calibration corpus: texts of the kinds a coding agent or chat app sends.
// Everything here is written by hand or composed from the pools below with a seeded PRNG,
// so the same corpus comes out on every run. Used by calibrate.mjs.

export function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const pick = (rng, xs) => xs[Math.floor(rng() * xs.length)];
const int = (rng, lo, hi) => lo + Math.floor(rng() * (hi - lo + 1));
function shuffled(rng, xs) {
  const a = xs.slice();
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}
const hex = (rng, n) => Array.from({ length: n }, () => '0123456789abcdef'[int(rng, 0, 15)]).join('');

export const MIN_CHARS = 200;
export const MAX_CHARS = 4000;

// Joins pool entries in a shuffled order until `target` characters are reached,
// never going past MAX_CHARS.
function compose(rng, pool, target, sep = '\n\n') {
  let out = '';
  for (const piece of shuffled(rng, pool)) {
    const next = out ? out + sep + piece : piece;
    if (next.length > MAX_CHARS) continue;
    out = next;
    if (out.length >= target) break;
  }
  return out;
}

// ---------------------------------------------------------------- English prose
const PROSE_EN = [
  `Thanks for the detailed report. I was able to reproduce the timeout on my machine by lowering the pool size to two connections and sending twenty concurrent requests. The requests are not actually slow; they are waiting for a free connection, and the waiting time is counted against the request deadline. I think the right fix is to start the deadline only once a connection has been acquired, and to expose the pool wait as its own metric so it shows up in the dashboards.`,
  `The migration went mostly as planned. We moved the billing tables on Tuesday night, and the only surprise was an index that took forty minutes to rebuild instead of the five we had measured on the staging copy. In hindsight, staging had a tenth of the rows and none of the fragmentation. Next time we should restore a recent production snapshot before rehearsing, even if it costs an afternoon.`,
  `When you write a retry loop, decide first which errors are worth retrying. A connection reset or a 503 usually is; a 400 never is, because the same request will fail the same way. Add jitter to the backoff so that a thousand clients do not all come back at the same second, and put a ceiling on both the number of attempts and the total time spent, so that a caller upstream is not left waiting forever.`,
  `Our hiking trip started in light rain, which turned into proper fog by the time we reached the ridge. We could barely see the cairns, so we navigated by compass and counted our steps between them. Around noon the clouds lifted all at once, and the whole valley opened up below us: the lake, the village with its grey roofs, and the road we had driven up the evening before.`,
  `In short, the model does not remember previous conversations unless they are sent again with each request. Every call is stateless: the application keeps the history and decides how much of it to include. That is why long chats get more expensive over time, and why a good client trims or summarizes older turns once the context window starts to fill up.`,
  `Dear team, a quick reminder that the office will be closed on Monday for the public holiday. The on-call rotation is unchanged, so please check the schedule if you are not sure whether you are covering. If you need access to the building for any reason, let facilities know by Friday afternoon so they can arrange it. Have a restful long weekend.`,
  `The recipe is simpler than it looks. Brown the onions slowly, for at least twenty minutes, until they are soft and sweet. Add the garlic and the spices only at the end, because they burn quickly. Then pour in the tomatoes, season with salt, and let everything simmer with the lid half on while you cook the rice. A squeeze of lemon just before serving makes a surprising difference.`,
  `I would not call it a memory leak yet. The heap grows for the first hour and then stays flat, which looks more like caches warming up than like objects being retained forever. To be sure, take two heap snapshots a few hours apart under steady load and compare the retained sizes by type. If nothing keeps growing between them, we can close the ticket and lower the alert threshold instead.`,
  `Photosynthesis converts light energy into chemical energy stored in sugars. In the first stage, the light-dependent reactions in the thylakoid membranes split water, release oxygen, and produce ATP and NADPH. In the second stage, the Calvin cycle in the stroma uses that ATP and NADPH to fix carbon dioxide into three-carbon molecules, which the plant then assembles into glucose and other compounds.`,
  `Could you take another look at the pull request when you have a moment? I addressed most of your comments: the parser no longer allocates for every token, the error messages now include the line and column, and I added tests for empty input and for a file that ends without a newline. The one thing I left as it was is the public API, since changing it would break the two downstream crates.`,
  `The quarterly numbers were better than expected. Revenue grew eleven percent compared with the same quarter last year, mostly thanks to the new enterprise plan, while churn stayed flat. Support tickets per customer went down for the third quarter in a row, which we attribute to the improved onboarding flow. The main risk for next quarter is the delayed hiring in the sales team.`,
  `Rate limits are applied per API key and per model. When a limit is reached, the server answers with status 429 and a Retry-After header that tells the client how many seconds to wait. Clients should respect that header rather than retrying immediately. Limits reset on a rolling one-minute window, so short bursts are fine as long as the average stays below the configured rate.`,
  `She had never liked the lighthouse. It was too tall, too white, too insistent in the way it swept its beam across her bedroom wall every eleven seconds. But on the night of the storm, when the power failed across the whole island and the phones went dead, it was the only thing still working, and she found herself counting the seconds between flashes as if they were heartbeats.`,
];

// ---------------------------------------------------------------- Python
const PY = [
  `import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)`,
  `@dataclass
class Config:
    """Settings loaded from a TOML or JSON file."""

    name: str
    port: int = 8080
    debug: bool = False
    allowed_hosts: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> "Config":
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(**data)`,
  `def chunked(items, size):
    """Yield successive lists of at most \`size\` items."""
    if size <= 0:
        raise ValueError(f"size must be positive, got {size}")
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch`,
  `class LRUCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._data: dict[str, object] = {}

    def get(self, key: str):
        if key not in self._data:
            return None
        value = self._data.pop(key)
        self._data[key] = value
        return value

    def put(self, key: str, value) -> None:
        self._data.pop(key, None)
        self._data[key] = value
        while len(self._data) > self.capacity:
            oldest = next(iter(self._data))
            del self._data[oldest]`,
  `async def fetch_all(session, urls, concurrency=8):
    semaphore = asyncio.Semaphore(concurrency)

    async def fetch(url):
        async with semaphore:
            async with session.get(url, timeout=30) as resp:
                resp.raise_for_status()
                return url, await resp.json()

    results = await asyncio.gather(*(fetch(u) for u in urls), return_exceptions=True)
    ok = {u: r for u, r in (x for x in results if not isinstance(x, Exception))}
    failed = [x for x in results if isinstance(x, Exception)]
    logger.info("fetched %d urls, %d failed", len(ok), len(failed))
    return ok`,
  `def test_chunked_splits_evenly():
    assert list(chunked(range(6), 3)) == [[0, 1, 2], [3, 4, 5]]


def test_chunked_keeps_remainder():
    assert list(chunked("abcde", 2)) == [["a", "b"], ["c", "d"], ["e"]]


def test_chunked_rejects_zero():
    with pytest.raises(ValueError):
        list(chunked([1], 0))`,
  `def parse_duration(text: str) -> int:
    """Parse '1h30m', '45s' or '2d' into seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    total, number = 0, ""
    for ch in text.strip():
        if ch.isdigit():
            number += ch
        elif ch in units and number:
            total += int(number) * units[ch]
            number = ""
        else:
            raise ValueError(f"bad duration: {text!r}")
    if number:
        raise ValueError(f"missing unit in {text!r}")
    return total`,
  `import pandas as pd

df = pd.read_csv("sales.csv", parse_dates=["date"])
monthly = (
    df.assign(month=df["date"].dt.to_period("M"))
      .groupby(["month", "region"], as_index=False)["amount"]
      .sum()
      .sort_values(["month", "amount"], ascending=[True, False])
)
print(monthly.head(20).to_string(index=False))`,
  `if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Resize images in a folder.")
    parser.add_argument("src", type=Path)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--quality", type=int, default=85)
    args = parser.parse_args()
    for path in sorted(args.src.glob("*.jpg")):
        with Image.open(path) as im:
            ratio = args.width / im.width
            im.resize((args.width, round(im.height * ratio))).save(
                path.with_suffix(".small.jpg"), quality=args.quality
            )`,
  `class Node:
    __slots__ = ("key", "left", "right")

    def __init__(self, key):
        self.key = key
        self.left = self.right = None


def insert(root, key):
    if root is None:
        return Node(key)
    if key < root.key:
        root.left = insert(root.left, key)
    elif key > root.key:
        root.right = insert(root.right, key)
    return root


def inorder(root):
    if root:
        yield from inorder(root.left)
        yield root.key
        yield from inorder(root.right)`,
];

// ---------------------------------------------------------------- Rust
const RS = [
  `use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::RwLock;`,
  `#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Route {
    pub prefix: String,
    pub upstream: String,
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    #[serde(default)]
    pub retries: u32,
}

fn default_timeout() -> u64 {
    30_000
}`,
  `impl RateLimiter {
    pub fn new(rate: f64, burst: f64) -> Self {
        Self { rate, burst, tokens: burst, last: Instant::now() }
    }

    /// Takes one token if available; returns how long to wait otherwise.
    pub fn try_acquire(&mut self) -> Result<(), Duration> {
        let now = Instant::now();
        let elapsed = now.duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}`,
  `#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("upstream {0} timed out after {1:?}")]
    Timeout(String, Duration),
    #[error("invalid header {name}: {reason}")]
    BadHeader { name: String, reason: String },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}`,
  `pub async fn handle(state: Arc<State>, req: Request<Body>) -> Result<Response<Body>, Error> {
    let route = state
        .routes
        .read()
        .await
        .iter()
        .find(|r| req.uri().path().starts_with(&r.prefix))
        .cloned()
        .ok_or_else(|| Error::NotFound(req.uri().path().to_owned()))?;
    let started = Instant::now();
    let resp = tokio::time::timeout(Duration::from_millis(route.timeout_ms), state.client.request(req))
        .await
        .map_err(|_| Error::Timeout(route.upstream.clone(), started.elapsed()))??;
    state.metrics.observe(&route.prefix, started.elapsed());
    Ok(resp)
}`,
  `fn word_counts(text: &str) -> Vec<(String, usize)> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        *counts.entry(word.to_lowercase()).or_default() += 1;
    }
    let mut v: Vec<_> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}`,
  `#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_case_insensitive() {
        let v = word_counts("The cat and the hat");
        assert_eq!(v[0], ("the".to_string(), 2));
        assert_eq!(v.len(), 4);
    }

    #[tokio::test]
    async fn limiter_refills_over_time() {
        let mut l = RateLimiter::new(10.0, 1.0);
        assert!(l.try_acquire().is_ok());
        assert!(l.try_acquire().is_err());
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert!(l.try_acquire().is_ok());
    }
}`,
  `impl<T: Ord> BinaryHeap<T> {
    pub fn push(&mut self, item: T) {
        self.data.push(item);
        let mut i = self.data.len() - 1;
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.data[i] <= self.data[parent] {
                break;
            }
            self.data.swap(i, parent);
            i = parent;
        }
    }
}`,
  `fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).context("usage: stats <file>")?;
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    for (word, n) in word_counts(&text).into_iter().take(10) {
        println!("{n:>6}  {word}");
    }
    Ok(())
}`,
  `pub trait Store: Send + Sync {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>>;
    fn put(&self, key: &[u8], value: Vec<u8>);
    fn delete(&self, key: &[u8]) -> bool;
}

impl Store for RwLock<BTreeMap<Vec<u8>, Vec<u8>>> {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.read().unwrap().get(key).cloned()
    }
    fn put(&self, key: &[u8], value: Vec<u8>) {
        self.write().unwrap().insert(key.to_vec(), value);
    }
    fn delete(&self, key: &[u8]) -> bool {
        self.write().unwrap().remove(key).is_some()
    }
}`,
];

// ---------------------------------------------------------------- TypeScript
const TS = [
  `import { useEffect, useState } from "react";
import type { User, Team } from "../types";
import { api } from "../lib/api";`,
  `export interface PaginatedResponse<T> {
  items: T[];
  nextCursor: string | null;
  total: number;
}

export async function fetchAll<T>(path: string, pageSize = 100): Promise<T[]> {
  const out: T[] = [];
  let cursor: string | null = null;
  do {
    const qs = new URLSearchParams({ limit: String(pageSize), ...(cursor ? { cursor } : {}) });
    const res = await fetch(\`\${path}?\${qs}\`);
    if (!res.ok) throw new Error(\`GET \${path} failed: \${res.status}\`);
    const page = (await res.json()) as PaginatedResponse<T>;
    out.push(...page.items);
    cursor = page.nextCursor;
  } while (cursor);
  return out;
}`,
  `export function useDebounce<T>(value: T, delayMs = 300): T {
  const [debounced, setDebounced] = useState(value);
  useEffect(() => {
    const id = setTimeout(() => setDebounced(value), delayMs);
    return () => clearTimeout(id);
  }, [value, delayMs]);
  return debounced;
}`,
  `export function TeamList({ teamId }: { teamId: string }) {
  const [members, setMembers] = useState<User[]>([]);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    api.get<Team>(\`/teams/\${teamId}\`)
      .then((team) => setMembers(team.members))
      .catch((e: unknown) => setError(e instanceof Error ? e.message : String(e)));
  }, [teamId]);

  if (error) return <p className="error">{error}</p>;
  return (
    <ul>
      {members.map((m) => (
        <li key={m.id}>{m.displayName} <small>({m.email})</small></li>
      ))}
    </ul>
  );
}`,
  `type Result<T, E = Error> = { ok: true; value: T } | { ok: false; error: E };

export const tryParse = <T>(json: string): Result<T> => {
  try {
    return { ok: true, value: JSON.parse(json) as T };
  } catch (error) {
    return { ok: false, error: error as Error };
  }
};`,
  `const server = http.createServer(async (req, res) => {
  if (req.method === "GET" && req.url === "/healthz") {
    res.writeHead(200, { "content-type": "text/plain" }).end("ok");
    return;
  }
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const body = Buffer.concat(chunks).toString("utf8");
  console.log(\`\${new Date().toISOString()} \${req.method} \${req.url} \${body.length}B\`);
  res.writeHead(404).end();
});

server.listen(Number(process.env.PORT ?? 3000));`,
  `describe("tryParse", () => {
  it("returns the value for valid JSON", () => {
    expect(tryParse<{ a: number }>('{"a":1}')).toEqual({ ok: true, value: { a: 1 } });
  });

  it("returns an error for invalid JSON", () => {
    const r = tryParse("{oops");
    expect(r.ok).toBe(false);
  });
});`,
  `export class EventBus<Events extends Record<string, unknown>> {
  private handlers: { [K in keyof Events]?: Array<(payload: Events[K]) => void> } = {};

  on<K extends keyof Events>(event: K, handler: (payload: Events[K]) => void): () => void {
    (this.handlers[event] ??= []).push(handler);
    return () => {
      this.handlers[event] = this.handlers[event]?.filter((h) => h !== handler);
    };
  }

  emit<K extends keyof Events>(event: K, payload: Events[K]): void {
    for (const h of this.handlers[event] ?? []) h(payload);
  }
}`,
  `export const config = {
  apiBaseUrl: process.env.API_BASE_URL ?? "http://localhost:8080",
  retry: { attempts: 3, baseDelayMs: 250, maxDelayMs: 4_000 },
  features: {
    darkMode: true,
    betaEditor: process.env.NODE_ENV !== "production",
  },
} as const;

export type Config = typeof config;`,
  `async function withRetry<T>(fn: () => Promise<T>, attempts = 3): Promise<T> {
  let lastError: unknown;
  for (let i = 0; i < attempts; i++) {
    try {
      return await fn();
    } catch (e) {
      lastError = e;
      const delay = Math.min(4000, 250 * 2 ** i) * (0.5 + Math.random() / 2);
      await new Promise((r) => setTimeout(r, delay));
    }
  }
  throw lastError;
}`,
];

// ---------------------------------------------------------------- shell
const SH = [
  `#!/usr/bin/env bash
set -euo pipefail

ROOT="$(cd "$(dirname "\${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"`,
  `if ! command -v jq >/dev/null 2>&1; then
  echo "error: jq is required (apt-get install jq)" >&2
  exit 1
fi`,
  `for f in logs/*.log; do
  [ -e "$f" ] || continue
  n=$(grep -c ' ERROR ' "$f" || true)
  printf '%-40s %6d errors\\n' "$(basename "$f")" "$n"
done | sort -k2 -nr | head -n 20`,
  `backup() {
  local src="$1" dest="$2"
  local stamp
  stamp="$(date -u +%Y%m%dT%H%M%SZ)"
  tar -czf "$dest/backup-$stamp.tar.gz" -C "$src" .
  find "$dest" -name 'backup-*.tar.gz' -mtime +14 -delete
  echo "backup written to $dest/backup-$stamp.tar.gz"
}`,
  `docker build -t myapp:"\${GIT_SHA:-dev}" .
docker run --rm -d --name myapp -p 8080:8080 \\
  -e DATABASE_URL="postgres://app:secret@db:5432/app" \\
  -v "$PWD/config:/etc/myapp:ro" \\
  myapp:"\${GIT_SHA:-dev}"
curl -fsS --retry 10 --retry-delay 1 http://127.0.0.1:8080/healthz`,
  `git fetch origin
git checkout -b fix/timeout origin/main
git log --oneline --since="2 weeks ago" -- src/pool.rs | head
git diff --stat origin/main...HEAD`,
  `case "\${1:-}" in
  start) systemctl start myapp ;;
  stop) systemctl stop myapp ;;
  status) systemctl status --no-pager myapp ;;
  *) echo "usage: $0 {start|stop|status}" >&2; exit 2 ;;
esac`,
  `find . -type f -name '*.rs' -not -path './target/*' -print0 \\
  | xargs -0 wc -l \\
  | sort -n \\
  | tail -n 15
du -sh target 2>/dev/null || true`,
  `kubectl -n prod get pods -l app=gateway -o wide
kubectl -n prod logs deploy/gateway --since=10m | grep -i 'timeout' | tail -n 50
kubectl -n prod rollout status deploy/gateway --timeout=120s`,
];

// ---------------------------------------------------------------- Markdown
const MD = [
  `# Gateway

A small HTTP gateway that routes chat-completion requests to several model providers,
enforces per-key budgets, and records usage for billing.`,
  `## Quick start

1. Copy \`config.example.toml\` to \`config.toml\` and fill in your provider keys.
2. Run \`cargo run --release -- --config config.toml\`.
3. Send a request:

\`\`\`bash
curl http://localhost:8080/v1/chat/completions \\
  -H "Authorization: Bearer $KEY" \\
  -d '{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]}'
\`\`\``,
  `## Configuration

| Key | Type | Default | Description |
| --- | --- | --- | --- |
| \`listen\` | string | \`0.0.0.0:8080\` | Address to bind |
| \`timeout_ms\` | integer | \`30000\` | Upstream request timeout |
| \`max_body_bytes\` | integer | \`1048576\` | Largest accepted request body |
| \`log_format\` | \`json\` or \`text\` | \`text\` | Log output format |`,
  `### Why not just use a reverse proxy?

A plain reverse proxy can forward bytes, but it cannot **translate** between provider formats,
count tokens before a request is sent, or stop a key that has spent its budget. Those checks
need to understand the body, which is why the gateway parses every request.`,
  `## Changelog

### 0.4.0
- Added streaming support for Gemini.
- Fixed a panic when an upstream closed the connection mid-stream (#128).
- **Breaking:** \`budget.limit\` is now in cents instead of dollars.

### 0.3.2
- Faster startup: provider clients are created lazily.`,
  `> **Note**
> Token counts for models without a public tokenizer are *estimates*. The gateway
> errs on the side of counting too many tokens, so a request near the limit may be
> rejected even though the provider would have accepted it.`,
  `## Contributing

- Open an issue before starting on a large change.
- Run \`cargo fmt\` and \`cargo clippy --all-targets\` before pushing.
- Every bug fix needs a test that fails without it.
- Keep commits small; one logical change per commit.

See [CONTRIBUTING.md](CONTRIBUTING.md) for the full guide and [the architecture notes](docs/architecture.md) for an overview of the modules.`,
  `## FAQ

**Does the gateway store prompts?**
No. Only metadata (model, token counts, latency, status) is recorded.

**Can I run several instances?**
Yes. Budgets are kept in the shared database, so any instance can serve any key.

**What happens when a provider is down?**
Requests fail over to the next provider listed for the model, if there is one.`,
  `- [x] Parse OpenAI requests
- [x] Translate to Anthropic
- [ ] Translate tool calls for Gemini
- [ ] Per-model context-window checks
  - [ ] exact counts for OpenAI models
  - [ ] calibrated estimates for the rest`,
  `## Architecture

\`\`\`
client ──▶ router ──▶ budget check ──▶ translator ──▶ provider
                         │                               │
                         └──────────── usage log ◀───────┘
\`\`\`

The router picks a provider by model name; the translator converts the request body and,
on the way back, the response or the event stream.`,
];

// ---------------------------------------------------------------- French
const FR = [
  `Bonjour à tous, je voulais vous tenir informés de l'avancement du projet. La nouvelle version de l'application est presque prête : il nous reste à corriger deux anomalies signalées par l'équipe de test et à finaliser la documentation. Nous prévoyons une mise en production la semaine prochaine, sauf imprévu.`,
  `Le village se trouve au fond d'une vallée étroite, entouré de forêts de châtaigniers. Les maisons, construites en pierre sèche, ont des toits de lauzes qui brillent après la pluie. Chaque samedi, le marché s'installe sur la place de l'église, et l'on y vend du fromage de chèvre, du miel et des confitures préparées par les habitants.`,
  `Pour installer le logiciel, téléchargez d'abord l'archive correspondant à votre système, puis décompressez-la dans le dossier de votre choix. Ouvrez ensuite un terminal, placez-vous dans ce dossier et lancez le script d'installation. Si une erreur apparaît, vérifiez que vous disposez des droits d'administration et que la version de Python est au moins la 3.10.`,
  `La réunion d'hier a permis de clarifier plusieurs points. D'abord, le budget alloué au second semestre sera maintenu, malgré la baisse des ventes. Ensuite, le recrutement de deux développeurs supplémentaires est confirmé. Enfin, il a été décidé de reporter le lancement de la version mobile à l'automne, afin de laisser le temps nécessaire aux tests.`,
  `L'intelligence artificielle suscite autant d'enthousiasme que d'inquiétude. Certains y voient un outil capable de libérer les travailleurs des tâches répétitives ; d'autres redoutent une concentration du pouvoir entre les mains de quelques entreprises. Entre ces deux positions, beaucoup de chercheurs plaident pour une régulation souple, fondée sur la transparence et l'évaluation indépendante des systèmes.`,
  `Merci pour votre message. Malheureusement, je ne pourrai pas assister à la conférence du mois prochain, car elle tombe pendant mes congés. Je vous propose néanmoins d'envoyer ma collègue, qui connaît parfaitement le dossier et pourra présenter nos résultats à ma place. N'hésitez pas à me dire si cela vous convient.`,
];

// ---------------------------------------------------------------- German
const DE = [
  `Sehr geehrte Damen und Herren, hiermit möchte ich mich auf die ausgeschriebene Stelle als Softwareentwicklerin bewerben. In den letzten fünf Jahren habe ich in einem mittelständischen Unternehmen an verteilten Systemen gearbeitet, vor allem mit Rust und Go. Besonders reizt mich an Ihrer Ausschreibung die Verantwortung für die Infrastruktur.`,
  `Die Datenbankmigration ist am Wochenende ohne größere Probleme verlaufen. Lediglich ein Index musste nachträglich neu aufgebaut werden, weil die Abfragen auf der Auftragstabelle plötzlich deutlich langsamer waren. Seit Montagmorgen laufen alle Dienste wieder stabil, und die Antwortzeiten liegen sogar etwas unter dem früheren Niveau.`,
  `Der Schwarzwald ist ein Mittelgebirge im Südwesten Deutschlands. Seine dichten Nadelwälder, die tief eingeschnittenen Täler und die zahlreichen kleinen Dörfer ziehen jedes Jahr viele Wanderer an. Bekannt ist die Region außerdem für ihre Kuckucksuhren, den Schinken und die gleichnamige Torte mit Kirschen, Sahne und Schokolade.`,
  `Bitte beachten Sie, dass die Zugangsdaten aus Sicherheitsgründen alle neunzig Tage geändert werden müssen. Das neue Passwort muss mindestens zwölf Zeichen lang sein und darf keinem der letzten fünf Passwörter entsprechen. Bei Fragen wenden Sie sich bitte an den IT-Support, der werktags von acht bis achtzehn Uhr erreichbar ist.`,
  `Vielen Dank für die schnelle Rückmeldung! Ich habe den Fehler inzwischen eingegrenzt: Er tritt nur auf, wenn die Konfigurationsdatei Umlaute enthält und nicht als UTF-8 gespeichert wurde. Ein Hinweis in der Fehlermeldung würde vielen Nutzern helfen. Ich kann gerne einen Patch dafür vorbereiten, falls Sie einverstanden sind.`,
  `Die Energiewende stellt das Stromnetz vor neue Herausforderungen. Wind- und Solaranlagen liefern je nach Wetter sehr unterschiedliche Mengen, während der Verbrauch vergleichsweise gleichmäßig bleibt. Speicher, flexible Verbraucher und ein besser ausgebautes Übertragungsnetz sollen helfen, diese Schwankungen auszugleichen.`,
];

// ---------------------------------------------------------------- Chinese
const ZH = [
  `感谢您的反馈。我们已经确认了这个问题：当请求体超过一兆字节时，网关会在转发之前截断数据，导致上游服务返回解析错误。修复已经合并到主分支，将在下周二的版本中发布。在此之前，您可以通过调大配置中的最大请求体限制来暂时规避这个问题。`,
  `杭州位于中国东南沿海，是浙江省的省会。西湖是这座城市最著名的景点，湖边有许多古老的寺庙、园林和茶馆。每年春天，苏堤上的桃花和柳树吸引大量游客前来观赏。附近的龙井村以出产绿茶闻名，游客可以在茶园里体验采茶和炒茶。`,
  `在编写并发程序时，最常见的错误之一是数据竞争。当两个线程同时访问同一块内存，并且至少有一个线程在写入时，如果没有适当的同步，程序的行为就是未定义的。Rust 的所有权和借用规则可以在编译期间阻止大多数数据竞争，这也是它在系统编程领域越来越受欢迎的原因之一。`,
  `会议纪要：第一，产品团队将在本月底前完成新版界面的设计稿；第二，后端团队负责优化订单查询接口，目标是把平均响应时间降低到两百毫秒以内；第三，测试团队需要补充支付流程的自动化测试用例。下次会议定于下周三下午两点举行。`,
  `人工智能的发展正在改变许多行业。在医疗领域，算法可以帮助医生更早地发现病变；在教育领域，个性化的学习系统能够根据学生的进度调整内容。然而，数据隐私、算法偏见以及责任归属等问题也随之而来，需要政府、企业和学术界共同努力加以解决。`,
  `请按照以下步骤重置密码：首先，在登录页面点击“忘记密码”；然后，输入注册时使用的电子邮箱地址；系统会向该邮箱发送一封包含验证链接的邮件，链接在三十分钟内有效。点击链接后，设置一个至少包含八个字符的新密码即可完成重置。`,
];

// ---------------------------------------------------------------- Japanese
const JA = [
  `お問い合わせいただきありがとうございます。ご指摘の不具合について調査したところ、設定ファイルに全角スペースが含まれている場合に読み込みが失敗することが分かりました。次回のアップデートで修正する予定ですが、それまでは該当箇所を半角スペースに置き換えてご利用ください。`,
  `京都は千年以上にわたって日本の都として栄えた町です。市内には多くの寺社が残り、四季折々の景色を楽しむことができます。春は桜、秋は紅葉の名所として知られ、毎年国内外から大勢の観光客が訪れます。静かな路地を歩くと、昔ながらの町家や小さな和菓子屋に出会えます。`,
  `本日の会議では、来期の開発計画について話し合いました。主な決定事項は三つあります。第一に、モバイルアプリの全面的な改修を優先すること。第二に、テストの自動化を進めて、リリース前の確認作業を半分に減らすこと。第三に、新しいメンバーの受け入れ体制を整えることです。`,
  `プログラミングを学び始めたばかりの人には、まず小さな目標を立てることをおすすめします。たとえば、電卓や簡単な日記アプリなど、自分が実際に使いたいものを作ってみると、必要な知識が自然に身につきます。分からないことがあれば、エラーメッセージをよく読み、公式ドキュメントを調べる習慣をつけましょう。`,
  `昨日から雨が降り続いていて、川の水位がかなり上がっています。気象庁によると、今夜から明日の朝にかけて、さらに激しい雨が降るおそれがあるそうです。低い土地に住んでいる方は、早めに避難場所を確認し、非常用の水や食料、懐中電灯などを準備しておいてください。`,
  `このライブラリは、大規模なテキストを高速に処理するために設計されています。内部では文字列をできるだけコピーせずに扱い、必要な場合にのみメモリを確保します。そのため、数ギガバイトのログファイルでも、一般的なノートパソコンで数秒以内に集計を終えることができます。`,
];

// ---------------------------------------------------------------- generated kinds
const PATHS = ['src/main.rs', 'src/router.rs', 'src/pool.rs', 'app/models/user.py', 'web/src/components/TeamList.tsx', 'scripts/deploy.sh', 'docs/setup.md', 'tests/test_api.py', 'lib/cache.ts', 'config/default.toml'];
const WORDS = ['timeout', 'retry', 'budget', 'router', 'upstream', 'cache', 'session', 'token', 'invoice', 'customer', 'region', 'latency', 'stream', 'report', 'schedule', 'deploy'];
const NAMES = ['Alice Martin', 'Bob Chen', 'Carla Gómez', 'Dmitri Ivanov', 'Emma Schulz', 'Farid Haddad', 'Grace Okafor', 'Hiro Tanaka'];
const CITIES = ['Paris', 'Berlin', 'Tokyo', 'São Paulo', 'Nairobi', 'Toronto', 'Sydney', 'Mumbai'];

function isoTime(rng, base, stepMs) {
  return new Date(base + stepMs).toISOString();
}

function uuid(rng) {
  return `${hex(rng, 8)}-${hex(rng, 4)}-4${hex(rng, 3)}-a${hex(rng, 3)}-${hex(rng, 12)}`;
}

function jsonArgs(rng, variant) {
  const codePools = [PY, RS, TS, SH];
  switch (variant % 5) {
    case 0: // write_file with source text inside a JSON string
      return JSON.stringify({
        path: pick(rng, PATHS),
        content: shuffled(rng, pick(rng, codePools)).slice(0, 3).join('\n\n') + '\n',
      });
    case 1: // edit with old/new strings
      return JSON.stringify({
        file_path: pick(rng, PATHS),
        old_string: pick(rng, PY).split('\n').slice(0, 6).join('\n'),
        new_string: pick(rng, PY).split('\n').slice(0, 8).join('\n'),
        replace_all: false,
      }, null, 2);
    case 2: // bash tool
      return JSON.stringify({
        command: shuffled(rng, SH).slice(0, 2).join('\n'),
        description: `Check ${pick(rng, WORDS)} and ${pick(rng, WORDS)} on the staging host`,
        timeout: int(rng, 10, 600) * 1000,
      });
    case 3: // search/query tool with filters
      return JSON.stringify({
        query: `${pick(rng, WORDS)} ${pick(rng, WORDS)} error after upgrade`,
        filters: {
          repo: 'acme/gateway', state: 'open', labels: shuffled(rng, WORDS).slice(0, 3),
          created_after: '2024-03-01', authors: shuffled(rng, NAMES).slice(0, 2),
        },
        sort: { field: 'updated', order: 'desc' }, limit: 25, include_comments: true,
        fields: ['id', 'title', 'body', 'author', 'labels', 'created_at', 'updated_at', 'url'],
      }, null, 2);
    default: // function-calling schema (tool declaration)
      return JSON.stringify({
        name: 'create_calendar_event',
        description: 'Create an event in the user\'s calendar and invite attendees.',
        parameters: {
          type: 'object',
          properties: {
            title: { type: 'string', description: 'Short title shown in the calendar' },
            start: { type: 'string', format: 'date-time', description: 'Start time in ISO 8601' },
            duration_minutes: { type: 'integer', minimum: 5, maximum: 480 },
            attendees: { type: 'array', items: { type: 'string', format: 'email' } },
            location: { type: 'string' },
            reminders: { type: 'array', items: { type: 'object', properties: { minutes_before: { type: 'integer' }, method: { type: 'string', enum: ['email', 'popup'] } } } },
          },
          required: ['title', 'start', 'duration_minutes'],
        },
      }, null, int(rng, 0, 1) ? 2 : undefined);
  }
}

function jsonResult(rng, variant, target) {
  const build = (n) => {
    switch (variant % 5) {
      case 0: // issue search results
        return {
          total_count: n * 7, incomplete_results: false,
          items: Array.from({ length: n }, (_, i) => ({
            id: 100000 + int(rng, 0, 899999), number: 100 + i * 3 + int(rng, 0, 2),
            title: `${pick(rng, WORDS)} ${pick(rng, ['fails', 'is slow', 'leaks', 'returns 500', 'hangs'])} when ${pick(rng, WORDS)} is ${pick(rng, ['empty', 'large', 'missing', 'disabled'])}`,
            user: { login: pick(rng, NAMES).split(' ')[0].toLowerCase(), id: int(rng, 1000, 99999) },
            labels: shuffled(rng, ['bug', 'p1', 'needs-repro', 'good first issue', 'performance']).slice(0, int(rng, 1, 3)),
            state: pick(rng, ['open', 'closed']), comments: int(rng, 0, 40),
            created_at: isoTime(rng, Date.UTC(2024, 2, 1), i * 86400000 * 3),
            html_url: `https://example.org/acme/gateway/issues/${100 + i}`,
          })),
        };
      case 1: // directory listing
        return {
          path: '/work/project', entries: Array.from({ length: n * 2 }, () => ({
            name: pick(rng, PATHS).split('/').pop().replace('.', `_${hex(rng, 2)}.`),
            type: pick(rng, ['file', 'file', 'dir']), size: int(rng, 0, 200000),
            modified: isoTime(rng, Date.UTC(2024, 5, 1), int(rng, 0, 1e9)),
          })),
        };
      case 2: // weather / API response
        return {
          location: { city: pick(rng, CITIES), lat: +(rng() * 180 - 90).toFixed(4), lon: +(rng() * 360 - 180).toFixed(4) },
          units: 'metric', hourly: Array.from({ length: n * 2 }, (_, h) => ({
            time: isoTime(rng, Date.UTC(2024, 6, 14), h * 3600000), temp_c: +(10 + rng() * 20).toFixed(1),
            humidity: int(rng, 30, 95), wind_kph: +(rng() * 40).toFixed(1), condition: pick(rng, ['clear', 'partly cloudy', 'rain', 'thunderstorm', 'fog']),
          })),
        };
      case 3: // database rows
        return {
          columns: ['id', 'customer', 'email', 'amount_cents', 'currency', 'status', 'created_at'],
          rows: Array.from({ length: n * 2 }, () => {
            const name = pick(rng, NAMES);
            return [int(rng, 1, 99999), name, `${name.split(' ')[0].toLowerCase()}@example.com`, int(rng, 100, 500000), pick(rng, ['EUR', 'USD', 'JPY']), pick(rng, ['paid', 'refunded', 'pending']), isoTime(rng, Date.UTC(2024, 0, 1), int(rng, 0, 3e10))];
          }),
          row_count: n * 2, truncated: false,
        };
      default: // tool error + test report
        return {
          exit_code: 101, duration_ms: int(rng, 1000, 90000),
          stdout: Array.from({ length: n * 2 }, () => `test ${pick(rng, ['router', 'pool', 'budget', 'translate'])}::${pick(rng, WORDS)}_${pick(rng, WORDS)} ... ${pick(rng, ['ok', 'ok', 'ok', 'FAILED'])}`).join('\n'),
          stderr: `thread 'pool::timeout_${pick(rng, WORDS)}' panicked at src/pool.rs:${int(rng, 40, 400)}:9:\nassertion \`left == right\` failed\n  left: ${int(rng, 0, 9)}\n right: ${int(rng, 0, 9)}\nnote: run with \`RUST_BACKTRACE=1\` environment variable to display a backtrace`,
          uuid: uuid(rng),
        };
    }
  };
  const indent = variant % 2 === 0 ? 2 : undefined;
  let n = 1;
  let best = JSON.stringify(build(n), null, indent);
  for (;;) {
    const next = JSON.stringify(build(n + 1), null, indent);
    if (next.length > MAX_CHARS) break;
    best = next;
    n++;
    if (best.length >= target) break;
  }
  return best;
}

function makeDiff(rng, target) {
  const pools = [[PY, 'py'], [RS, 'rs'], [TS, 'ts'], [SH, 'sh']];
  let out = '';
  for (let file = 0; file < 6; file++) {
    const [pool, ext] = pick(rng, pools);
    const old = pick(rng, pool).split('\n');
    const lines = [];
    let removed = 0, added = 0;
    for (let i = 0; i < old.length; i++) {
      const l = old[i];
      const r = rng();
      if (r < 0.12 && l.trim()) {
        lines.push('-' + l);
        const changed = l.replace(/\b(\w{4,})\b/, (w) => pick(rng, WORDS) + '_' + w).replace(/\d+/, (d) => String(Number(d) * 2));
        lines.push('+' + changed);
        removed++; added++;
      } else if (r < 0.17) {
        lines.push(' ' + l);
        const indent = l.match(/^\s*/)[0];
        lines.push('+' + indent + pick(rng, [
          ext === 'py' ? `logger.debug("${pick(rng, WORDS)}=%s", ${pick(rng, WORDS)})` : ext === 'rs' ? `tracing::debug!(${pick(rng, WORDS)} = ?${pick(rng, WORDS)}, "checked");` : ext === 'ts' ? `console.debug("${pick(rng, WORDS)}", ${pick(rng, WORDS)});` : `echo "${pick(rng, WORDS)}: ok"`,
          ext === 'py' || ext === 'sh' ? `# TODO: handle ${pick(rng, WORDS)} here` : `// TODO: handle ${pick(rng, WORDS)} here`,
        ]));
        added++;
      } else if (r < 0.2 && l.trim()) {
        lines.push('-' + l);
        removed++;
      } else {
        lines.push(' ' + l);
      }
    }
    if (removed + added === 0) continue;
    const path = `src/${pick(rng, WORDS)}.${ext}`;
    const start = int(rng, 1, 300);
    const block = `diff --git a/${path} b/${path}\nindex ${hex(rng, 7)}..${hex(rng, 7)} 100644\n--- a/${path}\n+++ b/${path}\n@@ -${start},${old.length} +${start},${old.length - removed + added} @@${ext === 'sh' ? '' : ' ' + pick(rng, ['impl Pool {', 'class Config:', 'export function load() {', 'fn main() {'])}\n${lines.join('\n')}\n`;
    if ((out + block).length > MAX_CHARS) break;
    out += block;
    if (out.length >= target) break;
  }
  return out;
}

function makeLog(rng, variant, target) {
  const base = Date.UTC(2024, 8, 3, 14, 2, 11);
  let t = 0;
  const line = () => {
    t += int(rng, 1, 4000);
    const ts = isoTime(rng, base, t);
    switch (variant % 5) {
      case 0: // tracing-style service log
        return `${ts} ${pick(rng, [' INFO', ' INFO', ' WARN', 'ERROR', 'DEBUG'])} gateway::${pick(rng, ['router', 'pool', 'budget', 'provider::openai', 'provider::anthropic'])}: ${pick(rng, ['request finished', 'upstream responded', 'retrying request', 'connection reset by peer', 'budget checked'])} request_id=${hex(rng, 16)} model=${pick(rng, ['gpt-4o', 'claude-sonnet-4', 'gemini-2.5-pro'])} status=${pick(rng, [200, 200, 200, 429, 500, 502])} latency_ms=${int(rng, 20, 9000)}`;
      case 1: // nginx access log
        return `${int(rng, 10, 223)}.${int(rng, 0, 255)}.${int(rng, 0, 255)}.${int(rng, 1, 254)} - - [03/Sep/2024:14:${String(2 + Math.floor(t / 60000)).padStart(2, '0')}:${String(Math.floor(t / 1000) % 60).padStart(2, '0')} +0000] "${pick(rng, ['GET', 'POST', 'GET', 'PUT'])} ${pick(rng, ['/v1/chat/completions', '/v1/models', '/healthz', '/static/app.js', '/api/users?page=' + int(rng, 1, 40)])} HTTP/1.1" ${pick(rng, [200, 200, 304, 404, 499, 502])} ${int(rng, 0, 90000)} "-" "${pick(rng, ['Mozilla/5.0 (X11; Linux x86_64)', 'curl/8.5.0', 'python-requests/2.31.0', 'okhttp/4.12.0'])}"`;
      case 2: // Python logging + traceback fragments
        return rng() < 0.15
          ? `Traceback (most recent call last):\n  File "/srv/app/${pick(rng, PATHS)}", line ${int(rng, 10, 400)}, in ${pick(rng, WORDS)}\n    result = client.${pick(rng, WORDS)}(payload, timeout=${int(rng, 1, 60)})\n  File "/usr/lib/python3.12/site-packages/httpx/_client.py", line ${int(rng, 100, 1800)}, in send\n    raise exc\nhttpx.ReadTimeout: The read operation timed out`
          : `${ts.replace('T', ' ').replace('Z', '')} ${pick(rng, ['INFO', 'INFO', 'WARNING', 'ERROR'])} [${pick(rng, ['worker-1', 'worker-2', 'scheduler', 'api'])}] ${pick(rng, ['Processed batch', 'Queue depth', 'Slow query', 'Cache miss'])} ${pick(rng, WORDS)}=${int(rng, 0, 5000)} elapsed=${(rng() * 5).toFixed(3)}s`;
      case 3: // JSON lines
        return JSON.stringify({ ts, level: pick(rng, ['info', 'info', 'warn', 'error']), msg: pick(rng, ['job completed', 'job failed', 'lease renewed', 'disk usage high']), job: `${pick(rng, WORDS)}-${int(rng, 1, 999)}`, attempt: int(rng, 1, 5), host: `node-${int(rng, 1, 12)}.internal`, duration_ms: int(rng, 1, 60000) });
      default: // build / test output
        return pick(rng, [
          `   Compiling ${pick(rng, ['serde', 'tokio', 'hyper', 'regex', 'gateway'])} v${int(rng, 0, 2)}.${int(rng, 0, 40)}.${int(rng, 0, 20)}`,
          `test ${pick(rng, ['router', 'pool', 'budget'])}::tests::${pick(rng, WORDS)}_${pick(rng, WORDS)} ... ${pick(rng, ['ok', 'ok', 'ok', 'FAILED', 'ignored'])}`,
          `warning: unused variable: \`${pick(rng, WORDS)}\`\n  --> src/${pick(rng, WORDS)}.rs:${int(rng, 1, 500)}:${int(rng, 5, 30)}\n   |\n   = note: \`#[warn(unused_variables)]\` on by default`,
          `npm WARN deprecated ${pick(rng, ['inflight', 'glob', 'rimraf'])}@${int(rng, 1, 8)}.${int(rng, 0, 9)}.${int(rng, 0, 9)}: This module is not supported`,
        ]);
    }
  };
  let out = '';
  for (;;) {
    const l = line();
    const next = out ? out + '\n' + l : l;
    if (next.length > MAX_CHARS) break;
    out = next;
    if (out.length >= target) break;
  }
  return out;
}

const MIXED = [
  (rng) => `I'm getting this error when I run the tests, any idea what's wrong?\n\n\`\`\`\n${makeLog(rng, 4, 500)}\n\`\`\`\n\nHere is the function it complains about:\n\n\`\`\`rust\n${pick(rng, RS)}\n\`\`\`\n\nI already tried \`cargo clean\` and updating the toolchain.`,
  (rng) => `Bonjour ! Pourquoi cette fonction renvoie-t-elle toujours None ?\n\n\`\`\`python\n${pick(rng, PY)}\n\`\`\`\n\nJ'ai vérifié que la liste n'est pas vide. Merci d'avance 🙏`,
  (rng) => `请帮我看看这段代码有什么问题，运行时总是超时：\n\n\`\`\`typescript\n${pick(rng, TS)}\n\`\`\`\n\n日志如下：\n\n${makeLog(rng, 3, 400)}`,
  (rng) => JSON.stringify({
    role: 'tool', name: 'translate',
    content: { source: 'en', targets: { ja: pick(rng, JA), de: pick(rng, DE), fr: pick(rng, FR) }, detected_confidence: 0.98 },
  }, null, 2),
  (rng) => `Hi team 👋\n\nQuick update on the incident from last night (INC-${int(rng, 1000, 9999)}):\n\n- **Impact:** ~${int(rng, 2, 15)}% of requests to \`/v1/chat/completions\` returned 502 between 02:10 and 02:47 UTC.\n- **Cause:** ${pick(rng, PROSE_EN).slice(0, 220)}\n- **Fix:** rolled back to v0.4.1, see https://example.org/acme/gateway/pull/${int(rng, 100, 999)}\n\nRelevant logs:\n\n\`\`\`\n${makeLog(rng, 0, 700)}\n\`\`\`\n\nThanks to everyone who jumped in! 🎉 ドキュメントも更新しました。`,
];

// ---------------------------------------------------------------- assembly
// [kind, count, targets in characters]
const PLAN = [
  ['prose-en', 6, (rng, target) => compose(rng, PROSE_EN, target)],
  ['code-python', 5, (rng, target) => compose(rng, PY, target)],
  ['code-rust', 5, (rng, target) => compose(rng, RS, target)],
  ['code-typescript', 5, (rng, target) => compose(rng, TS, target)],
  ['code-shell', 4, (rng, target) => compose(rng, SH, target)],
  ['json-args', 5, (rng, target, i) => jsonArgs(rng, i)],
  ['json-result', 5, (rng, target, i) => jsonResult(rng, i, target)],
  ['diff', 5, (rng, target) => makeDiff(rng, target)],
  ['log', 5, (rng, target, i) => makeLog(rng, i, target)],
  ['markdown', 5, (rng, target) => compose(rng, MD, target)],
  ['prose-fr', 4, (rng, target) => compose(rng, FR, target, '\n\n')],
  ['prose-de', 4, (rng, target) => compose(rng, DE, target, '\n\n')],
  ['prose-zh', 4, (rng, target) => compose(rng, ZH, target / 3, '\n\n')],
  ['prose-ja', 4, (rng, target) => compose(rng, JA, target / 3, '\n\n')],
  ['mixed', 5, (rng, target, i) => MIXED[i % MIXED.length](rng)],
];
const TARGETS = [300, 3800, 900, 2200, 600, 1500];

export function buildCorpus() {
  const rng = mulberry32(20240917);
  const texts = [];
  for (const [kind, count, make] of PLAN) {
    for (let i = 0; i < count; i++) {
      const target = TARGETS[(i + kind.length) % TARGETS.length];
      const text = make(rng, target, i);
      if (text.length < MIN_CHARS || text.length > MAX_CHARS) {
        throw new Error(`${kind} #${i}: ${text.length} chars is outside ${MIN_CHARS}..${MAX_CHARS}`);
      }
      texts.push({ kind, text });
    }
  }
  return texts;
}
