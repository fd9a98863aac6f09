package mesh

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// PluggedCA is a root CA plugged into istiod, as Istio's "plug in CA
// certificates" task does with the cacerts Secret mounted at
// ./etc/cacerts: clusters of one multi-primary mesh share it, so that
// their workloads trust each other. Without it each cluster's istiod
// makes its own self-signed root (istio-ca-secret).
type PluggedCA struct {
	// CertPEM is the root certificate; it signs istiod's certificates
	// itself, so it is also the chain.
	CertPEM, KeyPEM []byte
}

// NewPluggedCA makes a self-signed root CA for org.
func NewPluggedCA(org string) (*PluggedCA, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{org}, CommonName: "Root CA " + org},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &PluggedCA{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
	}, nil
}

// plugInto writes the CA where istiod, run in dir, looks for plugged-in
// certificates (its ROOT_CA_DIR, ./etc/cacerts by default).
func (ca *PluggedCA) plugInto(dir string) error {
	certs := filepath.Join(dir, "etc", "cacerts")
	if err := os.MkdirAll(certs, 0o700); err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"ca-cert.pem": ca.CertPEM, "ca-key.pem": ca.KeyPEM, "root-cert.pem": ca.CertPEM, "cert-chain.pem": ca.CertPEM,
	} {
		if err := os.WriteFile(filepath.Join(certs, name), data, 0o600); err != nil {
			return fmt.Errorf("plug in the CA: %w", err)
		}
	}
	return nil
}
