package main

// The COSI namespaces and resource definitions each simulated machine registers, named after the
// ones machined registers in Talos v1.13 (internal/app/machined/pkg/runtime/v1alpha2): the
// access policy answers "not supported" for everything else, as Talos does.

import (
	"reflect"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/cri"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/files"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/kubespan"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/perf"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/security"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
)

// namespaces a machine registers besides COSI's defaults (meta).
var namespaces = []string{
	v1alpha1.NamespaceName,
	cluster.NamespaceName,
	cluster.RawNamespaceName,
	config.NamespaceName,
	etcd.NamespaceName,
	files.NamespaceName,
	hardware.NamespaceName,
	k8s.NamespaceName,
	k8s.ControlPlaneNamespaceName,
	kubespan.NamespaceName,
	network.NamespaceName,
	network.ConfigNamespaceName,
	cri.NamespaceName,
	secrets.NamespaceName,
	security.NamespaceName,
	perf.NamespaceName,
}

// definitions: every resource the CCM reads, their neighbours in the same packages, and sensitive
// secrets for the refusal tests. Registering a type of machinery also registers its protobuf
// marshalling (the packages' init functions).
var definitions = []meta.ResourceWithRD{
	// the CCM's reads (lib/taloswire.ts RESOURCES)
	&runtime.PlatformMetadata{},
	&hardware.SystemInformation{},
	&network.AddressStatus{},
	&network.LinkStatus{},
	&network.HostnameStatus{},
	&k8s.Nodename{},
	&k8s.NodeIPConfig{},
	&k8s.ControllerManagerConfig{},
	// neighbours
	&hardware.Processor{},
	&hardware.MemoryModule{},
	&k8s.NodeIP{},
	&k8s.KubeletSpec{},
	&k8s.NodeStatus{},
	&k8s.APIServerConfig{},
	&k8s.SchedulerConfig{},
	&network.AddressSpec{},
	&network.HostnameSpec{},
	&network.LinkSpec{},
	&network.NodeAddress{},
	&network.RouteStatus{},
	&network.ResolverStatus{},
	&network.Status{},
	&runtime.MachineStatus{},
	&runtime.Version{},
	&runtime.APIServiceConfig{},
	&runtime.KernelParamStatus{},
	&cluster.Member{},
	&cluster.Identity{},
	&config.MachineType{},
	&etcd.Member{},
	&v1alpha1.Service{},
	// sensitive
	&secrets.API{},
	&secrets.OSRoot{},
	&secrets.Kubernetes{},
	&secrets.Etcd{},
	&k8s.SecretsStatus{},
}

// prototype is a registered type: its Go type and its canonical name.
type prototype struct {
	goType reflect.Type
	name   string
}

// prototypes by lower-cased resource type, for the control surface to make empty resources of.
var prototypes = func() map[string]prototype {
	out := map[string]prototype{}
	for _, d := range definitions {
		name := d.ResourceDefinition().Type
		out[strings.ToLower(name)] = prototype{goType: reflect.TypeOf(d).Elem(), name: name}
	}

	return out
}()

// newResource makes an empty resource of a registered type with the given metadata.
func newResource(namespace, typ, id string) (resource.Resource, bool) {
	p, ok := prototypes[strings.ToLower(typ)]
	if !ok {
		return nil, false
	}

	r, ok := reflect.New(p.goType).Interface().(resource.Resource)
	if !ok {
		return nil, false
	}

	*r.Metadata() = resource.NewMetadata(namespace, p.name, id, resource.VersionUndefined)

	return r, true
}
