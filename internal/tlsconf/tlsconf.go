// Package tlsconf builds the TLS configurations of Plexus servers and clients
// from PEM files.
//
// Certificates and keys are re-read when their files change, so a rotation
// by cert-manager or a similar tool takes effect on the next handshake
// without a restart. CA bundles are read once: rotating a CA is rare and
// deserves a rolling restart.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Server returns the TLS configuration of a server presenting certFile and
// keyFile. When clientCAFile is not empty, clients must present a
// certificate that chains to one of its CAs (mutual TLS).
func Server(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	kp, err := newKeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return kp.get()
		},
	}
	if clientCAFile != "" {
		pool, err := LoadCAs(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Client returns the TLS configuration of a client that verifies servers
// against caFile (the system roots when empty) and, when certFile and
// keyFile are given, presents that certificate for mutual TLS.
func Client(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := LoadCAs(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("client certificate and key: give both or neither")
	}
	if certFile != "" {
		kp, err := newKeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return kp.get()
		}
	}
	return cfg, nil
}

// LoadCAs reads a PEM bundle of CA certificates.
func LoadCAs(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", file)
	}
	return pool, nil
}

// keyPair caches a certificate and reloads it when either file's
// modification time changes. A failed reload keeps serving the last good
// pair: a half-written file during rotation must not break handshakes.
type keyPair struct {
	certFile, keyFile string

	mu        sync.Mutex
	cert      *tls.Certificate
	certMod   time.Time
	keyMod    time.Time
	lastCheck time.Time
}

// recheckEvery bounds how often a handshake looks at the files (a variable
// so tests need not wait).
var recheckEvery = time.Second

func newKeyPair(certFile, keyFile string) (*keyPair, error) {
	kp := &keyPair{certFile: certFile, keyFile: keyFile}
	if err := kp.load(); err != nil {
		return nil, err
	}
	return kp, nil
}

func (kp *keyPair) load() error {
	cm, km, err := kp.modTimes()
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(kp.certFile, kp.keyFile)
	if err != nil {
		return fmt.Errorf("load key pair %s: %w", kp.certFile, err)
	}
	kp.cert, kp.certMod, kp.keyMod = &cert, cm, km
	return nil
}

func (kp *keyPair) modTimes() (time.Time, time.Time, error) {
	ci, err := os.Stat(kp.certFile)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("certificate: %w", err)
	}
	ki, err := os.Stat(kp.keyFile)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("key: %w", err)
	}
	return ci.ModTime(), ki.ModTime(), nil
}

func (kp *keyPair) get() (*tls.Certificate, error) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if now := time.Now(); now.Sub(kp.lastCheck) >= recheckEvery {
		kp.lastCheck = now
		if cm, km, err := kp.modTimes(); err == nil && (!cm.Equal(kp.certMod) || !km.Equal(kp.keyMod)) {
			_ = kp.load() // keep the last good pair on failure
		}
	}
	return kp.cert, nil
}
