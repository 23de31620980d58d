// Command ociregistry is the release test's OCI registry: go-containerregistry's pkg/registry (the
// in-memory registry its cmd/registry serves) on an ephemeral port of 127.0.0.1, nothing else.
// cmd/registry itself listens on "localhost:<port>" and answers 1% of requests with a random Warning
// header; this main binds the loopback address explicitly and serves the registry unchanged.
//
// It prints the address it listens on ("127.0.0.1:<port>") as its first stdout line, logs each
// request to stderr, and exits when its stdin closes, so a test that dies leaves no registry behind.
package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatalf("Cannot listen on 127.0.0.1: %v", err)
	}
	fmt.Println(listener.Addr().String())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	s := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Handler:           registry.New(registry.Logger(log.New(os.Stderr, "", log.LstdFlags))),
	}
	log.Fatal(s.Serve(listener))
}
