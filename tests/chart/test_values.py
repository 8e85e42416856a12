"""Values the chart accepts are values the operator and Kubernetes accept: the rendered command line
parses with the operator's own options, the rendered config file with the operator's own parser, every
integer fits its Kubernetes field, the selector labels stay the chart's, every name fits its kind's
limit. What would not is refused by helm, naming the value, before anything is installed."""

from __future__ import annotations

import importlib.util
import json
import re
from types import ModuleType
from typing import Any

import click
import pytest
import typer
import yaml

from graphtrain.contract.spec import Toleration
from graphtrain.operator import cli as operator_cli
from graphtrain.operator import config
from tests.chart.chart import CHART, ROOT, SCENARIOS, helm, one

pytestmark = pytest.mark.timeout(300)

OPERATOR = "gt-graphtrain-operator"
SCHEMA_ERROR = "values don't meet the specifications of the schema"
T = "trainings.defaults.trainers"


def template_values(scenario: str, *sets: str, release: str = "gt") -> Any:
    """helm template of a scenario with --set-json settings: the completed process (not checked)."""
    args = ["template", release, str(CHART), "-f", str(CHART / "ci" / f"{scenario}-values.yaml")]
    for setting in sets:
        args += ["--set-json", setting]
    return helm(*args, check=False)


def docs(stdout: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(stdout) if d]


def operator_deployment(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The operator's Deployment (the observability scenario renders the status API's too)."""
    found = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-operator")]
    assert len(found) == 1, [o["metadata"]["name"] for o in objs if o["kind"] == "Deployment"]
    return found[0]


def operator_params(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The Deployment's args as `graphtrain operator` parses them (its own click options and types);
    a value it refuses raises click's error."""
    args = operator_deployment(objs)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "operator"
    command = typer.main.get_command(operator_cli.app)
    with command.make_context("operator", list(args[1:])) as ctx:
        return dict(ctx.params)


def operator_config(objs: list[dict[str, Any]]) -> config.OperatorConfig:
    data = one(objs, "ConfigMap", f"{operator_deployment(objs)['metadata']['name']}-config")["data"]
    return config.parse(yaml.safe_load(data["config.yaml"]), "the rendered config.yaml")


def assert_refused(res: Any, named: str) -> None:
    assert res.returncode != 0, f"helm accepted what should name {named}"
    assert named in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) <= 8, res.stderr  # a few lines, not a stack


# ------------------------------------------------------------------------------ leader election


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("leaderElection.leaseDuration=3600", {"lease_duration": 3600}),
        ("leaderElection={\"leaseDuration\":60,\"renewDeadline\":1000.25,\"retryPeriod\":0.001}",
         {"lease_duration": 60, "renew_deadline": 1000.25, "retry_period": 0.001}),
        ("leaderElection.retryPeriod=1.5", {"retry_period": 1.5}),
        ("leaderElection.renewDeadline=10.0", {"renew_deadline": 10.0}),
    ],
)  # fmt: skip
def test_lease_timings_render_as_the_operator_parses_them(setting: str, expected: dict[str, Any]) -> None:
    res = template_values("default", setting)
    if 'leaseDuration":60' in setting:  # renew > lease: the ordering check names the three
        assert_refused(res, "leaseDuration (60) > renewDeadline (1000.25) > retryPeriod (0.001)")
        res = template_values("default", setting.replace(":60,", ":3600,"))
        expected = {**expected, "lease_duration": 3600}
    assert res.returncode == 0, res.stderr
    params = operator_params(docs(res.stdout))
    assert {k: params[k] for k in expected} == expected
    assert isinstance(params["lease_duration"], int)


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("leaderElection.leaseDuration=15.5", "leaderElection.leaseDuration"),  # --lease-duration: int
        ("leaderElection.leaseDuration=10000000", "leaderElection.leaseDuration"),  # rendered 1e+07
        ("leaderElection.leaseDuration=0", "leaderElection.leaseDuration"),
        ("leaderElection.renewDeadline=3601", "leaderElection.renewDeadline"),
        ("leaderElection.retryPeriod=0", "leaderElection.retryPeriod"),
        ("leaderElection.retryPeriod=0.0000001", "leaderElection.retryPeriod"),  # rendered 1e-07 or 0
        ('leaderElection.renewDeadline="10"', "leaderElection.renewDeadline"),
    ],
)
def test_lease_timings_the_operator_refuses_are_refused(setting: str, named: str) -> None:
    assert_refused(template_values("default", setting), named)


