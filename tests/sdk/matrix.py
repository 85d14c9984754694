"""Every official SDK x every channel kind, through a real Switchyard.

Starts three standalone mocks (one answering text, one a tool call, one reasoning then text; each speaks
OpenAI, Anthropic and Gemini), a Bedrock mock (botocore checks every signature) and a Vertex mock
(google-auth checks every token grant) for each of them, and a gateway whose models route to
channels of kind openai, anthropic, gemini, bedrock (Converse, and InvokeModel for Claude) and
vertex (Gemini, Claude and an open model). Then drives the gateway with the openai (Chat Completions and Responses),
anthropic and google-genai SDKs: plain, streaming, tools and streamed tools, in every client x
channel combination; the
anthropic SDK also gets every provider's reasoning as thinking blocks and sends them back.
Then the calls beside chat, in every client x channel combination: token counting (forwarded
to a channel of the client's protocol, which answers a count the checks know, else counted by
the gateway: within 10 % of the family's own tokenizer on a fixed text, and more for a longer
text, a tool, a system prompt or an image), model lists (paged, filtered by the key's groups),
retrieval and its 404, and the responses the gateway keeps, read, listed and deleted. And the
response cache: a question asked again through each SDK is a hit, parsed like the first answer,
whole and streamed.
Any warning is an error. Prints 'N passed, N failed' and exits non-zero on a failure.

    python tests/sdk/matrix.py path/to/switchyard
"""

import base64
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
import warnings

warnings.simplefilter("error")

import anthropic  # noqa: E402
import openai  # noqa: E402
from google import genai  # noqa: E402
from google.genai import errors as genai_errors  # noqa: E402
from google.genai import types  # noqa: E402

