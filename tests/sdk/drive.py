"""Drives a running `flashtree serve` with the official `openai` and `anthropic` SDKs and curl.

Usage: drive.py BASE_URL API_KEY. The server runs a tiny synthetic pair with `--script
tests/sdk/script.json` (replies picked by trigger text under the real speculative loop),
`--chat-template qwen35` and `--api-key API_KEY`. Each check prints `ok: …`; the first failure
raises (non-zero exit). Run by tests/tests/cpu/serve_sdk.rs.
"""

import http.client
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse

import anthropic
import openai

BASE, KEY = sys.argv[1], sys.argv[2]
oa = openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=300)
an = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0, timeout=300)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
WEATHER_ANTHROPIC = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": WEATHER["function"]["parameters"],
}


def ok(what):
    print("ok:", what, flush=True)


def user(text):
    return [{"role": "user", "content": text}]


def extra(obj, name):
    """A field the SDK's model does not declare (e.g. `reasoning_content`)."""
    return (obj.model_extra or {}).get(name) if hasattr(obj, "model_extra") else None


# --- OpenAI ---------------------------------------------------------------------------------

models = oa.models.list()
assert len(models.data) == 1 and models.data[0].id, models
ok("GET /v1/models")

r = oa.chat.completions.create(model="any-name", messages=user("hello"), max_tokens=8)
assert r.model == "any-name", r.model
assert 1 <= r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 0, r.usage
assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
whole = (extra(r.choices[0].message, "reasoning_content") or "") + (r.choices[0].message.content or "")
stream = oa.chat.completions.create(
    model="any-name", messages=user("hello"), max_tokens=8, stream=True, stream_options={"include_usage": True}
)
chunks = list(stream)
assert chunks[-1].usage is not None and chunks[-1].choices == [], chunks[-1]
assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens
streamed = "".join(
    (extra(c.choices[0].delta, "reasoning_content") or "") + (c.choices[0].delta.content or "")
    for c in chunks
    if c.choices
)
assert streamed == whole, (streamed, whole)
ok("chat completions, stream and not, usage and include_usage")

r = oa.chat.completions.create(
    model="m", messages=user("please call the weather tool"), tools=[WEATHER], tool_choice="auto", max_tokens=300
)
c = r.choices[0]
assert c.finish_reason == "tool_calls", c
assert c.message.content == "Let me check.", c.message
assert extra(c.message, "reasoning_content") == "I need the weather.", c.message
call = c.message.tool_calls[0]
assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris", "days": 3}
calls = {}
finish = None
for ch in oa.chat.completions.create(
    model="m", messages=user("please call the weather tool"), tools=[WEATHER], max_tokens=300, stream=True
):
    if not ch.choices:
        continue
    for tc in ch.choices[0].delta.tool_calls or []:
        d = calls.setdefault(tc.index, {"name": "", "arguments": ""})
        d["name"] += tc.function.name or ""
        d["arguments"] += tc.function.arguments or ""
    finish = ch.choices[0].finish_reason or finish
assert finish == "tool_calls" and calls[0]["name"] == "get_weather", (finish, calls)
assert json.loads(calls[0]["arguments"]) == {"city": "Paris", "days": 3}
r = oa.chat.completions.create(model="m", messages=user("use the json form"), tools=[WEATHER])
assert json.loads(r.choices[0].message.tool_calls[0].function.arguments) == {"city": "Oslo"}
r = oa.chat.completions.create(model="m", messages=user("a broken call"), tools=[WEATHER])
assert not r.choices[0].message.tool_calls and "junk" in r.choices[0].message.content, r.choices[0].message
assert r.choices[0].finish_reason == "stop"
ok("tools accepted; tool calls parsed back (Qwen3-Coder XML and JSON forms), stream and not; a broken one is text")

NOTE = {
    "type": "function",
    "function": {
        "name": "save_note",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string"}, "pages": {"type": "integer"}},
        },
    },
}
r = oa.chat.completions.create(model="m", messages=user("please write a long note"), tools=[NOTE], max_tokens=400)
whole_args = r.choices[0].message.tool_calls[0].function.arguments
calls, fragments, finish = {}, 0, None
for ch in oa.chat.completions.create(
    model="m", messages=user("please write a long note"), tools=[NOTE], max_tokens=400, stream=True
):
    if not ch.choices:
        continue
    for tc in ch.choices[0].delta.tool_calls or []:
        if tc.index not in calls:
            assert tc.id and tc.type == "function" and tc.function.name == "save_note", tc
            calls[tc.index] = ""
        else:
            assert tc.id is None and tc.function.name is None, tc
        if tc.function.arguments:
            calls[tc.index] += tc.function.arguments
            fragments += 1
    finish = ch.choices[0].finish_reason or finish
