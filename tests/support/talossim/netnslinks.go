package main

// --apid mode: addresses shared by the host's network namespace and the simulator's, the same
// address on both sides (e.g. 127.0.0.1:P), so that a process run in the simulator's namespace
// (nsenter --net=/proc/<simPid>/ns/net) reaches the host's services and the host reaches its own:
//
//   - a forward (POST /netns/forwards {"addr":A}): the simulator listens at A in its namespace and
//     relays each connection to A in the host's namespace (e.g. the API server, for a CCM run there);
//   - an expose (POST /netns/exposes {"addr":A}): it listens at A in the host's namespace and relays
//     each connection to A in its namespace (e.g. that CCM's --secure-port);
//   - apid's endpoint on the host (127.0.0.1:<grpc port>, the talosconfig's) is also served at the
//     same address in the namespace, relayed to apid as on the host.
//
// The simulator in the namespace cannot make sockets in the host's namespace (it has left it, and
// without root it has no right to enter it again), but a socket keeps the namespace it was made in
// and can be passed between processes. So the process left on the host (runParent, netns.go) keeps
// one end of a unix SOCK_SEQPACKET socketpair whose other end the simulator has as fd 5, the host
// link, and makes sockets on its request: a request is one message {"op":"dial"|"listen","addr":A}
// carrying (SCM_RIGHTS) one end of a new socketpair, on which the answer comes: {} with the
// connected or listening socket (SCM_RIGHTS), or {"error":"..."}. A reply socket per request lets
// requests run side by side without ids. Passing sockets needs no capability: this works as root and
// in an unprivileged user namespace alike.
//
// A relay copies bytes both ways, half-closing each direction as it ends; a connection reset by
// either side ends the pair quietly. When the other side cannot be reached (nothing listens at A
// yet) the accepted connection is closed at once (its client sees it accepted, then closed) and the
// error is logged to stderr, at most once a second per address and error. Forwards and exposes stay
// until the simulator stops, which closes every listener and relayed connection; a restart replays
// them (TalosSim's journal) in the new namespace.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// hostLinkFd is the child's end of the host link.
const hostLinkFd = 5

// linkTimeout bounds a dial on the host, and the wait for the host's answer.
const linkTimeout = 10 * time.Second

// linkRequest is one request on the host link.
type linkRequest struct {
	Op   string `json:"op"`
	Addr string `json:"addr"`
}

// linkReply answers a request; without an error, the socket comes with it (SCM_RIGHTS).
type linkReply struct {
	Error string `json:"error,omitempty"`
	// Errno is the error's errno, if it has one (EADDRINUSE: the address is taken on the host).
	Errno int `json:"errno,omitempty"`
}

// hostError is an error on the host, with its errno (errors.Is(err, syscall.EADDRINUSE)).
type hostError struct {
	msg   string
	errno syscall.Errno
}

func (e *hostError) Error() string { return "on the host: " + e.msg }

func (e *hostError) Unwrap() error {
	if e.errno == 0 {
		return nil
	}

	return e.errno
}

// seqpacketPair is a new unix SOCK_SEQPACKET socketpair: one end as a connection, the other as a
// file (to pass on).
func seqpacketPair() (*net.UnixConn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}

	c, err := unixConn(os.NewFile(uintptr(fds[0]), "socketpair"))
	if err != nil {
		unix.Close(fds[1]) //nolint:errcheck

		return nil, nil, err
	}

	return c, os.NewFile(uintptr(fds[1]), "socketpair"), nil
}

// unixConn is f as a *net.UnixConn; f is closed (the connection has a descriptor of its own).
func unixConn(f *os.File) (*net.UnixConn, error) {
	defer f.Close() //nolint:errcheck

	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}

	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close() //nolint:errcheck

		return nil, fmt.Errorf("%s is not a unix socket", f.Name())
	}

	return uc, nil
}