BIN = sys.argv[1]
KEY = "sk-matrix-key-0001"
TEXT = "Hello from the matrix."
TOOL_ARGS = {"city": "Paris"}
REASONING = "Thinking it over."
# The clouds, each behind its own mock (tests/mocks/): Bedrock's Converse (and InvokeModel for the
# Anthropic SDK's Claude requests), Vertex's three publishers.
CLOUD_KINDS = ("bedrock", "bedrock-claude", "vertex-gemini", "vertex-claude", "vertex-openapi")
KINDS = ("openai", "anthropic", "gemini", "responses") + CLOUD_KINDS
MOCKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mocks")
AWS_KEY, AWS_SECRET = "AKIAMATRIXTEST0001", "matrix-secret-access-key-0001"
# Each cloud kind's upstream model name (Vertex: and its publisher).
CLOUD_MODELS = {
    "bedrock": ("amazon.nova-pro-v1:0", None),
    "bedrock-claude": ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", None),
    "vertex-gemini": ("gemini-2.5-flash", None),
    "vertex-claude": ("claude-sonnet-4-5@20250929", None),
    "vertex-openapi": ("meta/llama-3.3-70b-instruct-maas", "openapi"),
}
NARROW_KEY = "sk-matrix-narrow-01"
# The one key whose answers the response cache keeps (the others' policy is off).
CACHED_KEY = "sk-matrix-cached-01"
ADMIN = "matrix-admin-token-0001"
# What the text mock answers a token count with.
COUNTED = 4242
# Counted by the gateway with each family's tokenizer: the client protocol, the model, and a
# fixed text of a kind that family's calibration fits, with its count by the family's own
# tokenizer (tests/fixtures/tokens/estimates.json).
FAMILY_MODELS = ("claude-sonnet-4-5", "gemini-2.5-flash", "gpt-4o")
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tokens", "estimates.json")
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def spawn(args, marker):
    p = subprocess.Popen([BIN, "--log-level", "error", *args], stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        line = p.stdout.readline()
        m = re.search(marker + r"(\S+)", line)
        if m:
            return p, m.group(1)
    raise RuntimeError(f"{args[0]} did not start")


def spawn_py(script, args, marker):
    """A cloud mock, run by this very Python (it has botocore and google-auth)."""
    p = subprocess.Popen([sys.executable, os.path.join(MOCKS, script), *args], stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        line = p.stdout.readline()
        m = re.search(marker + r"(\S+)", line)
        if m:
            return p, m.group(1)
    raise RuntimeError(f"{script} did not start")


def cloud_channel(kind, purpose, mock_url, key_file):
    """A channel of a cloud kind in front of its mock, serving `{kind}-{purpose}`."""
    upstream, publisher = CLOUD_MODELS[kind]
    pub = f', publisher = "{publisher}"' if publisher else ""
    model = f'models = [{{ name = "{kind}-{purpose}", upstream = "{upstream}"{pub} }}]\n'
    if kind.startswith("bedrock"):
        return (f'[[channels]]\nname = "{kind}-{purpose}"\nprovider = "bedrock"\nregion = "us-east-1"\n'
                f'base_url = "{mock_url}"\naws = {{ access_key_id = "{AWS_KEY}", secret_access_key = "{AWS_SECRET}" }}\n{model}\n')
    return (f'[[channels]]\nname = "{kind}-{purpose}"\nprovider = "vertex"\nproject = "matrix"\nlocation = "us-east5"\n'
            f'base_url = "{mock_url}/v1"\ncredentials_file = "{key_file}"\n{model}\n')


def start_clouds(procs, work, urls):
    """A Bedrock mock and a Vertex mock per purpose (text, tools, reasoning); their URLs and key files."""
    bedrock_args = {
        "text": ["--text", TEXT],
        "tools": ["--tool-call", "weather=" + json.dumps(TOOL_ARGS)],
        "reason": ["--text", TEXT, "--reasoning", REASONING],
    }
    out = {}
    for purpose, upstream in urls.items():
        b, b_url = spawn_py("bedrock.py", ["--access-key", AWS_KEY, "--secret-key", AWS_SECRET,
                                           *bedrock_args[purpose]], "bedrock mock listening on ")
        key = os.path.join(work, f"sa-{purpose}.json")
        v, v_url = spawn_py("vertex.py", ["--upstream", upstream.rsplit("/v1", 1)[0], "--write-key", key],
                            "vertex mock listening on ")
        procs += [b, v]
        out[purpose] = (b_url, v_url, key)
    return out


def main():
    procs = []
    work = tempfile.mkdtemp()
    try:
        spec = os.path.join(work, "tools.toml")
        with open(spec, "w") as f:
            f.write('chunks = 3\ntool_call = { name = "weather", arguments = %s }\n' % json.dumps(json.dumps(TOOL_ARGS)))
        reason_spec = os.path.join(work, "reason.toml")
        with open(reason_spec, "w") as f:
            f.write(f"chunks = 3\ntext = {json.dumps(TEXT)}\nreasoning = {json.dumps(REASONING)}\n")
        reason_mock, reason_url = spawn(["mock", "--port", "0", "--spec", reason_spec], "listening on ")
        procs.append(reason_mock)
        # The text mock also answers every token count with a number the checks know.
        text_spec = os.path.join(work, "text.toml")
        with open(text_spec, "w") as f:
            f.write(f"chunks = 3\ntext = {json.dumps(TEXT)}\ncount_tokens = {COUNTED}\n")
        text_mock, text_url = spawn(["mock", "--port", "0", "--spec", text_spec], "listening on ")
        tool_mock, tool_url = spawn(["mock", "--port", "0", "--spec", spec], "listening on ")
        procs += [text_mock, tool_mock]
        root = lambda url: url.rsplit("/v1", 1)[0]  # noqa: E731
        clouds = start_clouds(procs, work, {"text": text_url, "tools": tool_url, "reason": reason_url})
        channels = ""
        for kind in KINDS:
            for purpose, url in (("text", text_url), ("tools", tool_url), ("reason", reason_url)):
                if kind in CLOUD_KINDS:
                    b_url, v_url, key = clouds[purpose]
                    channels += cloud_channel(kind, purpose, b_url if kind.startswith("bedrock") else v_url, key)
                    continue
                base = root(url) + ("/v1beta" if kind == "gemini" else "/v1")
                # `responses`: an OpenAI channel that serves the Responses API itself.
                provider, extra = ("openai", "responses = true\n") if kind == "responses" else (kind, "")
                channels += (
                    f'[[channels]]\nname = "{kind}-{purpose}"\nprovider = "{provider}"\nbase_url = "{base}"\n'
                    f'api_keys = ["sk-upstream-matrix"]\nmodels = ["{kind}-{purpose}"]\n{extra}\n'
                )
        # Models named like their families on a chat-only channel: every count of theirs is
        # made by the gateway. And one model only the narrow key's group reaches.
        families = ", ".join(f'"{m}"' for m in FAMILY_MODELS)
        channels += (
            f'[[channels]]\nname = "local-count"\nprovider = "openai"\nbase_url = "{text_url}"\n'
            f'api_keys = ["sk-upstream-matrix"]\nmodels = [{families}]\n\n'
            f'[[channels]]\nname = "narrow"\nprovider = "openai"\nbase_url = "{text_url}"\n'
            f'api_keys = ["sk-upstream-matrix"]\nmodels = ["narrow-model"]\ngroups = ["narrow"]\n\n'
        )
        config = os.path.join(work, "gw.toml")
        with open(config, "w") as f:
            f.write(f'[server]\nadmin_token = "{ADMIN}"\n[log]\nsqlite_path = "{work}/gw.db"\n'
                    f'[cache]\nenabled = true\n'
                    f'[[keys]]\nname = "matrix"\nkey = "{KEY}"\ncache = {{ mode = "off" }}\n'
                    f'[[keys]]\nname = "narrow"\nkey = "{NARROW_KEY}"\ngroups = ["narrow"]\n'
                    f'cache = {{ mode = "off" }}\n'
                    f'[[keys]]\nname = "cached"\nkey = "{CACHED_KEY}"\n\n{channels}')
        gw, gw_url = spawn(["serve", "--listen", "127.0.0.1:0", "--config", config], "switchyard listening on ")
        procs.append(gw)
        return run(gw_url)
    finally:
        for p in procs:
            p.kill()
            p.wait()
            p.stdout.close()


def check_openai(url, kind):
    c = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    r = c.chat.completions.create(model=f"{kind}-text", messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content == TEXT, r
    s = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model=f"{kind}-text", messages=[{"role": "user", "content": "hi"}], stream=True) if ch.choices)
    assert s == TEXT, s
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    r = c.chat.completions.create(model=f"{kind}-tools", messages=[{"role": "user", "content": "w"}], tools=tools)
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "weather" and json.loads(call.function.arguments) == TOOL_ARGS, r
    with c.chat.completions.stream(model=f"{kind}-tools", messages=[{"role": "user", "content": "w"}], tools=tools) as st:
        final = st.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert json.loads(call.function.arguments) == TOOL_ARGS, final


def check_anthropic(url, kind):
    c = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0)
    m = c.messages.create(model=f"{kind}-text", max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    assert m.content[0].text == TEXT, m
    with c.messages.stream(model=f"{kind}-text", max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as st:
        s = "".join(st.text_stream)
    assert s == TEXT, s
    tools = [{"name": "weather", "input_schema": {"type": "object"}}]
    m = c.messages.create(model=f"{kind}-tools", max_tokens=64, tools=tools, messages=[{"role": "user", "content": "w"}])
    use = [b for b in m.content if b.type == "tool_use"][0]
    assert use.name == "weather" and use.input == TOOL_ARGS and m.stop_reason == "tool_use", m
    with c.messages.stream(model=f"{kind}-tools", max_tokens=64, tools=tools, messages=[{"role": "user", "content": "w"}]) as st:
        final = st.get_final_message()
    use = [b for b in final.content if b.type == "tool_use"][0]
    assert use.input == TOOL_ARGS, final
    # Reasoning from any provider arrives as a thinking block, and goes back in history.
    ask = [{"role": "user", "content": "think"}]
    m = c.messages.create(model=f"{kind}-reason", max_tokens=64, messages=ask)
    assert [b.type for b in m.content] == ["thinking", "text"] and m.content[0].thinking == REASONING, m
    with c.messages.stream(model=f"{kind}-reason", max_tokens=64, messages=ask) as st:
        final = st.get_final_message()
    assert final.content[0].type == "thinking" and final.content[0].thinking == REASONING, final
    history = ask + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]},
                     {"role": "user", "content": "again"}]
    m = c.messages.create(model=f"{kind}-reason", max_tokens=64, messages=history)
    assert m.content[-1].text == TEXT, m