assert finish == "tool_calls" and list(calls) == [0], (finish, calls)
assert calls[0] == whole_args, (calls[0], whole_args)
assert fragments > 5, fragments
assert json.loads(whole_args)["pages"] == 2
ok(f"a tool call's arguments stream in {fragments} fragments that join into the non-streamed arguments")

calls, content, finish = {}, "", None
for ch in oa.chat.completions.create(model="m", messages=user("a call cut short"), tools=[WEATHER], stream=True):
    if not ch.choices:
        continue
    for tc in ch.choices[0].delta.tool_calls or []:
        calls[tc.index] = calls.get(tc.index, "") + (tc.function.arguments or "")
    content += ch.choices[0].delta.content or ""
    finish = ch.choices[0].finish_reason or finish
assert json.loads(calls[0]) == {"city": "Par"}, calls
assert content.startswith("<tool_call>") and finish == "stop", (content, finish)
r = oa.chat.completions.create(model="m", messages=user("a call cut short"), tools=[WEATHER])
assert not r.choices[0].message.tool_calls and r.choices[0].message.content == content, r.choices[0].message
ok("a call cut off after its start streamed: its JSON is closed, its raw text follows as content")

history = [
    {"role": "user", "content": "weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "user", "content": "think then answer"},
]
r = oa.chat.completions.create(model="m", messages=history, tools=[WEATHER])
assert r.choices[0].message.content == "The answer is 4.", r.choices[0].message
assert extra(r.choices[0].message, "reasoning_content") == "Two plus two is four."
ok("thinking split (reasoning_content) after a tool-result turn")

r = oa.chat.completions.create(model="m", messages=user("say the stop word"), stop=["STOP"])
assert r.choices[0].message.content == "alpha beta " and r.choices[0].finish_reason == "stop", r
ok("stop sequences")

r = oa.completions.create(model="m", prompt="def add(a, b):", max_tokens=8)
text = r.choices[0].text
parts = list(oa.completions.create(model="m", prompt="def add(a, b):", max_tokens=8, stream=True))
assert "".join(p.choices[0].text for p in parts if p.choices) == text
assert r.object == "text_completion" and 1 <= r.usage.completion_tokens <= 8
ok("POST /v1/completions, stream and not")

try:
    oa.chat.completions.create(model="m", messages=[{"role": "wizard", "content": "hi"}])
    raise AssertionError("a bad role was accepted")
except openai.BadRequestError as e:
    assert e.status_code == 400 and "role" in str(e), e
try:
    oa.chat.completions.create(model="m", messages=user("hi"), temperature=-3)
    raise AssertionError("a negative temperature was accepted")
except openai.BadRequestError as e:
    assert "temperature" in str(e), e
ok("malformed input → 400 (OpenAI SDK)")

# --- Anthropic ------------------------------------------------------------------------------

req = dict(
    model="claude-sonnet-4-5",
    max_tokens=64000,
    system=[{"type": "text", "text": "be brief"}],
    tools=[WEATHER_ANTHROPIC],
    messages=user("please call the weather tool"),
)
m = an.messages.create(**req)
assert m.model == "claude-sonnet-4-5", m.model
assert [b.type for b in m.content] == ["thinking", "text", "tool_use"], m.content
assert m.content[0].thinking == "I need the weather." and m.content[1].text == "Let me check."
assert m.content[2].name == "get_weather" and m.content[2].input == {"city": "Paris", "days": 3}
assert m.stop_reason == "tool_use"
count = an.messages.count_tokens(
    model=req["model"], system=req["system"], tools=req["tools"], messages=req["messages"]
).input_tokens
prefilled = m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)
assert count == prefilled, (count, m.usage)
ok(f"POST /v1/messages; count_tokens = {count} = the prefill the request ran (system and tools included)")

seen = []
with an.messages.stream(**req) as s:
    for ev in s:
        seen.append(ev.type)
    final = s.get_final_message()
for t in ["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
          "message_stop"]:
    assert t in seen, (t, seen)
