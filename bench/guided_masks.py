"""Token-mask libraries for guided decoding, side by side: llguidance against xgrammar (issue 23 chooses one by this).

    python bench/guided_masks.py                  # CPU or GPU machine alike: the masks are computed on the host
    python bench/guided_masks.py --vocab 32000 --batch 64 --tokens 64   # a quick run
For each library and each constraint (a regex: one fenced python block; a JSON schema; a Lark grammar: a <think>
block, then exactly one fenced python block): the grammar's compile time, then a batch of `batch` sequences decoded
`tokens` steps, each step filling the batch's next-token bitmask (each library's parallel batch call) and advancing
every sequence by a token drawn at random among those its mask allows (ending where the grammar ends). Reported:
compile ms, the mean and 95th-percentile ms of one batch mask fill, and the share of steps whose mask was computed
within the budget of one decode step (`--step-ms`: the engine's time per decode step of the batch on the GPU, which
the host's mask work must hide behind).
The vocabulary: a byte-level BPE tokenizer of `vocab` tokens trained here on the Python sources of this machine's
environment (no download; a code model's vocabulary is of this kind and size, Qwen2.5's has 151,665 tokens).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

REGEX = r"```python\n([^`]|`[^`]|``[^`])*\n```"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                                            "tests": {"type": "array", "items": {"type": "integer"}, "maxItems": 8},
                                            "passed": {"type": "boolean"}},
          "required": ["name", "tests", "passed"], "additionalProperties": False}
# free text up to a closing string, as terminals that are whole at every point of the text (so that llguidance's
# slices cover them: a token of [^<]+ or [^`]+ is allowed whole inside them): the text without the closing string's
# first character, and that character followed by another (a think block holds no "</", a code block no "```"). A
# greedy terminal such as /([^<]|<[^\/])*/ takes the "<" of "</think>" for itself and the block can never close;
# llguidance's lazy rules (LARK_STOP) close properly but their masks are not covered by the slices.
LARK = r'''
start: "<think>" think "</think>\n```python\n" code "```"
think: (TEXT | LT)*
code: (CODE | TICKS)*
TEXT: /[^<]+/
LT: /<[^\/]/
CODE: /[^`]+/
TICKS: /`[^`]|``[^`]/
'''
LARK_STOP = r'''
start: "<think>" think "\n```python\n" code
think[stop="</think>"]: /(.|\n)*/
code[stop="```"]: /(.|\n)*/
'''
EBNF = r'''
root ::= "<think>" think "</think>\n```python\n" code "\n```"
think ::= ([^<] | "<" [^/])*
code ::= ([^`] | "`" [^`] | "``" [^`])*
'''


def build_tokenizer(vocab: int, cache: Path):
    """A byte-level BPE tokenizer of `vocab` tokens trained on the Python files of this environment (cached)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    path = cache / f"code-bpe-{vocab}.json"
    if not path.is_file():
        files = sorted(Path(sys.prefix).rglob("*.py"))
        random.Random(0).shuffle(files)
        budget, picked = 200 * 2**20, []
        for f in files:
            budget -= f.stat().st_size
            picked.append(str(f))
            if budget < 0:
                break
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train(picked, trainer)
        cache.mkdir(parents=True, exist_ok=True)
        tok.save(str(path))
    return PreTrainedTokenizerFast(tokenizer_file=str(path), eos_token="<|endoftext|>")


class Llguidance:
    name = "llguidance"

    def __init__(self, hf_tok, threads: int | None = None):
        import llguidance
        import llguidance.hf
        import llguidance.torch

        self.lib, self.lt = llguidance, llguidance.torch
        self.tok = llguidance.hf.from_tokenizer(hf_tok)
        self.executor = llguidance.LLExecutor(num_threads=threads)  # (None: 80% of the cores, up to 32)
        self.threads = threads

    def compile(self, kind: str):
        m = self.lib.LLMatcher
        grammar = {"regex": lambda: m.grammar_from_regex(REGEX), "json": lambda: m.grammar_from_json_schema(
            json.dumps(SCHEMA)), "grammar": lambda: m.grammar_from_lark(LARK)}[kind]()
        self.lib.LLMatcher(self.tok, grammar)  # (compiles: the first matcher builds the grammar's lexer)
        return grammar

    def matchers(self, grammar, n: int) -> list:
        return [self.lib.LLMatcher(self.tok, grammar) for _ in range(n)]

    def fill(self, matchers: list, bitmask: torch.Tensor) -> None:
        self.lt.fill_next_token_bitmask_par(self.executor, [(m, i) for i, m in enumerate(matchers)], bitmask)

    def advance(self, matcher, token: int) -> bool:
        matcher.consume_token(token)
        return not (matcher.is_stopped() or matcher.is_error())

    def bitmask(self, n: int, vocab: int) -> torch.Tensor:
        return self.lt.allocate_token_bitmask(n, vocab)


