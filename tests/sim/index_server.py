# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The test world's package index: the real pypiserver app, served by the stdlib's WSGI server.

scripts/index.sh starts it in the background; the tests start it on a free
loopback port. It serves, as one PEP 503 index:

* ``/simple/``: every root given (the wheelhouse, the fleet's mirror, and
  the "nightly" directory with the newer builds and their extra
  dependencies), through pypiserver's own app, with ``#sha256=`` fragments on
  every link and no fallback to any other index (an unknown project is 404);
* ``/<commit>/``: the layout of vLLM's per-commit nightly index, used as an
  extra index URL (``<commit>/vllm/`` lists that commit's wheels): the
  directory ``COMMITS/<commit>`` through a second pypiserver app mounted at
  that prefix; a commit with no directory is 404.

pypiserver's plain directory backend reads the directories at each request,
so a wheel published (renamed into place) is listed at the next request;
only the sha256 of each file is remembered, keyed on the file's inode, size
and modification time (a wheel replaced or edited on disk is hashed again).

The listening socket is bound with IP_FREEBIND, so the server can listen on
the podman bridge's gateway address before the bridge exists or while it is
re-made. It writes ``--ready-file`` (its pid) once it listens, then hashes
every wheel once in the background.

    python index_server.py --host ADDR --port PORT --root DIR [--root DIR ...]
        [--commits DIR] [--ready-file FILE]
"""

import argparse
import errno
import os
import re
import socket
import socketserver
import sys
import threading
from wsgiref import simple_server

HEX40 = re.compile(r"^[0-9a-f]{40}$")
IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)


def memoize_digests(app):
    """Remember each file's digest while the file stays the same (inode, size, mtime)."""
    backend = app._pypiserver_config.backend.backend    # pylint: disable=protected-access
    digest = backend.digest
    memo, lock = {}, threading.Lock()

    def cached(pkg):
        try:
            st = os.stat(pkg.fn)
        except (OSError, TypeError):
            return digest(pkg)
        key = (pkg.fn, st.st_ino, st.st_size, st.st_mtime_ns)
        with lock:
            if key in memo:
                return memo[key]
        value = digest(pkg)
        with lock:
            memo[key] = value
        return value

    backend.digest = cached
    app.gpufleet_warm = lambda: [cached(pkg) for pkg in backend.get_all_packages()]
    return app


def make_pypiserver(roots):
    import pypiserver    # the control node's .venv (requirements/control.txt)
    app = pypiserver.app(roots=[os.path.abspath(r) for r in roots], disable_fallback=True,
                         hash_algo="sha256", backend_arg="simple-dir", welcome_msg="gpufleet test-world index")
    return memoize_digests(app)


class Dispatcher:
    """/<40 hex>/... -> that commit's pypiserver app, anything else -> the main one."""

    def __init__(self, main_app, commits_dir):
        self.main_app = main_app
        self.commits_dir = commits_dir
        self.commit_apps = {}
        self.lock = threading.Lock()

    def commit_app(self, commit):
        path = os.path.join(self.commits_dir, commit) if self.commits_dir else None
        if not path or not os.path.isdir(path):
            return None
        with self.lock:
            if commit not in self.commit_apps:
                self.commit_apps[commit] = make_pypiserver([path])
            return self.commit_apps[commit]

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "") or "/"
        first, dummy, rest = path[1:].partition("/")
        if not HEX40.match(first):
            return self.main_app(environ, start_response)
        app = self.commit_app(first)
        if app is None:
            body = ("Not Found (no build of commit %s on this index)\n" % first).encode()
            start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
            return [body]
        # <commit>/ is the index's root (vLLM's layout): <commit>/vllm/ is pypiserver's /simple/vllm/
        environ = dict(environ, SCRIPT_NAME=environ.get("SCRIPT_NAME", "").rstrip("/") + "/" + first)
        if rest.startswith("packages/"):
            environ["PATH_INFO"] = "/" + rest
        else:
            environ["PATH_INFO"] = "/simple/" + rest
        return app(environ, start_response)


class Server(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True
    request_queue_size = 64

    def server_bind(self):
        # no reverse lookup of the address (HTTPServer's getfqdn can wait on DNS)
        if self.address_family == socket.AF_INET:
            self.socket.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = host, port
        self.setup_environ()


class Handler(simple_server.WSGIRequestHandler):
    def address_string(self):
        return self.client_address[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", action="append", required=True)
    parser.add_argument("--commits")
    parser.add_argument("--ready-file")
    args = parser.parse_args(argv)
    for root in args.root:
        if not os.path.isdir(root):
            print("index_server: no directory %s to serve" % root, file=sys.stderr)
            return 2
    app = Dispatcher(make_pypiserver(args.root), args.commits)
    try:
        httpd = simple_server.make_server(args.host, args.port, app, server_class=Server, handler_class=Handler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            print("index_server: port %d on %s is taken by another program (ss -ltnp 'sport = :%d' names it);"
                  " choose another with GPUFLEET_INDEX_PORT" % (args.port, args.host, args.port), file=sys.stderr)
        else:
            print("index_server: cannot listen on %s:%d: %s" % (args.host, args.port, exc), file=sys.stderr)
        return 3
    if args.ready_file:
        with open(args.ready_file + ".tmp", "w") as handle:
            handle.write("%d\n" % os.getpid())
        os.replace(args.ready_file + ".tmp", args.ready_file)
    # the sha256 of every wheel, computed once in the background (the first
    # lock of the whole wheelhouse then asks for hashes already known)
    threading.Thread(target=app.main_app.gpufleet_warm, daemon=True).start()
    print("index_server: serving %s on http://%s:%d/simple/ (commits: %s)"
          % (", ".join(args.root), args.host, httpd.server_port, args.commits or "none"), file=sys.stderr, flush=True)
    try:
        httpd.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
