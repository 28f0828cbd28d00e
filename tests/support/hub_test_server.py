"""A loopback stand-in for the few Hugging Face hub HTTP calls the evaluator makes: a benchmark's
dataset (`doccount data`) and a model's weights (`doccount model`).

The real `huggingface_hub` client (the version installed in the venv) talks to it through
`HF_ENDPOINT=http://127.0.0.1:PORT`; nothing here imitates the client. What the server answers,
and why, is taken from the client's own source (huggingface_hub 1.x/2.x; paths relative to the
installed package):

* revision resolution: `HfApi.dataset_info` (hf_api.py) GETs
  `{endpoint}/api/datasets/{repo_id}/revision/{quote(revision, safe='')}` (with no revision:
  `{endpoint}/api/datasets/{repo_id}`, the default branch) and reads `sha` (the
  commit) from the JSON body (`DatasetInfo.__init__`). `HfApi.resolve_revision` and
  `snapshot_download` (_snapshot_download.py) call it through `repo_info`. A model repo is the same
  under `/api/models/{repo_id}` (`HfApi.model_info`, read by `ModelInfo.__init__`).
  With `blobs` (files_metadata=True) each sibling also gets `size`, `blobId` and `lfs` {`size`,
  `sha256`, `pointerSize`} (`RepoSibling` in `ModelInfo.__init__`).
* file listing: `HfApi._iter_repo_tree_pages` (hf_api.py) GETs
  `{endpoint}/api/datasets/{repo_id}/tree/{revision}?recursive=True&expand=False` and builds a
  `RepoFile` from `type`, `path`, `size`, `oid` and optional `lfs` {`oid`, `size`, `pointerSize`}
  (`RepoFile.__init__`); further pages would follow a `Link: <...>; rel="next"` header
  (utils/_pagination.py), one page is enough here.
* file metadata: `get_hf_file_metadata` (file_download.py) sends `HEAD
  {endpoint}/datasets/{repo_id}/resolve/{revision}/{path}` (`hf_hub_url` with
  `constants.HUGGINGFACE_CO_URL_TEMPLATE`; a model's URL has no type prefix:
  `{endpoint}/{repo_id}/resolve/...`, constants.REPO_TYPES_URL_PREFIXES) and needs `X-Repo-Commit` (else FileMetadataError
  "does not seem to be served by a Hugging Face Hub endpoint"), `X-Linked-Etag` or `ETag` (the
  blob name in the cache, quotes stripped by `_normalize_etag`), and `X-Linked-Size` or
  `Content-Length`. For an LFS file the hub answers with a redirect to its CDN, a different host;
  `_httpx2_follow_hub_redirects_with_backoff` (utils/_http.py) stops at such a redirect and takes
  the metadata from the redirect response itself. Small git files (README.md) are answered
  directly (200) with the git blob id as ETag.
* download: `http_get` (file_download.py) GETs the `Location` (the CDN URL) and checks the byte count
  against the expected size.
* errors: `hf_raise_for_status` (utils/_http.py) maps the `X-Error-Code` header:
  `RepoNotFound` -> RepositoryNotFoundError, `RevisionNotFound` -> RevisionNotFoundError,
  `EntryNotFound` -> RemoteEntryNotFoundError.

The "CDN" is the same app bound on a second loopback address (127.0.0.2), so the redirect leaves
the hub's host as on the real hub. Where 127.0.0.2 cannot be bound, LFS files are served directly
with the X-Linked-* headers.

Run as a program it serves folders as model or dataset repos (one commit each, `main` pointing to
it; no CDN), e.g. for a container on a podman network:
    python tests/support/hub_test_server.py --host 0.0.0.0 --port 8000 --model org/name=DIR --dataset org/data=DIR
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

# The hub stores these through LFS (the default .gitattributes of dataset and model repos).
LFS_SUFFIXES = (".parquet", ".safetensors", ".bin", ".pt")
POINTER_SIZE = 134  # typical size of a git-lfs pointer file


def git_blob_id(data: bytes) -> str:
    """The git object id of a blob: the hub's `oid` for a file that is not in LFS."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class HubRepo:
    """A repository: commits (commit sha -> {path: bytes}) and refs (branch or tag -> sha)."""

    repo_id: str
    commits: dict[str, dict[str, bytes]]
    refs: dict[str, str]
    repo_type: str = "dataset"  # or "model"

    def commit_of(self, revision: str) -> str | None:
        if revision in self.commits:
            return revision
        return self.refs.get(revision)


