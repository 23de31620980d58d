package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// grafanaDashboard checks a dashboard JSON file against Grafana's published dashboard schema (the
// Grafana Foundation SDK's generated types, with every core panel and data-query plugin registered):
// strict decoding refuses a field the schema lacks, in the dashboard, a panel, its options and field
// config, or a target; Validate checks required fields and constraints. Prints the panels checked.
func grafanaDashboard(args []string) error {
	if len(args) != 1 {
		return errors.New("dashboard FILE")
	}

	raw, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}

	plugins.RegisterDefaultPlugins()

	var d dashboard.Dashboard
	if err := orNil(d.UnmarshalJSONStrict(raw)); err != nil {
		return fmt.Errorf("not Grafana's dashboard schema: %w", err)
	}

	if err := orNil(d.Validate()); err != nil {
		return fmt.Errorf("invalid: %w", err)
	}

	// Decoded again one by one: the SDK's PanelOrRowPanel drops a panel whose decoding returned its
	// (empty) error list, so the dashboard's own Panels are not to be trusted.
	var top struct {
		Panels []json.RawMessage `json:"panels"`
	}

	if err := json.Unmarshal(raw, &top); err != nil {
		return err
	}

	var problems []string

	for i, pr := range top.Panels {
		var p dashboard.Panel
		if err := orNil(p.UnmarshalJSONStrict(pr)); err != nil {
			problems = append(problems, fmt.Sprintf("panels[%d]: %v", i, err))

			continue
		}

		if err := orNil(p.Validate()); err != nil {
			problems = append(problems, fmt.Sprintf("panels[%d]: %v", i, err))

			continue
		}

		n, err := prometheusTargets(pr)
		if err != nil {
			problems = append(problems, fmt.Sprintf("panels[%d]: %v", i, err))

			continue
		}

		fmt.Printf("panel %q (%s): %d Prometheus targets\n", deref(p.Title), p.Type, n)
	}

	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}

	return nil
}

// prometheusTargets decodes a panel's targets as Prometheus data queries, strictly (the SDK's panel
// decoding drops them as it drops panels); each must have an expression.
func prometheusTargets(panel json.RawMessage) (int, error) {
	var p struct {
		Targets []json.RawMessage `json:"targets"`
	}

	if err := json.Unmarshal(panel, &p); err != nil {
		return 0, err
	}

	if len(p.Targets) == 0 {
		return 0, errors.New("no targets")
	}

	for i, t := range p.Targets {
		var q prometheus.Dataquery
		if err := orNil(q.UnmarshalJSONStrict(t)); err != nil {
			return 0, fmt.Errorf("targets[%d]: %w", i, err)
		}

		if err := orNil(q.Validate()); err != nil {
			return 0, fmt.Errorf("targets[%d]: %w", i, err)
		}

		if q.Expr == "" {
			return 0, fmt.Errorf("targets[%d]: no expr", i)
		}
	}

	return len(p.Targets), nil
}

// orNil is err, or nil for an empty cog.BuildErrors: the SDK returns its (nil) error list as an
// error interface, which is not nil.
func orNil(err error) error {
	var list cog.BuildErrors
	if errors.As(err, &list) && len(list) == 0 {
		return nil
	}

	return err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}

	return *s
}