@pytest.mark.parametrize(
    ("setting", "named"),
    [("logging.format=yaml", "logging.format"), ('logging.verbose="yes"', "logging.verbose")],
)
def test_a_log_format_the_operator_has_not_is_refused(setting: str, named: str) -> None:
    assert_refused(template_values("default", setting), named)


# ------------------------------------------------------------------------------------- ports, ints


def test_health_and_metrics_on_one_port_are_refused() -> None:
    res = template_values("default", "health.port=8080")
    assert_refused(res, "health.port and metrics.port are both 8080")
    assert template_values("default", "health.port=8080", "metrics.port=8082").returncode == 0


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("replicas=1000000000000", "replicas"),
        ("replicas=2147483648", "replicas"),
        ("health.port=70000", "health.port"),
        ("metrics.port=0", "metrics.port"),
        ("metrics.service.port=65536", "metrics.service.port"),
        ("networkPolicy.apiServer.ports=[443, 100000]", "networkPolicy.apiServer.ports.1"),
        ("health.livenessProbe.periodSeconds=3000000000", "health.livenessProbe.periodSeconds"),
        ("health.readinessProbe.timeoutSeconds=2147483648", "health.readinessProbe.timeoutSeconds"),
        ("health.livenessProbe.successThreshold=2", "health.livenessProbe.successThreshold"),
        ("resources.limits.cpu=-1", "resources.limits.cpu"),
    ],
)
def test_integers_beyond_their_kubernetes_fields_are_refused(setting: str, named: str) -> None:
    assert_refused(template_values("default", setting), named)


def test_the_largest_integers_render_in_full() -> None:
    """Go prints a float64 from a values file in exponent form from 1e6 on: the chart prints integers."""
    res = template_values("default", "replicas=2147483647", "metrics.service.port=65535")
    assert res.returncode == 0, res.stderr
    objs = docs(res.stdout)
    assert operator_deployment(objs)["spec"]["replicas"] == 2147483647
    assert one(objs, "Service")["spec"]["ports"][0]["port"] == 65535
    assert "e+" not in operator_deployment(objs)["spec"]["template"]["spec"]["containers"][0]["args"][-1]


# ---------------------------------------------------------------------------------- selector labels

SELECTOR_KEYS = ["app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"]


@pytest.mark.parametrize("values", ["podLabels", "commonLabels"])
@pytest.mark.parametrize("key", [*SELECTOR_KEYS, "app.kubernetes.io/managed-by", "helm.sh/chart"])
def test_extra_labels_may_not_redefine_the_charts_own(values: str, key: str) -> None:
    res = template_values("default", f"{values}={json.dumps({key: 'x'})}")
    assert_refused(res, f'{values}: Property name of "{key}"')


def test_extra_labels_leave_the_selectors_matching() -> None:
    res = template_values("default", 'podLabels={"team":"graphs"}', 'commonLabels={"cost-center":"ml"}')
    assert res.returncode == 0, res.stderr
    objs = docs(res.stdout)
    deployment = operator_deployment(objs)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["team"] == "graphs" and pod_labels["cost-center"] == "ml"
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert one(objs, "Service")["spec"]["selector"].items() <= pod_labels.items()
    assert_refused(template_values("default", 'podLabels={"a b":"x"}'), "podLabels")
    assert_refused(template_values("default", 'commonLabels={"team":"-x"}'), "commonLabels.team")


# ------------------------------------------------------------------------------------------ names

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# kinds whose name is a DNS-1035 label (at most 63); the chart's other kinds take a DNS subdomain (253)
LABEL_NAMED = {"Service"}


