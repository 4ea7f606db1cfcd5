"""A stand-in for the API server's Node endpoints (GET, and PATCH with a JSON
merge patch), over plain HTTP, counting requests and able to fail on
demand: for what the real one cannot be made to do in a test (go down,
answer 500, be counted)."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def merge(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    target = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = merge(target.get(k), v)
    return target


class FakeAPI:
    def __init__(self, node="n1", labels=None):
        self.node = {"kind": "Node", "apiVersion": "v1",
                     "metadata": {"name": node, "labels": dict(labels or {})}}
        self.requests = []          # (method, path, content type)
        self.fail = 0               # answer this status to every request while set
        self.cond = threading.Condition()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def handle_one(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with api.cond:
                    api.requests.append((method, self.path, self.headers.get("Content-Type")))
                    api.cond.notify_all()
                    if api.fail:
                        return self.answer(api.fail, {"kind": "Status", "code": api.fail})
                    if self.path != f"/api/v1/nodes/{api.node['metadata']['name']}":
                        return self.answer(404, {"kind": "Status", "code": 404})
                    if method == "PATCH":
                        api.node = merge(api.node, json.loads(body))
                        api.cond.notify_all()
                    return self.answer(200, api.node)

            def do_GET(self):
                self.handle_one("GET")

            def do_PATCH(self):
                self.handle_one("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def kubeconfig(self, path):
        path.write_text("apiVersion: v1\nkind: Config\ncurrent-context: x\n"
                        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{self.port}'}}}}]\n"
                        "users: [{name: u, user: {token: secret}}]\n")
        return path

    def labels(self):
        with self.cond:
            return dict(self.node["metadata"].get("labels", {}))

    def wait(self, pred, timeout=5.0):
        import time
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred(self.node["metadata"].get("labels", {})):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"node labels: {self.node['metadata'].get('labels')}")
                self.cond.wait(left)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
