# -*- coding: utf-8 -*-
# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Load generator that shows whether a rollout drops or cuts any request.

Standard library only (the control node's python3 runs it). It sends
streaming completions at a fixed rate to an OpenAI-compatible endpoint (a
load balancer in front of the simulated hosts, or one stand-in) and records
every request::

    python3 traffic.py --url http://127.0.0.1:8780 --model NAME [--rate 4]
        [--max-tokens 32] [--concurrency 32] [--duration 900]
        [--max-requests 20000] [--stop-file PATH] [--timeout 60]
        [--drain-seconds 60] [--allow-address ADDR] [--pid-file PATH]
        --out RESULT.json

Open loop: a request starts every 1/rate seconds whether or not the last one
finished, with at most --concurrency in flight; a start skipped because of
that cap is counted (``not_sent``), never hidden.

Each request is ``POST /v1/completions`` with ``stream``, ``ignore_eos`` and
``stream_options.include_usage``. It is ok only when the answer is HTTP 200,
every ``data:`` line parses as JSON, the stream ends with ``data: [DONE]``,
and it carried ``max_tokens`` token chunks with ``usage.completion_tokens ==
max_tokens``. A failed request has one reason:

    connect    refused or reset before a response arrived
    status     an HTTP status other than 200 (the detail names it)
    truncated  the stream was cut: no [DONE], or fewer tokens than asked
    timeout    no byte for --timeout seconds, or still running when the
               generator stopped and its drain wait ran out
    bad_data   a line that is not JSON, too long a line or body, a usage
               figure that does not match

It stops at --duration seconds, after --max-requests requests, when the
--stop-file exists, or on SIGTERM/SIGINT; then it waits up to
--drain-seconds for the requests in flight, writes --out atomically and
prints one line, e.g.::

    traffic: 412 requests, 0 failed, p50 1.21 s, p99 1.60 s (time to first token p50 0.03 s)

Exit status: 0 every request was ok and none was skipped, 1 some request
failed or was not sent, 2 bad arguments or a refused target.

Only a loopback target (127.0.0.0/8, ::1, localhost) is accepted, unless
--allow-address names the URL's host exactly (a simulated host the tests
started); only http.
"""

import argparse
import http.client
import ipaddress
import json
import math
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import urllib.parse

REASONS = ("connect", "status", "truncated", "timeout", "bad_data")
MAX_LINE = 64 * 1024            # one SSE line
MAX_BODY = 16 * 1024 * 1024     # one response, all of it
MAX_FAILURES_KEPT = 50
MAX_PROMPT = 65536
DETAIL_CHARS = 300


class UsageError(Exception):
    """An argument the generator refuses."""


# ---------------------------------------------------------------------------
# arguments and the target guard


def _positive(kind, name, maximum):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError("%s must be a %s number, got %r"
                                             % (name, "whole" if kind is int else "decimal", text))
        if math.isnan(value) or not 0 < value <= maximum:
            raise argparse.ArgumentTypeError("%s must be above 0 and at most %s, got %r" % (name, maximum, text))
        return value
    return parse


def build_parser():
    parser = argparse.ArgumentParser(
        prog="traffic.py", description=__doc__.split("\n\n", 1)[0], allow_abbrev=False)
    parser.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8780")
    parser.add_argument("--model", required=True, help="served model name")
    parser.add_argument("--rate", type=_positive(float, "--rate", 1000), default=4.0,
                        help="requests started per second (default 4)")
    parser.add_argument("--max-tokens", type=_positive(int, "--max-tokens", 100000), default=32)
    parser.add_argument("--concurrency", type=_positive(int, "--concurrency", 4096), default=32,
                        help="most requests in flight (default 32)")
    parser.add_argument("--duration", type=_positive(float, "--duration", 86400), default=900.0,
                        help="stop after this many seconds (default 900)")
    parser.add_argument("--max-requests", type=_positive(int, "--max-requests", 10 ** 7), default=20000)
    parser.add_argument("--stop-file", help="stop once this file exists")
    parser.add_argument("--timeout", type=_positive(float, "--timeout", 3600), default=60.0,
                        help="socket timeout of one request, seconds (default 60)")
    parser.add_argument("--drain-seconds", type=_positive(float, "--drain-seconds", 3600), default=60.0,
                        help="wait this long for requests in flight after stopping (default 60)")
    parser.add_argument("--prompt", default="hello world", help="the prompt of every request")
    parser.add_argument("--allow-address", action="append", default=[], metavar="ADDR",
                        help="accept this non-loopback host (exactly as in --url); repeatable")
    parser.add_argument("--out", required=True, help="result JSON, written atomically")
    parser.add_argument("--pid-file", help="write this process's id there while running")
    parser.add_argument("--quiet", action="store_true", help="do not print the summary line")
    return parser


def _is_loopback(host):
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_target(url, allow=()):
    """(host, port, base path) of URL, or UsageError when it is not a target this tool may load."""
    if not isinstance(url, str) or any(c.isspace() or ord(c) < 32 for c in url):
        raise UsageError("the URL %r has blanks or control characters" % (url,))
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http":
        raise UsageError("only http:// URLs are supported, got %r" % (url,))
    if parts.username or parts.password or parts.query or parts.fragment:
        raise UsageError("the URL %r must be scheme://host:port[/path] only" % (url,))
    host = parts.hostname
    if not host:
        raise UsageError("the URL %r names no host" % (url,))
    try:
        port = parts.port or 80
    except ValueError:
        raise UsageError("the URL %r has an invalid port" % (url,))
    if not _is_loopback(host) and host not in list(allow):
        raise UsageError("refusing to send load to %s: only loopback addresses (127.0.0.0/8, ::1, localhost) are "
                         "targets unless --allow-address %s names it" % (host, host))
    return host, port, parts.path.rstrip("/")


# ---------------------------------------------------------------------------
# one request


class Outcome(Exception):
    """A request's failure: REASON (one of REASONS) and a detail."""

    def __init__(self, reason, detail):
        Exception.__init__(self, detail)
        self.reason = reason
        self.detail = detail