// receivedFile is the one descriptor a message carried (SCM_RIGHTS), as a file.
func receivedFile(oob []byte, name string) (*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}

	var fds []int

	for i := range msgs {
		more, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			return nil, err
		}

		fds = append(fds, more...)
	}

	if len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd) //nolint:errcheck
		}

		return nil, fmt.Errorf("%d descriptors where one was expected", len(fds))
	}

	return os.NewFile(uintptr(fds[0]), name), nil
}

// ---------------------------------------------------------------------------------------------
// The host's side (the parent, in the host's namespace)

// serveHostLink answers the child's requests, each in its own goroutine, until the child has closed
// its end (it exited).
func serveHostLink(link *net.UnixConn) {
	defer link.Close() //nolint:errcheck

	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))

	for {
		n, oobn, _, _, err := link.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}

		f, err := receivedFile(oob[:oobn], "reply")
		if err != nil {
			log.Printf("host link: a request without its reply socket: %v", err)

			continue
		}

		reply, err := unixConn(f)
		if err != nil {
			log.Printf("host link: reply socket: %v", err)

			continue
		}

		req := append([]byte{}, buf[:n]...)

		go answerLinkRequest(reply, req)
	}
}

// answerLinkRequest makes the socket asked for and sends it on reply, or the error.
func answerLinkRequest(reply *net.UnixConn, body []byte) {
	defer reply.Close() //nolint:errcheck

	var req linkRequest

	err := json.Unmarshal(body, &req)
	if err == nil {
		err = sendHostSocket(reply, req)
	}

	if err == nil {
		return
	}

	ans := linkReply{Error: err.Error()}

	var errno syscall.Errno
	if errors.As(err, &errno) {
		ans.Errno = int(errno)
	}

	msg, _ := json.Marshal(ans)
	if _, _, werr := reply.WriteMsgUnix(msg, nil, nil); werr != nil {
		log.Printf("host link: %s %s: %v; answering: %v", req.Op, req.Addr, err, werr)
	}
}

// sendHostSocket makes the socket a request asks for and sends it on reply.
func sendHostSocket(reply *net.UnixConn, req linkRequest) error {
	sock, err := hostSocket(req)
	if err != nil {
		return err
	}
	defer sock.Close() //nolint:errcheck

	return sendSocket(reply, sock)
}

// socket is a connection or a listener, as the host link passes them.
type socket interface {
	syscall.Conn
	Close() error
}

// hostSocket is the socket a request asks for, made in the host's namespace: a connection to addr
// (dial) or a listener at addr (listen).
func hostSocket(req linkRequest) (socket, error) {
	switch req.Op {
	case "dial":
		c, err := net.DialTimeout("tcp", req.Addr, linkTimeout)
		if err != nil {
			return nil, err
		}

		return c.(*net.TCPConn), nil
	case "listen":
		l, err := net.Listen("tcp", req.Addr)
		if err != nil {
			return nil, err
		}

		return l.(*net.TCPListener), nil
	default:
		return nil, fmt.Errorf("unknown op %q (expected dial or listen)", req.Op)
	}
}

