package acme

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/leveeproxy/levee/internal/catalog"
)

// CertInfo is one stored certificate as levee certs and the admin API
// show it.
type CertInfo struct {
	Name        string    `json:"name"`
	Issuer      string    `json:"issuer"`
	NotBefore   time.Time `json:"not_before"`
	NotAfter    time.Time `json:"not_after"`
	NextRenewal time.Time `json:"next_renewal"`
	// LastError is the name's last failed order ("" since a success).
	LastError string    `json:"last_error,omitempty"`
	ErrorAt   time.Time `json:"error_at,omitzero"`
}

// A certificate is renewed at two thirds of its life at the latest, each
// name at its own point of the twelfth of its life before that: 10,000
// certificates issued one day renew over a week (of 90-day ones), not in
// one hour.
const (
	renewalRatio  = 2.0 / 3
	renewalSpread = 1.0 / 12
)

// renewalAt is when leaf is due for renewal: a point, fixed by its name,
// in [2/3 - 1/12, 2/3) of its life.
func renewalAt(leaf *x509.Certificate) time.Time {
	h := fnv.New64a()
	for _, n := range leaf.DNSNames {
		h.Write([]byte(n))
	}
	u := float64(h.Sum64()>>11) / (1 << 53) // [0, 1)
	life := leaf.NotAfter.Sub(leaf.NotBefore)
	return leaf.NotBefore.Add(time.Duration(float64(life) * (renewalRatio - renewalSpread*u)))
}

// statusKey holds a name's last failure in the store, for every instance
// and for levee certs.
func statusKey(name string) string { return "levee/status/" + certmagic.StorageKeys.Safe(name) }

type status struct {
	Error string    `json:"error"`
	At    time.Time `json:"at"`
}

// DefaultListCerts bounds a listing of the store's certificates.
const DefaultListCerts = 1000

// Certs lists up to limit certificates of the store (≤ 0:
// DefaultListCerts), soonest expiry first.
func Certs(ctx context.Context, st *Storage, limit int) ([]CertInfo, error) {
	if limit <= 0 {
		limit = DefaultListCerts
	}
	keys, err := st.List(ctx, "certificates", true)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []CertInfo
	for _, k := range keys {
		if !strings.HasSuffix(k, ".crt") {
			continue
		}
		if len(out) == limit {
			break
		}
		ci, err := certAt(ctx, st, k)
		if err != nil {
			return nil, err
		}
		out = append(out, ci)
	}
	slices.SortFunc(out, func(a, b CertInfo) int { return a.NotAfter.Compare(b.NotAfter) })
	return out, nil
}

// Cert is name's stored certificate; fs.ErrNotExist when there is none.
func Cert(ctx context.Context, st *Storage, name string) (CertInfo, error) {
	name = catalog.CanonicalHost(name)
	safe := certmagic.StorageKeys.Safe(name)
	issuers, err := st.List(ctx, "certificates", false)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return CertInfo{}, err
	}
	for _, iss := range issuers {
		k := path.Join(iss, safe, safe+".crt")
		if st.Exists(ctx, k) {
			return certAt(ctx, st, k)
		}
	}
	// No certificate: perhaps a failure to show.
	sb, err := st.Load(ctx, statusKey(name))
	if err != nil {
		return CertInfo{}, err
	}
	var s status
	if err := json.Unmarshal(sb, &s); err != nil {
		return CertInfo{}, fmt.Errorf("acme: %s: %w", statusKey(name), err)
	}
	return CertInfo{Name: name, LastError: s.Error, ErrorAt: s.At}, nil
}

func certAt(ctx context.Context, st *Storage, key string) (CertInfo, error) {
	b, err := st.Load(ctx, key)
	if err != nil {
		return CertInfo{}, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return CertInfo{}, fmt.Errorf("acme: %s holds no PEM", key)
	}
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return CertInfo{}, fmt.Errorf("acme: %s: %w", key, err)
	}
	ci := CertInfo{Issuer: leaf.Issuer.CommonName, NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter,
		NextRenewal: renewalAt(leaf)}
	if len(leaf.DNSNames) > 0 {
		ci.Name = leaf.DNSNames[0]
	}
	if sb, err := st.Load(ctx, statusKey(ci.Name)); err == nil {
		var s status
		if json.Unmarshal(sb, &s) == nil {
			ci.LastError, ci.ErrorAt = s.Error, s.At
		}
	}
	return ci, nil
}

// saveStatus keeps name's last failure in the store (err nil: forgets it).
func saveStatus(ctx context.Context, st *Storage, name string, err error, now time.Time) error {
	if err == nil {
		return st.Delete(ctx, statusKey(name))
	}
	b, _ := json.Marshal(status{Error: err.Error(), At: now})
	return st.Store(ctx, statusKey(name), b)
}
