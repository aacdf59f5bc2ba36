{{/* The `run` flags of --ca-mode=managed (docs/managed-ca.md), from .Values.managedCA. */}}
{{- define "sss.managedCAArgs" -}}
{{- /* The binary's minimums (manager/options.py MIN_RETIRE_MARGIN and
KUBELET_PROJECTION_WORST_CASE; tests/unit/deploy/test_chart_minimums.py keeps them equal),
refused here so that a release never crash-loops on a value `run` refuses. */ -}}
{{- $margin := include "sss.seconds" (dict "v" .Values.managedCA.retireMargin "name" "managedCA.retireMargin") | atoi -}}
{{- if lt $margin 300 -}}
{{- fail "managedCA.retireMargin: must be at least 5m0s (run refuses less)" -}}
{{- end -}}
{{- $delay := include "sss.seconds" (dict "v" .Values.managedCA.propagationDelay "name" "managedCA.propagationDelay") | atoi -}}
{{- if lt $delay 390 -}}
{{- fail "managedCA.propagationDelay: must be at least 6m30s, kubelet's clusterTrustBundle projection refresh (run refuses less)" -}}
{{- end }}
- --ca-mode=managed
- --managed-ca-secret-name={{ .Values.managedCA.secretName }}
- --managed-ca-key-type={{ .Values.managedCA.keyType }}
- --managed-ca-lifetime={{ .Values.managedCA.lifetime }}
- --managed-ca-rotate-at={{ .Values.managedCA.rotateAt }}
- --managed-ca-propagation-delay={{ .Values.managedCA.propagationDelay }}
- --managed-ca-retire-margin={{ .Values.managedCA.retireMargin }}
- --managed-ca-keep-previous={{ .Values.managedCA.keepPrevious }}
{{- end }}

{{/* A duration of h, m and s (Go's form, as `run` takes it) in whole seconds. */}}
{{- define "sss.seconds" -}}
{{- $v := toString .v -}}
{{- if not (regexMatch "^([0-9]+h)?([0-9]+m)?([0-9]+s)?$" $v) -}}
{{- fail (printf "%s: %q is not a duration of h, m and s (e.g. 1h30m)" .name $v) -}}
{{- end -}}
{{- $h := regexFind "[0-9]+h" $v | trimSuffix "h" | default "0" | atoi -}}
{{- $m := regexFind "[0-9]+m" $v | trimSuffix "m" | default "0" | atoi -}}
{{- $s := regexFind "[0-9]+s" $v | trimSuffix "s" | default "0" | atoi -}}
{{- add (mul $h 3600) (mul $m 60) $s -}}
{{- end -}}