// sendSocket sends {} with the socket's descriptor on reply.
func sendSocket(reply *net.UnixConn, sock syscall.Conn) error {
	raw, err := sock.SyscallConn()
	if err != nil {
		return err
	}

	msg, _ := json.Marshal(linkReply{})

	var werr error
	if err := raw.Control(func(fd uintptr) {
		_, _, werr = reply.WriteMsgUnix(msg, unix.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}

	return werr
}

// ---------------------------------------------------------------------------------------------
// The simulator's side (the child, in its namespace)

// hostLink is the child's end of the host link.
type hostLink struct{ c *net.UnixConn }

// openHostLink is the host link the parent passed as fd 5.
func openHostLink() (*hostLink, error) {
	c, err := unixConn(os.NewFile(hostLinkFd, "host link"))
	if err != nil {
		return nil, fmt.Errorf("host link (fd %d): %w", hostLinkFd, err)
	}

	return &hostLink{c: c}, nil
}

// socket asks the host for a socket (op "dial" or "listen" at addr) and returns it as a file.
func (h *hostLink) socket(op, addr string) (*os.File, error) {
	reply, theirs, err := seqpacketPair()
	if err != nil {
		return nil, err
	}
	defer reply.Close() //nolint:errcheck

	req, _ := json.Marshal(linkRequest{Op: op, Addr: addr})
	_, _, err = h.c.WriteMsgUnix(req, unix.UnixRights(int(theirs.Fd())), nil)
	theirs.Close() //nolint:errcheck

	if err != nil {
		return nil, fmt.Errorf("host link: %w", err)
	}

	_ = reply.SetDeadline(time.Now().Add(2 * linkTimeout))

	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))

	n, oobn, _, _, err := reply.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, fmt.Errorf("host link: no answer: %w", err)
	}

	var ans linkReply
	if err := json.Unmarshal(buf[:n], &ans); err != nil {
		return nil, fmt.Errorf("host link: answer: %w", err)
	}

	if ans.Error != "" {
		return nil, &hostError{msg: ans.Error, errno: syscall.Errno(ans.Errno)}
	}

	return receivedFile(oob[:oobn], op+" "+addr)
}

// dial connects to addr in the host's namespace.
func (h *hostLink) dial(addr string) (net.Conn, error) {
	f, err := h.socket("dial", addr)
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck

	return net.FileConn(f)
}

// listen listens at addr in the host's namespace.
func (h *hostLink) listen(addr string) (net.Listener, error) {
	f, err := h.socket("listen", addr)
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck

	return net.FileListener(f)
}

// listenInNetns listens at addr in the simulator's namespace, any address (freebind, as the
// machines' listeners).
func listenInNetns(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: freebind}

	return lc.Listen(context.Background(), "tcp", addr)
}

// links are the simulator's relaying listeners and their connections.
type links struct {
	host      *hostLink
	mu        sync.Mutex
	listeners map[string]net.Listener
	conns     map[net.Conn]struct{}
	closed    bool
	// logged is when each "name: error" was last logged.
	logged map[string]time.Time
}

func newLinks(host *hostLink) *links {
	return &links{
		host:      host,
		listeners: map[string]net.Listener{},
		conns:     map[net.Conn]struct{}{},
		logged:    map[string]time.Time{},
	}
}

// serve relays each connection accepted on l to a connection from dial; name ("forward A") names
// it in logs.
func (ls *links) serve(name string, l net.Listener, dial func() (net.Conn, error)) {
	ls.mu.Lock()
	defer ls.mu.Unlock()

	if ls.closed {
		l.Close() //nolint:errcheck

		return
	}

	ls.listeners[name] = l

	go ls.accept(name, l, dial)
}

func (ls *links) accept(name string, l net.Listener, dial func() (net.Conn, error)) {
	for {
		c, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}

		if err != nil {
			// e.g. out of file descriptors: the next accept may do
			ls.warn(name, fmt.Errorf("accept: %w", err))
			time.Sleep(100 * time.Millisecond)

			continue
		}

		go ls.relay(name, c, dial)
	}
}

// relay copies c to a connection from dial and back, until both directions have ended.
func (ls *links) relay(name string, c net.Conn, dial func() (net.Conn, error)) {
	if !ls.track(c) {
		return
	}
	defer ls.untrack(c)

	u, err := dial()
	if err != nil {
		ls.warn(name, err)

		return
	}

	if !ls.track(u) {
		return
	}
	defer ls.untrack(u)

	done := make(chan struct{}, 2)
	pipe := func(to, from net.Conn) {
		_, _ = io.Copy(to, from)
		if hc, ok := to.(interface{ CloseWrite() error }); ok {
			_ = hc.CloseWrite()
		}
		done <- struct{}{}
	}

	go pipe(u, c)
	go pipe(c, u)
	<-done
	<-done
}

// track remembers c for close; false (c closed) once the links are closed.
func (ls *links) track(c net.Conn) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()

	if ls.closed {
		c.Close() //nolint:errcheck

		return false
	}

	ls.conns[c] = struct{}{}

	return true
}

