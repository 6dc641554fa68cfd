"""The search tools (BM25 index, Search-R1 client and server) and the ``search`` env, all real:
bm25s indexes, aloft's retrieval server in a subprocess on 127.0.0.1, HTTP over loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from aloft.data import build_dataset
from aloft.data.sources.search import corpus_path
from aloft.gym import check_env, make
from aloft.gym.envs.search import INVALID_ACTION_MESSAGE, exact_match, f1_score, normalize_answer
from aloft.gym.tools.search import (
    Hit,
    LocalIndex,
    RetrievalClient,
    RetrievalError,
    SearchTools,
    local_index,
    read_corpus,
    render_hits,
)
from aloft.gym.tools.search_server import SearchServer
from aloft.types import InfrastructureError

DOCUMENTS = [
    {
        "id": "d1",
        "title": "page fault",
        "text": "An access to a page of memory that is not mapped to physical memory.",
    },
    {
        "id": "d2",
        "title": "Scheme",
        "text": "A small Lisp dialect with lexical scope and first-class continuations.",
    },
    {"id": "d3", "title": "compiler", "text": "A program that translates source code into machine code."},
    {
        "id": "d4",
        "title": "interpreter",
        "text": "A program that executes source code directly, statement by statement.",
    },
]
ELEMENTS = corpus_path("elements")
CARBON_EXTRAS = {
    "question": "What is the atomic number of carbon?",
    "reward_spec": {"method": "rule", "ground_truth": {"target": ["6"]}},
}


# ---- the index ---------------------------------------------------------------------------------
def test_local_index_ranks_by_bm25_and_round_trips_through_save_and_load(tmp_path: Path) -> None:
    index = LocalIndex(DOCUMENTS)
    hits = index.search("memory page not mapped", topk=2)
    assert [hit.id for hit in hits][:1] == ["d1"]
    assert hits[0].title == "page fault" and hits[0].score > 0
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))
    # Words absent from the corpus (or stop words only) find nothing rather than arbitrary documents.
    assert index.search("zzyzx the of", topk=3) == []
    # topk larger than the corpus is clamped.
    assert len(index.search("program source code", topk=50)) == 2

    loaded = LocalIndex.load(index.save(tmp_path / "index"))
    assert len(loaded) == len(DOCUMENTS)
    assert loaded.search("memory page not mapped", 2) == hits


def test_local_index_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one document"):
        LocalIndex([])
    with pytest.raises(ValueError, match="'d1' appears more than once"):
        LocalIndex([DOCUMENTS[0], DOCUMENTS[0]])
    with pytest.raises(FileNotFoundError, match="not a saved LocalIndex"):
        LocalIndex.load(tmp_path)
    with pytest.raises(ValueError, match="positive integer"):
        LocalIndex(DOCUMENTS).search("code", topk=0)


def test_corpus_files_in_both_formats_and_the_per_process_cache(tmp_path: Path) -> None:
    search_r1 = tmp_path / "search_r1.jsonl"
    search_r1.write_text(
        "\n".join(json.dumps({"id": d["id"], "contents": f"{d['title']}\n{d['text']}"}) for d in DOCUMENTS)
        + "\n"
    )
    assert read_corpus(search_r1) == DOCUMENTS
    first = local_index(corpus_path=search_r1)
    assert local_index(corpus_path=str(search_r1)) is first  # built once per process
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "title": "x"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl line 1: .*neither 'text' nor 'contents'"):
        read_corpus(bad)


# ---- the tool group --------------------------------------------------------------------------
def test_search_tools_render_hits_like_search_r1_and_turn_failures_into_messages() -> None:
    with SearchTools(LocalIndex(DOCUMENTS), max_topk=2, max_doc_chars=20) as tools:
        assert [schema["function"]["name"] for schema in tools.schemas()] == ["search"]
        result = tools.call("search", {"query": "memory page not mapped", "topk": 9})
        assert result.ok
        lines = result.output.splitlines()
        assert len(lines) <= 2  # topk capped at max_topk
        assert lines[0] == "Doc 1(Title: page fault) An access to a page..."
        empty = tools.call("search", {"query": "   "})
        assert not empty.ok and "query is empty" in empty.output
        assert tools.call("search", {"query": "zzyzx"}).output == "No results found."
        assert not tools.call("search", {"query": "x", "topk": "three"}).ok
        assert tools.metrics()["tool_errors"] == 2.0
    assert render_hits([Hit("a", "T", "one\n two", 1.0)]) == "Doc 1(Title: T) one two"


# ---- the server and the client, over real HTTP -------------------------------------------------
def _start_server(*args: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "aloft.gym.tools.search_server", *args, "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    line = process.stdout.readline() if process.stdout else ""
    if "listening on " not in line:
        process.kill()
        raise AssertionError(
            f"the search server did not start: {line!r} {process.stderr.read() if process.stderr else ''}"
        )
    return process, line.rsplit("listening on ", 1)[1].strip()


@pytest.fixture(scope="module")
def elements_server():
    process, url = _start_server("--corpus", str(ELEMENTS))
    yield url
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_server_speaks_search_r1_protocol(elements_server: str) -> None:
    request = urllib.request.Request(
        elements_server,
        data=json.dumps(
            {"queries": ["atomic number of carbon", "symbol Fe iron"], "topk": 2, "return_scores": True}
        ).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        body = json.loads(response.read())
    assert len(body["result"]) == 2 and len(body["result"][0]) == 2
    first = body["result"][0][0]
    assert first["document"]["contents"].split("\n", 1)[0] == "carbon"
    assert {"id", "contents"} <= set(first["document"]) and isinstance(first["score"], float)
    # Without return_scores, documents only (Search-R1's other response shape).
    plain = urllib.request.Request(elements_server, data=b'{"queries": ["carbon"], "topk": 1}', method="POST")
    with urllib.request.urlopen(plain, timeout=10) as response:
        assert json.loads(response.read())["result"][0][0]["title"] == "carbon"
    bad = urllib.request.Request(elements_server, data=b'{"queries": "carbon"}', method="POST")
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(bad, timeout=10)
    assert error.value.code == 400 and "list of strings" in json.loads(error.value.read())["error"]
    with urllib.request.urlopen(elements_server.replace("/retrieve", "/health"), timeout=10) as response:
        assert json.loads(response.read())["documents"] == len(read_corpus(ELEMENTS))


def test_client_matches_the_local_index(elements_server: str) -> None:
    client = RetrievalClient(elements_server.removesuffix("/retrieve"))  # the base URL works too
    local = local_index(corpus_path=ELEMENTS)
    queries = [
        "atomic number of carbon",
        "noble gas used in lamps",
        "Which chemical element has the symbol W?",
    ]
    remote_hits = client.batch_search(queries, topk=3)
    local_hits = local.batch_search(queries, topk=3)
    for remote, expected in zip(remote_hits, local_hits):
        assert [hit.id for hit in remote] == [hit.id for hit in expected]
        assert [hit.title for hit in remote] == [hit.title for hit in expected]
        assert [hit.score for hit in remote] == pytest.approx([hit.score for hit in expected], rel=1e-5)


def test_client_reports_an_unreachable_server_in_one_line() -> None:
    with SearchServer(LocalIndex(DOCUMENTS)) as server:  # take a free port, then free it
        url = server.url
        assert RetrievalClient(url).search("memory page")[0].id == "d1"
    with pytest.raises(
        RetrievalError, match=r"^cannot reach retrieval server http://127\.0\.0\.1:\d+/retrieve: "
    ):
        RetrievalClient(url, timeout_s=2, retries=0).search("memory page")
    with pytest.raises(ValueError, match="must start with http"):
        RetrievalClient("localhost:8000")


# ---- the env -----------------------------------------------------------------------------------
def _play(env, completions: list[str]):
    messages, _ = env.reset([{"role": "user", "content": "q"}])
    outputs = []
    for completion in completions:
        output = env.step(completion)
        outputs.append(output)
        if output.done:
            break
    return outputs


def test_episode_against_the_server_over_http(elements_server: str) -> None:
    env = make("search", config={"retrieval_url": elements_server, "topk": 2}, extras=CARBON_EXTRAS)
    first, second = _play(
        env,
        [
            "<think>I should look it up.</think>\n<search> atomic number of carbon </search>",
            "<think>Doc 1 says 6.</think><answer> 6 </answer>",
        ],
    )
    assert not first.done and first.reward == 0.0
    (observation,) = first.observations
    assert observation["role"] == "user"
    assert observation["content"].startswith("<information>Doc 1(Title: carbon) Symbol: C Atomic number: 6")
    assert observation["content"].endswith("</information>") and "Doc 2(Title: " in observation["content"]
    assert second.done and second.reward == 1.0 and second.observations == []
    assert second.info["em"] == 1.0 and second.info["ground_truth"] == ["6"]
    assert env.metrics() == {
        "searches": 1.0,
        "answered": 1.0,
        "em": 1.0,
        "f1": 1.0,
        "turns": 2.0,
        "invalid_turns": 0.0,
        "search_errors": 0.0,
    }
    env.close()
    env.close()


def test_episode_on_a_local_index_with_f1_reward_and_format_reward(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(document) + "\n" for document in DOCUMENTS))
    extras = {"answer": "first-class continuations", "question": "What does Scheme have?"}
    config = {"corpus_path": str(corpus), "reward": "f1", "format_reward": 0.5, "max_turns": 3}
    env = make("search", config=config, extras=extras)
    search, answer = _play(env, ["<search>Lisp dialect lexical scope", "<answer>continuations</answer>"])
    assert "Doc 1(Title: Scheme)" in search.observations[0]["content"]  # an unclosed tag at the end counts
    assert answer.info["em"] == 0.0 and answer.info["f1"] == pytest.approx(2 / 3)
    assert answer.reward == pytest.approx(2 / 3 + 0.5)
    # The same env, reset, with an invalid turn first: no format reward, exact match.
    invalid, final = _play(
        env, ["I think it is continuations.", "<answer>First-class continuations.</answer>"]
    )
    assert invalid.observations == [{"role": "user", "content": INVALID_ACTION_MESSAGE}]
    assert final.reward == 1.0 and env.metrics()["invalid_turns"] == 1.0 and env.metrics()["searches"] == 0.0


def test_turn_limit_ends_an_unanswered_episode_without_searching() -> None:
    env = make("search", config={"corpus_path": str(ELEMENTS), "max_turns": 2}, extras=CARBON_EXTRAS)
    first, last = _play(env, ["<search>carbon</search>", "<search>carbon again</search>"])
    assert not first.done and last.done and last.reward == 0.0 and last.observations == []
    assert env.metrics()["searches"] == 1.0 and env.metrics()["answered"] == 0.0
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("<answer>6</answer>")


def test_a_dead_retrieval_server_fails_the_step_instead_of_becoming_an_observation() -> None:
    """A server that is down is not the policy's doing: the env's step raises (the generator then
    fails the trajectory, which is never trained on) instead of showing the policy an error."""
    with SearchServer(LocalIndex(DOCUMENTS)) as server:
        url = server.url
    env = make("search", config={"retrieval_url": url, "retrieval_timeout_s": 2}, extras=CARBON_EXTRAS)
    env.reset([{"role": "user", "content": "q"}])
    with pytest.raises(RetrievalError, match="^cannot reach retrieval server") as failure:
        env.step("<search>carbon</search>")
    assert isinstance(failure.value, InfrastructureError)


def test_a_slow_retrieval_server_fails_the_step_with_the_clients_message_not_a_timeout_observation() -> None:
    """The search group's safety-net timeout sits above the client's own (timeout x tries + 5 s), so
    a server that answers too slowly ends in the client's RetrievalError naming it, an
    InfrastructureError: never a "timed out" observation the policy would be rewarded for."""
    import http.server
    import threading

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            time.sleep(3)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        assert SearchTools(RetrievalClient(url)).timeout_s == 30 * 2 + 5  # the client's defaults
        tools = SearchTools(RetrievalClient(url, timeout_s=0.5, retries=1))
        assert tools.timeout_s == 6.0
        start = time.perf_counter()
        with pytest.raises(RetrievalError, match="^cannot reach retrieval server .*timed out") as failure:
            tools.call("search", {"query": "carbon"})
        assert isinstance(failure.value, InfrastructureError) and time.perf_counter() - start < 3
    finally:
        server.shutdown()
        server.server_close()


def test_config_and_row_errors_are_one_line() -> None:
    with pytest.raises(ValueError, match="unknown config keys \\['top_k'\\]"):
        make("search", config={"top_k": 3, "corpus_path": str(ELEMENTS)}, extras=CARBON_EXTRAS)
    with pytest.raises(ValueError, match="no search backend"):
        make("search", extras=CARBON_EXTRAS)
    with pytest.raises(ValueError, match="no ground truth"):
        make("search", config={"corpus_path": str(ELEMENTS)}, extras={"question": "?"})
    with pytest.raises(ValueError, match="reward must be one of"):
        make("search", config={"corpus_path": str(ELEMENTS), "reward": "bleu"}, extras=CARBON_EXTRAS)


def test_answer_normalisation_matches_squad() -> None:
    assert normalize_answer("The  Page-Fault!") == "pagefault"
    assert exact_match("an Apple.", ["apple"]) == 1.0 and exact_match("apples", ["apple"]) == 0.0
    assert f1_score("red apple pie", ["apple pie"]) == pytest.approx(0.8)
    assert f1_score("", ["x"]) == 0.0


def test_check_env_passes_on_dataset_rows_with_local_and_remote_backends(elements_server: str) -> None:
    rows = build_dataset("search", n=3, seed=0, corpus="elements")
    check_env("search", rows)  # the rows' corpus_path
    check_env("search", rows, config={"retrieval_url": elements_server, "max_turns": 2})


def test_a_dataset_row_episode_finds_its_gold_document() -> None:
    (row,) = build_dataset("search", n=1, seed=3, corpus="foldoc")
    extras = {key: value for key, value in row.items() if key not in ("prompt", "env_class")}
    env = make("search", extras=extras)
    start = time.perf_counter()
    search, answer = _play(env, [f"<search>{row['question']}</search>", f"<answer>{row['answer']}</answer>"])
    assert f"(Title: {row['answer']})" in search.observations[0]["content"]
    assert answer.reward == 1.0
    assert time.perf_counter() - start < 5