def assert_names_fit(objs: list[dict[str, Any]]) -> None:
    for obj in objs:
        name = obj["metadata"]["name"]
        if obj["kind"] in LABEL_NAMED:
            assert len(name) <= 63 and DNS1035.match(name), f"{obj['kind']} {name} ({len(name)})"
        else:
            assert len(name) <= 253 and DNS1123_SUBDOMAIN.match(name), f"{obj['kind']} {name}"


@pytest.mark.parametrize(
    ("release", "sets"),
    [
        ("gt", ['fullnameOverride="' + "a" * 46 + '"']),
        ("gt", ['fullnameOverride="' + "a" * 55 + '"']),
        ("gt", ['fullnameOverride="' + "a" * 63 + '"']),
        ("gt", ['nameOverride="' + "n" * 46 + '"']),
        ("r" * 53, []),  # helm's longest release name
        ("r" * 42 + "-graphtrain", []),  # contains the chart's name: the release name alone
    ],
)
def test_every_name_fits_its_kind_for_the_longest_names(release: str, sets: list[str]) -> None:
    """Either helm refuses the override naming it, or every object's name fits its kind's limit."""
    for scenario in ("default", "monitoring", "namespaced"):
        res = template_values(scenario, *sets, release=release)
        if res.returncode != 0:
            assert sets and sets[0].split("=")[0] in res.stderr and SCHEMA_ERROR in res.stderr, res.stderr
            continue
        objs = docs(res.stdout)
        assert_names_fit(objs)
        assert operator_params(objs)["lease_name"] == operator_deployment(objs)["metadata"]["name"]


def test_a_release_name_that_is_no_service_name_is_refused() -> None:
    res = template_values("default", release="1gt")
    assert_refused(
        res, 'the objects\' name prefix "1gt-graphtrain" (from the release name or fullnameOverride)'
    )


# ------------------------------------------------------------ helm accepts => the operator accepts

