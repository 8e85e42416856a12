"""The few REST calls the pod runner makes to the test API server (runner.py), as dicts."""

from __future__ import annotations

import base64
import contextlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3
import yaml

Obj = dict[str, Any]


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(f"{status}: {text[:500]}")
        self.status = status


class Api:
    """The few REST calls the runner makes, as dicts, each with a timeout (urllib3 with the
    kubeconfig's server, CA, TLS server name and token: no client library's calling conventions)."""

    def __init__(self, kubeconfig: str):
        cfg = yaml.safe_load(Path(kubeconfig).read_text())
        cluster, user = cfg["clusters"][0]["cluster"], cfg["users"][0]["user"]
        self.server = cluster["server"].rstrip("/")
        ca = cluster.get("certificate-authority")
        self.ca = (
            Path(ca).read_bytes() if ca else base64.b64decode(cluster.get("certificate-authority-data", ""))
        )
        self.token = user.get("token", "")
        self.http = urllib3.PoolManager(
            cert_reqs="CERT_REQUIRED",
            ca_cert_data=self.ca.decode(),
            server_hostname=cluster.get("tls-server-name"),
            assert_hostname=cluster.get("tls-server-name"),
            timeout=urllib3.Timeout(total=20),
            retries=False,
        )

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        headers = {"Accept": "application/json", "Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        resp = self.http.request(method, self.server + path, body=data, headers=headers)
        if resp.status >= 300:
            raise ApiError(resp.status, resp.data.decode(errors="replace"))
        return json.loads(resp.data) if resp.data else None

    def list(self, prefix: str, plural: str) -> list[Obj]:
        items = self.call("GET", f"/{prefix}/{plural}")["items"]
        kind = {"pods": "Pod", "jobs": "Job", "statefulsets": "StatefulSet", "services": "Service"}
        for item in items:  # list items carry no kind; decide.owner_ref needs it
            item.setdefault("kind", kind.get(plural, plural))
            item.setdefault("apiVersion", prefix.split("/", 1)[1] if prefix.startswith("apis/") else "v1")
        return items

    def get(self, prefix: str, ns: str, plural: str, name: str) -> Obj | None:
        try:
            return self.call("GET", f"/{prefix}/namespaces/{ns}/{plural}/{name}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, prefix: str, ns: str, plural: str, body: Obj) -> None:
        self.call("POST", f"/{prefix}/namespaces/{ns}/{plural}", body, "application/json")

    def status(self, prefix: str, ns: str, plural: str, name: str, status: Obj) -> None:
        path = f"/{prefix}/namespaces/{ns}/{plural}/{name}/status"
        self.call("PATCH", path, {"status": status}, "application/merge-patch+json")

    def delete(self, prefix: str, ns: str, plural: str, name: str) -> None:
        with contextlib.suppress(ApiError):  # gone already
            self.call(
                "DELETE", f"/{prefix}/namespaces/{ns}/{plural}/{name}", {"propagationPolicy": "Background"}
            )
