package main

// The control surface tests drive, HTTP+JSON on loopback:
//
//	POST   /machines                      {"ip","talosVersion"?,"platform"?}   add a machine
//	DELETE /machines/{ip}                                                      remove it (watches on it end)
//	POST   /machines/{ip}/stop | /start                                        take it down / bring it up
//	PUT    /machines/{ip}/resources       {"namespace","type","id","spec","owner"?}  create or update
//	DELETE /machines/{ip}/resources       {"namespace","type","id","teardown"?}      destroy
//	POST   /talosconfig                   {"path","roles":[...],"hours"?}     write another talosconfig
//	GET    /calls                                                              calls by gRPC method
//	GET    /calls?at=machines                                                  --apid: calls that reached a machine
//	POST   /batch                         [{"method","path","body"}...]       apply these calls in order (bulk seeding)
//	POST   /netns/forwards                {"addr":"IP:port"}                   --apid: the host's addr at addr in the namespace
//	POST   /netns/exposes                 {"addr":"IP:port"}                   --apid: the namespace's addr at addr on the host
//
// With --apid, calls are counted from Talos' apid's log, when they end (apidlog.go); ?at=machines
// counts, when they start, the calls apid passed on to a machine's apid or to machined, and those
// made to a machine's apid directly (from inside the namespace). Adding, stopping, starting or
// removing a machine opens or closes its apid's listener (machinenet.go). Forwards and exposes
// (netnslinks.go) relay connections between the host's network namespace and the simulator's; 409
// when the address is taken.
//
// A resource's spec is YAML unmarshalled into the typed spec of machinery's resource, as
// `talosctl get -o yaml` prints it. Answers are JSON: {"version":"N"} or {"error":"..."}.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	"go.yaml.in/yaml/v4"
)

type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &httpError{http.StatusNotFound, fmt.Sprintf(format, args...)}
}

func (s *sim) controlHandler() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, fn func(*http.Request) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			out, err := fn(r)
			w.Header().Set("Content-Type", "application/json")

			if err != nil {
				code := http.StatusInternalServerError

				var he *httpError
				if errors.As(err, &he) {
					code = he.code
				} else if state.IsConflictError(err) {
					code = http.StatusConflict
				}

				w.WriteHeader(code)
				out = map[string]string{"error": err.Error()}
			}

			_ = json.NewEncoder(w).Encode(out)
		})
	}

	handle("POST /machines", s.addMachine)
	handle("DELETE /machines/{ip}", s.removeMachine)
	handle("POST /machines/{ip}/stop", func(r *http.Request) (any, error) { return s.setStopped(r, true) })
	handle("POST /machines/{ip}/start", func(r *http.Request) (any, error) { return s.setStopped(r, false) })
	handle("PUT /machines/{ip}/resources", s.putResource)
	handle("DELETE /machines/{ip}/resources", s.destroyResource)
	handle("POST /talosconfig", s.talosconfigHandler)
	handle("POST /netns/forwards", s.forwardIntoNetns)
	handle("POST /netns/exposes", s.exposeFromNetns)
	handle("GET /calls", func(r *http.Request) (any, error) {
		s.mu.Lock()
		defer s.mu.Unlock()

		switch at := r.URL.Query().Get("at"); at {
		case "":
			return maps.Clone(s.calls), nil
		case "machines":
			return maps.Clone(s.reached), nil
		default:
			return nil, badRequest("at=%q: expected machines", at)
		}
	})
	// Bulk seeding: the calls of the body applied in order, as --replay applies them; a failure stops
	// there (the calls before it stay applied).
	handle("POST /batch", func(r *http.Request) (any, error) {
		calls, err := decode[[]controlCall](r)
		if err != nil {
			return nil, err
		}

		if err := applyCalls(mux, calls); err != nil {
			return nil, badRequest("batch: %v", err)
		}

		return map[string]int{"applied": len(calls)}, nil
	})

	return mux
}

func decode[T any](r *http.Request) (T, error) {
	var v T

	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()

	if err := dec.Decode(&v); err != nil {
		return v, badRequest("body: %v", err)
	}

	return v, nil
}

