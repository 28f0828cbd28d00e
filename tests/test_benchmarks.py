"""Benchmarks are declarations (evaluator/data/benchmarks/): adding one is one module plus one prompt file.

The test copies the package as a clone has it (prompts/ once, the package's link to it), adds a module that
declares a new benchmark and its prompt file, and nothing else; then evaluates, scores and reports a run of
it against a loopback server. Its title, its zero counts and its prompt reach every output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from support.datagen import image_bytes
from support.openai_test_server import TestServer

from evaluator.data.benchmarks import REGISTRY, get_benchmark, title_of

REPO = Path(__file__).resolve().parents[1]

TALLY = '''"""Tally: how many marks a card holds (a test benchmark)."""

from __future__ import annotations

from evaluator.core.records import Sampling
from evaluator.data.benchmarks.base import Benchmark, Sample, check_answer, image_bytes_of, sha256_hex
from evaluator.data.parsing import parse_answer_tag
from evaluator.data.benchmarks.base import prompt_text


class Tally(Benchmark):
    name, title, hub_id = "tally", "Tally Marks", "example/Tally"
    columns = {"id": "string", "image": "Image struct", "question": "string", "count": "int", "shape": "string"}
    group_fields = ("shape",)
    default_sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=64)
    prompt_files = ("tally_system.txt",)
    prompt_budget = 1024
    zero_counts = True
    manifest_reads_images = True

    def samples(self, batch, first_row_index, with_images):
        for i, row in enumerate(batch.to_pylist()):
            image = image_bytes_of(row["image"]) if with_images else None
            truth, error = check_answer(row["count"])
            yield Sample(
                sample_id=row["id"], row_index=first_row_index + i, image=image,
                image_sha256=sha256_hex(image) if image else None, ground_truth=truth,
                groups={"shape": row["shape"]}, text=row["question"], data_error=error,
            )

    def messages(self, sample, image_data_url):
        return [
            {"role": "system", "content": prompt_text("tally_system.txt")},
            {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": image_data_url}},
                {"type": "text", "text": sample.text},
            ]},
        ]

    def parse(self, text):
        return parse_answer_tag(text)
'''


def package_with_tally(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(REPO / "prompts", src / "prompts")
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "evaluator", src / "evaluator", symlinks=True, ignore=skip)
    (src / "evaluator" / "data" / "benchmarks" / "tally.py").write_text(TALLY)
    (src / "prompts" / "tally_system.txt").write_text("Count the tally marks. End with <answer>N</answer>.\n")
    return src


def tally_data(path: Path) -> list[int]:
    counts = [1, 3, 5, 2]  # no zero: only the declaration puts the 0 bucket in
    rows = [
        {
            "id": f"t{i}",
            "image": {"bytes": image_bytes(500 + i), "path": f"t{i}.jpg"},
            "question": "How many marks?",
            "count": n,
            "shape": "bar" if i % 2 else "dot",
        }
        for i, n in enumerate(counts)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return counts


def test_a_new_benchmark_is_one_module_and_one_prompt_file(tmp_path: Path) -> None:
    src = package_with_tally(tmp_path)
    data = tmp_path / "data" / "tally.parquet"
    tally_data(data)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCCOUNT_", "MODEL_API"))}
    env["PYTHONPATH"] = str(src)
    run = tmp_path / "runs" / "tally"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "evaluator.cli", *args]
        return subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True, timeout=240)

    with TestServer({"default_reply": "I see three.\n<answer>3</answer>"}) as srv:
        got = cli("evaluate", "--benchmark", "tally", "--model", "m", "--base-url", srv.base_url)
        assert got.returncode == 2 and "--data-files" in got.stderr, got.stderr  # the hub's files, offline
        args = ["--benchmark", "tally", "--model", "m", "--base-url", srv.base_url, "--data-files", str(data)]
        got = cli("evaluate", *args, "--run-root", str(run))
        assert got.returncode == 0, got.stderr
        sent = srv.requests()
    assert len(sent) == 4
    assert sent[0]["body"]["messages"][0]["content"].startswith("Count the tally marks.")
    got = cli("score", str(run))
    assert got.returncode == 0, got.stderr
    summary = json.loads((run / "scores" / "summary.json").read_text())
    assert summary["benchmark"] == "tally"
    assert summary["primary"]["correct"] == 1
    config = json.loads((run / "run_config.json").read_text())
    assert list(config["prompts"]) == ["tally_system.txt"]
    md = (run / "scores" / "summary.md").read_text()
    assert md.startswith("# Tally Marks:"), md[:80]
    assert "<title>Tally Marks" in (run / "scores" / "report.html").read_text()
    assert summary["count_buckets"]["order"][0] == "0", "a benchmark declaring zero counts has the 0 bucket"


def test_the_shipped_benchmarks_declare_title_and_zero_counts() -> None:
    assert sorted(REGISTRY) == ["countqa", "doccount"]
    assert (title_of("doccount"), title_of("countqa"), title_of("unknown")) == (
        "DocCount",
        "CountQA",
        "unknown",
    )
    assert get_benchmark("countqa").zero_counts and not get_benchmark("doccount").zero_counts
