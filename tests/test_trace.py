"""stackpin trace gen/stats/import: determinism, the published shape, reuse, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from stackpin.bench.tracegen import generate, published_shape
from stackpin.bench.traceio import prompt_lengths, read_trace
from stackpin.bench.tracestats import trace_stats
from stackpin.cli.main import main


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_same_seed_same_bytes_and_another_seed_differs(tmp_path: Path) -> None:
    outs = []
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        code, _, err = _run("trace", "gen", "--sessions", "30", "--seed", seed, "--out", str(tmp_path / name))
        assert code == 0, err
        outs.append((tmp_path / name).read_bytes())
    assert outs[0] == outs[1]
    assert outs[0] != outs[2]
    # The bytes are the contract: sorted keys, no spaces, one turn a line, every line a TraceTurn.
    first = outs[0].decode().splitlines()[0]
    assert first == json.dumps(json.loads(first), sort_keys=True, separators=(",", ":"))


def test_generated_trace_has_the_published_agentperf_shape() -> None:
    turns = generate(400, 3)
    stats = trace_stats(turns)
    published = published_shape()
    assert abs(stats.isl.mean - published["input_mean"]) <= 0.15 * published["input_mean"]
    assert published["input_min"] * 0.9 <= min(prompt_lengths(turns)) <= published["input_min"] * 1.5
    assert published["input_max"] * 0.8 <= stats.isl.max <= published["input_max"]
    assert abs(stats.osl.median - published["output_median"]) <= 0.15 * published["output_median"]
    assert abs(stats.osl.p95 - published["output_p95"]) <= 0.2 * published["output_p95"]
    assert stats.turns.mean > 3 and stats.reuse_ratio > 0.8  # multi-turn, and most context is reused


def test_hash_ids_name_each_turns_own_new_tokens_as_aiperf_reads_them(tmp_path: Path) -> None:
    """AIPerf's rule (multi-turn deltas): a turn's hash_ids cover its input_length tokens, last block partial."""
    turns = generate(20, 5)
    lengths = prompt_lengths(turns)
    seen: set[int] = set()
    for index, turn in enumerate(turns):
        assert len(turn.hash_ids) == -(-turn.input_length // 512)
        first = index == 0 or turns[index - 1].session_id != turn.session_id
        if first:  # every session opens with the shared system prompt block, the same id everywhere
            assert turn.hash_ids[0] == 0 and lengths[index] == turn.input_length
        else:
            prev = turns[index - 1]
            assert lengths[index] == lengths[index - 1] + prev.output_length + turn.input_length
        new_ids = turn.hash_ids[1:] if first else turn.hash_ids
        assert not seen & set(new_ids)  # new content, new ids: no id is shared but the system prompt's
        seen.update(new_ids)
    # ... and the file reads back through the same checks `trace import` applies to AIPerf traces.
    out = tmp_path / "t.jsonl"
    assert _run("trace", "gen", "--sessions", "20", "--seed", "5", "--out", str(out))[0] == 0
    assert read_trace(out) == turns


def test_the_clients_prompt_for_a_turn_is_the_previous_prompt_and_answer_then_the_new_words() -> None:
    from stackpin.bench.sessions import Context

    turns = generate(6, 2)
    lengths = prompt_lengths(turns)
    openings = []
    context, previous = Context(), None
    for turn, length in zip(turns, lengths, strict=True):
        if previous is not None and previous[0].session_id != turn.session_id:
            context, previous = Context(session=turn.session_id), None
        words = " ".join(m["content"] for m in context.next_messages(turn)).split()
        assert len(words) == length  # one word one token: the prompt the simulator counts
        if previous is not None:
            assert words[:len(previous[1])] == previous[1]  # turn k starts with turn k-1's prompt + answer
        else:
            openings.append(words)
        answer = " ".join(f"a{len(words)}_{i}" for i in range(turn.output_length))
        context.add_answer(answer)
        previous = (turn, words + answer.split())
    # Sessions share the system prompt's block, word for word, and nothing after it.
    assert len(openings) == 6 and all(o[:512] == openings[0][:512] for o in openings)
    assert len({o[512] for o in openings}) == 6


def test_reuse_ratio_counts_the_accumulated_context_and_repeated_ids() -> None:
    from stackpin.bench.trace import TraceTurn

    a1 = TraceTurn(session_id="a", input_length=1100, output_length=30, hash_ids=(0, 1, 2))
    a2 = TraceTurn(session_id="a", input_length=100, output_length=10, hash_ids=(3,))
    b1 = TraceTurn(session_id="b", input_length=600, output_length=10, hash_ids=(0, 4))
    # a1: nothing cached; a2: a1's prompt in whole blocks (1024 of 1230); b1: block 0 (512 of 600).
    assert trace_stats([a1, a2, b1]).reuse_ratio == round((1024 + 512) / (1100 + 1230 + 600), 4)


def test_stats_json_and_text(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    assert _run("trace", "gen", "--sessions", "10", "--seed", "1", "--out", str(trace))[0] == 0
    code, out, _ = _run("trace", "stats", str(trace), "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert data["sessions"] == 10 and data["requests"] == len(read_trace(trace))
    assert set(data["isl"]) == {"mean", "median", "p95", "max"} and 0 < data["reuse_ratio"] < 1
    code, out, _ = _run("trace", "stats", str(trace))
    assert code == 0 and "reuse ratio" in out and out.splitlines()[2].startswith("ISL")


def test_param_override_and_bad_param(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    assert _run("trace", "gen", "--sessions", "50", "--param", "turns.max=1", "--out", str(out))[0] == 0
    assert trace_stats(read_trace(out)).turns.max == 1
    out.unlink()
    code, _, err = _run("trace", "gen", "--sessions", "5", "--param", "nope=1", "--out", str(out))
    assert code == 2 and "nope" in err and not out.exists()


def test_import_single_turn_mooncake_and_multi_turn_aiperf(tmp_path: Path) -> None:
    mooncake = tmp_path / "mooncake.jsonl"
    mooncake.write_text('{"timestamp": 0, "input_length": 1200, "output_length": 52, "hash_ids": [0, 1, 2]}\n'
                        '{"timestamp": 105, "input_length": 1800, "output_length": 26, "hash_ids": [0, 3, 4, 5]}\n')
    out = tmp_path / "out.jsonl"
    code, _, err = _run("trace", "import", str(mooncake), "--out", str(out))
    assert code == 0, err
    turns = read_trace(out)
    assert [t.session_id for t in turns] == ["line1", "line2"] and turns[1].timestamp == 105
    assert trace_stats(turns).reuse_ratio > 0  # block 0 is shared between the two requests
    multi = tmp_path / "multi.jsonl"
    multi.write_text('{"session_id": "a", "input_length": 600, "output_length": 10, "hash_ids": [0, 1]}\n'
                     '{"session_id": "a", "input_length": 100, "output_length": 10, "delay": 2000.0, '
                     '"hash_ids": [2]}\n{"session_id": "b", "input_length": 1000, "output_length": 5, '
                     '"hash_ids": [0]}\n')
    assert _run("trace", "import", str(multi), "--out", str(out))[0] == 0
    turns = read_trace(out)
    assert [(t.session_id, t.delay) for t in turns] == [("a", 0), ("a", 2000), ("b", 0)]
    assert prompt_lengths(turns) == [600, 710, 1000]  # input_length is the delta; the client adds history
    assert turns[2].hash_ids == (0,)  # a prefix-only id list: session b shares a's first block, then fresh
    assert trace_stats(turns).reuse_ratio == round((512 + 512) / (600 + 710 + 1000), 4)


def test_import_bad_lines_name_file_line_and_field(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    cases = {
        '{"input_length": 5, "output_length": 1}\n{"input_length": 5}\n': ":2:1: output_length: missing",
        '{"input_length": 5, "output_length": 1}\nnot json\n': ":2:1: not JSON",
        '{"input_length": -1, "output_length": 1}\n': ":1:1: input_length: must be an integer from 0 to 2147483648",
        '{"input_length": 5, "output_length": 1, "hash_ids": ["x"]}\n': ":1:1: hash_ids:",
        '{"text_input": "hi", "output_length": 1}\n': ":1:1: text_input:",
        # AIPerf's rules for hash_ids (aiperf/dataset/generator/prompt.py _build_token_sequence):
        '{"input_length": 100, "output_length": 1, "hash_ids": [0, 1]}\n':
            ":1:1: hash_ids: 2 ids for input_length 100: at most ceil(100/512) = 1",
        '{"input_length": 0, "output_length": 1, "hash_ids": [0]}\n': ":1:1: input_length: must be > 0",
        '{"input_length": 600, "output_length": 1, "hash_ids": [0, 7]}\n{"input_length": 1024, '
        '"output_length": 1, "hash_ids": [7, 8]}\n': ":2:1: hash_ids: id 7 names 512 tokens here but 88 at line 1",
        '{"session_id": "a", "input_length": 1, "output_length": 1}\n{"session_id": "b", "input_length": 1, '
        '"output_length": 1}\n{"session_id": "a", "input_length": 1, "output_length": 1}\n': ":3:1: session_id: a:",
    }
    for text, expected in cases.items():
        src = tmp_path / "bad.jsonl"
        src.write_text(text)
        code, _, err = _run("trace", "import", str(src), "--out", str(out))
        assert code == 2, (text, err)
        assert err.strip().count("\n") == 0 and f"{src}{expected}" in err, err
        assert "Traceback" not in err and not out.exists()
