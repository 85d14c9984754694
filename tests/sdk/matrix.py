"""Every official SDK x every channel kind, through a real Switchyard.

Starts three standalone mocks (one answering text, one a tool call, one reasoning then text; each speaks
OpenAI, Anthropic and Gemini) and a gateway whose models route to channels of kind openai,
anthropic and gemini. Then drives the gateway with the openai (Chat Completions and Responses),
anthropic and google-genai SDKs: plain, streaming, tools and streamed tools, in every client x
channel combination; the
anthropic SDK also gets every provider's reasoning as thinking blocks and sends them back.
Any warning is an error. Prints 'N passed, N failed' and exits non-zero on a failure.

    python tests/sdk/matrix.py path/to/switchyard
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

warnings.simplefilter("error")

import anthropic  # noqa: E402
import openai  # noqa: E402
from google import genai  # noqa: E402
from google.genai import types  # noqa: E402

BIN = sys.argv[1]
KEY = "sk-matrix-key-0001"
TEXT = "Hello from the matrix."
TOOL_ARGS = {"city": "Paris"}
REASONING = "Thinking it over."
KINDS = ("openai", "anthropic", "gemini", "responses")


def spawn(args, marker):
    p = subprocess.Popen([BIN, "--log-level", "error", *args], stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        line = p.stdout.readline()
        m = re.search(marker + r"(\S+)", line)
        if m:
            return p, m.group(1)
    raise RuntimeError(f"{args[0]} did not start")


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
        text_mock, text_url = spawn(["mock", "--port", "0", "--text", TEXT, "--chunks", "3"], "listening on ")
        tool_mock, tool_url = spawn(["mock", "--port", "0", "--spec", spec], "listening on ")
        procs += [text_mock, tool_mock]
        root = lambda url: url.rsplit("/v1", 1)[0]  # noqa: E731
        channels = ""
        for kind in KINDS:
            for purpose, url in (("text", text_url), ("tools", tool_url), ("reason", reason_url)):
                base = root(url) + ("/v1beta" if kind == "gemini" else "/v1")
                # `responses`: an OpenAI channel that serves the Responses API itself.
                provider, extra = ("openai", "responses = true\n") if kind == "responses" else (kind, "")
                channels += (
                    f'[[channels]]\nname = "{kind}-{purpose}"\nprovider = "{provider}"\nbase_url = "{base}"\n'
                    f'api_keys = ["sk-upstream-matrix"]\nmodels = ["{kind}-{purpose}"]\n{extra}\n'
                )
        config = os.path.join(work, "gw.toml")
        with open(config, "w") as f:
            f.write(f'[log]\nsqlite_path = "{work}/gw.db"\n[[keys]]\nname = "matrix"\nkey = "{KEY}"\n\n{channels}')
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


def run(url):
    passed = failed = 0
    for client, check in (("openai", check_openai), ("openai responses", check_responses),
                          ("anthropic", check_anthropic), ("gemini", check_gemini)):
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
