"""The lab's API servers from Python: what tests/e2e/ and bench/ scripts share to talk HTTPS to a tenant's
kube-apiserver directly (no kubectl process per request, so a few hundred requests per second cost little CPU).

  sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lab"))
  import kubeapi
  host, port, sslctx = kubeapi.load_kubeconfig(path)    # the current context's server, CA and client certificate
  api = kubeapi.Api(host, port, sslctx)                # one keep-alive connection (one per thread)
  status, body = api.request("POST", "/api/v1/namespaces/ns/pods", kubeapi.gpu_pod("p", 1000, 10))

Only loopback servers are accepted (the lab's; the network rule of every test and benchmark): a kubeconfig naming
any other address is refused before a byte is sent.
"""
import http.client
import json
import os
import ssl
import sys
import urllib.parse

import yaml


def load_kubeconfig(path):
    """(host, port, ssl context) of the kubeconfig's current context; relative file paths resolve against the
    kubeconfig's directory, as kubectl resolves them."""
    cfg = yaml.safe_load(open(path))
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == cfg.get("current-context"))
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
    base = os.path.dirname(os.path.abspath(path))

    def resolve(p):
        return p if os.path.isabs(p) else os.path.join(base, p)

    url = urllib.parse.urlparse(cluster["server"])
    if url.scheme != "https" or url.hostname not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("kubeapi: %s: refusing server %s (only the lab's loopback https servers)" % (path, cluster["server"]))
    sslctx = ssl.create_default_context(cafile=resolve(cluster["certificate-authority"]))
    sslctx.load_cert_chain(resolve(user["client-certificate"]), resolve(user["client-key"]))
    return url.hostname, url.port or 443, sslctx


class Api:
    """One keep-alive HTTPS connection; a request that fails on a reused connection is sent once more on a new one.
    Never raises for the network: (status, body) on an answer, (None, error text) when there was none."""

    def __init__(self, host, port, sslctx, timeout=10):
        self.host, self.port, self.sslctx, self.timeout = host, port, sslctx, timeout
        self.conn = None

    def request(self, method, path, body=None, timeout=None):
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.sslctx,
                                                        timeout=timeout or self.timeout)
            try:
                self.conn.request(method, path, body=json.dumps(body) if body is not None else None,
                                  headers={"Content-Type": "application/json", "Accept": "application/json"})
                r = self.conn.getresponse()
                return r.status, r.read()
            except (OSError, http.client.HTTPException) as e:
                self.conn.close()
                self.conn = None
                if attempt == 1:
                    return None, str(e).encode()
        return None, b""


def gpu_pod(name, mem, cores, labels=None, image="registry.k8s.io/pause:3.10", container="cuda",
            node_selector=None, scheduler_name=None, command=None):
    """A pod asking for one GPU slice (mem MiB, cores %), grace 0. Without scheduler_name it goes through the
    webhook, which sets gpuslice's (a pod it did not mutate would be refused by the scheduler guard)."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem), "nvidia.com/gpucores": str(cores)}
    c = {"name": container, "image": image, "resources": {"limits": limits}}
    if command:
        c["command"] = command
    spec = {"terminationGracePeriodSeconds": 0, "containers": [c]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": dict(labels or {})}, "spec": spec}