@dataclass
class HubState:
    repos: dict[tuple[str, str], HubRepo]  # (repo type, repo id) -> repo
    requests: list[tuple[str, str]] = field(default_factory=list)
    cdn_base: str | None = None  # set once the CDN address is bound
    lock: threading.Lock = field(default_factory=threading.Lock)


def _error(status: int, code: str, message: str) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps({"error": message}),
        headers={"X-Error-Code": code, "X-Error-Message": message},
    )


def _lookup(state: HubState, request: web.Request) -> tuple[HubRepo, str] | web.Response:
    repo_id = f"{request.match_info['owner']}/{request.match_info['name']}"
    repo_type = "dataset" if request.path.startswith(("/api/datasets/", "/datasets/")) else "model"
    repo = state.repos.get((repo_type, repo_id))
    if repo is None:
        return _error(404, "RepoNotFound", "Repository not found")
    rev = request.match_info.get("rev", "main")  # /api/datasets/{repo} (no revision): the default branch
    commit = repo.commit_of(rev)
    if commit is None:
        return _error(404, "RevisionNotFound", "Invalid rev id: " + rev)
    return repo, commit


def _file_entry(path: str, data: bytes) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "file", "path": path, "size": len(data), "oid": git_blob_id(data)}
    if path.endswith(LFS_SUFFIXES):
        entry["lfs"] = {
            "oid": hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "pointerSize": POINTER_SIZE,
        }
    return entry


