{{/* Labels every object of this chart carries. */}}
{{- define "erasure.labels" -}}
app.kubernetes.io/name: erasure
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The Secret holding connections and credentials. */}}
{{- define "erasure.connectionsSecret" -}}
{{- default "erasure-connections" .Values.connections.existingSecret -}}
{{- end -}}

{{/* The Airflow API server's in-cluster URL (the Airflow chart's Service). */}}
{{- define "erasure.apiServerUrl" -}}
{{- printf "http://%s-api-server:8080" .Release.Name -}}
{{- end -}}

{{/* The image of the Airflow chart, used by this chart's Jobs too. */}}
{{- define "erasure.image" -}}
{{- $image := .Values.airflow.images.airflow -}}
{{- printf "%s:%s" $image.repository (toString $image.tag) -}}
{{- end -}}

{{/* Pod and container security settings of this chart's Jobs (the image's airflow user). */}}
{{- define "erasure.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 50000
runAsGroup: 0
fsGroup: 0
seccompProfile:
  type: RuntimeDefault
{{- end -}}
{{- define "erasure.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* NetworkPolicy egress rule: peers and TCP ports of one destination. */}}
{{- define "erasure.egressRule" -}}
- to:
    {{- toYaml .to | nindent 4 }}
  ports:
    {{- range .ports }}
    - protocol: TCP
      port: {{ . }}
    {{- end }}
{{- end -}}

{{/* The container that runs `erasure store migrate` as the store's owner. */}}
{{- define "erasure.migrateContainer" -}}
- name: migrate
  image: {{ include "erasure.image" . | quote }}
  imagePullPolicy: {{ .Values.airflow.images.airflow.pullPolicy }}
  command: [erasure, store, migrate]
  env:
    - name: ERASURE_STORE_URL
      valueFrom:
        secretKeyRef:
          name: {{ include "erasure.connectionsSecret" . }}
          key: store-migration-url
    - name: PYTHONDONTWRITEBYTECODE
      value: "1"
  securityContext:
    {{- include "erasure.containerSecurityContext" . | nindent 4 }}
  resources:
    {{- toYaml .Values.migration.resources | nindent 4 }}
{{- end -}}