assert seen.index("message_start") == 0 and seen[-1] == "message_stop", seen
assert [b.type for b in final.content] == ["thinking", "text", "tool_use"], final.content
assert final.content[0].thinking == "I need the weather." and final.content[1].text.strip() == "Let me check."
assert final.content[2].input == {"city": "Paris", "days": 3} and final.stop_reason == "tool_use"
assert final.usage.output_tokens == m.usage.output_tokens
assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == count, final.usage
ok("messages stream: full event sequence, thinking / text / tool_use (input_json_delta) blocks")

NOTE_ANTHROPIC = {"name": "save_note", "input_schema": NOTE["function"]["parameters"]}
note = dict(model="x", max_tokens=400, tools=[NOTE_ANTHROPIC], messages=user("please write a long note"))
m = an.messages.create(**note)
partial, types = [], []
with an.messages.stream(**note) as s:
    for ev in s:
        types.append(ev.type)
        if ev.type == "content_block_delta" and ev.delta.type == "input_json_delta":
            partial.append(ev.delta.partial_json)
    final = s.get_final_message()
assert len(partial) > 5, partial
assert json.loads("".join(partial)) == m.content[-1].input, ("".join(partial), m.content)
assert final.content[-1].type == "tool_use" and final.content[-1].input == m.content[-1].input, final.content
assert final.stop_reason == "tool_use"
with an.messages.stream(model="x", max_tokens=100, tools=[WEATHER_ANTHROPIC], messages=user("a call cut short")) as s:
    final = s.get_final_message()
assert [b.type for b in final.content] == ["tool_use", "text"], final.content
assert final.content[0].input == {"city": "Par"} and final.content[1].text.startswith("<tool_call>"), final.content
assert final.stop_reason == "end_turn", final.stop_reason
ok(f"messages stream: tool_use input in {len(partial)} input_json_delta fragments; a call cut short is closed")

try:
    an.messages.create(model="x", max_tokens=4096, messages=user("hello"),
                       thinking={"type": "enabled", "budget_tokens": 1000})
    raise AssertionError("budget_tokens < 1024 was accepted")
except anthropic.BadRequestError as e:
    assert e.status_code == 400 and "budget_tokens" in str(e), e
try:
    an.messages.create(model="x", max_tokens=2048, messages=user("hello"),
                       thinking={"type": "enabled", "budget_tokens": 2048})
    raise AssertionError("budget_tokens >= max_tokens was accepted")
except anthropic.BadRequestError as e:
    assert e.status_code == 400 and "max_tokens" in str(e), e
m = an.messages.create(model="x", max_tokens=2000, messages=user("think then answer"),
                       thinking={"type": "enabled", "budget_tokens": 1024})
assert [b.type for b in m.content] == ["thinking", "text"] and m.content[1].text == "The answer is 4.", m
ok("thinking.budget_tokens checked as Anthropic checks it (400 otherwise); a reply within the budget is unchanged")

m = an.messages.create(model="x", max_tokens=100, messages=user("say the stop word"), stop_sequences=["STOP"])
assert m.stop_reason == "stop_sequence" and m.stop_sequence == "STOP" and m.content[0].text == "alpha beta ", m
m = an.messages.create(model="x", max_tokens=100, messages=user("think then answer"))
assert [b.type for b in m.content] == ["thinking", "text"] and m.content[1].text == "The answer is 4.", m
ok("stop_sequences; thinking blocks")

for bad in [dict(messages=[{"role": "tool", "content": "x"}]),
            dict(messages=[{"role": "user", "content": [{"type": "image", "source": {}}]}])]:
    try:
        an.messages.create(model="x", max_tokens=5, **bad)
        raise AssertionError(f"accepted {bad}")
    except anthropic.BadRequestError as e:
        assert e.status_code == 400 and e.body["type"] == "error", e.body
        assert e.body["error"]["type"] == "invalid_request_error", e.body
ok("malformed input → 400 in Anthropic's shape (Anthropic SDK)")

# --- curl -----------------------------------------------------------------------------------

curl = shutil.which("curl")
if curl is None:
    raise AssertionError("curl is not installed")


def run_curl(*args):
    out = subprocess.run([curl, "-sS", "-w", "\n%{http_code}", *args], capture_output=True, text=True, check=True)
    body, _, code = out.stdout.rpartition("\n")
    return int(code), body


