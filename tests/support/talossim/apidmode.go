package main

// --apid mode: Talos' own apid (internal/app/apid, built unchanged from the Talos module by
// tests/support/testbed-bins.sh) in front of the simulated machines, as on a control-plane node.
// Inside the simulator's network namespace (netns.go):
//
//   - apid runs chrooted in --apid-root, where the simulator serves what machined serves it
//     (apidstate.go): system/run/apid/runtime.sock and system/run/machined/machine.sock;
//   - apid listens on <local-ip>:50000, and the endpoint the CCM dials on the host is relayed to it
//     byte for byte (apid terminates TLS: its certificate and its checks are what the CCM meets),
//     as is the same address in the namespace (netnslinks.go: a CCM run there uses the same
//     talosconfig; forwards and exposes share other addresses with the host);
//   - every other machine's apid listens on <ip>:50000 (machinenet.go), where apid dials it;
//   - apid's log is read to count calls (apidlog.go) and passed on to stderr.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// apidStartTimeout bounds the wait for apid to listen.
const apidStartTimeout = 20 * time.Second

// runWithAPID runs inside the network namespace, until SIGINT or SIGTERM, or until apid exits.
func runWithAPID(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if err := setupLoopback(); err != nil {
		return namespaceError("cannot set up the network namespace's loopback", err)
	}

	if err := serveNXDOMAIN(); err != nil {
		return err
	}

	hostGRPC, err := net.FileListener(os.NewFile(3, "grpc"))
	if err != nil {
		return err
	}

	hostCtl, err := net.FileListener(os.NewFile(4, "control"))
	if err != nil {
		return err
	}

	s, err := newSim(ctx, o, hostGRPC.Addr().String())
	if err != nil {
		return err
	}

	s.net = newMachineNet()

	host, err := openHostLink()
	if err != nil {
		return err
	}

	s.links = newLinks(host)
	defer s.links.close()

	apidAddr := netip.AddrPortFrom(s.local.ip, constants.ApidPort).String()
	if err := s.publishAPIDState(ctx, apidAddr); err != nil {
		return err
	}

	root := o.apidRoot
	if root == "" {
		if root, err = os.MkdirTemp("", "talossim-apid-"); err != nil {
			return err
		}
		defer os.RemoveAll(root) //nolint:errcheck
	}

	servers, err := s.serveMachined(root)
	if err != nil {
		return err
	}

	servers = append(servers, s.serveMachines())
	defer func() {
		for _, srv := range servers {
			srv.Stop()
		}
	}()

	return s.serveWithAPID(ctx, o, root, apidAddr, hostGRPC, hostCtl)
}

// serveWithAPID replays the recorded control calls, starts apid, then serves the host's endpoint
// (relayed to apid) and the control surface.
func (s *sim) serveWithAPID(ctx context.Context, o options, root, apidAddr string, hostGRPC, hostCtl net.Listener) error {
	handler := s.controlHandler()
	if err := replay(handler, o.replay); err != nil {
		return err
	}

	cmd, exited, err := s.startAPID(o.apid, root, apidAddr)
	if err != nil {
		return err
	}

	defer stopAPID(cmd, exited)

	if err := s.links.serveEndpoint(hostGRPC, apidAddr); err != nil {
		return err
	}

	ctl := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = ctl.Serve(hostCtl) }()

	defer ctl.Close() //nolint:errcheck

	line, _ := json.Marshal(map[string]any{
		"grpc": s.endpoint, "control": hostCtl.Addr().String(), "apidPid": cmd.Process.Pid, "simPid": os.Getpid(),
	})
	fmt.Println(string(line))

	select {
	case <-ctx.Done():
		return nil
	case err := <-exited:
		return fmt.Errorf("apid exited: %v", err)
	}
}

// apidEnv is the environment machined gives apid (internal/app/machined/pkg/system/services/apid.go):
// Talos' GOMEMLIMIT for apid (4/5 of its 128 MiB cgroup limit) unless APID_GOMEMLIMIT gives
// another value or "off".
func apidEnv() []string {
	env := []string{constants.EnvTcellMinimizeEnvironment, constants.EnvGRPCEnforccceALPNEnabled}

	switch v := os.Getenv("APID_GOMEMLIMIT"); v {
	case "off":
		return env
	case "":
		return append(env, constants.EnvApidGomemlimit())
	default:
		return append(env, "GOMEMLIMIT="+v)
	}
}

// startAPID starts apid chrooted in root (its binary linked or copied there; it is static and needs
// nothing else) and waits until it listens on addr. exited gets cmd.Wait's result.
func (s *sim) startAPID(bin, root, addr string) (*exec.Cmd, <-chan error, error) {
	inRoot := filepath.Join(root, "apid")
	_ = os.Remove(inRoot)

	if err := os.Link(bin, inRoot); err != nil {
		if err := copyFile(bin, inRoot); err != nil {
			return nil, nil, fmt.Errorf("--apid: %w", err)
		}
	}

	logR, logW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}

	cmd := exec.Command("/apid")
	cmd.Dir = "/"
	cmd.Env = apidEnv()
	cmd.Stdout, cmd.Stderr = os.Stderr, logW
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Pdeathsig: syscall.SIGKILL}

	err = cmd.Start()
	logW.Close() //nolint:errcheck

	if err != nil {
		return nil, nil, fmt.Errorf("--apid: %w", err)
	}

	go s.countFromLog(logR, os.Stderr)

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	if err := awaitListening(addr, exited); err != nil {
		_ = cmd.Process.Kill()

		return nil, nil, err
	}

	return cmd, exited, nil
}

// awaitListening dials addr until it answers, apid exits or apidStartTimeout passes.
func awaitListening(addr string, exited <-chan error) error {
	deadline := time.Now().Add(apidStartTimeout)

	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("apid did not listen on %s within %s", addr, apidStartTimeout)
		}

		select {
		case err := <-exited:
			return fmt.Errorf("apid exited before listening: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stopAPID sends apid SIGTERM and kills it if it has not exited within 5 s.
func stopAPID(cmd *exec.Cmd, exited <-chan error) {
	_ = cmd.Process.Signal(syscall.SIGTERM)

	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close() //nolint:errcheck

	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}

	if _, err := io.Copy(out, in); err != nil {
		out.Close() //nolint:errcheck

		return err
	}

	return out.Close()
}