def check_responses(url, kind):
    """The Responses API (Codex's) through every channel kind: plain, streamed, a tool call, and
    streamed tool arguments, then the call's output sent back as history."""
    c = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    r = c.responses.create(model=f"{kind}-text", input="hi", instructions="Be brief.")
    assert r.output_text == TEXT and r.status == "completed", r
    assert r.usage.output_tokens > 0, r
    events = list(c.responses.create(model=f"{kind}-text", input=[{"role": "user", "content": "hi"}], stream=True))
    types_ = [e.type for e in events]
    assert types_[:2] == ["response.created", "response.in_progress"], types_
    assert types_[-1] == "response.completed", types_
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == TEXT, types_
    assert events[-1].response.output_text == TEXT, events[-1]
    assert [e.sequence_number for e in events] == list(range(len(events))), types_
    tools = [{"type": "function", "name": "weather", "parameters": {"type": "object"}}]
    r = c.responses.create(model=f"{kind}-tools", input="w", tools=tools)
    call = [o for o in r.output if o.type == "function_call"][0]
    assert call.name == "weather" and json.loads(call.arguments) == TOOL_ARGS, r
    with c.responses.stream(model=f"{kind}-tools", input="w", tools=tools) as st:
        args = "".join(e.delta for e in st if e.type == "response.function_call_arguments.delta")
        final = st.get_final_response()
    assert json.loads(args) == TOOL_ARGS, args
    call = [o for o in final.output if o.type == "function_call"][0]
    assert json.loads(call.arguments) == TOOL_ARGS, final
    # The round trip a coding agent makes: its call and the call's output, sent back whole.
    history = [{"role": "user", "content": "w"}, call.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]
    r = c.responses.create(model=f"{kind}-text", input=history, tools=tools, store=False)
    assert r.output_text == TEXT, r