TOLERATIONS = f"{T}.tolerations"
BAD_VALUES: list[tuple[str, str]] = [
    (f'{TOLERATIONS}=[{{"key":"a","operator":"Exists","value":"x"}}]', TOLERATIONS),
    (f'{TOLERATIONS}=[{{"operator":"Equal"}}]', TOLERATIONS),
    (f'{TOLERATIONS}=[{{"key":"","operator":"Equal","value":"x"}}]', TOLERATIONS),
    (f"{TOLERATIONS}=[{{}}]", TOLERATIONS),
    (f'{TOLERATIONS}=[{{"key":"a","tolerationSeconds":60}}]', TOLERATIONS),
    (f'{TOLERATIONS}=[{{"key":"a","effect":"NoSchedule","tolerationSeconds":60}}]', TOLERATIONS),
    (f'{TOLERATIONS}=[{{"key":"a","efect":"NoSchedule"}}]', TOLERATIONS),
    (f'{TOLERATIONS}=[{{"key":"a","operator":"In"}}]', TOLERATIONS),
    (f'{TOLERATIONS}=[{{"key":"a","value":"' + "v" * 64 + '"}]', TOLERATIONS),
    (f'{TOLERATIONS}=[{{"key":"a","tolerationSeconds":1.5,"effect":"NoExecute"}}]', TOLERATIONS),
    (f"{TOLERATIONS}=[" + ",".join(['{"operator":"Exists"}'] * 33) + "]", TOLERATIONS),
    (f'{TOLERATIONS}={{"key":"a"}}', TOLERATIONS),
    ('trainings.defaults.shardServers.tolerations=["nvidia.com/gpu"]', "trainings.defaults.shardServers"),
    (f'{T}.affinity={{"nodeAfinity":{{}}}}', f"{T}.affinity"),
    (f'{T}.affinity={{"nodeAffinity":"x"}}', f"{T}.affinity"),
    (f'{T}.affinity={{"podAntiAffinity":[]}}', f"{T}.affinity"),
    (f'{T}.affinity=["nodeAffinity"]', f"{T}.affinity"),
    ('trainings.defaults.partition.nodeSelector={"gpu":true}', "trainings.defaults.partition.nodeSelector"),
    ('trainings.defaults.partition.nodeSelector={"a b":"c"}', "trainings.defaults.partition.nodeSelector"),
    (f'{T}.nodeSelector={{"gpu":"yes please"}}', f"{T}.nodeSelector"),
    (f'{T}.priorityClassName="GPU_training"', f"{T}.priorityClassName"),
    (f'{T}.priorityClassName="' + "p" * 254 + '"', f"{T}.priorityClassName"),
    (f"{T}.resources.limits=null", f"{T}.resources"),  # no limits: the operator refuses it
    (f'{T}.resources.limits.cpu="lots"', f"{T}.resources.limits.cpu"),
    ('trainings.images.pullSecrets=[""]', "trainings.images.pullSecrets"),
    ('trainings.images.pullSecrets=["Reg_Cred"]', "trainings.images.pullSecrets"),
    ("trainings.images.pullSecrets=[{\"name\":\"regcred\"}]", "trainings.images.pullSecrets"),
    ("trainings.networkPolicy.metricsFrom=[{}]", "trainings.networkPolicy.metricsFrom"),
    ('trainings.networkPolicy.metricsFrom=["monitoring"]', "trainings.networkPolicy.metricsFrom"),
    ('trainings.networkPolicy.metricsFrom=[{"namespace":"ml"}]', "trainings.networkPolicy.metricsFrom"),
    (
        'trainings.networkPolicy.metricsFrom=[{"ipBlock":{"cidr":"10.0.0.0/8"},"podSelector":{}}]',
        "trainings.networkPolicy.metricsFrom",
    ),
    ('trainings.storage.storageClassName="Fast SSD"', "trainings.storage.storageClassName"),
    ('trainings.storage.accessModes=[]', "trainings.storage.accessModes"),
    ('trainings.networkPolicy.enabled="yes"', "trainings.networkPolicy.enabled"),
    ('trainings.images.runtime=7', "trainings.images.runtime"),
    ('trainings.images.runtime="a b c"', "trainings.images.runtime"),
    ('trainings.images.cuda="x\\n  stdin: true"', "trainings.images.cuda"),
    ('image.tag="1.0 evil"', "image.tag"),
    ('image.tag="x\\n          stdin: true"', "image.tag"),
    ('image.repository="Bad Repo/x"', "image.repository"),
    ('trainings.gpu.tolerations=[{"key":"nvidia.com/gpu","operator":"Exists","value":"x"}]',
     "trainings.gpu.tolerations"),
    ('trainings.gpu.tolerations={"key":"nvidia.com/gpu"}', "trainings.gpu.tolerations"),
    ('trainings.gpu.nodeSelector={"nvidia.com/gpu.present":true}', "trainings.gpu.nodeSelector"),
    ('trainings.gpu.resources={"limits":{"nvidia.com/gpu":1}}', "trainings.gpu"),
    ('securityContext={"privileged":true}', "securityContext.privileged"),
    ('securityContext={"readOnlyRootFilesystem":false}', "securityContext.readOnlyRootFilesystem"),
    ('securityContext={"capabilities":{"add":["NET_ADMIN"]}}', "securityContext.capabilities.add"),
    ("securityContext=null", "securityContext"),  # no securityContext at all
    ('podSecurityContext={"runAsUser":0}', "podSecurityContext.runAsUser"),
    ("resources=null", "resources"),  # BestEffort
    ('api={"resources":null}', "resources"),
    ("trainings.podSecurity.runAsUser=0", "trainings.podSecurity.runAsUser"),
    ('trainings.podSecurity.runAsUser="10001"', "trainings.podSecurity.runAsUser"),
    ("trainings.podSecurity.runAsGroup=5", "trainings.podSecurity"),
]  # fmt: skip
GOOD_VALUES: list[str] = [
    f'{TOLERATIONS}=[{{"operator":"Exists"}},{{"key":"a","operator":"Exists","value":""}}]',
    f'{TOLERATIONS}=[{{"key":"a","value":"b","effect":"NoExecute","tolerationSeconds":30}}]',
    f'{T}.affinity={{"nodeAffinity":{{}},"podAffinity":{{}},"podAntiAffinity":{{}}}}',
    f'{T}.nodeSelector={{"node.kubernetes.io/instance-type":"m5.large","gpu":""}}',
    f'{T}.priorityClassName="gpu-training"',
    'trainings.images.pullSecrets=["regcred","other.secret"]',
    'image={"repository":"registry.local:5000/ml/graphtrain-control","tag":"0.1.0-rc.1_b2"}',
    'trainings.images.runtime="registry.local:5000/ml/graphtrain@sha256:' + "a" * 64 + '"',
    'trainings.gpu={"tolerations":[],"nodeSelector":{"nvidia.com/gpu.present":"true","pool":""}}',
    'trainings.networkPolicy.metricsFrom=[{"ipBlock":{"cidr":"10.0.0.0/8","except":["10.1.0.0/16"]}},'
    '{"namespaceSelector":{"matchLabels":{"team":"ml"}},"podSelector":{"matchExpressions":'
    '[{"key":"app","operator":"In","values":["prometheus"]}]}}]',
    'securityContext={"runAsUser":null,"runAsGroup":null}',  # OpenShift assigns the uid
    "trainings.podSecurity.runAsUser=null",  # ... to the trainings' pods too
    "trainings.podSecurity=null",
]


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize(
    ("setting", "named"), [(None, ""), *BAD_VALUES, *((good, "") for good in GOOD_VALUES)]
)
def test_helm_refuses_naming_the_value_or_the_operator_accepts(
    scenario: str, setting: str | None, named: str
) -> None:
    """Never both accepted by helm and refused by the operator (which would crash-loop on it)."""
    res = template_values(scenario, *([setting] if setting else []))
    if res.returncode != 0:
        assert named and named in res.stderr, f"{setting}: refused without naming {named!r}:\n{res.stderr}"
        return
    objs = docs(res.stdout)
    try:
        operator_config(objs)
        operator_params(objs)
    except (config.ConfigError, click.ClickException) as exc:
        pytest.fail(f"helm accepted {setting} but the operator refuses it: {exc}")
    assert not named, f"{setting}: the schema was expected to refuse it (the operator takes it: too lax?)"


