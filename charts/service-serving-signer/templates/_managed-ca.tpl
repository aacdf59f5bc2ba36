{{/* The `run` flags of --ca-mode=managed (docs/managed-ca.md), from .Values.managedCA. */}}
{{- define "sss.managedCAArgs" -}}
- --ca-mode=managed
- --managed-ca-secret-name={{ .Values.managedCA.secretName }}
- --managed-ca-key-type={{ .Values.managedCA.keyType }}
- --managed-ca-lifetime={{ .Values.managedCA.lifetime }}
- --managed-ca-rotate-at={{ .Values.managedCA.rotateAt }}
- --managed-ca-propagation-delay={{ .Values.managedCA.propagationDelay }}
- --managed-ca-retire-margin={{ .Values.managedCA.retireMargin }}
- --managed-ca-keep-previous={{ .Values.managedCA.keepPrevious }}
{{- end }}