def check_gemini(url, kind):
    c = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=url))
    r = c.models.generate_content(model=f"{kind}-text", contents="hi")
    assert r.text == TEXT, r
    s = "".join(ch.text or "" for ch in c.models.generate_content_stream(model=f"{kind}-text", contents="hi"))
    assert s == TEXT, s
    decl = types.FunctionDeclaration(name="weather", parameters={"type": "object"})
    cfg = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[decl])],
                                      automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    r = c.models.generate_content(model=f"{kind}-tools", contents="w", config=cfg)
    fc = r.function_calls[0]
    assert fc.name == "weather" and fc.args == TOOL_ARGS, r
    calls = [fc for ch in c.models.generate_content_stream(model=f"{kind}-tools", contents="w", config=cfg)
             for fc in (ch.function_calls or [])]
    assert len(calls) == 1 and calls[0].args == TOOL_ARGS, calls


def cache_hits(url):
    req = urllib.request.Request(url + "/admin/cache", headers={"Authorization": f"Bearer {ADMIN}"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)["hits"]


def check_cache(url, kind):
    """The response cache through every SDK: a question asked again is a hit (said in the
    header where the SDK shows it, and counted by the admin API), parsed like the first
    answer, whole and streamed, in each client protocol."""
    model = f"{kind}-text"
    before = cache_hits(url)
    o = openai.OpenAI(base_url=url + "/v1", api_key=CACHED_KEY, max_retries=0)
    ask = [{"role": "user", "content": f"cache chat {kind}"}]
    said = [o.chat.completions.with_raw_response.create(model=model, messages=ask) for _ in range(2)]
    assert [r.headers.get("x-switchyard-cache") for r in said] == ["miss", "hit"], said
    assert said[1].parse().choices[0].message.content == TEXT
    s = "".join(ch.choices[0].delta.content or "" for ch in o.chat.completions.create(
        model=model, messages=ask, stream=True) if ch.choices)
    assert s == TEXT, s
    r = [o.responses.with_raw_response.create(model=model, input=f"cache responses {kind}", store=False)
         for _ in range(2)]
    assert [x.headers.get("x-switchyard-cache") for x in r] == ["miss", "hit"], r
    assert r[1].parse().output_text == TEXT
    events = list(o.responses.create(model=model, input=f"cache responses {kind}", store=False, stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.output_text == TEXT, events
    a = anthropic.Anthropic(base_url=url, api_key=CACHED_KEY, max_retries=0)
    ask = [{"role": "user", "content": f"cache messages {kind}"}]
    m = [a.messages.with_raw_response.create(model=model, max_tokens=64, messages=ask) for _ in range(2)]
    assert [x.headers.get("x-switchyard-cache") for x in m] == ["miss", "hit"], m
    assert m[1].parse().content[0].text == TEXT
    with a.messages.stream(model=model, max_tokens=64, messages=ask) as st:
        assert "".join(st.text_stream) == TEXT
    g = genai.Client(api_key=CACHED_KEY, http_options=types.HttpOptions(base_url=url))
    for _ in range(2):
        assert g.models.generate_content(model=model, contents=f"cache gemini {kind}").text == TEXT
    s = "".join(ch.text or "" for ch in g.models.generate_content_stream(model=model, contents=f"cache gemini {kind}"))
    assert s == TEXT, s
    # Each protocol: the second whole answer and the stream were hits.
    assert cache_hits(url) - before == 8, (before, cache_hits(url))


def fixture(kind, family):
    """A fixed text of `kind` and its count by `family`'s own tokenizer."""
    with open(FIXTURES) as f:
        texts = json.load(f)["texts"]
    t = next(t for t in texts if t["kind"] == kind and t[family] > 300)
    return t["text"], t[family]


def near(n, reference):
    return abs(n - reference) <= reference / 10


def check_anthropic_side(url, kind):
    """Token counting (forwarded to an Anthropic channel, else counted here), the model list
    in Anthropic's shape, paged and filtered by the key's groups, and its 404."""
    c = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0)
    ask = [{"role": "user", "content": "hi"}]
    raw = c.messages.with_raw_response.count_tokens(model=f"{kind}-text", messages=ask)
    n, who = raw.parse().input_tokens, raw.headers.get("x-switchyard-count")
    assert (n, who) == ((COUNTED, "upstream") if kind == "anthropic" else (n, "local")), (n, who)
    assert kind == "anthropic" or n != COUNTED, n
    text, reference = fixture("code-rust", "claude")
    base = c.messages.count_tokens(model="claude-sonnet-4-5", messages=[{"role": "user", "content": text}]).input_tokens
    assert near(base, reference), (base, reference)
    tools = [{"name": "weather", "description": "Current weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    image = [{"type": "text", "text": text}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]
    for what, more in (("longer", {"messages": [{"role": "user", "content": text + text}]}),
                       ("tool", {"messages": [{"role": "user", "content": text}], "tools": tools}),
                       ("system", {"messages": [{"role": "user", "content": text}], "system": "Be brief and exact."}),
                       ("image", {"messages": [{"role": "user", "content": image}]})):
        m = c.messages.count_tokens(model="claude-sonnet-4-5", **more).input_tokens
        assert m > base, (what, m, base)
    ids = [m.id for m in c.models.list(limit=2)]  # pages of two, followed to the end
    assert f"{kind}-text" in ids and "narrow-model" in ids and ids == sorted(ids), ids
    m = c.models.retrieve(f"{kind}-text")
    assert (m.type, m.display_name) == ("model", f"{kind}-text"), m
    try:
        c.models.retrieve("no-such-model")
        raise AssertionError("an unknown model was found")
    except anthropic.NotFoundError:
        pass
    with anthropic.Anthropic(base_url=url, api_key=NARROW_KEY, max_retries=0) as narrow:
        assert [m.id for m in narrow.models.list()] == ["narrow-model"]
    c.close()


def check_gemini_side(url, kind):
    c = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=url))
    r = c.models.count_tokens(model=f"{kind}-text", contents="hi")
    who = r.sdk_http_response.headers.get("x-switchyard-count")
    assert (r.total_tokens, who) == ((COUNTED, "upstream") if kind == "gemini" else (r.total_tokens, "local")), r
    text, reference = fixture("log", "gemini")
    base = c.models.count_tokens(model="gemini-2.5-flash", contents=text).total_tokens
    assert near(base, reference), (base, reference)
    longer = c.models.count_tokens(model="gemini-2.5-flash", contents=text + text).total_tokens
    picture = types.Part.from_bytes(data=base64.b64decode(PNG), mime_type="image/png")
    imaged = c.models.count_tokens(model="gemini-2.5-flash", contents=[text, picture]).total_tokens
    assert longer > base and imaged > base, (base, longer, imaged)
    names = [m.name for m in c.models.list(config={"page_size": 2})]
    assert f"models/{kind}-text" in names and names == sorted(names), names
    m = c.models.get(model="gemini-2.5-flash")
    assert (m.name, m.input_token_limit) == ("models/gemini-2.5-flash", 1048576), m
    assert "countTokens" in m.supported_actions, m
    try:
        c.models.get(model="no-such-model")
        raise AssertionError("an unknown model was found")
    except genai_errors.ClientError as e:
        assert e.code == 404, e
    with genai.Client(api_key=NARROW_KEY, http_options=types.HttpOptions(base_url=url)) as narrow:
        assert [m.name for m in narrow.models.list()] == ["models/narrow-model"]
    c.close()


def check_openai_side(url, kind):
    """Counting Responses input, the model list and retrieval, and the responses the gateway
    keeps: read, listed, deleted (asked of the channel itself when it keeps them)."""
    c = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    raw = c.responses.input_tokens.with_raw_response.count(model=f"{kind}-text", input="hi")
    r, who = raw.parse(), raw.headers.get("x-switchyard-count")
    assert r.object == "response.input_tokens", r
    assert (r.input_tokens, who) == ((COUNTED, "upstream") if kind == "responses" else (r.input_tokens, "local")), r
    text, reference = fixture("prose-en", "o200k_base")
    base = c.responses.input_tokens.count(model="gpt-4o", input=text).input_tokens
    assert near(base, reference), (base, reference)
    tools = [{"type": "function", "name": "weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    image = [{"role": "user", "content": [{"type": "input_text", "text": text},
                                          {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}]}]
    for what, more in (("longer", {"input": text + text}), ("tool", {"input": text, "tools": tools}),
                       ("instructions", {"input": text, "instructions": "Be brief."}), ("image", {"input": image})):
        m = c.responses.input_tokens.count(model="gpt-4o", **more).input_tokens
        assert m > base, (what, m, base)
    ids = [m.id for m in c.models.list()]
    assert f"{kind}-text" in ids and "narrow-model" in ids, ids
    assert c.models.retrieve(f"{kind}-text").object == "model"
    try:
        c.models.retrieve("no-such-model")
        raise AssertionError("an unknown model was found")
    except openai.NotFoundError:
        pass
    narrow = openai.OpenAI(base_url=url + "/v1", api_key=NARROW_KEY, max_retries=0)
    assert [m.id for m in narrow.models.list()] == ["narrow-model"]
    made = c.responses.create(model=f"{kind}-text", input="keep me")
    got = c.responses.retrieve(made.id)
    assert (got.id, got.output_text) == (made.id, TEXT), got
    items = list(c.responses.input_items.list(made.id))
    assert items and items[0].type == "message", items
    if kind != "responses":  # the gateway answered it: its own record of the input
        assert items[0].content[0].text == "keep me", items
    try:
        narrow.responses.retrieve(made.id)
        raise AssertionError("another key read the response")
    except openai.NotFoundError:
        pass
    c.responses.delete(made.id)
    try:
        c.responses.retrieve(made.id)
        raise AssertionError("a deleted response was read")
    except openai.NotFoundError:
        pass
    narrow.close()
    c.close()


def run(url):
    passed = failed = 0
    for client, check in (("openai", check_openai), ("openai responses", check_responses),
                          ("anthropic", check_anthropic), ("gemini", check_gemini),
                          ("openai side calls", check_openai_side),
                          ("anthropic side calls", check_anthropic_side),
                          ("gemini side calls", check_gemini_side),
                          ("every SDK's cache hits", check_cache)):
        for kind in KINDS:
            name = f"{client} SDK -> {kind} channel"
            try:
                check(url, kind)
                passed += 1
                print(f"ok   {name}")
            except Exception:  # noqa: BLE001 - report every combination, then fail
                failed += 1
                print(f"FAIL {name}")
                traceback.print_exc()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
