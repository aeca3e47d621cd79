"""Prompts sized in the served model's tokens (stackpin/bench/words.py): with a tokenizer.json, a turn's
input_length words are that many tokens to that tokenizer, and the trace's block reuse survives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from stackpin.bench.traceio import prompt_text
from stackpin.bench.words import from_tokenizer
from stackpin.cli.main import main
from stackpin.errors import StackpinError
from stackpin.sim.dynamo import tokenizer_json
from tests.sse_server import Server, serve_in_thread

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "lockfiles" / "gb300-tuned.lock.yaml"


def _byte_level_bpe() -> Tokenizer:
    """A small GPT-style byte-level BPE (as most served models' tokenizers are), trained here."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    text = " ".join(f"{a}{b}{c}" for a in "bcdfgklmnprst" for b in "aeiou" for c in "dgklmnrst")
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=["<|begin|>", "<|end|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([text] * 4, trainer)
    return tokenizer


@pytest.mark.parametrize("kind", ["word-level", "byte-level BPE"])
def test_a_turn_is_its_input_length_in_the_tokenizers_tokens(kind: str) -> None:
    tokenizer = Tokenizer.from_str(json.dumps(tokenizer_json(4000))) if kind == "word-level" else _byte_level_bpe()
    vocabulary = from_tokenizer(tokenizer.to_str().encode(), kind)
    for length in (1, 511, 512, 513, 3270):
        text = prompt_text([7, 8, 9], length, "salt-", "s.0", vocabulary)
        assert len(tokenizer.encode(text, add_special_tokens=False).ids) == length
    # Without it, stackpin's words are many tokens each to a real tokenizer: what the issue measured.
    plain = prompt_text([7, 8, 9], 1000, "salt-", "s.0")
    assert len(_byte_level_bpe().encode(plain, add_special_tokens=False).ids) > 3 * 1000


def test_the_same_block_is_the_same_text_everywhere() -> None:
    vocabulary = from_tokenizer(json.dumps(tokenizer_json(4000)).encode(), "bed")
    one = prompt_text([1, 2], 1024, "x-", "a.0", vocabulary).split()
    two = prompt_text([1, 5], 1024, "x-", "b.0", vocabulary).split()
    assert one[:512] == two[:512] and one[512:] != two[512:]  # block 1 shared, block 2 vs 5 not
    assert prompt_text([1], 512, "y-", "", vocabulary) != prompt_text([1], 512, "x-", "", vocabulary)
    # A partial block is the start of the whole one, so a growing turn keeps its prefix.
    assert prompt_text([1], 300, "x-", "", vocabulary).split() == one[:300]
    # Another process (another hash seed) builds the same words: workers and runs agree.
    code = ("import json,sys; from stackpin.bench.words import from_tokenizer; from stackpin.bench.traceio import "
            "prompt_text; from stackpin.sim.dynamo import tokenizer_json; "
            "v = from_tokenizer(json.dumps(tokenizer_json(4000)).encode(), 'bed'); "
            "sys.stdout.write(prompt_text([1, 2], 1024, 'x-', 'a.0', v))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    assert other.stdout.split() == one


@pytest.mark.parametrize("data, problem", [
    (b"\xff\xfe not utf-8", "not a tokenizer.json"),
    (b'{"version": "1.0"}', "not a tokenizer.json"),
    (b"[" * 100_000, "not a tokenizer.json"),
    (json.dumps(tokenizer_json(100)).encode(), "only 100 words are one token each"),
])
def test_a_bad_tokenizer_is_one_line(data: bytes, problem: str) -> None:
    with pytest.raises(StackpinError, match=problem) as caught:
        from_tokenizer(data, "t.json")
    assert "\n" not in str(caught.value)


def test_bench_run_refuses_a_tokenizer_it_cannot_read(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"session_id": "s", "input_length": 10, "output_length": 2}\n')
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for given, problem in ((tmp_path / "missing.json", "No such file"), (fifo, "not a regular file"),
                           (trace, "not a tokenizer.json")):
        result = CliRunner().invoke(main, ["bench", "run", "--endpoint", "http://127.0.0.1:9", "--trace", str(trace),
                                           "--lock", str(LOCK), "--tokenizer", str(given),
                                           "--out", str(tmp_path / "r.json")])
        assert result.exit_code == 2, result.output
        assert problem in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()


def test_an_endpoint_serving_another_model_is_refused_or_recorded(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"session_id": "s", "input_length": 10, "output_length": 2}\n')
    out = tmp_path / "r.json"
    with serve_in_thread(Server(model="someone/else")) as server:
        args = ["bench", "run", "--endpoint", server.url, "--trace", str(trace), "--lock", str(LOCK),
                "--agents", "1", "--out", str(out)]
        refused = CliRunner().invoke(main, args)
        assert refused.exit_code == 2
        assert "serves someone/else, but the lock" in refused.output and not out.exists()
        kept = CliRunner().invoke(main, [*args, "--model", "someone/else", "-o", "json"])
    assert kept.exit_code == 0, kept.output
    assert json.loads(out.read_text())["served_model"] == "someone/else"


def test_prompts_the_server_counts_otherwise_mark_the_result(tmp_path: Path) -> None:
    """The issue's case: each word several tokens to the served tokenizer; the result says so."""
    from stackpin.bench.headline import headline
    from stackpin.bench.resultfile import read_result

    trace = tmp_path / "t.jsonl"
    trace.write_text('{"session_id": "s", "input_length": 100, "output_length": 2}\n'
                     '{"session_id": "s", "input_length": 50, "output_length": 2}\n')
    results = {}
    for per_word in (1, 3):
        out = tmp_path / f"r{per_word}.json"
        with serve_in_thread(Server(tokens_per_word=per_word)) as server:
            run = CliRunner().invoke(main, ["bench", "run", "--endpoint", server.url, "--trace", str(trace),
                                            "--lock", str(LOCK), "--agents", "1", "--out", str(out)])
        assert run.exit_code == 0, run.output
        results[per_word] = (run.output, read_result(out))
    fine, off = results[1], results[3]
    assert [r.sent_tokens for p in fine[1].points for r in p.request_log] == [100, 152]  # 100 + 2 answer + 50
    assert "prompts were off" not in fine[0] and "trace's size" not in headline(fine[1])
    assert "warning: 2 of 2 prompts were off the trace's size" in off[0]
    assert "prompts not the trace's size" in headline(off[1])


def test_an_endpoint_naming_a_frontend_on_another_host_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"session_id": "s", "input_length": 10, "output_length": 2}\n')
    info = {"simulated": True, "model": "roofline", "serving": "http://203.0.113.9:8000"}
    with serve_in_thread(Server(sim_info=info)) as server:
        run = CliRunner().invoke(main, ["bench", "run", "--endpoint", server.url, "--trace", str(trace),
                                        "--lock", str(LOCK), "--out", str(tmp_path / "r.json")])
    assert run.exit_code == 2 and "names a frontend on another host" in run.output
    assert not (tmp_path / "r.json").exists()