class Xgrammar:
    name = "xgrammar"

    def __init__(self, hf_tok, threads: int | None = None):
        import xgrammar

        self.lib = xgrammar
        info = xgrammar.TokenizerInfo.from_huggingface(hf_tok, vocab_size=len(hf_tok))
        self.compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)
        self.batch = xgrammar.BatchGrammarMatcher(threads or "auto")  # ("auto": half the cores)
        self.threads = threads

    def compile(self, kind: str):
        return {"regex": lambda: self.compiler.compile_regex(REGEX), "json": lambda: self.compiler.compile_json_schema(
            json.dumps(SCHEMA)), "grammar": lambda: self.compiler.compile_grammar(EBNF)}[kind]()

    def matchers(self, grammar, n: int) -> list:
        return [self.lib.GrammarMatcher(grammar) for _ in range(n)]

    def fill(self, matchers: list, bitmask: torch.Tensor) -> None:
        self.batch.batch_fill_next_token_bitmask(matchers, bitmask)

    def advance(self, matcher, token: int) -> bool:
        return matcher.accept_token(token) and not matcher.is_terminated()

    def bitmask(self, n: int, vocab: int) -> torch.Tensor:
        return self.lib.allocate_token_bitmask(n, vocab)


def allowed(bitmask_row: torch.Tensor, vocab: int) -> torch.Tensor:
    """The token ids a packed int32 bitmask row allows."""
    bits = (bitmask_row[:, None] >> torch.arange(32, dtype=torch.int32)) & 1  # [words, 32]
    return torch.nonzero(bits.flatten()[:vocab]).flatten()


def run(lib, kind: str, batch: int, tokens: int, vocab: int, step_ms: float, seed: int = 0) -> list:
    t = time.perf_counter()
    grammar = lib.compile(kind)
    compile_ms = (time.perf_counter() - t) * 1e3
    matchers = lib.matchers(grammar, batch)
    bitmask = lib.bitmask(batch, vocab)
    live = list(range(batch))
    rng = random.Random(seed)
    fills = []
    for _ in range(tokens):
        if not live:
            break
        t = time.perf_counter()
        lib.fill([matchers[i] for i in live], bitmask)  # rows 0..len(live)-1
        fills.append((time.perf_counter() - t) * 1e3)
        still = []
        for row, i in enumerate(live):
            ok_tokens = allowed(bitmask[row], vocab)
            if len(ok_tokens) and lib.advance(matchers[i], int(ok_tokens[rng.randrange(len(ok_tokens))])):
                still.append(i)
        live = still
    fills.sort()
    p95 = fills[int(0.95 * (len(fills) - 1))]
    within = sum(f <= step_ms for f in fills) / len(fills)
    return [lib.name, str(lib.threads or "default"), kind, f"{compile_ms:.1f}", f"{statistics.mean(fills):.2f}", f"{p95:.2f}", f"{within:.0%}",
            str(len(fills))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=151_000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--step-ms", type=float, default=2.3, help="one decode step's time for the batch, the budget a "
                    "mask fill may take without stalling it (ms; default: the engine's 0.5B decode step of 256 slots "
                    "on an H100, 256 / 113K tokens/s)")
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "execrl-bench"))
    ap.add_argument("--libs", default="llguidance,xgrammar")
    ap.add_argument("--kinds", default="regex,json,grammar")
    ap.add_argument("--threads", default="default", help="comma-separated thread counts for the batch fills "
                    "(default: each library's own)")
    args = ap.parse_args()
    t = time.perf_counter()
    tok = build_tokenizer(args.vocab, Path(args.cache))
    print(f"tokenizer: {len(tok)} tokens ({time.perf_counter() - t:.0f} s to build or load); torch "
          f"{torch.__version__}; {torch.get_num_threads()} threads")
    libs = {"llguidance": Llguidance, "xgrammar": Xgrammar}
    rows = []
    for name in args.libs.split(","):
        for threads in args.threads.split(","):
            lib = libs[name](tok, None if threads == "default" else int(threads))
            for kind in args.kinds.split(","):
                rows.append(run(lib, kind, args.batch, args.tokens, len(tok), args.step_ms))
                print(" | ".join(rows[-1]), flush=True)
    print(f"\nmasks for {args.batch} sequences x up to {args.tokens} tokens, vocabulary {len(tok)}")
    print("| library | threads | constraint | compile ms | batch fill ms (mean) | p95 ms | steps within "
          f"{args.step_ms:g} ms | steps |\n|---|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
