package main

// --apid mode: what machined gives Talos' apid on a control-plane node. apid reads its
// configuration, certificates and the node's addresses from machined's state over the COSI State
// API on system/run/apid/runtime.sock (filtered to those resources), and serves calls that stay on
// the node through machined's API on system/run/machined/machine.sock.

import (
	"context"
	stdx509 "crypto/x509"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	cosiapi "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
)

// apidResourceFilter is machined's filter of apid's view of its state
// (internal/app/machined/pkg/system/services/apid.go): reads of these resources only.
func apidResourceFilter(_ context.Context, access state.Access) error {
	if !access.Verb.Readonly() {
		return errors.New("write access denied")
	}

	switch {
	case access.ResourceNamespace == runtime.NamespaceName && access.ResourceType == runtime.APIServiceConfigType &&
		access.ResourceID == runtime.APIServiceConfigID:
	case access.ResourceNamespace == secrets.NamespaceName && access.ResourceType == secrets.APIType &&
		access.ResourceID == secrets.APIID:
	case access.ResourceNamespace == network.NamespaceName && access.ResourceType == network.NodeAddressType:
	case access.ResourceNamespace == network.NamespaceName && access.ResourceType == network.HostnameStatusType:
	default:
		return errors.New("access denied")
	}

	return nil
}

// publishAPIDState writes into the local machine's state what machined's controllers publish for
// apid on a control-plane node: where it listens, its certificates (a server certificate for the
// addresses it is reached on, and an os:impersonator client certificate, with which it dials other
// machines' apid and passes the caller's roles on) and the node's addresses.
func (s *sim) publishAPIDState(ctx context.Context, listen string) error {
	serverCert, err := s.pki.issue(
		x509.IPAddresses([]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), s.local.ip.AsSlice()}),
		x509.DNSNames([]string{"localhost", "talos"}),
		x509.CommonName("talos"),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
	)
	if err != nil {
		return err
	}

	clientCert, err := s.pki.issue(
		x509.CommonName("talos"),
		x509.Organization(string(role.Impersonator)),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}),
	)
	if err != nil {
		return err
	}

	api := secrets.NewAPI()
	api.TypedSpec().AcceptedCAs = []*x509.PEMEncodedCertificate{{Crt: s.pki.ca.Crt}}
	api.TypedSpec().Server = serverCert
	api.TypedSpec().Client = clientCert

	cfg := runtime.NewAPIServiceConfig()
	cfg.TypedSpec().ListenAddress = listen

	addrs := network.NewNodeAddress(network.NamespaceName, network.NodeAddressCurrentID)
	addrs.TypedSpec().Addresses = []netip.Prefix{netip.PrefixFrom(s.local.ip, s.local.ip.BitLen())}

	for _, r := range []resource.Resource{api, cfg, addrs} {
		if err := s.local.st.Create(ctx, r); err != nil {
			return err
		}
	}

	return nil
}

// listenUnix listens on a unix socket at path, making its folder and replacing a stale socket.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}

	if err := os.RemoveAll(path); err != nil {
		return nil, err
	}

	return net.Listen("unix", path)
}

// serveMachined serves, under root, apid's view of machined's state (runtime.sock) and the local
// machine's machined (machine.sock, without TLS, roles from the `talos-role` metadata).
func (s *sim) serveMachined(root string) ([]*grpc.Server, error) {
	runtimeLis, err := listenUnix(filepath.Join(root, constants.APIRuntimeSocketPath))
	if err != nil {
		return nil, err
	}

	machineLis, err := listenUnix(filepath.Join(root, constants.MachineSocketPath))
	if err != nil {
		return nil, err
	}

	runtimeSrv := grpc.NewServer(grpc.SharedWriteBuffer(true))
	cosiapi.RegisterStateServer(runtimeSrv, server.NewState(state.WrapCore(state.Filter(s.local.st, apidResourceFilter))))

	machinedSrv := s.serverFor(machined, nil)

	go func() { _ = runtimeSrv.Serve(runtimeLis) }()
	go func() { _ = machinedSrv.Serve(machineLis) }()

	return []*grpc.Server{runtimeSrv, machinedSrv}, nil
}
