"""A judge over HTTP: ``capjudge serve`` (the server) and :class:`RemoteJudge` (its client).

>>> from capjudge.serve import RemoteJudge
>>> judge = RemoteJudge("http://127.0.0.1:8000")            # token from $CAPJUDGE_TOKEN  # doctest: +SKIP
>>> [r.score for r in judge.score_many([{"image": "cats.jpg", "caption": "two cats"}])]  # doctest: +SKIP

Modules, one job each: :mod:`~capjudge.serve.app` (the ASGI app: routes, token, caps, JSON errors),
:mod:`~capjudge.serve.body` (a request body read under bounds), :mod:`~capjudge.serve.rows` (rows
checked at the door), :mod:`~capjudge.serve.hosts` (the ``Host`` check),
:mod:`~capjudge.serve.connections` (connection cap, request-head deadline, shutdown),
:mod:`~capjudge.serve.batcher` (requests arriving together judged together, the bounded queue),
:mod:`~capjudge.serve.metrics` (Prometheus), :mod:`~capjudge.serve.served` (the server's judge:
images sent inline; ``/v1/info``), :mod:`~capjudge.serve.server` (binding rules, uvicorn),
:mod:`~capjudge.serve.wire` (rows and images on the wire), :mod:`~capjudge.serve.client`
(:class:`RemoteJudge`). The server needs the ``serve`` extra (``pip install 'capjudge[serve]'``);
the client needs only httpx. The subcommand is :mod:`capjudge.cli.serve`.
"""

from __future__ import annotations

from capjudge.core.lazyexport import lazy_attributes

_LAZY = {
    "RemoteJudge": "capjudge.serve.client",
    "RemoteError": "capjudge.serve.client",
    "ServedJudge": "capjudge.serve.served",
    "ServeSettings": "capjudge.serve.app",
    "create_app": "capjudge.serve.app",
    "make_server": "capjudge.serve.server",
    "TOKEN_VARIABLE": "capjudge.serve.server",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
