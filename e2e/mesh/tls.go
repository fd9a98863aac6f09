package mesh

import (
	"crypto/tls"
	"fmt"
	"net"

	certutil "k8s.io/client-go/util/cert"
)

// servingCert is a self-signed serving certificate and the bundle a client
// needs to trust it.
type servingCert struct {
	tls      tls.Certificate
	caBundle []byte
}

// newServingCert makes a certificate for the given loopback IPs, signed by a
// fresh CA. The returned bundle holds both, which is what the apiserver
// wants in a webhook's caBundle.
func newServingCert(ips ...net.IP) (*servingCert, error) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", ips, nil)
	if err != nil {
		return nil, fmt.Errorf("generate serving certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load serving certificate: %w", err)
	}
	return &servingCert{tls: pair, caBundle: certPEM}, nil
}
