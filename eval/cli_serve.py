"""``passkt serve``: any registered env as an OpenEnv server, for OpenEnv's own clients.

It inspects the env as every command does (an unknown id or kwargs the env rejects fail here,
in one line), binds the address (a port in use fails here too), then serves OpenEnv's app
(``passkt.agents.openenv_server``) until Ctrl-C or SIGTERM. It writes no files.

``passkt`` (``passkt.eval.cli``) loads this module on demand through :func:`add_parser`;
``openenv`` itself loads only when the command runs, so ``passkt serve --help`` works without it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from passkt.agents.preflight import add_env_arguments, int_in
from passkt.agents.specs import parse_env_kwargs
from passkt.envs.contract import import_modules

__all__ = ["add_parser"]

MAX_SESSIONS = 65536
"""Bound of ``--max-sessions``: each session is an env and a thread on the server."""
DEFAULT_MAX_SESSIONS = 2048
"""``passkt.agents.openenv_server.DEFAULT_MAX_SESSIONS``, not imported from there: ``openenv``
loads only when the command runs."""

EXAMPLES = """\
examples:
  passkt serve BridgeQA-v0 --port 8000
  passkt serve BridgeQA-v0 --env-kwargs protocol=tools,max_tool_calls=5 --host 0.0.0.0
  passkt serve my_envs:Board-v0 --env-kwargs level=2
  passkt eval --env passkt.agents.openenv_client:OpenEnvClient-v0 \\
      --env-kwargs base_url=http://127.0.0.1:8000 --policy scripted:oracle
      (evaluate the served env through OpenEnv's client: the same records as in process)
"""


def add_parser(subparsers: Any) -> None:
    """Add ``serve`` to the ``passkt`` command line."""
    p = subparsers.add_parser(
        "serve",
        help="serve an env to OpenEnv's clients (HTTP and WebSocket)",
        description="Serve a registered env with OpenEnv's server (openenv 0.10): one env per "
        "WebSocket session at /ws, /health, /schema, /metadata and the Task API. An action is "
        "the model's text; reset takes seed, options (or task_id), max_tool_calls (T) and split. "
        "Stop it with Ctrl-C.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_env_arguments(
        p,
        kwargs_note="; max_tool_calls and split are the defaults of a reset that gives none",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    p.add_argument(
        "--port",
        type=int_in(0, 65535),
        default=8000,
        help="port to listen on; 0 picks a free one (default %(default)s)",
    )
    p.add_argument(
        "--max-sessions",
        type=int_in(1, MAX_SESSIONS),
        default=DEFAULT_MAX_SESSIONS,
        metavar="N",
        help="WebSocket sessions (envs) open at once (default %(default)s: enough for passkt "
        "eval's batches)",
    )
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    import_modules(args.imports or ())
    kwargs = parse_env_kwargs(args.env_kwargs)
    from passkt.agents import openenv_server  # optional: the openenv extra

    served = openenv_server.ServedEnv(args.env, kwargs)
    app = openenv_server.build_app(served, args.max_sessions)
    sock = openenv_server.listen(args.host, args.port)
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    print(
        f"passkt: serving {args.env} at {url} (OpenEnv: WebSocket {url}/ws, {url}/health); "
        "evaluate it with passkt eval --env passkt.agents.openenv_client:OpenEnvClient-v0 "
        f"--env-kwargs base_url={url}",
        file=sys.stderr,
        flush=True,
    )
    openenv_server.serve(app, sock)
    return 0
