package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

// durationPattern is the kubebuilder validation pattern of monitoringv1.Duration (types.go), which
// the CRD enforces on interval, scrapeTimeout and a rule's for.
var durationPattern = regexp.MustCompile(`^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`)

// strict decodes one object's JSON into out, refusing fields the type does not have.
func strict(raw []byte, out any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()

	return dec.Decode(out)
}

// monitoring checks every ServiceMonitor and PrometheusRule of a multi-document YAML file (`helm
// template` output) against the Prometheus Operator's own types: no field the types lack, each
// endpoint's HTTP, authorization and TLS settings valid by the types' Validate methods, durations
// matching the CRD's pattern, and no deprecated field. Prints one line per object checked.
func monitoring(args []string) error {
	if len(args) != 1 {
		return errors.New("monitoring FILE")
	}

	in, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}

	var problems []string

	checked := 0

	for _, doc := range splitYAML(in) {
		raw, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return err
		}

		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}

		if err := json.Unmarshal(raw, &head); err != nil {
			return fmt.Errorf("a document of %s is no Kubernetes object: %w", args[0], err)
		}

		if head.APIVersion != "monitoring.coreos.com/v1" {
			continue
		}

		where := head.Kind + "/" + head.Metadata.Name

		var found []string

		switch head.Kind {
		case "ServiceMonitor":
			found = checkServiceMonitor(raw)
		case "PrometheusRule":
			found = checkPrometheusRule(raw)
		default:
			found = []string{"a kind this check does not know"}
		}

		for _, p := range found {
			problems = append(problems, where+": "+p)
		}

		checked++

		fmt.Println("checked", where)
	}

	if checked == 0 {
		return errors.New("no monitoring.coreos.com/v1 object in " + args[0])
	}

	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}

	return nil
}

func checkServiceMonitor(raw []byte) []string {
	var sm monitoringv1.ServiceMonitor
	if err := strict(raw, &sm); err != nil {
		return []string{err.Error()}
	}

	var problems []string

	if len(sm.Spec.Endpoints) == 0 {
		problems = append(problems, "no endpoints")
	}

	for i, ep := range sm.Spec.Endpoints {
		at := fmt.Sprintf("endpoints[%d]: ", i)

		if ep.Authorization == nil && ep.BearerTokenFile == "" && ep.BearerTokenSecret == nil && ep.BasicAuth == nil && ep.OAuth2 == nil {
			problems = append(problems, at+"no credentials: the target answers 401 without a token")
		}

		if ep.BearerTokenFile != "" {
			problems = append(problems, at+"bearerTokenFile is deprecated (use authorization)")
		}

		if ep.BearerTokenSecret != nil {
			problems = append(problems, at+"bearerTokenSecret is deprecated (use authorization)")
		}

		if err := ep.HTTPConfigWithProxyAndTLSFiles.Validate(); err != nil {
			problems = append(problems, at+err.Error())
		}

		for name, d := range map[string]monitoringv1.Duration{"interval": ep.Interval, "scrapeTimeout": ep.ScrapeTimeout} {
			if d != "" && !durationPattern.MatchString(string(d)) {
				problems = append(problems, fmt.Sprintf("%s%s %q is no Prometheus duration", at, name, d))
			}
		}
	}

	return problems
}

func checkPrometheusRule(raw []byte) []string {
	var pr monitoringv1.PrometheusRule
	if err := strict(raw, &pr); err != nil {
		return []string{err.Error()}
	}

	var problems []string

	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if (r.Alert == "") == (r.Record == "") {
				problems = append(problems, fmt.Sprintf("group %s: a rule must have exactly one of alert and record", g.Name))
			}

			if r.For != nil && !durationPattern.MatchString(string(*r.For)) {
				problems = append(problems, fmt.Sprintf("%s: for %q is no Prometheus duration", r.Alert, *r.For))
			}

			if r.Expr.String() == "" {
				problems = append(problems, r.Alert+": empty expr")
			}
		}
	}

	return problems
}

// splitYAML splits a YAML stream into its documents.
func splitYAML(in []byte) [][]byte {
	var docs [][]byte

	for _, part := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(in), -1) {
		if strings.TrimSpace(stripComments(part)) != "" {
			docs = append(docs, []byte(part))
		}
	}

	return docs
}

func stripComments(s string) string {
	var b strings.Builder

	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}

	return b.String()
}