def _short(text):
    text = str(text)
    return text if len(text) <= DETAIL_CHARS else text[:DETAIL_CHARS] + "..."


def one_request(host, port, path, model, prompt, max_tokens, timeout):
    """Send one streaming completion; a record {status, latency, ttft, tokens, reason, detail}."""
    started = time.monotonic()
    record = {"status": None, "latency": None, "ttft": None, "tokens": 0, "reason": None, "detail": ""}
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                       "stream_options": {"include_usage": True}, "ignore_eos": True})
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        try:
            conn.request("POST", path + "/v1/completions", body=body,
                         headers={"Content-Type": "application/json", "Accept": "text/event-stream",
                                  "Connection": "close"})
            resp = conn.getresponse()
        except socket.timeout as exc:
            raise Outcome("timeout", "no response in %.0f s (%s)" % (timeout, exc))
        except (OSError, http.client.HTTPException) as exc:
            raise Outcome("connect", "%s: %s" % (type(exc).__name__, exc))
        record["status"] = resp.status
        if resp.status != 200:
            try:
                text = resp.read(2048).decode("utf-8", "replace")
            except (OSError, http.client.HTTPException):
                text = ""
            raise Outcome("status", "HTTP %d %s %s" % (resp.status, resp.reason, text.strip()))
        _read_stream(resp, record, max_tokens, started, timeout)
    except Outcome as exc:
        record["reason"], record["detail"] = exc.reason, _short(exc.detail)
    finally:
        conn.close()
        record["latency"] = time.monotonic() - started
    return record


