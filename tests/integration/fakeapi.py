"""A stand-in for the API server's Node endpoints (GET; PATCH with a JSON
merge patch, refused with 409 when it names another resourceVersion; PATCH
of nodes/status with a strategic merge patch of its conditions, merged by
type), Events (POST, PATCH) and ConfigMaps, with list and watch by name
(fieldSelector), DRA's ResourceSlices (server-side apply, DELETE) and
ResourceClaims (GET) in one version of resource.k8s.io (v1 unless told, with
its discovery answer), over plain HTTP/1.1 with keep-alive, counting requests
and connections and able to fail on demand: for what the real one cannot be
made to do in a test (go down, answer 500, forget old versions (410), be
counted)."""
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from limits import limit


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
    def __init__(self, node="n1", labels=None, dra_version="v1"):
        self.dra = f"/apis/resource.k8s.io/{dra_version}"   # the one version served
        self.slices_path = self.dra + "/resourceslices"
        self.node = {"kind": "Node", "apiVersion": "v1",
                     "metadata": {"name": node, "uid": f"uid-{node}", "labels": dict(labels or {}),
                                  "resourceVersion": "1"}}
        self.slices = {}            # name -> ResourceSlice (as last applied)
        self.claims = {}            # (namespace, name) -> ResourceClaim
        self.pods = {}              # (namespace, name) -> Pod (GET only)
        self.node_events = {}       # name -> core/v1 Event (any namespace)
        self.arrived = []          # (method, path) of each request as it came, before api.hold
        self.events_taken = 0       # this many creates of Events answered 409 (a name taken)
        self.forbidden = set()      # (verb, resource[/subresource]) a SelfSubjectAccessReview denies
        # Who the credentials are (SelfSubjectReview): the node the token names (None: none,
        # as a token the kubelet did not issue), and whether writes are confined to it as
        # deploy/confine/'s policies do (here: a Node label outside gpulet's is refused).
        self.token_node = node
        self.confined = True
        self.open_policies = set()  # deploy/'s policies missing, unbound or Warn-only
        self.node_restriction = True  # in the admission metrics; False: not; None: /metrics refused
        self.requests = []          # (method, path, content type)
        self.bearers = []           # the bearer token of each request, as it came
        self.fail = 0               # answer this status to every request while set,
        self.fail_path = ""         # or only to those whose path starts with this
        self.cond = threading.Condition()
        self.version = 1            # resourceVersion of the last change
        self.configmaps = {}        # (namespace, name) -> object
        self.events = []            # (version, collection, name, type, object)
        self.closing = False
        self.connections = 0        # TCP connections accepted
        self.compacted = 0          # a watch from a version below this gets 410 Gone
        self.hold_after_410 = False  # and its stream stays open after: only the ERROR says it
        self.hold = 0.0             # seconds each answer waits (an API server that hangs)
        self.watch_epoch = 0        # end_watches() ends the watches of earlier epochs
        self.list_lag = 0.0         # seconds a LIST's answer comes after the state it read,
        self.drop_taints = False    # a server whose DRADeviceTaints gate is off drops them
        self.apply_lag = 0.0        # and a slice's apply takes effect after it came, as on
                                    # a busy API server
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"   # keep-alive, as a real API server
            # An answer's status line, headers and body go out as separate
            # writes: with Nagle on, the client's delayed ACK holds the last
            # one back 40 ms on a kept-alive connection (Go's server sets
            # TCP_NODELAY, as this does).
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                with api.cond:
                    api.connections += 1

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
                    api.arrived.append((method, self.path))  # before any hold
                    api.bearers.append((self.headers.get("Authorization") or "").removeprefix("Bearer "))
                    api.cond.notify_all()
                if api.hold:
                    time.sleep(api.hold)
                with api.cond:
                    api.requests.append((method, self.path, self.headers.get("Content-Type")))
                    api.cond.notify_all()
                    if api.fail and self.path.startswith(api.fail_path):
                        return self.answer(api.fail, {"kind": "Status", "code": api.fail})
                    url = urlsplit(self.path)
                    query = {k: v[0] for k, v in parse_qs(url.query).items()}
                    if method == "GET" and "fieldSelector" in query:
                        return self.list_or_watch(url.path, query)
                    if re.fullmatch(r"/api/v1/namespaces/[^/]+/events(/[^/]+)?", url.path):
                        return self.event(method, url.path, body, "dryRun" in query)
                    if url.path == api.slices_path and method == "POST" and "dryRun" in query:
                        obj = json.loads(body)
                        me = api.node["metadata"]["name"]
                        if api.confining("gpulet-resourceslices") and (
                                obj["spec"]["pool"]["name"] != me or not obj["metadata"]["name"].startswith(me + "-")):
                            return self.refused("gpulet-resourceslices", "resourceslices",
                                                f"gpulet of node {me} may publish in its own pool {me} only")
                        return self.answer(201, obj)
                    if url.path == api.dra and method == "GET":
                        return self.answer(200, {"kind": "APIResourceList", "groupVersion": api.dra[6:],
                                                 "resources": [{"name": "resourceslices"},
                                                               {"name": "resourceclaims"}]})
                    if url.path.startswith(api.dra + "/") or re.fullmatch(
                            r"/api/v1/namespaces/[^/]+/pods/[^/]+", url.path):
                        return self.resource(method, url.path, body)
                    if url.path == "/metrics" and method == "GET":
                        # the API server's admission metrics, as far as doctor reads them
                        if api.node_restriction is None:
                            return self.answer(403, {"kind": "Status", "code": 403})
                        names = ["NamespaceLifecycle"] + (["NodeRestriction"] if api.node_restriction else [])
                        text = "".join(
                            "apiserver_admission_controller_admission_duration_seconds_count{name=\"%s\","
                            "operation=\"UPDATE\",rejected=\"false\",type=\"validate\"} 3\n" % n
                            for n in names)
                        data = text.encode()
                        self.send_response(200)
                        self.send_header("Content-Type", "text/plain")
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    if url.path == "/apis/authentication.k8s.io/v1/selfsubjectreviews":
                        extra = {"authentication.kubernetes.io/node-name": [api.token_node]} \
                            if api.token_node else {}
                        return self.answer(201, {"kind": "SelfSubjectReview", "status": {"userInfo": {
                            "username": "system:serviceaccount:gpulet:gpulet", "extra": extra}}})
                    if url.path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
                        review = json.loads(body)
                        a = review["spec"]["resourceAttributes"]
                        right = (a["verb"], a["resource"] + ("/" + a["subresource"] if a["subresource"] else ""))
                        review["status"] = {"allowed": right not in api.forbidden}
                        return self.answer(201, review)
                    node_path = f"/api/v1/nodes/{api.node['metadata']['name']}"
                    if url.path == node_path + "/status" and method == "PATCH":
                        patch = json.loads(body)
                        # deploy/confine/'s: no metadata through nodes/status
                        if api.confining("gpulet-node") and patch.get("metadata", {}).get("labels"):
                            return self.refused("gpulet-node", "nodes", "gpulet changes no label "
                                                "through nodes/status")
                        conds = {c["type"]: c for c in api.node.get("status", {}).get("conditions", [])}
                        for c in patch.get("status", {}).get("conditions", []):
                            conds[c["type"]] = dict(conds.get(c["type"], {}), **c)
                        api.node.setdefault("status", {})["conditions"] = list(conds.values())
                        api._changed("/api/v1/nodes", api.node["metadata"]["name"], "MODIFIED", api.node)
                        return self.answer(200, api.node)
                    if url.path != node_path:
                        return self.answer(404, {"kind": "Status", "code": 404})
                    if method == "PATCH":
                        patch = json.loads(body)
                        foreign = [k for k in patch.get("metadata", {}).get("labels", {})
                                   if not k.startswith(("nvidia.com/", "gpulet.io/")) and k != "accelerator"]
                        if api.confining("gpulet-node") and foreign:
                            return self.answer(403, {"kind": "Status", "code": 403, "message":
                                f"nodes \"{api.node['metadata']['name']}\" is forbidden: "
                                "ValidatingAdmissionPolicy 'gpulet-node' with binding 'gpulet-node' "
                                "denied request: gpulet may change labels under nvidia.com/ and gpulet.io/ only, not "
                                + ", ".join(foreign)})
                        if "dryRun" in query:
                            return self.answer(200, merge(api.node, patch))
                        want = patch.get("metadata", {}).pop("resourceVersion", None)
                        if want is not None and want != api.node["metadata"]["resourceVersion"]:
                            return self.answer(409, {"kind": "Status", "code": 409})
                        api.node = merge(api.node, patch)
                        api._changed("/api/v1/nodes", api.node["metadata"]["name"], "MODIFIED",
                                     api.node)
                    return self.answer(200, api.node)

            def refused(self, policy, resource, words):
                """What the API server answers when deploy/'s policy refuses."""
                return self.answer(403, {"kind": "Status", "code": 403, "message":
                    f"{resource} is forbidden: ValidatingAdmissionPolicy '{policy}' with binding "
                    f"'{policy}' denied request: {words}"})

            def event(self, method, path, body, dry=False):
                """Called with api.cond held."""
                name = path.rsplit("/", 1)[1]
                if method == "POST" and name == "events":
                    ev = json.loads(body)
                    about = ev.get("involvedObject", {}).get("name")
                    if api.confining("gpulet-events") and about != api.node["metadata"]["name"]:
                        return self.refused("gpulet-events", "events", "gpulet may write Events "
                                            "about its own Node only")
                    if dry:
                        return self.answer(201, ev)
                    ns = path.split("/")[4]
                    if ev["metadata"].get("namespace", ns) != ns:
                        return self.answer(400, {"kind": "Status", "code": 400})
                    if ev["metadata"]["name"] in api.node_events or api.events_taken:
                        api.events_taken = max(0, api.events_taken - 1)
                        return self.answer(409, {"kind": "Status", "code": 409})
                    ev["metadata"]["namespace"] = ns
                    api.node_events[ev["metadata"]["name"]] = ev
                    api.cond.notify_all()
                    return self.answer(201, ev)
                if method == "PATCH" and name in api.node_events:
                    api.node_events[name] = merge(api.node_events[name], json.loads(body))
                    api.cond.notify_all()
                    return self.answer(200, api.node_events[name])
                return self.answer(404, {"kind": "Status", "code": 404})

            def resource(self, method, path, body):
                """DRA's objects, and the pods a claim is reserved for. Called with api.cond held."""
                m = re.fullmatch(re.escape(api.slices_path) + r"/([^/]+)", path)
                if m and method == "PATCH":
                    if api.apply_lag:
                        api.cond.release()
                        time.sleep(api.apply_lag)
                        api.cond.acquire()
                    obj = json.loads(body)
                    for dev in obj.get("spec", {}).get("devices", []) if api.drop_taints else []:
                        dev.pop("taints", None)
                    created = m.group(1) not in api.slices
                    api.slices[m.group(1)] = obj
                    api._changed(api.slices_path, m.group(1), "ADDED" if created else "MODIFIED", obj)
                    return self.answer(201 if created else 200, obj)
                if m and method == "DELETE":
                    gone = api.slices.pop(m.group(1), None)
                    if gone:
                        api._changed(api.slices_path, m.group(1), "DELETED", gone)
                    return self.answer(200 if gone else 404, {"kind": "Status"})
                m = re.fullmatch(re.escape(api.dra) + r"/namespaces/([^/]+)/resourceclaims/([^/]+)", path)
                if m and method == "GET" and (m.group(1), m.group(2)) in api.claims:
                    return self.answer(200, api.claims[(m.group(1), m.group(2))])
                m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)", path)
                if m and method == "GET" and (m.group(1), m.group(2)) in api.pods:
                    return self.answer(200, api.pods[(m.group(1), m.group(2))])
                return self.answer(404, {"kind": "Status", "code": 404})

            def list_or_watch(self, path, query):
                """Called with api.cond held."""
                if path == api.slices_path and query["fieldSelector"].startswith("spec."):
                    # A node's pool: its slices of one driver (a list, never a watch).
                    want = dict(kv.split("=", 1) for kv in query["fieldSelector"].split(","))
                    items = [o for o in api.slices.values()
                             if o["spec"].get("nodeName") == want.get("spec.nodeName")
                             and o["spec"].get("driver") == want.get("spec.driver")]
                    return self.answer(200, {"kind": "List", "items": items,
                                             "metadata": {"resourceVersion": str(api.version)}})
                name = query["fieldSelector"].removeprefix("metadata.name=")
                obj = api._get(path, name)
                if obj is False:
                    return self.answer(404, {"kind": "Status", "code": 404})
                if query.get("watch") not in ("1", "true"):
                    listed = {"kind": "List", "items": [obj] if obj else [],
                              "metadata": {"resourceVersion": str(api.version)}}
                    if api.list_lag:
                        api.cond.release()
                        time.sleep(api.list_lag)
                        api.cond.acquire()
                    return self.answer(200, listed)
                since = int(query.get("resourceVersion") or 0)
                deadline = time.monotonic() + int(query.get("timeoutSeconds") or 60)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Connection", "close")   # the body ends with the connection
                self.end_headers()
                self.close_connection = True
                if since < api.compacted:
                    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                                        "reason": "Expired"}}
                    self.wfile.write(json.dumps(gone).encode() + b"\n")
                    self.wfile.flush()
                    while api.hold_after_410 and not api.closing and time.monotonic() < deadline:
                        api.cond.wait(0.2)  # a client must act on the ERROR, not on an end
                    return
                self.wfile.flush()
                epoch = api.watch_epoch
                while not api.closing and time.monotonic() < deadline and epoch == api.watch_epoch:
                    for v, coll, n, kind, o in api.events:
                        if v > since and coll == path and n == name:
                            since = v
                            api.cond.release()
                            try:
                                self.wfile.write(json.dumps({"type": kind, "object": o}).encode() + b"\n")
                                self.wfile.flush()
                            except OSError:
                                return
                            finally:
                                api.cond.acquire()
                    api.cond.wait(0.2)
                self.close_connection = True

            def do_GET(self):
                self.handle_one("GET")

            def do_PATCH(self):
                self.handle_one("PATCH")

            def do_POST(self):
                self.handle_one("POST")

            def do_DELETE(self):
                self.handle_one("DELETE")

        class Server(ThreadingHTTPServer):
            request_queue_size = 128   # many connections at once (HTTP/1.1): no SYN dropped
            daemon_threads = True

            def handle_error(self, request, client_address):
                # A client that goes (gpulet stopped) resets its connection: no traceback.
                if not isinstance(sys.exc_info()[1], ConnectionError):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _get(self, path, name):
        """The object at a collection path, None when absent, False for an unknown path."""
        if path == "/api/v1/nodes":
            return self.node if self.node["metadata"]["name"] == name else None
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/configmaps", path)
        if m:
            return self.configmaps.get((m.group(1), name))
        if path == self.slices_path:
            return self.slices.get(name)
        return False

    def delete_slice(self, name):
        """Deletes a ResourceSlice as the kubelet does when a driver's socket goes."""
        with self.cond:
            gone = self.slices.pop(name)
            self._changed(self.slices_path, name, "DELETED", gone)

    def _changed(self, collection, name, kind, obj):
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        obj = json.loads(json.dumps(obj))
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.events.append((self.version, collection, name, kind, obj))
        self.cond.notify_all()

    def set_label(self, key, value):
        """Sets (or with None removes) a label on the Node, as kubectl label does."""
        with self.cond:
            labels = self.node["metadata"].setdefault("labels", {})
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
            self._changed("/api/v1/nodes", self.node["metadata"]["name"], "MODIFIED", self.node)

    def set_configmap(self, namespace, name, data):
        """Creates or replaces a ConfigMap (data None deletes it)."""
        with self.cond:
            coll = f"/api/v1/namespaces/{namespace}/configmaps"
            had = (namespace, name) in self.configmaps
            if data is None:
                obj = self.configmaps.pop((namespace, name), None)
                if obj:
                    self._changed(coll, name, "DELETED", obj)
                return
            obj = {"kind": "ConfigMap", "apiVersion": "v1",
                   "metadata": {"name": name, "namespace": namespace}, "data": dict(data)}
            self.configmaps[(namespace, name)] = obj
            self._changed(coll, name, "MODIFIED" if had else "ADDED", obj)

    def kubeconfig(self, path):
        path.write_text("apiVersion: v1\nkind: Config\ncurrent-context: x\n"
                        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{self.port}'}}}}]\n"
                        "users: [{name: u, user: {token: secret}}]\n")
        return path

    def condition(self, type_="GPUUnhealthy"):
        """The Node's condition of that type, or None."""
        with self.cond:
            for c in self.node.get("status", {}).get("conditions", []):
                if c["type"] == type_:
                    return dict(c)
        return None

    def confining(self, policy):
        """Whether deploy/'s policy refuses what it must here."""
        return self.confined and policy not in self.open_policies

    def wait_for(self, pred, what, timeout=5.0):
        """Waits until pred() (called with the lock held) is true."""
        deadline = time.monotonic() + limit(timeout)
        with self.cond:
            while not (value := pred()):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{what}: node {json.dumps(self.node)}, events "
                                         f"{json.dumps(list(self.node_events.values()))}")
                self.cond.wait(min(left, 0.1))
            return value

    def labels(self):
        with self.cond:
            return dict(self.node["metadata"].get("labels", {}))

    def wait(self, pred, timeout=5.0):
        deadline = time.monotonic() + limit(timeout)
        with self.cond:
            while not pred(self.node["metadata"].get("labels", {})):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"node labels: {self.node['metadata'].get('labels')}")
                self.cond.wait(left)

    def end_watches(self):
        """Ends every watch open now, as an API server does when it restarts."""
        with self.cond:
            self.watch_epoch += 1
            self.cond.notify_all()

    def stop(self):
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()
