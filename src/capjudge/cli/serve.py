"""``capjudge serve``: a judge over HTTP (:mod:`capjudge.serve`); and the client side of
``capjudge score|compare --remote URL``.

``capjudge serve --method M --backend B [--images DIR] [--host H] --port P [--token T]`` serves the
judge the same options build for ``capjudge score``; the token comes from ``--token`` or
``$CAPJUDGE_TOKEN`` and is required to listen beyond loopback. It reads only the images clients send
inline unless ``--images DIR`` (paths under DIR) or ``--allow-url-images`` (URLs, public addresses
unless ``--allow-private-urls``) widen it. With ``--remote URL``, ``score`` and
``compare`` judge through such a server (:class:`capjudge.serve.RemoteJudge`): the method and the
backend are the server's, so the options that choose them are refused.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from capjudge.cli.common import add_common, judge_kwargs, method_with_template, positive, seconds
from capjudge.cli.paperjudge import use_paper_judge
from capjudge.core.errors import UsageError

# What --remote leaves to the server (the method, the backend and how they run): refused with it.
SERVER_CHOSEN = ("backend", "panel", "panel_aggregate", "panel_quorum", "thinking", "thinking_budget", "template", "template_file", "judge", "max_new_tokens", "method_option", "backend_opt", "concurrency", "max_cost", "prices", "detail", "cache_dir")


def register(sub: Any) -> None:
    """Add ``serve`` to an argparse subparsers object."""
    p = sub.add_parser("serve", help="serve a judge over HTTP (score, compare, reward; needs the serve extra)", formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="routes: GET /health (no token), GET /v1/info, POST /v1/score, /v1/compare, /v1/reward, GET /metrics; docs/serve.md")
    add_common(p)
    net = p.add_argument_group("server")
    net.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; any other than loopback needs a token)")
    net.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0: any free port)")
    net.add_argument("--token", default=None, help="bearer token clients must send (default: $CAPJUDGE_TOKEN; prefer the variable: a command line is visible to other users)")
    net.add_argument("--max-batch", type=positive, default=None, metavar="N", help="rows handed to the judge together (default: --batch-size)")
    net.add_argument("--max-wait-ms", type=float, default=10.0, metavar="MS", help="how long the first request of a batch waits for others (default 10)")
    net.add_argument("--max-queue", type=positive, default=1024, metavar="N", help="rows waiting at most; a request beyond is answered 429 with Retry-After (default 1024)")
    net.add_argument("--max-body-bytes", type=positive, default=None, metavar="B", help="request body cap (default 64 MiB): 413 beyond")
    net.add_argument("--graceful-seconds", type=seconds, default=None, metavar="S", help="on SIGTERM, how long requests in flight may take to finish (default: as long as they need) and uploads still arriving (default 5)")
    net.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                     help="a Host name clients (or a proxy) reach the server by, besides its listening address (repeatable); other names are answered 421")
    net.add_argument("--header-timeout", type=seconds, default=None, metavar="S", help="a connection that sends no complete request head in S seconds is closed (default 10)")
    net.add_argument("--body-timeout", type=seconds, default=None, metavar="S", help="a request body must arrive within S seconds of its head: 408 otherwise (default 60)")
    net.add_argument("--max-connections", type=positive, default=None, metavar="N", help="connections at once; one beyond is answered 503 and closed (default 1000, or half the open-file limit when lower)")
    reads = p.add_argument_group("what the server reads (default: only images sent inline; paths only under --images DIR)")
    reads.add_argument("--allow-url-images", action="store_true", help="fetch the http(s) image URLs clients send (public addresses only, each redirect re-checked; one error text for every failure)")
    reads.add_argument("--allow-private-urls", action="store_true", help="with --allow-url-images: also fetch URLs on loopback, link-local and private addresses (the server's own network)")
    net.add_argument("--ready-file", default=None, metavar="PATH", help="write the server's URL to PATH once it listens (removed when it stops; an old one is removed at the start): scripts wait for it before sending requests")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    """``capjudge serve``: exit 0 when SIGTERM stopped it, whether it was serving or still loading."""
    from capjudge.serve.server import Terminated, terminate_quietly

    if args.ready_file is not None:
        Path(args.ready_file).unlink(missing_ok=True)  # an old one must not say this server is ready
    try:
        with terminate_quietly():
            return _serve(args)
    except Terminated:
        logging.getLogger("capjudge.serve").warning("capjudge serve: stopped by SIGTERM before it listened")
        return 0


def _serve(args: argparse.Namespace) -> int:
    from capjudge.serve.server import check_binding, token_from

    token = token_from(args.token)
    check_binding(args.host, token)
    if token is None:  # loopback only, but open to every local user and process
        logging.getLogger("capjudge.serve").warning(
            "serving without a token: any process on this machine can use the judge; set $CAPJUDGE_TOKEN (or --token) to require one"
        )
    if args.max_wait_ms < 0:
        raise UsageError(f"--max-wait-ms must be 0 or more, got {args.max_wait_ms:g}")
    from capjudge.serve.hosts import is_host_name

    for name in args.allowed_host:
        if not is_host_name(name):
            raise UsageError(f"--allowed-host {name!r}: give a host name or address as clients send it in Host (judge.lab.example, 10.0.0.5), with no scheme, path or wildcard")
    if args.allow_private_urls and not args.allow_url_images:
        raise UsageError("--allow-private-urls widens --allow-url-images: give both (without --allow-url-images the server fetches no URL)")
    try:
        import prometheus_client  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"capjudge serve needs the serve extra: pip install 'capjudge[serve]' ({exc.name} is missing)") from None
    from capjudge.cli.common import preflight
    from capjudge.data.imagesources import ImageSources
    from capjudge.serve.app import (
        DEFAULT_BODY_TIMEOUT,
        DEFAULT_MAX_BODY_BYTES,
        ServeSettings,
        create_app,
    )
    from capjudge.serve.hosts import host_rule
    from capjudge.serve.served import ServedJudge, judge_info
    from capjudge.serve.server import make_server, serve

    method = method_with_template(args.method, args.template, args.template_file)
    preflight(args)
    kwargs = judge_kwargs(args)
    max_batch = args.max_batch or args.batch_size
    kwargs["batch_size"] = max_batch
    # What clients may make the server read: inline images; paths under --images only; URLs only when allowed.
    sources = ImageSources.shared(paths=args.images is not None, urls=args.allow_url_images, private_urls=args.allow_private_urls)
    try:
        judge = ServedJudge(method, args.backend, image_sources=sources, **kwargs)
    except ValueError as exc:
        raise UsageError(f"cannot build the judge: {exc}") from exc
    with judge:
        settings = ServeSettings(
            token=token,
            max_body_bytes=args.max_body_bytes or DEFAULT_MAX_BODY_BYTES,
            max_image_bytes=judge.image_limits.max_download_bytes,
            max_batch=max_batch,
            max_wait_ms=args.max_wait_ms,
            max_queue=args.max_queue,
            hosts=host_rule(args.host, args.allowed_host),
            body_timeout=args.body_timeout or DEFAULT_BODY_TIMEOUT,
        )
        app = create_app(judge, settings, judge_info(judge))
        server = make_server(
            app, args.host, args.port, log_level="debug" if args.verbose >= 2 else "info" if args.verbose else "warning", graceful_seconds=args.graceful_seconds,
            header_timeout=args.header_timeout, max_connections=args.max_connections,
        )
        if not args.quiet:
            reads = "inline" + (f", paths under {args.images}" if args.images else "") + (", URLs" + (" (private addresses too)" if args.allow_private_urls else " (public addresses)") if args.allow_url_images else "")
            print(f"capjudge serve: {method.name} on {judge.backend_spec}, http://{args.host}:{args.port} (token: {'yes' if token else 'none, loopback only'}; images: {reads})", file=sys.stderr)
        serve(server, ready_file=args.ready_file)
    return 0


# ------------------------------------------------------------------------------ --remote (client)
def remote_judge(args: argparse.Namespace) -> Any:
    """The :class:`capjudge.serve.RemoteJudge` of ``--remote`` (built once per command; options
    that choose the method or backend are usage errors: the server chose them)."""
    held = getattr(args, "remote_judge", None)
    if held is not None:
        return held
    given = [f"--{name.replace('_', '-')}" for name in SERVER_CHOSEN if getattr(args, name, None) not in (None, False, [])]
    if getattr(args, "system", "auto") != "auto":
        given.append("--system")
    for flag in ("batch", "ray", "batch_export", "batch_import"):
        if getattr(args, flag, None) not in (None, False):
            given.append(f"--{flag.replace('_', '-')}")
    if given:
        raise UsageError(f"--remote: the server chose the method, the backend and how they run; {', '.join(given)} cannot be given with it")
    from capjudge.data.images import ImageLimits
    from capjudge.serve.client import RemoteJudge

    image = judge_kwargs_images(args)
    limits = ImageLimits(**{k: v for k, v in image.items() if k in ("max_pixels", "oversize", "max_download_bytes", "download_timeout")})
    judge = RemoteJudge(
        args.remote, batch_size=args.batch_size, images_root=args.images, allow_outside_images=bool(image.get("allow_outside_images")), image_limits=limits,
        wait=getattr(args, "remote_wait", 30.0),
    )
    if getattr(args, "method", None) is not None and args.method != judge.method.name:
        judge.close()
        raise UsageError(f"--method {args.method}: the server at {args.remote} serves {judge.method.name!r}")
    args.remote_judge = judge
    return judge


def judge_kwargs_images(args: argparse.Namespace) -> dict[str, Any]:
    """The image options of the command line as :class:`capjudge.data.images.ImageLimits` fields (and
    ``allow_outside_images``)."""
    names = {"max_image_pixels": "max_pixels", "oversize_images": "oversize", "max_image_bytes": "max_download_bytes", "image_timeout": "download_timeout", "allow_outside_images": "allow_outside_images"}
    return {new: getattr(args, old) for old, new in names.items() if getattr(args, old, None) is not None}


def command_method(args: argparse.Namespace, default: str | None = None) -> Any:
    """The method of a judging command: the server's with ``--remote``, else ``--method`` (or
    ``default``) with ``--template`` / ``--template-file``. Without a backend, the method's paper
    judge becomes ``args.backend`` (:func:`capjudge.cli.paperjudge.use_paper_judge`)."""
    if getattr(args, "remote", None):
        return remote_judge(args).method
    name = args.method or default
    if getattr(args, "backend", None) is None and getattr(args, "panel", None) is None:
        method = method_with_template(name, args.template, args.template_file) if name is not None else None
        if method is None or not use_paper_judge(args, method):  # the paper's judge, when the method has one
            raise UsageError("give a backend: --backend SPEC (several times for a panel of judges), --panel FILE, or --remote URL (judge through `capjudge serve`)")
        return method
    if name is None:
        raise UsageError("give --method NAME (see `capjudge methods`)")
    return method_with_template(name, args.template, args.template_file)


__all__ = ["cmd_serve", "command_method", "register", "remote_judge"]
