{{/* The `run` flags of --ca-mode=managed (docs/managed-ca.md), from .Values.managedCA. */}}
{{- define "sss.managedCAArgs" -}}
{{- /* What `run` refuses (manager/options.py Options._validate_managed_ca: MIN_RETIRE_MARGIN,
KUBELET_PROJECTION_WORST_CASE or, with the unlinked bundle, UNLINKED_PROJECTION_WORST_CASE,
the room left after the rotation point) is refused here, so
a release never crash-loops on it; tests/integration/test_chart_values.py renders value by
value and runs the binary's own validation on the same flags. */ -}}
{{- $m := .Values.managedCA -}}
{{- if eq $m.secretName .Values.signingSecret.name -}}
{{- fail "managedCA.secretName: must differ from signingSecret.name, the file-mode CA Secret a move from file mode adopts (run refuses the same name)" -}}
{{- end -}}
{{- $margin := include "sss.seconds" (dict "v" $m.retireMargin "name" "managedCA.retireMargin") | float64 -}}
{{- if lt $margin 300.0 -}}
{{- fail "managedCA.retireMargin: must be at least 5m0s (run refuses less)" -}}
{{- end -}}
{{- $short := $m.allowShortPropagationDelay -}}
{{- $unlinked := .Values.unlinkedBundle.enabled -}}
{{- $maxLifetime := 86400.0 -}}
{{- range .Values.extraArgs -}}
{{- if or (eq . "--managed-ca-allow-short-propagation-delay") (eq . "--managed-ca-allow-short-propagation-delay=true") -}}
{{- $short = true -}}
{{- else if or (eq . "--publish-unlinked-bundle") (eq . "--publish-unlinked-bundle=true") -}}
{{- $unlinked = true -}}
{{- else if hasPrefix "--max-certificate-lifetime=" . -}}
{{- $maxLifetime = include "sss.seconds" (dict "v" (trimPrefix "--max-certificate-lifetime=" .) "name" "extraArgs --max-certificate-lifetime") | float64 -}}
{{- end -}}
{{- end -}}
{{- $delay := include "sss.seconds" (dict "v" $m.propagationDelay "name" "managedCA.propagationDelay") | float64 -}}
{{- if lt $delay 0.0 -}}
{{- fail "managedCA.propagationDelay: must not be negative" -}}
{{- end -}}
{{- if and $unlinked (lt $delay 120.0) (not $short) -}}
{{- fail "managedCA.propagationDelay: must be at least 2m0s with the unlinked bundle, kubelet's clusterTrustBundle projection refresh (run refuses less; managedCA.allowShortPropagationDelay accepts it)" -}}
{{- else if and (not $unlinked) (lt $delay 390.0) (not $short) -}}
{{- fail "managedCA.propagationDelay: must be at least 6m30s, kubelet's clusterTrustBundle projection refresh (run refuses less; managedCA.allowShortPropagationDelay accepts it)" -}}
{{- end -}}
{{- $lifetime := include "sss.seconds" (dict "v" $m.lifetime "name" "managedCA.lifetime") | float64 -}}
{{- $left := mulf $lifetime (subf 1.0 (float64 $m.rotateAt)) -}}
{{- $needed := addf $delay $maxLifetime -}}
{{- if le $left $needed -}}
{{- fail (printf "managedCA.lifetime: %s with rotateAt %v leaves %.0fs after the rotation point; at least propagationDelay + the certificate lifetime (%.0fs) is needed (run refuses less)" (toString $m.lifetime) $m.rotateAt $left $needed) -}}
{{- end }}
- --ca-mode=managed
- --managed-ca-secret-name={{ $m.secretName }}
- --managed-ca-adopt-secret-name={{ .Values.signingSecret.name }}
- --managed-ca-key-type={{ $m.keyType }}
- --managed-ca-lifetime={{ $m.lifetime }}
- --managed-ca-rotate-at={{ $m.rotateAt }}
- --managed-ca-propagation-delay={{ $m.propagationDelay }}
- --managed-ca-retire-margin={{ $m.retireMargin }}
- --managed-ca-keep-previous={{ $m.keepPrevious }}
{{- if $m.allowShortPropagationDelay }}
- --managed-ca-allow-short-propagation-delay=true
{{- end }}
{{- if ne $m.waitForInjector "auto" }}
- --managed-ca-wait-for-injector={{ $m.waitForInjector }}
{{- end }}
{{- end }}

{{/* A duration as `run` takes it (Go's time.ParseDuration: 1h30m, 1.5h, 300ms, 0), in
seconds (a float); anything else fails the render. */}}
{{- define "sss.seconds" -}}
{{- $v := toString .v -}}
{{- $part := "([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)" -}}
{{- if not (regexMatch (printf "^[+-]?(0|(%s)+)$" $part) $v) -}}
{{- fail (printf "%s: %q is not a duration (Go's form: 1h30m, 90m, 1.5h)" .name $v) -}}
{{- end -}}
{{- $units := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "μs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll $part $v -1 -}}
{{- $number := regexFind "^([0-9]+(\\.[0-9]*)?|\\.[0-9]+)" . -}}
{{- $total = addf $total (mulf (float64 $number) (get $units (trimPrefix $number .))) -}}
{{- end -}}
{{- if hasPrefix "-" $v -}}
{{- $total = mulf $total -1.0 -}}
{{- end -}}
{{- $total -}}
{{- end -}}
