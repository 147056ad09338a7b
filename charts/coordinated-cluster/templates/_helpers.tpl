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
# Every rule and verb is explained in docs/operator.md (Security > Operator RBAC). Children are written by
# server-side apply (patch; create the first time) and read back by name (get) only where needed.
- apiGroups: [coordinated.dev]
  resources: [coordinatedclusters]
  verbs: [get, list, watch, patch]
- apiGroups: [coordinated.dev]
  resources: [coordinatedclusters/status]
  verbs: [get, patch]
# delete: only to grow the volumes, orphaning the pods and claims (the claim template cannot change in place).
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, create, patch, delete]
# A rolling restart that cannot be scheduled goes back to the pod template that ran, read from its revision.
- apiGroups: [apps]
  resources: [controllerrevisions]
  verbs: [get]
- apiGroups: [""]
  resources: [services, configmaps, serviceaccounts]
  verbs: [create, patch]
# The CA, the pods' certificates, the role tokens and the tokens file: created, read back by name and
# renewed. Never listed, so the operator cannot enumerate other Secrets of a namespace.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch]
# delete: a rolling restart replaces one pod at a time (the StatefulSet is OnDelete).
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, delete]
# list: a new cluster whose data claims exist already is reported as adopting that data, and the claims'
# sizes. create: the snapshot volume's claim (spec.snapshots), which is never deleted by the operator. patch:
# a larger storage.size grows each data claim.
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [list, create, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [create, patch, delete]
- apiGroups: [batch]
  resources: [cronjobs]
  verbs: [create, patch, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [create, patch, delete]
# The sidecars' PodMonitor of each cluster (podMonitor.enabled, or spec.monitoring.podMonitor), where the
# Prometheus Operator is installed; deleted when turned off.
- apiGroups: [monitoring.coreos.com]
  resources: [podmonitors]
  verbs: [create, patch, delete]
# Only used when a cluster sets spec.tls.issuerRef and cert-manager is installed.
- apiGroups: [cert-manager.io]
  resources: [certificates]
  verbs: [create, patch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}

{{- define "coordinated-cluster.clusterRules" -}}
# Cluster-scoped, read only: whether a StorageClass allows volume expansion (a larger storage.size), and the
# zone label of the nodes the pods run on (whether the voters share a zone).
- apiGroups: [storage.k8s.io]
  resources: [storageclasses]
  verbs: [get]
- apiGroups: [""]
  resources: [nodes]
  verbs: [get]
# The API server's OIDC discovery: its issuer and the public keys it signs ServiceAccount tokens with, which the
# sidecars verify tokens against (the operator copies them into each cluster's NAME-service-account-keys).
- nonResourceURLs: [/.well-known/openid-configuration, /openid/v1/jwks]
  verbs: [get]
# spec.scheduling.priorityClassName: the pods run under a twin class that never preempts (same value), which the
# operator creates once per value (coordinated-nonpreempting-VALUE) and never changes.
- apiGroups: [scheduling.k8s.io]
  resources: [priorityclasses]
  verbs: [get, create]
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

{{/* Names of the chart's audit objects: prefixed with the release, so they never clash with the plain
     manifests of spark-jobs/k8s/ (coordinated-audit, ...) applied by hand in the same namespace. */}}
{{- define "coordinated-cluster.auditName" -}}
{{- printf "%s-audit" (include "coordinated-cluster.fullname" .) | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{/* The SparkApplication spec shared by the scheduled and the one-off audit; needs .root and .urls.
     Everything is in the SparkApplication itself (fields, and templates for what no field covers): the
     spark-operator runs spark-submit in its own container, where no file of the project's image exists. */}}
{{- define "coordinated-cluster.auditApplicationSpec" -}}
{{- $audit := .root.Values.sparkAudit -}}
{{- $name := include "coordinated-cluster.auditName" .root -}}
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
  {{- if $audit.cluster.tls }}
  - --ca-file
  - /etc/coordinated/tls/ca.crt
  {{- end }}
sparkVersion: {{ $audit.sparkVersion | quote }}
sparkConf:
  {{- range $key, $value := $audit.sparkConf }}
  {{ $key }}: {{ $value | quote }}
  {{- end }}
restartPolicy:
  type: Never
driver:
  cores: {{ $audit.driver.cores }}
  memory: {{ $audit.driver.memory | quote }}
  serviceAccount: {{ $name }}
  {{- include "coordinated-cluster.auditPodSpec" (dict "container" "spark-kubernetes-driver" "reports" true "cluster" $audit.cluster "client" $audit.cluster.name) | nindent 2 }}
executor:
  instances: {{ $audit.executor.instances }}
  cores: {{ $audit.executor.cores }}
  memory: {{ $audit.executor.memory | quote }}
  {{- include "coordinated-cluster.auditPodSpec" (dict "container" "spark-kubernetes-executor" "reports" false "cluster" dict "client" $audit.cluster.name) | nindent 2 }}
volumes:
  - name: reports
    persistentVolumeClaim:
      claimName: {{ $name }}-reports
  - name: spark-local
    emptyDir: {}
  {{- if $audit.cluster.tls }}
  # Only the CA's certificate: never the pods' keys that share its Secret.
  - name: ca
    secret:
      secretName: {{ default (printf "%s-certs" $audit.cluster.name) $audit.cluster.caSecret }}
      items:
        - key: ca.crt
          path: ca.crt
  {{- end }}
{{- end -}}

{{/* What the driver and executor pods need beyond Spark's defaults (spark-jobs/k8s/sparkapplication.yaml). */}}
{{- define "coordinated-cluster.auditPodSpec" -}}
labels:
  app.kubernetes.io/name: coordinated-audit
  app.kubernetes.io/part-of: coordinated-cluster
  {{- /* The peer the cluster's NetworkPolicy admits to the client port: the fetching tasks run here too. */}}
  coordinated.dev/client: {{ .client | quote }}
podSecurityContext:
  runAsNonRoot: true
  runAsUser: 185
  fsGroup: 185
securityContext:
  allowPrivilegeEscalation: false
  capabilities:
    drop: [ALL]
env:
  - name: SPARK_LOCAL_DIRS
    value: /tmp/spark-local
  {{- /* The driver reads the token and the CA and ships them to the fetching tasks. */}}
  {{- if .cluster.auth }}
  - name: COORDINATED_TOKEN
    valueFrom:
      secretKeyRef:
        name: {{ .cluster.name }}-reader
        key: token
  {{- end }}
volumeMounts:
  {{- if .reports }}
  - name: reports
    mountPath: /reports
  {{- end }}
  - name: spark-local
    mountPath: /tmp/spark-local
  {{- if .cluster.tls }}
  - name: ca
    mountPath: /etc/coordinated/tls
    readOnly: true
  {{- end }}
# The image runs `coordinated` by default; Spark's "driver"/"executor" arguments need its Spark entrypoint.
template:
  spec:
    containers:
      - name: {{ .container }}
        command: [/usr/local/bin/spark-entrypoint.sh]
{{- end -}}

{{/* A map of labels as k=v,k=v (the operator's --pod-monitor-labels). */}}
{{- define "coordinated-cluster.labelList" -}}
{{- $pairs := list }}
{{- range $key, $value := . }}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) }}
{{- end }}
{{- join "," $pairs }}
{{- end -}}
