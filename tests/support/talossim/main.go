// Command talossim is a Talos apid simulator for the tests of talos-cloud-controller-manager:
// many simulated machines, each a machined-like COSI state holding resource types of
// github.com/siderolabs/talos/pkg/machinery, served through COSI's own gRPC State server behind
// Talos' access policy, routed by the `node` metadata key as apid routes, over mutual TLS with
// Talos-made certificates. Tests drive it through an HTTP+JSON control surface (control.go).
//
// With --apid=BIN, Talos' own apid (BIN, built unchanged from the Talos module) stands in front of
// the machines instead of the simulated one (apidmode.go).
//
// On start it prints one JSON line: {"grpc":"127.0.0.1:P","control":"127.0.0.1:Q"}, with --apid also
// "apidPid" (apid's process) and "simPid" (the simulator's process in the network namespace).
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	cosiapi "github.com/cosi-project/runtime/api/v1alpha1"
	talostls "github.com/siderolabs/crypto/tls"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// sim holds the machines; the local one answers calls without a `node` key.
type sim struct {
	mu       sync.Mutex
	machines map[netip.Addr]*machine
	local    *machine
	calls    map[string]int
	// reached counts, by method, the calls that reached a machine (its apid, through Talos' apid or
	// dialled directly in the namespace, or machined; --apid mode) when they started:
	// GET /calls?at=machines.
	reached  map[string]int
	pki      *pki
	endpoint string
	// net, in --apid mode, serves each machine's apid on <ip>:50000 in the simulator's network namespace.
	net *machineNet
	// links, in --apid mode, are the addresses shared with the host's namespace (netnslinks.go).
	links *links
}

func (s *sim) byTarget(target string) *machine {
	ip, err := netip.ParseAddr(strings.Trim(target, "[]"))
	if err != nil {
		return nil
	}

	s.mu.Lock()
	defer s.mu.Unlock()

	return s.machines[ip.Unmap()]
}

func (s *sim) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()

	return len(s.machines)
}

func (s *sim) count(method string) {
	s.mu.Lock()
	defer s.mu.Unlock()

	s.calls[method]++
}

func (s *sim) countReached(method string) {
	s.mu.Lock()
	defer s.mu.Unlock()

	s.reached[method]++
}

type options struct {
	listen, control, pkiDir, talosconfig, adminTalosconfig, localIP, tag, replay string
	keepaliveMinTime                                                             time.Duration
	apid, apidRoot                                                               string
	inNetns                                                                      bool
}

func parseFlags() options {
	var o options

	flag.StringVar(&o.listen, "listen", "127.0.0.1:0", "apid gRPC address")
	flag.StringVar(&o.control, "control", "127.0.0.1:0", "control surface (HTTP) address")
	flag.StringVar(&o.pkiDir, "pki-dir", "", "where the CA and server certificate are kept across restarts (default: made anew)")
	flag.StringVar(&o.talosconfig, "talosconfig", "", "write a talosconfig with role os:reader here")
	flag.StringVar(&o.adminTalosconfig, "admin-talosconfig", "", "write a talosconfig with role os:admin here")
	flag.StringVar(&o.localIP, "local-ip", "127.0.0.1", "IP of the machine apid runs on (answers calls without a node key)")
	flag.StringVar(&o.tag, "talos-version", "v1.13.5", "Talos version tag machines report")
	flag.StringVar(&o.replay, "replay", "",
		"JSON file of control calls [{method,path,body}] applied before apid serves (a restart keeps its machines)")
	flag.DurationVar(&o.keepaliveMinTime, "keepalive-min-time", 0,
		"grpc-go keepalive enforcement MinTime (default: grpc-go's 5 minutes, as apid leaves it)")
	flag.StringVar(&o.apid, "apid", "", "run this Talos apid binary in front of the machines (in a network namespace)")
	flag.StringVar(&o.apidRoot, "apid-root", "", "apid's root directory (chroot; holds system/run/{apid,machined}) (default: a temp dir)")
	flag.BoolVar(&o.inNetns, "in-netns", false, "internal: running inside the network namespace (listeners on fds 3 and 4, the host link on fd 5)")
	flag.Parse()

	return o
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("talossim: ")

	if err := run(parseFlags()); err != nil {
		log.Fatal(err)
	}
}

