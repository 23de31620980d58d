package main

// One simulated machine: machined's resource state (namespaced in-memory COSI state with
// registered namespaces and resource definitions) behind Talos' access policy and COSI's gRPC
// State server, and whether the machine is up.

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/cosi-project/runtime/pkg/state/registry"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// machine is one simulated Talos node.
type machine struct {
	ip       netip.Addr
	tag      string
	platform string

	// st is the unfiltered state the control surface writes (as machined's controllers do).
	st state.State
	// api serves cosi.resource.State over the filtered state.
	api *server.State

	mu      sync.Mutex
	stopped bool
	// down is closed when the machine stops; replaced when it starts.
	down chan struct{}
}

func newMachine(ctx context.Context, ip netip.Addr, tag, platform string) (*machine, error) {
	st := state.WrapCore(namespaced.NewState(func(ns string) state.CoreState {
		return inmem.NewStateWithOptions(
			inmem.WithHistoryInitialCapacity(8),
			inmem.WithHistoryMaxCapacity(1024),
			inmem.WithHistoryGap(4),
		)(ns)
	}))

	nsReg := registry.NewNamespaceRegistry(st)
	if err := nsReg.RegisterDefault(ctx); err != nil {
		return nil, err
	}

	rdReg := registry.NewResourceRegistry(st)
	if err := rdReg.RegisterDefault(ctx); err != nil {
		return nil, err
	}

	for _, ns := range namespaces {
		if err := nsReg.Register(ctx, ns, ns+" (simulated)"); err != nil {
			return nil, fmt.Errorf("namespace %s: %w", ns, err)
		}
	}

	for _, d := range definitions {
		if err := rdReg.Register(ctx, d); err != nil {
			return nil, fmt.Errorf("definition %T: %w", d, err)
		}
	}

	filtered := state.WrapCore(state.Filter(st, accessPolicy(st)))

	return &machine{
		ip:       ip,
		tag:      tag,
		platform: platform,
		st:       st,
		api:      server.NewState(filtered),
		down:     make(chan struct{}),
	}, nil
}

// isStopped reports whether the machine is down, and the channel closed when it goes down.
func (m *machine) state() (bool, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.stopped, m.down
}

func (m *machine) setStopped(stopped bool) {
	m.mu.Lock()
	defer m.mu.Unlock()

	if stopped == m.stopped {
		return
	}

	m.stopped = stopped
	if stopped {
		close(m.down)
	} else {
		m.down = make(chan struct{})
	}
}

// errNotAuthorized is what Talos' authorizer answers (pkg/grpc/middleware/authz).
var errNotAuthorized = status.Error(codes.PermissionDenied, "not authorized")

// accessPolicy applies the rules of Talos' resource access policy (internal/app/resources):
// no writes; only registered types; sensitive types for os:admin only; only registered namespaces.
func accessPolicy(st state.State) state.FilteringRule {
	return func(ctx context.Context, access state.Access) error {
		if !access.Verb.Readonly() {
			return status.Error(codes.PermissionDenied, "write access is not allowed")
		}

		rdMD := resource.NewMetadata(meta.NamespaceName, meta.ResourceDefinitionType, strings.ToLower(access.ResourceType), resource.VersionUndefined)

		rd, err := safe.StateGet[*meta.ResourceDefinition](ctx, st, rdMD)
		if state.IsNotFoundError(err) {
			return status.Error(codes.PermissionDenied, fmt.Sprintf("resource type %q is not supported", access.ResourceType))
		} else if err != nil {
			return err
		}

		if rd.TypedSpec().Sensitivity == meta.Sensitive && !rolesOf(ctx).Includes(role.Admin) {
			return errNotAuthorized
		}

		nsMD := resource.NewMetadata(meta.NamespaceName, meta.NamespaceType, access.ResourceNamespace, resource.VersionUndefined)

		_, err = safe.StateGet[*meta.Namespace](ctx, st, nsMD)
		if state.IsNotFoundError(err) {
			return status.Error(codes.PermissionDenied, fmt.Sprintf("namespace %q is not supported", access.ResourceNamespace))
		}

		return err
	}
}
