"""``rollscope ui``: serve the web viewer over a trace store (127.0.0.1 unless told otherwise)."""

from __future__ import annotations

import argparse
import errno
import ipaddress
import sys

from rollscope.cli.args import add_dir


def add_args(p: argparse.ArgumentParser) -> None:
    add_dir(p)
    p.add_argument("--port", type=int, default=8765, help="port (0 picks a free one; default 8765)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; others expose your traces to the network)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests addressed to NAME (a tunnel's host name); repeatable",
    )
    p.add_argument(
        "--wandb-run",
        metavar="RUN",
        help="a W&B run whose logged metrics /metrics charts, each step linked to its trajectories: "
        "an offline run's directory (or the wandb directory holding it), or ENTITY/PROJECT/RUN_ID "
        "(W&B's API, with your credentials)",
    )


def ui_command(args: argparse.Namespace) -> int:
    from rollscope.viewer.server import make_server

    try:
        server = make_server(args.dir, args.host, args.port, tuple(args.allow_host), args.source, args.wandb_run)
    except OSError as exc:
        print(
            f"rollscope: cannot serve on {args.host}:{args.port}: {exc.strerror or exc}"
            + (" (try another --port, or --port 0)" if exc.errno == errno.EADDRINUSE else ""),
            file=sys.stderr,
        )
        return 2
    host, port = server.server_address[:2]
    if not _loopback(args.host):
        print(f"rollscope: warning: serving traces on {host}, reachable from other machines", file=sys.stderr)
    print(
        f"rollscope viewer on http://{host}:{port}/ (store: {server.RequestHandlerClass.viewer.store().where}); "
        "Ctrl-C to stop",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


COMMAND = (add_args, ui_command, "serve the web viewer over a trace store")
