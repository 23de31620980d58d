package main

// apid in front of the simulated machines: roles from the client certificate's Organization, the
// `node`/`nodes` metadata routing of apid's director with its status codes, machined's per-method
// authorization, then the machine's COSI State server or MachineService.

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/netip"
	"runtime"
	"runtime/debug"
	"strings"

	cosiapi "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

type ctxKey int

const (
	rolesKey ctxKey = iota
	machineKey
)

func rolesOf(ctx context.Context) role.Set {
	roles, _ := ctx.Value(rolesKey).(role.Set)

	return roles
}

func machineOf(ctx context.Context) *machine {
	m, _ := ctx.Value(machineKey).(*machine)

	return m
}

var (
	readers = role.MakeSet(role.Admin, role.Operator, role.Reader)
	admins  = role.MakeSet(role.Admin)
)

// methodRoles are machined's rules for the methods served here; other methods need os:admin.
var methodRoles = map[string]role.Set{
	"/cosi.resource.State/Get":        readers,
	"/cosi.resource.State/List":       readers,
	"/cosi.resource.State/Watch":      readers,
	"/cosi.resource.State/Create":     admins,
	"/cosi.resource.State/Update":     admins,
	"/cosi.resource.State/Destroy":    admins,
	"/machine.MachineService/Version": readers,
}

// one2many lists the method prefixes apid's director proxies to several nodes (`nodes` metadata).
var one2many = []string{
	"/machine.MachineService/",
	"/cluster.ClusterService/",
	"/inspect.InspectService/",
	"/storage.StorageService/",
	"/time.TimeService/",
}

// peerRoles are the roles of the client certificate (Subject O), parsed as Talos parses them.
func peerRoles(ctx context.Context) role.Set {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return role.Zero
	}

	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return role.Zero
	}

	roles, _ := role.Parse(info.State.PeerCertificates[0].Subject.Organization)

	return roles
}

// dialError is what apid answers for a node it cannot connect to (grpc-go's dial error).
func dialError(target string) error {
	host := strings.Trim(target, "[]")
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Is6() {
			host = "[" + ip.String() + "]"
		} else {
			host = ip.String()
		}

		return status.Errorf(codes.Unavailable,
			"connection error: desc = \"transport: Error while dialing: dial tcp %s:%d: connect: connection refused\"",
			host, constants.ApidPort)
	}

	return status.Errorf(codes.Unavailable, "name resolver error: produced zero addresses")
}

// addressContainsPort reports what apid's backend rejects as a target (an address with a port).
func addressContainsPort(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}

	if strings.Contains(host, ":") {
		if _, err := netip.ParseAddr(host); err != nil {
			return false
		}
	}

	return true
}

// route picks the machine answering a call, as apid's director does.
func (s *sim) route(ctx context.Context, method string) (*machine, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	nodes, okNodes := md["nodes"]
	node, okNode := md["node"]

	if okNode && len(node) != 1 {
		return nil, status.Error(codes.InvalidArgument, "node metadata must be single-valued")
	}

	switch {
	case okNodes:
		supported := false
		for _, p := range one2many {
			supported = supported || strings.HasPrefix(method, p)
		}

		if !supported {
			return nil, status.Errorf(codes.InvalidArgument, "one-2-many proxying is not supported for method %s", method)
		}

		if len(nodes) != 1 {
			return nil, status.Error(codes.Unimplemented, "talossim: one-2-many proxying to several nodes is not simulated")
		}

		return s.target(nodes[0])
	case okNode:
		return s.target(node[0])
	default:
		return s.local, nil
	}
}

func (s *sim) target(target string) (*machine, error) {
	if target == "" || addressContainsPort(target) {
		return nil, status.Errorf(codes.Internal, "invalid target %q", target)
	}

	m := s.byTarget(target)
	if m == nil {
		return nil, dialError(target)
	}

	if stopped, _ := m.state(); stopped {
		return nil, dialError(target)
	}

	return m, nil
}

// serverKind is whom a gRPC server of the simulator stands in for.
type serverKind int

const (
	// frontAPID is the simulated apid: it routes by `node`, roles come from the client certificate.
	frontAPID serverKind = iota
	// machineAPID is a machine's own apid as Talos' apid reaches it on <ip>:50000 (--apid mode): the
	// machine is the one whose address was dialled; roles come from the certificate, or from the
	// `talos-role` metadata when the peer is os:impersonator (another apid), as apid's injector does.
	machineAPID
	// machined is the local machine's machined on machine.sock (--apid mode): roles come from the
	// `talos-role` metadata only (machined's injector in MetadataOnly mode).
	machined
)

// metadataRoles are the roles in the `talos-role` metadata, and whether there were any.
func metadataRoles(ctx context.Context) (role.Set, bool) {
	md, _ := metadata.FromIncomingContext(ctx)

	vals := md.Get(constants.APIAuthzRoleMetadataKey)
	if len(vals) == 0 {
		return role.Zero, false
	}

	roles, _ := role.Parse(vals)

	return roles, true
}

// callee is the machine a call reaches and the caller's roles, as the server of `kind` finds them.
func (s *sim) callee(ctx context.Context, method string, kind serverKind) (*machine, role.Set, error) {
	switch kind {
	case machineAPID:
		m, err := s.byLocalAddr(ctx)

		roles := peerRoles(ctx)
		if r, ok := metadataRoles(ctx); ok && roles.Includes(role.Impersonator) {
			roles = r
		}

		return m, roles, err
	case machined:
		roles, _ := metadataRoles(ctx)

		return s.local, roles, nil
	default:
		m, err := s.route(ctx, method)

		return m, peerRoles(ctx), err
	}
}

