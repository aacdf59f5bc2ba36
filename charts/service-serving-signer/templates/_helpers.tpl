{{/* The objects' base name: the release name if it contains the chart name, else both. */}}
{{- define "sss.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sss.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object (config/default: name + part-of), plus Helm's. */}}
{{- define "sss.labels" -}}
app.kubernetes.io/name: {{ include "sss.name" . }}
app.kubernetes.io/part-of: service-serving-signer
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The controller Pods' selector (immutable; the same as config/default's). */}}
{{- define "sss.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sss.name" . }}
app.kubernetes.io/component: controller
{{- end -}}

{{/* The signer's ServiceAccount: serviceAccount.name, else the full name. */}}
{{- define "sss.serviceAccountName" -}}
{{- default (include "sss.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The injector's ServiceAccount: injector.serviceAccount.name, else <fullname>-injector. */}}
{{- define "sss.injectorServiceAccountName" -}}
{{- default (printf "%s-injector" (include "sss.fullname" .)) .Values.injector.serviceAccount.name -}}
{{- end -}}

{{- define "sss.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* A Pod template's labels: the selector's (they win) plus .Values.podLabels. Call with
(dict "selector" <selector labels map> "Values" .Values). */}}
{{- define "sss.podLabels" -}}
{{- toYaml (merge (deepCopy .selector) .Values.podLabels) -}}
{{- end -}}

{{/* Values that cannot work together fail the render (install and upgrade alike). */}}
{{- define "sss.validate" -}}
{{- /* The schema checks the signer name's shape; the domain's length is kube-apiserver's
ValidateSignerName rule a JSON Schema pattern cannot say (manager/options.py). */ -}}
{{- $domain := index (splitList "/" .Values.signerName) 0 -}}
{{- if gt (len $domain) 253 -}}
{{- fail (printf "signerName: domain %q is longer than 253 characters" $domain) -}}
{{- end -}}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.replicaCount) 1) -}}
{{- fail (printf "leaderElection.enabled=false with replicaCount=%d: every replica would sign and publish at once; set replicaCount=1 or enable leader election" (int .Values.replicaCount)) -}}
{{- end -}}
{{- end -}}
