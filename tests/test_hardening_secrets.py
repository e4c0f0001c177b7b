"""No secret written anywhere (issue #20, items 1-3), through the command line against the local
fake OpenAI-protocol server: credentials planted in a backend URL (user info, ``?token=``,
``?key=``, ``?api_key=``), in ``--backend-opt api_key=`` and in environment variables are sent the
way the server expects, and no file the run writes (``--out``, ``--html``, the cache, the batch
state and work files), nor stdout, nor stderr at ``-vv`` holds any of them, as written or in
base64 (what an HTTP Basic header carries)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from capjudge.backends.openai.batch import state_paths
from capjudge.backends.registry import parse_spec
from capjudge.cli import EXIT_OK, EXIT_USAGE, main
from capjudge.cli.batch import EXIT_SUBMITTED
from openai_fake_server import Received, Reply, default_responder, error_body, running_server

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "examples" / "images"

USER = "alice"
URL_PASSWORD = "Q7xK2mZ9vB4nLw1p"
URL_TOKEN = "Wv83Jd0aLqRt5Hc2"
URL_KEY = "Hs72NbX0pEk4Gz9m"
URL_API_KEY = "Mm41Zr8TyUq6Df3s"
OPTION_KEY = "Lp09Xc3VbNw7Ke2j"
ENV_KEY = "Rt65Gh2WqSy1Pa8d"
OPENAI_ENV_KEY = "Zc27Vb5NmXq3Lk8w"
ECHO = "please echo what you received"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def forms(secret: str) -> list[str]:
    """The secret, its first 8 characters (a table cell may cut it) and its base64."""
    return [secret, secret[:8], b64(secret)]


def basic_forms() -> list[str]:
    return [b64(f"{USER}:{URL_PASSWORD}")]


def leaks(texts: Iterable[tuple[str, bytes]], secrets: Iterable[str]) -> list[str]:
    """``"where: secret"`` for every secret found in any text."""
    needles = list(secrets)
    return [f"{where}: {needle}" for where, data in texts for needle in needles if needle.encode() in data]


def written(*roots: Path) -> list[tuple[str, bytes]]:
    """Every file under ``roots`` (results, reports, cache database, state and work files)."""
    return [(str(p), p.read_bytes()) for root in roots for p in sorted(root.rglob("*")) if p.is_file()]


def samples(path: Path, captions: list[str]) -> Path:
    path.write_text("".join(json.dumps({"id": f"s{i}", "image": "cats.jpg", "caption": c}) + "\n" for i, c in enumerate(captions)))
    return path


def echoing(req: Received) -> Reply:
    """The default answers, but a caption asking for it gets an error echoing the request's
    credentials (as some servers do)."""
    if ECHO in req.prompt_text():
        shown = f"bad request from Authorization: {req.headers.get('authorization')} with query {json.dumps(req.query)}"
        return Reply(status=400, body=error_body(shown))
    return default_responder(req)


def url_check(req: Received) -> str | None:
    """Accept only the URL's credentials, as HTTP Basic and as query parameters; the refusal
    echoes what came."""
    want_auth = "Basic " + b64(f"{USER}:{URL_PASSWORD}")
    want_query = {"token": [URL_TOKEN], "key": [URL_KEY], "api_key": [URL_API_KEY]}
    if req.headers.get("authorization") != want_auth or req.query != want_query:
        return f"refused: Authorization {req.headers.get('authorization')} query {req.query}"
    return None


def bearer_check(key: str) -> Any:
    def check(req: Received) -> str | None:
        got = req.headers.get("authorization")
        return None if got == f"Bearer {key}" else f"Incorrect API key provided: {got}"

    return check


def test_url_credentials_are_sent_as_the_server_expects_and_written_nowhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = samples(tmp_path / "in.jsonl", ["two cats on a sofa", "a dog", ECHO])
    out, html, cache = tmp_path / "out.jsonl", tmp_path / "report.html", tmp_path / "cache"
    with running_server(responder=echoing, check_auth=url_check) as server:
        port = server.port
        url = f"http://{USER}:{URL_PASSWORD}@127.0.0.1:{port}/v1?token={URL_TOKEN}&key={URL_KEY}&api_key={URL_API_KEY}"
        argv = [
            "-vv", "score", "--method", "fleur", "--backend", f"openai-compatible:{url}#gpt-4o", "--input", str(inp),
            "--images", str(IMAGES), "--out", str(out), "--html", str(html), "--cache-dir", str(cache), "--backend-opt", "max_retries=0",
        ]  # fmt: skip
        rc = main(argv)
        captured = capsys.readouterr()
        # The server got every credential, the way it asked for them, on the right path.
        assert server.received and all(r.path == "/v1/chat/completions" for r in server.received)
        assert all(auth == "Basic " + b64(f"{USER}:{URL_PASSWORD}") for auth, _ in server.auth_seen)
        assert all(query == {"token": [URL_TOKEN], "key": [URL_KEY], "api_key": [URL_API_KEY]} for _, query in server.auth_seen)
    assert rc == EXIT_OK, captured.err[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in records] == ["ok", "ok", "error"]
    assert records[0]["backend"] == f"openai-compatible:http://***@127.0.0.1:{port}/v1?token=***&key=***&api_key=***#gpt-4o"
    # The server's echo is masked: the Basic header's base64 and the query values.
    assert "Basic ***" in records[2]["error"] and "400" in records[2]["error"]
    secrets = [s for v in (URL_PASSWORD, URL_TOKEN, URL_KEY, URL_API_KEY) for s in forms(v)] + basic_forms()
    found = leaks([*written(tmp_path), ("stdout", captured.out.encode()), ("stderr -vv", captured.err.encode())], secrets)
    assert not found, found
    assert "DEBUG" in captured.err and html.exists() and any(cache.rglob("*"))  # -vv logged; the report and cache were written


def test_another_credential_for_the_same_server_shares_the_cache(tmp_path: Path) -> None:
    """The cache key holds no credential: another password for the same server and model reads
    the same entries (documented in docs/runs.md)."""
    inp = samples(tmp_path / "in.jsonl", ["two cats on a sofa", "a dog"])
    cache = tmp_path / "cache"
    with running_server() as server:
        for i, password in enumerate(("first-password-1", "second-password-2")):
            spec = f"openai-compatible:http://{USER}:{password}@127.0.0.1:{server.port}/v1?token=t-{password}#gpt-4o"
            rc = main(["score", "--method", "vanilla", "--backend", spec, "--input", str(inp), "--images", str(IMAGES), "--out", str(tmp_path / f"o{i}.jsonl"), "--cache-dir", str(cache), "--quiet"])
            assert rc == EXIT_OK
        assert len(server.received) == 2  # the second run was answered from the cache
    assert not leaks(written(tmp_path), ["first-password-1", "second-password-2"])


def test_query_api_key_keeps_the_request_path(tmp_path: Path) -> None:
    """``?api_key=`` in the base URL used to be glued to the path (a 404 on every request)."""
    inp = samples(tmp_path / "in.jsonl", ["two cats on a sofa"])
    with running_server() as server:
        spec = f"openai-compatible:{server.base_url}?api_key={URL_API_KEY}#gpt-4o"
        rc = main(["score", "--method", "vanilla", "--backend", spec, "--input", str(inp), "--images", str(IMAGES), "--out", str(tmp_path / "o.jsonl"), "--no-cache", "--quiet"])
        assert [(r.path, r.query) for r in server.received] == [("/v1/chat/completions", {"api_key": [URL_API_KEY]})]
    assert rc == EXIT_OK
    assert json.loads((tmp_path / "o.jsonl").read_text())["status"] == "ok"


def test_batch_state_never_holds_a_key_given_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = samples(tmp_path / "in.jsonl", ["two cats on a sofa", "a dog"])
    out, cache = tmp_path / "out.jsonl", tmp_path / "cache"
    state, work = state_paths(out)
    with running_server(batch_delay=30.0, check_auth=bearer_check(OPTION_KEY)) as server:
        base = ["score", "--method", "vanilla", "--backend", f"openai-compatible:{server.base_url}#gpt-4o", "--input", str(inp), "--images", str(IMAGES), "--out", str(out), "--cache-dir", str(cache), "--batch"]
        assert main(["-vv", *base, "--backend-opt", f"api_key={OPTION_KEY}"]) == EXIT_SUBMITTED
        submitted = capsys.readouterr()
        assert state.exists() and work.exists()
        saved = json.loads(state.read_text())
        assert saved["credentials"]["api_key"] == "the api_key option" and "api_key" not in saved["backend_options"]
        assert "api_key=***" in saved["command"]
        pending = written(tmp_path)  # the state file and the work folder, mid-run

        # Asked again, never read from disk: without it, exit 2 saying what to give.
        assert main(["batch", "status", str(out)]) == EXIT_USAGE
        assert "--backend-opt api_key=KEY" in capsys.readouterr().err
        assert main(["batch", "collect", str(out)]) == EXIT_USAGE
        assert main(base) == EXIT_USAGE  # the same command without the key
        assert "API key (--backend-opt api_key=...)" in capsys.readouterr().err
        assert main(["batch", "status", str(out), "--backend-opt", f"api_key={OPTION_KEY}"]) == EXIT_OK
        server.batch_delay = 0.0
        assert main(["batch", "collect", str(out), "--backend-opt", f"api_key={OPTION_KEY}", "--wait", "--poll-interval", "0.05"]) == EXIT_OK
        collected = capsys.readouterr()
        assert server.auth_seen and all(auth == f"Bearer {OPTION_KEY}" for auth, _ in server.auth_seen)
        assert ("POST", "/batches") in server.batch_requests
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in records] == ["ok", "ok"] and not state.exists()
    streams = [("stdout", submitted.out + collected.out), ("stderr -vv", submitted.err + collected.err)]
    found = leaks([*pending, *written(tmp_path), *((w, t.encode()) for w, t in streams)], forms(OPTION_KEY))
    assert not found, found


def test_batch_state_never_holds_url_credentials(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = samples(tmp_path / "in.jsonl", ["two cats on a sofa"])
    out = tmp_path / "out.jsonl"
    state, _ = state_paths(out)

    def token_check(req: Received) -> str | None:
        return None if req.query == {"token": [URL_TOKEN]} else f"refused: query {req.query}"

    with running_server(batch_delay=30.0, check_auth=token_check) as server:
        spec = f"openai-compatible:{server.base_url}?token={URL_TOKEN}#gpt-4o"
        argv = ["score", "--method", "vanilla", "--input", str(inp), "--images", str(IMAGES), "--out", str(out), "--cache-dir", str(tmp_path / "c"), "--batch", "--quiet"]
        assert main([*argv, "--backend", spec]) == EXIT_SUBMITTED
        saved = json.loads(state.read_text())
        assert saved["credentials"]["url"] == ["query token"] and saved["backend"].endswith("/v1?token=***#gpt-4o")
        assert not leaks(written(tmp_path), forms(URL_TOKEN))
        capsys.readouterr()
        assert main(["batch", "status", str(out)]) == EXIT_USAGE
        assert "--backend SPEC" in capsys.readouterr().err
        assert main([*argv, "--backend", f"openai-compatible:{server.base_url}#gpt-4o"]) == EXIT_USAGE  # the URL without its token
        assert "credentials of its --backend URL (query token)" in capsys.readouterr().err
        assert main(["batch", "status", str(out), "--backend", spec]) == EXIT_OK
        server.batch_delay = 0.0
        assert main(["batch", "collect", str(out), "--backend", spec, "--wait", "--poll-interval", "0.05"]) == EXIT_OK
        assert server.auth_seen and all(query == {"token": [URL_TOKEN]} for _, query in server.auth_seen)
    assert json.loads(out.read_text())["status"] == "ok"
    assert not leaks(written(tmp_path), forms(URL_TOKEN))


def test_batch_state_names_the_variable_of_an_environment_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_JUDGE_KEY", ENV_KEY)
    inp = samples(tmp_path / "in.jsonl", ["two cats on a sofa"])
    out = tmp_path / "out.jsonl"
    state, _ = state_paths(out)
    with running_server(batch_delay=30.0, check_auth=bearer_check(ENV_KEY)) as server:
        spec = f"openai-compatible:{server.base_url}#gpt-4o"
        argv = ["score", "--method", "vanilla", "--backend", spec, "--backend-opt", "api_key_env=MY_JUDGE_KEY", "--input", str(inp), "--images", str(IMAGES), "--out", str(out), "--cache-dir", str(tmp_path / "c"), "--batch", "--quiet"]
        assert main(argv) == EXIT_SUBMITTED
        assert json.loads(state.read_text())["credentials"]["api_key"] == "$MY_JUDGE_KEY"
        assert not leaks(written(tmp_path), forms(ENV_KEY))
        assert main(["batch", "status", str(out)]) == EXIT_OK  # the variable is read again
        server.batch_delay = 0.0
        assert main(["batch", "collect", str(out), "--wait", "--poll-interval", "0.05"]) == EXIT_OK
        assert all(auth == f"Bearer {ENV_KEY}" for auth, _ in server.auth_seen)


def test_compatible_server_gets_no_openai_key_unless_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_ENV_KEY)
    inp = samples(tmp_path / "in.jsonl", ["two cats on a sofa"])
    with running_server() as server:
        spec = f"openai-compatible:{server.base_url}#gpt-4o"
        base = ["-vv", "score", "--method", "vanilla", "--backend", spec, "--input", str(inp), "--images", str(IMAGES), "--no-cache"]
        assert main([*base, "--out", str(tmp_path / "a.jsonl")]) == EXIT_OK
        unasked = capsys.readouterr()
        assert [auth for auth, _ in server.auth_seen] == ["Bearer EMPTY"]
        hint = [line for line in unasked.err.splitlines() if "OPENAI_API_KEY is set but not sent" in line]
        assert len(hint) == 1 and "--backend-opt api_key_env=OPENAI_API_KEY" in hint[0] and hint[0].startswith("WARNING")

        monkeypatch.setenv("MY_JUDGE_KEY", ENV_KEY)
        assert main([*base, "--out", str(tmp_path / "b.jsonl"), "--backend-opt", "api_key_env=MY_JUDGE_KEY"]) == EXIT_OK
        asked = capsys.readouterr()
        assert [auth for auth, _ in server.auth_seen][1:] == [f"Bearer {ENV_KEY}"]
        sent = [line for line in asked.err.splitlines() if "sending the API key" in line]
        assert len(sent) == 1 and "$MY_JUDGE_KEY" in sent[0] and "not OpenAI's server" in sent[0] and sent[0].startswith("WARNING")
    streams = [("stdout", (unasked.out + asked.out).encode()), ("stderr -vv", (unasked.err + asked.err).encode())]
    found = leaks([*written(tmp_path), *streams], forms(ENV_KEY) + forms(OPENAI_ENV_KEY))
    assert not found, found


def test_local_server_without_a_key_still_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    inp = samples(tmp_path / "in.jsonl", ["two cats on a sofa"])
    with running_server() as server:
        rc = main(["score", "--method", "vanilla", "--backend", f"openai-compatible:{server.base_url}#gpt-4o", "--input", str(inp), "--images", str(IMAGES), "--out", str(tmp_path / "o.jsonl"), "--no-cache"])
        assert [auth for auth, _ in server.auth_seen] == ["Bearer EMPTY"]
    assert rc == EXIT_OK and "API key" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("spec_tail", "options", "message"),
    [
        ("#m", ["api_key_env=CAPJUDGE_TEST_UNSET_VARIABLE"], "CAPJUDGE_TEST_UNSET_VARIABLE is not set"),
        ("#m", ["api_key=" + OPTION_KEY, "base_url=http://bob:" + URL_PASSWORD + "@127.0.0.1:9/v1"], "give one of them"),
    ],
)
def test_credential_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], spec_tail: str, options: list[str], message: str) -> None:
    inp = samples(tmp_path / "in.jsonl", ["a dog"])
    argv = ["score", "--method", "vanilla", "--backend", f"openai-compatible:http://127.0.0.1:9/v1{spec_tail}", "--input", str(inp), "--out", str(tmp_path / "o.jsonl"), "--no-cache"]
    for option in options:
        argv += ["--backend-opt", option]
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err
    assert not leaks([("stderr", err.encode()), *written(tmp_path)], forms(OPTION_KEY) + forms(URL_PASSWORD))


def test_url_user_info_and_an_api_key_together_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = samples(tmp_path / "in.jsonl", ["a dog"])
    spec = f"openai-compatible:http://{USER}:{URL_PASSWORD}@127.0.0.1:9/v1#m"
    assert main(["score", "--method", "vanilla", "--backend", spec, "--backend-opt", f"api_key={OPTION_KEY}", "--input", str(inp), "--out", str(tmp_path / "o.jsonl"), "--no-cache"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "HTTP Basic" in err and not leaks([("stderr", err.encode())], forms(OPTION_KEY) + forms(URL_PASSWORD))


def test_short_credentials_are_masked_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Values under 8 characters are not searched for in free text, but the spec, the URL log
    lines at -vv and usage errors still show them as ***."""
    inp = samples(tmp_path / "in.jsonl", ["two cats on a sofa"])
    with running_server() as server:
        spec = f"openai-compatible:http://bob:pw7@127.0.0.1:{server.port}/v1?token=tk7#gpt-4o"
        assert main(["-vv", "score", "--method", "vanilla", "--backend", spec, "--input", str(inp), "--images", str(IMAGES), "--out", str(tmp_path / "o.jsonl"), "--no-cache"]) == EXIT_OK
        assert server.auth_seen == [("Basic " + b64("bob:pw7"), {"token": ["tk7"]})]
        run = capsys.readouterr()
        conflict = main(["score", "--method", "vanilla", "--backend", spec, "--backend-opt", "api_key=k", "--input", str(inp), "--out", str(tmp_path / "x.jsonl"), "--no-cache"])
        assert conflict == EXIT_USAGE
        refused = capsys.readouterr()
    texts = [*written(tmp_path), ("stdout", run.out.encode()), ("stderr -vv", run.err.encode()), ("usage error", refused.err.encode())]
    assert "?token=***" in run.err and "http://***@127.0.0.1" in refused.err
    assert not leaks(texts, ["pw7", "tk7", "bob:", b64("bob:pw7")])


def test_credential_options_of_any_spec_are_shown_masked() -> None:
    # Imported here, not at the top: the file's other tests then run (and fail) on code without it.
    from capjudge.backends.credentials import mask_argv

    spec = parse_spec("hf:some/model?token=hf_" + URL_TOKEN + "&dtype=float16")
    assert spec.raw == "hf:some/model?token=***&dtype=float16" and spec.options["token"] == "hf_" + URL_TOKEN
    token_as_user = parse_spec(f"openai-compatible:https://{URL_TOKEN}@example.org/v1?x-api-key={URL_KEY}&api-version=2#m")
    assert token_as_user.raw == "openai-compatible:https://***@example.org/v1?x-api-key=***&api-version=2#m"
    assert token_as_user.target == "https://example.org/v1#m" and URL_TOKEN not in repr(token_as_user)
    assert token_as_user.url_auth.public_query == {"api-version": "2"}
    masked = mask_argv(["--backend", f"hf:m?token={URL_TOKEN}", "--backend-opt", f"api_key={OPTION_KEY}", f"--backend-opt=token={URL_KEY}"])
    assert masked == ["--backend", "hf:m?token=***", "--backend-opt", "api_key=***", "--backend-opt=token=***"]

