"""The demo reference server: OpenAI-compatible replies computed from the pixels by the detector."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest

from evaluator.demo import page_parts, sample_data
from evaluator.demo import reference_server as rs

REPO = Path(__file__).resolve().parents[1]
ANSWER_TAIL = re.compile(r"<answer>(\d+)</answer>\s*\Z")


@pytest.fixture(scope="module")
def counter() -> rs.LayoutCounter:
    return rs.LayoutCounter()


@pytest.fixture(scope="module")
def server(counter: rs.LayoutCounter) -> Iterator[rs.ReferenceServer]:
    with rs.ReferenceServer(host="127.0.0.1", port=0, counter=counter) as srv:
        yield srv


@pytest.fixture(scope="module")
def pages() -> list[sample_data.SamplePage]:
    return sample_data.render_sample_pages(2, seed=0)


def _messages(jpeg: bytes, prompt: str) -> list[dict]:
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
    return [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": prompt}],
        }
    ]


def _prompt(page: sample_data.SamplePage) -> str:
    template = sample_data.load_prompt_template()
    return sample_data.compose_prompt(
        template, page.target_class, sample_data.CLASS_DEFINITIONS[page.target_class], page.question
    )


def test_openai_client_round_trip(server: rs.ReferenceServer, counter: rs.LayoutCounter, pages) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=60)
    assert [m.id for m in client.models.list().data] == [rs.DEFAULT_MODEL_NAME]
    page = pages[1]  # a Photograph page
    reply = client.chat.completions.create(
        model=rs.DEFAULT_MODEL_NAME,
        messages=_messages(page.jpeg, _prompt(page)),
        temperature=1.0,
        top_p=0.95,
        max_tokens=32768,
    )
    text = reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"
    m = ANSWER_TAIL.search(text)
    assert m, text
    # The reply is the detector's own count for these pixels (the server never sees an answer
    # column: the request holds only the image and the prompt).
    expected = counter.count(page.jpeg, page.target_class)
    assert int(m.group(1)) == expected.count
    for region in expected.regions:
        assert f"[{region.box[0]}, {region.box[1]}, {region.box[2]}, {region.box[3]}]" in text
    assert reply.usage is not None and reply.usage.completion_tokens > 0


def test_count_depends_on_the_pixels_and_class(counter: rs.LayoutCounter, pages) -> None:
    page = pages[1]
    rgb = rs.decode_image(page.jpeg)
    assert counter.regions(np.full_like(rgb, 255)) == []  # a blank page has nothing to count
    photos = counter.count_array(rgb, "photographs")  # keyword fallback for the class name
    assert photos.target_class == "Photograph" and photos.count >= 1
    tables = [r for r in photos.all_regions if r.target_class == "Table"]
    assert counter.count_array(rgb, "Table").count == len(tables)


def test_http_errors_and_health(server: rs.ReferenceServer, pages) -> None:
    base = f"http://127.0.0.1:{server.port}"

    def post(body: dict) -> tuple[int, dict]:
        req = urllib.request.Request(
            base + "/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    with urllib.request.urlopen(base + "/health", timeout=10) as resp:
        assert json.loads(resp.read())["status"] == "ok"
    status, body = post({"model": "other", "messages": _messages(pages[0].jpeg, _prompt(pages[0]))})
    assert status == 404 and "does not exist" in body["error"]["message"]
    status, body = post({"model": rs.DEFAULT_MODEL_NAME, "messages": [{"role": "user", "content": "hi"}]})
    assert status == 400 and "image" in body["error"]["message"]
    bad_url = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "http://example.invalid/x.jpg"}}],
        }
    ]
    status, body = post({"model": rs.DEFAULT_MODEL_NAME, "messages": bad_url})
    assert status == 400 and "data:" in body["error"]["message"]


def test_parse_target_class() -> None:
    prompt = sample_data.compose_prompt(
        sample_data.load_prompt_template(), "Chart / Graph", "def", "How many?"
    )
    assert rs.parse_target_class(prompt) == "Chart / Graph"
    assert rs.parse_target_class("Target class:\nBrand Logo\n") == "Brand Logo"
    assert rs.parse_target_class("Target class: Table") == "Table"
    assert rs.parse_target_class("no class here") is None


def test_xy_cut_splits_on_gutters() -> None:
    ink = np.zeros((40, 100), dtype=bool)
    ink[5:35, 0:30] = True
    ink[5:35, 50:100] = True  # 20-pixel gutter between two blocks
    assert page_parts.xy_cut(ink, min_gap=10) == [(0, 5, 30, 35), (50, 5, 100, 35)]
    assert page_parts.xy_cut(ink, min_gap=25) == [(0, 5, 100, 35)]


def test_cli_port_file(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "evaluator.demo.reference_server",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--port-file",
            str(port_file),
        ],
        cwd=str(REPO),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "server did not write its port file"
            time.sleep(0.1)
        port = int(port_file.read_text())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == rs.DEFAULT_MODEL_NAME
    finally:
        proc.terminate()
        proc.wait(timeout=30)