def _read_stream(resp, record, max_tokens, started, timeout):
    total = 0
    done = False
    usage_tokens = None
    try:
        while True:
            line = resp.readline(MAX_LINE + 1)
            if not line:
                break
            total += len(line)
            if len(line) > MAX_LINE:
                raise Outcome("bad_data", "an SSE line longer than %d bytes" % MAX_LINE)
            if total > MAX_BODY:
                raise Outcome("bad_data", "the stream passed %d bytes" % MAX_BODY)
            line = line.strip()
            if not line or line.startswith(b":"):
                continue
            if done:
                raise Outcome("bad_data", "data after [DONE]: %r" % line[:100])
            if not line.startswith(b"data:"):
                continue  # event:/id:/retry: fields
            payload = line[5:].strip()
            if payload == b"[DONE]":
                done = True
                continue
            try:
                chunk = json.loads(payload.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as exc:
                raise Outcome("bad_data", "a data line that is not JSON (%s): %r" % (exc, payload[:100]))
            if not isinstance(chunk, dict):
                raise Outcome("bad_data", "a data line that is not a JSON object: %r" % payload[:100])
            if "error" in chunk:
                raise Outcome("bad_data", "the server sent an error in the stream: %s" % json.dumps(chunk["error"]))
            if chunk.get("choices"):
                record["tokens"] += len(chunk["choices"])
                if record["ttft"] is None:
                    record["ttft"] = time.monotonic() - started
            usage = chunk.get("usage")
            if isinstance(usage, dict) and not chunk.get("choices"):
                usage_tokens = usage.get("completion_tokens")
    except socket.timeout:
        raise Outcome("timeout", "no data for %.0f s after %d of %d tokens" % (timeout, record["tokens"], max_tokens))
    except (OSError, http.client.HTTPException) as exc:
        raise Outcome("truncated", "stream cut after %d of %d tokens (%s: %s)"
                      % (record["tokens"], max_tokens, type(exc).__name__, exc))
    if not done:
        raise Outcome("truncated", "stream ended without [DONE] after %d of %d tokens" % (record["tokens"], max_tokens))
    if record["tokens"] < max_tokens:
        raise Outcome("truncated", "[DONE] after %d of %d tokens" % (record["tokens"], max_tokens))
    if record["tokens"] > max_tokens:
        raise Outcome("bad_data", "%d tokens streamed, %d asked" % (record["tokens"], max_tokens))
    if usage_tokens != max_tokens:
        raise Outcome("bad_data", "usage.completion_tokens is %r, %d asked" % (usage_tokens, max_tokens))


# ---------------------------------------------------------------------------
# the run


def percentile(values, fraction):
    """Nearest-rank percentile of VALUES (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, int(-(-fraction * len(ordered) // 1)))
    return ordered[min(rank, len(ordered)) - 1]


def _iso(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch)) if epoch else None


class Traffic:
    """One run; ``stop`` (an Event) ends it early from another thread or a signal handler."""

    def __init__(self, url, model, rate=4.0, max_tokens=32, concurrency=32, duration=900.0, max_requests=20000,
                 stop_file=None, timeout=60.0, drain_seconds=60.0, prompt="hello world", allow=()):
        self.host, self.port, self.path = check_target(url, allow)
        self.url = url
        self.model = model
        self.rate = float(rate)
        self.max_tokens = int(max_tokens)
        self.concurrency = int(concurrency)
        self.duration = float(duration)
        self.max_requests = int(max_requests)
        self.stop_file = stop_file
        self.timeout = float(timeout)
        self.drain_seconds = float(drain_seconds)
        self.prompt = prompt
        self.stop = threading.Event()
        self.stopped_by = None
        self._lock = threading.Lock()
        self._records = []
        self._in_flight = {}
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self.not_sent = 0
        self.t0 = None

    def _worker(self, index, offset):
        try:
            record = one_request(self.host, self.port, self.path, self.model, self.prompt, self.max_tokens,
                                 self.timeout)
        except Exception as exc:  # pylint: disable=broad-except
            record = {"status": None, "latency": None, "ttft": None, "tokens": 0, "reason": "bad_data",
                      "detail": _short("the load generator failed on this request: %r" % exc)}
        record["t"] = offset
        with self._lock:
            self._in_flight.pop(index, None)
            self._records.append(record)
        self._slots.release()

    def _why_stop(self, sent, now):
        if self.stop.is_set():
            return self.stopped_by or "signal"
        if now - self.t0 >= self.duration:
            return "duration"
        if sent >= self.max_requests:
            return "max-requests"
        if self.stop_file and os.path.exists(self.stop_file):
            return "stop-file"
        return None

    def run(self):
        """Send until a stop condition, drain, and return the result dictionary."""
        self.t0 = time.monotonic()
        started_epoch = time.time()
        interval = 1.0 / self.rate
        schedule = self.t0  # the time of start 0; moves on when the machine stalled
        sent = 0
        tick = 0
        threads = []
        while True:
            now = time.monotonic()
            why = self._why_stop(sent, now)
            if why:
                self.stopped_by = why
                break
            due = schedule + tick * interval
            if due > now:
                # sleep in short steps so a stop file or signal is seen quickly
                self.stop.wait(min(due - now, 0.2))
                continue
            tick += 1
            if now - due > interval and tick > 1:
                # fell behind (the machine stalled): resume the schedule from now, do not burst
                schedule += now - due
            if not self._slots.acquire(blocking=False):
                with self._lock:
                    self.not_sent += 1
                continue
            offset = round(now - self.t0, 3)
            with self._lock:
                self._in_flight[sent] = offset
            thread = threading.Thread(target=self._worker, args=(sent, offset), name="req-%d" % sent, daemon=True)
            thread.start()
            threads.append(thread)
            threads = [t for t in threads if t.is_alive()]
            sent += 1
        deadline = time.monotonic() + self.drain_seconds
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            records = list(self._records)
            for dummy, offset in sorted(self._in_flight.items()):
                records.append({"t": offset, "status": None, "latency": None, "ttft": None, "tokens": 0,
                                "reason": "timeout",
                                "detail": "still running %.0f s after the generator stopped" % self.drain_seconds})
            not_sent = self.not_sent
        return self.result(records, sent, not_sent, started_epoch, time.time())

    def result(self, records, sent, not_sent, started, ended):
        records.sort(key=lambda r: r["t"])
        ok = [r for r in records if r["reason"] is None]
        failed = [r for r in records if r["reason"] is not None]
        by_reason = dict((reason, 0) for reason in REASONS)
        for record in failed:
            by_reason[record["reason"]] = by_reason.get(record["reason"], 0) + 1
        latencies = [r["latency"] for r in ok]
        ttfts = [r["ttft"] for r in ok if r["ttft"] is not None]

        def rnd(value):
            return None if value is None else round(value, 4)

        return {
            "url": self.url, "model": self.model, "started": _iso(started), "ended": _iso(ended),
            "duration_s": round(ended - started, 3), "stopped_by": self.stopped_by,
            "rate": self.rate, "max_tokens": self.max_tokens, "concurrency": self.concurrency,
            "sent": sent, "ok": len(ok), "failed": len(failed), "by_reason": by_reason,
            "not_sent": {"concurrency_cap": not_sent},
            "failures": [{"t": r["t"], "reason": r["reason"], "detail": r["detail"]}
                         for r in failed[:MAX_FAILURES_KEPT]],
            "latency_s": {"p50": rnd(percentile(latencies, 0.5)), "p99": rnd(percentile(latencies, 0.99)),
                          "max": rnd(max(latencies) if latencies else None)},
            "ttft_s": {"p50": rnd(percentile(ttfts, 0.5)), "p99": rnd(percentile(ttfts, 0.99))},
            "requests": [{"t": r["t"], "status": r["status"], "latency": rnd(r["latency"]), "ttft": rnd(r["ttft"]),
                          "tokens": r["tokens"], "reason": r["reason"]} for r in records],
        }


def summary_line(result):
    """The one line a person reads."""
    def sec(value):
        return "-" if value is None else "%.2f s" % value

    failed = "%d failed" % result["failed"]
    if result["failed"]:
        parts = ["%s %d" % (reason, count) for reason, count in sorted(result["by_reason"].items()) if count]
        failed += " (%s)" % ", ".join(parts)
    line = "traffic: %d requests, %s" % (result["sent"], failed)
    if result["not_sent"]["concurrency_cap"]:
        line += ", %d not sent (concurrency cap %d reached)" % (result["not_sent"]["concurrency_cap"],
                                                                result["concurrency"])
    line += ", p50 %s, p99 %s (time to first token p50 %s)" % (
        sec(result["latency_s"]["p50"]), sec(result["latency_s"]["p99"]), sec(result["ttft_s"]["p50"]))
    return line


def write_json(path, data):
    """Write DATA to PATH atomically (temporary file in the same directory, then rename)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".traffic.", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
            handle.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if not args.model.strip() or len(args.model) > 256 or len(args.prompt) > MAX_PROMPT:
            raise UsageError("--model must be a name of 1 to 256 characters and --prompt at most %d" % MAX_PROMPT)
        traffic = Traffic(args.url, args.model, rate=args.rate, max_tokens=args.max_tokens,
                          concurrency=args.concurrency, duration=args.duration, max_requests=args.max_requests,
                          stop_file=args.stop_file, timeout=args.timeout, drain_seconds=args.drain_seconds,
                          prompt=args.prompt, allow=args.allow_address)
    except UsageError as exc:
        sys.stderr.write("traffic: %s\n" % exc)
        return 2
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        sys.stderr.write("traffic: the directory of --out %s does not exist\n" % args.out)
        return 2

    def on_signal(signum, _frame):
        traffic.stopped_by = "signal %d" % signum
        traffic.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.pid_file:
        try:
            write_text_atomic(args.pid_file, "%d\n" % os.getpid())
        except OSError as exc:
            sys.stderr.write("traffic: cannot write the pid file %s: %s\n" % (args.pid_file, exc))
            return 2
    try:
        result = traffic.run()
        write_json(args.out, result)
    finally:
        if args.pid_file:
            _remove_own_pid_file(args.pid_file)
    if not args.quiet:
        print(summary_line(result))
        sys.stdout.flush()
    return 0 if result["failed"] == 0 and result["not_sent"]["concurrency_cap"] == 0 else 1


def write_text_atomic(path, text):
    """Write TEXT to PATH atomically."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".traffic.", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def _remove_own_pid_file(path):
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read().strip() == str(os.getpid()):
                os.unlink(path)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
