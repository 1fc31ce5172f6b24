"""A stand-in for the Hugging Face hub's file endpoint, enough of it for huggingface_hub's `hf_hub_download`:
`HEAD` / `GET /{org}/{name}/resolve/{revision}/{file}` with the headers file_download.get_hf_file_metadata
reads (X-Repo-Commit, ETag, Content-Length), and the 404s hf_raise_for_status tells apart by X-Error-Code
(RepoNotFound, RevisionNotFound, EntryNotFound). Served on 127.0.0.1 by a thread; tests point HF_ENDPOINT at
it. Never the network."""

from __future__ import annotations

import hashlib
import http.server
import threading
from dataclasses import dataclass, field
from urllib.parse import unquote


@dataclass
class HubStandin:
    # repo id -> {filename: bytes}; every repo has one commit, its `main`
    repos: dict[str, dict[str, bytes]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    url: str = ""

    def commit(self, repo_id: str) -> str:
        return hashlib.sha1(repo_id.encode()).hexdigest()

    def _answer(self, handler: http.server.BaseHTTPRequestHandler, body: bool) -> None:
        self.requests.append((handler.command, handler.path))
        parts = unquote(handler.path.split("?", 1)[0]).lstrip("/").split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            return self._send(handler, 404, {"X-Error-Code": "RepoNotFound"}, b"", body)
        repo_id, revision, filename = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
        files = self.repos.get(repo_id)
        if files is None:
            return self._send(handler, 404, {"X-Error-Code": "RepoNotFound"}, b"Repository not found", body)
        commit = self.commit(repo_id)
        if revision not in ("main", commit):
            return self._send(handler, 404, {"X-Error-Code": "RevisionNotFound"}, b"Invalid rev id", body)
        if filename not in files:
            headers = {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit}
            return self._send(handler, 404, headers, b"Entry not found", body)
        data = files[filename]
        etag = '"' + hashlib.sha1(data).hexdigest() + '"'
        self._send(handler, 200, {"X-Repo-Commit": commit, "ETag": etag}, data, body)

    @staticmethod
    def _send(handler, status: int, headers: dict[str, str], data: bytes, body: bool) -> None:
        handler.send_response(status)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if body:
            handler.wfile.write(data)

    def serve(self) -> http.server.ThreadingHTTPServer:
        standin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_HEAD(self):  # noqa: N802 - http.server's names
                standin._answer(self, body=False)

            def do_GET(self):  # noqa: N802
                standin._answer(self, body=True)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        return server
