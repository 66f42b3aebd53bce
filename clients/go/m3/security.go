package m3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// TLSConfig says how Dial connects with TLS. Each PEM is the file's contents.
type TLSConfig struct {
	// RootCA is the CA that signed the server's certificate; nil: the system roots.
	RootCA []byte
	// ClientCert and ClientKey are this client's certificate (mutual TLS); both or neither.
	ClientCert, ClientKey []byte
	// ServerName is the name the server's certificate is verified against,
	// when it differs from the target's host (e.g. a target by IP address).
	ServerName string
}

// WithTLS is the Dial option for a TLS connection described by cfg (it
// replaces Dial's plaintext default).
func WithTLS(cfg TLSConfig) (grpc.DialOption, error) {
	config := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
	if cfg.RootCA != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.RootCA) {
			return nil, errors.New("m3: RootCA holds no PEM certificate")
		}
		config.RootCAs = pool
	}
	if (cfg.ClientCert == nil) != (cfg.ClientKey == nil) {
		return nil, errors.New("m3: ClientCert and ClientKey go together (mutual TLS)")
	}
	if cfg.ClientCert != nil {
		pair, err := tls.X509KeyPair(cfg.ClientCert, cfg.ClientKey)
		if err != nil {
			return nil, err
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(config)), nil
}

// WithToken is the Dial option that sends token with every call as
// `authorization: Bearer <token>`. It is also sent over a plaintext
// connection (a service on loopback); beyond loopback use it with WithTLS.
// For metadata of one call, use metadata.AppendToOutgoingContext on its context.
func WithToken(token string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(bearerToken(token))
}

type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return false }
