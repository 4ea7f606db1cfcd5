"""/metrics over TLS with basic auth, from an exporter-toolkit web config
(--web-config-file): a real Prometheus scrapes it with its tls_config and
basic_auth; no or wrong credentials get 401; probes need none; plain HTTP
gets no answer; a bad web config stops the agent at start with one error
naming the file, line and key."""
import http.client
import json
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from base64 import b64encode

import pytest

from conftest import GPULET, tool
from test_metrics import free_port, metrics_agent, wait_for  # noqa: F401

pytestmark = tool("openssl")


def bcrypt(password):
    import crypt  # libxcrypt's bcrypt, as htpasswd -B makes (deprecated module, still in 3.11)
    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))


@pytest.fixture
def web(tmp_path):
    """A certificate for 127.0.0.1 and a web config with user prom."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem"),
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    (tmp_path / "web.yml").write_text(
        "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n"
        f"basic_auth_users:\n  prom: {bcrypt('s3cret')}\n")
    return tmp_path


def fetch(url, cafile, user=None, password=None):
    ctx = ssl.create_default_context(cafile=str(cafile))
    req = urllib.request.Request(url)
    if user:
        req.add_header("Authorization", "Basic " + b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("WWW-Authenticate", "")


def test_tls_and_basic_auth(metrics_agent, web):
    a, url = metrics_agent("--simulate", "t4", "--web-config-file", str(web / "web.yml"))
    https = url.replace("http://", "https://")
    ca = web / "cert.pem"
    assert fetch(https + "/metrics", ca) == (401, 'Basic realm="gpulet"')
    assert fetch(https + "/metrics", ca, "prom", "wrong")[0] == 401
    assert fetch(https + "/metrics", ca, "eve", "s3cret")[0] == 401
    status, body = fetch(https + "/metrics", ca, "prom", "s3cret")
    assert status == 200 and "DCGM_FI_DEV_GPU_TEMP{" in body
    assert fetch(https + "/metrics", ca, "prom", "s3cret")[0] == 200  # the remembered password
    assert fetch(https + "/healthz", ca)[0] == 200                    # probes need no credentials
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):
        urllib.request.urlopen(url + "/metrics", timeout=5)           # no plain HTTP


@tool("prometheus")
def test_prometheus_scrapes_over_tls(metrics_agent, web, tmp_path):
    a, url = metrics_agent("--simulate", "t4", "--web-config-file", str(web / "web.yml"))
    prom_port = free_port()
    cfg = tmp_path / "prometheus.yml"
    target = url[len("http://"):]
    cfg.write_text(
        # A scrape's time limit as long as its interval: under ASan on a busy
        # 2-core machine a TLS handshake and a bcrypt check can take over a
        # second, the limit a 1 s interval implies (the target was "down").
        "global:\n  scrape_interval: 3s\n  scrape_timeout: 3s\nscrape_configs:\n"
        f"  - job_name: gpulet\n    scheme: https\n    tls_config: {{ca_file: {web / 'cert.pem'}}}\n"
        f"    basic_auth: {{username: prom, password: s3cret}}\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n"
        f"  - job_name: intruder\n    scheme: https\n    tls_config: {{ca_file: {web / 'cert.pem'}}}\n"
        f"    basic_auth: {{username: prom, password: guess}}\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n")
    prom = subprocess.Popen(["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        api = f"http://127.0.0.1:{prom_port}/api/v1/"

        def targets():
            try:
                with urllib.request.urlopen(api + "targets", timeout=2) as r:
                    t = {x["labels"]["job"]: x for x in json.loads(r.read())["data"]["activeTargets"]}
                return t if all(x["health"] != "unknown" for x in t.values()) and len(t) == 2 else None
            except (OSError, ValueError, KeyError):
                return None
        t = wait_for(targets, timeout=30)
        assert t, "Prometheus never scraped"
        assert t["gpulet"]["health"] == "up", t["gpulet"]
        assert t["intruder"]["health"] == "down" and "401" in t["intruder"]["lastError"]
        with urllib.request.urlopen(api + "query?query=DCGM_FI_DEV_GPU_TEMP", timeout=2) as r:
            assert json.loads(r.read())["data"]["result"]
    finally:
        prom.terminate()
        prom.wait(timeout=10)


BAD = [
    ("tls_server_config:\n  cert_file: cert.pem\n", "tls_server_config needs key_file"),
    ("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n  client_ca_file: ca.pem\n",
     "unknown key 'client_ca_file'"),
    ("tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: RequireAndVerifyClientCert\n",
     "only NoClientCert is supported"),
    ("basic_auth_users:\n  prom: plaintext\n", "prom: not a bcrypt hash"),
    ("tls_server_config:\n  cert_file: missing.pem\n  key_file: key.pem\n", "missing.pem"),
    ("basic_auth_users: [a, b]\n", "basic_auth_users must map user names to bcrypt hashes"),
    ("tls: {\n", "web.yml:"),
]


# A key that is not the certificate's (another certificate's key, or the
# two files swapped): one line naming both files and GnuTLS's words, exit 1
# before anything is served (it ran on with metrics off before).
BAD += [
    ("tls_server_config:\n  cert_file: cert.pem\n  key_file: other-key.pem\n",
     "other-key.pem are not a certificate and its key: The certificate and the given key do not match"),
    ("tls_server_config:\n  cert_file: key.pem\n  key_file: cert.pem\n",
     "key.pem and key_file "),
]


@pytest.mark.parametrize("text,error", BAD)
def test_bad_web_config(metrics_agent, web, text, error):
    subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                    "-out", str(web / "other-key.pem")], check=True, capture_output=True)
    (web / "web.yml").write_text(text)
    a, url = metrics_agent("--simulate", "t4", "--web-config-file", str(web / "web.yml"), ready=False)
    # A config error: one line, and an exit before anything is served (in a
    # DaemonSet, a pod that fails with the reason, not one whose metrics
    # port is dead and whose liveness probe restarts it for ever).
    assert a.proc.wait(timeout=10) == 1, a.log()
    assert error in a.log() and "agent running" not in a.log(), a.log()
    assert len([l for l in a.log().splitlines() if " error " in l]) == 1, a.log()
    # doctor reads the same web config the same way
    d = subprocess.run([GPULET, "doctor", "--simulate", "t4", "--web-config-file", str(web / "web.yml"),
                        "-o", "json"], capture_output=True, text=True)
    check = {c["id"]: c for c in json.loads(d.stdout)["checks"]}["metrics"]
    assert check["status"] == "FAIL" and error in check["message"], check


def test_tls_without_gnutls(agent, sim_env, web, tmp_path):
    """libmicrohttpd is linked in; TLS loads the host's GnuTLS. A host
    without it stops the agent at start with one line naming the library and
    the fix, not an agent whose metrics port is dead."""
    a = agent("--simulate", "t4", "--kubelet-root", str(tmp_path / "kubelet"), "--status-socket",
              str(tmp_path / "status.sock"), "--metrics-listen", f"127.0.0.1:{free_port()}",
              "--web-config-file", str(web / "web.yml"),
              env=dict(sim_env, GPULET_GNUTLS_LIB="/nonexistent/libgnutls.so.30"))
    assert a.proc.wait(timeout=10) == 1, a.log()
    errors = [l for l in a.log().splitlines() if " error " in l]
    assert len(errors) == 1 and "libgnutls.so.30" in errors[0] and "libgnutls30" in errors[0], a.log()
    assert "agent running" not in a.log()


def test_password_checks_leave_the_loop_free(metrics_agent, tmp_path):
    """bcrypt is slow by design, and anyone who reaches the port can send a
    wrong password: the hash is checked on a thread of its own, never on
    the loop. While a costly one is checked, /healthz answers at once; the
    wrong password gets its 401 after, and the right one is remembered."""
    import crypt
    costly = crypt.crypt("s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=2 ** 13))
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  prom: {costly}\n")
    a, url = metrics_agent("--simulate", "t4", "--web-config-file", str(tmp_path / "web.yml"))
    order = []

    def get(path, password=None):
        req = urllib.request.Request(url + path)
        if password:
            req.add_header("Authorization", "Basic " + b64encode(f"prom:{password}".encode()).decode())
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                order.append((path, r.status))
        except urllib.error.HTTPError as e:
            order.append((path, e.code))
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError):
            order.append((path, None))

    wrong = threading.Thread(target=get, args=("/metrics", "guess"))
    wrong.start()
    time.sleep(0.1)  # the hash takes longer: the loop would be in it (before: it was)
    get("/healthz")
    wrong.join()
    assert order == [("/healthz", 200), ("/metrics", 401)], order
    get("/metrics", "s3cret")
    get("/metrics", "s3cret")  # remembered: no hash this time
    assert order[2:] == [("/metrics", 200), ("/metrics", 200)], order
    # A stop while a password is being checked: the connection is closed,
    # the agent stops cleanly (libmicrohttpd must not stop with it suspended).
    wrong = threading.Thread(target=get, args=("/metrics", "guess again"))
    wrong.start()
    time.sleep(0.1)
    assert a.stop() == 0, a.log()
    wrong.join()
    assert order[4:] == [("/metrics", None)], order