func (s *sim) machineAt(r *http.Request) (*machine, error) {
	ip, err := netip.ParseAddr(r.PathValue("ip"))
	if err != nil {
		return nil, badRequest("ip: %v", err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()

	m := s.machines[ip.Unmap()]
	if m == nil {
		return nil, notFound("no machine %s", ip)
	}

	return m, nil
}

func (s *sim) addMachine(r *http.Request) (any, error) {
	req, err := decode[struct {
		IP           string `json:"ip"`
		TalosVersion string `json:"talosVersion"`
		Platform     string `json:"platform"`
	}](r)
	if err != nil {
		return nil, err
	}

	ip, err := netip.ParseAddr(req.IP)
	if err != nil {
		return nil, badRequest("ip: %v", err)
	}

	ip = ip.Unmap()

	if req.TalosVersion == "" {
		req.TalosVersion = s.local.tag
	}

	if req.Platform == "" {
		req.Platform = "metal"
	}

	m, err := newMachine(context.Background(), ip, req.TalosVersion, req.Platform)
	if err != nil {
		return nil, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()

	if s.machines[ip] != nil {
		return nil, &httpError{http.StatusConflict, fmt.Sprintf("machine %s exists", ip)}
	}

	s.machines[ip] = m

	if s.net != nil {
		if err := s.net.up(m); err != nil {
			delete(s.machines, ip)

			return nil, err
		}
	}

	return map[string]string{"ip": ip.String()}, nil
}

func (s *sim) removeMachine(r *http.Request) (any, error) {
	m, err := s.machineAt(r)
	if err != nil {
		return nil, err
	}

	if m == s.local {
		return nil, badRequest("the local machine (apid's own) cannot be removed")
	}

	s.mu.Lock()
	delete(s.machines, m.ip)
	s.mu.Unlock()
	m.setStopped(true)

	if s.net != nil {
		s.net.down(m)
	}

	return map[string]string{}, nil
}

func (s *sim) setStopped(r *http.Request, stopped bool) (any, error) {
	m, err := s.machineAt(r)
	if err != nil {
		return nil, err
	}

	if m == s.local {
		return nil, badRequest("the local machine (apid's own) cannot be stopped; stop the simulator")
	}

	m.setStopped(stopped)

	if s.net != nil {
		if stopped {
			s.net.down(m)
		} else if err := s.net.up(m); err != nil {
			return nil, err
		}
	}

	return map[string]bool{"stopped": stopped}, nil
}

type resourceRequest struct {
	Namespace string `json:"namespace"`
	Type      string `json:"type"`
	ID        string `json:"id"`
	Spec      string `json:"spec"`
	Owner     string `json:"owner"`
	Teardown  bool   `json:"teardown"`
}

func (s *sim) putResource(r *http.Request) (any, error) {
	m, err := s.machineAt(r)
	if err != nil {
		return nil, err
	}

	req, err := decode[resourceRequest](r)
	if err != nil {
		return nil, err
	}

	res, ok := newResource(req.Namespace, req.Type, req.ID)
	if !ok {
		return nil, badRequest("resource type %q is not registered in the simulator", req.Type)
	}

	if err := yaml.Unmarshal([]byte(req.Spec), res.Spec()); err != nil {
		return nil, badRequest("spec of %s: %v", req.Type, err)
	}

	ctx := r.Context()

	cur, err := m.st.Get(ctx, res.Metadata())
	switch {
	case state.IsNotFoundError(err):
		err = m.st.Create(ctx, res, state.WithCreateOwner(req.Owner))
	case err != nil:
		return nil, err
	default:
		// As a controller's modify does: the stored metadata (owner included) with the new spec.
		res.Metadata().SetVersion(cur.Metadata().Version())
		res.Metadata().SetCreated(cur.Metadata().Created())
		if err = res.Metadata().SetOwner(cur.Metadata().Owner()); err != nil {
			return nil, err
		}

		err = m.st.Update(ctx, res, state.WithUpdateOwner(cur.Metadata().Owner()))
	}

	if err != nil {
		return nil, err
	}

	return map[string]string{"version": res.Metadata().Version().String()}, nil
}

func (s *sim) destroyResource(r *http.Request) (any, error) {
	m, err := s.machineAt(r)
	if err != nil {
		return nil, err
	}

	req, err := decode[resourceRequest](r)
	if err != nil {
		return nil, err
	}

	ctx := r.Context()
	md := resource.NewMetadata(req.Namespace, req.Type, req.ID, resource.VersionUndefined)

	if p, ok := prototypes[strings.ToLower(req.Type)]; ok {
		md = resource.NewMetadata(req.Namespace, p.name, req.ID, resource.VersionUndefined)
	}

	cur, err := m.st.Get(ctx, md)
	if err != nil {
		if state.IsNotFoundError(err) {
			return nil, notFound("%v", err)
		}

		return nil, err
	}

	owner := cur.Metadata().Owner()

	if req.Teardown {
		if _, err := m.st.Teardown(ctx, md, state.WithTeardownOwner(owner)); err != nil {
			return nil, err
		}
	}

	if err := m.st.Destroy(ctx, md, state.WithDestroyOwner(owner)); err != nil {
		return nil, err
	}

	return map[string]string{}, nil
}

func (s *sim) talosconfigHandler(r *http.Request) (any, error) {
	req, err := decode[struct {
		Path  string   `json:"path"`
		Roles []string `json:"roles"`
		Hours float64  `json:"hours"`
	}](r)
	if err != nil {
		return nil, err
	}

	if req.Path == "" {
		return nil, badRequest("path is required")
	}

	if req.Hours == 0 {
		req.Hours = 6
	}

	ttl := time.Duration(req.Hours * float64(time.Hour))
	if err := s.pki.writeTalosconfig(req.Path, s.endpoint, req.Roles, ttl); err != nil {
		return nil, err
	}

	return map[string]string{"path": req.Path}, nil
}
