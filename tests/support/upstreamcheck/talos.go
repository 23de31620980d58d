package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// talosGenConfig prints the control-plane machine config `talosctl gen config` writes for this
// machinery version (cluster "ccm", endpoint https://10.5.0.2:6443, install disk /dev/sda), secrets
// made anew.
func talosGenConfig(args []string) error {
	if len(args) != 0 {
		return errors.New("talos-gen-config takes no arguments")
	}

	in, err := generate.NewInput("ccm", "https://10.5.0.2:6443", constants.DefaultKubernetesVersion,
		generate.WithInstallDisk("/dev/sda"))
	if err != nil {
		return err
	}

	cfg, err := in.Config(machine.TypeControlPlane)
	if err != nil {
		return err
	}

	out, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return err
	}

	_, err = os.Stdout.Write(out)

	return err
}

// metal is the runtime mode Talos validates an installed machine's config in.
type metal struct{}

func (metal) String() string        { return "metal" }
func (metal) RequiresInstall() bool { return true }
func (metal) InContainer() bool     { return false }

// talosPatch applies the patches (files, in order, as `talosctl patch machineconfig --patch @FILE`
// does) to the machine config in CONFIG, validates the result as Talos does before it accepts a
// config, and prints it.
func talosPatch(args []string) error {
	if len(args) < 2 {
		return errors.New("talos-patch CONFIG PATCH...")
	}

	in, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}

	specs := make([]string, 0, len(args)-1)
	for _, p := range args[1:] {
		specs = append(specs, "@"+p)
	}

	patches, err := configpatcher.LoadPatches(specs)
	if err != nil {
		return fmt.Errorf("loading patches: %w", err)
	}

	out, err := configpatcher.Apply(configpatcher.WithBytes(in), patches)
	if err != nil {
		return fmt.Errorf("applying patches: %w", err)
	}

	cfg, err := out.Config()
	if err != nil {
		return err
	}

	// Loaded again from its bytes, as a machine reads it.
	raw, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return err
	}

	loaded, err := configloader.NewFromBytes(raw)
	if err != nil {
		return fmt.Errorf("the patched config does not load: %w", err)
	}

	if _, err = loaded.Validate(metal{}); err != nil {
		return fmt.Errorf("the patched config is invalid: %w", err)
	}

	_, err = os.Stdout.Write(raw)

	return err
}
