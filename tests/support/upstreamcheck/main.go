// Command upstreamcheck checks what this project writes for other programs against those programs'
// own Go code: Talos machine-config patches with Talos' configpatcher and validation (module
// github.com/siderolabs/talos/pkg/machinery), the chart's ServiceMonitor and PrometheusRule with the
// Prometheus Operator's API types, and the chart's dashboard with Grafana's published schema (the
// Grafana Foundation SDK, Apache-2.0; Grafana itself is not used). Built and cached by
// tests/support/upstreamcheck-bins.sh; the end-to-end tests run it.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: upstreamcheck talos-gen-config | talos-patch CONFIG PATCH... | monitoring FILE | dashboard FILE")
	}

	var err error

	switch os.Args[1] {
	case "talos-gen-config":
		err = talosGenConfig(os.Args[2:])
	case "talos-patch":
		err = talosPatch(os.Args[2:])
	case "monitoring":
		err = monitoring(os.Args[2:])
	case "dashboard":
		err = grafanaDashboard(os.Args[2:])
	default:
		err = fmt.Errorf("unknown check %q", os.Args[1])
	}

	if err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "upstreamcheck:", msg)
	os.Exit(1)
}