def _tree(files: Mapping[str, bytes]) -> list[dict[str, Any]]:
    """The recursive tree listing: folders first, then files, as the hub lists them."""
    folders = sorted({"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)})
    out: list[dict[str, Any]] = [
        {"type": "directory", "path": d, "size": 0, "oid": "0" * 40} for d in folders
    ]
    return out + [_file_entry(p, files[p]) for p in sorted(files)]


async def revision_info(request: web.Request) -> web.Response:
    state: HubState = request.app[STATE]
    found = _lookup(state, request)
    if isinstance(found, web.Response):
        return found
    repo, commit = found
    files = repo.commits[commit]
    siblings: list[dict[str, Any]] = [{"rfilename": p} for p in sorted(files)]
    if request.query.get("blobs"):  # HfApi.model_info(files_metadata=True) asks `blobs` (hf_api.py)
        for sib in siblings:  # read by ModelInfo.__init__ into RepoSibling(size, blob_id, lfs)
            entry = _file_entry(sib["rfilename"], files[sib["rfilename"]])
            sib.update({"size": entry["size"], "blobId": entry["oid"]})
            if "lfs" in entry:
                sib["lfs"] = {"size": entry["lfs"]["size"], "sha256": entry["lfs"]["oid"],
                              "pointerSize": entry["lfs"]["pointerSize"]}  # fmt: skip
    return web.json_response({"id": repo.repo_id, "sha": commit, "private": False, "siblings": siblings})


async def tree(request: web.Request) -> web.Response:
    state: HubState = request.app[STATE]
    found = _lookup(state, request)
    if isinstance(found, web.Response):
        return found
    repo, commit = found
    prefix = request.match_info.get("path", "").strip("/")
    files = {p: b for p, b in repo.commits[commit].items() if not prefix or p.startswith(prefix + "/")}
    return web.json_response(_tree(files))


async def resolve(request: web.Request) -> web.StreamResponse:
    state: HubState = request.app[STATE]
    found = _lookup(state, request)
    if isinstance(found, web.Response):
        return found
    repo, commit = found
    path = request.match_info["path"]
    data = repo.commits[commit].get(path)
    if data is None:
        resp = _error(404, "EntryNotFound", f"{path} does not exist on {commit}")
        resp.headers["X-Repo-Commit"] = commit
        return resp
    headers = {"X-Repo-Commit": commit}
    if not path.endswith(LFS_SUFFIXES):
        headers["ETag"] = f'"{git_blob_id(data)}"'
        return web.Response(body=data if request.method == "GET" else None, headers=headers)
    digest = hashlib.sha256(data).hexdigest()
    headers.update(
        {"X-Linked-Etag": f'"{digest}"', "X-Linked-Size": str(len(data)), "ETag": f'"{git_blob_id(data)}"'}
    )
    if state.cdn_base is None:  # no second loopback address: serve the bytes from here
        return web.Response(body=data if request.method == "GET" else None, headers=headers)
    headers["Location"] = f"{state.cdn_base}/cdn/{digest}"
    return web.Response(status=302, headers=headers)


async def cdn(request: web.Request) -> web.Response:
    state: HubState = request.app[STATE]
    digest = request.match_info["digest"]
    for repo in state.repos.values():
        for files in repo.commits.values():
            for data in files.values():
                if hashlib.sha256(data).hexdigest() == digest:
                    return web.Response(body=data, headers={"ETag": f'"{digest}"'})
    return web.Response(status=404, text="no such object")


@web.middleware
async def log_requests(request: web.Request, handler: Any) -> web.StreamResponse:
    state: HubState = request.app[STATE]
    with state.lock:
        state.requests.append((request.method, request.path))
    return await handler(request)


STATE = web.AppKey("state", HubState)


def build_app(state: HubState) -> web.Application:
    app = web.Application(middlewares=[log_requests])
    app[STATE] = state
    repo = "/{owner}/{name}"
    app.router.add_get(f"/api/datasets{repo}", revision_info)
    app.router.add_get(f"/api/datasets{repo}/revision/{{rev}}", revision_info)
    app.router.add_get(f"/api/datasets{repo}/tree/{{rev}}", tree)
    app.router.add_get(f"/api/datasets{repo}/tree/{{rev}}/{{path:.*}}", tree)
    app.router.add_route("HEAD", f"/datasets{repo}/resolve/{{rev}}/{{path:.*}}", resolve)
    app.router.add_get(f"/datasets{repo}/resolve/{{rev}}/{{path:.*}}", resolve, allow_head=False)
    app.router.add_get(f"/api/models{repo}", revision_info)
    app.router.add_get(f"/api/models{repo}/revision/{{rev}}", revision_info)
    app.router.add_get(f"/api/models{repo}/tree/{{rev}}", tree)
    app.router.add_get(f"/api/models{repo}/tree/{{rev}}/{{path:.*}}", tree)
    app.router.add_get("/cdn/{digest}", cdn)
    app.router.add_route("HEAD", f"{repo}/resolve/{{rev}}/{{path:.*}}", resolve)
    app.router.add_get(f"{repo}/resolve/{{rev}}/{{path:.*}}", resolve, allow_head=False)
    return app


class HubTestServer:
    """The app on 127.0.0.1 (the hub) and 127.0.0.2 (its CDN), on an event loop in a daemon thread."""

    __test__ = False

    def __init__(self, repos: list[HubRepo]) -> None:
        self.state = HubState({(r.repo_type, r.repo_id): r for r in repos})
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    async def _start(self) -> None:
        self._runner = web.AppRunner(build_app(self.state), access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        try:
            await web.TCPSite(self._runner, "127.0.0.2", 0).start()
            self.state.cdn_base = f"http://127.0.0.2:{self._runner.addresses[1][1]}"
        except OSError:
            self.state.cdn_base = None

    def start(self) -> HubTestServer:
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()
            if self._runner is not None:
                self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()

        self._thread = threading.Thread(target=run, name="hub-test-server", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the hub test server did not start")
        return self

    def stop(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._thread = None

    def requests(self) -> list[tuple[str, str]]:
        with self.state.lock:
            return list(self.state.requests)

    def reset(self) -> None:
        with self.state.lock:
            self.state.requests.clear()

    def __enter__(self) -> HubTestServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def repo_from_folder(repo_id: str, folder: Path, repo_type: str = "model") -> HubRepo:
    """A folder's files (dot files left out) as one commit, named by a hash of their paths and bytes."""
    files = {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    }
    digest = hashlib.sha1()
    for path, data in sorted(files.items()):
        digest.update(path.encode() + b"\0" + hashlib.sha256(data).digest())
    commit = digest.hexdigest()
    return HubRepo(repo_id, {commit: files}, {"main": commit}, repo_type)


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Serve folders as Hugging Face model repos (loopback tests)."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", action="append", default=[], metavar="ORG/NAME=DIR")
    parser.add_argument("--dataset", action="append", default=[], metavar="ORG/NAME=DIR")
    args = parser.parse_args()
    specs = [(s, "model") for s in args.model] + [(s, "dataset") for s in args.dataset]
    repos = [repo_from_folder(s.split("=", 1)[0], Path(s.split("=", 1)[1]), kind) for s, kind in specs]
    for repo in repos:
        print(f"{repo.repo_id} main = {repo.refs['main']}", flush=True)
    web.run_app(
        build_app(HubState({(r.repo_type, r.repo_id): r for r in repos})), host=args.host, port=args.port
    )


if __name__ == "__main__":
    main()
