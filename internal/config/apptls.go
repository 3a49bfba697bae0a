package config

import (
	"crypto/tls"
	"errors"
)

// AppTLS is an app's own certificate, which a TLS listener serves for the
// app's hosts (by SNI) instead of its own. In the config file it names
// PEM files (cert, key) or holds the PEM (cert_pem, key_pem); in a catalog
// it holds the PEM, which `levee catalog import` reads from the files.
type AppTLS struct {
	Cert    string `yaml:"cert"`
	Key     string `yaml:"key"`
	CertPEM string `yaml:"cert_pem"`
	KeyPEM  string `yaml:"key_pem"`
	// Mode is the scalar form: AppTLSACME or AppTLSListener ("" for a
	// certificate of the app's own); see acme.go.
	Mode string `yaml:"-"`

	// pair is the certificate as validation loaded it; err why it could
	// not be (a stored app's, which does not refuse the app: only its
	// hosts' handshakes fail).
	pair *tls.Certificate
	err  error
}

// Certificate is the app's certificate as validation loaded it, or why it
// could not be.
func (t *AppTLS) Certificate() (*tls.Certificate, error) {
	if t.Mode != "" { // acme or listener: none of the app's own
		return nil, nil
	}
	if t.pair == nil && t.err == nil {
		return nil, errors.New("config: the app's certificate was not loaded")
	}
	return t.pair, t.err
}

// Files reports whether the certificate is named by files, not held.
func (t *AppTLS) Files() bool { return t.Cert != "" || t.Key != "" }

// checkAppTLS loads an app's certificate: from its files through rd (nil:
// files are not allowed, as in a catalog), or from its PEM. A problem is
// added to errs when strict, else kept in t for the handshake to report.
func checkAppTLS(errs *Errors, rd *reader, path string, t *AppTLS, strict bool) {
	if t.Mode != "" {
		return
	}
	var cert, key []byte
	switch {
	case t.Files() && (t.CertPEM != "" || t.KeyPEM != ""):
		errs.add(path, "either cert and key (files) or cert_pem and key_pem, not both")
		return
	case t.Files() && rd == nil:
		errs.add(path, "a stored app holds its certificate as cert_pem and key_pem "+
			"(levee catalog import reads the cert and key files into them)")
		return
	case t.Files():
		if t.Cert == "" || t.Key == "" {
			errs.add(path, "both cert and key are required")
			return
		}
		var err error
		if cert, err = rd.read(t.Cert, MaxPEMBytes); err != nil {
			errs.add(path+".cert", "%v", err)
			return
		}
		if key, err = rd.read(t.Key, MaxPEMBytes); err != nil {
			errs.add(path+".key", "%v", err)
			return
		}
	default:
		if t.CertPEM == "" || t.KeyPEM == "" {
			errs.add(path, "both cert_pem and key_pem are required (or cert and key files)")
			return
		}
		cert, key = []byte(t.CertPEM), []byte(t.KeyPEM)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		if strict {
			errs.add(path, "cannot load certificate: %v", err)
			return
		}
		t.err = err
		return
	}
	t.pair = &pair
}
