{{/*
Names and labels. They follow the Go Talos CCM chart's rules, so that an upgrade from a release of
that chart keeps the object names and the pods' selector (which Kubernetes does not let change).
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "talos-cloud-controller-manager.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: fullnameOverride, the release name when it holds the chart name, or both. */}}
{{- define "talos-cloud-controller-manager.fullname" -}}
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

{{/* The pods' selector. */}}
{{- define "talos-cloud-controller-manager.selectorLabels" -}}
app.kubernetes.io/name: {{ include "talos-cloud-controller-manager.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The image tag: image.tag, or the chart's appVersion. The Go chart's values files name its moving tags
(edge, latest), which this project never publishes (a release tag is v<version>): they mean "the
newest", so the chart's own release runs, and NOTES says so.
*/}}
{{- define "talos-cloud-controller-manager.goMovingTag" -}}
{{- has (.Values.image.tag | default "") (list "edge" "latest") | ternary "true" "" -}}
{{- end }}
{{/*
The image repository: image.repository, except the Go CCM's own image, which the Go chart's default
values name and which cannot run with this chart's arguments: this project's image runs instead
(tests/unit/manifests.test.ts keeps the name equal to values.yaml's default, the published one), and NOTES says so.
*/}}
{{- define "talos-cloud-controller-manager.goRepository" -}}
{{- eq .Values.image.repository "ghcr.io/siderolabs/talos-cloud-controller-manager" | ternary "true" "" -}}
{{- end }}
{{- define "talos-cloud-controller-manager.imageRepository" -}}
{{- if include "talos-cloud-controller-manager.goRepository" . -}}
ghcr.io/talos-ccm/talos-cloud-controller-manager
{{- else -}}
{{ .Values.image.repository }}
{{- end -}}
{{- end }}
{{/*
A tag of the Go CCM's image (image.repository is the Go image): a Go release (v1.12.0) names no image of
this project, so the chart's own release runs there too, and NOTES says so.
*/}}
{{- define "talos-cloud-controller-manager.goReleaseTag" -}}
{{- if and (include "talos-cloud-controller-manager.goRepository" .) (not (include "talos-cloud-controller-manager.goMovingTag" .)) .Values.image.tag -}}
true
{{- end -}}
{{- end }}
{{- define "talos-cloud-controller-manager.imageTag" -}}
{{- if or (include "talos-cloud-controller-manager.goMovingTag" .) (include "talos-cloud-controller-manager.goReleaseTag" .) -}}
{{ .Chart.AppVersion }}
{{- else -}}
{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* Every object's labels. */}}
{{- define "talos-cloud-controller-manager.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "talos-cloud-controller-manager.selectorLabels" . }}
app.kubernetes.io/version: {{ include "talos-cloud-controller-manager.imageTag" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The Kubernetes ServiceAccount the pods run as. */}}
{{- define "talos-cloud-controller-manager.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "talos-cloud-controller-manager.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The generated RBAC table and controller names (files/rbac.yaml, from lib/rbacgrants.ts). */}}
{{- define "talos-cloud-controller-manager.rbacData" -}}
{{- .Files.Get "files/rbac.yaml" }}
{{- end }}

{{/*
The controllers enabledControllers runs, as a JSON list of internal names, resolved as the binary
resolves --controllers: for each controller the first entry naming it decides (name: on, -name: off);
with none, it runs when the list holds `*` and it is on by default. features.approveNodeCSR adds
node-csr-approval, as the binary does. An unknown name fails the install, as it would fail the pod.
*/}}
{{- define "talos-cloud-controller-manager.enabledControllers" -}}
{{- $data := include "talos-cloud-controller-manager.rbacData" . | fromYaml }}
{{- $joined := join "," .Values.enabledControllers }}
{{- $entries := list }}
{{- if ne $joined "" }}
{{- range splitList "," $joined }}{{ $entries = append $entries (trim .) }}{{ end }}
{{- end }}
{{- $known := list }}
{{- range $data.controllers }}{{ $known = concat $known .names }}{{ end }}
{{- range $entries }}
{{- if not (or (eq . "*") (has (trimPrefix "-" .) $known)) }}
{{- fail (printf "enabledControllers: %q is not a known controller (known: *, %s)" . (join ", " $known)) }}
{{- end }}
{{- end }}
{{- $enabled := list }}
{{- range $c := $data.controllers }}
{{- if $c.name }}
{{- $decided := false }}
{{- $on := false }}
{{- $star := false }}
{{- range $e := $entries }}
{{- if not $decided }}
{{- if eq $e "*" }}
{{- $star = true }}
{{- else if has $e $c.names }}
{{- $decided = true }}
{{- $on = true }}
{{- else if and (hasPrefix "-" $e) (has (trimPrefix "-" $e) $c.names) }}
{{- $decided = true }}
{{- end }}
{{- end }}
{{- end }}
{{- if or $on (and (not $decided) $star $c.onByDefault) }}
{{- $enabled = append $enabled $c.name }}
{{- end }}
{{- end }}
{{- end }}
{{- if and (dig "approveNodeCSR" false (.Values.features | default dict)) (not (has "node-csr-approval" $enabled)) }}
{{- $enabled = append $enabled "node-csr-approval" }}
{{- end }}
{{- toJson $enabled }}
{{- end }}

{{/*
ccm-config.yaml: the shipped default (files/ccm-config.yaml, every setting commented out) or, when
the values hold transformations or features, those.
*/}}
{{- define "talos-cloud-controller-manager.cloudConfig" -}}
{{- $config := dict }}
{{- if dig "approveNodeCSR" false (.Values.features | default dict) }}
{{- $_ := set $config "global" (dict "approveNodeCSR" true) }}
{{- end }}
{{- with .Values.transformations }}
{{- $_ := set $config "transformations" . }}
{{- end }}
{{- if $config }}
{{- printf "# talos-cloud-controller-manager configuration, from the chart's values.\n" }}
{{- toYaml $config }}
{{- else }}
{{- .Files.Get "files/ccm-config.yaml" }}
{{- end }}
{{- end }}

{{/*
What of ccm-config.yaml the CCM reads only at start-up: global.approveNodeCSR, which adds a
controller. Its checksum restarts the pods when it changes; the rest (transformations) is reloaded
live, so changing it restarts nothing.
*/}}
{{- define "talos-cloud-controller-manager.startupConfig" -}}
{{- dict "approveNodeCSR" (dig "approveNodeCSR" false (.Values.features | default dict)) | toJson }}
{{- end }}

{{/*
The leader Lease's name: cloud-controller-manager-talos (the Go chart's), or what extraArgs set with
--leader-elect-resource-name (the last one, as the binary reads it), so that the alerts and the
dashboard watch the Lease the pods hold.
*/}}
{{- define "talos-cloud-controller-manager.leaseName" -}}
{{- $name := "cloud-controller-manager-talos" -}}
{{- $args := .Values.extraArgs | default list -}}
{{- range $i, $a := $args -}}
{{- if hasPrefix "--leader-elect-resource-name=" $a -}}
{{- $name = trimPrefix "--leader-elect-resource-name=" $a -}}
{{- else if and (eq $a "--leader-elect-resource-name") (lt (add1 $i) (len $args)) -}}
{{- $name = index $args (add1 $i) -}}
{{- end -}}
{{- end -}}
{{- $name -}}
{{- end }}
