# Copyright: contributors to the gpufleet.vllm collection
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A small vLLM server in a thread for the quality gate's tests (imported as ``fakevllm_quality``).

It answers ``/version``, ``/v1/models``, ``/tokenize`` and ``/v1/completions``
in the shapes of vLLM's OpenAI server (vllm/entrypoints/openai/completion/
protocol.py and serving.py): a choice's ``token_ids`` and
``prompt_token_ids`` with ``return_token_ids``; ``logprobs`` (text_offset,
token_logprobs, tokens, top_logprobs) with ``logprobs``, the tokens as
``token_id:N`` with ``return_tokens_as_token_ids``; ``prompt_logprobs`` a
list with None first, then per prompt token ``{"<id>": {"logprob", "rank",
"decoded_token"}}`` holding the prompt's token and, where that is not the
most likely one, the most likely one too (as vLLM's ``prompt_logprobs=0``
does). Its "model" is a deterministic function of the words: answers and
logprobs are hashes, changed by the attributes below to act a damaged one.
"""

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BOS = 1


def _number(*parts):
    return int(hashlib.sha256("\0".join(str(p) for p in parts).encode("utf-8")).hexdigest()[:12], 16)


def encode(text):
    """BOS, then one token per word or punctuation mark (ids 10 to 1009)."""
    return [BOS] + [10 + _number("word", word) % 1000 for word in re.findall(r"\w+|[^\w\s]", text)]


def word(token_id):
    return "w%d" % token_id


class FakeVllm(object):
    """The server's behaviour; change the attributes between requests."""

    def __init__(self):
        self.model = "tiny"
        self.build = "0.33.0"
        self.max_model_len = 512
        self.answer_salt = ""          # another salt: every answer differs
        self.changed_prompts = ()      # only the answers of these prompts (texts) differ
        self.nll_scale = 1.0           # every prompt logprob times this
        self.prompt_logprobs = True    # False: an old build that ignores prompt_logprobs (None in the reply)
        self.token_ids = True          # False: a build without return_token_ids
        self.tokenize = True           # False: /tokenize answers 404
        self.refuse_logprobs = False   # True: prompt_logprobs answered 400, as vLLM does above --max-logprobs
        self.delay = 0.0               # seconds before a completion is answered
        self.padding = 0               # bytes of padding in every completion's reply
        self.requests = []
        self.released = threading.Event()  # set by stop(): a delayed answer ends at once
        self.lock = threading.Lock()
        self.server = None
        self.thread = None

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    def answer_ids(self, prompt, max_tokens):
        salt = self.answer_salt + ("changed" if prompt in self.changed_prompts else "")
        return [10 + _number("answer", salt, prompt, i) % 1000 for i in range(max_tokens)]

    def logprob(self, position, token_id):
        return -(0.5 + (_number("lp", position, token_id) % 1000) / 250.0) * self.nll_scale

    def completion(self, body):
        prompt = body["prompt"]
        ids = encode(prompt)
        max_tokens = body.get("max_tokens", 16)
        out = self.answer_ids(prompt, max_tokens)
        choice = {"index": 0, "text": " " + " ".join(word(t) for t in out), "logprobs": None,
                  "finish_reason": "length", "stop_reason": None, "token_ids": None, "prompt_logprobs": None,
                  "prompt_token_ids": None}
        if body.get("return_token_ids") and self.token_ids:
            choice["token_ids"] = out
            choice["prompt_token_ids"] = ids
        if body.get("logprobs") is not None:
            as_ids = body.get("return_tokens_as_token_ids")
            tokens = ["token_id:%d" % t if as_ids else " " + word(t) for t in out]
            offsets, at = [], 0
            for token in tokens:
                offsets.append(at)
                at += len(token)
            choice["logprobs"] = {"text_offset": offsets, "token_logprobs": [-0.1] * len(out), "tokens": tokens,
                                  "top_logprobs": [{token: -0.1} for token in tokens]}
        if body.get("prompt_logprobs") is not None and self.prompt_logprobs:
            entries = [None]
            for position, token_id in enumerate(ids[1:], 1):
                entry = {str(token_id): {"logprob": self.logprob(position, token_id), "rank": 2,
                                         "decoded_token": word(token_id)}}
                top = 10 + (token_id + 1) % 1000
                entry[str(top)] = {"logprob": -0.01, "rank": 1, "decoded_token": word(top)}
                entries.append(entry)
            choice["prompt_logprobs"] = entries
        reply = {"id": "cmpl-test", "object": "text_completion", "created": int(time.time()), "model": self.model,
                 "choices": [choice], "service_tier": None, "system_fingerprint": None,
                 "usage": {"prompt_tokens": len(ids), "total_tokens": len(ids) + len(out),
                           "completion_tokens": len(out), "prompt_tokens_details": None},
                 "kv_transfer_params": None}
        if self.padding:
            reply["padding"] = "x" * self.padding
        return reply

    def start(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format, *args):  # pylint: disable=redefined-builtin
                pass

            def _send(self, status, obj):
                data = json.dumps(obj).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except OSError:
                    pass

            def do_GET(self):  # noqa: N802
                with fake.lock:
                    fake.requests.append(("GET", self.path, None))
                if self.path == "/version":
                    self._send(200, {"version": fake.build})
                elif self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{
                        "id": fake.model, "object": "model", "created": 0, "owned_by": "vllm", "root": "/models/tiny",
                        "parent": None, "max_model_len": fake.max_model_len, "permission": []}]})
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake.lock:
                    fake.requests.append(("POST", self.path, body))
                if body.get("model") != fake.model:
                    self._send(404, {"object": "error", "message": "The model `%s` does not exist." % body.get("model"),
                                     "type": "NotFoundError", "param": None, "code": 404})
                elif self.path == "/tokenize" and fake.tokenize:
                    ids = encode(body["prompt"])
                    self._send(200, {"count": len(ids), "max_model_len": fake.max_model_len, "tokens": ids,
                                     "token_strs": None})
                elif self.path == "/v1/completions":
                    if len(encode(body["prompt"])) + body.get("max_tokens", 16) > fake.max_model_len:
                        self._send(400, {"object": "error", "message": "This model's maximum context length is %d "
                                         "tokens." % fake.max_model_len, "type": "BadRequestError",
                                         "param": None, "code": 400})
                        return
                    if fake.refuse_logprobs and body.get("prompt_logprobs") is not None:
                        self._send(400, {"object": "error", "message": "Requested prompt logprobs of %d, which is "
                                         "greater than max allowed: -1" % body["prompt_logprobs"],
                                         "type": "BadRequestError", "param": None, "code": 400})
                        return
                    if fake.delay:
                        fake.released.wait(fake.delay)
                    self._send(200, fake.completion(body))
                else:
                    self._send(404, {"detail": "Not Found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def completions(self):
        return [r for r in self.requests if r[1] == "/v1/completions"]
