#!/usr/bin/env python3
"""What vLLM 0.11.0 does on every chat request before the engine sees it, timed.

vLLM 0.11.0's `resolve_chat_template_kwargs` (entrypoints/chat_utils.py, added by PR #25794;
memoised from 0.11.1) builds a jinja2 sandboxed environment, parses the chat template and walks
it for its undeclared variables, synchronously on the API server's event loop. This times that
step (and, for comparison, a full uncached compile and a render of the compiled template):

    python3 validation/front_end/template_parse.py validation/front_end/qwen3_like.jinja

`qwen3_like.jinja` is a Qwen3-style chat template (4,169 characters: tools, reasoning content,
tool calls), written for this measurement in the shape of Qwen3's published template. The
figure servesim uses, `VLLM_0110_CHAT_TEMPLATE_KWARGS_NS` = 17.1 ms
(sim/src/engine/vllm/scheduler.rs), is the median of five runs' first line on the project's
2-core build machine (16.9-17.8 ms; jinja2 3.1.6, Python 3.11, 2026-12-03). The same shared VM
gave 20-30 ms at other times (docs/front-end.md).
"""
import sys
import time

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.sandbox

tmpl = open(sys.argv[1]).read()
print("template chars", len(tmpl))


def env():
    return jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                        extensions=[jinja2.ext.loopcontrols])


def parse_once():
    return jinja2.meta.find_undeclared_variables(env().parse(tmpl))


def compile_once():
    return env().from_string(tmpl)


for name, fn in [("env+parse+find_undeclared (vLLM 0.11.0 resolve_chat_template_kwargs per request)", parse_once),
                 ("env+from_string compile (uncached compile)", compile_once)]:
    fn()
    n = 200
    t = time.perf_counter()
    for _ in range(n):
        fn()
    print(name, "%.3f ms" % ((time.perf_counter() - t) / n * 1e3))
t = compile_once()
msgs = [{"role": "user", "content": "hello " * 1500}]
n = 500
s = time.perf_counter()
for _ in range(n):
    t.render(messages=msgs, add_generation_prompt=True, tools=None)
print("render cached template, 1 user msg ~9KB: %.3f ms" % ((time.perf_counter() - s) / n * 1e3))
