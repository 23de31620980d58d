// h2peer is the hostile HTTP/2 server of tests/e2e/h2-hostile.test.ts: a TLS listener (mutual TLS,
// ALPN h2) whose frames are written by golang.org/x/net/http2's Framer and hpack.Encoder, so the
// frame and header encoding of each attack is an outside implementation's, not the project's own.
// One scenario per process (-scenario, sized by -n); every connection plays it. It reports on
// stdout, one JSON object a line: "listening" (the port), then per connection what the client sent
// ("headers", "rst", "goaway", "closed") and how the scenario ended ("sent": frames written and
// the write error that stopped it, if any). It exits when its stdin closes.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
)

var (
	out   = json.NewEncoder(os.Stdout)
	outMu sync.Mutex
)

// report writes one event line.
func report(fields map[string]any) {
	outMu.Lock()
	defer outMu.Unlock()
	_ = out.Encode(fields)
}

type options struct {
	scenario string
	n        int
}

func main() {
	certFile := flag.String("cert", "", "server certificate (PEM)")
	keyFile := flag.String("key", "", "server key (PEM)")
	caFile := flag.String("ca", "", "CA that signs client certificates (PEM)")
	scenario := flag.String("scenario", "", "what every connection plays (see scenarios)")
	n := flag.Int("n", 1000, "size of the flood")
	flag.Parse()
	if _, ok := scenarios[*scenario]; !ok {
		fmt.Fprintf(os.Stderr, "h2peer: unknown scenario %q\n", *scenario)
		os.Exit(2)
	}
	cfg, err := tlsConfig(*certFile, *keyFile, *caFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "h2peer: %v\n", err)
		os.Exit(1)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "h2peer: %v\n", err)
		os.Exit(1)
	}
	// The test holds our stdin open: when it goes (the test ended or was killed), so do we.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	report(map[string]any{"event": "listening", "port": ln.Addr().(*net.TCPAddr).Port})
	opts := options{scenario: *scenario, n: *n}
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go serve(c.(*tls.Conn), opts)
	}
}

func tlsConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		NextProtos:   []string{"h2"},
		MinVersion:   tls.VersionTLS12,
	}, nil
}
