#!/usr/bin/env python3
"""What vLLM's API process spends per output token and per SSE chunk, outside HTTP.

A microbenchmark (not the validation corpus) of the pieces of the output path that run on the API
server's asyncio loop (docs/output-streaming.md, validation/front_end/api_chunk_split.sh for
the end-to-end split):

* `OutputProcessor.process_outputs` (v1/engine/output_processor.py): per engine step, per request,
  detokenize the new token, build a RequestOutput and `RequestOutputCollector.put` it -- which,
  when the consumer has not taken the previous one yet, merges it (`RequestOutput.add`: text
  concatenation, token-id extension). Paid for every token whether or not it is merged.
* the consumer side per chunk: `get_nowait()` on the collector, then what the completions
  stream generator does per RequestOutput (build `CompletionStreamResponse`,
  `model_dump_json`, the SSE f-string, starlette's `.encode()`).

Modes: the consumer drains every M steps (M = 1: no merging; M > 1: M tokens per chunk), and an
OutputProcessor with stream_interval K (outputs built only every K tokens). Times are CPU time of
this process (time.process_time), per token and per chunk, median of --reps repetitions.

Run with the vLLM CPU venv of scripts/live/setup_vllm.sh (imports vllm, never vllm._C):
  VLLM_TARGET_DEVICE=cpu $LIVE_DIR/venv-vllm/bin/python validation/front_end/api_chunk_micro.py \
      --tokenizer $LIVE_DIR/models/tiny-llama [--requests 64 --steps 256 --reps 5]
"""
import argparse
import random
import statistics
import time

from vllm.entrypoints.openai.completion.protocol import (
    CompletionResponseStreamChoice,
    CompletionStreamResponse,
)
from vllm.sampling_params import RequestOutputKind, SamplingParams
from vllm.tokenizers import get_tokenizer
from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest
from vllm.v1.engine.output_processor import OutputProcessor, RequestOutputCollector
from vllm.v1.metrics.stats import IterationStats

p = argparse.ArgumentParser()
p.add_argument("--tokenizer", required=True)
p.add_argument("--requests", type=int, default=64)
p.add_argument("--steps", type=int, default=256)
p.add_argument("--reps", type=int, default=5)
p.add_argument("--merge", default="1,2,4,8,16")
p.add_argument("--stream-intervals", default="1,4,16")
args = p.parse_args()
tok = get_tokenizer(args.tokenizer)
rng = random.Random(1)
vocab = [i for i in range(200, min(len(tok), 30000))]


def setup(stream_interval):
    op = OutputProcessor(tok, log_stats=True, stream_interval=stream_interval)
    qs = []
    for r in range(args.requests):
        rid = f"req-{r}"
        sp = SamplingParams(max_tokens=args.steps + 8, ignore_eos=True,
                            output_kind=RequestOutputKind.DELTA)
        req = EngineCoreRequest(request_id=rid, prompt_token_ids=[rng.choice(vocab) for _ in range(64)],
                                mm_features=None, sampling_params=sp, pooling_params=None,
                                arrival_time=time.time(), lora_request=None, cache_salt=None,
                                data_parallel_rank=None, external_req_id=rid)
        q = RequestOutputCollector(RequestOutputKind.DELTA, rid)
        op.add_request(req, None, queue=q)
        qs.append(q)
    steps = [[EngineCoreOutput(request_id=f"req-{r}", new_token_ids=[rng.choice(vocab)])
              for r in range(args.requests)] for _ in range(args.steps)]
    return op, qs, steps


def fmt(out):
    o = out.outputs[0]
    chunk = CompletionStreamResponse(
        id="cmpl-x", created=0, model="tiny-llama",
        choices=[CompletionResponseStreamChoice(index=0, text=o.text, logprobs=None,
                                                finish_reason=o.finish_reason,
                                                stop_reason=o.stop_reason,
                                                prompt_token_ids=None, token_ids=None)])
    return f"data: {chunk.model_dump_json(exclude_unset=False)}\n\n".encode("utf-8")


def run(merge, stream_interval):
    op, qs, steps = setup(stream_interval)
    t_proc = t_get = t_fmt = 0.0
    chunks = 0
    tokens_in_chunks = 0
    for s, outs in enumerate(steps):
        a = time.process_time()
        op.process_outputs(outs, time.monotonic(), IterationStats())
        t_proc += time.process_time() - a
        if s % merge == merge - 1 or s == len(steps) - 1:
            a = time.process_time()
            got = [q.get_nowait() for q in qs]
            b = time.process_time()
            for out in got:
                if out is not None:
                    fmt(out)
                    chunks += 1
                    tokens_in_chunks += len(out.outputs[0].token_ids)
            c = time.process_time()
            t_get += b - a
            t_fmt += c - b
    n_tok = args.requests * args.steps
    return (1e6 * t_proc / n_tok, 1e6 * t_get / max(chunks, 1), 1e6 * t_fmt / max(chunks, 1),
            chunks, tokens_in_chunks)


print("mode,param,rep,proc_us_per_token,get_us_per_chunk,fmt_us_per_chunk,chunks,tokens")
res = {}
cases = [("merge", int(m)) for m in args.merge.split(",")] + \
        [("stream_interval", int(k)) for k in args.stream_intervals.split(",")]
for rep in range(args.reps):
    for mode, v in cases:
        r = run(v, 1) if mode == "merge" else run(1, v)
        res.setdefault((mode, v), []).append(r)
        print(f"{mode},{v},{rep},{r[0]:.2f},{r[1]:.2f},{r[2]:.2f},{r[3]},{r[4]}", flush=True)
print("# medians over reps (min-max): mode,param,proc_us_per_token,get_us_per_chunk,fmt_us_per_chunk")
for (mode, v), rs in res.items():
    cols = []
    for i in range(3):
        xs = [r[i] for r in rs]
        cols.append(f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})")
    print(f"# {mode},{v}," + ",".join(cols))