func (ls *links) untrack(c net.Conn) {
	ls.mu.Lock()
	delete(ls.conns, c)
	ls.mu.Unlock()

	c.Close() //nolint:errcheck
}

// warn logs "name: err" unless it was logged less than a second ago.
func (ls *links) warn(name string, err error) {
	msg := fmt.Sprintf("%s: %v", name, err)

	ls.mu.Lock()
	last, seen := ls.logged[msg]
	now := time.Now()
	quiet := seen && now.Sub(last) < time.Second
	if !quiet {
		ls.logged[msg] = now
	}
	ls.mu.Unlock()

	if !quiet {
		log.Print(msg)
	}
}

// close closes every listener and relayed connection.
func (ls *links) close() {
	ls.mu.Lock()
	defer ls.mu.Unlock()

	ls.closed = true

	for _, l := range ls.listeners {
		l.Close() //nolint:errcheck
	}

	for c := range ls.conns {
		c.Close() //nolint:errcheck
	}
}

// dialIn is a dial to addr in the simulator's namespace.
func dialIn(addr string) func() (net.Conn, error) {
	return func() (net.Conn, error) { return net.DialTimeout("tcp", addr, linkTimeout) }
}

// serveEndpoint serves apid's endpoint on the host (hostGRPC) and at the same address in the
// namespace, both relayed to apid at apidAddr.
func (ls *links) serveEndpoint(hostGRPC net.Listener, apidAddr string) error {
	inside, err := listenInNetns(hostGRPC.Addr().String())
	if err != nil {
		return fmt.Errorf("apid's endpoint in the namespace: %w", err)
	}

	ls.serve("apid's endpoint (host)", hostGRPC, dialIn(apidAddr))
	ls.serve("apid's endpoint (namespace)", inside, dialIn(apidAddr))

	return nil
}

// ---------------------------------------------------------------------------------------------
// The control surface's routes (control.go)

// linkAddr is the "addr" of a forward or expose request: IP:port, the port not 0.
func (s *sim) linkAddr(r *http.Request, what string) (string, error) {
	if s.links == nil {
		return "", badRequest("%s: --apid mode only (without it the simulator runs in the host's network namespace)", what)
	}

	req, err := decode[struct {
		Addr string `json:"addr"`
	}](r)
	if err != nil {
		return "", err
	}

	ap, err := netip.ParseAddrPort(req.Addr)
	if err != nil || ap.Port() == 0 {
		return "", badRequest("%s: addr %q: expected IP:port with a port other than 0", what, req.Addr)
	}

	return ap.String(), nil
}

// linkError is the answer for a listener that could not be opened: 409 when the address is taken.
func linkError(what, addr string, err error) error {
	msg := fmt.Sprintf("%s %s: %v", what, addr, err)
	if errors.Is(err, syscall.EADDRINUSE) {
		return &httpError{http.StatusConflict, msg}
	}

	return errors.New(msg)
}

// forwardIntoNetns (POST /netns/forwards): A in the namespace, relayed to A on the host.
func (s *sim) forwardIntoNetns(r *http.Request) (any, error) {
	addr, err := s.linkAddr(r, "forward")
	if err != nil {
		return nil, err
	}

	l, err := listenInNetns(addr)
	if err != nil {
		return nil, linkError("forward", addr, err)
	}

	s.links.serve("forward "+addr, l, func() (net.Conn, error) { return s.links.host.dial(addr) })

	return map[string]string{"addr": addr}, nil
}

// exposeFromNetns (POST /netns/exposes): A on the host, relayed to A in the namespace.
func (s *sim) exposeFromNetns(r *http.Request) (any, error) {
	addr, err := s.linkAddr(r, "expose")
	if err != nil {
		return nil, err
	}

	l, err := s.links.host.listen(addr)
	if err != nil {
		return nil, linkError("expose", addr, err)
	}

	s.links.serve("expose "+addr, l, dialIn(addr))

	return map[string]string{"addr": addr}, nil
}
