package main

// --apid mode: each machine's own apid, where Talos' apid dials it (<ip>:50000, constants.ApidPort)
// inside the simulator's network namespace. One listener per machine feeds one gRPC server; a call
// reaches the machine whose address was dialled. A machine stopped or removed closes its listener
// (new connections are refused, as by a machine that is down) and every connection to it (open
// streams end as when a machine goes away).

import (
	"context"
	stdtls "crypto/tls"
	stdx509 "crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"

	cosiapi "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/siderolabs/crypto/x509"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// machineNet is the machines' apid listeners and their connections; it is the net.Listener of the
// machines' gRPC server.
type machineNet struct {
	mu        sync.Mutex
	listeners map[netip.Addr]net.Listener
	conns     map[netip.Addr]map[*trackedConn]struct{}
	accepted  chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func newMachineNet() *machineNet {
	return &machineNet{
		listeners: map[netip.Addr]net.Listener{},
		conns:     map[netip.Addr]map[*trackedConn]struct{}{},
		accepted:  make(chan net.Conn),
		done:      make(chan struct{}),
	}
}

// freebind lets a listener bind an address no interface has (the namespace's loopback routes every
// address locally; IPv6 needs the option to bind addresses not configured on lo).
func freebind(network, _ string, c syscall.RawConn) error {
	var serr error

	if err := c.Control(func(fd uintptr) {
		if network == "tcp6" {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
		}
	}); err != nil {
		return err
	}

	return serr
}

// up opens the machine's apid listener.
func (n *machineNet) up(m *machine) error {
	n.mu.Lock()
	defer n.mu.Unlock()

	if _, ok := n.listeners[m.ip]; ok {
		return nil
	}

	lc := net.ListenConfig{Control: freebind}

	l, err := lc.Listen(context.Background(), "tcp", netip.AddrPortFrom(m.ip, constants.ApidPort).String())
	if err != nil {
		return fmt.Errorf("machine %s: %w", m.ip, err)
	}

	n.listeners[m.ip] = l

	go n.acceptLoop(m.ip, l)

	return nil
}

func (n *machineNet) acceptLoop(ip netip.Addr, l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}

		n.mu.Lock()
		if n.listeners[ip] != l {
			// the machine went down meanwhile
			n.mu.Unlock()
			c.Close() //nolint:errcheck

			return
		}

		if n.conns[ip] == nil {
			n.conns[ip] = map[*trackedConn]struct{}{}
		}

		tc := &trackedConn{Conn: c, n: n, ip: ip}
		n.conns[ip][tc] = struct{}{}
		n.mu.Unlock()

		select {
		case n.accepted <- tc:
		case <-n.done:
			c.Close() //nolint:errcheck

			return
		}
	}
}

// down closes the machine's listener and its connections.
func (n *machineNet) down(m *machine) {
	n.mu.Lock()
	defer n.mu.Unlock()

	if l, ok := n.listeners[m.ip]; ok {
		l.Close() //nolint:errcheck
		delete(n.listeners, m.ip)
	}

	for c := range n.conns[m.ip] {
		c.Conn.Close() //nolint:errcheck
	}

	delete(n.conns, m.ip)
}

// trackedConn is a connection to a machine's apid, forgotten when closed.
type trackedConn struct {
	net.Conn
	n    *machineNet
	ip   netip.Addr
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.n.mu.Lock()
		delete(c.n.conns[c.ip], c)
		c.n.mu.Unlock()
	})

	return c.Conn.Close()
}

// Accept returns the next connection to any machine.
func (n *machineNet) Accept() (net.Conn, error) {
	select {
	case c := <-n.accepted:
		return c, nil
	case <-n.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept; the machines' listeners stay (the process is ending).
func (n *machineNet) Close() error {
	n.closeOnce.Do(func() { close(n.done) })

	return nil
}

// Addr is the port every machine's apid listens on.
func (n *machineNet) Addr() net.Addr { return &net.TCPAddr{Port: constants.ApidPort} }

// byLocalAddr is the machine whose apid address the peer dialled.
func (s *sim) byLocalAddr(ctx context.Context) (*machine, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.LocalAddr == nil {
		return nil, status.Error(codes.Internal, "talossim: no local address")
	}

	ap, err := netip.ParseAddrPort(p.LocalAddr.String())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "talossim: %v", err)
	}

	m := s.byTarget(ap.Addr().String())
	if m == nil {
		return nil, status.Errorf(codes.Unavailable, "talossim: no machine %s", ap.Addr())
	}

	return m, nil
}

// machineCerts issues each machine's apid server certificate for the address dialled (apid checks
// the dialled IP against the certificate's names), once per address.
type machineCerts struct {
	p     *pki
	mu    sync.Mutex
	certs map[netip.Addr]*stdtls.Certificate
}

func (c *machineCerts) get(hello *stdtls.ClientHelloInfo) (*stdtls.Certificate, error) {
	ap, err := netip.ParseAddrPort(hello.Conn.LocalAddr().String())
	if err != nil {
		return nil, err
	}

	ip := ap.Addr().Unmap()

	c.mu.Lock()
	defer c.mu.Unlock()

	if cert, ok := c.certs[ip]; ok {
		return cert, nil
	}

	pem, err := c.p.issue(
		x509.IPAddresses([]net.IP{ip.AsSlice()}),
		x509.CommonName(ip.String()),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
	)
	if err != nil {
		return nil, err
	}

	cert, err := stdtls.X509KeyPair(pem.Crt, pem.Key)
	if err != nil {
		return nil, err
	}

	c.certs[ip] = &cert

	return &cert, nil
}

// serveMachines serves the machines' apid on s.net, with mutual TLS on the simulator's CA.
func (s *sim) serveMachines() *grpc.Server {
	certs := &machineCerts{p: s.pki, certs: map[netip.Addr]*stdtls.Certificate{}}
	caPool := stdx509.NewCertPool()
	caPool.AppendCertsFromPEM(s.pki.ca.Crt)

	srv := s.serverFor(machineAPID, credentials.NewTLS(&stdtls.Config{
		GetCertificate: certs.get,
		ClientAuth:     stdtls.RequireAndVerifyClientCert,
		ClientCAs:      caPool,
		MinVersion:     stdtls.VersionTLS13,
		NextProtos:     []string{"h2"},
	}))

	go func() { _ = srv.Serve(s.net) }()

	return srv
}

// serverFor is a gRPC server standing in for kind, with the simulator's services.
func (s *sim) serverFor(kind serverKind, creds credentials.TransportCredentials) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(constants.GRPCMaxMessageSize),
		grpc.SharedWriteBuffer(true),
		grpc.ChainUnaryInterceptor(s.unaryInterceptor(kind)),
		grpc.ChainStreamInterceptor(s.streamInterceptor(kind)),
	}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}

	srv := grpc.NewServer(opts...)
	cosiapi.RegisterStateServer(srv, cosiRouter{})
	machineapi.RegisterMachineServiceServer(srv, machineService{sim: s})

	return srv
}