// admit runs apid's and machined's checks for the server of `kind`; it returns the context the
// handler runs with.
func (s *sim) admit(ctx context.Context, method string, kind serverKind) (context.Context, error) {
	if kind == frontAPID {
		// with --apid, Talos' apid is in front: calls are counted from its log (apidlog.go)
		s.count(method)
	} else {
		s.countReached(method)
	}

	m, roles, err := s.callee(ctx, method, kind)
	if err != nil {
		return nil, err
	}

	allowed, ok := methodRoles[method]
	if !ok {
		allowed = admins
	}

	if !allowed.IncludesAny(roles) {
		return nil, errNotAuthorized
	}

	ctx = context.WithValue(ctx, rolesKey, roles)

	return context.WithValue(ctx, machineKey, m), nil
}

// recovered turns a handler's panic into Internal, as Talos' gRPC factory does
// (pkg/grpc/factory: recovery is the first interceptor), instead of ending the simulator.
func recovered(method string, err *error) {
	if p := recover(); p != nil {
		log.Printf("panic in %s: %v\n%s", method, p, debug.Stack())

		*err = status.Errorf(codes.Internal, "%v", p)
	}
}

func (s *sim) unaryInterceptor(kind serverKind) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (_ any, err error) {
		defer recovered(info.FullMethod, &err)

		ctx, err = s.admit(ctx, info.FullMethod, kind)
		if err != nil {
			return nil, err
		}

		return handler(ctx, req)
	}
}

type wrappedStream struct {
	grpc.ServerStream
	ctx context.Context //nolint:containedctx
}

func (w *wrappedStream) Context() context.Context { return w.ctx }

func (s *sim) streamInterceptor(kind serverKind) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer recovered(info.FullMethod, &err)

		ctx, err := s.admit(ss.Context(), info.FullMethod, kind)
		if err != nil {
			return err
		}

		return handler(srv, &wrappedStream{ServerStream: ss, ctx: ctx})
	}
}

// cosiRouter is the cosi.resource.State service of whichever machine the call was routed to.
type cosiRouter struct {
	cosiapi.UnimplementedStateServer
}

func (cosiRouter) Get(ctx context.Context, req *cosiapi.GetRequest) (*cosiapi.GetResponse, error) {
	return machineOf(ctx).api.Get(ctx, req)
}

func (cosiRouter) Create(ctx context.Context, req *cosiapi.CreateRequest) (*cosiapi.CreateResponse, error) {
	return machineOf(ctx).api.Create(ctx, req)
}

func (cosiRouter) Update(ctx context.Context, req *cosiapi.UpdateRequest) (*cosiapi.UpdateResponse, error) {
	return machineOf(ctx).api.Update(ctx, req)
}

func (cosiRouter) Destroy(ctx context.Context, req *cosiapi.DestroyRequest) (*cosiapi.DestroyResponse, error) {
	return machineOf(ctx).api.Destroy(ctx, req)
}

// whileUp runs a streaming call that ends, as a proxied stream does, when the machine goes down.
func whileUp(ss grpc.ServerStream, run func(grpc.ServerStream) error) error {
	m := machineOf(ss.Context())
	_, down := m.state()

	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()

	go func() {
		select {
		case <-down:
			cancel()
		case <-ctx.Done():
		}
	}()

	err := run(&wrappedStream{ServerStream: ss, ctx: ctx})

	select {
	case <-down:
		return status.Error(codes.Unavailable, "error reading from server: EOF")
	default:
		return err
	}
}

func (cosiRouter) List(req *cosiapi.ListRequest, srv grpc.ServerStreamingServer[cosiapi.ListResponse]) error {
	return whileUp(srv, func(ss grpc.ServerStream) error {
		return machineOf(ss.Context()).api.List(req, &listStream{ss})
	})
}

func (cosiRouter) Watch(req *cosiapi.WatchRequest, srv grpc.ServerStreamingServer[cosiapi.WatchResponse]) error {
	return whileUp(srv, func(ss grpc.ServerStream) error {
		return machineOf(ss.Context()).api.Watch(req, &watchStream{ss})
	})
}

type listStream struct{ grpc.ServerStream }

func (l *listStream) Send(r *cosiapi.ListResponse) error { return l.SendMsg(r) }

type watchStream struct{ grpc.ServerStream }

func (w *watchStream) Send(r *cosiapi.WatchResponse) error { return w.SendMsg(r) }

// machineService answers Version as machined does; every other method is Unimplemented.
type machineService struct {
	machineapi.UnimplementedMachineServiceServer
	sim *sim
}

func (ms machineService) versionOf(m *machine) *machineapi.Version {
	return &machineapi.Version{
		Version: &machineapi.VersionInfo{
			Tag:       m.tag,
			Sha:       "talossim",
			Built:     "",
			GoVersion: runtime.Version(),
			Os:        runtime.GOOS,
			Arch:      runtime.GOARCH,
		},
		Platform: &machineapi.PlatformInfo{Name: m.platform, Mode: "cloud"},
		Features: &machineapi.FeaturesInfo{Rbac: true},
	}
}

func (ms machineService) Version(ctx context.Context, _ *emptypb.Empty) (*machineapi.VersionResponse, error) {
	m := machineOf(ctx)
	v := ms.versionOf(m)

	md, _ := metadata.FromIncomingContext(ctx)
	if nodes := md["nodes"]; len(nodes) == 1 {
		// one-2-many: apid's backend adds the node it asked to each reply
		v.Metadata = &common.Metadata{Hostname: nodes[0]}
	}

	return &machineapi.VersionResponse{Messages: []*machineapi.Version{v}}, nil
}

// String names the simulator in logs.
func (ms machineService) String() string { return fmt.Sprintf("talossim(%d machines)", ms.sim.size()) }
