{{- define "coordinated-cluster.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "coordinated-cluster.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "coordinated-cluster.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "coordinated-cluster.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "coordinated-cluster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "coordinated-cluster.name" . }}-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "coordinated-cluster.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "coordinated-cluster.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "coordinated-cluster.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The operator's permissions; shared by the ClusterRole and the per-namespace Roles. */}}
{{- define "coordinated-cluster.namespacedRules" -}}
- apiGroups: [coordinated.dev]
  resources: [coordinatedclusters]
  verbs: [get, list, watch, patch, update]
- apiGroups: [coordinated.dev]
  resources: [coordinatedclusters/status]
  verbs: [get, patch, update]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [""]
  resources: [services, configmaps, serviceaccounts]
  verbs: [get, list, watch, create, patch, update, delete]
# The transport Secret is created once and never read back or changed.
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [batch]
  resources: [cronjobs]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}

{{- define "coordinated-cluster.auditLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: coordinated-audit
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: audit
app.kubernetes.io/part-of: coordinated-cluster
{{- end -}}

{{/* The SparkApplication spec shared by the scheduled and the one-off audit; needs .root and .urls. */}}
{{- define "coordinated-cluster.auditApplicationSpec" -}}
{{- $audit := .root.Values.sparkAudit -}}
type: Python
pythonVersion: "3"
mode: cluster
image: {{ default (include "coordinated-cluster.image" .root) $audit.image | quote }}
imagePullPolicy: {{ $audit.imagePullPolicy }}
mainApplicationFile: local:///app/spark-jobs/audit_main.py
arguments:
  - --from-cluster
  - {{ join "," .urls | quote }}
  - --report-dir
  - /reports/{{ $audit.cluster.name }}
sparkVersion: {{ $audit.sparkVersion | quote }}
sparkConf:
  {{- range $key, $value := $audit.sparkConf }}
  {{ $key }}: {{ $value | quote }}
  {{- end }}
  spark.kubernetes.driver.podTemplateFile: /opt/coordinated/pod-template.yaml
  spark.kubernetes.executor.podTemplateFile: /opt/coordinated/pod-template.yaml
restartPolicy:
  type: Never
driver:
  cores: {{ $audit.driver.cores }}
  memory: {{ $audit.driver.memory | quote }}
  serviceAccount: coordinated-audit
  labels:
    app.kubernetes.io/name: coordinated-audit
  volumeMounts:
    - name: reports
      mountPath: /reports
executor:
  instances: {{ $audit.executor.instances }}
  cores: {{ $audit.executor.cores }}
  memory: {{ $audit.executor.memory | quote }}
  labels:
    app.kubernetes.io/name: coordinated-audit
volumes:
  - name: reports
    persistentVolumeClaim:
      claimName: coordinated-audit-reports
{{- end -}}
