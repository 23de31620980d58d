package main

// --apid mode: the simulator's own network namespace. The process started by the test opens the
// endpoint the CCM dials and the control surface in the host's namespace, then runs the simulator
// again in a new network namespace (CLONE_NEWNET; with a user namespace when not root) with those
// two listeners on fds 3 and 4, and on fd 5 its end of the host link, on which the process left on
// the host makes sockets in the host's namespace for it (netnslinks.go). There loopback is up and
// every IPv4 and IPv6 address is local to it, so Talos' apid dialling <ip>:50000 reaches the
// listener the simulator opened for that machine, or is refused ("connection refused") for an
// unknown or stopped machine, whatever the address; nothing of it is visible on the host, so test
// beds never collide on port 50000.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/jsimonetti/rtnetlink/v2"
	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// namespaceError names what --apid mode needs when the namespace cannot be made or set up.
func namespaceError(what string, err error) error {
	return fmt.Errorf("--apid: %s: %w (the simulator runs Talos' apid in a network namespace of its own: "+
		"run it as root, or allow unprivileged user namespaces: sysctl user.max_user_namespaces > 0, "+
		"kernel.unprivileged_userns_clone=1 where it exists, and on Ubuntu 23.10 and later "+
		"kernel.apparmor_restrict_unprivileged_userns=0)", what, err)
}

// runParent opens the host-side listeners and runs the simulator again in a new network namespace,
// then answers its requests on the host link; it ends with the child's exit code. The child dies
// with it (Pdeathsig), and apid with the child.
func runParent(o options) error {
	grpcLis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}

	ctlLis, err := net.Listen("tcp", o.control)
	if err != nil {
		return err
	}

	files := make([]*os.File, 3)
	for i, l := range []net.Listener{grpcLis, ctlLis} {
		if files[i], err = l.(*net.TCPListener).File(); err != nil {
			return err
		}
	}

	link, childLink, err := seqpacketPair()
	if err != nil {
		return fmt.Errorf("host link: %w", err)
	}

	files[2] = childLink

	args := append([]string{}, os.Args[1:]...)
	args = append(args, "--in-netns", "--listen="+grpcLis.Addr().String(), "--control="+ctlLis.Addr().String())

	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}

	if os.Geteuid() != 0 {
		// a user namespace mapping this user to root gives the child CAP_NET_ADMIN (loopback and
		// routes), CAP_NET_BIND_SERVICE (the DNS stub) and CAP_SYS_CHROOT (apid's root) there
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}

	err = cmd.Start()
	childLink.Close() //nolint:errcheck // the child's copy is what keeps the link open

	if err != nil {
		return namespaceError("cannot start the simulator in a new network namespace", err)
	}

	go serveHostLink(link)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)

	go func() {
		for s := range sig {
			_ = cmd.Process.Signal(s)
		}
	}()

	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() > 0 {
			os.Exit(ee.ExitCode())
		}

		return err
	}

	return nil
}

// setupLoopback brings lo up and makes every address local to it (`local 0.0.0.0/0 dev lo` and
// `local ::/0 dev lo` in the local table).
func setupLoopback() error {
	conn, err := rtnetlink.Dial(nil)
	if err != nil {
		return err
	}
	defer conn.Close() //nolint:errcheck

	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return err
	}

	up := &rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Index: uint32(lo.Index), Flags: unix.IFF_UP, Change: unix.IFF_UP}
	if err := conn.Link.Set(up); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}

	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		err := conn.Route.Replace(&rtnetlink.RouteMessage{
			Family:     family,
			Table:      unix.RT_TABLE_LOCAL,
			Protocol:   unix.RTPROT_STATIC,
			Scope:      unix.RT_SCOPE_HOST,
			Type:       unix.RTN_LOCAL,
			Attributes: rtnetlink.RouteAttributes{OutIface: uint32(lo.Index), Table: unix.RT_TABLE_LOCAL},
		})
		if err != nil {
			return fmt.Errorf("local route (address family %d): %w", family, err)
		}
	}

	return nil
}

// serveNXDOMAIN answers every DNS query on 127.0.0.1:53 and [::1]:53 (UDP) with NXDOMAIN. apid's
// resolver, chrooted without /etc/resolv.conf, asks there when a `node` is a name rather than an
// address; a node whose resolver knows no such name answers "produced zero addresses", where no
// server at all would give "connection refused" on port 53.
func serveNXDOMAIN() error {
	for _, addr := range []string{"127.0.0.1:53", "[::1]:53"} {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return fmt.Errorf("DNS stub: %w", err)
		}

		go answerNXDOMAIN(pc)
	}

	return nil
}

func answerNXDOMAIN(pc net.PacketConn) {
	buf := make([]byte, 1500)

	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}

		if reply, err := nxdomain(buf[:n]); err == nil {
			_, _ = pc.WriteTo(reply, from)
		}
	}
}

// nxdomain is the NXDOMAIN answer to a query, its question echoed.
func nxdomain(query []byte) ([]byte, error) {
	var p dnsmessage.Parser

	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}

	q, err := p.Question()
	if err != nil {
		return nil, err
	}

	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID:                 h.ID,
		Response:           true,
		OpCode:             h.OpCode,
		RecursionDesired:   h.RecursionDesired,
		RecursionAvailable: true,
		RCode:              dnsmessage.RCodeNameError,
	})

	if err := b.StartQuestions(); err != nil {
		return nil, err
	}

	if err := b.Question(q); err != nil {
		return nil, err
	}

	return b.Finish()
}
