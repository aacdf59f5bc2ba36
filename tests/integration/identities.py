"""Who a test acts as, and what that identity may do: ServiceAccount tokens from the
TokenRequest API and SubjectAccessReviews."""

from __future__ import annotations

from kube.client import Client


def service_account_token(client: Client, namespace: str, name: str, seconds: int = 3600) -> str:
    """A bound token for the ServiceAccount (TokenRequest API)."""
    answer = client.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        },
    )
    return str(answer["status"]["token"])


def service_account_subject(namespace: str, name: str) -> tuple[str, list[str]]:
    """The user name and groups kube-apiserver gives the ServiceAccount's tokens."""
    groups = [
        "system:serviceaccounts",
        f"system:serviceaccounts:{namespace}",
        "system:authenticated",
    ]
    return f"system:serviceaccount:{namespace}:{name}", groups


def can(
    client: Client, subject: tuple[str, list[str]], verb: str, resource: str, **attrs: str
) -> bool:
    """A SubjectAccessReview: may `subject` (user, groups) do `verb` on `resource`?
    `attrs` are further resourceAttributes (group, namespace, name, subresource)."""
    user, groups = subject
    review = client.create(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": groups,
                "resourceAttributes": {"verb": verb, "resource": resource, **attrs},
            },
        },
    )
    return bool(review["status"].get("allowed"))


# The namespace config/ installs into and the controller's ServiceAccount there.
PRODUCT_NAMESPACE = "service-serving-signer"
CONTROLLER_SA = "service-serving-signer"
CONTROLLER_SUBJECT = service_account_subject(PRODUCT_NAMESPACE, CONTROLLER_SA)
