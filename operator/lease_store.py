"""The leader-election Lease in the API server, as leader.py's Elector uses it (plain dicts in and
out, every call bounded), and the ownerReference that lets the garbage collector delete it with the
operator's Deployment. Apart from k8s.py, which reconciles trainings: this is the election's store."""

from __future__ import annotations

from typing import Any

import urllib3
from kubernetes.client.rest import ApiException

from graphtrain.operator import k8s
from graphtrain.operator.ownership import with_owner

LEASE = ("coordination.k8s.io/v1", "Lease")


class LeaseUnavailable(Exception):
    """The Lease could not be read or written (the API server refused, failed or did not answer);
    `status`: the API's HTTP status, None when it did not answer."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def owner_reference(api_version: str, kind: str, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    """An ownerReference to an existing object (its uid read now), for an object the operator makes at
    run time that must go with it: no controller and no blockOwnerDeletion (which would need update on
    the owner's finalizers), so the garbage collector deletes the dependent once the owner is gone.

    Raises:
        LeaseUnavailable: the owner could not be read (absent, forbidden, the API did not answer).
    """
    try:
        with k8s.calling("get"):
            obj = k8s.resource(api_version, kind).get(
                name=name, namespace=namespace, _request_timeout=timeout
            )
    except ApiException as exc:
        raise LeaseUnavailable(
            f"get {kind} {namespace}/{name}: {exc.status} {k8s.api_message(exc)}", exc.status
        ) from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise LeaseUnavailable(f"get {kind} {namespace}/{name}: {exc}") from None
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": obj.metadata.uid}


class LeaseClient:
    """One Lease (`namespace`/`name`) as leader.py uses it: plain dicts in and out, every call bounded
    by `timeout` seconds; a write that lost a race (409) returns None. With an `owner` (owner_reference),
    every create and update writes its ownerReference, so a Lease an earlier version made without one
    gets it at the next renewal, and the garbage collector deletes the Lease with its owner."""

    def __init__(self, namespace: str, name: str, timeout: float, owner: dict[str, Any] | None = None):
        self.namespace, self.name, self.timeout, self.owner = namespace, name, timeout, owner

    def _call(self, verb: str, **kwargs: Any) -> dict[str, Any] | None:
        try:
            with k8s.calling(verb, expected=(404,) if verb == "get" else (409,)):
                method = getattr(k8s.resource(*LEASE), verb)
                answer = method(namespace=self.namespace, _request_timeout=self.timeout, **kwargs)
            return dict(answer.to_dict())
        except ApiException as exc:
            if (verb == "get" and exc.status == 404) or (verb != "get" and exc.status == 409):
                return None
            raise LeaseUnavailable(
                f"{verb} lease {self.namespace}/{self.name}: {exc.status} {k8s.api_message(exc)}", exc.status
            ) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise LeaseUnavailable(f"{verb} lease {self.namespace}/{self.name}: {exc}") from None

    def get(self) -> dict[str, Any] | None:
        """The Lease, or None if there is none."""
        return self._call("get", name=self.name)

    def create(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        """Create the Lease with `spec`; None if another candidate created it first."""
        meta = with_owner({"name": self.name}, self.owner)
        body = {"apiVersion": LEASE[0], "kind": LEASE[1], "metadata": meta, "spec": spec}
        return self._call("create", body=body)

    def update(self, lease: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any] | None:
        """Replace the Lease's spec, if it is still at `lease`'s resourceVersion; None if it changed."""
        body = {**lease, "metadata": with_owner(lease.get("metadata") or {}, self.owner), "spec": spec}
        return self._call("replace", body=body, name=self.name)