func run(o options) error {
	switch {
	case o.apid != "" && o.keepaliveMinTime > 0:
		return errors.New("--keepalive-min-time applies to the simulated apid; Talos' apid (--apid) keeps grpc-go's default")
	case o.apid != "" && !o.inNetns:
		return runParent(o)
	case o.apid != "":
		return runWithAPID(o)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	grpcLis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}

	ctlLis, err := net.Listen("tcp", o.control)
	if err != nil {
		return err
	}

	s, err := newSim(ctx, o, grpcLis.Addr().String())
	if err != nil {
		return err
	}

	srv, err := s.grpcServer(o.keepaliveMinTime)
	if err != nil {
		return err
	}

	handler := s.controlHandler()
	if err := replay(handler, o.replay); err != nil {
		return err
	}

	ctl := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}

	go func() { _ = srv.Serve(grpcLis) }()
	go func() { _ = ctl.Serve(ctlLis) }()

	line, _ := json.Marshal(map[string]string{"grpc": s.endpoint, "control": ctlLis.Addr().String()})
	fmt.Println(string(line))

	<-ctx.Done()
	srv.Stop()

	return ctl.Close()
}

// newSim loads or makes the PKI, makes the local machine and writes the talosconfigs for endpoint.
func newSim(ctx context.Context, o options, endpoint string) (*sim, error) {
	p, err := loadOrMakePKI(o.pkiDir)
	if err != nil {
		return nil, err
	}

	localIP, err := netip.ParseAddr(o.localIP)
	if err != nil {
		return nil, fmt.Errorf("--local-ip: %w", err)
	}

	local, err := newMachine(ctx, localIP, o.tag, "metal")
	if err != nil {
		return nil, err
	}

	s := &sim{machines: map[netip.Addr]*machine{localIP: local}, local: local, calls: map[string]int{}, reached: map[string]int{}, pki: p, endpoint: endpoint}

	for path, roles := range map[string][]string{o.talosconfig: {"os:reader"}, o.adminTalosconfig: {"os:admin"}} {
		if path == "" {
			continue
		}

		if err := p.writeTalosconfig(path, s.endpoint, roles, 6*time.Hour); err != nil {
			return nil, err
		}
	}

	return s, nil
}

// controlCall is one recorded control call, as --replay and POST /batch take them.
type controlCall struct {
	Method string          `json:"method"`
	Path   string          `json:"path"`
	Body   json.RawMessage `json:"body"`
}

// replay applies recorded control calls in order; any failure is fatal.
func replay(h http.Handler, path string) error {
	if path == "" {
		return nil
	}

	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}

	var calls []controlCall
	if err := json.Unmarshal(b, &calls); err != nil {
		return fmt.Errorf("--replay: %w", err)
	}

	if err := applyCalls(h, calls); err != nil {
		return fmt.Errorf("--replay: %w", err)
	}

	return nil
}

// applyCalls applies control calls in order through h and stops at the first that fails.
func applyCalls(h http.Handler, calls []controlCall) error {
	for _, c := range calls {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.Method, c.Path, bytes.NewReader(c.Body)))

		if rec.Code >= http.StatusMultipleChoices {
			return fmt.Errorf("%s %s: %d %s", c.Method, c.Path, rec.Code, strings.TrimSpace(rec.Body.String()))
		}
	}

	return nil
}

func (s *sim) grpcServer(keepaliveMinTime time.Duration) (*grpc.Server, error) {
	cert, err := tls.X509KeyPair(s.pki.server.Crt, s.pki.server.Key)
	if err != nil {
		return nil, err
	}

	tlsConfig, err := talostls.New(
		talostls.WithClientAuthType(talostls.Mutual),
		talostls.WithCACertPEM(s.pki.ca.Crt),
		talostls.WithKeypair(cert),
	)
	if err != nil {
		return nil, err
	}

	opts := []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(tlsConfig)),
		grpc.MaxRecvMsgSize(constants.GRPCMaxMessageSize),
		grpc.InitialWindowSize(65535 * 32),
		grpc.InitialConnWindowSize(65535 * 16),
		grpc.SharedWriteBuffer(true),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor(frontAPID)),
		grpc.ChainStreamInterceptor(s.streamInterceptor(frontAPID)),
	}
	if keepaliveMinTime > 0 {
		opts = append(opts, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime}))
	}

	srv := grpc.NewServer(opts...)
	cosiapi.RegisterStateServer(srv, cosiRouter{})
	machineapi.RegisterMachineServiceServer(srv, machineService{sim: s})

	return srv, nil
}
