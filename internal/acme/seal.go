package acme

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

// sealer encrypts every value Storage writes with AES-256-GCM, binding
// each to its key (the additional data), so a value copied to another
// key does not open either.
type sealer struct{ aead cipher.AEAD }

// sealVersion starts every sealed value: a later format can be told apart.
const sealVersion = 1

// errUnsealed is a value that does not open with the key file's key:
// written with another key, or tampered with.
var errUnsealed = errors.New("acme: a stored value does not decrypt with tls.acme.key_file's key")

func newSealer(key []byte) (*sealer, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("acme: key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("acme: key: %w", err)
	}
	return &sealer{aead: aead}, nil
}

func (s *sealer) seal(key string, plain []byte) []byte {
	out := make([]byte, 1+s.aead.NonceSize(), 1+s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	out[0] = sealVersion
	rand.Read(out[1:]) // crypto/rand.Read never fails (Go 1.24+)
	return s.aead.Seal(out, out[1:], plain, []byte(key))
}

func (s *sealer) open(key string, sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < 1+n || sealed[0] != sealVersion {
		return nil, errUnsealed
	}
	plain, err := s.aead.Open(nil, sealed[1:1+n], sealed[1+n:], []byte(key))
	if err != nil {
		return nil, errUnsealed
	}
	return plain, nil
}
