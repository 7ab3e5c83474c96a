{{/*
Name of the chart, overridable with nameOverride.
*/}}
{{- define "mysql-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects: the release name when it already contains the chart name
(`helm install mysql-operator ...` gives "mysql-operator"), else "<release>-<chart>".
*/}}
{{- define "mysql-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"<chart>-<version>" for the helm.sh/chart label.
*/}}
{{- define "mysql-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object of the chart.
*/}}
{{- define "mysql-operator.labels" -}}
helm.sh/chart: {{ include "mysql-operator.chart" . }}
{{ include "mysql-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: bulwark
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Labels that select the operator pod; never change them in an upgrade (Deployment selectors
are immutable).
*/}}
{{- define "mysql-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mysql-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Name of the operator's ServiceAccount.
*/}}
{{- define "mysql-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mysql-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image references: "<repository>:<tag>", the tag defaulting to the chart's appVersion.
*/}}
{{- define "mysql-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "mysql-operator.backupImage" -}}
{{- printf "%s:%s" .Values.backupImage.repository (default .Chart.AppVersion .Values.backupImage.tag) }}
{{- end }}

{{/* Backup images for further series, as the operator reads them: series=image,... */}}
{{- define "mysql-operator.backupImagesBySeries" -}}
{{- $pairs := list -}}
{{- range $series, $image := .Values.backupImages -}}
{{- $pairs = append $pairs (printf "%s=%s" $series $image) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end }}

{{/* The operator's permissions: exactly bulwark_operator::rbac::cluster_role_rules()
(crates/operator/src/rbac.rs), in the same order; crates/operator/tests/chart.rs checks both the
ClusterRole and the namespaced Roles against it. */}}
{{- define "mysql-operator.rules" -}}
- apiGroups: ["mysql.bulwark.dev"]
  resources: ["mysqlclusters"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["mysql.bulwark.dev"]
  resources: ["mysqlbackups"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["mysql.bulwark.dev"]
  resources: ["mysqlclusters/status", "mysqlbackups/status"]
  verbs: ["patch"]
- apiGroups: ["mysql.bulwark.dev"]
  resources: ["mysqlclusters/finalizers", "mysqlbackups/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "patch"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["list", "watch", "create", "patch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get"]
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["apps"]
  resources: ["replicasets"]
  verbs: ["list"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["list", "watch", "create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
