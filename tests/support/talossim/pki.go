package main

// Certificates made the way Talos makes them: the OS CA of machinery's secrets bundle (Ed25519,
// O=talos), apid's server certificate as machined's API certificate controller issues it, and
// talosconfig client certificates as `talosctl gen config` issues them (roles in Subject O).

import (
	stdx509 "crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"go.yaml.in/yaml/v4"
)

type pki struct {
	ca     *x509.PEMEncodedCertificateAndKey
	server *x509.PEMEncodedCertificateAndKey
}

// loadOrMakePKI reads dir/{ca,server}.{crt,key}, making and saving them when absent, so that a
// restarted simulator keeps its certificates.
func loadOrMakePKI(dir string) (*pki, error) {
	if dir != "" {
		p, err := loadPKI(dir)
		if err == nil {
			return p, nil
		}

		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}

	p, err := makePKI()
	if err != nil {
		return nil, err
	}

	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}

		for name, b := range map[string][]byte{
			"ca.crt": p.ca.Crt, "ca.key": p.ca.Key, "server.crt": p.server.Crt, "server.key": p.server.Key,
		} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				return nil, err
			}
		}
	}

	return p, nil
}

func loadPKI(dir string) (*pki, error) {
	files := make([][]byte, 4)

	for i, name := range []string{"ca.crt", "ca.key", "server.crt", "server.key"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}

		files[i] = b
	}

	return &pki{
		ca:     &x509.PEMEncodedCertificateAndKey{Crt: files[0], Key: files[1]},
		server: &x509.PEMEncodedCertificateAndKey{Crt: files[2], Key: files[3]},
	}, nil
}

func makePKI() (*pki, error) {
	now := time.Now()

	ca, err := secrets.NewTalosCA(now)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}

	caPEM := x509.NewCertificateAndKeyFromCertificateAuthority(ca)

	server, err := x509.NewKeyPair(ca,
		x509.IPAddresses([]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}),
		x509.DNSNames([]string{"localhost", "talos"}),
		x509.CommonName("talossim"),
		x509.NotAfter(now.Add(x509.DefaultCertificateValidityDuration)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
	)
	if err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}

	return &pki{ca: caPEM, server: x509.NewCertificateAndKeyFromKeyPair(server)}, nil
}

// talosconfig renders a talosconfig with one context whose client certificate has these roles.
func (p *pki) talosconfig(endpoint string, roles []string, ttl time.Duration) ([]byte, error) {
	set, unknown := role.Parse(roles)
	// Unknown roles are kept in the certificate, as a hand-made certificate could carry them.
	names := append(set.Strings(), unknown...)

	opts := []x509.Option{
		x509.Organization(names...),
		x509.NotAfter(time.Now().Add(ttl)),
		x509.NotBefore(time.Now().Add(-time.Minute)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}),
	}

	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(p.ca)
	if err != nil {
		return nil, err
	}

	kp, err := x509.NewKeyPair(ca, opts...)
	if err != nil {
		return nil, err
	}

	client := x509.NewCertificateAndKeyFromKeyPair(kp)
	b64 := base64.StdEncoding.EncodeToString

	return yaml.Marshal(map[string]any{
		"context": "talossim",
		"contexts": map[string]any{
			"talossim": map[string]any{
				"endpoints": []string{endpoint},
				"ca":        b64(p.ca.Crt),
				"crt":       b64(client.Crt),
				"key":       b64(client.Key),
			},
		},
	})
}

// writeTalosconfig writes a talosconfig atomically.
func (p *pki) writeTalosconfig(path, endpoint string, roles []string, ttl time.Duration) error {
	b, err := p.talosconfig(endpoint, roles, ttl)
	if err != nil {
		return err
	}

	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}

	return os.Rename(tmp, path)
}

// issue makes a certificate signed by the CA, valid from a minute ago for Talos' default duration,
// for digital signatures, with opts (names, Subject, extended key usage). Valid only from the moment
// it was made, a machine's certificate issued at a Bun client's first direct dial was once refused
// by that client as "not yet valid" (CI); the backdating is what Talos' certificates have anyway,
// being made long before a client meets them.
func (p *pki) issue(opts ...x509.Option) (*x509.PEMEncodedCertificateAndKey, error) {
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(p.ca)
	if err != nil {
		return nil, err
	}

	opts = append([]x509.Option{
		x509.NotBefore(time.Now().Add(-time.Minute)),
		x509.NotAfter(time.Now().Add(x509.DefaultCertificateValidityDuration)),
		x509.KeyUsage(stdx509.KeyUsageDigitalSignature),
	}, opts...)

	kp, err := x509.NewKeyPair(ca, opts...)
	if err != nil {
		return nil, err
	}

	return x509.NewCertificateAndKeyFromKeyPair(kp), nil
}
