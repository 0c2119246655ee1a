package rundb

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"sync"
)

// KeyedHash computes HMAC-SHA256 sums of strings under one key, for the maps of credentials
// that must hold no password (the credential cache here, the API's known-good logins). Its
// states are reused from sum to sum: a sum is computed on every API call, and a fresh HMAC
// allocates two SHA-256 states. Safe for concurrent use.
type KeyedHash struct {
	key  []byte
	macs sync.Pool // *keyedMAC
}

// keyedMAC is an HMAC state with a buffer for its input and its sum: a hash.Hash takes bytes
// through an interface, so strings converted for it, and a sum's array, were allocated on
// every call.
type keyedMAC struct {
	h   hash.Hash
	buf []byte
}

// NewKeyedHash returns a KeyedHash under key.
func NewKeyedHash(key []byte) *KeyedHash { return &KeyedHash{key: key} }

// Sum is the HMAC of parts, each followed by a zero byte, so that no two lists of parts give
// the same input. Nothing of the parts stays in memory after it returns.
func (k *KeyedHash) Sum(parts ...string) [32]byte {
	m, _ := k.macs.Get().(*keyedMAC)
	if m == nil {
		m = &keyedMAC{h: hmac.New(sha256.New, k.key)}
	}
	defer func() { m.h.Reset(); k.macs.Put(m) }()
	b := m.buf[:0]
	for _, part := range parts {
		b = append(append(b, part...), 0)
	}
	m.h.Write(b)
	clear(b) // the pool keeps no password
	m.buf = m.h.Sum(b[:0])
	var out [32]byte
	copy(out[:], m.buf)
	return out
}
