{{/* Names, labels and image references: every template takes them from here. */}}

{{- define "graphtrain.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
"<release>-<chart>", or the release name alone when it contains the chart's name. At most 46 characters
(the schema bounds the overrides to that), so that the longest name derived from it,
"<fullname>-operator-metrics" (a Service: a DNS-1035 label), fits in 63.
*/}}
{{- define "graphtrain.fullname" -}}
{{- $full := "" }}
{{- if .Values.fullnameOverride }}
{{- $full = .Values.fullnameOverride }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- $full = .Release.Name }}
{{- else }}
{{- $full = printf "%s-%s" .Release.Name $name }}
{{- end }}
{{- end }}
{{- $full = $full | trunc 46 | trimSuffix "-" }}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $full) }}
{{- fail (printf "the objects' name prefix %q (from the release name or fullnameOverride) must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter" $full) }}
{{- end }}
{{- $full }}
{{- end }}

{{/* The operator's objects: Deployment, ServiceAccount, (Cluster)Role(s), config, Lease. */}}
{{- define "graphtrain.operator.name" -}}
{{- printf "%s-operator" (include "graphtrain.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "graphtrain.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of the component given as .component (operator, test): never change on upgrade. */}}
{{- define "graphtrain.selectorLabels" -}}
app.kubernetes.io/name: {{ include "graphtrain.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Every object's labels: include with (dict "root" $ "component" "operator"). */}}
{{- define "graphtrain.labels" -}}
helm.sh/chart: {{ include "graphtrain.chart" .root }}
{{ include "graphtrain.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: graphtrain
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "graphtrain.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "graphtrain.operator.name" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator's image: repository@digest, else repository:tag (tag default: appVersion). */}}
{{- define "graphtrain.operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The trainings' images (the config file's `images`), defaulting to the appVersion's. */}}
{{- define "graphtrain.runtimeImage" -}}
{{- default (printf "ghcr.io/graphtrain/graphtrain:%s" .Chart.AppVersion) .Values.trainings.images.runtime }}
{{- end }}

{{- define "graphtrain.cudaImage" -}}
{{- default (printf "ghcr.io/graphtrain/graphtrain:%s-cuda" .Chart.AppVersion) .Values.trainings.images.cuda }}
{{- end }}

{{/* "true" when the operator runs with --leader-elect: asked for, or more than one replica. */}}
{{- define "graphtrain.leaderElect" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicas) 1) }}true{{ end }}
{{- end }}

{{/*
Seconds as `graphtrain operator` parses them: never in exponent form (Go prints 10000000.0 as 1e+07),
six decimals at most, trailing zeros dropped: 15, 1.5, 0.001.
*/}}
{{- define "graphtrain.seconds" -}}
{{- regexReplaceAll "\\.?0*$" (printf "%.6f" (float64 .)) "" }}
{{- end }}

{{- define "graphtrain.leaseName" -}}
{{- default (include "graphtrain.operator.name" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/* The operator's config file (the contract's format), from .Values.trainings. */}}
{{- define "graphtrain.operator.config" -}}
{{- $cfg := deepCopy .Values.trainings }}
{{- $_ := set $cfg.images "runtime" (include "graphtrain.runtimeImage" .) }}
{{- $_ = set $cfg.images "cuda" (include "graphtrain.cudaImage" .) }}
{{- /* helm deletes a key set to null: an absent runAsUser is the user's null (the cluster assigns it),
       which the operator would read as its default 10001 */}}
{{- $security := $cfg.podSecurity | default dict }}
{{- if not (hasKey $security "runAsUser") }}
{{- $_ = set $security "runAsUser" nil }}
{{- end }}
{{- $_ = set $cfg "podSecurity" $security }}
{{- toYaml $cfg }}
{{- end }}

{{/*
What the operator does in a namespace it watches, one rule per group of verbs. The RBAC test
(tests/chart/test_rbac.py) records the operator's API requests through a training's whole lifecycle
and fails on any verb granted here but never used, or used but not granted.
*/}}
{{- define "graphtrain.operator.rules" -}}
# its own resource: watched by kopf, which also patches its annotations (and removes the finalizer an
# operator before 2026-12 added); deleted by the operator runPolicy.ttlSecondsAfterFinished after it
# finished
- apiGroups: [graphtrain.io]
  resources: [graphtrainings]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [graphtrain.io]
  resources: [graphtrainings/status]
  verbs: [patch]
# children it watches (one watch per kind keeps the operator's cache of them: no list per reconcile)
# and creates and deletes; get and patch of ConfigMaps because the Role it creates for the trainers
# grants them on the progress map (RBAC escalation prevention)
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, create, delete]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [list, watch, create, delete]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [list, watch, create, delete]
# children it watches too (by its training label: the same cache), creates and deletes (the data
# claim only with storage.whenDeleted Delete); watch adds nothing list does not read already
- apiGroups: [""]
  resources: [secrets, serviceaccounts, services, persistentvolumeclaims]
  verbs: [list, watch, create, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [list, watch, create, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, watch, create, delete]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [list, watch, create, delete]
# one Event per phase transition
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- /* the gang PodGroup of a training with spec.scheduling.gang, made once with its shard servers and
deleted with the training (its ownerReference): create only, for the schedulers rbac.podGroups names */}}
{{- if has "volcano" .Values.rbac.podGroups }}
- apiGroups: [scheduling.volcano.sh]
  resources: [podgroups]
  verbs: [create]
{{- end }}
{{- if has "coscheduling" .Values.rbac.podGroups }}
- apiGroups: [scheduling.x-k8s.io]
  resources: [podgroups]
  verbs: [create]
{{- end }}
{{- end }}

{{/* The status API's objects: Deployment, Service, ServiceAccount, (Cluster)Role(s), NetworkPolicy. */}}
{{- define "graphtrain.api.name" -}}
{{- printf "%s-api" (include "graphtrain.fullname" .) }}
{{- end }}

{{/* The Secret holding the API's bearer tokens (one per line): the user's, or the one the chart makes. */}}
{{- define "graphtrain.api.tokenSecret" -}}
{{- default (printf "%s-tokens" (include "graphtrain.api.name" .)) .Values.api.auth.existingSecret }}
{{- end }}

{{- define "graphtrain.api.tokenKey" -}}
{{- if .Values.api.auth.existingSecret }}{{ .Values.api.auth.existingSecretKey }}{{ else }}tokens{{ end }}
{{- end }}

{{/* Where the API reads its tokens (`--token-file`): a Secret volume, never an argument or a variable. */}}
{{- define "graphtrain.api.tokenDir" -}}
/var/run/secrets/graphtrain.io/api
{{- end }}

{{/*
What the status API reads, in every namespace it serves, and only the verbs it calls
(api/sources/kubernetes.py): GraphTrainings (get, list), their progress and config ConfigMaps (get,
list by label), their pods and the events about them (list). Read-only: no verb here writes, and it
watches nothing. RBAC cannot narrow a ConfigMap read to a label: in the namespaces it serves, the API
may read any ConfigMap (never a Secret).
*/}}
{{- define "graphtrain.api.rules" -}}
- apiGroups: [graphtrain.io]
  resources: [graphtrainings]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods, events]
  verbs: [list, watch]
{{- end }}

{{/* The training selector of the monitoring objects: the roles of a training's pods that serve metrics. */}}
{{- define "graphtrain.monitoring.roles" -}}
[shards, trainer]
{{- end }}
