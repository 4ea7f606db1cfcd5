"""A fake kubelet made of Debian's python3-grpcio: it serves Registration on
<root>/device-plugins/kubelet.sock, records each Register, and talks to the
plugin the way the kubelet does. Restarting it does what the kubelet does:
delete every socket in device-plugins/, then create a new kubelet.sock."""
import importlib
import os
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc

from limits import limit

SOURCE = Path(__file__).resolve().parents[2]


def stop_server(server, sock):
    """Stops a grpcio server at once and removes its socket file."""
    if server:
        server.stop(grace=None).wait()
    if sock.exists():
        sock.unlink()


def load_stubs(out_dir):
    """Generates and imports the v1beta1 Python stubs from the project's proto
    (or uses ready ones from $GPULET_STUBS, where grpc_tools is missing)."""
    out_dir = Path(os.environ.get("GPULET_STUBS") or out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    proto_dir = SOURCE / "proto" / "deviceplugin" / "v1beta1"
    if not (out_dir / "api_pb2_grpc.py").exists():
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{proto_dir}",
                        f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", "api.proto"],
                       check=True)
    sys.path.insert(0, str(out_dir))
    return importlib.import_module("api_pb2"), importlib.import_module("api_pb2_grpc")


class FakeKubelet:
    def __init__(self, root, pb, pb_grpc):
        self.root = Path(root)
        self.dir = self.root / "device-plugins"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pb, self.pb_grpc = pb, pb_grpc
        self.registrations = []          # (monotonic time, RegisterRequest)
        self.cond = threading.Condition()
        self.server = None
        self.fail_next = 0               # answer this many Registers with UNAVAILABLE
        # As the kubelet's device manager (manage): each registration is
        # connected to and watched; when a plugin's stream ends, the manager
        # notices disconnect_delay later (a goroutine on a busy node), closes
        # the connection and drops whichever client holds the resource's name
        # by then, its devices unhealthy: the kubelet's server.go runClient.
        self.manage = False
        self.disconnect_delay = 0.0
        self.clients = {}                # resource -> (endpoint, channel)
        self.health = {}                 # resource -> {device ID: health}
        self.lists = []                  # (resource, connection number, healthy, devices) per update
        self.connections = 0
        self.disconnects = 0

    def start(self, wipe=True):
        """Starts serving; with wipe, first deletes every socket as a kubelet restart does."""
        if wipe:
            for f in self.dir.iterdir():
                if f.is_socket() or f.name.endswith(".sock"):
                    f.unlink()
        kubelet = self

        class Registration(self.pb_grpc.RegistrationServicer):
            def Register(self, request, context):
                with kubelet.cond:
                    if kubelet.fail_next:
                        kubelet.fail_next -= 1
                        context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet busy")
                    kubelet.registrations.append((time.monotonic(), request))
                    kubelet.cond.notify_all()
                if kubelet.manage:
                    kubelet.connect(request.resource_name, request.endpoint)
                return kubelet.pb.Empty()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.pb_grpc.add_RegistrationServicer_to_server(Registration(), self.server)
        self.server.add_insecure_port(f"unix://{self.dir / 'kubelet.sock'}")
        self.server.start()

    def stop(self):
        stop_server(self.server, self.dir / "kubelet.sock")
        self.server = None
        with self.cond:
            for _, channel in self.clients.values():
                channel.close()
            self.clients.clear()

    def restart(self):
        self.stop()
        self.start(wipe=True)

    def wait_registrations(self, n, timeout=10.0):
        deadline = time.monotonic() + limit(timeout)
        with self.cond:
            while len(self.registrations) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(self.registrations)} registration(s), wanted {n}")
                self.cond.wait(left)
        return self.registrations[n - 1]

    def connect(self, name, endpoint):
        """The manager's connectClient: a client for the name, watched."""
        with self.cond:
            if name in self.clients and self.clients[name][0] == endpoint:
                return  # newer kubelets: "Client already connected with the same socket path"
            channel = grpc.insecure_channel(f"unix://{self.dir / endpoint}")
            self.clients[name] = (endpoint, channel)
            self.connections += 1
            number = self.connections
        threading.Thread(target=self.run_client, args=(name, channel, number), daemon=True).start()

    def run_client(self, name, channel, number):
        """The manager's runClient: ListAndWatch until it ends, then the
        disconnect of whichever client holds the name."""
        stub = self.pb_grpc.DevicePluginStub(channel)
        try:
            for resp in stub.ListAndWatch(self.pb.Empty()):
                with self.cond:
                    self.lists.append((name, number, sum(d.health == "Healthy" for d in resp.devices),
                                       len(resp.devices)))
                    if self.clients.get(name, (None, None))[1] is channel:
                        self.health[name] = {d.ID: d.health for d in resp.devices}
                        self.cond.notify_all()
        except grpc.RpcError:
            pass
        time.sleep(self.disconnect_delay)
        with self.cond:
            current = self.clients.pop(name, None)
            if current:
                current[1].close()
                self.health[name] = {i: "Unhealthy" for i in self.health.get(name, {})}
            channel.close()
            self.disconnects += 1
            self.cond.notify_all()

    def allocatable(self, name):
        """Healthy devices of name, as the Node's allocatable would say."""
        with self.cond:
            return sum(h == "Healthy" for h in self.health.get(name, {}).values())

    def wait_for(self, pred, what, timeout=10.0):
        deadline = time.monotonic() + limit(timeout)
        with self.cond:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{what}: health {self.health}, {self.disconnects} disconnect(s)")
                self.cond.wait(left)

    def plugin(self, endpoint=None):
        """A DevicePlugin stub on the endpoint of the last registration."""
        endpoint = endpoint or self.registrations[-1][1].endpoint
        channel = grpc.insecure_channel(f"unix://{self.dir / endpoint}")
        return channel, self.pb_grpc.DevicePluginStub(channel)