@pytest.mark.parametrize(
    ("settings", "uid"),
    [
        ([], 10001),
        (["trainings.podSecurity.runAsUser=5000"], 5000),
        (["trainings.podSecurity.runAsUser=null"], None),
    ],
)
def test_the_trainings_uid_reaches_the_operator_null_included(settings: list[str], uid: int | None) -> None:
    """helm deletes a key set to null: rendered as absent, the operator read its default 10001."""
    res = template_values("default", *settings)
    assert res.returncode == 0, res.stderr
    assert operator_config(docs(res.stdout)).pod_security.run_as_user == uid


# --------------------------------------------------------------------------- the generated schema


def gen_schema() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_schema", ROOT / "charts" / "gen_schema.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_schema_is_the_generated_one() -> None:
    gen = gen_schema()
    committed = (CHART / "values.schema.json").read_text()
    assert gen.render(committed) == committed, "values.schema.json is out of date: run `make chart-schema`"
    stale = json.loads(committed)
    stale["definitions"]["toleration"].pop("allOf")  # e.g. written before a rule was added
    assert gen.render(json.dumps(stale, indent=2) + "\n") == committed


def test_every_cross_field_rule_of_the_models_has_its_json_schema() -> None:
    gen = gen_schema()
    with pytest.raises(SystemExit, match="toleration-seconds-no-execute"):
        gen._with_rules(
            Toleration,
            {},
            {k: v for k, v in gen.TOLERATION_RULES.items() if k != "toleration-seconds-no-execute"},
        )


def test_the_operator_pod_takes_the_same_tolerations_and_affinity() -> None:
    """The operator's own pod: the same definitions (Kubernetes checks the same rules on it)."""
    assert_refused(template_values("default", 'tolerations=[{"operator":"Equal"}]'), "tolerations.0")
    assert_refused(template_values("default", 'affinity={"nodeAfinity":{}}'), "nodeAfinity")
    ok = template_values("default", 'tolerations=[{"key":"a","operator":"Exists","effect":"NoSchedule"}]')
    assert ok.returncode == 0, ok.stderr