code, body = run_curl(BASE + "/health")
assert code == 200 and json.loads(body)["status"] == "ok"
code, body = run_curl(BASE + "/v1/models")
assert code == 401 and json.loads(body)["error"]["code"] == "invalid_api_key", body
code, body = run_curl("-H", "x-api-key: " + KEY, BASE + "/v1/models")
assert code == 200, body
code, body = run_curl("-H", "Authorization: Bearer wrong", BASE + "/v1/models")
assert code == 401, body
code, body = run_curl("-H", "x-api-key: " + KEY, "-H", "content-type: application/json", "-d", "{",
                      BASE + "/v1/chat/completions")
assert code == 400 and json.loads(body)["error"]["type"] == "invalid_request_error", body
code, body = run_curl("-H", "x-api-key: " + KEY, "-d", '{"messages": 5}', BASE + "/v1/messages")
assert code == 400 and json.loads(body)["type"] == "error", body
code, body = run_curl("-H", "x-api-key: " + KEY, BASE + "/v1/messages")
assert code == 404 or code == 405, (code, body)
code, body = run_curl("-N", "-H", "x-api-key: " + KEY, "-d",
                      json.dumps({"model": "x", "max_tokens": 50, "stream": True, "messages": user("think then answer")}),
                      BASE + "/v1/messages")
events = [l[len("event: "):] for l in body.splitlines() if l.startswith("event: ")]
assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"], events
code, body = run_curl("-H", "Authorization: Bearer " + KEY, "-d",
                      json.dumps({"model": "x", "stream": True, "messages": user("think then answer")}),
                      BASE + "/v1/chat/completions")
assert code == 200 and body.rstrip().endswith("data: [DONE]"), body
ok("curl: --api-key (Bearer and x-api-key, /health open), malformed JSON, SSE of both APIs")

# --- concurrency, disconnect, prefix reuse --------------------------------------------------

results = [None] * 4


def client(i):
    results[i] = oa.completions.create(
        model="m", prompt=f"def client_{i}(x):", max_tokens=12, extra_body={"ignore_eos": True}
    ).choices[0].text


threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
alone = [
    oa.completions.create(model="m", prompt=f"def client_{i}(x):", max_tokens=12, extra_body={"ignore_eos": True})
    .choices[0]
    .text
    for i in range(4)
]
assert results == alone, (results, alone)
ok("4 concurrent clients served (one at a time), each the text it gets alone")

t0 = time.monotonic()
oa.completions.create(model="m", prompt="timing", max_tokens=64, extra_body={"ignore_eos": True})
per64 = time.monotonic() - t0
url = urllib.parse.urlparse(BASE)
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=300)
conn.request("POST", "/v1/completions",
             body=json.dumps({"prompt": "go on", "max_tokens": 3900, "stream": True, "ignore_eos": True}),
             headers={"content-type": "application/json", "authorization": "Bearer " + KEY})
resp = conn.getresponse()
assert resp.status == 200
got = b""
while got.count(b"data: ") < 3:
    got += resp.read1(4096)
conn.close()  # the client leaves mid-stream
t0 = time.monotonic()
oa.completions.create(model="m", prompt="after", max_tokens=1)
waited = time.monotonic() - t0
# The abandoned request had ~60× the tokens of the timed one left; the worker must have dropped it.
assert waited < 10 * per64 + 5, (waited, per64)
ok(f"a client that disconnects mid-stream frees the worker ({waited:.2f} s; 64 tokens take {per64:.2f} s)")

first = "Q: continue the story\nA:"
r1 = oa.completions.create(model="m", prompt=first, max_tokens=50)
assert r1.choices[0].text == " Once upon a time", r1.choices[0].text
second = first + r1.choices[0].text + "\n" + "Then what happened next, in some detail? " * 8 + "\nA:"
warm = oa.completions.create(model="m", prompt=second, max_tokens=16)
cached = warm.usage.prompt_tokens_details.cached_tokens
assert cached == r1.usage.prompt_tokens + r1.usage.completion_tokens - 1, (cached, r1.usage, warm.usage)
oa.completions.create(model="m", prompt="something else entirely", max_tokens=1)
cold = oa.completions.create(model="m", prompt=second, max_tokens=16)
assert cold.usage.prompt_tokens_details.cached_tokens == 0, cold.usage
assert warm.choices[0].text == cold.choices[0].text and warm.usage.completion_tokens == cold.usage.completion_tokens
ok(f"prefix reuse: the second turn prefilled {warm.usage.prompt_tokens - cached} of {warm.usage.prompt_tokens} "
   f"tokens and gave the cold run's text")

print("all SDK checks passed")