def load_podresources_stubs(out_dir):
    """Generates and imports the PodResources v1 stubs (as podresources_pb2,
    apart from the device plugin's api_pb2)."""
    out_dir = Path(os.environ.get("GPULET_STUBS") or out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not (out_dir / "podresources_pb2_grpc.py").exists():
        src = SOURCE / "proto" / "podresources" / "v1" / "api.proto"
        (out_dir / "podresources.proto").write_text(src.read_text())
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{out_dir}",
                        f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
                        "podresources.proto"], check=True)
    if str(out_dir) not in sys.path:
        sys.path.insert(0, str(out_dir))
    return (importlib.import_module("podresources_pb2"),
            importlib.import_module("podresources_pb2_grpc"))


class FakePodResources:
    """The kubelet's PodResources List: answers with the pods set in `pods`,
    a list of (pod, namespace, container, resource, [device ids])."""

    def __init__(self, root, pb, pb_grpc):
        self.dir = Path(root) / "pod-resources"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pb, self.pb_grpc = pb, pb_grpc
        self.pods = []
        self.claims = []            # (pod, namespace, container, claim namespace, claim name, driver, device)
        self.calls = 0
        self.fail = None            # (grpc.StatusCode, message): List answers this
        self.server = None

    def start(self):
        fake = self

        class Lister(self.pb_grpc.PodResourcesListerServicer):
            def List(self, request, context):
                fake.calls += 1
                if fake.fail:
                    context.abort(*fake.fail)
                pb = fake.pb
                out = pb.ListPodResourcesResponse()
                for pod, ns, container, resource, ids in fake.pods:
                    p = out.pod_resources.add(name=pod, namespace=ns)
                    c = p.containers.add(name=container)
                    c.devices.add(resource_name=resource, device_ids=ids)
                for pod, ns, container, claim_ns, claim, driver, device in fake.claims:
                    p = out.pod_resources.add(name=pod, namespace=ns)
                    c = p.containers.add(name=container)
                    r = c.dynamic_resources.add(claim_name=claim, claim_namespace=claim_ns)
                    r.claim_resources.add(driver_name=driver, pool_name="n1", device_name=device)
                return out

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.pb_grpc.add_PodResourcesListerServicer_to_server(Lister(), self.server)
        self.server.add_insecure_port(f"unix://{self.dir / 'kubelet.sock'}")
        self.server.start()

    def stop(self):
        stop_server(self.server, self.dir / "kubelet.sock")
        self.server = None
